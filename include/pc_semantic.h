/*
 * pc_semantic.h - the semantic stage of the cache: a request whose last user
 * turn means the same as that of a cached request in the same partition
 * (everything else in the request equal) is answered with the cached entry.
 *
 * struct semantic is the process's part (embedder, vector index, thread pool,
 * the Redis Stream reader keeping the index in step with other instances);
 * struct semantic_port is one worker's door to it (its event loop, Redis
 * connection, upstream client for remote embedders and the verifier).
 * cache.c is the only caller.
 */
#ifndef PC_SEMANTIC_H
#define PC_SEMANTIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_entry.h"
#include "pc_store.h"
#include "pc_util.h"

struct conf;
struct event_base;
struct follow;
struct stat_group;
struct stats;
struct store;
struct upstream;

struct semantic;
struct semantic_port;
struct semantic_op;
struct semantic_vec; /* one embedding of one text (opaque) */
struct bound;
struct bound_port;
struct bound_probe;

struct semantic_query {
    enum api_endpoint endpoint;
    const char *tenant_id;          /* TENANT_ID_LEN hex */
    const unsigned char *exact;     /* PC_SHA256_LEN: the request's own exact key */
    const unsigned char *partition; /* PC_SHA256_LEN */
    const char *text;               /* the last user turn */
    int64_t max_age_ms;             /* -1 = any */
    double threshold;               /* < 0: the configured (or the embedder's) default */
};

struct semantic_result {
    const struct entry *entry;  /* NULL = no match; else valid during the callback */
    const unsigned char *exact; /* the matched entry's exact key (PC_SHA256_LEN), with entry */
    double similarity;
    struct semantic_vec *vec; /* the query's embedding, if computed (semantic_vec_take) */
    /* A miss the error bound held back (pc_bound.h): the candidate to compare the fresh
     * answer with (semantic_probe_take), or NULL. */
    struct bound_probe *probe;
};

/* What is stored next to an entry so that later requests find it by meaning. */
struct semantic_item {
    enum api_endpoint endpoint;
    const char *tenant_id;
    const unsigned char *exact;
    const unsigned char *partition;
    const char *text;
    int64_t created_ms;
    int64_t ttl_ms;
    bool replaces; /* it may have written over an entry: without a vector, drop the old one */
};

typedef void semantic_fn(void *arg, struct semantic_result *r);

/* NULL with err set if it cannot start (e.g. a FAISS or embedder failure). */
struct semantic *semantic_create(const struct conf *c, struct stats *st, char *err, size_t errlen);
/* Register the vector index's handler of the stream with the process's follower (before it
 * starts); -1 if it cannot (the index then takes no other instance's vectors). */
int semantic_follow(struct semantic *s, struct follow *f);
/* What semantic-index-memory means in bytes (auto: 1/4 of the machine's memory). */
int64_t semantic_index_memory_bytes(const struct conf *c);
/* Stop the stream reader and the thread pool (jobs not run are handed back). */
void semantic_stop(struct semantic *s);
void semantic_destroy(struct semantic **s);
/* The vector space ("builtin-...", "openai:MODEL") and the threshold used when a request names
 * none. */
const char *semantic_space(const struct semantic *s);
double semantic_default_threshold(const struct semantic *s);
/* semantic-threshold as a reload set it (< 0: auto, the embedder's own); any thread. */
void semantic_set_threshold(struct semantic *s, double t);
/* Its series (pc_stats.h: index size, pool queue, stream reader), read from a struct semantic. */
extern const struct stat_group semantic_series;
/* The error bound (pc_bound.h: its series are bound_series), or NULL when off. */
struct bound *semantic_bound(const struct semantic *s);

struct semantic_port *semantic_port_create(struct semantic *s, struct event_base *base,
                                           struct store *store, struct upstream *up,
                                           struct stats *st);
/* After the worker's loop has ended and semantic_stop: finishes handed-back jobs. */
void semantic_port_destroy(struct semantic_port **p);

/*
 * Look q up by meaning. NULL (no callback) if the stage cannot run now;
 * else cb runs exactly once, later, unless semantic_cancel is called first.
 */
struct semantic_op *semantic_lookup(struct semantic_port *p, const struct semantic_query *q,
                                    semantic_fn *cb, void *arg);
void semantic_cancel(struct semantic_op **op);

/* Store its vector record (fire and forget); *vec (may be NULL: embedded now) is consumed. */
void semantic_put(struct semantic_port *p, const struct semantic_item *it,
                  struct semantic_vec **vec);

/* Take ownership of r->vec (NULLs it). */
struct semantic_vec *semantic_vec_take(struct semantic_result *r);
/* Take ownership of r->probe (NULLs it). */
struct bound_probe *semantic_probe_take(struct semantic_result *r);
/* The worker's part of the error bound (comparisons), or NULL when it is off. */
struct bound_port *semantic_bound_port(struct semantic_port *p);
void semantic_vec_free(struct semantic_vec **v);

/* SCAN pattern of every vector record (tenant_id NULL) or one tenant's. */
void semantic_vector_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX]);
/* SCAN pattern of every partition's member list (tenant_id NULL) or one tenant's. */
void semantic_members_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX]);
/*
 * After a flush: tell every instance (the Stream) and, with p, this process's
 * index at once. p may be NULL (semantic off here: other instances still listen).
 * cb (store_write_cb's) says whether the stream took the event; NULL if not sent.
 */
struct store_cmd *semantic_publish_flush(struct semantic_port *p, struct store *store,
                                         const char *tenant_id, store_int_fn *cb, void *arg);
/*
 * An entry was written over and gets no vector: delete the old vector record
 * and tell every instance (DEL + XADD del on store), and with p this
 * process's index at once. p may be NULL (semantic off here). Its partition
 * unknown here, its member goes at that partition's next load.
 */
void semantic_forget(struct semantic_port *p, struct store *store, const char *tenant_id,
                     const unsigned char exact[PC_SHA256_LEN]);

#endif
