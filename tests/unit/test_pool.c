/*
 * test_pool.c - the thread pool: work runs off the loop, done runs on the
 * submitting loop's thread, the queue bound refuses at once, and a stopped
 * pool hands unrun jobs back (ran = false) instead of dropping them.
 */
#include "t.h"

#include "pc_pool.h"
#include "pc_util.h"

#include <pthread.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

struct item {
    pthread_t loop_thread;
    pthread_t work_thread;
    int value;
    int done_calls;
    bool ran;
    bool done_on_loop;
    int *pending;
    struct event_base *base;
};

static void work_square(void *arg)
{
    struct item *it = arg;
    it->work_thread = pthread_self();
    it->value *= it->value;
}

static void done_count(void *arg, bool ran)
{
    struct item *it = arg;
    it->done_calls++;
    it->ran = ran;
    it->done_on_loop = pthread_equal(pthread_self(), it->loop_thread);
    if (--*it->pending == 0)
        event_base_loopbreak(it->base);
}

static void test_round_trip(void)
{
    struct event_base *base = event_base_new();
    struct pool *p = pool_create(2, 64);
    struct pool_port *port = pool_port_create(base);
    struct item items[20];
    int pending = 20;
    for (int i = 0; i < 20; i++) {
        items[i] = (struct item){
            .loop_thread = pthread_self(), .value = i, .pending = &pending, .base = base};
        T_CHECK_INT(pool_submit(p, port, work_square, done_count, &items[i]), 0);
    }
    struct timeval tv = {5, 0};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    T_CHECK_INT(pending, 0);
    for (int i = 0; i < 20; i++) {
        T_CHECK_INT(items[i].value, i * i);
        T_CHECK_INT(items[i].done_calls, 1);
        T_CHECK(items[i].ran);
        T_CHECK(items[i].done_on_loop);
        T_CHECK(!pthread_equal(items[i].work_thread, pthread_self()));
    }
    pool_stop(p);
    pool_port_destroy(&port);
    pool_destroy(&p);
    T_CHECK(p == NULL && port == NULL);
    event_base_free(base);
}

/* A job that blocks its thread until released, to fill the queue. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static bool gate_entered;

static void work_gate(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate_mu);
    gate_entered = true;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static void test_bound_and_stop(void)
{
    struct event_base *base = event_base_new();
    struct pool *p = pool_create(1, 2);
    struct pool_port *port = pool_port_create(base);
    int pending = 100;
    struct item gate = {.loop_thread = pthread_self(), .pending = &pending, .base = base};
    struct item q[3];
    T_CHECK_INT(pool_submit(p, port, work_gate, done_count, &gate), 0);
    pthread_mutex_lock(&gate_mu);
    while (!gate_entered)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    /* The thread is busy: two jobs fit in the queue, the third is refused. */
    for (int i = 0; i < 3; i++)
        q[i] = (struct item){
            .loop_thread = pthread_self(), .value = 3, .pending = &pending, .base = base};
    T_CHECK_INT(pool_submit(p, port, work_square, done_count, &q[0]), 0);
    T_CHECK_INT(pool_submit(p, port, work_square, done_count, &q[1]), 0);
    T_CHECK_INT(pool_submit(p, port, work_square, done_count, &q[2]), -1);
    T_CHECK_INT(pool_queued(p), 2);
    /* Close while the gate job runs: it finishes, the queued two come back unrun. */
    pool_close(p);
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    pool_stop(p);
    T_CHECK_INT(pool_submit(p, port, work_square, done_count, &q[2]), -1);
    pool_port_destroy(&port); /* runs the owed callbacks */
    T_CHECK_INT(gate.done_calls, 1);
    T_CHECK(gate.ran);
    for (int i = 0; i < 2; i++) {
        T_CHECK_INT(q[i].done_calls, 1);
        T_CHECK(!q[i].ran);
        T_CHECK_INT(q[i].value, 3); /* the work never ran */
    }
    T_CHECK_INT(q[2].done_calls, 0);
    pool_destroy(&p);
    event_base_free(base);
}

int main(void)
{
    evthread_use_pthreads();
    T_RUN(test_round_trip);
    T_RUN(test_bound_and_stop);
    T_DONE();
}
