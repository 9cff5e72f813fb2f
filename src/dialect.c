/*
 * dialect.c - the API dialects (see pc_dialect.h): the one table that maps
 * an endpoint to its dialect, the operations callers reach through it, and
 * what the dialects share (dialect_int.h). Owns nothing; the per-dialect
 * wire formats are in src/dialect/.
 *
 *   endpoint --dialect_of--> ops table --classify--> sse_walk (pc_sse.h)
 *                                      --assemble / synthesize / usage /
 *                                        error_body
 *
 * Adding a dialect: its file under src/dialect/ (a `const struct dialect`),
 * its extern in dialect_int.h and its endpoints' rows in dialect_by_endpoint.
 */
#include "pc_dialect.h"
#include "dialect/dialect_int.h"

#include <math.h>

#include "pc_log.h"

#define DIALECT_PIECE_MIN  16 /* synthesized text pieces, bytes */
#define DIALECT_PIECE_MAX  64
#define DIALECT_TOKENS_MAX 1000000000000000.0 /* far beyond any real count, exact as a double */
#define KEYS_SMALL         12                 /* objects up to this size are checked pairwise */

/* Every endpoint's dialect; API_NONE (errors of other paths) and embeddings are OpenAI's. */
static const struct dialect *const dialect_by_endpoint[API__COUNT] = {
    [API_NONE] = &dialect_openai,        [API_CHAT] = &dialect_openai,
    [API_COMPLETIONS] = &dialect_openai, [API_EMBEDDINGS] = &dialect_openai,
    [API_MESSAGES] = &dialect_anthropic, [API_RESPONSES] = &dialect_responses,
};

const struct dialect *dialect_of(enum api_endpoint e)
{
    if ((int)e < 0 || e >= API__COUNT || dialect_by_endpoint[e] == NULL)
        return &dialect_openai;
    return dialect_by_endpoint[e];
}

const struct dialect *dialect_of_path(const char *path, bool anthropic_version)
{
    enum api_endpoint e = api_endpoint_from_path(path);
    if (e != API_NONE)
        return dialect_of(e);
    return anthropic_version || api_anthropic_path(path) ? &dialect_anthropic : &dialect_openai;
}

/* ---- what callers use ------------------------------------------------------ */

cJSON *dialect_assemble(enum api_endpoint e, const char *rec, size_t len, struct api_usage *usage)
{
    cJSON *out = api_streams(e) ? dialect_of(e)->assemble(e, rec, len) : NULL;
    if (usage != NULL)
        dialect_usage(e, out, usage); /* one reading of usage for both paths */
    return out;
}

bool dialect_complete(enum api_endpoint e, const char *rec, size_t len)
{
    return api_streams(e) && sse_walk(dialect_of(e)->classify, rec, len, NULL, NULL) == 0;
}

int dialect_synthesize(enum api_endpoint e, const cJSON *resp, bool include_usage,
                       struct pc_buf *out)
{
    size_t mark = out->len;
    if (!api_streams(e) || !cJSON_IsObject(resp))
        return -1;
    int rc = dialect_of(e)->synthesize(e, resp, NULL, 0, include_usage, out);
    if (rc < 0)
        out->len = mark;
    return rc;
}

struct replay {
    const struct dialect *d;
    bool include_usage;
    struct pc_buf *out;
    bool usage_seen; /* an event carried a "usage" object */
};

static int replay_event(void *arg, int kind, const struct sse_event *ev, const cJSON *json)
{
    struct replay *r = arg;
    if (cJSON_IsObject(item(json, "usage")))
        r->usage_seen = true;
    if (!r->include_usage && r->d->usage_chunk != NULL && r->d->usage_chunk(kind, json))
        return 0;
    sse_write_event(r->out, ev);
    return 0;
}

/* dialect_replay; *usage_seen (may be NULL): whether any event of it carried usage. */
static int replay_usage(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
                        struct pc_buf *out, bool *usage_seen)
{
    struct replay r = {dialect_of(e), include_usage, out, false};
    size_t mark = out->len;
    if (!api_streams(e) || sse_walk(r.d->classify, rec, len, replay_event, &r) < 0) {
        out->len = mark;
        return -1;
    }
    if (usage_seen != NULL)
        *usage_seen = r.usage_seen;
    return 0;
}

int dialect_replay(enum api_endpoint e, const char *rec, size_t len, bool include_usage,
                   struct pc_buf *out)
{
    return replay_usage(e, rec, len, include_usage, out, NULL);
}

/*
 * A recorded stream for a client: without the usage chunk unless it asked
 * for usage, and then (dialects whose streams carry usage on request) also
 * without the "usage": null members that asking for usage put in the other
 * chunks. A recording without usage (its client did not ask, and the
 * upstream was not asked: stream-usage no) is no answer for a client that
 * asks (DIALECT_USAGE_REQUIRED): the upstream would have sent it usage.
 */
