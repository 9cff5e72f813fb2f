/*
 * test_backend.c - the upstream request and its hints per upstream type:
 * stream_options.include_usage, prompt_cache_key (openai), cache_salt per
 * tenant and routing headers (vllm, sglang, prefix-routing-header,
 * X-data-parallel-rank), cache_control breakpoints (anthropic: only on
 * prefixes seen lately, long enough, at most 4 with the client's own); the
 * client's fields and headers always kept, and its bytes elsewhere too;
 * the family's table: every upstream-type the config takes is the backend
 * of that name, and what differs by type is in its operations.
 */
#include "t.h"

#include "pc_backend.h"
#include "pc_chain.h"
#include "pc_conf.h"

static const unsigned char tenant_a[PC_SHA256_LEN] = {1};
static const unsigned char tenant_b[PC_SHA256_LEN] = {2};

struct built {
    struct backend_req req;
    char *body;
};

static struct conf *mk_conf(const char *type, const char *k1, const char *v1)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "upstream-type", type, err, sizeof err), 0);
    if (k1 != NULL)
        T_CHECK_INT(conf_set(c, k1, v1, err, sizeof err), 0);
    return c;
}

/* Build the upstream request of body with hints from h (chain built from body). */
static void prepare(const struct conf *c, enum api_endpoint ep, const char *body,
                    const struct xfer_header *hdrs, size_t nh, struct backend_hints *h,
                    struct built *out)
{
    cJSON *json = cJSON_Parse(body);
    struct chain ch;
    struct chain_input ci = {ep, json, h->tenant};
    chain_build(&ci, &ch);
    h->chain = &ch;
    if (h->routing_key == 0)
        h->routing_key = chain_prefix_key(&ch);
    struct backend_in in = {"POST", "/v1/x", hdrs, nh, body, strlen(body), ep, h};
    backend_prepare(backend_for(c->upstream_type), c, &in, &out->req);
    out->body = pc_strndup(out->req.body.data ? out->req.body.data : "", out->req.body.len);
    chain_free(&ch);
    h->chain = NULL;
    cJSON_Delete(json);
}

static void built_free(struct built *b)
{
    backend_req_free(&b->req);
    free(b->body);
}

static const char *header(const struct built *b, const char *name)
{
    for (size_t i = 0; i < b->req.nhdrs; i++)
        if (pc_strcaseeq(b->req.hdrs[i].name, name))
            return b->req.hdrs[i].value;
    return NULL;
}

/* A member of the built body, parsed (caller deletes). */
static cJSON *parsed(const struct built *b)
{
    cJSON *j = cJSON_Parse(b->body);
    T_CHECK(j != NULL);
    return j;
}

static const char chat[] = "{\"model\":\"m\",\"seed\":123456789012345678901,\"stream\":true,"
                           "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";

static void test_include_usage(void)
{
    struct conf *c = mk_conf("vllm", NULL, NULL);
    struct backend_hints h = {.include_usage = true};
    struct built b;
    prepare(c, API_CHAT, chat, NULL, 0, &h, &b);
    /* Added, and the client's big integer kept digit for digit. */
    T_CHECK(strstr(b.body, "\"seed\":123456789012345678901,") != NULL);
    T_CHECK(strstr(b.body, "\"stream_options\":{\"include_usage\":true}") != NULL);
    built_free(&b);
    const char *with_opts =
        "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":false,"
        "\"continuous_usage_stats\":true},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    prepare(c, API_CHAT, with_opts, NULL, 0, &h, &b);
    T_CHECK(strstr(b.body, "{\"include_usage\":true,\"continuous_usage_stats\":true}") != NULL);
    built_free(&b);
    const char *null_opts = "{\"model\":\"m\",\"stream\":true,\"stream_options\":null,"
                            "\"prompt\":\"x\"}";
    prepare(c, API_COMPLETIONS, null_opts, NULL, 0, &h, &b);
    T_CHECK(strstr(b.body, "\"stream_options\":{\"include_usage\":true}") != NULL);
    built_free(&b);
    const char *other = "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"x\":1},"
                        "\"prompt\":\"x\"}";
    prepare(c, API_COMPLETIONS, other, NULL, 0, &h, &b);
    T_CHECK(strstr(b.body, "{\"x\":1,\"include_usage\":true}") != NULL);
    built_free(&b);
    /* Not asked for: the body goes as it came. */
    h = (struct backend_hints){0};
    prepare(c, API_CHAT, chat, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, chat);
    built_free(&b);
    conf_destroy(&c);
}

