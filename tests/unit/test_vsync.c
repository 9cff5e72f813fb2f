/*
 * test_vsync.c - the vector records' and member lists' names and commands,
 * the range checks of stream events, and the stream's handlers fed by the
 * process's follower (pc_follow.h) against a real redis-server that this
 * test starts (a private directory, a unix socket and a free loopback port)
 * and kills at exit. The vector index: nothing loaded at start, a partition
 * loaded on first use from its member list (records of another space,
 * dimension or partition skipped, corrupt ones and forged members counted,
 * members whose record has gone trimmed), stream add/del/flush applied to
 * loaded partitions only, writes through a worker's struct store, events
 * lost to trimming answered with a reload, waiting for the schema, a Redis
 * restart followed by a reconnect and a reload, a small budget (evictions,
 * reloads), and the one-time listing of vectors stored before member lists.
 * The L1's handler: other processes' writes drop keys, its own do not,
 * forged events are rejected and counted, a read made before a change never
 * goes in after it, Redis gone empties it, and the follower stops at once.
 *
 * Every wait is for a condition, with a generous deadline; how long the
 * reader took to apply an event is printed, not asserted.
 */
#include "pc_follow.h"
#include "pc_l1.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_util.h"
#include "pc_vindex.h"
#include "pc_vrec.h"
#include "pc_vsync.h"
#include "t.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#define DIM      16
#define SPACE    "test-space-v1"
#define DEADLINE 10000 /* ms: a condition not met by then fails the test */

static struct {
    pid_t pid;
    char dir[64], sock[128], url[160];
    int port;
} R;

/* --- the redis-server ------------------------------------------------------------- */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int free_tcp_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("free_tcp_port");
        exit(2);
    }
    close(fd);
    return ntohs(sa.sin_port);
}

static bool redis_pings(void)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(R.sock, tv);
    bool ok = false;
    if (c != NULL && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r != NULL)
            freeReplyObject(r);
    }
    if (c != NULL)
        redisFree(c);
    return ok;
}

static void redis_start(void)
{
    R.pid = fork();
    if (R.pid < 0) {
        perror("fork");
        exit(2);
    }
    if (R.pid == 0) {
        char port[16], logfile[128];
        snprintf(port, sizeof(port), "%d", R.port);
        snprintf(logfile, sizeof(logfile), "%s/redis.log", R.dir);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
               "--unixsocket", R.sock, "--unixsocketperm", "700", "--save", "", "--appendonly",
               "no", "--daemonize", "no", "--logfile", logfile, "--dir", R.dir, (char *)NULL);
        _exit(127);
    }
    uint64_t deadline = pc_mono_ms() + 10000;
    while (!redis_pings()) {
        if (pc_mono_ms() > deadline || waitpid(R.pid, NULL, WNOHANG) == R.pid) {
            fprintf(stderr, "redis-server did not start (see %s/redis.log)\n", R.dir);
            exit(2);
        }
        sleep_ms(10);
    }
}

static void redis_kill(void)
{
    if (R.pid > 0) {
        kill(R.pid, SIGKILL);
        waitpid(R.pid, NULL, 0);
    }
    R.pid = 0;
}

static void cleanup(void)
{
    char path[160];
    redis_kill();
    snprintf(path, sizeof(path), "%s/redis.log", R.dir);
    unlink(path);
    unlink(R.sock);
    rmdir(R.dir);
}

static void on_signal(int sig)
{
    (void)sig;
    _exit(3);
}

static void setup(void)
{
    strcpy(R.dir, "/tmp/pc-vsync-XXXXXX");
    if (mkdtemp(R.dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(R.sock, sizeof(R.sock), "%s/redis.sock", R.dir);
    R.port = free_tcp_port();
    snprintf(R.url, sizeof(R.url), "redis://127.0.0.1:%d/0", R.port);
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
}

/* The test's own blocking connection (for writing records and checking). */
static redisContext *admin(void)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(R.sock, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "admin connection failed\n");
        exit(2);
    }
    return c;
}

static void run(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "admin %s failed: %s\n", argv[0], r ? r->str : c->errstr);
        exit(2);
    }
    freeReplyObject(r);
}

static void run_fmt(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "admin command failed: %s\n", r ? r->str : c->errstr);
        exit(2);
    }
    freeReplyObject(r);
}

static void set_schema(redisContext *c, long v)
{
    run_fmt(c, "SET %s %ld", PC_SCHEMA_KEY, v);
}

/* --- records ---------------------------------------------------------------------- */

static void key_of(unsigned n, unsigned char key[VINDEX_KEY_LEN])
{
    unsigned char in[5] = {'k'};
    memcpy(in + 1, &n, 4);
    pc_sha256(in, sizeof(in), key);
}

static void tenant_of(unsigned n, unsigned char t[VINDEX_TENANT_LEN])
{
    unsigned char in[5] = {'t'}, h[PC_SHA256_LEN];
    memcpy(in + 1, &n, 4);
    pc_sha256(in, sizeof(in), h);
    memcpy(t, h, VINDEX_TENANT_LEN);
}

static void part_of(unsigned n, unsigned char p[VINDEX_PART_LEN])
{
    unsigned char in[5] = {'p'};
    memcpy(in + 1, &n, 4);
    pc_sha256(in, sizeof(in), p);
}

/* A deterministic unit vector for key n (dim d). */
static void vec_of(unsigned n, float *v, unsigned d)
{
    double norm = 0;
    for (unsigned i = 0; i < d; i++) {
        v[i] = (float)sin(n * 0.7 + i * 1.3 + n * i * 0.01);
        norm += (double)v[i] * v[i];
    }
    for (unsigned i = 0; i < d; i++)
        v[i] = (float)(v[i] / sqrt(norm));
}

struct rec_opts {
    const char *space;
    unsigned dim;
    int64_t expires_ms;
    unsigned tenant, part;
};

static void encode(unsigned n, const struct rec_opts *o, struct pc_buf *out)
{
    float v[64];
    vec_of(n, v, o->dim);
    struct vrec r = {.dim = o->dim,
                     .created_ms = pc_wall_ms(),
                     .expires_ms = o->expires_ms,
                     .vec = v,
                     .text = "what is the question",
                     .text_len = 20};
    snprintf(r.space, sizeof(r.space), "%s", o->space);
    part_of(o->part, r.partition);
    if (vrec_encode(&r, VREC_F16, out) < 0) {
        fprintf(stderr, "encode failed\n");
        exit(2);
    }
}

static const struct rec_opts DEFAULT = {SPACE, DIM, 0, 1, 1};

/* SET the record of key n with its member (and, with event, XADD add), as the cache module
 * would. */
static void put(redisContext *c, unsigned n, const struct rec_opts *o, bool event)
{
    struct pc_buf rec = PC_BUF_INIT;
    unsigned char key[VINDEX_KEY_LEN], tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    encode(n, o, &rec);
    key_of(n, key);
    tenant_of(o->tenant, tenant);
    part_of(o->part, part);
    struct vsync_argv a;
    vsync_argv_set(&a, tenant, key, rec.data, rec.len, 3600000);
    run(c, a.argc, a.argv, a.lens);
    int64_t exp = o->expires_ms > 0 ? o->expires_ms : pc_wall_ms() + 3600000;
    vsync_argv_member_add(&a, tenant, key, part, exp);
    run(c, a.argc, a.argv, a.lens);
    if (event) {
        vsync_argv_add(&a, tenant, key, rec.data, rec.len, true);
        run(c, a.argc, a.argv, a.lens);
    }
    pc_buf_free(&rec);
}

static void del(redisContext *c, unsigned n, unsigned tenant_n)
{
    unsigned char key[VINDEX_KEY_LEN], tenant[VINDEX_TENANT_LEN];
    key_of(n, key);
    tenant_of(tenant_n, tenant);
    struct vsync_argv a;
    vsync_argv_unlink(&a, tenant, key);
    run(c, a.argc, a.argv, a.lens);
    vsync_argv_del(&a, tenant, key);
    run(c, a.argc, a.argv, a.lens);
}

