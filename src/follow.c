/*
 * follow.c - the process's one reader of Redis Streams (see pc_follow.h for
 * the picture). Owns its thread, its connections (one struct rcli per group
 * of streams read by one XREAD: every stream on a single server, one stream
 * per group in a cluster), each stream's position, the handlers' table and a
 * metrics row (stream_*). The handlers' state is theirs.
 *
 * A round: every group without an XREAD outstanding sends one (appended to
 * its blocking hiredis context and written out), then the thread polls every
 * group's socket and its wake-up eventfd for at most block_ms + timeout_ms;
 * a reply is read without blocking (redisBufferRead, then the reader), its
 * entries handed out. A reply not whole within that time of its XREAD (plus
 * 1 ms per REDISEV_BYTES_PER_MS bytes it brought, as every blocking reply) is
 * a dead server: a frozen Redis answers nothing, not even the end of a BLOCK,
 * and one that sends a byte at a time must not hold the follower for good.
 */
#include "pc_follow.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_redisev.h"
#include "pc_stats.h"
#include "pc_util.h"
#include "pc_vsync.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define FOLLOW_MAGIC       0x464f4c57u /* "FOLW" */
#define BACKOFF_MIN_MS     100
#define BACKOFF_MAX_MS     5000
#define FOREIGN_RECHECK_MS 10000 /* how often a key of another type is looked at again */
#define GONE_CHECK_MS      1000  /* how often the streams are checked for a deletion */
#define UNREAD_CHECK_MAX   64    /* entries not read yet that a check counts (XRANGE) */
#define STREAM_ID_MAX      48
#define XREAD_ARGC_MAX     (6 + 2 * FOLLOW_STREAMS_MAX)
/* An XREAD reply's bytes: COUNT (500) entries of records of a few KiB, with room to spare. */
#define XREAD_REPLY_MAX (64u << 20)

struct fstream {
    char *key;
    char last_id[STREAM_ID_MAX]; /* the last entry read, or the end noted at start */
    size_t group;
    uint64_t base_added; /* the stream's entries-added when last_id was noted at its end */
    uint64_t nread;      /* entries read since */
    bool no_added;       /* Redis before 7: no entries-added, so the head's id is compared */
    bool existed;        /* the key was a stream when noted: its deletion alone tells a flush */
    /*
     * The key holds another type (WRONGTYPE): left out of the XREAD, its handlers down, the
     * other streams followed; looked at again every FOREIGN_RECHECK_MS. Such a key is never a
     * stream again by itself (XADD fails on it too) until someone deletes it.
     */
    bool foreign;
};

struct fgroup {
    struct rcli k; /* quiet; k.rc routed to the group's streams before each XREAD */
    bool open;
    bool waiting;     /* an XREAD is outstanding on k.rc */
    uint64_t sent_ms; /* when it was sent (pc_mono_ms) */
    size_t got;       /* bytes of its reply read so far */
    size_t streams[FOLLOW_STREAMS_MAX];
    size_t n;
};

struct follow {
    unsigned magic;
    char *url;
    int64_t timeout_ms;
    int block_ms;
    size_t count;
    bool cluster;
    struct follow_handler h[FOLLOW_HANDLERS_MAX];
    size_t nh;
    struct fstream s[FOLLOW_STREAMS_MAX];
    size_t ns;
    struct fgroup g[FOLLOW_STREAMS_MAX];
    size_t ng;
    struct stats *row; /* stream_*: written by the thread only */
    bool own_row;      /* made and registered here (freed after the registry is emptied) */

    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* with cond: the backoff's nap; fds[] for follow_destroy */
    pthread_cond_t cond;
    bool stop;                   /* under mu */
    int fds[FOLLOW_STREAMS_MAX]; /* under mu: the groups' sockets (-1: none) */
    atomic_bool stopping;
    int wake; /* eventfd: written by follow_destroy, polled with the sockets */
    atomic_bool live;
    bool down_logged;
    uint64_t recheck_ms; /* when the foreign streams are looked at again */
    uint64_t gone_ms;    /* when the streams are checked for a deletion again */
    char why[640];       /* the last failure, for the log: what, then rcli's errmsg (512) */
};

/* --- set-up ------------------------------------------------------------------------------ */

struct follow *follow_create(const struct follow_opts *o)
{
    char err[192];
    struct rurl u;
    if (rurl_parse(o->url, 0, &u, err, sizeof(err)) < 0) {
        log_error("follow: invalid redis URL: %s", err);
        return NULL;
    }
    bool cluster = u.kind == RURL_CLUSTER;
    rurl_free(&u);
    struct follow *f = pc_calloc(1, sizeof(*f));
    f->magic = FOLLOW_MAGIC;
    f->url = pc_strdup(o->url);
    /* XREAD BLOCK waits block_ms for nothing: every reply wait leaves room for it. */
    f->timeout_ms = PC_MAX(o->timeout_ms, (int64_t)1000);
    f->block_ms = o->block_ms > 0 ? o->block_ms : 1000;
    f->count = o->count > 0 ? o->count : 500;
    f->cluster = cluster;
    f->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (size_t i = 0; i < FOLLOW_STREAMS_MAX; i++)
        f->fds[i] = -1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
    /* Its own metrics row, registered like the workers' before they start (see server.c). */
    f->row = o->row;
    if (f->row == NULL) {
        f->row = aligned_alloc(64, sizeof(*f->row));
        if (f->row == NULL)
            abort();
        memset(f->row, 0, sizeof(*f->row));
        stats_register(f->row);
        f->own_row = true;
    }
    return f;
}

