/*
 * dialect/responses.c - OpenAI's Responses API: streams of events named by
 * their "type" and numbered by "sequence_number" (response.created,
 * response.in_progress, output items and their parts, ...), ending in
 * response.completed or response.incomplete, which carry the whole
 * response; usage in input_tokens / output_tokens; errors in OpenAI's
 * shape. Every stream carries usage.
 *
 *   events --rs_on_event--> the response of the final event (nothing before
 *            it needs accumulating: the SDK's stream helper takes it too);
 *            as JSON text, its bytes as the upstream wrote them (rs_answer_text)
 *   answer --rs_synth--> created, in_progress, each output item (added, its
 *            parts' text or a call's arguments in delta events, done), then
 *            completed or incomplete with the whole response
 *
 * What an event carries whole (an item when it is done, the response when it
 * is finished) is the upstream's own text, not cJSON's print of it: a
 * response echoes the request's settings as the API's Python serialiser
 * writes them ("temperature": 1.0, a tool's schema as given), and Python
 * clients read 1.0 and 1 apart.
 */
#include "dialect_int.h"
#include "pc_jedit.h"

#include <stdio.h>

enum rs_event {
    RS_OTHER = SSE_KIND_OWN, /* every event but the last: only the final response matters */
};

/* ---- events ------------------------------------------------------------------- */

/*
 * Responses API: every event is an object whose "type" names it (and agrees
 * with the event name when there is one). A finished response ends the
 * stream and must carry the response object; a failed one, or an "error"
 * event, is an error. Every other type passes (the SDK's stream helper
 * accumulates them; here only the final response matters).
 */
static int rs_classify(const struct sse_event *ev, cJSON **json)
{
    *json = dialect_parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return SSE_BAD;
    const char *type = str_of(item(*json, "type"));
    if (type == NULL || (ev->event_len > 0 && !sse_field_is(ev->event, ev->event_len, type)))
        return SSE_BAD;
    if (strcmp(type, "error") == 0 || strcmp(type, "response.failed") == 0)
        return SSE_ERROR;
    if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0)
        return cJSON_IsObject(item(*json, "response")) ? SSE_DONE : SSE_BAD;
    return RS_OTHER;
}

/* ---- assembly: the final event carries the answer -------------------------------- */

/* A response a stream can be made of: a status, and an "output" array of items (objects). */
static bool rs_usable(const cJSON *resp)
{
    const cJSON *output = item(resp, "output"), *it;
    if (!cJSON_IsObject(resp) || !cJSON_IsString(item(resp, "status")) || !cJSON_IsArray(output))
        return false;
    cJSON_ArrayForEach(it, output)
    {
        if (!cJSON_IsObject(it))
            return false;
    }
    return true;
}

/*
 * response.completed (or .incomplete) holds the whole response object, as
 * the non-stream call returns it: the SDK's stream helper takes it as its
 * final response too, so nothing before it needs accumulating.
 */
static int rs_on_event(void *arg, int k, const struct sse_event *ev, const cJSON *j)
{
    cJSON **out = arg;
    (void)ev;
    if (k != SSE_DONE)
        return 0;
    if (!rs_usable(item(j, "response")))
        return -1;
    *out = json_dup(item(j, "response"));
    return 0;
}

/* The final event's response as JSON text: its bytes in the event's data. */
static int rs_on_event_text(void *arg, int k, const struct sse_event *ev, const cJSON *j)
{
    struct pc_buf *out = arg;
    struct jspan root, resp;
    if (k != SSE_DONE)
        return 0;
    if (!rs_usable(item(j, "response")) || !jedit_value(ev->data, ev->data_len, 0, &root) ||
        !jedit_member(ev->data, &root, "response", NULL, &resp))
        return -1;
    pc_buf_append(out, ev->data + resp.start, resp.end - resp.start);
    return 0;
}

static int rs_answer_text(enum api_endpoint e, const char *rec, size_t len, struct pc_buf *out)
{
    (void)e;
    return sse_walk(rs_classify, rec, len, rs_on_event_text, out);
}

