/*
 * pool.c - the thread pool with a hand-back to event loops (see pc_pool.h).
 * Owns the pool's threads, its queue of jobs and the jobs themselves until
 * their done callback has run; each port owns its event and its list of
 * finished jobs. Lists are <sys/queue.h> tail queues.
 *
 * Locks: the pool's mutex guards the queue and the stop flag; a port's mutex
 * guards its done list. A thread never holds both: it takes a job under the
 * pool's lock, runs it unlocked, then appends it under the port's lock.
 */
#include "pc_pool.h"
#include "pc_log.h"
#include "pc_util.h"

#include <pthread.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#define POOL_MAGIC 0x504f4f4cu /* "POOL" */
#define PORT_MAGIC 0x504f5254u /* "PORT" */
#define JOB_MAGIC  0x4a4f4221u /* "JOB!" */

struct job {
    unsigned magic;
    pool_work_fn *work;
    pool_done_fn *done;
    void *arg;
    struct pool_port *port;
    bool ran;
    TAILQ_ENTRY(job) link;
};

TAILQ_HEAD(job_list, job);

struct pool {
    unsigned magic;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job_list queue;
    size_t queued;
    size_t max_queued;
    bool stopping;
    int nthreads;
    pthread_t *threads;
};

struct pool_port {
    unsigned magic;
    pthread_mutex_t mu;
    struct job_list done;
    struct event *ev;
};

/* ---- ports ------------------------------------------------------------------ */

/* Run the done callbacks of every finished job (on the port's loop). */
static void port_drain(struct pool_port *pt)
{
    for (;;) {
        pthread_mutex_lock(&pt->mu);
        struct job *j = TAILQ_FIRST(&pt->done);
        if (j != NULL)
            TAILQ_REMOVE(&pt->done, j, link);
        pthread_mutex_unlock(&pt->mu);
        if (j == NULL)
            return;
        PC_CHECK_OBJ(j, JOB_MAGIC);
        pool_done_fn *done = j->done;
        void *arg = j->arg;
        bool ran = j->ran;
        j->magic = 0;
        free(j);
        done(arg, ran);
    }
}

static void on_port(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct pool_port *pt = arg;
    PC_CHECK_OBJ(pt, PORT_MAGIC);
    port_drain(pt);
}

struct pool_port *pool_port_create(struct event_base *base)
{
    struct pool_port *pt = pc_calloc(1, sizeof(*pt));
    pt->magic = PORT_MAGIC;
    pthread_mutex_init(&pt->mu, NULL);
    TAILQ_INIT(&pt->done);
    pt->ev = event_new(base, -1, 0, on_port, pt);
    if (pt->ev == NULL) {
        log_error("pool: cannot create a port event");
        abort();
    }
    return pt;
}

void pool_port_destroy(struct pool_port **pp)
{
    struct pool_port *pt = *pp;
    if (pt == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(pt, PORT_MAGIC);
    port_drain(pt);
    event_free(pt->ev);
    pthread_mutex_destroy(&pt->mu);
    pt->magic = 0;
    free(pt);
}

/* From any thread: the job is finished (or will never run); wake its loop. */
static void port_hand_back(struct job *j)
{
    struct pool_port *pt = j->port;
    pthread_mutex_lock(&pt->mu);
    bool was_empty = TAILQ_EMPTY(&pt->done);
    TAILQ_INSERT_TAIL(&pt->done, j, link);
    pthread_mutex_unlock(&pt->mu);
    if (was_empty)
        event_active(pt->ev, EV_TIMEOUT, 0);
}

/* ---- the pool ----------------------------------------------------------------- */

static void *pool_thread(void *arg)
{
    struct pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && TAILQ_EMPTY(&p->queue))
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        struct job *j = TAILQ_FIRST(&p->queue);
        TAILQ_REMOVE(&p->queue, j, link);
        p->queued--;
        pthread_mutex_unlock(&p->mu);
        j->work(j->arg);
        j->ran = true;
        port_hand_back(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct pool *pool_create(int nthreads, size_t max_queued)
{
    struct pool *p = pc_calloc(1, sizeof(*p));
    p->magic = POOL_MAGIC;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    TAILQ_INIT(&p->queue);
    p->max_queued = max_queued > 0 ? max_queued : 1;
    p->threads = pc_calloc((size_t)(nthreads > 0 ? nthreads : 1), sizeof(*p->threads));
    for (int i = 0; i < (nthreads > 0 ? nthreads : 1); i++) {
        if (pthread_create(&p->threads[i], NULL, pool_thread, p) != 0) {
            log_error("pool: cannot start thread %d", i);
            pool_stop(p);
            pool_destroy(&p);
            return NULL;
        }
        p->nthreads++;
    }
    return p;
}

void pool_close(struct pool *p)
{
    PC_CHECK_OBJ(p, POOL_MAGIC);
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_stop(struct pool *p)
{
    if (p == NULL)
        return;
    pool_close(p);
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    p->nthreads = 0;
    /* Jobs that never got a thread go back to their ports, not run. */
    pthread_mutex_lock(&p->mu);
    struct job *j;
    while ((j = TAILQ_FIRST(&p->queue)) != NULL) {
        TAILQ_REMOVE(&p->queue, j, link);
        p->queued--;
        port_hand_back(j);
    }
    pthread_mutex_unlock(&p->mu);
}

void pool_destroy(struct pool **pp)
{
    struct pool *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, POOL_MAGIC);
    pool_stop(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    p->magic = 0;
    free(p);
}

int pool_submit(struct pool *p, struct pool_port *port, pool_work_fn *work, pool_done_fn *done,
                void *arg)
{
    PC_CHECK_OBJ(p, POOL_MAGIC);
    struct job *j = pc_calloc(1, sizeof(*j));
    j->magic = JOB_MAGIC;
    j->work = work;
    j->done = done;
    j->arg = arg;
    j->port = port;
    pthread_mutex_lock(&p->mu);
    if (p->stopping || p->queued >= p->max_queued) {
        pthread_mutex_unlock(&p->mu);
        j->magic = 0;
        free(j);
        return -1;
    }
    TAILQ_INSERT_TAIL(&p->queue, j, link);
    p->queued++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

size_t pool_queued(struct pool *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->queued;
    pthread_mutex_unlock(&p->mu);
    return n;
}
