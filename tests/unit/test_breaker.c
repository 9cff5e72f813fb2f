/*
 * test_breaker.c - the circuit breaker's state machine, on a clock the test
 * drives: it opens after N failures in a row (a success in between starts
 * the count again), lets a caller that may probe through once the cool-down
 * is over (one that may not only after twice the cool-down), closes on the
 * probe's success, and on its failure waits
 * twice as long, up to the cap; outcomes of calls let through before it
 * opened change nothing; an abandoned probe hands the probe to the next
 * asker; the metrics row follows (gauge, opens, probes).
 */
#include "pc_breaker.h"
#include "pc_log.h"
#include "t.h"

static struct stats row;

static struct breaker *mk(unsigned failures)
{
    memset(&row, 0, sizeof(row));
    struct breaker_opts o = {
        .name = "test service",
        .failures = failures,
        .cooldown_ms = 100,
        .cooldown_max_ms = 350,
        .row = &row,
        .stat_open = STAT_embedder_breaker_open,
        .stat_opens = STAT_embedder_breaker_opens,
        .stat_probes = STAT_embedder_breaker_probes,
    };
    return breaker_create(&o);
}

static void fail(struct breaker *b, uint64_t now)
{
    T_CHECK_INT(breaker_ask(b, false, now), BREAKER_GO);
    breaker_report(b, BREAKER_GO, false, now, "timed out");
}

static void test_opens_after_failures_in_a_row(void)
{
    struct breaker *b = mk(3);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    fail(b, 0);
    fail(b, 1);
    breaker_report(b, BREAKER_GO, true, 2, NULL); /* a success: the count starts again */
    fail(b, 3);
    fail(b, 4);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    fail(b, 5);
    T_CHECK_INT(breaker_state(b), BREAKER_OPEN);
    T_CHECK_STR(breaker_state_name(breaker_state(b)), "open");
    T_CHECK_INT(row.v[STAT_embedder_breaker_open], 1);
    T_CHECK_INT(row.v[STAT_embedder_breaker_opens], 1);
    /* Open: nobody is let through, and a late outcome of an earlier call changes nothing. */
    T_CHECK_INT(breaker_ask(b, false, 6), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 6), BREAKER_SHUT);
    T_CHECK(breaker_shut(b, true, 104));
    breaker_report(b, BREAKER_GO, true, 50, NULL);
    breaker_report(b, BREAKER_GO, false, 50, "late");
    T_CHECK_INT(breaker_state(b), BREAKER_OPEN);
    T_CHECK_INT(row.v[STAT_embedder_breaker_opens], 1);
    breaker_destroy(&b);
    T_CHECK(b == NULL);
}

static void test_probe_closes_or_backs_off(void)
{
    struct breaker *b = mk(1);
    fail(b, 1000); /* open at 1000: first probe from 1100 */
    T_CHECK_INT(breaker_ask(b, true, 1099), BREAKER_SHUT);
    /* After the cool-down a caller that may probe gets through, and only one. */
    T_CHECK(breaker_shut(b, false, 1100));
    T_CHECK(!breaker_shut(b, true, 1100));
    T_CHECK_INT(breaker_ask(b, false, 1199), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 1100), BREAKER_PROBE);
    T_CHECK_INT(breaker_state(b), BREAKER_HALF_OPEN);
    T_CHECK_STR(breaker_state_name(breaker_state(b)), "half-open");
    T_CHECK_INT(breaker_ask(b, true, 1101), BREAKER_SHUT);
    T_CHECK_INT(row.v[STAT_embedder_breaker_probes], 1);
    /* The probe fails: twice the cool-down (200), then 350 (the cap), then 350 again. */
    breaker_report(b, BREAKER_PROBE, false, 1150, "500");
    T_CHECK_INT(breaker_state(b), BREAKER_OPEN);
    T_CHECK_INT(breaker_ask(b, true, 1349), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 1350), BREAKER_PROBE);
    breaker_report(b, BREAKER_PROBE, false, 1400, "500");
    T_CHECK_INT(breaker_ask(b, true, 1749), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 1750), BREAKER_PROBE);
    breaker_report(b, BREAKER_PROBE, false, 1800, "500");
    T_CHECK_INT(breaker_ask(b, true, 2149), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 2150), BREAKER_PROBE);
    T_CHECK_INT(row.v[STAT_embedder_breaker_probes], 4);
    T_CHECK_INT(row.v[STAT_embedder_breaker_opens], 1); /* re-opening is not opening */
    /* The probe works: closed, everyone through, and the next opening starts at 100 again. */
    breaker_report(b, BREAKER_PROBE, true, 2200, NULL);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    T_CHECK_INT(row.v[STAT_embedder_breaker_open], 0);
    T_CHECK_INT(breaker_ask(b, false, 2201), BREAKER_GO);
    fail(b, 3000);
    T_CHECK_INT(breaker_ask(b, true, 3099), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, true, 3100), BREAKER_PROBE);
    T_CHECK_INT(row.v[STAT_embedder_breaker_opens], 2);
    breaker_destroy(&b);
}

static void test_abandoned_probe(void)
{
    struct breaker *b = mk(1);
    fail(b, 0);
    T_CHECK_INT(breaker_ask(b, true, 100), BREAKER_PROBE);
    breaker_abandon(b, 120); /* cancelled before it was sent */
    T_CHECK_INT(breaker_state(b), BREAKER_OPEN);
    T_CHECK_INT(breaker_ask(b, true, 120), BREAKER_PROBE);
    breaker_report(b, BREAKER_PROBE, true, 130, NULL);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    breaker_abandon(b, 140); /* closed: nothing to abandon */
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    breaker_destroy(&b);
}

/* Traffic with no background call: after twice the cool-down a foreground call probes. */
static void test_foreground_probe(void)
{
    struct breaker *b = mk(1);
    fail(b, 0);
    T_CHECK_INT(breaker_ask(b, false, 100), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, false, 199), BREAKER_SHUT);
    T_CHECK(!breaker_shut(b, false, 200));
    T_CHECK_INT(breaker_ask(b, false, 200), BREAKER_PROBE);
    T_CHECK_INT(breaker_ask(b, true, 200), BREAKER_SHUT); /* one probe at a time */
    breaker_report(b, BREAKER_PROBE, false, 210, "stalled");
    /* cool-down 200 now: a background caller from 410, a foreground one from 610 */
    T_CHECK_INT(breaker_ask(b, false, 609), BREAKER_SHUT);
    T_CHECK_INT(breaker_ask(b, false, 610), BREAKER_PROBE);
    breaker_report(b, BREAKER_PROBE, true, 620, NULL);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    breaker_destroy(&b);
}

static void test_never_opens_with_zero(void)
{
    struct breaker *b = mk(0);
    for (uint64_t t = 0; t < 100; t++)
        fail(b, t);
    T_CHECK_INT(breaker_state(b), BREAKER_CLOSED);
    T_CHECK_INT(row.v[STAT_embedder_breaker_opens], 0);
    breaker_destroy(&b);
}

int main(void)
{
    log_init(PC_LOG_ERROR, NULL, NULL, NULL, 0);
    T_RUN(test_opens_after_failures_in_a_row);
    T_RUN(test_probe_closes_or_backs_off);
    T_RUN(test_abandoned_probe);
    T_RUN(test_foreground_probe);
    T_RUN(test_never_opens_with_zero);
    T_DONE();
}
