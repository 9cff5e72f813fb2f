/*
 * pc_vsync.h - Redis is the source of truth of the vector index: the vector
 * records Redis keeps next to the entries, the stream that tells every proxy
 * instance about changes, and the reader that keeps this process's vindex in
 * step with both.
 *
 * Keys (prefix PC_KEY_PREFIX; the hash tag puts a vector on its entry's
 * Redis Cluster slot, and no command here touches two tags):
 *
 *   <prefix>v:{<tenant16hex>:<sha256hex>}   vector record (pc_vrec.h), with the entry's TTL
 *   <prefix>vs                              stream, trimmed with MAXLEN ~ VSYNC_STREAM_MAXLEN:
 *       op=add   k=<tenant16hex>:<sha256hex> r=<record>
 *       op=del   k=<tenant16hex>:<sha256hex>
 *       op=flush [t=<tenant16hex>]          (no t: everything)
 *       op=set   k=<tenant16hex>:<sha256hex> i=<instance16hex>
 *
 * Writers (the cache module, on its worker's connection): a stored entry
 * sends XADD set right after the SET of the entry (the same connection, so
 * Redis has the new entry before any reader sees the event: every L1 drops
 * what it held under that key, and the writer, named by i, skips its own);
 * one with a vector also sends SET of the record and XADD add; a deleted
 * entry (or a replaced one whose vector must go) DEL and XADD del; a flush,
 * after deleting the keys, XADD flush. Helpers below fill the argv of each
 * command, or send them through a struct store.
 *
 * Readers (this one and the L1's, pc_l1.h) parse events with
 * vsync_event_parse: every field is range-checked (a known op, an exact
 * lower-case hex id or tenant, a record of bounded size, at most
 * VSYNC_EVENT_FIELDS_MAX fields, none twice) and what fails is counted as
 * rejected, never applied: another writer can be wrong or hostile.
 *
 * The reader (one per process, its own thread and blocking connection):
 *
 *   connect ─▶ schema current? ─▶ note the stream's last id ─▶ SCAN v:* + GETs,
 *      ▲       (else wait)          add every record of our space and dim,
 *      │                            drop what was not seen (vindex generations)
 *      │                                     │
 *      │                                     ▼
 *      └── Redis error: backoff ◀── XREAD BLOCK from the noted id, apply events;
 *          (100 ms .. 5 s)          events lost to trimming ─▶ rebuild
 *
 * It stops within about a second of vsync_stop (XREAD blocks at most
 * block_ms), never busy-loops, and logs progress of each rebuild.
 */
#ifndef PC_VSYNC_H
#define PC_VSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_vindex.h"

struct stats;
struct store;
struct vindex;

#define VSYNC_STREAM_MAXLEN    100000
#define VSYNC_KEY_MAX          128           /* room for a vector key name */
#define VSYNC_ID_LEN           (16 + 1 + 64) /* "<tenant16hex>:<sha256hex>" */
#define VSYNC_ARGV_MAX         12
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

/* SET <vector key> <record> PX ttl_ms */
void vsync_argv_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms);
/* DEL <vector key> */
void vsync_argv_unlink(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                       const unsigned char key[VINDEX_KEY_LEN]);
/* XADD <stream> MAXLEN ~ N * op add k <id> r <record> */
void vsync_argv_add(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len);
/* XADD <stream> MAXLEN ~ N * op del k <id> */
void vsync_argv_del(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN]);
/* XADD <stream> MAXLEN ~ N * op flush [t <tenant16hex>] (tenant NULL: everything) */
void vsync_argv_flush(struct vsync_argv *a, const unsigned char *tenant);
/* XADD <stream> MAXLEN ~ N * op set k <id> i <this process> */
void vsync_argv_entry_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN]);

/*
 * The same through a worker's store (fire and forget, failures counted by
 * the store); 0, or -1 if the store is not ready (nothing sent). put = SET
 * + XADD add; del = DEL + XADD del; flush = XADD flush.
 */
int vsync_store_put(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms);
int vsync_store_del(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN]);
int vsync_store_flush(struct store *s, const unsigned char *tenant);
/* XADD set: send it right after the entry's SET, on the same store. */
int vsync_store_entry_set(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN]);

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
    char instance[VSYNC_INSTANCE_LEN + 1]; /* the writer, "" when not named */
};

/*
 * The field/value array of one stream entry into ev; 0, or -1 if it is not
 * an event this version understands and trusts (see the top).
 */
int vsync_event_parse(const struct redisReply *fields, struct vsync_event *ev);
/* Whether this process wrote ev (its i names this process). */
bool vsync_event_is_mine(const struct vsync_event *ev);

/* --- the reader ------------------------------------------------------------------------ */

struct vsync;

struct vsync_opts {
    const char *url;      /* as for the store: redis://... or unix:/path */
    const char *space;    /* records of another embedding space are skipped */
    struct vindex *index; /* kept in step; records of another dimension are skipped */
    int64_t timeout_ms;   /* per command (and connect); 0 = 2000 */
    int block_ms;         /* XREAD BLOCK, also the longest wait for vsync_stop; 0 = 1000 */
    size_t batch;         /* SCAN COUNT, GETs per pipeline, XREAD COUNT; 0 = 500 */
    int64_t max_ttl_ms;   /* > 0: records expiring later than this from now are rejected */
    struct stats *row;    /* may be NULL: semantic_sync_rejected is counted there */
};

struct vsync_counters {
    bool ready;              /* rebuilt and following the stream */
    uint64_t loaded;         /* vectors added by rebuilds */
    uint64_t events;         /* vector events applied (add, del, flush; not set) */
    uint64_t rebuilds;       /* completed rebuilds */
    uint64_t errors;         /* failed connections and commands */
    uint64_t corrupt;        /* records, keys or events rejected (malformed or out of range) */
    uint64_t skipped;        /* records of another space or dimension, or expired */
    int64_t last_rebuild_ms; /* how long the last rebuild took */
};

/* Start the reader thread; NULL (logged) if the URL is invalid or the thread cannot start. */
struct vsync *vsync_start(const struct vsync_opts *o);
/* Stop and join the reader (within about block_ms); *s is NULLed. */
void vsync_stop(struct vsync **s);
bool vsync_ready(const struct vsync *s);
void vsync_get_counters(const struct vsync *s, struct vsync_counters *out);

#endif
