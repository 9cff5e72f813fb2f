/*
 * test_canon.c - canonical JSON and cache keys (src/canon.c): equivalences
 * that must hold (member order, white space, escapes, number spelling,
 * duplicate keys, excluded fields) and differences that must show (every
 * answer-changing field, tenant, namespace, variant, endpoint).
 */
#include "pc_canon.h"
#include "t.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>

/* --- helpers ------------------------------------------------------------- */

/* Canonical text of json (owned by the caller), or NULL if it does not parse. */
static char *canon_of(const char *json)
{
    cJSON *v = cJSON_Parse(json);
    if (v == NULL)
        return NULL;
    struct pc_buf b = PC_BUF_INIT;
    canon_json(v, &b);
    cJSON_Delete(v);
    return pc_buf_cstr(&b);
}

/* Whether json canonicalises to want; prints both when not. */
static bool canon_is(const char *json, const char *want)
{
    char *got = canon_of(json);
    bool ok = got != NULL && strcmp(got, want) == 0;
    if (!ok)
        fprintf(stderr, "  canon(%s)\n    got:  %s\n    want: %s\n", json, got ? got : "(null)",
                want);
    free(got);
    return ok;
}

/* Whether a and b both parse and canonicalise alike. */
static bool canon_same(const char *a, const char *b)
{
    char *ca = canon_of(a), *cb = canon_of(b);
    bool ok = ca != NULL && cb != NULL && strcmp(ca, cb) == 0;
    free(ca);
    free(cb);
    return ok;
}

static const char *num(double d)
{
    static char out[40];
    canon_number(d, out);
    return out;
}

/* Request context of a key computation; NULL strings are the defaults. */
struct req {
    enum api_endpoint e;
    const char *cred;
    const char *ns;
    const char *variant;
};

static void keys_of(const struct req *r, const char *body, struct canon_keys *k)
{
    unsigned char tenant[PC_SHA256_LEN];
    canon_tenant(r->cred ? r->cred : "authorization=Bearer sk-test", tenant);
    cJSON *v = cJSON_Parse(body);
    if (v == NULL)
        fprintf(stderr, "  test body does not parse: %s\n", body);
    struct canon_input in = {r->e, v, tenant, r->ns, r->variant, false, body, strlen(body)};
    T_CHECK(canon_keys(&in, k) == 0);
    T_CHECK(!k->lossy);
    cJSON_Delete(v);
}

static bool exact_eq(const struct req *ra, const char *a, const struct req *rb, const char *b)
{
    struct canon_keys ka, kb;
    keys_of(ra, a, &ka);
    keys_of(rb, b, &kb);
    bool eq = memcmp(ka.exact, kb.exact, PC_SHA256_LEN) == 0;
    canon_keys_free(&ka);
    canon_keys_free(&kb);
    return eq;
}

static bool part_eq(const struct req *r, const char *a, const char *b)
{
    struct canon_keys ka, kb;
    keys_of(r, a, &ka);
    keys_of(r, b, &kb);
    bool eq = memcmp(ka.partition, kb.partition, PC_SHA256_LEN) == 0;
    canon_keys_free(&ka);
    canon_keys_free(&kb);
    return eq;
}

static const struct req chat = {API_CHAT, NULL, NULL, NULL};

#define BASE_HEAD "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define BASE      BASE_HEAD "}"

/* --- canonical JSON ------------------------------------------------------ */

static void test_numbers(void)
{
    T_CHECK_STR(num(1), "1");
    T_CHECK_STR(num(-0.0), "0");
    T_CHECK_STR(num(0.1), "0.1");
    T_CHECK_STR(num(-2.5e-7), "-2.5e-7");
    T_CHECK_STR(num(1e300), "1e300");
    T_CHECK_STR(num(1e-300), "1e-300");
    T_CHECK_STR(num(1e15), "1000000000000000");
    T_CHECK_STR(num(0.1 + 0.2), "0.30000000000000004");
    T_CHECK_STR(num(5e-324), "5e-324");
    T_CHECK_STR(num(9007199254740991.0), "9007199254740991");   /* 2^53 - 1: integer */
    T_CHECK_STR(num(-9007199254740991.0), "-9007199254740991"); /* */
    T_CHECK_STR(num(9007199254740992.0), "9007199254740992");   /* 2^53: shortest %g */
    T_CHECK_STR(num(1e20), "1e20");
    T_CHECK_STR(num(INFINITY), "1e999");
    T_CHECK_STR(num(-INFINITY), "-1e999");
    T_CHECK_STR(num(NAN), "null");
    char out[40];
    T_CHECK_INT(canon_number(123.5, out), 5);

    /* Spellings of one number are one number. */
    T_CHECK(canon_is("[1,1.0,1e0,10E-1,1.00000,0.1e1,100e-2]", "[1,1,1,1,1,1,1]"));
    T_CHECK(canon_is("[-0,-0.0,0e5,0]", "[0,0,0,0]"));
    T_CHECK(canon_is("[0.1,0.10,1e-1,0.100000000000000005551]", "[0.1,0.1,0.1,0.1]"));
    T_CHECK(canon_is("[1e300,1E+300,10e299]", "[1e300,1e300,1e300]"));
    T_CHECK(canon_is("[123456789012345678901234567890]", "[1.2345678901234568e29]"));
    /* 2^53 + 1 is not a double: it reads as 2^53, as in every IEEE-double JSON parser. */
    T_CHECK(canon_is("[9007199254740993]", "[9007199254740992]"));
    T_CHECK(canon_same("9007199254740993", "9007199254740992"));
    /* Overflowing literals become infinity in cJSON; all spell the same. */
    T_CHECK(canon_is("[1e400,-1e999]", "[1e999,-1e999]"));
    /* Different numbers stay different. */
    T_CHECK(!canon_same("[0.1]", "[0.2]"));
    T_CHECK(!canon_same("[1]", "[\"1\"]"));

    /* Never locale-dependent (only checked where such a locale exists). */
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") != NULL || setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
        T_CHECK_STR(num(0.5), "0.5");
        T_CHECK_STR(num(-2.5e-7), "-2.5e-7");
        setlocale(LC_NUMERIC, "C");
    }
}

/* canon_json_text of json (with its own text as the raw body) is want. */
static bool canon_text_is(const char *json, const char *want)
{
    cJSON *v = cJSON_Parse(json);
    struct pc_buf b = PC_BUF_INIT;
    int rc = v != NULL ? canon_json_text(v, json, strlen(json), &b) : -1;
    bool ok = rc == 0 && strcmp(pc_buf_cstr(&b), want) == 0;
    if (!ok)
        fprintf(stderr, "  canon_text(%s)\n    got:  %s (rc %d)\n    want: %s\n", json,
                b.len ? b.data : "", rc, want);
    pc_buf_free(&b);
    cJSON_Delete(v);
    return ok;
}

