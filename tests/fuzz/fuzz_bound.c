/*
 * fuzz_bound.c - libFuzzer target for the semantic error bound's decoders
 * (src/bound.c): the counts and marks it reads back from Redis (any writer's),
 * the decisions taken on them, and the answers it compares (a cached entry's,
 * an upstream's).
 *
 * Input: byte 0's low two bits pick the mode, the rest of it and the bytes
 * after it are the mode's:
 *   0  an answer: bits 2-4 the endpoint, bit 5 a recorded stream (else JSON);
 *      the rest is the body. Checked: bound_answer_read either fails and
 *      holds nothing, or gives a text of 1..BOUND_ANSWER_MAX bytes with no
 *      NUL in it (a NUL would end what the comparators read: two answers that
 *      differ after it would compare the same), the same twice, the same as
 *      bound_answer_text, and the same as itself for the exact comparator;
 *   1  raw values as Redis holds them: byte 1 the parameters, then two
 *      values (partition, prior counts) each after a 2-byte length, then the
 *      entry's marks. Each decodes or is rejected (zeroed, as documented);
 *      a value that decodes encodes back to its bytes (zero-padded);
 *   2  counts built from 4-byte records (bucket, N, n, e on a log scale,
 *      clamped to what the proxy could write), encoded and decoded (which must
 *      succeed), so that the decision sees large and lopsided counts;
 *   3  two texts (split where byte 1 says): bound_same_text is symmetric and
 *      reflexive, and bound_normalise gives lower case, single spaces, no
 *      outer blanks.
 * For modes 1 and 2, every decision (bound_decide over similarities from
 * 0.49 to 1) is checked against the rules in pc_bound.h: an entry found wrong
 * at or above sim is skipped; what is served or explored rests on counts that
 * certify a threshold at or below sim and compared something at sim's bucket;
 * a certificate's upper bound is at most delta; bound_decide_prepared (one
 * preparation for every sim) agrees with bound_decide.
 * Seed corpus: tests/fuzz/corpus/bound/.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_bound.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const enum api_endpoint endpoints[] = {API_CHAT,      API_COMPLETIONS, API_MESSAGES,
                                              API_RESPONSES, API_EMBEDDINGS,  API_CHAT,
                                              API_MESSAGES,  API_RESPONSES};
static const double deltas[] = {0.01, 0.001, 0.05, 0.1, 0.2, 0.5, 0.0, 0.02};
static const double rates[] = {0.05, 0.0, 1.0, 0.5};

static bool same_buf(const struct pc_buf *a, const struct pc_buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* ---- answers ------------------------------------------------------------------ */

static void check_answer(const uint8_t *data, size_t size, uint8_t how)
{
    struct entry e = {
        .kind = (how & 0x20) ? ENTRY_SSE : ENTRY_JSON,
        .endpoint = endpoints[(how >> 2) & 7],
        .status = 200,
        .body = (const char *)data,
        .body_len = size,
    };
    struct bound_answer a, b;
    int rc = bound_answer_read(&e, &a);
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        CHECK(a.text.len == 0 && a.form.len == 0 && a.key.len == 0);
        struct pc_buf t = PC_BUF_INIT;
        CHECK(bound_answer_text(&e, &t) == -1);
        pc_buf_free(&t);
        return;
    }
    /* Nothing cJSON would cut a string at (a NUL byte; "\u00zz", which RFC 8259 refuses). */
    char why[128];
    CHECK(memchr(data, '\0', size) == NULL);
    CHECK(e.kind == ENTRY_SSE || pc_json_strict(e.body, e.body_len, why, sizeof(why)));
    CHECK(a.text.len >= 1 && a.text.len <= BOUND_ANSWER_MAX);
    CHECK(strlen(a.text.data) == a.text.len);
    CHECK(strlen(a.form.data) == a.form.len);
    CHECK(a.choices >= 0);
    CHECK(bound_answer_read(&e, &b) == 0);
    CHECK(same_buf(&a.text, &b.text) && same_buf(&a.form, &b.form) && same_buf(&a.key, &b.key));
    CHECK(a.choices == b.choices && a.cut == b.cut && a.rounded == b.rounded);
    struct pc_buf t = PC_BUF_INIT;
    CHECK(bound_answer_text(&e, &t) == (a.cut ? 1 : 0));
    CHECK(same_buf(&t, &a.text));
    pc_buf_free(&t);
    CHECK(bound_same_text(a.text.data, b.text.data));
    bound_answer_free(&a);
    bound_answer_free(&b);
}

