/*
 * psync.c - sharing the prefix index through Redis (see pc_psync.h). Owns
 * the queue of local records waiting to be published, the writer thread with
 * its blocking hiredis connection, the handler of the stream that the
 * process's follower (pc_follow.h) reads, and a metrics row.
 *
 *   pindex sink (any worker) ─▶ queue ─cond─▶ writer: XADD + ZADD pipeline
 *   follower: start: ZRANGE per replica (catch up) ─▶ entries ─▶ pindex_apply
 *
 * A stream entry has one field, d = instance (8 bytes) ‖ ms (8, big-endian)
 * ‖ replica name length (1) ‖ name ‖ links (12 bytes each): one field keeps
 * the reply small, and a reader skips its own records by their first bytes.
 * A name longer than a length byte can say (a long DNS name, a gateway's
 * path) is written as "sha256:" and the SHA-256 of the whole name in hex, so
 * that names alike in their first 255 bytes stay apart (wire_name).
 * The writer formats its commands itself (RESP), which costs a fraction of
 * hiredis's formatting of many small arguments.
 *
 * What the handler gets from Redis is input (another writer can be wrong or
 * hostile): an entry or a set member is applied only if every field is in
 * range (record_check, time_ok, parse_stamp and pindex_apply's checks), and
 * each one turned away counts in prefix_records_rejected.
 *
 * Stopping: the flag is set and the writer's condition is signalled; it
 * leaves its loop and is joined. The follower is stopped before (server.c).
 *
 * The writer's connection is a struct rcli: with cluster:// the stream and
 * each replica's set live on their own slots, so the writer sends the XADDs
 * of a batch as one pipeline and each replica's ZADDs as another, each to
 * the node of its key (one and the same connection otherwise), and a MOVED
 * among the replies makes it connect anew (the slot map is read again).
 */
#include "pc_psync.h"
#include "pc_chain.h"
#include "pc_conf.h"
#include "pc_follow.h"
#include "pc_log.h"
#include "pc_pindex.h"
#include "pc_rcli.h"
#include "pc_route.h"
#include "pc_rurl.h"
#include "pc_sentinel.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define PSYNC_MAGIC 0x5053594eu /* "PSYN" */
#define QUEUE_MAX   4096        /* records waiting; more are dropped (and counted) */
/* Links waiting, over all records (12 bytes each, 3 MiB): a record of up to CHAIN_MAX_LINKS
 * links each, QUEUE_MAX of them were 200 MB while Redis was away. */
#define QUEUE_LINKS_MAX (1u << 18)
#define BATCH_MAX       256     /* records per pipeline */
#define STREAM_MAXLEN   "20000" /* records kept in the stream (a reader further behind restores) */
/*
 * The writer's wait after a record came, so that one pipeline carries many:
 * each wake-up of the thread costs about as much CPU as the record it
 * carries, and on a busy machine that CPU is taken from the workers. A
 * record reaches the other instances within about that, next to seconds
 * between the turns of a conversation. It does not wait when a full batch is
 * there already.
 */
#define WRITE_LINGER_MS 50
#define IO_TIMEOUT_MS   5000
#define BACKOFF_MIN_MS  100
#define BACKOFF_MAX_MS  5000
#define LOG_EVERY_MS    60000
#define TRIM_EVERY      64      /* ZADDs to a replica's set between trims */
#define LINK_BYTES      12      /* 8-byte hash, 4-byte tokens */
#define MIN_LINK_TOKENS 128     /* sets keep capacity / this many members */
#define KEEP_MAX        1000000 /* members a set keeps at most */
/* Catching up reads a set WITHSCORES: a member and its score, in one reply. */
_Static_assert(2 * KEEP_MAX + 1 <= RCLI_REPLY_ELEMENTS, "a set's ZRANGE fits a blocking reply");
/* How far ahead of this clock a record's time may be: clocks of hosts differ by far less,
 * and a record from further ahead would stay the newest, unmoved, for that long. */
#define FUTURE_MS     300000
#define WIRE_NAME_MAX 255 /* a record's name length is one byte */
/* How long a replica's set too large to read (restore_replica) is left out of catching up. */
#define UNREADABLE_SKIP_MS 600000

