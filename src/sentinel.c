/*
 * sentinel.c - asking the sentinels where the primary is (see
 * pc_sentinel.h). Owns the asks of the event loops: each is a small state
 * machine over the sentinels of one URL, driven by one timer, with at most
 * one hiredis async context (to the sentinel being asked) and one name
 * lookup at a time:
 *
 *   sentinel i: host a name? ── RESOLVING ──┐
 *               │ address                   ▼
 *               └──────────────────────▶ ASKING: connect, [AUTH],
 *                                        SENTINEL get-master-addr-by-name
 *      answer ─▶ DONE (timer 0 s) ─▶ cb(host, port)
 *      refused, closed, error, no answer, timer ─▶ NEXT (timer 0 s) ─▶ i + 1
 *      every sentinel tried ─▶ DONE ─▶ cb(NULL, why)
 *
 * Contexts are released outside hiredis where hiredis allows nothing else:
 * from inside a reply, redisAsyncDisconnect (hiredis frees it once the
 * callback returns); from the timer, redisAsyncFree. ac->data points to the
 * ask only while the context is the ask's current one (cleared before
 * letting go), so a context being torn down never reaches the ask.
 *
 * Also the blocking query of the threads and tools, and the ROLE check.
 */
#include "pc_sentinel.h"
#include "pc_redisev.h"
#include "pc_resolve.h"
#include "pc_rurl.h"
#include "pc_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#define ASK_MAGIC               0x5e471e1au
#define SENTINEL_REPLY_MAX      (1u << 20) /* a sentinel answers with a few names and addresses */
#define SENTINEL_REPLY_ELEMENTS (1u << 16) /* elements announced in one reply (redisev_guard) */

/* For the blocking query's reader, as redisev_attach sets for the asynchronous one. */
static const struct redisev_caps query_caps = {SENTINEL_REPLY_MAX, SENTINEL_REPLY_ELEMENTS};

enum ask_state {
    A_RESOLVING, /* the sentinel's name is being resolved; timer = deadline */
    A_ASKING,    /* connecting or waiting for the answer; timer = deadline */
    A_NEXT,      /* this sentinel failed; timer (0 s) moves on */
    A_DONE,      /* found, or every sentinel failed; timer (0 s) delivers */
};

struct sentinel_ask {
    unsigned magic;
    struct event_base *base;
    const struct rurl *u;
    int64_t timeout_ms;
    size_t first, tried, cur; /* tried: sentinels started so far; cur = (first + tried - 1) % n */
    enum ask_state state;
    struct event *timer;
    redisAsyncContext *ac;
    struct resolve *lookup;
    sentinel_fn *cb;
    void *arg;
    char host[RESOLVE_ADDR_MAX + 64]; /* the answer (an address, or a name if so announced) */
    int port;
    char err[224];      /* why the last sentinel tried failed */
    char auth_err[192]; /* the current sentinel refused AUTH */
};

/* --- replies ------------------------------------------------------------------------ */

/* [host, port] from get-master-addr-by-name; 0, or -1 with err. */
static int master_reply(const redisReply *r, const char *master, char *host, size_t hn, int *port,
                        char *err, size_t errlen)
{
    if (r == NULL) {
        snprintf(err, errlen, "no answer");
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%.160s", r->str);
        return -1;
    }
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(err, errlen, "does not monitor a master named '%.64s'", master);
        return -1;
    }
    long p;
    char *end;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len == 0 || r->element[0]->len >= hn ||
        (p = strtol(r->element[1]->str, &end, 10)) < 1 || p > 65535 || *end != '\0') {
        snprintf(err, errlen, "unexpected reply to SENTINEL get-master-addr-by-name");
        return -1;
    }
    memcpy(host, r->element[0]->str, r->element[0]->len);
    host[r->element[0]->len] = '\0';
    *port = (int)p;
    return 0;
}

