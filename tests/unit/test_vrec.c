/*
 * test_vrec.c - the vector record codec: float16 conversion, round trips in
 * both vector formats, the similarity error of float16 (the measurement
 * behind VREC_F16), and rejection of every truncation and of each kind of
 * corrupt field.
 */
#include "pc_util.h"
#include "pc_vrec.h"
#include "t.h"

#include <math.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float gauss(void)
{
    double u = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    double w = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
}

static void rand_unit(float *v, unsigned d)
{
    double n = 0;
    for (unsigned i = 0; i < d; i++) {
        v[i] = gauss();
        n += (double)v[i] * v[i];
    }
    for (unsigned i = 0; i < d; i++)
        v[i] = (float)(v[i] / sqrt(n));
}

static double cosine(const float *a, const float *b, unsigned d)
{
    double s = 0, na = 0, nb = 0;
    for (unsigned i = 0; i < d; i++) {
        s += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    return s / sqrt(na * nb);
}

static float vbuf[VINDEX_DIM_MAX];

static struct vrec sample(float *vec, unsigned dim, const char *text)
{
    struct vrec r = {.dim = dim,
                     .created_ms = 1700000000000,
                     .expires_ms = 1700000360000,
                     .vec = vec,
                     .text = text,
                     .text_len = text ? strlen(text) : 0};
    snprintf(r.space, sizeof(r.space), "builtin-glove100-v1");
    for (int i = 0; i < VINDEX_PART_LEN; i++)
        r.partition[i] = (unsigned char)(i * 7 + 1);
    return r;
}

static int decode(const struct pc_buf *b, struct vrec *out)
{
    char err[128];
    return vrec_decode(b->data, b->len, out, vbuf, VINDEX_DIM_MAX, err, sizeof(err));
}

static void test_f16(void)
{
    /* Every finite half survives half -> float -> half. */
    size_t bad = 0;
    for (unsigned h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00)
            continue;
        bad += vrec_f32_to_f16(vrec_f16_to_f32((uint16_t)h)) != h;
    }
    T_CHECK_INT(bad, 0);
    T_CHECK_INT(vrec_f32_to_f16(1.0f), 0x3c00);
    T_CHECK_INT(vrec_f32_to_f16(-2.0f), 0xc000);
    T_CHECK_INT(vrec_f32_to_f16(65504.0f), 0x7bff);
    T_CHECK_INT(vrec_f32_to_f16(65519.0f), 0x7bff);
    T_CHECK_INT(vrec_f32_to_f16(65520.0f), 0x7c00); /* ties to even: infinity */
    T_CHECK_INT(vrec_f32_to_f16(ldexpf(1, -24)), 0x0001);
    T_CHECK_INT(vrec_f32_to_f16(ldexpf(1, -25)), 0x0000);        /* halfway: to even (0) */
    T_CHECK_INT(vrec_f32_to_f16(ldexpf(3, -25)), 0x0002);        /* halfway: to even (2) */
    T_CHECK_INT(vrec_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00); /* halfway: even */
    T_CHECK_INT(vrec_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02);
    T_CHECK_INT(vrec_f32_to_f16(ldexpf(1023, -24)), 0x03ff); /* largest subnormal */
    T_CHECK_INT(vrec_f32_to_f16(ldexpf(2047, -25)), 0x0400); /* rounds up to the normal */
    T_CHECK_INT(vrec_f32_to_f16(-0.0f), 0x8000);
    T_CHECK(isnan(vrec_f16_to_f32(vrec_f32_to_f16(NAN))));
    T_CHECK(vrec_f16_to_f32(0x3555) > 0.333f && vrec_f16_to_f32(0x3555) < 0.3334f);
}

