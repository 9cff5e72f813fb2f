/*
 * rurl.c - the Redis URL grammar (see pc_rurl.h). Owns parsing, the
 * canonical text of a parsed URL (with or without its secrets) and the
 * %-escaping of credentials. The config check, the stores, the background
 * threads and the tools all go through rurl_parse, so they cannot disagree
 * about what a URL means.
 *
 *   "sentinel://alice:pw@s1,s2:26380/mymaster/2?sentinel-password=x"
 *             └userinfo┘ └─host list─┘ └master┘ └db └────query─────┘
 *   "cluster://alice:pw@n1:7000,n2:7001"
 *            └userinfo┘ └─seed list─┘
 */
#include "pc_rurl.h"
#include "pc_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define HOST_MAX   253
#define MASTER_MAX 128

static int fail(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* Percent-decode s[0..n) into a new string; NULL if an escape is invalid or decodes to NUL. */
static char *pct_decode(const char *s, size_t n)
{
    char *out = pc_malloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *o++ = s[i];
            continue;
        }
        int hi = i + 2 < n ? pc_hex_digit((unsigned char)s[i + 1]) : -1;
        int lo = i + 2 < n ? pc_hex_digit((unsigned char)s[i + 2]) : -1;
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

/* Append s with every byte outside [A-Za-z0-9-._~] %-escaped. */
static void pct_append(struct pc_buf *b, const char *s)
{
    for (; *s; s++) {
        if (isalnum((unsigned char)*s) || strchr("-._~", *s) != NULL)
            pc_buf_append_char(b, *s);
        else
            pc_buf_printf(b, "%%%02X", (unsigned char)*s);
    }
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

static bool has_space_or_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == 0x7f)
            return true;
    return false;
}

bool rurl_is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return host != NULL &&
           (inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1);
}

/* A host name, or an IPv4 address when it is all digits and dots. */
static int check_name(const char *h, size_t n, char *err, size_t errlen)
{
    if (n == 0)
        return fail(err, errlen, "missing host");
    if (n > HOST_MAX)
        return fail(err, errlen, "host name is too long");
    char host[HOST_MAX + 1];
    memcpy(host, h, n);
    host[n] = '\0';
    if (strspn(host, "0123456789.") == n)
        return rurl_is_address(host) ? 0 : fail(err, errlen, "invalid IPv4 address");
    bool ok = host[0] != '-' && host[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)host[i]) || strchr("-._", host[i]) != NULL;
    return ok ? 0 : fail(err, errlen, "invalid host name");
}

/* host, host:port, [v6], [v6]:port in p[0..n); port stays def_port unless given. */
static int parse_hostport(const char *p, size_t n, int def_port, struct rurl_addr *a, char *err,
                          size_t errlen)
{
    const char *h = p, *colon;
    size_t hlen;
    if (n > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', n);
        if (close == NULL)
            return fail(err, errlen, "missing ']' after an IPv6 address");
        h = p + 1;
        hlen = (size_t)(close - h);
        colon = close + 1 < p + n ? close + 1 : NULL;
        if (colon != NULL && *colon != ':')
            return fail(err, errlen, "unexpected text after ']'");
        char v6[64];
        snprintf(v6, sizeof(v6), "%.*s", (int)PC_MIN(hlen, sizeof(v6) - 1), h);
        if (hlen >= sizeof(v6) || strchr(v6, ':') == NULL || !rurl_is_address(v6))
            return fail(err, errlen, "invalid IPv6 address");
    } else {
        colon = memchr(p, ':', n);
        hlen = colon ? (size_t)(colon - p) : n;
        if (colon != NULL && memchr(colon + 1, ':', (size_t)(p + n - colon - 1)) != NULL)
            return fail(err, errlen, "an IPv6 address must be written in brackets, as in [::1]");
        if (check_name(h, hlen, err, errlen) < 0)
            return -1;
    }
    a->port = def_port;
    if (colon != NULL &&
        parse_int_range(colon + 1, (size_t)(p + n - colon - 1), 1, 65535, &a->port) < 0)
        return fail(err, errlen, "invalid port (want 1-65535)");
    a->host = pc_strndup(h, hlen);
    return 0;
}

/* "[USER]:PASSWORD" or "USER" in p[0..n) (the part before '@'). */
static int parse_userinfo(const char *p, size_t n, unsigned flags, struct rurl *u, char *err,
                          size_t errlen)
{
    const char *colon = memchr(p, ':', n);
    size_t ulen = colon ? (size_t)(colon - p) : n;
    if (ulen > 0 && (u->user = pct_decode(p, ulen)) == NULL)
        return fail(err, errlen, "invalid %-escape in the user name");
    if (colon == NULL) {
        if (ulen == 0)
            return fail(err, errlen, "empty user name before '@'");
        if (!(flags & RURL_USER_ALONE))
            return fail(err, errlen, "a user name needs a password (USER:PASSWORD@)");
        return 0;
    }
    size_t plen = (size_t)(p + n - colon - 1);
    if (plen == 0)
        return fail(err, errlen, "empty password");
    if ((u->password = pct_decode(colon + 1, plen)) == NULL)
        return fail(err, errlen, "invalid %-escape in the password");
    return 0;
}

