/*
 * cluster.c - Redis Cluster arithmetic and replies (see pc_cluster.h). Owns
 * nothing but the slot maps it builds: hash slots, the routing key of a
 * command, the parsing of redirections and of CLUSTER SHARDS / CLUSTER SLOTS.
 *
 *   CLUSTER SHARDS: [[ "slots", [0, 5460, ...], "nodes", [[ "ip", ..., "port", 7000,
 *                     "endpoint", ..., "role", "master", ... ], ...] ], ...]
 *   CLUSTER SLOTS:  [[ 0, 5460, [ "127.0.0.1", 7000, id, ... ], [replica], ... ], ...]
 *
 * (hiredis 0.14 speaks RESP2, so the maps of SHARDS come as flat name/value
 * arrays.)
 */
#include "pc_cluster.h"
#include "pc_util.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hiredis/hiredis.h>

/*
 * A byte at a time through a table of the 256 one-byte CRCs, made once: the
 * bit-by-bit loop took 1.1 us for an entry's tag (about 100 bytes), on
 * every command of the request path.
 */
static uint16_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_make(void)
{
    for (unsigned b = 0; b < 256; b++) {
        uint16_t crc = (uint16_t)(b << 8);
        for (int k = 0; k < 8; k++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        crc_table[b] = crc;
    }
}

uint16_t cluster_crc16(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint16_t crc = 0;
    pthread_once(&crc_once, crc_table_make);
    for (size_t i = 0; i < n; i++)
        crc = (uint16_t)(crc << 8) ^ crc_table[(crc >> 8) ^ b[i]];
    return crc;
}

unsigned cluster_slot(const void *key, size_t n)
{
    const char *k = key;
    const char *open = memchr(k, '{', n);
    if (open != NULL) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = memchr(open + 1, '}', n - from);
        if (close != NULL && close > open + 1) /* "{}" is no tag: the whole key counts */
            return cluster_crc16(open + 1, (size_t)(close - open - 1)) & (CLUSTER_SLOTS - 1);
    }
    return cluster_crc16(k, n) & (CLUSTER_SLOTS - 1);
}

static bool arg_is(const char *a, size_t len, const char *name)
{
    return len == strlen(name) && strncasecmp(a, name, len) == 0;
}

static size_t arg_len(const char **argv, const size_t *lens, int i)
{
    return lens != NULL ? lens[i] : strlen(argv[i]);
}

/* EVAL script numkeys key...: the first key, if numkeys says there is one. */
static int eval_key(int argc, const char **argv, const size_t *lens)
{
    if (argc < 4)
        return -1;
    size_t n = arg_len(argv, lens, 2);
    return n > 0 && n < 8 && argv[2][0] >= '1' && argv[2][0] <= '9' ? 3 : -1;
}

/* XREAD [COUNT n] [BLOCK ms] STREAMS key... id...: the first key. */
static int streams_key(int argc, const char **argv, const size_t *lens)
{
    for (int i = 1; i + 1 < argc; i++)
        if (arg_is(argv[i], arg_len(argv, lens, i), "STREAMS"))
            return i + 1;
    return -1;
}

int cluster_key_index(int argc, const char **argv, const size_t *lens)
{
    static const char *const keyless[] = {"SCAN",  "PING",   "INFO", "CLUSTER",  "ASKING",
                                          "AUTH",  "SELECT", "ROLE", "DBSIZE",   "READONLY",
                                          "HELLO", "SCRIPT", "TIME", "FLUSHALL", "FLUSHDB"};
    if (argc < 1)
        return -1;
    size_t n = arg_len(argv, lens, 0);
    for (size_t i = 0; i < PC_ARRAY_LEN(keyless); i++)
        if (arg_is(argv[0], n, keyless[i]))
            return -1;
    if (arg_is(argv[0], n, "EVAL") || arg_is(argv[0], n, "EVALSHA"))
        return eval_key(argc, argv, lens);
    if (arg_is(argv[0], n, "XREAD") || arg_is(argv[0], n, "XREADGROUP"))
        return streams_key(argc, argv, lens);
    if (arg_is(argv[0], n, "XINFO") || arg_is(argv[0], n, "XGROUP"))
        return argc > 2 ? 2 : -1;
    return argc > 1 ? 1 : -1;
}

/* --- redirections ------------------------------------------------------------------- */

