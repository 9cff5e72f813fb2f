/*
 * pc_worker.h - one event loop thread and everything it owns: the HTTP
 * server on the shared listening socket, the libcurl multi handle, the Redis
 * connection and its row of metrics. Workers share nothing mutable except the
 * flight table (pc_flight.h); the configuration they read is immutable, and
 * a reload swaps which one (pc_reload.h).
 *
 * struct worker is the context passed as the callback argument to every
 * module running on the worker (STYLE.md: one context struct, no globals).
 */
#ifndef PC_WORKER_H
#define PC_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_stats.h"

struct backend_ops;
struct cache;
struct conf;
struct dash;
struct event;
struct event_base;
struct fetch;
struct httpd;
struct route;
struct l1;
struct semantic;
struct semantic_port;
struct server;
struct store;
struct tally;
struct upstream;

struct worker {
    unsigned magic;
    int id;
    const struct conf *conf;           /* in force; switched by a reload between two callbacks of
                                          this worker's loop: read values at use, keep no copy */
    struct route *route;               /* the process's replicas (shared) */
    const struct backend_ops *backend; /* upstream-type */
    int64_t started_ms;

    struct event_base *base;
    struct httpd *httpd;
    struct upstream *up;
    struct store *store;
    struct cache *cache;            /* the cache pipeline over store */
    struct semantic *semantic;      /* the process's semantic cache (shared), or NULL */
    struct semantic_port *sem_port; /* this worker's door to it */
    struct l1 *l1;                  /* the process's L1 of hot exact answers (shared), or NULL */
    struct memo *memo;              /* keys of the bodies this worker read lately (pc_memo.h) */
    struct upstream *side;          /* the proxy's own calls (embedder, verifier) */
    struct stats side_stats;        /* their transport counters, kept out of /stats */
    struct tally *tally; /* per-hour usage by model and tenant, for `promptcache report` */
    struct dash *dash;   /* the dashboard's figures from Redis (shared), or NULL */
    struct stats stats;
    int64_t own_priced[3]; /* embedder, verifier total and verifier output tokens already priced
                              (pc_savings.h) */

    pthread_t thread;
    struct event *stop_ev;           /* activated from the main thread: begin shutdown */
    struct event *exit_ev;           /* periodic check while stopping */
    struct event *accept_stopped_ev; /* the server's: activated once this worker stops accepting */
    bool stopping;
    uint64_t shutdown_deadline_ms;

    uint64_t seq;             /* request ids */
    size_t fetches;           /* upstream calls led by this worker, incl. ones without clients */
    struct fetch *fetch_list; /* those calls (owned by fetch.c) */
    uint32_t id_prefix;       /* random per process, so ids differ across restarts */
};

#define WORKER_MAGIC 0x574f524bu /* "WORK" */

/* Create the worker's modules on a new event_base; NULL with errbuf set on failure. */
struct worker *worker_create(int id, const struct conf *conf, struct route *route,
                             struct semantic *sem, struct l1 *l1, int listen_fd, char *errbuf,
                             size_t errlen);
/* Run the loop on a new thread. */
int worker_start(struct worker *w);
/* Ask the worker (from any thread) to stop accepting and finish in-flight work. */
void worker_request_stop(struct worker *w);
/* Wait for the worker's thread to leave its loop. */
void worker_join(struct worker *w);
/*
 * After every worker has been joined: close this worker's client connections
 * (their requests end and leave their flights). Done for all workers before
 * any is destroyed, since a flight may span workers.
 */
void worker_close_clients(struct worker *w);
/* Join the thread (if still running), abort leftover upstream calls and free everything. */
void worker_destroy(struct worker **w);
/* Called whenever a request or fetch ends while stopping: exit the loop if idle. */
void worker_check_idle(struct worker *w);

#endif
