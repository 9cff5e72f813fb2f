/*
 * test_conf.c - the config module: defaults, file and command-line parsing,
 * value forms and bounds, error messages with file and line, cross-key
 * checks, the dumps, and the committed sample conf/promptcache.conf.
 *
 * Run from the repository root (the sample is read as conf/promptcache.conf).
 */
#include "pc_backend.h"
#include "pc_conf.h"
#include "pc_embed.h"
#include "pc_guard.h"
#include "pc_log.h"
#include "pc_secret.h"
#include "pc_server.h"
#include "t.h"

#include <sys/stat.h>
#include <unistd.h>

/* Write text to a fresh file under /tmp; path receives its name. */
static void write_temp(const char *text, char path[32])
{
    snprintf(path, 32, "/tmp/pc_conf_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n) {
        perror("write");
        exit(2);
    }
    close(fd);
}

/* conf_load of text as a file (its name left in path) plus argv; errors in errs. */
static int load_text(struct conf *c, const char *text, int argc, char **argv, struct pc_buf *errs,
                     char path[32])
{
    write_temp(text, path);
    int n = conf_load(c, path, argc, argv, errs);
    unlink(path);
    return n;
}

static char *effective(const struct conf *c)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_effective(c, &b);
    return pc_buf_cstr(&b);
}

/* The expected error text "PATH:LINE: rest\n". */
static const char *at(const char *path, int line, const char *rest)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s:%d: %s\n", path, line, rest);
    return buf;
}

/* Whether errs holds exactly the line want (which ends in '\n'). */
static int has_line(struct pc_buf *errs, const char *want)
{
    const char *s = pc_buf_cstr(errs);
    for (const char *p = s; (p = strstr(p, want)) != NULL; p++)
        if (p == s || p[-1] == '\n')
            return 1;
    fprintf(stderr, "    missing error line: %s    in: %s", want, s);
    return 0;
}

static void test_defaults(void)
{
    struct conf *c = conf_create();
    T_CHECK_STR(c->listen, "127.0.0.1:8080");
    T_CHECK_STR(c->listen_host, "127.0.0.1");
    T_CHECK_INT(c->listen_port, 8080);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    T_CHECK_INT(c->workers, ncpu < 1 ? 1 : ncpu > 256 ? 256 : ncpu);
    T_CHECK_INT(c->max_connections, 10000);
    T_CHECK_INT(c->max_body_size, 16 * 1024 * 1024);
    T_CHECK(c->client_timeout == 60);
    T_CHECK(c->shutdown_timeout == 10);
    T_CHECK_INT(c->upstream.n, 1);
    T_CHECK_STR(c->upstream.v[0], "https://api.openai.com");
    T_CHECK_STR(backend_for(c->upstream_type)->name, "openai");
    T_CHECK_STR(c->upstream_key, "");
    T_CHECK(c->upstream_timeout == 60);
    T_CHECK(c->upstream_connect_timeout == 5);
    T_CHECK_STR(c->redis, "redis://127.0.0.1:6379/0");
    T_CHECK_INT(c->redis_timeout, 50);
    T_CHECK(c->redis_auto_migrate);
    T_CHECK(c->cache);
    T_CHECK_INT(c->cache_ttl, 86400);
    T_CHECK_INT(c->cache_max_ttl, 2592000);
    T_CHECK_INT(c->cache_max_entry_size, 8 * 1024 * 1024);
    T_CHECK(c->coalesce);
    T_CHECK_INT(c->shared_namespaces.n, 0);
    T_CHECK(!c->semantic);
    T_CHECK(c->semantic_threshold < 0); /* auto: the embedder's own */
    T_CHECK_INT(c->semantic_guards.n, 1);
    T_CHECK_INT(guard_mask(c->semantic_guards.v, c->semantic_guards.n), GUARD_ALL);
    T_CHECK_INT(c->embedder, embed_id("builtin"));
    T_CHECK_STR(c->embedder_vectors, "");
    T_CHECK_STR(c->embedder_url, "");
    T_CHECK_STR(c->embedder_model, "");
    T_CHECK_STR(c->admin_token, "");
    T_CHECK_STR(c->pricing, "");
    T_CHECK_INT(c->log_level, PC_LOG_NOTICE);
    T_CHECK_STR(c->log_file, "");
    T_CHECK_STR(c->access_log, "stdout");
    conf_destroy(&c);
    T_CHECK(c == NULL);
    conf_destroy(&c); /* a second destroy is harmless */
}

static void test_bool_forms(void)
{
    struct conf *c = conf_create();
    char err[256];
    const char *yes[] = {"yes", "true", "on", "1", "YES", "On"};
    const char *no[] = {"no", "false", "off", "0", "No", "FALSE"};
    for (size_t i = 0; i < PC_ARRAY_LEN(yes); i++) {
        T_CHECK_INT(conf_set(c, "semantic", yes[i], err, sizeof err), 0);
        T_CHECK(c->semantic);
        T_CHECK_INT(conf_set(c, "semantic", no[i], err, sizeof err), 0);
        T_CHECK(!c->semantic);
    }
    T_CHECK_INT(conf_set(c, "cache", "maybe", err, sizeof err), -1);
    T_CHECK_STR(err, "\"maybe\" is not yes or no");
    T_CHECK(c->cache);
    conf_destroy(&c);
}

static void test_size_forms(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "max-body-size", "1k", err, sizeof err), 0);
    T_CHECK_INT(c->max_body_size, 1024);
    T_CHECK_INT(conf_set(c, "max-body-size", "16M", err, sizeof err), 0);
    T_CHECK_INT(c->max_body_size, 16 << 20);
    T_CHECK_INT(conf_set(c, "max-body-size", "1g", err, sizeof err), 0);
    T_CHECK_INT(c->max_body_size, 1 << 30);
    T_CHECK_INT(conf_set(c, "max-body-size", "2mb", err, sizeof err), 0);
    T_CHECK_INT(c->max_body_size, 2 << 20);
    T_CHECK_INT(conf_set(c, "cache-max-entry-size", "5000", err, sizeof err), 0);
    T_CHECK_INT(c->cache_max_entry_size, 5000);
    const char *bad[] = {"16x", "1.5m", "-1k", " 1k", "k", "", "99999999999999999999g"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        T_CHECK_INT(conf_set(c, "max-body-size", bad[i], err, sizeof err), -1);
    conf_set(c, "max-body-size", "16x", err, sizeof err);
    T_CHECK_STR(err, "\"16x\" is not a size (bytes, with an optional k, m or g suffix)");
    T_CHECK_INT(conf_set(c, "max-body-size", "2g", err, sizeof err), -1);
    T_CHECK_STR(err, "2g is out of range (1k..1g)");
    T_CHECK_INT(conf_set(c, "max-body-size", "1023", err, sizeof err), -1);
    T_CHECK_INT(c->cache_max_entry_size, 5000);
    T_CHECK_INT(c->max_body_size, 2 << 20);
    conf_destroy(&c);
}

