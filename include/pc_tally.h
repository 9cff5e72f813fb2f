/*
 * pc_tally.h - usage counters per hour, per model and per tenant, kept in
 * Redis for `promptcache report`. Each worker adds to its own in-memory rows
 * (no lock, no Redis call on the request path) and flushes the changed ones
 * about once a second, a bounded batch per loop pass; the report sums what
 * every worker and every proxy instance wrote.
 *
 * Redis layout: one hash per UTC hour, PC_KEY_PREFIX "r:YYYYMMDDHH", kept
 * TALLY_KEEP_DAYS; field "METRIC|TENANT|MODEL", value a count. TENANT is the
 * 16-hex tenant id of the access log; MODEL is the request's model with
 * characters outside [A-Za-z0-9._:/@+-] replaced by '_', at most 64 bytes
 * (model_clean, pc_model.h).
 *
 * Bounded by construction: only answered (2xx) requests get a row of their
 * own (model, tenant) pair; failed ones, and pairs beyond TALLY_MAX_ROWS per
 * hour and worker, are counted under TALLY_OTHER for both, a name no client
 * can produce.
 */
#ifndef PC_TALLY_H
#define PC_TALLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_model.h"
#include "pc_util.h"

struct event_base;
struct store;
struct tally;

/*
 * ACTION(name, "meaning"): the metrics, in report order. Prompt tokens are
 * counted whole (saved_prompt_tokens, upstream_prompt_tokens) and, apart,
 * the parts of them the provider read from or wrote to its prompt cache,
 * since each part has its own price (pc_pricing.h).
 */
#define PC_TALLY_METRICS(ACTION)                                                                   \
    ACTION(requests, "cacheable requests")                                                         \
    ACTION(hits, "looked up and answered from the cache")                                          \
    ACTION(misses, "looked up, not found, sent upstream (or joined a call already there)")         \
    ACTION(coalesced, "answered by sharing another request's upstream call")                       \
    ACTION(bypasses, "not looked up (BYPASS, REFRESH)")                                            \
    ACTION(errors, "of the requests, not answered with a 2xx (upstream error, client gone)")       \
    ACTION(saved_prompt_tokens, "prompt tokens of answers served from the cache")                  \
    ACTION(saved_completion_tokens, "completion tokens of answers served from the cache")          \
    ACTION(upstream_prompt_tokens, "prompt tokens the upstream reported")                          \
    ACTION(upstream_completion_tokens, "completion tokens the upstream reported")                  \
    ACTION(semantic_hits, "of the hits, those found by meaning (semantic stage)")                  \
    ACTION(saved_cached_tokens, "of saved_prompt_tokens, read from the provider's cache")          \
    ACTION(saved_cache_write_tokens, "of saved_prompt_tokens, written to the provider's cache")    \
    ACTION(semantic_saved_prompt_tokens, "of saved_prompt_tokens, saved by meaning")               \
    ACTION(semantic_saved_cached_tokens, "of saved_cached_tokens, saved by meaning")               \
    ACTION(semantic_saved_cache_write_tokens, "of saved_cache_write_tokens, saved by meaning")     \
    ACTION(semantic_saved_completion_tokens, "of saved_completion_tokens, saved by meaning")       \
    ACTION(latency_saved_ms, "upstream time of the answers served minus the hits' own time")       \
    ACTION(semantic_latency_saved_ms, "of latency_saved_ms, saved by meaning")                     \
    ACTION(upstream_cached_tokens, "of upstream_prompt_tokens, read from the provider's cache")    \
    ACTION(upstream_cache_write_tokens, "of upstream_prompt_tokens, written to its cache")         \
    ACTION(own_prompt_tokens, "input tokens of the proxy's own calls (embedder, verifier)")        \
    ACTION(own_completion_tokens, "output tokens of the proxy's own calls (verifier)")             \
    ACTION(semantic_compared, "answers compared with a candidate the error bound held back")       \
    ACTION(semantic_disagreed, "of semantic_compared, a different answer")                         \
    ACTION(semantic_explored, "of semantic_compared, allowed candidates sent upstream to verify")  \
    ACTION(semantic_explored_disagreed, "of semantic_explored, a different answer")                \
    ACTION(explore_prompt_tokens, "of upstream_prompt_tokens, spent on explored candidates")       \
    ACTION(explore_completion_tokens, "of upstream_completion_tokens, on explored candidates")     \
    ACTION(saved_cache_write_1h_tokens, "of saved_cache_write_tokens, kept for an hour")           \
    ACTION(semantic_saved_cache_write_1h_tokens, "of saved_cache_write_1h_tokens, by meaning")     \
    ACTION(upstream_cache_write_1h_tokens, "of upstream_cache_write_tokens, kept for an hour")     \
    ACTION(saved_audio_prompt_tokens, "of saved_prompt_tokens, audio read in full")                \
    ACTION(saved_audio_completion_tokens, "of saved_completion_tokens, audio")                     \
    ACTION(semantic_saved_audio_prompt_tokens, "of saved_audio_prompt_tokens, by meaning")         \
    ACTION(semantic_saved_audio_completion_tokens, "of saved_audio_completion_tokens, by meaning") \
    ACTION(upstream_audio_prompt_tokens, "of upstream_prompt_tokens, audio read in full")          \
    ACTION(upstream_audio_completion_tokens, "of upstream_completion_tokens, audio")

