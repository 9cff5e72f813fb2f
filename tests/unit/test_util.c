/*
 * test_util.c - the decimal formatting used on hot paths in place of
 * printf: every digit, both ends of the ranges, signs.
 */
#include "t.h"

#include <inttypes.h>
#include <stdint.h>

#include "pc_util.h"

static void test_u64_dec(void)
{
    const uint64_t v[] = {0, 1, 9, 10, 99, 100, 4096, 1234567890123ULL, UINT64_MAX};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char got[21], want[32];
        size_t n = pc_u64_dec(v[i], got);
        snprintf(want, sizeof(want), "%" PRIu64, v[i]);
        T_CHECK_STR(got, want);
        T_CHECK_INT(n, strlen(want));
    }
}

static void test_append_i64(void)
{
    const int64_t v[] = {0, -1, 1, -10, 42, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    struct pc_buf b = PC_BUF_INIT, want = PC_BUF_INIT;
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        pc_buf_append_i64(&b, v[i]);
        pc_buf_append_char(&b, ',');
        pc_buf_printf(&want, "%" PRId64 ",", v[i]);
    }
    T_CHECK_STR(pc_buf_cstr(&b), pc_buf_cstr(&want));
    pc_buf_free(&b);
    pc_buf_free(&want);
}

int main(void)
{
    T_RUN(test_u64_dec);
    T_RUN(test_append_i64);
    T_DONE();
}
