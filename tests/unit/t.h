/*
 * t.h - the unit tests' tiny harness. A test file defines test functions,
 * lists them in main with T_RUN, and ends with T_DONE. A failed check prints
 * file:line and the expression, and the binary exits non-zero at the end.
 */
#ifndef PC_T_H
#define PC_T_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures;
static int t_checks;

#define T_CHECK(cond)                                                                \
    do {                                                                             \
        t_checks++;                                                                  \
        if (!(cond)) {                                                               \
            t_failures++;                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define T_CHECK_STR(a, b)                                                                  \
    do {                                                                                   \
        const char *t_a_ = (a), *t_b_ = (b);                                               \
        t_checks++;                                                                        \
        if (t_a_ == NULL || t_b_ == NULL || strcmp(t_a_, t_b_) != 0) {                     \
            t_failures++;                                                                  \
            fprintf(stderr, "%s:%d: %s == %s failed:\n  got:  %s\n  want: %s\n", __FILE__, \
                    __LINE__, #a, #b, t_a_ ? t_a_ : "(null)", t_b_ ? t_b_ : "(null)");     \
        }                                                                                  \
    } while (0)

#define T_CHECK_INT(a, b)                                                                        \
    do {                                                                                         \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                                  \
        t_checks++;                                                                              \
        if (t_a_ != t_b_) {                                                                      \
            t_failures++;                                                                        \
            fprintf(stderr, "%s:%d: %s == %s failed: got %lld, want %lld\n", __FILE__, __LINE__, \
                    #a, #b, t_a_, t_b_);                                                         \
        }                                                                                        \
    } while (0)

#define T_RUN(fn)                                                                     \
    do {                                                                              \
        int t_before_ = t_failures;                                                   \
        fn();                                                                         \
        fprintf(stderr, "  %s %s\n", t_failures == t_before_ ? "ok  " : "FAIL", #fn); \
    } while (0)

#define T_DONE()                                                         \
    do {                                                                 \
        fprintf(stderr, "%d checks, %d failed\n", t_checks, t_failures); \
        return t_failures ? 1 : 0;                                       \
    } while (0)

#endif