/* One local record waiting to be published. */
struct rec {
    size_t rep;
    int64_t ms;
    size_t n;
    uint64_t *h;
    uint32_t *tok;
    struct rec *next;
};

/* A blocking connection of one thread. */
struct conn {
    const char *who; /* "writer" (log lines) */
    struct rcli k;   /* quiet; k.rc: the connection of the key routed to last */
    bool open;
    uint64_t failed_logged_ms;
};

struct psync {
    unsigned magic;
    struct route *route;
    struct pindex *index;
    struct stats stats;
    unsigned char instance[8]; /* random id of this process, to skip its own records */
    struct rurl url;
    char *redis;                     /* the URL, with its secrets: for rcli_open */
    char *where;                     /* the URL without its secrets */
    size_t keep;                     /* members kept per replica set */
    char *wire[PINDEX_MAX_REPLICAS]; /* each replica's name in a record (wire_name) */

    pthread_mutex_t mu;        /* the queue, stopping */
    pthread_cond_t cond;       /* broadcast only on stop: wakes every pause */
    pthread_cond_t queue_cond; /* signalled when the queue stops being empty: wakes the writer */
    struct rec *head, *tail;
    size_t queued;
    size_t queued_links;
    bool stopping;

    pthread_t writer;
    bool started;
    unsigned trims[PINDEX_MAX_REPLICAS]; /* writer only */
    uint64_t reject_logged_ms;           /* the follower's thread only */
    /* The follower's thread only: when a replica's set was too large to read (0: never). */
    uint64_t unreadable_ms[PINDEX_MAX_REPLICAS];
    uint64_t refused_logged_ms[2]; /* [0] the writer's, [1] the follower's thread */
};

/* ---- connections ------------------------------------------------------------ */

static void conn_close(struct conn *c)
{
    rcli_close(&c->k); /* keeps k's sentinel to ask first */
    c->open = false;
}

static void conn_failed(struct psync *ps, struct conn *c, const char *why)
{
    stats_incr(&ps->stats, STAT_prefix_sync_errors);
    uint64_t now = pc_mono_ms();
    if (c->failed_logged_ms == 0 || now - c->failed_logged_ms >= LOG_EVERY_MS) {
        /* Info: the store reports an outage once per process (one warning, one notice). */
        log_info("prefix index sharing (%s): redis %s: %s", c->who, ps->where, why);
        c->failed_logged_ms = now;
    }
    conn_close(c);
}

/* A failure of the connection that k says why: counted, logged (the URL once), closed. */
static void conn_failed_k(struct psync *ps, struct conn *c)
{
    char why[sizeof(c->k.errmsg)];
    size_t wl = strlen(ps->where);
    const char *msg = c->k.errmsg;
    if (strncmp(msg, ps->where, wl) == 0 && msg[wl] == ':' && msg[wl + 1] == ' ')
        msg += wl + 2;
    snprintf(why, sizeof(why), "%s", msg);
    conn_failed(ps, c, why);
}

/*
 * Redis answered a command with an error (a key of another type: WRONGTYPE,
 * out of memory: OOM): counted by the caller; said in the log at most once a
 * minute per thread (who: 0 the writer, 1 the follower), or it would only show
 * as prefix_sync_errors growing.
 */
static void refused(struct psync *ps, int who, const char *what, const char *key, size_t klen,
                    const redisReply *r)
{
    uint64_t now = pc_mono_ms(), *last = &ps->refused_logged_ms[who];
    if (*last != 0 && now - *last < LOG_EVERY_MS)
        return;
    *last = now;
    log_warn("prefix index sharing: redis %s refused the %s of %.*s: %.*s (counted in "
             "prefix_sync_errors)",
             ps->where, what, (int)PC_MIN(klen, 300), key, (int)PC_MIN(r->len, 200),
             r->str != NULL ? r->str : "");
}

/*
 * Connect (following a sentinel:// URL to the primary of now, or reading a
 * cluster's slot map); false after counting why.
 */
static bool conn_open(struct psync *ps, struct conn *c)
{
    c->k.quiet = true;
    if (rcli_open(&c->k, ps->redis, IO_TIMEOUT_MS, "psync") < 0) {
        conn_failed_k(ps, c);
        return false;
    }
    c->open = true;
    if (c->failed_logged_ms != 0)
        log_info("prefix index sharing (%s): redis %s reachable again (%s)", c->who, ps->where,
                 c->k.where);
    c->failed_logged_ms = 0;
    return true;
}

