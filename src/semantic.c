/*
 * semantic.c - the semantic stage of the cache (see pc_semantic.h).
 *
 * Owns, for the process (struct semantic): the embedder (pc_embed.h), the
 * vector index (pc_vindex.h, bounded by semantic-index-memory), the thread
 * pool that embeds and searches off the event loops, and the loader that
 * brings partitions in from Redis and keeps them in step (pc_vsync.h, fed by
 * the process's stream follower, pc_follow.h). Per worker (struct
 * semantic_port): the pool's port, the embedder's port and the verifier,
 * and every lookup and put in progress (struct semantic_op, struct sput).
 *
 * A lookup, after an exact miss:
 *
 *   EMBED   embed_submit, whatever the embedder (a local one on the pool, a
 *     │     remote one in its batch), then a pool job (search)
 *     ▼     the whole of it bounded by embedder-timeout (else: a miss)
 *   SEARCH  vindex_lookup(partition, vec, k, threshold) ─▶ candidates, best first;
 *     │     a partition not in memory: its load asked for and waited for at most
 *     │     redis-timeout (vsync_load_wait), then searched, or a miss
 *     ▼
 *   FETCH   GET the candidate's entry and vector record (two keys, one hash
 *     │     tag); gone, unusable, or an entry that is not of the query's
 *     │     partition (its own, stored in it) ─▶ drop it from the index, next
 *     ▼
 *   GUARDS  guard_check(this text, the candidate's text) ─▶ rejected: next
 *     ▼
 *   VERIFY  below semantic-sure-threshold and a verifier configured: ask it;
 *     │     anything but yes ─▶ next candidate
 *     ▼
 *   BOUND   with semantic-max-error (pc_bound.h; its reads go with FETCH):
 *     │     serve, or a miss carrying a probe (the candidate's answer, to be
 *     │     compared with the fresh one), or the next candidate
 *     ▼
 *   HIT     the entry (copied out of the Redis reply) to the callback
 *
 * A put: the vector (from the lookup, or embedded now on the pool) and the
 * text go into a vector record next to the entry (same hash tag, same TTL),
 * its partition's member list gets it, an "add" event on the Stream tells
 * every instance, and this process's index has it at once if the partition
 * is in memory. A put over an existing entry that gets no vector
 * deletes the old one ("del" event), so no index keeps it with its old TTL.
 *
 * An embedder with a circuit breaker (embedder openai's, one per process)
 * stops the calls after embedder-breaker-failures failures in a row: then
 * lookups skip this stage (semantic_breaker_skips: embed_shut) and puts
 * store no vector (semantic_vectors_skipped), until a probe gets an answer:
 * a put's embedding, which no client waits on (a lookup only when no put
 * came for twice the cool-down).
 *
 * Ownership of an op that waits on a pool job: the job holds it; cancelling
 * only marks it (op->cancelled) and the job's done callback frees it. An op
 * that waits on its embedding holds the request and cancels it.
 */
#include "pc_semantic.h"
#include "pc_bound.h"
#include "pc_conf.h"
#include "pc_embed.h"
#include "pc_follow.h"
#include "pc_guard.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_pool.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_text.h"
#include "pc_verify.h"
#include "pc_rcli.h"
#include "pc_vindex.h"
#include "pc_vrec.h"
#include "pc_vsync.h"

#include <hiredis/hiredis.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#define SEMANTIC_MAGIC 0x53454d41u /* "SEMA" */
#define PORT_MAGIC     0x53504f52u /* "SPOR" */
#define SOP_MAGIC      0x534f5031u /* "SOP1" */
#define SPUT_MAGIC     0x53505554u /* "SPUT" */
#define PAIR_MAGIC     0x53504152u /* "SPAR" */
#define SADD_MAGIC     0x53414444u /* "SADD" */

#define SEMANTIC_K 4 /* candidates examined per lookup */
/*
 * The longest text matched by meaning. The guards (and the verifier) must see the whole of
 * both texts, and a vector record keeps a text whole up to VREC_TEXT_MAX bytes: a longer one
 * was cut (on a character boundary, so to 4093..4096 bytes) by versions that stored it, and
 * the embedders and guards read 8 KiB of a text, its head and tail, and TEXT_MAX_TOKENS of
 * its words (text_whole). A longer text is looked up and stored exactly only; a record whose
 * text may have been cut is not a candidate.
 */
#define SEMANTIC_TEXT_MAX (VREC_TEXT_MAX - 4)
/* The verifier is shown both texts whole, and never asked about one it would not see whole. */
_Static_assert(SEMANTIC_TEXT_MAX <= VERIFY_TEXT_MAX, "the verifier sees every text matched whole");
#define REC_SIM_SLACK       0.01 /* the index's similarity against its record's, at most off */
#define SEMANTIC_POOL_QUEUE 4096 /* jobs waiting for a pool thread before lookups are shed */
/* No record expires later than cache-max-ttl (at most a year, conf.c) plus a day of clock skew. */
#define RECORD_TTL_MAX_MS ((int64_t)366 * 86400 * 1000)
/* semantic-index-memory auto: this part of the machine's memory (the answers stay in Redis). */
#define INDEX_MEMORY_FRACTION 4
#define INDEX_MEMORY_FALLBACK (1ll << 30)

struct semantic_vec {
    int dim;
    float v[];
};

struct semantic {
    unsigned magic;
    const struct conf *conf;
    struct stats *row;    /* the process's own metrics (breaker, stream reader), registered */
    struct embedder *emb; /* the configured embedder */
    char space[EMBED_SPACE_MAX];
    unsigned guards;
    struct pool *pool;
    pthread_mutex_t mu; /* guards the lazy creation of vx and sync (an embedder of unknown dim) */
    struct vindex *vx;  /* NULL until the dimension is known (a remote embedder's first vector) */
    struct vsync *sync;
    bool dim_seen; /* vx's dimension is the embedder's own, not read from Redis at start */
    bool dim_warned;
    /* An index made for the dimension found in Redis at start, which the embedder's vectors
     * did not have: kept (threads may hold it) and idle until the end. */
    struct vindex *old_vx;
    struct vsync *old_sync;
    struct follow *follow; /* the process's stream follower (NULL: none) */
    bool following;        /* our handler was started (and not down since): under mu */
    struct bound *bound;   /* semantic-max-error; NULL when off */
    /* semantic-threshold in force (reloadable; < 0: auto), as the bits of a double: atomic */
    uint64_t threshold_set;
};

struct semantic_port {
    unsigned magic;
    struct semantic *s;
    struct event_base *base;
    struct store *store;
    struct stats *st;
    struct pool_port *pport;
    struct embed_port *eport; /* this worker's door to the embedder */
    struct verify *verify;    /* semantic-verify-url */
    struct bound_port *bport; /* semantic-max-error */
};

enum sop_state {
    SOP_EMBED,  /* waiting for the vector (embed_submit), then the search (pool job) */
    SOP_FETCH,  /* waiting for a candidate's entry and record */
    SOP_VERIFY, /* waiting for the verifier */
};

