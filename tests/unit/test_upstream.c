/*
 * test_upstream.c - the upstream module (libcurl multi driven by libevent)
 * against a tiny HTTP/1.1 server that runs in threads of this process.
 *
 * The server: one thread accepts on a loopback ephemeral port and starts one
 * thread per connection (blocking sockets, keep-alive). Its behaviour is the
 * current mode (srv_reset); modes that must wait for the test block on a
 * "gate" the test opens (srv_open_gate), so the tests synchronise instead of
 * sleeping. Timings appear only as generous deadlines against hangs, and as
 * the timeouts under test.
 */
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_upstream.h"
#include "pc_util.h"
#include "t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/event.h>

/* ---- the test server ------------------------------------------------------ */

enum srv_mode {
    SRV_FIXED,          /* 200 with Content-Length: "hello world", or "got N bytes" for a body */
    SRV_INTERIM,        /* 100 Continue and 103 Early Hints, then as SRV_FIXED */
    SRV_CHUNKED,        /* chunked, SRV_NCHUNKS pieces, one send() each */
    SRV_CHUNKED_GATED,  /* the same, waiting for a gate before each piece after the first */
    SRV_STALL_BODY,     /* head and the first piece, then wait for a gate, then close */
    SRV_DELAY_HEAD,     /* wait for a gate before answering anything, then close */
    SRV_CLOSE,          /* read the request, close without answering */
    SRV_CLOSE_MID_BODY, /* Content-Length: 1000, send 100 bytes, close */
    SRV_BAD_HEADERS     /* 200 whose head has invalid fields among valid ones */
};

#define SRV_NCHUNKS   6
#define SRV_CHUNK_LEN 20000
#define SRV_MAX_CONNS 256

static struct {
    int lfd, port;
    int stop[2];
    pthread_t acceptor;
    pthread_t conns[SRV_MAX_CONNS];
    int nconns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum srv_mode mode;
    int gates;    /* gates opened and not yet passed */
    int busy;     /* requests being answered */
    int accepted; /* connections accepted, ever */
    int requests; /* requests read, ever */
    /* Hold mode: an answered keep-alive connection waits, idle, until the test resets it
     * (rst_port: the client's port) or releases every one (hold_idle cleared). */
    bool hold_idle;
    int held;     /* connections waiting so */
    int rst_port; /* the held connection to reset, 0: none */
    int resets;   /* connections reset so, ever */
    char method[32], target[256];
    struct pc_buf head; /* the last request's head */
    struct pc_buf body; /* and its body */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static char pattern_byte(int piece, size_t k)
{
    return (char)('a' + (size_t)(piece * 7 + (int)(k % 26)) % 26);
}

static void deadline_in(struct timespec *ts, int secs)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += secs;
}

/* Value of field name in an HTTP head (request line first); false if absent. */
static bool head_find(const char *head, size_t len, const char *name, char *out, size_t outlen)
{
    if (len == 0)
        return false;
    size_t nl = strlen(name);
    const char *p = memchr(head, '\n', len), *end = head + len;
    while (p != NULL && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            break;
        size_t ll = (size_t)(eol - p);
        if (ll > 0 && p[ll - 1] == '\r')
            ll--;
        if (ll > nl && p[nl] == ':' && pc_strncaseeq(p, name, nl)) {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, outlen, "%.*s", (int)(p + ll - v), v);
            return true;
        }
        p = eol;
    }
    return false;
}

static void srv_send(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the client went away: fine for these tests */
        c += w;
        n -= (size_t)w;
    }
}

static void srv_sendstr(int fd, const char *s)
{
    srv_send(fd, s, strlen(s));
}

static void srv_wait_gate(void)
{
    struct timespec ts;
    deadline_in(&ts, 10);
    pthread_mutex_lock(&S.mu);
    while (S.gates == 0 && pthread_cond_timedwait(&S.cv, &S.mu, &ts) != ETIMEDOUT)
        ;
    if (S.gates > 0)
        S.gates--;
    pthread_mutex_unlock(&S.mu);
}

