/*
 * fuzz_sse.c - libFuzzer target for src/sse.c and the dialects over it (src/dialect/).
 *
 * Input: byte 0 picks the endpoint (low three bits: chat, completions,
 * messages, embeddings, then responses for 4..7) and seeds the feeding
 * pattern (the other bits); the rest is a recorded stream. Checked, aborting on violation:
 *   - feeding the parser in random-sized pieces gives the same events and
 *     the same result as feeding it all at once (also with a tiny max_event);
 *   - a recording that assembles is complete, and its replay assembles to
 *     the same answer;
 *   - synthesize(assemble(x)) succeeds, is complete and assembles to
 *     assemble(x) with the same usage;
 *   - the usage read as the bytes pass (sse_usage_scan) is the same fed in
 *     random-sized pieces as fed at once;
 *   - so is whether the stream ended (sse_end_scan), and a complete
 *     recording has ended.
 * Seed corpus: tests/fuzz/corpus/sse/ (files start with '0'..'4' and a newline).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_dialect.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const enum api_endpoint endpoints[] = {API_CHAT,       API_COMPLETIONS, API_MESSAGES,
                                              API_EMBEDDINGS, API_RESPONSES,   API_RESPONSES,
                                              API_RESPONSES,  API_RESPONSES};

/* Each event as "len:event len:data" so two parses compare byte for byte. */
static int record_event(void *arg, const struct sse_event *ev)
{
    struct pc_buf *b = arg;
    pc_buf_printf(b, "%zu:", ev->event_len);
    pc_buf_append(b, ev->event, ev->event_len);
    pc_buf_printf(b, " %zu:", ev->data_len);
    pc_buf_append(b, ev->data, ev->data_len);
    return 0;
}

/* Parse s with max_event cap; step 0 feeds at once, else pieces of 1..n sized by seed. */
static int parse_with(const char *s, size_t len, size_t cap, uint32_t seed, bool pieces,
                      struct pc_buf *events)
{
    struct sse_parser p;
    sse_parser_init(&p);
    p.max_event = cap;
    int rc = 0;
    for (size_t pos = 0, k; pos < len && rc == 0; pos += k) {
        seed = seed * 1103515245u + 12345u;
        k = pieces ? 1 + (seed >> 16) % ((seed >> 8) & 1 ? 7 : 97) : len;
        k = k < len - pos ? k : len - pos;
        rc = sse_parser_feed(&p, s + pos, k, record_event, events);
    }
    sse_parser_free(&p);
    return rc;
}

static void check_parser(const char *s, size_t len, size_t cap, uint32_t seed)
{
    struct pc_buf whole = PC_BUF_INIT, split = PC_BUF_INIT;
    int rc1 = parse_with(s, len, cap, seed, false, &whole);
    int rc2 = parse_with(s, len, cap, seed, true, &split);
    CHECK(rc1 == rc2);
    CHECK(whole.len == split.len);
    CHECK(whole.len == 0 || memcmp(whole.data, split.data, whole.len) == 0);
    pc_buf_free(&whole);
    pc_buf_free(&split);
}

static bool json_same(const cJSON *a, const cJSON *b);

/* Some member of o named key whose value is json_same as v. */
static bool has_member(const cJSON *o, const char *key, const cJSON *v)
{
    const cJSON *m;
    cJSON_ArrayForEach(m, o)
    {
        if (strcmp(m->string, key) == 0 && json_same(m, v))
            return true;
    }
    return false;
}

/*
 * cJSON_Compare, but reflexive on objects with duplicate keys (which arbitrary
 * input produces and cJSON keeps): members are matched by any same-named
 * member, in any order.
 */
static bool json_same(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL || (a->type & 0xff) != (b->type & 0xff))
        return false;
    if (!cJSON_IsObject(a) && !cJSON_IsArray(a))
        return cJSON_Compare(a, b, true);
    if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
        return false;
    if (cJSON_IsArray(a)) {
        for (const cJSON *x = a->child, *y = b->child; x != NULL; x = x->next, y = y->next)
            if (!json_same(x, y))
                return false;
        return true;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, a)
    {
        if (!has_member(b, m->string, m))
            return false;
    }
    cJSON_ArrayForEach(m, b)
    {
        if (!has_member(a, m->string, m))
            return false;
    }
    return true;
}

