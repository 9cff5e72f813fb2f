/*
 * test_chain.c - prefix chains: a continued conversation shares its
 * predecessor's links, spelling (member order, white space, escapes) does
 * not matter, segment order and boundaries do, pieces end on UTF-8
 * boundaries, the root follows tenant, endpoint and model, and the cut at
 * CHAIN_MAX_LINKS.
 */
#include "t.h"

#include "pc_chain.h"
#include "pc_util.h"

static const unsigned char tenant_a[PC_SHA256_LEN] = {1};
static const unsigned char tenant_b[PC_SHA256_LEN] = {2};

static void build(enum api_endpoint ep, const char *json, const unsigned char *tenant,
                  struct chain *c)
{
    cJSON *body = cJSON_Parse(json);
    T_CHECK(body != NULL);
    struct chain_input in = {ep, body, tenant};
    chain_build(&in, c);
    cJSON_Delete(body);
}

/* "x" repeated n times, as a JSON-safe C string (caller frees). */
static char *repeat(const char *unit, size_t n)
{
    struct pc_buf b = PC_BUF_INIT;
    for (size_t i = 0; i < n; i++)
        pc_buf_append_str(&b, unit);
    return pc_buf_cstr(&b);
}

static void test_conversation_prefix(void)
{
    char *big = repeat("abcd", 700); /* 2800 bytes: three pieces */
    struct pc_buf t1 = PC_BUF_INIT, t2 = PC_BUF_INIT;
    pc_buf_printf(&t1,
                  "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
                  "{\"role\":\"user\",\"content\":\"%s\"}]}",
                  big);
    pc_buf_printf(&t2,
                  "{\"messages\":[{\"content\":\"be brief\",\"role\":\"system\"},"
                  "{\"role\":\"user\",\"content\":\"%s\"},{\"role\":\"assistant\",\"content\":"
                  "\"ok\"},{\"role\":\"user\",\"content\":\"more\"}],  \"model\" : \"m\", "
                  "\"temperature\":0.5}",
                  big);
    struct chain a, b;
    build(API_CHAT, pc_buf_cstr(&t1), tenant_a, &a);
    build(API_CHAT, pc_buf_cstr(&t2), tenant_a, &b);
    T_CHECK_INT(a.n, 4); /* system, then the user turn in 3 pieces */
    T_CHECK_INT(a.nseg, 2);
    T_CHECK_INT(a.stable, 1);
    T_CHECK_INT(a.seg[0].kind, CHAIN_SEG_SYSTEM);
    T_CHECK_INT(a.seg[1].kind, CHAIN_SEG_MESSAGE);
    T_CHECK_INT(b.n, 6);
    T_CHECK(a.root == b.root); /* sampling parameters are not part of the prompt */
    for (size_t i = 0; i < a.n; i++)
        T_CHECK(a.h[i] == b.h[i]);
    T_CHECK(a.end[a.n - 1] == b.end[a.n - 1]);
    T_CHECK(chain_prefix_key(&a) == a.h[1]);
    T_CHECK(chain_prefix_key(&a) == chain_prefix_key(&b));
    chain_free(&a);
    chain_free(&b);
    pc_buf_free(&t1);
    pc_buf_free(&t2);
    free(big);
}

static void test_order_and_boundaries(void)
{
    struct chain a, b, c, d;
    build(API_CHAT,
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
          "{\"role\":\"assistant\",\"content\":\"b\"}]}",
          tenant_a, &a);
    build(API_CHAT,
          "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"b\"},"
          "{\"role\":\"user\",\"content\":\"a\"}]}",
          tenant_a, &b);
    T_CHECK(a.h[0] != b.h[0]);
    T_CHECK(a.h[1] != b.h[1]);
    /* "ab" in one turn is not "a" then "b". */
    build(API_CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"ab\"}]}",
          tenant_a, &c);
    build(API_CHAT,
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
          "{\"role\":\"user\",\"content\":\"b\"}]}",
          tenant_a, &d);
    T_CHECK(c.h[0] != d.h[0] && c.h[0] != d.h[1]);
    /* Escapes are decoded: "\u0061" is "a". */
    struct chain e;
    build(API_CHAT,
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\\u0061\"},"
          "{\"role\":\"assistant\",\"content\":\"b\"}]}",
          tenant_a, &e);
    T_CHECK(e.h[0] == a.h[0] && e.h[1] == a.h[1]);
    chain_free(&a);
    chain_free(&b);
    chain_free(&c);
    chain_free(&d);
    chain_free(&e);
}

static void test_utf8_pieces(void)
{
    /* 1000 euro signs (3 bytes each): no piece may end inside one. */
    char *euros = repeat("\xe2\x82\xac", 1000);
    struct pc_buf j = PC_BUF_INIT;
    pc_buf_printf(&j, "{\"model\":\"m\",\"prompt\":\"%s\"}", euros);
    struct chain c;
    build(API_COMPLETIONS, pc_buf_cstr(&j), NULL, &c);
    T_CHECK_INT(c.n, 3);
    T_CHECK_INT(c.end[c.n - 1], 3000);
    for (size_t i = 0; i < c.n; i++) {
        size_t piece = c.end[i] - (i ? c.end[i - 1] : 0);
        T_CHECK(piece % 3 == 0);
        T_CHECK(piece <= CHAIN_CHUNK_BYTES);
    }
    T_CHECK_INT(c.seg[0].kind, CHAIN_SEG_PROMPT);
    chain_free(&c);
    pc_buf_free(&j);
    free(euros);
    /* Not UTF-8 (a run of continuation bytes): pieces stay whole, not one byte each. */
    char *bad = repeat("\x80", 4000);
    pc_buf_reset(&j);
    pc_buf_printf(&j, "{\"model\":\"m\",\"prompt\":\"a%s\"}", bad);
    build(API_COMPLETIONS, pc_buf_cstr(&j), NULL, &c);
    T_CHECK_INT(c.n, 4);
    T_CHECK(!c.truncated);
    T_CHECK_INT(c.end[c.n - 1], 4001);
    chain_free(&c);
    pc_buf_free(&j);
    free(bad);
}