/* Integer literals a double cannot hold keep their digits (pc_canon.h, "Numbers"). */
static void test_number_literals(void)
{
    /* 2^53 is a double; 2^53 + 1 is not: it keeps its digits, the double's spellings do not. */
    T_CHECK(canon_text_is("[9007199254740992]", "[9007199254740992]"));
    T_CHECK(canon_text_is("[9007199254740993,-9007199254740993]",
                          "[9007199254740993,-9007199254740993]"));
    T_CHECK(canon_text_is("[9007199254740993.0,9.007199254740993e15]",
                          "[9007199254740992.0,9007199254740992.0]"));
    T_CHECK(canon_text_is("[123456789012345678901234567890]", "[123456789012345678901234567890]"));
    /*
     * An integral value spelled as a float stays a float (Python's json reads
     * 1 and 1.0 apart, and prints them apart into a prompt); its spellings are
     * one float. Integer literals of 2^53 or more keep their digits, so they
     * never meet a float's form.
     */
    T_CHECK(
        canon_text_is("[1,1.0,1e0,10E-1,-0,-0.0,0.0,100000000000000000000,1e20,18014398509481984]",
                      "[1,1.0,1.0,1.0,0,-0.0,0.0,100000000000000000000,1e20,18014398509481984]"));
    T_CHECK(canon_text_is(
        "[12345678901234568,12345678901234568.0,9007199254740992,9007199254740992e0]",
        "[12345678901234568,12345678901234568.0,9007199254740992,9007199254740992.0]"));
    T_CHECK(canon_text_is("[0.1,0.100000000000000005551]", "[0.1,0.1]"));
    /* cJSON reads leading zeros; the kept digits lose them. */
    T_CHECK(canon_text_is("[-0009007199254740993,007]", "[-9007199254740993,7]"));
    /* Digits inside strings and member names are not literals. */
    T_CHECK(canon_text_is("{\"9007199254740993\":\"12 \\\" 34\",\"b\":[9007199254740995,1]}",
                          "{\"9007199254740993\":\"12 \\\" 34\",\"b\":[9007199254740995,1]}"));
    /* Members are sorted; each keeps its own literal, duplicates included (last wins). */
    T_CHECK(canon_text_is("{\"s\":9007199254740993,\"a\":9007199254740995,\"s\":9007199254740997}",
                          "{\"a\":9007199254740995,\"s\":9007199254740997}"));

    /* Longer than any double: kept whole, not turned into infinity (fuzz regression). */
    char lit[420] = "[", want[420];
    for (int i = 0; i < 400; i++)
        strcat(lit, "9");
    strcat(lit, "]");
    snprintf(want, sizeof(want), "%s", lit);
    T_CHECK(canon_text_is(lit, want));
    T_CHECK(canon_text_is("[1e400]", "[1e999]"));

    /* A raw text that is not the tree's is refused, never trusted. */
    cJSON *v = cJSON_Parse("[1,2]");
    struct pc_buf b = PC_BUF_INIT;
    T_CHECK_INT(canon_json_text(v, "[1]", 3, &b), -1);
    T_CHECK_INT(canon_json_text(v, "[1,2,3]", 7, &b), -1);
    T_CHECK_INT(canon_json_text(v, "[1,3]", 5, &b), -1);
    T_CHECK_INT(canon_json_text(v, NULL, 0, &b), -1);
    T_CHECK_INT(b.len, 0);
    T_CHECK_INT(canon_json_text(v, "[1 , 2.0]", 9, &b), 0);
    T_CHECK_STR(pc_buf_cstr(&b), "[1,2.0]");
    pc_buf_free(&b);
    cJSON_Delete(v);
}

/* Keys of body with its raw text (raw true) or without; lossy out. */
static void seed_keys(const char *body, bool raw, struct canon_keys *k)
{
    unsigned char tenant[PC_SHA256_LEN];
    canon_tenant("authorization=Bearer sk-test", tenant);
    cJSON *v = cJSON_Parse(body);
    struct canon_input in = {
        API_CHAT, v, tenant, NULL, NULL, false, raw ? body : NULL, raw ? strlen(body) : 0};
    canon_keys(&in, k);
    cJSON_Delete(v);
}

static bool seed_same(const char *a, const char *b, bool raw)
{
    struct canon_keys ka, kb;
    seed_keys(a, raw, &ka);
    seed_keys(b, raw, &kb);
    bool same = memcmp(ka.exact, kb.exact, PC_SHA256_LEN) == 0;
    canon_keys_free(&ka);
    canon_keys_free(&kb);
    return same;
}

