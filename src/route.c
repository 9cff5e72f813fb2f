/*
 * route.c - the replicas and the choice between them (see pc_route.h). Owns
 * the replica table, built once from the configuration and never resized,
 * the per-replica atomics (in flight, counters, health) and the prefix index
 * (pindex). Nothing here blocks or takes a global lock: a pick reads every
 * replica's atomics, matches the chain in the sharded index, and the policy
 * chooses (src/route/, one file per line of src/route/policies.h):
 *
 *   route_pick ─▶ candidates = not excluded, not down (else: not excluded)
 *                   round-robin: next in turn ─────────────┐
 *                   least-loaded: fewest in flight, ties in turn
 *                   prefix: session's replica, else longest match;
 *                           overloaded? best match among the rest
 *              ─▶ in_flight++, chain recorded on it ───────┴─▶ call ─▶ route_end:
 *                   in_flight--, counters, down on connect error (route_unsent
 *                   first: the links the call added forgotten), silence or 5xx in a
 *                   row; route_usage:
 *                   predicted vs reported cached tokens
 */
#include "pc_route.h"
#include "pc_api.h"
#include "pc_chain.h"
#include "pc_conf.h"
#include "pc_kvsize.h"
#include "pc_log.h"
#include "pc_pindex.h"
#include "pc_stats.h"
#include "route/policies.h"
#include "route/route_int.h"

#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#define ROUTE_MAGIC 0x524f5554u /* "ROUT" */

_Static_assert(ROUTE_MAX_REPLICAS <= PINDEX_MAX_REPLICAS, "the index covers every replica");

/* prefix-capacity 0 without a model geometry: an 8B model on an 80 GB GPU. */
#define ROUTE_DEFAULT_CAPACITY 500000

#define POLICY_EXTERN(id, name) extern const struct route_policy_ops route_policy_##id;
#define POLICY_ENTRY(id, name)  &route_policy_##id,
ROUTE_POLICY_LIST(POLICY_EXTERN)

/* In the order of ROUTE_POLICY_LIST: the position is the value conf holds. */
static const struct route_policy_ops *const policies[] = {ROUTE_POLICY_LIST(POLICY_ENTRY)};

/* The policy at position i of ROUTE_POLICY_LIST (the first when out of range). */
static const struct route_policy_ops *policy_for(int i)
{
    if (i < 0 || (size_t)i >= PC_ARRAY_LEN(policies))
        return policies[0];
    return policies[i];
}

