/*
 * upstream.c - HTTP calls to upstreams: libcurl's multi_socket API driven by
 * the worker's libevent event_base (see pc_upstream.h for the contract).
 *
 * Owns, per worker: one CURLM (and with it the keep-alive connection pool),
 * one libevent event per socket curl watches, one per idle pooled
 * connection (struct uidle: bytes or a close there end it), curl's timer, a
 * "kick" timer;
 * per call: one easy handle, the copied request, an idle-timeout timer and a
 * zero-timeout "defer" timer.
 *
 *   libevent                         libcurl                              caller
 *   --------                         -------                              ------
 *   usock->ev  (fd ready)     --+
 *   u->timer   (curl's timer) --+--> curl_multi_socket_action
 *   u->kick    (after resume) --+      |  calls back:
 *                                      +-- socket cb: new/re-arm/free usock->ev
 *                                      +-- timer cb:  arm/delete u->timer
 *                                      +-- header cb: collect, skip 1xx --> on_head
 *                                      +-- write cb:  body bytes ---------> on_data
 *                                    then upstream_drain:
 *                                      curl_multi_info_read, remove and
 *                                      clean up the easy handle ----------> on_done
 *
 *   x->timeout_ev (idle timer) ----> remove, clean up the easy handle ----> on_done(TIMEOUT)
 *   x->defer_ev (zero timeout) ----> reap an xfer aborted inside a callback (no callback),
 *                                    finish a failed one, add one started inside a
 *                                    callback, or redo a resume asked for in its on_data
 *
 * Transfers are pinned to HTTP/1.1 (CURLOPT_HTTP_VERSION), so that pausing a
 * transfer for a slow client (CURL_WRITEFUNC_PAUSE) is plain TCP flow control
 * on a connection of its own: the upstream's send window fills and it waits.
 * Over HTTP/2 a paused stream's data would keep arriving and pile up inside
 * curl, and the connection it shares with other calls would be affected too.
 *
 * Response heads are checked field by field with the same rules httpd applies
 * to requests (pc_http_token, pc_http_field_value): a field with an invalid
 * name or control characters in its value is dropped, counted, and reported
 * in one log line per transfer, never passed on.
 *
 * The rule that shapes everything: user code (on_head, on_data) runs inside
 * libcurl callbacks, where curl_multi_remove_handle/add_handle are refused and
 * freeing the easy handle would be fatal. u->cb_depth says when we are there;
 * anything that would touch the multi handle is then deferred to x->defer_ev.
 * on_done only ever runs from an event handler, after the easy handle is gone.
 *
 * Every attempt to send a transfer's request passes xfer_on_prereq first
 * (see "Resending" in pc_upstream.h): libcurl's own resends on a dead reused
 * connection are let through once, and only when nothing of the request was
 * written yet.
 */
#include "pc_upstream.h"
#include "pc_log.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <event2/event.h>

#if LIBCURL_VERSION_NUM < 0x075700
#error "upstream.c needs libcurl >= 7.87 (PROTOCOLS_STR, PREREQFUNCTION, QUICK_EXIT)"
#endif

#define UPSTREAM_MAGIC 0x55505354u /* "UPST" */
#define USOCK_MAGIC    0x55534f4bu /* "USOK" */
#define XFER_MAGIC     0x58464552u /* "XFER" */
#define UIDLE_MAGIC    0x5549444cu /* "UIDL" */

#define UPSTREAM_MAXCONNECTS 256
/* Caps on a response head (input from the network). */
#define XFER_MAX_HEADERS    256
#define XFER_MAX_HEAD_BYTES (64 * 1024)

/* One watched socket: curl tells us what it wants, libevent tells curl when. */
struct usock {
    unsigned magic;
    struct upstream *u;
    curl_socket_t fd;
    short flags; /* EV_READ|EV_WRITE currently armed */
    bool rests;  /* its transfer ended and left it in the pool: idle once libcurl lets go */
    struct event *ev;
    struct usock *prev, *next;
};

/*
 * A keep-alive connection resting in libcurl's pool between two transfers.
 * Nothing may arrive on it: bytes there were sent unasked (a second answer
 * after the first, a hostile or broken upstream) and would be read as the
 * answer to whichever request reuses the connection next - maybe another
 * tenant's. A read event watches it; data or its close shut it down, so that
 * libcurl drops it (its liveness check sees the end) instead of reusing it.
 */
struct uidle {
    unsigned magic;
    struct upstream *u;
    curl_socket_t fd;
    int local_port; /* to find it again in the pre-request callback */
    struct event *ev;
    struct uidle *prev, *next;
};

#define EASY_POOL 32

struct upstream {
    unsigned magic;
    struct event_base *base;
    struct stats *st; /* may be NULL */
    CURLM *multi;
    struct event *timer; /* curl's timer (CURLMOPT_TIMERFUNCTION) */
    struct event *kick;  /* one socket_action(TIMEOUT) pass after a resume */
    struct xfer *xfers;  /* every xfer not yet freed, aborted ones included */
    struct usock *socks;
    struct uidle *idle;     /* pooled connections between transfers */
    size_t active;          /* started and neither finished nor aborted */
    unsigned cb_depth;      /* > 0 while on_head/on_data run (inside libcurl) */
    bool adding;            /* inside curl_multi_add_handle */
    CURL *spare[EASY_POOL]; /* reset easy handles kept for reuse: cheaper than new ones */
    size_t nspare;
    upstream_attempt_fn *attempt_hook; /* tests only */
    void *attempt_arg;
};

enum head_state {
    HEAD_STATUS, /* waiting for a status line */
    HEAD_FIELDS, /* collecting header fields */
    HEAD_DONE,   /* on_head delivered; later lines are trailers, ignored */
};

struct xfer {
    unsigned magic;
    struct upstream *u;
    CURL *easy;
    struct xfer *prev, *next;
    struct xfer_ops ops;
    void *arg;

    char *method, *url, *body; /* own copies; body is what POSTFIELDS points at */
    size_t body_len;
    struct curl_slist *hdrs;
    double timeout;
    struct event *timeout_ev;
    struct event *defer_ev;

