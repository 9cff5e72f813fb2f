/*
 * pc_upstream.h - HTTP calls to upstreams with libcurl's multi_socket API,
 * driven by the worker's event_base (curl's hiperfifo pattern: a socket
 * callback keeps one libevent event per socket, a timer callback keeps one
 * timer, and both call curl_multi_socket_action then drain
 * curl_multi_info_read). No call here blocks.
 *
 * One struct upstream per worker; it owns the multi handle (and so the pool of
 * keep-alive connections). One struct xfer per call. Calls use HTTP/1.1 only,
 * so that a paused transfer is held back by TCP flow control.
 *
 * Callback rules:
 *   - on_head and on_data run from inside libcurl callbacks. They may call
 *     xfer_abort (which defers the removal of the easy handle) but must not
 *     free anything libcurl still uses.
 *   - on_done runs outside libcurl callbacks, exactly once, unless xfer_abort
 *     was called first (then never). The xfer is already freed when it runs.
 *   - xfer_resume may deliver buffered data synchronously: on_data can run
 *     inside xfer_resume.
 *   - xfer_start may be called from any callback; from on_head/on_data the
 *     transfer is added to libcurl on the next loop iteration.
 *   - upstream_destroy must not be called from inside any of these callbacks.
 *
 * Resending. libcurl 7.88 sends a request again on its own when a reused
 * keep-alive connection turns out dead: when writing the request fails, or
 * when the connection ends before any response byte (Curl_retry_request),
 * up to 5 times - a POST that went out whole included, so one client call
 * could reach the upstream six times. Here each attempt passes a gate
 * (CURLOPT_PREREQFUNCTION, called right before a request is written; the
 * request bytes written so far are CURLINFO_REQUEST_SIZE, which adds up over
 * the attempts of a transfer): a resend is allowed only if no byte of the
 * request was written before - the connection was dead before the request,
 * so the upstream cannot have received it - and only once. Otherwise the
 * call fails (XFER_ERR_IO, 502) and is never repeated: an upstream that read
 * the request may be generating (and billing) its answer. Resends are
 * counted in upstream_retries.
 *
 * Stale connections. Bytes on a pooled connection between two transfers
 * were sent unasked and would be read as the next request's answer (maybe
 * another tenant's). Idle pooled connections are watched: data or the close
 * shuts one down, so libcurl drops it. Right before a request is written on
 * a pooled connection, it is peeked: anything waiting shuts it down, the
 * write fails with nothing of the request written, and the resend above
 * takes a fresh connection.
 *
 * Framing. A response head whose Content-Length is not one plain number
 * (all copies equal), whose Transfer-Encoding is anything but one plain
 * "chunked", or that has both, fails the call (XFER_ERR_IO, 502): libcurl
 * would read such bodies leniently, cut at the wrong place.
 */
#ifndef PC_UPSTREAM_H
#define PC_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct stats;
struct upstream;
struct xfer;

struct xfer_header {
    const char *name;
    const char *value;
};

/* Results passed to on_done. */
enum xfer_result {
    XFER_OK = 0,           /* complete response received */
    XFER_ERR_TIMEOUT = -1, /* no response head, or no body bytes, within timeout -> 504 */
    XFER_ERR_CONNECT = -2, /* could not connect / resolve / TLS, no request byte sent -> 502 */
    XFER_ERR_IO = -3,      /* connection reset, truncated or malformed response -> 502 */
    XFER_ERR_INTERNAL = -4,
    XFER_ERR_CONNECT_TIMEOUT = -5, /* no connection within a timeout, no request byte sent -> 504 */
};

/* Return values of on_data. */
#define XFER_CONTINUE 0
#define XFER_PAUSE    1

struct xfer_ops {
    /* The final response's status and headers (1xx responses are skipped). Names and
     * values are trimmed; a field whose name is not a token or whose value has control
     * characters is dropped (pc_http_token, pc_http_field_value). h and its strings are
     * valid only during the call. */
    void (*on_head)(void *arg, int status, const struct xfer_header *h, size_t nh);
    /* Body bytes as they arrive; return XFER_PAUSE to stop delivery until xfer_resume.
     * XFER_PAUSE means these bytes were NOT consumed: the same bytes are passed
     * again after xfer_resume (libcurl's CURL_WRITEFUNC_PAUSE semantics). */
    int (*on_data)(void *arg, const char *data, size_t len);
    /* The call ended; errmsg is a short human text (NULL on success), valid during the call. */
    void (*on_done)(void *arg, enum xfer_result result, const char *errmsg);
};

struct xfer_req {
    const char *method; /* "GET", "POST", ... */
    const char *url;    /* absolute URL */
    /* Sent as given (copied); hop-by-hop already removed. Content-Length,
     * Transfer-Encoding and Expect are dropped (framing comes from body_len; no
     * 100-continue); an empty value is sent as an empty field. libcurl adds Host
     * when absent, and no User-Agent, Accept, Accept-Encoding or Content-Type. */
    const struct xfer_header *headers;
    size_t nheaders;
    const char *body;       /* copied; may be NULL when body_len == 0 */
    size_t body_len;        /* POST/PUT/PATCH always send Content-Length; HEAD never a body */
    double timeout;         /* seconds until the head, and max gap between body bytes while
                               not paused; <= 0: none */
    double connect_timeout; /* seconds; <= 0: libcurl's default */
};

struct upstream *upstream_create(struct event_base *base, struct stats *st);
/* Aborts running transfers without calling their on_done. */
void upstream_destroy(struct upstream **u);
size_t upstream_active(const struct upstream *u);

/* Start a call; NULL if it could not even be set up, or the method, a header name
 * or value is invalid (then no callback runs). */
struct xfer *xfer_start(struct upstream *u, const struct xfer_req *req, const struct xfer_ops *ops,
                        void *arg);
/* Resume a transfer paused by on_data returning XFER_PAUSE. */
void xfer_resume(struct xfer *x);
/* Stop the call; no callback runs after this; *x is set to NULL. Safe anywhere. */
void xfer_abort(struct xfer **x);

/* Well-known HTTP status for a failed result (504 or 502). */
int xfer_result_status(enum xfer_result r);

/*
 * The resend rule (see Resending above): whether attempt number attempt (1
 * is the first send, 2 the first resend) may go ahead when request_bytes
 * bytes of the request were written by the attempts before it.
 */
bool xfer_resend_allowed(unsigned attempt, long request_bytes);

/*
 * For tests: fn runs inside libcurl right before each attempt's request is
 * written (attempt numbered from 1; local_port of the connection it uses),
 * so a test can kill a reused connection exactly there. NULL clears it.
 */
typedef void upstream_attempt_fn(void *arg, unsigned attempt, int local_port);
void upstream_set_attempt_hook(struct upstream *u, upstream_attempt_fn *fn, void *arg);

#endif