/* A host as a node may name one: a name, an IPv4 or IPv6 address (no brackets). */
static bool host_ok(const char *h, size_t n)
{
    if (n >= CLUSTER_HOST_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)h[i]) && strchr(".-_:%", h[i]) == NULL)
            return false;
    return true;
}

/* Strict decimal in [min, max] from s[0..n). */
static bool parse_num(const char *s, size_t n, long min, long max, long *out)
{
    if (n == 0 || n > 9)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return v >= min && v <= max;
}

/* "SLOT HOST:PORT" (HOST may be empty, or an IPv6 address: the port follows the last ':'). */
static bool parse_target(const char *p, size_t n, struct cluster_redirect *out)
{
    const char *sp = memchr(p, ' ', n);
    long slot, port;
    if (sp == NULL || !parse_num(p, (size_t)(sp - p), 0, CLUSTER_SLOTS - 1, &slot))
        return false;
    const char *addr = sp + 1;
    size_t alen = n - (size_t)(addr - p);
    const char *colon = memrchr(addr, ':', alen);
    if (colon == NULL)
        return false;
    size_t hlen = (size_t)(colon - addr);
    if (!parse_num(colon + 1, alen - hlen - 1, 1, 65535, &port) || !host_ok(addr, hlen))
        return false;
    out->slot = (unsigned)slot;
    memcpy(out->host, addr, hlen);
    out->host[hlen] = '\0';
    out->port = (int)port;
    return true;
}

enum cluster_redirect_kind cluster_redirect_parse(const char *err, size_t len,
                                                  struct cluster_redirect *out)
{
    static const struct {
        const char *word; /* the error code: the reply's first word */
        enum cluster_redirect_kind kind;
    } kinds[] = {{"MOVED", CLUSTER_MOVED},
                 {"ASK", CLUSTER_ASK},
                 {"TRYAGAIN", CLUSTER_TRYAGAIN},
                 {"CLUSTERDOWN", CLUSTER_DOWN}};
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < PC_ARRAY_LEN(kinds); i++) {
        size_t wl = strlen(kinds[i].word);
        if (len < wl || memcmp(err, kinds[i].word, wl) != 0 || (len > wl && err[wl] != ' '))
            continue;
        out->kind = kinds[i].kind;
        if ((out->kind == CLUSTER_MOVED || out->kind == CLUSTER_ASK) &&
            (len <= wl + 1 || !parse_target(err + wl + 1, len - wl - 1, out)))
            out->kind = CLUSTER_MALFORMED;
        return out->kind;
    }
    out->kind = CLUSTER_REPLY_OTHER;
    return out->kind;
}

bool cluster_redirect_elsewhere(enum cluster_redirect_kind k, const struct cluster_redirect *red,
                                int slot)
{
    return (k == CLUSTER_MOVED || k == CLUSTER_ASK) && (slot < 0 || red->slot != (unsigned)slot);
}

enum cluster_redirect_kind cluster_reply_redirect(const redisReply *r, struct cluster_redirect *out)
{
    if (r == NULL || r->type != REDIS_REPLY_ERROR || r->str == NULL) {
        memset(out, 0, sizeof(*out));
        return CLUSTER_REPLY_OTHER;
    }
    return cluster_redirect_parse(r->str, r->len, out);
}

bool cluster_shards_unknown(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ERROR && r->str != NULL &&
           (strcasestr(r->str, "unknown subcommand") != NULL ||
            strcasestr(r->str, "unknown command") != NULL);
}

