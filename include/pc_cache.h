/*
 * pc_cache.h - the cache pipeline of one worker: lookup runs the stages
 * (the process's L1, the exact key, then the semantic stage when enabled) and put stores an
 * answer with whatever the stages need to find it again (the entry, its
 * vector record). The request state machine (proxy.c) and the upstream call
 * (fetch.c) sit above this module and talk to it only through the structs
 * below: no request, flight or fetch ever crosses this interface.
 *
 *   cache_lookup ─▶ L1 (this process's hot exact answers: answers at once)
 *                     │ not there
 *                     ▼
 *                   EXACT (Redis GET of the entry)
 *                     │ miss, semantic allowed
 *                     ▼
 *                   SEMANTIC (pc_semantic.h: embed ▸ search the partition ▸
 *                     │        fetch candidate ▸ guards ▸ verify?)
 *                     ▼
 *                   callback: HIT (entry, match, similarity, age) | MISS | UNAVAILABLE
 *
 * A lookup always hands its caller a ticket: what cache_put needs to store
 * this request's answer (keys, and the vector once computed, so a miss is
 * never embedded twice). The ticket travels with the upstream call and is
 * consumed by cache_put, or freed.
 *
 * Everything here runs on the worker's thread; callbacks run at most once,
 * never after the matching cancel.
 */
#ifndef PC_CACHE_H
#define PC_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_entry.h"

struct bound_probe;
struct conf;
struct event_base;
struct fence;
struct l1;
struct semantic_port;
struct stats;
struct store;

struct cache;        /* one per worker */
struct cache_op;     /* a lookup or a flush in progress */
struct cache_put_op; /* a store in progress */
struct cache_ticket; /* what cache_put needs (owned by whoever holds it) */

enum cache_outcome {
    CACHE_HIT = 0,     /* res->entry is the answer */
    CACHE_MISS,        /* not found (or too old, or unusable): go upstream and store */
    CACHE_UNAVAILABLE, /* Redis failed or timed out: go upstream without the cache */
};

enum cache_match {
    CACHE_MATCH_NONE = 0,
    CACHE_MATCH_EXACT,
    CACHE_MATCH_SEMANTIC,
    CACHE_MATCH__COUNT
};

/* "exact" / "semantic" (header X-Cache-Match, logs, metrics); "" for NONE. */
const char *cache_match_name(enum cache_match m);

struct cache_opts {
    const struct conf *conf;
    struct event_base *base;
    struct store *store;       /* the worker's Redis connection */
    struct stats *stats;       /* the worker's metrics row */
    struct semantic_port *sem; /* the worker's door to the semantic cache; NULL when off */
    struct l1 *l1;             /* the process's L1 (pc_l1.h, shared); NULL when off */
    struct fence *fence;       /* the process's purge fences (pc_fence.h, shared), or NULL */
};

/* What a request looks up; pointers are read during cache_lookup only (copied as needed). */
struct cache_query {
    enum api_endpoint endpoint;
    const char *tenant_id;          /* TENANT_ID_LEN hex characters (whose entries) */
    const unsigned char *exact;     /* PC_SHA256_LEN: the exact key */
    const unsigned char *partition; /* PC_SHA256_LEN, or NULL: no semantic stage */
    const char *text;               /* the last user turn (semantic), or NULL */
    int64_t max_age_ms;             /* accept only younger entries; -1 = any */
    bool semantic;                  /* the request allows the semantic stage */
    double threshold;               /* semantic similarity needed (0..1); < 0: the default */
    const char *ns;                 /* X-Cache-Namespace, or NULL: kept in a stored entry */
    const char *model;              /* the body's "model", or NULL: kept in a stored entry */
};

