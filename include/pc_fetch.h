/*
 * pc_fetch.h - the upstream call behind a flight: builds the upstream request
 * (pc_backend.h), picks a replica (pc_route.h; another one if it refuses the
 * connection), runs the xfer, feeds the flight (head, body, end), honours the flight's pause and
 * abort requests, and on a complete 2xx answer stores it in the cache and
 * accounts its usage. A fetch outlives the client request that started it
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
     * fetch (NULL: never store). */
    struct cache_ticket *ticket;
    int64_t ttl_ms;
    enum api_endpoint endpoint;
    bool stream;

    /* Whose usage it is (promptcache report); copied. May be NULL. */
    const char *model;
    const char *tenant_id;
};

/*
 * Start the call for flight fl (the caller is its leader). Always finishes the
 * flight eventually, also when the call cannot start (then with an error).
 */
void fetch_start(struct worker *w, struct flight *fl, const struct fetch_req *req);
/* Abort every call the worker still runs (teardown after shutdown-timeout). */
void fetch_abort_all(struct worker *w);

#endif