#define TOOL_RAWLESS                                                                             \
    BASE_HEAD ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{" \
              "\"default\":1}}}]}"

/* The reported collision: seeds 2^53 and 2^53 + 1 gave MISS then HIT. */
static void test_big_integer_keys(void)
{
    const char *s992 = BASE_HEAD ",\"seed\":9007199254740992}";
    const char *s993 = BASE_HEAD ",\"seed\":9007199254740993}";
    const char *s993b = BASE_HEAD ",\"seed\": 9007199254740993 }";
    const char *s992f = BASE_HEAD ",\"seed\":9.007199254740992e15}";
    T_CHECK(!seed_same(s992, s993, true));
    T_CHECK(seed_same(s993, s993b, true));
    T_CHECK(seed_same(s992, s992f, true));
    struct canon_keys k;
    seed_keys(s993, true, &k);
    T_CHECK(!k.lossy);
    canon_keys_free(&k);

    /* Without the raw text the two cannot be told apart: unique keys, flagged. */
    T_CHECK(!seed_same(s992, s993, false));
    T_CHECK(!seed_same(s993, s993, false));
    seed_keys(s993, false, &k);
    T_CHECK(k.lossy);
    canon_keys_free(&k);
    /* Numbers below 2^53 need no raw text. */
    T_CHECK(seed_same(BASE_HEAD ",\"seed\":42}", BASE_HEAD ",\"seed\":42.0}", false));
    seed_keys(BASE_HEAD ",\"seed\":-9007199254740991}", false, &k);
    T_CHECK(!k.lossy);
    canon_keys_free(&k);

    /* A raw text that does not match the body counts as none. */
    unsigned char tenant[PC_SHA256_LEN] = {0};
    cJSON *v = cJSON_Parse(s993);
    struct canon_input in = {API_CHAT, v, tenant, NULL, NULL, false, s992, strlen(s992)};
    canon_keys(&in, &k);
    T_CHECK(!k.lossy); /* its literals read as the tree's doubles: the caller's word is taken */
    canon_keys_free(&k);
    in.raw = "{}";
    in.raw_len = 2;
    canon_keys(&in, &k);
    T_CHECK(k.lossy);
    canon_keys_free(&k);
    cJSON_Delete(v);
}

/*
 * An integer and a float of one value inside a body are two requests: a
 * Python upstream reads them apart and renders tool schemas and tool inputs
 * into the prompt as written ({"default": 1.0} vs {"default": 1}). A
 * top-level parameter (temperature 1 or 1.0) asks the same either way.
 */
static void test_float_spelling_keys(void)
{
#define TOOL(d)                                                                  \
    BASE_HEAD ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"," \
              "\"parameters\":{\"type\":\"number\",\"default\":" d "}}}]}"
    T_CHECK(!exact_eq(&chat, TOOL("1"), &chat, TOOL("1.0")));
    T_CHECK(exact_eq(&chat, TOOL("1.0"), &chat, TOOL("1e0")));
    T_CHECK(!exact_eq(&chat, TOOL("100000000000000000000"), &chat, TOOL("1e20")));
    T_CHECK(!exact_eq(&chat, TOOL("9007199254740992"), &chat, TOOL("9007199254740992.0")));
    T_CHECK(!exact_eq(&chat, TOOL("0.0"), &chat, TOOL("-0.0")));
    T_CHECK(exact_eq(&chat, TOOL("0"), &chat, TOOL("-0")));
    T_CHECK(!part_eq(&chat, TOOL("1"), TOOL("1.0")));
#undef TOOL
    const struct req msgs = {API_MESSAGES, NULL, NULL, NULL};
#define INPUT(x)                                                                                 \
    "{\"model\":\"claude\",\"max_tokens\":10,\"messages\":[{\"role\":\"assistant\",\"content\":" \
    "[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{\"x\":" x "}}]},"            \
    "{\"role\":\"user\",\"content\":\"go\"}]}"
    T_CHECK(!exact_eq(&msgs, INPUT("2"), &msgs, INPUT("2.0")));
#undef INPUT
    /* Parameters: the documented equivalence holds. */
    T_CHECK(
        exact_eq(&chat, BASE_HEAD ",\"temperature\":1}", &chat, BASE_HEAD ",\"temperature\":1.0}"));
    T_CHECK(exact_eq(&msgs,
                     "{\"model\":\"claude\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\","
                     "\"content\":\"go\"}],\"top_k\":5}",
                     &msgs,
                     "{\"model\":\"claude\",\"max_tokens\":1e1,\"messages\":[{\"role\":\"user\","
                     "\"content\":\"go\"}],\"top_k\":5.0}"));
    /* Without the raw text a nested integral value may have been either: unique keys. */
    struct canon_keys k;
    seed_keys(TOOL_RAWLESS, false, &k);
    T_CHECK(k.lossy);
    canon_keys_free(&k);
}

static void test_key_order(void)
{
    const char *a = "{\"b\":1,\"a\":{\"d\":[{\"z\":1,\"y\":{\"q\":1,\"p\":2}}],\"c\":2}}";
    const char *b = "{\"a\":{\"c\":2,\"d\":[{\"y\":{\"p\":2,\"q\":1},\"z\":1}]},\"b\":1}";
    T_CHECK(canon_is(a, "{\"a\":{\"c\":2,\"d\":[{\"y\":{\"p\":2,\"q\":1},\"z\":1}]},\"b\":1}"));
    T_CHECK(canon_same(a, b));
    /* Bytewise on UTF-8: "" < "B" < "a" < "aa" < "z" < "é" (0xc3). */
    T_CHECK(canon_is("{\"é\":6,\"z\":5,\"aa\":4,\"a\":3,\"B\":2,\"\":1}",
                     "{\"\":1,\"B\":2,\"a\":3,\"aa\":4,\"z\":5,\"é\":6}"));
    /* Arrays keep their order. */
    T_CHECK(!canon_same("[1,2]", "[2,1]"));
    /* More members than fit in the on-stack sort array. */
    T_CHECK(canon_is("{\"j\":9,\"i\":8,\"h\":7,\"g\":6,\"f\":5,\"e\":4,\"d\":3,\"c\":2,\"b\":1,"
                     "\"a\":0,\"c\":22}",
                     "{\"a\":0,\"b\":1,\"c\":22,\"d\":3,\"e\":4,\"f\":5,\"g\":6,\"h\":7,\"i\":8,"
                     "\"j\":9}"));
}

/*
 * Where the upstream reads member order (a schema, a tool input), it is kept
 * in the keys: structured outputs are generated in the schema's order. The
 * request's own members (top level, a message, a tool definition) and a
 * repeated member (the last wins) are as before.
 */
static void test_key_order_kept(void)
{
#define RF(props)                                                                         \
    BASE_HEAD ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":" \
              "\"v\",\"schema\":{\"type\":\"object\",\"properties\":{" props "}}}}}"
    T_CHECK(!exact_eq(&chat, RF("\"a\":{},\"b\":{}"), &chat, RF("\"b\":{},\"a\":{}")));
    T_CHECK(exact_eq(&chat, RF("\"a\":{},\"b\":{}"), &chat, RF("\"a\":{},\"b\":{}")));
    T_CHECK(!part_eq(&chat, RF("\"a\":{},\"b\":{}"), RF("\"b\":{},\"a\":{}")));
    /* the structure around the schema still sorts */
    /* the schema's own keywords keep their order too: it is rendered as written */
    T_CHECK(
        !exact_eq(&chat, RF("\"a\":{}"), &chat,
                  "{\"response_format\":{\"json_schema\":{\"schema\":{\"properties\":{\"a\":{}},"
                  "\"type\":\"object\"},\"name\":\"v\"},\"type\":\"json_schema\"},\"messages\":"
                  "[{\"content\":\"hi\",\"role\":\"user\"}],\"model\":\"gpt-4o\"}"));
    T_CHECK(
        exact_eq(&chat, RF("\"a\":{}"), &chat,
                 "{\"response_format\":{\"json_schema\":{\"schema\":{\"type\":\"object\","
                 "\"properties\":{\"a\":{}}},\"name\":\"v\"},\"type\":\"json_schema\"},"
                 "\"messages\":[{\"content\":\"hi\",\"role\":\"user\"}],\"model\":\"gpt-4o\"}"));
    /* a repeated member inside a schema: the key is unique, as anywhere */
    struct canon_keys k;
    keys_of(&chat, RF("\"a\":1,\"b\":{},\"a\":2"), &k);
    T_CHECK(k.repeated);
    canon_keys_free(&k);
#undef RF
#define TOOL(member, props)                                                               \
    BASE_HEAD ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"" member \
              "\":{\"properties\":{" props "}}}}]}"
    T_CHECK(!exact_eq(&chat, TOOL("parameters", "\"a\":1,\"b\":2"), &chat,
                      TOOL("parameters", "\"b\":2,\"a\":1")));
    /* a member of no such name sorts */
    T_CHECK(
        exact_eq(&chat, TOOL("other", "\"a\":1,\"b\":2"), &chat, TOOL("other", "\"b\":2,\"a\":1")));
#undef TOOL
    const struct req msgs = {API_MESSAGES, NULL, NULL, NULL};
#define AN(tool, input)                                                                     \
    "{\"model\":\"claude\",\"max_tokens\":10,\"tools\":[" tool "],\"messages\":[{\"role\":" \
    "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\","        \
    "\"input\":" input "}]},{\"role\":\"user\",\"content\":\"go\"}]}"
#define ANT(p) "{\"name\":\"f\",\"input_schema\":{\"properties\":{" p "}}}"
    T_CHECK(!exact_eq(&msgs, AN(ANT("\"a\":1,\"b\":2"), "{}"), &msgs,
                      AN(ANT("\"b\":2,\"a\":1"), "{}")));
    T_CHECK(!exact_eq(&msgs, AN(ANT(""), "{\"x\":1,\"y\":2}"), &msgs,
                      AN(ANT(""), "{\"y\":2,\"x\":1}")));
    T_CHECK(exact_eq(&msgs, AN(ANT(""), "{\"x\":1}"), &msgs,
                     AN("{\"input_schema\":{\"properties\":{}},\"name\":\"f\"}", "{\"x\":1}")));
#undef ANT
#undef AN
    /*
     * A schema given as a top-level member: vLLM's guided_json and structured_outputs' json,
     * llama.cpp's json_schema. Their grammars generate the properties in the schema's order.
     */
#define TOP(member, props) \
    BASE_HEAD ",\"" member "\":{\"type\":\"object\",\"properties\":{" props "}}}"
    T_CHECK(!exact_eq(&chat, TOP("guided_json", "\"a\":{},\"b\":{}"), &chat,
                      TOP("guided_json", "\"b\":{},\"a\":{}")));
    T_CHECK(!exact_eq(&chat, TOP("json_schema", "\"a\":{},\"b\":{}"), &chat,
                      TOP("json_schema", "\"b\":{},\"a\":{}")));
    const struct req cmpl = {API_COMPLETIONS, NULL, NULL, NULL};
    T_CHECK(!exact_eq(&cmpl,
                      "{\"model\":\"m\",\"prompt\":\"p\",\"guided_json\":{\"properties\":{"
                      "\"a\":{},\"b\":{}}}}",
                      &cmpl,
                      "{\"model\":\"m\",\"prompt\":\"p\",\"guided_json\":{\"properties\":{"
                      "\"b\":{},\"a\":{}}}}"));
    T_CHECK(!exact_eq(&chat,
                      BASE_HEAD ",\"structured_outputs\":{\"json\":{\"properties\":{\"a\":{},"
                                "\"b\":{}}}}}",
                      &chat,
                      BASE_HEAD ",\"structured_outputs\":{\"json\":{\"properties\":{\"b\":{},"
                                "\"a\":{}}}}}"));
    /* the request's own top-level members still sort */
    T_CHECK(
        exact_eq(&chat, TOP("guided_json", "\"a\":{}"), &chat,
                 "{\"guided_json\":{\"type\":\"object\",\"properties\":{\"a\":{}}},"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":\"gpt-4o\"}"));
#undef TOP
}

static void test_whitespace(void)
{
    T_CHECK(canon_same("{\"a\":[1,2,{\"b\":null}],\"c\":true}",
                       " \n{ \"a\" :\t[ 1 ,\r\n2, { \"b\" : null } ] , \"c\":true }\n "));
    T_CHECK(canon_is(" [ true , false , null , [ ] , { } ] ", "[true,false,null,[],{}]"));
    /* White space inside strings is significant. */
    T_CHECK(!canon_same("\"a b\"", "\"a  b\""));
}

static void test_strings(void)
{
    T_CHECK(canon_same("\"\\u00e9\"", "\"é\""));
    T_CHECK(canon_same("\"\\u00E9\"", "\"é\""));
    T_CHECK(canon_same("\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\""));
    T_CHECK(canon_same("\"\\/\"", "\"/\""));
    T_CHECK(canon_same("{\"\\u0061\":1}", "{\"a\":1}"));
    T_CHECK(canon_is("\"\\u000a\\t\\\"\\\\\\u0001\\u007f\"", "\"\\n\\t\\\"\\\\\\u0001\x7f\""));
    T_CHECK(canon_is("\"\\u00e9\"", "\"é\""));
    T_CHECK(!canon_same("\"é\"", "\"e\""));
    /* Documented limit: cJSON ends a decoded string at U+0000. */
    T_CHECK(canon_same("\"a\\u0000b\"", "\"a\""));
    T_CHECK(canon_same("{\"a\\u0000b\":1}", "{\"a\":1}"));
}

static void test_duplicates(void)
{
    T_CHECK(canon_same("{\"a\":1,\"a\":2}", "{\"a\":2}"));
    T_CHECK(canon_is("{\"a\":1,\"b\":0,\"a\":3}", "{\"a\":3,\"b\":0}"));
    T_CHECK(canon_is("{\"x\":{\"a\":[1],\"a\":{\"z\":1,\"z\":2}}}", "{\"x\":{\"a\":{\"z\":2}}}"));
    T_CHECK(!canon_same("{\"a\":1,\"a\":2}", "{\"a\":1}"));
    /*
     * The keys of a body naming a member twice are its own (repeated: never cached): the
     * upstream's parser may read the first copy. They matched the body with the last.
     */
    static const char *const twice[] = {
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"evil\"}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"evil\","
        "\"content\":\"hi\"}]}",
        "{\"model\":\"x\",\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"model\":\"m\",\"stream\":true,\"stream\":false,\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}]}",
    };
    const char *plain = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct canon_keys kp, k1, k2;
    seed_keys(plain, true, &kp);
    T_CHECK(!kp.lossy && !kp.repeated);
    for (size_t i = 0; i < PC_ARRAY_LEN(twice); i++) {
        seed_keys(twice[i], true, &k1);
        seed_keys(twice[i], true, &k2);
        T_CHECK(k1.repeated && !k1.lossy);
        T_CHECK(memcmp(k1.exact, kp.exact, PC_SHA256_LEN) != 0);
        T_CHECK(memcmp(k1.partition, kp.partition, PC_SHA256_LEN) != 0);
        T_CHECK(memcmp(k1.exact, k2.exact, PC_SHA256_LEN) != 0);
        canon_keys_free(&k1);
        canon_keys_free(&k2);
    }
    canon_keys_free(&kp);
    /* Names alike but for case or escapes: "mod\u0065l" is "model" (a repeat) */
    seed_keys("{\"model\":\"m\",\"mod\\u0065l\":\"m\"}", true, &k1);
    T_CHECK(k1.repeated);
    canon_keys_free(&k1);
    seed_keys("{\"model\":\"m\",\"Model\":\"m\"}", true, &k1);
    T_CHECK(!k1.repeated);
    canon_keys_free(&k1);
}

/* Canonical output is JSON, and canonicalising it again changes nothing. */
static void test_valid_and_idempotent(void)
{
    static const char *const inputs[] = {
        "{\"b\":[1.5,-0,1e400,\"\\u0001\"],\"a\":{\"\\n\":null}}",
        "[0.30000000000000004,5e-324,1e-7,123456789012345678901234567890]",
        "{\"k\\\"ey\":\"v\\\\al\",\"k\":\"\xff\xfe\"}",
        "\"plain\"",
        "true",
        BASE,
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(inputs); i++) {
        char *once = canon_of(inputs[i]);
        T_CHECK(once != NULL);
        char *twice = once ? canon_of(once) : NULL;
        T_CHECK(twice != NULL);
        if (once && twice)
            T_CHECK_STR(twice, once);
        free(once);
        free(twice);
    }
}

static void test_deep_nesting(void)
{
    size_t depth = 998; /* below CJSON_NESTING_LIMIT */
    struct pc_buf in = PC_BUF_INIT, want = PC_BUF_INIT;
    for (size_t i = 0; i < depth; i++)
        pc_buf_append_str(&in, i % 2 ? "[ " : "{\"k\" : ");
    pc_buf_append_str(&in, "1");
    for (size_t i = depth; i-- > 0;)
        pc_buf_append_str(&in, i % 2 ? "]" : "}");
    for (size_t i = 0; i < depth; i++)
        pc_buf_append_str(&want, i % 2 ? "[" : "{\"k\":");
    pc_buf_append_str(&want, "1");
    for (size_t i = depth; i-- > 0;)
        pc_buf_append_str(&want, i % 2 ? "]" : "}");
    T_CHECK(canon_is(pc_buf_cstr(&in), pc_buf_cstr(&want)));
    pc_buf_free(&in);
    pc_buf_free(&want);
}

/* A tree built in code, not parsed: NULL-safe and the same rules. */
static void test_built_tree(void)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "z", 2.0);
    cJSON_AddStringToObject(o, "a", "x");
    cJSON_AddItemToObject(o, "m", cJSON_CreateArray());
    struct pc_buf b = PC_BUF_INIT;
    canon_json(o, &b);
    T_CHECK_STR(pc_buf_cstr(&b), "{\"a\":\"x\",\"m\":[],\"z\":2}");
    pc_buf_reset(&b);
    canon_json(NULL, &b);
    T_CHECK_STR(pc_buf_cstr(&b), "null");
    pc_buf_free(&b);
    cJSON_Delete(o);
}

