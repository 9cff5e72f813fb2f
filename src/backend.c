/*
 * backend.c - building the upstream request (see pc_backend.h). Owns the
 * rules every upstream type shares: which client headers go upstream, and
 * how the built request holds its strings (one buffer, pointers fixed up
 * once it stops growing). Per-type behaviour is in src/backend/.
 */
#include "pc_backend.h"
#include "pc_conf.h"
#include "pc_route.h"

#include <string.h>

const struct backend_ops *backend_for(int upstream_type)
{
    switch (upstream_type) {
    case UPSTREAM_ANTHROPIC:
        return &backend_anthropic;
    case UPSTREAM_VLLM:
        return &backend_vllm;
    case UPSTREAM_SGLANG:
        return &backend_sglang;
    default:
        return &backend_openai;
    }
}

bool backend_is_credential_header(const char *name)
{
    return pc_strcaseeq(name, "authorization") || pc_strcaseeq(name, "x-api-key") ||
           pc_strcaseeq(name, "api-key");
}

/* Request headers that are not forwarded upstream. */
static bool header_dropped(const char *name, const char *conn_tokens, bool replace_creds)
{
    /* Set by curl from the URL and body, or negotiated per hop, or ours. */
    static const char *const dropped[] = {
        "host", "content-length", "expect", "accept-encoding", "cache-control", "pragma",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(dropped); i++)
        if (pc_strcaseeq(name, dropped[i]))
            return true;
    if (pc_hop_by_hop(name) || pc_strncaseeq(name, "x-cache-", 8))
        return true;
    if (replace_creds && backend_is_credential_header(name))
        return true;
    return pc_token_list_has(conn_tokens, name);
}

/*
 * Headers are appended to one buffer as "name\0value\0" and recorded by
 * offset (the buffer may move while it grows); fix_pointers turns the
 * offsets into pointers at the end.
 */
static void add_header(struct backend_req *r, const char *name, const char *value)
{
    if (r->nhdrs >= BACKEND_MAX_HEADERS)
        return;
    size_t off = r->strings.len;
    pc_buf_append(&r->strings, name, strlen(name) + 1);
    size_t voff = r->strings.len;
    pc_buf_append(&r->strings, value, strlen(value) + 1);
    r->hdrs[r->nhdrs].name = (const char *)(uintptr_t)off;
    r->hdrs[r->nhdrs].value = (const char *)(uintptr_t)voff;
    r->nhdrs++;
}

static void fix_pointers(struct backend_req *r)
{
    for (size_t i = 0; i < r->nhdrs; i++) {
        r->hdrs[i].name = r->strings.data + (uintptr_t)r->hdrs[i].name;
        r->hdrs[i].value = r->strings.data + (uintptr_t)r->hdrs[i].value;
    }
}

void backend_prepare(const struct backend_ops *ops, const struct conf *c,
                     const struct backend_in *in, struct backend_req *out)
{
    memset(out, 0, sizeof(*out));
    out->method = pc_strdup(in->method);
    out->target = pc_strdup(in->target);
    bool replace = c->upstream_key != NULL && c->upstream_key[0] != '\0';
    const char *conn = NULL;
    for (size_t i = 0; i < in->nheaders; i++)
        if (pc_strcaseeq(in->headers[i].name, "connection"))
            conn = in->headers[i].value;
    bool have_ctype = false;
    for (size_t i = 0; i < in->nheaders && out->nhdrs < BACKEND_MAX_HEADERS - 2; i++) {
        const struct xfer_header *h = &in->headers[i];
        if (header_dropped(h->name, conn, replace))
            continue;
        if (pc_strcaseeq(h->name, "content-type"))
            have_ctype = true;
        add_header(out, h->name, h->value);
    }
    if (replace) {
        const char *name = NULL;
        struct pc_buf value = PC_BUF_INIT;
        ops->credential(c->upstream_key, &name, &value);
        add_header(out, name, pc_buf_cstr(&value));
        memset(value.data, 0, value.cap); /* a secret: do not leave copies around */
        pc_buf_free(&value);
    }
    if (in->endpoint != API_NONE && !have_ctype)
        add_header(out, "Content-Type", "application/json");
    fix_pointers(out);
    if (in->body_len > 0)
        pc_buf_append(&out->body, in->body, in->body_len);
}

void backend_req_free(struct backend_req *r)
{
    free(r->method);
    free(r->target);
    if (r->strings.data != NULL)
        memset(r->strings.data, 0, r->strings.cap); /* may hold credentials */
    pc_buf_free(&r->strings);
    pc_buf_free(&r->body);
    memset(r, 0, sizeof(*r));
}

void backend_url(const struct backend_req *r, const struct route_replica *rep, struct pc_buf *url)
{
    pc_buf_reset(url);
    pc_buf_append_str(url, rep->base_url);
    pc_buf_append_str(url, r->target);
}
