/*
 * test_jskim.c - the skimming parser against cJSON on the same texts:
 * it accepts exactly what cJSON_ParseWithLength accepts, its tree is
 * cJSON's cut at the asked depth, and an answer skimmed at API_ANSWER_DEPTH
 * gets the same shape verdict and usage as one parsed in full. Texts: answers
 * of every endpoint, cJSON's quirks one by one, every truncation of the
 * answers and thousands of random edits of them.
 */
#include "t.h"

#include <stdbool.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_dialect.h"
#include "pc_jskim.h"

#include "../fuzz/jskim_agree.h"

static int differences;

static void report(const char *what, const char *text, size_t len)
{
    if (++differences > 10)
        return;
    fprintf(stderr, "  %s differs on %zu bytes: \"", what, len);
    for (size_t i = 0; i < len && i < 160; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"%s\n", len > 160 ? "..." : "");
}

/* Both parsers on one text, cut at every depth up to 5: false (and a report) if they differ. */
static bool agree(const char *text, size_t len)
{
    /* a copy of exactly len bytes, so that a read past the end is one under ASan */
    char *exact = malloc(len ? len : 1);
    memcpy(exact, text, len);
    cJSON *full = cJSON_ParseWithLength(exact, len);
    const char *why = NULL;
    for (unsigned cut = 0; cut <= 5 && why == NULL; cut++)
        why = jskim_disagree(full, exact, len, cut);
    cJSON_Delete(full);
    free(exact);
    if (why != NULL)
        report(why, text, len);
    return why == NULL;
}

#define AGREE(s) T_CHECK(agree(s, sizeof(s) - 1))

static const char *const answers[] = {
    /* chat, with cached tokens, escapes, a surrogate pair and a tool call */
    "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1733000000,"
    "\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
    "\"content\":\"Paris \\u00e9t\\u00e9 \\ud83d\\ude00 \\\"quoted\\\" \\\\ back\\/slash\\n\","
    "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":\"{\\\"a\\\":1}\"}}]},\"logprobs\":null,\"finish_reason\":\"stop\"}],"
    "\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":7,\"total_tokens\":1207,"
    "\"prompt_tokens_details\":{\"cached_tokens\":1024,\"audio_tokens\":0}},"
    "\"system_fingerprint\":\"fp_1\"}",
    /* legacy completion */
    "{\"id\":\"cmpl-2\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"text\":\" once upon\\ta time\",\"index\":0,\"logprobs\":null,"
    "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":16,"
    "\"total_tokens\":19}}",
    /* embeddings: floats, exponents, a base64 one */
    "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,\"embedding\":"
    "[0.0023064255,-0.009327292,1.5e-3,-2E+2,0,-0.0,12345678901234567890123456789012345678901234"
    "567890123456789012345]},{\"object\":\"embedding\",\"index\":1,\"embedding\":\"AAAAPw==\"}],"
    "\"model\":\"text-embedding-3-small\",\"usage\":{\"prompt_tokens\":8,\"total_tokens\":8}}",
    /* Anthropic message with cache reads and writes */
    "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\","
    "\"content\":[{\"type\":\"text\",\"text\":\"Hi \\u4f60\\u597d\"},{\"type\":\"tool_use\","
    "\"id\":\"t\",\"name\":\"n\",\"input\":{\"q\":[1,2,{\"deep\":[[[]]]}]}}],"
    "\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":21,"
    "\"cache_creation_input_tokens\":188,\"cache_read_input_tokens\":1500,"
    "\"output_tokens\":393}}",
    /* Responses API */
    "{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\","
    "\"error\":null,\"incomplete_details\":null,\"output\":[{\"type\":\"message\",\"id\":\"m\","
    "\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
    "\"text\":\"ok\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":36,"
    "\"input_tokens_details\":{\"cached_tokens\":12},\"output_tokens\":87,"
    "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":123}}",
    /* errors and wrong shapes */
    "{\"error\":{\"message\":\"Rate limit\",\"type\":\"requests\",\"param\":null,"
    "\"code\":\"rate_limit_exceeded\"}}",
    "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
    "{\"object\":\"chat.completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":-5,"
    "\"completion_tokens\":1e400,\"prompt_tokens_details\":null}}",
    "{\"choices\":[{\"message\":\"not an object\"},{\"text\":7}],\"data\":[{\"embedding\":{}}],"
    "\"object\":\"list\",\"usage\":{\"prompt_tokens\":\"3\",\"prompt_tokens\":4}}",
    "[{\"a\":1},\"b\",true,false,null,-1.25e-7]",
    "  \r\n\t{\"usage\":{\"input_tokens\":1,\"input_tokens_details\":{\"cached_tokens\":2.9}},"
    "\"status\":\"incomplete\",\"object\":\"response\",\"output\":[]}  trailing text",
};