/* --- keys ---------------------------------------------------------------- */

static void test_excluded_fields(void)
{
    static const char *const excluded[] = {
        "stream",           "stream_options",    "user", "metadata", "store", "service_tier",
        "prompt_cache_key", "safety_identifier",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(excluded); i++)
        T_CHECK(canon_field_excluded(excluded[i]));
    T_CHECK(!canon_field_excluded("model"));
    T_CHECK(!canon_field_excluded("Stream"));
    T_CHECK(!canon_field_excluded("streams"));
    T_CHECK(!canon_field_excluded(""));
    T_CHECK(!canon_field_excluded(NULL));

    static const char *const same[] = {
        BASE_HEAD ",\"stream\":true}",
        BASE_HEAD ",\"stream\":false}",
        BASE_HEAD ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
        BASE_HEAD ",\"user\":\"alice\"}",
        BASE_HEAD ",\"metadata\":{\"trace\":\"abc\"}}",
        BASE_HEAD ",\"store\":true,\"service_tier\":\"auto\"}",
        BASE_HEAD ",\"prompt_cache_key\":\"k1\",\"safety_identifier\":\"s\"}",
        "{\"messages\":[{\"content\":\"hi\",\"role\":\"user\"}],\"model\":\"gpt-4o\"}",
        "{ \"model\" : \"gpt-4o\" , \"messages\" : [ { \"role\" : \"user\" , \"content\" : "
        "\"h\\u0069\" } ] }",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(same); i++) {
        bool eq = exact_eq(&chat, BASE, &chat, same[i]);
        if (!eq)
            fprintf(stderr, "  key changed by: %s\n", same[i]);
        T_CHECK(eq);
    }
}

