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

#include "pc_tally.h"
#include "pc_util.h"

struct conf;

enum report_format {
    REPORT_TABLE = 0,
    REPORT_JSON,
    REPORT_CSV,
};

#define REPORT_HOURS_DEFAULT 24
#define REPORT_HOURS_MAX     (TALLY_KEEP_DAYS * 24)

/* "table", "json", "csv"; -1 if none of them. */
int report_format_parse(const char *s);

/*
 * The command: read the last `hours` hours from conf->redis, price them with
 * conf->pricing (if set) and print to stdout. Returns the exit status.
 */
int report_cli(const struct conf *c, enum report_format f, int hours);

struct report_row {
    char *name; /* model or tenant id; NULL for the total */
    int64_t v[TALLY__COUNT];
    double money_saved;
    bool unpriced; /* saved tokens of a model without a price went into it */
};

/* Rows by name: an array plus an open-addressing index into it. */
struct report_rows {
    struct report_row *v;
    size_t n, cap;
    size_t *slots; /* index + 1; 0 = empty */
    size_t nslots;
};

struct report_price {
    char *model;   /* a model name or a prefix of model names */
    double input;  /* per million prompt tokens */
    double output; /* per million completion tokens */
};

struct report {
    int64_t from_ms, to_ms; /* [from, to) */
    struct report_row total;
    struct report_rows models;
    struct report_rows tenants;
    struct report_price *prices;
    size_t nprices;
    char *currency; /* NULL without pricing */
    size_t skipped; /* fields that were not the proxy's (foreign or corrupt data) */
};

void report_init(struct report *r, int64_t from_ms, int64_t to_ms);
void report_free(struct report *r);
/*
 * Pricing file: {"currency": "USD", "models": {NAME: {"input": N, "output":
 * N}, ...}}, prices per million tokens (output may be left out: 0). A model
 * is priced by the entry of its own name or, failing that, by an entry it
 * extends with a date or tag only: "gpt-4o-mini-2024-07-18" and
 * "claude-sonnet-4-5-20250929" by "gpt-4o-mini" and "claude-sonnet-4-5"
 * (suffixes -YYYY-MM-DD, -YYYYMMDD, -latest, @..., :...), but never
 * "claude-opus-4-5" by "claude-opus-4". A repeated name: the last one counts.
 * Returns 0, or -1 with err set.
 */
int report_load_prices(struct report *r, const char *json, size_t len, char *err, size_t errlen);
/*
 * Add one hash field of an hourly bucket. -1 (and r->skipped counted) if it is
 * not one the proxy writes: unknown metric, malformed tenant or model, or a
 * negative count. Sums saturate instead of overflowing.
 */
int report_add_field(struct report *r, const char *field, size_t flen, int64_t count);
/* Sort models and tenants by requests, most first. */
void report_sort(struct report *r);
void report_render(const struct report *r, enum report_format f, struct pc_buf *out);

#endif
