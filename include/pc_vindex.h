/*
 * pc_vindex.h - the process's vector index for the semantic cache: one per
 * process, shared by every worker thread and the sync thread (vsync).
 *
 * Vectors are grouped by partition (a 32-byte hash of everything in a request
 * except its last user turn); a search compares only with vectors of its own
 * partition. Similarity is the inner product of unit vectors (cosine). Each
 * vector belongs to one cache entry, named by its exact key (SHA-256), so a
 * key is in the index at most once: adding it again replaces it.
 *
 * Threads: every function may be called from any thread. Searches run
 * concurrently without a global lock (a shard mutex to find the partition,
 * then the partition's read lock). Changes (add, remove, sweeps) are
 * serialised among themselves and take the partition's write lock briefly;
 * an add may wait for a search of its partition to finish (well under a
 * millisecond for the sizes measured in src/vindex.c). Index builds for big
 * partitions (seconds for a million vectors) never run inside an add: they
 * run in vindex_maintain(), on the index's own background thread when
 * opts.background is set, while searches and adds go on.
 *
 * Which index serves a partition, and why, is written at the top of
 * src/vindex.c: exact search (plain C) up to flat_max live vectors, FAISS IVF
 * above.
 *
 * Bounded (opts.lazy, opts.max_bytes): a partition is in memory only once
 * loaded, and the least recently searched loaded partitions are dropped when
 * the index outgrows max_bytes. Its states:
 *
 *   COLD ─want─▶ WANTED ─load_begin─▶ LOADING ─load_end(ok)─▶ RESIDENT
 *    ▲                                   │ (failed)             │ evicted
 *    └───────────────────────────────────┴──────────────────────┘
 *
 * Adds (writes and stream events) to a partition that is neither LOADING nor
 * RESIDENT are ignored (cheaply: nothing is made for it); a search of one
 * finds nothing and says so, so the caller can have it loaded (pc_vsync.h).
 * A loaded partition stays, even empty, until evicted: that nothing is
 * stored there is known without asking Redis again. Without opts.lazy every
 * partition is RESIDENT from its first vector on, as before.
 */
#ifndef PC_VINDEX_H
#define PC_VINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VINDEX_PART_LEN   32
#define VINDEX_KEY_LEN    32
#define VINDEX_TENANT_LEN 8
#define VINDEX_DIM_MAX    4096
#define VINDEX_K_MAX      256
#define VINDEX_FLAT_MAX   32768 /* opts.flat_max at dim 100 (measured, see src/vindex.c) */
#define VINDEX_NPROBE     32    /* default opts.nprobe */
#define VINDEX_SWEEP_MS   10000 /* default opts.sweep_ms */

struct vindex;
struct stats;

enum vindex_state { VINDEX_COLD = 0, VINDEX_WANTED, VINDEX_LOADING, VINDEX_RESIDENT };

struct vindex_opts {
    int dim;           /* 1..VINDEX_DIM_MAX; every vector has it */
    size_t flat_max;   /* exact search up to this many vectors in a partition; 0 = default */
    size_t nprobe;     /* IVF lists visited per search; 0 = default */
    bool ivf_flat;     /* IVF keeps float32 codes (default: SQ8, a quarter of the memory) */
    bool background;   /* own thread for index builds and the expiry sweep */
    int64_t sweep_ms;  /* with background: vindex_expire every this often; 0 = default */
    bool lazy;         /* partitions are loaded (vindex_want ... vindex_load_end), see the top */
    size_t max_bytes;  /* with lazy: evict least recently searched partitions beyond; 0 = none */
    struct stats *row; /* may be NULL: the gauge semantic_index_bytes is kept there */
};

struct vindex_item {
    unsigned char key[VINDEX_KEY_LEN];       /* exact cache key: the entry's unique id */
    unsigned char tenant[VINDEX_TENANT_LEN]; /* first bytes of the tenant hash (tenant flush) */
    int64_t expires_ms;                      /* wall clock; 0 = never; expired never matches */
};

struct vindex_hit {
    unsigned char key[VINDEX_KEY_LEN];
    unsigned char tenant[VINDEX_TENANT_LEN];
    int64_t expires_ms;
    float similarity; /* exact inner product with the query, whatever index served it */
};

struct vindex_stats {
    size_t vectors;        /* live vectors */
    size_t partitions;     /* partitions holding at least one vector */
    size_t ivf_partitions; /* of which served by a FAISS IVF index */
    size_t bytes;          /* memory held for vectors, metadata and FAISS indexes (estimate) */
    uint64_t builds;       /* IVF (re)builds completed */
    uint64_t build_errors; /* IVF builds that failed (the partition stayed as it was) */
    size_t building;       /* IVF builds in progress (vindex_destroy stops one, logged) */
    size_t loaded;         /* partitions RESIDENT (lazy; else every partition) */
    uint64_t loads;        /* loads completed (vindex_load_end ok) */
    uint64_t evictions;    /* partitions dropped for max_bytes */
    uint64_t evicted_vectors;
    size_t max_bytes;
};

