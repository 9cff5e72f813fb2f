/*
 * pindex.c - the prefix index (see pc_pindex.h). Owns the sharded table of
 * link entries, each replica's count of held tokens, and the per-model
 * bytes-per-token calibration.
 *
 *   shard = h % NSHARDS; each shard an open-addressing table (linear probing,
 *   backward-shift deletion) of parallel arrays:
 *     key[slot]  tokens[slot]  mask[slot] (replicas holding it)
 *     stamp[slot * nrep + rep] (last use on rep)
 *
 *   record(rep, chain) ─▶ per link: insert/stamp, held[rep] += new tokens
 *                      ─▶ held[rep] > capacity ─▶ evict(rep): collect rep's
 *                         (stamp, key), oldest first, unset until below
 */
#include "pc_pindex.h"
#include "pc_util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define PINDEX_MAGIC  0x50494458u /* "PIDX" */
#define NSHARDS       64
#define SHARD_INITIAL 64
#define CPT_SLOTS     64
#define CPT_DEFAULT   4.0
#define CPT_MIN       1.0
#define CPT_MAX       16.0
#define CPT_WEIGHT    0.2 /* weight of a new observation in the running average */

struct shard {
    pthread_mutex_t mu;
    size_t cap; /* power of two */
    size_t n;
    uint64_t *key; /* 0: empty */
    uint32_t *tokens;
    uint64_t *mask;
    int64_t *stamp; /* cap x nrep; 0: not held */
};

struct cpt_slot {
    uint64_t model; /* FNV-1a of the name; 0: free (atomic) */
    uint64_t bits;  /* the double, as bits (atomic) */
};

struct pindex {
    unsigned magic;
    size_t nrep;
    int64_t capacity[PINDEX_MAX_REPLICAS];
    int64_t held[PINDEX_MAX_REPLICAS]; /* atomic */
    int evicting[PINDEX_MAX_REPLICAS]; /* atomic flag */
    pindex_sink_fn *sink;
    void *sink_arg;
    struct shard shards[NSHARDS];
    struct cpt_slot cpt[CPT_SLOTS];
};

/* An entry to evict: where it was seen and how old. */
struct victim {
    int64_t stamp;
    uint64_t key;
};

static struct shard *shard_of(struct pindex *px, uint64_t h)
{
    return &px->shards[(h >> 58) % NSHARDS]; /* top bits: the slot index uses the low ones */
}

static void shard_alloc(struct shard *s, size_t cap, size_t nrep)
{
    s->cap = cap;
    s->n = 0;
    s->key = pc_calloc(cap, sizeof(*s->key));
    s->tokens = pc_calloc(cap, sizeof(*s->tokens));
    s->mask = pc_calloc(cap, sizeof(*s->mask));
    s->stamp = pc_calloc(cap * nrep, sizeof(*s->stamp));
}

static void shard_release(struct shard *s)
{
    free(s->key);
    free(s->tokens);
    free(s->mask);
    free(s->stamp);
}

struct pindex *pindex_create(size_t nrep, const int64_t *capacity)
{
    if (nrep == 0 || nrep > PINDEX_MAX_REPLICAS)
        return NULL;
    struct pindex *px = pc_calloc(1, sizeof(*px));
    px->magic = PINDEX_MAGIC;
    px->nrep = nrep;
    for (size_t i = 0; i < nrep; i++)
        px->capacity[i] = capacity[i] > 0 ? capacity[i] : 1;
    for (size_t i = 0; i < NSHARDS; i++) {
        pthread_mutex_init(&px->shards[i].mu, NULL);
        shard_alloc(&px->shards[i], SHARD_INITIAL, nrep);
    }
    return px;
}

void pindex_destroy(struct pindex **pp)
{
    struct pindex *px = *pp;
    if (px == NULL)
        return;
    *pp = NULL;
    for (size_t i = 0; i < NSHARDS; i++) {
        shard_release(&px->shards[i]);
        pthread_mutex_destroy(&px->shards[i].mu);
    }
    px->magic = 0;
    free(px);
}

void pindex_set_sink(struct pindex *px, pindex_sink_fn *fn, void *arg)
{
    px->sink = fn;
    px->sink_arg = arg;
}

