/*
 * l1.c - the process's L1 of hot exact answers (see pc_l1.h): the sharded
 * table, its filler thread, and the handler that applies other instances'
 * writes, deletes and flushes read from the Redis stream by the process's
 * follower (pc_follow.h).
 *
 * Owns every item (refcounted: the table holds one reference, each lookup in
 * progress one more), the shards' locks and stamps and its metrics row.
 */
#include "pc_l1.h"
#include "pc_conf.h"
#include "pc_follow.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_vindex.h"
#include "pc_vsync.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define L1_MAGIC       0x4c314341u /* "L1CA" */
#define ITEM_MAGIC     0x4c314954u /* "L1IT" */
#define L1_SHARDS      16u
#define BUCKETS_MIN    64u
#define ITEM_OVERHEAD  16u /* what malloc adds to each item, roughly */
#define AUTO_FRACTION  32
#define AUTO_MAX       (512ll << 20)
#define AUTO_FALLBACK  (64ll << 20)
#define FILL_LINGER_MS 20   /* the filler gathers inserts this long after a batch */
#define SHARD_STAMPS   1024 /* per shard: keys share a stamp 1 in L1_SHARDS x SHARD_STAMPS */

struct l1_item {
    unsigned magic;
    atomic_int refs;
    struct l1_item *hnext;       /* bucket chain */
    struct l1_item *prev, *next; /* LRU list: head = most recent */
    int64_t deadline_ms;
    /* l1_now_ms when Redis last told what the key holds (the insert, or a check): see
     * l1_item_check_due */
    _Atomic int64_t checked_ms;
    size_t len;
    char tenant[L1_TENANT_LEN];
    unsigned char exact[PC_SHA256_LEN];
    char data[];
};

/* An insert on its way to the filler thread. */
struct l1_job {
    struct l1_job *next;
    int64_t deadline_ms;
    uint64_t gen;
    size_t len;
    char tenant[L1_TENANT_LEN];
    unsigned char exact[PC_SHA256_LEN];
    char data[];
};

/*
 * When the keys hashing to it last changed (a delete, another instance's
 * write, this process's own write): an insert read before is older than the
 * change and is dropped. The last changed key is known by a fingerprint, so
 * a change of one key drops the inserts of another sharing its stamp only
 * when a third change came in between (its generation moves to other).
 */
struct stamp {
    uint64_t last;  /* generation of the last change, of the key with fingerprint fp */
    uint64_t other; /* the latest change of any other key */
    uint32_t fp;
    /*
     * This process's writes of keys here whose outcome it does not know (l1_unsure): their
     * own stream events are applied like another instance's. Of the key with fingerprint
     * doubt_fp, or of any key here when two such keys met (doubt_any).
     */
    uint32_t doubts;
    uint32_t doubt_fp;
    bool doubt_any;
};

struct shard {
    pthread_mutex_t mu;
    struct l1_item **buckets;
    size_t nbuckets; /* a power of two */
    size_t items;
    size_t bytes;
    struct l1_item *head, *tail;
    struct stamp stamps[SHARD_STAMPS];
};

struct l1 {
    unsigned magic;
    size_t max_bytes;
    size_t shard_bytes; /* each shard's budget */
    struct shard shards[L1_SHARDS];
    atomic_uint_fast64_t generation; /* bumped by every change; read before a Redis command */
    atomic_uint_fast64_t cleared;    /* the generation of the last clear */
    atomic_bool live;
    atomic_uint_fast64_t inserts, evictions, expired, clears, events, dropped, stale;
    struct stats *row; /* l1_events_rejected (registered: the reader writes it) */

    /*
     * The filler: items are long-lived, so they are allocated on a thread of their own.
     * Made among a worker's short-lived allocations they fragmented its malloc arena until
     * every malloc of the request path slowed down (an L1 of 167k entries cost hits 20%).
     */
    bool filling;
    pthread_t filler;
    pthread_mutex_t qmu;
    pthread_cond_t qcond; /* signalled when work comes to an idle filler, half a queue, stop */
    struct l1_job *qhead, *qtail;
    size_t qbytes;
    bool qstop;
    bool qidle; /* the filler waits for work (not lingering) */
};

