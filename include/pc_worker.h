/*
 * pc_worker.h - one event loop thread and everything it owns: the HTTP
 * server on the shared listening socket, the libcurl multi handle, the Redis
 * connection and its row of metrics. Workers share nothing mutable except the
 * flight table (pc_flight.h); the configuration they read is immutable, and
 * a reload swaps which one (pc_reload.h).
 *
 * struct worker, the context passed as the callback argument to every
 * module running on the worker, is in pc_context.h; this header is its
 * life cycle (create, start, stop, join, destroy), for the server.
 */
#ifndef PC_WORKER_H
#define PC_WORKER_H

#include "pc_context.h"

/* Create the worker's modules on a new event_base; NULL with errbuf set on failure. */
struct worker *worker_create(int id, const struct conf *conf, struct route *route,
                             struct semantic *sem, struct l1 *l1, struct fence *fence,
                             int listen_fd, char *errbuf, size_t errlen);
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

#endif
