/*
 * embed.c - the embedders' core (see pc_embed.h): the table of members built
 * from src/embed/embedders.h, the one the configuration names (and the
 * fallback a member names when it cannot open), the worker's port and its
 * one asynchronous entry, and what every local member shares: capping long
 * texts, tokenizing, and the unit-length result. Nothing here knows which
 * member is which: what differs is in their operations.
 *
 *   embed_text: text --text_cap--> head (+ tail) --text_tokenize--> tokens
 *               --ops->embed--> raw vector --embed_normalise--> unit vector
 */
#include "pc_embed.h"
#include "pc_conf.h"
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

#define EMBED_ENTRY(id, name) &embed_##id##_ops,
/* In the order of EMBEDDER_LIST: the position is the value conf holds. */
static const struct embed_ops *const members[] = {EMBEDDER_LIST(EMBED_ENTRY)};
#undef EMBED_ENTRY

int embed_count(void)
{
    return (int)PC_ARRAY_LEN(members);
}

const char *embed_name(int id)
{
    return id >= 0 && id < embed_count() ? members[id]->name : NULL;
}

int embed_id(const char *name)
{
    for (int i = 0; i < embed_count(); i++)
        if (name != NULL && strcmp(members[i]->name, name) == 0)
            return i;
    return -1;
}

bool embed_is_local(int id)
{
    return id >= 0 && id < embed_count() && members[id]->embed != NULL;
}

void embed_opts_default(struct embed_opts *o, int kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->hash_dim = 256;
    o->char_min = 3;
    o->char_max = 4;
    o->w_word = 1.0f;
    o->w_bigram = 0.5f;
    o->w_char = 1.0f;
    o->w_glove = 0.5f;
    o->sif_a = 1e-3f;
    o->typo_fix = 30000;
    o->remove_common = 1;
    if (kind >= 0 && kind < embed_count() && members[kind]->defaults != NULL)
        members[kind]->defaults(o);
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

static struct embedder *open_with(const struct embed_opts *o, int id, const struct conf *c,
                                  struct stats *row, char *err, size_t errlen)
{
    struct embedder *e = pc_calloc(1, sizeof *e);
    e->magic = EMBEDDER_MAGIC;
    e->ops = members[id];
    e->id = id;
    e->conf = c;
    e->row = row;
    e->opts = *o;
    e->opts.kind = id;
    snprintf(e->vectors, sizeof e->vectors, "%s", o->vectors != NULL ? o->vectors : "");
    e->opts.vectors = e->vectors;
    if (e->ops->open(e, err, errlen) < 0) {
        e->magic = 0;
        free(e);
        return NULL;
    }
    return e;
}

/* Member o->kind, or the member it falls back to when it cannot open. */
static struct embedder *open_member(const struct embed_opts *o, const struct conf *c,
                                    struct stats *row, char *err, size_t errlen)
{
    const struct embed_ops *ops = members[o->kind];
    int fb = embed_id(ops->fallback);
    char why[512];
    struct embedder *e =
        open_with(o, o->kind, c, row, fb >= 0 ? why : err, fb >= 0 ? sizeof why : errlen);
    if (e != NULL || fb < 0)
        return e;
    log_warn(ops->fallback_warning, why);
    struct embed_opts f = *o;
    embed_opts_default(&f, fb);
    return open_with(&f, fb, c, row, err, errlen);
}

struct embedder *embed_create_opts(const struct embed_opts *o, char *err, size_t errlen)
{
    if (!embed_is_local(o->kind)) {
        snprintf(err, errlen, "embedder %s is not a local embedder",
                 embed_name(o->kind) != NULL ? embed_name(o->kind) : "(none)");
        return NULL;
    }
    if (check_opts(o, err, errlen) < 0)
        return NULL;
    return open_member(o, NULL, NULL, err, errlen);
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

struct embedder *embed_create(const struct conf *c, struct stats *row, char *err, size_t errlen)
{
    if (c->embedder < 0 || c->embedder >= embed_count()) {
        snprintf(err, errlen, "no embedder at position %d", c->embedder);
        return NULL;
    }
    struct embed_opts o;
    embed_opts_default(&o, c->embedder);
    char path[PATH_MAX + 64];
    if (c->embedder_vectors[0] != '\0')
        snprintf(path, sizeof path, "%s", c->embedder_vectors);
    else
        default_vectors(path, sizeof path);
    o.vectors = path;
    if (embed_is_local(o.kind) && check_opts(&o, err, errlen) < 0)
        return NULL;
    struct embedder *e = open_member(&o, c, row, err, errlen);
    if (e != NULL && e->ops->embed != NULL)
        log_notice("embedder %s: %s, %d dimensions%s%s", e->ops->name, e->space, e->dim,
                   e->ops->vectors ? ", vectors " : "", e->ops->vectors ? path : "");
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
    return e->id;
}

const char *embed_breaker_state(const struct embedder *e)
{
    return e->ops->breaker_state != NULL ? e->ops->breaker_state(e) : NULL;
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
    if (s->doc.n > 0 && e->ops->embed != NULL) {
        e->ops->embed(e, s, out);
        rc = embed_normalise(out, e->dim) ? 0 : -1;
    }
    free(s);
    return rc;
}

/* ---- the worker's port ---------------------------------------------------------- */

struct embed_port *embed_port_create(struct embedder *e, struct event_base *base,
                                     struct upstream *up, struct stats *st, struct pool *pool,
                                     struct pool_port *pport)
{
    PC_CHECK_OBJ(e, EMBEDDER_MAGIC);
    struct embed_port *p = pc_calloc(1, sizeof *p);
    p->magic = EMBED_PORT_MAGIC;
    p->e = e;
    p->base = base;
    p->up = up;
    p->st = st;
    p->pool = pool;
    p->pport = pport;
    if (e->ops->port_open(p) < 0) {
        p->magic = 0;
        free(p);
        return NULL;
    }
    return p;
}

void embed_port_destroy(struct embed_port **pp)
{
    struct embed_port *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, EMBED_PORT_MAGIC);
    p->e->ops->port_close(p);
    p->magic = 0;
    free(p);
}

struct embed_req *embed_submit(struct embed_port *p, const char *text, size_t len, bool background,
                               embed_fn *cb, void *arg)
{
    PC_CHECK_OBJ(p, EMBED_PORT_MAGIC);
    struct embed_req *q = p->e->ops->submit(p, text, len, background, cb, arg);
    if (q != NULL) {
        q->magic = EMBED_REQ_MAGIC;
        q->ops = p->e->ops;
    }
    return q;
}

bool embed_shut(const struct embed_port *p, bool background)
{
    PC_CHECK_OBJ(p, EMBED_PORT_MAGIC);
    return p->e->ops->shut != NULL && p->e->ops->shut(p, background);
}

void embed_cancel(struct embed_req **qp)
{
    struct embed_req *q = *qp;
    if (q == NULL)
        return;
    *qp = NULL;
    PC_CHECK_OBJ(q, EMBED_REQ_MAGIC);
    q->ops->cancel(q);
}

/* ---- the configuration's checks (pc_conf.h's rules) ------------------------------- */

/* The configured member's own check, while the semantic cache is on. */
static int check_member(const struct conf *c, char *err, size_t errlen)
{
    if (!c->semantic || c->embedder < 0 || c->embedder >= embed_count() ||
        members[c->embedder]->check_conf == NULL)
        return 0;
    return members[c->embedder]->check_conf(c, err, errlen);
}

static const struct conf_rule rules[] = {
    {.key = "embedder-url", .also = {"embedder", "semantic"}, .check_all = check_member},
};

int embed_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
