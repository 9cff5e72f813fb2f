/*
 * embed_int.h - what the embedders under src/embed/ share with embed.c: the
 * operations table each embedder fills in (twemproxy proto/ style), the
 * embedder object, and the hashed n-gram features both embedders use.
 * Private to the embed module: nothing outside src/embed.c and src/embed/
 * includes it.
 */
#ifndef PC_EMBED_INT_H
#define PC_EMBED_INT_H

#include "pc_embed.h"
#include "pc_text.h"

struct embedder;

#define EMBED_FIXES_MAX 4 /* words per text an embedder may try to respell (typo fixes) */

/*
 * Scratch of one embed_text call (too big for a small thread stack): the
 * tokens, and per token its weight and the form its features are made of
 * (form[i] NULL = the token as written; an embedder may point it at a
 * corrected spelling in fixed[]).
 */
struct embed_scratch {
    struct text_doc doc;
    float w[TEXT_MAX_TOKENS];
    const char *form[TEXT_MAX_TOKENS];
    uint8_t formlen[TEXT_MAX_TOKENS];
    char fixed[EMBED_FIXES_MAX][TEXT_TOK_MAX + 2];
};

struct embed_ops {
    const char *name;
    /* Set e->dim, e->space, e->threshold, e->impl; 0, or -1 with err set. */
    int (*open)(struct embedder *e, char *err, size_t errlen);
    void (*close)(struct embedder *e);
    /*
     * Write the (not yet normalised) vector of s->doc into out[0..dim), which
     * is zeroed. s->w[] arrives with 0 for filler tokens and 1 otherwise;
     * s->form[] all NULL.
     */
    void (*embed)(const struct embedder *e, struct embed_scratch *s, float *out);
};

#define EMBEDDER_MAGIC 0x454d4244u /* "EMBD" */

struct embedder {
    unsigned magic;
    const struct embed_ops *ops;
    struct embed_opts opts;
    char vectors[4096]; /* opts.vectors points here */
    int dim;
    double threshold;
    char space[EMBED_SPACE_MAX];
    void *impl;
};

extern const struct embed_ops embed_builtin_ops;
extern const struct embed_ops embed_hash_ops;

/*
 * Hashed features (the "hashing trick" with a sign bit, so collisions cancel
 * out on average): for each token i with weight s->w[i] > 0, its singular
 * form as a word feature (opts w_word), its character n-grams of sizes
 * char_min..char_max over "<token>" (w_char, spread over the token's
 * n-grams), and the bigram with the previous such token (w_bigram). Tokens
 * are taken in their s->form[] when set. Added into out[0..opts->hash_dim).
 */
void embed_ngrams(const struct embed_opts *o, const struct embed_scratch *s, float *out);

/* Scale v[0..n) to unit length; false (and v zeroed) when it is zero or not finite. */
bool embed_normalise(float *v, int n);

/* "name-vN" or, with non-default knobs, "name-vN-xHHHHHHHH" into e->space. */
void embed_name_space(struct embedder *e, const char *base);

#endif
