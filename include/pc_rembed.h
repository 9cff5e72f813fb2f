/*
 * pc_rembed.h - the remote embedder (`embedder openai`): texts are sent to an
 * OpenAI-compatible embeddings endpoint (OpenAI, vLLM, TEI, Ollama, ...)
 * from the worker's event loop. Texts that arrive in the same loop pass are
 * batched into one call (up to embedder-batch inputs). A call that fails or
 * takes longer than embedder-timeout fails every text in it: the caller
 * treats that as a semantic miss, never as an error of the request.
 */
#ifndef PC_REMBED_H
#define PC_REMBED_H

#include <stddef.h>
#include <stdint.h>

struct conf;
struct event_base;
struct rembed;
struct rembed_req;
struct stats;
struct upstream;

/* vec: unit length, dim components, valid during the call; NULL when it failed. */
typedef void rembed_fn(void *arg, const float *vec, int dim);

/* The endpoint URL for embedder-url: as given if it ends in /embeddings, else + /v1/embeddings. */
void rembed_url(const char *configured, char *out, size_t outlen);
/* Names the vector space: "openai:" + embedder-model (+ the URL's host when no model). */
void rembed_space(const struct conf *c, char *out, size_t outlen);

struct rembed *rembed_create(const struct conf *c, struct event_base *base, struct upstream *up,
                             struct stats *st);
/* Requests still outstanding get their callback (vec NULL) before this returns. */
void rembed_destroy(struct rembed **r);

/* NULL (no callback) if it cannot be queued; else cb runs once, unless cancelled. */
struct rembed_req *rembed_submit(struct rembed *r, const char *text, size_t len, rembed_fn *cb,
                                 void *arg);
void rembed_cancel(struct rembed_req **q);

#endif
