/*
 * proxy.c - the request state machine (one struct preq per client request).
 *
 * One function per step, one driver (preq_drive) that runs steps until one
 * waits, and every completion (the cache's lookup, the flight's news, the
 * client's drained output or hang-up) records what it brought and re-enters
 * the driver, as Varnish's request steps (cnt_*) do:
 *
 *   proxy_handle ──own path──▶ admin_handle
 *     │ other path (every answer from here on: X-Promptcache-Request-Id)
 *     ▼
 *   RECV (CORS, upgrades, size) ───────────── pass-through ──────┐
 *     ▼ API endpoint                                              │
 *   PARSE (media type, JSON, fields, controls; or the memo's)     │
 *     ▼                                                           │
 *   KEYS (tenant, keys) ──── mode off, unsafe key, no-cache ─────▶┤
 *     ▼                                                           ▼
 *   LOOKUP (cache_lookup: L1, exact, semantic) ─miss, no Redis─▶ FETCH (join a call
 *     │ hit                                                       │  in flight, or lead one)
 *     ▼                                                           ▼
 *   DELIVER (the hit; or the upstream's answer, whole or relayed as it comes)
 *     ▼
 *   DONE (figures, access log, report counters; freed by a deferred event)
 *
 * An error of the proxy's own in any step, and the client hanging up, go to
 * DONE at once. A request that joined another's call goes back from DELIVER
 * to FETCH, for a call of its own, when that call was refused for a body
 * other than its own (refused_for_another), before any of it was sent. FETCH
 * does not join a call begun before a purge of the request's key
 * (flight_fence_of).
 *
 * A step returns STEP_NEXT once it has set the next state, or STEP_WAIT when
 * an operation it started will re-enter the driver (or the request is over).
 * The lookup may answer before cache_lookup returns (an L1 hit): its callback
 * then drives the request on from inside the LOOKUP step, which only waits
 * afterwards; a hit's entry is valid during that callback only, so DELIVER
 * serves it there.
 *
 * Ownership: the preq owns its parsed body, keys, its cache ticket until a
 * fetch takes it, and the handles of its outstanding operations (lookup,
 * subscription); it is freed through a deferred event once the reply is
 * finished (or the client is gone) and nothing is outstanding.
 */
#include "pc_proxy.h"
#include "pc_admin.h"
#include "pc_backend.h"
#include "pc_bound.h"
#include "pc_cache.h"
#include "pc_canon.h"
#include "pc_chain.h"
#include "pc_conf.h"
#include "pc_cors.h"
#include "pc_dialect.h"
#include "pc_entry.h"
#include "pc_fence.h"
#include "pc_fetch.h"
#include "pc_flight.h"
#include "pc_httpd.h"
#include "pc_log.h"
#include "pc_memo.h"
#include "pc_pricing.h"
#include "pc_savings.h"
#include "pc_sse.h"
#include "pc_store.h"
#include "pc_tally.h"
#include "pc_tenants.h"
#include "pc_context.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#define PREQ_MAGIC      0x50524551u  /* "PREQ" */
#define CLIENT_HIGH     (256 * 1024) /* stop relaying while this much is queued to the client */
#define CLIENT_LOW      (64 * 1024)
#define RELAY_CHUNK     (64 * 1024)
#define MAX_FWD_HEADERS 128
#define HIT_CTYPE_MAX   256 /* a stored Content-Type longer than this is not replayed */

enum preq_state {
    PREQ_RECV = 0, /* arrived: CORS, upgrades, size; an API endpoint or pass-through */
    PREQ_PARSE,    /* the body: media type, JSON, fields, controls (or the memo's facts) */
    PREQ_KEYS,     /* tenant and keys; whether the cache is looked up, refreshed or bypassed */
    PREQ_LOOKUP,   /* cache_lookup: the L1, the exact key, the semantic stage */
    PREQ_FETCH,    /* join an identical upstream call in flight, or start one */
    PREQ_DELIVER,  /* a hit, or the upstream's answer (whole, or relayed as it comes) */
    PREQ_DONE,     /* replied or abandoned: figures and logs, then freed */
    PREQ__COUNT
};

enum step {
    STEP_NEXT, /* the state was set: run its step */
    STEP_WAIT, /* a completion re-enters the driver, or the request is over */
};

enum cache_mode {
    MODE_ON = 0, /* every stage the configuration enables */
    MODE_EXACT,  /* X-Cache-Mode: exact - no semantic stage */
    MODE_OFF,
};

/* What the cache did for a request (X-Cache-Status). */
enum preq_cache {
    PC_NONE = 0, /* not an answer of the cache path (own error before lookup) */
    PC_HIT,
    PC_MISS,
    PC_BYPASS,
    PC_REFRESH,
};

static const char *const preq_cache_names[] = {NULL, "HIT", "MISS", "BYPASS", "REFRESH"};

struct preq {
    unsigned magic;
    struct worker *w;
    const struct proxy_ops *ops; /* the client, the cache and the fetch (pc_proxy.h) */
    struct httpd_req *hr;        /* NULL once the reply is finished or the client is gone */
    enum preq_state state;
    bool over; /* the DONE step ran */
    char id[32];
    char method[16]; /* copies: the access log needs them after hr is gone */
    char *path;
    uint64_t start_us;
    uint64_t upstream_start_us;
    uint64_t upstream_us;

    /* What was asked. */
    enum api_endpoint ep;
    const struct dialect *dialect; /* of the path: the shape of errors and streams */
    cJSON *body; /* parsed; NULL while the memo answered for it (preq_body parses on demand) */
    char *model; /* the body's "model", or NULL */
    bool stream;
    bool include_usage;
    size_t bytes_in;

    /* Cache controls. */
    enum cache_mode mode;
    bool no_cache;
    bool no_store;
    int64_t max_age;  /* seconds, -1 = any */
    int64_t ttl;      /* seconds */
    double threshold; /* semantic similarity (X-Cache-Threshold or semantic-threshold) */
    bool key_unsafe;  /* the key cannot tell this body from another: bypass */
    bool never_cache; /* the API says this answer is not one to keep (api_cacheable_request) */

    /* Keys. */
    unsigned char tenant[PC_SHA256_LEN];     /* whose entries: credential or shared namespace */
    unsigned char credential[PC_SHA256_LEN]; /* who asks: always the credential's hash */
    char tenant_id[TENANT_ID_LEN + 1];
    struct canon_keys keys;
    bool have_keys;
    bool late_tenant;            /* the tenant depends on the parsed body: not memoised */
    struct pc_buf variant;       /* PARSE to KEYS: inputs beside the body (compute_variant) */
    struct memo_input memo;      /* PARSE to KEYS: the memo's view (memo_input_of) ... */
    uint64_t memo_hash;          /* ... and its hash (0: none, late_tenant) */
    struct cache_ticket *ticket; /* storing this request's answer, until a fetch takes it */
    struct bound_probe *probe;   /* a candidate the error bound held back (a reference) */

    /* Prefix reuse. */
    struct chain chain; /* the prompt's prefix chain (n 0: none) */
    uint64_t session;   /* hash of x-session-id / x-user-id, 0 for none */
    bool ask_usage;     /* the stream asks upstream for usage the client did not ask for */

    /* Outstanding operations. */
    struct cache_op *lookup;
    struct cache_result *res; /* the lookup's result, during its callback only */
    struct flight_sub *sub;
    bool share;         /* FETCH: may join an identical call in flight */
    bool alone;         /* FETCH: left a call refused for another body (call_alone): shares only
                           with requests of this very body */
    bool share_checked; /* DELIVER: whether the joined call's answer is ours was decided */
    bool have_asked;
    unsigned char asked[PC_SHA256_LEN]; /* the body's digest, for a call shared by key */
    bool store; /* FETCH: the answer is stored (the fetch takes the ticket) */

    /* Delivery. */
    enum preq_cache cache;
    enum cache_match match; /* on HIT */
    bool relay_streamed;    /* relay chunks as they come (else whole answer) */
    bool started;           /* streamed reply head sent */
    struct pc_buf resp;     /* whole-answer accumulation / relay chunk */
    int status;
    size_t bytes_out;
    char upstream[128];
    bool aborted;
    bool coalesced;         /* joined another request's upstream call */
    struct api_usage saved; /* usage of the cached answer served (HIT) */
    bool strip_usage;       /* relay the stream without the usage the client did not ask for */
    struct sse_usage_filter ufilter;
    struct pc_buf relay; /* a relayed piece after the usage filter */

    /* Figures (metrics, access log, report counters; see preq_account). */
    uint64_t lookup_start_us;
    int64_t ttfb_us;          /* streams: arrival to the first byte of the answer; -1 none */
    int64_t age_s;            /* HIT: the entry's age */
    uint32_t orig_latency_ms; /* HIT: the upstream time of the original answer */
    struct api_usage usage;   /* MISS/BYPASS: the upstream answer's usage (from the flight) */
    struct savings money;     /* HIT: saved; otherwise: the upstream call's cost */
    int64_t tv[TALLY__COUNT]; /* report counters the accounting adds */
};

static void preq_drive(struct preq *r);

/* ---- the client, through the ops table ------------------------------------ */

static const char *req_header(const struct preq *r, const char *name)
{
    return r->ops->req_header(r->hr, name);
}

static size_t req_header_count(const struct preq *r)
{
    return r->ops->req_header_count(r->hr);
}

static const struct httpd_header *req_header_at(const struct preq *r, size_t i)
{
    return r->ops->req_header_at(r->hr, i);
}

static const char *req_body(const struct preq *r, size_t *len)
{
    return r->ops->req_body(r->hr, len);
}

static void add_header(struct preq *r, const char *name, const char *value)
{
    r->ops->add_header(r->hr, name, value);
}

static void preq_on_flight(struct flight_sub *sub, void *arg);
static void preq_on_drain(struct httpd_req *hr, void *arg);
static void preq_on_lookup(void *arg, struct cache_result *res);

/* ---- the driver ------------------------------------------------------------ */