static void test_round_trip(void)
{
    float v[100];
    rand_unit(v, 100);
    v[3] = -0.0f;
    v[4] = ldexpf(1, -20); /* a float16 subnormal */
    for (int fmt = VREC_F32; fmt <= VREC_F16; fmt++) {
        struct vrec in = sample(v, 100, "Wie hoch ist der Kölner Dom? 🏰"), out;
        struct pc_buf b = PC_BUF_INIT;
        T_CHECK_INT(vrec_encode(&in, (enum vrec_fmt)fmt, &b), 0);
        T_CHECK_INT(b.len, 4 + 2 + strlen(in.space) + 2 + 32 + 16 +
                               100 * (fmt == VREC_F16 ? 2 : 4) + 2 + in.text_len);
        T_CHECK_INT(decode(&b, &out), 0);
        T_CHECK_STR(out.space, in.space);
        T_CHECK_INT(out.dim, 100);
        T_CHECK_INT(out.fmt, fmt);
        T_CHECK(memcmp(out.partition, in.partition, 32) == 0);
        T_CHECK_INT(out.created_ms, in.created_ms);
        T_CHECK_INT(out.expires_ms, in.expires_ms);
        T_CHECK_INT(out.text_len, in.text_len);
        T_CHECK(memcmp(out.text, in.text, in.text_len) == 0);
        double maxerr = 0;
        for (int i = 0; i < 100; i++)
            maxerr = fmax(maxerr, fabs((double)out.vec[i] - v[i]));
        T_CHECK(fmt == VREC_F32 ? maxerr == 0 : maxerr < 3e-4);
        T_CHECK(signbit(out.vec[3]));
        /* A decoded record encodes to the same bytes. */
        struct pc_buf again = PC_BUF_INIT;
        T_CHECK_INT(vrec_encode(&out, out.fmt, &again), 0);
        T_CHECK(again.len == b.len && memcmp(again.data, b.data, b.len) == 0);
        pc_buf_free(&b);
        pc_buf_free(&again);
    }
    /* Smallest: dim 1, no text, a one-byte space. */
    float one = 1;
    struct vrec in = sample(&one, 1, NULL), out;
    snprintf(in.space, sizeof(in.space), "x");
    in.expires_ms = 0;
    struct pc_buf b = PC_BUF_INIT;
    T_CHECK_INT(vrec_encode(&in, VREC_F16, &b), 0);
    T_CHECK_INT(decode(&b, &out), 0);
    T_CHECK_INT(out.text_len, 0);
    T_CHECK(out.vec[0] == 1.0f);
    pc_buf_free(&b);
}

/* The measurement behind VREC_F16: how much float16 moves a cosine similarity. */
static void test_f16_similarity_error(void)
{
    float a[100], b[100], a16[100], b16[100];
    double worst = 0, sum = 0;
    int n = 20000;
    for (int t = 0; t < n; t++) {
        rand_unit(a, 100);
        if (t % 2) { /* near-duplicates, where thresholds are decided */
            for (int i = 0; i < 100; i++)
                b[i] = a[i] + 0.05f * gauss();
            double nb = 0;
            for (int i = 0; i < 100; i++)
                nb += (double)b[i] * b[i];
            for (int i = 0; i < 100; i++)
                b[i] = (float)(b[i] / sqrt(nb));
        } else {
            rand_unit(b, 100);
        }
        for (int i = 0; i < 100; i++) {
            a16[i] = vrec_f16_to_f32(vrec_f32_to_f16(a[i]));
            b16[i] = vrec_f16_to_f32(vrec_f32_to_f16(b[i]));
        }
        double e = fabs(cosine(a, b, 100) - cosine(a16, b16, 100));
        worst = fmax(worst, e);
        sum += e;
    }
    fprintf(stderr, "    float16, dim 100: cosine error mean %.2e, worst %.2e over %d pairs\n",
            sum / n, worst, n);
    T_CHECK(worst < 1e-3);
}

static void test_text_cap(void)
{
    /* Cut to at most 4096 bytes, on a character boundary. */
    char *text = pc_malloc(6000);
    text[0] = 'x'; /* then two-byte characters: byte 4096 falls inside one */
    for (int i = 0; i < 2999; i++)
        memcpy(text + 1 + 2 * i, "\xc3\xa9", 2);
    float v[4] = {1, 0, 0, 0};
    struct vrec in = sample(v, 4, NULL), out;
    in.text = text;
    in.text_len = 5999;
    struct pc_buf b = PC_BUF_INIT;
    T_CHECK_INT(vrec_encode(&in, VREC_F16, &b), 0);
    T_CHECK_INT(decode(&b, &out), 0);
    T_CHECK_INT(out.text_len, 4095);
    T_CHECK(memcmp(out.text, text, 4095) == 0);
    pc_buf_free(&b);
    free(text);
}

