/*
 * backend/openai.c - OpenAI and any OpenAI-compatible API (Azure, gateways):
 * upstream-key goes in Authorization: Bearer.
 */
#include "pc_backend.h"

static void openai_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

const struct backend_ops backend_openai = {
    .name = "openai",
    .credential = openai_credential,
};