static enum step step_recv(struct preq *r);
static enum step step_parse(struct preq *r);
static enum step step_keys(struct preq *r);
static enum step step_lookup(struct preq *r);
static enum step step_fetch(struct preq *r);
static enum step step_deliver(struct preq *r);
static enum step step_done(struct preq *r);

static enum step (*const preq_steps[PREQ__COUNT])(struct preq *r) = {
    [PREQ_RECV] = step_recv,     [PREQ_PARSE] = step_parse, [PREQ_KEYS] = step_keys,
    [PREQ_LOOKUP] = step_lookup, [PREQ_FETCH] = step_fetch, [PREQ_DELIVER] = step_deliver,
    [PREQ_DONE] = step_done,
};

/* Run steps until one waits. Every completion re-enters here. */
static void preq_drive(struct preq *r)
{
    while (preq_steps[r->state](r) == STEP_NEXT)
        ;
}

/* Go to state s: the driver runs its step next. */
static enum step to(struct preq *r, enum preq_state s)
{
    r->state = s;
    return STEP_NEXT;
}

/* Upstream next: the call shared with identical ones or not, its answer stored or not. */
static enum step go_fetch(struct preq *r, bool share, bool store)
{
    r->share = share;
    r->store = store;
    return to(r, PREQ_FETCH);
}

/* Whether this request may share an upstream call with identical ones. */
static bool may_share(const struct preq *r)
{
    return !r->no_cache && !r->no_store;
}

/* Upstream without the cache; only_this: never share the call either. */
static enum step bypass(struct preq *r, bool only_this)
{
    r->cache = PC_BYPASS;
    stats_incr(&r->w->stats, STAT_cache_bypasses);
    return go_fetch(r, !only_this && may_share(r), false);
}

/* Not in the cache (or not servable from it): fetched, shared with identical misses, stored. */
static enum step miss(struct preq *r)
{
    r->cache = PC_MISS;
    stats_incr(&r->w->stats, STAT_cache_misses);
    return go_fetch(r, may_share(r), !r->no_store);
}

/* ---- lifecycle ---------------------------------------------------------- */

static void preq_free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct preq *r = arg;
    PC_CHECK_OBJ(r, PREQ_MAGIC);
    struct worker *w = r->w;
    cJSON_Delete(r->body);
    free(r->model);
    free(r->path);
    canon_keys_free(&r->keys);
    pc_buf_free(&r->variant);
    chain_free(&r->chain);
    sse_usage_filter_free(&r->ufilter);
    pc_buf_free(&r->relay);
    cache_ticket_free(&r->ticket);
    bound_probe_unref(&r->probe);
    pc_buf_free(&r->resp);
    r->magic = 0;
    free(r);
    stats_add(&w->stats, STAT_requests_active, -1);
    context_ended(w);
}

/* Tokens, money, time to first byte and age: what the access log adds for API requests. */
static void access_log_money(const struct preq *r, struct pc_buf *b)
{
    if (r->stream && r->ttfb_us >= 0)
        pc_buf_printf(b, ",\"ttfb_ms\":%.3f", (double)r->ttfb_us / 1000.0);
    if (r->cache == PC_HIT)
        pc_buf_printf(b, ",\"age\":%lld", (long long)r->age_s);
    if (r->ep == API_NONE)
        return;
    const struct api_usage *u = r->cache == PC_HIT ? &r->saved : &r->usage;
    if (u->present)
        pc_buf_printf(b,
                      ",\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"cached_tokens\":%lld,"
                      "\"cache_write_tokens\":%lld",
                      (long long)u->prompt, (long long)u->completion, (long long)u->cached,
                      (long long)u->cache_write);
    const char *name = r->cache == PC_HIT ? "saved" : "cost";
    if (r->money.priced)
        pc_buf_printf(b, ",\"%s\":%.9f", name, r->money.amount);
    else if (r->cache == PC_HIT || u->present)
        pc_buf_printf(b, ",\"%s\":null", name);
    if (r->cache == PC_HIT)
        pc_buf_printf(b, ",\"latency_saved_ms\":%lld", (long long)r->money.latency_saved_ms);
}

static void access_log(const struct preq *r)
{
    const char *method = r->method, *path = r->path;
    if (!log_access_enabled())
        return;
    struct pc_buf b = PC_BUF_INIT;
    char ts[PC_ISO8601_LEN];
    pc_iso8601(pc_wall_ms(), ts);
    const char *model = r->model;
    pc_buf_printf(&b, "{\"ts\":\"%s\",\"id\":\"%s\",\"tenant\":", ts, r->id);
    pc_buf_json_str(&b, r->tenant_id[0] ? r->tenant_id : "-", r->tenant_id[0] ? TENANT_ID_LEN : 1);
    /* What the client sent is written as valid UTF-8, the model cut on a character. */
    pc_buf_append_str(&b, ",\"method\":");
    pc_buf_json_text(&b, method, strlen(method), SIZE_MAX);
    pc_buf_append_str(&b, ",\"path\":");
    pc_buf_json_text(&b, path, strlen(path), SIZE_MAX);
    pc_buf_printf(&b, ",\"endpoint\":\"%s\",\"model\":", api_endpoint_name(r->ep));
    if (model != NULL)
        pc_buf_json_text(&b, model, strlen(model), 200);
    else
        pc_buf_append_str(&b, "null");
    pc_buf_printf(&b, ",\"status\":%d,\"cache\":\"%s\",", r->status,
                  r->cache != PC_NONE ? preq_cache_names[r->cache] : "-");
    if (r->cache == PC_HIT)
        pc_buf_printf(&b, "\"match\":\"%s\",", cache_match_name(r->match));
    if (r->probe != NULL) { /* a candidate the error bound held back */
        const char *verdict = bound_probe_verdict(r->probe);
        pc_buf_printf(
            &b, "\"similarity\":%.4f,\"explored\":%s,\"verify\":", bound_probe_similarity(r->probe),
            bound_probe_explored(r->probe) ? "true" : "false");
        if (verdict != NULL)
            pc_buf_printf(&b, "\"%s\",", verdict);
        else
            pc_buf_append_str(&b, "null,");
    }
    pc_buf_printf(&b, "\"stream\":%s,\"upstream\":", r->stream ? "true" : "false");
    if (r->upstream[0])
        pc_buf_json_str(&b, r->upstream, strlen(r->upstream));
    else
        pc_buf_append_str(&b, "null");
    pc_buf_printf(&b,
                  ",\"ms\":%.3f,\"upstream_ms\":%.3f,\"bytes_in\":%zu,\"bytes_out\":%zu,"
                  "\"aborted\":%s",
                  (double)(pc_mono_us() - r->start_us) / 1000.0, (double)r->upstream_us / 1000.0,
                  r->bytes_in, r->bytes_out, r->aborted ? "true" : "false");
    access_log_money(r, &b);
    pc_buf_append_char(&b, '}');
    log_access(b.data, b.len);
    pc_buf_free(&b);
}

/*
 * Per-hour usage by model and tenant (promptcache report), for API requests:
 * each is a hit, a miss or a bypass, as in the metrics (one hit rate
 * everywhere), and also an error if not answered with a 2xx.
 */
static void preq_tally(const struct preq *r)
{
    if (r->ep == API_NONE || r->cache == PC_NONE)
        return;
    int64_t v[TALLY__COUNT] = {0};
    bool ok = r->status >= 200 && r->status <= 299 && !r->aborted;
    v[TALLY_requests] = 1;
    v[TALLY_coalesced] = r->coalesced;
    v[TALLY_errors] = !ok;
    if (r->cache == PC_HIT) {
        v[TALLY_hits] = 1;
        v[TALLY_semantic_hits] = r->match == CACHE_MATCH_SEMANTIC;
        v[TALLY_saved_prompt_tokens] = ok ? r->saved.prompt : 0;
        v[TALLY_saved_completion_tokens] = ok ? r->saved.completion : 0;
    } else if (r->cache == PC_MISS) {
        v[TALLY_misses] = 1;
    } else {
        v[TALLY_bypasses] = 1;
    }
    const char *verdict = bound_probe_verdict(r->probe);
    if (ok && verdict != NULL) {
        v[TALLY_semantic_compared] = 1;
        v[TALLY_semantic_disagreed] = strcmp(verdict, "disagreed") == 0;
        v[TALLY_semantic_explored] = bound_probe_explored(r->probe);
        v[TALLY_semantic_explored_disagreed] =
            v[TALLY_semantic_explored] && v[TALLY_semantic_disagreed];
    }
    for (int m = 0; ok && m < TALLY__COUNT; m++)
        v[m] += r->tv[m];
    tally_add(r->w->tally, r->model, r->tenant_id, ok, v);
}

static enum stat_cache stat_cache_of(enum preq_cache c)
{
    return c == PC_HIT ? SC_HIT : c == PC_MISS ? SC_MISS : c == PC_REFRESH ? SC_REFRESH : SC_BYPASS;
}

/* An explored candidate's upstream call: what verifying the error bound cost (not saved). */
static void account_explore(struct preq *r)
{
    struct worker *w = r->w;
    stats_add(&w->stats, STAT_semantic_explore_prompt_tokens, r->usage.prompt);
    stats_add(&w->stats, STAT_semantic_explore_completion_tokens, r->usage.completion);
    r->tv[TALLY_explore_prompt_tokens] += r->usage.prompt;
    r->tv[TALLY_explore_completion_tokens] += r->usage.completion;
    if (r->money.priced) {
        struct stat_labels l = {.model = stats_model_slot(r->model, true)};
        stats_fam_add(&w->stats, SF_semantic_explore_cost, &l, pricing_nano(r->money.amount));
    }
}

/* The tenant families: requests, and the money of a hit or of an upstream call, by name. */
static void account_tenant(const struct preq *r, enum stat_cache c)
{
    if (r->ep == API_NONE)
        return;
    struct worker *w = r->w;
    struct stat_labels l = {
        .cache = c, .tenant = stats_tenant_slot(tenants_name(w->conf->tenants, r->tenant_id))};
    stats_fam_add(&w->stats, SF_tenant_requests, &l, 1);
    if (r->money.priced && r->money.amount > 0)
        stats_fam_add(&w->stats, c == SC_HIT ? SF_tenant_saved_cost : SF_tenant_upstream_cost, &l,
                      pricing_nano(r->money.amount));
}

