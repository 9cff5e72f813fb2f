/*
 * pc_bound.h - the semantic cache's error bound (semantic-max-error, δ): a
 * candidate found by meaning is served only where the proxy's own traffic
 * shows, with 95% confidence, that at most δ of the answers it would serve
 * at that similarity are wrong.
 *
 * How it learns. A candidate that passed the guards is either served, or
 * answered from upstream and the fresh answer compared with the candidate's
 * cached one (semantic-verify-answers: exact text, embeddings, or the
 * verifier model). Candidates the bound does not allow yet are compared for
 * free (they go upstream anyway); of those it allows, a sample
 * (semantic-explore-rate) is sent upstream on purpose to keep measuring.
 * Counted per similarity bucket (0.005 wide): N, the candidates that reached
 * the decision; n, those compared; e, those whose answers differed.
 *
 * The threshold. For a threshold t the served set is every candidate with
 * similarity >= t. Its error is estimated bucket by bucket (post-
 * stratification: within a bucket every compared candidate is a sample of
 * that bucket's candidates, however it was chosen) and weighted by each
 * bucket's share of the candidates, N; the estimate is bounded above by the
 * one-sided 95% Clopper-Pearson bound at the Kish effective sample size of
 * those weights (Korn & Graubard 1998). When every bucket's candidates were
 * all compared it is the exact binomial bound of the errors among them.
 * Thresholds are tested from the top down in a fixed sequence, starting
 * where enough comparisons exist to pass at all, and the scan stops at the
 * first threshold whose bound exceeds delta: the lowest passing threshold
 * is served, and never at a similarity nothing was compared at. A
 * partition's own counts decide once they certify a threshold; until then
 * the tenant's prior (every partition of this tenant and embedder space) is,
 * unless the partition's own comparisons show, at the same confidence, an
 * error above delta. One prior per tenant: another tenant's verifications
 * (its questions, its answers, or counts it forged by asking) never move
 * this tenant's threshold. An entry found wrong at similarity s is never served at
 * s or below again.
 *
 * Redis (Cluster-ready: each command names one key):
 *   PC_KEY_PREFIX "o:{tenant:exact}"  the entry's marks: a bitmap of the
 *       buckets where it was found wrong (SETBIT, in a script that gives it
 *       the entry's PTTL); same hash tag and expiry as the entry (a refresh
 *       carries them over, a flush or purge deletes them with it);
 *   PC_KEY_PREFIX "bp:{id}"  a partition's counts, id from the embedder space
 *       and the partition; expires BOUND_PARTITION_TTL_MS after its last
 *       observation;
 *   PC_KEY_PREFIX "bg:{id}"  a tenant's prior: its counts in an embedder space,
 *       id from the space and the tenant (the anonymous tenant's from the
 *       space alone: the key every tenant shared before, whose counts are
 *       the anonymous traffic's).
 * Counts are one string each, written with BITFIELD (OVERFLOW SAT, signed 64
 * bit big-endian: a header word, then N, n, e per bucket) so every instance
 * adds to them atomically and a GET reads them back whole. Everything read is
 * range-checked (bound_counts_decode, bound_marks_decode): a forged or foreign
 * value is rejected and counted, never used.
 *
 * The pure parts (bounds, thresholds, decisions, encodings, answer text) are
 * plain functions; the rest runs on a worker's thread (struct bound_port).
 */
#ifndef PC_BOUND_H
#define PC_BOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_bound_cmp.h"
#include "pc_entry.h"
#include "pc_util.h"

struct conf;
struct stat_group;
struct stats;
struct store;
struct verify;

/*
 * BOUND_COUNT_MAX: larger stored counts are rejected. With every bucket at that many
 * comparisons the effective size of a region stays under 10^12, where bound_upper still holds
 * its confidence (at 2^50 one bucket alone took the 95% bound to about 50%: lgamma's precision
 * spent). No real traffic gets near.
 */
#define BOUND_BUCKETS          100   /* similarity 0.5 .. 1.0 */
#define BOUND_SIM_MIN          0.5   /* below it: bucket 0 (never served by the bound) */
#define BOUND_BUCKET_WIDTH     0.005 /* BOUND_SIM_MIN + BOUND_BUCKETS * width == 1 */
#define BOUND_CONFIDENCE       0.95  /* of every bound stated here (one-sided) */
#define BOUND_COUNT_MAX        (INT64_C(1) << 33)          /* larger stored counts are rejected */
#define BOUND_MAGIC            INT64_C(0x5043424e44310002) /* "PCBND1", layout 2 */
#define BOUND_COUNTS_BYTES     (8 * (1 + 3 * BOUND_BUCKETS))
#define BOUND_MARKS_BYTES      ((BOUND_BUCKETS + 7) / 8)
#define BOUND_KEY_MAX          128
#define BOUND_PARTITION_TTL_MS (INT64_C(30) * 24 * 3600 * 1000)
#define BOUND_ANSWER_MAX       (64 * 1024) /* bytes of an answer's text compared */