    /* Response head being collected: "name\0value\0" pairs. */
    enum head_state head;
    int status;
    struct pc_buf hbuf;
    size_t nh;
    size_t last_field; /* hbuf offset of the last pair stored */
    bool fold_ok;      /* the last field line was stored: an obs-fold line continues it */
    size_t dropped;    /* invalid field lines dropped, this transfer */
    bool bad_framing;  /* a Content-Length or Transfer-Encoding line was dropped as invalid */

    bool added;          /* the easy handle is in the multi handle */
    bool live;           /* counted in u->active / STAT_upstream_active */
    bool aborted;        /* xfer_abort ran: no callback may run any more */
    bool paused;         /* on_data returned XFER_PAUSE; curl holds the data */
    bool in_cb;          /* this xfer's on_head/on_data is running */
    bool resume_pending; /* xfer_resume called from this xfer's own on_data */
    bool resume_later;   /* ... and on_data then paused: resume from defer_ev */
    bool failed;         /* our own failure: finish with fail_result/fail_msg */
    unsigned attempts;   /* requests libcurl set out to write (1 + its resends) */
    enum xfer_result fail_result;
    char fail_msg[128];
    char errbuf[CURL_ERROR_SIZE];
};

/* ---- small helpers ------------------------------------------------------ */

static void upstream_stat(struct upstream *u, enum stat_id id, int64_t n)
{
    if (u->st != NULL)
        stats_add(u->st, id, n);
}

/* Schedule x->defer_ev to run on the next loop iteration (outside libcurl). */
static void xfer_defer(struct xfer *x)
{
    struct timeval zero = {0, 0};
    evtimer_add(x->defer_ev, &zero);
}

/* (Re)start the idle timer: the head, or the next body byte, must arrive in time. */
static void xfer_arm_timeout(struct xfer *x)
{
    if (x->timeout <= 0)
        return;
    struct timeval tv = pc_timeval(x->timeout);
    evtimer_add(x->timeout_ev, &tv);
}

/*
 * Ask for one curl_multi_socket_action(CURL_SOCKET_TIMEOUT) pass soon, so a
 * resumed transfer moves even if no socket event comes (its bytes may already
 * sit in curl's or the kernel's buffer). curl_easy_pause normally arms curl's
 * timer itself; this is insurance that costs one loop pass. A separate event
 * from u->timer: overwriting curl's timer could lose it, because curl only
 * calls the timer callback when its next deadline changes.
 */
static void upstream_kick(struct upstream *u)
{
    struct timeval zero = {0, 0};
    evtimer_add(u->kick, &zero);
}

/* curl_multi_add_handle, its first pass due in this loop turn (upstream_curl_timer). */
static CURLMcode add_handle(struct upstream *u, CURL *easy)
{
    u->adding = true;
    CURLMcode mc = curl_multi_add_handle(u->multi, easy);
    u->adding = false;
    return mc;
}

/* Record a failure of our own, to be reported instead of curl's CURLcode. */
static void xfer_fail(struct xfer *x, enum xfer_result r, const char *msg)
{
    if (x->failed)
        return;
    x->failed = true;
    x->fail_result = r;
    snprintf(x->fail_msg, sizeof x->fail_msg, "%s", msg);
    xfer_defer(x);
}

/* Stop counting x as in progress (once). */
static void xfer_retire(struct xfer *x)
{
    if (!x->live)
        return;
    x->live = false;
    x->u->active--;
    upstream_stat(x->u, STAT_upstream_active, -1);
}

/* Release everything x owns. Must run outside libcurl callbacks. No callback. */
static void xfer_free(struct xfer *x)
{
    struct upstream *u = x->u;
    xfer_retire(x);
    if (x->added)
        curl_multi_remove_handle(u->multi, x->easy);
    if (x->easy != NULL) {
        if (u->nspare < EASY_POOL) {
            curl_easy_reset(x->easy);
            u->spare[u->nspare++] = x->easy;
        } else {
            curl_easy_cleanup(x->easy);
        }
    }
    curl_slist_free_all(x->hdrs);
    if (x->timeout_ev != NULL)
        event_free(x->timeout_ev);
    if (x->defer_ev != NULL)
        event_free(x->defer_ev);
    pc_buf_free(&x->hbuf);
    free(x->method);
    free(x->url);
    free(x->body);
    if (x->prev != NULL)
        x->prev->next = x->next;
    else if (u->xfers == x)
        u->xfers = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    x->magic = 0;
    free(x);
}

/*
 * End x: free it, count the outcome, then call on_done (last: the callback may
 * start new transfers). msg may point into x; it is copied first.
 */
static void xfer_finish(struct xfer *x, enum xfer_result r, const char *msg)
{
    struct upstream *u = x->u;
    struct xfer_ops ops = x->ops;
    void *arg = x->arg;
    char text[CURL_ERROR_SIZE + 64];

    snprintf(text, sizeof text, "%s", msg != NULL && *msg != '\0' ? msg : "upstream call failed");
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    if (r != XFER_OK)
        upstream_stat(u, STAT_upstream_errors, 1);
    if (r == XFER_ERR_TIMEOUT || r == XFER_ERR_CONNECT_TIMEOUT)
        upstream_stat(u, STAT_upstream_timeouts, 1);
    xfer_free(x);
    ops.on_done(arg, r, r == XFER_OK ? NULL : text);
}

/* ---- CURLcode -> xfer_result ---------------------------------------------- */

static enum xfer_result xfer_map_code(CURLcode c)
{
    switch (c) {
    case CURLE_OK:
        return XFER_OK;
    case CURLE_OPERATION_TIMEDOUT:
        return XFER_ERR_TIMEOUT;
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_INTERFACE_FAILED:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_USE_SSL_FAILED:
    case CURLE_PROXY:
    case CURLE_QUIC_CONNECT_ERROR:
        return XFER_ERR_CONNECT;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_UNSUPPORTED_PROTOCOL: /* an answer that is not HTTP (HTTP/0.9), or status 000 */
        return XFER_ERR_IO;
    default:
        return XFER_ERR_INTERNAL;
    }
}

