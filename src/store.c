/*
 * store.c - one worker's Redis connection (see pc_store.h). Owns the hiredis
 * async context, the commands in flight (struct store_cmd, one per command,
 * each with its own timer because hiredis 0.14 has no command timeouts) and
 * the connection state machine, driven by one state timer:
 *
 *   store_start
 *       |
 *       v        refused / connect timeout (own timer)
 *   CONNECTING -------------------------------------> BACKOFF --+
 *       | connected                                     ^       | 100 ms doubling
 *       v                                               |       | to 5 s, + jitter
 *   HANDSHAKE: AUTH, SELECT, GET pc:schema,             |       v
 *       |      EVAL each pending migration         lost | CONNECTING
 *       |                                               |
 *       +-- schema current ---------------> READY ------+
 *       |                                     | stalled (see the watch below)
 *       |                                     v
 *       |                                 DROPPING: redisAsyncFree deferred to
 *       |                                           the state timer (0 s)
 *       +-- newer, or older and no auto-migrate --> BLOCKED (re-read every 5 s)
 *
 * Timeouts run in real time from when a command is queued: libevent dates a
 * timer from the time it cached at the start of the loop pass, which after a
 * long pass is already past, so the cache is refreshed before arming, and a
 * timer that fires early (coarse clock) waits for the rest. A command whose
 * time is up (a user command fails with STORE_TIMEOUT; an internal one keeps
 * waiting) still owes its reply. While replies are owed, the stall watch
 * checks every redis-timeout that Redis did something - a reply or part of
 * one came, or it took some of the bytes hiredis queued - and drops the
 * connection after a window with none of these. A busy loop alone does not
 * trip it: within a loop pass libevent runs I/O callbacks (hiredis reading
 * and writing) before timers, so every window sees whatever Redis sent.
 *
 * Ownership of a command: hiredis holds it (privdata) from the moment it is
 * sent until its reply callback, which always frees it - also when the reply
 * comes after a timeout or store_cancel (c->done is set then and the reply is
 * swallowed), and when the context is freed (hiredis passes a NULL reply).
 * A command that is not done is on its store's list, so store_destroy can
 * complete it with STORE_ERR and cut it loose from the store.
 *
 * ac->data points to the store while the context is the current one and is
 * cleared when the store lets go of it, so a context being torn down can
 * never reach a store that moved on or was freed (h2o's pattern).
 *
 * Health, for the operator: each store is UP (READY and answering in time)
 * or DOWN (no usable connection - lost, refused, stalled, blocked - or READY
 * but every command timing out for a while); the process counts its DOWN
 * stores (one per worker) and logs ONE warning when the first goes down and
 * ONE notice when the last is back. Per-worker details are info lines.
 *
 *   UNKNOWN ──ready──▶ UP ◀──────ready / an in-time reply──────┐
 *      │               │ lost, stalled, blocked, timeouts      │
 *      └──fails──────▶ DOWN ───────────────────────────────────┘
 *   process: down 0 ─▶ 1 logs "not working"; 1 ─▶ 0 logs "works again"
 */
#include "pc_store.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libevent.h>

#define STORE_MAGIC 0x5a0e3c71u
#define CMD_MAGIC   0x5c3d0b17u

#define BACKOFF_MIN_MS     100
#define BACKOFF_MAX_MS     5000
#define RECHECK_MS         5000  /* re-read pc:schema this often while BLOCKED */
#define LOG_EVERY_MS       60000 /* repeated failures are logged at most this often */
#define CONNECT_MIN_MS     1000  /* connect timeout: max(this, 10 x command timeout) */
#define STEP_TIMEOUT_MULT  20    /* SCAN / UNLINK / EVAL steps get 20 x the timeout */
#define SET_BYTES_PER_MS   65536 /* a SET gets 1 ms more per 64 KiB of value */
#define SCAN_COUNT         "1000"
#define DEGRADED_MIN_MS    1000 /* every command timing out this long (or 20 x the timeout) */
#define REDIS_DEFAULT_PORT 6379

enum store_state {
    ST_IDLE,       /* created, store_start not called yet */
    ST_CONNECTING, /* connect(2) in progress; state timer = connect timeout */
    ST_HANDSHAKE,  /* AUTH / SELECT / schema check / migrations in flight */
    ST_READY,      /* usable; STAT_redis_connected counts this worker */
    ST_BLOCKED,    /* connected, but the schema is not usable; timer = recheck */
    ST_DROPPING,   /* connection condemned; timer (0 s) frees it outside hiredis */
    ST_BACKOFF,    /* no connection; timer = next attempt */
    ST_CLOSED,     /* store_destroy in progress */
};

/* Whether this store's cache works, for the process-wide log lines (see the top). */
enum store_health {
    HEALTH_UNKNOWN, /* not connected yet, not failed yet */
    HEALTH_UP,
    HEALTH_DOWN,
};

enum cmd_kind {
    CMD_GET,
    CMD_SET,
    CMD_SCAN,   /* store_delete_matching, SCAN step */
    CMD_UNLINK, /* store_delete_matching, UNLINK step */
    CMD_WRITE,  /* store_write: any reply but an error is fine */
    CMD_INTERNAL,
};

struct store;
typedef void internal_fn(struct store *s, redisReply *r);

struct store_cmd {
    unsigned magic;
    enum cmd_kind kind;
    bool done;          /* callback ran, timed out or cancelled: swallow the reply */
    bool overdue;       /* timed out; counted in its store's owed until the reply comes */
    uint64_t sent_us;   /* when the command (or its current step) was queued */
    int64_t timeout_us; /* its (current step's) timeout, from sent_us */
    char what[64];      /* CMD_INTERNAL: what it is, for log lines ("GET pc:schema") */
    struct store *s;    /* non-NULL exactly while on the store's list (not done) */
    struct store_cmd *prev, *next;
    struct event *timer;
    union {
        store_get_fn *get;
        store_int_fn *num;
        internal_fn *internal;
    } cb;
    void *arg;
    /* store_delete_matching */
    char *pattern;
    char cursor[24];
    long long deleted;
};

