/*
 * backend/anthropic.c - Anthropic's Messages API: upstream-key goes in
 * x-api-key.
 */
#include "pc_backend.h"

static void anthropic_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "x-api-key";
    pc_buf_append_str(value, key);
}

const struct backend_ops backend_anthropic = {
    .name = "anthropic",
    .credential = anthropic_credential,
};