int xfer_result_status(enum xfer_result r)
{
    return r == XFER_ERR_TIMEOUT || r == XFER_ERR_CONNECT_TIMEOUT ? 504 : 502;
}

/*
 * A header line over libcurl's own cap (100 KiB) is refused before the header
 * callback (and its XFER_MAX_HEAD_BYTES) sees it: CURLE_OUT_OF_MEMORY ("Out of
 * memory", which reads as the proxy's trouble) before curl 8.6, CURLE_TOO_LARGE
 * since.
 */
static bool head_over_curl_cap(CURLcode code)
{
#if LIBCURL_VERSION_NUM >= 0x080600
    if (code == CURLE_TOO_LARGE)
        return true;
#endif
    return code == CURLE_OUT_OF_MEMORY;
}

/* A transfer curl reported done (from upstream_drain, outside callbacks). */
static void xfer_complete(struct xfer *x, CURLcode code)
{
    if (x->failed) {
        xfer_finish(x, x->fail_result, x->fail_msg);
    } else if (code == CURLE_OK && x->head != HEAD_DONE) {
        xfer_finish(x, XFER_ERR_IO, "upstream sent no response head");
    } else if (code == CURLE_OK) {
        xfer_finish(x, XFER_OK, NULL);
    } else if (x->head != HEAD_DONE && head_over_curl_cap(code)) {
        xfer_finish(x, XFER_ERR_IO, "upstream response head too large");
    } else {
        const char *msg = x->errbuf[0] != '\0' ? x->errbuf : curl_easy_strerror(code);
        enum xfer_result r = xfer_map_code(code);
        /* Timed out before a request was ever written (TCP or TLS connect): the upstream never
         * saw it, as with a refused connection (a dead host drops SYNs rather than refuse). */
        if (r == XFER_ERR_TIMEOUT && x->attempts == 0)
            r = XFER_ERR_CONNECT_TIMEOUT;
        long sent = 0;
        if ((r == XFER_ERR_CONNECT || r == XFER_ERR_CONNECT_TIMEOUT) && x->attempts > 0 &&
            curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK && sent > 0) {
            /* libcurl's resend after a reused connection died found no new one (Curl_retry_request:
             * the replica went away): the request went out on the first, and the upstream may
             * have read it. Not a refusal, or the caller would send it to another replica. */
            r = XFER_ERR_IO;
            msg = "upstream connection lost after the request was sent, and no new one could be "
                  "made (not resent: the upstream may have received it)";
        }
        xfer_finish(x, r, msg);
    }
}

/* ---- the response head (header callback) ---------------------------------- */

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* "HTTP/1.1 200 OK" or "HTTP/2 200": the status code (100 to 599, RFC 9110 15), or -1. */
static int head_parse_status(const char *line, size_t len)
{
    if (len < 10 || memcmp(line, "HTTP/", 5) != 0)
        return -1;
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || (size_t)(line + len - sp) < 4)
        return -1;
    int code = 0;
    for (int i = 1; i <= 3; i++) {
        if (sp[i] < '0' || sp[i] > '9')
            return -1;
        code = code * 10 + (sp[i] - '0');
    }
    if (line + len > sp + 4 && sp[4] != ' ')
        return -1;
    return code >= 100 && code <= 599 ? code : -1; /* no client knows what 999 would mean */
}

static bool head_is_framing(const char *name, size_t len)
{
    return (len == 14 && pc_strncaseeq(name, "content-length", 14)) ||
           (len == 17 && pc_strncaseeq(name, "transfer-encoding", 17));
}

/*
 * An obs-fold line (leading blanks): continue the previous value after one
 * space (RFC 9112 5.2). A continuation with control characters drops the
 * whole field. 0, or -1 over the size cap.
 */
static int head_add_fold(struct xfer *x, const char *line, size_t len)
{
    while (len > 0 && is_blank(*line))
        line++, len--;
    if (!x->fold_ok)
        return 0; /* continues nothing, or a dropped field */
    if (!pc_http_field_value(line, len)) {
        x->hbuf.len = x->last_field;
        x->nh--;
        x->fold_ok = false;
        x->dropped++;
        return 0;
    }
    x->hbuf.len--; /* drop the value's NUL */
    pc_buf_append_char(&x->hbuf, ' ');
    pc_buf_append(&x->hbuf, line, len);
    pc_buf_append_char(&x->hbuf, '\0');
    return x->hbuf.len > XFER_MAX_HEAD_BYTES ? -1 : 0;
}

/*
 * Store one "Name: value" line (already without CRLF), trimmed, blanks before
 * the colon included (RFC 9112 5.1 asks a proxy to remove them). A line that
 * is not a field, a name that is not a token and a value with control
 * characters are dropped and counted. 0, or -1 over the caps.
 */
static int head_add_field(struct xfer *x, const char *line, size_t len)
{
    while (len > 0 && is_blank(line[len - 1]))
        len--;
    if (len == 0)
        return 0;
    if (is_blank(line[0]))
        return head_add_fold(x, line, len);
    x->fold_ok = false;
    const char *colon = memchr(line, ':', len);
    size_t nlen = colon != NULL ? (size_t)(colon - line) : 0;
    while (nlen > 0 && is_blank(line[nlen - 1]))
        nlen--;
    const char *v = colon != NULL ? colon + 1 : line + len, *end = line + len;
    while (v < end && is_blank(*v))
        v++;
    if (!pc_http_token(line, nlen) || !pc_http_field_value(v, (size_t)(end - v))) {
        /* libcurl reads its framing from the line all the same: no dropping that one */
        if (head_is_framing(line, nlen))
            x->bad_framing = true;
        x->dropped++;
        return 0;
    }
    if (x->nh >= XFER_MAX_HEADERS || x->hbuf.len + len + 2 > XFER_MAX_HEAD_BYTES)
        return -1;
    x->last_field = x->hbuf.len;
    pc_buf_append(&x->hbuf, line, nlen);
    pc_buf_append_char(&x->hbuf, '\0');
    pc_buf_append(&x->hbuf, v, (size_t)(end - v));
    pc_buf_append_char(&x->hbuf, '\0');
    x->nh++;
    x->fold_ok = true;
    return 0;
}

