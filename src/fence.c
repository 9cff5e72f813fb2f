/*
 * fence.c - purge fences (see pc_fence.h). Owns the process's marks: one
 * counter, the mark of the last flush, and per slot of the keys' hashes the
 * mark of the last delete there; the follower's handler that sets them.
 */
#include "pc_fence.h"
#include "pc_follow.h"
#include "pc_store.h"
#include "pc_vsync.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FENCE_MAGIC 0x46454e43u /* "FENC" */
#define FENCE_SLOTS 16384u      /* a key shares its slot with 1 in FENCE_SLOTS others */

struct fence {
    unsigned magic;
    atomic_uint_fast64_t now; /* the last mark given */
    atomic_uint_fast64_t all; /* the mark of the last flush */
    atomic_uint_fast64_t slot[FENCE_SLOTS];
};

struct fence *fence_create(void)
{
    struct fence *f = pc_calloc(1, sizeof(*f));
    f->magic = FENCE_MAGIC;
    return f;
}

void fence_destroy(struct fence **fp)
{
    struct fence *f = *fp;
    if (f == NULL)
        return;
    *fp = NULL;
    PC_CHECK_OBJ(f, FENCE_MAGIC);
    f->magic = 0;
    free(f);
}

static size_t slot_of(const unsigned char exact[PC_SHA256_LEN])
{
    uint64_t h;
    memcpy(&h, exact, sizeof(h)); /* a SHA-256: already uniform */
    return (size_t)(h % FENCE_SLOTS);
}

/* *at = max(*at, mark): marks given out of order never move a slot back. */
static void raise_to(atomic_uint_fast64_t *at, uint64_t mark)
{
    uint_fast64_t seen = atomic_load(at);
    while (seen < mark && !atomic_compare_exchange_weak(at, &seen, mark)) {
    }
}

static uint64_t next_mark(struct fence *f)
{
    return atomic_fetch_add(&f->now, 1) + 1;
}

uint64_t fence_now(const struct fence *f)
{
    return f != NULL ? atomic_load(&((struct fence *)f)->now) : 0;
}

void fence_mark(struct fence *f, const unsigned char exact[PC_SHA256_LEN])
{
    if (f != NULL)
        raise_to(&f->slot[slot_of(exact)], next_mark(f));
}

void fence_mark_all(struct fence *f)
{
    if (f != NULL)
        raise_to(&f->all, next_mark(f));
}

uint64_t fence_last(const struct fence *f, const unsigned char exact[PC_SHA256_LEN])
{
    if (f == NULL)
        return 0;
    struct fence *m = (struct fence *)f; /* the atomics */
    uint64_t all = atomic_load(&m->all), one = atomic_load(&m->slot[slot_of(exact)]);
    return PC_MAX(all, one);
}

bool fence_crossed(const struct fence *f, const unsigned char exact[PC_SHA256_LEN], uint64_t since)
{
    return fence_last(f, exact) > since;
}

static const unsigned char none[PC_SHA256_LEN]; /* the notice's tenant and key */

void fence_argv_purged(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN])
{
    vsync_argv_del(a, tenant, exact);
    vsync_argv_field(a, "p", "1", 1);
    /* who purged: its own purges set this process's fences as they started */
    vsync_argv_field(a, "i", vsync_instance(), VSYNC_INSTANCE_LEN);
}

void fence_argv_notice(struct vsync_argv *a)
{
    fence_argv_purged(a, none, none);
}

struct store_cmd *fence_notice(struct store *s, store_int_fn *cb, void *arg)
{
    struct vsync_argv a;
    fence_argv_notice(&a);
    return store_write_cb(s, a.argc, a.argv, a.lens, cb, arg);
}

/* ---- the stream's handler (on the process's follower, pc_follow.h) ------------------ */

/*
 * Another process's purge: its del events (p=1; of no entry: its notice, written before any
 * delete). A del event without p=1 drops a vector with its entry, a write (op=set) is another
 * answer, and op=add concerns the vector index: no purge. This process's own purges set its
 * fences as they started (reading their events again would hold back answers asked for
 * since). A flush event comes after the deletes its notice announced: an answer asked for
 * after the notice was read was made after the purge began, and is stored. Events that do not
 * parse are the L1's and the index's to count.
 */
void fence_apply(struct fence *f, const struct redisReply *kv)
{
    struct vsync_event ev;
    if (vsync_event_parse(kv, &ev) < 0 || !ev.purged || vsync_event_is_mine(&ev))
        return;
    if (memcmp(ev.tenant, none, VINDEX_TENANT_LEN) == 0 &&
        memcmp(ev.key, none, VINDEX_KEY_LEN) == 0)
        fence_mark_all(f);
    else
        fence_mark(f, ev.key);
}

static void on_entry(void *arg, const struct redisReply *kv)
{
    fence_apply(arg, kv);
}

/*
 * Following from the stream's end again: nothing to catch up. What came meanwhile is not
 * known, and no fence is set for it (pc_fence.h says why).
 */
static int on_start(void *arg, struct rcli *k)
{
    (void)arg;
    (void)k;
    return 0;
}

int fence_follow(struct fence *f, struct follow *fl)
{
    PC_CHECK_OBJ(f, FENCE_MAGIC);
    struct follow_handler h = {
        .name = "purge fences",
        .stream = vsync_stream_key(),
        .start = on_start,
        .entry = on_entry,
        .arg = f,
    };
    return fl != NULL ? follow_add(fl, &h) : -1;
}
