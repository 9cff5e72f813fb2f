/*
 * test_api.c - endpoint knowledge (src/api.c): paths, validation messages,
 * stream flags, usage extraction for both dialects, and error bodies that
 * parse back into each API's shape.
 */
#include "pc_api.h"
#include "pc_dialect.h"
#include "t.h"

/* --- helpers ------------------------------------------------------------- */

/* Validation result of json on e; msg receives the message. */
static int validate(enum api_endpoint e, const char *json, char *msg, size_t len)
{
    cJSON *v = cJSON_Parse(json);
    msg[0] = '\0';
    int rc = api_validate(e, v, msg, len);
    cJSON_Delete(v);
    return rc;
}

static bool accepts(enum api_endpoint e, const char *json)
{
    char msg[256];
    int rc = validate(e, json, msg, sizeof(msg));
    if (rc != 0)
        fprintf(stderr, "  rejected %s: %s\n", json, msg);
    return rc == 0;
}

/* Whether json is refused on e with exactly want. */
static bool rejects(enum api_endpoint e, const char *json, const char *want)
{
    char msg[256];
    int rc = validate(e, json, msg, sizeof(msg));
    bool ok = rc == -1 && strcmp(msg, want) == 0;
    if (!ok)
        fprintf(stderr, "  %s: rc %d, msg \"%s\", want \"%s\"\n", json, rc, msg, want);
    return ok;
}

static bool wants_stream(enum api_endpoint e, const char *json)
{
    cJSON *v = cJSON_Parse(json);
    bool r = api_wants_stream(e, v);
    cJSON_Delete(v);
    return r;
}

static bool include_usage(enum api_endpoint e, const char *json)
{
    cJSON *v = cJSON_Parse(json);
    bool r = api_stream_include_usage(e, v);
    cJSON_Delete(v);
    return r;
}

static struct api_usage usage(enum api_endpoint e, const char *json)
{
    struct api_usage u;
    memset(&u, 0x5a, sizeof(u)); /* must be fully overwritten */
    cJSON *v = cJSON_Parse(json);
    dialect_usage(e, v, &u);
    cJSON_Delete(v);
    return u;
}

/* Error body parsed back; NULL if it is not JSON. The caller deletes it. */
static cJSON *error_json(enum api_endpoint e, int status, const char *message)
{
    struct pc_buf b = PC_BUF_INIT;
    dialect_error_body(dialect_of(e), status, message, &b);
    cJSON *v = cJSON_ParseWithLength(b.data, b.len);
    pc_buf_free(&b);
    return v;
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b != NULL)
        v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_GetStringValue(v);
}

#define MSG    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define CHATOK "{\"model\":\"m\"," MSG "}"

/* --- tests --------------------------------------------------------------- */