/* The connection to the server of key (a cluster's node; else the one); NULL after counting. */
static redisContext *conn_for(struct psync *ps, struct conn *c, const char *key, size_t klen)
{
    if (rcli_route(&c->k, key, klen) == 0)
        return c->k.rc;
    conn_failed_k(ps, c);
    return NULL;
}

/* Sleep ms unless stopping; false once stopping. Caller does not hold mu. */
static bool pause_ms(struct psync *ps, int64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&ps->mu);
    while (!ps->stopping && pthread_cond_timedwait(&ps->cond, &ps->mu, &until) != ETIMEDOUT)
        ;
    bool go_on = !ps->stopping;
    pthread_mutex_unlock(&ps->mu);
    return go_on;
}

static bool is_stopping(struct psync *ps)
{
    pthread_mutex_lock(&ps->mu);
    bool s = ps->stopping;
    pthread_mutex_unlock(&ps->mu);
    return s;
}

/* Connect with backoff; false once stopping. */
static bool conn_ensure(struct psync *ps, struct conn *c)
{
    int64_t backoff = BACKOFF_MIN_MS;
    while (!c->open) {
        if (is_stopping(ps))
            return false;
        if (conn_open(ps, c))
            break;
        if (!pause_ms(ps, backoff))
            return false;
        backoff = PC_MIN(backoff * 2, BACKOFF_MAX_MS);
    }
    return true;
}

/* ---- links on the wire -------------------------------------------------------- */

static void put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

static uint64_t get_be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = (v << 8) | p[i];
    return v;
}

static void set_key(const struct psync *ps, size_t rep, struct pc_buf *key)
{
    pc_buf_reset(key);
    pc_buf_printf(key, PSYNC_SET_PREFIX "{%s}", route_replica(ps->route, rep)->name);
}

/* ---- the writer ----------------------------------------------------------------- */

static void rec_free(struct rec *r)
{
    free(r->h);
    free(r->tok);
    free(r);
}

/* The pindex sink: runs on a worker; copies the record into the queue. */
static void sink(void *arg, size_t rep, const uint64_t *h, const uint32_t *tokens, size_t n,
                 int64_t ms)
{
    struct psync *ps = arg;
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    struct rec *r = pc_calloc(1, sizeof(*r));
    *r = (struct rec){rep, ms, n, pc_malloc(n * sizeof(*h)), pc_malloc(n * sizeof(*tokens)), NULL};
    memcpy(r->h, h, n * sizeof(*h));
    memcpy(r->tok, tokens, n * sizeof(*tokens));
    pthread_mutex_lock(&ps->mu);
    if (ps->queued >= QUEUE_MAX || ps->queued_links + n > QUEUE_LINKS_MAX || ps->stopping) {
        pthread_mutex_unlock(&ps->mu);
        rec_free(r);
        stats_incr(&ps->stats, STAT_prefix_sync_errors);
        stats_incr(&ps->stats, STAT_prefix_sync_dropped);
        return;
    }
    bool was_empty = ps->head == NULL;
    if (ps->tail != NULL)
        ps->tail->next = r;
    else
        ps->head = r;
    ps->tail = r;
    ps->queued++;
    ps->queued_links += n;
    pthread_mutex_unlock(&ps->mu);
    /* Only the writer waits for records, and only on an empty queue: a wake-up per request
     * (and waking the pauses) cost more than the pass-through itself. Signalled after the
     * unlock, so the writer does not wake up only to wait for the mutex this worker holds. */
    if (was_empty)
        pthread_cond_signal(&ps->queue_cond);
}

/*
 * Up to BATCH_MAX queued records (NULL once stopping): waits for one, then
 * WRITE_LINGER_MS for others unless a full batch is queued already.
 */
