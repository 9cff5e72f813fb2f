/*
 * pc_canon.h - canonical form of a request and the cache keys derived from it.
 *
 * Canonical JSON: object members sorted by key (bytewise on UTF-8; but every
 * object within a member named parameters, input_schema, schema, input or
 * input_examples below the top level, or guided_json, json_schema or
 * structured_outputs at the top level, keeps document order: JSON schemas and
 * tool inputs, which the upstream renders into the prompt as written and
 * whose properties' order is the order structured outputs are generated in;
 * duplicate keys: the last one wins, as in most JSON parsers, but the keys of a request
 * that repeats a member name are unique to it: see canon_keys.repeated), no
 * insignificant white space, strings re-escaped from their decoded value (so "\u00e9" and "é" are
 * equal), numbers in one form (below).
 *
 * Numbers. The rule is "every digit the upstream would read": the upstreams'
 * JSON parsers (Python's json, serde, ...) read a literal with a fraction or
 * an exponent as an IEEE double, and a literal of digits only as an exact
 * integer, and tell the two apart (Python writes a tool schema's
 * {"default": 1.0} into the prompt as 1.0, {"default": 1} as 1). So:
 *   - an integer literal is its integer: below 2^53 in digits ("1", "-0" is
 *     "0"); of magnitude 2^53 or more it keeps its digits (leading zeros
 *     dropped, sign kept), so 9007199254740993 never shares a key with
 *     9007199254740992, and 100000000000000000000 none with the float 1e20;
 *   - a literal with a fraction or an exponent is its double, in the shortest
 *     form that round-trips through strtod ("0.1000000000000000055511" is
 *     "0.1", as the upstream reads it); an integral one is marked as a float
 *     ("1.0", "1e0" and "10E-1" are all "1.0", "-0.0" stays "-0.0"), so it
 *     never shares a key with the integer;
 *   - except a number that is a member of the request's top level: that is
 *     a parameter (temperature, top_p, max_tokens, seed...), which the
 *     upstream reads as a value, so "1", "1.0" and "1e0" are all "1" there.
 * cJSON keeps only the double, so the digits and the spelling come from the
 * raw body text (canon_input.raw), whose number literals are visited in
 * document order - the order of cJSON's children. Without the raw text (or
 * if it does not match the tree), a number whose literal cannot be told from
 * its neighbours - an integral value of magnitude 2^53 or more, an overflow
 * to infinity, or any integral value below the top level - makes the keys
 * unique (canon_keys.lossy), so such a request is never answered with an
 * entry stored for another number.
 *
 * Exact key  = SHA-256("pc-exact-1" | tenant | namespace | endpoint |
 *              variant | canonical body without the excluded fields)
 * Partition  = the same with the last user turn removed (semantic cache),
 *              and, for a last user turn of several lines, its line layout
 *              (each line's indentation and the blank lines between them):
 *              embedders fold line breaks and indentation, which change what
 *              code, a list or a poem says; a one-line turn adds nothing.
 * Excluded top-level fields (they do not change the answer): stream,
 * stream_options, user, metadata, store, service_tier, prompt_cache_key,
 * safety_identifier. The Responses API (/v1/responses) excludes only stream
 * and stream_options: its answer echoes the others, and "store" decides
 * whether the answer's id can be used as a previous_response_id later.
 * stream_options.continuous_usage_stats (vLLM, SGLang: usage in every chunk)
 * stays in, when on, as the one member of stream_options: it changes what a
 * stream carries.
 * Left out of each Anthropic tool definition (/v1/messages "tools"):
 * eager_input_streaming, which changes only how a stream delivers the tool
 * input (@ai-sdk/anthropic adds it to every tool of a streamed call).
 *
 * Last user turn (semantic cache): the trailing user message of "messages"
 * (chat, Anthropic), the "prompt" or "input" string (completions,
 * embeddings), and for the Responses API a string "input" or the trailing
 * user message of an "input" item list; its text, when it is made of text
 * parts only. The partition keeps a stub of that turn without its content.
 */
#ifndef PC_CANON_H
#define PC_CANON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pc_api.h"
#include "pc_util.h"

/* Append the canonical serialisation of v (numbers from their doubles only). */
void canon_json(const cJSON *v, struct pc_buf *out);
/*
 * The same, keeping every digit of integer literals a double cannot hold:
 * raw[0..len) is the text v was parsed from. Returns 0, or -1 (nothing
 * appended) if raw does not match v.
 */
int canon_json_text(const cJSON *v, const char *raw, size_t len, struct pc_buf *out);
/* Canonical text of a number into out (NUL-terminated); returns its length. */
size_t canon_number(double d, char out[40]);
/* Whether a top-level request field is left out of the keys (every endpoint but responses). */
bool canon_field_excluded(const char *name);

struct canon_input {
    enum api_endpoint endpoint;
    const cJSON *body;
    const unsigned char *tenant; /* PC_SHA256_LEN bytes (canon_tenant) */
    const char *ns;              /* X-Cache-Namespace value or NULL */
    const char *variant; /* other answer-changing inputs, e.g. "anthropic-version=...\n"; or NULL */
    bool exact_only;     /* skip the partition and last_user_text (no semantic cache) */
    /* The bytes body was parsed from, so that integer literals keep every digit (see
     * Numbers above). Optional, but without it a request with an integral number of
     * magnitude >= 2^53 gets unique keys (lossy). */
    const char *raw;
    size_t raw_len;
};

struct canon_keys {
    unsigned char exact[PC_SHA256_LEN];
    unsigned char partition[PC_SHA256_LEN];
    char *last_user_text; /* text of the last user turn (for embedding), or NULL (none, or an
                             answer that repeats the prompt: echo, prompt_logprobs); owned */
    bool lossy;           /* a number may have lost digits and raw was missing or did not match: the
                             keys are unique to this call (never hit, never shared); better bypass */
    bool repeated;        /* an object of the body names a member twice: the keys are unique to this
                             call too (which copy counts is the upstream parser's choice: the last
                             for Python, Go and JavaScript, the first for RapidJSON, yyjson or gjson,
                             an error for serde); better bypass */
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
