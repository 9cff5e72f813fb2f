/*
 * pc_dialect.h - the API dialects: what differs between the wire formats of
 * the APIs the proxy fronts, one operations table each under src/dialect/:
 *
 *   openai     chat.completion(.chunk) and text_completion answers and
 *              streams (terminated by `data: [DONE]`); embeddings' usage
 *   anthropic  Messages answers and streams (message_start, content_block_*,
 *              message_delta, message_stop)
 *   responses  Responses API answers and streams (response.created ...
 *              response.completed or .incomplete, every event named by its
 *              "type" and numbered by "sequence_number")
 *
 * Each reads its usage block, names the events of its streams, assembles a
 * recorded stream into the non-stream answer, synthesises the stream a live
 * upstream would send for an answer, and shapes errors. So a cached answer
 * serves both kinds of client whichever way it was first fetched:
 *
 *   upstream SSE bytes --dialect_assemble--> JSON answer (and its usage)
 *   cached JSON answer --dialect_synthesize--> SSE for a stream client
 *   recorded SSE       --dialect_replay-----> SSE for a stream client
 *   a stored answer    --dialect_answer-----> whichever the client asked for
 *
 * The endpoint decides the dialect (dialect_of); the functions below that
 * take an endpoint choose it there, once, from one table. The SSE framing
 * they share is pc_sse.h. Input is untrusted: every operation tolerates
 * arbitrary bytes and trees (fuzzed) and bounds what it builds.
 */
#ifndef PC_DIALECT_H
#define PC_DIALECT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pc_api.h"
#include "pc_sse.h"
#include "pc_util.h"

struct dialect {
    const char *name; /* "openai", "anthropic", "responses" */
    /* The kind of one event of a recorded stream (enum sse_kind, or the dialect's own). */
    sse_classify_fn *classify;
    /*
     * Whether an event is the usage-only chunk that a stream carries only
     * when the request asked for usage (OpenAI: "choices": [] and a "usage"
     * object). NULL: the dialect's streams always carry their usage, and a
     * replay passes every event.
     */
    bool (*usage_chunk)(int kind, const cJSON *json);
    /* The answer a complete recording of endpoint e stands for (new cJSON), or NULL. */
    cJSON *(*assemble)(enum api_endpoint e, const char *rec, size_t len);
    /*
     * Append the stream of answer resp (an object); -1 if resp is no answer of e. raw
     * (may be NULL): the JSON text resp was parsed from, for the dialects whose events
     * carry the answer, or parts of it, whole (dialect_json_copy).
     */
    int (*synthesize)(enum api_endpoint e, const cJSON *resp, const char *raw, size_t raw_len,
                      bool include_usage, struct pc_buf *out);
    /*
     * Append the answer a complete recording stands for as JSON text, where a stream
     * carries it whole (the Responses API's final event): the upstream's own bytes, every
     * number as written. 0, or -1 as assemble's NULL. NULL: assemble's answer is printed.
     */
    int (*answer_text)(enum api_endpoint e, const char *rec, size_t len, struct pc_buf *out);
    /* Fill u from an answer's "usage" object (u is zeroed; usage is an object). */
    void (*usage)(const cJSON *usage, struct api_usage *u);
    /* Append an error body for status with text (never NULL). */
    void (*error_body)(int status, const char *text, struct pc_buf *out);
    /*
     * Answers carry the caller's own JSON values (Anthropic's tool input):
     * a stream is made of a JSON answer only if every number in it prints
     * back as written (dialect_numbers_kept).
     */
    bool numbers_as_written;
};

/* The dialect of endpoint e: API_NONE and out-of-range values get openai. Never NULL. */
const struct dialect *dialect_of(enum api_endpoint e);

/*
 * The dialect a request to path speaks, for the proxy's own errors on any
 * path: its endpoint's; Anthropic's on the rest of Anthropic's API
 * (api_anthropic_path: count_tokens, batches) and, with anthropic_version
 * (the request carries the anthropic-version header that API requires on
 * every call), on any other path; OpenAI's otherwise. Never NULL.
 */
const struct dialect *dialect_of_path(const char *path, bool anthropic_version);

/* Whether streams of d carry usage only when asked for it (d->usage_chunk is set). */
static inline bool dialect_usage_on_request(const struct dialect *d)
{
    return d->usage_chunk != NULL;
}