static struct rec *take_batch(struct psync *ps)
{
    pthread_mutex_lock(&ps->mu);
    while (ps->head == NULL && !ps->stopping)
        pthread_cond_wait(&ps->queue_cond, &ps->mu);
    bool full = ps->queued >= BATCH_MAX;
    pthread_mutex_unlock(&ps->mu);
    if (!full)
        pause_ms(ps, WRITE_LINGER_MS);
    pthread_mutex_lock(&ps->mu);
    struct rec *batch = ps->stopping ? NULL : ps->head, *last = batch;
    for (size_t k = 1; last != NULL && k < BATCH_MAX && last->next != NULL; k++)
        last = last->next;
    if (last != NULL) {
        ps->head = last->next;
        if (ps->head == NULL)
            ps->tail = NULL;
        last->next = NULL;
    }
    for (struct rec *r = batch; r != NULL; r = r->next) {
        ps->queued--;
        ps->queued_links -= r->n;
    }
    pthread_mutex_unlock(&ps->mu);
    return batch;
}

/* A RESP count line: '*' and the arguments of a command, or '$' and the length of one. */
static void resp_count(struct pc_buf *out, char kind, size_t n)
{
    pc_buf_append_char(out, kind);
    pc_buf_append_i64(out, (int64_t)n);
    pc_buf_append(out, "\r\n", 2);
}

/* RESP framing of one argument. */
static void resp_arg(struct pc_buf *out, const void *p, size_t n)
{
    resp_count(out, '$', n);
    pc_buf_append(out, p, n);
    pc_buf_append(out, "\r\n", 2);
}

static void resp_str(struct pc_buf *out, const char *s)
{
    resp_arg(out, s, strlen(s));
}

/* XADD of one record into cmd (RESP). */
static void format_xadd(struct psync *ps, const struct rec *r, struct pc_buf *cmd)
{
    const char *name = ps->wire[r->rep];
    size_t nlen = strlen(name); /* at most WIRE_NAME_MAX */
    size_t dlen = 8 + 8 + 1 + nlen + r->n * LINK_BYTES;
    pc_buf_append_str(cmd, "*8\r\n");
    resp_str(cmd, "XADD");
    resp_str(cmd, PSYNC_STREAM);
    resp_str(cmd, "MAXLEN");
    resp_str(cmd, "~");
    resp_str(cmd, STREAM_MAXLEN);
    resp_str(cmd, "*");
    resp_str(cmd, "d");
    resp_count(cmd, '$', dlen);
    unsigned char head[17];
    memcpy(head, ps->instance, 8);
    put_be(head + 8, (uint64_t)r->ms, 8);
    head[16] = (unsigned char)nlen;
    pc_buf_append(cmd, head, sizeof(head));
    pc_buf_append(cmd, name, nlen);
    for (size_t i = 0; i < r->n; i++) {
        unsigned char link[LINK_BYTES];
        put_be(link, r->h[i], 8);
        put_be(link + 8, r->tok[i], 4);
        pc_buf_append(cmd, link, sizeof(link));
    }
    pc_buf_append(cmd, "\r\n", 2);
}

/*
 * The trim of a replica's set into cmd (RESP): members scored further ahead
 * than a record's time may be (FUTURE_MS) first, then all but the newest
 * keep. Ranked above every sound member, those stayed through every trim by
 * rank, which took the sound members instead: a few thousand of them (an
 * instance whose clock runs fast, another writer) and every instance that
 * started restored only members it rejects. 2, the commands added.
 */
static int format_trim(struct psync *ps, const struct pc_buf *key, struct pc_buf *cmd)
{
    char min[24], stop[24];
    int64_t latest = (pc_wall_ms() + FUTURE_MS) * PINDEX_DEPTH_STEPS + (PINDEX_DEPTH_STEPS - 1);
    snprintf(min, sizeof(min), "(%lld", (long long)latest);
    pc_buf_append_str(cmd, "*4\r\n");
    resp_str(cmd, "ZREMRANGEBYSCORE");
    resp_arg(cmd, key->data, key->len);
    resp_str(cmd, min);
    resp_str(cmd, "+inf");
    snprintf(stop, sizeof(stop), "-%zu", ps->keep + 1);
    pc_buf_append_str(cmd, "*4\r\n");
    resp_str(cmd, "ZREMRANGEBYRANK");
    resp_arg(cmd, key->data, key->len);
    resp_str(cmd, "0");
    resp_str(cmd, stop);
    return 2;
}