struct semantic_op {
    unsigned magic;
    struct semantic_port *p;
    semantic_fn *cb;
    void *arg;
    enum sop_state state;
    bool cancelled; /* by the caller while a pool job holds the op */
    bool in_pool;
    bool timed_out;
    bool cold;        /* the partition was not in memory in time (counted on the worker) */
    unsigned foreign; /* vectors of another tenant found in the partition (counted there too) */

    /* The query (copied). */
    enum api_endpoint endpoint;
    char tenant_id[TENANT_ID_LEN + 1];
    unsigned char exact[PC_SHA256_LEN];
    unsigned char partition[PC_SHA256_LEN];
    char *text;
    int64_t max_age_ms;
    double threshold;

    /* Embedding and search. */
    struct semantic_vec *vec; /* NULL until embedded */
    struct embed_req *ereq;   /* the embedding asked for, until it comes */
    struct event *deadline;
    struct vindex_hit hits[SEMANTIC_K];
    size_t nhits;
    size_t next; /* next candidate to examine */

    /* The candidate being examined. */
    struct store_cmd *get_entry;
    struct store_cmd *get_rec;
    int replies;
    bool entry_ok, rec_ok;
    bool rec_differs; /* the index's vector is not the record's: put right, not a candidate */
    bool unread;      /* a reply did not come (timeout, error): the candidate may well be there */
    bool rec_absent;  /* no record under its key (yet: see examine_candidate) */
    struct pc_buf entry_buf; /* the candidate's entry bytes (the hit points into them) */
    struct entry entry;
    char *cand_text;
    struct verify_op *vop;

    /* The error bound (semantic-max-error): its reads, and a probe for the caller. */
    struct bound_view *bview;
    int expect; /* replies awaited for the candidate */
    struct bound_probe *probe;
};

/* A put waiting for its vector from the embedder. */
struct sput {
    unsigned magic;
    struct semantic_port *p;
    struct semantic_item it;
    char tenant_id[TENANT_ID_LEN + 1];
    unsigned char exact[PC_SHA256_LEN];
    unsigned char partition[PC_SHA256_LEN];
    char *text;
    struct semantic_vec *vec;
};

/* A vector written, indexed here once Redis has its record (put_write). */
struct sadd {
    unsigned magic;
    struct semantic *s;
    unsigned char partition[PC_SHA256_LEN];
    struct vindex_item item;
    struct semantic_vec *vec;
};

static void tenant_bytes(const char *tenant_id, unsigned char out[VINDEX_TENANT_LEN]);

static struct semantic_vec *vec_new(int dim)
{
    struct semantic_vec *v = pc_calloc(1, sizeof(*v) + (size_t)dim * sizeof(float));
    v->dim = dim;
    return v;
}

struct semantic_vec *semantic_vec_take(struct semantic_result *r)
{
    struct semantic_vec *v = r->vec;
    r->vec = NULL;
    return v;
}

void semantic_vec_free(struct semantic_vec **v)
{
    PC_FREE(v);
}

struct bound_probe *semantic_probe_take(struct semantic_result *r)
{
    struct bound_probe *p = r->probe;
    r->probe = NULL;
    return p;
}

/* ---- the process's part ------------------------------------------------------- */

/* The index if it exists yet (any thread). */
static struct vindex *index_get(struct semantic *s)
{
    pthread_mutex_lock(&s->mu);
    struct vindex *vx = s->vx;
    pthread_mutex_unlock(&s->mu);
    return vx;
}

/* The loader if it exists yet (any thread). */
static struct vsync *sync_get(struct semantic *s)
{
    pthread_mutex_lock(&s->mu);
    struct vsync *y = s->sync;
    pthread_mutex_unlock(&s->mu);
    return y;
}

int64_t semantic_index_memory_bytes(const struct conf *c)
{
    if (c->semantic_index_memory >= 0)
        return c->semantic_index_memory;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return INDEX_MEMORY_FALLBACK;
    return (int64_t)pages * (int64_t)page / INDEX_MEMORY_FRACTION;
}

/*
 * The index for vectors of dim (created on first use when the embedder is remote). seen: dim
 * is that of a vector the embedder gave, which overrules a dimension read from Redis at start
 * (old records of the space from another model or server behind the same embedder-model name,
 * or forged ones): the index is made again, once, for the embedder's.
 */
static struct vindex *index_for(struct semantic *s, int dim, bool seen)
{
    pthread_mutex_lock(&s->mu);
    if (seen && !s->dim_seen && s->vx != NULL && vindex_dim(s->vx) != dim && s->old_vx == NULL) {
        log_warn("semantic: the embedder's vectors have %d dimensions, the vectors of space "
                 "\"%s\" found in Redis at start %d: the index is made again for %d (the "
                 "others are never candidates; they expire with their entries)",
                 dim, s->space, vindex_dim(s->vx), dim);
        s->old_vx = s->vx;
        s->old_sync = s->sync;
        s->vx = NULL;
        s->sync = NULL;
    }
    if (s->vx == NULL) {
        struct vindex_opts vo = {
            .dim = dim,
            .background = true,
            .lazy = true,
            .max_bytes = (size_t)semantic_index_memory_bytes(s->conf),
            .row = s->row,
        };
        s->vx = vindex_create(&vo);
        if (s->vx != NULL) {
            struct vsync_opts so = {
                .url = s->conf->redis,
                .space = s->space,
                .index = s->vx,
                .max_ttl_ms = RECORD_TTL_MAX_MS,
                .row = s->row,
                .following = s->following,
            };
            s->sync = vsync_start(&so);
        }
    }
    struct vindex *vx = s->vx != NULL && vindex_dim(s->vx) == dim ? s->vx : NULL;
    if (seen && vx != NULL)
        s->dim_seen = true;
    bool warn = seen && vx == NULL && s->vx != NULL && !s->dim_warned;
    if (warn)
        s->dim_warned = true;
    int have = s->vx != NULL ? vindex_dim(s->vx) : 0;
    pthread_mutex_unlock(&s->mu);
    if (warn)
        log_warn("semantic: the embedder gave a vector of %d dimensions, the index holds %d: "
                 "such vectors are neither searched nor indexed here (a restart takes the "
                 "embedder's dimension)",
                 dim, have);
    return vx;
}

/*
 * A remote embedder's dimension is known from its first answer; but after a
 * restart the vectors already in Redis say it: read a few records (blocking,
 * at start only, each command bounded by redis-timeout) so the index is
 * rebuilt at once. 0 when none of this space is found (or Redis is away).
 */
