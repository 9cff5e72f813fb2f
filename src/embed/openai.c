/*
 * embed/openai.c - the remote embedder (`embedder openai`, see pc_embed.h):
 * texts are sent to an OpenAI-compatible embeddings endpoint (OpenAI, vLLM,
 * TEI, Ollama, ...) from the worker's event loop. Texts that arrive in the
 * same loop pass are batched into one call (up to embedder-batch inputs). A
 * call that fails or takes longer than embedder-timeout fails every text in
 * it: the caller treats that as a semantic miss, never as an error of the
 * request.
 *
 * Owns, for the process, the circuit breaker (pc_breaker.h) every worker's
 * calls report to: while it is open, submit refuses texts, except the one
 * that probes it: a background text (no client waiting: a stored answer's
 * vector), or a lookup's when none came for twice the cool-down. Per worker
 * (its port), the queue of texts waiting for the next call, the calls in
 * flight (struct rbatch, each with its jcall) and every request until its
 * callback ran.
 *
 *   submit ─▶ breaker? ─▶ pending ──(next loop pass: flush_ev)──▶ rbatch: POST
 *             (shut: NULL)                                    {model, input: [...]}
 *   cancel: pending → freed; in a batch → marked, freed with the batch
 *   batch done ─▶ data[i].embedding (by index) ─▶ unit length ─▶ each callback
 *              ─▶ one outcome per call to the breaker
 */
#include "embed_int.h"

#include "pc_breaker.h"
#include "pc_conf.h"
#include "pc_jcall.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#define REMBED_MAGIC 0x52454d42u /* "REMB" */
#define RBATCH_MAGIC 0x52424154u /* "RBAT" */

#define REMBED_MAX_TEXT 8192 /* bytes of a text sent (head and tail) */
#define REMBED_MAX_DIM  4096
/*
 * Fewer numbers are no embedding: a classifier's or reward model's score
 * answered on /v1/embeddings (one number, the same sign for most texts)
 * would make every question a semantic hit of every other. 16 is the least
 * the local embedders allow (hash_dim).
 */
#define REMBED_MIN_DIM   16
#define REMBED_MAX_REPLY (64 * 1024 * 1024) /* a batch of 4096-d float vectors fits */
#define REMBED_URL_MAX   1024
/*
 * The threshold of semantic-threshold auto. Measured through the proxy
 * (bench/semantic-quality, every guard on) with Universal Sentence Encoder
 * lite (tests/encoder): the lowest threshold on a 0.005 grid at which no hard
 * negative of the dev set hits (0.91), plus 0.01 because that set is small;
 * picked for precision, as a wrong answer costs more than a miss. Checked on
 * APT and SICK (issue 22): 0.92 serves 1.7% of APT's flipped rewrites at APT
 * recall 9.4%; 0.94 would serve 1.2% at 5.8%, below the 8.8% this encoder had
 * before those guards, so it stays. Cosines differ by model: other models
 * need their own (see doc/semantic.md).
 */
#define REMOTE_AUTO          0.92
#define BREAKER_COOLDOWN_MAX 60000 /* ms: the longest wait between probes of a sick embedder */

struct rembed_req {
    struct embed_req hdr; /* first: embed_cancel's view */
    struct rembed *r;
    char *text;
    size_t len;
    embed_fn *cb; /* NULL once cancelled */
    void *arg;
    bool in_batch;
    enum breaker_pass pass; /* BREAKER_PROBE: its call decides about the open breaker */
    TAILQ_ENTRY(rembed_req) link;
};

TAILQ_HEAD(rreq_list, rembed_req);

struct rbatch {
    unsigned magic;
    struct rembed *r;
    struct jcall *call;
    struct rembed_req **reqs;
    size_t n;
    enum breaker_pass pass; /* PROBE if one of its requests is the probe */
    TAILQ_ENTRY(rbatch) link;
};

TAILQ_HEAD(rbatch_list, rbatch);

struct rembed {
    unsigned magic;
    struct event_base *base;
    struct upstream *up;
    struct stats *st;
    struct breaker *brk; /* the process's, or NULL */
    char url[REMBED_URL_MAX];
    char shown[REMBED_URL_MAX]; /* url for the log: no user:password@, no query */
    char *auth;                 /* "Bearer <embedder-key>" or NULL */
    char *model;
    int64_t timeout_ms;
    size_t batch_max;
    struct rreq_list pending;
    size_t npending;
    struct rbatch_list batches;
    struct event *flush_ev;
};