static void test_encode_rejects(void)
{
    float v[4] = {1, 0, 0, 0}, bad[4] = {1, NAN, 0, 0}, huge[4] = {1e6f, 0, 0, 0};
    struct pc_buf b = PC_BUF_INIT;
    struct vrec r = sample(v, 4, "ok");
    r.space[0] = '\0';
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 4, "ok");
    r.space[2] = ' ';
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 4, "ok");
    memset(r.space, 'a', VREC_SPACE_MAX + 1); /* no NUL within the limit */
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 0, "ok");
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, VINDEX_DIM_MAX + 1, "ok");
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(bad, 4, "ok");
    T_CHECK_INT(vrec_encode(&r, VREC_F32, &b), -1);
    r = sample(huge, 4, "ok");
    T_CHECK_INT(vrec_encode(&r, VREC_F32, &b), 0); /* fine as float32 ... */
    pc_buf_reset(&b);
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1); /* ... not as float16 */
    r = sample(v, 4, "ok");
    r.expires_ms = -1;
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 4, "bad \xff utf-8");
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 4, "surrogate \xed\xa0\x80");
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    r = sample(v, 4, "overlong \xc0\xaf");
    T_CHECK_INT(vrec_encode(&r, VREC_F16, &b), -1);
    T_CHECK_INT(b.len, 0);
    pc_buf_free(&b);
}

/* Bytes of a valid record with one field changed: decoding must fail. */
static void expect_rejected(const struct pc_buf *good, size_t at, const void *bytes, size_t n,
                            const char *what)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append(&b, good->data, good->len);
    memcpy(b.data + at, bytes, n);
    struct vrec out;
    if (decode(&b, &out) == 0) {
        t_failures++;
        fprintf(stderr, "accepted a record with %s\n", what);
    }
    t_checks++;
    pc_buf_free(&b);
}