static int discover_dim(struct semantic *s)
{
    /* Zeroed: rcli_open leaves quiet (and next_sentinel) to the caller; a background probe at
     * start is quiet (a failure is a dimension of 0, nothing to print). */
    struct rcli k = {.quiet = true};
    if (rcli_connect(&k, s->conf, "semantic") < 0) {
        rcli_close(&k); /* a failed open keeps the URL and its name */
        return 0;
    }
    int dim = 0;
    char cursor[32] = "0", pattern[ENTRY_KEY_MAX];
    semantic_vector_pattern(NULL, pattern);
    float *scratch = pc_malloc(VINDEX_DIM_MAX * sizeof(float));
    for (int round = 0; round < 20 && dim == 0; round++) {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        size_t lens[] = {4, strlen(cursor), 5, strlen(pattern), 5, 4};
        redisReply *r = rcli_command(&k, "SCAN", 6, argv, lens);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str ? r->element[0]->str : "0");
        for (size_t i = 0; i < r->element[1]->elements && i < 16 && dim == 0; i++) {
            const redisReply *key = r->element[1]->element[i];
            const char *gv[] = {"GET", key->str};
            size_t gl[] = {3, key->len};
            redisReply *g = rcli_command(&k, "GET", 2, gv, gl);
            struct vrec rec;
            char err[128];
            if (g != NULL && g->type == REDIS_REPLY_STRING &&
                vrec_decode(g->str, g->len, &rec, scratch, VINDEX_DIM_MAX, err, sizeof(err)) == 0 &&
                strcmp(rec.space, s->space) == 0)
                dim = (int)rec.dim;
            freeReplyObject(g);
        }
        freeReplyObject(r);
        if (strcmp(cursor, "0") == 0)
            break;
    }
    free(scratch);
    rcli_close(&k);
    return dim;
}

static int pool_threads(const struct conf *c)
{
    return c->workers > 1 ? c->workers : 1;
}

/* The follower's calls, passed on to the loader once there is one (a remote embedder's index
 * comes with its first answer: until then there is nothing to keep in step). */
static void on_follow_entry(void *arg, const redisReply *fields)
{
    struct vsync *y = sync_get(arg);
    if (y != NULL)
        vsync_on_entry(y, fields);
}

/*
 * Whether the follower reads the stream is noted under mu, where index_for creates the
 * reader: an index created while the follower starts is then either created following or
 * told so here.
 */
static struct vsync *note_following(struct semantic *s, bool following)
{
    pthread_mutex_lock(&s->mu);
    s->following = following;
    struct vsync *y = s->sync;
    pthread_mutex_unlock(&s->mu);
    return y;
}

static int on_follow_start(void *arg, struct rcli *k)
{
    (void)k;
    struct vsync *y = note_following(arg, true);
    if (y != NULL)
        vsync_on_start(y);
    return 0;
}

static void on_follow_down(void *arg)
{
    struct vsync *y = note_following(arg, false);
    if (y != NULL)
        vsync_on_down(y);
}

