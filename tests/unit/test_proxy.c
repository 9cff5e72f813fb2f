/*
 * test_proxy.c - the request state machine (proxy.c) driven through its ops
 * table with fakes: a client request that records the reply, a cache whose
 * lookups the test completes (or answers at once, as the L1 does), and a
 * fetch whose upstream the test plays through the real flight (head, bytes,
 * end). No socket, Redis or upstream: every completion is the test's, and
 * the event loop only delivers the flight's news and the deferred frees.
 */
#include "pc_backend.h"
#include "pc_bound.h"
#include "pc_cache.h"
#include "pc_conf.h"
#include "pc_entry.h"
#include "pc_fence.h"
#include "pc_fetch.h"
#include "pc_flight.h"
#include "pc_httpd.h"
#include "pc_memo.h"
#include "pc_proxy.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_util.h"
#include "pc_worker.h"
#include "t.h"

#include <signal.h>
#include <strings.h>

#include <event2/event.h>

/* ---- the fake client -------------------------------------------------------- */

#define FAKE_HEADERS 16

struct httpd_req {
    const char *method, *target, *path, *query;
    struct httpd_header in[FAKE_HEADERS];
    size_t nin;
    char *body;
    size_t body_len;
    enum httpd_req_error error;
    uint64_t start_us;
    /* The reply as the proxy gave it. */
    struct pc_buf out_headers; /* "name: value\n" each */
    int status;
    struct pc_buf out;
    bool started, finished, aborted;
    size_t queued;  /* bytes of a stream the client has not read */
    int violations; /* calls after the reply was finished */
    httpd_req_fn *close_fn, *drain_fn;
    void *close_arg, *drain_arg;
    size_t drain_low;
};

static void fake_req_init(struct httpd_req *hr, const char *method, const char *target,
                          const char *body)
{
    memset(hr, 0, sizeof(*hr));
    hr->method = method;
    hr->target = target;
    hr->path = target;
    hr->body = pc_strdup(body != NULL ? body : "");
    hr->body_len = strlen(hr->body);
    hr->start_us = pc_mono_us();
}

static void fake_req_header(struct httpd_req *hr, const char *name, const char *value)
{
    hr->in[hr->nin].name = name;
    hr->in[hr->nin].value = value;
    hr->nin++;
}

static void fake_req_free(struct httpd_req *hr)
{
    free(hr->body);
    pc_buf_free(&hr->out_headers);
    pc_buf_free(&hr->out);
}

/* The value of a reply header (in a static buffer), or NULL. */
static const char *reply_header(const struct httpd_req *hr, const char *name)
{
    static char value[512];
    const char *p = pc_buf_cstr((struct pc_buf *)&hr->out_headers);
    size_t n = strlen(name);
    for (; *p; p = strchr(p, '\n') + 1) {
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            size_t len = strcspn(p + n + 2, "\n");
            snprintf(value, sizeof(value), "%.*s", (int)len, p + n + 2);
            return value;
        }
    }
    return NULL;
}

static const char *fk_method(const struct httpd_req *hr)
{
    return hr->method;
}
static const char *fk_target(const struct httpd_req *hr)
{
    return hr->target;
}
static const char *fk_path(const struct httpd_req *hr)
{
    return hr->path;
}
static const char *fk_query(const struct httpd_req *hr)
{
    return hr->query;
}
static const char *fk_header(const struct httpd_req *hr, const char *name)
{
    for (size_t i = 0; i < hr->nin; i++)
        if (strcasecmp(hr->in[i].name, name) == 0)
            return hr->in[i].value;
    return NULL;
}
static size_t fk_header_count(const struct httpd_req *hr)
{
    return hr->nin;
}
static const struct httpd_header *fk_header_at(const struct httpd_req *hr, size_t i)
{
    return &hr->in[i];
}
static const char *fk_body(const struct httpd_req *hr, size_t *len)
{
    if (len != NULL)
        *len = hr->body_len;
    return hr->body;
}
static enum httpd_req_error fk_error(const struct httpd_req *hr)
{
    return hr->error;
}
static int fk_charge(struct httpd_req *hr, size_t n)
{
    (void)hr;
    (void)n;
    return 0;
}
static uint64_t fk_start_us(const struct httpd_req *hr)
{
    return hr->start_us;
}
static void fk_add_header(struct httpd_req *hr, const char *name, const char *value)
{
    hr->violations += hr->finished || hr->started;
    pc_buf_printf(&hr->out_headers, "%s: %s\n", name, value);
}
static void fk_reply(struct httpd_req *hr, int status, const void *body, size_t len)
{
    hr->violations += hr->finished;
    hr->status = status;
    pc_buf_append(&hr->out, body, len);
    hr->finished = true;
}
static void fk_reply_start(struct httpd_req *hr, int status)
{
    hr->violations += hr->finished || hr->started;
    hr->status = status;
    hr->started = true;
}
static void fk_reply_chunk(struct httpd_req *hr, const void *data, size_t len)
{
    hr->violations += hr->finished || !hr->started;
    pc_buf_append(&hr->out, data, len);
    hr->queued += len;
}
static void fk_reply_end(struct httpd_req *hr)
{
    hr->violations += hr->finished || !hr->started;
    hr->finished = true;
}
static void fk_reply_abort(struct httpd_req *hr)
{
    hr->violations += hr->finished;
    hr->finished = true;
    hr->aborted = true;
}
static size_t fk_reply_queued(const struct httpd_req *hr)
{
    return hr->queued;
}
static void fk_set_drain_cb(struct httpd_req *hr, size_t low, httpd_req_fn *fn, void *arg)
{
    hr->drain_low = low;
    hr->drain_fn = fn;
    hr->drain_arg = arg;
}
static void fk_set_close_cb(struct httpd_req *hr, httpd_req_fn *fn, void *arg)
{
    hr->close_fn = fn;
    hr->close_arg = arg;
}

/* The client reads what was queued for it (httpd's drain callback). */
static void client_reads(struct httpd_req *hr)
{
    hr->queued = 0;
    if (hr->drain_fn != NULL && !hr->finished)
        hr->drain_fn(hr, hr->drain_arg);
}

/* The client hangs up (httpd's close callback; the request is httpd's to free after). */
static void client_leaves(struct httpd_req *hr)
{
    if (hr->close_fn != NULL && !hr->finished)
        hr->close_fn(hr, hr->close_arg);
    hr->finished = true;
}

/* ---- the fake cache ------------------------------------------------------------ */

enum lookup_mode {
    LOOKUP_LATER,  /* the test completes it (lookup_complete) */
    LOOKUP_AT_ONCE /* answered before cache_lookup returns (as the L1 does) */
};

static struct {
    struct cache *real; /* makes real tickets (no store behind it) */
    bool ready;
    bool refuse; /* cache_lookup returns -1 (Redis away) */
    enum lookup_mode mode;
    int lookups, cancels;
    cache_lookup_fn *cb;
    void *arg;
    struct cache_ticket *ticket; /* of the pending lookup */
    unsigned char exact[PC_SHA256_LEN];
    bool had_partition;
    struct cache_result at_once;
} fc;

static char fc_op; /* the pending lookup's handle: only its address matters */

static bool fk_cache_ready(const struct cache *c)
{
    (void)c;
    return fc.ready;
}

static int fk_cache_lookup(struct cache *c, const struct cache_query *q, cache_lookup_fn *cb,
                           void *arg, struct cache_op **op)
{
    (void)c;
    *op = NULL;
    fc.lookups++;
    if (fc.refuse)
        return -1;
    memcpy(fc.exact, q->exact, PC_SHA256_LEN);
    fc.had_partition = q->partition != NULL;
    if (fc.mode == LOOKUP_AT_ONCE) {
        struct cache_result res = fc.at_once;
        res.ticket = cache_ticket_create(fc.real, q);
        res.exact = q->exact;
        cb(arg, &res);
        return 0;
    }
    fc.cb = cb;
    fc.arg = arg;
    fc.ticket = cache_ticket_create(fc.real, q);
    *op = (struct cache_op *)(void *)&fc_op;
    return 0;
}

