/*
 * pc_route.h - the upstream replicas and the choice between them. One
 * struct route per process, shared by every worker: the replicas of the
 * `upstream` list, their load (calls in flight), their health (passive: a
 * replica that refused a connection, or sent nothing for upstream-timeout,
 * is left alone for upstream-fail-timeout; after silence it is then given one
 * call at a time until one is answered),
 * the prefix index (pc_pindex.h: which replica holds which prompt prefix)
 * and their counters for /stats and /metrics.
 *
 * Policies (`routing`): round-robin, least-loaded, prefix, one operations
 * table each under src/route/ (listed in src/route/policies.h, which the
 * config reads the names from). A pick never refuses: when every replica is
 * marked down, the one that failed longest ago is tried again.
 *
 * prefix: a request with a session key (x-session-id, x-user-id) goes to its
 * session's replica (rendezvous hashing, so every proxy instance agrees
 * without talking); otherwise to the replica whose cache holds the longest
 * leading part of the request's prefix chain - unless that part is less
 * than prefix-min-match of the prompt (a new conversation that shares only
 * a preamble): then to the least loaded replica. Either choice is overruled
 * when that replica is overloaded: more than prefix-balance-abs calls in
 * flight beyond the least loaded replica AND more than prefix-balance-rel
 * times its load; the call then goes to the best match among the others.
 * Ties (equal matches; a prefix nobody holds) are broken by rendezvous
 * hashing of the first link no replica matched, so new prefixes spread
 * evenly and every instance breaks a tie the same way.
 *
 * Under every policy, a pick with a chain records the chain on the chosen
 * replica at once (concurrent requests with the same prefix follow it) and
 * counts the prefix tokens it was predicted to hold; route_usage later adds
 * what the replica reported, so the index's accuracy shows in /stats.
 *
 * Thread safety: every function may be called from any worker; counters are
 * atomics and the index is sharded, so the hot path takes no global lock.
 */
#ifndef PC_ROUTE_H
#define PC_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"

struct api_usage;
struct chain;
struct conf;
struct pindex;
struct route;
struct stat_group;

#define ROUTE_MAX_REPLICAS 64

/* Why a replica was picked (route_query.reason). */
enum route_reason {
    ROUTE_BY_POLICY = 0, /* round-robin / least-loaded, or no chain to match */
    ROUTE_BY_PREFIX,     /* it holds the longest prefix (or ties on it) */
    ROUTE_BY_LOAD,       /* no replica holds enough of the prompt: the least loaded */
    ROUTE_BY_SESSION,    /* the session's replica */
    ROUTE_BY_BALANCE,    /* the first choice was overloaded */
    ROUTE_BY_HEALTH,     /* every candidate was down: the oldest failure */
};

/* How a call to a replica ended (route_end). */
enum route_result {
    ROUTE_OK = 0,      /* an answer came (any status but a server error) */
    ROUTE_CONNECT_ERR, /* could not connect: nothing was sent; mark down, try another */
    ROUTE_ERR,         /* reset or cut off after the response head */
    ROUTE_SILENT,      /* sent, then nothing for upstream-timeout: mark down, try no other
                          (the replica may be working on it) */
    ROUTE_ABORTED,     /* we stopped it (clients gone, shutdown) */
    ROUTE_5XX,         /* answered with a server error (route_server_error): ROUTE_5XX_IN_A_ROW
                          in a row mark it down, then one call at a time until it answers */
    ROUTE_NO_ANSWER,   /* sent, then closed, reset or garbled before any response head: a
                          failed call that counts in the run of ROUTE_5XX */
};

/* Server errors or calls with no answer in a row (nothing answered between) that leave a
 * replica out. */
#define ROUTE_5XX_IN_A_ROW 3

/*
 * Whether an answer's status says the replica is unwell rather than the
 * request wrong: 500, 502, 503, 504 and the others from 500 up, except 501
 * (not implemented) and 505 (HTTP version), which are about the request.
 */
static inline bool route_server_error(int status)
{
    return status >= 500 && status <= 599 && status != 501 && status != 505;
}

/* A replica as the rest of the proxy sees it (immutable after route_create). */
struct route_replica {
    const char *base_url; /* without a trailing '/' */
    const char *name;     /* host:port (X-Upstream, logs, metrics) */
    size_t index;
};

/* What a pick may take into account, and (out) what it found. */
struct route_query {
    uint64_t exclude;          /* bit i set: do not pick replica i (already failed for this call) */
    const struct chain *chain; /* the request's prefix chain, or NULL */
    const char *model;         /* for the tokens of the chain's links (bytes per token) */
    uint64_t session;          /* hash of the session key, 0 for none */
    int64_t fresh_ms;          /* also report links used within this many ms (0: no) */

    /* Out, for the replica picked. */
    uint32_t matched_links; /* leading links of the chain it held */
    uint32_t fresh_links;   /* of those, links used within fresh_ms */
    int64_t matched_tokens; /* tokens of the matched links */
    int64_t prompt_tokens;  /* tokens of the whole chain */
    enum route_reason reason;
    int64_t recorded_ms; /* when the pick recorded the chain on it; 0 once answered */
};

/* NULL with err set if an upstream URL is invalid or there are none. */
struct route *route_create(const struct conf *c, char *err, size_t errlen);
void route_destroy(struct route **r);

size_t route_count(const struct route *r);
const struct route_replica *route_replica(const struct route *r, size_t i);
/* The name of the routing policy in force ("prefix", ...). */
const char *route_policy_name(const struct route *r);

/*
 * Choose a replica for a call and count it in flight (route_end must follow,
 * exactly once). Returns the replica, or NULL when q->exclude rules out
 * every replica.
 */
const struct route_replica *route_pick(struct route *r, struct route_query *q);
void route_end(struct route *r, const struct route_replica *rep, enum route_result res);
/*
 * The call picked with q never reached rep (a refused connection, or one that
 * never completed), called before its route_end: the links of q's chain that
 * the pick recorded on rep past the ones it held already are forgotten, so
 * that the replica the call goes to next holds more of the conversation.
 */
void route_unsent(struct route *r, const struct route_replica *rep, const struct route_query *q);
/*
 * The call picked with q was answered by rep with HTTP status (its head):
 * a 2xx tells the other proxy instances (psync) that rep holds the chain
 * the pick recorded, any other status means rep computed nothing, and the
 * links the pick added are forgotten as by route_unsent. Once per pick.
 */
void route_answered(struct route *r, const struct route_replica *rep, struct route_query *q,
                    int status);

/*
 * A call's answer reported usage: the prompt and cached tokens the replica
 * counted, next to the tokens the pick predicted it held (matched_tokens);
 * bytes is the chain's prompt size, to calibrate bytes per token for model.
 */
void route_usage(struct route *r, const struct route_replica *rep, const char *model, size_t bytes,
                 int64_t predicted, const struct api_usage *u);
/* The prefix index (for psync; and tests). */
struct pindex *route_pindex(struct route *r);
/* Bytes per token of a model's prompts, as calibrated. */
double route_cpt(struct route *r, const char *model);

/* Its series (pc_stats.h), read from a struct route: the policy and the prefix index's size,
 * and each replica's figures. */
extern const struct stat_group route_series;
extern const struct stat_group route_replica_series;

#endif
