/*
 * dialect/openai.c - OpenAI's chat completions and completions: streams of
 * chat.completion.chunk / text_completion chunks ending in `data: [DONE]`,
 * usage in prompt_tokens / completion_tokens (and the embeddings' answers'),
 * errors as {"error":{"message","type","param","code"}}. A stream carries
 * usage only when the request asked for it (stream_options.include_usage),
 * in a last chunk of its own with empty "choices".
 *
 *   chunks --oa_on_event--> per-choice accumulators --oa_build--> the answer
 *   answer --oa_synth--> role chunk, other members, content / refusal in
 *            pieces, tool calls, finish chunk (each choice), usage, [DONE]
 *
 * Accumulation follows the official SDKs' stream helpers: strings are
 * concatenated, objects (message.audio, a custom tool call's "custom")
 * merged member by member, ids/names/roles/finish reasons keep the last
 * non-empty value, a choice's other members (vLLM's stop_reason) the last
 * non-null one.
 */
#include "dialect_int.h"

#include <stdio.h>

#define OA_MAX_KEYS 64 /* distinct delta keys per choice */

enum oa_kind {
    OA_CHUNK = SSE_KIND_OWN, /* a chunk (any other object without an error) */
};

/* ---- events ------------------------------------------------------------------- */

/* Like the openai SDK: [DONE] ends the stream; an "error" member or event is an error. */
static int oa_classify(const struct sse_event *ev, cJSON **json)
{
    if (sse_field_is(ev->event, ev->event_len, "error"))
        return SSE_ERROR;
    if (ev->data_len >= 6 && memcmp(ev->data, "[DONE]", 6) == 0)
        return SSE_DONE;
    *json = dialect_parse_object(ev->data, ev->data_len);
    if (*json == NULL)
        return SSE_BAD;
    const cJSON *err = item(*json, "error");
    return err != NULL && !cJSON_IsNull(err) ? SSE_ERROR : OA_CHUNK;
}

/* The usage-only chunk: "choices": [] and a "usage" object. */
static bool oa_usage_chunk(int kind, const cJSON *chunk)
{
    const cJSON *choices = item(chunk, "choices");
    return kind == OA_CHUNK && cJSON_IsArray(choices) && cJSON_GetArraySize(choices) == 0 &&
           cJSON_IsObject(item(chunk, "usage"));
}

/* ---- assembly: chunks -> chat.completion / text_completion ---------------------- */

/*
 * One delta member accumulated across chunks: strings and arrays
 * concatenate, objects merge member by member (a stream's message.audio
 * comes as {id, transcript}, {transcript}, ..., {data}, ..., {expires_at}).
 */
struct oa_acc {
    char *key;
    cJSON *val; /* the value while it is neither a string nor an object */
    struct pc_buf str;
    bool is_str;
    bool is_obj;
    struct oa_acc *kids; /* is_obj: its members, in order of first appearance */
    size_t nkids;
};

struct oa_tool {
    char *id, *type, *name; /* last non-empty value */
    struct pc_buf args;
    bool has_fn;         /* some delta had a "function" member */
    struct oa_acc *accs; /* other members (a custom tool's "custom": name, input) */
    size_t naccs;
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
    cJSON *extra;  /* other members of the choice (vLLM's stop_reason): last non-null value */
};

struct oa_asm {
    enum api_endpoint e;
    cJSON *top;                 /* id, created, model, service_tier, system_fingerprint, usage */
    struct oa_choice **choices; /* sparse, by choice index */
    size_t nchoices;
};

static struct oa_acc *acc_in(struct oa_acc **list, size_t *n, const char *key)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].key, key) == 0)
            return &(*list)[i];
    if (*n == OA_MAX_KEYS)
        return NULL;
    *list = pc_realloc(*list, (*n + 1) * sizeof(**list));
    struct oa_acc *a = &(*list)[(*n)++];
    memset(a, 0, sizeof(*a));
    a->key = pc_strdup(key);
    return a;
}

static void acc_free(struct oa_acc *a)
{
    free(a->key);
    cJSON_Delete(a->val);
    pc_buf_free(&a->str);
    for (size_t i = 0; i < a->nkids; i++)
        acc_free(&a->kids[i]);
    free(a->kids);
}

