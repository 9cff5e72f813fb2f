/*
 * dialect/anthropic.c - Anthropic's Messages API: streams of named events
 * (message_start, content_block_start / _delta / _stop per block,
 * message_delta, message_stop, ping), usage in input_tokens / output_tokens
 * with cache reads and writes counted apart, errors as
 * {"type":"error","error":{"type","message"}}. Every stream carries usage.
 *
 *   events --an_on_event--> the message of message_start, its blocks by index
 *            (text, thinking, tool input as partial JSON, citations,
 *            signatures, compaction) --an_build--> the answer (none when a
 *            delta's type is unknown: what it adds cannot be told)
 *   answer --an_synth--> message_start, ping, each block (start, citations,
 *            its text / thinking / input in pieces, signature, stop),
 *            message_delta (stop reason and sequence, stop details,
 *            container, context management, output tokens), message_stop
 *
 * Accumulation follows the official SDK's stream helper.
 */
#include "dialect_int.h"

enum an_event {
    AN_MSG_START = SSE_KIND_OWN,
    AN_BLOCK_START,
    AN_BLOCK_DELTA,
    AN_BLOCK_STOP,
    AN_MSG_DELTA,
    AN_PING,  /* keep-alive */
    AN_OTHER, /* a type newer than this code: ignored */
};

/* ---- events ------------------------------------------------------------------- */

static const struct {
    const char *name;
    int kind;
} anthropic_events[] = {
    {"message_start", AN_MSG_START},
    {"content_block_start", AN_BLOCK_START},
    {"content_block_delta", AN_BLOCK_DELTA},
    {"content_block_stop", AN_BLOCK_STOP},
    {"message_delta", AN_MSG_DELTA},
    {"message_stop", SSE_DONE},
    {"ping", AN_PING},
    {"error", SSE_ERROR},
};

/* Anthropic: the event name decides (as in the SDK); the data's "type" must agree. */
static int an_classify(const struct sse_event *ev, cJSON **json)
{
    *json = dialect_parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return SSE_BAD;
    const char *type = str_of(item(*json, "type"));
    const char *name = ev->event;
    size_t name_len = ev->event_len;
    if (name_len == 0 && type != NULL) {
        name = type;
        name_len = strlen(type);
    } else if (name_len == 0 || (type != NULL && !sse_field_is(name, name_len, type))) {
        return SSE_BAD;
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(anthropic_events); i++)
        if (sse_field_is(name, name_len, anthropic_events[i].name))
            return anthropic_events[i].kind;
    return AN_OTHER;
}

/* ---- assembly: events -> message ------------------------------------------------ */

enum an_kind { AN_NONE, AN_TEXT, AN_THINKING, AN_INPUT };

struct an_block {
    cJSON *block;      /* content_block from content_block_start, updated in place */
    enum an_kind kind; /* which field the deltas build */
    struct pc_buf acc; /* that field's text (or partial JSON) so far */
};

struct an_asm {
    cJSON *msg; /* from message_start, updated by message_delta */
    struct an_block *blocks;
    size_t n;
};

static const struct {
    const char *type, *member;
    enum an_kind kind;
} an_deltas[] = {
    {"text_delta", "text", AN_TEXT},
    {"thinking_delta", "thinking", AN_THINKING},
    {"input_json_delta", "partial_json", AN_INPUT},
};

static const char *an_field(enum an_kind k)
{
    return k == AN_TEXT ? "text" : k == AN_THINKING ? "thinking" : "input";
}

/* The started block named by the event's "index", or NULL. */
static struct an_block *an_block_of(struct an_asm *st, const cJSON *j)
{
    size_t i;
    if (dialect_index(item(j, "index"), &i) < 0 || i >= st->n)
        return NULL;
    return &st->blocks[i];
}

