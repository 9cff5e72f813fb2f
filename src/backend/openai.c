/*
 * backend/openai.c - OpenAI and any OpenAI-compatible API (Azure, gateways):
 * upstream-key goes in Authorization: Bearer. Hint: prompt_cache_key, which
 * OpenAI combines with the prompt's first tokens to route a request to a
 * machine that has its prefix cached; the proxy names the conversation (or
 * the session) with it, so its turns meet their own cache.
 */
#include "pc_backend.h"

#include <stdio.h>

static void openai_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

static void openai_body_hints(const struct conf *c, const struct backend_in *in,
                              const struct backend_body *b, struct jedit *e)
{
    (void)c;
    char key[20], json[24];
    if (in->endpoint != API_CHAT && in->endpoint != API_COMPLETIONS)
        return;
    if (!backend_routing_key(in->hints, key))
        return;
    snprintf(json, sizeof(json), "\"%s\"", key);
    backend_add_field(b, e, "prompt_cache_key", json);
}

const struct backend_ops backend_openai = {
    .name = "openai",
    .stream_usage = true,
    .credential = openai_credential,
    .body_hints = openai_body_hints,
};