/*
 * stream_options.continuous_usage_stats (vLLM, SGLang: usage in every chunk) changes what a
 * stream carries: it is in the keys when on, the rest of stream_options never is.
 */
static void test_continuous_usage_stats(void)
{
#define CUS(v)                                                               \
    BASE_HEAD ",\"stream\":true,\"stream_options\":{\"include_usage\":true," \
              "\"continuous_usage_stats\":" v "}}"
    T_CHECK(!exact_eq(&chat, BASE, &chat, CUS("true")));
    T_CHECK(!part_eq(&chat, BASE, CUS("true")));
    T_CHECK(exact_eq(&chat, CUS("true"), &chat,
                     BASE_HEAD ",\"stream_options\":{\"continuous_usage_stats\":1}}"));
    T_CHECK(exact_eq(&chat, BASE, &chat, CUS("false")));
    T_CHECK(exact_eq(&chat, BASE, &chat, CUS("null")));
    T_CHECK(exact_eq(&chat, BASE, &chat, BASE_HEAD ",\"stream_options\":null}"));
    T_CHECK(exact_eq(&chat, BASE, &chat, BASE_HEAD ",\"stream_options\":[1]}"));
#undef CUS
}

/* Anthropic tools: eager_input_streaming changes only the delivery; the rest of a tool counts. */
static void test_tool_transport_fields(void)
{
    static const struct req msgs = {API_MESSAGES, NULL, NULL, NULL};
#define AN_TOOLS(tool)                                                                             \
    "{\"model\":\"claude\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" \
    ","                                                                                            \
    "\"tools\":[" tool "]}"
#define AN_TOOL "{\"name\":\"w\",\"input_schema\":{\"type\":\"object\"}"
    const char *plain = AN_TOOLS(AN_TOOL "}");
    const char *eager = AN_TOOLS(AN_TOOL ",\"eager_input_streaming\":true}");
    T_CHECK(exact_eq(&msgs, plain, &msgs, eager));
    T_CHECK(part_eq(&msgs, plain, eager));
    T_CHECK(exact_eq(&msgs, plain, &msgs, AN_TOOLS(AN_TOOL ",\"eager_input_streaming\":false}")));
    T_CHECK(!exact_eq(&msgs, plain, &msgs, AN_TOOLS(AN_TOOL ",\"description\":\"d\"}")));
    T_CHECK(!exact_eq(&msgs, plain, &msgs, AN_TOOLS(AN_TOOL ",\"eager\":true}")));
    /* only Anthropic's tools: elsewhere the member is the upstream's to judge */
    T_CHECK(!exact_eq(&chat, plain, &chat, eager));
#undef AN_TOOL
#undef AN_TOOLS
}

static void test_answer_changing_fields(void)
{
    static const char *const differ[] = {
        "{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi!\"}]}",
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"system\",\"content\":\"hi\"}]}",
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":\"b\"}]"
        "}",
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"hi\"}]}]}",
        BASE_HEAD ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
        BASE_HEAD ",\"tool_choice\":\"auto\"}",
        BASE_HEAD ",\"temperature\":0}",
        BASE_HEAD ",\"temperature\":0.7}",
        BASE_HEAD ",\"top_p\":0.9}",
        BASE_HEAD ",\"max_tokens\":10}",
        BASE_HEAD ",\"seed\":42}",
        BASE_HEAD ",\"response_format\":{\"type\":\"json_object\"}}",
        BASE_HEAD ",\"n\":2}",
        BASE_HEAD ",\"stop\":[\"\\n\"]}",
        BASE_HEAD ",\"logprobs\":true}",
        /* Excluded names are excluded only at the top level. */
        BASE_HEAD ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                  "{\"properties\":{\"user\":{\"type\":\"string\"}}}}}]}",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(differ); i++) {
        bool eq = exact_eq(&chat, BASE, &chat, differ[i]);
        if (eq)
            fprintf(stderr, "  key not changed by: %s\n", differ[i]);
        T_CHECK(!eq);
    }
    T_CHECK(!exact_eq(&chat, BASE_HEAD ",\"temperature\":0.7}", &chat,
                      BASE_HEAD ",\"temperature\":0.70000001}"));
    T_CHECK(exact_eq(&chat, BASE_HEAD ",\"temperature\":0.7}", &chat,
                     BASE_HEAD ",\"temperature\":0.70}"));
    T_CHECK(
        exact_eq(&chat, BASE_HEAD ",\"max_tokens\":10}", &chat, BASE_HEAD ",\"max_tokens\":1e1}"));
}

static void test_tenant(void)
{
    struct req alice = {API_CHAT, "authorization=Bearer sk-alice", NULL, NULL};
    struct req alice2 = {API_CHAT, "authorization=Bearer sk-alice", NULL, NULL};
    struct req bob = {API_CHAT, "authorization=Bearer sk-bob", NULL, NULL};
    T_CHECK(exact_eq(&alice, BASE, &alice2, BASE));
    T_CHECK(!exact_eq(&alice, BASE, &bob, BASE));

    unsigned char a[PC_SHA256_LEN], b[PC_SHA256_LEN], want[PC_SHA256_LEN];
    canon_tenant(NULL, a);
    canon_tenant("", b);
    T_CHECK(memcmp(a, b, PC_SHA256_LEN) == 0);
    pc_sha256("pc-tenant-1\n", 12, want);
    T_CHECK(memcmp(a, want, PC_SHA256_LEN) == 0);
    canon_tenant("x-api-key=k", a);
    pc_sha256("pc-tenant-1\nx-api-key=k", 23, want);
    T_CHECK(memcmp(a, want, PC_SHA256_LEN) == 0);

    /* A NULL tenant in canon_input is the anonymous tenant. */
    cJSON *v = cJSON_Parse(BASE);
    unsigned char anon[PC_SHA256_LEN];
    canon_tenant(NULL, anon);
    struct canon_input in1 = {API_CHAT, v, NULL, NULL, NULL, false, NULL, 0};
    struct canon_input in2 = {API_CHAT, v, anon, NULL, NULL, false, NULL, 0};
    struct canon_keys k1, k2;
    canon_keys(&in1, &k1);
    canon_keys(&in2, &k2);
    T_CHECK(memcmp(k1.exact, k2.exact, PC_SHA256_LEN) == 0);
    canon_keys_free(&k1);
    canon_keys_free(&k2);
    cJSON_Delete(v);
}

