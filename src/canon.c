/*
 * canon.c - canonical JSON and the cache keys derived from it (pc_canon.h).
 * Owns no state: every function is a pure transformation of a cJSON tree
 * into bytes or digests.
 *
 * Keys are security-relevant: two requests that may deserve different answers
 * must never share a key. Hence the canonical form is injective on what the
 * upstream sees (modulo the documented equivalences: member order, white
 * space, string escapes, number spelling, duplicate keys where the last one
 * wins as it does in the upstreams' parsers), and the digest input is
 * length-prefixed so no field can be shifted into its neighbour:
 *
 *   SHA-256( len|domain  len|tenant  len|namespace  len|endpoint
 *            len|variant  len|canonical-body )      len = 8 bytes big-endian
 *
 * Known limit: cJSON stores strings and member names as C strings, so a
 * decoded U+0000 ("\u0000") truncates the string there: "a\u0000b" and "a"
 * canonicalise alike. Callers that cannot accept this must refuse to cache
 * bodies containing "\u0000" before parsing (see canon_keys).
 */
#include "pc_canon.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Which members of an object are left out. Only the request's top level and
 * the stub of a removed user turn are filtered; everything below is plain.
 */
enum canon_filter {
    FILTER_NONE,      /* every member */
    FILTER_EXACT,     /* top level of the exact key: canon_field_excluded */
    FILTER_PARTITION, /* top level of the partition: also the last user turn */
    FILTER_TURN_STUB, /* the removed user turn: everything but its content */
};

/* One object member awaiting output; idx breaks ties so the last duplicate wins. */
struct canon_member {
    const cJSON *item;
    size_t idx;
};

/* Members sorted on the stack up to this many; larger objects use the heap. */
#define CANON_STACK_MEMBERS 8

/* 2^53: below it every integer is exactly representable as a double. */
#define CANON_EXACT_INT 9007199254740992.0

/* Top-level fields that do not change the answer (see pc_canon.h). */
static const char *const canon_excluded[] = {
    "stream", "stream_options",                      /* delivery: a hit is replayed either way */
    "user",   "metadata",       "safety_identifier", /* the caller's bookkeeping */
    "store",  "service_tier",   "prompt_cache_key",  /* upstream storage and routing */
};

static void emit_value(const cJSON *v, struct pc_buf *out);
static void emit_object(const cJSON *obj, struct pc_buf *out, enum canon_filter f,
                        enum api_endpoint e);

bool canon_field_excluded(const char *name)
{
    if (name == NULL)
        return false;
    for (size_t i = 0; i < PC_ARRAY_LEN(canon_excluded); i++)
        if (strcmp(name, canon_excluded[i]) == 0)
            return true;
    return false;
}

/* --- numbers ------------------------------------------------------------- */

/*
 * Copy printf output into out, making it locale-independent: any byte that is
 * not a digit, sign or 'e' is the locale's decimal point (possibly several
 * bytes) and becomes one '.'. The exponent loses its '+' and leading zeros
 * ("1e+05" -> "1e5") so the form does not depend on the libc's exponent width.
 */
static size_t number_normalise(const char *s, char out[40])
{
    size_t n = 0;
    bool in_point = false, in_exp = false, exp_lead = false;
    for (; *s != '\0' && n < 39; s++) {
        char c = *s;
        bool digit = c >= '0' && c <= '9';
        if (!digit && c != '-' && c != '+' && c != 'e' && c != 'E') {
            if (!in_point)
                out[n++] = '.';
            in_point = true;
            continue;
        }
        in_point = false;
        if (c == 'e' || c == 'E') {
            out[n++] = 'e';
            in_exp = exp_lead = true;
            continue;
        }
        if (in_exp && c == '+')
            continue;
        if (in_exp && exp_lead && c == '0' && s[1] >= '0' && s[1] <= '9')
            continue;
        if (digit)
            exp_lead = false;
        out[n++] = c;
    }
    out[n] = '\0';
    return n;
}

