/*
 * backend/anthropic.c - Anthropic's Messages API: upstream-key goes in
 * x-api-key. Hint: cache_control breakpoints. Anthropic caches a prompt
 * prefix only where a block is marked {"type":"ephemeral"}, charges extra
 * for writing it and little for reading it back within 5 minutes of its
 * last use; a marked prefix shorter than the model's minimum is not cached.
 * So the proxy marks only what pays: the end of a segment (tools, system,
 * an earlier turn - never the last message, which is new) whose prefix was
 * sent within the last 5 minutes and is long enough, at most two marks, and
 * never more than 4 counting the client's own (a tool_result's too), which
 * stay where they are, and none before a client's mark with a longer ttl.
 *
 *   candidates (segment ends, not the last message)
 *     ─▶ seen within 5 min (fresh links) and >= the model's minimum tokens
 *     ─▶ the deepest one (most reuse) and the shallowest one (the stable
 *        tools/system prefix that other conversations share)
 *     ─▶ spliced into the block that ends the segment
 */
#include "pc_backend.h"
#include "pc_chain.h"

#include <string.h>

#define MARK            "{\"type\":\"ephemeral\"}"
#define CACHE_MS        (5 * 60 * 1000) /* a prefix gets breakpoints if used within it */
#define MAX_BREAKPOINTS 4               /* cache_control blocks Anthropic accepts per request */
#define HINT_MARKS      2               /* breakpoints the proxy adds at most */
#define MIN_TOKENS      1024
#define MIN_TOKENS_2K   2048
#define MIN_TOKENS_4K   4096

static void anthropic_credential(const char *key, const char **name, struct pc_buf *value)
{
    *name = "x-api-key";
    pc_buf_append_str(value, key);
}

/*
 * Minimum cacheable prompt per model family (Anthropic's prompt caching
 * documentation): 4096 for Claude Opus 4.5 and 4.6 and Haiku 4.5, 2048 for
 * Sonnet 4.6 and the Haiku 3 models, 1024 for the rest.
 */
int64_t backend_anthropic_min_tokens(const char *model)
{
    static const struct {
        const char *part;
        int64_t min;
    } rules[] = {
        {"opus-4-5", MIN_TOKENS_4K},   {"opus-4-6", MIN_TOKENS_4K}, {"haiku-4", MIN_TOKENS_4K},
        {"sonnet-4-6", MIN_TOKENS_2K}, {"haiku", MIN_TOKENS_2K},
    };
    for (size_t i = 0; model != NULL && i < PC_ARRAY_LEN(rules); i++)
        if (strstr(model, rules[i].part) != NULL)
            return rules[i].min;
    return MIN_TOKENS;
}

/* ---- the client's body ---------------------------------------------------------- */

/* Spans of the parts of a Messages request the breakpoints go into. */
struct msg_body {
    const struct backend_body *b;
    struct jspan tools, system, messages;
    bool has_tools, has_system, has_messages;
};

static bool has_mark(const struct backend_body *b, const struct jspan *block)
{
    return jedit_member(b->text, block, "cache_control", NULL, NULL);
}

/* The last element of an array, or false if empty / not an array. */
static bool last_element(const struct backend_body *b, const struct jspan *arr, struct jspan *out)
{
    size_t cur = 0;
    struct jspan el;
    bool any = false;
    while (jedit_next(b->text, arr, &cur, NULL, &el)) {
        *out = el;
        any = true;
    }
    return any;
}

/*
 * Client marks. Anthropic counts every block that carries one, those inside a
 * block's own content (a tool_result's) too, and refuses a request where a
 * mark with a longer lifetime (ttl "1h") comes after a shorter one (5 minutes,
 * the proxy's): so the proxy only marks after the last such mark.
 */
struct client_marks {
    int n;         /* blocks with a mark */
    bool long_ttl; /* one of them with a ttl other than 5 minutes */
};

