/*
 * report.c - `promptcache report` (see pc_report.h). Owns the report being
 * built: the total, one row per model and per tenant, and the prices.
 *
 *   Redis pc:1:r:YYYYMMDDHH (HGETALL, one per hour) ─▶ report_add_field
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

#define HOUR_MS (3600 * 1000)

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

static void rows_free(struct report_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rows[i].name);
    free(rows);
}

void report_free(struct report *r)
{
    rows_free(r->models, r->nmodels);
    rows_free(r->tenants, r->ntenants);
    for (size_t i = 0; i < r->nprices; i++)
        free(r->prices[i].model);
    free(r->prices);
    free(r->currency);
    memset(r, 0, sizeof(*r));
}

/* ---- pricing ---------------------------------------------------------------- */

static int price_entry(struct report *r, const cJSON *m, char *err, size_t errlen)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(m, "input");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(m, "output");
    if (!cJSON_IsNumber(in) || !cJSON_IsNumber(out) || in->valuedouble < 0 ||
        out->valuedouble < 0) {
        snprintf(err, errlen, "model \"%s\" needs non-negative numbers \"input\" and \"output\"",
                 m->string);
        return -1;
    }
    r->prices = pc_realloc(r->prices, (r->nprices + 1) * sizeof(*r->prices));
    r->prices[r->nprices++] =
        (struct report_price){pc_strdup(m->string), in->valuedouble, out->valuedouble};
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
        r->currency = pc_strdup(cur ? cur : "USD");
    }
    cJSON_Delete(root);
    return rc;
}

/* The price entry for a model: its own name, else the longest prefix of it. */
static const struct report_price *price_for(const struct report *r, const char *model)
{
    const struct report_price *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < r->nprices; i++) {
        size_t n = strlen(r->prices[i].model);
        if (strncmp(model, r->prices[i].model, n) == 0 && (best == NULL || n > best_len)) {
            best = &r->prices[i];
            best_len = n;
        }
    }
    return best;
}

/* ---- aggregation -------------------------------------------------------------- */

static struct report_row *row_get(struct report_row **rows, size_t *n, const char *name, size_t len)
{
    for (size_t i = 0; i < *n; i++)
        if (strlen((*rows)[i].name) == len && memcmp((*rows)[i].name, name, len) == 0)
            return &(*rows)[i];
    *rows = pc_realloc(*rows, (*n + 1) * sizeof(**rows));
    struct report_row *row = &(*rows)[(*n)++];
    memset(row, 0, sizeof(*row));
    row->name = pc_strndup(name, len);
    return row;
}

int report_add_field(struct report *r, const char *field, size_t flen, int64_t count)
{
    const char *bar1 = memchr(field, '|', flen);
    const char *bar2 = bar1 ? memchr(bar1 + 1, '|', (size_t)(field + flen - bar1 - 1)) : NULL;
    if (bar2 == NULL)
        return -1;
    int m = tally_metric_parse(field, (size_t)(bar1 - field));
    if (m < 0)
        return -1;
    const char *tenant = bar1 + 1, *model = bar2 + 1;
    size_t tlen = (size_t)(bar2 - tenant), mlen = (size_t)(field + flen - model);
    struct report_row *rows[3] = {&r->total, row_get(&r->models, &r->nmodels, model, mlen),
                                  row_get(&r->tenants, &r->ntenants, tenant, tlen)};
    double money = 0;
    if (m == TALLY_saved_prompt_tokens || m == TALLY_saved_completion_tokens) {
        char name[TALLY_MODEL_MAX + 1];
        snprintf(name, sizeof(name), "%.*s", (int)PC_MIN(mlen, TALLY_MODEL_MAX), model);
        const struct report_price *p = price_for(r, name);
        if (p != NULL)
            money = (double)count * (m == TALLY_saved_prompt_tokens ? p->input : p->output) / 1e6;
    }
    for (int i = 0; i < 3; i++) {
        rows[i]->v[m] += count;
        rows[i]->money_saved += money;
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
    if (r->nmodels > 1)
        qsort(r->models, r->nmodels, sizeof(*r->models), by_requests);
    if (r->ntenants > 1)
        qsort(r->tenants, r->ntenants, sizeof(*r->tenants), by_requests);
}

/* ---- rendering ------------------------------------------------------------------ */

static double hit_rate(const struct report_row *row)
{
    int64_t looked = row->v[TALLY_hits] + row->v[TALLY_misses];
    return looked > 0 ? (double)row->v[TALLY_hits] / (double)looked : 0.0;
}

static void utc(int64_t ms, const char *fmt, char *out, size_t outlen)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    strftime(out, outlen, fmt, &tm);
}

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
    if (r->currency != NULL)
        pc_buf_printf(out, "%.6f}", row->money_saved);
    else
        pc_buf_append_str(out, "null}");
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
    pc_buf_append_str(out, ",\"models\":[");
    for (size_t i = 0; i < r->nmodels; i++) {
        pc_buf_append_str(out, i ? "," : "");
        json_row(r, &r->models[i], "model", out);
    }
    pc_buf_append_str(out, "],\"tenants\":[");
    for (size_t i = 0; i < r->ntenants; i++) {
        pc_buf_append_str(out, i ? "," : "");
        json_row(r, &r->tenants[i], "tenant", out);
    }
    pc_buf_append_str(out, "]}\n");
}

