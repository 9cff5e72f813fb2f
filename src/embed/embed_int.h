/*
 * embed_int.h - what the embedders under src/embed/ share with embed.c: the
 * operations table each embedder fills in (twemproxy proto/ style), the
 * embedder and port objects, the local members' worker part (local.c) and
 * the hashed n-gram features the local embedders use.
 * Private to the embed module: nothing outside src/embed.c and src/embed/
 * includes it.
 */
#ifndef PC_EMBED_INT_H
#define PC_EMBED_INT_H

#include "pc_embed.h"
#include "pc_text.h"

#include "embedders.h"

struct event_base;
struct pool;
struct pool_port;
struct stats;
struct upstream;

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

/*
 * A worker's request to its member: every member's request struct starts
 * with this, so embed_cancel reaches the member that made it.
 */
struct embed_req {
    unsigned magic; /* EMBED_REQ_MAGIC */
    const struct embed_ops *ops;
};

#define EMBED_REQ_MAGIC 0x45524551u /* "EREQ" */

/* A worker's door to the embedder (pc_embed.h); impl is the member's. */
struct embed_port {
    unsigned magic;
    struct embedder *e;
    struct event_base *base;
    struct upstream *up;
    struct stats *st;
    struct pool *pool;
    struct pool_port *pport;
    void *impl;
};

#define EMBED_PORT_MAGIC 0x45504f52u /* "EPOR" */

/*
 * One member of the family. A local member (its text turned into a vector
 * in-process) fills in embed and takes the worker's part from local.c
 * (EMBED_LOCAL_PORT); a remote one leaves embed NULL and brings its own.
 */
struct embed_ops {
    const char *name;
    /* Its knobs' defaults, over the shared ones embed_opts_default sets (NULL: those). */
    void (*defaults)(struct embed_opts *o);
    /*
     * The process's part: set e->dim (0: known from the first vector),
     * e->space, e->threshold, e->impl; e->conf is the configuration (NULL
     * when made from options alone, for a local member). 0, or -1 with err.
     */
    int (*open)(struct embedder *e, char *err, size_t errlen);
    void (*close)(struct embedder *e);
    /* When open fails: the member used instead (NULL: none), and the warning, with %s for why. */
    const char *fallback;
    const char *fallback_warning;
    bool vectors; /* reads the word-vector file of embedder-vectors (named in its log line) */
    /* While it is the configured embedder and semantic is on: 0, or -1 with err (NULL: none). */
    int (*check_conf)(const struct conf *c, char *err, size_t errlen);
    /*
     * Local: write the (not yet normalised) vector of s->doc into
     * out[0..dim), which is zeroed. s->w[] arrives with 0 for filler tokens
     * and 1 otherwise; s->form[] all NULL. Runs on any thread.
     */
    void (*embed)(const struct embedder *e, struct embed_scratch *s, float *out);
    /* The worker's part (pc_embed.h's contracts): p->impl, then the requests. */
    int (*port_open)(struct embed_port *p);
    void (*port_close)(struct embed_port *p);
    struct embed_req *(*submit)(struct embed_port *p, const char *text, size_t len, bool background,
                                embed_fn *cb, void *arg);
    bool (*shut)(const struct embed_port *p, bool background); /* NULL: never */
    void (*cancel)(struct embed_req *q);
    /* The state of the member's circuit breaker ("closed"...), or NULL if it has none. */
    const char *(*breaker_state)(const struct embedder *e);
};

/* local.c: the worker's part of every local member: the pool runs ops->embed. */
int embed_local_port_open(struct embed_port *p);
void embed_local_port_close(struct embed_port *p);
struct embed_req *embed_local_submit(struct embed_port *p, const char *text, size_t len,
                                     bool background, embed_fn *cb, void *arg);
void embed_local_cancel(struct embed_req *q);

#define EMBED_LOCAL_PORT                                                      \
    .port_open = embed_local_port_open, .port_close = embed_local_port_close, \
    .submit = embed_local_submit, .cancel = embed_local_cancel

#define EMBEDDER_MAGIC 0x454d4244u /* "EMBD" */

struct embedder {
    unsigned magic;
    const struct embed_ops *ops;
    int id;                  /* the position of ops in EMBEDDER_LIST */
    const struct conf *conf; /* NULL when made from options alone */
    struct stats *row;       /* the process's own metrics (a breaker's), or NULL */
    struct embed_opts opts;
    char vectors[4096]; /* opts.vectors points here */
    int dim;
    double threshold;
    char space[EMBED_SPACE_MAX];
    void *impl;
};

#define EMBED_EXTERN(id, name) extern const struct embed_ops embed_##id##_ops;
EMBEDDER_LIST(EMBED_EXTERN)
#undef EMBED_EXTERN

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