struct store {
    unsigned magic;
    struct event_base *base;
    struct stats *st;
    char *host, *unix_path, *password;
    int port, db;
    char *where; /* the URL without its password, for log lines */
    int64_t timeout_ms;
    bool auto_migrate;
    struct timeval cmd_tv_plain, step_tv_plain;
    const struct timeval *cmd_tv, *step_tv; /* libevent common timeouts when available */

    redisAsyncContext *ac;
    enum store_state state;
    struct event *timer;    /* what it does depends on the state, see state_timer_cb */
    struct store_cmd *cmds; /* commands not done yet */
    bool up;                /* READY was reached on the current connection */
    int64_t backoff_ms;
    uint64_t last_read_us; /* last reply (or the connect) on the current connection */
    uint64_t rng;

    /* stall watch, for the current connection */
    uint64_t wire_queued; /* bytes of commands queued (hiredis obuf holds the unwritten rest) */
    unsigned owed;        /* overdue commands whose reply has not come */
    struct event *watch;  /* armed while owed > 0 */
    uint64_t watch_read_us, watch_written; /* at the start of the window: see watch_arm */
    size_t watch_partial;
    char overdue_what[64]; /* the last command that timed out, for the log */

    enum store_health health;
    uint64_t timeouts_since_us; /* first user-command timeout since the last in-time reply */

    unsigned failures; /* consecutive failed attempts, for rate-limited logging */
    uint64_t fail_logged_ms, err_logged_ms;
    bool blocked_logged; /* BLOCKED reason logged on this connection */
    char drop_reason[192];

    long migrating;      /* schema version the migration in flight starts from */
    long migrate_failed; /* version whose migration failed on this connection, or -1 */
    char migrate_err[160];
};

/* --- health, process-wide ----------------------------------------------------- */

/* The stores of the process whose cache does not work (one per worker). */
static struct {
    pthread_mutex_t mu;
    unsigned down;
    uint64_t since_ms; /* when the first of them went down */
} health = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* s's cache stopped working: the process's first such store logs the one warning. */
static void health_down(struct store *s, const char *why)
{
    if (s->health == HEALTH_DOWN)
        return;
    s->health = HEALTH_DOWN;
    pthread_mutex_lock(&health.mu);
    if (health.down++ == 0) {
        health.since_ms = pc_mono_ms();
        log_warn("redis: the cache is not working (%s: %s); requests bypass it until Redis "
                 "answers again",
                 s->where, why);
    }
    pthread_mutex_unlock(&health.mu);
}

/* s went down earlier and is gone or back: the process's last such store logs the notice. */
static void health_leave_down(struct store *s, bool back)
{
    pthread_mutex_lock(&health.mu);
    if (--health.down == 0 && back)
        log_notice("redis: the cache works again (%s; it did not for %.1f s)", s->where,
                   (double)(pc_mono_ms() - health.since_ms) / 1000.0);
    pthread_mutex_unlock(&health.mu);
}

static void health_up(struct store *s)
{
    bool was_down = s->health == HEALTH_DOWN;
    s->health = HEALTH_UP;
    s->timeouts_since_us = 0;
    if (was_down)
        health_leave_down(s, true);
}

/*
 * A user command timed out on a READY connection. Redis that still answers,
 * only too slowly, keeps the connection (the stall watch sees it alive), but
 * when nothing has come in time for a while the cache does not work either.
 */
static void health_note_timeout(struct store *s)
{
    uint64_t now = pc_mono_us();
    int64_t limit_ms = PC_MAX(DEGRADED_MIN_MS, 20 * s->timeout_ms);
    if (s->timeouts_since_us == 0) {
        s->timeouts_since_us = now;
        return;
    }
    if (now - s->timeouts_since_us >= (uint64_t)limit_ms * 1000) {
        char why[96];
        snprintf(why, sizeof(why), "every command timed out for %lld ms", (long long)limit_ms);
        health_down(s, why);
    }
}

/* --- URL parsing ------------------------------------------------------------ */

struct url_parts {
    char *host, *unix_path, *password;
    int port, db;
};

static void url_parts_free(struct url_parts *u)
{
    PC_FREE(&u->host);
    PC_FREE(&u->unix_path);
    PC_FREE(&u->password);
}

static int url_unix(const char *path, struct url_parts *u, char *err, size_t errlen)
{
    if (path[0] != '/') {
        snprintf(err, errlen, "unix socket path must be absolute (unix:/path/to/redis.sock)");
        return -1;
    }
    if (strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
        snprintf(err, errlen, "unix socket path is too long (at most %zu bytes)",
                 sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
        return -1;
    }
    u->unix_path = pc_strdup(path);
    u->port = 0;
    return 0;
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decode s[0..n) into a new string; NULL if an escape is invalid or decodes to NUL. */
static char *url_decode(const char *s, size_t n)
{
    char *out = pc_malloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *o++ = s[i];
            continue;
        }
        int hi = i + 2 < n ? hex_val(s[i + 1]) : -1;
        int lo = i + 2 < n ? hex_val(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(out);
            return NULL;
        }
        *o++ = (char)(hi * 16 + lo);
        i += 2;
    }
    *o = '\0';
    return out;
}

static int url_userinfo(const char *p, size_t n, struct url_parts *u, char *err, size_t errlen)
{
    if (n == 0 || p[0] != ':') {
        snprintf(err, errlen,
                 memchr(p, ':', n) ? "user names are not supported (use redis://:password@host)"
                                   : "the password must be written redis://:password@host");
        return -1;
    }
    if (n == 1) {
        snprintf(err, errlen, "empty password");
        return -1;
    }
    u->password = url_decode(p + 1, n - 1);
    if (u->password == NULL) {
        snprintf(err, errlen, "invalid %%-escape in the password");
        return -1;
    }
    return 0;
}

