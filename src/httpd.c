/*
 * httpd.c - the HTTP/1.1 server clients reach the proxy through (see
 * pc_httpd.h), on libevent bufferevents. It owns the listener of one worker
 * (never the shared listening fd), every client connection accepted by it,
 * and the struct httpd_req of the request each connection is reading or
 * handling. The request head parser (httpd_parse_head) is pure and fuzzed.
 *
 * One connection's state machine. Every transition out of HANDLER and every
 * free goes through the connection's deferred event (conn_deferred_cb), so no
 * object is freed inside a libevent callback or under the handler's feet.
 *
 *  accept --> IDLE --first byte--> HEAD --head--> BODY --body--> HANDLER
 *              ^                    |  \__ no body, or body too large __^   |
 *              |                    | bad head: httpd's own 4xx/5xx         |
 *              |                    v                                       |
 *              |                 CLOSING <------ reply done, no keep-alive -+
 *              |                    | output flushed: shutdown(SHUT_WR)     |
 *              |                    v                                       |
 *              |                 LINGER: discard input (2 s, 4 MiB at most) |
 *              |                    | EOF or timeout                        |
 *              |                    v                                       |
 *              |                  DEAD <-- EOF, error or timeout elsewhere  |
 *              |                    (unfinished request: close callback     |
 *              |                     once; then request and conn are freed) |
 *              +------ NEXT <------------- reply done, keep-alive ----------+
 *                 (WAIT_OUT first while over 64 KiB of output is queued)
 *
 * While HANDLER, input is still read (at most 64 KiB of it) so that EOF is
 * seen: the client is gone, its request's close callback runs.
 *
 * Timers: read_timeout runs from the accept over a connection's whole first
 * request (the wait for its first byte included), and from the first byte
 * for later ones, whose wait is bounded by idle_timeout.
 *
 * Request bodies live in a buffer of their own that doubles as bytes arrive
 * (never past the declared length), not allocated whole when the head comes.
 * The capacity of every body buffer, times conf.body_charge (the copies the
 * handler will make of it), and what the handler charged a request on top
 * (httpd_req_charge) count until the request is freed, in h->body_bytes and
 * in the process-wide total (g.body_bytes); a growth or a charge that would
 * take the total past conf.max_body_buffered is refused (a 503).
 *
 * Process-wide state (struct httpd_global g, below) is what all workers'
 * httpds share: the connection and body-byte totals (atomics), the
 * per-address connection counts (a hash table under a mutex, touched only on
 * accept and close, and only with max_connections_per_ip set), and the
 * memory-trim bookkeeping. The reserve is split between the httpds (each
 * holds its share in a list, oldest first), so that making room in it never
 * touches another thread's connection. Admission of a new connection:
 *
 *   accept ─▶ under max_connections and the address's limit ─yes─▶ regular
 *             (exempt addresses: max_connections only)?
 *                 │ no
 *                 ▼
 *             room in this httpd's share of the reserve, or a reserve
 *             connection still waiting for its head (the oldest is closed
 *             and counted: churn cannot hold a place)?
 *                 │ yes                                  │ no: every place
 *                 ▼                                      ▼ is answering
 *             RESERVE: read at once (a probe's request    close at once
 *             is usually there already); head within 2 s; (counted)
 *             reserve paths answered, else 503; close
 */
#include "pc_httpd.h"
#include "pc_conf.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#define HTTPD_MAGIC 0x48545044u /* "HTPD" */
#define CONN_MAGIC  0x434f4e4eu /* "CONN" */
#define REQ_MAGIC   0x52455155u /* "REQU" */

#define READ_AHEAD      (64u * 1024)       /* bytes buffered while a request is handled */
#define OUT_PAUSE       (64u * 1024)       /* queued output that holds back the next request */
#define EXPAND_MAX      (64u * 1024)       /* replies up to this size go out in one chain */
#define LINGER_SECONDS  2.0                /* lingering close: how long to discard input */
#define LINGER_BYTES    (4u * 1024 * 1024) /* ... and how much of it */
#define CHUNK_LINE_MAX  4096               /* chunk-size and trailer lines */
#define HEAD_PROBE      256                /* first bytes of an unfinished head checked early */
#define BODY_MIN_ALLOC  (16u * 1024)       /* first allocation of a request body */
#define BUDGET_WARN_US  (60u * 1000000)    /* at most one budget warning a minute */
#define ACCEPT_PAUSE_US 100000             /* after EMFILE and friends */
#define SERVER_NAME_MAX 128
#define HEAD_BUF        512                /* status line + httpd's own headers */
#define IP_BUCKETS      1024               /* per-address connection counts */
#define TRIM_BUFFER_MIN (1u * 1024 * 1024) /* body buffers this large count towards a trim */
#define TRIM_FREED_MIN  (8u * 1024 * 1024) /* ... once this much was freed since the last */
#define TRIM_DELAY_MS   1000               /* after the first such free; again while busy */
#define RETRY_AFTER     "1"                /* seconds, on httpd's own 503s */

/* Defaults for zero fields of struct httpd_conf. */
#define DEF_MAX_HEADER_SIZE (32u * 1024)
#define DEF_MAX_HEADERS     100
#define DEF_MAX_BODY_SIZE   (16u * 1024 * 1024)
#define DEF_READ_TIMEOUT    60.0
#define DEF_IDLE_TIMEOUT    75.0
#define DEF_WRITE_TIMEOUT   60.0
#define DEF_MAX_CONNECTIONS 10000

enum conn_state {
    C_IDLE,     /* between requests: nothing but blank lines received */
    C_HEAD,     /* reading a request head */
    C_BODY,     /* reading a request body */
    C_HANDLER,  /* request handed to the handler, reply not finished */
    C_NEXT,     /* reply finished; the deferred event moves on to the next request */
    C_WAIT_OUT, /* too much output queued to start the next pipelined request */
    C_CLOSING,  /* flushing the last reply, then lingering close */
    C_LINGER,   /* write side shut; discarding input until EOF or timeout */
    C_DEAD,     /* to be freed by the deferred event */
};

enum chunk_state {
    CH_SIZE,     /* expecting a chunk-size line */
    CH_DATA,     /* inside chunk data */
    CH_DATA_END, /* expecting the CRLF after chunk data */
    CH_TRAILER,  /* after the last chunk: trailer lines up to an empty line */
};

/* How a reply's body is delimited. */
enum frame {
    FRAME_LENGTH,  /* Content-Length */
    FRAME_CHUNKED, /* Transfer-Encoding: chunked */
    FRAME_CLOSE,   /* until the connection closes (HTTP/1.0 stream) */
    FRAME_NONE,    /* no body at all (1xx, 204, 304) */
};

/* Body framing of a request, derived from its head. */
struct framing {
    bool has_length;
    bool chunked;
    uint64_t length;
};

struct httpd {
    unsigned magic;
    struct event_base *base;
    struct httpd_conf conf; /* defaults filled in */
    char *server_name;      /* owned copy, or NULL */
    httpd_handler_fn *handler;
    void *handler_arg;
    struct stats *st;
    struct evconnlistener *listener; /* NULL once stopped */
    struct event *accept_timer;      /* re-enables the listener after an accept error */
    struct httpd_conn *conns;        /* every connection, DEAD ones included */
    size_t nconns;
    size_t nactive;    /* requests handed to the handler and not finished */
    size_t body_bytes; /* charged for this httpd's requests (g.body_bytes: all httpds) */
    struct httpd_conn *res_old, *res_new; /* reserve connections, oldest first */
    size_t nreserve;                      /* ... and their count */
    uint64_t budget_warn_us;              /* pc_mono_us() of the last "budget used up" warning */
    struct event *trim_ev;                /* hands memory back after large bodies were freed */
    bool stopping;
    struct httpd_header_span *spans; /* parser scratch, conf.max_headers entries */
    char *rbuf;                      /* READ_AHEAD bytes: conn_readable_cb reads into it */
    time_t date_sec;
    size_t date_len;
    char date[40];
};

struct httpd_conn {
    unsigned magic;
    struct httpd *h;
    struct httpd_conn *prev, *next;
    struct bufferevent *bev;         /* output, write timeout; its input buffer is filled by rev */
    struct event *rev;               /* readable: conn_readable_cb */
    struct evbuffer_cb_entry *in_cb; /* input drained: reading resumes (conn_input_cb) */
    struct event *timer;             /* read, idle or linger deadline */
    struct event *defer;             /* conn_deferred_cb, made active: runs later this turn */
    enum conn_state state;
    struct httpd_req *req; /* being read or handled; owned */
    size_t scan_off;       /* head bytes already searched for the blank line */
    int scan_state;
    size_t probed;      /* bytes of the unfinished head checked by conn_probe_head */
    uint64_t body_left; /* Content-Length or current chunk bytes still to read */
    size_t body_limit;  /* capacity the body buffer may grow to (its length + NUL) */
    bool first_req;     /* reading the connection's first request: timed from the accept */
    enum chunk_state chunk;
    size_t trailer_bytes;
    size_t linger_bytes;
    bool eof;
    bool read_on;     /* the state machine reads: conn_read_set */
    bool read_armed;  /* rev is added: read_on and the input is under read_high */
    bool write_armed; /* EV_WRITE enabled: the bufferevent is writing queued output */
    bool flush_soon;  /* output queued for a write at the end of this loop turn */
    bool regular;     /* counted in g.conns */
    bool in_reserve;  /* in h's reserve list (a reserve connection not yet evicted) */
    struct httpd_conn *res_prev, *res_next; /* h's reserve list, while in_reserve */
    bool ip_held;                           /* counted in g's per-address table under ip */
    bool over_ip;                           /* in the reserve because of max_connections_per_ip */
    bool refused;                           /* counted as refused already */
    unsigned char ip[16];                   /* client address, IPv4 mapped into IPv6 */
    struct pc_buf hdrs;                     /* reply headers added by the handler, reused */
    struct sockaddr_storage sa;
    socklen_t salen;
    char peer[INET6_ADDRSTRLEN + 16]; /* formatted on first use */
};

struct httpd_req {
    unsigned magic;
    struct httpd_conn *conn;
    const char *method, *target, *path, *query;
    struct httpd_header *headers;
    size_t nheaders;
    char *body; /* the complete body (bodybuf.data), or NULL */
    size_t body_len;
    struct pc_buf bodybuf; /* body being read; conf.body_charge x its cap counts in h->body_bytes */
    size_t charged;        /* what the handler charged on top (httpd_req_charge) */
    enum httpd_req_error error;
    int minor;
    bool is_head;
    bool no_body_out; /* streamed reply with a status that has no body (1xx, 204, 304) */
    bool keep_alive;  /* what the client asked for, then what the reply promised */
    bool expect_continue;
    bool expect_bad; /* an expectation other than 100-continue: 417 */
    bool chunked_in;
    bool dispatched;
    bool started; /* reply head written */
    bool chunked_out;
    bool finished;
    bool gone; /* client went away before the reply finished */
    bool close_called;
    uint64_t start_us;
    httpd_req_fn *close_fn;
    void *close_arg;
    httpd_req_fn *drain_fn;
    void *drain_arg;
    size_t drain_low;
    /* headers[], the head copy and the path copy follow */
};

/* One client address with regular connections open. */
struct ip_slot {
    struct ip_slot *next;
    unsigned char ip[16];
    size_t count;
};

/* What every httpd of the process shares (see the top of the file). */
static struct httpd_global {
    size_t conns;       /* regular connections (atomic) */
    size_t httpds;      /* httpds created and not destroyed, which share the reserve (atomic) */
    size_t body_bytes;  /* charged for requests, all httpds: max_body_buffered's use (atomic) */
    size_t freed_large; /* large body buffers freed since the last trim (atomic) */
    uint64_t trims;     /* malloc_trim calls (atomic) */
    struct httpd_limits limits;
    pthread_mutex_t ip_mu;
    struct ip_slot *ip_table[IP_BUCKETS];
} g = {.limits = {.reserve = HTTPD_RESERVE_DEFAULT}, .ip_mu = PTHREAD_MUTEX_INITIALIZER};

