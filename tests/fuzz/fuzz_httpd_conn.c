/*
 * fuzz_httpd_conn.c - libFuzzer target for httpd's connection state machine
 * (src/httpd.c): what one client sends on one connection, run through a real
 * httpd on a Unix socket. fuzz_http_head covers the head parser alone; this
 * covers the rest: blank lines between requests, Content-Length and chunked
 * bodies (sizes, extensions, trailers), Expect, pipelining, HTTP/1.0, the
 * early refusal of what is no request, and a client that half-closes or
 * leaves while its request is handled.
 *
 * Input: byte 0 says how (bit 0: half-close after sending; bits 1-3: the size
 * of the pieces the rest is sent in, the loop running between pieces); the
 * rest is sent. The handler answers by path: /h held and answered later,
 * /s streamed (ended later), /x streamed then aborted, /n 204, anything else
 * at once; every answer carries X-Seq, its request's place on the connection.
 *
 * Checked, aborting on violation:
 *   - the handler only sees requests within the limits (method a token, the
 *     path in origin form, a body no longer than max_body_size and
 *     NUL-terminated);
 *   - what the client reads is a sequence of HTTP/1.1 responses, each framed
 *     as it says (Content-Length, chunked, none for HEAD/204/304, until the
 *     close), interim 100s aside; only the last may be cut short;
 *   - the responses to handled requests come in their order, each to its own
 *     request (X-Seq 0, 1, 2, ...), httpd's own among them (no X-Seq: a
 *     refusal, which closes, or the answer to "OPTIONS *"); nothing follows
 *     a Connection: close, and the answer to a request whose body was too
 *     large (never read) has one;
 *   - once the client closed: no connection, no request and no byte of the
 *     request-memory budget is left over.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "pc_httpd.h"
#include "pc_util.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT    16384
#define MAX_BODY     2048
#define MAX_HELD     64
#define MAX_SEEN     256
#define RESP_CAP     (1u << 20)
#define SETTLE_TURNS 64   /* loop turns after sending, for the answers */
#define CLOSE_TURNS  1000 /* loop turns after the close, for the frees */

static struct {
    struct event_base *base;
    struct httpd *h;
    char path[108];
    /* This input's requests, in the order the handler got them. */
    struct httpd_req *held[MAX_HELD];
    bool held_stream[MAX_HELD];
    size_t nheld;
    bool is_head[MAX_SEEN];
    bool too_large[MAX_SEEN];
    size_t nseen;
} F;

static void forget_held(struct httpd_req *r)
{
    for (size_t i = 0; i < F.nheld; i++) {
        if (F.held[i] == r) {
            F.held[i] = F.held[F.nheld - 1];
            F.held_stream[i] = F.held_stream[F.nheld - 1];
            F.nheld--;
            return;
        }
    }
    CHECK(!"a close callback for a request not held");
}

static void on_close(struct httpd_req *r, void *arg)
{
    (void)arg;
    forget_held(r);
}

static void hold(struct httpd_req *r, bool stream)
{
    CHECK(F.nheld < MAX_HELD);
    F.held[F.nheld] = r;
    F.held_stream[F.nheld] = stream;
    F.nheld++;
    httpd_set_close_cb(r, on_close, NULL);
}

static void check_request(struct httpd_req *r)
{
    const char *m = httpd_req_method(r), *p = httpd_req_path(r);
    size_t len = 0;
    const char *body = httpd_req_body(r, &len);
    CHECK(pc_http_token(m, strlen(m)));
    CHECK(p[0] == '/');
    CHECK(httpd_req_minor_version(r) == 0 || httpd_req_minor_version(r) == 1);
    CHECK(len <= MAX_BODY);
    CHECK(body[len] == '\0');
    if (httpd_req_error(r) == HTTPD_REQ_BODY_TOO_LARGE)
        CHECK(len == 0);
}

