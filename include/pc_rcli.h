/*
 * pc_rcli.h - the blocking Redis connection of the command-line tools
 * (`promptcache migrate`, `promptcache report`) and of the daemon's own
 * background threads (vsync's reader, psync's writer and reader). Never
 * used on an event loop. Each (re)connection follows the URL anew: a
 * sentinel:// URL asks the sentinels where the primary is now, and a host
 * name is resolved again. Error messages go to stderr prefixed with the
 * tool's name (or, with quiet, only to k->errmsg for the caller to log),
 * never with a password.
 *
 * With cluster:// (pc_cluster.h) the client holds the slot map and one
 * connection per primary it has used, made on first use. rcli_call and
 * rcli_command send a command to the primary that owns its key, follow
 * MOVED (the map is read again before the next command), ASK (ASKING first)
 * and TRYAGAIN (a few times, a little later), and go over every primary in
 * turn for SCAN: the cursor they return is then the client's own
 * ("CURSOR@NODE"), to be passed back as it is, and "0" still ends the
 * iteration. Code that talks to k->rc itself (pipelines, XREAD) first points
 * it at the node of its key with rcli_route. For the other kinds of URL all
 * of this is the one connection.
 */
#ifndef PC_RCLI_H
#define PC_RCLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_rurl.h"
#include "pc_util.h"

struct conf;
struct redisContext;
struct redisReply;
struct rcli_cluster;

struct rcli {
    struct redisContext *rc; /* cluster://: the connection of the last command (one node's) */
    struct rurl url;
    size_t next_sentinel; /* sentinel:// : the sentinel to ask first (the last that answered) */
    char *where;      /* the URL without its secrets (and the primary's address), for messages */
    const char *tool; /* "migrate", "report": prefixes messages */
    bool quiet;       /* messages only into errmsg, not on stderr */
    bool answered;    /* not cluster://: rc brought a reply (a reset before one: a TLS port?) */
    char errmsg[512]; /* the last message */
    struct rcli_cluster *cl; /* cluster://: the slot map and a connection per node; else NULL */
};

/*
 * A blocking connection to the server of u that holds the data, AUTH and
 * SELECT done: for sentinel:// the primary the sentinels name - asked in
 * turn from *next_sentinel (updated to the one that answered), each bounded
 * by min(timeout_ms, 1 s) for all of it, and the address checked with ROLE -
 * else the URL's server. timeout_ms bounds connecting and every reply, the
 * whole of it (not each read: see redisev_get_reply). A host name is
 * resolved on every call. addr (if not NULL) gets "HOST:PORT" or the socket
 * path. NULL with a message in err (never a password).
 */
struct redisContext *rcli_dial(const struct rurl *u, int64_t timeout_ms, size_t *next_sentinel,
                               char *addr, size_t addrlen, char *err, size_t errlen);

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
/*
 * Run one command as redisCommandArgv does - error replies are returned, the
 * caller's to judge - routed as described at the top. NULL when no reply came
 * (the connection failed), with the reason in k->errmsg and nothing printed;
 * k->rc is then still the context that failed, or NULL if none could be made.
 */
struct redisReply *rcli_call(struct rcli *k, int argc, const char **argv, const size_t *lens);
/*
 * redisGetReply for a blocking context, with a cap: a reply that grows past RCLI_REPLY_MAX
 * bytes not parsed yet (a bulk of 2^40 bytes that keeps coming: hiredis 0.14 buffers any)
 * fails the context with a protocol error instead of filling the memory. And a deadline: a
 * reply not whole within the context's timeout (redisev_get_reply) fails it as timed out.
 */
#define RCLI_REPLY_MAX (64u << 20)
/*
 * The elements one reply on a blocking connection may announce, added up (more fail it,
 * see redisev_guard; each costs about 72 bytes of reply objects): the largest read is the
 * prefix follower's catching up, ZRANGE WITHSCORES of up to 1,000,000 members (2,000,001
 * elements, psync.c checks); an XREAD of COUNT entries, a member list of a vector
 * partition or a SCAN page are far below.
 */
#define RCLI_REPLY_ELEMENTS (1u << 21)
struct redisContext;
int rcli_get_reply(struct redisContext *rc, void **reply);
/*
 * Point k->rc at the connection that serves key (cluster://: the primary
 * owning its slot, connected if needed; else the one connection). 0, or -1
 * with the reason in k->errmsg (nothing printed).
 */
int rcli_route(struct rcli *k, const void *key, size_t klen);
/* Whether r is an error reply that a cluster node redirects with (MOVED, ASK...). */
bool rcli_redirected(const struct redisReply *r);
/* A message on stderr ("promptcache TOOL: ..."), after whatever stdout holds so far. */
void rcli_error(struct rcli *k, const char *fmt, ...) PC_PRINTF(2, 3);
void rcli_close(struct rcli *k);
/* One field and value pair of an HSCAN page (replies of any type); false: read no more. */
typedef bool rcli_pair_fn(void *arg, const struct redisReply *field,
                          const struct redisReply *value);
/*
 * HSCAN key a page at a time (a big hash never blocks Redis the way one
 * HGETALL would), handing each pair to fn, at most max pairs: 0 read through,
 * 1 stopped with more to read, RCLI_NOT_A_HASH the key holds another type
 * (what was read before stands; no message), -1 after a message.
 */
#define RCLI_NOT_A_HASH 2
int rcli_hscan(struct rcli *k, const char *key, size_t max, rcli_pair_fn *fn, void *arg);
/* Whether r is a string (or status) reply equal to s. */
bool rcli_str_is(const struct redisReply *r, const char *s);

#endif