static void test_answers(void)
{
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++)
        T_CHECK(agree(answers[i], strlen(answers[i])));
}

/* What the skim keeps of a chat answer at API_ANSWER_DEPTH, and what it leaves out. */
/* Where the value ends: what follows is the caller's to look at ("{...}{...}"). */
static void test_end(void)
{
    static const struct {
        const char *text;
        size_t end;
    } cases[] = {
        {"{}", 2},
        {" {\"a\":[1,2]}  ", 12},
        {"{}{}", 2},
        {"{\"a\":\"}\"} x", 9},
        {"\xEF\xBB\xBF[1]\n", 6},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        size_t end = 0;
        cJSON *j = jskim_parse_end(cases[i].text, strlen(cases[i].text), 1, &end);
        T_CHECK(j != NULL);
        T_CHECK_INT((long long)end, (long long)cases[i].end);
        cJSON_Delete(j);
    }
}

static void test_cut(void)
{
    cJSON *r = jskim_parse(answers[0], strlen(answers[0]), API_ANSWER_DEPTH);
    T_CHECK(r != NULL);
    const cJSON *choice = cJSON_GetArrayItem(api_member(r, "choices"), 0);
    T_CHECK_STR(cJSON_GetStringValue(api_member(choice, "finish_reason")), "");
    T_CHECK_STR(cJSON_GetStringValue(api_member(r, "model")), "gpt-4o-mini");
    const cJSON *msg = api_member(choice, "message");
    T_CHECK(cJSON_IsObject(msg) && msg->child == NULL);
    const cJSON *details = api_member(api_member(r, "usage"), "prompt_tokens_details");
    T_CHECK_INT(cJSON_GetNumberValue(api_member(details, "cached_tokens")), 1024);
    struct api_usage u;
    dialect_usage(API_CHAT, r, &u);
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 1200);
    T_CHECK_INT(u.completion, 7);
    T_CHECK_INT(u.cached, 1024);
    T_CHECK_INT(api_answer_check(API_CHAT, r, NULL), API_ANSWER_OK);
    cJSON_Delete(r);

    r = jskim_parse(answers[2], strlen(answers[2]), API_ANSWER_DEPTH);
    const cJSON *emb = api_member(cJSON_GetArrayItem(api_member(r, "data"), 0), "embedding");
    T_CHECK(cJSON_IsArray(emb) && emb->child == NULL);
    T_CHECK_INT(api_answer_check(API_EMBEDDINGS, r, NULL), API_ANSWER_OK);
    cJSON_Delete(r);

    r = jskim_parse(answers[0], strlen(answers[0]), 0);
    T_CHECK(cJSON_IsObject(r) && r->child == NULL);
    cJSON_Delete(r);
}