/* ZADD of a record's links to its replica's set into cmd (RESP); the commands added. */
static int format_zadd(struct psync *ps, const struct rec *r, struct pc_buf *key,
                       struct pc_buf *cmd)
{
    set_key(ps, r->rep, key);
    resp_count(cmd, '*', 2 + 2 * r->n);
    resp_str(cmd, "ZADD");
    resp_arg(cmd, key->data, key->len);
    for (size_t i = 0; i < r->n; i++) {
        char score[21];
        int64_t stamp = r->ms * PINDEX_DEPTH_STEPS + (PINDEX_DEPTH_STEPS - 1) -
                        (int64_t)PC_MIN(i, PINDEX_DEPTH_STEPS - 1);
        resp_arg(cmd, score, pc_u64_dec((uint64_t)PC_MAX(stamp, 0), score));
        unsigned char link[LINK_BYTES];
        put_be(link, r->h[i], 8);
        put_be(link + 8, r->tok[i], 4);
        resp_arg(cmd, link, sizeof(link));
    }
    if (++ps->trims[r->rep] % TRIM_EVERY != 0)
        return 1;
    return 1 + format_trim(ps, key, cmd);
}

/*
 * Send n commands (cmd, RESP) as one pipeline to the server of key and read
 * their replies (an error reply clears *ok); false if the connection failed.
 */
static bool pipeline(struct psync *ps, struct conn *c, const char *key, size_t klen,
                     const struct pc_buf *cmd, int n, bool *ok)
{
    redisContext *rc = conn_for(ps, c, key, klen);
    if (rc == NULL)
        return false;
    if (redisAppendFormattedCommand(rc, cmd->data, cmd->len) != REDIS_OK) {
        conn_failed(ps, c, "out of memory");
        return false;
    }
    bool elsewhere = false;
    for (int i = 0; i < n; i++) {
        void *reply = NULL;
        if (rcli_get_reply(rc, &reply) != REDIS_OK) {
            conn_failed(ps, c, rc->errstr[0] ? rc->errstr : "connection lost");
            return false;
        }
        if (((redisReply *)reply)->type == REDIS_REPLY_ERROR) {
            if (*ok)
                refused(ps, 0, "write", key, klen, reply);
            *ok = false;
        }
        elsewhere = elsewhere || sentinel_readonly(reply) || rcli_redirected(reply);
        freeReplyObject(reply);
    }
    if (elsewhere) { /* a failover or a reshard: the next batch goes where the data is now */
        conn_failed(ps, c, "the server turned into a replica or the slot moved (READONLY, MOVED)");
        return false;
    }
    return true;
}

/* Send a batch: the XADDs, then each replica's ZADDs; false if the connection failed. */
static bool publish(struct psync *ps, struct conn *c, const struct rec *batch)
{
    struct pc_buf cmd = PC_BUF_INIT, key = PC_BUF_INIT;
    int n = 0, records = 0;
    bool ok = true;
    for (const struct rec *r = batch; r != NULL; r = r->next, records++, n++)
        format_xadd(ps, r, &cmd);
    bool sent = pipeline(ps, c, PSYNC_STREAM, strlen(PSYNC_STREAM), &cmd, n, &ok);
    for (size_t rep = 0; sent && rep < route_count(ps->route); rep++) {
        pc_buf_reset(&cmd);
        n = 0;
        for (const struct rec *r = batch; r != NULL; r = r->next)
            if (r->rep == rep)
                n += format_zadd(ps, r, &key, &cmd);
        if (n > 0) {
            set_key(ps, rep, &key);
            sent = pipeline(ps, c, key.data, key.len, &cmd, n, &ok);
        }
    }
    pc_buf_free(&cmd);
    pc_buf_free(&key);
    if (!sent)
        return false;
    if (!ok)
        stats_incr(&ps->stats, STAT_prefix_sync_errors);
    stats_add(&ps->stats, STAT_prefix_sync_published, records);
    return true;
}

static void *writer_main(void *arg)
{
    struct psync *ps = arg;
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    struct conn c = {.who = "writer"};
    struct rec *batch;
    while ((batch = take_batch(ps)) != NULL) {
        /* Redis away: the batch waits for it (the queue behind it is bounded). */
        if (conn_ensure(ps, &c))
            publish(ps, &c, batch);
        while (batch != NULL) {
            struct rec *next = batch->next;
            rec_free(batch);
            batch = next;
        }
    }
    conn_close(&c);
    return NULL;
}

