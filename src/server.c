/*
 * server.c - the process (see pc_server.h). Owns the listening socket, the
 * upstream target table, the workers and the main thread's signal loop.
 *
 *   main thread: bind ─▶ workers start ─▶ wait for SIGTERM/SIGINT
 *                                            │ worker_request_stop (each)
 *                                            ▼
 *                       join ─▶ close clients ─▶ destroy workers ─▶ exit 0
 *
 * SIGHUP reopens the logs and reloads the configuration (pc_reload.h).
 */
#include "pc_server.h"
#include "pc_backend.h"
#include "pc_conf.h"
#include "pc_dash.h"
#include "pc_embed.h"
#include "pc_flight.h"
#include "pc_fence.h"
#include "pc_follow.h"
#include "pc_guard.h"
#include "pc_httpd.h"
#include "pc_kvsize.h"
#include "pc_l1.h"
#include "pc_log.h"
#include "pc_reload.h"
#include "pc_psync.h"
#include "pc_route.h"
#include "pc_rurl.h"
#include "pc_pricing.h"
#include "pc_semantic.h"
#include "pc_stats.h"
#include "pc_tenants.h"
#include "pc_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <event2/event.h>

struct server {
    const struct conf *conf; /* as started; reload_current(reload) is the one in force */
    struct reload *reload;
    int listen_fd;
    struct route *route;
    struct semantic *sem;        /* NULL when semantic is off */
    struct l1 *l1;               /* hot exact answers in memory, or NULL (l1-size 0, cache off) */
    struct fence *fence;         /* the purges this process knows of, or NULL (cache off) */
    struct psync *psync;         /* the prefix index shared through Redis, or NULL */
    struct dash *dash;           /* the dashboard's reader of the hourly counters, or NULL */
    struct follow *follow;       /* the one reader of the Redis streams, or NULL (cache off) */
    const char **upstream_names; /* the upstream label of the metrics */
    struct worker **workers;
    int nworkers;
    struct event_base *base;
    struct event *sigterm;
    struct event *sigint;
    struct event *sighup;
    struct event *reload_ev;      /* activated by SIGHUP: many in a row make one reload */
    struct event *accept_stopped; /* activated by each worker once it stops accepting */
    int stopped_accepting;
    int signals;
};

static int listen_socket(const struct conf *c, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", c->listen_port);
    int gai = getaddrinfo(c->listen_host, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "listen %s: %s", c->listen, gai_strerror(gai));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
            saved = errno;
            close(fd);
            fd = -1;
            continue;
        }
        /*
         * Accept a connection once its first bytes arrived (nginx's deferred,
         * HAProxy's defer-accept), or after a second without: a health probe
         * then comes with its request, answered before any later connection
         * can take its place in the reserve (pc_httpd.h), and connections
         * that say nothing wait in the kernel. Best effort.
         */
        int defer = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "listen %s: %s%s", c->listen, strerror(saved ? saved : EINVAL),
                 saved == EADDRINUSE ? " (another process listens there: stop it, or choose "
                                       "another port with listen or --listen)"
                                     : "");
    return fd;
}

