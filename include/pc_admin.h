/*
 * pc_admin.h - the proxy's own endpoints: /healthz, /readyz, /stats,
 * /metrics, /dashboard and the token-protected /admin/ API.
 */
#ifndef PC_ADMIN_H
#define PC_ADMIN_H

#include <stdbool.h>

struct httpd_req;
struct pc_buf;
struct worker;

/* Whether path is one of the proxy's own endpoints. */
bool admin_owns_path(const char *path);
/* Answer an own-endpoint request (finishes hr, possibly asynchronously). */
void admin_handle(struct worker *w, struct httpd_req *hr);
/* doc/metrics.md's tables (promptcache --metrics-doc): every series /stats and /metrics show. */
void admin_metrics_doc(struct pc_buf *out);

#endif