static void test_paths(void)
{
    T_CHECK_INT(api_endpoint_from_path("/v1/chat/completions"), API_CHAT);
    T_CHECK_INT(api_endpoint_from_path("/v1/completions"), API_COMPLETIONS);
    T_CHECK_INT(api_endpoint_from_path("/v1/embeddings"), API_EMBEDDINGS);
    T_CHECK_INT(api_endpoint_from_path("/v1/messages"), API_MESSAGES);
    T_CHECK_INT(api_endpoint_from_path("/v1/chat/completions/"), API_CHAT);
    T_CHECK_INT(api_endpoint_from_path("/v1/messages/"), API_MESSAGES);
    T_CHECK_INT(api_endpoint_from_path("/v1/messages//"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("/v1/messages/count_tokens"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("/v1/chat"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("/V1/messages"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("v1/messages"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("/v1/models"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path("/"), API_NONE);
    T_CHECK_INT(api_endpoint_from_path(""), API_NONE);
    T_CHECK_INT(api_endpoint_from_path(NULL), API_NONE);

    T_CHECK_STR(dialect_of(API_MESSAGES)->name, "anthropic");
    T_CHECK_STR(dialect_of(API_CHAT)->name, "openai");
    T_CHECK_STR(dialect_of(API_COMPLETIONS)->name, "openai");
    T_CHECK_STR(dialect_of(API_EMBEDDINGS)->name, "openai");
    T_CHECK_STR(dialect_of(API_NONE)->name, "openai");
    T_CHECK_STR(dialect_of(API__COUNT)->name, "openai");
    T_CHECK_STR(dialect_of((enum api_endpoint) - 1)->name, "openai");
    /* The proxy's own errors on the rest of Anthropic's API are Anthropic's. */
    T_CHECK_STR(dialect_of_path("/v1/messages/count_tokens", false)->name, "anthropic");
    T_CHECK_STR(dialect_of_path("/v1/messages/batches/msgbatch_1/results", false)->name,
                "anthropic");
    T_CHECK_STR(dialect_of_path("/v1/complete", false)->name, "anthropic");
    T_CHECK_STR(dialect_of_path("/v1/messages", false)->name, "anthropic");
    T_CHECK_STR(dialect_of_path("/v1/models", true)->name, "anthropic");
    T_CHECK_STR(dialect_of_path("/v1/responses", true)->name, "responses");
    T_CHECK_STR(dialect_of_path("/v1/chat/completions", true)->name, "openai");
    T_CHECK_STR(dialect_of_path("/v1/models", false)->name, "openai");
    T_CHECK_STR(dialect_of_path("/v1/messagesx", false)->name, "openai");
    T_CHECK_STR(dialect_of_path("/v1/completex", false)->name, "openai");
    T_CHECK_STR(dialect_of_path(NULL, false)->name, "openai");
    /* Only OpenAI's streams carry usage just when asked. */
    T_CHECK(dialect_usage_on_request(dialect_of(API_CHAT)));
    T_CHECK(!dialect_usage_on_request(dialect_of(API_MESSAGES)));
    T_CHECK(!dialect_usage_on_request(dialect_of(API_RESPONSES)));
    T_CHECK(api_streams(API_CHAT) && api_streams(API_COMPLETIONS) && api_streams(API_MESSAGES) &&
            api_streams(API_RESPONSES));
    T_CHECK(!api_streams(API_EMBEDDINGS) && !api_streams(API_NONE) && !api_streams(API__COUNT));

    T_CHECK_STR(api_endpoint_name(API_CHAT), "chat");
    T_CHECK_STR(api_endpoint_name(API_COMPLETIONS), "completions");
    T_CHECK_STR(api_endpoint_name(API_EMBEDDINGS), "embeddings");
    T_CHECK_STR(api_endpoint_name(API_MESSAGES), "messages");
    T_CHECK_STR(api_endpoint_name(API_NONE), "other");
    T_CHECK_STR(api_endpoint_name(API__COUNT), "other");
}

static void test_validate_accepts(void)
{
    T_CHECK(accepts(API_CHAT, CHATOK));
    T_CHECK(accepts(API_MESSAGES, "{\"model\":\"claude\",\"max_tokens\":5," MSG "}"));
    T_CHECK(accepts(API_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":true}"));
    T_CHECK(accepts(API_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":false}"));
    T_CHECK(accepts(API_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":null}"));
    T_CHECK(accepts(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"once\"}"));
    T_CHECK(accepts(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":[1,2,3]}"));
    T_CHECK(accepts(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"text\"}"));
    T_CHECK(accepts(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":[\"a\",\"b\"]}"));
    T_CHECK(accepts(API_NONE, "{\"model\":\"x\"}"));
    /* The last duplicate is what the upstream sees. */
    T_CHECK(accepts(API_CHAT, "{\"model\":\"\",\"model\":\"m\"," MSG "}"));

    char small[8];
    cJSON *v = cJSON_Parse(CHATOK);
    T_CHECK(api_validate(API_CHAT, v, small, sizeof(small)) == 0);
    T_CHECK(api_validate(API_CHAT, v, NULL, 0) == 0);
    cJSON_Delete(v);
}

static void test_validate_rejects(void)
{
    const char *obj = "request body must be a JSON object";
    const char *model = "'model' is required and must be a non-empty string";
    const char *msgs = "'messages' must be a non-empty array";
    const char *stream = "'stream' must be a boolean";
    T_CHECK(rejects(API_CHAT, "[" CHATOK "]", obj));
    T_CHECK(rejects(API_CHAT, "\"hello\"", obj));
    T_CHECK(rejects(API_CHAT, "null", obj));
    T_CHECK(rejects(API_CHAT, "{" MSG "}", model));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"\"," MSG "}", model));
    T_CHECK(rejects(API_CHAT, "{\"model\":4," MSG "}", model));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"m\",\"model\":null," MSG "}", model));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"m\"}", msgs));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"m\",\"messages\":[]}", msgs));
    T_CHECK(rejects(API_MESSAGES, "{\"model\":\"m\",\"messages\":{}}", msgs));
    T_CHECK(rejects(API_MESSAGES, "{\"model\":\"m\",\"messages\":\"hi\"}", msgs));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":\"true\"}", stream));
    T_CHECK(rejects(API_CHAT, "{\"model\":\"m\"," MSG ",\"stream\":1}", stream));
    T_CHECK(rejects(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":\"x\",\"stream\":{}}", stream));
    T_CHECK(rejects(API_COMPLETIONS, "{\"model\":\"m\"}",
                    "'prompt' is required and must be a string or an array"));
    T_CHECK(rejects(API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":7}",
                    "'prompt' is required and must be a string or an array"));
    T_CHECK(rejects(API_EMBEDDINGS, "{\"model\":\"e\"}",
                    "'input' is required and must be a string or an array"));
    T_CHECK(rejects(API_EMBEDDINGS, "{\"model\":\"e\",\"input\":{}}",
                    "'input' is required and must be a string or an array"));

    /* The message is truncated to the caller's buffer, never overrun. */
    char small[8];
    cJSON *v = cJSON_Parse("{}");
    T_CHECK(api_validate(API_CHAT, v, small, sizeof(small)) == -1);
    T_CHECK_STR(small, "'model'");
    T_CHECK(api_validate(API_CHAT, v, NULL, 0) == -1);
    T_CHECK(api_validate(API_CHAT, NULL, NULL, 0) == -1);
    cJSON_Delete(v);
}

