/*
 * test_pindex.c - the prefix index: leading-link matches per replica, fresh
 * links, exact LRU eviction to each replica's capacity (oldest first, prompt
 * tails before heads; a link of no tokens weighs one), links forgotten, records applied from
 * elsewhere, the sink, bytes-per-token calibration, and workers matching and recording at once.
 */
#include "t.h"

#include "pc_pindex.h"

#include <pthread.h>

static void chain_of(uint64_t seed, size_t n, uint64_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = seed * 1000003 + i + 1;
}

static const uint32_t tok100[16] = {100, 100, 100, 100, 100, 100, 100, 100,
                                    100, 100, 100, 100, 100, 100, 100, 100};

static void test_match(void)
{
    int64_t cap[3] = {1000000, 1000000, 1000000};
    struct pindex *px = pindex_create(3, cap);
    uint64_t a[8], b[8];
    chain_of(1, 8, a);
    memcpy(b, a, sizeof(b));
    b[5] = 999; /* b shares a's first 5 links */
    pindex_record(px, 0, a, tok100, 8, 1000);
    pindex_record(px, 2, a, tok100, 3, 1000);
    struct pindex_match m;
    pindex_match(px, b, 8, 0, &m);
    T_CHECK_INT(m.links[0], 5);
    T_CHECK_INT(m.links[1], 0);
    T_CHECK_INT(m.links[2], 3);
    T_CHECK_INT(pindex_held(px, 0), 800);
    T_CHECK_INT(pindex_held(px, 2), 300);
    T_CHECK_INT(pindex_entries(px), 11); /* per replica: 8 + 3 */
    /* Fresh: links used since a time. */
    pindex_record(px, 0, a, tok100, 2, 5000);
    pindex_match(px, a, 8, 4000, &m);
    T_CHECK_INT(m.links[0], 8);
    T_CHECK_INT(m.fresh[0], 2);
    T_CHECK_INT(m.fresh[2], 0);
    /* A hole ends the match, as in an engine's cache. */
    uint64_t c[3] = {a[0], 12345, a[2]};
    pindex_match(px, c, 3, 0, &m);
    T_CHECK_INT(m.links[0], 1);
    pindex_destroy(&px);
    T_CHECK(px == NULL);
}

static void test_eviction(void)
{
    int64_t cap[2] = {1000, 1000000};
    struct pindex *px = pindex_create(2, cap);
    uint64_t old[6], mid[6], young[6];
    chain_of(1, 6, old);
    chain_of(2, 6, mid);
    chain_of(3, 6, young);
    pindex_record(px, 0, old, tok100, 6, 1000);
    pindex_record(px, 0, mid, tok100, 4, 2000);
    T_CHECK_INT(pindex_held(px, 0), 1000);
    /* Over capacity: the oldest links go, the tail of a prompt before its head. */
    pindex_record(px, 0, young, tok100, 3, 3000);
    T_CHECK_INT(pindex_held(px, 0), 1000);
    struct pindex_match m;
    pindex_match(px, old, 6, 0, &m);
    T_CHECK_INT(m.links[0], 3); /* old lost its last three links */
    pindex_match(px, mid, 4, 0, &m);
    T_CHECK_INT(m.links[0], 4);
    pindex_match(px, young, 3, 0, &m);
    T_CHECK_INT(m.links[0], 3);
    /* Replica 1 is not affected, and a link both hold stays for 1. */
    pindex_record(px, 1, old, tok100, 6, 1000);
    pindex_match(px, old, 6, 0, &m);
    T_CHECK_INT(m.links[1], 6);
    /* Using a prefix again makes it young. */
    pindex_record(px, 0, old, tok100, 2, 4000);
    pindex_record(px, 0, young + 3, tok100, 3, 5000);
    pindex_match(px, old, 2, 0, &m);
    T_CHECK_INT(m.links[0], 2);
    pindex_destroy(&px);
}

static void test_apply_stamps(void)
{
    int64_t cap[1] = {500};
    struct pindex *px = pindex_create(1, cap);
    uint64_t a[4], b[4];
    chain_of(7, 4, a);
    chain_of(8, 4, b);
    /* Two links applied separately, as a restore from Redis does, keep their depths. */
    pindex_apply(px, 0, &a[0], tok100, 1, 0, 1000);
    pindex_apply(px, 0, &a[1], tok100, 1, 1, 1000);
    pindex_apply(px, 0, b, tok100, 2, 0, 1000);
    pindex_apply(px, 0, &a[2], tok100, 1, 2, 1000);
    T_CHECK_INT(pindex_held(px, 0), 500);
    /* Full: at equal times the deepest link goes first (here the one just applied). */
    pindex_apply(px, 0, &a[3], tok100, 1, 3, 1000);
    T_CHECK_INT(pindex_held(px, 0), 500);
    struct pindex_match m;
    pindex_match(px, a, 4, 0, &m);
    T_CHECK_INT(m.links[0], 3);
    pindex_match(px, b, 2, 0, &m);
    T_CHECK_INT(m.links[0], 2);
    pindex_destroy(&px);
}