/* "host:port" actually bound (port 0 in the config picks a free port). */
static void bound_address(int fd, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len = sizeof(ss);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
            port = ntohs(sin->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
            port = ntohs(sin6->sin6_port);
        }
    }
    snprintf(out, outlen, ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

/*
 * A lock-free atomic (async-signal-safe), not a volatile sig_atomic_t: the handler runs on
 * whichever thread the kernel picks (OpenBLAS starts its own during the start), and only
 * an atomic orders its store with the main thread's read (ThreadSanitizer reported the
 * race); errno is kept as the interrupted code left it.
 */
static atomic_int sighup_held;

static void hold_sighup(int sig)
{
    (void)sig;
    int saved = errno;
    atomic_store_explicit(&sighup_held, 1, memory_order_relaxed);
    errno = saved;
}

void server_hold_sighup(void)
{
    /* SA_RESTART as libevent's own handler: a read or write of the start is not cut short. */
    struct sigaction sa = {.sa_handler = hold_sighup, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, NULL);
}

static void on_reload(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server *s = arg;
    reload_run(s->reload);
    /* The semantic stage's default threshold (a request without X-Cache-Threshold, when
     * semantic-threshold is auto; /stats) follows the configuration in force. */
    if (s->sem != NULL)
        semantic_set_threshold(s->sem, reload_current(s->reload)->semantic_threshold);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct server *s = arg;
    if (sig == SIGHUP) {
        /*
         * libevent calls this once per signal caught: a burst of SIGHUPs ran that many reloads
         * in a row, and a SIGTERM behind them waited for all of them. One reload, after every
         * signal so far, reads what they announced; a SIGHUP during it makes one more.
         */
        event_active(s->reload_ev, EV_TIMEOUT, 0);
        return;
    }
    if (++s->signals > 1) {
        log_warn("second signal: exiting without waiting for in-flight requests");
        _exit(1);
    }
    log_notice("%s received: no longer accepting; finishing in-flight requests (up to %.1f s)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", reload_current(s->reload)->shutdown_timeout);
    for (int i = 0; i < s->nworkers; i++)
        worker_request_stop(s->workers[i]);
}

/*
 * Every worker has let go of the listening socket: close it, so new clients
 * are refused at once instead of waiting in the backlog. Every worker has
 * left its loop (idle, or shutdown-timeout passed): leave the main loop too.
 * Until then the main loop runs, so a second SIGTERM or SIGINT during the
 * drain still ends the process at once (it went unanswered when the loop was
 * left as soon as the workers stopped accepting).
 */
static void on_accept_stopped(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct server *s = arg;
    /* Activations from several workers may coalesce into one run: count them all. */
    int exited = 0;
    s->stopped_accepting = 0;
    for (int i = 0; i < s->nworkers; i++) {
        s->stopped_accepting += __atomic_load_n(&s->workers[i]->stopping, __ATOMIC_ACQUIRE) ? 1 : 0;
        exited += __atomic_load_n(&s->workers[i]->exited, __ATOMIC_ACQUIRE) ? 1 : 0;
    }
    if (s->stopped_accepting == s->nworkers && s->listen_fd >= 0) {
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    if (exited == s->nworkers)
        event_base_loopbreak(s->base);
}

/*
 * Create every worker (registering its metrics row) before starting any
 * thread: the stats registry is only read once it is complete, and a worker
 * that cannot be created aborts the start while nothing runs yet.
 */
static int start_workers(struct server *s, char *err, size_t errlen)
{
    uint32_t prefix = (uint32_t)((uint64_t)pc_wall_ms() * 2654435761u) ^ (uint32_t)getpid();
    s->workers = pc_calloc((size_t)s->conf->workers, sizeof(*s->workers));
    for (int i = 0; i < s->conf->workers; i++) {
        struct worker *w =
            worker_create(i, s->conf, s->route, s->sem, s->l1, s->fence, s->listen_fd, err, errlen);
        if (w == NULL)
            return -1;
        w->id_prefix = prefix;
        w->accept_stopped_ev = s->accept_stopped;
        w->dash = s->dash;
        s->workers[s->nworkers++] = w;
    }
    if (reload_attach(s->reload, s->workers, s->nworkers) < 0) {
        snprintf(err, errlen, "cannot set up configuration reloads");
        return -1;
    }
    /* Workers inherit a mask without the termination signals: the main loop gets them. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = 0;
    for (int i = 0; i < s->nworkers && rc == 0; i++) {
        if (worker_start(s->workers[i]) < 0) {
            snprintf(err, errlen, "cannot start worker thread %d", i);
            rc = -1;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void stop_workers(struct server *s)
{
    for (int i = 0; i < s->nworkers; i++)
        worker_request_stop(s->workers[i]);
    for (int i = 0; i < s->nworkers; i++)
        worker_join(s->workers[i]);
    reload_detach(s->reload);
    for (int i = 0; i < s->nworkers; i++)
        worker_close_clients(s->workers[i]);
    /*
     * The follower calls the vector index's reader, which semantic_stop frees: it stops
     * first. It stopped after the workers were destroyed, and an entry it was applying
     * as the reader went read freed memory (ThreadSanitizer saw it in most runs).
     */
    follow_destroy(&s->follow);
    /* No loop runs now: stop the pool, so each worker gets back the jobs it is owed. */
    semantic_stop(s->sem);
    for (int i = 0; i < s->nworkers; i++)
        worker_destroy(&s->workers[i]);
    free(s->workers);
    s->workers = NULL;
    s->nworkers = 0;
}

static void log_startup(const struct server *s)
{
    char addr[80];
    bound_address(s->listen_fd, addr, sizeof(addr));
    log_notice("promptcache %s listening on %s (%d worker%s)", PC_VERSION, addr, s->conf->workers,
               s->conf->workers == 1 ? "" : "s");
    for (size_t i = 0; i < route_count(s->route); i++) {
        const struct route_replica *rep = route_replica(s->route, i);
        char shown[512]; /* never a password or a query key in a log line */
        pc_url_shown(rep->base_url, shown, sizeof(shown));
        log_notice("upstream %s (%s, type %s)", rep->name, shown,
                   backend_for(s->conf->upstream_type)->name);
    }
    if (route_count(s->route) > 1)
        log_notice("routing: %s over %zu replicas", route_policy_name(s->route),
                   route_count(s->route));
    if (s->conf->cache) {
        /* Never log a password: the URL without its secrets (checked by conf: it parses). */
        struct rurl u;
        char err[160];
        char *where = rurl_parse(s->conf->redis, 0, &u, err, sizeof(err)) == 0
                          ? rurl_format(&u, false)
                          : pc_strdup("(invalid URL)");
        log_notice("cache: redis %s, ttl %lld s, l1 %lld MiB", where, (long long)s->conf->cache_ttl,
                   (long long)(l1_size_bytes(s->conf) >> 20));
        free(where);
        rurl_free(&u);
    } else
        log_notice("cache: off (every request bypasses it)");
    if (s->sem != NULL)
        log_notice("semantic cache: %s vectors, threshold %.3f%s", semantic_space(s->sem),
                   semantic_default_threshold(s->sem),
                   s->conf->semantic_verify_url[0] ? ", grey zone verified" : "");
}

static void server_teardown(struct server *s)
{
    stop_workers(s); /* and the follower, before the modules whose handlers it calls */
    reload_destroy(&s->reload);
    psync_destroy(&s->psync);
    if (s->sigterm != NULL)
        event_free(s->sigterm);
    if (s->sigint != NULL)
        event_free(s->sigint);
    if (s->sighup != NULL)
        event_free(s->sighup);
    if (s->reload_ev != NULL)
        event_free(s->reload_ev);
    if (s->accept_stopped != NULL)
        event_free(s->accept_stopped);
    if (s->base != NULL)
        event_base_free(s->base);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    semantic_destroy(&s->sem);
    l1_destroy(&s->l1);
    fence_destroy(&s->fence);
    dash_destroy(&s->dash);
    stats_set_upstreams(NULL, 0);
    route_destroy(&s->route);
    free(s->upstream_names);
    flight_table_destroy();
    stats_unregister_all();
}

/*
 * Raise the open-file limit towards what max-connections needs (its clients,
 * plus room for upstream and Redis connections), as far as the hard limit
 * allows. Accepts beyond the limit pause briefly rather than fail.
 */
static void raise_fd_limit(const struct conf *c)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    /* max-connections counts every worker's clients together; each may hold an upstream
     * connection too, and Redis, logs and the listener need a few more. */
    rlim_t want = 2 * (rlim_t)c->max_connections + 1024;
    if (rl.rlim_cur >= want)
        return;
    rlim_t soft = rl.rlim_max == RLIM_INFINITY ? want : PC_MIN(want, rl.rlim_max);
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = soft;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && soft < want)
        log_info("open files limited to %llu (hard limit); max-connections %lld needs about "
                 "%llu (a client and an upstream connection each)",
                 (unsigned long long)soft, (long long)c->max_connections, (unsigned long long)want);
    else if (soft != old)
        log_info("open files limit raised from %llu to %llu", (unsigned long long)old,
                 (unsigned long long)soft);
}

