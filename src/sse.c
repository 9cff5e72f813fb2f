/*
 * sse.c - server-sent events as the LLM APIs use them (see pc_sse.h).
 *
 * Owns nothing but the parser's three buffers. Everything that reads a
 * recording goes through one walk: parser -> classify (per dialect) -> a
 * handler, stopping at the terminator:
 *
 *   recorded bytes --sse_parser--> sse_event --classify--> EV_* + parsed JSON
 *                                                             |
 *        +------------------------+---------------------------+
 *        v                        v                           v
 *   sse_complete             sse_replay                  sse_assemble
 *   (terminated, no error)   (re-frame events,           (OpenAI: chunks -> choices;
 *                             drop usage chunk)           Anthropic: events -> blocks;
 *                                                         Responses: the final event's
 *                                                         response, as sent)
 *
 *   JSON answer --sse_synthesize--> the same events a live upstream would send
 *
 * sse_assemble and sse_synthesize are inverses on what sse_assemble produces:
 * assemble(synthesize(assemble(x))) == assemble(x) (checked by the fuzzer).
 * Accumulation follows the official SDKs' stream helpers: strings are
 * concatenated, ids/names/roles/finish reasons keep the last non-empty value.
 */
#include "pc_sse.h"
#include "pc_jedit.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pc_log.h"

#define SSE_MAX_EVENT_DEFAULT ((size_t)16 << 20)
#define SSE_MAX_INDEX         1024 /* choice / tool-call index cap: bounds sparse tables */
#define SSE_MAX_KEYS          64   /* distinct delta keys per choice */
#define SSE_PIECE_MIN         16   /* synthesized text pieces, bytes */
#define SSE_PIECE_MAX         64

/* ---- small JSON helpers -------------------------------------------------- */

static PC_NORETURN void sse_oom(void)
{
    log_error("sse: out of memory in cJSON");
    abort();
}

/* cJSON allocates with malloc; like pc_malloc, die loudly rather than return NULL. */
static cJSON *chk(cJSON *j)
{
    if (j == NULL)
        sse_oom();
    return j;
}

static cJSON *json_dup(const cJSON *v)
{
    return chk(cJSON_Duplicate(v, true));
}

static const cJSON *item(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *str_of(const cJSON *v)
{
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Add v (owned) to obj under key, replacing the first existing member of that name. */
static void obj_set(cJSON *obj, const char *key, cJSON *v)
{
    bool ok = cJSON_GetObjectItemCaseSensitive(obj, key) != NULL
                  ? cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v)
                  : cJSON_AddItemToObject(obj, key, v);
    if (!ok)
        sse_oom();
}

/* Append copies of src's elements to the array dst. */
static void append_items(cJSON *dst, const cJSON *src)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, src)
    {
        cJSON_AddItemToArray(dst, json_dup(e));
    }
}