size_t pindex_replicas(const struct pindex *px)
{
    return px->nrep;
}

int64_t pindex_capacity(const struct pindex *px, size_t rep)
{
    return rep < px->nrep ? px->capacity[rep] : 0;
}

int64_t pindex_held(const struct pindex *px, size_t rep)
{
    return rep < px->nrep ? __atomic_load_n(&px->held[rep], __ATOMIC_RELAXED) : 0;
}

size_t pindex_entries(const struct pindex *px)
{
    size_t n = 0;
    for (size_t i = 0; i < NSHARDS; i++)
        n += __atomic_load_n(&px->shards[i].n, __ATOMIC_RELAXED);
    return n;
}

/* ---- one shard's table (caller holds its mutex) ------------------------------ */

static size_t slot_home(const struct shard *s, uint64_t h)
{
    return (size_t)(h * UINT64_C(0x9e3779b97f4a7c15) >> 20) & (s->cap - 1);
}

/* The slot holding h, or SIZE_MAX. */
static size_t slot_find(const struct shard *s, uint64_t h)
{
    for (size_t i = slot_home(s, h);; i = (i + 1) & (s->cap - 1)) {
        if (s->key[i] == h)
            return i;
        if (s->key[i] == 0)
            return SIZE_MAX;
    }
}

static void slot_move(struct shard *s, size_t to, size_t from, size_t nrep)
{
    s->key[to] = s->key[from];
    s->tokens[to] = s->tokens[from];
    s->mask[to] = s->mask[from];
    memcpy(&s->stamp[to * nrep], &s->stamp[from * nrep], nrep * sizeof(*s->stamp));
}

static void slot_clear(struct shard *s, size_t i, size_t nrep)
{
    s->key[i] = 0;
    s->tokens[i] = 0;
    s->mask[i] = 0;
    memset(&s->stamp[i * nrep], 0, nrep * sizeof(*s->stamp));
}

static void shard_grow(struct shard *s, size_t nrep);

/* The slot of h, inserted empty if absent. */
static size_t slot_get(struct shard *s, uint64_t h, uint32_t tokens, size_t nrep)
{
    size_t i = slot_find(s, h);
    if (i != SIZE_MAX)
        return i;
    if ((s->n + 1) * 10 > s->cap * 7)
        shard_grow(s, nrep);
    for (i = slot_home(s, h); s->key[i] != 0; i = (i + 1) & (s->cap - 1))
        ;
    s->key[i] = h;
    s->tokens[i] = tokens;
    s->mask[i] = 0;
    __atomic_store_n(&s->n, s->n + 1, __ATOMIC_RELAXED);
    return i;
}

static void shard_grow(struct shard *s, size_t nrep)
{
    struct shard old = *s;
    shard_alloc(s, old.cap * 2, nrep);
    for (size_t i = 0; i < old.cap; i++) {
        if (old.key[i] == 0)
            continue;
        size_t j = slot_home(s, old.key[i]);
        while (s->key[j] != 0)
            j = (j + 1) & (s->cap - 1);
        s->key[j] = old.key[i];
        s->tokens[j] = old.tokens[i];
        s->mask[j] = old.mask[i];
        memcpy(&s->stamp[j * nrep], &old.stamp[i * nrep], nrep * sizeof(*s->stamp));
        s->n++;
    }
    shard_release(&old);
}

/* Backward-shift deletion: later members of the probe run move into the gap. */
static void slot_delete(struct shard *s, size_t i, size_t nrep)
{
    size_t gap = i;
    for (size_t j = (i + 1) & (s->cap - 1); s->key[j] != 0; j = (j + 1) & (s->cap - 1)) {
        size_t home = slot_home(s, s->key[j]);
        /* j may fill the gap if its home is not in the cyclic range (gap, j]. */
        bool in_range = gap < j ? (home > gap && home <= j) : (home > gap || home <= j);
        if (in_range)
            continue;
        slot_move(s, gap, j, nrep);
        gap = j;
    }
    slot_clear(s, gap, nrep);
    __atomic_store_n(&s->n, s->n - 1, __ATOMIC_RELAXED);
}

/* ---- match ------------------------------------------------------------------- */

