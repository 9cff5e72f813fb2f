/*
 * pc_proxy.h - the request state machine: every client request enters
 * proxy_handle, which routes it to the proxy's own endpoints (pc_admin.h),
 * the cache path for the LLM API endpoints, or plain pass-through.
 */
#ifndef PC_PROXY_H
#define PC_PROXY_H

#include <stddef.h>

struct conf;
struct httpd_req;

/* httpd handler; arg is the struct worker. */
void proxy_handle(struct httpd_req *hr, void *arg);

/*
 * Bytes of request memory each request-body byte is charged (httpd_conf's
 * body_charge): the body and what the proxy makes of it (see proxy.c).
 */
size_t proxy_body_charge(const struct conf *c);

#endif
