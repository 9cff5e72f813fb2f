/*
 * pc_jcall.h - a small JSON-over-HTTP call for the proxy's own requests
 * (remote embedder, semantic verifier): POST a JSON body, collect the whole
 * answer (bounded), parse it, all within a deadline. Runs on a worker's
 * event loop over an upstream client (pc_upstream.h); never blocks.
 */
#ifndef PC_JCALL_H
#define PC_JCALL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pc_upstream.h"

struct event_base;
struct jcall;

/*
 * The call ended. status: the HTTP status (0 when no answer came); json: the
 * parsed body (NULL if none or not JSON), valid during the call only; err: a
 * short text when it failed (timeout, connect, too large, not JSON), else NULL.
 */
typedef void jcall_fn(void *arg, int status, const cJSON *json, const char *err);

struct jcall_req {
    const char *url;
    const struct xfer_header *headers; /* Content-Type: application/json is added */
    size_t nheaders;
    const char *body;
    size_t body_len;
    int64_t timeout_ms;  /* whole call, connect to last byte */
    size_t max_response; /* bytes; larger answers fail */
};

/* NULL (no callback) if the call cannot start; else cb runs once unless cancelled. */
struct jcall *jcall_post(struct upstream *up, struct event_base *base, const struct jcall_req *r,
                         jcall_fn *cb, void *arg);
/* No callback after this; *j is NULLed (NULL ignored). */
void jcall_cancel(struct jcall **j);

/*
 * A token count an answer reports (usage.prompt_tokens and the like): 0 unless
 * v is a positive finite number, capped far beyond any real count, so that a
 * forged 1e999 neither overflows a counter nor turns it negative.
 */
int64_t jcall_count(const cJSON *v);

#endif