/* The index of stream key, added (with its group) if new; SIZE_MAX when full. */
static size_t stream_index(struct follow *f, const char *key)
{
    for (size_t i = 0; i < f->ns; i++)
        if (strcmp(f->s[i].key, key) == 0)
            return i;
    if (f->ns == FOLLOW_STREAMS_MAX)
        return SIZE_MAX;
    struct fstream *s = &f->s[f->ns];
    s->key = pc_strdup(key);
    snprintf(s->last_id, sizeof(s->last_id), "0-0");
    /* One XREAD for every stream of one server; in a cluster each stream's slot is its own. */
    s->group = f->cluster || f->ng == 0 ? f->ng++ : 0;
    struct fgroup *g = &f->g[s->group];
    g->streams[g->n++] = f->ns;
    return f->ns++;
}

int follow_add(struct follow *f, const struct follow_handler *h)
{
    PC_CHECK_OBJ(f, FOLLOW_MAGIC);
    if (f->started || f->nh == FOLLOW_HANDLERS_MAX || stream_index(f, h->stream) == SIZE_MAX) {
        log_error("follow: cannot add the %s's handler (%zu handlers at most, %d streams)", h->name,
                  (size_t)FOLLOW_HANDLERS_MAX, FOLLOW_STREAMS_MAX);
        return -1;
    }
    f->h[f->nh++] = *h;
    return 0;
}

/* --- connections ---------------------------------------------------------------------------- */

static bool stopping(struct follow *f)
{
    return atomic_load(&f->stopping);
}

/* Sleep ms, or less if follow_destroy is called meanwhile. */
static void nap(struct follow *f, int64_t ms)
{
    struct timespec ts = pc_mono_after(ms);
    pthread_mutex_lock(&f->mu);
    while (!f->stop && pthread_cond_timedwait(&f->cond, &f->mu, &ts) == 0) {
    }
    pthread_mutex_unlock(&f->mu);
}

/* A failure: counted, its reason kept for the log line of the outage. */
static void trouble(struct follow *f, const char *what, const struct rcli *k)
{
    stats_incr(f->row, STAT_stream_errors);
    snprintf(f->why, sizeof(f->why), "%.100s: %s", what,
             k != NULL && k->errmsg[0] ? k->errmsg : "error");
}

/* The group's socket (-1: none) for follow_destroy to shut down; false when stopping. */
static bool group_fd(struct follow *f, size_t i, int fd)
{
    pthread_mutex_lock(&f->mu);
    f->fds[i] = fd;
    bool stop = f->stop;
    pthread_mutex_unlock(&f->mu);
    return !stop;
}

static void close_all(struct follow *f)
{
    for (size_t i = 0; i < f->ng; i++) {
        group_fd(f, i, -1);
        if (f->g[i].open)
            rcli_close(&f->g[i].k);
        f->g[i].open = false;
        f->g[i].waiting = false;
    }
}

/* Point the group's connection at its streams' node (cluster: their one slot). */
static int group_route(struct follow *f, size_t i)
{
    struct fgroup *g = &f->g[i];
    const char *key = f->s[g->streams[0]].key;
    if (rcli_route(&g->k, key, strlen(key)) < 0 || !group_fd(f, i, g->k.rc->fd))
        return -1;
    return 0;
}

static int connect_all(struct follow *f)
{
    for (size_t i = 0; i < f->ng; i++) {
        struct fgroup *g = &f->g[i];
        g->k.quiet = true;
        g->k.errmsg[0] = '\0';
        g->open = true; /* rcli_close is needed even after a failed open */
        if (rcli_open(&g->k, f->url, f->timeout_ms, "follow") < 0 || group_route(f, i) < 0) {
            trouble(f, "cannot connect to Redis", &g->k);
            return -1;
        }
    }
    return 0;
}

/* A stream entry's id ("ms-seq", decimal) into out; -1 if it is not one. */
static int entry_id(const redisReply *id, char out[STREAM_ID_MAX])
{
    uint64_t ms, seq;
    if (id->type != REDIS_REPLY_STRING || id->len >= STREAM_ID_MAX ||
        vsync_parse_stream_id(id->str, id->len, &ms, &seq) < 0)
        return -1;
    memcpy(out, id->str, id->len);
    out[id->len] = '\0';
    return 0;
}

/* The id of the first entry of an XRANGE / XREVRANGE reply into out ("" if none); -1 if bad. */
static int first_id(const redisReply *r, char out[STREAM_ID_MAX])
{
    out[0] = '\0';
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    if (r->elements == 0)
        return 0;
    const redisReply *e = r->element[0];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1)
        return -1;
    return entry_id(e->element[0], out);
}