static void test_openai(void)
{
    struct conf *c = mk_conf("openai", NULL, NULL);
    struct backend_hints h = {.enabled = true, .tenant = tenant_a};
    struct built b;
    prepare(c, API_CHAT, chat, NULL, 0, &h, &b);
    cJSON *j = parsed(&b);
    const char *key = cJSON_GetStringValue(cJSON_GetObjectItem(j, "prompt_cache_key"));
    T_CHECK(key != NULL && strncmp(key, "pc-", 3) == 0 && strlen(key) == 19);
    T_CHECK(cJSON_GetObjectItem(j, "cache_salt") == NULL); /* not an OpenAI field */
    cJSON_Delete(j);
    built_free(&b);
    /* The client's own key stays. */
    const char *own = "{\"model\":\"m\",\"prompt_cache_key\":\"mine\",\"messages\":[{\"role\":"
                      "\"user\",\"content\":\"hello\"}]}";
    prepare(c, API_CHAT, own, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, own);
    built_free(&b);
    /* prefix-hints no: nothing. */
    h.enabled = false;
    prepare(c, API_CHAT, chat, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, chat);
    built_free(&b);
    conf_destroy(&c);
}

static void test_vllm(void)
{
    struct conf *c = mk_conf("vllm", "upstream-dp-size", "4");
    struct backend_hints ha = {.enabled = true, .tenant = tenant_a};
    struct backend_hints hb = {.enabled = true, .tenant = tenant_b};
    struct built a, b;
    prepare(c, API_CHAT, chat, NULL, 0, &ha, &a);
    prepare(c, API_CHAT, chat, NULL, 0, &hb, &b);
    cJSON *ja = parsed(&a), *jb = parsed(&b);
    const char *sa = cJSON_GetStringValue(cJSON_GetObjectItem(ja, "cache_salt"));
    const char *sb = cJSON_GetStringValue(cJSON_GetObjectItem(jb, "cache_salt"));
    T_CHECK(sa != NULL && sb != NULL && strlen(sa) == 32);
    T_CHECK(strcmp(sa, sb) != 0); /* tenants never share KV blocks */
    T_CHECK(header(&a, "x-user-id") != NULL && strncmp(header(&a, "x-user-id"), "pc-", 3) == 0);
    const char *rank = header(&a, "X-data-parallel-rank");
    T_CHECK(rank != NULL && atoi(rank) >= 0 && atoi(rank) < 4);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    built_free(&a);
    built_free(&b);
    /* The client's salt and x-user-id are kept. */
    const char *own = "{\"model\":\"m\",\"cache_salt\":\"s\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"hi\"}]}";
    struct xfer_header hdrs[] = {{"X-User-Id", "alice"}};
    prepare(c, API_CHAT, own, hdrs, 1, &ha, &a);
    T_CHECK_STR(a.body, own);
    T_CHECK_STR(header(&a, "x-user-id"), "alice");
    built_free(&a);
    conf_destroy(&c);
    /* Tenants sharing KV state: no salt. */
    c = mk_conf("vllm", "prefix-share-tenants", "yes");
    prepare(c, API_CHAT, chat, NULL, 0, &ha, &a);
    T_CHECK(strstr(a.body, "cache_salt") == NULL);
    T_CHECK(header(&a, "X-data-parallel-rank") == NULL);
    built_free(&a);
    conf_destroy(&c);
}

static void test_sglang_and_extra_header(void)
{
    struct conf *c = mk_conf("sglang", "prefix-routing-header", "x-route");
    struct backend_hints h = {.enabled = true, .tenant = tenant_a, .routing_key = 0x1234};
    struct built b;
    prepare(c, API_CHAT, chat, NULL, 0, &h, &b);
    T_CHECK_STR(header(&b, "x-smg-routing-key"), "pc-0000000000001234");
    T_CHECK_STR(header(&b, "x-route"), "pc-0000000000001234");
    T_CHECK(header(&b, "x-user-id") == NULL);
    T_CHECK(strstr(b.body, "\"cache_salt\":\"") != NULL);
    built_free(&b);
    conf_destroy(&c);
}

