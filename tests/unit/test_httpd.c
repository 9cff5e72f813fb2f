/*
 * test_httpd.c - the HTTP server: the pure head parser, then the server over
 * loopback TCP. The event loop runs on a background thread; the test thread
 * is the client (blocking sockets, with a receive timeout only as a safety
 * net) and runs server-side actions on the loop thread through run_on_loop().
 * Waits are on conditions, never on sleeps.
 */
#include "pc_httpd.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_util.h"
#include "t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#if defined(__SANITIZE_ADDRESS__)
/* The ASan runtime's allocator statistics (sanitizer/allocator_interface.h). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#define WAIT_SECONDS 10
#define BIG_CHUNK    (4u * 1024 * 1024)
#define FLOOD_CHUNK  (32u * 1024 * 1024)
#define SMALL_CHUNK  (96u * 1024) /* over the drain mark, under what loopback takes at once */

/* ------------------------------------------------------------------------ */
/* Parser                                                                    */

static long parse(const char *s, struct httpd_head *hd, struct httpd_header_span *spans, size_t cap)
{
    memset(hd, 0, sizeof(*hd));
    hd->headers = spans;
    hd->max_headers = cap;
    return httpd_parse_head(s, strlen(s), hd);
}

static long parse_str(const char *s)
{
    struct httpd_head hd;
    struct httpd_header_span spans[16];
    return parse(s, &hd, spans, 16);
}

