/*
 * rcli.c - the blocking Redis connection of the tools and the background
 * threads (see pc_rcli.h). Owns the hiredis context and the parsed URL of a
 * struct rcli, and the one way a blocking client reaches the server that
 * holds the data:
 *
 *   redis://, unix:  connect ─▶ [AUTH] ─▶ [SELECT]
 *   sentinel://      sentinel i: get-master-addr-by-name ─▶ connect ─▶
 *                    [AUTH] ─▶ [SELECT] ─▶ ROLE = master? ─ no ─▶ sentinel i + 1
 */
#include "pc_rcli.h"
#include "pc_conf.h"
#include "pc_sentinel.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define RCLI_MIN_TIMEOUT_MS 1000
#define SENTINEL_MAX_MS     1000 /* a sentinel answers from memory: never wait longer for one */

void rcli_error(struct rcli *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->errmsg, sizeof(k->errmsg), fmt, ap);
    va_end(ap);
    if (k->quiet)
        return;
    fflush(stdout);
    fprintf(stderr, "promptcache %s: %s\n", k->tool ? k->tool : "", k->errmsg);
}

void rcli_close(struct rcli *k)
{
    if (k->rc != NULL)
        redisFree(k->rc);
    k->rc = NULL;
    rurl_free(&k->url);
    PC_FREE(&k->where);
}

