/*
 * redisev.c - hiredis async contexts on libevent (see pc_redisev.h). Owns
 * the three events of an attached context; hiredis frees them through the
 * cleanup hook when it frees the context. Also the caps on a reply that
 * hiredis 0.14 lacks, for every connection, async or blocking: it buffers a
 * bulk of any announced length, makes an object per element of an array and
 * callocs the element list of the length the array announces.
 */
#include "pc_redisev.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

struct redisev {
    redisAsyncContext *ac;
    struct event *rev;        /* EV_READ | EV_PERSIST, added once */
    struct event *wev;        /* EV_WRITE | EV_PERSIST: connecting, or the socket was full */
    struct event *flush;      /* never added, only made active */
    struct redisev_caps caps; /* the reader's (redisev_guard); bytes 0: no cap */
    bool reading, writing;
};

/*
 * The context whose write is under way on this thread: an addWrite from
 * inside it means hiredis could not write everything, so the socket must be
 * watched. Compared, never dereferenced (the context may be gone after).
 */
static _Thread_local const struct redisev *flushing;

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct redisev *e = arg;
    redisev_reader_cap(e->ac->c.reader, e->caps.bytes); /* the read then drops the connection */
    redisAsyncHandleRead(e->ac);
}

bool redisev_reader_cap(redisReader *r, size_t max)
{
    if (max == 0 || r->err != 0 || r->buf == NULL || r->len - r->pos <= max)
        return false;
    /* Every later feed and read of r fails: hiredis then drops the connection, with this. */
    r->err = REDIS_ERR_PROTOCOL;
    snprintf(r->errstr, sizeof(r->errstr), "a reply larger than %zu bytes", max);
    return true;
}

int redisev_get_reply(redisContext *rc, void **reply, size_t max)
{
    void *r = NULL;
    int done = 0;
    *reply = NULL;
    if (redisGetReplyFromReader(rc, &r) != REDIS_OK)
        return REDIS_ERR;
    while (r == NULL && !done)
        if (redisBufferWrite(rc, &done) != REDIS_OK)
            return REDIS_ERR;
    while (r == NULL) {
        redisev_reader_cap(rc->reader, max); /* the read below fails then */
        if (redisBufferRead(rc) != REDIS_OK || redisGetReplyFromReader(rc, &r) != REDIS_OK)
            return REDIS_ERR;
    }
    *reply = r;
    return REDIS_OK;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct redisev *e = arg;
    flushing = e;
    redisAsyncHandleWrite(e->ac); /* may free e */
    flushing = NULL;
}

static void add_read(void *arg)
{
    struct redisev *e = arg;
    if (e->reading)
        return;
    e->reading = true;
    event_add(e->rev, NULL);
}

static void del_read(void *arg)
{
    struct redisev *e = arg;
    if (!e->reading)
        return;
    e->reading = false;
    event_del(e->rev);
}

static void add_write(void *arg)
{
    struct redisev *e = arg;
    /*
     * Connecting: only writability tells that connect(2) finished (hiredis
     * asks nothing more of us if it is still in progress). Inside our own
     * write: it was partial. Both wait for the socket; else write soon.
     */
    if (!(e->ac->c.flags & REDIS_CONNECTED) || flushing == e) {
        if (!e->writing) {
            e->writing = true;
            event_add(e->wev, NULL);
        }
        return;
    }
    if (!e->writing)
        event_active(e->flush, EV_WRITE, 1);
}

static void del_write(void *arg)
{
    struct redisev *e = arg;
    event_del(e->flush); /* nothing left to write: a pending flush would find nothing */
    if (!e->writing)
        return;
    e->writing = false;
    event_del(e->wev);
}

static void cleanup(void *arg)
{
    struct redisev *e = arg;
    if (e->rev != NULL)
        event_free(e->rev);
    if (e->wev != NULL)
        event_free(e->wev);
    if (e->flush != NULL)
        event_free(e->flush);
    free(e);
}

int redisev_attach(redisAsyncContext *ac, struct event_base *base, size_t reply_max,
                   size_t elements_max)
{
    if (ac->ev.data != NULL)
        return -1;
    struct redisev *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return -1;
    e->ac = ac;
    e->caps.bytes = reply_max;
    e->caps.elements = elements_max;
    int fd = ac->c.fd;
    e->rev = event_new(base, fd, EV_READ | EV_PERSIST, on_read, e);
    e->wev = event_new(base, fd, EV_WRITE | EV_PERSIST, on_write, e);
    e->flush = event_new(base, -1, 0, on_write, e);
    if (e->rev == NULL || e->wev == NULL || e->flush == NULL) {
        cleanup(e);
        return -1;
    }
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = e;
    redisev_guard(ac->c.reader, &e->caps); /* e outlives every parse: cleanup runs last */
    /* As hiredis' own adapter: read, and write to learn when the connection is made. */
    add_read(e);
    e->writing = true;
    event_add(e->wev, NULL);
    return 0;
}

void redisev_set_reply_max(redisAsyncContext *ac, size_t max)
{
    struct redisev *e = ac->ev.data;
    if (e != NULL && ac->ev.cleanup == cleanup)
        e->caps.bytes = max;
}

