/*
 * api.c - what the proxy knows about the endpoints it fronts (pc_api.h):
 * the cacheable endpoints, the few request fields the proxy relies on and
 * the shapes of answers that may be cached. Pure functions over cJSON trees;
 * owns nothing.
 *
 * Duplicate members: every lookup takes the LAST member of a name, as the
 * upstreams' parsers (and canon.c) do, so the proxy never judges a request
 * by a field the upstream will ignore.
 */
#include "pc_api.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *path;
    enum api_endpoint endpoint;
} api_paths[] = {
    {"/v1/chat/completions", API_CHAT}, {"/v1/completions", API_COMPLETIONS},
    {"/v1/embeddings", API_EMBEDDINGS}, {"/v1/messages", API_MESSAGES},
    {"/v1/responses", API_RESPONSES},
};

static const char *const api_names[API__COUNT] = {
    [API_NONE] = "other",
    [API_CHAT] = "chat",
    [API_COMPLETIONS] = "completions",
    [API_EMBEDDINGS] = "embeddings",
    [API_MESSAGES] = "messages",
    [API_RESPONSES] = "responses",
};

const cJSON *api_member(const cJSON *obj, const char *key)
{
    const cJSON *found = NULL;
    if (!cJSON_IsObject(obj))
        return NULL;
    for (const cJSON *c = obj->child; c != NULL; c = c->next)
        if (c->string != NULL && strcmp(c->string, key) == 0)
            found = c;
    return found;
}

enum api_endpoint api_endpoint_from_path(const char *path)
{
    if (path == NULL)
        return API_NONE;
    size_t n = strlen(path);
    if (n > 1 && path[n - 1] == '/')
        n--; /* one trailing slash is accepted */
    for (size_t i = 0; i < PC_ARRAY_LEN(api_paths); i++)
        if (strlen(api_paths[i].path) == n && memcmp(api_paths[i].path, path, n) == 0)
            return api_paths[i].endpoint;
    return API_NONE;
}

bool api_anthropic_path(const char *path)
{
    static const char messages[] = "/v1/messages", complete[] = "/v1/complete";
    const size_t nm = sizeof(messages) - 1, nc = sizeof(complete) - 1;
    if (path == NULL)
        return false;
    if (strncmp(path, messages, nm) == 0 && (path[nm] == '\0' || path[nm] == '/'))
        return true;
    return strncmp(path, complete, nc) == 0 && (path[nc] == '\0' || strcmp(path + nc, "/") == 0);
}

bool api_streams(enum api_endpoint e)
{
    return e == API_CHAT || e == API_COMPLETIONS || e == API_MESSAGES || e == API_RESPONSES;
}

const char *api_endpoint_name(enum api_endpoint e)
{
    if ((int)e < 0 || e >= API__COUNT)
        return api_names[API_NONE];
    return api_names[e];
}

/* --- validation ---------------------------------------------------------- */

static bool nonempty_string(const cJSON *v)
{
    const char *s = cJSON_GetStringValue(v);
    return s != NULL && s[0] != '\0';
}

static bool string_or_array(const cJSON *v)
{
    return cJSON_IsString(v) || cJSON_IsArray(v);
}

/* The per-endpoint payload field; NULL message when it is fine. */
static const char *validate_payload(enum api_endpoint e, const cJSON *body)
{
    const cJSON *v;
    switch (e) {
    case API_CHAT:
    case API_MESSAGES:
        v = api_member(body, "messages");
        if (!cJSON_IsArray(v) || v->child == NULL)
            return "'messages' must be a non-empty array";
        return NULL;
    case API_COMPLETIONS:
        if (!string_or_array(api_member(body, "prompt")))
            return "'prompt' is required and must be a string or an array";
        return NULL;
    case API_EMBEDDINGS:
        if (!string_or_array(api_member(body, "input")))
            return "'input' is required and must be a string or an array";
        return NULL;
    case API_RESPONSES:
        v = api_member(body, "input");
        if (v != NULL && !string_or_array(v))
            return "'input' must be a string or an array";
        return NULL;
    default:
        return NULL;
    }
}

/* "model": required, except by the Responses API (a stored prompt may name it). */
static bool model_ok(enum api_endpoint e, const cJSON *body)
{
    const cJSON *model = api_member(body, "model");
    if (e == API_RESPONSES && model == NULL)
        return true;
    return nonempty_string(model);
}

/*
 * The first problem with body, or NULL. "stream": null is taken as absent
 * (OpenAI documents the field as nullable and some clients send it).
 */
