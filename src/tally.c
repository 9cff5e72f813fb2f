/*
 * tally.c - per-worker usage counters by hour, model and tenant, flushed to
 * Redis hashes for `promptcache report` (see pc_tally.h). Owns the in-memory
 * rows, the flush timers and the scratch space of a flush.
 *
 *   request ends ─▶ tally_add (row += v, row dirty)
 *   1 s timer (jittered per worker) ─▶ flush pass: up to PASS_EVALS EVALs of
 *        up to EVAL_ROWS dirty rows of one hour (HINCRBY each count, then
 *        EXPIRE the hour's hash) ─▶ more dirty rows? another pass in 10 ms
 *
 * A row lives for its hour, so the per-hour limit on distinct pairs holds
 * across flushes; rows of past hours are freed once sent. While Redis is
 * unavailable the rows wait; rows more than an hour past are dropped then
 * (counted in a log line), so memory stays bounded.
 */
#include "pc_tally.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_model.h"
#include "pc_store.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#define TALLY_MAGIC 0x54414c59u /* "TALY" */
#define BUCKETS     1024
#define EVAL_ROWS   100
#define EVAL_FIELDS (EVAL_ROWS * TALLY__COUNT)
#define PASS_EVALS  4
#define FLUSH_MS    1000
#define AGAIN_MS    10
#define COUNT_MAX   (INT64_C(1) << 53) /* far beyond any real count; sums cannot overflow */

/* One EVAL per batch: every count of the batch, then the hash's lifetime. */
/*
 * Each count is added to its field; a field that cannot take it costs no
 * other: one that would pass INT64_MAX stays at INT64_MAX, one that holds no
 * integer (written by someone else) is replaced by the count.
 */
static const char flush_script[] =
    "for i = 2, #ARGV, 2 do\n"
    "  local r = redis.pcall('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])\n"
    "  if type(r) == 'table' and r.err then\n"
    "    local cur = redis.call('HGET', KEYS[1], ARGV[i])\n"
    "    if type(cur) == 'string' and string.match(cur, '^%d+$') then\n"
    "      redis.call('HSET', KEYS[1], ARGV[i], '9223372036854775807')\n"
    "    else\n"
    "      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])\n"
    "    end\n"
    "  end\n"
    "end\n"
    "redis.call('EXPIRE', KEYS[1], ARGV[1])\n"
    "return 1\n";

struct row {
    int64_t hour; /* wall_ms / TALLY_HOUR_MS */
    char model[TALLY_MODEL_MAX + 1];
    char tenant[17];
    int64_t v[TALLY__COUNT];
    bool dirty;
    struct row *next;
};

/* The latency histogram of one hour (the current one and, until sent, the one before). */
struct hist {
    int64_t hour; /* -1: unused */
    int64_t n[TALLY_LAT__COUNT][TALLY_LAT_BUCKETS];
    bool dirty;
};

struct tally {
    unsigned magic;
    struct hist hist[2];
    struct store *store;
    struct event *timer; /* every FLUSH_MS */
    struct event *again; /* a follow-up pass while dirty rows remain */
    struct row *buckets[BUCKETS];
    size_t nrows;
    int64_t limit_hour; /* the hour limit_rows counts */
    size_t limit_rows;
    uint64_t dropped; /* rows given up while Redis was away (since the last log line) */
    /* Scratch of one EVAL. */
    char (*fields)[TALLY_FIELD_MAX];
    char (*nums)[24];
    const char **argv;
    size_t *lens;
};

const char *const tally_lat_kind_names[TALLY_LAT__COUNT] = {"hit", "miss", "bypass"};
static const int64_t lat_bounds_ms[TALLY_LAT_BUCKETS] = TALLY_LAT_BOUNDS_MS;

static const char *const metric_names[] = {
#define PC_TALLY_NAME(name, help) #name,
    PC_TALLY_METRICS(PC_TALLY_NAME)
#undef PC_TALLY_NAME
};

const char *tally_metric_name(enum tally_metric m)
{
    return metric_names[m];
}

int tally_metric_parse(const char *name, size_t len)
{
    for (int i = 0; i < TALLY__COUNT; i++)
        if (strlen(metric_names[i]) == len && memcmp(metric_names[i], name, len) == 0)
            return i;
    return -1;
}

void tally_key(int64_t wall_ms, char out[TALLY_KEY_MAX])
{
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, TALLY_KEY_MAX, PC_KEY_PREFIX "r:%04d%02d%02d%02d", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour);
}

