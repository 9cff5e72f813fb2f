/*
 * pc_vrec.h - the vector record: what Redis keeps next to a cached entry that
 * has a vector (and what the vector stream carries), so every proxy instance
 * can rebuild its index from Redis alone.
 *
 * Layout (little-endian, no padding):
 *
 *   "PCV" 0x01            magic and format version
 *   flags        u8       bit 0: vector stored as float16 (else float32); others 0
 *   space_len    u8       1..VREC_SPACE_MAX
 *   space        bytes    the embedding space: embedder and version, printable ASCII
 *   dim          u16      1..VINDEX_DIM_MAX
 *   partition    32 bytes
 *   created_ms   i64      wall clock, 0..VREC_TIME_MAX
 *   expires_ms   i64      wall clock, 0..VREC_TIME_MAX (0: no expiry)
 *   vector       dim x (2 or 4 bytes), every component finite, not all zero
 *   text_len     u16      0..VREC_TEXT_MAX
 *   text         bytes    the last user turn, well-formed UTF-8
 *
 * and nothing after. Vectors of different spaces are never compared: the
 * space names the embedder and its version. float16 halves the record (a
 * 100-d vector: 200 bytes instead of 400) and moves the cosine similarity of
 * two unit vectors by 2e-5 on average, 1.5e-4 at worst (20000 pairs, measured
 * by tests/unit/test_vrec.c), far below any useful threshold step: writers
 * should use VREC_F16.
 *
 * Decoding trusts nothing (the bytes come from Redis): every length, field
 * and component is checked, and a record that decodes re-encodes to the same
 * bytes.
 */
#ifndef PC_VREC_H
#define PC_VREC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"
#include "pc_vindex.h"

#define VREC_SPACE_MAX 64
#define VREC_TEXT_MAX  4096
#define VREC_TIME_MAX  (INT64_C(1) << 53) /* ms: year 285,000; differences cannot overflow */
/* The largest record: float32 vector of VINDEX_DIM_MAX and the longest text. */
#define VREC_MAX_LEN \
    (4 + 2 + VREC_SPACE_MAX + 2 + VINDEX_PART_LEN + 16 + 4 * VINDEX_DIM_MAX + 2 + VREC_TEXT_MAX)

enum vrec_fmt {
    VREC_F32 = 0,
    VREC_F16 = 1,
};

struct vrec {
    char space[VREC_SPACE_MAX + 1]; /* NUL-terminated */
    unsigned dim;
    unsigned char partition[VINDEX_PART_LEN];
    int64_t created_ms;
    int64_t expires_ms;
    enum vrec_fmt fmt; /* decode: how the vector was stored */
    const float *vec;  /* encode: dim components; decode: the caller's vec_buf */
    const char *text;  /* decode: points into the decoded bytes */
    size_t text_len;
};

/*
 * Append r's record to out. Text longer than VREC_TEXT_MAX is cut at a UTF-8
 * character boundary. 0, or -1 (nothing appended) if the space is empty, too
 * long or not printable, dim is out of range, a component is not finite (or
 * out of float16's range with VREC_F16), the vector is zero, a time is out of
 * the ranges above, or the text is not UTF-8.
 */
int vrec_encode(const struct vrec *r, enum vrec_fmt fmt, struct pc_buf *out);

/*
 * Decode data[0..len) into r; the vector goes to vec_buf (room for vec_cap
 * floats) and r->text points into data. 0, or -1 with the reason in err.
 */
int vrec_decode(const void *data, size_t len, struct vrec *r, float *vec_buf, size_t vec_cap,
                char *err, size_t errlen);

/* float32 <-> float16 (IEEE binary16, round to nearest even); exposed for tests. */
uint16_t vrec_f32_to_f16(float f);
float vrec_f16_to_f32(uint16_t h);

#endif