static void srv_open_gate(void)
{
    pthread_mutex_lock(&S.mu);
    S.gates++;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

/* Release whatever the last test left waiting, then switch to mode. */
static void srv_reset(enum srv_mode mode)
{
    struct timespec ts;
    deadline_in(&ts, 10);
    pthread_mutex_lock(&S.mu);
    while (S.busy > 0) {
        S.gates = 1000;
        pthread_cond_broadcast(&S.cv);
        if (pthread_cond_timedwait(&S.cv, &S.mu, &ts) == ETIMEDOUT)
            break;
    }
    S.mode = mode;
    S.gates = 0;
    S.hold_idle = false; /* releases held connections */
    S.rst_port = 0;
    pthread_cond_broadcast(&S.cv);
    S.method[0] = S.target[0] = '\0';
    pc_buf_reset(&S.head);
    pc_buf_reset(&S.body);
    pthread_mutex_unlock(&S.mu);
}

/* Change the mode without releasing what waits on a gate. */
static void srv_set_mode(enum srv_mode mode)
{
    pthread_mutex_lock(&S.mu);
    S.mode = mode;
    pthread_mutex_unlock(&S.mu);
}

static int srv_get(const int *field)
{
    pthread_mutex_lock(&S.mu);
    int v = *field;
    pthread_mutex_unlock(&S.mu);
    return v;
}

/* Field of the last request; false if it had none. */
static bool srv_header(const char *name, char *out, size_t outlen)
{
    pthread_mutex_lock(&S.mu);
    bool found = head_find(S.head.data, S.head.len, name, out, outlen);
    pthread_mutex_unlock(&S.mu);
    return found;
}

static void srv_piece(int fd, int i, size_t len)
{
    char *buf = pc_malloc(len + 32);
    int n = snprintf(buf, 32, "%zx\r\n", len);
    for (size_t k = 0; k < len; k++)
        buf[n + (int)k] = pattern_byte(i, k);
    memcpy(buf + n + len, "\r\n", 2);
    srv_send(fd, buf, (size_t)n + len + 2);
    free(buf);
}

static void srv_fixed(int fd, const char *method, size_t body_len)
{
    char body[64], head[256];
    if (body_len > 0)
        snprintf(body, sizeof body, "got %zu bytes", body_len);
    else
        snprintf(body, sizeof body, "hello world");
    snprintf(head, sizeof head,
             "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Test: yes\r\n"
             "X-Spaces:   padded value  \r\nContent-Length: %zu\r\n\r\n",
             strlen(body));
    srv_sendstr(fd, head);
    if (strcmp(method, "HEAD") != 0)
        srv_sendstr(fd, body);
}

/* Valid fields, fields to drop (bad names, control characters, bad folds), 200 more bad ones. */
static void srv_bad_headers(int fd)
{
    struct pc_buf h = PC_BUF_INIT;
    pc_buf_append_str(&h, "HTTP/1.1 200 OK\r\nX-Good: 1\r\nBad Name: 2\r\nX-Ctl: a\x01"
                          "b\r\nX-Del: a\x7f"
                          "b\r\n(paren): 3\r\nX-Obs: caf\xc3\xa9\r\nX-Fold: a\r\n b\r\n"
                          "X-Bad-Fold: a\r\n \x02\r\n \x02\r\nX-Trail : 4\r\n");
    for (int i = 0; i < 200; i++)
        pc_buf_printf(&h, "Bad Header %d: x\r\n", i);
    pc_buf_append_str(&h, "X-Last: ok\r\nContent-Length: 5\r\n\r\nhello");
    srv_send(fd, h.data, h.len);
    pc_buf_free(&h);
}

static void srv_chunked(int fd, bool gated, int npieces)
{
    srv_sendstr(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < npieces; i++) {
        if (gated && i > 0)
            srv_wait_gate();
        srv_piece(fd, i, SRV_CHUNK_LEN);
    }
}

/* Answer one request in mode; true to keep the connection. */
static bool srv_answer(int fd, enum srv_mode mode, const char *method, size_t body_len)
{
    switch (mode) {
    case SRV_FIXED:
        srv_fixed(fd, method, body_len);
        return true;
    case SRV_INTERIM:
        srv_sendstr(fd, "HTTP/1.1 100 Continue\r\n\r\n"
                        "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n");
        srv_fixed(fd, method, body_len);
        return true;
    case SRV_CHUNKED:
    case SRV_CHUNKED_GATED:
        srv_chunked(fd, mode == SRV_CHUNKED_GATED, SRV_NCHUNKS);
        srv_sendstr(fd, "0\r\n\r\n");
        return true;
    case SRV_STALL_BODY:
        srv_chunked(fd, false, 1);
        srv_wait_gate();
        return false;
    case SRV_DELAY_HEAD:
        srv_wait_gate();
        return false;
    case SRV_CLOSE:
        return false;
    case SRV_CLOSE_MID_BODY:
        srv_sendstr(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        srv_send(fd,
                 "0123456789012345678901234567890123456789012345678901234567890123456789"
                 "012345678901234567890123456789",
                 100);
        return false;
    case SRV_BAD_HEADERS:
        srv_bad_headers(fd);
        return true;
    }
    return false;
}

/* Read one request (head + Content-Length body) into in; -1 on EOF. */
static int srv_read(int fd, struct pc_buf *in, size_t *head_len, size_t *body_len)
{
    char tmp[65536], cl[32];
    const char *end = NULL;
    while (in->len < 4 || (end = memmem(in->data, in->len, "\r\n\r\n", 4)) == NULL) {
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0)
            return -1;
        pc_buf_append(in, tmp, (size_t)n);
    }
    *head_len = (size_t)(end + 4 - in->data);
    *body_len = head_find(in->data, *head_len, "Content-Length", cl, sizeof cl)
                    ? (size_t)strtoull(cl, NULL, 10)
                    : 0;
    while (in->len < *head_len + *body_len) {
        ssize_t n = recv(fd, tmp, sizeof tmp, 0);
        if (n <= 0)
            return -1;
        pc_buf_append(in, tmp, (size_t)n);
    }
    return 0;
}

/* Read, record and answer one request; false when the connection is done. */
static bool srv_serve(int fd, struct pc_buf *in)
{
    size_t hl, bl;
    if (srv_read(fd, in, &hl, &bl) < 0)
        return false;
    pthread_mutex_lock(&S.mu);
    S.busy++;
    S.requests++;
    enum srv_mode mode = S.mode;
    pc_buf_reset(&S.head);
    pc_buf_append(&S.head, in->data, hl);
    pc_buf_reset(&S.body);
    pc_buf_append(&S.body, in->data + hl, bl);
    sscanf(pc_buf_cstr(&S.head), "%31s %255s", S.method, S.target);
    char method[32];
    memcpy(method, S.method, sizeof method);
    pthread_mutex_unlock(&S.mu);

    bool keep = srv_answer(fd, mode, method, bl);
    pc_buf_consume(in, hl + bl);

    pthread_mutex_lock(&S.mu);
    S.busy--;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    return keep;
}

/* The client's port on this connection. */
static int srv_peer_port(int fd)
{
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    return getpeername(fd, (struct sockaddr *)&a, &alen) == 0 ? ntohs(a.sin_port) : 0;
}

/*
 * In hold mode, after an answer: wait until the test asks to reset this
 * connection (true: it was reset, with RST - the client's next write fails)
 * or releases it (false).
 */
static bool srv_hold(int fd, int port)
{
    bool reset = false;
    pthread_mutex_lock(&S.mu);
    if (!S.hold_idle) {
        pthread_mutex_unlock(&S.mu);
        return false;
    }
    S.held++;
    pthread_cond_broadcast(&S.cv);
    while (S.hold_idle && S.rst_port != port)
        pthread_cond_wait(&S.cv, &S.mu);
    S.held--;
    if (S.hold_idle && S.rst_port == port) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        close(fd); /* RST, delivered before close returns on loopback */
        S.rst_port = 0;
        S.resets++;
        reset = true;
    }
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    return reset;
}

