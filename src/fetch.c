/*
 * fetch.c - the upstream call behind a flight (see pc_fetch.h). Owns the
 * struct fetch, a copy of the request's prefix chain, the upstream request
 * built for it (pc_backend.h), its xfer, its two events (resume, abort) on
 * the worker's base, one reference to the flight and one in-flight count on
 * the replica it calls (pc_route.h).
 *
 *   fetch_start ─▶ route_pick ─▶ backend_prepare (hints from the pick) ─▶ xfer_start
 *                     ▲                                                    │ refused before
 *                     └──── another replica (same request) ◀───────────────┘ any byte
 *                               xfer on_head ─▶ flight_set_head
 *                               on_data ─▶ flight_append (PAUSE ⇄ resume_ev)
 *                               on_done ─▶ store (2xx, complete; else compare only, when the
 *                                          error bound held a candidate back) ─▶ flight_finish
 *   abort_ev (last subscriber left) ─▶ xfer_abort ─▶ flight_finish(aborted)
 */
#include "pc_fetch.h"
#include "pc_backend.h"
#include "pc_chain.h"
#include "pc_conf.h"
#include "pc_dialect.h"
#include "pc_flight.h"
#include "pc_jskim.h"
#include "pc_log.h"
#include "pc_model.h"
#include "pc_route.h"
#include "pc_savings.h"
#include "pc_tally.h"
#include "pc_context.h"

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
    const struct route_replica *rep;    /* the replica called (counted in flight) */
    const struct route_replica *served; /* the one that answered (from the head on) */
    uint64_t tried;                     /* replicas that refused this call's connection */
    struct chain chain;                 /* the prompt's prefix chain (n 0: none) */
    struct route_query q;               /* the pick: what was matched on rep */
    struct backend_req breq;            /* kept for another replica until the head comes */
    bool got_head;
    bool stored_response; /* fetch_req.stored_response */
    bool skipping;        /* this replica's 404: another one is asked (on_done) */
    /* The last such 404, kept whole: the answer if no replica asked after it gives one. */
    struct flight_header *held_hdrs; /* one block, as flight_set_head takes it */
    size_t held_nh;
    int held_status;
    const struct route_replica *held_from;
    struct pc_buf held_body;
    bool held_ok; /* it arrived whole and fits HELD_MAX */
    char reqid[32];
    uint64_t start_us;

    bool want_store;             /* the request asked for its answer to be stored */
    bool store;                  /* still a candidate for the cache */
    struct cache_ticket *ticket; /* its keys (and the error bound's probe), until used */
    int64_t ttl_ms;
    enum api_endpoint endpoint;
    bool stream;
    int status;
    char *content_type;
    struct flight_header replay[ENTRY_MAX_HEADERS]; /* headers stored with the answer */
    size_t nreplay;
    size_t received;
    bool trimming;                   /* over cache-max-entry-size: no longer recorded */
    struct usage_scan *scan;         /* trimming a JSON answer: its usage, read as it passes */
    struct sse_usage_scan *sse_scan; /* trimming a stream: the same, event by event (pc_sse.h) */
    bool until_close;                /* a 2xx API answer that ends when the connection closes */
    struct sse_end_scan *end_scan;   /* ... an event stream: whether an event ended it */
    struct json_end *json_end;       /* ... else: whether its JSON closed */
    char model[TALLY_MODEL_MAX + 1]; /* for the per-model/tenant usage counts */
    char tenant[TENANT_ID_LEN + 1];
    struct cache_put_op *put; /* storing the answer, while Redis acknowledges it */
    struct fetch *next;       /* the worker's list of running calls */
    struct fetch *prev;
};

/*
 * Response headers never relayed: hop-by-hop ones (also those the upstream's
 * Connection header names), those httpd sets itself, the proxy's own
 * headers (an upstream that is itself a promptcache must not speak for this
 * one), and the upstream's CORS headers when the proxy answers CORS itself
 * (cors-origins): two Access-Control-Allow-Origin headers fail in browsers.
 */
static bool response_header_dropped(const char *name, const char *conn_tokens, bool own_cors)
{
    static const char *const dropped[] = {
        "content-length", "date", "server", "age", "x-upstream",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(dropped); i++)
        if (pc_strcaseeq(name, dropped[i]))
            return true;
    if (own_cors && pc_strncaseeq(name, "access-control-", 15))
        return true;
    return pc_hop_by_hop(name) || pc_strncaseeq(name, "x-cache-", 8) ||
           pc_strncaseeq(name, "x-promptcache-", 14) || pc_token_list_has(conn_tokens, name);
}

/* Keep a copy of a header to store with the answer, if it is one a hit replays. */
static void keep_for_replay(struct fetch *f, const char *name, const char *value)
{
    if (f->nreplay == ENTRY_MAX_HEADERS || !api_header_replayable(name) ||
        !entry_header_valid(name, strlen(name), value, strlen(value)))
        return;
    f->replay[f->nreplay].name = pc_strdup(name);
    f->replay[f->nreplay].value = pc_strdup(value);
    f->nreplay++;
}

