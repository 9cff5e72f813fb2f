/*
 * vrec.c - the vector record codec (layout in pc_vrec.h). Owns nothing: it
 * encodes into the caller's buffer and decodes into the caller's struct.
 */
#include "pc_vrec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const unsigned char vrec_magic[4] = {'P', 'C', 'V', 0x01};

#define FLAG_F16       0x01
#define FIXED_TAIL     (2 + VINDEX_PART_LEN + 8 + 8) /* dim, partition, two times */
#define F16_OVERFLOW   0x477ff000u                   /* 65520.0f: rounds to infinity */
#define F16_MIN_NORMAL 0x38800000u                   /* 2^-14 */

/* --- float16 ------------------------------------------------------------------------ */

uint16_t vrec_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00; /* NaN */
    if (a >= F16_OVERFLOW)
        return sign | 0x7c00; /* infinity */
    if (a < F16_MIN_NORMAL) {
        /* Subnormal: a multiple of 2^-24; the scaling is exact, rint rounds to even. */
        float mag;
        memcpy(&mag, &a, sizeof(mag));
        return sign | (uint16_t)rintf(mag * 16777216.0f);
    }
    uint32_t h = ((a >> 23) - 112) << 10 | (a & 0x7fffff) >> 13, rest = a & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is the right answer */
    return sign | (uint16_t)h;
}

float vrec_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    if (e == 0) {
        float f = (float)m / 16777216.0f;
        return sign ? -f : f;
    }
    x = e == 31 ? sign | 0x7f800000u | m << 13 : sign | (e + 112) << 23 | m << 13;
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/* --- helpers ---------------------------------------------------------------------------- */

static bool space_ok(const char *s, size_t n)
{
    if (n == 0 || n > VREC_SPACE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

/* Length of the well-formed UTF-8 character at s[0..n) (RFC 3629), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* No overlong forms, surrogates or code points above U+10FFFF. */
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || (c == 0xf0 && s[1] < 0x90) ||
        (c == 0xf4 && s[1] > 0x8f))
        return 0;
    return len;
}

static bool utf8_ok(const char *s, size_t n)
{
    for (size_t i = 0, k; i < n; i += k)
        if ((k = utf8_char((const unsigned char *)s + i, n - i)) == 0)
            return false;
    return true;
}

/* The longest prefix of s[0..n) of at most max bytes that ends on a character boundary. */
static size_t utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}

