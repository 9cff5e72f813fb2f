/*
 * pc_rcli.h - the blocking Redis connection of the command-line tools
 * (`promptcache migrate`, `promptcache report`) and of the daemon's own
 * background threads (vsync's reader). Never used on an event loop. Error
 * messages go to stderr prefixed with the tool's name (or, with quiet, only
 * to k->errmsg for the caller to log), never with the Redis password.
 */
#ifndef PC_RCLI_H
#define PC_RCLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"

struct conf;
struct redisContext;
struct redisReply;

struct rcli {
    struct redisContext *rc;
    char *host, *unix_path, *password;
    int port, db;
    char *where;      /* the URL without its password, for messages */
    const char *tool; /* "migrate", "report": prefixes messages */
    bool quiet;       /* messages only into errmsg, not on stderr */
    char errmsg[256]; /* the last message */
};

/* Connect to conf->redis (AUTH, SELECT as needed); 0, or -1 after a message. */
int rcli_connect(struct rcli *k, const struct conf *conf, const char *tool);
/*
 * The same for a URL, with timeout_ms for connecting and for every reply
 * (at least 1 s). Keeps k->quiet as the caller set it. On -1, rcli_close(k)
 * is still needed.
 */
int rcli_open(struct rcli *k, const char *url, int64_t timeout_ms, const char *tool);
/* Run one command: the reply (never an error reply; free with freeReplyObject) or NULL after a
 * message. what names the command in that message. */
struct redisReply *rcli_command(struct rcli *k, const char *what, int argc, const char **argv,
                                const size_t *lens);
/* A message on stderr ("promptcache TOOL: ..."), after whatever stdout holds so far. */
void rcli_error(struct rcli *k, const char *fmt, ...) PC_PRINTF(2, 3);
void rcli_close(struct rcli *k);

#endif