/* cJSON's rules and quirks, one text each. */
static void test_quirks(void)
{
    AGREE("");
    AGREE(" ");
    AGREE("\x01\x02 1");
    AGREE("\0 1");
    AGREE("{\"a\":\0 1}");
    AGREE("\xEF\xBB\xBF"
          "1");
    AGREE("\xEF\xBB\xBF"
          "12");
    AGREE("\xEF\xBB\xBF"
          " {}");
    AGREE("\xEF\xBB"
          "1");
    AGREE("nul");
    AGREE("null");
    AGREE("nullx");
    AGREE("[nulL]");
    AGREE("[true,false,null]");
    AGREE("[tru]");
    AGREE("[fals]");
    AGREE("{}");
    AGREE("[]");
    AGREE("[ ]");
    AGREE("[");
    AGREE("[ ");
    AGREE("]");
    AGREE("[1,]");
    AGREE("[,1]");
    AGREE("[1 2]");
    AGREE("[1,,2]");
    AGREE("{\"a\"}");
    AGREE("{\"a\":}");
    AGREE("{\"a\" 1}");
    AGREE("{\"a\":1,}");
    AGREE("{,\"a\":1}");
    AGREE("{a:1}");
    AGREE("{\"a\":1 \"b\":2}");
    AGREE("{\"a\":1}}");
    AGREE("{\"a\":1]");
    AGREE("[1}");
    AGREE("{\"a\":1,\"a\":2}");
    AGREE("{\"\":0}");
    AGREE("{\"k\\u0000ey\":1}");
    AGREE("[01]");
    AGREE("[-01.50]");
    AGREE("[1.]");
    AGREE("[-.5]");
    AGREE("[-]");
    AGREE("[-.]");
    AGREE("[.5]");
    AGREE("[+1]");
    AGREE("[1e]");
    AGREE("[1e+]");
    AGREE("[1e+5]");
    AGREE("[1E-05]");
    AGREE("[1.e5]");
    AGREE("[1.2.3]");
    AGREE("[1-2]");
    AGREE("[1+2]");
    AGREE("[1ee5]");
    AGREE("[0x10]");
    AGREE("[-0, 0, -1, 7]");
    AGREE("[999999999999999, -999999999999999, 9999999999999999, 9007199254740993]");
    AGREE("[000000000000000001, -000000000000000]");
    AGREE("[1e999]");
    AGREE("[-1e999]");
    AGREE("[1e-999]");
    AGREE("[2147483648, -2147483649, 2147483647.5]");
    AGREE("[Infinity]");
    AGREE("[NaN]");
    AGREE("[-Infinity]");
    AGREE("[1234567890123456789012345678901234567890123456789012345678901234567890]");
    AGREE("[0.000000000000000000000000000000000000000000000000000000000000000000001e70]");
    AGREE("[\"\"]");
    AGREE("[\"a");
    AGREE("[\"a\\\"]");
    AGREE("[\"a\\\\\"]");
    AGREE("[\"\\");
    AGREE("\"\\\\\\\"\"");
    AGREE("[\"\\x\"]");
    AGREE("[\"\\u\"]");
    AGREE("[\"\\u12\"]");
    AGREE("[\"\\u1234\"]");
    AGREE("[\"\\uZZZZ\"]");
    AGREE("[\"\\u00zz\"]");
    AGREE("[\"\\u0000x\"]");
    AGREE("[\"\\uD800\"]");
    AGREE("[\"\\uDC00\"]");
    AGREE("[\"\\uD800\\u0041\"]");
    AGREE("[\"\\uD800\\uDC00\"]");
    AGREE("[\"\\uDBFF\\uDFFF\"]");
    AGREE("[\"\\uD800\\n\"]");
    AGREE("[\"\\uD800\\uDC0\"]");
    AGREE("[\"\\u123\\\\\"]");
    AGREE("[\"\\u12\\\"\"]");
    AGREE("[\"\\u0041\\u00e9\\u4f60\"]");
    AGREE("[\"raw \x01\x1f\t control\"]");
    AGREE("[\"utf-8 \xc3\xa9 and invalid \xff\xfe\"]");
    AGREE("[\"\\/\\b\\f\\n\\r\\t\"]");
    AGREE("{\"a\\u0062\":\"b\"}");
    AGREE("{\"\\uD83D\\uDE00\":[\"\\uD83D\\uDE00\"]}");
    AGREE("1 2");
    AGREE("\"s\" junk");
    AGREE("{} {");
}

