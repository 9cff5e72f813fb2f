/*
 * worker.c - one event loop thread (see pc_worker.h). Owns the worker's
 * event_base and, on it, the HTTP server, the upstream multi handle and the
 * Redis connection; plus the stop/exit events used for graceful shutdown.
 *
 * Shutdown: the main thread activates stop_ev; the worker stops accepting,
 * lets in-flight requests and fetches finish (each one's end reaches
 * check_idle through the context's ended hook: proxy and fetch never call
 * this file), and leaves its loop when idle or when shutdown-timeout has
 * passed, whichever comes first; at shutdown-timeout it first ends the
 * upstream calls left (their waiting clients get error answers) and gives
 * those answers CUT_GRACE_MS to go out.
 */
#include "pc_worker.h"
#include "pc_backend.h"
#include "pc_cache.h"
#include "pc_conf.h"
#include "pc_fetch.h"
#include "pc_httpd.h"
#include "pc_log.h"
#include "pc_memo.h"
#include "pc_proxy.h"
#include "pc_semantic.h"
#include "pc_store.h"
#include "pc_tally.h"
#include "pc_upstream.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#define EXIT_CHECK_MS 50
#define CUT_GRACE_MS  200 /* after shutdown-timeout: the error answers of the calls cut */

static void check_idle(struct worker *w);

static void on_exit_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    PC_CHECK_OBJ(w, WORKER_MAGIC);
    if (w->httpd == NULL)
        return; /* teardown */
    if (pc_mono_ms() >= w->shutdown_deadline_ms && w->cutting) {
        event_base_loopbreak(w->base);
        return;
    }
    if (pc_mono_ms() >= w->shutdown_deadline_ms) {
        size_t reqs = httpd_active_requests(w->httpd);
        if (reqs > 0 || w->fetches > 0)
            log_warn("worker %d: %zu request%s and %zu upstream call%s still running after "
                     "shutdown-timeout; closing them",
                     w->id, reqs, reqs == 1 ? "" : "s", w->fetches, w->fetches == 1 ? "" : "s");
        /*
         * End the upstream calls first, as failed calls: a client still waiting for its
         * answer's head gets an error in its API's shape (the SDK retries it elsewhere) rather
         * than a reset connection, logged as what it was, not as a client that went away.
         * A short grace lets those answers out; then every connection left is closed.
         */
        w->cutting = true;
        fetch_abort_all(w);
        w->shutdown_deadline_ms = pc_mono_ms() + CUT_GRACE_MS;
        check_idle(w);
        return;
    }
    check_idle(w);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    PC_CHECK_OBJ(w, WORKER_MAGIC);
    if (w->stopping || w->httpd == NULL)
        return;
    w->shutdown_deadline_ms = pc_mono_ms() + (uint64_t)(w->conf->shutdown_timeout * 1000.0);
    httpd_stop_accepting(w->httpd);
    /* Published after the listener is gone: the server closes the socket when all are. */
    __atomic_store_n(&w->stopping, true, __ATOMIC_RELEASE);
    if (w->accept_stopped_ev != NULL)
        event_active(w->accept_stopped_ev, EV_TIMEOUT, 0);
    struct timeval tv = {0, EXIT_CHECK_MS * 1000};
    event_add(w->exit_ev, &tv);
    check_idle(w);
}

/*
 * Idle while stopping means: every client connection is gone (httpd closes
 * each one once its last reply has been flushed) and no upstream call runs.
 */
static void check_idle(struct worker *w)
{
    if (!w->stopping || w->httpd == NULL)
        return;
    if (httpd_connection_count(w->httpd) == 0 && w->fetches == 0) {
        /* Last counts out; a few more loop passes let the writes reach Redis. */
        if (w->tally != NULL)
            tally_flush(w->tally);
        struct timeval tv = pc_timeval_ms(100);
        event_base_loopexit(w->base, &tv);
    }
}

static void httpd_conf_from(const struct conf *c, struct httpd_conf *hc)
{
    memset(hc, 0, sizeof(*hc));
    hc->max_header_size = 64 * 1024;
    hc->max_headers = 100;
    hc->max_body_size = (size_t)c->max_body_size;
    /* auto (-1): httpd's default, from max_body_size */
    hc->max_body_buffered = c->max_request_memory > 0 ? (size_t)c->max_request_memory : 0;
    hc->body_charge = proxy_body_charge(c);
    hc->read_timeout = c->client_timeout;
    hc->idle_timeout = c->client_timeout;
    hc->write_timeout = c->client_timeout;
    hc->max_connections = (size_t)c->max_connections;
    hc->server_name = NULL;
}

