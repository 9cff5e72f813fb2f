/*
 * test_sentinel.c - following the primary: the name resolver, the sentinel
 * asks (on a loop and blocking), the blocking connector of the threads and
 * tools, and a worker store through a "failover", against two real
 * redis-servers this test starts (a primary and its replica, loopback TCP)
 * and a fake sentinel (a thread answering SENTINEL get-master-addr-by-name
 * with whatever the test says the primary is, optionally behind AUTH), and a
 * peer that answers a byte at a time (the blocking deadlines). The real
 * three-sentinel failover is tests/integration/sentinel.test.js.
 *
 * Every wait is for a condition, with a generous deadline.
 */
#include "pc_log.h"
#include "pc_rcli.h"
#include "pc_resolve.h"
#include "pc_rurl.h"
#include "pc_sentinel.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_util.h"
#include "t.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#define DEADLINE 10000 /* ms */
#define MASTER   "mymaster"

static char dir[64];
static struct server {
    pid_t pid;
    int port;
} P, Q; /* P starts as the primary, Q as its replica */

static struct event_base *base;

/* --- redis-servers ------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int listen_any(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        perror("listen_any");
        exit(2);
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

static int free_port(void)
{
    int port, fd = listen_any(&port);
    close(fd);
    return port;
}

/* A command on a fresh connection to port (the test's own view); never NULL. */
static redisReply *admin(int port, const char *fmt, ...)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "admin connection to %d failed\n", port);
        exit(2);
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    if (r == NULL) {
        fprintf(stderr, "admin command failed\n");
        exit(2);
    }
    return r;
}