bool sentinel_role_ok(const redisReply *r, char *role, size_t n)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING) {
        snprintf(role, n, "%s",
                 r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected ROLE reply");
        return false;
    }
    snprintf(role, n, "%s", r->element[0]->str);
    return strcmp(r->element[0]->str, "master") == 0;
}

bool sentinel_readonly(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

/* AUTH [user] password as argv; its argc (0 when the sentinels need none). */
static int auth_argv(const struct rurl *u, const char **argv)
{
    if (u->sentinel_password == NULL)
        return 0;
    int n = 0;
    argv[n++] = "AUTH";
    if (u->sentinel_user != NULL)
        argv[n++] = u->sentinel_user;
    argv[n++] = u->sentinel_password;
    return n;
}

/* --- the asks of the event loops ------------------------------------------------------ */

static void ask_step(struct sentinel_ask *a);

/* Re-arm the one timer: ms from now (0: on the next loop turn). */
static void ask_arm(struct sentinel_ask *a, enum ask_state st, int64_t ms)
{
    a->state = st;
    struct timeval tv = pc_timeval_ms(ms);
    event_base_update_cache_time(a->base);
    evtimer_add(a->timer, &tv);
}

/* Let go of the current context. In a hiredis callback only with in_callback. */
static void ask_release(struct sentinel_ask *a, bool in_callback)
{
    redisAsyncContext *ac = a->ac;
    if (ac == NULL)
        return;
    a->ac = NULL;
    ac->data = NULL;
    if (in_callback)
        redisAsyncDisconnect(ac);
    else
        redisAsyncFree(ac);
}

/* Sentinel cur failed with why; move on from the timer. */
static void ask_failed(struct sentinel_ask *a, const char *why)
{
    const struct rurl_addr *s = &a->u->sentinels[a->cur];
    char *where = rurl_addr_text(s->host, s->port);
    snprintf(a->err, sizeof(a->err), "sentinel %s: %s", where, why);
    free(where);
    ask_arm(a, A_NEXT, 0);
}

/* hiredis is closing the current context (it frees it): let go of it without a call. */
static void ask_lost(struct sentinel_ask *a, const char *why)
{
    if (a->ac != NULL) {
        a->ac->data = NULL;
        a->ac = NULL;
    }
    ask_failed(a, why);
}

static void on_master(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    struct sentinel_ask *a = ac->data;
    if (a == NULL)
        return; /* let go of: the ask moved on or is gone */
    PC_CHECK_OBJ(a, ASK_MAGIC);
    if (reply == NULL) {
        ask_lost(a, ac->errstr[0] ? ac->errstr : "connection closed");
        return;
    }
    char why[192];
    int rc = -1;
    if (a->auth_err[0] != '\0')
        snprintf(why, sizeof(why), "%s", a->auth_err);
    else
        rc =
            master_reply(reply, a->u->master, a->host, sizeof(a->host), &a->port, why, sizeof(why));
    ask_release(a, true);
    if (rc < 0)
        ask_failed(a, why);
    else
        ask_arm(a, A_DONE, 0);
}

/* AUTH's reply: an error is what the answer (NOAUTH then) is reported as. */
static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)privdata;
    struct sentinel_ask *a = ac->data;
    const redisReply *r = reply;
    if (a == NULL || r == NULL || r->type != REDIS_REPLY_ERROR)
        return;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    snprintf(a->auth_err, sizeof(a->auth_err), "AUTH failed: %.160s", r->str);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct sentinel_ask *a = ac->data;
    if (a == NULL || status == REDIS_OK)
        return;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    ask_lost(a, ac->errstr[0] ? ac->errstr : "cannot connect");
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    struct sentinel_ask *a = ac->data;
    if (a == NULL)
        return;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    ask_lost(a, ac->errstr[0] ? ac->errstr : "connection closed");
}

