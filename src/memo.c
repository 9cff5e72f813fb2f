/*
 * memo.c - a worker's memory of the request bodies it has read (pc_memo.h).
 *
 * One allocation per entry: the header below, then the input's strings and
 * body, then the facts' strings, each NUL-terminated. A slot holds at most
 * one entry; a lookup hashes the input, goes to its slot and compares every
 * byte of the input with the entry's.
 */
#include <stdlib.h>
#include <string.h>

#include "pc_memo.h"

struct memo_entry {
    uint64_t hash;
    size_t size; /* of this allocation */
    enum api_endpoint endpoint;
    bool exact_only;
    bool has_ns, has_variant;
    unsigned char tenant[PC_SHA256_LEN];
    size_t ns_len, variant_len, raw_len;
    const char *ns, *variant, *raw; /* into data */
    struct memo_facts facts;        /* strings into data */
    char data[];
};

struct memo {
    struct memo_entry *slot[MEMO_SLOTS];
    size_t count;
    size_t bytes;
    size_t cursor; /* next slot to give up when the byte budget is short */
};

struct memo *memo_create(void)
{
    return pc_calloc(1, sizeof(struct memo));
}

static void drop(struct memo *m, size_t i)
{
    struct memo_entry *e = m->slot[i];
    if (e == NULL)
        return;
    m->bytes -= e->size;
    m->count--;
    free(e);
    m->slot[i] = NULL;
}

void memo_destroy(struct memo **mp)
{
    struct memo *m = *mp;
    if (m == NULL)
        return;
    for (size_t i = 0; i < MEMO_SLOTS; i++)
        drop(m, i);
    free(m);
    *mp = NULL;
}

/* Eight bytes at a time, then the tail: spreads slots, proves nothing (every byte is compared). */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    const uint64_t k = UINT64_C(0x9e3779b97f4a7c15);
    for (; n >= 8; n -= 8, s += 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * k;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ (uint64_t)n) * k;
    return h ^ (h >> 32);
}

uint64_t memo_hash(const struct memo_input *in)
{
    if (in->raw_len > MEMO_MAX_BODY)
        return 0; /* never kept: not worth hashing */
    uint64_t h = mix(PC_FNV_SEED ^ ((uint64_t)in->endpoint << 1 | in->exact_only), in->tenant,
                     PC_SHA256_LEN);
    if (in->ns != NULL)
        h = mix(h ^ 1, in->ns, strlen(in->ns));
    if (in->variant != NULL)
        h = mix(h ^ 2, in->variant, strlen(in->variant));
    return mix(h, in->raw, in->raw_len);
}

static bool same_str(bool has, const char *s, size_t len, const char *want)
{
    if (want == NULL)
        return !has;
    return has && strlen(want) == len && memcmp(s, want, len) == 0;
}

static bool matches(const struct memo_entry *e, uint64_t hash, const struct memo_input *in)
{
    return e->hash == hash && e->endpoint == in->endpoint && e->exact_only == in->exact_only &&
           e->raw_len == in->raw_len && memcmp(e->tenant, in->tenant, PC_SHA256_LEN) == 0 &&
           same_str(e->has_ns, e->ns, e->ns_len, in->ns) &&
           same_str(e->has_variant, e->variant, e->variant_len, in->variant) &&
           memcmp(e->raw, in->raw, in->raw_len) == 0;
}

const struct memo_facts *memo_get(struct memo *m, const struct memo_input *in, uint64_t hash)
{
    if (m == NULL || in->raw_len > MEMO_MAX_BODY)
        return NULL;
    const struct memo_entry *e = m->slot[hash % MEMO_SLOTS];
    return e != NULL && matches(e, hash, in) ? &e->facts : NULL;
}

/* Copy s[0..n) and a NUL to *at; returns where it went. */
static const char *put_str(char **at, const char *s, size_t n)
{
    char *p = *at;
    memcpy(p, s, n);
    p[n] = '\0';
    *at = p + n + 1;
    return p;
}

void memo_put(struct memo *m, const struct memo_input *in, uint64_t hash,
              const struct memo_facts *f)
{
    if (m == NULL || in->raw_len > MEMO_MAX_BODY)
        return;
    size_t ns_len = in->ns ? strlen(in->ns) : 0, var_len = in->variant ? strlen(in->variant) : 0;
    size_t lut_len = f->last_user_text ? strlen(f->last_user_text) : 0;
    size_t model_len = f->model ? strlen(f->model) : 0;
    size_t size =
        sizeof(struct memo_entry) + ns_len + var_len + in->raw_len + lut_len + model_len + 5;
    size_t i = hash % MEMO_SLOTS;
    drop(m, i);
    /* Short of budget: give up other slots, in turn, until it fits. */
    for (size_t n = 0; m->bytes + size > MEMO_MAX_BYTES && n < MEMO_SLOTS; n++) {
        drop(m, m->cursor);
        m->cursor = (m->cursor + 1) % MEMO_SLOTS;
    }
    if (m->bytes + size > MEMO_MAX_BYTES)
        return;
    struct memo_entry *e = pc_malloc(size);
    memset(e, 0, sizeof(*e));
    e->hash = hash;
    e->size = size;
    e->endpoint = in->endpoint;
    e->exact_only = in->exact_only;
    memcpy(e->tenant, in->tenant, PC_SHA256_LEN);
    char *at = e->data;
    e->has_ns = in->ns != NULL;
    e->ns = put_str(&at, in->ns ? in->ns : "", ns_len);
    e->ns_len = ns_len;
    e->has_variant = in->variant != NULL;
    e->variant = put_str(&at, in->variant ? in->variant : "", var_len);
    e->variant_len = var_len;
    e->raw = put_str(&at, in->raw, in->raw_len);
    e->raw_len = in->raw_len;
    e->facts = *f;
    e->facts.last_user_text = f->last_user_text ? put_str(&at, f->last_user_text, lut_len) : NULL;
    e->facts.model = f->model ? put_str(&at, f->model, model_len) : NULL;
    m->slot[i] = e;
    m->count++;
    m->bytes += size;
}

size_t memo_count(const struct memo *m)
{
    return m ? m->count : 0;
}

size_t memo_bytes(const struct memo *m)
{
    return m ? m->bytes : 0;
}
