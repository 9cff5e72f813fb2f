/*
 * pc_fetch.h - the upstream call behind a flight: picks a replica
 * (pc_route.h, by the request's prefix chain; another one if it refuses the
 * connection), builds the upstream request with its hints (pc_backend.h),
 * runs the xfer, feeds the flight (head, body, end), honours the flight's
 * pause and abort requests, and on a complete 2xx answer stores it in the
 * cache and accounts its usage (per model and tenant, and per replica next to
 * what the prefix index predicted). A fetch outlives the client request that started it
 * (others may be waiting on the flight); it frees itself when done.
 */
#ifndef PC_FETCH_H
#define PC_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_cache.h"
#include "pc_entry.h"
#include "pc_upstream.h"

struct chain;
struct flight;
struct worker;

struct fetch_req {
    const char *method;
    const char *target;                /* path and query, appended to the replica's base URL */
    const struct xfer_header *headers; /* the client's, as received (the backend filters) */
    size_t nheaders;
    const char *body;
    size_t body_len;
    const char *reqid; /* for log lines */

    /* Storing the answer: the cache ticket, whose ownership passes to the
     * fetch (NULL: never store). With compare_only, the ticket comes for the
     * error bound's probe alone: a complete answer is compared with the
     * held-back candidate's (cache_compare), never stored. */
    struct cache_ticket *ticket;
    bool compare_only;
    int64_t ttl_ms;
    enum api_endpoint endpoint;
    bool stream;

    /* Whose usage it is (promptcache report); copied. May be NULL. */
    const char *model;
    const char *tenant_id;

    /* Prefix reuse (pc_route.h, pc_backend.h); all copied. */
    const struct chain *chain;      /* the prompt's prefix chain, or NULL */
    const unsigned char *kv_tenant; /* PC_SHA256_LEN bytes for cache_salt; NULL: shared KV */
    uint64_t session;               /* hash of the client's session key, 0 for none */
    bool ask_usage;                 /* add stream_options.include_usage upstream */

    /* Names a response a replica stored (previous_response_id, /v1/responses/ID): a 404 from
     * one replica is not the answer while another has not been asked (each keeps its own). */
    bool stored_response;
};

/*
 * Start the call for flight fl (the caller is its leader). Always finishes the
 * flight eventually, also when the call cannot start (then with an error).
 */
void fetch_start(struct worker *w, struct flight *fl, const struct fetch_req *req);
/* Abort every call the worker still runs (teardown after shutdown-timeout). */
void fetch_abort_all(struct worker *w);

#endif