/* --- the index, seen from the test ------------------------------------------------- */

static size_t nvec(struct vindex *v)
{
    struct vindex_stats st;
    vindex_get_stats(v, &st);
    return st.vectors;
}

/* Whether key n is found by a search for its own vector in its partition. */
static bool found(struct vindex *v, unsigned n, unsigned part)
{
    float q[DIM];
    unsigned char p[VINDEX_PART_LEN], key[VINDEX_KEY_LEN];
    vec_of(n, q, DIM);
    part_of(part, p);
    key_of(n, key);
    struct vindex_hit h[4];
    size_t got = vindex_search(v, p, q, 4, 0.999f, pc_wall_ms(), h);
    for (size_t i = 0; i < got; i++)
        if (memcmp(h[i].key, key, VINDEX_KEY_LEN) == 0)
            return true;
    return false;
}

typedef bool cond_fn(void *a, uintptr_t b);

/* Poll cond until it holds (true) or DEADLINE passes (false); the time taken in *ms. */
static bool await(cond_fn *cond, void *a, uintptr_t b, uint64_t *ms)
{
    uint64_t t0 = pc_mono_ms();
    while (!cond(a, b)) {
        if (pc_mono_ms() - t0 > DEADLINE)
            return false;
        sleep_ms(2);
    }
    if (ms != NULL)
        *ms = pc_mono_ms() - t0;
    return true;
}

static bool has_n(void *v, uintptr_t n)
{
    return nvec(v) == n;
}

static bool is_found(void *v, uintptr_t n)
{
    return found(v, (unsigned)n, 1);
}

static bool not_found(void *v, uintptr_t n)
{
    return !found(v, (unsigned)n, 1);
}

static bool ready(void *s, uintptr_t want)
{
    return vsync_ready(s) == (bool)want;
}

static bool loads_reach(void *s, uintptr_t n)
{
    struct vsync_counters c;
    vsync_get_counters(s, &c);
    return c.loads >= n;
}

/* The handler counts an event after applying it: a test that saw the index change awaits it. */
static bool events_reach(void *s, uintptr_t n)
{
    struct vsync_counters c;
    vsync_get_counters(s, &c);
    return c.events >= n;
}

/* Whether this (fresh) Redis has answered a GET: only the loader sends one. */
static bool schema_read(void *c, uintptr_t unused)
{
    (void)unused;
    redisReply *r = redisCommand(c, "INFO commandstats");
    bool yes = r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, "cmdstat_get:") != NULL;
    if (r != NULL)
        freeReplyObject(r);
    return yes;
}

/*
 * What the semantic module sets up: a bounded (lazy) index, the loader, and
 * the process's follower handing the stream's entries to it.
 */
struct rig {
    struct vindex *v;
    struct vsync *s;
    struct follow *f;
};

static void rig_entry(void *arg, const redisReply *fields)
{
    vsync_on_entry(arg, fields);
}

static int rig_start(void *arg, struct rcli *k)
{
    (void)k;
    vsync_on_start(arg);
    return 0;
}

static void rig_down(void *arg)
{
    vsync_on_down(arg);
}

static struct rig rig_up(size_t max_bytes, size_t count, int64_t max_ttl_ms, struct stats *row)
{
    struct rig g;
    struct vindex_opts vo = {.dim = DIM, .lazy = true, .max_bytes = max_bytes, .row = row};
    g.v = vindex_create(&vo);
    struct vsync_opts o = {
        .url = R.url, .space = SPACE, .index = g.v, .max_ttl_ms = max_ttl_ms, .row = row};
    g.s = vsync_start(&o);
    static struct stats follow_row; /* the test's: freed with no registry to empty */
    struct follow_opts fo = {
        .url = R.url, .timeout_ms = 1000, .block_ms = 200, .count = count, .row = &follow_row};
    g.f = follow_create(&fo);
    struct follow_handler h = {.name = "vector index",
                               .stream = vsync_stream_key(),
                               .start = rig_start,
                               .entry = rig_entry,
                               .down = rig_down,
                               .arg = g.s};
    T_CHECK(g.s != NULL && g.f != NULL && follow_add(g.f, &h) == 0 && follow_start(g.f) == 0);
    return g;
}

static void rig_down_all(struct rig *g)
{
    follow_destroy(&g->f);
    vsync_stop(&g->s);
    vindex_destroy(&g->v);
}

/* Load partition n (of tenant t), waiting for it; its state then. */
static int load(struct rig *g, unsigned t, unsigned n)
{
    unsigned char tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    tenant_of(t, tenant);
    part_of(n, part);
    return vsync_load_wait(g->s, tenant, part, DEADLINE);
}

/* Whether the loader is connected (it loads nothing before). */
static bool loader_up(void *s, uintptr_t unused)
{
    (void)unused;
    struct vsync_counters c;
    vsync_get_counters(s, &c);
    return c.loader_up;
}

/* The member lists are marked built (fresh Redis: the loader's one-time scan is over). */
static bool lists_built(void *c, uintptr_t unused)
{
    (void)unused;
    redisReply *r = redisCommand(c, "GET %spm-ready", PC_KEY_PREFIX);
    bool yes = r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0;
    if (r != NULL)
        freeReplyObject(r);
    return yes;
}

static bool build_unlocked(void *c, uintptr_t unused)
{
    (void)unused;
    redisReply *r = redisCommand(c, "EXISTS %spm-build", PC_KEY_PREFIX);
    bool yes = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 0;
    if (r != NULL)
        freeReplyObject(r);
    return yes;
}

