/*
 * vindex.c - the process's vector index (see pc_vindex.h). Owns the
 * partition table, every partition's vectors and metadata, the FAISS indexes
 * of big partitions, the key table, and the background thread.
 *
 * Which index serves a partition: measured with `make bench-vindex
 * BENCH_ARGS=--compare` (bench/vindex-speed.c) on this project's shared
 * 2-core machine, dim 100, random unit vectors plus near-duplicates, one
 * search thread, p50 per search. Debian's libfaiss 1.7.3 is built for generic
 * x86-64 (no AVX), so FAISS computes distances with scalar code.
 *
 *   vectors  exact scan   FAISS       IVF SQ8     IVF float   HNSW32 ef64
 *            (this file)  IndexFlatIP (nprobe 32) (nprobe 32) (FAISS)
 *   1          0.07 us      0.6 us
 *   1024       8.5 us        40 us
 *   16384      120 us       540 us     200 us      115 us      200 us, 640 us/add
 *   32768      230 us      1490 us     220 us      145 us      775 us, 760 us/add
 *   100000    1200 us      3270 us     330 us      215 us      790 us, 2 ms/add
 *
 * So: exact search up to flat_max = 32768 live vectors at dim 100 (fewer for
 * bigger vectors: vindex_default_flat_max; at the builtin embedder's 356
 * dimensions the exact scan takes 104 us at 4096 vectors, 620 us at 16384 and
 * 1.4 ms at 32768, IVF SQ8 about 0.7 ms from 4096 to 32768), the crossover with IVF
 * SQ8; exact is never wrong), as a plain C scan: FAISS's IndexFlatIP costs
 * 0.6 us per call before it compares anything and its scalar inner product is
 * 4-5x slower than this file's (16 floats per step in four SSE sums). Above,
 * FAISS IVF: nlist the power of two nearest 4 sqrt(n) (k-means, 10 spherical
 * iterations, 32 points per list), nprobe 32, codes in SQ8 (100 bytes per
 * vector instead of 400, scans ~1.4x slower than float codes), candidates
 * re-ranked exactly against the float32 copy kept here (which exact mode and
 * rebuilds need anyway), so every reported similarity is exact. Recall of the
 * neighbours that matter to a cache (similarity >= 0.8) is 99.6-100%; of
 * arbitrary top-10 neighbours of random vectors (all nearly equidistant in
 * 100-d) only 33-83%. At 1M vectors in one partition: ~0.9 ms, 600 bytes per
 * vector, a 30-45 s build on the background thread.
 *
 * HNSW was measured and rejected for this build: 0.6-2 ms per add (a
 * million-vector rebuild would take over ten minutes), slower searches than
 * IVF beyond 16k, and no removal (tombstones and full rebuilds under TTL
 * churn). IVF adds in microseconds, removes natively (batched, see
 * part_purge) and builds in 1-2 s at 100k.
 *
 * Structure and locks:
 *
 *   shards[64] ─ mutex ─ chains of struct part (refcounted; freed at the last
 *                put once empty)
 *   part ─ rwlock ─ blocks of slots: metadata + float32 vector, a free list,
 *                   and in IVF mode the FAISS index whose labels are slots
 *   keys: key -> (part, slot), open addressing, under wlock
 *
 *   search:  shard mutex (find, ref++) -> part read lock -> shard mutex (put)
 *   change:  wlock -> shard mutex (find/create, ref++) -> part write lock
 *
 * wlock serialises every change, so the key table and the slot layout need no
 * other lock, and a thread holding wlock may read any partition without its
 * lock. It is never taken by a search. Builds (vindex_maintain) copy vectors
 * in chunks under wlock, train and fill the new FAISS index with no lock held,
 * and swap it in under wlock + the write lock, replaying the slots changed
 * meanwhile (each change marks its slot dirty while a build is running).
 *
 * Removal in IVF mode marks the slot dead (searches skip it); dead slots are
 * purged from FAISS in one batch when they reach an eighth of the partition.
 * OpenMP: every thread that calls FAISS first sets its own OpenMP thread count
 * to 1 (the proxy has its own threads), and OpenBLAS is held to one thread.
 */
#include "pc_vindex.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <faiss/c_api/Clustering_c.h>
#include <faiss/c_api/IndexFlat_c.h>
#include <faiss/c_api/IndexIVFFlat_c.h>
#include <faiss/c_api/IndexIVF_c.h>
#include <faiss/c_api/IndexScalarQuantizer_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/impl/AuxIndexStructures_c.h>

#include "pc_faiss_stop.h"

#define VINDEX_MAGIC   0x56494458u /* "VIDX" */
#define NSHARDS        64
#define BLOCK_SHIFT    10
#define BLOCK          (1u << BLOCK_SHIFT) /* slots per block once a partition is big */
#define BUILD_CHUNK    4096                /* slots copied per wlock hold during a build */
#define PURGE_MIN      256                 /* dead slots before a purge, at least */
#define OVERFETCH      8                   /* extra IVF candidates for SQ8 re-ranking */
#define SQ_MARGIN      0.05f               /* SQ8 similarity error bound used to stop early */
#define REGROW         4                   /* rebuild an IVF partition at this x its training */
#define TRAIN_PER_LIST 32                  /* k-means training points per IVF list */
#define NLIST_MAX      4096

/* The OpenMP runtime libfaiss is built with (declared here: no OpenMP flag or header needed). */
extern void omp_set_num_threads(int n);
/* Provided by OpenBLAS; absent with other BLAS libraries. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

enum slot_state { SLOT_FREE = 0, SLOT_LIVE, SLOT_DEAD };
enum part_mode { PART_FLAT = 0, PART_IVF };

struct vslot {
    unsigned char key[VINDEX_KEY_LEN];
    unsigned char tenant[VINDEX_TENANT_LEN];
    int64_t expires_ms;
    uint32_t gen;
    uint8_t state; /* enum slot_state */
    uint8_t dirty; /* changed since the running build's snapshot */
};

/*
 * The layout, which slot_at and vec_at rely on: slot i lives in
 * blocks[i >> BLOCK_SHIFT] at i & (BLOCK - 1). So block 0 holds cap0 slots,
 * a power of two no larger than BLOCK while it is the only block (small
 * partitions stay small: it grows by doubling and a compaction may shrink
 * it), and exactly BLOCK once there are more; later blocks hold BLOCK slots
 * and never move. layout_check() asserts this wherever the layout changes.
 */
struct vblock {
    struct vslot *slots;
    float *vecs;
};

struct part {
    struct part *next; /* shard chain (shard mutex) */
    unsigned char hash[VINDEX_PART_LEN];
    uint64_t h;
    unsigned refs;               /* shard mutex */
    atomic_size_t live;          /* changed under wlock + write lock; read anywhere */
    atomic_int state;            /* enum vindex_state: changed under wlock; read anywhere */
    atomic_int_fast64_t used_us; /* the last search (monotonic us): the LRU's order */
    unsigned char tenant[VINDEX_TENANT_LEN]; /* lazy: whose member list loads it */
    pthread_rwlock_t lock;

    /* Changed under wlock + write lock; read under the read lock or wlock. */
    enum part_mode mode;
    uint32_t nslots;     /* slots in use or free below this */
    uint32_t cap0;       /* capacity of block 0 */
    uint32_t nblocks;    /* allocated blocks */
    uint32_t blocks_cap; /* room in blocks[] */
    struct vblock *blocks;
    FaissIndex *ivf;
    size_t nlist;
    uint32_t ndead;

    /* Under wlock only. */
    uint32_t *freel;
    uint32_t nfree, free_cap;
    size_t trained_n; /* live vectors when the IVF was built */
    bool queued;      /* on the build queue, holding a reference */
    bool building;
    uint64_t wipes;  /* bumped when emptied wholesale: a running build is void */
    size_t retry_at; /* after a failed build: wait until the partition reaches this size */
    size_t bytes;    /* this partition's share of v->bytes */
    struct part *qnext;
};

struct shard {
    pthread_mutex_t mu;
    struct part **b;
    size_t nb, n;
};

struct kcell {
    struct part *p; /* NULL: empty */
    uint32_t slot;
    uint32_t tag; /* high hash bits, to skip most key comparisons */
};

struct vindex {
    unsigned magic;
    struct vindex_opts o;
    uint64_t seed;
    struct shard shards[NSHARDS];

    pthread_mutex_t wlock;
    struct kcell *keys; /* under wlock */
    size_t kcap, kn;
    uint32_t gen; /* under wlock */

    pthread_mutex_t build_mu; /* one build at a time */
    pthread_mutex_t mq;       /* build queue and the thread's state */
    pthread_cond_t mq_cond;
    struct part *qhead, *qtail;
    bool stop;
    atomic_bool stopping; /* set by vindex_destroy: a build in progress gives up */
    bool trim;            /* evictions freed memory: the thread gives it back to the system */
    bool thread_started;
    pthread_t thread;