static void test_stream_flags(void)
{
    T_CHECK(wants_stream(API_CHAT, "{\"stream\":true}"));
    T_CHECK(wants_stream(API_MESSAGES, "{\"stream\":true}"));
    T_CHECK(wants_stream(API_COMPLETIONS, "{\"stream\":true}"));
    T_CHECK(!wants_stream(API_CHAT, "{\"stream\":false}"));
    T_CHECK(!wants_stream(API_CHAT, "{\"stream\":null}"));
    T_CHECK(!wants_stream(API_CHAT, "{}"));
    T_CHECK(!wants_stream(API_CHAT, "{\"stream\":\"true\"}"));
    T_CHECK(!wants_stream(API_EMBEDDINGS, "{\"stream\":true}"));
    T_CHECK(!wants_stream(API_NONE, "{\"stream\":true}"));
    T_CHECK(wants_stream(API_CHAT, "{\"stream\":false,\"stream\":true}"));
    T_CHECK(!wants_stream(API_CHAT, "{\"stream\":true,\"stream\":false}"));
    T_CHECK(!api_wants_stream(API_CHAT, NULL));

    T_CHECK(
        include_usage(API_CHAT, "{\"stream\":true,\"stream_options\":{\"include_usage\":true}}"));
    T_CHECK(include_usage(API_COMPLETIONS, "{\"stream_options\":{\"include_usage\":true}}"));
    T_CHECK(!include_usage(API_CHAT, "{\"stream_options\":{\"include_usage\":false}}"));
    T_CHECK(!include_usage(API_CHAT, "{\"stream_options\":true}"));
    T_CHECK(!include_usage(API_CHAT, "{\"stream\":true}"));
    T_CHECK(include_usage(API_MESSAGES, "{\"stream\":true}"));
    T_CHECK(!include_usage(API_EMBEDDINGS, "{\"stream_options\":{\"include_usage\":true}}"));
}

static void test_model(void)
{
    cJSON *v = cJSON_Parse("{\"model\":\"gpt-4o\"}");
    T_CHECK_STR(api_model(v), "gpt-4o");
    cJSON_Delete(v);
    v = cJSON_Parse("{\"model\":\"a\",\"model\":\"b\"}");
    T_CHECK_STR(api_model(v), "b");
    cJSON_Delete(v);
    v = cJSON_Parse("{\"model\":1}");
    T_CHECK(api_model(v) == NULL);
    cJSON_Delete(v);
    T_CHECK(api_model(NULL) == NULL);
}

static void test_usage_openai(void)
{
    struct api_usage u = usage(API_CHAT, "{\"id\":\"x\",\"usage\":{\"prompt_tokens\":120,"
                                         "\"completion_tokens\":30,\"total_tokens\":150,"
                                         "\"prompt_tokens_details\":{\"cached_tokens\":64}}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 120);
    T_CHECK_INT(u.completion, 30);
    T_CHECK_INT(u.cached, 64);

    u = usage(API_COMPLETIONS, "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 5);
    T_CHECK_INT(u.completion, 7);
    T_CHECK_INT(u.cached, 0);

    u = usage(API_EMBEDDINGS, "{\"usage\":{\"prompt_tokens\":8,\"total_tokens\":8}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 8);
    T_CHECK_INT(u.completion, 0);

    u = usage(API_CHAT, "{\"choices\":[]}");
    T_CHECK(!u.present);
    T_CHECK_INT(u.prompt + u.completion + u.cached, 0);
    u = usage(API_CHAT, "{\"usage\":null}");
    T_CHECK(!u.present);
    u = usage(API_CHAT, "[1]");
    T_CHECK(!u.present);

    /* Garbage counts are 0, huge ones capped, fractions truncated. */
    u = usage(API_CHAT, "{\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":\"7\","
                        "\"prompt_tokens_details\":{\"cached_tokens\":1e300}}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 0);
    T_CHECK_INT(u.completion, 0);
    T_CHECK_INT(u.cached, 0); /* within prompt_tokens: cut to it (pricing_tokens_of's rule) */
    u = usage(API_CHAT, "{\"usage\":{\"prompt_tokens\":1e300,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":1e300}}}");
    T_CHECK_INT(u.prompt, 1000000000000000LL);
    T_CHECK_INT(u.cached, 1000000000000000LL);
    u = usage(API_CHAT, "{\"usage\":{\"prompt_tokens\":100,"
                        "\"prompt_tokens_details\":{\"cached_tokens\":300}}}");
    T_CHECK_INT(u.cached, 100);
    u = usage(API_RESPONSES, "{\"usage\":{\"input_tokens\":100,"
                             "\"input_tokens_details\":{\"cached_tokens\":300}}}");
    T_CHECK_INT(u.cached, 100);
    u = usage(API_CHAT, "{\"usage\":{\"prompt_tokens\":2.9,\"completion_tokens\":1e999}}");
    T_CHECK_INT(u.prompt, 2);
    T_CHECK_INT(u.completion, 0);
}

static void test_usage_anthropic(void)
{
    struct api_usage u = usage(API_MESSAGES, "{\"type\":\"message\",\"usage\":{\"input_tokens\":"
                                             "10,\"cache_creation_input_tokens\":200,"
                                             "\"cache_read_input_tokens\":1000,"
                                             "\"output_tokens\":42}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 1210);
    T_CHECK_INT(u.completion, 42);
    T_CHECK_INT(u.cached, 1000);
    T_CHECK_INT(u.cache_write, 200);

    u = usage(API_MESSAGES, "{\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 3);
    T_CHECK_INT(u.completion, 4);
    T_CHECK_INT(u.cached, 0);

    /* OpenAI field names mean nothing in an Anthropic response. */
    u = usage(API_MESSAGES, "{\"usage\":{\"prompt_tokens\":3}}");
    T_CHECK(!u.present);
    T_CHECK_INT(u.prompt, 0);
}

/* One status's error in both dialects: shape, types, code and message. */
static void check_error(int status, const char *oa_type, const char *oa_code, const char *an_type)
{
    const char *message = "bad \"thing\"\\ \n\t\x01 é";
    cJSON *o = error_json(API_CHAT, status, message);
    T_CHECK(o != NULL);
    T_CHECK_INT(cJSON_GetArraySize(o), 1);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    T_CHECK_INT(cJSON_GetArraySize(err), 4);
    T_CHECK_STR(str_at(o, "error", "message"), message);
    T_CHECK_STR(str_at(o, "error", "type"), oa_type);
    T_CHECK_STR(str_at(o, "error", "code"), oa_code);
    T_CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(err, "param")));
    cJSON_Delete(o);

    cJSON *a = error_json(API_MESSAGES, status, message);
    T_CHECK(a != NULL);
    T_CHECK_INT(cJSON_GetArraySize(a), 2);
    T_CHECK_STR(str_at(a, "type", NULL), "error");
    T_CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(a, "error")), 2);
    T_CHECK_STR(str_at(a, "error", "type"), an_type);
    T_CHECK_STR(str_at(a, "error", "message"), message);
    cJSON_Delete(a);
}

