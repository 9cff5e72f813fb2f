/*
 * cache.c - the cache pipeline of one worker (see pc_cache.h). Owns the
 * struct cache of the worker, every lookup, put and flush in progress
 * (struct cache_op / cache_put_op, each holding the store command it waits
 * on) and the tickets handed to callers.
 *
 *   lookup:  L1 (pc_l1.h, in this process) ─▶ hit: callback before returning
 *              │ not there (or too old for the request)
 *              ▼
 *            OP_EXACT ──GET──▶ hit: decode, max-age ─▶ callback(HIT, exact)
 *              │                  └─▶ PTTL ─▶ into the L1 (struct l1_fill, owned here)
 *              │ miss, semantic allowed
 *              ▼
 *            OP_SEMANTIC (semantic_lookup) ─▶ callback(HIT, semantic | MISS)
 *              (a MISS the error bound held back carries a probe in the ticket)
 *   put:     SET entry PX ttl, XADD set (on a cluster once the SET has run: see
 *            publish_set), and with a probe the comparison with
 *            the candidate's answer (pc_bound.h); callback once the SET is
 *            acknowledged and the comparison done ─▶ into the L1 in place of
 *            what it held; semantic_put (vector record + stream event, fire
 *            and forget), or the old vector dropped when a replaced entry
 *            gets none
 *   compare: no SET (an answer not to be stored): the comparison alone, with
 *            the same op, waited for unless the answer is a stream
 *   flush:   delete entries ─▶ delete vectors ─▶ delete the bound's entry
 *            marks ─▶ stream event, clear the L1 ─▶ callback
 *
 * Redis keys are built here and in pc_entry.h; nothing above this module
 * names a key.
 */
#include "pc_cache.h"
#include "pc_bound.h"
#include "pc_conf.h"
#include "pc_fence.h"
#include "pc_l1.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_semantic.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_vsync.h"

#include <stdio.h>
#include <string.h>

#define CACHE_MAGIC  0x43414348u /* "CACH" */
#define OP_MAGIC     0x4341504fu /* "CAPO" */
#define PUT_MAGIC    0x43415055u /* "CAPU" */
#define TICKET_MAGIC 0x4354494bu /* "CTIK" */
#define FILL_MAGIC   0x4346494cu /* "CFIL" */

/*
 * An entry read from Redis on its way into the L1: waits for the PTTL of its key. Or (check)
 * an L1 hit's look at its key: waits for its STRLEN (val empty, len the item's).
 */
struct l1_fill {
    unsigned magic;
    struct cache *c;
    struct store_cmd *cmd;
    struct l1_fill *prev, *next; /* the cache's fills, cancelled by cache_destroy */
    uint64_t gen;
    int64_t sent_ms; /* l1_now_ms when the PTTL was sent */
    char tenant[TENANT_ID_LEN];
    unsigned char exact[PC_SHA256_LEN];
    size_t len;
    char val[];
};

struct cache {
    unsigned magic;
    const struct conf *conf;
    struct event_base *base;
    struct store *store;
    struct stats *stats;
    struct semantic_port *sem;
    struct l1 *l1;
    struct fence *fence;
    struct l1_fill *fills;
    struct cache_put_op *detached; /* puts told already, whose comparison still runs */
};

struct cache_ticket {
    unsigned magic;
    enum api_endpoint endpoint;
    char tenant_id[TENANT_ID_LEN + 1];
    unsigned char exact[PC_SHA256_LEN];
    char key[ENTRY_KEY_MAX]; /* the entry's Redis key */
    uint64_t since;          /* the purge fences' mark when it was made (pc_fence.h) */
    /* A put may write over an entry (no lookup, or the lookup found one it could not use). */
    bool replaces;
    /* Semantic stage: set when the request may be found by meaning. */
    bool semantic;
    unsigned char partition[PC_SHA256_LEN];
    char *text;
    struct semantic_vec *vec;  /* computed by the lookup, or NULL (then put embeds) */
    char *ns, *model;          /* kept in the stored entry (targeted deletes), or NULL */
    struct bound_probe *probe; /* held back by the error bound: compared by put or compare */
};

enum op_kind {
    OP_EXACT,
    OP_SEMANTIC,
    OP_FLUSH_NOTICE, /* the purge fences' notice (pc_fence.h), in the stream before any delete */
    OP_FLUSH_ENTRIES,
    OP_FLUSH_VECTORS,
    OP_FLUSH_MEMBERS,
    OP_FLUSH_MARKS,
    OP_FLUSH_PUBLISH, /* the stream event that tells every instance (their L1, their index) */
};

