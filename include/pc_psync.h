/*
 * pc_psync.h - the prefix index shared by every proxy instance through
 * Redis, without a Redis round trip on any request: each instance keeps its
 * own index (pc_pindex.h) and tells the others what it records.
 *
 *   worker: route_pick ─▶ pindex_record; its 2xx head ─▶ pindex_publish ─▶
 *           sink: queue (mutex, bounded)
 *   writer thread: queue ─▶ pipeline of
 *        XADD pc:2:px MAXLEN ~ N * d <instance, ms, replica, links>
 *        ZADD pc:2:pz:{<replica>} <stamp> <link> ...   (+ a trim now and then)
 *   the process's stream follower (pc_follow.h): at (re)connect, ZRANGE of
 *        each replica's set ─▶ pindex_apply, then the stream's entries from its
 *        end ─▶ pindex_apply (others' records)
 *
 * A link is 12 bytes, an 8-byte hash and 4-byte tokens, big-endian; a set
 * member is one link, its score the link's stamp (pc_pindex.h). The
 * stream is how instances keep in step; the sets are how one that starts
 * (or reconnects) catches up. Every command touches one key, so the keys
 * may live in a Redis Cluster (each replica's set has its own hash tag).
 *
 * The writer uses a blocking connection of its own and never touches a
 * worker's; Redis being away costs nothing but the sharing (records queued
 * while it is away are dropped beyond a bound, and counted).
 */
#ifndef PC_PSYNC_H
#define PC_PSYNC_H

#include <stddef.h>

struct conf;
struct follow;
struct route;
struct psync;

#define PSYNC_STREAM     "pc:2:px"
#define PSYNC_SET_PREFIX "pc:2:pz:"

/* NULL with err set if the Redis URL cannot be used. Registers a metrics row. */
struct psync *psync_create(const struct conf *c, struct route *route, char *err, size_t errlen);
/* Register the stream's handler with the process's follower (before it starts); -1 if full. */
int psync_follow(struct psync *ps, struct follow *f);
/* Start the writer (after the workers' metrics rows are registered); -1 on failure. */
int psync_start(struct psync *ps);
/* Stop the writer (dropping what is queued) and free everything; the follower first. */
void psync_destroy(struct psync **ps);

#endif