struct worker *worker_create(int id, const struct conf *conf, struct route *route,
                             struct semantic *sem, struct l1 *l1, struct fence *fence,
                             int listen_fd, char *errbuf, size_t errlen)
{
    struct worker *w = pc_calloc(1, sizeof(*w));
    w->magic = WORKER_MAGIC;
    w->ended = check_idle;
    w->id = id;
    w->conf = conf;
    w->route = route;
    w->semantic = sem;
    w->l1 = l1;
    w->fence = fence;
    w->memo = memo_create();
    w->backend = backend_for(conf->upstream_type);
    w->started_ms = pc_wall_ms();
    stats_register(&w->stats);
    w->base = event_base_new();
    if (w->base == NULL) {
        snprintf(errbuf, errlen, "worker %d: cannot create an event base", id);
        worker_destroy(&w);
        return NULL;
    }
    struct httpd_conf hc;
    httpd_conf_from(conf, &hc);
    w->httpd = httpd_create(w->base, listen_fd, &hc, proxy_handle, w, &w->stats);
    w->up = upstream_create(w->base, &w->stats);
    struct store_opts so = {conf->redis, conf->redis_timeout, conf->redis_auto_migrate,
                            conf->cache_max_entry_size};
    w->store = store_create(w->base, &so, &w->stats);
    if (sem != NULL) {
        w->side = upstream_create(w->base, &w->side_stats);
        w->sem_port = semantic_port_create(sem, w->base, w->store, w->side, &w->stats);
    }
    if (w->store != NULL) {
        struct cache_opts co = {.conf = conf,
                                .base = w->base,
                                .store = w->store,
                                .stats = &w->stats,
                                .sem = w->sem_port,
                                .l1 = l1,
                                .fence = fence};
        w->cache = cache_create(&co);
    }
    if (conf->cache) /* the report's counters live in the same Redis */
        w->tally = tally_create(w->base, w->store);
    w->stop_ev = event_new(w->base, -1, 0, on_stop, w);
    w->exit_ev = event_new(w->base, -1, EV_PERSIST, on_exit_check, w);
    if (w->httpd == NULL || w->up == NULL || w->store == NULL || w->stop_ev == NULL ||
        w->exit_ev == NULL) {
        snprintf(errbuf, errlen, "worker %d: cannot set up its modules", id);
        worker_destroy(&w);
        return NULL;
    }
    if (conf->cache)
        store_start(w->store);
    return w;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    PC_CHECK_OBJ(w, WORKER_MAGIC);
    log_debug("worker %d running", w->id);
    event_base_dispatch(w->base);
    log_debug("worker %d stopped", w->id);
    __atomic_store_n(&w->exited, true, __ATOMIC_RELEASE);
    if (w->accept_stopped_ev != NULL)
        event_active(w->accept_stopped_ev, EV_TIMEOUT, 0);
    return NULL;
}

int worker_start(struct worker *w)
{
    return pthread_create(&w->thread, NULL, worker_main, w) == 0 ? 0 : -1;
}

void worker_request_stop(struct worker *w)
{
    event_active(w->stop_ev, EV_TIMEOUT, 0);
}

void worker_join(struct worker *w)
{
    if (w->thread != 0) {
        pthread_join(w->thread, NULL);
        w->thread = 0;
    }
}

void worker_close_clients(struct worker *w)
{
    /* The loop has been left for good: its own timers must not run again. */
    event_del(w->exit_ev);
    event_del(w->stop_ev);
    /* Close callbacks of unfinished requests schedule their frees on the loop. */
    httpd_destroy(&w->httpd);
    event_base_loop(w->base, EVLOOP_NONBLOCK);
}

void worker_destroy(struct worker **wp)
{
    struct worker *w = *wp;
    if (w == NULL)
        return;
    *wp = NULL;
    worker_join(w);
    if (w->httpd != NULL)
        worker_close_clients(w);
    fetch_abort_all(w);
    if (w->tally != NULL && w->base != NULL && tally_dirty(w->tally) > 0) {
        /* Requests cut by shutdown-timeout were counted just now: send them (bounded). */
        tally_flush(w->tally);
        struct timeval tv = pc_timeval_ms(200);
        event_base_loopexit(w->base, &tv);
        event_base_dispatch(w->base);
    }
    tally_destroy(&w->tally);
    cache_destroy(&w->cache);
    semantic_port_destroy(&w->sem_port);
    upstream_destroy(&w->side);
    store_destroy(&w->store);
    upstream_destroy(&w->up);
    memo_destroy(&w->memo);
    if (w->stop_ev != NULL)
        event_free(w->stop_ev);
    if (w->exit_ev != NULL)
        event_free(w->exit_ev);
    if (w->base != NULL) {
        event_base_loop(w->base, EVLOOP_NONBLOCK);
        event_base_free(w->base);
    }
    w->magic = 0;
    free(w);
}