void embed_url(const char *configured, char *out, size_t outlen)
{
    size_t n = strlen(configured);
    while (n > 0 && configured[n - 1] == '/')
        n--;
    if (n >= 11 && memcmp(configured + n - 11, "/embeddings", 11) == 0)
        snprintf(out, outlen, "%.*s", (int)n, configured);
    else if (n >= 3 && memcmp(configured + n - 3, "/v1", 3) == 0)
        snprintf(out, outlen, "%.*s/embeddings", (int)n, configured);
    else
        snprintf(out, outlen, "%.*s/v1/embeddings", (int)n, configured);
}

/*
 * "openai:" + name[0..n) as a space name: as it is when it fits and is all
 * visible ASCII (what a vector record holds); else its first visible bytes
 * (others as '_'), '~' and a hash of all of it. Cut short, two models that
 * differ only past the cut (...-cased-v1, ...-cased-v2) shared a space, and
 * their vectors were compared; a blank or non-ASCII byte made every vector
 * record unwritable.
 */
static void space_of(const char *name, size_t n, char *out, size_t outlen)
{
    static const char pre[] = "openai:";
    bool plain = sizeof(pre) - 1 + n < outlen;
    for (size_t i = 0; i < n && plain; i++)
        plain = name[i] > 0x20 && name[i] < 0x7f;
    if (plain) {
        snprintf(out, outlen, "%s%.*s", pre, (int)n, name);
        return;
    }
    char hash[24];
    int hl = snprintf(hash, sizeof(hash), "~%016llx",
                      (unsigned long long)pc_fnv1a(PC_FNV_SEED, name, n));
    size_t o = 0, keep = outlen - (sizeof(pre) - 1) - (size_t)hl - 1;
    memcpy(out, pre, sizeof(pre) - 1);
    o += sizeof(pre) - 1;
    for (size_t i = 0; i < n && i < keep; i++)
        out[o++] = name[i] > 0x20 && name[i] < 0x7f ? name[i] : '_';
    memcpy(out + o, hash, (size_t)hl + 1);
}

/* Names the vector space: "openai:" + embedder-model (+ the URL's host when no model). */
static void rembed_space(const struct conf *c, char *out, size_t outlen)
{
    if (c->embedder_model[0] != '\0') {
        space_of(c->embedder_model, strlen(c->embedder_model), out, outlen);
        return;
    }
    /* No model named: the server's one model; name the space by its URL. */
    char url[REMBED_URL_MAX];
    embed_url(c->embedder_url, url, sizeof(url));
    const char *host = strstr(url, "://");
    host = host != NULL ? host + 3 : url;
    const char *at = memrchr(host, '@', strcspn(host, "/?#")); /* never a password in a name */
    if (at != NULL)
        host = at + 1;
    char name[REMBED_URL_MAX];
    snprintf(name, sizeof(name), "@%.*s", (int)strcspn(host, "/?#"), host);
    space_of(name, strlen(name), out, outlen);
}

static struct rembed *rembed_create(const struct conf *c, struct event_base *base,
                                    struct upstream *up, struct stats *st, struct breaker *brk)
{
    struct rembed *r = pc_calloc(1, sizeof(*r));
    r->magic = REMBED_MAGIC;
    r->base = base;
    r->up = up;
    r->st = st;
    r->brk = brk;
    embed_url(c->embedder_url, r->url, sizeof(r->url));
    pc_url_shown(r->url, r->shown, sizeof(r->shown));
    if (c->embedder_key[0] != '\0') {
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_printf(&b, "Bearer %s", c->embedder_key);
        r->auth = pc_buf_cstr(&b);
    }
    r->model = pc_strdup(c->embedder_model);
    r->timeout_ms = c->embedder_timeout;
    r->batch_max = (size_t)c->embedder_batch;
    TAILQ_INIT(&r->pending);
    TAILQ_INIT(&r->batches);
    return r;
}

static void req_free(struct rembed_req *q)
{
    free(q->text);
    q->hdr.magic = 0;
    free(q);
}

static void batch_free(struct rbatch *b)
{
    TAILQ_REMOVE(&b->r->batches, b, link);
    jcall_cancel(&b->call);
    for (size_t i = 0; i < b->n; i++)
        req_free(b->reqs[i]);
    free(b->reqs);
    b->magic = 0;
    free(b);
}

static bool deliver(struct rembed_req *q, const float *vec, int dim);

