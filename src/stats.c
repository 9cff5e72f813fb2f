/*
 * stats.c - sums per-worker metric rows and renders them, with the series
 * other modules own (their groups, read when rendered), as /stats, /metrics
 * and doc/metrics.md's tables (see pc_stats.h). Owns the registry of rows,
 * which is written once before workers start and only read afterwards, the
 * model label's slots and the upstream label's names.
 *
 *   family f, labels l ─▶ series = mixed-radix number of l's values (in
 *   enum stat_label order, over the labels f has) ─▶ cell fam_off[f] +
 *   series x cells per series (1, or buckets + Inf + sum + count)
 */
#include "pc_stats.h"
#include "pc_api.h"
#include "pc_model.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_ROWS 256

static struct stats *rows[MAX_ROWS];
static int nrows;

static const struct {
    const char *name;
    const char *help;
    bool gauge;
} meta[STAT__COUNT] = {
#define PC_STAT_META(n, kind, h) {#n, h, __builtin_strcmp(#kind, "gauge") == 0},
    PC_METRICS(PC_STAT_META)
#undef PC_STAT_META
};

/* ---- families ---------------------------------------------------------------- */

#define PC_SCALE_counter(s)   (s)
#define PC_SCALE_histogram(s) 1e-6
#define PC_BSET_counter(s)    -1
#define PC_BSET_histogram(s)  STATS_BSET_##s
#define STATS_BSET_SLOW       0
#define STATS_BSET_FAST       1

