/*
 * entry.c - encode/decode cached answers and build their Redis keys (see
 * pc_entry.h). Owns nothing: decoded entries point into the caller's buffer.
 *
 *   0   "PCE" 0x02          magic + format (0x01: written before cache writes were kept)
 *   4   u8 kind, u8 endpoint, u16 status
 *   8   i64 created_ms, u32 latency_ms
 *   20  u8 usage present, i64 prompt, i64 completion, i64 cached (cache read)
 *   45  i64 cache_write                 (format 2 only; 0 for format 1)
 *   ..  u16 content-type length, bytes
 *   ..  u32 body length, bytes          (nothing may follow)
 *
 * Format 1 entries still decode (their cache writes, if any, count as plain
 * input), so an upgrade keeps every cached answer.
 */
#include "pc_entry.h"
#include "pc_migrate.h"

#include <stdio.h>
#include <string.h>

static const char entry_magic[4] = {'P', 'C', 'E', 2};
#define ENTRY_FORMAT_OLD 1

static void put_u(struct pc_buf *out, uint64_t v, int bytes)
{
    char b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (char)(v >> (8 * i));
    pc_buf_append(out, b, (size_t)bytes);
}

void entry_encode(const struct entry *e, struct pc_buf *out)
{
    size_t ctlen = PC_MIN(e->content_type_len, 0xffffu);
    pc_buf_reserve(out, 64 + ctlen + e->body_len);
    pc_buf_append(out, entry_magic, sizeof(entry_magic));
    put_u(out, (uint64_t)e->kind, 1);
    put_u(out, (uint64_t)e->endpoint, 1);
    put_u(out, (uint64_t)e->status, 2);
    put_u(out, (uint64_t)e->created_ms, 8);
    put_u(out, e->latency_ms, 4);
    put_u(out, e->usage.present ? 1 : 0, 1);
    put_u(out, (uint64_t)e->usage.prompt, 8);
    put_u(out, (uint64_t)e->usage.completion, 8);
    put_u(out, (uint64_t)e->usage.cached, 8);
    put_u(out, (uint64_t)e->usage.cache_write, 8);
    put_u(out, ctlen, 2);
    pc_buf_append(out, e->content_type, ctlen);
    put_u(out, e->body_len, 4);
    pc_buf_append(out, e->body, e->body_len);
}

/* A bounds-checked reader over the value. */
struct reader {
    const unsigned char *p;
    size_t left;
    bool bad;
};

static uint64_t get_u(struct reader *r, int bytes)
{
    if (r->bad || r->left < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    r->left -= (size_t)bytes;
    return v;
}

static const char *get_bytes(struct reader *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += n;
    r->left -= n;
    return s;
}

int entry_decode(const char *buf, size_t len, struct entry *e)
{
    if (buf == NULL || len < sizeof(entry_magic) || memcmp(buf, entry_magic, 3) != 0 ||
        (buf[3] != entry_magic[3] && buf[3] != ENTRY_FORMAT_OLD))
        return -1;
    bool old = buf[3] == ENTRY_FORMAT_OLD;
    struct reader r = {(const unsigned char *)buf + 4, len - 4, false};
    memset(e, 0, sizeof(*e));
    uint64_t kind = get_u(&r, 1), ep = get_u(&r, 1);
    e->status = (int)get_u(&r, 2);
    e->created_ms = (int64_t)get_u(&r, 8);
    e->latency_ms = (uint32_t)get_u(&r, 4);
    e->usage.present = get_u(&r, 1) != 0;
    e->usage.prompt = (int64_t)get_u(&r, 8);
    e->usage.completion = (int64_t)get_u(&r, 8);
    e->usage.cached = (int64_t)get_u(&r, 8);
    e->usage.cache_write = old ? 0 : (int64_t)get_u(&r, 8);
    e->content_type_len = (size_t)get_u(&r, 2);
    e->content_type = get_bytes(&r, e->content_type_len);
    e->body_len = (size_t)get_u(&r, 4);
    e->body = get_bytes(&r, e->body_len);
    /* created_ms is bounded so that age arithmetic can never overflow. */
    if (r.bad || r.left != 0 || kind > ENTRY_SSE || ep == API_NONE || ep >= API__COUNT ||
        e->status < 200 || e->status > 299 || e->created_ms < 0 ||
        e->created_ms > (INT64_C(1) << 53) || e->usage.prompt < 0 || e->usage.completion < 0 ||
        e->usage.cached < 0 || e->usage.cache_write < 0)
        return -1;
    e->kind = (enum entry_kind)kind;
    e->endpoint = (enum api_endpoint)ep;
    return 0;
}

int64_t entry_age_ms(const struct entry *e)
{
    int64_t now = pc_wall_ms();
    return now > e->created_ms ? now - e->created_ms : 0;
}

size_t entry_key(const char *tenant_id, const unsigned char key[PC_SHA256_LEN],
                 char out[ENTRY_KEY_MAX])
{
    char hex[2 * PC_SHA256_LEN + 1];
    pc_hex(key, PC_SHA256_LEN, hex);
    int n =
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "e:{%.*s:%s}", TENANT_ID_LEN, tenant_id, hex);
    return n > 0 ? (size_t)n : 0;
}

void entry_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX])
{
    if (tenant_id == NULL)
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "e:*");
    else
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "e:{%.*s:*", TENANT_ID_LEN, tenant_id);
}