size_t canon_number(double d, char out[40])
{
    char tmp[64];
    if (isnan(d)) {
        /* Not produced by the parser; cJSON itself prints NaN as null. */
        memcpy(out, "null", 5);
        return 4;
    }
    if (isinf(d)) {
        /* cJSON's strtod turns overflowing literals (1e400) into infinity:
         * print one literal that overflows again, so the form round-trips. */
        const char *s = d > 0 ? "1e999" : "-1e999";
        size_t n = strlen(s);
        memcpy(out, s, n + 1);
        return n;
    }
    if (d == 0) { /* also -0 */
        memcpy(out, "0", 2);
        return 1;
    }
    if (fabs(d) < CANON_EXACT_INT && d == (double)(long long)d) {
        int n = snprintf(out, 40, "%lld", (long long)d);
        return (size_t)n;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, d);
        /* Both sides use the current locale's decimal point, so they agree. */
        if (strtod(tmp, NULL) == d)
            break;
    }
    return number_normalise(tmp, out);
}

/* --- canonical JSON ------------------------------------------------------ */

static const char *member_key(const cJSON *item)
{
    return item->string != NULL ? item->string : "";
}

/* Bytewise by key (strcmp compares as unsigned char), then by position. */
static int member_cmp(const void *pa, const void *pb)
{
    const struct canon_member *a = pa, *b = pb;
    int c = strcmp(member_key(a->item), member_key(b->item));
    if (c != 0)
        return c;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static bool is_user_turn(const cJSON *msg)
{
    const char *role = cJSON_GetStringValue(api_member(msg, "role"));
    return role != NULL && strcmp(role, "user") == 0;
}

static const cJSON *last_child(const cJSON *arr)
{
    const cJSON *last = NULL;
    for (const cJSON *c = arr->child; c != NULL; c = c->next)
        last = c;
    return last;
}

/* The top-level field the partition leaves out whole, or NULL. */
static const char *partition_field(enum api_endpoint e)
{
    if (e == API_COMPLETIONS)
        return "prompt";
    if (e == API_EMBEDDINGS)
        return "input";
    return NULL;
}

/*
 * "messages" in the partition: a trailing user turn is replaced by a stub
 * without its content. Keeping the stub (role, name, ...) means a
 * conversation that ends with a removed user turn never shares a partition
 * with one that ends on the previous turn.
 */
static void emit_messages_partition(const cJSON *arr, struct pc_buf *out)
{
    const cJSON *last = last_child(arr);
    if (last == NULL || !is_user_turn(last)) {
        emit_value(arr, out);
        return;
    }
    pc_buf_append_char(out, '[');
    for (const cJSON *c = arr->child; c != last; c = c->next) {
        emit_value(c, out);
        pc_buf_append_char(out, ',');
    }
    emit_object(last, out, FILTER_TURN_STUB, API_NONE);
    pc_buf_append_char(out, ']');
}

/* Emit one surviving member (with its leading comma); false if filtered out. */
static bool emit_member(const cJSON *item, bool first, struct pc_buf *out, enum canon_filter f,
                        enum api_endpoint e)
{
    const char *key = member_key(item);
    if ((f == FILTER_EXACT || f == FILTER_PARTITION) && canon_field_excluded(key))
        return false;
    if (f == FILTER_TURN_STUB && strcmp(key, "content") == 0)
        return false;
    const char *drop = f == FILTER_PARTITION ? partition_field(e) : NULL;
    if (drop != NULL && strcmp(key, drop) == 0)
        return false;
    if (!first)
        pc_buf_append_char(out, ',');
    pc_buf_json_str(out, key, strlen(key));
    pc_buf_append_char(out, ':');
    bool turns = f == FILTER_PARTITION && (e == API_CHAT || e == API_MESSAGES);
    if (turns && strcmp(key, "messages") == 0 && cJSON_IsArray(item))
        emit_messages_partition(item, out);
    else
        emit_value(item, out);
    return true;
}

static void emit_object(const cJSON *obj, struct pc_buf *out, enum canon_filter f,
                        enum api_endpoint e)
{
    struct canon_member stack[CANON_STACK_MEMBERS];
    struct canon_member *m = stack;
    size_t n = 0;
    for (const cJSON *c = obj->child; c != NULL; c = c->next)
        n++;
    if (n > CANON_STACK_MEMBERS)
        m = pc_malloc(n * sizeof(*m));
    n = 0;
    for (const cJSON *c = obj->child; c != NULL; c = c->next, n++)
        m[n] = (struct canon_member){c, n};
    qsort(m, n, sizeof(*m), member_cmp);

    pc_buf_append_char(out, '{');
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        /* Equal keys are adjacent, in input order: emit only the last. */
        if (i + 1 < n && strcmp(member_key(m[i].item), member_key(m[i + 1].item)) == 0)
            continue;
        if (emit_member(m[i].item, first, out, f, e))
            first = false;
    }
    pc_buf_append_char(out, '}');
    if (m != stack)
        free(m);
}

