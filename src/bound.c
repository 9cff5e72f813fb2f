/*
 * bound.c - the semantic cache's error bound (see pc_bound.h). Owns the
 * process's struct bound (settings, the last tenant's prior any worker read,
 * for /stats), each worker's struct bound_port (its random draws and the
 * comparators' clients), each lookup's struct bound_view (the counts and
 * marks read for it) and the probes and comparisons that follow a
 * candidate that was not served.
 *
 *   lookup ─▶ candidate passed the guards
 *               │ bound_view_fetch: GET marks (entry's tag), partition and tenant's prior
 *               ▼
 *             bound_view_decide ── SERVE ─▶ hit
 *               │          └────── SKIP ──▶ next candidate (entry found wrong here before)
 *               ▼ EXPLORE (sampled) / WITHHOLD (not allowed yet)
 *             bound_probe_create (the candidate's answer text) ─▶ miss: upstream
 *               ▼
 *   fresh whole answer (stored or not) ─▶ bound_compare (exact | embedding | model)
 *               ▼                  (none came: the probe's last unref counts it uncompared)
 *             record: BITFIELD partition counts, BITFIELD the tenant's prior,
 *                     EVAL SETBIT entry marks + PEXPIRE to the entry's PTTL (when
 *                     wrong); probe verdict for the header
 *
 * Nothing here blocks; Redis commands are the worker's store (pc_store.h),
 * writes fire and forget. A view or comparison is cancelled by its owner.
 */
#include "pc_bound.h"
#include "pc_canon.h"
#include "pc_conf.h"
#include "pc_dialect.h"
#include "pc_embed.h"
#include "pc_guard.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_verify.h"

#include <cjson/cJSON.h>

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define BOUND_MAGIC_OBJ 0x424e4450u /* "BNDP" */
#define PORT_MAGIC      0x424e5054u /* "BNPT" */
#define VIEW_MAGIC      0x424e5657u /* "BNVW" */
#define PROBE_MAGIC     0x424e5052u /* "BNPR" */
#define CMP_MAGIC       0x424e434du /* "BNCM" */

/*
 * Exploration: the full rate while the allowing region holds no more than the
 * observations the bound needs at all, then the rate times need / n_eff (so
 * the comparisons keep growing, as the square root of the candidates rather
 * than in proportion), never under this fraction of the rate (drift is still
 * seen): little known, more explored.
 */
#define BOUND_EXPLORE_FLOOR 0.1

/*
 * The guards the embedding comparator applies to two answers first: a number or its sign, a
 * negation, a symbol or a date differing, or an opposite in the same place (ascending /
 * descending, won / lost, unsafe, into / out of, first / second, all / some), makes another
 * answer whatever the cosine (the builtin embedder puts "returns 5" and "returns -5" at 1.000,
 * "the first one" and "the second one is correct" at 0.906). The others judge wording, which
 * a right answer may change. Two 8 KiB answers take about 1.3 ms.
 */
#define BOUND_ANSWER_GUARDS                                                               \
    (GUARD_MASK(GUARD_NUMBERS) | GUARD_MASK(GUARD_NEGATION) | GUARD_MASK(GUARD_SYMBOLS) | \
     GUARD_MASK(GUARD_DATES) | GUARD_MASK(GUARD_ANTONYMS) | GUARD_MASK(GUARD_WORDNET) |   \
     GUARD_MASK(GUARD_AFFIXES) | GUARD_MASK(GUARD_PARTICLES) | GUARD_MASK(GUARD_RANK) |   \
     GUARD_MASK(GUARD_QUANTITY))

/* ---- figures ----------------------------------------------------------------- */

int bound_bucket(double sim)
{
    if (!(sim > BOUND_SIM_MIN)) /* NaN too */
        return 0;
    int b = (int)floor((sim - BOUND_SIM_MIN) / BOUND_BUCKET_WIDTH + 1e-9);
    return b >= BOUND_BUCKETS ? BOUND_BUCKETS - 1 : b;
}

double bound_bucket_floor(int b)
{
    return BOUND_SIM_MIN + b * BOUND_BUCKET_WIDTH;
}

/*
 * The continued fraction of I_x(a, b) (the classic expansion with terms
 * d_2m = m(b-m)x / ((a+2m-1)(a+2m)), d_2m+1 = -(a+m)(a+b+m)x / ((a+2m)(a+2m+1))),
 * evaluated by the modified Lentz method. Converges fast for x < (a+1)/(a+b+2).
 */
static double beta_fraction(double a, double b, double x)
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

/*
 * I_x(a, b) given lg = lgamma(a + b) - lgamma(a) - lgamma(b), which a bisection over x computes
 * once (the same value, in the same order: every result is bit for bit bound_beta_inc's).
 */
static double beta_inc_lg(double a, double b, double lg, double x)
{
    if (x <= 0)
        return 0;
    if (x >= 1)
        return 1;
    double ln_front = lg + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0))
        return exp(ln_front) * beta_fraction(a, b, x) / a;
    return 1.0 - exp(ln_front) * beta_fraction(b, a, 1.0 - x) / b;
}

static double beta_lg(double a, double b)
{
    return lgamma(a + b) - lgamma(a) - lgamma(b);
}

double bound_beta_inc(double a, double b, double x)
{
    if (x <= 0 || x >= 1)
        return x <= 0 ? 0 : 1;
    return beta_inc_lg(a, b, beta_lg(a, b), x);
}

/*
 * The p in [0, 1] with I_p(a, b) = target (I is increasing in p): bisection,
 * 80 halvings of [0, 1] at most. With against >= 0 it answers only whether
 * that p is at most `against`, and stops as soon as that is known: the
 * result lies in [lo, hi] at every step (the midpoint of two doubles rounds
 * between them, and the interval only shrinks), so once hi <= against it is
 * at most, once lo > against it is above. Either way it stops when the
 * midpoint is lo or hi (adjacent doubles): every later step would evaluate
 * that same point again and keep lo and hi as they are. The answer is the
 * one the whole bisection gives, not an approximation of it.
 */
static double beta_bisect(double a, double b, double target, double against)
{
    double lg = beta_lg(a, b);
    double lo = 0, hi = 1;
    for (int i = 0; i < 80; i++) {
        if (against >= 0 && (hi <= against || lo > against))
            break;
        double mid = (lo + hi) / 2;
        if (mid == lo || mid == hi)
            break;
        if (beta_inc_lg(a, b, lg, mid) < target)
            lo = mid;
        else
            hi = mid;
    }
    if (against >= 0)
        return hi <= against ? 0 : lo > against ? 1 : (lo + hi) / 2 <= against ? 0 : 1;
    return (lo + hi) / 2;
}

static double beta_quantile(double a, double b, double target)
{
    return beta_bisect(a, b, target, -1);
}

double bound_upper(double x, double n, double conf)
{
    if (n <= 0 || x >= n)
        return 1;
    return beta_quantile(PC_MAX(x, 0.0) + 1.0, n - PC_MAX(x, 0.0), conf);
}

double bound_lower(double x, double n, double conf)
{
    if (x <= 0 || n <= 0)
        return 0;
    return beta_quantile(x, PC_MAX(n - x, 0.0) + 1.0, 1.0 - conf);
}

/* bound_upper(x, n, conf) <= delta, computed only as far as that needs. */
static bool upper_at_most(double x, double n, double conf, double delta)
{
    if (n <= 0 || x >= n)
        return 1 <= delta;
    if (!(delta >= 0))
        return bound_upper(x, n, conf) <= delta;
    return beta_bisect(PC_MAX(x, 0.0) + 1.0, n - PC_MAX(x, 0.0), conf, delta) == 0;
}

/* bound_lower(x, n, conf) > delta, the same way. */
static bool lower_above(double x, double n, double conf, double delta)
{
    if (x <= 0 || n <= 0)
        return 0 > delta;
    if (!(delta >= 0))
        return bound_lower(x, n, conf) > delta;
    return beta_bisect(x, PC_MAX(n - x, 0.0) + 1.0, 1.0 - conf, delta) == 1;
}

long bound_min_n(double delta, double conf)
{
    if (delta <= 0 || delta >= 1)
        return delta >= 1 ? 1 : LONG_MAX;
    return (long)ceil(log(1.0 - conf) / log1p(-delta));
}

void bound_counts_seen(struct bound_counts *c, double sim)
{
    c->seen[bound_bucket(sim)] += 1;
}

void bound_counts_compared(struct bound_counts *c, double sim, bool wrong)
{
    int b = bound_bucket(sim);
    c->compared[b] += 1;
    c->wrong[b] += wrong ? 1 : 0;
}