void pindex_match(struct pindex *px, const uint64_t *h, size_t n, int64_t fresh_since_ms,
                  struct pindex_match *m)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    memset(m, 0, sizeof(*m));
    uint64_t all = px->nrep == 64 ? UINT64_MAX : (UINT64_C(1) << px->nrep) - 1;
    uint64_t cand = all, fresh = fresh_since_ms > 0 ? all : 0;
    int64_t fresh_stamp = fresh_since_ms * PINDEX_DEPTH_STEPS;
    size_t i = 0;
    for (; i < n && cand != 0; i++) {
        struct shard *s = shard_of(px, h[i]);
        uint64_t held = 0, recent = 0;
        pthread_mutex_lock(&s->mu);
        size_t slot = slot_find(s, h[i]);
        if (slot != SIZE_MAX) {
            held = s->mask[slot];
            for (size_t r = 0; r < px->nrep; r++)
                if ((fresh >> r & 1) && s->stamp[slot * px->nrep + r] >= fresh_stamp)
                    recent |= UINT64_C(1) << r;
        }
        pthread_mutex_unlock(&s->mu);
        for (size_t r = 0; r < px->nrep; r++) {
            if ((cand >> r & 1) && !(held >> r & 1))
                m->links[r] = (uint32_t)i;
            if ((fresh >> r & 1) && !(recent >> r & 1))
                m->fresh[r] = (uint32_t)i;
        }
        cand &= held;
        fresh &= recent & held;
    }
    for (size_t r = 0; r < px->nrep; r++) {
        if (cand >> r & 1)
            m->links[r] = (uint32_t)i;
        if (fresh >> r & 1)
            m->fresh[r] = (uint32_t)i;
    }
}

/* ---- record and evict -------------------------------------------------------- */

static int victim_cmp(const void *a, const void *b)
{
    const struct victim *x = a, *y = b;
    return x->stamp < y->stamp ? -1 : x->stamp > y->stamp;
}

/* Every link rep holds, oldest first (*n set; caller frees). */
static struct victim *collect(struct pindex *px, size_t rep, size_t *n)
{
    size_t cap = 256, k = 0;
    struct victim *v = pc_malloc(cap * sizeof(*v));
    for (size_t si = 0; si < NSHARDS; si++) {
        struct shard *s = &px->shards[si];
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->cap; i++) {
            if (s->key[i] == 0 || !(s->mask[i] >> rep & 1))
                continue;
            if (k == cap)
                v = pc_realloc(v, (cap *= 2) * sizeof(*v));
            v[k++] = (struct victim){s->stamp[i * px->nrep + rep], s->key[i]};
        }
        pthread_mutex_unlock(&s->mu);
    }
    qsort(v, k, sizeof(*v), victim_cmp);
    *n = k;
    return v;
}

/* Drop rep's hold on one link if it was not used since the stamp seen. */
static void unhold(struct pindex *px, size_t rep, const struct victim *v)
{
    struct shard *s = shard_of(px, v->key);
    pthread_mutex_lock(&s->mu);
    size_t i = slot_find(s, v->key);
    if (i != SIZE_MAX && (s->mask[i] >> rep & 1) && s->stamp[i * px->nrep + rep] == v->stamp) {
        s->mask[i] &= ~(UINT64_C(1) << rep);
        s->stamp[i * px->nrep + rep] = 0;
        __atomic_fetch_sub(&px->held[rep], (int64_t)s->tokens[i], __ATOMIC_RELAXED);
        if (s->mask[i] == 0)
            slot_delete(s, i, px->nrep);
    }
    pthread_mutex_unlock(&s->mu);
}

/*
 * Bring rep below its capacity: down to 1/64 under it, so that eviction,
 * which looks at every link of the replica, runs once per that many tokens
 * recorded rather than on every record.
 */
static void evict(struct pindex *px, size_t rep)
{
    if (__atomic_exchange_n(&px->evicting[rep], 1, __ATOMIC_ACQUIRE))
        return; /* another thread is at it */
    int64_t target = px->capacity[rep] - px->capacity[rep] / 64;
    size_t n = 0;
    struct victim *v = collect(px, rep, &n);
    for (size_t i = 0; i < n && __atomic_load_n(&px->held[rep], __ATOMIC_RELAXED) > target; i++)
        unhold(px, rep, &v[i]);
    free(v);
    __atomic_store_n(&px->evicting[rep], 0, __ATOMIC_RELEASE);
}