/* ---- counts and decisions -------------------------------------------------------- */

static void check_cert(const struct bound_counts *c, double delta)
{
    struct bound_cert cert;
    bound_certify(c, delta, &cert);
    if (!cert.certified) {
        CHECK(cert.bucket == BOUND_BUCKETS && cert.threshold == 1.0);
        return;
    }
    CHECK(cert.bucket >= 1 && cert.bucket < BOUND_BUCKETS);
    CHECK(c->compared[cert.bucket] > 0);
    CHECK(cert.threshold == bound_bucket_floor(cert.bucket));
    CHECK(isfinite(cert.region.n_eff) && cert.region.n_eff > 0);
    CHECK(cert.region.rate >= 0 && cert.region.rate <= 1);
    CHECK(cert.upper >= 0 && cert.upper <= delta);
}

static void check_decisions(const struct bound_counts *part, const struct bound_counts *glob,
                            int floor, double delta, double rate)
{
    struct bound_inputs in = {.partition = part,
                              .global = glob,
                              .entry_floor = floor,
                              .delta = delta,
                              .explore_rate = rate};
    if (part != NULL)
        check_cert(part, delta);
    if (glob != NULL)
        check_cert(glob, delta);
    struct bound_prepared p;
    bound_prepare(&p);
    for (int i = 0; i <= 2 * BOUND_BUCKETS + 2; i++) {
        double sim = BOUND_SIM_MIN - 0.01 + i * (BOUND_BUCKET_WIDTH / 2);
        double u = (i % 7) / 7.0;
        struct bound_decision d, dp;
        bound_decide(&in, sim, u, &d);
        bound_decide_prepared(&in, &p, sim, u, &dp);
        CHECK(d.verdict == dp.verdict && d.source == dp.source && d.threshold == dp.threshold);
        int b = bound_bucket(sim);
        if (floor >= 0 && b <= floor) {
            CHECK(d.verdict == BOUND_SKIP);
            continue;
        }
        CHECK(d.verdict != BOUND_SKIP);
        if (d.verdict == BOUND_WITHHOLD) {
            CHECK(d.source == BOUND_SRC_NONE);
            continue;
        }
        const struct bound_counts *src = d.source == BOUND_SRC_PARTITION ? part
                                         : d.source == BOUND_SRC_GLOBAL  ? glob
                                                                         : NULL;
        CHECK(src != NULL);
        CHECK(src->compared[b] > 0);
        CHECK(d.threshold <= sim + 1e-9 && d.threshold >= BOUND_SIM_MIN);
        if (rate <= 0)
            CHECK(d.verdict == BOUND_SERVE);
        if (rate >= 1)
            CHECK(d.verdict == BOUND_EXPLORE);
    }
}

/* A decoded value re-encodes to its own bytes, zero-padded to the full length. */
static void check_counts_round_trip(const struct bound_counts *c, const uint8_t *v, size_t len)
{
    struct pc_buf b = PC_BUF_INIT;
    bound_counts_encode(c, &b);
    CHECK(b.len == BOUND_COUNTS_BYTES && len <= b.len);
    CHECK(memcmp(b.data, v, len) == 0);
    for (size_t i = len; i < b.len; i++)
        CHECK(b.data[i] == 0);
    pc_buf_free(&b);
}

static const struct bound_counts *decode_value(const uint8_t **p, const uint8_t *end,
                                               struct bound_counts *c)
{
    if (end - *p < 2)
        return NULL;
    size_t len = (size_t)(*p)[0] << 8 | (*p)[1];
    *p += 2;
    len = PC_MIN(len, (size_t)(end - *p));
    const uint8_t *v = *p;
    *p += len;
    if (bound_counts_decode((const char *)v, len, c) < 0) {
        static const struct bound_counts zero;
        CHECK(memcmp(c, &zero, sizeof(zero)) == 0);
        return NULL;
    }
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        CHECK(c->seen[b] >= 0 && c->seen[b] <= (double)BOUND_COUNT_MAX);
        CHECK(c->compared[b] >= 0 && c->compared[b] <= (double)BOUND_COUNT_MAX);
        CHECK(c->wrong[b] >= 0 && c->wrong[b] <= c->compared[b]);
    }
    check_counts_round_trip(c, v, len);
    return c;
}

