/*
 * embed/local.c - the worker's part of every local embedder (builtin, hash,
 * any member with ops->embed): embed_submit runs the synchronous embed_text
 * as a job of the semantic stage's thread pool, and the vector comes back
 * on the worker's loop through its pool port. Owns each request from submit
 * until its job comes back (a cancelled one too: the job holds it).
 *
 *   embed_local_submit ─▶ pool job: embed_text (any pool thread)
 *                         ─▶ port's loop: cb(vec) unless cancelled, then freed
 */
#include "embed_int.h"

#include "pc_pool.h"
#include "pc_util.h"

#include <string.h>

struct local_req {
    struct embed_req hdr; /* first: embed_cancel's view */
    const struct embedder *e;
    char *text;
    size_t len;
    bool ok;
    embed_fn *cb; /* NULL once cancelled */
    void *arg;
    float vec[];
};

int embed_local_port_open(struct embed_port *p)
{
    return p->pool != NULL && p->pport != NULL ? 0 : -1;
}

void embed_local_port_close(struct embed_port *p)
{
    (void)p; /* requests in flight come back through the pool port, which outlives nothing here */
}

/* Pool thread: the request's own fields only. */
static void work(void *arg)
{
    struct local_req *q = arg;
    q->ok = embed_text(q->e, q->text, q->len, q->vec) == 0;
}

static void done(void *arg, bool ran)
{
    struct local_req *q = arg;
    PC_CHECK_OBJ(&q->hdr, EMBED_REQ_MAGIC);
    if (q->cb != NULL)
        q->cb(q->arg, ran && q->ok ? q->vec : NULL, ran ? q->e->dim : EMBED_DROPPED);
    free(q->text);
    q->hdr.magic = 0;
    free(q);
}

struct embed_req *embed_local_submit(struct embed_port *p, const char *text, size_t len,
                                     bool background, embed_fn *cb, void *arg)
{
    (void)background; /* no breaker: every text is embedded alike */
    struct local_req *q = pc_calloc(1, sizeof *q + (size_t)p->e->dim * sizeof(float));
    q->hdr.magic = EMBED_REQ_MAGIC; /* done() checks it, even before embed_submit sets it */
    q->e = p->e;
    q->text = pc_strndup(text, len);
    q->len = len;
    q->cb = cb;
    q->arg = arg;
    if (pool_submit(p->pool, p->pport, work, done, q) < 0) {
        free(q->text);
        q->hdr.magic = 0;
        free(q);
        return NULL;
    }
    return &q->hdr;
}

void embed_local_cancel(struct embed_req *q)
{
    struct local_req *l = (struct local_req *)q;
    l->cb = NULL; /* freed when its job comes back */
}
