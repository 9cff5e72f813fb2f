/*
 * route.c - the replicas and the choice between them (see pc_route.h). Owns
 * the replica table, built once from the configuration and never resized,
 * and the per-replica atomics (in flight, counters, health). Nothing here
 * blocks or locks: a pick reads every replica's atomics and chooses.
 *
 *   route_pick ─▶ candidates = not excluded, not down (else: not excluded)
 *                   round-robin: next in turn ─┐
 *                   least-loaded: fewest in flight, ties in turn
 *              ─▶ in_flight++ ─────────────────┴─▶ call ─▶ route_end: in_flight--,
 *                                                   counters, down on connect error
 */
#include "pc_route.h"
#include "pc_conf.h"
#include "pc_log.h"

#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#define ROUTE_MAGIC 0x524f5554u /* "ROUT" */

_Static_assert((int)ROUTE_LEAST_LOADED == (int)ROUTING_LEAST_LOADED,
               "conf routing follows policies");

struct replica {
    struct route_replica pub;
    char *base_url;
    char *name;
    /* Atomics (any worker). */
    int64_t in_flight;
    uint64_t requests;
    uint64_t errors;
    uint64_t connect_errors;
    int64_t down_until_ms; /* monotonic; 0 = up */
    int64_t failed_ms;     /* monotonic time of the last connect failure */
};

struct route {
    unsigned magic;
    enum route_policy policy;
    int64_t fail_timeout_ms;
    uint64_t turn; /* round-robin position (atomic) */
    size_t n;
    struct replica *reps;
};

static const char *const policy_names[] = {"round-robin", "least-loaded"};

const char *route_policy_name(enum route_policy p)
{
    return p < ROUTE__COUNT ? policy_names[p] : "?";
}

/* Base URL without trailing '/', and "host:port" as the replica's name. */
static int replica_init(struct replica *rp, const char *url, char *err, size_t errlen)
{
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL;
    int rc = -1;
    if (u == NULL || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        snprintf(err, errlen, "upstream %s is not a valid URL", url);
        goto out;
    }
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    rp->base_url = pc_strndup(url, n);
    struct pc_buf name = PC_BUF_INIT;
    pc_buf_printf(&name, "%s:%s", host, port);
    rp->name = pc_buf_cstr(&name);
    rp->pub.base_url = rp->base_url;
    rp->pub.name = rp->name;
    rc = 0;
out:
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

struct route *route_create(const struct conf *c, char *err, size_t errlen)
{
    if (c->upstream.n == 0 || c->upstream.n > ROUTE_MAX_REPLICAS) {
        snprintf(err, errlen, "upstream: between 1 and %d replicas are supported (got %zu)",
                 ROUTE_MAX_REPLICAS, c->upstream.n);
        return NULL;
    }
    struct route *r = pc_calloc(1, sizeof(*r));
    r->magic = ROUTE_MAGIC;
    r->policy = (enum route_policy)c->routing;
    r->fail_timeout_ms = (int64_t)(c->upstream_fail_timeout * 1000.0);
    r->reps = pc_calloc(c->upstream.n, sizeof(*r->reps));
    for (size_t i = 0; i < c->upstream.n; i++, r->n++) {
        r->reps[i].pub.index = i;
        if (replica_init(&r->reps[i], c->upstream.v[i], err, errlen) < 0) {
            route_destroy(&r);
            return NULL;
        }
    }
    return r;
}

void route_destroy(struct route **rp)
{
    struct route *r = *rp;
    if (r == NULL)
        return;
    *rp = NULL;
    for (size_t i = 0; i < r->n; i++) {
        free(r->reps[i].base_url);
        free(r->reps[i].name);
    }
    free(r->reps);
    r->magic = 0;
    free(r);
}

size_t route_count(const struct route *r)
{
    return r->n;
}

const struct route_replica *route_replica(const struct route *r, size_t i)
{
    return i < r->n ? &r->reps[i].pub : NULL;
}

enum route_policy route_policy(const struct route *r)
{
    return r->policy;
}

/* ---- picking ---------------------------------------------------------------- */

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

static bool is_down(const struct replica *rp, int64_t now)
{
    return LOAD(&rp->down_until_ms) > now;
}

/* Candidates: not excluded and up; if that leaves none, not excluded at all. */
static uint64_t candidates(const struct route *r, uint64_t exclude, int64_t now)
{
    uint64_t all = 0, up = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (exclude & (UINT64_C(1) << i))
            continue;
        all |= UINT64_C(1) << i;
        if (!is_down(&r->reps[i], now))
            up |= UINT64_C(1) << i;
    }
    return up != 0 ? up : all;
}

/* All down: the one whose failure is oldest is the likeliest to be back. */
static size_t oldest_failure(const struct route *r, uint64_t cand)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < r->n; i++) {
        if (!(cand & (UINT64_C(1) << i)))
            continue;
        if (best == SIZE_MAX || LOAD(&r->reps[i].failed_ms) < LOAD(&r->reps[best].failed_ms))
            best = i;
    }
    return best;
}

/* The first candidate at or after position start, in turn. */
static size_t next_in_turn(const struct route *r, uint64_t cand, uint64_t start)
{
    for (size_t k = 0; k < r->n; k++) {
        size_t i = (size_t)((start + k) % r->n);
        if (cand & (UINT64_C(1) << i))
            return i;
    }
    return SIZE_MAX;
}