/* ---- figures --------------------------------------------------------------- */

/* The bucket of a similarity (clamped to 0..BOUND_BUCKETS-1) and its lower edge. */
int bound_bucket(double sim);
double bound_bucket_floor(int b);

/* The regularized incomplete beta function I_x(a, b), a, b > 0, x in [0, 1]. */
double bound_beta_inc(double a, double b, double x);
/*
 * One-sided Clopper-Pearson bounds at confidence conf of a proportion seen
 * as x successes in n trials (x and n may be fractional: effective counts).
 * upper: the p with P(X <= x | n, p) = 1 - conf (1 when x >= n, n <= 0);
 * lower: the p with P(X >= x | n, p) = 1 - conf (0 when x <= 0).
 */
double bound_upper(double x, double n, double conf);
double bound_lower(double x, double n, double conf);
/* Observations with no error needed before the upper bound reaches delta. */
long bound_min_n(double delta, double conf);

/* Per bucket: candidates that reached the decision, those compared, those found wrong. */
struct bound_counts {
    double seen[BOUND_BUCKETS];
    double compared[BOUND_BUCKETS];
    double wrong[BOUND_BUCKETS];
};

/* A candidate at sim reached the decision; one was compared (and found wrong or not). */
void bound_counts_seen(struct bound_counts *c, double sim);
void bound_counts_compared(struct bound_counts *c, double sim, bool wrong);
/* Both, for one candidate that was compared (tests). */
void bound_counts_add(struct bound_counts *c, double sim, bool wrong);

/*
 * The served region at or above bucket b, from the buckets where something
 * was compared: each bucket's error rate weighted by its share of the
 * candidates, and the Kish effective size of those weights.
 */
struct bound_region {
    double n_eff; /* (sum N)^2 / sum (N^2 / n) */
    double x_eff; /* n_eff * rate */
    double rate;  /* sum N e/n / sum N; 0 when empty */
};
void bound_region_at(const struct bound_counts *c, int b, struct bound_region *out);

/* The lowest threshold whose served region's upper bound is at most delta. */
struct bound_cert {
    bool certified;
    int bucket;       /* of the threshold */
    double threshold; /* its similarity (bucket floor) */
    struct bound_region region;
    double upper; /* the region's upper bound (<= delta when certified) */
};
void bound_certify(const struct bound_counts *c, double delta, struct bound_cert *out);

enum bound_verdict {
    BOUND_SERVE = 0, /* serve the candidate */
    BOUND_EXPLORE,   /* allowed, but sampled: answer from upstream and compare */
    BOUND_WITHHOLD,  /* not allowed (yet): answer from upstream and compare */
    BOUND_SKIP,      /* this entry was found wrong at this similarity or above: next one */
};

enum bound_source { BOUND_SRC_NONE = 0, BOUND_SRC_PARTITION, BOUND_SRC_GLOBAL };

/* What a decision is made from; NULL counts are unknown (Redis away, or rejected). */
struct bound_inputs {
    const struct bound_counts *partition;
    const struct bound_counts *global;
    int entry_floor;     /* highest bucket where the entry was wrong; -1: none */
    double delta;        /* semantic-max-error */
    double explore_rate; /* semantic-explore-rate: the most of allowed candidates sampled */
};

struct bound_decision {
    enum bound_verdict verdict;
    enum bound_source source; /* the counts that allowed it (serve, explore) */
    double threshold;         /* of that source; 1 when none */
};

/*
 * The share of allowed candidates explored: rate while the allowing region's
 * effective size n_eff is at most the comparisons delta needs, then
 * rate * need / n_eff, never under a tenth of rate; a rate of 1 stays 1.
 */
double bound_explore_p(double rate, double n_eff, double delta);

/* Decide for a candidate at similarity sim; u is uniform in [0, 1) (the sampling draw). */
void bound_decide(const struct bound_inputs *in, double sim, double u, struct bound_decision *out);

/*
 * What deciding computes from the counts alone (the thresholds they certify,
 * the partition's veto at each bucket), kept for the next candidates decided
 * on the same counts: a lookup's view reads them once for all its candidates.
 * Filled in as decisions need it; the certificates' upper is not computed
 * (NAN). bound_decide is bound_prepare then bound_decide_prepared: the same
 * verdicts.
 */
#define PC_BOUND_PREPARED 1
struct bound_prepared {
    bool part_done, glob_done;
    struct bound_cert part, glob;
    signed char veto[BOUND_BUCKETS]; /* -1: not known yet */
};
/* Empty it: again whenever the inputs' counts or delta change. */
void bound_prepare(struct bound_prepared *p);
/* bound_decide, for in's counts and delta as they were when p was emptied. */
void bound_decide_prepared(const struct bound_inputs *in, struct bound_prepared *p, double sim,
                           double u, struct bound_decision *out);