/* Content-Length values longer than this are refused (10^18 bytes is beyond any answer). */
#define HEAD_MAX_LENGTH_DIGITS 18

/*
 * Whether the framing of the final response head can be trusted: every
 * Content-Length is digits only (no sign, no list) and all of them agree;
 * Transfer-Encoding, if any, is one field saying exactly "chunked"; not both
 * (RFC 9112 6.1, 6.3: a message with both "ought to be handled as an error").
 * libcurl is lenient here (it reads "12x" as 12, reads a body of unknown
 * length on an overflowing one, takes the last of two values, and passes
 * codings it does not decode), and a body framed wrongly is a body cut at
 * the wrong place: another answer's bytes, or part of one. NULL if the
 * framing is sound, else why not.
 */
static const char *head_framing_error(const struct xfer *x)
{
    const char *p = x->hbuf.data, *length = NULL;
    size_t nte = 0;
    if (x->bad_framing)
        return "upstream sent an invalid Content-Length or Transfer-Encoding line";
    for (size_t i = 0; i < x->nh; i++) {
        const char *name = p, *value = p + strlen(p) + 1;
        p = value + strlen(value) + 1;
        if (pc_strcaseeq(name, "transfer-encoding")) {
            if (++nte > 1 || !pc_strcaseeq(value, "chunked"))
                return "upstream sent a Transfer-Encoding other than \"chunked\"";
        } else if (pc_strcaseeq(name, "content-length")) {
            size_t n = strlen(value);
            if (n == 0 || n > HEAD_MAX_LENGTH_DIGITS || strspn(value, "0123456789") != n)
                return "upstream sent an invalid Content-Length";
            if (length != NULL && strcmp(length, value) != 0)
                return "upstream sent two different Content-Length values";
            length = value;
        }
    }
    if (nte > 0 && length != NULL)
        return "upstream sent both Content-Length and Transfer-Encoding";
    return NULL;
}

/* Hand the collected head to on_head; the array and strings live only during the call. */
static void xfer_deliver_head(struct xfer *x)
{
    struct xfer_header *h = pc_calloc(x->nh ? x->nh : 1, sizeof *h);
    const char *p = x->hbuf.data;
    for (size_t i = 0; i < x->nh; i++) {
        h[i].name = p;
        p += strlen(p) + 1;
        h[i].value = p;
        p += strlen(p) + 1;
    }
    x->head = HEAD_DONE;
    if (x->dropped > 0) /* once per transfer, whatever the upstream sent */
        log_info("upstream: dropped %zu invalid response header line(s) (status %d)", x->dropped,
                 x->status);
    xfer_arm_timeout(x); /* from now on an idle timeout between body bytes */
    x->in_cb = true;
    x->u->cb_depth++;
    x->ops.on_head(x->arg, x->status, h, x->nh);
    x->u->cb_depth--;
    x->in_cb = false;
    free(h);
    pc_buf_free(&x->hbuf);
    x->nh = 0;
}

/*
 * One line of a response head. Interim (1xx) responses and their fields are
 * dropped; the blank line ending the final response delivers the head.
 * Returns 0 to go on, -1 after xfer_fail.
 */
static int xfer_head_line(struct xfer *x, const char *line, size_t len)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (x->head == HEAD_STATUS) {
        if (len == 0)
            return 0; /* stray blank line between responses */
        x->status = head_parse_status(line, len);
        if (x->status < 0) {
            xfer_fail(x, XFER_ERR_IO, "upstream sent a malformed status line");
            return -1;
        }
        x->head = HEAD_FIELDS;
        return 0;
    }
    if (len > 0) {
        if (head_add_field(x, line, len) < 0) {
            xfer_fail(x, XFER_ERR_IO, "upstream response head too large");
            return -1;
        }
        return 0;
    }
    if (x->status >= 100 && x->status < 200) {
        pc_buf_reset(&x->hbuf); /* interim response: forget it, wait for the next */
        x->nh = 0;
        x->fold_ok = false;
        x->bad_framing = false;
        x->head = HEAD_STATUS;
        return 0;
    }
    const char *framing = head_framing_error(x);
    if (framing != NULL) {
        xfer_fail(x, XFER_ERR_IO, framing);
        return -1;
    }
    xfer_deliver_head(x);
    return 0;
}

/* CURLOPT_HEADERFUNCTION. Returning a short count makes curl fail the transfer. */
static size_t xfer_on_header(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    size_t len = size * n;
    if (x->aborted || x->failed)
        return 0;
    if (x->head == HEAD_DONE)
        return len; /* trailers */
    if (xfer_head_line(x, p, len) < 0 || x->aborted)
        return 0;
    return len;
}

/* ---- pooled connections between transfers --------------------------------- */

/* Bytes sitting in a kernel buffer are discarded in pieces of this, up to IDLE_DRAIN_MAX. */
#define IDLE_DRAIN_PIECE 4096
#define IDLE_DRAIN_MAX   (1024 * 1024)

enum conn_look { CONN_QUIET, CONN_DATA, CONN_CLOSED };

/* What waits on a connection no request is using: nothing, bytes, or its end (or an error). */
static enum conn_look conn_look(curl_socket_t fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return CONN_DATA;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return CONN_QUIET;
    return CONN_CLOSED;
}

/*
 * Make sure fd is never read as a response again: what arrived is thrown
 * away (so that libcurl's liveness check, a one-byte peek, sees the end
 * rather than data), then both directions are shut. libcurl still owns fd
 * and closes it when it next looks (or when a request written on it fails:
 * nothing of the request left, so it is resent, pc_upstream.h "Resending").
 */
