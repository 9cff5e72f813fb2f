/*
 * pc_route.h - the upstream replicas and the choice between them. One
 * struct route per process, shared by every worker: the replicas of the
 * `upstream` list, their load (calls in flight), their health (passive: a
 * replica that refused a connection is left alone for upstream-fail-timeout)
 * and their counters for /stats and /metrics.
 *
 * Policies (`routing`): round-robin, least-loaded. A pick never refuses:
 * when every replica is marked down, the one that failed longest ago is
 * tried again.
 *
 * Thread safety: every function may be called from any worker; counters are
 * atomics, so the hot path takes no lock.
 */
#ifndef PC_ROUTE_H
#define PC_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"

struct conf;
struct route;

#define ROUTE_MAX_REPLICAS 64

enum route_policy { ROUTE_ROUND_ROBIN = 0, ROUTE_LEAST_LOADED, ROUTE__COUNT };

/* How a call to a replica ended (route_end). */
enum route_result {
    ROUTE_OK = 0,      /* an answer came (any status) */
    ROUTE_CONNECT_ERR, /* could not connect: nothing was sent; mark down, try another */
    ROUTE_ERR,         /* reset, timeout, cut off */
    ROUTE_ABORTED,     /* we stopped it (clients gone, shutdown) */
};

/* A replica as the rest of the proxy sees it (immutable after route_create). */
struct route_replica {
    const char *base_url; /* without a trailing '/' */
    const char *name;     /* host:port (X-Upstream, logs, metrics) */
    size_t index;
};

/* What a pick may take into account. */
struct route_query {
    uint64_t exclude; /* bit i set: do not pick replica i (already failed for this call) */
};

/* NULL with err set if an upstream URL is invalid or there are none. */
struct route *route_create(const struct conf *c, char *err, size_t errlen);
void route_destroy(struct route **r);

size_t route_count(const struct route *r);
const struct route_replica *route_replica(const struct route *r, size_t i);
enum route_policy route_policy(const struct route *r);
const char *route_policy_name(enum route_policy p);

/*
 * Choose a replica for a call and count it in flight (route_end must follow,
 * exactly once). Returns the replica, or NULL when q->exclude rules out
 * every replica.
 */
const struct route_replica *route_pick(struct route *r, const struct route_query *q);
void route_end(struct route *r, const struct route_replica *rep, enum route_result res);

/* Per-replica figures: a JSON array for /stats, Prometheus lines for /metrics. */
void route_render_json(const struct route *r, struct pc_buf *out);
void route_render_prometheus(const struct route *r, struct pc_buf *out);

#endif