/* Strict decimal in [min, max]: digits only, at most 10 of them. */
static int parse_int_range(const char *p, size_t n, long min, long max, int *out)
{
    if (n == 0 || n > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = (int)v;
    return 0;
}

static bool host_chars_ok(const char *p, size_t n, bool ipv6)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        bool ok = ipv6 ? (isxdigit(ch) || ch == ':' || ch == '.')
                       : (isalnum(ch) || ch == '.' || ch == '-' || ch == '_');
        if (!ok)
            return false;
    }
    return true;
}

/* host, host:port, [v6], [v6]:port */
static int url_hostport(const char *p, size_t n, struct url_parts *u, char *err, size_t errlen)
{
    const char *h = p, *colon;
    size_t hlen;
    bool ipv6 = n > 0 && p[0] == '[';
    if (ipv6) {
        const char *close = memchr(p, ']', n);
        if (close == NULL) {
            snprintf(err, errlen, "missing ']' after an IPv6 address");
            return -1;
        }
        h = p + 1;
        hlen = (size_t)(close - h);
        colon = close + 1 < p + n ? close + 1 : NULL;
        if (colon != NULL && *colon != ':') {
            snprintf(err, errlen, "unexpected text after ']'");
            return -1;
        }
    } else {
        colon = memchr(p, ':', n);
        hlen = colon ? (size_t)(colon - p) : n;
    }
    if (hlen == 0 || !host_chars_ok(h, hlen, ipv6)) {
        snprintf(err, errlen, hlen == 0 ? "missing host" : "invalid host name");
        return -1;
    }
    if (colon != NULL &&
        parse_int_range(colon + 1, (size_t)(p + n - colon - 1), 1, 65535, &u->port) < 0) {
        snprintf(err, errlen, "invalid port (want 1-65535)");
        return -1;
    }
    u->host = pc_strndup(h, hlen);
    return 0;
}

