/*
 * pc_pool.h - a small thread pool for work that must not run on an event
 * loop (embedding a text, searching the vector index), with a hand-back:
 * each job's completion runs on the event loop of the worker that submitted
 * it, through that worker's port.
 *
 *   worker loop ── pool_submit ─▶ queue ─▶ pool thread: work(arg)
 *        ▲                                        │
 *        └── port event ◀── port's done list ◀────┘
 *            done(arg, ran = true)
 *
 * The queue is bounded: a submit beyond it fails at once (the caller treats
 * that as "not now": a semantic miss), so a burst never grows memory or
 * latency without bound.
 *
 * Teardown order: pool_stop (threads joined; jobs still queued are handed
 * back not run), then each port's loop may end, then pool_port_destroy runs
 * the done callbacks still owed (ran = true or false), then pool_destroy.
 */
#ifndef PC_POOL_H
#define PC_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct pool;
struct pool_port;

typedef void pool_work_fn(void *arg);
/* ran is false when the pool stopped before the job could run. */
typedef void pool_done_fn(void *arg, bool ran);

/* nthreads >= 1; max_queued >= 1 jobs waiting for a thread. NULL if threads cannot start. */
struct pool *pool_create(int nthreads, size_t max_queued);
/* Take no new jobs; threads leave after the job they run. Does not wait. */
void pool_close(struct pool *p);
/* pool_close, wait for the threads, hand back the jobs still queued (not run). */
void pool_stop(struct pool *p);
void pool_destroy(struct pool **p);

struct pool_port *pool_port_create(struct event_base *base);
void pool_port_destroy(struct pool_port **pp);

/* 0, or -1 (nothing will run, no callback) when the queue is full or the pool stopped. */
int pool_submit(struct pool *p, struct pool_port *port, pool_work_fn *work, pool_done_fn *done,
                void *arg);

/* Jobs waiting for a thread (for /stats). */
size_t pool_queued(struct pool *p);

#endif
