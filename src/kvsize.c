/*
 * kvsize.c - `promptcache kv-size` (see pc_kvsize.h). Owns the table of
 * known model geometries and the command's options; no state survives a
 * call.
 *
 *   argv ─▶ options (model name, overriding flags, GPU memory, format)
 *        ─▶ geometry (table row, then flags) ─▶ bytes per token, tokens
 *        ─▶ table or JSON on stdout
 */
#include "pc_kvsize.h"
#include "pc_conf.h"

#include <ctype.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/*
 * Known geometries: X(name, aliases, layers, KV heads, head dim), checked
 * against each model's published config.json (num_hidden_layers,
 * num_key_value_heads, head_dim or hidden_size / num_attention_heads).
 * Aliases are space-separated. Gemma 2 interleaves sliding-window layers;
 * an engine that does not shrink those caches needs what is shown here.
 */
#define KVSIZE_MODELS(X)                                                                           \
    X("llama-3.1-8b", "llama-3-8b llama3-8b llama3.1-8b meta-llama-3-8b meta-llama-3.1-8b", 32, 8, \
      128)                                                                                         \
    X("llama-3.1-70b",                                                                             \
      "llama-3-70b llama3-70b llama3.1-70b llama-3.3-70b llama3.3-70b meta-llama-3-70b "           \
      "meta-llama-3.1-70b",                                                                        \
      80, 8, 128)                                                                                  \
    X("llama-3.1-405b", "llama3.1-405b meta-llama-3.1-405b", 126, 8, 128)                          \
    X("llama-3.2-1b", "llama3.2-1b", 16, 8, 64)                                                    \
    X("llama-3.2-3b", "llama3.2-3b", 28, 8, 128)                                                   \
    X("qwen2.5-7b", "qwen2.5-7b qwen2-7b", 28, 4, 128)                                             \
    X("qwen2.5-14b", "", 48, 8, 128)                                                               \
    X("qwen2.5-32b", "", 64, 8, 128)                                                               \
    X("qwen2.5-72b", "qwen2-72b", 80, 8, 128)                                                      \
    X("qwen3-8b", "", 36, 8, 128)                                                                  \
    X("qwen3-32b", "", 64, 8, 128)                                                                 \
    X("mistral-7b", "mistral-7b-v0.1 mistral-7b-v0.2 mistral-7b-v0.3", 32, 8, 128)                 \
    X("mistral-nemo-12b", "mistral-nemo mistral-nemo-base-2407 mistral-nemo-instruct-2407", 40, 8, \
      128)                                                                                         \
    X("mixtral-8x7b", "mixtral-8x7b-v0.1", 32, 8, 128)                                             \
    X("mixtral-8x22b", "mixtral-8x22b-v0.1", 56, 8, 128)                                           \
    X("gemma-2-2b", "gemma2-2b", 26, 4, 256)                                                       \
    X("gemma-2-9b", "gemma2-9b", 42, 8, 256)                                                       \
    X("gemma-2-27b", "gemma2-27b", 46, 16, 128)

struct kvsize_model {
    const char *name;
    const char *aliases;
    int layers, kv_heads, head_dim;
};

static const struct kvsize_model kvsize_models[] = {
#define KVSIZE_MODEL_ROW(name, aliases, layers, kv_heads, head_dim) \
    {name, aliases, layers, kv_heads, head_dim},
    KVSIZE_MODELS(KVSIZE_MODEL_ROW)
#undef KVSIZE_MODEL_ROW
};

static const struct {
    const char *name;
    int bytes;
} kvsize_dtypes[] = {
#define KVSIZE_DTYPE_ROW(e, name, bytes) [e] = {name, bytes},
    KVSIZE_DTYPES(KVSIZE_DTYPE_ROW)
#undef KVSIZE_DTYPE_ROW
};

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- arithmetic and names ---------------------------------------------------- */

int kvsize_dtype_parse(const char *s)
{
    static const struct {
        const char *alias;
        enum kvsize_dtype d;
    } aliases[] = {{"float16", KV_FP16},
                   {"half", KV_FP16},
                   {"bfloat16", KV_BF16},
                   {"fp8_e4m3", KV_FP8},
                   {"fp8_e5m2", KV_FP8}};
    for (int d = 0; d < KV__DTYPE_COUNT; d++)
        if (pc_strcaseeq(s, kvsize_dtypes[d].name))
            return d;
    for (size_t i = 0; i < PC_ARRAY_LEN(aliases); i++)
        if (pc_strcaseeq(s, aliases[i].alias))
            return (int)aliases[i].d;
    return -1;
}

const char *kvsize_dtype_name(enum kvsize_dtype d)
{
    return kvsize_dtypes[d].name;
}

