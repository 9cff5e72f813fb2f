/*
 * pc_httpd.h - the HTTP/1.1 server clients reach the proxy through: request
 * line, headers, body, whole or streamed replies, close notification. It runs
 * on one worker's event_base over libevent bufferevents; the rest of the code
 * never touches the wire format.
 *
 * Why not evhttp: libevent 2.1's evhttp answers an over-long body with its
 * own HTML 413 (callers must get an error in their API's JSON format), stops
 * reading while a request is being handled (so a client that hangs up during
 * a long upstream call goes unnoticed and its upstream call keeps running),
 * and aborts the process if bytes arrive in that state. This module keeps
 * reading (to see EOF), hands over-limit requests to the handler, and exposes
 * the output queue for backpressure.
 *
 * Lifetime of a struct httpd_req: created when a complete request head (and
 * body) has been read, handed to the handler, and owned by httpd throughout.
 * It stays valid until either
 *   - the handler finishes the reply (httpd_reply or httpd_reply_end), after
 *     which the caller must not touch it again, or
 *   - the client connection goes away first: the close callback runs once,
 *     and the request is freed after the callback returns.
 * Exactly one of the two happens. Requests pipelined on one connection are
 * handled one at a time, in order.
 *
 * A client that half-closes its connection (shutdown(SHUT_WR)) after sending
 * a request is treated as gone, as nginx does by default: the request is
 * abandoned (if the handler has it, its close callback runs) and no reply is
 * sent. On the read side a half-close looks exactly like a client that left,
 * and keeping a costly upstream call running for every vanished client would
 * be the worse mistake.
 *
 * httpd answers some requests itself, in the API's JSON error shape, and
 * closes the connection: 400, 431, 501, 505 for malformed heads (400 also for
 * an HTTP/1.1 request without exactly one valid Host header, or any request
 * with two, RFC 9112 section 3.2; bytes that cannot begin a request, a TLS
 * ClientHello say, get theirs as soon as they arrive), 417 for an Expect
 * other than 100-continue, and 503 (with Retry-After) when the request-body
 * budget or the connection limits below are reached. It also answers
 * "OPTIONS *" (200, no body; the connection kept): handlers only ever see
 * origin-form targets ("/path?query").
 *
 * Limits are process-wide: every httpd of the process (one per worker thread)
 * counts into the same totals.
 *   - Connections: at most conf.max_connections regular connections in all,
 *     and at most httpd_limits.max_connections_per_ip from one client
 *     address (except the exempt ones). A connection beyond either goes into
 *     a small reserve (httpd_limits.reserve connections, split equally
 *     between the httpds): it is read at once, its request head must arrive
 *     within HTTPD_RESERVE_SECONDS; a GET or HEAD of one of the reserve paths
 *     (the health endpoints) is handed to the handler as usual, anything
 *     else is answered 503 with Retry-After; either way the connection then
 *     closes. With the httpd's share of the reserve full, a new connection
 *     takes the place of the oldest reserve connection still waiting for its
 *     request head (closed), so idle or churning connections cannot lock
 *     health probes out; only when every place is being answered is the new
 *     one closed at once. Refusals are counted (connections_refused,
 *     connections_refused_per_ip).
 *   - Request memory: memory for a body grows as its bytes arrive (a head
 *     announcing a large Content-Length costs nothing until the body comes).
 *     Every body byte buffered is charged conf.body_charge bytes (the body and
 *     the copies its handler will make of it: a parse tree, a canonical text,
 *     the body sent on), and a handler may charge a request more
 *     (httpd_req_charge) once it knows better. All httpds' charges, from the
 *     first byte until their request is freed, share one budget
 *     (conf.max_body_buffered, in use in the request_memory_bytes gauge); a
 *     body that would take the total over it gets a 503.
 * After large bodies were freed (a burst of uploads), the process's free heap
 * memory is handed back to the system (malloc_trim) once the burst is over:
 * glibc would otherwise keep it, and an idle proxy would stay at its peak.
 */
#ifndef PC_HTTPD_H
#define PC_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct pc_buf;
struct stats;
struct httpd;
struct httpd_req;

struct httpd_header {
    const char *name;  /* as received */
    const char *value; /* leading/trailing blanks stripped */
};

enum httpd_req_error {
    HTTPD_REQ_OK = 0,
    HTTPD_REQ_BODY_TOO_LARGE, /* body over max_body_size: headers available, body empty */
};

