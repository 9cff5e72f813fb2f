/*
 * jedit.c - span scanner and splices over JSON text (see pc_jedit.h). Owns
 * nothing but the splice list a caller builds. The scanner never recurses:
 * the end of a container is found by counting brackets outside strings,
 * which is exact for text a JSON parser accepted.
 */
#include "pc_jedit.h"

#include <string.h>

/*
 * White space as cJSON skips it (any byte up to 0x20 but NUL), so that text
 * the proxy's parser accepted is followed the same way; JSON's own four are
 * among them.
 */
static bool is_ws(char c)
{
    return c != '\0' && (unsigned char)c <= 0x20;
}

static size_t skip_ws(const char *t, size_t len, size_t p)
{
    while (p < len && is_ws(t[p]))
        p++;
    return p;
}

/*
 * A quote closes the string unless an odd number of backslashes precedes it;
 * memchr finds the candidates, so long strings (prompts) cost little.
 */
size_t jedit_string_end(const char *t, size_t len, size_t p)
{
    for (size_t q = p + 1; q < len;) {
        const char *quote = memchr(t + q, '"', len - q);
        if (quote == NULL)
            return 0;
        size_t at = (size_t)(quote - t), bs = 0;
        while (at - bs > p + 1 && t[at - bs - 1] == '\\')
            bs++;
        if (bs % 2 == 0)
            return at + 1;
        q = at + 1;
    }
    return 0;
}

/* t[p] is '{' or '[': the offset just past the matching bracket, or 0. */
static size_t container_end(const char *t, size_t len, size_t p)
{
    size_t depth = 0;
    while (p < len) {
        char c = t[p];
        if (c == '"') {
            p = jedit_string_end(t, len, p);
            if (p == 0)
                return 0;
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0)
                return 0;
            if (--depth == 0)
                return p + 1;
        }
        p++;
    }
    return 0;
}

/* A number or literal: the run of bytes that can belong to one. */
static size_t scalar_end(const char *t, size_t len, size_t p)
{
    size_t s = p;
    for (; p < len; p++) {
        char c = t[p]; /* [0-9a-z+.E-]: every byte of a number or literal */
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '+' || c == '-' ||
              c == '.' || c == 'E'))
            break;
    }
    return p > s ? p : 0;
}

bool jedit_value(const char *text, size_t len, size_t pos, struct jspan *v)
{
    size_t p = skip_ws(text, len, pos), end;
    if (p >= len)
        return false;
    if (text[p] == '"')
        end = jedit_string_end(text, len, p);
    else if (text[p] == '{' || text[p] == '[')
        end = container_end(text, len, p);
    else
        end = scalar_end(text, len, p);
    if (end == 0)
        return false;
    v->start = p;
    v->end = end;
    return true;
}

bool jedit_is_object(const char *text, const struct jspan *v)
{
    return v->end > v->start && text[v->start] == '{';
}

bool jedit_is_array(const char *text, const struct jspan *v)
{
    return v->end > v->start && text[v->start] == '[';
}

bool jedit_is_string(const char *text, const struct jspan *v)
{
    return v->end > v->start && text[v->start] == '"';
}

static bool is_literal(const char *text, const struct jspan *v, const char *lit)
{
    size_t n = strlen(lit);
    return v->end - v->start == n && memcmp(text + v->start, lit, n) == 0;
}

bool jedit_is_null(const char *text, const struct jspan *v)
{
    return is_literal(text, v, "null");
}

bool jedit_is_true(const char *text, const struct jspan *v)
{
    return is_literal(text, v, "true");
}

/* ---- strings ---------------------------------------------------------------- */

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static void put_utf8(struct pc_buf *out, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    pc_buf_append(out, b, n);
}

/* One escape at p (just after the backslash) into out; returns bytes consumed, 0 if bad. */
static size_t unescape(const char *p, const char *end, struct pc_buf *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *k = p < end ? strchr(from, *p) : NULL;
    if (k != NULL && *p != '\0') {
        pc_buf_append_char(out, to[k - from]);
        return 1;
    }
    if (p >= end || *p != 'u' || end - p < 5)
        return 0;
    int cp = hex4(p + 1);
    if (cp < 0)
        return 0;
    if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 11 && p[5] == '\\' && p[6] == 'u') {
        int lo = hex4(p + 7);
        if (lo >= 0xdc00 && lo < 0xe000) {
            put_utf8(out, 0x10000u + (((unsigned)cp - 0xd800u) << 10) + ((unsigned)lo - 0xdc00u));
            return 11;
        }
    }
    put_utf8(out, (unsigned)cp);
    return 5;
}

