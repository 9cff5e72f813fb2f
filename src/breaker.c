/*
 * breaker.c - a circuit breaker (see pc_breaker.h for the picture). Owns its
 * state under one lock, and the log lines of its changes: one warning when
 * it opens, one notice when it closes, an info line for each failed probe.
 */
#include "pc_breaker.h"
#include "pc_log.h"
#include "pc_util.h"

#include <pthread.h>
#include <stdio.h>

#define BREAKER_MAGIC 0x42524b52u /* "BRKR" */

struct breaker {
    unsigned magic;
    pthread_mutex_t mu;
    char name[160];
    unsigned failures_max;
    int64_t cooldown_first, cooldown_max;
    struct stats *row;
    enum stat_id stat_open, stat_opens, stat_probes;

    /* Under mu. */
    enum breaker_state state;
    unsigned failures;  /* in a row, while closed */
    int64_t cooldown;   /* the current one */
    uint64_t retry_ms;  /* open: when the next probe may go */
    uint64_t opened_ms; /* when it left closed, for the notice */
};

struct breaker *breaker_create(const struct breaker_opts *o)
{
    struct breaker *b = pc_calloc(1, sizeof(*b));
    b->magic = BREAKER_MAGIC;
    pthread_mutex_init(&b->mu, NULL);
    snprintf(b->name, sizeof(b->name), "%s", o->name != NULL ? o->name : "service");
    b->failures_max = o->failures;
    b->cooldown_first = PC_MAX(o->cooldown_ms, (int64_t)1);
    b->cooldown_max = PC_MAX(o->cooldown_max_ms, b->cooldown_first);
    b->cooldown = b->cooldown_first;
    b->row = o->row;
    b->stat_open = o->stat_open;
    b->stat_opens = o->stat_opens;
    b->stat_probes = o->stat_probes;
    b->state = BREAKER_CLOSED;
    return b;
}

void breaker_destroy(struct breaker **bp)
{
    struct breaker *b = *bp;
    if (b == NULL)
        return;
    *bp = NULL;
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_destroy(&b->mu);
    b->magic = 0;
    free(b);
}

static void count(struct breaker *b, enum stat_id id, int64_t n)
{
    if (b->row != NULL)
        stats_add(b->row, id, n);
}

/* Lock held: closed -> open. */
static void trip(struct breaker *b, uint64_t now_ms, const char *why)
{
    b->state = BREAKER_OPEN;
    b->opened_ms = now_ms;
    b->cooldown = b->cooldown_first;
    b->retry_ms = now_ms + (uint64_t)b->cooldown;
    count(b, b->stat_open, 1);
    count(b, b->stat_opens, 1);
    log_warn("%s: %u calls in a row failed (last: %s); not called until a probe, %lld ms from "
             "now, gets an answer (the requests go on without it)",
             b->name, b->failures, why != NULL ? why : "an error", (long long)b->cooldown);
}

/* Lock held: the probe worked. */
static void close_it(struct breaker *b, uint64_t now_ms)
{
    b->state = BREAKER_CLOSED;
    b->failures = 0;
    b->cooldown = b->cooldown_first;
    count(b, b->stat_open, -1);
    log_notice("%s: answers again; called again (it was not for %.1f s)", b->name,
               (double)(now_ms - b->opened_ms) / 1000.0);
}

/* Lock held: the probe failed; wait longer before the next. */
static void reopen(struct breaker *b, uint64_t now_ms, const char *why)
{
    b->state = BREAKER_OPEN;
    b->cooldown = PC_MIN(b->cooldown * 2, b->cooldown_max);
    b->retry_ms = now_ms + (uint64_t)b->cooldown;
    log_info("%s: the probe failed (%s); next probe in %lld ms", b->name,
             why != NULL ? why : "an error", (long long)b->cooldown);
}

/*
 * Lock held. A caller that prefers not to probe (a client waits on it) is
 * made the probe only after twice the cool-down without one that may: with
 * traffic that never makes the other kind, the breaker would stay open.
 */
static enum breaker_pass decide(const struct breaker *b, bool may_probe, uint64_t now_ms)
{
    if (b->state == BREAKER_CLOSED)
        return BREAKER_GO;
    uint64_t from = may_probe ? b->retry_ms : b->retry_ms + (uint64_t)b->cooldown;
    if (b->state == BREAKER_OPEN && now_ms >= from)
        return BREAKER_PROBE;
    return BREAKER_SHUT;
}

enum breaker_pass breaker_ask(struct breaker *b, bool may_probe, uint64_t now_ms)
{
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_lock(&b->mu);
    enum breaker_pass p = decide(b, may_probe, now_ms);
    if (p == BREAKER_PROBE) {
        b->state = BREAKER_HALF_OPEN;
        count(b, b->stat_probes, 1);
    }
    pthread_mutex_unlock(&b->mu);
    return p;
}

bool breaker_shut(struct breaker *b, bool may_probe, uint64_t now_ms)
{
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_lock(&b->mu);
    enum breaker_pass p = decide(b, may_probe, now_ms);
    pthread_mutex_unlock(&b->mu);
    return p == BREAKER_SHUT;
}

void breaker_report(struct breaker *b, enum breaker_pass pass, bool ok, uint64_t now_ms,
                    const char *why)
{
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_lock(&b->mu);
    if (pass == BREAKER_PROBE && b->state == BREAKER_HALF_OPEN) {
        if (ok)
            close_it(b, now_ms);
        else
            reopen(b, now_ms, why);
    } else if (pass == BREAKER_GO && b->state == BREAKER_CLOSED) {
        /* Calls let through before it opened say nothing once it has. */
        b->failures = ok ? 0 : b->failures + 1;
        if (!ok && b->failures_max > 0 && b->failures >= b->failures_max)
            trip(b, now_ms, why);
    }
    pthread_mutex_unlock(&b->mu);
}

void breaker_abandon(struct breaker *b, uint64_t now_ms)
{
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_lock(&b->mu);
    if (b->state == BREAKER_HALF_OPEN) {
        b->state = BREAKER_OPEN;
        b->retry_ms = now_ms;
    }
    pthread_mutex_unlock(&b->mu);
}

enum breaker_state breaker_state(struct breaker *b)
{
    PC_CHECK_OBJ(b, BREAKER_MAGIC);
    pthread_mutex_lock(&b->mu);
    enum breaker_state s = b->state;
    pthread_mutex_unlock(&b->mu);
    return s;
}

const char *breaker_state_name(enum breaker_state s)
{
    static const char *const names[] = {"closed", "open", "half-open"};
    return (unsigned)s < PC_ARRAY_LEN(names) ? names[s] : "?";
}
