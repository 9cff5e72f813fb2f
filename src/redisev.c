/*
 * redisev.c - hiredis async contexts on libevent (see pc_redisev.h). Owns
 * the three events of an attached context; hiredis frees them through the
 * cleanup hook when it frees the context. Also the cap on a reply's size
 * that hiredis 0.14 lacks (it buffers a bulk of any announced length).
 */
#include "pc_redisev.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

struct redisev {
    redisAsyncContext *ac;
    struct event *rev;   /* EV_READ | EV_PERSIST, added once */
    struct event *wev;   /* EV_WRITE | EV_PERSIST: connecting, or the socket was full */
    struct event *flush; /* never added, only made active */
    size_t reply_max;    /* 0: no cap */
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
    redisev_reader_cap(e->ac->c.reader, e->reply_max); /* the read then drops the connection */
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

int redisev_attach(redisAsyncContext *ac, struct event_base *base, size_t reply_max)
{
    if (ac->ev.data != NULL)
        return -1;
    struct redisev *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return -1;
    e->ac = ac;
    e->reply_max = reply_max;
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
        e->reply_max = max;
}
