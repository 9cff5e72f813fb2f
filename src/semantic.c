/*
 * semantic.c - the semantic stage of the cache (see pc_semantic.h).
 *
 * This first cut holds the parts the exact cache already needs: the vector
 * record keys (flushes delete them) and the flush event every instance's
 * index listens to. The stage itself (embedders, index, guards, verifier)
 * is not part of this build yet: semantic_create says so and the proxy
 * serves with the exact cache alone.
 */
#include "pc_semantic.h"
#include "pc_migrate.h"
#include "pc_store.h"

#include <stdio.h>
#include <string.h>

/* Stream of vector events (see pc_vsync.h) and its approximate length cap. */
#define SEMANTIC_STREAM     PC_KEY_PREFIX "vs"
#define SEMANTIC_STREAM_CAP "100000"

struct semantic_vec {
    int dim;
    float v[];
};

struct semantic *semantic_create(const struct conf *c, struct stats *st, char *err, size_t errlen)
{
    (void)c;
    (void)st;
    snprintf(err, errlen, "the semantic cache is not part of this build");
    return NULL;
}

void semantic_stop(struct semantic *s)
{
    (void)s;
}

void semantic_destroy(struct semantic **s)
{
    *s = NULL;
}

struct semantic_port *semantic_port_create(struct semantic *s, struct event_base *base,
                                           struct store *store, struct upstream *up,
                                           struct stats *st)
{
    (void)s;
    (void)base;
    (void)store;
    (void)up;
    (void)st;
    return NULL;
}

void semantic_port_destroy(struct semantic_port **p)
{
    *p = NULL;
}

struct semantic_op *semantic_lookup(struct semantic_port *p, const struct semantic_query *q,
                                    semantic_fn *cb, void *arg)
{
    (void)p;
    (void)q;
    (void)cb;
    (void)arg;
    return NULL;
}

void semantic_cancel(struct semantic_op **op)
{
    *op = NULL;
}

void semantic_put(struct semantic_port *p, const struct semantic_item *it,
                  struct semantic_vec **vec)
{
    (void)p;
    (void)it;
    semantic_vec_free(vec);
}

struct semantic_vec *semantic_vec_take(struct semantic_result *r)
{
    struct semantic_vec *v = r->vec;
    r->vec = NULL;
    return v;
}

void semantic_vec_free(struct semantic_vec **v)
{
    PC_FREE(v);
}

void semantic_vector_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX])
{
    if (tenant_id == NULL)
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "v:*");
    else
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "v:{%.*s:*", TENANT_ID_LEN, tenant_id);
}

void semantic_publish_flush(struct semantic_port *p, struct store *store, const char *tenant_id)
{
    (void)p;
    const char *argv[10] = {"XADD", SEMANTIC_STREAM, "MAXLEN", "~",      SEMANTIC_STREAM_CAP, "*",
                            "op",   "flush",         "t",      tenant_id};
    size_t lens[10];
    int argc = tenant_id != NULL ? 10 : 8;
    for (int i = 0; i < argc; i++)
        lens[i] = i == 9 ? TENANT_ID_LEN : strlen(argv[i]);
    store_write(store, argc, argv, lens);
}