static void conn_poison(curl_socket_t fd)
{
    char buf[IDLE_DRAIN_PIECE];
    size_t total = 0;
    ssize_t n;
    while (total < IDLE_DRAIN_MAX && (n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
        total += (size_t)n;
    shutdown(fd, SHUT_RDWR);
}

static int sock_local_port(curl_socket_t fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

static void idle_free(struct uidle *i)
{
    struct upstream *u = i->u;
    if (i->ev != NULL)
        event_free(i->ev);
    if (i->prev != NULL)
        i->prev->next = i->next;
    else
        u->idle = i->next;
    if (i->next != NULL)
        i->next->prev = i->prev;
    i->magic = 0;
    free(i);
}

/* fd is in use again, or closed: stop watching it (if it was watched). */
static void idle_forget(struct upstream *u, curl_socket_t fd)
{
    for (struct uidle *i = u->idle; i != NULL; i = i->next) {
        if (i->fd == fd) {
            idle_free(i);
            return;
        }
    }
}

/* Something arrived on an idle pooled connection: its end, or bytes nobody asked for. */
static void idle_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct uidle *i = arg;
    (void)what;
    PC_CHECK_OBJ(i, UIDLE_MAGIC);
    enum conn_look look = conn_look(fd);
    if (look == CONN_QUIET) {
        event_add(i->ev, NULL); /* woken for nothing: watch on */
        return;
    }
    if (look == CONN_DATA)
        log_warn("upstream: bytes arrived on an idle keep-alive connection (sent unasked); "
                 "closing it so that they never answer another request");
    conn_poison(fd);
    idle_free(i);
}

/*
 * A transfer ended and left its connection fd in libcurl's pool: watch it
 * until it is used again (the socket callback) or closed (the close-socket
 * callback). If libcurl still watches fd, from when it stops (CURL_POLL_REMOVE).
 */
static void idle_watch(struct upstream *u, curl_socket_t fd)
{
    for (struct usock *s = u->socks; s != NULL; s = s->next) {
        if (s->fd == fd) {
            s->rests = true;
            return;
        }
    }
    idle_forget(u, fd);
    struct uidle *i = pc_calloc(1, sizeof *i);
    i->magic = UIDLE_MAGIC;
    i->u = u;
    i->fd = fd;
    i->local_port = sock_local_port(fd);
    i->ev = event_new(u->base, fd, EV_READ, idle_on_read, i);
    i->next = u->idle;
    if (u->idle != NULL)
        u->idle->prev = i;
    u->idle = i;
    if (i->ev == NULL || event_add(i->ev, NULL) != 0)
        idle_free(i);
}

/*
 * Right before a request is written on a connection from the pool (found by
 * its local port): if anything waits on it, it is poisoned, so the write
 * fails and libcurl resends on another connection (nothing of the request
 * was written). Catches what arrived after the last look of idle_on_read.
 */
static void idle_check_reuse(struct upstream *u, int local_port)
{
    struct uidle *i = u->idle, *next;
    for (; i != NULL; i = next) {
        next = i->next;
        if (i->local_port != local_port || conn_look(i->fd) == CONN_QUIET)
            continue;
        log_warn("upstream: a pooled connection had bytes or its end waiting before a request "
                 "was written on it; not reused");
        conn_poison(i->fd);
        idle_free(i);
    }
}

/* CURLOPT_CLOSESOCKETFUNCTION: libcurl closes one of its sockets. */
static int upstream_close_socket(void *clientp, curl_socket_t fd)
{
    struct upstream *u = clientp;
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    idle_forget(u, fd);
    return close(fd);
}

/* ---- the gate before each attempt (pre-request callback) ----------------- */

bool xfer_resend_allowed(unsigned attempt, long request_bytes)
{
    return attempt <= 1 || (attempt == 2 && request_bytes == 0);
}

/*
 * CURLOPT_PREREQFUNCTION: libcurl is about to write the request, the first
 * time or again after a reused connection died. A resend the rule forbids
 * fails the transfer instead.
 */
static int xfer_on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port,
                          int local_port)
{
    struct xfer *x = arg;
    long sent = 0;
    (void)local_ip;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    unsigned attempt = ++x->attempts;
    if (x->u->attempt_hook != NULL)
        x->u->attempt_hook(x->u->attempt_arg, attempt, local_port);
    idle_check_reuse(x->u, local_port);
    if (attempt == 1)
        return CURL_PREREQFUNC_OK;
    curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &sent);
    if (xfer_resend_allowed(attempt, sent)) {
        upstream_stat(x->u, STAT_upstream_retries, 1);
        log_info("upstream: %s:%d: the reused connection died before the request was written; "
                 "sending it once more on another connection",
                 primary_ip != NULL ? primary_ip : "?", primary_port);
        return CURL_PREREQFUNC_OK;
    }
    xfer_fail(x, XFER_ERR_IO,
              sent > 0 ? "upstream connection closed after the request was sent (not resent: the "
                         "upstream may have received it)"
                       : "upstream connection died twice before the request could be sent");
    return CURL_PREREQFUNC_ABORT;
}

void upstream_set_attempt_hook(struct upstream *u, upstream_attempt_fn *fn, void *arg)
{
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    u->attempt_hook = fn;
    u->attempt_arg = arg;
}

/* ---- the body (write callback) --------------------------------------------- */

/* on_data returned XFER_PAUSE: curl keeps the data and delivers it again on resume. */
static size_t xfer_pause_here(struct xfer *x)
{
    x->paused = true;
    evtimer_del(x->timeout_ev); /* a slow client must not turn into a 504 */
    if (x->resume_pending) {
        x->resume_pending = false;
        x->resume_later = true;
        xfer_defer(x);
    }
    return CURL_WRITEFUNC_PAUSE;
}

/* CURLOPT_WRITEFUNCTION. */
static size_t xfer_on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    size_t len = size * n;
    if (x->aborted || x->failed)
        return CURL_WRITEFUNC_ERROR;
    if (x->head != HEAD_DONE) {
        xfer_fail(x, XFER_ERR_IO, "upstream sent body bytes before a response head");
        return CURL_WRITEFUNC_ERROR;
    }
    x->in_cb = true;
    x->resume_pending = false;
    x->u->cb_depth++;
    int r = x->ops.on_data(x->arg, p, len);
    x->u->cb_depth--;
    x->in_cb = false;
    if (x->aborted)
        return CURL_WRITEFUNC_ERROR;
    if (r == XFER_PAUSE)
        return xfer_pause_here(x);
    x->resume_pending = false;
    upstream_stat(x->u, STAT_bytes_from_upstream, (int64_t)len);
    xfer_arm_timeout(x);
    return len;
}