/*
 * The root "usage" member of a JSON answer too large to keep (trimming):
 * its bytes are picked out as the answer passes, so its tokens are still
 * counted. Tracks strings and nesting only; what it picks is parsed at the
 * end like any answer (an invalid or cut-off answer yields nothing usable).
 */
#define USAGE_SCAN_MAX 4096

struct usage_scan {
    unsigned depth; /* open objects and arrays */
    bool in_str;    /* inside a string */
    bool esc;       /* ... after a backslash */
    bool want_key;  /* the root object's next string is a member name */
    bool key;       /* reading a member name of the root object */
    bool is_usage;  /* the name just read is "usage" (its value follows the ':') */
    bool taking;    /* copying the value of the root's "usage" */
    bool overflow;  /* that value was longer than USAGE_SCAN_MAX: not kept */
    size_t keylen;  /* bytes of the member name so far (compared up to 5) */
    char name[5];
    struct pc_buf value; /* the value's text, the last "usage" seen */
};

static void usage_scan_free(struct usage_scan **sp)
{
    if (*sp == NULL)
        return;
    pc_buf_free(&(*sp)->value);
    free(*sp);
    *sp = NULL;
}

static void usage_take(struct usage_scan *s, char c)
{
    if (s->value.len < USAGE_SCAN_MAX)
        pc_buf_append_char(&s->value, c);
    else
        s->overflow = true;
}

static void usage_scan_feed(struct usage_scan *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (s->in_str) {
            if (s->taking)
                usage_take(s, c);
            if (s->esc) {
                s->esc = false;
            } else if (c == '\\') {
                s->esc = true;
            } else if (c == '"') {
                s->in_str = false;
                s->is_usage = s->key && s->keylen == 5 && memcmp(s->name, "usage", 5) == 0;
                s->key = false;
            } else if (s->key) {
                if (s->keylen < sizeof(s->name))
                    s->name[s->keylen] = c;
                s->keylen++;
            }
            continue;
        }
        if (s->taking && s->depth == 1 && (c == ',' || c == '}'))
            s->taking = false; /* the value ended; c is the root's again */
        else if (s->taking)
            usage_take(s, c);
        switch (c) {
        case '"':
            s->in_str = true;
            s->key = s->depth == 1 && s->want_key;
            s->keylen = 0;
            s->want_key = false;
            break;
        case '{':
        case '[':
            s->depth++;
            s->want_key = s->depth == 1 && c == '{';
            break;
        case '}':
        case ']':
            s->depth = s->depth > 0 ? s->depth - 1 : 0;
            break;
        case ',':
            s->want_key = s->depth == 1;
            break;
        case ':':
            if (s->depth == 1 && s->is_usage) {
                pc_buf_reset(&s->value);
                s->overflow = false;
                s->taking = true;
            }
            s->is_usage = false;
            break;
        default:
            break;
        }
    }
}

/*
 * Whether a JSON answer that ends when the connection closes (until_close)
 * arrived whole: its root object or array closed. Tracks strings and
 * nesting only (whether it is valid JSON is the parse's business). A body
 * that does not open with '{' or '[' is no JSON to judge; one with nothing
 * but white space, or whose root is still open at the close, was cut off.
 */
struct json_end {
    unsigned depth;
    bool in_str, esc;
    bool opened; /* the first byte that is not white space came: '{' or '[' */
    bool other;  /* ... something else: not judged */
    bool closed; /* the root value closed */
};

static bool json_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static void json_end_feed(struct json_end *j, const char *p, size_t n)
{
    for (size_t i = 0; i < n && !j->closed && !j->other; i++) {
        char c = p[i];
        if (!j->opened) {
            if (json_blank(c))
                continue;
            j->opened = c == '{' || c == '[';
            j->other = !j->opened;
            j->depth = j->opened;
            continue;
        }
        if (j->in_str) {
            if (j->esc)
                j->esc = false;
            else if (c == '\\')
                j->esc = true;
            else if (c == '"')
                j->in_str = false;
        } else if (c == '"') {
            j->in_str = true;
        } else if (c == '{' || c == '[') {
            j->depth++;
        } else if (c == '}' || c == ']') {
            j->closed = --j->depth == 0;
        }
    }
}

static void sse_scan_free(struct sse_usage_scan **sp)
{
    if (*sp == NULL)
        return;
    sse_usage_scan_free(*sp);
    free(*sp);
    *sp = NULL;
}

