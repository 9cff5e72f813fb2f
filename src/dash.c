/*
 * dash.c - the dashboard's figures from the hourly counters (see pc_dash.h).
 * Owns the raw fields read per hour, the reader thread and the mutex that
 * guards both.
 *
 *   GET /dashboard/data ─▶ dash_render: lock ─▶ stale? start the reader
 *        ─▶ reports per hour from the kept fields, priced now ─▶ JSON
 *   reader thread: rcli ─▶ HSCAN pc:2:tk, then pc:2:r:<hour> for the hours
 *        wanted, keeping the fields promptcache writes ─▶ lock, swap in the
 *        new fields, stamp the time ─▶ exit
 *
 * Whatever is in Redis is untrusted, and a hash may have been filled by
 * anyone: every read is bounded. A hash is read a page at a time and given up
 * after SCAN_MAX fields (the rest noted in "error"); only well-formed fields
 * are kept, FIELDS_MAX over all the hours held and FPS_MAX fingerprints; and a
 * render sums at most RENDER_MODELS distinct models and RENDER_TENANTS
 * tenants, the others under TALLY_OTHER (as a worker does past
 * TALLY_MAX_ROWS), so its time on the worker's loop is bounded too.
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

#define SCAN_MAX       200000 /* fields of one hash read at most (valid or not) */
#define FIELDS_MAX     100000 /* valid fields held over all hours */
#define FPS_MAX        4096   /* key fingerprints kept (a tenants file names fewer keys) */
#define RENDER_MODELS  500    /* distinct models one render sums by name */
#define RENDER_TENANTS 5000   /* ... and tenants */

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
    uint64_t fps_gen;           /* bumped by every read of fps */
    uint64_t applied_gen;       /* the fps_gen applied to applied_to */
    struct tenants *applied_to; /* a reference: the table last taught the fps */
    size_t nfields;             /* fields held in hours[] */
    bool seed;                  /* the next read hands the busiest models to the metrics */
    int64_t read_ms;            /* when the last read finished (0: never) */
    char error[512];            /* of the last read, "" if it went well */
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
    /* Not under mu when h is a reader's fresh hour: nfields counts the slots only. */
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
    tenants_release(&d->applied_to);
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

/*
 * Whether field is one promptcache writes: "METRIC|TENANT|MODEL" with names
 * as the workers write them, or a latency bucket "lat|KIND|N" (checked in
 * full when summed; its forms are few).
 */
static bool field_valid(const char *field, size_t flen)
{
    if (flen > 4 && memcmp(field, "lat|", 4) == 0)
        return flen <= 4 + 8 + 1 + 2;
    const char *bar1 = memchr(field, '|', flen);
    const char *bar2 = bar1 ? memchr(bar1 + 1, '|', (size_t)(field + flen - bar1 - 1)) : NULL;
    if (bar2 == NULL || tally_metric_parse(field, (size_t)(bar1 - field)) < 0)
        return false;
    return tally_valid_tenant(bar1 + 1, (size_t)(bar2 - bar1 - 1)) &&
           tally_valid_model(bar2 + 1, (size_t)(field + flen - bar2 - 1));
}

static void keep_field(struct hour *h, const char *field, size_t flen, int64_t count)
{
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

/* The reader's note of a hash read in part (the first one), for "error". */
static void note_partial(char *note, size_t size, const char *key, const char *why)
{
    if (note[0] == '\0')
        snprintf(note, size, "%s: %s; the rest was not read (fields not written by promptcache?)",
                 key, why);
}

struct fps_read {
    struct field *v;
    size_t n;
};

static bool add_fp(void *arg, const redisReply *f, const redisReply *v)
{
    struct fps_read *fr = arg;
    if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || f->len != TENANT_ID_LEN ||
        v->len != 16)
        return true;
    if (fr->n == FPS_MAX)
        return false;
    if (fr->n % 64 == 0)
        fr->v = pc_realloc(fr->v, (fr->n + 64) * sizeof(*fr->v));
    struct field *fp = &fr->v[fr->n++];
    fp->name = pc_malloc(TENANT_ID_LEN + 1 + 16 + 1);
    snprintf(fp->name, TENANT_ID_LEN + 1 + 16 + 1, "%.*s %.*s", TENANT_ID_LEN, f->str, 16, v->str);
    fp->count = 0;
    return true;
}