static long long zscore_ms(redisContext *c, const char *key, const char *member)
{
    redisReply *r = redisCommand(c, "ZSCORE %s %s", key, member);
    long long v = r != NULL && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

static long long int_reply(redisContext *c, const char *fmt, const char *key)
{
    redisReply *r = redisCommand(c, fmt, key);
    long long v = r != NULL && r->type == REDIS_REPLY_INTEGER ? r->integer : -99;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* A member of a list: the entry's key in hex (the tenant is the list's). */
static const char *member_of(const unsigned char key[VINDEX_KEY_LEN], char out[65])
{
    pc_hex(key, VINDEX_KEY_LEN, out);
    return out;
}

/* --- tests ---------------------------------------------------------------------------- */

static void test_names(void)
{
    unsigned char t[VINDEX_TENANT_LEN], k[VINDEX_KEY_LEN], t2[VINDEX_TENANT_LEN],
        k2[VINDEX_KEY_LEN], p[VINDEX_PART_LEN];
    for (int i = 0; i < 8; i++)
        t[i] = (unsigned char)(0x10 * i + 1);
    for (int i = 0; i < 32; i++)
        k[i] = (unsigned char)(0xff - i);
    memset(p, 0xab, sizeof(p));
    char name[VSYNC_KEY_MAX], id[VSYNC_ID_LEN + 1];
    size_t n = vsync_vector_key(t, k, name);
    T_CHECK_STR(name, PC_KEY_PREFIX "v:{0111213141516171:fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0"
                                    "efeeedecebeae9e8e7e6e5e4e3e2e1e0}");
    T_CHECK_INT(n, strlen(name));
    n = vsync_members_key(t, p, name);
    T_CHECK_STR(name, PC_KEY_PREFIX "pm:{0111213141516171:abababababababababababababababab"
                                    "abababababababababababababababab}");
    T_CHECK_INT(n, strlen(name));
    vsync_members_pattern("0111213141516171", name);
    T_CHECK_STR(name, PC_KEY_PREFIX "pm:{0111213141516171:*");
    vsync_members_pattern(NULL, name);
    T_CHECK_STR(name, PC_KEY_PREFIX "pm:{*");
    T_CHECK_STR(vsync_stream_key(), PC_KEY_PREFIX "vs");
    vsync_id(t, k, id);
    T_CHECK_INT(vsync_parse_id(id, strlen(id), t2, k2), 0);
    T_CHECK(memcmp(t, t2, sizeof(t)) == 0 && memcmp(k, k2, sizeof(k)) == 0);
    T_CHECK_INT(vsync_parse_id(id, strlen(id) - 1, t2, k2), -1);
    id[3] = 'A'; /* upper case is not what writers produce */
    T_CHECK_INT(vsync_parse_id(id, strlen(id), t2, k2), -1);
    id[3] = '1';
    id[16] = '-';
    T_CHECK_INT(vsync_parse_id(id, strlen(id), t2, k2), -1);

    struct vsync_argv a;
    vsync_argv_add(&a, t, k, "REC", 3, true);
    T_CHECK_INT(a.argc, 14);
    T_CHECK_STR(a.argv[0], "XADD");
    T_CHECK(a.lens[4] == 6 && memcmp(a.argv[4], "100000", 6) == 0);
    T_CHECK(a.lens[11] == 3 && memcmp(a.argv[11], "REC", 3) == 0);
    T_CHECK(a.lens[12] == 1 && a.argv[12][0] == 'm' && a.argv[13][0] == '1');
    vsync_argv_add(&a, t, k, "REC", 3, false); /* its member not listed: its readers list it */
    T_CHECK_INT(a.argc, 12);
    T_CHECK(a.lens[11] == 3 && memcmp(a.argv[11], "REC", 3) == 0);
    vsync_argv_flush(&a, NULL);
    T_CHECK_INT(a.argc, 8);
    vsync_argv_flush(&a, t);
    T_CHECK_INT(a.argc, 10);
    T_CHECK(a.lens[9] == 16 && memcmp(a.argv[9], "0111213141516171", 16) == 0);
    vsync_argv_set(&a, t, k, "REC", 3, 5000);
    T_CHECK_INT(a.argc, 5);
    T_CHECK(a.lens[4] == 4 && memcmp(a.argv[4], "5000", 4) == 0);
    vsync_argv_member_add(&a, t, k, p, 1234);
    T_CHECK_INT(a.argc, 4);
    T_CHECK(strcmp(a.argv[0], "ZADD") == 0 && a.lens[2] == 4 && a.lens[3] == 64);
    vsync_argv_member_trim(&a, t, p, 99);
    T_CHECK(a.argc == 4 && a.lens[3] == 3 && memcmp(a.argv[3], "(99", 3) == 0);
}

/* Loading on first use, and the stream's events, while Redis stays up. */
static void test_load_and_stream(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    for (unsigned i = 0; i < 300; i++)
        put(c, i, &DEFAULT, false);
    struct rec_opts other = DEFAULT, dim8 = DEFAULT, elsewhere = DEFAULT;
    other.space = "another-embedder-v2";
    dim8.dim = 8;
    elsewhere.part = 2;
    for (unsigned i = 1000; i < 1020; i++)
        put(c, i, &other, false);
    for (unsigned i = 2000; i < 2010; i++)
        put(c, i, &dim8, false);
    for (unsigned i = 4000; i < 4040; i++)
        put(c, i, &elsewhere, false);
    /* A member whose record is not one: listed, then rejected when read. */
    unsigned char t1[VINDEX_TENANT_LEN], k7[VINDEX_KEY_LEN], p1[VINDEX_PART_LEN];
    tenant_of(1, t1);
    key_of(7777, k7);
    part_of(1, p1);
    char vkey[VSYNC_KEY_MAX];
    vsync_vector_key(t1, k7, vkey);
    run_fmt(c, "SET %s %s", vkey, "not a record");
    struct vsync_argv a;
    vsync_argv_member_add(&a, t1, k7, p1, pc_wall_ms() + 60000);
    run(c, a.argc, a.argv, a.lens);
    /* A member whose record has gone (deleted behind the lists' back): trimmed by the load. */
    unsigned char k299[VINDEX_KEY_LEN];
    char id299[VSYNC_ID_LEN + 1], mkey[VSYNC_KEY_MAX];
    key_of(299, k299);
    vsync_vector_key(t1, k299, vkey);
    member_of(k299, id299);
    vsync_members_key(t1, p1, mkey);
    run_fmt(c, "DEL %s", vkey);

    struct rig g = rig_up(0, 64, 0, NULL);
    T_CHECK(await(ready, g.s, 1, NULL));
    T_CHECK(await(loader_up, g.s, 0, NULL));
    T_CHECK(await(lists_built, c, 0, NULL));
    T_CHECK_INT(nvec(g.v), 0); /* nothing is loaded at start */
    T_CHECK(!found(g.v, 17, 1));
    uint64_t t0 = pc_mono_ms();
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT);
    fprintf(stderr, "    a partition of 331 members loaded in %llu ms\n",
            (unsigned long long)(pc_mono_ms() - t0));
    struct vsync_counters k;
    vsync_get_counters(g.s, &k);
    T_CHECK_INT(k.loads, 1);
    T_CHECK_INT(k.loaded, 299);
    T_CHECK_INT(k.skipped, 30);
    T_CHECK_INT(k.corrupt, 1);
    T_CHECK_INT(nvec(g.v), 299); /* partition 2's vectors stay in Redis */
    T_CHECK_INT(zscore_ms(c, mkey, id299), -1);
    T_CHECK(found(g.v, 17, 1));
    T_CHECK(!found(g.v, 1003, 1));

    /* Stream events of the loaded partition are applied; those of another are not. */
    uint64_t ms_add, ms_del, ms_flush;
    put(c, 500, &DEFAULT, true);
    T_CHECK(await(is_found, g.v, 500, &ms_add));
    del(c, 17, 1);
    T_CHECK(await(not_found, g.v, 17, &ms_del));
    T_CHECK_INT(nvec(g.v), 299);
    put(c, 4100, &elsewhere, true); /* partition 2 is not loaded: ignored */
    put(c, 1500, &other, true);     /* another space: skipped */
    struct rec_opts t2 = DEFAULT;
    t2.tenant = 2;
    for (unsigned i = 600; i < 610; i++)
        put(c, i, &t2, true);
    T_CHECK(await(has_n, g.v, 309, NULL));
    unsigned char tenant[VINDEX_TENANT_LEN];
    tenant_of(2, tenant);
    vsync_argv_flush(&a, tenant);
    run(c, a.argc, a.argv, a.lens);
    T_CHECK(await(has_n, g.v, 299, &ms_flush));
    T_CHECK(!found(g.v, 605, 1));
    T_CHECK(found(g.v, 500, 1));
    fprintf(stderr, "    applied after: add %llu ms, del %llu ms, tenant flush %llu ms\n",
            (unsigned long long)ms_add, (unsigned long long)ms_del, (unsigned long long)ms_flush);
    T_CHECK(await(events_reach, g.s, 1 + 1 + 1 + 10 + 1, NULL));
    vsync_get_counters(g.s, &k);
    T_CHECK_INT(k.events, 1 + 1 + 1 + 10 + 1);
    T_CHECK_INT(k.ignored, 1);
    T_CHECK_INT(k.skipped, 31);

    /* Partition 2 loads when asked: the event that was ignored is in its member list. */
    T_CHECK_INT(load(&g, 1, 2), VINDEX_RESIDENT);
    T_CHECK_INT(nvec(g.v), 299 + 41);
    vsync_argv_flush(&a, NULL);
    run(c, a.argc, a.argv, a.lens);
    T_CHECK(await(has_n, g.v, 0, NULL));

    /* Malformed events are counted, not fatal. */
    run_fmt(c, "XADD %s * op add k nothex r x", vsync_stream_key());
    run_fmt(c, "XADD %s * op nonsense", vsync_stream_key());
    put(c, 42, &DEFAULT, true);
    T_CHECK(await(is_found, g.v, 42, NULL));
    vsync_get_counters(g.s, &k);
    T_CHECK_INT(k.corrupt, 3);
    T_CHECK(k.ready);
    rig_down_all(&g);
    T_CHECK(g.s == NULL && g.f == NULL);
    redisFree(c);
}