/* Whether the block's mark names a lifetime other than the default 5 minutes. */
static bool long_mark(const struct backend_body *b, const struct jspan *block)
{
    struct jspan cc, ttl;
    if (!jedit_member(b->text, block, "cache_control", NULL, &cc) ||
        !jedit_member(b->text, &cc, "ttl", NULL, &ttl))
        return false;
    struct pc_buf t = PC_BUF_INIT;
    bool five = jedit_string(b->text, &ttl, &t) && strcmp(pc_buf_cstr(&t), "5m") == 0;
    pc_buf_free(&t);
    return !five;
}

/* Client marks in the blocks of an array (tools, system, a message's content) and inside them. */
static void marks_in(const struct backend_body *b, const struct jspan *arr, int depth,
                     struct client_marks *cm)
{
    size_t cur = 0;
    struct jspan el, inner;
    while (jedit_is_array(b->text, arr) && jedit_next(b->text, arr, &cur, NULL, &el)) {
        if (has_mark(b, &el)) {
            cm->n++;
            cm->long_ttl = cm->long_ttl || long_mark(b, &el);
        }
        if (depth < 4 && jedit_member(b->text, &el, "content", NULL, &inner))
            marks_in(b, &inner, depth + 1, cm);
    }
}

/* The content of message i, or false. */
static bool message_content(const struct msg_body *m, uint32_t i, struct jspan *content)
{
    size_t cur = 0;
    struct jspan el;
    for (uint32_t k = 0; jedit_next(m->b->text, &m->messages, &cur, NULL, &el); k++)
        if (k == i)
            return jedit_member(m->b->text, &el, "content", NULL, content);
    return false;
}

/*
 * Every client mark, and the position of the last one with a longer lifetime
 * (tools 0, system 1, message i 2 + i; -1 if none): the proxy's marks must
 * come after it.
 */
static int client_marks(const struct msg_body *m, long *long_pos)
{
    struct client_marks all = {0, false};
    *long_pos = -1;
    if (m->has_tools) {
        marks_in(m->b, &m->tools, 0, &all);
        if (all.long_ttl)
            *long_pos = 0;
    }
    if (m->has_system) {
        struct client_marks cm = {0, false};
        marks_in(m->b, &m->system, 0, &cm);
        all.n += cm.n;
        if (cm.long_ttl)
            *long_pos = 1;
    }
    size_t cur = 0;
    struct jspan el, content;
    for (long i = 0; m->has_messages && jedit_next(m->b->text, &m->messages, &cur, NULL, &el);
         i++) {
        struct client_marks cm = {0, false};
        if (jedit_member(m->b->text, &el, "content", NULL, &content))
            marks_in(m->b, &content, 0, &cm);
        all.n += cm.n;
        if (cm.long_ttl)
            *long_pos = 2 + i;
    }
    return all.n;
}

/* The position of a segment, as client_marks counts them. */
static long segment_pos(const struct chain_seg *s)
{
    return s->kind == CHAIN_SEG_TOOLS ? 0 : s->kind == CHAIN_SEG_SYSTEM ? 1 : 2 + (long)s->item;
}

/* ---- marking a segment's end ------------------------------------------------------ */

/* A block that may carry a mark: an object, not a thinking block, not marked yet. */
static bool markable(const struct backend_body *b, const struct jspan *block)
{
    struct jspan type;
    struct pc_buf t = PC_BUF_INIT;
    if (!jedit_is_object(b->text, block) || has_mark(b, block))
        return false;
    bool thinking = jedit_member(b->text, block, "type", NULL, &type) &&
                    jedit_string(b->text, &type, &t) && strstr(pc_buf_cstr(&t), "thinking");
    pc_buf_free(&t);
    return !thinking;
}

/*
 * Mark the end of a content value (a system prompt or a message's content):
 * a string becomes one text block carrying the mark, an array's last block
 * gets it. False if it cannot be marked (empty text, a thinking block, a
 * mark already there).
 */