/*
 * The tenants named by key hash that some proxy learned (pc_tenants.h):
 * "ID FP" pairs, checked when applied (tenants_learn_fp). -1 on a Redis error.
 */
static int read_fps(struct dash *d, struct rcli *k, char *note, size_t size)
{
    struct fps_read fr = {0};
    int rc = rcli_hscan(k, TENANTS_KEY_FP, SCAN_MAX, add_fp, &fr);
    if (rc < 0) {
        for (size_t i = 0; i < fr.n; i++)
            free(fr.v[i].name);
        free(fr.v);
        return -1;
    }
    if (rc > 0)
        note_partial(note, size, TENANTS_KEY_FP,
                     rc == RCLI_NOT_A_HASH ? "a key of another type" : "too many fields");
    pthread_mutex_lock(&d->mu);
    fps_clear(d);
    d->fps = fr.v;
    d->nfps = fr.n;
    d->fps_gen++;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

struct hour_read {
    struct hour *h;
    size_t budget; /* valid fields this hour may still keep (FIELDS_MAX over all) */
    bool full;
};

static bool add_field(void *arg, const redisReply *f, const redisReply *v)
{
    struct hour_read *hr = arg;
    int64_t count;
    if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
        pc_parse_i64(v->str, &count) < 0 || count < 0 || !field_valid(f->str, f->len))
        return true;
    if (hr->h->n >= hr->budget) {
        hr->full = true;
        return false;
    }
    keep_field(hr->h, f->str, f->len, count);
    return true;
}