    atomic_size_t nvec, nparts, nivf, bytes, nresident, nbuilding;
    atomic_uint_fast64_t builds, build_errors, loads, evictions, evicted_vectors;
    int64_t bytes_reported; /* under wlock: what opts.row's semantic_index_bytes holds */
};

/* --- small helpers ----------------------------------------------------------------- */

static void omp_single(void)
{
    static __thread bool done;
    if (!done) {
        omp_set_num_threads(1);
        done = true;
    }
}

/* Keys and partitions are SHA-256 outputs; a secret seed keeps their table positions
 * unpredictable to whoever chooses the requests. */
static uint64_t hash32(const struct vindex *v, const unsigned char *b)
{
    uint64_t x;
    memcpy(&x, b, sizeof(x));
    return pc_mix64(x ^ v->seed);
}

/*
 * Inner product, 16 floats per step in four independent 4-lane sums (GCC/Clang
 * vector extensions; SSE2 on any x86-64): four times the speed of a plain loop,
 * whose float additions the compiler may not reorder.
 */
typedef float v4f __attribute__((vector_size(16)));

static float dot(const float *a, const float *b, int d)
{
    v4f s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0, x0, x1, x2, x3, y0, y1, y2, y3;
    int i = 0;
    for (; i + 16 <= d; i += 16) {
        memcpy(&x0, a + i, 16);
        memcpy(&x1, a + i + 4, 16);
        memcpy(&x2, a + i + 8, 16);
        memcpy(&x3, a + i + 12, 16);
        memcpy(&y0, b + i, 16);
        memcpy(&y1, b + i + 4, 16);
        memcpy(&y2, b + i + 8, 16);
        memcpy(&y3, b + i + 12, 16);
        s0 += x0 * y0;
        s1 += x1 * y1;
        s2 += x2 * y2;
        s3 += x3 * y3;
    }
    for (; i + 4 <= d; i += 4) {
        memcpy(&x0, a + i, 16);
        memcpy(&y0, b + i, 16);
        s0 += x0 * y0;
    }
    v4f s = (s0 + s1) + (s2 + s3);
    float r = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < d; i++)
        r += a[i] * b[i];
    return r;
}

static void faiss_fail(const char *what, int rc)
{
    log_error("vindex: %s failed (%d): %s", what, rc, faiss_get_last_error());
}

/* FAISS's interrupt check on the background thread (pc_faiss_stop.h): the index is going away. */
static bool stopping(void *arg)
{
    const struct vindex *v = arg;
    return atomic_load_explicit(&v->stopping, memory_order_relaxed);
}

/* A build's FAISS call failed: an error, unless the build was stopped (*rc then says void). */
static void build_fail(struct vindex *v, const char *what, int *rc)
{
    if (stopping(v))
        *rc = 1;
    else
        faiss_fail(what, *rc);
}

static struct vslot *slot_at(const struct part *p, uint32_t i)
{
    return &p->blocks[i >> BLOCK_SHIFT].slots[i & (BLOCK - 1)];
}

static float *vec_at(const struct vindex *v, const struct part *p, uint32_t i)
{
    return p->blocks[i >> BLOCK_SHIFT].vecs + (size_t)(i & (BLOCK - 1)) * (size_t)v->o.dim;
}

static uint32_t part_capacity(const struct part *p)
{
    return p->nblocks <= 1 ? p->cap0 : p->nblocks * BLOCK;
}

/* The smallest power of two >= x (x <= BLOCK). */
static uint32_t pow2_ceil(uint32_t x)
{
    uint32_t c = 1;
    while (c < x)
        c *= 2;
    return c;
}

/*
 * Abort if the block layout (see struct vblock) is broken: a slot lookup
 * would then reach past blocks[] or into the wrong block, corrupting the heap
 * silently. O(1); called after every change of the layout.
 */
static void layout_check(const struct part *p)
{
    bool ok = p->nblocks <= p->blocks_cap && p->nslots <= part_capacity(p) &&
              (p->nblocks == 0 ? p->cap0 == 0
                               : (p->cap0 & (p->cap0 - 1)) == 0 && p->cap0 <= BLOCK &&
                                     (p->nblocks == 1 || p->cap0 == BLOCK));
    if (!ok) {
        log_error("vindex: broken block layout: %u blocks (room %u), block 0 of %u, %u slots",
                  p->nblocks, p->blocks_cap, p->cap0, p->nslots);
        abort();
    }
}

static bool expired(const struct vslot *s, int64_t now_ms)
{
    return s->expires_ms != 0 && s->expires_ms <= now_ms;
}

/* --- memory accounting (under wlock) -------------------------------------------------- */

static size_t ivf_bytes(const struct vindex *v, const struct part *p)
{
    if (p->ivf == NULL)
        return 0;
    size_t d = (size_t)v->o.dim, code = v->o.ivf_flat ? 4 * d : d;
    return p->nlist * d * 4 + (size_t)faiss_Index_ntotal(p->ivf) * (code + 8);
}

static void part_account(struct vindex *v, struct part *p)
{
    size_t per = sizeof(struct vslot) + (size_t)v->o.dim * sizeof(float);
    size_t b = sizeof(*p) + (size_t)part_capacity(p) * per +
               (size_t)p->blocks_cap * sizeof(struct vblock) + (size_t)p->free_cap * 4 +
               ivf_bytes(v, p);
    atomic_fetch_add(&v->bytes, b - p->bytes);
    p->bytes = b;
}

/* --- partitions and their table -------------------------------------------------------- */

static struct shard *shard_of(struct vindex *v, uint64_t h)
{
    return &v->shards[h & (NSHARDS - 1)];
}

static struct part **shard_slot(struct shard *sh, uint64_t h)
{
    return &sh->b[(h >> 6) & (sh->nb - 1)];
}

static void shard_grow(struct shard *sh)
{
    size_t onb = sh->nb;
    struct part **ob = sh->b;
    sh->nb = onb ? onb * 2 : 16;
    sh->b = pc_calloc(sh->nb, sizeof(*sh->b));
    for (size_t i = 0; i < onb; i++) {
        for (struct part *p = ob[i], *next; p != NULL; p = next) {
            next = p->next;
            struct part **head = shard_slot(sh, p->h);
            p->next = *head;
            *head = p;
        }
    }
    free(ob);
}

static struct part *part_new(struct vindex *v, const unsigned char *hash, uint64_t h)
{
    struct part *p = pc_calloc(1, sizeof(*p));
    memcpy(p->hash, hash, VINDEX_PART_LEN);
    p->h = h;
    atomic_init(&p->live, 0);
    /* Without a budget every partition is simply there; with one, it is until loaded. */
    atomic_init(&p->state, v->o.lazy ? VINDEX_COLD : VINDEX_RESIDENT);
    atomic_init(&p->used_us, (int_fast64_t)pc_mono_us());
    if (!v->o.lazy)
        atomic_fetch_add(&v->nresident, 1);
    /* Writer-preferring: a stream of searches must not starve an add (which holds wlock). */
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&p->lock, &a);
    pthread_rwlockattr_destroy(&a);
    atomic_fetch_add(&v->nparts, 1);
    return p;
}

static void part_release_storage(struct vindex *v, struct part *p)
{
    for (uint32_t b = 0; b < p->nblocks; b++) {
        free(p->blocks[b].slots);
        free(p->blocks[b].vecs);
    }
    PC_FREE(&p->blocks);
    p->nblocks = p->blocks_cap = p->cap0 = p->nslots = 0;
    if (p->ivf != NULL) {
        faiss_Index_free(p->ivf);
        p->ivf = NULL;
        atomic_fetch_sub(&v->nivf, 1);
    }
    PC_FREE(&p->freel);
    p->nfree = p->free_cap = 0;
    p->ndead = 0;
    p->mode = PART_FLAT;
}

static void part_free(struct vindex *v, struct part *p)
{
    part_release_storage(v, p);
    atomic_fetch_sub(&v->bytes, p->bytes);
    atomic_fetch_sub(&v->nparts, 1);
    if (atomic_load(&p->state) == VINDEX_RESIDENT)
        atomic_fetch_sub(&v->nresident, 1);
    pthread_rwlock_destroy(&p->lock);
    free(p);
}

/* The partition with this hash, with a reference; created if create (else NULL if absent). */
static struct part *part_get(struct vindex *v, const unsigned char *hash, bool create)
{
    uint64_t h = hash32(v, hash);
    struct shard *sh = shard_of(v, h);
    pthread_mutex_lock(&sh->mu);
    struct part *p = NULL;
    if (sh->nb > 0)
        for (p = *shard_slot(sh, h); p != NULL; p = p->next)
            if (p->h == h && memcmp(p->hash, hash, VINDEX_PART_LEN) == 0)
                break;
    if (p == NULL && create) {
        if (sh->n >= sh->nb)
            shard_grow(sh);
        p = part_new(v, hash, h);
        struct part **head = shard_slot(sh, h);
        p->next = *head;
        *head = p;
        sh->n++;
    }
    if (p != NULL)
        p->refs++;
    pthread_mutex_unlock(&sh->mu);
    return p;
}

