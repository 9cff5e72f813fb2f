/*
 * pc_store.h - the worker's Redis connection: hiredis async on the worker's
 * event_base (pc_redisev.h), with the proxy's own per-command timeout
 * (hiredis 0.14 has none), reconnect with exponential backoff, and the schema
 * check/migration on every (re)connect. While ready it looks every second that
 * the schema key is still there, and sets this build's version back if it is
 * gone (an operator's FLUSHALL: see store.c, the schema watch).
 *
 * The store is an optimisation, never a dependency of a request: when Redis is
 * down, slow or not yet migrated, store_ready() is false and commands return
 * NULL at once, so the caller bypasses the cache. Failures are counted in
 * redis_errors / redis_timeouts (a timeout counts in both).
 *
 * Logging is per process, not per command or worker: ONE warning ("the cache
 * is not working (where: why)") when the first store of the process loses
 * its usable connection - lost, refused, stalled (commands timing out with no
 * sign of life), blocked by the schema - or sees every command time out for
 * max(1 s, 20 x redis-timeout); ONE notice ("the cache works again") when the
 * last such store is back. Per-worker details are at info.
 *
 * A command's timeout runs in real time from when it is sent, however busy the
 * event loop is; a SET gets 1 ms more per 64 KiB of value. A command that
 * times out does not by itself drop the connection: that happens when Redis
 * then shows no sign of life (no reply nor part of one, and it takes none of
 * the bytes still queued) for another redis-timeout.
 *
 * Callbacks run on the worker's thread, at most once, from inside a hiredis
 * callback or a timer; after store_cancel() they never run.
 *
 * With cluster:// (pc_cluster.h) the store routes each command to the
 * primary that owns its key's slot (one connection per primary, each with
 * all of the above), follows MOVED, ASK and TRYAGAIN, and store_ready() is
 * true once the slot map is known and the schema checked: a command whose
 * primary is not usable returns NULL (or -1) like a command of a store that
 * is not ready, so the caller bypasses. store_write() finds the key of its
 * command by its name (pc_cluster.h's cluster_key_index); every command
 * must touch keys of one slot.
 */
#ifndef PC_STORE_H
#define PC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct stats;
struct store;
struct store_cmd;

enum store_status {
    STORE_OK = 0,       /* reply received (for GET: val may be NULL = no such key) */
    STORE_ERR = -1,     /* error reply or connection lost */
    STORE_TIMEOUT = -2, /* no reply within redis-timeout */
};

/* GET: val/len valid only during the call; val NULL means the key does not exist. */
typedef void store_get_fn(void *arg, enum store_status st, const char *val, size_t len);
/* Commands with an integer result (deleted key counts etc.). */
typedef void store_int_fn(void *arg, enum store_status st, long long n);

struct store_opts {
    const char *url;    /* a Redis URL (pc_rurl.h): redis://, unix:, sentinel:// or cluster:// */
    int64_t timeout_ms; /* per command */
    bool auto_migrate;  /* apply pending migrations on connect */
    int64_t max_entry;  /* cache-max-entry-size: the replies' cap follows (store_reply_max) */
};

/*
 * NULL (logged) if opts->url is invalid. st (the worker's stats row, not
 * NULL) and base must outlive the store. The process must ignore SIGPIPE:
 * hiredis writes to a socket Redis may have closed.
 *
 * Every connection attempt follows the URL anew, on the loop and without
 * blocking it: with sentinel:// the sentinels are asked (in turn, each
 * within the connect timeout) where the primary is, and the address is
 * checked with ROLE once connected; a host name (the URL's, a sentinel's,
 * or the one a sentinel announces) is resolved again by pc_resolve.h, never
 * by hiredis on the loop. So the store follows a failover, and Redis moving
 * to another address (a recreated container), by itself. With sentinel://,
 * a READONLY error (the server turned into a replica) drops the connection
 * and the sentinels are asked again; reconnects back off from 100 ms to
 * 1 s (5 s otherwise).
 */
struct store *store_create(struct event_base *base, const struct store_opts *opts,
                           struct stats *st);
/*
 * The largest reply a store takes (larger ones, a bulk of 2^40 bytes that keeps coming,
 * drop the connection rather than fill the memory): twice the largest entry (its headers
 * and sections come on top of the answer), at least STORE_REPLY_FLOOR, plus
 * STORE_REPLY_SLACK.
 */
#define STORE_REPLY_FLOOR (64u << 20)
#define STORE_REPLY_SLACK (1u << 20)
/*
 * The elements one reply on a store connection may announce, added up (more drop the
 * connection, see redisev_guard): a SCAN page (COUNT 1000), a script's list of keys, a
 * cluster's CLUSTER SHARDS or SLOTS (16,384 slot ranges at most) are far below.
 */
#define STORE_REPLY_ELEMENTS (1u << 20)
size_t store_reply_max(int64_t max_entry);
/* After a reload: the cap for max_entry, on s's connections now and to come. */
void store_set_reply_max(struct store *s, int64_t max_entry);
/* Begin connecting (non-blocking). */
void store_start(struct store *s);
/* Connected, authenticated, db selected and schema at the current version. */
bool store_ready(const struct store *s);
/* A cluster:// store (its keys on several primaries). */
bool store_is_cluster(const struct store *s);
/*
 * Wait until s is READY (at once, on the next loop pass, if it is), at most timeout_ms: cb
 * gets STORE_OK then, STORE_TIMEOUT after that long, STORE_ERR if s is destroyed first. No
 * command is sent. Cancel with store_cancel.
 */
struct store_cmd *store_when_ready(struct store *s, int64_t timeout_ms, store_int_fn *cb,
                                   void *arg);