/*
 * Issue 20.5: records from elsewhere are input. A time so large that its
 * stamp overflowed (UBSan aborted), a link of 2^32 - 1 tokens (it evicted the
 * replica's whole index) or links together beyond the replica's capacity are
 * refused whole; the index is as it was.
 */
/*
 * A record from elsewhere older than every link a full replica holds (a set
 * member restored at a reconnect, evicted here long ago) is the first to go:
 * it was placed at most APPLY_WALK links behind the newest and evicted the
 * oldest link, newer than itself.
 */
static void test_apply_old(void)
{
    int64_t cap[1] = {200};
    struct pindex *px = pindex_create(1, cap);
    static const uint32_t one[1] = {1};
    for (uint64_t k = 0; k < 200; k++) {
        uint64_t h = 1000 + k;
        pindex_record(px, 0, &h, one, 1, 5000 + (int64_t)k);
    }
    uint64_t stale = 77, oldest = 1000;
    T_CHECK_INT(pindex_apply(px, 0, &stale, one, 1, 0, 10), 0);
    struct pindex_match m;
    pindex_match(px, &stale, 1, 0, &m);
    T_CHECK_INT(m.links[0], 0); /* evicted at once */
    pindex_match(px, &oldest, 1, 0, &m);
    T_CHECK_INT(m.links[0], 1); /* the oldest of those newer than it stays */
    /* Older than the oldest but one: it goes right before that one's turn. */
    uint64_t mid = 78, second = 1001;
    T_CHECK_INT(pindex_apply(px, 0, &mid, one, 1, 0, 5000), 0);
    pindex_match(px, &mid, 1, 0, &m);
    T_CHECK_INT(m.links[0], 1);
    pindex_match(px, &oldest, 1, 0, &m);
    T_CHECK_INT(m.links[0], 0); /* the oldest went for it */
    pindex_match(px, &second, 1, 0, &m);
    T_CHECK_INT(m.links[0], 1);
    T_CHECK_INT(pindex_held(px, 0), 200);
    pindex_destroy(&px);
}

/*
 * Links another writer chose so that they share a slot of the hash table
 * under its old fixed mix (h times a known odd constant, its bits from 20
 * up): every lookup walked one run of all of them, so a full replica's
 * worth of such records held its mutex (every pick's match) for minutes.
 * The mix is keyed per process now: such links spread like any others.
 */
static void test_apply_flood(void)
{
    int64_t cap[1] = {100000};
    struct pindex *px = pindex_create(1, cap);
    const uint64_t g = UINT64_C(0x9e3779b97f4a7c15);
    uint64_t inv = g; /* g's inverse mod 2^64, by Newton's steps */
    for (int i = 0; i < 6; i++)
        inv *= 2 - g * inv;
    static const uint32_t one[1] = {1};
    const size_t n = 20000;
    size_t applied = 0;
    for (uint64_t k = 1; k <= n; k++) {
        uint64_t h = (k << 44) * inv;
        applied += pindex_apply(px, 0, &h, one, 1, 0, 1000 + (int64_t)k) == 0;
    }
    T_CHECK_INT(applied, n);
    T_CHECK_INT(pindex_entries(px), n);
    size_t run = pindex_longest_run(px, 0);
    T_CHECK(run < 1000); /* random links: under 100 in 200 runs */
    if (run >= 1000)
        fprintf(stderr, "    longest run %zu of %zu links\n", run, n);
    struct pindex_match m;
    uint64_t first = (UINT64_C(1) << 44) * inv;
    pindex_match(px, &first, 1, 0, &m);
    T_CHECK_INT(m.links[0], 1);
    pindex_destroy(&px);
}