/* Forged events, records and members: rejected, counted in the row, the index untouched. */
static struct stats forged_row;

static bool rejects_reach(void *unused, uintptr_t n)
{
    (void)unused;
    return __atomic_load_n(&forged_row.v[STAT_semantic_sync_rejected], __ATOMIC_RELAXED) >= n;
}

static void test_forged(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    run_fmt(c, "SET %spm-ready 1", PC_KEY_PREFIX);
    struct rec_opts forever = DEFAULT, far = DEFAULT, ok = DEFAULT, other_part = DEFAULT;
    ok.expires_ms = pc_wall_ms() + 60000;
    far.expires_ms = pc_wall_ms() + 7200000; /* beyond the loader's max_ttl_ms */
    other_part.part = 9;
    put(c, 1, &ok, false);
    put(c, 2, &forever, false); /* expires_ms 0: no writer makes one */
    put(c, 9, &other_part, false);

    /* Members no writer makes, in partition 1's list. */
    unsigned char t1[VINDEX_TENANT_LEN], t5[VINDEX_TENANT_LEN], p1[VINDEX_PART_LEN],
        k9[VINDEX_KEY_LEN];
    tenant_of(1, t1);
    tenant_of(5, t5);
    part_of(1, p1);
    key_of(9, k9);
    char mkey[VSYNC_KEY_MAX], id[VSYNC_ID_LEN + 1];
    vsync_members_key(t1, p1, mkey);
    int64_t soon = pc_wall_ms() + 60000;
    run_fmt(c, "ZADD %s %lld %s", mkey, (long long)soon, "not an id");
    vsync_id(t5, k9, id);
    run_fmt(c, "ZADD %s %lld %s", mkey, (long long)soon, id); /* "tenant:key": not a member */
    char m[65];
    run_fmt(c, "ZADD %s %lld %s", mkey, (long long)soon, member_of(k9, m)); /* partition 9's */
    key_of(10, k9);
    run_fmt(c, "ZADD %s %s %s", mkey, "1e300", member_of(k9, m)); /* beyond any TTL */
    key_of(11, k9);
    run_fmt(c, "ZADD %s %lld.5 %s", mkey, (long long)soon, member_of(k9, m)); /* not whole ms */

    struct rig g = rig_up(0, 0, 3600000, &forged_row);
    T_CHECK(await(ready, g.s, 1, NULL));
    T_CHECK(await(loader_up, g.s, 0, NULL));
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT);
    T_CHECK_INT(nvec(g.v), 1);
    T_CHECK(found(g.v, 1, 1));
    T_CHECK(!found(g.v, 9, 1));
    T_CHECK_INT(forged_row.v[STAT_semantic_members_rejected], 5);
    T_CHECK(await(rejects_reach, NULL, 1, NULL)); /* the record that never expires */

    key_of(1, k9);
    vsync_id(t1, k9, id);
    run_fmt(c, "XADD %s * op del k %s0", vsync_stream_key(), id);            /* key too long */
    run_fmt(c, "XADD %s * op del k %s k %s", vsync_stream_key(), id, id);    /* key twice */
    run_fmt(c, "XADD %s * op flush t 00112233445566ZZ", vsync_stream_key()); /* not hex */
    run_fmt(c, "XADD %s * op drop k %s", vsync_stream_key(), id);            /* unknown op */
    run_fmt(c, "XADD %s * op add k %s r x m 2", vsync_stream_key(), id);     /* m is 1 or absent */
    put(c, 3, &far, true);                                                   /* expiry too far */
    put(c, 4, &ok, true);
    T_CHECK(await(is_found, g.v, 4, NULL));
    T_CHECK(await(rejects_reach, NULL, 1 + 6, NULL));
    T_CHECK(found(g.v, 1, 1)); /* none of the forged deletes or flushes was applied */
    T_CHECK(!found(g.v, 3, 1));
    struct vsync_counters k;
    vsync_get_counters(g.s, &k);
    T_CHECK_INT(k.corrupt, 5 + 7);
    T_CHECK_INT(forged_row.v[STAT_semantic_sync_rejected], 7);
    rig_down_all(&g);
    redisFree(c);
}

/* The cache module's path: a worker's store sends the commands. */
static struct event_base *base;

static bool store_is_ready(void *st, uintptr_t unused)
{
    (void)unused;
    event_base_loop(base, EVLOOP_NONBLOCK);
    return store_ready(st);
}

static bool found_pumping(void *v, uintptr_t n)
{
    event_base_loop(base, EVLOOP_NONBLOCK); /* the store's writes go out from the loop */
    return found(v, (unsigned)n, 1);
}

static bool gone_pumping(void *v, uintptr_t n)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
    return !found(v, (unsigned)n, 1);
}

static void test_store_writers(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    struct rig g = rig_up(0, 0, 0, NULL);
    T_CHECK(await(ready, g.s, 1, NULL));
    T_CHECK(await(loader_up, g.s, 0, NULL));
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT); /* empty, and known to be */

    base = event_base_new();
    static struct stats st;
    struct store_opts so = {.url = R.url, .timeout_ms = 1000};
    struct store *store = store_create(base, &so, &st);
    store_start(store);
    T_CHECK(await(store_is_ready, store, 0, NULL));

    struct pc_buf rec = PC_BUF_INIT;
    unsigned char key[VINDEX_KEY_LEN], tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    encode(77, &DEFAULT, &rec);
    key_of(77, key);
    tenant_of(1, tenant);
    part_of(1, part);
    int64_t exp = pc_wall_ms() + 60000;
    T_CHECK_INT(
        vsync_store_put(store, tenant, key, part, rec.data, rec.len, 60000, exp, NULL, NULL), 0);
    T_CHECK(await(found_pumping, g.v, 77, NULL));
    char name[VSYNC_KEY_MAX], mkey[VSYNC_KEY_MAX], id[VSYNC_ID_LEN + 1];
    vsync_vector_key(tenant, key, name);
    vsync_members_key(tenant, part, mkey);
    member_of(key, id);
    T_CHECK(int_reply(c, "PTTL %s", name) > 50000);
    T_CHECK_INT(zscore_ms(c, mkey, id), exp);
    long long pttl = int_reply(c, "PTTL %s", mkey); /* the list goes with its last member */
    T_CHECK(pttl > 50000 && pttl <= 60000);
    T_CHECK_INT(vsync_store_del(store, tenant, key, part), 0);
    T_CHECK(await(gone_pumping, g.v, 77, NULL));
    T_CHECK_INT(int_reply(c, "EXISTS %s", name), 0);
    T_CHECK_INT(int_reply(c, "EXISTS %s", mkey), 0); /* its one member gone: the list too */
    T_CHECK_INT(
        vsync_store_put(store, tenant, key, part, rec.data, rec.len, 60000, exp, NULL, NULL), 0);
    T_CHECK(await(found_pumping, g.v, 77, NULL));
    T_CHECK_INT(vsync_store_flush(store, NULL), 0);
    T_CHECK(await(gone_pumping, g.v, 77, NULL));

    pc_buf_free(&rec);
    store_destroy(&store);
    event_base_free(base);
    rig_down_all(&g);
    redisFree(c);
}

/* Events trimmed before the follower got to them: what is loaded is read again. */
static void test_trimmed_events(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    struct rig g = rig_up(0, 10, 0, NULL);
    T_CHECK(await(ready, g.s, 1, NULL));
    T_CHECK(await(loader_up, g.s, 0, NULL));
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT);
    /* 100 records and their events, then a trim to 20, all at once. */
    run_fmt(c, "MULTI");
    for (unsigned i = 0; i < 100; i++)
        put(c, 5000 + i, &DEFAULT, true);
    run_fmt(c, "XTRIM %s MAXLEN 20", vsync_stream_key());
    run_fmt(c, "EXEC");
    T_CHECK(await(loads_reach, g.s, 2, NULL));
    T_CHECK(await(has_n, g.v, 100, NULL));
    T_CHECK(found(g.v, 5003, 1)); /* its event was trimmed: the reload found it */
    rig_down_all(&g);
    redisFree(c);
}