/* Another reference to a partition the caller already holds (or reaches under wlock). */
static void part_ref(struct vindex *v, struct part *p)
{
    struct shard *sh = shard_of(v, p->h);
    pthread_mutex_lock(&sh->mu);
    p->refs++;
    pthread_mutex_unlock(&sh->mu);
}

/* Drop a reference; the last one frees an empty partition. *pp is NULLed. */
static void part_put(struct vindex *v, struct part **pp)
{
    struct part *p = *pp;
    *pp = NULL;
    if (p == NULL)
        return;
    struct shard *sh = shard_of(v, p->h);
    pthread_mutex_lock(&sh->mu);
    /* A loaded partition stays, empty or not, until evicted: "nothing there" is worth knowing. */
    bool dead = --p->refs == 0 && atomic_load(&p->live) == 0 &&
                (!v->o.lazy || atomic_load(&p->state) == VINDEX_COLD);
    if (dead) {
        struct part **pp2 = shard_slot(sh, p->h);
        while (*pp2 != p)
            pp2 = &(*pp2)->next;
        *pp2 = p->next;
        sh->n--;
    }
    pthread_mutex_unlock(&sh->mu);
    if (dead)
        part_free(v, p);
}

/* Every partition of shard i, each with a reference (the caller puts them); *n set. */
static struct part **shard_collect(struct vindex *v, size_t i, size_t *n)
{
    struct shard *sh = &v->shards[i];
    pthread_mutex_lock(&sh->mu);
    struct part **all = pc_malloc((sh->n + 1) * sizeof(*all));
    *n = 0;
    for (size_t b = 0; b < sh->nb; b++)
        for (struct part *p = sh->b[b]; p != NULL; p = p->next) {
            p->refs++;
            all[(*n)++] = p;
        }
    pthread_mutex_unlock(&sh->mu);
    return all;
}

/* --- the key table (under wlock) ------------------------------------------------------- */

static struct vslot *cell_slot(const struct kcell *c)
{
    return slot_at(c->p, c->slot);
}

/* Index of key's cell, or SIZE_MAX. */
static size_t keys_find(const struct vindex *v, const unsigned char *key)
{
    if (v->kcap == 0)
        return SIZE_MAX;
    uint64_t h = hash32(v, key);
    size_t mask = v->kcap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const struct kcell *c = &v->keys[i];
        if (c->p == NULL)
            return SIZE_MAX;
        if (c->tag == (uint32_t)(h >> 32) && memcmp(cell_slot(c)->key, key, VINDEX_KEY_LEN) == 0)
            return i;
    }
}

static void keys_place(struct vindex *v, uint64_t h, struct part *p, uint32_t slot)
{
    size_t mask = v->kcap - 1, i = h & mask;
    while (v->keys[i].p != NULL)
        i = (i + 1) & mask;
    v->keys[i] = (struct kcell){p, slot, (uint32_t)(h >> 32)};
}

static void keys_grow(struct vindex *v)
{
    struct kcell *old = v->keys;
    size_t ocap = v->kcap;
    v->kcap = ocap ? ocap * 2 : 64;
    v->keys = pc_calloc(v->kcap, sizeof(*v->keys));
    for (size_t i = 0; i < ocap; i++)
        if (old[i].p != NULL)
            keys_place(v, hash32(v, cell_slot(&old[i])->key), old[i].p, old[i].slot);
    free(old);
    atomic_fetch_add(&v->bytes, (v->kcap - ocap) * sizeof(*v->keys));
}

/* key (already in slot of p) must not be in the table yet. */
static void keys_insert(struct vindex *v, struct part *p, uint32_t slot)
{
    if ((v->kn + 1) * 4 > v->kcap * 3)
        keys_grow(v);
    keys_place(v, hash32(v, slot_at(p, slot)->key), p, slot);
    v->kn++;
}

/* Backward-shift deletion: no tombstones, probes stay short. */
static void keys_erase_at(struct vindex *v, size_t i)
{
    size_t mask = v->kcap - 1;
    v->keys[i].p = NULL;
    for (size_t j = (i + 1) & mask; v->keys[j].p != NULL; j = (j + 1) & mask) {
        size_t home = hash32(v, cell_slot(&v->keys[j])->key) & mask;
        /* Move j back to i if its home is not in the (cyclic) range (i, j]. */
        if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) {
            v->keys[i] = v->keys[j];
            v->keys[j].p = NULL;
            i = j;
        }
    }
    v->kn--;
}

static void keys_erase(struct vindex *v, const unsigned char *key)
{
    size_t i = keys_find(v, key);
    if (i != SIZE_MAX)
        keys_erase_at(v, i);
}

/* --- slots (under wlock + the partition's write lock) ---------------------------------- */

static void part_grow(struct vindex *v, struct part *p)
{
    size_t d = (size_t)v->o.dim;
    if (p->nblocks == 0 || (p->nblocks == 1 && p->cap0 < BLOCK)) {
        uint32_t cap = p->cap0 ? PC_MIN(p->cap0 * 2, BLOCK) : 1;
        if (p->nblocks == 0) {
            p->blocks_cap = 1;
            p->blocks = pc_calloc(1, sizeof(*p->blocks));
            p->nblocks = 1;
        }
        p->blocks[0].slots = pc_realloc(p->blocks[0].slots, cap * sizeof(struct vslot));
        p->blocks[0].vecs = pc_realloc(p->blocks[0].vecs, cap * d * sizeof(float));
        p->cap0 = cap;
        layout_check(p);
        return;
    }
    if (p->nblocks == p->blocks_cap) {
        p->blocks_cap *= 2;
        p->blocks = pc_realloc(p->blocks, p->blocks_cap * sizeof(*p->blocks));
    }
    p->blocks[p->nblocks].slots = pc_malloc(BLOCK * sizeof(struct vslot));
    p->blocks[p->nblocks].vecs = pc_malloc(BLOCK * d * sizeof(float));
    p->nblocks++;
    layout_check(p);
}

static void free_push(struct part *p, uint32_t slot)
{
    if (p->nfree == p->free_cap) {
        p->free_cap = p->free_cap ? p->free_cap * 2 : 4;
        p->freel = pc_realloc(p->freel, p->free_cap * sizeof(*p->freel));
    }
    p->freel[p->nfree++] = slot;
}

static uint32_t slot_alloc(struct vindex *v, struct part *p)
{
    if (p->nfree > 0)
        return p->freel[--p->nfree];
    if (p->nslots == part_capacity(p))
        part_grow(v, p);
    return p->nslots++;
}

static int ivf_add(struct part *p, uint32_t slot, const float *vec)
{
    idx_t id = slot;
    omp_single();
    int rc = faiss_Index_add_with_ids(p->ivf, 1, vec, &id);
    if (rc != 0)
        faiss_fail("IVF add", rc);
    return rc;
}

/* Store a new live vector; its slot, or -1 (FAISS failed; nothing changed). */
static int64_t slot_store(struct vindex *v, struct part *p, const struct vindex_item *it,
                          const float *vec)
{
    uint32_t slot = slot_alloc(v, p);
    struct vslot *s = slot_at(p, slot);
    memcpy(vec_at(v, p, slot), vec, (size_t)v->o.dim * sizeof(float));
    if (p->mode == PART_IVF && ivf_add(p, slot, vec) != 0) {
        s->state = SLOT_FREE;
        free_push(p, slot);
        return -1;
    }
    memcpy(s->key, it->key, VINDEX_KEY_LEN);
    memcpy(s->tenant, it->tenant, VINDEX_TENANT_LEN);
    s->expires_ms = it->expires_ms;
    s->gen = v->gen;
    s->state = SLOT_LIVE;
    s->dirty = p->building;
    atomic_fetch_add(&p->live, 1);
    atomic_fetch_add(&v->nvec, 1);
    return slot;
}

/* Take a live slot out (its key stays in the table: the caller erases it). */
static void slot_kill(struct vindex *v, struct part *p, uint32_t slot)
{
    struct vslot *s = slot_at(p, slot);
    s->dirty |= p->building;
    if (p->mode == PART_IVF) {
        s->state = SLOT_DEAD;
        p->ndead++;
    } else {
        s->state = SLOT_FREE;
        free_push(p, slot);
    }
    atomic_fetch_sub(&p->live, 1);
    atomic_fetch_sub(&v->nvec, 1);
}