static void test_number_forms(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "semantic-threshold", "0.75", err, sizeof err), 0);
    T_CHECK(c->semantic_threshold == 0.75);
    T_CHECK_INT(conf_set(c, "client-timeout", "1e1", err, sizeof err), 0);
    T_CHECK(c->client_timeout == 10);
    T_CHECK_INT(conf_set(c, "shutdown-timeout", "0", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "semantic-threshold", "1.5", err, sizeof err), -1);
    T_CHECK_STR(err, "1.5 is out of range (0..1)");
    T_CHECK_INT(conf_set(c, "semantic-threshold", "AUTO", err, sizeof err), 0);
    T_CHECK(c->semantic_threshold < 0);
    T_CHECK_INT(conf_set(c, "client-timeout", "auto", err, sizeof err), -1);
    T_CHECK_INT(conf_set(c, "upstream-timeout", "0.01", err, sizeof err), -1);
    T_CHECK_STR(err, "0.01 is out of range (0.05..86400)");
    T_CHECK_INT(conf_set(c, "client-timeout", "abc", err, sizeof err), -1);
    T_CHECK_STR(err, "\"abc\" is not a number");
    T_CHECK_INT(conf_set(c, "client-timeout", "inf", err, sizeof err), -1);
    T_CHECK_INT(conf_set(c, "client-timeout", "nan", err, sizeof err), -1);

    T_CHECK_INT(conf_set(c, "workers", "4", err, sizeof err), 0);
    T_CHECK_INT(c->workers, 4);
    T_CHECK_INT(conf_set(c, "workers", "300", err, sizeof err), -1);
    T_CHECK_STR(err, "300 is out of range (0..256)");
    T_CHECK_INT(conf_set(c, "redis-timeout", "12ms", err, sizeof err), -1);
    T_CHECK_STR(err, "\"12ms\" is not an integer");
    T_CHECK_INT(conf_set(c, "cache-ttl", "0", err, sizeof err), -1);
    T_CHECK_INT(conf_set(c, "max-connections", "1000000", err, sizeof err), 0);
    T_CHECK_INT(c->max_connections, 1000000);
    T_CHECK_INT(conf_set(c, "max-connections", "99999999999999999999", err, sizeof err), -1);
    T_CHECK_INT(c->workers, 4);
    conf_destroy(&c);
}

static void test_enum_forms(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "upstream-type", "anthropic", err, sizeof err), 0);
    T_CHECK_STR(backend_for(c->upstream_type)->name, "anthropic");
    T_CHECK_INT(conf_set(c, "upstream-type", "sglang", err, sizeof err), 0);
    T_CHECK_STR(backend_for(c->upstream_type)->name, "sglang");
    T_CHECK_INT(conf_set(c, "upstream-type", "VLLM", err, sizeof err), 0);
    T_CHECK_STR(backend_for(c->upstream_type)->name, "vllm");
    T_CHECK_INT(conf_set(c, "upstream-type", "bogus", err, sizeof err), -1);
    T_CHECK_STR(err, "\"bogus\" is not one of openai, anthropic, vllm or sglang");
    T_CHECK_INT(conf_set(c, "embedder", "hash", err, sizeof err), 0);
    T_CHECK_INT(c->embedder, embed_id("hash"));
    const char *levels[] = {"error", "warn", "notice", "info", "debug"};
    for (size_t i = 0; i < PC_ARRAY_LEN(levels); i++) {
        T_CHECK_INT(conf_set(c, "log-level", levels[i], err, sizeof err), 0);
        T_CHECK_INT(c->log_level, log_level_parse(levels[i]));
    }
    T_CHECK_INT(conf_set(c, "log-level", "verbose", err, sizeof err), -1);
    conf_destroy(&c);
}

static void test_listen(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "listen", "[::1]:9000", err, sizeof err), 0);
    T_CHECK_STR(c->listen, "[::1]:9000");
    T_CHECK_STR(c->listen_host, "::1");
    T_CHECK_INT(c->listen_port, 9000);
    T_CHECK_INT(conf_set(c, "listen", "localhost:80", err, sizeof err), 0);
    T_CHECK_STR(c->listen_host, "localhost");
    T_CHECK_INT(conf_set(c, "listen", "0.0.0.0:65535", err, sizeof err), 0);
    T_CHECK_INT(c->listen_port, 65535);
    T_CHECK_INT(conf_set(c, "listen", "127.0.0.1", err, sizeof err), -1);
    T_CHECK_STR(err, "expected HOST:PORT");
    T_CHECK_INT(conf_set(c, "listen", "::1:80", err, sizeof err), -1);
    T_CHECK_STR(err, "an IPv6 address must be written in brackets, as in [::1]:8080");
    /* Port 0: the system picks a free port (tests read it from the startup log). */
    T_CHECK_INT(conf_set(c, "listen", "127.0.0.1:0", err, sizeof err), 0);
    T_CHECK_INT(c->listen_port, 0);
    T_CHECK_INT(conf_set(c, "listen", "127.0.0.1:65536", err, sizeof err), -1);
    T_CHECK_STR(err, "port must be a number from 0 to 65535");
    const char *bad[] = {"127.0.0.1:65536", "[::1]", "[::1]80",  "[zz]:80",
                         "300.1.1.1:80",    ":80",   "host:abc", "host:+80",
                         "bad host:80",     "-x:80"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        T_CHECK_INT(conf_set(c, "listen", bad[i], err, sizeof err), -1);
    T_CHECK_STR(c->listen, "127.0.0.1:0"); /* failures leave the old value */
    T_CHECK_STR(c->listen_host, "127.0.0.1");
    conf_destroy(&c);
}

static void test_urls(void)
{
    struct conf *c = conf_create();
    char err[256];
    const char *up_ok[] = {"http://localhost:8000", "https://api.anthropic.com/",
                           "http://[::1]:1/v1", "HTTP://10.0.0.2", "http://u:p@host:9/base"};
    for (size_t i = 0; i < PC_ARRAY_LEN(up_ok); i++)
        T_CHECK_INT(conf_set(c, "upstream", up_ok[i], err, sizeof err), 0);
    T_CHECK_INT(c->upstream.n, 1 + PC_ARRAY_LEN(up_ok)); /* conf_set appends to a list */
    const char *up_bad[] = {"ftp://x",    "localhost:8000", "http://",       "http:///x",
                            "http://a:0", "http://a b",     "http://x/?q=1", "http://::1/"};
    for (size_t i = 0; i < PC_ARRAY_LEN(up_bad); i++)
        T_CHECK_INT(conf_set(c, "upstream", up_bad[i], err, sizeof err), -1);
    conf_set(c, "upstream", "ftp://x", err, sizeof err);
    T_CHECK_STR(err, "URL must start with http:// or https://");
    conf_set(c, "upstream", "http://:80", err, sizeof err);
    T_CHECK_STR(err, "invalid URL (missing host)");
    T_CHECK_INT(conf_set(c, "upstream", "", err, sizeof err), 0); /* "" empties the list */
    T_CHECK_INT(c->upstream.n, 0);

    const char *redis_ok[] = {"redis://127.0.0.1:6379/0",
                              "redis://localhost",
                              "redis://:s3cret@cache.internal:6380/2",
                              "redis://alice:s3cret@h/1",
                              "redis://alice@h", /* redis-password may complete it */
                              "redis://h/",
                              "redis://[::1]:6379",
                              "unix://:pw@/run/r.sock",
                              "sentinel://10.0.0.1,10.0.0.2:26380/mymaster/1",
                              "sentinel://s1/m?sentinel-password=x",
                              "unix:/run/redis.sock"};
    for (size_t i = 0; i < PC_ARRAY_LEN(redis_ok); i++)
        T_CHECK_INT(conf_set(c, "redis", redis_ok[i], err, sizeof err), 0);
    const char *redis_bad[] = {
        "http://x",      "redis://",      "redis://h:99999",    "redis://h/x",
        "unix:",         "unix:rel/path", "rediss://h",         "redis://:@h",
        "redis://h:1:2", "sentinel://h1", "sentinel://h/m?db=2"};
    for (size_t i = 0; i < PC_ARRAY_LEN(redis_bad); i++)
        T_CHECK_INT(conf_set(c, "redis", redis_bad[i], err, sizeof err), -1);
    conf_set(c, "redis", "redis://user:topsecret@h:0", err, sizeof err);
    T_CHECK(strstr(err, "topsecret") == NULL); /* messages never echo a password */
    T_CHECK_STR(c->redis, "unix:/run/redis.sock");

    T_CHECK_INT(conf_set(c, "shared-namespaces", "docs.v1_public-2", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "shared-namespaces", "has space", err, sizeof err), -1);
    T_CHECK_INT(conf_set(c, "shared-namespaces", "a/b", err, sizeof err), -1);
    char long_name[80];
    memset(long_name, 'n', 65);
    long_name[65] = '\0';
    T_CHECK_INT(conf_set(c, "shared-namespaces", long_name, err, sizeof err), -1);
    long_name[64] = '\0';
    T_CHECK_INT(conf_set(c, "shared-namespaces", long_name, err, sizeof err), 0);
    T_CHECK_INT(c->shared_namespaces.n, 2);

    T_CHECK_INT(conf_set(c, "embedder-url", "http://tei:80/v1/embeddings?x=1", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "embedder-url", "tei:80", err, sizeof err), -1);
    T_CHECK_INT(conf_set(c, "embedder-url", "", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "no-such-key", "1", err, sizeof err), -1);
    T_CHECK_STR(err, "unknown key");
    conf_destroy(&c);
}

