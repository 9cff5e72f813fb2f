/*
 * vindex-speed.c - microbenchmark of the vector index (src/vindex.c), built
 * and run by `make bench-vindex`; never part of `make test`.
 *
 *   vindex-speed [--sizes 10000,100000,1000000] [--parts 1,1000] [--dim 100]
 *                [--queries 2000] [--flat-max N] [--nprobe N] [--ivf-flat]
 *   vindex-speed --compare [--dim 100] [--sizes 1,4,16,...]
 *   vindex-speed --stop [--dim 100] [--sizes 100000,1000000]
 *
 * Default mode: for every size and partition count, load that many vectors
 * (random unit vectors, every tenth a near-duplicate of an earlier one, spread
 * evenly over the partitions), run the pending index builds, then search:
 * half the queries near-duplicates of stored vectors (similarity ~0.95), half
 * random. Prints load and build time, search latency p50/p99 (one thread),
 * the share of near-duplicate queries whose exact best match came first
 * (against brute force on a sample), and memory per vector (the index's own
 * accounting, and the process's resident memory growth). One JSON line per
 * configuration follows each table row.
 *
 * --compare: one partition of each size, every candidate index measured on
 * the same data: the plain C exact scan (vindex below flat_max), FAISS
 * IndexFlatIP, vindex's IVF (SQ8 and float codes), FAISS HNSW32 (efSearch
 * 64). Search latency p50, add cost per vector, recall@10 against exact.
 * This is the measurement behind the choice written at the top of
 * src/vindex.c.
 *
 * --stop: what a shutdown during a big IVF build waits for. One partition of
 * each size, built by the index's background thread: once built to its end
 * (the baseline, from the build's start), once stopped by vindex_destroy as
 * soon as the build has started (the time destroy takes). Prints both and
 * their ratio.
 */
#include "pc_log.h"
#include "pc_util.h"
#include "pc_vindex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>

extern void omp_set_num_threads(int n);

#define MAX_SIZES 16
#define NOW       1000000

struct cfg {
    size_t sizes[MAX_SIZES], nsizes;
    size_t parts[MAX_SIZES], nparts;
    int dim;
    size_t queries;
    size_t flat_max, nprobe;
    bool ivf_flat;
    bool compare;
    bool stop;
    bool no_hnsw;
};

/* --- data ------------------------------------------------------------------------ */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static float gauss(void)
{
    double u = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    double w = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
}

static void unit(float *v, int d)
{
    double n = 0;
    for (int i = 0; i < d; i++)
        n += (double)v[i] * v[i];
    for (int i = 0; i < d; i++)
        v[i] = (float)(v[i] / sqrt(n));
}

static void rand_vec(float *v, int d)
{
    for (int i = 0; i < d; i++)
        v[i] = gauss();
    unit(v, d);
}

static void near_vec(float *v, const float *src, int d, float noise)
{
    for (int i = 0; i < d; i++)
        v[i] = src[i] + noise * gauss();
    unit(v, d);
}

/* n vectors, every tenth a near-duplicate (similarity ~0.9) of an earlier one. */
static float *make_data(size_t n, int d)
{
    float *x = pc_malloc(n * (size_t)d * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float *v = x + i * (size_t)d;
        if (i >= 10 && i % 10 == 0)
            near_vec(v, x + (rnd() % i) * (size_t)d, d, 0.05f);
        else
            rand_vec(v, d);
    }
    return x;
}

static void key_of(size_t i, unsigned char key[VINDEX_KEY_LEN])
{
    uint64_t n = i;
    pc_sha256(&n, sizeof(n), key);
}

static void part_of(size_t p, unsigned char out[VINDEX_PART_LEN])
{
    uint64_t n = p | (UINT64_C(1) << 63);
    pc_sha256(&n, sizeof(n), out);
}

/* --- measuring --------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    qsort(v, n, sizeof(*v), cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static float dotf(const float *a, const float *b, int d)
{
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= d; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < d; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* Index (into x, among those of partition p when nparts > 1) of the exact best match. */
static size_t brute_best(const float *x, size_t n, int d, size_t nparts, size_t p, const float *q)
{
    size_t best = SIZE_MAX;
    float bs = -2;
    for (size_t i = p; i < n; i += nparts) {
        float s = dotf(x + i * (size_t)d, q, d);
        if (s > bs) {
            bs = s;
            best = i;
        }
    }
    return best;
}