static const char *validate_body(enum api_endpoint e, const cJSON *body)
{
    if (!cJSON_IsObject(body))
        return "request body must be a JSON object";
    if (!model_ok(e, body))
        return "'model' is required and must be a non-empty string";
    const char *err = validate_payload(e, body);
    if (err != NULL)
        return err;
    const cJSON *stream = api_member(body, "stream");
    if (stream != NULL && !cJSON_IsBool(stream) && !cJSON_IsNull(stream))
        return "'stream' must be a boolean";
    return NULL;
}

int api_validate(enum api_endpoint e, const cJSON *body, char *msg, size_t msglen)
{
    const char *err = validate_body(e, body);
    if (err == NULL)
        return 0;
    if (msg != NULL && msglen > 0)
        snprintf(msg, msglen, "%s", err);
    return -1;
}

/*
 * A container named by its id: a string, or an object with a non-null "id"
 * (an object without one, such as {"skills": [...]}, asks for a new one).
 */
static bool names_container(const cJSON *c)
{
    if (cJSON_IsString(c))
        return true;
    const cJSON *id = api_member(c, "id");
    return cJSON_IsObject(c) && id != NULL && !cJSON_IsNull(id);
}

/* A Responses API tool run in a container named by its id (code_interpreter). */
static bool tools_name_container(const cJSON *tools)
{
    if (!cJSON_IsArray(tools))
        return false;
    for (const cJSON *t = tools->child; t != NULL; t = t->next)
        if (cJSON_IsString(api_member(t, "container")))
            return true;
    return false;
}

bool api_cacheable_request(enum api_endpoint e, const cJSON *body, const char **why)
{
    const char *reason = NULL;
    if (e == API_RESPONSES && cJSON_IsTrue(api_member(body, "background")))
        reason = "background response";
    else if (e == API_RESPONSES && api_member(body, "conversation") != NULL &&
             !cJSON_IsNull(api_member(body, "conversation")))
        reason = "conversation state kept by the provider";
    else if ((e == API_MESSAGES && names_container(api_member(body, "container"))) ||
             (e == API_RESPONSES && tools_name_container(api_member(body, "tools"))))
        reason = "container state kept by the provider";
    if (why != NULL)
        *why = reason;
    return reason == NULL;
}

/*
 * A member of v's subtree naming what an account keeps at the provider: a file or
 * vector store by id ("file_id", a code interpreter's "file_ids",
 * "vector_store_ids"), a stored item ({"type": "item_reference"}), or carrying
 * what only that account can read ("encrypted_content" of a reasoning item).
 */
static bool names_account_state(const cJSON *v)
{
    for (const cJSON *c = cJSON_IsArray(v) || cJSON_IsObject(v) ? v->child : NULL; c != NULL;
         c = c->next) {
        const char *k = c->string;
        if (k != NULL && ((strcmp(k, "file_id") == 0 && cJSON_IsString(c)) ||
                          ((strcmp(k, "vector_store_ids") == 0 || strcmp(k, "file_ids") == 0) &&
                           cJSON_IsArray(c) && c->child != NULL) ||
                          (strcmp(k, "encrypted_content") == 0 && cJSON_IsString(c)) ||
                          (strcmp(k, "type") == 0 && cJSON_IsString(c) &&
                           strcmp(c->valuestring, "item_reference") == 0)))
            return true;
        if (names_account_state(c))
            return true;
    }
    return false;
}

/*
 * A member of v's subtree, by its decoded name, naming an upload of the account: a
 * file part's "file_id" (chat, Messages), a Messages container's custom "skill_id".
 */
static bool names_upload(enum api_endpoint e, const cJSON *v)
{
    for (const cJSON *c = cJSON_IsArray(v) || cJSON_IsObject(v) ? v->child : NULL; c != NULL;
         c = c->next) {
        const char *k = c->string;
        if (k != NULL &&
            (strcmp(k, "file_id") == 0 || (e == API_MESSAGES && strcmp(k, "skill_id") == 0)))
            return true;
        if (names_upload(e, c))
            return true;
    }
    return false;
}

/*
 * The raw text of a chat or Messages body names an upload: "file_id" (or, for
 * Messages, "skill_id") in quotes anywhere. Only a \u escape can spell one of
 * their letters otherwise (api_account_bound_needs_body).
 */
static bool raw_names_upload(enum api_endpoint e, const char *raw, size_t len)
{
    return raw != NULL && (memmem(raw, len, "\"file_id\"", 9) != NULL ||
                           (e == API_MESSAGES && memmem(raw, len, "\"skill_id\"", 10) != NULL));
}

bool api_account_bound_needs_body(enum api_endpoint e, const char *raw, size_t len)
{
    if (e == API_RESPONSES)
        return true;
    if (e != API_CHAT && e != API_MESSAGES)
        return false;
    return !raw_names_upload(e, raw, len) && raw != NULL && memmem(raw, len, "\\u", 2) != NULL;
}

