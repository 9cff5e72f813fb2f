/*
 * pc_chain.h - the prefix chain of a request: its prompt cut into links
 * whose hashes name every prefix, so that two requests sharing a prompt
 * prefix share the leading links of their chains.
 *
 *   segments:  [tools] [system] [message 0] [message 1] ... (chat, messages)
 *              [prompt]                                      (completions)
 *   links:     each segment cut into CHAIN_CHUNK_BYTES pieces of its text
 *              (on UTF-8 boundaries); a short segment is one link
 *   hashes:    h[-1] = root = H(tenant, endpoint, model)
 *              h[i]  = H(h[i-1] ‖ segment header if first piece ‖ piece i)
 *
 * The text of a segment is what the model is shown: a message's role (and
 * name) as its header, its content (a string, or its parts: text as text,
 * anything else as canonical JSON) and any other members (tool calls) as
 * canonical JSON; tools as canonical JSON; Anthropic's system as text. So
 * member order, white space and escapes do not change a chain, while any
 * change of the prompt changes every link from there on.
 *
 * Why 1024 bytes: engines keep KV state in blocks (vLLM: 16 tokens, SGLang:
 * a radix tree of pages, OpenAI: 128-token steps after the first 1024
 * tokens), and a prefix is reusable up to the last whole block both
 * requests share. The index only has to tell which replica holds most of a
 * prompt, so its granularity can be coarser than an engine's block: at
 * about 4 bytes a token a link is ~256 tokens (16 vLLM blocks, two OpenAI
 * steps), so a match is found to within ~256 tokens - small next to the
 * thousands a shared system prompt or conversation history is worth - while
 * a 100k-token prompt needs only ~400 index entries. Segment ends are
 * always link ends, so a prompt that continues an earlier one (the next
 * turn of a chat) matches it up to its very last byte.
 *
 * Hashes are 64 bits of SHA-256: the index is a routing hint, not a key to
 * stored data, so a collision only costs a less good choice of replica.
 * Pure functions; a chain owns its arrays (chain_free).
 */
#ifndef PC_CHAIN_H
#define PC_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pc_api.h"
#include "pc_util.h"

#define CHAIN_CHUNK_BYTES 1024
#define CHAIN_MAX_LINKS   4096 /* links beyond (a prompt over ~4 MiB) are not indexed */

enum chain_seg_kind {
    CHAIN_SEG_TOOLS = 0,
    CHAIN_SEG_SYSTEM,  /* Anthropic's system, or an OpenAI system/developer message */
    CHAIN_SEG_MESSAGE, /* a conversation turn */
    CHAIN_SEG_PROMPT,  /* /v1/completions */
};

struct chain_seg {
    enum chain_seg_kind kind;
    uint32_t item;   /* index in "messages" for messages, else 0 */
    uint32_t first;  /* its first link */
    uint32_t nlinks; /* 0 if the chain was cut (CHAIN_MAX_LINKS) before it */
};

struct chain {
    uint64_t root;
    size_t n;      /* links */
    uint64_t *h;   /* h[0..n): never 0 */
    uint32_t *end; /* end[i]: prompt bytes up to the end of link i */
    size_t nseg;   /* segments */
    struct chain_seg *seg;
    size_t stable;  /* links of the leading tools and system segments */
    bool truncated; /* the prompt had more than CHAIN_MAX_LINKS links */
};

struct chain_input {
    enum api_endpoint endpoint;
    const cJSON *body;
    const unsigned char *tenant; /* PC_SHA256_LEN bytes; NULL: shared by all tenants */
};

/*
 * Build the chain of a request into c (overwritten). Embeddings and
 * pass-through requests have no prompt to reuse: c->n is 0 then.
 */
void chain_build(const struct chain_input *in, struct chain *c);
void chain_free(struct chain *c);
/* Deep copy (dst overwritten). */
void chain_copy(struct chain *dst, const struct chain *src);

/* Prompt bytes up to the end of link i (0 for i < 0 or no links). */
size_t chain_bytes(const struct chain *c, long i);
/*
 * The key that names the request's conversation: the hash of the first
 * link after the tools and system segments (the start of the first turn),
 * or of the last link when there is none; 0 for an empty chain.
 */
uint64_t chain_prefix_key(const struct chain *c);

#endif