/* The usage a stream's events reported as they passed, into u; false if none. */
static bool sse_scan_result(const struct fetch *f, struct api_usage *u)
{
    memset(u, 0, sizeof(*u));
    const cJSON *usage = sse_usage_scan_result(f->sse_scan);
    if (usage == NULL)
        return false;
    cJSON *resp = cJSON_CreateObject();
    cJSON_AddItemReferenceToObject(resp, "usage", (cJSON *)usage);
    dialect_usage(f->endpoint, resp, u);
    cJSON_Delete(resp);
    return u->present;
}

/* The usage the scan picked out, into u; false if it found none that parses. */
static bool usage_scan_result(const struct fetch *f, struct api_usage *u)
{
    memset(u, 0, sizeof(*u));
    if (f->sse_scan != NULL)
        return sse_scan_result(f, u);
    const struct usage_scan *s = f->scan;
    if (s == NULL || s->taking || s->overflow || s->value.len == 0)
        return false;
    cJSON *value = cJSON_ParseWithLength(s->value.data, s->value.len);
    if (!cJSON_IsObject(value)) {
        cJSON_Delete(value);
        return false;
    }
    cJSON *resp = cJSON_CreateObject();
    cJSON_AddItemToObject(resp, "usage", value);
    dialect_usage(f->endpoint, resp, u);
    cJSON_Delete(resp);
    return u->present;
}

/* The call to f->rep ended: its in-flight count and health. */
static void fetch_release(struct fetch *f, enum route_result res)
{
    /* It never saw the prompt, or gave no answer to it: not believed held there. */
    if (f->rep != NULL && (res == ROUTE_CONNECT_ERR || res == ROUTE_NO_ANSWER))
        route_unsent(f->w->route, f->rep, &f->q);
    if (f->rep != NULL)
        route_end(f->w->route, f->rep, res);
    f->rep = NULL;
}

static void fetch_free(struct fetch *f)
{
    fetch_release(f, ROUTE_ABORTED);
    backend_req_free(&f->breq);
    free(f->held_hdrs);
    pc_buf_free(&f->held_body);
    chain_free(&f->chain);
    cache_put_cancel(&f->put);
    cache_ticket_free(&f->ticket);
    if (f->fl != NULL)
        flight_fetch_bind(f->fl, NULL, NULL);
    if (f->resume_ev != NULL)
        event_free(f->resume_ev);
    if (f->abort_ev != NULL)
        event_free(f->abort_ev);
    flight_put(&f->fl);
    free(f->content_type);
    usage_scan_free(&f->scan);
    sse_scan_free(&f->sse_scan);
    if (f->end_scan != NULL)
        sse_end_scan_free(f->end_scan);
    free(f->end_scan);
    free(f->json_end);
    for (size_t i = 0; i < f->nreplay; i++) {
        free(f->replay[i].name);
        free(f->replay[i].value);
    }
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
    context_ended(w);
}

/* Replicas not asked yet for this call (not tried, not the one being asked). */
static bool replica_left(const struct fetch *f)
{
    size_t n = route_count(f->w->route);
    uint64_t all = n >= 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1;
    uint64_t asked = f->tried | (f->rep != NULL ? UINT64_C(1) << f->rep->index : 0);
    return (all & ~asked) != 0;
}

/*
 * A 2xx answer of an API endpoint with neither Content-Length nor chunked
 * framing (HTTP/1.0, or "Connection: close" without a length) ends when the
 * upstream closes the connection, and a close mid-answer reads the same to
 * libcurl. Its bytes are watched for its end: an event stream's terminator
 * or error event, a JSON answer's closing brace (on_done).
 */
static void watch_close(struct fetch *f)
{
    f->until_close = true;
    if (f->content_type != NULL && pc_strncaseeq(f->content_type, "text/event-stream", 17)) {
        f->end_scan = pc_calloc(1, sizeof(*f->end_scan));
        sse_end_scan_init(f->end_scan, dialect_of(f->endpoint)->classify);
    } else {
        f->json_end = pc_calloc(1, sizeof(*f->json_end));
    }
}

/* An answer that ends at the close (until_close) and ended with its connection only. */
static bool cut_at_close(const struct fetch *f)
{
    if (!f->until_close)
        return false;
    if (f->end_scan != NULL)
        return !sse_end_scan_ended(f->end_scan) && !f->end_scan->failed;
    const struct json_end *j = f->json_end;
    return !j->other && !j->closed;
}

/*
 * Whether a 2xx status says the body is the answer: not 202 Accepted (the
 * work is queued, its body a receipt: served from the cache it would claim
 * work that never ran) nor 206 Partial Content (a part of a body). Those
 * are relayed, never stored nor compared.
 */
static bool status_is_answer(int status)
{
    return status >= 200 && status <= 299 && status != 202 && status != 206;
}

/* What the head tells beyond its fields (relay_head). */
struct head_facts {
    bool framed;  /* Content-Length or chunked: curl tells a short body from a whole one */
    bool encoded; /* gzip, br...: stored without its encoding header, it would be garbage */
};

