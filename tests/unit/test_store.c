/*
 * test_store.c - the Redis store and the schema migrations against a real
 * redis-server that this test starts (unix socket + a loopback TCP port in a
 * private temp directory) and kills at exit, also when a check fails. A few
 * `promptcache migrate` tests talk to a scripted fake Redis instead.
 */
#include "pc_cluster.h"
#include "pc_conf.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_redisev.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_util.h"
#include "t.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#define TEST_TIMEOUT_MS 1000

static struct {
    pid_t pid;
    char dir[64];
    char sock[128];
    char unix_url[160];
    int port;
    const char *password; /* for the admin connection while requirepass is set */
} R;

/* The schema version this build migrates to, as Redis shows it. */
static char latest[16];

static struct event_base *base;
static struct event *ticker;

/* --- the redis-server ------------------------------------------------------------ */

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

static void redis_exec(void)
{
    char port[16], logfile[128];
    snprintf(port, sizeof(port), "%d", R.port);
    snprintf(logfile, sizeof(logfile), "%s/redis.log", R.dir);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test, even if it crashes */
    execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--unixsocket",
           R.sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--daemonize",
           "no", "--logfile", logfile, "--dir", R.dir, (char *)NULL);
    _exit(127);
}

static bool redis_pings(void)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(R.sock, tv);
    bool ok = false;
    if (c != NULL && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r != NULL && (r->type == REDIS_REPLY_STATUS ||
                           (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r != NULL)
            freeReplyObject(r);
    }
    if (c != NULL)
        redisFree(c);
    return ok;
}

/* Start redis-server and wait until it answers PING (polling, 10 s at most). */
static void redis_start(void)
{
    R.pid = fork();
    if (R.pid < 0) {
        perror("fork");
        exit(2);
    }
    if (R.pid == 0)
        redis_exec();
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
        kill(R.pid, SIGKILL); /* also ends a SIGSTOPped server */
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
    snprintf(path, sizeof(path), "%s/cli.out", R.dir);
    unlink(path);
    unlink(R.sock);
    rmdir(R.dir);
}

static void on_signal(int sig)
{
    (void)sig;
    _exit(3); /* the child dies with us (PR_SET_PDEATHSIG) */
}

static void setup(void)
{
    strcpy(R.dir, "/tmp/pc-test-XXXXXX");
    if (mkdtemp(R.dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(R.sock, sizeof(R.sock), "%s/redis.sock", R.dir);
    snprintf(R.unix_url, sizeof(R.unix_url), "unix:%s", R.sock);
    R.port = free_tcp_port();
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN); /* as the daemon does: writes to a dead Redis must not kill us */
}

/* A command on a fresh blocking connection to db (the test's own view of Redis). */
static redisReply *rcmd_v(int db, const char *fmt, va_list ap)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(R.sock, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "admin connection failed\n");
        exit(2);
    }
    redisSetTimeout(c, tv);
    if (R.password != NULL)
        freeReplyObject(redisCommand(c, "AUTH %s", R.password));
    if (db != 0)
        freeReplyObject(redisCommand(c, "SELECT %d", db));
    redisReply *r = redisvCommand(c, fmt, ap);
    redisFree(c);
    if (r == NULL) {
        fprintf(stderr, "admin command failed\n");
        exit(2);
    }
    return r;
}

static redisReply *rcmd_db(int db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rcmd_v(db, fmt, ap);
    va_end(ap);
    return r;
}

/* The string value of a reply as a C string for comparisons ("(nil)", ":N", or "-ERR..."). */
static const char *reply_text(redisReply *r, char *buf, size_t n)
{
    if (r->type == REDIS_REPLY_NIL)
        snprintf(buf, n, "(nil)");
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(buf, n, ":%lld", r->integer);
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(buf, n, "-%s", r->str);
    else
        snprintf(buf, n, "%s", r->str ? r->str : "?");
    return buf;
}

static char last_text[256];

/* Run a command (hiredis format) on db and keep its reply as text in last_text. */
static const char *rtext_db(int db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = rcmd_v(db, fmt, ap);
    va_end(ap);
    reply_text(r, last_text, sizeof(last_text));
    freeReplyObject(r);
    return last_text;
}

/* --- the event loop -------------------------------------------------------------- */

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

typedef bool pred_fn(void *arg);

/* Run the loop until pred(arg) holds (true) or ms have passed (false). */
static bool run_until(pred_fn *pred, void *arg, int ms)
{
    uint64_t deadline = pc_mono_ms() + (uint64_t)ms;
    while (pred == NULL || !pred(arg)) {
        if (pc_mono_ms() >= deadline)
            return false;
        event_base_loop(base, EVLOOP_ONCE);
    }
    return true;
}

static void run_for(int ms)
{
    run_until(NULL, NULL, ms);
}

static bool is_ready(void *arg)
{
    return store_ready(arg);
}

static bool not_ready(void *arg)
{
    return !store_ready(arg);
}

static struct store *mk_store(const char *url, int64_t timeout_ms, bool auto_migrate,
                              struct stats *st)
{
    struct store_opts o = {url, timeout_ms, auto_migrate, 0};
    struct store *s = store_create(base, &o, st);
    if (s != NULL)
        store_start(s);
    return s;
}

struct got {
    bool done;
    int calls;
    enum store_status st;
    bool null;
    char val[64];
    size_t len;
    long long n;
};

static void get_cb(void *arg, enum store_status st, const char *val, size_t len)
{
    struct got *g = arg;
    g->done = true;
    g->calls++;
    g->st = st;
    g->null = val == NULL;
    g->len = len;
    if (val != NULL)
        memcpy(g->val, val, PC_MIN(len, sizeof(g->val)));
}

static void int_cb(void *arg, enum store_status st, long long n)
{
    struct got *g = arg;
    g->done = true;
    g->calls++;
    g->st = st;
    g->n = n;
}

static bool got_done(void *arg)
{
    return ((struct got *)arg)->done;
}

/* GET key and wait for the answer (5 s); false if store_get refused. */
static bool get_wait(struct store *s, const void *key, size_t klen, struct got *g)
{
    memset(g, 0, sizeof(*g));
    if (store_get(s, key, klen, get_cb, g) == NULL)
        return false;
    run_until(got_done, g, 5000);
    return g->done;
}

static bool get_ok(void *arg)
{
    struct got g;
    return store_ready(arg) && get_wait(arg, "probe", 5, &g) && g.st == STORE_OK;
}

struct capture {
    int fd, saved_out, saved_err;
};

/* Send stdout and stderr (the log) to a file until capture_end. */
static void capture_start(struct capture *cap)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/cli.out", R.dir);
    fflush(stdout);
    fflush(stderr);
    cap->fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    cap->saved_out = dup(1);
    cap->saved_err = dup(2);
    dup2(cap->fd, 1);
    dup2(cap->fd, 2);
}

/* Restore stdout and stderr; what was written in between goes to out (NUL-terminated). */
/* What the log said so far, capture going on. */
static void capture_peek(const struct capture *cap, char *out, size_t n)
{
    fflush(stdout);
    fflush(stderr);
    ssize_t got = pread(cap->fd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
}

static void capture_end(struct capture *cap, char *out, size_t n)
{
    fflush(stdout);
    fflush(stderr);
    dup2(cap->saved_out, 1);
    dup2(cap->saved_err, 2);
    close(cap->saved_out);
    close(cap->saved_err);
    ssize_t got = pread(cap->fd, out, n - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(cap->fd);
    fputs(out, stderr); /* still show it */
}

/* migrate_cli with stdout and stderr captured into out. */
static int run_cli(const char *url, bool dry_run, char *out, size_t n)
{
    struct capture cap;
    struct conf c;
    memset(&c, 0, sizeof(c));
    c.redis = (char *)url;
    c.redis_timeout = 200;
    capture_start(&cap);
    int rc = migrate_cli(&c, dry_run);
    capture_end(&cap, out, n);
    return rc;
}

/* --- tests ------------------------------------------------------------------------ */

/* An invalid URL (the grammar itself is test_rurl's): no store. */
static void test_bad_url(void)
{
    T_CHECK(store_create(base, &(struct store_opts){"redis://h:0", 100, true, 0}, NULL) == NULL);
    T_CHECK(store_create(base, &(struct store_opts){"redis://alice@h", 100, true, 0}, NULL) ==
            NULL);
    T_CHECK(store_create(base, &(struct store_opts){"sentinel://h", 100, true, 0}, NULL) == NULL);
}

/* Redis is not running when the store starts: not ready, then ready once Redis is up. */
static void test_down_at_start(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(s != NULL);
    run_for(400);
    T_CHECK(!store_ready(s));
    struct got g = {0};
    T_CHECK(store_get(s, "k", 1, get_cb, &g) == NULL);
    T_CHECK_INT(store_set(s, "k", 1, "v", 1, 1000), -1);
    T_CHECK(store_delete_matching(s, "*", int_cb, &g) == NULL);
    T_CHECK_INT(st.v[STAT_redis_reconnects], 0);
    T_CHECK_INT(st.v[STAT_redis_connected], 0);

    redis_start();
    T_CHECK(run_until(is_ready, s, 15000));
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), latest); /* migrated automatically */
    T_CHECK_INT(rtext_db(0, "HEXISTS pc:meta created_at")[1], '1');
    T_CHECK_INT(st.v[STAT_redis_reconnects], 1);
    T_CHECK_INT(st.v[STAT_redis_connected], 1);
    T_CHECK_INT(g.calls, 0);
    store_destroy(&s);
    T_CHECK(s == NULL);
    T_CHECK_INT(st.v[STAT_redis_connected], 0);
}

/* A second proxy finds the schema current (no auto-migrate needed). */
static void test_second_store_current(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    store_destroy(&s);
}

/* Not migrated and auto-migrate off: blocked until `promptcache migrate` runs. */
static void test_migrate_cli(void)
{
    char out[2048];
    freeReplyObject(rcmd_db(0, "FLUSHALL"));
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, false, &st);
    run_for(500);
    T_CHECK(!store_ready(s));

    T_CHECK_INT(run_cli(R.unix_url, true, out, sizeof(out)), 0);
    char want[64];
    snprintf(want, sizeof(want), "schema version: 0 (this build: %s)", latest);
    T_CHECK(strstr(out, want) != NULL);
    T_CHECK(strstr(out, "\n  0001 initial\n") != NULL);
    T_CHECK(strstr(out, "dry run: nothing applied") != NULL);
    T_CHECK(strstr(out, "applied 0001") == NULL);
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), "(nil)");

    T_CHECK_INT(run_cli(R.unix_url, false, out, sizeof(out)), 0);
    T_CHECK(strstr(out, "applied 0001 initial\n") != NULL);
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), latest);
    T_CHECK_INT(rtext_db(0, "HEXISTS pc:meta migrated_at")[1], '1');
    T_CHECK(run_until(is_ready, s, 10000)); /* the blocked store re-reads the version */

    T_CHECK_INT(run_cli(R.unix_url, false, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "schema version: %s (this build: %s)", latest, latest);
    T_CHECK(strstr(out, want) != NULL);
    T_CHECK(strstr(out, "applied 0001") == NULL);
    store_destroy(&s);
}

static bool all_ready(void *arg)
{
    struct store **s = arg;
    return store_ready(s[0]) && store_ready(s[1]) && store_ready(s[2]);
}

/* Several proxies start on an empty Redis at once: one migrates, the others re-read. */
static void test_concurrent_migration(void)
{
    char out[8192];
    struct stats st = {0};
    struct store *s[3];
    struct capture cap;
    freeReplyObject(rcmd_db(0, "FLUSHALL"));
    char err[64];
    log_init(PC_LOG_INFO, NULL, NULL, err, sizeof(err)); /* shows the losers' re-reads */
    capture_start(&cap);
    for (int i = 0; i < 3; i++)
        s[i] = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    bool ready = run_until(all_ready, s, 5000);
    capture_end(&cap, out, sizeof(out));
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    T_CHECK(ready);
    int applied = 0;
    for (const char *p = out; (p = strstr(p, "applied migration 0001")) != NULL; p++)
        applied++;
    T_CHECK_INT(applied, 1);
    T_CHECK(strstr(out, " E ") == NULL && strstr(out, " W ") == NULL);
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), latest);
    T_CHECK_INT(st.v[STAT_redis_connected], 3);
    for (int i = 0; i < 3; i++)
        store_destroy(&s[i]);
}

static bool schema_current(void *arg)
{
    (void)arg;
    return strcmp(rtext_db(0, "GET " PC_SCHEMA_KEY), latest) == 0;
}

