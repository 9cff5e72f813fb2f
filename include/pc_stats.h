/*
 * pc_stats.h - the metrics table. One X-macro row per metric generates the
 * enum, the /stats JSON, the /metrics Prometheus text and doc/metrics.md's table
 * (`promptcache --metrics-doc`).
 *
 * Each worker owns one struct stats and is its only writer (relaxed atomic
 * adds, so readers on other threads never see torn values); readers sum all
 * workers' rows. There is no lock on the request path.
 *
 * Beside the flat metrics, a second table, PC_FAMILIES, describes labelled
 * counters and histograms (below). Each label has a fixed, small set of
 * values (the model label: the first metrics-models models, then "other";
 * the upstream label: the replicas), so a family is a fixed block of cells
 * in the same per-worker row and the number of series is bounded whatever
 * clients send.
 */
#ifndef PC_STATS_H
#define PC_STATS_H

#include <stdint.h>

#include "pc_guard.h"
#include "pc_util.h"

/* One counter per guard (pc_guard.h's table), right after semantic_guard_rejects. */
#define PC_GUARD_METRIC_(ACTION, e, name, what)    \
    ACTION(semantic_guard_rejects_##name, counter, \
           "Of semantic_guard_rejects, those the " #name " guard rejected (the first that did)")
#define STAT_GUARD_REJECTS(g) ((enum stat_id)(STAT_semantic_guard_rejects + 1 + (int)(g)))

/* ACTION(name, kind, help): kind is counter or gauge. */
#define PC_METRICS(ACTION)                                                                         \
    ACTION(requests_total, counter, "Requests received on any path")                               \
    ACTION(requests_cacheable, counter, "Requests to a cacheable API endpoint")                    \
    ACTION(requests_passthrough, counter, "Requests forwarded untouched (other paths)")            \
    ACTION(requests_admin, counter, "Requests to the proxy's own endpoints")                       \
    ACTION(requests_uncacheable, counter,                                                          \
           "Requests the API says never to cache (Responses API background or conversation, a "    \
           "named container)")                                                                     \
    ACTION(cors_preflights, counter, "CORS preflight requests answered by the proxy")              \
    ACTION(cache_hits, counter, "Requests answered from the cache")                                \
    ACTION(cache_hits_exact, counter, "Cache hits on the exact key")                               \
    ACTION(cache_hits_semantic, counter, "Cache hits by meaning (semantic stage)")                 \
    ACTION(l1_hits, counter, "Of cache_hits_exact, answered from the in-process L1 (no Redis)")    \
    ACTION(l1_checks_failed, counter,                                                              \
           "L1 items dropped because their Redis key no longer held them (deleted or changed by "  \
           "hand, seen by the look at a hit item's key once a second)")                            \
    ACTION(l1_set_events_held, counter,                                                            \
           "Answers written to a Redis Cluster whose primary held their SET past 20 x "            \
           "redis-timeout on a live connection: their L1 event waited (asked again) for the SET "  \
           "to run")                                                                               \
    ACTION(request_memo_hits, counter,                                                             \
           "Cacheable requests whose keys came from the worker's memo of bodies (no JSON parse)")  \
    ACTION(cache_misses, counter, "Cacheable requests looked up and not found")                    \
    ACTION(cache_bypasses, counter, "Cacheable requests that skipped the cache")                   \
    ACTION(cache_refreshes, counter, "Requests that skipped lookup but stored (no-cache)")         \
    ACTION(cache_expired, counter, "Entries found but older than the request's max-age")           \
    ACTION(cache_stores, counter, "Answers written to the cache")                                  \
    ACTION(cache_store_skipped, counter,                                                           \
           "Answers not stored (error, cut off or unfinished, too large, asked before a purge)")   \
    ACTION(cache_corrupt, counter,                                                                 \
           "Entries read from Redis that failed to decode (a length or a field out of range) and " \
           "were ignored")                                                                         \
    ACTION(cache_other_mode_only, counter,                                                         \
           "Entries found but not served in the mode asked for, which would change them (a "       \
           "Messages JSON answer whose tool input numbers a stream would not carry as written, "   \
           "a JSON answer naming a member twice, a chat or completions stream recorded "           \
           "without usage for a JSON client, or, with stream-usage off, for a stream client "      \
           "that asks for usage): a miss")                                                         \
    ACTION(coalesced, counter, "Requests that joined an identical in-flight upstream call")        \
    ACTION(coalesce_retries, counter,                                                              \
           "Of coalesced, requests that made a call of their own after all: the call they joined " \
           "was refused with a client error (4xx but 408 and 429), and their body was not "        \
           "byte-identical to the refused one")                                                    \
    ACTION(semantic_lookups, counter, "Lookups that ran the semantic stage (after an exact miss)") \
    ACTION(semantic_candidates, counter, "Semantic candidates above the threshold examined")       \
    ACTION(semantic_guard_rejects, counter, "Semantic candidates rejected by a guard")             \
    GUARD_ROWS(PC_GUARD_METRIC_, ACTION)                                                           \
    ACTION(semantic_stale, counter,                                                                \
           "Semantic candidates whose entry had gone (expired, evicted) or is not of the "         \
           "request's partition, whose text the comparison cannot read whole, or whose vector in " \
           "the index was not its record's")                                                       \
    ACTION(semantic_shed, counter, "Semantic lookups skipped: pool queue full or timed out")       \
    ACTION(semantic_embed_calls, counter, "Calls to the remote embedder (embedder openai)")        \
    ACTION(semantic_embed_errors, counter, "Remote embedder calls that failed or timed out")       \
    ACTION(semantic_embed_tokens, counter, "Tokens the remote embedder reported using")            \
    ACTION(semantic_verify_calls, counter, "Grey-zone candidates sent to the verifier")            \
    ACTION(semantic_verify_rejects, counter, "Candidates the verifier said no to")                 \
    ACTION(semantic_verify_errors, counter, "Verifier calls that failed or timed out (a miss)")    \
    ACTION(semantic_verify_tokens, counter, "Prompt and completion tokens the verifier used")      \
    ACTION(semantic_verify_completion_tokens, counter,                                             \
           "Of semantic_verify_tokens, completion tokens")                                         \
    ACTION(semantic_vectors_stored, counter, "Vector records written next to stored answers")      \
    ACTION(semantic_vectors_skipped, counter,                                                      \
           "Answers stored without their vector record: the embedder's circuit breaker was open")  \
    ACTION(semantic_breaker_skips, counter,                                                        \
           "Semantic stages skipped (exact lookup only): the embedder's circuit breaker was open") \
    ACTION(embedder_breaker_opens, counter,                                                        \
           "Times the remote embedder's circuit breaker opened (embedder-breaker-failures "        \
           "failures in a row)")                                                                   \
    ACTION(embedder_breaker_probes, counter,                                                       \
           "Calls let through to the remote embedder as the open breaker's probe")                 \
    ACTION(semantic_sync_rejected, counter,                                                        \
           "Vector records and pc:2:vs stream events the vector index's reader rejected "          \
           "(malformed or out of range), and vectors of another tenant a lookup found in a "       \
           "partition (forged)")                                                                   \
    ACTION(semantic_index_loads, counter,                                                          \
           "Partitions loaded into the vector index from their member lists in Redis")             \
    ACTION(semantic_index_loaded_vectors, counter, "Vectors those loads added to the index")       \
    ACTION(semantic_index_load_errors, counter,                                                    \
           "Partition loads that failed (Redis away or too slow): the next lookup asks again")     \
    ACTION(semantic_index_evictions, counter,                                                      \
           "Partitions dropped from the vector index for semantic-index-memory (least recently "   \
           "searched first)")                                                                      \
    ACTION(semantic_index_cold, counter,                                                           \
           "Semantic lookups of a partition not loaded within redis-timeout: a miss while it "     \
           "loads")                                                                                \
    ACTION(semantic_members_rejected, counter,                                                     \
           "Members of a partition's member list in Redis rejected (malformed, out of range, or "  \
           "naming a vector record of another partition)")                                         \
    ACTION(l1_events_rejected, counter,                                                            \
           "pc:2:vs stream events the L1's reader rejected (malformed or out of range)")           \
    ACTION(stream_reads, counter,                                                                  \
           "XREAD rounds of the process's stream follower answered (an idle one takes a second)")  \
    ACTION(stream_entries, counter, "Stream entries the follower read (pc:2:vs and pc:2:px)")      \
    ACTION(stream_errors, counter, "Failed connections and commands of the stream follower")       \
    ACTION(stream_restarts, counter,                                                               \
           "Times a stream's readers started again at its end (connected, or behind a trim)")      \
    ACTION(                                                                                        \
        semantic_bound_withheld, counter,                                                          \
        "Semantic candidates not served: the error bound does not allow their similarity (yet)")   \
    ACTION(semantic_bound_explored, counter,                                                       \
           "Semantic candidates the bound allowed but sent upstream to verify "                    \
           "(semantic-explore-rate)")                                                              \
    ACTION(semantic_bound_skipped, counter,                                                        \
           "Semantic candidates passed over: their entry was found wrong at that similarity or "   \
           "above")                                                                                \
    ACTION(semantic_bound_compared, counter,                                                       \
           "Fresh answers compared with a candidate's cached answer (semantic-verify-answers)")    \
    ACTION(semantic_bound_agreed, counter, "Of semantic_bound_compared, the same answer")          \
    ACTION(semantic_bound_disagreed, counter, "Of semantic_bound_compared, a different answer")    \
    ACTION(semantic_bound_explored_disagreed, counter,                                             \
           "Of the explored candidates, those whose answer differed: the observed error of the "   \
           "semantic hits the bound allows")                                                       \
    ACTION(semantic_bound_compare_errors, counter,                                                 \
           "Comparisons that could not be made (no answer text, comparator failed or timed out)")  \
    ACTION(semantic_bound_uncompared, counter,                                                     \
           "Semantic candidates held back or explored that were never compared: no full answer "   \
           "came (an upstream error, a cut stream, a request that joined another's call)")         \
    ACTION(semantic_bound_rejected, counter,                                                       \
           "Error-bound counts or marks read from Redis and rejected (out of range)")              \
    ACTION(semantic_explore_prompt_tokens, counter,                                                \
           "Prompt tokens of the upstream calls made for explored candidates (not saved)")         \
    ACTION(semantic_explore_completion_tokens, counter,                                            \
           "Completion tokens of the upstream calls made for explored candidates (not saved)")     \
    ACTION(upstream_requests, counter, "Calls made to an upstream")                                \
    ACTION(upstream_errors, counter, "Upstream calls that failed (connect, reset, timeout)")       \
    ACTION(upstream_failovers, counter,                                                            \
           "Calls retried on another replica after a refused connect")                             \
    ACTION(upstream_timeouts, counter, "Upstream calls that hit upstream-timeout")                 \
    ACTION(upstream_5xx, counter, "Upstream answers with a 5xx status")                            \
    ACTION(upstream_retries, counter,                                                              \
           "Upstream calls resent once: the reused connection died, or had unasked bytes or its "  \
           "end waiting (stale), before the request was sent")                                     \
    ACTION(                                                                                        \
        client_errors, counter,                                                                    \
        "Requests on the proxied paths the proxy itself answered with a 4xx (a malformed body, a " \
        "bad control header, 413, a CORS origin refused); not the admin endpoints' refusals nor "  \
        "the HTTP server's own (Host, a head too large), nor the upstream's 4xx, relayed")         \
    ACTION(client_aborts, counter, "Clients that hung up before their answer was complete")        \
    ACTION(redis_errors, counter, "Redis commands that failed or timed out")                       \
    ACTION(redis_timeouts, counter, "Redis commands that exceeded redis-timeout")                  \
    ACTION(redis_reconnects, counter, "Redis connections (re)established")                         \
    ACTION(redis_moved, counter,                                                                   \
           "Redis Cluster MOVED redirections followed (a slot changed owner)")                     \
    ACTION(redis_ask, counter, "Redis Cluster ASK redirections followed (a slot being migrated)")  \
    ACTION(redis_tryagain, counter, "Redis Cluster commands sent again later after TRYAGAIN")      \
    ACTION(redis_cluster_maps, counter, "Redis Cluster slot maps read (CLUSTER SHARDS or SLOTS)")  \
    ACTION(redis_cluster_map_errors, counter,                                                      \
           "Redis Cluster slot maps refused (an error reply, or one that does not make sense)")    \
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
    ACTION(tokens_saved_cached, counter,                                                           \
           "Of tokens_saved_prompt, tokens the upstream had read from its prompt cache")           \
    ACTION(tokens_saved_cache_write, counter,                                                      \
           "Of tokens_saved_prompt, tokens the upstream had written to its prompt cache")          \
    ACTION(answers_unpriced, counter,                                                              \
           "Hits and upstream answers of models the price list does not price")                    \
    ACTION(stream_usage_added, counter,                                                            \
           "Streams for which the proxy asked the upstream for usage the client did not ask for")  \
    ACTION(prefix_sync_published, counter,                                                         \
           "Prefix records this instance sent to the others through Redis")                        \
    ACTION(prefix_sync_applied, counter, "Prefix records of other instances applied to the index") \
    ACTION(prefix_sync_errors, counter, "Redis errors of the prefix index's sharing")              \
    ACTION(prefix_sync_dropped, counter,                                                           \
           "Prefix records not shared: the queue to Redis was full (also in prefix_sync_errors)")  \
    ACTION(prefix_records_rejected, counter,                                                       \
           "Prefix records and set members read from Redis and rejected (a field out of range)")   \
    ACTION(bytes_from_upstream, counter, "Response bytes received from upstreams")                 \
    ACTION(bytes_from_cache, counter, "Response bytes served from the cache")                      \
    ACTION(connections_refused, counter,                                                           \
           "Connections turned away at max-connections or max-connections-per-ip")                 \
    ACTION(connections_refused_per_ip, counter,                                                    \
           "Connections turned away at max-connections-per-ip (also in connections_refused)")      \
    ACTION(                                                                                        \
        requests_over_body_budget, counter,                                                        \
        "Requests answered 503: max-request-memory (bodies and their parsed copies) was used up")  \
    ACTION(memory_trims, counter, "Times freed request-body memory was returned to the system")    \
    ACTION(connections_active, gauge, "Open client connections")                                   \
    ACTION(requests_active, gauge, "Requests in progress")                                         \
    ACTION(upstream_active, gauge, "Upstream transfers in progress")                               \
    ACTION(redis_connected, gauge, "Workers with a ready Redis connection")                        \
    ACTION(request_memory_bytes, gauge,                                                            \
           "Bytes of max-request-memory in use: request bodies and their estimated parsed copies") \
    ACTION(embedder_breaker_open, gauge,                                                           \
           "1 while the remote embedder's circuit breaker is open or probing (it is not called)")  \
    ACTION(semantic_index_bytes, gauge,                                                            \
           "Bytes the vector index holds (vectors, metadata, FAISS indexes; an estimate), kept "   \
           "within semantic-index-memory")                                                         \
    ACTION(stream_following, gauge,                                                                \
           "1 while the stream follower follows every stream (the L1 is on), else 0")

/*
 * Labels of the families, each with its values (a label's cardinality is
 * fixed; see stats_label_value).
 */
enum stat_label {
    SL_CACHE = 0, /* hit, miss, bypass, refresh */
    SL_MATCH,     /* exact, semantic */
    SL_ENDPOINT, /* other, chat, completions, embeddings, messages, responses (api_endpoint_name) */
    SL_MODEL,    /* metrics-models models (the busiest in Redis' counters at start, then the
                    first answered), then "other" */
    SL_UPSTREAM, /* the replicas, by index */
    SL_TOKEN,    /* input (uncached), cache_read, cache_write, output */
    SL_CALLER,   /* embedder, verifier */
    SL_TENANT,   /* the names of tenant-names (the first STATS_TENANTS_MAX counted), then "other" */
    SL__COUNT
};
#define SL(x) (1u << SL_##x)

#define STATS_MODELS_MAX  50 /* metrics-models at most */
#define STATS_CACHE_N     4
#define STATS_MATCH_N     2
#define STATS_ENDPOINT_N  6                      /* API__COUNT (checked in stats.c) */
#define STATS_MODEL_N     (STATS_MODELS_MAX + 1) /* the last one is "other" */
#define STATS_UPSTREAM_N  64                     /* ROUTE_MAX_REPLICAS */
#define STATS_TOKEN_N     4
#define STATS_CALLER_N    2
#define STATS_TENANTS_MAX 32
#define STATS_TENANT_N    (STATS_TENANTS_MAX + 1) /* the last one is "other" */
#define TENANT_LABEL_MAX  64                      /* a tenant name (pc_tenants.h) */

enum stat_cache { SC_HIT = 0, SC_MISS, SC_BYPASS, SC_REFRESH };
enum stat_token { ST_INPUT = 0, ST_CACHE_READ, ST_CACHE_WRITE, ST_OUTPUT };
enum stat_caller { SCALLER_EMBEDDER = 0, SCALLER_VERIFIER };

/* Histogram bucket sets (upper bounds in seconds; +Inf is implied). */
#define STATS_BUCKETS_SLOW                                                                  \
    {                                                                                       \
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120 \
    }
#define STATS_BUCKETS_FAST                                                                         \
    {                                                                                              \
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, \
            1, 2.5, 5                                                                              \
    }
#define STATS_NBUCKETS 16 /* both sets; + the +Inf bucket, the sum and the count */

/*
 * FAMILY(name, kind, labels, scale, help): kind counter or histogram; labels
 * a mask of SL(...); scale turns the stored integer into the exported value
 * (counters: 1e-9 for money kept in billionths, 1e-3 for milliseconds;
 * histograms: their bucket set, SLOW or FAST, observed in microseconds).
 * Exported as promptcache_<name>_total (counters) or promptcache_<name>
 * (histograms), with only the series that were ever counted.
 */
#define PC_FAMILIES(FAMILY)                                                                        \
    FAMILY(api_requests, counter, SL(CACHE) | SL(ENDPOINT) | SL(MODEL), 1,                         \
           "Requests to the API endpoints (and passed through: endpoint other) by what the cache " \
           "did")                                                                                  \
    FAMILY(request_duration_seconds, histogram, SL(CACHE) | SL(ENDPOINT), SLOW,                    \
           "Time from a request's arrival to the end of its answer")                               \
    FAMILY(stream_ttfb_seconds, histogram, SL(CACHE), SLOW,                                        \
           "Time from a streamed request's arrival to the first byte of its answer")               \
    FAMILY(upstream_latency_seconds, histogram, SL(UPSTREAM), SLOW,                                \
           "Upstream calls, from sending the request to the end of the answer")                    \
    FAMILY(lookup_duration_seconds, histogram, SL(CACHE), FAST,                                    \
           "Cache lookups (exact, then semantic) by outcome: hit, miss, bypass (Redis failed)")    \
    FAMILY(redis_latency_seconds, histogram, 0, FAST, "Redis commands of the request path")        \
    FAMILY(saved_tokens, counter, SL(MATCH) | SL(MODEL) | SL(TOKEN), 1,                            \
           "Tokens of the answers served from the cache, as the upstream billed them")             \
    FAMILY(saved_cost, counter, SL(MATCH) | SL(MODEL), 1e-9,                                       \
           "What the answers served from the cache cost when they were made, at list price")       \
    FAMILY(latency_saved_seconds, counter, SL(MATCH) | SL(MODEL), 1e-3,                            \
           "Upstream time of the answers served from the cache, minus the hits' own time")         \
    FAMILY(upstream_tokens, counter, SL(MODEL) | SL(TOKEN), 1,                                     \
           "Tokens of upstream answers, as the upstream billed them")                              \
    FAMILY(upstream_cost, counter, SL(MODEL), 1e-9, "What the upstream calls cost at list price")  \
    FAMILY(provider_cache_saved_cost, counter, SL(MODEL), 1e-9,                                    \
           "Of upstream calls, what reading the provider's prompt cache took off the input price") \
    FAMILY(provider_cache_write_premium_cost, counter, SL(MODEL), 1e-9,                            \
           "Of upstream calls, what writing to the provider's prompt cache added to it")           \
    FAMILY(own_calls_tokens, counter, SL(CALLER) | SL(TOKEN), 1,                                   \
           "Tokens of the proxy's own calls (embedder, verifier)")                                 \
    FAMILY(own_calls_cost, counter, SL(CALLER), 1e-9,                                              \
           "What the proxy's own calls cost at list price (subtract from saved_cost)")             \
    FAMILY(semantic_explore_cost, counter, SL(MODEL), 1e-9,                                        \
           "What the upstream calls made for explored semantic candidates cost at list price")     \
    FAMILY(tenant_requests, counter, SL(CACHE) | SL(TENANT), 1,                                    \
           "Requests to the API endpoints by tenant (tenant-names' names; every other tenant "     \
           "is other) and what the cache did")                                                     \
    FAMILY(tenant_saved_cost, counter, SL(TENANT), 1e-9,                                           \
           "What the answers served from the cache cost when they were made, by tenant")           \
    FAMILY(tenant_upstream_cost, counter, SL(TENANT), 1e-9,                                        \
           "What the upstream calls cost at list price, by tenant")

enum stat_family {
#define PC_FAM_ENUM(name, kind, labels, scale, help) SF_##name,
    PC_FAMILIES(PC_FAM_ENUM)
#undef PC_FAM_ENUM
        SF__COUNT
};

#define STATS_LCARD(labels, x, n) (((labels)&SL(x)) ? (n) : 1)
#define STATS_FAM_SERIES(labels)                                                                   \
    (STATS_LCARD(labels, CACHE, STATS_CACHE_N) * STATS_LCARD(labels, MATCH, STATS_MATCH_N) *       \
     STATS_LCARD(labels, ENDPOINT, STATS_ENDPOINT_N) * STATS_LCARD(labels, MODEL, STATS_MODEL_N) * \
     STATS_LCARD(labels, UPSTREAM, STATS_UPSTREAM_N) * STATS_LCARD(labels, TOKEN, STATS_TOKEN_N) * \
     STATS_LCARD(labels, CALLER, STATS_CALLER_N) * STATS_LCARD(labels, TENANT, STATS_TENANT_N))
#define STATS_KIND_CELLS_counter   1
#define STATS_KIND_CELLS_histogram (STATS_NBUCKETS + 3) /* buckets, +Inf, sum (us), count */
#define PC_FAM_CELLS(name, kind, labels, scale, help) \
    +STATS_FAM_SERIES(labels) * STATS_KIND_CELLS_##kind
enum { STATS_CELLS = 0 PC_FAMILIES(PC_FAM_CELLS) };

/* The label values of one series; labels a family does not have are ignored. */
struct stat_labels {
    int cache, match, endpoint, model, upstream, token, caller, tenant;
};

enum stat_id {
#define PC_STAT_ENUM(name, kind, help) STAT_##name,
    PC_METRICS(PC_STAT_ENUM)
#undef PC_STAT_ENUM
        STAT__COUNT
};

struct stats {
    uint64_t v[STAT__COUNT];
    uint64_t cells[STATS_CELLS]; /* the families */
} __attribute__((aligned(64)));

/*
 * Add n to a row's value, read as signed (a gauge may go down): a counter an
 * upstream's reported usage feeds (1e15 tokens an answer) stops at INT64_MAX
 * rather than wrap, as the families do; stats_sum saturates the same way.
 */
static inline void stats_add(struct stats *st, enum stat_id id, int64_t n)
{
    if (n <= 0) {
        __atomic_fetch_add(&st->v[id], (uint64_t)n, __ATOMIC_RELAXED);
        return;
    }
    /* Only this worker adds to its row: the exchange rarely retries. */
    uint64_t old = __atomic_load_n(&st->v[id], __ATOMIC_RELAXED), sum;
    do
        sum = (int64_t)old > INT64_MAX - n ? (uint64_t)INT64_MAX : old + (uint64_t)n;
    while (!__atomic_compare_exchange_n(&st->v[id], &old, sum, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

static inline void stats_incr(struct stats *st, enum stat_id id)
{
    __atomic_fetch_add(&st->v[id], 1, __ATOMIC_RELAXED);
}

/* Add n to a counter family's series. */
void stats_fam_add(struct stats *st, enum stat_family f, const struct stat_labels *l, int64_t n);
/* Count one observation (microseconds) in a histogram family's series. */
void stats_observe(struct stats *st, enum stat_family f, const struct stat_labels *l, int64_t us);

/*
 * The model label: the slot of model (0..limit-1), or the "other" slot. A
 * model gets a free slot only when admit is true (an answered request), so
 * failed requests with invented model names never take one. Thread-safe;
 * the limit (metrics-models) is set once before workers start.
 */
void stats_set_model_limit(int limit);
int stats_model_slot(const char *model, bool admit);
/* Give free slots to these models first (the busiest of the last hours, read from Redis). */
void stats_seed_models(const char *const *models, size_t n);
/*
 * The tenant label: the slot of a tenant's name (tenant-names), given on its
 * first count while slots are left and kept for the life of the process (so
 * a reload that renames keeps the old series monotonic); NULL, or no slot
 * left: the "other" slot. Thread-safe.
 */
int stats_tenant_slot(const char *name);
/* Names of the upstream label values, by replica index (set once at start). */
void stats_set_upstreams(const char *const *names, size_t n);

/* Register per-worker rows (up to 256) before workers start; kept by pointer. */
int stats_register(struct stats *st);
void stats_unregister_all(void);
/* Sum of all registered rows (gauges are summed as signed values). */
void stats_sum(uint64_t out[STAT__COUNT]);
/* The same for the families' cells (STATS_CELLS values, malloc'd; free it). */
uint64_t *stats_sum_cells(void);

/* ---- series other modules own ------------------------------------------------------ */

/*
 * Figures kept outside the per-worker rows - whether the process is ready,
 * the semantic index's size, the error bound's threshold, the L1's items,
 * each replica's calls - are each registered once, as a row of a table in
 * the module that owns them (struct stat_row), in a group that says how they
 * are read (struct stat_group). The renderers below show every group they
 * are given after the rows and families above, in /stats, /metrics and the
 * doc/metrics.md alike; no series is written by hand.
 *
 *   admin.c's list of groups ─▶ stat_source {group, its object} ─▶ snapshot
 *     (once per rendering) ─▶ each row's read (per item for the replicas)
 *     ─▶ a /stats member, a /metrics series, a doc/metrics.md row
 */
enum stat_val_type {
    SV_NONE = 0, /* left out everywhere (a figure of a part that is off) */
    SV_NULL,     /* null in /stats, no series in /metrics: not known (yet) */
    SV_INT,
    SV_REAL, /* with the row's decimals */
    SV_BOOL, /* true/false in /stats, 1/0 in /metrics */
    SV_STR,  /* /stats only */
};

struct stat_val {
    enum stat_val_type type;
    int64_t i; /* SV_INT, SV_BOOL */
    double d;
    const char *s; /* valid while the group's snapshot is */
};

static inline void stat_int(struct stat_val *v, int64_t x)
{
    v->type = SV_INT;
    v->i = x;
}
static inline void stat_real(struct stat_val *v, double x)
{
    v->type = SV_REAL;
    v->d = x;
}
static inline void stat_bool(struct stat_val *v, bool x)
{
    v->type = SV_BOOL;
    v->i = x;
}
static inline void stat_str(struct stat_val *v, const char *x)
{
    v->type = SV_STR;
    v->s = x;
}
/* A real when known, else null. */
static inline void stat_real_or_null(struct stat_val *v, bool known, double x)
{
    v->type = known ? SV_REAL : SV_NULL;
    v->d = x;
}

/* One series: where it shows, what it is, how it is read (v starts as SV_NONE). */
struct stat_row {
    const char *name; /* the /stats member (NULL: /metrics only) */
    const char *prom; /* promptcache_<prom> in /metrics (NULL: /stats only) */
    const char *kind; /* "counter", "gauge", or "info" (a setting or a name: /stats only) */
    int decimals;     /* of an SV_REAL, in both */
    const char *help;
    void (*read)(const void *snap, size_t item, struct stat_val *v);
};

/*
 * A module's table is an X-macro of rows X(id, name, prom, kind, decimals,
 * help, statement), the statement setting v from s (the snapshot, a const T
 * *) and item. STAT_READER(prefix, T, id, statement) defines a row's reader,
 * STAT_ROW(prefix, id, name, prom, kind, decimals, help) its entry.
 */
#define STAT_READER(prefix, T, id, stmt)                                               \
    static void prefix##_read_##id(const void *snap_, size_t item, struct stat_val *v) \
    {                                                                                  \
        const T *s = snap_;                                                            \
        (void)s;                                                                       \
        (void)item;                                                                    \
        stmt;                                                                          \
    }
#define STAT_ROW(prefix, id, name, prom, kind, decimals, help) \
    {name, prom, kind, decimals, help, prefix##_read_##id},

struct stat_group {
    const struct stat_row *rows;
    size_t nrows;
    /* Read once per rendering: snapshot fills snap_size bytes from the group's object
     * (snapshot NULL: the rows read the object itself). */
    size_t snap_size;
    void (*snapshot)(const void *obj, void *snap);
    /* A group per item (the replicas): count of items, each named by item(); in /stats an
     * array of objects under array (the name first, as "name"), in /metrics the label
     * label. count NULL: one value per row. */
    size_t (*count)(const void *snap);
    const char *(*item)(const void *snap, size_t i);
    const char *array;
    const char *label;
    const char *per; /* what an item is ("replica"), for doc/metrics.md */
    /* Descriptions rather than figures (the price list in force, the tenants seen),
     * written by their module: /stats members (each after a comma) and /metrics lines.
     * May be NULL. */
    void (*json)(const void *obj, struct pc_buf *out);
    void (*prom)(const void *obj, struct pc_buf *out);
};

/* A group and the object its rows read; obj NULL: left out (its part is off). */
struct stat_source {
    const struct stat_group *group;
    const void *obj;
};

/*
 * /stats: the summed rows, the hit rate, the families, then every source's
 * series and descriptions, in order. The families appear as totals (split
 * by token kind or by cache status where that is what they mean), money
 * scaled to the unit, or null while no price list is in force (priced
 * false): unpriced, not 0.
 */
void stats_render_json(struct pc_buf *out, const struct stat_source *src, size_t n, bool priced);
/*
 * The hit rate, the project's one definition (doc/metrics.md, "Hit rate"): API
 * requests answered from the cache over those looked up in it, hit or miss
 * (api_requests by cache status; bypassed and refreshed ones were not looked
 * up), whatever the upstream then answered. 0 before any lookup.
 */
double stats_hit_rate(const uint64_t *cells);
/* /metrics: the same, in Prometheus text. */
void stats_render_prometheus(struct pc_buf *out, const struct stat_source *src, size_t n);
/* One source's /stats members (each after a comma) or /metrics series alone. */
void stats_render_source_json(struct pc_buf *out, const struct stat_source *src);
void stats_render_source_prometheus(struct pc_buf *out, const struct stat_source *src);
/* Total of a counter family over every series (scaled), and its split by one label value. */
double stats_family_total(const uint64_t *cells, enum stat_family f);
double stats_family_by(const uint64_t *cells, enum stat_family f, enum stat_label label, int value);
/* Markdown tables of every series: the rows, the families, then the groups (doc/metrics.md). */
void stats_render_doc(struct pc_buf *out, const struct stat_group *const *groups, size_t n);

#endif