/*
 * The fields relayed to clients, in one block (the array, then the strings:
 * flight_set_head's); *n of them. Keeps the replayable ones and the
 * Content-Type on f.
 */
static struct flight_header *relay_head(struct fetch *f, const struct xfer_header *h, size_t nh,
                                        size_t *n, struct head_facts *facts)
{
    const char *conn = NULL;
    bool own_cors = f->w->conf->cors_origins.n > 0;
    for (size_t i = 0; i < nh; i++)
        if (pc_strcaseeq(h[i].name, "connection"))
            conn = h[i].value;
    size_t text = 0;
    for (size_t i = 0; i < nh; i++)
        text += strlen(h[i].name) + strlen(h[i].value) + 2;
    struct flight_header *hdrs = pc_malloc((nh ? nh : 1) * sizeof(*hdrs) + text);
    char *at = (char *)(hdrs + (nh ? nh : 1));
    *n = 0;
    memset(facts, 0, sizeof(*facts));
    for (size_t i = 0; i < nh; i++) {
        if (pc_strcaseeq(h[i].name, "content-length") ||
            (pc_strcaseeq(h[i].name, "transfer-encoding") &&
             pc_token_list_has(h[i].value, "chunked")))
            facts->framed = true;
        if (response_header_dropped(h[i].name, conn, own_cors))
            continue;
        keep_for_replay(f, h[i].name, h[i].value);
        if (pc_strcaseeq(h[i].name, "content-type") && f->content_type == NULL)
            f->content_type = pc_strdup(h[i].value);
        if (pc_strcaseeq(h[i].name, "content-encoding") && !pc_strcaseeq(h[i].value, "identity"))
            facts->encoded = true;
        hdrs[*n].name = at;
        at = stpcpy(at, h[i].name) + 1;
        hdrs[*n].value = at;
        at = stpcpy(at, h[i].value) + 1;
        (*n)++;
    }
    return hdrs;
}

/* Forget what relay_head kept on f for an answer that is not relayed (a skipped 404). */
static void forget_head(struct fetch *f)
{
    for (size_t i = 0; i < f->nreplay; i++) {
        free(f->replay[i].name);
        free(f->replay[i].value);
    }
    f->nreplay = 0;
    free(f->content_type);
    f->content_type = NULL;
}

/* A skipped 404 larger than this is not kept (an API's 404 is a short error). */
#define HELD_MAX (64 * 1024)

/* Keep this replica's 404 (replacing an earlier one): its body follows (on_data). */
static void hold_404(struct fetch *f, int status, const struct xfer_header *h, size_t nh)
{
    struct head_facts facts;
    free(f->held_hdrs);
    f->held_hdrs = relay_head(f, h, nh, &f->held_nh, &facts);
    forget_head(f);
    f->held_status = status;
    f->held_from = f->rep;
    f->held_ok = true; /* until the body proves otherwise (on_data, on_done) */
    pc_buf_reset(&f->held_body);
}

static void on_head(void *arg, int status, const struct xfer_header *h, size_t nh)
{
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    if (f->rep != NULL) /* shared with the other instances only if it took the call */
        route_answered(f->w->route, f->rep, &f->q, status);
    if (status == 404 && f->stored_response && f->breq.method != NULL && replica_left(f)) {
        f->skipping = true; /* another replica may hold the response: this 404 waits aside */
        hold_404(f, status, h, nh);
        return;
    }
    size_t n = 0;
    struct head_facts facts;
    struct flight_header *hdrs = relay_head(f, h, nh, &n, &facts);
    f->status = status;
    f->got_head = true;
    f->served = f->rep;
    backend_req_free(&f->breq); /* no other replica will be asked */
    if (!status_is_answer(status))
        f->store = false;
    if (status >= 500)
        stats_incr(&f->w->stats, STAT_upstream_5xx);
    if (facts.encoded)
        f->store = false;
    /* An encoded body is not read: relayed as it came, its end not judged. */
    if (!facts.framed && !facts.encoded && status >= 200 && status <= 299 && status != 204 &&
        f->endpoint != API_NONE)
        watch_close(f);
    flight_set_head(f->fl, status, hdrs, n, f->rep->name);
}

