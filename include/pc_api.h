/*
 * pc_api.h - what the proxy knows about the LLM APIs it fronts: which paths
 * are cacheable endpoints, how their requests are validated, whether a request
 * streams, where usage is reported, and how errors are shaped for each API
 * (OpenAI `{"error":{...}}`, Anthropic `{"type":"error","error":{...}}`).
 * Pure functions over cJSON trees; owns nothing.
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
    API__COUNT
};

enum api_dialect {
    API_DIALECT_OPENAI = 0,
    API_DIALECT_ANTHROPIC,
};

struct api_usage {
    bool present;
    int64_t prompt;     /* OpenAI prompt_tokens; Anthropic input_tokens + cache tokens */
    int64_t completion; /* OpenAI completion_tokens; Anthropic output_tokens */
    int64_t
        cached; /* OpenAI prompt_tokens_details.cached_tokens; Anthropic cache_read_input_tokens */
    int64_t cache_write; /* Anthropic cache_creation_input_tokens (written at a premium) */
};

/*
 * The last member named key of an object (NULL if none or obj is not an
 * object). The last one, because that is the one the upstreams' JSON parsers
 * (and the official clients) read when a key is duplicated.
 */
const cJSON *api_member(const cJSON *obj, const char *key);

/* Endpoint for a request path (query string already removed); API_NONE if not cacheable. */
enum api_endpoint api_endpoint_from_path(const char *path);
enum api_dialect api_dialect_of(enum api_endpoint e);
/* Short stable name: "chat", "completions", "embeddings", "messages", "other". */
const char *api_endpoint_name(enum api_endpoint e);

/*
 * Check the fields the proxy relies on: the body is an object with a
 * non-empty string "model" and, per endpoint, a non-empty "messages" array
 * (chat, messages), a "prompt" (completions) or an "input" (embeddings);
 * "stream", if present, is a boolean. Deeper validation is the upstream's job.
 * Returns 0, or -1 with a message for the client in msg.
 */
int api_validate(enum api_endpoint e, const cJSON *body, char *msg, size_t msglen);

/* The request asks for an SSE stream ("stream": true; never for embeddings). */
bool api_wants_stream(enum api_endpoint e, const cJSON *body);
/* OpenAI: stream_options.include_usage is true. Anthropic streams always carry usage. */
bool api_stream_include_usage(enum api_endpoint e, const cJSON *body);
/* The "model" string, or NULL. */
const char *api_model(const cJSON *body);

/* Usage block of a complete (non-stream) JSON response. */
void api_usage_from_response(enum api_endpoint e, const cJSON *resp, struct api_usage *u);

/*
 * Error body in the dialect's shape. The type (and OpenAI code) follow the
 * status: 400 invalid_request_error, 401 authentication_error, 404
 * not_found_error, 413 request_too_large, 415 invalid_request_error, 429
 * rate_limit_error, 502/503 api_error or server_error, 504 timeout.
 */
void api_error_body(enum api_dialect d, int status, const char *message, struct pc_buf *out);

#endif
