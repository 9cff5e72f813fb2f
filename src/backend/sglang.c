/*
 * backend/sglang.c - SGLang's OpenAI-compatible server (and its router):
 * upstream-key goes in Authorization: Bearer (--api-key). Hints: cache_salt
 * per tenant, as for vLLM, and the routing key in x-smg-routing-key, which
 * SGLang's model gateway hashes to keep a conversation on one worker.
 */
#include "pc_backend.h"
#include "pc_conf.h"

#include <stdio.h>

static void sglang_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

static void sglang_body_hints(const struct conf *c, const struct backend_in *in,
                              const struct backend_body *b, struct jedit *e)
{
    char salt[33], json[40];
    if (c->prefix_share_tenants || !backend_cache_salt(in->hints, salt))
        return;
    snprintf(json, sizeof(json), "\"%s\"", salt);
    backend_add_field(b, e, "cache_salt", json);
}

static void sglang_header_hints(const struct conf *c, const struct backend_in *in,
                                struct backend_req *out)
{
    (void)c;
    char key[20];
    if (backend_routing_key(in->hints, key))
        backend_hint_header(out, in, "x-smg-routing-key", key);
}

const struct backend_ops backend_sglang = {
    .name = "sglang",
    .stream_usage = true,
    .credential = sglang_credential,
    .body_hints = sglang_body_hints,
    .header_hints = sglang_header_hints,
};