static void test_file_parsing(void)
{
    const char *text = "# a comment\n"
                       "\n"
                       "   # an indented comment\n"
                       "listen 0.0.0.0:9000\n"
                       "\tworkers\t3\r\n"
                       "upstream http://a:8000 http://b:8000\n"
                       "upstream http://c:8000\n"
                       "embedder-model \"a \\\"b\\\" \\\\ c\\nd\"\n"
                       "log-file \"/tmp/with space.log\"\n"
                       "pricing \"\"\n"
                       "shared-namespaces docs faq\n"
                       "cache-ttl 60\n"
                       "cache-ttl 120\n"
                       "semantic on\n"
                       "embedder hash\n"
                       "max-body-size 1m\n"
                       "Cache-Max-TTL 600\n";
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char path[32];
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK_STR(pc_buf_cstr(&errs), "");
    T_CHECK_STR(c->listen_host, "0.0.0.0");
    T_CHECK_INT(c->listen_port, 9000);
    T_CHECK_INT(c->workers, 3);
    T_CHECK_INT(c->upstream.n, 3); /* the file's list replaces the default one */
    T_CHECK_STR(c->upstream.v[0], "http://a:8000");
    T_CHECK_STR(c->upstream.v[1], "http://b:8000");
    T_CHECK_STR(c->upstream.v[2], "http://c:8000");
    T_CHECK_STR(c->embedder_model, "a \"b\" \\ c\nd"); /* (a secret may not hold \n) */
    T_CHECK_STR(c->log_file, "/tmp/with space.log");
    T_CHECK_STR(c->pricing, "");
    T_CHECK_INT(c->shared_namespaces.n, 2);
    T_CHECK_STR(c->shared_namespaces.v[1], "faq");
    T_CHECK_INT(c->cache_ttl, 120); /* the last occurrence wins */
    T_CHECK_INT(c->cache_max_ttl, 600);
    T_CHECK(c->semantic);
    T_CHECK_INT(c->embedder, embed_id("hash"));
    T_CHECK_INT(c->max_body_size, 1 << 20);
    pc_buf_free(&errs);
    conf_destroy(&c);
}

static void test_file_errors(void)
{
    const char *text = "listen 127.0.0.1:8081\n"       /* 1 */
                       "nosuchkey 1\n"                 /* 2 */
                       "listen\n"                      /* 3 */
                       "cache-ttl 60 70\n"             /* 4 */
                       "admin-token \"abc\n"           /* 5 */
                       "# fine\n"                      /* 6 */
                       "cache-ttl abc\n"               /* 7 */
                       "workers 300\n"                 /* 8 */
                       "upstream http://ok ftp://no\n" /* 9 */
                       "log-file \"a\"b\n"             /* 10 */
                       "semantic-threshold 2\n"        /* 11 */
                       "embedder \"x\\q\"\n";          /* 12 */
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char path[32];
    int n = load_text(c, text, 0, NULL, &errs, path);
    T_CHECK_INT(n, 10);
    T_CHECK(has_line(&errs, at(path, 2, "nosuchkey: unknown key")));
    T_CHECK(has_line(&errs, at(path, 3, "listen: missing value")));
    T_CHECK(has_line(
        &errs, at(path, 4, "cache-ttl: expected one value, got 2 (quote a value with spaces)")));
    T_CHECK(has_line(&errs, at(path, 5, "admin-token: unterminated quoted value")));
    T_CHECK(has_line(&errs, at(path, 7, "cache-ttl: \"abc\" is not an integer")));
    T_CHECK(has_line(&errs, at(path, 8, "workers: 300 is out of range (0..256)")));
    T_CHECK(has_line(&errs, at(path, 9, "upstream: URL must start with http:// or https://")));
    T_CHECK(has_line(&errs, at(path, 10,
                               "log-file: a closing quote must be followed by a space "
                               "or the end of the line")));
    T_CHECK(has_line(&errs, at(path, 11, "semantic-threshold: 2 is out of range (0..1)")));
    T_CHECK(has_line(&errs, at(path, 12,
                               "embedder: unknown escape in quoted value (use \\\" \\\\ "
                               "or \\n)")));
    /* every error is one line */
    size_t lines = 0;
    for (size_t i = 0; i < errs.len; i++)
        lines += errs.data[i] == '\n';
    T_CHECK_INT(lines, 10);
    T_CHECK_STR(c->listen, "127.0.0.1:8081"); /* valid lines still apply */
    T_CHECK_INT(c->upstream.n, 1);
    T_CHECK_STR(c->upstream.v[0], "http://ok");
    pc_buf_free(&errs);
    conf_destroy(&c);
}

static void test_missing_file(void)
{
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    T_CHECK_INT(conf_load(c, "/nonexistent/pc.conf", 0, NULL, &errs), 1);
    T_CHECK_STR(pc_buf_cstr(&errs),
                "/nonexistent/pc.conf: cannot read: No such file or directory\n");
    T_CHECK_INT(conf_load(c, "/nonexistent/pc.conf", 0, NULL, NULL), 1); /* errs is optional */
    pc_buf_free(&errs);
    conf_destroy(&c);
}

static void test_cmdline_overrides_file(void)
{
    const char *text = "listen 127.0.0.1:8081\n"
                       "upstream http://file-a http://file-b\n"
                       "shared-namespaces x y\n"
                       "cache-ttl 100\n"
                       "semantic no\n"
                       "coalesce yes\n";
    char *argv[] = {"--listen",     "127.0.0.1:9000",      "--upstream",
                    "http://cli-a", "--cache-ttl=200",     "--semantic",
                    "--upstream",   "http://cli-b",        "--coalesce",
                    "no",           "--redis-auto-migrate"};
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char path[32];
    T_CHECK_INT(load_text(c, text, (int)PC_ARRAY_LEN(argv), argv, &errs, path), 0);
    T_CHECK_STR(pc_buf_cstr(&errs), "");
    T_CHECK_STR(c->listen, "127.0.0.1:9000");
    T_CHECK_INT(c->listen_port, 9000);
    T_CHECK_INT(c->upstream.n, 2); /* replaced, and the two --upstream accumulate */
    T_CHECK_STR(c->upstream.v[0], "http://cli-a");
    T_CHECK_STR(c->upstream.v[1], "http://cli-b");
    T_CHECK_INT(c->shared_namespaces.n, 2); /* not on the command line: the file's stays */
    T_CHECK_INT(c->cache_ttl, 200);
    T_CHECK(c->semantic);           /* bare flag followed by another option */
    T_CHECK(!c->coalesce);          /* flag followed by a value */
    T_CHECK(c->redis_auto_migrate); /* bare flag at the end */
    pc_buf_free(&errs);
    conf_destroy(&c);
}

