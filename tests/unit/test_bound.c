/*
 * test_bound.c - the error bound's pure parts: the incomplete beta function
 * and the one-sided Clopper-Pearson bounds against known binomial values,
 * the threshold a set of observations certifies (fixed-sequence scan,
 * post-stratified shares), the decision for a candidate (entry marks, partition before the
 * global prior, the partition's veto, sampling), the Redis encodings with
 * their range checks, and the answer text the comparators read.
 */
#include "t.h"

#include "pc_bound.h"
#include "pc_conf.h"
#include "pc_sse.h"
#include "pc_stats.h"
#include "pc_store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

static bool near(double a, double b, double tol)
{
    return fabs(a - b) <= tol;
}

static void test_beta(void)
{
    /* I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(a, b) = 1 - I_{1-x}(b, a). */
    T_CHECK(near(bound_beta_inc(1, 1, 0.3), 0.3, 1e-12));
    T_CHECK(near(bound_beta_inc(3, 1, 0.5), 0.125, 1e-12));
    T_CHECK(near(bound_beta_inc(2.5, 7.25, 0.2), 1 - bound_beta_inc(7.25, 2.5, 0.8), 1e-12));
    T_CHECK(bound_beta_inc(4, 9, 0) == 0 && bound_beta_inc(4, 9, 1) == 1);
    /* I_0.5(a, a) = 0.5 for any a. */
    T_CHECK(near(bound_beta_inc(40.5, 40.5, 0.5), 0.5, 1e-10));
}

/* Values from the binomial distribution itself: P(X <= x | n, upper) = 0.05. */
static void test_clopper_pearson(void)
{
    T_CHECK(near(bound_upper(0, 10, 0.95), 0.258866, 1e-6));
    T_CHECK(near(bound_upper(1, 10, 0.95), 0.394163, 1e-6));
    T_CHECK(near(bound_upper(0, 299, 0.95), 0.009969, 1e-6));
    T_CHECK(near(bound_upper(3, 100, 0.95), 0.075711, 1e-6));
    T_CHECK(near(bound_upper(10, 1000, 0.95), 0.016903, 1e-6));
    T_CHECK(near(bound_upper(5, 20, 0.95), 0.455582, 1e-6));
    T_CHECK(near(bound_lower(1, 10, 0.95), 0.005116, 1e-6));
    T_CHECK(near(bound_lower(3, 100, 0.95), 0.008226, 1e-6));
    T_CHECK(near(bound_lower(5, 20, 0.95), 0.104081, 1e-6));
    T_CHECK(bound_upper(0, 0, 0.95) == 1 && bound_upper(5, 5, 0.95) == 1);
    T_CHECK(bound_lower(0, 50, 0.95) == 0);
    /* Effective (fractional) counts lie between their integer neighbours. */
    double mid = bound_upper(2.5, 100, 0.95);
    T_CHECK(mid > bound_upper(2, 100, 0.95) && mid < bound_upper(3, 100, 0.95));
    T_CHECK_INT(bound_min_n(0.01, 0.95), 299);
    T_CHECK_INT(bound_min_n(0.05, 0.95), 59);
    T_CHECK_INT(bound_min_n(0.005, 0.95), 598);
    T_CHECK(bound_upper(0, (double)bound_min_n(0.02, 0.95), 0.95) <= 0.02);
    T_CHECK(bound_upper(0, (double)bound_min_n(0.02, 0.95) - 1, 0.95) > 0.02);
}

static void add_n(struct bound_counts *c, double sim, bool wrong, int n)
{
    for (int i = 0; i < n; i++)
        bound_counts_add(c, sim, wrong);
}

/* n candidates seen at sim, none compared (served, say). */
static void seen_n(struct bound_counts *c, double sim, int n)
{
    for (int i = 0; i < n; i++)
        bound_counts_seen(c, sim);
}

static void test_buckets(void)
{
    T_CHECK_INT(bound_bucket(0.1), 0);
    T_CHECK_INT(bound_bucket(NAN), 0);
    T_CHECK_INT(bound_bucket(0.5), 0);
    T_CHECK_INT(bound_bucket(0.9), 80);
    T_CHECK_INT(bound_bucket(0.9049), 80);
    T_CHECK_INT(bound_bucket(0.905), 81);
    T_CHECK_INT(bound_bucket(1.0), BOUND_BUCKETS - 1);
    T_CHECK(near(bound_bucket_floor(80), 0.9, 1e-12));
}

static void test_certify(void)
{
    struct bound_counts c = {0};
    struct bound_cert cert;
    bound_certify(&c, 0.01, &cert);
    T_CHECK(!cert.certified);
    add_n(&c, 0.99, false, 298);
    bound_certify(&c, 0.01, &cert);
    T_CHECK(!cert.certified); /* one short of 299 */
    add_n(&c, 0.99, false, 1);
    bound_certify(&c, 0.01, &cert);
    T_CHECK(cert.certified && near(cert.threshold, 0.99, 1e-9));
    T_CHECK(cert.upper <= 0.01 && near(cert.region.n_eff, 299, 1e-9));
    /* More agreement lower down moves the threshold down... */
    add_n(&c, 0.95, false, 600);
    bound_certify(&c, 0.01, &cert);
    T_CHECK(cert.certified && near(cert.threshold, 0.95, 1e-9));
    /* ...and a bucket full of errors below stops the scan there. */
    add_n(&c, 0.92, false, 100);
    add_n(&c, 0.92, true, 20);
    add_n(&c, 0.80, false, 5000);
    bound_certify(&c, 0.01, &cert);
    T_CHECK(cert.certified && near(cert.threshold, 0.95, 1e-9));
    T_CHECK_INT(cert.bucket, bound_bucket(0.95));
    /* A looser delta passes the errors (20 of 1019 is under 5%). */
    bound_certify(&c, 0.05, &cert);
    T_CHECK(cert.certified && cert.threshold < 0.95);
}

static void test_strata(void)
{
    /* 300 candidates, 30 compared: 30 observations, however many they stand for. */
    struct bound_counts c = {0};
    struct bound_cert cert;
    add_n(&c, 0.97, false, 30);
    seen_n(&c, 0.97, 270);
    bound_certify(&c, 0.01, &cert);
    T_CHECK(!cert.certified);
    struct bound_region r;
    bound_region_at(&c, 0, &r);
    T_CHECK(near(r.n_eff, 30, 1e-9) && r.rate == 0);
    /* Each bucket's rate counts by its share of the candidates, not of the comparisons. */
    struct bound_counts d = {0};
    add_n(&d, 0.97, false, 90);
    add_n(&d, 0.92, false, 9);
    add_n(&d, 0.92, true, 1);
    seen_n(&d, 0.92, 890);
    bound_region_at(&d, 0, &r);
    T_CHECK(near(r.rate, 0.1 * 900 / 990, 1e-12));
    T_CHECK(r.n_eff < 100 && r.n_eff > 10);
    /* Equal fractions compared in every bucket: the effective size is the comparisons. */
    struct bound_counts u = {0};
    add_n(&u, 0.97, false, 100);
    seen_n(&u, 0.97, 100);
    add_n(&u, 0.93, false, 200);
    seen_n(&u, 0.93, 200);
    bound_region_at(&u, 0, &r);
    T_CHECK(near(r.n_eff, 300, 1e-9));
    /* A failed write of "seen" never makes a bucket count less than its comparisons. */
    struct bound_counts lag = {0};
    bound_counts_compared(&lag, 0.97, false);
    bound_region_at(&lag, 0, &r);
    T_CHECK(near(r.n_eff, 1, 1e-12));
    /* A bucket nothing was compared at is neither counted nor a threshold. */
    struct bound_counts gap = {0};
    add_n(&gap, 0.99, false, 300);
    seen_n(&gap, 0.90, 1000);
    bound_certify(&gap, 0.01, &cert);
    T_CHECK(cert.certified && near(cert.threshold, 0.99, 1e-9));
}