static int64_t stamp_of(int64_t ms, size_t depth)
{
    return ms * PINDEX_DEPTH_STEPS + (PINDEX_DEPTH_STEPS - 1) -
           (int64_t)PC_MIN(depth, PINDEX_DEPTH_STEPS - 1);
}

/* Hold one link on rep with stamp st. */
static void hold(struct pindex *px, size_t rep, uint64_t h, uint32_t tokens, int64_t st)
{
    struct shard *s = shard_of(px, h);
    pthread_mutex_lock(&s->mu);
    size_t i = slot_get(s, h, tokens, px->nrep);
    if (!(s->mask[i] >> rep & 1)) {
        s->mask[i] |= UINT64_C(1) << rep;
        __atomic_fetch_add(&px->held[rep], (int64_t)s->tokens[i], __ATOMIC_RELAXED);
    }
    int64_t *cur = &s->stamp[i * px->nrep + rep];
    if (st > *cur)
        *cur = st;
    pthread_mutex_unlock(&s->mu);
}

void pindex_apply(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                  size_t n, size_t depth0, int64_t ms)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (rep >= px->nrep)
        return;
    for (size_t i = 0; i < n; i++)
        if (h[i] != 0)
            hold(px, rep, h[i], tokens[i], stamp_of(ms, depth0 + i));
    if (__atomic_load_n(&px->held[rep], __ATOMIC_RELAXED) > px->capacity[rep])
        evict(px, rep);
}

void pindex_record(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                   size_t n, int64_t ms)
{
    pindex_apply(px, rep, h, tokens, n, 0, ms);
    if (px->sink != NULL && n > 0)
        px->sink(px->sink_arg, rep, h, tokens, n, ms);
}

/* ---- bytes per token ----------------------------------------------------------- */

static struct cpt_slot *cpt_slot(struct pindex *px, const char *model, bool create)
{
    uint64_t key = pc_fnv1a(PC_FNV_SEED, model, strlen(model)) | 1; /* never 0 */
    for (size_t k = 0; k < CPT_SLOTS; k++) {
        struct cpt_slot *s = &px->cpt[(key + k) % CPT_SLOTS];
        uint64_t cur = __atomic_load_n(&s->model, __ATOMIC_ACQUIRE);
        if (cur == key)
            return s;
        if (cur != 0)
            continue;
        if (!create)
            return NULL;
        uint64_t expected = 0, bits;
        double d = CPT_DEFAULT;
        memcpy(&bits, &d, sizeof(bits));
        __atomic_store_n(&s->bits, bits, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&s->model, &expected, key, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) ||
            expected == key)
            return s;
    }
    return NULL; /* table full: more models than slots use the default */
}

static double slot_value(const struct cpt_slot *s)
{
    uint64_t bits = __atomic_load_n(&s->bits, __ATOMIC_RELAXED);
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

double pindex_cpt(struct pindex *px, const char *model)
{
    const struct cpt_slot *s = model != NULL ? cpt_slot(px, model, false) : NULL;
    return s != NULL ? slot_value(s) : CPT_DEFAULT;
}

void pindex_calibrate(struct pindex *px, const char *model, size_t bytes, int64_t tokens)
{
    if (model == NULL || tokens < 16 || bytes < 64)
        return; /* too small to say much */
    struct cpt_slot *s = cpt_slot(px, model, true);
    if (s == NULL)
        return;
    double seen = fmin(CPT_MAX, fmax(CPT_MIN, (double)bytes / (double)tokens));
    double d = (1.0 - CPT_WEIGHT) * slot_value(s) + CPT_WEIGHT * seen;
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    __atomic_store_n(&s->bits, bits, __ATOMIC_RELAXED);
}

uint32_t pindex_tokens(double cpt, size_t bytes)
{
    if (bytes == 0)
        return 0;
    double t = round((double)bytes / (cpt > 0 ? cpt : CPT_DEFAULT));
    return t < 1 ? 1 : t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
}