/* ---- timers on one xfer --------------------------------------------------- */

static void xfer_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct xfer *x = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    if (x->aborted)
        return; /* cannot happen: abort deletes the timer; be safe anyway */
    char msg[80];
    if (x->attempts == 0) { /* no request byte written: as a connect timeout (xfer_complete) */
        snprintf(msg, sizeof msg, "upstream connection not made within %g s", x->timeout);
        xfer_finish(x, XFER_ERR_CONNECT_TIMEOUT, msg);
        return;
    }
    snprintf(msg, sizeof msg, "upstream timed out after %g s", x->timeout);
    xfer_finish(x, XFER_ERR_TIMEOUT, msg);
}

static void xfer_add(struct xfer *x)
{
    CURLMcode mc = add_handle(x->u, x->easy);
    if (mc != CURLM_OK) {
        xfer_finish(x, XFER_ERR_INTERNAL, curl_multi_strerror(mc));
        return;
    }
    x->added = true;
}

/* Work that had to wait until we were out of libcurl (see the file comment). */
static void xfer_on_defer(evutil_socket_t fd, short what, void *arg)
{
    struct xfer *x = arg;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    if (x->aborted) {
        xfer_free(x);
    } else if (x->failed) {
        xfer_finish(x, x->fail_result, x->fail_msg);
    } else if (!x->added) {
        xfer_add(x);
    } else if (x->resume_later) {
        x->resume_later = false;
        xfer_resume(x);
    }
}

/* ---- starting a call -------------------------------------------------------- */

/* RFC 9110 token (method, field name), by the rules httpd uses (pc_util). */
static bool is_token(const char *s)
{
    return s != NULL && pc_http_token(s, strlen(s));
}

/* Field value: no CR, LF or other controls (pc_util, shared with httpd). */
static bool is_field_value(const char *s)
{
    return s != NULL && pc_http_field_value(s, strlen(s));
}

/* Framing fields curl computes from body_len, and Expect, which we never send. */
static bool is_framing_header(const char *name)
{
    return pc_strcaseeq(name, "content-length") || pc_strcaseeq(name, "transfer-encoding") ||
           pc_strcaseeq(name, "expect");
}

static bool method_has_body(const struct xfer_req *req)
{
    if (strcmp(req->method, "HEAD") == 0)
        return false;
    return req->body_len > 0 || strcmp(req->method, "POST") == 0 ||
           strcmp(req->method, "PUT") == 0 || strcmp(req->method, "PATCH") == 0;
}

static int slist_add(struct curl_slist **l, const char *line)
{
    struct curl_slist *n = curl_slist_append(*l, line);
    if (n == NULL)
        return -1;
    *l = n;
    return 0;
}

/*
 * The request fields, sent as given, except: Content-Length, Transfer-Encoding
 * and Expect are dropped (curl frames the body from body_len). An empty value
 * is written "Name;", curl's spelling for "send Name: with no value" ("Name:"
 * would delete the field). Then "Name:" entries stop curl adding fields of its
 * own: Expect (no 100-continue round trip), Accept (curl's default "*" "/" "*")
 * and, with a body, Content-Type (curl's form-urlencoded default) unless given.
 * curl adds no User-Agent unless told to, and no Accept-Encoding because
 * CURLOPT_ACCEPT_ENCODING is never set. Returns 0, or -1 on an invalid field.
 */
static int xfer_build_headers(struct xfer *x, const struct xfer_req *req, bool has_body)
{
    bool have_accept = false, have_ctype = false;
    struct pc_buf line = PC_BUF_INIT;
    int rc = 0;

    for (size_t i = 0; i < req->nheaders && rc == 0; i++) {
        const struct xfer_header *h = &req->headers[i];
        if (!is_token(h->name) || !is_field_value(h->value)) {
            rc = -1;
            break;
        }
        if (is_framing_header(h->name))
            continue;
        have_accept = have_accept || pc_strcaseeq(h->name, "accept");
        have_ctype = have_ctype || pc_strcaseeq(h->name, "content-type");
        pc_buf_reset(&line);
        pc_buf_append_str(&line, h->name);
        if (h->value[0] == '\0') {
            pc_buf_append_char(&line, ';');
        } else {
            pc_buf_append(&line, ": ", 2);
            pc_buf_append_str(&line, h->value);
        }
        rc = slist_add(&x->hdrs, pc_buf_cstr(&line));
    }
    if (rc == 0)
        rc = slist_add(&x->hdrs, "Expect:");
    if (rc == 0 && !have_accept)
        rc = slist_add(&x->hdrs, "Accept:");
    if (rc == 0 && has_body && !have_ctype)
        rc = slist_add(&x->hdrs, "Content-Type:");
    pc_buf_free(&line);
    return rc;
}

/* Method and body. GET and HEAD use curl's own modes; everything else a custom method. */
static CURLcode xfer_set_method(struct xfer *x, bool has_body)
{
    CURL *e = x->easy;
    CURLcode rc = CURLE_OK;
    if (strcmp(x->method, "HEAD") == 0)
        return curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (strcmp(x->method, "GET") == 0 && !has_body)
        return curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (has_body) {
        /* size first: setting it after POSTFIELDS may forget the pointer */
        rc = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)x->body_len);
        if (rc == CURLE_OK)
            rc = curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
    }
    if (rc == CURLE_OK && strcmp(x->method, "POST") != 0)
        rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, x->method);
    return rc;
}