int64_t l1_size_bytes(const struct conf *c)
{
    if (c->l1_size >= 0)
        return c->l1_size;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return AUTO_FALLBACK;
    int64_t mem = (int64_t)pages * (int64_t)page;
    return PC_MIN(mem / AUTO_FRACTION, (int64_t)AUTO_MAX);
}

/* What an item of len bytes counts against the budget: itself, its header and malloc's share. */
static size_t item_size(size_t len)
{
    return sizeof(struct l1_item) + len + ITEM_OVERHEAD;
}

static size_t item_bytes(const struct l1_item *it)
{
    return item_size(it->len);
}

static uint64_t hash_of(const unsigned char exact[PC_SHA256_LEN])
{
    uint64_t h;
    memcpy(&h, exact, sizeof(h)); /* a SHA-256: already uniform */
    return h;
}

static struct shard *shard_of(struct l1 *l, uint64_t h)
{
    return &l->shards[h % L1_SHARDS];
}

static size_t bucket_of(const struct shard *s, uint64_t h)
{
    return (size_t)(h / L1_SHARDS) & (s->nbuckets - 1);
}

static struct stamp *stamp_of(struct shard *s, uint64_t h)
{
    return &s->stamps[(h >> 40) % SHARD_STAMPS]; /* other bits than the bucket's */
}

static uint32_t fingerprint(const unsigned char exact[PC_SHA256_LEN])
{
    uint32_t fp;
    memcpy(&fp, exact + 8, sizeof(fp)); /* bytes hash_of does not use */
    return fp;
}

/* A new generation, for a change made now. */
static uint64_t bump(struct l1 *l)
{
    return atomic_fetch_add(&l->generation, 1) + 1;
}

/* Shard lock held: whether something read at generation gen is older than a change of it. */
static bool stale(struct l1 *l, struct shard *s, const unsigned char exact[PC_SHA256_LEN],
                  uint64_t gen)
{
    const struct stamp *st = stamp_of(s, hash_of(exact));
    return atomic_load(&l->cleared) > gen || st->other > gen ||
           (st->fp == fingerprint(exact) && st->last > gen);
}

/* Shard lock held: the key changed at generation now. */
static void stamp(struct shard *s, const unsigned char exact[PC_SHA256_LEN], uint64_t now)
{
    struct stamp *st = stamp_of(s, hash_of(exact));
    uint32_t fp = fingerprint(exact);
    if (st->fp != fp) {
        st->other = PC_MAX(st->other, st->last);
        st->fp = fp;
    }
    st->last = now;
}

static void *filler_main(void *arg);

int64_t l1_now_ms(void)
{
    return (int64_t)pc_mono_ms();
}

struct l1 *l1_create(int64_t max_bytes)
{
    if (max_bytes <= 0)
        return NULL;
    struct l1 *l = pc_calloc(1, sizeof(*l));
    l->magic = L1_MAGIC;
    l->max_bytes = (size_t)max_bytes;
    l->shard_bytes = l->max_bytes / L1_SHARDS;
    for (size_t i = 0; i < L1_SHARDS; i++) {
        struct shard *s = &l->shards[i];
        pthread_mutex_init(&s->mu, NULL);
        s->nbuckets = BUCKETS_MIN;
        s->buckets = pc_calloc(s->nbuckets, sizeof(*s->buckets));
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->qcond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&l->qmu, NULL);
    /* Its own metrics row, registered like the workers' before they start (see server.c). */
    l->row = aligned_alloc(64, sizeof(*l->row));
    if (l->row == NULL)
        abort();
    memset(l->row, 0, sizeof(*l->row));
    stats_register(l->row);
    if (pthread_create(&l->filler, NULL, filler_main, l) == 0)
        l->filling = true;
    else
        log_error("l1: cannot start its filler thread; the L1 stays empty");
    return l;
}

static void item_unref(struct l1_item *it)
{
    if (atomic_fetch_sub_explicit(&it->refs, 1, memory_order_acq_rel) == 1) {
        it->magic = 0;
        free(it);
    }
}

/* ---- the table (each function takes or holds one shard's lock) ----------------------- */

