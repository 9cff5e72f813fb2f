/*
 * test_util.c - the decimal and hex formatting and the bounded copy used
 * on hot paths in place of printf: every digit, both ends of the ranges,
 * signs, every cut.
 */
#include "t.h"

#include <inttypes.h>
#include <stdint.h>

#include "pc_util.h"

/* pc_u64_dec and pc_u64_hex against printf. */
static void test_u64_text(void)
{
    const uint64_t v[] = {
        0, 1, 9, 10, 15, 16, 99, 100, 255, 4096, 0xdeadbeefULL, 1234567890123ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char dec[21], hex[17], want[32];
        size_t n = pc_u64_dec(v[i], dec);
        snprintf(want, sizeof(want), "%" PRIu64, v[i]);
        T_CHECK_STR(dec, want);
        T_CHECK_INT(n, strlen(want));
        n = pc_u64_hex(v[i], hex);
        snprintf(want, sizeof(want), "%" PRIx64, v[i]);
        T_CHECK_STR(hex, want);
        T_CHECK_INT(n, strlen(want));
    }
}

/* pc_strlcpy against snprintf "%s" for every size around the text's length. */
static void test_strlcpy(void)
{
    const char *texts[] = {"", "a", "tenant-42", "a longer text of some thirty bytes"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        for (size_t size = 1; size <= strlen(texts[i]) + 2; size++) {
            char got[64], want[64];
            memset(got, 'x', sizeof(got));
            memset(want, 'x', sizeof(want));
            pc_strlcpy(got, texts[i], size);
            snprintf(want, size, "%s", texts[i]);
            T_CHECK(memcmp(got, want, sizeof(got)) == 0); /* nothing written past size */
        }
    }
}

static void test_append_i64(void)
{
    const int64_t v[] = {0, -1, 1, -10, 42, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    struct pc_buf b = PC_BUF_INIT, want = PC_BUF_INIT;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        pc_buf_append_i64(&b, v[i]);
        pc_buf_append_char(&b, ',');
        pc_buf_printf(&want, "%" PRId64 ",", v[i]);
    }
    T_CHECK_STR(pc_buf_cstr(&b), pc_buf_cstr(&want));
    pc_buf_free(&b);
    pc_buf_free(&want);
}

/* pc_buf_json_text: valid UTF-8 out, whatever came in; a cut never splits a character. */
static void test_json_text(void)
{
    static const struct {
        const char *in;
        size_t max;
        const char *want;
    } cases[] = {
        {"plain", 100, "\"plain\""},
        {"a\"b\\c\n\x01", 100, "\"a\\\"b\\\\c\\n\\u0001\""},
        {"caf\xc3\xa9", 100, "\"caf\xc3\xa9\""},
        {"caf\xc3\xa9", 4, "\"caf\""}, /* the cut would split the e-acute */
        {"caf\xc3\xa9", 5, "\"caf\xc3\xa9\""},
        {"\xf0\x9f\x98\x80!", 3, "\"\""},
        {"\xf0\x9f\x98\x80!", 4, "\"\xf0\x9f\x98\x80\""},
        {"bad\xff\xfe", 100, "\"bad\\ufffd\\ufffd\""},
        {"x\xc3", 100, "\"x\\ufffd\""},                                /* truncated sequence */
        {"\xc0\xaf", 100, "\"\\ufffd\\ufffd\""},                       /* overlong '/' */
        {"\xe0\x80\xaf", 100, "\"\\ufffd\\ufffd\\ufffd\""},            /* overlong */
        {"\xed\xa0\x80", 100, "\"\\ufffd\\ufffd\\ufffd\""},            /* a surrogate */
        {"\xf4\x90\x80\x80", 100, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* > U+10FFFF */
        {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", 100, "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\""},
        {"", 100, "\"\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_json_text(&b, cases[i].in, strlen(cases[i].in), cases[i].max);
        T_CHECK_STR(pc_buf_cstr(&b), cases[i].want);
        pc_buf_free(&b);
    }
}

int main(void)
{
    T_RUN(test_u64_text);
    T_RUN(test_strlcpy);
    T_RUN(test_append_i64);
    T_RUN(test_json_text);
    T_DONE();
}