/* XRANGE / XREVRANGE key from to COUNT 1 on the stream's group: its id, "" if empty. */
static int stream_edge(struct follow *f, size_t si, const char *cmd, const char *from,
                       const char *to, char out[STREAM_ID_MAX])
{
    struct fgroup *g = &f->g[f->s[si].group];
    const char *argv[] = {cmd, f->s[si].key, from, to, "COUNT", "1"};
    redisReply *r = rcli_call(&g->k, 6, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    int rc = r->type == REDIS_REPLY_ERROR ? -1 : first_id(r, out);
    if (rc < 0) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: %s: %.200s", g->k.where, cmd,
                 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        trouble(f, "cannot read a stream's position", &g->k);
    }
    freeReplyObject(r);
    return rc;
}

/* The value of field name in an XINFO STREAM reply (a flat name/value array), or NULL. */
static const redisReply *xinfo_field(const redisReply *r, const char *name)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (rcli_str_is(r->element[i], name))
            return r->element[i + 1];
    return NULL;
}

struct stream_state {
    char last_id[STREAM_ID_MAX]; /* last-generated-id: "0-0" when there is no stream */
    uint64_t added, length;      /* entries-added (Redis 7), length */
    bool has_added;
    bool exists; /* the key is there (else "no such key": all else as for an empty stream) */
};

/* XINFO STREAM of stream si into st; 0, -1 (counted), or -2: the key is of another type. */
static int stream_state(struct follow *f, size_t si, struct stream_state *st)
{
    struct fgroup *g = &f->g[f->s[si].group];
    const char *argv[] = {"XINFO", "STREAM", f->s[si].key};
    memset(st, 0, sizeof(*st));
    snprintf(st->last_id, sizeof(st->last_id), "0-0");
    redisReply *r = rcli_call(&g->k, 3, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "no such key") != NULL) {
        st->has_added = true; /* nothing was ever added, as far as anyone can tell */
        rc = 0;
    } else if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
        freeReplyObject(r);
        return -2; /* the key is not a stream: the caller sets that stream aside */
    } else if (r->type == REDIS_REPLY_ARRAY) {
        st->exists = true;
        const redisReply *id = xinfo_field(r, "last-generated-id");
        const redisReply *added = xinfo_field(r, "entries-added");
        const redisReply *len = xinfo_field(r, "length");
        if (id != NULL && entry_id(id, st->last_id) == 0 && len != NULL &&
            len->type == REDIS_REPLY_INTEGER && len->integer >= 0) {
            st->length = (uint64_t)len->integer;
            st->has_added = added != NULL && added->type == REDIS_REPLY_INTEGER &&
                            added->integer >= len->integer;
            st->added = st->has_added ? (uint64_t)added->integer : 0;
            rc = 0;
        }
    }
    if (rc < 0) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: XINFO STREAM %s: %.200s", g->k.where,
                 f->s[si].key, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        trouble(f, "cannot read a stream's position", &g->k);
    }
    freeReplyObject(r);
    return rc;
}

/*
 * Whether pc:schema is this build's: 1, 0 (not, or not a version), -1 (connection lost,
 * counted). A Redis that is not (yet) ours gets no key from the follower.
 */
static int schema_current(struct follow *f, struct fgroup *g)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    redisReply *r = rcli_call(&g->k, 2, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    long v;
    char err[128];
    int rc = r->type != REDIS_REPLY_ERROR && migrate_parse_version(r, &v, err, sizeof(err)) == 0 &&
             v == migrate_latest();
    freeReplyObject(r);
    return rc;
}

/* One XGROUP command on stream si; -1 only when the connection is lost (counted). */
static int xgroup(struct follow *f, size_t si, const char *const *args, int argc)
{
    struct fgroup *g = &f->g[f->s[si].group];
    const char *argv[7] = {"XGROUP"};
    for (int i = 0; i < argc && i < 6; i++)
        argv[i + 1] = i == 1 ? f->s[si].key : args[i];
    redisReply *r = rcli_call(&g->k, argc + 1, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR)
        log_info("follow: XGROUP %s %s: %.200s", args[0], f->s[si].key, r->str);
    freeReplyObject(r);
    return 0;
}

/*
 * Give stream si, which counts no entry (entries-added 0, Redis 7), one: an entry of id 0-1
 * that its own XADD trims (MINID 0-2), so nothing is left to read, made or not. A follower
 * that noted a stream counting nothing could not tell it from one made again after
 * FLUSHALL by the next store: the new one's entries-added was never below what it counted,
 * its entries were read as the old one's, and an L1 filled by reads kept answers Redis had
 * dropped. 0 (marked, or another wrote first: it counts that), 1 if this Redis refuses
 * (MINID came in 6.2), -1 (counted) if the connection is lost.
 */