/*
 * Rebuild the non-stream JSON answer from a complete recorded stream of
 * endpoint e. Returns a new cJSON (caller frees with cJSON_Delete), or NULL
 * if e does not stream (api_streams), the recording is malformed, carries
 * an error (Responses API: also response.failed) or was cut off (no [DONE] /
 * message_stop / response.completed or .incomplete). For the Responses API
 * the answer is the response object of the final event, which must have a
 * "status" and an "output" array of objects. usage (may be NULL) receives
 * the stream's usage.
 */
cJSON *dialect_assemble(enum api_endpoint e, const char *rec, size_t len, struct api_usage *usage);

/* Whether a recording is complete: ends with [DONE] (OpenAI), message_stop (Anthropic) or a
 * finished response (Responses API), with no error before. */
bool dialect_complete(enum api_endpoint e, const char *rec, size_t len);

/*
 * SSE stream equivalent to a JSON answer (chat.completion -> chunks; text
 * completion -> chunks; Anthropic message -> message_start ... message_stop;
 * response -> response.created, response.in_progress, each output item
 * (added, its text or arguments in delta events, done), then
 * response.completed, or response.incomplete for an incomplete one).
 * include_usage (OpenAI chat and completions): add the final usage chunk.
 * Returns 0, -1 (out unchanged) if resp is not an answer of endpoint e.
 */
int dialect_synthesize(enum api_endpoint e, const cJSON *resp, bool include_usage,
                       struct pc_buf *out);

/*
 * A recorded stream as sent to a new client: events are passed through, except
 * that for OpenAI the usage-only chunk (empty "choices" with "usage") is
 * dropped unless include_usage, and a usage field inside other chunks is
 * left as recorded. Returns 0, -1 (out unchanged) if the recording is
 * malformed.
 */
int dialect_replay(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
                   struct pc_buf *out);

/*
 * Whether a stream client asked for usage (OpenAI chat and completions:
 * stream_options.include_usage), and, if it did, whether a recording
 * without usage still answers it: ON when every stream is asked for usage
 * upstream (stream-usage), so a recording without it is what the upstream
 * sends anyone; REQUIRED when a recording may lack usage only because
 * nobody asked for it. A bool true reads as ON.
 */
enum dialect_usage { DIALECT_USAGE_OFF, DIALECT_USAGE_ON, DIALECT_USAGE_REQUIRED };

/*
 * A stored answer (a JSON body, or a recorded stream when recorded) for a
 * client that asked for a stream or not, with usage or not: the JSON as it
 * is or assembled from the recording; the recording replayed (without the
 * usage the client did not ask for, sse_usage_filter) or a stream
 * synthesised from the JSON. Appends to out; 0, -1 if the answer cannot
 * be served that way (malformed, or cut off), or DIALECT_OTHER_MODE_ONLY
 * if it is sound but would change in this mode (a Messages answer whose
 * tool input holds numbers a stream would not carry as written,
 * dialect_numbers_kept; a JSON answer naming a member twice or holding a
 * number beyond a double, dialect_json_sane; an entry from Redis with a NUL
 * or what RFC 8259 refuses, whose text cJSON would end early): it serves the
 * mode it was stored in only. A
 * recording without usage is DIALECT_OTHER_MODE_ONLY too when usage is
 * DIALECT_USAGE_REQUIRED, and always for a JSON client of a dialect whose
 * streams carry usage on request (its JSON answers always do): it may lack
 * what the upstream would send that client.
 */
#define DIALECT_OTHER_MODE_ONLY (-2)
int dialect_answer(enum api_endpoint e, bool recorded, const char *body, size_t len, bool stream,
                   enum dialect_usage usage, struct pc_buf *out);

/* Usage block of a complete (non-stream) JSON answer; u->present is false when it has none. */
void dialect_usage(enum api_endpoint e, const cJSON *resp, struct api_usage *u);

/*
 * Error body in the dialect's shape (OpenAI `{"error":{"message","type",
 * "param","code"}}`, Anthropic `{"type":"error","error":{"type","message"}}`).
 * The type (and OpenAI code) follow the status: 400 invalid_request_error,
 * 401 authentication_error, 404 not_found_error, 413 request_too_large, 415
 * invalid_request_error, 429 rate_limit_error, 502/503 api_error or
 * server_error, 504 timeout. Appends to out; a NULL message is replaced by a
 * short text for the status.
 */
void dialect_error_body(const struct dialect *d, int status, const char *message,
                        struct pc_buf *out);

#endif