static int count_in(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

/*
 * pc:schema deleted under READY stores (FLUSHALL, DEL): they read it only when they
 * connect, so it stayed away, a store that connected with auto-migrate off was blocked
 * (and a vector loader that connected again waited) until one connected with it on. A
 * READY store puts it back, auto-migrate off too, for all of them (one notice each time);
 * one that started blocked on the flushed Redis is ready then. A version that is there,
 * whatever it is, is left alone.
 */
static void test_schema_watch(void)
{
    char out[16384], err[64], kept[64];
    struct stats st = {0};
    struct store *s[3];
    struct capture cap;
    freeReplyObject(rcmd_db(0, "SET %s %s", PC_SCHEMA_KEY, latest));
    log_init(PC_LOG_INFO, NULL, NULL, err, sizeof(err));
    capture_start(&cap);
    s[0] = mk_store(R.unix_url, TEST_TIMEOUT_MS, false, &st);
    s[1] = mk_store(R.unix_url, TEST_TIMEOUT_MS, false, &st);
    bool ready = run_until(is_ready, s[0], 5000) && run_until(is_ready, s[1], 5000);
    freeReplyObject(rcmd_db(0, "FLUSHALL"));
    s[2] = mk_store(R.unix_url, TEST_TIMEOUT_MS, false, &st);
    bool back = run_until(schema_current, NULL, 5000);
    bool all = run_until(all_ready, s, 10000); /* s[2] re-reads the version while blocked */
    freeReplyObject(rcmd_db(0, "DEL %s", PC_SCHEMA_KEY));
    bool back_again = run_until(schema_current, NULL, 5000);
    freeReplyObject(rcmd_db(0, "SET %s 1", PC_SCHEMA_KEY));
    run_for(1500); /* more than a look of each */
    snprintf(kept, sizeof(kept), "%s", rtext_db(0, "GET " PC_SCHEMA_KEY));
    capture_end(&cap, out, sizeof(out));
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    T_CHECK(ready);
    T_CHECK(back);
    T_CHECK(all);
    T_CHECK(back_again);
    T_CHECK_INT(count_in(out, "was gone (a FLUSHALL, FLUSHDB or DEL?): set back to schema"), 2);
    T_CHECK_STR(kept, "1");
    T_CHECK(store_ready(s[0]) && store_ready(s[1]) && store_ready(s[2]));
    freeReplyObject(rcmd_db(0, "SET %s %s", PC_SCHEMA_KEY, latest));
    for (int i = 0; i < 3; i++)
        store_destroy(&s[i]);
}

static void test_migrate_cli_errors(void)
{
    char out[2048], url[64];
    T_CHECK_INT(run_cli("unix:/nonexistent/redis.sock", false, out, sizeof(out)), 1);
    T_CHECK(strstr(out, "cannot connect to unix:/nonexistent/redis.sock") != NULL);
    snprintf(url, sizeof(url), "redis://:secret@127.0.0.1:%d", free_tcp_port());
    T_CHECK_INT(run_cli(url, false, out, sizeof(out)), 1);
    T_CHECK(strstr(out, "Connection refused") != NULL);
    T_CHECK(strstr(out, "secret") == NULL); /* never print the password */
    T_CHECK_INT(run_cli("redis://h:0", false, out, sizeof(out)), 1);
    T_CHECK(strstr(out, "invalid redis URL") != NULL);
}

/* A schema newer than this build: never ready, and the CLI refuses. */
static void test_newer_schema(void)
{
    char out[2048];
    freeReplyObject(rcmd_db(0, "SET %s 99", PC_SCHEMA_KEY));
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    run_for(600);
    T_CHECK(!store_ready(s));
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), "99");
    T_CHECK_INT(st.v[STAT_redis_connected], 0);
    T_CHECK_INT(run_cli(R.unix_url, false, out, sizeof(out)), 1);
    T_CHECK(strstr(out, "newer than this build") != NULL);
    store_destroy(&s);
    freeReplyObject(rcmd_db(0, "SET %s 1", PC_SCHEMA_KEY));
}

static void test_get_set(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g;
    T_CHECK(get_wait(s, "nope", 4, &g));
    T_CHECK(g.st == STORE_OK && g.null);

    static const char key[] = "pc:1:e:t\0k", val[] = "a\0b\0\xff";
    T_CHECK_INT(store_set(s, key, sizeof(key) - 1, val, sizeof(val) - 1, 60000), 0);
    T_CHECK_INT(store_set(s, key, sizeof(key) - 1, val, sizeof(val) - 1, 0), -1);
    T_CHECK(get_wait(s, key, sizeof(key) - 1, &g));
    T_CHECK(g.st == STORE_OK && !g.null);
    T_CHECK_INT(g.len, sizeof(val) - 1);
    T_CHECK(memcmp(g.val, val, sizeof(val) - 1) == 0);

    redisReply *r = rcmd_db(0, "PTTL %b", key, sizeof(key) - 1);
    T_CHECK(r->type == REDIS_REPLY_INTEGER && r->integer > 0 && r->integer <= 60000);
    freeReplyObject(r);
    T_CHECK_INT(st.v[STAT_redis_errors], 0);

    /* an error reply fails the GET */
    freeReplyObject(rcmd_db(0, "HSET pc:hash f v"));
    T_CHECK(get_wait(s, "pc:hash", 7, &g));
    T_CHECK(g.st == STORE_ERR && g.null);
    T_CHECK_INT(st.v[STAT_redis_errors], 1);
    T_CHECK(store_ready(s));
    store_destroy(&s);
}

/* The store's writes' connection is up: a client whose last command was its PING. */
static bool writer_up(void *arg)
{
    (void)arg;
    redisReply *r = rcmd_db(0, "CLIENT LIST");
    bool up = r->str != NULL && strstr(r->str, " cmd=ping ") != NULL;
    freeReplyObject(r);
    return up;
}

/*
 * Writes have a connection of their own: while Redis holds writes (CLIENT
 * PAUSE WRITE) a GET of another key is answered at once, and a GET of a key
 * whose SET is held waits for it (the value written is read, as on one
 * connection: before, it overtook the SET and found nothing).
 */
static void test_writes_held(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, 3000, true, &st);
    /* Redis answered its PING; a GET's answer, which comes after, has the PONG read too */
    T_CHECK(run_until(is_ready, s, 5000) && run_until(writer_up, NULL, 5000) && get_ok(s));
    struct got g, set = {0};
    freeReplyObject(rcmd_db(0, "SET pc:held:other x"));
    freeReplyObject(rcmd_db(0, "CLIENT PAUSE 1000 WRITE"));
    T_CHECK(store_set_cb(s, "pc:held", 7, "v1", 2, 60000, int_cb, &set) != NULL);
    T_CHECK(get_wait(s, "pc:held:other", 13, &g) && g.st == STORE_OK && g.len == 1);
    T_CHECK(!set.done); /* answered while the SET is held */
    T_CHECK(get_wait(s, "pc:held", 7, &g) && g.st == STORE_OK && g.len == 2 &&
            memcmp(g.val, "v1", 2) == 0);
    T_CHECK(set.done && set.st == STORE_OK);
    freeReplyObject(rcmd_db(0, "CLIENT UNPAUSE"));
    freeReplyObject(rcmd_db(0, "DEL pc:held pc:held:other"));
    store_destroy(&s);
}

static void test_cancel(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g1 = {0}, g2 = {0}, g3 = {0};
    struct store_cmd *c1 = store_get(s, "a", 1, get_cb, &g1);
    T_CHECK(c1 != NULL);
    store_cancel(&c1);
    T_CHECK(c1 == NULL);
    store_cancel(&c1); /* NULL is fine */
    T_CHECK(store_get(s, "b", 1, get_cb, &g2) != NULL);
    T_CHECK(run_until(got_done, &g2, 5000));
    run_for(50);
    T_CHECK_INT(g1.calls, 0);
    T_CHECK_INT(g2.calls, 1);

    /* cancelled, then the store goes away before the reply: no callback, no leak */
    struct store_cmd *c3 = store_get(s, "c", 1, get_cb, &g3);
    store_cancel(&c3);
    store_destroy(&s);
    run_for(50);
    T_CHECK_INT(g3.calls, 0);
}

/* store_destroy completes what is pending with STORE_ERR. */
static void test_destroy_pending(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g[3];
    memset(g, 0, sizeof(g));
    for (int i = 0; i < 3; i++)
        T_CHECK(store_get(s, "x", 1, get_cb, &g[i]) != NULL);
    struct got d = {0};
    T_CHECK(store_delete_matching(s, "nothing:*", int_cb, &d) != NULL);
    T_CHECK_INT(store_set(s, "y", 1, "v", 1, 1000), 0);
    store_destroy(&s);
    for (int i = 0; i < 3; i++)
        T_CHECK(g[i].calls == 1 && g[i].st == STORE_ERR);
    T_CHECK(d.calls == 1 && d.st == STORE_ERR);
    T_CHECK_INT(st.v[STAT_redis_errors], 5);
    run_for(50);
}

struct destroyer {
    struct store *s;
    struct got g;
};

static void destroy_cb(void *arg, enum store_status st, const char *val, size_t len)
{
    struct destroyer *d = arg;
    get_cb(&d->g, st, val, len);
    store_destroy(&d->s);
}

/* A callback may destroy its store (from inside a hiredis reply callback). */
static void test_destroy_in_callback(void)
{
    struct stats st = {0};
    struct destroyer d = {mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st), {0}};
    T_CHECK(run_until(is_ready, d.s, 5000));
    struct got g2 = {0};
    T_CHECK(store_get(d.s, "a", 1, destroy_cb, &d) != NULL);
    T_CHECK(store_get(d.s, "b", 1, get_cb, &g2) != NULL);
    T_CHECK(run_until(got_done, &d.g, 5000));
    T_CHECK(d.s == NULL && d.g.st == STORE_OK);
    T_CHECK(g2.calls == 1 && g2.st == STORE_ERR);
    run_for(50);
    T_CHECK_INT(g2.calls, 1);
}

static void test_delete_matching(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    freeReplyObject(rcmd_db(0, "FLUSHDB"));
    freeReplyObject(rcmd_db(0, "SET %s 1", PC_SCHEMA_KEY));
    char key[64];
    for (int i = 0; i < 2500; i++) {
        int n = snprintf(key, sizeof(key), "pc:1:e:t1:%d", i);
        T_CHECK_INT(store_set(s, key, (size_t)n, "v", 1, 60000), 0);
    }
    for (int i = 0; i < 7; i++) {
        int n = snprintf(key, sizeof(key), "pc:1:e:t2:%d", i);
        T_CHECK_INT(store_set(s, key, (size_t)n, "v", 1, 60000), 0);
    }
    struct got g;
    T_CHECK(get_wait(s, "sync", 4, &g)); /* replies come in order: every SET is done */
    T_CHECK_STR(rtext_db(0, "DBSIZE"), ":2508");

    memset(&g, 0, sizeof(g));
    T_CHECK(store_delete_matching(s, "pc:1:e:t1:*", int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 10000));
    T_CHECK(g.st == STORE_OK);
    T_CHECK_INT(g.n, 2500);
    T_CHECK_STR(rtext_db(0, "DBSIZE"), ":8");
    T_CHECK_STR(rtext_db(0, "EXISTS pc:1:e:t2:6"), ":1");

    memset(&g, 0, sizeof(g));
    T_CHECK(store_delete_matching(s, "pc:1:e:t9:*", int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 10000));
    T_CHECK(g.st == STORE_OK && g.n == 0);
    T_CHECK_INT(g.calls, 1);
    T_CHECK_INT(st.v[STAT_redis_errors], 0);
    store_destroy(&s);
}

struct picked {
    size_t keys, skipped;
    bool bad_key; /* a key the callback was given that the script cannot have picked */
};

static void picked_cb(void *arg, const char *key, size_t len)
{
    struct picked *p = arg;
    if (key == NULL) {
        p->skipped += len;
        return;
    }
    p->keys++;
    int n = atoi(key + 4);
    if (len < 5 || strncmp(key, "pk:e:", 5) != 0 || n % 2 != 0)
        p->bad_key = true;
}

struct pick_run {
    struct got g;
    struct picked p;
};

static void pick_done(void *arg, enum store_status st, long long n)
{
    int_cb(&((struct pick_run *)arg)->g, st, n);
}

static void pick_each(void *arg, const char *key, size_t len)
{
    picked_cb(&((struct pick_run *)arg)->p, key, len);
}

/* KEYS: key, twin, ...; deletes the pairs whose key holds ARGV[1]; a key holding "?" is skipped. */
static const char pick_lua[] = "local out = {0}\n"
                               "for i = 1, #KEYS, 2 do\n"
                               "  local v = redis.call('GET', KEYS[i])\n"
                               "  if v == '?' then out[1] = out[1] + 1\n"
                               "  elseif v == ARGV[1] then\n"
                               "    redis.call('UNLINK', KEYS[i], KEYS[i + 1])\n"
                               "    out[#out + 1] = i\n"
                               "  end\n"
                               "end\n"
                               "return out\n";