static void test_decide(void)
{
    struct bound_counts glob = {0}, part = {0};
    add_n(&glob, 0.96, false, 400);
    add_n(&glob, 0.97, false, 1);
    struct bound_inputs in = {
        .partition = NULL, .global = &glob, .entry_floor = -1, .delta = 0.01, .explore_rate = 0.1};
    struct bound_decision d;
    bound_decide(&in, 0.97, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    T_CHECK_INT(d.source, BOUND_SRC_GLOBAL);
    bound_decide(&in, 0.97, 0.05, &d);
    T_CHECK_INT(d.verdict, BOUND_EXPLORE);
    bound_decide(&in, 0.93, 0.5, &d); /* below the global threshold: compared for free */
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    bound_decide(&in, 0.985, 0.5, &d); /* above it, but nothing was compared at 0.985 */
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    /* The entry was wrong at 0.975: never served at or below it again. */
    in.entry_floor = bound_bucket(0.975);
    bound_decide(&in, 0.97, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SKIP);
    bound_decide(&in, 0.965, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SKIP);
    add_n(&glob, 0.99, false, 1);
    bound_decide(&in, 0.99, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    in.entry_floor = -1;
    /* The partition's own errors veto the prior... */
    add_n(&part, 0.97, false, 10);
    add_n(&part, 0.97, true, 10);
    in.partition = &part;
    bound_decide(&in, 0.97, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    /* ...a clean partition does not... */
    struct bound_counts clean = {0};
    add_n(&clean, 0.97, false, 10);
    in.partition = &clean;
    bound_decide(&in, 0.97, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    /* ...and once it certifies a threshold of its own, it decides. */
    struct bound_counts own = {0};
    add_n(&own, 0.99, false, 300);
    add_n(&own, 0.98, true, 3);
    in.partition = &own;
    bound_decide(&in, 0.97, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    bound_decide(&in, 0.99, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    T_CHECK_INT(d.source, BOUND_SRC_PARTITION);
    /* Nothing known (Redis away): withhold. */
    struct bound_inputs none = {.entry_floor = -1, .delta = 0.01, .explore_rate = 0.1};
    bound_decide(&none, 0.999, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    /* Well known: the rate falls as need / n_eff (here 299 / 1196: a quarter)... */
    struct bound_counts many = {0};
    add_n(&many, 0.97, false, 4 * 299);
    struct bound_inputs w = {
        .global = &many, .entry_floor = -1, .delta = 0.01, .explore_rate = 0.1};
    bound_decide(&w, 0.97, 0.05, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    bound_decide(&w, 0.97, 0.02, &d);
    T_CHECK_INT(d.verdict, BOUND_EXPLORE);
    /* ...down to a tenth of it, never less. */
    struct bound_counts lots = {0};
    add_n(&lots, 0.97, false, 100 * 299);
    w.global = &lots;
    bound_decide(&w, 0.97, 0.011, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    bound_decide(&w, 0.97, 0.009, &d);
    T_CHECK_INT(d.verdict, BOUND_EXPLORE);
    /*
     * Bucket 0 holds every similarity below 0.505 (X-Cache-Threshold or semantic-threshold may
     * go to 0): comparisons at 0.49 say nothing of a candidate at 0.1, so it is never served
     * (it was: 1000 agreements at 0.49 served -0.9 and 0.2), nor shown as the threshold.
     */
    struct bound_counts low = {0};
    add_n(&low, 0.49, false, 1000);
    struct bound_inputs lw = {.global = &low, .entry_floor = -1, .delta = 0.01};
    bound_decide(&lw, 0.2, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    bound_decide(&lw, -0.9, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    bound_decide(&lw, 0.49, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
    struct bound_cert lc;
    bound_certify(&low, 0.01, &lc);
    T_CHECK(!lc.certified);
    add_n(&low, 0.51, false, 1000);
    bound_decide(&lw, 0.51, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_SERVE);
    bound_decide(&lw, 0.49, 0.5, &d);
    T_CHECK_INT(d.verdict, BOUND_WITHHOLD);
}

static void test_explore_p(void)
{
    /* Full rate up to the comparisons the bound needs (299 at 0.01), none at rate 0. */
    T_CHECK(near(bound_explore_p(0.05, 0, 0.01), 0.05, 1e-12));
    T_CHECK(near(bound_explore_p(0.05, 299, 0.01), 0.05, 1e-12));
    T_CHECK(near(bound_explore_p(0.05, 598, 0.01), 0.025, 1e-12));
    T_CHECK(near(bound_explore_p(0.05, 2990, 0.01), 0.005, 1e-12));
    T_CHECK(near(bound_explore_p(0.05, 1e9, 0.01), 0.005, 1e-12));
    T_CHECK(near(bound_explore_p(0.05, 1196, 0.005), 0.05 * 598 / 1196.0, 1e-12));
    T_CHECK(bound_explore_p(0, 1e6, 0.01) == 0);
    T_CHECK(near(bound_explore_p(1, 1e9, 0.01), 1, 1e-12)); /* an audit: every one */
    T_CHECK(near(bound_explore_p(0.5, 1e9, 0.01), 0.05, 1e-12));
}

static void test_encoding(void)
{
    struct bound_counts c = {0}, back;
    add_n(&c, 0.97, false, 5);
    add_n(&c, 0.97, true, 2);
    seen_n(&c, 0.97, 20);
    seen_n(&c, 0.51, 3);
    struct pc_buf b = PC_BUF_INIT;
    bound_counts_encode(&c, &b);
    T_CHECK_INT(b.len, BOUND_COUNTS_BYTES);
    T_CHECK_INT(bound_counts_decode(b.data, b.len, &back), 0);
    int k = bound_bucket(0.97);
    T_CHECK(back.seen[k] == 27 && back.compared[k] == 7 && back.wrong[k] == 2);
    T_CHECK(back.seen[bound_bucket(0.51)] == 3);
    /* BITFIELD leaves the value only as long as its highest word: shorter is fine. */
    T_CHECK_INT(bound_counts_decode(b.data, 8, &back), 0);
    T_CHECK_INT(bound_counts_decode(b.data, 8 * (1 + 3 * (k + 1)), &back), 0);
    T_CHECK(back.compared[k] == 7);
    /* Forgeries: a bad magic, a ragged length, too long, more errors than comparisons,
     * a negative count and a huge one. */
    struct pc_buf f = PC_BUF_INIT;
    pc_buf_append(&f, b.data, b.len);
    f.data[0] ^= 1;
    T_CHECK_INT(bound_counts_decode(f.data, f.len, &back), -1);
    T_CHECK_INT(bound_counts_decode(b.data, b.len - 3, &back), -1);
    pc_buf_append(&f, "\0\0\0\0\0\0\0\0", 8);
    f.data[0] ^= 1;
    T_CHECK_INT(bound_counts_decode(f.data, f.len, &back), -1);
    unsigned char *word = (unsigned char *)b.data + 8 * (3 + 3 * k); /* wrong of bucket k */
    word[7] = 8;
    T_CHECK_INT(bound_counts_decode(b.data, b.len, &back), -1);
    T_CHECK(back.compared[k] == 0); /* rejected: nothing of it is used */
    const struct {
        double seen, compared, wrong;
        int rc;
    } cases[] = {
        {3, 5, 1, 0},                       /* seen behind compared: a lost write, accepted */
        {-1, 0, 0, -1},                     /* negative */
        {1e16, 1, 0, -1},                   /* beyond BOUND_COUNT_MAX */
        {0, 17179869184.0, 0, -1},          /* 2^34: where the bound's arithmetic gives way */
        {8589934592.0, 8589934592.0, 0, 0}, /* 2^33: the most accepted */
        {10, 4, 5, -1},                     /* more wrong than compared */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct bound_counts q = {0};
        q.seen[3] = cases[i].seen, q.compared[3] = cases[i].compared, q.wrong[3] = cases[i].wrong;
        pc_buf_reset(&b);
        bound_counts_encode(&q, &b);
        T_CHECK_INT(bound_counts_decode(b.data, b.len, &back), cases[i].rc);
    }
    pc_buf_free(&b);
    pc_buf_free(&f);
}

static void test_marks(void)
{
    int floor = 0;
    T_CHECK_INT(bound_marks_decode("", 0, &floor), 0);
    T_CHECK_INT(floor, -1);
    T_CHECK_INT(bound_marks_decode("\x00\x01", 2, &floor), 0); /* SETBIT key 15 1 */
    T_CHECK_INT(floor, 15);
    T_CHECK_INT(bound_marks_decode("\x80\x00\x20", 3, &floor), 0);
    T_CHECK_INT(floor, 18);
    char big[BOUND_MARKS_BYTES + 1] = {0};
    T_CHECK_INT(bound_marks_decode(big, sizeof big, &floor), -1);
    big[BOUND_MARKS_BYTES - 1] = 0x01; /* bit 103: beyond the last bucket */
    T_CHECK_INT(bound_marks_decode(big, BOUND_MARKS_BYTES, &floor), -1);
}

static void test_argv(void)
{
    struct bound_argv a;
    bound_argv_seen(&a, "pc:2:bp:{x}", 0.905);
    T_CHECK_INT(a.argc, 12);
    T_CHECK_STR(a.argv[0], "BITFIELD");
    T_CHECK_STR(a.argv[1], "pc:2:bp:{x}");
    T_CHECK_STR(a.argv[4], "#0");
    T_CHECK_STR(a.argv[5], "5783539250392793090");
    T_CHECK_STR(a.argv[7], "SAT");
    T_CHECK_STR(a.argv[10], "#244"); /* 1 + 3 * 81 */
    T_CHECK_STR(a.argv[11], "1");
    bound_argv_compared(&a, "pc:2:bg:{y}", 0.905, true);
    T_CHECK_INT(a.argc, 16);
    T_CHECK_STR(a.argv[10], "#245");
    T_CHECK_STR(a.argv[11], "1");
    T_CHECK_STR(a.argv[14], "#246");
    T_CHECK_STR(a.argv[15], "1");
    bound_argv_compared(&a, "pc:2:bg:{y}", 0.905, false);
    T_CHECK_STR(a.argv[15], "0");
    bound_argv_mark(&a, "pc:2:e:{t:k}", "pc:2:o:{t:k}", 0.905);
    T_CHECK_INT(a.argc, 6);
    T_CHECK_STR(a.argv[0], "EVAL");
    T_CHECK(strstr(a.argv[1], "PTTL") != NULL); /* the mark takes the entry's life */
    T_CHECK_STR(a.argv[2], "2");
    T_CHECK_STR(a.argv[3], "pc:2:e:{t:k}"); /* first: the key a cluster routes by */
    T_CHECK_STR(a.argv[4], "pc:2:o:{t:k}");
    T_CHECK_STR(a.argv[5], "81");
    bound_argv_expire(&a, "k", 1234, true);
    T_CHECK_STR(a.argv[0], "PEXPIREAT");
    T_CHECK_STR(a.argv[2], "1234");
    char k1[BOUND_KEY_MAX], k2[BOUND_KEY_MAX];
    unsigned char p1[PC_SHA256_LEN] = {1}, p2[PC_SHA256_LEN] = {2};
    bound_partition_key("builtin-x", p1, k1);
    bound_partition_key("builtin-x", p2, k2);
    T_CHECK(strncmp(k1, "pc:2:bp:{", 9) == 0 && strcmp(k1, k2) != 0);
    bound_partition_key("openai:m", p1, k2);
    T_CHECK(strcmp(k1, k2) != 0); /* another space, other counts */
    bound_entry_key("0123456789abcdef", p1, k1);
    T_CHECK(strncmp(k1, "pc:2:o:{0123456789abcdef:01000000", 33) == 0);

    /* The prior: one per tenant; the anonymous tenant's keeps the key every tenant shared. */
    char g[BOUND_KEY_MAX], t1[BOUND_KEY_MAX], t2[BOUND_KEY_MAX], an[BOUND_KEY_MAX];
    const char *anon = "00112233aabbccdd";
    bound_global_key("builtin-x", g);
    T_CHECK(strncmp(g, "pc:2:bg:{", 9) == 0);
    bound_prior_key("builtin-x", "0123456789abcdef", anon, t1);
    bound_prior_key("builtin-x", "fedcba9876543210", anon, t2);
    T_CHECK(strncmp(t1, "pc:2:bg:{", 9) == 0 && strcmp(t1, t2) != 0); /* tenants apart */
    T_CHECK(strcmp(t1, g) != 0 && strcmp(t2, g) != 0);
    bound_prior_key("builtin-x", anon, anon, an);
    T_CHECK_STR(an, g); /* anonymous traffic: today's data stays valid */
    bound_prior_key("builtin-x", NULL, anon, an);
    T_CHECK_STR(an, g);
    bound_prior_key("openai:m", "0123456789abcdef", anon, t2);
    T_CHECK(strcmp(t1, t2) != 0);                    /* the same tenant with another embedder */
    T_CHECK(strstr(t1, "0123456789abcdef") == NULL); /* names no tenant */
}

static struct entry json_entry(enum api_endpoint ep, const char *body)
{
    return (struct entry){
        .kind = ENTRY_JSON, .endpoint = ep, .status = 200, .body = body, .body_len = strlen(body)};
}

/*
 * At the most the decoder accepts in every bucket, the upper bound still stands about 1.645
 * standard deviations above the rate (the 95% it promises); beyond, lgamma's precision went
 * (2^50 in one bucket gave a bound 0.0002 of a deviation above a rate of 0.001).
 */
static void test_count_max_bound(void)
{
    struct bound_counts c = {0};
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        c.seen[b] = c.compared[b] = (double)BOUND_COUNT_MAX;
        c.wrong[b] = (double)BOUND_COUNT_MAX * 0.0099;
    }
    struct bound_region r;
    bound_region_at(&c, 0, &r);
    double sd = sqrt(r.rate * (1 - r.rate) / r.n_eff);
    double up = bound_upper(r.x_eff, r.n_eff, 0.95);
    T_CHECK((up - r.rate) / sd > 1.6 && (up - r.rate) / sd < 1.7);
    double n = (double)(INT64_C(1) << 50);
    sd = sqrt(0.001 * 0.999 / n);
    T_CHECK((bound_upper(0.001 * n, n, 0.95) - 0.001) / sd < 1.6); /* why the cap */
}

/*
 * The decision as it was computed before bound_prepare and the bisection
 * that stops once a threshold's side of delta is known (the reference the
 * faster path must match verdict for verdict): every threshold's bound
 * computed in full by 80 halvings, the thresholds certified again for each
 * candidate. Same formulas, same order of operations.
 */
static double ref_fraction(double a, double b, double x)
{
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    d = 1.0 / (fabs(d) < tiny ? tiny : d);
    double h = d;
    for (int m = 1; m <= 500; m++) {
        for (int odd = 0; odd < 2; odd++) {
            double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                             : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
            d = 1.0 + num * d;
            d = 1.0 / (fabs(d) < tiny ? tiny : d);
            c = 1.0 + num / c;
            c = fabs(c) < tiny ? tiny : c;
            h *= d * c;
            if (odd && fabs(d * c - 1.0) < 1e-15)
                return h;
        }
    }
    return h;
}

static double ref_beta_inc(double a, double b, double x)
{
    if (x <= 0)
        return 0;
    if (x >= 1)
        return 1;
    double ln_front = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0))
        return exp(ln_front) * ref_fraction(a, b, x) / a;
    return 1.0 - exp(ln_front) * ref_fraction(b, a, 1.0 - x) / b;
}

static double ref_quantile(double a, double b, double target)
{
    double lo = 0, hi = 1;
    for (int i = 0; i < 80; i++) {
        double mid = (lo + hi) / 2;
        if (ref_beta_inc(a, b, mid) < target)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

static double ref_upper(double x, double n, double conf)
{
    if (n <= 0 || x >= n)
        return 1;
    return ref_quantile(fmax(x, 0.0) + 1.0, n - fmax(x, 0.0), conf);
}

static double ref_lower(double x, double n, double conf)
{
    if (x <= 0 || n <= 0)
        return 0;
    return ref_quantile(x, fmax(n - x, 0.0) + 1.0, 1.0 - conf);
}

struct ref_sums {
    double n, e, q;
};

static void ref_sums_add(struct ref_sums *s, const struct bound_counts *c, int b)
{
    double n = c->compared[b];
    if (n <= 0)
        return;
    double big_n = fmax(c->seen[b], n);
    s->n += big_n;
    s->e += big_n * c->wrong[b] / n;
    s->q += big_n * big_n / n;
}

static void ref_region_of(const struct ref_sums *s, struct bound_region *out)
{
    *out = (struct bound_region){0};
    if (s->n <= 0 || s->q <= 0)
        return;
    out->rate = fmin(s->e / s->n, 1.0);
    out->n_eff = s->n * s->n / s->q;
    out->x_eff = out->rate * out->n_eff;
}

static void ref_certify(const struct bound_counts *c, double delta, struct bound_cert *out)
{
    *out = (struct bound_cert){.bucket = BOUND_BUCKETS, .threshold = 1.0, .upper = 1.0};
    double need = (double)bound_min_n(delta, BOUND_CONFIDENCE);
    struct ref_sums s = {0};
    for (int b = BOUND_BUCKETS - 1; b >= 1; b--) { /* bucket 0 is never a threshold */
        if (c->compared[b] <= 0)
            continue;
        ref_sums_add(&s, c, b);
        struct bound_region r;
        ref_region_of(&s, &r);
        if (r.n_eff < need) {
            if (out->certified)
                break;
            continue;
        }
        double up = ref_upper(r.x_eff, r.n_eff, BOUND_CONFIDENCE);
        if (up > delta)
            break;
        *out = (struct bound_cert){.certified = true,
                                   .bucket = b,
                                   .threshold = bound_bucket_floor(b),
                                   .region = r,
                                   .upper = up};
    }
}

static bool ref_vetoes(const struct bound_counts *part, int b, double delta)
{
    struct ref_sums s = {0};
    for (int i = BOUND_BUCKETS - 1; i >= b; i--)
        ref_sums_add(&s, part, i);
    struct bound_region r;
    ref_region_of(&s, &r);
    return r.n_eff > 0 && ref_lower(r.x_eff, r.n_eff, BOUND_CONFIDENCE) > delta;
}

/* The old bound_decide, its certificates computed once (they depend on the counts alone). */
struct ref_certs {
    bool part_done, glob_done;
    struct bound_cert part, glob;
};

static void ref_decide(const struct bound_inputs *in, struct ref_certs *rc, double sim, double u,
                       struct bound_decision *out)
{
    int b = bound_bucket(sim);
    *out = (struct bound_decision){.verdict = BOUND_WITHHOLD, .threshold = 1.0};
    if (in->entry_floor >= 0 && b <= in->entry_floor) {
        out->verdict = BOUND_SKIP;
        return;
    }
    const struct bound_cert *cert = NULL;
    enum bound_source src = BOUND_SRC_NONE;
    bool decided = false;
    if (in->partition != NULL) {
        if (!rc->part_done)
            ref_certify(in->partition, in->delta, &rc->part), rc->part_done = true;
        cert = &rc->part;
        if (cert->certified) {
            decided = true;
            if (b >= cert->bucket && in->partition->compared[b] > 0)
                src = BOUND_SRC_PARTITION;
        }
    }
    if (!decided && in->global != NULL) {
        if (!rc->glob_done)
            ref_certify(in->global, in->delta, &rc->glob), rc->glob_done = true;
        cert = &rc->glob;
        if (cert->certified && b >= cert->bucket && in->global->compared[b] > 0 &&
            !(in->partition != NULL && ref_vetoes(in->partition, b, in->delta)))
            src = BOUND_SRC_GLOBAL;
    }
    out->source = src;
    if (src == BOUND_SRC_NONE)
        return;
    out->threshold = cert->threshold;
    double p = bound_explore_p(in->explore_rate, cert->region.n_eff, in->delta);
    out->verdict = p > 0 && u < p ? BOUND_EXPLORE : BOUND_SERVE;
}

static uint64_t eq_rng = 0x9e3779b97f4a7c15u;

static double eq_uniform(void)
{
    eq_rng ^= eq_rng >> 12;
    eq_rng ^= eq_rng << 25;
    eq_rng ^= eq_rng >> 27;
    return (double)((eq_rng * 0x2545f4914f6cdd1du) >> 11) / 9007199254740992.0;
}

/* A whole count in [0, max], log-uniform (small and large alike), sometimes 0 or max. */
static double eq_count(double max)
{
    double u = eq_uniform();
    if (u < 0.05)
        return 0;
    if (u < 0.1)
        return max;
    return floor(exp(eq_uniform() * log(max + 1)));
}

/* The errors of bucket b set to the most that keep its threshold's region at or under delta. */
static void eq_edge(struct bound_counts *c, int b, double delta)
{
    double lo = 0, hi = c->compared[b];
    while (hi - lo > 1) {
        double mid = floor((lo + hi) / 2);
        c->wrong[b] = mid;
        struct ref_sums s = {0};
        for (int i = BOUND_BUCKETS - 1; i >= b; i--)
            ref_sums_add(&s, c, i);
        struct bound_region r;
        ref_region_of(&s, &r);
        if (ref_upper(r.x_eff, r.n_eff, BOUND_CONFIDENCE) <= delta)
            lo = mid;
        else
            hi = mid;
    }
    c->wrong[b] = lo;
}

/* A count set of one of several shapes (kind), in the decoder's range. */
static void eq_counts(struct bound_counts *c, int kind, double delta)
{
    memset(c, 0, sizeof(*c));
    double cap = (double)BOUND_COUNT_MAX;
    double max = kind % 3 == 0 ? cap : kind % 3 == 1 ? 2000 : 1e7;
    int one = (int)(eq_uniform() * BOUND_BUCKETS);
    double rate = eq_uniform() < 0.5 ? delta * (0.2 + 1.6 * eq_uniform()) : eq_uniform() * 0.1;
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        switch (kind % 6) {
        case 0: /* some buckets: random counts, rates around delta */
        case 1:
            if (eq_uniform() < 0.4)
                continue;
            c->compared[b] = eq_count(max);
            c->seen[b] = eq_uniform() < 0.2 ? eq_count(max) : c->compared[b] * 2;
            break;
        case 2: /* one bucket */
            if (b != one)
                continue;
            c->compared[b] = eq_count(max);
            c->seen[b] = eq_count(max);
            break;
        case 3: /* every bucket at the cap */
            c->compared[b] = c->seen[b] = cap;
            break;
        case 4: /* every bucket, from a handful to a few hundred: n_eff about need */
            c->compared[b] = floor(eq_uniform() * 20);
            c->seen[b] = c->compared[b] + floor(eq_uniform() * 5);
            break;
        default: /* the top buckets only, at or near the cap */
            if (b < BOUND_BUCKETS - 20)
                continue;
            c->compared[b] = cap - floor(eq_uniform() * 1000);
            c->seen[b] = cap;
            break;
        }
        double r = eq_uniform() < 0.1 ? eq_uniform() : rate * (0.5 + eq_uniform());
        c->wrong[b] = fmin(floor(r * c->compared[b]), c->compared[b]);
        if (eq_uniform() < 0.02)
            c->wrong[b] = c->compared[b];
    }
    if (kind % 7 == 0) { /* a threshold's bound put as close to delta as whole counts go */
        int b = BOUND_BUCKETS - 1 - (int)(eq_uniform() * 30);
        if (c->compared[b] <= 0)
            c->compared[b] = c->seen[b] = max;
        eq_edge(c, b, delta);
    }
}

static bool same_double(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

static bool same_cert(const struct bound_cert *a, const struct bound_cert *b)
{
    return a->certified == b->certified && a->bucket == b->bucket &&
           same_double(a->threshold, b->threshold) &&
           same_double(a->region.n_eff, b->region.n_eff) &&
           same_double(a->region.x_eff, b->region.x_eff) &&
           same_double(a->region.rate, b->region.rate) && same_double(a->upper, b->upper);
}

/*
 * The bounds, the certified thresholds and every candidate's verdict are the same as the
 * reference's on thousands of count sets (random, one bucket, every bucket at the cap, about
 * as many comparisons as delta needs, bounds put right at delta, nothing at all): the bounds
 * and certificates bit for bit, each bucket's verdict, source and threshold.
 */
static void test_fast_matches_reference(void)
{
    int bad_upper = 0, bad_cert = 0, bad_verdict = 0, served = 0, withheld = 0;
    for (int i = 0; i < 3000; i++) {
        double n = i % 4 == 0 ? floor(eq_uniform() * 400) : eq_count((double)BOUND_COUNT_MAX);
        double x = i % 5 == 0 ? eq_uniform() * n : floor(eq_uniform() * eq_uniform() * n);
        if (i % 50 == 0)
            x = n;
        if (!same_double(bound_upper(x, n, 0.95), ref_upper(x, n, 0.95)) ||
            !same_double(bound_lower(x, n, 0.95), ref_lower(x, n, 0.95)))
            bad_upper++;
    }
    const double deltas[] = {0.01, 0.01, 0.05, 0.001, 0.2};
    static struct bound_counts part, glob;
    for (int i = 0; i < 2400; i++) {
        double delta = deltas[i % 5];
        eq_counts(&part, i, delta);
        eq_counts(&glob, i / 6 + i % 6 * 7, delta);
        if (i % 97 == 0)
            memset(&part, 0, sizeof(part));
        struct bound_cert a, b;
        const struct bound_counts *sets[] = {&part, &glob};
        for (int k = 0; k < 2; k++) {
            bound_certify(sets[k], delta, &a);
            ref_certify(sets[k], delta, &b);
            bad_cert += !same_cert(&a, &b);
        }
        struct bound_inputs in = {
            .partition = i % 11 == 0 ? NULL : &part,
            .global = i % 13 == 0 ? NULL : &glob,
            .entry_floor = i % 5 == 0 ? (int)(eq_uniform() * BOUND_BUCKETS) : -1,
            .delta = delta,
            .explore_rate = i % 3 == 0   ? 0.05
                            : i % 3 == 1 ? 1
                                         : 0,
        };
        struct bound_prepared p;
        bound_prepare(&p);
        struct ref_certs rc = {0};
        for (int bk = 0; bk < BOUND_BUCKETS; bk++) {
            double sim = bound_bucket_floor(bk) + BOUND_BUCKET_WIDTH / 2, u = eq_uniform();
            struct bound_decision got, want, once;
            bound_decide_prepared(&in, &p, sim, u, &got);
            ref_decide(&in, &rc, sim, u, &want);
            if (bk % 17 == 0)
                bound_decide(&in, sim, u, &once); /* unprepared: the same */
            else
                once = got;
            bool same = got.verdict == want.verdict && got.source == want.source &&
                        same_double(got.threshold, want.threshold) && once.verdict == got.verdict &&
                        once.source == got.source && same_double(once.threshold, got.threshold);
            bad_verdict += !same;
            served += want.verdict == BOUND_SERVE || want.verdict == BOUND_EXPLORE;
            withheld += want.verdict == BOUND_WITHHOLD;
        }
    }
    T_CHECK_INT(bad_upper, 0);
    T_CHECK_INT(bad_cert, 0);
    T_CHECK_INT(bad_verdict, 0);
    /* The sets are not all one way: both verdicts came up often. */
    T_CHECK(served > 10000 && withheld > 10000);
    fprintf(stderr, "    %d allowed, %d withheld of 240000 decisions\n", served, withheld);
}

/* A port on a store never started (its writes go nowhere) and the worker's counters. */
struct port_world {
    struct conf *conf;
    struct event_base *base;
    struct stats st;
    struct store *store;
    struct bound *b;
    struct bound_port *bp;
    struct bound_view *view;
};

static void port_up(struct port_world *w)
{
    memset(w, 0, sizeof(*w));
    char *argv[] = {"--semantic", "yes", "--semantic-max-error", "0.05"};
    w->conf = conf_create();
    T_CHECK_INT(conf_load(w->conf, NULL, 4, argv, NULL), 0);
    w->base = event_base_new();
    struct store_opts so = {.url = "unix:/nonexistent/test_bound.sock", .timeout_ms = 50};
    w->store = store_create(w->base, &so, &w->st);
    w->b = bound_create(w->conf, "test-space");
    w->bp = bound_port_create(w->b, w->store, &w->st, NULL, NULL, NULL);
    unsigned char part[PC_SHA256_LEN] = {7};
    w->view = bound_view_create(w->bp, NULL, part);
}

static void port_down(struct port_world *w)
{
    bound_view_free(&w->view);
    bound_port_destroy(&w->bp);
    bound_destroy(&w->b);
    store_destroy(&w->store);
    event_base_free(w->base);
    conf_destroy(&w->conf);
}

/* A chat answer whose text is n times c, then tail. */
static char *long_answer(size_t n, char c, const char *tail)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append_str(&b, "{\"choices\":[{\"message\":{\"content\":\"");
    for (size_t i = 0; i < n; i++)
        pc_buf_append_char(&b, c);
    pc_buf_append_str(&b, tail);
    pc_buf_append_str(&b, "\"}}]}");
    return pc_buf_cstr(&b);
}

/*
 * Two answers alike in their first BOUND_ANSWER_MAX bytes and different after are not
 * taken as the same (they were: agreed); the candidate's or the fresh one's text cut is no
 * comparison. And every probe ends counted: compared, failed, or uncompared.
 */
static void test_compare_long(void)
{
    struct port_world w;
    port_up(&w);
    unsigned char exact[PC_SHA256_LEN] = {9};
    struct bound_decision d = {.verdict = BOUND_WITHHOLD, .threshold = 1};
    char *a = long_answer(BOUND_ANSWER_MAX + 10, 'a', " yes");
    char *b = long_answer(BOUND_ANSWER_MAX + 10, 'a', " no");
    struct entry ea = {.kind = ENTRY_JSON, .endpoint = API_CHAT, .body = a, .body_len = strlen(a)};
    struct entry eb = {.kind = ENTRY_JSON, .endpoint = API_CHAT, .body = b, .body_len = strlen(b)};
    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(bound_answer_text(&ea, &out), 1); /* cut */
    T_CHECK_INT(out.len, BOUND_ANSWER_MAX);
    pc_buf_free(&out);
    struct bound_probe *p = bound_probe_create(w.view, &d, 0.97, &ea, "0123456789abcdef", exact);
    T_CHECK(p != NULL);
    struct bound_cmp *cmp = NULL;
    T_CHECK_INT(bound_compare(w.bp, p, &eb, NULL, NULL, &cmp), -1);
    T_CHECK(bound_probe_verdict(p) == NULL);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_compare_errors], 1);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_compared], 0);
    bound_probe_unref(&p);
    /* A short candidate and a long fresh answer: no comparison either. */
    struct entry es = json_entry(API_CHAT, "{\"choices\":[{\"message\":{\"content\":\"yes\"}}]}");
    p = bound_probe_create(w.view, &d, 0.97, &es, "0123456789abcdef", exact);
    T_CHECK_INT(bound_compare(w.bp, p, &eb, NULL, NULL, &cmp), -1);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_compare_errors], 2);
    bound_probe_unref(&p);
    /* Compared once; a second comparison of the same probe is refused, not counted. */
    p = bound_probe_create(w.view, &d, 0.97, &es, "0123456789abcdef", exact);
    T_CHECK_INT(bound_compare(w.bp, p, &es, NULL, NULL, &cmp), 1);
    T_CHECK_STR(bound_probe_verdict(p), "agreed");
    T_CHECK_INT(bound_compare(w.bp, p, &es, NULL, NULL, &cmp), -1);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_compared], 1);
    bound_probe_unref(&p);
    /* Never compared: counted when its last reference goes; a candidate without text at once. */
    p = bound_probe_create(w.view, &d, 0.97, &es, "0123456789abcdef", exact);
    struct bound_probe *ref = bound_probe_ref(p);
    bound_probe_unref(&p);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_uncompared], 0);
    bound_probe_unref(&ref);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_uncompared], 1);
    struct entry none = json_entry(API_CHAT, "{\"choices\":[{\"message\":{\"content\":null}}]}");
    T_CHECK(bound_probe_create(w.view, &d, 0.97, &none, "0123456789abcdef", exact) == NULL);
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_uncompared], 2);
    free(a);
    free(b);
    port_down(&w);
}