static char *nest(size_t n, const char *open, const char *close)
{
    size_t lo = strlen(open), lc = strlen(close);
    char *s = malloc(n * (lo + lc) + 2), *p = s;
    for (size_t i = 0; i < n; i++, p += lo)
        memcpy(p, open, lo);
    *p++ = '1';
    for (size_t i = 0; i < n; i++, p += lc)
        memcpy(p, close, lc);
    *p = '\0';
    return s;
}

/* cJSON's nesting limit (1000 arrays and objects), arrays and objects mixed. */
static void test_nesting(void)
{
    size_t sizes[] = {999, 1000, 1001, 1500};
    for (size_t i = 0; i < 4; i++) {
        char *a = nest(sizes[i], "[", "]");
        char *o = nest(sizes[i], "{\"k\":", "}");
        char *m = nest(sizes[i] / 2, "[{\"k\":", "}]"); /* an even number of levels */
        size_t ml = strlen(m);
        char *m1 = malloc(ml + 3); /* one more array around it: 1001 levels from 1000 */
        snprintf(m1, ml + 3, "[%s]", m);
        T_CHECK(agree(a, strlen(a)));
        T_CHECK(agree(o, strlen(o)));
        T_CHECK(agree(m, ml));
        T_CHECK(agree(m1, ml + 2));
        free(a);
        free(o);
        free(m);
        free(m1);
    }
    char *a = nest(1000, "[", "]");
    cJSON *r = jskim_parse(a, strlen(a), 2);
    T_CHECK(r != NULL);
    cJSON_Delete(r);
    free(a);
    a = nest(1001, "[", "]");
    T_CHECK(jskim_parse(a, strlen(a), 2) == NULL);
    free(a);
}

/* Every prefix of every answer: cut-off answers are refused alike. */
static void test_truncations(void)
{
    bool ok = true;
    for (size_t i = 0; i < sizeof(answers) / sizeof(answers[0]); i++)
        for (size_t n = 0; n <= strlen(answers[i]); n++)
            ok = agree(answers[i], n) && ok;
    T_CHECK(ok);
}

static uint32_t rnd_state = 12345;

static uint32_t rnd(uint32_t n)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (rnd_state >> 8) % n;
}

/* Random edits of the answers, with bytes that matter to a JSON parser. */
static void test_edits(void)
{
    static const char alphabet[] = "{}[]\":,\\/ubfnrtlse0123456789-+.eEdD \t\n\x01\xc3\xa9\xff";
    char buf[2048];
    bool ok = true;
    for (int round = 0; round < 4000; round++) {
        const char *src = answers[rnd(sizeof(answers) / sizeof(answers[0]))];
        size_t len = strlen(src);
        memcpy(buf, src, len);
        for (uint32_t e = 0, edits = 1 + rnd(3); e < edits; e++) {
            uint32_t at = rnd((uint32_t)len), op = rnd(4);
            char c = alphabet[rnd(sizeof(alphabet))]; /* the terminating NUL included */
            if (op == 0) {
                buf[at] = c;
            } else if (op == 1 && len + 1 < sizeof(buf)) {
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = c;
                len++;
            } else if (op == 2 && len > 1) {
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
            } else if (len * 2 < sizeof(buf)) { /* repeat a span */
                uint32_t n = 1 + rnd((uint32_t)(len - at < 40 ? len - at : 40));
                memmove(buf + at + n, buf + at, len - at);
                len += n;
            }
        }
        ok = agree(buf, len) && ok;
    }
    T_CHECK(ok);
}

int main(void)
{
    T_RUN(test_answers);
    T_RUN(test_end);
    T_RUN(test_cut);
    T_RUN(test_quirks);
    T_RUN(test_nesting);
    T_RUN(test_truncations);
    T_RUN(test_edits);
    T_DONE();
}