static void test_cmdline_errors(void)
{
    char *argv[] = {"--nope", "x",          "stray", "--cache-ttl",
                    "abc",    "--semantic", "maybe", "--shared-namespaces",
                    "",       "--listen"};
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    int n = conf_load(c, NULL, (int)PC_ARRAY_LEN(argv), argv, &errs);
    T_CHECK_INT(n, 5);
    T_CHECK(has_line(&errs, "command line: --nope: unknown option\n"));
    T_CHECK(has_line(&errs, "command line: \"stray\": unexpected argument (options are "
                            "--KEY VALUE)\n"));
    T_CHECK(has_line(&errs, "command line: --cache-ttl: \"abc\" is not an integer\n"));
    T_CHECK(has_line(&errs, "command line: --semantic: \"maybe\" is not yes or no\n"));
    T_CHECK(has_line(&errs, "command line: --listen: missing value\n"));
    T_CHECK_INT(c->shared_namespaces.n, 0); /* "" gives an empty list */
    pc_buf_free(&errs);
    conf_destroy(&c);
}

static void test_cross_checks(void)
{
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char path[32];
    char *no_upstream[] = {"--upstream", ""};
    T_CHECK_INT(conf_load(c, NULL, 2, no_upstream, &errs), 1);
    T_CHECK_STR(pc_buf_cstr(&errs),
                "command line: --upstream: at least one upstream URL is needed\n");
    conf_destroy(&c);

    /* blamed on the later of the two keys */
    c = conf_create();
    pc_buf_reset(&errs);
    T_CHECK_INT(load_text(c, "cache-ttl 100\n\ncache-max-ttl 50\n", 0, NULL, &errs, path), 1);
    T_CHECK(has_line(&errs, at(path, 3,
                               "cache-max-ttl: cache-max-ttl (50) must be at least "
                               "cache-ttl (100)")));
    conf_destroy(&c);
    c = conf_create();
    pc_buf_reset(&errs);
    T_CHECK_INT(load_text(c, "# x\ncache-ttl 3000000\n", 0, NULL, &errs, path), 1);
    T_CHECK(has_line(&errs, at(path, 2,
                               "cache-ttl: cache-max-ttl (2592000) must be at least "
                               "cache-ttl (3000000)")));
    conf_destroy(&c);

    c = conf_create();
    pc_buf_reset(&errs);
    char *emb[] = {"--semantic", "--embedder", "openai"};
    T_CHECK_INT(conf_load(c, NULL, 3, emb, &errs), 1);
    T_CHECK_STR(pc_buf_cstr(&errs), "command line: --embedder: embedder openai needs embedder-url "
                                    "while semantic is yes\n");
    conf_destroy(&c);
    c = conf_create();
    char *emb_ok[] = {"--embedder", "openai"}; /* fine while semantic is no */
    T_CHECK_INT(conf_load(c, NULL, 2, emb_ok, NULL), 0);
    conf_destroy(&c);
    pc_buf_free(&errs);
}

static void test_semantic_guards(void)
{
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char *two[] = {"--semantic-guards", "numbers", "--semantic-guards", "Dates"};
    T_CHECK_INT(conf_load(c, NULL, 4, two, &errs), 0);
    T_CHECK_INT(guard_mask(c->semantic_guards.v, c->semantic_guards.n),
                GUARD_MASK(GUARD_NUMBERS) | GUARD_MASK(GUARD_DATES));
    char *none[] = {"--semantic-guards", "none"};
    T_CHECK_INT(conf_load(c, NULL, 2, none, &errs), 0);
    T_CHECK_INT(guard_mask(c->semantic_guards.v, c->semantic_guards.n), 0);
    conf_destroy(&c);

    c = conf_create();
    char *bad[] = {"--semantic-guards", "numbrs"};
    T_CHECK_INT(conf_load(c, NULL, 2, bad, &errs), 1);
    T_CHECK(strstr(pc_buf_cstr(&errs), "--semantic-guards: unknown guard \"numbrs\"") != NULL);
    char *invalid[] = {"all", "numbers"}; /* a list the load refuses: guard_mask keeps all */
    T_CHECK_INT(guard_mask(invalid, 2), GUARD_ALL);
    conf_destroy(&c);

    c = conf_create();
    pc_buf_reset(&errs);
    char *mixed[] = {"--semantic-guards", "all", "--semantic-guards", "numbers"};
    T_CHECK_INT(conf_load(c, NULL, 4, mixed, &errs), 1);
    T_CHECK_STR(pc_buf_cstr(&errs),
                "command line: --semantic-guards: all and none must stand alone\n");
    conf_destroy(&c);
    pc_buf_free(&errs);
}

static void test_workers_resolved(void)
{
    struct conf *c = conf_create();
    char *zero[] = {"--workers", "0"};
    T_CHECK_INT(conf_load(c, NULL, 2, zero, NULL), 0);
    T_CHECK(c->workers >= 1);
    char *three[] = {"--workers", "3"};
    T_CHECK_INT(conf_load(c, NULL, 2, three, NULL), 0);
    T_CHECK_INT(c->workers, 3);
    conf_destroy(&c);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    struct pc_buf b = PC_BUF_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        pc_buf_append(&b, chunk, n);
    fclose(f);
    return pc_buf_cstr(&b);
}

/*
 * The committed sample must be exactly conf_write_sample()'s output. After
 * changing the key table, regenerate it from the repository root with:
 *
 *     build/promptcache --sample-config > conf/promptcache.conf
 */
static void test_sample_in_sync(void)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_sample(&b);
    char *committed = read_file("conf/promptcache.conf");
    const char *want = pc_buf_cstr(&b);
    T_CHECK(committed != NULL);
    T_CHECK(committed != NULL && strcmp(committed, want) == 0);
    if (committed != NULL && strcmp(committed, want) != 0) {
        int line = 1;
        size_t i = 0;
        for (; committed[i] == want[i]; i++)
            line += want[i] == '\n';
        fprintf(stderr,
                "    conf/promptcache.conf differs from conf_write_sample() at line %d;\n"
                "    regenerate: build/promptcache --sample-config > conf/promptcache.conf\n",
                line);
    }
    free(committed);
    pc_buf_free(&b);
}

/* Loading the sample gives no error and exactly the defaults. */
static void test_sample_loads_to_defaults(void)
{
    struct pc_buf sample = PC_BUF_INIT, errs = PC_BUF_INIT;
    conf_write_sample(&sample);
    struct conf *d = conf_create(), *c = conf_create();
    char path[32];
    T_CHECK_INT(load_text(c, pc_buf_cstr(&sample), 0, NULL, &errs, path), 0);
    T_CHECK_STR(pc_buf_cstr(&errs), "");
    char *want = effective(d), *got = effective(c);
    T_CHECK_STR(got, want);
    T_CHECK_STR(c->listen_host, d->listen_host);
    T_CHECK_INT(c->workers, d->workers);
    free(want);
    free(got);
    conf_destroy(&c);
    c = conf_create();
    T_CHECK_INT(conf_load(c, "conf/promptcache.conf", 0, NULL, NULL), 0);
    conf_destroy(&c);
    conf_destroy(&d);
    pc_buf_free(&sample);
    pc_buf_free(&errs);
}