/* --- default mode: the index at scale ------------------------------------------------------ */

struct result {
    double load_s, build_s, p50_us, p99_us, dup_recall, bytes_per_vec, rss_per_vec;
    size_t ivf_parts;
};

static struct vindex *load(const struct cfg *c, const float *x, size_t n, size_t nparts,
                           struct result *r)
{
    struct vindex_opts o = {
        .dim = c->dim, .flat_max = c->flat_max, .nprobe = c->nprobe, .ivf_flat = c->ivf_flat};
    long rss0 = rss_bytes();
    struct vindex *v = vindex_create(&o);
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        unsigned char p[VINDEX_PART_LEN];
        struct vindex_item it = {.expires_ms = 0};
        part_of(i % nparts, p);
        key_of(i, it.key);
        if (vindex_add(v, p, &it, x + i * (size_t)c->dim) != 0) {
            fprintf(stderr, "add failed\n");
            exit(1);
        }
    }
    r->load_s = now_s() - t0;
    t0 = now_s();
    vindex_maintain(v);
    r->build_s = now_s() - t0;
    struct vindex_stats st;
    vindex_get_stats(v, &st);
    r->ivf_parts = st.ivf_partitions;
    r->bytes_per_vec = (double)st.bytes / (double)n;
    r->rss_per_vec = (double)(rss_bytes() - rss0) / (double)n;
    return v;
}

static void search_all(const struct cfg *c, struct vindex *v, const float *x, size_t n,
                       size_t nparts, struct result *r)
{
    int d = c->dim;
    double *lat = pc_malloc(c->queries * sizeof(double));
    float *q = pc_malloc((size_t)d * sizeof(float));
    size_t checked = 0, found = 0, check_every = PC_MAX((size_t)1, c->queries / 200);
    for (size_t t = 0; t < 100; t++) { /* warm caches and the allocator first */
        struct vindex_hit h[10];
        unsigned char ph[VINDEX_PART_LEN];
        part_of(t % nparts, ph);
        rand_vec(q, d);
        vindex_search(v, ph, q, 10, -1.0f, NOW, h);
    }
    for (size_t t = 0; t < c->queries; t++) {
        size_t src = rnd() % n, p = t % 2 ? src % nparts : rnd() % nparts;
        if (t % 2)
            near_vec(q, x + src * (size_t)d, d, 0.03f);
        else
            rand_vec(q, d);
        unsigned char ph[VINDEX_PART_LEN];
        part_of(p, ph);
        struct vindex_hit h[10];
        double t0 = now_s();
        size_t got = vindex_search(v, ph, q, 10, -1.0f, NOW, h);
        lat[t] = (now_s() - t0) * 1e6;
        if (t % 2 && (t / 2) % check_every == 0) {
            unsigned char key[VINDEX_KEY_LEN];
            key_of(brute_best(x, n, d, nparts, p, q), key);
            checked++;
            found += got > 0 && memcmp(h[0].key, key, sizeof(key)) == 0;
        }
    }
    r->p50_us = pct(lat, c->queries, 0.50);
    r->p99_us = pct(lat, c->queries, 0.99);
    r->dup_recall = checked ? (double)found / (double)checked : 0;
    free(lat);
    free(q);
}

/* One configuration in a child process, so its resident memory is its own. */
static void scale_one(const struct cfg *c, const float *x, size_t n, size_t nparts)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid > 0) {
        int status;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fprintf(stderr, "configuration %zu/%zu failed\n", n, nparts);
        return;
    }
    struct result r;
    struct vindex *v = load(c, x, n, nparts, &r);
    search_all(c, v, x, n, nparts, &r);
    printf("%-9zu %-6zu %-5zu %8.2f %8.2f %9.1f %9.1f %8.3f %9.0f %9.0f\n", n, nparts, r.ivf_parts,
           r.load_s, r.build_s, r.p50_us, r.p99_us, r.dup_recall, r.bytes_per_vec, r.rss_per_vec);
    printf("{\"vectors\":%zu,\"partitions\":%zu,\"dim\":%d,\"ivf_partitions\":%zu,"
           "\"load_s\":%.3f,\"build_s\":%.3f,\"search_p50_us\":%.1f,"
           "\"search_p99_us\":%.1f,\"near_dup_top1\":%.4f,\"bytes_per_vector\":%.0f,"
           "\"rss_bytes_per_vector\":%.0f}\n",
           n, nparts, c->dim, r.ivf_parts, r.load_s, r.build_s, r.p50_us, r.p99_us, r.dup_recall,
           r.bytes_per_vec, r.rss_per_vec);
    fflush(stdout);
    vindex_destroy(&v);
    _exit(0);
}