bool jedit_string(const char *text, const struct jspan *v, struct pc_buf *out)
{
    if (!jedit_is_string(text, v) || v->end - v->start < 2)
        return false;
    const char *p = text + v->start + 1, *end = text + v->end - 1;
    while (p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        if (bs == NULL) {
            pc_buf_append(out, p, (size_t)(end - p));
            break;
        }
        pc_buf_append(out, p, (size_t)(bs - p));
        size_t used = unescape(bs + 1, end, out);
        if (used == 0)
            return false;
        p = bs + 1 + used;
    }
    return true;
}

/* Whether the string at span name decodes to key. */
static bool name_is(const char *text, const struct jspan *name, const char *key)
{
    size_t raw = name->end - name->start - 2, klen = strlen(key);
    if (memchr(text + name->start + 1, '\\', raw) == NULL)
        return raw == klen && memcmp(text + name->start + 1, key, klen) == 0;
    struct pc_buf b = PC_BUF_INIT;
    bool eq = jedit_string(text, name, &b) && b.len == klen && memcmp(b.data, key, klen) == 0;
    pc_buf_free(&b);
    return eq;
}

/* ---- containers ------------------------------------------------------------- */

bool jedit_next(const char *text, const struct jspan *c, size_t *cursor, struct jspan *name,
                struct jspan *elem)
{
    bool object = jedit_is_object(text, c);
    if (!object && !jedit_is_array(text, c))
        return false;
    size_t len = c->end - 1; /* the closing bracket */
    size_t p = skip_ws(text, len, *cursor == 0 ? c->start + 1 : *cursor);
    if (p >= len)
        return false;
    if (object) {
        struct jspan nm;
        if (!jedit_value(text, len, p, &nm) || !jedit_is_string(text, &nm))
            return false;
        p = skip_ws(text, len, nm.end);
        if (p >= len || text[p] != ':')
            return false;
        p++;
        if (name != NULL)
            *name = nm;
    }
    if (!jedit_value(text, len, p, elem))
        return false;
    p = skip_ws(text, len, elem->end);
    if (p < len && text[p] != ',')
        return false; /* two values without a comma between them: not JSON */
    *cursor = p < len ? p + 1 : p;
    return true;
}

/* Count the members or elements of c; false if they cannot all be followed. */
static bool count_all(const char *text, const struct jspan *c, size_t *n)
{
    size_t cursor = 0;
    struct jspan nm, el;
    *n = 0;
    while (jedit_next(text, c, &cursor, &nm, &el))
        (*n)++;
    size_t close = c->end - 1;
    return skip_ws(text, close, cursor == 0 ? c->start + 1 : cursor) == close;
}

size_t jedit_count(const char *text, const struct jspan *c)
{
    size_t n;
    count_all(text, c, &n);
    return n;
}

bool jedit_member(const char *text, const struct jspan *obj, const char *key, struct jspan *name,
                  struct jspan *val)
{
    if (!jedit_is_object(text, obj))
        return false;
    size_t cursor = 0;
    struct jspan nm, el;
    bool found = false;
    while (jedit_next(text, obj, &cursor, &nm, &el)) {
        if (!name_is(text, &nm, key))
            continue;
        found = true;
        if (name != NULL)
            *name = nm;
        if (val != NULL)
            *val = el;
    }
    return found;
}

/* ---- splices ---------------------------------------------------------------- */

static void add_op(struct jedit *e, size_t at, size_t del, const char *s, size_t n)
{
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 8;
        e->v = pc_realloc(e->v, e->cap * sizeof(*e->v));
    }
    e->v[e->n++] = (struct jedit_op){at, del, n ? pc_strndup(s, n) : NULL, n};
}

void jedit_insert(struct jedit *e, size_t at, const char *s, size_t n)
{
    add_op(e, at, 0, s, n);
}

