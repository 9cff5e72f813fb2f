/*
 * fuzz_pindex.c - libFuzzer target for the prefix index (src/pindex.c) fed
 * records from elsewhere: what psync reads back from Redis (another
 * instance's stream entries, a replica's set members) reaches pindex_apply
 * as any hashes, token counts, depths and times a writer chose.
 *
 * Input: byte 0 the replicas (1-4), byte 1 their capacities; then
 * operations, each an opcode byte (low two bits: apply, record, forget,
 * match; bit 2: a time from the input rather than the next tick; bit 3:
 * token counts from the input rather than the link's own) and its bytes.
 * Hashes come from a small space, so that records overlap, collide in the
 * table and evict each other. Checked after every operation, aborting on
 * violation:
 *   - pindex_apply refuses exactly what pc_pindex.h says it refuses;
 *   - no replica holds more tokens than its capacity, every link weighs a
 *     token at least, and no replica holds a link it was never given or
 *     was told to forget (a model of the links that may be held);
 *   - a match never counts more leading links than the model allows, nor
 *     more fresh ones than links;
 *   - while every record so far was made at the next tick with each link's
 *     own token count (as real records are), the links of the last record
 *     applied or made are all held by its replica (they are the newest, and
 *     weigh no more than its capacity).
 * Seed corpus: tests/fuzz/corpus/pindex/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_pindex.h"
#include "pc_util.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HSPACE   64 /* hashes 0..HSPACE-1 (0: a link without a hash, never held) */
#define MAX_OPS  512
#define MAX_LINK 32

static const int64_t capacities[] = {1, 3, 16, 100, 1000, 65536, 1 << 20, INT64_C(1) << 40};
static const uint32_t token_table[] = {0,   1,    2,     3,     7,     100,
                                       999, 4096, 65535, 65536, 65537, UINT32_MAX};

struct input {
    const uint8_t *p, *end;
};

static uint8_t next(struct input *in)
{
    return in->p < in->end ? *in->p++ : 0;
}

static uint64_t hash_of(uint8_t b)
{
    unsigned k = b % HSPACE;
    return k == 0 ? 0 : UINT64_C(0x9e3779b97f4a7c15) * k; /* spread, but a few values only */
}

/* A link's own token count, the same every time (as a real link's). */
static uint32_t own_tokens(uint64_t h)
{
    return (uint32_t)(h >> 58) % 5;
}

struct model {
    size_t nrep;
    int64_t cap[4];
    bool maybe[4][HSPACE]; /* the link may be held by the replica */
};

static unsigned slot_of(uint64_t h)
{
    for (unsigned k = 0; k < HSPACE; k++)
        if (hash_of((uint8_t)k) == h)
            return k;
    abort();
}

static void check_totals(struct pindex *px, const struct model *m)
{
    size_t maybe = 0;
    int64_t held = 0;
    for (size_t r = 0; r < m->nrep; r++) {
        int64_t h = pindex_held(px, r);
        CHECK(h >= 0 && h <= m->cap[r]);
        held += h;
        for (unsigned k = 0; k < HSPACE; k++)
            maybe += m->maybe[r][k];
    }
    size_t entries = pindex_entries(px);
    CHECK((int64_t)entries <= held); /* a link weighs a token at least */
    CHECK(entries <= maybe);
}