/* Forget what a holds (its key stays). */
static void acc_clear(struct oa_acc *a)
{
    char *key = a->key;
    a->key = NULL;
    acc_free(a);
    memset(a, 0, sizeof(*a));
    a->key = key;
}

/*
 * Add one delta value: a string is appended (to a string so far), an array
 * appended to an array, an object merged into an object (depth levels deep,
 * then taken whole), anything else replaces, null only an absent value.
 * As the openai Python SDK's stream helper accumulates (accumulate_delta).
 */
static void acc_add_depth(struct oa_acc *a, const cJSON *v, int depth)
{
    if (cJSON_IsString(v)) {
        if (!a->is_str) {
            acc_clear(a);
            a->is_str = true;
        }
        pc_buf_append_str(&a->str, v->valuestring);
    } else if (cJSON_IsArray(v) && cJSON_IsArray(a->val)) {
        append_items(a->val, v);
    } else if (cJSON_IsObject(v) && depth > 0) {
        if (!a->is_obj) {
            acc_clear(a);
            a->is_obj = true;
        }
        const cJSON *k;
        cJSON_ArrayForEach(k, v)
        {
            struct oa_acc *kid = acc_in(&a->kids, &a->nkids, k->string);
            if (kid == NULL)
                continue;
            /* A member's "type" and "index" name it in every piece (as the SDKs read them). */
            if (strcmp(k->string, "type") == 0 || strcmp(k->string, "index") == 0)
                acc_clear(kid);
            acc_add_depth(kid, k, depth - 1);
        }
    } else if (!cJSON_IsNull(v) || (!a->is_str && !a->is_obj && a->val == NULL)) {
        acc_clear(a);
        a->val = json_dup(v);
    }
}

#define OA_MERGE_DEPTH 8 /* object levels merged member by member */

static void acc_add(struct oa_acc *a, const cJSON *v)
{
    acc_add_depth(a, v, OA_MERGE_DEPTH);
}

static cJSON *acc_value(struct oa_acc *a)
{
    if (a->is_obj) {
        cJSON *o = chk(cJSON_CreateObject());
        for (size_t i = 0; i < a->nkids; i++)
            obj_set(o, a->kids[i].key, acc_value(&a->kids[i]));
        return o;
    }
    return a->is_str ? chk(cJSON_CreateString(pc_buf_cstr(&a->str))) : json_dup(a->val);
}

static struct oa_acc *acc_find(struct oa_choice *c, const char *key)
{
    for (size_t i = 0; i < c->naccs; i++)
        if (strcmp(c->accs[i].key, key) == 0)
            return &c->accs[i];
    return NULL;
}

/* The accumulator for key, created on first use; NULL past OA_MAX_KEYS. */
static struct oa_acc *acc_get(struct oa_choice *c, const char *key)
{
    return acc_in(&c->accs, &c->naccs, key);
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
        return dialect_index(i, idx);
    const char *id = str_of(item(tc, "id"));
    const struct oa_tool *last = c->ntools ? c->tools[c->last_tool] : NULL;
    bool fresh = id != NULL && *id != '\0' &&
                 (last == NULL || last->id == NULL || strcmp(last->id, id) != 0);
    *idx = fresh ? c->ntools : c->last_tool;
    return *idx < DIALECT_MAX_INDEX ? 0 : -1;
}

/* Members of a tool call (a delta's or an answer's) with a meaning of their own here. */
static bool tool_own_key(const char *key)
{
    return strcmp(key, "index") == 0 || strcmp(key, "id") == 0 || strcmp(key, "type") == 0 ||
           strcmp(key, "function") == 0;
}

/* Whether a tool call has members beyond those (a custom tool call's "custom"). */
static bool tool_has_more(const cJSON *tc)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, tc)
    {
        if (!tool_own_key(m->string))
            return true;
    }
    return false;
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
        if (fn != NULL && !cJSON_IsNull(fn))
            t->has_fn = true;
        /* Others as the SDKs merge them: strings concatenate ("custom": {"input": ...}). */
        const cJSON *m;
        cJSON_ArrayForEach(m, tc)
        {
            if (tool_own_key(m->string))
                continue;
            struct oa_acc *a = acc_in(&t->accs, &t->naccs, m->string);
            if (a == NULL)
                return -1;
            acc_add(a, m);
        }
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