/* Blocks arrive in index order (the SDK appends them in arrival order too). */
static int an_block_start(struct an_asm *st, const cJSON *j)
{
    const cJSON *b = item(j, "content_block");
    size_t i;
    if (!cJSON_IsObject(b) || dialect_index(item(j, "index"), &i) < 0 || i != st->n)
        return -1;
    st->blocks = pc_realloc(st->blocks, (st->n + 1) * sizeof(*st->blocks));
    struct an_block *nb = &st->blocks[st->n++];
    memset(nb, 0, sizeof(*nb));
    nb->block = json_dup(b);
    return 0;
}

static int an_accumulate(struct an_block *b, enum an_kind kind, const cJSON *v)
{
    if (!cJSON_IsString(v) || (b->kind != AN_NONE && b->kind != kind))
        return -1;
    if (b->kind == AN_NONE) {
        b->kind = kind;
        if (kind != AN_INPUT)
            append_str(&b->acc, item(b->block, an_field(kind)));
    }
    pc_buf_append_str(&b->acc, v->valuestring);
    return 0;
}

static int an_add_citation(struct an_block *b, const cJSON *citation)
{
    if (citation == NULL)
        return -1;
    cJSON *list = cJSON_GetObjectItemCaseSensitive(b->block, "citations");
    if (!cJSON_IsArray(list)) {
        list = chk(cJSON_CreateArray());
        obj_set(b->block, "citations", list);
    }
    cJSON_AddItemToArray(list, json_dup(citation));
    return 0;
}

static int an_block_delta(struct an_asm *st, const cJSON *j)
{
    struct an_block *b = an_block_of(st, j);
    const cJSON *d = item(j, "delta");
    const char *type = str_of(item(d, "type"));
    if (b == NULL || type == NULL)
        return -1;
    if (strcmp(type, "signature_delta") == 0) {
        const cJSON *sig = item(d, "signature");
        if (!cJSON_IsString(sig))
            return -1;
        obj_set(b->block, "signature", json_dup(sig));
        return 0;
    }
    if (strcmp(type, "citations_delta") == 0)
        return an_add_citation(b, item(d, "citation"));
    if (strcmp(type, "compaction_delta") == 0) {
        /* The block's final value (content, encrypted_content when sent): assigned, as the SDK. */
        const cJSON *k;
        cJSON_ArrayForEach(k, d)
        {
            if (strcmp(k->string, "type") != 0)
                obj_set(b->block, k->string, json_dup(k));
        }
        return 0;
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(an_deltas); i++)
        if (strcmp(type, an_deltas[i].type) == 0)
            return an_accumulate(b, an_deltas[i].kind, item(d, an_deltas[i].member));
    /*
     * A delta type newer than this code: what it adds to the block is not
     * known, so no JSON answer can be made that says what the stream said
     * (the stream is relayed, not stored).
     */
    return -1;
}

/* msg[key] = copy of v, unless v is null and msg has a value there (as the SDK takes container). */
static void an_msg_set(cJSON *msg, const cJSON *v)
{
    const cJSON *have = item(msg, v->string);
    if (!cJSON_IsNull(v) || have == NULL || cJSON_IsNull(have))
        obj_set(msg, v->string, json_dup(v));
}

/*
 * message_delta: delta members (stop_reason, stop_details, container, ...)
 * and the event's own (context_management) overwrite, but null never
 * replaces a value; non-null usage members merge.
 */