void bound_counts_add(struct bound_counts *c, double sim, bool wrong)
{
    bound_counts_seen(c, sim);
    bound_counts_compared(c, sim, wrong);
}

/* Running sums over buckets: candidates, their estimated errors, and sum N^2 / n. */
struct region_sums {
    double n, e, q;
};

static void sums_add(struct region_sums *s, const struct bound_counts *c, int b)
{
    double n = c->compared[b];
    if (n <= 0)
        return; /* nothing compared there: no estimate, and never served */
    /* A write of "seen" may have failed where the comparison's did not: at least n. */
    double big_n = PC_MAX(c->seen[b], n);
    s->n += big_n;
    s->e += big_n * c->wrong[b] / n;
    s->q += big_n * big_n / n;
}

static void region_of(const struct region_sums *s, struct bound_region *out)
{
    *out = (struct bound_region){0};
    if (s->n <= 0 || s->q <= 0)
        return;
    out->rate = PC_MIN(s->e / s->n, 1.0);
    out->n_eff = s->n * s->n / s->q;
    out->x_eff = out->rate * out->n_eff;
}

void bound_region_at(const struct bound_counts *c, int b, struct bound_region *out)
{
    struct region_sums s = {0};
    for (int i = BOUND_BUCKETS - 1; i >= PC_MAX(b, 0); i--)
        sums_add(&s, c, i);
    region_of(&s, out);
}

/*
 * Fixed-sequence testing from the top: thresholds whose region is too small
 * to pass even without errors are skipped (that depends on how many
 * comparisons there are, not on their outcomes); from the first one that
 * can pass, each is tested in turn and the scan stops at the first failure,
 * so the confidence holds without a correction for the many thresholds.
 * Only a similarity something was compared at can become the threshold.
 * Each test asks only whether the bound is at most delta (upper_at_most);
 * the certified threshold's own bound is computed once at the end, when
 * want_upper (a decision does not need it: NAN then).
 */
static void certify(const struct bound_counts *c, double delta, bool want_upper,
                    struct bound_cert *out)
{
    *out = (struct bound_cert){.bucket = BOUND_BUCKETS, .threshold = 1.0, .upper = 1.0};
    double need = (double)bound_min_n(delta, BOUND_CONFIDENCE);
    struct region_sums s = {0};
    /* Not bucket 0: it holds every similarity below BOUND_SIM_MIN, down to -1 (a threshold may
     * go to 0), so what was compared there says nothing of the rest of it. */
    for (int b = BOUND_BUCKETS - 1; b >= 1; b--) {
        if (c->compared[b] <= 0)
            continue; /* no evidence at this similarity: neither tested nor served */
        sums_add(&s, c, b);
        struct bound_region r;
        region_of(&s, &r);
        if (r.n_eff < need) {
            if (out->certified)
                break; /* unequal shares can shrink the effective size: stop there */
            continue;
        }
        if (!upper_at_most(r.x_eff, r.n_eff, BOUND_CONFIDENCE, delta))
            break;
        *out = (struct bound_cert){
            .certified = true,
            .bucket = b,
            .threshold = bound_bucket_floor(b),
            .region = r,
            .upper = NAN,
        };
    }
    if (out->certified && want_upper)
        out->upper = bound_upper(out->region.x_eff, out->region.n_eff, BOUND_CONFIDENCE);
}

void bound_certify(const struct bound_counts *c, double delta, struct bound_cert *out)
{
    certify(c, delta, true, out);
}

/* Whether the partition's own observations at or above bucket b show an error above delta. */
static bool partition_vetoes(const struct bound_counts *part, int b, double delta)
{
    struct bound_region r;
    bound_region_at(part, b, &r);
    return r.n_eff > 0 && lower_above(r.x_eff, r.n_eff, BOUND_CONFIDENCE, delta);
}

void bound_prepare(struct bound_prepared *p)
{
    p->part_done = p->glob_done = false;
    memset(p->veto, -1, sizeof(p->veto));
}

static const struct bound_cert *prepared_cert(const struct bound_counts *c, double delta,
                                              struct bound_cert *cert, bool *done)
{
    if (!*done) {
        certify(c, delta, false, cert);
        *done = true;
    }
    return cert;
}

/* Which counts allow sim, if any: the partition's once they certify, else the global prior. */
static enum bound_source allowing_source(const struct bound_inputs *in, struct bound_prepared *p,
                                         int b, const struct bound_cert **cert)
{
    /* Never where the counts compared nothing at sim's bucket: no evidence there. */
    if (in->partition != NULL) {
        *cert = prepared_cert(in->partition, in->delta, &p->part, &p->part_done);
        if ((*cert)->certified)
            return b >= (*cert)->bucket && in->partition->compared[b] > 0 ? BOUND_SRC_PARTITION
                                                                          : BOUND_SRC_NONE;
    }
    if (in->global == NULL)
        return BOUND_SRC_NONE;
    *cert = prepared_cert(in->global, in->delta, &p->glob, &p->glob_done);
    if (!(*cert)->certified || b < (*cert)->bucket || in->global->compared[b] <= 0)
        return BOUND_SRC_NONE;
    if (in->partition != NULL) {
        if (p->veto[b] < 0)
            p->veto[b] = partition_vetoes(in->partition, b, in->delta) ? 1 : 0;
        if (p->veto[b] == 1)
            return BOUND_SRC_NONE;
    }
    return BOUND_SRC_GLOBAL;
}

double bound_explore_p(double rate, double n_eff, double delta)
{
    double need = (double)bound_min_n(delta, BOUND_CONFIDENCE);
    if (!(rate > 0))
        return 0;
    if (rate >= 1 || !(n_eff > need)) /* 1: every candidate, however much is known (an audit) */
        return rate;
    return rate * PC_MAX(need / n_eff, BOUND_EXPLORE_FLOOR);
}

void bound_decide_prepared(const struct bound_inputs *in, struct bound_prepared *p, double sim,
                           double u, struct bound_decision *out)
{
    int b = bound_bucket(sim);
    *out = (struct bound_decision){.verdict = BOUND_WITHHOLD, .threshold = 1.0};
    if (in->entry_floor >= 0 && b <= in->entry_floor) {
        out->verdict = BOUND_SKIP;
        return;
    }
    const struct bound_cert *cert = NULL;
    out->source = allowing_source(in, p, b, &cert);
    if (out->source == BOUND_SRC_NONE)
        return; /* compared for free */
    out->threshold = cert->threshold;
    double pe = bound_explore_p(in->explore_rate, cert->region.n_eff, in->delta);
    if (pe > 0 && u < pe) {
        out->verdict = BOUND_EXPLORE;
        return;
    }
    out->verdict = BOUND_SERVE;
}

void bound_decide(const struct bound_inputs *in, double sim, double u, struct bound_decision *out)
{
    struct bound_prepared p;
    bound_prepare(&p);
    bound_decide_prepared(in, &p, sim, u, out);
}

/* ---- Redis encoding ----------------------------------------------------------- */

void bound_entry_key(const char *tenant_id, const unsigned char exact[PC_SHA256_LEN],
                     char out[BOUND_KEY_MAX])
{
    char hex[2 * PC_SHA256_LEN + 1];
    pc_hex(exact, PC_SHA256_LEN, hex);
    snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "o:{%.*s:%s}", TENANT_ID_LEN, tenant_id, hex);
}

void bound_entry_pattern(const char *tenant_id, char out[BOUND_KEY_MAX])
{
    if (tenant_id == NULL)
        snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "o:*");
    else
        snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "o:{%.*s:*", TENANT_ID_LEN, tenant_id);
}

/* 32 hex characters of SHA-256(kind, space, data): an id that names no input. */
static void key_id(const char *kind, const char *space, const unsigned char *data, size_t n,
                   char out[33])
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "%s|%s|", kind, space);
    if (n > 0)
        pc_buf_append(&b, data, n);
    unsigned char d[PC_SHA256_LEN];
    pc_sha256(b.data, b.len, d);
    pc_buf_free(&b);
    pc_hex(d, 16, out);
}

void bound_partition_key(const char *space, const unsigned char partition[PC_SHA256_LEN],
                         char out[BOUND_KEY_MAX])
{
    char id[33];
    key_id("partition", space, partition, PC_SHA256_LEN, id);
    snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "bp:{%s}", id);
}

void bound_global_key(const char *space, char out[BOUND_KEY_MAX])
{
    char id[33];
    key_id("global", space, NULL, 0, id);
    snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "bg:{%s}", id);
}

