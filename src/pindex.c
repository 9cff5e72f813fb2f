/*
 * pindex.c - the prefix index (see pc_pindex.h). Owns, per replica, an LRU
 * of the links that replica holds (a hash table of node indices over a node
 * array, the nodes in a doubly linked list from most to least recently
 * used), its count of held tokens, and the per-model bytes-per-token
 * calibration.
 *
 *   replica r:  slots[] ─▶ nodes[i] {h, stamp, tokens, prev, next}
 *               head (newest) ◀──▶ ... ◀──▶ tail (oldest)
 *
 *   record(r, chain) ─▶ lock r ─▶ links from deepest to first: insert or
 *                       move to the head (so the first link ends newest)
 *                    ─▶ while held > capacity: drop the tail ─▶ unlock
 *   match(chain)     ─▶ per replica: lock, follow leading links, unlock
 *
 * Each replica has its own mutex, held for one record or one match of one
 * chain (microseconds): there is no global lock, and eviction is exact LRU
 * at the cost of one node per link, with no scan of the table.
 */
#include "pc_pindex.h"
#include "pc_util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define PINDEX_MAGIC 0x50494458u /* "PIDX" */
#define NIL          UINT32_MAX
#define SLOTS_MIN    64
#define NODES_MIN    32
#define APPLY_WALK   64 /* nodes an out-of-order stamp may be walked back from the head */
#define CPT_SLOTS    64
#define CPT_DEFAULT  4.0
#define CPT_MIN      1.0
#define CPT_MAX      16.0
#define CPT_WEIGHT   0.2 /* weight of a new observation in the running average */

struct lnode {
    uint64_t h;
    int64_t stamp;
    uint32_t tokens;
    uint32_t prev; /* towards the head (newer); NIL at the head */
    uint32_t next; /* towards the tail (older); NIL at the tail; the free list too */
};

/* One replica's LRU of links. Everything under mu. */
struct lru {
    pthread_mutex_t mu;
    struct lnode *nodes;
    uint32_t nodes_cap;
    uint32_t nodes_used; /* high-water mark; below it, free nodes are on the free list */
    uint32_t free_head;
    uint32_t *slots; /* node index + 1; 0: empty */
    size_t nslots;   /* power of two */
    size_t count;    /* links held (atomic for readers) */
    uint32_t head, tail;
    int64_t held; /* tokens (atomic for readers) */
    int64_t capacity;
    uint64_t key; /* slot_home's, random */
};

struct cpt_slot {
    uint64_t model; /* FNV-1a of the name; 0: free (atomic) */
    uint64_t bits;  /* the double, as bits (atomic) */
};

struct pindex {
    unsigned magic;
    size_t nrep;
    struct lru reps[PINDEX_MAX_REPLICAS];
    pindex_sink_fn *sink;
    void *sink_arg;
    struct cpt_slot cpt[CPT_SLOTS];
};

/* ---- one replica's table and list (caller holds its mutex) ----------------------- */

/*
 * A link's home slot: its hash keyed with the process's random key, mixed
 * (splitmix64's finalizer). Hashes come from other instances' records too,
 * and with a fixed mix another writer could choose links that all share one
 * home, which every lookup would then walk (minutes of a replica's mutex for
 * a full replica's worth).
 */
static size_t slot_home(const struct lru *l, uint64_t h)
{
    return (size_t)pc_mix64(h ^ l->key) & (l->nslots - 1);
}

/* The slot holding link h, or SIZE_MAX. */
static size_t slot_find(const struct lru *l, uint64_t h)
{
    for (size_t i = slot_home(l, h);; i = (i + 1) & (l->nslots - 1)) {
        if (l->slots[i] == 0)
            return SIZE_MAX;
        if (l->nodes[l->slots[i] - 1].h == h)
            return i;
    }
}

static void slots_put(struct lru *l, uint32_t idx)
{
    size_t i = slot_home(l, l->nodes[idx].h);
    while (l->slots[i] != 0)
        i = (i + 1) & (l->nslots - 1);
    l->slots[i] = idx + 1;
}