/* A CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(struct pc_buf *out, const char *s)
{
    if (strpbrk(s, ",\"\r\n") == NULL) {
        pc_buf_append_str(out, s);
        return;
    }
    pc_buf_append_char(out, '"');
    for (; *s; s++) {
        if (*s == '"')
            pc_buf_append_char(out, '"');
        pc_buf_append_char(out, *s);
    }
    pc_buf_append_char(out, '"');
}

static void csv_row(const struct report *r, const struct report_row *row, const char *scope,
                    struct pc_buf *out)
{
    pc_buf_printf(out, "%s,", scope);
    csv_field(out, row->name ? row->name : "");
    for (int m = 0; m < TALLY__COUNT; m++)
        pc_buf_printf(out, ",%lld", (long long)row->v[m]);
    pc_buf_printf(out, ",%.4f,", hit_rate(row));
    if (r->currency != NULL)
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
    for (size_t i = 0; i < r->nmodels; i++)
        csv_row(r, &r->models[i], "model", out);
    for (size_t i = 0; i < r->ntenants; i++)
        csv_row(r, &r->tenants[i], "tenant", out);
}

static void table_row(const struct report *r, const struct report_row *row, const char *name,
                      struct pc_buf *out)
{
    pc_buf_printf(out, "%-34.34s %9lld %8lld %8lld %8lld %7.1f%% %12lld %12lld", name,
                  (long long)row->v[TALLY_requests], (long long)row->v[TALLY_hits],
                  (long long)row->v[TALLY_misses], (long long)row->v[TALLY_bypasses],
                  100.0 * hit_rate(row), (long long)row->v[TALLY_saved_prompt_tokens],
                  (long long)row->v[TALLY_saved_completion_tokens]);
    if (r->currency != NULL)
        pc_buf_printf(out, " %12.4f", row->money_saved);
    pc_buf_append_char(out, '\n');
}

static void render_table(const struct report *r, struct pc_buf *out)
{
    char from[32], to[32];
    utc(r->from_ms, "%Y-%m-%d %H:%M", from, sizeof(from));
    utc(r->to_ms, "%Y-%m-%d %H:%M", to, sizeof(to));
    pc_buf_printf(out, "promptcache report, %s to %s UTC\n\n", from, to);
    pc_buf_printf(out, "%-34s %9s %8s %8s %8s %8s %12s %12s", "", "requests", "hits", "misses",
                  "bypass", "hit rate", "saved in", "saved out");
    if (r->currency != NULL)
        pc_buf_printf(out, " %12s", r->currency);
    pc_buf_append_char(out, '\n');
    table_row(r, &r->total, "total", out);
    if (r->nmodels > 0)
        pc_buf_append_str(out, "by model\n");
    for (size_t i = 0; i < r->nmodels; i++) {
        char name[80];
        snprintf(name, sizeof(name), "  %s", r->models[i].name);
        table_row(r, &r->models[i], name, out);
    }
    if (r->ntenants > 0)
        pc_buf_append_str(out, "by tenant\n");
    for (size_t i = 0; i < r->ntenants; i++) {
        char name[80];
        snprintf(name, sizeof(name), "  %s", r->tenants[i].name);
        table_row(r, &r->tenants[i], name, out);
    }
    if (r->currency == NULL)
        pc_buf_append_str(out, "\n(no pricing file: set `pricing` to report money saved)\n");
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
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len < (8u << 20))
        pc_buf_append(&b, chunk, n);
    fclose(f);
    char err[256];
    int rc = report_load_prices(r, b.data ? b.data : "", b.len, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "promptcache report: pricing %s: %s\n", path, err);
    pc_buf_free(&b);
    return rc;
}

/* HGETALL one hourly hash into r. */
static int read_hour(struct rcli *k, struct report *r, int64_t hour_ms)
{
    char key[TALLY_KEY_MAX];
    tally_key(hour_ms, key);
    const char *argv[] = {"HGETALL", key};
    redisReply *rep = rcli_command(k, "HGETALL", 2, argv, NULL);
    if (rep == NULL)
        return -1;
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        int64_t count;
        if (f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            pc_parse_i64(v->str, &count) == 0)
            report_add_field(r, f->str, f->len, count);
    }
    freeReplyObject(rep);
    return 0;
}

int report_cli(const struct conf *c, enum report_format f, int hours)
{
    int64_t now_hour = pc_wall_ms() / HOUR_MS * HOUR_MS;
    struct report r;
    report_init(&r, now_hour - (int64_t)(hours - 1) * HOUR_MS, now_hour + HOUR_MS);
    struct rcli k = {0};
    int rc = 1;
    if (c->pricing[0] != '\0' && load_pricing_file(&r, c->pricing) < 0)
        goto out;
    if (rcli_connect(&k, c, "report") < 0)
        goto out;
    for (int64_t h = r.from_ms; h < r.to_ms; h += HOUR_MS)
        if (read_hour(&k, &r, h) < 0)
            goto out;
    report_sort(&r);
    struct pc_buf b = PC_BUF_INIT;
    report_render(&r, f, &b);
    fwrite(b.data, 1, b.len, stdout);
    pc_buf_free(&b);
    rc = 0;
out:
    rcli_close(&k);
    report_free(&r);
    return rc;
}