const char *route_policy_name(const struct route *r)
{
    return r->policy->name;
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

static bool name_taken(const struct route *r, size_t i)
{
    for (size_t j = 0; j < r->n; j++)
        if (j != i && strcmp(r->reps[j].name, r->reps[i].name) == 0)
            return true;
    return false;
}

/* Add suffix to the replica's name. */
static void rename_replica(struct replica *rp, const char *suffix)
{
    struct pc_buf name = PC_BUF_INIT;
    pc_buf_printf(&name, "%s%s", rp->name, suffix);
    free(rp->name);
    rp->name = pc_buf_cstr(&name);
    rp->pub.name = rp->name;
}

/*
 * Names tell replicas apart in /stats, /metrics labels, X-Upstream and the
 * shared prefix index: replicas behind one host:port (a gateway routing by
 * path) are named with their path, and a URL listed twice with its place.
 */
static void unique_names(struct route *r)
{
    bool clash[ROUTE_MAX_REPLICAS];
    for (size_t i = 0; i < r->n; i++)
        clash[i] = name_taken(r, i);
    for (size_t i = 0; i < r->n; i++) {
        const char *u = r->reps[i].base_url, *host = strstr(u, "://");
        const char *path = host != NULL ? strchr(host + 3, '/') : NULL;
        if (clash[i] && path != NULL)
            rename_replica(&r->reps[i], path);
    }
    for (size_t i = 0; i < r->n; i++)
        clash[i] = name_taken(r, i);
    for (size_t i = 0; i < r->n; i++) {
        char place[24];
        snprintf(place, sizeof(place), "#%zu", i + 1);
        if (clash[i])
            rename_replica(&r->reps[i], place);
    }
}

/* Each replica's KV capacity in tokens: prefix-capacity, else from the model's geometry. */
static int64_t capacity_of(const struct conf *c)
{
    if (c->prefix_capacity > 0)
        return c->prefix_capacity;
    struct kvsize_geometry g;
    if (c->prefix_kv_model[0] != '\0' && c->prefix_kv_memory > 0 &&
        kvsize_lookup(c->prefix_kv_model, &g) == 0) {
        uint64_t t = kvsize_tokens_in(c->prefix_kv_memory, kvsize_bytes_per_token(&g));
        if (t > 0)
            return (int64_t)PC_MIN(t, (uint64_t)INT64_MAX);
    }
    return ROUTE_DEFAULT_CAPACITY;
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
    r->policy = policy_for(c->routing);
    r->fail_timeout_ms = (int64_t)(c->upstream_fail_timeout * 1000.0);
    r->balance_abs = c->prefix_balance_abs;
    r->balance_rel = c->prefix_balance_rel;
    r->min_match = c->prefix_min_match;
    r->reps = pc_calloc(c->upstream.n, sizeof(*r->reps));
    for (size_t i = 0; i < c->upstream.n; i++, r->n++) {
        r->reps[i].pub.index = i;
        if (replica_init(&r->reps[i], c->upstream.v[i], err, errlen) < 0) {
            route_destroy(&r);
            return NULL;
        }
    }
    unique_names(r);
    int64_t cap[ROUTE_MAX_REPLICAS];
    for (size_t i = 0; i < r->n; i++)
        cap[i] = capacity_of(c);
    r->index = pindex_create(r->n, cap);
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
    pindex_destroy(&r->index);
    r->magic = 0;
    free(r);
}

struct pindex *route_pindex(struct route *r)
{
    return r->index;
}

double route_cpt(struct route *r, const char *model)
{
    return pindex_cpt(r->index, model);
}

size_t route_count(const struct route *r)
{
    return r->n;
}

const struct route_replica *route_replica(const struct route *r, size_t i)
{
    return i < r->n ? &r->reps[i].pub : NULL;
}

/* ---- picking ---------------------------------------------------------------- */

/*
 * Left out: refused, silent or answering 5xx within upstream-fail-timeout,
 * or on probation (silent or 5xx before) and a call is on it.
 */
static bool is_down(const struct replica *rp, int64_t now)
{
    return LOAD(&rp->down_until_ms) > now || (LOAD(&rp->probation) && LOAD(&rp->in_flight) > 0);
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

static void prefix_view_of(struct route *r, uint64_t cand, const struct route_query *q,
                           int64_t wall_ms, struct prefix_view *v)
{
    memset(v, 0, sizeof(*v));
    v->cand = cand;
    v->min_load = INT64_MAX;
    for (size_t i = 0; i < r->n; i++) {
        if (!(cand >> i & 1))
            continue;
        v->load[i] = LOAD(&r->reps[i].in_flight);
        v->min_load = PC_MIN(v->min_load, v->load[i]);
    }
    const struct chain *c = q != NULL ? q->chain : NULL;
    if (c != NULL && c->n > 0)
        pindex_match(r->index, c->h, c->n, q->fresh_ms > 0 ? PC_MAX(1, wall_ms - q->fresh_ms) : 0,
                     &v->m);
}

/* ---- picking ---------------------------------------------------------------- */

/* Tokens of each link of c (caller frees). */
static uint32_t *link_tokens(const struct chain *c, double cpt)
{
    uint32_t *tok = pc_malloc(c->n * sizeof(*tok));
    for (size_t i = 0; i < c->n; i++)
        tok[i] = pindex_tokens(cpt, c->end[i] - (i > 0 ? c->end[i - 1] : 0));
    return tok;
}

/* The chain now sits on replica i: count what it was predicted to hold, record it. */
static void note_chain(struct route *r, size_t i, struct route_query *q,
                       const struct prefix_view *v, int64_t wall_ms)
{
    const struct chain *c = q->chain;
    struct replica *rp = &r->reps[i];
    double cpt = pindex_cpt(r->index, q->model);
    uint32_t *tok = link_tokens(c, cpt);
    int64_t matched = 0, total = 0;
    for (size_t k = 0; k < c->n; k++) {
        total += tok[k];
        if (k < v->m.links[i])
            matched += tok[k];
    }
    q->matched_links = v->m.links[i];
    q->fresh_links = v->m.fresh[i];
    q->matched_tokens = matched;
    q->prompt_tokens = total;
    __atomic_fetch_add(&rp->chained, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&rp->matched_tokens, (uint64_t)matched, __ATOMIC_RELAXED);
    __atomic_fetch_add(&rp->chain_tokens, (uint64_t)total, __ATOMIC_RELAXED);
    pindex_record(r->index, i, c->h, tok, c->n, wall_ms);
    q->recorded_ms = wall_ms;
    free(tok);
}

static void count_reason(struct replica *rp, enum route_reason why)
{
    uint64_t *ctr = why == ROUTE_BY_PREFIX    ? &rp->by_prefix
                    : why == ROUTE_BY_SESSION ? &rp->by_session
                    : why == ROUTE_BY_BALANCE ? &rp->by_balance
                    : why == ROUTE_BY_LOAD    ? &rp->by_load
                                              : NULL;
    if (ctr != NULL)
        __atomic_fetch_add(ctr, 1, __ATOMIC_RELAXED);
}

static size_t choose(struct route *r, uint64_t cand, int64_t now, struct route_query *q,
                     struct prefix_view *v, int64_t wall_ms)
{
    uint64_t turn = __atomic_fetch_add(&r->turn, 1, __ATOMIC_RELAXED);
    bool all_down = true;
    for (size_t i = 0; i < r->n && all_down; i++)
        if ((cand & (UINT64_C(1) << i)) && !is_down(&r->reps[i], now))
            all_down = false;
    prefix_view_of(r, cand, q, wall_ms, v);
    if (q != NULL)
        q->reason = all_down ? ROUTE_BY_HEALTH : ROUTE_BY_POLICY;
    if (all_down)
        return oldest_failure(r, cand);
    return r->policy->choose(r, cand, turn, q, v);
}

const struct route_replica *route_pick(struct route *r, struct route_query *q)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    int64_t now = (int64_t)pc_mono_ms();
    uint64_t cand = candidates(r, q != NULL ? q->exclude : 0, now);
    if (cand == 0)
        return NULL;
    int64_t wall_ms = pc_wall_ms();
    struct prefix_view v;
    size_t i = choose(r, cand, now, q, &v, wall_ms);
    struct replica *rp = &r->reps[i];
    __atomic_fetch_add(&rp->in_flight, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&rp->requests, 1, __ATOMIC_RELAXED);
    if (q != NULL) {
        q->recorded_ms = 0;
        count_reason(rp, q->reason);
        if (q->chain != NULL && q->chain->n > 0)
            note_chain(r, i, q, &v, wall_ms);
    }
    return &rp->pub;
}

/*
 * Add n (a count a replica reported, up to 1e15 each: dialect_tokens) to a
 * counter, stopping at INT64_MAX: wrapped, /stats and /metrics read it as
 * negative after some thousands of answers of a replica that says so.
 */
static void add_reported(uint64_t *ctr, int64_t n)
{
    uint64_t add = (uint64_t)PC_MAX(n, 0), old = LOAD(ctr), sum;
    do
        sum = old > (uint64_t)INT64_MAX - PC_MIN(add, (uint64_t)INT64_MAX) ? (uint64_t)INT64_MAX
                                                                           : old + add;
    while (!__atomic_compare_exchange_n(ctr, &old, sum, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

void route_usage(struct route *r, const struct route_replica *rep, const char *model, size_t bytes,
                 int64_t predicted, const struct api_usage *u)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    if (u == NULL || !u->present)
        return;
    struct replica *rp = &r->reps[rep->index];
    __atomic_fetch_add(&rp->usage_answers, 1, __ATOMIC_RELAXED);
    add_reported(&rp->predicted, predicted);
    add_reported(&rp->prompt_reported, u->prompt);
    add_reported(&rp->cached_reported, u->cached);
    pindex_calibrate(r->index, model, bytes, u->prompt);
}

void route_unsent(struct route *r, const struct route_replica *rep, const struct route_query *q)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    const struct chain *c = q != NULL ? q->chain : NULL;
    if (c == NULL || c->n <= q->matched_links)
        return;
    pindex_forget(r->index, rep->index, c->h + q->matched_links, c->n - q->matched_links);
}

void route_answered(struct route *r, const struct route_replica *rep, struct route_query *q,
                    int status)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    if (q == NULL || q->chain == NULL || q->chain->n == 0 || q->recorded_ms == 0)
        return;
    int64_t ms = q->recorded_ms;
    q->recorded_ms = 0;
    if (status < 200 || status > 299) {
        route_unsent(r, rep, q);
        return;
    }
    const struct chain *c = q->chain;
    uint32_t *tok = link_tokens(c, pindex_cpt(r->index, q->model));
    pindex_publish(r->index, rep->index, c->h, tok, c->n, ms);
    free(tok);
}

/*
 * Leave rp out for upstream-fail-timeout (then, on probation, one call at a
 * time). Whether that is news to say: it was not left out already, and other
 * replicas take its calls. Never with upstream-fail-timeout 0.
 */
static bool leave_out(struct route *r, struct replica *rp, bool probation)
{
    if (r->fail_timeout_ms <= 0)
        return false;
    int64_t now = (int64_t)pc_mono_ms();
    __atomic_store_n(&rp->failed_ms, now, __ATOMIC_RELAXED);
    if (probation)
        __atomic_store_n(&rp->probation, 1, __ATOMIC_RELAXED);
    int64_t was =
        __atomic_exchange_n(&rp->down_until_ms, now + r->fail_timeout_ms, __ATOMIC_RELAXED);
    return was <= now && r->n >= 2;
}

/*
 * An answer with a server error, or a call with none (answered is false: the
 * connection closed, was reset or carried no HTTP before a response head):
 * the replica is reachable but unwell (an engine that died behind its HTTP
 * server, a gateway whose backend is gone, a model still loading, a server
 * that crashes on every call). ROUTE_5XX_IN_A_ROW of them with no answer
 * between leave it out for upstream-fail-timeout, then on probation as after
 * silence: one call at a time, and the next one leaves it out again at once
 * (the run is not reset). One never does: it may be the request's (a prompt
 * that breaks the tokenizer), and the calls between reset the run. Calls
 * with no answer were never counted: a replica that reset every call it took
 * kept its share of them, and a conversation it took stayed there, failing.
 */
static void server_error(struct route *r, struct replica *rp, bool answered)
{
    if (answered)
        __atomic_fetch_add(&rp->server_errors, 1, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(&rp->errors, 1, __ATOMIC_RELAXED);
    uint64_t run = __atomic_add_fetch(&rp->errors_5xx_run, 1, __ATOMIC_RELAXED);
    if (run < ROUTE_5XX_IN_A_ROW || !leave_out(r, rp, true))
        return;
    const char *what = answered ? "answered %llu calls in a row with a server error (5xx)"
                                : "gave %llu calls in a row no answer (closed, reset or not "
                                  "HTTP before a response head) or a server error (5xx)";
    char said[160];
    snprintf(said, sizeof(said), what, (unsigned long long)run);
    log_warn("upstream %s %s: other replicas take its calls for %.1f s, then it gets one call at "
             "a time until it answers without one",
             rp->name, said, (double)r->fail_timeout_ms / 1000.0);
}

void route_end(struct route *r, const struct route_replica *rep, enum route_result res)
{
    PC_CHECK_OBJ(r, ROUTE_MAGIC);
    struct replica *rp = &r->reps[rep->index];
    __atomic_fetch_sub(&rp->in_flight, 1, __ATOMIC_RELAXED);
    if (res == ROUTE_OK) {
        __atomic_store_n(&rp->errors_5xx_run, 0, __ATOMIC_RELAXED);
        bool was_probation = __atomic_exchange_n(&rp->probation, 0, __ATOMIC_RELAXED) != 0;
        if (LOAD(&rp->down_until_ms) != 0 || was_probation) {
            __atomic_store_n(&rp->down_until_ms, 0, __ATOMIC_RELAXED);
            log_notice("upstream %s answers again", rp->name);
        }
        return;
    }
    if (res == ROUTE_ABORTED)
        return;
    if (res == ROUTE_5XX || res == ROUTE_NO_ANSWER) {
        server_error(r, rp, res == ROUTE_5XX);
        return;
    }
    __atomic_fetch_add(&rp->errors, 1, __ATOMIC_RELAXED);
    if (res != ROUTE_CONNECT_ERR && res != ROUTE_SILENT)
        return;
    if (res == ROUTE_CONNECT_ERR)
        __atomic_fetch_add(&rp->connect_errors, 1, __ATOMIC_RELAXED);
    if (!leave_out(r, rp, res == ROUTE_SILENT))
        return;
    if (res == ROUTE_SILENT)
        log_warn("upstream %s sent nothing for upstream-timeout: other replicas take its calls "
                 "for %.1f s, then it gets one call at a time until it answers",
                 rp->name, (double)r->fail_timeout_ms / 1000.0);
    else
        log_warn("upstream %s refused a connection: other replicas take its calls for %.1f s",
                 rp->name, (double)r->fail_timeout_ms / 1000.0);
}

/* ---- rendering -------------------------------------------------------------- */

/*
 * Per-replica figures, one row each: X(name in /stats, Prometheus family,
 * type, help, expression over r, rp (struct replica *) and i (its index));
 * the rows of route_replica_series (pc_stats.h).
 */
#define ROUTE_REPLICA_FIGURES(X)                                                                 \
    X(requests, "replica_requests_total", "counter", "Calls sent to the replica",                \
      LOAD(&rp->requests))                                                                       \
    X(in_flight, "replica_in_flight", "gauge", "Calls to the replica in progress",               \
      LOAD(&rp->in_flight))                                                                      \
    X(errors, "replica_errors_total", "counter",                                                 \
      "Calls to the replica that failed (connect, reset, timeout)", LOAD(&rp->errors))           \
    X(connect_errors, "replica_connect_errors_total", "counter",                                 \
      "Connections the replica refused", LOAD(&rp->connect_errors))                              \
    X(server_errors, "replica_server_errors_total", "counter",                                   \
      "Answers of the replica with a server error (5xx but 501 and 505)",                        \
      LOAD(&rp->server_errors))                                                                  \
    X(prefix_requests, "replica_prefix_requests_total", "counter",                               \
      "Calls to the replica with a prefix chain", LOAD(&rp->chained))                            \
    X(routed_by_prefix, "replica_routed_by_prefix_total", "counter",                             \
      "Calls routed to the replica for holding the longest prefix", LOAD(&rp->by_prefix))        \
    X(routed_by_session, "replica_routed_by_session_total", "counter",                           \
      "Calls routed to the replica as their session's replica", LOAD(&rp->by_session))           \
    X(routed_by_load, "replica_routed_by_load_total", "counter",                                 \
      "Calls routed to the replica as the least loaded, for a prompt no replica held enough of", \
      LOAD(&rp->by_load))                                                                        \
    X(routed_by_balance, "replica_routed_by_balance_total", "counter",                           \
      "Calls routed to the replica because the first choice was overloaded",                     \
      LOAD(&rp->by_balance))                                                                     \
    X(matched_prefix_tokens, "replica_matched_prefix_tokens_total", "counter",                   \
      "Prompt tokens the index matched on the replica when calls were routed",                   \
      LOAD(&rp->matched_tokens))                                                                 \
    X(estimated_prompt_tokens, "replica_estimated_prompt_tokens_total", "counter",               \
      "Prompt tokens of those calls, as the proxy estimates them", LOAD(&rp->chain_tokens))      \
    X(usage_answers, "replica_usage_answers_total", "counter",                                   \
      "Answers of prefix-chained calls that reported usage", LOAD(&rp->usage_answers))           \
    X(predicted_cached_tokens, "replica_predicted_cached_tokens_total", "counter",               \
      "Reusable prompt tokens the index predicted for those answers", LOAD(&rp->predicted))      \
    X(reported_prompt_tokens, "replica_reported_prompt_tokens_total", "counter",                 \
      "Prompt tokens those answers reported", LOAD(&rp->prompt_reported))                        \
    X(reported_cached_tokens, "replica_reported_cached_tokens_total", "counter",                 \
      "Cached prompt tokens those answers reported", LOAD(&rp->cached_reported))                 \
    X(index_tokens, "replica_index_tokens", "gauge",                                             \
      "Prompt tokens the prefix index believes the replica holds",                               \
      (uint64_t)pindex_held(r->index, i))                                                        \
    X(capacity_tokens, "replica_capacity_tokens", "gauge",                                       \
      "KV-cache capacity of the replica assumed by the prefix index",                            \
      (uint64_t)pindex_capacity(r->index, i))

/* Healthy (/stats) or up (/metrics, 1): not left out (is_down). */
static void route_read_up(const void *snap, size_t i, struct stat_val *v)
{
    const struct route *r = snap;
    stat_bool(v, !is_down(&r->reps[i], (int64_t)pc_mono_ms()));
}

#define ROUTE_READ(field, fam, type, help, expr)                                   \
    static void route_read_##field(const void *snap, size_t i, struct stat_val *v) \
    {                                                                              \
        const struct route *r = snap;                                              \
        const struct replica *rp = &r->reps[i];                                    \
        (void)rp;                                                                  \
        stat_int(v, (int64_t)(expr));                                              \
    }
ROUTE_REPLICA_FIGURES(ROUTE_READ)
#undef ROUTE_READ

static const struct stat_row replica_rows[] = {
    {"healthy", "replica_up", "gauge", 0,
     "1 unless the replica refused a connection, sent nothing for upstream-timeout or answered "
     "3 calls in a row with a server error or none within upstream-fail-timeout, or a call to "
     "such a replica is in progress",
     route_read_up},
#define ROUTE_ROW(field, fam, type, help, expr) {#field, fam, type, 0, help, route_read_##field},
    ROUTE_REPLICA_FIGURES(ROUTE_ROW)
#undef ROUTE_ROW
};

static size_t route_items(const void *snap)
{
    const struct route *r = snap;
    return r->n;
}

static const char *route_item(const void *snap, size_t i)
{
    const struct route *r = snap;
    return r->reps[i].name;
}

const struct stat_group route_replica_series = {
    .rows = replica_rows,
    .nrows = PC_ARRAY_LEN(replica_rows),
    .count = route_items,
    .item = route_item,
    .array = "replicas",
    .label = "upstream",
    .per = "replica",
};

static void route_read_policy(const void *snap, size_t i, struct stat_val *v)
{
    (void)i;
    stat_str(v, route_policy_name(snap));
}

static void route_read_entries(const void *snap, size_t i, struct stat_val *v)
{
    const struct route *r = snap;
    (void)i;
    stat_int(v, (int64_t)pindex_entries(r->index));
}

static const struct stat_row route_rows[] = {
    {"routing", NULL, "info", 0, "The routing policy (routing)", route_read_policy},
    {NULL, "prefix_index_entries", "gauge", 0,
     "Links the prefix index holds, summed over the replicas", route_read_entries},
};

const struct stat_group route_series = {.rows = route_rows, .nrows = PC_ARRAY_LEN(route_rows)};