static void test_namespace_variant_endpoint(void)
{
    struct req none = {API_CHAT, NULL, NULL, NULL};
    struct req empty = {API_CHAT, NULL, "", ""};
    struct req ns_a = {API_CHAT, NULL, "a", NULL};
    struct req ns_b = {API_CHAT, NULL, "b", NULL};
    struct req var = {API_CHAT, NULL, NULL, "anthropic-version=2023-06-01\n"};
    struct req ab_ = {API_CHAT, NULL, "ab", ""};
    struct req a_b = {API_CHAT, NULL, "a", "b"};
    struct req msgs = {API_MESSAGES, NULL, NULL, NULL};
    T_CHECK(exact_eq(&none, BASE, &empty, BASE));
    T_CHECK(!exact_eq(&none, BASE, &ns_a, BASE));
    T_CHECK(!exact_eq(&ns_a, BASE, &ns_b, BASE));
    T_CHECK(!exact_eq(&none, BASE, &var, BASE));
    T_CHECK(!exact_eq(&ab_, BASE, &a_b, BASE)); /* fields cannot shift into each other */
    T_CHECK(!exact_eq(&chat, BASE, &msgs, BASE));
}

static void put_field(struct pc_buf *b, const void *p, size_t n)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
    pc_buf_append(b, len, 8);
    pc_buf_append(b, p, n);
}

/* The documented digest layout, rebuilt independently. */
static void test_key_layout(void)
{
    unsigned char tenant[PC_SHA256_LEN], want[PC_SHA256_LEN];
    canon_tenant("t", tenant);
    const char *body = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                       "\"content\":\"q\"}]}";
    const char *canon = "{\"messages\":[{\"content\":\"q\",\"role\":\"user\"}],\"model\":\"m\"}";
    const char *part = "{\"messages\":[{\"role\":\"user\"}],\"model\":\"m\"}";
    struct pc_buf b = PC_BUF_INIT;
    put_field(&b, "pc-exact-1", 10);
    put_field(&b, tenant, PC_SHA256_LEN);
    put_field(&b, "ns", 2);
    put_field(&b, "chat", 4);
    put_field(&b, "", 0);
    put_field(&b, canon, strlen(canon));
    pc_sha256(b.data, b.len, want);

    cJSON *v = cJSON_Parse(body);
    struct canon_input in = {API_CHAT, v, tenant, "ns", NULL, false, NULL, 0};
    struct canon_keys k;
    canon_keys(&in, &k);
    T_CHECK(memcmp(k.exact, want, PC_SHA256_LEN) == 0);

    pc_buf_reset(&b);
    put_field(&b, "pc-part-1", 9);
    put_field(&b, tenant, PC_SHA256_LEN);
    put_field(&b, "ns", 2);
    put_field(&b, "chat", 4);
    put_field(&b, "", 0);
    put_field(&b, part, strlen(part));
    pc_sha256(b.data, b.len, want);
    T_CHECK(memcmp(k.partition, want, PC_SHA256_LEN) == 0);
    T_CHECK_STR(k.last_user_text, "q");
    canon_keys_free(&k);
    T_CHECK(k.last_user_text == NULL);

    /* exact_only: the same exact key, nothing else computed. */
    struct canon_keys e;
    unsigned char zero[PC_SHA256_LEN] = {0};
    in.exact_only = true;
    canon_keys(&in, &e);
    canon_keys(&(struct canon_input){API_CHAT, v, tenant, "ns", NULL, false, NULL, 0}, &k);
    T_CHECK(memcmp(e.exact, k.exact, PC_SHA256_LEN) == 0);
    T_CHECK(memcmp(e.partition, zero, PC_SHA256_LEN) == 0);
    T_CHECK(e.last_user_text == NULL);
    canon_keys_free(&e);
    canon_keys_free(&k);
    pc_buf_free(&b);
    cJSON_Delete(v);
}

#define SYS               "{\"role\":\"system\",\"content\":\"be brief\"}"
#define U1                "{\"role\":\"user\",\"content\":\"what is 2+2?\"}"
#define A1                "{\"role\":\"assistant\",\"content\":\"4\"}"
#define CHAT(msgs, extra) "{\"model\":\"gpt-4o\"" extra ",\"messages\":[" msgs "]}"

static void test_partition_chat(void)
{
    const char *a = CHAT(SYS "," U1 "," A1 ",{\"role\":\"user\",\"content\":\"and 3+3?\"}", "");
    const char *b =
        CHAT(SYS "," U1 "," A1 ",{\"role\":\"user\",\"content\":\"what about 3+3\"}", "");
    T_CHECK(part_eq(&chat, a, b));
    T_CHECK(!exact_eq(&chat, a, &chat, b));
    /* Excluded fields leave the partition alone too. */
    T_CHECK(part_eq(&chat, a,
                    CHAT(SYS "," U1 "," A1 ",{\"role\":\"user\",\"content\":\"x\"}",
                         ",\"stream\":true,\"user\":\"u\"")));
    /* Earlier turns, system prompt, model, parameters all count. */
    T_CHECK(!part_eq(&chat, a,
                     CHAT(SYS "," U1 ",{\"role\":\"assistant\",\"content\":\"5\"},{\"role\":"
                              "\"user\",\"content\":\"and 3+3?\"}",
                          "")));
    T_CHECK(!part_eq(&chat, a,
                     CHAT("{\"role\":\"system\",\"content\":\"be long\"}," U1 "," A1
                          ",{\"role\":\"user\",\"content\":\"and 3+3?\"}",
                          "")));
    T_CHECK(!part_eq(&chat, a,
                     "{\"model\":\"gpt-4o-mini\",\"messages\":[" SYS "," U1 "," A1
                     ",{\"role\":\"user\",\"content\":\"and 3+3?\"}]}"));
    T_CHECK(!part_eq(&chat, a,
                     CHAT(SYS "," U1 "," A1 ",{\"role\":\"user\",\"content\":\"and 3+3?\"}",
                          ",\"temperature\":1")));
    /* A conversation ending on the previous turn is a different partition. */
    T_CHECK(!part_eq(&chat, a, CHAT(SYS "," U1 "," A1, "")));
    /* The removed turn's other fields (name) still count. */
    T_CHECK(!part_eq(&chat, a,
                     CHAT(SYS "," U1 "," A1
                              ",{\"role\":\"user\",\"name\":\"bob\",\"content\":\"and 3+3?\"}",
                          "")));
    /* No trailing user turn: nothing removed, so the last turn counts. */
    T_CHECK(!part_eq(&chat, CHAT(U1 "," A1, ""),
                     CHAT(U1 ",{\"role\":\"assistant\",\"content\":\"5\"}", "")));
    /* The partition is not the exact key. */
    struct canon_keys k;
    keys_of(&chat, a, &k);
    T_CHECK(memcmp(k.exact, k.partition, PC_SHA256_LEN) != 0);
    canon_keys_free(&k);
}

#define TURN(text) CHAT(SYS ",{\"role\":\"user\",\"content\":\"" text "\"}", "")