bool tally_valid_model(const char *s, size_t n)
{
    if (n == strlen(TALLY_OTHER) && memcmp(s, TALLY_OTHER, n) == 0)
        return true;
    return model_valid(s, n);
}

bool tally_valid_tenant(const char *s, size_t n)
{
    if ((n == strlen(TALLY_OTHER) && memcmp(s, TALLY_OTHER, n) == 0) || (n == 1 && s[0] == '-'))
        return true;
    if (n != 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* ---- rows ------------------------------------------------------------------ */

static unsigned row_hash(int64_t hour, const char *model, const char *tenant)
{
    uint64_t h = pc_fnv1a(PC_FNV_SEED, &hour, sizeof(hour));
    h = pc_fnv1a(h, model, strlen(model) + 1); /* the NUL keeps "ab"+"c" apart from "a"+"bc" */
    h = pc_fnv1a(h, tenant, strlen(tenant));
    return (unsigned)(h % BUCKETS);
}

static struct row *row_find(struct tally *t, int64_t hour, const char *model, const char *tenant)
{
    for (struct row *r = t->buckets[row_hash(hour, model, tenant)]; r != NULL; r = r->next)
        if (r->hour == hour && strcmp(r->model, model) == 0 && strcmp(r->tenant, tenant) == 0)
            return r;
    return NULL;
}

static struct row *row_new(struct tally *t, int64_t hour, const char *model, const char *tenant)
{
    unsigned b = row_hash(hour, model, tenant);
    struct row *r = pc_calloc(1, sizeof(*r));
    r->hour = hour;
    snprintf(r->model, sizeof(r->model), "%s", model);
    snprintf(r->tenant, sizeof(r->tenant), "%s", tenant);
    r->next = t->buckets[b];
    t->buckets[b] = r;
    t->nrows++;
    return r;
}

/* The row for a pair in the current hour, within the per-hour limit. */
static struct row *row_for(struct tally *t, int64_t hour, const char *model, const char *tenant)
{
    struct row *r = row_find(t, hour, model, tenant);
    if (r != NULL)
        return r;
    if (hour != t->limit_hour) {
        t->limit_hour = hour;
        t->limit_rows = 0;
    }
    if (t->limit_rows >= TALLY_MAX_ROWS) {
        r = row_find(t, hour, TALLY_OTHER, TALLY_OTHER);
        return r != NULL ? r : row_new(t, hour, TALLY_OTHER, TALLY_OTHER);
    }
    t->limit_rows++;
    return row_new(t, hour, model, tenant);
}

void tally_add(struct tally *t, const char *model, const char *tenant, bool ok,
               const int64_t v[TALLY__COUNT])
{
    if (t == NULL)
        return;
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    int64_t hour = pc_wall_ms() / TALLY_HOUR_MS;
    char clean[TALLY_MODEL_MAX + 1];
    model_clean(model, clean);
    bool valid = ok && tenant != NULL && tally_valid_tenant(tenant, strlen(tenant));
    struct row *r =
        valid ? row_for(t, hour, clean, tenant) : row_for(t, hour, TALLY_OTHER, TALLY_OTHER);
    for (int m = 0; m < TALLY__COUNT; m++)
        if (v[m] > 0) {
            r->v[m] = PC_MIN(COUNT_MAX, r->v[m] + PC_MIN(v[m], COUNT_MAX));
            r->dirty = true;
        }
}

/* The histogram of the hour, reusing the slot of an hour that is sent (or older). */
static struct hist *hist_for(struct tally *t, int64_t hour)
{
    for (int i = 0; i < 2; i++)
        if (t->hist[i].hour == hour)
            return &t->hist[i];
    /* A sent slot, or one of an hour too old to be kept waiting for Redis any more. */
    for (int i = 0; i < 2; i++) {
        struct hist *h = &t->hist[i];
        if (!h->dirty || h->hour < hour - 1) {
            memset(h, 0, sizeof(*h));
            h->hour = hour;
            return h;
        }
    }
    return NULL; /* both unsent and recent (Redis away at an hour's turn): drop this one */
}

void tally_observe(struct tally *t, enum tally_lat_kind kind, int64_t us)
{
    if (t == NULL || kind < 0 || kind >= TALLY_LAT__COUNT)
        return;
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    struct hist *h = hist_for(t, pc_wall_ms() / TALLY_HOUR_MS);
    if (h == NULL)
        return;
    int b = 0;
    while (b < TALLY_LAT_BUCKETS - 1 && us > lat_bounds_ms[b] * 1000)
        b++;
    h->n[kind][b]++;
    h->dirty = true;
}

/* One EVAL with the histogram's non-zero buckets; clean afterwards. -1 if refused. */
static int send_hist(struct tally *t, struct hist *h)
{
    char key[TALLY_KEY_MAX], ttl[16];
    tally_key(h->hour * TALLY_HOUR_MS, key);
    snprintf(ttl, sizeof(ttl), "%d", TALLY_KEEP_DAYS * 86400);
    const char *head[] = {"EVAL", flush_script, "1", key, ttl};
    size_t argc = 0, nf = 0;
    for (; argc < PC_ARRAY_LEN(head); argc++) {
        t->argv[argc] = head[argc];
        t->lens[argc] = strlen(head[argc]);
    }
    for (int k = 0; k < TALLY_LAT__COUNT; k++) {
        for (int b = 0; b < TALLY_LAT_BUCKETS; b++, nf++) {
            if (h->n[k][b] == 0)
                continue;
            int fl =
                snprintf(t->fields[nf], TALLY_FIELD_MAX, "lat|%s|%d", tally_lat_kind_names[k], b);
            int nl = snprintf(t->nums[nf], sizeof(t->nums[nf]), "%lld", (long long)h->n[k][b]);
            t->argv[argc] = t->fields[nf];
            t->lens[argc++] = (size_t)fl;
            t->argv[argc] = t->nums[nf];
            t->lens[argc++] = (size_t)nl;
        }
    }
    if (store_write(t->store, (int)argc, t->argv, t->lens) < 0)
        return -1;
    memset(h->n, 0, sizeof(h->n));
    h->dirty = false;
    return 0;
}

static void flush_hists(struct tally *t)
{
    for (int i = 0; i < 2; i++)
        if (t->hist[i].dirty && send_hist(t, &t->hist[i]) < 0)
            return;
}

size_t tally_rows(const struct tally *t)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    return t->nrows;
}

size_t tally_dirty(const struct tally *t)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    size_t n = 0;
    for (size_t b = 0; b < BUCKETS; b++)
        for (const struct row *r = t->buckets[b]; r != NULL; r = r->next)
            n += r->dirty;
    return n;
}