/*
 * The request's figures, once it ended: money and latency saved by a hit,
 * what its upstream call cost, its durations in the metrics and in the
 * hourly latency counts, and the proxy's own calls made meanwhile.
 */
static void preq_account(struct preq *r)
{
    struct worker *w = r->w;
    savings_own_calls(w);
    if (r->cache == PC_NONE)
        return;
    int64_t took = (int64_t)(pc_mono_us() - r->start_us);
    bool ok = r->status >= 200 && r->status <= 299 && !r->aborted;
    const char *model = r->model;
    if (r->cache == PC_HIT && ok)
        savings_hit(w, model, r->match, &r->saved, r->orig_latency_ms, took, r->tv, &r->money);
    else if (r->cache != PC_HIT && !r->coalesced)
        savings_price(w, model, &r->usage, &r->money);
    if (r->probe != NULL && bound_probe_explored(r->probe) && ok && !r->coalesced)
        account_explore(r);
    struct stat_labels l = {.cache = stat_cache_of(r->cache),
                            .endpoint = r->ep,
                            .model = stats_model_slot(model, ok && r->ep != API_NONE)};
    stats_fam_add(&w->stats, SF_api_requests, &l, 1);
    account_tenant(r, l.cache);
    stats_observe(&w->stats, SF_request_duration_seconds, &l, took);
    if (r->stream && r->ttfb_us >= 0)
        stats_observe(&w->stats, SF_stream_ttfb_seconds, &l, r->ttfb_us);
    if (r->ep != API_NONE)
        tally_observe(w->tally,
                      r->cache == PC_HIT    ? TALLY_LAT_HIT
                      : r->cache == PC_MISS ? TALLY_LAT_MISS
                                            : TALLY_LAT_BYPASS,
                      took);
}

/*
 * DONE: the reply is finished or the client is gone. Once: cancel what is
 * outstanding (synchronously, so nothing is afterwards), count, log, and
 * free through a deferred event.
 */
static enum step step_done(struct preq *r)
{
    r->hr = NULL;
    if (r->over)
        return STEP_WAIT;
    r->over = true;
    r->ops->cache_cancel(&r->lookup);
    flight_unsubscribe(&r->sub);
    preq_account(r);
    access_log(r);
    preq_tally(r);
    static const struct timeval zero = {0, 0};
    if (event_base_once(r->w->base, -1, EV_TIMEOUT, preq_free_cb, r, &zero) < 0) {
        log_error("cannot schedule a request free; leaking it");
    }
    return STEP_WAIT;
}

/* Completion: the client hung up before its answer was complete. */
static void preq_on_close(struct httpd_req *hr, void *arg)
{
    struct preq *r = arg;
    PC_CHECK_OBJ(r, PREQ_MAGIC);
    (void)hr;
    r->hr = NULL; /* httpd frees it once this returns */
    r->aborted = true;
    if (r->status == 0)
        r->status = 499; /* nginx's "client closed request" */
    stats_incr(&r->w->stats, STAT_client_aborts);
    log_write(PC_LOG_INFO, r->id, "client went away before the answer was complete");
    r->state = PREQ_DONE;
    preq_drive(r);
}

/* ---- replies ------------------------------------------------------------ */

/*
 * X-Cache-Key: the id of the entry (pc_entry.h) that answered a HIT, or that
 * a MISS or REFRESH answer is stored under (also when it turns out not to be
 * storable: the id names where it would be). None on BYPASS: no entry.
 */
static void add_cache_key(struct preq *r, const unsigned char *exact)
{
    char id[ENTRY_ID_LEN + 1];
    entry_id(r->tenant_id, exact, id);
    add_header(r, "X-Cache-Key", id);
}

static void add_cache_headers(struct preq *r)
{
    if (r->cache != PC_NONE)
        add_header(r, "X-Cache-Status", preq_cache_names[r->cache]);
    if ((r->cache == PC_MISS || r->cache == PC_REFRESH) && r->have_keys)
        add_cache_key(r, r->keys.exact);
    if (r->probe != NULL) { /* the candidate the error bound held back, and how it compared */
        char sim[16];
        snprintf(sim, sizeof(sim), "%.4f", bound_probe_similarity(r->probe));
        add_header(r, "X-Cache-Similarity", sim);
        const char *verdict = bound_probe_verdict(r->probe);
        if (verdict != NULL)
            add_header(r, "X-Cache-Verify", verdict);
    }
    if (r->upstream[0] && r->cache != PC_HIT)
        add_header(r, "X-Upstream", r->upstream);
}

/* A whole reply; the request is then over (the caller's step goes to DONE). */
static void reply_whole(struct preq *r, int status, const char *ctype, const char *body, size_t len)
{
    if (ctype != NULL)
        add_header(r, "Content-Type", ctype);
    r->status = status;
    r->bytes_out += len;
    r->ops->reply(r->hr, status, body, len);
    r->hr = NULL;
}

/* An error of the proxy's own, in the shape of the API that was called. */
static void reply_error(struct preq *r, int status, const char *fmt, ...) PC_PRINTF(3, 4);
static void reply_error(struct preq *r, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (status >= 400 && status < 500)
        stats_incr(&r->w->stats, STAT_client_errors);
    struct pc_buf b = PC_BUF_INIT;
    dialect_error_body(r->dialect, status, msg, &b);
    add_cache_headers(r);
    reply_whole(r, status, "application/json", b.data, b.len);
    pc_buf_free(&b);
}

/* ---- request parsing ---------------------------------------------------- */

static bool is_json_media_type(const char *ct)
{
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, "; \t");
    if (n == 16 && pc_strncaseeq(ct, "application/json", 16))
        return true;
    /* application/<something>+json */
    return n > 17 && pc_strncaseeq(ct, "application/", 12) && pc_strncaseeq(ct + n - 5, "+json", 5);
}

/*
 * delta-seconds (RFC 9111 1.2.2): digits only; values beyond 2^31 mean
 * "2^31", so no arithmetic on them can overflow. -1 if not digits.
 */
static int64_t parse_delta_seconds(const char *p, size_t n)
{
    const int64_t cap = INT64_C(2147483648);
    int64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = PC_MIN(cap, v * 10 + (p[i] - '0'));
    }
    return v;
}

/*
 * Length of the list member at p: up to the first comma outside a quoted
 * string (RFC 9110 5.6.4 and 5.6.6), so that a directive's quoted argument
 * holding a comma (a gateway's own `x-tag="a, no-store"`) stays one member.
 */
static size_t list_member_len(const char *p)
{
    bool quoted = false;
    size_t i = 0;
    for (; p[i] != '\0'; i++) {
        if (quoted && p[i] == '\\' && p[i + 1] != '\0')
            i++; /* quoted-pair */
        else if (p[i] == '"')
            quoted = !quoted;
        else if (p[i] == ',' && !quoted)
            break;
    }
    return i;
}

/* Parse Cache-Control request directives; -1 with msg on a bad max-age. */
static int parse_cache_control(struct preq *r, const char *cc, char *msg, size_t msglen)
{
    while (*cc) {
        while (*cc == ' ' || *cc == '\t' || *cc == ',')
            cc++;
        size_t n = list_member_len(cc);
        size_t tl = n;
        while (tl > 0 && (cc[tl - 1] == ' ' || cc[tl - 1] == '\t'))
            tl--;
        if (tl == 8 && pc_strncaseeq(cc, "no-cache", 8)) {
            r->no_cache = true;
        } else if (tl == 8 && pc_strncaseeq(cc, "no-store", 8)) {
            r->no_store = true;
        } else if (tl > 8 && pc_strncaseeq(cc, "max-age=", 8)) {
            const char *arg = cc + 8;
            size_t alen = tl - 8;
            /* max-age="60" is max-age=60: recipients take both forms (RFC 9111 5.2) */
            if (alen >= 2 && arg[0] == '"' && arg[alen - 1] == '"') {
                arg++;
                alen -= 2;
            }
            int64_t v = parse_delta_seconds(arg, alen);
            if (v < 0) {
                snprintf(msg, msglen, "Cache-Control max-age must be a non-negative integer");
                return -1;
            }
            /* Given twice (two lines, a gateway's own): the strictest, never an older answer
             * than one of them allows. */
            r->max_age = r->max_age < 0 ? v : PC_MIN(r->max_age, v);
        }
        cc += n;
    }
    return 0;
}

static bool valid_namespace(const char *ns)
{
    size_t n = strlen(ns);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)ns[i]) && ns[i] != '.' && ns[i] != '_' && ns[i] != '-')
            return false;
    return true;
}

static bool namespace_shared(const struct conf *c, const char *ns)
{
    for (size_t i = 0; i < c->shared_namespaces.n; i++)
        if (strcmp(c->shared_namespaces.v[i], ns) == 0)
            return true;
    return false;
}