static int stream_mark(struct follow *f, size_t si)
{
    struct fgroup *g = &f->g[f->s[si].group];
    const char *argv[] = {"XADD", f->s[si].key, "MINID", "0-2", "0-1", "pc-follow", "counted"};
    redisReply *r = rcli_call(&g->k, 7, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    int rc = r->type == REDIS_REPLY_ERROR && strstr(r->str, "equal or smaller") == NULL;
    if (rc == 1)
        log_info("follow: XADD MINID %s: %.200s", f->s[si].key, r->str);
    freeReplyObject(r);
    return rc;
}

/*
 * Stream si is not there and the schema is this build's: make it, counting one entry and
 * holding none (stream_mark), or before Redis 6.2 empty (a consumer group's MKSTREAM, the
 * group dropped at once: no entry that another reader would count as trimmed). A follower
 * that noted a stream that was never written tells its deletion (FLUSHALL) only by its
 * absence: without the key, an L1 filled by reads kept answers Redis had dropped.
 * 1 if made (or there now), 0 if not, -1 (counted) if the connection is lost.
 */
static int stream_make(struct follow *f, size_t si)
{
    int rc = schema_current(f, &f->g[f->s[si].group]);
    if (rc <= 0)
        return rc;
    rc = stream_mark(f, si);
    if (rc <= 0)
        return rc < 0 ? -1 : 1;
    static const char *const create[] = {"CREATE", "", "pc-follow-mkstream", "$", "MKSTREAM"};
    static const char *const destroy[] = {"DESTROY", "", "pc-follow-mkstream"};
    if (xgroup(f, si, create, 5) < 0 || xgroup(f, si, destroy, 3) < 0)
        return -1;
    return 1;
}

/* Note stream si's end: following starts there. 0, -1, or -2: the key is of another type. */
static int stream_note(struct follow *f, size_t si)
{
    struct stream_state st;
    int rc = stream_state(f, si, &st);
    if (rc == 0 && !st.exists) {
        rc = stream_make(f, si);
        if (rc < 0)
            return rc;
        rc = rc > 0 ? stream_state(f, si, &st) : 0;
    } else if (rc == 0 && st.has_added && st.added == 0) {
        /* there, never written (made empty by MKSTREAM): it must count an entry too */
        rc = stream_mark(f, si) < 0 ? -1 : stream_state(f, si, &st);
    }
    if (rc < 0)
        return rc;
    struct fstream *s = &f->s[si];
    s->existed = st.exists;
    memcpy(s->last_id, st.last_id, sizeof(s->last_id));
    s->base_added = st.added;
    s->nread = 0;
    if (!st.has_added && !s->no_added)
        log_warn("follow: this Redis does not report entries-added (Redis 7 does): entries of %s "
                 "trimmed unread are told by the stream's head only",
                 s->key);
    s->no_added = !st.has_added;
    return 0;
}

/* The handlers of stream si start following it (from its noted position). */
static int start_stream(struct follow *f, size_t si)
{
    struct fgroup *g = &f->g[f->s[si].group];
    for (size_t i = 0; i < f->nh; i++) {
        if (strcmp(f->h[i].stream, f->s[si].key) != 0)
            continue;
        if (f->h[i].start(f->h[i].arg, &g->k) < 0) {
            trouble(f, "a catch-up read failed", &g->k);
            return -1;
        }
    }
    stats_incr(f->row, STAT_stream_restarts);
    return 0;
}

static void down_stream(struct follow *f, size_t si)
{
    for (size_t i = 0; i < f->nh; i++)
        if (f->h[i].down != NULL && strcmp(f->h[i].stream, f->s[si].key) == 0)
            f->h[i].down(f->h[i].arg);
}

/* Stream si's key holds another type: its handlers down, the others followed; logged once. */
static void set_aside(struct follow *f, size_t si)
{
    struct fstream *s = &f->s[si];
    if (!s->foreign)
        log_warn("follow: %s is a key of another type, not a stream: what it carries is not "
                 "followed (the other streams are) until the key is deleted",
                 s->key);
    s->foreign = true;
    stats_incr(f->row, STAT_stream_errors);
    down_stream(f, si);
}

/* Note where each stream ends, then let the handlers catch up. */
static int start_all(struct follow *f)
{
    size_t followed = 0;
    for (size_t si = 0; si < f->ns; si++) {
        int rc = stream_note(f, si);
        if (rc == -2) {
            set_aside(f, si);
            continue;
        }
        if (rc < 0)
            return -1;
        if (f->s[si].foreign)
            log_info("follow: %s is a stream again: followed", f->s[si].key);
        f->s[si].foreign = false;
        followed++;
    }
    if (followed == 0) {
        snprintf(f->why, sizeof(f->why), "no stream key is a stream (keys of another type)");
        return -1;
    }
    f->recheck_ms = pc_mono_ms() + FOREIGN_RECHECK_MS;
    for (size_t si = 0; si < f->ns; si++)
        if (!f->s[si].foreign && start_stream(f, si) < 0)
            return -1;
    for (size_t i = 0; i < f->ng; i++)
        if (group_route(f, i) < 0) {
            trouble(f, "cannot reach a stream's node", &f->g[i].k);
            return -1;
        }
    return 0;
}

/* Not following: every handler down, the connections closed; logged once per outage. */
static void go_down(struct follow *f)
{
    if (atomic_exchange(&f->live, false))
        stats_add(f->row, STAT_stream_following, -1);
    for (size_t si = 0; si < f->ns; si++)
        down_stream(f, si);
    close_all(f);
    if (!f->down_logged && !stopping(f)) /* a read cut by follow_destroy is no outage */
        /* Info: the store reports an outage once per process (one warning, one notice). */
        log_info("follow: cannot follow the Redis streams: %s; retrying with backoff (the L1 is "
                 "off meanwhile)",
                 f->why[0] ? f->why : "error");
    f->down_logged = true;
}

/* --- a round ------------------------------------------------------------------------------- */

/* Send the group's XREAD (COUNT, BLOCK, its streams from their positions). */
static int send_xread(struct follow *f, size_t gi)
{
    struct fgroup *g = &f->g[gi];
    char count_s[24], block_s[24];
    snprintf(count_s, sizeof(count_s), "%zu", f->count);
    snprintf(block_s, sizeof(block_s), "%d", f->block_ms);
    const char *argv[XREAD_ARGC_MAX] = {"XREAD", "COUNT", count_s, "BLOCK", block_s, "STREAMS"};
    int argc = 6;
    for (size_t j = 0; j < g->n; j++)
        if (!f->s[g->streams[j]].foreign)
            argv[argc++] = f->s[g->streams[j]].key;
    for (size_t j = 0; j < g->n; j++)
        if (!f->s[g->streams[j]].foreign)
            argv[argc++] = f->s[g->streams[j]].last_id;
    int done = 0;
    if (redisAppendCommandArgv(g->k.rc, argc, argv, NULL) != REDIS_OK)
        done = -1;
    while (done == 0)
        if (redisBufferWrite(g->k.rc, &done) != REDIS_OK)
            done = -1;
    if (done < 0) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: XREAD: %s", g->k.where,
                 g->k.rc->errstr[0] ? g->k.rc->errstr : "cannot send");
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    g->waiting = true;
    g->sent_ms = pc_mono_ms();
    g->got = 0;
    return 0;
}