struct cache_op {
    unsigned magic;
    struct cache *c;
    enum op_kind kind;
    struct store_cmd *cmd;
    struct semantic_op *sop;
    cache_lookup_fn *cb;
    cache_flush_fn *flush_cb;
    void *arg;
    struct cache_ticket *ticket;
    int64_t max_age_ms;
    double threshold;
    char tenant[TENANT_ID_LEN + 1]; /* flush: "" = everyone */
    long long deleted;
    uint64_t l1_gen; /* read when the GET was sent */
};

struct cache_put_op {
    unsigned magic;
    struct cache *c;
    struct store_cmd *cmd;
    struct cache_ticket *ticket;
    int64_t ttl_ms;
    int64_t created_ms;
    int64_t sent_ms; /* l1_now_ms when the SET was sent */
    uint64_t l1_gen;
    struct pc_buf l1_val; /* the encoded entry, kept for the L1 until Redis acknowledges it */
    cache_put_fn *cb;
    void *arg;
    bool acked, stored;    /* Redis answered the SET, and how */
    struct bound_cmp *cmp; /* comparing the answer with the probe's, while it runs */
    /*
     * A streamed answer has gone out with its headers already: its caller is told once
     * Redis has it, not made to wait for the verdict, which no header will carry. The op
     * then lives on (in the cache's detached list) until the comparison ends.
     */
    bool streamed, told;
    bool compare_only;                /* cache_compare: no SET, nothing for the L1 or the index */
    struct cache_put_op *prev, *next; /* detached */
};

const char *cache_match_name(enum cache_match m)
{
    switch (m) {
    case CACHE_MATCH_EXACT:
        return "exact";
    case CACHE_MATCH_SEMANTIC:
        return "semantic";
    default:
        return "";
    }
}

struct cache *cache_create(const struct cache_opts *o)
{
    struct cache *c = pc_calloc(1, sizeof(*c));
    c->magic = CACHE_MAGIC;
    c->conf = o->conf;
    c->base = o->base;
    c->store = o->store;
    c->stats = o->stats;
    c->sem = o->sem;
    c->l1 = o->l1;
    c->fence = o->fence;
    return c;
}

void cache_destroy(struct cache **cp)
{
    struct cache *c = *cp;
    if (c == NULL)
        return;
    *cp = NULL;
    while (c->fills != NULL) {
        struct l1_fill *f = c->fills;
        c->fills = f->next;
        store_cancel(&f->cmd);
        f->magic = 0;
        free(f);
    }
    while (c->detached != NULL) {
        struct cache_put_op *p = c->detached;
        c->detached = p->next;
        bound_compare_cancel(&p->cmp);
        cache_ticket_free(&p->ticket);
        pc_buf_free(&p->l1_val);
        p->magic = 0;
        free(p);
    }
    c->magic = 0;
    free(c);
}

bool cache_ready(const struct cache *c)
{
    return store_ready(c->store);
}

/* ---- tickets ---------------------------------------------------------------- */

struct cache_ticket *cache_ticket_create(struct cache *c, const struct cache_query *q)
{
    struct cache_ticket *t = pc_calloc(1, sizeof(*t));
    t->magic = TICKET_MAGIC;
    t->endpoint = q->endpoint;
    memcpy(t->tenant_id, q->tenant_id, TENANT_ID_LEN); /* calloc'd: NUL-terminated */
    memcpy(t->exact, q->exact, PC_SHA256_LEN);
    entry_key(t->tenant_id, t->exact, t->key);
    t->since = fence_now(c->fence);
    t->ns = q->ns != NULL ? pc_strdup(q->ns) : NULL;
    t->model = q->model != NULL ? pc_strdup(q->model) : NULL;
    t->replaces = true; /* unknown without a lookup: lookup_ticket says otherwise */
    if (c->sem != NULL && q->partition != NULL && q->text != NULL) {
        t->semantic = true;
        memcpy(t->partition, q->partition, PC_SHA256_LEN);
        t->text = pc_strdup(q->text);
    }
    return t;
}

bool cache_fenced(const struct cache *c, const struct cache_ticket *t)
{
    PC_CHECK_OBJ(t, TICKET_MAGIC);
    return fence_crossed(c->fence, t->exact, t->since);
}

