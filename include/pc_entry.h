/*
 * pc_entry.h - a cached answer as stored in Redis, and its key.
 *
 * Value: compact little-endian binary (magic "PCE" + format byte) holding the
 * status, when it was stored, how long the upstream took, the usage block,
 * the content type and the body - the JSON answer, or the SSE events exactly
 * as recorded from a streamed answer - then optional tagged sections (format
 * 2): the response headers replayed on a hit, and whatever later versions
 * add. Decoding validates every length, so a corrupt or foreign value is
 * rejected, never trusted. The layout and the rules for adding a section are
 * at the top of entry.c.
 *
 * Key: PC_KEY_PREFIX "e:{" <tenant id, 16 hex> ":" <exact key, 64 hex> "}", so one
 * tenant's entries can be flushed with a single SCAN pattern. The braces are
 * the key's Redis Cluster hash tag, shared with the entry's vector record
 * (PC_KEY_PREFIX "v:{...}"), so both always live on the same node.
 */
#ifndef PC_ENTRY_H
#define PC_ENTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_util.h"

#define ENTRY_KEY_MAX 128
#define TENANT_ID_LEN 16 /* hex chars of the tenant hash used in keys and logs */

/*
 * The most tokens a decoded usage field may hold: more than any answer has
 * (api.c caps each count an upstream reports at 10^15; Anthropic's prompt
 * sums three of them), and few enough that sums and prices of them cannot
 * overflow.
 */
#define ENTRY_TOKENS_MAX (INT64_C(1) << 52)

/* Response headers kept with an entry (pc_api.h api_header_replayable decides which). */
#define ENTRY_MAX_HEADERS      16
#define ENTRY_HEADER_NAME_MAX  64
#define ENTRY_HEADER_VALUE_MAX 512

/* Section tags (format 2). Append only: a tag's meaning never changes once released. */
enum entry_section {
    ENTRY_SEC_HEADERS = 1,   /* response headers replayed on a hit */
    ENTRY_SEC_USAGE = 2,     /* usage beyond the fixed fields: cache writes */
    ENTRY_SEC_META = 3,      /* what targeted deletes filter on: namespace, model */
    ENTRY_SEC_USAGE_1H = 4,  /* of the cache writes, those kept for an hour */
    ENTRY_SEC_AUDIO = 5,     /* of the prompt and completion tokens, audio */
    ENTRY_SEC_PARTITION = 6, /* the semantic partition of the request that stored it */
};

#define ENTRY_META_MAX 255 /* bytes of a namespace or model name kept in ENTRY_SEC_META */

/*
 * An entry's id as clients see it (X-Cache-Key, DELETE /admin/cache/entries/ID):
 * the tenant id then the exact key, ENTRY_ID_LEN lower-case hex characters.
 * Both are hashes, so the id says nothing about the prompt; it names the
 * Redis key (and so the vector record) exactly.
 */
#define ENTRY_ID_LEN (TENANT_ID_LEN + 2 * PC_SHA256_LEN)

struct entry_header {
    const char *name; /* not NUL-terminated after decode */
    size_t name_len;
    const char *value;
    size_t value_len;
};

enum entry_kind {
    ENTRY_JSON = 0, /* body is the JSON answer */
    ENTRY_SSE = 1,  /* body is the recorded event stream */
};

struct entry {
    enum entry_kind kind;
    enum api_endpoint endpoint;
    int status;
    int64_t created_ms;  /* wall clock */
    uint32_t latency_ms; /* upstream time of the original call */
    struct api_usage usage;
    const char *content_type; /* not NUL-terminated after decode */
    size_t content_type_len;
    const char *body;
    size_t body_len;
    /* Replayed on a hit, in this order. Encoding keeps at most ENTRY_MAX_HEADERS and skips a
     * header whose name or value is too long or not a valid header field; decoding
     * rejects a value that holds such a header. */
    struct entry_header headers[ENTRY_MAX_HEADERS];
    size_t nheaders;
    /* The request's X-Cache-Namespace and "model" (not NUL-terminated after decode; length 0:
     * none, or an entry stored before they were kept). Encoding skips a name longer than
     * ENTRY_META_MAX; decoding rejects a section that holds one. */
    const char *ns;
    size_t ns_len;
    const char *model;
    size_t model_len;
    /* The semantic partition (PC_SHA256_LEN bytes: tenant, namespace, model, parameters,
     * history...) of the request that stored it, when that request could be found by
     * meaning; NULL otherwise, or for an entry stored before it was kept. A semantic hit
     * serves only an entry whose own partition is the request's (pc_semantic.h). */
    const unsigned char *partition;
};

/* Format 1 when e has no section to write (older binaries read it), else format 2. */
void entry_encode(const struct entry *e, struct pc_buf *out);
/* Whether a header can be stored (and so replayed): a token name and a value without
 * control characters other than tab, both within the limits above. */
bool entry_header_valid(const char *name, size_t name_len, const char *value, size_t value_len);
/*
 * Fill e with pointers into buf; 0, or -1 if buf is not a valid entry: every
 * length must match, and every field be in range (a 2xx status, a known kind
 * and endpoint, created_ms in 0..2^53, usage counts in 0..ENTRY_TOKENS_MAX,
 * a content type and headers without control characters).
 */
int entry_decode(const char *buf, size_t len, struct entry *e);
/* Milliseconds since e was stored (0 if its clock is ahead of ours). */
int64_t entry_age_ms(const struct entry *e);

/* Redis key for a tenant id (TENANT_ID_LEN hex chars) and an exact key; returns its length. */
size_t entry_key(const char *tenant_id, const unsigned char key[PC_SHA256_LEN],
                 char out[ENTRY_KEY_MAX]);
/* SCAN pattern for all entries (tenant_id NULL) or one tenant's. */
void entry_pattern(const char *tenant_id, char out[ENTRY_KEY_MAX]);

/* The id of (tenant_id, key) into out (ENTRY_ID_LEN characters and a NUL). */
void entry_id(const char *tenant_id, const unsigned char key[PC_SHA256_LEN],
              char out[ENTRY_ID_LEN + 1]);
/* Parse an id (hex in either case) into tenant_id (NUL-terminated, lower case) and key; 0 or -1. */
int entry_id_parse(const char *id, size_t len, char tenant_id[TENANT_ID_LEN + 1],
                   unsigned char key[PC_SHA256_LEN]);

#endif