/* Append v serialised compactly; NULL is written as null. */
static void buf_json(struct pc_buf *b, const cJSON *v)
{
    if (v == NULL) {
        pc_buf_append_str(b, "null");
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    if (s == NULL)
        sse_oom();
    pc_buf_append_str(b, s);
    cJSON_free(s);
}

static void buf_json_cstr(struct pc_buf *b, const char *s)
{
    pc_buf_json_str(b, s, strlen(s));
}

/* Parse s[0..n) as one JSON value with nothing after it; s[n] must be NUL. */
static cJSON *parse_json(const char *s, size_t n)
{
    if (memchr(s, '\0', n) != NULL)
        return NULL;
    return cJSON_ParseWithLengthOpts(s, n + 1, NULL, true);
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#define KEYS_SMALL 12 /* objects up to this size are checked pairwise */

/* Whether no two members of object o share a name (sorted check past a few: o may be huge). */
static bool keys_unique(const cJSON *o)
{
    size_t n = 0, i = 0;
    for (const cJSON *c = o->child; c != NULL; c = c->next)
        n++;
    if (n < 2)
        return true;
    if (n <= KEYS_SMALL) { /* the usual chunk: pairwise, no allocation */
        for (const cJSON *a = o->child; a != NULL; a = a->next)
            for (const cJSON *b = a->next; b != NULL; b = b->next)
                if (strcmp(a->string, b->string) == 0)
                    return false;
        return true;
    }
    const char **keys = pc_malloc(n * sizeof(*keys));
    for (const cJSON *c = o->child; c != NULL; c = c->next)
        keys[i++] = c->string;
    qsort(keys, n, sizeof(*keys), key_cmp);
    bool unique = true;
    for (i = 1; i < n && unique; i++)
        unique = strcmp(keys[i - 1], keys[i]) != 0;
    free(keys);
    return unique;
}

/*
 * Whether j is JSON every reader sees alike: all numbers finite (cJSON reads
 * 1e999 as infinity and writes it back as null) and no duplicate member names
 * (cJSON takes the first, JavaScript clients the last). Events failing this
 * could not survive a cache round trip unchanged, so they count as malformed.
 */
static bool json_sane(const cJSON *j)
{
    if (cJSON_IsNumber(j))
        return isfinite(j->valuedouble);
    if (cJSON_IsObject(j) && !keys_unique(j))
        return false;
    for (const cJSON *c = j->child; c != NULL; c = c->next)
        if (!json_sane(c))
            return false;
    return true;
}

/* An event's JSON object, or NULL if it is not one (or not json_sane). */
static cJSON *parse_object(const char *s, size_t n)
{
    cJSON *j = parse_json(s, n);
    if (j != NULL && (!cJSON_IsObject(j) || !json_sane(j))) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

/* A choice / tool-call / block index: an integral number in [0, SSE_MAX_INDEX). */
static int index_value(const cJSON *v, size_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < SSE_MAX_INDEX))
        return -1;
    size_t i = (size_t)v->valuedouble;
    if ((double)i != v->valuedouble)
        return -1;
    *out = i;
    return 0;
}

static bool is_openai(enum api_endpoint e)
{
    return e == API_CHAT || e == API_COMPLETIONS;
}

static bool is_streamable(enum api_endpoint e)
{
    return is_openai(e) || e == API_MESSAGES || e == API_RESPONSES;
}

/* ---- parser -------------------------------------------------------------- */

void sse_parser_init(struct sse_parser *p)
{
    memset(p, 0, sizeof(*p));
}

void sse_parser_free(struct sse_parser *p)
{
    pc_buf_free(&p->line);
    pc_buf_free(&p->event);
    pc_buf_free(&p->data);
    p->have_data = false;
    p->last_was_cr = false;
}

static void parser_reset_event(struct sse_parser *p)
{
    p->event.len = 0;
    p->data.len = 0;
    p->have_data = false;
}

/* Whether buffering extra more bytes would take the pending event over max_event. */
static bool parser_over(const struct sse_parser *p, size_t extra)
{
    size_t limit = p->max_event ? p->max_event : SSE_MAX_EVENT_DEFAULT;
    size_t used = p->line.len + p->event.len + p->data.len; /* <= limit, always */
    return extra > limit - used;
}

/* Blank line: dispatch the pending event. W3C: no data line means no event. */
static int parser_dispatch(struct sse_parser *p, sse_event_fn *cb, void *arg)
{
    if (!p->have_data) {
        parser_reset_event(p);
        return 0;
    }
    struct sse_event ev = {pc_buf_cstr(&p->event), p->event.len, pc_buf_cstr(&p->data),
                           p->data.len};
    int rc = cb(arg, &ev);
    parser_reset_event(p);
    return rc < 0 ? -1 : 0;
}

static bool field_is(const char *f, size_t flen, const char *name)
{
    return flen == strlen(name) && memcmp(f, name, flen) == 0;
}

/* Interpret the complete line in p->line, then empty it. */
static int parser_line(struct sse_parser *p, sse_event_fn *cb, void *arg)
{
    const char *l = p->line.data;
    size_t n = p->line.len;
    p->line.len = 0;
    if (n == 0)
        return parser_dispatch(p, cb, arg);
    if (l[0] == ':')
        return 0; /* comment */
    const char *colon = memchr(l, ':', n);
    size_t flen = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vlen = (size_t)(l + n - v);
    if (vlen > 0 && *v == ' ') {
        v++;
        vlen--;
    }
    if (field_is(l, flen, "event")) {
        p->event.len = 0;
        pc_buf_append(&p->event, v, vlen);
    } else if (field_is(l, flen, "data")) {
        if (p->have_data)
            pc_buf_append_char(&p->data, '\n');
        pc_buf_append(&p->data, v, vlen);
        p->have_data = true;
    }
    /* "id" and "retry" only matter to a reconnecting browser; other fields are ignored. */
    return 0;
}

static int parser_fail(struct sse_parser *p)
{
    p->line.len = 0;
    parser_reset_event(p);
    return -1;
}

/* The end of the line starting at p: the first CR or LF at or after p, or len. */
static size_t line_end(const char *ev, size_t len, size_t p)
{
    const char *lf = memchr(ev + p, '\n', len - p);
    size_t eol = lf != NULL ? (size_t)(lf - ev) : len;
    const char *cr = memchr(ev + p, '\r', eol - p);
    return cr != NULL ? (size_t)(cr - ev) : eol;
}

int sse_parser_feed(struct sse_parser *p, const char *buf, size_t len, sse_event_fn *cb, void *arg)
{
    size_t i = 0;
    while (i < len) {
        char c = buf[i];
        if (c == '\r' || c == '\n') {
            bool lf_of_crlf = c == '\n' && p->last_was_cr;
            p->last_was_cr = c == '\r';
            i++;
            if (!lf_of_crlf && parser_line(p, cb, arg) < 0)
                return parser_fail(p);
            continue;
        }
        p->last_was_cr = false;
        size_t run = line_end(buf, len, i) - i;
        if (parser_over(p, run))
            return parser_fail(p);
        pc_buf_append(&p->line, buf + i, run);
        i += run;
    }
    return 0;
}

/* ---- recordings: classify events, walk up to the terminator --------------- */

enum ev_kind {
    EV_BAD,   /* not valid in this dialect */
    EV_ERROR, /* the API reported an error inside the stream */
    EV_DONE,  /* terminator: data [DONE] (OpenAI), message_stop (Anthropic), or
                 response.completed / response.incomplete (Responses API) */
    EV_PING,  /* Anthropic keep-alive */
    EV_CHUNK, /* OpenAI chunk */
    /* Anthropic event types */
    EV_MSG_START,
    EV_BLOCK_START,
    EV_BLOCK_DELTA,
    EV_BLOCK_STOP,
    EV_MSG_DELTA,
    EV_OTHER, /* a type newer than this code: ignored */
};

static const struct {
    const char *name;
    enum ev_kind kind;
} anthropic_events[] = {
    {"message_start", EV_MSG_START},
    {"content_block_start", EV_BLOCK_START},
    {"content_block_delta", EV_BLOCK_DELTA},
    {"content_block_stop", EV_BLOCK_STOP},
    {"message_delta", EV_MSG_DELTA},
    {"message_stop", EV_DONE},
    {"ping", EV_PING},
    {"error", EV_ERROR},
};

/* Like the openai SDK: [DONE] ends the stream; an "error" member or event is an error. */
static enum ev_kind classify_openai(const struct sse_event *ev, cJSON **json)
{
    if (field_is(ev->event, ev->event_len, "error"))
        return EV_ERROR;
    if (ev->data_len >= 6 && memcmp(ev->data, "[DONE]", 6) == 0)
        return EV_DONE;
    *json = parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return EV_BAD;
    const cJSON *err = item(*json, "error");
    return err != NULL && !cJSON_IsNull(err) ? EV_ERROR : EV_CHUNK;
}

/* Anthropic: the event name decides (as in the SDK); the data's "type" must agree. */
static enum ev_kind classify_anthropic(const struct sse_event *ev, cJSON **json)
{
    *json = parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return EV_BAD;
    const char *type = str_of(item(*json, "type"));
    const char *name = ev->event;
    size_t name_len = ev->event_len;
    if (name_len == 0 && type != NULL) {
        name = type;
        name_len = strlen(type);
    } else if (name_len == 0 || (type != NULL && !field_is(name, name_len, type))) {
        return EV_BAD;
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(anthropic_events); i++)
        if (field_is(name, name_len, anthropic_events[i].name))
            return anthropic_events[i].kind;
    return EV_OTHER;
}

/*
 * Responses API: every event is an object whose "type" names it (and agrees
 * with the event name when there is one). A finished response ends the
 * stream and must carry the response object; a failed one, or an "error"
 * event, is an error. Every other type passes (the SDK's stream helper
 * accumulates them; here only the final response matters).
 */
static enum ev_kind classify_responses(const struct sse_event *ev, cJSON **json)
{
    *json = parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return EV_BAD;
    const char *type = str_of(item(*json, "type"));
    if (type == NULL || (ev->event_len > 0 && !field_is(ev->event, ev->event_len, type)))
        return EV_BAD;
    if (strcmp(type, "error") == 0 || strcmp(type, "response.failed") == 0)
        return EV_ERROR;
    if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0)
        return cJSON_IsObject(item(*json, "response")) ? EV_DONE : EV_BAD;
    return EV_OTHER;
}

static enum ev_kind classify(enum api_endpoint e, const struct sse_event *ev, cJSON **json)
{
    if (is_openai(e))
        return classify_openai(ev, json);
    if (e == API_RESPONSES)
        return classify_responses(ev, json);
    return classify_anthropic(ev, json);
}

typedef int walk_fn(void *arg, enum ev_kind k, const struct sse_event *ev, const cJSON *json);

struct walk {
    enum api_endpoint e;
    walk_fn *fn; /* may be NULL */
    void *arg;
    bool done;
};

static int walk_event(void *arg, const struct sse_event *ev)
{
    struct walk *w = arg;
    if (w->done)
        return 0; /* the stream ended at the terminator; clients ignore the rest */
    cJSON *json = NULL;
    enum ev_kind k = classify(w->e, ev, &json);
    int rc = -1;
    if (k != EV_BAD && k != EV_ERROR)
        rc = w->fn ? w->fn(w->arg, k, ev, json) : 0;
    w->done = k == EV_DONE;
    cJSON_Delete(json);
    return rc;
}

/*
 * Run fn over each event of rec up to and including the terminator. Returns
 * 0 if rec is well framed, has no error event and is terminated, else -1.
 */
static int walk(enum api_endpoint e, const char *rec, size_t len, walk_fn *fn, void *arg)
{
    struct sse_parser p;
    struct walk w = {e, fn, arg, false};
    sse_parser_init(&p);
    int rc = sse_parser_feed(&p, rec, len, walk_event, &w);
    sse_parser_free(&p);
    return rc == 0 && w.done ? 0 : -1;
}

bool sse_complete(enum api_endpoint e, const char *rec, size_t len)
{
    return is_streamable(e) && walk(e, rec, len, NULL, NULL) == 0;
}

/* ---- OpenAI assembly: chunks -> chat.completion / text_completion ---------- */

/* One delta member accumulated across chunks: strings and arrays concatenate. */
struct oa_acc {
    char *key;
    cJSON *val; /* the value while it is not a string */
    struct pc_buf str;
    bool is_str;
};

struct oa_tool {
    char *id, *type, *name; /* last non-empty value */
    struct pc_buf args;
};