void cache_ticket_free(struct cache_ticket **tp)
{
    struct cache_ticket *t = *tp;
    if (t == NULL)
        return;
    *tp = NULL;
    PC_CHECK_OBJ(t, TICKET_MAGIC);
    free(t->text);
    free(t->ns);
    free(t->model);
    semantic_vec_free(&t->vec);
    bound_probe_unref(&t->probe);
    t->magic = 0;
    free(t);
}

/* ---- lookups ---------------------------------------------------------------- */

static void op_free(struct cache_op *op)
{
    cache_ticket_free(&op->ticket);
    op->magic = 0;
    free(op);
}

/* Hand the result (and the ticket) to the caller, then free the op. */
static void op_finish(struct cache_op *op, struct cache_result *res)
{
    res->ticket = op->ticket;
    op->ticket = NULL;
    cache_lookup_fn *cb = op->cb;
    void *arg = op->arg;
    op_free(op);
    cb(arg, res);
}

static void op_miss(struct cache_op *op)
{
    struct cache_result res = {.outcome = CACHE_MISS};
    op_finish(op, &res);
}

static void on_semantic(void *arg, struct semantic_result *sr)
{
    struct cache_op *op = arg;
    PC_CHECK_OBJ(op, OP_MAGIC);
    op->sop = NULL;
    if (sr->vec != NULL && op->ticket->vec == NULL)
        op->ticket->vec = semantic_vec_take(sr);
    if (sr->entry == NULL) {
        struct cache_ticket *t = op->ticket;
        t->probe = semantic_probe_take(sr);
        struct cache_result res = {.outcome = CACHE_MISS, .probe = t->probe};
        op_finish(op, &res);
        return;
    }
    struct cache_result res = {
        .outcome = CACHE_HIT,
        .match = CACHE_MATCH_SEMANTIC,
        .similarity = sr->similarity,
        .age_ms = entry_age_ms(sr->entry),
        .entry = sr->entry,
        .exact = sr->exact,
    };
    op_finish(op, &res);
}

/* After an exact miss: the semantic stage, when it may run; else a miss. */
static void op_after_exact(struct cache_op *op)
{
    struct cache_ticket *t = op->ticket;
    if (!t->semantic) {
        op_miss(op);
        return;
    }
    struct semantic_query sq = {
        .endpoint = t->endpoint,
        .tenant_id = t->tenant_id,
        .exact = t->exact,
        .partition = t->partition,
        .text = t->text,
        .max_age_ms = op->max_age_ms,
        .threshold = op->threshold,
    };
    op->kind = OP_SEMANTIC;
    op->sop = semantic_lookup(op->c->sem, &sq, on_semantic, op);
    if (op->sop == NULL)
        op_miss(op);
}

static void fill_free(struct l1_fill *f)
{
    struct cache *c = f->c;
    if (f->prev != NULL)
        f->prev->next = f->next;
    else
        c->fills = f->next;
    if (f->next != NULL)
        f->next->prev = f->prev;
    f->magic = 0;
    free(f);
}

static void on_fill_pttl(void *arg, enum store_status st, long long ms)
{
    struct l1_fill *f = arg;
    PC_CHECK_OBJ(f, FILL_MAGIC);
    f->cmd = NULL;
    if (st == STORE_OK && ms > 0)
        l1_put(f->c->l1, f->tenant, f->exact, f->val, f->len, f->sent_ms + ms, f->gen);
    fill_free(f);
}

/* A hit read from Redis goes into the L1 once its key's TTL is known (unless it never would). */
static void l1_fill(struct cache *c, const struct cache_ticket *t, uint64_t gen, const char *val,
                    size_t len)
{
    if (!l1_keeps(c->l1, len))
        return;
    struct l1_fill *f = pc_malloc(sizeof(*f) + len);
    memset(f, 0, sizeof(*f));
    f->magic = FILL_MAGIC;
    f->c = c;
    f->gen = gen;
    f->sent_ms = l1_now_ms();
    memcpy(f->tenant, t->tenant_id, TENANT_ID_LEN);
    memcpy(f->exact, t->exact, PC_SHA256_LEN);
    f->len = len;
    memcpy(f->val, val, len);
    f->next = c->fills;
    if (c->fills != NULL)
        c->fills->prev = f;
    c->fills = f;
    f->cmd = store_pttl(c->store, t->key, strlen(t->key), on_fill_pttl, f);
    if (f->cmd == NULL)
        fill_free(f);
}