static int on_data(void *arg, const char *data, size_t len)
{
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    if (f->skipping) { /* the 404 set aside: kept whole, or not at all */
        if (f->held_ok && f->held_body.len + len <= HELD_MAX)
            pc_buf_append(&f->held_body, data, len);
        else
            f->held_ok = false;
        return XFER_CONTINUE;
    }
    if (flight_append(f->fl, data, len) == FLIGHT_PAUSE)
        return XFER_PAUSE;
    f->received += len;
    if (f->end_scan != NULL)
        sse_end_scan_feed(f->end_scan, data, len);
    else if (f->json_end != NULL)
        json_end_feed(f->json_end, data, len);
    if (f->scan != NULL) {
        usage_scan_feed(f->scan, data, len);
    } else if (f->sse_scan != NULL) {
        sse_usage_scan_feed(f->sse_scan, data, len);
    } else if (!f->trimming && f->received > (size_t)f->w->conf->cache_max_entry_size) {
        /* Too big to cache or share: relay it, and let the log shrink as it is read. */
        f->store = false;
        f->trimming = true;
        /* Its usage is read as it passes, from the start the log still holds. */
        const struct pc_buf *body = f->endpoint != API_NONE ? flight_body(f->fl) : NULL;
        if (body != NULL && !f->stream) {
            f->scan = pc_calloc(1, sizeof(*f->scan));
            usage_scan_feed(f->scan, body->data, body->len);
        } else if (body != NULL) {
            f->sse_scan = pc_calloc(1, sizeof(*f->sse_scan));
            sse_usage_scan_init(f->sse_scan);
            sse_usage_scan_feed(f->sse_scan, body->data, body->len);
        }
        flight_stop_recording(f->fl);
    }
    return XFER_CONTINUE;
}

/*
 * The answer's usage, and whether it is complete (false: cut off or not
 * JSON). *fault says whether it has the shape its endpoint promises (0) or
 * why not (enum api_answer_fault): a 2xx "{}" or {"error": ...} is relayed
 * but never cached, or one tenant's error would be served to others.
 */
static bool answer_usage(const struct fetch *f, const struct pc_buf *body, struct api_usage *u,
                         int *fault)
{
    memset(u, 0, sizeof(*u));
    *fault = API_ANSWER_NOT_OBJECT;
    if (f->stream) {
        cJSON *resp = dialect_assemble(f->endpoint, body->data, body->len, u);
        if (resp == NULL)
            return false;
        *fault = api_answer_check_stream(f->endpoint, resp, NULL);
        cJSON_Delete(resp);
        return true;
    }
    /* The content (and every float of an embedding) is checked, not built. */
    size_t end = 0;
    cJSON *resp = jskim_parse_end(body->data, body->len, API_ANSWER_DEPTH, &end);
    if (resp == NULL || !cJSON_IsObject(resp)) {
        cJSON_Delete(resp);
        return false;
    }
    dialect_usage(f->endpoint, resp, u);
    *fault = api_answer_check(f->endpoint, resp, NULL);
    /* Text after the answer ("{...}{...}"): clients' parsers refuse it (Python's "Extra
     * data"), cJSON reads the first value alone, and in the other mode a stream client would
     * be served that first value as the whole answer. Relayed, never stored. */
    while (end < body->len && (body->data[end] == ' ' || body->data[end] == '\t' ||
                               body->data[end] == '\n' || body->data[end] == '\r'))
        end++;
    if (end < body->len && *fault == API_ANSWER_OK)
        *fault = API_ANSWER_NOT_OBJECT;
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
    stats_add(&w->stats, STAT_tokens_upstream_cache_write, u->cache_write);
    if (f->chain.n > 0 && f->served != NULL) /* the index's prediction next to the truth */
        route_usage(w->route, f->served, f->model, chain_bytes(&f->chain, (long)f->chain.n - 1),
                    f->q.matched_tokens, u);
    int64_t v[TALLY__COUNT] = {0};
    v[TALLY_upstream_prompt_tokens] = u->prompt;
    v[TALLY_upstream_completion_tokens] = u->completion;
    struct savings cost;
    savings_upstream(w, f->model, u, v, &cost); /* money and tokens by model */
    tally_add(w->tally, f->model, f->tenant, true, v);
    flight_set_usage(f->fl, u); /* for every waiter's access log line */
}

/*
 * A 2xx answer that is no whole answer (a stream with an error event, or
 * broken off, a JSON answer cut off) or too large to keep: the usage it
 * reported as far as it came is counted (a stream's usage chunk before the
 * cut, Anthropic's message_start before an error event), as the provider
 * counts it. The recorded bytes are read by the scan a trimmed answer uses.
 */
static void account_partial(struct fetch *f)
{
    const struct pc_buf *body = flight_body(f->fl);
    if (body != NULL && f->scan == NULL && f->sse_scan == NULL && f->endpoint != API_NONE) {
        if (f->stream) {
            f->sse_scan = pc_calloc(1, sizeof(*f->sse_scan));
            sse_usage_scan_init(f->sse_scan);
            sse_usage_scan_feed(f->sse_scan, body->data, body->len);
        } else {
            f->scan = pc_calloc(1, sizeof(*f->scan));
            usage_scan_feed(f->scan, body->data, body->len);
        }
    }
    struct api_usage usage;
    if (usage_scan_result(f, &usage))
        account_usage(f, &usage);
}