static void handler(struct httpd_req *r, void *arg)
{
    (void)arg;
    char seq[24];
    check_request(r);
    CHECK(F.nseen < MAX_SEEN);
    F.is_head[F.nseen] = strcmp(httpd_req_method(r), "HEAD") == 0;
    F.too_large[F.nseen] = httpd_req_error(r) == HTTPD_REQ_BODY_TOO_LARGE;
    snprintf(seq, sizeof(seq), "%zu", F.nseen++);
    httpd_add_header(r, "X-Seq", seq);
    const char *p = httpd_req_path(r);
    size_t len = 0;
    httpd_req_body(r, &len);
    if (httpd_req_error(r) == HTTPD_REQ_BODY_TOO_LARGE) {
        httpd_reply(r, 413, "{}", 2);
    } else if (strncmp(p, "/h", 2) == 0) {
        hold(r, false);
    } else if (strncmp(p, "/s", 2) == 0) {
        httpd_reply_start(r, 200);
        httpd_reply_chunk(r, "ab", 2);
        hold(r, true);
    } else if (strncmp(p, "/x", 2) == 0) {
        httpd_reply_start(r, 200);
        httpd_reply_chunk(r, "cut", 3);
        httpd_reply_abort(r);
    } else if (strncmp(p, "/n", 2) == 0) {
        httpd_reply(r, 204, NULL, 0);
    } else {
        char b[32];
        int n = snprintf(b, sizeof(b), "len=%zu", len);
        httpd_reply(r, 200, b, (size_t)n);
    }
}

/* Answer the requests held so far (a streamed one gets one more chunk first). */
static void finish_held(void)
{
    while (F.nheld > 0) {
        struct httpd_req *r = F.held[--F.nheld];
        httpd_set_close_cb(r, NULL, NULL);
        if (F.held_stream[F.nheld]) {
            httpd_reply_chunk(r, "cd", 2);
            httpd_reply_end(r);
        } else {
            httpd_reply(r, 200, "later", 5);
        }
    }
}

static void fuzz_init(void)
{
    if (F.base != NULL)
        return;
    F.base = event_base_new();
    CHECK(F.base != NULL);
    snprintf(F.path, sizeof(F.path), "/tmp/fuzz_httpd_conn.%d.sock", (int)getpid());
    unlink(F.path);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, F.path, strlen(F.path) + 1);
    CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 64) == 0);
    struct httpd_conf conf = {
        .max_header_size = 1024,
        .max_headers = 8,
        .max_body_size = MAX_BODY,
        .max_body_buffered = 64 * 1024,
    };
    F.h = httpd_create(F.base, lfd, &conf, handler, NULL, NULL);
    CHECK(F.h != NULL);
}

/* One loop turn, then what the client can read into resp. false once it read EOF. */
static bool pump(int fd, struct pc_buf *resp)
{
    event_base_loop(F.base, EVLOOP_NONBLOCK);
    for (;;) {
        char b[65536];
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n > 0) {
            if (resp->len + (size_t)n <= RESP_CAP)
                pc_buf_append(resp, b, (size_t)n);
            continue;
        }
        return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK));
    }
}

/* Where the line at p (within end) ends, past its CRLF; NULL if it is cut short. */
static const char *line_end(const char *p, const char *end)
{
    const char *nl = memmem(p, (size_t)(end - p), "\r\n", 2);
    return nl != NULL ? nl + 2 : NULL;
}

/* A chunked body at p: past its last chunk, NULL if cut short. */
static const char *skip_chunked(const char *p, const char *end)
{
    for (;;) {
        const char *le = line_end(p, end);
        if (le == NULL)
            return NULL;
        char *stop;
        unsigned long size = strtoul(p, &stop, 16);
        CHECK(stop > p && stop == le - 2);
        if ((size_t)(end - le) < size + 2)
            return NULL;
        CHECK(memcmp(le + size, "\r\n", 2) == 0);
        p = le + size + 2;
        if (size == 0)
            return p;
    }
}