/* An L1 item's key holds no longer what the item does (gone, another type or value): dropped. */
static void on_check_strlen(void *arg, enum store_status st, long long n)
{
    struct l1_fill *f = arg;
    PC_CHECK_OBJ(f, FILL_MAGIC);
    f->cmd = NULL;
    if (st == STORE_ERR || (st == STORE_OK && (n < 0 || (unsigned long long)n != f->len))) {
        l1_delete(f->c->l1, f->tenant, f->exact);
        stats_incr(f->c->stats, STAT_l1_checks_failed);
    }
    fill_free(f);
}

/* Look at the key of an L1 hit (STRLEN, in the background): see l1_item_check_due. */
static void l1_check(struct cache *c, const struct cache_query *q, size_t len)
{
    struct l1_fill *f = pc_malloc(sizeof(*f));
    memset(f, 0, sizeof(*f));
    f->magic = FILL_MAGIC;
    f->c = c;
    memcpy(f->tenant, q->tenant_id, TENANT_ID_LEN);
    memcpy(f->exact, q->exact, PC_SHA256_LEN);
    f->len = len;
    f->next = c->fills;
    if (c->fills != NULL)
        c->fills->prev = f;
    c->fills = f;
    char key[ENTRY_KEY_MAX];
    size_t klen = entry_key(q->tenant_id, q->exact, key);
    const char *argv[] = {"STRLEN", key};
    const size_t lens[] = {6, klen};
    f->cmd = store_call_int(c->store, 2, argv, lens, on_check_strlen, f);
    if (f->cmd == NULL)
        fill_free(f);
}

/*
 * Whether a stored value under the exact key answers this lookup: it decodes (into e), is of
 * the same endpoint and young enough for max-age. *age_ms is set when it decodes.
 */
enum fit { FIT_OK, FIT_CORRUPT, FIT_OTHER_ENDPOINT, FIT_TOO_OLD };

static enum fit entry_fits(const char *val, size_t len, enum api_endpoint ep, int64_t max_age_ms,
                           struct entry *e, int64_t *age_ms)
{
    if (entry_decode(val, len, e) < 0)
        return FIT_CORRUPT;
    if (e->endpoint != ep)
        return FIT_OTHER_ENDPOINT;
    *age_ms = entry_age_ms(e);
    return max_age_ms >= 0 && *age_ms > max_age_ms ? FIT_TOO_OLD : FIT_OK;
}

/* The ticket of a lookup: no vector is stored for a request that does not allow the stage. */
static struct cache_ticket *lookup_ticket(struct cache *c, const struct cache_query *q)
{
    struct cache_ticket *t = cache_ticket_create(c, q);
    if (!q->semantic)
        t->semantic = false;
    t->replaces = false;
    return t;
}

static void on_exact(void *arg, enum store_status st, const char *val, size_t len)
{
    struct cache_op *op = arg;
    PC_CHECK_OBJ(op, OP_MAGIC);
    op->cmd = NULL;
    struct cache *c = op->c;
    if (st != STORE_OK) {
        struct cache_result res = {.outcome = CACHE_UNAVAILABLE};
        op_finish(op, &res);
        return;
    }
    struct entry e;
    int64_t age_ms = 0;
    enum fit fit = val != NULL
                       ? entry_fits(val, len, op->ticket->endpoint, op->max_age_ms, &e, &age_ms)
                       : FIT_OTHER_ENDPOINT;
    if (fit == FIT_OK) {
        struct cache_result res = {
            .outcome = CACHE_HIT,
            .match = CACHE_MATCH_EXACT,
            .age_ms = age_ms,
            .entry = &e,
            .exact = op->ticket->exact,
        };
        l1_fill(c, op->ticket, op->l1_gen, val, len);
        op_finish(op, &res);
        return;
    }
    if (val != NULL)
        op->ticket->replaces = true; /* a store writes over what is there */
    if (fit == FIT_TOO_OLD)
        stats_incr(c->stats, STAT_cache_expired);
    else if (fit == FIT_CORRUPT)
        stats_incr(c->stats, STAT_cache_corrupt);
    op_after_exact(op);
}

/*
 * The L1 stage, in this process: true if q's exact answer is there, after cb
 * has run with the HIT; false and no callback otherwise. An entry too old for
 * this request, or of another endpoint, is left to the Redis stage, which
 * decides and counts.
 */
