/*
 * pc_follow.h - the process's one reader of Redis Streams: one thread that
 * follows every stream a module cares about (pc:2:vs: vector events and L1
 * invalidations; pc:2:px: prefix records) and hands each entry, in order, to
 * the handlers those modules registered (vsync for the vector index, l1,
 * psync for the prefix index).
 *
 *   connect ─▶ note each stream's end ─▶ handlers' start (catch up: what
 *      ▲        (XREVRANGE + - COUNT 1)   came before is unknown to them)
 *      │                                        │
 *      │                                        ▼
 *      └── failure: handlers' down, ◀── XREAD BLOCK from the noted ids ─▶ each
 *          backoff 100 ms .. 5 s        entry to the handlers of its stream;
 *          (from 100 ms again once      a full batch behind a trim: that
 *          it had followed)             stream's handlers down, then start
 *
 * A stream that is not there when its end is noted is made, empty, if the
 * Redis holds this build's schema: a stream deleted (FLUSHALL, FLUSHDB, DEL)
 * is then told by its absence, even if nothing was ever written to it (an L1
 * filled by reads has read no entry that a count could miss).
 *
 * One XREAD names every stream on one Redis (or Sentinel-watched primary).
 * In a Redis Cluster the streams live on their own slots (a command may not
 * name two), so each has its own connection to the node of its slot, and the
 * one thread waits on all of them at once (poll); a MOVED, like any error,
 * makes it connect anew, reading the slot map again.
 *
 * Handlers run on the follower's thread and must not block for long (a
 * handler that needs Redis work queues it to a thread of its own), except
 * start, which may read with the connection it is given.
 *
 * Stopping: follow_destroy wakes the thread's wait and shuts its sockets
 * down, so it returns at once, not after a blocked read.
 */
#ifndef PC_FOLLOW_H
#define PC_FOLLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct follow;
struct rcli;
struct stats;
struct redisReply;

#define FOLLOW_HANDLERS_MAX 8
#define FOLLOW_STREAMS_MAX  4

/*
 * Following starts (at connect, or after events were lost to a trim) at the
 * stream's end: entries before it will not come. k is a connection the
 * handler may use for blocking catch-up reads of other keys (rcli_call routes
 * them); 0, or -1 if a command on k failed (the follower then reconnects).
 */
typedef int follow_start_fn(void *arg, struct rcli *k);
/* One entry of the stream: its field/value array (the id is checked already). */
typedef void follow_entry_fn(void *arg, const struct redisReply *fields);
/* The stream is not followed any more (Redis lost, or entries lost): start comes next. */
typedef void follow_down_fn(void *arg);

struct follow_handler {
    const char *name;   /* for log lines: "l1", "vector index", "prefix index" */
    const char *stream; /* the stream key (copied) */
    follow_start_fn *start;
    follow_entry_fn *entry;
    follow_down_fn *down; /* may be NULL */
    void *arg;
};

struct follow_opts {
    const char *url;    /* redis://, unix:, sentinel:// or cluster:// */
    int64_t timeout_ms; /* per command and connect (at least 1 s) */
    int block_ms;       /* XREAD BLOCK; 0 = 1000 */
    size_t count;       /* XREAD COUNT; 0 = 500 */
    struct stats *row;  /* stream_* counted there (the caller's); NULL: a row of its own,
                         * registered, freed by follow_destroy (empty the registry first) */
};

/* NULL (logged) if the URL is invalid. */
struct follow *follow_create(const struct follow_opts *o);
/* Before follow_start only; -1 (logged) when full. */
int follow_add(struct follow *f, const struct follow_handler *h);
/* Start the thread; -1 (logged) if it cannot start. */
int follow_start(struct follow *f);
/* Stop and join the thread (handlers are not called after), free everything; *f is NULLed. */
void follow_destroy(struct follow **f);

#endif