/* Connect to sentinel cur at addr and queue the commands (hiredis sends them once connected). */
static void ask_connect(struct sentinel_ask *a, const char *addr)
{
    int port = a->u->sentinels[a->cur].port;
    redisAsyncContext *ac = redisAsyncConnect(addr, port);
    if (ac == NULL || ac->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", ac ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        ask_failed(a, why);
        return;
    }
    if (redisev_attach(ac, a->base, SENTINEL_REPLY_MAX, SENTINEL_REPLY_ELEMENTS) != 0) {
        redisAsyncFree(ac);
        ask_failed(a, "out of memory");
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ac->data = a;
    a->ac = ac;
    const char *argv[3];
    int argc = auth_argv(a->u, argv);
    if (argc > 0)
        redisAsyncCommandArgv(ac, on_auth, NULL, argc, argv, NULL);
    const char *ask[] = {"SENTINEL", "get-master-addr-by-name", a->u->master};
    redisAsyncCommandArgv(ac, on_master, NULL, 3, ask, NULL);
    ask_arm(a, A_ASKING, a->timeout_ms);
}

static void on_resolved(void *arg, const char *addr, const char *err)
{
    struct sentinel_ask *a = arg;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    a->lookup = NULL;
    if (addr == NULL) {
        char why[160];
        snprintf(why, sizeof(why), "cannot resolve the name: %s", err);
        ask_failed(a, why);
        return;
    }
    ask_connect(a, addr); /* with a deadline of its own for the answer */
}

/* Start on the next sentinel, or report that none answered. */
static void ask_step(struct sentinel_ask *a)
{
    size_t n = a->u->nsentinels;
    if (a->tried == n) {
        ask_arm(a, A_DONE, 0);
        return;
    }
    a->cur = (a->first + a->tried++) % n;
    a->auth_err[0] = '\0';
    const char *host = a->u->sentinels[a->cur].host;
    if (rurl_is_address(host)) {
        ask_connect(a, host);
        return;
    }
    ask_arm(a, A_RESOLVING, a->timeout_ms);
    a->lookup = resolve_start(a->base, host, on_resolved, a);
    if (a->lookup == NULL)
        ask_failed(a, "cannot start resolving the name");
}

static void ask_free(struct sentinel_ask *a)
{
    resolve_cancel(&a->lookup);
    ask_release(a, false);
    event_free(a->timer);
    a->magic = 0;
    free(a);
}

static void ask_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sentinel_ask *a = arg;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    switch (a->state) {
    case A_RESOLVING:
        resolve_cancel(&a->lookup);
        ask_failed(a, "resolving the name timed out");
        break;
    case A_ASKING:
        ask_release(a, false);
        ask_failed(a, "no answer in time");
        break;
    case A_NEXT:
        ask_step(a);
        break;
    case A_DONE:
        if (a->host[0] != '\0')
            a->cb(a->arg, a->host, a->port, a->cur, NULL);
        else
            a->cb(a->arg, NULL, 0, a->cur, a->err[0] ? a->err : "no sentinel to ask");
        ask_free(a);
        break;
    }
}

struct sentinel_ask *sentinel_ask_start(struct event_base *base, const struct rurl *u, size_t first,
                                        int64_t timeout_ms, sentinel_fn *cb, void *arg)
{
    struct sentinel_ask *a = pc_calloc(1, sizeof(*a));
    a->magic = ASK_MAGIC;
    a->base = base;
    a->u = u;
    a->first = u->nsentinels > 0 ? first % u->nsentinels : 0;
    a->timeout_ms = PC_MAX(timeout_ms, 1);
    a->cb = cb;
    a->arg = arg;
    a->timer = evtimer_new(base, ask_timer_cb, a);
    if (a->timer == NULL) {
        free(a);
        return NULL;
    }
    ask_arm(a, A_NEXT, 0); /* the first step runs from the loop, like every other */
    return a;
}