static void test_apply_forged(void)
{
    int64_t cap[2] = {10000, 10000};
    struct pindex *px = pindex_create(2, cap);
    uint64_t a[4], f[2];
    chain_of(11, 4, a);
    chain_of(12, 2, f);
    pindex_record(px, 0, a, tok100, 4, 1000);
    static const int64_t bad_ms[] = {INT64_MAX, PINDEX_MS_MAX + 1, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof(bad_ms) / sizeof(bad_ms[0]); i++)
        T_CHECK_INT(pindex_apply(px, 0, f, tok100, 2, 0, bad_ms[i]), -1);
    uint32_t huge[2] = {100, UINT32_MAX}, over_link[2] = {100, PINDEX_LINK_TOKENS_MAX + 1};
    uint32_t over_cap[2] = {6000, 6000};
    T_CHECK_INT(pindex_apply(px, 0, f, huge, 2, 0, 2000), -1);
    T_CHECK_INT(pindex_apply(px, 0, f, over_link, 2, 0, 2000), -1);
    T_CHECK_INT(pindex_apply(px, 0, f, over_cap, 2, 0, 2000), -1);
    T_CHECK_INT(pindex_apply(px, 2, f, tok100, 2, 0, 2000), -1); /* no replica 2 */
    T_CHECK_INT(pindex_held(px, 0), 400);
    T_CHECK_INT(pindex_entries(px), 4);
    struct pindex_match m;
    pindex_match(px, a, 4, 0, &m);
    T_CHECK_INT(m.links[0], 4);
    pindex_match(px, f, 2, 0, &m);
    T_CHECK_INT(m.links[0], 0);
    /* At the limits: applied, and the stamps still order (the newest first). */
    uint32_t at_link[2] = {PINDEX_LINK_TOKENS_MAX, 100};
    cap[1] = PINDEX_LINK_TOKENS_MAX + 100;
    struct pindex *big = pindex_create(2, cap);
    T_CHECK_INT(pindex_apply(big, 1, f, at_link, 2, 0, PINDEX_MS_MAX), 0);
    T_CHECK_INT(pindex_held(big, 1), PINDEX_LINK_TOKENS_MAX + 100);
    T_CHECK_INT(pindex_apply(big, 1, a, tok100, 1, 0, 0), 0); /* evicts the oldest: a */
    pindex_match(big, f, 2, 0, &m);
    T_CHECK_INT(m.links[1], 2);
    T_CHECK_INT(pindex_apply(px, 0, f, tok100, 2, 0, 2000), 0);
    pindex_destroy(&big);
    pindex_destroy(&px);
}

/* Links of no tokens weigh one: a replica holds at most capacity links, whatever they say. */
static void test_zero_tokens(void)
{
    int64_t cap[1] = {100};
    struct pindex *px = pindex_create(1, cap);
    static const uint32_t zero[16];
    uint64_t h[16];
    for (uint64_t k = 0; k < 100; k++) {
        chain_of(100 + k, 16, h);
        pindex_record(px, 0, h, zero, 16, 1000 + (int64_t)k);
        T_CHECK_INT(pindex_apply(px, 0, h, zero, 16, 0, 1000 + (int64_t)k) == 0, 1);
        T_CHECK(pindex_entries(px) <= 100);
    }
    T_CHECK_INT(pindex_entries(px), 100);
    T_CHECK_INT(pindex_held(px, 0), 100);
    /* A record of more zero-token links than the capacity describes no prompt it could keep. */
    uint64_t many[101];
    uint32_t none[101] = {0};
    chain_of(7, 101, many);
    T_CHECK_INT(pindex_apply(px, 0, many, none, 101, 0, 5000), -1);
    pindex_destroy(&px);
}

/* Forgotten links are no longer held; the rest (and eviction) go on as before. */
static void test_forget(void)
{
    int64_t cap[2] = {1000, 1000};
    struct pindex *px = pindex_create(2, cap);
    uint64_t a[6], b[4];
    chain_of(21, 6, a);
    chain_of(22, 4, b);
    pindex_record(px, 0, a, tok100, 6, 1000);
    pindex_record(px, 1, a, tok100, 6, 1000);
    pindex_forget(px, 0, a + 3, 3);
    pindex_forget(px, 0, b, 4); /* not held: nothing */
    pindex_forget(px, 5, a, 6); /* no replica 5 */
    struct pindex_match m;
    pindex_match(px, a, 6, 0, &m);
    T_CHECK_INT(m.links[0], 3);
    T_CHECK_INT(m.links[1], 6);
    T_CHECK_INT(pindex_held(px, 0), 300);
    T_CHECK_INT(pindex_entries(px), 9);
    /* The list is sound: filling replica 0 evicts the oldest (a's), keeps b. */
    pindex_record(px, 0, b, tok100, 4, 2000);
    uint64_t c[4];
    chain_of(23, 4, c);
    pindex_record(px, 0, c, tok100, 4, 3000);
    T_CHECK_INT(pindex_held(px, 0), 1000);
    pindex_match(px, a, 6, 0, &m);
    T_CHECK_INT(m.links[0], 2);
    pindex_match(px, b, 4, 0, &m);
    T_CHECK_INT(m.links[0], 4);
    pindex_forget(px, 0, c, 4);
    pindex_forget(px, 0, b, 4);
    pindex_forget(px, 0, a, 6);
    T_CHECK_INT(pindex_held(px, 0), 0);
    pindex_record(px, 0, a, tok100, 6, 4000);
    pindex_match(px, a, 6, 0, &m);
    T_CHECK_INT(m.links[0], 6);
    pindex_destroy(&px);
}

