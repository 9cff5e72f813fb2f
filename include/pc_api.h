/*
 * pc_api.h - what the proxy knows about the endpoints it fronts: which paths
 * are cacheable endpoints, how their requests are validated, whether a
 * request streams, and what shape a cacheable answer has. What differs by
 * wire format (usage blocks, streams, error shapes) is the dialects'
 * (pc_dialect.h). Pure functions over cJSON trees; owns nothing.
 */
#ifndef PC_API_H
#define PC_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pc_util.h"

enum api_endpoint {
    API_NONE = 0,    /* not a cacheable endpoint: pass through */
    API_CHAT,        /* POST /v1/chat/completions (OpenAI) */
    API_COMPLETIONS, /* POST /v1/completions (OpenAI) */
    API_EMBEDDINGS,  /* POST /v1/embeddings (OpenAI) */
    API_MESSAGES,    /* POST /v1/messages (Anthropic) */
    API_RESPONSES,   /* POST /v1/responses (OpenAI Responses API) */
    API__COUNT       /* values are stored in cache entries: append only */
};

struct api_usage {
    bool present;
    int64_t prompt;      /* OpenAI prompt_tokens (Responses: input_tokens); Anthropic input_tokens
                            + cache tokens */
    int64_t completion;  /* OpenAI completion_tokens (Responses: output_tokens); Anthropic
                            output_tokens */
    int64_t cached;      /* OpenAI prompt_tokens_details.cached_tokens (Responses:
                            input_tokens_details.cached_tokens); Anthropic cache_read_input_tokens */
    int64_t cache_write; /* Anthropic cache_creation_input_tokens (written at a premium) */
    int64_t cache_write_1h;   /* of cache_write, those written for an hour (Anthropic
                                 cache_creation.ephemeral_1h_input_tokens), at a higher premium */
    int64_t audio_prompt;     /* of prompt, audio (OpenAI prompt_tokens_details.audio_tokens) */
    int64_t audio_completion; /* of completion, audio (completion_tokens_details.audio_tokens) */
};

/*
 * The last member named key of an object (NULL if none or obj is not an
 * object). The last one, because that is the one the upstreams' JSON parsers
 * (and the official clients) read when a key is duplicated.
 */
const cJSON *api_member(const cJSON *obj, const char *key);

/* Endpoint for a request path (query string already removed); API_NONE if not cacheable. */
enum api_endpoint api_endpoint_from_path(const char *path);
/*
 * Whether a path (query string already removed) belongs to Anthropic's API
 * alone: /v1/messages and what lies under it (count_tokens, batches), and the
 * legacy /v1/complete. Paths both APIs have (/v1/models, /v1/files) are not.
 */
bool api_anthropic_path(const char *path);
/* Whether answers of e may come as an SSE stream (chat, completions, messages, responses). */
bool api_streams(enum api_endpoint e);
/* Short stable name: "chat", "completions", "embeddings", "messages", "responses", "other". */
const char *api_endpoint_name(enum api_endpoint e);

/*
 * Check the fields the proxy relies on: the body is an object with a
 * non-empty string "model" and, per endpoint, a non-empty "messages" array
 * (chat, messages), a "prompt" (completions) or an "input" (embeddings);
 * "stream", if present, is a boolean. The Responses API is looser, as
 * upstream: "model" and "input" may be absent (a stored prompt or a previous
 * response can stand for them), but when present "model" is a non-empty
 * string and "input" a string or an array. Deeper validation is the
 * upstream's job. Returns 0, or -1 with a message for the client in msg.
 */
int api_validate(enum api_endpoint e, const cJSON *body, char *msg, size_t msglen);

