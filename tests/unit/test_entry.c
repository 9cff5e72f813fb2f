/*
 * test_entry.c - cached entry encoding: round trip, and every malformed value
 * rejected rather than trusted.
 */
#include "pc_entry.h"
#include "pc_migrate.h"
#include "t.h"

static struct entry sample(void)
{
    struct entry e = {
        .kind = ENTRY_SSE,
        .endpoint = API_MESSAGES,
        .status = 200,
        .created_ms = 1764687181123,
        .latency_ms = 842,
        .usage = {true, 120, 33, 64},
        .content_type = "text/event-stream",
        .content_type_len = 17,
        .body = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n\0tail",
        .body_len = 56,
    };
    return e;
}

static void test_round_trip(void)
{
    struct entry e = sample(), d;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.kind, ENTRY_SSE);
    T_CHECK_INT(d.endpoint, API_MESSAGES);
    T_CHECK_INT(d.status, 200);
    T_CHECK_INT(d.created_ms, e.created_ms);
    T_CHECK_INT(d.latency_ms, 842);
    T_CHECK(d.usage.present);
    T_CHECK_INT(d.usage.prompt, 120);
    T_CHECK_INT(d.usage.completion, 33);
    T_CHECK_INT(d.usage.cached, 64);
    T_CHECK(d.content_type_len == 17 && memcmp(d.content_type, "text/event-stream", 17) == 0);
    T_CHECK(d.body_len == e.body_len && memcmp(d.body, e.body, e.body_len) == 0);
    pc_buf_free(&b);
}

/*
 * Format 2 keeps the cache writes; a format-1 entry (written before them)
 * still decodes, its cache writes 0.
 */
static void test_old_format(void)
{
    struct entry e = sample(), d;
    e.usage.cache_write = 17;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.usage.cache_write, 17);
    /* The same entry as format 1 wrote it: no cache_write field. */
    struct pc_buf old = PC_BUF_INIT;
    pc_buf_append(&old, b.data, 45);
    old.data[3] = 1;
    pc_buf_append(&old, b.data + 53, b.len - 53);
    T_CHECK_INT(entry_decode(old.data, old.len, &d), 0);
    T_CHECK_INT(d.usage.prompt, 120);
    T_CHECK_INT(d.usage.cached, 64);
    T_CHECK_INT(d.usage.cache_write, 0);
    T_CHECK(d.body_len == e.body_len && memcmp(d.body, e.body, e.body_len) == 0);
    pc_buf_free(&b);
    pc_buf_free(&old);
}

static void test_rejects_malformed(void)
{
    struct entry e = sample(), d;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    /* Every truncation, and trailing garbage. */
    for (size_t n = 0; n < b.len; n++)
        T_CHECK_INT(entry_decode(b.data, n, &d), -1);
    pc_buf_append(&b, "x", 1);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    b.len--;
    /* Wrong magic / format. */
    b.data[3] = 3;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    b.data[3] = 2;
    /* Not a 2xx: never served. */
    struct entry bad = sample();
    bad.status = 500;
    struct pc_buf b2 = PC_BUF_INIT;
    entry_encode(&bad, &b2);
    T_CHECK_INT(entry_decode(b2.data, b2.len, &d), -1);
    /* Unknown endpoint. */
    pc_buf_reset(&b2);
    bad = sample();
    bad.endpoint = API_NONE;
    entry_encode(&bad, &b2);
    T_CHECK_INT(entry_decode(b2.data, b2.len, &d), -1);
    T_CHECK_INT(entry_decode(NULL, 0, &d), -1);
    pc_buf_free(&b);
    pc_buf_free(&b2);
}

static void test_keys(void)
{
    unsigned char key[PC_SHA256_LEN];
    for (int i = 0; i < PC_SHA256_LEN; i++)
        key[i] = (unsigned char)i;
    char out[ENTRY_KEY_MAX];
    size_t n = entry_key("0123456789abcdefEXTRA", key, out);
    T_CHECK_STR(out,
                PC_KEY_PREFIX "e:{0123456789abcdef:"
                              "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f}");
    T_CHECK_INT(n, strlen(out));
    entry_pattern(NULL, out);
    T_CHECK_STR(out, PC_KEY_PREFIX "e:*");
    entry_pattern("0123456789abcdef", out);
    T_CHECK_STR(out, PC_KEY_PREFIX "e:{0123456789abcdef:*");
}

int main(void)
{
    T_RUN(test_round_trip);
    T_RUN(test_rejects_malformed);
    T_RUN(test_old_format);
    T_RUN(test_keys);
    T_DONE();
}
