/*
 * report.c - `promptcache report` (see pc_report.h). Owns the report being
 * built: the total, one row per model and per tenant, and the prices.
 *
 *   Redis pc:2:r:YYYYMMDDHH (HGETALL, one per hour) ─▶ report_add_field
 *        ─▶ rows (total, model, tenant; money priced per field) ─▶ render
 */
#include "pc_report.h"
#include "pc_conf.h"
#include "pc_rcli.h"

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
    for (size_t i = 0; i < r->nprices; i++)
        free(r->prices[i].model);
    free(r->prices);
    free(r->currency);
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

#define PRICE_MAX 1e6 /* per million tokens: anything above is a mistake */

static bool price_ok(const cJSON *v, bool optional)
{
    if (v == NULL)
        return optional;
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0 &&
           v->valuedouble <= PRICE_MAX;
}

static int price_entry(struct report *r, const cJSON *m, char *err, size_t errlen)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(m, "input");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(m, "output");
    if (!price_ok(in, false) || !price_ok(out, true)) {
        snprintf(err, errlen,
                 "model \"%s\": \"input\" (and \"output\", if given) must be numbers from 0 "
                 "to %g",
                 m->string, PRICE_MAX);
        return -1;
    }
    /* Names are matched as the proxy stores them. */
    char name[TALLY_MODEL_MAX + 1];
    tally_model(m->string, name);
    struct report_price *p = NULL;
    for (size_t i = 0; i < r->nprices && p == NULL; i++)
        if (strcmp(r->prices[i].model, name) == 0)
            p = &r->prices[i]; /* a repeated name: the last one counts */
    if (p == NULL) {
        r->prices = pc_realloc(r->prices, (r->nprices + 1) * sizeof(*r->prices));
        p = &r->prices[r->nprices++];
        p->model = pc_strdup(name);
    }
    p->input = in->valuedouble;
    p->output = out ? out->valuedouble : 0;
    return 0;
}

int report_load_prices(struct report *r, const char *json, size_t len, char *err, size_t errlen)
{
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    int rc = 0;
    if (root == NULL || !cJSON_IsObject(models)) {
        snprintf(err, errlen, "expected a JSON object with a \"models\" object");
        rc = -1;
    }
    for (const cJSON *m = models ? models->child : NULL; rc == 0 && m != NULL; m = m->next)
        rc = price_entry(r, m, err, errlen);
    if (rc == 0) {
        const char *cur = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "currency"));
        char clean[TALLY_MODEL_MAX + 1];
        tally_model(cur ? cur : "USD", clean);
        free(r->currency);
        r->currency = pc_strdup(clean);
    }
    cJSON_Delete(root);
    return rc;
}

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return n > 0;
}

/* Whether what follows a priced name only dates or tags it (see pc_report.h). */
static bool version_suffix(const char *s)
{
    size_t n = strlen(s);
    if (s[0] == '@' || s[0] == ':')
        return true;
    if (strcmp(s, "-latest") == 0)
        return true;
    if (n == 9 && s[0] == '-' && all_digits(s + 1, 8)) /* -YYYYMMDD */
        return true;
    return n == 11 && s[0] == '-' && all_digits(s + 1, 4) && s[5] == '-' && all_digits(s + 6, 2) &&
           s[8] == '-' && all_digits(s + 9, 2); /* -YYYY-MM-DD */
}

static const struct report_price *price_for(const struct report *r, const char *model)
{
    for (size_t i = 0; i < r->nprices; i++)
        if (strcmp(model, r->prices[i].model) == 0)
            return &r->prices[i];
    for (size_t i = 0; i < r->nprices; i++) {
        size_t n = strlen(r->prices[i].model);
        if (strncmp(model, r->prices[i].model, n) == 0 &&
            (model[n] == '\0' || version_suffix(model + n)))
            return &r->prices[i];
    }
    return NULL;
}

/* ---- aggregation -------------------------------------------------------------- */

static void add_sat(int64_t *sum, int64_t n)
{
    if (__builtin_add_overflow(*sum, n, sum))
        *sum = INT64_MAX;
}

