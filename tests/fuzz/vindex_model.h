/*
 * vindex_model.h - a brute-force model of the vector index (src/vindex.c)
 * and an interpreter that reads a sequence of operations from bytes, applies
 * each to the index and to the model, and checks that they agree. Shared by
 * the property test in tests/unit/test_vindex.c (bytes from a seeded
 * generator, many seeds) and tests/fuzz/fuzz_vindex.c (bytes from libFuzzer).
 *
 * The index under test is small and churns hard: dimension 8, keys 0..4095
 * in 3 partitions and 3 tenants, flat_max 128 (so IVF builds, purges and the
 * return to exact search all happen, and a partition passes 1024 slots and
 * compacts), every IVF list probed. With float codes (the default here) the
 * IVF answers must equal brute force; with SQ8 codes (first input byte odd)
 * only that every hit is right, not that none is missing.
 *
 * Input: byte 0 is the mode, then operations of 9 bytes each: an opcode
 * (taken modulo 13) and 8 argument bytes, of which each operation reads what
 * it needs from the start (u16: little-endian); missing bytes read as zero
 * and the sequence ends with the input:
 *
 *   op  name        arguments                       does
 *   0   ADD         key:u16 part tenant ttl vseed   add or replace (moves if part differs)
 *   1   ADD_RUN     base:u16 count part tenant ttl  (count+1)*8 keys from base, distinct vectors
 *   2   ADD_NEAR    key:u16 src:u16 part nseed      a near-duplicate of src's vector
 *   3   REMOVE      key:u16                         vindex_remove
 *   4   REMOVE_RUN  base:u16 count stride           (count+1)*8 keys, every (stride%4+1)-th
 *   5   REFRESH     key:u16 ttl                     the same vector again, a new expiry
 *   6   EXPIRE      advance                         the clock moves; vindex_expire
 *   7   TENANT      tenant                          vindex_remove_tenant
 *   8   MAINTAIN                                    vindex_maintain (IVF builds)
 *   9   GEN         which                           even: generation_begin, odd: sweep_before
 *   10  CLEAR       arg                             vindex_clear when arg < 16
 *   11  SEARCH      part src:u16 qseed k thr        compared with brute force
 *   12  BAD_VEC     key:u16 kind                    a zero or NaN vector: refused, no change
 *
 * ttl 0 means never expires, else the entry expires ttl % 32 clock units
 * from now (0: already expired). Checked after every operation: return
 * values (removed or not, how many swept), the number of vectors; after
 * MAINTAIN the number of partitions; after CLEAR the memory accounting back
 * to the empty index's. A failed check calls vm_fail (the includer's).
 */
#ifndef PC_VINDEX_MODEL_H
#define PC_VINDEX_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_vindex.h"

#define VM_DIM      8
#define VM_KEYS     4096
#define VM_PARTS    3
#define VM_TENANTS  3
#define VM_FLAT_MAX 128
#define VM_EPS      1e-4f
#define VM_T0       1000000
#define VM_ARGS     8 /* argument bytes of every operation */

/* What to do when the index and the model disagree: the includer's (abort, or a test failure). */
static void vm_fail(const char *what, unsigned long long got, unsigned long long want);

struct vm_key {
    bool present;
    uint8_t part, tenant;
    int64_t expires;
    uint32_t gen;
    float vec[VM_DIM];
};

struct vm {
    struct vindex *v;
    bool exact; /* float codes: IVF answers must equal brute force */
    int64_t now;
    uint32_t gen;
    size_t present;
    size_t in_part[VM_PARTS]; /* present keys per partition */
    size_t empty_bytes;
    /* Coverage, over every run of this struct vm (vm_open keeps them). */
    size_t most_in_part; /* the largest partition reached */
    uint64_t builds;     /* IVF builds that served a partition */
    uint64_t runs, ops;
    uint32_t run_seed;
    const uint8_t *in;
    size_t len, pos;
    struct vm_key keys[VM_KEYS];
};

/* --- inputs ----------------------------------------------------------------------- */

static uint8_t vm_u8(struct vm *m)
{
    return m->pos < m->len ? m->in[m->pos++] : 0;
}

static unsigned vm_u16(struct vm *m)
{
    unsigned lo = vm_u8(m);
    return lo | (unsigned)vm_u8(m) << 8;
}