static void conn_process(struct httpd_conn *c);
static void conn_kill(struct httpd_conn *c);
static const char *conn_peer(struct httpd_conn *c);
static void conn_start_close(struct httpd_conn *c);
static void conn_dispatch(struct httpd_conn *c);
static void conn_schedule(struct httpd_conn *c);
static void reserve_unlink(struct httpd_conn *c);

static void stats_add_opt(struct stats *st, enum stat_id id, int64_t n)
{
    if (st != NULL)
        stats_add(st, id, n);
}

/* ------------------------------------------------------------------------ */
/* Request head parser (pure)                                                */

/* request-target bytes: visible ASCII and obs-text, no space or controls. */
static bool is_target_char(char ch)
{
    unsigned char u = (unsigned char)ch;
    return u > 0x20 && u != 0x7f;
}

static bool is_ows(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* a[0..alen) equals the literal lit, ignoring ASCII case. */
static bool span_caseeq(const char *a, size_t alen, const char *lit)
{
    return alen == strlen(lit) && pc_strncaseeq(a, lit, alen);
}

/*
 * Line end at buf[i]: returns the offset after CRLF or LF, 0 if more bytes
 * are needed, -400 if buf[i] is anything else (a bare CR included).
 */
static long parse_eol(const char *buf, size_t len, size_t i)
{
    if (i == len)
        return 0;
    if (buf[i] == '\n')
        return (long)i + 1;
    if (buf[i] != '\r')
        return -400;
    if (i + 1 == len)
        return 0;
    return buf[i + 1] == '\n' ? (long)i + 2 : -400;
}

/* "HTTP/1.1" and friends at buf[i..i+8): -400 malformed, -505 unsupported, else minor. */
static int parse_version(const char *v)
{
    if (memcmp(v, "HTTP/", 5) != 0 || v[6] != '.')
        return -400;
    if (v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9')
        return -400;
    if (v[5] != '1' || v[7] > '1')
        return -505;
    return v[7] - '0';
}

/* "OPTIONS *": the asterisk form, which RFC 9112 section 3.2.4 allows for OPTIONS alone. */
static bool is_options_asterisk(const struct httpd_head *hd)
{
    return hd->method_len == 7 && memcmp(hd->method, "OPTIONS", 7) == 0 && hd->target_len == 1 &&
           hd->target[0] == '*';
}

/*
 * An absolute-form target "http://authority/path?query" (or https): the offset of its path, 0
 * if it is no such target (another scheme, no path, an authority holding '?' or '#').
 */
static size_t absolute_path(const char *t, size_t n)
{
    size_t i;
    if (n > 7 && pc_strncaseeq(t, "http://", 7))
        i = 7;
    else if (n > 8 && pc_strncaseeq(t, "https://", 8))
        i = 8;
    else
        return 0;
    size_t host = i;
    while (i < n && t[i] != '/' && t[i] != '?' && t[i] != '#')
        i++;
    return i < n && i > host && t[i] == '/' ? i : 0;
}

/*
 * Whether the path of the origin-form target t (up to its '?') has a dot
 * segment: "." or "..", a dot spelled "%2e" too, and '\', '#' or ';' taken as a
 * separator, as some servers and CDNs read them (Java servlet containers read
 * "/..;/" as "/../": a path parameter after the dots). The upstream, or what stands
 * in front of it, removes dot segments (RFC 3986 section 5.2.4) from the URL
 * the proxy made by appending the target to its base URL: "/../other/x"
 * reached a path outside the base URL's path ("https://gw/acct/openai" ->
 * "https://gw/acct/other/x"), with upstream-key's credential. Clients remove
 * dot segments before they send (RFC 3986 section 5.2), so no API call has one.
 */
static bool has_dot_segment(const char *t, size_t n)
{
    size_t i = 0;
    while (i < n && t[i] != '?') {
        size_t dots = 0;
        bool other = false;
        for (i++;
             i < n && t[i] != '/' && t[i] != '\\' && t[i] != '?' && t[i] != '#' && t[i] != ';';) {
            if (t[i] == '.') {
                dots++;
                i++;
            } else if (t[i] == '%' && n - i >= 3 && t[i + 1] == '2' && (t[i + 2] | 0x20) == 'e') {
                dots++;
                i += 3;
            } else {
                other = true;
                i++;
            }
        }
        if (!other && (dots == 1 || dots == 2))
            return true;
    }
    return false;
}

/* method SP request-target SP HTTP-version EOL, starting at pos. */
static long parse_request_line(const char *buf, size_t len, size_t pos, struct httpd_head *hd)
{
    size_t i = pos;
    while (i < len && pc_http_tchar(buf[i]))
        i++;
    if (i == len)
        return 0;
    if (buf[i] != ' ' || i == pos)
        return -400;
    hd->method = buf + pos;
    hd->method_len = i - pos;

    size_t t = ++i;
    while (i < len && is_target_char(buf[i]))
        i++;
    if (i == len)
        return 0;
    if (buf[i] != ' ' || i == t)
        return -400;
    hd->target = buf + t;
    hd->target_len = i - t;

    i++;
    if (len - i < 8)
        return 0;
    int minor = parse_version(buf + i);
    long end = parse_eol(buf, len, i + 8);
    if (end <= 0)
        return end;
    if (minor < 0)
        return minor;
    /*
     * Origin form ("/path?query"): the proxy appends the target to an
     * upstream base URL, so anything else ("@host/x", ".evil.com/x") could
     * send the call to another host. The absolute form, which RFC 9112
     * section 3.2.2 says a server must accept (a client configured to use
     * the proxy as an HTTP proxy sends it), is taken as its path: its scheme
     * and authority are dropped, never followed. "OPTIONS *" (asterisk form,
     * a ping of the server itself) never reaches the handler: httpd answers
     * it (conn_options_asterisk). Nor does a path with a dot segment, which
     * would leave the base URL's path (has_dot_segment).
     */
    if (buf[t] != '/' && !is_options_asterisk(hd)) {
        size_t at = absolute_path(hd->target, hd->target_len);
        if (at == 0)
            return -400;
        hd->target += at;
        hd->target_len -= at;
    }
    if (hd->target[0] == '/' && has_dot_segment(hd->target, hd->target_len))
        return -400;
    hd->minor_version = minor;
    return end;
}

/* One "name: value" line at pos (not blank, not folded). */
static long parse_header_line(const char *buf, size_t len, size_t pos, struct httpd_head *hd)
{
    size_t i = pos;
    while (i < len && pc_http_tchar(buf[i]))
        i++;
    if (i == len)
        return 0;
    if (buf[i] != ':' || i == pos) /* no colon, space before it, bad byte */
        return -400;
    size_t name_end = i++;
    while (i < len && is_ows(buf[i]))
        i++;
    size_t vstart = i;
    const char *nl = i < len ? memchr(buf + i, '\n', len - i) : NULL;
    size_t lf = nl != NULL ? (size_t)(nl - buf) : len;
    size_t vend = lf;
    if (vend > vstart && buf[vend - 1] == '\r') /* CRLF, or a CR whose LF is yet to come */
        vend--;
    if (!pc_http_field_value(buf + vstart, vend - vstart)) /* bare CR, NUL, other controls */
        return -400;
    if (nl == NULL)
        return 0;
    while (vend > vstart && is_ows(buf[vend - 1]))
        vend--;
    if (hd->nheaders == hd->max_headers)
        return -431;
    struct httpd_header_span *s = &hd->headers[hd->nheaders++];
    s->name = buf + pos;
    s->name_len = name_end - pos;
    s->value = buf + vstart;
    s->value_len = vend - vstart;
    return (long)lf + 1;
}

/* 1*DIGIT up to INT64_MAX. */
static int parse_length(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Content-Length / Transfer-Encoding rules (RFC 9112 section 6). 0 or -status. */
static int parse_framing(const struct httpd_head *hd, struct framing *fr)
{
    size_t te_count = 0;
    bool te_chunked = true;
    memset(fr, 0, sizeof(*fr));
    for (size_t i = 0; i < hd->nheaders; i++) {
        const struct httpd_header_span *s = &hd->headers[i];
        if (span_caseeq(s->name, s->name_len, "content-length")) {
            uint64_t v;
            if (parse_length(s->value, s->value_len, &v) < 0)
                return -400;
            if (fr->has_length && v != fr->length)
                return -400;
            fr->has_length = true;
            fr->length = v;
        } else if (span_caseeq(s->name, s->name_len, "transfer-encoding")) {
            te_count++;
            if (!span_caseeq(s->value, s->value_len, "chunked"))
                te_chunked = false;
        }
    }
    if (te_count == 0)
        return 0;
    if (fr->has_length || hd->minor_version == 0)
        return -400; /* smuggling vectors: both framings, or TE in HTTP/1.0 */
    if (!te_chunked || te_count > 1)
        return -501;
    fr->chunked = true;
    return 0;
}

/*
 * Empty lines allowed before the request line (RFC 9112 section 2.2): *pos is
 * set past them. 1 ok, 0 if more bytes are needed, -400.
 */
static long skip_blank_lines(const char *buf, size_t len, size_t *pos)
{
    size_t p = 0;
    while (p < len && (buf[p] == '\r' || buf[p] == '\n')) {
        long e = parse_eol(buf, len, p);
        if (e <= 0)
            return e;
        p = (size_t)e;
    }
    *pos = p;
    return p < len;
}

static long parse_head(const char *buf, size_t len, struct httpd_head *hd, struct framing *fr)
{
    size_t pos = 0;
    hd->nheaders = 0;
    long r = skip_blank_lines(buf, len, &pos);
    if (r <= 0)
        return r;
    r = parse_request_line(buf, len, pos, hd);
    if (r <= 0)
        return r;
    for (pos = (size_t)r;;) {
        if (pos == len)
            return 0;
        if (buf[pos] == '\r' || buf[pos] == '\n') {
            long end = parse_eol(buf, len, pos);
            if (end <= 0)
                return end;
            int rc = parse_framing(hd, fr);
            return rc < 0 ? rc : end;
        }
        if (is_ows(buf[pos]))
            return -400; /* obs-fold */
        r = parse_header_line(buf, len, pos, hd);
        if (r <= 0)
            return r;
        pos = (size_t)r;
    }
}

long httpd_parse_head(const char *buf, size_t len, struct httpd_head *head)
{
    struct framing fr;
    return parse_head(buf, len, head, &fr);
}

/* reg-name and IPv4address bytes (RFC 3986): unreserved, pct-encoded, sub-delims. */
static bool host_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch != '\0' && strchr("-._~%!$&'()*+,;=", ch) != NULL);
}

/* uri-host [ ":" port ]; the host may be empty, or an IP-literal in brackets. */
static bool valid_host(const char *v, size_t n)
{
    size_t i = 0;
    if (n > 0 && v[0] == '[') {
        const char *close = memchr(v, ']', n);
        if (close == NULL || close == v + 1)
            return false;
        for (const char *p = v + 1; p < close; p++)
            if (!host_char(*p) && *p != ':')
                return false;
        i = (size_t)(close - v) + 1;
    } else {
        while (i < n && host_char(v[i]))
            i++;
    }
    if (i < n && v[i++] != ':')
        return false;
    for (; i < n; i++)
        if (v[i] < '0' || v[i] > '9')
            return false;
    return true;
}

int httpd_head_check_host(const struct httpd_head *hd)
{
    const struct httpd_header_span *host = NULL;
    for (size_t i = 0; i < hd->nheaders; i++) {
        if (!span_caseeq(hd->headers[i].name, hd->headers[i].name_len, "host"))
            continue;
        if (host != NULL)
            return -400; /* two Host lines, in any version */
        host = &hd->headers[i];
    }
    if (host == NULL)
        return hd->minor_version >= 1 ? -400 : 0;
    return valid_host(host->value, host->value_len) ? 0 : -400;
}

/* ------------------------------------------------------------------------ */
/* Reply formatting                                                          */

static const struct {
    int status;
    const char *reason;
} reasons[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {206, "Partial Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {402, "Payment Required"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {421, "Misdirected Request"},
    {422, "Unprocessable Content"},
    {425, "Too Early"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {499, "Client Closed Request"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
    {507, "Insufficient Storage"},
    {511, "Network Authentication Required"},
};

const char *httpd_reason(int status)
{
    size_t lo = 0, hi = PC_ARRAY_LEN(reasons);
    while (lo < hi) { /* the table is sorted by status */
        size_t mid = (lo + hi) / 2;
        if (reasons[mid].status == status)
            return reasons[mid].reason;
        if (reasons[mid].status < status)
            lo = mid + 1;
        else
            hi = mid;
    }
    return "Unknown";
}

static size_t put_bytes(char *buf, size_t n, const char *s, size_t len)
{
    memcpy(buf + n, s, len);
    return n + len;
}

#define PUT_LIT(buf, n, lit) put_bytes((buf), (n), (lit), sizeof(lit) - 1)

static size_t put_u64(char *buf, size_t n, uint64_t v)
{
    char d[21];
    return put_bytes(buf, n, d, pc_u64_dec(v, d));
}

static size_t put_2d(char *buf, size_t n, int v)
{
    buf[n++] = (char)('0' + v / 10 % 10);
    buf[n++] = (char)('0' + v % 10);
    return n;
}

/* IMF-fixdate for the current second, formatted once per second per httpd. */
static void date_refresh(struct httpd *h)
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    struct timeval tv;
    struct tm tm;
    event_base_gettimeofday_cached(h->base, &tv);
    if (h->date_len != 0 && tv.tv_sec == h->date_sec)
        return;
    time_t t = tv.tv_sec;
    gmtime_r(&t, &tm);
    size_t n = put_bytes(h->date, 0, days + 3 * tm.tm_wday, 3);
    n = PUT_LIT(h->date, n, ", ");
    n = put_2d(h->date, n, tm.tm_mday);
    h->date[n++] = ' ';
    n = put_bytes(h->date, n, months + 3 * tm.tm_mon, 3);
    h->date[n++] = ' ';
    n = put_u64(h->date, n, (uint64_t)(tm.tm_year + 1900));
    h->date[n++] = ' ';
    n = put_2d(h->date, n, tm.tm_hour);
    h->date[n++] = ':';
    n = put_2d(h->date, n, tm.tm_min);
    h->date[n++] = ':';
    n = put_2d(h->date, n, tm.tm_sec);
    n = PUT_LIT(h->date, n, " GMT");
    h->date_len = n;
    h->date_sec = tv.tv_sec;
}

/* Status line and httpd's own headers into buf (HEAD_BUF bytes); returns the length. */
static size_t format_head(struct httpd *h, char *buf, int status, enum frame fr, uint64_t clen,
                          bool keep_alive)
{
    const char *reason = httpd_reason(status);
    size_t n = PUT_LIT(buf, 0, "HTTP/1.1 ");
    n = put_u64(buf, n, (uint64_t)status);
    buf[n++] = ' ';
    n = put_bytes(buf, n, reason, strlen(reason));
    n = PUT_LIT(buf, n, "\r\nDate: ");
    date_refresh(h);
    n = put_bytes(buf, n, h->date, h->date_len);
    n = PUT_LIT(buf, n, "\r\n");
    if (h->server_name != NULL) {
        n = PUT_LIT(buf, n, "Server: ");
        n = put_bytes(buf, n, h->server_name, strlen(h->server_name));
        n = PUT_LIT(buf, n, "\r\n");
    }
    if (fr == FRAME_LENGTH) {
        n = PUT_LIT(buf, n, "Content-Length: ");
        n = put_u64(buf, n, clen);
        n = PUT_LIT(buf, n, "\r\n");
    } else if (fr == FRAME_CHUNKED) {
        n = PUT_LIT(buf, n, "Transfer-Encoding: chunked\r\n");
    }
    if (keep_alive)
        n = PUT_LIT(buf, n, "Connection: keep-alive\r\n");
    else
        n = PUT_LIT(buf, n, "Connection: close\r\n");
    return n;
}

/*
 * Write queued output now, as bufferevent_writecb would: the bufferevent
 * keeps the front of its output frozen against everybody else. 0, or -1 if
 * the connection failed.
 */
static int conn_write_now(struct httpd_conn *c, struct evbuffer *out)
{
    evbuffer_unfreeze(out, 1);
    int n = evbuffer_write(out, bufferevent_getfd(c->bev));
    int err = errno;
    evbuffer_freeze(out, 1);
    if (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
        return -1;
    return 0;
}

/*
 * Output was queued. EV_WRITE stays disabled while nothing is pending, so
 * that output the socket takes at once costs one write and no epoll_ctl
 * calls: a finished reply (now) is written right here; a stream's head and
 * chunks (not now) once the callbacks of this loop turn have run
 * (conn_deferred_cb), so the chunks one turn brings leave in one write.
 * What the socket does not take is left to the bufferevent (write callback,
 * write timeout), which conn_write_cb disarms again once the output is
 * empty. Writes use writev: SIGPIPE must be ignored.
 */
static void conn_flush(struct httpd_conn *c, bool now)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (c->write_armed || evbuffer_get_length(out) == 0)
        return;
    if (!now) {
        c->flush_soon = true;
        conn_schedule(c);
        return;
    }
    if (conn_write_now(c, out) < 0) {
        log_debug("httpd: %s: write failed", conn_peer(c));
        conn_kill(c); /* the client is gone */
        return;
    }
    if (evbuffer_get_length(out) != 0) {
        c->write_armed = true;
        bufferevent_enable(c->bev, EV_WRITE);
    }
}

/*
 * Queue the reply head: status line, httpd's headers, the handler's headers
 * (consumed), blank line. body_hint bytes of body follow right after, so
 * small replies land in one chain.
 */
static void write_head(struct httpd_conn *c, int status, enum frame fr, uint64_t clen,
                       bool keep_alive, size_t body_hint)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    char buf[HEAD_BUF];
    if (status < 100 || status > 999)
        status = 500;
    size_t n = format_head(c->h, buf, status, fr, clen, keep_alive);
    size_t total = n + c->hdrs.len + 2 + body_hint;
    if (total <= EXPAND_MAX)
        evbuffer_expand(out, total);
    evbuffer_add(out, buf, n);
    if (c->hdrs.len != 0)
        evbuffer_add(out, c->hdrs.data, c->hdrs.len);
    evbuffer_add(out, "\r\n", 2);
    pc_buf_reset(&c->hdrs);
}

/* httpd's own refusals. */
enum own_error {
    OWN_MALFORMED,
    OWN_HOST,
    OWN_EXPECT,
    OWN_HEADERS,
    OWN_TARGET,
    OWN_CODING,
    OWN_BODY_BUDGET,
    OWN_BUSY,
    OWN_VERSION,
};

/* Status, message and error type of the JSON body; busy ones carry Retry-After. */
static const struct {
    int status;
    const char *message;
    const char *type;
    bool retry_after;
} own_errors[] = {
    [OWN_MALFORMED] = {400, "Malformed HTTP request.", "invalid_request_error", false},
    [OWN_HOST] = {400, "An HTTP/1.1 request needs exactly one valid Host header.",
                  "invalid_request_error", false},
    [OWN_EXPECT] = {417, "Only the 100-continue expectation is supported.", "invalid_request_error",
                    false},
    [OWN_HEADERS] = {431, "Request header fields too large.", "invalid_request_error", false},
    [OWN_TARGET] = {414, "Request target too long.", "invalid_request_error", false},
    [OWN_CODING] = {501, "Transfer coding not implemented.", "invalid_request_error", false},
    [OWN_BODY_BUDGET] = {503,
                         "server busy: the requests in flight use all of the request memory; "
                         "retry later",
                         "server_error", true},
    [OWN_BUSY] = {503, "server busy: too many connections; retry later", "server_error", true},
    [OWN_VERSION] = {505, "HTTP version not supported.", "invalid_request_error", false},
};

/* The refusal for a parser result (-400, -431, -501, -505; 0: an incomplete head). */
static enum own_error own_error_of(long rc)
{
    switch (rc) {
    case -431:
        return OWN_HEADERS;
    case -501:
        return OWN_CODING;
    case -505:
        return OWN_VERSION;
    default:
        return OWN_MALFORMED;
    }
}

/* ------------------------------------------------------------------------ */
/* Process-wide accounting                                                   */

/* Room left in the body budget limit (the total may briefly overshoot it; see body_take). */
static size_t body_room(size_t limit)
{
    size_t used = __atomic_load_n(&g.body_bytes, __ATOMIC_RELAXED);
    return used >= limit ? 0 : limit - used;
}

/* What a body buffer of cap bytes is charged: conf.body_charge per byte. */
static size_t body_charge_of(const struct httpd *h, size_t cap)
{
    return cap > SIZE_MAX / h->conf.body_charge ? SIZE_MAX : cap * h->conf.body_charge;
}

/* Take n bytes of the process's body budget; false (nothing taken) if over limit. */
static bool body_take(struct httpd *h, size_t n)
{
    size_t before = __atomic_fetch_add(&g.body_bytes, n, __ATOMIC_RELAXED);
    if (before + n > h->conf.max_body_buffered || before + n < before) {
        __atomic_fetch_sub(&g.body_bytes, n, __ATOMIC_RELAXED);
        return false;
    }
    h->body_bytes += n;
    stats_add_opt(h->st, STAT_request_memory_bytes, (int64_t)n);
    return true;
}

/* A large body buffer was freed: hand the memory back once the burst is over. */
static void trim_note(struct httpd *h, size_t n)
{
    __atomic_fetch_add(&g.freed_large, n, __ATOMIC_RELAXED);
    if (evtimer_pending(h->trim_ev, NULL))
        return;
    struct timeval tv = pc_timeval_ms(TRIM_DELAY_MS);
    evtimer_add(h->trim_ev, &tv);
}

/* Give back n charged bytes, of which freed were a body buffer just freed. */
static void body_give(struct httpd *h, size_t n, size_t freed)
{
    __atomic_fetch_sub(&g.body_bytes, n, __ATOMIC_RELAXED);
    h->body_bytes -= n;
    stats_add_opt(h->st, STAT_request_memory_bytes, -(int64_t)n);
    if (freed >= TRIM_BUFFER_MIN)
        trim_note(h, freed);
}

/*
 * TRIM_DELAY_MS after a large body was freed: if enough was freed since the
 * last trim and the bodies still in flight are few next to it (the burst is
 * over), malloc_trim(0) returns the free pages of every arena to the system;
 * if bodies still pour in, look again later. One httpd's timer takes the
 * freed count, so concurrent timers trim once.
 */
static void trim_cb(evutil_socket_t fd, short what, void *arg)
{
    struct httpd *h = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    size_t freed = __atomic_load_n(&g.freed_large, __ATOMIC_RELAXED);
    if (freed < TRIM_FREED_MIN)
        return; /* another httpd trimmed, or too little to bother */
    if (__atomic_load_n(&g.body_bytes, __ATOMIC_RELAXED) > freed / 4) {
        struct timeval tv = pc_timeval_ms(TRIM_DELAY_MS);
        evtimer_add(h->trim_ev, &tv); /* still busy */
        return;
    }
    freed = __atomic_exchange_n(&g.freed_large, 0, __ATOMIC_RELAXED);
    if (freed < TRIM_FREED_MIN) {
        __atomic_fetch_add(&g.freed_large, freed, __ATOMIC_RELAXED);
        return;
    }
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    __atomic_fetch_add(&g.trims, 1, __ATOMIC_RELAXED);
    stats_add_opt(h->st, STAT_memory_trims, 1);
    log_debug("httpd: %zu MiB of request bodies freed since the last trim: memory returned",
              freed >> 20);
}

/* The client's address as 16 bytes (IPv4 mapped into IPv6); false for other families. */
static bool ip_of(const struct sockaddr_storage *sa, unsigned char out[16])
{
    if (sa->ss_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    if (sa->ss_family != AF_INET)
        return false;
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return true;
}

static struct ip_slot **ip_bucket(const unsigned char ip[16])
{
    uint32_t hash = 2166136261u; /* FNV-1a */
    for (int i = 0; i < 16; i++)
        hash = (hash ^ ip[i]) * 16777619u;
    return &g.ip_table[hash % IP_BUCKETS];
}

/* Count one more connection from ip unless it has limit already; false then. */
static bool ip_acquire(const unsigned char ip[16], size_t limit)
{
    pthread_mutex_lock(&g.ip_mu);
    struct ip_slot **b = ip_bucket(ip), *sl = *b;
    while (sl != NULL && memcmp(sl->ip, ip, 16) != 0)
        sl = sl->next;
    bool ok = sl == NULL || sl->count < limit;
    if (ok && sl == NULL) {
        sl = pc_calloc(1, sizeof(*sl));
        memcpy(sl->ip, ip, 16);
        sl->next = *b;
        *b = sl;
    }
    if (ok)
        sl->count++;
    pthread_mutex_unlock(&g.ip_mu);
    return ok;
}

static void ip_release(const unsigned char ip[16])
{
    pthread_mutex_lock(&g.ip_mu);
    struct ip_slot **pp = ip_bucket(ip);
    while (*pp != NULL && memcmp((*pp)->ip, ip, 16) != 0)
        pp = &(*pp)->next;
    struct ip_slot *sl = *pp;
    if (sl != NULL && --sl->count == 0) {
        *pp = sl->next;
        free(sl);
    }
    pthread_mutex_unlock(&g.ip_mu);
}

void httpd_set_limits(const struct httpd_limits *l)
{
    g.limits = *l;
    if (g.limits.reserve == 0)
        g.limits.reserve = HTTPD_RESERVE_DEFAULT;
}

/* An address given as a or a/bits: 0, or -1 if it is neither IPv4 nor IPv6. */
int httpd_net_parse(const char *s, struct httpd_net *out)
{
    char addr[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(s, '/');
    size_t n = slash != NULL ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || n >= sizeof(addr))
        return -1;
    memcpy(addr, s, n);
    addr[n] = '\0';
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    unsigned max;
    if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
        ss.ss_family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
        ss.ss_family = AF_INET6;
        max = 128;
    } else {
        return -1;
    }
    unsigned bits = max;
    if (slash != NULL) {
        const char *d = slash + 1;
        if (*d == '\0' || strspn(d, "0123456789") != strlen(d) || strlen(d) > 3)
            return -1;
        bits = (unsigned)atoi(d);
        if (bits > max)
            return -1;
    }
    ip_of(&ss, out->ip);
    /* IPv4 is kept mapped into IPv6, as ip_of gives the clients' addresses. */
    out->bits = ss.ss_family == AF_INET ? bits + 96 : bits;
    return 0;
}

static bool net_contains(const struct httpd_net *net, const unsigned char ip[16])
{
    unsigned full = net->bits / 8, rest = net->bits % 8;
    if (memcmp(net->ip, ip, full) != 0)
        return false;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return rest == 0 || ((net->ip[full] ^ ip[full]) & mask) == 0;
}

/* Whether max_connections_per_ip leaves ip alone (httpd_limits.exempt). */
static bool ip_exempt(const unsigned char ip[16])
{
    for (size_t i = 0; i < g.limits.nexempt; i++)
        if (net_contains(&g.limits.exempt[i], ip))
            return true;
    return false;
}

size_t httpd_process_body_bytes(void)
{
    return __atomic_load_n(&g.body_bytes, __ATOMIC_RELAXED);
}

uint64_t httpd_memory_trims(void)
{
    return __atomic_load_n(&g.trims, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------ */
/* Connection lifetime                                                       */

static void conn_schedule(struct httpd_conn *c)
{
    event_active(c->defer, EV_TIMEOUT, 1);
}

/* Arm the connection timer; secs <= 0 disarms it. */
static void conn_arm_timer(struct httpd_conn *c, double secs)
{
    if (secs <= 0) {
        event_del(c->timer);
        return;
    }
    struct timeval tv = pc_timeval(secs);
    event_add(c->timer, &tv);
}

static const char *conn_peer(struct httpd_conn *c)
{
    char addr[INET6_ADDRSTRLEN];
    if (c->peer[0] != '\0')
        return c->peer;
    if (c->sa.ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)&c->sa;
        inet_ntop(AF_INET, &s->sin_addr, addr, sizeof(addr));
        snprintf(c->peer, sizeof(c->peer), "%s:%u", addr, (unsigned)ntohs(s->sin_port));
    } else if (c->sa.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&c->sa;
        inet_ntop(AF_INET6, &s->sin6_addr, addr, sizeof(addr));
        snprintf(c->peer, sizeof(c->peer), "[%s]:%u", addr, (unsigned)ntohs(s->sin6_port));
    } else {
        snprintf(c->peer, sizeof(c->peer), "%s", c->sa.ss_family == AF_UNIX ? "unix" : "unknown");
    }
    return c->peer;
}

/*
 * Reading. httpd reads the socket itself into the bufferevent's input buffer,
 * whose end the bufferevent keeps frozen: one read per readable event and no
 * FIONREAD ioctl, which libevent's evbuffer_read issues before every read
 * (to size its buffer: here the read goes to the worker's rbuf first).
 * Reading stops while read_high() bytes wait in the input (a request being
 * handled, a pipelining client) and resumes when they are consumed.
 */
static size_t read_high(const struct httpd *h)
{
    return PC_MAX(READ_AHEAD, h->conf.max_header_size);
}

/* Add or delete rev as read_on and the input's length say. */
static void conn_read_update(struct httpd_conn *c)
{
    bool want = c->read_on && evbuffer_get_length(bufferevent_get_input(c->bev)) < read_high(c->h);
    if (want == c->read_armed)
        return;
    c->read_armed = want;
    if (want)
        event_add(c->rev, NULL);
    else
        event_del(c->rev);
}

static void conn_read_set(struct httpd_conn *c, bool on)
{
    c->read_on = on;
    conn_read_update(c);
}

/* The input buffer changed: bytes consumed may let reading resume. */
static void conn_input_cb(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    struct httpd_conn *c = arg;
    (void)in;
    if (info->n_deleted > 0 && c->read_on && !c->read_armed)
        conn_read_update(c);
}

/*
 * The client is gone or the connection must end now: no more I/O, the
 * deferred event runs the close callback of an unfinished request and frees
 * everything. Never frees anything itself, so it is safe anywhere.
 */
static void conn_kill(struct httpd_conn *c)
{
    if (c->state == C_DEAD)
        return;
    c->state = C_DEAD;
    if (c->req != NULL && c->req->dispatched && !c->req->finished)
        c->req->gone = true;
    conn_read_set(c, false);
    bufferevent_disable(c->bev, EV_WRITE);
    event_del(c->timer);
    conn_schedule(c);
}

/* Free r's body buffer and give what r was charged back to the budget. */
static void req_body_release(struct httpd *h, struct httpd_req *r)
{
    size_t cap = r->bodybuf.cap;
    pc_buf_free(&r->bodybuf);
    body_give(h, body_charge_of(h, cap) + r->charged, cap);
    r->charged = 0;
    r->body = NULL;
    r->body_len = 0;
}

static void req_free(struct httpd_conn *c)
{
    struct httpd_req *r = c->req;
    c->req = NULL;
    if (r->dispatched && !r->finished)
        c->h->nactive--;
    req_body_release(c->h, r);
    r->magic = 0;
    free(r);
}

/* Only from the deferred event or httpd_destroy: never inside a bufferevent callback. */
static void conn_free(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    if (c->req != NULL)
        req_free(c);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    h->nconns--;
    if (h->st != NULL)
        stats_add(h->st, STAT_connections_active, -1);
    if (c->regular)
        __atomic_fetch_sub(&g.conns, 1, __ATOMIC_RELAXED);
    reserve_unlink(c);
    if (c->ip_held)
        ip_release(c->ip);
    event_free(c->rev);
    evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->in_cb);
    bufferevent_free(c->bev); /* closes the socket */
    event_free(c->timer);
    event_free(c->defer);
    pc_buf_free(&c->hdrs);
    c->magic = 0;
    free(c);
}

/* Back to IDLE for the next keep-alive request (closing instead when stopping). */
static void conn_enter_idle(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    c->state = C_IDLE;
    c->first_req = false;
    pc_buf_reset(&c->hdrs);
    if (h->stopping && evbuffer_get_length(bufferevent_get_input(c->bev)) == 0) {
        conn_kill(c);
        return;
    }
    conn_arm_timer(c, h->conf.idle_timeout);
}

/* NEXT: the finished request is freed; start the next one unless output is backed up. */
static void conn_next(struct httpd_conn *c)
{
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) > OUT_PAUSE) {
        c->state = C_WAIT_OUT; /* conn_write_cb resumes once it drained */
        return;
    }
    conn_enter_idle(c);
    conn_process(c);
}