static int url_redis(const char *p, struct url_parts *u, char *err, size_t errlen)
{
    if (strpbrk(p, "?#") != NULL) {
        snprintf(err, errlen, "query strings and fragments are not supported");
        return -1;
    }
    const char *slash = strchr(p, '/');
    size_t alen = slash ? (size_t)(slash - p) : strlen(p);
    const char *at = memrchr(p, '@', alen);
    if (at != NULL) {
        if (url_userinfo(p, (size_t)(at - p), u, err, errlen) < 0)
            return -1;
        alen -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    if (url_hostport(p, alen, u, err, errlen) < 0)
        return -1;
    /* "/" alone (a trailing slash) means database 0 */
    if (slash != NULL && slash[1] != '\0' &&
        parse_int_range(slash + 1, strlen(slash + 1), 0, INT_MAX, &u->db) < 0) {
        snprintf(err, errlen, "invalid database number '%s'", slash + 1);
        return -1;
    }
    return 0;
}

static int url_parse(const char *url, struct url_parts *u, char *err, size_t errlen)
{
    if (url == NULL || *url == '\0') {
        snprintf(err, errlen, "empty redis URL");
        return -1;
    }
    if (strncmp(url, "unix:", 5) == 0)
        return url_unix(url + 5, u, err, errlen);
    if (strncmp(url, "rediss://", 9) == 0) {
        snprintf(err, errlen, "TLS (rediss://) is not supported");
        return -1;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(err, errlen, "want redis://[:password@]host[:port][/db] or unix:/path");
        return -1;
    }
    return url_redis(url + 8, u, err, errlen);
}

/* Give *out the string, or free it if the caller did not ask for it. */
static void hand_out(char **out, char *v)
{
    if (out != NULL)
        *out = v;
    else
        free(v);
}

int store_parse_url(const char *url, char **host, int *port, char **unix_path, char **password,
                    int *db, char *err, size_t errlen)
{
    struct url_parts u = {NULL, NULL, NULL, REDIS_DEFAULT_PORT, 0};
    int rc = url_parse(url, &u, err, errlen);
    if (rc < 0) {
        url_parts_free(&u);
        u.port = 0;
        u.db = 0;
    }
    if (port != NULL)
        *port = u.port;
    if (db != NULL)
        *db = u.db;
    hand_out(host, u.host);
    hand_out(unix_path, u.unix_path);
    hand_out(password, u.password);
    return rc;
}

char *store_where(const char *host, int port, const char *unix_path, int db)
{
    struct pc_buf b = PC_BUF_INIT;
    if (unix_path != NULL)
        pc_buf_printf(&b, "unix:%s", unix_path);
    else if (strchr(host, ':') != NULL)
        pc_buf_printf(&b, "redis://[%s]:%d/%d", host, port, db);
    else
        pc_buf_printf(&b, "redis://%s:%d/%d", host, port, db);
    return pc_buf_cstr(&b);
}

/* --- commands ---------------------------------------------------------------- */

static void cmd_timeout_cb(evutil_socket_t fd, short what, void *arg);
static void cmd_reply_cb(redisAsyncContext *ac, void *reply, void *privdata);

/*
 * Arm a timer to fire tv from now. libevent dates it from the time it cached
 * at the start of the loop pass, which after a long pass is long gone.
 */
static void timer_add(struct store *s, struct event *ev, const struct timeval *tv)
{
    event_base_update_cache_time(s->base);
    evtimer_add(ev, tv);
}

/* Arm c's timer to fire us from now (a common timeout for the usual durations). */
static void cmd_arm(struct store_cmd *c, int64_t us)
{
    struct store *s = c->s;
    struct timeval plain;
    const struct timeval *tv = &plain;
    if (us == s->timeout_ms * 1000)
        tv = s->cmd_tv;
    else if (us == s->timeout_ms * 1000 * STEP_TIMEOUT_MULT)
        tv = s->step_tv;
    else
        plain = pc_timeval_ms((us + 999) / 1000);
    timer_add(s, c->timer, tv);
}

static struct store_cmd *cmd_new(struct store *s, enum cmd_kind kind)
{
    struct store_cmd *c = pc_calloc(1, sizeof(*c));
    c->magic = CMD_MAGIC;
    c->kind = kind;
    c->timer = evtimer_new(s->base, cmd_timeout_cb, c);
    if (c->timer == NULL) {
        log_error("redis: cannot create a timer");
        abort();
    }
    c->s = s;
    c->next = s->cmds;
    if (s->cmds != NULL)
        s->cmds->prev = c;
    s->cmds = c;
    return c;
}

/* Take c off its store's list: from now on it never touches the store. */
static void cmd_unlink(struct store_cmd *c)
{
    if (c->s == NULL)
        return;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->s->cmds = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->s = NULL;
}

static void cmd_free(struct store_cmd *c)
{
    cmd_unlink(c);
    event_free(c->timer);
    free(c->pattern);
    c->magic = 0;
    free(c);
}

/*
 * Queue the command on the current context (hiredis writes it on a later loop
 * pass) and arm its timer for timeout_ms from now. -1 if hiredis refused it.
 */
static int cmd_send(struct store_cmd *c, int argc, const char **argv, const size_t *lens,
                    int64_t timeout_ms)
{
    struct store *s = c->s;
    size_t before = sdslen(s->ac->c.obuf);
    if (redisAsyncCommandArgv(s->ac, cmd_reply_cb, c, argc, argv, lens) != REDIS_OK)
        return -1;
    s->wire_queued += sdslen(s->ac->c.obuf) - before;
    c->sent_us = pc_mono_us();
    c->timeout_us = timeout_ms * 1000;
    cmd_arm(c, c->timeout_us);
    return 0;
}

static const char *cmd_what(const struct store_cmd *c)
{
    switch (c->kind) {
    case CMD_GET:
        return "GET";
    case CMD_SET:
        return "SET";
    case CMD_SCAN:
        return "SCAN";
    case CMD_UNLINK:
        return "UNLINK";
    case CMD_WRITE:
        return "write";
    case CMD_INTERNAL:
        break;
    }
    return c->what;
}

/*
 * The end of a user command: count a failure, cut c loose from the store and
 * run the callback (at most once). c stays allocated until hiredis lets go of
 * it. The callback may call anything, store_destroy included.
 */
static void cmd_complete(struct store_cmd *c, enum store_status st, const char *val, size_t len,
                         long long n)
{
    if (st != STORE_OK)
        stats_incr(c->s->st, STAT_redis_errors);
    cmd_unlink(c);
    c->done = true;
    evtimer_del(c->timer);
    switch (c->kind) {
    case CMD_GET:
        c->cb.get(c->arg, st, val, len);
        break;
    case CMD_SCAN:
    case CMD_UNLINK:
        c->cb.num(c->arg, st, n);
        break;
    case CMD_SET:
        if (c->cb.num != NULL)
            c->cb.num(c->arg, st, 0);
        break;
    case CMD_WRITE:
    case CMD_INTERNAL:
        break;
    }
}

/* Error replies are worth an operator's attention (OOM, WRONGTYPE...), but not once per request. */
static void log_reply_error(struct store *s, const char *what, const redisReply *r)
{
    uint64_t now = pc_mono_ms();
    if (r == NULL || (s->err_logged_ms != 0 && now - s->err_logged_ms < LOG_EVERY_MS))
        return;
    s->err_logged_ms = now;
    log_warn("redis: %s failed: %s", what,
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply type");
}

static void cmd_fail(struct store_cmd *c, const redisReply *r, const char *what)
{
    log_reply_error(c->s, what, r);
    cmd_complete(c, STORE_ERR, NULL, 0, 0);
}

/* --- connection --------------------------------------------------------------- */

static void conn_start(struct store *s);
static void handshake_send(struct store *s);
static void schema_read(struct store *s);

/* Enter a state: keep the redis_connected gauge right, (re)arm the state timer (< 0: none). */
static void state_enter(struct store *s, enum store_state st, int64_t timer_ms)
{
    if (s->state == ST_READY && st != ST_READY)
        stats_add(s->st, STAT_redis_connected, -1);
    else if (s->state != ST_READY && st == ST_READY)
        stats_incr(s->st, STAT_redis_connected);
    s->state = st;
    evtimer_del(s->timer);
    if (timer_ms >= 0) {
        struct timeval tv = pc_timeval_ms(timer_ms);
        timer_add(s, s->timer, &tv);
    }
}

/*
 * Failed attempts are logged (info: the warning is health_down's) on the
 * first one, then at most once a minute.
 */
static void conn_log_failure(struct store *s, const char *why)
{
    uint64_t now = pc_mono_ms();
    s->failures++;
    if (s->failures == 1 || now - s->fail_logged_ms >= LOG_EVERY_MS) {
        log_info("redis: %s: %s (attempt %u; retrying)", s->where, why, s->failures);
        s->fail_logged_ms = now;
    }
}

static int64_t backoff_next(struct store *s)
{
    /* xorshift64: jitter only, so workers that lost Redis together do not retry together */
    s->rng ^= s->rng << 13;
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    int64_t delay = s->backoff_ms + (int64_t)(s->rng % (uint64_t)(s->backoff_ms / 4 + 1));
    s->backoff_ms = PC_MIN(s->backoff_ms * 2, BACKOFF_MAX_MS);
    return delay;
}

/*
 * Let go of the current context (if any) without freeing it - hiredis is
 * freeing it, or the caller does right after - and schedule the next attempt.
 */
static void conn_down(struct store *s, const char *why)
{
    if (s->ac != NULL) {
        s->ac->data = NULL;
        s->ac = NULL;
    }
    evtimer_del(s->watch);
    if (s->up) {
        log_info("redis: lost connection to %s: %s", s->where, why);
        s->failures = 0;
        s->up = false;
    } else {
        conn_log_failure(s, why);
    }
    health_down(s, why);
    state_enter(s, ST_BACKOFF, backoff_next(s));
}

/* Free the current context now. Only from a timer, never from inside a hiredis callback. */
static void conn_drop_now(struct store *s, const char *why)
{
    redisAsyncContext *ac = s->ac;
    conn_down(s, why);
    if (ac != NULL)
        redisAsyncFree(ac); /* pending commands get a NULL reply: STORE_ERR */
}

/* Condemn the current connection; the state timer frees it on the next loop turn. */
static void conn_drop_later(struct store *s, const char *why)
{
    if (s->ac == NULL || s->state == ST_DROPPING || s->state == ST_CLOSED)
        return;
    snprintf(s->drop_reason, sizeof(s->drop_reason), "%s", why);
    evtimer_del(s->watch);
    state_enter(s, ST_DROPPING, 0);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (status != REDIS_OK) {
        conn_down(s, ac->errstr[0] ? ac->errstr : "cannot connect"); /* hiredis frees ac */
        return;
    }
    stats_incr(s->st, STAT_redis_reconnects);
    s->last_read_us = pc_mono_us();
    s->blocked_logged = false;
    s->migrate_failed = -1;
    state_enter(s, ST_HANDSHAKE, -1);
    handshake_send(s);
}

/* Only for connections hiredis closes itself (error, EOF): ours have ac->data cleared first. */
static void on_disconnect(const redisAsyncContext *ac, int status)
{
    (void)status;
    struct store *s = ac->data;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    conn_down(s, ac->errstr[0] ? ac->errstr : "connection closed");
}

/* A host name was resolved in store_create: hiredis 0.14 would block on it here. */
static void conn_start(struct store *s)
{
    redisAsyncContext *ac =
        s->unix_path ? redisAsyncConnectUnix(s->unix_path) : redisAsyncConnect(s->host, s->port);
    if (ac == NULL) {
        conn_down(s, "out of memory");
        return;
    }
    if (ac->err) {
        char why[128];
        snprintf(why, sizeof(why), "%s", ac->errstr);
        redisAsyncFree(ac); /* never attached nor connected: no callbacks run */
        conn_down(s, why);
        return;
    }
    redisLibeventAttach(ac, s->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ac->data = s;
    s->ac = ac;
    s->wire_queued = 0;
    s->owed = 0;
    state_enter(s, ST_CONNECTING, PC_MAX(CONNECT_MIN_MS, 10 * s->timeout_ms));
}

static void state_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    switch (s->state) {
    case ST_CONNECTING:
        conn_drop_now(s, "connect timed out");
        break;
    case ST_DROPPING:
        conn_drop_now(s, s->drop_reason);
        break;
    case ST_BACKOFF:
        conn_start(s);
        break;
    case ST_BLOCKED:
        schema_read(s);
        break;
    default:
        break;
    }
}

/* --- handshake and schema -------------------------------------------------- */

/*
 * Send a handshake command whose reply goes to fn (only while this connection
 * is current); what names it in log lines.
 */
static void internal_send(struct store *s, internal_fn *fn, const char *what, int argc,
                          const char **argv, const size_t *lens, int64_t timeout_ms)
{
    struct store_cmd *c = cmd_new(s, CMD_INTERNAL);
    c->cb.internal = fn;
    snprintf(c->what, sizeof(c->what), "%s", what);
    if (cmd_send(c, argc, argv, lens, timeout_ms) < 0) {
        cmd_free(c);
        conn_drop_later(s, "cannot send a command");
    }
}

static void internal_reply(struct store_cmd *c, redisAsyncContext *ac, redisReply *r)
{
    struct store *s = c->s;
    cmd_unlink(c);
    c->done = true;
    if (r == NULL || s->ac != ac || (s->state != ST_HANDSHAKE && s->state != ST_BLOCKED))
        return; /* this connection is over; whatever replaces it starts again */
    c->cb.internal(s, r);
}

static void block(struct store *s, const char *why)
{
    if (!s->blocked_logged)
        log_error("redis: %s: %s; the cache stays off until this is fixed", s->where, why);
    s->blocked_logged = true;
    health_down(s, why);
    s->backoff_ms = BACKOFF_MIN_MS;
    s->failures = 0;
    state_enter(s, ST_BLOCKED, RECHECK_MS);
}

/* The first connection is a notice; reconnects are info (health_up says it once). */
static void become_ready(struct store *s, long version)
{
    bool first = s->health == HEALTH_UNKNOWN;
    s->backoff_ms = BACKOFF_MIN_MS;
    s->failures = 0;
    s->up = true;
    state_enter(s, ST_READY, -1);
    log_write(first ? PC_LOG_NOTICE : PC_LOG_INFO, NULL,
              "redis: connected to %s (schema version %ld)", s->where, version);
    health_up(s);
}

/* AUTH or SELECT: an error reply ends this connection (and is retried with backoff). */
static void setup_reply(struct store *s, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR) {
        char why[192];
        snprintf(why, sizeof(why), "connection setup failed: %s", r->str);
        conn_drop_later(s, why);
    }
}

static void handshake_send(struct store *s)
{
    if (s->password != NULL) {
        const char *argv[] = {"AUTH", s->password};
        internal_send(s, setup_reply, "AUTH", 2, argv, NULL, s->timeout_ms);
    }
    if (s->db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", s->db);
        const char *argv[] = {"SELECT", db};
        internal_send(s, setup_reply, "SELECT", 2, argv, NULL, s->timeout_ms);
    }
    schema_read(s);
}

static void migrate_reply(struct store *s, redisReply *r)
{
    const struct pc_migration *m = &pc_migrations[s->migrating];
    if (r->type == REDIS_REPLY_INTEGER) {
        log_notice("redis: %s: applied migration %04ld %s", s->where, m->version, m->name);
    } else {
        /* Maybe another proxy got there first: the re-read below tells. */
        log_info("redis: %s: migration %04ld %s not applied (%s); re-reading the version", s->where,
                 m->version, m->name, r->type == REDIS_REPLY_ERROR ? r->str : "?");
        s->migrate_failed = s->migrating;
        snprintf(s->migrate_err, sizeof(s->migrate_err), "%s",
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    schema_read(s);
}

/* EVAL the migration from version v to v + 1 (pc_migrations[v]). */
static void migrate_send(struct store *s, long v)
{
    struct migrate_eval e;
    migrate_eval_init(&e, (size_t)v);
    s->migrating = v;
    internal_send(s, migrate_reply, e.what, MIGRATE_EVAL_ARGC, e.argv, e.lens,
                  s->timeout_ms * STEP_TIMEOUT_MULT);
    migrate_eval_free(&e);
}

static void schema_decide(struct store *s, long v)
{
    long latest = migrate_latest();
    char why[256];
    if (v == latest) {
        become_ready(s, v);
    } else if (v > latest) {
        snprintf(why, sizeof(why),
                 "schema version %ld is newer than this build knows (%ld): upgrade promptcache", v,
                 latest);
        block(s, why);
    } else if (!s->auto_migrate) {
        snprintf(why, sizeof(why),
                 "schema version %ld, this build needs %ld: run `promptcache migrate` "
                 "(or turn on redis-auto-migrate)",
                 v, latest);
        block(s, why);
    } else if (v == s->migrate_failed) {
        snprintf(why, sizeof(why), "migration %04ld %s failed: %s", pc_migrations[v].version,
                 pc_migrations[v].name, s->migrate_err);
        block(s, why);
    } else {
        migrate_send(s, v);
    }
}

static void schema_reply(struct store *s, redisReply *r)
{
    long v;
    char why[192];
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "GET %s failed: %s", PC_SCHEMA_KEY, r->str);
        conn_drop_later(s, why); /* NOAUTH, LOADING...: retried with backoff */
        return;
    }
    if (migrate_parse_version(r, &v, why, sizeof(why)) < 0) {
        block(s, why);
        return;
    }
    schema_decide(s, v);
}

static void schema_read(struct store *s)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    internal_send(s, schema_reply, "GET " PC_SCHEMA_KEY, 2, argv, NULL, s->timeout_ms);
}

