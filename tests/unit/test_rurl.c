/*
 * test_rurl.c - the Redis URL grammar: every form, the canonical text with
 * and without secrets, and what is refused (with a message that never
 * repeats a password).
 */
#include "pc_rurl.h"
#include "pc_util.h"
#include "t.h"

static struct rurl parse_ok(const char *url, unsigned flags)
{
    struct rurl u;
    char err[192] = "";
    int rc = rurl_parse(url, flags, &u, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "  refused '%s': %s\n", url, err);
    T_CHECK_INT(rc, 0);
    return u;
}

/* The canonical text of url, with or without secrets (compared, then freed). */
static void check_format(const struct rurl *u, const char *with, const char *without)
{
    char *a = rurl_format(u, true), *b = rurl_format(u, false);
    T_CHECK_STR(a, with);
    T_CHECK_STR(b, without);
    free(a);
    free(b);
}

static void test_tcp(void)
{
    struct rurl u = parse_ok("redis://localhost", 0);
    T_CHECK(u.kind == RURL_TCP);
    T_CHECK_STR(u.tcp.host, "localhost");
    T_CHECK_INT(u.tcp.port, 6379);
    T_CHECK_INT(u.db, 0);
    T_CHECK(u.user == NULL && u.password == NULL);
    check_format(&u, "redis://localhost:6379/0", "redis://localhost:6379/0");
    rurl_free(&u);

    u = parse_ok("redis://:s3cr%40t@10.0.0.2:6380/2", 0);
    T_CHECK_STR(u.tcp.host, "10.0.0.2");
    T_CHECK_STR(u.password, "s3cr@t");
    T_CHECK(u.user == NULL);
    T_CHECK_INT(u.tcp.port, 6380);
    T_CHECK_INT(u.db, 2);
    check_format(&u, "redis://:s3cr%40t@10.0.0.2:6380/2", "redis://10.0.0.2:6380/2");
    rurl_free(&u);

    u = parse_ok("redis://alice:p%20w@cache.internal/5", 0);
    T_CHECK_STR(u.user, "alice");
    T_CHECK_STR(u.password, "p w");
    T_CHECK_INT(u.db, 5);
    check_format(&u, "redis://alice:p%20w@cache.internal:6379/5", "redis://cache.internal:6379/5");
    rurl_free(&u);

    u = parse_ok("redis://[::1]:7000/", 0);
    T_CHECK_STR(u.tcp.host, "::1");
    T_CHECK_INT(u.tcp.port, 7000);
    check_format(&u, "redis://[::1]:7000/0", "redis://[::1]:7000/0");
    rurl_free(&u);

    /* a user alone only where a password may come from elsewhere */
    u = parse_ok("redis://alice@h:1/0", RURL_USER_ALONE);
    T_CHECK_STR(u.user, "alice");
    T_CHECK(u.password == NULL);
    rurl_free(&u);
}

static void test_unix(void)
{
    struct rurl u = parse_ok("unix:/run/redis.sock", 0);
    T_CHECK(u.kind == RURL_UNIX);
    T_CHECK_STR(u.unix_path, "/run/redis.sock");
    T_CHECK(u.password == NULL && u.tcp.host == NULL);
    check_format(&u, "unix:/run/redis.sock", "unix:/run/redis.sock");
    rurl_free(&u);

    u = parse_ok("unix://:pw@/run/redis.sock", 0);
    T_CHECK_STR(u.unix_path, "/run/redis.sock");
    T_CHECK_STR(u.password, "pw");
    check_format(&u, "unix://:pw@/run/redis.sock", "unix:/run/redis.sock");
    rurl_free(&u);

    u = parse_ok("unix://bob:x%2Fy@/run/r.sock", 0);
    T_CHECK_STR(u.user, "bob");
    T_CHECK_STR(u.password, "x/y");
    check_format(&u, "unix://bob:x%2Fy@/run/r.sock", "unix:/run/r.sock");
    rurl_free(&u);

    u = parse_ok("unix:///run/r.sock", 0);
    T_CHECK_STR(u.unix_path, "/run/r.sock");
    rurl_free(&u);
}