/* The one way a fetch ends: stop the call, tell every waiter, free. */
static void fetch_end(struct fetch *f, int result, const char *errmsg)
{
    xfer_abort(&f->x);
    flight_finish(f->fl, result, errmsg);
    fetch_free(f);
}

static void on_stored(void *arg, bool stored)
{
    (void)stored; /* counted by the cache */
    struct fetch *f = arg;
    PC_CHECK_OBJ(f, FETCH_MAGIC);
    f->put = NULL;
    fetch_end(f, XFER_OK, NULL);
}

/* What became of a complete 2xx answer: stored, only compared (pc_bound.h), or neither. */
enum answer_fate { FATE_NONE, FATE_STORING, FATE_COMPARING };

/*
 * Account a complete 2xx answer; if it may be cached, send it to Redis,
 * else (Cache-Control: no-store), if the error bound held a candidate back
 * for it (the ticket's probe), compare it with that candidate's. FATE_STORING or FATE_COMPARING:
 * on its way (on_stored finishes the flight); FATE_NONE: nothing to wait for
 * (an answer compared at once has its verdict already).
 */
static enum answer_fate store_answer(struct fetch *f, uint64_t latency_us)
{
    if (f->endpoint == API_NONE)
        return FATE_NONE; /* pass-through: neither accounted nor stored */
    const struct pc_buf *body = flight_body(f->fl);
    struct api_usage usage;
    int fault = 0;
    bool usable = body != NULL && body->len > 0 && answer_usage(f, body, &usage, &fault);
    if (usable)
        account_usage(f, &usage);
    else
        account_partial(f); /* too large to keep, or no whole answer: what it reported */
    if (f->ticket == NULL || !usable || !status_is_answer(f->status))
        return FATE_NONE; /* cut off, too large to keep, not JSON, 202/206: nothing to compare */
    if (fault == API_ANSWER_NOT_FINISHED) {
        /* Counted (cache_store_skipped); an upstream failing mid-answer may do it every time. */
        if (f->store && log_enabled(PC_LOG_DEBUG))
            log_write(PC_LOG_DEBUG, f->reqid,
                      "answer not cached: not_finished (the %s answer never says why its "
                      "generation stopped: no finish_reason, stop_reason or final status)",
                      api_endpoint_name(f->endpoint));
        return FATE_NONE; /* nor compared: a part of an answer is no answer to compare */
    }
    if (fault != 0) {
        if (f->store)
            log_write(PC_LOG_INFO, f->reqid,
                      "answer not cached: %s (not the shape a %s answer has)",
                      api_answer_fault_name((enum api_answer_fault)fault),
                      api_endpoint_name(f->endpoint));
        return FATE_NONE; /* nor compared: an error in a 2xx is no answer to the question */
    }
    /*
     * A hit in the other mode (a stream assembled for a JSON client, a JSON
     * answer turned into a stream) goes through cJSON, whose strings end at a
     * decoded U+0000: the text after it would be lost. Such answers are
     * relayed, never stored, as requests with "\u0000" are never cached.
     * Nor compared: the comparators read the text through cJSON too, and an
     * answer cut at U+0000 could agree where the whole one differs. A raw
     * NUL byte (no JSON, but cJSON reads it and ends the string there) is
     * the same (a stream's events with one never assemble).
     */
    if (memmem(body->data, body->len, "\\u0000", 6) != NULL ||
        memchr(body->data, '\0', body->len) != NULL) {
        if (f->store)
            log_write(PC_LOG_INFO, f->reqid,
                      "answer not cached: it contains \\u0000 or a NUL byte");
        return FATE_NONE;
    }
    /*
     * Nor a JSON answer that breaks RFC 8259 where cJSON is lenient ("\u00zz",
     * which cJSON reads as U+0000, a raw control character in a string): its
     * clients cannot read it, and in the other mode it would be a readable
     * answer the upstream never gave. (A stream's events are held to the
     * same rules when it is assembled: dialect_parse_json.)
     */
    char why[128];
    if (!f->stream && !pc_json_strict(body->data, body->len, why, sizeof(why))) {
        if (f->store)
            log_write(PC_LOG_INFO, f->reqid, "answer not cached: not valid JSON (%s)", why);
        return FATE_NONE;
    }
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
    for (size_t i = 0; i < f->nreplay; i++)
        e.headers[e.nheaders++] =
            (struct entry_header){f->replay[i].name, strlen(f->replay[i].name), f->replay[i].value,
                                  strlen(f->replay[i].value)};
    /*
     * A purge ran since the lookup (this instance's or another's: pc_fence.h): the answer was
     * made before it, by the model or with the prompt it was for. Relayed, not stored.
     */
    if (f->store && cache_fenced(f->w->cache, f->ticket)) {
        log_write(PC_LOG_INFO, f->reqid,
                  "answer not cached: the cache was purged while it was being fetched");
        stats_incr(&f->w->stats, STAT_cache_store_skipped);
        f->store = false;
    }
    if (f->store) {
        f->put = cache_put(f->w->cache, &f->ticket, &e, f->ttl_ms, on_stored, f);
        return f->put != NULL ? FATE_STORING : FATE_NONE;
    }
    f->put = cache_compare(f->w->cache, &f->ticket, &e, on_stored, f);
    return f->put != NULL ? FATE_COMPARING : FATE_NONE;
}