/* A command of space-separated words on port; an error reply fails the test. */
static void admin_do(int port, const char *cmd)
{
    char copy[128], *save = NULL;
    const char *argv[8];
    int argc = 0;
    snprintf(copy, sizeof(copy), "%s", cmd);
    for (char *w = strtok_r(copy, " ", &save); w != NULL && argc < 8;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c != NULL && !c->err ? redisCommandArgv(c, argc, argv, NULL) : NULL;
    T_CHECK(r != NULL && r->type != REDIS_REPLY_ERROR);
    if (r != NULL)
        freeReplyObject(r);
    if (c != NULL)
        redisFree(c);
}

/* GET key on port as text ("(nil)" when absent). */
static const char *admin_get(int port, const char *key, char *buf, size_t n)
{
    redisReply *r = admin(port, "GET %s", key);
    snprintf(buf, n, "%s", r->type == REDIS_REPLY_STRING ? r->str : "(nil)");
    freeReplyObject(r);
    return buf;
}

static bool pings(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
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

static void server_start(struct server *sv, const char *name, const char *replicaof)
{
    sv->port = free_port();
    sv->pid = fork();
    if (sv->pid < 0) {
        perror("fork");
        exit(2);
    }
    if (sv->pid == 0) {
        char port[16], logfile[128];
        snprintf(port, sizeof(port), "%d", sv->port);
        snprintf(logfile, sizeof(logfile), "%s/%s.log", dir, name);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--daemonize", "no", "--logfile", logfile, "--dir", dir,
               replicaof ? "--replicaof" : NULL, replicaof, (char *)NULL);
        _exit(127);
    }
    uint64_t until = pc_mono_ms() + DEADLINE;
    while (!pings(sv->port)) {
        if (pc_mono_ms() > until) {
            fprintf(stderr, "redis-server %s did not start (see %s)\n", name, dir);
            exit(2);
        }
        sleep_ms(10);
    }
}

/* The replica has caught up (INFO replication says the link is up). */
static bool replica_synced(int port)
{
    redisReply *r = admin(port, "INFO replication");
    bool up = r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up") != NULL;
    freeReplyObject(r);
    return up;
}

/* --- the fake sentinel ----------------------------------------------------------------- */

static struct {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    int primary_port;     /* what it names as the primary of MASTER (127.0.0.1) */
    const char *password; /* AUTH it wants, or NULL */
    atomic_int asked;     /* get-master-addr-by-name questions answered with an address */
    atomic_bool stop;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void fake_name(int port)
{
    pthread_mutex_lock(&F.mu);
    F.primary_port = port;
    pthread_mutex_unlock(&F.mu);
}

struct fconn {
    int fd;
    bool authed;
    char buf[4096];
    size_t len;
};

/* One RESP array of bulk strings at the start of c->buf: argc, or 0 if incomplete. */
static int resp_parse(struct fconn *c, char argv[4][128], size_t *used)
{
    const char *p = c->buf, *end = c->buf + c->len, *nl;
    if (c->len == 0 || *p != '*' || (nl = memchr(p, '\n', c->len)) == NULL)
        return 0;
    int n = atoi(p + 1), kept = 0;
    p = nl + 1;
    for (int i = 0; i < n; i++) {
        if (p >= end || *p != '$' || (nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
            return 0;
        size_t len = (size_t)atoi(p + 1);
        p = nl + 1;
        if ((size_t)(end - p) < len + 2)
            return 0;
        if (i < 4) {
            snprintf(argv[i], 128, "%.*s", (int)PC_MIN(len, 127), p);
            kept++;
        }
        p += len + 2;
    }
    *used = (size_t)(p - c->buf);
    return kept;
}

static void fake_reply(struct fconn *c, int argc, char argv[4][128])
{
    char out[256];
    if (strcasecmp(argv[0], "AUTH") == 0) {
        bool ok = F.password != NULL && strcmp(argv[argc - 1], F.password) == 0;
        c->authed = ok;
        snprintf(out, sizeof(out), ok ? "+OK\r\n" : "-WRONGPASS invalid password\r\n");
    } else if (F.password != NULL && !c->authed) {
        snprintf(out, sizeof(out), "-NOAUTH Authentication required.\r\n");
    } else if (argc == 3 && strcasecmp(argv[0], "SENTINEL") == 0 && strcmp(argv[2], MASTER) == 0) {
        pthread_mutex_lock(&F.mu);
        int port = F.primary_port;
        pthread_mutex_unlock(&F.mu);
        char ps[16];
        snprintf(ps, sizeof(ps), "%d", port);
        snprintf(out, sizeof(out), "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n", strlen(ps), ps);
        atomic_fetch_add(&F.asked, 1);
    } else if (strcasecmp(argv[0], "SENTINEL") == 0) {
        snprintf(out, sizeof(out), "*-1\r\n");
    } else {
        snprintf(out, sizeof(out), "-ERR unknown command\r\n");
    }
    if (write(c->fd, out, strlen(out)) < 0)
        c->len = 0;
}

/* Read what c sent and answer each complete command; false when it hung up. */
static bool fake_serve(struct fconn *c)
{
    ssize_t n = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
    if (n <= 0)
        return false;
    c->len += (size_t)n;
    char argv[4][128];
    size_t used;
    int argc;
    while ((argc = resp_parse(c, argv, &used)) > 0) {
        fake_reply(c, argc, argv);
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
    }
    return c->len < sizeof(c->buf);
}

static void *fake_main(void *arg)
{
    (void)arg;
    struct fconn conns[32];
    struct pollfd pfd[33];
    size_t n = 0;
    while (!atomic_load(&F.stop)) {
        pfd[0] = (struct pollfd){F.fd, POLLIN, 0};
        for (size_t i = 0; i < n; i++)
            pfd[i + 1] = (struct pollfd){conns[i].fd, POLLIN, 0};
        if (poll(pfd, n + 1, 50) <= 0)
            continue;
        for (size_t i = n; i-- > 0;) {
            if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) || fake_serve(&conns[i]))
                continue;
            close(conns[i].fd);
            conns[i] = conns[--n];
        }
        int fd = (pfd[0].revents & POLLIN) ? accept(F.fd, NULL, NULL) : -1;
        if (fd >= 0 && n < PC_ARRAY_LEN(conns))
            conns[n++] = (struct fconn){.fd = fd};
        else if (fd >= 0)
            close(fd);
    }
    for (size_t i = 0; i < n; i++)
        close(conns[i].fd);
    return NULL;
}

static void fake_start(void)
{
    F.fd = listen_any(&F.port);
    if (listen(F.fd, 64) < 0) {
        perror("listen");
        exit(2);
    }
    pthread_create(&F.thread, NULL, fake_main, NULL);
}

/* --- a peer that answers a byte at a time ------------------------------------------------ */

/*
 * Answers each chunk a client sends (one command, in these tests) with DRIBBLE_REPLY, one
 * byte every D.every_ms, for as long as the client stays; one connection at a time.
 */
static struct {
    int fd, port;
    pthread_t thread;
    atomic_int every_ms;
    atomic_int hung_up; /* connections the client closed with reply bytes still owed */
    atomic_bool stop;
} D;

static const char DRIBBLE_REPLY[] = "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n";

static void dribble_conn(int fd)
{
    size_t owed = 0, at = 0, n = sizeof(DRIBBLE_REPLY) - 1;
    char buf[512];
    while (!atomic_load(&D.stop)) {
        struct pollfd p = {fd, POLLIN, 0};
        int ready = poll(&p, 1, owed > 0 ? atomic_load(&D.every_ms) : 50);
        if (ready > 0) {
            if (read(fd, buf, sizeof(buf)) <= 0) {
                if (owed > 0)
                    atomic_fetch_add(&D.hung_up, 1);
                return;
            }
            owed += n;
        } else if (ready == 0 && owed > 0) {
            if (write(fd, &DRIBBLE_REPLY[at], 1) != 1)
                return;
            at = (at + 1) % n;
            owed--;
        }
    }
}

static void *dribble_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&D.stop)) {
        struct pollfd p = {D.fd, POLLIN, 0};
        int fd = poll(&p, 1, 50) > 0 ? accept(D.fd, NULL, NULL) : -1;
        if (fd >= 0) {
            dribble_conn(fd);
            close(fd);
        }
    }
    return NULL;
}

