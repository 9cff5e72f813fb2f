/*
 * report.c - `promptcache report` (see pc_report.h). Owns the report being
 * built: the total, one row per model and per tenant, and the prices.
 *
 *   Redis pc:2:r:YYYYMMDDHH (HSCAN, one per hour) ─▶ report_add_field
 *        ─▶ rows (total, model, tenant; money priced per field) ─▶ render
 *
 * Money is priced per field, at read time, with the configuration's price
 * list (pc_pricing.h). Each token field adds its share of a linear formula,
 * so the sum over fields is what pricing each call would give:
 *   cost = prompt x input + cached x (read - input) + written x (write - input)
 *          + completion x output
 */
#include "pc_report.h"
#include "pc_conf.h"
#include "pc_rcli.h"
#include "pc_tenants.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>

int report_format_parse(const char *s)
{
    if (strcmp(s, "table") == 0)
        return REPORT_TABLE;
    if (strcmp(s, "json") == 0)
        return REPORT_JSON;
    if (strcmp(s, "csv") == 0)
        return REPORT_CSV;
    return -1;
}

void report_init(struct report *r, int64_t from_ms, int64_t to_ms)
{
    memset(r, 0, sizeof(*r));
    r->from_ms = from_ms;
    r->to_ms = to_ms;
}

static void rows_free(struct report_rows *rows)
{
    for (size_t i = 0; i < rows->n; i++)
        free(rows->v[i].name);
    free(rows->v);
    free(rows->slots);
    memset(rows, 0, sizeof(*rows));
}

void report_free(struct report *r)
{
    rows_free(&r->models);
    rows_free(&r->tenants);
    pricing_release(&r->prices);
    tenants_release(&r->names);
    memset(r, 0, sizeof(*r));
}

/* ---- rows by name ------------------------------------------------------------ */

static size_t name_hash(const char *s, size_t n)
{
    return (size_t)pc_fnv1a(PC_FNV_SEED, s, n);
}

static void rows_reindex(struct report_rows *rows)
{
    rows->nslots = rows->nslots ? rows->nslots * 2 : 64;
    free(rows->slots);
    rows->slots = pc_calloc(rows->nslots, sizeof(*rows->slots));
    for (size_t i = 0; i < rows->n; i++) {
        const char *name = rows->v[i].name;
        size_t k = name_hash(name, strlen(name)) & (rows->nslots - 1);
        while (rows->slots[k] != 0)
            k = (k + 1) & (rows->nslots - 1);
        rows->slots[k] = i + 1;
    }
}

/* The row named name[0..len), or NULL. */
static struct report_row *rows_find(const struct report_rows *rows, const char *name, size_t len)
{
    if (rows->nslots == 0)
        return NULL;
    size_t k = name_hash(name, len) & (rows->nslots - 1);
    for (; rows->slots[k] != 0; k = (k + 1) & (rows->nslots - 1)) {
        struct report_row *row = &rows->v[rows->slots[k] - 1];
        if (strlen(row->name) == len && memcmp(row->name, name, len) == 0)
            return row;
    }
    return NULL;
}

/* The row named name[0..len), created if new. The index stays under half full. */
static struct report_row *rows_get(struct report_rows *rows, const char *name, size_t len)
{
    if (2 * (rows->n + 1) > rows->nslots)
        rows_reindex(rows);
    size_t k = name_hash(name, len) & (rows->nslots - 1);
    for (; rows->slots[k] != 0; k = (k + 1) & (rows->nslots - 1)) {
        struct report_row *row = &rows->v[rows->slots[k] - 1];
        if (strlen(row->name) == len && memcmp(row->name, name, len) == 0)
            return row;
    }
    if (rows->n == rows->cap) {
        rows->cap = rows->cap ? rows->cap * 2 : 16;
        rows->v = pc_realloc(rows->v, rows->cap * sizeof(*rows->v));
    }
    struct report_row *row = &rows->v[rows->n++];
    memset(row, 0, sizeof(*row));
    row->name = pc_strndup(name, len);
    rows->slots[k] = rows->n;
    return row;
}

/* ---- pricing ---------------------------------------------------------------- */

void report_set_prices(struct report *r, struct pricing *p)
{
    pricing_release(&r->prices);
    r->prices = pricing_ref(p);
}

void report_set_tenants(struct report *r, struct tenants *t)
{
    tenants_release(&r->names);
    r->names = tenants_ref(t);
}

const char *report_tenant_name(const struct report *r, const struct report_row *row)
{
    return row->name != NULL ? tenants_name(r->names, row->name) : NULL;
}

int report_load_prices(struct report *r, const char *json, size_t len, char *err, size_t errlen)
{
    struct pricing *p = pricing_parse(json, len, "pricing", err, errlen, NULL);
    if (p == NULL)
        return -1;
    report_set_prices(r, p);
    pricing_release(&p);
    return 0;
}

