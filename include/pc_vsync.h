/*
 * pc_vsync.h - Redis is the source of truth of the vector index: the vector
 * records Redis keeps next to the entries, each partition's member list, the
 * stream that tells every proxy instance about changes, and what keeps this
 * process's vindex in step with all three.
 *
 * Keys (prefix PC_KEY_PREFIX; the hash tag puts a vector on its entry's
 * Redis Cluster slot, a member list on its partition's, and no command here
 * touches two tags):
 *
 *   <prefix>v:{<tenant16hex>:<sha256hex>}     vector record (pc_vrec.h), with the entry's TTL
 *   <prefix>pm:{<tenant16hex>:<partition64hex>} the partition's member list: a sorted set of
 *                                             entry keys "<sha256hex>" (the tenant is the
 *                                             list's) scored by the vector's
 *                                             expiry (ms); the key expires with its
 *                                             last member; members expired are trimmed lazily
 *                                             (on each put and each load), those whose record
 *                                             has gone on the next load
 *   <prefix>pm-ready                          "1" once vectors of older versions were listed
 *   <prefix>vs                                stream, trimmed with MAXLEN ~ VSYNC_STREAM_MAXLEN:
 *       op=add   k=<tenant16hex>:<sha256hex> r=<record> m=1  (m: listed; older writers omit it)
 *       op=del   k=<tenant16hex>:<sha256hex>
 *       op=del   k=<tenant16hex>:<sha256hex> p=1  (a purge's; of zeros, its notice: pc_fence.h)
 *       op=flush [t=<tenant16hex>]          (no t: everything)
 *       op=set   k=<tenant16hex>:<sha256hex> i=<instance16hex>
 *
 * Writers (the cache module, on its worker's connection): a stored entry
 * sends XADD set right after the SET of the entry (the same connection, so
 * Redis has the new entry before any reader sees the event; on a cluster
 * once a command sent after the SET on the entry's primary is answered,
 * cache.c's publish_set: every L1 drops
 * what it held under that key, and the writer, named by i, skips its own);
 * one with a vector also sends SET of the record, ZADD to the member list
 * (with its expiry and a trim), and XADD add; a deleted entry (or a replaced
 * one whose vector must go) DEL, ZREM when the partition is known, and XADD
 * del; a flush, after deleting the keys and lists, XADD flush. Helpers below
 * fill the argv of each command, or send them through a struct store.
 *
 * Readers (this one and the L1's, pc_l1.h) parse events with
 * vsync_event_parse: every field is range-checked (a known op, an exact
 * lower-case hex id or tenant, a record of bounded size, at most
 * VSYNC_EVENT_FIELDS_MAX fields, none twice) and what fails is counted as
 * rejected, never applied: another writer can be wrong or hostile.
 *
 * This process's side (struct vsync): the stream's events reach it through
 * the process's follower (pc_follow.h, vsync_on_*): an add is applied only to
 * a partition in memory (others cost a look at the record's partition bytes),
 * a del costs one probe of the key table, a flush applies to all. A lookup of
 * a partition not in memory asks the loader (vsync_load_wait) and waits for
 * it at most redis-timeout; the loader thread, with its own blocking
 * connection, reads the member list (ZREVRANGEBYSCORE: the live members,
 * newest first), GETs the records, checks each (a member that is a key, a
 * score that is an expiry to come, a record of this partition: else rejected
 * and counted) and hands them to the vindex:
 *
 *   lookup: vindex_lookup ─ COLD ─▶ vsync_load_wait: vindex_want, queue ─▶ wait
 *                                                                 ▲   (≤ timeout)
 *   loader: queue ─▶ load_begin ─▶ ZREVRANGEBYSCORE pm ─▶ GET v:* ─▶ load_add
 *                    ─▶ trim the list ─▶ load_end (RESIDENT) ─▶ wake the waiters
 *
 * When the follower starts (again) at the stream's end - after a reconnect,
 * or behind a trim - what is in memory is read again in the background
 * (progress in the log with counts and an ETA); nothing is loaded at start.
 */
#ifndef PC_VSYNC_H
#define PC_VSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_store.h"
#include "pc_vindex.h"

struct stats;
struct store;
struct vindex;

#define VSYNC_STREAM_MAXLEN    100000
#define VSYNC_KEY_MAX          128           /* room for a vector key name */
#define VSYNC_ID_LEN           (16 + 1 + 64) /* "<tenant16hex>:<sha256hex>" */
#define VSYNC_ARGV_MAX         16
#define VSYNC_INSTANCE_LEN     16 /* hex characters naming a process in op=set events */
#define VSYNC_EVENT_FIELDS_MAX 8