redisReply *rcli_command(struct rcli *k, const char *what, int argc, const char **argv,
                         const size_t *lens)
{
    redisReply *r = redisCommandArgv(k->rc, argc, argv, lens);
    if (r == NULL) {
        rcli_error(k, "%s: %s: %s", k->where, what, k->rc->errstr[0] ? k->rc->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        rcli_error(k, "%s: %s failed: %s", k->where, what, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* One setup command; false with err set on failure or an error reply. */
static bool setup(redisContext *rc, int argc, const char **argv, const char *what, char *err,
                  size_t errlen)
{
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    if (r == NULL) {
        snprintf(err, errlen, "%s: %s", what, rc->errstr[0] ? rc->errstr : "no reply");
        return false;
    }
    bool ok = r->type != REDIS_REPLY_ERROR;
    if (!ok)
        snprintf(err, errlen, "%s failed: %.160s", what, r->str);
    freeReplyObject(r);
    return ok;
}

/* AUTH [user] password and SELECT db, as u asks. */
static bool setup_all(redisContext *rc, const struct rurl *u, char *err, size_t errlen)
{
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    const char *auth[] = {"AUTH", u->user ? u->user : u->password, u->password};
    const char *sel[] = {"SELECT", db};
    return (u->password == NULL || setup(rc, u->user ? 3 : 2, auth, "AUTH", err, errlen)) &&
           (u->db == 0 || setup(rc, 2, sel, "SELECT", err, errlen));
}

/* ROLE says master; else false with err. */
static bool is_primary(redisContext *rc, char *err, size_t errlen)
{
    redisReply *r = redisCommand(rc, "ROLE");
    char role[64];
    bool ok = sentinel_role_ok(r, role, sizeof(role));
    if (r == NULL)
        snprintf(err, errlen, "ROLE: %s", rc->errstr[0] ? rc->errstr : "no reply");
    else if (!ok)
        snprintf(err, errlen, "not a primary (role %s): the sentinel's view is behind", role);
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

/*
 * Connect to host:port (or the socket) and set it up; NULL with err, which
 * names the server as where does.
 */
static redisContext *dial_one(const struct rurl *u, const char *host, int port, bool check_role,
                              struct timeval tv, const char *where, char *err, size_t errlen)
{
    redisContext *rc = u->kind == RURL_UNIX ? redisConnectUnixWithTimeout(u->unix_path, tv)
                                            : redisConnectWithTimeout(host, port, tv);
    char why[224] = "";
    if (rc == NULL || rc->err) {
        snprintf(err, errlen, "cannot connect to %s: %s", where, rc ? rc->errstr : "out of memory");
    } else if (redisSetTimeout(rc, tv) == REDIS_OK && setup_all(rc, u, why, sizeof(why)) &&
               (!check_role || is_primary(rc, why, sizeof(why)))) {
        return rc;
    } else {
        snprintf(err, errlen, "%s: %s", where, why[0] ? why : "cannot set a timeout");
    }
    if (rc != NULL)
        redisFree(rc);
    return NULL;
}

/* Ask sentinel i, then connect to the primary it names; NULL with why. */
static redisContext *dial_via(const struct rurl *u, size_t i, struct timeval tv, int64_t timeout_ms,
                              char *addr, size_t addrlen, char *why, size_t whylen)
{
    char *host = NULL;
    int port;
    if (sentinel_query(u, i, PC_MIN(timeout_ms, SENTINEL_MAX_MS), &host, &port, why, whylen) < 0)
        return NULL;
    char *at = rurl_addr_text(host, port);
    struct pc_buf where = PC_BUF_INIT;
    pc_buf_printf(&where, "primary %s at %s", u->master, at);
    redisContext *rc = dial_one(u, host, port, true, tv, pc_buf_cstr(&where), why, whylen);
    if (rc != NULL && addr != NULL)
        snprintf(addr, addrlen, "%s", at);
    free(at);
    free(host);
    pc_buf_free(&where);
    return rc;
}

/* The sentinels in turn: the first primary one of them names. err gets every failure. */
static redisContext *dial_sentinel(const struct rurl *u, struct timeval tv, int64_t timeout_ms,
                                   size_t *next, char *addr, size_t addrlen, char *err,
                                   size_t errlen)
{
    size_t first = next ? *next % u->nsentinels : 0;
    struct pc_buf all = PC_BUF_INIT;
    redisContext *rc = NULL;
    for (size_t k = 0; k < u->nsentinels && rc == NULL; k++) {
        size_t i = (first + k) % u->nsentinels;
        char why[320];
        rc = dial_via(u, i, tv, timeout_ms, addr, addrlen, why, sizeof(why));
        if (rc != NULL && next != NULL)
            *next = i;
        else if (rc == NULL)
            pc_buf_printf(&all, "%s%s", all.len ? "; " : "", why);
    }
    if (rc == NULL)
        snprintf(err, errlen, "%s", pc_buf_cstr(&all));
    pc_buf_free(&all);
    return rc;
}

redisContext *rcli_dial(const struct rurl *u, int64_t timeout_ms, size_t *next_sentinel, char *addr,
                        size_t addrlen, char *err, size_t errlen)
{
    struct timeval tv = pc_timeval_ms(PC_MAX(timeout_ms, 1));
    if (u->kind == RURL_SENTINEL)
        return dial_sentinel(u, tv, timeout_ms, next_sentinel, addr, addrlen, err, errlen);
    char *where = rurl_format(u, false);
    if (addr != NULL) {
        char *at = u->kind == RURL_TCP ? rurl_addr_text(u->tcp.host, u->tcp.port)
                                       : pc_strdup(u->unix_path);
        snprintf(addr, addrlen, "%s", at);
        free(at);
    }
    redisContext *rc = dial_one(u, u->tcp.host, u->tcp.port, false, tv, where, err, errlen);
    free(where);
    return rc;
}

int rcli_connect(struct rcli *k, const struct conf *conf, const char *tool)
{
    /* A write to a connection Redis dropped must fail with EPIPE, not kill the tool. */
    signal(SIGPIPE, SIG_IGN);
    return rcli_open(k, conf->redis, conf->redis_timeout, tool);
}

int rcli_open(struct rcli *k, const char *url, int64_t timeout_ms, const char *tool)
{
    char err[512];
    k->tool = tool;
    if (rurl_parse(url, 0, &k->url, err, sizeof(err)) < 0) {
        rcli_error(k, "invalid redis URL: %s", err);
        return -1;
    }
    k->where = rurl_format(&k->url, false);
    char addr[300];
    k->rc = rcli_dial(&k->url, PC_MAX(timeout_ms, RCLI_MIN_TIMEOUT_MS), &k->next_sentinel, addr,
                      sizeof(addr), err, sizeof(err));
    if (k->rc == NULL) {
        if (k->url.kind == RURL_SENTINEL)
            rcli_error(k, "%s: %s", k->where, err);
        else
            rcli_error(k, "%s", err);
        return -1;
    }
    if (k->url.kind == RURL_SENTINEL) {
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_printf(&b, "%s (primary at %s)", k->where, addr);
        free(k->where);
        k->where = pc_buf_cstr(&b);
    }
    return 0;
}

bool rcli_str_is(const struct redisReply *r, const char *s)
{
    size_t n = strlen(s);
    return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) && r->len == n &&
           memcmp(r->str, s, n) == 0;
}