static void test_sample_shape(void)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_sample(&b);
    const char *s = pc_buf_cstr(&b);
    T_CHECK(strstr(s, "\nlisten 127.0.0.1:8080\n") != NULL);
    T_CHECK(strstr(s, "\nupstream https://api.openai.com\n") != NULL);
    T_CHECK(strstr(s, "\n# upstream-key sk-...\n") != NULL);
    T_CHECK(strstr(s, "\n# admin-token \"\"\n") != NULL);
    T_CHECK(strstr(s, "promptcache [CONFIG-FILE] [--key value ...]") != NULL);
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, "\n");
        if (*p == '#' && n > 78)
            fprintf(stderr, "    long comment line: %.*s\n", (int)n, p);
        T_CHECK(*p != '#' || n <= 78);
        p += n + (p[n] == '\n');
    }
    pc_buf_free(&b);
}

static void test_effective(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "upstream-key", "sk-live-123", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "admin-token", "adm1n", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "redis", "redis://:hunter2@db:6379/1", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "upstream", "http://u:pw22@h:8000", err, sizeof err), 0);
    char *e = effective(c);
    T_CHECK(strstr(e, "\nupstream-key ***\n") != NULL);
    T_CHECK(strstr(e, "\nadmin-token ***\n") != NULL);
    T_CHECK(strstr(e, "\nredis redis://:***@db:6379/1\n") != NULL);
    T_CHECK(strstr(e, "\nupstream https://api.openai.com\nupstream http://u:***@h:8000\n") != NULL);
    T_CHECK(strstr(e, "sk-live") == NULL && strstr(e, "adm1n") == NULL);
    T_CHECK(strstr(e, "hunter2") == NULL && strstr(e, "pw22") == NULL);
    T_CHECK(strstr(e, "\nmax-body-size 16m\n") != NULL);
    T_CHECK(strstr(e, "\nsemantic-threshold auto\n") != NULL);
    T_CHECK(strstr(e, "\nsemantic-guards all\n") != NULL);
    T_CHECK(strstr(e, "\nshared-namespaces \"\"\n") != NULL);
    free(e);
    conf_destroy(&c);
}

/* The effective dump reads back as the same configuration. */
static void test_effective_roundtrip(void)
{
    char *argv[] = {"--log-file",
                    "/tmp/a b\"c.log",
                    "--upstream",
                    "http://x:1",
                    "--upstream",
                    "http://y:2",
                    "--shared-namespaces",
                    "n1",
                    "--max-body-size",
                    "5000",
                    "--semantic-threshold",
                    "0.123456789",
                    "--embedder-model",
                    "#hash",
                    "--upstream-type",
                    "vllm",
                    "--workers",
                    "7"};
    struct conf *c = conf_create(), *r = conf_create();
    T_CHECK_INT(conf_load(c, NULL, (int)PC_ARRAY_LEN(argv), argv, NULL), 0);
    char *e = effective(c), path[32];
    struct pc_buf errs = PC_BUF_INIT;
    T_CHECK_INT(load_text(r, e, 0, NULL, &errs, path), 0);
    T_CHECK_STR(pc_buf_cstr(&errs), "");
    char *e2 = effective(r);
    T_CHECK_STR(e2, e);
    T_CHECK_STR(r->log_file, "/tmp/a b\"c.log");
    T_CHECK(r->semantic_threshold == 0.123456789);
    free(e);
    free(e2);
    pc_buf_free(&errs);
    conf_destroy(&c);
    conf_destroy(&r);
}

static void test_help_and_keys(void)
{
    struct pc_buf b = PC_BUF_INIT;
    conf_write_help(&b);
    const char *h = pc_buf_cstr(&b);
    T_CHECK(strstr(h, "Usage: promptcache [CONFIG-FILE] [--KEY VALUE ...]") != NULL);
    T_CHECK(strstr(h, "\n  --listen HOST:PORT ") != NULL);
    T_CHECK(strstr(h, "(default: 127.0.0.1:8080)\n") != NULL);
    T_CHECK(strstr(h, "\n  --upstream-type openai|anthropic|vllm|sglang ") != NULL);
    /* every key in the effective dump has a help line and is a known key */
    struct conf *c = conf_create();
    char *e = effective(c);
    for (char *line = strtok(e, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char key[64], opt[80];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(line, " "), line);
        snprintf(opt, sizeof opt, "\n  --%s ", key);
        T_CHECK(conf_has_key(key));
        T_CHECK(strstr(h, opt) != NULL);
    }
    T_CHECK(!conf_has_key("nope"));
    T_CHECK(!conf_has_key(""));
    T_CHECK(!conf_has_key(NULL));
    free(e);
    conf_destroy(&c);
    pc_buf_free(&b);
}

/* ---- secrets: files, environment, precedence ------------------------------ */

/* A secret file with the given text and mode; path receives its name. */
static void secret_file(const char *text, mode_t mode, char path[32])
{
    write_temp(text, path);
    chmod(path, mode);
}

static void clear_secret_env(void)
{
    static const char *const vars[] = {
        "PROMPTCACHE_UPSTREAM_KEY",
        "PROMPTCACHE_UPSTREAM_KEY_FILE",
        "PROMPTCACHE_ADMIN_TOKEN",
        "PROMPTCACHE_ADMIN_TOKEN_FILE",
        "PROMPTCACHE_REDIS_PASSWORD",
        "PROMPTCACHE_REDIS_PASSWORD_FILE",
        "PROMPTCACHE_REDIS_SENTINEL_PASSWORD",
        "PROMPTCACHE_REDIS_SENTINEL_PASSWORD_FILE",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(vars); i++)
        unsetenv(vars[i]);
}

static void test_secret_file(void)
{
    char key[32], text[256];
    secret_file("sk-from-file\r\n\n", 0600, key);
    snprintf(text, sizeof text, "upstream-key-file %s\n", key);
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT;
    char path[32];
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK_STR(c->upstream_key, "sk-from-file"); /* trailing CR/LF stripped */
    T_CHECK_STR(conf_warnings(c), "");            /* 0600: no warning */
    conf_destroy(&c);
    /* group/world access: a warning naming the file and its mode, never the secret */
    chmod(key, 0644);
    c = conf_create();
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK(strstr(conf_warnings(c), "mode 0644") != NULL);
    T_CHECK(strstr(conf_warnings(c), key) != NULL);
    T_CHECK(strstr(conf_warnings(c), "sk-from-file") == NULL);
    conf_destroy(&c);
    unlink(key);
    pc_buf_free(&errs);
}