static int answer_replay(enum api_endpoint e, const char *rec, size_t len, enum dialect_usage usage,
                         struct pc_buf *out)
{
    bool include_usage = usage != DIALECT_USAGE_OFF;
    if (!dialect_usage_on_request(dialect_of(e)))
        return dialect_replay(e, rec, len, include_usage, out);
    if (include_usage) {
        bool usage_seen = false;
        size_t mark = out->len;
        int rc = replay_usage(e, rec, len, true, out, &usage_seen);
        if (rc == 0 && !usage_seen && usage == DIALECT_USAGE_REQUIRED) {
            out->len = mark;
            return DIALECT_OTHER_MODE_ONLY;
        }
        return rc;
    }
    struct pc_buf all = PC_BUF_INIT;
    int rc = dialect_replay(e, rec, len, false, &all);
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

/*
 * Whether cJSON would read text s[0..n) otherwise than its clients: a NUL
 * (a raw byte, or the escape, which cJSON decodes and then ends the string
 * at), or what RFC 8259 refuses and cJSON lets through ("\u00zz": U+0000).
 * Never stored so; an entry read back from Redis may still hold it.
 */
static bool cut_by_cjson(const char *s, size_t n)
{
    char why[128];
    return memchr(s, '\0', n) != NULL || memmem(s, n, "\\u0000", 6) != NULL ||
           !pc_json_strict(s, n, why, sizeof(why));
}

/*
 * A recorded stream as the JSON answer it assembles to. A JSON answer always
 * carries its usage, where streams of dialects that send usage on request
 * (OpenAI chat and completions) carry it only when asked: a recording
 * without it (the proxy did not ask, stream-usage no, or the upstream sends
 * none in streams) would make an answer without the usage the upstream's
 * own JSON answer has. It serves stream clients only. Where a stream carries
 * the answer whole (answer_text), the JSON answer is its text as written.
 */
static int answer_assemble(enum api_endpoint e, const char *rec, size_t len, struct pc_buf *out)
{
    if (memmem(rec, len, "\\u0000", 6) != NULL)
        return DIALECT_OTHER_MODE_ONLY; /* its text would end there (events are checked else) */
    const struct dialect *d = dialect_of(e);
    if (d->answer_text != NULL) {
        size_t mark = out->len;
        int rc = api_streams(e) ? d->answer_text(e, rec, len, out) : -1;
        if (rc < 0)
            out->len = mark;
        return rc;
    }
    cJSON *resp = dialect_assemble(e, rec, len, NULL);
    if (resp == NULL)
        return -1;
    if (dialect_usage_on_request(d) && !cJSON_IsObject(item(resp, "usage"))) {
        cJSON_Delete(resp);
        return DIALECT_OTHER_MODE_ONLY;
    }
    char *s = cJSON_PrintUnformatted(resp);
    cJSON_Delete(resp);
    if (s == NULL)
        return -1;
    pc_buf_append_str(out, s);
    cJSON_free(s);
    return 0;
}

int dialect_answer(enum api_endpoint e, bool recorded, const char *body, size_t len, bool stream,
                   enum dialect_usage usage, struct pc_buf *out)
{
    bool include_usage = usage != DIALECT_USAGE_OFF;
    if (stream && recorded)
        return answer_replay(e, body, len, usage, out);
    if (stream) {
        if (dialect_of(e)->numbers_as_written && !dialect_numbers_kept(body, len))
            return DIALECT_OTHER_MODE_ONLY; /* its stream would change numbers of the answer */
        if (cut_by_cjson(body, len))
            return DIALECT_OTHER_MODE_ONLY; /* its stream would say less than its bytes */
        cJSON *resp = cJSON_ParseWithLength(body, len);
        if (resp != NULL && !dialect_json_sane(resp)) {
            /* A member named twice (clients read the last, cJSON the first) or 1e999: its
             * stream would say what JSON clients of these bytes do not see. */
            cJSON_Delete(resp);
            return DIALECT_OTHER_MODE_ONLY;
        }
        int rc = -1;
        if (resp != NULL && api_streams(e) && cJSON_IsObject(resp)) {
            size_t mark = out->len;
            rc = dialect_of(e)->synthesize(e, resp, body, len, include_usage, out);
            if (rc < 0)
                out->len = mark;
        }
        cJSON_Delete(resp);
        return rc;
    }
    if (recorded)
        return answer_assemble(e, body, len, out);
    pc_buf_append(out, body, len);
    return 0;
}

void dialect_usage(enum api_endpoint e, const cJSON *resp, struct api_usage *u)
{
    memset(u, 0, sizeof(*u));
    const cJSON *usage = api_member(resp, "usage");
    if (cJSON_IsObject(usage))
        dialect_of(e)->usage(usage, u);
}

/* The text of an error the proxy reports without one of its own, by status. */
static const char *error_text(int status)
{
    static const struct {
        int status;
        const char *text;
    } texts[] = {
        {400, "bad request"},
        {401, "unauthorized"},
        {403, "forbidden"},
        {404, "not found"},
        {405, "method not allowed"},
        {413, "request body too large"},
        {415, "unsupported media type"},
        {429, "rate limit exceeded"},
        {500, "internal error"},
        {502, "upstream error"},
        {503, "service unavailable"},
        {504, "upstream timed out"},
        {529, "overloaded"},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(texts); i++)
        if (texts[i].status == status)
            return texts[i].text;
    return status >= 500 ? "internal error" : "bad request";
}

void dialect_error_body(const struct dialect *d, int status, const char *message,
                        struct pc_buf *out)
{
    d->error_body(status, message != NULL ? message : error_text(status), out);
}

/* ---- shared by the dialects (dialect_int.h) --------------------------------- */

void dialect_oom(void)
{
    log_error("dialect: out of memory in cJSON");
    abort();
}

cJSON *dialect_parse_json(const char *s, size_t n)
{
    char why[128];
    if (memchr(s, '\0', n) != NULL)
        return NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n + 1, NULL, true);
    /* What cJSON lets through but clients refuse ("\u00zz", which cJSON reads as U+0000). */
    if (j != NULL && !pc_json_strict(s, n, why, sizeof(why))) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

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

bool dialect_json_sane(const cJSON *j)
{
    if (cJSON_IsNumber(j))
        return isfinite(j->valuedouble);
    if (cJSON_IsObject(j) && !keys_unique(j))
        return false;
    for (const cJSON *c = j->child; c != NULL; c = c->next)
        if (!dialect_json_sane(c))
            return false;
    return true;
}

cJSON *dialect_parse_object(const char *s, size_t n)
{
    cJSON *j = dialect_parse_json(s, n);
    if (j != NULL && (!cJSON_IsObject(j) || !dialect_json_sane(j))) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

/* Whether a number's text is written as an integer (no fraction, no exponent). */
static bool integer_spelling(const char *t, size_t n)
{
    return memchr(t, '.', n) == NULL && memchr(t, 'e', n) == NULL && memchr(t, 'E', n) == NULL;
}

/* Whether the number written t[0..n) prints back (as cJSON prints it) as the same kind of number.
 */
static bool number_kept(const char *t, size_t n)
{
    char lit[64];
    if (n >= sizeof(lit))
        return false; /* longer than any double cJSON prints */
    memcpy(lit, t, n);
    lit[n] = '\0';
    cJSON *num = cJSON_CreateNumber(strtod(lit, NULL));
    char *printed = num != NULL ? cJSON_PrintUnformatted(num) : NULL;
    cJSON_Delete(num);
    if (printed == NULL)
        dialect_oom();
    size_t plen = strlen(printed);
    bool kept = integer_spelling(t, n)
                    ? plen == n && memcmp(printed, t, n) == 0
                    : !integer_spelling(printed, plen) && strcmp(printed, "null") != 0;
    cJSON_free(printed);
    return kept;
}

bool dialect_numbers_kept(const char *s, size_t n)
{
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = i;
            while (end < n && strchr("0123456789+-.eE", s[end]) != NULL && s[end] != '\0')
                end++;
            if (!number_kept(s + i, end - i))
                return false;
            i = end - 1;
        }
    }
    return true;
}