/* The metrics' bounded labels: how many models get their own, the replicas' names. */
static void setup_labels(struct server *s)
{
    size_t n = route_count(s->route);
    s->upstream_names = pc_calloc(n + 1, sizeof(*s->upstream_names));
    for (size_t i = 0; i < n; i++)
        s->upstream_names[i] = route_replica(s->route, i)->name;
    stats_set_upstreams(s->upstream_names, n);
    stats_set_model_limit(s->conf->metrics_models);
    const struct pricing *p = s->conf->prices;
    if (p != NULL)
        log_notice("prices: %s%s%s, %zu model%s from %s (%s format, %s)", pricing_source(p),
                   pricing_date(p)[0] ? " of " : "", pricing_date(p), pricing_count(p),
                   pricing_count(p) == 1 ? "" : "s", pricing_path(p),
                   pricing_format_name(pricing_format(p)), pricing_currency(p));
    else
        log_notice("prices: none (pricing off or not found): savings in tokens only");
}

int server_add_conf_rules(void)
{
    /* In this order: the embedder's check before the guards', the price list's load before the
     * tenant names' (the order of their messages). */
    int (*const adds[])(void) = {embed_add_conf_rules,   guard_add_conf_rules,
                                 httpd_add_conf_rules,   kvsize_add_conf_rules,
                                 pricing_add_conf_rules, tenants_add_conf_rules};
    for (size_t i = 0; i < PC_ARRAY_LEN(adds); i++)
        if (adds[i]() < 0)
            return -1;
    return 0;
}

