/*
 * fuzz_vrec.c - libFuzzer target for the vector record codec (src/vrec.c),
 * which decodes bytes read from Redis.
 *
 * Input: any bytes, decoded as a record. Checked, aborting on violation:
 *   - decoding never reads past the input (ASan) and either fails or yields
 *     a record within the documented limits;
 *   - a record that decodes re-encodes (same vector format) to exactly the
 *     input bytes;
 *   - re-encoded in the other vector format, it decodes to the same fields,
 *     with the vector equal (float16 -> float32) or within float16's
 *     rounding (float32 -> float16), unless float16 cannot hold a component.
 * Seed corpus: tests/fuzz/corpus/vrec/ (valid records of both formats,
 * and near misses).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_vrec.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static float vec[VINDEX_DIM_MAX], vec2[VINDEX_DIM_MAX];

static void check_limits(const struct vrec *r)
{
    size_t slen = strlen(r->space);
    CHECK(slen >= 1 && slen <= VREC_SPACE_MAX);
    CHECK(r->dim >= 1 && r->dim <= VINDEX_DIM_MAX);
    CHECK(r->created_ms >= 0 && r->expires_ms >= 0);
    CHECK(r->text_len <= VREC_TEXT_MAX);
    for (unsigned i = 0; i < r->dim; i++)
        CHECK(isfinite(r->vec[i]));
}

/* r re-encoded in the other format decodes to the same record. */
static void check_other_format(const struct vrec *r)
{
    enum vrec_fmt other = r->fmt == VREC_F16 ? VREC_F32 : VREC_F16;
    struct pc_buf b = PC_BUF_INIT;
    if (vrec_encode(r, other, &b) < 0) {
        CHECK(other == VREC_F16); /* only a component beyond float16's range may refuse */
        pc_buf_free(&b);
        return;
    }
    struct vrec d;
    char err[128];
    CHECK(vrec_decode(b.data, b.len, &d, vec2, VINDEX_DIM_MAX, err, sizeof(err)) == 0);
    CHECK(strcmp(d.space, r->space) == 0 && d.dim == r->dim && d.fmt == other);
    CHECK(memcmp(d.partition, r->partition, VINDEX_PART_LEN) == 0);
    CHECK(d.created_ms == r->created_ms && d.expires_ms == r->expires_ms);
    CHECK(d.text_len == r->text_len && memcmp(d.text, r->text, d.text_len) == 0);
    for (unsigned i = 0; i < r->dim; i++) {
        if (other == VREC_F32)
            CHECK(memcmp(&d.vec[i], &r->vec[i], sizeof(float)) == 0);
        else
            CHECK(fabsf(d.vec[i] - r->vec[i]) <= fabsf(r->vec[i]) * 0x1p-11f + 0x1p-25f);
    }
    pc_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vrec r;
    char err[128];
    if (vrec_decode(data, size, &r, vec, VINDEX_DIM_MAX, err, sizeof(err)) < 0)
        return 0;
    check_limits(&r);
    struct pc_buf b = PC_BUF_INIT;
    CHECK(vrec_encode(&r, r.fmt, &b) == 0);
    CHECK(b.len == size && memcmp(b.data, data, size) == 0);
    pc_buf_free(&b);
    check_other_format(&r);
    return 0;
}
