/*
 * test_kvsize.c - the arithmetic of `promptcache kv-size`: bytes per token
 * and token capacity for two known models, model names and aliases, value
 * types.
 */
#include "pc_kvsize.h"
#include "t.h"

/* Llama 3.1 8B: 32 layers x 8 KV heads x 128 dims; FP16 is 128 KiB a token, 32k tokens 4 GiB. */
static void test_llama_8b(void)
{
    struct kvsize_geometry g;
    T_CHECK_INT(kvsize_lookup("llama-3.1-8b", &g), 0);
    T_CHECK_INT(g.layers, 32);
    T_CHECK_INT(g.kv_heads, 8);
    T_CHECK_INT(g.head_dim, 128);
    T_CHECK_INT(g.dtype, KV_FP16);
    T_CHECK_INT(kvsize_bytes_per_token(&g), 131072);
    T_CHECK_INT(kvsize_bytes_per_token(&g) * 32768, 4LL << 30);
    T_CHECK_INT(kvsize_tokens_in(4.0, kvsize_bytes_per_token(&g)), 32768);
    T_CHECK_INT(kvsize_tokens_in(40.0, kvsize_bytes_per_token(&g)), 327680);
    g.dtype = KV_FP8;
    T_CHECK_INT(kvsize_bytes_per_token(&g), 65536);
    T_CHECK_INT(kvsize_tokens_in(4.0, kvsize_bytes_per_token(&g)), 65536);
}

/* Qwen2.5 72B: 80 layers x 8 KV heads x 128 dims = 320 KiB a token in BF16. */
static void test_qwen_72b(void)
{
    struct kvsize_geometry g;
    T_CHECK_INT(kvsize_lookup("Qwen/Qwen2.5-72B-Instruct", &g), 0);
    T_CHECK_STR(g.name, "qwen2.5-72b");
    g.dtype = KV_BF16;
    T_CHECK_INT(kvsize_bytes_per_token(&g), 2 * 80 * 8 * 128 * 2);
    T_CHECK_INT(kvsize_bytes_per_token(&g), 327680);
    /* 20 GiB hold 65536 tokens exactly; a byte less holds one token fewer. */
    T_CHECK_INT(kvsize_tokens_in(20.0, 327680), 65536);
    T_CHECK_INT(kvsize_tokens_in(20.0 - 1.0 / (1024.0 * 1024.0 * 1024.0), 327680), 65535);
    T_CHECK_INT(kvsize_tokens_in(0, 327680), 0);
    T_CHECK_INT(kvsize_tokens_in(-1, 327680), 0);
}

static void test_names(void)
{
    struct kvsize_geometry g;
    T_CHECK_INT(kvsize_lookup("meta-llama/Meta-Llama-3-70B-Instruct", &g), 0);
    T_CHECK_STR(g.name, "llama-3.1-70b");
    T_CHECK_INT(kvsize_lookup("LLAMA-3.3-70B", &g), 0);
    T_CHECK_INT(g.layers, 80);
    T_CHECK_INT(kvsize_lookup("google/gemma-2-9b-it", &g), 0);
    T_CHECK_INT(g.head_dim, 256);
    T_CHECK_INT(kvsize_lookup("Qwen2.5_7B", &g), 0);
    T_CHECK_INT(g.kv_heads, 4);
    T_CHECK_INT(kvsize_lookup("llama-3.1", &g), -1);
    T_CHECK_INT(kvsize_lookup("llama-3.1-8b-extra", &g), -1);
    T_CHECK_INT(kvsize_lookup("", &g), -1);
    T_CHECK_INT(kvsize_lookup("gpt-4o", &g), -1);
    struct pc_buf b = PC_BUF_INIT;
    kvsize_list_models(&b);
    T_CHECK(strstr(pc_buf_cstr(&b), "mixtral-8x7b") != NULL);
    pc_buf_free(&b);
}

static void test_dtypes(void)
{
    T_CHECK_INT(kvsize_dtype_parse("fp16"), KV_FP16);
    T_CHECK_INT(kvsize_dtype_parse("BF16"), KV_BF16);
    T_CHECK_INT(kvsize_dtype_parse("fp8_e4m3"), KV_FP8);
    T_CHECK_INT(kvsize_dtype_parse("int4"), -1);
    T_CHECK_INT(kvsize_dtype_bytes(KV_BF16), 2);
    T_CHECK_INT(kvsize_dtype_bytes(KV_FP8), 1);
    T_CHECK_STR(kvsize_dtype_name(KV_FP8), "fp8");
}

int main(void)
{
    T_RUN(test_llama_8b);
    T_RUN(test_qwen_72b);
    T_RUN(test_names);
    T_RUN(test_dtypes);
    T_DONE();
}