static void rembed_destroy(struct rembed **rp)
{
    struct rembed *r = *rp;
    if (r == NULL)
        return;
    *rp = NULL;
    PC_CHECK_OBJ(r, REMBED_MAGIC);
    /* Requests still owed a callback get their failure now (their owners free themselves). */
    struct rbatch *b;
    while ((b = TAILQ_FIRST(&r->batches)) != NULL) {
        for (size_t i = 0; i < b->n; i++)
            deliver(b->reqs[i], NULL, 0);
        if (b->pass == BREAKER_PROBE) /* its outcome will never come */
            breaker_abandon(r->brk, pc_mono_ms());
        batch_free(b);
    }
    struct rembed_req *q;
    while ((q = TAILQ_FIRST(&r->pending)) != NULL) {
        TAILQ_REMOVE(&r->pending, q, link);
        if (q->pass == BREAKER_PROBE)
            breaker_abandon(r->brk, pc_mono_ms());
        deliver(q, NULL, 0);
        req_free(q);
    }
    if (r->flush_ev != NULL)
        event_free(r->flush_ev);
    if (r->auth != NULL)
        memset(r->auth, 0, strlen(r->auth));
    free(r->auth);
    free(r->model);
    r->magic = 0;
    free(r);
}

/* ---- answers ---------------------------------------------------------------- */

/* One data[] item's embedding into out (unit length); its dimension, or -1 (also under
 * REMBED_MIN_DIM numbers). */
static int parse_vector(const cJSON *emb, float *out)
{
    if (!cJSON_IsArray(emb))
        return -1;
    /*
     * Every number must be one a float holds (an embedding is float32): a
     * larger one converted to float is undefined. The length is taken in
     * double and each number divided by it there, so components of subnormal
     * size neither overflow the scale nor come out infinite.
     */
    int dim = 0;
    double norm = 0;
    for (const cJSON *x = emb->child; x != NULL; x = x->next) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > FLT_MAX ||
            dim >= REMBED_MAX_DIM)
            return -1;
        norm += x->valuedouble * x->valuedouble;
        dim++;
    }
    if (dim < REMBED_MIN_DIM || !(norm > 0) || !isfinite(norm))
        return -1;
    double len = sqrt(norm);
    int i = 0;
    for (const cJSON *x = emb->child; x != NULL; x = x->next)
        out[i++] = (float)(x->valuedouble / len);
    return dim;
}

/* q's callback, once; whether this call ran it. */
static bool deliver(struct rembed_req *q, const float *vec, int dim)
{
    if (q->cb == NULL)
        return false;
    embed_fn *cb = q->cb;
    q->cb = NULL;
    cb(q->arg, vec, dim);
    return true;
}

/*
 * Give each request of the batch its vector (by data[].index), or a failure;
 * whether every request got its vector.
 */
static bool batch_deliver(struct rbatch *b, const cJSON *json)
{
    const cJSON *data = json != NULL ? cJSON_GetObjectItemCaseSensitive(json, "data") : NULL;
    float *vec = pc_malloc(REMBED_MAX_DIM * sizeof(float));
    int dim0 = 0;
    size_t got = 0;
    for (const cJSON *it = cJSON_IsArray(data) ? data->child : NULL; it != NULL; it = it->next) {
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(it, "index");
        double i = cJSON_IsNumber(idx) ? idx->valuedouble : -1;
        if (i < 0 || i >= (double)b->n || i != (double)(size_t)i)
            continue;
        int dim = parse_vector(cJSON_GetObjectItemCaseSensitive(it, "embedding"), vec);
        if (dim < 0 || (dim0 != 0 && dim != dim0))
            continue;
        dim0 = dim;
        /* Counted once per input: an answer naming one index twice (and another none) is
         * not an answer for every input, nor one that repeats an item a failure. */
        got += deliver(b->reqs[(size_t)i], vec, dim);
    }
    free(vec);
    for (size_t i = 0; i < b->n; i++)
        deliver(b->reqs[i], NULL, 0); /* anything not answered above fails */
    return got == b->n;
}

/* The call's outcome: counted once (semantic_embed_errors) and told to the breaker. */
static void batch_outcome(struct rbatch *b, bool ok, const char *why)
{
    if (!ok)
        stats_incr(b->r->st, STAT_semantic_embed_errors);
    if (b->r->brk != NULL)
        breaker_report(b->r->brk, b->pass, ok, pc_mono_ms(), why);
}