static void test_decode_rejects(void)
{
    float v[8];
    rand_unit(v, 8);
    struct vrec in = sample(v, 8, "hello"), out;
    snprintf(in.space, sizeof(in.space), "sp"); /* space at 6..7, dim at 8 */
    struct pc_buf good = PC_BUF_INIT;
    T_CHECK_INT(vrec_encode(&in, VREC_F32, &good), 0);
    T_CHECK_INT(decode(&good, &out), 0);

    /* Every truncation, and one byte too many. */
    size_t accepted = 0;
    for (size_t n = 0; n < good.len; n++) {
        char err[128];
        accepted += vrec_decode(good.data, n, &out, vbuf, VINDEX_DIM_MAX, err, sizeof(err)) == 0;
    }
    T_CHECK_INT(accepted, 0);
    struct pc_buf longer = PC_BUF_INIT;
    pc_buf_append(&longer, good.data, good.len);
    pc_buf_append_char(&longer, 'x');
    T_CHECK_INT(decode(&longer, &out), -1);
    pc_buf_free(&longer);

    size_t vec_at = 4 + 2 + 2 + 2 + 32 + 16, text_len_at = vec_at + 8 * 4;
    uint32_t nan_bits = 0x7fc00000u, inf_bits = 0x7f800000u;
    unsigned char neg[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    expect_rejected(&good, 0, "X", 1, "a bad magic");
    expect_rejected(&good, 3, "\x02", 1, "another format version");
    expect_rejected(&good, 4, "\x02", 1, "an unknown flag");
    expect_rejected(&good, 5, "\x00", 1, "an empty space");
    expect_rejected(&good, 5, "\x41", 1, "a space longer than the record");
    expect_rejected(&good, 6, "\x01", 1, "a control character in the space");
    expect_rejected(&good, 8, "\x00\x00", 2, "dimension 0");
    expect_rejected(&good, 8, "\x09\x00", 2, "a dimension longer than the vector");
    expect_rejected(&good, 8, "\x01\x10", 2, "a dimension above the maximum");
    expect_rejected(&good, 8 + 2 + 32, neg, 8, "a negative creation time");
    expect_rejected(&good, 8 + 2 + 32 + 8, neg, 8, "a negative expiry");
    expect_rejected(&good, vec_at + 4, &nan_bits, 4, "a NaN component");
    expect_rejected(&good, vec_at, &inf_bits, 4, "an infinite component");
    expect_rejected(&good, text_len_at, "\x06\x00", 2, "a text length past the end");
    expect_rejected(&good, text_len_at, "\x04\x00", 2, "bytes after the text");
    expect_rejected(&good, text_len_at, "\x01\x10", 2, "a text length above the maximum");
    expect_rejected(&good, text_len_at + 2, "\xc3", 1, "a text that is not UTF-8");

    /* Too small a vector buffer for the record. */
    char err[128];
    T_CHECK_INT(vrec_decode(good.data, good.len, &out, vbuf, 4, err, sizeof(err)), -1);
    T_CHECK(strstr(err, "dimension") != NULL);

    /* A float16 infinity. */
    struct pc_buf h = PC_BUF_INIT;
    T_CHECK_INT(vrec_encode(&in, VREC_F16, &h), 0);
    expect_rejected(&h, vec_at, "\x00\x7c", 2, "a float16 infinity");
    pc_buf_free(&h);
    pc_buf_free(&good);
}

/* Issue 20.5: times beyond VREC_TIME_MAX and vectors without a direction, both ways. */
static void test_forged_ranges(void)
{
    float v[8], zero[8] = {0}, tiny[8] = {1e-9f};
    rand_unit(v, 8);
    struct vrec in = sample(v, 8, "hello"), out;
    snprintf(in.space, sizeof(in.space), "sp");
    struct pc_buf good = PC_BUF_INIT, h = PC_BUF_INIT, b = PC_BUF_INIT;
    T_CHECK_INT(vrec_encode(&in, VREC_F32, &good), 0);
    T_CHECK_INT(vrec_encode(&in, VREC_F16, &h), 0);
    size_t created_at = 8 + 2 + 32, vec_at = created_at + 16;
    int64_t past_max = VREC_TIME_MAX + 1, max = INT64_MAX;
    expect_rejected(&good, created_at, &past_max, 8, "a creation time past VREC_TIME_MAX");
    expect_rejected(&good, created_at, &max, 8, "the largest creation time");
    expect_rejected(&good, created_at + 8, &past_max, 8, "an expiry past VREC_TIME_MAX");
    unsigned char zeros[4 * 8] = {0}, negzero16[2 * 8];
    for (size_t i = 0; i < sizeof(negzero16); i += 2) {
        negzero16[i] = 0x00;
        negzero16[i + 1] = 0x80;
    }
    expect_rejected(&good, vec_at, zeros, sizeof(zeros), "a zero vector (float32)");
    expect_rejected(&h, vec_at, negzero16, sizeof(negzero16), "a zero vector (float16 -0)");
    /* The largest times still decode. */
    struct vrec edge = in;
    edge.created_ms = edge.expires_ms = VREC_TIME_MAX;
    T_CHECK_INT(vrec_encode(&edge, VREC_F32, &b), 0);
    T_CHECK_INT(decode(&b, &out), 0);
    T_CHECK_INT(out.created_ms, VREC_TIME_MAX);
    /* The encoder refuses what the decoder would. */
    pc_buf_reset(&b);
    edge.created_ms = VREC_TIME_MAX + 1;
    T_CHECK_INT(vrec_encode(&edge, VREC_F32, &b), -1);
    struct vrec z = sample(zero, 8, "zero");
    T_CHECK_INT(vrec_encode(&z, VREC_F32, &b), -1);
    z = sample(tiny, 8, "tiny");
    T_CHECK_INT(vrec_encode(&z, VREC_F32, &b), 0); /* fine as float32 ... */
    pc_buf_reset(&b);
    T_CHECK_INT(vrec_encode(&z, VREC_F16, &b), -1); /* ... zero as float16 */
    T_CHECK_INT(b.len, 0);
    pc_buf_free(&b);
    pc_buf_free(&h);
    pc_buf_free(&good);
}

int main(void)
{
    T_RUN(test_f16);
    T_RUN(test_round_trip);
    T_RUN(test_f16_similarity_error);
    T_RUN(test_text_cap);
    T_RUN(test_encode_rejects);
    T_RUN(test_decode_rejects);
    T_RUN(test_forged_ranges);
    T_DONE();
}
