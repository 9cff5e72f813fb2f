/*
 * test_flight.c - coalescing flights: joining, late joiners, pause/resume,
 * abandonment, trimming, and a subscriber on another thread.
 */
#include "pc_flight.h"
#include "t.h"

#include <pthread.h>

#include <event2/event.h>
#include <event2/thread.h>

struct reader {
    struct flight_sub *sub;
    struct pc_buf got;
    int notified;
    bool done;
    int status;
    int result;
};

static void on_notify(struct flight_sub *sub, void *arg)
{
    struct reader *rd = arg;
    struct flight_view v;
    rd->notified++;
    while (flight_sub_read(sub, &v, &rd->got, 7) > 0)
        ;
    rd->status = v.status;
    if (v.state == FLIGHT_DONE) {
        rd->done = true;
        rd->result = v.result;
    }
}

static int fired_resume, fired_abort;

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fired_resume++;
}

static void on_abort(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fired_abort++;
}

static void run(struct event_base *base)
{
    event_base_loop(base, EVLOOP_NONBLOCK);
}

static unsigned char key_a[PC_SHA256_LEN] = {1, 2, 3};

static void test_join_and_late_joiner(void)
{
    struct event_base *base = event_base_new();
    struct reader a = {0}, b = {0}, c = {0};
    bool leader = false;
    a.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &a, &leader);
    T_CHECK(leader);
    b.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &b, &leader);
    T_CHECK(!leader);
    struct flight *fl = flight_sub_flight(a.sub);
    T_CHECK(fl == flight_sub_flight(b.sub));
    flight_get(fl); /* the fetch's reference */

    /* One block: the array, then its strings. */
    static const char text[] = "Content-Type\0application/json";
    struct flight_header *h = pc_malloc(sizeof(*h) + sizeof(text));
    char *copy = memcpy(h + 1, text, sizeof(text));
    h[0].name = copy;
    h[0].value = copy + strlen("Content-Type") + 1;
    flight_set_head(fl, 200, h, 1, "up:1");
    T_CHECK_INT(flight_append(fl, "hello ", 6), FLIGHT_CONTINUE);
    run(base);
    T_CHECK_INT(a.got.len, 6);
    /* A late joiner still sees the whole answer. */
    c.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &c, &leader);
    T_CHECK(!leader);
    flight_append(fl, "world", 5);
    flight_finish(fl, 0, NULL);
    run(base);
    T_CHECK_STR(pc_buf_cstr(&a.got), "hello world");
    T_CHECK_STR(pc_buf_cstr(&b.got), "hello world");
    T_CHECK_STR(pc_buf_cstr(&c.got), "hello world");
    T_CHECK(a.done && b.done && c.done);
    T_CHECK_INT(a.status, 200);
    const struct pc_buf *body = flight_body(fl);
    T_CHECK(body != NULL && body->len == 11);

    /* Finished flights leave the table: the next subscriber leads a new one. */
    struct reader d = {0};
    d.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &d, &leader);
    T_CHECK(leader);
    flight_finish(flight_sub_flight(d.sub), 0, NULL);
    flight_unsubscribe(&d.sub);

    flight_unsubscribe(&a.sub);
    flight_unsubscribe(&b.sub);
    flight_unsubscribe(&c.sub);
    T_CHECK(a.sub == NULL);
    flight_put(&fl);
    T_CHECK(fl == NULL);
    pc_buf_free(&a.got);
    pc_buf_free(&b.got);
    pc_buf_free(&c.got);
    pc_buf_free(&d.got);
    event_base_free(base);
}

/* The creator's request digest travels with the flight; a joiner's does not replace it. */
static void test_asked_same(void)
{
    struct event_base *base = event_base_new();
    unsigned char mine[PC_SHA256_LEN] = {7}, other[PC_SHA256_LEN] = {8};
    struct reader a = {0}, b = {0}, c = {0};
    bool leader = false;
    a.sub = flight_subscribe(key_a, mine, NULL, base, on_notify, &a, &leader);
    T_CHECK(leader);
    b.sub = flight_subscribe(key_a, other, NULL, base, on_notify, &b, &leader);
    T_CHECK(!leader);
    T_CHECK(flight_asked_same(b.sub, mine));
    T_CHECK(!flight_asked_same(b.sub, other));
    c.sub = flight_subscribe(NULL, NULL, NULL, base, on_notify, &c, &leader);
    T_CHECK(leader);
    T_CHECK(!flight_asked_same(c.sub, mine)); /* none given: never the same */
    flight_unsubscribe(&a.sub);
    flight_unsubscribe(&b.sub);
    flight_unsubscribe(&c.sub);
    event_base_free(base);
}