/* X-Cache-* and Cache-Control request headers; -1 with msg if one is invalid. */
static int parse_controls(struct preq *r, char *msg, size_t msglen)
{
    const struct conf *c = r->w->conf;
    r->max_age = -1;
    r->ttl = c->cache_ttl;
    r->threshold = -1; /* the semantic stage's default unless X-Cache-Threshold says */
    /* A list: every line counts, as if joined with commas (RFC 9110, section 5.3). */
    for (size_t i = 0; i < req_header_count(r); i++) {
        const struct httpd_header *h = req_header_at(r, i);
        if (pc_strcaseeq(h->name, "Cache-Control") &&
            parse_cache_control(r, h->value, msg, msglen) < 0)
            return -1;
    }
    /* HTTP/1.0 clients say no-cache with Pragma (ignored when Cache-Control is present). */
    const char *v = req_header(r, "Cache-Control");
    const char *pragma = req_header(r, "Pragma");
    if (v == NULL && pragma != NULL && pc_strcaseeq(pragma, "no-cache"))
        r->no_cache = true;
    if ((v = req_header(r, "X-Cache-Mode")) != NULL) {
        if (pc_strcaseeq(v, "off"))
            r->mode = MODE_OFF;
        else if (pc_strcaseeq(v, "exact"))
            r->mode = MODE_EXACT;
        else if (pc_strcaseeq(v, "semantic"))
            r->mode = MODE_ON;
        else
            return snprintf(msg, msglen, "X-Cache-Mode must be off, exact or semantic"), -1;
    }
    if ((v = req_header(r, "X-Cache-TTL")) != NULL) {
        int64_t ttl;
        if (pc_parse_i64(v, &ttl) < 0 || ttl < 0)
            return snprintf(msg, msglen, "X-Cache-TTL must be a non-negative integer (seconds)"),
                   -1;
        r->ttl = PC_MIN(ttl, c->cache_max_ttl); /* longer asks are held to cache-max-ttl */
        if (ttl == 0)
            r->no_store = true;
    }
    if ((v = req_header(r, "X-Cache-Threshold")) != NULL) {
        double t;
        if (pc_parse_double(v, &t) < 0 || t < 0 || t > 1)
            return snprintf(msg, msglen, "X-Cache-Threshold must be a number from 0 to 1"), -1;
        r->threshold = t;
    }
    if ((v = req_header(r, "X-Cache-Namespace")) != NULL && !valid_namespace(v))
        return snprintf(msg, msglen,
                        "X-Cache-Namespace must be 1-64 characters of A-Z a-z 0-9 . _ -"),
               -1;
    return 0;
}

/*
 * Hash every credential header the client sent (all copies, in order: the
 * upstream sees them all too) into r->credential; the tenant is that, or the
 * shared namespace the request names.
 */
/* "name=value\n" with the name lower-cased: one header as part of a key's input. */
static void append_header_input(struct pc_buf *out, const char *name, const char *value)
{
    for (const char *c = name; *c; c++)
        pc_buf_append_char(out, (char)tolower((unsigned char)*c));
    pc_buf_append_char(out, '=');
    pc_buf_append_str(out, value);
    pc_buf_append_char(out, '\n');
}

/*
 * tenant-names: show the credential's tenant in /stats, and learn its name
 * when the file names the key's hash (then every instance and the report
 * learn it from Redis: an id and a fingerprint, never the key).
 */
static void note_tenant_key(struct preq *r)
{
    struct tenants *t = r->w->conf->tenants;
    for (size_t i = 0; t != NULL && i < req_header_count(r); i++) {
        const struct httpd_header *h = req_header_at(r, i);
        if (!backend_is_credential_header(h->name))
            continue;
        const char *key = h->value + (pc_strncaseeq(h->value, "Bearer ", 7) ? 7 : 0);
        char id[2 * PC_SHA256_LEN + 1], fp[17];
        pc_hex(r->credential, TENANT_ID_LEN / 2, id);
        id[TENANT_ID_LEN] = '\0';
        if (tenants_note(t, id, key, strlen(key), fp)) {
            const char *argv[] = {"HSET", TENANTS_KEY_FP, id, fp};
            size_t lens[] = {4, strlen(TENANTS_KEY_FP), TENANT_ID_LEN, 16};
            store_write(r->w->store, 4, argv, lens);
        }
        return;
    }
}

static void compute_tenant(struct preq *r)
{
    struct pc_buf cred = PC_BUF_INIT;
    for (size_t i = 0; i < req_header_count(r); i++) {
        const struct httpd_header *h = req_header_at(r, i);
        if (backend_is_credential_header(h->name))
            append_header_input(&cred, h->name, h->value);
    }
    canon_tenant(cred.len ? pc_buf_cstr(&cred) : "", r->credential);
    /* Credentials never outlive this function. */
    if (cred.data != NULL)
        memset(cred.data, 0, cred.cap);
    pc_buf_free(&cred);

    /* An answer its account owns at the provider: never shared (pc_api.h). */
    const char *ns = req_header(r, "X-Cache-Namespace");
    size_t len = 0;
    const char *raw = req_body(r, &len);
    if (ns != NULL && namespace_shared(r->w->conf, ns) &&
        !api_account_bound(r->ep, r->body, raw, len)) {
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_printf(&b, "namespace=%s\n", ns);
        canon_tenant(pc_buf_cstr(&b), r->tenant);
        pc_buf_free(&b);
    } else {
        memcpy(r->tenant, r->credential, PC_SHA256_LEN);
    }
    char hex[2 * PC_SHA256_LEN + 1];
    pc_hex(r->tenant, PC_SHA256_LEN, hex);
    memcpy(r->tenant_id, hex, TENANT_ID_LEN);
    r->tenant_id[TENANT_ID_LEN] = '\0';
    note_tenant_key(r);
}

/*
 * Whether a header sent as name is the key header want, read as CGI and WSGI
 * gateways read names: case aside, with '_' for '-' ("OpenAI_Organization"
 * goes upstream, and such a gateway hands it to the application as the
 * organization).
 */
static bool key_header_is(const char *name, const char *want)
{
    for (; *name != '\0' && *want != '\0'; name++, want++) {
        char a = *name == '_' ? '-' : (char)tolower((unsigned char)*name);
        char b = *want == '_' ? '-' : (char)tolower((unsigned char)*want);
        if (a != b)
            return false;
    }
    return *name == *want;
}

/*
 * Request inputs outside the body that change the answer: the headers of
 * cache-key-headers (every copy, in order, its name as sent, lower-cased, so
 * that an underscore spelling, which only some upstreams read, is a key of
 * its own) and the query. Not one the client names in Connection:
 * hop-by-hop, it is not forwarded (backend_prepare reads the last Connection
 * header the same way), so the upstream answered without it.
 */
static void compute_variant(struct preq *r, struct pc_buf *out)
{
    const struct conf_list *names = &r->w->conf->cache_key_headers;
    const char *conn = NULL;
    for (size_t j = 0; j < req_header_count(r); j++)
        if (pc_strcaseeq(req_header_at(r, j)->name, "connection"))
            conn = req_header_at(r, j)->value;
    for (size_t i = 0; i < names->n; i++) {
        if (pc_token_list_has(conn, names->v[i]))
            continue;
        for (size_t j = 0; j < req_header_count(r); j++) {
            const struct httpd_header *h = req_header_at(r, j);
            if (key_header_is(h->name, names->v[i]))
                append_header_input(out, h->name, h->value);
        }
    }
    /* The query goes upstream too (Azure's api-version, gateways' keys). */
    const char *q = r->ops->req_query(r->hr);
    if (q != NULL)
        pc_buf_printf(out, "?%s\n", q);
}

/* The memo's view of this request (pc_memo.h): every input of the keys but the body tree. */
static struct memo_input memo_input_of(const struct preq *r, struct pc_buf *variant)
{
    size_t len = 0;
    const char *raw = req_body(r, &len);
    return (struct memo_input){
        .endpoint = r->ep,
        .exact_only = !r->w->conf->semantic,
        .tenant = r->tenant,
        .ns = req_header(r, "X-Cache-Namespace"),
        .variant = variant->len ? pc_buf_cstr(variant) : NULL,
        .raw = raw,
        .raw_len = len,
    };
}

/* The keys from the parsed body; kept in the memo under mi (memo_input_of, hashed as hash). */
static void compute_keys(struct preq *r, const struct memo_input *mi, uint64_t hash)
{
    struct canon_input in = {
        .endpoint = r->ep,
        .body = r->body,
        .tenant = r->tenant,
        .ns = mi->ns,
        .variant = mi->variant,
        .exact_only = mi->exact_only,
        /* The raw text keeps every digit of big integers, which the tree cannot. */
        .raw = mi->raw,
        .raw_len = mi->raw_len,
    };
    canon_keys(&in, &r->keys);
    if (r->keys.lossy || r->keys.repeated) /* keys that might not tell two requests apart */
        r->key_unsafe = true;
    r->have_keys = true;
    /*
     * A tenant that depends on the body (late_tenant: the Responses API's
     * "store", an escaped "file_id") is not an input the memo knows. A body
     * never to cache (never_cache) is not memoised either: a repeat answered
     * by the memo is not parsed, so it would not be judged again.
     */
    if (r->key_unsafe || r->never_cache || r->late_tenant)
        return;
    struct memo_facts f = {
        .stream = r->stream,
        .include_usage = r->include_usage,
        .last_user_text = r->keys.last_user_text,
        .model = r->model,
    };
    memcpy(f.exact, r->keys.exact, PC_SHA256_LEN);
    memcpy(f.partition, r->keys.partition, PC_SHA256_LEN);
    memo_put(r->w->memo, mi, hash, &f);
}

/*
 * A body read before, with the same tenant, namespace and variant: take its
 * keys from the memo instead of parsing it. True if it did (the body stays
 * unparsed until something else needs it: preq_body).
 */
static bool keys_from_memo(struct preq *r, const struct memo_input *mi, uint64_t hash)
{
    const struct memo_facts *f = memo_get(r->w->memo, mi, hash);
    if (f == NULL)
        return false;
    r->stream = f->stream;
    r->include_usage = f->include_usage;
    r->model = f->model ? pc_strdup(f->model) : NULL;
    memcpy(r->keys.exact, f->exact, PC_SHA256_LEN);
    memcpy(r->keys.partition, f->partition, PC_SHA256_LEN);
    r->keys.last_user_text = f->last_user_text ? pc_strdup(f->last_user_text) : NULL;
    r->have_keys = true;
    stats_incr(&r->w->stats, STAT_request_memo_hits);
    return true;
}

/* The parsed body: parsed now if the memo answered for it (it parsed once before, so it parses). */
static const cJSON *preq_body(struct preq *r)
{
    if (r->body == NULL) {
        size_t len = 0;
        const char *raw = req_body(r, &len);
        r->body = cJSON_ParseWithLength(raw, len);
    }
    return r->body;
}

/*
 * What prefix reuse needs, for a call that goes upstream: the prompt's chain
 * (rooted at the credential, or shared when tenants share KV state), the
 * session key the client named, and whether a stream should ask upstream for
 * usage on the client's behalf.
 */
