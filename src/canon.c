/*
 * canon.c - canonical JSON and the cache keys derived from it (pc_canon.h).
 * Owns no state: every function is a pure transformation of a cJSON tree
 * into bytes or digests.
 *
 * Keys are security-relevant: two requests that may deserve different answers
 * must never share a key. Hence the canonical form is injective on what the
 * upstream sees (modulo the documented equivalences: member order, white
 * space, string escapes, the spellings of one integer or one float, an
 * integer and a float of one value as top-level parameters), and the
 * digest input is length-prefixed so no field can be shifted into its
 * neighbour:
 *
 *   SHA-256( len|domain  len|tenant  len|namespace  len|endpoint
 *            len|variant  len|canonical-body )      len = 8 bytes big-endian
 *
 * Number literals (pc_canon.h, "Numbers"): before emitting, literals_collect
 * walks the tree in document order next to a scanner over the raw text, pairs
 * each number node with its literal, and keeps the few literals the double
 * does not tell (integer literals of 2^53 or more, integral values spelled as
 * floats) in a table sorted by node address, which emit_number consults. The pairing is checked
 * (same count, same value as cJSON read), so a raw text that does not belong to the tree is
 * noticed, never trusted.
 *
 *   raw text ──scanner──▶ literal ┐
 *                                  ├─ pair, check ─▶ lits (node → digits)
 *   cJSON tree ─document order─▶ node ┘                 │
 *                                     emit_value ─▶ emit_number ─┘
 *
 * Known limit: cJSON stores strings and member names as C strings, so a
 * decoded U+0000 ("\u0000") truncates the string there: "a\u0000b" and "a"
 * canonicalise alike. Callers that cannot accept this must refuse to cache
 * bodies containing "\u0000" before parsing (see canon_keys).
 */
#include "pc_canon.h"

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/rand.h>

/*
 * Which members of an object are left out. Only the request's top level and
 * the stub of a removed user turn are filtered; everything below is plain.
 */
enum canon_filter {
    FILTER_NONE,      /* every member */
    FILTER_EXACT,     /* top level of the exact key: canon_field_excluded */
    FILTER_PARTITION, /* top level of the partition: also the last user turn */
    FILTER_TURN_STUB, /* the removed user turn: everything but its content */
    FILTER_TOOL,      /* an Anthropic tool definition: canon_tool_transport */
};

/*
 * One object member awaiting output; idx breaks ties so the last duplicate wins
 * in canon_json, while canon_keys makes the keys of such a body unique (ctx->repeated).
 */
struct canon_member {
    const cJSON *item;
    size_t idx;
};

/* Members sorted on the stack up to this many; larger objects use the heap. */
#define CANON_STACK_MEMBERS 8

/* 2^53: below it every integer is exactly representable as a double. */
#define CANON_EXACT_INT 9007199254740992.0

/* Number literals up to this long are converted on the stack. */
#define CANON_LITERAL_STACK 64

/*
 * A literal the double alone does not tell: an integer literal of magnitude
 * 2^53 or more (its digits, without sign and leading zeros), or an integral
 * value spelled with a fraction or an exponent ("1.0", "1e20": float_spelled,
 * no digits kept).
 */
struct canon_literal {
    const cJSON *item;
    const char *digits;
    size_t len;
    bool negative;
    bool float_spelled;
};

/*
 * What emitting one body needs beyond the tree: the literals that keep their
 * digits, whether the raw text was there, and whether a number that may have
 * lost digits was emitted without it (lossy).
 */
struct canon_ctx {
    struct canon_literal *lits; /* sorted by item address */
    size_t nlits, cap;
    bool have_raw;
    bool lossy;
    bool repeated;    /* an object named a member twice (the key is unique to the call) */
    unsigned ordered; /* > 0: inside a member of canon_ordered, objects keep member order */
};

/* Top-level fields that do not change the answer (see pc_canon.h). */
static const char *const canon_excluded[] = {
    "stream", "stream_options",                      /* delivery: a hit is replayed either way */
    "user",   "metadata",       "safety_identifier", /* the caller's bookkeeping */
    "store",  "service_tier",   "prompt_cache_key",  /* upstream storage and routing */
};

