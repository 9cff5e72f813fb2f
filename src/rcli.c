/*
 * rcli.c - the command-line tools' blocking Redis connection (see
 * pc_rcli.h). Owns the hiredis context and the parts of the parsed URL.
 */
#include "pc_rcli.h"
#include "pc_conf.h"
#include "pc_store.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define RCLI_MIN_TIMEOUT_MS 1000

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
    PC_FREE(&k->host);
    PC_FREE(&k->unix_path);
    PC_FREE(&k->password);
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

static int rcli_simple(struct rcli *k, const char *cmd, const char *arg)
{
    const char *argv[] = {cmd, arg};
    redisReply *r = rcli_command(k, cmd, 2, argv, NULL);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

int rcli_connect(struct rcli *k, const struct conf *conf, const char *tool)
{
    /* A write to a connection Redis dropped must fail with EPIPE, not kill the tool. */
    signal(SIGPIPE, SIG_IGN);
    return rcli_open(k, conf->redis, conf->redis_timeout, tool);
}

int rcli_open(struct rcli *k, const char *url, int64_t timeout_ms, const char *tool)
{
    char err[192];
    k->tool = tool;
    if (store_parse_url(url, &k->host, &k->port, &k->unix_path, &k->password, &k->db, err,
                        sizeof(err)) < 0) {
        rcli_error(k, "invalid redis URL: %s", err);
        return -1;
    }
    k->where = store_where(k->host, k->port, k->unix_path, k->db);
    struct timeval tv = pc_timeval_ms(PC_MAX(timeout_ms, RCLI_MIN_TIMEOUT_MS));
    k->rc = k->unix_path ? redisConnectUnixWithTimeout(k->unix_path, tv)
                         : redisConnectWithTimeout(k->host, k->port, tv);
    if (k->rc == NULL || k->rc->err) {
        rcli_error(k, "cannot connect to %s: %s", k->where,
                   k->rc ? k->rc->errstr : "out of memory");
        return -1;
    }
    redisSetTimeout(k->rc, tv);
    char db[16];
    snprintf(db, sizeof(db), "%d", k->db);
    if (k->password != NULL && rcli_simple(k, "AUTH", k->password) < 0)
        return -1;
    if (k->db != 0 && rcli_simple(k, "SELECT", db) < 0)
        return -1;
    return 0;
}
