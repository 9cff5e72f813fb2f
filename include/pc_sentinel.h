/*
 * pc_sentinel.h - asking Redis Sentinel where the primary is: `SENTINEL
 * get-master-addr-by-name MASTER` sent to the sentinels of a sentinel://
 * URL (pc_rurl.h) in turn, with AUTH first when the URL gives the
 * sentinels' credentials.
 *
 * Two ways, for the two kinds of client in the process:
 * - sentinel_ask_start: on an event loop (the worker stores). A short-lived
 *   hiredis async context per sentinel, a name resolved by pc_resolve.h, and
 *   a timer that bounds each sentinel; the loop never blocks.
 * - sentinel_query: blocking, for the background threads and the tools
 *   (pc_rcli.h), each call bounded by its timeout.
 *
 * A sentinel's answer can lag behind a failover: whoever connects to the
 * address checks with ROLE that it is a primary (sentinel_role_ok) and asks
 * again if not.
 */
#ifndef PC_SENTINEL_H
#define PC_SENTINEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct redisReply;
struct rurl;
struct sentinel_ask;

/*
 * The answer of sentinel_ask_start: host (valid during the call) and port of
 * the primary, and which sentinel (index in the URL) said so; or host NULL
 * and err naming what the last sentinel tried did wrong.
 */
typedef void sentinel_fn(void *arg, const char *host, int port, size_t which, const char *err);

/*
 * Ask the sentinels of u (a RURL_SENTINEL URL that must outlive the ask),
 * starting with index first and going round once, each bounded by
 * timeout_ms. The callback runs once, from a timer of base's loop (never
 * from inside this call or a hiredis callback); the ask then frees itself.
 */
struct sentinel_ask *sentinel_ask_start(struct event_base *base, const struct rurl *u, size_t first,
                                        int64_t timeout_ms, sentinel_fn *cb, void *arg);
/* The callback of *a will not run; *a is NULLed (NULL ignored). Only before the callback. */
void sentinel_ask_cancel(struct sentinel_ask **a);

/*
 * Blocking: ask sentinel i of u, connecting, AUTH and the answer all within
 * timeout_ms (not each read: a sentinel that sends a byte at a time is cut
 * off, "sentinel HOST:PORT: timed out (no reply in time): did not answer
 * within N ms"; the name lookup is the system's, bounded by its own). 0 with
 * *host (malloc'd) and *port, or -1 with a message in err (never a password).
 */
int sentinel_query(const struct rurl *u, size_t i, int64_t timeout_ms, char **host, int *port,
                   char *err, size_t errlen);

/*
 * A ROLE reply says "master". Otherwise false, with the role it says (or
 * why the reply makes no sense) in role.
 */
bool sentinel_role_ok(const struct redisReply *r, char *role, size_t n);
/* An error reply that says the server is a replica now (READONLY): a failover happened. */
bool sentinel_readonly(const struct redisReply *r);

#endif
