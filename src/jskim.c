/*
 * jskim.c - a validating JSON parser that builds only the top of the tree
 * (see pc_jskim.h). It recurses like cJSON and stops at cJSON's nesting
 * limit, so its stack is bounded the same way. Each rule below names the
 * cJSON behaviour it follows; tests/unit/test_jskim.c and
 * tests/fuzz/fuzz_jskim.c compare the two parsers on the same texts.
 */
#include "pc_jskim.h"

#include <locale.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_jedit.h"

struct skim {
    const unsigned char *s;
    size_t len;
    size_t pos;
    unsigned open; /* arrays and objects open around pos */
    unsigned cut;  /* jskim_parse's depth: where building stops */
};

/* cJSON's white space is every byte up to 0x20. True if a byte is left after it. */
static bool skip_ws(struct skim *k)
{
    while (k->pos < k->len && k->s[k->pos] <= 0x20)
        k->pos++;
    return k->pos < k->len;
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* Four hex digits; 0 if one is not (cJSON reads "\uZZZZ" as U+0000). */
static unsigned hex4(const unsigned char *p)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (is_digit((unsigned char)c))
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        v = v << 4 | d;
    }
    return v;
}

static size_t put_utf8(unsigned long cp, unsigned char *o)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    size_t n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const unsigned char lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (size_t i = n - 1; i > 0; i--, cp >>= 6)
        o[i] = (unsigned char)(0x80 | (cp & 0x3F));
    o[0] = (unsigned char)(lead[n] | cp);
    return n;
}

/*
 * A \u escape at p (p < end, end is the closing quote): its length (6, or 12
 * for a surrogate pair) or 0 if cJSON refuses it. The code point is put at
 * *o if o is not NULL, and *o advanced.
 */
static size_t unicode_escape(const unsigned char *p, const unsigned char *end, unsigned char **o)
{
    if (end - p < 6)
        return 0;
    unsigned long cp = hex4(p + 2);
    size_t n = 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return 0; /* a low surrogate first */
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        const unsigned char *q = p + 6;
        if (end - q < 6 || q[0] != '\\' || q[1] != 'u')
            return 0;
        unsigned lo = hex4(q + 2);
        if (lo < 0xDC00 || lo > 0xDFFF)
            return 0;
        cp = 0x10000 + (((cp & 0x3FF) << 10) | (lo & 0x3FF));
        n = 12;
    }
    if (o != NULL)
        *o += put_utf8(cp, *o);
    return n;
}

/*
 * The body of a string, p..end (end is the closing quote): true if cJSON
 * decodes its escapes. With out, the decoded bytes (never more than end - p)
 * are written there and *n says how many. Like cJSON's, the walk may read
 * the closing quote as the second byte of an escape: a \u escape with bad
 * hex takes 6 bytes whatever they are, so "\u123\\" leaves the walk on the
 * last backslash, which then pairs with the quote (decoded: 00 22).
 */
static bool unescape(const unsigned char *p, const unsigned char *end, unsigned char *out,
                     size_t *n)
{
    unsigned char *o = out;
    while (p < end) {
        const unsigned char *bs = memchr(p, '\\', (size_t)(end - p));
        const unsigned char *stop = bs != NULL ? bs : end;
        if (out != NULL) {
            memcpy(o, p, (size_t)(stop - p));
            o += stop - p;
        }
        p = stop;
        if (bs == NULL)
            break;
        unsigned char c = p[1], ch;
        switch (c) {
        case 'b':
            ch = '\b';
            break;
        case 'f':
            ch = '\f';
            break;
        case 'n':
            ch = '\n';
            break;
        case 'r':
            ch = '\r';
            break;
        case 't':
            ch = '\t';
            break;
        case '"':
        case '\\':
        case '/':
            ch = c;
            break;
        case 'u': {
            size_t len = unicode_escape(p, end, out != NULL ? &o : NULL);
            if (len == 0)
                return false;
            p += len;
            continue;
        }
        default:
            return false;
        }
        if (out != NULL)
            *o++ = ch;
        p += 2;
    }
    if (n != NULL)
        *n = (size_t)(o - out);
    return true;
}