static void test_sentinel(void)
{
    struct rurl u = parse_ok("sentinel://10.0.0.1,10.0.0.2:26380,[::1]:5000,s4.local/mymaster", 0);
    T_CHECK(u.kind == RURL_SENTINEL);
    T_CHECK_INT(u.nsentinels, 4);
    T_CHECK_STR(u.sentinels[0].host, "10.0.0.1");
    T_CHECK_INT(u.sentinels[0].port, 26379);
    T_CHECK_INT(u.sentinels[1].port, 26380);
    T_CHECK_STR(u.sentinels[2].host, "::1");
    T_CHECK_INT(u.sentinels[2].port, 5000);
    T_CHECK_STR(u.sentinels[3].host, "s4.local");
    T_CHECK_STR(u.master, "mymaster");
    T_CHECK_INT(u.db, 0);
    T_CHECK(u.password == NULL && u.sentinel_password == NULL);
    check_format(&u,
                 "sentinel://10.0.0.1:26379,10.0.0.2:26380,[::1]:5000,s4.local:26379/mymaster/0",
                 "sentinel://10.0.0.1:26379,10.0.0.2:26380,[::1]:5000,s4.local:26379/mymaster/0");
    rurl_free(&u);

    u = parse_ok("sentinel://app:pw@h1,h2/cache-1/3?sentinel-user=mon&sentinel-password=s%26p", 0);
    T_CHECK_STR(u.user, "app");
    T_CHECK_STR(u.password, "pw");
    T_CHECK_STR(u.master, "cache-1");
    T_CHECK_INT(u.db, 3);
    T_CHECK_STR(u.sentinel_user, "mon");
    T_CHECK_STR(u.sentinel_password, "s&p");
    check_format(&u,
                 "sentinel://app:pw@h1:26379,h2:26379/cache-1/3?sentinel-user=mon&"
                 "sentinel-password=s%26p",
                 "sentinel://h1:26379,h2:26379/cache-1/3");
    rurl_free(&u);

    u = parse_ok("sentinel://h/m/?sentinel-password=x", 0);
    T_CHECK_INT(u.db, 0);
    T_CHECK_STR(u.sentinel_password, "x");
    T_CHECK(u.sentinel_user == NULL);
    rurl_free(&u);
}

static void test_cluster(void)
{
    struct rurl u = parse_ok("cluster://10.0.0.1,10.0.0.2:7001,[::1]:7002,n4.local", 0);
    T_CHECK(u.kind == RURL_CLUSTER);
    T_CHECK_INT(u.nseeds, 4);
    T_CHECK_STR(u.seeds[0].host, "10.0.0.1");
    T_CHECK_INT(u.seeds[0].port, 6379);
    T_CHECK_INT(u.seeds[1].port, 7001);
    T_CHECK_STR(u.seeds[2].host, "::1");
    T_CHECK_STR(u.seeds[3].host, "n4.local");
    T_CHECK_INT(u.db, 0);
    T_CHECK(u.user == NULL && u.password == NULL && u.nsentinels == 0);
    check_format(&u, "cluster://10.0.0.1:6379,10.0.0.2:7001,[::1]:7002,n4.local:6379",
                 "cluster://10.0.0.1:6379,10.0.0.2:7001,[::1]:7002,n4.local:6379");
    rurl_free(&u);

    u = parse_ok("CLUSTER://app:p%40ss@h1:7000/0", 0);
    T_CHECK(u.kind == RURL_CLUSTER);
    T_CHECK_STR(u.user, "app");
    T_CHECK_STR(u.password, "p@ss");
    check_format(&u, "cluster://app:p%40ss@h1:7000", "cluster://h1:7000");
    rurl_free(&u);

    /* the config check folds a password in later */
    u = parse_ok("cluster://app@h1", RURL_USER_ALONE);
    T_CHECK_STR(u.user, "app");
    rurl_free(&u);

    /* a db other than 0 is refused, saying why */
    char err[192] = "";
    T_CHECK_INT(rurl_parse("cluster://h1,h2/2", 0, &u, err, sizeof(err)), -1);
    T_CHECK(strstr(err, "database 0 only") != NULL);
}