void bound_prior_key(const char *space, const char *tenant_id, const char *anon_id,
                     char out[BOUND_KEY_MAX])
{
    if (tenant_id == NULL || (anon_id != NULL && strncmp(tenant_id, anon_id, TENANT_ID_LEN) == 0)) {
        bound_global_key(space, out); /* the anonymous traffic keeps its counts */
        return;
    }
    char id[33];
    key_id("global", space, (const unsigned char *)tenant_id, strnlen(tenant_id, TENANT_ID_LEN),
           id);
    snprintf(out, BOUND_KEY_MAX, PC_KEY_PREFIX "bg:{%s}", id);
}

static void argv_push(struct bound_argv *a, const char *s, size_t n)
{
    a->argv[a->argc] = s;
    a->lens[a->argc] = n;
    a->argc++;
}

static void argv_str(struct bound_argv *a, const char *s)
{
    argv_push(a, s, strlen(s));
}

static void argv_num(struct bound_argv *a, int slot, long long v)
{
    snprintf(a->num[slot], sizeof(a->num[slot]), "%lld", v);
    argv_str(a, a->num[slot]);
}

/* BITFIELD key SET i64 #0 MAGIC OVERFLOW SAT: the start of every write of counts. */
static void argv_counts_head(struct bound_argv *a, const char *key)
{
    a->argc = 0;
    snprintf(a->key, sizeof(a->key), "%s", key);
    argv_str(a, "BITFIELD");
    argv_str(a, a->key);
    argv_str(a, "SET");
    argv_str(a, "i64");
    argv_str(a, "#0");
    argv_num(a, 0, (long long)BOUND_MAGIC);
    argv_str(a, "OVERFLOW");
    argv_str(a, "SAT");
}

/* INCRBY i64 #word by: word k of the value ("#k" counts in the type's width). */
static void argv_incr(struct bound_argv *a, int slot, int word, long long by)
{
    snprintf(a->num[slot], sizeof(a->num[slot]), "#%d", word);
    argv_str(a, "INCRBY");
    argv_str(a, "i64");
    argv_str(a, a->num[slot]);
    argv_num(a, slot + 1, by);
}

void bound_argv_seen(struct bound_argv *a, const char *key, double sim)
{
    argv_counts_head(a, key);
    argv_incr(a, 1, 1 + 3 * bound_bucket(sim), 1);
}

void bound_argv_compared(struct bound_argv *a, const char *key, double sim, bool wrong)
{
    argv_counts_head(a, key);
    int b = bound_bucket(sim);
    argv_incr(a, 1, 2 + 3 * b, 1);
    argv_incr(a, 3, 3 + 3 * b, wrong ? 1 : 0);
}

/*
 * KEYS: the entry, its marks (one hash tag); ARGV: the bucket. The mark takes the entry's
 * life as Redis has it now, whatever it was when the candidate was read (a refresh may have
 * written it over since with another TTL): none for an entry gone, none of its own for one
 * without a TTL. Returns 1 if marked.
 */
static const char mark_script[] =
    "local ttl = redis.call('PTTL', KEYS[1])\n"
    "if ttl == -2 then return 0 end\n"
    "redis.call('SETBIT', KEYS[2], ARGV[1], 1)\n"
    "if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) else redis.call('PERSIST', KEYS[2]) end\n"
    "return 1\n";

void bound_argv_mark(struct bound_argv *a, const char *entry_key, const char *marks_key, double sim)
{
    a->argc = 0;
    snprintf(a->key, sizeof(a->key), "%s", entry_key);
    snprintf(a->key2, sizeof(a->key2), "%s", marks_key);
    argv_str(a, "EVAL");
    argv_push(a, mark_script, sizeof(mark_script) - 1);
    argv_str(a, "2");
    argv_str(a, a->key);
    argv_str(a, a->key2);
    argv_num(a, 0, bound_bucket(sim));
}

void bound_argv_expire(struct bound_argv *a, const char *key, int64_t ms, bool at)
{
    a->argc = 0;
    snprintf(a->key, sizeof(a->key), "%s", key);
    argv_str(a, at ? "PEXPIREAT" : "PEXPIRE");
    argv_str(a, a->key);
    argv_num(a, 0, (long long)PC_MAX(ms, (int64_t)1));
}

static void put_be64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--, u >>= 8)
        p[i] = (unsigned char)(u & 0xff);
}

static int64_t get_be64(const unsigned char *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | p[i];
    return (int64_t)u;
}

void bound_counts_encode(const struct bound_counts *c, struct pc_buf *out)
{
    unsigned char word[8];
    put_be64(word, BOUND_MAGIC);
    pc_buf_append(out, word, 8);
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        const double v[3] = {c->seen[b], c->compared[b], c->wrong[b]};
        for (int i = 0; i < 3; i++) {
            put_be64(word, llround(v[i]));
            pc_buf_append(out, word, 8);
        }
    }
}

/*
 * One bucket's counts, in range: none negative or above BOUND_COUNT_MAX, no
 * more errors than comparisons (both are written by one command). Seen may
 * lag compared (a write that failed), so it is not held to them.
 */
static bool bucket_valid(int64_t seen, int64_t compared, int64_t wrong)
{
    return seen >= 0 && compared >= 0 && wrong >= 0 && seen <= BOUND_COUNT_MAX &&
           compared <= BOUND_COUNT_MAX && wrong <= compared;
}

int bound_counts_decode(const char *buf, size_t len, struct bound_counts *c)
{
    memset(c, 0, sizeof(*c));
    const unsigned char *p = (const unsigned char *)buf;
    /* BITFIELD writes grow the value only as far as the highest word written. */
    if (len < 8 || len > BOUND_COUNTS_BYTES || len % 8 != 0 || get_be64(p) != BOUND_MAGIC)
        return -1;
    int64_t words[BOUND_COUNTS_BYTES / 8] = {0};
    for (size_t i = 1; i < len / 8; i++)
        words[i] = get_be64(p + 8 * i);
    for (int b = 0; b < BOUND_BUCKETS; b++) {
        int64_t seen = words[1 + 3 * b], compared = words[2 + 3 * b], wrong = words[3 + 3 * b];
        if (!bucket_valid(seen, compared, wrong)) {
            memset(c, 0, sizeof(*c));
            return -1;
        }
        c->seen[b] = (double)seen;
        c->compared[b] = (double)compared;
        c->wrong[b] = (double)wrong;
    }
    return 0;
}

int bound_marks_decode(const char *buf, size_t len, int *floor_out)
{
    *floor_out = -1;
    if (len > BOUND_MARKS_BYTES)
        return -1;
    /* SETBIT numbers bits from the most significant bit of byte 0. */
    for (int b = (int)(len * 8) - 1; b >= 0; b--)
        if (((unsigned char)buf[b / 8] >> (7 - b % 8)) & 1) {
            if (b >= BOUND_BUCKETS)
                return -1;
            *floor_out = b;
            return 0;
        }
    return 0;
}

/* ---- answers ------------------------------------------------------------------- */

/*
 * Reading an answer into a struct bound_answer. Each piece of text (a content string or text
 * part, a refusal, an Anthropic text block, an output_text part) goes three ways: its kind
 * into the form, its text into the text (one piece a line), and its normalised text into the
 * exact comparator's key, piece by piece: a word moved from one piece to the next (one choice
 * to another, a text block to the next) is another answer.
 */

/*
 * Whether v holds a number a double does not hold exactly as an integer (2^53 and beyond: two
 * ids 1 apart at 10^19 read the same through cJSON).
 */
static bool json_rounded(const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return !(fabs(v->valuedouble) < 9007199254740992.0);
    const cJSON *c, *kids = cJSON_IsArray(v) || cJSON_IsObject(v) ? v : NULL;
    cJSON_ArrayForEach(c, kids)
    {
        if (json_rounded(c))
            return true;
    }
    return false;
}

/* JSON of a value as the form holds it; "-" for none (absent and null are one). */
static void form_json(struct pc_buf *form, const cJSON *v)
{
    if (v == NULL || cJSON_IsNull(v)) {
        pc_buf_append_char(form, '-');
        return;
    }
    char *s = cJSON_PrintUnformatted(v);
    pc_buf_append_str(form, s != NULL ? s : "?");
    cJSON_free(s);
}

/* The same into out for the answer a, which takes note of a number rounded. */
static void form_value(struct bound_answer *a, struct pc_buf *out, const cJSON *v)
{
    form_json(out, v);
    a->rounded = a->rounded || json_rounded(v);
}