static void test_secret_file_errors(void)
{
    char empty[32], lines[32], big[32], opt[80];
    secret_file("\n", 0600, empty);
    secret_file("line one\nline two\n", 0600, lines);
    char *huge = pc_calloc(SECRET_FILE_MAX + 2, 1);
    memset(huge, 'k', SECRET_FILE_MAX + 1);
    secret_file(huge, 0600, big);
    free(huge);
    const struct {
        const char *path, *want;
    } cases[] = {
        {"/nonexistent/key", "cannot open /nonexistent/key: No such file"},
        {empty, "is empty"},
        {lines, "line break inside the secret"},
        {big, "too large"},
        {"/tmp", "not a regular file"},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        struct conf *c = conf_create();
        struct pc_buf errs = PC_BUF_INIT;
        snprintf(opt, sizeof opt, "--admin-token-file=%s", cases[i].path);
        char *argv[] = {opt};
        T_CHECK_INT(conf_load(c, NULL, 1, argv, &errs), 1);
        T_CHECK(strstr(pc_buf_cstr(&errs), "command line: --admin-token-file: ") != NULL);
        if (strstr(pc_buf_cstr(&errs), cases[i].want) == NULL)
            fprintf(stderr, "    want \"%s\" in: %s", cases[i].want, pc_buf_cstr(&errs));
        T_CHECK(strstr(pc_buf_cstr(&errs), cases[i].want) != NULL);
        T_CHECK(strstr(pc_buf_cstr(&errs), "line one") == NULL); /* content never shown */
        pc_buf_free(&errs);
        conf_destroy(&c);
    }
    unlink(empty);
    unlink(lines);
    unlink(big);
}

/* Command line > environment > config file; KEY and KEY-file in one source: an error. */
static void test_secret_precedence(void)
{
    char kfile[32], envfile[32], text[256], path[32];
    secret_file("from-key-file\n", 0600, kfile);
    secret_file("from-env-file\n", 0600, envfile);
    snprintf(text, sizeof text, "upstream-key from-config\nadmin-token-file %s\n", kfile);
    struct pc_buf errs = PC_BUF_INIT;
    clear_secret_env();

    struct conf *c = conf_create();
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK_STR(c->upstream_key, "from-config");
    T_CHECK_STR(c->admin_token, "from-key-file");
    conf_destroy(&c);

    setenv("PROMPTCACHE_UPSTREAM_KEY", "from-env", 1);
    setenv("PROMPTCACHE_ADMIN_TOKEN_FILE", envfile, 1);
    c = conf_create();
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK_STR(c->upstream_key, "from-env");
    T_CHECK_STR(c->admin_token, "from-env-file");
    conf_destroy(&c);

    char *argv[] = {"--upstream-key-file", kfile, "--admin-token", "from-cmdline"};
    c = conf_create();
    T_CHECK_INT(load_text(c, text, 4, argv, &errs, path), 0);
    T_CHECK_STR(c->upstream_key, "from-key-file");
    T_CHECK_STR(c->admin_token, "from-cmdline");
    T_CHECK(strstr(conf_warnings(c), "command line: --admin-token: a secret on the command line") !=
            NULL);
    conf_destroy(&c);

    /* an empty variable counts as unset */
    setenv("PROMPTCACHE_UPSTREAM_KEY", "", 1);
    c = conf_create();
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 0);
    T_CHECK_STR(c->upstream_key, "from-config");
    conf_destroy(&c);

    /* both forms in one source */
    setenv("PROMPTCACHE_ADMIN_TOKEN", "x", 1);
    c = conf_create();
    T_CHECK_INT(load_text(c, "", 0, NULL, &errs, path), 1);
    T_CHECK(has_line(&errs, "environment: PROMPTCACHE_ADMIN_TOKEN_FILE: give admin-token or "
                            "admin-token-file, not both\n"));
    conf_destroy(&c);
    clear_secret_env();
    pc_buf_reset(&errs);
    snprintf(text, sizeof text, "admin-token a\nadmin-token-file %s\n", kfile);
    c = conf_create();
    T_CHECK_INT(load_text(c, text, 0, NULL, &errs, path), 1);
    T_CHECK(has_line(&errs, at(path, 2,
                               "admin-token-file: give admin-token or admin-token-file, "
                               "not both")));
    conf_destroy(&c);
    /* a secret never holds a control character, whatever its source */
    c = conf_create();
    char *ctl[] = {"--upstream-key", "a\nb"};
    pc_buf_reset(&errs);
    T_CHECK_INT(conf_load(c, NULL, 2, ctl, &errs), 1);
    T_CHECK(strstr(pc_buf_cstr(&errs), "a\nb") == NULL);
    conf_destroy(&c);
    unlink(kfile);
    unlink(envfile);
    pc_buf_free(&errs);
}

static void test_redis_password(void)
{
    struct pc_buf errs = PC_BUF_INIT;
    char pw[32], opt[64];
    clear_secret_env();
    secret_file("p@ss w/rd:%\n", 0600, pw);
    snprintf(opt, sizeof opt, "--redis-password-file=%s", pw);
    char *argv[] = {"--redis", "redis://10.0.0.2:6380/3", opt};
    struct conf *c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 3, argv, &errs), 0);
    T_CHECK_STR(c->redis, "redis://:p%40ss%20w%2Frd%3A%25@10.0.0.2:6380/3");
    char *e = effective(c);
    T_CHECK(strstr(e, "\nredis redis://:***@10.0.0.2:6380/3\n") != NULL);
    T_CHECK(strstr(e, "\nredis-password ***\n") != NULL);
    T_CHECK(strstr(e, "p%40ss") == NULL && strstr(e, "p@ss") == NULL);
    free(e);
    conf_destroy(&c);

    setenv("PROMPTCACHE_REDIS_PASSWORD", "envpw", 1);
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 0, NULL, &errs), 0);
    T_CHECK_STR(c->redis, "redis://:envpw@127.0.0.1:6379/0");
    conf_destroy(&c);

    /* a unix socket takes a password too */
    char *unix_sock[] = {"--redis", "unix:/run/redis.sock"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 2, unix_sock, &errs), 0);
    T_CHECK_STR(c->redis, "unix://:envpw@/run/redis.sock");
    conf_destroy(&c);
    char *twice[] = {"--redis", "redis://:inurl@h:1/0"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 2, twice, &errs), 1);
    T_CHECK(strstr(pc_buf_cstr(&errs), "the redis URL gives the password already") != NULL);
    conf_destroy(&c);

    /* an ACL user: from redis-user, or in the URL with the password from elsewhere */
    char *user[] = {"--redis-user", "alice", "--redis", "redis://h:1/2"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 4, user, &errs), 0);
    T_CHECK_STR(c->redis, "redis://alice:envpw@h:1/2");
    e = effective(c);
    T_CHECK(strstr(e, "\nredis redis://alice:***@h:1/2\n") != NULL);
    free(e);
    conf_destroy(&c);
    char *url_user[] = {"--redis", "redis://bob@h"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 2, url_user, &errs), 0);
    T_CHECK_STR(c->redis, "redis://bob:envpw@h:6379/0");
    conf_destroy(&c);
    unsetenv("PROMPTCACHE_REDIS_PASSWORD");
    pc_buf_reset(&errs);
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 2, url_user, &errs), 1);
    T_CHECK(strstr(pc_buf_cstr(&errs), "a Redis user name needs a password") != NULL);
    conf_destroy(&c);
    char *user_twice[] = {"--redis", "redis://bob:pw@h", "--redis-user", "alice"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 4, user_twice, &errs), 1);
    T_CHECK(strstr(pc_buf_cstr(&errs), "the redis URL gives the user already") != NULL);
    conf_destroy(&c);
    clear_secret_env();
    unlink(pw);
    pc_buf_free(&errs);
}