static void fk_cache_cancel(struct cache_op **op)
{
    if (*op == NULL)
        return;
    T_CHECK(*op == (struct cache_op *)(void *)&fc_op);
    *op = NULL;
    fc.cancels++;
    fc.cb = NULL;
    cache_ticket_free(&fc.ticket);
}

/* The pending lookup ends with res (its ticket handed over with it). */
static void lookup_complete(struct cache_result *res)
{
    T_CHECK(fc.cb != NULL);
    if (fc.cb == NULL)
        return;
    cache_lookup_fn *cb = fc.cb;
    fc.cb = NULL;
    res->ticket = fc.ticket;
    fc.ticket = NULL;
    if (res->exact == NULL)
        res->exact = fc.exact;
    cb(fc.arg, res);
}

/* ---- the fake fetch: the test plays the upstream through the real flight ---------- */

#define FAKE_FETCHES 4

struct fake_fetch {
    struct flight *fl;
    struct cache_ticket *ticket; /* what the fetch would store under, or NULL */
    bool stream, ask_usage;
    char method[16], target[64];
    bool abandoned; /* the flight asked the fetch to abort: nobody waits any more */
    struct event *abort_ev;
};

static struct fake_fetch ff[FAKE_FETCHES];
static int nff;
/* Answers a fetch stored: as fetch.c's on_done, a call that ended well with a ticket not
 * fenced (no purge since its lookup). */
static int nstores;
static struct event_base *base;

static void on_fetch_abort(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fake_fetch *f = arg;
    f->abandoned = true;
}

static void fk_fetch_start(struct worker *w, struct flight *fl, const struct fetch_req *req)
{
    (void)w;
    T_CHECK(nff < FAKE_FETCHES);
    struct fake_fetch *f = &ff[nff++];
    memset(f, 0, sizeof(*f));
    flight_get(fl);
    f->fl = fl;
    f->ticket = req->ticket; /* ownership passes to the fetch */
    f->stream = req->stream;
    f->ask_usage = req->ask_usage;
    snprintf(f->method, sizeof(f->method), "%s", req->method);
    snprintf(f->target, sizeof(f->target), "%s", req->target);
    f->abort_ev = event_new(base, -1, 0, on_fetch_abort, f);
    flight_fetch_bind(fl, NULL, f->abort_ev);
}

/* The upstream answers: a head with Content-Type ctype, then body (if any). */
static void upstream_head(struct fake_fetch *f, int status, const char *ctype)
{
    size_t nl = strlen("Content-Type") + 1, vl = strlen(ctype) + 1;
    struct flight_header *h = pc_malloc(sizeof(*h) + nl + vl);
    h->name = (char *)(h + 1);
    h->value = h->name + nl;
    memcpy(h->name, "Content-Type", nl);
    memcpy(h->value, ctype, vl);
    flight_set_head(f->fl, status, h, 1, "fake-upstream:1");
}

static void upstream_body(struct fake_fetch *f, const char *body)
{
    T_CHECK_INT(flight_append(f->fl, body, strlen(body)), FLIGHT_CONTINUE);
}

/* The call ends (result 0, or an xfer_result); the fetch lets go of the flight. */
static void upstream_end(struct fake_fetch *f, int result, const char *errmsg)
{
    struct api_usage u = {.present = true, .prompt = 11, .completion = 7};
    if (result == 0)
        flight_set_usage(f->fl, &u);
    if (result == 0 && f->ticket != NULL && !f->abandoned && !cache_fenced(fc.real, f->ticket))
        nstores++;
    flight_finish(f->fl, result, errmsg);
    flight_fetch_bind(f->fl, NULL, NULL);
    flight_put(&f->fl);
    cache_ticket_free(&f->ticket);
    event_free(f->abort_ev);
    f->abort_ev = NULL;
}

/* ---- the world around the machine ---------------------------------------------------- */

static const struct proxy_ops fake_ops = {
    .req_method = fk_method,
    .req_target = fk_target,
    .req_path = fk_path,
    .req_query = fk_query,
    .req_header = fk_header,
    .req_header_count = fk_header_count,
    .req_header_at = fk_header_at,
    .req_body = fk_body,
    .req_error = fk_error,
    .req_charge = fk_charge,
    .req_start_us = fk_start_us,
    .add_header = fk_add_header,
    .reply = fk_reply,
    .reply_start = fk_reply_start,
    .reply_chunk = fk_reply_chunk,
    .reply_end = fk_reply_end,
    .reply_abort = fk_reply_abort,
    .reply_queued = fk_reply_queued,
    .set_drain_cb = fk_set_drain_cb,
    .set_close_cb = fk_set_close_cb,
    .cache_ready = fk_cache_ready,
    .cache_lookup = fk_cache_lookup,
    .cache_cancel = fk_cache_cancel,
    .fetch_start = fk_fetch_start,
};

static struct worker wk;
static struct conf *conf;

/* A worker with no threads, sockets or Redis, and a fresh fake cache and fetch. */
static void world_up(int argc, char **argv)
{
    conf = conf_create();
    T_CHECK_INT(conf_load(conf, NULL, argc, argv, NULL), 0);
    base = event_base_new();
    memset(&wk, 0, sizeof(wk));
    wk.magic = WORKER_MAGIC;
    wk.conf = conf;
    wk.backend = backend_for(conf->upstream_type);
    wk.base = base;
    wk.memo = memo_create();
    wk.id_prefix = 0x7e57;
    wk.fence = fence_create();
    struct cache_opts co = {.conf = conf, .base = base, .stats = &wk.stats, .fence = wk.fence};
    memset(&fc, 0, sizeof(fc));
    fc.real = cache_create(&co);
    fc.ready = true;
    wk.cache = fc.real;
    nff = 0;
    nstores = 0;
}