static cJSON *rs_assemble(enum api_endpoint e, const char *rec, size_t len)
{
    cJSON *out = NULL;
    (void)e;
    if (sse_walk(rs_classify, rec, len, rs_on_event, &out) < 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

/* ---- synthesis: response -> its event stream -------------------------------------- */

/* Events of one response: each carries the next sequence_number. */
struct rs_synth {
    struct pc_buf *out;
    uint32_t seed; /* piece sizes (dialect_piece_len) */
    unsigned seq;
    const char *raw; /* the response's JSON text, or NULL: events carry cJSON's print */
};

/* A new event: "type" and "sequence_number" come first, filled in by rs_emit. */
static cJSON *rs_event(void)
{
    cJSON *ev = chk(cJSON_CreateObject());
    obj_set(ev, "type", chk(cJSON_CreateNull()));
    obj_set(ev, "sequence_number", chk(cJSON_CreateNull()));
    return ev;
}

/* `event: TYPE` + `data: EV` with its type and the next sequence number; consumes ev. */
static void rs_emit(struct rs_synth *r, const char *type, cJSON *ev)
{
    obj_set(ev, "type", chk(cJSON_CreateString(type)));
    obj_set(ev, "sequence_number", chk(cJSON_CreateNumber((double)r->seq++)));
    pc_buf_printf(r->out, "event: %s\ndata: ", type);
    dialect_buf_json(r->out, ev);
    pc_buf_append_str(r->out, "\n\n");
    cJSON_Delete(ev);
}

/*
 * `event: TYPE` + `data: {"type":TYPE,"sequence_number":N,MORE"KEY":VALUE}`, VALUE
 * the text raw[v] as written (rs_emit's layout, with a value the upstream wrote).
 */
static void rs_emit_raw(struct rs_synth *r, const char *type, const char *more, const char *key,
                        const struct jspan *v)
{
    pc_buf_printf(r->out,
                  "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%u,%s\"%s\":", type, type,
                  r->seq++, more, key);
    dialect_json_copy(r->out, r->raw + v->start, v->end - v->start);
    pc_buf_append_str(r->out, "}\n\n");
}

/* An event object with the item's id (when it has one) and its output index. */
static cJSON *rs_item_event(const cJSON *it, size_t out_idx)
{
    cJSON *ev = rs_event();
    if (cJSON_IsString(item(it, "id")))
        obj_set(ev, "item_id", json_dup(item(it, "id")));
    obj_set(ev, "output_index", chk(cJSON_CreateNumber((double)out_idx)));
    return ev;
}

/* The same, for part part_idx of the item, under key ("content_index", "summary_index"). */
static cJSON *rs_part_event(const cJSON *it, size_t out_idx, const char *key, size_t part_idx)
{
    cJSON *ev = rs_item_event(it, out_idx);
    obj_set(ev, key, chk(cJSON_CreateNumber((double)part_idx)));
    return ev;
}

/*
 * One delta event per piece of str (none for an empty string): base +
 * {member: piece}. lp (output text: its logprobs, an array): the first
 * piece carries them all, the others an empty "logprobs".
 */
static void rs_pieces(struct rs_synth *r, const char *type, const cJSON *base, const char *member,
                      const char *str, const cJSON *lp)
{
    for (size_t n = strlen(str), pos = 0, k; pos < n; pos += k) {
        k = dialect_piece_len(&r->seed, str + pos, n - pos);
        char *piece = pc_malloc(k + 1);
        memcpy(piece, str + pos, k);
        piece[k] = '\0';
        cJSON *ev = json_dup(base);
        obj_set(ev, member, chk(cJSON_CreateString(piece)));
        free(piece);
        if (lp != NULL)
            obj_set(ev, "logprobs", pos == 0 ? json_dup(lp) : chk(cJSON_CreateArray()));
        rs_emit(r, type, ev);
    }
}

/* Content parts whose text streams in pieces: the member, and the delta and done events. */
static const struct {
    const char *part_type, *member, *delta, *done;
} rs_text_parts[] = {
    {"output_text", "text", "response.output_text.delta", "response.output_text.done"},
    {"refusal", "refusal", "response.refusal.delta", "response.refusal.done"},
    {"reasoning_text", "text", "response.reasoning_text.delta", "response.reasoning_text.done"},
    {"summary_text", "text", "response.reasoning_summary_text.delta",
     "response.reasoning_summary_text.done"},
};

static int rs_text_kind(const cJSON *part)
{
    const char *type = str_of(item(part, "type"));
    for (size_t i = 0; type != NULL && i < PC_ARRAY_LEN(rs_text_parts); i++)
        if (strcmp(type, rs_text_parts[i].part_type) == 0 &&
            cJSON_IsString(item(part, rs_text_parts[i].member)))
            return (int)i;
    return -1;
}

/* The annotations of an output_text part, one event each. */
static void rs_annotations(struct rs_synth *r, const cJSON *it, size_t out_idx, const cJSON *part,
                           size_t idx)
{
    const cJSON *a, *list = item(part, "annotations");
    size_t i = 0;
    if (!cJSON_IsArray(list))
        return;
    cJSON_ArrayForEach(a, list)
    {
        cJSON *ev = rs_part_event(it, out_idx, "content_index", idx);
        obj_set(ev, "annotation_index", chk(cJSON_CreateNumber((double)i++)));
        obj_set(ev, "annotation", json_dup(a));
        rs_emit(r, "response.output_text.annotation.added", ev);
    }
}

/*
 * One content (or summary) part: PREFIX.added with the part emptied, its
 * text in pieces, its annotations, the .done of the text, PREFIX.done with
 * the whole part. PREFIX: "response.content_part", or
 * "response.reasoning_summary_part" for a reasoning summary.
 */
static void rs_part(struct rs_synth *r, const cJSON *it, size_t out_idx, const cJSON *part,
                    size_t idx, bool summary)
{
    const char *key = summary ? "summary_index" : "content_index";
    const char *prefix = summary ? "response.reasoning_summary_part" : "response.content_part";
    int kind = rs_text_kind(part);
    char name[64];
    cJSON *start = json_dup(part), *ev;
    if (kind >= 0)
        obj_set(start, rs_text_parts[kind].member, chk(cJSON_CreateString("")));
    if (cJSON_IsArray(item(part, "annotations")))
        obj_set(start, "annotations", chk(cJSON_CreateArray()));
    if (cJSON_IsArray(item(part, "logprobs"))) /* they come with the text deltas */
        obj_set(start, "logprobs", chk(cJSON_CreateArray()));
    ev = rs_part_event(it, out_idx, key, idx);
    obj_set(ev, "part", start);
    snprintf(name, sizeof(name), "%s.added", prefix);
    rs_emit(r, name, ev);
    cJSON *base = kind >= 0 ? rs_part_event(it, out_idx, key, idx) : NULL;
    /* Output text events carry logprobs (an empty array when none were asked for). */
    cJSON *lp = NULL;
    if (kind >= 0 && strcmp(rs_text_parts[kind].part_type, "output_text") == 0)
        lp = cJSON_IsArray(item(part, "logprobs")) ? json_dup(item(part, "logprobs"))
                                                   : chk(cJSON_CreateArray());
    if (kind >= 0)
        rs_pieces(r, rs_text_parts[kind].delta, base, "delta",
                  item(part, rs_text_parts[kind].member)->valuestring, lp);
    rs_annotations(r, it, out_idx, part, idx);
    if (kind >= 0) {
        obj_set(base, rs_text_parts[kind].member, json_dup(item(part, rs_text_parts[kind].member)));
        if (lp != NULL)
            obj_set(base, "logprobs", json_dup(lp));
        rs_emit(r, rs_text_parts[kind].done, base);
    }
    cJSON_Delete(lp);
    ev = rs_part_event(it, out_idx, key, idx);
    obj_set(ev, "part", json_dup(part));
    snprintf(name, sizeof(name), "%s.done", prefix);
    rs_emit(r, name, ev);
}

static void rs_parts(struct rs_synth *r, const cJSON *it, size_t out_idx, const char *member,
                     bool summary)
{
    const cJSON *parts = item(it, member), *part;
    size_t i = 0;
    if (!cJSON_IsArray(parts))
        return;
    cJSON_ArrayForEach(part, parts)
    {
        rs_part(r, it, out_idx, part, i++, summary);
    }
}

/* A function call's arguments in pieces, then the whole (with the function's name). */
static void rs_arguments(struct rs_synth *r, const cJSON *it, size_t out_idx)
{
    const cJSON *args = item(it, "arguments");
    if (!cJSON_IsString(args))
        return;
    cJSON *base = rs_item_event(it, out_idx);
    rs_pieces(r, "response.function_call_arguments.delta", base, "delta", args->valuestring, NULL);
    if (cJSON_IsString(item(it, "name")))
        obj_set(base, "name", json_dup(item(it, "name")));
    obj_set(base, "arguments", json_dup(args));
    rs_emit(r, "response.function_call_arguments.done", base);
}

/*
 * Output item out_idx: output_item.added with the item as it starts (in
 * progress, its streamed members empty), what streams inside it, and
 * output_item.done with the item as the answer has it.
 */
static void rs_item(struct rs_synth *r, const cJSON *it, size_t out_idx, const struct jspan *raw)
{
    const char *type = str_of(item(it, "type"));
    bool message = type != NULL && strcmp(type, "message") == 0;
    bool reasoning = type != NULL && strcmp(type, "reasoning") == 0;
    bool call = type != NULL && strcmp(type, "function_call") == 0;
    cJSON *start = json_dup(it);
    if (item(it, "status") != NULL)
        obj_set(start, "status", chk(cJSON_CreateString("in_progress")));
    if (message || (reasoning && cJSON_IsArray(item(it, "content"))))
        obj_set(start, "content", chk(cJSON_CreateArray()));
    if (reasoning && cJSON_IsArray(item(it, "summary")))
        obj_set(start, "summary", chk(cJSON_CreateArray()));
    if (call && cJSON_IsString(item(it, "arguments")))
        obj_set(start, "arguments", chk(cJSON_CreateString("")));
    cJSON *ev = rs_event();
    obj_set(ev, "output_index", chk(cJSON_CreateNumber((double)out_idx)));
    obj_set(ev, "item", start);
    rs_emit(r, "response.output_item.added", ev);
    if (reasoning)
        rs_parts(r, it, out_idx, "summary", true);
    if (message || reasoning)
        rs_parts(r, it, out_idx, "content", false);
    if (call)
        rs_arguments(r, it, out_idx);
    if (raw != NULL) {
        char more[40];
        snprintf(more, sizeof(more), "\"output_index\":%zu,", out_idx);
        rs_emit_raw(r, "response.output_item.done", more, "item", raw);
        return;
    }
    ev = rs_event();
    obj_set(ev, "output_index", chk(cJSON_CreateNumber((double)out_idx)));
    obj_set(ev, "item", json_dup(it));
    rs_emit(r, "response.output_item.done", ev);
}

/*
 * The spans of the response's text and of its output items, when the text is
 * the answer cJSON read (raw non-NULL, as many items as resp has); false if not.
 */
static bool rs_raw_spans(const char *raw, size_t raw_len, const cJSON *resp, struct jspan *root,
                         struct jspan **items)
{
    struct jspan output, el;
    size_t n = (size_t)cJSON_GetArraySize(item(resp, "output")), cursor = 0, i = 0;
    *items = NULL;
    if (raw == NULL || !jedit_value(raw, raw_len, 0, root) ||
        !jedit_member(raw, root, "output", NULL, &output) || !jedit_is_array(raw, &output) ||
        jedit_count(raw, &output) != n)
        return false;
    *items = pc_malloc((n ? n : 1) * sizeof(**items));
    while (i < n && jedit_next(raw, &output, &cursor, NULL, &el))
        (*items)[i++] = el;
    if (i == n)
        return true;
    PC_FREE(items);
    return false;
}

/* The response as it looks while it starts: in progress, no output, no usage yet. */
static void rs_start(struct rs_synth *r, const cJSON *resp)
{
    static const char *const types[] = {"response.created", "response.in_progress"};
    for (size_t i = 0; i < PC_ARRAY_LEN(types); i++) {
        cJSON *start = json_dup(resp);
        obj_set(start, "status", chk(cJSON_CreateString("in_progress")));
        obj_set(start, "output", chk(cJSON_CreateArray()));
        if (item(resp, "usage") != NULL)
            obj_set(start, "usage", chk(cJSON_CreateNull()));
        if (item(resp, "incomplete_details") != NULL)
            obj_set(start, "incomplete_details", chk(cJSON_CreateNull()));
        cJSON *ev = rs_event();
        obj_set(ev, "response", start);
        rs_emit(r, types[i], ev);
    }
}

/*
 * The events a live stream of this response sends: created, in_progress,
 * each output item, then response.completed (or .incomplete) with the whole
 * response, which is what rs_assemble takes back.
 */
static int rs_synth(enum api_endpoint e, const cJSON *resp, const char *raw, size_t raw_len,
                    bool include_usage, struct pc_buf *out)
{
    const cJSON *output = item(resp, "output"), *it;
    const char *status = str_of(item(resp, "status"));
    (void)e;
    (void)include_usage; /* always there */
    if (!rs_usable(resp))
        return -1;
    struct jspan root, *items = NULL;
    bool as_written = rs_raw_spans(raw, raw_len, resp, &root, &items);
    struct rs_synth r = {out, DIALECT_PIECE_SEED, 0, as_written ? raw : NULL};
    rs_start(&r, resp);
    size_t i = 0;
    cJSON_ArrayForEach(it, output)
    {
        rs_item(&r, it, i, as_written ? &items[i] : NULL);
        i++;
    }
    free(items);
    const char *type =
        strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed";
    if (as_written) {
        rs_emit_raw(&r, type, "", "response", &root);
        return 0;
    }
    cJSON *ev = rs_event();
    obj_set(ev, "response", json_dup(resp));
    rs_emit(&r, type, ev);
    return 0;
}

/* ---- usage ---------------------------------------------------------------------- */

/* Input and output tokens (the cached ones within the input). */
static void rs_usage(const cJSON *usage, struct api_usage *u)
{
    u->present = cJSON_IsNumber(api_member(usage, "input_tokens"));
    u->prompt = dialect_tokens(api_member(usage, "input_tokens"));
    u->completion = dialect_tokens(api_member(usage, "output_tokens"));
    u->cached = PC_MIN(
        dialect_tokens(api_member(api_member(usage, "input_tokens_details"), "cached_tokens")),
        u->prompt); /* within input_tokens, as pricing_tokens_of reads it */
}

const struct dialect dialect_responses = {
    .name = "responses",
    .classify = rs_classify,
    .assemble = rs_assemble,
    .synthesize = rs_synth,
    .answer_text = rs_answer_text,
    .usage = rs_usage,
    .error_body = dialect_openai_error_body,
};