struct heard {
    size_t calls, rep, n;
    int64_t ms;
};

static void sink(void *arg, size_t rep, const uint64_t *h, const uint32_t *tokens, size_t n,
                 int64_t ms)
{
    (void)h;
    (void)tokens;
    struct heard *s = arg;
    s->calls++;
    s->rep = rep;
    s->n = n;
    s->ms = ms;
}

static void test_sink(void)
{
    int64_t cap[2] = {1000, 1000};
    struct pindex *px = pindex_create(2, cap);
    struct heard s = {0, 0, 0, 0};
    pindex_set_sink(px, sink, &s);
    uint64_t a[3];
    chain_of(5, 3, a);
    pindex_record(px, 1, a, tok100, 3, 42); /* not told until the call is answered */
    T_CHECK_INT(s.calls, 0);
    pindex_publish(px, 1, a, tok100, 3, 42);
    T_CHECK_INT(s.calls, 1);
    T_CHECK_INT(s.rep, 1);
    T_CHECK_INT(s.n, 3);
    T_CHECK_INT(s.ms, 42);
    pindex_apply(px, 0, a, tok100, 3, 0, 43); /* from elsewhere: not told again */
    T_CHECK_INT(s.calls, 1);
    pindex_destroy(&px);
}

static void test_cpt(void)
{
    int64_t cap[1] = {1000};
    struct pindex *px = pindex_create(1, cap);
    T_CHECK(pindex_cpt(px, "m") == 4.0);
    for (int i = 0; i < 50; i++)
        pindex_calibrate(px, "m", 3000, 1000);
    T_CHECK(pindex_cpt(px, "m") > 2.95 && pindex_cpt(px, "m") < 3.1);
    T_CHECK(pindex_cpt(px, "other") == 4.0);
    pindex_calibrate(px, "tiny", 10, 2); /* too small to learn from */
    T_CHECK(pindex_cpt(px, "tiny") == 4.0);
    T_CHECK_INT(pindex_tokens(4.0, 4000), 1000);
    T_CHECK_INT(pindex_tokens(4.0, 1), 1);
    T_CHECK_INT(pindex_tokens(4.0, 0), 0);
    pindex_destroy(&px);
}

/* ---- concurrency: workers matching and recording at once ------------------------- */

struct worker_arg {
    struct pindex *px;
    int id;
};

static void *hammer(void *arg)
{
    struct worker_arg *w = arg;
    uint64_t h[16];
    struct pindex_match m;
    for (int i = 0; i < 3000; i++) {
        chain_of((uint64_t)(i % 97), 16, h);
        pindex_match(w->px, h, 16, 0, &m);
        pindex_record(w->px, (size_t)(w->id + i) % 3, h, tok100, 1 + (size_t)i % 16, i);
    }
    return NULL;
}

static void test_threads(void)
{
    int64_t cap[3] = {20000, 20000, 20000};
    struct pindex *px = pindex_create(3, cap);
    pthread_t t[4];
    struct worker_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct worker_arg){px, i};
        pthread_create(&t[i], NULL, hammer, &a[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (size_t r = 0; r < 3; r++) {
        T_CHECK(pindex_held(px, r) > 0);
        T_CHECK(pindex_held(px, r) <= 20000);
    }
    pindex_destroy(&px);
}

int main(void)
{
    T_RUN(test_match);
    T_RUN(test_eviction);
    T_RUN(test_apply_stamps);
    T_RUN(test_apply_forged);
    T_RUN(test_zero_tokens);
    T_RUN(test_forget);
    T_RUN(test_apply_old);
    T_RUN(test_apply_flood);
    T_RUN(test_sink);
    T_RUN(test_cpt);
    T_RUN(test_threads);
    T_DONE();
}