/* One text piece's normalised form in the key (bound_same_text's rule, one piece at a time). */
static void key_piece(struct pc_buf *key, const char *s)
{
    struct pc_buf n = PC_BUF_INIT;
    bound_normalise(s, &n);
    char tag = 'N';
    if (n.len == 0) { /* punctuation only: the characters themselves, white space aside */
        tag = 'R';
        for (const char *p = s; *p; p++)
            if (!isspace((unsigned char)*p))
                pc_buf_append_char(&n, *p);
    }
    pc_buf_printf(key, "%c%zu:", tag, n.len);
    if (n.len > 0)
        pc_buf_append(key, n.data, n.len);
    pc_buf_append_char(key, '\n');
    pc_buf_free(&n);
}

/* A piece of text of a kind ("content", "refusal", ...); an empty string is no piece. */
static void piece(struct bound_answer *a, const char *kind, const char *s)
{
    if (s == NULL || *s == '\0')
        return;
    pc_buf_printf(&a->form, "%s\n", kind);
    pc_buf_append_str(&a->text, s);
    pc_buf_append_char(&a->text, '\n');
    key_piece(&a->key, s);
}

/* v if it is an array (cJSON_ArrayForEach walks an object's members too), else NULL. */
static const cJSON *array_of(const cJSON *v)
{
    return cJSON_IsArray(v) ? v : NULL;
}

/* Whether v says nothing: null, "", [] or {}. */
static bool json_empty(const cJSON *v)
{
    return v == NULL || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == '\0') ||
           ((cJSON_IsArray(v) || cJSON_IsObject(v)) && v->child == NULL);
}

/* Something the comparators cannot read as text: compared as its JSON, in the form only. */
static void opaque(struct bound_answer *a, const char *what, const cJSON *v)
{
    pc_buf_printf(&a->form, "%s ", what);
    form_value(a, &a->form, v);
    pc_buf_append_char(&a->form, '\n');
}

/*
 * A string member, or the text parts of an array of content parts (a part of another kind is
 * compared as its JSON).
 */
static void content(struct bound_answer *a, const char *kind, const cJSON *c)
{
    if (cJSON_IsString(c)) {
        piece(a, kind, c->valuestring);
        return;
    }
    const cJSON *part, *parts = array_of(c);
    cJSON_ArrayForEach(part, parts)
    {
        const cJSON *text = api_member(part, "text");
        const char *type = cJSON_GetStringValue(api_member(part, "type"));
        if (cJSON_IsString(text) &&
            (type == NULL || strcmp(type, "text") == 0 || strcmp(type, "output_text") == 0))
            piece(a, kind, text->valuestring);
        else if (type != NULL && strcmp(type, "refusal") == 0 &&
                 cJSON_IsString(api_member(part, "refusal")))
            piece(a, "refusal", api_member(part, "refusal")->valuestring);
        else
            opaque(a, "part", part);
    }
    if (c != NULL && !cJSON_IsString(c) && !cJSON_IsArray(c) && !cJSON_IsNull(c))
        opaque(a, kind, c);
}

/* JSON text without the white space between its tokens (it must parse). */
static void minify(struct pc_buf *out, const char *s)
{
    bool in_str = false;
    for (const char *p = s; *p; p++) {
        if (in_str) {
            pc_buf_append_char(out, *p);
            if (*p == '\\' && p[1] != '\0')
                pc_buf_append_char(out, *++p);
            else if (*p == '"')
                in_str = false;
        } else if (*p == '"') {
            in_str = true;
            pc_buf_append_char(out, *p);
        } else if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            pc_buf_append_char(out, *p);
        }
    }
}

/*
 * A tool call: "name(arguments)" in the text, and in the form its name and arguments exactly
 * (case, numbers, paths: what the client runs): arguments are a JSON string (OpenAI, compared
 * without the white space between tokens when it parses as JSON, else as it is) or an object.
 */
static void call(struct bound_answer *a, const char *kind, const cJSON *name, const cJSON *args)
{
    struct pc_buf arg = PC_BUF_INIT;
    if (cJSON_IsString(args)) {
        cJSON *parsed = cJSON_Parse(args->valuestring);
        if (parsed != NULL) {
            pc_buf_append_char(&arg, '=');
            minify(&arg, args->valuestring);
        } else {
            pc_buf_append_char(&arg, '~');
            pc_buf_append_str(&arg, args->valuestring);
        }
        cJSON_Delete(parsed);
    } else {
        pc_buf_append_char(&arg, '=');
        form_value(a, &arg, args);
    }
    pc_buf_printf(&a->form, "%s ", kind);
    form_value(a, &a->form, name);
    pc_buf_append_char(&a->form, ' ');
    pc_buf_append(&a->form, arg.data, arg.len);
    pc_buf_append_char(&a->form, '\n');
    pc_buf_append_str(&a->text, cJSON_IsString(name) ? name->valuestring : "?");
    pc_buf_append_char(&a->text, '(');
    if (cJSON_IsString(args))
        pc_buf_append_str(&a->text, args->valuestring);
    else if (args != NULL)
        form_json(&a->text, args);
    pc_buf_append_str(&a->text, ")\n");
    pc_buf_free(&arg);
}

/* The last member of obj named c->string is c (api_member's rule for a duplicated key). */
static bool member_counts(const cJSON *obj, const cJSON *c)
{
    return c->string != NULL && api_member(obj, c->string) == c;
}

static void chat_message(struct bound_answer *a, const cJSON *msg)
{
    content(a, "content", api_member(msg, "content"));
    content(a, "refusal", api_member(msg, "refusal"));
    const cJSON *tc, *calls = array_of(api_member(msg, "tool_calls"));
    cJSON_ArrayForEach(tc, calls)
    {
        const cJSON *fn = api_member(tc, "function");
        if (cJSON_IsObject(fn))
            call(a, "call", api_member(fn, "name"), api_member(fn, "arguments"));
        else
            opaque(a, "call", tc); /* another kind of call ("custom"): all of it */
    }
    if (calls == NULL && !json_empty(api_member(msg, "tool_calls")))
        opaque(a, "tool_calls", api_member(msg, "tool_calls")); /* not a list: all of it */
    const cJSON *fc = api_member(msg, "function_call");         /* the legacy single call */
    if (cJSON_IsObject(fc))
        call(a, "function_call", api_member(fc, "name"), api_member(fc, "arguments"));
    else if (!json_empty(fc))
        opaque(a, "function_call", fc);
    /* Anything else the message says (audio, annotations...), but not its reasoning. */
    static const char *const known[] = {
        "role",          "content",   "refusal",           "tool_calls",
        "function_call", "reasoning", "reasoning_content", "reasoning_details"};
    const cJSON *m, *members = cJSON_IsObject(msg) ? msg : NULL;
    cJSON_ArrayForEach(m, members)
    {
        bool skip = !member_counts(msg, m) || json_empty(m);
        for (size_t i = 0; !skip && i < PC_ARRAY_LEN(known); i++)
            skip = strcmp(m->string, known[i]) == 0;
        if (!skip) {
            pc_buf_append_str(&a->form, "member ");
            pc_buf_json_str(&a->form, m->string, strlen(m->string));
            pc_buf_append_char(&a->form, ' ');
            form_value(a, &a->form, m);
            pc_buf_append_char(&a->form, '\n');
        }
    }
}

/* Each choice in order, with its index and finish reason ("length": a cut answer). */
static void read_chat(struct bound_answer *a, const cJSON *resp, bool legacy)
{
    const cJSON *choices = array_of(api_member(resp, "choices")), *choice;
    a->choices = choices != NULL ? cJSON_GetArraySize(choices) : 0;
    pc_buf_printf(&a->form, "choices %d\n", a->choices);
    cJSON_ArrayForEach(choice, choices)
    {
        pc_buf_append_str(&a->form, "choice ");
        form_value(a, &a->form, api_member(choice, "index"));
        pc_buf_append_char(&a->form, ' ');
        form_value(a, &a->form, api_member(choice, "finish_reason"));
        pc_buf_append_char(&a->form, '\n');
        if (legacy)
            content(a, "text", api_member(choice, "text"));
        else
            chat_message(a, api_member(choice, "message"));
    }
}