/*
 * The string at k->pos (a '"'). With out, its decoded text is allocated with
 * cJSON's allocator and put there (NUL-terminated); without, it is only
 * checked.
 */
static bool read_string(struct skim *k, char **out)
{
    size_t after = jedit_string_end((const char *)k->s, k->len, k->pos);
    if (after == 0)
        return false; /* not closed */
    const unsigned char *p = k->s + k->pos + 1, *end = k->s + after - 1;
    k->pos = after;
    if (out == NULL)
        return unescape(p, end, NULL, NULL);
    unsigned char *buf = cJSON_malloc((size_t)(end - p) + 1);
    size_t n = 0;
    if (buf == NULL || !unescape(p, end, buf, &n)) {
        cJSON_free(buf);
        return false;
    }
    buf[n] = '\0';
    *out = (char *)buf;
    return true;
}

/* Where the ASCII digits starting at r[i] end (n bounds the bytes that may be read). */
static size_t digits_end(const unsigned char *r, size_t i, size_t n)
{
    while (i < n && is_digit(r[i]))
        i++;
    return i;
}

/*
 * How much strtod takes of the run of [0-9+-.eE] bytes at r (n: the run's
 * length, or any bound past it): a sign, digits with at most one point (one
 * digit at least), then an exponent if it has a digit. Only bytes of the
 * run can match, and no hex, inf or nan can start in it.
 */