/* store_delete_picked: SCAN batches, a script picks, each key reported; a bad reply is an error. */
static void test_delete_picked(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    freeReplyObject(rcmd_db(0, "FLUSHDB"));
    freeReplyObject(rcmd_db(0, "SET %s 1", PC_SCHEMA_KEY));
    char key[64];
    for (int i = 0; i < 2500; i++) {
        int n = snprintf(key, sizeof(key), "pk:e:%d", i);
        T_CHECK_INT(store_set(s, key, (size_t)n, i % 2 ? "no" : "yes", i % 2 ? 2 : 3, 60000), 0);
        n = snprintf(key, sizeof(key), "pk:v:%d", i);
        T_CHECK_INT(store_set(s, key, (size_t)n, "twin", 4, 60000), 0);
    }
    T_CHECK_INT(store_set(s, "pk:e:x", 6, "?", 1, 60000), 0);
    struct got g;
    T_CHECK(get_wait(s, "sync", 4, &g));
    const char *args[] = {"yes"};
    struct store_pick pick = {pick_lua, 1, args, "pk:e:", "pk:v:", pick_each, NULL};
    struct pick_run run = {0};
    T_CHECK(store_delete_picked(s, "pk:e:*", &pick, pick_done, &run) != NULL);
    T_CHECK(run_until(got_done, &run.g, 10000));
    T_CHECK(run.g.st == STORE_OK);
    T_CHECK_INT(run.g.n, 1250);
    T_CHECK_INT(run.p.keys, 1250);
    T_CHECK_INT(run.p.skipped, 1);
    T_CHECK(!run.p.bad_key);
    T_CHECK_STR(rtext_db(0, "EXISTS pk:e:2 pk:v:2"), ":0");
    T_CHECK_STR(rtext_db(0, "EXISTS pk:e:3 pk:v:3"), ":2");
    T_CHECK_STR(rtext_db(0, "DBSIZE"), ":2502"); /* 1250 pairs left, pk:e:x, the schema */

    /* a reply naming a twin, or a key not in the batch: an error, nothing reported */
    static const char *const liars[] = {"return {0, 2}", "return {0, 99999}", "return {-1}",
                                        "return 'no'"};
    for (size_t i = 0; i < PC_ARRAY_LEN(liars); i++) {
        struct store_pick lie = {liars[i], 0, NULL, "pk:e:", "pk:v:", pick_each, NULL};
        memset(&run, 0, sizeof(run));
        T_CHECK(store_delete_picked(s, "pk:e:*", &lie, pick_done, &run) != NULL);
        T_CHECK(run_until(got_done, &run.g, 10000));
        T_CHECK(run.g.st == STORE_ERR);
        T_CHECK_INT(run.p.keys, 0);
    }

    /* store_call_int: any command with an integer reply */
    memset(&g, 0, sizeof(g));
    const char *argv[] = {"EXISTS", "pk:e:3", "pk:v:3"};
    T_CHECK(store_call_int(s, 3, argv, NULL, int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 5000));
    T_CHECK(g.st == STORE_OK && g.n == 2);

    /* a second twin: each key named with both, in that order (a reply naming one is refused) */
    static const char three_lua[] = "local out = {0}\n"
                                    "for i = 1, #KEYS, 3 do\n"
                                    "  if redis.call('GET', KEYS[i]) == ARGV[1] then\n"
                                    "    redis.call('UNLINK', KEYS[i], KEYS[i + 1])\n"
                                    "    redis.call('SET', KEYS[i + 2], KEYS[i + 1])\n"
                                    "    out[#out + 1] = i\n"
                                    "  end\n"
                                    "end\n"
                                    "return out\n";
    const char *no[] = {"no"};
    struct store_pick lie3 = {"return {0, 2}", 0, NULL, "pk:e:", "pk:v:", pick_each, "pk:m:"};
    memset(&run, 0, sizeof(run));
    T_CHECK(store_delete_picked(s, "pk:e:*", &lie3, pick_done, &run) != NULL);
    T_CHECK(run_until(got_done, &run.g, 10000));
    T_CHECK(run.g.st == STORE_ERR);
    struct store_pick three = {three_lua, 1, no, "pk:e:", "pk:v:", pick_each, "pk:m:"};
    memset(&run, 0, sizeof(run));
    T_CHECK(store_delete_picked(s, "pk:e:*", &three, pick_done, &run) != NULL);
    T_CHECK(run_until(got_done, &run.g, 10000));
    T_CHECK(run.g.st == STORE_OK);
    T_CHECK_INT(run.g.n, 1250);
    T_CHECK_INT(run.p.keys, 1250);
    T_CHECK(!run.p.bad_key);
    T_CHECK_STR(rtext_db(0, "EXISTS pk:e:3 pk:v:3"), ":0");
    T_CHECK_STR(rtext_db(0, "GET pk:m:3"), "pk:v:3");
    store_destroy(&s);
}

/* store_when_ready: at once when READY, a timeout when not, an error when destroyed first. */
static void test_when_ready(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g = {0};
    T_CHECK(store_when_ready(s, 60000, int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 1000));
    T_CHECK(g.st == STORE_OK && g.calls == 1);
    store_destroy(&s);

    struct store *dead = mk_store("unix:/nonexistent/redis.sock", TEST_TIMEOUT_MS, true, &st);
    memset(&g, 0, sizeof(g));
    T_CHECK(store_when_ready(dead, 200, int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 3000));
    T_CHECK(g.st == STORE_TIMEOUT && g.calls == 1);
    struct got g2 = {0}, g3 = {0};
    T_CHECK(store_when_ready(dead, 60000, int_cb, &g2) != NULL);
    struct store_cmd *c = store_when_ready(dead, 60000, int_cb, &g3);
    T_CHECK(c != NULL);
    store_cancel(&c);
    run_for(50);
    T_CHECK(!g2.done && !g3.done);
    store_destroy(&dead);
    T_CHECK(g2.done && g2.st == STORE_ERR && g2.calls == 1);
    T_CHECK(!g3.done);
}

/*
 * store_after: a wait of its time even when READY (a retry's delay), OK then; TIMEOUT when not
 * READY at its end; an error when the store is destroyed first; refused by a closed store.
 */
static void test_after(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g = {0};
    uint64_t t0 = pc_mono_us();
    T_CHECK(store_after(s, 120, int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 3000));
    T_CHECK(g.st == STORE_OK && g.calls == 1);
    T_CHECK(pc_mono_us() - t0 >= 120 * 1000);
    struct got g2 = {0};
    T_CHECK(store_after(s, 60000, int_cb, &g2) != NULL);
    store_destroy(&s);
    T_CHECK(g2.done && g2.st == STORE_ERR && g2.calls == 1);

    struct store *dead = mk_store("unix:/nonexistent/redis.sock", TEST_TIMEOUT_MS, true, &st);
    memset(&g, 0, sizeof(g));
    T_CHECK(store_after(dead, 50, int_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 3000));
    T_CHECK(g.st == STORE_TIMEOUT && g.calls == 1);
    store_destroy(&dead);
}

/* redis://:password@host:port/db over TCP: AUTH and SELECT are pipelined before the check. */
static void test_tcp_auth_db(void)
{
    char url[128];
    struct stats st = {0};
    freeReplyObject(rcmd_db(0, "CONFIG SET requirepass s3cret"));
    R.password = "s3cret";

    snprintf(url, sizeof(url), "redis://:s3cret@127.0.0.1:%d/3", R.port);
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    T_CHECK_INT(store_set(s, "in-db-3", 7, "yes", 3, 60000), 0);
    struct got g;
    T_CHECK(get_wait(s, "in-db-3", 7, &g));
    T_CHECK(g.st == STORE_OK && g.len == 3);
    T_CHECK_STR(rtext_db(3, "GET in-db-3"), "yes");
    T_CHECK_STR(rtext_db(3, "GET " PC_SCHEMA_KEY), latest);
    T_CHECK_STR(rtext_db(0, "GET in-db-3"), "(nil)");
    store_destroy(&s);

    snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d/3", R.port);
    struct store *bad_pw = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    struct store *no_pw = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    run_for(600);
    T_CHECK(!store_ready(bad_pw));
    T_CHECK(!store_ready(no_pw));
    store_destroy(&bad_pw);
    store_destroy(&no_pw);

    freeReplyObject(rcmd_db(0, "CONFIG SET requirepass %s", ""));
    R.password = NULL;
}

/* An ACL user (Redis 6+): AUTH user password, over TCP and over the unix socket. */
static void test_acl_user(void)
{
    char url[256];
    struct stats st = {0};
    freeReplyObject(rcmd_db(0, "ACL SETUSER pcuser on >p%%w@d ~* &* +@all"));
    snprintf(url, sizeof(url), "redis://pcuser:p%%25w%%40d@127.0.0.1:%d/2", R.port);
    struct store *tcp = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    snprintf(url, sizeof(url), "unix://pcuser:p%%25w%%40d@%s", R.sock);
    struct store *sock = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    snprintf(url, sizeof(url), "redis://pcuser:wrong@127.0.0.1:%d/2", R.port);
    struct store *bad = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, tcp, 5000));
    T_CHECK(run_until(is_ready, sock, 5000));
    T_CHECK_INT(store_set(tcp, "acl-tcp", 7, "1", 1, 60000), 0);
    T_CHECK_INT(store_set(sock, "acl-unix", 8, "2", 1, 60000), 0);
    struct got g;
    T_CHECK(get_wait(sock, "acl-unix", 8, &g) && g.st == STORE_OK && g.len == 1);
    T_CHECK(get_wait(tcp, "acl-tcp", 7, &g) && g.st == STORE_OK && g.len == 1);
    T_CHECK_STR(rtext_db(2, "GET acl-tcp"), "1");
    T_CHECK_STR(rtext_db(0, "GET acl-unix"), "2");
    T_CHECK(!store_ready(bad));
    store_destroy(&tcp);
    store_destroy(&sock);
    store_destroy(&bad);
    freeReplyObject(rcmd_db(0, "ACL DELUSER pcuser"));
    freeReplyObject(rcmd_db(0, "DEL acl-unix"));
    freeReplyObject(rcmd_db(2, "FLUSHDB"));
}

/*
 * A host that never answers the SYN (a listener whose accept queue is full):
 * the store gives up after its connect timeout and keeps retrying.
 */
static void test_connect_timeout(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd[2];
    T_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    T_CHECK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
    T_CHECK(listen(lfd, 0) == 0);
    for (int i = 0; i < 2; i++) { /* fill the queue; later SYNs are dropped */
        cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(cfd[i], (struct sockaddr *)&sa, sizeof(sa));
    }
    sleep_ms(50);
    char url[64], out[4096];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(sa.sin_port));
    struct stats st = {0};
    struct capture cap;
    capture_start(&cap);
    struct store *s = mk_store(url, 50, true, &st); /* connect timeout: max(1 s, 10 x 50 ms) */
    run_for(1400);
    bool ready = store_ready(s);
    store_destroy(&s);
    capture_end(&cap, out, sizeof(out));
    T_CHECK(!ready);
    T_CHECK(strstr(out, "the cache is not working (") != NULL); /* one warning, the reason in it */
    T_CHECK(strstr(out, ": connect timed out)") != NULL);
    T_CHECK_INT(st.v[STAT_redis_reconnects], 0);
    for (int i = 0; i < 2; i++)
        close(cfd[i]);
    close(lfd);
}

/* SIGSTOP: a GET times out in time, the stalled connection is dropped, SIGCONT recovers. */
static void test_timeout(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, 200, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g = {0};
    kill(R.pid, SIGSTOP);
    uint64_t t0 = pc_mono_ms();
    T_CHECK(store_get(s, "k", 1, get_cb, &g) != NULL);
    T_CHECK(run_until(got_done, &g, 5000));
    uint64_t took = pc_mono_ms() - t0;
    T_CHECK(g.st == STORE_TIMEOUT && g.null);
    T_CHECK(took >= 190 && took < 1000);
    T_CHECK(st.v[STAT_redis_timeouts] >= 1);
    T_CHECK(st.v[STAT_redis_errors] >= 1);
    T_CHECK(run_until(not_ready, s, 1000)); /* no reply for 200 ms: connection dropped */
    T_CHECK_INT(st.v[STAT_redis_connected], 0);
    run_for(300);
    T_CHECK(!store_ready(s));
    kill(R.pid, SIGCONT);
    T_CHECK(run_until(get_ok, s, 20000));
    T_CHECK_INT(st.v[STAT_redis_connected], 1);
    T_CHECK_INT(g.calls, 1);
    store_destroy(&s);
}

static bool both_not_ready(void *arg)
{
    struct store **s = arg;
    return !store_ready(s[0]) && !store_ready(s[1]);
}