bool api_account_bound(enum api_endpoint e, const cJSON *body, const char *raw, size_t len)
{
    /* A file part ({"file_id": ...} at some depth), or a Messages container's skill (a custom
     * skill is the account's upload, as a file is). */
    if (e == API_CHAT || e == API_MESSAGES)
        return raw_names_upload(e, raw, len) || (body != NULL && names_upload(e, body));
    if (e != API_RESPONSES)
        return false;
    const cJSON *prev = api_member(body, "previous_response_id");
    const cJSON *prompt = api_member(body, "prompt");
    return !cJSON_IsFalse(api_member(body, "store")) || (prev != NULL && !cJSON_IsNull(prev)) ||
           (prompt != NULL && !cJSON_IsNull(prompt)) || names_account_state(body);
}

bool api_wants_stream(enum api_endpoint e, const cJSON *body)
{
    return api_streams(e) && cJSON_IsTrue(api_member(body, "stream"));
}

bool api_stream_include_usage(enum api_endpoint e, const cJSON *body)
{
    if (e == API_MESSAGES || e == API_RESPONSES)
        return true;
    if (e == API_NONE || e == API_EMBEDDINGS)
        return false;
    const cJSON *opts = api_member(body, "stream_options");
    return cJSON_IsTrue(api_member(opts, "include_usage"));
}

const char *api_model(const cJSON *body)
{
    return cJSON_GetStringValue(api_member(body, "model"));
}

/* --- answer shapes ------------------------------------------------------- */

const char *const api_answer_fault_names[API_ANSWER__COUNT] = {
#define API_ANSWER_NAME(name, text) [API_ANSWER_##name] = text,
    API_ANSWER_FAULTS(API_ANSWER_NAME)
#undef API_ANSWER_NAME
};

const char *api_answer_fault_name(enum api_answer_fault f)
{
    if ((int)f < 0 || f >= API_ANSWER__COUNT)
        return "unknown";
    return api_answer_fault_names[f];
}

/* A member that, when present, must be this string. */
static bool absent_or_string(const cJSON *obj, const char *key, const char *want)
{
    const cJSON *v = api_member(obj, key);
    const char *s = cJSON_GetStringValue(v);
    return v == NULL || (s != NULL && strcmp(s, want) == 0);
}

/* A non-empty array whose every element is an object passing elem_ok. */
static bool array_of(const cJSON *arr, bool (*elem_ok)(const cJSON *elem))
{
    if (!cJSON_IsArray(arr) || arr->child == NULL)
        return false;
    for (const cJSON *c = arr->child; c != NULL; c = c->next)
        if (!cJSON_IsObject(c) || !elem_ok(c))
            return false;
    return true;
}

static bool chat_choice_ok(const cJSON *ch)
{
    return cJSON_IsObject(api_member(ch, "message"));
}

static bool text_choice_ok(const cJSON *ch)
{
    return cJSON_IsString(api_member(ch, "text"));
}

/*
 * Why the generation stopped, as a string ("stop", "length", "tool_calls",
 * "end_turn", ...; which one is not looked at: a skimmed answer has "" here).
 * Null or missing: an upstream that failed mid-generation and still ended its
 * stream ([DONE], message_stop) or its JSON in good order.
 */
static bool has_reason(const cJSON *obj, const char *key)
{
    return cJSON_IsString(api_member(obj, key));
}

/*
 * Every choice says why it ended (for n > 1, each one: a choice may be cut alone), and not
 * that it was dropped: "abort" (vLLM's and SGLang's for a request the engine gave up on,
 * after whatever it had made) or "error". Seen in streams, whose assembled choices are whole;
 * a skimmed JSON choice's reason reads "" (such servers answer a dropped JSON request with an
 * error status).
 */
static enum api_answer_fault choices_finished(const cJSON *choices)
{
    for (const cJSON *c = choices->child; c != NULL; c = c->next) {
        const char *why = cJSON_GetStringValue(api_member(c, "finish_reason"));
        if (why == NULL || strcmp(why, "abort") == 0 || strcmp(why, "error") == 0)
            return API_ANSWER_NOT_FINISHED;
    }
    return API_ANSWER_OK;
}

/* A well-formed "choices" array (no_choices), each one finished (not_finished). */
static enum api_answer_fault choices_shape(const cJSON *resp, bool (*choice_ok)(const cJSON *ch))
{
    const cJSON *choices = api_member(resp, "choices");
    if (!array_of(choices, choice_ok))
        return API_ANSWER_NO_CHOICES;
    return choices_finished(choices);
}