const char *report_currency(const struct report *r)
{
    return r->prices ? pricing_currency(r->prices) : NULL;
}

/* What count tokens of metric m add to each money figure at price pr. */
static void money_of(enum tally_metric m, int64_t count, const struct price *pr,
                     struct report_money *d)
{
    double n = (double)count / 1e6;
    switch (m) {
    case TALLY_saved_prompt_tokens:
        d->saved = n * pr->input;
        break;
    case TALLY_saved_cached_tokens:
        d->saved = n * (pr->cache_read - pr->input);
        break;
    case TALLY_saved_cache_write_tokens:
        d->saved = n * (pr->cache_write - pr->input);
        break;
    case TALLY_saved_cache_write_1h_tokens:
        d->saved = n * (pr->cache_write_1h - pr->cache_write);
        break;
    case TALLY_saved_completion_tokens:
        d->saved = n * pr->output;
        break;
    case TALLY_saved_audio_prompt_tokens:
        d->saved = n * (pr->input_audio - pr->input);
        break;
    case TALLY_saved_audio_completion_tokens:
        d->saved = n * (pr->output_audio - pr->output);
        break;
    case TALLY_semantic_saved_audio_prompt_tokens:
        d->saved_semantic = n * (pr->input_audio - pr->input);
        break;
    case TALLY_semantic_saved_audio_completion_tokens:
        d->saved_semantic = n * (pr->output_audio - pr->output);
        break;
    case TALLY_upstream_audio_prompt_tokens:
        d->upstream = n * (pr->input_audio - pr->input);
        break;
    case TALLY_upstream_audio_completion_tokens:
        d->upstream = n * (pr->output_audio - pr->output);
        break;
    case TALLY_semantic_saved_prompt_tokens:
        d->saved_semantic = n * pr->input;
        break;
    case TALLY_semantic_saved_cached_tokens:
        d->saved_semantic = n * (pr->cache_read - pr->input);
        break;
    case TALLY_semantic_saved_cache_write_tokens:
        d->saved_semantic = n * (pr->cache_write - pr->input);
        break;
    case TALLY_semantic_saved_cache_write_1h_tokens:
        d->saved_semantic = n * (pr->cache_write_1h - pr->cache_write);
        break;
    case TALLY_semantic_saved_completion_tokens:
        d->saved_semantic = n * pr->output;
        break;
    case TALLY_upstream_prompt_tokens:
        d->upstream = n * pr->input;
        break;
    case TALLY_upstream_cached_tokens:
        d->upstream = n * (pr->cache_read - pr->input);
        d->cache_saving = n * (pr->input - pr->cache_read);
        break;
    case TALLY_upstream_cache_write_tokens:
        d->upstream = n * (pr->cache_write - pr->input);
        d->write_premium = n * PC_MAX(pr->cache_write - pr->input, 0.0);
        break;
    case TALLY_upstream_cache_write_1h_tokens:
        d->upstream = n * (pr->cache_write_1h - pr->cache_write);
        d->write_premium = n * (PC_MAX(pr->cache_write_1h - pr->input, 0.0) -
                                PC_MAX(pr->cache_write - pr->input, 0.0));
        break;
    case TALLY_upstream_completion_tokens:
        d->upstream = n * pr->output;
        break;
    case TALLY_own_prompt_tokens:
        d->own = n * pr->input;
        break;
    case TALLY_own_completion_tokens:
        d->own = n * pr->output;
        break;
    case TALLY_explore_prompt_tokens:
        d->explore = n * pr->input;
        break;
    case TALLY_explore_completion_tokens:
        d->explore = n * pr->output;
        break;
    default:
        break;
    }
}

/* The token metrics money_of prices (every other metric is a count). */
static bool priced_metric(enum tally_metric m)
{
    switch (m) {
    case TALLY_saved_prompt_tokens:
    case TALLY_saved_cached_tokens:
    case TALLY_saved_cache_write_tokens:
    case TALLY_saved_cache_write_1h_tokens:
    case TALLY_saved_completion_tokens:
    case TALLY_semantic_saved_prompt_tokens:
    case TALLY_semantic_saved_cached_tokens:
    case TALLY_semantic_saved_cache_write_tokens:
    case TALLY_semantic_saved_cache_write_1h_tokens:
    case TALLY_semantic_saved_completion_tokens:
    case TALLY_upstream_prompt_tokens:
    case TALLY_upstream_cached_tokens:
    case TALLY_upstream_cache_write_tokens:
    case TALLY_upstream_cache_write_1h_tokens:
    case TALLY_upstream_completion_tokens:
    case TALLY_saved_audio_prompt_tokens:
    case TALLY_saved_audio_completion_tokens:
    case TALLY_semantic_saved_audio_prompt_tokens:
    case TALLY_semantic_saved_audio_completion_tokens:
    case TALLY_upstream_audio_prompt_tokens:
    case TALLY_upstream_audio_completion_tokens:
    case TALLY_own_prompt_tokens:
    case TALLY_own_completion_tokens:
    case TALLY_explore_prompt_tokens:
    case TALLY_explore_completion_tokens:
        return true;
    default:
        return false;
    }
}