/* ---- flushing ---------------------------------------------------------------- */

/* Up to EVAL_ROWS dirty rows of one hour (the first dirty row's) into rows[]; their count. */
static size_t collect(struct tally *t, struct row **rows)
{
    size_t n = 0;
    int64_t hour = -1;
    for (size_t b = 0; b < BUCKETS && n < EVAL_ROWS; b++)
        for (struct row *r = t->buckets[b]; r != NULL && n < EVAL_ROWS; r = r->next)
            if (r->dirty && (hour < 0 || r->hour == hour)) {
                hour = r->hour;
                rows[n++] = r;
            }
    return n;
}

/* One EVAL for the rows; they are clean afterwards. -1 if the store refused it. */
static int send_batch(struct tally *t, struct row **rows, size_t n)
{
    char key[TALLY_KEY_MAX], ttl[16];
    tally_key(rows[0]->hour * TALLY_HOUR_MS, key);
    snprintf(ttl, sizeof(ttl), "%d", TALLY_KEEP_DAYS * 86400);
    const char *head[] = {"EVAL", flush_script, "1", key, ttl};
    size_t argc = 0, nf = 0;
    for (; argc < PC_ARRAY_LEN(head); argc++) {
        t->argv[argc] = head[argc];
        t->lens[argc] = strlen(head[argc]);
    }
    for (size_t i = 0; i < n; i++) {
        for (int m = 0; m < TALLY__COUNT; m++) {
            if (rows[i]->v[m] == 0)
                continue;
            int fl = snprintf(t->fields[nf], TALLY_FIELD_MAX, "%s|%s|%s", metric_names[m],
                              rows[i]->tenant, rows[i]->model);
            int nl = snprintf(t->nums[nf], sizeof(t->nums[nf]), "%lld", (long long)rows[i]->v[m]);
            t->argv[argc] = t->fields[nf];
            t->lens[argc++] = (size_t)fl;
            t->argv[argc] = t->nums[nf];
            t->lens[argc++] = (size_t)nl;
            nf++;
        }
    }
    if (store_write(t->store, (int)argc, t->argv, t->lens) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        memset(rows[i]->v, 0, sizeof(rows[i]->v));
        rows[i]->dirty = false;
    }
    return 0;
}