/*
 * Members of an Anthropic tool definition that change only how the answer is
 * delivered, not the answer: @ai-sdk/anthropic adds eager_input_streaming to
 * every tool of a streamed call (the tool input streams without buffering),
 * and with it in the key a streamed and a plain call never shared an entry.
 */
static const char *const canon_tool_transport[] = {"eager_input_streaming"};

/*
 * Members below the top level whose objects the upstream reads in the order
 * written: JSON schemas (a tool's "parameters" or "input_schema", structured
 * outputs' "schema") and tool inputs (a tool_use block's "input", a tool's
 * "input_examples"). They are rendered into the prompt as written, and
 * structured outputs are generated in the order of the schema's properties
 * (OpenAI: "outputs will be produced in the same order as the ordering of
 * keys in the schema"), so {"reasoning", "answer"} and {"answer",
 * "reasoning"} are two requests with two answers. Every object beneath such
 * a member keeps its members in document order; elsewhere they are sorted.
 */
static const char *const canon_ordered[] = {"parameters", "input_schema", "schema", "input",
                                            "input_examples"};
/*
 * And top-level members that hold a JSON schema, for the engines that take one there: vLLM's
 * guided_json and structured_outputs ({"json": schema, ...}), llama.cpp server's json_schema.
 * Their grammars generate an object's properties in the schema's order, as above.
 */
static const char *const canon_ordered_top[] = {"guided_json", "json_schema", "structured_outputs"};

static void emit_value(struct canon_ctx *ctx, const cJSON *v, struct pc_buf *out);
static bool flag_on(const cJSON *v);
static void emit_number(struct canon_ctx *ctx, const cJSON *v, bool float_form, struct pc_buf *out);
static void emit_object(struct canon_ctx *ctx, const cJSON *obj, struct pc_buf *out,
                        enum canon_filter f, enum api_endpoint e);

bool canon_field_excluded(const char *name)
{
    if (name == NULL)
        return false;
    for (size_t i = 0; i < PC_ARRAY_LEN(canon_excluded); i++)
        if (strcmp(name, canon_excluded[i]) == 0)
            return true;
    return false;
}

/*
 * The Responses API echoes the request's bookkeeping in its answer (user,
 * metadata, store, service_tier, ... are members of the response object),
 * and "store" decides whether the answer's id resolves at the provider
 * later: there only the delivery fields stay out of the key.
 */
static bool field_excluded(enum api_endpoint e, const char *name)
{
    if (e == API_RESPONSES)
        return strcmp(name, "stream") == 0 || strcmp(name, "stream_options") == 0;
    return canon_field_excluded(name);
}

