/*
 * test_route.c - replica choice: round-robin turns, least-loaded with ties in
 * turn, exclusion of replicas already tried, passive health (a refused
 * connection leaves a replica out, unless every replica is out).
 */
#include "t.h"

#include "pc_conf.h"
#include "pc_route.h"

static struct route *mk_route(const char *policy, int n, double fail_timeout)
{
    struct conf *c = conf_create();
    char err[256], url[64], ft[32];
    T_CHECK_INT(conf_set(c, "upstream", "", err, sizeof err), 0);
    for (int i = 0; i < n; i++) {
        snprintf(url, sizeof url, "http://10.0.0.%d:8000/", i + 1);
        T_CHECK_INT(conf_set(c, "upstream", url, err, sizeof err), 0);
    }
    T_CHECK_INT(conf_set(c, "routing", policy, err, sizeof err), 0);
    snprintf(ft, sizeof ft, "%g", fail_timeout);
    T_CHECK_INT(conf_set(c, "upstream-fail-timeout", ft, err, sizeof err), 0);
    struct route *r = route_create(c, err, sizeof err);
    conf_destroy(&c);
    return r;
}

static void test_names(void)
{
    struct route *r = mk_route("round-robin", 2, 10);
    T_CHECK(r != NULL);
    T_CHECK_INT(route_count(r), 2);
    T_CHECK_STR(route_replica(r, 0)->name, "10.0.0.1:8000");
    T_CHECK_STR(route_replica(r, 1)->base_url, "http://10.0.0.2:8000");
    T_CHECK(route_replica(r, 2) == NULL);
    route_destroy(&r);
    T_CHECK(r == NULL);
}

static void test_round_robin(void)
{
    struct route *r = mk_route("round-robin", 3, 10);
    int count[3] = {0};
    size_t last = 99;
    for (int i = 0; i < 30; i++) {
        const struct route_replica *rep = route_pick(r, NULL);
        T_CHECK(rep->index != last);
        last = rep->index;
        count[rep->index]++;
        route_end(r, rep, ROUTE_OK);
    }
    T_CHECK_INT(count[0], 10);
    T_CHECK_INT(count[1], 10);
    T_CHECK_INT(count[2], 10);
    route_destroy(&r);
}

static void test_least_loaded(void)
{
    struct route *r = mk_route("least-loaded", 3, 10);
    /* Three calls in flight land on three different replicas. */
    const struct route_replica *a = route_pick(r, NULL), *b = route_pick(r, NULL),
                               *c = route_pick(r, NULL);
    T_CHECK(a->index != b->index && b->index != c->index && a->index != c->index);
    /* b finishes: the next call goes to b. */
    route_end(r, b, ROUTE_OK);
    const struct route_replica *d = route_pick(r, NULL);
    T_CHECK_INT(d->index, b->index);
    route_end(r, a, ROUTE_OK);
    route_end(r, c, ROUTE_OK);
    route_end(r, d, ROUTE_OK);
    /* Idle pool: ties are broken in turn, so sequential calls spread. */
    int count[3] = {0};
    for (int i = 0; i < 30; i++) {
        const struct route_replica *rep = route_pick(r, NULL);
        count[rep->index]++;
        route_end(r, rep, ROUTE_OK);
    }
    T_CHECK_INT(count[0], 10);
    T_CHECK_INT(count[1], 10);
    T_CHECK_INT(count[2], 10);
    route_destroy(&r);
}

static void test_exclude(void)
{
    struct route *r = mk_route("round-robin", 2, 10);
    struct route_query q = {.exclude = 1};
    for (int i = 0; i < 4; i++) {
        const struct route_replica *rep = route_pick(r, &q);
        T_CHECK_INT(rep->index, 1);
        route_end(r, rep, ROUTE_OK);
    }
    q.exclude = 3;
    T_CHECK(route_pick(r, &q) == NULL);
    route_destroy(&r);
}

static void test_passive_health(void)
{
    struct route *r = mk_route("round-robin", 2, 10);
    const struct route_replica *rep = route_pick(r, NULL);
    size_t down = rep->index;
    route_end(r, rep, ROUTE_CONNECT_ERR);
    for (int i = 0; i < 5; i++) {
        const struct route_replica *x = route_pick(r, NULL);
        T_CHECK(x->index != down);
        route_end(r, x, ROUTE_OK);
    }
    /* A reset or timeout is an error but not a reason to leave a replica out. */
    const struct route_replica *up = route_pick(r, NULL);
    route_end(r, up, ROUTE_ERR);
    const struct route_replica *again = route_pick(r, NULL);
    T_CHECK_INT(again->index, up->index);
    route_end(r, again, ROUTE_OK);
    /* Both down: the older failure is tried (never refuse a call). */
    const struct route_replica *other = route_pick(r, NULL);
    route_end(r, other, ROUTE_CONNECT_ERR);
    const struct route_replica *retry = route_pick(r, NULL);
    T_CHECK_INT(retry->index, down);
    /* An answer brings it back. */
    route_end(r, retry, ROUTE_OK);
    struct pc_buf b = PC_BUF_INIT;
    route_render_json(r, &b);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"healthy\":true") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"healthy\":false") != NULL);
    pc_buf_free(&b);
    route_destroy(&r);
}

static void test_fail_timeout_zero(void)
{
    struct route *r = mk_route("round-robin", 2, 0);
    const struct route_replica *rep = route_pick(r, NULL);
    size_t first = rep->index;
    route_end(r, rep, ROUTE_CONNECT_ERR);
    route_end(r, route_pick(r, NULL), ROUTE_OK);
    rep = route_pick(r, NULL);
    T_CHECK_INT(rep->index, first); /* never left out */
    route_end(r, rep, ROUTE_OK);
    route_destroy(&r);
}

static void test_prometheus(void)
{
    struct route *r = mk_route("round-robin", 2, 10);
    route_end(r, route_pick(r, NULL), ROUTE_OK);
    struct pc_buf b = PC_BUF_INIT;
    route_render_prometheus(r, &b);
    const char *s = pc_buf_cstr(&b);
    T_CHECK(strstr(s, "# TYPE promptcache_replica_requests_total counter\n") != NULL);
    T_CHECK(strstr(s, "promptcache_replica_requests_total{upstream=\"10.0.0.1:8000\"} 1\n") !=
            NULL);
    T_CHECK(strstr(s, "promptcache_replica_in_flight{upstream=\"10.0.0.2:8000\"} 0\n") != NULL);
    pc_buf_free(&b);
    route_destroy(&r);
}

int main(void)
{
    T_RUN(test_names);
    T_RUN(test_round_robin);
    T_RUN(test_least_loaded);
    T_RUN(test_exclude);
    T_RUN(test_passive_health);
    T_RUN(test_fail_timeout_zero);
    T_RUN(test_prometheus);
    T_DONE();
}
