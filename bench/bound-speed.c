/*
 * bound-speed.c - microbenchmark of the semantic error bound's decision
 * (bound_decide in src/bound.c: the threshold certified from the partition's
 * and the global counts, the partition's veto), built and run by
 * `make bench-bound`; never part of `make test`.
 *
 *   bound-speed [--runs 7] [--ms 200] [--search 2000] [--delta 0.01]
 *
 * For every set of counts below, decisions are made in a loop for --ms
 * milliseconds (a candidate's similarity cycling over the buckets 0.9 ..
 * 1.0), --runs times; the median and the slowest run's ns per decision are
 * printed, with a JSON line each. The sets:
 *
 *   few, moderate, large: buckets 0.90 .. 0.995 with 10^3, 10^6, 10^9
 *       comparisons each in the global counts (a partition's a tenth of
 *       them), error rates rising from 0.1% at the top to 3% at 0.90;
 *   max: every bucket at BOUND_COUNT_MAX (2^33), the most the decoder
 *       accepts, rate 0.5%;
 *   edge-all: forged: every bucket at 2^33, its errors the most that keep
 *       its threshold's bound at or under delta, so the scan tests all 100
 *       thresholds of the partition, each as close to delta as whole counts
 *       allow, and certifies at the bottom;
 *   edge-global: the same as global counts, the partition too small to
 *       test: all 100 thresholds of the global counts, then the veto;
 *   random: --search random forged count sets (log-uniform counts in range,
 *       up to 2^33; the same sets every run), each decided once: the mean
 *       and the slowest; that slowest set is then timed as above.
 *
 * With --lookup K (default 4) each set is also timed as a lookup's K
 * candidates decided on one view's counts (bound_decide_prepared after one
 * bound_prepare), when the library has it (PC_BOUND_PREPARED).
 */
