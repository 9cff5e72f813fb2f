/*
 * fuzz_entry.c - libFuzzer target for the stored-entry decoder
 * (entry_decode, src/entry.c) and what a cache hit does with a decoded
 * entry: Redis values are input too (another tenant's proxy, an older
 * version, a corrupted or hand-written key).
 *
 * Checked, aborting on violation:
 *   - entry_decode accepts only whole, well-formed values: every pointer and
 *     length it hands out lies inside the input, the endpoint is cacheable,
 *     the status 2xx, the age finite;
 *   - every stored response header lies inside the input and is a valid
 *     header (a corrupt value must never inject a header into a reply);
 *   - encoding a decoded entry and decoding that again gives the same
 *     fields, and the same bytes on a second round (the format is exact;
 *     a section this version does not know is dropped);
 *   - the hit path's readers (JSON parse, dialect_assemble, dialect_replay,
 *     dialect_synthesize, api_answer_check) take the body without crashing.
 * Seed corpus: tests/fuzz/corpus/entry/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_api.h"
#include "pc_entry.h"
#include "pc_dialect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_entry: %s\n", what);
    abort();
}

static bool inside(const char *buf, size_t len, const char *p, size_t n)
{
    return n == 0 || (p != NULL && p >= buf && p + n <= buf + len);
}

static bool same_bytes(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

static bool same_headers(const struct entry *a, const struct entry *b)
{
    if (a->nheaders != b->nheaders)
        return false;
    for (size_t i = 0; i < a->nheaders; i++) {
        const struct entry_header *x = &a->headers[i], *y = &b->headers[i];
        if (!same_bytes(x->name, x->name_len, y->name, y->name_len) ||
            !same_bytes(x->value, x->value_len, y->value, y->value_len))
            return false;
    }
    return true;
}

static bool same_entry(const struct entry *a, const struct entry *b)
{
    return same_headers(a, b) && a->kind == b->kind && a->endpoint == b->endpoint &&
           a->status == b->status && a->created_ms == b->created_ms &&
           a->latency_ms == b->latency_ms && a->usage.present == b->usage.present &&
           a->usage.prompt == b->usage.prompt && a->usage.completion == b->usage.completion &&
           a->usage.cached == b->usage.cached && a->content_type_len == b->content_type_len &&
           a->body_len == b->body_len &&
           (a->content_type_len == 0 ||
            memcmp(a->content_type, b->content_type, a->content_type_len) == 0) &&
           (a->body_len == 0 || memcmp(a->body, b->body, a->body_len) == 0) &&
           same_bytes(a->ns, a->ns_len, b->ns, b->ns_len) &&
           same_bytes(a->model, a->model_len, b->model, b->model_len);
}

/* What serving a hit does with the body, both ways a client may want it. */
static void serve_both_ways(const struct entry *e)
{
    struct pc_buf out = PC_BUF_INIT;
    const char *reason = NULL;
    if (e->kind == ENTRY_SSE) {
        dialect_replay(e->endpoint, e->body, e->body_len, true, &out);
        cJSON *a = dialect_assemble(e->endpoint, e->body, e->body_len, NULL);
        api_answer_check_stream(e->endpoint, a, &reason);
        cJSON_Delete(a);
    } else {
        cJSON *j = cJSON_ParseWithLength(e->body, e->body_len);
        if (j != NULL)
            dialect_synthesize(e->endpoint, j, false, &out);
        api_answer_check(e->endpoint, j, &reason);
        cJSON_Delete(j);
    }
    if (reason == NULL)
        fail("api_answer_check gave no reason");
    pc_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct entry e, e2, e3;
    if (entry_decode(buf, size, &e) < 0)
        return 0;
    if (!inside(buf, size, e.content_type, e.content_type_len) ||
        !inside(buf, size, e.body, e.body_len) || !inside(buf, size, e.ns, e.ns_len) ||
        !inside(buf, size, e.model, e.model_len) || e.nheaders > ENTRY_MAX_HEADERS)
        fail("a decoded span lies outside the value");
    for (size_t i = 0; i < e.nheaders; i++) {
        const struct entry_header *hd = &e.headers[i];
        if (!inside(buf, size, hd->name, hd->name_len) ||
            !inside(buf, size, hd->value, hd->value_len) ||
            !entry_header_valid(hd->name, hd->name_len, hd->value, hd->value_len))
            fail("a decoded header is outside the value or not a valid header");
    }
    if (e.endpoint == API_NONE || e.endpoint >= API__COUNT || e.status < 200 || e.status > 299 ||
        entry_age_ms(&e) < 0)
        fail("a decoded field is out of range");
    struct pc_buf a = PC_BUF_INIT, b = PC_BUF_INIT;
    entry_encode(&e, &a);
    if (entry_decode(a.data, a.len, &e2) < 0 || !same_entry(&e, &e2))
        fail("encode(decode(x)) does not decode to the same entry");
    entry_encode(&e2, &b);
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0 ||
        entry_decode(b.data, b.len, &e3) < 0 || !same_entry(&e2, &e3))
        fail("the encoding is not stable");
    serve_both_ways(&e);
    pc_buf_free(&a);
    pc_buf_free(&b);
    return 0;
}
