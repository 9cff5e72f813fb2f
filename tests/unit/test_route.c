/*
 * test_route.c - replica choice: round-robin turns, least-loaded with ties in
 * turn, exclusion of replicas already tried, passive health (a refused
 * connection leaves a replica out, unless every replica is out); prefix
 * routing: a conversation follows its prefix, new prompts spread, the load
 * bound overrules a match, a dead replica is avoided, sessions stick, and
 * predicted and reported tokens are counted per replica.
 */
#include "t.h"

#include <unistd.h>

#include "pc_api.h"
#include "pc_chain.h"
#include "pc_conf.h"
#include "pc_pindex.h"
#include "pc_route.h"
#include "pc_stats.h"

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

/* Every routing value the config takes is the policy of that name. */
static void test_policy_names(void)
{
    static const char *const names[] = {"round-robin", "least-loaded", "prefix"};
    for (size_t i = 0; i < PC_ARRAY_LEN(names); i++) {
        struct route *r = mk_route(names[i], 2, 10);
        T_CHECK_STR(route_policy_name(r), names[i]);
        route_destroy(&r);
    }
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "routing", "random", err, sizeof err), -1);
    T_CHECK_STR(err, "\"random\" is not one of round-robin, least-loaded or prefix");
    conf_destroy(&c);
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
    stats_render_source_json(&b, &(struct stat_source){&route_replica_series, r});
    T_CHECK(strstr(pc_buf_cstr(&b), "\"healthy\":true") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"healthy\":false") != NULL);
    pc_buf_free(&b);
    route_destroy(&r);
}

/* Replica want, whatever its health (all others excluded). */
static const struct route_replica *pick_index(struct route *r, size_t want)
{
    struct route_query q = {.exclude = ~(UINT64_C(1) << want)};
    const struct route_replica *rep = route_pick(r, &q);
    T_CHECK_INT(rep->index, want);
    return rep;
}

/* Whether n picks all avoid replica i (each ended at once: answered, or aborted if i's). */
static bool avoided(struct route *r, size_t i, int n)
{
    bool ok = true;
    for (int k = 0; k < n; k++) {
        const struct route_replica *x = route_pick(r, NULL);
        ok = ok && x->index != i;
        route_end(r, x, x->index == i ? ROUTE_ABORTED : ROUTE_OK);
    }
    return ok;
}

/* Server errors: ROUTE_5XX_IN_A_ROW with no other answer between leave a replica out. */
static void test_server_errors(void)
{
    T_CHECK(route_server_error(500) && route_server_error(502) && route_server_error(503) &&
            route_server_error(504) && route_server_error(529));
    T_CHECK(!route_server_error(501) && !route_server_error(505) && !route_server_error(429) &&
            !route_server_error(404) && !route_server_error(200) && !route_server_error(600));
    struct route *r = mk_route("round-robin", 2, 10);
    /* Two, an answer, two: the run starts again, the replica keeps its turn. */
    route_end(r, pick_index(r, 0), ROUTE_5XX);
    route_end(r, pick_index(r, 0), ROUTE_5XX);
    route_end(r, pick_index(r, 0), ROUTE_OK);
    route_end(r, pick_index(r, 0), ROUTE_5XX);
    route_end(r, pick_index(r, 0), ROUTE_5XX);
    T_CHECK(!avoided(r, 0, 4));
    /* Other failures neither count in the run nor end it. */
    route_end(r, pick_index(r, 0), ROUTE_ERR);
    T_CHECK(!avoided(r, 0, 4));
    /* The third in a row: left out. */
    route_end(r, pick_index(r, 0), ROUTE_5XX);
    T_CHECK(avoided(r, 0, 6));
    struct pc_buf b = PC_BUF_INIT;
    stats_render_source_json(&b, &(struct stat_source){&route_replica_series, r});
    T_CHECK(strstr(pc_buf_cstr(&b), "\"healthy\":false") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"server_errors\":5") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"errors\":1,") != NULL); /* the reset only */
    pc_buf_free(&b);
    route_destroy(&r);

    /* Calls with no answer (reset before a head) count in the run with server errors. */
    r = mk_route("round-robin", 2, 10);
    route_end(r, pick_index(r, 1), ROUTE_NO_ANSWER);
    route_end(r, pick_index(r, 1), ROUTE_5XX);
    route_end(r, pick_index(r, 1), ROUTE_OK);
    route_end(r, pick_index(r, 1), ROUTE_NO_ANSWER);
    route_end(r, pick_index(r, 1), ROUTE_NO_ANSWER);
    T_CHECK(!avoided(r, 1, 4));
    route_end(r, pick_index(r, 1), ROUTE_NO_ANSWER);
    T_CHECK(avoided(r, 1, 6));
    stats_render_source_json(&b, &(struct stat_source){&route_replica_series, r});
    T_CHECK(strstr(pc_buf_cstr(&b), "\"errors\":4,") != NULL); /* each call with no answer */
    T_CHECK(strstr(pc_buf_cstr(&b), "\"server_errors\":1,") != NULL);
    pc_buf_free(&b);
    route_destroy(&r);

    /* upstream-fail-timeout 0: never left out. */
    r = mk_route("round-robin", 2, 0);
    for (int i = 0; i < 5; i++)
        route_end(r, pick_index(r, 1), ROUTE_5XX);
    T_CHECK(!avoided(r, 1, 4));
    route_destroy(&r);

    /* After upstream-fail-timeout, on probation: one call at a time until one is answered. */
    r = mk_route("round-robin", 2, 0.001);
    for (int i = 0; i < ROUTE_5XX_IN_A_ROW; i++)
        route_end(r, pick_index(r, 0), ROUTE_5XX);
    usleep(5000); /* the 1 ms of upstream-fail-timeout pass */
    const struct route_replica *probe = NULL;
    for (int i = 0; i < 2 && probe == NULL; i++) {
        const struct route_replica *x = route_pick(r, NULL);
        if (x->index == 0)
            probe = x;
        else
            route_end(r, x, ROUTE_OK);
    }
    T_CHECK(probe != NULL);
    T_CHECK(avoided(r, 0, 4)); /* while the probe is in flight */
    route_end(r, probe, ROUTE_OK);
    T_CHECK(!avoided(r, 0, 4)); /* answered: its turn again */
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
    stats_render_source_prometheus(&b, &(struct stat_source){&route_replica_series, r});
    const char *s = pc_buf_cstr(&b);
    T_CHECK(strstr(s, "# TYPE promptcache_replica_requests_total counter\n") != NULL);
    T_CHECK(strstr(s, "promptcache_replica_requests_total{upstream=\"10.0.0.1:8000\"} 1\n") !=
            NULL);
    T_CHECK(strstr(s, "promptcache_replica_in_flight{upstream=\"10.0.0.2:8000\"} 0\n") != NULL);
    pc_buf_free(&b);
    route_destroy(&r);
}