static void run_scale(const struct cfg *c)
{
    printf("%-9s %-6s %-5s %8s %8s %9s %9s %8s %9s %9s\n", "vectors", "parts", "ivf", "load_s",
           "build_s", "p50_us", "p99_us", "dup_top1", "B/vec", "rssB/vec");
    for (size_t si = 0; si < c->nsizes; si++) {
        size_t n = c->sizes[si];
        float *x = make_data(n, c->dim);
        for (size_t pi = 0; pi < c->nparts; pi++)
            scale_one(c, x, n, c->parts[pi]);
        free(x);
    }
}

/* --- compare mode: candidate index types on one partition ----------------------------------- */

struct cand {
    const char *name;
    double add_us, p50_us, recall10, recall_close;
};

/* The exact top 10 of each query, and their similarities. */
struct truth {
    idx_t *lab;
    float *sim;
};

#define CLOSE 0.8f /* neighbours at least this similar: what a cache could serve */

/* Count truth neighbour i of query t as found (or not) in recall counters. */
static void tally(const struct truth *tr, size_t t, int i, bool found, size_t c[4])
{
    size_t at = t * 10 + (size_t)i;
    if (tr->lab[at] < 0)
        return;
    c[0] += found;
    c[1]++;
    if (tr->sim[at] >= CLOSE) {
        c[2] += found;
        c[3]++;
    }
}

static void recalls(const size_t c[4], struct cand *out)
{
    out->recall10 = c[1] ? (double)c[0] / (double)c[1] : 1;
    out->recall_close = c[3] ? (double)c[2] / (double)c[3] : 1;
}

/* Searches of q[0..nq) against FAISS index ix: latency p50 and recall@10 vs truth. */
static void faiss_measure(FaissIndex *ix, const float *q, size_t nq, int d, const struct truth *tr,
                          struct cand *out)
{
    double *lat = pc_malloc(nq * sizeof(double));
    size_t c[4] = {0};
    for (size_t t = 0; t < nq; t++) {
        float dist[10];
        idx_t lab[10];
        double t0 = now_s();
        faiss_Index_search(ix, 1, q + t * (size_t)d, 10, dist, lab);
        lat[t] = (now_s() - t0) * 1e6;
        for (int i = 0; i < 10; i++) {
            bool found = false;
            for (int j = 0; j < 10 && !found; j++)
                found = tr->lab[t * 10 + (size_t)i] == lab[j];
            tally(tr, t, i, found, c);
        }
    }
    out->p50_us = pct(lat, nq, 0.5);
    recalls(c, out);
    free(lat);
}

static void faiss_candidate(const char *desc, const char *param, double value, const float *x,
                            size_t n, const float *q, size_t nq, int d, const struct truth *tr,
                            struct cand *out)
{
    FaissIndex *ix = NULL;
    out->add_us = out->p50_us = out->recall10 = out->recall_close = -1;
    if (faiss_index_factory(&ix, d, desc, METRIC_INNER_PRODUCT) != 0) {
        fprintf(stderr, "%s: %s\n", desc, faiss_get_last_error());
        return;
    }
    double t0 = now_s();
    faiss_Index_add(ix, (idx_t)n, x);
    out->add_us = (now_s() - t0) * 1e6 / (double)n;
    if (param != NULL) {
        FaissParameterSpace *ps = NULL;
        faiss_ParameterSpace_new(&ps);
        faiss_ParameterSpace_set_index_parameter(ps, ix, param, value);
        faiss_ParameterSpace_free(ps);
    }
    faiss_measure(ix, q, nq, d, tr, out);
    faiss_Index_free(ix);
}