static int an_msg_delta(struct an_asm *st, const cJSON *j)
{
    const cJSON *k, *delta = item(j, "delta");
    if (delta != NULL && !cJSON_IsNull(delta) && !cJSON_IsObject(delta))
        return -1;
    if (!cJSON_IsObject(delta))
        delta = NULL;
    cJSON_ArrayForEach(k, delta)
    {
        an_msg_set(st->msg, k);
    }
    cJSON_ArrayForEach(k, j)
    {
        if (strcmp(k->string, "type") != 0 && strcmp(k->string, "delta") != 0 &&
            strcmp(k->string, "usage") != 0)
            an_msg_set(st->msg, k);
    }
    const cJSON *usage = cJSON_IsObject(item(j, "usage")) ? item(j, "usage") : NULL;
    cJSON_ArrayForEach(k, usage)
    {
        if (cJSON_IsNull(k))
            continue;
        cJSON *mu = cJSON_GetObjectItemCaseSensitive(st->msg, "usage");
        if (!cJSON_IsObject(mu)) {
            mu = chk(cJSON_CreateObject());
            obj_set(st->msg, "usage", mu);
        }
        obj_set(mu, k->string, json_dup(k));
    }
    return 0;
}

static int an_on_event(void *arg, int k, const struct sse_event *ev, const cJSON *j)
{
    struct an_asm *st = arg;
    (void)ev;
    if (k == AN_PING || k == AN_OTHER)
        return 0;
    if ((k == AN_MSG_START) != (st->msg == NULL))
        return -1; /* exactly one message_start, before everything else */
    switch (k) {
    case AN_MSG_START:
        if (!cJSON_IsObject(item(j, "message")))
            return -1;
        st->msg = json_dup(item(j, "message"));
        return 0;
    case AN_BLOCK_START:
        return an_block_start(st, j);
    case AN_BLOCK_DELTA:
        return an_block_delta(st, j);
    case AN_BLOCK_STOP:
        return an_block_of(st, j) ? 0 : -1;
    case AN_MSG_DELTA:
        return an_msg_delta(st, j);
    default:
        return 0; /* message_stop */
    }
}

/* Write the accumulated field into the block; tool input is parsed ({} if empty, as the SDK). */
static int an_finish_block(struct an_block *b)
{
    cJSON *v;
    if (b->kind == AN_NONE)
        return 0;
    if (b->kind != AN_INPUT)
        v = chk(cJSON_CreateString(pc_buf_cstr(&b->acc)));
    else if (b->acc.len == 0)
        v = chk(cJSON_CreateObject());
    else if (!dialect_numbers_kept(b->acc.data, b->acc.len) ||
             (v = dialect_parse_json(pc_buf_cstr(&b->acc), b->acc.len)) == NULL)
        return -1; /* not JSON, or the answer's JSON would not carry its numbers as written */
    if (!dialect_json_sane(v)) {
        cJSON_Delete(v);
        return -1;
    }
    obj_set(b->block, an_field(b->kind), v);
    return 0;
}

static cJSON *an_build(struct an_asm *st)
{
    cJSON *content = chk(cJSON_CreateArray());
    for (size_t i = 0; i < st->n; i++) {
        if (an_finish_block(&st->blocks[i]) < 0) {
            cJSON_Delete(content);
            return NULL;
        }
        cJSON_AddItemToArray(content, st->blocks[i].block);
        st->blocks[i].block = NULL;
    }
    cJSON *msg = st->msg;
    st->msg = NULL;
    obj_set(msg, "content", content);
    if (item(msg, "stop_reason") == NULL)
        obj_set(msg, "stop_reason", chk(cJSON_CreateNull()));
    if (item(msg, "stop_sequence") == NULL)
        obj_set(msg, "stop_sequence", chk(cJSON_CreateNull()));
    return msg;
}

static cJSON *an_assemble(enum api_endpoint e, const char *rec, size_t len)
{
    struct an_asm st = {NULL, NULL, 0};
    (void)e;
    cJSON *out = NULL;
    if (sse_walk(an_classify, rec, len, an_on_event, &st) == 0)
        out = an_build(&st);
    for (size_t i = 0; i < st.n; i++) {
        cJSON_Delete(st.blocks[i].block);
        pc_buf_free(&st.blocks[i].acc);
    }
    free(st.blocks);
    cJSON_Delete(st.msg);
    return out;
}

/* ---- synthesis: message -> events ----------------------------------------------- */