static bool mark_content(const struct backend_body *b, const struct jspan *content, struct jedit *e)
{
    struct jspan last;
    if (jedit_is_string(b->text, content)) {
        if (content->end - content->start <= 2)
            return false; /* an empty text block cannot be cached */
        struct pc_buf s = PC_BUF_INIT;
        pc_buf_append_str(&s, "[{\"type\":\"text\",\"text\":");
        pc_buf_append(&s, b->text + content->start, content->end - content->start);
        pc_buf_append_str(&s, ",\"cache_control\":" MARK "}]");
        jedit_replace(e, content, s.data, s.len);
        pc_buf_free(&s);
        return true;
    }
    if (!jedit_is_array(b->text, content) || !last_element(b, content, &last) ||
        !markable(b, &last))
        return false;
    jedit_add_member(e, b->text, &last, "cache_control", MARK);
    return true;
}

static bool mark_segment(const struct msg_body *m, const struct chain_seg *s, struct jedit *e)
{
    struct jspan span, last;
    switch (s->kind) {
    case CHAIN_SEG_TOOLS:
        if (!m->has_tools || !last_element(m->b, &m->tools, &last) || !markable(m->b, &last))
            return false;
        jedit_add_member(e, m->b->text, &last, "cache_control", MARK);
        return true;
    case CHAIN_SEG_SYSTEM:
        return m->has_system && mark_content(m->b, &m->system, e);
    case CHAIN_SEG_MESSAGE:
        return message_content(m, s->item, &span) && mark_content(m->b, &span, e);
    default:
        return false;
    }
}

/* ---- choosing ------------------------------------------------------------------- */

/* Whether segment s's end is worth a breakpoint: seen lately and long enough. */
static bool eligible(const struct backend_hints *h, const struct chain_seg *s, int64_t min_tokens)
{
    if (s->nlinks == 0 || s->first + s->nlinks > h->fresh_links)
        return false;
    size_t bytes = chain_bytes(h->chain, (long)(s->first + s->nlinks) - 1);
    return (double)bytes / (h->cpt > 0 ? h->cpt : 4.0) >= (double)min_tokens;
}

static void anthropic_body_hints(const struct conf *c, const struct backend_in *in,
                                 const struct backend_body *b, struct jedit *e)
{
    (void)c;
    const struct backend_hints *h = in->hints;
    const struct chain *ch = h->chain;
    if (in->endpoint != API_MESSAGES || ch == NULL || ch->nseg < 2 || h->fresh_links == 0)
        return;
    struct msg_body m = {.b = b};
    struct jspan model;
    struct pc_buf name = PC_BUF_INIT;
    if (backend_body_member(b, "cache_control", NULL, NULL))
        return; /* the client asked for automatic caching: its choice */
    m.has_tools = backend_body_member(b, "tools", NULL, &m.tools);
    m.has_system = backend_body_member(b, "system", NULL, &m.system);
    m.has_messages = backend_body_member(b, "messages", NULL, &m.messages);
    long long_pos;
    int budget = PC_MIN(HINT_MARKS, MAX_BREAKPOINTS - client_marks(&m, &long_pos));
    if (backend_body_member(b, "model", NULL, &model))
        jedit_string(b->text, &model, &name);
    int64_t min_tokens = backend_anthropic_min_tokens(pc_buf_cstr(&name));
    pc_buf_free(&name);
    /* Every segment but the last (the new turn); the deepest first, then the shallowest. */
    long deepest = -1;
    for (long s = (long)ch->nseg - 2; s >= 0 && budget > 0; s--) {
        if (segment_pos(&ch->seg[s]) <= long_pos)
            break; /* a 5-minute mark before a longer one: refused */
        if (!eligible(h, &ch->seg[s], min_tokens) || !mark_segment(&m, &ch->seg[s], e))
            continue;
        deepest = s;
        budget--;
        break;
    }
    for (long s = 0; s < deepest && budget > 0; s++) {
        if (segment_pos(&ch->seg[s]) <= long_pos)
            continue;
        if (eligible(h, &ch->seg[s], min_tokens) && mark_segment(&m, &ch->seg[s], e))
            break;
    }
}

const struct backend_ops backend_anthropic = {
    .name = "anthropic",
    .stream_usage = false, /* Messages streams always carry usage; no stream_options */
    .prompt_cache_ms = CACHE_MS,
    .credential = anthropic_credential,
    .body_hints = anthropic_body_hints,
};