static bool name_in(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

/* Whether the objects within member name keep document order (top: a member of the request). */
static bool member_ordered(const char *name, bool top)
{
    return top ? name_in(name, canon_ordered_top, PC_ARRAY_LEN(canon_ordered_top))
               : name_in(name, canon_ordered, PC_ARRAY_LEN(canon_ordered));
}

static bool tool_member_excluded(const char *name)
{
    for (size_t i = 0; i < PC_ARRAY_LEN(canon_tool_transport); i++)
        if (strcmp(name, canon_tool_transport[i]) == 0)
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

/* --- number literals ------------------------------------------------------ */

/* The bytes cJSON's parse_number takes into a literal. */
static bool literal_char(char c)
{
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* A scanner over raw JSON text that stops at each number literal, outside strings. */
struct lit_scan {
    const char *p;
    size_t len, pos;
};

/* Past the string whose opening quote is at s->pos. */
static void scan_string(struct lit_scan *s)
{
    s->pos++;
    while (s->pos < s->len) {
        char c = s->p[s->pos++];
        if (c == '\\')
            s->pos++;
        else if (c == '"')
            return;
    }
}

/* The next number literal at or after s->pos; false when there is none. */
static bool scan_literal(struct lit_scan *s, const char **lit, size_t *n)
{
    while (s->pos < s->len) {
        char c = s->p[s->pos];
        if (c == '"') {
            scan_string(s);
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = s->pos;
            while (s->pos < s->len && literal_char(s->p[s->pos]))
                s->pos++;
            *lit = s->p + start;
            *n = s->pos - start;
            return true;
        }
        s->pos++;
    }
    return false;
}

/* What cJSON makes of a literal: strtod with '.' as the locale's decimal point. */
static bool literal_value(const char *lit, size_t n, double *d)
{
    char stack[CANON_LITERAL_STACK], *end = NULL;
    char *buf = n < sizeof(stack) ? stack : pc_malloc(n + 1);
    char point = localeconv()->decimal_point[0];
    for (size_t i = 0; i < n; i++)
        buf[i] = lit[i] == '.' ? point : lit[i];
    buf[n] = '\0';
    *d = strtod(buf, &end);
    bool whole = end == buf + n;
    if (buf != stack)
        free(buf);
    return whole;
}

static bool integer_literal(const char *lit, size_t n)
{
    for (size_t i = lit[0] == '-' ? 1 : 0; i < n; i++)
        if (lit[i] < '0' || lit[i] > '9')
            return false;
    return true;
}

static void ctx_push(struct canon_ctx *ctx, struct canon_literal l)
{
    if (ctx->nlits == ctx->cap) {
        ctx->cap = ctx->cap ? ctx->cap * 2 : 8;
        ctx->lits = pc_realloc(ctx->lits, ctx->cap * sizeof(*ctx->lits));
    }
    ctx->lits[ctx->nlits++] = l;
}

static void ctx_add_literal(struct canon_ctx *ctx, const cJSON *item, const char *lit, size_t n)
{
    struct canon_literal l = {.item = item, .negative = lit[0] == '-'};
    size_t i = l.negative ? 1 : 0;
    while (i + 1 < n && lit[i] == '0')
        i++;
    l.digits = lit + i;
    l.len = n - i;
    ctx_push(ctx, l);
}

/*
 * Pair number node v with literal lit: it must be what cJSON read for v.
 * An integer literal of magnitude 2^53 or more (or that overflowed to
 * infinity) keeps its digits; an integral value spelled with a fraction or an
 * exponent is noted as a float. 0, or -1 if they cannot belong together.
 */
static int literal_pair(struct canon_ctx *ctx, const cJSON *v, const char *lit, size_t n)
{
    double d;
    if (!literal_value(lit, n, &d) || !(d == v->valuedouble || (isnan(d) && isnan(v->valuedouble))))
        return -1;
    if (!integer_literal(lit, n)) {
        if (isfinite(d) && d == trunc(d))
            ctx_push(ctx, (struct canon_literal){.item = v, .float_spelled = true});
        return 0;
    }
    if (!(isfinite(d) && fabs(d) < CANON_EXACT_INT))
        ctx_add_literal(ctx, v, lit, n);
    return 0;
}

/* Visit v's subtree in document order, pairing numbers with literals. 0 or -1. */
static int literals_walk(struct canon_ctx *ctx, const cJSON *v, struct lit_scan *s)
{
    if (cJSON_IsNumber(v)) {
        const char *lit;
        size_t n;
        if (!scan_literal(s, &lit, &n))
            return -1;
        return literal_pair(ctx, v, lit, n);
    }
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
        return 0;
    for (const cJSON *c = v->child; c != NULL; c = c->next)
        if (literals_walk(ctx, c, s) < 0)
            return -1;
    return 0;
}

static int literal_cmp(const void *pa, const void *pb)
{
    uintptr_t a = (uintptr_t)((const struct canon_literal *)pa)->item;
    uintptr_t b = (uintptr_t)((const struct canon_literal *)pb)->item;
    return a < b ? -1 : a > b;
}

/* Fill ctx from raw text; on a mismatch ctx is left as if there were none. */
static void literals_collect(struct canon_ctx *ctx, const cJSON *v, const char *raw, size_t len)
{
    struct lit_scan s = {raw, len, 0};
    const char *extra;
    size_t n;
    if (raw == NULL || literals_walk(ctx, v, &s) < 0 || scan_literal(&s, &extra, &n)) {
        ctx->nlits = 0;
        return;
    }
    ctx->have_raw = true;
    if (ctx->nlits > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(ctx->lits, ctx->nlits, sizeof(*ctx->lits), literal_cmp);
}

static void ctx_free(struct canon_ctx *ctx)
{
    free(ctx->lits);
    memset(ctx, 0, sizeof(*ctx));
}

static const struct canon_literal *ctx_literal(const struct canon_ctx *ctx, const cJSON *v)
{
    struct canon_literal key = {.item = v};
    if (ctx->nlits == 0)
        return NULL;
    return bsearch(&key, ctx->lits, ctx->nlits, sizeof(key), literal_cmp);
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

/* By position alone: document order. */
static int member_pos_cmp(const void *pa, const void *pb)
{
    const struct canon_member *a = pa, *b = pb;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static bool is_user_turn(const cJSON *msg)
{
    const char *role = cJSON_GetStringValue(api_member(msg, "role"));
    return role != NULL && strcmp(role, "user") == 0;
}

/* A Responses API input item that is a user message ("type" absent or "message"). */
static bool is_user_item(const cJSON *item)
{
    const cJSON *type = api_member(item, "type");
    const char *t = cJSON_GetStringValue(type);
    return is_user_turn(item) && (type == NULL || (t != NULL && strcmp(t, "message") == 0));
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
static void emit_messages_partition(struct canon_ctx *ctx, const cJSON *arr, struct pc_buf *out)
{
    const cJSON *last = last_child(arr);
    if (last == NULL || !is_user_turn(last)) {
        emit_value(ctx, arr, out);
        return;
    }
    pc_buf_append_char(out, '[');
    for (const cJSON *c = arr->child; c != last; c = c->next) {
        emit_value(ctx, c, out);
        pc_buf_append_char(out, ',');
    }
    emit_object(ctx, last, out, FILTER_TURN_STUB, API_NONE);
    pc_buf_append_char(out, ']');
}

/*
 * "input" of a Responses API request in the partition: a string is one user
 * turn, replaced by the stub of a lone user message; a list ending with a
 * user message loses that message's content, as "messages" do above.
 */
static void emit_input_partition(struct canon_ctx *ctx, const cJSON *input, struct pc_buf *out)
{
    if (cJSON_IsString(input)) {
        pc_buf_append_str(out, "[{\"role\":\"user\"}]");
        return;
    }
    const cJSON *last = cJSON_IsArray(input) ? last_child(input) : NULL;
    if (last == NULL || !is_user_item(last)) {
        emit_value(ctx, input, out);
        return;
    }
    emit_messages_partition(ctx, input, out);
}

/* "tools" of an Anthropic request: each definition without its transport-only members. */
static void emit_tools(struct canon_ctx *ctx, const cJSON *tools, struct pc_buf *out)
{
    pc_buf_append_char(out, '[');
    for (const cJSON *t = tools->child; t != NULL; t = t->next) {
        if (t != tools->child)
            pc_buf_append_char(out, ',');
        if (cJSON_IsObject(t))
            emit_object(ctx, t, out, FILTER_TOOL, API_MESSAGES);
        else
            emit_value(ctx, t, out);
    }
    pc_buf_append_char(out, ']');
}

/*
 * stream_options stays out of the key, but for continuous_usage_stats (vLLM,
 * SGLang: usage in every chunk, running totals): a stream with it is not
 * what a client that did not ask is sent (no usage in its chunks), nor one
 * without it what a client that asks is sent. It is kept, as the one member
 * of stream_options, when on. Returns whether the member was emitted.
 */
static bool emit_stream_options(const cJSON *item, bool first, struct pc_buf *out)
{
    if (!cJSON_IsObject(item) || !flag_on(api_member(item, "continuous_usage_stats")))
        return false;
    if (!first)
        pc_buf_append_char(out, ',');
    pc_buf_append_str(out, "\"stream_options\":{\"continuous_usage_stats\":true}");
    return true;
}

/* Emit one surviving member (with its leading comma); false if filtered out. */
static bool emit_member(struct canon_ctx *ctx, const cJSON *item, bool first, struct pc_buf *out,
                        enum canon_filter f, enum api_endpoint e)
{
    const char *key = member_key(item);
    bool top = f == FILTER_EXACT || f == FILTER_PARTITION;
    if (top && strcmp(key, "stream_options") == 0)
        return emit_stream_options(item, first, out);
    if (top && field_excluded(e, key))
        return false;
    if (f == FILTER_TURN_STUB && strcmp(key, "content") == 0)
        return false;
    if (f == FILTER_TOOL && tool_member_excluded(key))
        return false;
    const char *drop = f == FILTER_PARTITION ? partition_field(e) : NULL;
    if (drop != NULL && strcmp(key, drop) == 0)
        return false;
    if (!first)
        pc_buf_append_char(out, ',');
    pc_buf_json_str(out, key, strlen(key));
    pc_buf_append_char(out, ':');
    bool turns = f == FILTER_PARTITION && (e == API_CHAT || e == API_MESSAGES);
    if (top && cJSON_IsNumber(item))
        emit_number(ctx, item, false, out); /* a parameter: 1 and 1.0 ask the same */
    else if (turns && strcmp(key, "messages") == 0 && cJSON_IsArray(item))
        emit_messages_partition(ctx, item, out);
    else if (top && e == API_MESSAGES && strcmp(key, "tools") == 0 && cJSON_IsArray(item))
        emit_tools(ctx, item, out);
    else if (f == FILTER_PARTITION && e == API_RESPONSES && strcmp(key, "input") == 0)
        emit_input_partition(ctx, item, out);
    else if (member_ordered(key, top)) {
        ctx->ordered++;
        emit_value(ctx, item, out);
        ctx->ordered--;
    } else {
        emit_value(ctx, item, out);
    }
    return true;
}

static void emit_object(struct canon_ctx *ctx, const cJSON *obj, struct pc_buf *out,
                        enum canon_filter f, enum api_endpoint e)
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
    /* Equal keys are adjacent, in input order: keep only the last. */
    for (size_t i = 0; i + 1 < n; i++) {
        if (strcmp(member_key(m[i].item), member_key(m[i + 1].item)) == 0) {
            m[i].item = NULL;
            if (ctx != NULL)
                ctx->repeated = true;
        }
    }
    if (ctx != NULL && ctx->ordered > 0)
        qsort(m, n, sizeof(*m), member_pos_cmp);

    pc_buf_append_char(out, '{');
    bool first = true;
    for (size_t i = 0; i < n; i++)
        if (m[i].item != NULL && emit_member(ctx, m[i].item, first, out, f, e))
            first = false;
    pc_buf_append_char(out, '}');
    if (m != stack)
        free(m);
}

static void emit_array(struct canon_ctx *ctx, const cJSON *arr, struct pc_buf *out)
{
    pc_buf_append_char(out, '[');
    for (const cJSON *c = arr->child; c != NULL; c = c->next) {
        if (c != arr->child)
            pc_buf_append_char(out, ',');
        emit_value(ctx, c, out);
    }
    pc_buf_append_char(out, ']');
}

/*
 * A kept literal, or the double's canonical form; with float_form, an
 * integral value spelled as a float is written as one ("1.0", "-0.0",
 * "1e20"), never as an integer's digits. Without the raw text, an integral
 * value of magnitude 2^53 or more (or infinity) may stand for several
 * literals, and with float_form any integral value may have been a float:
 * noted in ctx->lossy. Kept out of emit_value so the recursive frames stay
 * small.
 */
static void emit_number(struct canon_ctx *ctx, const cJSON *v, bool float_form, struct pc_buf *out)
{
    char num[40];
    const struct canon_literal *lit = ctx != NULL ? ctx_literal(ctx, v) : NULL;
    if (lit != NULL && !lit->float_spelled) {
        if (lit->negative)
            pc_buf_append_char(out, '-');
        pc_buf_append(out, lit->digits, lit->len);
        return;
    }
    double d = v->valuedouble;
    if (ctx != NULL && !ctx->have_raw && !isnan(d) &&
        (!(fabs(d) < CANON_EXACT_INT) || (float_form && d == trunc(d))))
        ctx->lossy = true; /* infinity too: an overflowing literal of any digits */
    size_t n = canon_number(d, num);
    if (lit == NULL || !float_form) {
        pc_buf_append(out, num, n);
        return;
    }
    if (d == 0 && signbit(d))
        pc_buf_append_char(out, '-');
    pc_buf_append(out, num, n);
    if (memchr(num, '.', n) == NULL && memchr(num, 'e', n) == NULL)
        pc_buf_append_str(out, ".0");
}

/*
 * Recursion is bounded by cJSON's parse nesting limit (CJSON_NESTING_LIMIT,
 * 1000): a few hundred bytes of stack per level.
 */
static void emit_value(struct canon_ctx *ctx, const cJSON *v, struct pc_buf *out)
{
    if (v == NULL || cJSON_IsNull(v)) {
        pc_buf_append_str(out, "null");
    } else if (cJSON_IsTrue(v)) {
        pc_buf_append_str(out, "true");
    } else if (cJSON_IsFalse(v)) {
        pc_buf_append_str(out, "false");
    } else if (cJSON_IsNumber(v)) {
        emit_number(ctx, v, true, out);
    } else if (cJSON_IsString(v)) {
        const char *s = v->valuestring != NULL ? v->valuestring : "";
        pc_buf_json_str(out, s, strlen(s));
    } else if (cJSON_IsArray(v)) {
        emit_array(ctx, v, out);
    } else if (cJSON_IsObject(v)) {
        emit_object(ctx, v, out, FILTER_NONE, API_NONE);
    } else {
        /* cJSON_Invalid / cJSON_Raw: never produced by the parser. */
        pc_buf_append_str(out, "null");
    }
}

void canon_json(const cJSON *v, struct pc_buf *out)
{
    struct canon_ctx ctx = {0}; /* no literals: numbers from their doubles; lossy is not asked */
    emit_value(&ctx, v, out);
    ctx_free(&ctx);
}

int canon_json_text(const cJSON *v, const char *raw, size_t len, struct pc_buf *out)
{
    struct canon_ctx ctx = {0};
    literals_collect(&ctx, v, raw, len);
    bool ok = ctx.have_raw;
    if (ok)
        emit_value(&ctx, v, out);
    ctx_free(&ctx);
    return ok ? 0 : -1;
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

/*
 * A field no other call of this or any process shares: 16 random bytes and a
 * counter (in case the random source fails), for keys that must never match.
 */
static void put_nonce(struct pc_buf *b)
{
    static uint64_t counter;
    unsigned char nonce[16 + 8] = {0};
    uint64_t n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    if (RAND_bytes(nonce, 16) != 1) {
        uint64_t t = pc_mono_us(), w = (uint64_t)pc_wall_ms();
        memcpy(nonce, &t, 8);
        memcpy(nonce + 8, &w, 8);
    }
    memcpy(nonce + 16, &n, 8);
    put_field(b, nonce, sizeof(nonce));
}

/*
 * Digest of one key: the header fields, then the filtered body in place, then
 * the last user turn's layout if it has one (text_layout; NULL or empty:
 * none); a body that may have lost digits (ctx->lossy) gets a nonce after it.
 */
static void key_digest(struct canon_ctx *ctx, const char *domain, const struct canon_input *in,
                       const unsigned char *tenant, enum canon_filter f,
                       const struct pc_buf *layout, struct pc_buf *b,
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
        emit_object(ctx, in->body, b, f, in->endpoint);
    else
        emit_value(ctx, in->body, b);
    put_len(b, off, b->len - off - 8);
    if (layout != NULL && layout->len > 0)
        put_field(b, layout->data, layout->len);
    if (ctx->lossy || ctx->repeated)
        put_nonce(b);
    pc_sha256(b->data, b->len, out);
}

/* A text part: "text" (chat completions, Anthropic) or "input_text" (Responses API). */
static bool text_part_type(const char *type)
{
    return type != NULL && (strcmp(type, "text") == 0 || strcmp(type, "input_text") == 0);
}

/*
 * Text of a content value: a string, or an array made only of text parts
 * ({"type":"text","text":...}, OpenAI and Anthropic alike; "input_text" in
 * the Responses API) joined by "\n".
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
        if (!text_part_type(type) || text == NULL) {
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

/* Responses API: a string input, or the text of a list's trailing user message. */
static char *last_input_text(const cJSON *input)
{
    if (cJSON_IsString(input))
        return pc_strdup(input->valuestring);
    const cJSON *last = cJSON_IsArray(input) ? last_child(input) : NULL;
    if (last == NULL || !is_user_item(last))
        return NULL;
    return content_text(api_member(last, "content"));
}

/*
 * A turn of white space alone means nothing to match by meaning: it gets no
 * semantic lookup and no vector (the exact cache still serves it). Embedding
 * APIs refuse an empty input (400), which would fail every text batched with
 * it.
 */
static bool blank(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')
        s++;
    return *s == '\0';
}

static char *last_user_text(enum api_endpoint e, const cJSON *body)
{
    if (e == API_RESPONSES)
        return last_input_text(api_member(body, "input"));
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
 * The line layout of a last user turn of several lines, which the partition
 * holds (empty for one line, so a one-line question keeps its partition).
 * Embedders tokenise: "a\nb" and "a b", or two programs whose lines break or
 * indent differently, embed alike, yet Python's blocks are its indentation
 * and a poem's or a table's lines are its form, so such turns must not answer
 * each other by meaning. Appended to out: each line's indentation (its
 * leading spaces and tabs as written) and '\n', a blank line as "-\n";
 * blank lines before the first and after the last line of text left out; a
 * line ends at "\n", "\r\n" or a lone "\r" (which breaks the line too).
 */
static void text_layout(const char *s, struct pc_buf *out)
{
    size_t lines = 0, blanks = 0, mark = out->len;
    pc_buf_append_str(out, "layout\n");
    while (*s != '\0') {
        size_t indent = strspn(s, " \t");
        size_t n = strcspn(s, "\r\n");
        bool is_blank = n == strspn(s, " \t\f\v");
        if (is_blank) {
            blanks += lines > 0; /* kept only if a line of text follows */
        } else {
            for (; blanks > 0; blanks--)
                pc_buf_append_str(out, "-\n");
            pc_buf_append(out, s, indent);
            pc_buf_append_char(out, '\n');
            lines++;
        }
        s += n + (s[n] == '\r' && s[n + 1] == '\n') + (s[n] != '\0');
    }
    if (lines < 2) /* one line of text: no layout to tell */
        out->len = mark;
}

/* A flag that is on: present and neither false, null nor the number 0 (servers coerce). */
static bool flag_on(const cJSON *v)
{
    return v != NULL && !cJSON_IsFalse(v) && !cJSON_IsNull(v) &&
           !(cJSON_IsNumber(v) && v->valuedouble == 0);
}

/*
 * Whether the answer repeats the prompt itself: "echo" (a completion's prompt before its
 * text, and with logprobs the prompt tokens' log probabilities; vLLM's chat "echo"), vLLM's
 * "prompt_logprobs" (even 0 asks for them) and "return_token_ids" (the prompt's token ids).
 * Another prompt's answer is wrong there however alike the two mean: never matched by meaning.
 */
static bool repeats_prompt(const cJSON *body)
{
    const cJSON *pl = api_member(body, "prompt_logprobs");
    return flag_on(api_member(body, "echo")) || (pl != NULL && !cJSON_IsNull(pl)) ||
           flag_on(api_member(body, "return_token_ids"));
}

/*
 * Callers: a request body containing "\u0000" canonicalises as if its string
 * ended there (see the top of this file); refuse to cache such bodies if that
 * matters. A NULL tenant is the anonymous tenant (canon_tenant(NULL)). Pass
 * the raw body too (in->raw): without it, numbers of magnitude 2^53 or more
 * make the keys unique (k->lossy).
 */
int canon_keys(const struct canon_input *in, struct canon_keys *k)
{
    unsigned char anon[PC_SHA256_LEN];
    struct pc_buf b = PC_BUF_INIT;
    struct canon_ctx ctx = {0};
    memset(k, 0, sizeof(*k));
    if (in == NULL)
        return -1;
    const unsigned char *tenant = in->tenant;
    if (tenant == NULL) {
        canon_tenant(NULL, anon);
        tenant = anon;
    }
    literals_collect(&ctx, in->body, in->raw, in->raw_len);
    key_digest(&ctx, "pc-exact-1", in, tenant, FILTER_EXACT, NULL, &b, k->exact);
    k->lossy = ctx.lossy;
    k->repeated = ctx.repeated;
    if (!in->exact_only) {
        char *text = last_user_text(in->endpoint, in->body);
        struct pc_buf layout = PC_BUF_INIT;
        if (text != NULL)
            text_layout(text, &layout);
        ctx.lossy = false; /* the partition leaves parts out: judged on its own */
        key_digest(&ctx, "pc-part-1", in, tenant, FILTER_PARTITION, &layout, &b, k->partition);
        k->lossy = k->lossy || ctx.lossy;
        pc_buf_free(&layout);
        if (text != NULL && !repeats_prompt(in->body) && !blank(text))
            k->last_user_text = text; /* ownership passes to k */
        else
            free(text);
    }
    pc_buf_free(&b);
    ctx_free(&ctx);
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