/* A handler's stream that waits above its mark is called back once queued output is low. */
static void req_maybe_drained(struct httpd_req *r, size_t queued)
{
    if (r->started && r->drain_fn != NULL && !r->finished && queued <= r->drain_low)
        r->drain_fn(r, r->drain_arg);
}

/*
 * The end-of-turn write of conn_flush. What the socket took at once never
 * reaches the bufferevent's write callback (conn_write_cb), so the drain
 * check it makes is made here; what it did not take is the callback's.
 */
static void conn_flush_soon(struct httpd_conn *c)
{
    c->flush_soon = false;
    if (c->state == C_DEAD)
        return;
    conn_flush(c, true);
    if (c->state == C_HANDLER && !c->write_armed)
        req_maybe_drained(c->req, evbuffer_get_length(bufferevent_get_output(c->bev)));
}

static void conn_deferred_cb(evutil_socket_t fd, short what, void *arg)
{
    struct httpd_conn *c = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(c, CONN_MAGIC);
    if (c->flush_soon)
        conn_flush_soon(c);
    struct httpd_req *r = c->req;
    if (r != NULL && r->gone && !r->finished && !r->close_called) {
        r->close_called = true;
        if (r->close_fn != NULL)
            r->close_fn(r, r->close_arg);
    }
    if (r != NULL && (r->finished || c->state == C_DEAD))
        req_free(c);
    if (c->state == C_DEAD)
        conn_free(c);
    else if (c->state == C_NEXT)
        conn_next(c);
}