/*
 * Request durations per hour by cache status, for percentiles over every
 * instance: hash fields "lat|KIND|B" (KIND hit, miss, bypass; B the bucket
 * index, upper bounds TALLY_LAT_BOUNDS_MS, the last one +Inf), written to
 * the same hourly hash under their own names.
 */
enum tally_lat_kind { TALLY_LAT_HIT = 0, TALLY_LAT_MISS, TALLY_LAT_BYPASS, TALLY_LAT__COUNT };
#define TALLY_LAT_BUCKETS 16
#define TALLY_LAT_BOUNDS_MS                                                           \
    {                                                                                 \
        1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, -1 \
    }
extern const char *const tally_lat_kind_names[TALLY_LAT__COUNT];

enum tally_metric {
#define PC_TALLY_ENUM(name, help) TALLY_##name,
    PC_TALLY_METRICS(PC_TALLY_ENUM)
#undef PC_TALLY_ENUM
        TALLY__COUNT
};

#define TALLY_KEEP_DAYS 90
#define TALLY_HOUR_MS   (3600 * 1000)
#define TALLY_MODEL_MAX MODEL_NAME_MAX
#define TALLY_FIELD_MAX (40 + 1 + 16 + 1 + TALLY_MODEL_MAX + 1)
#define TALLY_KEY_MAX   64
#define TALLY_MAX_ROWS  2000 /* distinct (model, tenant) pairs per hour and worker */
#define TALLY_OTHER     "(other)"

/* The metric's name as stored and reported. */
const char *tally_metric_name(enum tally_metric m);
/* -1 if name[0..len) is not a metric. */
int tally_metric_parse(const char *name, size_t len);

/* The hash key of the UTC hour containing wall_ms. */
void tally_key(int64_t wall_ms, char out[TALLY_KEY_MAX]);
/* Whether s[0..n) is a model / tenant as the proxy writes them (TALLY_OTHER included). */
bool tally_valid_model(const char *s, size_t n);
bool tally_valid_tenant(const char *s, size_t n);

/* store may be NULL (nothing is written; for tests of the in-memory part). */
struct tally *tally_create(struct event_base *base, struct store *store);
/* Flush what is left (queued on the store: run the loop before destroying it), free. */
void tally_destroy(struct tally **t);

/*
 * Count one request's numbers for (model, tenant id): v[TALLY__COUNT].
 * ok: it was answered with a 2xx (else it is counted under TALLY_OTHER).
 * t may be NULL (no tally: a no-op). Cheap: an in-memory add.
 */
void tally_add(struct tally *t, const char *model, const char *tenant, bool ok,
               const int64_t v[TALLY__COUNT]);
/* Count one request's duration (the hourly latency histogram of its cache status). */
void tally_observe(struct tally *t, enum tally_lat_kind kind, int64_t us);
/* Send the changed counts to Redis now (everything, not one batch). */
void tally_flush(struct tally *t);
/* Rows held (tests). */
size_t tally_rows(const struct tally *t);
/* Rows with counts not yet sent (tests). */
size_t tally_dirty(const struct tally *t);

#endif