/*
 * A flight whose call began before a purge of its key (its mark below the joiner's purged) is
 * not joined: the joiner leads a new flight, which takes the old one's place in the table,
 * while the old one's subscribers keep it. One whose call began at or after the purge is.
 */
static void test_fenced(void)
{
    struct event_base *base = event_base_new();
    struct reader a = {0}, b = {0}, c = {0}, d = {0};
    bool leader = false;
    struct flight_fence before = {.now = 4, .purged = 2};
    a.sub = flight_subscribe(key_a, NULL, &before, base, on_notify, &a, &leader);
    T_CHECK(leader);
    b.sub = flight_subscribe(key_a, NULL, &before, base, on_notify, &b, &leader);
    T_CHECK(!leader); /* asked before the purge: joins */
    struct flight *old = flight_sub_flight(a.sub);
    flight_get(old); /* the fetch's reference */

    struct flight_fence after = {.now = 5, .purged = 5}; /* a purge marked 5 */
    c.sub = flight_subscribe(key_a, NULL, &after, base, on_notify, &c, &leader);
    T_CHECK(leader);
    struct flight *fresh = flight_sub_flight(c.sub);
    T_CHECK(fresh != old);
    flight_get(fresh);
    d.sub = flight_subscribe(key_a, NULL, &after, base, on_notify, &d, &leader);
    T_CHECK(!leader); /* the new call began after the purge: joined */
    T_CHECK(flight_sub_flight(d.sub) == fresh);

    flight_set_head(old, 200, NULL, 0, "up:1");
    flight_append(old, "before", 6);
    flight_finish(old, 0, NULL);
    flight_set_head(fresh, 200, NULL, 0, "up:1");
    flight_append(fresh, "after", 5);
    flight_finish(fresh, 0, NULL);
    run(base);
    T_CHECK_STR(pc_buf_cstr(&a.got), "before");
    T_CHECK_STR(pc_buf_cstr(&b.got), "before");
    T_CHECK_STR(pc_buf_cstr(&c.got), "after");
    T_CHECK_STR(pc_buf_cstr(&d.got), "after");
    T_CHECK(a.done && b.done && c.done && d.done);

    /* Without fences (NULL, as zeros) a flight is always joinable. */
    struct reader e = {0}, g = {0};
    e.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &e, &leader);
    T_CHECK(leader);
    g.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &g, &leader);
    T_CHECK(!leader);
    flight_finish(flight_sub_flight(e.sub), 0, NULL);

    struct reader *all[] = {&a, &b, &c, &d, &e, &g};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        flight_unsubscribe(&all[i]->sub);
        pc_buf_free(&all[i]->got);
    }
    flight_put(&old);
    flight_put(&fresh);
    event_base_free(base);
}

/* A reader that does not read until told to. */
struct lazy {
    int notified;
};

static void on_lazy(struct flight_sub *sub, void *arg)
{
    (void)sub;
    ((struct lazy *)arg)->notified++;
}

static void test_pause_resume(void)
{
    struct event_base *base = event_base_new();
    struct event *resume = event_new(base, -1, 0, on_resume, NULL);
    struct event *abort_ev = event_new(base, -1, 0, on_abort, NULL);
    struct lazy lz = {0};
    bool leader;
    struct flight_sub *sub = flight_subscribe(NULL, NULL, NULL, base, on_lazy, &lz, &leader);
    struct flight *fl = flight_sub_flight(sub);
    flight_get(fl);
    flight_fetch_bind(fl, resume, abort_ev);
    flight_set_head(fl, 200, NULL, 0, "up");
    static char chunk[64 * 1024];
    memset(chunk, 'x', sizeof(chunk));
    size_t appended = 0;
    int rc;
    while ((rc = flight_append(fl, chunk, sizeof(chunk))) == FLIGHT_CONTINUE)
        appended += sizeof(chunk);
    T_CHECK_INT(rc, FLIGHT_PAUSE);
    T_CHECK(appended > FLIGHT_HIGH_WATER && appended <= FLIGHT_HIGH_WATER + sizeof(chunk));
    fired_resume = 0;
    struct pc_buf out = PC_BUF_INIT;
    struct flight_view v;
    /* Reading a little is not enough to resume; catching up is. */
    flight_sub_read(sub, &v, &out, 1000);
    run(base);
    T_CHECK_INT(fired_resume, 0);
    while (flight_sub_read(sub, &v, &out, 64 * 1024) > 0)
        ;
    run(base);
    T_CHECK_INT(fired_resume, 1);
    T_CHECK_INT(out.len, appended);
    T_CHECK_INT(flight_append(fl, chunk, sizeof(chunk)), FLIGHT_CONTINUE);

    /* The last subscriber leaving an unfinished flight aborts its fetch. */
    fired_abort = 0;
    flight_unsubscribe(&sub);
    run(base);
    T_CHECK_INT(fired_abort, 1);
    flight_finish(fl, -4, "aborted");
    flight_put(&fl);
    pc_buf_free(&out);
    event_free(resume);
    event_free(abort_ev);
    event_base_free(base);
}