/* Output flushed in CLOSING: half-close and discard what the client still sends. */
static void conn_linger(struct httpd_conn *c)
{
    if (c->eof) {
        conn_kill(c);
        return;
    }
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    c->state = C_LINGER;
    c->linger_bytes = 0;
    conn_arm_timer(c, LINGER_SECONDS);
}

/*
 * After a reply that ends the connection: flush it, then linger so that
 * unread input does not turn the close into a reset that destroys the reply.
 */
static void conn_start_close(struct httpd_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    c->state = C_CLOSING;
    event_del(c->timer);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (!c->eof)
        conn_read_set(c, true);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        conn_linger(c);
}

/*
 * The JSON body of a refusal: in the shape of the API the path belongs to
 * when the path is known and the process said how (httpd_limits.error_body),
 * else httpd's own {"error":{"message","type","code":null}}.
 */
static void error_body(const struct httpd_conn *c, enum own_error e, struct pc_buf *out)
{
    if (c->req != NULL && g.limits.error_body != NULL) {
        g.limits.error_body(c->req->path, own_errors[e].status, own_errors[e].message, out);
        if (out->len > 0)
            return;
    }
    pc_buf_printf(out, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":null}}",
                  own_errors[e].message, own_errors[e].type);
}

/* Refused before the request reached the handler: JSON error, then close. */
static void conn_error(struct httpd_conn *c, enum own_error e)
{
    struct pc_buf body = PC_BUF_INIT;
    int status = own_errors[e].status;
    error_body(c, e, &body);
    log_debug("httpd: %s: rejected request with %d", conn_peer(c), status);
    pc_buf_reset(&c->hdrs);
    pc_buf_append_str(&c->hdrs, "Content-Type: application/json\r\n");
    if (own_errors[e].retry_after)
        pc_buf_append_str(&c->hdrs, "Retry-After: " RETRY_AFTER "\r\n");
    write_head(c, status, FRAME_LENGTH, (uint64_t)body.len, false, body.len);
    evbuffer_add(bufferevent_get_output(c->bev), body.data, body.len);
    pc_buf_free(&body);
    conn_flush(c, true);
    if (c->state == C_DEAD)
        return;
    if (c->req != NULL) {
        c->req->finished = true; /* never dispatched: the deferred event frees it */
        conn_schedule(c);
    }
    conn_start_close(c);
}