/* "<prefix>v:{<tenant16hex>:<sha256hex>}" into out (NUL-terminated); its length. */
size_t vsync_vector_key(const unsigned char tenant[VINDEX_TENANT_LEN],
                        const unsigned char key[VINDEX_KEY_LEN], char out[VSYNC_KEY_MAX]);
/* The stream's name: "<prefix>vs". */
const char *vsync_stream_key(void);
/* "<tenant16hex>:<sha256hex>" into out (NUL-terminated). */
void vsync_id(const unsigned char tenant[VINDEX_TENANT_LEN],
              const unsigned char key[VINDEX_KEY_LEN], char out[VSYNC_ID_LEN + 1]);
/* Parse exactly "<tenant16hex>:<sha256hex>" (lower-case hex); 0 or -1. */
int vsync_parse_id(const char *s, size_t len, unsigned char tenant[VINDEX_TENANT_LEN],
                   unsigned char key[VINDEX_KEY_LEN]);
/* Parse exactly 16 lower-case hex characters (a tenant id); 0 or -1. */
int vsync_parse_tenant(const char *s, size_t len, unsigned char tenant[VINDEX_TENANT_LEN]);
/* Parse a stream entry id "<ms>-<seq>" (decimal, each within 64 bits); 0 or -1. */
int vsync_parse_stream_id(const char *s, size_t len, uint64_t *ms, uint64_t *seq);
/* This process's name in the events it writes (VSYNC_INSTANCE_LEN random hex, made once). */
const char *vsync_instance(void);

/*
 * One command's arguments. argv/lens point into the struct and into the
 * record the caller passed (borrowed: keep it alive until the command is
 * sent); a struct store copies them when it sends.
 */
struct vsync_argv {
    int argc;
    const char *argv[VSYNC_ARGV_MAX];
    size_t lens[VSYNC_ARGV_MAX];
    char key[VSYNC_KEY_MAX];
    char id[VSYNC_ID_LEN + 1];
    char tenant[17];
    char num[24];
};

/* One more field of the XADD in a (name, and val[0..len), which must outlive a). */
void vsync_argv_field(struct vsync_argv *a, const char *name, const char *val, size_t len);

/* "<prefix>pm:{<tenant16hex>:<partition64hex>}" into out; its length. */
size_t vsync_members_key(const unsigned char tenant[VINDEX_TENANT_LEN],
                         const unsigned char partition[VINDEX_PART_LEN], char out[VSYNC_KEY_MAX]);
/* SCAN pattern of every member list (tenant_hex NULL) or one tenant's (16 hex characters). */
void vsync_members_pattern(const char *tenant_hex, char out[VSYNC_KEY_MAX]);

/* SET <vector key> <record> PX ttl_ms */
void vsync_argv_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms);
/* DEL <vector key> */
void vsync_argv_unlink(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                       const unsigned char key[VINDEX_KEY_LEN]);
/* XADD <stream> MAXLEN ~ N * op add k <id> r <record> [m 1] (m: listed, its member listed) */
void vsync_argv_add(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    bool listed);
/* XADD <stream> MAXLEN ~ N * op del k <id> */
void vsync_argv_del(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN]);
/* XADD <stream> MAXLEN ~ N * op flush [t <tenant16hex>] (tenant NULL: everything) */
void vsync_argv_flush(struct vsync_argv *a, const unsigned char *tenant);
/* XADD <stream> MAXLEN ~ N * op set k <id> i <this process> */
void vsync_argv_entry_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN]);
/* ZADD <member list> <expires_ms> <sha256hex> */
void vsync_argv_member_add(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                           const unsigned char key[VINDEX_KEY_LEN],
                           const unsigned char partition[VINDEX_PART_LEN], int64_t expires_ms);
/* PEXPIREAT <member list> <expires_ms> NX|GT (cond) */
void vsync_argv_member_expire(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                              const unsigned char partition[VINDEX_PART_LEN], int64_t expires_ms,
                              const char *cond);
/* ZREM <member list> <sha256hex> */
void vsync_argv_member_del(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                           const unsigned char key[VINDEX_KEY_LEN],
                           const unsigned char partition[VINDEX_PART_LEN]);
/* ZREMRANGEBYSCORE <member list> -inf (now_ms: the members expired */
void vsync_argv_member_trim(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                            const unsigned char partition[VINDEX_PART_LEN], int64_t now_ms);

/*
 * The same through a worker's store (fire and forget, failures counted by
 * the store); 0, or -1 if the store is not ready (nothing sent). put = SET,
 * once answered the member list's ZADD, PEXPIREAT NX, PEXPIREAT GT and trim,
 * and once the ZADD is answered XADD add (store_write_bg_cb's time each; m
 * only if the ZADD worked; sent again, 7 tries at most, until Redis has it);
 * del = DEL + ZREM (partition known; NULL: the member goes lazily) + XADD
 * del; flush = XADD flush. put's cb (may be NULL) is told the record's SET
 * outcome (as store_write_bg_cb's): called once if put returns 0, never if -1.
 */