/* The authority p[0..n): userinfo (if any) split off; what follows it in *host, *hlen. */
static int split_userinfo(const char *p, size_t n, unsigned flags, struct rurl *u,
                          const char **host, size_t *hlen, char *err, size_t errlen)
{
    const char *at = memrchr(p, '@', n);
    *host = p;
    *hlen = n;
    if (at == NULL)
        return 0;
    if (parse_userinfo(p, (size_t)(at - p), flags, u, err, errlen) < 0)
        return -1;
    *host = at + 1;
    *hlen = n - (size_t)(at + 1 - p);
    return 0;
}

/* "/DB" (or "/" alone: db 0) at p, up to the end of the path. */
static int parse_db(const char *p, size_t n, struct rurl *u, char *err, size_t errlen)
{
    if (n <= 1)
        return 0;
    if (parse_int_range(p + 1, n - 1, 0, INT_MAX, &u->db) < 0) {
        snprintf(err, errlen, "invalid database number '%.*s'", (int)PC_MIN(n - 1, 32), p + 1);
        return -1;
    }
    return 0;
}

/* unix:/PATH or unix://[[USER]:PASSWORD@]/PATH */
static int parse_unix(const char *p, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    u->kind = RURL_UNIX;
    if (strncmp(p, "//", 2) == 0) {
        const char *slash = strchr(p + 2, '/');
        if (slash == NULL)
            return fail(err, errlen, "unix:// must be followed by [[USER]:PASSWORD@]/PATH");
        const char *h;
        size_t hlen;
        if (split_userinfo(p + 2, (size_t)(slash - p - 2), flags, u, &h, &hlen, err, errlen) < 0)
            return -1;
        if (hlen != 0)
            return fail(err, errlen, "unix:// takes no host: write unix://[[USER]:PASSWORD@]/PATH");
        p = slash;
    }
    if (p[0] != '/' || p[1] == '\0')
        return fail(err, errlen, "unix socket path must be absolute (unix:/path/to/redis.sock)");
    if (strlen(p) >= sizeof(((struct sockaddr_un *)NULL)->sun_path)) {
        snprintf(err, errlen, "unix socket path is too long (at most %zu bytes)",
                 sizeof(((struct sockaddr_un *)NULL)->sun_path) - 1);
        return -1;
    }
    if (has_space_or_ctl(p))
        return fail(err, errlen, "unix socket path contains a space or control character");
    u->unix_path = pc_strdup(p);
    return 0;
}

/* redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (after the scheme) */
static int parse_tcp(const char *p, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    u->kind = RURL_TCP;
    if (strpbrk(p, "?#") != NULL)
        return fail(err, errlen, "query strings and fragments are not supported");
    const char *slash = strchr(p, '/'), *h;
    size_t alen = slash ? (size_t)(slash - p) : strlen(p), hlen;
    if (split_userinfo(p, alen, flags, u, &h, &hlen, err, errlen) < 0 ||
        parse_hostport(h, hlen, RURL_REDIS_PORT, &u->tcp, err, errlen) < 0)
        return -1;
    return slash ? parse_db(slash, strlen(slash), u, err, errlen) : 0;
}

/* HOST[:PORT][,HOST[:PORT]...] in p[0..n) into at most max of list (*count of them). */
static int parse_hosts(const char *p, size_t n, int def_port, struct rurl_addr *list, size_t *count,
                       size_t max, const char *what, char *err, size_t errlen)
{
    const char *end = p + n;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (*count == max) {
            snprintf(err, errlen, "at most %zu %s", max, what);
            return -1;
        }
        if (parse_hostport(p, (size_t)(stop - p), def_port, &list[*count], err, errlen) < 0)
            return -1;
        (*count)++;
        p = stop + 1;
    }
    return 0;
}

static int parse_sentinels(const char *p, size_t n, struct rurl *u, char *err, size_t errlen)
{
    return parse_hosts(p, n, RURL_SENTINEL_PORT, u->sentinels, &u->nsentinels, RURL_SENTINELS_MAX,
                       "sentinels", err, errlen);
}

/* "/MASTER[/DB]" (a trailing '/' allowed) */
static int parse_master(const char *p, struct rurl *u, char *err, size_t errlen)
{
    const char *name = p + 1, *slash = strchr(name, '/');
    size_t n = slash ? (size_t)(slash - name) : strlen(name);
    if (n == 0)
        return fail(err, errlen, "missing master name: sentinel://HOST[:PORT],.../MASTER[/DB]");
    if ((u->master = pct_decode(name, n)) == NULL || has_space_or_ctl(u->master))
        return fail(err, errlen, "invalid master name");
    if (strlen(u->master) > MASTER_MAX)
        return fail(err, errlen, "master name is too long");
    return slash ? parse_db(slash, strlen(slash), u, err, errlen) : 0;
}

/* One "name=value" of a sentinel URL's query, p[0..n). */
static int parse_param(const char *p, size_t n, struct rurl *u, char *err, size_t errlen)
{
    static const char kuser[] = "sentinel-user=", kpass[] = "sentinel-password=";
    char **slot = NULL;
    size_t klen = 0;
    if (n >= sizeof(kuser) - 1 && memcmp(p, kuser, sizeof(kuser) - 1) == 0)
        slot = &u->sentinel_user, klen = sizeof(kuser) - 1;
    else if (n >= sizeof(kpass) - 1 && memcmp(p, kpass, sizeof(kpass) - 1) == 0)
        slot = &u->sentinel_password, klen = sizeof(kpass) - 1;
    if (slot == NULL)
        return fail(err, errlen, "unknown query parameter (want sentinel-user, sentinel-password)");
    if (*slot != NULL)
        return fail(err, errlen, "a query parameter is given twice");
    if (n == klen)
        return fail(err, errlen, "empty value of a query parameter");
    if ((*slot = pct_decode(p + klen, n - klen)) == NULL)
        return fail(err, errlen, "invalid %-escape in a query parameter");
    return 0;
}

static int parse_query(const char *q, struct rurl *u, char *err, size_t errlen)
{
    while (*q) {
        size_t n = strcspn(q, "&");
        if (parse_param(q, n, u, err, errlen) < 0)
            return -1;
        q += n + (q[n] == '&');
    }
    if (u->sentinel_user != NULL && u->sentinel_password == NULL)
        return fail(err, errlen, "sentinel-user needs sentinel-password");
    return 0;
}

/* sentinel://[[USER]:PASSWORD@]HOST[:PORT],.../MASTER[/DB][?QUERY] (after the scheme) */
static int parse_sentinel(const char *p, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    u->kind = RURL_SENTINEL;
    if (strchr(p, '#') != NULL)
        return fail(err, errlen, "fragments are not supported");
    const char *qm = strchr(p, '?');
    char *path = pc_strndup(p, qm ? (size_t)(qm - p) : strlen(p));
    const char *slash = strchr(path, '/'), *h;
    size_t hlen;
    int rc = -1;
    if (slash == NULL)
        fail(err, errlen, "missing master name: sentinel://HOST[:PORT],.../MASTER[/DB]");
    else if (split_userinfo(path, (size_t)(slash - path), flags, u, &h, &hlen, err, errlen) == 0 &&
             parse_sentinels(h, hlen, u, err, errlen) == 0 &&
             parse_master(slash, u, err, errlen) == 0)
        rc = qm ? parse_query(qm + 1, u, err, errlen) : 0;
    free(path);
    return rc;
}

/* cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/0] (after the scheme) */
static int parse_cluster(const char *p, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    u->kind = RURL_CLUSTER;
    if (strpbrk(p, "?#") != NULL)
        return fail(err, errlen, "query strings and fragments are not supported");
    const char *slash = strchr(p, '/'), *h;
    size_t alen = slash ? (size_t)(slash - p) : strlen(p), hlen;
    if (split_userinfo(p, alen, flags, u, &h, &hlen, err, errlen) < 0 ||
        parse_hosts(h, hlen, RURL_REDIS_PORT, u->seeds, &u->nseeds, RURL_SEEDS_MAX, "seed nodes",
                    err, errlen) < 0)
        return -1;
    if (slash != NULL && parse_db(slash, strlen(slash), u, err, errlen) < 0)
        return -1;
    if (u->db != 0) {
        snprintf(err, errlen,
                 "a Redis Cluster has database 0 only: remove /%d from the cluster:// URL", u->db);
        return -1;
    }
    return 0;
}