int server_run(const struct conf *c)
{
    struct server s = {.conf = c, .listen_fd = -1};
    char err[512] = "";
    int status = 1;
    flight_table_init();
    raise_fd_limit(c);
    if ((s.route = route_create(c, err, sizeof(err))) == NULL)
        goto out;
    setup_labels(&s);
    if (c->cache)
        s.dash = dash_create(c);
    /* One thread reads the Redis streams for the vector index, the L1 and the prefix index. */
    struct follow_opts fo = {.url = c->redis, .timeout_ms = c->redis_timeout};
    if (c->cache && (s.follow = follow_create(&fo)) == NULL) {
        snprintf(err, sizeof(err), "cannot set up the Redis stream follower");
        goto out;
    }
    if (c->semantic && c->cache && (s.sem = semantic_create(c, NULL, err, sizeof(err))) == NULL)
        goto out;
    if (s.sem != NULL)
        semantic_follow(s.sem, s.follow);
    /*
     * No answer of a call made before a purge is stored after it (pc_fence.h). Its handler
     * before the L1's: an event the L1 has counted (l1_events) has set the fences already.
     */
    if (c->cache)
        s.fence = fence_create();
    if (s.fence != NULL && fence_follow(s.fence, s.follow) < 0) {
        snprintf(err, sizeof(err), "cannot follow the purges");
        goto out;
    }
    /* The L1 is used only while the follower follows the stream. */
    if (c->cache && (s.l1 = l1_create(l1_size_bytes(c))) != NULL)
        l1_follow(s.l1, s.follow);
    /* Shared through the cache's Redis; its metrics row is registered before the workers'. */
    if (c->cache && c->prefix_sync &&
        ((s.psync = psync_create(c, s.route, err, sizeof(err))) == NULL ||
         psync_follow(s.psync, s.follow) < 0))
        goto out;
    if ((s.listen_fd = listen_socket(c, err, sizeof(err))) < 0)
        goto out;
    s.base = event_base_new();
    s.sigterm = evsignal_new(s.base, SIGTERM, on_signal, &s);
    s.sigint = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.sighup = evsignal_new(s.base, SIGHUP, on_signal, &s);
    s.reload_ev = event_new(s.base, -1, 0, on_reload, &s);
    s.accept_stopped = event_new(s.base, -1, 0, on_accept_stopped, &s);
    s.reload = s.base ? reload_create(s.base, c) : NULL;
    if (s.base == NULL || s.sigterm == NULL || s.sigint == NULL || s.sighup == NULL ||
        s.reload_ev == NULL || s.accept_stopped == NULL || s.reload == NULL ||
        event_add(s.sigterm, NULL) < 0 || event_add(s.sighup, NULL) < 0 ||
        event_add(s.sigint, NULL) < 0) {
        snprintf(err, sizeof(err), "cannot set up signal handling");
        goto out;
    }
    if (start_workers(&s, err, sizeof(err)) < 0)
        goto out;
    /* A SIGHUP that came during the start: the main loop takes it once it runs. */
    if (atomic_exchange_explicit(&sighup_held, 0, memory_order_relaxed))
        raise(SIGHUP);
    if (s.dash != NULL)
        dash_start(s.dash);
    if (s.psync != NULL && psync_start(s.psync) < 0) {
        snprintf(err, sizeof(err), "cannot start the prefix index's sharing thread");
        goto out;
    }
    if (s.follow != NULL)
        follow_start(s.follow);
    log_startup(&s);
    event_base_dispatch(s.base);
    status = 0;
out:
    if (err[0])
        log_error("%s", err);
    server_teardown(&s);
    if (status == 0)
        log_notice("stopped");
    return status;
}