int dialect_index(const cJSON *v, size_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < DIALECT_MAX_INDEX))
        return -1;
    size_t i = (size_t)v->valuedouble;
    if ((double)i != v->valuedouble)
        return -1;
    *out = i;
    return 0;
}

int64_t dialect_tokens(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
        return 0;
    return (int64_t)fmin(v->valuedouble, DIALECT_TOKENS_MAX);
}

void dialect_json_copy(struct pc_buf *b, const char *s, size_t n)
{
    bool in_str = false;
    size_t run = 0; /* start of the bytes not copied yet */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if ((unsigned char)c <= 0x20) {
            pc_buf_append(b, s + run, i - run);
            run = i + 1;
        }
    }
    pc_buf_append(b, s + run, n - run);
}

void dialect_buf_json(struct pc_buf *b, const cJSON *v)
{
    if (v == NULL) {
        pc_buf_append_str(b, "null");
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    if (s == NULL)
        dialect_oom();
    pc_buf_append_str(b, s);
    cJSON_free(s);
}

size_t dialect_piece_len(uint32_t *seed, const char *str, size_t n)
{
    *seed = *seed * 1103515245u + 12345u;
    size_t k = DIALECT_PIECE_MIN + (*seed >> 16) % (DIALECT_PIECE_MAX - DIALECT_PIECE_MIN + 1);
    while (k < n && ((unsigned char)str[k] & 0xC0) == 0x80)
        k++;
    return PC_MIN(k, n);
}
