/*
 * backend/backends.h - the upstream types, one line each: X(ID, NAME), where
 * NAME is the `upstream-type` value and backend_ID the operations table of
 * src/backend/ID.c. The config table reads the names from here (conf.c:
 * validation, -t, --help and the sample config) and backend.c builds the
 * table behind backend_for from the same lines, so the value struct conf
 * holds is a position in this list. No includes: anything may read it.
 *
 * Adding an upstream type: its file, src/backend/ID.c, and its line here.
 */
#ifndef PC_BACKEND_BACKENDS_H
#define PC_BACKEND_BACKENDS_H

#define BACKEND_LIST(X)                                                \
    X(openai, "openai") /* the first is the fallback of backend_for */ \
    X(anthropic, "anthropic")                                          \
    X(vllm, "vllm")                                                    \
    X(sglang, "sglang")                                                \
    /* one line per upstream type, in the order of the values conf holds */

#endif