/* ---- the stream's handler ------------------------------------------------------------ */

static size_t replica_named(const struct psync *ps, const char *name, size_t len)
{
    for (size_t i = 0; i < route_count(ps->route); i++) {
        const char *n = ps->wire[i];
        if (strlen(n) == len && memcmp(n, name, len) == 0)
            return i;
    }
    return SIZE_MAX;
}

/* ---- the handler's checks ------------------------------------------------------------ */

/* Count a record or member turned away; say why in the log at most once a minute. */
static void reject(struct psync *ps, const char *why)
{
    stats_incr(&ps->stats, STAT_prefix_records_rejected);
    uint64_t now = pc_mono_ms();
    if (ps->reject_logged_ms == 0 || now - ps->reject_logged_ms >= LOG_EVERY_MS) {
        log_warn("prefix index sharing: a record from redis %s rejected: %s (counted in "
                 "prefix_records_rejected)",
                 ps->where, why);
        ps->reject_logged_ms = now;
    }
}

/* A record's time: a wall clock in milliseconds, not ahead of ours by more than FUTURE_MS. */
static bool time_ok(uint64_t ms)
{
    return ms <= (uint64_t)PINDEX_MS_MAX && (int64_t)ms <= pc_wall_ms() + FUTURE_MS;
}

/* A set member's score: a stamp, written by format_zadd as a non-negative integer. */
static bool parse_stamp(const redisReply *s, int64_t *stamp)
{
    if (s->type != REDIS_REPLY_STRING || s->len == 0 || s->len > 19)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->str[i] < '0' || s->str[i] > '9' || v > (INT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (s->str[i] - '0');
    }
    *stamp = v;
    return true;
}

/* Apply one member of replica rep's set (member m, score s), unless it is out of range. */
static void apply_member(struct psync *ps, size_t rep, const redisReply *m, const redisReply *s)
{
    int64_t stamp = 0;
    const char *bad = NULL;
    if (m->type != REDIS_REPLY_STRING || m->len != LINK_BYTES)
        bad = "a set member is not a link";
    else if (!parse_stamp(s, &stamp) || !time_ok((uint64_t)(stamp / PINDEX_DEPTH_STEPS)))
        bad = "a set member's score is not a stamp of now or before";
    if (bad == NULL) {
        uint64_t h = get_be((const unsigned char *)m->str, 8);
        uint32_t tok = (uint32_t)get_be((const unsigned char *)m->str + 8, 4);
        size_t depth = (size_t)(PINDEX_DEPTH_STEPS - 1 - stamp % PINDEX_DEPTH_STEPS);
        if (pindex_apply(ps->index, rep, &h, &tok, 1, depth, stamp / PINDEX_DEPTH_STEPS) < 0)
            bad = "a set member's link weighs more tokens than a link can";
    }
    if (bad != NULL)
        reject(ps, bad);
}

/*
 * Whether replica rep's set is left out of catching up: its read failed for
 * a reply past RCLI_REPLY_MAX (a member of megabytes, put there by another
 * writer, scored to stay on top through every trim) within
 * UNREADABLE_SKIP_MS. Reading it again at every start failed every start, so
 * the follower never followed: the L1 stayed off and no instance's records
 * were applied.
 */
static bool set_unreadable(const struct psync *ps, size_t rep)
{
    uint64_t at = ps->unreadable_ms[rep];
    return at != 0 && pc_mono_ms() - at < UNREADABLE_SKIP_MS;
}

/*
 * A failed read of replica rep's set: one whose reply broke the protocol or
 * the cap on its size (hiredis's REDIS_ERR_PROTOCOL; a lost connection is
 * not the set's doing) leaves the set out of the next starts.
 */
static void read_failed(struct psync *ps, const struct rcli *k, size_t rep)
{
    stats_incr(&ps->stats, STAT_prefix_sync_errors);
    if (k->rc == NULL || k->rc->err != REDIS_ERR_PROTOCOL)
        return;
    ps->unreadable_ms[rep] = pc_mono_ms();
    reject(ps, "a replica's set is too large to read (a member of another writer's): catching "
               "up from it is left out for 10 minutes");
}

