/*
 * fuzz_hints.c - libFuzzer target for the upstream request's hints
 * (src/backend.c, src/backend/, src/jedit.c, src/chain.c) over untrusted
 * request bodies.
 *
 * Input: byte 0 picks the upstream type (low two bits) and the endpoint (next
 * two bits: chat, completions, messages, embeddings); the rest is a body.
 * For a body the proxy accepts (an object, no NUL byte), with every hint asked for, checked
 * (abort on violation):
 *   - the body sent upstream parses as JSON;
 *   - every top-level member of the client's body is there with the same
 *     canonical value, except for the fields a hint may change
 *     (stream_options, system, messages, tools), and only hint fields are
 *     added (prompt_cache_key, cache_salt, stream_options);
 *   - the chain of the body is built without fault, and so is its copy.
 * Seed corpus: tests/fuzz/corpus/hints/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_backend.h"
#include "pc_canon.h"
#include "pc_chain.h"
#include "pc_conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const enum api_endpoint endpoints[] = {API_CHAT, API_COMPLETIONS, API_MESSAGES,
                                              API_EMBEDDINGS};
static const char *const types[] = {"openai", "anthropic", "vllm", "sglang"};

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_hints: %s\n", what);
    abort();
}

static bool may_change(const char *name)
{
    static const char *const names[] = {"stream_options", "system", "messages", "tools"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

static bool may_add(const char *name)
{
    return strcmp(name, "prompt_cache_key") == 0 || strcmp(name, "cache_salt") == 0 ||
           strcmp(name, "stream_options") == 0;
}

static void canon_of(const cJSON *v, struct pc_buf *b)
{
    pc_buf_reset(b);
    canon_json(v, b);
    pc_buf_cstr(b);
}

/* The client's members kept, only hint members added. */
static void check_members(const cJSON *in, const cJSON *out)
{
    struct pc_buf a = PC_BUF_INIT, b = PC_BUF_INIT;
    for (const cJSON *m = in->child; m != NULL; m = m->next) {
        const cJSON *o = api_member(out, m->string);
        if (o == NULL)
            fail("a member of the client's body is missing");
        if (api_member(in, m->string) != m || may_change(m->string))
            continue;
        canon_of(m, &a);
        canon_of(o, &b);
        if (strcmp(a.data, b.data) != 0)
            fail("a member of the client's body changed");
    }
    for (const cJSON *m = out->child; m != NULL; m = m->next)
        if (api_member(in, m->string) == NULL && !may_add(m->string))
            fail("a member that is not a hint was added");
    pc_buf_free(&a);
    pc_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *type = types[data[0] & 3];
    enum api_endpoint ep = endpoints[(data[0] >> 2) & 3];
    /* As the proxy takes bodies: no NUL byte, nothing but white space after the value. */
    size_t len = size - 1;
    if (memchr(data + 1, 0, len) != NULL)
        return 0;
    char *text = pc_strndup((const char *)data + 1, len);
    cJSON *in = cJSON_ParseWithLengthOpts(text, len + 1, NULL, 1);
    if (!cJSON_IsObject(in)) {
        cJSON_Delete(in);
        free(text);
        return 0;
    }
    static const unsigned char tenant[PC_SHA256_LEN] = {7};
    struct chain ch, copy;
    struct chain_input ci = {ep, in, tenant};
    chain_build(&ci, &ch);
    chain_copy(&copy, &ch);
    struct conf *c = conf_create();
    char err[128];
    conf_set(c, "upstream-type", type, err, sizeof(err));
    conf_set(c, "upstream-dp-size", "3", err, sizeof(err));
    struct backend_hints h = {
        .enabled = true,
        .include_usage = true,
        .chain = &copy,
        .tenant = tenant,
        .routing_key = chain_prefix_key(&ch) | 1,
        .fresh_links = (uint32_t)copy.n,
        .cpt = 0.01,
    };
    struct backend_in bin = {"POST", "/v1/x", NULL, 0, text, len, ep, &h};
    struct backend_req req;
    backend_prepare(backend_for(c->upstream_type), c, &bin, &req);
    cJSON *out = cJSON_ParseWithLength(req.body.data, req.body.len);
    if (!cJSON_IsObject(out))
        fail("the body sent upstream is not a JSON object");
    check_members(in, out);
    cJSON_Delete(out);
    backend_req_free(&req);
    conf_destroy(&c);
    chain_free(&copy);
    chain_free(&ch);
    cJSON_Delete(in);
    free(text);
    return 0;
}