static void *srv_conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int port = srv_peer_port(fd);
    struct pc_buf in = PC_BUF_INIT;
    bool reset = false;
    while (srv_serve(fd, &in))
        if ((reset = srv_hold(fd, port)))
            break;
    if (!reset)
        close(fd);
    pc_buf_free(&in);
    return NULL;
}

/* Reset the held connection whose client port is port; false if none is held. */
static bool srv_reset_held(int port)
{
    struct timespec ts;
    deadline_in(&ts, 5);
    pthread_mutex_lock(&S.mu);
    int before = S.resets;
    bool ok = S.held > 0;
    if (ok) {
        S.rst_port = port;
        pthread_cond_broadcast(&S.cv);
        while (S.resets == before && pthread_cond_timedwait(&S.cv, &S.mu, &ts) != ETIMEDOUT)
            ;
        ok = S.resets > before;
        S.rst_port = 0;
    }
    pthread_mutex_unlock(&S.mu);
    return ok;
}

/* Wait until n connections are held (idle, after their answers). */
static bool srv_wait_held(int n)
{
    struct timespec ts;
    deadline_in(&ts, 10);
    pthread_mutex_lock(&S.mu);
    while (S.held < n && pthread_cond_timedwait(&S.cv, &S.mu, &ts) != ETIMEDOUT)
        ;
    bool ok = S.held >= n;
    pthread_mutex_unlock(&S.mu);
    return ok;
}

static void srv_set_hold(bool on)
{
    pthread_mutex_lock(&S.mu);
    S.hold_idle = on;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
}

static void *srv_accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{S.stop[0], POLLIN, 0}, {S.lfd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[0].revents != 0)
            break;
        if (!(p[1].revents & POLLIN))
            continue;
        int fd = accept(S.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&S.mu);
        if (S.nconns < SRV_MAX_CONNS &&
            pthread_create(&S.conns[S.nconns], NULL, srv_conn_main, (void *)(intptr_t)fd) == 0) {
            S.nconns++;
            S.accepted++;
        } else {
            close(fd);
        }
        pthread_mutex_unlock(&S.mu);
    }
    return NULL;
}

