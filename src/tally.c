/*
 * tally.c - per-worker usage counters by hour, model and tenant, flushed to
 * Redis hashes for `promptcache report` (see pc_tally.h). Owns the in-memory
 * rows and the flush timer.
 *
 *   request ends ─▶ tally_add (row += n) ··· 1 s timer ─▶ tally_flush
 *                                                           │ HINCRBY per count
 *                                                           ▼ EXPIRE per hour key
 *                                                         Redis (store_write)
 *
 * While Redis is unavailable the rows wait (bounded: past TALLY_MAX_ROWS new
 * (model, tenant) pairs are counted in one "overflow" row) and go out with
 * their own hour once it is back.
 */
#include "pc_tally.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_store.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#define TALLY_MAGIC    0x54414c59u /* "TALY" */
#define TALLY_BUCKETS  256
#define TALLY_MAX_ROWS 4096
#define TALLY_FLUSH_MS 1000
#define HOUR_MS        (3600 * 1000)

struct row {
    int64_t hour; /* wall_ms / HOUR_MS */
    char model[TALLY_MODEL_MAX + 1];
    char tenant[17];
    int64_t v[TALLY__COUNT];
    struct row *next;
};

struct tally {
    unsigned magic;
    struct store *store;
    struct event *timer;
    struct row *buckets[TALLY_BUCKETS];
    size_t nrows;
};

static const char *const metric_names[] = {
#define PC_TALLY_NAME(name, help) #name,
    PC_TALLY_METRICS(PC_TALLY_NAME)
#undef PC_TALLY_NAME
        NULL};

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

static bool model_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("._:/@+-", c) != NULL;
}

void tally_model(const char *model, char out[TALLY_MODEL_MAX + 1])
{
    size_t n = 0;
    for (; model != NULL && model[n] != '\0' && n < TALLY_MODEL_MAX; n++)
        out[n] = model_char(model[n]) ? model[n] : '_';
    if (n == 0)
        out[n++] = '-';
    out[n] = '\0';
}

static unsigned row_hash(int64_t hour, const char *model, const char *tenant)
{
    uint32_t h = 2166136261u ^ (uint32_t)hour; /* FNV-1a */
    for (const char *p = model; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    for (const char *p = tenant; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % TALLY_BUCKETS;
}

static struct row *row_find(struct tally *t, int64_t hour, const char *model, const char *tenant,
                            bool create)
{
    unsigned b = row_hash(hour, model, tenant);
    for (struct row *r = t->buckets[b]; r != NULL; r = r->next)
        if (r->hour == hour && strcmp(r->model, model) == 0 && strcmp(r->tenant, tenant) == 0)
            return r;
    if (!create)
        return NULL;
    struct row *r = pc_calloc(1, sizeof(*r));
    r->hour = hour;
    snprintf(r->model, sizeof(r->model), "%s", model);
    snprintf(r->tenant, sizeof(r->tenant), "%s", tenant);
    r->next = t->buckets[b];
    t->buckets[b] = r;
    t->nrows++;
    return r;
}

void tally_add(struct tally *t, const char *model, const char *tenant, enum tally_metric m,
               int64_t n)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    if (n == 0)
        return;
    int64_t hour = pc_wall_ms() / HOUR_MS;
    char clean[TALLY_MODEL_MAX + 1];
    tally_model(model, clean);
    const char *ten = tenant != NULL && tenant[0] != '\0' ? tenant : "-";
    struct row *r = row_find(t, hour, clean, ten, false);
    if (r == NULL)
        r = t->nrows < TALLY_MAX_ROWS ? row_find(t, hour, clean, ten, true)
                                      : row_find(t, hour, "overflow", "overflow", true);
    r->v[m] += n;
}

/*
 * HINCRBY every count of r into its hour's hash, zeroing each one sent (so a
 * refusal half-way never sends a count twice); false if the store refused.
 */
static bool row_send(struct tally *t, struct row *r, const char *key)
{
    for (int m = 0; m < TALLY__COUNT; m++) {
        if (r->v[m] == 0)
            continue;
        char field[TALLY_FIELD_MAX], num[24];
        int fl = snprintf(field, sizeof(field), "%s|%s|%s", metric_names[m], r->tenant, r->model);
        int nl = snprintf(num, sizeof(num), "%lld", (long long)r->v[m]);
        const char *argv[] = {"HINCRBY", key, field, num};
        size_t lens[] = {7, strlen(key), (size_t)fl, (size_t)nl};
        if (store_write(t->store, 4, argv, lens) < 0)
            return false;
        r->v[m] = 0;
    }
    return true;
}

static void expire_key(struct tally *t, const char *key)
{
    char secs[24];
    int sl = snprintf(secs, sizeof(secs), "%d", TALLY_KEEP_DAYS * 86400);
    const char *argv[] = {"EXPIRE", key, secs};
    size_t lens[] = {6, strlen(key), (size_t)sl};
    store_write(t->store, 3, argv, lens);
}

void tally_flush(struct tally *t)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    if (t->store == NULL || !store_ready(t->store) || t->nrows == 0)
        return;
    int64_t expired_hour = -1; /* the last hour key given its EXPIRE in this flush */
    for (size_t b = 0; b < TALLY_BUCKETS; b++) {
        struct row **pp = &t->buckets[b];
        while (*pp != NULL) {
            struct row *r = *pp;
            char key[TALLY_KEY_MAX];
            tally_key(r->hour * HOUR_MS, key);
            if (!row_send(t, r, key))
                return; /* Redis went away: the rest waits for the next flush */
            if (r->hour != expired_hour) {
                expire_key(t, key);
                expired_hour = r->hour;
            }
            *pp = r->next;
            free(r);
            t->nrows--;
        }
    }
}

size_t tally_pending(const struct tally *t)
{
    PC_CHECK_OBJ(t, TALLY_MAGIC);
    return t->nrows;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tally_flush(arg);
}

struct tally *tally_create(struct event_base *base, struct store *store)
{
    struct tally *t = pc_calloc(1, sizeof(*t));
    t->magic = TALLY_MAGIC;
    t->store = store;
    if (base != NULL && store != NULL) {
        t->timer = event_new(base, -1, EV_PERSIST, on_timer, t);
        struct timeval tv = pc_timeval_ms(TALLY_FLUSH_MS);
        if (t->timer == NULL || event_add(t->timer, &tv) < 0) {
            log_error("tally: cannot set up the flush timer");
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
    for (size_t b = 0; b < TALLY_BUCKETS; b++) {
        while (t->buckets[b] != NULL) {
            struct row *r = t->buckets[b];
            t->buckets[b] = r->next;
            free(r);
        }
    }
    t->magic = 0;
    free(t);
}