static uint64_t vm_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Keys, partitions and tenants from small numbers; a key's bytes 8..11 say its number. */
static void vm_key_bytes(unsigned id, unsigned char out[VINDEX_KEY_LEN])
{
    uint64_t h = vm_mix(id);
    memset(out, 0, VINDEX_KEY_LEN);
    memcpy(out, &h, sizeof(h));
    memcpy(out + 8, &id, sizeof(id));
}

static void vm_part_bytes(unsigned n, unsigned char out[VINDEX_PART_LEN])
{
    for (unsigned i = 0; i < VINDEX_PART_LEN; i += 8) {
        uint64_t h = vm_mix(0x5041525400000000ull + n * 64 + i);
        memcpy(out + i, &h, sizeof(h));
    }
}

static void vm_tenant_bytes(unsigned n, unsigned char out[VINDEX_TENANT_LEN])
{
    uint64_t h = vm_mix(0x54454e0000000000ull + n);
    memcpy(out, &h, VINDEX_TENANT_LEN);
}

/* A unit vector from a seed: components uniform in [-1, 1). */
static void vm_vec(uint64_t seed, float out[VM_DIM])
{
    double n = 0;
    for (int i = 0; i < VM_DIM; i++) {
        seed = vm_mix(seed);
        out[i] = (float)((double)(seed >> 11) / 4503599627370496.0 - 1.0);
        n += (double)out[i] * out[i];
    }
    if (n == 0) {
        out[0] = 1;
        n = 1;
    }
    for (int i = 0; i < VM_DIM; i++)
        out[i] = (float)(out[i] / sqrt(n));
}

static void vm_near(const float *src, uint64_t seed, float noise, float out[VM_DIM])
{
    float d[VM_DIM];
    vm_vec(seed, d);
    double n = 0;
    for (int i = 0; i < VM_DIM; i++) {
        out[i] = src[i] + noise * d[i];
        n += (double)out[i] * out[i];
    }
    for (int i = 0; i < VM_DIM; i++)
        out[i] = (float)(out[i] / sqrt(n));
}

static int64_t vm_expiry(const struct vm *m, uint8_t ttl)
{
    return ttl == 0 ? 0 : m->now + (ttl & 31);
}

static bool vm_live(const struct vm *m, const struct vm_key *k)
{
    return k->present && !(k->expires != 0 && k->expires <= m->now);
}

/* --- the checks ------------------------------------------------------------------- */

static void vm_check_count(struct vm *m)
{
    struct vindex_stats st;
    vindex_get_stats(m->v, &st);
    if (st.vectors != m->present)
        vm_fail("vectors in the index", st.vectors, m->present);
}

static void vm_check_partitions(struct vm *m)
{
    size_t used = 0;
    for (unsigned p = 0; p < VM_PARTS; p++)
        used += m->in_part[p] > 0;
    struct vindex_stats st;
    vindex_get_stats(m->v, &st);
    if (st.partitions != used)
        vm_fail("partitions after maintain", st.partitions, used);
}

static double vm_dot(const float *a, const float *b)
{
    double s = 0;
    for (int i = 0; i < VM_DIM; i++)
        s += (double)a[i] * b[i];
    return s;
}

static int vm_cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The number of a hit's key, or -1 if its bytes are not one of the model's keys. */
static int vm_hit_id(const struct vindex_hit *h)
{
    unsigned id;
    unsigned char want[VINDEX_KEY_LEN];
    memcpy(&id, h->key + 8, sizeof(id));
    if (id >= VM_KEYS)
        return -1;
    vm_key_bytes(id, want);
    return memcmp(want, h->key, VINDEX_KEY_LEN) == 0 ? (int)id : -1;
}

/*
 * Every hit is a live key of the partition, once, with its tenant, expiry and
 * exact similarity, at or above min_sim, best first. With exact answers also:
 * the hits are the model's top k (similarities equal rank by rank) and none
 * is missing (up to VM_EPS at the threshold, where float rounding decides).
 */