static void dribble_start(void)
{
    D.fd = listen_any(&D.port);
    if (listen(D.fd, 16) < 0) {
        perror("listen");
        exit(2);
    }
    pthread_create(&D.thread, NULL, dribble_main, NULL);
}

/* --- the loop ------------------------------------------------------------------------------ */

typedef bool pred_fn(void *arg);

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

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static bool is_ready(void *arg)
{
    return store_ready(arg);
}

static bool not_ready(void *arg)
{
    return !store_ready(arg);
}

static struct store *mk_store(const char *url, struct stats *st)
{
    struct store_opts o = {url, 200, true, 0};
    struct store *s = store_create(base, &o, st);
    if (s != NULL)
        store_start(s);
    return s;
}

struct acked {
    bool done;
    enum store_status st;
};

static void acked_cb(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct acked *a = arg;
    a->done = true;
    a->st = st;
}

static bool acked_done(void *arg)
{
    return ((struct acked *)arg)->done;
}

/* SET key val through s and wait for Redis's answer: STORE_OK or not. */
static bool set_acked(struct store *s, const char *key, const char *val)
{
    struct acked a = {false, STORE_ERR};
    if (store_set_cb(s, key, strlen(key), val, strlen(val), 60000, acked_cb, &a) == NULL)
        return false;
    return run_until(acked_done, &a, DEADLINE) && a.st == STORE_OK;
}

