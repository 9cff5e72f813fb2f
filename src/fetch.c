/*
 * fetch.c - the upstream call behind a flight (see pc_fetch.h). Owns the
 * struct fetch, its xfer and its two events (resume, abort) on the worker's
 * base, and one reference to the flight.
 *
 *   fetch_start ─▶ xfer_start ─▶ on_head ─▶ flight_set_head
 *                               on_data ─▶ flight_append (PAUSE ⇄ resume_ev)
 *                               on_done ─▶ flight_finish ─▶ store (2xx, complete)
 *   abort_ev (last subscriber left) ─▶ xfer_abort ─▶ flight_finish(aborted)
 */
#include "pc_fetch.h"
#include "pc_conf.h"
#include "pc_flight.h"
#include "pc_log.h"
#include "pc_sse.h"
#include "pc_store.h"
#include "pc_tally.h"
#include "pc_worker.h"

#include <string.h>

#include <event2/event.h>

#define FETCH_MAGIC 0x46455443u /* "FETC" */

struct fetch {
    unsigned magic;
    struct worker *w;
    struct flight *fl;
    struct xfer *x;
    struct event *resume_ev;
    struct event *abort_ev;
    const struct target *target;
    char reqid[32];
    uint64_t start_us;

    bool store; /* still a candidate for the cache */
    char store_key[ENTRY_KEY_MAX];
    int64_t ttl_ms;
    enum api_endpoint endpoint;
    bool stream;
    int status;
    char *content_type;
    size_t received;
    bool trimming;                   /* over cache-max-entry-size: no longer recorded */
    char model[TALLY_MODEL_MAX + 1]; /* for the per-model/tenant usage counts */
    char tenant[TENANT_ID_LEN + 1];
    struct store_cmd *store_cmd; /* the SET of the answer, while Redis acknowledges it */
    struct fetch *next;          /* the worker's list of running calls */
    struct fetch *prev;
};

/*
 * Response headers never relayed: hop-by-hop ones (also those the upstream's
 * Connection header names), those httpd sets itself, and the proxy's own
 * cache headers (an upstream that is itself a promptcache must not speak for
 * this one).
 */
static bool response_header_dropped(const char *name, const char *conn_tokens)
{
    static const char *const dropped[] = {
        "content-length", "date", "server", "age", "x-upstream",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(dropped); i++)
        if (pc_strcaseeq(name, dropped[i]))
            return true;
    return pc_hop_by_hop(name) || pc_strncaseeq(name, "x-cache-", 8) ||
           pc_token_list_has(conn_tokens, name);
}

static void fetch_free(struct fetch *f)
{
    store_cancel(&f->store_cmd);
    if (f->fl != NULL)
        flight_fetch_bind(f->fl, NULL, NULL);
    if (f->resume_ev != NULL)
        event_free(f->resume_ev);
    if (f->abort_ev != NULL)
        event_free(f->abort_ev);
    flight_put(&f->fl);
    free(f->content_type);
    struct worker *w = f->w;
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        w->fetch_list = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    w->fetches--;
    f->magic = 0;
    free(f);
    worker_check_idle(w);
}

static void on_head(void *arg, int status, const struct xfer_header *h, size_t nh)
{
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    const char *conn = NULL;
    for (size_t i = 0; i < nh; i++)
        if (pc_strcaseeq(h[i].name, "connection"))
            conn = h[i].value;
    struct flight_header *hdrs = pc_calloc(nh ? nh : 1, sizeof(*hdrs));
    size_t n = 0;
    for (size_t i = 0; i < nh; i++) {
        if (response_header_dropped(h[i].name, conn))
            continue;
        if (pc_strcaseeq(h[i].name, "content-type") && f->content_type == NULL)
            f->content_type = pc_strdup(h[i].value);
        /* An encoded body would be stored without its encoding header. */
        if (pc_strcaseeq(h[i].name, "content-encoding") && !pc_strcaseeq(h[i].value, "identity"))
            f->store = false;
        hdrs[n].name = pc_strdup(h[i].name);
        hdrs[n].value = pc_strdup(h[i].value);
        n++;
    }
    f->status = status;
    if (status < 200 || status > 299)
        f->store = false;
    if (status >= 500)
        stats_incr(&f->w->stats, STAT_upstream_5xx);
    flight_set_head(f->fl, status, hdrs, n, f->target->name);
}