/* Catch up from a replica's set: its newest members, read on the follower's connection. */
static int restore_replica(struct psync *ps, struct rcli *k, size_t rep)
{
    if (set_unreadable(ps, rep))
        return 0;
    struct pc_buf key = PC_BUF_INIT;
    set_key(ps, rep, &key);
    char start[24];
    snprintf(start, sizeof(start), "-%zu", ps->keep);
    const char *argv[] = {"ZRANGE", key.data, start, "-1", "WITHSCORES"};
    size_t lens[] = {6, key.len, strlen(start), 2, 10};
    redisReply *r = rcli_call(k, 5, argv, lens);
    if (r == NULL) {
        pc_buf_free(&key);
        read_failed(ps, k, rep);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        stats_incr(&ps->stats, STAT_prefix_sync_errors);
        refused(ps, 1, "read", key.data, key.len, r);
    }
    pc_buf_free(&key);
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        apply_member(ps, rep, r->element[i], r->element[i + 1]);
    freeReplyObject(r);
    return 0;
}

/*
 * The shape of a stream entry's field list (format_xadd's): one field d of
 * instance, time, replica name and 1..CHAIN_MAX_LINKS whole links. NULL if
 * it is sound, else what is wrong; *d, *len set.
 */
static const char *record_check(const redisReply *fields, const unsigned char **d, size_t *len)
{
    if (fields->type != REDIS_REPLY_ARRAY || fields->elements != 2 ||
        fields->element[0]->type != REDIS_REPLY_STRING ||
        fields->element[1]->type != REDIS_REPLY_STRING)
        return "an entry is not one field";
    *d = (const unsigned char *)fields->element[1]->str;
    *len = fields->element[1]->len;
    if (*len < 17 || *len < 17 + (size_t)(*d)[16] || (*len - 17 - (*d)[16]) % LINK_BYTES != 0)
        return "an entry's length is not that of a record";
    size_t n = (*len - 17 - (*d)[16]) / LINK_BYTES;
    if (n == 0 || n > CHAIN_MAX_LINKS)
        return "a record has no link, or more than a chain has";
    return NULL;
}

/* Apply one stream entry (its field list) made by another instance. */
static void apply_entry(struct psync *ps, const redisReply *fields)
{
    const unsigned char *d;
    size_t len;
    const char *bad = record_check(fields, &d, &len);
    if (bad != NULL) {
        reject(ps, bad);
        return;
    }
    if (memcmp(d, ps->instance, 8) == 0)
        return; /* our own: already in the index */
    size_t i = replica_named(ps, (const char *)d + 17, d[16]);
    if (i == SIZE_MAX)
        return; /* a replica this instance does not route to */
    uint64_t ms = get_be(d + 8, 8);
    if (!time_ok(ms)) {
        reject(ps, "a record's time is not now or before");
        return;
    }
    const unsigned char *links = d + 17 + d[16];
    size_t n = (len - 17 - d[16]) / LINK_BYTES;
    uint64_t *h = pc_malloc(n * sizeof(*h));
    uint32_t *tok = pc_malloc(n * sizeof(*tok));
    for (size_t k = 0; k < n; k++) {
        h[k] = get_be(links + LINK_BYTES * k, 8);
        tok[k] = (uint32_t)get_be(links + LINK_BYTES * k + 8, 4);
    }
    int rc = pindex_apply(ps->index, i, h, tok, n, 0, (int64_t)ms);
    free(h);
    free(tok);
    if (rc < 0)
        reject(ps, "a record's links weigh more tokens than links or the replica can");
    else
        stats_incr(&ps->stats, STAT_prefix_sync_applied);
}

/* The follower's handler: an entry of the stream. */
static void on_entry(void *arg, const redisReply *fields)
{
    struct psync *ps = arg;
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    apply_entry(ps, fields);
}

/* The follower starts at the stream's end: catch up from the sets. */
static int on_start(void *arg, struct rcli *k)
{
    struct psync *ps = arg;
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    for (size_t rep = 0; rep < route_count(ps->route); rep++)
        if (restore_replica(ps, k, rep) < 0)
            return -1;
    return 0;
}

