/*
 * test_entry.c - cached entry encoding: round trip, and every malformed value
 * rejected rather than trusted.
 */
#include "pc_entry.h"
#include "pc_migrate.h"
#include "pc_pricing.h"
#include "t.h"

#include <ctype.h>

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
/* Cache writes travel in their own section; an entry without it decodes with none. */
static void test_cache_write_section(void)
{
    struct entry e = sample(), d;
    e.usage.cache_write = 17;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(b.data[3], 2); /* sections */
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.usage.cache_write, 17);
    T_CHECK_INT(d.usage.prompt, 120);
    /* Without cache writes: format 1, byte for byte what older versions wrote. */
    struct pc_buf plain = PC_BUF_INIT;
    e.usage.cache_write = 0;
    entry_encode(&e, &plain);
    T_CHECK_INT(plain.data[3], 1);
    T_CHECK_INT(plain.len + 1 + 1 + 4 + 8, b.len); /* count, tag, length, i64 */
    T_CHECK_INT(entry_decode(plain.data, plain.len, &d), 0);
    T_CHECK_INT(d.usage.cache_write, 0);
    T_CHECK(d.body_len == e.body_len && memcmp(d.body, e.body, e.body_len) == 0);
    /* A usage section of the wrong length is refused. */
    b.data[b.len - 8 - 4] = 7;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    pc_buf_free(&b);
    pc_buf_free(&plain);
}

/* The writes kept for an hour: a section of their own, after the others; never more than the
 * writes. */
static void test_cache_write_1h_section(void)
{
    struct entry e = sample(), d;
    e.usage.cache_write = 17;
    e.usage.cache_write_1h = 9;
    struct pc_buf b = PC_BUF_INIT, no1h = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.usage.cache_write, 17);
    T_CHECK_INT(d.usage.cache_write_1h, 9);
    e.usage.cache_write_1h = 0;
    entry_encode(&e, &no1h);
    T_CHECK_INT(no1h.len + 1 + 4 + 8, b.len); /* tag, length, i64 */
    T_CHECK_INT(entry_decode(no1h.data, no1h.len, &d), 0);
    T_CHECK_INT(d.usage.cache_write_1h, 0);
    /* More hour-long writes than writes: refused. */
    b.data[b.len - 8] = 18;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    pc_buf_free(&b);
    pc_buf_free(&no1h);
}

/* Audio tokens in and out: their own section; never more than the prompt or the completion. */
static void test_audio_section(void)
{
    struct entry e = sample(), d;
    e.usage.audio_prompt = 100;
    e.usage.audio_completion = 20;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.usage.audio_prompt, 100);
    T_CHECK_INT(d.usage.audio_completion, 20);
    T_CHECK_INT(d.usage.prompt, 120);
    b.data[b.len - 8] = 34; /* more audio out than the 33 completion tokens */
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    pc_buf_free(&b);
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
    /* Wrong magic / format (2 needs its section count). */
    for (int f = 0; f < 256; f++) {
        b.data[3] = (char)f;
        T_CHECK_INT(entry_decode(b.data, b.len, &d), f == 1 ? 0 : -1);
    }
    b.data[3] = 1;
    b.data[0] = 'X';
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    b.data[0] = 'P';
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

/*
 * Decodes (0) or not (-1) after e is encoded; a decoded entry's usage goes
 * through what a hit does with it (pricing_tokens_of: prompt minus cached
 * minus written), where a forged count overflowed (UBSan) before the ranges.
 */
static int decode_use(const struct entry *e)
{
    struct pc_buf b = PC_BUF_INIT;
    struct entry d;
    entry_encode(e, &b);
    int rc = entry_decode(b.data, b.len, &d);
    if (rc == 0) {
        struct pricing_tokens t;
        pricing_tokens_of(&d.usage, &t);
        T_CHECK(t.input >= 0 && t.cache_read >= 0 && t.output >= 0);
    }
    pc_buf_free(&b);
    return rc;
}