/*
 * Whether entries of stream si not read yet were trimmed away: the stream
 * keeps entries number added-length+1 .. added (counting every entry ever
 * added), and this follower has read up to number base_added + nread. Only
 * a full batch can come after such a loss (a trim keeps more entries than a
 * batch), so only then is this asked. Before Redis 7: whether the head is
 * past what was read. 1 lost, 0 not, -1 failed.
 */
static int entries_lost(struct follow *f, size_t si)
{
    struct fstream *s = &f->s[si];
    if (s->no_added) {
        char first[STREAM_ID_MAX];
        if (stream_edge(f, si, "XRANGE", "-", "+", first) < 0)
            return -1;
        uint64_t fm = 0, fs = 0, lm = 0, ls = 0;
        vsync_parse_stream_id(first, strlen(first), &fm, &fs);
        vsync_parse_stream_id(s->last_id, strlen(s->last_id), &lm, &ls);
        return first[0] != '\0' && (fm > lm || (fm == lm && fs > ls));
    }
    struct stream_state st;
    if (stream_state(f, si, &st) < 0)
        return -1;
    return st.added - PC_MIN(st.length, st.added) > s->base_added + s->nread;
}

/* Stream si's readers start again at its end (what they hold from before is dropped). */
static int restart_stream(struct follow *f, size_t si)
{
    down_stream(f, si);
    if (stream_note(f, si) < 0 || start_stream(f, si) < 0)
        return -1;
    return group_route(f, f->s[si].group);
}

/* After a full batch: if entries were lost, the stream's readers start again at its end. */
static int check_lost(struct follow *f, size_t si)
{
    int lost = entries_lost(f, si);
    if (lost == 0)
        return group_route(f, f->s[si].group);
    if (lost < 0)
        return -1;
    log_warn("follow: entries of %s were trimmed before this instance read them; its readers "
             "start again at its end",
             f->s[si].key);
    return restart_stream(f, si);
}

/*
 * How many entries stream si holds after the follower's position, up to its last-generated-id
 * at (entries added since have larger ids), at most max; -1 (counted) if the read failed.
 */
static long entries_after(struct follow *f, size_t si, const char *at, uint64_t max)
{
    struct fgroup *g = &f->g[f->s[si].group];
    char from[STREAM_ID_MAX + 1], count[24];
    snprintf(from, sizeof(from), "(%s", f->s[si].last_id);
    snprintf(count, sizeof(count), "%llu", (unsigned long long)max);
    const char *argv[] = {"XRANGE", f->s[si].key, from, at, "COUNT", count};
    redisReply *r = rcli_call(&g->k, 6, argv, NULL);
    if (r == NULL) {
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    long n = r->type == REDIS_REPLY_ARRAY ? (long)r->elements : -1;
    if (n < 0) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: XRANGE %s: %.200s", g->k.where,
                 f->s[si].key, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        trouble(f, "cannot read a stream's position", &g->k);
    }
    freeReplyObject(r);
    return n;
}

/*
 * Stream si counts no entry, nor did it when noted (it was not there and not made: the
 * schema was not this build's yet; or another made it empty): give it its one entry now
 * (stream_mark), and count it if the stream holds nothing else (made, and marked by this
 * follower or another, and nothing added since). st is read again. 0, -1 (counted), or -2:
 * the key is now of another type.
 */