int semantic_follow(struct semantic *s, struct follow *f)
{
    struct follow_handler h = {
        .name = "vector index",
        .stream = vsync_stream_key(),
        .start = on_follow_start,
        .entry = on_follow_entry,
        .down = on_follow_down,
        .arg = s,
    };
    if (f == NULL || follow_add(f, &h) < 0)
        return -1;
    pthread_mutex_lock(&s->mu);
    s->follow = f;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

struct semantic *semantic_create(const struct conf *c, struct stats *st, char *err, size_t errlen)
{
    (void)st;
    struct semantic *s = pc_calloc(1, sizeof(*s));
    s->magic = SEMANTIC_MAGIC;
    s->conf = c;
    semantic_set_threshold(s, c->semantic_threshold);
    /* Registered before the workers' rows, as every row is (server.c). */
    s->row = aligned_alloc(64, sizeof(*s->row));
    if (s->row == NULL)
        abort();
    memset(s->row, 0, sizeof(*s->row));
    stats_register(s->row);
    pthread_mutex_init(&s->mu, NULL);
    s->guards = guard_mask(c->semantic_guards.v, c->semantic_guards.n);
    s->emb = embed_create(c, s->row, err, errlen);
    if (s->emb == NULL)
        goto fail;
    snprintf(s->space, sizeof(s->space), "%s", embed_space(s->emb));
    s->pool = pool_create(pool_threads(c), SEMANTIC_POOL_QUEUE);
    if (s->pool == NULL) {
        snprintf(err, errlen, "cannot start the semantic cache's threads");
        goto fail;
    }
    s->bound = bound_create(c, s->space);
    int dim = embed_dim(s->emb) > 0 ? embed_dim(s->emb) : discover_dim(s);
    if (dim > 0 && index_for(s, dim, embed_dim(s->emb) > 0) == NULL) {
        snprintf(err, errlen, "cannot create the vector index");
        goto fail;
    }
    return s;
fail:
    semantic_destroy(&s);
    return NULL;
}

const char *semantic_space(const struct semantic *s)
{
    return s->space;
}

void semantic_set_threshold(struct semantic *s, double t)
{
    uint64_t bits;
    memcpy(&bits, &t, sizeof(bits));
    __atomic_store_n(&s->threshold_set, bits, __ATOMIC_RELAXED);
}

double semantic_default_threshold(const struct semantic *s)
{
    uint64_t bits = __atomic_load_n(&s->threshold_set, __ATOMIC_RELAXED);
    double t;
    memcpy(&t, &bits, sizeof(t));
    return t < 0 ? embed_default_threshold(s->emb) : t;
}

void semantic_stop(struct semantic *s)
{
    if (s == NULL)
        return;
    pool_stop(s->pool);
    pthread_mutex_lock(&s->mu);
    struct vsync *y = s->sync, *old = s->old_sync;
    s->sync = NULL; /* the follower, stopped before, calls in no more */
    s->old_sync = NULL;
    pthread_mutex_unlock(&s->mu);
    vsync_stop(&y);
    vsync_stop(&old);
}

void semantic_destroy(struct semantic **sp)
{
    struct semantic *s = *sp;
    if (s == NULL)
        return;
    *sp = NULL;
    semantic_stop(s);
    pool_destroy(&s->pool);
    vindex_destroy(&s->vx);
    vindex_destroy(&s->old_vx);
    embed_destroy(&s->emb);
    bound_destroy(&s->bound);
    pthread_mutex_destroy(&s->mu);
    free(s->row); /* the registry is emptied right after (server_teardown) */
    s->magic = 0;
    free(s);
}

/* ---- series (pc_stats.h) ---------------------------------------------------------- */

struct semantic_figures {
    double threshold;
    const char *space;
    struct vindex_stats vs;
    struct vsync_counters ys;
    int64_t index_memory;
    size_t queued;
    const char *breaker; /* NULL: an embedder without a breaker */
};

static void semantic_snapshot(const void *obj, void *snap)
{
    struct semantic *s = (struct semantic *)obj; /* its locks */
    struct semantic_figures *f = snap;
    struct vindex *vx = index_get(s);
    if (vx != NULL)
        vindex_get_stats(vx, &f->vs);
    struct vsync *y = sync_get(s);
    if (y != NULL)
        vsync_get_counters(y, &f->ys);
    f->threshold = semantic_default_threshold(s);
    f->space = s->space;
    f->index_memory = semantic_index_memory_bytes(s->conf);
    f->queued = pool_queued(s->pool);
    f->breaker = embed_breaker_state(s->emb);
}

#define SEMANTIC_SERIES(X)                                                                         \
    X(threshold, "semantic_threshold", NULL, "gauge", 4,                                           \
      "The similarity a candidate needs unless X-Cache-Threshold says (semantic-threshold, or "    \
      "the embedder's own for auto)",                                                              \
      stat_real(v, s->threshold))                                                                  \
    X(space, "semantic_space", NULL, "info", 0,                                                    \
      "The embedder's vector space: vectors of another are not searched", stat_str(v, s->space))   \
    X(vectors, "semantic_vectors", NULL, "gauge", 0, "Vectors in the process's index",             \
      stat_int(v, (int64_t)s->vs.vectors))                                                         \
    X(partitions, "semantic_partitions", NULL, "gauge", 0,                                         \
      "Partitions holding at least one vector", stat_int(v, (int64_t)s->vs.partitions))            \
    X(partitions_loaded, "semantic_partitions_loaded", NULL, "gauge", 0,                           \
      "Partitions loaded from Redis and held in memory", stat_int(v, (int64_t)s->vs.loaded))       \
    X(ivf_partitions, "semantic_ivf_partitions", NULL, "gauge", 0,                                 \
      "Of those, served by a FAISS IVF index", stat_int(v, (int64_t)s->vs.ivf_partitions))         \
    X(index_builds, "semantic_index_builds", NULL, "counter", 0, "IVF (re)builds completed",       \
      stat_int(v, (int64_t)s->vs.builds))                                                          \
    X(index_memory, "semantic_index_memory", NULL, "gauge", 0,                                     \
      "Bytes of vectors the index may hold (semantic-index-memory)", stat_int(v, s->index_memory)) \
    X(evicted_vectors, "semantic_index_evicted_vectors", NULL, "counter", 0,                       \
      "Vectors dropped with the least recently searched partitions to stay within it",             \
      stat_int(v, (int64_t)s->vs.evicted_vectors))                                                 \
    X(index_queued, "semantic_index_queued", NULL, "gauge", 0, "Partition loads waiting",          \
      stat_int(v, (int64_t)s->ys.queued))                                                          \
    X(pool_queued, "semantic_pool_queued", NULL, "gauge", 0,                                       \
      "Semantic lookups waiting for the embedding pool", stat_int(v, (int64_t)s->queued))          \
    X(sync_ready, "semantic_sync_ready", NULL, "gauge", 0,                                         \
      "Whether the index follows the vector stream (its events are applied)",                      \
      stat_bool(v, s->ys.ready))                                                                   \
    X(sync_loaded, "semantic_sync_loaded", NULL, "counter", 0,                                     \
      "Vectors added to the index by loads from Redis", stat_int(v, (int64_t)s->ys.loaded))        \
    X(sync_events, "semantic_sync_events", NULL, "counter", 0,                                     \
      "Vector events of the stream applied (add, del, flush)", stat_int(v, (int64_t)s->ys.events)) \
    X(sync_ignored, "semantic_sync_ignored", NULL, "counter", 0,                                   \
      "Add events of partitions not in memory (loaded from Redis when next searched)",             \
      stat_int(v, (int64_t)s->ys.ignored))                                                         \
    X(breaker, "embedder_breaker", NULL, "info", 0,                                                \
      "The remote embedder's circuit breaker: closed, open or half-open (embedder openai only)",   \
      if (s->breaker != NULL) stat_str(v, s->breaker))

#define SEMANTIC_READ(id, name, prom, kind, dec, help, stmt) \
    STAT_READER(semantic, struct semantic_figures, id, stmt)
#define SEMANTIC_ROW(id, name, prom, kind, dec, help, stmt) \
    STAT_ROW(semantic, id, name, prom, kind, dec, help)
SEMANTIC_SERIES(SEMANTIC_READ)
static const struct stat_row semantic_rows[] = {SEMANTIC_SERIES(SEMANTIC_ROW)};

const struct stat_group semantic_series = {
    .rows = semantic_rows,
    .nrows = PC_ARRAY_LEN(semantic_rows),
    .snap_size = sizeof(struct semantic_figures),
    .snapshot = semantic_snapshot,
};

struct bound *semantic_bound(const struct semantic *s)
{
    return s != NULL ? s->bound : NULL;
}

/* ---- two answers' cosine (the error bound's embedding comparator) ------------------ */

/*
 * Both texts embedded with the configured embedder: two requests to it. The
 * callback never runs before pair_start returns.
 */
struct spair {
    unsigned magic;
    struct semantic_port *p;
    bound_cos_fn *cb;
    void *arg;
    struct semantic_vec *vec[2];
    struct embed_req *ereq[2];
};

static void pair_free(struct spair *sp)
{
    for (int i = 0; i < 2; i++) {
        embed_cancel(&sp->ereq[i]);
        semantic_vec_free(&sp->vec[i]);
    }
    sp->magic = 0;
    free(sp);
}

static double pair_cosine(const struct spair *sp)
{
    if (sp->vec[0] == NULL || sp->vec[1] == NULL || sp->vec[0]->dim != sp->vec[1]->dim)
        return NAN;
    return embed_dot(sp->vec[0]->v, sp->vec[1]->v, sp->vec[0]->dim);
}

static void pair_end(struct spair *sp)
{
    bound_cos_fn *cb = sp->cb;
    void *arg = sp->arg;
    double cos = pair_cosine(sp);
    pair_free(sp);
    cb(arg, cos);
}

static void on_pair_vec(struct spair *sp, int i, const float *vec, int dim)
{
    sp->ereq[i] = NULL;
    if (vec != NULL) {
        sp->vec[i] = vec_new(dim);
        memcpy(sp->vec[i]->v, vec, (size_t)dim * sizeof(float));
    }
    if (sp->ereq[0] == NULL && sp->ereq[1] == NULL)
        pair_end(sp);
}

static void on_pair_vec0(void *arg, const float *vec, int dim)
{
    struct spair *sp = arg;
    PC_CHECK_OBJ(sp, PAIR_MAGIC);
    on_pair_vec(sp, 0, vec, dim);
}

static void on_pair_vec1(void *arg, const float *vec, int dim)
{
    struct spair *sp = arg;
    PC_CHECK_OBJ(sp, PAIR_MAGIC);
    on_pair_vec(sp, 1, vec, dim);
}

static void *pair_start(void *ctx, const char *a, const char *b, bound_cos_fn *cb, void *arg)
{
    struct semantic_port *p = ctx;
    PC_CHECK_OBJ(p, PORT_MAGIC);
    struct spair *sp = pc_calloc(1, sizeof(*sp));
    sp->magic = PAIR_MAGIC;
    sp->p = p;
    sp->cb = cb;
    sp->arg = arg;
    sp->ereq[0] = embed_submit(p->eport, a, strlen(a), false, on_pair_vec0, sp);
    sp->ereq[1] = embed_submit(p->eport, b, strlen(b), false, on_pair_vec1, sp);
    if (sp->ereq[0] == NULL || sp->ereq[1] == NULL) {
        pair_free(sp);
        return NULL;
    }
    return sp;
}

static void pair_cancel(void **handle)
{
    struct spair *sp = *handle;
    *handle = NULL;
    if (sp == NULL)
        return;
    PC_CHECK_OBJ(sp, PAIR_MAGIC);
    pair_free(sp);
}

/* ---- ports ------------------------------------------------------------------ */

struct semantic_port *semantic_port_create(struct semantic *s, struct event_base *base,
                                           struct store *store, struct upstream *up,
                                           struct stats *st)
{
    if (s == NULL)
        return NULL;
    struct semantic_port *p = pc_calloc(1, sizeof(*p));
    p->magic = PORT_MAGIC;
    p->s = s;
    p->base = base;
    p->store = store;
    p->st = st;
    p->pport = pool_port_create(base);
    p->eport = embed_port_create(s->emb, base, up, st, s->pool, p->pport);
    p->verify = verify_create(s->conf, base, up, st);
    static const struct bound_pair_ops pair_ops = {pair_start, pair_cancel};
    p->bport = bound_port_create(s->bound, store, st, p->verify, &pair_ops, p);
    return p;
}

struct bound_port *semantic_bound_port(struct semantic_port *p)
{
    return p != NULL ? p->bport : NULL;
}

void semantic_port_destroy(struct semantic_port **pp)
{
    struct semantic_port *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, PORT_MAGIC);
    pool_port_destroy(&p->pport); /* jobs still owed finish here, freeing their ops */
    embed_port_destroy(&p->eport);
    bound_port_destroy(&p->bport);
    verify_destroy(&p->verify);
    p->magic = 0;
    free(p);
}

