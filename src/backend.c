/*
 * backend.c - building the upstream request (see pc_backend.h). Owns the
 * rules every upstream type shares: which client headers go upstream, how
 * the built request holds its strings (one buffer, pointers fixed up once it
 * stops growing), the hints every type shares (stream_options, the extra
 * routing header) and the helpers the types' hints use. Per-type behaviour
 * is in src/backend/, one file per line of src/backend/backends.h.
 */
#include "pc_backend.h"
#include "pc_conf.h"
#include "pc_route.h"
#include "backend/backends.h"

#include <stdio.h>
#include <string.h>

#define BACKEND_EXTERN(id, name) extern const struct backend_ops backend_##id;
#define BACKEND_ENTRY(id, name)  &backend_##id,
BACKEND_LIST(BACKEND_EXTERN)

/* In the order of BACKEND_LIST: the position is the value conf holds. */
static const struct backend_ops *const backends[] = {BACKEND_LIST(BACKEND_ENTRY)};

const struct backend_ops *backend_for(int t)
{
    if (t < 0 || (size_t)t >= PC_ARRAY_LEN(backends))
        return backends[0];
    return backends[t];
}

bool backend_is_credential_header(const char *name)
{
    return pc_strcaseeq(name, "authorization") || pc_strcaseeq(name, "x-api-key") ||
           pc_strcaseeq(name, "api-key");
}

/* Request headers that are not forwarded upstream (name as sent). */
static bool header_dropped_as(const char *name, const char *conn_tokens, bool replace_creds)
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
 * Also dropped: a name that is one of those, or a credential, with '_' for
 * '-'. CGI and WSGI gateways (and servers that read headers as they do) take
 * both spellings for one header: "Transfer_Encoding: chunked" or
 * "Content_Length" sent on beside curl's own Content-Length could frame the
 * body differently on the upstream's side of a shared connection (request
 * smuggling), and "X_Api_Key" would be a credential there that the tenant
 * (made of the credential headers) never saw, or slip past --upstream-key.
 */
static bool header_dropped(const char *name, const char *conn_tokens, bool replace_creds)
{
    char alt[64];
    size_t n = strlen(name);
    if (strchr(name, '_') != NULL && n < sizeof(alt)) {
        for (size_t i = 0; i <= n; i++)
            alt[i] = name[i] == '_' ? '-' : name[i];
        if (header_dropped_as(alt, conn_tokens, true))
            return true;
    }
    return header_dropped_as(name, conn_tokens, replace_creds);
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

void backend_hint_header(struct backend_req *r, const struct backend_in *in, const char *name,
                         const char *value)
{
    for (size_t i = 0; i < in->nheaders; i++)
        if (pc_strcaseeq(in->headers[i].name, name))
            return; /* the client's own goes upstream as it is */
    /* Added already (the names are offsets until fix_pointers): prefix-routing-header naming
     * the type's own header (x-user-id, x-smg-routing-key) sent it twice, "pc-1, pc-1". */
    for (size_t i = 0; i < r->nhdrs; i++)
        if (pc_strcaseeq(r->strings.data + (uintptr_t)r->hdrs[i].name, name))
            return;
    add_header(r, name, value);
}

bool backend_routing_key(const struct backend_hints *h, char out[20])
{
    if (h == NULL || h->routing_key == 0)
        return false;
    snprintf(out, 20, "pc-%016llx", (unsigned long long)h->routing_key);
    return true;
}

bool backend_cache_salt(const struct backend_hints *h, char out[33])
{
    if (h == NULL || h->tenant == NULL)
        return false;
    unsigned char in[PC_SHA256_LEN + 10], d[PC_SHA256_LEN];
    memcpy(in, "pc-salt-1\n", 10);
    memcpy(in + 10, h->tenant, PC_SHA256_LEN);
    pc_sha256(in, sizeof(in), d);
    pc_hex(d, 16, out);
    return true;
}

bool backend_body_member(const struct backend_body *b, const char *key, struct jspan *name,
                         struct jspan *val)
{
    for (size_t i = b->n; i-- > 0;) {
        if (!jedit_name_is(b->text, &b->names[i], key))
            continue;
        if (name != NULL)
            *name = b->names[i];
        if (val != NULL)
            *val = b->vals[i];
        return true;
    }
    return false;
}

void backend_add_field(const struct backend_body *b, struct jedit *e, const char *key,
                       const char *value_json)
{
    if (!backend_body_member(b, key, NULL, NULL))
        jedit_add_member_counted(e, &b->root, b->n, key, value_json);
}

/* stream_options.include_usage: true, whatever the client's stream_options held. */
static void include_usage(const struct backend_body *b, struct jedit *e)
{
    static const char opts[] = "{\"include_usage\":true}";
    struct jspan so, iu, name;
    if (!backend_body_member(b, "stream_options", NULL, &so)) {
        jedit_add_member_counted(e, &b->root, b->n, "stream_options", opts);
    } else if (jedit_is_null(b->text, &so)) {
        jedit_replace(e, &so, opts, sizeof(opts) - 1);
    } else if (!jedit_is_object(b->text, &so)) {
        return; /* not ours to repair: the upstream will say what is wrong */
    } else if (jedit_member(b->text, &so, "include_usage", &name, &iu)) {
        jedit_replace(e, &iu, "true", 4);
    } else {
        jedit_add_member(e, b->text, &so, "include_usage", "true");
    }
}

/* The body upstream: the client's, with the hints spliced in. */
static void prepare_body(const struct backend_ops *ops, const struct conf *c,
                         const struct backend_in *in, struct backend_req *out)
{
    const struct backend_hints *h = in->hints;
    bool edit = h != NULL && in->endpoint != API_NONE && (h->include_usage || h->enabled);
    struct backend_body *b = edit ? pc_malloc(sizeof(*b)) : NULL;
    /* A body whose top level cannot be followed, or has too many members, goes as it came. */
    if (!edit || !jedit_value(in->body, in->body_len, 0, &b->root) ||
        !jedit_members(in->body, &b->root, b->names, b->vals, BACKEND_BODY_MEMBERS, &b->n)) {
        pc_buf_append(&out->body, in->body, in->body_len);
        free(b);
        return;
    }
    b->text = in->body;
    b->len = in->body_len;
    struct jedit e = JEDIT_INIT;
    if (h->include_usage)
        include_usage(b, &e);
    if (h->enabled && ops->body_hints != NULL)
        ops->body_hints(c, in, b, &e);
    jedit_apply(&e, in->body, in->body_len, &out->body);
    jedit_free(&e);
    free(b);
}

/* Header hints: the type's, and prefix-routing-header for any router in between. */
static void prepare_hint_headers(const struct backend_ops *ops, const struct conf *c,
                                 const struct backend_in *in, struct backend_req *out)
{
    char key[20];
    if (in->hints == NULL || !in->hints->enabled || in->endpoint == API_NONE)
        return;
    if (ops->header_hints != NULL)
        ops->header_hints(c, in, out);
    if (c->prefix_routing_header[0] != '\0' && backend_routing_key(in->hints, key))
        backend_hint_header(out, in, c->prefix_routing_header, key);
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
    for (size_t i = 0; i < in->nheaders && out->nhdrs < BACKEND_MAX_HEADERS - 6; i++) {
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
    prepare_hint_headers(ops, c, in, out);
    fix_pointers(out);
    if (in->body_len > 0)
        prepare_body(ops, c, in, out);
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