static void vm_search(struct vm *m, unsigned part, const float *q, size_t k, float min_sim)
{
    static struct vindex_hit hits[VINDEX_K_MAX];
    static float best[VM_KEYS];
    static bool seen[VM_KEYS];
    unsigned char pb[VINDEX_PART_LEN];
    vm_part_bytes(part, pb);
    size_t n = vindex_search(m->v, pb, q, k, min_sim, m->now, hits);
    if (n > k)
        vm_fail("more hits than asked for", n, k);
    memset(seen, 0, sizeof(seen));
    for (size_t i = 0; i < n; i++) {
        int id = vm_hit_id(&hits[i]);
        if (id < 0)
            vm_fail("a hit's key is not a key that was added", i, 0);
        const struct vm_key *key = &m->keys[id];
        unsigned char t[VINDEX_TENANT_LEN];
        vm_tenant_bytes(key->tenant, t);
        if (!vm_live(m, key) || key->part != part || seen[id])
            vm_fail("a hit is removed, expired, of another partition or repeated", (unsigned)id,
                    key->present);
        seen[id] = true;
        if (memcmp(t, hits[i].tenant, VINDEX_TENANT_LEN) != 0 || hits[i].expires_ms != key->expires)
            vm_fail("a hit's tenant or expiry", (unsigned)id, (unsigned long long)key->expires);
        if (fabs(hits[i].similarity - vm_dot(q, key->vec)) > VM_EPS || hits[i].similarity < min_sim)
            vm_fail("a hit's similarity", (unsigned)id, 0);
        if (i > 0 && hits[i].similarity > hits[i - 1].similarity)
            vm_fail("hits not best first", i, 0);
    }
    if (!m->exact)
        return;
    size_t nb = 0, above = 0, near = 0;
    for (unsigned i = 0; i < VM_KEYS; i++)
        if (vm_live(m, &m->keys[i]) && m->keys[i].part == part) {
            float s = (float)vm_dot(q, m->keys[i].vec);
            above += s >= min_sim + VM_EPS;
            near += s >= min_sim - VM_EPS;
            best[nb++] = s;
        }
    qsort(best, nb, sizeof(*best), vm_cmp_desc);
    if (n < (above < k ? above : k) || n > (near < k ? near : k))
        vm_fail("hits found, against brute force", n, above < k ? above : k);
    for (size_t i = 0; i < n; i++)
        if (fabsf(hits[i].similarity - best[i]) > VM_EPS)
            vm_fail("a better vector was missed, at rank", i, nb);
}

/* Every stride-th live key is found by its own vector (unless more than 16 share it). */
static void vm_check_keys(struct vm *m, unsigned stride)
{
    struct vindex_hit hits[16];
    for (unsigned i = 0; i < VM_KEYS; i += stride) {
        const struct vm_key *key = &m->keys[i];
        if (!vm_live(m, key))
            continue;
        unsigned char pb[VINDEX_PART_LEN];
        vm_part_bytes(key->part, pb);
        size_t n = vindex_search(m->v, pb, key->vec, 16, 0.999f, m->now, hits);
        bool found = n == 16;
        for (size_t j = 0; j < n && !found; j++)
            found = vm_hit_id(&hits[j]) == (int)i;
        if (!found && m->exact)
            vm_fail("a live key is not found by its own vector", i, n);
    }
}

/* --- operations ------------------------------------------------------------------- */

/* Add key id (the model follows only if the index accepts it; it must, for these vectors). */
static void vm_add(struct vm *m, unsigned id, unsigned part, unsigned tenant, int64_t expires,
                   const float *vec)
{
    struct vindex_item it;
    unsigned char pb[VINDEX_PART_LEN];
    vm_key_bytes(id, it.key);
    vm_tenant_bytes(tenant, it.tenant);
    it.expires_ms = expires;
    vm_part_bytes(part, pb);
    if (vindex_add(m->v, pb, &it, vec) != 0)
        vm_fail("vindex_add refused a unit vector", id, 0);
    struct vm_key *k = &m->keys[id];
    if (k->present)
        m->in_part[k->part]--;
    else
        m->present++;
    if (++m->in_part[part] > m->most_in_part)
        m->most_in_part = m->in_part[part];
    *k = (struct vm_key){true, (uint8_t)part, (uint8_t)tenant, expires, m->gen, {0}};
    memcpy(k->vec, vec, sizeof(k->vec));
}

static void vm_remove(struct vm *m, unsigned id)
{
    unsigned char key[VINDEX_KEY_LEN];
    vm_key_bytes(id, key);
    bool had = m->keys[id].present;
    if (vindex_remove(m->v, key) != had)
        vm_fail("vindex_remove's answer", !had, had);
    if (had) {
        m->present--;
        m->in_part[m->keys[id].part]--;
    }
    m->keys[id].present = false;
}