static bool both_get_ok(void *arg)
{
    struct store **s = arg;
    return get_ok(s[0]) && get_ok(s[1]);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/*
 * Two stores (two workers) lose a frozen Redis, then a killed one: the
 * process logs ONE warning when the cache stops working and ONE notice when
 * it works again, each time; nothing per command or per worker above info.
 */
static void test_health_log(void)
{
    char out[16384], err[64];
    struct stats st = {0};
    struct store *s[2];
    struct capture cap;
    struct got g[2];
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    for (int i = 0; i < 2; i++)
        s[i] = mk_store(R.unix_url, 100, true, &st);
    T_CHECK(run_until(both_get_ok, s, 5000));
    capture_start(&cap);
    kill(R.pid, SIGSTOP);
    for (int i = 0; i < 2; i++) {
        memset(&g[i], 0, sizeof(g[i]));
        T_CHECK(store_get(s[i], "k", 1, get_cb, &g[i]) != NULL);
    }
    T_CHECK(run_until(both_not_ready, s, 5000));
    run_for(500); /* reconnect attempts to the frozen server fail too */
    kill(R.pid, SIGCONT);
    T_CHECK(run_until(both_get_ok, s, 20000));
    redis_kill();
    T_CHECK(run_until(both_not_ready, s, 5000));
    run_for(300);
    redis_start();
    T_CHECK(run_until(both_get_ok, s, 20000));
    capture_end(&cap, out, sizeof(out));
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 2);
    T_CHECK_INT(count_of(out, " N redis: the cache works again ("), 2);
    T_CHECK_INT(count_of(out, " W "), 2);
    T_CHECK_INT(count_of(out, " E "), 0);
    T_CHECK(strstr(out, "no reply for") != NULL); /* the frozen one's reason */
    for (int i = 0; i < 2; i++)
        store_destroy(&s[i]);
}

/* Redis killed and started again on the same socket: the store comes back by itself. */
static void test_restart(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, TEST_TIMEOUT_MS, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g = {0};
    T_CHECK(store_get(s, "k", 1, get_cb, &g) != NULL);
    redis_kill();
    T_CHECK(run_until(not_ready, s, 5000));
    T_CHECK(run_until(got_done, &g, 1000));
    T_CHECK(g.st == STORE_ERR || g.st == STORE_OK); /* the reply may have beaten the kill */
    run_for(700);                                   /* a few failed attempts (refused) */
    T_CHECK(!store_ready(s));
    redis_start();
    T_CHECK(run_until(get_ok, s, 20000));
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY),
                latest); /* the empty server was migrated again */
    T_CHECK_INT(st.v[STAT_redis_reconnects], 2);
    T_CHECK_INT(st.v[STAT_redis_connected], 1);
    store_destroy(&s);
    T_CHECK_INT(st.v[STAT_redis_connected], 0);
}

/* --- a busy event loop --------------------------------------------------------------- */

struct spin {
    struct store *s;
    int spin_ms;
    bool get_first; /* GET, then spin (the bytes go out on the next pass) */
    bool sent;
    struct got g;
};

static void busy_spin(int ms)
{
    uint64_t end = pc_mono_us() + (uint64_t)ms * 1000;
    while (pc_mono_us() < end)
        ;
}

static void spin_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct spin *sp = arg;
    if (sp->get_first)
        sp->sent = store_get(sp->s, "busy", 4, get_cb, &sp->g) != NULL;
    busy_spin(sp->spin_ms);
    if (!sp->get_first)
        sp->sent = store_get(sp->s, "busy", 4, get_cb, &sp->g) != NULL;
}

/* Run spin_cb from a loop callback and wait for its GET. */
static void spin_run(struct spin *sp)
{
    struct timeval now = {0, 0};
    memset(&sp->g, 0, sizeof(sp->g));
    sp->sent = false;
    T_CHECK(event_base_once(base, -1, EV_TIMEOUT, spin_cb, sp, &now) == 0);
    T_CHECK(run_until(got_done, &sp->g, 5000));
    T_CHECK(sp->sent);
}

/*
 * A loop pass that takes 3 x redis-timeout must not time out the GET issued
 * at its end (the timer counts from when it was sent, not from the pass's
 * start), and a GET issued at the start of such a pass does not drop the
 * healthy connection. The timeout is long next to the scheduling delays of a
 * loaded 2-core machine (load 9 delayed the reply of a GET past a 50 ms
 * timeout in 2 runs of 4): the GET at the end of the pass must be answered
 * within it, by this process and redis-server both getting a CPU.
 *
 * The GET issued first goes out when the pass ends, with its time already
 * up; the next pass reads its reply if Redis has answered by then (I/O runs
 * before timers) and times it out otherwise. Which one happens depends on
 * whether redis-server got a CPU in those microseconds, so either is
 * accepted; the connection must survive both.
 */
#define BUSY_TIMEOUT_MS 400
static void test_busy_loop(void)
{
    struct stats st = {0};
    struct spin sp = {
        mk_store(R.unix_url, BUSY_TIMEOUT_MS, true, &st), 3 * BUSY_TIMEOUT_MS, false, false, {0}};
    T_CHECK(run_until(is_ready, sp.s, 5000));
    spin_run(&sp);
    T_CHECK(sp.g.st == STORE_OK && sp.g.null);
    T_CHECK_INT(st.v[STAT_redis_timeouts], 0);

    sp.get_first = true;
    spin_run(&sp);
    T_CHECK(sp.g.st == STORE_TIMEOUT || (sp.g.st == STORE_OK && sp.g.null));
    long timed_out = sp.g.st == STORE_TIMEOUT;
    run_for(2 * BUSY_TIMEOUT_MS);
    T_CHECK(store_ready(sp.s));
    struct got g;
    T_CHECK(get_wait(sp.s, "after", 5, &g) && g.st == STORE_OK);
    T_CHECK_INT(st.v[STAT_redis_reconnects], 1);
    T_CHECK_INT(st.v[STAT_redis_timeouts], timed_out);
    store_destroy(&sp.s);
}

static void spin_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    busy_spin(*(int *)arg);
}

/*
 * A large reply read 16 KiB per loop pass on a busy loop (20 ms passes, 32
 * of them): the GET times out, but Redis is visibly sending, so the
 * connection stays up. The stall watch's window is the timeout: 100 ms, not
 * 10, so that redis-server waiting for a CPU on a loaded machine is not
 * taken for a stalled one (at load 7 a 10 ms window saw no progress once).
 */
static void test_busy_loop_large_reply(void)
{
    struct stats st = {0};
    struct store *s = mk_store(R.unix_url, 100, true, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    size_t n = 512u << 10;
    char *val = pc_malloc(n);
    memset(val, 'r', n);
    freeReplyObject(rcmd_db(0, "SET large %b", val, n));
    free(val);
    int spin_ms = 20;
    struct event *busy = event_new(base, -1, EV_PERSIST, spin_tick, &spin_ms);
    struct timeval tv = {0, 1000};
    event_add(busy, &tv);
    run_for(50); /* every loop pass spins from now on */
    struct got g;
    T_CHECK(get_wait(s, "large", 5, &g));
    T_CHECK(g.st == STORE_TIMEOUT);
    run_for(1500); /* the reply is read by now, 16 KiB at a time */
    event_free(busy);
    T_CHECK(store_ready(s));
    T_CHECK_INT(st.v[STAT_redis_reconnects], 1);
    store_destroy(&s);
    freeReplyObject(rcmd_db(0, "DEL large"));
}

/*
 * A 32 MB SET takes longer than a 10 ms redis-timeout (some 20-50 ms over
 * loopback TCP) but gets 1 ms more per 64 KiB, and the connection stays up.
 */
static void test_set_large(void)
{
    char url[64];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d", R.port);
    struct stats st = {0};
    struct store *s = mk_store(url, 10, true, &st);
    /* both connections up (a 10 ms PING of the writes' one may time out on a busy machine) */
    T_CHECK(run_until(is_ready, s, 5000) && run_until(writer_up, NULL, 5000) &&
            run_until(get_ok, s, 5000));
    uint64_t timeouts = st.v[STAT_redis_timeouts];
    size_t n = 32u << 20;
    char *val = pc_malloc(n);
    memset(val, 'v', n);
    struct got g = {0};
    T_CHECK(store_set_cb(s, "big", 3, val, n, 60000, int_cb, &g) != NULL);
    free(val);
    T_CHECK(run_until(got_done, &g, 10000));
    T_CHECK(g.st == STORE_OK);
    T_CHECK_STR(rtext_db(0, "STRLEN big"), ":33554432");
    T_CHECK_INT(st.v[STAT_redis_timeouts], timeouts);
    T_CHECK_INT(st.v[STAT_redis_reconnects], 1);
    T_CHECK(store_ready(s));
    store_destroy(&s);
    freeReplyObject(rcmd_db(0, "DEL big"));
}

/* A host name is resolved off the loop on every connection attempt; log lines keep the name. */
static void test_host_name(void)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo("localhost", NULL, &hints, &ai) != 0 ||
        ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr != htonl(INADDR_LOOPBACK)) {
        fprintf(stderr, "  skipped: localhost does not resolve to 127.0.0.1 here\n");
        if (ai != NULL)
            freeaddrinfo(ai);
        return;
    }
    freeaddrinfo(ai);
    char url[64], out[8192], want[96], err[128];
    snprintf(url, sizeof(url), "redis://localhost:%d", R.port);
    struct stats st = {0};
    struct capture cap;
    log_init(PC_LOG_DEBUG, NULL, NULL, err, sizeof(err));
    capture_start(&cap);
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, true, &st);
    bool ready = run_until(is_ready, s, 5000);
    /* a reconnect resolves the name again (debug: the address did not change) */
    freeReplyObject(rcmd_db(0, "CLIENT KILL TYPE normal"));
    bool lost = run_until(not_ready, s, 5000);
    bool back = run_until(is_ready, s, 5000);
    store_destroy(&s);
    capture_end(&cap, out, sizeof(out));
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    T_CHECK(ready && lost && back);
    const char *first = strstr(out, "N redis: localhost resolved to 127.0.0.1");
    T_CHECK(first != NULL);
    T_CHECK(first != NULL && strstr(first + 1, "D redis: localhost resolved to 127.0.0.1") != NULL);
    snprintf(want, sizeof(want), "connected to redis://localhost:%d/0", R.port);
    T_CHECK(strstr(out, want) != NULL); /* log lines keep the name */
}

/* A connection-setup command that gets no reply names itself in the log. */
static void test_setup_timeout_message(void)
{
    char out[4096];
    struct stats st = {0};
    struct capture cap;
    kill(R.pid, SIGSTOP);
    capture_start(&cap);
    struct store *s = mk_store(R.unix_url, 50, true, &st);
    run_for(400);
    bool ready = store_ready(s);
    capture_end(&cap, out, sizeof(out));
    kill(R.pid, SIGCONT);
    T_CHECK(!ready);
    T_CHECK(strstr(out, "GET " PC_SCHEMA_KEY) != NULL);
    T_CHECK(strstr(out, "connection setup timed out") == NULL);
    T_CHECK(run_until(get_ok, s, 20000));
    store_destroy(&s);
}

/* --- `promptcache migrate` against a scripted fake Redis ----------------------------- */

struct fake {
    int lfd;
    char path[100];             /* fits sun_path */
    const char *const *replies; /* one per command read, in order; then the connection closes */
    size_t nreplies;
    bool shut_rd_last; /* stop reading before the last reply: the next write is EPIPE */
    int commands;
};

/* Length of the complete RESP command at the start of buf, or 0 while it is incomplete. */
static size_t resp_cmd_len(const char *buf, size_t len)
{
    const char *p = buf, *end = buf + len, *nl;
    if (len == 0 || *p != '*' || (nl = memchr(p, '\n', len)) == NULL)
        return 0;
    long n = strtol(p + 1, NULL, 10);
    p = nl + 1;
    for (long i = 0; i < n; i++) {
        if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            return 0;
        long blen = strtol(p + 1, NULL, 10);
        p = nl + 1;
        if (end - p < blen + 2)
            return 0;
        p += blen + 2;
    }
    return (size_t)(p - buf);
}

static void fake_listen(struct fake *f)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(f->path, sizeof(f->path), "%s/fake.sock", R.dir);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
    unlink(f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(f->lfd, 1) < 0) {
        perror("fake redis");
        exit(2);
    }
}

/* Wait (10 s at most) until fd is readable, so a client that never comes cannot hang the test. */
static bool fake_wait(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 10000) == 1;
}

/* Serve one connection: read each command, answer it from the script; then close. */
static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    static char buf[1 << 16];
    size_t have = 0;
    int fd = fake_wait(f->lfd) ? accept(f->lfd, NULL, NULL) : -1;
    for (size_t i = 0; fd >= 0 && i < f->nreplies; i++) {
        size_t n;
        while ((n = resp_cmd_len(buf, have)) == 0) {
            ssize_t got = fake_wait(fd) ? read(fd, buf + have, sizeof(buf) - have) : -1;
            if (got <= 0)
                goto out;
            have += (size_t)got;
        }
        memmove(buf, buf + n, have - n);
        have -= n;
        f->commands++;
        if (f->shut_rd_last && i + 1 == f->nreplies)
            shutdown(fd, SHUT_RD);
        if (write(fd, f->replies[i], strlen(f->replies[i])) < 0)
            break;
    }