static void slots_grow(struct lru *l)
{
    uint32_t *old = l->slots;
    size_t n = l->nslots;
    l->nslots = n ? 2 * n : SLOTS_MIN;
    l->slots = pc_calloc(l->nslots, sizeof(*l->slots));
    for (size_t i = 0; i < n; i++)
        if (old[i] != 0)
            slots_put(l, old[i] - 1);
    free(old);
}

/* Backward-shift deletion: later members of the probe run move into the gap. */
static void slots_delete(struct lru *l, size_t i)
{
    size_t gap = i;
    for (size_t j = (i + 1) & (l->nslots - 1); l->slots[j] != 0; j = (j + 1) & (l->nslots - 1)) {
        size_t home = slot_home(l, l->nodes[l->slots[j] - 1].h);
        bool in_range = gap < j ? (home > gap && home <= j) : (home > gap || home <= j);
        if (in_range)
            continue;
        l->slots[gap] = l->slots[j];
        gap = j;
    }
    l->slots[gap] = 0;
}

static void list_unlink(struct lru *l, uint32_t idx)
{
    struct lnode *n = &l->nodes[idx];
    if (n->prev != NIL)
        l->nodes[n->prev].next = n->next;
    else
        l->head = n->next;
    if (n->next != NIL)
        l->nodes[n->next].prev = n->prev;
    else
        l->tail = n->prev;
    n->prev = n->next = NIL;
}

/* Link idx in just after node at (NIL: at the head). */
static void list_insert_after(struct lru *l, uint32_t at, uint32_t idx)
{
    struct lnode *n = &l->nodes[idx];
    n->prev = at;
    n->next = at == NIL ? l->head : l->nodes[at].next;
    if (n->next != NIL)
        l->nodes[n->next].prev = idx;
    else
        l->tail = idx;
    if (at != NIL)
        l->nodes[at].next = idx;
    else
        l->head = idx;
}

/*
 * Where a node stamped st belongs: after the last of the first APPLY_WALK
 * nodes that are newer (NIL: the head). Local records are the newest, so
 * they go to the head at once; a record from elsewhere may be a little older.
 * One older still (a set member restored at a reconnect, long evicted here)
 * is placed from the tail's end, up to APPLY_WALK nodes from it, so that it
 * does not push out links newer than itself: older than the tail, it is the
 * next to go.
 */
static uint32_t place_for(const struct lru *l, int64_t st)
{
    uint32_t at = NIL;
    uint32_t k = l->head;
    for (int steps = 0; k != NIL && steps < APPLY_WALK && l->nodes[k].stamp > st; steps++) {
        at = k;
        k = l->nodes[k].next;
    }
    if (k == NIL || l->nodes[k].stamp <= st)
        return at;
    uint32_t t = l->tail;
    for (int steps = 0; t != NIL && steps < APPLY_WALK; steps++) {
        if (l->nodes[t].stamp > st)
            return t;
        t = l->nodes[t].prev;
    }
    return at; /* in the middle: a little ahead of its place */
}

static uint32_t node_new(struct lru *l, uint64_t h, uint32_t tokens)
{
    uint32_t idx;
    if (l->free_head != NIL) {
        idx = l->free_head;
        l->free_head = l->nodes[idx].next;
    } else {
        if (l->nodes_used == l->nodes_cap) {
            l->nodes_cap = l->nodes_cap ? 2 * l->nodes_cap : NODES_MIN;
            l->nodes = pc_realloc(l->nodes, l->nodes_cap * sizeof(*l->nodes));
        }
        idx = l->nodes_used++;
    }
    l->nodes[idx] = (struct lnode){h, 0, tokens, NIL, NIL};
    if ((l->count + 1) * 10 > l->nslots * 7)
        slots_grow(l);
    slots_put(l, idx);
    __atomic_store_n(&l->count, l->count + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&l->held, l->held + tokens, __ATOMIC_RELAXED);
    return idx;
}