static int srv_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int one = 1;
    S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    setsockopt(S.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (S.lfd < 0 || bind(S.lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(S.lfd, 64) < 0 ||
        getsockname(S.lfd, (struct sockaddr *)&a, &alen) < 0 || pipe(S.stop) < 0)
        return -1;
    S.port = ntohs(a.sin_port);
    return pthread_create(&S.acceptor, NULL, srv_accept_main, NULL) == 0 ? 0 : -1;
}

/* Every client is gone by now (each test destroys its upstream). */
static void srv_stop(void)
{
    srv_reset(SRV_FIXED);
    if (write(S.stop[1], "x", 1) != 1)
        perror("write");
    pthread_join(S.acceptor, NULL);
    for (int i = 0; i < S.nconns; i++)
        pthread_join(S.conns[i], NULL);
    close(S.lfd);
    close(S.stop[0]);
    close(S.stop[1]);
    pc_buf_free(&S.head);
    pc_buf_free(&S.body);
}

/* A port on which nothing listens. */
static int closed_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    bind(fd, (struct sockaddr *)&a, sizeof a);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- the client side ------------------------------------------------------- */

/* One test's event loop and upstream. */
struct env {
    struct event_base *base;
    struct stats st;
    struct upstream *u;
    int running; /* calls started and not done; the loop stops at 0 */
    bool hung;
};

/* One call and what its callbacks saw; the knobs say how the callbacks behave. */
struct call {
    struct env *env;
    struct xfer *x;
    struct xfer_req req;
    char url[256];
    int nhead, status, ndata, ndone;
    enum xfer_result result;
    char errmsg[512];
    struct pc_buf hdrs; /* "name: value\n" per field given to on_head */
    struct pc_buf body; /* bytes accepted by on_data */

    int again;           /* start the same request again from on_done */
    int pauses;          /* on_data returns XFER_PAUSE this many times ... */
    size_t pause_at;     /* ... once this many bytes were accepted */
    double resume_after; /* resume from a timer after this long; < 0: never */
    int npause;          /* pauses taken */
    uint64_t pause_t0, paused_us;
    bool abort_in_head, abort_in_data, stop_on_head, stop_on_pause;
    double gate_delay; /* > 0: open a server gate this long after each full piece */
    size_t gates_sent;
    struct call *child; /* started from on_head */
    struct event *resume_ev, *gate_ev;
};

static void on_head(void *arg, int status, const struct xfer_header *h, size_t nh);
static int on_data(void *arg, const char *p, size_t len);
static void on_done(void *arg, enum xfer_result r, const char *msg);
static const struct xfer_ops ops = {on_head, on_data, on_done};

static void env_init(struct env *e)
{
    memset(e, 0, sizeof *e);
    e->base = event_base_new();
    e->u = upstream_create(e->base, &e->st);
}

static void env_free(struct env *e)
{
    upstream_destroy(&e->u);
    T_CHECK(e->u == NULL);
    event_base_free(e->base);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct env *e = arg;
    (void)fd;
    (void)what;
    e->hung = true;
    event_base_loopbreak(e->base);
}

/* Run until every call is done (or something stops the loop); false if it hung. */
static bool env_run(struct env *e, int secs)
{
    struct event *dl = evtimer_new(e->base, on_deadline, e);
    struct timeval tv = {secs, 0};
    evtimer_add(dl, &tv);
    e->hung = false;
    event_base_dispatch(e->base);
    event_free(dl);
    return !e->hung;
}

/* Let the loop run for a short while (used to see that nothing more happens). */
static void env_settle(struct env *e, int ms)
{
    struct timeval tv = {0, ms * 1000};
    event_base_loopexit(e->base, &tv);
    event_base_dispatch(e->base);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct call *c = arg;
    (void)fd;
    (void)what;
    c->paused_us += pc_mono_us() - c->pause_t0;
    xfer_resume(c->x);
}

static void on_gate(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    srv_open_gate();
}

static void call_init(struct call *c, struct env *e, const char *method, const char *path)
{
    memset(c, 0, sizeof *c);
    c->env = e;
    snprintf(c->url, sizeof c->url, "http://127.0.0.1:%d%s", S.port, path);
    c->req.method = method;
    c->req.url = c->url;
    c->req.timeout = 10;
    c->req.connect_timeout = 5;
    c->resume_ev = evtimer_new(e->base, on_resume, c);
    c->gate_ev = evtimer_new(e->base, on_gate, c);
}

static void call_free(struct call *c)
{
    event_free(c->resume_ev);
    event_free(c->gate_ev);
    pc_buf_free(&c->hdrs);
    pc_buf_free(&c->body);
}

static void call_start(struct call *c)
{
    c->x = xfer_start(c->env->u, &c->req, &ops, c);
    if (c->x != NULL)
        c->env->running++;
}

static void call_stop_soon(struct call *c)
{
    struct timeval tv = {0, 200 * 1000};
    event_base_loopexit(c->env->base, &tv);
}

static void on_head(void *arg, int status, const struct xfer_header *h, size_t nh)
{
    struct call *c = arg;
    c->nhead++;
    c->status = status;
    for (size_t i = 0; i < nh; i++)
        pc_buf_printf(&c->hdrs, "%s: %s\n", h[i].name, h[i].value);
    if (c->child != NULL)
        call_start(c->child); /* from inside libcurl: added on the next loop pass */
    if (c->abort_in_head) {
        xfer_abort(&c->x);
        T_CHECK(c->x == NULL);
        call_stop_soon(c);
    }
    if (c->stop_on_head)
        event_base_loopbreak(c->env->base);
}

static int on_data(void *arg, const char *p, size_t len)
{
    struct call *c = arg;
    c->ndata++;
    if (c->abort_in_data) {
        xfer_abort(&c->x);
        call_stop_soon(c);
        return XFER_CONTINUE;
    }
    if (c->pauses > 0 && c->body.len >= c->pause_at) {
        c->pauses--;
        c->npause++;
        c->pause_t0 = pc_mono_us();
        if (c->resume_after >= 0) {
            struct timeval tv = {0, (suseconds_t)(c->resume_after * 1e6)};
            evtimer_add(c->resume_ev, &tv);
        }
        if (c->stop_on_pause)
            event_base_loopbreak(c->env->base);
        return XFER_PAUSE;
    }
    pc_buf_append(&c->body, p, len);
    if (c->gate_delay > 0 && c->body.len / SRV_CHUNK_LEN > c->gates_sent) {
        struct timeval tv = {0, (suseconds_t)(c->gate_delay * 1e6)};
        c->gates_sent = c->body.len / SRV_CHUNK_LEN;
        evtimer_add(c->gate_ev, &tv);
    }
    return XFER_CONTINUE;
}

static void on_done(void *arg, enum xfer_result r, const char *msg)
{
    struct call *c = arg;
    c->ndone++;
    c->result = r;
    snprintf(c->errmsg, sizeof c->errmsg, "%s", msg != NULL ? msg : "");
    c->x = NULL;
    c->env->running--;
    if (c->again > 0) {
        c->again--;
        call_start(c);
    }
    if (c->env->running == 0)
        event_base_loopbreak(c->env->base);
}

static bool has_line(struct pc_buf *b, const char *line)
{
    return strstr(pc_buf_cstr(b), line) != NULL;
}

static void expect_pattern(const struct pc_buf *b, int npieces)
{
    T_CHECK_INT(b->len, (size_t)npieces * SRV_CHUNK_LEN);
    bool same = b->len == (size_t)npieces * SRV_CHUNK_LEN;
    for (size_t k = 0; same && k < b->len; k++)
        same = b->data[k] == pattern_byte((int)(k / SRV_CHUNK_LEN), k % SRV_CHUNK_LEN);
    T_CHECK(same);
}

static void expect_clean(struct env *e)
{
    T_CHECK_INT(upstream_active(e->u), 0);
    T_CHECK_INT(e->st.v[STAT_upstream_active], 0);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_get_roundtrip(void)
{
    struct env e;
    struct call c;
    char v[256];
    const struct xfer_header hs[] = {{"X-Req", "abc"}, {"X-Empty", ""}};
    srv_reset(SRV_FIXED);
    env_init(&e);
    call_init(&c, &e, "GET", "/hello?q=1");
    c.req.headers = hs;
    c.req.nheaders = PC_ARRAY_LEN(hs);
    call_start(&c);
    T_CHECK(c.x != NULL);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndone, 1);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_STR(c.errmsg, "");
    T_CHECK_INT(c.nhead, 1);
    T_CHECK_INT(c.status, 200);
    T_CHECK(has_line(&c.hdrs, "X-Test: yes\n"));
    T_CHECK(has_line(&c.hdrs, "X-Spaces: padded value\n"));
    T_CHECK(has_line(&c.hdrs, "Content-Length: 11\n"));
    T_CHECK_STR(pc_buf_cstr(&c.body), "hello world");
    /* what the server saw */
    T_CHECK_STR(S.method, "GET");
    T_CHECK_STR(S.target, "/hello?q=1");
    T_CHECK(srv_header("X-Req", v, sizeof v) && strcmp(v, "abc") == 0);
    T_CHECK(srv_header("X-Empty", v, sizeof v) && strcmp(v, "") == 0);
    T_CHECK(srv_header("Host", v, sizeof v));
    T_CHECK(!srv_header("User-Agent", v, sizeof v));
    T_CHECK(!srv_header("Accept", v, sizeof v));
    T_CHECK(!srv_header("Accept-Encoding", v, sizeof v));
    T_CHECK(!srv_header("Expect", v, sizeof v));
    T_CHECK(strstr(pc_buf_cstr(&S.head), " HTTP/1.1\r\n") != NULL); /* pinned to HTTP/1.1 */
    T_CHECK_INT(e.st.v[STAT_upstream_requests], 1);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 0);
    T_CHECK_INT(e.st.v[STAT_bytes_from_upstream], 11);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

/* Run one request to completion on a fresh upstream; the caller frees c and e. */
static void run_one(struct env *e, struct call *c, const char *method, const char *body, size_t len,
                    const struct xfer_header *hs, size_t nh)
{
    env_init(e);
    call_init(c, e, method, "/up");
    c->req.body = body;
    c->req.body_len = len;
    c->req.headers = hs;
    c->req.nheaders = nh;
    call_start(c);
    T_CHECK(c->x != NULL);
    T_CHECK(env_run(e, 20));
    T_CHECK_INT(c->ndone, 1);
}

static void test_post_roundtrip(void)
{
    struct env e;
    struct call c;
    char v[256], want[64];
    size_t len = 1536 * 1024; /* above libcurl's 1 MB Expect: 100-continue threshold */
    char *big = pc_malloc(len);
    for (size_t k = 0; k < len; k++)
        big[k] = pattern_byte(3, k);
    const struct xfer_header hs[] = {{"Content-Type", "application/json"},
                                     {"Content-Length", "5"},
                                     {"Transfer-Encoding", "chunked"}};
    srv_reset(SRV_FIXED);
    run_one(&e, &c, "POST", big, len, hs, PC_ARRAY_LEN(hs));
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.status, 200);
    snprintf(want, sizeof want, "got %zu bytes", len);
    T_CHECK_STR(pc_buf_cstr(&c.body), want);
    T_CHECK_STR(S.method, "POST");
    T_CHECK(S.body.len == len && memcmp(S.body.data, big, len) == 0);
    snprintf(want, sizeof want, "%zu", len);
    T_CHECK(srv_header("Content-Length", v, sizeof v) && strcmp(v, want) == 0);
    T_CHECK(srv_header("Content-Type", v, sizeof v) && strcmp(v, "application/json") == 0);
    T_CHECK(!srv_header("Expect", v, sizeof v));
    T_CHECK(!srv_header("Transfer-Encoding", v, sizeof v));
    T_CHECK_INT(e.st.v[STAT_upstream_requests], 1);
    call_free(&c);
    env_free(&e);
    free(big);

    /* another method with a body: the caller's memory may go away at once */
    char *small = pc_strdup("abc");
    srv_reset(SRV_FIXED);
    env_init(&e);
    call_init(&c, &e, "PUT", "/up");
    c.req.body = small;
    c.req.body_len = 3;
    call_start(&c);
    memcpy(small, "XYZ", 3);
    free(small);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_STR(S.method, "PUT");
    T_CHECK_STR(pc_buf_cstr(&S.body), "abc");
    T_CHECK(!srv_header("Content-Type", v, sizeof v));
    call_free(&c);
    env_free(&e);

    /* no body */
    srv_reset(SRV_FIXED);
    run_one(&e, &c, "DELETE", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_STR(S.method, "DELETE");
    T_CHECK_INT(S.body.len, 0);
    call_free(&c);
    env_free(&e);

    srv_reset(SRV_FIXED);
    run_one(&e, &c, "POST", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_STR(S.method, "POST");
    T_CHECK(srv_header("Content-Length", v, sizeof v) && strcmp(v, "0") == 0);
    call_free(&c);
    env_free(&e);
}

static void test_head(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_FIXED);
    run_one(&e, &c, "HEAD", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.status, 200);
    T_CHECK(has_line(&c.hdrs, "Content-Length: 11\n"));
    T_CHECK_INT(c.ndata, 0);
    T_CHECK_STR(S.method, "HEAD");
    call_free(&c);
    env_free(&e);
}

static void test_keepalive(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_FIXED);
    int acc0 = srv_get(&S.accepted), req0 = srv_get(&S.requests);
    env_init(&e);
    call_init(&c, &e, "GET", "/ka");
    c.again = 2; /* three calls, each started from the previous one's on_done */
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndone, 3);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_STR(pc_buf_cstr(&c.body), "hello worldhello worldhello world");
    T_CHECK_INT(srv_get(&S.requests) - req0, 3);
    T_CHECK_INT(srv_get(&S.accepted) - acc0, 1);
    T_CHECK_INT(e.st.v[STAT_upstream_requests], 3);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