/* ---- keys ------------------------------------------------------------------- */

void semantic_members_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX])
{
    char p[VSYNC_KEY_MAX];
    vsync_members_pattern(tenant_id, p);
    snprintf(out, ENTRY_KEY_MAX, "%s", p);
}

void semantic_vector_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX])
{
    if (tenant_id == NULL)
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "v:*");
    else
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "v:{%.*s:*", TENANT_ID_LEN, tenant_id);
}

/* The index's tenant id (8 bytes) from the 16 hex characters. */
static void tenant_bytes(const char *tenant_id, unsigned char out[VINDEX_TENANT_LEN])
{
    for (int i = 0; i < VINDEX_TENANT_LEN; i++) {
        unsigned v = 0;
        sscanf(tenant_id + 2 * i, "%2x", &v);
        out[i] = (unsigned char)v;
    }
}

static void tenant_hex(const unsigned char t[VINDEX_TENANT_LEN], char out[TENANT_ID_LEN + 1])
{
    pc_hex(t, VINDEX_TENANT_LEN, out);
}

struct store_cmd *semantic_publish_flush(struct semantic_port *p, struct store *store,
                                         const char *tenant_id, store_int_fn *cb, void *arg)
{
    if (p != NULL) {
        struct vindex *vx = index_get(p->s);
        if (vx != NULL && tenant_id == NULL)
            vindex_clear(vx);
        else if (vx != NULL) {
            unsigned char t[VINDEX_TENANT_LEN];
            tenant_bytes(tenant_id, t);
            vindex_remove_tenant(vx, t);
        }
    }
    unsigned char t[VINDEX_TENANT_LEN];
    if (tenant_id != NULL)
        tenant_bytes(tenant_id, t);
    return vsync_store_flush_cb(store, tenant_id != NULL ? t : NULL, cb, arg);
}

static void forget(struct semantic_port *p, struct store *store, const char *tenant_id,
                   const unsigned char *exact, const unsigned char *partition)
{
    if (p != NULL) {
        struct vindex *vx = index_get(p->s);
        if (vx != NULL)
            vindex_remove(vx, exact);
    }
    unsigned char t[VINDEX_TENANT_LEN];
    tenant_bytes(tenant_id, t);
    vsync_store_del(store, t, exact, partition);
}

void semantic_forget(struct semantic_port *p, struct store *store, const char *tenant_id,
                     const unsigned char exact[PC_SHA256_LEN])
{
    forget(p, store, tenant_id, exact, NULL); /* its member goes at its partition's next load */
}

/* The longest run of bytes without ASCII white space in s (a token never spans one). */
static size_t longest_run(const char *s, size_t len)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        run = c == ' ' || (c >= '\t' && c <= '\r') ? 0 : run + 1;
        best = PC_MAX(best, run);
    }
    return best;
}

/*
 * Whether the embedders and the guards read all of s: at most SEMANTIC_TEXT_MAX bytes,
 * TEXT_MAX_TOKENS tokens (about 4 KiB of ideographs or of short words hold more) and no
 * token cut at the TEXT_TOK_MAX bytes one keeps (a key, a hash, a long word): what they do
 * not read was never compared, so two texts differing there were the same text. A token
 * takes a byte at least (a contraction three for two) and never spans white space, so a
 * short text without a long run is not tokenized here.
 */
static bool text_whole(const char *s, size_t len)
{
    if (len > SEMANTIC_TEXT_MAX)
        return false;
    if (len <= TEXT_MAX_TOKENS / 2 && longest_run(s, len) <= TEXT_TOK_MAX)
        return true;
    struct text_doc *d = pc_malloc(sizeof(*d));
    text_doc_reset(d);
    text_tokenize(d, s, len);
    bool whole = !d->truncated;
    /* cut: its raw form longer than what is kept, and as much kept as fits (less a character
     * that did not fit whole, or a trailing point or apostrophe) */
    for (size_t i = 0; i < d->n && whole; i++)
        whole = !(d->tok[i].raw_len > TEXT_TOK_MAX && d->tok[i].len + 4 > TEXT_TOK_MAX);
    free(d);
    return whole;
}

/* ---- lookups: ending -------------------------------------------------------- */

static void op_free(struct semantic_op *op)
{
    store_cancel(&op->get_entry);
    store_cancel(&op->get_rec);
    embed_cancel(&op->ereq);
    verify_cancel(&op->vop);
    bound_view_free(&op->bview);
    bound_probe_unref(&op->probe);
    if (op->deadline != NULL)
        event_free(op->deadline);
    semantic_vec_free(&op->vec);
    pc_buf_free(&op->entry_buf);
    free(op->cand_text);
    free(op->text);
    op->magic = 0;
    free(op);
}

/* Tell the caller (hit: entry set, stored under key; a miss may carry a probe) and free the op. */
static void op_finish(struct semantic_op *op, const struct entry *hit, const unsigned char *key,
                      double sim)
{
    struct semantic_result res = {
        .entry = hit, .exact = key, .similarity = sim, .vec = op->vec, .probe = op->probe};
    op->vec = NULL;
    op->probe = NULL;
    semantic_fn *cb = op->cb;
    void *arg = op->arg;
    cb(arg, &res);
    semantic_vec_free(&res.vec); /* unless the caller took them */
    bound_probe_unref(&res.probe);
    op_free(op);
}

static void op_miss(struct semantic_op *op)
{
    op_finish(op, NULL, NULL, 0);
}

/* ---- lookups: candidates ---------------------------------------------------- */