static const struct {
    const char *name;
    const char *help;
    bool hist;
    unsigned labels;
    double scale;
    int bset;
    size_t series;
} fam[SF__COUNT] = {
#define PC_FAM_META(n, kind, labels, scale, h)  \
    {#n,                                        \
     h,                                         \
     __builtin_strcmp(#kind, "histogram") == 0, \
     labels,                                    \
     PC_SCALE_##kind(scale),                    \
     PC_BSET_##kind(scale),                     \
     STATS_FAM_SERIES(labels)},
    PC_FAMILIES(PC_FAM_META)
#undef PC_FAM_META
};

static const double bucket_sets[2][STATS_NBUCKETS] = {STATS_BUCKETS_SLOW, STATS_BUCKETS_FAST};
static const int label_card[SL__COUNT] = {STATS_CACHE_N,  STATS_MATCH_N,    STATS_ENDPOINT_N,
                                          STATS_MODEL_N,  STATS_UPSTREAM_N, STATS_TOKEN_N,
                                          STATS_CALLER_N, STATS_TENANT_N};
static const char *const label_names[SL__COUNT] = {"cache",    "match", "endpoint", "model",
                                                   "upstream", "token", "caller",   "tenant"};
static const char *const cache_values[] = {"hit", "miss", "bypass", "refresh"};
static const char *const match_values[] = {"exact", "semantic"};
/* The endpoint label's values are api_endpoint_name's ("other", "chat", ..., "responses"). */
_Static_assert(STATS_ENDPOINT_N == API__COUNT, "one endpoint label value per API endpoint");
static const char *const token_values[] = {"input", "cache_read", "cache_write", "output"};
static const char *const caller_values[] = {"embedder", "verifier"};

static size_t fam_off[SF__COUNT];

__attribute__((constructor)) static void fam_offsets(void)
{
    size_t off = 0;
    for (int f = 0; f < SF__COUNT; f++) {
        fam_off[f] = off;
        off += fam[f].series * (fam[f].hist ? STATS_NBUCKETS + 3 : 1);
    }
}

static int label_of(const struct stat_labels *l, int k)
{
    const int v[SL__COUNT] = {l->cache,    l->match, l->endpoint, l->model,
                              l->upstream, l->token, l->caller,   l->tenant};
    return v[k];
}

/* The series of l in family f; -1 when a value is out of range. */
static long series_of(enum stat_family f, const struct stat_labels *l)
{
    long idx = 0;
    for (int k = 0; k < SL__COUNT; k++) {
        if (!(fam[f].labels & (1u << k)))
            continue;
        int v = label_of(l, k);
        if (v < 0 || v >= label_card[k])
            return -1;
        idx = idx * label_card[k] + v;
    }
    return idx;
}

/*
 * Families saturate at INT64_MAX, in a worker's cell and in every sum of
 * cells, rather than wrap: one answer's money may be pricing_nano's cap
 * (9e18 billionths, an upstream that reports 1e15 tokens of a dear model),
 * and two of them would wrap past 2^63 (read as negative) and 2^64.
 */
#define FAM_MAX ((uint64_t)INT64_MAX)

static uint64_t fam_sat(uint64_t a, uint64_t b)
{
    a = PC_MIN(a, FAM_MAX);
    return b > FAM_MAX - a ? FAM_MAX : a + b;
}

void stats_fam_add(struct stats *st, enum stat_family f, const struct stat_labels *l, int64_t n)
{
    long s = series_of(f, l);
    if (s < 0 || fam[f].hist || n == 0)
        return;
    uint64_t *cell = &st->cells[fam_off[f] + (size_t)s];
    if (n < 0) { /* a correction of what was added before (never below what it was) */
        __atomic_fetch_add(cell, (uint64_t)n, __ATOMIC_RELAXED);
        return;
    }
    /* Only this worker adds to its cell: the exchange rarely retries. */
    uint64_t old = __atomic_load_n(cell, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(cell, &old, fam_sat(old, (uint64_t)n), true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void stats_observe(struct stats *st, enum stat_family f, const struct stat_labels *l, int64_t us)
{
    long s = series_of(f, l);
    if (s < 0 || !fam[f].hist)
        return;
    uint64_t *c = &st->cells[fam_off[f] + (size_t)s * (STATS_NBUCKETS + 3)];
    const double *b = bucket_sets[fam[f].bset];
    double secs = (double)PC_MAX(us, 0) / 1e6;
    int i = 0;
    while (i < STATS_NBUCKETS && secs > b[i])
        i++;
    __atomic_fetch_add(&c[i], 1, __ATOMIC_RELAXED); /* i == STATS_NBUCKETS: +Inf only */
    __atomic_fetch_add(&c[STATS_NBUCKETS + 1], (uint64_t)PC_MAX(us, 0), __ATOMIC_RELAXED);
    __atomic_fetch_add(&c[STATS_NBUCKETS + 2], 1, __ATOMIC_RELAXED);
}

/* ---- the model and upstream labels -------------------------------------------- */

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static char slot_names[STATS_MODELS_MAX][MODEL_NAME_MAX + 1];
static int slot_count; /* atomic: names below it are complete */
static int slot_limit = 10;
static const char *const *upstream_names;
static size_t n_upstreams;

void stats_set_model_limit(int limit)
{
    slot_limit = PC_MAX(0, PC_MIN(limit, STATS_MODELS_MAX));
}

static int slot_find(const char *name, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(slot_names[i], name) == 0)
            return i;
    return -1;
}

/*
 * "other" is the label of every model without a slot: a model of that name
 * (a client's) is counted there rather than given a second label "other",
 * whose two series with the same labels would make Prometheus refuse the scrape.
 */
static bool slot_name_taken(const char *name)
{
    return strcmp(name, "other") == 0;
}

int stats_model_slot(const char *model, bool admit)
{
    char name[MODEL_NAME_MAX + 1];
    model_clean(model, name);
    if (slot_name_taken(name))
        return STATS_MODEL_N - 1;
    int n = __atomic_load_n(&slot_count, __ATOMIC_ACQUIRE);
    int i = slot_find(name, n);
    if (i >= 0 || !admit || n >= slot_limit)
        return i >= 0 ? i : STATS_MODEL_N - 1;
    pthread_mutex_lock(&slot_mu);
    n = slot_count;
    i = slot_find(name, n);
    if (i < 0 && n < slot_limit) {
        snprintf(slot_names[n], sizeof slot_names[n], "%s", name);
        i = n;
        __atomic_store_n(&slot_count, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&slot_mu);
    return i >= 0 ? i : STATS_MODEL_N - 1;
}

void stats_seed_models(const char *const *models, size_t n)
{
    pthread_mutex_lock(&slot_mu);
    for (size_t i = 0; i < n && slot_count < slot_limit; i++) {
        char name[MODEL_NAME_MAX + 1];
        model_clean(models[i], name);
        if (slot_name_taken(name) || slot_find(name, slot_count) >= 0)
            continue;
        snprintf(slot_names[slot_count], sizeof slot_names[slot_count], "%s", name);
        __atomic_store_n(&slot_count, slot_count + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&slot_mu);
}

static pthread_mutex_t tenant_mu = PTHREAD_MUTEX_INITIALIZER;
static char tenant_names[STATS_TENANTS_MAX][TENANT_LABEL_MAX + 1];
static int tenant_count; /* atomic: names below it are complete */

static int tenant_find(const char *name, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(tenant_names[i], name) == 0)
            return i;
    return -1;
}

int stats_tenant_slot(const char *name)
{
    if (name == NULL || strlen(name) > TENANT_LABEL_MAX)
        return STATS_TENANT_N - 1;
    int n = __atomic_load_n(&tenant_count, __ATOMIC_ACQUIRE);
    int i = tenant_find(name, n);
    if (i >= 0 || n >= STATS_TENANTS_MAX)
        return i >= 0 ? i : STATS_TENANT_N - 1;
    pthread_mutex_lock(&tenant_mu);
    n = tenant_count;
    i = tenant_find(name, n);
    if (i < 0 && n < STATS_TENANTS_MAX) {
        snprintf(tenant_names[n], sizeof tenant_names[n], "%s", name);
        i = n;
        __atomic_store_n(&tenant_count, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&tenant_mu);
    return i >= 0 ? i : STATS_TENANT_N - 1;
}

void stats_set_upstreams(const char *const *names, size_t n)
{
    upstream_names = names;
    n_upstreams = PC_MIN(n, (size_t)STATS_UPSTREAM_N);
}

/* The text of value v of label k; NULL when it names nothing (an unused slot). */
static const char *label_text(int k, int v)
{
    switch (k) {
    case SL_CACHE:
        return cache_values[v];
    case SL_MATCH:
        return match_values[v];
    case SL_ENDPOINT:
        return api_endpoint_name((enum api_endpoint)v);
    case SL_MODEL:
        if (v == STATS_MODEL_N - 1)
            return "other";
        return v < __atomic_load_n(&slot_count, __ATOMIC_ACQUIRE) ? slot_names[v] : NULL;
    case SL_UPSTREAM:
        return (size_t)v < n_upstreams ? upstream_names[v] : NULL;
    case SL_TOKEN:
        return token_values[v];
    case SL_TENANT:
        if (v == STATS_TENANT_N - 1)
            return "other";
        return v < __atomic_load_n(&tenant_count, __ATOMIC_ACQUIRE) ? tenant_names[v] : NULL;
    default:
        return caller_values[v];
    }
}

/* Label values of series s of family f (in enum stat_label order); false if one names nothing. */
static bool series_labels(enum stat_family f, size_t s, int v[SL__COUNT])
{
    for (int k = SL__COUNT - 1; k >= 0; k--) {
        v[k] = 0;
        if (!(fam[f].labels & (1u << k)))
            continue;
        v[k] = (int)(s % (size_t)label_card[k]);
        s /= (size_t)label_card[k];
        if (label_text(k, v[k]) == NULL)
            return false;
    }
    return true;
}

/*
 * name="v" with v escaped as the exposition format wants (backslash, double
 * quote, line feed): no value, whoever chose it, ends the series early or
 * writes one of its own.
 */
static void prom_label(struct pc_buf *out, const char *name, const char *v)
{
    pc_buf_printf(out, "%s=\"", name);
    for (size_t run; *v != '\0'; v += run) {
        run = strcspn(v, "\\\"\n");
        pc_buf_append(out, v, run);
        if (v[run] == '\0')
            break;
        pc_buf_append_str(out, v[run] == '\n' ? "\\n" : v[run] == '"' ? "\\\"" : "\\\\");
        run++;
    }
    pc_buf_append_char(out, '"');
}

/* {a="x",b="y"} (with extra, e.g. le="0.1", last); nothing for no labels and no extra. */
static void append_labels(struct pc_buf *out, enum stat_family f, const int v[SL__COUNT],
                          const char *extra)
{
    bool any = false;
    for (int k = 0; k < SL__COUNT; k++) {
        if (!(fam[f].labels & (1u << k)))
            continue;
        pc_buf_append_char(out, any ? ',' : '{');
        prom_label(out, label_names[k], label_text(k, v[k]));
        any = true;
    }
    if (extra != NULL) {
        pc_buf_printf(out, "%s%s", any ? "," : "{", extra);
        any = true;
    }
    if (any)
        pc_buf_append_char(out, '}');
}

int stats_register(struct stats *st)
{
    if (nrows >= MAX_ROWS)
        return -1;
    rows[nrows++] = st;
    return 0;
}

void stats_unregister_all(void)
{
    nrows = 0;
}

/* a + b of two rows' values read as signed, kept within int64_t (as stats_add does). */
static uint64_t row_sat(uint64_t a, uint64_t b)
{
    int64_t x = (int64_t)a, y = (int64_t)b;
    if (y > 0 && x > INT64_MAX - y)
        return (uint64_t)INT64_MAX;
    if (y < 0 && x < INT64_MIN - y)
        return (uint64_t)INT64_MIN;
    return a + b;
}

void stats_sum(uint64_t out[STAT__COUNT])
{
    memset(out, 0, sizeof(uint64_t) * STAT__COUNT);
    for (int r = 0; r < nrows; r++)
        for (int i = 0; i < STAT__COUNT; i++)
            out[i] = row_sat(out[i], __atomic_load_n(&rows[r]->v[i], __ATOMIC_RELAXED));
}

uint64_t *stats_sum_cells(void)
{
    uint64_t *c = pc_calloc(STATS_CELLS, sizeof(*c));
    for (int r = 0; r < nrows; r++)
        for (size_t i = 0; i < STATS_CELLS; i++)
            c[i] = fam_sat(c[i], __atomic_load_n(&rows[r]->cells[i], __ATOMIC_RELAXED));
    return c;
}

double stats_family_by(const uint64_t *cells, enum stat_family f, enum stat_label label, int value)
{
    uint64_t sum = 0;
    int v[SL__COUNT];
    for (size_t s = 0; s < fam[f].series; s++) {
        if (fam[f].hist)
            break;
        series_labels(f, s, v);
        if ((int)label >= 0 && (fam[f].labels & (1u << label)) && v[label] != value)
            continue;
        sum = fam_sat(sum, cells[fam_off[f] + s]);
    }
    return (double)sum * fam[f].scale;
}

double stats_family_total(const uint64_t *cells, enum stat_family f)
{
    return stats_family_by(cells, f, (enum stat_label) - 1, 0);
}

static void append_value(struct pc_buf *out, enum stat_id id, uint64_t v)
{
    if (meta[id].gauge)
        pc_buf_printf(out, "%lld", (long long)(int64_t)v);
    else
        pc_buf_printf(out, "%llu", (unsigned long long)v);
}

/* Quantile q of a histogram series' buckets (linear within a bucket, as Prometheus does). */
static double hist_quantile(const uint64_t *c, int bset, double q)
{
    uint64_t count = c[STATS_NBUCKETS + 2];
    if (count == 0)
        return NAN;
    const double *b = bucket_sets[bset];
    double rank = q * (double)count, seen = 0;
    for (int i = 0; i <= STATS_NBUCKETS; i++) {
        if (seen + (double)c[i] < rank || c[i] == 0) {
            seen += (double)c[i];
            continue;
        }
        if (i == STATS_NBUCKETS)
            return b[STATS_NBUCKETS - 1];
        double lo = i > 0 ? b[i - 1] : 0;
        return lo + (b[i] - lo) * (rank - seen) / (double)c[i];
    }
    return b[STATS_NBUCKETS - 1];
}

static void json_double(struct pc_buf *out, double v)
{
    if (isfinite(v))
        pc_buf_printf(out, "%.9g", v);
    else
        pc_buf_append_str(out, "null");
}

/* {"count":N,"p50":S,"p90":S,"p99":S} over the series of f whose cache label is value (-1: all). */
static void json_hist(struct pc_buf *out, const uint64_t *cells, enum stat_family f, int cache)
{
    uint64_t c[STATS_NBUCKETS + 3] = {0};
    int v[SL__COUNT];
    for (size_t s = 0; s < fam[f].series; s++) {
        series_labels(f, s, v);
        if (cache >= 0 && v[SL_CACHE] != cache)
            continue;
        const uint64_t *src = &cells[fam_off[f] + s * (STATS_NBUCKETS + 3)];
        for (int i = 0; i < STATS_NBUCKETS + 3; i++)
            c[i] = fam_sat(c[i], src[i]);
    }
    pc_buf_printf(out, "{\"count\":%llu,\"sum\":", (unsigned long long)c[STATS_NBUCKETS + 2]);
    json_double(out, (double)c[STATS_NBUCKETS + 1] / 1e6);
    static const double qs[] = {0.5, 0.9, 0.99};
    static const char *const qn[] = {"p50", "p90", "p99"};
    for (size_t i = 0; i < PC_ARRAY_LEN(qs); i++) {
        pc_buf_printf(out, ",\"%s\":", qn[i]);
        json_double(out, hist_quantile(c, fam[f].bset, qs[i]));
    }
    pc_buf_append_char(out, '}');
}

/* Money is kept in billionths of the currency unit; its families are the ones scaled so. */
static bool fam_money(enum stat_family f)
{
    return !fam[f].hist && fam[f].scale == 1e-9;
}

/* A family's figure, or null for money while no price list is in force (unpriced, not 0). */
static void json_figure(struct pc_buf *out, enum stat_family f, bool priced, double v)
{
    json_double(out, fam_money(f) && !priced ? NAN : v);
}

/* A counter family by tenant in /stats: {"NAME": total or {cache: n}, ..., "other": ...}. */
static void json_by_tenant(struct pc_buf *out, const uint64_t *cells, enum stat_family f,
                           bool priced)
{
    pc_buf_append_char(out, '{');
    bool first = true;
    for (int t = 0; t < STATS_TENANT_N; t++) {
        const char *name = label_text(SL_TENANT, t);
        if (name == NULL)
            continue;
        pc_buf_append_str(out, first ? "" : ",");
        pc_buf_json_str(out, name, strlen(name));
        pc_buf_append_char(out, ':');
        first = false;
        if (!(fam[f].labels & SL(CACHE))) {
            json_figure(out, f, priced, stats_family_by(cells, f, SL_TENANT, t));
            continue;
        }
        int v[SL__COUNT];
        uint64_t by[STATS_CACHE_N] = {0};
        for (size_t s = 0; s < fam[f].series; s++)
            if (series_labels(f, s, v) && v[SL_TENANT] == t)
                by[v[SL_CACHE]] = fam_sat(by[v[SL_CACHE]], cells[fam_off[f] + s]);
        for (int c = 0; c < STATS_CACHE_N; c++)
            pc_buf_printf(out, "%s\"%s\":%llu", c ? "," : "{", cache_values[c],
                          (unsigned long long)by[c]);
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, '}');
}

/* One family in /stats: a total, split by token / caller / cache where that is its meaning. */
static void json_family(struct pc_buf *out, const uint64_t *cells, enum stat_family f, bool priced)
{
    pc_buf_printf(out, ",\"%s\":", fam[f].name);
    if (fam[f].labels & SL(TENANT)) {
        json_by_tenant(out, cells, f, priced);
        return;
    }
    int split = fam[f].labels & SL(TOKEN)    ? SL_TOKEN
                : fam[f].labels & SL(CACHE)  ? SL_CACHE
                : fam[f].labels & SL(CALLER) ? SL_CALLER
                                             : -1;
    if (split < 0) {
        if (fam[f].hist)
            json_hist(out, cells, f, -1);
        else
            json_figure(out, f, priced, stats_family_total(cells, f));
    } else {
        pc_buf_append_char(out, '{');
        for (int v = 0; v < label_card[split]; v++) {
            pc_buf_printf(out, "%s\"%s\":", v ? "," : "", label_text(split, v));
            if (fam[f].hist)
                json_hist(out, cells, f, v);
            else
                json_figure(out, f, priced, stats_family_by(cells, f, (enum stat_label)split, v));
        }
        pc_buf_append_char(out, '}');
    }
    if (!fam[f].hist && (fam[f].labels & SL(MATCH)) && !(fam[f].labels & SL(TOKEN)))
        for (int v = 0; v < STATS_MATCH_N; v++) {
            pc_buf_printf(out, ",\"%s_%s\":", fam[f].name, match_values[v]);
            json_figure(out, f, priced, stats_family_by(cells, f, SL_MATCH, v));
        }
}

double stats_hit_rate(const uint64_t *cells)
{
    double hits = stats_family_by(cells, SF_api_requests, SL_CACHE, SC_HIT);
    double looked = hits + stats_family_by(cells, SF_api_requests, SL_CACHE, SC_MISS);
    return looked > 0 ? hits / looked : 0.0;
}

void stats_render_json(struct pc_buf *out, const struct stat_source *src, size_t n, bool priced)
{
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    pc_buf_append_char(out, '{');
    for (int i = 0; i < STAT__COUNT; i++) {
        pc_buf_printf(out, "%s\"%s\":", i ? "," : "", meta[i].name);
        append_value(out, (enum stat_id)i, v[i]);
    }
    uint64_t *cells = stats_sum_cells();
    pc_buf_printf(out, ",\"hit_rate\":%.4f", stats_hit_rate(cells));
    for (int f = 0; f < SF__COUNT; f++)
        json_family(out, cells, (enum stat_family)f, priced);
    pc_buf_append_str(out, ",\"net_saved_cost\":");
    json_figure(out, SF_saved_cost, priced,
                stats_family_total(cells, SF_saved_cost) -
                    stats_family_total(cells, SF_own_calls_cost));
    /* Sums over the priced answers only: partial while some were not. */
    pc_buf_printf(out, ",\"money_partial\":%s",
                  priced && v[STAT_answers_unpriced] > 0 ? "true" : "false");
    free(cells);
    for (size_t i = 0; i < n; i++)
        stats_render_source_json(out, &src[i]);
    pc_buf_append_char(out, '}');
}

/* A scaled value as Prometheus reads it (integers stay integers). */
static void prom_value(struct pc_buf *out, uint64_t raw, double scale)
{
    if (scale == 1)
        pc_buf_printf(out, "%llu", (unsigned long long)raw);
    else
        pc_buf_printf(out, "%.9g", (double)raw * scale);
}

static void prom_family(struct pc_buf *out, const uint64_t *cells, enum stat_family f)
{
    const char *type = fam[f].hist ? "histogram" : "counter";
    const char *suffix = fam[f].hist ? "" : "_total";
    pc_buf_printf(out, "# HELP promptcache_%s%s %s\n# TYPE promptcache_%s%s %s\n", fam[f].name,
                  suffix, fam[f].help, fam[f].name, suffix, type);
    int v[SL__COUNT];
    for (size_t s = 0; s < fam[f].series; s++) {
        if (!series_labels(f, s, v))
            continue;
        if (!fam[f].hist) {
            uint64_t raw = cells[fam_off[f] + s];
            if (raw == 0 && fam[f].labels != 0)
                continue;
            pc_buf_printf(out, "promptcache_%s_total", fam[f].name);
            append_labels(out, f, v, NULL);
            pc_buf_append_char(out, ' ');
            prom_value(out, raw, fam[f].scale);
            pc_buf_append_char(out, '\n');
            continue;
        }
        const uint64_t *c = &cells[fam_off[f] + s * (STATS_NBUCKETS + 3)];
        if (c[STATS_NBUCKETS + 2] == 0 && fam[f].labels != 0)
            continue;
        uint64_t cum = 0;
        char le[48];
        for (int i = 0; i <= STATS_NBUCKETS; i++) {
            cum += c[i];
            if (i < STATS_NBUCKETS)
                snprintf(le, sizeof le, "le=\"%g\"", bucket_sets[fam[f].bset][i]);
            else
                snprintf(le, sizeof le, "le=\"+Inf\"");
            pc_buf_printf(out, "promptcache_%s_bucket", fam[f].name);
            append_labels(out, f, v, le);
            pc_buf_printf(out, " %llu\n", (unsigned long long)cum);
        }
        pc_buf_printf(out, "promptcache_%s_sum", fam[f].name);
        append_labels(out, f, v, NULL);
        pc_buf_printf(out, " %.6f\npromptcache_%s_count", (double)c[STATS_NBUCKETS + 1] / 1e6,
                      fam[f].name);
        append_labels(out, f, v, NULL);
        pc_buf_printf(out, " %llu\n", (unsigned long long)c[STATS_NBUCKETS + 2]);
    }
}

void stats_render_prometheus(struct pc_buf *out, const struct stat_source *src, size_t n)
{
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    for (int i = 0; i < STAT__COUNT; i++) {
        const char *suffix =
            (!meta[i].gauge && strstr(meta[i].name, "_total") == NULL) ? "_total" : "";
        pc_buf_printf(out, "# HELP promptcache_%s%s %s\n", meta[i].name, suffix, meta[i].help);
        pc_buf_printf(out, "# TYPE promptcache_%s%s %s\n", meta[i].name, suffix,
                      meta[i].gauge ? "gauge" : "counter");
        pc_buf_printf(out, "promptcache_%s%s ", meta[i].name, suffix);
        append_value(out, (enum stat_id)i, v[i]);
        pc_buf_append_char(out, '\n');
    }
    uint64_t *cells = stats_sum_cells();
    for (int f = 0; f < SF__COUNT; f++)
        prom_family(out, cells, (enum stat_family)f);
    free(cells);
    pc_buf_printf(out,
                  "# HELP promptcache_build_info The running binary (value 1)\n"
                  "# TYPE promptcache_build_info gauge\n"
                  "promptcache_build_info{version=\"%s\"} 1\n",
                  PC_VERSION);
    for (size_t i = 0; i < n; i++)
        stats_render_source_prometheus(out, &src[i]);
}

/* ---- series other modules own ------------------------------------------------------ */

/* The group's snapshot of obj (in *mem, to free), or obj itself when it has none. */
static const void *group_snapshot(const struct stat_group *g, const void *obj, void **mem)
{
    *mem = NULL;
    if (g->snapshot == NULL)
        return obj;
    *mem = pc_calloc(1, g->snap_size);
    g->snapshot(obj, *mem);
    return *mem;
}

static void json_val(struct pc_buf *out, const struct stat_row *row, const struct stat_val *v)
{
    switch (v->type) {
    case SV_INT:
        pc_buf_printf(out, "%lld", (long long)v->i);
        break;
    case SV_REAL:
        if (isfinite(v->d))
            pc_buf_printf(out, "%.*f", row->decimals, v->d);
        else
            pc_buf_append_str(out, "null");
        break;
    case SV_BOOL:
        pc_buf_append_str(out, v->i ? "true" : "false");
        break;
    case SV_STR:
        pc_buf_json_str(out, v->s, strlen(v->s));
        break;
    default:
        pc_buf_append_str(out, "null");
    }
}

/* ,"name":value for a row shown in /stats (and not left out). */
static void json_row(struct pc_buf *out, const struct stat_row *row, const void *snap, size_t item)
{
    struct stat_val v = {0};
    if (row->name == NULL)
        return;
    row->read(snap, item, &v);
    if (v.type == SV_NONE)
        return;
    pc_buf_printf(out, ",\"%s\":", row->name);
    json_val(out, row, &v);
}

/* ,"array":[{"name":"item",...},...] */
static void json_items(struct pc_buf *out, const struct stat_group *g, const void *snap)
{
    size_t n = g->count(snap);
    pc_buf_printf(out, ",\"%s\":[", g->array);
    for (size_t i = 0; i < n; i++) {
        const char *name = g->item(snap, i);
        pc_buf_append_str(out, i ? ",{\"name\":" : "{\"name\":");
        pc_buf_json_str(out, name, strlen(name));
        for (size_t r = 0; r < g->nrows; r++)
            json_row(out, &g->rows[r], snap, i);
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, ']');
}

void stats_render_source_json(struct pc_buf *out, const struct stat_source *src)
{
    const struct stat_group *g = src->group;
    if (src->obj == NULL)
        return;
    void *mem;
    const void *snap = group_snapshot(g, src->obj, &mem);
    if (g->count != NULL) {
        json_items(out, g, snap);
    } else {
        for (size_t r = 0; r < g->nrows; r++)
            json_row(out, &g->rows[r], snap, 0);
    }
    free(mem);
    if (g->json != NULL)
        g->json(src->obj, out);
}

/* A row's value as a Prometheus sample; false for none, null or a name (no sample). */
static bool prom_val(struct pc_buf *out, const struct stat_row *row, const struct stat_val *v)
{
    if (v->type == SV_INT || v->type == SV_BOOL)
        pc_buf_printf(out, "%lld", (long long)v->i);
    else if (v->type == SV_REAL)
        pc_buf_printf(out, "%.*f", row->decimals, v->d);
    else
        return false;
    return true;
}

static void prom_head(struct pc_buf *out, const struct stat_row *row)
{
    pc_buf_printf(out, "# HELP promptcache_%s %s\n# TYPE promptcache_%s %s\n", row->prom, row->help,
                  row->prom, row->kind);
}

/* One row of a group per item: its family, one series per item. */
static void prom_items(struct pc_buf *out, const struct stat_group *g, const struct stat_row *row,
                       const void *snap)
{
    prom_head(out, row);
    size_t n = g->count(snap);
    struct pc_buf line = PC_BUF_INIT;
    for (size_t i = 0; i < n; i++) {
        struct stat_val v = {0};
        row->read(snap, i, &v);
        pc_buf_reset(&line);
        pc_buf_printf(&line, "promptcache_%s{", row->prom);
        prom_label(&line, g->label, g->item(snap, i));
        pc_buf_append_str(&line, "} ");
        if (prom_val(&line, row, &v)) {
            pc_buf_append(out, line.data, line.len);
            pc_buf_append_char(out, '\n');
        }
    }
    pc_buf_free(&line);
}

/* One row of a plain group: its family, or nothing while its value is not known. */
static void prom_row(struct pc_buf *out, const struct stat_row *row, const void *snap)
{
    struct stat_val v = {0};
    row->read(snap, 0, &v);
    if (v.type != SV_INT && v.type != SV_BOOL && v.type != SV_REAL)
        return; /* no series rather than a made-up value */
    prom_head(out, row);
    pc_buf_printf(out, "promptcache_%s ", row->prom);
    prom_val(out, row, &v);
    pc_buf_append_char(out, '\n');
}

void stats_render_source_prometheus(struct pc_buf *out, const struct stat_source *src)
{
    const struct stat_group *g = src->group;
    if (src->obj == NULL)
        return;
    void *mem;
    const void *snap = group_snapshot(g, src->obj, &mem);
    for (size_t r = 0; r < g->nrows; r++) {
        const struct stat_row *row = &g->rows[r];
        if (row->prom == NULL)
            continue;
        if (g->count != NULL)
            prom_items(out, g, row, snap);
        else
            prom_row(out, row, snap);
    }
    free(mem);
    if (g->prom != NULL)
        g->prom(src->obj, out);
}

/* | `name` | `prom` | kind | help | for each row of g. */
static void doc_rows(struct pc_buf *out, const struct stat_group *g)
{
    for (size_t r = 0; r < g->nrows; r++) {
        const struct stat_row *row = &g->rows[r];
        pc_buf_append_str(out, "| ");
        pc_buf_printf(out, row->name ? "`%s`" : "%s", row->name ? row->name : "-");
        pc_buf_append_str(out, " | ");
        pc_buf_printf(out, row->prom ? "`%s`" : "%s", row->prom ? row->prom : "-");
        pc_buf_printf(out, " | %s | %s |\n", row->kind, row->help);
    }
}

void stats_render_doc(struct pc_buf *out, const struct stat_group *const *groups, size_t n)
{
    pc_buf_append_str(out, "| metric | kind | meaning |\n|---|---|---|\n");
    for (int i = 0; i < STAT__COUNT; i++)
        pc_buf_printf(out, "| `%s` | %s | %s |\n", meta[i].name,
                      meta[i].gauge ? "gauge" : "counter", meta[i].help);
    pc_buf_append_str(out, "\nLabelled, in `/metrics` only as `promptcache_NAME_total` (counters) "
                           "or `promptcache_NAME` (histograms, in seconds), and in `/stats` as "
                           "totals:\n\n| metric | kind | labels | meaning |\n|---|---|---|---|\n");
    for (int f = 0; f < SF__COUNT; f++) {
        pc_buf_printf(out, "| `%s` | %s | ", fam[f].name, fam[f].hist ? "histogram" : "counter");
        bool any = false;
        for (int k = 0; k < SL__COUNT; k++)
            if (fam[f].labels & (1u << k)) {
                pc_buf_printf(out, "%s`%s`", any ? ", " : "", label_names[k]);
                any = true;
            }
        pc_buf_printf(out, "%s | %s |\n", any ? "" : "-", fam[f].help);
    }
    pc_buf_append_str(out, "| `build_info` | gauge | `version` | The running binary (value 1) "
                           "|\n");
    static const char head[] = "| `/stats` | `/metrics` | kind | meaning |\n|---|---|---|---|\n";
    pc_buf_append_str(out, "\nRead from the module that owns them when asked: in `/stats` under "
                           "the first name, in `/metrics` as `promptcache_` and the second (`-`: "
                           "not there); a part that is off (semantic, the L1) shows none of "
                           "its own. A yes-or-no figure (`ready`, `l1_live`, "
                           "`semantic_sync_ready`, a replica's `healthy`) is `true` or `false` "
                           "in `/stats`, 1 or 0 in `/metrics`:\n\n");
    pc_buf_append_str(out, head);
    for (size_t i = 0; i < n; i++)
        if (groups[i]->count == NULL)
            doc_rows(out, groups[i]);
    for (size_t i = 0; i < n; i++) {
        if (groups[i]->count == NULL)
            continue;
        pc_buf_printf(out,
                      "\nPer %s: in `/stats` in `%s`, an array of objects each named by `name`; "
                      "in `/metrics` with the label `%s`:\n\n",
                      groups[i]->per, groups[i]->array, groups[i]->label);
        pc_buf_append_str(out, head);
        doc_rows(out, groups[i]);
    }
}