int vsync_store_put(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN],
                    const unsigned char partition[VINDEX_PART_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms, int64_t expires_ms, store_int_fn *cb, void *arg);
int vsync_store_del(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const unsigned char *partition);
int vsync_store_flush(struct store *s, const unsigned char *tenant);
/* The same, with store_write_cb's completion callback (NULL if not sent). */
struct store_cmd *vsync_store_flush_cb(struct store *s, const unsigned char *tenant,
                                       store_int_fn *cb, void *arg);
/* XADD set: send it right after the entry's SET, on the same store. */
int vsync_store_entry_set(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN]);

/*
 * The partition and expiry of an encoded record (pc_vrec.h), read without
 * decoding the rest (magic, flags, space, dim, partition, created, expires);
 * -1 if the bytes are not that long or not a record. Enough to tell an
 * event's partition, or the member list of a record about to be deleted; a
 * record applied is decoded in full.
 */
int vsync_record_partition(const char *rec, size_t len, unsigned char partition[VINDEX_PART_LEN],
                           int64_t *expires_ms);

/* --- events, as read back ---------------------------------------------------------------- */

struct redisReply;

enum vsync_op { VSYNC_OP_ADD = 0, VSYNC_OP_DEL, VSYNC_OP_FLUSH, VSYNC_OP_SET };

struct vsync_event {
    enum vsync_op op;
    bool has_key;    /* add, del, set: tenant and key are the entry's */
    bool has_tenant; /* flush of one tenant: tenant is set */
    unsigned char tenant[VINDEX_TENANT_LEN];
    unsigned char key[VINDEX_KEY_LEN];
    const char *rec; /* add: the record (not decoded; points into the reply) */
    size_t rec_len;
    bool listed;                           /* add: the writer put it on its member list (m=1) */
    bool purged;                           /* del: a purge's (p=1; pc_fence.h) */
    char instance[VSYNC_INSTANCE_LEN + 1]; /* the writer, "" when not named */
};

/*
 * The field/value array of one stream entry into ev; 0, or -1 if it is not
 * an event this version understands and trusts (see the top).
 */
int vsync_event_parse(const struct redisReply *fields, struct vsync_event *ev);
/* Whether this process wrote ev (its i names this process). */
bool vsync_event_is_mine(const struct vsync_event *ev);

/* --- this process's side ------------------------------------------------------------------ */

struct vsync;

struct vsync_opts {
    const char *url;      /* as for the store: redis://... or unix:/path */
    const char *space;    /* records of another embedding space are skipped */
    struct vindex *index; /* kept in step; records of another dimension are skipped */
    int64_t timeout_ms;   /* the loader's commands (and connect); 0 = 2000 */
    int64_t max_ttl_ms;   /* > 0: records expiring later than this from now are rejected */
    struct stats *row;    /* may be NULL: semantic_sync_rejected, semantic_index_* counted there */
    bool following;       /* the follower follows the stream already (created late) */
};

struct vsync_counters {
    bool ready;       /* the follower follows the stream (events are applied) */
    bool loader_up;   /* the loader is connected */
    uint64_t loaded;  /* vectors added by loads */
    uint64_t events;  /* vector events applied (add, del, flush; not set, nor ignored adds) */
    uint64_t loads;   /* partitions loaded */
    uint64_t errors;  /* failed connections and commands of the loader */
    uint64_t corrupt; /* records, members or events rejected (malformed or out of range) */
    uint64_t skipped; /* records of another space or dimension, or expired */
    uint64_t ignored; /* add events of partitions not in memory */
    size_t queued;    /* loads waiting */
};

/* Start the loader thread; NULL (logged) if the URL is invalid or the thread cannot start. */
struct vsync *vsync_start(const struct vsync_opts *o);
/* Stop and join the loader; *s is NULLed. The follower must not call in any more. */
void vsync_stop(struct vsync **s);
bool vsync_ready(const struct vsync *s);
void vsync_get_counters(const struct vsync *s, struct vsync_counters *out);

/* The follower's calls (pc_follow.h), on its thread: an entry of the stream; following (again)
 * from the stream's end (what is in memory is read again); not following. */
void vsync_on_entry(struct vsync *s, const struct redisReply *fields);
void vsync_on_start(struct vsync *s);
void vsync_on_down(struct vsync *s);

/*
 * A lookup found partition not in memory: ask for its load (once) and wait
 * for it at most wait_ms (not at all while the loader is not connected).
 * The partition's state then (enum vindex_state): RESIDENT if it can be
 * searched now.
 */
int vsync_load_wait(struct vsync *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char partition[VINDEX_PART_LEN], int64_t wait_ms);

#endif