static void emit_array(const cJSON *arr, struct pc_buf *out)
{
    pc_buf_append_char(out, '[');
    for (const cJSON *c = arr->child; c != NULL; c = c->next) {
        if (c != arr->child)
            pc_buf_append_char(out, ',');
        emit_value(c, out);
    }
    pc_buf_append_char(out, ']');
}

/* Kept out of emit_value so the recursive frames stay small. */
static void emit_number(double d, struct pc_buf *out)
{
    char num[40];
    pc_buf_append(out, num, canon_number(d, num));
}

/*
 * Recursion is bounded by cJSON's parse nesting limit (CJSON_NESTING_LIMIT,
 * 1000): a few hundred bytes of stack per level.
 */
static void emit_value(const cJSON *v, struct pc_buf *out)
{
    if (v == NULL || cJSON_IsNull(v)) {
        pc_buf_append_str(out, "null");
    } else if (cJSON_IsTrue(v)) {
        pc_buf_append_str(out, "true");
    } else if (cJSON_IsFalse(v)) {
        pc_buf_append_str(out, "false");
    } else if (cJSON_IsNumber(v)) {
        emit_number(v->valuedouble, out);
    } else if (cJSON_IsString(v)) {
        const char *s = v->valuestring != NULL ? v->valuestring : "";
        pc_buf_json_str(out, s, strlen(s));
    } else if (cJSON_IsArray(v)) {
        emit_array(v, out);
    } else if (cJSON_IsObject(v)) {
        emit_object(v, out, FILTER_NONE, API_NONE);
    } else {
        /* cJSON_Invalid / cJSON_Raw: never produced by the parser. */
        pc_buf_append_str(out, "null");
    }
}

void canon_json(const cJSON *v, struct pc_buf *out)
{
    emit_value(v, out);
}

/* --- keys ---------------------------------------------------------------- */

static void put_len(struct pc_buf *b, size_t off, uint64_t n)
{
    for (int i = 7; i >= 0; i--, n >>= 8)
        b->data[off + (size_t)i] = (char)(n & 0xff);
}

/* Append one length-prefixed field. */
static void put_field(struct pc_buf *b, const void *p, size_t n)
{
    size_t off = b->len;
    pc_buf_append(b, "\0\0\0\0\0\0\0\0", 8);
    put_len(b, off, n);
    pc_buf_append(b, p, n);
}

