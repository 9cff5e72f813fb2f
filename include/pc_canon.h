/*
 * pc_canon.h - canonical form of a request and the cache keys derived from it.
 *
 * Canonical JSON: object members sorted by key (bytewise on UTF-8; duplicate
 * keys: the last one wins, as in most JSON parsers), no insignificant white
 * space, strings re-escaped from their decoded value (so "\u00e9" and "é" are
 * equal), numbers in one form: integral values of magnitude below 2^53 as
 * integers ("1.0", "1e0" and "1" are all "1"), others in the shortest form
 * that round-trips through strtod, -0 as 0. Numbers are compared as IEEE
 * doubles (integers beyond 2^53 are not interoperable in JSON anyway).
 *
 * Exact key  = SHA-256("pc-exact-1" | tenant | namespace | endpoint |
 *              variant | canonical body without the excluded fields)
 * Partition  = the same with the last user turn removed (semantic cache).
 * Excluded top-level fields (they do not change the answer): stream,
 * stream_options, user, metadata, store, service_tier, prompt_cache_key,
 * safety_identifier.
 */
#ifndef PC_CANON_H
#define PC_CANON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pc_api.h"
#include "pc_util.h"

/* Append the canonical serialisation of v. */
void canon_json(const cJSON *v, struct pc_buf *out);
/* Canonical text of a number into out (NUL-terminated); returns its length. */
size_t canon_number(double d, char out[40]);
/* Whether a top-level request field is left out of the keys. */
bool canon_field_excluded(const char *name);

struct canon_input {
    enum api_endpoint endpoint;
    const cJSON *body;
    const unsigned char *tenant; /* PC_SHA256_LEN bytes (canon_tenant) */
    const char *ns;              /* X-Cache-Namespace value or NULL */
    const char *variant; /* other answer-changing inputs, e.g. "anthropic-version=...\n"; or NULL */
    bool exact_only;     /* skip the partition and last_user_text (no semantic cache) */
};

struct canon_keys {
    unsigned char exact[PC_SHA256_LEN];
    unsigned char partition[PC_SHA256_LEN];
    char *last_user_text; /* text of the last user turn (for embedding), or NULL; owned */
};

/* Fill k from in. Returns 0 (k->last_user_text must be freed with canon_keys_free). */
int canon_keys(const struct canon_input *in, struct canon_keys *k);
void canon_keys_free(struct canon_keys *k);

/*
 * Tenant: SHA-256 over the credentials a client presented (each given as
 * "name=value" lines, e.g. "authorization=Bearer sk-..."; NULL or "" for an
 * anonymous client). For a shared namespace, pass "namespace=<name>" instead.
 */
void canon_tenant(const char *credentials, unsigned char out[PC_SHA256_LEN]);

#endif