static void money_add(struct report_money *sum, const struct report_money *d)
{
    sum->saved += d->saved;
    sum->saved_semantic += d->saved_semantic;
    sum->upstream += d->upstream;
    sum->cache_saving += d->cache_saving;
    sum->write_premium += d->write_premium;
    sum->own += d->own;
    sum->explore += d->explore;
}

double report_net_saved(const struct report_row *row)
{
    return row->money.saved - row->money.own;
}

double report_cost_per_1k(const struct report_row *row, bool with_cache)
{
    int64_t n = row->v[TALLY_requests];
    if (n <= 0)
        return NAN;
    double paid = row->money.upstream + (with_cache ? row->money.own : row->money.saved);
    return paid * 1000.0 / (double)n;
}

static void add_sat(int64_t *sum, int64_t n);

int64_t report_lat_count(const int64_t n[TALLY_LAT_BUCKETS])
{
    int64_t total = 0;
    for (int b = 0; b < TALLY_LAT_BUCKETS; b++)
        add_sat(&total, n[b]);
    return total;
}

double report_lat_quantile(const int64_t n[TALLY_LAT_BUCKETS], double q)
{
    static const int64_t bounds[TALLY_LAT_BUCKETS] = TALLY_LAT_BOUNDS_MS;
    int64_t total = report_lat_count(n);
    if (total == 0)
        return NAN;
    double rank = q * (double)total, seen = 0;
    for (int b = 0; b < TALLY_LAT_BUCKETS; b++) {
        if (n[b] == 0 || seen + (double)n[b] < rank) {
            seen += (double)n[b];
            continue;
        }
        double lo = b > 0 ? (double)bounds[b - 1] : 0;
        if (bounds[b] < 0)
            return lo; /* beyond the last bound: the bound is all that is known */
        return lo + ((double)bounds[b] - lo) * (rank - seen) / (double)n[b];
    }
    return (double)bounds[TALLY_LAT_BUCKETS - 2];
}

/* ---- aggregation -------------------------------------------------------------- */

/* "lat|KIND|B": a bucket of the hourly latency histogram. */
static int add_lat(struct report *r, const char *field, size_t flen, int64_t count)
{
    for (int k = 0; k < TALLY_LAT__COUNT; k++) {
        size_t kl = strlen(tally_lat_kind_names[k]);
        if (flen < 4 + kl + 2 || memcmp(field + 4, tally_lat_kind_names[k], kl) != 0 ||
            field[4 + kl] != '|')
            continue;
        const char *b = field + 4 + kl + 1;
        size_t bl = flen - 4 - kl - 1;
        int idx = 0;
        for (size_t i = 0; i < bl && idx < TALLY_LAT_BUCKETS; i++)
            idx = (b[i] >= '0' && b[i] <= '9') ? idx * 10 + (b[i] - '0') : TALLY_LAT_BUCKETS;
        if (bl == 0 || bl > 2 || idx >= TALLY_LAT_BUCKETS || count < 0)
            break;
        add_sat(&r->lat[k][idx], count);
        return 0;
    }
    r->skipped++;
    return -1;
}

/*
 * The row of name[0..len) in rows: its own while there is room for max names
 * (0: no bound), else TALLY_OTHER's (a row more), counted in r->folded.
 */
static struct report_row *row_for(struct report *r, struct report_rows *rows, const char *name,
                                  size_t len, size_t max)
{
    struct report_row *row = rows_find(rows, name, len);
    if (row != NULL)
        return row;
    if (max > 0 && rows->n >= max) {
        r->folded++;
        return rows_get(rows, TALLY_OTHER, strlen(TALLY_OTHER));
    }
    return rows_get(rows, name, len);
}