/* --- replies and timeouts ------------------------------------------------------ */

/* Bytes of the current connection's commands handed to the socket so far. */
static uint64_t wire_written(const struct store *s)
{
    return s->wire_queued - sdslen(s->ac->c.obuf);
}

/*
 * Bytes hiredis has read but not parsed into a reply yet: while a large reply
 * arrives (16 KiB per loop pass) this changes though no reply is complete.
 */
static size_t wire_partial(const struct store *s)
{
    return s->ac->c.reader->len;
}

/* Start a watch window: note what Redis has done so far. */
static void watch_arm(struct store *s)
{
    s->watch_read_us = s->last_read_us;
    s->watch_partial = wire_partial(s);
    s->watch_written = wire_written(s);
    timer_add(s, s->watch, s->cmd_tv);
}

/*
 * End of a watch window. A reply, part of one, or some of our bytes taken mean
 * Redis is alive (watch on while replies are owed); none of these, that it is
 * not.
 */
static void watch_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->ac == NULL || s->owed == 0 || s->state == ST_DROPPING)
        return;
    if (s->last_read_us != s->watch_read_us || wire_partial(s) != s->watch_partial ||
        wire_written(s) != s->watch_written) {
        watch_arm(s);
        return;
    }
    char why[160];
    snprintf(why, sizeof(why), "no reply for %llu ms (%s timed out)",
             (unsigned long long)((pc_mono_us() - s->last_read_us) / 1000), s->overdue_what);
    conn_drop_later(s, why);
}