/* Remove the dead slots from FAISS in one batch (one pass over the index). */
static void part_purge(struct part *p)
{
    idx_t *ids = pc_malloc(p->ndead * sizeof(*ids));
    size_t n = 0;
    for (uint32_t i = 0; i < p->nslots; i++)
        if (slot_at(p, i)->state == SLOT_DEAD)
            ids[n++] = i;
    FaissIDSelectorBatch *sel = NULL;
    omp_single();
    int rc = faiss_IDSelectorBatch_new(&sel, n, ids);
    if (rc == 0)
        rc = faiss_Index_remove_ids(p->ivf, (FaissIDSelector *)sel, NULL);
    if (sel != NULL)
        faiss_IDSelector_free((FaissIDSelector *)sel);
    if (rc != 0) {
        faiss_fail("IVF purge", rc); /* dead slots stay dead (skipped); retried next time */
    } else {
        for (size_t j = 0; j < n; j++) {
            slot_at(p, (uint32_t)ids[j])->state = SLOT_FREE;
            free_push(p, (uint32_t)ids[j]);
        }
        p->ndead = 0;
    }
    free(ids);
}

/* Back to exact mode: the IVF's content is all in the slots already. */
static void part_to_flat(struct vindex *v, struct part *p)
{
    faiss_Index_free(p->ivf);
    p->ivf = NULL;
    p->mode = PART_FLAT;
    atomic_fetch_sub(&v->nivf, 1);
    for (uint32_t i = 0; i < p->nslots; i++) {
        struct vslot *s = slot_at(p, i);
        if (s->state == SLOT_DEAD) {
            s->state = SLOT_FREE;
            free_push(p, i);
        }
    }
    p->ndead = 0;
}

/* Move live slots down over the free ones (exact mode only), updating the key table. */
static void part_compact(struct vindex *v, struct part *p)
{
    uint32_t lo = 0, hi = p->nslots;
    size_t d = (size_t)v->o.dim;
    for (;;) {
        while (lo < hi && slot_at(p, lo)->state == SLOT_LIVE)
            lo++;
        while (hi > lo && slot_at(p, hi - 1)->state != SLOT_LIVE)
            hi--;
        if (lo + 1 >= hi)
            break;
        hi--;
        *slot_at(p, lo) = *slot_at(p, hi);
        memcpy(vec_at(v, p, lo), vec_at(v, p, hi), d * sizeof(float));
        slot_at(p, hi)->state = SLOT_FREE;
        v->keys[keys_find(v, slot_at(p, lo)->key)].slot = lo;
    }
    p->nslots = (uint32_t)atomic_load(&p->live);
    p->nfree = 0;
    /* Give back whole blocks past the end, and most of block 0 if it is alone and sparse
     * (keeping its capacity a power of two: see struct vblock). */
    uint32_t need = p->nslots == 0 ? 0 : ((p->nslots - 1) >> BLOCK_SHIFT) + 1;
    while (p->nblocks > PC_MAX(need, 1u)) {
        p->nblocks--;
        free(p->blocks[p->nblocks].slots);
        free(p->blocks[p->nblocks].vecs);
    }
    if (p->nblocks == 1 && p->nslots * 4 <= p->cap0 && p->cap0 > 1) {
        p->cap0 = pow2_ceil(PC_MAX(p->nslots * 2, 1u));
        p->blocks[0].slots = pc_realloc(p->blocks[0].slots, p->cap0 * sizeof(struct vslot));
        p->blocks[0].vecs = pc_realloc(p->blocks[0].vecs, p->cap0 * d * sizeof(float));
    }
    layout_check(p);
}

/*
 * After removals: purge dead IVF slots when they pile up, fall back to exact
 * search when an IVF partition has shrunk well below flat_max, and compact an
 * exact partition that is mostly holes. Nothing moves while a build runs.
 */
static void part_tidy(struct vindex *v, struct part *p)
{
    size_t live = atomic_load(&p->live);
    if (p->mode == PART_IVF && p->ndead > PC_MAX((size_t)PURGE_MIN, live / 8))
        part_purge(p);
    if (!p->building && p->mode == PART_IVF && live < v->o.flat_max / 2)
        part_to_flat(v, p);
    if (!p->building && p->mode == PART_FLAT && p->nslots >= 16 && live * 2 < p->nslots)
        part_compact(v, p);
    part_account(v, p);
}

/* --- the build queue ------------------------------------------------------------------- */

static size_t choose_nlist(size_t n);

/* An exact partition past flat_max, or an IVF one grown enough for more lists. */
static bool build_wanted(const struct vindex *v, const struct part *p)
{
    size_t live = atomic_load(&p->live);
    if (p->mode == PART_FLAT)
        return live > v->o.flat_max;
    return live > REGROW * p->trained_n && choose_nlist(live) > p->nlist;
}

/* Under wlock, after an add: queue a build if the partition has outgrown its index. */
static void maybe_queue(struct vindex *v, struct part *p)
{
    if (!build_wanted(v, p) || p->queued || p->building || atomic_load(&p->live) < p->retry_at)
        return;
    p->queued = true;
    part_ref(v, p);
    pthread_mutex_lock(&v->mq);
    p->qnext = NULL;
    if (v->qtail != NULL)
        v->qtail->qnext = p;
    else
        v->qhead = p;
    v->qtail = p;
    pthread_cond_signal(&v->mq_cond);
    pthread_mutex_unlock(&v->mq);
}

static struct part *queue_pop(struct vindex *v)
{
    pthread_mutex_lock(&v->mq);
    struct part *p = v->qhead;
    if (p != NULL) {
        v->qhead = p->qnext;
        if (v->qhead == NULL)
            v->qtail = NULL;
    }
    pthread_mutex_unlock(&v->mq);
    return p;
}

/* --- public: create, destroy --------------------------------------------------------- */

static void *maint_main(void *arg);

/*
 * The crossover of the exact scan and IVF moves with the dimension: 32768
 * vectors at dim 100, about 16384 at dim 356 (the builtin embedder's), both
 * measured with `make bench-vindex BENCH_ARGS="--compare --dim D"`. Between
 * and around them, 32768 x sqrt(100 / dim) follows both within the noise of
 * this shared machine.
 */
size_t vindex_default_flat_max(int dim)
{
    double n = VINDEX_FLAT_MAX * sqrt(100.0 / (double)(dim > 0 ? dim : 1));
    return (size_t)PC_MAX(4096.0, PC_MIN(65536.0, n));
}

struct vindex *vindex_create(const struct vindex_opts *o)
{
    if (o == NULL || o->dim < 1 || o->dim > VINDEX_DIM_MAX) {
        log_error("vindex: dimension must be 1..%d", VINDEX_DIM_MAX);
        return NULL;
    }
    struct vindex *v = pc_calloc(1, sizeof(*v));
    v->magic = VINDEX_MAGIC;
    v->o = *o;
    if (v->o.flat_max == 0)
        v->o.flat_max = vindex_default_flat_max(v->o.dim);
    if (v->o.nprobe == 0)
        v->o.nprobe = VINDEX_NPROBE;
    if (v->o.sweep_ms <= 0)
        v->o.sweep_ms = VINDEX_SWEEP_MS;
    v->seed = pc_seed64(v);
    for (size_t i = 0; i < NSHARDS; i++)
        pthread_mutex_init(&v->shards[i].mu, NULL);
    pthread_mutex_init(&v->wlock, NULL);
    pthread_mutex_init(&v->build_mu, NULL);
    pthread_mutex_init(&v->mq, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&v->mq_cond, &ca);
    pthread_condattr_destroy(&ca);
    faiss_stop_install(); /* before any thread of ours calls FAISS */
    v->gen = 1;
    if (openblas_set_num_threads != NULL)
        openblas_set_num_threads(1); /* k-means runs on the builder's thread only */
    if (v->o.background) {
        int rc = pthread_create(&v->thread, NULL, maint_main, v);
        if (rc != 0) {
            log_error("vindex: cannot start its thread: %s", strerror(rc));
            vindex_destroy(&v);
            return NULL;
        }
        v->thread_started = true;
    }
    return v;
}

void vindex_destroy(struct vindex **vp)
{
    struct vindex *v = *vp;
    *vp = NULL;
    if (v == NULL)
        return;
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    atomic_store(&v->stopping, true); /* a build in progress gives up (between FAISS blocks) */
    if (v->thread_started) {
        pthread_mutex_lock(&v->mq);
        v->stop = true;
        pthread_cond_signal(&v->mq_cond);
        pthread_mutex_unlock(&v->mq);
        pthread_join(v->thread, NULL);
    }
    for (size_t i = 0; i < NSHARDS; i++) {
        struct shard *sh = &v->shards[i];
        for (size_t b = 0; b < sh->nb; b++)
            for (struct part *p = sh->b[b], *next; p != NULL; p = next) {
                next = p->next;
                part_free(v, p);
            }
        free(sh->b);
        pthread_mutex_destroy(&sh->mu);
    }
    free(v->keys);
    pthread_mutex_destroy(&v->wlock);
    pthread_mutex_destroy(&v->build_mu);
    pthread_mutex_destroy(&v->mq);
    pthread_cond_destroy(&v->mq_cond);
    v->magic = 0;
    free(v);
}