/* ---- Redis encoding -------------------------------------------------------- */

void bound_entry_key(const char *tenant_id, const unsigned char exact[PC_SHA256_LEN],
                     char out[BOUND_KEY_MAX]);
void bound_partition_key(const char *space, const unsigned char partition[PC_SHA256_LEN],
                         char out[BOUND_KEY_MAX]);
/* The anonymous tenant's prior (the key of versions that kept one prior for every tenant). */
void bound_global_key(const char *space, char out[BOUND_KEY_MAX]);
/*
 * The prior of tenant_id (TENANT_ID_LEN hex characters) in space; bound_global_key's for the
 * anonymous tenant (anon_id, the same form) or a NULL tenant_id.
 */
void bound_prior_key(const char *space, const char *tenant_id, const char *anon_id,
                     char out[BOUND_KEY_MAX]);
/* SCAN pattern of every entry's marks (tenant_id NULL) or one tenant's. */
void bound_entry_pattern(const char *tenant_id, char out[BOUND_KEY_MAX]);

/* Command arguments built in place (pointers into the struct). */
struct bound_argv {
    int argc;
    const char *argv[24];
    size_t lens[24];
    char key[BOUND_KEY_MAX];
    char key2[BOUND_KEY_MAX];
    char num[8][24];
};
/* BITFIELD key SET header, OVERFLOW SAT, then INCRBY N of sim's bucket (a candidate seen). */
void bound_argv_seen(struct bound_argv *a, const char *key, double sim);
/* The same, INCRBY n and e of sim's bucket (a candidate compared). */
void bound_argv_compared(struct bound_argv *a, const char *key, double sim, bool wrong);
/*
 * The entry's mark of a disagreement at sim: EVAL of a script that sets the bucket's bit in
 * marks_key and gives it the life entry_key has left (PTTL), nothing if the entry is gone.
 */
void bound_argv_mark(struct bound_argv *a, const char *entry_key, const char *marks_key,
                     double sim);
/* PEXPIREAT key ms / PEXPIRE key ms. */
void bound_argv_expire(struct bound_argv *a, const char *key, int64_t ms, bool at);

/* A counts value as Redis holds it (for tests and tools that forge or inspect one). */
void bound_counts_encode(const struct bound_counts *c, struct pc_buf *out);
/* 0, or -1 (c zeroed) if the value is not one the proxy could have written. */
int bound_counts_decode(const char *buf, size_t len, struct bound_counts *c);
/* The highest marked bucket (-1: none) in *floor; -1 if the value is too long. */
int bound_marks_decode(const char *buf, size_t len, int *floor);

/* ---- answers ----------------------------------------------------------------- */

/*
 * What the comparators read of a stored answer:
 *   text: the assistant text, refusals and tool calls ("name(arguments)"), one piece a line,
 *     at most BOUND_ANSWER_MAX bytes (cut: longer); what the embedding and model
 *     comparators judge;
 *   form: what no comparator judges by meaning, compared byte for byte by every one: the
 *     endpoint, the choices (their number, order, index and finish reason), each piece's kind
 *     in order (content, refusal, a tool call with its name and exact arguments, a thinking
 *     block, anything else as its JSON), the stop reason or status;
 *   key: each text piece normalised on its own (bound_same_text's rule), for the exact
 *     comparator;
 *   choices: how many (1 for an API without choices).
 */
struct bound_answer {
    struct pc_buf text, form, key;
    int choices;
    bool cut;
    bool rounded; /* the form holds a number rounded (an integer of 2^53 or more) */
};
/*
 * 0, or -1 (a freed) if the answer has no text (an error, an embedding, only thinking),
 * does not parse, or holds "\u0000" (cJSON would end its text there).
 */
int bound_answer_read(const struct entry *e, struct bound_answer *a);
void bound_answer_free(struct bound_answer *a);
/* Its text alone into out: 0, 1 when cut, -1 as bound_answer_read. */
int bound_answer_text(const struct entry *e, struct pc_buf *out);
/* Normalised for the exact comparator: lower case, one space between words, no outer punctuation.
 */
void bound_normalise(const char *s, struct pc_buf *out);
/*
 * The exact comparator: the two answers are the same once normalised; two that normalise to
 * nothing (only punctuation) are the same only when their texts are, white space aside.
 */
bool bound_same_text(const char *a, const char *b);

/* ---- runtime ------------------------------------------------------------------ */

