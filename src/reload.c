/*
 * reload.c - configuration snapshots and SIGHUP (see pc_reload.h). Owns the
 * snapshots made by reloads, one wake-up event per worker and the main
 * thread's acknowledgement event.
 *
 *   main thread                                   worker i (its own loop)
 *   SIGHUP ─▶ log_reopen ─▶ conf_reload ─▶ merge
 *            ─▶ live = snapshot N (atomic) ─▶ wake[i] ──▶ w->conf = live->conf
 *                                                         acked[i] = N (atomic)
 *   reap ◀─────────────────────────────────────────────── acked event
 *   (free every retired snapshot older than min(acked[i]))
 */
#include "pc_reload.h"
#include "pc_conf.h"
#include "pc_log.h"
#include "pc_store.h"
#include "pc_worker.h"

#include <stdint.h>
#include <string.h>

#include <event2/event.h>

#define RELOAD_MAGIC 0x524c4f44u /* "RLOD" */
#define SLOT_MAGIC   0x534c4f54u /* "SLOT" */

struct snapshot {
    struct conf *conf; /* owned, never changed once published */
    uint64_t gen;      /* 1, 2, ...; the boot configuration is generation 0 */
    struct snapshot *next;
};

struct slot {
    unsigned magic;
    struct reload *r;
    struct worker *w;
    struct event *wake; /* on the worker's base */
    uint64_t acked;     /* atomic: generation the worker runs with */
};

struct reload {
    unsigned magic;
    struct event_base *base;
    const struct conf *current; /* main thread's view: boot or live->conf */
    struct snapshot *live;      /* atomic; NULL until the first applied reload */
    struct snapshot *retired;   /* older snapshots, freed once no worker runs them */
    struct slot *slots;
    int nslots;
    struct event *acked; /* activated by a worker that switched */
    uint64_t announced;  /* last generation every worker was seen running */
};

/* Worker thread: take the live snapshot, then say so. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct slot *s = arg;
    PC_CHECK_OBJ(s, SLOT_MAGIC);
    struct snapshot *snap = __atomic_load_n(&s->r->live, __ATOMIC_ACQUIRE);
    if (snap == NULL)
        return;
    s->w->conf = snap->conf;
    store_set_reply_max(s->w->store, snap->conf->cache_max_entry_size);
    __atomic_store_n(&s->acked, snap->gen, __ATOMIC_RELEASE);
    event_active(s->r->acked, EV_TIMEOUT, 0);
}

/* Free the retired snapshots that every worker has moved past. */
static void reap(struct reload *r)
{
    uint64_t min = UINT64_MAX;
    for (int i = 0; i < r->nslots; i++) {
        uint64_t g = __atomic_load_n(&r->slots[i].acked, __ATOMIC_ACQUIRE);
        min = g < min ? g : min;
    }
    if (r->live != NULL && min == r->live->gen && r->announced != min) {
        r->announced = min;
        log_info("reload: every worker runs the new configuration");
    }
    for (struct snapshot **pp = &r->retired; *pp != NULL;) {
        struct snapshot *s = *pp;
        if (s->gen >= min) {
            pp = &s->next;
            continue;
        }
        *pp = s->next;
        conf_destroy(&s->conf);
        free(s);
    }
}

static void on_acked(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct reload *r = arg;
    PC_CHECK_OBJ(r, RELOAD_MAGIC);
    reap(r);
}

struct reload *reload_create(struct event_base *base, const struct conf *boot)
{
    struct reload *r = pc_calloc(1, sizeof *r);
    r->magic = RELOAD_MAGIC;
    r->base = base;
    r->current = boot;
    r->acked = event_new(base, -1, 0, on_acked, r);
    if (r->acked == NULL) {
        reload_destroy(&r);
        return NULL;
    }
    return r;
}

int reload_attach(struct reload *r, struct worker *const *workers, int n)
{
    r->slots = pc_calloc((size_t)n, sizeof *r->slots);
    for (int i = 0; i < n; i++, r->nslots++) {
        struct slot *s = &r->slots[i];
        *s = (struct slot){.magic = SLOT_MAGIC, .r = r, .w = workers[i]};
        s->wake = event_new(workers[i]->base, -1, 0, on_wake, s);
        if (s->wake == NULL)
            return -1;
    }
    return 0;
}

/* Make c (owned from now on) the configuration of the main thread and of every worker. */
static void publish(struct reload *r, struct conf *c)
{
    struct snapshot *snap = pc_calloc(1, sizeof *snap);
    struct snapshot *old = r->live;
    snap->conf = c;
    snap->gen = old ? old->gen + 1 : 1;
    __atomic_store_n(&r->live, snap, __ATOMIC_RELEASE);
    r->current = c;
    if (old != NULL) {
        old->next = r->retired;
        r->retired = old;
    }
    log_set_level((enum pc_log_level)c->log_level);
    for (int i = 0; i < r->nslots; i++)
        event_active(r->slots[i].wake, EV_TIMEOUT, 0);
}

/* Every line of text, each with a prefix, at one level. */
static void log_lines(enum pc_log_level level, const char *prefix, const char *text)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        if (n > 0)
            log_write(level, NULL, "%s%.*s", prefix, (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* Read the configuration again; apply what may change at runtime. */
static void reread(struct reload *r)
{
    struct pc_buf errs = PC_BUF_INIT, applied = PC_BUF_INIT, restart = PC_BUF_INIT;
    struct conf *next = NULL;
    int n = conf_reload(r->current, &next, &errs);
    if (n > 0) {
        log_lines(PC_LOG_ERROR, "reload: ", pc_buf_cstr(&errs));
        log_error("reload refused: %d configuration error%s; the running configuration is kept", n,
                  n == 1 ? "" : "s");
        pc_buf_free(&errs);
        return;
    }
    log_lines(PC_LOG_WARN, "reload: ", conf_warnings(next));
    struct conf *merged = conf_merge_reload(r->current, next, &applied, &restart);
    if (restart.len > 0)
        log_warn("reload: changed but only taken on restart (running values kept): %s",
                 pc_buf_cstr(&restart));
    if (merged != NULL) {
        publish(r, merged);
        log_notice("reload: applied %s", pc_buf_cstr(&applied));
    } else if (restart.len == 0) {
        log_notice("reload: configuration unchanged");
    }
    conf_destroy(&next);
    pc_buf_free(&errs);
    pc_buf_free(&applied);
    pc_buf_free(&restart);
}

void reload_run(struct reload *r)
{
    PC_CHECK_OBJ(r, RELOAD_MAGIC);
    char err[512];
    if (log_reopen(err, sizeof err) < 0)
        log_error("SIGHUP: %s", err);
    log_notice("SIGHUP: log files reopened; reading the configuration again");
    reread(r);
    reap(r);
}

const struct conf *reload_current(const struct reload *r)
{
    return r->current;
}

void reload_detach(struct reload *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < r->nslots; i++) {
        if (r->slots[i].wake != NULL)
            event_free(r->slots[i].wake);
        r->slots[i].wake = NULL;
    }
    r->nslots = 0;
}

void reload_destroy(struct reload **rp)
{
    struct reload *r = *rp;
    if (r == NULL)
        return;
    *rp = NULL;
    reload_detach(r);
    free(r->slots);
    if (r->acked != NULL)
        event_free(r->acked);
    while (r->retired != NULL) {
        struct snapshot *s = r->retired;
        r->retired = s->next;
        conf_destroy(&s->conf);
        free(s);
    }
    if (r->live != NULL) {
        conf_destroy(&r->live->conf);
        free(r->live);
    }
    r->magic = 0;
    free(r);
}