int report_add_field(struct report *r, const char *field, size_t flen, int64_t count)
{
    if (flen > 4 && memcmp(field, "lat|", 4) == 0)
        return add_lat(r, field, flen, count);
    const char *bar1 = memchr(field, '|', flen);
    const char *bar2 = bar1 ? memchr(bar1 + 1, '|', (size_t)(field + flen - bar1 - 1)) : NULL;
    int m = bar1 ? tally_metric_parse(field, (size_t)(bar1 - field)) : -1;
    const char *tenant = bar1 ? bar1 + 1 : NULL, *model = bar2 ? bar2 + 1 : NULL;
    size_t tlen = bar2 ? (size_t)(bar2 - tenant) : 0,
           mlen = model ? (size_t)(field + flen - model) : 0;
    if (m < 0 || bar2 == NULL || count < 0 || !tally_valid_tenant(tenant, tlen) ||
        !tally_valid_model(model, mlen)) {
        r->skipped++;
        return -1;
    }
    struct report_row *rows[3] = {
        &r->total, row_for(r, &r->models, model, mlen, r->max_models),
        r->no_tenants ? NULL : row_for(r, &r->tenants, tenant, tlen, r->max_tenants)};
    struct report_money d = {0};
    bool unpriced = false;
    if (r->prices != NULL && count > 0 && priced_metric((enum tally_metric)m)) {
        char name[TALLY_MODEL_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)mlen, model);
        const struct price *p = pricing_find(r->prices, name);
        if (p != NULL)
            money_of((enum tally_metric)m, count, p, &d);
        else
            unpriced = true;
    }
    for (int i = 0; i < 3; i++) {
        if (rows[i] == NULL)
            continue;
        add_sat(&rows[i]->v[m], count);
        money_add(&rows[i]->money, &d);
        rows[i]->unpriced |= unpriced;
    }
    return 0;
}

static void add_sat(int64_t *sum, int64_t n)
{
    if (__builtin_add_overflow(*sum, n, sum))
        *sum = INT64_MAX;
}

static int by_requests(const void *a, const void *b)
{
    const struct report_row *x = a, *y = b;
    if (x->v[TALLY_requests] != y->v[TALLY_requests])
        return x->v[TALLY_requests] > y->v[TALLY_requests] ? -1 : 1;
    return strcmp(x->name, y->name);
}

void report_sort(struct report *r)
{
    struct report_rows *sets[] = {&r->models, &r->tenants};
    for (size_t i = 0; i < 2; i++) {
        if (sets[i]->n > 1)
            qsort(sets[i]->v, sets[i]->n, sizeof(*sets[i]->v), by_requests);
        free(sets[i]->slots); /* the order changed: no more lookups after sorting */
        sets[i]->slots = NULL;
        sets[i]->nslots = 0;
    }
}

/* ---- rendering ------------------------------------------------------------------ */

static double hit_rate(const struct report_row *row)
{
    /* In double: two counts read from Redis, each in range, may not sum in an int64_t. */
    double looked = (double)row->v[TALLY_hits] + (double)row->v[TALLY_misses];
    return looked > 0 ? (double)row->v[TALLY_hits] / looked : 0.0;
}

/*
 * Money is known with prices, for a model row only when the model has a
 * price; the total and a tenant's row then sum what is priced and say they
 * are partial.
 */
static bool money_known(const struct report *r, const struct report_row *row, bool model_row)
{
    return r->prices != NULL && !(model_row && row->unpriced) && isfinite(row->money.saved);
}

static void utc(int64_t ms, const char *fmt, char *out, size_t outlen)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, outlen, fmt, &tm);
}

/* The money figures of a row in order, with their JSON / CSV names. */
#define REPORT_MONEY(X)                                                \
    X(money_saved, row->money.saved)                                   \
    X(money_saved_exact, row->money.saved - row->money.saved_semantic) \
    X(money_saved_semantic, row->money.saved_semantic)                 \
    X(upstream_cost, row->money.upstream)                              \
    X(provider_cache_saved, row->money.cache_saving)                   \
    X(provider_cache_write_premium, row->money.write_premium)          \
    X(own_calls_cost, row->money.own)                                  \
    X(explore_cost, row->money.explore)                                \
    X(net_saved, report_net_saved(row))                                \
    X(cost_per_1k_requests, report_cost_per_1k(row, true))             \
    X(cost_per_1k_requests_without_cache, report_cost_per_1k(row, false))

static void json_num(struct pc_buf *out, bool known, double v)
{
    if (known && isfinite(v))
        pc_buf_printf(out, "%.9f", v);
    else
        pc_buf_append_str(out, "null");
}

static void row_json(const struct report *r, const struct report_row *row, bool model_row,
                     struct pc_buf *out)
{
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, "\"%s\":%lld,", tally_metric_name((enum tally_metric)m),
                      (long long)row->v[m]);
    pc_buf_printf(out, "\"hit_rate\":%.4f,\"latency_saved_seconds\":%.3f", hit_rate(row),
                  (double)row->v[TALLY_latency_saved_ms] / 1000.0);
    bool known = money_known(r, row, model_row);
#define PC_REPORT_JSON_MONEY(name, expr)       \
    pc_buf_append_str(out, ",\"" #name "\":"); \
    json_num(out, known, expr);
    REPORT_MONEY(PC_REPORT_JSON_MONEY)
#undef PC_REPORT_JSON_MONEY
    pc_buf_printf(out, ",\"money_partial\":%s",
                  r->prices != NULL && !model_row && row->unpriced ? "true" : "false");
}

void report_row_json(const struct report *r, const struct report_row *row, bool model_row,
                     struct pc_buf *out)
{
    row_json(r, row, model_row, out);
}