static bool lookup_l1(struct cache *c, const struct cache_query *q, cache_lookup_fn *cb, void *arg)
{
    int64_t now = l1_now_ms();
    struct l1_item *it = l1_get(c->l1, q->tenant_id, q->exact, now);
    if (it == NULL)
        return false;
    size_t len;
    const char *val = l1_item_data(it, &len);
    struct entry e;
    int64_t age_ms = 0;
    if (entry_fits(val, len, q->endpoint, q->max_age_ms, &e, &age_ms) != FIT_OK) {
        l1_release(&it);
        return false;
    }
    struct cache_result res = {
        .outcome = CACHE_HIT,
        .match = CACHE_MATCH_EXACT,
        .age_ms = age_ms,
        .entry = &e,
        .exact = q->exact,
        .ticket = lookup_ticket(c, q),
    };
    stats_incr(c->stats, STAT_l1_hits);
    if (l1_item_check_due(it, now))
        l1_check(c, q, len);
    cb(arg, &res);
    l1_release(&it);
    return true;
}

/* The Redis stages: the GET of the exact key, then (on_exact) the semantic stage. */
static struct cache_op *lookup_redis(struct cache *c, const struct cache_query *q,
                                     cache_lookup_fn *cb, void *arg)
{
    struct cache_op *op = pc_calloc(1, sizeof(*op));
    op->magic = OP_MAGIC;
    op->c = c;
    op->kind = OP_EXACT;
    op->cb = cb;
    op->arg = arg;
    op->max_age_ms = q->max_age_ms;
    op->threshold = q->threshold;
    op->ticket = lookup_ticket(c, q);
    const char *key = op->ticket->key;
    op->l1_gen = l1_generation(c->l1);
    op->cmd = store_get(c->store, key, strlen(key), on_exact, op);
    if (op->cmd == NULL) {
        op_free(op);
        return NULL;
    }
    return op;
}

int cache_lookup(struct cache *c, const struct cache_query *q, cache_lookup_fn *cb, void *arg,
                 struct cache_op **op)
{
    PC_CHECK_OBJ(c, CACHE_MAGIC);
    *op = NULL;
    if (lookup_l1(c, q, cb, arg))
        return 0;
    if (!store_ready(c->store))
        return -1;
    *op = lookup_redis(c, q, cb, arg);
    return *op != NULL ? 0 : -1;
}

void cache_cancel(struct cache_op **opp)
{
    struct cache_op *op = *opp;
    if (op == NULL)
        return;
    *opp = NULL;
    PC_CHECK_OBJ(op, OP_MAGIC);
    store_cancel(&op->cmd);
    semantic_cancel(&op->sop);
    op_free(op);
}

/* ---- puts ------------------------------------------------------------------- */

static void put_free(struct cache_put_op *p)
{
    if (p->told) { /* in the detached list */
        if (p->prev != NULL)
            p->prev->next = p->next;
        else
            p->c->detached = p->next;
        if (p->next != NULL)
            p->next->prev = p->prev;
    }
    cache_ticket_free(&p->ticket);
    pc_buf_free(&p->l1_val);
    p->magic = 0;
    free(p);
}

/* The caller has let go of p (told, or never to be): the comparison that still runs ends it. */
static void put_detach(struct cache_put_op *p)
{
    struct cache *c = p->c;
    p->told = true;
    p->prev = NULL;
    p->next = c->detached;
    if (c->detached != NULL)
        c->detached->prev = p;
    c->detached = p;
}