/* --- slot maps ----------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return -1;
}

void cluster_map_free(struct cluster_map *m)
{
    free(m->nodes);
    m->nodes = NULL;
    m->nnodes = 0;
    m->covered = 0;
}

static void map_reset(struct cluster_map *m)
{
    cluster_map_free(m);
    for (size_t i = 0; i < CLUSTER_SLOTS; i++)
        m->owner[i] = CLUSTER_NO_OWNER;
}

const struct cluster_node *cluster_map_node(const struct cluster_map *m, unsigned slot)
{
    uint16_t o = slot < CLUSTER_SLOTS ? m->owner[slot] : CLUSTER_NO_OWNER;
    return o < m->nnodes ? &m->nodes[o] : NULL;
}

/* The index of host:port in m->nodes, added if new; -1 when the map is full. */
static int node_index(struct cluster_map *m, const char *host, int port)
{
    for (size_t i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
            return (int)i;
    if (m->nnodes == CLUSTER_NODES_MAX)
        return -1;
    m->nodes = pc_realloc(m->nodes, (m->nnodes + 1) * sizeof(*m->nodes));
    struct cluster_node *n = &m->nodes[m->nnodes];
    snprintf(n->host, sizeof(n->host), "%s", host);
    n->port = port;
    return (int)m->nnodes++;
}

/* Slots [from, to] belong to node i; overlapping another owner is an error. */
static int own_range(struct cluster_map *m, long long from, long long to, int i, char *err,
                     size_t errlen)
{
    if (from < 0 || to < from || to >= CLUSTER_SLOTS)
        return fail(err, errlen, "a slot range out of 0-16383");
    for (long long s = from; s <= to; s++) {
        if (m->owner[s] != CLUSTER_NO_OWNER && m->owner[s] != (uint16_t)i)
            return fail(err, errlen, "two primaries claim the same slot");
        if (m->owner[s] == CLUSTER_NO_OWNER)
            m->covered++;
        m->owner[s] = (uint16_t)i;
    }
    return 0;
}

/* Renumber the nodes by the first slot each owns (nodes owning none are dropped). */
static void map_order(struct cluster_map *m)
{
    size_t n = m->nnodes, k = 0;
    uint16_t *renum = pc_malloc((n ? n : 1) * sizeof(*renum));
    struct cluster_node *sorted = pc_malloc((n ? n : 1) * sizeof(*sorted));
    for (size_t i = 0; i < n; i++)
        renum[i] = CLUSTER_NO_OWNER;
    for (size_t s = 0; s < CLUSTER_SLOTS; s++) {
        uint16_t o = m->owner[s];
        if (o == CLUSTER_NO_OWNER)
            continue;
        if (renum[o] == CLUSTER_NO_OWNER) {
            renum[o] = (uint16_t)k;
            sorted[k++] = m->nodes[o];
        }
        m->owner[s] = renum[o];
    }
    free(renum);
    free(m->nodes);
    m->nodes = sorted;
    m->nnodes = k;
}

/* A string (or status) reply's text into out; false if it is none or too long. */
static bool reply_text(const redisReply *r, char *out, size_t n)
{
    if (r == NULL || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) ||
        r->len >= n)
        return false;
    memcpy(out, r->str, r->len);
    out[r->len] = '\0';
    return true;
}

/* A port: an integer reply (RESP2 of SHARDS and SLOTS), or its decimal text. */
static bool reply_port(const redisReply *r, int *port)
{
    long v;
    if (r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer >= 1 && r->integer <= 65535) {
        *port = (int)r->integer;
        return true;
    }
    if (r != NULL && r->type == REDIS_REPLY_STRING && parse_num(r->str, r->len, 1, 65535, &v)) {
        *port = (int)v;
        return true;
    }
    return false;
}

static bool reply_int(const redisReply *r, long long *v)
{
    if (r == NULL || r->type != REDIS_REPLY_INTEGER)
        return false;
    *v = r->integer;
    return true;
}

/* The value of field name in a flat name/value array, or NULL. */
static const redisReply *field(const redisReply *a, const char *name)
{
    for (size_t i = 0; a->type == REDIS_REPLY_ARRAY && i + 1 < a->elements; i += 2) {
        const redisReply *f = a->element[i];
        if ((f->type == REDIS_REPLY_STRING || f->type == REDIS_REPLY_STATUS) &&
            f->len == strlen(name) && memcmp(f->str, name, f->len) == 0)
            return a->element[i + 1];
    }
    return NULL;
}

/*
 * The host a node is reached at: its preferred endpoint (CLUSTER SHARDS), or
 * its ip (CLUSTER SLOTS). "?" (cluster-preferred-endpoint-type
 * unknown-endpoint) or "" (not known yet) mean the host the client asked.
 */
static bool node_host(const redisReply *endpoint, const redisReply *ip, const char *asked,
                      char host[CLUSTER_HOST_MAX])
{
    char e[CLUSTER_HOST_MAX];
    const redisReply *r = endpoint != NULL ? endpoint : ip;
    if (r == NULL || !reply_text(r, e, sizeof(e)))
        return false;
    const char *h = e[0] != '\0' && strcmp(e, "?") != 0 ? e : asked;
    if (h == NULL || h[0] == '\0' || !host_ok(h, strlen(h)))
        return false;
    snprintf(host, CLUSTER_HOST_MAX, "%s", h);
    return true;
}

/* The primary of one shard's node list: its index in m, or -1 (none; or an error in err). */
static int shard_primary(struct cluster_map *m, const redisReply *nodes, const char *asked,
                         char *err, size_t errlen)
{
    if (nodes == NULL || nodes->type != REDIS_REPLY_ARRAY)
        return fail(err, errlen, "a shard without a node list");
    int found = -1;
    for (size_t i = 0; i < nodes->elements; i++) {
        const redisReply *n = nodes->element[i];
        char role[16], host[CLUSTER_HOST_MAX];
        int port;
        if (n->type != REDIS_REPLY_ARRAY || !reply_text(field(n, "role"), role, sizeof(role)))
            return fail(err, errlen, "a node without a role");
        if (strcmp(role, "master") != 0)
            continue;
        if (found >= 0)
            return fail(err, errlen, "a shard with two primaries");
        if (!reply_port(field(n, "port"), &port) ||
            !node_host(field(n, "endpoint"), field(n, "ip"), asked, host))
            return fail(err, errlen, "a primary without a valid address");
        if ((found = node_index(m, host, port)) < 0)
            return fail(err, errlen, "too many primaries");
    }
    return found;
}

static int shard_apply(struct cluster_map *m, const redisReply *shard, const char *asked, char *err,
                       size_t errlen)
{
    if (shard->type != REDIS_REPLY_ARRAY)
        return fail(err, errlen, "a shard that is not an array");
    const redisReply *slots = field(shard, "slots");
    long long v;
    if (slots == NULL || slots->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0)
        return fail(err, errlen, "a shard without a slot list");
    for (size_t i = 0; i < slots->elements; i++)
        if (!reply_int(slots->element[i], &v))
            return fail(err, errlen, "a slot that is not a number");
    err[0] = '\0';
    int p = shard_primary(m, field(shard, "nodes"), asked, err, errlen);
    if (p < 0 && err[0] != '\0')
        return -1;
    if (p < 0) /* no primary (all failed): its slots have no owner now */
        return 0;
    for (size_t i = 0; i < slots->elements; i += 2)
        if (own_range(m, slots->element[i]->integer, slots->element[i + 1]->integer, p, err,
                      errlen) < 0)
            return -1;
    return 0;
}

int cluster_map_from_shards(const redisReply *r, const char *asked, struct cluster_map *m,
                            char *err, size_t errlen)
{
    map_reset(m);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        fail(err, errlen, "CLUSTER SHARDS: not an array");
        goto bad;
    }
    for (size_t i = 0; i < r->elements; i++)
        if (shard_apply(m, r->element[i], asked, err, errlen) < 0)
            goto bad;
    map_order(m);
    return 0;
bad:
    map_reset(m);
    return -1;
}

/* One CLUSTER SLOTS range: [start, end, [host, port, id, ...], replicas...]. */
static int range_apply(struct cluster_map *m, const redisReply *e, const char *asked, char *err,
                       size_t errlen)
{
    long long from, to;
    char host[CLUSTER_HOST_MAX];
    int port, i;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !reply_int(e->element[0], &from) ||
        !reply_int(e->element[1], &to))
        return fail(err, errlen, "a slot range that does not parse");
    const redisReply *p = e->element[2];
    if (p->type != REDIS_REPLY_ARRAY || p->elements < 2 || !reply_port(p->element[1], &port) ||
        !node_host(NULL, p->element[0], asked, host))
        return fail(err, errlen, "a primary without a valid address");
    if ((i = node_index(m, host, port)) < 0)
        return fail(err, errlen, "too many primaries");
    return own_range(m, from, to, i, err, errlen);
}

int cluster_map_from_slots(const redisReply *r, const char *asked, struct cluster_map *m, char *err,
                           size_t errlen)
{
    map_reset(m);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        fail(err, errlen, "CLUSTER SLOTS: not an array");
        goto bad;
    }
    for (size_t i = 0; i < r->elements; i++)
        if (range_apply(m, r->element[i], asked, err, errlen) < 0)
            goto bad;
    map_order(m);
    return 0;
bad:
    map_reset(m);
    return -1;
}
