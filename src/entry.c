/*
 * entry.c - encode/decode cached answers and build their Redis keys (see
 * pc_entry.h). Owns nothing: decoded entries point into the caller's buffer.
 *
 *   0   "PCE" F             magic + format F: 1 or 2
 *   4   u8 kind, u8 endpoint, u16 status
 *   8   i64 created_ms, u32 latency_ms
 *   20  u8 usage present, i64 prompt, i64 completion, i64 cached
 *   45  u16 content-type length, bytes
 *   ..  u32 body length, bytes          (format 1: nothing may follow)
 *   ..  format 2: u8 section count (at least 1), then the sections, each
 *           u8 tag, u32 length, bytes   (nothing may follow)
 *
 * Sections (enum entry_section) make the format append-only: a new field is
 * a new tag, written in increasing tag order, each tag at most once. A
 * decoder skips tags it does not know, so an entry written by a newer
 * version still serves an older one (minus the new field), and an old entry
 * (format 1, or without the tag) decodes with the field absent. A known
 * section must parse exactly to its length, or the entry is rejected. The
 * encoder writes format 1 when it has no section to write, byte for byte
 * what versions before sections wrote. The count makes a value cut at a
 * section boundary as invalid as one cut anywhere else.
 *
 *   tag 1 ENTRY_SEC_HEADERS   u8 count, then per header:
 *                             u8 name length, name, u16 value length, value
 *   tag 2 ENTRY_SEC_USAGE     i64 cache_write (prompt tokens the upstream wrote to
 *                             its prompt cache, priced at a premium); written when
 *                             not 0. Without it (older entries) cache writes count
 *                             as plain input.
 *   tag 3 ENTRY_SEC_META      u8 namespace length, namespace, u8 model length, model:
 *                             the request's X-Cache-Namespace and "model", which
 *                             targeted deletes filter on (pc_purge.h reads this
 *                             layout in Lua too); written when either is set.
 *                             Without it (older entries) both are unknown: a delete
 *                             by namespace or model leaves such an entry alone.
 *   tag 4 ENTRY_SEC_USAGE_1H  i64 cache_write_1h (of cache_write, the tokens written
 *                             for an hour, at a higher premium); written when not 0.
 *                             Without it (older entries, older readers) every write
 *                             is priced as a 5-minute one.
 *   tag 5 ENTRY_SEC_AUDIO     i64 audio_prompt, i64 audio_completion (of the prompt and
 *                             completion tokens, audio, at their own prices); written
 *                             when either is not 0. Without it audio counts as text.
 *   tag 6 ENTRY_SEC_PARTITION 32 bytes: the semantic partition of the request that
 *                             stored the entry (written when it could be found by
 *                             meaning). A semantic hit serves only an entry whose
 *                             partition is the request's: the vector record that
 *                             names the entry can be forged, the entry's own
 *                             identity is what counts. Without it (older entries,
 *                             requests never matched by meaning) the entry is not
 *                             served by meaning, only exactly. Older readers skip it.
 */
#include "pc_entry.h"
#include "pc_migrate.h"

#include <stdio.h>
#include <string.h>

static const char entry_magic[3] = {'P', 'C', 'E'};
#define ENTRY_FORMAT_PLAIN    1 /* no sections */
#define ENTRY_FORMAT_SECTIONS 2