/* Names are validated on the way in (model and tenant character sets): safe as they are. */
static void json_row(const struct report *r, const struct report_row *row, const char *label,
                     struct pc_buf *out)
{
    pc_buf_append_char(out, '{');
    if (label != NULL) {
        pc_buf_printf(out, "\"%s\":", label);
        pc_buf_json_str(out, row->name, strlen(row->name));
        pc_buf_append_char(out, ',');
    }
    if (label != NULL && strcmp(label, "tenant") == 0) {
        const char *name = report_tenant_name(r, row);
        pc_buf_append_str(out, "\"name\":");
        if (name != NULL)
            pc_buf_json_str(out, name, strlen(name));
        else
            pc_buf_append_str(out, "null");
        pc_buf_append_char(out, ',');
    }
    row_json(r, row, label != NULL && strcmp(label, "model") == 0, out);
    pc_buf_append_char(out, '}');
}

static void json_rows(const struct report *r, const struct report_rows *rows, const char *label,
                      struct pc_buf *out)
{
    pc_buf_printf(out, ",\"%ss\":[", label);
    for (size_t i = 0; i < rows->n; i++) {
        pc_buf_append_str(out, i ? "," : "");
        json_row(r, &rows->v[i], label, out);
    }
    pc_buf_append_char(out, ']');
}

static void json_latency(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, ",\"latency_ms\":{");
    for (int k = 0; k < TALLY_LAT__COUNT; k++) {
        int64_t n = report_lat_count(r->lat[k]);
        pc_buf_printf(out, "%s\"%s\":{\"count\":%lld", k ? "," : "", tally_lat_kind_names[k],
                      (long long)n);
        static const double qs[] = {0.5, 0.9, 0.99};
        static const char *const qn[] = {"p50", "p90", "p99"};
        for (size_t i = 0; i < PC_ARRAY_LEN(qs); i++) {
            pc_buf_printf(out, ",\"%s\":", qn[i]);
            json_num(out, n > 0, report_lat_quantile(r->lat[k], qs[i]));
        }
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, '}');
}

/* Where the prices come from: "pricing": {"source", "date", "format", "models"} or null. */
static void json_pricing(const struct report *r, struct pc_buf *out)
{
    const struct pricing *p = r->prices;
    pc_buf_append_str(out, ",\"pricing\":");
    if (p == NULL) {
        pc_buf_append_str(out, "null");
        return;
    }
    pc_buf_append_str(out, "{\"source\":");
    pc_buf_json_str(out, pricing_source(p), strlen(pricing_source(p)));
    pc_buf_append_str(out, ",\"date\":");
    if (pricing_date(p)[0] != '\0')
        pc_buf_json_str(out, pricing_date(p), strlen(pricing_date(p)));
    else
        pc_buf_append_str(out, "null");
    pc_buf_printf(out, ",\"format\":\"%s\",\"models\":%zu}", pricing_format_name(pricing_format(p)),
                  pricing_count(p));
}

static void render_json(const struct report *r, struct pc_buf *out)
{
    char from[32], to[32];
    utc(r->from_ms, "%Y-%m-%dT%H:%M:%SZ", from, sizeof(from));
    utc(r->to_ms, "%Y-%m-%dT%H:%M:%SZ", to, sizeof(to));
    pc_buf_printf(out, "{\"from\":\"%s\",\"to\":\"%s\",\"currency\":", from, to);
    const char *cur = report_currency(r);
    if (cur != NULL)
        pc_buf_json_str(out, cur, strlen(cur));
    else
        pc_buf_append_str(out, "null");
    json_pricing(r, out);
    pc_buf_append_str(out, ",\"total\":");
    json_row(r, &r->total, NULL, out);
    json_rows(r, &r->models, "model", out);
    json_rows(r, &r->tenants, "tenant", out);
    json_latency(r, out);
    pc_buf_append_str(out, ",\"partial\":"); /* a hash read in part: the first, and why */
    if (r->partial > 0)
        pc_buf_json_str(out, r->partial_note, strlen(r->partial_note));
    else
        pc_buf_append_str(out, "null");
    pc_buf_append_str(out, "}\n");
}

static void csv_num(struct pc_buf *out, bool known, double v)
{
    pc_buf_append_char(out, ',');
    if (known && isfinite(v))
        pc_buf_printf(out, "%.9f", v);
}

static void csv_row(const struct report *r, const struct report_row *row, const char *scope,
                    struct pc_buf *out)
{
    /* Names hold no comma, quote or line break (validated): no quoting needed. */
    pc_buf_printf(out, "%s,%s", scope, row->name ? row->name : "");
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, ",%lld", (long long)row->v[m]);
    pc_buf_printf(out, ",%.4f", hit_rate(row));
    bool known = money_known(r, row, strcmp(scope, "model") == 0);
#define PC_REPORT_CSV_MONEY(name, expr) csv_num(out, known, expr);
    REPORT_MONEY(PC_REPORT_CSV_MONEY)