struct oa_choice {
    char *role;
    struct oa_acc *accs; /* content, refusal, text (completions) and unknown keys */
    size_t naccs;
    struct oa_tool **tools; /* sparse, by tool-call index */
    size_t ntools, last_tool;
    struct oa_tool *fcall; /* legacy function_call */
    cJSON *logprobs;
    bool logprobs_seen;
    cJSON *finish; /* last non-null finish_reason */
};

struct oa_asm {
    enum api_endpoint e;
    cJSON *top;                 /* id, created, model, service_tier, system_fingerprint, usage */
    struct oa_choice **choices; /* sparse, by choice index */
    size_t nchoices;
};

static void acc_add(struct oa_acc *a, const cJSON *v)
{
    if (cJSON_IsString(v)) {
        if (!a->is_str) {
            cJSON_Delete(a->val);
            a->val = NULL;
            a->is_str = true;
        }
        pc_buf_append_str(&a->str, v->valuestring);
    } else if (cJSON_IsArray(v) && cJSON_IsArray(a->val)) {
        append_items(a->val, v);
    } else if (!cJSON_IsNull(v) || (!a->is_str && a->val == NULL)) {
        cJSON_Delete(a->val);
        a->val = json_dup(v);
        a->is_str = false;
        a->str.len = 0;
    }
}

static cJSON *acc_value(struct oa_acc *a)
{
    return a->is_str ? chk(cJSON_CreateString(pc_buf_cstr(&a->str))) : json_dup(a->val);
}

static struct oa_acc *acc_find(struct oa_choice *c, const char *key)
{
    for (size_t i = 0; i < c->naccs; i++)
        if (strcmp(c->accs[i].key, key) == 0)
            return &c->accs[i];
    return NULL;
}

/* The accumulator for key, created on first use; NULL past SSE_MAX_KEYS. */
static struct oa_acc *acc_get(struct oa_choice *c, const char *key)
{
    struct oa_acc *a = acc_find(c, key);
    if (a != NULL || c->naccs == SSE_MAX_KEYS)
        return a;
    c->accs = pc_realloc(c->accs, (c->naccs + 1) * sizeof(*c->accs));
    a = &c->accs[c->naccs++];
    memset(a, 0, sizeof(*a));
    a->key = pc_strdup(key);
    return a;
}

/* null, "" or 0: what Azure's content-filter chunks carry in id, model and created. */
static bool json_blank(const cJSON *v)
{
    return cJSON_IsNull(v) || (cJSON_IsString(v) && *v->valuestring == '\0') ||
           (cJSON_IsNumber(v) && v->valuedouble == 0);
}

/* Whether a and b are the same string, number (bit for bit), boolean or null. */
static bool same_scalar(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xff) != (b->type & 0xff))
        return false;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsNumber(a))
        return memcmp(&a->valuedouble, &b->valuedouble, sizeof(double)) == 0;
    return cJSON_IsNull(a) || cJSON_IsBool(a);
}

/*
 * obj[key] = copy of v, unless v is absent, or blank while obj already has
 * key, or the same scalar obj already has (most chunks repeat id and model).
 */
static void keep_last(cJSON *obj, const char *key, const cJSON *v)
{
    if (v == NULL)
        return;
    const cJSON *have = item(obj, key);
    if (have != NULL && (json_blank(v) || same_scalar(have, v)))
        return;
    obj_set(obj, key, json_dup(v));
}

/* *dst = v if v is a non-empty string. */
static void keep_str(char **dst, const cJSON *v)
{
    const char *s = str_of(v);
    if (s == NULL || *s == '\0')
        return;
    free(*dst);
    *dst = pc_strdup(s);
}

static void append_str(struct pc_buf *b, const cJSON *v)
{
    if (cJSON_IsString(v))
        pc_buf_append_str(b, v->valuestring);
}

/* Merge a chunk's logprobs: arrays inside (content, tokens, ...) concatenate. */
static void logprobs_merge(cJSON **acc, const cJSON *v)
{
    if (cJSON_IsNull(v))
        return;
    if (!cJSON_IsObject(*acc) || !cJSON_IsObject(v)) {
        cJSON_Delete(*acc);
        *acc = json_dup(v);
        return;
    }
    const cJSON *k;
    cJSON_ArrayForEach(k, v)
    {
        cJSON *have = cJSON_GetObjectItemCaseSensitive(*acc, k->string);
        if (cJSON_IsArray(have) && cJSON_IsArray(k))
            append_items(have, k);
        else if (!cJSON_IsNull(k) || have == NULL)
            obj_set(*acc, k->string, json_dup(k));
    }
}

static struct oa_choice *choice_at(struct oa_asm *st, size_t idx)
{
    if (idx >= st->nchoices) {
        st->choices = pc_realloc(st->choices, (idx + 1) * sizeof(*st->choices));
        memset(st->choices + st->nchoices, 0, (idx + 1 - st->nchoices) * sizeof(*st->choices));
        st->nchoices = idx + 1;
    }
    if (st->choices[idx] == NULL)
        st->choices[idx] = pc_calloc(1, sizeof(struct oa_choice));
    return st->choices[idx];
}

static struct oa_tool *tool_at(struct oa_choice *c, size_t idx)
{
    if (idx >= c->ntools) {
        c->tools = pc_realloc(c->tools, (idx + 1) * sizeof(*c->tools));
        memset(c->tools + c->ntools, 0, (idx + 1 - c->ntools) * sizeof(*c->tools));
        c->ntools = idx + 1;
    }
    if (c->tools[idx] == NULL)
        c->tools[idx] = pc_calloc(1, sizeof(struct oa_tool));
    c->last_tool = idx;
    return c->tools[idx];
}

/*
 * Tool-call index. OpenAI always sends one; for servers that do not, a
 * delta with a new id starts a new call and any other continues the last.
 */
static int tool_index(const struct oa_choice *c, const cJSON *tc, size_t *idx)
{
    const cJSON *i = item(tc, "index");
    if (i != NULL)
        return index_value(i, idx);
    const char *id = str_of(item(tc, "id"));
    const struct oa_tool *last = c->ntools ? c->tools[c->last_tool] : NULL;
    bool fresh = id != NULL && *id != '\0' &&
                 (last == NULL || last->id == NULL || strcmp(last->id, id) != 0);
    *idx = fresh ? c->ntools : c->last_tool;
    return *idx < SSE_MAX_INDEX ? 0 : -1;
}

static int oa_tools_delta(struct oa_choice *c, const cJSON *calls)
{
    if (cJSON_IsNull(calls))
        return 0;
    if (!cJSON_IsArray(calls))
        return -1;
    const cJSON *tc;
    cJSON_ArrayForEach(tc, calls)
    {
        size_t idx;
        if (!cJSON_IsObject(tc) || tool_index(c, tc, &idx) < 0)
            return -1;
        struct oa_tool *t = tool_at(c, idx);
        const cJSON *fn = item(tc, "function");
        keep_str(&t->id, item(tc, "id"));
        keep_str(&t->type, item(tc, "type"));
        keep_str(&t->name, item(fn, "name"));
        append_str(&t->args, item(fn, "arguments"));
    }
    return 0;
}

static int oa_fcall_delta(struct oa_choice *c, const cJSON *fc)
{
    if (cJSON_IsNull(fc))
        return 0;
    if (!cJSON_IsObject(fc))
        return -1;
    if (c->fcall == NULL)
        c->fcall = pc_calloc(1, sizeof(*c->fcall));
    keep_str(&c->fcall->name, item(fc, "name"));
    append_str(&c->fcall->args, item(fc, "arguments"));
    return 0;
}