static void on_batch(void *arg, int status, const cJSON *json, const char *err)
{
    struct rbatch *b = arg;
    PC_CHECK_OBJ(b, RBATCH_MAGIC);
    b->call = NULL;
    struct rembed *r = b->r;
    char why[160];
    if (err != NULL || status < 200 || status > 299) {
        snprintf(why, sizeof(why), "%s (status %d)", err != NULL ? err : "error answer", status);
        log_info("embedder %s: %s; semantic lookups of this batch miss", r->shown, why);
        json = NULL;
    } else {
        snprintf(why, sizeof(why),
                 "an answer without a vector for every input (%d to %d finite numbers each)",
                 REMBED_MIN_DIM, REMBED_MAX_DIM);
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(json, "usage");
        int64_t tok = jcall_count(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens"));
        if (tok > 0)
            stats_add(r->st, STAT_semantic_embed_tokens, tok);
    }
    bool ok = batch_deliver(b, json);
    if (!ok && json != NULL)
        log_info("embedder %s: %s; semantic lookups of this batch miss", r->shown, why);
    batch_outcome(b, ok, why);
    batch_free(b);
}

/* ---- calls ------------------------------------------------------------------ */

/* The text as sent: at most REMBED_MAX_TEXT bytes, head and tail, cut on UTF-8 boundaries. */
static void append_capped(struct pc_buf *body, const char *s, size_t n)
{
    if (n <= REMBED_MAX_TEXT) {
        pc_buf_json_str(body, s, n);
        return;
    }
    size_t head = REMBED_MAX_TEXT / 2, tail = REMBED_MAX_TEXT / 2;
    while (head > 0 && ((unsigned char)s[head] & 0xc0) == 0x80)
        head--;
    while (tail > 0 && ((unsigned char)s[n - tail] & 0xc0) == 0x80)
        tail--;
    struct pc_buf t = PC_BUF_INIT;
    pc_buf_append(&t, s, head);
    pc_buf_append_str(&t, "\n...\n");
    pc_buf_append(&t, s + n - tail, tail);
    pc_buf_json_str(body, t.data, t.len);
    pc_buf_free(&t);
}

static void batch_send(struct rembed *r)
{
    struct rbatch *b = pc_calloc(1, sizeof(*b));
    b->magic = RBATCH_MAGIC;
    b->r = r;
    b->pass = BREAKER_GO;
    b->reqs = pc_calloc(PC_MIN(r->npending, r->batch_max), sizeof(*b->reqs));
    struct pc_buf body = PC_BUF_INIT;
    pc_buf_append_str(&body, "{\"model\":");
    pc_buf_json_str(&body, r->model, strlen(r->model));
    pc_buf_append_str(&body, ",\"encoding_format\":\"float\",\"input\":[");
    struct rembed_req *q;
    while (b->n < r->batch_max && (q = TAILQ_FIRST(&r->pending)) != NULL) {
        TAILQ_REMOVE(&r->pending, q, link);
        r->npending--;
        q->in_batch = true;
        if (q->pass == BREAKER_PROBE)
            b->pass = BREAKER_PROBE;
        if (b->n > 0)
            pc_buf_append_char(&body, ',');
        append_capped(&body, q->text, q->len);
        b->reqs[b->n++] = q;
    }
    pc_buf_append_str(&body, "]}");
    TAILQ_INSERT_TAIL(&r->batches, b, link);
    struct xfer_header auth = {"Authorization", r->auth};
    struct jcall_req jr = {
        .url = r->url,
        .headers = &auth,
        .nheaders = r->auth != NULL ? 1 : 0,
        .body = body.data,
        .body_len = body.len,
        .timeout_ms = r->timeout_ms,
        .max_response = REMBED_MAX_REPLY,
    };
    stats_incr(r->st, STAT_semantic_embed_calls);
    b->call = jcall_post(r->up, r->base, &jr, on_batch, b);
    pc_buf_free(&body);
    if (b->call == NULL) {
        batch_deliver(b, NULL);
        batch_outcome(b, false, "the call could not be started");
        batch_free(b);
    }
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct rembed *r = arg;
    PC_CHECK_OBJ(r, REMBED_MAGIC);
    while (r->npending > 0)
        batch_send(r);
}

static bool remote_shut(const struct embed_port *p, bool background)
{
    struct rembed *r = p->impl;
    PC_CHECK_OBJ(r, REMBED_MAGIC);
    return r->brk != NULL && breaker_shut(r->brk, background, pc_mono_ms());
}

static struct embed_req *remote_submit(struct embed_port *p, const char *text, size_t len,
                                       bool background, embed_fn *cb, void *arg)
{
    struct rembed *r = p->impl;
    PC_CHECK_OBJ(r, REMBED_MAGIC);
    if (r->flush_ev == NULL && (r->flush_ev = event_new(r->base, -1, 0, on_flush, r)) == NULL)
        return NULL;
    enum breaker_pass pass =
        r->brk != NULL ? breaker_ask(r->brk, background, pc_mono_ms()) : BREAKER_GO;
    if (pass == BREAKER_SHUT)
        return NULL;
    struct rembed_req *q = pc_calloc(1, sizeof(*q));
    q->hdr.magic = EMBED_REQ_MAGIC;
    q->r = r;
    q->pass = pass;
    q->text = pc_strndup(text, len);
    q->len = len;
    q->cb = cb;
    q->arg = arg;
    TAILQ_INSERT_TAIL(&r->pending, q, link);
    if (r->npending++ == 0)
        event_active(r->flush_ev, EV_TIMEOUT, 0); /* batch what this loop pass brings */
    return &q->hdr;
}

static void remote_cancel(struct embed_req *h)
{
    struct rembed_req *q = (struct rembed_req *)h;
    if (q->in_batch) {
        q->cb = NULL; /* the batch frees it when its call ends */
        return;
    }
    TAILQ_REMOVE(&q->r->pending, q, link);
    q->r->npending--;
    if (q->pass == BREAKER_PROBE) /* never sent: the next asker probes instead */
        breaker_abandon(q->r->brk, pc_mono_ms());
    req_free(q);
}

/* ---- the member: the process's part, the worker's part ---------------------------- */

/* The breaker every worker's calls report to, counting in the process's row. */
static struct breaker *breaker_for(const struct conf *c, struct stats *row)
{
    char name[160], url[128];
    pc_url_shown(c->embedder_url, url, sizeof(url)); /* never a password or a query in a log line */
    snprintf(name, sizeof(name), "embedder %s", url);
    struct breaker_opts o = {
        .name = name,
        .failures = (unsigned)c->embedder_breaker_failures,
        .cooldown_ms = c->embedder_breaker_cooldown,
        .cooldown_max_ms = BREAKER_COOLDOWN_MAX,
        .row = row,
        .stat_open = STAT_embedder_breaker_open,
        .stat_opens = STAT_embedder_breaker_opens,
        .stat_probes = STAT_embedder_breaker_probes,
    };
    return breaker_create(&o);
}

static int remote_open(struct embedder *e, char *err, size_t errlen)
{
    if (e->conf == NULL) {
        snprintf(err, errlen, "embedder openai needs its configuration");
        return -1;
    }
    rembed_space(e->conf, e->space, sizeof(e->space));
    e->dim = 0; /* known from the first vector, or from those already in Redis */
    e->threshold = REMOTE_AUTO;
    if (e->conf->semantic_threshold < 0)
        log_warn("semantic-threshold auto with embedder openai: using %.3f, measured with "
                 "Universal Sentence Encoder lite; cosines differ by model, so measure yours and "
                 "set semantic-threshold",
                 REMOTE_AUTO);
    e->impl = breaker_for(e->conf, e->row);
    return 0;
}

static void remote_close(struct embedder *e)
{
    struct breaker *brk = e->impl;
    breaker_destroy(&brk);
    e->impl = NULL;
}

static int remote_port_open(struct embed_port *p)
{
    p->impl = rembed_create(p->e->conf, p->base, p->up, p->st, p->e->impl);
    return 0;
}

static void remote_port_close(struct embed_port *p)
{
    struct rembed *r = p->impl;
    rembed_destroy(&r);
    p->impl = NULL;
}

static const char *remote_breaker_state(const struct embedder *e)
{
    struct breaker *brk = e->impl;
    return brk != NULL ? breaker_state_name(breaker_state(brk)) : NULL;
}

static int remote_check_conf(const struct conf *c, char *err, size_t errlen)
{
    if (c->embedder_url[0] != '\0')
        return 0;
    snprintf(err, errlen, "embedder openai needs embedder-url while semantic is yes");
    return -1;
}

const struct embed_ops embed_openai_ops = {
    .name = "openai",
    .open = remote_open,
    .close = remote_close,
    .check_conf = remote_check_conf,
    .port_open = remote_port_open,
    .port_close = remote_port_close,
    .submit = remote_submit,
    .shut = remote_shut,
    .cancel = remote_cancel,
    .breaker_state = remote_breaker_state,
};