/* Members of a choice (a chunk's or an answer's) with a meaning of their own here. */
static bool choice_own_key(const char *key)
{
    static const char *const keys[] = {"index", "delta",    "message",
                                       "text",  "logprobs", "finish_reason"};
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

/*
 * Other members of a choice (vLLM's stop_reason, SGLang's matched_stop,
 * Azure's content_filter_results): the last non-null value, as the openai
 * SDK's stream helper keeps them (null only until a value comes); arrays
 * concatenate (vLLM's token_ids: each chunk has those of its piece).
 */
static void choice_extras(struct oa_choice *c, const cJSON *ch)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, ch)
    {
        if (choice_own_key(x->string))
            continue;
        if (c->extra == NULL)
            c->extra = chk(cJSON_CreateObject());
        cJSON *have = cJSON_GetObjectItemCaseSensitive(c->extra, x->string);
        if (cJSON_IsArray(have) && cJSON_IsArray(x))
            append_items(have, x);
        else if (have == NULL ? cJSON_GetArraySize(c->extra) < OA_MAX_KEYS : !cJSON_IsNull(x))
            obj_set(c->extra, x->string, json_dup(x));
    }
}

static int oa_choice_chunk(struct oa_asm *st, const cJSON *ch)
{
    size_t idx = 0;
    const cJSON *index = cJSON_IsObject(ch) ? item(ch, "index") : NULL;
    if (!cJSON_IsObject(ch) || (index != NULL && dialect_index(index, &idx) < 0))
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
    choice_extras(c, ch);
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
/*
 * Top-level members of an answer that are OpenAI's own (kept in the answer's
 * key order by oa_build / oa_head), a stream's alone (object, obfuscation), or
 * "error" (a chunk with a non-null one is an error; an answer with one is none).
 * Others (Perplexity's citations, Azure's prompt_filter_results) are carried
 * over as they come.
 */
static bool oa_own_key(const char *key)
{
    static const char *const keys[] = {
        "id",          "object", "created",      "model",
        "choices",     "usage",  "service_tier", "system_fingerprint",
        "obfuscation", "error"};
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

static int oa_on_event(void *arg, int k, const struct sse_event *ev, const cJSON *chunk)
{
    static const char *const keys[] = {"id", "created", "model", "service_tier",
                                       "system_fingerprint"};
    struct oa_asm *st = arg;
    (void)ev;
    if (k != OA_CHUNK)
        return 0;
    const cJSON *choices = item(chunk, "choices");
    if (!cJSON_IsArray(choices))
        return -1;
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++)
        keep_last(st->top, keys[i], item(chunk, keys[i]));
    const cJSON *x;
    cJSON_ArrayForEach(x, chunk)
    {
        if (!oa_own_key(x->string) &&
            (item(st->top, x->string) != NULL || cJSON_GetArraySize(st->top) < OA_MAX_KEYS))
            keep_last(st->top, x->string, x);
    }
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

/*
 * {"id","type","function":{"name","arguments"}}: the non-stream tool-call
 * shape; a call whose deltas had no "function" but other members (a custom
 * tool's "custom": {"name","input"}) has those instead.
 */
static cJSON *oa_tool_json(struct oa_tool *t)
{
    cJSON *o = chk(cJSON_CreateObject());
    obj_set(o, "id", chk(cJSON_CreateString(t->id ? t->id : "")));
    obj_set(o, "type", chk(cJSON_CreateString(t->type ? t->type : "function")));
    if (t->has_fn || t->naccs == 0) {
        cJSON *fn = chk(cJSON_CreateObject());
        obj_set(fn, "name", chk(cJSON_CreateString(t->name ? t->name : "")));
        obj_set(fn, "arguments", chk(cJSON_CreateString(pc_buf_cstr(&t->args))));
        obj_set(o, "function", fn);
    }
    for (size_t i = 0; i < t->naccs; i++)
        obj_set(o, t->accs[i].key, acc_value(&t->accs[i]));
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
    const cJSON *x;
    cJSON_ArrayForEach(x, c->extra)
    {
        obj_set(o, x->string, json_dup(x));
    }
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
    const cJSON *x;
    cJSON_ArrayForEach(x, st->top)
    {
        if (!oa_own_key(x->string))
            obj_set(out, x->string, json_dup(x));
    }
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
    for (size_t i = 0; i < t->naccs; i++)
        acc_free(&t->accs[i]);
    free(t->accs);
    free(t);
}

static void oa_choice_free(struct oa_choice *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->naccs; i++)
        acc_free(&c->accs[i]);
    for (size_t i = 0; i < c->ntools; i++)
        oa_tool_free(c->tools[i]);
    oa_tool_free(c->fcall);
    free(c->accs);
    free(c->tools);
    free(c->role);
    cJSON_Delete(c->logprobs);
    cJSON_Delete(c->finish);
    cJSON_Delete(c->extra);
    free(c);
}

static cJSON *oa_assemble(enum api_endpoint e, const char *rec, size_t len)
{
    struct oa_asm st = {e, chk(cJSON_CreateObject()), NULL, 0};
    cJSON *out = NULL;
    if (sse_walk(oa_classify, rec, len, oa_on_event, &st) == 0)
        out = oa_build(&st);
    for (size_t i = 0; i < st.nchoices; i++)
        oa_choice_free(st.choices[i]);
    free(st.choices);
    cJSON_Delete(st.top);
    return out;
}

/* ---- synthesis: answer -> chunks ---------------------------------------------- */

struct synth {
    struct pc_buf *out;
    struct pc_buf head;  /* a chunk's members before "choices" */
    struct pc_buf extra; /* the first chunk's more: the answer's members not OpenAI's own */
    uint32_t seed;       /* piece sizes (dialect_piece_len) */
    bool usage_null;     /* include_usage: other chunks carry "usage":null, as live */
};

static size_t piece_len(struct synth *s, const char *str, size_t n)
{
    return dialect_piece_len(&s->seed, str, n);
}

/* One choice of one chunk; pass choice NULL for the usage-only chunk. */
static void oa_emit(struct synth *s, const struct pc_buf *choice, const cJSON *usage)
{
    pc_buf_append_str(s->out, "data: ");
    pc_buf_append(s->out, s->head.data, s->head.len);
    pc_buf_append(s->out, s->extra.data, s->extra.len);
    s->extra.len = 0;
    pc_buf_append_str(s->out, "\"choices\":[");
    if (choice != NULL)
        pc_buf_append(s->out, choice->data, choice->len);
    pc_buf_append_str(s->out, "]");
    if (choice == NULL || s->usage_null) {
        pc_buf_append_str(s->out, ",\"usage\":");
        dialect_buf_json(s->out, choice == NULL ? usage : NULL);
    }
    pc_buf_append_str(s->out, "}\n\n");
}

static void oa_head(struct synth *s, const cJSON *resp, const char *object)
{
    static const char *const keys[] = {"created", "model", "service_tier", "system_fingerprint"};
    pc_buf_append_char(&s->head, '{');
    if (item(resp, "id") != NULL) {
        pc_buf_append_str(&s->head, "\"id\":");
        dialect_buf_json(&s->head, item(resp, "id"));
        pc_buf_append_char(&s->head, ',');
    }
    pc_buf_printf(&s->head, "\"object\":\"%s\",", object);
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++) {
        if (item(resp, keys[i]) == NULL)
            continue;
        pc_buf_printf(&s->head, "\"%s\":", keys[i]);
        dialect_buf_json(&s->head, item(resp, keys[i]));
        pc_buf_append_char(&s->head, ',');
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, resp)
    {
        if (oa_own_key(x->string))
            continue;
        buf_json_cstr(&s->extra, x->string);
        pc_buf_append_char(&s->extra, ':');
        dialect_buf_json(&s->extra, x);
        pc_buf_append_char(&s->extra, ',');
    }
}

