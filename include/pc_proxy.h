/*
 * pc_proxy.h - the request state machine: every client request enters
 * proxy_handle, which routes it to the proxy's own endpoints (pc_admin.h),
 * the cache path for the LLM API endpoints, or plain pass-through.
 *
 * The machine reaches the world through one table, struct proxy_ops: the
 * client's request and reply (pc_httpd.h), the cache (pc_cache.h) and the
 * start of an upstream call (pc_fetch.h, whose answer arrives through the
 * call's flight, pc_flight.h). proxy_handle uses the real ones; a test hands
 * proxy_serve fakes whose completions call back as the real ones do, and so
 * drives every step without a socket, Redis or an upstream.
 */
#ifndef PC_PROXY_H
#define PC_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_cache.h"
#include "pc_httpd.h"

struct conf;
struct fetch_req;
struct flight;
struct worker;

struct proxy_ops {
    /* The request: as pc_httpd.h's functions of the same names (httpd_req_...). */
    const char *(*req_method)(const struct httpd_req *hr);
    const char *(*req_target)(const struct httpd_req *hr);
    const char *(*req_path)(const struct httpd_req *hr);
    const char *(*req_query)(const struct httpd_req *hr);
    const char *(*req_header)(const struct httpd_req *hr, const char *name);
    size_t (*req_header_count)(const struct httpd_req *hr);
    const struct httpd_header *(*req_header_at)(const struct httpd_req *hr, size_t i);
    const char *(*req_body)(const struct httpd_req *hr, size_t *len);
    enum httpd_req_error (*req_error)(const struct httpd_req *hr);
    int (*req_charge)(struct httpd_req *hr, size_t n);
    uint64_t (*req_start_us)(const struct httpd_req *hr);
    /* The reply: as httpd_add_header, httpd_reply, httpd_reply_start, ... */
    void (*add_header)(struct httpd_req *hr, const char *name, const char *value);
    void (*reply)(struct httpd_req *hr, int status, const void *body, size_t len);
    void (*reply_start)(struct httpd_req *hr, int status);
    void (*reply_chunk)(struct httpd_req *hr, const void *data, size_t len);
    void (*reply_end)(struct httpd_req *hr);
    void (*reply_abort)(struct httpd_req *hr);
    size_t (*reply_queued)(const struct httpd_req *hr);
    void (*set_drain_cb)(struct httpd_req *hr, size_t lowmark, httpd_req_fn *fn, void *arg);
    void (*set_close_cb)(struct httpd_req *hr, httpd_req_fn *fn, void *arg);
    /* The cache: as cache_ready, cache_lookup, cache_cancel. */
    bool (*cache_ready)(const struct cache *c);
    int (*cache_lookup)(struct cache *c, const struct cache_query *q, cache_lookup_fn *cb,
                        void *arg, struct cache_op **op);
    void (*cache_cancel)(struct cache_op **op);
    /* The upstream call of flight fl, which the request leads: as fetch_start. */
    void (*fetch_start)(struct worker *w, struct flight *fl, const struct fetch_req *req);
};

/* The real table: httpd, the worker's cache and fetch. */
extern const struct proxy_ops proxy_ops_real;

/* httpd handler; arg is the struct worker. */
void proxy_handle(struct httpd_req *hr, void *arg);

/*
 * One request for the cache path or pass-through (not the proxy's own
 * endpoints, which proxy_handle answers first), through ops: proxy_handle
 * is proxy_serve(w, hr, &proxy_ops_real) for them. hr is only ever passed
 * back to ops. CORS headers (cors-origins) are added by pc_cors.h, which
 * speaks to httpd itself: a test with cors-origins needs the real httpd.
 */
void proxy_serve(struct worker *w, struct httpd_req *hr, const struct proxy_ops *ops);

/*
 * Bytes of request memory each request-body byte is charged (httpd_conf's
 * body_charge): the body and what the proxy makes of it (see proxy.c).
 */
size_t proxy_body_charge(const struct conf *c);

#endif