static void test_trim(void)
{
    struct event_base *base = event_base_new();
    struct reader rd = {0};
    bool leader;
    rd.sub = flight_subscribe(NULL, NULL, NULL, base, on_notify, &rd, &leader);
    struct flight *fl = flight_sub_flight(rd.sub);
    flight_get(fl);
    flight_set_head(fl, 200, NULL, 0, "up");
    flight_stop_recording(fl); /* as the fetch does past cache-max-entry-size */
    static char chunk[100 * 1024];
    for (int i = 0; i < 50; i++) {
        memset(chunk, 'a' + i % 26, sizeof(chunk));
        T_CHECK_INT(flight_append(fl, chunk, sizeof(chunk)), FLIGHT_CONTINUE);
        run(base);
        pc_buf_reset(&rd.got); /* the reader forwards and forgets */
    }
    flight_finish(fl, 0, NULL);
    run(base);
    T_CHECK(rd.done);
    /* Trimmed: the whole body is no longer available for storing. */
    T_CHECK(flight_body(fl) == NULL);
    flight_unsubscribe(&rd.sub);
    flight_put(&fl);
    pc_buf_free(&rd.got);
    event_base_free(base);
}

/* A subscriber on its own thread and event loop, reading while the fetch writes. */
struct remote {
    struct event_base *base;
    struct reader rd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool subscribed;
};

static void on_remote(struct flight_sub *sub, void *arg)
{
    struct remote *rm = arg;
    on_notify(sub, &rm->rd);
    if (rm->rd.done)
        event_base_loopbreak(rm->base);
}

static void *remote_main(void *arg)
{
    struct remote *rm = arg;
    bool leader;
    rm->rd.sub = flight_subscribe(key_a, NULL, NULL, rm->base, on_remote, rm, &leader);
    pthread_mutex_lock(&rm->mu);
    rm->subscribed = true;
    pthread_cond_signal(&rm->cv);
    pthread_mutex_unlock(&rm->mu);
    event_base_loop(rm->base, EVLOOP_NO_EXIT_ON_EMPTY);
    flight_unsubscribe(&rm->rd.sub);
    return NULL;
}

static void test_cross_thread(void)
{
    struct event_base *base = event_base_new();
    struct reader local = {0};
    bool leader;
    local.sub = flight_subscribe(key_a, NULL, NULL, base, on_notify, &local, &leader);
    T_CHECK(leader);
    struct flight *fl = flight_sub_flight(local.sub);
    flight_get(fl);

    struct remote rm = {.base = event_base_new()};
    pthread_mutex_init(&rm.mu, NULL);
    pthread_cond_init(&rm.cv, NULL);
    pthread_t th;
    pthread_create(&th, NULL, remote_main, &rm);
    pthread_mutex_lock(&rm.mu);
    while (!rm.subscribed)
        pthread_cond_wait(&rm.cv, &rm.mu);
    pthread_mutex_unlock(&rm.mu);

    flight_set_head(fl, 201, NULL, 0, "up");
    struct pc_buf want = PC_BUF_INIT;
    for (int i = 0; i < 2000; i++) {
        char line[32];
        int n = snprintf(line, sizeof(line), "data: %d\n\n", i);
        pc_buf_append(&want, line, (size_t)n);
        T_CHECK_INT(flight_append(fl, line, (size_t)n), FLIGHT_CONTINUE);
        if (i % 100 == 0)
            run(base);
    }
    flight_finish(fl, 0, NULL);
    pthread_join(th, NULL);
    run(base);
    T_CHECK(rm.rd.done && local.done);
    T_CHECK_INT(rm.rd.status, 201);
    T_CHECK(rm.rd.got.len == want.len && memcmp(rm.rd.got.data, want.data, want.len) == 0);
    T_CHECK(local.got.len == want.len && memcmp(local.got.data, want.data, want.len) == 0);
    flight_unsubscribe(&local.sub);
    flight_put(&fl);
    pc_buf_free(&want);
    pc_buf_free(&local.got);
    pc_buf_free(&rm.rd.got);
    event_base_free(rm.base);
    event_base_free(base);
    pthread_mutex_destroy(&rm.mu);
    pthread_cond_destroy(&rm.cv);
}

int main(void)
{
    evthread_use_pthreads();
    flight_table_init();
    T_RUN(test_join_and_late_joiner);
    T_RUN(test_asked_same);
    T_RUN(test_fenced);
    T_RUN(test_pause_resume);
    T_RUN(test_trim);
    T_RUN(test_cross_thread);
    flight_table_destroy();
    libevent_global_shutdown();
    T_DONE();
}