/* A port like port_up's, with the comparator named and a pair of answers' cosines faked. */
struct fake_pair {
    int starts;
    bound_cos_fn *cb;
    void *arg;
};

static void *fake_pair_start(void *ctx, const char *a, const char *b, bound_cos_fn *cb, void *arg)
{
    (void)a;
    (void)b;
    struct fake_pair *f = ctx;
    f->starts++;
    f->cb = cb;
    f->arg = arg;
    return f;
}

static void fake_pair_cancel(void **handle)
{
    *handle = NULL;
}

static void port_up_cmp(struct port_world *w, const char *cmp, struct fake_pair *fp)
{
    memset(w, 0, sizeof(*w));
    char *argv[] = {
        "--semantic", "yes", "--semantic-max-error", "0.05", "--semantic-verify-answers",
        (char *)cmp};
    w->conf = conf_create();
    T_CHECK_INT(conf_load(w->conf, NULL, 6, argv, NULL), 0);
    w->base = event_base_new();
    struct store_opts so = {.url = "unix:/nonexistent/test_bound.sock", .timeout_ms = 50};
    w->store = store_create(w->base, &so, &w->st);
    w->b = bound_create(w->conf, "test-space");
    static const struct bound_pair_ops ops = {fake_pair_start, fake_pair_cancel};
    w->bp = bound_port_create(w->b, w->store, &w->st, NULL, &ops, fp);
    unsigned char part[PC_SHA256_LEN] = {7};
    w->view = bound_view_create(w->bp, NULL, part);
}