/* Issue 20.5: every field read back from Redis is range-checked, not only its length. */
static void test_forged_fields(void)
{
    static const int64_t bad_counts[] = {-1, INT64_MIN, INT64_MAX, ENTRY_TOKENS_MAX + 1};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad_counts); i++) {
        for (int field = 0; field < 4; field++) {
            if (field == 3 && bad_counts[i] < 0)
                continue; /* the encoder writes cache writes only when positive */
            struct entry e = sample();
            int64_t *f[] = {&e.usage.prompt, &e.usage.completion, &e.usage.cached,
                            &e.usage.cache_write};
            *f[field] = bad_counts[i];
            if (field == 1) /* the other counts in range: only this one is forged */
                e.usage.prompt = 5;
            T_CHECK_INT(decode_use(&e), -1);
        }
    }
    /* The largest counts are accepted, and their arithmetic stays in range. */
    struct entry big = sample();
    big.usage = (struct api_usage){.present = true,
                                   .prompt = ENTRY_TOKENS_MAX,
                                   .completion = ENTRY_TOKENS_MAX,
                                   .cached = ENTRY_TOKENS_MAX,
                                   .cache_write = ENTRY_TOKENS_MAX,
                                   .cache_write_1h = ENTRY_TOKENS_MAX,
                                   .audio_prompt = ENTRY_TOKENS_MAX,
                                   .audio_completion = ENTRY_TOKENS_MAX};
    T_CHECK_INT(decode_use(&big), 0);
    /* The usage flag is 0 or 1. */
    struct entry e = sample();
    struct pc_buf b = PC_BUF_INIT;
    struct entry d;
    entry_encode(&e, &b);
    T_CHECK_INT(b.data[20], 1);
    b.data[20] = 2;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    b.data[20] = 0;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    pc_buf_free(&b);
    /* A content type that would split the reply's header (it is replayed as one). */
    static const char *const bad_types[] = {"text/html\r\nSet-Cookie: a=b", "a\nb", "a\0b",
                                            "a\x7f"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad_types); i++) {
        e = sample();
        e.content_type = bad_types[i];
        e.content_type_len = strlen(bad_types[i]) + (i == 2 ? 2 : 0);
        T_CHECK_INT(decode_use(&e), -1);
    }
    e = sample();
    e.content_type = "application/json;\tcharset=utf-8";
    e.content_type_len = strlen(e.content_type);
    T_CHECK_INT(decode_use(&e), 0);
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

#define HDR(n, v)                          \
    {                                      \
        n, sizeof(n) - 1, v, sizeof(v) - 1 \
    }

static struct entry with_headers(void)
{
    struct entry e = sample();
    e.headers[0] = (struct entry_header)HDR("x-request-id", "req_123");
    e.headers[1] = (struct entry_header)HDR("openai-processing-ms", "842");
    e.headers[2] = (struct entry_header)HDR("bad name", "dropped");
    e.headers[3] = (struct entry_header)HDR("x-split", "a\r\nInjected: yes");
    e.headers[4] = (struct entry_header)HDR("openai-model", "");
    e.nheaders = 5;
    return e;
}

static void test_headers_round_trip(void)
{
    struct entry e = with_headers(), d;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(b.data[3], 2);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, 3); /* the invalid two are not stored */
    T_CHECK(d.headers[0].name_len == 12 && memcmp(d.headers[0].name, "x-request-id", 12) == 0);
    T_CHECK(d.headers[0].value_len == 7 && memcmp(d.headers[0].value, "req_123", 7) == 0);
    T_CHECK(d.headers[1].value_len == 3 && memcmp(d.headers[1].value, "842", 3) == 0);
    T_CHECK(d.headers[2].name_len == 12 && d.headers[2].value_len == 0);
    T_CHECK(d.body_len == e.body_len && memcmp(d.body, e.body, e.body_len) == 0);
    /* Every truncation is refused; so is a byte more. */
    for (size_t n = 0; n < b.len; n++)
        T_CHECK_INT(entry_decode(b.data, n, &d), -1);
    pc_buf_append(&b, "x", 1);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    pc_buf_free(&b);
}