static void check_match(struct pindex *px, const struct model *m, const uint64_t *h, size_t n,
                        int64_t fresh_ms)
{
    struct pindex_match pm;
    pindex_match(px, h, n, fresh_ms, &pm);
    for (size_t r = 0; r < PINDEX_MAX_REPLICAS; r++) {
        if (r >= m->nrep) {
            CHECK(pm.links[r] == 0 && pm.fresh[r] == 0);
            continue;
        }
        size_t run = 0;
        while (run < n && h[run] != 0 && m->maybe[r][slot_of(h[run])])
            run++;
        CHECK(pm.links[r] <= run);
        CHECK(pm.fresh[r] <= pm.links[r]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, data + size};
    struct model m = {0};
    m.nrep = 1 + next(&in) % 4;
    uint8_t caps = next(&in);
    for (size_t r = 0; r < m.nrep; r++)
        m.cap[r] = capacities[(caps >> (2 * r)) & 7];
    struct pindex *px = pindex_create(m.nrep, m.cap);
    CHECK(px != NULL);
    int64_t clock = 1700000000000; /* wall clock ms */
    bool honest = true;            /* every record so far at the next tick, own token counts */
    for (int ops = 0; ops < MAX_OPS && in.p < in.end; ops++) {
        uint8_t op = next(&in);
        size_t rep = next(&in) % (m.nrep + 1); /* m.nrep: no such replica */
        size_t n = next(&in) % (MAX_LINK + 1);
        uint64_t h[MAX_LINK];
        uint32_t tok[MAX_LINK];
        bool distinct = true, seen[HSPACE] = {false};
        for (size_t i = 0; i < n; i++) {
            uint8_t b = next(&in);
            h[i] = hash_of(b);
            tok[i] =
                (op & 8) ? token_table[next(&in) % PC_ARRAY_LEN(token_table)] : own_tokens(h[i]);
            distinct = distinct && h[i] != 0 && !seen[b % HSPACE];
            seen[b % HSPACE] = true;
        }
        int64_t ms = ++clock;
        if (op & 4) { /* a time a writer chose: the past, the future, out of range */
            uint8_t t = next(&in);
            static const int64_t far[] = {-1, 0, PINDEX_MS_MAX, PINDEX_MS_MAX + 1, INT64_MAX};
            ms = t < 200 ? clock - (int64_t)t * 1000 : far[t % PC_ARRAY_LEN(far)];
        }
        size_t depth0 = next(&in) % 8 == 0 ? SIZE_MAX - next(&in) : next(&in);
        bool valid_time = ms >= 0 && ms <= PINDEX_MS_MAX;
        switch (op & 3) {
        case 0:
        case 1: {
            bool applied;
            if ((op & 3) == 0) {
                int64_t total = 0;
                bool ok = rep < m.nrep && valid_time;
                for (size_t i = 0; i < n; i++) {
                    ok = ok && tok[i] <= PINDEX_LINK_TOKENS_MAX;
                    total += tok[i] > 0 ? tok[i] : 1;
                }
                ok = ok && total <= m.cap[rep < m.nrep ? rep : 0];
                int rc = pindex_apply(px, rep, h, tok, n, depth0, ms);
                CHECK(rc == (ok ? 0 : -1));
                applied = ok;
            } else {
                pindex_record(px, rep, h, tok, n, ms); /* local: the caller's own counts */
                applied = rep < m.nrep && valid_time;
                depth0 = 0;
            }
            if (applied && n > 0 && (ms != clock || (op & 8)))
                honest = false;
            if (!applied)
                break;
            for (size_t i = 0; i < n; i++)
                if (h[i] != 0)
                    m.maybe[rep][slot_of(h[i])] = true;
            int64_t total = 0;
            for (size_t i = 0; i < n; i++)
                total += tok[i] > 0 ? tok[i] : 1;
            if (honest && distinct && total <= m.cap[rep]) {
                struct pindex_match pm;
                pindex_match(px, h, n, 0, &pm);
                CHECK(pm.links[rep] == n);
            }
            break;
        }
        case 2:
            pindex_forget(px, rep, h, n);
            if (rep < m.nrep)
                for (size_t i = 0; i < n; i++)
                    if (h[i] != 0)
                        m.maybe[rep][slot_of(h[i])] = false;
            break;
        default:
            check_match(px, &m, h, n, (op & 4) && valid_time ? ms : 0); /* a wall clock time */
            break;
        }
        check_totals(px, &m);
    }
    for (size_t r = 0; r < m.nrep; r++)
        CHECK(pindex_longest_run(px, r) < SIZE_MAX);
    pindex_destroy(&px);
    CHECK(px == NULL);
    return 0;
}