/* c's time is up and its reply is still to come: watch the connection until it does. */
static void cmd_overdue(struct store *s, struct store_cmd *c)
{
    stats_incr(s->st, STAT_redis_timeouts);
    c->overdue = true;
    snprintf(s->overdue_what, sizeof(s->overdue_what), "%s", cmd_what(c));
    if (s->owed++ == 0)
        watch_arm(s);
}

/* Track replies on the current connection; a NULL reply means hiredis is freeing it. */
static void conn_note_reply(redisAsyncContext *ac, const struct store_cmd *c, const redisReply *r)
{
    struct store *s = ac->data;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (r == NULL) {
        conn_down(s, ac->errstr[0] ? ac->errstr : "connection closed");
        return;
    }
    s->last_read_us = pc_mono_us();
    if (c->overdue) {
        s->owed--;
        return;
    }
    s->timeouts_since_us = 0; /* an answer in time */
    if (s->health == HEALTH_DOWN && s->state == ST_READY)
        health_up(s);
}

static void get_reply(struct store_cmd *c, const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        cmd_complete(c, STORE_OK, r->str, r->len, 0);
    else if (r != NULL && r->type == REDIS_REPLY_NIL)
        cmd_complete(c, STORE_OK, NULL, 0, 0);
    else
        cmd_fail(c, r, "GET");
}

static void write_reply(struct store_cmd *c, const redisReply *r)
{
    if (r != NULL && r->type != REDIS_REPLY_ERROR)
        cmd_complete(c, STORE_OK, NULL, 0, 0);
    else
        cmd_fail(c, r, c->what);
}

static void set_reply(struct store_cmd *c, const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_STATUS)
        cmd_complete(c, STORE_OK, NULL, 0, 0);
    else
        cmd_fail(c, r, "SET");
}

/* Send the next step of store_delete_matching; false (and c completed) if it cannot. */
static bool step_send(struct store_cmd *c, int argc, const char **argv, const size_t *lens)
{
    struct store *s = c->s;
    if (s->state != ST_READY ||
        cmd_send(c, argc, argv, lens, s->timeout_ms * STEP_TIMEOUT_MULT) < 0) {
        cmd_complete(c, STORE_ERR, NULL, 0, 0);
        return false;
    }
    return true;
}