static void test_start_from_callback(void)
{
    struct env e;
    struct call c, child;
    srv_reset(SRV_FIXED);
    env_init(&e);
    call_init(&c, &e, "GET", "/parent");
    call_init(&child, &e, "GET", "/child");
    c.child = &child;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndone, 1);
    T_CHECK_INT(child.ndone, 1);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(child.result, XFER_OK);
    T_CHECK_STR(pc_buf_cstr(&child.body), "hello world");
    expect_clean(&e);
    call_free(&child);
    call_free(&c);
    env_free(&e);
}

static void test_interim_skipped(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_INTERIM);
    run_one(&e, &c, "GET", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.nhead, 1);
    T_CHECK_INT(c.status, 200);
    T_CHECK(has_line(&c.hdrs, "X-Test: yes\n"));
    T_CHECK(!has_line(&c.hdrs, "Link:"));
    T_CHECK_STR(pc_buf_cstr(&c.body), "hello world");
    call_free(&c);
    env_free(&e);
}

static void test_chunked(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_CHUNKED);
    run_one(&e, &c, "GET", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_OK);
    expect_pattern(&c.body, SRV_NCHUNKS);
    T_CHECK_INT(e.st.v[STAT_bytes_from_upstream], SRV_NCHUNKS * SRV_CHUNK_LEN);
    call_free(&c);
    env_free(&e);
}