static bool same_usage(const struct api_usage *a, const struct api_usage *b)
{
    return a->present == b->present && a->prompt == b->prompt && a->completion == b->completion &&
           a->cached == b->cached && a->cache_write == b->cache_write &&
           a->cache_write_1h == b->cache_write_1h && a->audio_prompt == b->audio_prompt &&
           a->audio_completion == b->audio_completion;
}

/* Replays succeed only on complete recordings and keep the answer. */
static void check_replay(enum api_endpoint e, const char *rec, size_t len, const cJSON *a)
{
    for (int inc = 0; inc <= 1; inc++) {
        struct pc_buf out = PC_BUF_INIT;
        int rc = dialect_replay(e, rec, len, inc, &out);
        CHECK(rc == 0 || out.len == 0);
        if (rc == 0) {
            CHECK(dialect_complete(e, out.data, out.len));
            cJSON *b = dialect_assemble(e, out.data, out.len, NULL);
            CHECK((a == NULL) == (b == NULL));
            CHECK(!inc || a == NULL || json_same(a, b));
            cJSON_Delete(b);
        }
        pc_buf_free(&out);
    }
}

static void check_synthesis(enum api_endpoint e, const cJSON *a, const struct api_usage *ua)
{
    struct pc_buf out = PC_BUF_INIT;
    struct api_usage ub;
    CHECK(dialect_synthesize(e, a, true, &out) == 0);
    CHECK(dialect_complete(e, out.data, out.len));
    cJSON *b = dialect_assemble(e, out.data, out.len, &ub);
    CHECK(b != NULL && json_same(a, b));
    CHECK(same_usage(ua, &ub));
    cJSON_Delete(b);
    pc_buf_free(&out);
}

/* The usage object the scan merged from s, printed ("" if none), fed at once or in pieces. */
static char *scanned(const char *s, size_t len, uint32_t seed, bool pieces)
{
    struct sse_usage_scan sc;
    sse_usage_scan_init(&sc);
    for (size_t pos = 0, k; pos < len; pos += k) {
        seed = seed * 1103515245u + 12345u;
        k = pieces ? 1 + (seed >> 16) % 13 : len;
        k = k < len - pos ? k : len - pos;
        sse_usage_scan_feed(&sc, s + pos, k);
    }
    const cJSON *u = sse_usage_scan_result(&sc);
    char *out = u != NULL ? cJSON_PrintUnformatted(u) : NULL;
    sse_usage_scan_free(&sc);
    return out;
}

static void check_usage_scan(const char *s, size_t len, uint32_t seed)
{
    char *whole = scanned(s, len, seed, false), *split = scanned(s, len, seed, true);
    CHECK((whole == NULL) == (split == NULL));
    CHECK(whole == NULL || strcmp(whole, split) == 0);
    cJSON_free(whole);
    cJSON_free(split);
}

/* Whether the end scan saw the stream end (-1: failed), fed at once or in pieces. */
static int ended(enum api_endpoint e, const char *s, size_t len, uint32_t seed, bool pieces)
{
    struct sse_end_scan sc;
    sse_end_scan_init(&sc, dialect_of(e)->classify);
    for (size_t pos = 0, k; pos < len; pos += k) {
        seed = seed * 1103515245u + 12345u;
        k = pieces ? 1 + (seed >> 16) % 13 : len;
        k = k < len - pos ? k : len - pos;
        sse_end_scan_feed(&sc, s + pos, k);
    }
    int r = sc.failed ? -1 : sse_end_scan_ended(&sc);
    sse_end_scan_free(&sc);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    enum api_endpoint e = endpoints[data[0] & 7];
    uint32_t seed = data[0] >> 3;
    const char *rec = (const char *)data + 1;
    size_t len = size - 1;

    check_parser(rec, len, 0, seed);
    check_parser(rec, len, 1 + seed, seed);
    check_usage_scan(rec, len, seed);

    bool complete = dialect_complete(e, rec, len);
    int end = ended(e, rec, len, seed, false);
    CHECK(end == ended(e, rec, len, seed, true));
    CHECK(!complete || end == 1);
    struct api_usage ua;
    cJSON *a = dialect_assemble(e, rec, len, &ua);
    CHECK(a == NULL || complete);
    CHECK(a != NULL || !ua.present);
    check_replay(e, rec, len, a);
    if (a != NULL)
        check_synthesis(e, a, &ua);
    cJSON_Delete(a);
    return 0;
}
