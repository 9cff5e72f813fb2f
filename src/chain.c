/*
 * chain.c - prefix chains (see pc_chain.h). Owns no state: chain_build turns
 * a parsed request into segments, cuts each into links and hashes them.
 */
#include "pc_chain.h"
#include "pc_canon.h"

#include <pthread.h>
#include <string.h>

#include <openssl/evp.h>

/* What a segment is made of while it is being hashed. */
struct seg_text {
    struct pc_buf header; /* role and name of a message; the kind of others */
    struct pc_buf body;   /* the text cut into pieces */
};

/*
 * SHA-256 fetched once and one context per chain: OpenSSL 3 looks the
 * algorithm up on every one-shot digest, which costs more than hashing a
 * short segment.
 */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* The digest of the parts p[0..n), as 64 bits (never 0: it marks an empty slot in the index). */
static uint64_t digest64(EVP_MD_CTX *ctx, const void *const *p, const size_t *len, int n)
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_DigestInit_ex2(ctx, sha256_md, NULL) != 1)
        abort();
    for (int i = 0; i < n; i++)
        if (len[i] > 0)
            EVP_DigestUpdate(ctx, p[i], len[i]);
    EVP_DigestFinal_ex(ctx, d, &dlen);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = (h << 8) | d[i];
    return h != 0 ? h : 1;
}

static uint64_t chain_root(EVP_MD_CTX *ctx, const struct chain_input *in)
{
    static const unsigned char zeros[PC_SHA256_LEN];
    static const char domain[] = "pc-chain-1";
    const char *model = api_model(in->body);
    const char *ep = api_endpoint_name(in->endpoint);
    model = model != NULL ? model : "";
    const void *p[] = {domain, in->tenant != NULL ? in->tenant : zeros, ep, model};
    size_t len[] = {sizeof(domain) - 1, PC_SHA256_LEN, strlen(ep) + 1, strlen(model)};
    return digest64(ctx, p, len, 4);
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

/*
 * Where the piece starting at from ends: CHAIN_CHUNK_BYTES on, moved back to a
 * UTF-8 start. At most 3 bytes back (a character is at most 4 bytes): text
 * that is not UTF-8 (a run of continuation bytes) was cut one byte a piece,
 * 4 KiB of it a full chain of CHAIN_MAX_LINKS links.
 */
static size_t piece_end(const struct pc_buf *body, size_t from)
{
    size_t cut = from + CHAIN_CHUNK_BYTES, limit = cut - 3;
    if (cut >= body->len)
        return body->len;
    while (cut > limit && ((unsigned char)body->data[cut] & 0xc0) == 0x80)
        cut--;
    return ((unsigned char)body->data[cut] & 0xc0) == 0x80 ? from + CHAIN_CHUNK_BYTES : cut;
}

/* Cut one segment into links; false once the chain is full. */
static bool add_segment(EVP_MD_CTX *ctx, struct chain *c, enum chain_seg_kind kind, uint32_t item,
                        const struct seg_text *t, size_t *bytes)
{
    if (must_grow(c->nseg))
        c->seg = pc_realloc(c->seg, PC_MAX(8, 2 * c->nseg) * sizeof(*c->seg));
    struct chain_seg *s = &c->seg[c->nseg++];
    *s = (struct chain_seg){kind, item, (uint32_t)c->n, 0};
    size_t from = 0;
    do {
        if (c->n >= CHAIN_MAX_LINKS) {
            c->truncated = true;
            return false;
        }
        size_t to = piece_end(&t->body, from);
        uint64_t prev = c->n > 0 ? c->h[c->n - 1] : c->root;
        /* The segment's start: its kind and header belong to its first piece. */
        unsigned char k[3] = {(unsigned char)(0x10 + kind), (unsigned char)(t->header.len >> 8),
                              (unsigned char)t->header.len};
        size_t head = from == 0 ? t->header.len : 0;
        /* An empty text has no buffer: NULL + 0 is undefined (clang's UBSan stops there). */
        const char *piece = to > from ? t->body.data + from : NULL;
        const void *p[] = {&prev, k, t->header.data, piece};
        size_t len[] = {sizeof(prev), from == 0 ? sizeof(k) : 0, head, to - from};
        *bytes += head + (to - from);
        push_link(c, digest64(ctx, p, len, 4), (uint32_t)PC_MIN(*bytes, UINT32_MAX));
        s->nlinks++;
        from = to;
    } while (from < t->body.len);
    return true;
}

static void seg_reset(struct seg_text *t)
{
    pc_buf_reset(&t->header);
    pc_buf_reset(&t->body);
}

/* Tools (canonical JSON) and Anthropic's system (text), when present. */
static bool leading_segments(EVP_MD_CTX *ctx, const struct chain_input *in, struct chain *c,
                             struct seg_text *t, size_t *bytes)
{
    const cJSON *tools = api_member(in->body, "tools");
    if (tools != NULL && !cJSON_IsNull(tools)) {
        seg_reset(t);
        canon_json(tools, &t->body);
        if (!add_segment(ctx, c, CHAIN_SEG_TOOLS, 0, t, bytes))
            return false;
    }
    const cJSON *system = in->endpoint == API_MESSAGES ? api_member(in->body, "system") : NULL;
    if (system != NULL && !cJSON_IsNull(system)) {
        seg_reset(t);
        content_text(system, &t->body);
        if (!add_segment(ctx, c, CHAIN_SEG_SYSTEM, 0, t, bytes))
            return false;
    }
    return true;
}

static bool is_system_role(const cJSON *msg)
{
    const char *role = cJSON_GetStringValue(api_member(msg, "role"));
    return role != NULL && (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0);
}

static void conversation(EVP_MD_CTX *ctx, const struct chain_input *in, struct chain *c,
                         struct seg_text *t, size_t *bytes)
{
    if (!leading_segments(ctx, in, c, t, bytes))
        return;
    const cJSON *msgs = api_member(in->body, "messages");
    uint32_t i = 0;
    bool leading = true;
    for (const cJSON *m = cJSON_IsArray(msgs) ? msgs->child : NULL; m != NULL; m = m->next, i++) {
        leading = leading && in->endpoint == API_CHAT && is_system_role(m);
        seg_reset(t);
        message_text(m, t);
        if (!add_segment(ctx, c, leading ? CHAIN_SEG_SYSTEM : CHAIN_SEG_MESSAGE, i, t, bytes))
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
    pthread_once(&sha256_once, sha256_fetch);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (sha256_md == NULL || ctx == NULL)
        abort(); /* libcrypto without SHA-256: nothing would work */
    c->root = chain_root(ctx, in);
    struct seg_text t = {PC_BUF_INIT, PC_BUF_INIT};
    size_t bytes = 0;
    if (in->endpoint == API_COMPLETIONS) {
        content_text(api_member(in->body, "prompt"), &t.body);
        add_segment(ctx, c, CHAIN_SEG_PROMPT, 0, &t, &bytes);
    } else {
        conversation(ctx, in, c, &t, &bytes);
    }
    EVP_MD_CTX_free(ctx);
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