int kvsize_dtype_bytes(enum kvsize_dtype d)
{
    return kvsize_dtypes[d].bytes;
}

uint64_t kvsize_bytes_per_token(const struct kvsize_geometry *g)
{
    return 2u * (uint64_t)g->layers * (uint64_t)g->kv_heads * (uint64_t)g->head_dim *
           (uint64_t)kvsize_dtype_bytes(g->dtype);
}

uint64_t kvsize_tokens_in(double gib, uint64_t bytes_per_token)
{
    if (!(gib > 0) || bytes_per_token == 0)
        return 0;
    return (uint64_t)floor(gib * GIB / (double)bytes_per_token);
}

/*
 * The comparable form of a model name in out (size cap): lower case, without
 * an organisation prefix and one trailing variant suffix, '_' and ' ' as '-'.
 */
static void normalise_name(const char *s, char *out, size_t cap)
{
    static const char *const suffixes[] = {"-instruct", "-it", "-chat", "-hf"};
    const char *slash = strrchr(s, '/');
    if (slash != NULL)
        s = slash + 1;
    size_t n = 0;
    for (; *s != '\0' && n + 1 < cap; s++)
        out[n++] = (*s == '_' || *s == ' ') ? '-' : (char)tolower((unsigned char)*s);
    out[n] = '\0';
    for (size_t i = 0; i < PC_ARRAY_LEN(suffixes); i++) {
        size_t k = strlen(suffixes[i]);
        if (n > k && strcmp(out + n - k, suffixes[i]) == 0) {
            out[n - k] = '\0';
            break;
        }
    }
}

/* Whether the space-separated list names (lower case) holds name. */
static bool list_has(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; *p != '\0';) {
        size_t k = strcspn(p, " ");
        if (k == n && strncmp(p, name, n) == 0)
            return true;
        p += k;
        p += strspn(p, " ");
    }
    return false;
}

int kvsize_lookup(const char *name, struct kvsize_geometry *out)
{
    char want[128];
    normalise_name(name, want, sizeof(want));
    for (size_t i = 0; i < PC_ARRAY_LEN(kvsize_models); i++) {
        const struct kvsize_model *m = &kvsize_models[i];
        if (strcmp(m->name, want) == 0 || list_has(m->aliases, want)) {
            *out = (struct kvsize_geometry){m->name, m->layers, m->kv_heads, m->head_dim, KV_FP16};
            return 0;
        }
    }
    return -1;
}

void kvsize_list_models(struct pc_buf *out)
{
    for (size_t i = 0; i < PC_ARRAY_LEN(kvsize_models); i++)
        pc_buf_printf(out, "%s%s", i ? ", " : "", kvsize_models[i].name);
}

/* ---- the command ------------------------------------------------------------- */

enum kvsize_format {
    KVSIZE_TABLE,
    KVSIZE_JSON,
};

struct kvsize_opts {
    const char *model;
    int layers, kv_heads, head_dim; /* 0: not given */
    int dtype;                      /* -1: not given */
    double gpu_gib;                 /* 0: not given */
    int64_t tokens;                 /* the example size whose memory is shown */
    enum kvsize_format format;
    bool help;
};

static const char kvsize_usage[] =
    "usage: promptcache kv-size [MODEL] [--layers N --kv-heads N --head-dim N]\n"
    "                           [--dtype fp16|bf16|fp8] [--gpu-memory GiB] [--tokens N]\n"
    "                           [--format table|json]\n"
    "\n"
    "Prints the KV-cache size of a model: bytes per token = 2 x layers x KV heads x\n"
    "head dim x bytes per value, the memory N tokens take (--tokens, default 32768)\n"
    "and, with --gpu-memory (GiB left for the KV cache), how many tokens fit: the\n"
    "capacity in tokens to give one replica. Flags override the model's geometry;\n"
    "without a MODEL, --layers, --kv-heads and --head-dim are all needed. The\n"
    "value type defaults to fp16.\n";

static int usage_error(const char *fmt, const char *arg)
{
    fputs("promptcache kv-size: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(promptcache kv-size --help for usage)\n", stderr);
    return 2;
}