static bool fetch_attempt(struct fetch *f);

/*
 * The replica answered 404 for a response stored on a replica: ask one not
 * asked yet, as when a replica refuses the connection. True if under way.
 */
static bool ask_another(struct fetch *f, enum xfer_result result)
{
    const struct route_replica *asked = f->rep;
    f->skipping = false;
    fetch_release(f, result == XFER_OK ? ROUTE_OK : ROUTE_ERR);
    f->tried |= UINT64_C(1) << asked->index;
    if (!fetch_attempt(f))
        return false;
    log_write(PC_LOG_INFO, f->reqid, "upstream %s: 404 for a stored response; asking %s",
              asked->name, f->rep->name);
    return true;
}

/*
 * The replica refused the connection, so it never saw the request: ask
 * another one (each at most once). True if a new attempt is under way.
 */
static bool retry_elsewhere(struct fetch *f, const char *errmsg)
{
    const struct route_replica *failed = f->rep;
    fetch_release(f, ROUTE_CONNECT_ERR);
    f->tried |= UINT64_C(1) << failed->index;
    if (f->breq.method == NULL || route_count(f->w->route) < 2)
        return false;
    if (!fetch_attempt(f))
        return false;
    log_write(PC_LOG_INFO, f->reqid, "upstream %s: %s; trying %s", failed->name,
              errmsg ? errmsg : "refused", f->rep->name);
    stats_incr(&f->w->stats, STAT_upstream_failovers);
    return true;
}

/*
 * The 404 a replica gave for a stored response, set aside to ask another
 * (hold_404), becomes the answer: the ones asked after it refused the
 * connection, timed out or failed before a head, or none was left. A 404
 * is never stored.
 */
static void give_held(struct fetch *f)
{
    f->status = f->held_status;
    f->got_head = true;
    f->served = f->held_from;
    f->store = false;
    flight_set_head(f->fl, f->held_status, f->held_hdrs, f->held_nh, f->held_from->name);
    f->held_hdrs = NULL; /* the flight's now */
    if (f->held_body.len > 0)
        flight_append(f->fl, f->held_body.data, f->held_body.len); /* no lag yet: taken */
    pc_buf_free(&f->held_body);
    f->held_ok = false;
    log_write(PC_LOG_INFO, f->reqid, "upstream %s: its 404 for a stored response is the answer",
              f->held_from->name);
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
    const char *called = f->rep != NULL ? f->rep->name : NULL; /* replicas live as long as we do */
    if (f->skipping) {
        f->held_ok = f->held_ok && result == XFER_OK; /* a 404 cut off is no answer to give */
        if (ask_another(f, result))
            return;
    }
    bool refused = result == XFER_ERR_CONNECT || result == XFER_ERR_CONNECT_TIMEOUT;
    if (refused && !f->got_head && retry_elsewhere(f, errmsg))
        return;
    if (result == XFER_OK && cut_at_close(f)) { /* to its waiters as any cut: 502, broken stream */
        result = XFER_ERR_IO;
        errmsg = "upstream closed the connection before its answer was complete";
        stats_incr(&f->w->stats, STAT_upstream_errors);
    }
    uint64_t latency = pc_mono_us() - f->start_us;
    if (f->rep != NULL) {
        struct stat_labels l = {.upstream = (int)f->rep->index};
        stats_observe(&f->w->stats, SF_upstream_latency_seconds, &l, (int64_t)latency);
    }
    if (result != XFER_OK) {
        log_write(PC_LOG_WARN, f->reqid, "upstream %s: %s",
                  f->rep != NULL ? f->rep->name : "(none left)", errmsg ? errmsg : "failed");
        if (called != NULL) /* the access log names the replica of an error too */
            flight_note_upstream(f->fl, called);
    }
    /* Silent for upstream-timeout: left out like a refusal, but not asked again elsewhere. */
    bool server_error = f->got_head && route_server_error(f->status);
    fetch_release(f, result == XFER_OK && server_error ? ROUTE_5XX
                     : result == XFER_OK               ? ROUTE_OK
                     : refused                         ? ROUTE_CONNECT_ERR
                     : result == XFER_ERR_TIMEOUT      ? ROUTE_SILENT
                     : result == XFER_ERR_INTERNAL     ? ROUTE_ABORTED
                     : !f->got_head                    ? ROUTE_NO_ANSWER
                                                       : ROUTE_ERR);
    if (!f->got_head && f->held_ok) { /* no replica asked after a 404 answered: that 404 */
        give_held(f);
        result = XFER_OK;
        errmsg = NULL;
    }
    bool ok2xx = f->got_head && f->status >= 200 && f->status <= 299;
    enum answer_fate fate = FATE_NONE;
    if (ok2xx && result == XFER_OK)
        fate = store_answer(f, latency);
    else if (ok2xx && f->endpoint != API_NONE && result != XFER_ERR_INTERNAL)
        account_partial(f); /* broken off or timed out: what it reported before */
    /* Wanted in the cache, but an error, cut off, too large, not cacheable or Redis away. */
    if (f->want_store && fate != FATE_STORING)
        stats_incr(&f->w->stats, STAT_cache_store_skipped);
    if (fate == FATE_NONE)
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
    if (f->put != NULL)
        return; /* the answer is complete and on its way to Redis: let it land */
    log_write(PC_LOG_INFO, f->reqid,
              "no client waits for the answer any more: upstream call aborted");
    fetch_end(f, XFER_ERR_INTERNAL, "aborted: every client went away");
}