static void compute_prefix(struct preq *r)
{
    const struct conf *c = r->w->conf;
    struct chain_input in = {
        .endpoint = r->ep,
        .body = preq_body(r),
        .tenant = c->prefix_share_tenants ? NULL : r->credential,
    };
    chain_build(&in, &r->chain);
    const char *s = req_header(r, "x-session-id");
    if (s == NULL || *s == '\0')
        s = req_header(r, "x-user-id");
    if (s != NULL && *s != '\0') {
        unsigned char d[PC_SHA256_LEN];
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_append(&b, r->credential, PC_SHA256_LEN);
        pc_buf_append_str(&b, s);
        pc_sha256(b.data, b.len, d);
        pc_buf_free(&b);
        for (int i = 0; i < 8; i++)
            r->session = (r->session << 8) | d[i];
        r->session |= 1; /* never 0, which means none */
    }
    r->ask_usage = c->stream_usage && r->stream && !r->include_usage &&
                   dialect_usage_on_request(r->dialect) && r->w->backend->stream_usage;
}

/*
 * The cache's view of this request. Embeddings are never matched by meaning:
 * the vector of a similar text is not the vector of this one.
 */
static void cache_query_of(const struct preq *r, struct cache_query *q)
{
    bool semantic = r->w->conf->semantic && r->mode == MODE_ON && r->ep != API_EMBEDDINGS &&
                    r->keys.last_user_text != NULL;
    *q = (struct cache_query){
        .endpoint = r->ep,
        .tenant_id = r->tenant_id,
        .exact = r->keys.exact,
        .partition = semantic ? r->keys.partition : NULL,
        .text = semantic ? r->keys.last_user_text : NULL,
        .max_age_ms = r->max_age >= 0 ? r->max_age * 1000 : -1,
        .semantic = semantic,
        /* semantic-threshold is read here, from the worker's current (reloadable) conf. */
        .threshold = r->threshold >= 0 ? r->threshold : r->w->conf->semantic_threshold,
        .ns = req_header(r, "X-Cache-Namespace"),
        .model = r->model,
    };
}

/* The client's request headers as received (pointers into hr); returns the count. */
static size_t client_headers(struct preq *r, struct xfer_header *hdrs, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < req_header_count(r) && n < max; i++) {
        const struct httpd_header *h = req_header_at(r, i);
        hdrs[n].name = h->name;
        hdrs[n].value = h->value;
        n++;
    }
    return n;
}

/* ---- delivery of a fetched answer ---------------------------------------- */

static void add_upstream_headers(struct preq *r, const struct flight_view *v)
{
    for (size_t i = 0; i < v->nhdrs; i++)
        add_header(r, v->hdrs[i].name, v->hdrs[i].value);
    pc_strlcpy(r->upstream, v->upstream ? v->upstream : "", sizeof(r->upstream));
    add_cache_headers(r);
}

static void deliver_failure(struct preq *r, const struct flight_view *v)
{
    if (v->upstream != NULL) /* the replica that failed, for the access log */
        pc_strlcpy(r->upstream, v->upstream, sizeof(r->upstream));
    int status = xfer_result_status((enum xfer_result)v->result);
    if (v->result == XFER_ERR_TIMEOUT || v->result == XFER_ERR_CONNECT_TIMEOUT)
        reply_error(r, status, "upstream did not answer in time (%s)",
                    v->errmsg ? v->errmsg : "timeout");
    else
        reply_error(r, status, "upstream unavailable: %s", v->errmsg ? v->errmsg : "error");
}

static enum step deliver_streamed(struct preq *r);
static void stream_start(struct preq *r, const struct flight_view *v);
static void relay(struct preq *r, const char *data, size_t n, bool end);

/*
 * The whole answer once the flight is done; WAIT until then. An answer that
 * grows over cache-max-entry-size is never stored nor held whole: from
 * there it is relayed as it comes (deliver_streamed), what arrived first.
 */
static enum step deliver_whole(struct preq *r)
{
    struct flight_view v;
    size_t cap = (size_t)r->w->conf->cache_max_entry_size;
    while (flight_sub_read(r->sub, &v, &r->resp, RELAY_CHUNK) > 0 && r->resp.len <= cap)
        ;
    bool failed = v.state == FLIGHT_DONE && (v.result != 0 || v.status == 0);
    if (r->resp.len > cap && !failed) {
        r->relay_streamed = true;
        stream_start(r, &v);
        relay(r, r->resp.data, r->resp.len, false);
        pc_buf_free(&r->resp);
        return deliver_streamed(r);
    }
    if (v.state != FLIGHT_DONE)
        return STEP_WAIT;
    r->upstream_us = pc_mono_us() - r->upstream_start_us;
    if (v.result != 0 || v.status == 0) {
        deliver_failure(r, &v);
        return to(r, PREQ_DONE);
    }
    r->usage = v.usage;
    add_upstream_headers(r, &v);
    r->status = v.status;
    r->bytes_out += r->resp.len;
    r->ops->reply(r->hr, v.status, r->resp.data, r->resp.len);
    r->hr = NULL;
    return to(r, PREQ_DONE);
}

/* Pass stream bytes to the client, without the usage it did not ask for (strip_usage). */
static void relay(struct preq *r, const char *data, size_t n, bool end)
{
    if (!r->strip_usage) {
        if (n > 0)
            r->ops->reply_chunk(r->hr, data, n);
        r->bytes_out += n;
        return;
    }
    pc_buf_reset(&r->relay);
    sse_usage_filter_feed(&r->ufilter, data, n, &r->relay);
    if (end)
        sse_usage_filter_end(&r->ufilter, &r->relay);
    if (r->relay.len > 0)
        r->ops->reply_chunk(r->hr, r->relay.data, r->relay.len);
    r->bytes_out += r->relay.len;
}

/* The head of an answer relayed as it comes. */
static void stream_start(struct preq *r, const struct flight_view *v)
{
    add_upstream_headers(r, v);
    r->status = v->status;
    r->started = true;
    /* Only a 2xx stream is events; an error body passes as it is. */
    r->strip_usage = r->stream && !r->include_usage && dialect_usage_on_request(r->dialect) &&
                     v->status >= 200 && v->status <= 299;
    r->ops->set_drain_cb(r->hr, CLIENT_LOW, preq_on_drain, r);
    r->ops->reply_start(r->hr, v->status);
}

/*
 * The stream as it comes: the head once known, then what arrived, as long
 * as the client keeps up (above CLIENT_HIGH queued, the drain callback
 * brings it back); WAIT for more.
 */
static enum step deliver_streamed(struct preq *r)
{
    struct flight_view v;
    if (!r->started) {
        flight_sub_read(r->sub, &v, NULL, 0);
        if (v.state == FLIGHT_PENDING)
            return STEP_WAIT;
        if (v.state == FLIGHT_DONE && (v.result != 0 || v.status == 0)) {
            deliver_failure(r, &v);
            return to(r, PREQ_DONE);
        }
        stream_start(r, &v);
    }
    for (;;) {
        if (r->ops->reply_queued(r->hr) >= CLIENT_HIGH)
            return STEP_WAIT;
        pc_buf_reset(&r->resp);
        size_t n = flight_sub_read(r->sub, &v, &r->resp, RELAY_CHUNK);
        if (n > 0)
            relay(r, r->resp.data, n, false);
        if (r->ttfb_us < 0 && r->bytes_out > 0)
            r->ttfb_us = (int64_t)(pc_mono_us() - r->start_us);
        if (v.more)
            continue;
        if (v.state != FLIGHT_DONE)
            return STEP_WAIT;
        r->usage = v.usage;
        relay(r, NULL, 0, true);
        r->upstream_us = pc_mono_us() - r->upstream_start_us;
        flight_unsubscribe(&r->sub);
        if (v.result == 0) {
            r->ops->reply_end(r->hr);
        } else {
            /* Cut off upstream: the client must see a broken stream, not a complete one. */
            r->aborted = true;
            r->ops->reply_abort(r->hr);
        }
        r->hr = NULL;
        return to(r, PREQ_DONE);
    }
}

/* ---- cache hits ----------------------------------------------------------- */

/*
 * Body for the client from a decoded entry, in the client's mode; -1 if
 * unusable, DIALECT_OTHER_MODE_ONLY if it serves only the other mode (or,
 * recorded without usage when streams are not all asked for it, not a
 * client that asks for usage).
 */
static int hit_body(struct preq *r, const struct entry *e, struct pc_buf *out, const char **ctype)
{
    enum dialect_usage usage = !r->include_usage ? DIALECT_USAGE_OFF
                               : r->w->conf->stream_usage && r->w->backend->stream_usage
                                   ? DIALECT_USAGE_ON
                                   : DIALECT_USAGE_REQUIRED;
    *ctype = r->stream ? "text/event-stream" : "application/json";
    return dialect_answer(r->ep, e->kind == ENTRY_SSE, e->body, e->body_len, r->stream, usage, out);
}

/*
 * The upstream's headers kept with the entry, as the miss that stored it had
 * them (the allow-list is checked again: the entry came from Redis).
 */
static void add_stored_headers(struct preq *r, const struct entry *e)
{
    char name[ENTRY_HEADER_NAME_MAX + 1], value[ENTRY_HEADER_VALUE_MAX + 1];
    for (size_t i = 0; i < e->nheaders; i++) {
        const struct entry_header *h = &e->headers[i];
        memcpy(name, h->name, h->name_len);
        name[h->name_len] = '\0';
        memcpy(value, h->value, h->value_len);
        value[h->value_len] = '\0';
        if (api_header_replayable(name))
            add_header(r, name, value);
    }
}

