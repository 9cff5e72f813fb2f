/*
 * pc_proxy.h - the request state machine: every client request enters
 * proxy_handle, which routes it to the proxy's own endpoints (pc_admin.h),
 * the cache path for the LLM API endpoints, or plain pass-through.
 */
#ifndef PC_PROXY_H
#define PC_PROXY_H

struct httpd_req;

/* httpd handler; arg is the struct worker. */
void proxy_handle(struct httpd_req *hr, void *arg);

#endif
