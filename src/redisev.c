/*
 * redisev.c - hiredis async contexts on libevent (see pc_redisev.h). Owns
 * the three events of an attached context; hiredis frees them through the
 * cleanup hook when it frees the context. Also the caps on a reply that
 * hiredis 0.14 lacks, for every connection, async or blocking: it buffers a
 * bulk of any announced length, makes an object per element of an array and
 * callocs the element list of the length the array announces. And the
 * deadline of a blocking reply, which hiredis 0.14 bounds only per read.
 */
#include "pc_redisev.h"
#include "pc_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>

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

/*
 * --- The clock of a blocking reply ------------------------------------------------------
 *
 * hiredis 0.14 bounds each read(2) of a blocking context by the socket's receive timeout
 * (SO_RCVTIMEO, which redisSetTimeout sets), never a reply: a peer that sends a byte just
 * within it keeps one reply, and its caller, going for ever. A reply gets a budget - the
 * caller's, or that timeout - plus 1 ms for every REDISEV_BYTES_PER_MS bytes it brought.
 * Before each read but the first (the socket's own timeout: the whole budget), the socket's
 * timeout is cut to the time left, and set back once the reply is whole or failed: a reply
 * that comes in one read costs no system call more.
 */
struct reply_clock {
    int fd;
    uint64_t start;       /* pc_mono_ms when the reply was asked for */
    int64_t budget_ms;    /* -1: the socket's timeout, not read yet; 0: none, no deadline */
    size_t bytes;         /* read for the reply so far */
    struct timeval saved; /* the socket's own timeout, once read */
    bool have_saved, cut; /* saved holds it; the socket has another now */
};

/* The socket's receive timeout in ms (0: none, or unknown); *tv gets it as it is. */
static int64_t rcvtimeo_ms(int fd, struct timeval *tv)
{
    socklen_t len = sizeof(*tv);
    *tv = (struct timeval){0, 0};
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, tv, &len) != 0)
        return 0;
    return (int64_t)tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000;
}

/* The reply's budget as it stands (the socket's timeout read if it was not yet). */
static int64_t clock_budget(struct reply_clock *c)
{
    if (c->budget_ms < 0 || !c->have_saved) {
        int64_t own = rcvtimeo_ms(c->fd, &c->saved);
        c->have_saved = true;
        if (c->budget_ms < 0)
            c->budget_ms = own;
    }
    return c->budget_ms == 0 ? 0 : c->budget_ms + (int64_t)(c->bytes / REDISEV_BYTES_PER_MS);
}

/* Before a read: the socket's timeout cut to the time left; false if none is left. */
static bool clock_arm(struct reply_clock *c, bool first)
{
    if (first && c->budget_ms < 0)
        return true; /* the socket's own timeout is the whole budget */
    int64_t budget = clock_budget(c);
    if (budget == 0)
        return true; /* no timeout anywhere: hiredis' own blocking read */
    int64_t left = budget - (int64_t)(pc_mono_ms() - c->start);
    if (left <= 0)
        return false;
    struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
    c->cut = setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 || c->cut;
    return true;
}

static void clock_restore(struct reply_clock *c)
{
    if (c->cut)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &c->saved, sizeof(c->saved));
    c->cut = false;
}

/*
 * rc failed; late: the reply's time ran out before a read. A timeout - late, or a read or
 * write past the socket's timeout, which hiredis calls "Resource temporarily unavailable" -
 * says so in rc->errstr, with the budget, and leaves errno EAGAIN for the caller.
 */
static int reply_failed(redisContext *rc, struct reply_clock *c, bool late)
{
    bool timeout = late || (rc->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK));
    if (timeout) {
        rc->err = REDIS_ERR_IO;
        snprintf(rc->errstr, sizeof(rc->errstr),
                 "timed out (no reply in time): no whole reply within %lld ms",
                 (long long)clock_budget(c));
    }
    clock_restore(c);
    if (timeout)
        errno = EAGAIN;
    return REDIS_ERR;
}

int redisev_get_reply(redisContext *rc, void **reply, size_t max, int64_t within_ms)
{
    void *r = NULL;
    int done = 0;
    *reply = NULL;
    if (redisGetReplyFromReader(rc, &r) != REDIS_OK)
        return REDIS_ERR;
    struct reply_clock c = {.fd = rc->fd, .start = pc_mono_ms(), .budget_ms = -1};
    if (within_ms > 0)
        c.budget_ms = within_ms;
    while (r == NULL && !done)
        if (redisBufferWrite(rc, &done) != REDIS_OK)
            return reply_failed(rc, &c, false);
    for (bool first = true; r == NULL; first = false) {
        if (!clock_arm(&c, first))
            return reply_failed(rc, &c, true);
        redisev_reader_cap(rc->reader, max); /* the read below fails then */
        size_t had = rc->reader->len;
        if (redisBufferRead(rc) != REDIS_OK)
            return reply_failed(rc, &c, false);
        c.bytes += rc->reader->len > had ? rc->reader->len - had : 0;
        if (redisGetReplyFromReader(rc, &r) != REDIS_OK)
            return reply_failed(rc, &c, false);
    }
    clock_restore(&c);
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