struct bound;       /* the process's part: settings, the last global counts seen */
struct bound_port;  /* one worker's: its Redis, metrics, comparators, random draws */
struct bound_view;  /* one lookup's reads and decisions */
struct bound_probe; /* a candidate to compare with the fresh answer (counted references) */
struct bound_cmp;   /* a comparison in progress */

/* NULL when semantic-max-error is off. space: the embedder's vector space. */
struct bound *bound_create(const struct conf *c, const char *space);
void bound_destroy(struct bound **b);
/* Its series (pc_stats.h: the threshold at delta and its figures), read from a struct bound. */
extern const struct stat_group bound_series;

/*
 * How the embedding comparator gets the cosine of two texts (the semantic
 * stage's embedder): start returns a handle (NULL: cannot; no callback), cb
 * runs once later with the cosine, or a NaN on failure; cancel stops it.
 */
typedef void bound_cos_fn(void *arg, double cosine);
struct bound_pair_ops {
    void *(*start)(void *ctx, const char *a, const char *b, bound_cos_fn *cb, void *arg);
    void (*cancel)(void **handle);
};

/* b, store and st must outlive the port; verify may be NULL (then no model comparator). */
struct bound_port *bound_port_create(struct bound *b, struct store *store, struct stats *st,
                                     struct verify *verify, const struct bound_pair_ops *pair,
                                     void *pair_ctx);
void bound_port_destroy(struct bound_port **bp);

/*
 * A lookup's view, for candidates in partition (PC_SHA256_LEN bytes) of the tenant tenant_id
 * (TENANT_ID_LEN hex characters, whose prior it reads; NULL: the anonymous tenant).
 */
struct bound_view *bound_view_create(struct bound_port *bp, const char *tenant_id,
                                     const unsigned char *partition);
/* Cancels the reads in progress. */
void bound_view_free(struct bound_view **v);

typedef void bound_ready_fn(void *arg);
/*
 * Read what deciding on a candidate needs: the entry's marks, and with the
 * first candidate the partition's and global counts. Returns 1 if reads were
 * sent (cb runs once, when all are in, unless the view is freed first), 0 if
 * none could be (Redis away: the decision withholds).
 */
int bound_view_fetch(struct bound_view *v, const char *tenant_id,
                     const unsigned char exact[PC_SHA256_LEN], bound_ready_fn *cb, void *arg);
/*
 * Decide for the candidate fetched last, at similarity sim (counted in the metrics). Partition
 * counts that could not be read (or were rejected) allow nothing: the global prior needs
 * them, for their veto.
 */
void bound_view_decide(struct bound_view *v, double sim, struct bound_decision *out);
/*
 * A probe for the candidate decided last (explore or withhold): its cached
 * answer, similarity and keys. NULL if the cached answer has no text to
 * compare (counted in semantic_bound_uncompared). One reference for the
 * caller. A probe whose last reference goes before it was compared (no full
 * answer came: an upstream error, a cut stream...) is counted there too, so
 * withheld + explored = compared + compare_errors + uncompared.
 */
struct bound_probe *bound_probe_create(struct bound_view *v, const struct bound_decision *d,
                                       double sim, const struct entry *cand,
                                       const char *cand_tenant,
                                       const unsigned char cand_exact[PC_SHA256_LEN]);
struct bound_probe *bound_probe_ref(struct bound_probe *p);
void bound_probe_unref(struct bound_probe **p);
double bound_probe_similarity(const struct bound_probe *p);
/* Sent upstream on purpose (the candidate was allowed). */
bool bound_probe_explored(const struct bound_probe *p);
/* "agreed", "disagreed", or NULL while not compared (or the comparison failed). */
const char *bound_probe_verdict(const struct bound_probe *p);

typedef void bound_cmp_fn(void *arg);
/*
 * Compare the fresh answer with the probe's, record the observation in
 * Redis and set the probe's verdict. Returns 1 if done already (no
 * callback), 0 if under way (cb runs once, later, unless cancelled; *cmp
 * is the handle), -1 if it cannot be compared (no callback): either answer
 * without text or longer than BOUND_ANSWER_MAX (counted in
 * semantic_bound_compare_errors), or the probe compared already.
 */
int bound_compare(struct bound_port *bp, struct bound_probe *p, const struct entry *fresh,
                  bound_cmp_fn *cb, void *arg, struct bound_cmp **cmp);
/* Nothing is recorded and cb never runs; *c is NULLed. */
void bound_compare_cancel(struct bound_cmp **c);

/*
 * An answer was written over the entry (tenant_id, exact) with a life of
 * ttl_ms: its marks, if any, take the same expiry (PEXPIRE), so a refreshed
 * entry is not served where it was found wrong once the old one's life ends.
 */
void bound_entry_renewed(struct bound_port *bp, const char *tenant_id,
                         const unsigned char exact[PC_SHA256_LEN], int64_t ttl_ms);

#endif
