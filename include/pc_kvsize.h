/*
 * pc_kvsize.h - `promptcache kv-size`: the KV-cache arithmetic of a model, so
 * a replica's prefix-cache capacity can be set in tokens.
 *
 *   bytes per token = 2 (K and V) x layers x KV heads x head dim x bytes per value
 *   tokens that fit = GPU memory left for the KV cache / bytes per token
 *
 * An 8B-class model with grouped-query attention (32 layers x 8 KV heads x
 * 128 dims at FP16) needs 128 KiB per token, so 32k tokens take 4 GiB.
 *
 * A small built-in table names the geometries of common open models (from
 * their published configs: num_hidden_layers, num_key_value_heads,
 * head_dim); explicit --layers, --kv-heads, --head-dim and --dtype override
 * it or stand without a model. The arithmetic is pure and unit tested; the
 * command prints it as a table or JSON.
 */
#ifndef PC_KVSIZE_H
#define PC_KVSIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "pc_util.h"

/* KV-cache value types: X(enum, name, bytes per value). */
#define KVSIZE_DTYPES(X)  \
    X(KV_FP16, "fp16", 2) \
    X(KV_BF16, "bf16", 2) \
    X(KV_FP8, "fp8", 1)

enum kvsize_dtype {
#define KVSIZE_DTYPE_ENUM(e, name, bytes) e,
    KVSIZE_DTYPES(KVSIZE_DTYPE_ENUM)
#undef KVSIZE_DTYPE_ENUM
        KV__DTYPE_COUNT
};

/* A model's attention geometry; name is NULL for one given by flags only. */
struct kvsize_geometry {
    const char *name;
    int layers;
    int kv_heads;
    int head_dim;
    enum kvsize_dtype dtype;
};

/* Limits for flags (generous; they only catch typing mistakes). */
#define KVSIZE_MAX_LAYERS   1024
#define KVSIZE_MAX_KV_HEADS 1024
#define KVSIZE_MAX_HEAD_DIM 4096
#define KVSIZE_MAX_GIB      1048576.0

/* "fp16", "bf16", "fp8" (also "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"); -1 if none. */
int kvsize_dtype_parse(const char *s);
const char *kvsize_dtype_name(enum kvsize_dtype d);
int kvsize_dtype_bytes(enum kvsize_dtype d);

/*
 * The built-in geometry of a model by name or alias, case-insensitively; an
 * organisation prefix ("meta-llama/") and an "-Instruct", "-it", "-chat" or
 * "-hf" suffix are ignored. The dtype of the result is fp16. Returns 0 and
 * fills *out, or -1 if the name is unknown.
 */
int kvsize_lookup(const char *name, struct kvsize_geometry *out);

/* Append the known models' names, comma-separated, to out. */
void kvsize_list_models(struct pc_buf *out);

/* 2 x layers x kv_heads x head_dim x bytes per value. */
uint64_t kvsize_bytes_per_token(const struct kvsize_geometry *g);

/* Whole tokens whose KV state fits in gib GiB (0 if gib <= 0). */
uint64_t kvsize_tokens_in(double gib, uint64_t bytes_per_token);

/*
 * The subcommand: argv[0..argc) are the arguments after "kv-size". Prints to
 * stdout (errors to stderr) and returns the exit status: 0, or 2 for a usage
 * error (unknown model or option, bad number).
 */
int kvsize_cli(int argc, char **argv);

/* Register the check of prefix-kv-model with the configuration (pc_conf.h). */
int kvsize_add_conf_rules(void);

#endif
