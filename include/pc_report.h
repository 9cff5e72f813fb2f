/*
 * pc_report.h - `promptcache report`: hit rates, tokens and money saved,
 * in total, per model and per tenant, over the last N hours, read from the
 * hourly hashes the proxies write (pc_tally.h). Output as a table, JSON or
 * CSV.
 *
 * The pieces below the CLI are pure (no Redis) so they can be unit tested:
 * a report is filled field by field ("METRIC|TENANT|MODEL" -> count), priced
 * from a pricing file, and rendered.
 */
#ifndef PC_REPORT_H
#define PC_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_pricing.h"
#include "pc_tally.h"
#include "pc_util.h"

struct conf;
struct tenants;

enum report_format {
    REPORT_TABLE = 0,
    REPORT_JSON,
    REPORT_CSV,
};

#define REPORT_HOURS_DEFAULT 24
#define REPORT_HOURS_MAX     (TALLY_KEEP_DAYS * 24)

/*
 * What `promptcache report` reads is bounded, whoever wrote the hashes (the
 * dashboard's bounds, pc_dash.h): fields of one hash read at most (HSCAN,
 * valid or not), key fingerprints taken from TENANTS_KEY_FP, and models and
 * tenants summed by name (the others under TALLY_OTHER). It holds no field:
 * each is summed as it is read, so the rows are all it keeps.
 */
#define REPORT_SCAN_MAX    200000
#define REPORT_FPS_MAX     4096
#define REPORT_MODELS_MAX  500
#define REPORT_TENANTS_MAX 5000

/* "table", "json", "csv"; -1 if none of them. */
int report_format_parse(const char *s);

/*
 * The command: read the last `hours` hours from conf->redis, price them with
 * the configuration's price list (pricing; off: tokens only) and print to
 * stdout. Returns the exit status.
 */
int report_cli(const struct conf *c, enum report_format f, int hours);

/* Money, in the price list's currency; every figure at list price. */
struct report_money {
    double saved;          /* what the answers served from the cache cost when they were made */
    double saved_semantic; /* of saved, by meaning */
    double upstream;       /* what the calls that went upstream cost */
    double cache_saving;   /* of those, what the provider's prompt cache took off */
    double write_premium;  /* ... and what writing to it added */
    double own;            /* the proxy's own calls (embedder, verifier) */
    double explore; /* of upstream, calls made to verify semantic hits (semantic-max-error) */
};

struct report_row {
    char *name; /* model or tenant id; NULL for the total */
    int64_t v[TALLY__COUNT];
    struct report_money money;
    bool unpriced; /* tokens of a model without a price went into it (its money is partial) */
};

/* Rows by name: an array plus an open-addressing index into it. */
struct report_rows {
    struct report_row *v;
    size_t n, cap;
    size_t *slots; /* index + 1; 0 = empty */
    size_t nslots;
};

struct report {
    int64_t from_ms, to_ms; /* [from, to) */
    struct report_row total;
    struct report_rows models;
    struct report_rows tenants;
    struct pricing *prices; /* a reference, or NULL: tokens only */
    struct tenants *names;  /* tenant-names (a reference), or NULL: tenants by id only */
    bool no_tenants;        /* do not keep rows per tenant (the dashboard) */
    int64_t lat[TALLY_LAT__COUNT][TALLY_LAT_BUCKETS]; /* request durations (pc_tally.h) */
    size_t skipped; /* fields that were not the proxy's (foreign or corrupt data) */
    /* Rows kept by name (0: no bound); a field of a model or tenant past them goes to TALLY_OTHER.
     */
    size_t max_models, max_tenants;
    size_t folded;          /* fields summed under TALLY_OTHER for want of a row */
    size_t partial;         /* hashes read in part (report_note_partial) */
    char partial_note[256]; /* the first of them and why, "" if none */
};

void report_init(struct report *r, int64_t from_ms, int64_t to_ms);
void report_free(struct report *r);
/* Price what is added from now on with p (a new reference is taken; NULL: no prices). */
void report_set_prices(struct report *r, struct pricing *p);
/*
 * A price list from JSON text (pc_pricing.h: the project's format or
 * LiteLLM's). Returns 0, or -1 with err set.
 */
int report_load_prices(struct report *r, const char *json, size_t len, char *err, size_t errlen);
/* Name tenant rows with t (a new reference is taken; NULL: by id only). */
void report_set_tenants(struct report *r, struct tenants *t);
/* The name of a tenant row (tenant-names), or NULL. */
const char *report_tenant_name(const struct report *r, const struct report_row *row);
/*
 * Read the key fingerprints the proxies recorded (TENANTS_KEY_FP, pc_tenants.h)
 * into r's names, so tenants named by key hash are named here too. Pairs that
 * are not what a proxy writes are skipped and counted. At most REPORT_SCAN_MAX
 * fields are read and REPORT_FPS_MAX fingerprints taken; past them the hash
 * is noted as read in part. 0, or -1 after a message.
 */
struct rcli;
int report_read_key_names(struct rcli *k, struct report *r);

/* The list's currency, or NULL without prices. */
const char *report_currency(const struct report *r);
/*
 * Derived figures of a row: saved money net of the proxy's own calls, and
 * what 1,000 requests cost with the cache (upstream + own calls) and would
 * have cost without it (upstream + what the hits saved). NAN when the row
 * has no requests.
 */
double report_net_saved(const struct report_row *row);
double report_cost_per_1k(const struct report_row *row, bool with_cache);
/* Quantile q (0..1) of a latency histogram in ms (linear within a bucket); NAN if empty. */
double report_lat_quantile(const int64_t n[TALLY_LAT_BUCKETS], double q);

/*
 * The requests a latency histogram counts, saturated at INT64_MAX: each bucket is a count read
 * from Redis (in range on its own, not summed with the others).
 */
int64_t report_lat_count(const int64_t n[TALLY_LAT_BUCKETS]);
/*
 * Add one hash field of an hourly bucket: "METRIC|TENANT|MODEL" or the
 * latency histogram's "lat|KIND|B". -1 (and r->skipped counted) if it is
 * not one the proxy writes: unknown metric, malformed tenant or model, or a
 * negative count. Sums saturate instead of overflowing.
 */
int report_add_field(struct report *r, const char *field, size_t flen, int64_t count);
/* Sort models and tenants by requests, most first. */
void report_sort(struct report *r);
void report_render(const struct report *r, enum report_format f, struct pc_buf *out);
/* One row's figures as JSON members (no braces): counts, hit rate, money (null when unknown). */
void report_row_json(const struct report *r, const struct report_row *row, bool model_row,
                     struct pc_buf *out);

struct rcli;
/*
 * Each field of one hourly hash (HSCAN pages; a malformed one with count -1),
 * at most REPORT_SCAN_MAX of them: 0 when read through, 1 when the hash had
 * more (what was left is unread; r->partial and its note say so when r is not
 * NULL), RCLI_NOT_A_HASH when the key holds another type (noted the same way),
 * or -1 after an error message.
 */
typedef void report_field_fn(void *arg, const char *field, size_t flen, int64_t count);
int report_scan_hour(struct rcli *k, int64_t hour_ms, report_field_fn *fn, void *arg,
                     struct report *r);
/* Note that hash key was read in part, and why (the first note is kept; all are counted). */
void report_note_partial(struct report *r, const char *key, const char *why);

#endif