/* Deliver what the loop holds (flight news, deferred frees) until nothing is left. */
static void settle(void)
{
    for (int i = 0; i < 16; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

static void world_down(void)
{
    settle();
    T_CHECK_INT((int64_t)wk.stats.v[STAT_requests_active], 0); /* every request freed */
    cache_ticket_free(&fc.ticket);
    cache_destroy(&fc.real);
    fence_destroy(&wk.fence);
    memo_destroy(&wk.memo);
    event_base_free(base);
    base = NULL;
    conf_destroy(&conf);
}

static void world_default(void)
{
    char *argv[] = {"--semantic", "no"};
    world_up(2, argv);
}

#define CHAT_BODY \
    "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}"
#define CHAT_STREAM_BODY                                                           \
    "{\"model\":\"gpt-4o-mini\",\"stream\":true,\"messages\":[{\"role\":\"user\"," \
    "\"content\":\"hello\"}]}"
#define ANSWER_JSON                                                                          \
    "{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"gpt-4o-mini\"," \
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi "        \
    "there\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":11,"                 \
    "\"completion_tokens\":7,\"total_tokens\":18}}"

static void chat_request(struct httpd_req *hr, const char *body)
{
    fake_req_init(hr, "POST", "/v1/chat/completions", body);
    fake_req_header(hr, "Content-Type", "application/json");
    fake_req_header(hr, "Authorization", "Bearer sk-test");
}

/* A stored JSON answer. */
static void stored_answer(struct entry *e, const char *body)
{
    memset(e, 0, sizeof(*e));
    e->kind = ENTRY_JSON;
    e->endpoint = API_CHAT;
    e->status = 200;
    e->created_ms = pc_wall_ms() - 5000;
    e->latency_ms = 900;
    e->usage = (struct api_usage){.present = true, .prompt = 11, .completion = 7};
    e->content_type = "application/json";
    e->content_type_len = strlen(e->content_type);
    e->body = body;
    e->body_len = strlen(body);
}

static uint64_t stat(enum stat_id id)
{
    return wk.stats.v[id];
}

/* ---- hits ------------------------------------------------------------------------- */

static void test_exact_hit_later(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK_INT(fc.lookups, 1);
    T_CHECK(!hr.finished);      /* waits for the lookup */
    T_CHECK(!fc.had_partition); /* semantic no: exact only */
    struct entry e;
    stored_answer(&e, ANSWER_JSON);
    struct cache_result res = {
        .outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .age_ms = 5000, .entry = &e};
    lookup_complete(&res);
    T_CHECK(hr.finished);
    T_CHECK_INT(hr.status, 200);
    T_CHECK_STR(pc_buf_cstr(&hr.out), ANSWER_JSON);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "HIT");
    T_CHECK_STR(reply_header(&hr, "X-Cache-Match"), "exact");
    T_CHECK_STR(reply_header(&hr, "Age"), "5");
    T_CHECK_STR(reply_header(&hr, "Content-Type"), "application/json");
    T_CHECK(reply_header(&hr, "X-Cache-Key") != NULL);
    T_CHECK(reply_header(&hr, "X-Promptcache-Request-Id") != NULL);
    T_CHECK(reply_header(&hr, "X-Upstream") == NULL);
    T_CHECK_INT(nff, 0); /* no upstream call */
    T_CHECK_INT(stat(STAT_cache_hits), 1);
    T_CHECK_INT(stat(STAT_cache_hits_exact), 1);
    T_CHECK_INT(stat(STAT_tokens_saved_completion), 7);
    T_CHECK_INT(hr.violations, 0);
    world_down();
    fake_req_free(&hr);
}

/* The L1 answers before cache_lookup returns: the machine delivers from inside the lookup. */
static void test_hit_at_once(void)
{
    world_default();
    struct entry e;
    stored_answer(&e, ANSWER_JSON);
    fc.mode = LOOKUP_AT_ONCE;
    fc.at_once =
        (struct cache_result){.outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .entry = &e};
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK(hr.finished);
    T_CHECK_INT(hr.status, 200);
    T_CHECK_STR(pc_buf_cstr(&hr.out), ANSWER_JSON);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "HIT");
    T_CHECK_INT(fc.cancels, 0);
    T_CHECK_INT(nff, 0);
    T_CHECK_INT(hr.violations, 0);
    /* The same body again: its keys come from the memo, and the hit is the same. */
    struct httpd_req hr2;
    chat_request(&hr2, CHAT_BODY);
    proxy_serve(&wk, &hr2, &fake_ops);
    T_CHECK_STR(pc_buf_cstr(&hr2.out), ANSWER_JSON);
    T_CHECK_INT(stat(STAT_request_memo_hits), 1);
    T_CHECK_INT(stat(STAT_cache_hits), 2);
    world_down();
    fake_req_free(&hr);
    fake_req_free(&hr2);
}

/* A stream client gets a stored JSON answer as a stream (rendered by dialect_answer). */
static void test_hit_as_stream(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_STREAM_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct entry e;
    stored_answer(&e, ANSWER_JSON);
    struct cache_result res = {.outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .entry = &e};
    lookup_complete(&res);
    T_CHECK(hr.finished);
    T_CHECK_STR(reply_header(&hr, "Content-Type"), "text/event-stream");
    const char *out = pc_buf_cstr(&hr.out);
    T_CHECK(strstr(out, "chat.completion.chunk") != NULL);
    T_CHECK(strstr(out, "hi there") != NULL || strstr(out, "hi ") != NULL);
    T_CHECK(strstr(out, "data: [DONE]") != NULL);
    T_CHECK(strstr(out, "\"usage\"") == NULL); /* not asked for */
    world_down();
    fake_req_free(&hr);
}

/* A semantic hit names its match and similarity. */
static void test_semantic_hit(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct entry e;
    stored_answer(&e, ANSWER_JSON);
    unsigned char other[PC_SHA256_LEN] = {1, 2, 3};
    struct cache_result res = {.outcome = CACHE_HIT,
                               .match = CACHE_MATCH_SEMANTIC,
                               .similarity = 0.93,
                               .entry = &e,
                               .exact = other};
    lookup_complete(&res);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Match"), "semantic");
    T_CHECK_STR(reply_header(&hr, "X-Cache-Similarity"), "0.9300");
    T_CHECK_INT(stat(STAT_cache_hits_semantic), 1);
    T_CHECK_INT(stat(STAT_tokens_saved_semantic_prompt), 11);
    world_down();
    fake_req_free(&hr);
}

/* An entry that does not render for this client is a miss: counted, fetched and stored. */
static void test_hit_unrenderable(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_STREAM_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct entry e;
    stored_answer(&e, "{\"not\":\"an answer\"}"); /* cannot become a stream */
    struct cache_result res = {.outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .entry = &e};
    lookup_complete(&res);
    T_CHECK(!hr.finished);
    T_CHECK_INT(stat(STAT_cache_corrupt), 1);
    T_CHECK_INT(stat(STAT_cache_misses), 1);
    T_CHECK_INT(nff, 1);
    T_CHECK(ff[0].ticket != NULL); /* stored when it comes */
    upstream_head(&ff[0], 200, "text/event-stream");
    upstream_body(&ff[0], "data: {\"x\":1}\n\ndata: [DONE]\n\n");
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(hr.finished);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    world_down();
    fake_req_free(&hr);
}

/*
 * A sound Messages entry that serves JSON clients only (tool input numbers a
 * stream would not carry as written): a stream client's hit is a miss,
 * counted in cache_other_mode_only and not in cache_corrupt.
 */
