/*
 * pc_savings.h - what the cache saved and what upstream calls cost, counted
 * when it happens: each hit, each upstream answer and the proxy's own calls
 * (embedder, verifier) are priced at list price with the price list in force
 * (pc_pricing.h) and added to the worker's metrics (the PC_FAMILIES money,
 * token and latency counters) and to the hourly counters (pc_tally.h) that
 * `promptcache report` and the dashboard read.
 *
 *   hit    ─▶ saved = cost of the original call: uncached input, cache-read
 *             and cache-write input at their own prices, plus output;
 *             latency saved = the original's upstream time - the hit's own
 *   miss   ─▶ upstream cost (same formula); the provider's prefix caching
 *             apart: what cache reads took off, what cache writes added
 *   own    ─▶ embedder and verifier tokens since the last look, priced by
 *             embedder-model / semantic-verify-model
 *
 * A model the list does not price is counted in tokens only (its money is
 * unknown; answers_unpriced counts them) and logged once per process.
 * Everything runs on the worker's thread.
 */
#ifndef PC_SAVINGS_H
#define PC_SAVINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_cache.h"
#include "pc_tally.h"

struct worker;

/* One request's money, for its access log line. */
struct savings {
    bool priced;              /* the model has a price (else amount is 0 and unknown) */
    double amount;            /* a hit: saved; an upstream answer: its cost */
    int64_t latency_saved_ms; /* a hit: the original's upstream time minus the hit's own */
};

/*
 * A hit of model served from an answer with usage u, first fetched in
 * orig_latency_ms; the hit itself took took_us. Adds the tally fields of the
 * hit to v (the caller's row for this request).
 */
void savings_hit(struct worker *w, const char *model, enum cache_match match,
                 const struct api_usage *u, int64_t orig_latency_ms, int64_t took_us,
                 int64_t v[TALLY__COUNT], struct savings *out);
/* An upstream answer of model with usage u; adds its tally fields to v. */
void savings_upstream(struct worker *w, const char *model, const struct api_usage *u,
                      int64_t v[TALLY__COUNT], struct savings *out);
/* What u costs for model at the worker's prices (for a log line; counts nothing). */
void savings_price(const struct worker *w, const char *model, const struct api_usage *u,
                   struct savings *out);
/* Price the proxy's own calls made since the last time (cheap when there were none). */
void savings_own_calls(struct worker *w);

#endif