int vindex_dim(const struct vindex *v)
{
    return v->o.dim;
}

/* --- public: changes --------------------------------------------------------------------- */

/*
 * vec scaled to unit length into out; false if it is zero or not finite, or so short that
 * its scale overflows a float (a vector of subnormal components, which a float32 record read
 * from Redis can hold): scaled, it was inf and NaN, and a NaN similarity passed every threshold.
 */
static bool normalise(const float *vec, float *out, int d)
{
    double n = 0;
    for (int i = 0; i < d; i++)
        n += (double)vec[i] * vec[i];
    if (!(n > 0) || !isfinite(n))
        return false;
    float inv = (float)(1.0 / sqrt(n));
    if (!isfinite(inv))
        return false;
    for (int i = 0; i < d; i++)
        out[i] = vec[i] * inv;
    return true;
}

/* Same key, same partition: refresh in place when the vector is unchanged or the slot can
 * be overwritten (exact mode); an IVF slot is replaced by a new one instead. */
static int replace(struct vindex *v, struct part *p, size_t cell, const struct vindex_item *it,
                   const float *vec)
{
    uint32_t slot = v->keys[cell].slot;
    struct vslot *s = slot_at(p, slot);
    size_t vb = (size_t)v->o.dim * sizeof(float);
    bool same = memcmp(vec_at(v, p, slot), vec, vb) == 0;
    pthread_rwlock_wrlock(&p->lock);
    if (same || p->mode == PART_FLAT) {
        memcpy(vec_at(v, p, slot), vec, vb);
        memcpy(s->tenant, it->tenant, VINDEX_TENANT_LEN);
        s->expires_ms = it->expires_ms;
        s->gen = v->gen;
        s->dirty |= p->building && !same;
        pthread_rwlock_unlock(&p->lock);
        return 0;
    }
    int64_t ns = slot_store(v, p, it, vec);
    if (ns >= 0) {
        slot_kill(v, p, slot);
        v->keys[cell].slot = (uint32_t)ns;
        part_tidy(v, p);
    }
    pthread_rwlock_unlock(&p->lock);
    return ns >= 0 ? 0 : -1;
}

/*
 * Remove the key at cell from its partition and the table (under wlock). The
 * reference keeps the partition alive while it is changed: once its last
 * vector is gone, a search finishing meanwhile would free it.
 */
static void remove_cell(struct vindex *v, size_t cell)
{
    struct part *p = v->keys[cell].p;
    uint32_t slot = v->keys[cell].slot;
    part_ref(v, p);
    pthread_rwlock_wrlock(&p->lock);
    slot_kill(v, p, slot);
    keys_erase_at(v, cell);
    part_tidy(v, p);
    pthread_rwlock_unlock(&p->lock);
    part_put(v, &p);
}

static void part_evict(struct vindex *v, struct part *p);

/* Under wlock: whether p takes vectors now (lazy: only while loading or loaded). */
static bool part_open(const struct part *p)
{
    int st = atomic_load(&p->state);
    return st == VINDEX_RESIDENT || st == VINDEX_LOADING;
}

/* Under wlock: p's state becomes st (the count of loaded partitions follows). */
static void set_state(struct vindex *v, struct part *p, int st)
{
    int old = atomic_exchange(&p->state, st);
    if (old == VINDEX_RESIDENT && st != VINDEX_RESIDENT)
        atomic_fetch_sub(&v->nresident, 1);
    else if (old != VINDEX_RESIDENT && st == VINDEX_RESIDENT)
        atomic_fetch_add(&v->nresident, 1);
}

/* Under wlock: opts.row's semantic_index_bytes follows v->bytes. */
static void report_bytes(struct vindex *v)
{
    int64_t now = (int64_t)atomic_load(&v->bytes);
    if (v->o.row != NULL && now != v->bytes_reported)
        stats_add(v->o.row, STAT_semantic_index_bytes, now - v->bytes_reported);
    v->bytes_reported = now;
}

static int victim_cmp(const void *a, const void *b)
{
    int64_t x = atomic_load(&(*(struct part *const *)a)->used_us);
    int64_t y = atomic_load(&(*(struct part *const *)b)->used_us);
    return x < y ? -1 : x > y;
}

/*
 * Under wlock: past opts.max_bytes, drop the least recently searched loaded
 * partitions until the index is 1/32 below it (so that evictions come in
 * small batches, each one sort of the partitions: with an eighth, 100k
 * vectors over 1000 partitions under a Zipf workload needed a load for more
 * of the lookups). Partitions being loaded stay.
 */
static void evict_over_budget(struct vindex *v)
{
    size_t max = v->o.max_bytes;
    if (max == 0 || atomic_load(&v->bytes) <= max)
        return;
    size_t cap = 256, n = 0;
    struct part **all = pc_malloc(cap * sizeof(*all));
    for (size_t i = 0; i < NSHARDS; i++) {
        size_t m;
        struct part **sh = shard_collect(v, i, &m);
        for (size_t j = 0; j < m; j++) {
            if (atomic_load(&sh[j]->state) != VINDEX_RESIDENT) {
                part_put(v, &sh[j]);
                continue;
            }
            if (n == cap)
                all = pc_realloc(all, (cap *= 2) * sizeof(*all));
            all[n++] = sh[j];
        }
        free(sh);
    }
    qsort(all, n, sizeof(*all), victim_cmp);
    size_t target = max - max / 32;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&v->bytes) > target)
            part_evict(v, all[i]);
        part_put(v, &all[i]); /* frees an evicted partition nobody searches right now */
    }
    free(all);
    /* Freed blocks stay in malloc's arenas (the process's RSS) until trimmed: the background
     * thread does it, off this lock. */
    pthread_mutex_lock(&v->mq);
    v->trim = true;
    pthread_cond_signal(&v->mq_cond);
    pthread_mutex_unlock(&v->mq);
}

/*
 * Under wlock: add (or replace) it in partition. load_gen 0: a write or an
 * event; else a load begun at that generation, which leaves a vector of the
 * same key added since alone (an event newer than what the load read). 0, 1
 * if the partition is not loaded (lazy: nothing done), -1 if FAISS failed.
 */
static int add_locked(struct vindex *v, const unsigned char *partition,
                      const struct vindex_item *it, const float *unit, uint32_t load_gen)
{
    struct part *p = part_get(v, partition, !v->o.lazy);
    if (p == NULL)
        return 1;
    if (!part_open(p)) {
        part_put(v, &p);
        return 1;
    }
    int rc = 0;
    size_t cell = keys_find(v, it->key);
    if (cell != SIZE_MAX && v->keys[cell].p == p) {
        if (load_gen == 0 || cell_slot(&v->keys[cell])->gen < load_gen)
            rc = replace(v, p, cell, it, unit);
    } else {
        if (cell != SIZE_MAX)
            remove_cell(v, cell);
        pthread_rwlock_wrlock(&p->lock);
        int64_t slot = slot_store(v, p, it, unit);
        if (slot >= 0)
            keys_insert(v, p, (uint32_t)slot);
        part_account(v, p);
        pthread_rwlock_unlock(&p->lock);
        if (slot >= 0)
            maybe_queue(v, p);
        else
            rc = -1;
    }
    part_put(v, &p);
    return rc;
}

static int add_unit(struct vindex *v, const unsigned char *partition, const struct vindex_item *it,
                    const float *vec, uint32_t load_gen)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    float *unit = pc_malloc((size_t)v->o.dim * sizeof(float));
    if (!normalise(vec, unit, v->o.dim)) {
        free(unit);
        return -1;
    }
    pthread_mutex_lock(&v->wlock);
    int rc = add_locked(v, partition, it, unit, load_gen);
    if (rc == 0)
        evict_over_budget(v);
    report_bytes(v);
    pthread_mutex_unlock(&v->wlock);
    free(unit);
    return rc;
}

int vindex_add(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
               const struct vindex_item *it, const float *vec)
{
    return add_unit(v, partition, it, vec, 0);
}

bool vindex_remove(struct vindex *v, const unsigned char key[VINDEX_KEY_LEN])
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    pthread_mutex_lock(&v->wlock);
    size_t cell = keys_find(v, key);
    if (cell != SIZE_MAX)
        remove_cell(v, cell);
    report_bytes(v);
    pthread_mutex_unlock(&v->wlock);
    return cell != SIZE_MAX;
}

typedef bool slot_pred(const struct vslot *s, const void *arg);