/*
 * What is dropped under its own name is dropped spelled with '_' too: CGI and
 * WSGI gateways read "Transfer_Encoding" as Transfer-Encoding, so sent on
 * beside curl's own framing it could split the body differently upstream.
 * Other names with '_' go on.
 */
static void test_underscore_names(void)
{
    struct conf *c = mk_conf("openai", NULL, NULL);
    struct backend_hints h = {.enabled = false, .tenant = tenant_a};
    const struct xfer_header hdrs[] = {
        {"Transfer_Encoding", "chunked"}, {"content_length", "5"},
        {"Connection", "close"},          {"Proxy_Connection", "x"},
        {"X_Api_Key", "sk-other"},        {"api_key", "sk-other"},
        {"x_cache_mode", "off"},          {"Keep_Alive", "1"},
        {"X_Custom_Trace", "t-1"},        {"Authorization", "Bearer sk-mine"},
    };
    struct built b;
    prepare(c, API_CHAT, chat, hdrs, PC_ARRAY_LEN(hdrs), &h, &b);
    for (size_t i = 0; i < PC_ARRAY_LEN(hdrs) - 2; i++) {
        if (header(&b, hdrs[i].name) != NULL)
            fprintf(stderr, "forwarded: %s\n", hdrs[i].name);
        T_CHECK(header(&b, hdrs[i].name) == NULL); /* were forwarded */
    }
    T_CHECK_STR(header(&b, "X_Custom_Trace"), "t-1");
    T_CHECK_STR(header(&b, "Authorization"), "Bearer sk-mine");
    built_free(&b);
    conf_destroy(&c);
}

/* ---- anthropic -------------------------------------------------------------------- */

/* A Messages request: a long system prompt, two earlier turns, a new question. */
static char *messages_body(const char *system_json, const char *extra)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b,
                  "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":10,\"system\":%s,"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"first %06000d\"},"
                  "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]},"
                  "{\"role\":\"user\",\"content\":\"again\"}]%s}",
                  system_json, 0, extra);
    return pc_buf_cstr(&b);
}

static int count_marks(const char *s)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, "\"cache_control\"")) != NULL; p++)
        n++;
    return n;
}

static void test_anthropic(void)
{
    struct conf *c = mk_conf("anthropic", NULL, NULL);
    char *sys = pc_malloc(6000);
    snprintf(sys, 6000, "\"%05000d\"", 7);
    char *body = messages_body(sys, "");
    struct backend_hints h = {.enabled = true, .tenant = tenant_a, .cpt = 4.0};
    struct built b;
    /* Never seen: no breakpoint, no write premium. */
    prepare(c, API_MESSAGES, body, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, body);
    built_free(&b);
    /* Seen lately up to the end of the earlier turns: the deepest and the system. */
    h.fresh_links = 1000;
    prepare(c, API_MESSAGES, body, NULL, 0, &h, &b);
    T_CHECK_INT(count_marks(b.body), 2);
    cJSON *j = parsed(&b);
    cJSON *system = cJSON_GetObjectItem(j, "system");
    T_CHECK(cJSON_IsArray(system)); /* the string became one marked text block */
    cJSON *blk = cJSON_GetArrayItem(system, 0);
    T_CHECK(cJSON_GetObjectItem(blk, "cache_control") != NULL);
    T_CHECK_INT(strlen(cJSON_GetStringValue(cJSON_GetObjectItem(blk, "text"))), 5000);
    cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    cJSON *assistant =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "content"), 0);
    T_CHECK(cJSON_GetObjectItem(assistant, "cache_control") != NULL); /* the deepest turn */
    T_CHECK(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 2), "content")));
    cJSON_Delete(j);
    built_free(&b);
    /* Too short for the model's minimum: nothing. */
    const char *short_body =
        "{\"model\":\"claude-sonnet-4-5\",\"system\":\"tiny\",\"messages\":[{\"role\":"
        "\"user\",\"content\":\"short\"},{\"role\":\"assistant\",\"content\":\"ok\"},"
        "{\"role\":\"user\",\"content\":\"again\"}]}";
    prepare(c, API_MESSAGES, short_body, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, short_body);
    built_free(&b);
    free(body);
    free(sys);
    conf_destroy(&c);
}