int psync_follow(struct psync *ps, struct follow *f)
{
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    struct follow_handler h = {
        .name = "prefix index",
        .stream = PSYNC_STREAM,
        .start = on_start,
        .entry = on_entry,
        .arg = ps,
    };
    return follow_add(f, &h);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

/*
 * A replica's name as records carry it: the name, or for one longer than
 * WIRE_NAME_MAX bytes "sha256:" and the hex SHA-256 of all of it (cut to
 * its first 255 bytes, two names alike that far were one replica to every
 * reader, and a name of exactly that prefix took both's records). No name
 * starts with "sha256:" (a name opens with a host).
 */
static char *wire_name(const char *name)
{
    if (strlen(name) <= WIRE_NAME_MAX)
        return pc_strdup(name);
    unsigned char d[PC_SHA256_LEN];
    pc_sha256(name, strlen(name), d);
    char *w = pc_malloc(sizeof("sha256:") + 2 * PC_SHA256_LEN);
    memcpy(w, "sha256:", 7);
    pc_hex(d, sizeof(d), w + 7);
    return w;
}

struct psync *psync_create(const struct conf *c, struct route *route, char *err, size_t errlen)
{
    struct psync *ps = pc_calloc(1, sizeof(*ps));
    ps->magic = PSYNC_MAGIC;
    ps->route = route;
    ps->index = route_pindex(route);
    if (rurl_parse(c->redis, 0, &ps->url, err, errlen) < 0) {
        psync_destroy(&ps);
        return NULL;
    }
    ps->where = rurl_format(&ps->url, false);
    ps->redis = pc_strdup(c->redis);
    if (getrandom(ps->instance, sizeof(ps->instance), 0) != (ssize_t)sizeof(ps->instance)) {
        uint64_t x = pc_mono_us() ^ ((uint64_t)pc_wall_ms() << 20) ^ (uint64_t)getpid();
        memcpy(ps->instance, &x, sizeof(x));
    }
    for (size_t i = 0; i < route_count(route); i++)
        ps->wire[i] = wire_name(route_replica(route, i)->name);
    int64_t cap = pindex_capacity(ps->index, 0);
    ps->keep = (size_t)PC_MIN(PC_MAX(2 * cap / MIN_LINK_TOKENS, 1024), KEEP_MAX);
    pthread_mutex_init(&ps->mu, NULL);
    pthread_cond_init(&ps->cond, NULL);
    pthread_cond_init(&ps->queue_cond, NULL);
    stats_register(&ps->stats);
    pindex_set_sink(ps->index, sink, ps);
    return ps;
}

int psync_start(struct psync *ps)
{
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    /* Like the workers, the threads leave the termination signals to the main loop. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(&ps->writer, NULL, writer_main, ps) != 0 ? -1 : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    ps->started = rc == 0;
    return rc;
}

static void stop_threads(struct psync *ps)
{
    pthread_mutex_lock(&ps->mu);
    ps->stopping = true;
    pthread_cond_broadcast(&ps->cond);
    pthread_cond_broadcast(&ps->queue_cond);
    pthread_mutex_unlock(&ps->mu);
    pthread_join(ps->writer, NULL);
    ps->started = false;
}

void psync_destroy(struct psync **pp)
{
    struct psync *ps = *pp;
    if (ps == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(ps, PSYNC_MAGIC);
    if (ps->index != NULL)
        pindex_set_sink(ps->index, NULL, NULL);
    if (ps->started)
        stop_threads(ps);
    while (ps->head != NULL) {
        struct rec *next = ps->head->next;
        rec_free(ps->head);
        ps->head = next;
    }
    if (ps->where != NULL) { /* created past the URL check: the sync objects exist */
        pthread_mutex_destroy(&ps->mu);
        pthread_cond_destroy(&ps->cond);
        pthread_cond_destroy(&ps->queue_cond);
    }
    for (size_t i = 0; i < PINDEX_MAX_REPLICAS; i++)
        free(ps->wire[i]);
    rurl_free(&ps->url);
    if (ps->redis != NULL) /* it may hold a password */
        explicit_bzero(ps->redis, strlen(ps->redis));
    free(ps->redis);
    free(ps->where);
    ps->magic = 0;
    free(ps);
}