/* sentinel://: the primary's credentials in the userinfo, the sentinels' in the query. */
static void test_redis_sentinel_auth(void)
{
    struct pc_buf errs = PC_BUF_INIT;
    clear_secret_env();
    setenv("PROMPTCACHE_REDIS_SENTINEL_PASSWORD", "s&pw", 1);
    setenv("PROMPTCACHE_REDIS_PASSWORD", "primary", 1);
    char *argv[] = {"--redis", "sentinel://10.0.0.1,10.0.0.2:26380/mymaster/1",
                    "--redis-sentinel-user", "mon"};
    struct conf *c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 4, argv, &errs), 0);
    T_CHECK_STR(c->redis, "sentinel://:primary@10.0.0.1:26379,10.0.0.2:26380/mymaster/1"
                          "?sentinel-user=mon&sentinel-password=s%26pw");
    char *e = effective(c);
    T_CHECK(strstr(e, "\nredis sentinel://:***@10.0.0.1:26379,10.0.0.2:26380/mymaster/1"
                      "?sentinel-user=mon&sentinel-password=***\n") != NULL);
    T_CHECK(strstr(e, "primary") == NULL && strstr(e, "s%26pw") == NULL);
    free(e);
    conf_destroy(&c);

    char *plain[] = {"--redis", "redis://h:1/0"};
    c = conf_create();
    T_CHECK_INT(conf_load(c, NULL, 2, plain, &errs), 1);
    T_CHECK(has_line(&errs, "environment: PROMPTCACHE_REDIS_SENTINEL_PASSWORD: the sentinels' "
                            "credentials need a sentinel:// redis URL\n"));
    conf_destroy(&c);
    clear_secret_env();

    /* a password in the query is hidden from ps as a userinfo password is */
    char a0[] = "--redis", a1[] = "sentinel://h/m?sentinel-password=topsecret";
    char *av[] = {a0, a1};
    conf_scrub_argv(2, av);
    T_CHECK(strstr(av[1], "topsecret") == NULL);
    T_CHECK(strncmp(av[1], "sentinel://h/m?sentinel-password=***", 36) == 0);
    pc_buf_free(&errs);
}

/* -T: every key once (lists: per value), secrets masked, each with its origin. */
static void test_sources(void)
{
    char key[32], path[32];
    clear_secret_env();
    secret_file("sk-hidden\n", 0600, key);
    setenv("PROMPTCACHE_UPSTREAM_KEY_FILE", key, 1);
    char *argv[] = {"--log-level", "debug"};
    struct conf *c = conf_create();
    struct pc_buf errs = PC_BUF_INIT, b = PC_BUF_INIT;
    T_CHECK_INT(load_text(c, "# one\ncache-ttl 60\n", 2, argv, &errs, path), 0);
    conf_write_sources(c, &b);
    const char *s = pc_buf_cstr(&b);
    char want[160];
    snprintf(want, sizeof want, "\ncache-ttl 60%*s# %s:2\n", 35, "", path);
    T_CHECK(strstr(s, want) != NULL);
    T_CHECK(strstr(s, "\nlog-level debug                                # command line\n") != NULL);
    snprintf(want, sizeof want, "# environment PROMPTCACHE_UPSTREAM_KEY_FILE (file %s)\n", key);
    T_CHECK(strstr(s, "\nupstream-key ***  ") != NULL && strstr(s, want) != NULL);
    T_CHECK(strstr(s, "\nlisten 127.0.0.1:8080                          # default\n") != NULL);
    T_CHECK(strstr(s, "sk-hidden") == NULL);
    pc_buf_free(&b);
    pc_buf_free(&errs);
    conf_destroy(&c);
    clear_secret_env();
    unlink(key);
}

/* Every key from PROMPTCACHE_<KEY>: command line > environment > file > default. */
static void test_env_every_key(void)
{
    char path[32];
    struct pc_buf errs = PC_BUF_INIT;
    const char *file = "cache-ttl 30\nupstream http://f:1\nsemantic no\n";
    setenv("PROMPTCACHE_CACHE_TTL", "60", 1);
    setenv("PROMPTCACHE_UPSTREAM", " http://a:1,http://b:2\thttp://c:3 ,", 1);
    setenv("PROMPTCACHE_SEMANTIC", "yes", 1);
    setenv("PROMPTCACHE_LISTEN", "127.0.0.1:9999", 1);
    struct conf *c = conf_create();
    T_CHECK_INT(load_text(c, file, 0, NULL, &errs, path), 0);
    T_CHECK_INT(c->cache_ttl, 60);
    T_CHECK_INT(c->upstream.n, 3); /* the variable's list replaces the file's */
    T_CHECK_STR(c->upstream.v[0], "http://a:1");
    T_CHECK_STR(c->upstream.v[2], "http://c:3");
    T_CHECK(c->semantic);
    T_CHECK_INT(c->listen_port, 9999);
    struct pc_buf b = PC_BUF_INIT;
    conf_write_sources(c, &b);
    T_CHECK(strstr(pc_buf_cstr(&b), "\ncache-ttl 60                                   # "
                                    "environment PROMPTCACHE_CACHE_TTL\n") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&b), "\nupstream http://b:2                            # "
                                    "environment PROMPTCACHE_UPSTREAM\n") != NULL);
    pc_buf_free(&b);
    conf_destroy(&c);

    char *argv[] = {"--cache-ttl", "90"};
    c = conf_create();
    T_CHECK_INT(load_text(c, file, 2, argv, &errs, path), 0);
    T_CHECK_INT(c->cache_ttl, 90);
    conf_destroy(&c);

    /* "" is unset; a bad value names the variable */
    setenv("PROMPTCACHE_CACHE_TTL", "", 1);
    setenv("PROMPTCACHE_REDIS_TIMEOUT", "soon", 1);
    c = conf_create();
    T_CHECK_INT(load_text(c, file, 0, NULL, &errs, path), 1);
    T_CHECK_INT(c->cache_ttl, 30);
    T_CHECK(
        has_line(&errs, "environment: PROMPTCACHE_REDIS_TIMEOUT: \"soon\" is not an integer\n"));
    conf_destroy(&c);
    unsetenv("PROMPTCACHE_CACHE_TTL");
    unsetenv("PROMPTCACHE_REDIS_TIMEOUT");
    unsetenv("PROMPTCACHE_UPSTREAM");
    unsetenv("PROMPTCACHE_SEMANTIC");
    unsetenv("PROMPTCACHE_LISTEN");
    pc_buf_free(&errs);
}