static void lru_unlink(struct shard *s, struct l1_item *it)
{
    if (it->prev != NULL)
        it->prev->next = it->next;
    else
        s->head = it->next;
    if (it->next != NULL)
        it->next->prev = it->prev;
    else
        s->tail = it->prev;
    it->prev = it->next = NULL;
}

static void lru_push(struct shard *s, struct l1_item *it)
{
    it->prev = NULL;
    it->next = s->head;
    if (s->head != NULL)
        s->head->prev = it;
    s->head = it;
    if (s->tail == NULL)
        s->tail = it;
}

/* Take it out of the shard (lock held) and drop the table's reference. */
static void shard_remove(struct shard *s, struct l1_item *it)
{
    struct l1_item **pp = &s->buckets[bucket_of(s, hash_of(it->exact))];
    while (*pp != it)
        pp = &(*pp)->hnext;
    *pp = it->hnext;
    lru_unlink(s, it);
    s->items--;
    s->bytes -= item_bytes(it);
    item_unref(it);
}

static struct l1_item *shard_find(struct shard *s, uint64_t h, const char *tenant,
                                  const unsigned char *exact)
{
    for (struct l1_item *it = s->buckets[bucket_of(s, h)]; it != NULL; it = it->hnext)
        if (memcmp(it->exact, exact, PC_SHA256_LEN) == 0 &&
            memcmp(it->tenant, tenant, L1_TENANT_LEN) == 0)
            return it;
    return NULL;
}