void jedit_replace(struct jedit *e, const struct jspan *span, const char *s, size_t n)
{
    add_op(e, span->start, span->end - span->start, s, n);
}

void jedit_add_member_counted(struct jedit *e, const struct jspan *obj, size_t members,
                              const char *key, const char *value_json)
{
    struct pc_buf b = PC_BUF_INIT;
    /* Members added before, in this same list, also need the comma. */
    bool added = false;
    for (size_t i = 0; i < e->n && !added; i++)
        added = e->v[i].at == obj->end - 1 && e->v[i].del == 0 && e->v[i].ins_len > 0;
    if (members > 0 || added)
        pc_buf_append_char(&b, ',');
    pc_buf_json_str(&b, key, strlen(key));
    pc_buf_append_char(&b, ':');
    pc_buf_append_str(&b, value_json);
    jedit_insert(e, obj->end - 1, b.data, b.len);
    pc_buf_free(&b);
}

void jedit_add_member(struct jedit *e, const char *text, const struct jspan *obj, const char *key,
                      const char *value_json)
{
    size_t n;
    if (!jedit_is_object(text, obj) || !count_all(text, obj, &n))
        return; /* not text we can follow: better no hint than a broken body */
    jedit_add_member_counted(e, obj, n, key, value_json);
}

bool jedit_members(const char *text, const struct jspan *obj, struct jspan *names,
                   struct jspan *vals, size_t max, size_t *n)
{
    size_t cursor = 0;
    struct jspan nm, el;
    *n = 0;
    if (!jedit_is_object(text, obj))
        return false;
    while (jedit_next(text, obj, &cursor, &nm, &el)) {
        if (*n == max)
            return false;
        names[*n] = nm;
        vals[*n] = el;
        (*n)++;
    }
    size_t close = obj->end - 1;
    return skip_ws(text, close, cursor == 0 ? obj->start + 1 : cursor) == close;
}

bool jedit_name_is(const char *text, const struct jspan *name, const char *key)
{
    return jedit_is_string(text, name) && name->end - name->start >= 2 && name_is(text, name, key);
}

void jedit_remove_member(struct jedit *e, const char *text, const struct jspan *obj,
                         const struct jspan *name, const struct jspan *val)
{
    size_t close = obj->end - 1;
    size_t after = skip_ws(text, close, val->end);
    if (after < close && text[after] == ',') {
        struct jspan cut = {name->start, skip_ws(text, close, after + 1)};
        jedit_replace(e, &cut, NULL, 0);
        return;
    }
    /* The last member: take the comma before it, if there is one. */
    size_t p = name->start;
    while (p > obj->start + 1 && is_ws(text[p - 1]))
        p--;
    struct jspan cut = {p > obj->start + 1 && text[p - 1] == ',' ? p - 1 : name->start, val->end};
    jedit_replace(e, &cut, NULL, 0);
}

static int op_cmp(const void *a, const void *b)
{
    const struct jedit_op *x = *(const struct jedit_op *const *)a;
    const struct jedit_op *y = *(const struct jedit_op *const *)b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x < y ? -1 : x > y; /* equal positions: in the order added */
}

void jedit_apply(const struct jedit *e, const char *text, size_t len, struct pc_buf *out)
{
    const struct jedit_op **ord = pc_malloc((e->n ? e->n : 1) * sizeof(*ord));
    for (size_t i = 0; i < e->n; i++)
        ord[i] = &e->v[i];
    qsort(ord, e->n, sizeof(*ord), op_cmp);
    size_t p = 0;
    for (size_t i = 0; i < e->n; i++) {
        const struct jedit_op *op = ord[i];
        /* Overlapping splices (a caller's mistake) never remove a byte twice. */
        size_t at = PC_MIN(PC_MAX(op->at, p), len);
        size_t end = PC_MIN(PC_MAX(op->at + op->del, at), len);
        pc_buf_append(out, text + p, at - p);
        if (op->ins_len > 0)
            pc_buf_append(out, op->ins, op->ins_len);
        p = end;
    }
    pc_buf_append(out, text + p, len - p);
    free(ord);
}

void jedit_free(struct jedit *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i].ins);
    free(e->v);
    memset(e, 0, sizeof(*e));
}