static int cmp_done;
static void on_cmp_done(void *arg)
{
    (void)arg;
    cmp_done++;
}

/*
 * The verdict of comparing a cached answer with a fresh one (both bodies of endpoint ep) on
 * w's port; a comparator by meaning that started answers cosine (NAN: none started).
 * "error" when it could not be compared.
 */
static const char *verdict_cos(struct port_world *w, struct fake_pair *fp, enum api_endpoint ep,
                               const char *cached, const char *fresh, double cosine)
{
    static char out[32];
    unsigned char exact[PC_SHA256_LEN] = {9};
    struct bound_decision d = {.verdict = BOUND_WITHHOLD, .threshold = 1};
    struct entry ec = json_entry(ep, cached), ef = json_entry(ep, fresh);
    struct bound_probe *p = bound_probe_create(w->view, &d, 0.97, &ec, "0123456789abcdef", exact);
    if (p == NULL)
        return "no probe";
    struct bound_cmp *cmp = NULL;
    int starts = fp != NULL ? fp->starts : 0;
    int rc = bound_compare(w->bp, p, &ef, on_cmp_done, NULL, &cmp);
    if (rc == 0 && fp != NULL && fp->starts > starts && fp->cb != NULL) {
        bound_cos_fn *cb = fp->cb;
        fp->cb = NULL;
        cb(fp->arg, cosine);
    } else if (rc == 0) {
        bound_compare_cancel(&cmp);
    }
    snprintf(out, sizeof(out), "%s",
             rc < 0                   ? "error"
             : bound_probe_verdict(p) ? bound_probe_verdict(p)
                                      : "none");
    bound_probe_unref(&p);
    return out;
}

