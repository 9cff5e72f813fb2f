/*
 * dash.c - the dashboard's figures from the hourly counters (see pc_dash.h).
 * Owns the raw fields read per hour, the reader thread and the mutex that
 * guards both.
 *
 *   GET /dashboard/data ─▶ dash_render: lock ─▶ stale? start the reader
 *        ─▶ reports per hour from the kept fields, priced now ─▶ JSON
 *   reader thread: rcli ─▶ HSCAN pc:2:r:<hour> for the hours wanted
 *        ─▶ lock, swap in the new fields, stamp the time ─▶ exit
 */
#include "pc_dash.h"
#include "pc_conf.h"
#include "pc_pricing.h"
#include "pc_rcli.h"
#include "pc_report.h"
#include "pc_stats.h"
#include "pc_tally.h"
#include "pc_tenants.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define DASH_MAGIC   0x44415348u /* "DASH" */
#define DASH_MODELS  20          /* model rows shown; the rest summed under "(more)" */
#define DASH_TENANTS 20          /* tenant rows shown, the busiest */

struct field {
    char *name;
    int64_t count;
};

struct hour {
    int64_t hour; /* wall_ms / TALLY_HOUR_MS; 0: never read */
    struct field *f;
    size_t n, cap;
};

struct dash {
    unsigned magic;
    char *redis;
    int64_t timeout_ms;
    pthread_mutex_t mu;
    struct hour hours[DASH_HOURS_MAX]; /* by hour % DASH_HOURS_MAX; under mu */
    int want;                          /* hours the reader reads; under mu */
    bool reading;                      /* a reader thread runs; under mu */
    bool joinable;                     /* a thread was started and not joined yet */
    bool stopping;                     /* dash_destroy was called: read no further hour; under mu */
    bool orphaned;                     /* the reader frees d when it returns; under mu */
    pthread_t thread;
    struct field *fps; /* TENANTS_KEY_FP as read: tenant id -> key fingerprint (count 0) */
    size_t nfps;
    bool seed;       /* the next read hands the busiest models to the metrics */
    int64_t read_ms; /* when the last read finished (0: never) */
    char error[512]; /* of the last read, "" if it went well */
};

struct dash *dash_create(const struct conf *c)
{
    struct dash *d = pc_calloc(1, sizeof(*d));
    d->magic = DASH_MAGIC;
    d->redis = pc_strdup(c->redis);
    d->timeout_ms = PC_MAX(c->redis_timeout * 20, 1000);
    d->want = 24;
    pthread_mutex_init(&d->mu, NULL);
    return d;
}

/* Under mu (or alone): forget the key fingerprints read. */
static void fps_clear(struct dash *d)
{
    for (size_t i = 0; i < d->nfps; i++)
        free(d->fps[i].name);
    free(d->fps);
    d->fps = NULL;
    d->nfps = 0;
}

static void hour_clear(struct hour *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->f[i].name);
    free(h->f);
    memset(h, 0, sizeof(*h));
}

static void dash_free(struct dash *d)
{
    for (int i = 0; i < DASH_HOURS_MAX; i++)
        hour_clear(&d->hours[i]);
    fps_clear(d);
    pthread_mutex_destroy(&d->mu);
    memset(d->redis, 0, strlen(d->redis)); /* it may hold a password */
    free(d->redis);
    d->magic = 0;
    free(d);
}

void dash_destroy(struct dash **dp)
{
    struct dash *d = *dp;
    if (d == NULL)
        return;
    *dp = NULL;
    PC_CHECK_OBJ(d, DASH_MAGIC);
    /*
     * A read under way may be blocked in a reply of a frozen Redis for its whole timeout (20
     * times redis-timeout): a shutdown does not wait for it. It stops after its current hour
     * and frees d itself; if the process ends first, nothing is lost (it only reads).
     */
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    bool orphan = d->reading;
    d->orphaned = orphan;
    pthread_mutex_unlock(&d->mu);
    if (orphan) {
        pthread_detach(d->thread);
        return;
    }
    if (d->joinable)
        pthread_join(d->thread, NULL); /* finished: it cleared reading */
    dash_free(d);
}

/* ---- the reader thread -------------------------------------------------------- */

static void keep_field(void *arg, const char *field, size_t flen, int64_t count)
{
    struct hour *h = arg;
    if (count < 0 || flen == 0)
        return;
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->f = pc_realloc(h->f, h->cap * sizeof(*h->f));
    }
    h->f[h->n].name = pc_strndup(field, flen);
    h->f[h->n++].count = count;
}