out:
    if (fd >= 0)
        close(fd);
    close(f->lfd);
    unlink(f->path);
    return NULL;
}

/* Redis drops the connection mid-run: the CLI says so instead of dying of SIGPIPE. */
static void test_migrate_cli_sigpipe(void)
{
    static const char *const replies[] = {"$-1\r\n"}; /* GET pc:schema: nil, version 0 */
    struct fake f = {.replies = replies, .nreplies = 1, .shut_rd_last = true};
    char url[200], out[2048];
    fake_listen(&f);
    snprintf(url, sizeof(url), "unix:%s", f.path);
    struct capture cap;
    capture_start(&cap);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL); /* as a fresh `promptcache migrate` process has it */
        struct conf c;
        memset(&c, 0, sizeof(c));
        c.redis = url;
        c.redis_timeout = 1000;
        int rc = migrate_cli(&c, false);
        fflush(NULL);
        _exit(rc);
    }
    fake_serve(&f);
    int status = 0;
    waitpid(pid, &status, 0);
    capture_end(&cap, out, sizeof(out));
    if (WIFSIGNALED(status))
        fprintf(stderr, "  migrate died of signal %d\n", WTERMSIG(status));
    T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    T_CHECK(strstr(out, "migration 0001 initial: Broken pipe") != NULL);
}

static void *fake_thread(void *arg)
{
    return fake_serve(arg);
}

static bool log_says_tls(void *arg)
{
    char out[4096];
    capture_peek(arg, out, sizeof(out));
    return strstr(out, "before any reply (a TLS-only port?") != NULL;
}

/*
 * A server that closes the connection without a word before the handshake's
 * first reply - a TLS-only port, to which the store speaks plain text - is
 * named as such in the log: it said only "Connection reset by peer".
 */
static void test_closed_before_reply(void)
{
    struct fake f = {.replies = NULL, .nreplies = 0};
    char url[200], out[4096], err[64];
    fake_listen(&f);
    snprintf(url, sizeof(url), "unix:%s", f.path);
    pthread_t th;
    T_CHECK_INT(pthread_create(&th, NULL, fake_thread, &f), 0);
    log_init(PC_LOG_INFO, NULL, NULL, err, sizeof(err));
    struct capture cap;
    capture_start(&cap);
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    bool said = run_until(log_says_tls, &cap, 5000);
    store_destroy(&s);
    capture_end(&cap, out, sizeof(out));
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    pthread_join(th, NULL);
    T_CHECK(said);

    /* the tools' and threads' blocking client says it too */
    struct fake f2 = {.replies = NULL, .nreplies = 0};
    fake_listen(&f2);
    T_CHECK_INT(pthread_create(&th, NULL, fake_thread, &f2), 0);
    struct rcli k = {.quiet = true};
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    const char *argv[] = {"GET", "k"};
    T_CHECK(rcli_call(&k, 2, argv, NULL) == NULL);
    T_CHECK(strstr(k.errmsg, "before any reply (a TLS-only port?") != NULL);
    rcli_close(&k);
    pthread_join(th, NULL);

    /*
     * The same server, gone before the command is written: the write fails with a broken
     * pipe, not a reset or an end of file (the check above met it now and then, when the
     * fake closed first, and the hint was missing).
     */
    struct fake f3 = {.replies = NULL, .nreplies = 0};
    fake_listen(&f3);
    T_CHECK_INT(pthread_create(&th, NULL, fake_thread, &f3), 0);
    struct rcli k3 = {.quiet = true};
    T_CHECK_INT(rcli_open(&k3, url, 1000, "test"), 0);
    pthread_join(th, NULL); /* accepted and closed */
    T_CHECK(rcli_call(&k3, 2, argv, NULL) == NULL);
    T_CHECK(strstr(k3.errmsg, "before any reply (a TLS-only port?") != NULL);
    rcli_close(&k3);
}

/*
 * A forged or broken server's replies of the wrong type are failures (the
 * request bypasses), never values: an integer or a nested array to GET, a
 * bulk string to PTTL; nil is a miss. A RESP3 type (this client never asks
 * HELLO 3) is a protocol error: the connection is dropped, the commands on
 * it fail, and the store connects again. A huge bulk length that never comes
 * is a timeout, then a dropped connection (nothing is allocated for it).
 */