/* Redis dies and comes back empty: the follower and the loader reconnect, the loader waits
 * for the schema, and what was loaded is read again (dropping what the new Redis lacks). */
static void test_restart(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    for (unsigned i = 0; i < 50; i++)
        put(c, i, &DEFAULT, false);
    redisFree(c);
    struct rig g = rig_up(0, 0, 0, NULL);
    T_CHECK(await(ready, g.s, 1, NULL));
    T_CHECK(await(loader_up, g.s, 0, NULL));
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT);
    T_CHECK_INT(nvec(g.v), 50);

    redis_kill();
    T_CHECK(await(ready, g.s, 0, NULL));
    T_CHECK_INT(nvec(g.v), 50); /* the index keeps serving what it has */
    struct vsync_counters k;
    vsync_get_counters(g.s, &k);
    uint64_t loads = k.loads;

    redis_start();
    c = admin();
    set_schema(c, migrate_latest() - 1); /* not migrated yet: the loader waits */
    for (unsigned i = 100; i < 130; i++)
        put(c, i, &DEFAULT, true);
    T_CHECK(await(schema_read, c, 0, NULL)); /* the loader has looked at the schema ... */
    vsync_get_counters(g.s, &k);
    T_CHECK(!k.loader_up); /* ... and waits */
    /* What was loaded stays meanwhile (the follower, back on the stream, may have applied the
     * new Redis's 30 add events already: an exact count of 50 failed now and then). */
    T_CHECK(found(g.v, 3, 1));
    T_CHECK(nvec(g.v) >= 50);
    set_schema(c, migrate_latest());
    T_CHECK(await(loads_reach, g.s, loads + 1, NULL));
    T_CHECK(await(has_n, g.v, 30, NULL));
    T_CHECK(!found(g.v, 3, 1));
    T_CHECK(found(g.v, 120, 1));
    put(c, 131, &DEFAULT, true);
    T_CHECK(await(is_found, g.v, 131, NULL));
    rig_down_all(&g);
    redisFree(c);
}

/* With a small budget: partitions come and go, the index stays under it, and a partition
 * evicted is found again once asked for. */
static struct stats budget_row;

static void test_budget(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    run_fmt(c, "SET %spm-ready 1", PC_KEY_PREFIX);
    for (unsigned p = 1; p <= 40; p++) {
        struct rec_opts o = DEFAULT;
        o.part = p;
        for (unsigned i = 0; i < 100; i++)
            put(c, p * 1000 + i, &o, false);
    }
    size_t budget = 64 * 1024; /* about 40% of the 4000 vectors */
    struct rig g = rig_up(budget, 0, 0, &budget_row);
    T_CHECK(await(loader_up, g.s, 0, NULL));
    struct vindex_stats vs;
    uint64_t peak = 0;
    for (unsigned round = 0; round < 2; round++)
        for (unsigned p = 1; p <= 40; p++) {
            T_CHECK_INT(load(&g, 1, p), VINDEX_RESIDENT);
            T_CHECK(found(g.v, p * 1000 + 7, p));
            peak = PC_MAX(peak, budget_row.v[STAT_semantic_index_bytes]);
        }
    vindex_get_stats(g.v, &vs);
    fprintf(stderr, "    budget %zu: peak %llu bytes, %zu partitions loaded, %llu evictions\n",
            budget, (unsigned long long)peak, vs.loaded, (unsigned long long)vs.evictions);
    T_CHECK(peak > 0 && peak <= budget);
    T_CHECK(vs.evictions >= 40);
    T_CHECK(vs.loaded < 40);
    T_CHECK_INT(budget_row.v[STAT_semantic_index_evictions], vs.evictions);
    /* Each partition once per round, and again when it had been evicted (all but those
     * still held from the round before). */
    T_CHECK_INT(budget_row.v[STAT_semantic_index_loads], vs.loads);
    T_CHECK(vs.loads >= 80 - vs.loaded);
    rig_down_all(&g);
    redisFree(c);
}

/*
 * A lookup's load goes ahead of a re-sync's: after a reconnect every partition in memory is
 * read again (they serve meanwhile), and a lookup of one not in memory, queued behind them,
 * waited for them all and missed. Here 300 partitions are read again when a lookup asks for
 * another: it must be loaded before most of them (loads are counted before the waiters wake).
 */
#define FIRST_PARTS 300

static void test_lookups_first(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    run_fmt(c, "SET %spm-ready 1", PC_KEY_PREFIX);
    for (unsigned p = 1; p <= FIRST_PARTS + 1; p++) {
        struct rec_opts o = DEFAULT;
        o.part = p;
        put(c, 9000 + p, &o, false);
    }
    struct vindex_opts vo = {.dim = DIM, .lazy = true};
    struct vindex *v = vindex_create(&vo);
    struct vsync_opts o = {.url = R.url, .space = SPACE, .index = v};
    struct vsync *s = vsync_start(&o);
    T_CHECK(s != NULL);
    unsigned char tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    tenant_of(1, tenant);
    for (unsigned p = 1; p <= FIRST_PARTS; p++) {
        part_of(p, part);
        T_CHECK_INT(vsync_load_wait(s, tenant, part, DEADLINE), VINDEX_RESIDENT);
    }
    struct vsync_counters k;
    vsync_get_counters(s, &k);
    T_CHECK_INT(k.loads, FIRST_PARTS);
    vsync_on_start(s); /* the 300 are read again */
    part_of(FIRST_PARTS + 1, part);
    T_CHECK_INT(vsync_load_wait(s, tenant, part, DEADLINE), VINDEX_RESIDENT);
    vsync_get_counters(s, &k);
    fprintf(stderr, "    the lookup's partition loaded after %llu of %d reloads\n",
            (unsigned long long)(k.loads - 1 - FIRST_PARTS), FIRST_PARTS);
    T_CHECK(k.loads < 2 * FIRST_PARTS);
    T_CHECK(found(v, 9000 + FIRST_PARTS + 1, FIRST_PARTS + 1));
    T_CHECK(await(loads_reach, s, 2 * FIRST_PARTS + 1, NULL));
    vsync_stop(&s);
    vindex_destroy(&v);
    redisFree(c);
}

static bool drained(void *s, uintptr_t unused)
{
    (void)unused;
    struct vsync_counters c;
    vsync_get_counters(s, &c);
    return c.queued == 0;
}

/*
 * A reconnect re-syncs twice (the loader reconnects; the follower starts again at the
 * stream's end), one right after the other: the second queues every partition in memory
 * again, and the first one's reads still queued are the same partitions: they go, so each is
 * read once more (not twice). Redis is paused meanwhile, so both queue before any is read.
 */
static void test_resync_once(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    run_fmt(c, "SET %spm-ready 1", PC_KEY_PREFIX);
    for (unsigned p = 1; p <= FIRST_PARTS; p++) {
        struct rec_opts o = DEFAULT;
        o.part = p;
        put(c, 9000 + p, &o, false);
    }
    struct vindex_opts vo = {.dim = DIM, .lazy = true};
    struct vindex *v = vindex_create(&vo);
    struct vsync_opts o = {.url = R.url, .space = SPACE, .index = v, .timeout_ms = DEADLINE};
    struct vsync *s = vsync_start(&o);
    T_CHECK(s != NULL);
    unsigned char tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    tenant_of(1, tenant);
    for (unsigned p = 1; p <= FIRST_PARTS; p++) {
        part_of(p, part);
        T_CHECK_INT(vsync_load_wait(s, tenant, part, DEADLINE), VINDEX_RESIDENT);
    }
    run_fmt(c, "CLIENT PAUSE 500 ALL");
    vsync_on_start(s);
    vsync_on_start(s);
    T_CHECK(await(drained, s, 0, NULL));
    /* nothing queued; the loader's last read may still be on its way (counted once done) */
    T_CHECK(await(loads_reach, s, 2 * FIRST_PARTS, NULL));
    struct vsync_counters k;
    vsync_get_counters(s, &k);
    fprintf(stderr, "    %d partitions, two re-syncs: %llu reads\n", FIRST_PARTS,
            (unsigned long long)(k.loads - FIRST_PARTS));
    /* the first re-sync's read in flight when the second came, at most, is read twice */
    T_CHECK(k.loads >= 2 * FIRST_PARTS && k.loads <= 2 * FIRST_PARTS + 1);
    vsync_stop(&s);
    vindex_destroy(&v);
    redisFree(c);
}