/* ------------------------------------------------------------------------ */
/* Reading requests                                                          */

/*
 * Search p[0..n) for the blank line ending a head, continuing from *state
 * (0: inside a line, 1: after LF, 2: after LF CR). Returns the offset after
 * the final LF, or 0 if not found. A CR that begins a line and is not
 * followed by LF ends the search too (the offset after the byte that follows
 * it): no head goes on from there, and the parser refuses it. Past the
 * bytes conn_probe_head checks, such a head ("...\r\n\r\r\n") waited for
 * read_timeout.
 */
static size_t scan_head_end(int *state, const char *p, size_t n)
{
    size_t i = 0;
    int s = *state;
    while (i < n) {
        if (s == 0) {
            const char *nl = memchr(p + i, '\n', n - i);
            if (nl == NULL)
                break;
            i = (size_t)(nl - p) + 1;
            s = 1;
            continue;
        }
        char ch = p[i++];
        if (ch == '\n' || s == 2) {
            *state = 0;
            return i;
        }
        s = ch == '\r' ? 2 : 0;
    }
    *state = s;
    return 0;
}

/* Length of the head once its blank line arrived (within the size limit), else 0. */
static size_t conn_scan_head(struct httpd_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t limit = PC_MIN(evbuffer_get_length(in), c->h->conf.max_header_size);
    while (c->scan_off < limit) {
        struct evbuffer_ptr ptr;
        struct evbuffer_iovec v[4];
        evbuffer_ptr_set(in, &ptr, c->scan_off, EVBUFFER_PTR_SET);
        int nv = evbuffer_peek(in, (ev_ssize_t)(limit - c->scan_off), &ptr, v, 4);
        for (int i = 0; i < nv && i < 4 && c->scan_off < limit; i++) {
            size_t take = PC_MIN(v[i].iov_len, limit - c->scan_off);
            size_t end = scan_head_end(&c->scan_state, v[i].iov_base, take);
            if (end != 0)
                return c->scan_off + end;
            c->scan_off += take;
        }
    }
    return 0;
}

/* The "close" and "keep-alive" tokens of every Connection header. */
static void connection_tokens(const struct httpd_req *r, bool *close_tok, bool *ka_tok)
{
    *close_tok = *ka_tok = false;
    for (size_t i = 0; i < r->nheaders; i++) {
        if (!pc_strcaseeq(r->headers[i].name, "connection"))
            continue;
        *close_tok |= pc_token_list_has(r->headers[i].value, "close");
        *ka_tok |= pc_token_list_has(r->headers[i].value, "keep-alive");
    }
}

/* Fill r's strings from the parsed head: one copy of the head, NULs in place. */
static void req_fill(struct httpd_req *r, const char *p, size_t len, const struct httpd_head *hd,
                     char *copy, char *pathcopy)
{
    memcpy(copy, p, len);
    copy[len] = '\0';
    r->method = copy + (hd->method - p);
    copy[hd->method - p + (ptrdiff_t)hd->method_len] = '\0';
    r->target = copy + (hd->target - p);
    copy[hd->target - p + (ptrdiff_t)hd->target_len] = '\0';
    for (size_t i = 0; i < hd->nheaders; i++) {
        const struct httpd_header_span *s = &hd->headers[i];
        r->headers[i].name = copy + (s->name - p);
        copy[s->name - p + (ptrdiff_t)s->name_len] = '\0';
        r->headers[i].value = copy + (s->value - p);
        copy[s->value - p + (ptrdiff_t)s->value_len] = '\0';
    }
    r->nheaders = hd->nheaders;
    r->path = r->target;
    const char *q = memchr(r->target, '?', hd->target_len);
    if (q != NULL) {
        size_t plen = (size_t)(q - r->target);
        memcpy(pathcopy, r->target, plen);
        pathcopy[plen] = '\0';
        r->path = pathcopy;
        r->query = q + 1;
    }
}

/* Expect fields: 100-continue (any case) or empty; anything else gets a 417. */
static void req_expect(struct httpd_req *r)
{
    for (size_t i = 0; i < r->nheaders; i++) {
        const struct httpd_header *hdr = &r->headers[i];
        if (!pc_strcaseeq(hdr->name, "expect"))
            continue;
        if (pc_strcaseeq(hdr->value, "100-continue"))
            r->expect_continue = true;
        else if (hdr->value[0] != '\0')
            r->expect_bad = true;
    }
}

/*
 * One allocation per request: the struct, the header array, a copy of the
 * head (strings NUL-terminated in place) and the path when there is a query.
 * The body gets its own buffer, grown as it arrives (req_body_reserve).
 */
static struct httpd_req *req_create(struct httpd_conn *c, const char *p, size_t len,
                                    const struct httpd_head *hd)
{
    size_t path_cap = 0;
    if (memchr(hd->target, '?', hd->target_len) != NULL)
        path_cap = hd->target_len + 1;
    size_t hdr_size = hd->nheaders * sizeof(struct httpd_header);
    struct httpd_req *r = pc_malloc(sizeof(*r) + hdr_size + len + 1 + path_cap);
    memset(r, 0, sizeof(*r));
    r->magic = REQ_MAGIC;
    r->conn = c;
    r->headers = (struct httpd_header *)(r + 1);
    char *copy = (char *)r->headers + hdr_size;
    req_fill(r, p, len, hd, copy, copy + len + 1);
    r->minor = hd->minor_version;
    r->is_head = strcmp(r->method, "HEAD") == 0;
    bool close_tok, ka_tok;
    connection_tokens(r, &close_tok, &ka_tok);
    r->keep_alive = !close_tok && (r->minor == 1 || ka_tok);
    req_expect(r);
    r->start_us = pc_mono_us();
    return r;
}

/*
 * IDLE: drop blank lines (CRLF or LF) between requests; the first other byte
 * starts a head. 1 when moving on to HEAD; 0 to wait, or after rejecting a
 * bare CR.
 */
static int conn_start_head(struct httpd_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    for (;;) {
        char b[2];
        ev_ssize_t n = evbuffer_copyout(in, b, sizeof(b));
        if (n <= 0)
            return 0;
        if (b[0] == '\n') {
            evbuffer_drain(in, 1);
        } else if (b[0] != '\r') {
            break;
        } else if (n == 1) {
            return 0; /* its LF is yet to come */
        } else if (b[1] == '\n') {
            evbuffer_drain(in, 2);
        } else {
            conn_error(c, OWN_MALFORMED);
            return 0;
        }
    }
    c->state = C_HEAD;
    c->scan_off = 0;
    c->scan_state = 0;
    c->probed = 0;
    /* A new connection's first request stays on the timer armed at the accept. */
    if (!c->first_req)
        conn_arm_timer(c, c->h->conf.read_timeout);
    return 1;
}

/* The handler gets the request; r and c may change under us after it returns. */
static void conn_dispatch(struct httpd_conn *c)
{
    struct httpd_req *r = c->req;
    struct httpd *h = c->h;
    c->state = C_HANDLER;
    event_del(c->timer);
    pc_buf_reset(&c->hdrs);
    r->dispatched = true;
    h->nactive++;
    h->handler(r, h->handler_arg);
}

/* Body over the limit: the handler answers it, the body is never read. */
static void conn_too_large(struct httpd_conn *c)
{
    struct httpd_req *r = c->req;
    log_debug("httpd: %s: request body over %zu bytes", conn_peer(c), c->h->conf.max_body_size);
    r->error = HTTPD_REQ_BODY_TOO_LARGE;
    r->keep_alive = false;
    req_body_release(c->h, r);
    conn_dispatch(c);
}

/*
 * A request refused for the budget: counted, and a warning logged at most
 * once a minute (under attack it would flood).
 */
static void budget_refused(struct httpd *h)
{
    uint64_t now = pc_mono_us();
    if (h->budget_warn_us == 0 || now - h->budget_warn_us >= BUDGET_WARN_US) {
        h->budget_warn_us = now;
        log_warn("httpd: requests use %zu of %zu bytes of request memory; answering 503 (logged "
                 "at most once a minute)",
                 httpd_process_body_bytes(), h->conf.max_body_buffered);
    }
    stats_add_opt(h->st, STAT_requests_over_body_budget, 1);
}

/* A body would take the process's request memory over its budget: 503, then close. */
static void conn_over_budget(struct httpd_conn *c)
{
    budget_refused(c->h);
    req_body_release(c->h, c->req);
    conn_error(c, OWN_BODY_BUDGET);
}

/* After the head: dispatch at once, or set up body reading (1). */
static int conn_begin_body(struct httpd_conn *c, const struct framing *fr)
{
    struct httpd_req *r = c->req;
    struct httpd *h = c->h;
    if (fr->chunked) {
        r->chunked_in = true;
        c->chunk = CH_SIZE;
        c->trailer_bytes = 0;
        c->body_limit = h->conf.max_body_size + 1;
    } else if (fr->has_length && fr->length > h->conf.max_body_size) {
        conn_too_large(c);
        return 0;
    } else if (fr->has_length && fr->length > 0) {
        c->body_left = fr->length;
        c->body_limit = (size_t)fr->length + 1;
    } else {
        conn_dispatch(c);
        return 0;
    }
    /* Refuse now, before a 100 Continue, if not even the first allocation fits. */
    if (body_charge_of(h, PC_MIN(c->body_limit, (size_t)BODY_MIN_ALLOC)) >
        body_room(h->conf.max_body_buffered)) {
        conn_over_budget(c);
        return 0;
    }
    if (r->expect_continue && r->minor == 1 &&
        evbuffer_get_length(bufferevent_get_input(c->bev)) == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        evbuffer_add(bufferevent_get_output(c->bev), cont, sizeof(cont) - 1);
        conn_flush(c, true);
        if (c->state == C_DEAD)
            return 0;
    }
    c->state = C_BODY;
    return 1;
}

/* A connection beyond the limits was turned away (once): counted. */
static void conn_refused(struct httpd_conn *c)
{
    if (c->refused)
        return;
    c->refused = true;
    stats_add_opt(c->h->st, STAT_connections_refused, 1);
    if (c->over_ip)
        stats_add_opt(c->h->st, STAT_connections_refused_per_ip, 1);
}

static bool reserve_path(const char *path)
{
    const char *const *p = g.limits.reserve_paths;
    for (; p != NULL && *p != NULL; p++)
        if (strcmp(*p, path) == 0)
            return true;
    return false;
}