static void test_error_bodies(void)
{
    check_error(400, "invalid_request_error", "invalid_request", "invalid_request_error");
    check_error(401, "authentication_error", "unauthorized", "authentication_error");
    check_error(403, "permission_error", "permission_denied", "permission_error");
    check_error(404, "not_found_error", "not_found", "not_found_error");
    check_error(413, "invalid_request_error", "request_too_large", "request_too_large");
    check_error(415, "invalid_request_error", "unsupported_media_type", "invalid_request_error");
    check_error(429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error");
    check_error(500, "server_error", "internal_error", "api_error");
    check_error(502, "server_error", "bad_gateway", "api_error");
    check_error(503, "server_error", "service_unavailable", "api_error");
    check_error(504, "timeout", "upstream_timeout", "timeout_error");
    check_error(529, "overloaded_error", "overloaded", "overloaded_error");
    check_error(418, "invalid_request_error", "invalid_request", "invalid_request_error");
    check_error(599, "server_error", "internal_error", "api_error");

    /* Exact bytes of both shapes. */
    struct pc_buf b = PC_BUF_INIT;
    dialect_error_body(dialect_of(API_CHAT), 400, "'model' is required", &b);
    T_CHECK_STR(pc_buf_cstr(&b), "{\"error\":{\"message\":\"'model' is required\",\"type\":"
                                 "\"invalid_request_error\",\"param\":null,\"code\":"
                                 "\"invalid_request\"}}");
    pc_buf_reset(&b);
    dialect_error_body(dialect_of(API_MESSAGES), 529, "busy", &b);
    T_CHECK_STR(pc_buf_cstr(&b), "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\","
                                 "\"message\":\"busy\"}}");

    /* Appends; a NULL message gets a default text. */
    pc_buf_reset(&b);
    pc_buf_append_str(&b, "x");
    dialect_error_body(dialect_of(API_NONE), 504, NULL, &b);
    T_CHECK(b.len > 1 && b.data[0] == 'x');
    cJSON *v = cJSON_ParseWithLength(b.data + 1, b.len - 1);
    T_CHECK_STR(str_at(v, "error", "message"), "upstream timed out");
    cJSON_Delete(v);
    pc_buf_free(&b);
}

/* --- answer shapes -------------------------------------------------------- */

/* api_answer_check of json on e; the fault's name must be want. */
static void check_answer(enum api_endpoint e, const char *json, const char *want)
{
    cJSON *v = json != NULL ? cJSON_Parse(json) : NULL;
    const char *reason = NULL;
    int rc = api_answer_check(e, v, &reason);
    if (reason == NULL || strcmp(reason, want) != 0)
        fprintf(stderr, "  %s on %s: got %s, want %s\n", json ? json : "(null)",
                api_endpoint_name(e), reason ? reason : "(null)", want);
    T_CHECK_STR(reason, want);
    T_CHECK((rc == 0) == (strcmp(want, "ok") == 0));
    T_CHECK_STR(api_answer_fault_name((enum api_answer_fault)rc), want);
    cJSON_Delete(v);
}

static void test_answer_shapes_ok(void)
{
    check_answer(API_CHAT,
                 "{\"id\":\"c1\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{"
                 "\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},"
                 "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1}}",
                 "ok");
    /* No "object" at all (some OpenAI-compatible servers): the choices decide. */
    check_answer(API_CHAT,
                 "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[]},"
                 "\"finish_reason\":\"tool_calls\"}]}",
                 "ok");
    /* Cut at max_tokens: finished ("length"), stored like any other. A skimmed answer has "". */
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{},\"finish_reason\":\"length\"}]}", "ok");
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{},\"finish_reason\":\"\"}]}", "ok");
    check_answer(API_COMPLETIONS,
                 "{\"object\":\"text_completion\",\"choices\":[{\"text\":\"\",\"index\":0,"
                 "\"finish_reason\":\"stop\"},{\"text\":\"b\",\"index\":1,\"finish_reason\":"
                 "\"length\"}]}",
                 "ok");
    check_answer(API_EMBEDDINGS,
                 "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"embedding\":[0.1,"
                 "0.2],\"index\":0}],\"model\":\"e\"}",
                 "ok");
    check_answer(API_EMBEDDINGS, "{\"object\":\"list\",\"data\":[{\"embedding\":\"AAAA\"}]}", "ok");
    check_answer(API_MESSAGES,
                 "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{"
                 "\"type\":\"text\",\"text\":\"hi\"}],\"stop_reason\":\"end_turn\"}",
                 "ok");
    /* A turn may end at once with no content block. */
    check_answer(API_MESSAGES, "{\"type\":\"message\",\"content\":[],\"stop_reason\":\"end_turn\"}",
                 "ok");
    check_answer(API_MESSAGES,
                 "{\"type\":\"message\",\"content\":[],\"stop_reason\":\"max_tokens\"}", "ok");
}