/* Pause mid-stream, and pause again when resume hands the same bytes back. */
static void test_pause_resume(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_CHUNKED);
    env_init(&e);
    call_init(&c, &e, "GET", "/stream");
    c.pauses = 2;
    c.pause_at = 30000;
    c.resume_after = 0.05;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndone, 1);
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.npause, 2);
    expect_pattern(&c.body, SRV_NCHUNKS); /* every byte once, in order */
    T_CHECK_INT(e.st.v[STAT_bytes_from_upstream], SRV_NCHUNKS * SRV_CHUNK_LEN);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

static void test_paused_does_not_time_out(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_CHUNKED);
    env_init(&e);
    call_init(&c, &e, "GET", "/slow-client");
    c.req.timeout = 0.2;
    c.pauses = 1;
    c.resume_after = 0.6; /* paused three times longer than the timeout */
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.npause, 1);
    T_CHECK(c.paused_us > 200 * 1000);
    expect_pattern(&c.body, SRV_NCHUNKS);
    T_CHECK_INT(e.st.v[STAT_upstream_timeouts], 0);
    call_free(&c);
    env_free(&e);
}

/* Body bytes re-arm the idle timeout: a slow but steady body outlives it. */
static void test_steady_body_outlives_timeout(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_CHUNKED_GATED);
    env_init(&e);
    call_init(&c, &e, "GET", "/steady");
    c.req.timeout = 0.5;
    c.gate_delay = 0.15; /* five gaps: 0.75 s in all */
    uint64_t t0 = pc_mono_us();
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK(pc_mono_us() - t0 > 500 * 1000);
    expect_pattern(&c.body, SRV_NCHUNKS);
    call_free(&c);
    env_free(&e);
}

static void test_timeout_before_head(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_DELAY_HEAD);
    env_init(&e);
    call_init(&c, &e, "GET", "/late");
    c.req.timeout = 0.2;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndone, 1);
    T_CHECK_INT(c.result, XFER_ERR_TIMEOUT);
    T_CHECK_INT(xfer_result_status(c.result), 504);
    T_CHECK(strstr(c.errmsg, "timed out after 0.2 s") != NULL);
    T_CHECK_INT(c.nhead, 0);
    T_CHECK_INT(e.st.v[STAT_upstream_timeouts], 1);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 1);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

static void test_idle_timeout(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_STALL_BODY);
    env_init(&e);
    call_init(&c, &e, "GET", "/stall");
    c.req.timeout = 0.3;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.result, XFER_ERR_TIMEOUT);
    T_CHECK_INT(c.nhead, 1);
    T_CHECK_INT(c.body.len, SRV_CHUNK_LEN);
    T_CHECK_INT(e.st.v[STAT_upstream_timeouts], 1);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

static void test_connect_refused(void)
{
    struct env e;
    struct call c;
    env_init(&e);
    call_init(&c, &e, "GET", "/");
    snprintf(c.url, sizeof c.url, "http://127.0.0.1:%d/", closed_port());
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.result, XFER_ERR_CONNECT);
    T_CHECK_INT(xfer_result_status(c.result), 502);
    T_CHECK(c.errmsg[0] != '\0');
    T_CHECK_INT(c.nhead, 0);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 1);
    T_CHECK_INT(e.st.v[STAT_upstream_timeouts], 0);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

static void test_server_closes(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_CLOSE);
    run_one(&e, &c, "GET", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_ERR_IO);
    T_CHECK_INT(c.nhead, 0);
    T_CHECK(c.errmsg[0] != '\0');
    call_free(&c);
    env_free(&e);

    srv_reset(SRV_CLOSE_MID_BODY);
    run_one(&e, &c, "GET", NULL, 0, NULL, 0);
    T_CHECK_INT(c.result, XFER_ERR_IO);
    T_CHECK_INT(c.nhead, 1);
    T_CHECK_INT(c.body.len, 100);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 1);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

/* ---- resending on dead reused connections (pc_upstream.h, "Resending") ------ */

static void test_resend_rule(void)
{
    T_CHECK(xfer_resend_allowed(1, 0));
    T_CHECK(xfer_resend_allowed(1, 500));
    T_CHECK(xfer_resend_allowed(2, 0));  /* dead before anything was written: once */
    T_CHECK(!xfer_resend_allowed(2, 1)); /* a byte went out: the upstream may have it */
    T_CHECK(!xfer_resend_allowed(2, 512));
    T_CHECK(!xfer_resend_allowed(3, 0)); /* at most once */
    T_CHECK(!xfer_resend_allowed(7, 0));
}

/* Which attempts the hook kills the (held) connection of, and what it saw. */
struct killer {
    unsigned upto; /* attempts 1..upto */
    unsigned calls;
    int resets;
};

static void kill_before_write(void *arg, unsigned attempt, int local_port)
{
    struct killer *k = arg;
    k->calls++;
    if (attempt <= k->upto && srv_reset_held(local_port))
        k->resets++;
}

/* A POST whose reused connection is closed after the upstream read it: never resent. */
static void test_no_resend_after_request_sent(void)
{
    struct env e;
    struct call c1, c2;
    static const char body[] = "{\"model\":\"m\",\"prompt\":\"bill me once\"}";
    srv_reset(SRV_FIXED);
    env_init(&e);
    call_init(&c1, &e, "GET", "/warm");
    call_start(&c1);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c1.result, XFER_OK);
    int req0 = srv_get(&S.requests), acc0 = srv_get(&S.accepted);
    srv_set_mode(SRV_CLOSE); /* read the request, close without answering */
    call_init(&c2, &e, "POST", "/v1/completions");
    c2.req.body = body;
    c2.req.body_len = sizeof(body) - 1;
    call_start(&c2);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c2.result, XFER_ERR_IO);
    T_CHECK(strstr(c2.errmsg, "not resent") != NULL);
    /* libcurl alone would send it again on a new connection: that one is opened, and
     * abandoned before a byte of the request is written. */
    T_CHECK_INT(srv_get(&S.requests) - req0, 1);
    T_CHECK(srv_get(&S.accepted) - acc0 <= 1);
    T_CHECK_INT(e.st.v[STAT_upstream_retries], 0);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 1);
    expect_clean(&e);
    call_free(&c1);
    call_free(&c2);
    env_free(&e);
}