/* An entry without headers is format 1, as before sections: old binaries read it. */
static void test_format_1_compatible(void)
{
    struct entry e = sample(), d;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(b.data[3], 1);
    T_CHECK_INT(b.len, 4 + 4 + 12 + 25 + 2 + e.content_type_len + 4 + e.body_len);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, 0);
    /* The same entry with headers, cut after the body and marked 1: an old entry. */
    struct entry h = with_headers();
    struct pc_buf b2 = PC_BUF_INIT;
    entry_encode(&h, &b2);
    b2.data[3] = 1;
    T_CHECK_INT(entry_decode(b2.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, 0);
    T_CHECK(memcmp(b.data, b2.data, b.len) == 0);
    pc_buf_free(&b);
    pc_buf_free(&b2);
}

/* Append a section (tag, bytes) to an encoded format 2 entry, counting it. */
static void add_section(struct pc_buf *b, size_t count_at, int tag, const char *bytes, size_t n)
{
    char head[5] = {(char)tag, (char)(n & 0xff), (char)((n >> 8) & 0xff), 0, 0};
    b->data[count_at]++;
    pc_buf_append(b, head, 5);
    pc_buf_append(b, bytes, n);
}

/* plain (no headers) as format 2 with no section yet; returns where the count is. */
static size_t encode_plain_2(const struct entry *plain, struct pc_buf *b)
{
    pc_buf_reset(b);
    entry_encode(plain, b);
    b->data[3] = 2;
    pc_buf_append(b, "\0", 1);
    return b->len - 1;
}

static void test_sections(void)
{
    struct entry e = with_headers(), d, plain = sample();
    struct pc_buf b = PC_BUF_INIT, h = PC_BUF_INIT;
    entry_encode(&e, &h);
    /* A section of a newer version is skipped, and the rest still read. */
    size_t at = encode_plain_2(&plain, &b);
    pc_buf_append(&b, h.data + at + 1, h.len - at - 1); /* the headers section of e */
    b.data[at] = 1;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, 3);
    add_section(&b, at, 200, "future", 6);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, 3);
    /* Tags in increasing order, each once. */
    add_section(&b, at, 7, "", 0);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    at = encode_plain_2(&plain, &b);
    add_section(&b, at, ENTRY_SEC_HEADERS, "\0", 1);
    add_section(&b, at, ENTRY_SEC_HEADERS, "\0", 1);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    /* No section at all, or fewer than counted. */
    at = encode_plain_2(&plain, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    add_section(&b, at, 9, "", 0);
    b.data[at] = 2;
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    /* A known section must parse to its exact length, with valid headers only. */
    static const struct {
        const char *bytes;
        size_t n;
    } bad[] = {
        {"", 0},              /* no count */
        {"\1", 1},            /* a header missing */
        {"\1\1a\0\0x", 7},    /* a byte too many */
        {"\1\0\0\0", 4},      /* an empty name */
        {"\1\1a\2\0\r\n", 7}, /* CR LF in a value */
        {"\1\1:\0\0", 5},     /* not a token */
        {"\21", 1},           /* more than ENTRY_MAX_HEADERS */
        {"\1\1a\1\2x", 6},    /* a value longer than the section */
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        at = encode_plain_2(&plain, &b);
        add_section(&b, at, ENTRY_SEC_HEADERS, bad[i].bytes, bad[i].n);
        if (entry_decode(b.data, b.len, &d) != -1)
            fprintf(stderr, "  bad headers section %zu accepted\n", i);
        T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    }
    at = encode_plain_2(&plain, &b);
    add_section(&b, at, ENTRY_SEC_HEADERS, "\1\1a\1\0x", 6);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.nheaders == 1 && d.headers[0].value_len == 1 && d.headers[0].value[0] == 'x');
    /* Anything after the counted sections. */
    pc_buf_append(&b, "\x09\1\0", 3);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    pc_buf_free(&b);
    pc_buf_free(&h);
}