/* The stream being written, and its piece sizes (dialect_piece_len). */
struct synth {
    struct pc_buf *out;
    uint32_t seed;
};

static size_t piece_len(struct synth *s, const char *str, size_t n)
{
    return dialect_piece_len(&s->seed, str, n);
}

/* `event: NAME` + `data: JSON`. */
static void an_emit(struct synth *s, const char *name, const struct pc_buf *json)
{
    pc_buf_printf(s->out, "event: %s\ndata: ", name);
    pc_buf_append(s->out, json->data, json->len);
    pc_buf_append_str(s->out, "\n\n");
}

static void an_emit_str(struct synth *s, const char *name, const char *json)
{
    struct pc_buf b = {(char *)json, strlen(json), strlen(json)};
    an_emit(s, name, &b);
}

/*
 * A live stream's message_start carries the prompt's usage and a provisional
 * output count (Anthropic sends 1); the final count comes in message_delta.
 * The stored count here as well would be counted twice by clients that add
 * the two up (LangChain's ChatAnthropic), so it becomes the provisional one.
 */
static void an_provisional_usage(cJSON *m)
{
    cJSON *usage = cJSON_GetObjectItemCaseSensitive(m, "usage");
    const cJSON *out = item(usage, "output_tokens");
    if (cJSON_IsObject(usage) && cJSON_IsNumber(out) && out->valuedouble > 1)
        obj_set(usage, "output_tokens", chk(cJSON_CreateNumber(1)));
}

/*
 * What message_delta says of the message beyond its stop reason and
 * sequence, as the live API: in its delta, the stop details and the
 * container; beside it, the context edits.
 */
static const char *const an_delta_more[] = {"stop_details", "container"};
static const char *const an_event_more[] = {"context_management"};

/* message_start: the answer with empty content, no stop reason yet, provisional usage. */
static void an_message_start(struct synth *s, const cJSON *resp)
{
    cJSON *m = json_dup(resp);
    obj_set(m, "content", chk(cJSON_CreateArray()));
    obj_set(m, "stop_reason", chk(cJSON_CreateNull()));
    obj_set(m, "stop_sequence", chk(cJSON_CreateNull()));
    if (item(m, "stop_details") != NULL)
        obj_set(m, "stop_details", chk(cJSON_CreateNull()));
    an_provisional_usage(m);
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append_str(&b, "{\"type\":\"message_start\",\"message\":");
    dialect_buf_json(&b, m);
    pc_buf_append_char(&b, '}');
    an_emit(s, "message_start", &b);
    pc_buf_free(&b);
    cJSON_Delete(m);
}

/* content_block_delta {"type":TYPE, MEMBER: VALUE}; value is JSON text. */
static void an_delta(struct synth *s, size_t i, const char *type, const char *member,
                     const struct pc_buf *value)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b,
                  "{\"type\":\"content_block_delta\",\"index\":%zu,\"delta\":{\"type\":\"%s\","
                  "\"%s\":",
                  i, type, member);
    pc_buf_append(&b, value->data, value->len);
    pc_buf_append_str(&b, "}}");
    an_emit(s, "content_block_delta", &b);
    pc_buf_free(&b);
}

static void an_delta_pieces(struct synth *s, size_t i, const char *type, const char *member,
                            const char *str)
{
    struct pc_buf v = PC_BUF_INIT;
    for (size_t n = strlen(str), pos = 0, k; pos < n; pos += k) {
        k = piece_len(s, str + pos, n - pos);
        v.len = 0;
        pc_buf_json_str(&v, str + pos, k);
        an_delta(s, i, type, member, &v);
    }
    pc_buf_free(&v);
}

/* Which member of a block the deltas carry: text, thinking or tool input (NULL: none). */
static enum an_kind an_stream_kind(const cJSON *b)
{
    if (cJSON_IsString(item(b, "text")))
        return AN_TEXT;
    if (cJSON_IsString(item(b, "thinking")))
        return AN_THINKING;
    return item(b, "input") != NULL ? AN_INPUT : AN_NONE;
}