static CURLcode xfer_set_options(struct xfer *x, const struct xfer_req *req, bool has_body)
{
    CURL *e = x->easy;
    CURLcode rc = CURLE_OK;
#define XFER_SETOPT(opt, val)                   \
    do {                                        \
        if (rc == CURLE_OK)                     \
            rc = curl_easy_setopt(e, opt, val); \
    } while (0)
    XFER_SETOPT(CURLOPT_URL, x->url);
    XFER_SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    /* HTTP/1.1 only: pausing is then TCP flow control (see the file comment). */
    XFER_SETOPT(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    XFER_SETOPT(CURLOPT_PATH_AS_IS, 1L); /* relay the path untouched, no ../ squashing */
    XFER_SETOPT(CURLOPT_PRIVATE, (void *)x);
    XFER_SETOPT(CURLOPT_ERRORBUFFER, x->errbuf);
    XFER_SETOPT(CURLOPT_NOSIGNAL, 1L);
    /* A name still being resolved when the transfer ends (upstream-connect-timeout, a client
     * gone, the shutdown): libcurl 7.88 would join its resolver thread inside
     * curl_multi_remove_handle, and the worker's loop would wait out getaddrinfo (a nameserver
     * that never answers: the resolver's whole timeout). The thread is left to end alone. */
    XFER_SETOPT(CURLOPT_QUICK_EXIT, 1L);
    XFER_SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
    XFER_SETOPT(CURLOPT_TCP_KEEPIDLE, 60L);
    XFER_SETOPT(CURLOPT_TCP_KEEPINTVL, 30L);
    XFER_SETOPT(CURLOPT_FOLLOWLOCATION, 0L);           /* relay redirects */
    XFER_SETOPT(CURLOPT_HTTP_CONTENT_DECODING, 0L);    /* bodies relayed as sent */
    XFER_SETOPT(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L); /* a proxy's CONNECT reply is not ours */
    XFER_SETOPT(CURLOPT_HEADERFUNCTION, xfer_on_header);
    XFER_SETOPT(CURLOPT_HEADERDATA, (void *)x);
    XFER_SETOPT(CURLOPT_WRITEFUNCTION, xfer_on_body);
    XFER_SETOPT(CURLOPT_WRITEDATA, (void *)x);
    XFER_SETOPT(CURLOPT_HTTPHEADER, x->hdrs);
    XFER_SETOPT(CURLOPT_PREREQFUNCTION, xfer_on_prereq);
    XFER_SETOPT(CURLOPT_PREREQDATA, (void *)x);
    XFER_SETOPT(CURLOPT_CLOSESOCKETFUNCTION, upstream_close_socket);
    XFER_SETOPT(CURLOPT_CLOSESOCKETDATA, (void *)x->u);
    if (req->connect_timeout > 0)
        XFER_SETOPT(CURLOPT_CONNECTTIMEOUT_MS, (long)PC_MAX(1.0, req->connect_timeout * 1000.0));
#undef XFER_SETOPT
    if (rc == CURLE_OK)
        rc = xfer_set_method(x, has_body);
    return rc;
}

/* Allocate x with copies of the request and its easy handle configured; NULL on failure. */
static struct xfer *xfer_new(struct upstream *u, const struct xfer_req *req)
{
    struct xfer *x = pc_calloc(1, sizeof *x);
    x->magic = XFER_MAGIC;
    x->u = u;
    x->method = pc_strdup(req->method);
    x->url = pc_strdup(req->url);
    x->body_len = req->body_len;
    x->body = pc_malloc(req->body_len + 1);
    if (req->body_len > 0)
        memcpy(x->body, req->body, req->body_len);
    x->body[req->body_len] = '\0';
    x->timeout = req->timeout;
    x->timeout_ev = evtimer_new(u->base, xfer_on_timeout, x);
    x->defer_ev = evtimer_new(u->base, xfer_on_defer, x);
    x->easy = u->nspare > 0 ? u->spare[--u->nspare] : curl_easy_init();
    bool has_body = method_has_body(req);
    if (x->timeout_ev == NULL || x->defer_ev == NULL || x->easy == NULL ||
        xfer_build_headers(x, req, has_body) < 0 ||
        xfer_set_options(x, req, has_body) != CURLE_OK) {
        xfer_free(x);
        return NULL;
    }
    return x;
}

struct xfer *xfer_start(struct upstream *u, const struct xfer_req *req, const struct xfer_ops *ops,
                        void *arg)
{
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    if (req->url == NULL || !is_token(req->method) || (req->body == NULL && req->body_len > 0))
        return NULL;
    struct xfer *x = xfer_new(u, req);
    if (x == NULL)
        return NULL;
    x->ops = *ops;
    x->arg = arg;
    if (u->cb_depth > 0) {
        xfer_defer(x); /* curl refuses add_handle from inside its callbacks */
    } else if (add_handle(u, x->easy) != CURLM_OK) {
        xfer_free(x);
        return NULL;
    } else {
        x->added = true;
    }
    x->next = u->xfers;
    if (u->xfers != NULL)
        u->xfers->prev = x;
    u->xfers = x;
    x->live = true;
    u->active++;
    upstream_stat(u, STAT_upstream_requests, 1);
    upstream_stat(u, STAT_upstream_active, 1);
    xfer_arm_timeout(x);
    return x;
}

/* ---- resume and abort ------------------------------------------------------- */

void xfer_resume(struct xfer *x)
{
    PC_CHECK_OBJ(x, XFER_MAGIC);
    if (x->aborted || x->failed)
        return;
    if (x->in_cb) {
        x->resume_pending = true; /* acted on when on_data returns (xfer_pause_here) */
        return;
    }
    if (!x->paused)
        return;
    x->paused = false;
    xfer_arm_timeout(x);
    /* May run on_data synchronously with the data curl kept; it may pause or abort again. */
    CURLcode rc = curl_easy_pause(x->easy, CURLPAUSE_CONT);
    if (x->aborted || x->failed)
        return;
    if (rc != CURLE_OK) {
        char msg[96];
        snprintf(msg, sizeof msg, "could not resume upstream transfer: %s", curl_easy_strerror(rc));
        xfer_fail(x, XFER_ERR_INTERNAL, msg);
        return;
    }
    upstream_kick(x->u); /* the socket may hold data no event will announce */
}

void xfer_abort(struct xfer **xp)
{
    if (xp == NULL || *xp == NULL)
        return;
    struct xfer *x = *xp;
    *xp = NULL;
    PC_CHECK_OBJ(x, XFER_MAGIC);
    if (x->aborted)
        return;
    x->aborted = true;
    xfer_retire(x);
    evtimer_del(x->timeout_ev);
    if (x->u->cb_depth > 0)
        xfer_defer(x); /* inside libcurl: callbacks now fail the transfer; free later */
    else
        xfer_free(x);
}

/* ---- the multi handle and its sockets ------------------------------------- */

/* Pass every finished transfer on; runs after each curl_multi_socket_action. */
static void upstream_drain(struct upstream *u)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(u->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURLcode code = m->data.result; /* m dies with the handle: copy first */
        char *priv = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
        struct xfer *x = (struct xfer *)priv;
        PC_CHECK_OBJ(x, XFER_MAGIC);
        curl_socket_t fd = CURL_SOCKET_BAD; /* the connection, if libcurl kept it */
        if (code == CURLE_OK && !x->aborted && !x->failed &&
            curl_easy_getinfo(m->easy_handle, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK &&
            fd != CURL_SOCKET_BAD)
            idle_watch(u, fd);
        if (x->aborted)
            xfer_free(x);
        else
            xfer_complete(x, code);
    }
}

/* u->timer (curl's timeout) and u->kick. */
static void upstream_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *u = arg;
    int running;
    (void)fd;
    (void)what;
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    upstream_drain(u);
}

