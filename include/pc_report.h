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
};

struct report_price {
    char *model;   /* a model name or a prefix of model names */
    double input;  /* per million prompt tokens */
    double output; /* per million completion tokens */
};

struct report {
    int64_t from_ms, to_ms; /* [from, to) */
    struct report_row total;
    struct report_row *models;
    size_t nmodels;
    struct report_row *tenants;
    size_t ntenants;
    struct report_price *prices;
    size_t nprices;
    char *currency; /* NULL without pricing */
};

void report_init(struct report *r, int64_t from_ms, int64_t to_ms);
void report_free(struct report *r);
/*
 * Pricing file: {"currency": "USD", "unit": "per 1M tokens", "models": {NAME:
 * {"input": N, "output": N}, ...}}. A model is priced by the entry named like
 * it or, failing that, by the longest entry that is a prefix of its name
 * ("gpt-4o-mini-2024-07-18" by "gpt-4o-mini"). Returns 0, or -1 with err set.
 */
int report_load_prices(struct report *r, const char *json, size_t len, char *err, size_t errlen);
/* Add one hash field of an hourly bucket; -1 (ignored by the CLI) if it is not ours. */
int report_add_field(struct report *r, const char *field, size_t flen, int64_t count);
/* Sort models and tenants by requests, most first. */
void report_sort(struct report *r);
void report_render(const struct report *r, enum report_format f, struct pc_buf *out);

#endif