static bool step_scan(struct store_cmd *c)
{
    const char *argv[] = {"SCAN", c->cursor, "MATCH", c->pattern, "COUNT", SCAN_COUNT};
    c->kind = CMD_SCAN;
    return step_send(c, 6, argv, NULL);
}

/* After a batch: SCAN on, or report the total once the cursor is back at 0. */
static bool step_next(struct store_cmd *c)
{
    if (strcmp(c->cursor, "0") == 0) {
        cmd_complete(c, STORE_OK, NULL, 0, c->deleted);
        return false;
    }
    return step_scan(c);
}

static bool step_unlink(struct store_cmd *c, const redisReply *keys)
{
    size_t n = keys->elements + 1;
    if (n > INT_MAX) {
        cmd_fail(c, NULL, "SCAN");
        return false;
    }
    const char **argv = pc_malloc(n * sizeof(*argv));
    size_t *lens = pc_malloc(n * sizeof(*lens));
    argv[0] = "UNLINK";
    lens[0] = 6;
    for (size_t i = 1; i < n; i++) {
        argv[i] = keys->element[i - 1]->str;
        lens[i] = keys->element[i - 1]->len;
    }
    c->kind = CMD_UNLINK;
    bool sent = step_send(c, (int)n, argv, lens);
    free(argv);
    free(lens);
    return sent;
}

static bool scan_reply_ok(const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len == 0 ||
        r->element[0]->len >= sizeof(((struct store_cmd *)NULL)->cursor) ||
        r->element[1]->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < r->element[1]->elements; i++)
        if (r->element[1]->element[i]->type != REDIS_REPLY_STRING)
            return false;
    return true;
}

/* SCAN reply: [cursor, [key...]]. True if the command goes on (next step sent). */
static bool scan_reply(struct store_cmd *c, const redisReply *r)
{
    if (!scan_reply_ok(r)) {
        cmd_fail(c, r, "SCAN");
        return false;
    }
    memcpy(c->cursor, r->element[0]->str, r->element[0]->len);
    c->cursor[r->element[0]->len] = '\0';
    if (r->element[1]->elements > 0)
        return step_unlink(c, r->element[1]);
    return step_next(c);
}

static bool unlink_reply(struct store_cmd *c, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        cmd_fail(c, r, "UNLINK");
        return false;
    }
    c->deleted += r->integer;
    return step_next(c);
}

/* Every command's hiredis callback; the only place a sent command is freed. */
static void cmd_reply_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct store_cmd *c = privdata;
    redisReply *r = reply;
    PC_CHECK_OBJ(c, CMD_MAGIC);
    conn_note_reply(ac, c, r);
    if (c->done) {
        cmd_free(c);
        return;
    }
    evtimer_del(c->timer);
    if (r != NULL && (c->kind == CMD_GET || c->kind == CMD_SET) && c->s != NULL) {
        static const struct stat_labels none = {0};
        stats_observe(c->s->st, SF_redis_latency_seconds, &none,
                      (int64_t)(pc_mono_us() - c->sent_us));
    }
    bool goes_on = false;
    switch (c->kind) {
    case CMD_GET:
        get_reply(c, r);
        break;
    case CMD_SET:
        set_reply(c, r);
        break;
    case CMD_WRITE:
        write_reply(c, r);
        break;
    case CMD_SCAN:
        goes_on = scan_reply(c, r);
        break;
    case CMD_UNLINK:
        goes_on = unlink_reply(c, r);
        break;
    case CMD_INTERNAL:
        internal_reply(c, ac, r);
        break;
    }
    if (!goes_on)
        cmd_free(c);
}

/*
 * A command's timer fired. libevent's clock is coarse, so check that its time
 * really is up, else wait for the rest. Then a user command's callback runs
 * with STORE_TIMEOUT and its reply, if it ever comes, is swallowed; an
 * internal command keeps waiting for its reply (the handshake goes on if it
 * comes). Either way the stall watch decides about the connection.
 */
static void cmd_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store_cmd *c = arg;
    PC_CHECK_OBJ(c, CMD_MAGIC);
    struct store *s = c->s; /* an armed timer means not done, so on the list */
    PC_CHECK_OBJ(s, STORE_MAGIC);
    int64_t waited = (int64_t)(pc_mono_us() - c->sent_us);
    if (waited < c->timeout_us) {
        cmd_arm(c, c->timeout_us - waited);
        return;
    }
    cmd_overdue(s, c);
    if (c->kind == CMD_INTERNAL) {
        stats_incr(s->st, STAT_redis_errors);
        return;
    }
    if (s->state == ST_READY)
        health_note_timeout(s);
    cmd_complete(c, STORE_TIMEOUT, NULL, 0, 0);
}

/* --- public API ------------------------------------------------------------------ */

static const struct timeval *common_timeout(struct event_base *base, int64_t ms,
                                            struct timeval *plain)
{
    *plain = pc_timeval_ms(ms);
    const struct timeval *tv = event_base_init_common_timeout(base, plain);
    return tv != NULL ? tv : plain;
}

/* The host is an address already: nothing to resolve. */
static bool host_is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The first address of host in family af, as text: 0, or a getaddrinfo error code. */
static int resolve_in(const char *host, int af, char *out, size_t n)
{
    struct addrinfo hints = {.ai_family = af, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc == 0) {
        rc = getnameinfo(ai->ai_addr, ai->ai_addrlen, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST);
        freeaddrinfo(ai);
    }
    return rc;
}

/*
 * hiredis 0.14 resolves a host name with a blocking getaddrinfo on every
 * connect, on the event loop. Resolve it once, now (store_create runs before
 * the loop does), in hiredis's order: IPv4 first, then IPv6. s->where keeps
 * the name.
 */