/*
 * One choice being streamed; logprobs ride on one chunk, null on the others.
 * The choice's other members (vLLM's stop_reason) ride on its first chunk
 * only: readers that keep a member's first value get them, as do those that
 * keep its last (no later chunk has it) and those that concatenate arrays
 * (vLLM's token_ids).
 */
struct oa_ctx {
    struct synth *s;
    size_t index;
    const cJSON *logprobs; /* NULL: the answer's choice has no "logprobs" member */
    bool lp_pending;
    const cJSON *choice; /* the answer's choice, for its other members */
    bool extras_pending; /* its first chunk is still to come */
};

static size_t synth_index(const cJSON *ch, size_t pos)
{
    size_t i;
    return dialect_index(item(ch, "index"), &i) == 0 ? i : pos;
}

/* Close a choice body: other members, logprobs (if the answer has them) and finish_reason. */
static void oa_choice_tail(struct oa_ctx *c, struct pc_buf *b, const cJSON *finish)
{
    const cJSON *x;
    if (c->extras_pending) {
        cJSON_ArrayForEach(x, c->choice)
        {
            if (choice_own_key(x->string))
                continue;
            pc_buf_append_char(b, ',');
            buf_json_cstr(b, x->string);
            pc_buf_append_char(b, ':');
            dialect_buf_json(b, x);
        }
        c->extras_pending = false;
    }
    if (c->logprobs != NULL) {
        pc_buf_append_str(b, ",\"logprobs\":");
        dialect_buf_json(b, c->lp_pending ? c->logprobs : NULL);
        c->lp_pending = false;
    }
    pc_buf_append_str(b, ",\"finish_reason\":");
    dialect_buf_json(b, finish);
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
            dialect_buf_json(&d, v);
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

/* Deltas {"tool_calls":[{"index":i,"MEMBER":{"FIELD":piece}}]} for each piece of str. */
static void chat_tool_pieces(struct oa_ctx *c, size_t i, const char *member, const char *field,
                             const char *str)
{
    struct pc_buf d = PC_BUF_INIT;
    for (size_t n = str ? strlen(str) : 0, pos = 0, k; pos < n; pos += k) {
        k = piece_len(c->s, str + pos, n - pos);
        d.len = 0;
        pc_buf_printf(&d, "{\"tool_calls\":[{\"index\":%zu,\"%s\":{\"%s\":", i, member, field);
        pc_buf_json_str(&d, str + pos, k);
        pc_buf_append_str(&d, "}}]}");
        chat_chunk(c, &d, NULL);
    }
    pc_buf_free(&d);
}

/*
 * Tool call i: id/type/name with empty arguments, then the arguments in
 * pieces. A call with other members (a custom tool's "custom") has them in
 * its first delta, a custom call's input emptied, then that input in pieces.
 */
static void chat_tool(struct oa_ctx *c, const cJSON *tc, size_t i)
{
    const cJSON *fn = item(tc, "function"), *custom = item(tc, "custom"), *m;
    const char *id = str_of(item(tc, "id")), *type = str_of(item(tc, "type"));
    const char *name = str_of(item(fn, "name")), *args = str_of(item(fn, "arguments"));
    const char *input = cJSON_IsObject(custom) ? str_of(item(custom, "input")) : NULL;
    bool has_fn = fn != NULL || !tool_has_more(tc);
    struct pc_buf d = PC_BUF_INIT;
    pc_buf_printf(&d, "{\"tool_calls\":[{\"index\":%zu,\"id\":", i);
    buf_json_cstr(&d, id ? id : "");
    pc_buf_append_str(&d, ",\"type\":");
    buf_json_cstr(&d, type ? type : "function");
    if (has_fn) {
        pc_buf_append_str(&d, ",\"function\":{\"name\":");
        buf_json_cstr(&d, name ? name : "");
        pc_buf_append_str(&d, ",\"arguments\":\"\"}");
    }
    cJSON_ArrayForEach(m, tc)
    {
        if (tool_own_key(m->string))
            continue;
        pc_buf_append_char(&d, ',');
        buf_json_cstr(&d, m->string);
        pc_buf_append_char(&d, ':');
        if (m == custom && input != NULL) {
            cJSON *start = json_dup(custom);
            obj_set(start, "input", chk(cJSON_CreateString("")));
            dialect_buf_json(&d, start);
            cJSON_Delete(start);
        } else {
            dialect_buf_json(&d, m);
        }
    }
    pc_buf_append_str(&d, "}]}");
    chat_chunk(c, &d, NULL);
    pc_buf_free(&d);
    if (has_fn)
        chat_tool_pieces(c, i, "function", "arguments", args);
    chat_tool_pieces(c, i, "custom", "input", input);
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
    struct oa_ctx c = {s, synth_index(ch, pos), item(ch, "logprobs"), false, ch, true};
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
    struct oa_ctx c = {s, synth_index(ch, pos), item(ch, "logprobs"), true, ch, true};
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
            dialect_buf_json(&t, text);
        cmpl_chunk(&c, text ? &t : NULL, NULL);
        off += k;
    } while (off < n);
    t.len = 0;
    pc_buf_append_str(&t, "\"\"");
    cmpl_chunk(&c, str ? &t : NULL, item(ch, "finish_reason"));
    pc_buf_free(&t);
    return 0;
}