/* RFC 9110 tchar. */
static bool token_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A header value: no control character but tab (so no line break a reply could be split at). */
static bool value_chars_ok(const char *value, size_t value_len)
{
    for (size_t i = 0; i < value_len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

bool entry_header_valid(const char *name, size_t name_len, const char *value, size_t value_len)
{
    if (name == NULL || value == NULL || name_len == 0 || name_len > ENTRY_HEADER_NAME_MAX ||
        value_len > ENTRY_HEADER_VALUE_MAX)
        return false;
    for (size_t i = 0; i < name_len; i++)
        if (!token_char((unsigned char)name[i]))
            return false;
    return value_chars_ok(value, value_len);
}

static void put_u(struct pc_buf *out, uint64_t v, int bytes)
{
    char b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (char)(v >> (8 * i));
    pc_buf_append(out, b, (size_t)bytes);
}

static size_t headers_storable(const struct entry *e)
{
    size_t n = 0;
    for (size_t i = 0; i < PC_MIN(e->nheaders, ENTRY_MAX_HEADERS); i++) {
        const struct entry_header *h = &e->headers[i];
        n += entry_header_valid(h->name, h->name_len, h->value, h->value_len);
    }
    return n;
}

/* Section ENTRY_SEC_HEADERS (n > 0 of e's headers are storable). */
static void put_headers(struct pc_buf *out, const struct entry *e, size_t n)
{
    size_t len_at = out->len + 1;
    put_u(out, ENTRY_SEC_HEADERS, 1);
    put_u(out, 0, 4); /* length, patched below */
    put_u(out, n, 1);
    for (size_t i = 0; i < PC_MIN(e->nheaders, ENTRY_MAX_HEADERS); i++) {
        const struct entry_header *h = &e->headers[i];
        if (!entry_header_valid(h->name, h->name_len, h->value, h->value_len))
            continue;
        put_u(out, h->name_len, 1);
        pc_buf_append(out, h->name, h->name_len);
        put_u(out, h->value_len, 2);
        pc_buf_append(out, h->value, h->value_len);
    }
    uint64_t len = out->len - len_at - 4;
    for (int i = 0; i < 4; i++)
        out->data[len_at + (size_t)i] = (char)(len >> (8 * i));
}

/* Section ENTRY_SEC_USAGE: the usage fields the fixed part has no room for. */
static void put_usage(struct pc_buf *out, const struct entry *e)
{
    put_u(out, ENTRY_SEC_USAGE, 1);
    put_u(out, 8, 4);
    put_u(out, (uint64_t)e->usage.cache_write, 8);
}

/* Section ENTRY_SEC_USAGE_1H: the cache writes kept for an hour. */
static void put_usage_1h(struct pc_buf *out, const struct entry *e)
{
    put_u(out, ENTRY_SEC_USAGE_1H, 1);
    put_u(out, 8, 4);
    put_u(out, (uint64_t)e->usage.cache_write_1h, 8);
}

/* Section ENTRY_SEC_AUDIO: the audio tokens in and out. */
static void put_audio(struct pc_buf *out, const struct entry *e)
{
    put_u(out, ENTRY_SEC_AUDIO, 1);
    put_u(out, 16, 4);
    put_u(out, (uint64_t)e->usage.audio_prompt, 8);
    put_u(out, (uint64_t)e->usage.audio_completion, 8);
}

/* Section ENTRY_SEC_PARTITION: the partition's bytes. */
static void put_partition(struct pc_buf *out, const struct entry *e)
{
    put_u(out, ENTRY_SEC_PARTITION, 1);
    put_u(out, PC_SHA256_LEN, 4);
    pc_buf_append(out, e->partition, PC_SHA256_LEN);
}

/* The length of a meta name as stored: 0 when absent or too long to keep. */
static size_t meta_len(const char *s, size_t len)
{
    return s != NULL && len <= ENTRY_META_MAX ? len : 0;
}

/* Section ENTRY_SEC_META: the namespace and the model, each with a u8 length. */
static void put_meta(struct pc_buf *out, const struct entry *e, size_t nl, size_t ml)
{
    put_u(out, ENTRY_SEC_META, 1);
    put_u(out, 2 + nl + ml, 4);
    put_u(out, nl, 1);
    pc_buf_append(out, e->ns, nl);
    put_u(out, ml, 1);
    pc_buf_append(out, e->model, ml);
}

void entry_encode(const struct entry *e, struct pc_buf *out)
{
    size_t ctlen = PC_MIN(e->content_type_len, 0xffffu);
    size_t nh = headers_storable(e);
    bool usage = e->usage.present && e->usage.cache_write > 0;
    size_t nl = meta_len(e->ns, e->ns_len), ml = meta_len(e->model, e->model_len);
    bool meta = nl > 0 || ml > 0;
    bool usage_1h = usage && e->usage.cache_write_1h > 0;
    bool audio = e->usage.present && (e->usage.audio_prompt > 0 || e->usage.audio_completion > 0);
    bool partition = e->partition != NULL;
    int nsec = (nh > 0) + usage + meta + usage_1h + audio + partition;
    pc_buf_reserve(out, 64 + ctlen + e->body_len);
    pc_buf_append(out, entry_magic, sizeof(entry_magic));
    put_u(out, nsec > 0 ? ENTRY_FORMAT_SECTIONS : ENTRY_FORMAT_PLAIN, 1);
    put_u(out, (uint64_t)e->kind, 1);
    put_u(out, (uint64_t)e->endpoint, 1);
    put_u(out, (uint64_t)e->status, 2);
    put_u(out, (uint64_t)e->created_ms, 8);
    put_u(out, e->latency_ms, 4);
    put_u(out, e->usage.present ? 1 : 0, 1);
    put_u(out, (uint64_t)e->usage.prompt, 8);
    put_u(out, (uint64_t)e->usage.completion, 8);
    put_u(out, (uint64_t)e->usage.cached, 8);
    put_u(out, ctlen, 2);
    pc_buf_append(out, e->content_type, ctlen);
    put_u(out, e->body_len, 4);
    pc_buf_append(out, e->body, e->body_len);
    if (nsec == 0)
        return;
    put_u(out, (uint64_t)nsec, 1);
    if (nh > 0)
        put_headers(out, e, nh);
    if (usage)
        put_usage(out, e);
    if (meta)
        put_meta(out, e, nl, ml);
    if (usage_1h)
        put_usage_1h(out, e);
    if (audio)
        put_audio(out, e);
    if (partition)
        put_partition(out, e);
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

/* Section ENTRY_SEC_HEADERS: exactly its bytes, every header valid. */
static int get_headers(struct reader *sec, struct entry *e)
{
    size_t n = (size_t)get_u(sec, 1);
    if (sec->bad || n > ENTRY_MAX_HEADERS)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct entry_header *h = &e->headers[i];
        h->name_len = (size_t)get_u(sec, 1);
        h->name = get_bytes(sec, h->name_len);
        h->value_len = (size_t)get_u(sec, 2);
        h->value = get_bytes(sec, h->value_len);
        if (sec->bad || !entry_header_valid(h->name, h->name_len, h->value, h->value_len))
            return -1;
    }
    e->nheaders = n;
    return sec->left == 0 ? 0 : -1;
}

/* Section ENTRY_SEC_META: exactly its bytes, two length-prefixed names. */
static int get_meta(struct reader *sec, struct entry *e)
{
    e->ns_len = (size_t)get_u(sec, 1);
    e->ns = get_bytes(sec, e->ns_len);
    e->model_len = (size_t)get_u(sec, 1);
    e->model = get_bytes(sec, e->model_len);
    return sec->bad || sec->left != 0 ? -1 : 0;
}

/* Format 2: the sections after the body, in increasing tag order; unknown ones skipped. */
static int get_sections(struct reader *r, struct entry *e)
{
    int last = 0;
    size_t n = (size_t)get_u(r, 1);
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n && !r->bad; i++) {
        int tag = (int)get_u(r, 1);
        size_t len = (size_t)get_u(r, 4);
        const char *p = get_bytes(r, len);
        if (r->bad || tag <= last)
            return -1;
        last = tag;
        struct reader sec = {(const unsigned char *)p, len, false};
        if (tag == ENTRY_SEC_HEADERS && get_headers(&sec, e) < 0)
            return -1;
        if (tag == ENTRY_SEC_USAGE) {
            e->usage.cache_write = (int64_t)get_u(&sec, 8);
            if (sec.bad || sec.left != 0 || e->usage.cache_write < 0 ||
                e->usage.cache_write > ENTRY_TOKENS_MAX)
                return -1;
        }
        if (tag == ENTRY_SEC_META && get_meta(&sec, e) < 0)
            return -1;
        if (tag == ENTRY_SEC_USAGE_1H) {
            e->usage.cache_write_1h = (int64_t)get_u(&sec, 8);
            if (sec.bad || sec.left != 0 || e->usage.cache_write_1h < 0 ||
                e->usage.cache_write_1h > e->usage.cache_write)
                return -1;
        }
        if (tag == ENTRY_SEC_AUDIO) {
            e->usage.audio_prompt = (int64_t)get_u(&sec, 8);
            e->usage.audio_completion = (int64_t)get_u(&sec, 8);
            if (sec.bad || sec.left != 0 || e->usage.audio_prompt < 0 ||
                e->usage.audio_prompt > e->usage.prompt || e->usage.audio_completion < 0 ||
                e->usage.audio_completion > e->usage.completion)
                return -1;
        }
        if (tag == ENTRY_SEC_PARTITION) {
            e->partition = (const unsigned char *)get_bytes(&sec, PC_SHA256_LEN);
            if (sec.bad || sec.left != 0)
                return -1;
        }
    }
    return r->bad ? -1 : 0;
}

static bool tokens_ok(int64_t n)
{
    return n >= 0 && n <= ENTRY_TOKENS_MAX;
}

/* The fixed fields' ranges (the lengths are checked as they are read). */
static bool fields_ok(const struct entry *e, uint64_t kind, uint64_t ep, uint64_t present)
{
    /* created_ms is bounded so that age arithmetic can never overflow. */
    return kind <= ENTRY_SSE && ep != API_NONE && ep < API__COUNT && e->status >= 200 &&
           e->status <= 299 && e->created_ms >= 0 && e->created_ms <= (INT64_C(1) << 53) &&
           present <= 1 && tokens_ok(e->usage.prompt) && tokens_ok(e->usage.completion) &&
           tokens_ok(e->usage.cached) && value_chars_ok(e->content_type, e->content_type_len);
}

int entry_decode(const char *buf, size_t len, struct entry *e)
{
    if (buf == NULL || len < sizeof(entry_magic) + 1 ||
        memcmp(buf, entry_magic, sizeof(entry_magic)) != 0)
        return -1;
    int format = (unsigned char)buf[3];
    if (format != ENTRY_FORMAT_PLAIN && format != ENTRY_FORMAT_SECTIONS)
        return -1;
    struct reader r = {(const unsigned char *)buf + 4, len - 4, false};
    memset(e, 0, sizeof(*e));
    uint64_t kind = get_u(&r, 1), ep = get_u(&r, 1);
    e->status = (int)get_u(&r, 2);
    e->created_ms = (int64_t)get_u(&r, 8);
    e->latency_ms = (uint32_t)get_u(&r, 4);
    uint64_t present = get_u(&r, 1);
    e->usage.present = present != 0;
    e->usage.prompt = (int64_t)get_u(&r, 8);
    e->usage.completion = (int64_t)get_u(&r, 8);
    e->usage.cached = (int64_t)get_u(&r, 8);
    e->content_type_len = (size_t)get_u(&r, 2);
    e->content_type = get_bytes(&r, e->content_type_len);
    e->body_len = (size_t)get_u(&r, 4);
    e->body = get_bytes(&r, e->body_len);
    if (!r.bad && format == ENTRY_FORMAT_SECTIONS && get_sections(&r, e) < 0)
        return -1;
    if (r.bad || r.left != 0 || !fields_ok(e, kind, ep, present))
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
    /* On every lookup: built by hand (snprintf showed in the hit path's profile). */
    static const char head[] = PC_KEY_PREFIX "e:{";
    size_t n = sizeof(head) - 1;
    memcpy(out, head, n);
    memcpy(out + n, tenant_id, TENANT_ID_LEN);
    n += TENANT_ID_LEN;
    out[n++] = ':';
    pc_hex(key, PC_SHA256_LEN, out + n);
    n += 2 * PC_SHA256_LEN;
    out[n++] = '}';
    out[n] = '\0';
    return n;
}

void entry_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX])
{
    if (tenant_id == NULL)
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "e:*");
    else
        snprintf(out, ENTRY_KEY_MAX, PC_KEY_PREFIX "e:{%.*s:*", TENANT_ID_LEN, tenant_id);
}

