/*
 * pc_cluster.h - what a Redis Cluster client needs to know, without any
 * connection: the hash slot of a key (CRC16 XMODEM of the key, or of its hash
 * tag, modulo 16384), the key a command is routed by, the redirections a node
 * answers with (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and the slot map read from
 * CLUSTER SHARDS (Redis 7) or CLUSTER SLOTS (before).
 *
 * Both clients of a cluster:// URL build on this: the worker stores
 * (pc_store.h, one async connection per primary) and the blocking client of
 * the tools and background threads (pc_rcli.h). A reply parsed here is data
 * from the network: every field is range-checked, and a map that does not
 * make sense is refused whole (the caller keeps the map it had and counts the
 * refusal).
 */
#ifndef PC_CLUSTER_H
#define PC_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SLOTS     16384
#define CLUSTER_HOST_MAX  256  /* a host name (253) or an IPv6 address, with its NUL */
#define CLUSTER_NODES_MAX 1000 /* primaries in one map; Redis advises at most 1000 nodes */
#define CLUSTER_NO_OWNER  UINT16_MAX

struct redisReply;

/* CRC16 XMODEM (polynomial 0x1021, initial 0): "123456789" gives 0x31C3. */
uint16_t cluster_crc16(const void *p, size_t n);
/*
 * The hash slot of a key: of the part between the first '{' and the next
 * '}' when that part is not empty ("{user1000}.following" and
 * "{user1000}.followers" share a slot), else of the whole key.
 */
unsigned cluster_slot(const void *key, size_t n);

/*
 * The index in argv of the key a command is routed by, or -1 for a command
 * without one (SCAN, PING, CLUSTER...). GET/SET/...: argv[1]; EVAL and
 * EVALSHA: the first of KEYS when numkeys > 0; XINFO, XGROUP: argv[2];
 * XREAD/XREADGROUP: the first stream after STREAMS. Every other command of
 * this project's with a key has it first.
 */
int cluster_key_index(int argc, const char **argv, const size_t *lens);

enum cluster_redirect_kind {
    CLUSTER_REPLY_OTHER = 0, /* not a redirection: an answer, or another error */
    CLUSTER_MOVED,           /* the slot lives elsewhere for good: update the map */
    CLUSTER_ASK,             /* this once, ask there (ASKING first): the slot is migrating */
    CLUSTER_TRYAGAIN,        /* a multi-key command during a migration: retry a little later */
    CLUSTER_DOWN,            /* CLUSTERDOWN: the cluster cannot serve the slot now */
    CLUSTER_MALFORMED,       /* MOVED or ASK whose slot or address does not parse */
};

struct cluster_redirect {
    enum cluster_redirect_kind kind;
    unsigned slot;               /* MOVED, ASK */
    char host[CLUSTER_HOST_MAX]; /* MOVED, ASK; "" when the node left it out (same host) */
    int port;
};

/* Classify an error reply's text (err[0..len)): "MOVED 3999 127.0.0.1:6381" and the like. */
enum cluster_redirect_kind cluster_redirect_parse(const char *err, size_t len,
                                                  struct cluster_redirect *out);
/* The same for any reply: CLUSTER_REPLY_OTHER unless it is an error reply that redirects. */
enum cluster_redirect_kind cluster_reply_redirect(const struct redisReply *r,
                                                  struct cluster_redirect *out);
/*
 * A MOVED or ASK (kind k) naming another slot than slot, the one of the refused command's key
 * (-1: it had none): a forged or garbled reply, not about that command; never followed.
 */
bool cluster_redirect_elsewhere(enum cluster_redirect_kind k, const struct cluster_redirect *red,
                                int slot);

struct cluster_node {
    char host[CLUSTER_HOST_MAX];
    int port;
};

/*
 * Which primary serves each slot. nodes are the primaries that own at least
 * one slot, ordered by the first slot they own (so that SCAN over every
 * primary visits them in an order that survives a failover).
 */
struct cluster_map {
    uint16_t owner[CLUSTER_SLOTS]; /* index into nodes, or CLUSTER_NO_OWNER */
    struct cluster_node *nodes;
    size_t nnodes;
    size_t covered; /* slots with an owner */
};

/*
 * Fill *m (it is reset first) from a CLUSTER SHARDS reply. asked is the host
 * of the node that answered: a node whose endpoint is empty or "?" is taken
 * to be on that host. 0, or -1 with a message in err (then *m holds nothing
 * to free).
 */
int cluster_map_from_shards(const struct redisReply *r, const char *asked, struct cluster_map *m,
                            char *err, size_t errlen);
/* The same from a CLUSTER SLOTS reply (Redis before 7). */
int cluster_map_from_slots(const struct redisReply *r, const char *asked, struct cluster_map *m,
                           char *err, size_t errlen);
/* Free what *m owns; a zeroed or freed map is fine. */
void cluster_map_free(struct cluster_map *m);
/* The node serving slot, or NULL when no primary does. */
const struct cluster_node *cluster_map_node(const struct cluster_map *m, unsigned slot);
/* Whether an error reply says CLUSTER SHARDS is unknown (Redis before 7). */
bool cluster_shards_unknown(const struct redisReply *r);

#endif