static void put_str(struct pc_buf *b, const char *s)
{
    put_field(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

/* Digest of one key: the header fields, then the filtered body in place. */
static void key_digest(const char *domain, const struct canon_input *in,
                       const unsigned char *tenant, enum canon_filter f, struct pc_buf *b,
                       unsigned char out[PC_SHA256_LEN])
{
    pc_buf_reset(b);
    put_str(b, domain);
    put_field(b, tenant, PC_SHA256_LEN);
    put_str(b, in->ns);
    put_str(b, api_endpoint_name(in->endpoint));
    put_str(b, in->variant);
    size_t off = b->len;
    pc_buf_append(b, "\0\0\0\0\0\0\0\0", 8);
    if (cJSON_IsObject(in->body))
        emit_object(in->body, b, f, in->endpoint);
    else
        emit_value(in->body, b);
    put_len(b, off, b->len - off - 8);
    pc_sha256(b->data, b->len, out);
}

/*
 * Text of a content value: a string, or an array made only of text parts
 * ({"type":"text","text":...}, OpenAI and Anthropic alike) joined by "\n".
 * Any other part (image, audio, file, tool result) makes it NULL: the text
 * alone would not say what the turn asks, so it must not be matched on.
 */
static char *content_text(const cJSON *content)
{
    const char *s = cJSON_GetStringValue(content);
    if (s != NULL)
        return pc_strdup(s);
    if (!cJSON_IsArray(content) || content->child == NULL)
        return NULL;
    struct pc_buf b = PC_BUF_INIT;
    for (const cJSON *part = content->child; part != NULL; part = part->next) {
        const char *type = cJSON_GetStringValue(api_member(part, "type"));
        const char *text = cJSON_GetStringValue(api_member(part, "text"));
        if (type == NULL || strcmp(type, "text") != 0 || text == NULL) {
            pc_buf_free(&b);
            return NULL;
        }
        if (part != content->child)
            pc_buf_append_char(&b, '\n');
        pc_buf_append_str(&b, text);
    }
    pc_buf_cstr(&b);
    return b.data; /* ownership passes to the caller */
}

static char *last_user_text(enum api_endpoint e, const cJSON *body)
{
    if (e == API_CHAT || e == API_MESSAGES) {
        const cJSON *msgs = api_member(body, "messages");
        const cJSON *last = cJSON_IsArray(msgs) ? last_child(msgs) : NULL;
        if (last == NULL || !is_user_turn(last))
            return NULL;
        return content_text(api_member(last, "content"));
    }
    const char *field = partition_field(e);
    const char *text = field != NULL ? cJSON_GetStringValue(api_member(body, field)) : NULL;
    return text != NULL ? pc_strdup(text) : NULL;
}

/*
 * Callers: a request body containing "\u0000" canonicalises as if its string
 * ended there (see the top of this file); refuse to cache such bodies if that
 * matters. A NULL tenant is the anonymous tenant (canon_tenant(NULL)).
 */
int canon_keys(const struct canon_input *in, struct canon_keys *k)
{
    unsigned char anon[PC_SHA256_LEN];
    struct pc_buf b = PC_BUF_INIT;
    memset(k, 0, sizeof(*k));
    if (in == NULL)
        return -1;
    const unsigned char *tenant = in->tenant;
    if (tenant == NULL) {
        canon_tenant(NULL, anon);
        tenant = anon;
    }
    key_digest("pc-exact-1", in, tenant, FILTER_EXACT, &b, k->exact);
    if (!in->exact_only)
        key_digest("pc-part-1", in, tenant, FILTER_PARTITION, &b, k->partition);
    pc_buf_free(&b);
    if (!in->exact_only)
        k->last_user_text = last_user_text(in->endpoint, in->body);
    return 0;
}

void canon_keys_free(struct canon_keys *k)
{
    if (k != NULL)
        PC_FREE(&k->last_user_text);
}

void canon_tenant(const char *credentials, unsigned char out[PC_SHA256_LEN])
{
    static const char domain[] = "pc-tenant-1\n";
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append(&b, domain, sizeof(domain) - 1);
    if (credentials != NULL)
        pc_buf_append_str(&b, credentials);
    pc_sha256(b.data, b.len, out);
    pc_buf_free(&b);
}
