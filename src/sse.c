/*
 * sse.c - server-sent events, the framing every dialect shares (see
 * pc_sse.h). Owns nothing but the parser's three buffers and the usage
 * filter's pending bytes. Everything that reads a recording goes through one
 * walk; what the events mean is the dialect's (src/dialect/):
 *
 *   recorded bytes --sse_parser--> sse_event --classify (dialect)--> kind + JSON
 *                                                                     |
 *                     stop at SSE_DONE, fail on SSE_BAD / SSE_ERROR   v
 *                                                      the dialect's handler
 *                                                      (assemble, replay, ...)
 *
 * The usage filter works on the bytes of a live OpenAI-style stream, event
 * by event, without parsing more than the members of each chunk.
 */
#include "pc_sse.h"
#include "pc_jedit.h"

#include <string.h>

#define SSE_MAX_EVENT_DEFAULT ((size_t)16 << 20)

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

bool sse_field_is(const char *f, size_t flen, const char *name)
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
    if (sse_field_is(l, flen, "event")) {
        p->event.len = 0;
        pc_buf_append(&p->event, v, vlen);
    } else if (sse_field_is(l, flen, "data")) {
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

/*
 * The stream's first bytes: a UTF-8 byte order mark there is dropped, as
 * the SSE standard says (browsers and the SDKs do; it would otherwise be
 * read into the first field's name and that event lost). The mark may come
 * split across feeds; bytes that turn out not to be one are kept as text.
 * Returns how many bytes of buf were taken.
 */
static size_t parser_bom(struct sse_parser *p, const char *buf, size_t len)
{
    static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
    size_t i = 0;
    while (p->bom < sizeof(bom) && i < len && buf[i] == bom[p->bom]) {
        p->bom++;
        i++;
    }
    if (p->bom == sizeof(bom)) {
        p->bom = SSE_BOM_PAST;
    } else if (i < len) { /* not a mark: what matched of it was text */
        pc_buf_append(&p->line, bom, p->bom);
        p->bom = SSE_BOM_PAST;
    }
    return i;
}

int sse_parser_feed(struct sse_parser *p, const char *buf, size_t len, sse_event_fn *cb, void *arg)
{
    size_t i = p->bom == SSE_BOM_PAST ? 0 : parser_bom(p, buf, len);
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

/* ---- recordings: walk up to the terminator ---------------------------------- */

struct walk {
    sse_classify_fn *classify;
    sse_walk_fn *fn; /* may be NULL */
    void *arg;
    bool done;
};

static int walk_event(void *arg, const struct sse_event *ev)
{
    struct walk *w = arg;
    if (w->done)
        return 0; /* the stream ended at the terminator; clients ignore the rest */
    cJSON *json = NULL;
    int k = w->classify(ev, &json);
    int rc = -1;
    if (k != SSE_BAD && k != SSE_ERROR)
        rc = w->fn ? w->fn(w->arg, k, ev, json) : 0;
    w->done = k == SSE_DONE;
    cJSON_Delete(json);
    return rc;
}

int sse_walk(sse_classify_fn *classify, const char *rec, size_t len, sse_walk_fn *fn, void *arg)
{
    struct sse_parser p;
    struct walk w = {classify, fn, arg, false};
    sse_parser_init(&p);
    int rc = sse_parser_feed(&p, rec, len, walk_event, &w);
    sse_parser_free(&p);
    return rc == 0 && w.done ? 0 : -1;
}

void sse_write_event(struct pc_buf *out, const struct sse_event *ev)
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

/*
 * Passing an event over the cap: how many bytes of in belong to it (its
 * blank line included); f->passing is cleared when its end is among them.
 * A CR ending the event may be followed by the LF of a CRLF: that LF is
 * then a blank "event" of its own, which passes as it is.
 */
static size_t filter_pass(struct sse_usage_filter *f, const char *in, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '\n' && f->last_cr) {
            f->last_cr = false; /* the LF of a CRLF: that line end was counted at its CR */
            continue;
        }
        if (c != '\r' && c != '\n') {
            f->line_start = false;
            f->last_cr = false;
            continue;
        }
        f->last_cr = c == '\r';
        if (f->line_start) {
            f->passing = false;
            return i + 1;
        }
        f->line_start = true;
    }
    return len;
}

/* The pending event grew over the cap: out it goes as it is, and the rest of it after. */
static void filter_overflow(struct sse_usage_filter *f, struct pc_buf *out)
{
    const char *p = f->pending.data;
    size_t n = f->pending.len;
    f->passing = true;
    f->line_start = n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n');
    f->last_cr = n > 0 && p[n - 1] == '\r';
    pc_buf_append(out, p, n);
    pc_buf_reset(&f->pending);
}