static int oa_delta(struct oa_choice *c, const cJSON *delta)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, delta)
    {
        int rc = 0;
        if (strcmp(k->string, "role") == 0) {
            keep_str(&c->role, k);
        } else if (strcmp(k->string, "tool_calls") == 0) {
            rc = oa_tools_delta(c, k);
        } else if (strcmp(k->string, "function_call") == 0) {
            rc = oa_fcall_delta(c, k);
        } else {
            struct oa_acc *a = acc_get(c, k->string);
            if (a == NULL)
                return -1;
            acc_add(a, k);
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

static int oa_choice_chunk(struct oa_asm *st, const cJSON *ch)
{
    size_t idx = 0;
    const cJSON *index = cJSON_IsObject(ch) ? item(ch, "index") : NULL;
    if (!cJSON_IsObject(ch) || (index != NULL && index_value(index, &idx) < 0))
        return -1;
    struct oa_choice *c = choice_at(st, idx);
    const cJSON *lp = item(ch, "logprobs");
    if (lp != NULL) {
        c->logprobs_seen = true;
        logprobs_merge(&c->logprobs, lp);
    }
    const cJSON *fr = item(ch, "finish_reason");
    if (fr != NULL && !cJSON_IsNull(fr)) {
        cJSON_Delete(c->finish);
        c->finish = json_dup(fr);
    }
    if (st->e == API_COMPLETIONS) {
        const cJSON *text = item(ch, "text");
        if (text != NULL)
            acc_add(acc_get(c, "text"), text);
        return 0;
    }
    const cJSON *delta = item(ch, "delta");
    if (delta == NULL || cJSON_IsNull(delta))
        return 0;
    return cJSON_IsObject(delta) ? oa_delta(c, delta) : -1;
}

/*
 * One chunk: top-level members keep their last non-blank value (Azure sends
 * chunks with an empty id and model), usage its last non-null one; each
 * choice is merged into the choice of the same index.
 */
static int oa_on_event(void *arg, enum ev_kind k, const struct sse_event *ev, const cJSON *chunk)
{
    static const char *const keys[] = {"id", "created", "model", "service_tier",
                                       "system_fingerprint"};
    struct oa_asm *st = arg;
    (void)ev;
    if (k != EV_CHUNK)
        return 0;
    const cJSON *choices = item(chunk, "choices");
    if (!cJSON_IsArray(choices))
        return -1;
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++)
        keep_last(st->top, keys[i], item(chunk, keys[i]));
    const cJSON *usage = item(chunk, "usage");
    if (usage != NULL && !cJSON_IsNull(usage))
        obj_set(st->top, "usage", json_dup(usage));
    const cJSON *ch;
    cJSON_ArrayForEach(ch, choices)
    {
        if (oa_choice_chunk(st, ch) < 0)
            return -1;
    }
    return 0;
}

/* {"id","type","function":{"name","arguments"}}: the non-stream tool-call shape. */
static cJSON *oa_tool_json(struct oa_tool *t)
{
    cJSON *fn = chk(cJSON_CreateObject());
    obj_set(fn, "name", chk(cJSON_CreateString(t->name ? t->name : "")));
    obj_set(fn, "arguments", chk(cJSON_CreateString(pc_buf_cstr(&t->args))));
    cJSON *o = chk(cJSON_CreateObject());
    obj_set(o, "id", chk(cJSON_CreateString(t->id ? t->id : "")));
    obj_set(o, "type", chk(cJSON_CreateString(t->type ? t->type : "function")));
    obj_set(o, "function", fn);
    return o;
}

static cJSON *oa_message(struct oa_choice *c)
{
    cJSON *m = chk(cJSON_CreateObject());
    struct oa_acc *content = acc_find(c, "content");
    obj_set(m, "role", chk(cJSON_CreateString(c->role ? c->role : "assistant")));
    obj_set(m, "content", content ? acc_value(content) : chk(cJSON_CreateNull()));
    for (size_t i = 0; i < c->naccs; i++)
        if (&c->accs[i] != content)
            obj_set(m, c->accs[i].key, acc_value(&c->accs[i]));
    cJSON *tools = NULL;
    for (size_t i = 0; i < c->ntools; i++) {
        if (c->tools[i] == NULL)
            continue;
        if (tools == NULL)
            tools = chk(cJSON_CreateArray());
        cJSON_AddItemToArray(tools, oa_tool_json(c->tools[i]));
    }
    if (tools != NULL)
        obj_set(m, "tool_calls", tools);
    if (c->fcall != NULL) {
        cJSON *fc = chk(cJSON_CreateObject());
        obj_set(fc, "name", chk(cJSON_CreateString(c->fcall->name ? c->fcall->name : "")));
        obj_set(fc, "arguments", chk(cJSON_CreateString(pc_buf_cstr(&c->fcall->args))));
        obj_set(m, "function_call", fc);
    }
    return m;
}

static cJSON *oa_choice_json(struct oa_asm *st, struct oa_choice *c, size_t idx)
{
    cJSON *o = chk(cJSON_CreateObject());
    if (st->e == API_COMPLETIONS) {
        struct oa_acc *text = acc_find(c, "text");
        obj_set(o, "text", text ? acc_value(text) : chk(cJSON_CreateString("")));
        obj_set(o, "index", chk(cJSON_CreateNumber((double)idx)));
    } else {
        obj_set(o, "index", chk(cJSON_CreateNumber((double)idx)));
        obj_set(o, "message", oa_message(c));
    }
    if (c->logprobs_seen)
        obj_set(o, "logprobs", c->logprobs ? json_dup(c->logprobs) : chk(cJSON_CreateNull()));
    obj_set(o, "finish_reason", c->finish ? json_dup(c->finish) : chk(cJSON_CreateNull()));
    return o;
}

static void copy_key(cJSON *dst, const cJSON *src, const char *key)
{
    const cJSON *v = item(src, key);
    if (v != NULL)
        obj_set(dst, key, json_dup(v));
}

/* The answer in the non-stream key order; NULL if no chunk carried a choice. */
static cJSON *oa_build(struct oa_asm *st)
{
    cJSON *choices = chk(cJSON_CreateArray());
    for (size_t i = 0; i < st->nchoices; i++)
        if (st->choices[i] != NULL)
            cJSON_AddItemToArray(choices, oa_choice_json(st, st->choices[i], i));
    if (cJSON_GetArraySize(choices) == 0) {
        cJSON_Delete(choices);
        return NULL;
    }
    cJSON *out = chk(cJSON_CreateObject());
    copy_key(out, st->top, "id");
    obj_set(out, "object",
            chk(cJSON_CreateString(st->e == API_CHAT ? "chat.completion" : "text_completion")));
    copy_key(out, st->top, "created");
    copy_key(out, st->top, "model");
    obj_set(out, "choices", choices);
    copy_key(out, st->top, "usage");
    copy_key(out, st->top, "service_tier");
    copy_key(out, st->top, "system_fingerprint");
    return out;
}

static void oa_tool_free(struct oa_tool *t)
{
    if (t == NULL)
        return;
    free(t->id);
    free(t->type);
    free(t->name);
    pc_buf_free(&t->args);
    free(t);
}

static void oa_choice_free(struct oa_choice *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->naccs; i++) {
        free(c->accs[i].key);
        cJSON_Delete(c->accs[i].val);
        pc_buf_free(&c->accs[i].str);
    }
    for (size_t i = 0; i < c->ntools; i++)
        oa_tool_free(c->tools[i]);
    oa_tool_free(c->fcall);
    free(c->accs);
    free(c->tools);
    free(c->role);
    cJSON_Delete(c->logprobs);
    cJSON_Delete(c->finish);
    free(c);
}

static cJSON *oa_assemble(enum api_endpoint e, const char *rec, size_t len)
{
    struct oa_asm st = {e, chk(cJSON_CreateObject()), NULL, 0};
    cJSON *out = NULL;
    if (walk(e, rec, len, oa_on_event, &st) == 0)
        out = oa_build(&st);
    for (size_t i = 0; i < st.nchoices; i++)
        oa_choice_free(st.choices[i]);
    free(st.choices);
    cJSON_Delete(st.top);
    return out;
}