static int stream_adopt(struct follow *f, size_t si, struct stream_state *st)
{
    struct fstream *s = &f->s[si];
    if (s->no_added || !st->has_added || st->added != 0 || s->base_added + s->nread != 0)
        return 0;
    int rc = st->exists ? stream_mark(f, si) : stream_make(f, si);
    if (rc < 0 || (rc = stream_state(f, si, st)) < 0)
        return rc;
    if (st->exists && st->has_added && st->added == 1 && st->length == 0 &&
        strcmp(st->last_id, "0-1") == 0) {
        s->existed = true;
        s->base_added = 1;
        snprintf(s->last_id, sizeof(s->last_id), "0-1");
    }
    return 0;
}

/*
 * Whether stream si was deleted since it was noted (by FLUSHALL, FLUSHDB or
 * DEL, then maybe made again by the next XADD): its entries-added is below
 * what this follower counted, or, before Redis 7, its last id went back.
 * XREAD from a position reads a new stream's entries as if nothing had
 * happened, and a deleted one's never: without this, an L1 kept serving the
 * answers of a Redis an operator had flushed. 1, 0, -1, or -2: the key is
 * now of another type; 2 (Redis 7): entries not read yet were trimmed, which
 * the check after a full batch misses when fewer than a batch follow (an
 * operator's XTRIM to a few entries while this instance was paused).
 *
 * Redis 7 counts exactly: the stream it noted had base_added entries, the
 * follower read nread since, so the same stream holds at most entries-added -
 * base_added - nread entries after the follower's position (fewer if some
 * were trimmed). One made again counts only its own entries: the follower
 * read some of them as if they were the old one's, and it holds more after
 * the position than that, by the base_added + (entries read before the
 * flush) it does not count; so noted streams count at least one entry
 * (stream_mark). Comparing entries-added alone told it only once the
 * follower had read every new entry: while stores came faster, never.
 */
static int stream_replaced(struct follow *f, size_t si)
{
    struct fstream *s = &f->s[si];
    struct stream_state st;
    int rc = stream_state(f, si, &st);
    if (rc < 0)
        return rc;
    if (s->existed && !st.exists)
        return 1;
    rc = stream_adopt(f, si, &st);
    if (rc < 0)
        return rc;
    if (!s->no_added && st.has_added) {
        uint64_t counted = s->base_added + s->nread;
        if (st.added < counted)
            return 1;
        uint64_t unread = st.added - counted;
        if (unread > 0 && unread <= UNREAD_CHECK_MAX && strcmp(st.last_id, s->last_id) != 0) {
            long n = entries_after(f, si, st.last_id, unread + 1);
            if (n < 0)
                return -1;
            if ((uint64_t)n > unread)
                return 1;
        }
        return st.added - PC_MIN(st.length, st.added) > counted ? 2 : 0;
    }
    uint64_t nm = 0, ns = 0, lm = 0, ls = 0;
    vsync_parse_stream_id(st.last_id, strlen(st.last_id), &nm, &ns);
    vsync_parse_stream_id(s->last_id, strlen(s->last_id), &lm, &ls);
    return nm < lm || (nm == lm && ns < ls);
}

/* Check the streams of idle group gi for a deletion or a trim of entries not read yet; such a
 * stream is followed anew. */
static int check_gone(struct follow *f, size_t gi)
{
    struct fgroup *g = &f->g[gi];
    for (size_t j = 0; j < g->n; j++) {
        size_t si = g->streams[j];
        if (f->s[si].foreign)
            continue;
        int rc = stream_replaced(f, si);
        if (rc == -2) {
            set_aside(f, si);
            continue;
        }
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        if (rc == 2) {
            log_warn("follow: entries of %s were trimmed before this instance read them; its "
                     "readers start again at its end",
                     f->s[si].key);
        } else {
            log_warn("follow: %s was deleted (FLUSHALL, FLUSHDB?) after this instance read it; "
                     "its readers start again at its end (what they held from before is "
                     "dropped)",
                     f->s[si].key);
            stats_incr(f->row, STAT_stream_errors);
        }
        if (restart_stream(f, si) < 0)
            return -1;
    }
    return group_route(f, gi);
}

/*
 * The entries of one stream of an XREAD reply ([key, [[id, fields]...]]), in
 * order. 0; -1 if the reply is not one (nothing counted yet); -2 if reading
 * the stream's head after a full batch failed (counted).
 */