static void read_messages(struct bound_answer *a, const cJSON *resp)
{
    pc_buf_append_str(&a->form, "stop ");
    form_value(a, &a->form, api_member(resp, "stop_reason"));
    pc_buf_append_char(&a->form, ' ');
    form_value(a, &a->form, api_member(resp, "stop_sequence"));
    pc_buf_append_char(&a->form, '\n');
    const cJSON *blocks = array_of(api_member(resp, "content")), *block;
    cJSON_ArrayForEach(block, blocks)
    {
        const char *type = cJSON_GetStringValue(api_member(block, "type"));
        const cJSON *text = api_member(block, "text");
        if (type != NULL && strcmp(type, "text") == 0 && cJSON_IsString(text))
            piece(a, "text", text->valuestring);
        else if (type != NULL && strcmp(type, "tool_use") == 0)
            call(a, "tool_use", api_member(block, "name"), api_member(block, "input"));
        else if (type != NULL &&
                 (strcmp(type, "thinking") == 0 || strcmp(type, "redacted_thinking") == 0))
            pc_buf_printf(&a->form, "%s\n", type); /* how it got there, not the answer */
        else
            opaque(a, "block", block);
    }
}

static void read_responses(struct bound_answer *a, const cJSON *resp)
{
    pc_buf_append_str(&a->form, "status ");
    form_value(a, &a->form, api_member(resp, "status"));
    pc_buf_append_char(&a->form, ' ');
    form_value(a, &a->form, api_member(api_member(resp, "incomplete_details"), "reason"));
    pc_buf_append_char(&a->form, '\n');
    const cJSON *items = array_of(api_member(resp, "output")), *it;
    cJSON_ArrayForEach(it, items)
    {
        const char *type = cJSON_GetStringValue(api_member(it, "type"));
        if (type != NULL && strcmp(type, "message") == 0) {
            pc_buf_append_str(&a->form, "message\n");
            content(a, "output_text", api_member(it, "content"));
        } else if (type != NULL && strcmp(type, "function_call") == 0) {
            call(a, "function_call", api_member(it, "name"), api_member(it, "arguments"));
        } else if (type != NULL && strcmp(type, "reasoning") == 0) {
            pc_buf_append_str(&a->form, "reasoning\n");
        } else {
            opaque(a, "item", it);
        }
    }
}

void bound_answer_free(struct bound_answer *a)
{
    pc_buf_free(&a->text);
    pc_buf_free(&a->form);
    pc_buf_free(&a->key);
    *a = (struct bound_answer){0};
}

int bound_answer_read(const struct entry *e, struct bound_answer *a)
{
    *a = (struct bound_answer){.text = PC_BUF_INIT, .form = PC_BUF_INIT, .key = PC_BUF_INIT};
    /*
     * cJSON ends a string at a decoded U+0000, at "\u00zz" (which it reads so) and at a raw NUL
     * byte: what follows would not be compared, and two answers alike up to there would agree.
     * A fresh answer is never compared so (fetch.c) and a stream's events are held to RFC 8259
     * (dialect_assemble); an entry read back from Redis may still hold one.
     */
    char why[128];
    if (memmem(e->body, e->body_len, "\\u0000", 6) != NULL ||
        memchr(e->body, '\0', e->body_len) != NULL ||
        (e->kind != ENTRY_SSE && !pc_json_strict(e->body, e->body_len, why, sizeof(why))))
        return -1;
    cJSON *resp = e->kind == ENTRY_SSE ? dialect_assemble(e->endpoint, e->body, e->body_len, NULL)
                                       : cJSON_ParseWithLength(e->body, e->body_len);
    if (resp == NULL)
        return -1;
    a->choices = 1;
    pc_buf_printf(&a->form, "%s\n", api_endpoint_name(e->endpoint));
    if (e->endpoint == API_CHAT || e->endpoint == API_COMPLETIONS)
        read_chat(a, resp, e->endpoint == API_COMPLETIONS);
    else if (e->endpoint == API_MESSAGES)
        read_messages(a, resp);
    else if (e->endpoint == API_RESPONSES)
        read_responses(a, resp);
    cJSON_Delete(resp);
    struct pc_buf *t = &a->text;
    while (t->len > 0 && t->data[t->len - 1] == '\n')
        t->len--; /* the separator after the last piece */
    a->cut = t->len > BOUND_ANSWER_MAX;
    if (a->cut) {
        size_t n = BOUND_ANSWER_MAX; /* cut on a UTF-8 boundary */
        while (n > 0 && ((unsigned char)t->data[n] & 0xc0) == 0x80)
            n--;
        t->len = n;
    }
    pc_buf_cstr(t);
    pc_buf_cstr(&a->form);
    pc_buf_cstr(&a->key);
    if (t->len == 0) {
        bound_answer_free(a);
        return -1;
    }
    return 0;
}

int bound_answer_text(const struct entry *e, struct pc_buf *out)
{
    struct bound_answer a;
    if (bound_answer_read(e, &a) < 0) {
        pc_buf_cstr(out);
        return -1;
    }
    pc_buf_append(out, a.text.data, a.text.len);
    pc_buf_cstr(out);
    int rc = a.cut ? 1 : 0;
    bound_answer_free(&a);
    return rc;
}

static bool outer_punct(unsigned char c)
{
    return c == '.' || c == ',' || c == '!' || c == '?' || c == ';' || c == ':' || c == '"' ||
           c == '\'' || c == '`' || c == '*' || c == '(' || c == ')' || c == '[' || c == ']';
}

void bound_normalise(const char *s, struct pc_buf *out)
{
    size_t start = out->len;
    bool space = false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isspace(*p)) {
            space = out->len > start;
            continue;
        }
        if (space)
            pc_buf_append_char(out, ' ');
        space = false;
        pc_buf_append_char(out, (char)tolower(*p));
    }
    /*
     * "Positive." and "positive" are one label: drop punctuation around the whole text, and
     * the blanks between it and the words ("( yes )", "Oui !": else a space was left outside).
     */
    while (out->len > start &&
           (outer_punct((unsigned char)out->data[out->len - 1]) || out->data[out->len - 1] == ' '))
        out->len--;
    size_t lead = 0;
    while (start + lead < out->len && (outer_punct((unsigned char)out->data[start + lead]) ||
                                       out->data[start + lead] == ' ')) {
        unsigned char c = (unsigned char)out->data[start + lead];
        /* ".5" is a number (0.5), not "5" after a sentence end */
        if ((c == '.' || c == ',') && start + lead + 1 < out->len &&
            isdigit((unsigned char)out->data[start + lead + 1]))
            break;
        lead++;
    }
    if (lead > 0) { /* an empty result may have no memory behind it yet */
        memmove(out->data + start, out->data + start + lead, out->len - start - lead);
        out->len -= lead;
    }
    pc_buf_cstr(out);
}

/* ---- runtime: the process and its workers --------------------------------------- */

struct bound {
    unsigned magic;
    double delta;
    double explore_rate;
    enum bound_comparator cmp;
    double answer_bar; /* embedding comparator: cosine that counts as the same answer */
    char space[128];
    char anon_id[TENANT_ID_LEN + 1]; /* the anonymous tenant, whose prior keeps the old key */
    pthread_mutex_t mu; /* guards the last prior read (any worker writes, /stats reads) */
    struct bound_counts last_global;
    char last_tenant[TENANT_ID_LEN + 1]; /* whose prior last_global is */
    bool have_global;
};

struct bound_port {
    unsigned magic;
    struct bound *b;
    struct store *store;
    struct stats *st;
    struct verify *verify;
    struct bound_pair_ops pair;
    void *pair_ctx;
    uint64_t rng;
};

struct bound *bound_create(const struct conf *c, const char *space)
{
    if (!(c->semantic_max_error > 0))
        return NULL;
    struct bound *b = pc_calloc(1, sizeof(*b));
    b->magic = BOUND_MAGIC_OBJ;
    b->delta = c->semantic_max_error;
    b->explore_rate = c->semantic_explore_rate;
    b->cmp = (enum bound_comparator)c->semantic_verify_answers;
    b->answer_bar = c->semantic_verify_answers_threshold;
    snprintf(b->space, sizeof(b->space), "%s", space);
    unsigned char anon[PC_SHA256_LEN];
    char hex[2 * PC_SHA256_LEN + 1];
    canon_tenant(NULL, anon); /* as proxy.c names a client without credentials */
    pc_hex(anon, PC_SHA256_LEN, hex);
    snprintf(b->anon_id, sizeof(b->anon_id), "%.*s", TENANT_ID_LEN, hex);
    pthread_mutex_init(&b->mu, NULL);
    return b;
}

void bound_destroy(struct bound **bp)
{
    struct bound *b = *bp;
    if (b == NULL)
        return;
    *bp = NULL;
    PC_CHECK_OBJ(b, BOUND_MAGIC_OBJ);
    pthread_mutex_destroy(&b->mu);
    b->magic = 0;
    free(b);
}

/*
 * What /stats and /metrics show: the threshold at delta of the prior read
 * last and its figures. Each tenant has its own prior, so these are the
 * figures of whichever tenant's lookup read one last: tenant says whose.
 */