enum vm_sweep { VM_EXPIRED, VM_TENANT, VM_OLDER };

/* Remove from the model what a sweep must remove; how many. */
static size_t vm_sweep(struct vm *m, enum vm_sweep what, unsigned arg)
{
    size_t n = 0;
    for (unsigned i = 0; i < VM_KEYS; i++) {
        struct vm_key *k = &m->keys[i];
        bool gone = what == VM_EXPIRED  ? k->expires != 0 && k->expires <= m->now
                    : what == VM_TENANT ? k->tenant == arg
                                        : k->gen < arg;
        if (k->present && gone) {
            k->present = false;
            m->in_part[k->part]--;
            n++;
        }
    }
    m->present -= n;
    return n;
}

static void op_add(struct vm *m)
{
    unsigned id = vm_u16(m) % VM_KEYS, part = vm_u8(m) % VM_PARTS, t = vm_u8(m) % VM_TENANTS;
    int64_t exp = vm_expiry(m, vm_u8(m));
    float vec[VM_DIM];
    vm_vec(vm_u8(m), vec); /* 256 vectors: equal ones (ties) are common */
    vm_add(m, id, part, t, exp, vec);
}

static void op_add_run(struct vm *m)
{
    unsigned base = vm_u16(m), count = (vm_u8(m) + 1u) * 8, part = vm_u8(m) % VM_PARTS;
    unsigned t = vm_u8(m) % VM_TENANTS;
    int64_t exp = vm_expiry(m, vm_u8(m));
    float vec[VM_DIM];
    for (unsigned i = 0; i < count; i++) {
        vm_vec(0x100000000ull + m->run_seed++, vec);
        vm_add(m, (base + i) % VM_KEYS, part, t, exp, vec);
    }
}

static void op_add_near(struct vm *m)
{
    unsigned id = vm_u16(m) % VM_KEYS, src = vm_u16(m) % VM_KEYS, part = vm_u8(m) % VM_PARTS;
    unsigned seed = vm_u8(m);
    float vec[VM_DIM], base[VM_DIM];
    if (m->keys[src].present)
        memcpy(base, m->keys[src].vec, sizeof(base));
    else
        vm_vec(src, base);
    vm_near(base, 0x200000000ull + seed, 0.05f, vec);
    vm_add(m, id, part, 1, 0, vec);
}

static void op_remove_run(struct vm *m)
{
    unsigned base = vm_u16(m), count = (vm_u8(m) + 1u) * 8, stride = vm_u8(m) % 4 + 1;
    for (unsigned i = 0; i < count; i += stride)
        vm_remove(m, (base + i) % VM_KEYS);
}

static void op_refresh(struct vm *m)
{
    unsigned id = vm_u16(m) % VM_KEYS;
    int64_t exp = vm_expiry(m, vm_u8(m));
    struct vm_key k = m->keys[id];
    if (k.present)
        vm_add(m, id, k.part, k.tenant, exp, k.vec);
}

static void op_expire(struct vm *m)
{
    m->now += vm_u8(m) % 16;
    size_t want = vm_sweep(m, VM_EXPIRED, 0);
    size_t got = vindex_expire(m->v, m->now);
    if (got != want)
        vm_fail("vindex_expire's count", got, want);
}

static void op_tenant(struct vm *m)
{
    unsigned t = vm_u8(m) % VM_TENANTS;
    unsigned char tb[VINDEX_TENANT_LEN];
    vm_tenant_bytes(t, tb);
    size_t want = vm_sweep(m, VM_TENANT, t);
    size_t got = vindex_remove_tenant(m->v, tb);
    if (got != want)
        vm_fail("vindex_remove_tenant's count", got, want);
}

static void op_gen(struct vm *m)
{
    if (vm_u8(m) % 2 == 0) {
        uint32_t g = vindex_generation_begin(m->v);
        if (g != m->gen + 1)
            vm_fail("vindex_generation_begin", g, m->gen + 1);
        m->gen = g;
        return;
    }
    size_t want = vm_sweep(m, VM_OLDER, m->gen);
    size_t got = vindex_sweep_before(m->v, m->gen);
    if (got != want)
        vm_fail("vindex_sweep_before's count", got, want);
}