int report_add_field(struct report *r, const char *field, size_t flen, int64_t count)
{
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
    struct report_row *rows[3] = {&r->total, rows_get(&r->models, model, mlen),
                                  rows_get(&r->tenants, tenant, tlen)};
    double money = 0;
    bool unpriced = false;
    if (r->currency != NULL &&
        (m == TALLY_saved_prompt_tokens || m == TALLY_saved_completion_tokens)) {
        char name[TALLY_MODEL_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)mlen, model);
        const struct report_price *p = price_for(r, name);
        if (p != NULL)
            money = (double)count * (m == TALLY_saved_prompt_tokens ? p->input : p->output) / 1e6;
        else
            unpriced = count > 0;
    }
    for (int i = 0; i < 3; i++) {
        add_sat(&rows[i]->v[m], count);
        rows[i]->money_saved += money;
        rows[i]->unpriced |= unpriced;
    }
    return 0;
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
    int64_t looked = row->v[TALLY_hits] + row->v[TALLY_misses];
    return looked > 0 ? (double)row->v[TALLY_hits] / (double)looked : 0.0;
}

/* Money is known when pricing is on and every saved token of the row had a price. */
static bool money_known(const struct report *r, const struct report_row *row)
{
    return r->currency != NULL && !row->unpriced && isfinite(row->money_saved);
}

static void utc(int64_t ms, const char *fmt, char *out, size_t outlen)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, outlen, fmt, &tm);
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
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, "\"%s\":%lld,", tally_metric_name((enum tally_metric)m),
                      (long long)row->v[m]);
    pc_buf_printf(out, "\"hit_rate\":%.4f,\"money_saved\":", hit_rate(row));
    if (money_known(r, row))
        pc_buf_printf(out, "%.6f}", row->money_saved);
    else
        pc_buf_append_str(out, "null}");
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

static void render_json(const struct report *r, struct pc_buf *out)
{
    char from[32], to[32];
    utc(r->from_ms, "%Y-%m-%dT%H:%M:%SZ", from, sizeof(from));
    utc(r->to_ms, "%Y-%m-%dT%H:%M:%SZ", to, sizeof(to));
    pc_buf_printf(out, "{\"from\":\"%s\",\"to\":\"%s\",\"currency\":", from, to);
    if (r->currency != NULL)
        pc_buf_json_str(out, r->currency, strlen(r->currency));
    else
        pc_buf_append_str(out, "null");
    pc_buf_append_str(out, ",\"total\":");
    json_row(r, &r->total, NULL, out);
    json_rows(r, &r->models, "model", out);
    json_rows(r, &r->tenants, "tenant", out);
    pc_buf_append_str(out, "}\n");
}

static void csv_row(const struct report *r, const struct report_row *row, const char *scope,
                    struct pc_buf *out)
{
    /* Names hold no comma, quote or line break (validated): no quoting needed. */
    pc_buf_printf(out, "%s,%s", scope, row->name ? row->name : "");
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, ",%lld", (long long)row->v[m]);
    pc_buf_printf(out, ",%.4f,", hit_rate(row));
    if (money_known(r, row))
        pc_buf_printf(out, "%.6f", row->money_saved);
    pc_buf_append_char(out, '\n');
}

static void render_csv(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, "scope,name");
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, ",%s", tally_metric_name((enum tally_metric)m));
    pc_buf_append_str(out, ",hit_rate,money_saved\n");
    csv_row(r, &r->total, "total", out);
    for (size_t i = 0; i < r->models.n; i++)
        csv_row(r, &r->models.v[i], "model", out);
    for (size_t i = 0; i < r->tenants.n; i++)
        csv_row(r, &r->tenants.v[i], "tenant", out);
}

static void table_row(const struct report *r, const struct report_row *row, const char *indent,
                      const char *name, int width, struct pc_buf *out)
{
    pc_buf_printf(out, "%s%-*s %9lld %8lld %8lld %8lld %7lld %7.1f%% %12lld %12lld", indent,
                  width - (int)strlen(indent), name, (long long)row->v[TALLY_requests],
                  (long long)row->v[TALLY_hits], (long long)row->v[TALLY_misses],
                  (long long)row->v[TALLY_bypasses], (long long)row->v[TALLY_errors],
                  100.0 * hit_rate(row), (long long)row->v[TALLY_saved_prompt_tokens],
                  (long long)row->v[TALLY_saved_completion_tokens]);
    if (money_known(r, row))
        pc_buf_printf(out, " %12.4f", row->money_saved);
    else if (r->currency != NULL)
        pc_buf_printf(out, " %12s", "-");
    pc_buf_append_char(out, '\n');
}

static void table_rows(const struct report *r, const struct report_rows *rows, const char *title,
                       int width, struct pc_buf *out)
{
    if (rows->n > 0)
        pc_buf_printf(out, "%s\n", title);
    for (size_t i = 0; i < rows->n; i++)
        table_row(r, &rows->v[i], "  ", rows->v[i].name, width, out);
}