static void test_completions_growth(void)
{
    /* A prompt that extends another shares all its whole pieces. */
    char *p1 = repeat("0123456789", 250), *p2 = repeat("0123456789", 400);
    struct pc_buf j1 = PC_BUF_INIT, j2 = PC_BUF_INIT;
    pc_buf_printf(&j1, "{\"model\":\"m\",\"prompt\":\"%s\"}", p1);
    pc_buf_printf(&j2, "{\"model\":\"m\",\"prompt\":\"%s\"}", p2);
    struct chain a, b;
    build(API_COMPLETIONS, pc_buf_cstr(&j1), tenant_a, &a);
    build(API_COMPLETIONS, pc_buf_cstr(&j2), tenant_a, &b);
    T_CHECK_INT(a.n, 3); /* 1024 + 1024 + 452 */
    T_CHECK_INT(b.n, 4);
    T_CHECK(a.h[0] == b.h[0] && a.h[1] == b.h[1]);
    T_CHECK(a.h[2] != b.h[2]); /* a's last piece is partial */
    chain_free(&a);
    chain_free(&b);
    pc_buf_free(&j1);
    pc_buf_free(&j2);
    free(p1);
    free(p2);
}

static void test_roots(void)
{
    const char *j = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct chain a, b, shared1, shared2, other_model, other_ep;
    build(API_CHAT, j, tenant_a, &a);
    build(API_CHAT, j, tenant_b, &b);
    build(API_CHAT, j, NULL, &shared1);
    build(API_CHAT, j, NULL, &shared2);
    build(API_CHAT, "{\"model\":\"n\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
          tenant_a, &other_model);
    build(API_MESSAGES, j, tenant_a, &other_ep);
    T_CHECK(a.root != b.root && a.h[0] != b.h[0]);
    T_CHECK(shared1.h[0] == shared2.h[0] && shared1.h[0] != a.h[0]);
    T_CHECK(other_model.h[0] != a.h[0]);
    T_CHECK(other_ep.h[0] != a.h[0]);
    chain_free(&a);
    chain_free(&b);
    chain_free(&shared1);
    chain_free(&shared2);
    chain_free(&other_model);
    chain_free(&other_ep);
}

static void test_anthropic_segments(void)
{
    struct chain c;
    build(API_MESSAGES,
          "{\"model\":\"claude\",\"tools\":[{\"name\":\"t\",\"input_schema\":{}}],"
          "\"system\":[{\"type\":\"text\",\"text\":\"sys\",\"cache_control\":{\"type\":"
          "\"ephemeral\"}}],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
          "\"text\":\"q\"}]},{\"role\":\"assistant\",\"content\":\"a\"},"
          "{\"role\":\"user\",\"content\":\"q2\"}]}",
          tenant_a, &c);
    T_CHECK_INT(c.nseg, 5);
    T_CHECK_INT(c.seg[0].kind, CHAIN_SEG_TOOLS);
    T_CHECK_INT(c.seg[1].kind, CHAIN_SEG_SYSTEM);
    T_CHECK_INT(c.seg[2].kind, CHAIN_SEG_MESSAGE);
    T_CHECK_INT(c.seg[2].item, 0);
    T_CHECK_INT(c.seg[4].item, 2);
    T_CHECK_INT(c.stable, 2);
    /* A client's cache_control on a text block does not change the prompt. */
    struct chain d;
    build(API_MESSAGES,
          "{\"model\":\"claude\",\"tools\":[{\"name\":\"t\",\"input_schema\":{}}],"
          "\"system\":\"sys\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
          tenant_a, &d);
    T_CHECK(d.h[0] == c.h[0] && d.h[1] == c.h[1] && d.h[2] == c.h[2]);
    chain_free(&c);
    chain_free(&d);
}

static void test_none_and_cut(void)
{
    struct chain c;
    build(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"x\"}", tenant_a, &c);
    T_CHECK_INT(c.n, 0);
    T_CHECK(chain_prefix_key(&c) == 0);
    chain_free(&c);
    /* More than CHAIN_MAX_LINKS pieces: the rest is not indexed. */
    char *huge = repeat("z", (CHAIN_MAX_LINKS + 10) * CHAIN_CHUNK_BYTES);
    struct pc_buf j = PC_BUF_INIT;
    pc_buf_printf(&j, "{\"model\":\"m\",\"prompt\":\"%s\"}", huge);
    build(API_COMPLETIONS, pc_buf_cstr(&j), tenant_a, &c);
    T_CHECK_INT(c.n, CHAIN_MAX_LINKS);
    T_CHECK(c.truncated);
    struct chain copy;
    chain_copy(&copy, &c);
    T_CHECK(copy.n == c.n && copy.h[c.n - 1] == c.h[c.n - 1] && copy.h != c.h);
    chain_free(&copy);
    chain_free(&c);
    pc_buf_free(&j);
    free(huge);
}

int main(void)
{
    T_RUN(test_conversation_prefix);
    T_RUN(test_order_and_boundaries);
    T_RUN(test_utf8_pieces);
    T_RUN(test_completions_growth);
    T_RUN(test_roots);
    T_RUN(test_anthropic_segments);
    T_RUN(test_none_and_cut);
    T_DONE();
}