static void test_forged_replies(void)
{
    static char schema[32];
    snprintf(schema, sizeof(schema), "$%zu\r\n%s\r\n", strlen(latest), latest);
    const char *replies[] = {schema,    ":7\r\n",       "*1\r\n*1\r\n$1\r\nx\r\n",
                             "$-1\r\n", "$2\r\n12\r\n", "%1\r\n+a\r\n+b\r\n"};
    struct fake f = {.replies = replies, .nreplies = PC_ARRAY_LEN(replies)};
    char url[200];
    fake_listen(&f);
    snprintf(url, sizeof(url), "unix:%s", f.path);
    pthread_t th;
    T_CHECK_INT(pthread_create(&th, NULL, fake_thread, &f), 0);
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g;
    T_CHECK(get_wait(s, "k1", 2, &g) && g.st == STORE_ERR && g.null); /* an integer */
    T_CHECK(get_wait(s, "k2", 2, &g) && g.st == STORE_ERR && g.null); /* a nested array */
    T_CHECK(get_wait(s, "k3", 2, &g) && g.st == STORE_OK && g.null);  /* nil: a miss */
    memset(&g, 0, sizeof(g));
    T_CHECK(store_pttl(s, "k4", 2, int_cb, &g) != NULL); /* a bulk string */
    T_CHECK(run_until(got_done, &g, 5000) && g.st == STORE_ERR);
    T_CHECK(get_wait(s, "k5", 2, &g) && g.st == STORE_ERR && g.null); /* RESP3: dropped */
    T_CHECK(run_until(not_ready, s, 5000));
    T_CHECK_INT(st.v[STAT_redis_errors], 4);
    store_destroy(&s);
    pthread_join(th, NULL);

    /* a bulk string of a terabyte, announced and never sent: a timeout, then a new connection */
    const char *huge[] = {schema, "$1000000000000\r\nabc", "$1\r\nv\r\n"};
    struct fake f2 = {.replies = huge, .nreplies = PC_ARRAY_LEN(huge)};
    fake_listen(&f2);
    T_CHECK_INT(pthread_create(&th, NULL, fake_thread, &f2), 0);
    memset(&st, 0, sizeof(st));
    s = mk_store(url, 100, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    T_CHECK(get_wait(s, "k6", 2, &g) && g.st == STORE_TIMEOUT);
    T_CHECK(run_until(not_ready, s, 5000)); /* no reply for a watch window: dropped */
    store_destroy(&s);
    pthread_join(th, NULL);
}

/* Another instance applied the migration between our GET and our EVAL: still a success. */
static void test_migrate_cli_lost_race(void)
{
    static const char *const replies[] = {
        "$-1\r\n",                         /* GET pc:schema: version 0 */
        "-schema is at 1, expected 0\r\n", /* EVAL: someone else migrated */
        "$1\r\n2\r\n",                     /* GET pc:schema again: current (2) */
    };
    struct fake f = {.replies = replies, .nreplies = PC_ARRAY_LEN(replies)};
    char url[200], out[2048];
    pthread_t th;
    fake_listen(&f);
    snprintf(url, sizeof(url), "unix:%s", f.path);
    T_CHECK(pthread_create(&th, NULL, fake_serve, &f) == 0);
    int rc = run_cli(url, false, out, sizeof(out));
    pthread_join(th, NULL);
    T_CHECK_INT(rc, 0);
    T_CHECK_INT(f.commands, 3);
    T_CHECK(strstr(out, "another instance") != NULL);
    T_CHECK(strstr(out, "failed") == NULL);
}

/*
 * A Redis that answers every command, but each too late: its replies trickle
 * in a byte every TRICKLE_MS (so the connection looks alive and is kept).
 * Serves one connection until told to stop; slow while slow is set.
 */
#define TRICKLE_MS 10 /* a byte this often: alive for a 100 ms stall watch, with margin */

struct slow_redis {
    struct fake f;
    int slow;   /* atomic: trickle the replies */
    int stop;   /* atomic */
    int served; /* atomic: commands answered */
};

static void slow_reply(int fd, const char *reply, bool slow)
{
    size_t n = strlen(reply);
    for (size_t i = 0; i < n; i++) {
        if (slow)
            sleep_ms(TRICKLE_MS); /* the behaviour under test, not a wait */
        if (write(fd, reply + i, slow ? 1 : n - i) < 0 || !slow)
            return;
    }
}

static void *slow_serve(void *arg)
{
    struct slow_redis *sr = arg;
    static char buf[1 << 16];
    size_t have = 0;
    int fd = fake_wait(sr->f.lfd) ? accept(sr->f.lfd, NULL, NULL) : -1;
    while (fd >= 0 && !__atomic_load_n(&sr->stop, __ATOMIC_RELAXED)) {
        size_t n;
        while ((n = resp_cmd_len(buf, have)) == 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (__atomic_load_n(&sr->stop, __ATOMIC_RELAXED))
                goto out;
            if (poll(&p, 1, 100) != 1)
                continue;
            ssize_t got = read(fd, buf + have, sizeof(buf) - have);
            if (got <= 0)
                goto out;
            have += (size_t)got;
        }
        bool schema = strstr(buf, PC_SCHEMA_KEY) != NULL && strstr(buf, PC_SCHEMA_KEY) < buf + n;
        memmove(buf, buf + n, have - n);
        have -= n;
        /* The schema is current; every other GET finds a value (21 bytes: ~210 ms slow). */
        char current[16];
        snprintf(current, sizeof(current), "$1\r\n%ld\r\n", migrate_latest());
        slow_reply(fd, schema ? current : "$14\r\nnot in time...\r\n",
                   !schema && __atomic_load_n(&sr->slow, __ATOMIC_RELAXED));
        __atomic_add_fetch(&sr->served, 1, __ATOMIC_RELAXED);
    }
out:
    if (fd >= 0)
        close(fd);
    close(sr->f.lfd);
    unlink(sr->f.path);
    return NULL;
}

struct degraded {
    struct store *s;
    struct got g;
    int timeouts;
    uint64_t until_ms;
};

/* Keep one GET outstanding until until_ms; count the ones that time out. */
static bool degraded_step(void *arg)
{
    struct degraded *d = arg;
    if (d->g.done && d->g.st == STORE_TIMEOUT)
        d->timeouts++;
    if (pc_mono_ms() >= d->until_ms)
        return true;
    if (d->g.done || d->timeouts == 0) {
        memset(&d->g, 0, sizeof(d->g));
        if (store_get(d->s, "k", 1, get_cb, &d->g) == NULL)
            return true; /* dropped: the test fails on what follows */
    }
    return false;
}

/*
 * Redis alive but answering every command too late for over a second: the
 * cache does not work, though the connection stays up. One warning; one
 * notice when answers come in time again.
 */
static void test_health_degraded(void)
{
    char out[8192], err[64];
    struct stats st = {0};
    struct slow_redis sr = {.slow = 0};
    struct capture cap;
    pthread_t th;
    fake_listen(&sr.f);
    T_CHECK(pthread_create(&th, NULL, slow_serve, &sr) == 0);
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    char url[160];
    snprintf(url, sizeof(url), "unix:%s", sr.f.path);
    /* Degraded after max(1 s, 20 x 100 ms). The stall watch's window (100 ms) is ten trickled
     * bytes: a loaded machine that leaves the trickling thread without a CPU for a few 10 ms
     * steps must not make a slow server look like a dead one (a 50 ms window dropped it at
     * load 9). */
    struct store *s = mk_store(url, 100, false, &st);
    T_CHECK(run_until(get_ok, s, 5000));
    capture_start(&cap);
    __atomic_store_n(&sr.slow, 1, __ATOMIC_RELAXED);
    struct degraded d = {.s = s, .until_ms = pc_mono_ms() + 2600};
    d.g.done = true;
    run_until(degraded_step, &d, 5000);
    T_CHECK(store_ready(s)); /* alive all along: never dropped */
    __atomic_store_n(&sr.slow, 0, __ATOMIC_RELAXED);
    T_CHECK(run_until(get_ok, s, 5000));
    capture_end(&cap, out, sizeof(out));
    T_CHECK(d.timeouts >= 3);
    T_CHECK(st.v[STAT_redis_timeouts] >= 3);
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 1);
    T_CHECK(strstr(out, "every command timed out for 2000 ms") != NULL);
    T_CHECK_INT(count_of(out, " N redis: the cache works again ("), 1);
    store_destroy(&s);
    __atomic_store_n(&sr.stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
}

static void test_migrate_script(void)
{
    struct pc_buf b = PC_BUF_INIT;
    T_CHECK_INT(migrate_latest(), (long)pc_migrations_count);
    migrate_script(0, &b);
    T_CHECK(strstr(pc_buf_cstr(&b), "redis.error_reply('schema is at ") != NULL);
    /* pc:meta is the applier's to write (another slot than pc:schema in a cluster) */
    T_CHECK(strstr(pc_buf_cstr(&b), "HSET") == NULL);
    pc_buf_free(&b);
    /* applied: [version, 'migrated_at', now, fields of the body...], written by the applier */
    freeReplyObject(rcmd_db(0, "DEL " PC_SCHEMA_KEY " " PC_META_KEY));
    migrate_script(0, &b);
    redisReply *ok = rcmd_db(0, "EVAL %s 1 %s 0 1 123", pc_buf_cstr(&b), PC_SCHEMA_KEY);
    T_CHECK(migrate_reply_applied(ok));
    struct migrate_meta mm;
    migrate_meta_from(ok, &mm);
    T_CHECK_INT(mm.argc, 6);
    T_CHECK(mm.argc == 6 && strcmp(mm.argv[0], "HSET") == 0 &&
            strcmp(mm.argv[1], PC_META_KEY) == 0 && strcmp(mm.argv[2], "migrated_at") == 0 &&
            strcmp(mm.argv[3], "123") == 0 && strcmp(mm.argv[4], "created_at") == 0);
    freeReplyObject(ok);
    T_CHECK_STR(rtext_db(0, "EXISTS pc:meta"), ":0");
    freeReplyObject(rcmd_db(0, "SET " PC_SCHEMA_KEY " %s", latest));
    pc_buf_free(&b);
    /* a stale script (version moved on) is refused and changes nothing */
    freeReplyObject(rcmd_db(0, "DEL pc:meta"));
    migrate_script(0, &b);
    redisReply *r = rcmd_db(0, "EVAL %s 1 %s 0 1 123", pc_buf_cstr(&b), PC_SCHEMA_KEY);
    T_CHECK(r->type == REDIS_REPLY_ERROR && strstr(r->str, "expected 0") &&
            strncmp(r->str, "schema is at ", 13) == 0 && strcmp(r->str + 13, "0, expected 0") != 0);
    freeReplyObject(r);
    T_CHECK_STR(rtext_db(0, "EXISTS pc:meta"), ":0");
    T_CHECK_STR(rtext_db(0, "GET " PC_SCHEMA_KEY), latest);
    pc_buf_free(&b);
}

/* --- cluster:// against a scripted fake node ----------------------------------------- */

/*
 * A fake Redis Cluster node on a loopback TCP port: it says it serves every
 * slot (CLUSTER SHARDS), that the schema is current, answers PING and
 * ASKING, and answers every other command from its script, in order (then
 * "$1\r\nv"). The store's probe of an idle node that said CLUSTERDOWN (PTTL
 * pc:probe:{N}) is answered outside the script, as the node stands: down
 * while its last scripted reply was CLUSTERDOWN and more of the script is to
 * come (the probe's timing is the store's tick's: taking a scripted reply, it
 * took the one a test meant for its own command, now and then). Serves any
 * number of connections until stopped.
 */
struct fnode {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    const char *const *script;
    size_t nscript;
    atomic_size_t next;           /* script replies given */
    atomic_int askings, commands; /* ASKING seen; scripted commands answered */
    atomic_int probes;            /* PTTL pc:probe:... answered */
    bool down;                    /* the last scripted reply was CLUSTERDOWN, more to come */
    char shards[512];
    char schema[32]; /* GET pc:schema: the version this build needs */
};

/* The first word of the RESP command at buf (its name), upper-cased, and its second argument. */
static void fnode_words(const char *buf, char *name, size_t n, char *arg, size_t an)
{
    name[0] = arg[0] = '\0';
    const char *p = strchr(buf, '\n');
    for (int i = 0; p != NULL && i < 2; i++) {
        long len = strtol(p + 2, NULL, 10); /* "$LEN\r\n" */
        const char *s = strchr(p + 1, '\n');
        if (s == NULL)
            return;
        char *out = i == 0 ? name : arg;
        size_t cap = i == 0 ? n : an;
        snprintf(out, cap, "%.*s", (int)PC_MIN((size_t)len, cap - 1), s + 1);
        p = strchr(s + 1 + len, '\n');
    }
    for (char *c = name; *c; c++)
        *c = (char)toupper((unsigned char)*c);
}

static const char *fnode_reply(struct fnode *f, const char *cmd)
{
    char name[32], arg[64];
    fnode_words(cmd, name, sizeof(name), arg, sizeof(arg));
    if (strcmp(name, "PING") == 0)
        return "+PONG\r\n";
    if (strcmp(name, "CLUSTER") == 0)
        return f->shards;
    if (strcmp(name, "ASKING") == 0) {
        atomic_fetch_add(&f->askings, 1);
        return "+OK\r\n";
    }
    if (strcmp(name, "GET") == 0 && strcmp(arg, PC_SCHEMA_KEY) == 0)
        return f->schema;
    if (strcmp(name, "EXISTS") == 0 && strcmp(arg, PC_SCHEMA_KEY) == 0) /* the schema watch */
        return f->down ? "-CLUSTERDOWN The cluster is down\r\n" : ":1\r\n";
    if (strcmp(name, "GET") == 0 && strncmp(arg, "warm", 4) == 0)
        return "$1\r\nw\r\n"; /* warm_key: the script is left as it is */
    if (strcmp(name, "PTTL") == 0 && strncmp(arg, "pc:probe:", 9) == 0) {
        atomic_fetch_add(&f->probes, 1);
        return f->down ? "-CLUSTERDOWN The cluster is down\r\n" : ":-2\r\n";
    }
    atomic_fetch_add(&f->commands, 1);
    size_t i = atomic_fetch_add(&f->next, 1);
    const char *r = i < f->nscript ? f->script[i] : "$1\r\nv\r\n";
    f->down = i + 1 < f->nscript && strncmp(r, "-CLUSTERDOWN", 12) == 0;
    return r;
}

/* Answer every complete command in a client's buffer; false once the client is gone. */
static bool fnode_client(struct fnode *f, int fd, char *buf, size_t *have, size_t cap)
{
    ssize_t got = read(fd, buf + *have, cap - *have);
    if (got <= 0)
        return false;
    *have += (size_t)got;
    size_t n;
    while ((n = resp_cmd_len(buf, *have)) > 0) {
        const char *r = fnode_reply(f, buf);
        if (write(fd, r, strlen(r)) < 0)
            return false;
        memmove(buf, buf + n, *have - n);
        *have -= n;
    }
    return true;
}

static void *fnode_main(void *arg)
{
    struct fnode *f = arg;
    enum { CLIENTS = 8 };
    struct pollfd p[1 + CLIENTS];
    /* each fake node's own: two of them run at once (a static array was shared, and their
     * clients' commands were mixed up now and then) */
    char(*bufs)[1 << 14] = pc_malloc(CLIENTS * sizeof(*bufs));
    size_t have[CLIENTS] = {0};
    int nc = 0;
    while (!atomic_load(&f->stop)) {
        p[0] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        for (int i = 0; i < nc; i++)
            p[1 + i].events = POLLIN;
        if (poll(p, (nfds_t)(1 + nc), 20) <= 0)
            continue;
        for (int i = nc - 1; i >= 0; i--) { /* from the end: the last one is done already */
            if (!(p[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) ||
                fnode_client(f, p[1 + i].fd, bufs[i], &have[i], sizeof(bufs[i])))
                continue;
            close(p[1 + i].fd);
            if (i != --nc) {
                p[1 + i] = p[1 + nc];
                memcpy(bufs[i], bufs[nc], have[nc]);
                have[i] = have[nc];
            }
        }
        if ((p[0].revents & POLLIN) && nc < CLIENTS) {
            int fd = accept(f->lfd, NULL, NULL);
            if (fd >= 0) {
                have[nc] = 0;
                p[1 + nc++] = (struct pollfd){.fd = fd, .events = POLLIN};
            }
        }
    }
    for (int i = 0; i < nc; i++)
        close(p[1 + i].fd);
    close(f->lfd);
    free(bufs);
    return NULL;
}

static void fnode_start(struct fnode *f, const char *const *script, size_t n)
{
    memset(f, 0, sizeof(*f));
    f->script = script;
    f->nscript = n;
    f->port = free_tcp_port();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(f->lfd, 8) < 0) {
        perror("fake cluster node");
        exit(2);
    }
    snprintf(f->shards, sizeof(f->shards),
             "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*8\r\n"
             "$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n"
             "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n",
             f->port);
    snprintf(f->schema, sizeof(f->schema), "$%zu\r\n%s\r\n", strlen(latest), latest);
    if (pthread_create(&f->th, NULL, fnode_main, f) != 0)
        exit(2);
}

static void fnode_stop(struct fnode *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
}

static bool fnode_answered(void *arg)
{
    struct fnode *f = arg;
    return atomic_load(&f->next) >= f->nscript;
}

/*
 * The cluster store over a node that redirects: TRYAGAIN is sent again
 * later (five hops at most), ASK goes once with ASKING first, MOVED to a
 * node that is not there and CLUSTERDOWN fail the command (the caller
 * bypasses) and are counted; a command waiting to be sent again can be
 * cancelled, or its store destroyed (ASan: nothing leaks).
 */
static void test_cluster_redirects(void)
{
    char ask[80], moved[80], url[64];
    int dead = free_tcp_port();
    struct fnode f;
    static const char *const tryagain =
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
    const char *script[] = {
        tryagain,
        tryagain,
        "$5\r\nhello\r\n", /* k1: two TRYAGAIN, then the value */
        ask,
        "$2\r\nhi\r\n", /* k2: ASK to itself */
        moved,          /* k3: MOVED to a dead node */
        tryagain,
        tryagain,
        tryagain,
        tryagain,
        tryagain,
        tryagain,                               /* k4: more than 5 */
        "-CLUSTERDOWN The cluster is down\r\n", /* k5 */
    };
    fnode_start(&f, script, PC_ARRAY_LEN(script));
    snprintf(ask, sizeof(ask), "-ASK %u 127.0.0.1:%d\r\n", cluster_slot("k2", 2), f.port);
    snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d\r\n", cluster_slot("k3", 2), dead);
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", f.port);
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    T_CHECK(st.v[STAT_redis_cluster_maps] >= 1);
    T_CHECK_INT(st.v[STAT_redis_connected], 1);
    struct got g;
    T_CHECK(get_wait(s, "k1", 2, &g) && g.st == STORE_OK && g.len == 5 &&
            memcmp(g.val, "hello", 5) == 0);
    T_CHECK_INT(g.calls, 1);
    T_CHECK_INT(st.v[STAT_redis_tryagain], 2);
    T_CHECK(get_wait(s, "k2", 2, &g) && g.st == STORE_OK && g.len == 2);
    T_CHECK_INT(atomic_load(&f.askings), 1);
    T_CHECK_INT(st.v[STAT_redis_ask], 1);
    T_CHECK(get_wait(s, "k3", 2, &g) && g.st == STORE_ERR);
    T_CHECK_INT(st.v[STAT_redis_moved], 1);
    T_CHECK(get_wait(s, "k4", 2, &g) && g.st == STORE_ERR);
    T_CHECK_INT(st.v[STAT_redis_tryagain], 2 + 5);
    T_CHECK_INT(atomic_load(&f.commands), 3 + 2 + 1 + 6);
    T_CHECK(get_wait(s, "k5", 2, &g) && g.st == STORE_ERR);
    T_CHECK(store_ready(s)); /* the other slots may still work: only this command bypassed */
    T_CHECK(run_until(fnode_answered, &f, 5000));
    store_destroy(&s);
    fnode_stop(&f);

    /* waiting to be sent again: cancelled (no callback), or its store destroyed (STORE_ERR) */
    static const char *const parked[] = {"-TRYAGAIN x\r\n", "-TRYAGAIN x\r\n"};
    fnode_start(&f, parked, PC_ARRAY_LEN(parked));
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", f.port);
    s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    memset(&g, 0, sizeof(g));
    struct store_cmd *c = store_get(s, "p1", 2, get_cb, &g);
    T_CHECK(c != NULL);
    while (atomic_load(&f.next) < 1) /* the TRYAGAIN is on its way: read it (parked 10 ms) */
        event_base_loop(base, EVLOOP_ONCE);
    event_base_loop(base, EVLOOP_NONBLOCK);
    store_cancel(&c);
    run_for(100);
    T_CHECK_INT(g.calls, 0);
    struct got g2 = {0};
    T_CHECK(store_get(s, "p2", 2, get_cb, &g2) != NULL);
    while (atomic_load(&f.next) < 2)
        event_base_loop(base, EVLOOP_ONCE);
    event_base_loop(base, EVLOOP_NONBLOCK);
    store_destroy(&s);
    T_CHECK_INT(g2.calls, 1);
    T_CHECK(g2.st == STORE_ERR);
    run_for(50);
    fnode_stop(&f);
}

/*
 * CLUSTERDOWN that is old news: three GETs go out together; the first is
 * answered CLUSTERDOWN (the cache stops working: one warning), the second
 * with a value (it works again: one notice), the third CLUSTERDOWN, but it
 * was sent before that answer, as when the nodes see the cluster come back
 * one by one: it fails that command only, with no second warning. A
 * CLUSTERDOWN to a command sent after the answer is news again.
 */
static void test_cluster_down_stale(void)
{
    char out[8192], err[64], url[64];
    struct fnode f;
    static const char *const down = "-CLUSTERDOWN The cluster is down\r\n";
    const char *script[] = {down, "$1\r\nv\r\n", down, down};
    fnode_start(&f, script, PC_ARRAY_LEN(script));
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", f.port);
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct capture cap;
    capture_start(&cap);
    struct got g[4] = {{0}};
    static const char *const keys[] = {"k0", "k1", "k2", "k3"};
    for (int i = 0; i < 3; i++)
        T_CHECK(store_get(s, keys[i], 2, get_cb, &g[i]) != NULL);
    T_CHECK(run_until(got_done, &g[2], 5000));
    T_CHECK(g[0].st == STORE_ERR && g[1].st == STORE_OK && g[2].st == STORE_ERR);
    capture_end(&cap, out, sizeof(out));
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 1); /* k0 */
    T_CHECK_INT(count_of(out, " N redis: the cache works again ("), 1);    /* k1; k2 old news */
    T_CHECK(strstr(out, "CLUSTERDOWN") != NULL);
    capture_start(&cap);
    T_CHECK(get_wait(s, keys[3], 2, &g[3]) && g[3].st == STORE_ERR);
    store_destroy(&s);
    capture_end(&cap, out, sizeof(out));
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 1); /* k3 */
    fnode_stop(&f);
}