void sentinel_ask_cancel(struct sentinel_ask **ap)
{
    struct sentinel_ask *a = *ap;
    if (a == NULL)
        return;
    *ap = NULL;
    PC_CHECK_OBJ(a, ASK_MAGIC);
    ask_free(a);
}

/* --- blocking ------------------------------------------------------------------------ */

/*
 * One command within the query's time left (until, pc_mono_ms): the reply, or NULL with err;
 * *late if the time ran out. Capped as every blocking reply is: a bulk of 2^40 bytes that
 * keep coming fails it.
 */
static redisReply *query_command(redisContext *rc, int argc, const char **argv, uint64_t until,
                                 bool *late, char *err, size_t errlen)
{
    uint64_t now = pc_mono_ms();
    void *reply = NULL;
    if (now >= until)
        *late = true;
    else if (redisAppendCommandArgv(rc, argc, argv, NULL) == REDIS_OK &&
             redisev_get_reply(rc, &reply, SENTINEL_REPLY_MAX, (int64_t)(until - now)) != REDIS_OK)
        *late = rc->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    if (reply == NULL && !*late)
        snprintf(err, errlen, "%s", rc->errstr[0] ? rc->errstr : "no reply");
    return reply;
}

/* Connected to sentinel s: AUTH if needed, then the question, all before until. */
static int query_on(redisContext *rc, const struct rurl *u, uint64_t until, char **host, int *port,
                    bool *late, char *err, size_t errlen)
{
    const char *argv[3];
    int argc = auth_argv(u, argv);
    if (argc > 0) {
        redisReply *r = query_command(rc, argc, argv, until, late, err, errlen);
        if (r == NULL)
            return -1;
        bool ok = r->type != REDIS_REPLY_ERROR;
        if (!ok)
            snprintf(err, errlen, "AUTH failed: %.160s", r->str);
        freeReplyObject(r);
        if (!ok)
            return -1;
    }
    const char *ask[] = {"SENTINEL", "get-master-addr-by-name", u->master};
    redisReply *r = query_command(rc, 3, ask, until, late, err, errlen);
    if (r == NULL)
        return -1;
    char h[RESOLVE_ADDR_MAX + 64];
    int rc2 = master_reply(r, u->master, h, sizeof(h), port, err, errlen);
    freeReplyObject(r);
    if (rc2 == 0)
        *host = pc_strdup(h);
    return rc2;
}

/*
 * One deadline for all of it - connecting, AUTH, the question - as the loops' asks have:
 * hiredis bounds each read only, and a sentinel that sends its answer a byte at a time, each
 * within the timeout, would hold the thread or the tool for as long as it likes.
 */
int sentinel_query(const struct rurl *u, size_t i, int64_t timeout_ms, char **host, int *port,
                   char *err, size_t errlen)
{
    const struct rurl_addr *s = &u->sentinels[i];
    char why[224] = "";
    bool late = false;
    timeout_ms = PC_MAX(timeout_ms, 1);
    uint64_t until = pc_mono_ms() + (uint64_t)timeout_ms;
    struct timeval tv = pc_timeval_ms(timeout_ms);
    redisContext *rc = redisConnectWithTimeout(s->host, s->port, tv); /* resolves the name anew */
    int ret = -1;
    if (rc == NULL || rc->err)
        snprintf(why, sizeof(why), "%s", rc ? rc->errstr : "out of memory");
    else if (redisSetTimeout(rc, tv) == REDIS_OK) {
        redisev_guard(rc->reader, &query_caps);
        ret = query_on(rc, u, until, host, port, &late, why, sizeof(why));
    }
    if (rc != NULL)
        redisFree(rc);
    if (late)
        snprintf(why, sizeof(why), "timed out (no reply in time): did not answer within %lld ms",
                 (long long)timeout_ms);
    if (ret < 0) {
        char *where = rurl_addr_text(s->host, s->port);
        snprintf(err, errlen, "sentinel %s: %s", where, why);
        free(where);
    }
    return ret;
}