#undef PC_REPORT_CSV_MONEY
    /* tenant names hold no comma or quote either (pc_tenants.h) */
    const char *tname = strcmp(scope, "tenant") == 0 ? report_tenant_name(r, row) : NULL;
    pc_buf_printf(out, ",%s\n", tname != NULL ? tname : "");
}

static void render_csv(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, "scope,name");
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, ",%s", tally_metric_name((enum tally_metric)m));
    pc_buf_append_str(out, ",hit_rate");
#define PC_REPORT_CSV_HEAD(name, expr) pc_buf_append_str(out, "," #name);
    {
        const struct report_row *row = NULL;
        (void)row;
        REPORT_MONEY(PC_REPORT_CSV_HEAD)
    }
#undef PC_REPORT_CSV_HEAD
    pc_buf_append_str(out, ",tenant_name\n");
    csv_row(r, &r->total, "total", out);
    for (size_t i = 0; i < r->models.n; i++)
        csv_row(r, &r->models.v[i], "model", out);
    for (size_t i = 0; i < r->tenants.n; i++)
        csv_row(r, &r->tenants.v[i], "tenant", out);
}

static void table_row(const struct report *r, const struct report_row *row, const char *indent,
                      const char *name, int width, bool model_row, struct pc_buf *out)
{
    pc_buf_printf(out, "%s%-*s %9lld %8lld %8lld %8lld %7lld %7.1f%% %12lld %12lld", indent,
                  width - (int)strlen(indent), name, (long long)row->v[TALLY_requests],
                  (long long)row->v[TALLY_hits], (long long)row->v[TALLY_misses],
                  (long long)row->v[TALLY_bypasses], (long long)row->v[TALLY_errors],
                  100.0 * hit_rate(row), (long long)row->v[TALLY_saved_prompt_tokens],
                  (long long)row->v[TALLY_saved_completion_tokens]);
    if (money_known(r, row, model_row))
        pc_buf_printf(out, " %12.6f%s", row->money.saved, row->unpriced ? "*" : "");
    else if (r->prices != NULL)
        pc_buf_printf(out, " %12s", "unpriced");
    pc_buf_append_char(out, '\n');
}

/* How the table shows a row: a model, a tenant's id, or "NAME (id)" for a named tenant. */
static void row_label(const struct report *r, const struct report_row *row, bool model_rows,
                      char *out, size_t n)
{
    const char *name = model_rows ? NULL : report_tenant_name(r, row);
    if (name != NULL)
        snprintf(out, n, "%s (%s)", name, row->name);
    else
        snprintf(out, n, "%s", row->name);
}

static void table_rows(const struct report *r, const struct report_rows *rows, const char *title,
                       int width, bool model_rows, struct pc_buf *out)
{
    if (rows->n > 0)
        pc_buf_printf(out, "%s\n", title);
    for (size_t i = 0; i < rows->n; i++) {
        char label[TENANT_NAME_MAX + TALLY_MODEL_MAX + 8];
        row_label(r, &rows->v[i], model_rows, label, sizeof label);
        table_row(r, &rows->v[i], "  ", label, width, model_rows, out);
    }
}

/* The total's money, latency saved and request times, under the table. */
static void table_summary(const struct report *r, struct pc_buf *out)
{
    const struct report_row *row = &r->total;
    int64_t hits = row->v[TALLY_hits];
    pc_buf_printf(out, "\nlatency saved  %.3f s", (double)row->v[TALLY_latency_saved_ms] / 1000.0);
    if (hits > 0)
        pc_buf_printf(out, " (%.1f ms per hit)", (double)row->v[TALLY_latency_saved_ms] / hits);
    pc_buf_append_char(out, '\n');
    if (r->prices != NULL) {
        const char *c = report_currency(r);
        pc_buf_printf(out, "\nmoney (%s, at list price)%s\n", c, row->unpriced ? ", partial" : "");
        pc_buf_printf(out, "  saved by the cache      %14.6f (exact %.6f, semantic %.6f)\n",
                      row->money.saved, row->money.saved - row->money.saved_semantic,
                      row->money.saved_semantic);
        pc_buf_printf(out, "  proxy's own calls       %14.6f\n", row->money.own);
        pc_buf_printf(out, "  net saved               %14.6f\n", report_net_saved(row));
        pc_buf_printf(out,
                      "  paid upstream           %14.6f (provider prompt caching saved %.6f, "
                      "cache writes added %.6f)\n",
                      row->money.upstream, row->money.cache_saving, row->money.write_premium);
        if (row->v[TALLY_requests] > 0)
            pc_buf_printf(out, "  per 1,000 requests      %14.6f with the cache, %.6f without\n",
                          report_cost_per_1k(row, true), report_cost_per_1k(row, false));
    }
    pc_buf_append_str(out, "\nrequest time (ms)       p50        p90        p99      count\n");
    for (int k = 0; k < TALLY_LAT__COUNT; k++) {
        int64_t n = report_lat_count(r->lat[k]);
        pc_buf_printf(out, "  %-12s", tally_lat_kind_names[k]);
        if (n == 0)
            pc_buf_printf(out, " %10s %10s %10s", "-", "-", "-");
        else
            pc_buf_printf(out, " %10.1f %10.1f %10.1f", report_lat_quantile(r->lat[k], 0.5),
                          report_lat_quantile(r->lat[k], 0.9),
                          report_lat_quantile(r->lat[k], 0.99));
        pc_buf_printf(out, " %10lld\n", (long long)n);
    }
}