/* Returns false if the entry cannot be served (then the caller fetches). */
static bool serve_hit(struct preq *r, const struct cache_result *res)
{
    const struct entry *e = res->entry;
    struct pc_buf body = PC_BUF_INIT;
    const char *ctype = NULL;
    char stored_ctype[HIT_CTYPE_MAX];
    int rc = hit_body(r, e, &body, &ctype);
    if (rc < 0) {
        pc_buf_free(&body);
        /* A sound entry that serves only the mode it was stored in is no corruption. */
        stats_incr(&r->w->stats,
                   rc == DIALECT_OTHER_MODE_ONLY ? STAT_cache_other_mode_only : STAT_cache_corrupt);
        return false;
    }
    struct worker *w = r->w;
    stats_incr(&w->stats, STAT_cache_hits);
    stats_incr(&w->stats, res->match == CACHE_MATCH_SEMANTIC ? STAT_cache_hits_semantic
                                                             : STAT_cache_hits_exact);
    stats_add(&w->stats, STAT_bytes_from_cache, (int64_t)body.len);
    if (e->usage.present) {
        stats_add(&w->stats, STAT_tokens_saved_prompt, e->usage.prompt);
        stats_add(&w->stats, STAT_tokens_saved_completion, e->usage.completion);
        if (res->match == CACHE_MATCH_SEMANTIC) {
            stats_add(&w->stats, STAT_tokens_saved_semantic_prompt, e->usage.prompt);
            stats_add(&w->stats, STAT_tokens_saved_semantic_completion, e->usage.completion);
        }
        r->saved = e->usage;
    }
    char age[21];
    r->age_s = res->age_ms > 0 ? res->age_ms / 1000 : 0;
    r->orig_latency_ms = e->latency_ms;
    pc_u64_dec((uint64_t)r->age_s, age);
    r->cache = PC_HIT;
    r->match = res->match;
    add_header(r, "X-Cache-Status", "HIT");
    add_header(r, "X-Cache-Match", cache_match_name(res->match));
    add_cache_key(r, res->exact);
    if (res->match == CACHE_MATCH_SEMANTIC) {
        char sim[16];
        snprintf(sim, sizeof(sim), "%.4f", res->similarity);
        add_header(r, "X-Cache-Similarity", sim);
    }
    add_header(r, "Age", age);
    add_stored_headers(r, e);
    /* Served in the mode it was fetched in: the upstream's own Content-Type. */
    if ((e->kind == ENTRY_SSE) == r->stream && e->content_type_len > 0 &&
        e->content_type_len < sizeof(stored_ctype)) {
        memcpy(stored_ctype, e->content_type, e->content_type_len);
        stored_ctype[e->content_type_len] = '\0';
        ctype = stored_ctype;
    }
    if (r->stream) /* the whole stream goes out at once */
        r->ttfb_us = (int64_t)(pc_mono_us() - r->start_us);
    reply_whole(r, e->status, ctype, body.data, body.len);
    pc_buf_free(&body);
    return true;
}

/* ---- request memory -------------------------------------------------------- */

/*
 * The request-memory budget (max-request-memory, kept by httpd) counts what
 * a request holds at its worst, not only its body. Every body byte is
 * charged proxy_body_charge() bytes as it arrives: the body itself, its parse
 * tree (for text, about the body's size), and PROXY_BODY_COPIES copies of
 * about its size alive at once: the body sent upstream twice (the hinted body
 * and libcurl's copy), or before that a canonical or segment text in a
 * doubling buffer; with semantic on, the last user turn's text too. A body of
 * many small values parses into far more than its size (a cJSON node per
 * value), so before parsing the tree is estimated from the text and the part
 * beyond the body's size is charged on top: a request over the budget gets a
 * 503 before it is parsed.
 */
#define PROXY_BODY_COPIES 3
#define JSON_NODE_COST    (sizeof(cJSON) + 16) /* a value, with malloc's header */
#define JSON_STRING_COST  32                   /* a string's NUL, malloc's header and rounding */

size_t proxy_body_charge(const struct conf *c)
{
    return 2 + PROXY_BODY_COPIES + (c->semantic ? 1 : 0);
}

/*
 * What cJSON allocates to parse p[0..n) (NUL-terminated), over-estimated in
 * one pass: a node per value (at most one per comma, '[' and '{', plus the
 * root) and a copy of every string, names included.
 */
static size_t parse_cost(const char *p, size_t n)
{
    size_t nodes = 1, strings = 0, string_bytes = 0, i = 0;
    while (i < n) {
        i += strcspn(p + i, "\",[{");
        if (i >= n)
            break;
        if (p[i++] != '"') {
            nodes++;
            continue;
        }
        size_t start = i;
        for (;;) { /* to the closing quote, past escapes */
            i += strcspn(p + i, "\"\\");
            if (i >= n || p[i] == '"')
                break;
            i += 2; /* a backslash and the byte it escapes */
            if (i >= n) {
                i = n;
                break;
            }
        }
        strings++;
        string_bytes += PC_MIN(i, n) - start;
        i++;
    }
    return nodes * JSON_NODE_COST + strings * JSON_STRING_COST + string_bytes;
}

/*
 * Charge the parse tree's estimate beyond what the body's charge covers. True
 * if the request may go on; false after answering 503 (with Retry-After).
 */
static bool charge_parse(struct preq *r, const char *body, size_t len)
{
    size_t tree = parse_cost(body, len);
    if (tree <= len || r->ops->req_charge(r->hr, tree - len) == 0)
        return true;
    add_header(r, "Retry-After", "1");
    reply_error(r, 503,
                "server busy: the requests in flight use all of the request memory; "
                "retry later");
    return false;
}

/* ---- RECV ------------------------------------------------------------------- */

/* 413 in the shape of the API that was called. */
static bool reject_oversize(struct preq *r)
{
    if (r->ops->req_error(r->hr) != HTTPD_REQ_BODY_TOO_LARGE)
        return false;
    reply_error(r, 413, "request body is larger than the proxy's max-body-size (%lld bytes)",
                (long long)r->w->conf->max_body_size);
    return true;
}

/*
 * CORS (cors-origins): answer a preflight here, or mark an answer to an
 * allowed origin. True if the request was answered.
 */
static bool preq_cors(struct preq *r)
{
    const struct conf_list *origins = &r->w->conf->cors_origins;
    if (origins->n == 0)
        return false; /* off: OPTIONS and the upstream's CORS headers pass through */
    const char *origin = req_header(r, "Origin");
    const char *allow = cors_allow_origin(origins, origin);
    if (!cors_is_preflight(r->method, origin, req_header(r, "Access-Control-Request-Method"))) {
        if (allow != NULL)
            cors_add_headers(r->hr, allow);
        return false;
    }
    stats_incr(&r->w->stats, STAT_cors_preflights);
    if (allow == NULL) {
        reply_error(r, 403, "origin not allowed by the proxy's cors-origins");
        return true;
    }
    cors_add_preflight(r->hr, allow, req_header(r, "Access-Control-Request-Headers"));
    reply_whole(r, 204, NULL, NULL, 0);
    return true;
}

/*
 * RECV: what every request meets first (CORS, the refusal of upgrades, the
 * size limit), then its way: an API endpoint's body is parsed; anything
 * else passes through untouched, never cached or shared.
 */
static enum step step_recv(struct preq *r)
{
    if (preq_cors(r))
        return to(r, PREQ_DONE);
    const char *upgrade = req_header(r, "Upgrade");
    if (upgrade != NULL && strcasestr(upgrade, "websocket") != NULL) {
        reply_error(r, 501, "WebSocket upgrades are not supported by the proxy");
        return to(r, PREQ_DONE);
    }
    if (r->ep == API_NONE) {
        stats_incr(&r->w->stats, STAT_requests_passthrough);
        if (reject_oversize(r))
            return to(r, PREQ_DONE);
        req_body(r, &r->bytes_in);
        r->cache = PC_BYPASS;
        return go_fetch(r, false, false);
    }
    stats_incr(&r->w->stats, STAT_requests_cacheable);
    if (reject_oversize(r))
        return to(r, PREQ_DONE);
    return to(r, PREQ_PARSE);
}

/* ---- PARSE ------------------------------------------------------------------ */

/*
 * The first content coding other than identity among the request's
 * Content-Encoding fields (every one of them, each a list), copied into buf;
 * false if there is none. The body is never decoded: the key, the guards and
 * the semantic text are made from the JSON, so a compressed body (gzip,
 * deflate, br, ...) is refused with a 415 rather than read as JSON.
 */
static bool body_coding(const struct preq *r, char *buf, size_t size)
{
    for (size_t i = 0, n = req_header_count(r); i < n; i++) {
        const struct httpd_header *hd = req_header_at(r, i);
        if (!pc_strcaseeq(hd->name, "Content-Encoding"))
            continue;
        for (const char *p = hd->value; *p;) {
            p += strspn(p, " \t,");
            size_t len = strcspn(p, ",");
            size_t end = len;
            while (end > 0 && (p[end - 1] == ' ' || p[end - 1] == '\t'))
                end--;
            if (end > 0 && !(end == 8 && pc_strncaseeq(p, "identity", 8))) {
                snprintf(buf, size, "%.*s", (int)PC_MIN(end, (size_t)64), p);
                return true;
            }
            p += len;
        }
    }
    return false;
}

/*
 * The raw body's checks, before anything is built from it: media type,
 * content coding, not empty, no NUL byte, memory for its parse tree. False
 * after an error reply.
 */
static bool body_acceptable(struct preq *r, const char **body, size_t *len)
{
    const char *ct = req_header(r, "Content-Type");
    if (ct != NULL && !is_json_media_type(ct)) {
        reply_error(r, 415, "Content-Type must be application/json");
        return false;
    }
    char coding[80];
    if (body_coding(r, coding, sizeof(coding))) {
        reply_error(r, 415,
                    "Content-Encoding %s is not supported: send the request body uncompressed",
                    coding);
        return false;
    }
    *body = req_body(r, len);
    r->bytes_in = *len;
    if (*len == 0) {
        reply_error(r, 400, "request body is empty; a JSON object is required");
        return false;
    }
    if (strlen(*body) != *len) {
        reply_error(r, 400, "request body is not valid JSON (it contains a NUL byte)");
        return false;
    }
    return charge_parse(r, *body, *len);
}

/*
 * The body parsed (strictly: nothing but white space may follow the value;
 * httpd NUL-terminates bodies; then RFC 8259's rules: pc_json_strict) and validated, the controls
 * read, model, stream and usage noted. False after an error reply.
 */