static void an_block_start_event(struct synth *s, const cJSON *b, size_t i, enum an_kind kind)
{
    cJSON *start = json_dup(b);
    if (kind == AN_INPUT)
        obj_set(start, "input", chk(cJSON_CreateObject()));
    else if (kind != AN_NONE)
        obj_set(start, an_field(kind), chk(cJSON_CreateString("")));
    if (cJSON_IsString(item(b, "signature")))
        cJSON_DeleteItemFromObjectCaseSensitive(start, "signature");
    if (cJSON_GetArraySize(item(b, "citations")) > 0 && cJSON_IsArray(item(b, "citations")))
        obj_set(start, "citations", chk(cJSON_CreateArray()));
    struct pc_buf e = PC_BUF_INIT;
    pc_buf_printf(&e, "{\"type\":\"content_block_start\",\"index\":%zu,\"content_block\":", i);
    dialect_buf_json(&e, start);
    pc_buf_append_char(&e, '}');
    an_emit(s, "content_block_start", &e);
    pc_buf_free(&e);
    cJSON_Delete(start);
}

/* Block i: start, citations, text/thinking/input in pieces, signature, stop. */
static void an_block(struct synth *s, const cJSON *b, size_t i)
{
    enum an_kind kind = an_stream_kind(b);
    an_block_start_event(s, b, i, kind);
    const cJSON *cites = cJSON_IsArray(item(b, "citations")) ? item(b, "citations") : NULL, *c;
    struct pc_buf v = PC_BUF_INIT;
    cJSON_ArrayForEach(c, cites)
    {
        v.len = 0;
        dialect_buf_json(&v, c);
        an_delta(s, i, "citations_delta", "citation", &v);
    }
    if (kind == AN_TEXT || kind == AN_THINKING) {
        an_delta_pieces(s, i, kind == AN_TEXT ? "text_delta" : "thinking_delta", an_field(kind),
                        item(b, an_field(kind))->valuestring);
    } else if (kind == AN_INPUT) {
        char *json = cJSON_PrintUnformatted(item(b, "input"));
        if (json == NULL)
            dialect_oom();
        if (strcmp(json, "{}") != 0)
            an_delta_pieces(s, i, "input_json_delta", "partial_json", json);
        cJSON_free(json);
    }
    const cJSON *sig = item(b, "signature");
    if (cJSON_IsString(sig)) {
        v.len = 0;
        dialect_buf_json(&v, sig);
        an_delta(s, i, "signature_delta", "signature", &v);
    }
    v.len = 0;
    pc_buf_printf(&v, "{\"type\":\"content_block_stop\",\"index\":%zu}", i);
    an_emit(s, "content_block_stop", &v);
    pc_buf_free(&v);
}