static bool embedding_ok(const cJSON *d)
{
    const cJSON *v = api_member(d, "embedding");
    return cJSON_IsArray(v) || cJSON_IsString(v);
}

/*
 * A Responses API answer: a finished "response" with an "output" array.
 * "incomplete" is finished when incomplete_details names why
 * (max_output_tokens, content_filter), as a chat choice's "length" is.
 */
static enum api_answer_fault response_shape(const cJSON *resp)
{
    const char *object = cJSON_GetStringValue(api_member(resp, "object"));
    const char *status = cJSON_GetStringValue(api_member(resp, "status"));
    if (object == NULL || strcmp(object, "response") != 0)
        return API_ANSWER_WRONG_OBJECT;
    bool finished =
        status != NULL && (strcmp(status, "completed") == 0 ||
                           (strcmp(status, "incomplete") == 0 &&
                            has_reason(api_member(resp, "incomplete_details"), "reason")));
    if (!finished)
        return API_ANSWER_NOT_FINISHED;
    return cJSON_IsArray(api_member(resp, "output")) ? API_ANSWER_OK : API_ANSWER_NO_OUTPUT;
}

/* The endpoint-specific part of api_answer_check (resp is an object without an error). */
static enum api_answer_fault answer_shape(enum api_endpoint e, const cJSON *resp)
{
    switch (e) {
    case API_CHAT:
        if (!absent_or_string(resp, "object", "chat.completion"))
            return API_ANSWER_WRONG_OBJECT;
        return choices_shape(resp, chat_choice_ok);
    case API_COMPLETIONS:
        if (!absent_or_string(resp, "object", "text_completion"))
            return API_ANSWER_WRONG_OBJECT;
        return choices_shape(resp, text_choice_ok);
    case API_EMBEDDINGS:
        if (!absent_or_string(resp, "object", "list"))
            return API_ANSWER_WRONG_OBJECT;
        return array_of(api_member(resp, "data"), embedding_ok) ? API_ANSWER_OK
                                                                : API_ANSWER_NO_DATA;
    case API_MESSAGES: {
        const char *type = cJSON_GetStringValue(api_member(resp, "type"));
        if (type == NULL || strcmp(type, "message") != 0 ||
            !absent_or_string(resp, "role", "assistant"))
            return API_ANSWER_WRONG_OBJECT;
        if (!cJSON_IsArray(api_member(resp, "content")))
            return API_ANSWER_NO_CONTENT;
        return has_reason(resp, "stop_reason") ? API_ANSWER_OK : API_ANSWER_NOT_FINISHED;
    }
    case API_RESPONSES:
        return response_shape(resp);
    default:
        return API_ANSWER_NOT_CACHEABLE;
    }
}

static int answer_verdict(enum api_answer_fault f, const char **reason)
{
    if (reason != NULL)
        *reason = api_answer_fault_name(f);
    return (int)f;
}

int api_answer_check(enum api_endpoint e, const cJSON *resp, const char **reason)
{
    if (e <= API_NONE || e >= API__COUNT)
        return answer_verdict(API_ANSWER_NOT_CACHEABLE, reason);
    if (!cJSON_IsObject(resp))
        return answer_verdict(API_ANSWER_NOT_OBJECT, reason);
    const char *type = cJSON_GetStringValue(api_member(resp, "type"));
    const cJSON *error = api_member(resp, "error");
    /* Every Responses API answer carries "error": null; elsewhere any "error" is one. */
    bool error_ok = error == NULL || (e == API_RESPONSES && cJSON_IsNull(error));
    if (!error_ok || (type != NULL && strcmp(type, "error") == 0))
        return answer_verdict(API_ANSWER_ERROR_MEMBER, reason);
    return answer_verdict(answer_shape(e, resp), reason);
}

int api_answer_check_stream(enum api_endpoint e, const cJSON *assembled, const char **reason)
{
    if (e <= API_NONE || e >= API__COUNT)
        return answer_verdict(API_ANSWER_NOT_CACHEABLE, reason);
    if (assembled == NULL)
        return answer_verdict(API_ANSWER_STREAM_INCOMPLETE, reason);
    return api_answer_check(e, assembled, reason);
}

/* --- replayed headers ---------------------------------------------------- */

static const char *const api_replay_headers[] = {
    "x-request-id", "request-id", "openai-model", "openai-version", "openai-processing-ms",
};

bool api_header_replayable(const char *name)
{
    if (name == NULL)
        return false;
    for (size_t i = 0; i < PC_ARRAY_LEN(api_replay_headers); i++)
        if (pc_strcaseeq(name, api_replay_headers[i]))
            return true;
    return false;
}