static const struct xfer_ops fetch_ops = {on_head, on_data, on_done};

/* Pick a replica not tried yet (counted in flight); false if none is left. */
static bool fetch_pick(struct fetch *f)
{
    f->q.exclude = f->tried;
    f->rep = route_pick(f->w->route, &f->q);
    return f->rep != NULL;
}

/* Start the call on f->rep; false (and the replica released) if it cannot start. */
static bool fetch_send(struct fetch *f)
{
    struct worker *w = f->w;
    struct pc_buf url = PC_BUF_INIT;
    backend_url(&f->breq, f->rep, &url);
    struct xfer_req xr = {
        .method = f->breq.method,
        .url = pc_buf_cstr(&url),
        .headers = f->breq.hdrs,
        .nheaders = f->breq.nhdrs,
        .body = f->breq.body.data,
        .body_len = f->breq.body.len,
        .timeout = w->conf->upstream_timeout,
        .connect_timeout = w->conf->upstream_connect_timeout,
    };
    f->x = xfer_start(w->up, &xr, &fetch_ops, f);
    pc_buf_free(&url);
    if (f->x == NULL) {
        fetch_release(f, ROUTE_ABORTED);
        return false;
    }
    /* One replica: nothing to retry on, so the copy need not wait for the head. */
    if (route_count(w->route) < 2)
        backend_req_free(&f->breq);
    return true;
}

/* Another replica for the same upstream request (built for the first pick). */
static bool fetch_attempt(struct fetch *f)
{
    return fetch_pick(f) && fetch_send(f);
}

/* The first pick and the request built for it: hints follow what the pick found. */
static bool fetch_first(struct fetch *f, const struct fetch_req *req)
{
    struct worker *w = f->w;
    if (!fetch_pick(f))
        return false;
    struct backend_hints h = {
        .enabled = w->conf->prefix_hints,
        .include_usage = req->ask_usage,
        .chain = f->chain.n > 0 ? &f->chain : NULL,
        .tenant = req->kv_tenant,
        .routing_key = req->session != 0 ? req->session : chain_prefix_key(&f->chain),
        .fresh_links = f->q.fresh_links,
        .cpt = route_cpt(w->route, f->model),
    };
    struct backend_in in = {
        .method = req->method,
        .target = req->target,
        .headers = req->headers,
        .nheaders = req->nheaders,
        .body = req->body,
        .body_len = req->body_len,
        .endpoint = req->endpoint,
        .hints = &h,
    };
    backend_prepare(w->backend, w->conf, &in, &f->breq);
    return fetch_send(f);
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
    pc_strlcpy(f->reqid, req->reqid ? req->reqid : "-", sizeof(f->reqid));
    f->start_us = pc_mono_us();
    f->endpoint = req->endpoint;
    f->stream = req->stream;
    f->stored_response = req->stored_response;
    model_clean(req->model, f->model);
    pc_strlcpy(f->tenant, req->tenant_id ? req->tenant_id : "", sizeof(f->tenant));
    f->ttl_ms = req->ttl_ms;
    f->ticket = req->ticket;
    f->want_store = req->ticket != NULL && !req->compare_only;
    f->store = f->want_store;
    f->resume_ev = event_new(w->base, -1, 0, on_resume, f);
    f->abort_ev = event_new(w->base, -1, 0, on_abort, f);
    if (f->resume_ev == NULL || f->abort_ev == NULL) {
        log_error("out of memory creating fetch events");
        abort();
    }
    if (req->chain != NULL && req->chain->n > 0)
        chain_copy(&f->chain, req->chain);
    f->q = (struct route_query){
        .chain = f->chain.n > 0 ? &f->chain : NULL,
        .model = f->model,
        .session = req->session,
        .fresh_ms = w->backend->prompt_cache_ms,
    };
    if (!fetch_first(f, req)) {
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