/* The semantic error bound (semantic-max-error): its comparisons, what they found and cost. */
static void table_bound(const struct report *r, struct pc_buf *out)
{
    const int64_t *v = r->total.v;
    if (v[TALLY_semantic_compared] <= 0)
        return;
    int64_t n = v[TALLY_semantic_compared], x = v[TALLY_semantic_explored];
    pc_buf_printf(out,
                  "\nsemantic error bound    %lld answers compared with a held-back candidate, "
                  "%lld differed (%.1f%%)\n",
                  (long long)n, (long long)v[TALLY_semantic_disagreed],
                  100.0 * (double)v[TALLY_semantic_disagreed] / (double)n);
    pc_buf_printf(out, "  explored              %lld allowed candidates sent upstream to verify",
                  (long long)x);
    if (x > 0)
        pc_buf_printf(out, ", %lld differed (%.2f%%: the observed error of the hits allowed)",
                      (long long)v[TALLY_semantic_explored_disagreed],
                      100.0 * (double)v[TALLY_semantic_explored_disagreed] / (double)x);
    pc_buf_printf(out, "\n  exploration cost      %lld prompt + %lld completion tokens",
                  (long long)v[TALLY_explore_prompt_tokens],
                  (long long)v[TALLY_explore_completion_tokens]);
    if (r->prices != NULL)
        pc_buf_printf(out, ", %.6f %s", r->total.money.explore, report_currency(r));
    pc_buf_append_char(out, '\n');
}

static void render_table(const struct report *r, struct pc_buf *out)
{
    char from[32], to[32];
    utc(r->from_ms, "%Y-%m-%d %H:%M", from, sizeof(from));
    utc(r->to_ms, "%Y-%m-%d %H:%M", to, sizeof(to));
    int width = 20; /* the name column fits the longest name (at most 64 + indent) */
    for (size_t i = 0; i < r->models.n; i++)
        width = PC_MAX(width, (int)strlen(r->models.v[i].name) + 2);
    for (size_t i = 0; i < r->tenants.n; i++) {
        const char *name = report_tenant_name(r, &r->tenants.v[i]);
        if (name != NULL) /* "NAME (0123456789abcdef)" */
            width = PC_MAX(width, (int)(strlen(name) + TENANT_ID_LEN + 3) + 2);
    }
    pc_buf_printf(out, "promptcache report, %s to %s UTC\n", from, to);
    if (r->prices != NULL)
        pc_buf_printf(out, "prices: %s%s%s (%s, %zu models)\n", pricing_source(r->prices),
                      pricing_date(r->prices)[0] ? " of " : "", pricing_date(r->prices),
                      report_currency(r), pricing_count(r->prices));
    pc_buf_append_char(out, '\n');
    pc_buf_printf(out, "%-*s %9s %8s %8s %8s %7s %8s %12s %12s", width, "", "requests", "hits",
                  "misses", "bypass", "errors", "hit rate", "saved in", "saved out");
    if (r->prices != NULL)
        pc_buf_printf(out, " %12s", report_currency(r));
    pc_buf_append_char(out, '\n');
    table_row(r, &r->total, "", "total", width, false, out);
    table_rows(r, &r->models, "by model", width, true, out);
    table_rows(r, &r->tenants, "by tenant", width, false, out);
    table_summary(r, out);
    table_bound(r, out);
    if (r->partial > 0)
        pc_buf_printf(out, "\n(read in part: %s%s; the figures sum what was read)\n",
                      r->partial_note, r->partial > 1 ? ", and in other hashes" : "");
    if (r->prices == NULL)
        pc_buf_append_str(out, "\n(no prices: set `pricing` to report money saved)\n");
    else if (r->total.unpriced)
        pc_buf_append_str(out, "\n(unpriced: models the price list does not price; *: sums "
                               "without them)\n");
}

void report_render(const struct report *r, enum report_format f, struct pc_buf *out)
{
    if (f == REPORT_JSON)
        render_json(r, out);
    else if (f == REPORT_CSV)
        render_csv(r, out);
    else
        render_table(r, out);
}

/* ---- the command ------------------------------------------------------------------ */