void entry_id(const char *tenant_id, const unsigned char key[PC_SHA256_LEN],
              char out[ENTRY_ID_LEN + 1])
{
    memcpy(out, tenant_id, TENANT_ID_LEN);
    pc_hex(key, PC_SHA256_LEN, out + TENANT_ID_LEN);
    out[ENTRY_ID_LEN] = '\0';
}

int entry_id_parse(const char *id, size_t len, char tenant_id[TENANT_ID_LEN + 1],
                   unsigned char key[PC_SHA256_LEN])
{
    if (id == NULL || len != ENTRY_ID_LEN)
        return -1;
    for (size_t i = 0; i < ENTRY_ID_LEN; i++)
        if (pc_hex_digit((unsigned char)id[i]) < 0)
            return -1;
    for (size_t i = 0; i < TENANT_ID_LEN; i++)
        tenant_id[i] = (char)("0123456789abcdef"[pc_hex_digit((unsigned char)id[i])]);
    tenant_id[TENANT_ID_LEN] = '\0';
    for (size_t i = 0; i < PC_SHA256_LEN; i++) {
        const char *h = id + TENANT_ID_LEN + 2 * i;
        key[i] = (unsigned char)(pc_hex_digit((unsigned char)h[0]) << 4 |
                                 pc_hex_digit((unsigned char)h[1]));
    }
    return 0;
}