/* A last user turn of several lines: its line layout is part of the partition. */
static void test_partition_layout(void)
{
    /* One line: the wording alone is left out, as before; edge blank lines do not count. */
    T_CHECK(part_eq(&chat, TURN("fix this"), TURN("a b")));
    T_CHECK(part_eq(&chat, TURN("fix this"), TURN("\\n  fix this\\n\\n")));
    /* Lines apart from words on one line, or lines broken elsewhere. */
    T_CHECK(!part_eq(&chat, TURN("roses are red violets are blue"),
                     TURN("roses are red\\nviolets are blue")));
    T_CHECK(!part_eq(&chat, TURN("a\\nb c"), TURN("a\\nb\\nc")));
    T_CHECK(!part_eq(&chat, TURN("a\\nb"), TURN("a\\n\\nb")));
    T_CHECK(!part_eq(&chat, TURN("a b"), TURN("a\\rb"))); /* a lone CR breaks the line too */
    T_CHECK(part_eq(&chat, TURN("a\\rb"), TURN("c\\r\\nd")));
    T_CHECK(!part_eq(&chat, TURN("a\\r\\nb"), TURN("a\\r\\rb")));
    /* Python: the same words indented otherwise are another program. */
    const char *p1 = TURN("if x:\\n    f()\\n    g()");
    T_CHECK(!part_eq(&chat, p1, TURN("if x:\\n    f()\\ng()")));
    T_CHECK(!part_eq(&chat, p1, TURN("if x:\\n\\tf()\\n\\tg()")));
    /* The same layout matches whatever the words, CRLF or not, as text parts or a string. */
    T_CHECK(part_eq(&chat, p1, TURN("while y:\\r\\n    h(1)\\r\\n    k()  ")));
    T_CHECK(part_eq(&chat, TURN("a\\nb"),
                    CHAT(SYS ",{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":"
                             "\"x\"},{\"type\":\"text\",\"text\":\"y\"}]}",
                         "")));
    /* The turn's text is still what is embedded, layout and all. */
    struct canon_keys k;
    keys_of(&chat, p1, &k);
    T_CHECK_STR(k.last_user_text, "if x:\n    f()\n    g()");
    canon_keys_free(&k);
}

static void test_partition_other_endpoints(void)
{
    struct req msgs = {API_MESSAGES, NULL, NULL, NULL};
    const char *a = "{\"model\":\"claude\",\"system\":\"s\",\"max_tokens\":9,\"messages\":[{"
                    "\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"}]}]}";
    const char *b = "{\"model\":\"claude\",\"system\":\"s\",\"max_tokens\":9,\"messages\":[{"
                    "\"role\":\"user\",\"content\":\"two\"}]}";
    const char *c = "{\"model\":\"claude\",\"system\":\"t\",\"max_tokens\":9,\"messages\":[{"
                    "\"role\":\"user\",\"content\":\"two\"}]}";
    T_CHECK(part_eq(&msgs, a, b));
    T_CHECK(!part_eq(&msgs, b, c));

    struct req comp = {API_COMPLETIONS, NULL, NULL, NULL};
    T_CHECK(
        part_eq(&comp, "{\"model\":\"m\",\"prompt\":\"a\"}", "{\"model\":\"m\",\"prompt\":\"b\"}"));
    T_CHECK(!part_eq(&comp, "{\"model\":\"m\",\"prompt\":\"a\"}",
                     "{\"model\":\"m\",\"prompt\":\"a\",\"suffix\":\"x\"}"));
    T_CHECK(!exact_eq(&comp, "{\"model\":\"m\",\"prompt\":\"a\"}", &comp,
                      "{\"model\":\"m\",\"prompt\":\"b\"}"));

    struct req emb = {API_EMBEDDINGS, NULL, NULL, NULL};
    T_CHECK(
        part_eq(&emb, "{\"model\":\"e\",\"input\":\"a\"}", "{\"model\":\"e\",\"input\":[\"b\"]}"));
    T_CHECK(!part_eq(&emb, "{\"model\":\"e\",\"input\":\"a\"}",
                     "{\"model\":\"e\",\"input\":\"a\",\"dimensions\":8}"));
    /* "messages" is only special on the chat endpoints. */
    T_CHECK(!part_eq(&comp, "{\"model\":\"m\",\"prompt\":\"a\",\"messages\":[" U1 "]}",
                     "{\"model\":\"m\",\"prompt\":\"a\",\"messages\":[" A1 "]}"));
}

/* last_user_text of body on endpoint e; compared with want (NULL: none). */
static bool text_is(enum api_endpoint e, const char *body, const char *want)
{
    struct req r = {e, NULL, NULL, NULL};
    struct canon_keys k;
    keys_of(&r, body, &k);
    bool ok = want == NULL ? k.last_user_text == NULL
                           : k.last_user_text != NULL && strcmp(k.last_user_text, want) == 0;
    if (!ok)
        fprintf(stderr, "  last_user_text(%s)\n    got:  %s\n    want: %s\n", body,
                k.last_user_text ? k.last_user_text : "(null)", want ? want : "(null)");
    canon_keys_free(&k);
    return ok;
}

static void test_last_user_text(void)
{
    T_CHECK(text_is(API_CHAT, CHAT(SYS "," U1, ""), "what is 2+2?"));
    T_CHECK(text_is(API_CHAT,
                    CHAT("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                         "{\"type\":\"text\",\"text\":\"b\"}]}",
                         ""),
                    "a\nb"));
    T_CHECK(text_is(API_MESSAGES,
                    CHAT("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\","
                         "\"cache_control\":{\"type\":\"ephemeral\"}}]}",
                         ""),
                    "x"));
    T_CHECK(text_is(API_CHAT, CHAT(U1 "," A1, ""), NULL));
    T_CHECK(text_is(API_CHAT, "{\"model\":\"m\"}", NULL));
    T_CHECK(text_is(API_CHAT, CHAT("{\"role\":\"user\",\"content\":[]}", ""), NULL));
    T_CHECK(text_is(API_CHAT, CHAT("{\"role\":\"user\",\"content\":null}", ""), NULL));
    /* White space alone is no text to match by meaning (embedding APIs refuse it). */
    T_CHECK(text_is(API_CHAT, CHAT("{\"role\":\"user\",\"content\":\"\"}", ""), NULL));
    T_CHECK(text_is(API_CHAT, CHAT("{\"role\":\"user\",\"content\":\" \\n\\t \"}", ""), NULL));
    T_CHECK(text_is(API_CHAT, CHAT("{\"role\":\"user\",\"content\":\" ? \"}", ""), " ? "));
    /* A turn with an image (or any non-text part) has no text to match on. */
    T_CHECK(text_is(API_CHAT,
                    CHAT("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is "
                         "this?\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}]}",
                         ""),
                    NULL));
    T_CHECK(text_is(API_MESSAGES,
                    CHAT("{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
                         "\"tool_use_id\":\"t\",\"content\":\"42\"}]}",
                         ""),
                    NULL));
    T_CHECK(text_is(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"once upon\"}", "once upon"));
    T_CHECK(text_is(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[\"a\",\"b\"]}", NULL));
    T_CHECK(text_is(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"vec me\"}", "vec me"));
    T_CHECK(text_is(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":[1,2]}", NULL));
    T_CHECK(text_is(API_NONE, CHAT(U1, ""), NULL));
    /* An answer that repeats the prompt is never another prompt's: no text to match on. */
    static const char *const repeats[] = {
        "\"echo\":true",         "\"echo\":1",
        "\"echo\":\"yes\"",      "\"prompt_logprobs\":0",
        "\"prompt_logprobs\":5", "\"return_token_ids\":true",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(repeats); i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"once upon\",%s}", repeats[i]);
        T_CHECK(text_is(API_COMPLETIONS, body, NULL));
        snprintf(body, sizeof body, "{\"model\":\"m\",%s,\"messages\":[" U1 "]}", repeats[i]);
        T_CHECK(text_is(API_CHAT, body, NULL));
    }
    static const char *const plain[] = {
        "\"echo\":false",
        "\"echo\":0",
        "\"echo\":null",
        "\"prompt_logprobs\":null",
        "\"return_token_ids\":false",
        "\"logprobs\":true",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(plain); i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"model\":\"m\",\"prompt\":\"once upon\",%s}", plain[i]);
        T_CHECK(text_is(API_COMPLETIONS, body, "once upon"));
    }
}

