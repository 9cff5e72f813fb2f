/*
 * backend/vllm.c - vLLM's OpenAI-compatible server (and its production-stack
 * router): upstream-key goes in Authorization: Bearer (vllm serve --api-key).
 */
#include "pc_backend.h"

static void vllm_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "Authorization";
    pc_buf_printf(value, "Bearer %s", key);
}

const struct backend_ops backend_vllm = {
    .name = "vllm",
    .credential = vllm_credential,
};