static int on_data(void *arg, const char *data, size_t len)
{
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    if (flight_append(f->fl, data, len) == FLIGHT_PAUSE)
        return XFER_PAUSE;
    f->received += len;
    if (!f->trimming && f->received > (size_t)f->w->conf->cache_max_entry_size) {
        /* Too big to cache or share: relay it, and let the log shrink as it is read. */
        f->store = false;
        f->trimming = true;
        flight_stop_recording(f->fl);
    }
    return XFER_CONTINUE;
}

/* The answer's usage, and whether it is complete enough to be cached. */
static bool answer_usage(const struct fetch *f, const struct pc_buf *body, struct api_usage *u)
{
    memset(u, 0, sizeof(*u));
    if (f->stream) {
        cJSON *resp = sse_assemble(f->endpoint, body->data, body->len, u);
        if (resp == NULL)
            return false;
        cJSON_Delete(resp);
        return true;
    }
    cJSON *resp = cJSON_ParseWithLength(body->data, body->len);
    if (resp == NULL || !cJSON_IsObject(resp)) {
        cJSON_Delete(resp);
        return false;
    }
    api_usage_from_response(f->endpoint, resp, u);
    cJSON_Delete(resp);
    return true;
}

static void account_usage(struct fetch *f, const struct api_usage *u)
{
    if (!u->present)
        return;
    struct worker *w = f->w;
    stats_add(&w->stats, STAT_tokens_upstream_prompt, u->prompt);
    stats_add(&w->stats, STAT_tokens_upstream_completion, u->completion);
    stats_add(&w->stats, STAT_tokens_upstream_cached, u->cached);
    int64_t v[TALLY__COUNT] = {0};
    v[TALLY_upstream_prompt_tokens] = u->prompt;
    v[TALLY_upstream_completion_tokens] = u->completion;
    tally_add(w->tally, f->model, f->tenant, true, v);
}

/* The one way a fetch ends: stop the call, tell every waiter, free. */
static void fetch_end(struct fetch *f, int result, const char *errmsg)
{
    xfer_abort(&f->x);
    flight_finish(f->fl, result, errmsg);
    fetch_free(f);
}

static void on_stored(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    f->store_cmd = NULL;
    stats_incr(&f->w->stats, st == STORE_OK ? STAT_cache_stores : STAT_cache_store_skipped);
    fetch_end(f, XFER_OK, NULL);
}

/*
 * Account a complete 2xx answer and, if it may be cached, send it to Redis.
 * Returns true if a SET is on its way (on_stored finishes the flight).
 */
static bool store_answer(struct fetch *f, uint64_t latency_us)
{
    if (f->endpoint == API_NONE)
        return false; /* pass-through: neither accounted nor stored */
    const struct pc_buf *body = flight_body(f->fl);
    struct api_usage usage;
    bool usable = body != NULL && body->len > 0 && answer_usage(f, body, &usage);
    if (usable)
        account_usage(f, &usage);
    if (!f->store || !usable)
        return false;
    const char *ctype =
        f->content_type ? f->content_type : (f->stream ? "text/event-stream" : "application/json");
    struct entry e = {
        .kind = f->stream ? ENTRY_SSE : ENTRY_JSON,
        .endpoint = f->endpoint,
        .status = f->status,
        .created_ms = pc_wall_ms(),
        .latency_ms = (uint32_t)PC_MIN(latency_us / 1000, UINT32_MAX),
        .usage = usage,
        .content_type = ctype,
        .content_type_len = strlen(ctype),
        .body = body->data,
        .body_len = body->len,
    };
    struct pc_buf val = PC_BUF_INIT;
    entry_encode(&e, &val);
    f->store_cmd = store_set_cb(f->w->store, f->store_key, strlen(f->store_key), val.data, val.len,
                                f->ttl_ms, on_stored, f);
    pc_buf_free(&val);
    return f->store_cmd != NULL;
}