/* Namespace and model ride in their own section; an entry without it has neither. */
static void test_meta_section(void)
{
    struct entry e = with_headers(), d, plain = sample();
    e.usage.cache_write = 5;
    e.ns = "team-a";
    e.ns_len = 6;
    e.model = "claude-sonnet-4-5";
    e.model_len = 17;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.ns_len == 6 && memcmp(d.ns, "team-a", 6) == 0);
    T_CHECK(d.model_len == 17 && memcmp(d.model, "claude-sonnet-4-5", 17) == 0);
    T_CHECK_INT(d.nheaders, 3);
    T_CHECK_INT(d.usage.cache_write, 5);
    /* a model alone; a name too long to keep is left out, not cut */
    plain.model = "m";
    plain.model_len = 1;
    char longer[ENTRY_META_MAX + 2];
    memset(longer, 'n', sizeof longer);
    plain.ns = longer;
    plain.ns_len = sizeof longer;
    pc_buf_reset(&b);
    entry_encode(&plain, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.ns_len == 0 && d.model_len == 1 && d.model[0] == 'm');
    /* without: older entries */
    plain = sample();
    pc_buf_reset(&b);
    entry_encode(&plain, &b);
    T_CHECK_INT(b.data[3], 1);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.ns_len == 0 && d.model_len == 0);
    /* a meta section must parse to its exact length */
    static const struct {
        const char *bytes;
        size_t n;
    } bad[] = {
        {"", 0}, {"\0", 1}, {"\1", 1}, {"\0\0x", 3}, {"\0\5ab", 4}, {"\3ab\0", 4},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        size_t at = encode_plain_2(&plain, &b);
        add_section(&b, at, ENTRY_SEC_META, bad[i].bytes, bad[i].n);
        T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    }
    size_t at = encode_plain_2(&plain, &b);
    add_section(&b, at, ENTRY_SEC_META, "\2ns\0", 4);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.ns_len == 2 && d.model_len == 0);
    pc_buf_free(&b);
}

/*
 * The semantic partition of the request that stored the entry: its own section, after the
 * others; without it (older entries, requests never matched by meaning) it is NULL, and a
 * section of another length is refused.
 */
static void test_partition_section(void)
{
    struct entry e = with_headers(), d, plain = sample();
    unsigned char part[PC_SHA256_LEN];
    for (size_t i = 0; i < sizeof part; i++)
        part[i] = (unsigned char)(0xa0 + i);
    e.model = "gpt-4o";
    e.model_len = 6;
    e.usage.audio_prompt = 7;
    e.partition = part;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.partition != NULL && memcmp(d.partition, part, sizeof part) == 0);
    T_CHECK(d.model_len == 6 && d.nheaders == 3 && d.usage.audio_prompt == 7);
    /* the last section: tag 6, 32 bytes */
    T_CHECK_INT((unsigned char)b.data[b.len - 37], ENTRY_SEC_PARTITION);
    T_CHECK(memcmp(b.data + b.len - 32, part, sizeof part) == 0);
    /* alone, it makes a format 2 entry */
    plain.partition = part;
    pc_buf_reset(&b);
    entry_encode(&plain, &b);
    T_CHECK_INT(b.data[3], 2);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.partition != NULL && memcmp(d.partition, part, sizeof part) == 0);
    /* an older entry has none */
    plain = sample();
    pc_buf_reset(&b);
    entry_encode(&plain, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.partition == NULL);
    /* exactly 32 bytes */
    char bytes[PC_SHA256_LEN + 1];
    memset(bytes, 'p', sizeof bytes);
    size_t lens[] = {0, 1, PC_SHA256_LEN - 1, PC_SHA256_LEN + 1};
    for (size_t i = 0; i < PC_ARRAY_LEN(lens); i++) {
        size_t at = encode_plain_2(&plain, &b);
        add_section(&b, at, ENTRY_SEC_PARTITION, bytes, lens[i]);
        T_CHECK_INT(entry_decode(b.data, b.len, &d), -1);
    }
    size_t at = encode_plain_2(&plain, &b);
    add_section(&b, at, ENTRY_SEC_PARTITION, bytes, PC_SHA256_LEN);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.partition != NULL && d.partition[0] == 'p');
    /* a reader that knows no tag 6 (an older binary) skips it: a newer tag after it is
     * skipped the same way here */
    add_section(&b, at, 200, "future", 6);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK(d.partition != NULL);
    pc_buf_free(&b);
}