/* Two fake nodes, a owning slots 0..8191 and b the rest: both answer this map. */
static void fnode_pair_map(struct fnode *a, struct fnode *b)
{
    char map[512];
    snprintf(map, sizeof(map),
             "*2\r\n"
             "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*1\r\n*8\r\n"
             "$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n"
             "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
             "*4\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*8\r\n"
             "$4\r\nport\r\n:%d\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n"
             "$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n",
             a->port, b->port);
    memcpy(a->shards, map, sizeof(map));
    memcpy(b->shards, map, sizeof(map));
}

/* A key whose slot is in [lo, hi]: "k..." (or "warm...", answered outside the script). */
static void key_named(const char *prefix, unsigned lo, unsigned hi, char *out, size_t n)
{
    for (unsigned i = 0;; i++) {
        snprintf(out, n, "%s%u", prefix, i);
        unsigned slot = cluster_slot(out, strlen(out));
        if (slot >= lo && slot <= hi)
            return;
    }
}

static void key_in(unsigned lo, unsigned hi, char *out, size_t n)
{
    for (unsigned i = 0;; i++) {
        snprintf(out, n, "k%u", i);
        unsigned slot = cluster_slot(out, strlen(out));
        if (slot >= lo && slot <= hi)
            return;
    }
}

static bool map_read(void *arg)
{
    const struct stats *st = arg;
    return st->v[STAT_redis_cluster_maps] >= 1;
}

/* Once the map is in, GET key until its node (connecting) answers it: the script's first. */
static bool warm_up(struct store *s, const char *key)
{
    struct got g;
    for (int i = 0; i < 500; i++) {
        if (get_wait(s, key, strlen(key), &g) && g.st == STORE_OK)
            return true;
        run_for(10);
    }
    return false;
}

static bool probed(void *arg)
{
    return atomic_load(&((struct fnode *)arg)->probes) >= 1;
}

static bool notice_logged(void *arg)
{
    struct capture *cap = arg;
    char out[8192];
    capture_peek(cap, out, sizeof(out));
    return strstr(out, " N redis: the cache works again (") != NULL;
}

/*
 * After a failover the nodes see the cluster come back one by one: the
 * outage ends when every node that said CLUSTERDOWN serves keys again, not
 * at the first answer (one warning, one notice). A node that said so and
 * gets no traffic for its slots is asked by the tick (PTTL of a key of its
 * slots), so the outage still ends.
 */
static void test_cluster_down_until_every_node(void)
{
    char out[8192], err[64], url[96], ka[16], kb[16];
    static const char *const down = "-CLUSTERDOWN The cluster is down\r\n";
    static const char *const value = "$1\r\nv\r\n";
    const char *sa[] = {down, value};
    const char *sb[] = {value, down, down, value}; /* the first for warm_up */
    struct fnode a, b;
    fnode_start(&a, sa, PC_ARRAY_LEN(sa));
    fnode_start(&b, sb, PC_ARRAY_LEN(sb));
    fnode_pair_map(&a, &b);
    key_in(0, 8191, ka, sizeof(ka));
    key_in(8192, 16383, kb, sizeof(kb));
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", a.port);
    log_init(PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000) && run_until(map_read, &st, 5000) && warm_up(s, kb));
    struct capture cap;
    capture_start(&cap);
    struct got g;
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_ERR); /* a: down */
    T_CHECK(get_wait(s, kb, strlen(kb), &g) && g.st == STORE_ERR); /* b: down */
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_OK);  /* a serves again; b not */
    T_CHECK(get_wait(s, kb, strlen(kb), &g) && g.st == STORE_ERR); /* b: still down */
    T_CHECK(get_wait(s, kb, strlen(kb), &g) && g.st == STORE_OK);  /* b serves again */
    capture_end(&cap, out, sizeof(out));
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 1);
    T_CHECK_INT(count_of(out, " N redis: the cache works again ("), 1);
    store_destroy(&s);
    fnode_stop(&a);
    fnode_stop(&b);

    /* b said CLUSTERDOWN and then gets nothing: the tick's probe ends the outage */
    const char *sa2[] = {value};
    const char *sb2[] = {value, down};
    fnode_start(&a, sa2, PC_ARRAY_LEN(sa2));
    fnode_start(&b, sb2, PC_ARRAY_LEN(sb2));
    fnode_pair_map(&a, &b);
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", a.port);
    memset(&st, 0, sizeof(st));
    s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000) && run_until(map_read, &st, 5000) && warm_up(s, kb));
    capture_start(&cap);
    T_CHECK(get_wait(s, kb, strlen(kb), &g) && g.st == STORE_ERR);
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_OK);
    T_CHECK(run_until(notice_logged, &cap, 5000));
    T_CHECK(atomic_load(&b.probes) >= 1); /* the probe went to b */
    capture_end(&cap, out, sizeof(out));
    T_CHECK_INT(count_of(out, " W redis: the cache is not working ("), 1);
    store_destroy(&s);
    fnode_stop(&a);
    fnode_stop(&b);
}

/*
 * The tick asks a node that said CLUSTERDOWN a PTTL only while it gets no
 * traffic: a node the lookups still go to is not probed (their answers end
 * the outage). Lookups every 50 ms for 1.5 s: no probe (before, the tick
 * probed it at once and every second, and the probe took the reply a test
 * scripted for its own command); then idle, it is probed.
 */
static void test_cluster_down_busy_node_unprobed(void)
{
    static const char *const down = "-CLUSTERDOWN The cluster is down\r\n";
    const char *script[64];
    for (size_t i = 0; i < PC_ARRAY_LEN(script); i++)
        script[i] = down;
    char url[64];
    struct fnode f;
    fnode_start(&f, script, PC_ARRAY_LEN(script));
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", f.port);
    struct stats st = {0};
    struct store *s = mk_store(url, TEST_TIMEOUT_MS, false, &st);
    T_CHECK(run_until(is_ready, s, 5000));
    struct got g;
    uint64_t start = pc_mono_ms(), last = start, max_gap = 0;
    while (pc_mono_ms() - start < 1500 && atomic_load(&f.next) + 1 < f.nscript) {
        uint64_t now = pc_mono_ms();
        max_gap = PC_MAX(max_gap, now - last);
        last = now;
        T_CHECK(get_wait(s, "k1", 2, &g) && g.st == STORE_ERR);
        run_for(50 - (int)PC_MIN(pc_mono_ms() - now, 50));
    }
    int probes = atomic_load(&f.probes);
    /* a stall of the test itself (a loaded machine) leaves the node idle long enough */
    if (max_gap < 400)
        T_CHECK_INT(probes, 0);
    T_CHECK(run_until(probed, &f, 5000)); /* idle now */
    store_destroy(&s);
    fnode_stop(&f);
}

/*
 * A redirection is checked against the command it answers, and ASK holds for
 * the command's retries: a TRYAGAIN from the importing node (keys of the slot
 * half-way there) is sent there again after ASKING, as the first try was
 * (without it the node answers MOVED back: the command went round until its
 * hops ran out). A MOVED naming another slot than the key's is not followed
 * (a forged or garbled reply must not move slots in the map, nor the command
 * to an address of its choosing); a MOVED loop ends after five hops. The
 * blocking client (pc_rcli.h) alike.
 */
static void test_cluster_redirect_checks(void)
{
    char ka[16], kb[16], wa[16], wb[16], ask[80], moved[80], self[80], url[96];
    static const char *const value = "$1\r\nv\r\n";
    static const char *const tryagain = "-TRYAGAIN Multiple keys request during rehashing\r\n";
    struct fnode a, b;
    key_in(0, 8191, ka, sizeof(ka));
    key_in(8192, 16383, kb, sizeof(kb));
    key_named("warm", 0, 8191, wa, sizeof(wa));
    key_named("warm", 8192, 16383, wb, sizeof(wb));
    const char *sa[] = {ask, moved, self, self, self, self, self, self, ask, moved};
    const char *sb[] = {tryagain, value, tryagain, value};
    fnode_start(&a, sa, PC_ARRAY_LEN(sa));
    fnode_start(&b, sb, PC_ARRAY_LEN(sb));
    fnode_pair_map(&a, &b);
    snprintf(ask, sizeof(ask), "-ASK %u 127.0.0.1:%d\r\n", cluster_slot(ka, strlen(ka)), b.port);
    snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d\r\n",
             (cluster_slot(ka, strlen(ka)) + 1) % CLUSTER_SLOTS, b.port);
    snprintf(self, sizeof(self), "-MOVED %u 127.0.0.1:%d\r\n", cluster_slot(ka, strlen(ka)),
             a.port);
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", a.port);
    struct stats st = {0};
    struct store *s = mk_store(url, 5000, false, &st);
    T_CHECK(run_until(is_ready, s, 5000) && run_until(map_read, &st, 5000) && warm_up(s, wa) &&
            warm_up(s, wb));
    struct got g;
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_OK && g.len == 1);
    T_CHECK_INT(atomic_load(&b.askings), 2); /* before the GET, and before it again */
    T_CHECK_INT(st.v[STAT_redis_ask], 1);
    T_CHECK_INT(st.v[STAT_redis_tryagain], 1);
    int on_b = atomic_load(&b.commands);
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_ERR); /* MOVED, another slot */
    T_CHECK_INT(atomic_load(&b.commands), on_b);
    T_CHECK_INT(st.v[STAT_redis_moved], 0);
    int on_a = atomic_load(&a.commands); /* a MOVED to itself, again and again: 5 hops */
    T_CHECK(get_wait(s, ka, strlen(ka), &g) && g.st == STORE_ERR);
    T_CHECK_INT(atomic_load(&a.commands), on_a + 6);
    T_CHECK_INT(st.v[STAT_redis_moved], 5);
    store_destroy(&s);

    struct rcli k = {.quiet = true};
    T_CHECK_INT(rcli_open(&k, url, 5000, "test"), 0);
    const char *get[] = {"GET", ka};
    redisReply *r = rcli_call(&k, 2, get, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "v") == 0);
    T_CHECK_INT(atomic_load(&b.askings), 4);
    if (r != NULL)
        freeReplyObject(r);
    on_b = atomic_load(&b.commands);
    r = rcli_call(&k, 2, get, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "MOVED", 5) == 0);
    T_CHECK_INT(atomic_load(&b.commands), on_b);
    if (r != NULL)
        freeReplyObject(r);
    rcli_close(&k);
    fnode_stop(&a);
    fnode_stop(&b);
}

/*
 * The blocking client (pc_rcli.h) on the same fake node: TRYAGAIN and ASK
 * followed, a MOVED to a node that is not there is a failure that names it,
 * SCAN over the (one) primary ends with cursor "0".
 */