/* A header's value in the head [p, e), or NULL. */
static const char *head_value(const char *p, const char *e, const char *name, size_t *vlen)
{
    size_t nl = strlen(name);
    for (const char *l = line_end(p, e); l != NULL && l < e; l = line_end(l, e)) {
        if ((size_t)(e - l) > nl + 1 && pc_strncaseeq(l, name, nl) && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ')
                v++;
            *vlen = (size_t)((const char *)memmem(v, (size_t)(e - v), "\r\n", 2) - v);
            return v;
        }
    }
    return NULL;
}

/* The client's bytes: responses in order, each to its request (see the top). */
static void check_responses(const struct pc_buf *resp)
{
    if (resp->len == 0)
        return;
    const char *p = resp->data, *end = resp->data + resp->len;
    size_t next_seq = 0;
    bool closed = false;
    while (p != NULL && p < end) {
        const char *he = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (he == NULL)
            return; /* cut short: must be the last */
        CHECK(end - p >= 13 && memcmp(p, "HTTP/1.1 ", 9) == 0);
        int status = atoi(p + 9);
        CHECK(status >= 100 && status <= 599);
        const char *body = he + 4;
        if (status == 100) {
            CHECK(he + 2 == line_end(p, end)); /* no fields */
            p = body;
            continue;
        }
        size_t vl = 0;
        CHECK(!closed);
        const char *conn = head_value(p, he + 2, "connection", &vl);
        CHECK(conn != NULL);
        closed = vl == 5 && memcmp(conn, "close", 5) == 0;
        const char *seq = head_value(p, he + 2, "x-seq", &vl);
        bool head = false;
        if (seq != NULL) {
            CHECK((size_t)strtoul(seq, NULL, 10) == next_seq);
            CHECK(!F.too_large[next_seq] || closed); /* its body unread: never keep-alive */
            head = F.is_head[next_seq++];
        }
        const char *cl = head_value(p, he + 2, "content-length", &vl);
        const char *te = head_value(p, he + 2, "transfer-encoding", &vl);
        CHECK(cl == NULL || te == NULL);
        if (head || status == 204 || status == 304) {
            p = body;
        } else if (cl != NULL) {
            size_t n = strtoul(cl, NULL, 10);
            p = (size_t)(end - body) >= n ? body + n : NULL;
        } else if (te != NULL) {
            CHECK(vl == 7 && memcmp(te, "chunked", 7) == 0);
            p = skip_chunked(body, end);
        } else {
            return; /* until the close */
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    fuzz_init();
    F.nseen = 0;
    bool half_close = data[0] & 1;
    size_t piece = 1 + (size_t)((data[0] >> 1) & 7) * 37;
    struct pc_buf resp = PC_BUF_INIT;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, F.path, strlen(F.path) + 1);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    bool open = true;
    for (size_t off = 1; off < size && open;) {
        size_t n = PC_MIN(piece, size - off);
        ssize_t k = send(fd, data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            break; /* the server closed */
        off += k > 0 ? (size_t)k : 0;
        open = pump(fd, &resp);
        finish_held();
    }
    if (half_close)
        shutdown(fd, SHUT_WR);
    for (int i = 0; i < SETTLE_TURNS && open; i++) {
        open = pump(fd, &resp);
        finish_held();
    }
    close(fd);
    for (int i = 0; i < CLOSE_TURNS && httpd_connection_count(F.h) > 0; i++)
        event_base_loop(F.base, EVLOOP_NONBLOCK);
    CHECK(httpd_connection_count(F.h) == 0);
    CHECK(httpd_active_requests(F.h) == 0);
    CHECK(httpd_process_body_bytes() == 0);
    CHECK(F.nheld == 0);
    if (getenv("FUZZ_HTTPD_SHOW") != NULL)
        fprintf(stderr, "seen %zu, %zu bytes:\n%.*s\n----\n", F.nseen, resp.len, (int)resp.len,
                resp.data);
    check_responses(&resp);
    pc_buf_free(&resp);
    return 0;
}