/* A whole number in [1, max] into *out; -1 if it is not one. */
static int parse_count(const char *s, int max, int *out)
{
    int64_t v;
    if (pc_parse_i64(s, &v) < 0 || v < 1 || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

/* Apply one "--name value" option; 0, or an exit status for a bad value. */
static int apply_option(struct kvsize_opts *o, const char *name, const char *v)
{
    if (strcmp(name, "--layers") == 0) {
        if (parse_count(v, KVSIZE_MAX_LAYERS, &o->layers) < 0)
            return usage_error("--layers must be a whole number from 1 to 1024, not \"%s\"", v);
    } else if (strcmp(name, "--kv-heads") == 0) {
        if (parse_count(v, KVSIZE_MAX_KV_HEADS, &o->kv_heads) < 0)
            return usage_error("--kv-heads must be a whole number from 1 to 1024, not \"%s\"", v);
    } else if (strcmp(name, "--head-dim") == 0) {
        if (parse_count(v, KVSIZE_MAX_HEAD_DIM, &o->head_dim) < 0)
            return usage_error("--head-dim must be a whole number from 1 to 4096, not \"%s\"", v);
    } else if (strcmp(name, "--dtype") == 0) {
        if ((o->dtype = kvsize_dtype_parse(v)) < 0)
            return usage_error("--dtype must be fp16, bf16 or fp8, not \"%s\"", v);
    } else if (strcmp(name, "--gpu-memory") == 0) {
        if (pc_parse_double(v, &o->gpu_gib) < 0 || !(o->gpu_gib > 0) || o->gpu_gib > KVSIZE_MAX_GIB)
            return usage_error("--gpu-memory must be a number of GiB above 0, not \"%s\"", v);
    } else if (strcmp(name, "--tokens") == 0) {
        if (pc_parse_i64(v, &o->tokens) < 0 || o->tokens < 1 || o->tokens > INT64_C(1) << 40)
            return usage_error("--tokens must be a whole number of at least 1, not \"%s\"", v);
    } else if (strcmp(name, "--format") == 0) {
        if (strcmp(v, "table") != 0 && strcmp(v, "json") != 0)
            return usage_error("--format must be table or json, not \"%s\"", v);
        o->format = strcmp(v, "json") == 0 ? KVSIZE_JSON : KVSIZE_TABLE;
    } else {
        return usage_error("unknown option %s", name);
    }
    return 0;
}

static int parse_opts(int argc, char **argv, struct kvsize_opts *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            o->help = true;
            return 0;
        }
        if (a[0] != '-' || a[1] != '-') {
            if (o->model != NULL || a[0] == '-')
                return usage_error("unexpected argument \"%s\"", a);
            o->model = a;
            continue;
        }
        char name[32];
        const char *eq = strchr(a, '=');
        size_t n = eq != NULL ? (size_t)(eq - a) : strlen(a);
        if (n >= sizeof(name))
            return usage_error("unknown option %s", a);
        memcpy(name, a, n);
        name[n] = '\0';
        const char *v = eq != NULL ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL)
            return usage_error("%s needs a value", name);
        int rc = apply_option(o, name, v);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The geometry from the model's row and the flags; 0, or an exit status. */
static int resolve(const struct kvsize_opts *o, struct kvsize_geometry *g)
{
    *g = (struct kvsize_geometry){NULL, 0, 0, 0, KV_FP16};
    if (o->model != NULL && kvsize_lookup(o->model, g) < 0) {
        struct pc_buf known = PC_BUF_INIT;
        kvsize_list_models(&known);
        fprintf(stderr, "promptcache kv-size: unknown model \"%s\"; known models: %s\n", o->model,
                pc_buf_cstr(&known));
        fputs("(or give its geometry: --layers N --kv-heads N --head-dim N)\n", stderr);
        pc_buf_free(&known);
        return 2;
    }
    if (o->layers)
        g->layers = o->layers;
    if (o->kv_heads)
        g->kv_heads = o->kv_heads;
    if (o->head_dim)
        g->head_dim = o->head_dim;
    if (o->dtype >= 0)
        g->dtype = (enum kvsize_dtype)o->dtype;
    if (g->layers == 0 || g->kv_heads == 0 || g->head_dim == 0)
        return usage_error("%s", "name a model or give --layers, --kv-heads and --head-dim");
    return 0;
}

/* bytes as "128 KiB", "4 GiB", "1.5 MiB": the largest binary unit, up to 2 decimals. */
static void human_bytes(double bytes, char *out, size_t cap)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (bytes >= 1024.0 && u + 1 < PC_ARRAY_LEN(units)) {
        bytes /= 1024.0;
        u++;
    }
    if (bytes == floor(bytes))
        snprintf(out, cap, "%.0f %s", bytes, units[u]);
    else
        snprintf(out, cap, "%.2f %s", bytes, units[u]);
}

