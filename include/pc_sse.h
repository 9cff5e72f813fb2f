/*
 * pc_sse.h - server-sent events as the LLM APIs use them, in both directions:
 *
 *   upstream SSE bytes --sse_parser--> events --sse_assemble--> JSON answer
 *   cached JSON answer --sse_synthesize--> SSE for a stream client
 *   recorded SSE       --sse_replay-----> SSE for a stream client
 *   a stored answer    --sse_answer-----> whichever the client asked for
 *
 * so a cached answer serves both kinds of client whichever way it was first
 * fetched. Dialects: OpenAI chat.completion.chunk and text_completion streams
 * (terminated by `data: [DONE]`), Anthropic message streams (message_start,
 * content_block_*, message_delta, message_stop) and Responses API streams
 * (response.created ... response.completed or response.incomplete, every
 * event named by its "type" and numbered by "sequence_number"). Input is
 * untrusted: every function tolerates arbitrary bytes (fuzzed) and bounds
 * what it buffers.
 */
#ifndef PC_SSE_H
#define PC_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pc_api.h"
#include "pc_util.h"

/* One dispatched event; its strings are NUL-terminated and valid only during the callback. */
struct sse_event {
    const char *event; /* "event:" field, "" if none */
    size_t event_len;
    const char *data; /* "data:" lines joined with '\n' */
    size_t data_len;
};

/* Incremental parser (W3C EventSource rules: LF, CRLF or CR line ends, ':' comments). */
struct sse_parser {
    struct pc_buf line;
    struct pc_buf event;
    struct pc_buf data;
    bool have_data;
    bool last_was_cr;
    size_t max_event; /* bytes one event may hold; 0 = 16 MiB */
};

typedef int sse_event_fn(void *arg, const struct sse_event *ev);

void sse_parser_init(struct sse_parser *p);
void sse_parser_free(struct sse_parser *p);
/* Feed bytes; cb runs for each complete event. -1 if cb returned < 0 or an event exceeds max_event.
 */
int sse_parser_feed(struct sse_parser *p, const char *buf, size_t len, sse_event_fn *cb, void *arg);

/*
 * Rebuild the non-stream JSON answer from a complete recorded stream of
 * endpoint e. Returns a new cJSON (caller frees with cJSON_Delete), or NULL
 * if the recording is malformed, carries an error (Responses API: also
 * response.failed) or was cut off (no [DONE] / message_stop /
 * response.completed or .incomplete). For the Responses API the answer is
 * the response object of the final event, which must have a "status" and
 * an "output" array of objects. usage (may be NULL) receives the stream's
 * usage.
 */
cJSON *sse_assemble(enum api_endpoint e, const char *rec, size_t len, struct api_usage *usage);

/* Whether a recording is complete: ends with [DONE] (OpenAI), message_stop (Anthropic) or a
 * finished response (Responses API), with no error before. */
bool sse_complete(enum api_endpoint e, const char *rec, size_t len);

/*
 * SSE stream equivalent to a JSON answer (chat.completion -> chunks; text
 * completion -> chunks; Anthropic message -> message_start ... message_stop;
 * response -> response.created, response.in_progress, each output item
 * (added, its text or arguments in delta events, done), then
 * response.completed, or response.incomplete for an incomplete one).
 * include_usage (OpenAI chat and completions): add the final usage chunk.
 * Returns 0, -1 if resp is not an answer of endpoint e.
 */
int sse_synthesize(enum api_endpoint e, const cJSON *resp, bool include_usage, struct pc_buf *out);

/*
 * A recorded stream as sent to a new client: events are passed through, except
 * that for OpenAI the usage-only chunk (empty "choices" with "usage") is
 * dropped unless include_usage, and a usage field inside other chunks is
 * left as recorded. Returns 0, -1 if the recording is malformed.
 */
int sse_replay(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
               struct pc_buf *out);

/*
 * A stored answer (a JSON body, or a recorded stream when recorded) for a
 * client that asked for a stream or not, with usage or not: the JSON as it
 * is or assembled from the recording; the recording replayed (without the
 * usage the client did not ask for, sse_usage_filter) or a stream
 * synthesised from the JSON. Appends to out; 0, or -1 if the answer cannot
 * be served that way (malformed, or cut off).
 */
int sse_answer(enum api_endpoint e, bool recorded, const char *body, size_t len, bool stream,
               bool include_usage, struct pc_buf *out);

/*
 * An OpenAI-style stream as a client that did not ask for usage would have
 * had it, when the proxy asked upstream for usage on its behalf: the
 * usage-only chunk (empty "choices", a "usage" object) is dropped, and a
 * top-level "usage": null that the request for usage adds to the other
 * chunks is cut out of them. Everything else passes byte for byte.
 * Incremental: bytes may be fed in pieces of any size; an event is passed on
 * once its blank line has arrived, and sse_usage_filter_end passes on
 * whatever is left (a stream cut off mid-event stays cut off).
 */
struct sse_usage_filter {
    struct pc_buf pending; /* bytes of the event not complete yet */
};

void sse_usage_filter_init(struct sse_usage_filter *f);
void sse_usage_filter_free(struct sse_usage_filter *f);
void sse_usage_filter_feed(struct sse_usage_filter *f, const char *in, size_t len,
                           struct pc_buf *out);
void sse_usage_filter_end(struct sse_usage_filter *f, struct pc_buf *out);

#endif