static int decode_marks(const uint8_t *v, size_t len)
{
    int floor = 7;
    int rc = bound_marks_decode((const char *)v, len, &floor);
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        CHECK(floor == -1);
        return -1;
    }
    CHECK(floor >= -1 && floor < BOUND_BUCKETS);
    return floor;
}

static void check_raw(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    double delta = deltas[data[0] & 7], rate = rates[(data[0] >> 3) & 3];
    const uint8_t *p = data + 1, *end = data + size;
    struct bound_counts part, glob;
    const struct bound_counts *pp = decode_value(&p, end, &part);
    const struct bound_counts *gp = decode_value(&p, end, &glob);
    int floor = decode_marks(p, (size_t)(end - p));
    check_decisions(pp, gp, floor, delta, rate);
}

/* A count from a byte: its low five bits times 2^(5 * its top three), so up to about 2^40. */
static double scaled(uint8_t v)
{
    return ldexp((double)(v & 31), 5 * (v >> 5));
}

static void check_built(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    double delta = deltas[data[0] & 7], rate = rates[(data[0] >> 3) & 3];
    int floor = data[1] < 2 * BOUND_BUCKETS ? data[1] - BOUND_BUCKETS : -1;
    struct bound_counts c[2];
    memset(c, 0, sizeof(c));
    bool have[2] = {(data[0] & 0x20) != 0, (data[0] & 0x40) != 0};
    for (size_t i = 2; i + 4 <= size; i += 4) {
        struct bound_counts *t = &c[data[i] >> 7];
        int b = (data[i] & 127) % BOUND_BUCKETS;
        double max = (double)BOUND_COUNT_MAX;
        t->seen[b] = fmin(max, t->seen[b] + scaled(data[i + 1]));
        t->compared[b] = fmin(max, t->compared[b] + scaled(data[i + 2]));
        t->wrong[b] = fmin(t->compared[b], t->wrong[b] + scaled(data[i + 3]));
    }
    const struct bound_counts *in[2] = {NULL, NULL};
    struct bound_counts back[2];
    for (int k = 0; k < 2; k++) {
        struct pc_buf b = PC_BUF_INIT;
        bound_counts_encode(&c[k], &b);
        CHECK(bound_counts_decode(b.data, b.len, &back[k]) == 0);
        CHECK(memcmp(&back[k], &c[k], sizeof(c[k])) == 0);
        pc_buf_free(&b);
        if (have[k])
            in[k] = &back[k];
    }
    check_decisions(in[0], in[1], floor, delta, rate);
}

/* ---- texts ---------------------------------------------------------------------- */

static void check_normalised(const char *s)
{
    struct pc_buf n = PC_BUF_INIT;
    pc_buf_append_str(&n, "x"); /* appends after what the buffer holds */
    bound_normalise(s, &n);
    CHECK(n.len >= 1 && n.data[0] == 'x' && strlen(n.data) == n.len);
    const char *t = n.data + 1;
    size_t len = n.len - 1;
    for (size_t i = 0; i < len; i++) {
        CHECK(!(t[i] >= 'A' && t[i] <= 'Z'));
        CHECK(t[i] == ' ' || !isspace((unsigned char)t[i]));
        CHECK(t[i] != ' ' || (i > 0 && i + 1 < len && t[i + 1] != ' '));
    }
    pc_buf_free(&n);
}

static void check_texts(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    size_t cut = (size - 1) * data[0] / 255;
    char *a = pc_malloc(cut + 1), *b = pc_malloc(size - 1 - cut + 1);
    memcpy(a, data + 1, cut);
    a[cut] = '\0';
    memcpy(b, data + 1 + cut, size - 1 - cut);
    b[size - 1 - cut] = '\0';
    check_normalised(a);
    check_normalised(b);
    CHECK(bound_same_text(a, a) && bound_same_text(b, b));
    CHECK(bound_same_text(a, b) == bound_same_text(b, a));
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] & 3) {
    case 0:
        check_answer(data + 1, size - 1, data[0]);
        break;
    case 1:
        check_raw(data + 1, size - 1);
        break;
    case 2:
        check_built(data + 1, size - 1);
        break;
    default:
        check_texts(data + 1, size - 1);
        break;
    }
    return 0;
}