static const char *verdict(struct port_world *w, enum api_endpoint ep, const char *cached,
                           const char *fresh)
{
    return verdict_cos(w, NULL, ep, cached, fresh, NAN);
}

#define CHAT_TEXT(t)                                                                \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":" t \
    "},\"finish_reason\":\"stop\"}]}"
#define CHAT_CALL(name, args)                                                                   \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"          \
    "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"" name "\"," \
    "\"arguments\":" args "}}]},\"finish_reason\":\"tool_calls\"}]}"

/*
 * The exact comparator: two answers of another form are different answers whatever their
 * words: a text reading like a tool call and the call, a refusal and the same words as
 * content, two choices and one holding both, choices in another order, a cut answer and a
 * complete one; tool calls' arguments are compared as the client runs them (case kept).
 * Each pair here was "agreed" before.
 */
static void test_compare_forms(void)
{
    struct port_world w;
    port_up(&w);
    /* The same answer, and the same call with other white space between its tokens. */
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"Paris.\""), CHAT_TEXT("\"paris\"")), "agreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("get", "\"{\\\"a\\\": 1}\""),
                        CHAT_CALL("get", "\"{\\\"a\\\":1}\"")),
                "agreed");
    /* A text that reads f({...}) against the tool call f with those arguments. */
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"get({\\\"a\\\":1})\""),
                        CHAT_CALL("get", "\"{\\\"a\\\":1}\"")),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("get", "\"{\\\"a\\\":1}\""),
                        CHAT_TEXT("\"get({\\\"a\\\":1})\"")),
                "disagreed");
    /* Arguments differing in case only: another file. */
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("open", "\"{\\\"path\\\":\\\"/Foo\\\"}\""),
                        CHAT_CALL("open", "\"{\\\"path\\\":\\\"/foo\\\"}\"")),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("Open", "\"{}\""), CHAT_CALL("open", "\"{}\"")),
                "disagreed");
    /* A refusal against the same words as an answer. */
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":null,\"refusal\":"
                        "\"I cannot help with that.\"},\"finish_reason\":\"stop\"}]}",
                        CHAT_TEXT("\"I cannot help with that.\"")),
                "disagreed");
    /* Two choices against one choice holding both lines; choices in another order. */
    const char *two = "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"yes\"},"
                      "\"finish_reason\":\"stop\"},{\"index\":1,\"message\":{\"content\":\"no\"},"
                      "\"finish_reason\":\"stop\"}]}";
    T_CHECK_STR(verdict(&w, API_CHAT, two, CHAT_TEXT("\"yes\\nno\"")), "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"yes\\nno\""), two), "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, two, two), "agreed");
    T_CHECK_STR(verdict(&w, API_CHAT, two,
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"yes no\"},"
                        "\"finish_reason\":\"stop\"},{\"index\":1,\"message\":{\"content\":\"\"},"
                        "\"finish_reason\":\"stop\"}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, two,
                        "{\"choices\":[{\"index\":1,\"message\":{\"content\":\"yes\"},"
                        "\"finish_reason\":\"stop\"},{\"index\":0,\"message\":{\"content\":\"no\"},"
                        "\"finish_reason\":\"stop\"}]}"),
                "disagreed");
    /* A word moved from one choice to the next. */
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"a b\"}},"
                        "{\"index\":1,\"message\":{\"content\":\"c\"}}]}",
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"a\"}},"
                        "{\"index\":1,\"message\":{\"content\":\"b c\"}}]}"),
                "disagreed");
    /* Cut by max_tokens against complete, the same words. */
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"The answer is\""),
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"The answer is\"},"
                        "\"finish_reason\":\"length\"}]}"),
                "disagreed");
    /* A custom tool call (no function member) and the legacy function_call are compared. */
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"tool_calls\":[{\"type\":"
                        "\"custom\",\"custom\":{\"name\":\"rm\",\"input\":\"/tmp/a\"}}]}}]}",
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"tool_calls\":[{\"type\":"
                        "\"custom\",\"custom\":{\"name\":\"rm\",\"input\":\"/\"}}]}}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"function_call\":{"
                        "\"name\":\"a\",\"arguments\":\"{}\"}}}]}",
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"function_call\":{"
                        "\"name\":\"b\",\"arguments\":\"{}\"}}}]}"),
                "disagreed");
    /* Calls in no shape the reader knows are compared as their JSON; reasoning is not. */
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"tool_calls\":{"
                        "\"name\":\"a\"}}}]}",
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"tool_calls\":{"
                        "\"name\":\"b\"}}}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"function_call\":"
                        "\"a()\"}}]}",
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"function_call\":"
                        "\"b()\"}}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"tool_calls\":[],"
                        "\"reasoning_content\":\"hmm\",\"reasoning_details\":[{\"t\":1}]}}]}",
                        "{\"choices\":[{\"message\":{\"content\":\"ok\",\"reasoning_content\":"
                        "\"well\",\"reasoning_details\":[{\"t\":2}]}}]}"),
                "agreed");
    /* Completions: the finish reason too. */
    T_CHECK_STR(
        verdict(&w, API_COMPLETIONS,
                "{\"choices\":[{\"index\":0,\"text\":\"42\",\"finish_reason\":\"stop\"}]}",
                "{\"choices\":[{\"index\":0,\"text\":\"42\",\"finish_reason\":\"length\"}]}"),
        "disagreed");
    /* Anthropic: a text block against a tool_use; the stop reason; thinking is not the answer;
     * a block of another type is compared as its JSON. */
    T_CHECK_STR(
        verdict(&w, API_MESSAGES,
                "{\"content\":[{\"type\":\"text\",\"text\":\"f({\\\"x\\\":2})\"}],"
                "\"stop_reason\":\"end_turn\"}",
                "{\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":"
                "{\"x\":2}}],\"stop_reason\":\"end_turn\"}"),
        "disagreed");
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":"
                        "\"end_turn\"}",
                        "{\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":"
                        "\"max_tokens\"}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\"},{\"type\":"
                        "\"text\",\"text\":\"Hi\"}],\"stop_reason\":\"end_turn\"}",
                        "{\"content\":[{\"type\":\"thinking\",\"thinking\":\"well\"},{\"type\":"
                        "\"text\",\"text\":\"hi\"}],\"stop_reason\":\"end_turn\"}"),
                "agreed");
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"server_tool_use\",\"name\":\"web_search\","
                        "\"input\":{\"q\":\"a\"}},{\"type\":\"text\",\"text\":\"Hi\"}]}",
                        "{\"content\":[{\"type\":\"server_tool_use\",\"name\":\"web_search\","
                        "\"input\":{\"q\":\"b\"}},{\"type\":\"text\",\"text\":\"Hi\"}]}"),
                "disagreed");
    /* Tool inputs whose numbers a double does not hold (two ids 1 apart at 10^19) are no
     * comparison when they look alike: read through cJSON they were the same number. */
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":12345678901234567891}}],\"stop_reason\":\"tool_use\"}",
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":12345678901234567890}}],\"stop_reason\":\"tool_use\"}"),
                "error");
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":123,\"x\":0.5}}],\"stop_reason\":\"tool_use\"}",
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":12345678901234567890}}],\"stop_reason\":\"tool_use\"}"),
                "disagreed"); /* different, however rounded */
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":123,\"x\":0.5}}],\"stop_reason\":\"tool_use\"}",
                        "{\"content\":[{\"type\":\"tool_use\",\"name\":\"del\",\"input\":"
                        "{\"id\":123, \"x\":0.5}}],\"stop_reason\":\"tool_use\"}"),
                "agreed");
    /* Only what the form holds counts: long numbers elsewhere (logprobs) or in OpenAI's
     * arguments (compared as written) leave the answers comparable. */
    T_CHECK_STR(verdict(&w, API_CHAT,
                        "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"ok\"},"
                        "\"logprobs\":{\"content\":[{\"logprob\":-0.31326165795326233,"
                        "\"n\":12345678901234567891}]},\"finish_reason\":\"stop\"}]}",
                        CHAT_TEXT("\"ok\"")),
                "agreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("del", "\"{\\\"id\\\":12345678901234567891}\""),
                        CHAT_CALL("del", "\"{\\\"id\\\":12345678901234567890}\"")),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_CALL("del", "\"{\\\"id\\\":12345678901234567891}\""),
                        CHAT_CALL("del", "\"{\\\"id\\\":12345678901234567891}\"")),
                "agreed");
    /* A member absent and the same member null are one (servers differ in what they send). */
    T_CHECK_STR(verdict(&w, API_MESSAGES,
                        "{\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":"
                        "\"end_turn\",\"stop_sequence\":null}",
                        "{\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],\"stop_reason\":"
                        "\"end_turn\"}"),
                "agreed");
    /* Responses: a message against a function call; incomplete against completed. */
    T_CHECK_STR(verdict(&w, API_RESPONSES,
                        "{\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"content\":"
                        "[{\"type\":\"output_text\",\"text\":\"f({})\"}]}]}",
                        "{\"status\":\"completed\",\"output\":[{\"type\":\"function_call\","
                        "\"name\":\"f\",\"arguments\":\"{}\"}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_RESPONSES,
                        "{\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"content\":"
                        "[{\"type\":\"output_text\",\"text\":\"ok\"}]}]}",
                        "{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":"
                        "\"max_output_tokens\"},\"output\":[{\"type\":\"message\",\"content\":"
                        "[{\"type\":\"output_text\",\"text\":\"ok\"}]}]}"),
                "disagreed");
    T_CHECK_STR(verdict(&w, API_RESPONSES,
                        "{\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"content\":"
                        "[{\"type\":\"refusal\",\"refusal\":\"no\"},{\"type\":\"output_text\","
                        "\"text\":\"ok\"}]}]}",
                        "{\"status\":\"completed\",\"output\":[{\"type\":\"message\",\"content\":"
                        "[{\"type\":\"output_text\",\"text\":\"no\"},{\"type\":\"output_text\","
                        "\"text\":\"ok\"}]}]}"),
                "disagreed");
    /* An answer holding \u0000 (cJSON would end its text there) is no comparison. */
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"a\\u0000b\""), CHAT_TEXT("\"a\\u0000c\"")),
                "no probe");
    T_CHECK_STR(verdict(&w, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"a\\u0000c\"")), "error");
    port_down(&w);
}

