/*
 * pc_memo.h - a worker's memory of the request bodies it has read.
 *
 * Most of what a cache hit costs the proxy itself is reading the body: the
 * JSON parse, the canonical form and its SHA-256 (pc_canon.h). A repeated
 * request repeats all of it to reach the same keys. The memo keeps, per
 * worker (no lock), what came out of a body last time - the keys, whether it
 * streams, the model - under everything that went in:
 *
 *   endpoint, exact_only, tenant hash, X-Cache-Namespace, the variant text
 *   (cache-key-headers and query), and the body's bytes
 *
 * A lookup compares all of it byte for byte (the 64-bit hash only picks the
 * slot), so a memo answer is the one canon_keys would compute. Bodies whose
 * keys are not safe (pc_canon.h: lossy, \u0000) are never kept; nor are
 * Responses API bodies, whose tenant depends on the body.
 *
 * Bounded: MEMO_SLOTS slots, direct-mapped by hash (a new body replaces the
 * one in its slot), at most MEMO_MAX_BYTES of entries and bodies of at most
 * MEMO_MAX_BODY bytes. Credentials are never kept: only the tenant's hash.
 */
#ifndef PC_MEMO_H
#define PC_MEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_util.h"

#define MEMO_SLOTS     1024
#define MEMO_MAX_BYTES ((size_t)8 << 20)
#define MEMO_MAX_BODY  ((size_t)64 << 10)

struct memo;

/* What a lookup is keyed on (see above). ns and variant may be NULL. */
struct memo_input {
    enum api_endpoint endpoint;
    bool exact_only;
    const unsigned char *tenant; /* PC_SHA256_LEN bytes */
    const char *ns;
    const char *variant;
    const char *raw;
    size_t raw_len;
};

/* What a body was worth. The strings belong to the memo (or, for memo_put, the caller). */
struct memo_facts {
    bool stream;
    bool include_usage;
    unsigned char exact[PC_SHA256_LEN];
    unsigned char partition[PC_SHA256_LEN];
    const char *last_user_text; /* or NULL */
    const char *model;          /* or NULL */
};

struct memo *memo_create(void);
void memo_destroy(struct memo **m);

/* The input's hash (it picks the slot): worked out once per request, passed to get and put. */
uint64_t memo_hash(const struct memo_input *in);
/* The facts stored for exactly this input (of that hash), or NULL. Valid until the next memo_put.
 */
const struct memo_facts *memo_get(struct memo *m, const struct memo_input *in, uint64_t hash);
/* Keep f for in (copied), replacing what its slot held; bodies over MEMO_MAX_BODY are skipped. */
void memo_put(struct memo *m, const struct memo_input *in, uint64_t hash,
              const struct memo_facts *f);

/* Entries and bytes held, for tests and /stats. */
size_t memo_count(const struct memo *m);
size_t memo_bytes(const struct memo *m);

#endif