/* Drop node idx (its slot, slot_find's, deleted first by the caller). */
static void node_drop(struct lru *l, uint32_t idx)
{
    list_unlink(l, idx);
    __atomic_store_n(&l->count, l->count - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&l->held, l->held - l->nodes[idx].tokens, __ATOMIC_RELAXED);
    l->nodes[idx].next = l->free_head;
    l->free_head = idx;
}

/* Drop the least recently used link. */
static void evict_tail(struct lru *l)
{
    uint32_t idx = l->tail;
    size_t slot = slot_find(l, l->nodes[idx].h);
    if (slot != SIZE_MAX)
        slots_delete(l, slot);
    node_drop(l, idx);
}

/*
 * What a link weighs in the index: its tokens, and at least one. A link of no
 * tokens (an empty message, or a record from elsewhere that says 0) added
 * nothing to held, so eviction never came for it and such links grew the
 * index without bound; this way a replica holds at most capacity links.
 */
static uint32_t link_weight(uint32_t tokens)
{
    return tokens > 0 ? tokens : 1;
}

/* Hold link h stamped st: new, or moved to where st puts it if st is newer. */
static void hold(struct lru *l, uint64_t h, uint32_t tokens, int64_t st)
{
    size_t slot = l->nslots ? slot_find(l, h) : SIZE_MAX;
    uint32_t idx;
    if (slot == SIZE_MAX) {
        idx = node_new(l, h, link_weight(tokens));
    } else {
        idx = l->slots[slot] - 1;
        if (st <= l->nodes[idx].stamp)
            return; /* already used since */
        list_unlink(l, idx);
    }
    l->nodes[idx].stamp = st;
    list_insert_after(l, place_for(l, st), idx);
}

/* ---- lifecycle ------------------------------------------------------------------- */

struct pindex *pindex_create(size_t nrep, const int64_t *capacity)
{
    if (nrep == 0 || nrep > PINDEX_MAX_REPLICAS)
        return NULL;
    struct pindex *px = pc_calloc(1, sizeof(*px));
    px->magic = PINDEX_MAGIC;
    px->nrep = nrep;
    uint64_t key = pc_seed64(px);
    for (size_t i = 0; i < nrep; i++) {
        struct lru *l = &px->reps[i];
        l->key = key + (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15);
        pthread_mutex_init(&l->mu, NULL);
        l->capacity = capacity[i] > 0 ? capacity[i] : 1;
        l->head = l->tail = l->free_head = NIL;
        slots_grow(l);
    }
    return px;
}

void pindex_destroy(struct pindex **pp)
{
    struct pindex *px = *pp;
    if (px == NULL)
        return;
    *pp = NULL;
    for (size_t i = 0; i < px->nrep; i++) {
        free(px->reps[i].nodes);
        free(px->reps[i].slots);
        pthread_mutex_destroy(&px->reps[i].mu);
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
    return rep < px->nrep ? px->reps[rep].capacity : 0;
}

int64_t pindex_held(const struct pindex *px, size_t rep)
{
    return rep < px->nrep ? __atomic_load_n(&px->reps[rep].held, __ATOMIC_RELAXED) : 0;
}

size_t pindex_entries(const struct pindex *px)
{
    size_t n = 0;
    for (size_t i = 0; i < px->nrep; i++)
        n += __atomic_load_n(&px->reps[i].count, __ATOMIC_RELAXED);
    return n;
}

size_t pindex_longest_run(struct pindex *px, size_t rep)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (rep >= px->nrep)
        return 0;
    struct lru *l = &px->reps[rep];
    size_t longest = 0, run = 0, wrap = 0;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->nslots; i++) {
        run = l->slots[i] != 0 ? run + 1 : 0;
        if (run == i + 1)
            wrap = run; /* the run at the start continues one at the end */
        longest = PC_MAX(longest, run);
    }
    if (run < l->nslots)
        longest = PC_MAX(longest, run + wrap);
    pthread_mutex_unlock(&l->mu);
    return longest;
}

/* ---- match and record ----------------------------------------------------------- */