static void next_candidate(struct semantic_op *op);

/* The candidate is gone or unusable: forget it here, so it is not searched again. */
static void drop_candidate(struct semantic_op *op, const struct vindex_hit *hit)
{
    stats_incr(op->p->st, STAT_semantic_stale);
    struct vindex *vx = index_get(op->p->s);
    if (vx != NULL)
        vindex_remove(vx, hit->key);
}

/*
 * The candidate passed the guards (and the verifier): a hit, unless the error
 * bound says otherwise - then a miss with a probe (compared once the fresh
 * answer is in), or, for an entry found wrong at this similarity before, the
 * next candidate.
 */
static void candidate_accept(struct semantic_op *op, const struct vindex_hit *hit)
{
    if (op->bview == NULL) {
        op_finish(op, &op->entry, hit->key, hit->similarity);
        return;
    }
    struct bound_decision d;
    bound_view_decide(op->bview, hit->similarity, &d);
    if (d.verdict == BOUND_SERVE) {
        op_finish(op, &op->entry, hit->key, hit->similarity);
        return;
    }
    if (d.verdict == BOUND_SKIP) {
        next_candidate(op);
        return;
    }
    char tenant[TENANT_ID_LEN + 1];
    tenant_hex(hit->tenant, tenant);
    op->probe = bound_probe_create(op->bview, &d, hit->similarity, &op->entry, tenant, hit->key);
    op_miss(op);
}

static void on_verified(void *arg, enum verify_answer a)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    op->vop = NULL;
    if (a == VERIFY_YES)
        candidate_accept(op, &op->hits[op->next - 1]);
    else
        next_candidate(op);
}

/* Both replies are in: decide about the candidate. */
static void examine_candidate(struct semantic_op *op)
{
    const struct vindex_hit *hit = &op->hits[op->next - 1];
    if (!op->entry_ok || !op->rec_ok) {
        /* Gone or unusable: forgotten here. Not read in time: kept, it may serve the next. An
         * entry of ours without its record yet is kept too: the entry is written first, the
         * record next (on a cluster, on another node than the add event), so a vector can be
         * searched before its record is readable; dropped, it would be lost for good. */
        if (!op->unread && !(op->entry_ok && op->rec_absent))
            drop_candidate(op, hit);
        next_candidate(op);
        return;
    }
    /* older than this request's max-age: not for it, the others' candidate still */
    if (op->max_age_ms >= 0 && entry_age_ms(&op->entry) > op->max_age_ms) {
        next_candidate(op);
        return;
    }
    if (op->rec_differs) { /* see recheck */
        stats_incr(op->p->st, STAT_semantic_stale);
        next_candidate(op);
        return;
    }
    int g = guard_check(op->text, strlen(op->text), op->cand_text, strlen(op->cand_text),
                        op->p->s->guards);
    if (g != GUARD__COUNT) {
        stats_incr(op->p->st, STAT_semantic_guard_rejects);
        stats_incr(op->p->st, STAT_GUARD_REJECTS(g));
        log_debug("semantic candidate (similarity %.4f) rejected by the %s guard",
                  (double)hit->similarity, guard_name((enum guard_kind)g));
        next_candidate(op);
        return;
    }
    const struct conf *c = op->p->s->conf;
    if (op->p->verify != NULL && hit->similarity < c->semantic_sure_threshold) {
        op->state = SOP_VERIFY;
        op->vop = verify_ask(op->p->verify, op->text, op->cand_text, on_verified, op);
        if (op->vop == NULL)
            next_candidate(op);
        return;
    }
    candidate_accept(op, hit);
}

static void on_entry(void *arg, enum store_status st, const char *val, size_t len)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    op->get_entry = NULL;
    pc_buf_reset(&op->entry_buf);
    op->entry_ok = false;
    op->unread |= st != STORE_OK;
    if (st == STORE_OK && val != NULL) {
        pc_buf_append(&op->entry_buf, val, len);
        struct entry *e = &op->entry;
        /* Its own partition, not the record's (which names it, and may be forged), says
         * whom it answers: one of another partition (model, parameters, system prompt,
         * tools, history...) or of none (stored before entries kept it, or by a request
         * never matched by meaning) is not a candidate. */
        op->entry_ok = entry_decode(op->entry_buf.data, op->entry_buf.len, e) == 0 &&
                       e->endpoint == op->endpoint && e->partition != NULL &&
                       memcmp(e->partition, op->partition, PC_SHA256_LEN) == 0;
    }
    if (++op->replies == op->expect)
        examine_candidate(op);
}

/* The cosine of the record's vector and the query's (unit length); -2 if it has no direction. */
static double record_similarity(const struct vrec *rec, const struct semantic_vec *q)
{
    double dot = 0, norm = 0;
    for (unsigned i = 0; i < rec->dim; i++) {
        dot += (double)rec->vec[i] * q->v[i];
        norm += (double)rec->vec[i] * rec->vec[i];
    }
    return norm > 0 && isfinite(dot) && isfinite(norm) ? dot / sqrt(norm) : -2;
}

/*
 * The index's vector of a candidate is a copy of its record's, which counts: one that is not
 * (an add event whose vector was another's: forged, or a writer's bug) made the entry a
 * candidate for questions it does not answer. The two similarities differ by the float16
 * rounding only (under 0.001 for unit vectors); past REC_SIM_SLACK the index takes the
 * record's vector and the candidate is not one (the next lookup finds it, or not, by that).
 */
static void recheck(struct semantic_op *op, const struct vrec *rec)
{
    const struct vindex_hit *hit = &op->hits[op->next - 1];
    double sim = record_similarity(rec, op->vec);
    op->rec_differs = fabs(sim - (double)hit->similarity) > REC_SIM_SLACK;
    if (!op->rec_differs)
        return;
    log_debug("semantic candidate: similarity %.4f in the index, %.4f with its record: the "
              "index takes the record's vector",
              (double)hit->similarity, sim);
    struct vindex *vx = index_get(op->p->s);
    if (vx != NULL && vindex_dim(vx) != (int)rec->dim)
        vx = NULL; /* made again for another dimension since the search */
    struct vindex_item it = {.expires_ms = rec->expires_ms};
    memcpy(it.key, hit->key, VINDEX_KEY_LEN);
    memcpy(it.tenant, hit->tenant, VINDEX_TENANT_LEN);
    if (vx != NULL && vindex_add(vx, rec->partition, &it, rec->vec) < 0)
        vindex_remove(vx, hit->key); /* not a vector the index takes: out, at least */
}