static void put_u16(struct pc_buf *b, unsigned v)
{
    unsigned char x[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    pc_buf_append(b, x, 2);
}

static void put_i64(struct pc_buf *b, int64_t v)
{
    unsigned char x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (unsigned char)((uint64_t)v >> (8 * i));
    pc_buf_append(b, x, 8);
}

static unsigned get_u16(const unsigned char *p)
{
    return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static int64_t get_i64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* Every component finite (and within float16's range for VREC_F16), one of them not zero. */
static bool vector_ok(const float *v, unsigned dim, enum vrec_fmt fmt)
{
    bool nonzero = false;
    for (unsigned i = 0; i < dim; i++) {
        if (!isfinite(v[i]))
            return false;
        if (fmt == VREC_F16 && (vrec_f32_to_f16(v[i]) & 0x7c00) == 0x7c00)
            return false;
        nonzero |= fmt == VREC_F16 ? (vrec_f32_to_f16(v[i]) & 0x7fff) != 0 : v[i] != 0;
    }
    return nonzero;
}

/* The times of pc_vrec.h's layout: wall clock in 0..VREC_TIME_MAX (expires_ms 0: never). */
static bool times_ok(int64_t created_ms, int64_t expires_ms)
{
    return created_ms >= 0 && created_ms <= VREC_TIME_MAX && expires_ms >= 0 &&
           expires_ms <= VREC_TIME_MAX;
}

/* --- encode ---------------------------------------------------------------------------- */

int vrec_encode(const struct vrec *r, enum vrec_fmt fmt, struct pc_buf *out)
{
    size_t slen = strnlen(r->space, VREC_SPACE_MAX + 1);
    if (r->text_len > 0 && r->text == NULL)
        return -1;
    size_t tlen = r->text_len > 0 ? utf8_cut(r->text, r->text_len, VREC_TEXT_MAX) : 0;
    if (!space_ok(r->space, slen) || r->dim < 1 || r->dim > VINDEX_DIM_MAX ||
        !times_ok(r->created_ms, r->expires_ms) || !utf8_ok(r->text, tlen) ||
        !vector_ok(r->vec, r->dim, fmt))
        return -1;
    pc_buf_append(out, vrec_magic, sizeof(vrec_magic));
    unsigned char hdr[2] = {fmt == VREC_F16 ? FLAG_F16 : 0, (unsigned char)slen};
    pc_buf_append(out, hdr, 2);
    pc_buf_append(out, r->space, slen);
    put_u16(out, r->dim);
    pc_buf_append(out, r->partition, VINDEX_PART_LEN);
    put_i64(out, r->created_ms);
    put_i64(out, r->expires_ms);
    for (unsigned i = 0; i < r->dim; i++) {
        if (fmt == VREC_F16) {
            put_u16(out, vrec_f32_to_f16(r->vec[i]));
        } else {
            uint32_t x;
            memcpy(&x, &r->vec[i], sizeof(x));
            put_u16(out, x & 0xffff);
            put_u16(out, x >> 16);
        }
    }
    put_u16(out, (unsigned)tlen);
    if (tlen > 0)
        pc_buf_append(out, r->text, tlen);
    return 0;
}

/* --- decode ---------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *fmt, ...) PC_PRINTF(3, 4);

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The vector at p (dim components of the record's format) into out; false if one is not
 * finite or all are zero (a zero vector has no direction to compare). */
static bool read_vector(const unsigned char *p, unsigned dim, enum vrec_fmt fmt, float *out)
{
    bool nonzero = false;
    for (unsigned i = 0; i < dim; i++) {
        if (fmt == VREC_F16) {
            out[i] = vrec_f16_to_f32((uint16_t)get_u16(p + 2 * i));
        } else {
            uint32_t x = get_u16(p + 4 * i) | (uint32_t)get_u16(p + 4 * i + 2) << 16;
            memcpy(&out[i], &x, sizeof(x));
        }
        if (!isfinite(out[i]))
            return false;
        nonzero |= out[i] != 0;
    }
    return nonzero;
}

int vrec_decode(const void *data, size_t len, struct vrec *r, float *vec_buf, size_t vec_cap,
                char *err, size_t errlen)
{
    const unsigned char *p = data, *end = p + len;
    if (len < sizeof(vrec_magic) + 2 || memcmp(p, vrec_magic, sizeof(vrec_magic)) != 0)
        return fail(err, errlen, "not a vector record (magic or version)");
    unsigned flags = p[4], slen = p[5];
    if (flags & ~FLAG_F16)
        return fail(err, errlen, "unknown flags 0x%02x", flags);
    p += 6;
    if (slen == 0 || slen > VREC_SPACE_MAX || (size_t)(end - p) < slen + FIXED_TAIL)
        return fail(err, errlen, "bad space length %u", slen);
    if (!space_ok((const char *)p, slen))
        return fail(err, errlen, "space is not printable ASCII");
    memcpy(r->space, p, slen);
    r->space[slen] = '\0';
    p += slen;
    r->dim = get_u16(p);
    memcpy(r->partition, p + 2, VINDEX_PART_LEN);
    r->created_ms = get_i64(p + 2 + VINDEX_PART_LEN);
    r->expires_ms = get_i64(p + 10 + VINDEX_PART_LEN);
    p += FIXED_TAIL;
    if (!times_ok(r->created_ms, r->expires_ms))
        return fail(err, errlen, "time out of range (created %lld, expires %lld)",
                    (long long)r->created_ms, (long long)r->expires_ms);
    r->fmt = flags & FLAG_F16 ? VREC_F16 : VREC_F32;
    size_t vbytes = (size_t)r->dim * (r->fmt == VREC_F16 ? 2 : 4);
    if (r->dim < 1 || r->dim > VINDEX_DIM_MAX || r->dim > vec_cap)
        return fail(err, errlen, "bad dimension %u", r->dim);
    if ((size_t)(end - p) < vbytes + 2)
        return fail(err, errlen, "truncated vector");
    if (!read_vector(p, r->dim, r->fmt, vec_buf))
        return fail(err, errlen, "vector component not finite, or every one zero");
    r->vec = vec_buf;
    p += vbytes;
    r->text_len = get_u16(p);
    p += 2;
    if (r->text_len > VREC_TEXT_MAX || (size_t)(end - p) != r->text_len)
        return fail(err, errlen, "text length %zu does not match the %zu bytes left", r->text_len,
                    (size_t)(end - p));
    r->text = (const char *)p;
    if (!utf8_ok(r->text, r->text_len))
        return fail(err, errlen, "text is not UTF-8");
    return 0;
}
