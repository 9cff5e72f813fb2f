/*
 * test_util.c - the decimal and hex formatting and the bounded copy used
 * on hot paths in place of printf: every digit, both ends of the ranges,
 * signs, every cut.
 */
#include "t.h"

#include <inttypes.h>
#include <stdbool.h>
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
/* A URL as a log line shows it: no user:password@, no query or fragment. */
static void test_url_shown(void)
{
    static const char *cases[][2] = {
        {"http://u:pw@host:8/v1?key=k#f", "http://host:8/v1"},
        {"https://u:p@w@host/x", "https://host/x"},
        {"http://host", "http://host"},
        {"http://host/a@b", "http://host/a@b"},
        {"http://host?x=@y", "http://host"},
        {"unix:/run/s", "unix:/run/s"},
    };
    char out[64];
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        pc_url_shown(cases[i][0], out, sizeof(out));
        T_CHECK_STR(out, cases[i][1]);
    }
    pc_url_shown("http://host/long", out, 10);
    T_CHECK_STR(out, "http://ho");
}

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

/*
 * pc_json_strict: RFC 8259's rules over texts cJSON accepts. Each text is
 * copied to a buffer of exactly its length, so a read past the end shows
 * under SANITIZE=1; every prefix of each is checked the same way.
 */
static bool strict_exact(const char *s, size_t n, char *msg, size_t msglen)
{
    char *copy = malloc(n > 0 ? n : 1);
    memcpy(copy, s, n);
    bool ok = pc_json_strict(copy, n, msg, msglen);
    free(copy);
    return ok;
}

static void test_json_strict(void)
{
    static const struct {
        const char *text;
        const char *want; /* NULL: kept */
    } cases[] = {
        {"{\"a\":[0,-0,1,-1,10,0.5,-0.25,1e5,1E+5,1e-5,-1.5E-07,123456789012345678901234]}", NULL},
        {"{\"a\":\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u00E9\\ud83d\\ude00\\uFFFF\\u0000\"}", NULL},
        {"{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\xef\xbf\xbf\x7f\"}", NULL},
        {" \t\r\n{ \"a\" : true , \"b\" : [ null , false ] } \r\n", NULL},
        {"\xef\xbb\xbf{}", NULL},
        {"{\"a\":007}", "a number with a leading zero at byte 5"},
        {"{\"a\":-01}", "a number with a leading zero at byte 5"},
        {"{\"a\":00}", "a number with a leading zero at byte 5"},
        {"{\"a\":1.}", "a decimal point not followed by a digit at byte 6"},
        {"{\"a\":1.e5}", "a decimal point not followed by a digit at byte 6"},
        {"{\"a\":-.5}", "a '-' not followed by a digit at byte 5"},
        {"{\"a\":+1}", "a number starting with '+' at byte 5"},
        {"{\"a\":.5}", "a number starting with '.' at byte 5"},
        {"{\"a\":1e}", "an exponent without digits at byte 6"},
        {"{\"a\":1e+}", "an exponent without digits at byte 6"},
        {"{\"a\":\"x\x01y\"}", "a control character (U+0001) not escaped in a string at byte 7"},
        {"{\"a\":\"\t\"}", "a control character (U+0009) not escaped in a string at byte 6"},
        {"{\"a\":\"\x1f\"}", "a control character (U+001F) not escaped in a string at byte 6"},
        {"{\x0b\"a\":1}", "a control character (U+000B) outside a string at byte 1"},
        {"{\"a\":1}\x01", "a control character (U+0001) outside a string at byte 7"},
        {"{\"a\":\"\\uZZZZ\"}", "a \\u escape without four hex digits at byte 6"},
        {"{\"a\":\"\\u12\"}", "a \\u escape without four hex digits at byte 6"},
        {"{\"a\":\"\\x\"}", "an invalid escape in a string at byte 6"},
        {"{\"a\":\"\\udc00\"}", "a low surrogate escape (\\uDC00) without a high one at byte 6"},
        {"{\"a\":\"\\ud800x\"}", "a high surrogate escape (\\uD800) without a low one at byte 6"},
        {"{\"a\":\"\\ud800\\u0041\"}",
         "a high surrogate escape (\\uD800) without a low one at byte 6"},
        {"{\"a\":\"\xff\"}", "a byte (0xFF) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\x80\"}", "a byte (0x80) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xc0\xaf\"}", "a byte (0xC0) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xe0\x80\xaf\"}", "a byte (0xE0) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xed\xa0\x80\"}", "a byte (0xED) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xf0\x80\x80\x80\"}", "a byte (0xF0) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xf4\x90\x80\x80\"}", "a byte (0xF4) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xe2\x82\"}", "a byte (0xE2) that is not UTF-8 in a string at byte 6"},
        {"{\"a\":\"\xc3\"}", "a byte (0xC3) that is not UTF-8 in a string at byte 6"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char msg[200] = "";
        size_t n = strlen(cases[i].text);
        bool ok = strict_exact(cases[i].text, n, msg, sizeof(msg));
        if (cases[i].want == NULL) {
            T_CHECK(ok);
            if (!ok)
                fprintf(stderr, "  case %zu: %s\n", i, msg);
        } else {
            T_CHECK(!ok);
            T_CHECK_STR(msg, cases[i].want);
        }
        for (size_t k = 0; k < n; k++) /* cut anywhere: no read past the end, no crash */
            (void)strict_exact(cases[i].text, k, msg, sizeof(msg));
    }
    /* Each byte that stops the eight-at-a-time scan, at every place of a long string. */
    static const unsigned char stops[] = {0x00, 0x01, 0x1f, '"', '\\', 0x80, 0xff};
    static const char *const why[] = {"a control character (U+0000) not escaped",
                                      "a control character (U+0001) not escaped",
                                      "a control character (U+001F) not escaped",
                                      NULL, /* ends the string early: then a letter outside */
                                      "an invalid escape",
                                      "a byte (0x80) that is not UTF-8",
                                      "a byte (0xFF) that is not UTF-8"};
    for (size_t j = 0; j < sizeof(stops); j++)
        for (size_t k = 0; k < 40; k++) {
            char text[48], msg[200] = "", want[200];
            memset(text, 'a', sizeof(text));
            text[0] = '"';
            text[42] = '"';
            text[1 + k] = (char)stops[j];
            bool ok = strict_exact(text, 43, msg, sizeof(msg));
            if (why[j] == NULL)
                continue; /* cJSON's to refuse: "aa"aaa" */
            snprintf(want, sizeof(want), " at byte %zu", 1 + k);
            T_CHECK(!ok);
            T_CHECK(strncmp(msg, why[j], strlen(why[j])) == 0);
            T_CHECK(strstr(msg, want) != NULL);
        }
}

int main(void)
{
    T_RUN(test_u64_text);
    T_RUN(test_url_shown);
    T_RUN(test_strlcpy);
    T_RUN(test_append_i64);
    T_RUN(test_json_text);
    T_RUN(test_json_strict);
    T_DONE();
}