/* Vectors stored before member lists existed are listed once; an older writer's add event
 * (no m) gets its member from the loader. */
static void test_lists_built(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    struct pc_buf rec = PC_BUF_INIT;
    unsigned char key[VINDEX_KEY_LEN], tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN];
    tenant_of(1, tenant);
    part_of(1, part);
    struct rec_opts o = DEFAULT;
    o.expires_ms = pc_wall_ms() + 600000;
    for (unsigned i = 0; i < 700; i++) { /* as an older version wrote them: no member */
        encode(i, &o, &rec);
        key_of(i, key);
        struct vsync_argv a;
        vsync_argv_set(&a, tenant, key, rec.data, rec.len, 600000);
        run(c, a.argc, a.argv, a.lens);
        pc_buf_reset(&rec);
    }
    struct rig g = rig_up(0, 0, 0, NULL);
    T_CHECK(await(lists_built, c, 0, NULL));
    /* the lease goes in the command after the mark */
    T_CHECK(await(build_unlocked, c, 0, NULL));
    char mkey[VSYNC_KEY_MAX];
    vsync_members_key(tenant, part, mkey);
    T_CHECK_INT(int_reply(c, "ZCARD %s", mkey), 700);
    T_CHECK_INT(int_reply(c, "EXISTS %spm-build", PC_KEY_PREFIX), 0);
    T_CHECK_INT(load(&g, 1, 1), VINDEX_RESIDENT);
    T_CHECK_INT(nvec(g.v), 700);
    /* An add event without m: its record is listed by the loader. */
    encode(900, &o, &rec);
    key_of(900, key);
    char id[VSYNC_ID_LEN + 1];
    vsync_id(tenant, key, id);
    struct vsync_argv a;
    vsync_argv_set(&a, tenant, key, rec.data, rec.len, 600000);
    run(c, a.argc, a.argv, a.lens);
    const char *argv[] = {"XADD", vsync_stream_key(), "*", "op", "add", "k", id, "r", rec.data};
    size_t lens[] = {4, strlen(vsync_stream_key()), 1, 2, 3, 1, VSYNC_ID_LEN, 1, rec.len};
    run(c, 9, argv, lens);
    T_CHECK(await(is_found, g.v, 900, NULL));
    uint64_t t0 = pc_mono_ms();
    char m[65];
    while (zscore_ms(c, mkey, member_of(key, m)) < 0 && pc_mono_ms() - t0 < DEADLINE)
        sleep_ms(5);
    T_CHECK_INT(zscore_ms(c, mkey, m), o.expires_ms);
    pc_buf_free(&rec);
    rig_down_all(&g);
    redisFree(c);
}

/* --- events, parsed -------------------------------------------------------------------- */

/* A hand-made XREAD entry's field/value array (strings only unless a test says otherwise). */
struct fake {
    redisReply arr, items[16];
    redisReply *ptrs[16];
};

static const redisReply *fake_fields(struct fake *f, int n, const char *const *kv)
{
    memset(f, 0, sizeof(*f));
    for (int i = 0; i < n; i++) {
        f->items[i].type = REDIS_REPLY_STRING;
        f->items[i].str = (char *)kv[i];
        f->items[i].len = strlen(kv[i]);
        f->ptrs[i] = &f->items[i];
    }
    f->arr.type = REDIS_REPLY_ARRAY;
    f->arr.elements = (size_t)n;
    f->arr.element = f->ptrs;
    return &f->arr;
}

static int parse(int n, const char *const *kv, struct vsync_event *ev)
{
    struct fake f;
    return vsync_event_parse(fake_fields(&f, n, kv), ev);
}

#define KEY_ID "0011223344556677:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static void test_event_checks(void)
{
    struct vsync_event ev;
    const char *del[] = {"op", "del", "k", KEY_ID};
    T_CHECK_INT(parse(4, del, &ev), 0);
    T_CHECK(ev.op == VSYNC_OP_DEL && ev.has_key && ev.tenant[1] == 0x11 && ev.key[31] == 0xff);
    T_CHECK_STR(ev.instance, "");
    const char *set[] = {"op", "set", "k", KEY_ID, "i", "0123456789abcdef"};
    T_CHECK_INT(parse(6, set, &ev), 0);
    T_CHECK(ev.op == VSYNC_OP_SET);
    T_CHECK_STR(ev.instance, "0123456789abcdef");
    T_CHECK(!vsync_event_is_mine(&ev));
    const char *mine[] = {"op", "set", "k", KEY_ID, "i", vsync_instance()};
    T_CHECK_INT(parse(6, mine, &ev), 0);
    T_CHECK(vsync_event_is_mine(&ev));
    const char *flush_all[] = {"op", "flush"};
    T_CHECK_INT(parse(2, flush_all, &ev), 0);
    T_CHECK(ev.op == VSYNC_OP_FLUSH && !ev.has_tenant);
    const char *flush_t[] = {"op", "flush", "t", "0011223344556677"};
    T_CHECK_INT(parse(4, flush_t, &ev), 0);
    T_CHECK(ev.has_tenant && ev.tenant[7] == 0x77);
    const char *add[] = {"op", "add", "k", KEY_ID, "r", "REC"};
    T_CHECK_INT(parse(6, add, &ev), 0);
    T_CHECK(ev.rec_len == 3 && memcmp(ev.rec, "REC", 3) == 0);
    const char *later[] = {"op", "del", "k", KEY_ID, "x-later", "a field of a later version"};
    T_CHECK_INT(parse(6, later, &ev), 0);

    /* Rejected: each is one field out of range. */
    static const char *const bad[][8] = {
        {"op", "nonsense", "k", KEY_ID},             /* unknown op */
        {"op", "DEL", "k", KEY_ID},                  /* ops are lower case */
        {"k", KEY_ID},                               /* no op */
        {"op", "del"},                               /* no key */
        {"op", "del", "k", KEY_ID "0"},              /* key too long */
        {"op", "del", "k", "0011223344556677:0011"}, /* key too short */
        {"op", "del", "k",
         "0011223344556677-00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"},
        {"op", "set", "k", KEY_ID, "i", "0123456789ABCDEF"}, /* upper-case instance */
        {"op", "set", "k", KEY_ID, "i", "0123"},             /* short instance */
        {"op", "flush", "t", "001122334455667"},             /* short tenant */
        {"op", "flush", "t", "00112233445566zz"},            /* tenant not hex */
        {"op", "add", "k", KEY_ID},                          /* no record */
        {"op", "add", "k", KEY_ID, "r", ""},                 /* empty record */
        {"op", "del", "op", "flush", "k", KEY_ID},           /* op twice */
        {"op", "del", "k", KEY_ID, "k", KEY_ID},             /* key twice */
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        int n = 0;
        while (n < 8 && bad[i][n] != NULL)
            n++;
        if (parse(n, bad[i], &ev) == 0)
            fprintf(stderr, "    accepted bad event %zu\n", i);
        T_CHECK_INT(parse(n, bad[i], &ev), -1);
    }
    /* Odd counts, too many fields, values that are not strings. */
    T_CHECK_INT(parse(3, del, &ev), -1);
    const char *many[18] = {"op", "del", "k", KEY_ID};
    for (int i = 4; i < 18; i++)
        many[i] = "x";
    T_CHECK_INT(parse(16, many, &ev), 0);
    struct fake f;
    const redisReply *kv = fake_fields(&f, 16, many);
    f.arr.elements = 18; /* nine pairs: one more than VSYNC_EVENT_FIELDS_MAX */
    T_CHECK(VSYNC_EVENT_FIELDS_MAX == 8);
    T_CHECK_INT(vsync_event_parse(kv, &ev), -1);
    kv = fake_fields(&f, 4, del);
    f.items[3].type = REDIS_REPLY_INTEGER;
    T_CHECK_INT(vsync_event_parse(kv, &ev), -1);
    kv = fake_fields(&f, 4, del);
    f.arr.type = REDIS_REPLY_STRING;
    T_CHECK_INT(vsync_event_parse(kv, &ev), -1);
    T_CHECK_INT(vsync_event_parse(NULL, &ev), -1);

    uint64_t ms, seq;
    T_CHECK_INT(vsync_parse_stream_id("1700000000000-3", 15, &ms, &seq), 0);
    T_CHECK(ms == 1700000000000ull && seq == 3);
    T_CHECK_INT(vsync_parse_stream_id("18446744073709551615-0", 22, &ms, &seq), 0);
    T_CHECK_INT(vsync_parse_stream_id("18446744073709551616-0", 22, &ms, &seq), -1);
    T_CHECK_INT(vsync_parse_stream_id("-1", 2, &ms, &seq), -1);
    T_CHECK_INT(vsync_parse_stream_id("1-", 2, &ms, &seq), -1);
    T_CHECK_INT(vsync_parse_stream_id("1-2x", 4, &ms, &seq), -1);
    T_CHECK_INT(vsync_parse_stream_id(" 1-2", 4, &ms, &seq), -1);
    T_CHECK_INT(strlen(vsync_instance()), VSYNC_INSTANCE_LEN);
}