struct bound_figures {
    bool known;
    char tenant[TENANT_ID_LEN + 1];
    struct bound_cert cert;
    struct bound_region all;
};

static void figures(struct bound *b, struct bound_figures *f)
{
    struct bound_counts *g = pc_malloc(sizeof(*g));
    pthread_mutex_lock(&b->mu);
    f->known = b->have_global;
    memcpy(g, &b->last_global, sizeof(*g));
    memcpy(f->tenant, b->last_tenant, sizeof(f->tenant));
    pthread_mutex_unlock(&b->mu);
    bound_certify(g, b->delta, &f->cert);
    bound_region_at(g, 0, &f->all);
    free(g);
}

/* ---- series (pc_stats.h) ---------------------------------------------------------- */

struct bound_series_snap {
    struct bound_figures f;
    double delta, explore_rate;
    const char *verify; /* the comparator's name */
};

static void bound_snapshot(const void *obj, void *snap)
{
    struct bound *b = (struct bound *)obj; /* its lock */
    struct bound_series_snap *s = snap;
    static const char *const names[] = BOUND_CMP_NAMES;
    figures(b, &s->f);
    s->delta = b->delta;
    s->explore_rate = b->explore_rate;
    s->verify = names[b->cmp];
}

#define BOUND_SERIES(X)                                                                          \
    X(max_error, "semantic_max_error", "semantic_max_error", "gauge", 6,                         \
      "The configured error bound (semantic-max-error)", stat_real(v, s->delta))                 \
    X(explore_rate, "semantic_explore_rate", NULL, "gauge", 6,                                   \
      "The most of the allowed candidates sent upstream to keep measuring "                      \
      "(semantic-explore-rate)",                                                                 \
      stat_real(v, s->explore_rate))                                                             \
    X(verify, "semantic_verify_answers", NULL, "info", 0,                                        \
      "How a fresh answer is compared with a candidate's (semantic-verify-answers)",             \
      stat_str(v, s->verify))                                                                    \
    X(confidence, "semantic_bound_confidence", NULL, "gauge", 2,                                 \
      "The confidence of every bound stated (one-sided)", stat_real(v, BOUND_CONFIDENCE))        \
    X(prior_tenant, "semantic_bound_prior_tenant", NULL, "info", 0,                              \
      "The tenant whose prior the figures below are of: each tenant has its own, and they are "  \
      "of the one a lookup read last (null until one is read)",                                  \
      stat_str(v, s->f.tenant);                                                                  \
      if (!s->f.known) v->type = SV_NULL)                                                        \
    X(threshold, "semantic_bound_threshold", "semantic_bound_threshold", "gauge", 6,             \
      "Lowest similarity the prior read last (semantic_bound_prior_tenant's) allows at "         \
      "semantic-max-error",                                                                      \
      stat_real_or_null(v, s->f.cert.certified, s->f.cert.threshold))                            \
    X(error_observed, "semantic_bound_error_observed", "semantic_bound_error_observed", "gauge", \
      6, "Weighted error rate of the comparisons at or above that threshold",                    \
      stat_real_or_null(v, s->f.cert.certified, s->f.cert.region.rate))                          \
    X(error_bound, "semantic_bound_error_bound", "semantic_bound_error_bound", "gauge", 6,       \
      "Its one-sided 95% upper confidence bound (at most semantic-max-error)",                   \
      stat_real_or_null(v, s->f.cert.certified, s->f.cert.upper))                                \
    X(served_n, "semantic_bound_served_region_observations", NULL, "gauge", 6,                   \
      "The effective number of comparisons at or above that threshold",                          \
      stat_real_or_null(v, s->f.cert.certified, s->f.cert.region.n_eff))                         \
    X(all_n, "semantic_bound_observations", NULL, "gauge", 6,                                    \
      "The effective number of comparisons at any similarity (null until the global counts "     \
      "are read)",                                                                               \
      stat_real_or_null(v, s->f.known, s->f.all.n_eff))                                          \
    X(all_error, "semantic_bound_error_observed_all", NULL, "gauge", 6,                          \
      "Weighted error rate of the comparisons at any similarity",                                \
      stat_real_or_null(v, s->f.known && s->f.all.n_eff > 0, s->f.all.rate))

#define BOUND_READ(id, name, prom, kind, dec, help, stmt) \
    STAT_READER(bound, struct bound_series_snap, id, stmt)
#define BOUND_ROW(id, name, prom, kind, dec, help, stmt) \
    STAT_ROW(bound, id, name, prom, kind, dec, help)
BOUND_SERIES(BOUND_READ)
static const struct stat_row bound_rows[] = {BOUND_SERIES(BOUND_ROW)};

const struct stat_group bound_series = {
    .rows = bound_rows,
    .nrows = PC_ARRAY_LEN(bound_rows),
    .snap_size = sizeof(struct bound_series_snap),
    .snapshot = bound_snapshot,
};

struct bound_port *bound_port_create(struct bound *b, struct store *store, struct stats *st,
                                     struct verify *verify, const struct bound_pair_ops *pair,
                                     void *pair_ctx)
{
    if (b == NULL)
        return NULL;
    struct bound_port *bp = pc_calloc(1, sizeof(*bp));
    bp->magic = PORT_MAGIC;
    bp->b = b;
    bp->store = store;
    bp->st = st;
    bp->verify = verify;
    if (pair != NULL)
        bp->pair = *pair;
    bp->pair_ctx = pair_ctx;
    bp->rng = (uint64_t)pc_mono_us() ^ ((uint64_t)(uintptr_t)bp << 16) ^ 0x9e3779b97f4a7c15u;
    return bp;
}