static void test_answer_shapes_refused(void)
{
    check_answer(API_CHAT, NULL, "not_object");
    check_answer(API_CHAT, "[1]", "not_object");
    check_answer(API_CHAT, "\"text\"", "not_object");
    check_answer(API_CHAT, "{}", "no_choices");
    check_answer(API_CHAT, "{\"error\":{\"message\":\"quota\",\"type\":\"x\"}}", "error_member");
    /* Even next to valid choices, and even null: nothing with an error member is stored. */
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{}}],\"error\":null}", "error_member");
    check_answer(API_MESSAGES,
                 "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}",
                 "error_member");
    check_answer(API_MESSAGES, "{\"type\":\"error\",\"content\":[]}", "error_member");
    check_answer(API_CHAT, "{\"object\":\"list\",\"choices\":[{\"message\":{}}]}", "wrong_object");
    check_answer(API_CHAT, "{\"object\":7,\"choices\":[{\"message\":{}}]}", "wrong_object");
    check_answer(API_CHAT, "{\"choices\":[]}", "no_choices");
    check_answer(API_CHAT, "{\"choices\":{}}", "no_choices");
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{}},1]}", "no_choices");
    check_answer(API_CHAT, "{\"choices\":[{\"text\":\"a completion, not a chat\"}]}", "no_choices");
    check_answer(API_COMPLETIONS, "{\"choices\":[{\"message\":{}}]}", "no_choices");
    check_answer(API_COMPLETIONS, "{\"object\":\"chat.completion\",\"choices\":[{\"text\":\"\"}]}",
                 "wrong_object");
    check_answer(API_EMBEDDINGS, "{\"object\":\"list\",\"data\":[]}", "no_data");
    check_answer(API_EMBEDDINGS, "{\"object\":\"list\",\"data\":[{\"embedding\":null}]}",
                 "no_data");
    check_answer(API_EMBEDDINGS, "{\"object\":\"embedding\",\"data\":[{\"embedding\":[]}]}",
                 "wrong_object");
    check_answer(API_MESSAGES, "{\"content\":[]}", "wrong_object");
    check_answer(API_MESSAGES, "{\"type\":\"message\",\"role\":\"user\",\"content\":[]}",
                 "wrong_object");
    check_answer(API_MESSAGES, "{\"type\":\"message\",\"content\":\"hi\"}", "no_content");
    /*
     * No sign the generation ended (an upstream failing mid-answer that still
     * closed its JSON): a finish_reason or stop_reason null, missing or not a
     * string; with n > 1, one choice without it is enough.
     */
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{},\"finish_reason\":null}]}",
                 "not_finished");
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{}}]}", "not_finished");
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{},\"finish_reason\":1}]}", "not_finished");
    check_answer(API_CHAT,
                 "{\"choices\":[{\"message\":{},\"finish_reason\":\"stop\"},{\"message\":{},"
                 "\"finish_reason\":null}]}",
                 "not_finished");
    check_answer(API_COMPLETIONS, "{\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}",
                 "not_finished");
    /* dropped by the engine (vLLM, SGLang) after whatever it had made */
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{},\"finish_reason\":\"abort\"}]}",
                 "not_finished");
    check_answer(API_COMPLETIONS, "{\"choices\":[{\"text\":\"a\",\"finish_reason\":\"error\"}]}",
                 "not_finished");
    check_answer(API_MESSAGES, "{\"type\":\"message\",\"content\":[],\"stop_reason\":null}",
                 "not_finished");
    check_answer(API_MESSAGES, "{\"type\":\"message\",\"content\":[]}", "not_finished");
    check_answer(API_NONE, "{\"choices\":[{\"message\":{}}]}", "not_cacheable");
    check_answer((enum api_endpoint)99, "{}", "not_cacheable");
    /* The shapes are per endpoint: a valid chat answer is no embeddings list. */
    check_answer(API_EMBEDDINGS, "{\"choices\":[{\"message\":{}}]}", "no_data");
    check_answer(API_MESSAGES, "{\"choices\":[{\"message\":{}}]}", "wrong_object");
}

