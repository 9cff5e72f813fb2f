/*
 * route/policies.h - the routing policies, one line each: X(ID, NAME), where
 * NAME is the `routing` value and route_policy_ID the operations table of
 * src/route/ID.c. The config table reads the names from here (conf.c:
 * validation, -t, --help and the sample config) and route.c builds the table
 * it picks by from the same lines, so the value struct conf holds is a
 * position in this list. No includes: anything may read it.
 *
 * Adding a policy: its file, src/route/ID.c, and its line here.
 */
#ifndef PC_ROUTE_POLICIES_H
#define PC_ROUTE_POLICIES_H

#define ROUTE_POLICY_LIST(X)                                                      \
    X(round_robin, "round-robin") /* the first is the fallback of route_create */ \
    X(least_loaded, "least-loaded")                                               \
    X(prefix, "prefix")                                                           \
    /* one line per policy, in the order of the values conf holds */

#endif