/* The SET is acknowledged and the comparison (if any) done: tell the caller, then the rest. */
static void put_done(struct cache_put_op *p)
{
    if (!p->acked || (p->cmp != NULL && !p->streamed))
        return;
    if (p->told) { /* the comparison of a streamed answer ended */
        if (p->cmp == NULL)
            put_free(p);
        return;
    }
    struct cache *c = p->c;
    bool ok = p->stored;
    struct cache_ticket *t = p->ticket;
    /*
     * What the L1 held under the key is gone either way, before anyone has
     * the new answer (a refresh must not be followed by the old one, from
     * any worker); the new answer goes in if stored (queued for the filler).
     */
    if (!p->compare_only && ok)
        l1_replace(c->l1, t->tenant_id, t->exact, p->l1_val.len > 0 ? p->l1_val.data : NULL,
                   p->l1_val.len, p->sent_ms + p->ttl_ms, p->l1_gen);
    else if (!p->compare_only) /* failed, or timed out: Redis may apply it later */
        l1_unsure(c->l1, t->tenant_id, t->exact);
    /*
     * Then the waiting clients get their answers: the semantic index is
     * filled by other threads, and waking them is not the clients' business.
     * Redis holds the entry already, so the next identical request hits
     * either way.
     */
    if (p->cb != NULL)
        p->cb(p->arg, ok);
    if (p->compare_only) {
        /* nothing was written */
    } else if (ok && t->semantic && c->sem != NULL) {
        struct semantic_item it = {
            .endpoint = t->endpoint,
            .tenant_id = t->tenant_id,
            .exact = t->exact,
            .partition = t->partition,
            .text = t->text,
            .created_ms = p->created_ms,
            .ttl_ms = p->ttl_ms,
            .replaces = t->replaces,
        };
        semantic_put(c->sem, &it, &t->vec);
    } else if (ok && t->replaces) {
        /* A vector of the entry written over would outlive it or keep its old TTL. */
        semantic_forget(c->sem, c->store, t->tenant_id, t->exact);
    }
    if (p->cmp == NULL) {
        put_free(p);
        return;
    }
    put_detach(p);
}

static void on_put(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct cache_put_op *p = arg;
    PC_CHECK_OBJ(p, PUT_MAGIC);
    p->cmd = NULL;
    p->acked = true;
    p->stored = st == STORE_OK;
    stats_incr(p->c->stats, p->stored ? STAT_cache_stores : STAT_cache_store_skipped);
    put_done(p);
}

static void on_compared(void *arg)
{
    struct cache_put_op *p = arg;
    PC_CHECK_OBJ(p, PUT_MAGIC);
    p->cmp = NULL;
    put_done(p);
}

/*
 * How many EXISTS a set event sends at most behind its SET, each given store_write_bg_cb's
 * time (20 x redis-timeout: 30 s in all at the default 50 ms). A timed-out one stays owed
 * on the connection until the primary answers, so the wait is bounded; past it the event
 * goes as if the SET had run.
 */
#define SET_EVENT_ASKS 30

/* A set event waiting for its entry's SET to have run on its primary (cluster://). */
struct set_event {
    struct store *store;
    struct stats *stats;
    unsigned asks; /* EXISTS sent so far */
    unsigned char tenant[VINDEX_TENANT_LEN];
    unsigned char exact[PC_SHA256_LEN];
    char key[ENTRY_KEY_MAX]; /* the entry's Redis key */
};

static void on_set_ran(void *arg, enum store_status st, long long n);

/* Send the EXISTS behind the SET (again); -1 if it could not be sent. */
static int set_event_ask(struct set_event *e)
{
    const char *argv[] = {"EXISTS", e->key};
    const size_t lens[] = {6, strlen(e->key)};
    e->asks++;
    return store_write_bg_cb(e->store, 2, argv, lens, on_set_ran, e) != NULL ? 0 : -1;
}

/*
 * The command sent after the SET on its connection is answered, so the SET has run: the
 * event goes now. Failed (the connection lost: Redis drops the SET it had not run with it;
 * an error reply: answered, so after the SET), it goes too. Timed out, the SET may still be
 * held (CLIENT PAUSE WRITE) on a connection that lives on, so the event waits: EXISTS is
 * sent again, to the node of the key (the same connection; another one only if that was
 * lost or the slot moved, and then the held SET never runs), up to SET_EVENT_ASKS times.
 * A closing store refuses both the ask and the event.
 */
static void on_set_ran(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct set_event *e = arg;
    if (st == STORE_TIMEOUT && e->asks < SET_EVENT_ASKS) {
        if (e->asks == 1)
            stats_incr(e->stats, STAT_l1_set_events_held);
        if (set_event_ask(e) == 0)
            return;
    }
    vsync_store_entry_set(e->store, e->tenant, e->exact);
    free(e);
}

/*
 * After the entry's SET: every other instance drops its L1 copy once it reads the op=set
 * event, so the event must come after the SET has run. On one server both go on the same
 * connection, in order. On a cluster the entry's primary and the stream's are two
 * connections: an event sent with the SET could be read before the SET ran (a primary
 * holding writes back, CLIENT PAUSE WRITE in a failover, or just slower), and an instance
 * that applied it and then read the old answer kept that in its L1 after the refresh had
 * landed, for the rest of the old answer's TTL. There it goes once a command sent after the
 * SET on the SET's connection is answered: Redis answers a connection's commands in order.
 * A primary that holds the SET longer than that command's time, on a connection that lives
 * on, is asked again (on_set_ran): an event sent on that timeout did the same harm.
 */