/* Whether hour must be read now: never read, or recent enough to still change. */
static bool wanted(struct dash *d, int64_t hour, int64_t now_hour)
{
    pthread_mutex_lock(&d->mu);
    bool w = !d->stopping && (d->hours[hour % DASH_HOURS_MAX].hour != hour || hour >= now_hour - 1);
    pthread_mutex_unlock(&d->mu);
    return w;
}

static void fill(struct report *r, const struct hour *h);

/*
 * The tenants named by key hash that some proxy learned (pc_tenants.h):
 * "ID FP" pairs, checked when applied (tenants_learn_fp). -1 on a Redis error.
 */
static int read_fps(struct dash *d, struct rcli *k)
{
    const char *argv[] = {"HGETALL", TENANTS_KEY_FP};
    redisReply *rep = rcli_command(k, "HGETALL " TENANTS_KEY_FP, 2, argv, NULL);
    if (rep == NULL)
        return -1;
    struct field *fps = NULL;
    size_t n = 0;
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const redisReply *f = rep->element[i], *v = rep->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            f->len != TENANT_ID_LEN || v->len != 16)
            continue;
        fps = pc_realloc(fps, (n + 1) * sizeof(*fps));
        fps[n].name = pc_malloc(TENANT_ID_LEN + 1 + 16 + 1);
        snprintf(fps[n].name, TENANT_ID_LEN + 1 + 16 + 1, "%.*s %.*s", TENANT_ID_LEN, f->str, 16,
                 v->str);
        fps[n++].count = 0;
    }
    freeReplyObject(rep);
    pthread_mutex_lock(&d->mu);
    fps_clear(d);
    d->fps = fps;
    d->nfps = n;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* The busiest models of the hours read (by requests), for the metrics' model label. */
static void seed_models(struct dash *d, int64_t now_hour)
{
    struct report r;
    report_init(&r, 0, 0);
    r.no_tenants = true;
    pthread_mutex_lock(&d->mu);
    for (int64_t h = now_hour; h > now_hour - 24; h--)
        if (d->hours[h % DASH_HOURS_MAX].hour == h)
            fill(&r, &d->hours[h % DASH_HOURS_MAX]);
    pthread_mutex_unlock(&d->mu);
    report_sort(&r);
    const char *names[STATS_MODELS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < r.models.n && n < STATS_MODELS_MAX; i++) {
        const char *m = r.models.v[i].name;
        if (r.models.v[i].v[TALLY_requests] > 0 && strcmp(m, TALLY_OTHER) != 0 &&
            strcmp(m, "-") != 0)
            names[n++] = m;
    }
    stats_seed_models(names, n);
    report_free(&r);
}

static void *reader(void *arg)
{
    struct dash *d = arg;
    PC_CHECK_OBJ(d, DASH_MAGIC);
    struct rcli k = {.quiet = true};
    char error[sizeof(k.errmsg)] = "";
    pthread_mutex_lock(&d->mu);
    int want = d->want;
    pthread_mutex_unlock(&d->mu);
    int64_t now_hour = pc_wall_ms() / TALLY_HOUR_MS;
    if (rcli_open(&k, d->redis, d->timeout_ms, "dashboard") < 0 || read_fps(d, &k) < 0) {
        snprintf(error, sizeof error, "%s", k.errmsg);
    } else {
        for (int64_t h = now_hour; h > now_hour - want; h--) {
            if (!wanted(d, h, now_hour))
                continue;
            struct hour fresh = {.hour = h};
            if (report_scan_hour(&k, h * TALLY_HOUR_MS, keep_field, &fresh) < 0) {
                snprintf(error, sizeof error, "%s", k.errmsg);
                hour_clear(&fresh);
                break;
            }
            pthread_mutex_lock(&d->mu);
            struct hour *slot = &d->hours[h % DASH_HOURS_MAX];
            hour_clear(slot);
            *slot = fresh;
            pthread_mutex_unlock(&d->mu);
        }
    }
    rcli_close(&k);
    pthread_mutex_lock(&d->mu);
    bool seed = d->seed && error[0] == '\0' && !d->stopping; /* the metrics may be gone */
    d->seed = d->seed && !seed;
    pthread_mutex_unlock(&d->mu);
    if (seed)
        seed_models(d, now_hour);
    pthread_mutex_lock(&d->mu);
    snprintf(d->error, sizeof d->error, "%s", error);
    d->read_ms = pc_wall_ms();
    d->reading = false;
    bool orphaned = d->orphaned;
    pthread_mutex_unlock(&d->mu);
    if (orphaned) /* dash_destroy left d to this thread */
        dash_free(d);
    return NULL;
}