static int oa_synth(enum api_endpoint e, const cJSON *resp, const char *raw, size_t raw_len,
                    bool include_usage, struct pc_buf *out)
{
    (void)raw; /* each chunk says a piece of the answer: written anew */
    (void)raw_len;
    const cJSON *choices = item(resp, "choices"), *usage = item(resp, "usage");
    if (!cJSON_IsArray(choices) || cJSON_GetArraySize(choices) == 0)
        return -1;
    bool with_usage = include_usage && usage != NULL && !cJSON_IsNull(usage);
    struct synth s = {out, PC_BUF_INIT, PC_BUF_INIT, DIALECT_PIECE_SEED, with_usage};
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
    pc_buf_free(&s.extra);
    return rc;
}

/* ---- usage and errors ----------------------------------------------------------- */

static void oa_usage(const cJSON *usage, struct api_usage *u)
{
    u->present = cJSON_IsNumber(api_member(usage, "prompt_tokens"));
    u->prompt = dialect_tokens(api_member(usage, "prompt_tokens"));
    u->completion =
        dialect_tokens(api_member(usage, "completion_tokens")); /* absent for embeddings */
    /* Within prompt_tokens (a count beyond it is cut to it, as pricing_tokens_of does). */
    u->cached = PC_MIN(
        dialect_tokens(api_member(api_member(usage, "prompt_tokens_details"), "cached_tokens")),
        u->prompt);
    /* Audio in and out, priced apart (within prompt_tokens and completion_tokens). */
    u->audio_prompt = PC_MIN(
        dialect_tokens(api_member(api_member(usage, "prompt_tokens_details"), "audio_tokens")),
        u->prompt);
    u->audio_completion = PC_MIN(
        dialect_tokens(api_member(api_member(usage, "completion_tokens_details"), "audio_tokens")),
        u->completion);
}