/* Leading links of h[0..n) replica l holds, and of those, used since fresh_stamp. */
static void match_one(struct lru *l, const uint64_t *h, size_t n, int64_t fresh_stamp,
                      uint32_t *links, uint32_t *fresh)
{
    size_t i = 0, f = SIZE_MAX;
    pthread_mutex_lock(&l->mu);
    for (; i < n; i++) {
        size_t slot = slot_find(l, h[i]);
        if (slot == SIZE_MAX)
            break;
        if (f == SIZE_MAX && l->nodes[l->slots[slot] - 1].stamp < fresh_stamp)
            f = i;
    }
    pthread_mutex_unlock(&l->mu);
    *links = (uint32_t)i;
    *fresh = fresh_stamp > 0 ? (uint32_t)PC_MIN(i, f) : 0;
}

void pindex_match(struct pindex *px, const uint64_t *h, size_t n, int64_t fresh_since_ms,
                  struct pindex_match *m)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    memset(m, 0, sizeof(*m));
    int64_t fresh_stamp = fresh_since_ms > 0 ? fresh_since_ms * PINDEX_DEPTH_STEPS : 0;
    for (size_t r = 0; r < px->nrep; r++)
        match_one(&px->reps[r], h, n, fresh_stamp, &m->links[r], &m->fresh[r]);
}

static int64_t stamp_of(int64_t ms, size_t depth)
{
    return ms * PINDEX_DEPTH_STEPS + (PINDEX_DEPTH_STEPS - 1) -
           (int64_t)PC_MIN(depth, PINDEX_DEPTH_STEPS - 1);
}

/* Hold links h[0..n) on replica rep (checked by the caller), then evict down to capacity. */
static void hold_links(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                       size_t n, size_t depth0, int64_t ms)
{
    struct lru *l = &px->reps[rep];
    pthread_mutex_lock(&l->mu);
    /* Deepest first, so that the first link ends up the newest. */
    for (size_t i = n; i-- > 0;)
        if (h[i] != 0)
            hold(l, h[i], tokens[i], stamp_of(ms, depth0 + i));
    while (l->held > l->capacity && l->tail != NIL)
        evict_tail(l);
    pthread_mutex_unlock(&l->mu);
}

/* Whether a record from elsewhere is within the ranges pc_pindex.h gives for pindex_apply. */
static bool record_ok(const struct pindex *px, size_t rep, const uint32_t *tokens, size_t n,
                      int64_t ms)
{
    if (rep >= px->nrep || ms < 0 || ms > PINDEX_MS_MAX)
        return false;
    int64_t total = 0; /* at most n * 65536: no overflow for any n an input can hold */
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] > PINDEX_LINK_TOKENS_MAX)
            return false;
        total += link_weight(tokens[i]);
    }
    return total <= px->reps[rep].capacity;
}

int pindex_apply(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens, size_t n,
                 size_t depth0, int64_t ms)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (!record_ok(px, rep, tokens, n, ms))
        return -1;
    hold_links(px, rep, h, tokens, n, depth0, ms);
    return 0;
}

void pindex_record(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                   size_t n, int64_t ms)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (rep >= px->nrep || ms < 0 || ms > PINDEX_MS_MAX)
        return; /* not a wall clock time: a bug of the caller, not worth a wrong stamp */
    hold_links(px, rep, h, tokens, n, 0, ms);
}

void pindex_publish(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                    size_t n, int64_t ms)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (rep >= px->nrep || ms < 0 || ms > PINDEX_MS_MAX)
        return;
    if (px->sink != NULL && n > 0)
        px->sink(px->sink_arg, rep, h, tokens, n, ms);
}

void pindex_forget(struct pindex *px, size_t rep, const uint64_t *h, size_t n)
{
    PC_CHECK_OBJ(px, PINDEX_MAGIC);
    if (rep >= px->nrep)
        return;
    struct lru *l = &px->reps[rep];
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n; i++) {
        size_t slot = slot_find(l, h[i]);
        if (slot == SIZE_MAX)
            continue;
        uint32_t idx = l->slots[slot] - 1;
        slots_delete(l, slot);
        node_drop(l, idx);
    }
    pthread_mutex_unlock(&l->mu);
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