/* --- the L1's reader --------------------------------------------------------------------- */

static bool l1_is_live(void *l, uintptr_t unused)
{
    (void)unused;
    return l1_live(l);
}

static bool l1_not_live(void *l, uintptr_t unused)
{
    (void)unused;
    return !l1_live(l);
}

struct l1_key {
    struct l1 *l;
    const char *tenant;
    const unsigned char *exact;
};

static bool l1_has(void *k_, uintptr_t want)
{
    struct l1_key *k = k_;
    struct l1_item *it = l1_get(k->l, k->tenant, k->exact, l1_now_ms());
    bool has = it != NULL;
    l1_release(&it);
    return has == (bool)want;
}

static bool l1_count_reaches(void *l, uintptr_t n)
{
    struct l1_counters c;
    l1_get_counters(l, &c);
    return c.inserts + c.stale >= n;
}

static bool l1_events_reach(void *l, uintptr_t n)
{
    struct l1_counters c;
    l1_get_counters(l, &c);
    return c.events >= n;
}

static uint64_t rejected_by_l1(void)
{
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    return v[STAT_l1_events_rejected];
}

static bool l1_rejects_reach(void *unused, uintptr_t n)
{
    (void)unused;
    return rejected_by_l1() >= n;
}

static void key_hex(const unsigned char t[VINDEX_TENANT_LEN], char out[L1_TENANT_LEN + 1])
{
    pc_hex(t, VINDEX_TENANT_LEN, out);
}

static void test_l1_reader(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    struct l1 *l = l1_create(1 << 20);
    static struct stats follow_row;
    struct follow_opts fo = {.url = R.url, .timeout_ms = 1000, .block_ms = 200, .row = &follow_row};
    struct follow *f = follow_create(&fo);
    T_CHECK_INT(l1_follow(l, f), 0);
    T_CHECK_INT(follow_start(f), 0);
    T_CHECK(await(l1_is_live, l, 0, NULL));

    unsigned char tenant[VINDEX_TENANT_LEN], k1[VINDEX_KEY_LEN], k2[VINDEX_KEY_LEN];
    char th[L1_TENANT_LEN + 1];
    tenant_of(1, tenant);
    key_hex(tenant, th);
    key_of(1, k1);
    key_of(2, k2);
    int64_t later = l1_now_ms() + 60000;
    struct l1_key a = {l, th, k1}, b = {l, th, k2};

    /* This process's own write event is skipped: its table has the answer already. */
    l1_replace(l, th, k1, "one", 3, later, l1_generation(l));
    l1_put(l, th, k2, "two", 3, later, l1_generation(l));
    T_CHECK(await(l1_count_reaches, l, 2, NULL));
    T_CHECK(await(l1_has, &a, 1, NULL) && await(l1_has, &b, 1, NULL));
    struct vsync_argv av;
    vsync_argv_entry_set(&av, tenant, k1);
    run(c, av.argc, av.argv, av.lens);
    /* Another process's write of k2 drops it (told apart by the i field). */
    char id[VSYNC_ID_LEN + 1];
    vsync_id(tenant, k2, id);
    run_fmt(c, "XADD %s * op set k %s i 00000000000000ff", vsync_stream_key(), id);
    T_CHECK(await(l1_has, &b, 0, NULL));
    T_CHECK(l1_has(&a, 1)); /* its own write did not drop k1 */

    /* Forged events are rejected and counted, never applied. */
    uint64_t rej0 = rejected_by_l1();
    run_fmt(c, "XADD %s * op flush t ZZZZZZZZZZZZZZZZ", vsync_stream_key());
    run_fmt(c, "XADD %s * op del k %s0", vsync_stream_key(), id);
    run_fmt(c, "XADD %s * op del op flush", vsync_stream_key());
    run_fmt(c, "XADD %s * op wipe", vsync_stream_key());
    T_CHECK(await(l1_rejects_reach, NULL, rej0 + 4, NULL));
    T_CHECK(l1_has(&a, 1));
    struct l1_counters lc;
    l1_get_counters(l, &lc);
    T_CHECK_INT(lc.clears, 1); /* only the reader's own start */

    /* A read made before a change never goes in after it: B read k1's old value (gen), then
     * another process's write of k1 came through the stream, then B's read ends. */
    uint64_t gen = l1_generation(l);
    vsync_id(tenant, k1, id);
    uint64_t events = lc.events;
    run_fmt(c, "XADD %s * op set k %s i 00000000000000ff", vsync_stream_key(), id);
    T_CHECK(await(l1_events_reach, l, events + 1, NULL));
    T_CHECK(l1_has(&a, 0));
    l1_get_counters(l, &lc);
    uint64_t stale0 = lc.stale, inserts0 = lc.inserts;
    l1_put(l, th, k1, "old", 3, later, gen); /* the stale read */
    l1_put(l, th, k2, "two", 3, later, gen); /* another key read at the same time goes in */
    T_CHECK(await(l1_count_reaches, l, inserts0 + stale0 + 2, NULL));
    l1_get_counters(l, &lc);
    T_CHECK_INT(lc.stale - stale0, 1);
    T_CHECK(l1_has(&a, 0));
    T_CHECK(l1_has(&b, 1));

    /* A write of this process made before a change it learns of is not kept either. */
    gen = l1_generation(l);
    l1_delete(l, th, k2);
    l1_replace(l, th, k2, "mine", 4, later, gen);
    l1_get_counters(l, &lc);
    T_CHECK_INT(lc.stale - stale0, 2);
    T_CHECK(l1_has(&b, 0));
    /* Written after: it goes in, and replaces at once what was held. */
    l1_put(l, th, k1, "held", 4, later, l1_generation(l));
    T_CHECK(await(l1_has, &a, 1, NULL));
    l1_replace(l, th, k1, NULL, 0, later, l1_generation(l)); /* a write not kept */
    T_CHECK(l1_has(&a, 0));
    /*
     * A write whose outcome is unknown (timed out): Redis may apply it later. What another
     * worker reads meanwhile goes in, and the write's own event, when it lands, drops it as
     * another process's would; the next own event of k1 is skipped again.
     */
    l1_unsure(l, th, k1);
    T_CHECK(l1_has(&a, 0));
    l1_put(l, th, k1, "old", 3, later, l1_generation(l));
    T_CHECK(await(l1_has, &a, 1, NULL));
    l1_get_counters(l, &lc);
    events = lc.events;
    vsync_argv_entry_set(&av, tenant, k1);
    run(c, av.argc, av.argv, av.lens);
    T_CHECK(await(l1_has, &a, 0, NULL));
    l1_put(l, th, k1, "new", 3, later, l1_generation(l));
    T_CHECK(await(l1_has, &a, 1, NULL));
    vsync_argv_entry_set(&av, tenant, k1);
    run(c, av.argc, av.argv, av.lens);
    vsync_id(tenant, k2, id); /* an event after it, to know it was read */
    run_fmt(c, "XADD %s * op del k %s", vsync_stream_key(), id);
    T_CHECK(await(l1_events_reach, l, events + 2, NULL));
    T_CHECK(l1_has(&a, 1));

    /* Redis gone: the L1 goes dark (emptied, off) until the follower is back. */
    l1_put(l, th, k2, "two", 3, later, l1_generation(l));
    T_CHECK(await(l1_has, &b, 1, NULL));
    redis_kill();
    T_CHECK(await(l1_not_live, l, 0, NULL));
    T_CHECK(l1_has(&b, 0));
    redis_start();
    T_CHECK(await(l1_is_live, l, 0, NULL));
    uint64_t t0 = pc_mono_ms();
    follow_destroy(&f); /* a blocked XREAD is cut at once */
    fprintf(stderr, "    follower stopped in %llu ms\n", (unsigned long long)(pc_mono_ms() - t0));
    T_CHECK(pc_mono_ms() - t0 < 150);
    l1_destroy(&l);
    redisFree(c);
}