/* Error type and code by status; a row with status 0 is the fallback of its class. */
struct oa_error {
    int status;
    const char *type, *code;
};

static const struct oa_error oa_errors[] = {
    {400, "invalid_request_error", "invalid_request"},
    {401, "authentication_error", "unauthorized"},
    {403, "permission_error", "permission_denied"},
    {404, "not_found_error", "not_found"},
    {405, "invalid_request_error", "method_not_allowed"},
    {413, "invalid_request_error", "request_too_large"},
    {415, "invalid_request_error", "unsupported_media_type"},
    {429, "rate_limit_error", "rate_limit_exceeded"},
    {500, "server_error", "internal_error"},
    {502, "server_error", "bad_gateway"},
    {503, "server_error", "service_unavailable"},
    {504, "timeout", "upstream_timeout"},
    {529, "overloaded_error", "overloaded"},
};
static const struct oa_error oa_error_4xx = {0, "invalid_request_error", "invalid_request"};
static const struct oa_error oa_error_5xx = {0, "server_error", "internal_error"};

/* Shared with the Responses API, whose errors have this shape too. */
void dialect_openai_error_body(int status, const char *text, struct pc_buf *out)
{
    const struct oa_error *k = status >= 500 ? &oa_error_5xx : &oa_error_4xx;
    for (size_t i = 0; i < PC_ARRAY_LEN(oa_errors); i++)
        if (oa_errors[i].status == status)
            k = &oa_errors[i];
    pc_buf_append_str(out, "{\"error\":{\"message\":");
    pc_buf_json_str(out, text, strlen(text));
    pc_buf_printf(out, ",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}", k->type, k->code);
}

const struct dialect dialect_openai = {
    .name = "openai",
    .classify = oa_classify,
    .usage_chunk = oa_usage_chunk,
    .assemble = oa_assemble,
    .synthesize = oa_synth,
    .usage = oa_usage,
    .error_body = dialect_openai_error_body,
};