static void render_table(const struct kvsize_opts *o, const struct kvsize_geometry *g,
                         struct pc_buf *out)
{
    uint64_t per_token = kvsize_bytes_per_token(g);
    char h1[48], h2[48];
    human_bytes((double)per_token, h1, sizeof(h1));
    human_bytes((double)per_token * (double)o->tokens, h2, sizeof(h2));
    pc_buf_printf(out, "model            %s\n", g->name ? g->name : "(given by flags)");
    pc_buf_printf(out, "geometry         %d layers x %d KV heads x %d head dim, %s\n", g->layers,
                  g->kv_heads, g->head_dim, kvsize_dtype_name(g->dtype));
    pc_buf_printf(out, "bytes per token  2 x %d x %d x %d x %d = %llu (%s)\n", g->layers,
                  g->kv_heads, g->head_dim, kvsize_dtype_bytes(g->dtype),
                  (unsigned long long)per_token, h1);
    char label[32];
    snprintf(label, sizeof(label), "%lld tokens", (long long)o->tokens);
    pc_buf_printf(out, "%-16s %s\n", label, h2);
    if (o->gpu_gib > 0) {
        pc_buf_printf(out, "GPU memory       %g GiB for the KV cache\n", o->gpu_gib);
        pc_buf_printf(out, "capacity tokens  %llu\n",
                      (unsigned long long)kvsize_tokens_in(o->gpu_gib, per_token));
    }
}

static void render_json(const struct kvsize_opts *o, const struct kvsize_geometry *g,
                        struct pc_buf *out)
{
    uint64_t per_token = kvsize_bytes_per_token(g);
    pc_buf_append_str(out, "{\"model\":");
    if (g->name != NULL)
        pc_buf_json_str(out, g->name, strlen(g->name));
    else
        pc_buf_append_str(out, "null");
    pc_buf_printf(out,
                  ",\"layers\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"dtype\":\"%s\","
                  "\"bytes_per_value\":%d,\"bytes_per_token\":%llu,\"tokens\":%lld,"
                  "\"bytes_for_tokens\":%llu",
                  g->layers, g->kv_heads, g->head_dim, kvsize_dtype_name(g->dtype),
                  kvsize_dtype_bytes(g->dtype), (unsigned long long)per_token, (long long)o->tokens,
                  (unsigned long long)(per_token * (uint64_t)o->tokens));
    if (o->gpu_gib > 0)
        pc_buf_printf(out, ",\"gpu_memory_gib\":%g,\"capacity_tokens\":%llu", o->gpu_gib,
                      (unsigned long long)kvsize_tokens_in(o->gpu_gib, per_token));
    pc_buf_append_str(out, "}\n");
}

int kvsize_cli(int argc, char **argv)
{
    struct kvsize_opts o = {.dtype = -1, .tokens = 32768, .format = KVSIZE_TABLE};
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0)
        return rc;
    struct pc_buf out = PC_BUF_INIT;
    if (o.help) {
        pc_buf_append_str(&out, kvsize_usage);
        pc_buf_append_str(&out, "\nKnown models (fp16 unless --dtype): ");
        kvsize_list_models(&out);
        pc_buf_append_str(&out, "\n");
    } else {
        struct kvsize_geometry g;
        if ((rc = resolve(&o, &g)) != 0)
            return rc;
        if (o.format == KVSIZE_JSON)
            render_json(&o, &g, &out);
        else
            render_table(&o, &g, &out);
    }
    fwrite(out.data, 1, out.len, stdout);
    pc_buf_free(&out);
    return 0;
}

/* ---- prefix-kv-model (pc_conf.h's rules) ------------------------------------------ */

/* A model of the table, or empty. */
static int check_model(const char *v, char *err, size_t errlen)
{
    struct kvsize_geometry g;
    if (*v != '\0' && kvsize_lookup(v, &g) < 0) {
        char b[80];
        snprintf(err, errlen, "%s is not a model `promptcache kv-size --help` lists",
                 conf_show(v, b, sizeof b));
        return -1;
    }
    return 0;
}

/* prefix-kv-memory too small for one token of the model: the capacity would fall back unsaid. */
static int check_memory(const struct conf *c, char *err, size_t errlen)
{
    struct kvsize_geometry g;
    if (c->prefix_capacity > 0 || c->prefix_kv_memory <= 0 || c->prefix_kv_model[0] == '\0' ||
        kvsize_lookup(c->prefix_kv_model, &g) < 0)
        return 0;
    uint64_t per = kvsize_bytes_per_token(&g);
    if (kvsize_tokens_in(c->prefix_kv_memory, per) > 0)
        return 0;
    snprintf(err, errlen,
             "%g GiB holds no token of %s (%" PRIu64 " bytes each): give the GiB the replica "
             "leaves for its KV cache",
             c->prefix_kv_memory, c->prefix_kv_model, per);
    return -1;
}

static const struct conf_rule rules[] = {
    {.key = "prefix-kv-model", .check = check_model},
    {.key = "prefix-kv-memory",
     .also = {"prefix-kv-model", "prefix-capacity"},
     .check_all = check_memory},
};

int kvsize_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