/*
 * A request on a reserve connection: a bodiless GET or HEAD of a reserve path
 * goes to the handler (and the connection closes after its reply), anything
 * else gets a 503. Returns 0 (the connection never reads a body).
 */
static int conn_reserve_request(struct httpd_conn *c, const struct framing *fr)
{
    struct httpd_req *r = c->req;
    bool bodiless = !fr->chunked && (!fr->has_length || fr->length == 0);
    bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    if (get && bodiless && reserve_path(r->path)) {
        r->keep_alive = false;
        conn_dispatch(c);
        return 0;
    }
    conn_refused(c);
    conn_error(c, OWN_BUSY);
    return 0;
}

/*
 * A head not complete yet: its first HEAD_PROBE bytes are parsed as they
 * arrive, so that what is no HTTP/1.x request at all (a TLS ClientHello or
 * another protocol on the plain port, binary noise) gets its 400 at once. It
 * has no blank line to end it, so it used to wait, unanswered, for
 * read_timeout. The parser says "need more" for every prefix of a valid head
 * and fails a prefix only where the whole head would fail, with the same
 * status.
 */
static void conn_probe_head(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = PC_MIN(evbuffer_get_length(in), (size_t)HEAD_PROBE);
    if (n <= c->probed)
        return;
    c->probed = n;
    char buf[HEAD_PROBE];
    evbuffer_copyout(in, buf, n);
    struct httpd_head hd = {.headers = h->spans, .max_headers = h->conf.max_headers};
    struct framing fr;
    long rc = parse_head(buf, n, &hd, &fr);
    if (rc < 0)
        conn_error(c, own_error_of(rc));
}

/*
 * "OPTIONS *" asks about the server in general (RFC 9110 section 9.3.7); load
 * balancers send it as a health check. The handler is never given it (its
 * target is no path to append to an upstream URL), and a 400 marked the
 * proxy down: httpd answers 200 with an empty body itself. The connection
 * stays open unless a body was announced (it is not read) or the request
 * closes it.
 */
static void conn_options_asterisk(struct httpd_conn *c, const struct framing *fr)
{
    struct httpd_req *r = c->req;
    bool bodiless = !fr->chunked && (!fr->has_length || fr->length == 0);
    bool keep_alive = r->keep_alive && bodiless && c->regular && !c->h->stopping;
    pc_buf_reset(&c->hdrs);
    write_head(c, 200, FRAME_LENGTH, 0, keep_alive, 0);
    conn_flush(c, true);
    r->finished = true; /* never dispatched: the deferred event frees it */
    conn_schedule(c);
    if (c->state == C_DEAD)
        return;
    if (keep_alive)
        c->state = C_NEXT;
    else
        conn_start_close(c);
}

/* A head over max bytes: 414 when the request line has no end in them (the target is what is
 * too long, as a client that built a URL from data needs to know), else 431. */
static enum own_error head_too_large(struct evbuffer *in, size_t max)
{
    const unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)max);
    return p != NULL && memchr(p, '\n', max) == NULL ? OWN_TARGET : OWN_HEADERS;
}

/* HEAD: parse once the blank line arrived; 1 when moving on to the body. */
static int conn_read_head(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t end = conn_scan_head(c);
    if (end == 0) {
        if (evbuffer_get_length(in) >= h->conf.max_header_size)
            conn_error(c, head_too_large(in, h->conf.max_header_size));
        else
            conn_probe_head(c);
        return 0;
    }
    const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)end);
    struct httpd_head hd = {.headers = h->spans, .max_headers = h->conf.max_headers};
    struct framing fr;
    long rc = parse_head(p, end, &hd, &fr);
    if (rc <= 0) {
        conn_error(c, own_error_of(rc));
        return 0;
    }
    int host = httpd_head_check_host(&hd);
    c->req = req_create(c, p, (size_t)rc, &hd);
    evbuffer_drain(in, (size_t)rc);
    if (host < 0) {
        conn_error(c, OWN_HOST);
        return 0;
    }
    if (c->req->expect_bad) {
        conn_error(c, OWN_EXPECT);
        return 0;
    }
    if (strcmp(c->req->target, "*") == 0) { /* "OPTIONS *": the parser allows no other */
        conn_options_asterisk(c, &fr);
        return 0;
    }
    if (!c->regular)
        return conn_reserve_request(c, &fr);
    return conn_begin_body(c, &fr);
}

/*
 * One CRLF- or LF-terminated line of at most cap-1 bytes into buf (NUL-
 * terminated, no bare CR or NUL). 1 done, 0 need more, -1 invalid.
 */
static int conn_read_line(struct httpd_conn *c, char *buf, size_t cap, size_t *len)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t eol_len = 0;
    struct evbuffer_ptr e = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_CRLF);
    if (e.pos < 0)
        return evbuffer_get_length(in) >= cap ? -1 : 0;
    size_t n = (size_t)e.pos;
    if (n >= cap)
        return -1;
    evbuffer_copyout(in, buf, n);
    evbuffer_drain(in, n + eol_len);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\r' || buf[i] == '\0')
            return -1;
    *len = n;
    return 1;
}

/* chunk-size [ BWS ";" chunk-ext ]: extensions are ignored. */
static int parse_chunk_size(const char *line, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n; i++) {
        char ch = line[i];
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
            d = (unsigned)((ch | 0x20) - 'a' + 10);
        else
            break;
        if (v >> 59)
            return -1; /* overflow */
        v = v * 16 + d;
    }
    if (i == 0)
        return -1;
    while (i < n && is_ows(line[i]))
        i++;
    if (i < n && line[i] != ';')
        return -1;
    if (!pc_http_field_value(line + i, n - i))
        return -1;
    *out = v;
    return 0;
}

/*
 * Room for n more body bytes and the NUL. The buffer doubles as bytes arrive,
 * up to c->body_limit (the declared length, or max_body_size when chunked,
 * plus the NUL; callers never need more). 0, or -1 if the growth would take
 * the httpd's request bodies over their budget.
 */
static int req_body_reserve(struct httpd_conn *c, size_t n)
{
    struct httpd *h = c->h;
    struct pc_buf *b = &c->req->bodybuf;
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = PC_MAX(PC_MAX(need, b->cap * 2), (size_t)BODY_MIN_ALLOC);
    cap = PC_MAX(PC_MIN(cap, c->body_limit), need);
    if (!body_take(h, body_charge_of(h, cap) - body_charge_of(h, b->cap)))
        return -1;
    b->data = pc_realloc(b->data, cap);
    b->cap = cap;
    return 0;
}

/* Move up to body_left buffered bytes into the body. 0, or -1 after a 503. */
static int conn_take_body(struct httpd_conn *c)
{
    struct pc_buf *b = &c->req->bodybuf;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = (size_t)PC_MIN((uint64_t)evbuffer_get_length(in), c->body_left);
    if (n == 0)
        return 0;
    if (req_body_reserve(c, n) < 0) {
        conn_over_budget(c);
        return -1;
    }
    evbuffer_remove(in, b->data + b->len, n);
    b->len += n;
    c->body_left -= n;
    return 0;
}

/* The body is complete: NUL-terminate it (reserved for) and hand it out. */
static void req_body_done(struct httpd_req *r)
{
    if (r->bodybuf.data == NULL)
        return; /* empty: httpd_req_body gives "" */
    r->bodybuf.data[r->bodybuf.len] = '\0';
    r->body = r->bodybuf.data;
    r->body_len = r->bodybuf.len;
}

/*
 * One step of chunked decoding. Returns 1 to continue, 0 to wait for bytes
 * (or when the request was dispatched or rejected).
 */
static int conn_chunked_step(struct httpd_conn *c)
{
    struct httpd_req *r = c->req;
    char line[CHUNK_LINE_MAX];
    size_t n = 0;
    uint64_t size;
    int rc = 0;
    switch (c->chunk) {
    case CH_SIZE:
        if ((rc = conn_read_line(c, line, sizeof(line), &n)) <= 0)
            break;
        if (parse_chunk_size(line, n, &size) < 0) {
            rc = -1;
            break;
        }
        if (size > c->h->conf.max_body_size - r->bodybuf.len) {
            conn_too_large(c);
            return 0;
        }
        c->body_left = size;
        c->chunk = size == 0 ? CH_TRAILER : CH_DATA;
        return 1;
    case CH_DATA:
        if (conn_take_body(c) < 0 || c->body_left != 0)
            return 0;
        c->chunk = CH_DATA_END;
        return 1;
    case CH_DATA_END:
        if ((rc = conn_read_line(c, line, sizeof(line), &n)) > 0 && n != 0)
            rc = -1;
        if (rc > 0)
            c->chunk = CH_SIZE;
        break;
    case CH_TRAILER:
        if ((rc = conn_read_line(c, line, sizeof(line), &n)) <= 0)
            break;
        c->trailer_bytes += n + 2;
        if (c->trailer_bytes > c->h->conf.max_header_size) {
            conn_error(c, OWN_HEADERS);
            return 0;
        }
        if (n == 0) {
            req_body_done(r);
            conn_dispatch(c);
            return 0;
        }
        return 1; /* trailer field: discarded */
    }
    if (rc < 0)
        conn_error(c, OWN_MALFORMED);
    return rc > 0;
}

static int conn_read_length(struct httpd_conn *c)
{
    if (conn_take_body(c) < 0 || c->body_left != 0)
        return 0;
    req_body_done(c->req);
    conn_dispatch(c);
    return 0;
}

static int conn_read_body(struct httpd_conn *c)
{
    if (!c->req->chunked_in)
        return conn_read_length(c);
    while (c->state == C_BODY && conn_chunked_step(c) > 0)
        ;
    return 0;
}

/* Advance through IDLE, HEAD and BODY as far as the buffered input allows. */
static void conn_process(struct httpd_conn *c)
{
    for (;;) {
        int rc;
        if (c->state == C_IDLE)
            rc = conn_start_head(c);
        else if (c->state == C_HEAD)
            rc = conn_read_head(c);
        else if (c->state == C_BODY)
            rc = conn_read_body(c);
        else
            return;
        if (rc <= 0)
            return;
    }
}

/* ------------------------------------------------------------------------ */
/* bufferevent and timer callbacks                                           */

static void conn_discard_input(struct httpd_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = evbuffer_get_length(in);
    evbuffer_drain(in, n);
    if (c->state == C_LINGER) {
        c->linger_bytes += n;
        if (c->linger_bytes > LINGER_BYTES)
            conn_kill(c);
    }
}

/* New input arrived (conn_readable_cb). */
static void conn_on_input(struct httpd_conn *c)
{
    switch (c->state) {
    case C_IDLE:
    case C_HEAD:
    case C_BODY:
        conn_process(c);
        break;
    case C_CLOSING:
    case C_LINGER:
        conn_discard_input(c);
        break;
    default:
        break; /* handled later; reading stops at read_high */
    }
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
    struct httpd_conn *c = arg;
    PC_CHECK_OBJ(c, CONN_MAGIC);
    size_t queued = evbuffer_get_length(bufferevent_get_output(bev));
    struct httpd_req *r = c->req;
    if (queued == 0 && c->write_armed) {
        c->write_armed = false;
        bufferevent_disable(bev, EV_WRITE);
    }
    switch (c->state) {
    case C_HANDLER:
        req_maybe_drained(r, queued);
        break;
    case C_WAIT_OUT:
        if (queued == 0) {
            c->state = C_NEXT;
            conn_schedule(c);
        }
        break;
    case C_CLOSING:
        if (queued == 0)
            conn_linger(c);
        break;
    default:
        break;
    }
}