/* vindex at flat_max (exact below it, IVF above) on one partition. */
static void vindex_candidate(const struct cfg *c, size_t flat_max, bool ivf_flat, const float *x,
                             size_t n, const float *q, size_t nq, const struct truth *tr,
                             struct cand *out)
{
    int d = c->dim;
    struct vindex_opts o = {
        .dim = d, .flat_max = flat_max, .nprobe = c->nprobe, .ivf_flat = ivf_flat};
    struct vindex *v = vindex_create(&o);
    unsigned char p[VINDEX_PART_LEN];
    part_of(0, p);
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        struct vindex_item it = {.expires_ms = 0};
        key_of(i, it.key);
        vindex_add(v, p, &it, x + i * (size_t)d);
    }
    vindex_maintain(v);
    out->add_us = (now_s() - t0) * 1e6 / (double)n;
    double *lat = pc_malloc(nq * sizeof(double));
    size_t cnt[4] = {0};
    for (size_t t = 0; t < nq; t++) {
        struct vindex_hit h[10];
        double s = now_s();
        size_t got = vindex_search(v, p, q + t * (size_t)d, 10, -1.0f, NOW, h);
        lat[t] = (now_s() - s) * 1e6;
        for (int i = 0; i < 10; i++) {
            unsigned char key[VINDEX_KEY_LEN];
            key_of((size_t)PC_MAX(tr->lab[t * 10 + (size_t)i], 0), key);
            bool found = false;
            for (size_t j = 0; j < got && !found; j++)
                found = memcmp(h[j].key, key, sizeof(key)) == 0;
            tally(tr, t, i, found, cnt);
        }
    }
    out->p50_us = pct(lat, nq, 0.5);
    recalls(cnt, out);
    free(lat);
    vindex_destroy(&v);
}

static void run_compare(const struct cfg *c)
{
    int d = c->dim;
    size_t nq = 400;
    printf("%-8s %-22s %10s %10s %9s %12s\n", "vectors", "index", "add_us", "p50_us", "recall10",
           "recall>=0.8");
    for (size_t si = 0; si < c->nsizes; si++) {
        size_t n = c->sizes[si];
        float *x = make_data(n, d), *q = pc_malloc(nq * (size_t)d * sizeof(float));
        for (size_t t = 0; t < nq; t++) {
            if (t % 2)
                near_vec(q + t * (size_t)d, x + (rnd() % n) * (size_t)d, d, 0.03f);
            else
                rand_vec(q + t * (size_t)d, d);
        }
        /* The truth: exact top 10 by FAISS's own flat index. */
        FaissIndex *flat = NULL;
        faiss_index_factory(&flat, d, "Flat", METRIC_INNER_PRODUCT);
        faiss_Index_add(flat, (idx_t)n, x);
        struct truth tr = {pc_malloc(nq * 10 * sizeof(idx_t)), pc_malloc(nq * 10 * sizeof(float))};
        faiss_Index_search(flat, (idx_t)nq, q, 10, tr.sim, tr.lab);
        faiss_Index_free(flat);

        struct cand cs[5] = {{.name = "exact scan (plain C)"},
                             {.name = "FAISS IndexFlatIP"},
                             {.name = "IVF SQ8 (vindex)"},
                             {.name = "IVF float (vindex)"},
                             {.name = "HNSW32 ef64 (FAISS)"}};
        size_t nc = 2;
        vindex_candidate(c, SIZE_MAX, false, x, n, q, nq, &tr, &cs[0]);
        faiss_candidate("Flat", NULL, 0, x, n, q, nq, d, &tr, &cs[1]);
        if (n >= 2000) {
            vindex_candidate(c, 1000, false, x, n, q, nq, &tr, &cs[2]);
            vindex_candidate(c, 1000, true, x, n, q, nq, &tr, &cs[3]);
            if (!c->no_hnsw)
                faiss_candidate("HNSW32", "efSearch", 64, x, n, q, nq, d, &tr, &cs[4]);
            nc = c->no_hnsw ? 4 : 5;
        }
        for (size_t i = 0; i < nc; i++)
            printf("%-8zu %-22s %10.2f %10.2f %9.3f %12.3f\n", n, cs[i].name, cs[i].add_us,
                   cs[i].p50_us, cs[i].recall10, cs[i].recall_close);
        fflush(stdout);
        free(tr.lab);
        free(tr.sim);
        free(x);
        free(q);
    }
}

/* --- arguments ---------------------------------------------------------------------------------
 */

/* --- stop mode: vindex_destroy during a build ------------------------------------------------ */