/* ---- Anthropic assembly: events -> message --------------------------------- */

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
    if (index_value(item(j, "index"), &i) < 0 || i >= st->n)
        return NULL;
    return &st->blocks[i];
}

/* Blocks arrive in index order (the SDK appends them in arrival order too). */
static int an_block_start(struct an_asm *st, const cJSON *j)
{
    const cJSON *b = item(j, "content_block");
    size_t i;
    if (!cJSON_IsObject(b) || index_value(item(j, "index"), &i) < 0 || i != st->n)
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
    for (size_t i = 0; i < PC_ARRAY_LEN(an_deltas); i++)
        if (strcmp(type, an_deltas[i].type) == 0)
            return an_accumulate(b, an_deltas[i].kind, item(d, an_deltas[i].member));
    return 0; /* a delta type newer than this code */
}

/* message_delta: delta members (stop_reason, ...) overwrite; non-null usage members merge. */
static int an_msg_delta(struct an_asm *st, const cJSON *j)
{
    const cJSON *k, *delta = item(j, "delta");
    if (delta != NULL && !cJSON_IsNull(delta) && !cJSON_IsObject(delta))
        return -1;
    if (!cJSON_IsObject(delta))
        delta = NULL;
    cJSON_ArrayForEach(k, delta)
    {
        obj_set(st->msg, k->string, json_dup(k));
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

static int an_on_event(void *arg, enum ev_kind k, const struct sse_event *ev, const cJSON *j)
{
    struct an_asm *st = arg;
    (void)ev;
    if (k == EV_PING || k == EV_OTHER)
        return 0;
    if ((k == EV_MSG_START) != (st->msg == NULL))
        return -1; /* exactly one message_start, before everything else */
    switch (k) {
    case EV_MSG_START:
        if (!cJSON_IsObject(item(j, "message")))
            return -1;
        st->msg = json_dup(item(j, "message"));
        return 0;
    case EV_BLOCK_START:
        return an_block_start(st, j);
    case EV_BLOCK_DELTA:
        return an_block_delta(st, j);
    case EV_BLOCK_STOP:
        return an_block_of(st, j) ? 0 : -1;
    case EV_MSG_DELTA:
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
    else if ((v = parse_json(pc_buf_cstr(&b->acc), b->acc.len)) == NULL)
        return -1;
    if (!json_sane(v)) {
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

static cJSON *an_assemble(const char *rec, size_t len)
{
    struct an_asm st = {NULL, NULL, 0};
    cJSON *out = NULL;
    if (walk(API_MESSAGES, rec, len, an_on_event, &st) == 0)
        out = an_build(&st);
    for (size_t i = 0; i < st.n; i++) {
        cJSON_Delete(st.blocks[i].block);
        pc_buf_free(&st.blocks[i].acc);
    }
    free(st.blocks);
    cJSON_Delete(st.msg);
    return out;
}

/* ---- Responses API assembly: the final event carries the answer ------------ */

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
static int rs_on_event(void *arg, enum ev_kind k, const struct sse_event *ev, const cJSON *j)
{
    cJSON **out = arg;
    (void)ev;
    if (k != EV_DONE)
        return 0;
    if (!rs_usable(item(j, "response")))
        return -1;
    *out = json_dup(item(j, "response"));
    return 0;
}

static cJSON *rs_assemble(const char *rec, size_t len)
{
    cJSON *out = NULL;
    if (walk(API_RESPONSES, rec, len, rs_on_event, &out) < 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

cJSON *sse_assemble(enum api_endpoint e, const char *rec, size_t len, struct api_usage *usage)
{
    cJSON *out = NULL;
    if (is_openai(e))
        out = oa_assemble(e, rec, len);
    else if (e == API_MESSAGES)
        out = an_assemble(rec, len);
    else if (e == API_RESPONSES)
        out = rs_assemble(rec, len);
    if (usage != NULL)
        api_usage_from_response(e, out, usage); /* one reading of usage for both paths */
    return out;
}

/* ---- synthesis: JSON answer -> SSE ----------------------------------------- */

struct synth {
    struct pc_buf *out;
    struct pc_buf head; /* OpenAI: a chunk's members before "choices" */
    uint32_t seed;      /* piece sizes: deterministic, so output is reproducible */
    bool usage_null;    /* OpenAI include_usage: other chunks carry "usage":null, as live */
};

/* Length of the next piece of s[0..n): 16..64 bytes, extended to a UTF-8 boundary. */
static size_t piece_len(struct synth *s, const char *str, size_t n)
{
    s->seed = s->seed * 1103515245u + 12345u;
    size_t k = SSE_PIECE_MIN + (s->seed >> 16) % (SSE_PIECE_MAX - SSE_PIECE_MIN + 1);
    while (k < n && ((unsigned char)str[k] & 0xC0) == 0x80)
        k++;
    return PC_MIN(k, n);
}

/* OpenAI: one choice of one chunk; pass choice NULL for the usage-only chunk. */
static void oa_emit(struct synth *s, const struct pc_buf *choice, const cJSON *usage)
{
    pc_buf_append_str(s->out, "data: ");
    pc_buf_append(s->out, s->head.data, s->head.len);
    pc_buf_append_str(s->out, "\"choices\":[");
    if (choice != NULL)
        pc_buf_append(s->out, choice->data, choice->len);
    pc_buf_append_str(s->out, "]");
    if (choice == NULL || s->usage_null) {
        pc_buf_append_str(s->out, ",\"usage\":");
        buf_json(s->out, choice == NULL ? usage : NULL);
    }
    pc_buf_append_str(s->out, "}\n\n");
}

static void oa_head(struct synth *s, const cJSON *resp, const char *object)
{
    static const char *const keys[] = {"created", "model", "service_tier", "system_fingerprint"};
    pc_buf_append_char(&s->head, '{');
    if (item(resp, "id") != NULL) {
        pc_buf_append_str(&s->head, "\"id\":");
        buf_json(&s->head, item(resp, "id"));
        pc_buf_append_char(&s->head, ',');
    }
    pc_buf_printf(&s->head, "\"object\":\"%s\",", object);
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++) {
        if (item(resp, keys[i]) == NULL)
            continue;
        pc_buf_printf(&s->head, "\"%s\":", keys[i]);
        buf_json(&s->head, item(resp, keys[i]));
        pc_buf_append_char(&s->head, ',');
    }
}

/* One choice being streamed; logprobs ride on one chunk, null on the others. */
struct oa_ctx {
    struct synth *s;
    size_t index;
    const cJSON *logprobs; /* NULL: the answer's choice has no "logprobs" member */
    bool lp_pending;
};

static size_t synth_index(const cJSON *ch, size_t pos)
{
    size_t i;
    return index_value(item(ch, "index"), &i) == 0 ? i : pos;
}

/* Close a choice body: logprobs (if the answer has them) and finish_reason. */
static void oa_choice_tail(struct oa_ctx *c, struct pc_buf *b, const cJSON *finish)
{
    if (c->logprobs != NULL) {
        pc_buf_append_str(b, ",\"logprobs\":");
        buf_json(b, c->lp_pending ? c->logprobs : NULL);
        c->lp_pending = false;
    }
    pc_buf_append_str(b, ",\"finish_reason\":");
    buf_json(b, finish);
    pc_buf_append_char(b, '}');
    oa_emit(c->s, b, NULL);
    pc_buf_free(b);
}

static void chat_chunk(struct oa_ctx *c, const struct pc_buf *delta, const cJSON *finish)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "{\"index\":%zu,\"delta\":", c->index);
    pc_buf_append(&b, delta->data, delta->len);
    oa_choice_tail(c, &b, finish);
}

/* Delta {"key":VALUE} for each piece of a string (at least one), or once for other values. */
static void chat_value(struct oa_ctx *c, const char *key, const cJSON *v)
{
    const char *str = str_of(v);
    size_t n = str ? strlen(str) : 0, pos = 0;
    do {
        struct pc_buf d = PC_BUF_INIT;
        pc_buf_append_char(&d, '{');
        buf_json_cstr(&d, key);
        pc_buf_append_char(&d, ':');
        size_t k = str ? piece_len(c->s, str + pos, n - pos) : 0;
        if (str != NULL)
            pc_buf_json_str(&d, str + pos, k);
        else
            buf_json(&d, v);
        pc_buf_append_char(&d, '}');
        chat_chunk(c, &d, NULL);
        pc_buf_free(&d);
        pos += k;
    } while (pos < n);
}

/* First chunk: role, content "" (or null), refusal null, as the live API sends. */
static void chat_role_chunk(struct oa_ctx *c, const cJSON *m)
{
    struct pc_buf d = PC_BUF_INIT;
    const char *role = str_of(item(m, "role"));
    pc_buf_append_str(&d, "{\"role\":");
    buf_json_cstr(&d, role ? role : "assistant");
    pc_buf_append_str(&d, cJSON_IsString(item(m, "content")) ? ",\"content\":\"\""
                                                             : ",\"content\":null");
    if (item(m, "refusal") != NULL)
        pc_buf_append_str(&d, ",\"refusal\":null");
    pc_buf_append_char(&d, '}');
    chat_chunk(c, &d, NULL);
    pc_buf_free(&d);
}

/* Tool call i: id/type/name with empty arguments, then the arguments in pieces. */
static void chat_tool(struct oa_ctx *c, const cJSON *tc, size_t i)
{
    const cJSON *fn = item(tc, "function");
    const char *id = str_of(item(tc, "id")), *type = str_of(item(tc, "type"));
    const char *name = str_of(item(fn, "name")), *args = str_of(item(fn, "arguments"));
    struct pc_buf d = PC_BUF_INIT;
    pc_buf_printf(&d, "{\"tool_calls\":[{\"index\":%zu,\"id\":", i);
    buf_json_cstr(&d, id ? id : "");
    pc_buf_append_str(&d, ",\"type\":");
    buf_json_cstr(&d, type ? type : "function");
    pc_buf_append_str(&d, ",\"function\":{\"name\":");
    buf_json_cstr(&d, name ? name : "");
    pc_buf_append_str(&d, ",\"arguments\":\"\"}}]}");
    chat_chunk(c, &d, NULL);
    for (size_t n = args ? strlen(args) : 0, pos = 0, k; pos < n; pos += k) {
        k = piece_len(c->s, args + pos, n - pos);
        d.len = 0;
        pc_buf_printf(&d, "{\"tool_calls\":[{\"index\":%zu,\"function\":{\"arguments\":", i);
        pc_buf_json_str(&d, args + pos, k);
        pc_buf_append_str(&d, "}}]}");
        chat_chunk(c, &d, NULL);
    }
    pc_buf_free(&d);
}

/* Legacy function_call: name first, then the arguments in pieces. */
static void chat_fcall(struct oa_ctx *c, const cJSON *fc)
{
    const char *name = str_of(item(fc, "name")), *args = str_of(item(fc, "arguments"));
    struct pc_buf d = PC_BUF_INIT;
    pc_buf_append_str(&d, "{\"function_call\":{\"name\":");
    buf_json_cstr(&d, name ? name : "");
    pc_buf_append_str(&d, ",\"arguments\":\"\"}}");
    chat_chunk(c, &d, NULL);
    for (size_t n = args ? strlen(args) : 0, pos = 0, k; pos < n; pos += k) {
        k = piece_len(c->s, args + pos, n - pos);
        d.len = 0;
        pc_buf_append_str(&d, "{\"function_call\":{\"arguments\":");
        pc_buf_json_str(&d, args + pos, k);
        pc_buf_append_str(&d, "}}");
        chat_chunk(c, &d, NULL);
    }
    pc_buf_free(&d);
}

static bool chat_special(const char *key)
{
    static const char *const keys[] = {"role", "content", "refusal", "tool_calls", "function_call"};
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

static int chat_tools(struct oa_ctx *c, const cJSON *calls)
{
    size_t i = 0;
    const cJSON *tc, *list = cJSON_IsArray(calls) ? calls : NULL;
    cJSON_ArrayForEach(tc, list)
    {
        if (!cJSON_IsObject(tc))
            return -1;
        chat_tool(c, tc, i++);
    }
    return 0;
}

/*
 * One chat choice: role chunk; other message members (reasoning, annotations,
 * ...); content and refusal in pieces; tool calls; finish chunk.
 */
static int chat_choice(struct synth *s, const cJSON *ch, size_t pos)
{
    const cJSON *m = item(ch, "message");
    if (!cJSON_IsObject(m))
        return -1;
    struct oa_ctx c = {s, synth_index(ch, pos), item(ch, "logprobs"), false};
    chat_role_chunk(&c, m);
    c.lp_pending = true;
    const cJSON *k;
    cJSON_ArrayForEach(k, m)
    {
        if (!chat_special(k->string))
            chat_value(&c, k->string, k);
    }
    const cJSON *content = item(m, "content"), *refusal = item(m, "refusal");
    if (cJSON_IsString(content) ? *content->valuestring != '\0'
                                : content != NULL && !cJSON_IsNull(content))
        chat_value(&c, "content", content);
    if (refusal != NULL && !cJSON_IsNull(refusal))
        chat_value(&c, "refusal", refusal);
    if (chat_tools(&c, item(m, "tool_calls")) < 0)
        return -1;
    if (cJSON_IsObject(item(m, "function_call")))
        chat_fcall(&c, item(m, "function_call"));
    struct pc_buf empty = {"{}", 2, 2};
    chat_chunk(&c, &empty, item(ch, "finish_reason"));
    return 0;
}

/* Completions chunk: text (omitted when NULL), index, logprobs, finish_reason. */
static void cmpl_chunk(struct oa_ctx *c, const struct pc_buf *text, const cJSON *finish)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append_char(&b, '{');
    if (text != NULL) {
        pc_buf_append_str(&b, "\"text\":");
        pc_buf_append(&b, text->data, text->len);
        pc_buf_append_char(&b, ',');
    }
    pc_buf_printf(&b, "\"index\":%zu", c->index);
    oa_choice_tail(c, &b, finish);
}

/* One completions choice: the text in pieces (a non-string text once), then a finish chunk. */
static int cmpl_choice(struct synth *s, const cJSON *ch, size_t pos)
{
    if (!cJSON_IsObject(ch))
        return -1;
    struct oa_ctx c = {s, synth_index(ch, pos), item(ch, "logprobs"), true};
    const cJSON *text = item(ch, "text");
    const char *str = str_of(text);
    struct pc_buf t = PC_BUF_INIT;
    size_t n = str ? strlen(str) : 0, off = 0;
    do {
        size_t k = str ? piece_len(s, str + off, n - off) : 0;
        t.len = 0;
        if (str != NULL)
            pc_buf_json_str(&t, str + off, k);
        else
            buf_json(&t, text);
        cmpl_chunk(&c, text ? &t : NULL, NULL);
        off += k;
    } while (off < n);
    t.len = 0;
    pc_buf_append_str(&t, "\"\"");
    cmpl_chunk(&c, str ? &t : NULL, item(ch, "finish_reason"));
    pc_buf_free(&t);
    return 0;
}

static int oa_synth(enum api_endpoint e, const cJSON *resp, bool include_usage, struct pc_buf *out)
{
    const cJSON *choices = item(resp, "choices"), *usage = item(resp, "usage");
    if (!cJSON_IsArray(choices) || cJSON_GetArraySize(choices) == 0)
        return -1;
    bool with_usage = include_usage && usage != NULL && !cJSON_IsNull(usage);
    struct synth s = {out, PC_BUF_INIT, 0x5eed, with_usage};
    oa_head(&s, resp, e == API_CHAT ? "chat.completion.chunk" : "text_completion");
    int rc = 0;
    size_t pos = 0;
    const cJSON *ch;
    cJSON_ArrayForEach(ch, choices)
    {
        rc = e == API_CHAT ? chat_choice(&s, ch, pos++) : cmpl_choice(&s, ch, pos++);
        if (rc < 0)
            break;
    }
    if (rc == 0 && with_usage)
        oa_emit(&s, NULL, usage);
    if (rc == 0)
        pc_buf_append_str(out, "data: [DONE]\n\n");
    pc_buf_free(&s.head);
    return rc;
}

/* Anthropic: `event: NAME` + `data: JSON`. */
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

/* message_start: the answer with empty content, no stop reason yet, provisional usage. */
static void an_message_start(struct synth *s, const cJSON *resp)
{
    cJSON *m = json_dup(resp);
    obj_set(m, "content", chk(cJSON_CreateArray()));
    obj_set(m, "stop_reason", chk(cJSON_CreateNull()));
    obj_set(m, "stop_sequence", chk(cJSON_CreateNull()));
    an_provisional_usage(m);
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append_str(&b, "{\"type\":\"message_start\",\"message\":");
    buf_json(&b, m);
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
    buf_json(&e, start);
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
        buf_json(&v, c);
        an_delta(s, i, "citations_delta", "citation", &v);
    }
    if (kind == AN_TEXT || kind == AN_THINKING) {
        an_delta_pieces(s, i, kind == AN_TEXT ? "text_delta" : "thinking_delta", an_field(kind),
                        item(b, an_field(kind))->valuestring);
    } else if (kind == AN_INPUT) {
        char *json = cJSON_PrintUnformatted(item(b, "input"));
        if (json == NULL)
            sse_oom();
        if (strcmp(json, "{}") != 0)
            an_delta_pieces(s, i, "input_json_delta", "partial_json", json);
        cJSON_free(json);
    }
    const cJSON *sig = item(b, "signature");
    if (cJSON_IsString(sig)) {
        v.len = 0;
        buf_json(&v, sig);
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
    buf_json(&b, item(resp, "stop_reason"));
    pc_buf_append_str(&b, ",\"stop_sequence\":");
    buf_json(&b, item(resp, "stop_sequence"));
    pc_buf_append_char(&b, '}');
    if (cJSON_IsObject(usage) && item(usage, "output_tokens") != NULL) {
        pc_buf_append_str(&b, ",\"usage\":{\"output_tokens\":");
        buf_json(&b, item(usage, "output_tokens"));
        pc_buf_append_char(&b, '}');
    }
    pc_buf_append_char(&b, '}');
    an_emit(s, "message_delta", &b);
    pc_buf_free(&b);
}

static int an_synth(const cJSON *resp, struct pc_buf *out)
{
    const cJSON *content = item(resp, "content"), *b;
    if (!cJSON_IsArray(content))
        return -1;
    cJSON_ArrayForEach(b, content)
    {
        if (!cJSON_IsObject(b))
            return -1;
    }
    struct synth s = {out, PC_BUF_INIT, 0x5eed, false};
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

/* ---- Responses API synthesis: response -> its event stream ------------------- */

/* Events of one response: each carries the next sequence_number. */
struct rs_synth {
    struct synth s;
    unsigned seq;
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
    pc_buf_printf(r->s.out, "event: %s\ndata: ", type);
    buf_json(r->s.out, ev);
    pc_buf_append_str(r->s.out, "\n\n");
    cJSON_Delete(ev);
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

/* One delta event per piece of str (none for an empty string): base + {member: piece}. */
static void rs_pieces(struct rs_synth *r, const char *type, const cJSON *base, const char *member,
                      const char *str)
{
    for (size_t n = strlen(str), pos = 0, k; pos < n; pos += k) {
        k = piece_len(&r->s, str + pos, n - pos);
        char *piece = pc_malloc(k + 1);
        memcpy(piece, str + pos, k);
        piece[k] = '\0';
        cJSON *ev = json_dup(base);
        obj_set(ev, member, chk(cJSON_CreateString(piece)));
        free(piece);
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
    ev = rs_part_event(it, out_idx, key, idx);
    obj_set(ev, "part", start);
    snprintf(name, sizeof(name), "%s.added", prefix);
    rs_emit(r, name, ev);
    cJSON *base = kind >= 0 ? rs_part_event(it, out_idx, key, idx) : NULL;
    if (kind >= 0)
        rs_pieces(r, rs_text_parts[kind].delta, base, "delta",
                  item(part, rs_text_parts[kind].member)->valuestring);
    rs_annotations(r, it, out_idx, part, idx);
    if (kind >= 0) {
        obj_set(base, rs_text_parts[kind].member, json_dup(item(part, rs_text_parts[kind].member)));
        rs_emit(r, rs_text_parts[kind].done, base);
    }
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

/* A function call's arguments in pieces, then the whole. */
static void rs_arguments(struct rs_synth *r, const cJSON *it, size_t out_idx)
{
    const cJSON *args = item(it, "arguments");
    if (!cJSON_IsString(args))
        return;
    cJSON *base = rs_item_event(it, out_idx);
    rs_pieces(r, "response.function_call_arguments.delta", base, "delta", args->valuestring);
    obj_set(base, "arguments", json_dup(args));
    rs_emit(r, "response.function_call_arguments.done", base);
}

/*
 * Output item out_idx: output_item.added with the item as it starts (in
 * progress, its streamed members empty), what streams inside it, and
 * output_item.done with the item as the answer has it.
 */
static void rs_item(struct rs_synth *r, const cJSON *it, size_t out_idx)
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
    ev = rs_event();
    obj_set(ev, "output_index", chk(cJSON_CreateNumber((double)out_idx)));
    obj_set(ev, "item", json_dup(it));
    rs_emit(r, "response.output_item.done", ev);
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
 * response, which is what sse_assemble takes back.
 */
static int rs_synth(const cJSON *resp, struct pc_buf *out)
{
    const cJSON *output = item(resp, "output"), *it;
    const char *status = str_of(item(resp, "status"));
    if (!rs_usable(resp))
        return -1;
    struct rs_synth r = {{out, PC_BUF_INIT, 0x5eed, false}, 0};
    rs_start(&r, resp);
    size_t i = 0;
    cJSON_ArrayForEach(it, output)
    {
        rs_item(&r, it, i++);
    }
    cJSON *ev = rs_event();
    obj_set(ev, "response", json_dup(resp));
    rs_emit(&r, strcmp(status, "incomplete") == 0 ? "response.incomplete" : "response.completed",
            ev);
    return 0;
}

int sse_synthesize(enum api_endpoint e, const cJSON *resp, bool include_usage, struct pc_buf *out)
{
    size_t mark = out->len;
    int rc = -1;
    if (!cJSON_IsObject(resp))
        return -1;
    if (is_openai(e))
        rc = oa_synth(e, resp, include_usage, out);
    else if (e == API_MESSAGES)
        rc = an_synth(resp, out);
    else if (e == API_RESPONSES)
        rc = rs_synth(resp, out);
    if (rc < 0)
        out->len = mark;
    return rc;
}

/* ---- replay ----------------------------------------------------------------- */

struct replay {
    bool include_usage;
    struct pc_buf *out;
};

/* The OpenAI usage-only chunk: "choices": [] and a "usage" object. */
static bool is_usage_chunk(const cJSON *chunk)
{
    const cJSON *choices = item(chunk, "choices");
    return cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 0 &&
           cJSON_IsObject(item(chunk, "usage"));
}

/* Re-frame one event: `event:` line if named, one `data:` line per data line, blank line. */
static void write_event(struct pc_buf *out, const struct sse_event *ev)
{
    if (ev->event_len > 0) {
        pc_buf_append_str(out, "event: ");
        pc_buf_append(out, ev->event, ev->event_len);
        pc_buf_append_char(out, '\n');
    }
    const char *p = ev->data, *end = ev->data + ev->data_len;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        pc_buf_append_str(out, "data: ");
        pc_buf_append(out, p, (size_t)(stop - p));
        pc_buf_append_char(out, '\n');
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    pc_buf_append_char(out, '\n');
}

static int replay_event(void *arg, enum ev_kind k, const struct sse_event *ev, const cJSON *json)
{
    struct replay *r = arg;
    if (k == EV_CHUNK && !r->include_usage && is_usage_chunk(json))
        return 0;
    write_event(r->out, ev);
    return 0;
}

int sse_replay(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
               struct pc_buf *out)
{
    struct replay r = {include_usage, out};
    size_t mark = out->len;
    if (!is_streamable(e) || walk(e, rec, len, replay_event, &r) < 0) {
        out->len = mark;
        return -1;
    }
    return 0;
}

/* ---- usage filter ------------------------------------------------------------- */

void sse_usage_filter_init(struct sse_usage_filter *f)
{
    memset(f, 0, sizeof(*f));
}

void sse_usage_filter_free(struct sse_usage_filter *f)
{
    pc_buf_free(&f->pending);
}

/*
 * The value of the only data line of ev[0..len) as [*start, *end), trailing
 * white space left off; false if there is no data line or more than one.
 */
static bool single_data_value(const char *ev, size_t len, size_t *start, size_t *end)
{
    bool found = false;
    for (size_t p = 0; p < len;) {
        size_t eol = line_end(ev, len, p);
        if (eol - p >= 5 && memcmp(ev + p, "data:", 5) == 0) {
            if (found)
                return false; /* several data lines: not a chunk we rewrite */
            found = true;
            *start = p + 5 + (p + 5 < eol && ev[p + 5] == ' ');
            *end = eol;
            while (*end > *start && (unsigned char)ev[*end - 1] <= 0x20 && ev[*end - 1] != '\0')
                (*end)--;
        }
        p = eol + 1;
    }
    return found;
}

#define FILTER_MEMBERS 64 /* a chunk with more top-level members passes as it is */

/*
 * One complete event (blank line included): passed on, rewritten or dropped.
 * Only an event whose one data line is an object with every member in order
 * is looked at; one walk over its members finds "usage" and "choices"
 * (names compared decoded, as a JSON reader sees them).
 */
static void filter_event(const char *ev, size_t len, struct pc_buf *out)
{
    struct jspan root = {0, 0}, names[FILTER_MEMBERS], vals[FILTER_MEMBERS];
    size_t n;
    if (!single_data_value(ev, len, &root.start, &root.end) || root.end - root.start < 2 ||
        ev[root.start] != '{' || ev[root.end - 1] != '}' ||
        !jedit_members(ev, &root, names, vals, FILTER_MEMBERS, &n)) {
        pc_buf_append(out, ev, len);
        return;
    }
    const struct jspan *usage = NULL, *uname = NULL, *choices = NULL;
    size_t named = 0;
    for (size_t i = 0; i < n; i++) {
        if (jedit_name_is(ev, &names[i], "usage")) {
            named++;
            uname = &names[i];
            usage = &vals[i];
        } else if (jedit_name_is(ev, &names[i], "choices")) {
            choices = &vals[i];
        }
    }
    if (usage == NULL) {
        pc_buf_append(out, ev, len);
        return;
    }
    if (jedit_is_object(ev, usage) && choices != NULL && jedit_is_array(ev, choices) &&
        jedit_count(ev, choices) == 0)
        return; /* the usage-only chunk */
    if (!jedit_is_null(ev, usage) || named != 1) {
        pc_buf_append(out, ev, len); /* not ours, or duplicates: left as they came */
        return;
    }
    struct jedit e = JEDIT_INIT;
    jedit_remove_member(&e, ev, &root, uname, usage);
    jedit_apply(&e, ev, len, out);
    jedit_free(&e);
}

/*
 * The end of the first complete event in b (just past its blank line), or
 * 0. A CR at the very end may be the first half of a CRLF: wait for more.
 */
static size_t event_end(const char *b, size_t len)
{
    for (size_t p = 0; p < len;) {
        size_t eol = line_end(b, len, p);
        if (eol == len)
            return 0;
        size_t next = eol + 1;
        if (b[eol] == '\r') {
            if (next == len)
                return 0;
            if (b[next] == '\n')
                next++;
        }
        if (eol == p)
            return next; /* the blank line */
        p = next;
    }
    return 0;
}

/* Complete events are filtered straight from in; only an unfinished one waits in pending. */
void sse_usage_filter_feed(struct sse_usage_filter *f, const char *in, size_t len,
                           struct pc_buf *out)
{
    const char *text = in;
    size_t n, done = 0, total = len;
    if (f->pending.len > 0) {
        pc_buf_append(&f->pending, in, len);
        text = f->pending.data;
        total = f->pending.len;
    }
    while ((n = event_end(text + done, total - done)) > 0) {
        filter_event(text + done, n, out);
        done += n;
    }
    if (text == in)
        pc_buf_append(&f->pending, in + done, len - done);
    else
        pc_buf_consume(&f->pending, done);
}

void sse_usage_filter_end(struct sse_usage_filter *f, struct pc_buf *out)
{
    pc_buf_append(out, f->pending.data, f->pending.len);
    pc_buf_reset(&f->pending);
}

/* ---- a stored answer, in the mode a client asks for ------------------------------- */

/*
 * A recorded stream for a client: without the usage chunk unless it asked
 * for usage, and then (OpenAI) also without the "usage": null members that
 * asking for usage put in the other chunks.
 */
static int answer_replay(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
                         struct pc_buf *out)
{
    if (include_usage || api_dialect_of(e) != API_DIALECT_OPENAI)
        return sse_replay(e, rec, len, include_usage, out);
    struct pc_buf all = PC_BUF_INIT;
    int rc = sse_replay(e, rec, len, false, &all);
    if (rc == 0) {
        struct sse_usage_filter f;
        sse_usage_filter_init(&f);
        sse_usage_filter_feed(&f, all.data, all.len, out);
        sse_usage_filter_end(&f, out);
        sse_usage_filter_free(&f);
    }
    pc_buf_free(&all);
    return rc;
}

/* A recorded stream as the JSON answer it assembles to. */
static int answer_assemble(enum api_endpoint e, const char *rec, size_t len, struct pc_buf *out)
{
    cJSON *resp = sse_assemble(e, rec, len, NULL);
    if (resp == NULL)
        return -1;
    char *s = cJSON_PrintUnformatted(resp);
    cJSON_Delete(resp);
    if (s == NULL)
        return -1;
    pc_buf_append_str(out, s);
    cJSON_free(s);
    return 0;
}

int sse_answer(enum api_endpoint e, bool recorded, const char *body, size_t len, bool stream,
               bool include_usage, struct pc_buf *out)
{
    if (stream && recorded)
        return answer_replay(e, body, len, include_usage, out);
    if (stream) {
        cJSON *resp = cJSON_ParseWithLength(body, len);
        int rc = resp ? sse_synthesize(e, resp, include_usage, out) : -1;
        cJSON_Delete(resp);
        return rc;
    }
    if (recorded)
        return answer_assemble(e, body, len, out);
    pc_buf_append(out, body, len);
    return 0;
}
