/*
 * backend/sglang.c - SGLang's OpenAI-compatible server (and its router):
 * upstream-key goes in Authorization: Bearer (--api-key).
 */
#include "pc_backend.h"

static void sglang_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

const struct backend_ops backend_sglang = {
    .name = "sglang",
    .credential = sglang_credential,
};
