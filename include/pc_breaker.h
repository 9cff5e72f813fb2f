/*
 * pc_breaker.h - a circuit breaker for a service the proxy calls on the side
 * of requests (the remote embedder): after a run of failed calls it stops
 * calling, so that requests do not each wait for a sick service's timeout,
 * and it probes now and then to find out when the service is back.
 *
 *            failures in a row >= N              the probe failed: cool-down x 2
 *   CLOSED ─────────────────────────▶ OPEN ◀───────────────────────────────┐ (up to the cap)
 *     ▲      (one warning)             │ cool-down over, a caller that may  │
 *     │                                ▼ probe asks                         │
 *     └──────── the probe worked ── HALF_OPEN (that one call goes through) ─┘
 *               (one notice; cool-down back to the first)
 *
 * Callers ask before each call and report its outcome. A caller that says
 * it may probe (no client waits on it) is made the probe once the cool-down
 * is over; one that may not (a client would wait) only after twice the
 * cool-down, when no caller of the first kind came (traffic that never
 * makes one would otherwise keep the breaker open for good). So while the
 * breaker is not closed a client waits on the service at most once per two
 * cool-downs, and not at all while background work probes. Outcomes of
 * calls let through before the breaker opened are not counted against it,
 * nor for it: only the probe decides when it is not closed.
 *
 * Thread-safe (one lock): one breaker is shared by every worker. Times are
 * monotonic milliseconds passed by the caller (tests drive the clock).
 */
#ifndef PC_BREAKER_H
#define PC_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#include "pc_stats.h"

struct breaker;

enum breaker_state {
    BREAKER_CLOSED = 0, /* calls go through */
    BREAKER_OPEN,       /* no calls until the cool-down is over, then a probe */
    BREAKER_HALF_OPEN,  /* the probe is out; no other call */
};

/* The answer to breaker_ask. */
enum breaker_pass {
    BREAKER_SHUT = 0, /* do not call */
    BREAKER_GO,       /* call (closed) */
    BREAKER_PROBE,    /* call: this one is the probe (report it, or breaker_abandon it) */
};

struct breaker_opts {
    const char *name;        /* what it guards, for the log ("embedder http://...") */
    unsigned failures;       /* failed calls in a row that open it; 0: it never opens */
    int64_t cooldown_ms;     /* the first cool-down (> 0) */
    int64_t cooldown_max_ms; /* the longest (at least cooldown_ms) */
    /* Optional metrics row (may be NULL): the gauge is 1 while not closed. */
    struct stats *row;
    enum stat_id stat_open, stat_opens, stat_probes;
};

struct breaker *breaker_create(const struct breaker_opts *o);
void breaker_destroy(struct breaker **b);

/* May a call be made now? may_probe: no client waits on the call (it is the preferred probe). */
enum breaker_pass breaker_ask(struct breaker *b, bool may_probe, uint64_t now_ms);
/* Whether breaker_ask(b, may_probe, now_ms) would say BREAKER_SHUT (changes nothing). */
bool breaker_shut(struct breaker *b, bool may_probe, uint64_t now_ms);
/* The outcome of a call that was let through as pass; why (may be NULL) names a failure. */
void breaker_report(struct breaker *b, enum breaker_pass pass, bool ok, uint64_t now_ms,
                    const char *why);
/* A probe that was never made (cancelled before it was sent): the next asker probes. */
void breaker_abandon(struct breaker *b, uint64_t now_ms);

enum breaker_state breaker_state(struct breaker *b);
/* "closed", "open", "half-open". */
const char *breaker_state_name(enum breaker_state s);

#endif