static void publish_set(struct cache *c, const struct cache_ticket *t)
{
    unsigned char tenant[VINDEX_TENANT_LEN];
    if (vsync_parse_tenant(t->tenant_id, TENANT_ID_LEN, tenant) < 0)
        return;
    if (!store_is_cluster(c->store)) {
        vsync_store_entry_set(c->store, tenant, t->exact);
        return;
    }
    struct set_event *e = pc_calloc(1, sizeof(*e));
    e->store = c->store;
    e->stats = c->stats;
    memcpy(e->tenant, tenant, VINDEX_TENANT_LEN);
    memcpy(e->exact, t->exact, PC_SHA256_LEN);
    snprintf(e->key, sizeof(e->key), "%s", t->key);
    if (set_event_ask(e) < 0)
        on_set_ran(e, STORE_ERR, 0); /* its primary went away since: the event as before */
}

/* A put (or compare) of e under the ticket *tp, which it takes. */
static struct cache_put_op *put_new(struct cache *c, struct cache_ticket **tp,
                                    const struct entry *e, cache_put_fn *cb, void *arg)
{
    PC_CHECK_OBJ(c, CACHE_MAGIC);
    struct cache_ticket *t = *tp;
    *tp = NULL;
    PC_CHECK_OBJ(t, TICKET_MAGIC);
    struct cache_put_op *p = pc_calloc(1, sizeof(*p));
    p->magic = PUT_MAGIC;
    p->c = c;
    p->ticket = t;
    p->cb = cb;
    p->arg = arg;
    p->streamed = e->kind == ENTRY_SSE;
    return p;
}

struct cache_put_op *cache_put(struct cache *c, struct cache_ticket **tp, const struct entry *e,
                               int64_t ttl_ms, cache_put_fn *cb, void *arg)
{
    struct cache_put_op *p = put_new(c, tp, e, cb, arg);
    struct cache_ticket *t = p->ticket;
    p->ttl_ms = ttl_ms;
    p->created_ms = e->created_ms;
    struct entry with_meta = *e; /* what targeted deletes filter on */
    if (t->ns != NULL) {
        with_meta.ns = t->ns;
        with_meta.ns_len = strlen(t->ns);
    }
    if (t->model != NULL) {
        with_meta.model = t->model;
        with_meta.model_len = strlen(t->model);
    }
    /* Whom it may answer by meaning (a vector record naming it is not to be believed). */
    with_meta.partition = t->semantic ? t->partition : NULL;
    struct pc_buf val = PC_BUF_INIT;
    entry_encode(&with_meta, &val);
    p->sent_ms = l1_now_ms(); /* the L1's clock: its deadline */
    p->l1_gen = l1_generation(c->l1);
    p->cmd = store_set_cb(c->store, t->key, strlen(t->key), val.data, val.len, ttl_ms, on_put, p);
    if (p->cmd != NULL)
        publish_set(c, t);
    /* Marks found on the entry written over keep to the new one's life (same expiry). */
    if (p->cmd != NULL && t->replaces)
        bound_entry_renewed(semantic_bound_port(c->sem), t->tenant_id, t->exact, ttl_ms);
    if (p->cmd != NULL && l1_keeps(c->l1, val.len))
        p->l1_val = val; /* kept for the L1 */
    else
        pc_buf_free(&val);
    if (p->cmd == NULL) {
        put_free(p);
        return NULL;
    }
    /* The client's answer waits for the verdict (X-Cache-Verify); exact compares at once. */
    if (t->probe != NULL)
        bound_compare(semantic_bound_port(c->sem), t->probe, e, on_compared, p, &p->cmp);
    return p;
}

struct cache_put_op *cache_compare(struct cache *c, struct cache_ticket **tp, const struct entry *e,
                                   cache_put_fn *cb, void *arg)
{
    struct cache_put_op *p = put_new(c, tp, e, cb, arg);
    struct cache_ticket *t = p->ticket;
    p->acked = true; /* no SET to wait for */
    p->compare_only = true;
    /* Compared at once (the probe has its verdict), or not to be: nothing to wait for. */
    if (t->probe == NULL ||
        bound_compare(semantic_bound_port(c->sem), t->probe, e, on_compared, p, &p->cmp) != 0) {
        put_free(p);
        return NULL;
    }
    if (!p->streamed)
        return p;
    put_detach(p); /* the stream has gone out: nobody waits for the verdict */
    return NULL;
}