static void upstream_on_socket(evutil_socket_t fd, short what, void *arg)
{
    struct usock *s = arg;
    PC_CHECK_OBJ(s, USOCK_MAGIC);
    struct upstream *u = s->u; /* s may be freed during socket_action */
    int flags =
        ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(u->multi, fd, flags, &running);
    upstream_drain(u);
}

static void usock_free(struct usock *s)
{
    struct upstream *u = s->u;
    if (s->ev != NULL)
        event_free(s->ev);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        u->socks = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->magic = 0;
    free(s);
}

static struct usock *usock_new(struct upstream *u, curl_socket_t fd)
{
    struct usock *s = pc_calloc(1, sizeof *s);
    s->magic = USOCK_MAGIC;
    s->u = u;
    s->fd = fd;
    s->next = u->socks;
    if (u->socks != NULL)
        u->socks->prev = s;
    u->socks = s;
    return s;
}

/* Arm s->ev for what curl now wants (CURL_POLL_*); re-assigned only when it changes. */
static void usock_watch(struct usock *s, int want)
{
    short flags =
        (short)(((want & CURL_POLL_IN) ? EV_READ : 0) | ((want & CURL_POLL_OUT) ? EV_WRITE : 0));
    if (s->ev != NULL && flags == s->flags)
        return;
    if (s->ev == NULL)
        s->ev = event_new(s->u->base, s->fd, flags | EV_PERSIST, upstream_on_socket, s);
    else {
        event_del(s->ev);
        event_assign(s->ev, s->u->base, s->fd, flags | EV_PERSIST, upstream_on_socket, s);
    }
    s->flags = flags;
    if (s->ev != NULL && flags != 0)
        event_add(s->ev, NULL);
}

/* CURLMOPT_SOCKETFUNCTION. */
static int upstream_curl_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *sockp)
{
    struct upstream *u = userp;
    struct usock *s = sockp;
    (void)e;
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    if (what != CURL_POLL_REMOVE)
        idle_forget(u, fd); /* a transfer uses it again */
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            PC_CHECK_OBJ(s, USOCK_MAGIC);
            bool rests = s->rests;
            usock_free(s);
            if (rests)
                idle_watch(u, fd);
        }
        return 0;
    }
    if (s == NULL) {
        s = usock_new(u, fd);
        curl_multi_assign(u->multi, fd, s);
    }
    PC_CHECK_OBJ(s, USOCK_MAGIC);
    s->rests = false; /* in use */
    usock_watch(s, what);
    return 0;
}

/*
 * CURLMOPT_TIMERFUNCTION: one timer, replaced on each call, -1 deletes it.
 * The 0 ms that a new transfer asks for runs once the current callback
 * returns, in this loop turn: a zero timer would cost a turn (an epoll_wait)
 * before the request is even written.
 */
static int upstream_curl_timer(CURLM *m, long ms, void *userp)
{
    struct upstream *u = userp;
    (void)m;
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    if (ms == 0 && u->adding) {
        evtimer_del(u->timer);
        event_active(u->timer, EV_TIMEOUT, 1);
    } else if (ms < 0) {
        evtimer_del(u->timer);
    } else {
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(u->timer, &tv);
    }
    return 0;
}

/* ---- lifecycle -------------------------------------------------------------- */

struct upstream *upstream_create(struct event_base *base, struct stats *st)
{
    struct upstream *u = pc_calloc(1, sizeof *u);
    u->magic = UPSTREAM_MAGIC;
    u->base = base;
    u->st = st;
    u->multi = curl_multi_init();
    u->timer = evtimer_new(base, upstream_on_timeout, u);
    u->kick = evtimer_new(base, upstream_on_timeout, u);
    if (u->multi == NULL || u->timer == NULL || u->kick == NULL) {
        upstream_destroy(&u);
        return NULL;
    }
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, upstream_curl_socket);
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, upstream_curl_timer);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_MAXCONNECTS, (long)UPSTREAM_MAXCONNECTS);
    return u;
}

/* Not from inside an xfer callback: the caller's loop would run on freed memory. */
void upstream_destroy(struct upstream **up)
{
    if (up == NULL || *up == NULL)
        return;
    struct upstream *u = *up;
    *up = NULL;
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    while (u->xfers != NULL)
        xfer_free(u->xfers); /* no callbacks */
    while (u->nspare > 0)
        curl_easy_cleanup(u->spare[--u->nspare]);
    if (u->multi != NULL)
        curl_multi_cleanup(u->multi); /* may still call our socket/timer callbacks */
    while (u->socks != NULL)
        usock_free(u->socks);
    while (u->idle != NULL)
        idle_free(u->idle);
    if (u->timer != NULL)
        event_free(u->timer);
    if (u->kick != NULL)
        event_free(u->kick);
    u->magic = 0;
    free(u);
}

size_t upstream_active(const struct upstream *u)
{
    PC_CHECK_OBJ(u, UPSTREAM_MAGIC);
    return u->active;
}