static void shard_grow(struct shard *s)
{
    size_t n = s->nbuckets * 2;
    struct l1_item **b = pc_calloc(n, sizeof(*b));
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct l1_item *it = s->buckets[i];
        while (it != NULL) {
            struct l1_item *next = it->hnext;
            size_t j = (size_t)(hash_of(it->exact) / L1_SHARDS) & (n - 1);
            it->hnext = b[j];
            b[j] = it;
            it = next;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = n;
}

struct l1_item *l1_get(struct l1 *l, const char tenant[L1_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN], int64_t now_ms)
{
    if (l == NULL || !atomic_load_explicit(&l->live, memory_order_acquire))
        return NULL;
    uint64_t h = hash_of(exact);
    struct shard *s = shard_of(l, h);
    pthread_mutex_lock(&s->mu);
    struct l1_item *it = shard_find(s, h, tenant, exact);
    if (it != NULL && it->deadline_ms <= now_ms) {
        shard_remove(s, it);
        atomic_fetch_add_explicit(&l->expired, 1, memory_order_relaxed);
        it = NULL;
    }
    if (it != NULL) {
        if (s->head != it) {
            lru_unlink(s, it);
            lru_push(s, it);
        }
        atomic_fetch_add_explicit(&it->refs, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&s->mu);
    return it;
}

bool l1_item_check_due(struct l1_item *it, int64_t now_ms)
{
    int64_t was = atomic_load_explicit(&it->checked_ms, memory_order_relaxed);
    return now_ms - was >= L1_CHECK_MS &&
           atomic_compare_exchange_strong_explicit(&it->checked_ms, &was, now_ms,
                                                   memory_order_relaxed, memory_order_relaxed);
}

const char *l1_item_data(const struct l1_item *it, size_t *len)
{
    *len = it->len;
    return it->data;
}

void l1_release(struct l1_item **itp)
{
    struct l1_item *it = *itp;
    if (it == NULL)
        return;
    *itp = NULL;
    PC_CHECK_OBJ(it, ITEM_MAGIC);
    item_unref(it);
}

/* On the filler thread: the item is allocated here, in this thread's malloc arena. */
static void insert_now(struct l1 *l, const struct l1_job *j)
{
    if (!atomic_load(&l->live) || j->deadline_ms <= l1_now_ms())
        return;
    const char *tenant = j->tenant;
    const unsigned char *exact = j->exact;
    size_t len = j->len;
    uint64_t gen = j->gen;
    size_t need = item_size(len);
    struct l1_item *it = pc_malloc(sizeof(*it) + len);
    memset(it, 0, sizeof(*it));
    it->magic = ITEM_MAGIC;
    atomic_init(&it->refs, 1);
    it->deadline_ms = j->deadline_ms;
    atomic_init(&it->checked_ms, l1_now_ms());
    it->len = len;
    memcpy(it->tenant, tenant, L1_TENANT_LEN);
    memcpy(it->exact, exact, PC_SHA256_LEN);
    memcpy(it->data, j->data, len);
    uint64_t h = hash_of(exact);
    struct shard *s = shard_of(l, h);
    pthread_mutex_lock(&s->mu);
    /* Checked under the lock: a change stamps its key (or clears) under it after the bump. */
    if (stale(l, s, exact, gen)) {
        pthread_mutex_unlock(&s->mu);
        free(it);
        atomic_fetch_add_explicit(&l->stale, 1, memory_order_relaxed);
        return;
    }
    struct l1_item *old = shard_find(s, h, tenant, exact);
    if (old != NULL)
        shard_remove(s, old);
    while (s->bytes + need > l->shard_bytes && s->tail != NULL) {
        shard_remove(s, s->tail);
        atomic_fetch_add_explicit(&l->evictions, 1, memory_order_relaxed);
    }
    if (s->items >= s->nbuckets)
        shard_grow(s);
    size_t b = bucket_of(s, h);
    it->hnext = s->buckets[b];
    s->buckets[b] = it;
    lru_push(s, it);
    s->items++;
    s->bytes += need;
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&l->inserts, 1, memory_order_relaxed);
}

/* The queue's cap (l1_put drops beyond it); the filler is woken at half of it. */
static size_t queue_cap(const struct l1 *l)
{
    return l->max_bytes / 8;
}

/*
 * Waits for work, takes the whole queue and inserts it. After a batch it
 * lingers FILL_LINGER_MS, not woken by each insert, so that a run of misses
 * costs the filler one wake-up per linger rather than one per miss (each one
 * a context switch taken from the workers' cores). Half a queue, or stop,
 * ends the linger early. An answer reaches the L1 up to FILL_LINGER_MS after
 * it was stored in Redis; a repeat meanwhile is a Redis hit.
 */
static void *filler_main(void *arg)
{
    struct l1 *l = arg;
    bool linger = false;
    pthread_mutex_lock(&l->qmu);
    for (;;) {
        if (linger) {
            struct timespec ts = pc_mono_after(FILL_LINGER_MS);
            while (!l->qstop && l->qbytes < queue_cap(l) / 2 &&
                   pthread_cond_timedwait(&l->qcond, &l->qmu, &ts) == 0) {
            }
        }
        while (l->qhead == NULL && !l->qstop) {
            l->qidle = true;
            pthread_cond_wait(&l->qcond, &l->qmu);
        }
        l->qidle = false;
        linger = true;
        struct l1_job *batch = l->qhead;
        l->qhead = l->qtail = NULL;
        l->qbytes = 0;
        bool stop = l->qstop;
        pthread_mutex_unlock(&l->qmu);
        while (batch != NULL) {
            struct l1_job *next = batch->next;
            if (!stop)
                insert_now(l, batch);
            free(batch);
            batch = next;
        }
        pthread_mutex_lock(&l->qmu);
        if (stop)
            break;
    }
    pthread_mutex_unlock(&l->qmu);
    return NULL;
}

/* Whether an item of len bytes until deadline_ms would be taken now. */
static bool wanted(const struct l1 *l, size_t len, int64_t deadline_ms)
{
    return l->filling && atomic_load(&l->live) && deadline_ms > l1_now_ms() &&
           item_size(len) <= l->shard_bytes / 8;
}

bool l1_keeps(const struct l1 *l, size_t len)
{
    return l != NULL && wanted(l, len, INT64_MAX);
}

/* Hand the insert to the filler (dropped, and counted, when its queue is full). */
static void enqueue(struct l1 *l, const char tenant[L1_TENANT_LEN],
                    const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
                    int64_t deadline_ms, uint64_t gen)
{
    /* A short-lived copy in the caller's arena; the long-lived item is made by the filler. */
    struct l1_job *j = pc_malloc(sizeof(*j) + len);
    j->next = NULL;
    j->deadline_ms = deadline_ms;
    j->gen = gen;
    j->len = len;
    memcpy(j->tenant, tenant, L1_TENANT_LEN);
    memcpy(j->exact, exact, PC_SHA256_LEN);
    memcpy(j->data, val, len);
    pthread_mutex_lock(&l->qmu);
    size_t cap = queue_cap(l);
    if (l->qstop || l->qbytes + len > cap) {
        pthread_mutex_unlock(&l->qmu);
        free(j);
        atomic_fetch_add_explicit(&l->dropped, 1, memory_order_relaxed);
        return;
    }
    bool wake =
        (l->qidle && l->qhead == NULL) || (l->qbytes < cap / 2 && l->qbytes + len >= cap / 2);
    if (l->qtail != NULL)
        l->qtail->next = j;
    else
        l->qhead = j;
    l->qtail = j;
    l->qbytes += len;
    pthread_mutex_unlock(&l->qmu);
    if (wake) /* after the unlock: the filler does not wake only to wait for the lock */
        pthread_cond_signal(&l->qcond);
}

void l1_put(struct l1 *l, const char tenant[L1_TENANT_LEN],
            const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
            int64_t deadline_ms, uint64_t gen)
{
    if (l != NULL && wanted(l, len, deadline_ms))
        enqueue(l, tenant, exact, val, len, deadline_ms, gen);
}

/*
 * Remove (tenant, exact) and stamp its key with a new generation, so that
 * nothing read before now goes in after; the caller holds no lock. The
 * generation is returned, and whether an insert read at gen was already
 * older than a change (a delete or another write came in between).
 */
static uint64_t change(struct l1 *l, const char tenant[L1_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN], uint64_t gen, bool *was_stale)
{
    uint64_t h = hash_of(exact);
    struct shard *s = shard_of(l, h);
    pthread_mutex_lock(&s->mu);
    *was_stale = stale(l, s, exact, gen);
    uint64_t now = bump(l);
    stamp(s, exact, now);
    struct l1_item *it = shard_find(s, h, tenant, exact);
    if (it != NULL)
        shard_remove(s, it);
    pthread_mutex_unlock(&s->mu);
    return now;
}

void l1_replace(struct l1 *l, const char tenant[L1_TENANT_LEN],
                const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
                int64_t deadline_ms, uint64_t gen)
{
    if (l == NULL)
        return;
    bool was_stale;
    uint64_t now = change(l, tenant, exact, gen, &was_stale);
    /* Written before a change we know of: which of the two Redis kept is unknown. */
    if (val != NULL && was_stale)
        atomic_fetch_add_explicit(&l->stale, 1, memory_order_relaxed);
    else if (val != NULL && wanted(l, len, deadline_ms))
        enqueue(l, tenant, exact, val, len, deadline_ms, now);
}

void l1_unsure(struct l1 *l, const char tenant[L1_TENANT_LEN],
               const unsigned char exact[PC_SHA256_LEN])
{
    if (l == NULL)
        return;
    /* The doubt first: an own event coming before the change below is applied too. */
    uint64_t h = hash_of(exact);
    struct shard *s = shard_of(l, h);
    pthread_mutex_lock(&s->mu);
    struct stamp *st = stamp_of(s, h);
    uint32_t fp = fingerprint(exact);
    if (st->doubts == 0)
        st->doubt_fp = fp;
    else if (st->doubt_fp != fp)
        st->doubt_any = true;
    if (st->doubts < UINT32_MAX)
        st->doubts++;
    pthread_mutex_unlock(&s->mu);
    bool was_stale;
    change(l, tenant, exact, 0, &was_stale);
}

/*
 * This process's own write event of (tenant, exact): whether it may be a write l1_unsure
 * doubted (then it is applied as another instance's would be; one doubt is used up).
 */
static bool own_write_doubted(struct l1 *l, const unsigned char exact[PC_SHA256_LEN])
{
    uint64_t h = hash_of(exact);
    struct shard *s = shard_of(l, h);
    pthread_mutex_lock(&s->mu);
    struct stamp *st = stamp_of(s, h);
    bool doubted = st->doubts > 0 && (st->doubt_any || st->doubt_fp == fingerprint(exact));
    if (doubted && --st->doubts == 0)
        st->doubt_any = false;
    pthread_mutex_unlock(&s->mu);
    return doubted;
}

void l1_delete(struct l1 *l, const char tenant[L1_TENANT_LEN],
               const unsigned char exact[PC_SHA256_LEN])
{
    if (l == NULL)
        return;
    bool was_stale;
    change(l, tenant, exact, 0, &was_stale);
}

/* Note a clear at a new generation (kept the highest when clears race). */
static void mark_cleared(struct l1 *l)
{
    uint64_t now = bump(l), seen = atomic_load(&l->cleared);
    while (seen < now && !atomic_compare_exchange_weak(&l->cleared, &seen, now)) {
    }
}

void l1_clear(struct l1 *l, const char *tenant)
{
    if (l == NULL)
        return;
    mark_cleared(l);
    atomic_fetch_add_explicit(&l->clears, 1, memory_order_relaxed);
    for (size_t i = 0; i < L1_SHARDS; i++) {
        struct shard *s = &l->shards[i];
        pthread_mutex_lock(&s->mu);
        struct l1_item *it = s->head;
        while (it != NULL) {
            struct l1_item *next = it->next;
            if (tenant == NULL || memcmp(it->tenant, tenant, L1_TENANT_LEN) == 0)
                shard_remove(s, it);
            it = next;
        }
        pthread_mutex_unlock(&s->mu);
    }
}

bool l1_live(const struct l1 *l)
{
    return l != NULL && atomic_load(&l->live);
}

uint64_t l1_generation(const struct l1 *l)
{
    return l != NULL ? atomic_load(&l->generation) : 0;
}

void l1_get_counters(const struct l1 *l, struct l1_counters *out)
{
    memset(out, 0, sizeof(*out));
    if (l == NULL)
        return;
    struct l1 *m = (struct l1 *)l; /* the locks */
    for (size_t i = 0; i < L1_SHARDS; i++) {
        struct shard *s = &m->shards[i];
        pthread_mutex_lock(&s->mu);
        out->items += s->items;
        out->bytes += s->bytes;
        pthread_mutex_unlock(&s->mu);
    }
    out->live = atomic_load(&m->live);
    out->max_bytes = l->max_bytes;
    out->inserts = atomic_load(&m->inserts);
    out->evictions = atomic_load(&m->evictions);
    out->expired = atomic_load(&m->expired);
    out->clears = atomic_load(&m->clears);
    out->events = atomic_load(&m->events);
    out->dropped = atomic_load(&m->dropped);
    out->stale = atomic_load(&m->stale);
}

/* ---- series (pc_stats.h) ---------------------------------------------------------- */

#define L1_SERIES(X)                                                                               \
    X(live, "l1_live", "l1_live", "gauge", 0,                                                      \
      "Whether the in-process L1 serves hits (1), or is off because its stream reader lost "       \
      "Redis (0); absent with l1-size 0",                                                          \
      stat_bool(v, s->live))                                                                       \
    X(items, "l1_items", NULL, "gauge", 0, "Answers the L1 holds", stat_int(v, (int64_t)s->items)) \
    X(bytes, "l1_bytes", NULL, "gauge", 0, "Bytes they take, with their bookkeeping",              \
      stat_int(v, (int64_t)s->bytes))                                                              \
    X(max_bytes, "l1_max_bytes", NULL, "gauge", 0, "The L1's budget (l1-size)",                    \
      stat_int(v, (int64_t)s->max_bytes))                                                          \
    X(inserts, "l1_inserts", NULL, "counter", 0, "Answers put into the L1",                        \
      stat_int(v, (int64_t)s->inserts))                                                            \
    X(evictions, "l1_evictions", NULL, "counter", 0, "Answers evicted to make room",               \
      stat_int(v, (int64_t)s->evictions))                                                          \
    X(expired, "l1_expired", NULL, "counter", 0, "Answers found past their Redis key's expiry",    \
      stat_int(v, (int64_t)s->expired))                                                            \
    X(clears, "l1_clears", NULL, "counter", 0,                                                     \
      "Times the L1 was emptied (a flush, or its reader lost Redis)",                              \
      stat_int(v, (int64_t)s->clears))                                                             \
    X(events, "l1_events", NULL, "counter", 0, "Stream events the L1's reader applied",            \
      stat_int(v, (int64_t)s->events))                                                             \
    X(dropped, "l1_dropped", NULL, "counter", 0,                                                   \
      "Inserts dropped: the filler's queue was full (l1-size / 8 bytes)",                          \
      stat_int(v, (int64_t)s->dropped))                                                            \
    X(stale, "l1_stale", NULL, "counter", 0,                                                       \
      "Inserts dropped: their key changed after they were read or written",                        \
      stat_int(v, (int64_t)s->stale))

#define L1_READ(id, name, prom, kind, dec, help, stmt) STAT_READER(l1, struct l1_counters, id, stmt)
#define L1_ROW(id, name, prom, kind, dec, help, stmt)  STAT_ROW(l1, id, name, prom, kind, dec, help)
L1_SERIES(L1_READ)
static const struct stat_row l1_rows[] = {L1_SERIES(L1_ROW)};

static void l1_snapshot(const void *obj, void *snap)
{
    l1_get_counters(obj, snap);
}

const struct stat_group l1_series = {
    .rows = l1_rows,
    .nrows = PC_ARRAY_LEN(l1_rows),
    .snap_size = sizeof(struct l1_counters),
    .snapshot = l1_snapshot,
};

/* ---- the stream's handler (on the process's follower, pc_follow.h) ---------------- */

/* A malformed stream entry: not applied, counted. */
static void reject(struct l1 *l)
{
    stats_incr(l->row, STAT_l1_events_rejected);
}

/*
 * Apply one stream event: a flush clears, a delete or another process's
 * write (op=set) drops the key (this process's own writes are in its table
 * already, unless it did not learn whether one worked: l1_unsure). op=add
 * concerns the vector index only.
 */
static void on_entry(void *arg, const redisReply *kv)
{
    struct l1 *l = arg;
    struct vsync_event ev;
    if (vsync_event_parse(kv, &ev) < 0) {
        reject(l);
        return;
    }
    char tenant[L1_TENANT_LEN + 1];
    pc_hex(ev.tenant, VINDEX_TENANT_LEN, tenant);
    switch (ev.op) {
    case VSYNC_OP_FLUSH:
        l1_clear(l, ev.has_tenant ? tenant : NULL);
        break;
    case VSYNC_OP_SET:
        if (vsync_event_is_mine(&ev) && !own_write_doubted(l, ev.key))
            return;
        l1_delete(l, tenant, ev.key);
        break;
    case VSYNC_OP_DEL:
        l1_delete(l, tenant, ev.key);
        break;
    case VSYNC_OP_ADD:
        return;
    }
    atomic_fetch_add_explicit(&l->events, 1, memory_order_relaxed);
}

/* Following from the stream's end: what the table holds from before is dropped. */
static int on_start(void *arg, struct rcli *k)
{
    (void)k;
    struct l1 *l = arg;
    l1_clear(l, NULL);
    atomic_store(&l->live, true);
    return 0;
}

/* Off and empty: what this process missed while it could not read is unknown. */
static void on_down(void *arg)
{
    struct l1 *l = arg;
    atomic_store(&l->live, false);
    l1_clear(l, NULL);
}

int l1_follow(struct l1 *l, struct follow *f)
{
    PC_CHECK_OBJ(l, L1_MAGIC);
    struct follow_handler h = {
        .name = "L1",
        .stream = vsync_stream_key(),
        .start = on_start,
        .entry = on_entry,
        .down = on_down,
        .arg = l,
    };
    return f != NULL ? follow_add(f, &h) : -1;
}

void l1_destroy(struct l1 **lp)
{
    struct l1 *l = *lp;
    if (l == NULL)
        return;
    *lp = NULL;
    PC_CHECK_OBJ(l, L1_MAGIC);
    if (l->filling) {
        pthread_mutex_lock(&l->qmu);
        l->qstop = true;
        pthread_cond_signal(&l->qcond);
        pthread_mutex_unlock(&l->qmu);
        pthread_join(l->filler, NULL);
    }
    pthread_mutex_destroy(&l->qmu);
    pthread_cond_destroy(&l->qcond);
    atomic_store(&l->live, false);
    l1_clear(l, NULL);
    for (size_t i = 0; i < L1_SHARDS; i++) {
        pthread_mutex_destroy(&l->shards[i].mu);
        free(l->shards[i].buckets);
    }
    free(l->row); /* the process's registry is emptied right after (server_teardown) */
    l->magic = 0;
    free(l);
}