static void conn_on_eof(struct httpd_conn *c)
{
    c->eof = true;
    switch (c->state) {
    case C_NEXT:
    case C_WAIT_OUT:
        conn_start_close(c); /* flush what was answered, then close */
        break;
    case C_CLOSING:
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_kill(c);
        break;
    default:
        if (c->state == C_HANDLER)
            log_debug("httpd: %s: client closed during its request", conn_peer(c));
        conn_kill(c);
        break;
    }
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct httpd_conn *c = arg;
    (void)bev;
    PC_CHECK_OBJ(c, CONN_MAGIC);
    if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
        log_debug("httpd: %s: connection %s", conn_peer(c),
                  (what & BEV_EVENT_TIMEOUT) ? "write timeout" : "error");
        conn_kill(c);
    } else if (what & BEV_EVENT_EOF) {
        conn_on_eof(c);
    }
}

/*
 * The socket is readable: read what fits under read_high into the input and
 * hand it to conn_on_input; end of file and errors go to conn_event_cb, as
 * the bufferevent would report them.
 */
static void conn_readable_cb(evutil_socket_t fd, short what, void *arg)
{
    struct httpd_conn *c = arg;
    (void)what;
    PC_CHECK_OBJ(c, CONN_MAGIC);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t have = evbuffer_get_length(in), high = read_high(c->h);
    if (have >= high) {
        conn_read_update(c);
        return;
    }
    /*
     * Into the worker's buffer, then appended: the input's chains are sized
     * to what arrived (a reservation made before the read would pin its
     * whole size on a connection that sent a few bytes, or none).
     */
    struct httpd *h = c->h;
    ssize_t n = read(fd, h->rbuf, PC_MIN(high - have, (size_t)READ_AHEAD));
    int err = errno;
    if (n > 0) {
        evbuffer_unfreeze(in, 0);
        int rc = evbuffer_add(in, h->rbuf, (size_t)n);
        evbuffer_freeze(in, 0);
        if (rc != 0) {
            log_warn("httpd: %s: no memory for input; closing", conn_peer(c));
            conn_kill(c);
            return;
        }
    }
    if (n == 0 || (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)) {
        conn_read_set(c, false);
        conn_event_cb(c->bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), c);
        return;
    }
    if (n < 0)
        return;
    conn_read_update(c);
    conn_on_input(c);
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct httpd_conn *c = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(c, CONN_MAGIC);
    switch (c->state) {
    case C_IDLE:
    case C_HEAD:
    case C_BODY:
    case C_LINGER:
        log_debug("httpd: %s: timeout in state %d", conn_peer(c), (int)c->state);
        if (!c->regular && c->state != C_LINGER)
            conn_refused(c); /* a reserve connection that never said what it wanted */
        conn_kill(c);
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* The reserve                                                               */

/* This httpd's share of the reserve: an equal part for every httpd, at least one place. */
static size_t reserve_share(void)
{
    size_t n = PC_MAX(__atomic_load_n(&g.httpds, __ATOMIC_RELAXED), (size_t)1);
    return PC_MAX((g.limits.reserve + n - 1) / n, (size_t)1);
}

static void reserve_link(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    c->in_reserve = true;
    c->res_prev = h->res_new;
    c->res_next = NULL;
    if (h->res_new != NULL)
        h->res_new->res_next = c;
    else
        h->res_old = c;
    h->res_new = c;
    h->nreserve++;
}

/* Out of the reserve list (its place is free for another); a no-op if not in it. */
static void reserve_unlink(struct httpd_conn *c)
{
    struct httpd *h = c->h;
    if (!c->in_reserve)
        return;
    c->in_reserve = false;
    if (c->res_prev != NULL)
        c->res_prev->res_next = c->res_next;
    else
        h->res_old = c->res_next;
    if (c->res_next != NULL)
        c->res_next->res_prev = c->res_prev;
    else
        h->res_new = c->res_prev;
    c->res_prev = c->res_next = NULL;
    h->nreserve--;
}

/*
 * A reserve connection that may give its place to a newer one: it has not
 * sent a complete request head (or was answered and lingers). One that a
 * handler is answering, or whose answer is being flushed, keeps it.
 */
static bool reserve_evictable(const struct httpd_conn *c)
{
    return c->state == C_IDLE || c->state == C_HEAD || c->state == C_LINGER;
}

/*
 * Room for one more reserve connection on h: a free place in its share, or
 * the place of the oldest reserve connection that may give it up, which is
 * closed (and counted as refused). Connections that never send a request
 * cannot hold the reserve against health probes this way, however fast they
 * come: a probe's request arrives right after its connection.
 */
static bool reserve_make_room(struct httpd *h)
{
    if (h->nreserve < reserve_share())
        return true;
    struct httpd_conn *c = h->res_old;
    while (c != NULL && !reserve_evictable(c))
        c = c->res_next;
    if (c == NULL)
        return false;
    log_debug("httpd: %s: reserve connection closed for a newer one", conn_peer(c));
    reserve_unlink(c);
    if (c->state != C_LINGER)
        conn_refused(c);
    conn_kill(c);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Accepting                                                                 */

/* How a new connection was admitted (accept_cb). */
struct admission {
    bool regular;  /* within the limits; else in the reserve */
    bool ip_known; /* ip is set: an IP client, and max_connections_per_ip is on */
    bool ip_held;  /* counted in the per-address table */
    bool over_ip;  /* in the reserve because of the per-address limit */
    unsigned char ip[16];
};

static void conn_create(struct httpd *h, evutil_socket_t fd, const struct sockaddr *sa, int salen,
                        const struct admission *ad)
{
    struct bufferevent *bev = bufferevent_socket_new(h->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (bev == NULL) {
        log_warn("httpd: cannot create a bufferevent; dropping connection");
        evutil_closesocket(fd);
        if (ad->regular)
            __atomic_fetch_sub(&g.conns, 1, __ATOMIC_RELAXED);
        if (ad->ip_held)
            ip_release(ad->ip);
        return;
    }
    struct httpd_conn *c = pc_calloc(1, sizeof(*c));
    c->magic = CONN_MAGIC;
    c->h = h;
    c->bev = bev;
    c->rev = event_new(h->base, fd, EV_READ | EV_PERSIST, conn_readable_cb, c);
    c->in_cb = evbuffer_add_cb(bufferevent_get_input(bev), conn_input_cb, c);
    c->timer = event_new(h->base, -1, 0, conn_timer_cb, c);
    c->defer = event_new(h->base, -1, 0, conn_deferred_cb, c);
    if (c->rev == NULL || c->in_cb == NULL || c->timer == NULL || c->defer == NULL) {
        log_error("httpd: out of memory creating connection events");
        abort();
    }
    c->salen = (socklen_t)PC_MIN((size_t)salen, sizeof(c->sa));
    memcpy(&c->sa, sa, c->salen);
    c->regular = ad->regular;
    c->ip_held = ad->ip_held;
    c->over_ip = ad->over_ip;
    memcpy(c->ip, ad->ip, sizeof(c->ip));
    c->next = h->conns;
    if (h->conns != NULL)
        h->conns->prev = c;
    h->conns = c;
    h->nconns++;
    if (!c->regular)
        reserve_link(c);
    if (h->st != NULL)
        stats_add(h->st, STAT_connections_active, 1);

    bufferevent_setcb(bev, NULL, conn_write_cb, conn_event_cb, c);
    if (h->conf.write_timeout > 0) {
        struct timeval wtv = pc_timeval(h->conf.write_timeout);
        bufferevent_set_timeouts(bev, NULL, &wtv);
    }
    bufferevent_disable(bev, EV_WRITE); /* enabled by default; see conn_flush */
    conn_read_set(c, true);
    c->state = C_IDLE;
    c->first_req = true;
    /* The whole first request, from now; a reserve connection gets little time. */
    conn_arm_timer(c, c->regular ? h->conf.read_timeout : HTTPD_RESERVE_SECONDS);
    /*
     * A reserve connection is read at once: a health probe sends its request
     * with the connection, so it is usually answered here, before another
     * accept could take its place (reserve_make_room).
     */
    if (!c->regular)
        conn_readable_cb(fd, EV_READ, c);
}

/* Within max_connections and the address's limit: counted in both. */
static bool admit_regular(struct httpd *h, struct admission *ad)
{
    size_t n = __atomic_fetch_add(&g.conns, 1, __ATOMIC_RELAXED);
    if (n >= h->conf.max_connections) {
        __atomic_fetch_sub(&g.conns, 1, __ATOMIC_RELAXED);
        return false;
    }
    if (ad->ip_known && !ip_acquire(ad->ip, g.limits.max_connections_per_ip)) {
        __atomic_fetch_sub(&g.conns, 1, __ATOMIC_RELAXED);
        ad->over_ip = true;
        return false;
    }
    ad->ip_held = ad->ip_known;
    ad->regular = true;
    return true;
}

/* A regular connection, a reserve one, or (false) none: then counted as refused. */
static bool admit(struct httpd *h, const struct sockaddr *sa, int salen, struct admission *ad)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    memcpy(&ss, sa, PC_MIN((size_t)salen, sizeof(ss)));
    ad->ip_known = g.limits.max_connections_per_ip > 0 && ip_of(&ss, ad->ip) && !ip_exempt(ad->ip);
    if (admit_regular(h, ad))
        return true;
    if (reserve_make_room(h))
        return true;
    stats_add_opt(h->st, STAT_connections_refused, 1);
    if (ad->over_ip)
        stats_add_opt(h->st, STAT_connections_refused_per_ip, 1);
    return false;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    struct httpd *h = arg;
    struct admission ad = {0};
    int one = 1;
    (void)l;
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    if (!admit(h, sa, salen, &ad)) {
        evutil_closesocket(fd); /* every place in the reserve is answering */
        return;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn_create(h, fd, sa, salen, &ad);
}

/* EMFILE, ENFILE, ENOBUFS...: retrying at once would spin, so pause accepting. */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
    struct httpd *h = arg;
    int err = EVUTIL_SOCKET_ERROR();
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    log_warn("httpd: accept failed: %s; pausing accepts for %d ms",
             evutil_socket_error_to_string(err), ACCEPT_PAUSE_US / 1000);
    evconnlistener_disable(l);
    struct timeval tv = {0, ACCEPT_PAUSE_US};
    event_add(h->accept_timer, &tv);
}

static void accept_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    struct httpd *h = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    if (h->listener != NULL)
        evconnlistener_enable(h->listener);
}

/* ------------------------------------------------------------------------ */
/* Server                                                                    */

static void conf_defaults(struct httpd_conf *c)
{
    if (c->max_header_size == 0)
        c->max_header_size = DEF_MAX_HEADER_SIZE;
    if (c->max_headers == 0)
        c->max_headers = DEF_MAX_HEADERS;
    if (c->max_body_size == 0)
        c->max_body_size = DEF_MAX_BODY_SIZE;
    if (c->body_charge == 0)
        c->body_charge = 1;
    if (c->max_body_buffered == 0)
        c->max_body_buffered =
            c->max_body_size > SIZE_MAX / HTTPD_BODY_BUDGET_BODIES
                ? SIZE_MAX
                : PC_MAX(c->max_body_size * HTTPD_BODY_BUDGET_BODIES, HTTPD_BODY_BUDGET_MIN);
    if (c->read_timeout == 0)
        c->read_timeout = DEF_READ_TIMEOUT;
    if (c->idle_timeout == 0)
        c->idle_timeout = DEF_IDLE_TIMEOUT;
    if (c->write_timeout == 0)
        c->write_timeout = DEF_WRITE_TIMEOUT;
    if (c->max_connections == 0)
        c->max_connections = DEF_MAX_CONNECTIONS;
}

/* A Server value goes on the wire verbatim: visible ASCII and spaces only. */
static char *server_name_copy(const char *s)
{
    if (s == NULL || *s == '\0')
        return NULL;
    size_t n = strlen(s);
    if (!pc_http_field_value(s, n) || strchr(s, '\t') != NULL) {
        log_warn("httpd: server name has control characters; Server header disabled");
        return NULL;
    }
    return pc_strndup(s, PC_MIN(n, (size_t)SERVER_NAME_MAX));
}

/*
 * Zero size and count fields of conf take defaults, as do zero timeouts; a
 * negative timeout disables that timeout. NULL if the listener cannot be set up.
 */
struct httpd *httpd_create(struct event_base *base, int listen_fd, const struct httpd_conf *conf,
                           httpd_handler_fn *handler, void *handler_arg, struct stats *st)
{
    struct httpd *h = pc_calloc(1, sizeof(*h));
    h->magic = HTTPD_MAGIC;
    h->base = base;
    h->conf = *conf;
    conf_defaults(&h->conf);
    h->server_name = server_name_copy(conf->server_name);
    h->conf.server_name = h->server_name;
    h->handler = handler;
    h->handler_arg = handler_arg;
    h->st = st;
    h->spans = pc_calloc(h->conf.max_headers, sizeof(*h->spans));
    h->rbuf = pc_malloc(READ_AHEAD);
    h->accept_timer = event_new(base, -1, 0, accept_resume_cb, h);
    h->trim_ev = evtimer_new(base, trim_cb, h);
    if (h->accept_timer == NULL || h->trim_ev == NULL)
        goto fail;
    /* Shared by every worker: a blocking accept would hang the losers of a race. */
    if (evutil_make_socket_nonblocking(listen_fd) < 0)
        goto fail;
    h->listener = evconnlistener_new(base, accept_cb, h, LEV_OPT_CLOSE_ON_EXEC, 0, listen_fd);
    if (h->listener == NULL)
        goto fail;
    evconnlistener_set_error_cb(h->listener, accept_error_cb);
    __atomic_fetch_add(&g.httpds, 1, __ATOMIC_RELAXED);
    return h;

fail:
    log_error("httpd: cannot listen on fd %d", listen_fd);
    if (h->accept_timer != NULL)
        event_free(h->accept_timer);
    if (h->trim_ev != NULL)
        event_free(h->trim_ev);
    free(h->spans);
    free(h->rbuf);
    free(h->server_name);
    h->magic = 0;
    free(h);
    return NULL;
}

void httpd_stop_accepting(struct httpd *h)
{
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    h->stopping = true;
    if (h->listener != NULL) {
        evconnlistener_free(h->listener); /* the fd stays open: other workers use it */
        h->listener = NULL;
    }
    event_del(h->accept_timer);
    for (struct httpd_conn *c = h->conns; c != NULL; c = c->next)
        if (c->state == C_IDLE)
            conn_kill(c);
}

size_t httpd_active_requests(const struct httpd *h)
{
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    return h->nactive;
}

size_t httpd_connection_count(const struct httpd *h)
{
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    return h->nconns;
}

size_t httpd_buffered_body_bytes(const struct httpd *h)
{
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    return h->body_bytes;
}

/* Must not be called from inside one of this httpd's callbacks. */
void httpd_destroy(struct httpd **hp)
{
    struct httpd *h = *hp;
    if (h == NULL)
        return;
    PC_CHECK_OBJ(h, HTTPD_MAGIC);
    if (h->listener != NULL)
        evconnlistener_free(h->listener);
    h->listener = NULL;
    event_free(h->accept_timer);
    event_free(h->trim_ev);
    while (h->conns != NULL) {
        struct httpd_conn *c = h->conns;
        struct httpd_req *r = c->req;
        if (r != NULL && r->dispatched && !r->finished && !r->close_called) {
            r->gone = true;
            r->close_called = true;
            if (r->close_fn != NULL)
                r->close_fn(r, r->close_arg);
        }
        conn_free(c);
    }
    __atomic_fetch_sub(&g.httpds, 1, __ATOMIC_RELAXED);
    free(h->spans);
    free(h->rbuf);
    free(h->server_name);
    h->magic = 0;
    free(h);
    *hp = NULL;
}

/* ------------------------------------------------------------------------ */
/* Request accessors                                                         */

const char *httpd_req_method(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->method;
}

const char *httpd_req_target(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->target;
}

const char *httpd_req_path(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->path;
}

const char *httpd_req_query(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->query;
}

int httpd_req_minor_version(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->minor;
}

const char *httpd_req_header(const struct httpd_req *r, const char *name)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    for (size_t i = 0; i < r->nheaders; i++)
        if (pc_strcaseeq(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}

size_t httpd_req_header_count(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->nheaders;
}

const struct httpd_header *httpd_req_header_at(const struct httpd_req *r, size_t i)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return i < r->nheaders ? &r->headers[i] : NULL;
}

const char *httpd_req_body(const struct httpd_req *r, size_t *len)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (len != NULL)
        *len = r->body != NULL ? r->body_len : 0;
    return r->body != NULL ? r->body : "";
}

