/*
 * pc_stats.h - the metrics table. One X-macro row per metric generates the
 * enum, the /stats JSON, the /metrics Prometheus text and the README table
 * (`promptcache --metrics-doc`).
 *
 * Each worker owns one struct stats and is its only writer (relaxed atomic
 * adds, so readers on other threads never see torn values); readers sum all
 * workers' rows. There is no lock on the request path.
 */
#ifndef PC_STATS_H
#define PC_STATS_H

#include <stdint.h>

#include "pc_util.h"

/* ACTION(name, kind, help): kind is counter or gauge. */
#define PC_METRICS(ACTION)                                                                         \
    ACTION(requests_total, counter, "Requests received on any path")                               \
    ACTION(requests_cacheable, counter, "Requests to a cacheable API endpoint")                    \
    ACTION(requests_passthrough, counter, "Requests forwarded untouched (other paths)")            \
    ACTION(requests_admin, counter, "Requests to the proxy's own endpoints")                       \
    ACTION(requests_uncacheable, counter,                                                          \
           "Requests the API says never to cache (Responses API background or conversation)")      \
    ACTION(cors_preflights, counter, "CORS preflight requests answered by the proxy")              \
    ACTION(cache_hits, counter, "Requests answered from the cache")                                \
    ACTION(cache_hits_exact, counter, "Cache hits on the exact key")                               \
    ACTION(cache_hits_semantic, counter, "Cache hits by meaning (semantic stage)")                 \
    ACTION(cache_misses, counter, "Cacheable requests looked up and not found")                    \
    ACTION(cache_bypasses, counter, "Cacheable requests that skipped the cache")                   \
    ACTION(cache_refreshes, counter, "Requests that skipped lookup but stored (no-cache)")         \
    ACTION(cache_expired, counter, "Entries found but older than the request's max-age")           \
    ACTION(cache_stores, counter, "Answers written to the cache")                                  \
    ACTION(cache_store_skipped, counter, "Answers not stored (error, cut off, too large)")         \
    ACTION(cache_corrupt, counter, "Entries that failed to decode and were ignored")               \
    ACTION(coalesced, counter, "Requests that joined an identical in-flight upstream call")        \
    ACTION(semantic_lookups, counter, "Lookups that ran the semantic stage (after an exact miss)") \
    ACTION(semantic_candidates, counter, "Semantic candidates above the threshold examined")       \
    ACTION(semantic_guard_rejects, counter, "Semantic candidates rejected by a guard")             \
    ACTION(semantic_stale, counter, "Semantic candidates whose entry had gone (expired, evicted)") \
    ACTION(semantic_shed, counter, "Semantic lookups skipped: pool queue full or timed out")       \
    ACTION(semantic_embed_calls, counter, "Calls to the remote embedder (embedder openai)")        \
    ACTION(semantic_embed_errors, counter, "Remote embedder calls that failed or timed out")       \
    ACTION(semantic_embed_tokens, counter, "Tokens the remote embedder reported using")            \
    ACTION(semantic_verify_calls, counter, "Grey-zone candidates sent to the verifier")            \
    ACTION(semantic_verify_rejects, counter, "Candidates the verifier said no to")                 \
    ACTION(semantic_verify_errors, counter, "Verifier calls that failed or timed out (a miss)")    \
    ACTION(semantic_verify_tokens, counter, "Prompt and completion tokens the verifier used")      \
    ACTION(semantic_vectors_stored, counter, "Vector records written next to stored answers")      \
    ACTION(upstream_requests, counter, "Calls made to an upstream")                                \
    ACTION(upstream_errors, counter, "Upstream calls that failed (connect, reset, timeout)")       \
    ACTION(upstream_failovers, counter,                                                            \
           "Calls retried on another replica after a refused connect")                             \
    ACTION(upstream_timeouts, counter, "Upstream calls that hit upstream-timeout")                 \
    ACTION(upstream_5xx, counter, "Upstream answers with a 5xx status")                            \
    ACTION(upstream_retries, counter,                                                              \
           "Upstream calls resent once: the reused connection died before the request was sent")   \
    ACTION(client_errors, counter, "Requests rejected by the proxy with a 4xx")                    \
    ACTION(client_aborts, counter, "Clients that hung up before their answer was complete")        \
    ACTION(redis_errors, counter, "Redis commands that failed or timed out")                       \
    ACTION(redis_timeouts, counter, "Redis commands that exceeded redis-timeout")                  \
    ACTION(redis_reconnects, counter, "Redis connections (re)established")                         \
    ACTION(tokens_saved_prompt, counter, "Prompt tokens served from the cache")                    \
    ACTION(tokens_saved_completion, counter, "Completion tokens served from the cache")            \
    ACTION(tokens_saved_semantic_prompt, counter, "Of tokens_saved_prompt, served by meaning")     \
    ACTION(tokens_saved_semantic_completion, counter,                                              \
           "Of tokens_saved_completion, served by meaning")                                        \
    ACTION(tokens_upstream_prompt, counter, "Prompt tokens reported by upstream answers")          \
    ACTION(tokens_upstream_completion, counter, "Completion tokens reported by upstream answers")  \
    ACTION(tokens_upstream_cached, counter, "Prompt tokens the upstream reported as cached")       \
    ACTION(tokens_upstream_cache_write, counter,                                                   \
           "Prompt tokens the upstream reported written to its prompt cache (Anthropic)")          \
    ACTION(stream_usage_added, counter,                                                            \
           "Streams for which the proxy asked the upstream for usage the client did not ask for")  \
    ACTION(prefix_sync_published, counter,                                                         \
           "Prefix records this instance sent to the others through Redis")                        \
    ACTION(prefix_sync_applied, counter, "Prefix records of other instances applied to the index") \
    ACTION(prefix_sync_errors, counter, "Redis errors of the prefix index's sharing")              \
    ACTION(bytes_from_upstream, counter, "Response bytes received from upstreams")                 \
    ACTION(bytes_from_cache, counter, "Response bytes served from the cache")                      \
    ACTION(connections_refused, counter,                                                           \
           "Connections turned away at max-connections or max-connections-per-ip")                 \
    ACTION(connections_refused_per_ip, counter,                                                    \
           "Connections turned away at max-connections-per-ip (also in connections_refused)")      \
    ACTION(requests_over_body_budget, counter,                                                     \
           "Requests answered 503: the process's request-body budget was used up")                 \
    ACTION(memory_trims, counter, "Times freed request-body memory was returned to the system")    \
    ACTION(connections_active, gauge, "Open client connections")                                   \
    ACTION(requests_active, gauge, "Requests in progress")                                         \
    ACTION(upstream_active, gauge, "Upstream transfers in progress")                               \
    ACTION(redis_connected, gauge, "Workers with a ready Redis connection")

enum stat_id {
#define PC_STAT_ENUM(name, kind, help) STAT_##name,
    PC_METRICS(PC_STAT_ENUM)
#undef PC_STAT_ENUM
        STAT__COUNT
};

struct stats {
    uint64_t v[STAT__COUNT];
} __attribute__((aligned(64)));

static inline void stats_add(struct stats *st, enum stat_id id, int64_t n)
{
    __atomic_fetch_add(&st->v[id], (uint64_t)n, __ATOMIC_RELAXED);
}

static inline void stats_incr(struct stats *st, enum stat_id id)
{
    stats_add(st, id, 1);
}

/* Register per-worker rows (up to 256) before workers start; kept by pointer. */
int stats_register(struct stats *st);
void stats_unregister_all(void);
/* Sum of all registered rows (gauges are summed as signed values). */
void stats_sum(uint64_t out[STAT__COUNT]);

/* Render the summed metrics. extra_json (may be NULL) is appended inside the object. */
void stats_render_json(struct pc_buf *out, const char *extra_json);
void stats_render_prometheus(struct pc_buf *out);
/* Markdown table of every metric (for the README). */
void stats_render_doc(struct pc_buf *out);

#endif