static bool parse_body(struct preq *r, const char *body, size_t len)
{
    char msg[256];
    const char *end = NULL;
    r->body = cJSON_ParseWithLengthOpts(body, len + 1, &end, 1);
    if (r->body == NULL) {
        reply_error(r, 400, "request body is not valid JSON (error near byte %zu)",
                    end ? (size_t)(end - body) : (size_t)0);
        return false;
    }
    /*
     * What cJSON lets through but RFC 8259 (and the upstreams' parsers) do
     * not: refused, so that `007` never shares `7`'s key and cached answer.
     */
    if (!pc_json_strict(body, len, msg, sizeof(msg))) {
        reply_error(r, 400, "request body is not valid JSON: %s", msg);
        return false;
    }
    /*
     * cJSON cuts strings at \u0000, so such bodies could share a key: never
     * cache them. Nor a body with a byte order mark, which upstreams' parsers
     * ignore or refuse (RFC 8259 allows both): it shares the key of the body
     * without it, whose answer must not be served for it. The upstream decides.
     */
    r->key_unsafe = memmem(body, len, "\\u0000", 6) != NULL ||
                    (len >= 3 && memcmp(body, "\xEF\xBB\xBF", 3) == 0);
    if (api_validate(r->ep, r->body, msg, sizeof(msg)) < 0 ||
        parse_controls(r, msg, sizeof(msg)) < 0) {
        reply_error(r, 400, "%s", msg);
        return false;
    }
    const char *model = api_model(r->body);
    r->model = model ? pc_strdup(model) : NULL;
    r->stream = api_wants_stream(r->ep, r->body);
    r->include_usage = api_stream_include_usage(r->ep, r->body);
    const char *why = NULL;
    if (!api_cacheable_request(r->ep, r->body, &why)) {
        log_write(PC_LOG_DEBUG, r->id, "not cacheable: %s", why);
        stats_incr(&r->w->stats, STAT_requests_uncacheable);
        r->never_cache = true;
    }
    return true;
}

/*
 * The tenant and the inputs beside the body (r->variant), and the memo's
 * view of them (r->memo; hashed into r->memo_hash when memoise).
 */
static void note_inputs(struct preq *r, bool memoise)
{
    compute_tenant(r);
    compute_variant(r, &r->variant);
    r->memo = memo_input_of(r, &r->variant);
    r->memo_hash = memoise ? memo_hash(&r->memo) : 0;
}

/*
 * Whether the tenant depends on the parsed body: the Responses API's always
 * ("store"); a chat or Messages request's in a shared namespace when its raw
 * text cannot tell whether it names an upload (a \u escape may spell
 * "file_id": api_account_bound_needs_body).
 */
static bool tenant_needs_body(struct preq *r, const char *body, size_t len)
{
    const char *ns = req_header(r, "X-Cache-Namespace");
    if (r->ep == API_RESPONSES)
        return true;
    return ns != NULL && namespace_shared(r->w->conf, ns) &&
           api_account_bound_needs_body(r->ep, body, len);
}

/*
 * PARSE: the body; or, for a body read before with the same tenant and
 * inputs, the memo's facts about it (then it stays unparsed: preq_body). A
 * tenant that depends on the body (tenant_needs_body) makes the inputs wait
 * for KEYS, and they are never memoised.
 */
static enum step step_parse(struct preq *r)
{
    const char *body = NULL;
    size_t len = 0;
    if (!body_acceptable(r, &body, &len))
        return to(r, PREQ_DONE);
    r->late_tenant = tenant_needs_body(r, body, len);
    if (!r->late_tenant) {
        note_inputs(r, true);
        if (keys_from_memo(r, &r->memo, r->memo_hash)) {
            char msg[256];
            if (parse_controls(r, msg, sizeof(msg)) == 0)
                return to(r, PREQ_KEYS);
            reply_error(r, 400, "%s", msg);
            return to(r, PREQ_DONE);
        }
    }
    if (!parse_body(r, body, len))
        return to(r, PREQ_DONE);
    return to(r, PREQ_KEYS);
}

/* ---- KEYS ------------------------------------------------------------------- */

/* KEYS: the exact key and partition (unless the memo gave them); then the cache's part. */
static enum step step_keys(struct preq *r)
{
    struct worker *w = r->w;
    if (!r->have_keys) {
        if (r->late_tenant)
            note_inputs(r, false);
        compute_keys(r, &r->memo, r->memo_hash);
    }
    memset(&r->memo, 0, sizeof(r->memo)); /* it points into the variant */
    pc_buf_free(&r->variant);
    if (!w->conf->cache || r->mode == MODE_OFF || r->key_unsafe || r->never_cache)
        return bypass(r, true);
    if (!r->no_cache)
        return to(r, PREQ_LOOKUP);
    /* no-cache: not looked up, but the fresh answer is stored (REFRESH) */
    if (!r->ops->cache_ready(w->cache))
        return bypass(r, true);
    struct cache_query q;
    cache_query_of(r, &q);
    r->cache = PC_REFRESH;
    stats_incr(&w->stats, STAT_cache_refreshes);
    r->ticket = cache_ticket_create(w->cache, &q);
    return go_fetch(r, false, !r->no_store);
}

/* ---- LOOKUP ----------------------------------------------------------------- */

/* Completion: the lookup's result, whose entry is valid during this callback only. */
static void preq_on_lookup(void *arg, struct cache_result *res)
{
    struct preq *r = arg;
    PC_CHECK_OBJ(r, PREQ_MAGIC);
    r->lookup = NULL;
    r->res = res;
    preq_drive(r);
    r->res = NULL;
}

/*
 * The lookup's result: a hit is delivered at once (its entry lives as long
 * as the callback), a miss fetched and stored; without Redis, a bypass.
 */
static enum step lookup_done(struct preq *r)
{
    const struct cache_result *res = r->res;
    struct stat_labels l = {.cache = res->outcome == CACHE_HIT    ? SC_HIT
                                     : res->outcome == CACHE_MISS ? SC_MISS
                                                                  : SC_BYPASS};
    stats_observe(&r->w->stats, SF_lookup_duration_seconds, &l,
                  (int64_t)(pc_mono_us() - r->lookup_start_us));
    r->ticket = res->ticket;
    r->probe = bound_probe_ref(res->probe);
    if (res->outcome == CACHE_UNAVAILABLE)
        return bypass(r, false);
    if (res->outcome == CACHE_HIT)
        return to(r, PREQ_DELIVER);
    return miss(r);
}

/*
 * LOOKUP: start the lookup, whose completion re-enters here with the
 * result (r->res) - before cache_lookup returns when the L1 answers.
 */
static enum step step_lookup(struct preq *r)
{
    if (r->res != NULL)
        return lookup_done(r);
    struct cache_query q;
    cache_query_of(r, &q);
    r->lookup_start_us = pc_mono_us();
    if (r->ops->cache_lookup(r->w->cache, &q, preq_on_lookup, r, &r->lookup) < 0)
        return bypass(r, false); /* Redis not ready */
    return STEP_WAIT;
}

/* ---- FETCH ------------------------------------------------------------------ */

/* The digest of the body exactly as the client sent it (refused_for_another), once. */
static const unsigned char *asked_digest(struct preq *r)
{
    if (!r->have_asked) {
        size_t len = 0;
        const char *body = req_body(r, &len);
        pc_sha256(body != NULL ? body : "", body != NULL ? len : 0, r->asked);
        r->have_asked = true;
    }
    return r->asked;
}

/*
 * The coalescing key (NULL: a call of its own): everything that shapes the
 * bytes a waiter receives - the exact key, the reply mode, whether usage
 * was asked for, and who asks (in a shared namespace, an error or headers of
 * one credential must not reach another; only stored answers are shared
 * there). A request that left a refused call (alone) adds its body's
 * digest: it shares only with requests that left it with the same body.
 */
static const unsigned char *flight_key(struct preq *r, unsigned char out[PC_SHA256_LEN])
{
    if (!r->share || !r->w->conf->coalesce || !r->have_keys)
        return NULL;
    unsigned char material[3 * PC_SHA256_LEN + 2];
    memcpy(material, r->keys.exact, PC_SHA256_LEN);
    memcpy(material + PC_SHA256_LEN, r->credential, PC_SHA256_LEN);
    size_t n = 2 * PC_SHA256_LEN;
    material[n++] = r->stream ? 1 : 0;
    material[n++] = r->include_usage ? 1 : 0;
    if (r->alone) {
        memcpy(material + n, asked_digest(r), PC_SHA256_LEN);
        n += PC_SHA256_LEN;
    }
    pc_sha256(material, n, out);
    return out;
}

/*
 * Whether the call names a response a replica stored: a Responses request
 * chaining on previous_response_id, or /v1/responses/ID (retrieve, cancel,
 * delete, its input items). Each replica keeps its own responses.
 */
static bool names_stored_response(struct preq *r)
{
    if (r->ep == API_RESPONSES) {
        const cJSON *prev = api_member(preq_body(r), "previous_response_id");
        return prev != NULL && !cJSON_IsNull(prev);
    }
    const char *t = r->ops->req_target(r->hr);
    return r->ep == API_NONE && t != NULL && strncmp(t, "/v1/responses/", 14) == 0 && t[14] != '\0';
}

/* Lead the call: what prefix reuse needs, then the fetch (which takes the ticket to store). */
static void start_fetch(struct preq *r)
{
    struct worker *w = r->w;
    if (r->ep != API_NONE)
        compute_prefix(r); /* only for calls that go upstream: hits never pay for it */
    struct xfer_header hdrs[MAX_FWD_HEADERS];
    size_t nh = client_headers(r, hdrs, MAX_FWD_HEADERS);
    size_t blen = 0;
    const char *body = req_body(r, &blen);
    struct fetch_req fr = {
        .method = r->ops->req_method(r->hr),
        .target = r->ops->req_target(r->hr),
        .headers = hdrs,
        .nheaders = nh,
        .body = body,
        .body_len = blen,
        .reqid = r->id,
        /* Not to be stored, the ticket still carries the error bound's probe: compared. */
        .ticket = r->store || r->probe != NULL ? r->ticket : NULL,
        .compare_only = !r->store,
        .ttl_ms = r->ttl * 1000,
        .endpoint = r->ep,
        .stream = r->stream,
        .model = r->model,
        .tenant_id = r->tenant_id,
        .chain = &r->chain,
        .kv_tenant = w->conf->prefix_share_tenants || r->ep == API_NONE ? NULL : r->credential,
        .session = r->session,
        .ask_usage = r->ask_usage,
        .stored_response = names_stored_response(r),
    };
    if (r->ask_usage)
        stats_incr(&w->stats, STAT_stream_usage_added);
    if (fr.ticket != NULL)
        r->ticket = NULL; /* the fetch owns it now */
    r->ops->fetch_start(w, flight_sub_flight(r->sub), &fr);
}