static void an_message_delta(struct synth *s, const cJSON *resp)
{
    struct pc_buf b = PC_BUF_INIT;
    const cJSON *usage = item(resp, "usage");
    pc_buf_append_str(&b, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
    dialect_buf_json(&b, item(resp, "stop_reason"));
    pc_buf_append_str(&b, ",\"stop_sequence\":");
    dialect_buf_json(&b, item(resp, "stop_sequence"));
    for (size_t i = 0; i < PC_ARRAY_LEN(an_delta_more); i++) {
        if (item(resp, an_delta_more[i]) == NULL)
            continue;
        pc_buf_printf(&b, ",\"%s\":", an_delta_more[i]);
        dialect_buf_json(&b, item(resp, an_delta_more[i]));
    }
    pc_buf_append_char(&b, '}');
    for (size_t i = 0; i < PC_ARRAY_LEN(an_event_more); i++) {
        if (item(resp, an_event_more[i]) == NULL)
            continue;
        pc_buf_printf(&b, ",\"%s\":", an_event_more[i]);
        dialect_buf_json(&b, item(resp, an_event_more[i]));
    }
    if (cJSON_IsObject(usage) && item(usage, "output_tokens") != NULL) {
        pc_buf_append_str(&b, ",\"usage\":{\"output_tokens\":");
        dialect_buf_json(&b, item(usage, "output_tokens"));
        pc_buf_append_char(&b, '}');
    }
    pc_buf_append_char(&b, '}');
    an_emit(s, "message_delta", &b);
    pc_buf_free(&b);
}

static int an_synth(enum api_endpoint e, const cJSON *resp, const char *raw, size_t raw_len,
                    bool include_usage, struct pc_buf *out)
{
    (void)raw; /* numbers are checked as written instead (numbers_as_written) */
    (void)raw_len;
    const cJSON *content = item(resp, "content"), *b;
    (void)e;
    (void)include_usage; /* always there */
    if (!cJSON_IsArray(content))
        return -1;
    cJSON_ArrayForEach(b, content)
    {
        if (!cJSON_IsObject(b))
            return -1;
    }
    struct synth s = {out, DIALECT_PIECE_SEED};
    an_message_start(&s, resp);
    an_emit_str(&s, "ping", "{\"type\": \"ping\"}");
    size_t i = 0;
    cJSON_ArrayForEach(b, content)
    {
        an_block(&s, b, i++);
    }
    an_message_delta(&s, resp);
    an_emit_str(&s, "message_stop", "{\"type\":\"message_stop\"}");
    return 0;
}

/* ---- usage and errors ----------------------------------------------------------- */

/*
 * Anthropic counts cache reads and writes apart from input_tokens; of the
 * writes, those kept for an hour (cache_creation.ephemeral_1h_input_tokens)
 * cost more than the 5-minute ones.
 */
static void an_usage(const cJSON *usage, struct api_usage *u)
{
    int64_t written = dialect_tokens(api_member(usage, "cache_creation_input_tokens"));
    int64_t read = dialect_tokens(api_member(usage, "cache_read_input_tokens"));
    int64_t hour = dialect_tokens(
        api_member(api_member(usage, "cache_creation"), "ephemeral_1h_input_tokens"));
    u->cache_write_1h = PC_MIN(hour, written);
    u->present = cJSON_IsNumber(api_member(usage, "input_tokens"));
    u->prompt = dialect_tokens(api_member(usage, "input_tokens")) + written + read;
    u->completion = dialect_tokens(api_member(usage, "output_tokens"));
    u->cached = read;
    u->cache_write = written;
}

/* Error types by status; any other status takes its class's (4xx, 5xx). */
static const struct {
    int status;
    const char *type;
} an_errors[] = {
    {400, "invalid_request_error"},
    {401, "authentication_error"},
    {403, "permission_error"},
    {404, "not_found_error"},
    {405, "invalid_request_error"},
    {413, "request_too_large"},
    {415, "invalid_request_error"},
    {429, "rate_limit_error"},
    {500, "api_error"},
    {502, "api_error"},
    {503, "api_error"},
    {504, "timeout_error"},
    {529, "overloaded_error"},
};

static void an_error_body(int status, const char *text, struct pc_buf *out)
{
    const char *type = status >= 500 ? "api_error" : "invalid_request_error";
    for (size_t i = 0; i < PC_ARRAY_LEN(an_errors); i++)
        if (an_errors[i].status == status)
            type = an_errors[i].type;
    pc_buf_printf(out, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", type);
    pc_buf_json_str(out, text, strlen(text));
    pc_buf_append_str(out, "}}");
}

const struct dialect dialect_anthropic = {
    .name = "anthropic",
    .classify = an_classify,
    .assemble = an_assemble,
    .synthesize = an_synth,
    .usage = an_usage,
    .error_body = an_error_body,
    .numbers_as_written = true,
};
