/*
 * ngram.c - hashed word, bigram and character n-gram features, the part of
 * a vector both embedders share (see embed_int.h). Owns no state.
 *
 * Each feature is a string (a type byte, then the bytes) hashed to one of
 * hash_dim buckets with a +/- sign taken from another bit of the hash, so
 * that two unrelated features landing in the same bucket cancel out on
 * average instead of adding up (the "hashing trick").
 */
#include "embed_int.h"

#include <math.h>
#include <string.h>

#include "pc_util.h"

enum feature_type {
    F_WORD = 'w',
    F_BIGRAM = 'b',
    F_CHAR = 'c',
};

/* FNV-1a finished with a multiply-xorshift mix, so every output bit depends on every input bit. */
static uint64_t feature_hash(enum feature_type t, const char *a, size_t an, const char *b,
                             size_t bn)
{
    unsigned char tb = (unsigned char)t;
    uint64_t h = pc_fnv1a(PC_FNV_SEED, &tb, 1);
    h = pc_fnv1a(h, a, an);
    if (b != NULL) {
        h = pc_fnv1a(h, " ", 1);
        h = pc_fnv1a(h, b, bn);
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}

static void add_feature(float *out, int dim, uint64_t h, float w)
{
    uint32_t bucket = (uint32_t)(((h >> 32) * (uint64_t)dim) >> 32);
    out[bucket] += (h & 1) ? w : -w;
}

/* Character n-grams of sizes nmin..nmax over "<w>", spread so their norm is about wt. */
static void add_chars(const struct embed_opts *o, const char *w, size_t n, float wt, float *out)
{
    char pad[TEXT_TOK_MAX + 4];
    pad[0] = '<';
    memcpy(pad + 1, w, n);
    pad[n + 1] = '>';
    size_t len = n + 2, count = 0;
    for (int k = o->char_min; k <= o->char_max; k++)
        count += len >= (size_t)k ? len - (size_t)k + 1 : 0;
    if (count == 0)
        return;
    float each = wt / sqrtf((float)count);
    for (int k = o->char_min; k <= o->char_max; k++)
        for (size_t i = 0; i + (size_t)k <= len; i++)
            add_feature(out, o->hash_dim, feature_hash(F_CHAR, pad + i, (size_t)k, NULL, 0), each);
}

void embed_ngrams(const struct embed_opts *o, const struct embed_scratch *s, float *out)
{
    const struct text_doc *d = &s->doc;
    char prev[TEXT_TOK_MAX + 2];
    size_t prevn = 0;
    float prevw = 0;
    for (size_t i = 0; i < d->n; i++) {
        const struct text_tok *t = &d->tok[i];
        float w = s->w[i];
        if (w <= 0)
            continue;
        const char *form = s->form[i] != NULL ? s->form[i] : text_str(d, i);
        size_t n = s->form[i] != NULL ? s->formlen[i] : t->len;
        char sing[TEXT_TOK_MAX + 2];
        size_t sn = n;
        if (t->kind == TEXT_WORD)
            sn = text_singular(form, n, sing);
        else
            memcpy(sing, form, n + 1);
        if (o->w_word > 0)
            add_feature(out, o->hash_dim, feature_hash(F_WORD, sing, sn, NULL, 0), o->w_word * w);
        if (o->w_char > 0 && o->char_min > 0 && t->kind == TEXT_WORD)
            add_chars(o, form, n, o->w_char * w, out);
        if (prevn > 0 && o->w_bigram > 0)
            add_feature(out, o->hash_dim, feature_hash(F_BIGRAM, prev, prevn, sing, sn),
                        o->w_bigram * sqrtf(prevw * w));
        memcpy(prev, sing, sn);
        prevn = sn;
        prevw = w;
    }
}