/* Read hour h into fresh: 0, or -1 on a Redis error. A hash read in part is noted. */
static int read_hour(struct dash *d, struct rcli *k, int64_t h, struct hour *fresh, char *note,
                     size_t size)
{
    pthread_mutex_lock(&d->mu);
    const struct hour *old = &d->hours[h % DASH_HOURS_MAX];
    size_t held = d->nfields - old->n; /* what the other hours hold */
    pthread_mutex_unlock(&d->mu);
    struct hour_read hr = {.h = fresh, .budget = held < FIELDS_MAX ? FIELDS_MAX - held : 0};
    char key[TALLY_KEY_MAX];
    tally_key(h * TALLY_HOUR_MS, key);
    int rc = rcli_hscan(k, key, SCAN_MAX, add_field, &hr);
    if (rc > 0)
        note_partial(note, size, key,
                     rc == RCLI_NOT_A_HASH ? "a key of another type"
                     : hr.full             ? "more counters than the dashboard holds"
                                           : "too many fields");
    return rc < 0 ? -1 : 0;
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
    char error[sizeof(k.errmsg)] = "", note[sizeof(k.errmsg)] = "";
    pthread_mutex_lock(&d->mu);
    int want = d->want;
    pthread_mutex_unlock(&d->mu);
    int64_t now_hour = pc_wall_ms() / TALLY_HOUR_MS;
    if (rcli_open(&k, d->redis, d->timeout_ms, "dashboard") < 0 ||
        read_fps(d, &k, note, sizeof note) < 0) {
        snprintf(error, sizeof error, "%s", k.errmsg);
    } else {
        for (int64_t h = now_hour; h > now_hour - want; h--) {
            if (!wanted(d, h, now_hour))
                continue;
            struct hour fresh = {.hour = h};
            if (read_hour(d, &k, h, &fresh, note, sizeof note) < 0) {
                snprintf(error, sizeof error, "%s", k.errmsg);
                hour_clear(&fresh);
                break;
            }
            pthread_mutex_lock(&d->mu);
            struct hour *slot = &d->hours[h % DASH_HOURS_MAX];
            d->nfields -= slot->n;
            hour_clear(slot);
            *slot = fresh;
            d->nfields += fresh.n;
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
    snprintf(d->error, sizeof d->error, "%s", error[0] ? error : note);
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

/*
 * The names one render sums by name (a set of [s, s + len) into the kept
 * fields; open addressing, never more than half full); past max, the others
 * are summed under TALLY_OTHER.
 */
struct names {
    const char **s;
    size_t *len;
    size_t n, max, nslots;
};

static void names_init(struct names *ns, size_t max)
{
    ns->n = 0;
    ns->max = max;
    ns->nslots = 1;
    while (ns->nslots < 2 * max)
        ns->nslots *= 2;
    ns->s = pc_calloc(ns->nslots, sizeof(*ns->s));
    ns->len = pc_calloc(ns->nslots, sizeof(*ns->len));
}

static void names_free(struct names *ns)
{
    free(ns->s);
    free(ns->len);
    memset(ns, 0, sizeof(*ns));
}

/* Whether [s, s + len) is summed by its name: already in the set, or added to it. */
static bool names_take(struct names *ns, const char *s, size_t len)
{
    size_t k = (size_t)pc_fnv1a(PC_FNV_SEED, s, len) & (ns->nslots - 1);
    for (; ns->s[k] != NULL; k = (k + 1) & (ns->nslots - 1))
        if (ns->len[k] == len && memcmp(ns->s[k], s, len) == 0)
            return true;
    if (ns->n == ns->max)
        return false;
    ns->s[k] = s;
    ns->len[k] = len;
    ns->n++;
    return true;
}

/* Sum h's fields into r, the models past models' room (tenants: tenants', if not NULL) as other. */
static void fill_names(struct report *r, const struct hour *h, struct names *models,
                       struct names *tenants)
{
    for (size_t i = 0; i < h->n; i++) {
        const char *f = h->f[i].name;
        size_t flen = strlen(f);
        const char *bar1 = memchr(f, '|', flen);
        const char *bar2 = bar1 ? memchr(bar1 + 1, '|', (size_t)(f + flen - bar1 - 1)) : NULL;
        if (bar2 == NULL || (flen > 4 && memcmp(f, "lat|", 4) == 0)) {
            report_add_field(r, f, flen, h->f[i].count);
            continue;
        }
        const char *tenant = bar1 + 1, *model = bar2 + 1;
        size_t tlen = (size_t)(bar2 - tenant), mlen = (size_t)(f + flen - model);
        bool keep_model = names_take(models, model, mlen);
        bool keep_tenant = tenants == NULL || names_take(tenants, tenant, tlen);
        if (keep_model && keep_tenant) {
            report_add_field(r, f, flen, h->f[i].count);
            continue;
        }
        char folded[TALLY_FIELD_MAX + 16];
        int n = snprintf(
            folded, sizeof folded, "%.*s|%.*s|%.*s", (int)(bar1 - f), f,
            keep_tenant ? (int)tlen : (int)strlen(TALLY_OTHER), keep_tenant ? tenant : TALLY_OTHER,
            keep_model ? (int)mlen : (int)strlen(TALLY_OTHER), keep_model ? model : TALLY_OTHER);
        if (n > 0 && (size_t)n < sizeof folded)
            report_add_field(r, folded, (size_t)n, h->f[i].count);
    }
}

/* Sum h's fields into r (a report of its own: the names it holds are bounded here). */
static void fill(struct report *r, const struct hour *h)
{
    struct names models, tenants;
    names_init(&models, RENDER_MODELS);
    names_init(&tenants, RENDER_TENANTS);
    fill_names(r, h, &models, r->no_tenants ? NULL : &tenants);
    names_free(&models);
    names_free(&tenants);
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
    if (t != NULL && (t != d->applied_to || d->applied_gen != d->fps_gen)) {
        /* Once per read and table: what a table learned, it keeps. */
        for (size_t i = 0; i < d->nfps; i++) /* "ID FP", checked by tenants_learn_fp */
            tenants_learn_fp(t, d->fps[i].name, TENANT_ID_LEN, d->fps[i].name + TENANT_ID_LEN + 1,
                             16);
        if (t != d->applied_to) {
            tenants_release(&d->applied_to);
            d->applied_to = tenants_ref(t);
        }
        d->applied_gen = d->fps_gen;
    }
    struct report r;
    report_init(&r, (now_hour - hours + 1) * TALLY_HOUR_MS, (now_hour + 1) * TALLY_HOUR_MS);
    report_set_prices(&r, (struct pricing *)p);
    report_set_tenants(&r, t);
    struct names models, tenants;
    names_init(&models, RENDER_MODELS);
    names_init(&tenants, RENDER_TENANTS);
    for (int64_t h = now_hour - hours + 1; h <= now_hour; h++)
        if (d->hours[h % DASH_HOURS_MAX].hour == h)
            fill_names(&r, &d->hours[h % DASH_HOURS_MAX], &models, &tenants);
    names_free(&models);
    names_free(&tenants);
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