/* Under mu: start a read if the last one is stale and none runs. */
static void maybe_read(struct dash *d, int hours)
{
    if (hours > d->want)
        d->want = hours;
    if (d->reading || pc_wall_ms() - d->read_ms < DASH_FRESH_MS)
        return;
    if (d->joinable) {
        pthread_join(d->thread, NULL); /* finished: it cleared reading */
        d->joinable = false;
    }
    d->reading = true;
    if (pthread_create(&d->thread, NULL, reader, d) != 0) {
        d->reading = false;
        snprintf(d->error, sizeof d->error, "cannot start the dashboard's reader thread");
        return;
    }
    d->joinable = true;
}

void dash_start(struct dash *d)
{
    PC_CHECK_OBJ(d, DASH_MAGIC);
    pthread_mutex_lock(&d->mu);
    d->seed = true;
    maybe_read(d, 24);
    pthread_mutex_unlock(&d->mu);
}

/* ---- rendering ------------------------------------------------------------------- */

static void fill(struct report *r, const struct hour *h)
{
    for (size_t i = 0; i < h->n; i++)
        report_add_field(r, h->f[i].name, strlen(h->f[i].name), h->f[i].count);
}

static void json_money(struct pc_buf *out, const struct report *r, bool known, double v)
{
    if (r->prices != NULL && known && isfinite(v))
        pc_buf_printf(out, "%.9f", v);
    else
        pc_buf_append_str(out, "null");
}

static void render_hours(struct dash *d, const struct pricing *p, int hours, int64_t now_hour,
                         struct pc_buf *out)
{
    pc_buf_append_str(out, ",\"hours\":[");
    for (int64_t h = now_hour - hours + 1; h <= now_hour; h++) {
        struct report r;
        report_init(&r, h * TALLY_HOUR_MS, (h + 1) * TALLY_HOUR_MS);
        r.no_tenants = true;
        report_set_prices(&r, (struct pricing *)p);
        const struct hour *slot = &d->hours[h % DASH_HOURS_MAX];
        if (slot->hour == h)
            fill(&r, slot);
        const int64_t *v = r.total.v;
        double looked = (double)v[TALLY_hits] + (double)v[TALLY_misses]; /* read from Redis */
        char when[32];
        time_t secs = (time_t)(h * 3600);
        struct tm tm;
        gmtime_r(&secs, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:00:00Z", &tm);
        pc_buf_printf(out,
                      "%s{\"hour\":\"%s\",\"requests\":%lld,\"hits\":%lld,\"misses\":%lld,"
                      "\"hit_rate\":%.4f,\"money_saved\":",
                      h > now_hour - hours + 1 ? "," : "", when, (long long)v[TALLY_requests],
                      (long long)v[TALLY_hits], (long long)v[TALLY_misses],
                      looked > 0 ? (double)v[TALLY_hits] / looked : 0.0);
        json_money(out, &r, true, r.total.money.saved);
        pc_buf_append_str(out, ",\"upstream_cost\":");
        json_money(out, &r, true, r.total.money.upstream);
        pc_buf_append_char(out, '}');
        report_free(&r);
    }
    pc_buf_append_char(out, ']');
}

static void render_match(const struct report *r, struct pc_buf *out)
{
    const int64_t *v = r->total.v;
    const struct report_money *m = &r->total.money;
    pc_buf_printf(out,
                  ",\"by_match\":{\"exact\":{\"hits\":%lld,\"latency_saved_seconds\":%.3f,"
                  "\"money_saved\":",
                  (long long)(v[TALLY_hits] - v[TALLY_semantic_hits]),
                  (double)(v[TALLY_latency_saved_ms] - v[TALLY_semantic_latency_saved_ms]) / 1e3);
    json_money(out, r, true, m->saved - m->saved_semantic);
    pc_buf_printf(out,
                  "},\"semantic\":{\"hits\":%lld,\"latency_saved_seconds\":%.3f,"
                  "\"money_saved\":",
                  (long long)v[TALLY_semantic_hits],
                  (double)v[TALLY_semantic_latency_saved_ms] / 1e3);
    json_money(out, r, true, m->saved_semantic);
    pc_buf_append_str(out, "}}");
}

static void render_models(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, ",\"models\":[");
    size_t shown = 0;
    for (size_t i = 0; i < r->models.n && shown < DASH_MODELS; i++) {
        const struct report_row *row = &r->models.v[i];
        if (row->v[TALLY_requests] == 0)
            continue; /* rows of the proxy's own calls only */
        pc_buf_append_str(out, shown++ ? ",{\"model\":" : "{\"model\":");
        pc_buf_json_str(out, row->name, strlen(row->name));
        pc_buf_append_char(out, ',');
        report_row_json(r, row, true, out);
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, ']');
}

