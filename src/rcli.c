/*
 * rcli.c - the blocking Redis connection of the tools and the background
 * threads (see pc_rcli.h). Owns the hiredis context and the parsed URL of a
 * struct rcli, and the one way a blocking client reaches the server that
 * holds the data:
 *
 *   redis://, unix:  connect ─▶ [AUTH] ─▶ [SELECT]
 *   sentinel://      sentinel i: get-master-addr-by-name ─▶ connect ─▶
 *                    [AUTH] ─▶ [SELECT] ─▶ ROLE = master? ─ no ─▶ sentinel i + 1
 *   cluster://       a node (the links, then the seeds): CLUSTER SHARDS (or SLOTS)
 *                    ─▶ slot map; a command ─▶ slot of its key ─▶ the owner's link
 *                    (connect ─▶ [AUTH] on first use) ─▶ MOVED: that node, map stale
 *                                                     ─▶ ASK: ASKING + that node, once
 *
 * A cluster client (struct rcli_cluster) owns its map and its links, one per
 * node it talked to. A link whose connection failed keeps its context (the
 * caller may still read its errstr) until it is used again, when it is
 * connected anew, or the map no longer names its node.
 */
#include "pc_rcli.h"
#include "pc_redisev.h"
#include "pc_cluster.h"
#include "pc_rurl.h"
#include "pc_conf.h"
#include "pc_sentinel.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define RCLI_MIN_TIMEOUT_MS 1000
#define SENTINEL_MAX_MS     1000 /* a sentinel answers from memory: never wait longer for one */
#define REDIRECTS_MAX       5    /* MOVED / ASK / TRYAGAIN followed for one command */
#define TRYAGAIN_MS         20   /* first pause after TRYAGAIN, doubled each time */

/* What a reply on a blocking connection may hold (see redisev_guard). */
static const struct redisev_caps rcli_caps = {RCLI_REPLY_MAX, RCLI_REPLY_ELEMENTS};

struct rcli_link {
    char host[CLUSTER_HOST_MAX];
    int port;
    redisContext *rc; /* NULL: not connected; rc->err set: failed, reconnected on next use */
};

struct rcli_cluster {
    struct cluster_map map;
    bool mapped; /* map holds a slot map read from a node */
    bool stale;  /* a redirection or a failure said the map is behind: read it again */
    struct rcli_link *links;
    size_t nlinks;
    int64_t timeout_ms;
};

/*
 * A blocking reply, whole within the context's timeout (see redisev_get_reply): a
 * reply that ran past it says "timed out (no reply in time)" in errstr, not
 * errno's "Resource temporarily unavailable", for every message made from it.
 */
int rcli_get_reply(redisContext *rc, void **reply)
{
    return redisev_get_reply(rc, reply, RCLI_REPLY_MAX, 0);
}

static redisReply *command_argv(redisContext *rc, int argc, const char **argv, const size_t *lens)
{
    void *reply = NULL;
    if (redisAppendCommandArgv(rc, argc, argv, lens) == REDIS_OK)
        rcli_get_reply(rc, &reply);
    return reply;
}

/*
 * What a connection lost before its first reply may be: a TLS-only port
 * resets a plain-text client without a word. "" when rc failed otherwise.
 * A peer gone before the command was written shows as a broken pipe (a
 * server that closes at once: which error comes depends on who is first).
 */
static const char *reset_hint(const redisContext *rc)
{
    bool reset = rc->err == REDIS_ERR_EOF ||
                 (rc->err == REDIS_ERR_IO && (strstr(rc->errstr, "reset by peer") != NULL ||
                                              strstr(rc->errstr, "Broken pipe") != NULL));
    return reset ? RURL_TLS_HINT : "";
}

void rcli_error(struct rcli *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->errmsg, sizeof(k->errmsg), fmt, ap);
    va_end(ap);
    if (k->quiet)
        return;
    fflush(stdout);
    fprintf(stderr, "promptcache %s: %s\n", k->tool ? k->tool : "", k->errmsg);
}

static void cluster_free(struct rcli_cluster **clp);
static redisReply *call(struct rcli *k, int argc, const char **argv, const size_t *lens);

void rcli_close(struct rcli *k)
{
    if (k->cl != NULL)
        cluster_free(&k->cl); /* k->rc is one of its links */
    else if (k->rc != NULL)
        redisFree(k->rc);
    k->rc = NULL;
    rurl_free(&k->url);
    PC_FREE(&k->where);
}

redisReply *rcli_command(struct rcli *k, const char *what, int argc, const char **argv,
                         const size_t *lens)
{
    redisReply *r = call(k, argc, argv, lens);
    if (r == NULL) {
        char why[sizeof(k->errmsg)];
        snprintf(why, sizeof(why), "%s", k->errmsg);
        rcli_error(k, "%s: %s: %s", k->where, what, why);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        rcli_error(k, "%s: %s failed: %s", k->where, what, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* One setup command (first: the connection's first); false with err set on failure or an error. */
static bool setup(redisContext *rc, int argc, const char **argv, const char *what, bool first,
                  char *err, size_t errlen)
{
    redisReply *r = command_argv(rc, argc, argv, NULL);
    if (r == NULL) {
        snprintf(err, errlen, "%s: %s%s", what, rc->errstr[0] ? rc->errstr : "no reply",
                 first ? reset_hint(rc) : "");
        return false;
    }
    bool ok = r->type != REDIS_REPLY_ERROR;
    if (!ok)
        snprintf(err, errlen, "%s failed: %.160s", what, r->str);
    freeReplyObject(r);
    return ok;
}

/* AUTH [user] password and SELECT db, as u asks. */
static bool setup_all(redisContext *rc, const struct rurl *u, char *err, size_t errlen)
{
    char db[16];
    snprintf(db, sizeof(db), "%d", u->db);
    const char *auth[] = {"AUTH", u->user ? u->user : u->password, u->password};
    const char *sel[] = {"SELECT", db};
    return (u->password == NULL || setup(rc, u->user ? 3 : 2, auth, "AUTH", true, err, errlen)) &&
           (u->db == 0 || setup(rc, 2, sel, "SELECT", u->password == NULL, err, errlen));
}

/* ROLE says master; else false with err. */
static bool is_primary(redisContext *rc, char *err, size_t errlen)
{
    const char *argv[] = {"ROLE"};
    redisReply *r = command_argv(rc, 1, argv, NULL);
    char role[64];
    bool ok = sentinel_role_ok(r, role, sizeof(role));
    if (r == NULL)
        snprintf(err, errlen, "ROLE: %s", rc->errstr[0] ? rc->errstr : "no reply");
    else if (!ok)
        snprintf(err, errlen, "not a primary (role %s): the sentinel's view is behind", role);
    if (r != NULL)
        freeReplyObject(r);
    return ok;
}

/*
 * Connect to host:port (or the socket) and set it up; NULL with err, which
 * names the server as where does.
 */
static redisContext *dial_one(const struct rurl *u, const char *host, int port, bool check_role,
                              struct timeval tv, const char *where, char *err, size_t errlen)
{
    redisContext *rc = u->kind == RURL_UNIX ? redisConnectUnixWithTimeout(u->unix_path, tv)
                                            : redisConnectWithTimeout(host, port, tv);
    char why[224] = "";
    if (rc != NULL && rc->err == 0)
        redisev_guard(rc->reader, &rcli_caps); /* before the first reply, setup_all's */
    if (rc == NULL || rc->err) {
        snprintf(err, errlen, "cannot connect to %s: %s", where, rc ? rc->errstr : "out of memory");
    } else if (redisSetTimeout(rc, tv) == REDIS_OK && setup_all(rc, u, why, sizeof(why)) &&
               (!check_role || is_primary(rc, why, sizeof(why)))) {
        return rc;
    } else {
        snprintf(err, errlen, "%s: %s", where, why[0] ? why : "cannot set a timeout");
    }
    if (rc != NULL)
        redisFree(rc);
    return NULL;
}

/* Ask sentinel i, then connect to the primary it names; NULL with why. */
static redisContext *dial_via(const struct rurl *u, size_t i, struct timeval tv, int64_t timeout_ms,
                              char *addr, size_t addrlen, char *why, size_t whylen)
{
    char *host = NULL;
    int port;
    if (sentinel_query(u, i, PC_MIN(timeout_ms, SENTINEL_MAX_MS), &host, &port, why, whylen) < 0)
        return NULL;
    char *at = rurl_addr_text(host, port);
    struct pc_buf where = PC_BUF_INIT;
    pc_buf_printf(&where, "primary %s at %s", u->master, at);
    redisContext *rc = dial_one(u, host, port, true, tv, pc_buf_cstr(&where), why, whylen);
    if (rc != NULL && addr != NULL)
        snprintf(addr, addrlen, "%s", at);
    free(at);
    free(host);
    pc_buf_free(&where);
    return rc;
}

/* The sentinels in turn: the first primary one of them names. err gets every failure. */
static redisContext *dial_sentinel(const struct rurl *u, struct timeval tv, int64_t timeout_ms,
                                   size_t *next, char *addr, size_t addrlen, char *err,
                                   size_t errlen)
{
    size_t first = next ? *next % u->nsentinels : 0;
    struct pc_buf all = PC_BUF_INIT;
    redisContext *rc = NULL;
    for (size_t k = 0; k < u->nsentinels && rc == NULL; k++) {
        size_t i = (first + k) % u->nsentinels;
        char why[320];
        rc = dial_via(u, i, tv, timeout_ms, addr, addrlen, why, sizeof(why));
        if (rc != NULL && next != NULL)
            *next = i;
        else if (rc == NULL)
            pc_buf_printf(&all, "%s%s", all.len ? "; " : "", why);
    }
    if (rc == NULL)
        snprintf(err, errlen, "%s", pc_buf_cstr(&all));
    pc_buf_free(&all);
    return rc;
}

/* cluster:// without routing: the first seed that answers (a node of the cluster). */
static redisContext *dial_seed(const struct rurl *u, struct timeval tv, char *addr, size_t addrlen,
                               char *err, size_t errlen)
{
    struct pc_buf all = PC_BUF_INIT;
    redisContext *rc = NULL;
    for (size_t i = 0; i < u->nseeds && rc == NULL; i++) {
        char why[320];
        char *at = rurl_addr_text(u->seeds[i].host, u->seeds[i].port);
        rc = dial_one(u, u->seeds[i].host, u->seeds[i].port, false, tv, at, why, sizeof(why));
        if (rc != NULL && addr != NULL)
            snprintf(addr, addrlen, "%s", at);
        else if (rc == NULL)
            pc_buf_printf(&all, "%s%s", all.len ? "; " : "", why);
        free(at);
    }
    if (rc == NULL)
        snprintf(err, errlen, "%s", pc_buf_cstr(&all));
    pc_buf_free(&all);
    return rc;
}

redisContext *rcli_dial(const struct rurl *u, int64_t timeout_ms, size_t *next_sentinel, char *addr,
                        size_t addrlen, char *err, size_t errlen)
{
    struct timeval tv = pc_timeval_ms(PC_MAX(timeout_ms, 1));
    if (u->kind == RURL_SENTINEL)
        return dial_sentinel(u, tv, timeout_ms, next_sentinel, addr, addrlen, err, errlen);
    if (u->kind == RURL_CLUSTER)
        return dial_seed(u, tv, addr, addrlen, err, errlen);
    char *where = rurl_format(u, false);
    if (addr != NULL) {
        char *at = u->kind == RURL_TCP ? rurl_addr_text(u->tcp.host, u->tcp.port)
                                       : pc_strdup(u->unix_path);
        snprintf(addr, addrlen, "%s", at);
        free(at);
    }
    redisContext *rc = dial_one(u, u->tcp.host, u->tcp.port, false, tv, where, err, errlen);
    free(where);
    return rc;
}

int rcli_connect(struct rcli *k, const struct conf *conf, const char *tool)
{
    /* A write to a connection Redis dropped must fail with EPIPE, not kill the tool. */
    signal(SIGPIPE, SIG_IGN);
    return rcli_open(k, conf->redis, conf->redis_timeout, tool);
}

static int cluster_open(struct rcli *k, int64_t timeout_ms);

int rcli_open(struct rcli *k, const char *url, int64_t timeout_ms, const char *tool)
{
    char err[512];
    k->tool = tool;
    k->rc = NULL; /* callers may hand in a struct they did not zero */
    k->cl = NULL;
    k->answered = false;
    if (rurl_parse(url, 0, &k->url, err, sizeof(err)) < 0) {
        rcli_error(k, "invalid redis URL: %s", err);
        return -1;
    }
    k->where = rurl_format(&k->url, false);
    if (k->url.kind == RURL_CLUSTER)
        return cluster_open(k, PC_MAX(timeout_ms, RCLI_MIN_TIMEOUT_MS));
    char addr[300];
    k->rc = rcli_dial(&k->url, PC_MAX(timeout_ms, RCLI_MIN_TIMEOUT_MS), &k->next_sentinel, addr,
                      sizeof(addr), err, sizeof(err));
    if (k->rc == NULL) {
        if (k->url.kind == RURL_SENTINEL)
            rcli_error(k, "%s: %s", k->where, err);
        else
            rcli_error(k, "%s", err);
        return -1;
    }
    /* AUTH, SELECT or ROLE answered already */
    k->answered = k->url.password != NULL || k->url.db != 0 || k->url.kind == RURL_SENTINEL;
    if (k->url.kind == RURL_SENTINEL) {
        struct pc_buf b = PC_BUF_INIT;
        pc_buf_printf(&b, "%s (primary at %s)", k->where, addr);
        free(k->where);
        k->where = pc_buf_cstr(&b);
    }
    return 0;
}

bool rcli_str_is(const struct redisReply *r, const char *s)
{
    size_t n = strlen(s);
    return (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) && r->len == n &&
           memcmp(r->str, s, n) == 0;
}

/* --- cluster:// ------------------------------------------------------------------------ */

static void link_close(struct rcli_link *l)
{
    if (l->rc != NULL)
        redisFree(l->rc);
    l->rc = NULL;
}

static void cluster_free(struct rcli_cluster **clp)
{
    struct rcli_cluster *cl = *clp;
    *clp = NULL;
    for (size_t i = 0; i < cl->nlinks; i++)
        link_close(&cl->links[i]);
    free(cl->links);
    cluster_map_free(&cl->map);
    free(cl);
}

static struct rcli_link *link_find(struct rcli_cluster *cl, const char *host, int port)
{
    for (size_t i = 0; i < cl->nlinks; i++)
        if (cl->links[i].port == port && strcmp(cl->links[i].host, host) == 0)
            return &cl->links[i];
    cl->links = pc_realloc(cl->links, (cl->nlinks + 1) * sizeof(*cl->links));
    struct rcli_link *l = &cl->links[cl->nlinks++];
    memset(l, 0, sizeof(*l));
    snprintf(l->host, sizeof(l->host), "%s", host);
    l->port = port;
    return l;
}

/*
 * The connection of node host:port, made (AUTH done) if there is none or the
 * last one failed; NULL with why. The failed context is freed here, so no
 * one may hold it across this call (k->rc is set again by every caller).
 */
static redisContext *link_get(struct rcli *k, const char *host, int port, char *why, size_t n)
{
    struct rcli_link *l = link_find(k->cl, host, port);
    if (l->rc != NULL && l->rc->err == 0)
        return l->rc;
    if (k->rc == l->rc)
        k->rc = NULL;
    link_close(l);
    char *at = rurl_addr_text(host, port);
    struct pc_buf where = PC_BUF_INIT;
    pc_buf_printf(&where, "cluster node %s", at);
    l->rc = dial_one(&k->url, host, port, false, pc_timeval_ms(k->cl->timeout_ms),
                     pc_buf_cstr(&where), why, n);
    pc_buf_free(&where);
    free(at);
    return l->rc;
}

/* Close the links of nodes the map does not name (a failed-over primary, a seed replica). */
static void links_prune(struct rcli *k)
{
    struct rcli_cluster *cl = k->cl;
    size_t kept = 0;
    for (size_t i = 0; i < cl->nlinks; i++) {
        struct rcli_link *l = &cl->links[i];
        bool named = false;
        for (size_t j = 0; j < cl->map.nnodes && !named; j++)
            named = cl->map.nodes[j].port == l->port && strcmp(cl->map.nodes[j].host, l->host) == 0;
        if (named) {
            cl->links[kept++] = *l;
            continue;
        }
        if (k->rc == l->rc)
            k->rc = NULL;
        link_close(l);
    }
    cl->nlinks = kept;
}

/* Read the slot map from rc (of a node on host): 0, or -1 with why. */
static int map_read(struct rcli_cluster *cl, redisContext *rc, const char *host, char *why,
                    size_t n)
{
    struct cluster_map m = {0};
    bool slots = false; /* CLUSTER SLOTS asked: Redis before 7 */
    const char *what = "CLUSTER SHARDS";
    const char *argv[] = {"CLUSTER", "SHARDS"};
    redisReply *r = command_argv(rc, 2, argv, NULL);
    int rv = -1;
    if (r != NULL && cluster_shards_unknown(r)) {
        freeReplyObject(r);
        slots = true;
        argv[1] = "SLOTS";
        what = "CLUSTER SLOTS";
        r = command_argv(rc, 2, argv, NULL);
    }
    if (r == NULL) {
        snprintf(why, n, "%s: %s", what, rc->errstr[0] ? rc->errstr : "no reply");
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, n, "%s failed: %.200s", what, r->str);
    } else {
        rv = slots ? cluster_map_from_slots(r, host, &m, why, n)
                   : cluster_map_from_shards(r, host, &m, why, n);
        if (rv == 0 && m.nnodes == 0) {
            snprintf(why, n, "the cluster has no primary serving a slot");
            rv = -1;
        }
    }
    if (r != NULL)
        freeReplyObject(r);
    if (rv < 0) {
        cluster_map_free(&m);
        return -1;
    }
    cluster_map_free(&cl->map);
    cl->map = m;
    cl->mapped = true;
    cl->stale = false;
    return 0;
}

/* Ask the map of a node this client knows (its links first, then the seeds); 0 or -1. */
static int map_refresh(struct rcli *k)
{
    struct rcli_cluster *cl = k->cl;
    struct pc_buf all = PC_BUF_INIT;
    size_t nknown = cl->nlinks;
    int rv = -1;
    for (size_t i = 0; i < nknown + k->url.nseeds && rv < 0; i++) {
        char host[CLUSTER_HOST_MAX], why[320];
        int port = i < nknown ? cl->links[i].port : k->url.seeds[i - nknown].port;
        snprintf(host, sizeof(host), "%s",
                 i < nknown ? cl->links[i].host : k->url.seeds[i - nknown].host);
        redisContext *rc = link_get(k, host, port, why, sizeof(why));
        if (rc != NULL && map_read(cl, rc, host, why, sizeof(why)) == 0)
            rv = 0;
        else
            pc_buf_printf(&all, "%s%s", all.len ? "; " : "", why);
    }
    if (rv == 0)
        links_prune(k);
    else
        snprintf(k->errmsg, sizeof(k->errmsg), "no node gave a slot map: %s", pc_buf_cstr(&all));
    pc_buf_free(&all);
    return rv;
}

/* The connection of the primary owning slot (the map read again when stale); NULL, errmsg set. */
static redisContext *slot_context(struct rcli *k, unsigned slot)
{
    struct rcli_cluster *cl = k->cl;
    if ((cl->stale || !cl->mapped) && map_refresh(k) < 0)
        return NULL;
    const struct cluster_node *n = cluster_map_node(&cl->map, slot);
    if (n == NULL && map_refresh(k) == 0)
        n = cluster_map_node(&cl->map, slot);
    if (n == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "no primary serves slot %u", slot);
        return NULL;
    }
    char why[320];
    redisContext *rc = link_get(k, n->host, n->port, why, sizeof(why));
    if (rc == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "%s", why);
        cl->stale = true; /* a failover may have moved the slot: ask again next time */
    }
    return rc;
}

/* The connection a keyless command goes to: the current one, else the first primary's. */
static redisContext *any_context(struct rcli *k)
{
    if (k->rc != NULL && k->rc->err == 0)
        return k->rc;
    return slot_context(k, 0);
}

bool rcli_redirected(const redisReply *r)
{
    struct cluster_redirect red;
    return cluster_reply_redirect(r, &red) != CLUSTER_REPLY_OTHER;
}

static void pause_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ASKING on to: the next command there is for a slot it imports; false with errmsg. */
static bool asking_send(struct rcli *k, redisContext *to)
{
    const char *asking[] = {"ASKING"};
    redisReply *a = command_argv(to, 1, asking, NULL);
    if (a == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "ASKING: %s",
                 to->errstr[0] ? to->errstr : "no reply");
        return false;
    }
    freeReplyObject(a);
    return true;
}

/*
 * After a redirection: the connection to try next, or NULL. *asking says the
 * command is on the node an ASK named: ASKING goes before every try there,
 * also after a TRYAGAIN from it (without it that node answers MOVED back).
 */
static redisContext *follow(struct rcli *k, redisContext *rc, const struct cluster_redirect *red,
                            int hop, bool *asking)
{
    char why[320], host[CLUSTER_HOST_MAX];
    struct rcli_link *from = NULL;
    for (size_t i = 0; i < k->cl->nlinks && from == NULL; i++)
        if (k->cl->links[i].rc == rc)
            from = &k->cl->links[i];
    if (red->kind == CLUSTER_TRYAGAIN) {
        pause_ms((int64_t)TRYAGAIN_MS << hop);
        return !*asking || asking_send(k, rc) ? rc : NULL;
    }
    /* an empty host in the redirection: the same host as the node that sent it */
    snprintf(host, sizeof(host), "%s", red->host[0] || from == NULL ? red->host : from->host);
    if (red->kind == CLUSTER_MOVED)
        k->cl->stale = true;
    redisContext *to = link_get(k, host, red->port, why, sizeof(why));
    if (to == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "%s", why);
        return NULL;
    }
    *asking = red->kind == CLUSTER_ASK;
    return !*asking || asking_send(k, to) ? to : NULL;
}

/*
 * One command on rc, following redirections; k->rc is the context of the
 * last attempt. slot is its key's (-1: none): a MOVED or ASK naming another
 * is not about this command and is returned as it is, not followed.
 */
static redisReply *routed(struct rcli *k, redisContext *rc, int slot, int argc, const char **argv,
                          const size_t *lens)
{
    redisReply *r = NULL;
    bool asking = false;
    for (int hop = 0; rc != NULL; hop++) {
        k->rc = rc;
        r = command_argv(rc, argc, argv, lens);
        struct cluster_redirect red;
        enum cluster_redirect_kind kind = cluster_reply_redirect(r, &red);
        if (r == NULL) {
            snprintf(k->errmsg, sizeof(k->errmsg), "%s", rc->errstr[0] ? rc->errstr : "no reply");
            k->cl->stale = true;
            return NULL;
        }
        if (kind == CLUSTER_REPLY_OTHER || kind == CLUSTER_DOWN || kind == CLUSTER_MALFORMED ||
            hop >= REDIRECTS_MAX || cluster_redirect_elsewhere(kind, &red, slot))
            return r;
        freeReplyObject(r);
        r = NULL;
        rc = follow(k, rc, &red, hop, &asking);
    }
    return r;
}

/* A reply made here: [cursor, []] (the end of an iteration over nodes the map no longer has). */
static redisReply *scan_end_reply(void)
{
    static const char resp[] = "*2\r\n$1\r\n0\r\n*0\r\n";
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    redisReaderFeed(rd, resp, sizeof(resp) - 1);
    if (redisReaderGetReply(rd, &r) != REDIS_OK)
        r = NULL;
    redisReaderFree(rd);
    return r;
}

/* Replace a string reply's text (hiredis allocates it with malloc, frees it with free). */
static void reply_set_str(redisReply *e, const char *s)
{
    free(e->str);
    e->str = pc_strdup(s);
    e->len = strlen(s);
}

/*
 * SCAN over every primary in turn (ordered by their first slot). The cursor
 * is "0" to begin, then "CURSOR@NODE" as returned here; "0" at the end.
 */
static redisReply *scan_all(struct rcli *k, int argc, const char **argv, const size_t *lens)
{
    struct rcli_cluster *cl = k->cl;
    const char *at = memchr(argv[1], '@', lens ? lens[1] : strlen(argv[1]));
    char cursor[32];
    size_t node = at ? strtoul(at + 1, NULL, 10) : 0;
    snprintf(cursor, sizeof(cursor), "%.*s", at ? (int)(at - argv[1]) : 31, argv[1]);
    if ((cl->stale || !cl->mapped) && map_refresh(k) < 0)
        return NULL;
    if (node >= cl->map.nnodes)
        return scan_end_reply();
    char why[320];
    redisContext *rc =
        link_get(k, cl->map.nodes[node].host, cl->map.nodes[node].port, why, sizeof(why));
    if (rc == NULL) {
        snprintf(k->errmsg, sizeof(k->errmsg), "%s", why);
        return NULL;
    }
    const char **av = pc_malloc((size_t)argc * sizeof(*av));
    size_t *lv = pc_malloc((size_t)argc * sizeof(*lv));
    for (int i = 0; i < argc; i++) {
        av[i] = i == 1 ? cursor : argv[i];
        lv[i] = i == 1 ? strlen(cursor) : lens ? lens[i] : strlen(argv[i]);
    }
    redisReply *r = routed(k, rc, -1, argc, av, lv);
    free(av);
    free(lv);
    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < 24) {
        char next[48];
        bool last = strcmp(r->element[0]->str, "0") == 0;
        if (last && node + 1 < cl->map.nnodes)
            snprintf(next, sizeof(next), "0@%zu", node + 1);
        else if (!last)
            snprintf(next, sizeof(next), "%s@%zu", r->element[0]->str, node);
        if (!last || node + 1 < cl->map.nnodes)
            reply_set_str(r->element[0], next);
    }
    return r;
}

/* A command, routed; NULL with the reason alone (no URL, no command name) in k->errmsg. */
static redisReply *call(struct rcli *k, int argc, const char **argv, const size_t *lens)
{
    if (k->cl == NULL) {
        redisReply *r = command_argv(k->rc, argc, argv, lens);
        if (r == NULL)
            snprintf(k->errmsg, sizeof(k->errmsg), "%s%s",
                     k->rc->errstr[0] ? k->rc->errstr : "no reply",
                     k->answered ? "" : reset_hint(k->rc));
        k->answered = true;
        return r;
    }
    if (argc >= 2 && strcasecmp(argv[0], "SCAN") == 0)
        return scan_all(k, argc, argv, lens);
    int ki = cluster_key_index(argc, argv, lens);
    int slot = ki < 0 ? -1 : (int)cluster_slot(argv[ki], lens ? lens[ki] : strlen(argv[ki]));
    redisContext *rc = slot < 0 ? any_context(k) : slot_context(k, (unsigned)slot);
    return rc != NULL ? routed(k, rc, slot, argc, argv, lens) : NULL;
}

/* Put "WHERE: what: " before the reason k->errmsg holds. */
static void errmsg_prefix(struct rcli *k, const char *what, size_t wlen)
{
    char why[sizeof(k->errmsg)];
    snprintf(why, sizeof(why), "%s", k->errmsg);
    if (what != NULL)
        snprintf(k->errmsg, sizeof(k->errmsg), "%.160s: %.*s: %.280s", k->where,
                 (int)PC_MIN(wlen, 64), what, why);
    else
        snprintf(k->errmsg, sizeof(k->errmsg), "%.160s: %.340s", k->where, why);
}

redisReply *rcli_call(struct rcli *k, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = call(k, argc, argv, lens);
    if (r == NULL)
        errmsg_prefix(k, argv[0], lens ? lens[0] : strlen(argv[0]));
    return r;
}

int rcli_route(struct rcli *k, const void *key, size_t klen)
{
    if (k->cl == NULL)
        return k->rc != NULL ? 0 : -1;
    redisContext *rc = slot_context(k, cluster_slot(key, klen));
    if (rc == NULL) {
        errmsg_prefix(k, NULL, 0);
        return -1;
    }
    k->rc = rc;
    return 0;
}

/* cluster://: read the slot map from a seed; k->rc is the connection it came from. */
static int cluster_open(struct rcli *k, int64_t timeout_ms)
{
    k->cl = pc_calloc(1, sizeof(*k->cl));
    k->cl->timeout_ms = timeout_ms;
    if (map_refresh(k) < 0) {
        char why[sizeof(k->errmsg)];
        snprintf(why, sizeof(why), "%s", k->errmsg);
        rcli_error(k, "%s: %s", k->where, why);
        return -1;
    }
    const struct cluster_node *n = &k->cl->map.nodes[0];
    char why[320];
    k->rc = link_get(k, n->host, n->port, why, sizeof(why));
    if (k->rc == NULL) {
        rcli_error(k, "%s: %s", k->where, why);
        return -1;
    }
    return 0;
}

int rcli_hscan(struct rcli *k, const char *key, size_t max, rcli_pair_fn *fn, void *arg)
{
    char cursor[32] = "0";
    size_t seen = 0;
    do {
        const char *argv[] = {"HSCAN", key, cursor, "COUNT", "1000"};
        redisReply *rep = call(k, 5, argv, NULL);
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR &&
            strncmp(rep->str, "WRONGTYPE", 9) == 0) {
            freeReplyObject(rep); /* a key of another type under the name: no hash to read */
            return RCLI_NOT_A_HASH;
        }
        if (rep == NULL) {
            char why[sizeof(k->errmsg)];
            snprintf(why, sizeof(why), "%s", k->errmsg);
            rcli_error(k, "%s: HSCAN: %s", k->where, why);
            return -1;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            rcli_error(k, "%s: HSCAN failed: %s", k->where, rep->str);
            freeReplyObject(rep);
            return -1;
        }
        bool ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
                  rep->element[0]->type == REDIS_REPLY_STRING && rep->element[0]->len < 32 &&
                  rep->element[1]->type == REDIS_REPLY_ARRAY;
        bool more = true;
        if (ok) {
            snprintf(cursor, sizeof(cursor), "%s", rep->element[0]->str);
            const redisReply *page = rep->element[1];
            for (size_t i = 0; more && i + 1 < page->elements; i += 2, seen++)
                more = fn(arg, page->element[i], page->element[i + 1]);
        }
        freeReplyObject(rep);
        if (!ok) {
            rcli_error(k, "%s: unexpected HSCAN reply for %s", k->where, key);
            return -1;
        }
        if (strcmp(cursor, "0") != 0 && (!more || seen >= max))
            return 1;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}