/* flat_max when opts.flat_max is 0: VINDEX_FLAT_MAX at dim 100, fewer for bigger vectors. */
size_t vindex_default_flat_max(int dim);
/* NULL (logged) if opts are invalid. */
struct vindex *vindex_create(const struct vindex_opts *o);
/*
 * Stops the background thread, frees everything; *v is NULLed. No call may be running.
 * A build in progress on the background thread gives up (within one block of FAISS's
 * work, well under a second) rather than being waited for.
 */
void vindex_destroy(struct vindex **v);
int vindex_dim(const struct vindex *v);

/*
 * Add (or replace: same key) a vector. vec has dim components and should be
 * of unit length; it is normalised here anyway. A key added with another
 * partition moves there. 0; 1 if the partition is not loaded (lazy: ignored);
 * -1 if vec is zero or not finite (or FAISS failed, logged). The item is
 * copied. Past max_bytes, partitions are evicted before it returns.
 */
int vindex_add(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
               const struct vindex_item *it, const float *vec);
/* Remove a key; false if it was not there. */
bool vindex_remove(struct vindex *v, const unsigned char key[VINDEX_KEY_LEN]);
/* Remove every vector of a tenant; returns how many. */
size_t vindex_remove_tenant(struct vindex *v, const unsigned char tenant[VINDEX_TENANT_LEN]);
/* Remove everything. */
void vindex_clear(struct vindex *v);

/*
 * The k (1..VINDEX_K_MAX) most similar live vectors of the partition with
 * similarity >= min_similarity and not expired at now_ms, best first, into
 * out (room for k). Returns how many. q: dim components, unit length (not
 * normalised here: the search is read-only). Exact below flat_max; above, the
 * IVF may miss a neighbour (recall is measured in tests and bench), but every
 * similarity reported is exact.
 */
size_t vindex_search(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                     const float *q, size_t k, float min_similarity, int64_t now_ms,
                     struct vindex_hit *out);
/* The same, with the partition's state (enum vindex_state) into *state (may be NULL); a
 * partition neither LOADING nor RESIDENT finds nothing. Marks it used now (the LRU's order). */
size_t vindex_lookup(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                     const float *q, size_t k, float min_similarity, int64_t now_ms,
                     struct vindex_hit *out, int *state);

/* --- loading (lazy) --------------------------------------------------------------------------- */

/* COLD -> WANTED (tenant noted: its member list is the tenant's); true if it was COLD, so the
 * caller queues its load. false without lazy. */
bool vindex_want(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                 const unsigned char tenant[VINDEX_TENANT_LEN]);
/*
 * WANTED -> LOADING, or a RESIDENT one reloaded in place (a re-sync: it keeps
 * serving meanwhile). The generation to pass to vindex_load_add and
 * vindex_load_end, or 0 if the partition is neither (evicted, flushed).
 */
uint32_t vindex_load_begin(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN]);
/* Add one vector the load read; a vector of the same key added since the load began (a newer
 * event) is left as it is. As vindex_add otherwise. */
int vindex_load_add(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                    const struct vindex_item *it, const float *vec, uint32_t gen);
/*
 * The load is over. ok: the partition is RESIDENT, and the vectors it had
 * from before gen that the load did not find again are removed (returns how
 * many). Failed: a partition LOADING is emptied and COLD again; a RESIDENT
 * one keeps what it has.
 */
size_t vindex_load_end(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN],
                       uint32_t gen, bool ok);
/* The partition's state (enum vindex_state). */
int vindex_state(struct vindex *v, const unsigned char partition[VINDEX_PART_LEN]);
/* fn for every RESIDENT partition (with the tenant vindex_want noted); how many. */
typedef void vindex_part_fn(void *arg, const unsigned char partition[VINDEX_PART_LEN],
                            const unsigned char tenant[VINDEX_TENANT_LEN]);
size_t vindex_each_loaded(struct vindex *v, vindex_part_fn *fn, void *arg);
/* What one more vector costs in exact mode (slot, float32 vector, key table): for sizing loads. */
size_t vindex_bytes_per_vector(const struct vindex *v);

/* Remove the vectors expired at now_ms; returns how many. */
size_t vindex_expire(struct vindex *v, int64_t now_ms);

/*
 * Generations, for a rebuild that must also drop what it no longer finds
 * (vsync after a reconnect): vindex_generation_begin() starts a new
 * generation and returns it; every vector added from then on (by anyone)
 * belongs to it. vindex_sweep_before(g) removes the vectors of earlier
 * generations, that is those not added again since g began.
 */
uint32_t vindex_generation_begin(struct vindex *v);
size_t vindex_sweep_before(struct vindex *v, uint32_t generation);

/*
 * Run the pending index builds (partitions that crossed flat_max, IVF
 * partitions that outgrew their training) one after another, on the calling
 * thread, without blocking searches or adds for more than a moment. Returns
 * how many builds ran. With opts.background the index's thread does this by
 * itself; tests call it directly.
 */
size_t vindex_maintain(struct vindex *v);

void vindex_get_stats(struct vindex *v, struct vindex_stats *out);

#endif