/* A chat answer of one choice whose text is n times c, then tail (JSON-escaped already). */
static char *chat_of(size_t n, char c, const char *tail)
{
    return long_answer(n, c, tail);
}

/*
 * The embedding comparator: an embedder's cosine that is no cosine (infinite, beyond 1) is no
 * agreement; texts longer than the embedder reads (it embeds their head and tail) are not
 * judged by it, nor are answers of several choices (a bag of words cannot tell which choice
 * said what): compared by their texts. Each was "agreed" before.
 */
static void test_compare_embedding(void)
{
    struct port_world w;
    struct fake_pair fp = {0};
    port_up_cmp(&w, "embedding", &fp);
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"b\""), 0.95),
                "agreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"b\""), 0.5),
                "disagreed");
    T_CHECK_INT(fp.starts, 2);
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"b\""), INFINITY),
                "none");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"b\""), 1.5),
                "none");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"a\""), CHAT_TEXT("\"b\""), NAN),
                "none");
    T_CHECK_INT((int64_t)w.st.v[STAT_semantic_bound_compare_errors], 3);
    /* Alike in their heads and tails, different in the middle, longer than the embedder reads. */
    struct pc_buf ca = PC_BUF_INIT, cb = PC_BUF_INIT;
    for (int i = 0; i < 1000; i++)
        pc_buf_append_str(&ca, "word ");
    pc_buf_append_str(&cb, ca.data);
    pc_buf_append_str(&ca, " yes ");
    pc_buf_append_str(&cb, " no ");
    for (int i = 0; i < 1000; i++) {
        pc_buf_append_str(&ca, "word ");
        pc_buf_append_str(&cb, "word ");
    }
    char *la = chat_of(0, 'x', pc_buf_cstr(&ca)), *lb = chat_of(0, 'x', pc_buf_cstr(&cb));
    int starts = fp.starts;
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, la, lb, 1.0), "error");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, la, la, 1.0), "agreed"); /* the same text */
    T_CHECK_INT(fp.starts, starts);
    /* Two choices swapped: the same words in one text. */
    const char *yn = "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"yes\"}},"
                     "{\"index\":1,\"message\":{\"content\":\"no\"}}]}";
    const char *ny = "{\"choices\":[{\"index\":0,\"message\":{\"content\":\"no\"}},"
                     "{\"index\":1,\"message\":{\"content\":\"yes\"}}]}";
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, yn, ny, 1.0), "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, yn, yn, 1.0), "agreed");
    /* A text against a tool call, whatever the embedder says. */
    T_CHECK_STR(
        verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"get({})\""), CHAT_CALL("get", "\"{}\""), 1.0),
        "disagreed");
    T_CHECK_INT(fp.starts, starts);
    /*
     * What an embedder cannot tell apart (the builtin one puts "returns 5" and "returns -5" at
     * 1.000, "2 million" and "3 million" at 0.91): a number, its sign, a negation, a symbol,
     * a date differing is a different answer, before any embedding.
     */
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"The function returns 5.\""),
                            CHAT_TEXT("\"The function returns -5.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Paris has 2 million people.\""),
                            CHAT_TEXT("\"Paris has 3 million people.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Take it with food.\""),
                            CHAT_TEXT("\"Do not take it with food.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"The meeting is on Monday.\""),
                            CHAT_TEXT("\"The meeting is on Tuesday.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Keep x > 5.\""),
                            CHAT_TEXT("\"Keep x < 5.\""), 1.0),
                "disagreed");
    /* Opposites in the same place: "first"/"second" (0.906), "all"/"some" (0.928), "into"/
     * "out of" (0.953), "won"/"lost" with the builtin embedder. */
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"The first one is correct.\""),
                            CHAT_TEXT("\"The second one is correct.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"All tests pass.\""),
                            CHAT_TEXT("\"Some tests pass.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Move the file into the folder.\""),
                            CHAT_TEXT("\"Move the file out of the folder.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"He won the match.\""),
                            CHAT_TEXT("\"He lost the match.\""), 1.0),
                "disagreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Sort in ascending order.\""),
                            CHAT_TEXT("\"Sort in descending order.\""), 1.0),
                "disagreed");
    T_CHECK_INT(fp.starts, starts);
    /* A rewording with the same facts is still the embedder's to judge. */
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT, CHAT_TEXT("\"Paris has 2 million people.\""),
                            CHAT_TEXT("\"About 2 million people live in Paris.\""), 0.95),
                "agreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT,
                            CHAT_TEXT("\"You should not mix bleach with ammonia because it makes "
                                      "toxic gas.\""),
                            CHAT_TEXT("\"Never mix bleach and ammonia: the combination produces a "
                                      "toxic gas.\""),
                            0.95),
                "agreed");
    T_CHECK_STR(verdict_cos(&w, &fp, API_CHAT,
                            CHAT_TEXT("\"To reset the router, hold the reset button for 10 "
                                      "seconds, then wait for it to restart.\""),
                            CHAT_TEXT("\"Hold the reset button for 10 seconds to reset your "
                                      "router; it will then restart.\""),
                            0.95),
                "agreed");
    T_CHECK_INT(fp.starts, starts + 3);
    free(la);
    free(lb);
    pc_buf_free(&ca);
    pc_buf_free(&cb);
    port_down(&w);
}