static void on_record(void *arg, enum store_status st, const char *val, size_t len)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    op->get_rec = NULL;
    op->rec_ok = false;
    op->rec_differs = false;
    op->unread |= st != STORE_OK;
    op->rec_absent = st == STORE_OK && val == NULL;
    PC_FREE(&op->cand_text);
    struct vrec rec;
    char err[128];
    size_t cap = op->vec != NULL ? (size_t)op->vec->dim : 0;
    float *scratch = pc_malloc((cap > 0 ? cap : 1) * sizeof(float));
    if (st == STORE_OK && val != NULL &&
        vrec_decode(val, len, &rec, scratch, cap, err, sizeof(err)) == 0 &&
        memcmp(rec.partition, op->partition, PC_SHA256_LEN) == 0 &&
        strcmp(rec.space, op->p->s->space) == 0 && rec.dim == cap &&
        text_whole(rec.text, rec.text_len)) {
        op->cand_text = pc_strndup(rec.text, rec.text_len);
        op->rec_ok = true;
        recheck(op, &rec);
    }
    free(scratch);
    if (++op->replies == op->expect)
        examine_candidate(op);
}

/* The error bound's reads for the candidate are in. */
static void on_bound_read(void *arg)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    if (++op->replies == op->expect)
        examine_candidate(op);
}

/* Fetch the next candidate's entry and record, or end with a miss. */
static void next_candidate(struct semantic_op *op)
{
    if (op->next >= op->nhits) {
        op_miss(op);
        return;
    }
    const struct vindex_hit *hit = &op->hits[op->next++];
    stats_incr(op->p->st, STAT_semantic_candidates);
    char tenant[TENANT_ID_LEN + 1], ekey[ENTRY_KEY_MAX], vkey[VSYNC_KEY_MAX];
    tenant_hex(hit->tenant, tenant);
    entry_key(tenant, hit->key, ekey);
    vsync_vector_key(hit->tenant, hit->key, vkey);
    op->state = SOP_FETCH;
    op->replies = 0;
    op->unread = false;
    op->expect = 2;
    op->get_entry = store_get(op->p->store, ekey, strlen(ekey), on_entry, op);
    op->get_rec = store_get(op->p->store, vkey, strlen(vkey), on_record, op);
    if (op->get_entry == NULL || op->get_rec == NULL) {
        store_cancel(&op->get_entry);
        store_cancel(&op->get_rec);
        op_miss(op); /* Redis went away: nothing more to try */
        return;
    }
    /* Last: a read that fails at once leaves the bound without counts (it withholds). */
    if (op->bview != NULL)
        op->expect += bound_view_fetch(op->bview, tenant, hit->key, on_bound_read, op);
}

/* ---- lookups: embedding and search -------------------------------------------- */

/* Pool thread: search with the op's vector. Touches only the op's own fields. */
static void work_search(void *arg)
{
    struct semantic_op *op = arg;
    struct semantic *s = op->p->s;
    struct vindex *vx = index_for(s, op->vec->dim, true);
    if (vx == NULL)
        return;
    /* Its own entry is not a candidate (the exact stage missed it: gone or too old). */
    struct vindex_hit hits[SEMANTIC_K + 1];
    int st;
    size_t n = vindex_lookup(vx, op->partition, op->vec->v, SEMANTIC_K + 1, (float)op->threshold,
                             pc_wall_ms(), hits, &st);
    struct vsync *y = sync_get(s);
    if (st != VINDEX_RESIDENT && y != NULL) {
        /* Not in memory: loaded now, waited for at most redis-timeout (a pool thread's wait). */
        unsigned char tenant[VINDEX_TENANT_LEN];
        tenant_bytes(op->tenant_id, tenant);
        st = vsync_load_wait(y, tenant, op->partition, s->conf->redis_timeout);
        if (st == VINDEX_RESIDENT)
            n = vindex_lookup(vx, op->partition, op->vec->v, SEMANTIC_K + 1, (float)op->threshold,
                              pc_wall_ms(), hits, &st);
        op->cold = st != VINDEX_RESIDENT;
    }
    /* A partition is one tenant's (its hash names the tenant): a vector of another tenant in
     * it was forged (a record and an add event naming another tenant's entry) and would serve
     * that tenant's answer. Never a candidate, and out of the index. */
    unsigned char tenant[VINDEX_TENANT_LEN];
    tenant_bytes(op->tenant_id, tenant);
    for (size_t i = 0; i < n && op->nhits < SEMANTIC_K; i++) {
        if (memcmp(hits[i].tenant, tenant, VINDEX_TENANT_LEN) != 0) {
            vindex_remove(vx, hits[i].key);
            op->foreign++;
        } else if (memcmp(hits[i].key, op->exact, PC_SHA256_LEN) != 0) {
            op->hits[op->nhits++] = hits[i];
        }
    }
}

static void done_search(void *arg, bool ran)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    op->in_pool = false;
    if (op->cancelled) {
        op_free(op);
        return;
    }
    if (op->cold)
        stats_incr(op->p->st, STAT_semantic_index_cold);
    if (op->foreign > 0)
        stats_add(op->p->st, STAT_semantic_sync_rejected, op->foreign);
    if (op->timed_out) /* the caller has had its miss */
        return;
    if (op->deadline != NULL)
        event_del(op->deadline);
    if (!ran || op->vec == NULL) {
        op_miss(op);
        return;
    }
    next_candidate(op);
}

/* embedder-timeout passed before the vector and the candidates came: a miss now. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    stats_incr(op->p->st, STAT_semantic_shed);
    embed_cancel(&op->ereq);
    if (!op->in_pool) {
        op_miss(op);
        return;
    }
    /* The pool job still holds the op: answer now, free when it comes back. */
    op->timed_out = true;
    struct semantic_result res = {0};
    semantic_fn *cb = op->cb;
    op->cancelled = true;
    cb(op->arg, &res);
}

static bool submit_search(struct semantic_op *op)
{
    op->in_pool = true;
    if (pool_submit(op->p->s->pool, op->p->pport, work_search, done_search, op) == 0)
        return true;
    op->in_pool = false;
    stats_incr(op->p->st, STAT_semantic_shed);
    return false;
}

static void on_vec(void *arg, const float *vec, int dim)
{
    struct semantic_op *op = arg;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    op->ereq = NULL;
    if (vec == NULL) {
        event_del(op->deadline);
        op_miss(op);
        return;
    }
    op->vec = vec_new(dim);
    memcpy(op->vec->v, vec, (size_t)dim * sizeof(float));
    if (!submit_search(op)) {
        event_del(op->deadline);
        op_miss(op);
    }
}