void report_note_partial(struct report *r, const char *key, const char *why)
{
    if (r->partial++ == 0)
        snprintf(r->partial_note, sizeof r->partial_note, "%s: %s; the rest was not read", key,
                 why);
}

struct hour_scan {
    report_field_fn *fn;
    void *arg;
};

/* A counter to fn; a malformed one (not two strings, or a count that is no number) as -1. */
static bool hour_pair(void *arg, const redisReply *f, const redisReply *v)
{
    const struct hour_scan *hs = arg;
    int64_t count;
    if (f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
        pc_parse_i64(v->str, &count) == 0)
        hs->fn(hs->arg, f->str, f->len, count);
    else
        hs->fn(hs->arg, "", 0, -1);
    return true;
}

int report_scan_hour(struct rcli *k, int64_t hour_ms, report_field_fn *fn, void *arg,
                     struct report *r)
{
    char key[TALLY_KEY_MAX];
    tally_key(hour_ms, key);
    struct hour_scan hs = {fn, arg};
    int rc = rcli_hscan(k, key, REPORT_SCAN_MAX, hour_pair, &hs);
    if (rc > 0 && r != NULL)
        report_note_partial(r, key,
                            rc == RCLI_NOT_A_HASH
                                ? "a key of another type, not a hash (not written by promptcache?)"
                                : "more than 200000 fields (not written by promptcache?)");
    return rc;
}

struct fps_scan {
    struct report *r;
    size_t taken; /* well-formed pairs given to the names */
    bool full;
};

static bool fp_pair(void *arg, const redisReply *f, const redisReply *v)
{
    struct fps_scan *fs = arg;
    bool valid = f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
                 f->len == TENANT_ID_LEN && v->len == 16;
    if (valid && fs->taken == REPORT_FPS_MAX) {
        fs->full = true;
        return false;
    }
    if (!valid || !tenants_learn_fp(fs->r->names, f->str, f->len, v->str, v->len))
        fs->r->skipped++;
    else
        fs->taken++;
    return true;
}

int report_read_key_names(struct rcli *k, struct report *r)
{
    if (r->names == NULL)
        return 0;
    struct fps_scan fs = {.r = r};
    int rc = rcli_hscan(k, TENANTS_KEY_FP, REPORT_SCAN_MAX, fp_pair, &fs);
    if (rc > 0)
        report_note_partial(r, TENANTS_KEY_FP,
                            rc == RCLI_NOT_A_HASH ? "a key of another type, not a hash"
                            : fs.full             ? "more than 4096 key fingerprints"
                                      : "more than 200000 fields (not written by promptcache?)");
    return rc < 0 ? -1 : 0;
}

static void add_one(void *arg, const char *field, size_t flen, int64_t count)
{
    report_add_field(arg, field, flen, count);
}

int report_cli(const struct conf *c, enum report_format f, int hours)
{
    int64_t now_hour = pc_wall_ms() / TALLY_HOUR_MS * TALLY_HOUR_MS;
    struct report r;
    report_init(&r, now_hour - (int64_t)(hours - 1) * TALLY_HOUR_MS, now_hour + TALLY_HOUR_MS);
    report_set_prices(&r, c->prices);
    report_set_tenants(&r, c->tenants);
    r.max_models = REPORT_MODELS_MAX;
    r.max_tenants = REPORT_TENANTS_MAX;
    struct rcli k = {0};
    int rc = 1;
    if (rcli_connect(&k, c, "report") < 0 || report_read_key_names(&k, &r) < 0)
        goto out;
    for (int64_t h = r.from_ms; h < r.to_ms; h += TALLY_HOUR_MS)
        if (report_scan_hour(&k, h, add_one, &r, &r) < 0)
            goto out;
    if (r.skipped > 0)
        rcli_error(&k, "%zu field%s of %s %s not written by promptcache and %s skipped", r.skipped,
                   r.skipped == 1 ? "" : "s", k.where, r.skipped == 1 ? "was" : "were",
                   r.skipped == 1 ? "was" : "were");
    if (r.folded > 0)
        rcli_error(&k, "more than %d models or %d tenants: %zu field%s summed under %s",
                   REPORT_MODELS_MAX, REPORT_TENANTS_MAX, r.folded, r.folded == 1 ? "" : "s",
                   TALLY_OTHER);
    if (r.partial > 0)
        rcli_error(&k, "read in part: %s%s (%zu hash%s): the report sums what was read",
                   r.partial_note, r.partial > 1 ? ", and more" : "", r.partial,
                   r.partial == 1 ? "" : "es");
    report_sort(&r);
    struct pc_buf b = PC_BUF_INIT;
    report_render(&r, f, &b);
    fwrite(b.data, 1, b.len, stdout);
    pc_buf_free(&b);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        rcli_error(&k, "cannot write the report: %s", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    rcli_close(&k);
    report_free(&r);
    return rc;
}
