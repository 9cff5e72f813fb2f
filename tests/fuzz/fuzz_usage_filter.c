/*
 * fuzz_usage_filter.c - libFuzzer target for the stream usage filter
 * (sse_usage_filter_*, src/sse.c) and the JSON span scanner under it
 * (src/jedit.c), which read upstream bytes.
 *
 * Input: byte 0 seeds the feeding pattern; the rest is a stream. Checked,
 * aborting on violation:
 *   - feeding the filter in random-sized pieces gives the same output as
 *     feeding it all at once;
 *   - the output is never longer than the input, and filtering it again
 *     changes nothing;
 *   - every span the scanner reports lies inside the text, and iterating a
 *     container ends.
 * Seed corpus: tests/fuzz/corpus/usage_filter/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_jedit.h"
#include "pc_sse.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void filter(const char *s, size_t len, uint32_t seed, bool pieces, struct pc_buf *out)
{
    struct sse_usage_filter f;
    sse_usage_filter_init(&f);
    for (size_t pos = 0, k; pos < len; pos += k) {
        seed = seed * 1103515245u + 12345u;
        k = pieces ? 1 + (seed >> 16) % ((seed >> 8) & 1 ? 5 : 61) : len;
        k = k < len - pos ? k : len - pos;
        sse_usage_filter_feed(&f, s + pos, k, out);
    }
    sse_usage_filter_end(&f, out);
    sse_usage_filter_free(&f);
}

static void scan(const char *s, size_t len)
{
    struct jspan v, name, el;
    for (size_t pos = 0; pos < len && pos < 64; pos++) {
        if (!jedit_value(s, len, pos, &v))
            continue;
        CHECK(v.start >= pos && v.start < v.end && v.end <= len);
        size_t cur = 0, n = 0;
        while (jedit_next(s, &v, &cur, &name, &el)) {
            CHECK(el.start > v.start && el.end < v.end);
            CHECK(++n <= len);
        }
        jedit_member(s, &v, "usage", NULL, NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t seed = data[0];
    const char *s = (const char *)data + 1;
    size_t len = size - 1;
    struct pc_buf whole = PC_BUF_INIT, split = PC_BUF_INIT, again = PC_BUF_INIT;
    filter(s, len, seed, false, &whole);
    filter(s, len, seed, true, &split);
    CHECK(whole.len == split.len &&
          (whole.len == 0 || memcmp(whole.data, split.data, whole.len) == 0));
    CHECK(whole.len <= len);
    filter(whole.data, whole.len, seed, true, &again);
    CHECK(again.len == whole.len &&
          (whole.len == 0 || memcmp(again.data, whole.data, whole.len) == 0));
    scan(s, len);
    pc_buf_free(&whole);
    pc_buf_free(&split);
    pc_buf_free(&again);
    return 0;
}