/* ---- prefix routing -------------------------------------------------------------- */

static struct route *mk_prefix_route(int n, const char *abs, const char *rel)
{
    struct conf *c = conf_create();
    char err[256], url[64];
    T_CHECK_INT(conf_set(c, "upstream", "", err, sizeof err), 0);
    for (int i = 0; i < n; i++) {
        snprintf(url, sizeof url, "http://10.0.1.%d:8000", i + 1);
        T_CHECK_INT(conf_set(c, "upstream", url, err, sizeof err), 0);
    }
    T_CHECK_INT(conf_set(c, "routing", "prefix", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "prefix-balance-abs", abs, err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "prefix-balance-rel", rel, err, sizeof err), 0);
    struct route *r = route_create(c, err, sizeof err);
    conf_destroy(&c);
    return r;
}

/*
 * A chat of turns messages, alternating user and assistant: a long first
 * question (two links), short turns after it.
 */
static void conversation(struct chain *c, int turns, const char *topic)
{
    struct pc_buf j = PC_BUF_INIT;
    pc_buf_append_str(&j, "{\"model\":\"m\",\"messages\":[");
    for (int i = 0; i < turns; i++)
        pc_buf_printf(&j, "%s{\"role\":\"%s\",\"content\":\"%s turn %d %0*d\"}", i ? "," : "",
                      i % 2 ? "assistant" : "user", topic, i, i ? 100 : 2000, i);
    pc_buf_append_str(&j, "]}");
    cJSON *body = cJSON_Parse(pc_buf_cstr(&j));
    struct chain_input in = {API_CHAT, body, NULL};
    chain_build(&in, c);
    cJSON_Delete(body);
    pc_buf_free(&j);
}

static const struct route_replica *pick_chain(struct route *r, const struct chain *c,
                                              struct route_query *q)
{
    *q = (struct route_query){.chain = c, .model = "m"};
    return route_pick(r, q);
}

