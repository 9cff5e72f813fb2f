/*
 * pc_l1.h - the L1: a bounded table of hot exact answers in the proxy's own
 * memory, in front of Redis, shared by every worker of the process.
 *
 *   lookup (any worker) ─▶ shard = hash(exact key) % L1_SHARDS ─▶ that shard's
 *                           lock only: find, check the deadline, mark recent,
 *                           take a reference ─▶ the caller decodes and answers
 *                           outside the lock, then drops its reference
 *
 * What it holds is exactly what Redis holds: the encoded entry (pc_entry.h)
 * under the same tenant and exact key, until the deadline its Redis key has
 * (a put knows its TTL; an entry read from Redis learns its PTTL). Each shard
 * keeps its share of the byte budget with an LRU list; an item counts its
 * bytes and its bookkeeping.
 *
 * Writes, deletes and flushes made through any instance reach every L1
 * through the Redis stream the semantic index already follows (pc_vsync.h:
 * op=set after every stored entry, op=del, op=flush), read by the process's
 * one stream follower (pc_follow.h): another instance's write of a
 * key (a refresh, a new TTL, a concurrent miss) drops this process's copy,
 * which the next hit reads again from Redis. A Stream rather than keyspace notifications: the flush
 * events are already written there by every instance, a stream is read from a position (a
 * reconnection knows it may have missed something) and it needs no `notify-keyspace-events`
 * setting, which managed Redis services often refuse. The L1 is used only while the follower
 * follows the stream: on a lost connection it is emptied and stays off until the follower is back.
 *
 * Every change bumps a generation and stamps it on the changed key (one
 * stamp per 1/16384 of the keys, which knows the last key it stamped; a
 * clear stamps them all). An insert carries
 * the generation read when its Redis command was sent and is dropped if its
 * key changed since, so a slow reply can never bring back what a delete, a
 * flush or another instance's newer write removed:
 *
 *   B: GET k (gen 7) ........................ reply: old value ─▶ insert(gen 7): dropped
 *   A:          SET k new, XADD set k ─▶ B's reader: delete k, stamp k = 8
 */
#ifndef PC_L1_H
#define PC_L1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_entry.h"
#include "pc_util.h"

struct conf;
struct follow;
struct l1;
struct l1_item;
struct stat_group;

#define L1_TENANT_LEN TENANT_ID_LEN /* hex characters */
#define L1_CHECK_MS   1000          /* how often a hit item's Redis key is looked at */

/* What a configured l1-size means in bytes (auto: 1/32 of the memory, at most 512 MiB). */
int64_t l1_size_bytes(const struct conf *c);

/* A table of at most max_bytes; NULL if max_bytes is 0. */
struct l1 *l1_create(int64_t max_bytes);
/* The follower must be stopped first (follow_destroy); items still referenced must have been
 * released. */
void l1_destroy(struct l1 **l);

/* Register the L1's handler of the stream with the process's follower (before it starts); -1 if
 * it cannot (the L1 then stays off). */
int l1_follow(struct l1 *l, struct follow *f);

/* Whether lookups may use the table now (the follower follows the stream). */
bool l1_live(const struct l1 *l);
/* Whether an entry of len bytes would be taken now (live, and not over l1-size / 128). */
bool l1_keeps(const struct l1 *l, size_t len);
/* Read before sending the Redis command whose answer may be inserted. */
uint64_t l1_generation(const struct l1 *l);

/*
 * The clock of the items' deadlines, in ms: monotonic, not the wall clock,
 * so that a step of the wall clock (an NTP step, a VM restored) never lets
 * an item outlive its Redis key, whose TTL runs on Redis's own clock.
 */
int64_t l1_now_ms(void);

/*
 * The item of (tenant, exact) if it is there and before its deadline
 * (l1_now_ms), with a reference the caller drops with l1_release. NULL when
 * not there, expired or not live.
 */
struct l1_item *l1_get(struct l1 *l, const char tenant[L1_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN], int64_t now_ms);
const char *l1_item_data(const struct l1_item *it, size_t *len);
/*
 * Whether the caller, having hit it, should look at its Redis key now: true at most once per
 * L1_CHECK_MS per item (the first caller after that long gets it). A key changed by hand
 * (DEL, a SET or a hash of something else, FLUSHALL unseen by the stream) writes no stream
 * event: the caller compares the key's STRLEN with the item's length and l1_deletes the item
 * when they differ, so an answer Redis no longer holds is served for about L1_CHECK_MS, not
 * until its deadline.
 */
bool l1_item_check_due(struct l1_item *it, int64_t now_ms);
void l1_release(struct l1_item **it);

/*
 * Insert (or replace) the encoded entry val until deadline_ms (l1_now_ms),
 * soon: val is copied and the item is made on the L1's filler thread, in its
 * own malloc arena (long-lived items among a worker's short-lived
 * allocations fragment its arena). For a value read from Redis (gen read
 * before the read was sent). Dropped if its key changed or the table was
 * cleared since gen when it is made, if the item is larger than a shard's
 * budget / 8, or if the deadline has passed.
 */
void l1_put(struct l1 *l, const char tenant[L1_TENANT_LEN],
            const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
            int64_t deadline_ms, uint64_t gen);

/*
 * This process wrote val under (tenant, exact) in Redis (its SET was
 * acknowledged; gen read before it was sent): the item held so far is
 * dropped at once and nothing read earlier can come back; val goes in, as
 * l1_put, unless the key changed since gen (then which write Redis kept is
 * unknown) or val is NULL (it is not kept; a write that failed is l1_unsure's).
 */
void l1_replace(struct l1 *l, const char tenant[L1_TENANT_LEN],
                const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
                int64_t deadline_ms, uint64_t gen);

/*
 * This process sent a write of (tenant, exact) whose outcome it does not
 * know (it failed, timed out or was cancelled): Redis may still apply it,
 * late, after another worker read the old value into the table. The item
 * held is dropped at once (as l1_delete), and the write's own stream event,
 * when it comes, is applied as another instance's would be (this process
 * skips its own otherwise), so that what was read before it is dropped.
 */
void l1_unsure(struct l1 *l, const char tenant[L1_TENANT_LEN],
               const unsigned char exact[PC_SHA256_LEN]);

/* Remove one item / every item (tenant NULL) or one tenant's. Both bump the generation. */
void l1_delete(struct l1 *l, const char tenant[L1_TENANT_LEN],
               const unsigned char exact[PC_SHA256_LEN]);
void l1_clear(struct l1 *l, const char *tenant);

struct l1_counters {
    bool live;
    uint64_t items, bytes, max_bytes;
    uint64_t inserts, evictions, expired, clears;
    uint64_t events;  /* stream events applied */
    uint64_t dropped; /* inserts dropped: the filler's queue was full (l1-size / 8 bytes) */
    uint64_t stale;   /* inserts dropped: their key changed after they were read or written */
};
void l1_get_counters(const struct l1 *l, struct l1_counters *out);
/* Its series (pc_stats.h), read from a struct l1 (the counters above). */
extern const struct stat_group l1_series;

#endif
