/*
 * route/prefix.c - the prefix policy (`routing prefix`, the default; see
 * pc_route.h): a call with a session key goes to its session's replica,
 * one with a prefix chain to the replica holding the longest leading part
 * of it, unless that part is too small a share of the prompt (then the
 * least loaded, ties spread by the first link nobody holds); either choice
 * is overruled when that replica is overloaded. A call with neither goes to
 * the least loaded replica.
 *
 *   session? ─▶ rendezvous(session) ──────────────┐
 *   chain    ─▶ best match ─▶ decisive? ─ no ─▶ least loaded, spread
 *                                 │ yes           │
 *                                 ▼               ▼
 *                      overloaded? ─ yes ─▶ best match among the rest
 */
#include "route_int.h"
#include "pc_chain.h"

/* A well-mixed 64-bit value of key and replica (rendezvous hashing). */
static uint64_t rendezvous(uint64_t key, size_t i)
{
    uint64_t x = key ^ ((uint64_t)(i + 1) * UINT64_C(0x9e3779b97f4a7c15));
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

static bool overloaded(const struct route *r, const struct prefix_view *v, size_t i)
{
    int64_t load = v->load[i];
    return load - v->min_load > r->balance_abs &&
           (double)load > r->balance_rel * (double)v->min_load;
}

/*
 * The candidate (not in skip) with the longest match; equal matches: the
 * lighter load when skip is set (a fallback), then the rendezvous score of
 * the first link the best match does not cover.
 */
static size_t best_match(const struct route *r, const struct prefix_view *v, uint64_t skip,
                         const struct chain *c)
{
    uint32_t best_links = 0;
    for (size_t i = 0; i < r->n; i++)
        if ((v->cand & ~skip) >> i & 1)
            best_links = PC_MAX(best_links, v->m.links[i]);
    uint64_t key = c != NULL && c->n > 0 ? c->h[PC_MIN((size_t)best_links, c->n - 1)] : 0;
    size_t best = SIZE_MAX;
    uint64_t best_score = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (!((v->cand & ~skip) >> i & 1) || v->m.links[i] != best_links)
            continue;
        uint64_t score = rendezvous(key, i);
        bool better = best == SIZE_MAX ||
                      (skip != 0 && v->load[i] != v->load[best] ? v->load[i] < v->load[best]
                                                                : score > best_score);
        if (better) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/* The session's replica among the candidates (highest rendezvous score). */
static size_t session_replica(const struct route *r, uint64_t cand, uint64_t session)
{
    size_t best = SIZE_MAX;
    uint64_t best_score = 0;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t score = rendezvous(session, i);
        if ((cand >> i & 1) && (best == SIZE_MAX || score > best_score)) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/*
 * A prompt no replica holds enough of: the least loaded candidate, ties
 * broken by the rendezvous score of the first link the best match does not
 * cover (so conversations that share only a preamble still spread).
 */
static size_t least_loaded_spread(const struct route *r, const struct prefix_view *v,
                                  const struct chain *c, uint32_t best_links)
{
    uint64_t key = c->h[PC_MIN((size_t)best_links, c->n - 1)];
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < r->n; i++) {
        if (!(v->cand >> i & 1))
            continue;
        if (best == SIZE_MAX || v->load[i] < v->load[best] ||
            (v->load[i] == v->load[best] && rendezvous(key, i) > rendezvous(key, best)))
            best = i;
    }
    return best;
}

/* Whether the match of replica i covers enough of the prompt to route by. */
static bool decisive(const struct route *r, const struct prefix_view *v, const struct chain *c,
                     size_t i)
{
    size_t all = chain_bytes(c, (long)c->n - 1);
    size_t held = chain_bytes(c, (long)v->m.links[i] - 1);
    return all > 0 && (double)held >= r->min_match * (double)all;
}

static size_t prefix_choose(const struct route *r, const struct prefix_view *v,
                            struct route_query *q)
{
    size_t first;
    if (q->session != 0) {
        first = session_replica(r, v->cand, q->session);
        q->reason = ROUTE_BY_SESSION;
    } else {
        first = best_match(r, v, 0, q->chain);
        q->reason = ROUTE_BY_PREFIX;
        if (!decisive(r, v, q->chain, first)) {
            q->reason = ROUTE_BY_LOAD;
            return least_loaded_spread(r, v, q->chain, v->m.links[first]);
        }
    }
    if (!overloaded(r, v, first))
        return first;
    uint64_t over = 0;
    for (size_t i = 0; i < r->n; i++)
        if ((v->cand >> i & 1) && overloaded(r, v, i))
            over |= UINT64_C(1) << i;
    q->reason = ROUTE_BY_BALANCE;
    return best_match(r, v, over, q->chain);
}

static size_t prefix_pick(const struct route *r, uint64_t cand, uint64_t turn,
                          struct route_query *q, const struct prefix_view *v)
{
    if (q != NULL && (q->session != 0 || (q->chain != NULL && q->chain->n > 0)))
        return prefix_choose(r, v, q);
    return route_least_loaded(r, cand, turn);
}

const struct route_policy_ops route_policy_prefix = {
    .name = "prefix",
    .choose = prefix_pick,
};
