/*
 * pc_rembed.h - the remote embedder (`embedder openai`): texts are sent to an
 * OpenAI-compatible embeddings endpoint (OpenAI, vLLM, TEI, Ollama, ...)
 * from the worker's event loop. Texts that arrive in the same loop pass are
 * batched into one call (up to embedder-batch inputs). A call that fails or
 * takes longer than embedder-timeout fails every text in it: the caller
 * treats that as a semantic miss, never as an error of the request.
 *
 * Each call's outcome goes to the process's circuit breaker (pc_breaker.h):
 * while it is open, rembed_submit refuses texts, except the one that probes
 * it: a background text (no client waiting: a stored answer's vector), or
 * a lookup's when none came for twice the cool-down.
 */
#ifndef PC_REMBED_H
#define PC_REMBED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct breaker;
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

/* brk: the process's breaker for this embedder (shared by every worker), or NULL. */
struct rembed *rembed_create(const struct conf *c, struct event_base *base, struct upstream *up,
                             struct stats *st, struct breaker *brk);
/* Requests still outstanding get their callback (vec NULL) before this returns. */
void rembed_destroy(struct rembed **r);

/*
 * NULL (no callback) if it cannot be queued (the breaker is shut to it);
 * else cb runs once, unless cancelled. background: no client waits for this
 * text, so it is the breaker's preferred probe.
 */
struct rembed_req *rembed_submit(struct rembed *r, const char *text, size_t len, bool background,
                                 rembed_fn *cb, void *arg);
/* Whether rembed_submit would refuse such a text now (the breaker is open to it). */
bool rembed_shut(struct rembed *r, bool background);
void rembed_cancel(struct rembed_req **q);

#endif