/* The id clients see: tenant then key, hex, and back. */
static void test_ids(void)
{
    unsigned char key[PC_SHA256_LEN], back[PC_SHA256_LEN];
    for (int i = 0; i < PC_SHA256_LEN; i++)
        key[i] = (unsigned char)(i * 7 + 3);
    char id[ENTRY_ID_LEN + 1], tenant[TENANT_ID_LEN + 1];
    entry_id("0123456789abcdef", key, id);
    T_CHECK_INT(strlen(id), ENTRY_ID_LEN);
    T_CHECK(strncmp(id, "0123456789abcdef030a11", 22) == 0);
    T_CHECK_INT(entry_id_parse(id, strlen(id), tenant, back), 0);
    T_CHECK_STR(tenant, "0123456789abcdef");
    T_CHECK(memcmp(key, back, PC_SHA256_LEN) == 0);
    char upper[ENTRY_ID_LEN + 1];
    for (size_t i = 0; i <= ENTRY_ID_LEN; i++)
        upper[i] = (char)toupper((unsigned char)id[i]);
    T_CHECK_INT(entry_id_parse(upper, ENTRY_ID_LEN, tenant, back), 0);
    T_CHECK_STR(tenant, "0123456789abcdef");
    T_CHECK_INT(entry_id_parse(id, ENTRY_ID_LEN - 1, tenant, back), -1);
    id[40] = 'g';
    T_CHECK_INT(entry_id_parse(id, ENTRY_ID_LEN, tenant, back), -1);
    T_CHECK_INT(entry_id_parse(NULL, 0, tenant, back), -1);
}

static void test_header_limits(void)
{
    struct entry e = sample(), d;
    char name[ENTRY_HEADER_NAME_MAX + 2], value[ENTRY_HEADER_VALUE_MAX + 2];
    memset(name, 'n', sizeof(name));
    memset(value, 'v', sizeof(value));
    for (size_t i = 0; i < ENTRY_MAX_HEADERS; i++)
        e.headers[i] = (struct entry_header){name, 1 + i % 3, value, i};
    e.nheaders = ENTRY_MAX_HEADERS + 4; /* more than there is room for: the first ones count */
    e.headers[0].name_len = ENTRY_HEADER_NAME_MAX + 1;
    e.headers[1].value_len = ENTRY_HEADER_VALUE_MAX + 1;
    e.headers[2].name_len = ENTRY_HEADER_NAME_MAX;
    e.headers[3].value_len = ENTRY_HEADER_VALUE_MAX;
    struct pc_buf b = PC_BUF_INIT;
    entry_encode(&e, &b);
    T_CHECK_INT(entry_decode(b.data, b.len, &d), 0);
    T_CHECK_INT(d.nheaders, ENTRY_MAX_HEADERS - 2);
    T_CHECK_INT(d.headers[0].name_len, ENTRY_HEADER_NAME_MAX);
    T_CHECK_INT(d.headers[1].value_len, ENTRY_HEADER_VALUE_MAX);
    T_CHECK(entry_header_valid("a", 1, "b\tc", 3));
    T_CHECK(!entry_header_valid("a", 1, "b\x7f", 2));
    T_CHECK(!entry_header_valid("a", 1, "b\0c", 3));
    T_CHECK(!entry_header_valid(NULL, 0, "", 0));
    pc_buf_free(&b);
}

int main(void)
{
    T_RUN(test_round_trip);
    T_RUN(test_rejects_malformed);
    T_RUN(test_forged_fields);
    T_RUN(test_cache_write_section);
    T_RUN(test_cache_write_1h_section);
    T_RUN(test_audio_section);
    T_RUN(test_keys);
    T_RUN(test_headers_round_trip);
    T_RUN(test_format_1_compatible);
    T_RUN(test_sections);
    T_RUN(test_header_limits);
    T_RUN(test_meta_section);
    T_RUN(test_partition_section);
    T_RUN(test_ids);
    T_DONE();
}