/* Remove the live slots of p for which pred holds (under wlock); how many. */
static size_t part_remove_if(struct vindex *v, struct part *p, slot_pred *pred, const void *arg)
{
    size_t n = 0;
    pthread_rwlock_wrlock(&p->lock);
    for (uint32_t i = 0; i < p->nslots; i++) {
        struct vslot *s = slot_at(p, i);
        if (s->state == SLOT_LIVE && pred(s, arg)) {
            keys_erase(v, s->key);
            slot_kill(v, p, i);
            n++;
        }
    }
    if (n > 0)
        part_tidy(v, p);
    pthread_rwlock_unlock(&p->lock);
    return n;
}

/* Apply part_remove_if to every partition, one partition per wlock hold. */
static size_t remove_everywhere(struct vindex *v, slot_pred *pred, const void *arg)
{
    size_t total = 0;
    for (size_t i = 0; i < NSHARDS; i++) {
        size_t n;
        struct part **all = shard_collect(v, i, &n);
        for (size_t j = 0; j < n; j++) {
            pthread_mutex_lock(&v->wlock);
            total += part_remove_if(v, all[j], pred, arg);
            report_bytes(v);
            pthread_mutex_unlock(&v->wlock);
            part_put(v, &all[j]);
        }
        free(all);
    }
    return total;
}

static bool tenant_is(const struct vslot *s, const void *tenant)
{
    return memcmp(s->tenant, tenant, VINDEX_TENANT_LEN) == 0;
}

size_t vindex_remove_tenant(struct vindex *v, const unsigned char tenant[VINDEX_TENANT_LEN])
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    return remove_everywhere(v, tenant_is, tenant);
}

static bool is_expired(const struct vslot *s, const void *now_ms)
{
    return expired(s, *(const int64_t *)now_ms);
}

size_t vindex_expire(struct vindex *v, int64_t now_ms)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    return remove_everywhere(v, is_expired, &now_ms);
}

static bool older(const struct vslot *s, const void *gen)
{
    return s->gen < *(const uint32_t *)gen;
}

uint32_t vindex_generation_begin(struct vindex *v)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    pthread_mutex_lock(&v->wlock);
    uint32_t g = ++v->gen;
    pthread_mutex_unlock(&v->wlock);
    return g;
}

size_t vindex_sweep_before(struct vindex *v, uint32_t generation)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    return remove_everywhere(v, older, &generation);
}

/* Empty p wholesale (under wlock): a running build of it is void. */
static void part_wipe(struct vindex *v, struct part *p)
{
    pthread_rwlock_wrlock(&p->lock);
    atomic_fetch_sub(&v->nvec, atomic_load(&p->live));
    atomic_store(&p->live, 0);
    part_release_storage(v, p);
    p->building = false;
    p->wipes++;
    p->trained_n = 0;
    p->retry_at = 0;
    part_account(v, p);
    pthread_rwlock_unlock(&p->lock);
}

/* Under wlock: empty p and mark it not loaded (the next search loads it again); how many
 * vectors it held. */
static size_t part_drop(struct vindex *v, struct part *p)
{
    size_t n = atomic_load(&p->live);
    for (uint32_t i = 0; i < p->nslots; i++)
        if (slot_at(p, i)->state == SLOT_LIVE)
            keys_erase(v, slot_at(p, i)->key);
    part_wipe(v, p);
    set_state(v, p, VINDEX_COLD);
    return n;
}

/* Under wlock: drop a loaded partition from memory for the budget. */
static void part_evict(struct vindex *v, struct part *p)
{
    atomic_fetch_add(&v->evicted_vectors, part_drop(v, p));
    atomic_fetch_add(&v->evictions, 1);
    if (v->o.row != NULL)
        stats_incr(v->o.row, STAT_semantic_index_evictions);
}

void vindex_clear(struct vindex *v)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    pthread_mutex_lock(&v->wlock);
    for (size_t i = 0; i < NSHARDS; i++) {
        size_t n;
        struct part **all = shard_collect(v, i, &n);
        for (size_t j = 0; j < n; j++)
            part_wipe(v, all[j]);
        for (size_t j = 0; j < n; j++)
            part_put(v, &all[j]);
        free(all);
    }
    atomic_fetch_sub(&v->bytes, v->kcap * sizeof(*v->keys));
    PC_FREE(&v->keys);
    v->kcap = v->kn = 0;
    report_bytes(v);
    pthread_mutex_unlock(&v->wlock);
}

/* --- public: loading (lazy) ------------------------------------------------------------------- */

bool vindex_want(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                 const unsigned char tenant[VINDEX_TENANT_LEN])
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    if (!v->o.lazy)
        return false;
    pthread_mutex_lock(&v->wlock);
    struct part *p = part_get(v, partition, true);
    bool cold = atomic_load(&p->state) == VINDEX_COLD;
    if (cold) {
        memcpy(p->tenant, tenant, VINDEX_TENANT_LEN);
        set_state(v, p, VINDEX_WANTED);
        part_account(v, p);
    }
    part_put(v, &p);
    report_bytes(v);
    pthread_mutex_unlock(&v->wlock);
    return cold;
}

uint32_t vindex_load_begin(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN])
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    pthread_mutex_lock(&v->wlock);
    struct part *p = part_get(v, partition, false);
    uint32_t g = 0;
    int st = p != NULL ? atomic_load(&p->state) : VINDEX_COLD;
    if (st == VINDEX_WANTED || st == VINDEX_RESIDENT) {
        /* A loaded one is reloaded in place: it serves what it has meanwhile. */
        if (st == VINDEX_WANTED)
            set_state(v, p, VINDEX_LOADING);
        g = ++v->gen;
    }
    part_put(v, &p);
    pthread_mutex_unlock(&v->wlock);
    return g;
}

int vindex_load_add(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                    const struct vindex_item *it, const float *vec, uint32_t gen)
{
    return add_unit(v, partition, it, vec, gen > 0 ? gen : 1);
}

static bool older_than(const struct vslot *s, const void *gen)
{
    return s->gen < *(const uint32_t *)gen;
}

size_t vindex_load_end(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                       uint32_t gen, bool ok)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    size_t gone = 0;
    pthread_mutex_lock(&v->wlock);
    struct part *p = part_get(v, partition, false);
    int st = p != NULL ? atomic_load(&p->state) : VINDEX_COLD;
    if (st == VINDEX_LOADING && !ok) {
        part_drop(v, p); /* half loaded: not to be taken for the partition */
    } else if ((st == VINDEX_LOADING || st == VINDEX_RESIDENT) && ok) {
        /* What the load did not find again is no longer in Redis. */
        gone = part_remove_if(v, p, older_than, &gen);
        set_state(v, p, VINDEX_RESIDENT);
        atomic_fetch_add(&v->loads, 1);
    }
    part_put(v, &p);
    evict_over_budget(v);
    report_bytes(v);
    pthread_mutex_unlock(&v->wlock);
    return gone;
}

int vindex_state(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN])
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    struct part *p = part_get(v, partition, false);
    int st = p != NULL ? atomic_load(&p->state) : v->o.lazy ? VINDEX_COLD : VINDEX_RESIDENT;
    part_put(v, &p);
    return st;
}

size_t vindex_each_loaded(struct vindex *v, vindex_part_fn *fn, void *arg)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    size_t total = 0;
    for (size_t i = 0; i < NSHARDS; i++) {
        size_t n;
        struct part **all = shard_collect(v, i, &n);
        for (size_t j = 0; j < n; j++) {
            if (atomic_load(&all[j]->state) == VINDEX_RESIDENT) {
                fn(arg, all[j]->hash, all[j]->tenant);
                total++;
            }
            part_put(v, &all[j]);
        }
        free(all);
    }
    return total;
}

size_t vindex_bytes_per_vector(const struct vindex *v)
{
    return sizeof(struct vslot) + (size_t)v->o.dim * sizeof(float) + sizeof(struct kcell) * 4 / 3;
}

/* --- public: search ---------------------------------------------------------------------- */

/* Insert (slot s, similarity sim) into out[0..*n), best first, keeping at most k. */
static void hits_insert(struct vindex_hit *out, size_t *n, size_t k, const struct vslot *s,
                        float sim)
{
    size_t i = *n < k ? (*n)++ : k - 1;
    while (i > 0 && out[i - 1].similarity < sim) {
        out[i] = out[i - 1];
        i--;
    }
    memcpy(out[i].key, s->key, VINDEX_KEY_LEN);
    memcpy(out[i].tenant, s->tenant, VINDEX_TENANT_LEN);
    out[i].expires_ms = s->expires_ms;
    out[i].similarity = sim;
}

/* Exact: every slot's inner product; only those that would enter the top k are checked
 * for liveness and expiry. */