static int dispatch(struct follow *f, const redisReply *kv)
{
    if (kv->type != REDIS_REPLY_ARRAY || kv->elements != 2 ||
        kv->element[0]->type != REDIS_REPLY_STRING || kv->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    size_t si = 0;
    while (si < f->ns && !rcli_str_is(kv->element[0], f->s[si].key))
        si++;
    if (si == f->ns)
        return -1;
    const redisReply *entries = kv->element[1];
    for (size_t e = 0; e < entries->elements; e++) {
        const redisReply *en = entries->element[e];
        if (en->type != REDIS_REPLY_ARRAY || en->elements != 2 ||
            entry_id(en->element[0], f->s[si].last_id) < 0)
            return -1;
        for (size_t i = 0; i < f->nh; i++)
            if (strcmp(f->h[i].stream, f->s[si].key) == 0)
                f->h[i].entry(f->h[i].arg, en->element[1]);
    }
    f->s[si].nread += entries->elements;
    stats_add(f->row, STAT_stream_entries, (int64_t)entries->elements);
    return entries->elements >= f->count ? check_lost(f, si) : 0;
}

/* One XREAD reply of group gi: nil after BLOCK, or an array of streams. */
static int take_reply(struct follow *f, size_t gi, redisReply *r)
{
    struct fgroup *g = &f->g[gi];
    g->waiting = false;
    stats_incr(f->row, STAT_stream_reads);
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR) {
        /* MOVED among them: connecting anew reads the slot map again */
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: XREAD: %.200s", g->k.where, r->str);
        rc = -1;
    } else if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; rc == 0 && i < r->elements; i++)
            rc = dispatch(f, r->element[i]);
        if (rc == -1)
            snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: unexpected XREAD reply", g->k.where);
    } else if (r->type != REDIS_REPLY_NIL) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: unexpected XREAD reply", g->k.where);
        rc = -1;
    }
    freeReplyObject(r);
    if (rc == -1)
        trouble(f, "cannot follow a stream", &g->k);
    return rc < 0 ? -1 : 0;
}

/* Read what group gi's socket has; 0 (a reply handled, or more to come), or -1. */
static int read_group(struct follow *f, size_t gi)
{
    struct fgroup *g = &f->g[gi];
    void *r = NULL;
    redisev_reader_cap(g->k.rc->reader, XREAD_REPLY_MAX); /* the read below fails then */
    size_t had = g->k.rc->reader->len;
    int read = redisBufferRead(g->k.rc);
    g->got += g->k.rc->reader->len > had ? g->k.rc->reader->len - had : 0;
    if (read != REDIS_OK || redisGetReplyFromReader(g->k.rc, &r) != REDIS_OK) {
        snprintf(g->k.errmsg, sizeof(g->k.errmsg), "%s: XREAD: %s", g->k.where,
                 g->k.rc->errstr[0] ? g->k.rc->errstr : "connection lost");
        trouble(f, "Redis connection lost", &g->k);
        return -1;
    }
    return r == NULL ? 0 : take_reply(f, gi, r);
}

/* Whether group gi has a stream to read (not every one set aside). */
static bool group_reads(const struct follow *f, size_t gi)
{
    for (size_t j = 0; j < f->g[gi].n; j++)
        if (!f->s[f->g[gi].streams[j]].foreign)
            return true;
    return false;
}

/* Whether group gi has a stream set aside. */
static bool group_sets_aside(const struct follow *f, size_t gi)
{
    for (size_t j = 0; j < f->g[gi].n; j++)
        if (f->s[f->g[gi].streams[j]].foreign)
            return true;
    return false;
}

/*
 * Look again at the set-aside streams of group gi (its connection idle): one that is a stream
 * again (the key was deleted) is followed from its end. 0, or -1 (counted).
 */
static int recheck_group(struct follow *f, size_t gi)
{
    struct fgroup *g = &f->g[gi];
    for (size_t j = 0; j < g->n; j++) {
        size_t si = g->streams[j];
        if (!f->s[si].foreign)
            continue;
        int rc = stream_note(f, si);
        if (rc == -2)
            continue;
        if (rc < 0)
            return -1;
        log_info("follow: %s is a stream again: followed", f->s[si].key);
        f->s[si].foreign = false;
        if (start_stream(f, si) < 0 || group_route(f, gi) < 0)
            return -1;
    }
    return 0;
}

/* When group g's outstanding XREAD must have its whole reply (pc_mono_ms). */
static uint64_t reply_due(const struct follow *f, const struct fgroup *g)
{
    return g->sent_ms + (uint64_t)(f->block_ms + f->timeout_ms) + g->got / REDISEV_BYTES_PER_MS;
}

/* The poll's wait: until the first reply is due (block_ms + timeout_ms if none is awaited). */
static int poll_wait_ms(const struct follow *f)
{
    uint64_t now = pc_mono_ms(), wait = (uint64_t)(f->block_ms + f->timeout_ms);
    for (size_t i = 0; i < f->ng; i++) {
        if (!f->g[i].waiting)
            continue;
        uint64_t due = reply_due(f, &f->g[i]);
        wait = PC_MIN(wait, due > now ? due - now : 0);
    }
    return (int)wait;
}

/*
 * After a wait that ended with n ready: -1 with why (counted) if a reply is past due, or the
 * wait failed or ran out with none awaited (as ever), else 0.
 */