/* Default request-body budget of the process: this many bodies of max_body_size ... */
#define HTTPD_BODY_BUDGET_BODIES 32
/* ... and never less than this. */
#define HTTPD_BODY_BUDGET_MIN ((size_t)256 * 1024 * 1024)
/* Connections kept for health probes beyond the limits, by default (all httpds together). */
#define HTTPD_RESERVE_DEFAULT 32
/* Seconds a reserve connection has to send its request head. */
#define HTTPD_RESERVE_SECONDS 2.0

/* Zero fields take httpd's defaults; a negative timeout disables that timeout. */
struct httpd_conf {
    size_t max_header_size;   /* request line + headers; over it: 431 from httpd itself */
    size_t max_headers;       /* header count; over it: 431 */
    size_t max_body_size;     /* over it: handler called with HTTPD_REQ_BODY_TOO_LARGE */
    size_t max_body_buffered; /* bytes charged for the requests of the process, all httpds and
                                 connections together; over it: 503 from httpd. 0:
                                 HTTPD_BODY_BUDGET_BODIES x max_body_size, at least
                                 HTTPD_BODY_BUDGET_MIN */
    size_t body_charge;       /* bytes charged per body byte buffered (give every httpd the
                                 same); 0: 1, the body alone */
    /* Seconds to receive a whole request: a new connection's first one counted from the
     * accept (waiting for its first byte included), later ones from their first byte
     * (idle_timeout bounds the wait for it). */
    double read_timeout;
    double idle_timeout;     /* seconds a keep-alive connection may sit idle */
    double write_timeout;    /* seconds a client may leave queued output unread */
    size_t max_connections;  /* regular connections of the process, all httpds together (give
                                every httpd the same value); beyond: the reserve (above) */
    const char *server_name; /* Server: header value, NULL = none */
};

/*
 * Process-wide settings, shared by every httpd: set them while no httpd's
 * loop runs (once, before the workers start; not thread-safe). Zero fields
 * take defaults; what the pointers point to must outlive every httpd.
 */
/* A client address range: the first bits of ip (IPv4 mapped into IPv6: 96 + its bits). */
struct httpd_net {
    unsigned char ip[16];
    unsigned bits;
};
/* "ADDRESS" or "ADDRESS/BITS", IPv4 or IPv6, into out: 0, or -1 if it is not one. */
int httpd_net_parse(const char *s, struct httpd_net *out);

struct httpd_limits {
    size_t max_connections_per_ip;  /* regular connections from one client address; 0: none */
    const struct httpd_net *exempt; /* addresses max_connections_per_ip leaves alone */
    size_t nexempt;
    size_t reserve;                   /* the reserve's size; 0: HTTPD_RESERVE_DEFAULT */
    const char *const *reserve_paths; /* NULL-terminated paths a reserve connection may GET
                                         (the health endpoints); NULL: none */
    /* The JSON body of httpd's own refusals once the request's path is known (status,
     * httpd's message): in the shape of the API behind that path. NULL, or nothing
     * appended: httpd's {"error":{"message","type","code":null}}. */
    void (*error_body)(const char *path, int status, const char *message, struct pc_buf *out);
};
void httpd_set_limits(const struct httpd_limits *l);
/* Bytes charged for the requests of the whole process now (bodies and what else was charged). */
size_t httpd_process_body_bytes(void);
/* Times the process handed freed heap memory back to the system (malloc_trim). */
uint64_t httpd_memory_trims(void);

typedef void httpd_handler_fn(struct httpd_req *r, void *arg);
typedef void httpd_req_fn(struct httpd_req *r, void *arg);

/*
 * Serve on listen_fd (already bound and listening; shared by all workers, so
 * httpd never closes it). handler runs for every complete request with
 * handler_arg. st (may be NULL) gets connections_active updates and the
 * counts of refusals and memory trims.
 */
struct httpd *httpd_create(struct event_base *base, int listen_fd, const struct httpd_conf *conf,
                           httpd_handler_fn *handler, void *handler_arg, struct stats *st);
/* Stop accepting, close idle connections; replies started later carry Connection: close. */
void httpd_stop_accepting(struct httpd *h);
size_t httpd_active_requests(const struct httpd *h);
size_t httpd_connection_count(const struct httpd *h);
/* Bytes charged for this httpd's requests now (its share of max_body_buffered). */
size_t httpd_buffered_body_bytes(const struct httpd *h);
/* Close every connection (close callbacks of open requests run) and free. */
void httpd_destroy(struct httpd **h);