static void test_parse_valid(void)
{
    struct httpd_head hd;
    struct httpd_header_span sp[8];
    const char *req = "POST /v1/chat?x=1 HTTP/1.1\r\nHost: a\r\nX-Pad:  \t v a l \t \r\n"
                      "Empty:\r\nContent-Length: 5\r\n\r\nhello";
    long n = parse(req, &hd, sp, 8);
    T_CHECK_INT(n, (long)strlen(req) - 5);
    T_CHECK_INT(hd.method_len, 4);
    T_CHECK(memcmp(hd.method, "POST", 4) == 0);
    T_CHECK_INT(hd.target_len, strlen("/v1/chat?x=1"));
    T_CHECK_INT(hd.minor_version, 1);
    T_CHECK_INT(hd.nheaders, 4);
    T_CHECK(hd.headers[1].value_len == 5 && memcmp(hd.headers[1].value, "v a l", 5) == 0);
    T_CHECK_INT(hd.headers[2].value_len, 0);

    /* LF-only lines, leading blank lines, HTTP/1.0. */
    T_CHECK_INT(parse_str("\r\n\nGET / HTTP/1.0\nA: b\n\n"), 24);
    T_CHECK_INT(parse(("GET / HTTP/1.0\r\n\r\n"), &hd, sp, 8), 18);
    T_CHECK_INT(hd.minor_version, 0);
    /* Pipelined: only the first head is consumed. */
    T_CHECK_INT(parse_str("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n"), 19);
    /* Identical repeated Content-Length is fine. */
    T_CHECK(parse_str("PUT / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n") > 0);
    T_CHECK(parse_str("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n") > 0);
    T_CHECK(parse_str("GET /y?z HTTP/1.1\r\nA: \x80\xff\r\n\r\n") > 0);
    /* Origin-form targets (appended to an upstream URL); the absolute form is taken as its
     * path, its scheme and authority dropped (RFC 9112 section 3.2.2: a server must take it). */
    T_CHECK_INT(parse_str("GET http://x/y?q HTTP/1.1\r\n\r\n"), 29);
    T_CHECK_INT(parse(("GET HTTPS://api.example:443/v1/models HTTP/1.1\r\n\r\n"), &hd, sp, 8), 50);
    T_CHECK(hd.target_len == 10 && memcmp(hd.target, "/v1/models", 10) == 0);
    T_CHECK_INT(parse_str("GET http://x HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET http:///y HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET http://x?y/z HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET http://x#y/z HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET ftp://x/y HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET http:/x/y HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET @evil.example/x HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("GET .evil.example/x HTTP/1.1\r\n\r\n"), -400);
    /* The asterisk form for OPTIONS alone (httpd answers it itself). */
    T_CHECK_INT(parse_str("OPTIONS * HTTP/1.1\r\n\r\n"), 22);
    T_CHECK_INT(parse_str("GET * HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("POST * HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("options * HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("OPTIONS *x HTTP/1.1\r\n\r\n"), -400);
    T_CHECK_INT(parse_str("OPTIONS *?x HTTP/1.1\r\n\r\n"), -400);
}

/*
 * A dot segment in the path: the upstream (or a CDN in front of it) removes it after the proxy
 * appended the target to its base URL, so "/../x" reached a path outside the base URL's path
 * with upstream-key's credential. Refused, however it is spelled; the same bytes elsewhere pass.
 */
static void test_parse_dot_segments(void)
{
    static const char *const refused[] = {
        "/..",      "/../x",     "/.",        "/./v1/models", "/v1/..",        "/v1/../../x",
        "/a/./b",   "/%2e%2e/x", "/%2E%2e/x", "/.%2e/x",      "/%2e/x",        "/a\\..\\b",
        "/a/..\\b", "/..?q=1",   "/..#f",     "/a//../b",     "http://h/../x", "https://h/a/%2e%2E",
        "/..;/x",   "/a/..;p/b", "/.;x",
    };
    static const char *const allowed[] = {
        "/",          "/...",    "/..a",        "/a..",       "/.well-known/x", "/a.b/c",
        "/%2e%2e%2e", "/%2ex",   "/%2f..%2f",   "/x?p=/../y", "/x?/./",         "/v1/models",
        "/a/.../b",   "/..%2fx", "/%252e%252e", "//x",        "/a;b/c",         "/..x;/y",
    };
    char req[256];
    for (size_t i = 0; i < PC_ARRAY_LEN(refused); i++) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", refused[i]);
        long rc = parse_str(req);
        if (rc != -400)
            fprintf(stderr, "refused %s: %ld\n", refused[i], rc);
        T_CHECK_INT(rc, -400);
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(allowed); i++) {
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", allowed[i]);
        long rc = parse_str(req);
        if (rc != (long)strlen(req))
            fprintf(stderr, "allowed %s: %ld\n", allowed[i], rc);
        T_CHECK_INT(rc, (long)strlen(req));
    }
}

static void test_parse_incomplete(void)
{
    const char *full = "GET /path HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n";
    size_t len = strlen(full);
    for (size_t i = 0; i < len; i++) {
        struct httpd_head hd = {0};
        struct httpd_header_span sp[4];
        hd.headers = sp;
        hd.max_headers = 4;
        long rc = httpd_parse_head(full, i, &hd);
        if (rc != 0)
            fprintf(stderr, "prefix %zu: %ld\n", i, rc);
        T_CHECK_INT(rc, 0);
    }
    T_CHECK_INT(parse_str(full), (long)len);
}

static void test_parse_errors(void)
{
    static const struct {
        const char *in;
        long want;
    } cases[] = {
        {"G@T / HTTP/1.1\r\n\r\n", -400},
        {" GET / HTTP/1.1\r\n\r\n", -400},
        {"GET  / HTTP/1.1\r\n\r\n", -400},
        {"GET / HTTP/1.1 \r\n\r\n", -400},
        {"GET /\r\n\r\n", -400},
        {"GET / HTTP/1.x\r\n\r\n", -400},
        {"GET / http/1.1\r\n\r\n", -400},
        {"GET / HTTP/1.1\rX: y\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA: b\r\n continued\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\n\tA: b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nNoColon\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA : b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\n: b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\n\r\r\n", -400},
        {"GET /a\x7f HTTP/1.1\r\n\r\n", -400},
        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", -505},
        {"GET / HTTP/2.0\r\n\r\n", -505},
        {"GET / HTTP/1.2\r\n\r\n", -505},
        {"GET / HTTP/0.9\r\n\r\n", -505},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", -400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", -501},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", -501},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
         -501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", -400},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        long rc = parse_str(cases[i].in);
        if (rc != cases[i].want)
            fprintf(stderr, "case %zu: got %ld want %ld\n", i, rc, cases[i].want);
        T_CHECK_INT(rc, cases[i].want);
    }
    /* NUL inside a header value (strlen would stop at it). */
    const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
    struct httpd_head hd = {0};
    struct httpd_header_span sp[4];
    hd.headers = sp;
    hd.max_headers = 4;
    T_CHECK_INT(httpd_parse_head(nul, sizeof(nul) - 1, &hd), -400);
    /* Capacity of the header array is the header count limit. */
    T_CHECK_INT(parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &hd, sp, 2), -431);
    T_CHECK_INT(parse("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n", &hd, sp, 2), 30);
}

/* RFC 9112 section 3.2: one valid Host in HTTP/1.1, never two. */
static void test_parse_host(void)
{
    static const struct {
        const char *in;
        int want;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nX: y\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", -400},
        {"GET / HTTP/1.0\r\n\r\n", 0},
        {"GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost:\r\n\r\n", 0}, /* empty: a URI without authority */
        {"GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: xn--bcher-kva.example\r\n\r\n", 0},
        {"GET / HTTP/1.1\r\nHost: a:\r\n\r\n", 0}, /* port = *DIGIT */
        {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: user@evil.example\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: []\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n", -400},
        {"GET / HTTP/1.1\r\nHost: a,b\r\n\r\n", 0}, /* a sub-delim: a (strange) reg-name */
        {"GET / HTTP/1.1\r\nHost: \x80\r\n\r\n", -400},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(cases); i++) {
        struct httpd_head hd;
        struct httpd_header_span sp[8];
        T_CHECK(parse(cases[i].in, &hd, sp, 8) > 0);
        int rc = httpd_head_check_host(&hd);
        if (rc != cases[i].want)
            fprintf(stderr, "host case %zu: got %d want %d\n", i, rc, cases[i].want);
        T_CHECK_INT(rc, cases[i].want);
    }
}

static void test_reason(void)
{
    T_CHECK_STR(httpd_reason(200), "OK");
    T_CHECK_STR(httpd_reason(413), "Content Too Large");
    T_CHECK_STR(httpd_reason(502), "Bad Gateway");
    T_CHECK(httpd_reason(799) != NULL);
}

/* The shared RFC 9110 checks (pc_util) against an independent definition. */
static void test_http_char_classes(void)
{
    static const char tchar_punct[] = "!#$%&'*+-.^_`|~";
    for (int i = 0; i < 256; i++) {
        char ch = (char)i;
        bool alnum = (i >= '0' && i <= '9') || (i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z');
        bool tchar = alnum || (i != 0 && strchr(tchar_punct, i) != NULL);
        bool field = i == '\t' || (i >= 0x20 && i != 0x7f);
        if (pc_http_tchar(ch) != tchar || pc_http_field_char(ch) != field)
            fprintf(stderr, "char 0x%02x: tchar %d field %d\n", (unsigned)i, pc_http_tchar(ch),
                    pc_http_field_char(ch));
        T_CHECK(pc_http_tchar(ch) == tchar);
        T_CHECK(pc_http_field_char(ch) == field);
    }
    T_CHECK(pc_http_token("X-Request-Id", 12));
    T_CHECK(!pc_http_token("", 0));
    T_CHECK(!pc_http_token("Bad Name", 8));
    T_CHECK(!pc_http_token("a:b", 3));
    T_CHECK(!pc_http_token("a\0b", 3));
    T_CHECK(pc_http_field_value("", 0));
    T_CHECK(pc_http_field_value("a b\tc \x80\xff", 8));
    T_CHECK(!pc_http_field_value("a\rb", 3));
    T_CHECK(!pc_http_field_value("a\nb", 3));
    T_CHECK(!pc_http_field_value("a\0b", 3));
    T_CHECK(!pc_http_field_value("a\x01", 2));
    T_CHECK(!pc_http_field_value("a\x7f", 2));
}

/* ------------------------------------------------------------------------ */
/* Server harness                                                            */

struct srv;

struct worker {
    struct srv *s;
    int id;
    struct httpd *h;
};

struct srv {
    struct event_base *base;
    int lfd;
    int port;
    struct httpd_conf conf;
    struct stats st;
    struct worker w[2];
    pthread_t thread;
    struct event *cmd_ev;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void (*cmd_fn)(struct srv *s);
    bool cmd_done;
    /* Written by the loop thread under mu. */
    int nreq;
    char method[16];
    char path[256];
    char xtest[256];
    int error;
    char *body;
    size_t body_len;
    int close_calls;
    int drain_calls;
    size_t drain_queued;
    size_t queued_at_start;
    /* Loop thread only (handler and commands). */
    struct httpd_req *held;
    bool reply_in_close;
    size_t conns, active, body_bytes; /* results of cmd_counts */
};

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

static void record(struct srv *s, struct httpd_req *r)
{
    size_t len;
    const char *body = httpd_req_body(r, &len);
    pthread_mutex_lock(&s->mu);
    s->nreq++;
    copy_str(s->method, sizeof(s->method), httpd_req_method(r));
    copy_str(s->path, sizeof(s->path), httpd_req_path(r));
    copy_str(s->xtest, sizeof(s->xtest), httpd_req_header(r, "x-test"));
    s->error = (int)httpd_req_error(r);
    free(s->body);
    s->body = pc_strndup(body, len);
    s->body_len = len;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_close(struct httpd_req *r, void *arg)
{
    struct srv *s = arg;
    if (s->reply_in_close)
        httpd_reply(r, 200, "late", 4); /* must be ignored, and must not free r */
    T_CHECK(s->held == r);
    s->held = NULL;
    pthread_mutex_lock(&s->mu);
    s->close_calls++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void on_drain(struct httpd_req *r, void *arg)
{
    struct srv *s = arg;
    pthread_mutex_lock(&s->mu);
    s->drain_calls++;
    s->drain_queued = httpd_reply_queued(r);
    pthread_mutex_unlock(&s->mu);
    httpd_reply_end(r);
}

static void reply_echo(struct worker *w, struct httpd_req *r)
{
    size_t len;
    const char *body = httpd_req_body(r, &len);
    const char *q = httpd_req_query(r);
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "w%d %s %s q=%s v=%d body=", w->id, httpd_req_method(r), httpd_req_path(r),
                  q != NULL ? q : "-", httpd_req_minor_version(r));
    pc_buf_append(&b, body, len);
    httpd_add_header(r, "Content-Type", "text/plain");
    httpd_add_header(r, "X-Echo", "yes");
    if (strcmp(httpd_req_path(r), "/hello") == 0) {
        httpd_add_header(r, "X-Bad", "a\r\nInjected: 1"); /* dropped by httpd (and logged) */
        httpd_add_header(r, "Content-Length", "1");       /* httpd's own */
    }
    httpd_reply(r, 200, b.data, b.len);
    pc_buf_free(&b);
}

static void reply_stream(struct srv *s, struct httpd_req *r, size_t size)
{
    httpd_set_close_cb(r, on_close, s);
    httpd_reply_start(r, 200);
    char *big = pc_malloc(size);
    memset(big, 'x', size);
    memcpy(big, "hello", PC_MIN(size, (size_t)5));
    httpd_reply_chunk(r, big, size);
    httpd_reply_chunk(r, "", 0); /* ignored */
    free(big);
    s->queued_at_start = httpd_reply_queued(r);
}

static void handler(struct httpd_req *r, void *arg)
{
    struct worker *w = arg;
    struct srv *s = w->s;
    const char *path = httpd_req_path(r);
    record(s, r);
    T_CHECK(httpd_req_peer(r) != NULL && strncmp(httpd_req_peer(r), "127.0.0.", 8) == 0);
    T_CHECK(httpd_req_start_us(r) > 0);
    if (httpd_req_error(r) == HTTPD_REQ_BODY_TOO_LARGE) {
        static const char e[] =
            "{\"error\":{\"message\":\"too big\",\"type\":\"x\",\"code\":null}}";
        httpd_add_header(r, "Content-Type", "application/json");
        httpd_reply(r, 413, e, sizeof(e) - 1);
    } else if (strcmp(path, "/hold") == 0) {
        httpd_set_close_cb(r, on_close, s);
        s->held = r;
    } else if (strcmp(path, "/charge") == 0) { /* charge ?N more bytes, then hold: 503 if refused */
        const char *q = httpd_req_query(r);
        if (httpd_req_charge(r, q != NULL ? (size_t)atol(q) : 0) < 0) {
            httpd_reply(r, 503, "refused", 7);
        } else {
            httpd_set_close_cb(r, on_close, s);
            s->held = r;
        }
    } else if (strcmp(path, "/stream") == 0) {
        reply_stream(s, r, 5);
        s->held = r;
    } else if (strcmp(path, "/flood") == 0) {
        reply_stream(s, r, FLOOD_CHUNK);
        s->held = r;
    } else if (strcmp(path, "/drain") == 0) {
        reply_stream(s, r, BIG_CHUNK);
        httpd_set_drain_cb(r, 65536, on_drain, s);
    } else if (strcmp(path, "/drain-small") == 0) {
        reply_stream(s, r, SMALL_CHUNK);
        httpd_set_drain_cb(r, 65536, on_drain, s);
    } else {
        reply_echo(w, r);
    }
}

static void cmd_cb(evutil_socket_t fd, short what, void *arg)
{
    struct srv *s = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&s->mu);
    void (*fn)(struct srv *) = s->cmd_fn;
    pthread_mutex_unlock(&s->mu);
    fn(s);
    pthread_mutex_lock(&s->mu);
    s->cmd_done = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Run fn on the loop thread and wait until it returned. */
static void run_on_loop(struct srv *s, void (*fn)(struct srv *))
{
    pthread_mutex_lock(&s->mu);
    s->cmd_fn = fn;
    s->cmd_done = false;
    pthread_mutex_unlock(&s->mu);
    event_active(s->cmd_ev, EV_TIMEOUT, 1);
    pthread_mutex_lock(&s->mu);
    while (!s->cmd_done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* Wait (bounded) until expr, evaluated under s->mu, holds. */
#define WAIT_FOR(s, expr)                                                                    \
    do {                                                                                     \
        struct timespec dl_;                                                                 \
        clock_gettime(CLOCK_REALTIME, &dl_);                                                 \
        dl_.tv_sec += WAIT_SECONDS;                                                          \
        pthread_mutex_lock(&(s)->mu);                                                        \
        while (!(expr) && pthread_cond_timedwait(&(s)->cv, &(s)->mu, &dl_) != ETIMEDOUT)     \
            ;                                                                                \
        bool ok_ = (expr);                                                                   \
        pthread_mutex_unlock(&(s)->mu);                                                      \
        if (!ok_)                                                                            \
            fprintf(stderr, "%s:%d: timed out waiting for %s\n", __FILE__, __LINE__, #expr); \
        T_CHECK(ok_);                                                                        \
    } while (0)

static void cmd_counts(struct srv *s)
{
    s->conns = httpd_connection_count(s->w[0].h);
    s->active = httpd_active_requests(s->w[0].h);
    s->body_bytes = httpd_buffered_body_bytes(s->w[0].h);
}

static void cmd_end_held(struct srv *s)
{
    httpd_reply_end(s->held);
    s->held = NULL;
}

static void cmd_reply_held(struct srv *s)
{
    httpd_reply(s->held, 200, "bye", 3);
    s->held = NULL;
}

static void cmd_abort_held(struct srv *s)
{
    httpd_reply_abort(s->held);
    s->held = NULL;
}

static void cmd_noop(struct srv *s)
{
    (void)s;
}

static void cmd_stop(struct srv *s)
{
    httpd_stop_accepting(s->w[0].h);
}

static void cmd_second_worker(struct srv *s)
{
    s->w[1].h = httpd_create(s->base, s->lfd, &s->conf, handler, &s->w[1], &s->st);
}

static void cmd_destroy(struct srv *s)
{
    httpd_destroy(&s->w[0].h);
    httpd_destroy(&s->w[1].h);
}

static void cmd_break(struct srv *s)
{
    event_base_loopbreak(s->base);
}

static void *loop_main(void *arg)
{
    struct srv *s = arg;
    event_base_loop(s->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0)
        abort();
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* conf NULL: defaults. */
static struct srv *srv_start(const struct httpd_conf *conf)
{
    struct srv *s = pc_calloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (conf != NULL)
        s->conf = *conf;
    s->conf.server_name = "promptcache-test";
    s->base = event_base_new();
    s->lfd = listen_loopback(&s->port);
    for (int i = 0; i < 2; i++) {
        s->w[i].s = s;
        s->w[i].id = i + 1;
    }
    s->w[0].h = httpd_create(s->base, s->lfd, &s->conf, handler, &s->w[0], &s->st);
    T_CHECK(s->w[0].h != NULL);
    s->cmd_ev = event_new(s->base, -1, 0, cmd_cb, s);
    pthread_create(&s->thread, NULL, loop_main, s);
    return s;
}

static void srv_stop(struct srv *s)
{
    run_on_loop(s, cmd_destroy);
    T_CHECK_INT((int64_t)s->st.v[STAT_connections_active], 0);
    run_on_loop(s, cmd_break);
    pthread_join(s->thread, NULL);
    event_free(s->cmd_ev);
    event_base_free(s->base);
    close(s->lfd);
    free(s->body);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */

struct cli {
    int fd;
    struct pc_buf in;
};

/* A client socket (receive buffer rcvbuf if > 0), not yet connected. */
static void cli_open_unconnected_buf(struct cli *c, int rcvbuf)
{
    struct timeval tv = {WAIT_SECONDS, 0};
    int one = 1;
    memset(c, 0, sizeof(*c));
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void cli_open_unconnected(struct srv *s, struct cli *c)
{
    (void)s;
    cli_open_unconnected_buf(c, 0);
}

static void cli_connect(struct srv *s, struct cli *c)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    sa.sin_port = htons((uint16_t)s->port);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        abort();
}

static void cli_open_buf(struct srv *s, struct cli *c, int rcvbuf)
{
    cli_open_unconnected_buf(c, rcvbuf);
    cli_connect(s, c);
}

static void cli_open(struct srv *s, struct cli *c)
{
    cli_open_buf(s, c, 0);
}

static void cli_close(struct cli *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    pc_buf_free(&c->in);
}

static void cli_send(struct cli *c, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) {
            T_CHECK(k > 0);
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

static void cli_sends(struct cli *c, const char *s)
{
    cli_send(c, s, strlen(s));
}

/* Read more: > 0 bytes, 0 EOF, -1 error or safety timeout. */
static ssize_t cli_fill(struct cli *c)
{
    pc_buf_reserve(&c->in, 65536);
    ssize_t k = recv(c->fd, c->in.data + c->in.len, 65536, 0);
    if (k > 0)
        c->in.len += (size_t)k;
    return k;
}

/* Offset just past needle in the input, reading as needed; -1 if it never comes. */
static long cli_find(struct cli *c, const char *needle)
{
    size_t nl = strlen(needle);
    for (;;) {
        if (c->in.len >= nl)
            for (size_t i = 0; i + nl <= c->in.len; i++)
                if (memcmp(c->in.data + i, needle, nl) == 0)
                    return (long)(i + nl);
        if (cli_fill(c) <= 0)
            return -1;
    }
}

static int cli_need(struct cli *c, size_t n)
{
    while (c->in.len < n)
        if (cli_fill(c) <= 0)
            return -1;
    return 0;
}

/* True if the server closed: EOF (or reset) with no further bytes. */
static bool cli_eof(struct cli *c)
{
    if (c->in.len != 0)
        return false;
    ssize_t k = cli_fill(c);
    return k == 0 || (k < 0 && errno == ECONNRESET);
}

struct resp {
    int status;
    char head[16384];
    char *body;
    size_t body_len;
};

/* Value of a response header into out (empty if absent); true if present. */
static bool resp_header(const struct resp *r, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *p = strstr(r->head, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)(e - v), v);
            return true;
        }
    }
    return false;
}

static int cli_chunked_body(struct cli *c, struct pc_buf *body)
{
    for (;;) {
        long e = cli_find(c, "\r\n");
        if (e < 0)
            return -1;
        size_t size = strtoul(c->in.data, NULL, 16);
        pc_buf_consume(&c->in, (size_t)e);
        if (cli_need(c, size + 2) < 0)
            return -1;
        pc_buf_append(body, c->in.data, size);
        T_CHECK(memcmp(c->in.data + size, "\r\n", 2) == 0);
        pc_buf_consume(&c->in, size + 2);
        if (size == 0)
            return 0;
    }
}

/* Read one response; head_req: a reply to HEAD, no body whatever the headers say. */
static int cli_response(struct cli *c, struct resp *r, bool head_req)
{
    char v[64];
    struct pc_buf body = PC_BUF_INIT;
    memset(r, 0, sizeof(*r));
    long end = cli_find(c, "\r\n\r\n");
    if (end < 0)
        return -1;
    snprintf(r->head, sizeof(r->head), "%.*s", (int)end, c->in.data);
    pc_buf_consume(&c->in, (size_t)end);
    r->status = atoi(r->head + 9);
    int rc = 0;
    if (head_req || r->status < 200 || r->status == 204 || r->status == 304) {
        rc = 0;
    } else if (resp_header(r, "transfer-encoding", v, sizeof(v))) {
        T_CHECK_STR(v, "chunked");
        rc = cli_chunked_body(c, &body);
    } else if (resp_header(r, "content-length", v, sizeof(v))) {
        size_t n = strtoul(v, NULL, 10);
        rc = cli_need(c, n);
        if (rc == 0) {
            pc_buf_append(&body, c->in.data, n);
            pc_buf_consume(&c->in, n);
        }
    } else {
        while (cli_fill(c) > 0)
            ;
        pc_buf_append(&body, c->in.data, c->in.len);
        pc_buf_consume(&c->in, c->in.len);
    }
    r->body = pc_buf_cstr(&body);
    r->body_len = body.len;
    return rc;
}

static void resp_free(struct resp *r)
{
    PC_FREE(&r->body);
}

/* Send req, read one response, check status and (if want_body) the body. */
static void roundtrip(struct cli *c, const char *req, int status, const char *want_body)
{
    struct resp r;
    cli_sends(c, req);
    T_CHECK_INT(cli_response(c, &r, false), 0);
    T_CHECK_INT(r.status, status);
    if (want_body != NULL)
        T_CHECK_STR(r.body, want_body);
    resp_free(&r);
}

/* ------------------------------------------------------------------------ */
/* Server tests                                                              */

static void test_simple_get(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char v[128];
    cli_open(s, &c);
    cli_sends(&c, "GET /hello?a=b HTTP/1.1\r\nHost: x\r\nX-Test:  yes  \r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK(strncmp(r.head, "HTTP/1.1 200 OK\r\n", 17) == 0);
    T_CHECK_STR(r.body, "w1 GET /hello q=a=b v=1 body=");
    T_CHECK(resp_header(&r, "date", v, sizeof(v)) && strstr(v, " GMT") != NULL);
    T_CHECK(resp_header(&r, "server", v, sizeof(v)) && strcmp(v, "promptcache-test") == 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "keep-alive") == 0);
    T_CHECK(resp_header(&r, "x-echo", v, sizeof(v)) && strcmp(v, "yes") == 0);
    T_CHECK(!resp_header(&r, "x-bad", v, sizeof(v)) && !resp_header(&r, "injected", v, 8));
    T_CHECK_STR(s->xtest, "yes");
    resp_free(&r);
    cli_close(&c);
    srv_stop(s);
}

static void test_keep_alive(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n", 200, "w1 GET /one q=- v=1 body=");
    roundtrip(&c, "GET /two HTTP/1.1\r\nHost: x\r\n\r\n", 200, "w1 GET /two q=- v=1 body=");
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->conns, 1);
    T_CHECK_INT((int64_t)s->st.v[STAT_connections_active], 1);
    /* Connection: close from a 1.1 client is honoured. */
    struct resp r;
    char v[32];
    cli_sends(&c, "GET /three HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(&c));
    resp_free(&r);
    cli_close(&c);
    srv_stop(s);
}

static void test_pipelined(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    cli_open(s, &c);
    cli_sends(&c, "\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: "
                  "t\r\nContent-Length: 3\r\n\r\n"
                  "xyzGET /c HTTP/1.1\r\nHost: t\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 GET /a q=- v=1 body=");
    resp_free(&r);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 POST /b q=- v=1 body=xyz");
    resp_free(&r);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 GET /c q=- v=1 body=");
    resp_free(&r);
    cli_close(&c);
    srv_stop(s);
}

/* One complete response off the front of c's input: 1 (body in *body), 0 if not all there yet. */
static int take_response(struct cli *c, struct pc_buf *body)
{
    const char *end = memmem(c->in.data, c->in.len, "\r\n\r\n", 4);
    if (end == NULL)
        return 0;
    size_t head = (size_t)(end - c->in.data) + 4;
    const char *cl = memmem(c->in.data, head, "Content-Length: ", 16);
    T_CHECK(cl != NULL);
    if (cl == NULL)
        return 0;
    size_t n = strtoul(cl + 16, NULL, 10);
    if (c->in.len < head + n)
        return 0;
    pc_buf_reset(body);
    pc_buf_append(body, c->in.data + head, n);
    pc_buf_consume(&c->in, head + n);
    return 1;
}

/*
 * While a request is handled, httpd reads only its read-ahead of what the
 * client pipelines behind it: the client's sends stall (else it could send
 * without end). Once the request is answered, everything sent is answered,
 * in order.
 */
static void test_read_pauses_while_handled(void)
{
    enum { REQ = 1024 };
    static const size_t cap = 64u << 20;
    char req[REQ + 1];
    int pre = snprintf(req, sizeof(req), "GET /p HTTP/1.1\r\nHost: t\r\nX-Pad: ");
    memset(req + pre, 'p', REQ - (size_t)pre - 4);
    memcpy(req + REQ - 4, "\r\n\r\n", 5);
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    cli_sends(&c, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT_FOR(s, s->nreq == 1);

    size_t sent = 0;
    bool stalled = false;
    while (sent < cap) {
        size_t off = sent % REQ;
        ssize_t k = send(c.fd, req + off, REQ - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            sent += (size_t)k;
            continue;
        }
        T_CHECK(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        if (k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        /* Absence of progress can only be awaited with a bound. */
        struct pollfd p = {.fd = c.fd, .events = POLLOUT};
        if (poll(&p, 1, 300) == 0) {
            stalled = true;
            break;
        }
    }
    fprintf(stderr, "    the client pipelined %zu bytes, then its sends %s\n", sent,
            stalled ? "stalled" : "never stalled");
    T_CHECK(stalled);
    pthread_mutex_lock(&s->mu);
    T_CHECK_INT(s->nreq, 1); /* nothing behind the held request was dispatched */
    pthread_mutex_unlock(&s->mu);

    /* Answer it; finish the last request while reading the replies. */
    run_on_loop(s, cmd_reply_held);
    size_t off = sent % REQ, rest = off != 0 ? REQ - off : 0;
    size_t want = 1 + (sent + rest) / REQ, got = 0;
    bool in_order = true;
    struct pc_buf body = PC_BUF_INIT;
    while (got < want) {
        struct pollfd p = {.fd = c.fd, .events = (short)(POLLIN | (rest > 0 ? POLLOUT : 0))};
        if (poll(&p, 1, WAIT_SECONDS * 1000) <= 0)
            break;
        if (rest > 0 && (p.revents & POLLOUT)) {
            ssize_t k = send(c.fd, req + off, rest, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                off += (size_t)k;
                rest -= (size_t)k;
            }
        }
        if ((p.revents & POLLIN) && cli_fill(&c) <= 0)
            break;
        while (take_response(&c, &body) == 1) {
            const char *expect = got == 0 ? "bye" : "w1 GET /p q=- v=1 body=";
            in_order =
                in_order && body.len == strlen(expect) && memcmp(body.data, expect, body.len) == 0;
            got++;
        }
    }
    pc_buf_free(&body);
    T_CHECK_INT(got, want);
    T_CHECK(in_order);
    pthread_mutex_lock(&s->mu);
    T_CHECK_INT(s->nreq, (int64_t)want);
    pthread_mutex_unlock(&s->mu);
    cli_close(&c);
    srv_stop(s);
}

static void test_post_length(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    /* Head and body in separate writes, body split too. */
    cli_sends(&c, "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n");
    cli_sends(&c, "hello");
    roundtrip(&c, " world", 200, "w1 POST /p q=- v=1 body=hello world");
    T_CHECK_INT(s->body_len, 11);
    T_CHECK_STR(s->body, "hello world");
    cli_close(&c);
    srv_stop(s);
}

static void test_chunked_body(void)
{
    static const char req[] = "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5;ext=1;q=\"a\"\r\nhello\r\n6\r\n world\r\nA \r\n0123456789\r\n"
                              "0\r\nX-Trailer: 1\r\n\r\n";
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c, req, 200, "w1 POST /c q=- v=1 body=hello world0123456789");
    /* Same request one byte per write: every parser state sees partial input. */
    for (size_t i = 0; i < sizeof(req) - 1; i++)
        cli_send(&c, req + i, 1);
    struct resp r;
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 POST /c q=- v=1 body=hello world0123456789");
    resp_free(&r);
    /* Empty chunked body. */
    roundtrip(&c, "POST /e HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200,
              "w1 POST /e q=- v=1 body=");
    /* Bad chunk size: 400 and close. */
    roundtrip(&c, "POST /e HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400,
              NULL);
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    srv_stop(s);
}

static void check_413(struct cli *c, struct srv *s)
{
    struct resp r;
    char v[32];
    T_CHECK_INT(cli_response(c, &r, false), 0);
    T_CHECK_INT(r.status, 413);
    T_CHECK(strstr(r.body, "\"too big\"") != NULL);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK_INT(s->error, HTTPD_REQ_BODY_TOO_LARGE);
    T_CHECK_INT(s->body_len, 0);
    resp_free(&r);
}

static void test_too_large(void)
{
    struct httpd_conf conf = {.max_body_size = 1000};
    struct srv *s = srv_start(&conf);
    struct cli c;
    char *junk = pc_malloc(100000);
    memset(junk, 'j', 100000);

    /* Declared length over the limit, with 100 KB of the body already sent:
     * the handler answers, the client reads it, then a clean EOF (lingering
     * close; no reset that would destroy the reply). */
    cli_open(s, &c);
    cli_sends(&c, "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\nX-Test: t\r\n\r\n");
    cli_send(&c, junk, 100000);
    check_413(&c, s);
    T_CHECK_STR(s->xtest, "t");
    cli_send(&c, junk, 1000); /* still discarded, not reset */
    T_CHECK(cli_eof(&c));
    cli_close(&c);

    /* Chunked body whose running total passes the limit. */
    cli_open(s, &c);
    cli_sends(&c, "POST /big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n");
    cli_send(&c, junk, 0x200);
    cli_sends(&c, "\r\n300\r\n");
    cli_send(&c, junk, 0x300);
    check_413(&c, s);
    T_CHECK(cli_eof(&c));
    cli_close(&c);

    /* Exactly at the limit is fine. */
    cli_open(s, &c);
    cli_sends(&c, "POST /ok HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n");
    cli_send(&c, junk, 1000);
    struct resp r;
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_INT(s->body_len, 1000);
    resp_free(&r);
    cli_close(&c);
    free(junk);
    srv_stop(s);
}

static void test_expect_continue(void)
{
    struct httpd_conf conf = {.max_body_size = 100};
    struct srv *s = srv_start(&conf);
    struct cli c;
    struct resp r;
    cli_open(s, &c);
    cli_sends(&c,
              "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 100);
    T_CHECK_STR(r.head, "HTTP/1.1 100 Continue\r\n\r\n");
    resp_free(&r);
    roundtrip(&c, "abcde", 200, "w1 POST /e q=- v=1 body=abcde");
    /* Too large: no 100, straight to the handler's 413. */
    cli_sends(&c,
              "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n");
    check_413(&c, s);
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    srv_stop(s);
}

/* A protocol error answered by httpd: JSON in OpenAI's shape, then close. */
static void check_protocol_error(struct srv *s, const char *req, int status)
{
    struct cli c;
    struct resp r;
    char v[64];
    int before = s->nreq;
    cli_open(s, &c);
    cli_sends(&c, req);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, status);
    T_CHECK(strstr(r.body, "{\"error\":{\"message\":\"") == r.body);
    T_CHECK(strstr(r.body, "\"type\":\"invalid_request_error\",\"code\":null}}") != NULL);
    T_CHECK(resp_header(&r, "content-type", v, sizeof(v)) && strcmp(v, "application/json") == 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(&c));
    T_CHECK_INT(s->nreq, before); /* the handler never saw it */
    resp_free(&r);
    cli_close(&c);
}

static void test_protocol_errors(void)
{
    struct httpd_conf conf = {.max_header_size = 1024, .max_headers = 4};
    struct srv *s = srv_start(&conf);
    char big[2048];
    check_protocol_error(s, "GET / HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n", 400);
    check_protocol_error(s, "GET / HTTP/1.1\r\nHost: t\r\nA: b\r\n folded\r\n\r\n", 400);
    check_protocol_error(s, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505);
    check_protocol_error(s, "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    check_protocol_error(
        s, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400);
    snprintf(big, sizeof(big), "GET / HTTP/1.1\r\nHost: t\r\nX-Big: %01500d\r\n\r\n", 0);
    check_protocol_error(s, big, 431);
    /* a request line longer than the whole head may be: the target is too long (414) */
    snprintf(big, sizeof(big), "GET /%01500d HTTP/1.1\r\nHost: t\r\n\r\n", 0);
    check_protocol_error(s, big, 414);
    check_protocol_error(
        s, "GET / HTTP/1.1\r\nHost: t\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", 431);
    /* A bad request after a good one on the same connection. */
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c, "GET /ok HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    roundtrip(&c, "GET /\x01 HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    srv_stop(s);
}

/*
 * What is no HTTP/1.x request gets its 400 as soon as that shows, not after
 * read_timeout: a TLS ClientHello on the plain port, another protocol's
 * banner, a bad byte in a request line still coming. None ends in a blank
 * line, so they waited unanswered (the clients hung) for the 60 s default.
 */
static void check_rejected_unfinished(struct srv *s, const char *req, size_t len, int status)
{
    struct cli c;
    struct resp r;
    cli_open(s, &c);
    cli_send(&c, req, len);
    T_CHECK_INT(cli_response(&c, &r, false), 0); /* was -1: nothing within WAIT_SECONDS */
    T_CHECK_INT(r.status, status);
    T_CHECK(cli_eof(&c));
    resp_free(&r);
    cli_close(&c);
}

static void check_rejected_str(struct srv *s, const char *req, int status)
{
    check_rejected_unfinished(s, req, strlen(req), status);
}

static void test_not_http_rejected_at_once(void)
{
    static const unsigned char hello[] = {0x16, 0x03, 0x01, 0x00, 0xc4, 0x01, 0x00, 0x00,
                                          0xc0, 0x03, 0x03, 0x5a, 0x00, 0x00, 0x00, 0x00};
    struct srv *s = srv_start(NULL);
    int before = s->nreq;
    check_rejected_unfinished(s, (const char *)hello, sizeof(hello), 400);
    check_rejected_str(s, "SSH-2.0-OpenSSH_9.6\r\n", 400);
    check_rejected_str(s, "GET /a\001b", 400);
    check_rejected_str(s, "GET / HTTP/1.1\r\nBad Name: x\r\n", 400);
    check_rejected_str(s, "GET / HTTP/3.0\r\n", 505);
    /* A bare CR where the blank line should be, past the first bytes: it was no head end. */
    char pad[600];
    snprintf(pad, sizeof(pad), "GET / HTTP/1.1\r\nHost: t\r\nX-Pad: %0400d\r\n\r\r\n", 0);
    check_rejected_str(s, pad, 400);
    snprintf(pad, sizeof(pad), "GET / HTTP/1.1\r\nHost: t\r\nX-Pad: %0400d\n\rX", 0);
    check_rejected_str(s, pad, 400);
    T_CHECK_INT(s->nreq, before);
    /* A valid head that comes in pieces is not refused on the way. */
    struct cli c;
    cli_open(s, &c);
    cli_sends(&c, "GET /piece");
    run_on_loop(s, cmd_noop);
    cli_sends(&c, "s HTTP/1.1\r\nHo");
    run_on_loop(s, cmd_noop);
    cli_sends(&c, "st: t\r\n\r");
    run_on_loop(s, cmd_noop);
    roundtrip(&c, "\n", 200, "w1 GET /pieces q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

/*
 * "OPTIONS *" (a load balancer's health check) is answered by httpd itself:
 * 200, no body, the connection kept; it was a 400 that marked the proxy down.
 * The handler never sees it: its target is no path.
 */
static void test_options_asterisk(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char v[64];
    int before = s->nreq;
    cli_open(s, &c);
    cli_sends(&c, "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200); /* was 400 */
    T_CHECK(resp_header(&r, "content-length", v, sizeof(v)) && strcmp(v, "0") == 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "keep-alive") == 0);
    resp_free(&r);
    /* The connection serves on, pipelined requests included. */
    roundtrip(&c,
              "OPTIONS * HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
              "GET /after HTTP/1.1\r\nHost: t\r\n\r\n",
              200, "");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 GET /after q=- v=1 body=");
    resp_free(&r);
    T_CHECK_INT(s->nreq, before + 1); /* /after only */
    /* Closed as asked, and when a body was announced (it is never read). */
    roundtrip(&c, "OPTIONS * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", 200, "");
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    cli_open(s, &c);
    roundtrip(&c, "OPTIONS * HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", 200, "");
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    /* Other methods with the asterisk, and the Host rule, are refused as before. */
    check_protocol_error(s, "GET * HTTP/1.1\r\nHost: t\r\n\r\n", 400);
    check_protocol_error(s, "OPTIONS * HTTP/1.1\r\n\r\n", 400);
    T_CHECK_INT(s->nreq, before + 1);
    srv_stop(s);
}

static void test_http10(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char v[32];
    cli_open(s, &c);
    cli_sends(&c, "GET /old HTTP/1.0\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 GET /old q=- v=0 body=");
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(&c));
    resp_free(&r);
    cli_close(&c);

    cli_open(s, &c);
    for (int i = 0; i < 2; i++) {
        cli_sends(&c, "GET /ka HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        T_CHECK_INT(cli_response(&c, &r, false), 0);
        T_CHECK_STR(r.body, "w1 GET /ka q=- v=0 body=");
        T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "keep-alive") == 0);
        resp_free(&r);
    }
    cli_close(&c);
    srv_stop(s);
}

static void test_head(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char v[32];
    cli_open(s, &c);
    cli_sends(&c, "HEAD /h HTTP/1.1\r\nHost: t\r\n\r\nGET /g HTTP/1.1\r\nHost: t\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, true), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK(resp_header(&r, "content-length", v, sizeof(v)) &&
            (size_t)atoi(v) == strlen("w1 HEAD /h q=- v=1 body="));
    resp_free(&r);
    /* No stray body bytes: the next response starts right away. */
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "w1 GET /g q=- v=1 body=");
    resp_free(&r);
    cli_close(&c);
    srv_stop(s);
}

static void test_stream(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char v[32];
    cli_open(s, &c);
    cli_sends(&c, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
    long end = cli_find(&c, "\r\n\r\n");
    T_CHECK(end > 0);
    snprintf(r.head, sizeof(r.head), "%.*s", (int)end, c.in.data);
    T_CHECK(resp_header(&r, "transfer-encoding", v, sizeof(v)) && strcmp(v, "chunked") == 0);
    T_CHECK(!resp_header(&r, "content-length", v, sizeof(v)));
    pc_buf_consume(&c.in, (size_t)end);
    /* The first chunk arrives while the handler still holds the request. */
    T_CHECK(cli_find(&c, "5\r\nhello\r\n") > 0);
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->active, 1);
    pc_buf_consume(&c.in, c.in.len);
    run_on_loop(s, cmd_end_held);
    T_CHECK(cli_find(&c, "0\r\n\r\n") == 5);
    pc_buf_consume(&c.in, 5);
    /* Still keep-alive afterwards. */
    roundtrip(&c, "GET /after HTTP/1.1\r\nHost: t\r\n\r\n", 200, "w1 GET /after q=- v=1 body=");
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->active, 0);
    cli_close(&c);

    /* HTTP/1.0: close-delimited. */
    cli_open(s, &c);
    cli_sends(&c, "GET /stream HTTP/1.0\r\n\r\n");
    end = cli_find(&c, "\r\n\r\nhello");
    T_CHECK(end > 0);
    snprintf(r.head, sizeof(r.head), "%.*s", (int)end, c.in.data);
    T_CHECK(!resp_header(&r, "transfer-encoding", v, sizeof(v)));
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    pc_buf_consume(&c.in, c.in.len);
    run_on_loop(s, cmd_end_held);
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    srv_stop(s);
}

static void test_abort(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    cli_sends(&c, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
    T_CHECK(cli_find(&c, "\r\n\r\n5\r\nhello\r\n") > 0);
    pc_buf_consume(&c.in, c.in.len);
    run_on_loop(s, cmd_abort_held);
    T_CHECK(cli_eof(&c)); /* no last chunk: the client sees the truncation */
    T_CHECK_INT(s->close_calls, 0);
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->active, 0);
    cli_close(&c);
    srv_stop(s);
}

static void test_client_gone(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    for (int variant = 0; variant < 3; variant++) {
        int before = s->close_calls;
        s->reply_in_close = variant == 1;
        cli_open(s, &c);
        if (variant == 2) /* streamed reply already started */
            cli_sends(&c, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n");
        else
            cli_sends(&c,
                      "GET /hold HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n");
        WAIT_FOR(s, s->nreq > 0 && strcmp(s->path, variant == 2 ? "/stream" : "/hold") == 0);
        cli_close(&c);
        WAIT_FOR(s, s->close_calls == before + 1);
        run_on_loop(s, cmd_counts);
        run_on_loop(s, cmd_counts); /* deferred frees have run */
        T_CHECK_INT(s->conns, 0);
        T_CHECK_INT(s->active, 0);
        T_CHECK_INT(s->close_calls, before + 1);
        T_CHECK(s->held == NULL);
        pthread_mutex_lock(&s->mu);
        s->path[0] = '\0';
        pthread_mutex_unlock(&s->mu);
    }
    T_CHECK_INT((int64_t)s->st.v[STAT_connections_active], 0);
    srv_stop(s);
}

/* Wait (bounded) until the server has no connection left. */
static void wait_no_connections(struct srv *s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        run_on_loop(s, cmd_counts);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (s->conns == 0 || t.tv_sec - t0.tv_sec > WAIT_SECONDS)
            break;
    }
    T_CHECK_INT(s->conns, 0);
}

/*
 * The client resets the connection while reading is suspended (64 KiB of
 * pipelined input buffered), so httpd has not seen it go: the handler's
 * reply fails to write, which finishes the request (no close callback).
 */
static void test_reply_after_reset(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct linger lg = {1, 0};
    char *junk = pc_malloc(100000);
    memset(junk, 'j', 100000);
    cli_open(s, &c);
    cli_sends(&c, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    cli_send(&c, junk, 100000);
    WAIT_FOR(s, s->nreq == 1);
    setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    cli_close(&c); /* RST */
    run_on_loop(s, cmd_reply_held);
    wait_no_connections(s);
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->active, 0);
    T_CHECK_INT(s->close_calls, 0);
    free(junk);
    srv_stop(s);
}

/* A stream of size bytes at path, drain callback at 64 KiB: the whole body arrives. */
static void check_drain(const char *path, size_t size)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    char req[128];
    cli_open(s, &c);
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    cli_sends(&c, req);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.body_len, size);
    T_CHECK(strncmp(r.body, "hello", 5) == 0);
    WAIT_FOR(s, s->drain_calls == 1);
    T_CHECK(s->queued_at_start >= size); /* nothing is written inside the handler */
    T_CHECK(s->drain_queued <= 65536);
    resp_free(&r);
    roundtrip(&c, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n", 200, "w1 GET /x q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

/* More than the socket takes: the bufferevent writes the rest and calls back. */
static void test_drain(void)
{
    check_drain("/drain", BIG_CHUNK);
}

/*
 * A stream's chunks are written at the end of the loop turn; when the socket
 * takes them all at once (no bufferevent write callback), the producer that
 * waits above its mark is still called back.
 */
static void test_drain_direct_write(void)
{
    check_drain("/drain-small", SMALL_CHUNK);
}

static void test_write_timeout(void)
{
    struct httpd_conf conf = {.write_timeout = 0.2};
    struct srv *s = srv_start(&conf);
    struct cli c;
    cli_open_buf(s, &c, 4096);
    cli_sends(&c, "GET /flood HTTP/1.1\r\nHost: t\r\n\r\n");
    /* The client reads nothing: the server gives up and reports it gone. */
    WAIT_FOR(s, s->close_calls == 1);
    cli_close(&c);
    srv_stop(s);
}

static void test_timeouts(void)
{
    struct httpd_conf conf = {.idle_timeout = 0.1, .read_timeout = 0.2};
    struct srv *s = srv_start(&conf);
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    T_CHECK(cli_eof(&c)); /* idle keep-alive closed */
    cli_close(&c);
    cli_open(s, &c);
    cli_sends(&c, "GET /slow HTTP/1.1\r\nHost: x\r\n");
    T_CHECK(cli_eof(&c)); /* head not finished within read_timeout */
    cli_close(&c);
    cli_open(s, &c);
    T_CHECK(cli_eof(&c)); /* never sent anything */
    cli_close(&c);
    srv_stop(s);
}

static void test_stop_accepting(void)
{
    struct srv *s = srv_start(NULL);
    struct cli idle, busy, late;
    struct resp r;
    char v[32];
    cli_open(s, &idle);
    roundtrip(&idle, "GET /i HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_open(s, &busy);
    cli_sends(&busy, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT_FOR(s, strcmp(s->path, "/hold") == 0);

    run_on_loop(s, cmd_stop);
    T_CHECK(cli_eof(&idle)); /* idle keep-alive closed at once */
    run_on_loop(s, cmd_reply_held);
    T_CHECK_INT(cli_response(&busy, &r, false), 0);
    T_CHECK_STR(r.body, "bye");
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(&busy));
    resp_free(&r);

    /* The listening fd is still open and listening: another worker serves it. */
    cli_open(s, &late);
    cli_sends(&late, "GET /late HTTP/1.1\r\nHost: t\r\n\r\n");
    run_on_loop(s, cmd_second_worker);
    T_CHECK_INT(cli_response(&late, &r, false), 0);
    T_CHECK_STR(r.body, "w2 GET /late q=- v=1 body=");
    resp_free(&r);
    cli_close(&idle);
    cli_close(&busy);
    cli_close(&late);
    srv_stop(s);
}

static const char *const health_paths[] = {"/healthz", NULL};

/* The process-wide limits every test starts from (and restores). */
static void set_limits(size_t per_ip, size_t reserve)
{
    struct httpd_limits l = {
        .max_connections_per_ip = per_ip, .reserve = reserve, .reserve_paths = health_paths};
    httpd_set_limits(&l);
}

static void cmd_stop_first(struct srv *s)
{
    httpd_stop_accepting(s->w[0].h);
}

/* Connect from a given loopback address (127.0.0.2 is loopback on Linux too). */
static void cli_open_from(struct srv *s, struct cli *c, const char *ip)
{
    struct sockaddr_in me = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &me.sin_addr);
    cli_open_unconnected(s, c);
    if (bind(c->fd, (struct sockaddr *)&me, sizeof(me)) < 0)
        abort();
    cli_connect(s, c);
}

/* Wait (bounded) until condition fn holds; a millisecond between looks. */
static void wait_until(struct srv *s, bool (*fn)(struct srv *s), const char *what)
{
    struct timespec t0, t, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool ok;
    while (!(ok = fn(s))) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > WAIT_SECONDS)
            break;
        nanosleep(&nap, NULL);
    }
    if (!ok)
        fprintf(stderr, "timed out waiting for %s\n", what);
    T_CHECK(ok);
}

static uint64_t stat_of(struct srv *s, enum stat_id id)
{
    return __atomic_load_n(&s->st.v[id], __ATOMIC_RELAXED);
}

static bool no_connection(struct srv *s)
{
    return (int64_t)stat_of(s, STAT_connections_active) == 0;
}

static bool one_connection(struct srv *s)
{
    return (int64_t)stat_of(s, STAT_connections_active) == 1;
}

static bool two_connections(struct srv *s)
{
    return (int64_t)stat_of(s, STAT_connections_active) == 2;
}

/* A 503 from the connection limits: JSON error, Retry-After, close; handler not called. */
static void check_conn_busy(struct srv *s, struct cli *c, const char *req)
{
    struct resp r;
    char v[64];
    int before = s->nreq;
    cli_sends(c, req);
    T_CHECK_INT(cli_response(c, &r, false), 0);
    T_CHECK_INT(r.status, 503);
    T_CHECK(strstr(r.body, "too many connections") != NULL);
    T_CHECK(strstr(r.body, "\"type\":\"server_error\",\"code\":null}}") != NULL);
    T_CHECK(resp_header(&r, "retry-after", v, sizeof(v)) && strcmp(v, "1") == 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(c));
    T_CHECK_INT(s->nreq, before);
    resp_free(&r);
}

/* A health check answered from the reserve: the handler's 200, then close. */
static void check_reserve_health(struct srv *s, struct cli *c)
{
    struct resp r;
    char v[64];
    int before = s->nreq;
    cli_sends(c, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
    T_CHECK_INT(cli_response(c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_STR(r.body + 3, "GET /healthz q=- v=1 body="); /* "wN " first */
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(cli_eof(c));
    T_CHECK_INT(s->nreq, before + 1);
    resp_free(&r);
}

/*
 * max_connections is the process's: with it reached (on another httpd),
 * health checks are still answered from the reserve, and everything else
 * gets a 503 and is counted.
 */
static void test_max_connections(void)
{
    set_limits(0, 0);
    struct httpd_conf conf = {.max_connections = 1};
    struct srv *s = srv_start(&conf);
    struct cli a, b, c, d;
    cli_open(s, &a);
    cli_sends(&a, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT_FOR(s, s->nreq == 1);
    /* From now on only the second httpd accepts: the first one's connection still counts. */
    run_on_loop(s, cmd_second_worker);
    run_on_loop(s, cmd_stop_first);
    cli_open(s, &b);
    check_reserve_health(s, &b);
    cli_open(s, &c);
    check_conn_busy(s, &c, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n");
    cli_close(&c);
    cli_open(s, &c); /* only bodiless GET and HEAD of a reserve path */
    check_conn_busy(s, &c, "POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
    cli_close(&c);
    cli_open(s, &c);
    check_conn_busy(s, &c, "GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx");
    cli_close(&c);
    cli_open(s, &c); /* a load balancer's ping: answered, then closed */
    roundtrip(&c, "OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n", 200, "");
    T_CHECK(cli_eof(&c));
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 3);
    T_CHECK_INT(stat_of(s, STAT_connections_refused_per_ip), 0);

    /* Once the regular connection is gone, a new one is regular (keep-alive) again. */
    run_on_loop(s, cmd_reply_held);
    struct resp r;
    T_CHECK_INT(cli_response(&a, &r, false), 0);
    T_CHECK_STR(r.body, "bye");
    resp_free(&r);
    cli_close(&a);
    cli_close(&b);
    cli_close(&c);
    wait_until(s, no_connection, "every connection to close");
    cli_open(s, &d);
    roundtrip(&d, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n", 200, "w2 GET /x q=- v=1 body=");
    roundtrip(&d, "GET /y HTTP/1.1\r\nHost: t\r\n\r\n", 200, "w2 GET /y q=- v=1 body=");
    cli_close(&d);
    srv_stop(s);
}

/*
 * The reserve is bounded, and idle connections cannot hold it: a new one
 * takes the place of the oldest still waiting for its request head (closed,
 * counted). Only when every place is being answered is a new one closed at once.
 */
static void test_reserve_full(void)
{
    static const char *const paths[] = {"/healthz", "/hold", NULL};
    struct httpd_limits l = {.reserve = 1, .reserve_paths = paths};
    httpd_set_limits(&l);
    struct httpd_conf conf = {.max_connections = 1};
    struct srv *s = srv_start(&conf);
    struct cli a, b, c;
    cli_open(s, &a);
    roundtrip(&a, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_open(s, &b); /* the reserve's one place */
    wait_until(s, two_connections, "the reserve connection");
    cli_open(s, &c); /* takes the place of b, which said nothing */
    T_CHECK(cli_eof(&b));
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 1);
    check_reserve_health(s, &c);
    cli_close(&c);
    cli_close(&b);

    /* A reserve connection being answered keeps its place: the next one is closed at once. */
    wait_until(s, one_connection, "the reserve to empty");
    cli_open(s, &b);
    cli_sends(&b, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT_FOR(s, s->nreq == 3);
    cli_open(s, &c);
    T_CHECK(cli_eof(&c));
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 2);
    cli_close(&c);
    run_on_loop(s, cmd_reply_held);
    struct resp r;
    T_CHECK_INT(cli_response(&b, &r, false), 0);
    T_CHECK_STR(r.body, "bye");
    resp_free(&r);
    T_CHECK(cli_eof(&b));
    cli_close(&b);

    /* A reserve connection that says nothing is closed after HTTPD_RESERVE_SECONDS. */
    wait_until(s, one_connection, "the reserve to empty");
    cli_open(s, &b);
    T_CHECK(cli_eof(&b));
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 3);
    cli_close(&b);
    cli_close(&a);
    srv_stop(s);
    set_limits(0, 0);
}

/* max_connections_per_ip: one address is limited, others are not; health still answered. */
static void test_per_ip_limit(void)
{
    set_limits(2, 0);
    struct srv *s = srv_start(NULL);
    struct cli a1, a2, a3, b;
    cli_open_from(s, &a1, "127.0.0.1");
    cli_open_from(s, &a2, "127.0.0.1");
    roundtrip(&a1, "GET /1 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    roundtrip(&a2, "GET /2 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_open_from(s, &a3, "127.0.0.1");
    check_conn_busy(s, &a3, "GET /3 HTTP/1.1\r\nHost: t\r\n\r\n");
    cli_close(&a3);
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 1);
    T_CHECK_INT(stat_of(s, STAT_connections_refused_per_ip), 1);
    cli_open_from(s, &a3, "127.0.0.1");
    check_reserve_health(s, &a3);
    cli_close(&a3);

    /* Another address is not affected: a regular keep-alive connection. */
    cli_open_from(s, &b, "127.0.0.2");
    roundtrip(&b, "GET /b1 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    roundtrip(&b, "GET /b2 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_close(&b);

    /* A closed connection gives its place back. */
    cli_close(&a1);
    wait_until(s, one_connection, "the address's connections to drop to one");
    cli_open_from(s, &a3, "127.0.0.1");
    roundtrip(&a3, "GET /4 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    roundtrip(&a3, "GET /5 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_close(&a3);
    cli_close(&a2);
    T_CHECK_INT(stat_of(s, STAT_connections_refused), 1);
    srv_stop(s);
    set_limits(0, 0);
}

/* httpd_limits.exempt: addresses the per-address limit leaves alone. */
static void test_per_ip_exempt(void)
{
    struct httpd_net ex[2];
    T_CHECK_INT(httpd_net_parse("127.0.0.2/32", &ex[0]), 0);
    T_CHECK_INT(httpd_net_parse("::1", &ex[1]), 0);
    struct httpd_limits l = {
        .max_connections_per_ip = 1, .exempt = ex, .nexempt = 2, .reserve_paths = health_paths};
    httpd_set_limits(&l);
    struct srv *s = srv_start(NULL);
    struct cli a1, a2, b[3];
    cli_open_from(s, &a1, "127.0.0.1");
    roundtrip(&a1, "GET /1 HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_open_from(s, &a2, "127.0.0.1");
    check_conn_busy(s, &a2, "GET /2 HTTP/1.1\r\nHost: t\r\n\r\n");
    cli_close(&a2);
    for (int i = 0; i < 3; i++) { /* over the limit, and regular (keep-alive) all the same */
        cli_open_from(s, &b[i], "127.0.0.2");
        roundtrip(&b[i], "GET /b HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
        roundtrip(&b[i], "GET /b HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    }
    T_CHECK_INT(stat_of(s, STAT_connections_refused_per_ip), 1);
    for (int i = 0; i < 3; i++)
        cli_close(&b[i]);
    cli_close(&a1);
    srv_stop(s);
    set_limits(0, 0);
}

/* Addresses and prefixes; IPv4 is kept mapped into IPv6. */
static void test_net_parse(void)
{
    static const struct {
        const char *s;
        int rc;
        unsigned bits;
    } cases[] = {
        {"127.0.0.0/8", 0, 104}, {"10.1.2.3", 0, 128}, {"::1", 0, 128},
        {"fd00::/8", 0, 8},      {"0.0.0.0/0", 0, 96}, {"::/0", 0, 0},
        {"10.0.0.0/33", -1, 0},  {"::/129", -1, 0},    {"10.0.0.0/", -1, 0},
        {"10.0.0.0/-1", -1, 0},  {"/8", -1, 0},        {"host", -1, 0},
        {"10.0.0.0/8x", -1, 0},  {"", -1, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct httpd_net n;
        T_CHECK_INT(httpd_net_parse(cases[i].s, &n), cases[i].rc);
        if (cases[i].rc == 0)
            T_CHECK_INT(n.bits, cases[i].bits);
    }
    struct httpd_net n;
    T_CHECK_INT(httpd_net_parse("192.168.1.7", &n), 0);
    static const unsigned char mapped[16] = {0, 0, 0,    0,    0,   0,   0, 0,
                                             0, 0, 0xff, 0xff, 192, 168, 1, 7};
    T_CHECK(memcmp(n.ip, mapped, 16) == 0);
}

/* accept() failing with EMFILE: httpd pauses accepting, and recovers. */
static void test_accept_emfile(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct rlimit old, lim;
    cli_open_unconnected(s, &c);
    getrlimit(RLIMIT_NOFILE, &old);
    int lowest = dup(0);
    close(lowest);
    lim = old;
    lim.rlim_cur = (rlim_t)lowest; /* no new descriptor can be allocated */
    T_CHECK_INT(setrlimit(RLIMIT_NOFILE, &lim), 0);
    cli_connect(s, &c);
    run_on_loop(s, cmd_noop); /* the loop has seen the pending connection */
    run_on_loop(s, cmd_noop);
    T_CHECK_INT(setrlimit(RLIMIT_NOFILE, &old), 0);
    roundtrip(&c, "GET /after-emfile HTTP/1.1\r\nHost: t\r\n\r\n", 200,
              "w1 GET /after-emfile q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

static void test_destroy_open_request(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    cli_sends(&c, "GET /hold HTTP/1.1\r\nHost: t\r\n\r\n");
    WAIT_FOR(s, s->nreq == 1);
    srv_stop(s); /* the held request's close callback runs (checked in on_close) */
    T_CHECK(cli_eof(&c));
    cli_close(&c);
}

/* Bytes the process has allocated on the heap (the server runs in this process). */
static size_t heap_in_use(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd; /* big blocks are mmapped: hblkhd */
#endif
}

/*
 * A head announcing a big body costs little memory until the body arrives:
 * the buffer grows with the bytes received (it used to be allocated whole,
 * up to max_body_size, when the head arrived).
 */
static void test_body_grows_as_it_arrives(void)
{
    enum { NCONN = 8, BIG = 16000000 };
    struct srv *s = srv_start(NULL); /* max_body_size 16 MiB */
    struct cli c[NCONN], ping;
    size_t before = heap_in_use();
    for (int i = 0; i < NCONN; i++) {
        cli_open(s, &c[i]);
        cli_sends(&c[i],
                  "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 16000000\r\n\r\n0123456789");
    }
    /* The heads were sent before the ping: answered ping, heads read. */
    cli_open(s, &ping);
    roundtrip(&ping, "GET /ping HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    run_on_loop(s, cmd_counts);
    size_t grown = heap_in_use() - PC_MIN(before, heap_in_use());
    if (grown >= 8u * 1024 * 1024)
        fprintf(stderr, "heap grew by %zu bytes for %d announced bodies\n", grown, NCONN);
    T_CHECK(grown < 8u * 1024 * 1024); /* was NCONN * 16 MB */
    T_CHECK(s->body_bytes > 0 && s->body_bytes <= (size_t)NCONN * 64 * 1024);
    for (int i = 0; i < NCONN; i++)
        cli_close(&c[i]);

    /* A whole big body still arrives intact through the growing buffer. */
    char *big = pc_malloc(BIG);
    for (size_t i = 0; i < BIG; i++)
        big[i] = (char)('a' + i % 26);
    cli_sends(&ping, "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 16000000\r\n\r\n");
    cli_send(&ping, big, BIG);
    struct resp r;
    T_CHECK_INT(cli_response(&ping, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_INT(s->body_len, BIG);
    T_CHECK(s->body != NULL && memcmp(s->body, big, BIG) == 0);
    resp_free(&r);
    cli_close(&ping);
    free(big);
    wait_no_connections(s);
    T_CHECK_INT(s->body_bytes, 0); /* every body's bytes were given back */
    srv_stop(s);
}

/* A 503 from httpd itself, in the API's JSON error shape, then close. */
static void check_busy(struct cli *c)
{
    static const char want[] =
        "{\"error\":{\"message\":\"server busy: the requests in flight use all of the request "
        "memory; retry later\",\"type\":\"server_error\",\"code\":null}}";
    struct resp r;
    char v[64];
    T_CHECK_INT(cli_response(c, &r, false), 0);
    T_CHECK_INT(r.status, 503);
    if (strcmp(r.body, want) != 0)
        fprintf(stderr, "503 body: %.200s\n", r.body);
    T_CHECK(strcmp(r.body, want) == 0);
    T_CHECK(resp_header(&r, "content-type", v, sizeof(v)) && strcmp(v, "application/json") == 0);
    T_CHECK(resp_header(&r, "connection", v, sizeof(v)) && strcmp(v, "close") == 0);
    T_CHECK(resp_header(&r, "retry-after", v, sizeof(v)) && strcmp(v, "1") == 0);
    T_CHECK(cli_eof(c));
    resp_free(&r);
}

/* Request bodies buffered by one httpd share a budget; over it: 503. */
static void test_body_budget(void)
{
    struct httpd_conf conf = {.max_body_size = 200000, .max_body_buffered = 250000};
    struct srv *s = srv_start(&conf);
    struct cli a, c;
    char *junk = pc_malloc(200000);
    memset(junk, 'j', 200000);

    /* A's 200000-byte body stays buffered while its handler holds it. */
    cli_open(s, &a);
    cli_sends(&a, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 200000\r\n\r\n");
    cli_send(&a, junk, 200000);
    WAIT_FOR(s, s->nreq == 1);

    /* Another 100000 would take the total over 250000. */
    cli_open(s, &c);
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    cli_send(&c, junk, 100000);
    check_busy(&c);
    cli_close(&c);
    cli_open(s, &c); /* chunked: the same budget */
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n186a0\r\n");
    cli_send(&c, junk, 100000);
    check_busy(&c);
    cli_close(&c);
    T_CHECK_INT(s->nreq, 1); /* the handler never saw them */

    /* A small body still fits. */
    cli_open(s, &c);
    roundtrip(&c, "POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", 200, NULL);

    /* Once A's request is finished, its bytes are given back. */
    run_on_loop(s, cmd_reply_held);
    struct resp r;
    T_CHECK_INT(cli_response(&a, &r, false), 0);
    T_CHECK_STR(r.body, "bye");
    resp_free(&r);
    roundtrip(&a, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    cli_send(&c, junk, 100000);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_INT(s->body_len, 100000);
    resp_free(&r);
    cli_close(&a);
    cli_close(&c);
    wait_no_connections(s);
    T_CHECK_INT(s->body_bytes, 0);
    free(junk);
    srv_stop(s);
}

/*
 * body_charge: each body byte counts that many times against the budget, and
 * httpd_req_charge adds to a request's charge; all of it is given back when
 * the request is freed.
 */
static void test_body_charge(void)
{
    struct httpd_conf conf = {
        .max_body_size = 200000, .max_body_buffered = 250000, .body_charge = 3};
    struct srv *s = srv_start(&conf);
    struct cli a, c;
    char *junk = pc_malloc(100000);
    memset(junk, 'j', 100000);
    uint64_t refused = stat_of(s, STAT_requests_over_body_budget);

    /* 60000 bytes are charged 3 x 60001 (the buffer holds the NUL too). */
    cli_open(s, &a);
    cli_sends(&a, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 60000\r\n\r\n");
    cli_send(&a, junk, 60000);
    WAIT_FOR(s, s->nreq == 1);
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->body_bytes, 3 * 60001);
    T_CHECK_INT(stat_of(s, STAT_request_memory_bytes), 3 * 60001);

    /* 30000 more would fit alone, but not 3 times: 503. */
    cli_open(s, &c);
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 30000\r\n\r\n");
    cli_send(&c, junk, 30000);
    check_busy(&c);
    cli_close(&c);
    T_CHECK_INT(stat_of(s, STAT_requests_over_body_budget), refused + 1);

    /* A handler's charge on top: refused over the budget (counted), else held with r. */
    cli_open(s, &c);
    roundtrip(&c, "POST /charge?70000 HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", 503,
              "refused");
    T_CHECK_INT(stat_of(s, STAT_requests_over_body_budget), refused + 2);
    run_on_loop(s, cmd_reply_held); /* A's request ends: its charge is given back */
    struct resp r;
    T_CHECK_INT(cli_response(&a, &r, false), 0);
    resp_free(&r);
    cli_close(&a);
    cli_sends(&c, "POST /charge?70000 HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}");
    WAIT_FOR(s, s->nreq == 3);
    run_on_loop(s, cmd_counts);
    T_CHECK_INT(s->body_bytes, 3 * 3 + 70000);
    run_on_loop(s, cmd_reply_held);
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_STR(r.body, "bye");
    resp_free(&r);
    cli_close(&c);
    wait_no_connections(s);
    T_CHECK_INT(s->body_bytes, 0);
    T_CHECK_INT(stat_of(s, STAT_request_memory_bytes), 0);
    free(junk);
    srv_stop(s);
}

/* The budget is the process's: a body held by one httpd counts against another's. */
static void test_body_budget_shared(void)
{
    struct httpd_conf conf = {.max_body_size = 200000, .max_body_buffered = 250000};
    struct srv *s = srv_start(&conf);
    struct cli a, c;
    char *junk = pc_malloc(200000);
    memset(junk, 'j', 200000);
    cli_open(s, &a);
    cli_sends(&a, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 200000\r\n\r\n");
    cli_send(&a, junk, 200000);
    WAIT_FOR(s, s->nreq == 1);
    T_CHECK(httpd_process_body_bytes() >= 200000);
    run_on_loop(s, cmd_second_worker);
    run_on_loop(s, cmd_stop_first); /* from now on the second httpd reads every body */
    cli_open(s, &c);
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    cli_send(&c, junk, 100000);
    check_busy(&c);
    cli_close(&c);
    T_CHECK_INT(stat_of(s, STAT_requests_over_body_budget), 1);
    run_on_loop(s, cmd_reply_held);
    cli_close(&a);
    wait_until(s, no_connection, "every connection to close");
    T_CHECK_INT(httpd_process_body_bytes(), 0);
    cli_open(s, &c);
    cli_sends(&c, "POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    cli_send(&c, junk, 100000);
    struct resp r;
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK(strncmp(r.body, "w2 POST /c q=- v=1 body=jjj", 27) == 0);
    resp_free(&r);
    cli_close(&c);
    free(junk);
    srv_stop(s);
}

static bool trimmed(struct srv *s)
{
    return stat_of(s, STAT_memory_trims) > 0;
}

/* Once large bodies were freed and no more arrive, memory goes back to the system. */
static void test_memory_trim(void)
{
    const size_t big = 12u * 1024 * 1024;
    struct srv *s = srv_start(NULL);
    struct cli c;
    char *body = pc_malloc(big), head[128];
    memset(body, 'b', big);
    uint64_t before = httpd_memory_trims();
    cli_open(s, &c);
    snprintf(head, sizeof(head), "POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n",
             big);
    cli_sends(&c, head);
    cli_send(&c, body, big);
    struct resp r;
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_INT(s->body_len, big);
    resp_free(&r);
    cli_close(&c);
    wait_until(s, trimmed, "a memory trim after the large body");
    T_CHECK_INT(httpd_memory_trims(), before + 1);
    T_CHECK_INT(stat_of(s, STAT_memory_trims), 1);
    free(body);
    srv_stop(s);
}

/* The process's error shape for paths it knows; httpd's own for the rest. */
static void api_shaped(const char *path, int status, const char *message, struct pc_buf *out)
{
    if (strncmp(path, "/v1/", 4) == 0)
        pc_buf_printf(out, "{\"api\":\"%s\",\"status\":%d,\"message\":\"%s\"}", path, status,
                      message);
}

/* httpd_limits.error_body shapes refusals whose path is known. */
static void test_error_body_hook(void)
{
    struct httpd_limits l = {.reserve_paths = health_paths, .error_body = api_shaped};
    httpd_set_limits(&l);
    struct srv *s = srv_start(NULL);
    struct cli c;
    struct resp r;
    cli_open(s, &c);
    cli_sends(&c, "GET /v1/messages HTTP/1.1\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 400);
    T_CHECK_STR(r.body, "{\"api\":\"/v1/messages\",\"status\":400,\"message\":\"An HTTP/1.1 "
                        "request needs exactly one valid Host header.\"}");
    resp_free(&r);
    cli_close(&c);
    check_protocol_error(s, "GET /other HTTP/1.1\r\n\r\n", 400); /* nothing appended */
    check_protocol_error(s, "GET /v1/x HTTP/1.1\r\nBad Header: x\r\n\r\n", 400); /* no path yet */
    srv_stop(s);
    set_limits(0, 0);
}

/* No Host, two Hosts or a bad one: 400 in httpd's JSON shape, then close. */
static void test_host_header(void)
{
    struct srv *s = srv_start(NULL);
    check_protocol_error(s, "GET / HTTP/1.1\r\n\r\n", 400);
    check_protocol_error(s, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    check_protocol_error(s, "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400);
    check_protocol_error(s, "GET / HTTP/1.1\r\nHost: user@evil.example\r\n\r\n", 400);
    check_protocol_error(s, "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    struct cli c;
    struct resp r;
    cli_open(s, &c);
    cli_sends(&c, "POST /v1/x HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 400);
    T_CHECK(strstr(r.body, "exactly one valid Host header") != NULL);
    T_CHECK(cli_eof(&c));
    resp_free(&r);
    cli_close(&c);
    /* HTTP/1.0 may leave it out; HTTP/1.1 with one is fine. */
    cli_open(s, &c);
    cli_sends(&c, "GET /old HTTP/1.0\r\n\r\n");
    T_CHECK_INT(cli_response(&c, &r, false), 0);
    T_CHECK_INT(r.status, 200);
    T_CHECK_STR(r.body, "w1 GET /old q=- v=0 body=");
    resp_free(&r);
    cli_close(&c);
    cli_open(s, &c);
    roundtrip(&c, "GET /new HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 200,
              "w1 GET /new q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

/* An expectation other than 100-continue: 417 from httpd, then close. */
static void test_expect_unsupported(void)
{
    struct srv *s = srv_start(NULL);
    check_protocol_error(
        s, "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417);
    check_protocol_error(s, "GET /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue, x\r\n\r\n", 417);
    /* 100-continue in any case is fine, and so is an empty Expect. */
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c,
              "POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n",
              100, NULL);
    roundtrip(&c, "x", 200, "w1 POST /e q=- v=1 body=x");
    cli_close(&c);
    cli_open(s, &c);
    roundtrip(&c, "GET /e HTTP/1.1\r\nHost: t\r\nExpect:\r\n\r\n", 200, "w1 GET /e q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

/* Blank lines between requests are CRLF or LF; a bare CR is a protocol error. */
static void test_bare_cr_between_requests(void)
{
    struct srv *s = srv_start(NULL);
    struct cli c;
    check_protocol_error(s, "\rGET /x HTTP/1.1\r\nHost: t\r\n\r\n", 400);
    check_protocol_error(s, "\r\r\nGET /x HTTP/1.1\r\nHost: t\r\n\r\n", 400);
    /* After a keep-alive request too. */
    cli_open(s, &c);
    roundtrip(&c, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL);
    roundtrip(&c, "\rGET /b HTTP/1.1\r\nHost: t\r\n\r\n", 400, NULL);
    T_CHECK(cli_eof(&c));
    cli_close(&c);
    /* A CR whose LF comes in a later packet is a blank line. */
    cli_open(s, &c);
    cli_sends(&c, "\r");
    run_on_loop(s, cmd_noop);
    run_on_loop(s, cmd_noop);
    roundtrip(&c, "\n\nGET /split HTTP/1.1\r\nHost: t\r\n\r\n", 200, "w1 GET /split q=- v=1 body=");
    cli_close(&c);
    srv_stop(s);
}

static double mono_secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * read_timeout bounds a new connection's first request from the accept: a
 * client that waits before its first byte does not get a second full
 * read_timeout from that byte (a slowloris could last twice as long).
 */
static void test_read_timeout_from_accept(void)
{
    struct httpd_conf conf = {.read_timeout = 1.0, .idle_timeout = 10};
    struct srv *s = srv_start(&conf);
    struct cli c;
    struct timespec pause = {0, 900 * 1000 * 1000};
    cli_open(s, &c);
    double t0 = mono_secs();
    nanosleep(&pause, NULL);
    cli_sends(&c, "GET /slow HTTP/1.1\r\nHost: t\r\n"); /* never finished */
    T_CHECK(cli_eof(&c));
    double took = mono_secs() - t0;
    if (took >= 1.5)
        fprintf(stderr, "closed %.2f s after the connect (read_timeout 1 s)\n", took);
    T_CHECK(took >= 0.9 && took < 1.5); /* was 1.9: 0.9 s, then a full read_timeout */
    cli_close(&c);
    srv_stop(s);
}

/*
 * A handler relaying a bad upstream's headers must not flood the log: the
 * dropped-header message is debug level.
 */
static void test_dropped_header_quiet(void)
{
    char path[] = "/tmp/test_httpd_log_XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    bool debug = getenv("HTTPD_TEST_DEBUG") != NULL;
    log_init(PC_LOG_INFO, path, NULL, NULL, 0);
    struct srv *s = srv_start(NULL);
    struct cli c;
    cli_open(s, &c);
    roundtrip(&c, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", 200, NULL); /* adds two bad headers */
    cli_close(&c);
    srv_stop(s);
    log_teardown();
    log_init(debug ? PC_LOG_DEBUG : PC_LOG_NOTICE, NULL, NULL, NULL, 0);
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    T_CHECK(strstr(buf, "reply header dropped") == NULL);
    close(fd);
    unlink(path);
}

int main(void)
{
    if (getenv("HTTPD_TEST_DEBUG") != NULL)
        log_init(PC_LOG_DEBUG, NULL, NULL, NULL, 0);
    signal(SIGPIPE, SIG_IGN); /* as the daemon does: writes to a closed socket return EPIPE */
    evthread_use_pthreads();
    T_RUN(test_parse_valid);
    T_RUN(test_parse_dot_segments);
    T_RUN(test_parse_incomplete);
    T_RUN(test_parse_errors);
    T_RUN(test_parse_host);
    T_RUN(test_reason);
    T_RUN(test_http_char_classes);
    T_RUN(test_simple_get);
    T_RUN(test_keep_alive);
    T_RUN(test_pipelined);
    T_RUN(test_read_pauses_while_handled);
    T_RUN(test_post_length);
    T_RUN(test_chunked_body);
    T_RUN(test_too_large);
    T_RUN(test_expect_continue);
    T_RUN(test_protocol_errors);
    T_RUN(test_not_http_rejected_at_once);
    T_RUN(test_options_asterisk);
    T_RUN(test_http10);
    T_RUN(test_head);
    T_RUN(test_stream);
    T_RUN(test_abort);
    T_RUN(test_client_gone);
    T_RUN(test_reply_after_reset);
    T_RUN(test_drain);
    T_RUN(test_drain_direct_write);
    T_RUN(test_write_timeout);
    T_RUN(test_timeouts);
    T_RUN(test_stop_accepting);
    T_RUN(test_max_connections);
    T_RUN(test_reserve_full);
    T_RUN(test_per_ip_limit);
    T_RUN(test_per_ip_exempt);
    T_RUN(test_net_parse);
    T_RUN(test_accept_emfile);
    T_RUN(test_destroy_open_request);
    T_RUN(test_body_grows_as_it_arrives);
    T_RUN(test_body_budget);
    T_RUN(test_body_budget_shared);
    T_RUN(test_body_charge);
    T_RUN(test_memory_trim);
    T_RUN(test_host_header);
    T_RUN(test_error_body_hook);
    T_RUN(test_expect_unsupported);
    T_RUN(test_bare_cr_between_requests);
    T_RUN(test_read_timeout_from_accept);
    T_RUN(test_dropped_header_quiet);
    libevent_global_shutdown();
    T_DONE();
}
