/*
 * pc_backend.h - what differs between the kinds of upstream (`upstream-type`:
 * openai, anthropic, vllm, sglang), one operations table each under
 * src/backend/ (listed in src/backend/backends.h, which the config reads the
 * names from), and the one place where the request sent upstream is built:
 * after routing, from the client's request as received. Nothing outside the
 * family tests the type: what differs is a member of struct backend_ops.
 *
 *   client request (method, target, headers, body)
 *        │ backend_prepare: drop hop-by-hop and proxy-only headers, the
 *        │                  client's credentials when upstream-key replaces
 *        │                  them, add the type's credential header; then
 *        │                  the hints (struct backend_hints):
 *        │   stream_options.include_usage (OpenAI-style streams)
 *        │   openai     prompt_cache_key
 *        │   anthropic  cache_control breakpoints on prefixes seen lately
 *        │   vllm       cache_salt, x-user-id, X-data-parallel-rank
 *        │   sglang     cache_salt, x-smg-routing-key
 *        ▼   any        prefix-routing-header
 *   struct backend_req (owns every string: survives the client request, so
 *        │              a call can be retried on another replica)
 *        ▼ backend_url(replica)
 *   xfer_req
 *
 * Body hints are spliced into the client's JSON text (pc_jedit.h): every
 * other byte goes upstream as the client wrote it. A field or header the
 * client set itself is never replaced. Hints are added after the cache key
 * was computed, so they never change it.
 */
#ifndef PC_BACKEND_H
#define PC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "pc_api.h"
#include "pc_jedit.h"
#include "pc_upstream.h"
#include "pc_util.h"

struct chain;
struct conf;
struct route_replica;

/* What the hints are made of (all may be absent: then that hint is not added). */
struct backend_hints {
    bool enabled;                /* prefix-hints */
    bool include_usage;          /* ask for stream_options.include_usage */
    const struct chain *chain;   /* the request's prefix chain */
    const unsigned char *tenant; /* PC_SHA256_LEN bytes, for cache_salt; NULL: no salt */
    uint64_t routing_key;        /* the session's key, else the chain's prefix key; 0: none */
    uint32_t fresh_links;        /* leading links used within backend_ops.prompt_cache_ms */
    double cpt;                  /* prompt bytes per token of the model */
};

#define BACKEND_MAX_HEADERS 130

/* The client's request as received (pointers valid during backend_prepare only). */
struct backend_in {
    const char *method;
    const char *target; /* path and query */
    const struct xfer_header *headers;
    size_t nheaders;
    const char *body;
    size_t body_len;
    enum api_endpoint endpoint;        /* API_NONE: pass-through */
    const struct backend_hints *hints; /* NULL: none */
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

#define BACKEND_BODY_MEMBERS 64

/* The client's body as the hint functions see it: scanned once. */
struct backend_body {
    const char *text;
    size_t len;
    struct jspan root;                        /* the top-level object */
    struct jspan names[BACKEND_BODY_MEMBERS]; /* its members, in order */
    struct jspan vals[BACKEND_BODY_MEMBERS];
    size_t n;
};

struct backend_ops {
    const char *name; /* the upstream-type */
    /*
     * Whether the upstream takes stream_options.include_usage (OpenAI-style
     * streams): stream-usage asks for it on the client's behalf only then.
     */
    bool stream_usage;
    /*
     * How long the upstream keeps a prompt prefix cached after its last use,
     * in ms, when its hints depend on that (backend_hints.fresh_links): the
     * prefix index then reports the links used within it. 0: no such hints.
     */
    int64_t prompt_cache_ms;
    /* Header that carries upstream-key (value built from key into out). */
    void (*credential)(const char *key, const char **name, struct pc_buf *value);
    /* Body hints as splices into e (NULL: none). Called only with hints enabled. */
    void (*body_hints)(const struct conf *c, const struct backend_in *in,
                       const struct backend_body *b, struct jedit *e);
    /* Header hints, added with backend_hint_header (NULL: none). */
    void (*header_hints)(const struct conf *c, const struct backend_in *in,
                         struct backend_req *out);
};

/*
 * The operations of upstream type t, a position in BACKEND_LIST (the value
 * conf holds for upstream-type); the first type (openai) when t is out of
 * range. Never NULL.
 */
const struct backend_ops *backend_for(int t);

/* Fill out from in (out is overwritten; backend_req_free releases it). */
void backend_prepare(const struct backend_ops *ops, const struct conf *c,
                     const struct backend_in *in, struct backend_req *out);
void backend_req_free(struct backend_req *r);
/* The absolute URL of r on a replica, into url (reset first). */
void backend_url(const struct backend_req *r, const struct route_replica *rep, struct pc_buf *url);
/* Whether a client request header carries a credential (Authorization, x-api-key, api-key). */
bool backend_is_credential_header(const char *name);

/* For the types' hint functions: add a header unless the client sent one of that name or it
 * is there already. */
void backend_hint_header(struct backend_req *r, const struct backend_in *in, const char *name,
                         const char *value);
/* The routing key as text ("pc-" and 16 hex digits) into out[20]; false if there is none. */
bool backend_routing_key(const struct backend_hints *h, char out[20]);
/* cache_salt of a tenant: 32 hex digits into out[33]; false if there is no tenant. */
bool backend_cache_salt(const struct backend_hints *h, char out[33]);
/* The value (and name) of the top-level member key (the last of that name); false if none. */
bool backend_body_member(const struct backend_body *b, const char *key, struct jspan *name,
                         struct jspan *val);
/* Add "key":value_json at the top level unless the client's body has key. */
void backend_add_field(const struct backend_body *b, struct jedit *e, const char *key,
                       const char *value_json);
/* The least number of prompt tokens a cache breakpoint needs for an Anthropic model. */
int64_t backend_anthropic_min_tokens(const char *model);

#endif