/* Complete events are filtered straight from in; only an unfinished one waits in pending. */
void sse_usage_filter_feed(struct sse_usage_filter *f, const char *in, size_t len,
                           struct pc_buf *out)
{
    if (f->passing) {
        size_t n = filter_pass(f, in, len);
        pc_buf_append(out, in, n);
        in += n;
        len -= n;
        if (f->passing || len == 0)
            return;
    }
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
    if (f->pending.len > SSE_FILTER_MAX_PENDING)
        filter_overflow(f, out);
}

void sse_usage_filter_end(struct sse_usage_filter *f, struct pc_buf *out)
{
    pc_buf_append(out, f->pending.data, f->pending.len);
    pc_buf_reset(&f->pending);
}

/* ---- usage of a live stream ----------------------------------------------------- */

void sse_usage_scan_init(struct sse_usage_scan *s)
{
    memset(s, 0, sizeof(*s));
    sse_parser_init(&s->p);
    s->p.max_event = SSE_FILTER_MAX_PENDING; /* usage events are small; a stream may not be */
}

void sse_usage_scan_free(struct sse_usage_scan *s)
{
    sse_parser_free(&s->p);
    cJSON_Delete(s->usage);
    s->usage = NULL;
}

/* The last member named key of obj, or NULL (as the upstreams' readers take duplicates). */
static const cJSON *last_member(const cJSON *obj, const char *key)
{
    const cJSON *found = NULL, *k;
    if (!cJSON_IsObject(obj))
        return NULL;
    cJSON_ArrayForEach(k, obj)
    {
        if (k->string != NULL && strcmp(k->string, key) == 0)
            found = k;
    }
    return found;
}

static void usage_merge(struct sse_usage_scan *s, const cJSON *usage)
{
    const cJSON *k;
    if (!cJSON_IsObject(usage))
        return;
    if (s->usage == NULL && (s->usage = cJSON_CreateObject()) == NULL)
        return;
    cJSON_ArrayForEach(k, usage)
    {
        if (k->string == NULL || cJSON_IsNull(k))
            continue;
        cJSON *copy = cJSON_Duplicate(k, true);
        if (copy == NULL)
            continue;
        if (cJSON_GetObjectItemCaseSensitive(s->usage, k->string) != NULL)
            cJSON_ReplaceItemInObjectCaseSensitive(s->usage, k->string, copy);
        else
            cJSON_AddItemToObject(s->usage, k->string, copy);
    }
}

static int scan_event(void *arg, const struct sse_event *ev)
{
    struct sse_usage_scan *s = arg;
    if (memmem(ev->data, ev->data_len, "\"usage\"", 7) == NULL)
        return 0; /* the cheap test: most events are pieces of text */
    cJSON *j = cJSON_ParseWithLength(ev->data, ev->data_len);
    if (cJSON_IsObject(j)) {
        usage_merge(s, last_member(j, "usage"));
        usage_merge(s, last_member(last_member(j, "message"), "usage"));
        usage_merge(s, last_member(last_member(j, "response"), "usage"));
    }
    cJSON_Delete(j);
    return 0;
}

void sse_usage_scan_feed(struct sse_usage_scan *s, const char *buf, size_t len)
{
    if (!s->failed && sse_parser_feed(&s->p, buf, len, scan_event, s) < 0) {
        s->failed = true; /* an event over the bound: the framing is lost from here */
        sse_parser_free(&s->p);
    }
}

const cJSON *sse_usage_scan_result(const struct sse_usage_scan *s)
{
    return s->failed ? NULL : s->usage;
}

/* ---- the end of a live stream ----------------------------------------------------- */

void sse_end_scan_init(struct sse_end_scan *s, sse_classify_fn *classify)
{
    memset(s, 0, sizeof(*s));
    sse_parser_init(&s->p);
    s->classify = classify;
}

void sse_end_scan_free(struct sse_end_scan *s)
{
    sse_parser_free(&s->p);
}

static int end_event(void *arg, const struct sse_event *ev)
{
    struct sse_end_scan *s = arg;
    cJSON *json = NULL;
    int k = s->classify(ev, &json);
    cJSON_Delete(json);
    if (k == SSE_DONE || k == SSE_ERROR)
        s->ended = true;
    return s->ended ? -1 : 0; /* stop: nothing after the end is read */
}

void sse_end_scan_feed(struct sse_end_scan *s, const char *buf, size_t len)
{
    if (s->ended || s->failed)
        return;
    if (sse_parser_feed(&s->p, buf, len, end_event, s) < 0 && !s->ended)
        s->failed = true; /* an event over the bound */
    if (s->ended || s->failed)
        sse_parser_free(&s->p);
}