static int overdue(struct follow *f, int n)
{
    uint64_t now = pc_mono_ms();
    bool awaited = false;
    for (size_t i = 0; i < f->ng; i++) {
        const struct fgroup *g = &f->g[i];
        awaited = awaited || g->waiting;
        if (!g->waiting || now < reply_due(f, g))
            continue;
        snprintf(
            f->why, sizeof(f->why), "no %sreply from Redis within %lld ms of an XREAD BLOCK %d",
            g->got > 0 ? "whole " : "", (long long)(reply_due(f, g) - g->sent_ms), f->block_ms);
        stats_incr(f->row, STAT_stream_errors);
        return -1;
    }
    if (n > 0 || (n == 0 && awaited))
        return 0;
    snprintf(f->why, sizeof(f->why), "no reply from Redis within %lld ms of an XREAD BLOCK %d",
             (long long)(f->block_ms + f->timeout_ms), f->block_ms);
    stats_incr(f->row, STAT_stream_errors);
    return -1;
}

/* One wait: 0 go on, -1 failed, 1 stopping. */
static int round_once(struct follow *f)
{
    struct pollfd pf[FOLLOW_STREAMS_MAX + 1];
    bool due = pc_mono_ms() >= f->recheck_ms, missed = false;
    bool gone_due = pc_mono_ms() >= f->gone_ms;
    if (gone_due)
        f->gone_ms = pc_mono_ms() + GONE_CHECK_MS;
    for (size_t i = 0; i < f->ng; i++) {
        struct fgroup *g = &f->g[i];
        if (due && group_sets_aside(f, i)) {
            if (g->waiting) /* a reply half read: next round */
                missed = true;
            else if (recheck_group(f, i) < 0)
                return -1;
        }
        /* A group waiting for its reply is checked at a later round (it is idle at least every
         * block_ms, when its XREAD ends). */
        if (gone_due && group_reads(f, i) && !g->waiting && check_gone(f, i) < 0)
            return -1;
        if (!g->waiting && group_reads(f, i) && send_xread(f, i) < 0)
            return -1;
        /* A group whose every stream is set aside sends nothing: its socket is not polled. */
        pf[i] = (struct pollfd){.fd = g->waiting ? g->k.rc->fd : -1, .events = POLLIN};
    }
    if (due && !missed)
        f->recheck_ms = pc_mono_ms() + FOREIGN_RECHECK_MS;
    pf[f->ng] = (struct pollfd){.fd = f->wake, .events = POLLIN};
    int n = poll(pf, f->ng + 1, poll_wait_ms(f));
    if (stopping(f))
        return 1;
    if (n < 0 && errno == EINTR)
        return 0;
    for (size_t i = 0; n > 0 && i < f->ng; i++)
        if (pf[i].revents != 0 && read_group(f, i) < 0)
            return -1;
    return overdue(f, n);
}

/* --- the thread ------------------------------------------------------------------------------ */

static void *follow_main(void *arg)
{
    struct follow *f = arg;
    int64_t backoff = BACKOFF_MIN_MS;
    while (!stopping(f)) {
        if (connect_all(f) < 0 || start_all(f) < 0) {
            go_down(f);
            nap(f, backoff);
            backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
            continue;
        }
        if (!atomic_exchange(&f->live, true))
            stats_add(f->row, STAT_stream_following, 1);
        if (f->down_logged)
            log_info("follow: following the Redis streams again at %s", f->g[0].k.where);
        f->down_logged = false;
        backoff = BACKOFF_MIN_MS; /* it followed: a new outage starts from the shortest wait */
        int rc;
        while ((rc = round_once(f)) == 0) {
        }
        if (rc > 0)
            break;
        go_down(f);
        nap(f, backoff);
        backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
    }
    if (atomic_exchange(&f->live, false))
        stats_add(f->row, STAT_stream_following, -1);
    close_all(f);
    return NULL;
}

int follow_start(struct follow *f)
{
    PC_CHECK_OBJ(f, FOLLOW_MAGIC);
    if (f->ns == 0)
        return 0; /* nothing to follow */
    /* Like the workers, the thread leaves the termination signals to the main loop. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = f->wake < 0 ? EMFILE : pthread_create(&f->thread, NULL, follow_main, f);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        log_error("follow: cannot start the stream follower: %s (the L1 stays off)", strerror(rc));
        return -1;
    }
    f->started = true;
    return 0;
}

void follow_destroy(struct follow **fp)
{
    struct follow *f = *fp;
    if (f == NULL)
        return;
    *fp = NULL;
    PC_CHECK_OBJ(f, FOLLOW_MAGIC);
    if (f->started) {
        atomic_store(&f->stopping, true);
        pthread_mutex_lock(&f->mu);
        f->stop = true;
        for (size_t i = 0; i < f->ng; i++)
            if (f->fds[i] >= 0) /* out of a blocked read at once, not after block_ms */
                shutdown(f->fds[i], SHUT_RDWR);
        uint64_t one = 1;
        if (write(f->wake, &one, sizeof(one)) < 0) {
            /* the shut sockets end the wait anyway */
        }
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
    }
    for (size_t i = 0; i < f->ns; i++)
        free(f->s[i].key);
    if (f->wake >= 0)
        close(f->wake);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cond);
    if (f->url != NULL) /* it may hold a password */
        explicit_bzero(f->url, strlen(f->url));
    free(f->url);
    if (f->own_row)
        free(f->row); /* the process's registry is emptied right after (server_teardown) */
    f->magic = 0;
    free(f);
}