void cache_put_cancel(struct cache_put_op **pp)
{
    struct cache_put_op *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, PUT_MAGIC);
    store_cancel(&p->cmd);
    bound_compare_cancel(&p->cmp);
    /* The SET may still be applied: its stream event must then reach this process's L1. */
    if (!p->compare_only)
        l1_unsure(p->c->l1, p->ticket->tenant_id, p->ticket->exact);
    put_free(p);
}

/* ---- flush ------------------------------------------------------------------ */

static void flush_finish(struct cache_op *op, bool ok)
{
    cache_flush_fn *cb = op->flush_cb;
    void *arg = op->arg;
    long long n = op->deleted;
    op_free(op);
    cb(arg, ok, n);
}

static void on_flush_step(void *arg, enum store_status st, long long n)
{
    struct cache_op *op = arg;
    PC_CHECK_OBJ(op, OP_MAGIC);
    op->cmd = NULL;
    if (st != STORE_OK) {
        flush_finish(op, false);
        return;
    }
    const char *tenant = op->tenant[0] ? op->tenant : NULL;
    /* Answers deleted; then their vectors, their partitions' member lists and the error
     * bound's marks of those entries, one pattern after the other. */
    char pattern[PC_MAX(ENTRY_KEY_MAX, BOUND_KEY_MAX)] = "";
    if (op->kind == OP_FLUSH_NOTICE) {
        op->kind = OP_FLUSH_ENTRIES;
        entry_pattern(tenant, pattern);
    } else if (op->kind == OP_FLUSH_ENTRIES) {
        op->deleted = n;
        op->kind = OP_FLUSH_VECTORS;
        semantic_vector_pattern(tenant, pattern);
    } else if (op->kind == OP_FLUSH_VECTORS) {
        op->kind = OP_FLUSH_MEMBERS;
        semantic_members_pattern(tenant, pattern);
    } else if (op->kind == OP_FLUSH_MEMBERS) {
        op->kind = OP_FLUSH_MARKS;
        bound_entry_pattern(tenant, pattern);
    } else if (op->kind == OP_FLUSH_MARKS) {
        /*
         * Every instance drops the flushed answers from its L1 and vectors from its index
         * (this one at once). A flush whose event the stream refused (a full Redis refuses
         * XADD, not the deletes) has not worked: the other instances' L1 would serve the
         * answers for the rest of their TTL. It fails (503), and running it again tells them.
         */
        op->kind = OP_FLUSH_PUBLISH;
        l1_clear(op->c->l1, tenant);
        op->cmd = semantic_publish_flush(op->c->sem, op->c->store, tenant, on_flush_step, op);
        if (op->cmd == NULL)
            flush_finish(op, false);
        return;
    }
    if (pattern[0] != '\0') {
        op->cmd = store_delete_matching(op->c->store, pattern, on_flush_step, op);
        if (op->cmd == NULL)
            flush_finish(op, false);
        return;
    }
    flush_finish(op, true);
}

struct cache_op *cache_flush(struct cache *c, const char *tenant_id, cache_flush_fn *cb, void *arg)
{
    PC_CHECK_OBJ(c, CACHE_MAGIC);
    if (!store_ready(c->store))
        return NULL;
    struct cache_op *op = pc_calloc(1, sizeof(*op));
    op->magic = OP_MAGIC;
    op->c = c;
    op->kind = OP_FLUSH_NOTICE;
    op->flush_cb = cb;
    op->arg = arg;
    if (tenant_id != NULL)
        snprintf(op->tenant, sizeof(op->tenant), "%.*s", TENANT_ID_LEN, tenant_id);
    /*
     * The deletes start once the notice is in the stream: the other instances hold back the
     * answers on their way from it alone (the flush event holds back nothing). Refused (a full
     * Redis refuses XADD, not the deletes that free memory), the flush fails and deletes
     * nothing: said done, those answers were stored after it.
     */
    op->cmd = fence_notice(c->store, on_flush_step, op);
    if (op->cmd == NULL) {
        op_free(op);
        return NULL;
    }
    return op;
}
