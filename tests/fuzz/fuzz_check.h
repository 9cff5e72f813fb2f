/*
 * fuzz_check.h - CHECK, the property test every fuzz target shares: a check
 * that fails says which one and aborts, which libFuzzer and the corpus
 * replay of `make test` report as a crash of that input.
 */
#ifndef PC_FUZZ_CHECK_H
#define PC_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif
