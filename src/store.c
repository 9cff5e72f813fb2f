/*
 * store.c - one worker's Redis connection (see pc_store.h). Owns the hiredis
 * async context, the commands in flight (struct store_cmd, one per command,
 * each with its own timer because hiredis 0.14 has no command timeouts), the
 * sentinel ask or name lookup of the attempt in progress, and the connection
 * state machine, driven by one state timer:
 *
 *   store_start
 *       |
 *       v      sentinel://: ask the sentinels (pc_sentinel.h, on this loop)
 *   DISCOVER ----------------------------------------------+ none answered
 *       | the primary's host              a host name:     |
 *       v                                 resolve it anew  |
 *   RESOLVING (off the loop, pc_resolve.h; timer) ---------+ failed / timed out
 *       | an address (redis:// with an address and unix:   |
 *       v    start here)                                   v
 *   CONNECTING ---- refused / connect timeout ------> BACKOFF --+
 *       | connected                                     ^       | 100 ms doubling
 *       v                                               |       | to 5 s (1 s for
 *   HANDSHAKE: AUTH, SELECT, ROLE (sentinel://:         |       v sentinel://), + jitter
 *       |      a primary?), GET pc:schema,         lost |   back to the start:
 *       |      EVAL each pending migration              |   DISCOVER, RESOLVING or
 *       |                                               |   CONNECTING
 *       +-- schema current ---------------> READY ------+
 *       |                                     | stalled (see the watch below), or
 *       |                                     | READONLY (sentinel://: a failover)
 *       |                                     v
 *       |                                 DROPPING: redisAsyncFree deferred to
 *       |                                           the state timer (0 s)
 *       +-- newer, or older and no auto-migrate --> BLOCKED (re-read every 5 s)
 *
 * A READY store looks every second that pc:schema is still there, and puts
 * it back if an operator's FLUSHALL took it (the schema watch, below).
 *
 * So every attempt follows the URL anew: the sentinels are asked where the
 * primary is now, and a host name is resolved again, without blocking the
 * loop (hiredis 0.14 would call a blocking getaddrinfo on it: the store hands
 * hiredis an address only).
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
 *
 * Writes (SET, store_write, store_call_int, deletes) go on a second store of
 * the same kind, s->wr (its owner: s), made when s is READY and pointed at
 * the server s is on: a write Redis holds (CLIENT PAUSE ... WRITE) would hold
 * every GET queued after it on one connection. Its health is not counted
 * (reads still hit without it); until it is READY writes go on s.
 *
 * cluster:// (pc_cluster.h): the store a worker holds has no connection of
 * its own. It routes, and owns one store per primary (a "node": s->parent
 * set), each the state machine above without SELECT nor schema (AUTH, then
 * PING), on the same loop:
 *
 *   store_get(key) ─▶ owner[slot of key] ─▶ that node READY? ── no ──▶ NULL (bypass)
 *                                             │ yes
 *                                             ▼ kept formatted (c->wire), sent there
 *     reply MOVED s A   ─▶ owner[s] = node A, map read again soon, sent again on A
 *           ASK s A     ─▶ ASKING + sent again on A (the map is left as it is)
 *           TRYAGAIN    ─▶ sent again 10, 20, 40... ms later (5 hops at most in all)
 *           CLUSTERDOWN ─▶ STORE_ERR; DOWN until that node serves keys again (a
 *                          keyed answer; the tick asks an idle one), unless c
 *                          was sent before it last did so (old news)
 *
 *   cluster store: DISCOVER (the seeds, or any node: CLUSTER SHARDS, else
 *   CLUSTER SLOTS) ─▶ HANDSHAKE (GET pc:schema and the migrations, on the
 *   node of its slot) ─▶ READY, and BACKOFF as above. The schema is read
 *   again when that node connects anew (the cluster may have restarted
 *   empty).
 *
 * The map is read again after MOVED, and every second while a node owning
 * slots is not usable (a failover names another primary); the tick lets go
 * of nodes the map no longer names. store_delete_matching runs on every
 * primary at once (a SCAN per node; UNLINK one slot at a time, since a
 * cluster refuses keys of two slots in one command). Health is the cluster
 * store's: DOWN while a node owning slots is, or says CLUSTERDOWN, or is back
 * after a loss but has answered no keyed command yet (a whole cluster
 * restarting answers PING before it serves keys), so the process logs one
 * warning and one notice per outage as for one server.
 */
#include "pc_store.h"
#include "pc_cluster.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_redisev.h"
#include "pc_resolve.h"
#include "pc_rurl.h"
#include "pc_sentinel.h"
#include "pc_stats.h"
#include "pc_util.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#define STORE_MAGIC 0x5a0e3c71u
#define CMD_MAGIC   0x5c3d0b17u

#define BACKOFF_MIN_MS      100
#define BACKOFF_MAX_MS      5000
#define BACKOFF_SENTINEL_MS 1000  /* sentinel://: a failover takes seconds; look again soon */
#define RECHECK_MS          5000  /* re-read pc:schema this often while BLOCKED */
#define SCHEMA_WATCH_MS     1000  /* a READY store looks that pc:schema is there this often */
#define READONLY_GAP_MS     10000 /* redis://: READONLY makes it connect again this far apart */
#define LOG_EVERY_MS        60000 /* repeated failures are logged at most this often */
#define CONNECT_MIN_MS      1000  /* connect timeout: max(this, 10 x command timeout) */
#define STEP_TIMEOUT_MULT   20    /* SCAN / UNLINK / EVAL steps get 20 x the timeout */
#define SET_BYTES_PER_MS    65536 /* a SET gets 1 ms more per 64 KiB of value */
#define SCAN_COUNT          "1000"
#define DEGRADED_MIN_MS     1000 /* every command timing out this long (or 20 x the timeout) */
#define REDIRECTS_MAX       5    /* cluster: MOVED / ASK / TRYAGAIN followed for one command */
#define TRYAGAIN_MS         10   /* cluster: first wait after TRYAGAIN, doubled each time */
#define MAP_MIN_GAP_MS      100  /* cluster: slot maps asked at most this often ... */
#define MAP_DEGRADED_MS     1000 /* ... and this often while a node owning slots is not usable */

enum store_state {
    ST_IDLE,       /* created, store_start not called yet */
    ST_DISCOVER,   /* asking the sentinels where the primary is (the ask has its own timers) */
    ST_RESOLVING,  /* the host name is being resolved; state timer = connect timeout */
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
    CMD_PTTL,   /* store_pttl: integer reply */
    CMD_SCAN,   /* store_delete_matching / store_delete_picked, SCAN step */
    CMD_UNLINK, /* store_delete_matching, UNLINK step */
    CMD_PICK,   /* store_delete_picked, EVAL step */
    CMD_INT,    /* store_call_int: integer reply */
    CMD_WRITE,  /* store_write(_cb): any reply but an error is fine */
    CMD_INTERNAL,
    CMD_FANOUT, /* cluster: store_delete_matching over every primary (never sent itself) */
    CMD_WAIT,   /* store_when_ready: no command, the store's READY (never sent) */
};

struct store_cluster;
struct fanout_kid;

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
    bool keyed;         /* on a writes' connection: khash is its (first) key's */
    uint64_t khash;
    struct store *s; /* non-NULL exactly while on the store's list (not done) */
    struct store_cmd *prev, *next;
    struct event *timer;
    union {
        store_get_fn *get;
        store_int_fn *num;
        internal_fn *internal;
    } cb;
    void *arg;
    /* store_delete_matching, store_delete_picked */
    char *pattern;
    char cursor[24];
    long long deleted;
    struct pick_state *pick; /* store_delete_picked: its own copy of the pick */
    bool part_failed;        /* cluster: an UNLINK of another slot of the batch failed */

    /* cluster:// */
    char *wire; /* the command as sent (RESP), kept to send it again elsewhere */
    size_t wire_len;
    unsigned hops;           /* redirections followed */
    int slot;                /* its key's slot; -1: it names no key (never redirected) */
    bool asking;             /* sent on after ASK: every send there goes after ASKING */
    struct event *retry;     /* TRYAGAIN: sends it again later (made on first use) */
    bool parked;             /* waiting for retry: hiredis does not hold it meanwhile */
    struct store *top;       /* CMD_INTERNAL of a cluster store: the reply goes there */
    unsigned gen;            /* ... if it is still in the attempt (top's cl gen) it was sent in */
    struct fanout_kid *kids; /* CMD_FANOUT: one per primary */
    size_t nkids, pending;   /* CMD_FANOUT */
    bool failed;             /* CMD_FANOUT: a primary's part failed */
};

/* What store_delete_picked runs on each batch, and the batch in flight. */
struct pick_state {
    char *script;
    int nargs;
    char **args;
    char *twin_from, *twin_to, *twin2_to;
    store_key_fn *each;
    void *each_arg;     /* the caller's: also when a cluster's fan-out part runs it */
    struct pc_buf keys; /* the batch's keys, each NUL-terminated */
    size_t *offs;       /* where each starts in keys */
    size_t *order;      /* batch positions, grouped by slot on a cluster node */
    size_t nkeys, cap;
    size_t gstart, gend; /* the group of order[] whose EVAL is in flight: one slot */
};

/* A CMD_FANOUT's part on one primary: the callback's argument. */
struct fanout_kid {
    struct store_cmd *parent;
    struct store_cmd *cmd; /* NULL once it completed */
};

struct store {
    unsigned magic;
    struct event_base *base;
    struct stats *st;
    struct rurl url;
    char *where; /* the URL without its secrets, for log lines */
    int64_t timeout_ms;
    size_t reply_max; /* for redisev_attach: a reply larger drops the connection */
    bool auto_migrate;
    struct timeval cmd_tv_plain, step_tv_plain;
    const struct timeval *cmd_tv, *step_tv; /* libevent common timeouts when available */

    /* where the current attempt goes */
    struct sentinel_ask *ask;                /* ST_DISCOVER */
    struct resolve *lookup;                  /* ST_RESOLVING */
    size_t next_sentinel;                    /* the sentinel to ask first */
    size_t answered_by;                      /* the sentinel that named the current target */
    char target_host[RESOLVE_ADDR_MAX + 64]; /* the primary (sentinel://) or the URL's host */
    int target_port;
    char resolved[RESOLVE_ADDR_MAX]; /* what the name last resolved to, for the log */
    char *target_where;              /* how log lines name the server connected to */

    redisAsyncContext *ac;
    enum store_state state;
    struct event *timer;    /* what it does depends on the state, see state_timer_cb */
    struct store_cmd *cmds; /* commands not done yet */
    bool up;                /* READY was reached on the current connection */
    bool answered;          /* the current connection brought a reply */
    int64_t backoff_ms;
    uint64_t last_read_us; /* last reply (or the connect) on the current connection */
    uint64_t ro_drop_us;   /* redis:// or unix:: when a READONLY last made it connect again */
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

    bool schema_watching; /* the schema watch's EXISTS, or its restore, is on its way */
    long migrating;       /* schema version the migration in flight starts from */
    long migrate_failed;  /* version whose migration failed on this connection, or -1 */
    char migrate_err[160];

    struct store *wr;         /* redis://, unix:, sentinel://: the writes' connection, or NULL */
    struct store *owner;      /* the writes' connection of that store; else NULL */
    struct store *parent;     /* a node of that cluster store (cluster://); else NULL */
    bool clusterdown;         /* a node: it said CLUSTERDOWN or came back, no keyed answer since */
    uint64_t serves_again_us; /* a node: when a keyed command last got an answer after that */
    uint64_t keyed_sent_ms;   /* a node: when a keyed command was last sent there (its traffic) */
    struct store_cluster *cl; /* the cluster store of cluster://: its nodes and map; else NULL */
};

/* What a cluster store owns beside its struct store. */
struct store_cluster {
    struct store **nodes; /* one per primary (and seed, until a map is known); NULL: free slot */
    size_t *owned;        /* slots each node owns */
    size_t nnodes;
    uint16_t owner[CLUSTER_SLOTS]; /* index into nodes, or CLUSTER_NO_OWNER */
    bool mapped;                   /* owner[] came from a slot map */
    bool slots_only;               /* CLUSTER SHARDS is unknown there (Redis before 7) */
    bool map_inflight, map_want;
    uint64_t map_sent_ms;
    char map_asked[CLUSTER_HOST_MAX]; /* the host of the node asked for the map */
    char down_why[200];               /* the last CLUSTERDOWN, for the log */
    unsigned gen; /* attempts of the cluster store (conn_start): stale replies are dropped */
    unsigned schema_slot;
    struct event *tick; /* map refreshes, letting go of nodes, the check while degraded */
    uint64_t map_errors_logged_ms;
};

/* --- health, process-wide ----------------------------------------------------- */

/* The stores of the process whose cache does not work (one per worker). */
static struct {
    pthread_mutex_t mu;
    unsigned down;
    uint64_t since_ms; /* when the first of them went down */
} health = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void node_health(struct store *node, bool up, const char *why);

/*
 * s's cache stopped working: the process's first such store logs the one
 * warning. A cluster's node only tells its cluster store, which decides.
 */
static void health_down(struct store *s, const char *why)
{
    if (s->health == HEALTH_DOWN)
        return;
    s->health = HEALTH_DOWN;
    if (s->owner != NULL) /* writes only: reads still hit, the cache works (info lines say it) */
        return;
    if (s->parent != NULL) {
        node_health(s, false, why);
        return;
    }
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
    if (s->parent != NULL)
        node_health(s, true, NULL);
    else if (was_down && s->owner == NULL)
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

/* --- commands ---------------------------------------------------------------- */

static void cmd_timeout_cb(evutil_socket_t fd, short what, void *arg);
static void cmd_reply_cb(redisAsyncContext *ac, void *reply, void *privdata);
static bool cluster_redirect(struct store_cmd *c, const redisReply *r);

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

static void cmd_link(struct store *s, struct store_cmd *c);
static bool cmd_names_key(const struct store_cmd *c);

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
    cmd_link(s, c);
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

static void pick_free(struct pick_state **pp)
{
    struct pick_state *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    free(p->script);
    for (int i = 0; i < p->nargs; i++)
        free(p->args[i]);
    free(p->args);
    free(p->twin_from);
    free(p->twin_to);
    free(p->twin2_to);
    pc_buf_free(&p->keys);
    free(p->offs);
    free(p->order);
    free(p);
}

static void cmd_free(struct store_cmd *c)
{
    cmd_unlink(c);
    event_free(c->timer);
    pick_free(&c->pick);
    if (c->retry != NULL)
        event_free(c->retry);
    free(c->pattern);
    free(c->wire);
    free(c->kids);
    c->magic = 0;
    free(c);
}

/* Link c into s's list of commands not done (it is on none). */
static void cmd_link(struct store *s, struct store_cmd *c)
{
    c->s = s;
    c->prev = NULL;
    c->next = s->cmds;
    if (s->cmds != NULL)
        s->cmds->prev = c;
    s->cmds = c;
}

/* Queue bytes of commands on s's context, counted for the stall watch; -1 if refused. */
static int wire_send(struct store *s, redisCallbackFn *fn, void *priv, const char *cmd, size_t len)
{
    size_t before = sdslen(s->ac->c.obuf);
    if (redisAsyncFormattedCommand(s->ac, fn, priv, cmd, len) != REDIS_OK)
        return -1;
    s->wire_queued += sdslen(s->ac->c.obuf) - before;
    return 0;
}

/*
 * Queue the command on the current context (hiredis writes it on a later loop
 * pass) and arm its timer for timeout_ms from now. -1 if hiredis refused it.
 */
static int cmd_send(struct store_cmd *c, int argc, const char **argv, const size_t *lens,
                    int64_t timeout_ms)
{
    struct store *s = c->s;
    if (s->parent != NULL) { /* a cluster's node: kept, to be sent again where a MOVED says */
        free(c->wire);
        c->wire = NULL;
        int n = redisFormatCommandArgv(&c->wire, argc, argv, lens);
        if (n < 0 || wire_send(s, cmd_reply_cb, c, c->wire, (size_t)n) < 0)
            return -1;
        c->wire_len = (size_t)n;
        int k = cluster_key_index(argc, argv, lens);
        c->slot = k < 0 ? -1 : (int)cluster_slot(argv[k], lens ? lens[k] : strlen(argv[k]));
        if (cmd_names_key(c))
            s->keyed_sent_ms = pc_mono_ms(); /* traffic: the tick leaves the node unprobed */
    } else {
        int k = s->owner != NULL ? cluster_key_index(argc, argv, lens) : -1;
        c->keyed = k >= 0;
        if (c->keyed)
            c->khash = pc_fnv1a(PC_FNV_SEED, argv[k], lens ? lens[k] : strlen(argv[k]));
        size_t before = sdslen(s->ac->c.obuf);
        if (redisAsyncCommandArgv(s->ac, cmd_reply_cb, c, argc, argv, lens) != REDIS_OK)
            return -1;
        s->wire_queued += sdslen(s->ac->c.obuf) - before;
    }
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
    case CMD_PTTL:
        return "PTTL";
    case CMD_SCAN:
        return "SCAN";
    case CMD_UNLINK:
        return "UNLINK";
    case CMD_PICK:
        return "EVAL";
    case CMD_INT:
        return c->what;
    case CMD_WRITE:
        return "write";
    case CMD_INTERNAL:
    case CMD_FANOUT:
    case CMD_WAIT:
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
    case CMD_PICK:
    case CMD_PTTL:
    case CMD_INT:
    case CMD_FANOUT:
    case CMD_WAIT:
        c->cb.num(c->arg, st, n);
        break;
    case CMD_SET:
    case CMD_WRITE:
        if (c->cb.num != NULL)
            c->cb.num(c->arg, st, 0);
        break;
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
    struct cluster_redirect red;
    bool moved = s->parent == NULL && cluster_reply_redirect(r, &red) == CLUSTER_MOVED;
    log_warn("redis: %s failed: %s%s", what,
             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply type",
             moved ? " (a Redis Cluster node: give the redis URL as cluster://)" : "");
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
static bool schema_watched(const struct store *s);
static void schema_watch(struct store *s);

/*
 * s is READY: its store_when_ready waits end, each on its own timer (0 s from now), so that
 * their callbacks run outside the state change.
 */
static void waits_end(struct store *s)
{
    for (struct store_cmd *c = s->cmds; c != NULL; c = c->next)
        if (c->kind == CMD_WAIT) {
            c->timeout_us = 0;
            evtimer_del(c->timer);
            timer_add(s, c->timer, &(struct timeval){0, 0});
        }
}

/* Enter a state: keep the redis_connected gauge right, (re)arm the state timer (< 0: none). */
static void state_enter(struct store *s, enum store_state st, int64_t timer_ms)
{
    if (s->parent != NULL || s->owner != NULL) /* the gauge counts the store a worker holds */
        ;
    else if (s->state == ST_READY && st != ST_READY)
        stats_add(s->st, STAT_redis_connected, -1);
    else if (s->state != ST_READY && st == ST_READY)
        stats_incr(s->st, STAT_redis_connected);
    s->state = st;
    evtimer_del(s->timer);
    if (timer_ms >= 0) {
        struct timeval tv = pc_timeval_ms(timer_ms);
        timer_add(s, s->timer, &tv);
    }
    if (st == ST_READY)
        waits_end(s);
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
    /* sentinel://, and a writes' connection whose store's server answers: soon */
    bool soon = s->url.kind == RURL_SENTINEL || (s->owner != NULL && s->owner->state == ST_READY);
    int64_t max = soon ? BACKOFF_SENTINEL_MS : BACKOFF_MAX_MS;
    s->backoff_ms = PC_MIN(s->backoff_ms * 2, max);
    return delay;
}

/* The attempt ends: the target the sentinel named did not work, so ask the next one first. */
static void target_forget(struct store *s, bool worked)
{
    if (s->url.kind == RURL_SENTINEL && !worked && s->target_host[0] != '\0')
        s->next_sentinel = s->answered_by + 1;
    s->target_host[0] = '\0';
}

/*
 * Let go of the current context (if any) without freeing it - hiredis is
 * freeing it, or the caller does right after - and schedule the next attempt.
 */
static void conn_down(struct store *s, const char *why)
{
    char hinted[320];
    if (s->state == ST_HANDSHAKE && s->ac != NULL && !s->answered) {
        /* a TLS-only port resets a plain-text client without a word, as a proxy may */
        snprintf(hinted, sizeof(hinted), "%s" RURL_TLS_HINT, why);
        why = hinted;
    }
    if (s->ac != NULL) {
        s->ac->data = NULL;
        s->ac = NULL;
    }
    evtimer_del(s->watch);
    bool was_up = s->up;
    if (was_up) {
        log_info("redis: lost connection to %s: %s", s->target_where, why);
        s->failures = 0;
        s->up = false;
    } else {
        conn_log_failure(s, why);
    }
    target_forget(s, was_up);
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
    if (s->cl != NULL && s->state != ST_BACKOFF && s->state != ST_CLOSED) {
        conn_down(s, why); /* a cluster store has no context to free: start again later */
        return;
    }
    if (s->ac == NULL || s->state == ST_DROPPING || s->state == ST_CLOSED)
        return;
    snprintf(s->drop_reason, sizeof(s->drop_reason), "%s", why);
    evtimer_del(s->watch);
    state_enter(s, ST_DROPPING, 0);
}

/* Prefix why with the server of the attempt (the primary the sentinel named). */
static void attempt_why(const struct store *s, const char *why, char *out, size_t n)
{
    if (s->url.kind == RURL_SENTINEL && s->target_where != NULL)
        snprintf(out, n, "%s: %s", s->target_where, why);
    else
        snprintf(out, n, "%s", why);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (status != REDIS_OK) {
        char why[256];
        attempt_why(s, ac->errstr[0] ? ac->errstr : "cannot connect", why, sizeof(why));
        conn_down(s, why); /* hiredis frees ac */
        return;
    }
    if (s->owner == NULL)
        stats_incr(s->st, STAT_redis_reconnects);
    s->last_read_us = pc_mono_us();
    s->answered = false;
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

static int64_t connect_timeout_ms(const struct store *s)
{
    return PC_MAX(CONNECT_MIN_MS, 10 * s->timeout_ms);
}

/* Connect to the address (or the socket): hiredis resolves nothing more on this loop. */
static void conn_open(struct store *s, const char *addr, int port)
{
    redisAsyncContext *ac = s->url.kind == RURL_UNIX ? redisAsyncConnectUnix(s->url.unix_path)
                                                     : redisAsyncConnect(addr, port);
    if (ac == NULL) {
        conn_down(s, "out of memory");
        return;
    }
    if (ac->err) {
        char why[256];
        attempt_why(s, ac->errstr, why, sizeof(why));
        redisAsyncFree(ac); /* never attached nor connected: no callbacks run */
        conn_down(s, why);
        return;
    }
    if (redisev_attach(ac, s->base, s->reply_max, STORE_REPLY_ELEMENTS) != 0) {
        redisAsyncFree(ac);
        conn_down(s, "out of memory");
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    ac->data = s;
    s->ac = ac;
    s->wire_queued = 0;
    s->owed = 0;
    state_enter(s, ST_CONNECTING, connect_timeout_ms(s));
}

/* The name of the target resolved (or not): connect, or back off. */
static void on_resolved(void *arg, const char *addr, const char *err)
{
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    s->lookup = NULL;
    char why[320];
    if (addr == NULL) {
        snprintf(why, sizeof(why), "cannot resolve %s: %s", s->target_host, err);
        conn_down(s, why);
        return;
    }
    if (s->resolved[0] == '\0')
        log_notice("redis: %s resolved to %s", s->target_host, addr);
    else if (strcmp(addr, s->resolved) != 0)
        log_notice("redis: %s resolved to %s (was %s)", s->target_host, addr, s->resolved);
    else
        log_debug("redis: %s resolved to %s", s->target_host, addr);
    snprintf(s->resolved, sizeof(s->resolved), "%s", addr);
    conn_open(s, addr, s->target_port);
}

/* Name the server of this attempt in log lines. */
static void target_set(struct store *s, const char *host, int port)
{
    snprintf(s->target_host, sizeof(s->target_host), "%s", host);
    s->target_port = port;
    free(s->target_where);
    struct pc_buf b = PC_BUF_INIT;
    if (s->url.kind == RURL_SENTINEL) {
        char *at = rurl_addr_text(host, port);
        pc_buf_printf(&b, "primary %s at %s", s->url.master, at);
        free(at);
    } else {
        pc_buf_append_str(&b, s->where);
    }
    s->target_where = pc_buf_cstr(&b);
}

/* Go to host:port: at once if it is an address, else after resolving the name anew. */
static void target_go(struct store *s)
{
    if (s->url.kind == RURL_UNIX || rurl_is_address(s->target_host)) {
        conn_open(s, s->target_host, s->target_port);
        return;
    }
    state_enter(s, ST_RESOLVING, connect_timeout_ms(s));
    s->lookup = resolve_start(s->base, s->target_host, on_resolved, s);
    if (s->lookup == NULL)
        conn_down(s, "cannot start resolving the host name");
}

/* A sentinel named the primary (or none answered). */
static void on_sentinel(void *arg, const char *host, int port, size_t which, const char *err)
{
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    s->ask = NULL;
    if (host == NULL) { /* none answered: begin with another one next time */
        s->next_sentinel++;
        conn_down(s, err);
        return;
    }
    s->answered_by = which;
    target_set(s, host, port);
    log_debug("redis: sentinel %zu names %s", which, s->target_where);
    target_go(s);
}

static void cluster_start(struct store *s);

/* One attempt, from the start: ask the sentinels, or go to the URL's server. */
static void conn_start(struct store *s)
{
    switch (s->url.kind) {
    case RURL_CLUSTER:
        cluster_start(s);
        return;
    case RURL_SENTINEL:
        state_enter(s, ST_DISCOVER, -1);
        s->ask = sentinel_ask_start(s->base, &s->url, s->next_sentinel, connect_timeout_ms(s),
                                    on_sentinel, s);
        if (s->ask == NULL)
            conn_down(s, "cannot ask the sentinels");
        return;
    case RURL_TCP:
        target_set(s, s->url.tcp.host, s->url.tcp.port);
        break;
    case RURL_UNIX:
        target_set(s, s->url.unix_path, 0);
        break;
    }
    target_go(s);
}

static void state_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    char why[320];
    switch (s->state) {
    case ST_RESOLVING:
        resolve_cancel(&s->lookup);
        snprintf(why, sizeof(why), "resolving %s timed out", s->target_host);
        conn_down(s, why);
        break;
    case ST_CONNECTING:
        attempt_why(s, "connect timed out", why, sizeof(why));
        conn_drop_now(s, why);
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
    case ST_READY:
        schema_watch(s);
        break;
    case ST_HANDSHAKE: /* armed for a cluster store only: its node never answered */
        conn_down(s, "no answer to the schema check");
        break;
    default:
        break;
    }
}

/* --- handshake and schema -------------------------------------------------- */

static struct store *node_for_key(struct store *top, const void *key, size_t klen);
static void cluster_internal_reply(struct store *top, struct store_cmd *c, redisReply *r);

/*
 * Send a handshake command on to (s itself, or a node of cluster store s)
 * whose reply goes to fn with s (only while the connection, or the cluster
 * store's attempt, is current); what names it in log lines. -1 if it could
 * not be sent.
 */
static int internal_on(struct store *s, struct store *to, internal_fn *fn, const char *what,
                       int argc, const char **argv, const size_t *lens, int64_t timeout_ms)
{
    struct store_cmd *c = cmd_new(to, CMD_INTERNAL);
    c->cb.internal = fn;
    if (to != s) {
        c->top = s;
        c->gen = s->cl->gen;
    }
    snprintf(c->what, sizeof(c->what), "%s", what);
    if (cmd_send(c, argc, argv, lens, timeout_ms) < 0) {
        cmd_free(c);
        return -1;
    }
    return 0;
}

/* internal_on s, or for a cluster store the node that serves the command's key. */
static int internal_try(struct store *s, internal_fn *fn, const char *what, int argc,
                        const char **argv, const size_t *lens, int64_t timeout_ms)
{
    struct store *to = s;
    if (s->cl != NULL) {
        int k = cluster_key_index(argc, argv, lens);
        to = k < 0 ? NULL : node_for_key(s, argv[k], lens ? lens[k] : strlen(argv[k]));
    }
    return to != NULL ? internal_on(s, to, fn, what, argc, argv, lens, timeout_ms) : -1;
}

static void internal_send(struct store *s, internal_fn *fn, const char *what, int argc,
                          const char **argv, const size_t *lens, int64_t timeout_ms)
{
    if (internal_try(s, fn, what, argc, argv, lens, timeout_ms) < 0)
        conn_drop_later(s, s->cl != NULL ? "the node serving the schema key is not connected"
                                         : "cannot send a command");
}

static void internal_reply(struct store_cmd *c, redisAsyncContext *ac, redisReply *r)
{
    struct store *s = c->s, *top = c->top;
    cmd_unlink(c);
    c->done = true;
    if (top != NULL) {
        cluster_internal_reply(top, c, r);
        return;
    }
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

static void node_ready(struct store *node);
static void cluster_health_check(struct store *top);

static void writer_ensure(struct store *s);

/* The first connection is a notice; reconnects are info (health_up says it once). */
static void become_ready(struct store *s, long version)
{
    bool first = s->health == HEALTH_UNKNOWN;
    if (s->parent != NULL && s->health == HEALTH_DOWN && !s->clusterdown) {
        /*
         * A node back after it was lost answers before its cluster serves keys again (a
         * whole cluster restarting): the outage goes on until it answers a keyed command.
         */
        s->clusterdown = true;
        snprintf(s->parent->cl->down_why, sizeof(s->parent->cl->down_why),
                 "%s is back but serves no key yet", s->where);
    }
    s->backoff_ms = BACKOFF_MIN_MS;
    s->failures = 0;
    s->up = true;
    s->next_sentinel = s->answered_by;
    state_enter(s, ST_READY, schema_watched(s) ? SCHEMA_WATCH_MS : -1);
    if (s->parent != NULL) {
        node_ready(s);
        return;
    }
    if (s->owner != NULL) {
        log_debug("redis: %s: connected", s->where);
        health_up(s);
        return;
    }
    writer_ensure(s);
    if (s->url.kind == RURL_SENTINEL)
        log_write(first ? PC_LOG_NOTICE : PC_LOG_INFO, NULL,
                  "redis: connected to %s (%s; schema version %ld)", s->target_where, s->where,
                  version);
    else
        log_write(first ? PC_LOG_NOTICE : PC_LOG_INFO, NULL,
                  "redis: connected to %s (schema version %ld)", s->where, version);
    if (s->cl != NULL)
        cluster_health_check(s); /* UP once every node owning slots is */
    else
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

/* A cluster's node: PING answered after AUTH, so it is usable (the schema is the cluster's). */
static void ping_reply(struct store *s, redisReply *r)
{
    char why[192];
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof(why), "connection setup failed: PING: %s", r->str);
        conn_drop_later(s, why);
        return;
    }
    become_ready(s, 0);
}

/* sentinel://: the address the sentinel named must be a primary, or the sentinel lags. */
static void role_reply(struct store *s, redisReply *r)
{
    char role[64], why[256];
    if (sentinel_role_ok(r, role, sizeof(role)))
        return;
    snprintf(why, sizeof(why), "%s is not a primary (role %s); asking the sentinels again",
             s->target_where, role);
    conn_drop_later(s, why);
}

static void handshake_send(struct store *s)
{
    const struct rurl *u = &s->url;
    if (u->password != NULL) {
        const char *argv[] = {"AUTH", u->user ? u->user : u->password, u->password};
        internal_send(s, setup_reply, "AUTH", u->user ? 3 : 2, argv, NULL, s->timeout_ms);
    }
    if (u->db != 0) {
        char db[16];
        snprintf(db, sizeof(db), "%d", u->db);
        const char *argv[] = {"SELECT", db};
        internal_send(s, setup_reply, "SELECT", 2, argv, NULL, s->timeout_ms);
    }
    if (u->kind == RURL_SENTINEL) {
        const char *argv[] = {"ROLE"};
        internal_send(s, role_reply, "ROLE", 1, argv, NULL, s->timeout_ms);
    }
    if (s->parent != NULL || s->owner != NULL) {
        const char *argv[] = {"PING"};
        internal_send(s, ping_reply, "PING", 1, argv, NULL, s->timeout_ms);
        return;
    }
    schema_read(s);
}

/* The HSET of pc:meta after a migration was refused: worth a line, not the connection. */
static void meta_reply(struct store *s, redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        log_info("redis: %s: HSET " PC_META_KEY " failed: %s", s->where, r->str);
}

/* What a migration left for pc:meta (when and what it did) is written after it. */
static void meta_write(struct store *s, const redisReply *r)
{
    struct migrate_meta mm;
    migrate_meta_from(r, &mm);
    if (mm.argc > 0)
        internal_try(s, meta_reply, "HSET " PC_META_KEY, mm.argc, mm.argv, mm.lens, s->timeout_ms);
}

static void migrate_reply(struct store *s, redisReply *r)
{
    const struct pc_migration *m = &pc_migrations[s->migrating];
    if (migrate_reply_applied(r)) {
        log_notice("redis: %s: applied migration %04ld %s", s->where, m->version, m->name);
        meta_write(s, r);
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

/*
 * Whether c names a key: only a keyed answer says that a node serves keys (a node answers
 * AUTH, PING and CLUSTER SHARDS while it sees the cluster down).
 */
static bool cmd_names_key(const struct store_cmd *c)
{
    static const char *const keyless[] = {"AUTH", "SELECT", "PING", "CLUSTER"};
    if (c->kind != CMD_INTERNAL)
        return true;
    for (size_t i = 0; i < PC_ARRAY_LEN(keyless); i++)
        if (strncmp(c->what, keyless[i], strlen(keyless[i])) == 0)
            return false;
    return true;
}

/*
 * A write on s (a store, or its writes' connection) was answered READONLY:
 * the server is a replica now. Both connections of the store start again.
 */
static void readonly_seen(struct store *s)
{
    struct store *m = s->owner != NULL ? s->owner : s;
    const char *why;
    uint64_t now = pc_mono_us();
    if (m->url.kind == RURL_SENTINEL) {
        why = "it turned into a replica (READONLY); asking the sentinels again";
    } else if (m->ro_drop_us == 0 || now - m->ro_drop_us >= (uint64_t)READONLY_GAP_MS * 1000) {
        /*
         * A failover behind a name (a managed Redis's primary endpoint, a
         * Kubernetes service) leaves this connection on the old primary, now a
         * replica: connecting again resolves the name anew. At most once per
         * READONLY_GAP_MS, so a server that stays a replica costs a short gap
         * now and then, not one per write.
         */
        m->ro_drop_us = now;
        why = "it answered READONLY (a replica now: a failover behind its name?); connecting again";
    } else {
        return;
    }
    conn_drop_later(m, why);
    if (m->wr != NULL)
        conn_drop_later(m->wr, why);
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
    s->answered = true;
    /* A node that said CLUSTERDOWN, or came back, serves keys again with a keyed answer. */
    if (s->parent != NULL && s->clusterdown && cmd_names_key(c) && r->type != REDIS_REPLY_ERROR) {
        s->clusterdown = false;
        s->serves_again_us = s->last_read_us;
        cluster_health_check(s->parent);
    }
    if (s->parent == NULL && s->cl == NULL && sentinel_readonly(r))
        readonly_seen(s);
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

/* PTTL, store_call_int: an integer reply. */
static void int_reply(struct store_cmd *c, const redisReply *r)
{
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        cmd_complete(c, STORE_OK, NULL, 0, r->integer);
    else
        cmd_fail(c, r, cmd_what(c));
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

static bool step_unlink_slots(struct store_cmd *c, const redisReply *keys);

static bool step_unlink(struct store_cmd *c, const redisReply *keys)
{
    if (c->s->parent != NULL)
        return step_unlink_slots(c, keys);
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

/* Keep the batch's keys: the EVAL's reply names them by position. */
static void pick_keep_batch(struct pick_state *p, const redisReply *keys)
{
    pc_buf_reset(&p->keys);
    if (keys->elements > p->cap) {
        p->cap = keys->elements;
        p->offs = pc_realloc(p->offs, p->cap * sizeof(*p->offs));
        p->order = pc_realloc(p->order, p->cap * sizeof(*p->order));
    }
    p->nkeys = keys->elements;
    for (size_t i = 0; i < keys->elements; i++) {
        p->offs[i] = p->keys.len;
        p->order[i] = i;
        pc_buf_append(&p->keys, keys->element[i]->str, keys->element[i]->len);
        pc_buf_append_char(&p->keys, '\0');
    }
    p->gstart = p->gend = 0;
}

static const char *pick_key(const struct pick_state *p, size_t i)
{
    return p->keys.data + p->offs[i];
}

static void pick_group_by_slot(struct pick_state *p);

/* Keys an EVAL names per batch key: the key and its twins. */
static size_t pick_per(const struct pick_state *p)
{
    return 1 + (p->twin_from != NULL) + (p->twin2_to != NULL);
}

/* A twin of key: its twin_from prefix replaced by to; NULL if it lacks that prefix. */
static char *pick_twin(const struct pick_state *p, const char *to, const char *key, size_t len)
{
    size_t tf = strlen(p->twin_from), tt = strlen(to);
    if (len < tf || memcmp(key, p->twin_from, tf) != 0)
        return NULL;
    char *t = pc_malloc(tt + len - tf + 1);
    memcpy(t, to, tt);
    memcpy(t + tt, key + tf, len - tf);
    t[tt + len - tf] = '\0';
    return t;
}

static void set_arg(const char **argv, size_t *lens, size_t i, const char *s, size_t len)
{
    argv[i] = s;
    lens[i] = len;
}

/*
 * The end of the group of order[] that starts at p->gstart: the whole batch
 * on a single server, the keys of one slot on a cluster node (an EVAL's keys
 * must share a slot there; pick_group_by_slot put them side by side).
 */
static size_t pick_group_end(const struct store_cmd *c, const struct pick_state *p)
{
    if (c->s->parent == NULL)
        return p->nkeys;
    const char *k0 = pick_key(p, p->order[p->gstart]);
    unsigned slot = cluster_slot(k0, strlen(k0));
    size_t end = p->gstart + 1;
    while (end < p->nkeys) {
        const char *k = pick_key(p, p->order[end]);
        if (cluster_slot(k, strlen(k)) != slot)
            break;
        end++;
    }
    return end;
}

/* EVAL script N key [twin] ... arg ... for the group of the batch that starts at p->gstart. */
static bool pick_send_group(struct store_cmd *c)
{
    struct pick_state *p = c->pick;
    p->gend = pick_group_end(c, p);
    size_t g = p->gend - p->gstart, per = pick_per(p), n = g * per;
    size_t argc = 3 + n + (size_t)p->nargs;
    if (argc > INT_MAX) {
        cmd_fail(c, NULL, "SCAN");
        return false;
    }
    const char **argv = pc_calloc(argc, sizeof(*argv));
    size_t *lens = pc_calloc(argc, sizeof(*lens));
    char **twins = pc_calloc(2 * g, sizeof(*twins));
    char num[24];
    snprintf(num, sizeof(num), "%zu", n);
    set_arg(argv, lens, 0, "EVAL", 4);
    set_arg(argv, lens, 1, p->script, strlen(p->script));
    set_arg(argv, lens, 2, num, strlen(num));
    bool ok = true;
    for (size_t j = 0; j < g && ok; j++) {
        const char *k = pick_key(p, p->order[p->gstart + j]);
        size_t klen = strlen(k);
        set_arg(argv, lens, 3 + j * per, k, klen);
        for (size_t t = 0; t + 1 < per && ok; t++) {
            char **tw = &twins[2 * j + t];
            *tw = pick_twin(p, t == 0 ? p->twin_to : p->twin2_to, k, klen);
            ok = *tw != NULL;
            if (ok)
                set_arg(argv, lens, 4 + j * per + t, *tw, strlen(*tw));
        }
    }
    for (int i = 0; i < p->nargs; i++)
        set_arg(argv, lens, 3 + n + (size_t)i, p->args[i], strlen(p->args[i]));
    c->kind = CMD_PICK;
    bool sent = false;
    if (ok)
        sent = step_send(c, (int)argc, argv, lens);
    else
        cmd_fail(c, NULL, "SCAN (a key without the twin prefix)");
    for (size_t j = 0; j < 2 * g; j++)
        free(twins[j]);
    free(twins);
    free(argv);
    free(lens);
    return sent;
}

/* One batch of SCAN's keys: its groups are picked one EVAL after the other. */
static bool step_pick(struct store_cmd *c, const redisReply *keys)
{
    pick_keep_batch(c->pick, keys);
    if (c->s->parent != NULL)
        pick_group_by_slot(c->pick);
    return pick_send_group(c);
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
        return c->pick != NULL ? step_pick(c, r->element[1]) : step_unlink(c, r->element[1]);
    return step_next(c);
}

/* The pick's reply: {skipped, position, ...}, each position that of a batch key in KEYS. */
static bool pick_reply_ok(const struct pick_state *p, const redisReply *r)
{
    size_t per = pick_per(p), g = p->gend - p->gstart;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->elements > g + 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0)
        return false;
    for (size_t i = 1; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_INTEGER || e->integer < 1 ||
            (unsigned long long)e->integer > g * per || (e->integer - 1) % (long long)per)
            return false;
    }
    return true;
}

/* EVAL reply: tell the caller about each picked key, then the batch's next group or SCAN on. */
static bool pick_reply(struct store_cmd *c, const redisReply *r)
{
    struct pick_state *p = c->pick;
    if (!pick_reply_ok(p, r)) {
        cmd_fail(c, r, "EVAL (pick)");
        return false;
    }
    size_t per = pick_per(p);
    for (size_t i = 1; i < r->elements && !c->done; i++) {
        size_t k = p->order[p->gstart + (size_t)(r->element[i]->integer - 1) / per];
        const char *key = pick_key(p, k);
        p->each(p->each_arg, key, strlen(key));
    }
    if (!c->done && r->element[0]->integer > 0)
        p->each(p->each_arg, NULL, (size_t)r->element[0]->integer);
    if (c->done) /* cancelled from a callback after all */
        return false;
    c->deleted += (long long)r->elements - 1;
    p->gstart = p->gend;
    if (p->gstart < p->nkeys)
        return pick_send_group(c);
    return step_next(c);
}

static bool unlink_reply(struct store_cmd *c, const redisReply *r)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER || c->part_failed) {
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
    if (c->s->parent != NULL && cluster_redirect(c, r))
        return; /* sent again, on another node or later: not freed */
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
    case CMD_PTTL:
    case CMD_INT:
        int_reply(c, r);
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
    case CMD_PICK:
        goes_on = pick_reply(c, r);
        break;
    case CMD_INTERNAL:
        internal_reply(c, ac, r);
        break;
    case CMD_FANOUT: /* never sent */
    case CMD_WAIT:
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
    if (c->kind == CMD_WAIT) { /* no reply is owed: nothing holds it but the store */
        cmd_complete(c, s->state == ST_READY ? STORE_OK : STORE_TIMEOUT, NULL, 0, 0);
        cmd_free(c);
        return;
    }
    if (c->parked) { /* waiting to be sent again after TRYAGAIN: no reply is owed */
        stats_incr(s->st, STAT_redis_timeouts);
        cmd_complete(c, STORE_TIMEOUT, NULL, 0, 0); /* its retry timer frees it */
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

/* --- the writes' connection -------------------------------------------------------- */

static void store_init(struct store *s, struct event_base *base, struct stats *st,
                       int64_t timeout_ms);

/*
 * Writes go on a connection of their own (s->wr), reads on s's: Redis runs a
 * client's commands in order, so a write that waits (CLIENT PAUSE ... WRITE,
 * as a failover or an operator does) held up every GET sent after it on the
 * same connection, and the cache missed for as long as the pause lasted. The
 * writes' connection is made once s is READY (so the schema is known to be
 * this build's), to the server s is on (sentinel://: the primary named, and
 * made again when another one is); until it is READY, and on a cluster, writes
 * go on s's. Its health is not the cache's: reads still hit without it.
 */
static void writer_ensure(struct store *s)
{
    if (s->cl != NULL || s->parent != NULL || s->owner != NULL)
        return;
    bool tcp = s->url.kind != RURL_UNIX;
    const char *host = s->url.kind == RURL_SENTINEL ? s->target_host : s->url.tcp.host;
    int port = s->url.kind == RURL_SENTINEL ? s->target_port : s->url.tcp.port;
    struct store *w = s->wr;
    if (w != NULL && (!tcp || (w->url.tcp.port == port && strcmp(w->url.tcp.host, host) == 0))) {
        if (w->state == ST_BACKOFF) { /* the server answers s again: no need to wait */
            w->backoff_ms = BACKOFF_MIN_MS;
            state_enter(w, ST_BACKOFF, 0);
        }
        return;
    }
    store_destroy(&s->wr); /* on the old primary: its writes fail as they would there */
    w = pc_calloc(1, sizeof(*w));
    w->url.kind = s->url.kind == RURL_UNIX ? RURL_UNIX : RURL_TCP;
    if (tcp) {
        w->url.tcp.host = pc_strdup(host);
        w->url.tcp.port = port;
    } else {
        w->url.unix_path = pc_strdup(s->url.unix_path);
    }
    w->url.user = s->url.user != NULL ? pc_strdup(s->url.user) : NULL;
    w->url.password = s->url.password != NULL ? pc_strdup(s->url.password) : NULL;
    w->url.db = s->url.db;
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "%s (writes)", s->target_where != NULL ? s->target_where : s->where);
    w->where = pc_buf_cstr(&b);
    store_init(w, s->base, s->st, s->timeout_ms);
    w->reply_max = s->reply_max;
    w->owner = s;
    s->wr = w;
    store_start(w);
}

/*
 * Where a read of key routed to s goes: s's own connection, unless a write of
 * the same key is on its way on the writes' connection (store_set and then
 * store_get see the value written, as on one connection: the read queues
 * behind the write).
 */
static struct store *reader_of(struct store *s, const void *key, size_t klen)
{
    if (s == NULL || s->wr == NULL || s->wr->state != ST_READY || s->wr->cmds == NULL)
        return s;
    uint64_t h = pc_fnv1a(PC_FNV_SEED, key, klen);
    for (const struct store_cmd *c = s->wr->cmds; c != NULL; c = c->next)
        if (c->keyed && c->khash == h)
            return s->wr;
    return s;
}

/* Where a write routed to s goes: s's writes' connection when it is READY. */
static struct store *writer_of(struct store *s)
{
    return s != NULL && s->wr != NULL && s->wr->state == ST_READY ? s->wr : s;
}

/* --- public API ------------------------------------------------------------------ */

static const struct timeval *common_timeout(struct event_base *base, int64_t ms,
                                            struct timeval *plain)
{
    *plain = pc_timeval_ms(ms);
    const struct timeval *tv = event_base_init_common_timeout(base, plain);
    return tv != NULL ? tv : plain;
}

static struct event *timer_new(struct event_base *base, event_callback_fn fn, void *arg)
{
    struct event *ev = evtimer_new(base, fn, arg);
    if (ev == NULL) {
        log_error("redis: cannot create a timer");
        abort();
    }
    return ev;
}

/* What every store starts with, its URL parsed and where set already. */
static void store_init(struct store *s, struct event_base *base, struct stats *st,
                       int64_t timeout_ms)
{
    s->magic = STORE_MAGIC;
    s->base = base;
    s->st = st;
    s->target_where = pc_strdup(s->where);
    s->timeout_ms = PC_MAX(timeout_ms, 1);
    s->cmd_tv = common_timeout(base, s->timeout_ms, &s->cmd_tv_plain);
    s->step_tv = common_timeout(base, s->timeout_ms * STEP_TIMEOUT_MULT, &s->step_tv_plain);
    s->timer = timer_new(base, state_timer_cb, s);
    s->watch = timer_new(base, watch_cb, s);
    s->state = ST_IDLE;
    s->backoff_ms = BACKOFF_MIN_MS;
    s->rng = (pc_mono_us() ^ (uint64_t)(uintptr_t)s) | 1;
    s->migrate_failed = -1;
}

static void cluster_init(struct store *s);

struct store *store_create(struct event_base *base, const struct store_opts *opts, struct stats *st)
{
    char err[192];
    struct store *s = pc_calloc(1, sizeof(*s));
    if (rurl_parse(opts->url, 0, &s->url, err, sizeof(err)) < 0) {
        log_error("redis: invalid URL: %s", err);
        free(s);
        return NULL;
    }
    s->where = rurl_format(&s->url, false);
    store_init(s, base, st, opts->timeout_ms);
    s->reply_max = store_reply_max(opts->max_entry);
    s->auto_migrate = opts->auto_migrate;
    if (s->url.kind == RURL_CLUSTER)
        cluster_init(s);
    return s;
}

size_t store_reply_max(int64_t max_entry)
{
    return (size_t)PC_MAX(max_entry, STORE_REPLY_FLOOR / 2) * 2 + STORE_REPLY_SLACK;
}

void store_set_reply_max(struct store *s, int64_t max_entry)
{
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    s->reply_max = store_reply_max(max_entry);
    if (s->ac != NULL)
        redisev_set_reply_max(s->ac, s->reply_max);
    store_set_reply_max(s->wr, max_entry);
    for (size_t i = 0; s->cl != NULL && i < s->cl->nnodes; i++)
        store_set_reply_max(s->cl->nodes[i], max_entry);
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

bool store_is_cluster(const struct store *s)
{
    return s != NULL && s->cl != NULL;
}

/* A wait of s (CMD_WAIT) of ms, or until s becomes READY (waits_end); NULL if s is closed. */
static struct store_cmd *wait_new(struct store *s, int64_t ms, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (cb == NULL || s->state == ST_CLOSED)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_WAIT);
    c->cb.num = cb;
    c->arg = arg;
    c->sent_us = pc_mono_us();
    c->timeout_us = PC_MAX(ms, 0) * 1000;
    cmd_arm(c, c->timeout_us);
    return c;
}

struct store_cmd *store_when_ready(struct store *s, int64_t timeout_ms, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    return wait_new(s, s->state == ST_READY ? 0 : timeout_ms, cb, arg);
}

struct store_cmd *store_after(struct store *s, int64_t ms, store_int_fn *cb, void *arg)
{
    return wait_new(s, ms, cb, arg);
}

static void cluster_destroy(struct store *s);

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
    if (s->health == HEALTH_DOWN && s->parent == NULL && s->owner == NULL)
        health_leave_down(s, false); /* gone, not back: no notice */
    store_destroy(&s->wr);           /* its commands complete: route() finds s CLOSED */
    if (s->cl != NULL)
        cluster_destroy(s); /* its nodes complete their commands (and the fan-outs) */
    while (s->cmds != NULL) {
        struct store_cmd *c = s->cmds;
        if (c->kind == CMD_INTERNAL) {
            cmd_unlink(c);
            c->done = true;
            evtimer_del(c->timer);
        } else {
            cmd_complete(c, STORE_ERR, NULL, 0, 0);
        }
        if (c->parked || c->kind == CMD_FANOUT ||
            c->kind == CMD_WAIT) /* hiredis does not hold it */
            cmd_free(c);
    }
    if (ac != NULL)
        redisAsyncFree(ac); /* its callbacks free the commands cut loose above */
    sentinel_ask_cancel(&s->ask);
    resolve_cancel(&s->lookup);
    event_free(s->timer);
    event_free(s->watch);
    rurl_free(&s->url);
    free(s->where);
    free(s->target_where);
    s->magic = 0;
    free(s);
}

/*
 * The store a command of key goes to: s, or for a cluster store the node
 * owning key's slot; NULL (the caller bypasses) when that is not READY.
 */
static struct store *route(struct store *s, const void *key, size_t klen)
{
    if (s->state != ST_READY)
        return NULL;
    return s->cl != NULL ? node_for_key(s, key, klen) : s;
}

/* route for a command in argv form, by its key (a keyless command is refused on a cluster). */
static struct store *route_argv(struct store *s, int argc, const char **argv, const size_t *lens)
{
    if (s->cl == NULL || argc < 1)
        return s->state == ST_READY && argc >= 1 ? s : NULL;
    int k = cluster_key_index(argc, argv, lens);
    return k < 0 ? NULL : route(s, argv[k], lens ? lens[k] : strlen(argv[k]));
}

/* A command of one key (GET, PTTL) with the store's timeout; c is freed if it cannot be sent. */
static struct store_cmd *key_cmd_send(struct store_cmd *c, const char *name, const void *key,
                                      size_t klen)
{
    const char *argv[] = {name, key};
    size_t lens[] = {strlen(name), klen};
    if (cmd_send(c, 2, argv, lens, c->s->timeout_ms) < 0) {
        stats_incr(c->s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

struct store_cmd *store_get(struct store *s, const void *key, size_t klen, store_get_fn *cb,
                            void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (cb == NULL || (s = reader_of(route(s, key, klen), key, klen)) == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_GET);
    c->cb.get = cb;
    c->arg = arg;
    return key_cmd_send(c, "GET", key, klen);
}

struct store_cmd *store_set_cb(struct store *s, const void *key, size_t klen, const void *val,
                               size_t vlen, int64_t ttl_ms, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (ttl_ms <= 0 || (s = writer_of(route(s, key, klen))) == NULL)
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

struct store_cmd *store_pttl(struct store *s, const void *key, size_t klen, store_int_fn *cb,
                             void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (cb == NULL || (s = reader_of(route(s, key, klen), key, klen)) == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_PTTL);
    c->cb.num = cb;
    c->arg = arg;
    return key_cmd_send(c, "PTTL", key, klen);
}

int store_set(struct store *s, const void *key, size_t klen, const void *val, size_t vlen,
              int64_t ttl_ms)
{
    return store_set_cb(s, key, klen, val, vlen, ttl_ms, NULL, NULL) != NULL ? 0 : -1;
}

/* A write of store_write_cb or store_write_bg_cb, its time mult x the command timeout. */
static struct store_cmd *write_send(struct store *s, int argc, const char **argv,
                                    const size_t *lens, int64_t mult, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if ((s = writer_of(route_argv(s, argc, argv, lens))) == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_WRITE);
    c->cb.num = cb;
    c->arg = arg;
    snprintf(c->what, sizeof(c->what), "%.*s", (int)PC_MIN(lens[0], sizeof(c->what) - 1), argv[0]);
    if (cmd_send(c, argc, argv, lens, s->timeout_ms * mult) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

struct store_cmd *store_write_cb(struct store *s, int argc, const char **argv, const size_t *lens,
                                 store_int_fn *cb, void *arg)
{
    return write_send(s, argc, argv, lens, 1, cb, arg);
}

struct store_cmd *store_write_bg_cb(struct store *s, int argc, const char **argv,
                                    const size_t *lens, store_int_fn *cb, void *arg)
{
    return write_send(s, argc, argv, lens, STEP_TIMEOUT_MULT, cb, arg);
}

int store_write(struct store *s, int argc, const char **argv, const size_t *lens)
{
    return store_write_cb(s, argc, argv, lens, NULL, NULL) != NULL ? 0 : -1;
}

static struct store_cmd *fanout_delete(struct store *s, const char *pattern,
                                       const struct store_pick *pick, void *each_arg,
                                       store_int_fn *cb, void *arg);

static char *dup_or_null(const char *s)
{
    return s != NULL ? pc_strdup(s) : NULL;
}

/* A copy of what pick holds, each_arg for its each callback. */
static struct pick_state *pick_new(const struct store_pick *pick, void *each_arg)
{
    struct pick_state *p = pc_calloc(1, sizeof(*p));
    p->script = pc_strdup(pick->script);
    p->nargs = pick->nargs;
    p->args = pc_calloc((size_t)pick->nargs + 1, sizeof(*p->args));
    for (int i = 0; i < pick->nargs; i++)
        p->args[i] = pc_strdup(pick->args[i]);
    p->twin_from = dup_or_null(pick->twin_from);
    p->twin_to = dup_or_null(pick->twin_to);
    p->twin2_to = dup_or_null(pick->twin2_to);
    p->each = pick->each;
    p->each_arg = each_arg;
    return p;
}

/*
 * store_delete_matching (pick NULL: every key SCAN finds goes) and
 * store_delete_picked; on a cluster, on every primary (fanout_delete, whose
 * parts call this on each node with the same pick and each_arg).
 */
static struct store_cmd *delete_start(struct store *s, const char *pattern,
                                      const struct store_pick *pick, void *each_arg,
                                      store_int_fn *cb, void *arg)
{
    if (s->state != ST_READY)
        return NULL;
    if (s->cl != NULL)
        return fanout_delete(s, pattern, pick, each_arg, cb, arg);
    s = writer_of(s);
    struct store_cmd *c = cmd_new(s, CMD_SCAN);
    c->cb.num = cb;
    c->arg = arg;
    c->pattern = pc_strdup(pattern);
    if (pick != NULL)
        c->pick = pick_new(pick, each_arg);
    strcpy(c->cursor, "0");
    const char *argv[] = {"SCAN", c->cursor, "MATCH", c->pattern, "COUNT", SCAN_COUNT};
    if (cmd_send(c, 6, argv, NULL, s->timeout_ms * STEP_TIMEOUT_MULT) < 0) {
        stats_incr(s->st, STAT_redis_errors);
        cmd_free(c);
        return NULL;
    }
    return c;
}

struct store_cmd *store_delete_matching(struct store *s, const char *pattern, store_int_fn *cb,
                                        void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (pattern == NULL || cb == NULL)
        return NULL;
    return delete_start(s, pattern, NULL, NULL, cb, arg);
}

struct store_cmd *store_delete_picked(struct store *s, const char *pattern,
                                      const struct store_pick *pick, store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    if (pattern == NULL || pick == NULL || pick->script == NULL || pick->each == NULL ||
        pick->nargs < 0 || (pick->twin_from == NULL) != (pick->twin_to == NULL) ||
        (pick->twin2_to != NULL && pick->twin_from == NULL) || cb == NULL)
        return NULL;
    return delete_start(s, pattern, pick, arg, cb, arg);
}

struct store_cmd *store_call_int(struct store *s, int argc, const char **argv, const size_t *lens,
                                 store_int_fn *cb, void *arg)
{
    PC_CHECK_OBJ(s, STORE_MAGIC);
    /* a cluster store has no connection of its own: the node of the first key's slot */
    if (cb == NULL || (s = writer_of(route_argv(s, argc, argv, lens))) == NULL)
        return NULL;
    struct store_cmd *c = cmd_new(s, CMD_INT);
    c->cb.num = cb;
    c->arg = arg;
    size_t n0 = lens != NULL ? lens[0] : strlen(argv[0]);
    snprintf(c->what, sizeof(c->what), "%.*s", (int)PC_MIN(n0, sizeof(c->what) - 1), argv[0]);
    if (cmd_send(c, argc, argv, lens, s->timeout_ms) < 0) {
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
    evtimer_del(c->timer);       /* hiredis still holds c: the reply frees it */
    if (c->kind == CMD_FANOUT) { /* no one holds it but its parts: cancel them, free it */
        for (size_t i = 0; i < c->nkids; i++)
            store_cancel(&c->kids[i].cmd);
        cmd_free(c);
    } else if (c->kind == CMD_WAIT) {
        cmd_free(c);
    }
    /* parked (TRYAGAIN): its retry timer frees it */
}

/* --- the schema watch ----------------------------------------------------------- */

/*
 * A worker's store (not a writes' connection, not a cluster's node) looks every
 * SCHEMA_WATCH_MS while READY that pc:schema is still there: EXISTS, on the lookups'
 * connection (a write held by CLIENT PAUSE ... WRITE does not hold it up), on a cluster
 * the node of its slot. An operator's FLUSHALL, FLUSHDB or DEL (or an eviction under
 * allkeys-lru) takes it away under stores that stay connected, and they read it only when
 * they connect: meanwhile every vector loader that connected again waited for it before
 * loading a partition (vsync.c), and every store that connected with redis-auto-migrate off
 * was BLOCKED, for as long as no store connected with it on. Redis holds this version's
 * keys (this store was READY at it, and what was written since is its own), so the version
 * is put back, whatever redis-auto-migrate says: no migration has anything to convert.
 * SET NX in a script: of the stores of every instance that find it gone at once, one sets
 * it and logs it; a migration of a store connecting meanwhile checks the version in its own
 * script, so either may go first. A version that is there is left alone, whatever it is (a
 * store reads it when it connects).
 */
static bool schema_watched(const struct store *s)
{
    return s->parent == NULL && s->owner == NULL;
}

static void schema_restored(void *arg, enum store_status st, long long n)
{
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    s->schema_watching = false;
    if (st == STORE_OK && n == 1)
        log_notice("redis: %s: %s was gone (a FLUSHALL, FLUSHDB or DEL?): set back to schema "
                   "version %ld",
                   s->where, PC_SCHEMA_KEY, migrate_latest());
}

static void schema_seen(void *arg, enum store_status st, long long n)
{
    struct store *s = arg;
    PC_CHECK_OBJ(s, STORE_MAGIC);
    s->schema_watching = false;
    if (st != STORE_OK || n != 0 || s->state != ST_READY)
        return; /* there (1), or not known this time: looked at again at the next turn */
    struct migrate_restore m;
    migrate_restore_init(&m);
    s->schema_watching =
        store_call_int(s, MIGRATE_RESTORE_ARGC, m.argv, m.lens, schema_restored, s) != NULL;
}

/* The state timer of a READY store that schema_watched: look, and again in a while. */
static void schema_watch(struct store *s)
{
    struct timeval tv = pc_timeval_ms(SCHEMA_WATCH_MS);
    timer_add(s, s->timer, &tv);
    if (s->schema_watching)
        return;
    size_t n = strlen(PC_SCHEMA_KEY);
    struct store *to = reader_of(route(s, PC_SCHEMA_KEY, n), PC_SCHEMA_KEY, n);
    if (to == NULL || to->clusterdown)
        return; /* a cluster's node of that slot is not usable now, or serves no key (the
                 * tick asks it, when no other command goes there, whether it does again) */
    struct store_cmd *c = cmd_new(to, CMD_INT);
    c->cb.num = schema_seen;
    c->arg = s;
    snprintf(c->what, sizeof(c->what), "EXISTS " PC_SCHEMA_KEY);
    s->schema_watching = key_cmd_send(c, "EXISTS", PC_SCHEMA_KEY, n) != NULL;
}

/* --- cluster:// (see the top) ----------------------------------------------------------- */

static void cluster_tick_cb(evutil_socket_t fd, short what, void *arg);
static void map_reply(struct store *top, redisReply *r);
static void cluster_want_map(struct store *top);
static void cluster_advance(struct store *top);

static void cluster_init(struct store *s)
{
    s->cl = pc_calloc(1, sizeof(*s->cl));
    for (size_t i = 0; i < CLUSTER_SLOTS; i++)
        s->cl->owner[i] = CLUSTER_NO_OWNER;
    s->cl->schema_slot = cluster_slot(PC_SCHEMA_KEY, strlen(PC_SCHEMA_KEY));
    s->cl->tick = timer_new(s->base, cluster_tick_cb, s);
}

static void cluster_destroy(struct store *s)
{
    struct store_cluster *cl = s->cl;
    for (size_t i = 0; i < cl->nnodes; i++) /* their callbacks may still route: tick last */
        store_destroy(&cl->nodes[i]);
    event_free(cl->tick);
    free(cl->nodes);
    free(cl->owned);
    free(cl);
    s->cl = NULL;
}

/* Run the tick in ms (again, if it was due later). */
static void tick_in(struct store *top, int64_t ms)
{
    struct timeval tv = pc_timeval_ms(ms);
    timer_add(top, top->cl->tick, &tv);
}

/* A node store for host:port with the cluster store's credentials, loop, stats and timeout. */
static struct store *node_new(struct store *top, const char *host, int port)
{
    struct store *n = pc_calloc(1, sizeof(*n));
    n->url.kind = RURL_TCP;
    n->url.tcp.host = pc_strdup(host);
    n->url.tcp.port = port;
    n->url.user = top->url.user != NULL ? pc_strdup(top->url.user) : NULL;
    n->url.password = top->url.password != NULL ? pc_strdup(top->url.password) : NULL;
    char *at = rurl_addr_text(host, port);
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "cluster node %s", at);
    free(at);
    n->where = pc_buf_cstr(&b);
    store_init(n, top->base, top->st, top->timeout_ms);
    n->reply_max = top->reply_max;
    n->parent = top;
    return n;
}

static size_t node_index(const struct store *top, const struct store *node)
{
    for (size_t i = 0; i < top->cl->nnodes; i++)
        if (top->cl->nodes[i] == node)
            return i;
    return SIZE_MAX;
}

/*
 * The node store of host:port (its index in *index), made and started if
 * new; NULL when there are already as many as a map may name (a node
 * redirecting to ever new addresses gets no more).
 */
static struct store *node_get(struct store *top, const char *host, int port, size_t *index)
{
    struct store_cluster *cl = top->cl;
    size_t free_at = SIZE_MAX;
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct store *n = cl->nodes[i];
        if (n == NULL && free_at == SIZE_MAX)
            free_at = i;
        if (n != NULL && n->url.tcp.port == port && strcmp(n->url.tcp.host, host) == 0) {
            *index = i;
            return n;
        }
    }
    if (free_at == SIZE_MAX) {
        if (cl->nnodes >= CLUSTER_NODES_MAX + RURL_SEEDS_MAX)
            return NULL;
        cl->nodes = pc_realloc(cl->nodes, (cl->nnodes + 1) * sizeof(*cl->nodes));
        cl->owned = pc_realloc(cl->owned, (cl->nnodes + 1) * sizeof(*cl->owned));
        free_at = cl->nnodes++;
    }
    struct store *n = node_new(top, host, port);
    cl->nodes[free_at] = n;
    cl->owned[free_at] = 0;
    *index = free_at;
    store_start(n);
    return n;
}

/* The seeds of the URL as nodes: where a map is asked when no node is connected. */
static void seeds_ensure(struct store *top)
{
    for (size_t i = 0; i < top->url.nseeds; i++) {
        size_t idx;
        node_get(top, top->url.seeds[i].host, top->url.seeds[i].port, &idx);
    }
}

/* The READY node owning key's slot; NULL (and a map refresh due) when there is none. */
static struct store *node_for_key(struct store *top, const void *key, size_t klen)
{
    uint16_t o = top->cl->owner[cluster_slot(key, klen)];
    struct store *n = o == CLUSTER_NO_OWNER ? NULL : top->cl->nodes[o];
    if (n != NULL && n->state == ST_READY)
        return n;
    if (top->cl->mapped)
        cluster_want_map(top);
    return NULL;
}

static void cluster_want_map(struct store *top)
{
    struct store_cluster *cl = top->cl;
    if (cl->map_want || top->state == ST_CLOSED)
        return;
    cl->map_want = true;
    uint64_t since = pc_mono_ms() - cl->map_sent_ms;
    tick_in(top, since >= MAP_MIN_GAP_MS ? 0 : (int64_t)(MAP_MIN_GAP_MS - since));
}

/* Ask a READY node (one owning slots first) for the slot map; the seeds if none is READY. */
static void map_send(struct store *top)
{
    struct store_cluster *cl = top->cl;
    struct store *n = NULL;
    for (int pass = 0; pass < 2 && n == NULL; pass++)
        for (size_t i = 0; i < cl->nnodes && n == NULL; i++)
            if (cl->nodes[i] != NULL && cl->nodes[i]->state == ST_READY &&
                (pass == 1 || cl->owned[i] > 0))
                n = cl->nodes[i];
    if (n == NULL) { /* asked again when one becomes READY (node_ready) */
        seeds_ensure(top);
        return;
    }
    const char *argv[] = {"CLUSTER", cl->slots_only ? "SLOTS" : "SHARDS"};
    snprintf(cl->map_asked, sizeof(cl->map_asked), "%s", n->url.tcp.host);
    if (internal_on(top, n, map_reply, cl->slots_only ? "CLUSTER SLOTS" : "CLUSTER SHARDS", 2, argv,
                    NULL, top->timeout_ms * STEP_TIMEOUT_MULT) == 0) {
        cl->map_inflight = true;
        cl->map_want = false;
        cl->map_sent_ms = pc_mono_ms();
    }
}

/* Slot s is node idx's now (a MOVED, or a map). */
static void slot_own(struct store_cluster *cl, unsigned s, size_t idx)
{
    if (cl->owner[s] != CLUSTER_NO_OWNER)
        cl->owned[cl->owner[s]]--;
    cl->owner[s] = idx == SIZE_MAX ? CLUSTER_NO_OWNER : (uint16_t)idx;
    if (idx != SIZE_MAX)
        cl->owned[idx]++;
}

/* "A:P, B:P, ...": the primaries of m, for the log line that says the map changed. */
static void map_names(const struct cluster_map *m, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < m->nnodes && at + 1 < n; i++) {
        char *a = rurl_addr_text(m->nodes[i].host, m->nodes[i].port);
        int w = snprintf(out + at, n - at, "%s%s", i ? ", " : "", a);
        free(a);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* Make the cluster store's owner table m's (nodes made as needed). */
static void map_apply(struct store *top, const struct cluster_map *m)
{
    struct store_cluster *cl = top->cl;
    size_t *idx = pc_malloc(m->nnodes * sizeof(*idx));
    bool changed = !cl->mapped;
    for (size_t j = 0; j < m->nnodes; j++)
        if (node_get(top, m->nodes[j].host, m->nodes[j].port, &idx[j]) == NULL)
            idx[j] = SIZE_MAX;
    for (size_t s = 0; s < CLUSTER_SLOTS; s++) {
        size_t want = m->owner[s] == CLUSTER_NO_OWNER ? SIZE_MAX : idx[m->owner[s]];
        uint16_t now = cl->owner[s];
        if ((want == SIZE_MAX) != (now == CLUSTER_NO_OWNER) ||
            (now != CLUSTER_NO_OWNER && now != want)) {
            changed = true;
            slot_own(cl, (unsigned)s, want);
        }
    }
    free(idx);
    cl->mapped = true;
    if (changed) {
        char names[512];
        map_names(m, names, sizeof(names));
        log_info("redis: %s: slot map: %zu slots on %zu primaries (%s)", top->where, m->covered,
                 m->nnodes, names);
    }
}

/* A map was refused: counted; the cause is the outage's while there is no map yet. */
static void map_refused(struct store *top, const char *why)
{
    struct store_cluster *cl = top->cl;
    uint64_t now = pc_mono_ms();
    stats_incr(top->st, STAT_redis_cluster_map_errors);
    if (!cl->mapped)
        health_down(top, why);
    if (cl->map_errors_logged_ms == 0 || now - cl->map_errors_logged_ms >= LOG_EVERY_MS) {
        log_info("redis: %s: no slot map from %s: %s", top->where, cl->map_asked, why);
        cl->map_errors_logged_ms = now;
    }
    cluster_want_map(top);
}

/* The reply to CLUSTER SHARDS (or SLOTS): a map, range-checked whole before any of it is used. */
static void map_reply(struct store *top, redisReply *r)
{
    struct store_cluster *cl = top->cl;
    char why[256] = "";
    if (!cl->slots_only && cluster_shards_unknown(r)) { /* Redis before 7 */
        cl->slots_only = true;
        cluster_want_map(top);
        return;
    }
    struct cluster_map *m = pc_calloc(1, sizeof(*m));
    int rc = -1;
    if (r->type == REDIS_REPLY_ERROR)
        snprintf(why, sizeof(why), "CLUSTER %s failed: %.200s", cl->slots_only ? "SLOTS" : "SHARDS",
                 r->str);
    else if (cl->slots_only)
        rc = cluster_map_from_slots(r, cl->map_asked, m, why, sizeof(why));
    else
        rc = cluster_map_from_shards(r, cl->map_asked, m, why, sizeof(why));
    if (rc == 0 && m->nnodes == 0) {
        snprintf(why, sizeof(why), "no primary serves a slot");
        rc = -1;
    }
    if (rc < 0) {
        map_refused(top, why);
    } else {
        stats_incr(top->st, STAT_redis_cluster_maps);
        map_apply(top, m);
        cluster_advance(top);
        cluster_health_check(top);
    }
    cluster_map_free(m);
    free(m);
    if (cl->map_want) /* a MOVED came while it was asked */
        tick_in(top, MAP_MIN_GAP_MS);
}

/* The reply (NULL: its node's connection went) of an internal command of cluster store top. */
static void cluster_internal_reply(struct store *top, struct store_cmd *c, redisReply *r)
{
    struct store_cluster *cl = top->cl;
    if (c->cb.internal == map_reply) {
        cl->map_inflight = false;
        if (r == NULL)
            cluster_want_map(top);
        else
            map_reply(top, r);
        return;
    }
    if (c->gen != cl->gen || (top->state != ST_HANDSHAKE && top->state != ST_BLOCKED))
        return; /* an earlier attempt's */
    if (r == NULL) {
        conn_down(top, "lost the connection to the node of the schema key");
        return;
    }
    c->cb.internal(top, r);
}

/* DISCOVER with a map and the node of pc:schema READY: check the schema (HANDSHAKE). */
static void cluster_advance(struct store *top)
{
    struct store_cluster *cl = top->cl;
    uint16_t o = cl->owner[cl->schema_slot];
    if (top->state != ST_DISCOVER || o == CLUSTER_NO_OWNER || cl->nodes[o] == NULL ||
        cl->nodes[o]->state != ST_READY)
        return;
    /* the timer only catches a check whose node was let go of with its commands */
    state_enter(top, ST_HANDSHAKE, top->timeout_ms * STEP_TIMEOUT_MULT * 3);
    top->blocked_logged = false;
    top->migrate_failed = -1;
    schema_read(top);
}

/* One attempt of a cluster store: a map (the seeds' while there is none), then the schema. */
static void cluster_start(struct store *s)
{
    s->cl->gen++;
    state_enter(s, ST_DISCOVER, -1);
    if (!s->cl->mapped)
        seeds_ensure(s);
    cluster_want_map(s);
    cluster_advance(s);
}

/* Why the cluster's cache does not fully work now, or NULL if it does. */
static const char *cluster_trouble(const struct store *top, char *buf, size_t n)
{
    const struct store_cluster *cl = top->cl;
    size_t covered = 0;
    for (size_t i = 0; i < cl->nnodes; i++) {
        const struct store *node = cl->nodes[i];
        if (node == NULL || cl->owned[i] == 0)
            continue;
        covered += cl->owned[i];
        if (node->clusterdown)
            return cl->down_why;
        if (node->health == HEALTH_DOWN || node->state == ST_BLOCKED) {
            snprintf(buf, n, "%s is not usable", node->where);
            return buf;
        }
    }
    if (covered < CLUSTER_SLOTS) {
        snprintf(buf, n, "%zu slots have no primary", (size_t)CLUSTER_SLOTS - covered);
        return buf;
    }
    return NULL;
}

/* A READY cluster store is UP when nothing is wrong with the nodes that own slots. */
static void cluster_health_check(struct store *top)
{
    char buf[256];
    if (top->state != ST_READY)
        return;
    const char *why = cluster_trouble(top, buf, sizeof(buf));
    if (why == NULL)
        health_up(top);
    else
        health_down(top, why);
}

/* A node's health changed (health_down / health_up of a node come here). */
static void node_health(struct store *node, bool up, const char *why)
{
    struct store *top = node->parent;
    size_t i = node_index(top, node);
    if (up) {
        cluster_health_check(top);
        return;
    }
    if (!top->cl->mapped || (i != SIZE_MAX && top->cl->owned[i] > 0)) {
        char b[320];
        snprintf(b, sizeof(b), "%s: %s", node->where, why);
        health_down(top, b);
    }
    if (top->cl->mapped)
        cluster_want_map(top); /* a failover names another primary */
}

/* A node connected (again): maybe the first map, the schema, or the schema again. */
static void node_ready(struct store *node)
{
    struct store *top = node->parent;
    struct store_cluster *cl = top->cl;
    bool again = node->health != HEALTH_UNKNOWN;
    log_info("redis: %s: connected to %s", top->where, node->where);
    health_up(node);
    if (!cl->mapped && !cl->map_inflight)
        map_send(top);
    uint16_t o = cl->owner[cl->schema_slot];
    if (again && top->state == ST_READY && o != CLUSTER_NO_OWNER && cl->nodes[o] == node) {
        /* it may have come back empty (a restart without persistence): as on a reconnect */
        state_enter(top, ST_DISCOVER, -1);
        top->cl->gen++;
    }
    cluster_advance(top);
}

/* Let go of nodes the map no longer names (a failed-over primary, a seed), once idle. */
static void nodes_prune(struct store *top)
{
    struct store_cluster *cl = top->cl;
    if (!cl->mapped)
        return;
    for (size_t i = 0; i < cl->nnodes; i++) {
        struct store *n = cl->nodes[i];
        if (n == NULL || cl->owned[i] > 0 || n->cmds != NULL)
            continue;
        log_info("redis: %s: %s serves no slot any more: disconnected", top->where, n->where);
        cl->nodes[i] = NULL;
        store_destroy(&n);
    }
}

static void probe_done(void *arg, enum store_status st, long long n)
{
    (void)arg;
    (void)st;
    (void)n;
}

/*
 * Node i said CLUSTERDOWN and no keyed command went there for half a tick (no traffic for
 * its slots): ask it one (PTTL of a key of one of its slots) so that the outage ends when
 * it does. A node with traffic is not asked: its traffic's answers end the outage.
 */
static void probe_keys(struct store *top, size_t i)
{
    char key[32];
    for (unsigned n = 0; n < 4096; n++) {
        int len = snprintf(key, sizeof(key), "pc:probe:{%u}", n);
        if (top->cl->owner[cluster_slot(key, (size_t)len)] == i) {
            (void)store_pttl(top, key, (size_t)len, probe_done, NULL);
            return;
        }
    }
}

static bool cluster_degraded(const struct store *top)
{
    char buf[256];
    return !top->cl->mapped || cluster_trouble(top, buf, sizeof(buf)) != NULL;
}

static void cluster_tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store *top = arg;
    PC_CHECK_OBJ(top, STORE_MAGIC);
    struct store_cluster *cl = top->cl;
    uint64_t now = pc_mono_ms();
    if (cl->map_inflight && now - cl->map_sent_ms > (uint64_t)(top->timeout_ms * STEP_TIMEOUT_MULT))
        cl->map_inflight = false; /* its node was let go of, or lost, with it */
    nodes_prune(top);
    cluster_health_check(top);
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i] != NULL && cl->owned[i] > 0 && cl->nodes[i]->clusterdown &&
            now - cl->nodes[i]->keyed_sent_ms >= MAP_DEGRADED_MS / 2)
            probe_keys(top, i);
    bool degraded = cluster_degraded(top);
    if ((cl->map_want || degraded) && !cl->map_inflight)
        map_send(top);
    if (degraded || cl->map_want || cl->map_inflight)
        tick_in(top, MAP_DEGRADED_MS);
}

/*
 * CLUSTERDOWN from node: it serves nothing now, and the cache is DOWN until every node that
 * said so serves keys again (after a failover the nodes see the cluster come back one by
 * one, some milliseconds apart: the first answer is not the end of the outage).
 */
static void cluster_down_seen(struct store *top, struct store *node, const char *err)
{
    struct store_cluster *cl = top->cl;
    node->clusterdown = true;
    snprintf(cl->down_why, sizeof(cl->down_why), "%s: %.150s", node->where, err);
    health_down(top, cl->down_why);
    cluster_want_map(top);
}

/*
 * Send c (not done, not held by hiredis) on to, within what is left of its
 * time; after ASKING if an ASK sent it there (a TRYAGAIN from the importing
 * node is tried there again, and without ASKING that node answers MOVED).
 */
static int cmd_resend(struct store_cmd *c, struct store *to)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    cmd_unlink(c);
    cmd_link(to, c);
    c->overdue = false;
    if (c->asking && wire_send(to, NULL, NULL, asking, sizeof(asking) - 1) < 0)
        return -1;
    if (wire_send(to, cmd_reply_cb, c, c->wire, c->wire_len) < 0)
        return -1;
    if (cmd_names_key(c))
        to->keyed_sent_ms = pc_mono_ms();
    int64_t left = c->timeout_us - (int64_t)(pc_mono_us() - c->sent_us);
    cmd_arm(c, PC_MAX(left, 1000));
    return 0;
}

/* TRYAGAIN's wait is over: send c again on its node, unless it ended meanwhile. */
static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct store_cmd *c = arg;
    PC_CHECK_OBJ(c, CMD_MAGIC);
    c->parked = false;
    if (c->done) { /* timed out, cancelled or its store destroyed: no one else frees it */
        cmd_free(c);
        return;
    }
    struct store *s = c->s;
    if (s->state != ST_READY || cmd_resend(c, s) < 0) {
        cmd_complete(c, STORE_ERR, NULL, 0, 0);
        cmd_free(c);
    }
}

/* Keep c off the wire for a while (10, 20, 40... ms), then send it again (retry_cb). */
static void cmd_park(struct store_cmd *c)
{
    if (c->retry == NULL)
        c->retry = timer_new(c->s->base, retry_cb, c);
    c->parked = true;
    struct timeval tv = pc_timeval_ms((int64_t)TRYAGAIN_MS << (c->hops - 1));
    timer_add(c->s, c->retry, &tv);
    int64_t left = c->timeout_us - (int64_t)(pc_mono_us() - c->sent_us);
    cmd_arm(c, PC_MAX(left, 1000));
}

/*
 * A node's reply to c (not done) redirects: follow it - c is then sent
 * again, on another node or later, and true is returned - or leave it to the
 * caller to fail (false). SCAN and UNLINK steps are not followed: their
 * cursor belongs to the node they run on.
 */
static bool cluster_redirect(struct store_cmd *c, const redisReply *r)
{
    struct store *node = c->s, *top = node->parent;
    struct cluster_redirect red;
    enum cluster_redirect_kind k = cluster_reply_redirect(r, &red);
    /*
     * A CLUSTERDOWN to a command sent before this node last served keys again is old news:
     * it fails the command, not the cache.
     */
    if (k == CLUSTER_DOWN && c->sent_us >= node->serves_again_us)
        cluster_down_seen(top, node, r->str);
    if (cluster_redirect_elsewhere(k, &red, c->slot))
        return false;
    if (k == CLUSTER_MOVED)
        cluster_want_map(top);
    if (k == CLUSTER_REPLY_OTHER || k == CLUSTER_DOWN || k == CLUSTER_MALFORMED ||
        c->kind == CMD_SCAN || c->kind == CMD_UNLINK || c->wire == NULL || c->hops >= REDIRECTS_MAX)
        return false;
    c->hops++;
    if (k == CLUSTER_TRYAGAIN) {
        stats_incr(top->st, STAT_redis_tryagain);
        cmd_park(c);
        return true;
    }
    size_t idx;
    /* an empty host: the node's own */
    struct store *to = node_get(top, red.host[0] ? red.host : node->url.tcp.host, red.port, &idx);
    stats_incr(top->st, k == CLUSTER_MOVED ? STAT_redis_moved : STAT_redis_ask);
    if (to != NULL && k == CLUSTER_MOVED)
        slot_own(top->cl, red.slot, idx);
    if (to == NULL || to->state != ST_READY)
        return false;
    c->asking = k == CLUSTER_ASK; /* a MOVED after it: the slot is there now */
    return cmd_resend(c, to) == 0;
}

/* --- cluster: delete on every primary ---------------------------------------------------- */

/* One primary's delete ended: the fan-out completes with the last. */
static void fanout_kid_cb(void *arg, enum store_status st, long long n)
{
    struct fanout_kid *k = arg;
    struct store_cmd *p = k->parent;
    PC_CHECK_OBJ(p, CMD_MAGIC);
    k->cmd = NULL;
    if (st != STORE_OK)
        p->failed = true;
    else
        p->deleted += n;
    if (--p->pending > 0)
        return;
    cmd_complete(p, p->failed ? STORE_ERR : STORE_OK, NULL, 0, p->deleted);
    cmd_free(p);
}

/*
 * A delete (delete_start) on every primary at once; NULL unless every slot
 * has a READY primary (a delete that misses a node would leave keys behind).
 */
static struct store_cmd *fanout_delete(struct store *s, const char *pattern,
                                       const struct store_pick *pick, void *each_arg,
                                       store_int_fn *cb, void *arg)
{
    struct store_cluster *cl = s->cl;
    char buf[256];
    if (cluster_trouble(s, buf, sizeof(buf)) != NULL)
        return NULL;
    struct store_cmd *p = cmd_new(s, CMD_FANOUT);
    p->cb.num = cb;
    p->arg = arg;
    p->kids = pc_calloc(cl->nnodes ? cl->nnodes : 1, sizeof(*p->kids));
    for (size_t i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i] == NULL || cl->owned[i] == 0)
            continue;
        struct fanout_kid *k = &p->kids[p->nkids++];
        k->parent = p;
        k->cmd = delete_start(cl->nodes[i], pattern, pick, each_arg, fanout_kid_cb, k);
        if (k->cmd == NULL) { /* a node not READY */
            store_cancel(&p);
            return NULL;
        }
        p->pending++;
    }
    return p;
}

struct slot_key {
    unsigned slot;
    size_t i;
};

static int slot_key_cmp(const void *a, const void *b)
{
    const struct slot_key *x = a, *y = b;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : (x->i < y->i ? -1 : x->i > y->i);
}

/* Put the batch's positions of one slot side by side (each slot's EVAL names only its keys). */
static void pick_group_by_slot(struct pick_state *p)
{
    struct slot_key *sk = pc_malloc((p->nkeys ? p->nkeys : 1) * sizeof(*sk));
    for (size_t i = 0; i < p->nkeys; i++) {
        const char *k = pick_key(p, i);
        sk[i].slot = cluster_slot(k, strlen(k));
        sk[i].i = i;
    }
    qsort(sk, p->nkeys, sizeof(*sk), slot_key_cmp);
    for (size_t i = 0; i < p->nkeys; i++)
        p->order[i] = sk[i].i;
    free(sk);
}

/* An UNLINK of one slot of a batch but the last: its reply only adds to the count. */
static void unlink_part_cb(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct store_cmd *c = privdata; /* alive: the batch's last UNLINK, after this, frees it */
    redisReply *r = reply;
    PC_CHECK_OBJ(c, CMD_MAGIC);
    struct store *s = ac->data;
    if (s != NULL && r != NULL)
        s->last_read_us = pc_mono_us();
    if (c->done || r == NULL)
        return; /* the last reply ends c */
    if (r->type == REDIS_REPLY_INTEGER)
        c->deleted += r->integer;
    else
        c->part_failed = true;
}

/*
 * A cluster node's SCAN batch holds keys of many slots, and a cluster refuses
 * a command with keys of two: one UNLINK per slot, pipelined. All are queued
 * in this call on the same context (hiredis takes all or, disconnecting,
 * none), the last one with c, so its reply comes after every other's.
 */
static bool step_unlink_slots(struct store_cmd *c, const redisReply *keys)
{
    struct store *s = c->s;
    size_t n = keys->elements;
    if (n + 1 > INT_MAX || s->state != ST_READY) {
        cmd_fail(c, NULL, "UNLINK");
        return false;
    }
    struct slot_key *sk = pc_malloc(n * sizeof(*sk));
    const char **argv = pc_malloc((n + 1) * sizeof(*argv));
    size_t *lens = pc_malloc((n + 1) * sizeof(*lens));
    for (size_t i = 0; i < n; i++)
        sk[i] = (struct slot_key){cluster_slot(keys->element[i]->str, keys->element[i]->len), i};
    qsort(sk, n, sizeof(*sk), slot_key_cmp);
    bool sent = true;
    argv[0] = "UNLINK";
    lens[0] = 6;
    for (size_t from = 0, to; from < n; from = to) {
        for (to = from; to < n && sk[to].slot == sk[from].slot; to++) {
            argv[1 + to - from] = keys->element[sk[to].i]->str;
            lens[1 + to - from] = keys->element[sk[to].i]->len;
        }
        int argc = (int)(to - from + 1);
        if (to == n) {
            c->kind = CMD_UNLINK;
            sent = step_send(c, argc, argv, lens);
            break;
        }
        char *cmd = NULL;
        int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
        if (len < 0 || wire_send(s, unlink_part_cb, c, cmd, (size_t)len) < 0)
            c->part_failed = true;
        free(cmd);
    }
    free(sk);
    free(argv);
    free(lens);
    return sent;
}