/*
 * The call ended. A cacheable answer is stored before the flight finishes, so
 * that once a client has its whole answer, the same request hits the cache.
 */
static void on_done(void *arg, enum xfer_result result, const char *errmsg)
{
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    f->x = NULL;
    uint64_t latency = pc_mono_us() - f->start_us;
    if (result != XFER_OK)
        log_write(PC_LOG_WARN, f->reqid, "upstream %s: %s", f->target->name,
                  errmsg ? errmsg : "failed");
    if (result == XFER_OK && f->status >= 200 && f->status <= 299 && store_answer(f, latency))
        return;
    if (f->store_key[0] != '\0') /* wanted in the cache, but an error, cut off or too large */
        stats_incr(&f->w->stats, STAT_cache_store_skipped);
    fetch_end(f, result, errmsg);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    if (f->x != NULL)
        xfer_resume(f->x);
}

static void on_abort(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    if (f->store_cmd != NULL)
        return; /* the answer is complete and on its way to Redis: let it land */
    log_write(PC_LOG_INFO, f->reqid,
              "no client waits for the answer any more: upstream call aborted");
    fetch_end(f, XFER_ERR_INTERNAL, "aborted: every client went away");
}

static const struct xfer_ops fetch_ops = {on_head, on_data, on_done};

static const struct target *pick_target(struct worker *w)
{
    const struct target *t = &w->targets[w->rr % w->ntargets];
    w->rr++;
    return t;
}

void fetch_start(struct worker *w, struct flight *fl, const struct fetch_req *req)
{
    struct fetch *f = pc_calloc(1, sizeof(*f));
    f->magic = FETCH_MAGIC;
    f->w = w;
    w->fetches++;
    f->next = w->fetch_list;
    if (w->fetch_list != NULL)
        w->fetch_list->prev = f;
    w->fetch_list = f;
    flight_get(fl);
    f->fl = fl;
    f->target = pick_target(w);
    snprintf(f->reqid, sizeof(f->reqid), "%s", req->reqid ? req->reqid : "-");
    f->start_us = pc_mono_us();
    f->endpoint = req->endpoint;
    f->stream = req->stream;
    tally_model(req->model, f->model);
    snprintf(f->tenant, sizeof(f->tenant), "%s", req->tenant_id ? req->tenant_id : "");
    f->ttl_ms = req->ttl_ms;
    if (req->store_key != NULL) {
        f->store = true;
        snprintf(f->store_key, sizeof(f->store_key), "%s", req->store_key);
    }
    f->resume_ev = event_new(w->base, -1, 0, on_resume, f);
    f->abort_ev = event_new(w->base, -1, 0, on_abort, f);
    if (f->resume_ev == NULL || f->abort_ev == NULL) {
        log_error("out of memory creating fetch events");
        abort();
    }

    struct pc_buf url = PC_BUF_INIT;
    pc_buf_append_str(&url, f->target->base_url);
    pc_buf_append_str(&url, req->target);
    struct xfer_req xr = {
        .method = req->method,
        .url = pc_buf_cstr(&url),
        .headers = req->headers,
        .nheaders = req->nheaders,
        .body = req->body,
        .body_len = req->body_len,
        .timeout = w->conf->upstream_timeout,
        .connect_timeout = w->conf->upstream_connect_timeout,
    };
    f->x = xfer_start(w->up, &xr, &fetch_ops, f);
    pc_buf_free(&url);
    if (f->x == NULL) {
        fetch_end(f, XFER_ERR_INTERNAL, "could not start the upstream call");
        return;
    }
    /* Bind last: an abandoned flight fires abort_ev right away. */
    flight_fetch_bind(fl, f->resume_ev, f->abort_ev);
}

void fetch_abort_all(struct worker *w)
{
    while (w->fetch_list != NULL) {
        struct fetch *f = w->fetch_list;
        PC_CHECK_OBJ(f, FETCH_MAGIC);
        fetch_end(f, XFER_ERR_INTERNAL, "proxy shutting down");
    }
}
