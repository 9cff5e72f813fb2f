/*
 * pc_sse.h - server-sent events, the machinery every API dialect shares:
 *
 *   SSE bytes --sse_parser--> sse_event --classify (the dialect's)--> kind
 *   recording --sse_walk-----> each event up to the terminator, to a handler
 *   sse_event --sse_write_event--> SSE bytes framed anew
 *   OpenAI-style stream --sse_usage_filter--> the same without asked-for usage
 *
 * What an event means is the dialect's business (pc_dialect.h: assembling a
 * stream into an answer, synthesising one from an answer, replaying a
 * recording); this module knows the framing only. Input is untrusted: every
 * function tolerates arbitrary bytes (fuzzed) and bounds what it buffers.
 */
#ifndef PC_SSE_H
#define PC_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

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
    unsigned bom;     /* bytes of a leading UTF-8 BOM matched; SSE_BOM_PAST once decided */
    size_t max_event; /* bytes one event may hold; 0 = 16 MiB */
};

#define SSE_BOM_PAST 4u

typedef int sse_event_fn(void *arg, const struct sse_event *ev);

void sse_parser_init(struct sse_parser *p);
void sse_parser_free(struct sse_parser *p);
/* Feed bytes; cb runs for each complete event. -1 if cb returned < 0 or an event exceeds max_event.
 */
int sse_parser_feed(struct sse_parser *p, const char *buf, size_t len, sse_event_fn *cb, void *arg);

/*
 * A recording read event by event: the dialect's classify names each event
 * (pc_dialect.h), and the walk stops at the terminator. A kind is one of
 * the three below, which the walk itself acts on, or a number of the
 * dialect's own from SSE_KIND_OWN up, which only its handler reads.
 */
enum sse_kind {
    SSE_BAD = 0, /* not valid in this dialect: the recording is malformed */
    SSE_ERROR,   /* the API reported an error inside the stream */
    SSE_DONE,    /* the terminator: [DONE], message_stop, response.completed ... */
    SSE_KIND_OWN /* the first of the dialect's own kinds */
};

/* Kind of ev; *json gets its parsed data when the dialect parsed it (caller frees), or NULL. */
typedef int sse_classify_fn(const struct sse_event *ev, cJSON **json);
/* One event of a walk; a negative return stops the walk and makes it fail. */
typedef int sse_walk_fn(void *arg, int kind, const struct sse_event *ev, const cJSON *json);

/*
 * Run fn (may be NULL) over each event of rec up to and including the
 * terminator, as classify names them; events after the terminator are
 * ignored (clients ignore them too). Returns 0 if rec is well framed, has no
 * SSE_BAD or SSE_ERROR event and is terminated, else -1.
 */
int sse_walk(sse_classify_fn *classify, const char *rec, size_t len, sse_walk_fn *fn, void *arg);

/* Append ev framed anew: `event:` line if named, one `data:` line per data line, blank line. */
void sse_write_event(struct pc_buf *out, const struct sse_event *ev);

/* Whether the field name f[0..flen) is name. */
bool sse_field_is(const char *f, size_t flen, const char *name);

/*
 * An OpenAI-style stream as a client that did not ask for usage would have
 * had it, when the proxy asked upstream for usage on its behalf: the
 * usage-only chunk (empty "choices", a "usage" object) is dropped, and a
 * top-level "usage": null that the request for usage adds to the other
 * chunks is cut out of them. Everything else passes byte for byte.
 * Incremental: bytes may be fed in pieces of any size; an event is passed on
 * once its blank line has arrived, and sse_usage_filter_end passes on
 * whatever is left (a stream cut off mid-event stays cut off). At most
 * SSE_FILTER_MAX_PENDING bytes of an unfinished event are held: an event
 * that grows beyond passes on unfiltered as its bytes come, up to its blank
 * line (no usage chunk is that large), and filtering resumes after it.
 */
#define SSE_FILTER_MAX_PENDING ((size_t)1 << 20)

struct sse_usage_filter {
    struct pc_buf pending; /* bytes of the event not complete yet */
    bool passing;          /* inside an event over the cap: bytes pass until its blank line */
    bool line_start;       /* passing: the last byte ended a line */
    bool last_cr;          /* passing: ... and it was a CR (an LF next completes a CRLF) */
};

void sse_usage_filter_init(struct sse_usage_filter *f);
void sse_usage_filter_free(struct sse_usage_filter *f);
void sse_usage_filter_feed(struct sse_usage_filter *f, const char *in, size_t len,
                           struct pc_buf *out);
void sse_usage_filter_end(struct sse_usage_filter *f, struct pc_buf *out);

/*
 * The usage a live stream reports, read as its bytes pass (a stream too
 * large to record: pc_fetch.h), for the dialect to interpret
 * (dialect_usage). Each event whose data names "usage" is parsed, and the
 * non-null members of its usage object are merged into one, later ones
 * replacing earlier ones: the object's "usage" (OpenAI's usage chunk,
 * Anthropic's message_delta), "message"."usage" (Anthropic's message_start)
 * or "response"."usage" (the Responses API's response.completed). Events
 * after the terminator are read too (they would not change what the
 * upstreams send last). An event larger than SSE_FILTER_MAX_PENDING stops
 * the reading: nothing is reported then (failed).
 */
struct sse_usage_scan {
    struct sse_parser p;
    cJSON *usage; /* the members merged so far, or NULL */
    bool failed;
};

void sse_usage_scan_init(struct sse_usage_scan *s);
void sse_usage_scan_free(struct sse_usage_scan *s);
void sse_usage_scan_feed(struct sse_usage_scan *s, const char *buf, size_t len);
/* The merged usage object (owned by s), or NULL if none was seen or the reading failed. */
const cJSON *sse_usage_scan_result(const struct sse_usage_scan *s);

/*
 * Whether a live stream was ended by its sender, read as its bytes pass: an
 * event that classify names SSE_DONE (the API's terminator) or SSE_ERROR (an
 * error event, after which the API sends nothing more) was seen, whole (its
 * blank line included). For an upstream whose answer ends when it closes
 * the connection (HTTP/1.0, no Content-Length), that close is otherwise the
 * same whether the answer was finished or broken off. Events are classified
 * only up to the end. An event larger than the parser's bound stops the
 * reading (failed): the stream can then not be judged.
 */
struct sse_end_scan {
    struct sse_parser p;
    sse_classify_fn *classify;
    bool ended;
    bool failed;
};

void sse_end_scan_init(struct sse_end_scan *s, sse_classify_fn *classify);
void sse_end_scan_free(struct sse_end_scan *s);
void sse_end_scan_feed(struct sse_end_scan *s, const char *buf, size_t len);
/* Whether an event ended the stream (false: cut off, or not judged: failed). */
static inline bool sse_end_scan_ended(const struct sse_end_scan *s)
{
    return s->ended;
}

#endif
