/*
 * chain.c - prefix chains (see pc_chain.h). Owns no state: chain_build turns
 * a parsed request into segments, cuts each into links and hashes them.
 */
#include "pc_chain.h"
#include "pc_canon.h"

#include <string.h>

/* What a segment is made of while it is being hashed. */
struct seg_text {
    struct pc_buf header; /* role and name of a message; the kind of others */
    struct pc_buf body;   /* the text cut into pieces */
};

static uint64_t digest64(const struct pc_buf *material)
{
    unsigned char d[PC_SHA256_LEN];
    pc_sha256(material->data, material->len, d);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = (h << 8) | d[i];
    return h != 0 ? h : 1; /* 0 marks an empty slot in the index */
}

static uint64_t chain_root(const struct chain_input *in)
{
    static const unsigned char zeros[PC_SHA256_LEN];
    struct pc_buf b = PC_BUF_INIT;
    const char *model = api_model(in->body);
    const char *ep = api_endpoint_name(in->endpoint);
    pc_buf_append_str(&b, "pc-chain-1");
    pc_buf_append(&b, in->tenant != NULL ? in->tenant : zeros, PC_SHA256_LEN);
    pc_buf_append(&b, ep, strlen(ep) + 1);
    pc_buf_append_str(&b, model != NULL ? model : "");
    uint64_t h = digest64(&b);
    pc_buf_free(&b);
    return h;
}

/* ---- segment text ------------------------------------------------------------ */

/* Content: a string as is; parts: text parts' text, other parts as canonical JSON. */
static void content_text(const cJSON *content, struct pc_buf *out)
{
    const char *s = cJSON_GetStringValue(content);
    if (s != NULL) {
        pc_buf_append_str(out, s);
        return;
    }
    if (!cJSON_IsArray(content)) {
        if (content != NULL)
            canon_json(content, out);
        return;
    }
    for (const cJSON *p = content->child; p != NULL; p = p->next) {
        if (p != content->child)
            pc_buf_append_char(out, '\x1e');
        const char *type = cJSON_GetStringValue(api_member(p, "type"));
        const char *text = cJSON_GetStringValue(api_member(p, "text"));
        if (type != NULL && strcmp(type, "text") == 0 && text != NULL)
            pc_buf_append_str(out, text);
        else
            canon_json(p, out);
    }
}

/* The members of a message other than role, name and content, as canonical JSON. */
static void message_rest(const cJSON *msg, struct pc_buf *out)
{
    cJSON *rest = cJSON_CreateObject();
    bool any = false;
    for (const cJSON *m = msg->child; m != NULL; m = m->next) {
        if (m->string == NULL || strcmp(m->string, "role") == 0 || strcmp(m->string, "name") == 0 ||
            strcmp(m->string, "content") == 0)
            continue;
        cJSON_AddItemReferenceToObject(rest, m->string, (cJSON *)m);
        any = true;
    }
    if (any) {
        pc_buf_append_char(out, '\x1d');
        canon_json(rest, out);
    }
    cJSON_Delete(rest);
}

static void message_text(const cJSON *msg, struct seg_text *t)
{
    const char *role = cJSON_GetStringValue(api_member(msg, "role"));
    const char *name = cJSON_GetStringValue(api_member(msg, "name"));
    pc_buf_append_str(&t->header, role != NULL ? role : "?");
    if (name != NULL) {
        pc_buf_append_char(&t->header, '\x1f');
        pc_buf_append_str(&t->header, name);
    }
    if (!cJSON_IsObject(msg)) {
        canon_json(msg, &t->body);
        return;
    }
    content_text(api_member(msg, "content"), &t->body);
    message_rest(msg, &t->body);
}

/* ---- links ------------------------------------------------------------------- */

/* Arrays grow by doubling from 8: whenever a count reaches 8, 16, 32, ... */
static bool must_grow(size_t n)
{
    return n == 0 || (n >= 8 && (n & (n - 1)) == 0);
}

static void push_link(struct chain *c, uint64_t h, uint32_t end)
{
    if (must_grow(c->n)) {
        size_t cap = PC_MAX(8, 2 * c->n);
        c->h = pc_realloc(c->h, cap * sizeof(*c->h));
        c->end = pc_realloc(c->end, cap * sizeof(*c->end));
    }
    c->h[c->n] = h;
    c->end[c->n] = end;
    c->n++;
}

/* Where the piece starting at from ends: CHAIN_CHUNK_BYTES on, moved back to a UTF-8 start. */
static size_t piece_end(const struct pc_buf *body, size_t from)
{
    size_t cut = from + CHAIN_CHUNK_BYTES;
    if (cut >= body->len)
        return body->len;
    while (cut > from + 1 && ((unsigned char)body->data[cut] & 0xc0) == 0x80)
        cut--;
    return cut;
}

