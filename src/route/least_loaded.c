/*
 * route/least_loaded.c - the least-loaded policy (`routing least-loaded`):
 * the replica with the fewest calls in flight from this proxy, ties broken
 * in turn so that equal replicas share the load. The prefix policy falls
 * back on it for calls with neither a session nor a prefix chain.
 */
#include "route_int.h"

size_t route_least_loaded(const struct route *r, uint64_t cand, uint64_t start)
{
    size_t best = SIZE_MAX;
    int64_t best_load = 0;
    for (size_t k = 0; k < r->n; k++) {
        size_t i = (size_t)((start + k) % r->n);
        if (!(cand & (UINT64_C(1) << i)))
            continue;
        int64_t load = LOAD(&r->reps[i].in_flight);
        if (best == SIZE_MAX || load < best_load) {
            best = i;
            best_load = load;
        }
    }
    return best;
}

static size_t ll_choose(const struct route *r, uint64_t cand, uint64_t turn, struct route_query *q,
                        const struct prefix_view *v)
{
    (void)q;
    (void)v;
    return route_least_loaded(r, cand, turn);
}

const struct route_policy_ops route_policy_least_loaded = {
    .name = "least-loaded",
    .choose = ll_choose,
};