static void resolve_host(struct store *s)
{
    char addr[NI_MAXHOST];
    if (s->host == NULL || host_is_address(s->host))
        return;
    int rc = resolve_in(s->host, AF_INET, addr, sizeof(addr));
    if (rc != 0)
        rc = resolve_in(s->host, AF_INET6, addr, sizeof(addr));
    if (rc != 0) {
        log_warn("redis: cannot resolve %s (%s); resolving it again on every connection attempt",
                 s->host, gai_strerror(rc));
        return;
    }
    log_notice("redis: %s resolved to %s", s->host, addr);
    free(s->host);
    s->host = pc_strdup(addr);
}

struct store *store_create(struct event_base *base, const struct store_opts *opts, struct stats *st)
{
    char err[192];
    struct store *s = pc_calloc(1, sizeof(*s));
    if (store_parse_url(opts->url, &s->host, &s->port, &s->unix_path, &s->password, &s->db, err,
                        sizeof(err)) < 0) {
        log_error("redis: invalid URL: %s", err);
        free(s);
        return NULL;
    }
    s->magic = STORE_MAGIC;
    s->base = base;
    s->st = st;
    s->where = store_where(s->host, s->port, s->unix_path, s->db);
    resolve_host(s);
    s->timeout_ms = PC_MAX(opts->timeout_ms, 1);
    s->auto_migrate = opts->auto_migrate;
    s->cmd_tv = common_timeout(base, s->timeout_ms, &s->cmd_tv_plain);
    s->step_tv = common_timeout(base, s->timeout_ms * STEP_TIMEOUT_MULT, &s->step_tv_plain);
    s->timer = evtimer_new(base, state_timer_cb, s);
    s->watch = evtimer_new(base, watch_cb, s);
    if (s->timer == NULL || s->watch == NULL) {
        log_error("redis: cannot create a timer");
        abort();
    }
    s->state = ST_IDLE;
    s->backoff_ms = BACKOFF_MIN_MS;
    s->rng = (pc_mono_us() ^ (uint64_t)(uintptr_t)s) | 1;
    s->migrate_failed = -1;
    return s;
}

void store_start(struct store *s)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->state == ST_IDLE)
        conn_start(s);
}

bool store_ready(const struct store *s)
{
    return s != NULL && s->state == ST_READY;
}

void store_destroy(struct store **sp)
{
    struct store *s = *sp;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    *sp = NULL;
    redisAsyncContext *ac = s->ac;
    if (ac != NULL)
        ac->data = NULL;
    s->ac = NULL;
    state_enter(s, ST_CLOSED, -1);
    if (s->health == HEALTH_DOWN)
        health_leave_down(s, false); /* gone, not back: no notice */
    while (s->cmds != NULL) {
        struct store_cmd *c = s->cmds;
        if (c->kind == CMD_INTERNAL) {
            cmd_unlink(c);
            c->done = true;
            evtimer_del(c->timer);
        } else {
            cmd_complete(c, STORE_ERR, NULL, 0, 0);
        }
    }
    if (ac != NULL)
        redisAsyncFree(ac); /* its callbacks free the commands cut loose above */
    event_free(s->timer);
    event_free(s->watch);
    free(s->host);
    free(s->unix_path);
    free(s->password);
    free(s->where);
    s->magic = 0;
    free(s);
}

struct store_cmd *store_get(struct store *s, const void *key, size_t klen, store_get_fn *cb,
                            void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->state != ST_READY || cb == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_GET);
    c->cb.get = cb;
    c->arg = arg;
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, klen};
    if (cmd_send(c, 2, argv, lens, s->timeout_ms) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

struct store_cmd *store_set_cb(struct store *s, const void *key, size_t klen, const void *val,
                               size_t vlen, int64_t ttl_ms, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->state != ST_READY || ttl_ms <= 0)
        return NULL;
    char px[24];
    snprintf(px, sizeof(px), "%lld", (long long)ttl_ms);
    struct store_cmd *c = cmd_new(s, CMD_SET);
    c->cb.num = cb;
    c->arg = arg;
    const char *argv[] = {"SET", key, val, "PX", px};
    size_t lens[] = {3, klen, vlen, 2, strlen(px)};
    /* a multi-MB answer takes a while to write and to store */
    int64_t timeout_ms = s->timeout_ms + (int64_t)(vlen / SET_BYTES_PER_MS);
    if (cmd_send(c, 5, argv, lens, timeout_ms) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

int store_set(struct store *s, const void *key, size_t klen, const void *val, size_t vlen,
              int64_t ttl_ms)
{
    return store_set_cb(s, key, klen, val, vlen, ttl_ms, NULL, NULL) != NULL ? 0 : -1;
}

int store_write(struct store *s, int argc, const char **argv, const size_t *lens)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->state != ST_READY || argc < 1)
        return -1;
    struct store_cmd *c = cmd_new(s, CMD_WRITE);
    snprintf(c->what, sizeof(c->what), "%.*s", (int)PC_MIN(lens[0], sizeof(c->what) - 1), argv[0]);
    if (cmd_send(c, argc, argv, lens, s->timeout_ms) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return -1;
    }
    return 0;
}

struct store_cmd *store_delete_matching(struct store *s, const char *pattern, store_int_fn *cb,
                                        void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (s->state != ST_READY || pattern == NULL || cb == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_SCAN);
    c->cb.num = cb;
    c->arg = arg;
    c->pattern = pc_strdup(pattern);
    strcpy(c->cursor, "0");
    const char *argv[] = {"SCAN", c->cursor, "MATCH", c->pattern, "COUNT", SCAN_COUNT};
    if (cmd_send(c, 6, argv, NULL, s->timeout_ms * STEP_TIMEOUT_MULT) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

void store_cancel(struct store_cmd **cp)
{
    struct store_cmd *c = *cp;
    if (c == NULL)
        return;
    PC_CHECK_OBJ(c, CMD_MAGIC);
    *cp = NULL;
    if (c->done)
        return;
    cmd_unlink(c);
    c->done = true;
    evtimer_del(c->timer); /* hiredis still holds c: the reply frees it */
}