/* The stream check on what dialect_assemble makes of a recording. */
static void check_stream(enum api_endpoint e, const char *rec, const char *want)
{
    cJSON *a = dialect_assemble(e, rec, strlen(rec), NULL);
    const char *reason = NULL;
    int rc = api_answer_check_stream(e, a, &reason);
    if (reason == NULL || strcmp(reason, want) != 0)
        fprintf(stderr, "  stream on %s: got %s, want %s\n", api_endpoint_name(e),
                reason ? reason : "(null)", want);
    T_CHECK_STR(reason, want);
    T_CHECK((rc == 0) == (strcmp(want, "ok") == 0));
    cJSON_Delete(a);
}

static void test_answer_streams(void)
{
    check_stream(
        API_CHAT,
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
        "\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}\n\n"
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
        "\"stop\"}]}\n\ndata: [DONE]\n\n",
        "ok");
    /* An error chunk, even a terminated stream of them, is never an answer. */
    check_stream(API_CHAT, "data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n",
                 "stream_incomplete");
    /* Cut off: no [DONE]. */
    check_stream(API_CHAT, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
                 "stream_incomplete");
    /* Terminated but empty. */
    check_stream(API_CHAT, "data: [DONE]\n\n", "stream_incomplete");
    check_stream(
        API_MESSAGES,
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
        "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{"
        "\"input_tokens\":3}}}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
        "\"end_turn\"}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "ok");
    /* Ended in good order, but the stop_reason stayed null, or never came: not finished. */
    check_stream(
        API_MESSAGES,
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
        "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null}}\n\n"
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
        "null}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "not_finished");
    check_stream(
        API_MESSAGES,
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
        "\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "not_finished");
    /* A chat stream ending with [DONE] whose choice never got a finish_reason. */
    check_stream(API_CHAT,
                 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},"
                 "\"finish_reason\":null}]}\n\ndata: [DONE]\n\n",
                 "not_finished");
    /* n = 2: the second choice never finished. */
    check_stream(API_CHAT,
                 "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}},{\"index\":1,"
                 "\"delta\":{\"content\":\"b\"}}]}\n\n"
                 "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                 "data: [DONE]\n\n",
                 "not_finished");
    check_stream(API_COMPLETIONS,
                 "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n"
                 "data: [DONE]\n\n",
                 "not_finished");
    check_stream(API_COMPLETIONS,
                 "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n"
                 "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}"
                 "\n\ndata: [DONE]\n\n",
                 "ok");
    /* A message_start whose message is not a message assembles, but is refused. */
    check_stream(
        API_MESSAGES,
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
        "\"content\":[]}}\n\n"
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "wrong_object");
    const char *reason = NULL;
    T_CHECK(api_answer_check_stream(API_NONE, NULL, &reason) != 0);
    T_CHECK_STR(reason, "not_cacheable");
    T_CHECK(api_answer_check_stream(API_CHAT, NULL, NULL) == API_ANSWER_STREAM_INCOMPLETE);
}

/* The names are the metric labels: unique, non-empty, in enum order. */
static void test_answer_fault_names(void)
{
    T_CHECK_STR(api_answer_fault_names[API_ANSWER_OK], "ok");
    for (int i = 0; i < API_ANSWER__COUNT; i++) {
        T_CHECK(api_answer_fault_names[i] != NULL && api_answer_fault_names[i][0] != '\0');
        for (int j = 0; j < i; j++)
            T_CHECK(strcmp(api_answer_fault_names[i], api_answer_fault_names[j]) != 0);
    }
    T_CHECK_STR(api_answer_fault_name(API_ANSWER__COUNT), "unknown");
    T_CHECK_STR(api_answer_fault_name((enum api_answer_fault) - 1), "unknown");
}

/* --- Responses API -------------------------------------------------------- */

static bool cacheable(const char *json, const char *why_want)
{
    cJSON *v = cJSON_Parse(json);
    const char *why = "unset";
    bool ok = api_cacheable_request(API_RESPONSES, v, &why);
    cJSON_Delete(v);
    if (why_want == NULL)
        return ok && why == NULL;
    return !ok && why != NULL && strstr(why, why_want) != NULL;
}

static void test_responses(void)
{
    T_CHECK_INT(api_endpoint_from_path("/v1/responses"), API_RESPONSES);
    T_CHECK_INT(api_endpoint_from_path("/v1/responses/"), API_RESPONSES);
    T_CHECK_INT(api_endpoint_from_path("/v1/responses/resp_1"), API_NONE); /* retrieve: pass */
    T_CHECK_STR(api_endpoint_name(API_RESPONSES), "responses");
    T_CHECK_STR(dialect_of(API_RESPONSES)->name, "responses");
    /* Its errors have OpenAI's shape. */
    struct pc_buf oa = PC_BUF_INIT, rs = PC_BUF_INIT;
    dialect_error_body(dialect_of(API_CHAT), 429, "slow down", &oa);
    dialect_error_body(dialect_of(API_RESPONSES), 429, "slow down", &rs);
    T_CHECK_STR(pc_buf_cstr(&rs), pc_buf_cstr(&oa));
    pc_buf_free(&oa);
    pc_buf_free(&rs);
    /* input and model may be absent; when present they have their types */
    T_CHECK(accepts(API_RESPONSES, "{\"model\":\"m\",\"input\":\"hi\"}"));
    T_CHECK(accepts(API_RESPONSES, "{\"model\":\"m\",\"input\":[{\"role\":\"user\"}]}"));
    T_CHECK(accepts(API_RESPONSES, "{\"prompt\":{\"id\":\"pmpt_1\"}}"));
    T_CHECK(rejects(API_RESPONSES, "{\"model\":\"m\",\"input\":7}",
                    "'input' must be a string or an array"));
    T_CHECK(rejects(API_RESPONSES, "{\"model\":\"\",\"input\":\"x\"}",
                    "'model' is required and must be a non-empty string"));
    T_CHECK(rejects(API_RESPONSES, "{\"input\":\"x\",\"stream\":\"yes\"}",
                    "'stream' must be a boolean"));
    T_CHECK(wants_stream(API_RESPONSES, "{\"stream\":true}"));
    T_CHECK(include_usage(API_RESPONSES, "{\"stream\":true}"));
    /* never cached: background, a conversation */
    T_CHECK(cacheable("{\"input\":\"x\"}", NULL));
    T_CHECK(cacheable("{\"input\":\"x\",\"background\":false,\"conversation\":null}", NULL));
    T_CHECK(cacheable("{\"input\":\"x\",\"background\":true}", "background"));
    T_CHECK(cacheable("{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation"));
    T_CHECK(cacheable("{\"input\":\"x\",\"conversation\":{\"id\":\"conv_1\"}}", "conversation"));
    /* nor one that names an existing container (code execution state at the provider) */
    T_CHECK(cacheable("{\"input\":\"x\",\"tools\":[{\"type\":\"code_interpreter\","
                      "\"container\":\"cntr_1\"}]}",
                      "container"));
    T_CHECK(cacheable("{\"input\":\"x\",\"tools\":[{\"type\":\"code_interpreter\","
                      "\"container\":{\"type\":\"auto\"}}]}",
                      NULL));
    const char *why = "unset";
    cJSON *mc = cJSON_Parse("{\"container\":\"container_1\"}");
    T_CHECK(!api_cacheable_request(API_MESSAGES, mc, &why) && strstr(why, "container") != NULL);
    cJSON_Delete(mc);
    mc = cJSON_Parse("{\"container\":{\"id\":\"container_1\",\"skills\":[]}}");
    T_CHECK(!api_cacheable_request(API_MESSAGES, mc, NULL));
    cJSON_Delete(mc);
    mc = cJSON_Parse("{\"container\":{\"skills\":[{\"type\":\"anthropic\"}]}}");
    T_CHECK(api_cacheable_request(API_MESSAGES, mc, NULL)); /* a new container each time */
    cJSON_Delete(mc);
    mc = cJSON_Parse("{\"container\":null}");
    T_CHECK(api_cacheable_request(API_MESSAGES, mc, NULL));
    cJSON_Delete(mc);
    cJSON *bg = cJSON_Parse("{\"background\":true}");
    T_CHECK(api_cacheable_request(API_CHAT, bg, NULL)); /* only the Responses API knows it */
    cJSON_Delete(bg);
    /* usage: input/output tokens, cached within the input */
    struct api_usage u =
        usage(API_RESPONSES, "{\"usage\":{\"input_tokens\":36,\"input_tokens_details\":"
                             "{\"cached_tokens\":12},\"output_tokens\":87,\"total_tokens\":123}}");
    T_CHECK(u.present);
    T_CHECK_INT(u.prompt, 36);
    T_CHECK_INT(u.completion, 87);
    T_CHECK_INT(u.cached, 12);
    T_CHECK_INT(u.cache_write, 0);
    u = usage(API_RESPONSES, "{\"usage\":null}");
    T_CHECK(!u.present);
    /* answers: a finished response; its "error": null is no error */
    check_answer(API_RESPONSES,
                 "{\"object\":\"response\",\"status\":\"completed\",\"error\":null,\"output\":[]}",
                 "ok");
    /* incomplete with its reason: cut at max_output_tokens, finished as a chat "length" is */
    check_answer(API_RESPONSES,
                 "{\"object\":\"response\",\"status\":\"incomplete\",\"incomplete_details\":{"
                 "\"reason\":\"max_output_tokens\"},\"output\":[]}",
                 "ok");
    /* incomplete without a reason: nothing says the generation ended */
    check_answer(API_RESPONSES, "{\"object\":\"response\",\"status\":\"incomplete\",\"output\":[]}",
                 "not_finished");
    check_answer(API_RESPONSES,
                 "{\"object\":\"response\",\"status\":\"incomplete\",\"incomplete_details\":null,"
                 "\"output\":[]}",
                 "not_finished");
    check_answer(
        API_RESPONSES,
        "{\"object\":\"response\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}",
        "not_finished");
    check_answer(API_RESPONSES,
                 "{\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"x\"},"
                 "\"output\":[]}",
                 "error_member");
    check_answer(API_RESPONSES, "{\"object\":\"response\",\"status\":\"queued\",\"output\":[]}",
                 "not_finished");
    check_answer(API_RESPONSES, "{\"object\":\"response\",\"output\":[]}", "not_finished");
    check_answer(API_RESPONSES, "{\"object\":\"response\",\"status\":\"completed\"}", "no_output");
    check_answer(API_RESPONSES, "{\"status\":\"completed\",\"output\":[]}", "wrong_object");
    check_answer(API_RESPONSES, "{\"error\":{\"message\":\"m\"}}", "error_member");
    check_answer(API_CHAT, "{\"choices\":[{\"message\":{}}],\"error\":null}", "error_member");
}

static void test_replayable_headers(void)
{
    static const char *const yes[] = {"x-request-id", "X-Request-Id",   "request-id",
                                      "openai-model", "openai-version", "openai-processing-ms"};
    static const char *const no[] = {"set-cookie",
                                     "date",
                                     "x-ratelimit-remaining-requests",
                                     "anthropic-ratelimit-requests-remaining",
                                     "retry-after",
                                     "openai-organization",
                                     "openai-project",
                                     "anthropic-organization-id",
                                     "content-type",
                                     "x-request-id-extra",
                                     ""};
    for (size_t i = 0; i < PC_ARRAY_LEN(yes); i++)
        T_CHECK(api_header_replayable(yes[i]));
    for (size_t i = 0; i < PC_ARRAY_LEN(no); i++)
        T_CHECK(!api_header_replayable(no[i]));
    T_CHECK(!api_header_replayable(NULL));
}

static bool bound(enum api_endpoint e, const char *json)
{
    cJSON *v = cJSON_Parse(json);
    bool b = api_account_bound(e, v, json, json != NULL ? strlen(json) : 0);
    cJSON_Delete(v);
    return b;
}

/* What keeps a Responses answer with its credential, even in a shared namespace. */
static void test_account_bound(void)
{
    T_CHECK(bound(API_RESPONSES, "{\"input\":\"hi\"}")); /* stored by default */
    T_CHECK(bound(API_RESPONSES, "{\"input\":\"hi\",\"store\":null}"));
    T_CHECK(!bound(API_RESPONSES, "{\"input\":\"hi\",\"store\":false}"));
    T_CHECK(!bound(API_RESPONSES, "{\"store\":true,\"store\":false}")); /* the last one */
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"previous_response_id\":\"resp_1\"}"));
    T_CHECK(!bound(API_RESPONSES, "{\"store\":false,\"previous_response_id\":null}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"prompt\":{\"id\":\"pmpt_1\"}}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"input\":[{\"role\":\"user\",\"content\":"
                                 "[{\"type\":\"input_file\",\"file_id\":\"file-1\"}]}]}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"tools\":[{\"type\":\"file_search\","
                                 "\"vector_store_ids\":[\"vs_1\"]}]}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"tools\":[{\"type\":\"code_interpreter\","
                                 "\"container\":{\"type\":\"auto\",\"file_ids\":[\"file-1\"]}}]}"));
    T_CHECK(!bound(API_RESPONSES, "{\"store\":false,\"tools\":[{\"type\":\"code_interpreter\","
                                  "\"container\":{\"type\":\"auto\",\"file_ids\":[]}}]}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"input\":[{\"type\":\"item_reference\","
                                 "\"id\":\"msg_1\"},{\"role\":\"user\",\"content\":\"go on\"}]}"));
    T_CHECK(bound(API_RESPONSES, "{\"store\":false,\"input\":[{\"type\":\"reasoning\",\"id\":"
                                 "\"rs_1\",\"summary\":[],\"encrypted_content\":\"gAAA\"}]}"));
    T_CHECK(!bound(API_RESPONSES, "{\"store\":false,\"input\":[{\"role\":\"user\",\"content\":"
                                  "\"item_reference\"}]}"));
    T_CHECK(!bound(API_RESPONSES, "{\"store\":false,\"input\":[{\"role\":\"user\","
                                  "\"content\":\"file_id\"}],\"tools\":[]}"));
    /* Chat and Messages: a file named by its id, read in the raw text (their tenant is
     * decided before the body is parsed); nothing else there is the account's. */
    T_CHECK(!bound(API_CHAT, "{\"messages\":[],\"store\":true}"));
    T_CHECK(bound(API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\","
                            "\"file\":{\"file_id\":\"file-1\"}}]}]}"));
    T_CHECK(bound(API_MESSAGES,
                  "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                  "\"document\",\"source\":{\"type\":\"file\",\"file_id\":\"f\"}}]}]}"));
    T_CHECK(bound(API_MESSAGES, "{\"container\":{\"skills\":[{\"type\":\"custom\",\"skill_id\":"
                                "\"skill_01\",\"version\":\"latest\"}]},\"messages\":[]}"));
    T_CHECK(!bound(API_CHAT, "{\"skill_id\":\"skill_01\",\"messages\":[]}"));
    T_CHECK(!bound(API_COMPLETIONS, "{\"prompt\":\"x\",\"file_id\":\"f\"}"));
    T_CHECK(!bound(API_EMBEDDINGS, "{\"input\":\"x\",\"file_id\":\"f\"}"));
}

int main(void)
{
    T_RUN(test_paths);
    T_RUN(test_validate_accepts);
    T_RUN(test_validate_rejects);
    T_RUN(test_stream_flags);
    T_RUN(test_model);
    T_RUN(test_usage_openai);
    T_RUN(test_usage_anthropic);
    T_RUN(test_error_bodies);
    T_RUN(test_answer_shapes_ok);
    T_RUN(test_answer_shapes_refused);
    T_RUN(test_answer_streams);
    T_RUN(test_answer_fault_names);
    T_RUN(test_responses);
    T_RUN(test_account_bound);
    T_RUN(test_replayable_headers);
    T_DONE();
}
