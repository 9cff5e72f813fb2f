/*
 * pc_context.h - struct worker, the per-worker context: what one event loop
 * thread owns (the HTTP server on the shared listening socket, the libcurl
 * multi handle, the Redis connection, its row of metrics) and the shared
 * objects it reaches. It is the callback argument of every module running on
 * the worker (STYLE.md: one context struct, no globals). worker.c builds,
 * runs and tears it down (pc_worker.h); the modules it drives (proxy, fetch,
 * admin, savings) read it through this header and never call worker.c.
 */
#ifndef PC_CONTEXT_H
#define PC_CONTEXT_H

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
struct fence;
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
    struct fence *fence;            /* the purges the process knows of (shared), or NULL */
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
    struct event *accept_stopped_ev; /* the server's: activated once this worker stops accepting,
                                        and again once it has left its loop */
    bool stopping;
    bool exited; /* atomic: the loop has been left (the server stops waiting once all have) */
    uint64_t shutdown_deadline_ms;
    bool cutting; /* shutdown-timeout passed: the calls left were ended, their answers go out */

    uint64_t seq;             /* request ids */
    size_t fetches;           /* upstream calls led by this worker, incl. ones without clients */
    struct fetch *fetch_list; /* those calls (owned by fetch.c) */
    uint32_t id_prefix;       /* random per process, so ids differ across restarts */

    /* worker.c's: a request or fetch ended while stopping (exit the loop once idle). */
    void (*ended)(struct worker *w);
};

#define WORKER_MAGIC 0x574f524bu /* "WORK" */

/*
 * Tell the worker that a request or an upstream call has ended: while it is
 * stopping it leaves its loop once the last one is gone. Cheap otherwise.
 */
static inline void context_ended(struct worker *w)
{
    if (w->stopping && w->ended != NULL)
        w->ended(w);
}

#endif
