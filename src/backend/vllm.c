/*
 * backend/vllm.c - vLLM's OpenAI-compatible server (and its production-stack
 * router): upstream-key goes in Authorization: Bearer (vllm serve --api-key).
 * Hints: cache_salt per tenant (vLLM mixes it into the hash of a prompt's
 * first block, so tenants never share KV blocks), the routing key in
 * x-user-id (the production-stack router's session key) and, behind a
 * data-parallel server, X-data-parallel-rank chosen from the same key.
 */
#include "pc_backend.h"
#include "pc_conf.h"

#include <stdio.h>

static void vllm_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

static void vllm_body_hints(const struct conf *c, const struct backend_in *in,
                            const struct backend_body *b, struct jedit *e)
{
    char salt[33], json[40];
    if (c->prefix_share_tenants || !backend_cache_salt(in->hints, salt))
        return;
    snprintf(json, sizeof(json), "\"%s\"", salt);
    backend_add_field(b, e, "cache_salt", json);
}

static void vllm_header_hints(const struct conf *c, const struct backend_in *in,
                              struct backend_req *out)
{
    char key[20], rank[16];
    if (!backend_routing_key(in->hints, key))
        return;
    backend_hint_header(out, in, "x-user-id", key);
    if (c->upstream_dp_size > 1) {
        snprintf(rank, sizeof(rank), "%d",
                 (int)(in->hints->routing_key % (uint64_t)c->upstream_dp_size));
        backend_hint_header(out, in, "X-data-parallel-rank", rank);
    }
}

const struct backend_ops backend_vllm = {
    .name = "vllm",
    .stream_usage = true,
    .credential = vllm_credential,
    .body_hints = vllm_body_hints,
    .header_hints = vllm_header_hints,
};