struct semantic_op *semantic_lookup(struct semantic_port *p, const struct semantic_query *q,
                                    semantic_fn *cb, void *arg)
{
    if (p == NULL)
        return NULL;
    PC_CHECK_OBJ(p, PORT_MAGIC);
    if (!text_whole(q->text, strlen(q->text)))
        return NULL; /* more than the comparison would see: exact only */
    if (embed_shut(p->eport, false)) {
        /* The embedder is sick: no client waits on it (the exact stage has run). */
        stats_incr(p->st, STAT_semantic_breaker_skips);
        return NULL;
    }
    struct semantic_op *op = pc_calloc(1, sizeof(*op));
    op->magic = SOP_MAGIC;
    op->p = p;
    op->cb = cb;
    op->arg = arg;
    op->state = SOP_EMBED;
    op->endpoint = q->endpoint;
    snprintf(op->tenant_id, sizeof(op->tenant_id), "%.*s", TENANT_ID_LEN, q->tenant_id);
    memcpy(op->exact, q->exact, PC_SHA256_LEN);
    memcpy(op->partition, q->partition, PC_SHA256_LEN);
    op->text = pc_strdup(q->text);
    op->max_age_ms = q->max_age_ms;
    op->threshold = q->threshold >= 0 ? q->threshold : semantic_default_threshold(p->s);
    op->bview = bound_view_create(p->bport, op->tenant_id, op->partition);
    stats_incr(p->st, STAT_semantic_lookups);
    op->deadline = event_new(p->base, -1, 0, on_deadline, op);
    if (op->deadline == NULL) {
        op_free(op);
        return NULL;
    }
    op->ereq = embed_submit(p->eport, op->text, strlen(op->text), false, on_vec, op);
    if (op->ereq == NULL) { /* the pool's queue is full (a breaker would have said so above) */
        stats_incr(p->st, STAT_semantic_shed);
        op_free(op);
        return NULL;
    }
    struct timeval tv = pc_timeval_ms(p->s->conf->embedder_timeout);
    event_add(op->deadline, &tv);
    return op;
}

void semantic_cancel(struct semantic_op **opp)
{
    struct semantic_op *op = *opp;
    if (op == NULL)
        return;
    *opp = NULL;
    PC_CHECK_OBJ(op, SOP_MAGIC);
    if (op->in_pool) {
        op->cancelled = true; /* freed when the job comes back */
        if (op->deadline != NULL)
            event_del(op->deadline);
        return;
    }
    op_free(op);
}

/* ---- puts ------------------------------------------------------------------- */

/*
 * The record's SET is answered: the vector goes in this process's index now, not before. Every
 * worker searches that index, and one whose candidate's record is not in Redis yet takes the
 * candidate for gone and drops it: the follower's add event, if it came first, was lost with
 * it, and the question missed until the partition was read again (seen under load: another
 * worker asked right after the answer was sent, before this one's SET was written). Failed or
 * timed out: not indexed here (Redis may hold it: a load, or the add event, brings it).
 */
static void on_record_stored(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct sadd *a = arg;
    PC_CHECK_OBJ(a, SADD_MAGIC);
    if (st == STORE_OK) {
        struct vindex *vx = index_for(a->s, a->vec->dim, true);
        if (vx != NULL) /* ignored unless its partition is in memory: a load would read it */
            vindex_add(vx, a->partition, &a->item, a->vec->v);
    }
    semantic_vec_free(&a->vec);
    a->magic = 0;
    free(a);
}

/* Write the record, tell the other instances, index it here once written (on_record_stored). */
static void put_write(struct semantic_port *p, const struct semantic_item *it,
                      const struct semantic_vec *vec)
{
    struct semantic *s = p->s;
    int64_t expires = it->created_ms + it->ttl_ms;
    size_t text_len = strlen(it->text); /* whole: text_whole (semantic_put) */
    struct vrec rec = {
        .dim = (unsigned)vec->dim,
        .created_ms = it->created_ms,
        .expires_ms = expires,
        .vec = vec->v,
        .text = it->text,
        .text_len = text_len,
    };
    snprintf(rec.space, sizeof(rec.space), "%s", s->space);
    memcpy(rec.partition, it->partition, PC_SHA256_LEN);
    struct vindex_item item = {.expires_ms = expires};
    memcpy(item.key, it->exact, PC_SHA256_LEN);
    tenant_bytes(it->tenant_id, item.tenant);
    struct sadd *a = pc_calloc(1, sizeof(*a));
    a->magic = SADD_MAGIC;
    a->s = s;
    memcpy(a->partition, it->partition, PC_SHA256_LEN);
    a->item = item;
    a->vec = vec_new(vec->dim);
    memcpy(a->vec->v, vec->v, (size_t)vec->dim * sizeof(float));
    struct pc_buf val = PC_BUF_INIT;
    if (vrec_encode(&rec, VREC_F16, &val) == 0 &&
        vsync_store_put(p->store, item.tenant, item.key, it->partition, val.data, val.len,
                        it->ttl_ms, expires, on_record_stored, a) == 0) {
        stats_incr(p->st, STAT_semantic_vectors_stored);
    } else {
        semantic_vec_free(&a->vec);
        free(a);
    }
    pc_buf_free(&val);
}

/* The put gets no vector: a vector of the entry it wrote over must not stay (nor its member:
 * the same exact key is in the same partition). */
static void put_without_vector(struct semantic_port *p, const struct semantic_item *it)
{
    if (it->replaces)
        forget(p, p->store, it->tenant_id, it->exact, it->partition);
}

static void sput_free(struct sput *sp)
{
    free(sp->text);
    semantic_vec_free(&sp->vec);
    sp->magic = 0;
    free(sp);
}

static void on_put_vec(void *arg, const float *vec, int dim)
{
    struct sput *sp = arg;
    PC_CHECK_OBJ(sp, SPUT_MAGIC);
    if (vec != NULL) {
        sp->vec = vec_new(dim);
        memcpy(sp->vec->v, vec, (size_t)dim * sizeof(float));
        put_write(sp->p, &sp->it, sp->vec);
    } else if (dim != EMBED_DROPPED) { /* dropped at shutdown: nothing is written then */
        put_without_vector(sp->p, &sp->it);
    }
    sput_free(sp);
}

void semantic_put(struct semantic_port *p, const struct semantic_item *it,
                  struct semantic_vec **vec)
{
    if (p == NULL || it->text == NULL) {
        semantic_vec_free(vec);
        return;
    }
    PC_CHECK_OBJ(p, PORT_MAGIC);
    /* Never matched by meaning: no vector. A vector from the lookup says it was whole. */
    if (*vec == NULL && !text_whole(it->text, strlen(it->text))) {
        put_without_vector(p, it);
        return;
    }
    if (*vec != NULL) {
        put_write(p, it, *vec);
        semantic_vec_free(vec);
        return;
    }
    /* No vector from a lookup (no-cache, or the lookup's embedding failed): embed it now. */
    if (embed_shut(p->eport, true)) {
        stats_incr(p->st, STAT_semantic_vectors_skipped);
        put_without_vector(p, it);
        return;
    }
    struct sput *sp = pc_calloc(1, sizeof(*sp));
    sp->magic = SPUT_MAGIC;
    sp->p = p;
    sp->it = *it;
    snprintf(sp->tenant_id, sizeof(sp->tenant_id), "%.*s", TENANT_ID_LEN, it->tenant_id);
    memcpy(sp->exact, it->exact, PC_SHA256_LEN);
    memcpy(sp->partition, it->partition, PC_SHA256_LEN);
    sp->text = pc_strdup(it->text);
    sp->it.tenant_id = sp->tenant_id;
    sp->it.exact = sp->exact;
    sp->it.partition = sp->partition;
    sp->it.text = sp->text;
    if (embed_submit(p->eport, sp->text, strlen(sp->text), true, on_put_vec, sp) == NULL) {
        put_without_vector(p, &sp->it);
        sput_free(sp);
    }
}