/*
 * A wait of ms, or less if s becomes READY meanwhile: cb gets STORE_OK if s is READY then,
 * STORE_TIMEOUT if not, STORE_ERR if s is destroyed first. For a retry after a while that
 * ends with the store. NULL if s is closed. Cancel with store_cancel.
 */
struct store_cmd *store_after(struct store *s, int64_t ms, store_int_fn *cb, void *arg);
/*
 * Drop the connection; the callbacks of pending commands run with STORE_ERR
 * before this returns. The store is closed by then: a command such a callback
 * sends is refused (NULL, -1), and it must not keep the store. *s is NULLed.
 */
void store_destroy(struct store **s);

/*
 * GET key. NULL (and no callback) if the store is not ready. Otherwise the
 * callback runs exactly once (OK, ERR or TIMEOUT), unless store_cancel() is
 * called first; the returned pointer is valid until then, and not after.
 */
struct store_cmd *store_get(struct store *s, const void *key, size_t klen, store_get_fn *cb,
                            void *arg);
/* PTTL key: the callback gets the milliseconds left (-2: no such key, -1: no TTL); as store_get. */
struct store_cmd *store_pttl(struct store *s, const void *key, size_t klen, store_int_fn *cb,
                             void *arg);
/* SET key val PX ttl_ms, fire and forget (failures only counted). -1 if not ready or ttl <= 0. */
int store_set(struct store *s, const void *key, size_t klen, const void *val, size_t vlen,
              int64_t ttl_ms);
/*
 * SET with a completion callback (STORE_OK once Redis acknowledged it); NULL
 * and no callback if not ready. Used where a client must be able to hit the
 * entry as soon as it has its answer.
 */
struct store_cmd *store_set_cb(struct store *s, const void *key, size_t klen, const void *val,
                               size_t vlen, int64_t ttl_ms, store_int_fn *cb, void *arg);
/*
 * Fire-and-forget write (HINCRBY, EXPIRE...): failures are only counted.
 * Arguments are binary-safe and copied. -1 if not ready.
 */
int store_write(struct store *s, int argc, const char **argv, const size_t *lens);
/*
 * The same write with a completion callback: STORE_OK once Redis answered anything but an
 * error (an OOM refusal, WRONGTYPE... is STORE_ERR). NULL and no callback if not sent. For
 * writes whose loss must be told, such as the stream events of a delete.
 */
struct store_cmd *store_write_cb(struct store *s, int argc, const char **argv, const size_t *lens,
                                 store_int_fn *cb, void *arg);
/*
 * A background write that no client waits for, as store_write_cb but given the steps' time
 * (20 x the command timeout) before its callback gets STORE_TIMEOUT: writes chained on one
 * another's outcome (a vector's record, its member, its event) wait for Redis' answer, not
 * for a client's patience. cb may be NULL.
 */
struct store_cmd *store_write_bg_cb(struct store *s, int argc, const char **argv,
                                    const size_t *lens, store_int_fn *cb, void *arg);
/*
 * Delete every key matching a glob pattern (SCAN + UNLINK in batches, each
 * step under the command timeout x 20). cb gets the number deleted. On a
 * cluster it runs on every primary at once (one UNLINK per slot), NULL
 * unless every slot has a usable primary.
 */
struct store_cmd *store_delete_matching(struct store *s, const char *pattern, store_int_fn *cb,
                                        void *arg);
/*
 * Delete the keys matching a glob pattern that a Lua script picks, in the
 * shape of store_delete_matching: SCAN in batches, and for each batch one
 * EVAL of pick->script whose KEYS are the batch's keys, each followed by its
 * twin when pick->twin_from is set (the key with that prefix replaced by
 * pick->twin_to, e.g. an entry's vector record: same hash tag) and, when
 * pick->twin2_to is set too, by its second twin (that prefix replaced by
 * twin2_to), and whose ARGV are pick->args. The script deletes what it picks and returns
 * {skipped, key, key, ...}: an integer (keys it could not judge, e.g.
 * unreadable values), then the picked keys, each named in KEYS. For every
 * batch pick->each runs once per picked key (key, len) and once with key
 * NULL and len = skipped when that is not 0; it must not cancel the command.
 * Every reply is checked: a picked key that is not one of the batch's is an
 * error. cb gets the number picked. Each step runs under the command timeout
 * x 20. Copies what pick holds.
 *
 * Redis Cluster: like store_delete_matching's UNLINK, a batch's EVAL names
 * keys of many hash tags, so it runs where SCAN found them (every primary in
 * turn) split by slot, exactly as that UNLINK must be; the script touches
 * only the keys it is given (a key and its twin share a tag), never one
 * found by itself.
 */
typedef void store_key_fn(void *arg, const char *key, size_t len);
struct store_pick {
    const char *script;
    int nargs;
    const char *const *args;
    const char *twin_from, *twin_to; /* NULL: no twins */
    store_key_fn *each;
    const char *twin2_to; /* NULL: one twin at most (needs twin_from) */
};
struct store_cmd *store_delete_picked(struct store *s, const char *pattern,
                                      const struct store_pick *pick, store_int_fn *cb, void *arg);
/*
 * Any command with an integer reply (EVAL of a script returning a number,
 * UNLINK...): the callback gets the integer, as store_pttl. Arguments are
 * binary-safe and copied. On a cluster it goes to the primary of its first
 * key's slot (its keys must share that slot); NULL for a keyless command.
 */
struct store_cmd *store_call_int(struct store *s, int argc, const char **argv, const size_t *lens,
                                 store_int_fn *cb, void *arg);

/*
 * The callback of *c will not run; *c is set to NULL (a NULL *c is ignored).
 * Only for an outstanding command: not after its callback has run.
 */
void store_cancel(struct store_cmd **c);

#endif