static void test_anthropic_client_marks(void)
{
    struct conf *c = mk_conf("anthropic", NULL, NULL);
    /* Three marks of the client's own: room for one more, and theirs stay. */
    const char *sys = "[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{\"type\":"
                      "\"ephemeral\"}},{\"type\":\"text\",\"text\":\"b\",\"cache_control\":{"
                      "\"type\":\"ephemeral\",\"ttl\":\"1h\"}},{\"type\":\"text\",\"text\":"
                      "\"c\",\"cache_control\":{\"type\":\"ephemeral\"}}]";
    char *body = messages_body(sys, "");
    struct backend_hints h = {.enabled = true, .tenant = tenant_a, .cpt = 4.0, .fresh_links = 99};
    struct built b;
    prepare(c, API_MESSAGES, body, NULL, 0, &h, &b);
    T_CHECK_INT(count_marks(b.body), 4);
    T_CHECK(strstr(b.body, "\"ttl\":\"1h\"") != NULL);
    built_free(&b);
    free(body);
    /* Four already: none added. Automatic caching asked for: none either. */
    const char *four = "[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{\"type\":"
                       "\"ephemeral\"}},{\"type\":\"text\",\"text\":\"b\",\"cache_control\":{"
                       "\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"c\","
                       "\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":"
                       "\"d\",\"cache_control\":{\"type\":\"ephemeral\"}}]";
    body = messages_body(four, "");
    prepare(c, API_MESSAGES, body, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, body);
    built_free(&b);
    free(body);
    body = messages_body("\"s\"", ",\"cache_control\":{\"type\":\"ephemeral\"}");
    prepare(c, API_MESSAGES, body, NULL, 0, &h, &b);
    T_CHECK_STR(b.body, body);
    built_free(&b);
    free(body);
    conf_destroy(&c);
}

static void test_anthropic_min_tokens(void)
{
    T_CHECK_INT(backend_anthropic_min_tokens("claude-sonnet-4-5-20250929"), 1024);
    T_CHECK_INT(backend_anthropic_min_tokens("claude-3-5-haiku-20241022"), 2048);
    T_CHECK_INT(backend_anthropic_min_tokens("claude-haiku-4-5"), 4096);
    T_CHECK_INT(backend_anthropic_min_tokens("claude-opus-4-5-20251101"), 4096);
    T_CHECK_INT(backend_anthropic_min_tokens("claude-opus-4-1"), 1024);
    T_CHECK_INT(backend_anthropic_min_tokens(NULL), 1024);
}

/* The value conf stores for each name is the position of that backend in the family's table. */
static void test_family(void)
{
    static const struct {
        const char *name;
        bool stream_usage;
        int64_t prompt_cache_ms;
    } types[] = {
        {"openai", true, 0},
        {"anthropic", false, 5 * 60 * 1000},
        {"vllm", true, 0},
        {"sglang", true, 0},
    };
    char err[256];
    struct conf *c = conf_create();
    for (size_t i = 0; i < PC_ARRAY_LEN(types); i++) {
        T_CHECK_INT(conf_set(c, "upstream-type", types[i].name, err, sizeof err), 0);
        const struct backend_ops *ops = backend_for(c->upstream_type);
        T_CHECK_STR(ops->name, types[i].name);
        T_CHECK(ops->stream_usage == types[i].stream_usage);
        T_CHECK(ops->prompt_cache_ms == types[i].prompt_cache_ms);
        T_CHECK(ops->credential != NULL);
    }
    T_CHECK_INT(conf_set(c, "upstream-type", "bogus", err, sizeof err), -1);
    T_CHECK_STR(err, "\"bogus\" is not one of openai, anthropic, vllm or sglang");
    T_CHECK_STR(backend_for(-1)->name, "openai");
    T_CHECK_STR(backend_for((int)PC_ARRAY_LEN(types))->name, "openai");
    conf_destroy(&c);
}

int main(void)
{
    T_RUN(test_family);
    T_RUN(test_include_usage);
    T_RUN(test_openai);
    T_RUN(test_vllm);
    T_RUN(test_sglang_and_extra_header);
    T_RUN(test_underscore_names);
    T_RUN(test_anthropic);
    T_RUN(test_anthropic_client_marks);
    T_RUN(test_anthropic_min_tokens);
    T_DONE();
}