static void render_table(const struct report *r, struct pc_buf *out)
{
    char from[32], to[32];
    utc(r->from_ms, "%Y-%m-%d %H:%M", from, sizeof(from));
    utc(r->to_ms, "%Y-%m-%d %H:%M", to, sizeof(to));
    int width = 20; /* the name column fits the longest name (at most 64 + indent) */
    for (size_t i = 0; i < r->models.n; i++)
        width = PC_MAX(width, (int)strlen(r->models.v[i].name) + 2);
    pc_buf_printf(out, "promptcache report, %s to %s UTC\n\n", from, to);
    pc_buf_printf(out, "%-*s %9s %8s %8s %8s %7s %8s %12s %12s", width, "", "requests", "hits",
                  "misses", "bypass", "errors", "hit rate", "saved in", "saved out");
    if (r->currency != NULL)
        pc_buf_printf(out, " %12s", r->currency);
    pc_buf_append_char(out, '\n');
    table_row(r, &r->total, "", "total", width, out);
    table_rows(r, &r->models, "by model", width, out);
    table_rows(r, &r->tenants, "by tenant", width, out);
    if (r->currency == NULL)
        pc_buf_append_str(out, "\n(no pricing file: set `pricing` to report money saved)\n");
    else if (r->total.unpriced)
        pc_buf_append_str(out, "\n(-: some saved tokens are of models the pricing file does "
                               "not price)\n");
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

#define PRICING_FILE_MAX (1024 * 1024)

static int load_pricing_file(struct report *r, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "promptcache report: pricing %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct pc_buf b = PC_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len <= PRICING_FILE_MAX)
        pc_buf_append(&b, chunk, n);
    bool failed = ferror(f) != 0;
    fclose(f);
    char err[256] = "";
    int rc = -1;
    if (failed)
        snprintf(err, sizeof(err), "cannot read it");
    else if (b.len > PRICING_FILE_MAX)
        snprintf(err, sizeof(err), "larger than %d bytes", PRICING_FILE_MAX);
    else
        rc = report_load_prices(r, b.data ? b.data : "", b.len, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "promptcache report: pricing %s: %s\n", path, err);
    pc_buf_free(&b);
    return rc;
}

/* Add the fields of one HSCAN (or HGETALL) reply page. */
static void add_fields(struct report *r, const redisReply *page)
{
    for (size_t i = 0; page->type == REDIS_REPLY_ARRAY && i + 1 < page->elements; i += 2) {
        const redisReply *f = page->element[i], *v = page->element[i + 1];
        int64_t count;
        if (f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            pc_parse_i64(v->str, &count) == 0)
            report_add_field(r, f->str, f->len, count);
        else
            r->skipped++;
    }
}

/*
 * Read one hourly hash with HSCAN, a page at a time, so a big hash never
 * blocks Redis (and the proxies' lookups) the way one HGETALL would.
 */
static int read_hour(struct rcli *k, struct report *r, int64_t hour_ms)
{
    char key[TALLY_KEY_MAX], cursor[32] = "0";
    tally_key(hour_ms, key);
    do {
        const char *argv[] = {"HSCAN", key, cursor, "COUNT", "1000"};
        redisReply *rep = rcli_command(k, "HSCAN", 5, argv, NULL);
        if (rep == NULL)
            return -1;
        bool ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
                  rep->element[0]->type == REDIS_REPLY_STRING && rep->element[0]->len < 32;
        if (ok) {
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            add_fields(r, rep->element[1]);
        }
        freeReplyObject(rep);
        if (!ok) {
            rcli_error(k, "%s: unexpected HSCAN reply for %s", k->where, key);
            return -1;
        }
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

int report_cli(const struct conf *c, enum report_format f, int hours)
{
    int64_t now_hour = pc_wall_ms() / TALLY_HOUR_MS * TALLY_HOUR_MS;
    struct report r;
    report_init(&r, now_hour - (int64_t)(hours - 1) * TALLY_HOUR_MS, now_hour + TALLY_HOUR_MS);
    struct rcli k = {0};
    int rc = 1;
    if (c->pricing[0] != '\0' && load_pricing_file(&r, c->pricing) < 0)
        goto out;
    if (rcli_connect(&k, c, "report") < 0)
        goto out;
    for (int64_t h = r.from_ms; h < r.to_ms; h += TALLY_HOUR_MS)
        if (read_hour(&k, &r, h) < 0)
            goto out;
    if (r.skipped > 0)
        rcli_error(&k, "%zu fields of %s were not written by promptcache and were skipped",
                   r.skipped, k.where);
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