/* Bodies that are not objects still get keys (validation is api.c's job). */
static void test_odd_bodies(void)
{
    T_CHECK(!exact_eq(&chat, "[1]", &chat, "[2]"));
    T_CHECK(!exact_eq(&chat, "[1.0]", &chat, "[1]"));
    T_CHECK(part_eq(&chat, "{\"messages\":5}", "{\"messages\":5}"));
    T_CHECK(!part_eq(&chat, "{\"messages\":[5]}", "{\"messages\":[6]}"));
    T_CHECK(text_is(API_CHAT, "{\"messages\":[5]}", NULL));
    T_CHECK(canon_keys(NULL, &(struct canon_keys){{0}, {0}, NULL, false, false}) == -1);
}

/* --- Responses API ----------------------------------------------------------- */

#define RESP_HEAD "{\"model\":\"gpt-4.1\",\"instructions\":\"Be brief.\","
#define UITEM(t)  "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"" t "\"}]}"

static void test_responses_keys(void)
{
    struct req resp = {API_RESPONSES, NULL, NULL, NULL};
    const char *a = RESP_HEAD "\"input\":\"what is 2+2?\"}";
    /* Delivery only: stream and stream_options. */
    T_CHECK(exact_eq(&resp, a, &resp,
                     RESP_HEAD "\"input\":\"what is 2+2?\",\"stream\":true,"
                               "\"stream_options\":{\"include_obfuscation\":false}}"));
    /* Everything the response echoes, or that decides where its id resolves, counts. */
    static const char *const extra[] = {
        "\"store\":false",
        "\"store\":true",
        "\"user\":\"u1\"",
        "\"metadata\":{\"k\":\"v\"}",
        "\"service_tier\":\"flex\"",
        "\"prompt_cache_key\":\"p\"",
        "\"safety_identifier\":\"s\"",
        "\"previous_response_id\":\"resp_1\"",
        "\"reasoning\":{\"effort\":\"high\"}",
        "\"tools\":[{\"type\":\"web_search\"}]",
        "\"include\":[\"reasoning.encrypted_content\"]",
        "\"truncation\":\"auto\"",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(extra); i++) {
        char b[512];
        snprintf(b, sizeof(b), RESP_HEAD "\"input\":\"what is 2+2?\",%s}", extra[i]);
        T_CHECK(!exact_eq(&resp, a, &resp, b));
        T_CHECK(!part_eq(&resp, a, b));
    }
    /* The same body on another endpoint is another key. */
    struct req chat_ep = {API_CHAT, NULL, NULL, NULL};
    T_CHECK(!exact_eq(&resp, a, &chat_ep, a));
}

static void test_responses_partition(void)
{
    struct req resp = {API_RESPONSES, NULL, NULL, NULL};
    const char *a = RESP_HEAD "\"input\":\"what is 2+2?\"}";
    /* A string input is a lone user message: its wording is left out of the partition. */
    T_CHECK(part_eq(&resp, a, RESP_HEAD "\"input\":\"two plus two?\"}"));
    T_CHECK(part_eq(&resp, a, RESP_HEAD "\"input\":[" UITEM("two plus two?") "]}"));
    T_CHECK(!part_eq(&resp, a,
                     "{\"model\":\"gpt-4.1\",\"instructions\":\"Be long.\","
                     "\"input\":\"what is 2+2?\"}"));
    /* Earlier items count; the trailing user message's other members too. */
    const char *two = RESP_HEAD "\"input\":[" UITEM("hi") ",{\"role\":\"assistant\",\"content\":"
                                                          "\"hello\"}," UITEM("what is 2+2?") "]}";
    T_CHECK(!part_eq(&resp, a, two));
    T_CHECK(part_eq(&resp, two,
                    RESP_HEAD "\"input\":[" UITEM("hi") ",{\"role\":\"assistant\",\"content\":"
                                                        "\"hello\"}," UITEM("2+2 is?") "]}"));
    T_CHECK(!part_eq(&resp, two,
                     RESP_HEAD "\"input\":[" UITEM("yo") ",{\"role\":\"assistant\",\"content\":"
                                                         "\"hello\"}," UITEM("what is 2+2?") "]}"));
    T_CHECK(!part_eq(&resp, a,
                     RESP_HEAD "\"input\":[{\"type\":\"message\",\"role\":\"user\","
                               "\"content\":\"what is 2+2?\"}]}"));
    /* A trailing item that is not a user message is not left out. */
    const char *out1 = RESP_HEAD "\"input\":[{\"type\":\"function_call_output\","
                                 "\"call_id\":\"c\",\"output\":\"1\"}]}";
    const char *out2 = RESP_HEAD "\"input\":[{\"type\":\"function_call_output\","
                                 "\"call_id\":\"c\",\"output\":\"2\"}]}";
    T_CHECK(!part_eq(&resp, out1, out2));
}

static void test_responses_last_user_text(void)
{
    T_CHECK(text_is(API_RESPONSES, RESP_HEAD "\"input\":\"hello there\"}", "hello there"));
    T_CHECK(text_is(API_RESPONSES, RESP_HEAD "\"input\":[" UITEM("a") "," UITEM("b") "]}", "b"));
    T_CHECK(text_is(API_RESPONSES,
                    RESP_HEAD "\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":"
                              "[{\"type\":\"input_text\",\"text\":\"x\"},{\"type\":\"input_text\","
                              "\"text\":\"y\"}]}]}",
                    "x\ny"));
    T_CHECK(text_is(API_RESPONSES,
                    RESP_HEAD "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                              "\"input_image\",\"image_url\":\"u\"}]}]}",
                    NULL));
    T_CHECK(text_is(API_RESPONSES,
                    RESP_HEAD "\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\","
                              "\"output\":\"1\"}]}",
                    NULL));
    T_CHECK(text_is(API_RESPONSES,
                    RESP_HEAD "\"input\":[{\"type\":\"item_reference\",\"role\":\"user\","
                              "\"id\":\"msg_1\"}]}",
                    NULL));
    T_CHECK(text_is(API_RESPONSES, RESP_HEAD "\"input\":[]}", NULL));
    T_CHECK(text_is(API_RESPONSES, "{\"model\":\"m\"}", NULL));
}

int main(void)
{
    T_RUN(test_numbers);
    T_RUN(test_number_literals);
    T_RUN(test_big_integer_keys);
    T_RUN(test_float_spelling_keys);
    T_RUN(test_key_order);
    T_RUN(test_key_order_kept);
    T_RUN(test_whitespace);
    T_RUN(test_strings);
    T_RUN(test_duplicates);
    T_RUN(test_valid_and_idempotent);
    T_RUN(test_deep_nesting);
    T_RUN(test_built_tree);
    T_RUN(test_excluded_fields);
    T_RUN(test_continuous_usage_stats);
    T_RUN(test_tool_transport_fields);
    T_RUN(test_answer_changing_fields);
    T_RUN(test_tenant);
    T_RUN(test_namespace_variant_endpoint);
    T_RUN(test_key_layout);
    T_RUN(test_partition_chat);
    T_RUN(test_partition_layout);
    T_RUN(test_partition_other_endpoints);
    T_RUN(test_last_user_text);
    T_RUN(test_odd_bodies);
    T_RUN(test_responses_keys);
    T_RUN(test_responses_partition);
    T_RUN(test_responses_last_user_text);
    T_DONE();
}