#include "pc_bound.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int runs = 7, ms = 200, search = 2000, lookup = 4;
static double delta = 0.01;

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static double uniform(void)
{
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return (double)((x * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Buckets from sim 0.90 to 0.995 with n comparisons each, seen twice that, rates 0.1% .. 3%. */
static void realistic(struct bound_counts *c, double n)
{
    memset(c, 0, sizeof(*c));
    int top = BOUND_BUCKETS - 1, low = bound_bucket(0.9);
    for (int b = low; b <= top; b++) {
        double rate = 0.001 + 0.029 * (double)(top - b) / (double)(top - low);
        c->compared[b] = n;
        c->seen[b] = 2 * n;
        c->wrong[b] = floor(rate * n);
    }
}

/*
 * Forged to cost the most: from the top down, each bucket's errors set to the most that still
 * keeps its threshold's bound at or under delta (found by bisection on the count), so that
 * every threshold passes with its bound as close to delta as whole counts allow.
 */
static void at_the_edge(struct bound_counts *c, double n)
{
    memset(c, 0, sizeof(*c));
    for (int b = BOUND_BUCKETS - 1; b >= 0; b--) {
        c->seen[b] = c->compared[b] = n;
        double lo = 0, hi = n;
        while (hi - lo > 1) {
            double mid = floor((lo + hi) / 2);
            c->wrong[b] = mid;
            struct bound_region r;
            bound_region_at(c, b, &r);
            if (bound_upper(r.x_eff, r.n_eff, BOUND_CONFIDENCE) <= delta)
                lo = mid;
            else
                hi = mid;
        }
        c->wrong[b] = lo;
    }
}

static void every_bucket(struct bound_counts *c, double n, double rate)
{
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        c->seen[b] = c->compared[b] = n;
        c->wrong[b] = floor(rate * n);
    }
}

/* A forged set: each bucket empty, or log-uniform counts up to BOUND_COUNT_MAX. */
static void random_forged(struct bound_counts *c)
{
    memset(c, 0, sizeof(*c));
    double max = (double)BOUND_COUNT_MAX;
    int mode = (int)(uniform() * 3);
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        if (uniform() < 0.2)
            continue;
        double n = floor(exp(uniform() * log(max)));
        double seen = mode == 0 ? n : floor(exp(uniform() * log(max)));
        double rate = mode == 2 ? 0.0099 + 0.0002 * uniform() : uniform() * uniform() * 0.05;
        c->compared[b] = n;
        c->seen[b] = seen;
        c->wrong[b] = PC_MIN(floor(rate * n), n);
    }
}

struct set {
    const char *name;
    struct bound_counts part, glob;
    bool has_part;
};

static double sim_of(unsigned i)
{
    return 0.9 + 0.1 * (double)(i % 97) / 97.0;
}

/* ns per decision over one run of about ms milliseconds (at least 3 decisions). */
static double run_decide(const struct bound_inputs *in)
{
    double t0 = now_ns(), t;
    unsigned n = 0;
    volatile int sink = 0;
    do {
        for (int k = 0; k < 3; k++, n++) {
            struct bound_decision d;
            bound_decide(in, sim_of(n), 0.5, &d);
            sink += (int)d.verdict;
        }
        t = now_ns();
    } while (t - t0 < ms * 1e6);
    (void)sink;
    return (t - t0) / n;
}

#ifdef PC_BOUND_PREPARED
/* ns per candidate when a lookup decides `lookup` candidates on one view's counts. */
static double run_lookup(const struct bound_inputs *in)
{
    double t0 = now_ns(), t;
    unsigned n = 0;
    volatile int sink = 0;
    do {
        struct bound_prepared p;
        bound_prepare(&p);
        for (int k = 0; k < lookup; k++, n++) {
            struct bound_decision d;
            bound_decide_prepared(in, &p, sim_of(n), 0.5, &d);
            sink += (int)d.verdict;
        }
        t = now_ns();
    } while (t - t0 < ms * 1e6);
    (void)sink;
    return (t - t0) / n;
}
#endif

static void report(const char *name, const char *what, double *v)
{
    qsort(v, (size_t)runs, sizeof(*v), cmp_double);
    double med = v[runs / 2], worst = v[runs - 1];
    printf("%-13s %-8s %14.0f %14.0f\n", name, what, med, worst);
    printf("{\"set\":\"%s\",\"path\":\"%s\",\"ns_median\":%.0f,\"ns_max\":%.0f,\"runs\":%d}\n",
           name, what, med, worst, runs);
    fflush(stdout);
}

static void time_set(const struct set *s)
{
    struct bound_inputs in = {
        .partition = s->has_part ? &s->part : NULL,
        .global = &s->glob,
        .entry_floor = -1,
        .delta = delta,
        .explore_rate = 0.05,
    };
    double v[64];
    for (int r = 0; r < runs; r++)
        v[r] = run_decide(&in);
    report(s->name, "decide", v);
#ifdef PC_BOUND_PREPARED
    for (int r = 0; r < runs; r++)
        v[r] = run_lookup(&in);
    report(s->name, "lookup", v);
#endif
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v != NULL && strcmp(a, "--runs") == 0)
            runs = atoi(v), i++;
        else if (v != NULL && strcmp(a, "--ms") == 0)
            ms = atoi(v), i++;
        else if (v != NULL && strcmp(a, "--search") == 0)
            search = atoi(v), i++;
        else if (v != NULL && strcmp(a, "--delta") == 0)
            delta = atof(v), i++;
        else if (v != NULL && strcmp(a, "--lookup") == 0)
            lookup = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bound-speed [--runs N] [--ms N] [--search N] [--delta D] "
                            "[--lookup K]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 64 || ms < 1 || search < 0 || lookup < 1 || !(delta > 0)) {
        fprintf(stderr, "bound-speed: bad argument\n");
        return 2;
    }
    static struct set sets[6];
    int ns = 0;
    const double scale[] = {1e3, 1e6, 1e9};
    const char *names[] = {"few", "moderate", "large"};
    for (int i = 0; i < 3; i++, ns++) {
        sets[ns].name = names[i];
        realistic(&sets[ns].glob, scale[i]);
        realistic(&sets[ns].part, scale[i] / 10);
        sets[ns].has_part = true;
    }
    double max = (double)BOUND_COUNT_MAX;
    sets[ns].name = "max";
    every_bucket(&sets[ns].glob, max, 0.005);
    every_bucket(&sets[ns].part, max, 0.005);
    sets[ns++].has_part = true;
    /* n_eff = 100 * 2^33; one deviation of the rate there is about 1.1e-7 at delta 0.01. */
    sets[ns].name = "edge-all";
    at_the_edge(&sets[ns].part, max);
    sets[ns].glob = sets[ns].part;
    sets[ns++].has_part = true;
    sets[ns].name = "edge-global";
    at_the_edge(&sets[ns].glob, max);
    every_bucket(&sets[ns].part, 1, 0);
    sets[ns++].has_part = true;

    printf("# delta %g, %d runs of %d ms each: ns per decision (median, slowest run)\n", delta,
           runs, ms);
    printf("%-13s %-8s %14s %14s\n", "set", "path", "median", "max");
    for (int i = 0; i < ns; i++)
        time_set(&sets[i]);

    if (search > 0) {
        static struct set worst;
        double worst_ns = 0, total_ns = 0;
        for (int i = 0; i < search; i++) {
            static struct set s;
            random_forged(&s.part);
            random_forged(&s.glob);
            s.has_part = uniform() < 0.5;
            if (!s.has_part) /* a lookup with its partition unread: the global counts alone */
                memset(&s.part, 0, sizeof(s.part));
            struct bound_inputs in = {.partition = s.has_part ? &s.part : NULL,
                                      .global = &s.glob,
                                      .entry_floor = -1,
                                      .delta = delta,
                                      .explore_rate = 0.05};
            double t0 = now_ns();
            struct bound_decision d;
            bound_decide(&in, 0.95, 0.5, &d);
            double t = now_ns() - t0;
            total_ns += t;
            if (t > worst_ns) {
                worst_ns = t;
                worst = s;
            }
        }
        worst.name = "random-worst";
        printf("# %d random forged sets decided once each: mean %.0f ns, slowest %.0f ns\n", search,
               total_ns / search, worst_ns);
        printf("{\"set\":\"random\",\"path\":\"decide\",\"ns_mean\":%.0f,\"ns_max\":%.0f,"
               "\"sets\":%d}\n",
               total_ns / search, worst_ns, search);
        time_set(&worst);
    }
    return 0;
}