/* A background index holding x[0..n) in one partition, its one build queued; t0 its start. */
static struct vindex *stop_load(const struct cfg *c, const float *x, size_t n, double *t0)
{
    struct vindex_opts o = {.dim = c->dim, .flat_max = n - n / 8, .background = true};
    struct vindex *v = vindex_create(&o);
    unsigned char p[VINDEX_PART_LEN];
    part_of(0, p);
    for (size_t i = 0; i < n; i++) {
        struct vindex_item it = {.expires_ms = 0};
        key_of(i, it.key);
        vindex_add(v, p, &it, x + i * (size_t)c->dim);
    }
    struct vindex_stats st;
    do { /* the build starts once the thread takes it from the queue */
        vindex_get_stats(v, &st);
        *t0 = now_s();
    } while (st.building == 0 && st.builds == 0 && (usleep(1000), true));
    return v;
}

static void run_stop(const struct cfg *c)
{
    printf("%-10s %-5s %12s %12s %8s\n", "vectors", "dim", "build_ms", "destroy_ms", "ratio");
    for (size_t si = 0; si < c->nsizes; si++) {
        size_t n = c->sizes[si];
        float *x = make_data(n, c->dim);
        double t0;
        struct vindex *v = stop_load(c, x, n, &t0);
        struct vindex_stats st;
        do {
            usleep(1000);
            vindex_get_stats(v, &st);
        } while (st.builds == 0 && st.build_errors == 0);
        double build_ms = (now_s() - t0) * 1e3;
        vindex_destroy(&v);
        v = stop_load(c, x, n, &t0);
        double t1 = now_s();
        vindex_destroy(&v);
        double destroy_ms = (now_s() - t1) * 1e3;
        printf("%-10zu %-5d %12.0f %12.0f %8.3f\n", n, c->dim, build_ms, destroy_ms,
               destroy_ms / build_ms);
        printf("{\"vectors\":%zu,\"dim\":%d,\"build_ms\":%.0f,\"destroy_during_build_ms\":%.0f,"
               "\"ratio\":%.4f}\n",
               n, c->dim, build_ms, destroy_ms, destroy_ms / build_ms);
        fflush(stdout);
        free(x);
    }
}

static size_t parse_list(const char *s, size_t *out)
{
    size_t n = 0;
    while (*s != '\0' && n < MAX_SIZES) {
        char *end;
        out[n++] = strtoull(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            break;
    }
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: vindex-speed [--compare | --stop] [--sizes N,N,...] [--parts N,N,...] "
                    "[--dim D] [--queries N] [--flat-max N] [--nprobe N] [--ivf-flat]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct cfg c = {.dim = 100, .queries = 2000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--compare") == 0)
            c.compare = true;
        else if (strcmp(a, "--stop") == 0)
            c.stop = true;
        else if (strcmp(a, "--ivf-flat") == 0)
            c.ivf_flat = true;
        else if (strcmp(a, "--no-hnsw") == 0)
            c.no_hnsw = true;
        else if (val == NULL)
            usage();
        else if (strcmp(a, "--sizes") == 0 && ++i)
            c.nsizes = parse_list(val, c.sizes);
        else if (strcmp(a, "--parts") == 0 && ++i)
            c.nparts = parse_list(val, c.parts);
        else if (strcmp(a, "--dim") == 0 && ++i)
            c.dim = atoi(val);
        else if (strcmp(a, "--queries") == 0 && ++i)
            c.queries = strtoull(val, NULL, 10);
        else if (strcmp(a, "--flat-max") == 0 && ++i)
            c.flat_max = strtoull(val, NULL, 10);
        else if (strcmp(a, "--nprobe") == 0 && ++i)
            c.nprobe = strtoull(val, NULL, 10);
        else
            usage();
    }
    log_init(PC_LOG_WARN, NULL, NULL, NULL, 0);
    omp_set_num_threads(1);
    if (c.compare) {
        if (c.nsizes == 0)
            c.nsizes = parse_list("1,4,16,64,256,1024,4096,16384,32768,65536,100000", c.sizes);
        run_compare(&c);
        return 0;
    }
    if (c.stop) {
        if (c.nsizes == 0)
            c.nsizes = parse_list("100000,1000000", c.sizes);
        run_stop(&c);
        return 0;
    }
    if (c.nsizes == 0)
        c.nsizes = parse_list("10000,100000,1000000", c.sizes);
    if (c.nparts == 0)
        c.nparts = parse_list("1,1000", c.parts);
    printf("vindex-speed: dim %d, %zu queries per configuration (half near-duplicates), "
           "one search thread\n",
           c.dim, c.queries);
    run_scale(&c);
    return 0;
}