/*
 * Whether an answer to this (valid) request may be cached at all; if not,
 * *why (may be NULL) names the reason for the log. Responses API: never with
 * "background": true (the answer is a queued response to poll, not the
 * generation) nor with a "conversation" (the provider appends each turn to
 * it, so the same body means a longer context every time, and an answer from
 * the cache would leave the conversation without its turn). Nor a request
 * that names an existing container by its id (Messages API "container", a
 * Responses API tool's "container" string): the code run there reads and
 * writes the files earlier requests left, so the same body may deserve
 * another answer, and a hit would leave the container without its run.
 */
bool api_cacheable_request(enum api_endpoint e, const cJSON *body, const char **why);

/*
 * Whether the answer to this request is its account's own at the provider,
 * so that it is never shared with another credential, not even through a
 * shared namespace: another account's identical call is refused by the
 * provider. The Responses API's (body: the parsed request): the answer is
 * stored upstream ("store" not false: its id resolves for its owner only),
 * or it reads what the account keeps there: the response named by
 * "previous_response_id", a stored "prompt", anywhere in the body a file or
 * vector store named by id ("file_id", "file_ids", "vector_store_ids"), a
 * stored item ("item_reference") or a reasoning item's "encrypted_content"
 * (which only its organization can read). Chat completions
 * and the Messages API: a "file_id" member anywhere, or for Messages a
 * container's "skill_id", found in the raw text raw[0..len) (read before the
 * body is parsed, so that the tenant is known to the memo) when it is spelled
 * out there ("file_id" in quotes in a text matches too: kept with its
 * credential), else by its decoded name in body (NULL if not parsed yet:
 * see api_account_bound_needs_body), so that "file\u005fid" is one too.
 */
bool api_account_bound(enum api_endpoint e, const cJSON *body, const char *raw, size_t len);
/*
 * Whether api_account_bound needs the parsed body to decide: always for the
 * Responses API; for chat and Messages when the raw text does not spell a
 * name out but holds a \u escape, which can spell one.
 */
bool api_account_bound_needs_body(enum api_endpoint e, const char *raw, size_t len);

/* The request asks for an SSE stream ("stream": true; never for embeddings). */
bool api_wants_stream(enum api_endpoint e, const cJSON *body);
/* OpenAI: stream_options.include_usage is true. Anthropic and Responses streams always carry
 * usage. */
bool api_stream_include_usage(enum api_endpoint e, const cJSON *body);
/* The "model" string, or NULL. */
const char *api_model(const cJSON *body);

/*
 * Whether an upstream answer has the shape its endpoint promises, and so may
 * be stored and served to later callers (in a shared namespace, to other
 * tenants too). A 2xx status alone is not enough: some gateways answer 200
 * with {} or {"error": ...}. The faults, as an X-macro so that a labelled
 * metric (cache_store_skipped{reason=...}) can be generated from it:
 */
#define API_ANSWER_FAULTS(X)                                                                \
    X(OK, "ok")                               /* the shape is right */                      \
    X(NOT_OBJECT, "not_object")               /* no answer, or not a JSON object */         \
    X(ERROR_MEMBER, "error_member")           /* an "error" member (any value), or an       \
                                                 Anthropic {"type":"error"} */              \
    X(WRONG_OBJECT, "wrong_object")           /* "object" / "type" names another answer */  \
    X(NO_CHOICES, "no_choices")               /* chat, completions: no usable "choices" */  \
    X(NO_DATA, "no_data")                     /* embeddings: no usable "data" */            \
    X(NO_CONTENT, "no_content")               /* messages: no "content" array */            \
    X(NOT_FINISHED, "not_finished")           /* no sign the generation ended: a choice's   \
                                                 finish_reason or the stop_reason null or   \
                                                 missing; responses: status not completed   \
                                                 (queued, in progress, failed, cancelled),  \
                                                 or incomplete with no reason given */      \
    X(NO_OUTPUT, "no_output")                 /* responses: no "output" array */            \
    X(STREAM_INCOMPLETE, "stream_incomplete") /* a recorded stream that did not assemble */ \
    X(NOT_CACHEABLE, "not_cacheable")         /* API_NONE: nothing to check against */

