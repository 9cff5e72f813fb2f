/*
 * pc_tally.h - usage counters per hour, per model and per tenant, kept in
 * Redis for `promptcache report`. Each worker adds to its own in-memory rows
 * and flushes them about once a second as HINCRBYs (no lock, no Redis call on
 * the request path); the report sums what every worker and every proxy
 * instance wrote.
 *
 * Redis layout: one hash per UTC hour, PC_KEY_PREFIX "r:YYYYMMDDHH", kept
 * TALLY_KEEP_DAYS; field "METRIC|TENANT|MODEL", value a count. TENANT is the
 * 16-hex tenant id of the access log; MODEL is the request's model with
 * characters outside [A-Za-z0-9._:/@+-] replaced by '_', at most 64 bytes.
 */
#ifndef PC_TALLY_H
#define PC_TALLY_H

#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"

struct event_base;
struct store;
struct tally;

/* ACTION(name, "meaning"): the metrics, in report order. */
#define PC_TALLY_METRICS(ACTION)                                                          \
    ACTION(requests, "cacheable requests answered")                                       \
    ACTION(hits, "answered from the cache")                                               \
    ACTION(misses, "looked up, not found, fetched upstream")                              \
    ACTION(coalesced, "misses that shared another request's upstream call")               \
    ACTION(bypasses, "answered without the cache (BYPASS, REFRESH)")                      \
    ACTION(saved_prompt_tokens, "prompt tokens of answers served from the cache")         \
    ACTION(saved_completion_tokens, "completion tokens of answers served from the cache") \
    ACTION(upstream_prompt_tokens, "prompt tokens the upstream reported")                 \
    ACTION(upstream_completion_tokens, "completion tokens the upstream reported")

enum tally_metric {
#define PC_TALLY_ENUM(name, help) TALLY_##name,
    PC_TALLY_METRICS(PC_TALLY_ENUM)
#undef PC_TALLY_ENUM
        TALLY__COUNT
};

#define TALLY_KEEP_DAYS 90
#define TALLY_MODEL_MAX 64
#define TALLY_FIELD_MAX (32 + 1 + 16 + 1 + TALLY_MODEL_MAX + 1)
#define TALLY_KEY_MAX   64

/* NULL-terminated names, in enum order. */
const char *tally_metric_name(enum tally_metric m);
/* -1 if name is not a metric. */
int tally_metric_parse(const char *name, size_t len);

/* The hash key of the UTC hour containing wall_ms. */
void tally_key(int64_t wall_ms, char out[TALLY_KEY_MAX]);
/* The model as stored in field names (see above); NULL or "" becomes "-". */
void tally_model(const char *model, char out[TALLY_MODEL_MAX + 1]);

/* store may be NULL (then nothing is written; for tests of the in-memory part). */
struct tally *tally_create(struct event_base *base, struct store *store);
/* Flush what is left (best effort: the writes go out if the loop runs again), free. */
void tally_destroy(struct tally **t);

/* Count n for (model, tenant id). Cheap: an in-memory add. */
void tally_add(struct tally *t, const char *model, const char *tenant, enum tally_metric m,
               int64_t n);
/* Send every pending count to Redis now (also runs from a 1 s timer). */
void tally_flush(struct tally *t);
/* Rows waiting to be flushed (tests). */
size_t tally_pending(const struct tally *t);

#endif