/*
 * Marks that could not even be asked for hold their entry back, also when the counts read
 * for an earlier candidate would allow it (they were taken as none: served).
 */
static void test_marks_unsent(void)
{
    struct port_world w;
    port_up(&w);
    unsigned char exact[PC_SHA256_LEN] = {9};
    T_CHECK_INT(bound_view_fetch(w.view, "0123456789abcdef", exact, NULL, NULL), 0);
    struct bound_decision d;
    bound_view_decide(w.view, 0.99, &d);
    T_CHECK_INT(d.verdict, BOUND_SKIP);
    port_down(&w);
}

static void test_answer_text(void)
{
    struct pc_buf out = PC_BUF_INIT;
    struct entry e = json_entry(API_CHAT, "{\"choices\":[{\"message\":{\"role\":\"assistant\","
                                          "\"content\":\"Paris.\"}}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "Paris.");
    pc_buf_reset(&out);
    e = json_entry(API_CHAT,
                   "{\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":[{"
                   "\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "get({\"a\":1})");
    pc_buf_reset(&out);
    e = json_entry(API_MESSAGES, "{\"content\":[{\"type\":\"text\",\"text\":\"Hi\"},{\"type\":"
                                 "\"tool_use\",\"name\":\"f\",\"input\":{\"x\":2}}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "Hi\nf({\"x\":2})");
    pc_buf_reset(&out);
    e = json_entry(API_RESPONSES, "{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":"
                                  "\"output_text\",\"text\":\"ok\"}]}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "ok");
    pc_buf_reset(&out);
    e = json_entry(API_COMPLETIONS, "{\"choices\":[{\"text\":\"42\"}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "42");
    pc_buf_reset(&out);
    /* A recorded stream is assembled first. */
    const char *sse = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{"
                      "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Par\"}}]}\n\n"
                      "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{"
                      "\"index\":0,\"delta\":{\"content\":\"is\"},\"finish_reason\":\"stop\"}]}"
                      "\n\ndata: [DONE]\n\n";
    e = (struct entry){.kind = ENTRY_SSE,
                       .endpoint = API_CHAT,
                       .status = 200,
                       .body = sse,
                       .body_len = strlen(sse)};
    T_CHECK_INT(bound_answer_text(&e, &out), 0);
    T_CHECK_STR(pc_buf_cstr(&out), "Paris");
    pc_buf_reset(&out);
    e = json_entry(API_EMBEDDINGS, "{\"data\":[{\"embedding\":[0.1]}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), -1);
    e = json_entry(API_CHAT, "{not json");
    T_CHECK_INT(bound_answer_text(&e, &out), -1);
    /*
     * What cJSON cuts a string at (a raw NUL, "\u00zz") is no text to compare (an entry read
     * back from Redis): "yes" was compared, and agreed with a fresh "yes".
     */
    static const char raw_nul[] = "{\"choices\":[{\"message\":{\"content\":\"yes\0 or no\"}}]}";
    e = json_entry(API_CHAT, raw_nul);
    e.body_len = sizeof(raw_nul) - 1;
    T_CHECK_INT(bound_answer_text(&e, &out), -1);
    e = json_entry(API_CHAT, "{\"choices\":[{\"message\":{\"content\":\"yes\\u00zz or no\"}}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), -1);
    e = json_entry(API_CHAT, "{\"choices\":[{\"message\":{\"content\":\"yes\\u0000 or no\"}}]}");
    T_CHECK_INT(bound_answer_text(&e, &out), -1);
    pc_buf_free(&out);
}

static void test_normalise(void)
{
    struct pc_buf out = PC_BUF_INIT;
    bound_normalise("  Positive.\n", &out);
    T_CHECK_STR(pc_buf_cstr(&out), "positive");
    pc_buf_reset(&out);
    bound_normalise("\"The  answer\tis\n 42!\"", &out);
    T_CHECK_STR(pc_buf_cstr(&out), "the answer is 42");
    pc_buf_reset(&out);
    bound_normalise("...", &out);
    T_CHECK_STR(pc_buf_cstr(&out), "");
    pc_buf_reset(&out);
    bound_normalise("( Yes ) ", &out);
    T_CHECK_STR(pc_buf_cstr(&out), "yes");
    pc_buf_free(&out);
    /* An empty answer into a buffer that holds nothing yet (no memory at all). */
    struct pc_buf empty = PC_BUF_INIT;
    bound_normalise("", &empty);
    T_CHECK_STR(pc_buf_cstr(&empty), "");
    pc_buf_free(&empty);
    bound_normalise(" \n\t", &empty);
    T_CHECK_STR(pc_buf_cstr(&empty), "");
    pc_buf_free(&empty);
}

static void test_same_text(void)
{
    T_CHECK(bound_same_text("Positive.", "  positive"));
    T_CHECK(bound_same_text("The answer is 42!", "the answer is 42"));
    T_CHECK(!bound_same_text("yes", "no"));
    T_CHECK(!bound_same_text("...", "!!!")); /* only punctuation: the texts decide */
    T_CHECK(bound_same_text("...", " ... "));
    /* A leading point or comma before a digit is the number's: 0.5 is not 5. */
    T_CHECK(!bound_same_text(".5", "5"));
    T_CHECK(!bound_same_text(",5", "5"));
    T_CHECK(bound_same_text("0.5.", "0.5"));
    T_CHECK(!bound_same_text("...", "positive"));
    /* Blanks between the outer punctuation and the words go with it (a space was left). */
    T_CHECK(bound_same_text("( Yes )", "yes"));
    T_CHECK(bound_same_text("Oui !", "oui"));
    T_CHECK(bound_same_text("\" 42 \"", "42"));
    T_CHECK(!bound_same_text("( .5 )", "5"));
}

int main(void)
{
    T_RUN(test_beta);
    T_RUN(test_clopper_pearson);
    T_RUN(test_buckets);
    T_RUN(test_certify);
    T_RUN(test_strata);
    T_RUN(test_decide);
    T_RUN(test_explore_p);
    T_RUN(test_encoding);
    T_RUN(test_marks);
    T_RUN(test_count_max_bound);
    T_RUN(test_fast_matches_reference);
    T_RUN(test_compare_long);
    T_RUN(test_compare_forms);
    T_RUN(test_compare_embedding);
    T_RUN(test_marks_unsent);
    T_RUN(test_argv);
    T_RUN(test_answer_text);
    T_RUN(test_normalise);
    T_RUN(test_same_text);
    T_DONE();
}