/* The busiest tenants, each by its name (tenant-names) and id: hit rate, saved, paid. */
static void render_tenants(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, ",\"tenants\":[");
    size_t shown = 0;
    for (size_t i = 0; i < r->tenants.n && shown < DASH_TENANTS; i++) {
        const struct report_row *row = &r->tenants.v[i];
        if (row->v[TALLY_requests] == 0)
            continue;
        const char *name = report_tenant_name(r, row);
        pc_buf_append_str(out, shown++ ? ",{\"tenant\":" : "{\"tenant\":");
        pc_buf_json_str(out, row->name, strlen(row->name));
        pc_buf_append_str(out, ",\"name\":");
        if (name != NULL)
            pc_buf_json_str(out, name, strlen(name));
        else
            pc_buf_append_str(out, "null");
        pc_buf_append_char(out, ',');
        report_row_json(r, row, false, out);
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, ']');
}

static void render_latency(const struct report *r, struct pc_buf *out)
{
    pc_buf_append_str(out, ",\"latency_ms\":{");
    for (int k = 0; k < TALLY_LAT__COUNT; k++) {
        int64_t n = report_lat_count(r->lat[k]);
        pc_buf_printf(out, "%s\"%s\":{\"count\":%lld", k ? "," : "", tally_lat_kind_names[k],
                      (long long)n);
        static const double qs[] = {0.5, 0.9, 0.99};
        static const char *const qn[] = {"p50", "p90", "p99"};
        for (size_t i = 0; i < PC_ARRAY_LEN(qs); i++) {
            double q = report_lat_quantile(r->lat[k], qs[i]);
            if (isfinite(q))
                pc_buf_printf(out, ",\"%s\":%.1f", qn[i], q);
            else
                pc_buf_printf(out, ",\"%s\":null", qn[i]);
        }
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, '}');
}

void dash_render(struct dash *d, const struct pricing *p, struct tenants *t, int hours,
                 struct pc_buf *out)
{
    PC_CHECK_OBJ(d, DASH_MAGIC);
    hours = PC_MAX(1, PC_MIN(hours, DASH_HOURS_MAX));
    int64_t now_hour = pc_wall_ms() / TALLY_HOUR_MS;
    pthread_mutex_lock(&d->mu);
    maybe_read(d, hours);
    for (size_t i = 0; i < d->nfps; i++) /* "ID FP", checked by tenants_learn_fp */
        tenants_learn_fp(t, d->fps[i].name, TENANT_ID_LEN, d->fps[i].name + TENANT_ID_LEN + 1, 16);
    struct report r;
    report_init(&r, (now_hour - hours + 1) * TALLY_HOUR_MS, (now_hour + 1) * TALLY_HOUR_MS);
    report_set_prices(&r, (struct pricing *)p);
    report_set_tenants(&r, t);
    for (int64_t h = now_hour - hours + 1; h <= now_hour; h++)
        if (d->hours[h % DASH_HOURS_MAX].hour == h)
            fill(&r, &d->hours[h % DASH_HOURS_MAX]);
    report_sort(&r);
    pc_buf_printf(out, "{\"hours_shown\":%d,\"read_ms\":%lld,\"now_ms\":%lld,\"reading\":%s", hours,
                  (long long)d->read_ms, (long long)pc_wall_ms(), d->reading ? "true" : "false");
    pc_buf_append_str(out, ",\"error\":");
    if (d->error[0])
        pc_buf_json_str(out, d->error, strlen(d->error));
    else
        pc_buf_append_str(out, "null");
    const char *cur = report_currency(&r);
    pc_buf_append_str(out, ",\"currency\":");
    if (cur != NULL)
        pc_buf_json_str(out, cur, strlen(cur));
    else
        pc_buf_append_str(out, "null");
    pc_buf_append_str(out, ",\"pricing\":"); /* where the prices come from, shown on the page */
    if (p != NULL) {
        pc_buf_append_str(out, "{\"source\":");
        pc_buf_json_str(out, pricing_source(p), strlen(pricing_source(p)));
        pc_buf_append_str(out, ",\"date\":");
        pc_buf_json_str(out, pricing_date(p), strlen(pricing_date(p)));
        pc_buf_append_char(out, '}');
    } else {
        pc_buf_append_str(out, "null");
    }
    pc_buf_append_str(out, ",\"total\":{");
    report_row_json(&r, &r.total, false, out);
    pc_buf_append_char(out, '}');
    render_match(&r, out);
    render_models(&r, out);
    render_tenants(&r, out);
    render_latency(&r, out);
    render_hours(d, p, hours, now_hour, out);
    pthread_mutex_unlock(&d->mu);
    pc_buf_append_char(out, '}');
    report_free(&r);
}
