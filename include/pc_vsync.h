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
 *
 * Writers (the cache module, on its worker's connection): a stored entry
 * with a vector sends SET of the record and XADD add; a deleted entry DEL and
 * XADD del; a flush, after deleting the keys, XADD flush. Helpers below fill
 * the argv of each command, or send them through a struct store.
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

struct store;
struct vindex;

#define VSYNC_STREAM_MAXLEN 100000
#define VSYNC_KEY_MAX       128           /* room for a vector key name */
#define VSYNC_ID_LEN        (16 + 1 + 64) /* "<tenant16hex>:<sha256hex>" */
#define VSYNC_ARGV_MAX      12

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

/* --- the reader ------------------------------------------------------------------------ */

struct vsync;

struct vsync_opts {
    const char *url;      /* as for the store: redis://... or unix:/path */
    const char *space;    /* records of another embedding space are skipped */
    struct vindex *index; /* kept in step; records of another dimension are skipped */
    int64_t timeout_ms;   /* per command (and connect); 0 = 2000 */
    int block_ms;         /* XREAD BLOCK, also the longest wait for vsync_stop; 0 = 1000 */
    size_t batch;         /* SCAN COUNT, GETs per pipeline, XREAD COUNT; 0 = 500 */
};

struct vsync_counters {
    bool ready;              /* rebuilt and following the stream */
    uint64_t loaded;         /* vectors added by rebuilds */
    uint64_t events;         /* stream events applied */
    uint64_t rebuilds;       /* completed rebuilds */
    uint64_t errors;         /* failed connections and commands */
    uint64_t corrupt;        /* records, keys or events that did not decode */
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