static size_t strtod_span(const unsigned char *r, size_t n)
{
    size_t i = 0, digits;
    if (i < n && (r[i] == '+' || r[i] == '-'))
        i++;
    size_t end = digits_end(r, i, n);
    digits = end - i;
    i = end;
    if (i < n && r[i] == '.') {
        end = digits_end(r, i + 1, n);
        digits += end - (i + 1);
        i = end;
    }
    if (digits == 0)
        return 0;
    if (i < n && (r[i] == 'e' || r[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (r[j] == '+' || r[j] == '-'))
            j++;
        end = digits_end(r, j, n);
        if (end > j)
            i = end;
    }
    return i;
}

/*
 * The number at k->pos, as cJSON reads it: strtod over the run of bytes
 * that may belong to a number ('.' swapped for the locale's decimal point),
 * the text going on after what strtod took. strtod_span says how much that
 * is; with node, those bytes are converted (short integers exactly without
 * strtod), without, nothing is.
 */
static bool number(struct skim *k, cJSON **node)
{
    const unsigned char *r = k->s + k->pos;
    size_t n = strtod_span(r, k->len - k->pos); /* what strtod takes lies within the run */
    if (n == 0)
        return false;
    k->pos += n;
    if (node == NULL)
        return true;
    size_t sign = r[0] == '-';
    if (digits_end(r, sign, n) == n && n - sign <= 15) {
        /* digits only, 15 at most: exact in a double, the value strtod gives */
        uint64_t v = 0;
        for (size_t i = sign; i < n; i++)
            v = v * 10 + (uint64_t)(r[i] - '0');
        *node = cJSON_CreateNumber(sign ? -(double)v : (double)v);
        return *node != NULL;
    }
    char small[64], *copy = n < sizeof(small) ? small : malloc(n + 1);
    if (copy == NULL)
        return false;
    char point = localeconv()->decimal_point[0]; /* cJSON's swap, for strtod */
    for (size_t i = 0; i < n; i++)
        copy[i] = r[i] == '.' ? point : (char)r[i];
    copy[n] = '\0';
    double d = strtod(copy, NULL);
    if (copy != small)
        free(copy);
    *node = cJSON_CreateNumber(d);
    return *node != NULL;
}

/*
 * A string node taking ownership of s (from cJSON_malloc): a null node
 * retyped, since cJSON_CreateString would copy s.
 */
static cJSON *string_node(char *s)
{
    cJSON *n = cJSON_CreateNull();
    if (n == NULL) {
        cJSON_free(s);
        return NULL;
    }
    n->type = cJSON_String;
    n->valuestring = s;
    return n;
}

static bool value(struct skim *k, unsigned depth, cJSON **node);

/*
 * The array or object at k->pos. node is its cJSON node (NULL: only check
 * it); members and elements are built while above the cut depth. A member
 * made before a failure stays attached, so freeing the root frees it.
 */
static bool container(struct skim *k, unsigned depth, cJSON *node)
{
    bool object = k->s[k->pos] == '{';
    unsigned char close = object ? '}' : ']';
    if (k->open >= CJSON_NESTING_LIMIT)
        return false;
    k->open++;
    k->pos++;
    if (!skip_ws(k))
        return false;
    if (k->s[k->pos] == close) {
        k->pos++;
        k->open--;
        return true;
    }
    bool build = node != NULL && depth < k->cut;
    for (;;) {
        char *name = NULL;
        if (object) {
            if (k->s[k->pos] != '"' || !read_string(k, build ? &name : NULL))
                return false;
            if (!skip_ws(k) || k->s[k->pos] != ':' || (k->pos++, !skip_ws(k))) {
                cJSON_free(name);
                return false;
            }
        }
        cJSON *child = NULL;
        bool ok = value(k, depth + 1, build ? &child : NULL);
        if (child != NULL) { /* an object's member is an element with its name set, as in cJSON */
            child->string = name;
            name = NULL;
            cJSON_AddItemToArray(node, child);
        }
        if (name != NULL)
            cJSON_free(name);
        if (!ok || !skip_ws(k))
            return false;
        unsigned char c = k->s[k->pos++];
        if (c == close)
            break;
        if (c != ',' || !skip_ws(k))
            return false;
    }
    k->open--;
    return true;
}

/*
 * The value at k->pos (a byte is there). node is NULL below the cut depth;
 * otherwise the value's node is put there. An array or object's node is put
 * there before its members are read, so what a failure leaves is attached
 * to the tree and freed with it; a scalar's node only once it is read.
 */
static bool value(struct skim *k, unsigned depth, cJSON **node)
{
    const unsigned char *p = k->s + k->pos;
    size_t left = k->len - k->pos;
    switch (*p) {
    case 'n':
    case 'f':
    case 't': {
        static const char *const words[] = {"null", "false", "true"};
        static const int types[] = {cJSON_NULL, cJSON_False, cJSON_True};
        int w = *p == 'n' ? 0 : *p == 'f' ? 1 : 2;
        size_t n = strlen(words[w]);
        if (left < n || memcmp(p, words[w], n) != 0)
            return false;
        k->pos += n;
        if (node == NULL)
            return true;
        *node = cJSON_CreateNull();
        if (*node == NULL)
            return false;
        (*node)->type = types[w];
        (*node)->valueint = types[w] == cJSON_True; /* as cJSON's parser sets it */
        return true;
    }
    case '"': {
        char *s = NULL;
        if (!read_string(k, node != NULL && depth < k->cut ? &s : NULL))
            return false;
        if (node == NULL)
            return true;
        *node = s != NULL ? string_node(s) : cJSON_CreateString("");
        return *node != NULL;
    }
    case '[':
    case '{':
        if (node == NULL)
            return container(k, depth, NULL);
        *node = *p == '[' ? cJSON_CreateArray() : cJSON_CreateObject();
        return *node != NULL && container(k, depth, *node);
    default:
        return (*p == '-' || is_digit(*p)) && number(k, node);
    }
}

cJSON *jskim_parse(const char *text, size_t len, unsigned depth)
{
    return jskim_parse_end(text, len, depth, NULL);
}

cJSON *jskim_parse_end(const char *text, size_t len, unsigned depth, size_t *end)
{
    if (text == NULL || len == 0)
        return NULL;
    struct skim k = {(const unsigned char *)text, len, 0, 0, depth};
    if (len > 4 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        k.pos = 3; /* a UTF-8 byte order mark, which cJSON skips only before 2 bytes or more */
    cJSON *root = NULL;
    if (!skip_ws(&k) || !value(&k, 0, &root)) {
        cJSON_Delete(root);
        return NULL;
    }
    if (end != NULL)
        *end = k.pos;
    return root; /* what follows the value is not looked at, as in cJSON_ParseWithLength */
}