enum api_answer_fault {
#define API_ANSWER_ENUM(name, text) API_ANSWER_##name,
    API_ANSWER_FAULTS(API_ANSWER_ENUM)
#undef API_ANSWER_ENUM
        API_ANSWER__COUNT
};

/* Names of the faults, indexed by enum api_answer_fault ("ok", "not_object", ...). */
extern const char *const api_answer_fault_names[API_ANSWER__COUNT];
/* The name of f; "unknown" when out of range. */
const char *api_answer_fault_name(enum api_answer_fault f);

/*
 * Check a complete non-stream answer of endpoint e. Returns 0 (API_ANSWER_OK)
 * if it may be cached, else its enum api_answer_fault (> 0); *reason (if
 * reason is not NULL) gets the fault's name either way. What is required:
 *   - never an "error" member (whatever its value), never Anthropic's
 *     {"type":"error"};
 *   - chat: a non-empty "choices" array of objects each with a "message"
 *     object and a string "finish_reason" (null, or missing, is a generation
 *     that never ended: an upstream failing mid-answer may still close its
 *     stream or JSON in good order; "length" is a finished, cut answer);
 *     "object", when present, is "chat.completion";
 *   - completions: a non-empty "choices" array of objects each with a string
 *     "text" and a string "finish_reason"; "object", when present, is
 *     "text_completion";
 *   - embeddings: a non-empty "data" array of objects each with an
 *     "embedding" (array, or base64 string); "object", when present, is
 *     "list";
 *   - messages: "type" is "message", "content" is an array (it may be empty:
 *     a turn can end at once), "stop_reason" is a string ("max_tokens"
 *     included), "role", when present, is "assistant";
 *   - responses: "object" is "response", "status" is "completed" or
 *     "incomplete" with a string incomplete_details.reason (a turn cut at
 *     max_output_tokens is as final as a chat completion ending with
 *     "length"), "output" is an array. Here the "error" member is part of
 *     every answer and must be null.
 * Pure; resp may be NULL.
 */
int api_answer_check(enum api_endpoint e, const cJSON *resp, const char **reason);

/*
 * The deepest level below an answer's root that api_answer_check and
 * dialect_usage look at (a choice's "message", a usage block's
 * cached_tokens: level 3), and only at the type of a string, array or object
 * there. An answer parsed with jskim_parse(..., API_ANSWER_DEPTH) gets the
 * same verdict and usage as one parsed in full (tests/unit/test_jskim.c).
 */
#define API_ANSWER_DEPTH 3

/*
 * The same for a recorded SSE answer, given what dialect_assemble() made of the
 * recording (NULL when it is malformed, cut off or carries an error event:
 * API_ANSWER_STREAM_INCOMPLETE). The assembled answer must pass
 * api_answer_check, so an OpenAI stream of {"error":...} chunks, or an
 * Anthropic stream whose message_start is not a message, is refused too.
 */
int api_answer_check_stream(enum api_endpoint e, const cJSON *assembled, const char **reason);

/*
 * Whether an upstream response header is kept with a cached answer and sent
 * again on every hit: the headers that describe the generation the content
 * came from, and that clients read. An allow-list (case-insensitive):
 *   x-request-id, request-id     the upstream's id of the original call
 *                                (OpenAI's and Anthropic's SDKs expose it
 *                                as _request_id)
 *   openai-model, openai-version, openai-processing-ms
 *                                which model snapshot and API version
 *                                answered, and how long it took then
 * Everything else is left out, in particular what describes the moment or
 * the account rather than the answer: Set-Cookie, Date, rate-limit headers
 * (x-ratelimit-*, anthropic-ratelimit-*, retry-after), organisation and
 * project (openai-organization, openai-project, anthropic-organization-id:
 * a shared namespace would show one tenant's account to another), and
 * transport headers. Content-Type is stored on its own.
 */
bool api_header_replayable(const char *name);

#endif