/* A SET through s that Redis acknowledged (retried while the store settles). */
static bool set_eventually(struct store *s, const char *key, const char *val)
{
    uint64_t until = pc_mono_ms() + DEADLINE;
    while (pc_mono_ms() < until) {
        if (run_until(is_ready, s, DEADLINE) && set_acked(s, key, val))
            return true;
        struct timeval tv = {0, 20000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    return false;
}

/* --- tests ------------------------------------------------------------------------------ */

struct answer {
    bool done;
    char addr[64];
    char err[256];
};

static void on_answer(void *arg, const char *addr, const char *err)
{
    struct answer *a = arg;
    a->done = true;
    snprintf(a->addr, sizeof(a->addr), "%s", addr ? addr : "");
    snprintf(a->err, sizeof(a->err), "%s", err ? err : "");
}

static bool answered(void *arg)
{
    return ((struct answer *)arg)->done;
}

/* A name resolves off the loop; a cancelled lookup never calls back. */
static void test_resolve(void)
{
    struct answer a = {0}, b = {0};
    struct resolve *r = resolve_start(base, "localhost", on_answer, &a);
    T_CHECK(r != NULL);
    T_CHECK(run_until(answered, &a, DEADLINE));
    T_CHECK(strcmp(a.addr, "127.0.0.1") == 0 || strcmp(a.addr, "::1") == 0);
    struct resolve *c = resolve_start(base, "localhost", on_answer, &b);
    resolve_cancel(&c);
    T_CHECK(c == NULL);
    run_until(answered, &b, 300);
    T_CHECK(!b.done);
    char out[64];
    T_CHECK_INT(resolve_now("127.0.0.1", out, sizeof(out)), 0);
    T_CHECK_STR(out, "127.0.0.1");
}

struct found {
    bool done;
    char host[64];
    int port;
    size_t which;
    char err[256];
};

static void on_found(void *arg, const char *host, int port, size_t which, const char *err)
{
    struct found *f = arg;
    f->done = true;
    snprintf(f->host, sizeof(f->host), "%s", host ? host : "");
    f->port = port;
    f->which = which;
    snprintf(f->err, sizeof(f->err), "%s", err ? err : "");
}

static bool found_done(void *arg)
{
    return ((struct found *)arg)->done;
}

static struct rurl parse(const char *fmt, ...)
{
    char url[512], err[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(url, sizeof(url), fmt, ap);
    va_end(ap);
    struct rurl u;
    if (rurl_parse(url, 0, &u, err, sizeof(err)) < 0) {
        fprintf(stderr, "bad test URL %s: %s\n", url, err);
        exit(2);
    }
    return u;
}

/* The sentinels in turn, on the loop: a dead one, then one by name that answers. */
static void test_ask(void)
{
    int dead = free_port();
    struct rurl u = parse("sentinel://127.0.0.1:%d,localhost:%d/" MASTER, dead, F.port);
    struct found f = {0};
    struct sentinel_ask *a = sentinel_ask_start(base, &u, 0, 1000, on_found, &f);
    T_CHECK(a != NULL);
    T_CHECK(run_until(found_done, &f, DEADLINE));
    T_CHECK_STR(f.host, "127.0.0.1");
    T_CHECK_INT(f.port, P.port);
    T_CHECK_INT(f.which, 1);
    rurl_free(&u);

    /* nobody knows the master: the message says what the last one said */
    u = parse("sentinel://127.0.0.1:%d,127.0.0.1:%d/other", F.port, dead);
    f = (struct found){0};
    a = sentinel_ask_start(base, &u, 0, 1000, on_found, &f);
    T_CHECK(run_until(found_done, &f, DEADLINE));
    T_CHECK_STR(f.host, "");
    T_CHECK(strstr(f.err, "refused") != NULL);
    rurl_free(&u);

    /* cancelled: no callback */
    u = parse("sentinel://127.0.0.1:%d/" MASTER, F.port);
    f = (struct found){0};
    a = sentinel_ask_start(base, &u, 0, 1000, on_found, &f);
    sentinel_ask_cancel(&a);
    T_CHECK(a == NULL);
    struct found never = {0};
    run_until(found_done, &never, 300);
    T_CHECK(!f.done);
    rurl_free(&u);
}

/* Blocking: one sentinel's answer, and the connector's ROLE check. */
static void test_blocking(void)
{
    struct rurl u = parse("sentinel://127.0.0.1:%d/" MASTER, F.port);
    char *host = NULL, err[256];
    int port = 0;
    T_CHECK_INT(sentinel_query(&u, 0, 1000, &host, &port, err, sizeof(err)), 0);
    T_CHECK_STR(host, "127.0.0.1");
    T_CHECK_INT(port, P.port);
    free(host);
    rurl_free(&u);

    struct rcli k = {.quiet = true};
    char url[256];
    int dead = free_port();
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d,127.0.0.1:%d/" MASTER, dead, F.port);
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    T_CHECK_INT(k.next_sentinel, 1);
    char want[128];
    snprintf(want, sizeof(want), "(primary at 127.0.0.1:%d)", P.port);
    T_CHECK(k.where != NULL && strstr(k.where, want) != NULL);
    rcli_close(&k);

    /* a sentinel that lags names the replica: refused, with why */
    fake_name(Q.port);
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), -1);
    T_CHECK(strstr(k.errmsg, "not a primary (role slave)") != NULL);
    rcli_close(&k);
    fake_name(P.port);
}

/*
 * A peer that answers a byte at a time, each byte well within the timeout: hiredis bounds
 * each read only, so the blocking query and the connector read on for as long as bytes
 * came. They give up at their deadline and say so, and the client is the one that hangs
 * up. A reply slower than one read but within its time is read whole, and the socket's
 * timeout is its own again after.
 */
static void test_blocking_dribble(void)
{
    atomic_store(&D.every_ms, 100); /* the reply takes 3.6 s */
    struct rurl u = parse("sentinel://127.0.0.1:%d/" MASTER, D.port);
    char *host = NULL, err[256] = "";
    int port = 0;
    T_CHECK_INT(sentinel_query(&u, 0, 300, &host, &port, err, sizeof(err)), -1);
    char want[160];
    snprintf(want, sizeof(want),
             "sentinel 127.0.0.1:%d: timed out (no reply in time): did not answer within 300 ms",
             D.port);
    T_CHECK_STR(err, want);
    free(host);
    rurl_free(&u);

    struct rcli k = {.quiet = true};
    char url[128];
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/0", D.port);
    const char *ping[] = {"PING"};
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    redisReply *r = rcli_call(&k, 1, ping, NULL);
    T_CHECK(r == NULL);
    T_CHECK(strstr(k.errmsg, "PING: timed out (no reply in time): no whole reply within 1000 ms"));
    if (r != NULL)
        freeReplyObject(r);
    rcli_close(&k);
    uint64_t until = pc_mono_ms() + DEADLINE;
    while (atomic_load(&D.hung_up) < 2 && pc_mono_ms() < until)
        sleep_ms(10);
    T_CHECK_INT(atomic_load(&D.hung_up), 2);

    atomic_store(&D.every_ms, 2); /* 36 reads, about 0.1 s of the 1 s: room for a loaded machine */
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    r = rcli_call(&k, 1, ping, NULL);
    T_CHECK(r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    struct timeval tv = {0, 0};
    socklen_t len = sizeof(tv);
    T_CHECK(k.rc != NULL && getsockopt(k.rc->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0);
    T_CHECK(tv.tv_sec == 1 && tv.tv_usec == 0);
    if (r != NULL)
        freeReplyObject(r);
    rcli_close(&k);
}

struct asked_watch {
    struct store *s;
    int target;
};

/* The fake was asked target times, or the store became ready (which it must not). */
static bool asked_enough(void *arg)
{
    struct asked_watch *w = arg;
    return atomic_load(&F.asked) >= w->target || store_ready(w->s);
}

/* The store asks on its loop, checks ROLE, and is not fooled by a lagging sentinel. */
static void test_store_role(void)
{
    char url[256], buf[64];
    struct stats st = {0};
    fake_name(Q.port);
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER, F.port);
    struct asked_watch w = {NULL, atomic_load(&F.asked) + 3};
    struct store *s = w.s = mk_store(url, &st);
    /* it keeps asking (a lagging view is retried), and never settles on the replica */
    T_CHECK(run_until(asked_enough, &w, DEADLINE));
    T_CHECK(!store_ready(s));
    fake_name(P.port);
    T_CHECK(run_until(is_ready, s, DEADLINE));
    T_CHECK(set_acked(s, "role-check", "p"));
    T_CHECK_STR(admin_get(P.port, "role-check", buf, sizeof(buf)), "p");
    store_destroy(&s);
}

/*
 * A failover as Sentinel does it: the replica is promoted, the sentinels name
 * it, the old primary turns into its replica. The store's next write gets
 * READONLY (or its connection is closed): it asks again and writes to the
 * new primary.
 */
static void test_store_failover(void)
{
    char url[256], buf[64], cmd[64];
    struct stats st = {0};
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER, F.port);
    struct store *s = mk_store(url, &st);
    T_CHECK(run_until(is_ready, s, DEADLINE));
    T_CHECK(set_acked(s, "before", "1"));
    T_CHECK_STR(admin_get(P.port, "before", buf, sizeof(buf)), "1");

    admin_do(Q.port, "REPLICAOF NO ONE");
    fake_name(Q.port);
    snprintf(cmd, sizeof(cmd), "REPLICAOF 127.0.0.1 %d", Q.port);
    admin_do(P.port, cmd);
    T_CHECK(set_eventually(s, "after", "2"));
    T_CHECK_STR(admin_get(Q.port, "after", buf, sizeof(buf)), "2");
    T_CHECK(st.v[STAT_redis_reconnects] >= 2);
    store_destroy(&s);

    /* and back, for the tests that follow: P primary, Q its replica */
    admin_do(P.port, "REPLICAOF NO ONE");
    snprintf(cmd, sizeof(cmd), "REPLICAOF 127.0.0.1 %d", P.port);
    admin_do(Q.port, cmd);
    fake_name(P.port);
    uint64_t until = pc_mono_ms() + DEADLINE;
    while (!replica_synced(Q.port) && pc_mono_ms() < until)
        sleep_ms(20);
}

/* Sentinels with requirepass: the store and the connector AUTH to them. */
static void test_sentinel_auth(void)
{
    char url[256];
    struct stats st = {0};
    F.password = "s3nt";
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER "?sentinel-password=s3nt", F.port);
    struct store *s = mk_store(url, &st);
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER, F.port);
    struct store *no_auth = mk_store(url, &st);
    T_CHECK(run_until(is_ready, s, DEADLINE));
    T_CHECK(run_until(NULL, NULL, 300) == false && !store_ready(no_auth));
    struct rcli k = {.quiet = true};
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), -1);
    T_CHECK(strstr(k.errmsg, "NOAUTH") != NULL);
    rcli_close(&k);
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER "?sentinel-password=s3nt", F.port);
    T_CHECK_INT(rcli_open(&k, url, 1000, "test"), 0);
    rcli_close(&k);
    store_destroy(&s);
    store_destroy(&no_auth);
    F.password = NULL;
}