/* The reused connection dies right before the request is written: resent once, counted. */
static void test_resend_when_dead_before_write(void)
{
    struct env e;
    struct call c1, c2;
    struct killer k = {.upto = 1};
    static const char body[] = "{\"model\":\"m\",\"prompt\":\"resend me\"}";
    char want[64];
    srv_reset(SRV_FIXED);
    srv_set_hold(true);
    env_init(&e);
    call_init(&c1, &e, "GET", "/warm");
    call_start(&c1);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c1.result, XFER_OK);
    T_CHECK(srv_wait_held(1));
    int req0 = srv_get(&S.requests), acc0 = srv_get(&S.accepted);
    upstream_set_attempt_hook(e.u, kill_before_write, &k);
    call_init(&c2, &e, "POST", "/v1/completions");
    c2.req.body = body;
    c2.req.body_len = sizeof(body) - 1;
    call_start(&c2);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(k.resets, 1);
    T_CHECK_INT(k.calls, 2);
    T_CHECK_INT(c2.result, XFER_OK);
    T_CHECK_INT(c2.status, 200);
    snprintf(want, sizeof want, "got %zu bytes", sizeof(body) - 1);
    T_CHECK_STR(pc_buf_cstr(&c2.body), want);
    T_CHECK_INT(srv_get(&S.requests) - req0, 1); /* received exactly once */
    T_CHECK_INT(srv_get(&S.accepted) - acc0, 1); /* on a new connection */
    T_CHECK_INT(e.st.v[STAT_upstream_retries], 1);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 0);
    upstream_set_attempt_hook(e.u, NULL, NULL);
    srv_set_hold(false);
    expect_clean(&e);
    call_free(&c1);
    call_free(&c2);
    env_free(&e);
}

/* Two reused connections die in turn before the request: one resend, then a 502. */
static void test_resend_at_most_once(void)
{
    struct env e;
    struct call w1, w2, c;
    struct killer k = {.upto = 2};
    srv_reset(SRV_FIXED);
    srv_set_hold(true);
    env_init(&e);
    call_init(&w1, &e, "GET", "/warm1");
    call_init(&w2, &e, "GET", "/warm2");
    call_start(&w1);
    call_start(&w2); /* concurrent: two connections for the pool */
    T_CHECK(env_run(&e, 10));
    T_CHECK(srv_wait_held(2));
    int req0 = srv_get(&S.requests);
    upstream_set_attempt_hook(e.u, kill_before_write, &k);
    call_init(&c, &e, "POST", "/v1/completions");
    c.req.body = "{}";
    c.req.body_len = 2;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(k.resets, 2);
    T_CHECK_INT(c.result, XFER_ERR_IO);
    T_CHECK(strstr(c.errmsg, "died twice") != NULL);
    T_CHECK_INT(srv_get(&S.requests) - req0, 0);
    T_CHECK_INT(e.st.v[STAT_upstream_retries], 1);
    upstream_set_attempt_hook(e.u, NULL, NULL);
    srv_set_hold(false);
    expect_clean(&e);
    call_free(&w1);
    call_free(&w2);
    call_free(&c);
    env_free(&e);
}

static void test_abort_inside_callbacks(void)
{
    struct env e;
    struct call c;
    srv_reset(SRV_STALL_BODY);
    env_init(&e);
    call_init(&c, &e, "GET", "/abort-in-data");
    c.abort_in_data = true;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.ndata, 1);
    T_CHECK_INT(c.ndone, 0);
    T_CHECK(c.x == NULL);
    T_CHECK_INT(e.st.v[STAT_upstream_errors], 0);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);

    srv_reset(SRV_STALL_BODY);
    env_init(&e);
    call_init(&c, &e, "GET", "/abort-in-head");
    c.abort_in_head = true;
    call_start(&c);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c.nhead, 1);
    T_CHECK_INT(c.ndata, 0);
    T_CHECK_INT(c.ndone, 0);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

struct late_abort {
    struct call *c;
    int requests0;
    struct event *ev;
};

/* Abort once the server has the request (polls instead of guessing a delay). */
static void on_late_abort(evutil_socket_t fd, short what, void *arg)
{
    struct late_abort *la = arg;
    struct timeval tv = {0, 10 * 1000};
    (void)fd;
    (void)what;
    if (srv_get(&S.requests) == la->requests0) {
        evtimer_add(la->ev, &tv);
        return;
    }
    xfer_abort(&la->c->x);
    call_stop_soon(la->c);
}

static void test_abort_outside(void)
{
    struct env e;
    struct call c1, c2;
    struct late_abort la;
    struct timeval now = {0, 0};
    srv_reset(SRV_DELAY_HEAD);
    env_init(&e);
    call_init(&c1, &e, "GET", "/abort-now");
    call_init(&c2, &e, "GET", "/abort-later");
    xfer_abort(NULL);
    xfer_abort(&c1.x); /* NULL: nothing */
    call_start(&c1);
    T_CHECK(c1.x != NULL);
    xfer_abort(&c1.x); /* before the loop ever ran */
    T_CHECK(c1.x == NULL);
    call_start(&c2);
    la.c = &c2;
    la.requests0 = srv_get(&S.requests);
    la.ev = evtimer_new(e.base, on_late_abort, &la);
    evtimer_add(la.ev, &now);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c1.ndone + c2.ndone, 0);
    T_CHECK(c2.x == NULL);
    T_CHECK_INT(e.st.v[STAT_upstream_requests], 2);
    expect_clean(&e);
    event_free(la.ev);
    call_free(&c1);
    call_free(&c2);
    env_free(&e);
}

