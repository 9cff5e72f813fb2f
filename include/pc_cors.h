/*
 * pc_cors.h - cross-origin access for browser clients (cors-origins): which
 * origins may call the proxy, the preflight answer, and the headers every
 * answer to an allowed origin carries, hit or miss alike. Pure policy over
 * strings plus two helpers that add the headers to an httpd reply; owns
 * nothing.
 *
 *   OPTIONS + Origin + Access-Control-Request-Method   (preflight)
 *       origin allowed ─▶ 204, Allow-Origin/-Methods/-Headers, Max-Age
 *       otherwise      ─▶ 403 in the API's error shape
 *   any other request with an allowed Origin
 *       ─▶ Access-Control-Allow-Origin, Vary: Origin, Access-Control-Expose-Headers
 */
#ifndef PC_CORS_H
#define PC_CORS_H

#include <stdbool.h>
#include <stddef.h>

#include "pc_conf.h"
#include "pc_util.h"

struct httpd_req;

#define CORS_ALLOW_METHODS "GET, POST, PUT, PATCH, DELETE, OPTIONS"
/* What a browser client may read of an answer: the cache's headers, the request ids, and
 * what the SDKs read to decide on a retry. */
#define CORS_EXPOSE_HEADERS                                                                 \
    "X-Cache-Status, X-Cache-Match, X-Cache-Similarity, X-Cache-Verify, X-Cache-Key, Age, " \
    "X-Upstream, X-Promptcache-Request-Id, x-request-id, request-id, openai-model, "        \
    "openai-version, openai-processing-ms, retry-after, retry-after-ms, x-should-retry"
#define CORS_MAX_AGE "600" /* seconds a browser may reuse a preflight answer */

/*
 * The Access-Control-Allow-Origin value for a request's Origin: "*" when
 * origins lists "*", the origin itself when listed (case-insensitive), NULL
 * when it is not allowed, the request has no Origin, or the list is empty.
 */
const char *cors_allow_origin(const struct conf_list *origins, const char *origin);

/* A preflight: OPTIONS with Origin and Access-Control-Request-Method. */
bool cors_is_preflight(const char *method, const char *origin, const char *request_method);

/*
 * Whether browser code may send a request header: the credentials
 * (authorization, x-api-key, api-key), content-type, accept, cache-control,
 * pragma, idempotency-key, x-session-id, x-user-id, and the families
 * anthropic-*, openai-*, x-stainless-* (the SDKs) and x-cache-* (the
 * proxy's controls). Case-insensitive.
 */
bool cors_header_allowed(const char *name);

/*
 * Append to out the allowed names of a comma-separated header list
 * (Access-Control-Request-Headers), lower-cased and joined by ", ".
 * Returns how many names were refused (the browser then fails the
 * preflight). Names longer than 128 bytes are refused.
 */
size_t cors_filter_headers(const char *list, struct pc_buf *out);

/* Headers of an answer to an allowed origin (allow_origin from cors_allow_origin). */
void cors_add_headers(struct httpd_req *hr, const char *allow_origin);
/* The preflight answer's headers (the caller replies 204 after adding them). */
void cors_add_preflight(struct httpd_req *hr, const char *allow_origin,
                        const char *request_headers);

#endif
