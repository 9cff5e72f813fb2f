/*
 * route_int.h - what the routing policies (src/route/ID.c, listed in
 * src/route/policies.h) see of the routing core (route.c) and nothing else
 * does: the replica table and its atomics, the view of the candidates a pick
 * gives a policy, and the policies' operations table.
 *
 *   route_pick ─▶ candidates (route.c) ─▶ every one down? the oldest failure
 *              ─▶ prefix view: loads, the chain's matches (route.c)
 *              ─▶ policy->choose(candidates, turn, query, view)  ◀── here
 *              ─▶ in flight, counters, the chain recorded (route.c)
 */
#ifndef PC_ROUTE_INT_H
#define PC_ROUTE_INT_H

#include <stdint.h>

#include "pc_pindex.h"
#include "pc_route.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

struct replica {
    struct route_replica pub;
    char *base_url;
    char *name;
    /* Atomics (any worker). */
    int64_t in_flight;
    uint64_t requests;
    uint64_t errors;
    uint64_t connect_errors;
    uint64_t server_errors;  /* answers with a server error (route_server_error) */
    uint64_t errors_5xx_run; /* ... or calls with no answer, in a row: reset by any answer */
    int64_t down_until_ms;   /* monotonic; 0 = up */
    int64_t failed_ms;       /* monotonic time of the last connect failure, silence or 5xx run */
    int probation; /* left out for silence or 5xx: back one call at a time until it answers */
    /* Prefix reuse (atomics). */
    uint64_t chained;         /* picks with a prefix chain */
    uint64_t by_prefix;       /* picked for holding the longest prefix */
    uint64_t by_session;      /* picked as the session's replica */
    uint64_t by_balance;      /* picked because the first choice was overloaded */
    uint64_t by_load;         /* picked as least loaded for a prompt nobody held enough of */
    uint64_t matched_tokens;  /* prefix tokens predicted held, over all chained picks */
    uint64_t chain_tokens;    /* prompt tokens of those picks (estimated) */
    uint64_t usage_answers;   /* answers with usage, of chained picks */
    uint64_t predicted;       /* matched tokens of those answers */
    uint64_t prompt_reported; /* prompt tokens they reported */
    uint64_t cached_reported; /* cached tokens they reported */
};

struct route {
    unsigned magic;
    const struct route_policy_ops *policy; /* routing */
    int64_t fail_timeout_ms;
    int64_t balance_abs;
    double balance_rel;
    double min_match;
    uint64_t turn; /* round-robin position (atomic) */
    size_t n;
    struct replica *reps;
    struct pindex *index;
};

/* What a pick knows of its candidates, for the policy to choose by. */
struct prefix_view {
    uint64_t cand;                    /* bit i: replica i may be picked (not all down) */
    int64_t load[ROUTE_MAX_REPLICAS]; /* calls in flight, of each candidate */
    int64_t min_load;
    struct pindex_match m; /* the chain's matches on every replica (none without a chain) */
};

struct route_policy_ops {
    const char *name; /* the routing value */
    /*
     * The replica to call: a bit set in cand (never 0). turn counts the
     * picks (for taking turns); q (may be NULL) is the query, whose reason
     * the policy sets when it is not ROUTE_BY_POLICY; v is filled for every
     * policy.
     */
    size_t (*choose)(const struct route *r, uint64_t cand, uint64_t turn, struct route_query *q,
                     const struct prefix_view *v);
};

/* Fewest calls in flight among cand; ties broken in turn from start (src/route/least_loaded.c). */
size_t route_least_loaded(const struct route *r, uint64_t cand, uint64_t start);

#endif