/* Cut one segment into links; false once the chain is full. */
static bool add_segment(struct chain *c, enum chain_seg_kind kind, uint32_t item,
                        const struct seg_text *t, size_t *bytes)
{
    if (must_grow(c->nseg))
        c->seg = pc_realloc(c->seg, PC_MAX(8, 2 * c->nseg) * sizeof(*c->seg));
    struct chain_seg *s = &c->seg[c->nseg++];
    *s = (struct chain_seg){kind, item, (uint32_t)c->n, 0};
    struct pc_buf m = PC_BUF_INIT;
    size_t from = 0;
    do {
        if (c->n >= CHAIN_MAX_LINKS) {
            c->truncated = true;
            pc_buf_free(&m);
            return false;
        }
        size_t to = piece_end(&t->body, from);
        uint64_t prev = c->n > 0 ? c->h[c->n - 1] : c->root;
        pc_buf_reset(&m);
        pc_buf_append(&m, &prev, sizeof(prev));
        if (from == 0) { /* the segment's start: its kind and header belong to it */
            unsigned char k[3] = {(unsigned char)(0x10 + kind), (unsigned char)(t->header.len >> 8),
                                  (unsigned char)t->header.len};
            pc_buf_append(&m, k, sizeof(k));
            pc_buf_append(&m, t->header.data, t->header.len);
        }
        pc_buf_append(&m, t->body.data + from, to - from);
        *bytes += (from == 0 ? t->header.len : 0) + (to - from);
        push_link(c, digest64(&m), (uint32_t)PC_MIN(*bytes, UINT32_MAX));
        s->nlinks++;
        from = to;
    } while (from < t->body.len);
    pc_buf_free(&m);
    return true;
}

static void seg_reset(struct seg_text *t)
{
    pc_buf_reset(&t->header);
    pc_buf_reset(&t->body);
}

/* Tools (canonical JSON) and Anthropic's system (text), when present. */
static bool leading_segments(const struct chain_input *in, struct chain *c, struct seg_text *t,
                             size_t *bytes)
{
    const cJSON *tools = api_member(in->body, "tools");
    if (tools != NULL && !cJSON_IsNull(tools)) {
        seg_reset(t);
        canon_json(tools, &t->body);
        if (!add_segment(c, CHAIN_SEG_TOOLS, 0, t, bytes))
            return false;
    }
    const cJSON *system = in->endpoint == API_MESSAGES ? api_member(in->body, "system") : NULL;
    if (system != NULL && !cJSON_IsNull(system)) {
        seg_reset(t);
        content_text(system, &t->body);
        if (!add_segment(c, CHAIN_SEG_SYSTEM, 0, t, bytes))
            return false;
    }
    return true;
}

static bool is_system_role(const cJSON *msg)
{
    const char *role = cJSON_GetStringValue(api_member(msg, "role"));
    return role != NULL && (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0);
}

static void conversation(const struct chain_input *in, struct chain *c, struct seg_text *t,
                         size_t *bytes)
{
    if (!leading_segments(in, c, t, bytes))
        return;
    const cJSON *msgs = api_member(in->body, "messages");
    uint32_t i = 0;
    bool leading = true;
    for (const cJSON *m = cJSON_IsArray(msgs) ? msgs->child : NULL; m != NULL; m = m->next, i++) {
        leading = leading && in->endpoint == API_CHAT && is_system_role(m);
        seg_reset(t);
        message_text(m, t);
        if (!add_segment(c, leading ? CHAIN_SEG_SYSTEM : CHAIN_SEG_MESSAGE, i, t, bytes))
            return;
    }
}

void chain_build(const struct chain_input *in, struct chain *c)
{
    memset(c, 0, sizeof(*c));
    if (in->endpoint != API_CHAT && in->endpoint != API_MESSAGES && in->endpoint != API_COMPLETIONS)
        return;
    if (!cJSON_IsObject(in->body))
        return;
    c->root = chain_root(in);
    struct seg_text t = {PC_BUF_INIT, PC_BUF_INIT};
    size_t bytes = 0;
    if (in->endpoint == API_COMPLETIONS) {
        content_text(api_member(in->body, "prompt"), &t.body);
        add_segment(c, CHAIN_SEG_PROMPT, 0, &t, &bytes);
    } else {
        conversation(in, c, &t, &bytes);
    }
    for (size_t s = 0;
         s < c->nseg && c->seg[s].kind != CHAIN_SEG_MESSAGE && c->seg[s].kind != CHAIN_SEG_PROMPT;
         s++)
        c->stable = c->seg[s].first + c->seg[s].nlinks;
    pc_buf_free(&t.header);
    pc_buf_free(&t.body);
}

void chain_free(struct chain *c)
{
    free(c->h);
    free(c->end);
    free(c->seg);
    memset(c, 0, sizeof(*c));
}

void chain_copy(struct chain *dst, const struct chain *src)
{
    *dst = *src;
    dst->h = pc_malloc((src->n ? src->n : 1) * sizeof(*dst->h));
    dst->end = pc_malloc((src->n ? src->n : 1) * sizeof(*dst->end));
    dst->seg = pc_malloc((src->nseg ? src->nseg : 1) * sizeof(*dst->seg));
    if (src->n > 0) {
        memcpy(dst->h, src->h, src->n * sizeof(*dst->h));
        memcpy(dst->end, src->end, src->n * sizeof(*dst->end));
    }
    if (src->nseg > 0)
        memcpy(dst->seg, src->seg, src->nseg * sizeof(*dst->seg));
}

size_t chain_bytes(const struct chain *c, long i)
{
    if (i < 0 || c->n == 0)
        return 0;
    return c->end[PC_MIN((size_t)i, c->n - 1)];
}

uint64_t chain_prefix_key(const struct chain *c)
{
    if (c->n == 0)
        return 0;
    return c->h[c->stable < c->n ? c->stable : c->n - 1];
}