struct cache_result {
    enum cache_outcome outcome;
    enum cache_match match; /* on HIT */
    double similarity;      /* on a semantic HIT */
    int64_t age_ms;         /* on HIT: since the answer was stored */
    const struct entry *entry;
    /* On a MISS the error bound held back (pc_bound.h): the candidate whose answer the fresh
     * one is compared with (cache_put, or cache_compare when it is not stored; owned by the
     * ticket; take a reference to keep it). */
    struct bound_probe *probe;
    const unsigned char *exact; /* on HIT: the exact key of the entry that answered (for a
                                   semantic hit another request's); valid during the callback */
    /* Always set: the caller now owns it (pass it to cache_put, or cache_ticket_free). */
    struct cache_ticket *ticket;
};

typedef void cache_lookup_fn(void *arg, struct cache_result *res);
typedef void cache_put_fn(void *arg, bool stored);
typedef void cache_flush_fn(void *arg, bool ok, long long deleted);

struct cache *cache_create(const struct cache_opts *o);
/* Cancels nothing: every operation must be finished or cancelled first. */
void cache_destroy(struct cache **c);
/* Whether lookups can run now (Redis connected and migrated). */
bool cache_ready(const struct cache *c);

/*
 * Look q up, stage by stage: the process's L1 (synchronous), then Redis (the
 * exact key, then the semantic stage when q allows it); the one way in. 0 if
 * cb has run or will run, exactly once: before this returns when the L1
 * answered (then *op is NULL), later otherwise (*op is the lookup, for
 * cache_cancel). -1 (*op NULL, no callback) if the L1 did not answer and
 * Redis cannot be used now: the caller goes upstream without the cache.
 */
int cache_lookup(struct cache *c, const struct cache_query *q, cache_lookup_fn *cb, void *arg,
                 struct cache_op **op);
/* The callback of *op will not run; *op is NULLed (NULL *op is ignored). */
void cache_cancel(struct cache_op **op);

/* A ticket without a lookup (Cache-Control: no-cache still stores). Never NULL. */
struct cache_ticket *cache_ticket_create(struct cache *c, const struct cache_query *q);
void cache_ticket_free(struct cache_ticket **t);
/*
 * Whether a purge (of any instance, pc_fence.h) may have deleted the ticket's entry since the
 * ticket was made, that is since before its answer was asked for: that answer is not to be
 * stored (it was made before the purge).
 */
bool cache_fenced(const struct cache *c, const struct cache_ticket *t);

/*
 * Store answer e under the ticket's keys for ttl_ms, consuming *t (NULLed).
 * The SET is followed on the same connection by a stream event (op=set) so
 * that every other instance drops the key from its L1; this process's L1
 * takes the new answer in place of the old when Redis acknowledges it.
 * cb runs once Redis has acknowledged the entry (stored = true) or failed;
 * the vector record and its stream event follow without being waited for
 * (or, for an entry written over without a vector, the old vector's
 * deletion). NULL (and no callback) if nothing could be sent.
 */
struct cache_put_op *cache_put(struct cache *c, struct cache_ticket **t, const struct entry *e,
                               int64_t ttl_ms, cache_put_fn *cb, void *arg);
/*
 * Compare answer e with the candidate the ticket's probe holds (a MISS the
 * error bound held back or explored), without storing e: for a complete
 * answer that is not cached (Cache-Control: no-store, an answer containing
 * \u0000). Consumes *t. NULL (no callback) if there is nothing to wait for:
 * no probe, compared at once (the exact comparator: the verdict is the
 * probe's already), not comparable, or e is a stream (it has gone out: the
 * comparison goes on without anyone waiting, cancelled by cache_destroy).
 * Otherwise cb (stored false) runs once the comparison ended; cancel with
 * cache_put_cancel.
 */
struct cache_put_op *cache_compare(struct cache *c, struct cache_ticket **t, const struct entry *e,
                                   cache_put_fn *cb, void *arg);
void cache_put_cancel(struct cache_put_op **op);

/*
 * Delete every entry (tenant_id NULL) or one tenant's, with their vectors,
 * and tell every instance's semantic index. NULL if Redis is unavailable.
 */
struct cache_op *cache_flush(struct cache *c, const char *tenant_id, cache_flush_fn *cb, void *arg);

#endif