/* Fewest calls in flight; ties broken in turn, so equal replicas share the load. */
static size_t least_loaded(const struct route *r, uint64_t cand, uint64_t start)
{
    size_t best = SIZE_MAX;
    int64_t best_load = 0;
    for (size_t k = 0; k < r->n; k++) {
        size_t i = (size_t)((start + k) % r->n);
        if (!(cand & (UINT64_C(1) << i)))
            continue;
        int64_t load = LOAD(&r->reps[i].in_flight);
        if (best == SIZE_MAX || load < best_load) {
            best = i;
            best_load = load;
        }
    }
    return best;
}

const struct route_replica *route_pick(struct route *r, const struct route_query *q)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    int64_t now = (int64_t)pc_mono_ms();
    uint64_t cand = candidates(r, q != NULL ? q->exclude : 0, now);
    if (cand == 0)
        return NULL;
    uint64_t turn = __atomic_fetch_add(&r->turn, 1, __ATOMIC_RELAXED);
    bool all_down = true;
    for (size_t i = 0; i < r->n && all_down; i++)
        if ((cand & (UINT64_C(1) << i)) && !is_down(&r->reps[i], now))
            all_down = false;
    size_t i;
    if (all_down)
        i = oldest_failure(r, cand);
    else if (r->policy == ROUTE_LEAST_LOADED)
        i = least_loaded(r, cand, turn);
    else
        i = next_in_turn(r, cand, turn);
    struct replica *rp = &r->reps[i];
    __atomic_fetch_add(&rp->in_flight, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&rp->requests, 1, __ATOMIC_RELAXED);
    return &rp->pub;
}

void route_end(struct route *r, const struct route_replica *rep, enum route_result res)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    struct replica *rp = &r->reps[rep->index];
    __atomic_fetch_sub(&rp->in_flight, 1, __ATOMIC_RELAXED);
    if (res == ROUTE_OK) {
        if (LOAD(&rp->down_until_ms) != 0) {
            __atomic_store_n(&rp->down_until_ms, 0, __ATOMIC_RELAXED);
            log_notice("upstream %s answers again", rp->name);
        }
        return;
    }
    if (res == ROUTE_ABORTED)
        return;
    __atomic_fetch_add(&rp->errors, 1, __ATOMIC_RELAXED);
    if (res != ROUTE_CONNECT_ERR)
        return;
    __atomic_fetch_add(&rp->connect_errors, 1, __ATOMIC_RELAXED);
    if (r->fail_timeout_ms <= 0)
        return; /* upstream-fail-timeout 0: never left out */
    int64_t now = (int64_t)pc_mono_ms();
    __atomic_store_n(&rp->failed_ms, now, __ATOMIC_RELAXED);
    int64_t was =
        __atomic_exchange_n(&rp->down_until_ms, now + r->fail_timeout_ms, __ATOMIC_RELAXED);
    if (was <= now && r->n > 1)
        log_warn("upstream %s refused a connection: other replicas take its calls for %.1f s",
                 rp->name, (double)r->fail_timeout_ms / 1000.0);
}

/* ---- rendering -------------------------------------------------------------- */

void route_render_json(const struct route *r, struct pc_buf *out)
{
    int64_t now = (int64_t)pc_mono_ms();
    pc_buf_append_char(out, '[');
    for (size_t i = 0; i < r->n; i++) {
        const struct replica *rp = &r->reps[i];
        if (i > 0)
            pc_buf_append_char(out, ',');
        pc_buf_append_str(out, "{\"name\":");
        pc_buf_json_str(out, rp->name, strlen(rp->name));
        pc_buf_printf(out,
                      ",\"healthy\":%s,\"in_flight\":%lld,\"requests\":%llu,\"errors\":%llu,"
                      "\"connect_errors\":%llu}",
                      is_down(rp, now) ? "false" : "true", (long long)LOAD(&rp->in_flight),
                      (unsigned long long)LOAD(&rp->requests),
                      (unsigned long long)LOAD(&rp->errors),
                      (unsigned long long)LOAD(&rp->connect_errors));
    }
    pc_buf_append_char(out, ']');
}

/* One Prometheus family: HELP, TYPE, then one sample per replica. */
static void prom_family(const struct route *r, struct pc_buf *out, const char *name,
                        const char *type, const char *help, int which, int64_t now)
{
    pc_buf_printf(out, "# HELP promptcache_%s %s\n# TYPE promptcache_%s %s\n", name, help, name,
                  type);
    for (size_t i = 0; i < r->n; i++) {
        const struct replica *rp = &r->reps[i];
        long long v = 0;
        switch (which) {
        case 0:
            v = (long long)LOAD(&rp->requests);
            break;
        case 1:
            v = (long long)LOAD(&rp->in_flight);
            break;
        case 2:
            v = (long long)LOAD(&rp->errors);
            break;
        default:
            v = is_down(rp, now) ? 0 : 1;
            break;
        }
        pc_buf_printf(out, "promptcache_%s{upstream=\"%s\"} %lld\n", name, rp->name, v);
    }
}

void route_render_prometheus(const struct route *r, struct pc_buf *out)
{
    int64_t now = (int64_t)pc_mono_ms();
    prom_family(r, out, "replica_requests_total", "counter", "Calls sent to the replica", 0, now);
    prom_family(r, out, "replica_in_flight", "gauge", "Calls to the replica in progress", 1, now);
    prom_family(r, out, "replica_errors_total", "counter",
                "Calls to the replica that failed (connect, reset, timeout)", 2, now);
    prom_family(r, out, "replica_up", "gauge",
                "1 unless the replica refused a connection within upstream-fail-timeout", 3, now);
}