/* A misspelt key, option or variable is named with the closest real one. */
static void test_did_you_mean(void)
{
    char path[32];
    struct pc_buf errs = PC_BUF_INIT;
    struct conf *c = conf_create();
    char *argv[] = {"--uptream", "http://x", "--cache_ttl", "5", "--frobnicate", "1"};
    T_CHECK_INT(
        load_text(c, "semantic-treshold 0.9\nredis-pasword x\nzzz 1\n", 6, argv, &errs, path), 6);
    T_CHECK(has_line(&errs, at(path, 1,
                               "semantic-treshold: unknown key; did you mean "
                               "semantic-threshold?")));
    T_CHECK(
        has_line(&errs, at(path, 2, "redis-pasword: unknown key; did you mean redis-password?")));
    T_CHECK(has_line(&errs, at(path, 3, "zzz: unknown key")));
    T_CHECK(has_line(&errs, "command line: --uptream: unknown option; did you mean --upstream?\n"));
    T_CHECK(
        has_line(&errs, "command line: --cache_ttl: unknown option; did you mean --cache-ttl?\n"));
    T_CHECK(has_line(&errs, "command line: --frobnicate: unknown option\n"));
    conf_destroy(&c);

    pc_buf_reset(&errs);
    setenv("PROMPTCACHE_UPSTREM", "http://x", 1);
    setenv("PROMPTCACHE_ADMIN_TOKEN_FIL", "/x", 1);
    setenv("PROMPTCACHE_NOTHING_LIKE_IT", "1", 1);
    setenv("PROMPTCACHE_BIN", "/usr/bin/true", 1); /* the scripts' own: not reported */
    T_CHECK(conf_env_unknown(&errs) >= 3);
    T_CHECK(has_line(&errs, "environment: PROMPTCACHE_UPSTREM: not a configuration variable; "
                            "did you mean PROMPTCACHE_UPSTREAM?\n"));
    T_CHECK(has_line(&errs, "environment: PROMPTCACHE_ADMIN_TOKEN_FIL: not a configuration "
                            "variable; did you mean PROMPTCACHE_ADMIN_TOKEN_FILE?\n"));
    T_CHECK(has_line(&errs, "environment: PROMPTCACHE_NOTHING_LIKE_IT: not a configuration "
                            "variable\n"));
    T_CHECK(strstr(pc_buf_cstr(&errs), "PROMPTCACHE_BIN") == NULL);
    unsetenv("PROMPTCACHE_UPSTREM");
    unsetenv("PROMPTCACHE_ADMIN_TOKEN_FIL");
    unsetenv("PROMPTCACHE_NOTHING_LIKE_IT");
    unsetenv("PROMPTCACHE_BIN");
    pc_buf_free(&errs);
}

/* Reload: runtime keys are taken, the others only reported. */
static void test_merge_reload(void)
{
    char *a_argv[] = {"--cache-ttl", "100", "--admin-token", "old", "--listen", "127.0.0.1:1"};
    char *b_argv[] = {
        "--cache-ttl", "50",    "--admin-token",       "new", "--listen", "127.0.0.1:2",
        "--log-level", "debug", "--shared-namespaces", "pub"};
    struct conf *a = conf_create(), *b = conf_create();
    T_CHECK_INT(conf_load(a, NULL, 6, a_argv, NULL), 0);
    T_CHECK_INT(conf_load(b, NULL, 10, b_argv, NULL), 0);
    struct pc_buf applied = PC_BUF_INIT, restart = PC_BUF_INIT;
    struct conf *m = conf_merge_reload(a, b, &applied, &restart);
    T_CHECK(m != NULL);
    T_CHECK_INT(m->cache_ttl, 50);
    T_CHECK_STR(m->admin_token, "new");
    T_CHECK_INT(m->log_level, PC_LOG_DEBUG);
    T_CHECK_INT(m->shared_namespaces.n, 1);
    T_CHECK_STR(m->listen, "127.0.0.1:1"); /* restart-only: kept */
    T_CHECK_INT(m->listen_port, 1);
    T_CHECK_STR(pc_buf_cstr(&restart), "listen");
    const char *ap = pc_buf_cstr(&applied);
    T_CHECK(strstr(ap, "cache-ttl 100 -> 50") != NULL);
    T_CHECK(strstr(ap, "admin-token (secret) changed") != NULL);
    T_CHECK(strstr(ap, "log-level notice -> debug") != NULL);
    T_CHECK(strstr(ap, "old") == NULL && strstr(ap, "new") == NULL);
    /* nothing runtime-changeable differs: NULL */
    pc_buf_reset(&applied);
    pc_buf_reset(&restart);
    T_CHECK(conf_merge_reload(m, m, &applied, &restart) == NULL);
    T_CHECK_INT(restart.len, 0);
    /* a copy is independent of its source */
    struct conf *d = conf_dup(m);
    conf_destroy(&m);
    T_CHECK_STR(d->admin_token, "new");
    T_CHECK_STR(d->listen_host, "127.0.0.1");
    T_CHECK_STR(d->shared_namespaces.v[0], "pub");
    conf_destroy(&d);
    conf_destroy(&a);
    conf_destroy(&b);
    pc_buf_free(&applied);
    pc_buf_free(&restart);
}

/* conf_reload reads the same file and options again. */
static void test_reload_sources(void)
{
    char path[32];
    write_temp("cache-ttl 100\n", path);
    char *argv[] = {"--workers", "3"};
    struct conf *c = conf_create(), *n = NULL;
    struct pc_buf errs = PC_BUF_INIT;
    T_CHECK_INT(conf_load(c, path, 2, argv, &errs), 0);
    FILE *f = fopen(path, "w");
    fputs("cache-ttl 7\nworkers 9\n", f);
    fclose(f);
    T_CHECK_INT(conf_reload(c, &n, &errs), 0);
    T_CHECK(n != NULL && n->cache_ttl == 7 && n->workers == 3); /* the command line still wins */
    conf_destroy(&n);
    f = fopen(path, "w");
    fputs("cache-ttl soon\n", f);
    fclose(f);
    T_CHECK_INT(conf_reload(c, &n, &errs), 1);
    T_CHECK(n == NULL);
    T_CHECK(has_line(&errs, at(path, 1, "cache-ttl: \"soon\" is not an integer")));
    unlink(path);
    conf_destroy(&c);
    pc_buf_free(&errs);
}

static void test_scrub_argv(void)
{
    char a0[] = "--upstream-key", a1[] = "sk-secret-value", a2[] = "--admin-token=tok12345",
         a3[] = "--redis", a4[] = "redis://:hunter22@db:6379/0", a5[] = "--cache-ttl", a6[] = "60",
         a7[] = "--upstream-key-file", a8[] = "/run/key";
    char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
    conf_scrub_argv(9, argv);
    T_CHECK_STR(argv[1], "***");
    T_CHECK(memcmp(a1, "***\0\0\0\0\0\0\0\0\0\0\0\0", sizeof a1) == 0); /* the rest zeroed */
    T_CHECK_STR(argv[2], "--admin-token=***");
    T_CHECK_STR(argv[4], "redis://:***@db:6379/0");
    T_CHECK_STR(argv[6], "60");
    T_CHECK_STR(argv[8], "/run/key");
}

int main(void)
{
    T_CHECK_INT(server_add_conf_rules(), 0);
    T_RUN(test_defaults);
    T_RUN(test_bool_forms);
    T_RUN(test_size_forms);
    T_RUN(test_number_forms);
    T_RUN(test_enum_forms);
    T_RUN(test_listen);
    T_RUN(test_urls);
    T_RUN(test_file_parsing);
    T_RUN(test_file_errors);
    T_RUN(test_missing_file);
    T_RUN(test_cmdline_overrides_file);
    T_RUN(test_cmdline_errors);
    T_RUN(test_cross_checks);
    T_RUN(test_semantic_guards);
    T_RUN(test_workers_resolved);
    T_RUN(test_sample_in_sync);
    T_RUN(test_sample_loads_to_defaults);
    T_RUN(test_sample_shape);
    T_RUN(test_effective);
    T_RUN(test_effective_roundtrip);
    T_RUN(test_help_and_keys);
    T_RUN(test_secret_file);
    T_RUN(test_secret_file_errors);
    T_RUN(test_secret_precedence);
    T_RUN(test_redis_password);
    T_RUN(test_redis_sentinel_auth);
    T_RUN(test_sources);
    T_RUN(test_env_every_key);
    T_RUN(test_did_you_mean);
    T_RUN(test_merge_reload);
    T_RUN(test_reload_sources);
    T_RUN(test_scrub_argv);
    T_DONE();
}