void bound_port_destroy(struct bound_port **pp)
{
    struct bound_port *bp = *pp;
    if (bp == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(bp, PORT_MAGIC);
    bp->magic = 0;
    free(bp);
}

/* Uniform in [0, 1): xorshift64*, the worker's own sequence. */
static double port_draw(struct bound_port *bp)
{
    uint64_t x = bp->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    bp->rng = x;
    return (double)((x * 0x2545f4914f6cdd1du) >> 11) / 9007199254740992.0;
}

/* ---- runtime: a lookup's view --------------------------------------------------- */

enum view_read { VR_MARKS = 0, VR_PARTITION, VR_GLOBAL, VR__COUNT };

struct bound_view {
    unsigned magic;
    struct bound_port *bp;
    char part_key[BOUND_KEY_MAX];
    char prior_key[BOUND_KEY_MAX];  /* the tenant's prior */
    char tenant[TENANT_ID_LEN + 1]; /* whose */
    struct store_cmd *cmd[VR__COUNT];
    int pending;
    bound_ready_fn *cb;
    void *arg;
    bool fetched_counts; /* the partition's and global counts were asked for */
    bool part_ok, glob_ok;
    int floor; /* the current candidate's marks */
    struct bound_counts part, glob;
    struct bound_prepared prep; /* from part and glob: emptied whenever either is read */
    enum bound_verdict last;    /* of the current candidate */
};

struct bound_view *bound_view_create(struct bound_port *bp, const char *tenant_id,
                                     const unsigned char *partition)
{
    if (bp == NULL)
        return NULL;
    PC_CHECK_OBJ(bp, PORT_MAGIC);
    struct bound_view *v = pc_calloc(1, sizeof(*v));
    v->magic = VIEW_MAGIC;
    v->bp = bp;
    v->floor = -1;
    bound_prepare(&v->prep);
    bound_partition_key(bp->b->space, partition, v->part_key);
    bound_prior_key(bp->b->space, tenant_id, bp->b->anon_id, v->prior_key);
    snprintf(v->tenant, sizeof v->tenant, "%.*s", TENANT_ID_LEN,
             tenant_id != NULL ? tenant_id : bp->b->anon_id);
    return v;
}

void bound_view_free(struct bound_view **vp)
{
    struct bound_view *v = *vp;
    if (v == NULL)
        return;
    *vp = NULL;
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    for (int i = 0; i < VR__COUNT; i++)
        store_cancel(&v->cmd[i]);
    v->magic = 0;
    free(v);
}

static void view_reply_done(struct bound_view *v)
{
    if (--v->pending > 0)
        return;
    bound_ready_fn *cb = v->cb;
    v->cb = NULL;
    cb(v->arg);
}

/* A counts value read back: decoded and range-checked, else rejected and counted. */
static bool read_counts(struct bound_view *v, enum store_status st, const char *val, size_t len,
                        struct bound_counts *c)
{
    memset(c, 0, sizeof(*c));
    if (st != STORE_OK)
        return false;
    if (val == NULL)
        return true; /* nothing observed yet */
    if (bound_counts_decode(val, len, c) == 0)
        return true;
    stats_incr(v->bp->st, STAT_semantic_bound_rejected);
    log_info("semantic bound: counts read from Redis are out of range; ignored");
    return false;
}

static void on_marks(void *arg, enum store_status st, const char *val, size_t len)
{
    struct bound_view *v = arg;
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    v->cmd[VR_MARKS] = NULL;
    v->floor = -1;
    if (st != STORE_OK) {
        /* Unread (a timeout, an error reply): the entry may have been found wrong, held back. */
        v->floor = BOUND_BUCKETS - 1;
    } else if (val != NULL && bound_marks_decode(val, len, &v->floor) < 0) {
        /* Marks only ever hold an entry back: a value too long to be ours holds it back too. */
        stats_incr(v->bp->st, STAT_semantic_bound_rejected);
        v->floor = BOUND_BUCKETS - 1;
    }
    view_reply_done(v);
}

static void on_partition(void *arg, enum store_status st, const char *val, size_t len)
{
    struct bound_view *v = arg;
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    v->cmd[VR_PARTITION] = NULL;
    v->part_ok = read_counts(v, st, val, len, &v->part);
    bound_prepare(&v->prep);
    view_reply_done(v);
}

static void on_global(void *arg, enum store_status st, const char *val, size_t len)
{
    struct bound_view *v = arg;
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    v->cmd[VR_GLOBAL] = NULL;
    v->glob_ok = read_counts(v, st, val, len, &v->glob);
    bound_prepare(&v->prep);
    if (v->glob_ok) {
        struct bound *b = v->bp->b;
        pthread_mutex_lock(&b->mu);
        memcpy(&b->last_global, &v->glob, sizeof(v->glob));
        memcpy(b->last_tenant, v->tenant, sizeof(b->last_tenant));
        b->have_global = true;
        pthread_mutex_unlock(&b->mu);
    }
    view_reply_done(v);
}

static bool view_get(struct bound_view *v, enum view_read which, const char *key, store_get_fn *cb)
{
    v->cmd[which] = store_get(v->bp->store, key, strlen(key), cb, v);
    if (v->cmd[which] == NULL)
        return false;
    v->pending++;
    return true;
}

int bound_view_fetch(struct bound_view *v, const char *tenant_id,
                     const unsigned char exact[PC_SHA256_LEN], bound_ready_fn *cb, void *arg)
{
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    v->floor = -1;
    v->pending = 0;
    v->cb = cb;
    v->arg = arg;
    char mkey[BOUND_KEY_MAX];
    bound_entry_key(tenant_id, exact, mkey);
    bool ok = view_get(v, VR_MARKS, mkey, on_marks);
    if (ok && !v->fetched_counts) {
        v->fetched_counts = true;
        ok = view_get(v, VR_PARTITION, v->part_key, on_partition) &&
             view_get(v, VR_GLOBAL, v->prior_key, on_global);
    }
    if (ok)
        return 1;
    for (int i = 0; i < VR__COUNT; i++)
        store_cancel(&v->cmd[i]);
    v->pending = 0;
    v->cb = NULL;
    /*
     * The marks are unread as when their GET fails (on_marks): the entry is held back. The
     * counts read for an earlier candidate are still there and may allow its similarity.
     */
    v->floor = BOUND_BUCKETS - 1;
    return 0;
}

static void write_argv(struct bound_port *bp, struct bound_argv *a)
{
    store_write(bp->store, a->argc, a->argv, a->lens);
}

/* The candidate reached the decision: one more of its bucket (the shares of the estimate). */
static void write_seen(struct bound_view *v, double sim)
{
    struct bound_argv a;
    bound_argv_seen(&a, v->part_key, sim);
    write_argv(v->bp, &a);
    bound_argv_expire(&a, v->part_key, BOUND_PARTITION_TTL_MS, false);
    write_argv(v->bp, &a);
    bound_argv_seen(&a, v->prior_key, sim);
    write_argv(v->bp, &a);
}

void bound_view_decide(struct bound_view *v, double sim, struct bound_decision *out)
{
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    struct bound *b = v->bp->b;
    /*
     * The global counts are the partition's prior only where its own counts do not veto them:
     * with those unread (an error reply, a timeout, a value rejected), the veto is unknown, and
     * the global counts alone would serve a partition whose answers were found different.
     */
    struct bound_inputs in = {
        .partition = v->part_ok ? &v->part : NULL,
        .global = v->glob_ok && v->part_ok ? &v->glob : NULL,
        .entry_floor = v->floor,
        .delta = b->delta,
        .explore_rate = b->explore_rate,
    };
    /* The counts are read once per lookup: its later candidates reuse what the first computed. */
    bound_decide_prepared(&in, &v->prep, sim, port_draw(v->bp), out);
    v->last = out->verdict;
    if (out->verdict != BOUND_SKIP) /* a skipped entry is out of the population served */
        write_seen(v, sim);
    static const enum stat_id counted[] = {
        [BOUND_EXPLORE] = STAT_semantic_bound_explored,
        [BOUND_WITHHOLD] = STAT_semantic_bound_withheld,
        [BOUND_SKIP] = STAT_semantic_bound_skipped,
    };
    if (out->verdict != BOUND_SERVE)
        stats_incr(v->bp->st, counted[out->verdict]);
}

/* ---- runtime: probes and comparisons ----------------------------------------------- */

struct bound_probe {
    unsigned magic;
    int refs;
    double sim;
    bool explored;
    const char *verdict;     /* "agreed" / "disagreed" / NULL */
    struct bound_answer ans; /* the candidate's */
    char part_key[BOUND_KEY_MAX];
    char global_key[BOUND_KEY_MAX];
    char marks_key[BOUND_KEY_MAX];
    char entry_key[ENTRY_KEY_MAX]; /* the candidate's: its marks take its life */
    struct stats *st;              /* the worker's: a probe ends on its thread */
    bool settled;                  /* compared, or counted as a comparison that failed */
};

struct bound_probe *bound_probe_create(struct bound_view *v, const struct bound_decision *d,
                                       double sim, const struct entry *cand,
                                       const char *cand_tenant,
                                       const unsigned char cand_exact[PC_SHA256_LEN])
{
    PC_CHECK_OBJ(v, VIEW_MAGIC);
    struct bound_answer ans;
    if (bound_answer_read(cand, &ans) < 0) {
        /* Counted held back or explored, and never to be compared. */
        stats_incr(v->bp->st, STAT_semantic_bound_uncompared);
        return NULL;
    }
    struct bound_probe *p = pc_calloc(1, sizeof(*p));
    p->magic = PROBE_MAGIC;
    p->refs = 1;
    p->sim = sim;
    p->explored = d->verdict == BOUND_EXPLORE;
    p->ans = ans; /* its buffers are the probe's now */
    snprintf(p->part_key, sizeof(p->part_key), "%s", v->part_key);
    snprintf(p->global_key, sizeof(p->global_key), "%s", v->prior_key);
    bound_entry_key(cand_tenant, cand_exact, p->marks_key);
    entry_key(cand_tenant, cand_exact, p->entry_key);
    p->st = v->bp->st;
    return p;
}

struct bound_probe *bound_probe_ref(struct bound_probe *p)
{
    if (p != NULL) {
        PC_CHECK_OBJ(p, PROBE_MAGIC);
        p->refs++;
    }
    return p;
}

void bound_probe_unref(struct bound_probe **pp)
{
    struct bound_probe *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, PROBE_MAGIC);
    if (--p->refs > 0)
        return;
    /* No full answer came to compare it with (an upstream error, a cut stream, a client
     * gone, an answer in no shape to compare, a request that joined another's call). */
    if (!p->settled)
        stats_incr(p->st, STAT_semantic_bound_uncompared);
    bound_answer_free(&p->ans);
    p->magic = 0;
    free(p);
}

double bound_probe_similarity(const struct bound_probe *p)
{
    return p->sim;
}

bool bound_probe_explored(const struct bound_probe *p)
{
    return p->explored;
}

const char *bound_probe_verdict(const struct bound_probe *p)
{
    return p != NULL ? p->verdict : NULL;
}