static void test_prefix_follows(void)
{
    struct route *r = mk_prefix_route(3, "4", "1.5");
    struct chain t1, t3, t5;
    conversation(&t1, 1, "alpha");
    conversation(&t3, 3, "alpha");
    conversation(&t5, 5, "alpha");
    struct route_query q;
    const struct route_replica *first = pick_chain(r, &t1, &q);
    T_CHECK_INT(q.matched_links, 0);
    route_end(r, first, ROUTE_OK);
    /* Each later turn extends the earlier prompt: same replica, matched by the index. */
    const struct route_replica *again = pick_chain(r, &t3, &q);
    T_CHECK_INT(again->index, first->index);
    T_CHECK_INT(q.reason, ROUTE_BY_PREFIX);
    T_CHECK_INT(q.matched_links, t1.n);
    T_CHECK(q.matched_tokens > 0 && q.matched_tokens < q.prompt_tokens);
    route_end(r, again, ROUTE_OK);
    again = pick_chain(r, &t5, &q);
    T_CHECK_INT(again->index, first->index);
    T_CHECK_INT(q.matched_links, t3.n);
    /* The answer's usage is kept next to the prediction. */
    struct api_usage u = {.present = true, .prompt = 1000, .cached = 700};
    route_usage(r, again, "m", 4000, q.matched_tokens, &u);
    route_end(r, again, ROUTE_OK);
    struct pc_buf b = PC_BUF_INIT;
    stats_render_source_json(&b, &(struct stat_source){&route_replica_series, r});
    T_CHECK(strstr(pc_buf_cstr(&b), "\"reported_cached_tokens\":700") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\"routed_by_prefix\":2") != NULL);
    pc_buf_free(&b);
    chain_free(&t1);
    chain_free(&t3);
    chain_free(&t5);
    route_destroy(&r);
}

/*
 * A replica that reports 1e15 prompt and cached tokens (dialect_tokens' cap)
 * in every answer: its reported counters stop at INT64_MAX. They wrapped,
 * after 9224 such answers, and /stats and /metrics showed them negative.
 */
static void test_usage_saturates(void)
{
    struct route *r = mk_prefix_route(2, "4", "1.5");
    struct chain t1;
    conversation(&t1, 1, "liar");
    struct route_query q;
    struct api_usage u = {
        .present = true, .prompt = INT64_C(1000000000000000), .cached = INT64_C(1000000000000000)};
    const struct route_replica *rep = NULL;
    for (int i = 0; i < 10000; i++) {
        rep = pick_chain(r, &t1, &q);
        route_usage(r, rep, "m", 4000, q.matched_tokens, &u);
        route_end(r, rep, ROUTE_OK);
    }
    struct pc_buf b = PC_BUF_INIT;
    stats_render_source_prometheus(&b, &(struct stat_source){&route_replica_series, r});
    T_CHECK(strstr(pc_buf_cstr(&b), "} -") == NULL);
    char want[160];
    snprintf(want, sizeof want,
             "reported_prompt_tokens_total{upstream=\"%s\"} 9223372036854775807\n", rep->name);
    T_CHECK(strstr(pc_buf_cstr(&b), want) != NULL);
    snprintf(want, sizeof want,
             "reported_cached_tokens_total{upstream=\"%s\"} 9223372036854775807\n", rep->name);
    T_CHECK(strstr(pc_buf_cstr(&b), want) != NULL);
    pc_buf_free(&b);
    chain_free(&t1);
    route_destroy(&r);
}

static void test_prefix_spread(void)
{
    struct route *r = mk_prefix_route(3, "4", "1.5");
    int count[3] = {0};
    for (int i = 0; i < 60; i++) {
        char topic[32];
        snprintf(topic, sizeof topic, "topic-%d", i);
        struct chain c;
        conversation(&c, 1, topic);
        struct route_query q;
        const struct route_replica *rep = pick_chain(r, &c, &q);
        count[rep->index]++;
        route_end(r, rep, ROUTE_OK);
        chain_free(&c);
    }
    /* Sixty new prompts on an idle pool: spread by their hashes. */
    for (int i = 0; i < 3; i++)
        T_CHECK(count[i] >= 10);
    route_destroy(&r);
}

static void test_prefix_load_bound(void)
{
    struct route *r = mk_prefix_route(2, "2", "1.5");
    struct chain c;
    conversation(&c, 3, "busy");
    struct route_query q;
    const struct route_replica *held[3];
    held[0] = pick_chain(r, &c, &q);
    /* Up to 2 calls beyond the idle replica, the match wins. */
    for (int i = 1; i < 3; i++) {
        held[i] = pick_chain(r, &c, &q);
        T_CHECK_INT(held[i]->index, held[0]->index);
    }
    /* A third beyond: overloaded, the other replica takes it. */
    const struct route_replica *other = pick_chain(r, &c, &q);
    T_CHECK(other->index != held[0]->index);
    T_CHECK_INT(q.reason, ROUTE_BY_BALANCE);
    T_CHECK_INT(q.matched_links, 0);
    route_end(r, other, ROUTE_OK);
    for (int i = 0; i < 3; i++)
        route_end(r, held[i], ROUTE_OK);
    /* Idle again: back to the longest match... which both now hold. */
    const struct route_replica *back = pick_chain(r, &c, &q);
    T_CHECK_INT(q.matched_links, c.n);
    route_end(r, back, ROUTE_OK);
    chain_free(&c);
    route_destroy(&r);
}