/*
 * The purge fences (pc_fence.h) for the flight: a call begun before a purge of this
 * request's key (one entry's, or any other purge: it may delete every key) brings the
 * answer the purge was for. A request asked after the purge does not join it (its client,
 * having purged, asks again for an answer made since): it makes its own call, which later
 * requests may join. One that joined before the purge keeps the call's answer, as the
 * call's own client does: both asked before it. A call's mark is taken as it begins, not
 * at its lookup: a call begun after the purge brings an answer made after it, even when
 * its lookup came before (that answer is not stored, its ticket's mark is the lookup's, but
 * it is a fresh one, to be shared). A purge that lands between the two reads is either one
 * this request asked before (it may join a call begun before it) or one that keeps later
 * requests out of the call it leads: never an answer made before it served after it.
 */
static struct flight_fence flight_fence_of(const struct preq *r)
{
    const struct fence *f = r->w->fence;
    struct flight_fence fence;
    fence.purged = fence_last(f, r->keys.exact);
    fence.now = fence_now(f);
    return fence;
}

/* FETCH: join an identical call in flight, or lead a new one; the flight's news drive DELIVER. */
static enum step step_fetch(struct preq *r)
{
    struct worker *w = r->w;
    r->relay_streamed = r->ep == API_NONE || r->stream;
    r->upstream_start_us = pc_mono_us();
    unsigned char fkey[PC_SHA256_LEN];
    bool leader = false;
    const unsigned char *key = flight_key(r, fkey);
    struct flight_fence fence = key != NULL ? flight_fence_of(r) : (struct flight_fence){0};
    r->sub = flight_subscribe(key, key != NULL ? asked_digest(r) : NULL, &fence, w->base,
                              preq_on_flight, r, &leader);
    r->state = PREQ_DELIVER;
    r->share_checked = r->alone; /* a call shared only with this very body */
    if (leader) {
        start_fetch(r);
    } else {
        r->coalesced = true;
        stats_incr(&w->stats, STAT_coalesced);
    }
    return STEP_WAIT;
}

/* ---- DELIVER ---------------------------------------------------------------- */

/* A hit, during the lookup's callback; an entry that does not render is a miss. */
static enum step deliver_hit(struct preq *r)
{
    if (serve_hit(r, r->res))
        return to(r, PREQ_DONE);
    r->res = NULL;
    return miss(r);
}

/*
 * Whether a refusal answers only the request it was made for. The
 * coalescing key leaves out what the exact key leaves out (service_tier,
 * metadata, user, store, ...: canon.c), and what cache-key-headers does not
 * list, since none of it changes a generated answer; but the upstream checks
 * those members too, and a bogus one earns its request a 400 that says
 * nothing of a request without it. So a client error (4xx) answers only the
 * requests whose body is byte-identical to the one the call sent; any other
 * that joined makes its own call.
 *
 * Shared with every request of the call, identical or not:
 * - 429 (and 408): a rate or quota limit is the credential's, and the
 *   credential is in the key: another call now would be refused alike and
 *   spend more of the limit; 408 is the upstream's timeout on the
 *   connection, not a verdict on the body.
 * - 5xx and failures of the call (timeouts, resets: our 502 and 504): the
 *   upstream's trouble, the same for every request; a call per waiter would
 *   only multiply the load on an upstream already failing.
 * - 2xx: the answer the cache would serve every one of them a moment later.
 */
static bool refusal_of_the_body(int status)
{
    return status >= 400 && status <= 499 && status != 408 && status != 429;
}

/* Whether the answer's head (v) of the call this request joined is a refusal of another body. */
static bool refused_for_another(struct preq *r, const struct flight_view *v)
{
    return v->status != 0 && refusal_of_the_body(v->status) &&
           !flight_asked_same(r->sub, asked_digest(r));
}

/*
 * Leave the call joined (refused for another body) for one of this
 * request's own: FETCH again, alone (flight_key), with the ticket the
 * lookup gave it, so its answer is stored like any miss's. Nothing has
 * reached the client yet.
 */
static enum step call_alone(struct preq *r, int status)
{
    log_write(PC_LOG_DEBUG, r->id,
              "the call joined was refused (%d) for a body other than this one: calling again",
              status);
    flight_unsubscribe(&r->sub);
    r->coalesced = false;
    r->alone = true;
    stats_incr(&r->w->stats, STAT_coalesce_retries);
    return to(r, PREQ_FETCH);
}

/*
 * DELIVER: the hit, or what the flight has for the client now. A request
 * that joined another's call first waits for its head, to tell whether the
 * answer is its own (refusal_of_the_body).
 */
static enum step step_deliver(struct preq *r)
{
    if (r->res != NULL)
        return deliver_hit(r);
    if (r->coalesced && !r->share_checked) {
        struct flight_view v;
        flight_sub_read(r->sub, &v, NULL, 0);
        if (v.state == FLIGHT_PENDING)
            return STEP_WAIT;
        r->share_checked = true;
        if (refused_for_another(r, &v))
            return call_alone(r, v.status);
    }
    if (r->relay_streamed)
        return deliver_streamed(r);
    return deliver_whole(r);
}

/* Completion: the flight has news (the head, more bytes, the end). */
static void preq_on_flight(struct flight_sub *sub, void *arg)
{
    (void)sub;
    struct preq *r = arg;
    PC_CHECK_OBJ(r, PREQ_MAGIC);
    if (r->state == PREQ_DELIVER)
        preq_drive(r);
}

/* Completion: the client took the output queued for it; relay more. */
static void preq_on_drain(struct httpd_req *hr, void *arg)
{
    (void)hr;
    struct preq *r = arg;
    PC_CHECK_OBJ(r, PREQ_MAGIC);
    if (r->state == PREQ_DELIVER && r->sub != NULL)
        preq_drive(r);
}

/* ---- entry points ----------------------------------------------------------- */

/* "%08x%02x%08llx" of the process prefix, worker and sequence, by hand in the usual case. */
static void request_id(struct worker *w, char out[32])
{
    uint64_t seq = ++w->seq;
    if (w->id < 0 || w->id > 0xff || seq > 0xffffffffu) {
        snprintf(out, 32, "%08x%02x%08llx", w->id_prefix, (unsigned)w->id, (unsigned long long)seq);
        return;
    }
    unsigned char b[9] = {
        (unsigned char)(w->id_prefix >> 24),
        (unsigned char)(w->id_prefix >> 16),
        (unsigned char)(w->id_prefix >> 8),
        (unsigned char)w->id_prefix,
        (unsigned char)w->id,
        (unsigned char)(seq >> 24),
        (unsigned char)(seq >> 16),
        (unsigned char)(seq >> 8),
        (unsigned char)seq,
    };
    pc_hex(b, sizeof(b), out);
}

void proxy_serve(struct worker *w, struct httpd_req *hr, const struct proxy_ops *ops)
{
    const char *path = ops->req_path(hr);
    struct preq *r = pc_calloc(1, sizeof(*r));
    r->magic = PREQ_MAGIC;
    r->w = w;
    r->ops = ops;
    r->hr = hr;
    r->start_us = ops->req_start_us(hr);
    r->ttfb_us = -1;
    pc_strlcpy(r->method, ops->req_method(hr), sizeof(r->method));
    r->path = pc_strdup(path);
    request_id(w, r->id);
    stats_add(&w->stats, STAT_requests_active, 1);
    ops->set_close_cb(hr, preq_on_close, r);
    /* Only POSTs are answers to cache; other methods on these paths (OpenAI's
     * GET /v1/chat/completions lists stored completions) pass through. */
    r->ep = strcmp(ops->req_method(hr), "POST") == 0 ? api_endpoint_from_path(path) : API_NONE;
    r->dialect = dialect_of_path(path, req_header(r, "anthropic-version") != NULL);
    /* Every answer from here on, hit, miss or error, names its access log line. */
    add_header(r, "X-Promptcache-Request-Id", r->id);
    preq_drive(r);
}

void proxy_handle(struct httpd_req *hr, void *arg)
{
    struct worker *w = arg;
    PC_CHECK_OBJ(w, WORKER_MAGIC);
    stats_incr(&w->stats, STAT_requests_total);
    if (admin_owns_path(httpd_req_path(hr))) {
        stats_incr(&w->stats, STAT_requests_admin);
        admin_handle(w, hr);
        return;
    }
    proxy_serve(w, hr, &proxy_ops_real);
}

const struct proxy_ops proxy_ops_real = {
    .req_method = httpd_req_method,
    .req_target = httpd_req_target,
    .req_path = httpd_req_path,
    .req_query = httpd_req_query,
    .req_header = httpd_req_header,
    .req_header_count = httpd_req_header_count,
    .req_header_at = httpd_req_header_at,
    .req_body = httpd_req_body,
    .req_error = httpd_req_error,
    .req_charge = httpd_req_charge,
    .req_start_us = httpd_req_start_us,
    .add_header = httpd_add_header,
    .reply = httpd_reply,
    .reply_start = httpd_reply_start,
    .reply_chunk = httpd_reply_chunk,
    .reply_end = httpd_reply_end,
    .reply_abort = httpd_reply_abort,
    .reply_queued = httpd_reply_queued,
    .set_drain_cb = httpd_set_drain_cb,
    .set_close_cb = httpd_set_close_cb,
    .cache_ready = cache_ready,
    .cache_lookup = cache_lookup,
    .cache_cancel = cache_cancel,
    .fetch_start = fetch_start,
};
