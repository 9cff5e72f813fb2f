/*
 * pc_backend.h - what differs between the kinds of upstream (`upstream-type`:
 * openai, anthropic, vllm, sglang), one operations table each under
 * src/backend/, and the one place where the request sent upstream is built:
 * after routing, from the client's request as received.
 *
 *   client request (method, target, headers, body)
 *        │ backend_prepare: drop hop-by-hop and proxy-only headers, the
 *        │                  client's credentials when upstream-key replaces
 *        ▼                  them, add the type's credential header
 *   struct backend_req (owns every string: survives the client request, so
 *        │              a call can be retried on another replica)
 *        ▼ backend_url(replica)
 *   xfer_req
 */
#ifndef PC_BACKEND_H
#define PC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "pc_api.h"
#include "pc_upstream.h"
#include "pc_util.h"

struct conf;
struct route_replica;

#define BACKEND_MAX_HEADERS 130

/* The client's request as received (pointers valid during backend_prepare only). */
struct backend_in {
    const char *method;
    const char *target; /* path and query */
    const struct xfer_header *headers;
    size_t nheaders;
    const char *body;
    size_t body_len;
    enum api_endpoint endpoint; /* API_NONE: pass-through */
};

/* The request to send upstream; owns its strings and body. */
struct backend_req {
    char *method;
    char *target;
    struct xfer_header hdrs[BACKEND_MAX_HEADERS];
    size_t nhdrs;
    struct pc_buf strings; /* header names and values, NUL-separated */
    struct pc_buf body;
};

struct backend_ops {
    const char *name; /* the upstream-type */
    /* Header that carries upstream-key (value built from key into out). */
    void (*credential)(const char *key, const char **name, struct pc_buf *value);
};

const struct backend_ops *backend_for(int upstream_type);

/* Fill out from in (out is overwritten; backend_req_free releases it). */
void backend_prepare(const struct backend_ops *ops, const struct conf *c,
                     const struct backend_in *in, struct backend_req *out);
void backend_req_free(struct backend_req *r);
/* The absolute URL of r on a replica, into url (reset first). */
void backend_url(const struct backend_req *r, const struct route_replica *rep, struct pc_buf *url);
/* Whether a client request header carries a credential (Authorization, x-api-key, api-key). */
bool backend_is_credential_header(const char *name);

/* The operations tables (src/backend/NAME.c). */
extern const struct backend_ops backend_openai;
extern const struct backend_ops backend_anthropic;
extern const struct backend_ops backend_vllm;
extern const struct backend_ops backend_sglang;

#endif
