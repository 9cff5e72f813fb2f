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
 * Deletes and flushes made through any instance reach every L1 through the
 * Redis stream the semantic index already follows (pc_vsync.h: op=flush,
 * op=del), read by one thread per process with its own blocking
 * connection. A Stream rather than keyspace notifications: the flush events
 * are already written there by every instance, a stream is read from a
 * position (a reconnection knows it may have missed something) and it needs
 * no `notify-keyspace-events` setting, which managed Redis services often
 * refuse. The L1 is used only while that reader follows the stream: on a
 * lost connection it is emptied and stays off until the reader is back.
 *
 * Every clear bumps a generation. An insert carries the generation read when
 * its Redis command was sent and is dropped if a clear came in between, so a
 * slow reply can never bring back what a flush removed.
 */
#ifndef PC_L1_H
#define PC_L1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_entry.h"
#include "pc_util.h"

struct conf;
struct l1;
struct l1_item;

#define L1_TENANT_LEN TENANT_ID_LEN /* hex characters */

/* What a configured l1-size means in bytes (auto: 1/32 of the memory, at most 512 MiB). */
int64_t l1_size_bytes(const struct conf *c);

/* A table of at most max_bytes; NULL if max_bytes is 0. */
struct l1 *l1_create(int64_t max_bytes);
/* Stops the reader first (l1_follow); items still referenced must have been released. */
void l1_destroy(struct l1 **l);

/* Start the reader of redis_url's stream (a thread); -1 if it cannot start. */
int l1_follow(struct l1 *l, const char *redis_url, int64_t timeout_ms);

/* Whether lookups may use the table now (the reader follows the stream). */
bool l1_live(const struct l1 *l);
/* Read before sending the Redis command whose answer may be inserted. */
uint64_t l1_generation(const struct l1 *l);

/*
 * The item of (tenant, exact) if it is there and before its deadline (wall
 * clock, ms), with a reference the caller drops with l1_release. NULL when
 * not there, expired or not live.
 */
struct l1_item *l1_get(struct l1 *l, const char tenant[L1_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN], int64_t now_ms);
const char *l1_item_data(const struct l1_item *it, size_t *len);
void l1_release(struct l1_item **it);

/*
 * Insert (or replace) the encoded entry val until deadline_ms (wall clock),
 * soon: val is copied and the item is made on the L1's filler thread, in its
 * own malloc arena (long-lived items among a worker's short-lived
 * allocations fragment its arena). Dropped if gen is not the current
 * generation when it is made, if the item is larger than a shard's budget /
 * 8, or if the deadline has passed.
 */
void l1_put(struct l1 *l, const char tenant[L1_TENANT_LEN],
            const unsigned char exact[PC_SHA256_LEN], const void *val, size_t len,
            int64_t deadline_ms, uint64_t gen);

/*
 * Remove (tenant, exact) at once because a newer answer replaces it in Redis
 * (its l1_put, if any, comes after): the old one is never served again. The
 * generation stays, so inserts on their way, the new answer's too, still land.
 */
void l1_forget(struct l1 *l, const char tenant[L1_TENANT_LEN],
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
    uint64_t reads;   /* XREAD rounds answered (an idle one takes about a second) */
    uint64_t dropped; /* inserts dropped: the filler's queue was full (l1-size / 8 bytes) */
};
void l1_get_counters(const struct l1 *l, struct l1_counters *out);
/* The counters as JSON members ("l1_items":...), without braces, for /stats. */
void l1_render_json(const struct l1 *l, struct pc_buf *out);

#endif