static int parse_any(const char *url, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    if (url == NULL || *url == '\0')
        return fail(err, errlen, "empty redis URL");
    if (has_space_or_ctl(url))
        return fail(err, errlen, "the URL contains a space or control character");
    if (pc_strncaseeq(url, "unix:", 5))
        return parse_unix(url + 5, flags, u, err, errlen);
    if (pc_strncaseeq(url, "redis://", 8))
        return parse_tcp(url + 8, flags, u, err, errlen);
    if (pc_strncaseeq(url, "sentinel://", 11))
        return parse_sentinel(url + 11, flags, u, err, errlen);
    if (pc_strncaseeq(url, "cluster://", 10))
        return parse_cluster(url + 10, flags, u, err, errlen);
    if (pc_strncaseeq(url, "rediss://", 9))
        return fail(err, errlen, "TLS (rediss://) is not supported");
    return fail(err, errlen,
                "want redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], unix:/PATH, "
                "sentinel://HOST[:PORT],.../MASTER[/DB] or cluster://HOST[:PORT],...");
}

int rurl_parse(const char *url, unsigned flags, struct rurl *u, char *err, size_t errlen)
{
    memset(u, 0, sizeof(*u));
    if (parse_any(url, flags, u, err, errlen) == 0)
        return 0;
    rurl_free(u);
    return -1;
}

/* Free a string that may hold a secret: overwrite it first. */
static void free_wiped(char **s)
{
    if (*s != NULL)
        explicit_bzero(*s, strlen(*s));
    PC_FREE(s);
}

void rurl_free(struct rurl *u)
{
    free(u->tcp.host);
    free(u->unix_path);
    for (size_t i = 0; i < u->nsentinels; i++)
        free(u->sentinels[i].host);
    for (size_t i = 0; i < u->nseeds; i++)
        free(u->seeds[i].host);
    free(u->master);
    free(u->user);
    free_wiped(&u->password);
    free(u->sentinel_user);
    free_wiped(&u->sentinel_password);
    memset(u, 0, sizeof(*u));
}

static void append_addr(struct pc_buf *b, const struct rurl_addr *a)
{
    if (strchr(a->host, ':') != NULL)
        pc_buf_printf(b, "[%s]:%d", a->host, a->port);
    else
        pc_buf_printf(b, "%s:%d", a->host, a->port);
}

char *rurl_addr_text(const char *host, int port)
{
    struct pc_buf b = PC_BUF_INIT;
    append_addr(&b, &(struct rurl_addr){(char *)host, port});
    return pc_buf_cstr(&b);
}

static void append_userinfo(struct pc_buf *b, const struct rurl *u)
{
    if (u->password == NULL && u->user == NULL)
        return;
    if (u->user != NULL)
        pct_append(b, u->user);
    if (u->password != NULL) {
        pc_buf_append_char(b, ':');
        pct_append(b, u->password);
    }
    pc_buf_append_char(b, '@');
}

static void append_hosts(struct pc_buf *b, const struct rurl_addr *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            pc_buf_append_char(b, ',');
        append_addr(b, &list[i]);
    }
}

static void append_sentinel(struct pc_buf *b, const struct rurl *u, bool with_secrets)
{
    append_hosts(b, u->sentinels, u->nsentinels);
    pc_buf_append_char(b, '/');
    pct_append(b, u->master);
    pc_buf_printf(b, "/%d", u->db);
    if (!with_secrets || u->sentinel_password == NULL)
        return;
    pc_buf_append_char(b, '?');
    if (u->sentinel_user != NULL) {
        pc_buf_append_str(b, "sentinel-user=");
        pct_append(b, u->sentinel_user);
        pc_buf_append_char(b, '&');
    }
    pc_buf_append_str(b, "sentinel-password=");
    pct_append(b, u->sentinel_password);
}

char *rurl_format(const struct rurl *u, bool with_secrets)
{
    struct pc_buf b = PC_BUF_INIT;
    bool auth = with_secrets && (u->user != NULL || u->password != NULL);
    switch (u->kind) {
    case RURL_UNIX:
        /* "unix://" also when the path starts with "//", which "unix:" would make a host */
        pc_buf_append_str(&b, auth || u->unix_path[1] == '/' ? "unix://" : "unix:");
        if (auth)
            append_userinfo(&b, u);
        pc_buf_append_str(&b, u->unix_path);
        break;
    case RURL_TCP:
        pc_buf_append_str(&b, "redis://");
        if (auth)
            append_userinfo(&b, u);
        append_addr(&b, &u->tcp);
        pc_buf_printf(&b, "/%d", u->db);
        break;
    case RURL_SENTINEL:
        pc_buf_append_str(&b, "sentinel://");
        if (auth)
            append_userinfo(&b, u);
        append_sentinel(&b, u, with_secrets);
        break;
    case RURL_CLUSTER: /* database 0 only: no /DB written */
        pc_buf_append_str(&b, "cluster://");
        if (auth)
            append_userinfo(&b, u);
        append_hosts(&b, u->seeds, u->nseeds);
        break;
    }
    return pc_buf_cstr(&b);
}