/* The primary dies: the store notices, and is back once a sentinel names a live one. */
static void test_store_primary_dies(void)
{
    char url[256], buf[64];
    struct stats st = {0};
    snprintf(url, sizeof(url), "sentinel://127.0.0.1:%d/" MASTER, F.port);
    struct store *s = mk_store(url, &st);
    T_CHECK(run_until(is_ready, s, DEADLINE));
    kill(P.pid, SIGKILL);
    waitpid(P.pid, NULL, 0);
    P.pid = 0;
    T_CHECK(run_until(not_ready, s, DEADLINE));
    admin_do(Q.port, "REPLICAOF NO ONE");
    fake_name(Q.port);
    T_CHECK(set_eventually(s, "survivor", "3"));
    T_CHECK_STR(admin_get(Q.port, "survivor", buf, sizeof(buf)), "3");
    store_destroy(&s);
}

static void cleanup(void)
{
    atomic_store(&F.stop, true);
    if (F.thread)
        pthread_join(F.thread, NULL);
    atomic_store(&D.stop, true);
    if (D.thread)
        pthread_join(D.thread, NULL);
    struct server *all[] = {&P, &Q};
    for (size_t i = 0; i < PC_ARRAY_LEN(all); i++)
        if (all[i]->pid > 0) {
            kill(all[i]->pid, SIGKILL);
            waitpid(all[i]->pid, NULL, 0);
        }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    strcpy(dir, "/tmp/pc-sentinel-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    atexit(cleanup);
    char err[128];
    log_init(getenv("PC_TEST_DEBUG") ? PC_LOG_DEBUG : PC_LOG_NOTICE, NULL, NULL, err, sizeof(err));
    server_start(&P, "primary", NULL);
    char of[32];
    snprintf(of, sizeof(of), "127.0.0.1 %d", P.port);
    server_start(&Q, "replica", of);
    uint64_t until = pc_mono_ms() + DEADLINE;
    while (!replica_synced(Q.port) && pc_mono_ms() < until)
        sleep_ms(20);
    fake_name(P.port);
    fake_start();
    dribble_start();
    base = event_base_new();
    struct event *ticker = event_new(base, -1, EV_PERSIST, tick, NULL);
    struct timeval tv = {0, 10000};
    event_add(ticker, &tv);

    T_RUN(test_resolve);
    T_RUN(test_ask);
    T_RUN(test_blocking);
    T_RUN(test_blocking_dribble);
    T_RUN(test_store_role);
    T_RUN(test_store_failover);
    T_RUN(test_sentinel_auth);
    T_RUN(test_store_primary_dies);

    event_free(ticker);
    event_base_free(base);
    T_DONE();
}