static void test_hit_other_mode_only(void)
{
    world_default();
    struct httpd_req hr;
    fake_req_init(&hr, "POST", "/v1/messages",
                  "{\"model\":\"claude\",\"max_tokens\":9,\"stream\":true,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    fake_req_header(&hr, "Content-Type", "application/json");
    fake_req_header(&hr, "x-api-key", "sk-ant-test");
    proxy_serve(&wk, &hr, &fake_ops);
    struct entry e;
    stored_answer(&e, "{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":"
                      "[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":"
                      "{\"ratio\":1.0}}],\"stop_reason\":\"tool_use\"}");
    e.endpoint = API_MESSAGES;
    struct cache_result res = {.outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .entry = &e};
    lookup_complete(&res);
    T_CHECK(!hr.finished);
    T_CHECK_INT(stat(STAT_cache_other_mode_only), 1);
    T_CHECK_INT(stat(STAT_cache_corrupt), 0);
    T_CHECK_INT(stat(STAT_cache_hits), 0);
    T_CHECK_INT(stat(STAT_cache_misses), 1);
    T_CHECK_INT(nff, 1);
    upstream_head(&ff[0], 200, "application/json");
    upstream_body(&ff[0], "{\"type\":\"message\",\"content\":[]}");
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(hr.finished);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    world_down();
    fake_req_free(&hr);
}

/*
 * One unrenderable L1 hit (answered before cache_lookup returns): no part of
 * the hit reaches the client, it is counted as corrupt and as a miss, and the
 * request is fetched (its ticket with the fetch) and answered as a MISS.
 */
static void check_unrenderable_at_once(const char *req_body, enum entry_kind kind,
                                       const char *stored, const char *up_ctype,
                                       const char *up_body)
{
    world_default();
    struct entry e;
    stored_answer(&e, stored);
    e.kind = kind;
    fc.mode = LOOKUP_AT_ONCE;
    fc.at_once =
        (struct cache_result){.outcome = CACHE_HIT, .match = CACHE_MATCH_EXACT, .entry = &e};
    struct httpd_req hr;
    chat_request(&hr, req_body);
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK_INT(fc.lookups, 1);
    T_CHECK(!hr.finished && !hr.started);
    T_CHECK_INT(hr.out.len, 0);
    T_CHECK(reply_header(&hr, "X-Cache-Status") == NULL); /* no header of the failed hit */
    T_CHECK(reply_header(&hr, "Age") == NULL);
    T_CHECK_INT(stat(STAT_cache_corrupt), 1);
    T_CHECK_INT(stat(STAT_cache_hits), 0);
    T_CHECK_INT(stat(STAT_cache_misses), 1);
    T_CHECK_INT(nff, 1);
    T_CHECK(ff[0].ticket != NULL); /* the at-once lookup's ticket: stored when it comes */
    upstream_head(&ff[0], 200, up_ctype);
    upstream_body(&ff[0], up_body);
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(hr.finished && !hr.aborted);
    T_CHECK_INT(hr.status, 200);
    T_CHECK_STR(pc_buf_cstr(&hr.out), up_body);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    T_CHECK(strstr(pc_buf_cstr(&hr.out_headers), "HIT") == NULL);
    T_CHECK_INT(nstores, 1);
    T_CHECK_INT(hr.violations, 0);
    world_down();
    fake_req_free(&hr);
}

/* test_hit_unrenderable's case when the L1 answers at once, and a malformed recorded stream. */
static void test_hit_at_once_unrenderable(void)
{
    /* A stored JSON that is no answer cannot become the stream asked for. */
    check_unrenderable_at_once(CHAT_STREAM_BODY, ENTRY_JSON, "{\"not\":\"an answer\"}",
                               "text/event-stream", "data: {\"x\":1}\n\ndata: [DONE]\n\n");
    /* A recorded stream whose events are not JSON cannot be assembled into an answer. */
    check_unrenderable_at_once(CHAT_BODY, ENTRY_SSE, "data: {broken\n\ndata: [DONE]\n\n",
                               "application/json", ANSWER_JSON);
}

/* ---- misses, bypasses, refreshes -------------------------------------------------- */

static void test_miss_fetched_and_stored(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct cache_result res = {.outcome = CACHE_MISS};
    lookup_complete(&res);
    T_CHECK_INT(nff, 1);
    T_CHECK(ff[0].ticket != NULL);
    T_CHECK_STR(ff[0].target, "/v1/chat/completions");
    T_CHECK(!hr.finished); /* the whole answer is awaited */
    upstream_head(&ff[0], 200, "application/json");
    settle();
    T_CHECK(!hr.finished);
    upstream_body(&ff[0], ANSWER_JSON);
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(hr.finished);
    T_CHECK_INT(hr.status, 200);
    T_CHECK_STR(pc_buf_cstr(&hr.out), ANSWER_JSON);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    T_CHECK_STR(reply_header(&hr, "X-Upstream"), "fake-upstream:1");
    T_CHECK(reply_header(&hr, "X-Cache-Key") != NULL);
    T_CHECK_INT(stat(STAT_cache_misses), 1);
    T_CHECK_INT(hr.violations, 0);
    world_down();
    fake_req_free(&hr);
}

/* A streamed miss is relayed as it comes, and waits for a slow client to read. */
static void test_miss_streamed_backpressure(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_STREAM_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct cache_result res = {.outcome = CACHE_MISS};
    lookup_complete(&res);
    T_CHECK(ff[0].stream);
    upstream_head(&ff[0], 200, "text/event-stream");
    settle();
    T_CHECK(hr.started);
    T_CHECK_INT(hr.status, 200);
    /* More than the client's high mark: the relay stops until the client reads. */
    const char *event = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    size_t sent = 0;
    while (sent < 600 * 1024) { /* in pieces, as an upstream's bytes arrive */
        upstream_body(&ff[0], event);
        sent += strlen(event);
    }
    upstream_body(&ff[0], "data: [DONE]\n\n");
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(!hr.finished);
    T_CHECK(hr.out.len >= 256 * 1024 && hr.out.len < sent);
    int reads = 0;
    while (!hr.finished && reads < 10) { /* each read lets the relay go on to the mark */
        client_reads(&hr);
        settle();
        reads++;
        T_CHECK(hr.finished || hr.queued >= 256 * 1024);
    }
    T_CHECK_INT(reads, 2);
    T_CHECK(hr.finished);
    T_CHECK(!hr.aborted);
    T_CHECK_INT(hr.out.len, sent + strlen("data: [DONE]\n\n"));
    T_CHECK_INT(hr.violations, 0);
    world_down();
    fake_req_free(&hr);
}

/*
 * The upstream ends while the client still has more than the high mark
 * unread: the answer is stored as the call ends, but the reply is not
 * finished, and nothing more is relayed (not even on a drain callback while
 * still above the mark) until the client reads; then every byte arrives
 * once, in order, and the reply ends once.
 */
static void test_streamed_slow_client_after_end(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_STREAM_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct cache_result res = {.outcome = CACHE_MISS};
    lookup_complete(&res);
    T_CHECK(ff[0].ticket != NULL);
    upstream_head(&ff[0], 200, "text/event-stream");
    struct pc_buf want = PC_BUF_INIT;
    char ev[128];
    for (int i = 0; want.len < 700 * 1024; i++) { /* numbered: order and duplicates show */
        snprintf(ev, sizeof(ev),
                 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%07d\"}}]}\n\n", i);
        upstream_body(&ff[0], ev);
        pc_buf_append_str(&want, ev);
    }
    upstream_body(&ff[0], "data: [DONE]\n\n");
    pc_buf_append_str(&want, "data: [DONE]\n\n");
    upstream_end(&ff[0], 0, NULL);
    T_CHECK_INT(nstores, 1);
    settle();
    T_CHECK(hr.started && !hr.finished);
    size_t got = hr.out.len;
    T_CHECK(hr.queued == got && got >= 256 * 1024 && got < want.len);
    T_CHECK(memcmp(hr.out.data, want.data, got) == 0);
    T_CHECK(hr.drain_fn != NULL && hr.drain_low > 0 && hr.drain_low < 256 * 1024);
    /* The loop turning again, and a drain callback while still above the mark: nothing. */
    settle();
    if (hr.drain_fn != NULL)
        hr.drain_fn(&hr, hr.drain_arg);
    settle();
    T_CHECK_INT(hr.out.len, got);
    T_CHECK(!hr.finished);
    int reads = 0;
    while (!hr.finished && reads < 10) {
        client_reads(&hr);
        settle();
        reads++;
    }
    T_CHECK(reads >= 2);
    T_CHECK(hr.finished && !hr.aborted);
    T_CHECK_INT(hr.out.len, want.len);
    T_CHECK(hr.out.len == want.len && memcmp(hr.out.data, want.data, want.len) == 0);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    T_CHECK_INT(hr.violations, 0);
    T_CHECK_INT(nstores, 1);
    T_CHECK_INT(nff, 1);
    pc_buf_free(&want);
    world_down();
    fake_req_free(&hr);
}

/* X-Cache-Mode: off never looks up nor stores, and the call is the request's own. */
static void test_bypass_mode_off(void)
{
    world_default();
    struct httpd_req a, b;
    chat_request(&a, CHAT_BODY);
    fake_req_header(&a, "X-Cache-Mode", "off");
    chat_request(&b, CHAT_BODY);
    fake_req_header(&b, "X-Cache-Mode", "off");
    proxy_serve(&wk, &a, &fake_ops);
    proxy_serve(&wk, &b, &fake_ops);
    T_CHECK_INT(fc.lookups, 0);
    T_CHECK_INT(nff, 2); /* not shared */
    T_CHECK(ff[0].ticket == NULL && ff[1].ticket == NULL);
    for (int i = 0; i < 2; i++) {
        upstream_head(&ff[i], 200, "application/json");
        upstream_body(&ff[i], ANSWER_JSON);
        upstream_end(&ff[i], 0, NULL);
    }
    settle();
    T_CHECK_STR(reply_header(&a, "X-Cache-Status"), "BYPASS");
    T_CHECK_STR(reply_header(&b, "X-Cache-Status"), "BYPASS");
    T_CHECK(reply_header(&a, "X-Cache-Key") == NULL);
    T_CHECK_INT(stat(STAT_cache_bypasses), 2);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/* Cache-Control: no-cache skips the lookup but stores the answer; without Redis it bypasses. */
static void test_refresh(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    fake_req_header(&hr, "Cache-Control", "no-cache");
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK_INT(fc.lookups, 0);
    T_CHECK_INT(nff, 1);
    T_CHECK(ff[0].ticket != NULL);
    upstream_head(&ff[0], 200, "application/json");
    upstream_body(&ff[0], ANSWER_JSON);
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "REFRESH");
    T_CHECK_INT(stat(STAT_cache_refreshes), 1);

    fc.ready = false;
    struct httpd_req h2;
    chat_request(&h2, CHAT_BODY);
    fake_req_header(&h2, "Cache-Control", "no-cache");
    proxy_serve(&wk, &h2, &fake_ops);
    T_CHECK_INT(nff, 2);
    T_CHECK(ff[1].ticket == NULL);
    upstream_head(&ff[1], 200, "application/json");
    upstream_body(&ff[1], ANSWER_JSON);
    upstream_end(&ff[1], 0, NULL);
    settle();
    T_CHECK_STR(reply_header(&h2, "X-Cache-Status"), "BYPASS");
    world_down();
    fake_req_free(&hr);
    fake_req_free(&h2);
}

/* Redis away, before the lookup or during it: the upstream answers anyway (BYPASS). */
static void test_cache_unavailable(void)
{
    world_default();
    fc.refuse = true;
    struct httpd_req a;
    chat_request(&a, CHAT_BODY);
    proxy_serve(&wk, &a, &fake_ops);
    T_CHECK_INT(nff, 1);
    T_CHECK(ff[0].ticket == NULL);
    fc.refuse = false;
    struct httpd_req b;
    chat_request(
        &b, "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"other\"}]}");
    proxy_serve(&wk, &b, &fake_ops);
    struct cache_result res = {.outcome = CACHE_UNAVAILABLE};
    lookup_complete(&res);
    T_CHECK_INT(nff, 2);
    T_CHECK(ff[1].ticket == NULL);
    for (int i = 0; i < 2; i++) {
        upstream_head(&ff[i], 200, "application/json");
        upstream_body(&ff[i], ANSWER_JSON);
        upstream_end(&ff[i], 0, NULL);
    }
    settle();
    T_CHECK_INT(a.status, 200);
    T_CHECK_INT(b.status, 200);
    T_CHECK_STR(reply_header(&a, "X-Cache-Status"), "BYPASS");
    T_CHECK_STR(reply_header(&b, "X-Cache-Status"), "BYPASS");
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/* Identical misses share one upstream call: the second waits on the first's flight. */
static void test_coalesced_wait(void)
{
    world_default();
    struct httpd_req a, b;
    chat_request(&a, CHAT_BODY);
    chat_request(&b, CHAT_BODY);
    proxy_serve(&wk, &a, &fake_ops);
    struct cache_result miss = {.outcome = CACHE_MISS};
    lookup_complete(&miss);
    proxy_serve(&wk, &b, &fake_ops);
    struct cache_result miss2 = {.outcome = CACHE_MISS};
    lookup_complete(&miss2);
    T_CHECK_INT(nff, 1);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    upstream_head(&ff[0], 200, "application/json");
    upstream_body(&ff[0], ANSWER_JSON);
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK_STR(pc_buf_cstr(&a.out), ANSWER_JSON);
    T_CHECK_STR(pc_buf_cstr(&b.out), ANSWER_JSON);
    T_CHECK_STR(reply_header(&b, "X-Cache-Status"), "MISS");
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/* Other paths pass through untouched: no parse, no lookup, relayed as they come. */
static void test_passthrough(void)
{
    world_default();
    struct httpd_req hr;
    fake_req_init(&hr, "GET", "/v1/models", NULL);
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK_INT(fc.lookups, 0);
    T_CHECK_INT(nff, 1);
    T_CHECK_STR(ff[0].method, "GET");
    T_CHECK(ff[0].ticket == NULL);
    upstream_head(&ff[0], 200, "application/json");
    upstream_body(&ff[0], "{\"data\":[]}");
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(hr.started && hr.finished);
    T_CHECK_STR(pc_buf_cstr(&hr.out), "{\"data\":[]}");
    T_CHECK_INT(stat(STAT_requests_passthrough), 1);
    world_down();
    fake_req_free(&hr);
}

/* ---- errors ------------------------------------------------------------------------- */

/* One bad request: answered at once in the API's error shape, nothing looked up or fetched. */
static void check_rejected(const char *target, const char *body, const char *hname,
                           const char *hvalue, int status, const char *needle)
{
    struct httpd_req hr;
    fake_req_init(&hr, "POST", target, body);
    fake_req_header(&hr, "Content-Type",
                    hname && strcmp(hname, "Content-Type") == 0 ? hvalue : "application/json");
    if (hname != NULL && strcmp(hname, "Content-Type") != 0)
        fake_req_header(&hr, hname, hvalue);
    int lookups = fc.lookups, fetches = nff;
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK(hr.finished);
    T_CHECK_INT(hr.status, status);
    T_CHECK(strstr(pc_buf_cstr(&hr.out), needle) != NULL);
    T_CHECK_INT(fc.lookups, lookups);
    T_CHECK_INT(nff, fetches);
    T_CHECK_INT(hr.violations, 0);
    fake_req_free(&hr);
}

static void test_request_errors(void)
{
    world_default();
    check_rejected("/v1/chat/completions", "{\"model\":", NULL, NULL, 400,
                   "\"error\":{\"message\":\"request body is not valid JSON");
    check_rejected("/v1/chat/completions", "", NULL, NULL, 400, "request body is empty");
    check_rejected("/v1/chat/completions", CHAT_BODY, "Content-Type", "text/plain", 415,
                   "Content-Type must be application/json");
    check_rejected("/v1/chat/completions", CHAT_BODY, "X-Cache-TTL", "-1", 400, "X-Cache-TTL");
    check_rejected("/v1/chat/completions", CHAT_BODY, "X-Cache-Mode", "sometimes", 400,
                   "X-Cache-Mode");
    /* Anthropic's path answers in Anthropic's shape. */
    check_rejected("/v1/messages", "[1]", NULL, NULL, 400, "\"type\":\"error\"");
    T_CHECK_INT(stat(STAT_client_errors), 6);
    /* Too large: 413 before anything is read. */
    struct httpd_req hr;
    chat_request(&hr, "");
    hr.error = HTTPD_REQ_BODY_TOO_LARGE;
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK_INT(hr.status, 413);
    fake_req_free(&hr);
    world_down();
}

/* The upstream fails: the client gets the proxy's error in its API's shape. */
static void test_upstream_failure(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct cache_result res = {.outcome = CACHE_MISS};
    lookup_complete(&res);
    upstream_end(&ff[0], XFER_ERR_TIMEOUT, "no answer in 60 s");
    settle();
    T_CHECK(hr.finished);
    T_CHECK_INT(hr.status, 504);
    T_CHECK(strstr(pc_buf_cstr(&hr.out), "upstream did not answer in time") != NULL);
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    world_down();
    fake_req_free(&hr);
}

/* ---- the client hanging up ----------------------------------------------------------- */

static void test_abort_during_lookup(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    client_leaves(&hr);
    T_CHECK_INT(fc.cancels, 1); /* the lookup's callback will never run */
    T_CHECK(fc.cb == NULL);
    T_CHECK_INT(nff, 0);
    T_CHECK_INT(stat(STAT_client_aborts), 1);
    world_down();
    fake_req_free(&hr);
}

/* Mid-fetch: the request ends, and its upstream call (nobody else waits) is abandoned. */
static void test_abort_mid_fetch(void)
{
    world_default();
    struct httpd_req hr;
    chat_request(&hr, CHAT_STREAM_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    struct cache_result res = {.outcome = CACHE_MISS};
    lookup_complete(&res);
    upstream_head(&ff[0], 200, "text/event-stream");
    upstream_body(&ff[0], "data: {\"choices\":[]}\n\n");
    settle();
    T_CHECK(hr.started && !hr.finished);
    client_leaves(&hr);
    settle();
    T_CHECK(ff[0].abandoned);
    T_CHECK_INT(stat(STAT_client_aborts), 1);
    /* The upstream's later bytes reach nobody. */
    size_t got = hr.out.len;
    upstream_body(&ff[0], "data: [DONE]\n\n");
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK_INT(hr.out.len, got);
    world_down();
    fake_req_free(&hr);
}

#define EV1 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
#define EV2 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}\n\n"
#define EVD "data: [DONE]\n\n"

/* Two identical misses, a leading b's call; the upstream's head and first part are out. */
static void coalesced_pair(struct httpd_req *a, struct httpd_req *b, bool stream)
{
    chat_request(a, stream ? CHAT_STREAM_BODY : CHAT_BODY);
    chat_request(b, stream ? CHAT_STREAM_BODY : CHAT_BODY);
    proxy_serve(&wk, a, &fake_ops);
    struct cache_result miss = {.outcome = CACHE_MISS};
    lookup_complete(&miss);
    proxy_serve(&wk, b, &fake_ops);
    struct cache_result miss2 = {.outcome = CACHE_MISS};
    lookup_complete(&miss2);
    T_CHECK_INT(nff, 1);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    T_CHECK(ff[0].ticket != NULL);
    upstream_head(&ff[0], 200, stream ? "text/event-stream" : "application/json");
    upstream_body(&ff[0], stream ? EV1 : "{\"id\":\"c1\",");
    settle();
    T_CHECK(!a->finished && !b->finished);
    T_CHECK_STR(pc_buf_cstr(&a->out), stream ? EV1 : "");
    T_CHECK_STR(pc_buf_cstr(&b->out), stream ? EV1 : "");
}

/* The rest of the upstream's answer. */
static void coalesced_rest(bool stream)
{
    if (stream) {
        upstream_body(&ff[0], EV2);
        upstream_body(&ff[0], EVD);
    } else {
        upstream_body(&ff[0], ANSWER_JSON + strlen("{\"id\":\"c1\","));
    }
    upstream_end(&ff[0], 0, NULL);
    settle();
}

/*
 * Coalesced: the joiner's client hangs up mid-fetch. The call goes on for
 * the leader, who gets the whole answer, stored once; the joiner gets nothing
 * after its hang-up.
 */
static void check_coalesced_joiner_aborts(bool stream)
{
    world_default();
    struct httpd_req a, b;
    coalesced_pair(&a, &b, stream);
    size_t b_got = b.out.len;
    client_leaves(&b);
    settle();
    T_CHECK(!ff[0].abandoned); /* the leader still waits for it */
    T_CHECK_INT(stat(STAT_client_aborts), 1);
    coalesced_rest(stream);
    T_CHECK(a.finished && !a.aborted);
    T_CHECK_INT(a.status, 200);
    T_CHECK_STR(pc_buf_cstr(&a.out), stream ? EV1 EV2 EVD : ANSWER_JSON);
    T_CHECK_STR(reply_header(&a, "X-Cache-Status"), "MISS");
    T_CHECK_INT(a.violations, 0);
    T_CHECK_INT(b.out.len, b_got);
    T_CHECK_INT(b.violations, 0);
    T_CHECK_INT(nstores, 1);
    T_CHECK_INT(nff, 1);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

static void test_coalesced_joiner_aborts(void)
{
    check_coalesced_joiner_aborts(true);
    check_coalesced_joiner_aborts(false);
}

/*
 * Coalesced: the leader's client hangs up mid-fetch. The call is not
 * abandoned while the joiner waits (flight_unsubscribe stops it only when
 * nobody is left): the joiner gets the whole answer as a MISS, and it is
 * stored once (the fetch holds the leader's ticket). The leader gets nothing
 * after its hang-up.
 */
static void check_coalesced_leader_aborts(bool stream)
{
    world_default();
    struct httpd_req a, b;
    coalesced_pair(&a, &b, stream);
    size_t a_got = a.out.len;
    client_leaves(&a);
    settle();
    T_CHECK(!ff[0].abandoned);
    T_CHECK(ff[0].ticket != NULL);
    T_CHECK_INT(stat(STAT_client_aborts), 1);
    coalesced_rest(stream);
    T_CHECK(b.finished && !b.aborted);
    T_CHECK_INT(b.status, 200);
    T_CHECK_STR(pc_buf_cstr(&b.out), stream ? EV1 EV2 EVD : ANSWER_JSON);
    T_CHECK_STR(reply_header(&b, "X-Cache-Status"), "MISS");
    T_CHECK_STR(reply_header(&b, "X-Upstream"), "fake-upstream:1");
    T_CHECK_INT(b.violations, 0);
    T_CHECK_INT(a.out.len, a_got);
    T_CHECK_INT(a.violations, 0);
    T_CHECK_INT(nstores, 1);
    T_CHECK_INT(nff, 1);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/* ... and once both have left, the call is abandoned and nothing is stored. */
static void check_coalesced_both_abort(bool stream)
{
    world_default();
    struct httpd_req a, b;
    coalesced_pair(&a, &b, stream);
    client_leaves(&a);
    settle();
    T_CHECK(!ff[0].abandoned);
    client_leaves(&b);
    settle();
    T_CHECK(ff[0].abandoned);
    T_CHECK_INT(stat(STAT_client_aborts), 2);
    coalesced_rest(stream);
    T_CHECK_INT(nstores, 0);
    T_CHECK_INT(a.violations, 0);
    T_CHECK_INT(b.violations, 0);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

static void test_coalesced_leader_aborts(void)
{
    check_coalesced_leader_aborts(true);
    check_coalesced_leader_aborts(false);
    check_coalesced_both_abort(true);
    check_coalesced_both_abort(false);
}

/* ---- a refusal answers only its own body ------------------------------------------------ */

#define REFUSED_TAIL "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}"
#define BOGUS_TIER   "{\"model\":\"gpt-4o-mini\",\"service_tier\":\"bogus\"," REFUSED_TAIL
#define WITH_USER    "{\"model\":\"gpt-4o-mini\",\"user\":\"u\"," REFUSED_TAIL
#define BOGUS_STREAM "{\"model\":\"gpt-4o-mini\",\"stream\":true,\"user\":7," REFUSED_TAIL
#define PLAIN_STREAM "{\"model\":\"gpt-4o-mini\",\"stream\":true," REFUSED_TAIL
#define REFUSAL                                                                               \
    "{\"error\":{\"message\":\"Invalid value: 'bogus'.\",\"type\":\"invalid_request_error\"," \
    "\"param\":\"service_tier\",\"code\":\"invalid_value\"}}"

/* A request with body, served and missed (its lookup gives it a ticket). */
static void serve_miss(struct httpd_req *hr, const char *body)
{
    chat_request(hr, body);
    proxy_serve(&wk, hr, &fake_ops);
    struct cache_result miss = {.outcome = CACHE_MISS};
    lookup_complete(&miss);
}

/* The upstream's whole answer to fetch f. */
static void upstream_answer(struct fake_fetch *f, int status, const char *ctype, const char *body)
{
    upstream_head(f, status, ctype);
    upstream_body(f, body);
    upstream_end(f, 0, NULL);
}

/*
 * The keys leave service_tier and user out, so b joins a's call; a's call is
 * refused for a's bogus service_tier: a gets the 400, b leaves the call (before a
 * byte reaches it) for one of its own, with its ticket (stored), and gets its answer
 * as a MISS; counted in coalesced and coalesce_retries, not in the report's coalesced.
 */
static void check_refusal_not_shared(bool stream)
{
    world_default();
    struct httpd_req a, b;
    serve_miss(&a, stream ? BOGUS_STREAM : BOGUS_TIER);
    serve_miss(&b, stream ? PLAIN_STREAM : WITH_USER);
    T_CHECK_INT(nff, 1);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    upstream_head(&ff[0], 400, "application/json");
    upstream_body(&ff[0], "{\"error\":");
    settle();
    T_CHECK_INT(nff, 2); /* b's own call, while a's answer still comes */
    T_CHECK(ff[1].ticket != NULL);
    T_CHECK_INT(ff[1].stream, stream);
    T_CHECK_INT(stat(STAT_coalesce_retries), 1);
    T_CHECK(!b.started && !b.finished && b.out.len == 0);
    upstream_body(&ff[0], REFUSAL + strlen("{\"error\":"));
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK(a.finished);
    T_CHECK_INT(a.status, 400);
    T_CHECK_STR(pc_buf_cstr(&a.out), REFUSAL);
    T_CHECK(!b.finished);
    if (stream) {
        upstream_head(&ff[1], 200, "text/event-stream");
        upstream_body(&ff[1], EV1 EVD);
        upstream_end(&ff[1], 0, NULL);
    } else {
        upstream_answer(&ff[1], 200, "application/json", ANSWER_JSON);
    }
    settle();
    T_CHECK(b.finished && !b.aborted);
    T_CHECK_INT(b.status, 200);
    T_CHECK_STR(pc_buf_cstr(&b.out), stream ? EV1 EVD : ANSWER_JSON);
    T_CHECK_STR(reply_header(&b, "X-Cache-Status"), "MISS");
    T_CHECK_STR(reply_header(&b, "X-Upstream"), "fake-upstream:1");
    T_CHECK(reply_header(&b, "X-Cache-Key") != NULL);
    T_CHECK_INT(a.violations, 0);
    T_CHECK_INT(b.violations, 0);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

static void test_refusal_not_shared(void)
{
    check_refusal_not_shared(false);
    check_refusal_not_shared(true);
}

/* A request that joins once the refusal's head is known leaves at once, too. */
static void test_refusal_joined_late(void)
{
    world_default();
    struct httpd_req a, b;
    serve_miss(&a, BOGUS_TIER);
    upstream_head(&ff[0], 400, "application/json");
    upstream_body(&ff[0], "{\"error\":");
    settle();
    serve_miss(&b, WITH_USER);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    settle();
    T_CHECK_INT(nff, 2);
    T_CHECK_INT(stat(STAT_coalesce_retries), 1);
    upstream_body(&ff[0], REFUSAL + strlen("{\"error\":"));
    upstream_end(&ff[0], 0, NULL);
    upstream_answer(&ff[1], 200, "application/json", ANSWER_JSON);
    settle();
    T_CHECK_INT(a.status, 400);
    T_CHECK_INT(b.status, 200);
    T_CHECK_STR(pc_buf_cstr(&b.out), ANSWER_JSON);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/*
 * What is shared whatever the body: a refusal of the very body the call sent
 * (byte-identical), a 429, a 5xx and a failed call; one upstream call each.
 */
static void check_shared(const char *a_body, const char *b_body, int status, int result)
{
    world_default();
    struct httpd_req a, b;
    serve_miss(&a, a_body);
    serve_miss(&b, b_body);
    T_CHECK_INT(nff, 1);
    if (result == 0)
        upstream_answer(&ff[0], status, "application/json", REFUSAL);
    else
        upstream_end(&ff[0], result, "connection reset");
    settle();
    T_CHECK_INT(nff, 1);
    T_CHECK_INT(stat(STAT_coalesce_retries), 0);
    T_CHECK(a.finished && b.finished);
    T_CHECK_INT(a.status, status);
    T_CHECK_INT(b.status, status);
    T_CHECK_STR(pc_buf_cstr(&b.out), pc_buf_cstr(&a.out));
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

static void test_refusal_shared(void)
{
    check_shared(BOGUS_TIER, BOGUS_TIER, 400, 0);
    check_shared(WITH_USER, CHAT_BODY, 429, 0);
    check_shared(WITH_USER, CHAT_BODY, 408, 0);
    check_shared(WITH_USER, CHAT_BODY, 503, 0);
    check_shared(WITH_USER, CHAT_BODY, 502, XFER_ERR_CONNECT);
}

/* Requests that leave a refused call with one body share their own call, once. */
static void test_refusal_left_together(void)
{
    world_default();
    struct httpd_req a, b, c;
    serve_miss(&a, BOGUS_TIER);
    serve_miss(&b, WITH_USER);
    serve_miss(&c, WITH_USER);
    T_CHECK_INT(stat(STAT_coalesced), 2);
    upstream_answer(&ff[0], 400, "application/json", REFUSAL);
    settle();
    T_CHECK_INT(nff, 2);
    T_CHECK_INT(stat(STAT_coalesce_retries), 2);
    T_CHECK_INT(stat(STAT_coalesced), 3); /* one of them joined the other's call */
    upstream_answer(&ff[1], 400, "application/json", "{\"error\":{\"message\":\"again\"}}");
    settle();
    T_CHECK_INT(nff, 2); /* a refusal of their very body: shared, not called again */
    T_CHECK_INT(b.status, 400);
    T_CHECK_INT(c.status, 400);
    T_CHECK_STR(pc_buf_cstr(&c.out), "{\"error\":{\"message\":\"again\"}}");
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
    fake_req_free(&c);
}

/* One that left a refused call and hangs up: its own call is abandoned, not the refused one. */
static void test_refusal_left_then_gone(void)
{
    world_default();
    struct httpd_req a, b;
    serve_miss(&a, BOGUS_STREAM);
    serve_miss(&b, PLAIN_STREAM);
    upstream_head(&ff[0], 400, "application/json");
    settle();
    T_CHECK_INT(nff, 2);
    client_leaves(&b);
    settle();
    T_CHECK(ff[1].abandoned);
    T_CHECK(!ff[0].abandoned);
    upstream_body(&ff[0], REFUSAL);
    upstream_end(&ff[0], 0, NULL);
    upstream_end(&ff[1], XFER_ERR_IO, "aborted");
    settle();
    T_CHECK_INT(a.status, 400);
    T_CHECK_INT(b.violations, 0);
    T_CHECK_INT(stat(STAT_client_aborts), 1);
    world_down();
    fake_req_free(&a);
    fake_req_free(&b);
}

/* ---- a purge between two identical requests ----------------------------------------------- */

#define ANSWER_AFTER                                                                         \
    "{\"id\":\"c2\",\"object\":\"chat.completion\",\"created\":2,\"model\":\"gpt-4o-mini\"," \
    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"made "      \
    "since\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":11,"                 \
    "\"completion_tokens\":7,\"total_tokens\":18}}"

enum purge_kind {
    PURGE_ALL,   /* a flush, or any purge but one entry's (pc_fence.h) */
    PURGE_ENTRY, /* the request's own entry */
    PURGE_OTHER, /* another entry: no purge of this key */
};

static void purge_now(enum purge_kind kind)
{
    unsigned char other[PC_SHA256_LEN];
    memcpy(other, fc.exact, PC_SHA256_LEN);
    for (int i = 0; i < 8; i++)
        other[i]++; /* another slot, whatever the byte order (test_fence) */
    if (kind == PURGE_ALL)
        fence_mark_all(wk.fence);
    else
        fence_mark(wk.fence, kind == PURGE_ENTRY ? fc.exact : other);
}

/*
 * a's call is in flight, b joined it; then a purge. c, asked after it, used to join a's call
 * and get its answer, made before the purge (by the model or with the prompt the purge was
 * for). Now c makes its own call, which d joins; a and b keep the answer of the call they
 * asked for before the purge. Only c's answer is stored. A purge of another entry changes
 * nothing: c joins a's call. lookup_first: c's lookup began before the purge, and its call
 * after: it does not join either (its call's answer is made after the purge), and its ticket
 * does not store (pc_fence.h: its lookup came before the purge).
 */
static void check_purge_between(enum purge_kind kind, bool lookup_first)
{
    world_default();
    struct httpd_req a, b, c, d;
    serve_miss(&a, CHAT_BODY);
    serve_miss(&b, CHAT_BODY);
    T_CHECK_INT(nff, 1);
    T_CHECK_INT(stat(STAT_coalesced), 1);
    if (lookup_first) {
        chat_request(&c, CHAT_BODY);
        proxy_serve(&wk, &c, &fake_ops);
        purge_now(kind);
        struct cache_result miss = {.outcome = CACHE_MISS};
        lookup_complete(&miss);
    } else {
        purge_now(kind);
        serve_miss(&c, CHAT_BODY);
    }
    bool fenced = kind != PURGE_OTHER;
    T_CHECK_INT(nff, fenced ? 2 : 1);
    T_CHECK_INT(stat(STAT_coalesced), fenced ? 1 : 2);
    serve_miss(&d, CHAT_BODY);
    T_CHECK_INT(nff, fenced ? 2 : 1); /* d joins the call made after the purge */
    T_CHECK_INT(stat(STAT_coalesced), fenced ? 2 : 3);
    upstream_answer(&ff[0], 200, "application/json", ANSWER_JSON);
    if (nff == 2)
        upstream_answer(&ff[1], 200, "application/json", ANSWER_AFTER);
    settle();
    struct httpd_req *all[] = {&a, &b, &c, &d};
    for (size_t i = 0; i < 4; i++) {
        T_CHECK(all[i]->finished && !all[i]->aborted);
        T_CHECK_INT(all[i]->status, 200);
        T_CHECK_STR(reply_header(all[i], "X-Cache-Status"), "MISS");
        T_CHECK_INT(all[i]->violations, 0);
    }
    T_CHECK_STR(pc_buf_cstr(&a.out), ANSWER_JSON);
    T_CHECK_STR(pc_buf_cstr(&b.out), ANSWER_JSON);
    T_CHECK_STR(pc_buf_cstr(&c.out), fenced ? ANSWER_AFTER : ANSWER_JSON);
    T_CHECK_STR(pc_buf_cstr(&d.out), fenced ? ANSWER_AFTER : ANSWER_JSON);
    T_CHECK_INT(nstores, fenced && lookup_first ? 0 : 1);
    world_down();
    for (size_t i = 0; i < 4; i++)
        fake_req_free(all[i]);
}

static void test_purge_between(void)
{
    check_purge_between(PURGE_ALL, false);
    check_purge_between(PURGE_ENTRY, false);
    check_purge_between(PURGE_OTHER, false);
    check_purge_between(PURGE_ALL, true);
    check_purge_between(PURGE_ENTRY, true);
}

/* ---- the error bound's held-back candidates -------------------------------------------- */

/*
 * A candidate the bound held back: the request goes upstream, its answer is
 * compared with the candidate's (as cache_put does, before the waiting
 * clients hear of the answer) and the client learns the similarity and the
 * verdict.
 */
static void test_semantic_held_back(void)
{
    char *argv[] = {
        "--semantic", "yes", "--semantic-max-error", "0.05", "--semantic-verify-answers", "exact"};
    world_up((int)PC_ARRAY_LEN(argv), argv);
    struct store_opts so = {.url = "unix:/nonexistent/test_proxy.sock", .timeout_ms = 50};
    struct store *st = store_create(base, &so, &wk.stats); /* never started: writes fail */
    struct bound *b = bound_create(conf, "test-space");
    struct bound_port *bp = bound_port_create(b, st, &wk.stats, NULL, NULL, NULL);
    unsigned char part[PC_SHA256_LEN] = {7};
    struct bound_view *view = bound_view_create(bp, NULL, part);
    struct entry cand;
    stored_answer(&cand, ANSWER_JSON);
    struct bound_decision d = {.verdict = BOUND_WITHHOLD, .threshold = 1};
    unsigned char cand_exact[PC_SHA256_LEN] = {9};
    struct bound_probe *probe =
        bound_probe_create(view, &d, 0.87, &cand, "0123456789abcdef0123456789abcdef", cand_exact);
    T_CHECK(probe != NULL);

    struct httpd_req hr;
    chat_request(&hr, CHAT_BODY);
    proxy_serve(&wk, &hr, &fake_ops);
    T_CHECK(fc.had_partition); /* semantic on: the stage may run */
    struct cache_result res = {.outcome = CACHE_MISS, .probe = probe};
    lookup_complete(&res);
    T_CHECK_INT(nff, 1);
    struct entry fresh;
    stored_answer(&fresh, ANSWER_JSON); /* the same answer: agreed */
    struct bound_cmp *cmp = NULL;
    T_CHECK_INT(bound_compare(bp, probe, &fresh, NULL, NULL, &cmp), 1);
    upstream_head(&ff[0], 200, "application/json");
    upstream_body(&ff[0], ANSWER_JSON);
    upstream_end(&ff[0], 0, NULL);
    settle();
    T_CHECK_STR(reply_header(&hr, "X-Cache-Status"), "MISS");
    T_CHECK_STR(reply_header(&hr, "X-Cache-Similarity"), "0.8700");
    T_CHECK_STR(reply_header(&hr, "X-Cache-Verify"), "agreed");
    T_CHECK_INT(stat(STAT_semantic_bound_agreed), 1);

    bound_probe_unref(&probe);
    bound_view_free(&view);
    bound_port_destroy(&bp);
    bound_destroy(&b);
    world_down();
    store_destroy(&st);
    fake_req_free(&hr);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    flight_table_init();
    T_RUN(test_exact_hit_later);
    T_RUN(test_hit_at_once);
    T_RUN(test_hit_as_stream);
    T_RUN(test_semantic_hit);
    T_RUN(test_hit_unrenderable);
    T_RUN(test_hit_other_mode_only);
    T_RUN(test_hit_at_once_unrenderable);
    T_RUN(test_miss_fetched_and_stored);
    T_RUN(test_miss_streamed_backpressure);
    T_RUN(test_streamed_slow_client_after_end);
    T_RUN(test_bypass_mode_off);
    T_RUN(test_refresh);
    T_RUN(test_cache_unavailable);
    T_RUN(test_coalesced_wait);
    T_RUN(test_passthrough);
    T_RUN(test_request_errors);
    T_RUN(test_upstream_failure);
    T_RUN(test_abort_during_lookup);
    T_RUN(test_abort_mid_fetch);
    T_RUN(test_coalesced_joiner_aborts);
    T_RUN(test_coalesced_leader_aborts);
    T_RUN(test_purge_between);
    T_RUN(test_refusal_not_shared);
    T_RUN(test_refusal_joined_late);
    T_RUN(test_refusal_shared);
    T_RUN(test_refusal_left_together);
    T_RUN(test_refusal_left_then_gone);
    T_RUN(test_semantic_held_back);
    flight_table_destroy();
    T_DONE();
}
