/*
 * route/round_robin.c - the round-robin policy (`routing round-robin`):
 * each replica in turn, skipping the ones that may not be picked.
 */
#include "route_int.h"

/* The first candidate at or after position start, in turn. */
static size_t next_in_turn(const struct route *r, uint64_t cand, uint64_t start)
{
    for (size_t k = 0; k < r->n; k++) {
        size_t i = (size_t)((start + k) % r->n);
        if (cand & (UINT64_C(1) << i))
            return i;
    }
    return SIZE_MAX;
}

static size_t rr_choose(const struct route *r, uint64_t cand, uint64_t turn, struct route_query *q,
                        const struct prefix_view *v)
{
    (void)q;
    (void)v;
    return next_in_turn(r, cand, turn);
}

const struct route_policy_ops route_policy_round_robin = {
    .name = "round-robin",
    .choose = rr_choose,
};