enum httpd_req_error httpd_req_error(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->error;
}

int httpd_req_charge(struct httpd_req *r, size_t n)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    struct httpd *h = r->conn->h;
    if (n == 0)
        return 0;
    if (!body_take(h, n)) {
        budget_refused(h);
        return -1;
    }
    r->charged += n;
    return 0;
}

const char *httpd_req_peer(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return conn_peer(r->conn);
}

uint64_t httpd_req_start_us(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    return r->start_us;
}

/* ------------------------------------------------------------------------ */
/* Replies                                                                   */

/* Headers httpd writes itself; a handler's copy would contradict them. */
static bool reserved_header(const char *name)
{
    return pc_strcaseeq(name, "content-length") || pc_strcaseeq(name, "transfer-encoding") ||
           pc_strcaseeq(name, "connection") || pc_strcaseeq(name, "date");
}

/* CR/LF in either would allow response splitting. */
static bool valid_header(const char *name, const char *value)
{
    return pc_http_token(name, strlen(name)) && pc_http_field_value(value, strlen(value));
}

void httpd_add_header(struct httpd_req *r, const char *name, const char *value)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->started || r->finished || r->gone)
        return;
    if (!valid_header(name, value) || reserved_header(name)) {
        /* Debug only: a handler relaying a bad upstream would flood the log. */
        log_debug("httpd: %s: reply header dropped (invalid or set by httpd)", conn_peer(r->conn));
        return;
    }
    struct pc_buf *b = &r->conn->hdrs;
    size_t nl = strlen(name), vl = strlen(value);
    pc_buf_reserve(b, nl + vl + 4);
    pc_buf_append(b, name, nl);
    pc_buf_append(b, ": ", 2);
    pc_buf_append(b, value, vl);
    pc_buf_append(b, "\r\n", 2);
}

/* Whether this reply can promise keep-alive; also what the finish will do. */
static bool reply_keep_alive(const struct httpd_req *r)
{
    const struct httpd_conn *c = r->conn;
    return r->keep_alive && !c->h->stopping && !c->eof && r->error == HTTPD_REQ_OK;
}

/* The reply is complete: on to the next request or to closing (via the deferred event). */
static void req_finish(struct httpd_req *r)
{
    struct httpd_conn *c = r->conn;
    r->finished = true;
    c->h->nactive--;
    if (r->gone)
        return; /* the connection is dead; its deferred event frees r */
    r->drain_fn = NULL;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (r->keep_alive && !c->h->stopping)
        c->state = C_NEXT;
    else
        conn_start_close(c);
    conn_schedule(c);
}

void httpd_reply(struct httpd_req *r, int status, const void *body, size_t len)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->finished)
        return;
    if (r->started) { /* misuse: finish the stream with it */
        httpd_reply_chunk(r, body, len);
        httpd_reply_end(r);
        return;
    }
    r->started = true;
    if (!r->gone) {
        bool no_body = status < 200 || status == 204 || status == 304;
        bool send_body = !no_body && !r->is_head && len != 0;
        r->keep_alive = reply_keep_alive(r);
        write_head(r->conn, status, no_body ? FRAME_NONE : FRAME_LENGTH, len, r->keep_alive,
                   send_body ? len : 0);
        if (send_body)
            evbuffer_add(bufferevent_get_output(r->conn->bev), body, len);
        conn_flush(r->conn, true);
    }
    req_finish(r);
}

void httpd_reply_start(struct httpd_req *r, int status)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->started || r->finished)
        return;
    r->started = true;
    if (r->gone)
        return;
    r->keep_alive = reply_keep_alive(r);
    enum frame fr = FRAME_CHUNKED;
    if (status < 200 || status == 204 || status == 304) {
        /* These never have a body: no framing, and chunks are dropped. */
        fr = FRAME_NONE;
        r->no_body_out = true;
    } else if (r->minor == 0) {
        fr = FRAME_CLOSE;
        r->keep_alive = false;
    }
    r->chunked_out = fr == FRAME_CHUNKED;
    write_head(r->conn, status, fr, 0, r->keep_alive, 0);
    conn_flush(r->conn, false);
}

void httpd_reply_chunk(struct httpd_req *r, const void *data, size_t len)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (!r->started || r->finished || r->gone || r->is_head || r->no_body_out || len == 0)
        return;
    struct evbuffer *out = bufferevent_get_output(r->conn->bev);
    if (!r->chunked_out) {
        evbuffer_add(out, data, len);
        conn_flush(r->conn, false);
        return;
    }
    char hex[24];
    size_t n = pc_u64_hex(len, hex);
    memcpy(hex + n, "\r\n", 2);
    n += 2;
    if (len <= EXPAND_MAX)
        evbuffer_expand(out, n + len + 2);
    evbuffer_add(out, hex, n);
    evbuffer_add(out, data, len);
    evbuffer_add(out, "\r\n", 2);
    conn_flush(r->conn, false);
}

void httpd_reply_end(struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->finished)
        return;
    if (!r->started)
        httpd_reply_start(r, 200);
    if (!r->gone && r->chunked_out && !r->is_head)
        evbuffer_add(bufferevent_get_output(r->conn->bev), "0\r\n\r\n", 5);
    if (!r->gone)
        conn_flush(r->conn, true);
    req_finish(r);
}

/*
 * Finish r by closing the connection after what is already queued, without
 * the last chunk, so an HTTP/1.1 client sees the stream as truncated. (An
 * HTTP/1.0 stream is close-delimited: there truncation cannot be told.)
 */
void httpd_reply_abort(struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->finished)
        return;
    r->started = true;
    r->keep_alive = false;
    /*
     * Write what is queued now, as httpd_reply_end does: a chunk queued this
     * turn waits for the deferred flush, which writes it but never lingers,
     * so a CLOSING connection whose output the socket took at once stayed
     * open (no timer, no write callback) and the client hung.
     */
    if (!r->gone)
        conn_flush(r->conn, true);
    req_finish(r);
}

size_t httpd_reply_queued(const struct httpd_req *r)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    if (r->gone)
        return 0;
    return evbuffer_get_length(bufferevent_get_output(r->conn->bev));
}

void httpd_set_drain_cb(struct httpd_req *r, size_t lowmark, httpd_req_fn *fn, void *arg)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    r->drain_fn = fn;
    r->drain_arg = arg;
    r->drain_low = lowmark;
    if (!r->gone && !r->finished)
        bufferevent_setwatermark(r->conn->bev, EV_WRITE, fn != NULL ? lowmark : 0, 0);
}

void httpd_set_close_cb(struct httpd_req *r, httpd_req_fn *fn, void *arg)
{
    PC_CHECK_OBJ(r, REQ_MAGIC);
    r->close_fn = fn;
    r->close_arg = arg;
}

/* ---- max-connections-per-ip-exempt (pc_conf.h's rules) ---------------------------- */

/* One value: an address, or a prefix of them. */
static int check_net(const char *v, char *err, size_t errlen)
{
    struct httpd_net net;
    if (httpd_net_parse(v, &net) < 0) {
        char b[80];
        snprintf(err, errlen, "%s is not an IPv4 or IPv6 address or ADDRESS/BITS prefix",
                 conf_show(v, b, sizeof b));
        return -1;
    }
    return 0;
}

static const struct conf_rule rules[] = {
    {.key = "max-connections-per-ip-exempt", .check = check_net},
};

int httpd_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