static size_t flat_search(const struct vindex *v, const struct part *p, const float *q, size_t k,
                          float min_sim, int64_t now_ms, struct vindex_hit *out)
{
    size_t n = 0;
    float thr = min_sim;
    for (uint32_t b = 0; b < p->nblocks; b++) {
        uint32_t base = b << BLOCK_SHIFT;
        if (base >= p->nslots)
            break;
        /* Block 0 holds cap0 slots (BLOCK once there are more blocks), the others BLOCK. */
        uint32_t m = PC_MIN(p->nslots - base, b == 0 ? p->cap0 : BLOCK);
        const float *vecs = p->blocks[b].vecs;
        for (uint32_t j = 0; j < m; j++) {
            float sim = dot(vecs + (size_t)j * (size_t)v->o.dim, q, v->o.dim);
            if (!(sim >= thr) || (n == k && sim <= thr)) /* NaN: never a hit */
                continue;
            const struct vslot *s = &p->blocks[b].slots[j];
            if (s->state != SLOT_LIVE || expired(s, now_ms))
                continue;
            hits_insert(out, &n, k, s, sim);
            if (n == k)
                thr = PC_MAX(min_sim, out[k - 1].similarity);
        }
    }
    return n;
}

/*
 * IVF: ask FAISS for k + OVERFETCH candidates, drop dead and expired ones,
 * re-rank the rest exactly. If too few survive while FAISS may have more
 * above the threshold, ask again for four times as many.
 */
static size_t ivf_search(const struct vindex *v, const struct part *p, const float *q, size_t k,
                         float min_sim, int64_t now_ms, struct vindex_hit *out)
{
    idx_t total = faiss_Index_ntotal(p->ivf);
    idx_t want = PC_MIN((idx_t)(k + OVERFETCH), total);
    size_t n = 0;
    omp_single();
    while (want > 0) {
        float *dist = pc_malloc((size_t)want * sizeof(*dist));
        idx_t *lab = pc_malloc((size_t)want * sizeof(*lab));
        int rc = faiss_Index_search(p->ivf, 1, q, want, dist, lab);
        if (rc != 0)
            faiss_fail("IVF search", rc);
        idx_t got = 0;
        n = 0;
        for (; rc == 0 && got < want && lab[got] >= 0; got++) {
            if (lab[got] >= (idx_t)p->nslots)
                continue;
            const struct vslot *s = slot_at(p, (uint32_t)lab[got]);
            if (s->state != SLOT_LIVE || expired(s, now_ms))
                continue;
            float sim = dot(vec_at(v, p, (uint32_t)lab[got]), q, v->o.dim);
            if (sim >= min_sim && (n < k || sim > out[k - 1].similarity))
                hits_insert(out, &n, k, s, sim);
        }
        bool more = rc == 0 && n < k && got == want && want < total &&
                    dist[want - 1] >= min_sim - SQ_MARGIN;
        free(dist);
        free(lab);
        if (!more)
            break;
        want = PC_MIN(want * 4, total);
    }
    return n;
}

size_t vindex_lookup(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                     const float *q, size_t k, float min_similarity, int64_t now_ms,
                     struct vindex_hit *out, int *state)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    struct part *p = part_get(v, partition, false);
    int st = p != NULL ? atomic_load(&p->state) : v->o.lazy ? VINDEX_COLD : VINDEX_RESIDENT;
    if (state != NULL)
        *state = st;
    if (p == NULL)
        return 0;
    atomic_store(&p->used_us, (int_fast64_t)pc_mono_us());
    k = PC_MIN(k, (size_t)VINDEX_K_MAX);
    if (k == 0 || (st != VINDEX_RESIDENT && st != VINDEX_LOADING)) {
        part_put(v, &p);
        return 0;
    }
    pthread_rwlock_rdlock(&p->lock);
    size_t n = p->mode == PART_IVF ? ivf_search(v, p, q, k, min_similarity, now_ms, out)
                                   : flat_search(v, p, q, k, min_similarity, now_ms, out);
    pthread_rwlock_unlock(&p->lock);
    part_put(v, &p);
    return n;
}

size_t vindex_search(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                     const float *q, size_t k, float min_similarity, int64_t now_ms,
                     struct vindex_hit *out)
{
    return vindex_lookup(v, partition, q, k, min_similarity, now_ms, out, NULL);
}

/* --- builds ----------------------------------------------------------------------------- */

struct build {
    struct part *p;
    uint64_t wipes;
    uint32_t nslots; /* at the snapshot */
    size_t live;
    size_t nlist;
    FaissIndex *ivf;
    bool trained; /* training done, filling */
};

static size_t pow2_floor(size_t x)
{
    size_t p = 1;
    while (p * 2 <= x)
        p *= 2;
    return p;
}

/* The power of two nearest 4 sqrt(n) lists, with enough points per list to train. */
static size_t choose_nlist(size_t n)
{
    size_t by_size = pow2_floor((size_t)(4.0 * sqrt((double)n) * 1.4142));
    size_t by_train = pow2_floor(PC_MAX(n / 40, (size_t)1));
    return PC_MAX((size_t)16, PC_MIN(PC_MIN(by_size, by_train), (size_t)NLIST_MAX));
}

/* Under wlock: start the build, or false if it is no longer wanted. */
static bool build_begin(struct vindex *v, struct build *b)
{
    struct part *p = b->p;
    size_t live = atomic_load(&p->live);
    p->queued = false;
    if (!build_wanted(v, p))
        return false;
    for (uint32_t i = 0; i < p->nslots; i++)
        slot_at(p, i)->dirty = 0;
    p->building = true;
    b->wipes = p->wipes;
    b->nslots = p->nslots;
    b->live = live;
    b->nlist = choose_nlist(live);
    return true;
}

/*
 * Append the live vectors of slots [from, to), every stride-th one, to
 * vecs/ids (ids may be NULL) while *n < cap, under wlock: one chunk of a
 * build. false if the partition was wiped meanwhile.
 */
static bool build_copy(struct vindex *v, struct build *b, uint32_t from, uint32_t to,
                       uint32_t stride, float *vecs, idx_t *ids, size_t *n, size_t cap)
{
    size_t d = (size_t)v->o.dim;
    pthread_mutex_lock(&v->wlock);
    bool ok = b->p->wipes == b->wipes;
    to = PC_MIN(to, b->p->nslots);
    for (uint32_t i = from; ok && i < to && *n < cap; i += stride) {
        if (slot_at(b->p, i)->state != SLOT_LIVE)
            continue;
        memcpy(vecs + *n * d, vec_at(v, b->p, i), d * sizeof(float));
        if (ids != NULL)
            ids[*n] = i;
        (*n)++;
    }
    pthread_mutex_unlock(&v->wlock);
    return ok;
}

/* k-means (spherical, 10 iterations) on a sample, then an empty IVF over those lists. */
static int build_train(struct vindex *v, struct build *b)
{
    size_t d = (size_t)v->o.dim;
    size_t want = PC_MIN(b->live, b->nlist * TRAIN_PER_LIST);
    uint32_t stride = (uint32_t)PC_MAX((size_t)1, b->nslots / want);
    float *x = pc_malloc(want * d * sizeof(float));
    size_t n = 0;
    bool ok = true;
    for (uint32_t at = 0; ok && at < b->nslots && n < want; at += BUILD_CHUNK * stride)
        ok = build_copy(v, b, at, at + BUILD_CHUNK * stride, stride, x, NULL, &n, want);
    int rc = ok ? 0 : 1;
    if (rc == 0 && n < 4 * b->nlist)
        rc = 1; /* emptied meanwhile: nothing worth an IVF */
    FaissIndexFlatIP *quant = NULL;
    FaissClustering *km = NULL;
    FaissClusteringParameters cp;
    faiss_ClusteringParameters_init(&cp);
    cp.niter = 10;
    cp.spherical = 1;
    cp.min_points_per_centroid = 4; /* below that FAISS warns on stderr */
    cp.max_points_per_centroid = TRAIN_PER_LIST * 2;
    if (rc == 0 && (rc = faiss_IndexFlatIP_new_with(&quant, (idx_t)d)) == 0 &&
        (rc = faiss_Clustering_new_with_params(&km, (int)d, (int)b->nlist, &cp)) == 0)
        rc = faiss_Clustering_train(km, (idx_t)n, x, quant);
    if (km != NULL)
        faiss_Clustering_free(km);
    if (rc == 0)
        rc = v->o.ivf_flat ? faiss_IndexIVFFlat_new_with_metric(&b->ivf, quant, d, b->nlist,
                                                                METRIC_INNER_PRODUCT)
                           : faiss_IndexIVFScalarQuantizer_new_with_metric(
                                 &b->ivf, quant, d, b->nlist, QT_8bit, METRIC_INNER_PRODUCT, 1);
    if (rc == 0) {
        faiss_IndexIVF_set_own_fields(b->ivf, 1);
        faiss_IndexIVF_set_nprobe(b->ivf, v->o.nprobe);
        quant = NULL;
        if (!v->o.ivf_flat)
            rc = faiss_Index_train(b->ivf, (idx_t)n, x); /* the SQ8 ranges */
    }
    if (quant != NULL)
        faiss_Index_free(quant);
    if (rc < 0)
        build_fail(v, "IVF training", &rc);
    free(x);
    return rc;
}