static void test_prefix_dead_replica(void)
{
    struct route *r = mk_prefix_route(3, "4", "1.5");
    struct chain c;
    conversation(&c, 3, "dead");
    struct route_query q;
    const struct route_replica *home = pick_chain(r, &c, &q);
    route_end(r, home, ROUTE_CONNECT_ERR); /* refused: left out for a while */
    const struct route_replica *next = pick_chain(r, &c, &q);
    T_CHECK(next->index != home->index);
    route_end(r, next, ROUTE_OK);
    /* The call is retried on another replica, never the one that refused. */
    q = (struct route_query){.chain = &c, .exclude = UINT64_C(1) << next->index};
    const struct route_replica *third = route_pick(r, &q);
    T_CHECK(third->index != next->index && third->index != home->index);
    route_end(r, third, ROUTE_OK);
    chain_free(&c);
    route_destroy(&r);
}

static void test_prefix_session(void)
{
    struct route *r = mk_prefix_route(4, "1", "1.5");
    struct chain a, b;
    conversation(&a, 1, "one");
    conversation(&b, 1, "two");
    struct route_query q = {.chain = &a, .session = 0xabcdef};
    const struct route_replica *home = route_pick(r, &q);
    T_CHECK_INT(q.reason, ROUTE_BY_SESSION);
    route_end(r, home, ROUTE_OK);
    /* Another prompt of the same session: the same replica. */
    q = (struct route_query){.chain = &b, .session = 0xabcdef};
    const struct route_replica *again = route_pick(r, &q);
    T_CHECK_INT(again->index, home->index);
    /* Overloaded, the session's replica is passed over too. */
    q = (struct route_query){.chain = &b, .session = 0xabcdef};
    const struct route_replica *second = route_pick(r, &q);
    T_CHECK_INT(second->index, home->index);
    q = (struct route_query){.chain = &b, .session = 0xabcdef};
    const struct route_replica *spill = route_pick(r, &q);
    T_CHECK(spill->index != home->index);
    T_CHECK_INT(q.reason, ROUTE_BY_BALANCE);
    route_end(r, again, ROUTE_OK);
    route_end(r, second, ROUTE_OK);
    route_end(r, spill, ROUTE_OK);
    chain_free(&a);
    chain_free(&b);
    route_destroy(&r);
}

static void test_prefix_min_match(void)
{
    struct route *r = mk_prefix_route(3, "4", "1.5");
    /* A long shared preamble makes the second prompt a continuation... */
    struct chain a1, a2;
    conversation(&a1, 1, "preamble");
    conversation(&a2, 3, "preamble");
    struct route_query q;
    const struct route_replica *home = pick_chain(r, &a1, &q);
    route_end(r, home, ROUTE_OK);
    route_end(r, pick_chain(r, &a2, &q), ROUTE_OK);
    T_CHECK_INT(q.reason, ROUTE_BY_PREFIX);
    /* ...but sharing one short turn out of many is not: the least loaded. */
    struct chain big;
    struct pc_buf j = PC_BUF_INIT;
    pc_buf_printf(&j,
                  "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":"
                  "\"preamble turn 0 %02000d\"},{\"role\":\"user\",\"content\":\"%012000d\"}]}",
                  0, 1);
    cJSON *body = cJSON_Parse(pc_buf_cstr(&j));
    struct chain_input in = {API_CHAT, body, NULL};
    chain_build(&in, &big);
    cJSON_Delete(body);
    pc_buf_free(&j);
    route_end(r, pick_chain(r, &big, &q), ROUTE_OK);
    T_CHECK_INT(q.reason, ROUTE_BY_LOAD);
    chain_free(&a1);
    chain_free(&a2);
    chain_free(&big);
    route_destroy(&r);
}

int main(void)
{
    T_RUN(test_policy_names);
    T_RUN(test_names);
    T_RUN(test_round_robin);
    T_RUN(test_server_errors);
    T_RUN(test_least_loaded);
    T_RUN(test_exclude);
    T_RUN(test_passive_health);
    T_RUN(test_fail_timeout_zero);
    T_RUN(test_prometheus);
    T_RUN(test_prefix_follows);
    T_RUN(test_usage_saturates);
    T_RUN(test_prefix_spread);
    T_RUN(test_prefix_load_bound);
    T_RUN(test_prefix_dead_replica);
    T_RUN(test_prefix_session);
    T_RUN(test_prefix_min_match);
    T_DONE();
}
