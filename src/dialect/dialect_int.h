/*
 * dialect_int.h - what the dialects (src/dialect/NAME.c) share and nothing
 * else sees: their operations tables, the JSON helpers they build and read
 * events with (allocation failure aborts, as pc_malloc does), the bounds on
 * what a stream may make them build, and the piece sizes of synthesised
 * text. Defined in src/dialect.c unless inline here.
 */
#ifndef PC_DIALECT_INT_H
#define PC_DIALECT_INT_H

#include <stdint.h>
#include <string.h>

#include "pc_dialect.h"

#define DIALECT_MAX_INDEX  1024   /* choice / tool-call / block index cap: bounds sparse tables */
#define DIALECT_PIECE_SEED 0x5eed /* piece sizes are deterministic: output is reproducible */

/* The dialects, one file each; dialect.c maps the endpoints onto them. */
extern const struct dialect dialect_openai;
extern const struct dialect dialect_anthropic;
extern const struct dialect dialect_responses;

/* OpenAI's error shape, which the Responses API shares (dialect/openai.c). */
void dialect_openai_error_body(int status, const char *text, struct pc_buf *out);

/* cJSON ran out of memory: log and abort. */
PC_NORETURN void dialect_oom(void);

/*
 * Parse s[0..n) as one JSON value with nothing after it (s[n] must be NUL),
 * keeping RFC 8259's rules cJSON does not (pc_json_strict); NULL if not.
 */
cJSON *dialect_parse_json(const char *s, size_t n);
/*
 * Whether j is JSON every reader sees alike: all numbers finite (cJSON reads
 * 1e999 as infinity and writes it back as null) and no duplicate member names
 * (cJSON takes the first, JavaScript clients the last). Events failing this
 * could not survive a cache round trip unchanged, so they count as malformed.
 */
bool dialect_json_sane(const cJSON *j);
/*
 * Whether every number in the JSON text s[0..n) reads back as written once
 * cJSON prints it: an integer keeps its digits (12345678901234567890 would
 * print as 1.2345678901234567e+19) and a number written with a fraction or
 * an exponent keeps one (1.0 would print as 1). Clients that read integers
 * and floats apart (Python's json) see the difference.
 */
bool dialect_numbers_kept(const char *s, size_t n);
/* An event's JSON object, or NULL if it is not one (or not dialect_json_sane). */
cJSON *dialect_parse_object(const char *s, size_t n);
/* A choice / tool-call / block index: an integral number in [0, DIALECT_MAX_INDEX); else -1. */
int dialect_index(const cJSON *v, size_t *out);
/* A token count: a finite non-negative number, else 0; capped far beyond any real count. */
int64_t dialect_tokens(const cJSON *v);
/*
 * Append the JSON text s[0..n) without its white space outside strings (one
 * SSE data line), every other byte as written: numbers keep their spelling
 * and digits, strings their escapes. s is JSON a parser accepted.
 */
void dialect_json_copy(struct pc_buf *b, const char *s, size_t n);
/* Append v serialised compactly; NULL is written as null. */
void dialect_buf_json(struct pc_buf *b, const cJSON *v);
/* Length of the next synthesised piece of s[0..n): 16..64 bytes, extended to a UTF-8 boundary. */
size_t dialect_piece_len(uint32_t *seed, const char *str, size_t n);

/* cJSON allocates with malloc; like pc_malloc, die loudly rather than return NULL. */
static inline cJSON *chk(cJSON *j)
{
    if (j == NULL)
        dialect_oom();
    return j;
}

static inline cJSON *json_dup(const cJSON *v)
{
    return chk(cJSON_Duplicate(v, true));
}

static inline const cJSON *item(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static inline const char *str_of(const cJSON *v)
{
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Add v (owned) to obj under key, replacing the first existing member of that name. */
static inline void obj_set(cJSON *obj, const char *key, cJSON *v)
{
    bool ok = cJSON_GetObjectItemCaseSensitive(obj, key) != NULL
                  ? cJSON_ReplaceItemInObjectCaseSensitive(obj, key, v)
                  : cJSON_AddItemToObject(obj, key, v);
    if (!ok)
        dialect_oom();
}

/* Append copies of src's elements to the array dst. */
static inline void append_items(cJSON *dst, const cJSON *src)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, src)
    {
        cJSON_AddItemToArray(dst, json_dup(e));
    }
}

/* Append v if it is a string. */
static inline void append_str(struct pc_buf *b, const cJSON *v)
{
    if (cJSON_IsString(v))
        pc_buf_append_str(b, v->valuestring);
}

static inline void buf_json_cstr(struct pc_buf *b, const char *s)
{
    pc_buf_json_str(b, s, strlen(s));
}

#endif