/* Add the snapshot's live vectors, chunk by chunk. */
static int build_fill(struct vindex *v, struct build *b)
{
    size_t d = (size_t)v->o.dim;
    float *x = pc_malloc((size_t)BUILD_CHUNK * d * sizeof(float));
    idx_t *ids = pc_malloc(BUILD_CHUNK * sizeof(*ids));
    int rc = 0;
    for (uint32_t at = 0; rc == 0 && at < b->nslots; at += BUILD_CHUNK) {
        size_t n = 0;
        if (stopping(v) || !build_copy(v, b, at, at + BUILD_CHUNK, 1, x, ids, &n, BUILD_CHUNK))
            rc = 1;
        else if (n > 0 && (rc = faiss_Index_add_with_ids(b->ivf, (idx_t)n, x, ids)) != 0)
            build_fail(v, "IVF fill", &rc);
    }
    free(x);
    free(ids);
    return rc;
}

/* Under wlock + write lock: replay the slots changed since the snapshot into the new IVF. */
static int build_replay(struct vindex *v, struct build *b)
{
    struct part *p = b->p;
    idx_t *ids = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (uint32_t i = 0; i < p->nslots; i++)
        if (slot_at(p, i)->dirty) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                ids = pc_realloc(ids, cap * sizeof(*ids));
            }
            ids[n++] = i;
        }
    if (n > 0) {
        FaissIDSelectorBatch *sel = NULL;
        rc = faiss_IDSelectorBatch_new(&sel, n, ids);
        if (rc == 0)
            rc = faiss_Index_remove_ids(b->ivf, (FaissIDSelector *)sel, NULL);
        if (sel != NULL)
            faiss_IDSelector_free((FaissIDSelector *)sel);
    }
    /* One batch: FAISS assigns many vectors to lists with one matrix product. */
    size_t d = (size_t)v->o.dim, m = 0;
    float *x = pc_malloc(PC_MAX(n, (size_t)1) * d * sizeof(float));
    for (size_t j = 0; j < n; j++) {
        uint32_t i = (uint32_t)ids[j];
        if (slot_at(p, i)->state == SLOT_LIVE) {
            memcpy(x + m * d, vec_at(v, p, i), d * sizeof(float));
            ids[m++] = i;
        }
    }
    if (rc == 0 && m > 0)
        rc = faiss_Index_add_with_ids(b->ivf, (idx_t)m, x, ids);
    if (rc != 0)
        faiss_fail("IVF replay", rc);
    free(x);
    free(ids);
    return rc;
}

/* Under wlock + write lock: the new IVF serves the partition from now on. */
static FaissIndex *build_swap(struct vindex *v, struct build *b)
{
    struct part *p = b->p;
    FaissIndex *old = p->ivf;
    if (old == NULL)
        atomic_fetch_add(&v->nivf, 1);
    p->ivf = b->ivf;
    b->ivf = NULL;
    p->mode = PART_IVF;
    p->nlist = b->nlist;
    p->trained_n = atomic_load(&p->live);
    for (uint32_t i = 0; i < p->nslots; i++) {
        struct vslot *s = slot_at(p, i);
        s->dirty = 0;
        if (s->state == SLOT_DEAD) { /* in neither the new IVF nor any search result */
            s->state = SLOT_FREE;
            free_push(p, i);
        }
    }
    p->ndead = 0;
    return old;
}

/*
 * Build and swap in a new IVF for b->p. 0 when it serves the partition, > 0
 * when the build became void (the partition was emptied meanwhile), < 0 when
 * FAISS failed (logged; the partition keeps its index and is not rebuilt
 * before it doubles).
 */
static int build_run(struct vindex *v, struct build *b)
{
    uint64_t t0 = pc_mono_ms();
    omp_single();
    int rc = build_train(v, b);
    b->trained = rc == 0;
    if (rc == 0)
        rc = build_fill(v, b);
    FaissIndex *old = NULL;
    pthread_mutex_lock(&v->wlock);
    struct part *p = b->p;
    if (p->wipes != b->wipes) {
        rc = 1; /* p->building was reset by the wipe */
    } else {
        if (rc == 0) {
            pthread_rwlock_wrlock(&p->lock);
            rc = build_replay(v, b);
            if (rc == 0)
                old = build_swap(v, b);
            part_account(v, p);
            pthread_rwlock_unlock(&p->lock);
        }
        p->building = false;
        if (rc < 0)
            p->retry_at = atomic_load(&p->live) * 2;
    }
    pthread_mutex_unlock(&v->wlock);
    if (old != NULL)
        faiss_Index_free(old);
    if (b->ivf != NULL)
        faiss_Index_free(b->ivf);
    if (rc == 0)
        log_info("vindex: a partition of %zu vectors is now served by IVF%zu (built in %llu ms)",
                 b->live, b->nlist, (unsigned long long)(pc_mono_ms() - t0));
    else if (stopping(v))
        log_info("vindex: the IVF%zu build of a partition of %zu vectors stopped after %llu ms "
                 "(%s): the index is shutting down",
                 b->nlist, b->live, (unsigned long long)(pc_mono_ms() - t0),
                 b->trained ? "filling" : "training");
    return rc;
}

size_t vindex_maintain(struct vindex *v)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    size_t done = 0;
    struct part *p;
    pthread_mutex_lock(&v->build_mu);
    while (!stopping(v) && (p = queue_pop(v)) != NULL) {
        struct build b = {.p = p};
        pthread_mutex_lock(&v->wlock);
        bool go = build_begin(v, &b);
        pthread_mutex_unlock(&v->wlock);
        atomic_fetch_add(&v->nbuilding, 1);
        int rc = go ? build_run(v, &b) : 1;
        atomic_fetch_sub(&v->nbuilding, 1);
        if (rc == 0) {
            atomic_fetch_add(&v->builds, 1);
            done++;
        } else if (rc < 0) {
            atomic_fetch_add(&v->build_errors, 1);
        }
        part_put(v, &p);
    }
    pthread_mutex_unlock(&v->build_mu);
    if (done > 0)
        malloc_trim(0); /* k-means and the copies were large and short-lived */
    return done;
}

void vindex_get_stats(struct vindex *v, struct vindex_stats *out)
{
    PC_CHECK_OBJ(v, VINDEX_MAGIC);
    out->vectors = atomic_load(&v->nvec);
    out->partitions = atomic_load(&v->nparts);
    out->ivf_partitions = atomic_load(&v->nivf);
    out->bytes = atomic_load(&v->bytes) + sizeof(*v);
    out->builds = atomic_load(&v->builds);
    out->build_errors = atomic_load(&v->build_errors);
    out->building = atomic_load(&v->nbuilding);
    out->loaded = atomic_load(&v->nresident);
    out->loads = atomic_load(&v->loads);
    out->evictions = atomic_load(&v->evictions);
    out->evicted_vectors = atomic_load(&v->evicted_vectors);
    out->max_bytes = v->o.max_bytes;
}

/* --- the background thread ----------------------------------------------------------------- */

static void *maint_main(void *arg)
{
    struct vindex *v = arg;
    faiss_stop_watch(stopping, v); /* this thread's builds stop with the index */
    uint64_t next_sweep = pc_mono_ms() + (uint64_t)v->o.sweep_ms;
    pthread_mutex_lock(&v->mq);
    uint64_t next_trim = 0;
    while (!v->stop) {
        if (v->trim && pc_mono_ms() >= next_trim) { /* at most once a second */
            v->trim = false;
            pthread_mutex_unlock(&v->mq);
            malloc_trim(0);
            next_trim = pc_mono_ms() + 1000;
            pthread_mutex_lock(&v->mq);
            continue;
        }
        if (v->qhead != NULL) {
            pthread_mutex_unlock(&v->mq);
            vindex_maintain(v);
            pthread_mutex_lock(&v->mq);
            continue;
        }
        uint64_t now = pc_mono_ms();
        if (now >= next_sweep) {
            pthread_mutex_unlock(&v->mq);
            size_t n = vindex_expire(v, pc_wall_ms());
            if (n > 0)
                log_debug("vindex: %zu expired vectors removed", n);
            next_sweep = pc_mono_ms() + (uint64_t)v->o.sweep_ms;
            pthread_mutex_lock(&v->mq);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t until = v->trim ? PC_MIN(next_sweep, next_trim) : next_sweep;
        uint64_t wait = until > now ? until - now : 0;
        ts.tv_sec += (time_t)(wait / 1000);
        ts.tv_nsec += (long)(wait % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&v->mq_cond, &v->mq, &ts);
    }
    pthread_mutex_unlock(&v->mq);
    return NULL;
}