/* Request accessors (strings are NUL-terminated and owned by the request). */
const char *httpd_req_method(const struct httpd_req *r);                   /* "GET", "POST", ... */
const char *httpd_req_target(const struct httpd_req *r);                   /* raw request-target */
const char *httpd_req_path(const struct httpd_req *r);                     /* target up to '?' */
const char *httpd_req_query(const struct httpd_req *r);                    /* after '?', or NULL */
int httpd_req_minor_version(const struct httpd_req *r);                    /* 0 or 1 (HTTP/1.x) */
const char *httpd_req_header(const struct httpd_req *r, const char *name); /* first, any case */
size_t httpd_req_header_count(const struct httpd_req *r);
const struct httpd_header *httpd_req_header_at(const struct httpd_req *r, size_t i);
/* The body (decoded if it was sent chunked), NUL-terminated; len may be NULL. */
const char *httpd_req_body(const struct httpd_req *r, size_t *len);
enum httpd_req_error httpd_req_error(const struct httpd_req *r);
/*
 * Charge n more bytes of the process's request memory to r (what its handler
 * holds because of it beyond conf.body_charge x its body), given back when r
 * is freed. 0; or -1 if that would take the total over max_body_buffered:
 * nothing is charged, the refusal is counted (requests_over_body_budget) and
 * logged (at most once a minute), and the handler should answer 503 with
 * Retry-After in its API's shape.
 */
int httpd_req_charge(struct httpd_req *r, size_t n);
const char *httpd_req_peer(const struct httpd_req *r);  /* "ip:port" */
uint64_t httpd_req_start_us(const struct httpd_req *r); /* pc_mono_us() when the head arrived */

/*
 * Replies. Headers added before httpd_reply/httpd_reply_start are sent with
 * them; httpd adds Content-Length or Transfer-Encoding, Connection and Date
 * itself (callers must not add those).
 */
void httpd_add_header(struct httpd_req *r, const char *name, const char *value);
/* Whole reply; finishes r. HEAD requests get the headers only. */
void httpd_reply(struct httpd_req *r, int status, const void *body, size_t len);
/* Streamed reply: chunked for HTTP/1.1, close-delimited for HTTP/1.0. */
void httpd_reply_start(struct httpd_req *r, int status);
void httpd_reply_chunk(struct httpd_req *r, const void *data, size_t len);
/* Finishes r. */
void httpd_reply_end(struct httpd_req *r);
/*
 * Finishes r by closing the connection without completing the streamed reply
 * (no last chunk), so the client sees a truncated answer as truncated. Used
 * when the upstream breaks off mid-answer.
 */
void httpd_reply_abort(struct httpd_req *r);
/* Bytes of reply queued in user space and not yet written to the socket. */
size_t httpd_reply_queued(const struct httpd_req *r);
/*
 * Backpressure: fn runs each time the queued output drains to lowmark bytes
 * or fewer while a streamed reply is open. Pass fn NULL to clear.
 */
void httpd_set_drain_cb(struct httpd_req *r, size_t lowmark, httpd_req_fn *fn, void *arg);
/* fn runs once if the client goes away before the reply is finished. */
void httpd_set_close_cb(struct httpd_req *r, httpd_req_fn *fn, void *arg);

/* Reason phrase for a status code ("OK", "Bad Gateway", ...). */
const char *httpd_reason(int status);

/*
 * The pure request-head parser, exposed for the fuzz and unit tests. Parses
 * buf[0..len) as a request line and headers ending in an empty line.
 * Returns the head's length (> 0), 0 if more bytes are needed, or -status
 * (-400, -431, -501, -505) if the head is invalid.
 */
struct httpd_head {
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    int minor_version;
    struct httpd_header_span {
        const char *name;
        size_t name_len;
        const char *value;
        size_t value_len;
    } * headers; /* caller-provided array */
    size_t nheaders;
    size_t max_headers; /* capacity of headers */
};
long httpd_parse_head(const char *buf, size_t len, struct httpd_head *head);
/*
 * The Host rule of RFC 9112 section 3.2 on a parsed head: an HTTP/1.1 request
 * has exactly one Host header, no request has two, and its value is empty or
 * uri-host [":" port]. 0, or -400.
 */
int httpd_head_check_host(const struct httpd_head *head);

/* Register the check of max-connections-per-ip-exempt with the configuration (pc_conf.h). */
int httpd_add_conf_rules(void);

#endif