/*
 * --- The guard on a reply's elements ---------------------------------------------------
 *
 * hiredis 0.14 builds a reply as it parses: an object per element, an element list of
 * the length each array announces (calloc of 2e9 pointers for "*2000000000"), and the
 * bytes it parsed leave its buffer, so the byte cap above never sees an array of small
 * elements grow. The guard wraps hiredis' object functions and refuses an array when the
 * element counts announced in its reply, added up, pass caps->elements (that also bounds
 * the objects: one per element announced), or a string when the strings of the reply
 * together pass caps->bytes.
 *
 * The running totals of a reply live in its root array's reply object, in fields hiredis
 * leaves unused for arrays (integer: elements announced, len: string bytes), and are
 * cleared when the last element is made, before the reply reaches anyone. The caps reach
 * the functions as the reader's privdata, which hiredis copies into every task.
 *
 * A refusal fails the reader as the byte cap does (REDIS_ERR_PROTOCOL: every later feed
 * and read fails, the connection is dropped) and ends its buffer after the item refused,
 * so that the parse stops there; the item becomes a nil, freed with the partial reply.
 * Returning NULL would stop the parse too, but hiredis then calls it "Out of memory".
 */

static redisReplyObjectFunctions hiredis_fn, guard_fn;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

/* The task at the root of t's reply: every task of a reply is in its reader's rstack. */
static const redisReadTask *root_task(const redisReadTask *t)
{
    while (t->parent != NULL)
        t = t->parent;
    return t;
}

static redisReader *task_reader(const redisReadTask *t)
{
    const redisReadTask *root = root_task(t);
    return (redisReader *)(uintptr_t)((const char *)root - offsetof(redisReader, rstack));
}

/* The root array's object, which holds the reply's totals; NULL for the root itself. */
static redisReply *tally_of(const redisReadTask *t)
{
    return t->parent == NULL ? NULL : root_task(t)->obj;
}

/* Whether the item of task t, made now and holding no elements, is the reply's last. */
static bool is_last(const redisReadTask *t)
{
    for (; t->parent != NULL; t = t->parent)
        if (t->idx != t->parent->elements - 1)
            return false;
    return true;
}

/* A leaf was made: at the reply's end, its totals go (the reply is nobody's yet). */
static void *leaf_made(const redisReadTask *t, void *obj)
{
    redisReply *tally = tally_of(t);
    if (obj != NULL && tally != NULL && is_last(t)) {
        tally->integer = 0;
        tally->len = 0;
    }
    return obj;
}

/*
 * Fail t's reader with why; end is where the item refused ends in its buffer (hiredis has
 * read up to there, or moves there when this returns). A nil stands for the item.
 */
static void *refuse(const redisReadTask *t, const char *end, const char *why)
{
    redisReader *r = task_reader(t);
    r->err = REDIS_ERR_PROTOCOL;
    snprintf(r->errstr, sizeof(r->errstr), "%s", why);
    size_t at = (size_t)(end - r->buf);
    if (at >= r->pos && at <= r->len)
        r->len = at; /* nothing after: the parse loop stops, and sees err */
    return hiredis_fn.createNil(t);
}

static void *guard_array(const redisReadTask *t, int n)
{
    const struct redisev_caps *caps = t->privdata;
    redisReader *r = task_reader(t);
    redisReply *tally = tally_of(t);
    /* n >= 0: hiredis 0.14.1 refuses a count below -1 (and makes -1 a nil) */
    size_t sum = (tally != NULL ? (size_t)tally->integer : 0) + (size_t)n;
    if (caps->elements != 0 && sum > caps->elements) {
        char why[80];
        snprintf(why, sizeof(why), "a reply of more than %zu elements", caps->elements);
        return refuse(t, r->buf + r->pos, why);
    }
    redisReply *a = hiredis_fn.createArray(t, n);
    if (a == NULL)
        return NULL;
    redisReply *root = tally != NULL ? tally : a;
    root->integer = (long long)sum;
    return n == 0 ? leaf_made(t, a) : a;
}

static void *guard_string(const redisReadTask *t, char *str, size_t len)
{
    const struct redisev_caps *caps = t->privdata;
    redisReply *tally = tally_of(t);
    size_t sum = (tally != NULL ? tally->len : 0) + len;
    if (caps->bytes != 0 && sum > caps->bytes) {
        char why[80];
        snprintf(why, sizeof(why), "a reply larger than %zu bytes", caps->bytes);
        return refuse(t, str + len + 2, why);
    }
    if (tally != NULL)
        tally->len = sum;
    return leaf_made(t, hiredis_fn.createString(t, str, len));
}

static void *guard_integer(const redisReadTask *t, long long v)
{
    return leaf_made(t, hiredis_fn.createInteger(t, v));
}

static void *guard_nil(const redisReadTask *t)
{
    return leaf_made(t, hiredis_fn.createNil(t));
}

/* hiredis' own functions are static: read them off a reader it made. */
static void guard_init(void)
{
    redisReader *r = redisReaderCreate();
    if (r == NULL) {
        fprintf(stderr, "promptcache: out of memory\n");
        abort();
    }
    hiredis_fn = *r->fn;
    redisReaderFree(r);
    guard_fn = (redisReplyObjectFunctions){.createString = guard_string,
                                           .createArray = guard_array,
                                           .createInteger = guard_integer,
                                           .createNil = guard_nil,
                                           .freeObject = hiredis_fn.freeObject};
}

void redisev_guard(redisReader *r, const struct redisev_caps *caps)
{
    pthread_once(&guard_once, guard_init);
    r->fn = &guard_fn;
    r->privdata = (void *)(uintptr_t)caps; /* read only, through the tasks' const pointer */
}