static void op_clear(struct vm *m)
{
    if (vm_u8(m) >= 16)
        return;
    vindex_clear(m->v);
    for (unsigned i = 0; i < VM_KEYS; i++)
        m->keys[i].present = false;
    m->present = 0;
    memset(m->in_part, 0, sizeof(m->in_part));
    vindex_maintain(m->v); /* drops the references queued builds held */
    struct vindex_stats st;
    vindex_get_stats(m->v, &st);
    if (st.bytes != m->empty_bytes || st.partitions != 0)
        vm_fail("memory accounted after a clear", st.bytes, m->empty_bytes);
}

static void op_search(struct vm *m)
{
    static const float thr[4] = {-1.0f, 0.3f, 0.95f, 0.8f};
    unsigned part = vm_u8(m) % VM_PARTS, src = vm_u16(m) % VM_KEYS, seed = vm_u8(m);
    size_t k = vm_u8(m) % 32 + 1;
    float min_sim = thr[vm_u8(m) % 4];
    float q[VM_DIM];
    if (m->keys[src].present)
        vm_near(m->keys[src].vec, 0x300000000ull + seed, 0.02f * (float)(seed % 4), q);
    else
        vm_vec(0x400000000ull + seed, q);
    vm_search(m, part, q, k, min_sim);
}

static void op_bad_vec(struct vm *m)
{
    unsigned id = vm_u16(m) % VM_KEYS;
    float bad[VM_DIM] = {0};
    if (vm_u8(m) % 2)
        bad[1] = NAN;
    struct vindex_item it;
    unsigned char pb[VINDEX_PART_LEN];
    vm_key_bytes(id, it.key);
    vm_tenant_bytes(0, it.tenant);
    it.expires_ms = 0;
    vm_part_bytes(0, pb);
    if (vindex_add(m->v, pb, &it, bad) != -1)
        vm_fail("vindex_add took a zero or NaN vector", id, 0);
}

/* --- the driver ------------------------------------------------------------------- */

/* The index the model is checked against; NULL if it cannot be made. */
static struct vindex *vm_open(struct vm *m, bool sq8)
{
    size_t most = m->most_in_part;
    uint64_t builds = m->builds, runs = m->runs, ops = m->ops;
    memset(m, 0, sizeof(*m));
    m->most_in_part = most;
    m->builds = builds;
    m->runs = runs + 1;
    m->ops = ops;
    struct vindex_opts o = {
        .dim = VM_DIM, .flat_max = VM_FLAT_MAX, .nprobe = 4096, .ivf_flat = !sq8};
    m->v = vindex_create(&o);
    m->exact = !sq8;
    m->now = VM_T0;
    m->gen = 1; /* vindex_create's first generation */
    if (m->v != NULL) {
        struct vindex_stats st;
        vindex_get_stats(m->v, &st);
        m->empty_bytes = st.bytes;
    }
    return m->v;
}

/* Run the operations in data on a fresh index and the model, then look every stride-th key up. */
static void vm_run(struct vm *m, const uint8_t *data, size_t size, unsigned stride)
{
    if (vm_open(m, size > 0 && (data[0] & 1)) == NULL)
        vm_fail("vindex_create", 0, 1);
    m->in = data;
    m->len = size;
    m->pos = 1;
    while (m->pos < m->len) {
        size_t next = m->pos + 1 + VM_ARGS;
        switch (vm_u8(m) % 13) {
        case 0:
            op_add(m);
            break;
        case 1:
            op_add_run(m);
            break;
        case 2:
            op_add_near(m);
            break;
        case 3:
            vm_remove(m, vm_u16(m) % VM_KEYS);
            break;
        case 4:
            op_remove_run(m);
            break;
        case 5:
            op_refresh(m);
            break;
        case 6:
            op_expire(m);
            break;
        case 7:
            op_tenant(m);
            break;
        case 8:
            vindex_maintain(m->v);
            vm_check_partitions(m);
            break;
        case 9:
            op_gen(m);
            break;
        case 10:
            op_clear(m);
            break;
        case 11:
            op_search(m);
            break;
        default:
            op_bad_vec(m);
            break;
        }
        m->pos = next;
        m->ops++;
        vm_check_count(m);
    }
    vindex_maintain(m->v);
    vm_check_partitions(m);
    vm_check_keys(m, stride);
    struct vindex_stats st;
    vindex_get_stats(m->v, &st);
    m->builds += st.builds;
    vindex_destroy(&m->v);
}

#endif