/*
 * Free rows that are done with: clean rows of past hours, and - while Redis
 * is away - dirty rows more than an hour past (their counts are lost).
 */
static void prune(struct tally *t, bool ready)
{
    int64_t hour = pc_wall_ms() / TALLY_HOUR_MS;
    for (size_t b = 0; b < BUCKETS; b++) {
        struct row **pp = &t->buckets[b];
        while (*pp != NULL) {
            struct row *r = *pp;
            bool drop = r->hour < hour && (!r->dirty || (!ready && r->hour < hour - 1));
            if (!drop) {
                pp = &r->next;
                continue;
            }
            t->dropped += r->dirty;
            *pp = r->next;
            free(r);
            t->nrows--;
        }
    }
    if (t->dropped > 0 && ready) {
        log_warn("report counters: %llu row%s dropped while Redis was unavailable",
                 (unsigned long long)t->dropped, t->dropped == 1 ? " was" : "s were");
        t->dropped = 0;
    }
}

/* Up to max_evals batches; true if dirty rows remain. */
static bool flush_pass(struct tally *t, size_t max_evals)
{
    if (t->store == NULL)
        return false;
    bool ready = store_ready(t->store);
    if (ready)
        flush_hists(t);
    struct row *rows[EVAL_ROWS];
    size_t n = 0;
    for (size_t e = 0; ready && e < max_evals; e++) {
        if ((n = collect(t, rows)) == 0 || send_batch(t, rows, n) < 0)
            break;
    }
    prune(t, ready);
    return ready && n > 0 && collect(t, rows) > 0;
}

void tally_flush(struct tally *t)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    flush_pass(t, SIZE_MAX);
}

/* A bounded pass per loop turn, so a big flush never holds up requests. */
static void on_again(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct tally *t = arg;
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    if (flush_pass(t, PASS_EVALS)) {
        struct timeval tv = pc_timeval_ms(AGAIN_MS);
        event_add(t->again, &tv);
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct tally *t = arg;
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    struct timeval every = pc_timeval_ms(FLUSH_MS);
    event_add(t->timer, &every);
    on_again(fd, what, arg);
}

struct tally *tally_create(struct event_base *base, struct store *store)
{
    struct tally *t = pc_calloc(1, sizeof(*t));
    t->magic = TALLY_MAGIC;
    t->store = store;
    t->hist[0].hour = t->hist[1].hour = -1;
    t->fields = pc_calloc(EVAL_FIELDS, sizeof(*t->fields));
    t->nums = pc_calloc(EVAL_FIELDS, sizeof(*t->nums));
    t->argv = pc_calloc(2 * EVAL_FIELDS + 5, sizeof(*t->argv));
    t->lens = pc_calloc(2 * EVAL_FIELDS + 5, sizeof(*t->lens));
    if (base != NULL && store != NULL) {
        t->timer = event_new(base, -1, 0, on_timer, t);
        t->again = event_new(base, -1, 0, on_again, t);
        /* Workers started together must not all flush at the same moment. */
        struct timeval first = pc_timeval_ms((int64_t)(pc_mono_us() % FLUSH_MS) + 1);
        if (t->timer == NULL || t->again == NULL || event_add(t->timer, &first) < 0) {
            log_error("tally: cannot set up the flush timers");
            abort();
        }
    }
    return t;
}

void tally_destroy(struct tally **tp)
{
    struct tally *t = *tp;
    if (t == NULL)
        return;
    *tp = NULL;
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    tally_flush(t);
    if (t->timer != NULL)
        event_free(t->timer);
    if (t->again != NULL)
        event_free(t->again);
    size_t lost = 0;
    for (size_t b = 0; b < BUCKETS; b++) {
        while (t->buckets[b] != NULL) {
            struct row *r = t->buckets[b];
            t->buckets[b] = r->next;
            lost += r->dirty;
            free(r);
        }
    }
    if (lost > 0)
        log_warn("report counters: %zu row%s not be written to Redis at exit", lost,
                 lost == 1 ? " could" : "s could");
    free(t->fields);
    free(t->nums);
    free(t->argv);
    free(t->lens);
    t->magic = 0;
    free(t);
}