static void test_refused(void)
{
    static const char *const bad[] = {
        "",
        "http://h",
        "redis://",
        "redis://:6379",
        "redis://h:",
        "redis://h:0",
        "redis://h:65536",
        "redis://h:12x",
        "redis://h/x",
        "redis://h/-1",
        "redis://h/1/2",
        "redis://h:1:2",
        "unix:",
        "unix:rel.sock",
        "unix://h/run/r.sock",
        "unix://:pw@",
        "rediss://h",
        "redis://alice@h",  /* a user needs a password */
        "redis://alice:@h", /* empty password */
        "redis://:@h",
        "redis://@h",
        "redis://:p%zz@h",
        "redis://h?db=1",
        "redis://[::1",
        "redis://h h",
        "redis://[::1]x",
        "redis://[nope]:1",
        "redis://300.1.1.1",
        "redis://-h",
        "sentinel://h1,h2",
        "sentinel://h1,h2/",
        "sentinel:///m",
        "sentinel://h1,,h2/m",
        "sentinel://h1,/m",
        "sentinel://h:0/m",
        "sentinel://h/m/x",
        "sentinel://h/m?db=1",
        "sentinel://h/m?sentinel-user=u",
        "sentinel://h/m?sentinel-password=",
        "sentinel://h/m?sentinel-password=a&sentinel-password=b",
        "sentinel://h/m#frag",
        "sentinel://h/%00",
        "sentinel://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,h17/m",
        "cluster://",
        "cluster://h1,,h2",
        "cluster://h1,",
        "cluster://h:0",
        "cluster://h/1",
        "cluster://h/x",
        "cluster://h/0/1",
        "cluster://h?x=1",
        "cluster://h#f",
        "cluster://alice@h",
        "cluster://h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,h17",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        struct rurl u;
        char err[192] = "";
        int rc = rurl_parse(bad[i], 0, &u, err, sizeof(err));
        if (rc != -1 || err[0] == '\0')
            fprintf(stderr, "  accepted or no message: '%s'\n", bad[i]);
        T_CHECK_INT(rc, -1);
        T_CHECK(err[0] != '\0');
        T_CHECK(u.tcp.host == NULL && u.password == NULL && u.master == NULL && u.nseeds == 0);
    }
    /* a message never repeats a password */
    struct rurl u;
    char err[192];
    T_CHECK_INT(rurl_parse("redis://:hunter2@h:99999", 0, &u, err, sizeof(err)), -1);
    T_CHECK(strstr(err, "hunter2") == NULL);
    T_CHECK_INT(rurl_parse("sentinel://h/m?sentinel-password=hunter2&x=1", 0, &u, err, sizeof(err)),
                -1);
    T_CHECK(strstr(err, "hunter2") == NULL);
}

static void test_helpers(void)
{
    T_CHECK(rurl_is_address("127.0.0.1"));
    T_CHECK(rurl_is_address("::1"));
    T_CHECK(!rurl_is_address("localhost"));
    T_CHECK(!rurl_is_address(NULL));
    char *a = rurl_addr_text("fe80::1", 6379), *b = rurl_addr_text("10.1.2.3", 1);
    T_CHECK_STR(a, "[fe80::1]:6379");
    T_CHECK_STR(b, "10.1.2.3:1");
    free(a);
    free(b);
}

int main(void)
{
    T_RUN(test_tcp);
    T_RUN(test_unix);
    T_RUN(test_sentinel);
    T_RUN(test_cluster);
    T_RUN(test_refused);
    T_RUN(test_helpers);
    T_DONE();
}