/* Destroying the upstream with transfers in flight (one paused) runs no callback. */
static void test_destroy_active(void)
{
    struct env e;
    struct call c1, c2;
    srv_reset(SRV_STALL_BODY);
    env_init(&e);
    call_init(&c1, &e, "GET", "/stalled");
    c1.stop_on_head = true;
    call_start(&c1);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c1.nhead, 1);

    srv_set_mode(SRV_CHUNKED); /* c1's server thread still stalls */
    call_init(&c2, &e, "GET", "/paused");
    c2.pauses = 1;
    c2.resume_after = -1;
    c2.stop_on_pause = true;
    call_start(&c2);
    T_CHECK(env_run(&e, 10));
    T_CHECK_INT(c2.npause, 1);
    T_CHECK_INT(upstream_active(e.u), 2);
    T_CHECK_INT(e.st.v[STAT_upstream_active], 2);

    upstream_destroy(&e.u);
    T_CHECK(e.u == NULL);
    T_CHECK_INT(e.st.v[STAT_upstream_active], 0);
    env_settle(&e, 50);
    T_CHECK_INT(c1.ndone + c2.ndone, 0);
    call_free(&c1);
    call_free(&c2);
    env_free(&e);
}

static void test_invalid_requests(void)
{
    struct env e;
    struct call c;
    const struct xfer_header crlf[] = {{"X-A", "a\r\nX-Injected: 1"}};
    const struct xfer_header badname[] = {{"X A", "a"}};
    /* The same field-value rules as httpd: no controls at all, not only CR and LF. */
    const struct xfer_header ctl[] = {{"X-A", "a\x01"}};
    const struct xfer_header del[] = {{"X-A", "a\x7f"}};
    const struct xfer_header slash[] = {{"X/A", "a"}};
    env_init(&e);
    call_init(&c, &e, "GE T", "/");
    call_start(&c);
    T_CHECK(c.x == NULL);
    c.req.method = "GET";
    c.req.headers = crlf;
    c.req.nheaders = 1;
    call_start(&c);
    T_CHECK(c.x == NULL);
    c.req.headers = badname;
    call_start(&c);
    T_CHECK(c.x == NULL);
    c.req.headers = ctl;
    call_start(&c);
    T_CHECK(c.x == NULL);
    c.req.headers = del;
    call_start(&c);
    T_CHECK(c.x == NULL);
    c.req.headers = slash;
    call_start(&c);
    T_CHECK(c.x == NULL);
    T_CHECK_INT(e.st.v[STAT_upstream_requests], 0);
    expect_clean(&e);
    call_free(&c);
    env_free(&e);
}

/* Count the lines of path that contain needle. */
static int count_lines(const char *path, const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/*
 * A response head with invalid fields: they are dropped (never reach on_head),
 * valid ones around them survive, and the log gets one line, not one per field.
 */
static void test_bad_response_headers(void)
{
    static const char want[] = "X-Good: 1\nX-Obs: caf\xc3\xa9\nX-Fold: a b\nX-Trail: 4\n"
                               "X-Last: ok\nContent-Length: 5\n";
    char path[] = "/tmp/test_upstream_log_XXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    log_init(PC_LOG_DEBUG, path, NULL, NULL, 0);
    struct env e;
    struct call c;
    srv_reset(SRV_BAD_HEADERS);
    run_one(&e, &c, "GET", NULL, 0, NULL, 0);
    log_teardown();
    log_init(PC_LOG_NOTICE, NULL, NULL, NULL, 0);
    T_CHECK_STR(c.errmsg, "");
    T_CHECK_INT(c.result, XFER_OK);
    T_CHECK_INT(c.status, 200);
    T_CHECK_STR(pc_buf_cstr(&c.hdrs), want);
    T_CHECK_STR(pc_buf_cstr(&c.body), "hello");
    T_CHECK_INT(count_lines(path, "dropped 205 invalid response header"), 1);
    T_CHECK_INT(count_lines(path, "upstream"), 1);
    call_free(&c);
    env_free(&e);
    close(fd);
    unlink(path);
}

static void test_result_status(void)
{
    T_CHECK_INT(xfer_result_status(XFER_ERR_TIMEOUT), 504);
    T_CHECK_INT(xfer_result_status(XFER_ERR_CONNECT), 502);
    T_CHECK_INT(xfer_result_status(XFER_ERR_IO), 502);
    T_CHECK_INT(xfer_result_status(XFER_ERR_INTERNAL), 502);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setenv("no_proxy", "*", 1); /* loopback tests must not go through an environment proxy */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (srv_start() < 0) {
        perror("test server");
        return 1;
    }
    T_RUN(test_get_roundtrip);
    T_RUN(test_post_roundtrip);
    T_RUN(test_head);
    T_RUN(test_keepalive);
    T_RUN(test_start_from_callback);
    T_RUN(test_interim_skipped);
    T_RUN(test_chunked);
    T_RUN(test_pause_resume);
    T_RUN(test_paused_does_not_time_out);
    T_RUN(test_steady_body_outlives_timeout);
    T_RUN(test_timeout_before_head);
    T_RUN(test_idle_timeout);
    T_RUN(test_connect_refused);
    T_RUN(test_server_closes);
    T_RUN(test_resend_rule);
    T_RUN(test_no_resend_after_request_sent);
    T_RUN(test_resend_when_dead_before_write);
    T_RUN(test_resend_at_most_once);
    T_RUN(test_abort_inside_callbacks);
    T_RUN(test_abort_outside);
    T_RUN(test_destroy_active);
    T_RUN(test_invalid_requests);
    T_RUN(test_bad_response_headers);
    T_RUN(test_result_status);
    srv_stop();
    curl_global_cleanup();
    T_DONE();
}
