/*
 * pc_pindex.h - the prefix index: which replica holds the KV state of which
 * prefix, as far as this proxy can tell. One per process (owned by route),
 * shared by every worker; kept in step with other proxy instances by psync
 * (pc_psync.h), which feeds it what they record and publishes what this one
 * records.
 *
 *   chain link hash ─▶ entry {tokens of the link, per replica: last use}
 *
 * Each replica's KV cache is modelled as an exact LRU of links with a
 * capacity in tokens: recording a chain on a replica makes its links the
 * most recently used (the deeper a link, the older its stamp within one
 * record, so a replica's prompt tails go first, as in an engine that frees
 * the blocks of a finished request tail first), and while a replica's links
 * add up to more than its capacity, its least recently used link is dropped.
 * A link weighs at least one token, so a replica holds at most capacity
 * links (40 to 80 bytes of memory each).
 *
 * Stamps are wall-clock milliseconds (times 4096, plus 4095 minus the depth)
 * so that records of other instances compare with ours; one from elsewhere
 * that is older than the newest links takes its place behind them (found
 * from the head or from the tail, up to 64 links from either end; between,
 * a little ahead of it), and one older than every link of a full replica is
 * the next to go.
 *
 * Thread safety: each replica's LRU has its own mutex, held for one match or
 * one record of one chain; there is no global lock and no scan of the table.
 */
#ifndef PC_PINDEX_H
#define PC_PINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pindex;

#define PINDEX_MAX_REPLICAS 64
#define PINDEX_DEPTH_STEPS  4096 /* stamp = ms * 4096 + (4095 - min(depth, 4095)) */
/* The largest time a record may carry: its stamps stay within int64_t. */
#define PINDEX_MS_MAX (INT64_MAX / PINDEX_DEPTH_STEPS - 1)
/*
 * The most tokens one link of a record from elsewhere may weigh: a link is at
 * most CHAIN_CHUNK_BYTES (1024) of text plus its message's header (role,
 * name), and no tokenizer makes more than one token of a byte.
 */
#define PINDEX_LINK_TOKENS_MAX 65536

/* How a chain matches every replica (pindex_match). */
struct pindex_match {
    uint32_t links[PINDEX_MAX_REPLICAS]; /* leading links the replica holds */
    uint32_t fresh[PINDEX_MAX_REPLICAS]; /* of those, leading links used since fresh_since */
};

/*
 * Called for every local record once its call was answered (pindex_publish;
 * psync publishes it); must not block for long. Registered once, before
 * workers start.
 */
typedef void pindex_sink_fn(void *arg, size_t rep, const uint64_t *h, const uint32_t *tokens,
                            size_t n, int64_t ms);

/* capacity[i]: replica i's KV capacity in tokens (> 0). */
struct pindex *pindex_create(size_t nrep, const int64_t *capacity);
void pindex_destroy(struct pindex **px);
void pindex_set_sink(struct pindex *px, pindex_sink_fn *fn, void *arg);

/* The match of links h[0..n) on every replica (m is overwritten). */
void pindex_match(struct pindex *px, const uint64_t *h, size_t n, int64_t fresh_since_ms,
                  struct pindex_match *m);
/*
 * Replica rep holds links h[0..n) from now (ms: wall clock), tokens[i]
 * tokens each. The sink hears of it only through pindex_publish, called
 * once the replica answered the call (a call it never took, or refused,
 * is forgotten instead: pindex_forget), so that other instances never
 * learn of a prompt the replica did not compute. pindex_apply is the same
 * for a record made elsewhere (another instance, or a restore from Redis):
 * no sink. depth0 is the depth of h[0] in its chain (stamps depend on it).
 *
 * A record from elsewhere is input: pindex_apply applies nothing and returns
 * -1 unless rep is a replica, 0 <= ms <= PINDEX_MS_MAX, every link weighs at
 * most PINDEX_LINK_TOKENS_MAX tokens and all of them together no more than
 * the replica's capacity (a record that would evict everything the replica
 * holds describes no prompt it could have kept); 0 once applied.
 */
void pindex_record(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                   size_t n, int64_t ms);
int pindex_apply(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens, size_t n,
                 size_t depth0, int64_t ms);
/* The sink hears of a record made with pindex_record (same arguments). */
void pindex_publish(struct pindex *px, size_t rep, const uint64_t *h, const uint32_t *tokens,
                    size_t n, int64_t ms);

/*
 * Replica rep does not hold links h[0..n) after all (a call recorded on it
 * never reached it): those it holds are dropped. Not published (the sink
 * does not hear of it).
 */
void pindex_forget(struct pindex *px, size_t rep, const uint64_t *h, size_t n);

size_t pindex_replicas(const struct pindex *px);
int64_t pindex_capacity(const struct pindex *px, size_t rep);
/* Tokens of the links replica rep holds; links held, summed over the replicas. */
int64_t pindex_held(const struct pindex *px, size_t rep);
size_t pindex_entries(const struct pindex *px); /* links held, summed over replicas */
/*
 * The longest run of occupied slots in replica rep's hash table (a scan of
 * the table, under its mutex: a diagnostic, for tests). A lookup walks at
 * most that far.
 */
size_t pindex_longest_run(struct pindex *px, size_t rep);

/*
 * Bytes of prompt per token for a model, calibrated from the usage upstream
 * answers report (pindex_calibrate), starting at 4.
 */
double pindex_cpt(struct pindex *px, const char *model);
void pindex_calibrate(struct pindex *px, const char *model, size_t bytes, int64_t tokens);
/* Tokens in bytes of a model's prompt, rounded, at least 1 for a non-empty text. */
uint32_t pindex_tokens(double cpt, size_t bytes);

#endif