/*
 * Loads and stream events at once: the loader decodes the records it reads while the
 * follower decodes the events it reads. Both decoded into one buffer, so a vector was now and
 * then stored under another record's key (a key found by another's vector, and not by its
 * own). Each round reads the partition again while this thread, as the follower would, hands
 * the handler add events of the same keys; once the reload is over every key must be found by
 * its own vector. Vectors of 1024 components (a remote embedder's size): each decode takes a
 * while.
 */
#define RACE_DIM    1024
#define RACE_KEYS   300
#define RACE_ROUNDS 20

static void race_record(unsigned n, struct pc_buf *out)
{
    static float v[RACE_DIM];
    vec_of(n, v, RACE_DIM);
    struct vrec r = {.dim = RACE_DIM,
                     .created_ms = pc_wall_ms(),
                     .expires_ms = pc_wall_ms() + 3600000,
                     .vec = v,
                     .text = "q",
                     .text_len = 1};
    snprintf(r.space, sizeof(r.space), "%s", SPACE);
    part_of(1, r.partition);
    T_CHECK(vrec_encode(&r, VREC_F16, out) == 0);
}

/* An add event of key n, as XREAD gives it. */
struct race_event {
    struct pc_buf rec;
    char id[VSYNC_ID_LEN + 1];
    redisReply arr, items[8];
    redisReply *ptrs[8];
};

static void race_event(struct race_event *e, unsigned n)
{
    unsigned char key[VINDEX_KEY_LEN], tenant[VINDEX_TENANT_LEN];
    key_of(n, key);
    tenant_of(1, tenant);
    vsync_id(tenant, key, e->id);
    race_record(n, &e->rec);
    const char *kv[8] = {"op", "add", "k", e->id, "r", e->rec.data, "m", "1"};
    for (int i = 0; i < 8; i++) {
        e->items[i].type = REDIS_REPLY_STRING;
        e->items[i].str = (char *)kv[i];
        e->items[i].len = i == 5 ? e->rec.len : strlen(kv[i]);
        e->ptrs[i] = &e->items[i];
    }
    e->arr.type = REDIS_REPLY_ARRAY;
    e->arr.elements = 8;
    e->arr.element = e->ptrs;
}

static void test_decode_race(void)
{
    redisContext *c = admin();
    run_fmt(c, "FLUSHALL");
    set_schema(c, migrate_latest());
    run_fmt(c, "SET %spm-ready 1", PC_KEY_PREFIX);
    unsigned char tenant[VINDEX_TENANT_LEN], part[VINDEX_PART_LEN], key[VINDEX_KEY_LEN];
    tenant_of(1, tenant);
    part_of(1, part);
    struct race_event *ev = pc_calloc(RACE_KEYS, sizeof(*ev));
    for (unsigned n = 0; n < RACE_KEYS; n++) {
        race_event(&ev[n], n);
        key_of(n, key);
        struct vsync_argv a;
        vsync_argv_set(&a, tenant, key, ev[n].rec.data, ev[n].rec.len, 3600000);
        run(c, a.argc, a.argv, a.lens);
        vsync_argv_member_add(&a, tenant, key, part, pc_wall_ms() + 3600000);
        run(c, a.argc, a.argv, a.lens);
    }
    struct vindex_opts vo = {.dim = RACE_DIM, .lazy = true};
    struct vindex *v = vindex_create(&vo);
    struct vsync_opts o = {.url = R.url, .space = SPACE, .index = v};
    struct vsync *s = vsync_start(&o);
    T_CHECK(s != NULL);
    T_CHECK_INT(vsync_load_wait(s, tenant, part, DEADLINE), VINDEX_RESIDENT);
    T_CHECK_INT(nvec(v), RACE_KEYS);
    static float q[RACE_DIM];
    unsigned lost = 0, events = 0;
    for (int round = 0; round < RACE_ROUNDS; round++) {
        struct vsync_counters k;
        vsync_get_counters(s, &k);
        uint64_t loads = k.loads;
        vsync_on_start(s); /* what is in memory is read again */
        uint64_t t0 = pc_mono_ms();
        for (unsigned i = 0; k.loads == loads && pc_mono_ms() - t0 < DEADLINE; i++) {
            vsync_on_entry(s, &ev[i % RACE_KEYS].arr);
            events++;
            if (i % 8 == 0)
                vsync_get_counters(s, &k);
        }
        T_CHECK(await(loads_reach, s, loads + 1, NULL));
        for (unsigned n = 0; n < RACE_KEYS; n++) {
            struct vindex_hit hit[1];
            vec_of(n, q, RACE_DIM);
            key_of(n, key);
            size_t got = vindex_search(v, part, q, 1, 0.999f, pc_wall_ms(), hit);
            lost += got == 0 || memcmp(hit[0].key, key, VINDEX_KEY_LEN) != 0;
        }
    }
    fprintf(stderr, "    %u events during %d reloads; %u keys not found by their own vector\n",
            events, RACE_ROUNDS, lost);
    T_CHECK_INT(lost, 0);
    T_CHECK_INT(nvec(v), RACE_KEYS);
    vsync_stop(&s);
    vindex_destroy(&v);
    for (unsigned n = 0; n < RACE_KEYS; n++)
        pc_buf_free(&ev[n].rec);
    free(ev);
    redisFree(c);
}

static void test_invalid(void)
{
    struct vindex_opts vo = {.dim = DIM};
    struct vindex *v = vindex_create(&vo);
    struct vsync_opts o = {.url = "http://nope", .space = SPACE, .index = v};
    T_CHECK(vsync_start(&o) == NULL);
    o.url = R.url;
    o.space = "";
    T_CHECK(vsync_start(&o) == NULL);
    vindex_destroy(&v);
}

int main(void)
{
    log_init(PC_LOG_ERROR, NULL, NULL, NULL, 0);
    setup();
    redis_start();
    T_RUN(test_names);
    T_RUN(test_event_checks);
    T_RUN(test_invalid);
    T_RUN(test_load_and_stream);
    T_RUN(test_forged);
    T_RUN(test_store_writers);
    T_RUN(test_trimmed_events);
    T_RUN(test_restart);
    T_RUN(test_budget);
    T_RUN(test_lookups_first);
    T_RUN(test_resync_once);
    T_RUN(test_lists_built);
    T_RUN(test_l1_reader);
    T_RUN(test_decode_race);
    T_DONE();
}