/* The observation, where every instance learns from it; and the verdict for the answer. */
static void record(struct bound_port *bp, struct bound_probe *p, bool wrong)
{
    struct bound_argv a;
    bound_argv_compared(&a, p->part_key, p->sim, wrong);
    write_argv(bp, &a);
    bound_argv_compared(&a, p->global_key, p->sim, wrong);
    write_argv(bp, &a);
    if (wrong) {
        bound_argv_mark(&a, p->entry_key, p->marks_key, p->sim);
        write_argv(bp, &a);
    }
    p->settled = true;
    p->verdict = wrong ? "disagreed" : "agreed";
    stats_incr(bp->st, STAT_semantic_bound_compared);
    stats_incr(bp->st, wrong ? STAT_semantic_bound_disagreed : STAT_semantic_bound_agreed);
    if (wrong && p->explored)
        stats_incr(bp->st, STAT_semantic_bound_explored_disagreed);
}

struct bound_cmp {
    unsigned magic;
    struct bound_port *bp;
    struct bound_probe *probe; /* a reference */
    bound_cmp_fn *cb;
    void *arg;
    void *pair;            /* embedding comparator: the pair's handle */
    struct verify_op *vop; /* model comparator */
};

static void cmp_free(struct bound_cmp *c)
{
    bound_probe_unref(&c->probe);
    c->magic = 0;
    free(c);
}

/* The comparison ended: wrong 0/1, or -1 when it could not be made. */
static void cmp_end(struct bound_cmp *c, int wrong)
{
    if (wrong < 0) {
        stats_incr(c->bp->st, STAT_semantic_bound_compare_errors);
        c->probe->settled = true;
    } else
        record(c->bp, c->probe, wrong == 1);
    bound_cmp_fn *cb = c->cb;
    void *arg = c->arg;
    cmp_free(c);
    cb(arg);
}

static void on_cosine(void *arg, double cosine)
{
    struct bound_cmp *c = arg;
    PC_CHECK_OBJ(c, CMP_MAGIC);
    c->pair = NULL;
    /* Two unit vectors' cosine is in [-1, 1] (with a float's rounding): anything else (NaN: the
     * embedder failed) says nothing about the answers, and is no agreement. */
    bool cosine_ok = cosine >= -1.001 && cosine <= 1.001;
    cmp_end(c, !cosine_ok ? -1 : cosine < c->bp->b->answer_bar);
}

static void on_judged(void *arg, enum verify_answer a)
{
    struct bound_cmp *c = arg;
    PC_CHECK_OBJ(c, CMP_MAGIC);
    c->vop = NULL;
    cmp_end(c, a == VERIFY_YES ? 0 : a == VERIFY_NO ? 1 : -1);
}

bool bound_same_text(const char *a, const char *b)
{
    struct pc_buf na = PC_BUF_INIT, nb = PC_BUF_INIT;
    bound_normalise(a, &na);
    bound_normalise(b, &nb);
    bool same = na.len == nb.len && memcmp(pc_buf_cstr(&na), pc_buf_cstr(&nb), na.len) == 0;
    /* Nothing left but punctuation ("..." / "!!!"): the texts themselves, white space aside. */
    if (same && na.len == 0) {
        pc_buf_reset(&na);
        pc_buf_reset(&nb);
        for (const char *p = a; *p; p++)
            if (!isspace((unsigned char)*p))
                pc_buf_append_char(&na, *p);
        for (const char *p = b; *p; p++)
            if (!isspace((unsigned char)*p))
                pc_buf_append_char(&nb, *p);
        same = na.len == nb.len && (na.len == 0 || memcmp(na.data, nb.data, na.len) == 0);
    }
    pc_buf_free(&na);
    pc_buf_free(&nb);
    return same;
}

/* Start an asynchronous comparator; false if it cannot start. */
static bool cmp_start(struct bound_cmp *c, const char *fresh)
{
    struct bound_port *bp = c->bp;
    const char *cached = c->probe->ans.text.data;
    if (bp->b->cmp == BOUND_CMP_EMBEDDING && bp->pair.start != NULL) {
        c->pair = bp->pair.start(bp->pair_ctx, cached, fresh, on_cosine, c);
        return c->pair != NULL;
    }
    if (bp->b->cmp == BOUND_CMP_MODEL && bp->verify != NULL) {
        c->vop = verify_ask_answers(bp->verify, cached, fresh, on_judged, c);
        return c->vop != NULL;
    }
    return false;
}

static bool buf_same(const struct pc_buf *a, const struct pc_buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Either answer cannot be compared: counted, and the probe is settled. */
static int compare_failed(struct bound_port *bp, struct bound_probe *p)
{
    stats_incr(bp->st, STAT_semantic_bound_compare_errors);
    p->settled = true;
    return -1;
}

/*
 * What fa (the fresh answer) and the candidate's answer settle without a
 * comparator: -1 not comparable (counted), 1 an observation recorded, 0 the
 * comparator is to judge their texts.
 */
static int judge(struct bound_port *bp, struct bound_probe *p, const struct bound_answer *fa)
{
    /*
     * One longer than what is compared: two answers alike in their first
     * BOUND_ANSWER_MAX bytes may differ after them, and a false agreement serves more.
     */
    if (fa->cut || p->ans.cut)
        return compare_failed(bp, p);
    /* Another form (a tool call for a text, a refusal, another choice, a cut answer...) is
     * another answer, whatever the comparator makes of the words. */
    if (!buf_same(&fa->form, &p->ans.form)) {
        record(bp, p, true);
        return 1;
    }
    /* Forms alike where a number was rounded (two ids 1 apart at 10^19 read the same): they
     * may differ as written. Forms that differ did as written too. */
    if (fa->rounded || p->ans.rounded)
        return compare_failed(bp, p);
    bool same_text = buf_same(&fa->key, &p->ans.key);
    /* The comparators by meaning read one text of a bounded length: several choices are
     * compared by their texts (a bag of words cannot tell which choice said what), and so are
     * texts longer than what they read, which are not compared when their texts differ. */
    size_t limit = bp->b->cmp == BOUND_CMP_MODEL ? VERIFY_ANSWER_MAX : EMBED_MAX_TEXT;
    bool too_long = fa->text.len > limit || p->ans.text.len > limit;
    if (bp->b->cmp == BOUND_CMP_EXACT || p->ans.choices > 1 || (too_long && same_text)) {
        record(bp, p, !same_text);
        return 1;
    }
    if (too_long)
        return compare_failed(bp, p);
    /* What an embedder does not see: a fact changed with the words kept. */
    if (bp->b->cmp == BOUND_CMP_EMBEDDING &&
        guard_check(p->ans.text.data, p->ans.text.len, fa->text.data, fa->text.len,
                    BOUND_ANSWER_GUARDS) < GUARD__COUNT) {
        record(bp, p, true);
        return 1;
    }
    return 0;
}

int bound_compare(struct bound_port *bp, struct bound_probe *p, const struct entry *fresh,
                  bound_cmp_fn *cb, void *arg, struct bound_cmp **out)
{
    *out = NULL;
    if (bp == NULL || p == NULL)
        return -1;
    PC_CHECK_OBJ(bp, PORT_MAGIC);
    PC_CHECK_OBJ(p, PROBE_MAGIC);
    if (p->settled)
        return -1; /* one observation per candidate */
    struct bound_answer fa;
    if (bound_answer_read(fresh, &fa) < 0) /* no text */
        return compare_failed(bp, p);
    int verdict = judge(bp, p, &fa);
    if (verdict != 0) {
        bound_answer_free(&fa);
        return verdict;
    }
    struct bound_cmp *c = pc_calloc(1, sizeof(*c));
    c->magic = CMP_MAGIC;
    c->bp = bp;
    c->probe = bound_probe_ref(p);
    c->cb = cb;
    c->arg = arg;
    bool started = cmp_start(c, fa.text.data);
    bound_answer_free(&fa);
    if (!started) {
        cmp_free(c);
        return compare_failed(bp, p);
    }
    *out = c;
    return 0;
}

void bound_entry_renewed(struct bound_port *bp, const char *tenant_id,
                         const unsigned char exact[PC_SHA256_LEN], int64_t ttl_ms)
{
    if (bp == NULL)
        return;
    PC_CHECK_OBJ(bp, PORT_MAGIC);
    char key[BOUND_KEY_MAX];
    bound_entry_key(tenant_id, exact, key);
    struct bound_argv a;
    bound_argv_expire(&a, key, ttl_ms, false); /* no marks: nothing happens */
    write_argv(bp, &a);
}

void bound_compare_cancel(struct bound_cmp **cp)
{
    struct bound_cmp *c = *cp;
    if (c == NULL)
        return;
    *cp = NULL;
    PC_CHECK_OBJ(c, CMP_MAGIC);
    if (c->pair != NULL && c->bp->pair.cancel != NULL)
        c->bp->pair.cancel(&c->pair);
    verify_cancel(&c->vop);
    cmp_free(c);
}