static void test_cluster_rcli(void)
{
    char ask[80], moved[80], url[64];
    int dead = free_tcp_port();
    struct fnode f;
    const char *script[] = {
        "-TRYAGAIN x\r\n",
        "$1\r\nx\r\n", /* a */
        ask,
        "$1\r\ny\r\n",                          /* b */
        moved,                                  /* c */
        "*2\r\n$1\r\n0\r\n*1\r\n$3\r\nk:1\r\n", /* SCAN */
    };
    fnode_start(&f, script, PC_ARRAY_LEN(script));
    snprintf(ask, sizeof(ask), "-ASK %u 127.0.0.1:%d\r\n", cluster_slot("b", 1), f.port);
    snprintf(moved, sizeof(moved), "-MOVED %u 127.0.0.1:%d\r\n", cluster_slot("c", 1), dead);
    snprintf(url, sizeof(url), "cluster://127.0.0.1:%d", f.port);
    struct rcli k = {.quiet = true};
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    const char *a[] = {"GET", "a"}, *b[] = {"GET", "b"}, *c[] = {"GET", "c"};
    redisReply *r = rcli_call(&k, 2, a, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "x") == 0);
    freeReplyObject(r);
    r = rcli_call(&k, 2, b, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_STRING && strcmp(r->str, "y") == 0);
    T_CHECK_INT(atomic_load(&f.askings), 1);
    freeReplyObject(r);
    T_CHECK(rcli_call(&k, 2, c, NULL) == NULL);
    char want[80];
    snprintf(want, sizeof(want), "cluster node 127.0.0.1:%d", dead);
    T_CHECK(strstr(k.errmsg, want) != NULL && strstr(k.errmsg, "GET") != NULL);
    const char *scan[] = {"SCAN", "0", "MATCH", "k:*"};
    r = rcli_call(&k, 4, scan, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            strcmp(r->element[0]->str, "0") == 0 && r->element[1]->elements == 1);
    if (r != NULL)
        freeReplyObject(r);
    T_CHECK_INT(rcli_route(&k, "a", 1), 0);
    T_CHECK(k.rc != NULL);
    rcli_close(&k);
    fnode_stop(&f);
}

/* --- pc_redisev.h: hiredis on the loop, written without waiting for EV_WRITE --------- */

struct rev_state {
    int connected; /* 1 ok, -1 failed */
    int replies;
    int want; /* rev_done: this many replies */
    char last[64];
};

static void rev_on_connect(const redisAsyncContext *ac, int status)
{
    struct rev_state *st = ac->data;
    st->connected = status == REDIS_OK ? 1 : -1;
}

static void rev_on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    struct rev_state *st = priv;
    redisReply *r = reply;
    st->replies++;
    snprintf(st->last, sizeof(st->last), "%s",
             r == NULL                        ? "(null)"
             : r->type == REDIS_REPLY_INTEGER ? "int"
             : r->str != NULL                 ? r->str
                                              : "?");
}

static bool rev_connected(void *arg)
{
    return ((struct rev_state *)arg)->connected != 0;
}

static bool rev_done(void *arg)
{
    const struct rev_state *st = arg;
    return st->replies >= st->want;
}

/* Events added or active (libevent counts an active one as added). */
static int added_events(void)
{
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED);
}

static int active_events(void)
{
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ACTIVE);
}

/* A reply that outgrows the cap fails the reader: its next feed fails, so hiredis drops the
 * connection; one within the cap (or no cap) is read as always. */
static void test_reader_cap(void)
{
    redisReader *r = redisReaderCreate();
    const char head[] = "$1099511627776\r\n";
    char part[64];
    memset(part, 'x', sizeof(part));
    T_CHECK_INT(redisReaderFeed(r, head, sizeof(head) - 1), REDIS_OK);
    T_CHECK_INT(redisReaderFeed(r, part, sizeof(part)), REDIS_OK);
    T_CHECK(!redisev_reader_cap(r, 0));
    T_CHECK(!redisev_reader_cap(r, 4096));
    T_CHECK(redisev_reader_cap(r, 32));
    T_CHECK(strstr(r->errstr, "larger than 32 bytes") != NULL);
    T_CHECK_INT(redisReaderFeed(r, part, sizeof(part)), REDIS_ERR);
    void *reply = NULL;
    T_CHECK_INT(redisReaderGetReply(r, &reply), REDIS_ERR);
    T_CHECK(reply == NULL);
    redisReaderFree(r);
}

/* Feed text to a reader guarded by caps, in pieces of step bytes; the reply, or NULL. */
static redisReply *guarded_read(const struct redisev_caps *caps, const char *text, size_t step,
                                int *rc, char *errstr, size_t errlen)
{
    redisReader *r = redisReaderCreate();
    redisev_guard(r, caps);
    void *reply = NULL;
    *rc = REDIS_OK;
    for (size_t at = 0, n = strlen(text); at < n && reply == NULL && *rc == REDIS_OK; at += step) {
        size_t k = n - at < step ? n - at : step;
        *rc = redisReaderFeed(r, text + at, k);
        if (*rc == REDIS_OK)
            *rc = redisReaderGetReply(r, &reply);
    }
    snprintf(errstr, errlen, "%s", r->errstr);
    redisReaderFree(r); /* frees a partial reply: ASan sees a leak or a double free */
    return reply;
}

/*
 * The guard on a reply's elements: an array announcing more than the cap, or counts that
 * add up to more, strings longer together than the byte cap (and a negative count, which
 * hiredis refuses itself): the reader
 * fails with a protocol error, whether the bytes come at once or a few at a time. Replies
 * within the caps come out whole, their totals gone from the root.
 */
static void test_reader_guard(void)
{
    const struct redisev_caps caps = {64, 10};
    static const struct {
        const char *text, *err; /* err NULL: a reply */
    } cases[] = {
        {"*2000000000\r\n:1\r\n:1\r\n", "more than 10 elements"},
        {"*11\r\n", "more than 10 elements"},
        {"*2\r\n*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n*5\r\n:1\r\n", "more than 10 elements"},
        {"*3\r\n*2\r\n:1\r\n:2\r\n*-3\r\n:1\r\n", "out of range"}, /* hiredis 0.14.1's own */
        {"*-3\r\n", "out of range"},
        {"*3\r\n$40\r\n0123456789012345678901234567890123456789\r\n"
         "$40\r\n0123456789012345678901234567890123456789\r\n:1\r\n",
         "larger than 64 bytes"},
        {"*2\r\n*4\r\n:1\r\n:2\r\n$3\r\nabc\r\n*0\r\n*4\r\n:1\r\n$-1\r\n*-1\r\n+OK\r\n", NULL},
        {"*10\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n", NULL},
        {"$5\r\nhello\r\n", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (size_t step = 1; step <= 4096; step *= 4096) {
            int rc;
            char err[128];
            redisReply *r = guarded_read(&caps, cases[i].text, step, &rc, err, sizeof(err));
            if (cases[i].err != NULL) {
                T_CHECK(r == NULL);
                T_CHECK_INT(rc, REDIS_ERR);
                T_CHECK(strstr(err, cases[i].err) != NULL);
                continue;
            }
            T_CHECK_INT(rc, REDIS_OK);
            T_CHECK(r != NULL);
            if (r == NULL)
                continue;
            T_CHECK(r->integer == 0 && r->len == (r->type == REDIS_REPLY_STRING ? 5u : 0u));
            freeReplyObject(r);
        }
    }
    /* The second reply of a connection starts its totals anew. */
    redisReader *rd = redisReaderCreate();
    redisev_guard(rd, &caps);
    const char two[] =
        "*6\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n*6\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n";
    T_CHECK_INT(redisReaderFeed(rd, two, sizeof(two) - 1), REDIS_OK);
    for (int k = 0; k < 2; k++) {
        void *reply = NULL;
        T_CHECK_INT(redisReaderGetReply(rd, &reply), REDIS_OK);
        T_CHECK(reply != NULL && ((redisReply *)reply)->elements == 6);
        if (reply != NULL)
            freeReplyObject(reply);
    }
    redisReaderFree(rd);
}

static void test_redisev(void)
{
    struct rev_state st = {0};
    redisAsyncContext *ac = redisAsyncConnectUnix(R.sock);
    T_CHECK(ac != NULL && ac->err == 0);
    T_CHECK_INT(redisev_attach(ac, base, 0, 0), 0);
    T_CHECK_INT(redisev_attach(ac, base, 0, 0), -1); /* one adapter per context */
    ac->data = &st;
    redisAsyncSetConnectCallback(ac, rev_on_connect);
    /* queued before the connection is made: sent once it is */
    T_CHECK_INT(redisAsyncCommand(ac, rev_on_reply, &st, "PING"), REDIS_OK);
    T_CHECK(run_until(rev_connected, &st, 5000));
    T_CHECK_INT(st.connected, 1);
    st.want = 1;
    T_CHECK(run_until(rev_done, &st, 5000));
    T_CHECK_STR(st.last, "PONG");

    /*
     * Connected: a command registers no EV_WRITE (the read event stays as it
     * is): a flush is made active, and the command is written within the
     * next loop turn, even a non-blocking one.
     */
    int before = added_events();
    T_CHECK_INT(active_events(), 0);
    T_CHECK_INT(redisAsyncCommand(ac, rev_on_reply, &st, "SET pc:rev %s", "v"), REDIS_OK);
    T_CHECK(sdslen(ac->c.obuf) > 0);
    T_CHECK_INT(active_events(), 1);
    T_CHECK_INT(added_events(), before + 1); /* the active flush, no fd watched */
    event_base_loop(base, EVLOOP_NONBLOCK);
    T_CHECK_INT(sdslen(ac->c.obuf), 0);
    T_CHECK_INT(added_events(), before);
    st.want = 2;
    T_CHECK(run_until(rev_done, &st, 5000));
    T_CHECK_STR(st.last, "OK");
    T_CHECK_INT(added_events(), before); /* the persistent read event was never removed */

    /* More than the socket takes: the rest waits for EV_WRITE, then it is gone again. */
    size_t n = 16u << 20;
    char *val = pc_malloc(n);
    memset(val, 'w', n);
    T_CHECK_INT(redisAsyncCommand(ac, rev_on_reply, &st, "SET pc:rev-big %b", val, n), REDIS_OK);
    free(val);
    event_base_loop(base, EVLOOP_NONBLOCK);
    T_CHECK(sdslen(ac->c.obuf) > 0);
    T_CHECK_INT(active_events(), 0);
    T_CHECK_INT(added_events(), before + 1); /* EV_WRITE now */
    st.want = 3;
    T_CHECK(run_until(rev_done, &st, 10000));
    T_CHECK_STR(st.last, "OK");
    T_CHECK_INT(sdslen(ac->c.obuf), 0);
    T_CHECK_INT(added_events(), before);
    T_CHECK_STR(rtext_db(0, "STRLEN pc:rev-big"), ":16777216");

    redisAsyncFree(ac); /* the cleanup hook frees the events */
    T_CHECK_INT(added_events(), before - 1);
    freeReplyObject(rcmd_db(0, "DEL pc:rev pc:rev-big"));
}

int main(void)
{
    snprintf(latest, sizeof(latest), "%ld", migrate_latest());
    setup();
    base = event_base_new();
    ticker = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(ticker, &tv);

    T_RUN(test_bad_url);
    T_RUN(test_down_at_start); /* starts redis-server */
    T_RUN(test_second_store_current);
    T_RUN(test_migrate_cli);
    T_RUN(test_migrate_cli_errors);
    T_RUN(test_migrate_cli_sigpipe);
    T_RUN(test_migrate_cli_lost_race);
    T_RUN(test_closed_before_reply);
    T_RUN(test_forged_replies);
    T_RUN(test_concurrent_migration);
    T_RUN(test_schema_watch);
    T_RUN(test_newer_schema);
    T_RUN(test_get_set);
    T_RUN(test_writes_held);
    T_RUN(test_cancel);
    T_RUN(test_destroy_pending);
    T_RUN(test_destroy_in_callback);
    T_RUN(test_delete_matching);
    T_RUN(test_delete_picked);
    T_RUN(test_when_ready);
    T_RUN(test_after);
    T_RUN(test_tcp_auth_db);
    T_RUN(test_acl_user);
    T_RUN(test_busy_loop);
    T_RUN(test_busy_loop_large_reply);
    T_RUN(test_set_large);
    T_RUN(test_reader_cap);
    T_RUN(test_reader_guard);
    T_RUN(test_redisev);
    T_RUN(test_host_name);
    T_RUN(test_migrate_script);
    T_RUN(test_cluster_redirects);
    T_RUN(test_cluster_down_stale);
    T_RUN(test_cluster_down_until_every_node);
    T_RUN(test_cluster_down_busy_node_unprobed);
    T_RUN(test_cluster_rcli);
    T_RUN(test_cluster_redirect_checks);
    T_RUN(test_connect_timeout);
    T_RUN(test_timeout);
    T_RUN(test_setup_timeout_message);
    T_RUN(test_restart);
    T_RUN(test_health_log);
    T_RUN(test_health_degraded);

    event_free(ticker);
    event_base_free(base);
    T_DONE();
}
