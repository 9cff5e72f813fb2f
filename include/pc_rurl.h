/*
 * pc_rurl.h - the one grammar of a Redis URL, shared by the config check, the
 * worker stores, the background threads and the tools:
 *
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]          port 6379, db 0
 *   unix:/PATH                                          db 0
 *   unix://[[USER]:PASSWORD@]/PATH                      a socket with AUTH
 *   sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]
 *           [?sentinel-user=USER&sentinel-password=PASSWORD]   port 26379
 *   cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/0]   port 6379
 *
 * HOST is a name, an IPv4 address or an IPv6 address in brackets. USER and
 * PASSWORD (%-escapes allowed) are the credentials of the server that holds
 * the data: AUTH PASSWORD, or AUTH USER PASSWORD for an ACL user (Redis 6+).
 * With sentinel://, they are the primary's (and its replicas'); the sentinels
 * themselves are asked without AUTH unless the query names their own
 * credentials, which the config keys redis-sentinel-user and
 * redis-sentinel-password fill in. MASTER is the name the sentinels monitor.
 *
 * Parsed URLs own their strings (rurl_free). Nothing here touches the
 * network.
 */
#ifndef PC_RURL_H
#define PC_RURL_H

#include <stdbool.h>
#include <stddef.h>

#define RURL_REDIS_PORT    6379
#define RURL_SENTINEL_PORT 26379
#define RURL_SENTINELS_MAX 16
#define RURL_SEEDS_MAX     16
/* Said after why a connection closed before any reply: a TLS-only port resets a plain-text
 * client without a word (rediss:// is refused). */
#define RURL_TLS_HINT ", before any reply (a TLS-only port? TLS to Redis is not supported)"

enum rurl_kind {
    RURL_TCP,      /* redis:// */
    RURL_UNIX,     /* unix: */
    RURL_SENTINEL, /* sentinel://: the address comes from the sentinels */
    RURL_CLUSTER,  /* cluster://: seeds of a Redis Cluster; the nodes come from its slot map */
};

struct rurl_addr {
    char *host; /* a name or an address, IPv6 without brackets */
    int port;
};

struct rurl {
    enum rurl_kind kind;
    struct rurl_addr tcp;                           /* RURL_TCP */
    char *unix_path;                                /* RURL_UNIX */
    struct rurl_addr sentinels[RURL_SENTINELS_MAX]; /* RURL_SENTINEL, in the URL's order */
    size_t nsentinels;                              /* RURL_SENTINEL */
    char *master;                                   /* RURL_SENTINEL: the monitored name */
    struct rurl_addr seeds[RURL_SEEDS_MAX];         /* RURL_CLUSTER, in the URL's order */
    size_t nseeds;                                  /* RURL_CLUSTER */
    char *user, *password;                          /* the data server's AUTH; NULL: none */
    char *sentinel_user, *sentinel_password;        /* the sentinels' AUTH; NULL: none */
    int db;
};

/*
 * A URL with a user name and no password is refused unless flags has
 * RURL_USER_ALONE (the config check: the password may come from
 * redis-password).
 */
#define RURL_USER_ALONE 0x1u

/*
 * Parse url into *u (zeroed first). 0, or -1 with a message in err that never
 * repeats a password; on -1 *u holds nothing to free.
 */
int rurl_parse(const char *url, unsigned flags, struct rurl *u, char *err, size_t errlen);
/* Free what *u owns and zero it (a zeroed struct is fine). */
void rurl_free(struct rurl *u);

/*
 * The URL in canonical form (every port and the db written), with its
 * secrets when with_secrets (%-escaped), else without any userinfo or query.
 * A malloc'd string the caller frees. The form without secrets is what log
 * lines and messages show.
 */
char *rurl_format(const struct rurl *u, bool with_secrets);
/* How log lines name one server: "HOST:PORT" ("[V6]:PORT"). A malloc'd string. */
char *rurl_addr_text(const char *host, int port);

/* host is a numeric IPv4 or IPv6 address (nothing to resolve). */
bool rurl_is_address(const char *host);

#endif
