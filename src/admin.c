/*
 * admin.c - the proxy's own endpoints (see pc_admin.h). Owns the small
 * state of an asynchronous admin operation (a flush or a purge) while Redis
 * works.
 *
 *   GET /healthz     200 while the process serves
 *   GET /readyz      200 when this worker can use the cache (or caching is off), else 503
 *   GET /stats       metrics as one flat JSON object   } both from the metrics tables
 *   GET /metrics     metrics in Prometheus text format } and the groups of series below
 *   GET /dashboard   one self-contained HTML page (its script reads the two below)
 *   GET /dashboard/data   hit rate, money and latency of the last hours (pc_dash.h)
 *   GET /favicon.ico the browser's icon, so it never goes upstream
 *   (/stats, /metrics and /dashboard* require metrics-token while it is set)
 *   DELETE /admin/cache[?tenant=ID]   flush all entries or one tenant's
 *   DELETE /admin/cache?namespace=NS&model=M&older-than=T[&tenant=ID]
 *                                     the entries that match every filter given
 *   DELETE /admin/cache/entries/ID    one entry, by its X-Cache-Key
 *   (the /admin/ ones require Authorization: Bearer <admin-token>; each answers
 *    {"deleted":N}; pc_purge.h does the targeted ones)
 */
#include "pc_admin.h"
#include "pc_api.h"
#include "pc_bound.h"
#include "pc_conf.h"
#include "pc_dash.h"
#include "pc_dialect.h"
#include "pc_entry.h"
#include "pc_fence.h"
#include "pc_l1.h"
#include "pc_httpd.h"
#include "pc_log.h"
#include "pc_pricing.h"
#include "pc_purge.h"
#include "pc_route.h"
#include "pc_semantic.h"
#include "pc_stats.h"
#include "pc_tenants.h"
#include "pc_cache.h"
#include "pc_context.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define ADMIN_OP_MAGIC 0x41444d4eu /* "ADMN" */

struct admin_op {
    unsigned magic;
    struct worker *w;
    struct httpd_req *hr;
    struct cache_op *cmd;          /* a flush */
    struct purge_op *purge;        /* or a targeted delete */
    char what[ENTRY_ID_LEN + 512]; /* for the log line */
    bool narrow;                   /* by namespace, model or age: a rerun publishes what it owes */
};

#define ENTRIES_PATH "/admin/cache/entries/"

/* The page (src/dashboard.html, embedded at build time). */
extern const char pc_dashboard_html[];
extern const size_t pc_dashboard_html_len;

bool admin_owns_path(const char *path)
{
    static const char *const own[] = {"/healthz",   "/readyz",         "/stats", "/metrics",
                                      "/dashboard", "/dashboard/data", "/admin", "/favicon.ico"};
    for (size_t i = 0; i < PC_ARRAY_LEN(own); i++)
        if (strcmp(path, own[i]) == 0)
            return true;
    return strncmp(path, "/admin/", 7) == 0;
}

static void reply_json(struct httpd_req *hr, int status, const char *json)
{
    httpd_add_header(hr, "Content-Type", "application/json");
    httpd_add_header(hr, "Cache-Control", "no-store");
    httpd_reply(hr, status, json, strlen(json));
}

static void reply_error(struct httpd_req *hr, int status, const char *msg)
{
    struct pc_buf b = PC_BUF_INIT;
    dialect_error_body(dialect_of(API_NONE), status, msg, &b); /* OpenAI's shape */
    httpd_add_header(hr, "Content-Type", "application/json");
    httpd_reply(hr, status, b.data, b.len);
    pc_buf_free(&b);
}

/* Ready when caching is off, or every worker has a usable Redis connection. */
static bool ready(const struct worker *w)
{
    if (!w->conf->cache)
        return true;
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    return (int64_t)v[STAT_redis_connected] >= w->conf->workers;
}

/* ---- series ---------------------------------------------------------------------- */

struct admin_figures {
    int64_t uptime_s;
    int64_t workers;
    bool ready;
};

static void admin_snapshot(const void *obj, void *snap)
{
    const struct worker *w = obj;
    struct admin_figures *f = snap;
    f->uptime_s = (pc_wall_ms() - w->started_ms) / 1000;
    f->workers = w->conf->workers;
    f->ready = ready(w);
}

#define ADMIN_SERIES(X)                                                                          \
    X(version, "version", NULL, "info", 0, "The running binary's version",                       \
      stat_str(v, PC_VERSION))                                                                   \
    X(uptime, "uptime_seconds", NULL, "gauge", 0, "Seconds since the process started",           \
      stat_int(v, s->uptime_s))                                                                  \
    X(workers, "workers", NULL, "gauge", 0, "Worker threads (workers)", stat_int(v, s->workers)) \
    X(ready, "ready", "ready", "gauge", 0,                                                       \
      "Whether every worker can use the cache (1; or caching is off), as /readyz says; 0 "       \
      "while Redis is unreachable for one",                                                      \
      stat_bool(v, s->ready))

#define ADMIN_READ(id, name, prom, kind, dec, help, stmt) \
    STAT_READER(admin, struct admin_figures, id, stmt)
#define ADMIN_ROW(id, name, prom, kind, dec, help, stmt) \
    STAT_ROW(admin, id, name, prom, kind, dec, help)
ADMIN_SERIES(ADMIN_READ)
static const struct stat_row admin_rows[] = {ADMIN_SERIES(ADMIN_ROW)};

static const struct stat_group admin_series = {
    .rows = admin_rows,
    .nrows = PC_ARRAY_LEN(admin_rows),
    .snap_size = sizeof(struct admin_figures),
    .snapshot = admin_snapshot,
};

/* The price list in force and the tenants seen: descriptions, written by their modules. */
static void pricing_json(const void *obj, struct pc_buf *out)
{
    const struct conf *c = obj;
    pricing_render_json(c->prices, out);
}

static void pricing_prom(const void *obj, struct pc_buf *out)
{
    const struct conf *c = obj;
    pricing_render_prometheus(c->prices, out);
}

static void tenants_json(const void *obj, struct pc_buf *out)
{
    const struct conf *c = obj;
    pc_buf_append_char(out, ',');
    tenants_render_json(c->tenants, out);
}

static const struct stat_group pricing_series = {.json = pricing_json, .prom = pricing_prom};
static const struct stat_group tenants_series = {.json = tenants_json};

static const void *of_worker(const struct worker *w)
{
    return w;
}
static const void *of_semantic(const struct worker *w)
{
    return w->semantic;
}
static const void *of_bound(const struct worker *w)
{
    return semantic_bound(w->semantic);
}
static const void *of_l1(const struct worker *w)
{
    return w->l1;
}
static const void *of_conf(const struct worker *w)
{
    return w->conf;
}
static const void *of_route(const struct worker *w)
{
    return w->route;
}

/*
 * Every group of series outside the per-worker rows, once, in the order
 * /stats, /metrics and doc/metrics.md show them, with where its object is (NULL:
 * that part is off).
 */
static const struct {
    const struct stat_group *group;
    const void *(*obj)(const struct worker *w);
} series[] = {
    {&admin_series, of_worker}, {&semantic_series, of_semantic},   {&bound_series, of_bound},
    {&l1_series, of_l1},        {&pricing_series, of_conf},        {&tenants_series, of_conf},
    {&route_series, of_route},  {&route_replica_series, of_route},
};

static void worker_sources(const struct worker *w, struct stat_source src[PC_ARRAY_LEN(series)])
{
    for (size_t i = 0; i < PC_ARRAY_LEN(series); i++)
        src[i] = (struct stat_source){series[i].group, series[i].obj(w)};
}

void admin_metrics_doc(struct pc_buf *out)
{
    const struct stat_group *groups[PC_ARRAY_LEN(series)];
    for (size_t i = 0; i < PC_ARRAY_LEN(series); i++)
        groups[i] = series[i].group;
    stats_render_doc(out, groups, PC_ARRAY_LEN(series));
}

static void serve_stats(struct worker *w, struct httpd_req *hr)
{
    struct stat_source src[PC_ARRAY_LEN(series)];
    worker_sources(w, src);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_json(&out, src, PC_ARRAY_LEN(src), w->conf->prices != NULL);
    reply_json(hr, 200, pc_buf_cstr(&out));
    pc_buf_free(&out);
}

static void serve_metrics(struct worker *w, struct httpd_req *hr)
{
    struct stat_source src[PC_ARRAY_LEN(series)];
    worker_sources(w, src);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out, src, PC_ARRAY_LEN(src));
    httpd_add_header(hr, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    httpd_reply(hr, 200, out.data, out.len);
    pc_buf_free(&out);
}

/* Constant-time comparison of a presented secret with the configured one. */
static bool same_secret(const char *token, const char *given, size_t gl)
{
    size_t tl = strlen(token);
    unsigned char diff = (unsigned char)(tl != gl);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)(token[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
}

/* Whether the request presents token as Authorization: Bearer. */
static bool bearer_ok(const char *token, struct httpd_req *hr)
{
    const char *auth = httpd_req_header(hr, "Authorization");
    if (token == NULL || token[0] == '\0' || auth == NULL || !pc_strncaseeq(auth, "Bearer ", 7))
        return false;
    return same_secret(token, auth + 7, strlen(auth + 7));
}

static bool authorized(const struct worker *w, struct httpd_req *hr)
{
    return bearer_ok(w->conf->admin_token, hr);
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* HTTP basic authentication whose password is token (any user name). */
static bool basic_ok(const char *token, struct httpd_req *hr)
{
    const char *auth = httpd_req_header(hr, "Authorization");
    if (auth == NULL || !pc_strncaseeq(auth, "Basic ", 6))
        return false;
    char plain[512];
    size_t n = 0;
    unsigned acc = 0;
    int bits = 0;
    for (const char *p = auth + 6; *p && *p != '=' && n < sizeof plain; p++) {
        int v = b64val(*p);
        if (v < 0)
            return false;
        acc = (acc << 6) | (unsigned)v;
        if ((bits += 6) >= 8) {
            bits -= 8;
            plain[n++] = (char)((acc >> bits) & 0xff);
        }
    }
    const char *colon = memchr(plain, ':', n);
    bool ok = colon != NULL && same_secret(token, colon + 1, n - (size_t)(colon + 1 - plain));
    memset(plain, 0, sizeof plain);
    return ok;
}

/* /metrics, /stats, /dashboard: open, or metrics-token as a bearer token or basic password. */
static bool metrics_allowed(const struct worker *w, struct httpd_req *hr)
{
    const char *token = w->conf->metrics_token;
    if (token == NULL || token[0] == '\0')
        return true;
    if (bearer_ok(token, hr) || basic_ok(token, hr))
        return true;
    httpd_add_header(hr, "WWW-Authenticate", "Basic realm=\"promptcache\", charset=\"UTF-8\"");
    httpd_add_header(hr, "WWW-Authenticate", "Bearer");
    reply_error(hr, 401, "this endpoint requires the metrics-token (Authorization: Bearer TOKEN)");
    return false;
}

/* A 16x16 icon (ICO holding a 32-bit BMP): a teal disc, drawn once. */
static void favicon(struct pc_buf *out)
{
    static const unsigned char head[] = {0, 0, 1,  0, 1,  0, 16, 16, 0, 0, 1,    0, 32, 0, 0x68, 4,
                                         0, 0, 22, 0, 0,  0, 40, 0,  0, 0, 16,   0, 0,  0, 32,   0,
                                         0, 0, 1,  0, 32, 0, 0,  0,  0, 0, 0x40, 4, 0,  0};
    pc_buf_append(out, (const char *)head, sizeof head);
    static const char zeros[16] = {0};
    pc_buf_append(out, zeros, 16); /* resolution, palette: unused */
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) {
            double dx = x - 7.5, dy = y - 7.5;
            bool in = dx * dx + dy * dy <= 7.5 * 7.5;
            bool ring = in && dx * dx + dy * dy >= 3.0 * 3.0;
            unsigned char px[4] = {ring ? 0x88 : 0xff, ring ? 0x96 : 0xff, ring ? 0x0d : 0xff,
                                   in ? 0xff : 0};
            pc_buf_append(out, (const char *)px, 4);
        }
    for (int i = 0; i < 16 * 4; i++)
        pc_buf_append_char(out, 0); /* the AND mask: transparency comes from alpha */
}

/* The value of `name` in a query string (copied into out): 1, 0 if absent, -1 if too long. */
static int query_param(const char *query, const char *name, char *out, size_t outlen);

static void serve_dash_data(struct worker *w, struct httpd_req *hr)
{
    if (w->dash == NULL) {
        reply_error(hr, 503, "the dashboard needs the cache's Redis (cache is off)");
        return;
    }
    char hv[16];
    int64_t hours = 24;
    const char *q = httpd_req_query(hr);
    int found = q != NULL ? query_param(q, "hours", hv, sizeof hv) : 0;
    if (found < 0 ||
        (found > 0 && (pc_parse_i64(hv, &hours) < 0 || hours < 1 || hours > DASH_HOURS_MAX))) {
        reply_error(hr, 400, "hours must be from 1 to 168");
        return;
    }
    struct pc_buf out = PC_BUF_INIT;
    dash_render(w->dash, w->conf->prices, w->conf->tenants, (int)hours, &out);
    reply_json(hr, 200, pc_buf_cstr(&out));
    pc_buf_free(&out);
}

/* A value longer than out holds is no value cut short ("0000000000000000024" is not 2). */
static int query_param(const char *query, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = query; p != NULL && *p;) {
        size_t n = strcspn(p, "&");
        if (n > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            if (n - nl - 1 >= outlen)
                return -1;
            snprintf(out, outlen, "%.*s", (int)(n - nl - 1), p + nl + 1);
            return 1;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}

static void op_free(struct admin_op *op)
{
    cache_cancel(&op->cmd);
    purge_cancel(&op->purge);
    op->magic = 0;
    free(op);
}

/*
 * The client left: the flush or purge runs on to its end, unanswered. Stopped half way, its
 * deletes would be done without their stream events, and every other instance's L1 (and a
 * flush's own) would serve what was deleted for the rest of its TTL.
 */
static void op_closed(struct httpd_req *hr, void *arg)
{
    (void)hr;
    struct admin_op *op = arg;
    PC_CHECK_OBJ(op, ADMIN_OP_MAGIC);
    op->hr = NULL;
}

/* A flush or purge is over: {"deleted":N}, or 503 if Redis failed. */
static void op_done(void *arg, bool ok, long long n)
{
    struct admin_op *op = arg;
    PC_CHECK_OBJ(op, ADMIN_OP_MAGIC);
    op->cmd = NULL;
    op->purge = NULL;
    if (op->hr != NULL)
        httpd_set_close_cb(op->hr, NULL, NULL);
    const char *left = op->hr == NULL ? " (its client had left)" : "";
    if (!ok) {
        static const char rerun[] = "; run it again once Redis answers: it tells every instance "
                                    "what this one deleted";
        log_warn("admin: %s failed after deleting %lld entries: Redis error or timeout%s%s",
                 op->what, n, left, op->narrow ? rerun : "");
        if (op->hr != NULL)
            reply_error(op->hr, 503,
                        op->narrow ? "cache delete failed: Redis error or timeout; run it again "
                                     "once Redis answers: it tells every instance what this one "
                                     "deleted"
                                   : "cache delete failed: Redis error or timeout");
    } else {
        char body[64];
        snprintf(body, sizeof(body), "{\"deleted\":%lld}", n);
        log_notice("admin: %s deleted %lld entr%s%s", op->what, n, n == 1 ? "y" : "ies", left);
        if (op->hr != NULL)
            reply_json(op->hr, 200, body);
    }
    op_free(op);
}

static struct admin_op *op_new(struct worker *w, struct httpd_req *hr)
{
    struct admin_op *op = pc_calloc(1, sizeof(*op));
    op->magic = ADMIN_OP_MAGIC;
    op->w = w;
    op->hr = hr;
    return op;
}

/* The operation is under way (the client may leave: it runs on, unanswered), or 503. */
static void op_started(struct admin_op *op)
{
    if (op->cmd == NULL && op->purge == NULL) {
        struct httpd_req *hr = op->hr;
        op_free(op);
        reply_error(hr, 503, "Redis is not available");
        return;
    }
    httpd_set_close_cb(op->hr, op_closed, op);
}

/*
 * Percent-decode s[0..n) into out (NUL-terminated). '+' stays '+' (RFC 3986:
 * an offset in an RFC 3339 date is one). -1 if malformed, NUL or too long.
 */
static int url_decode(const char *s, size_t n, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int hi = i + 2 < n ? pc_hex_digit((unsigned char)s[i + 1]) : -1;
            int lo = i + 2 < n ? pc_hex_digit((unsigned char)s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (o + 1 >= outlen || c == '\0')
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

/*
 * The filters of DELETE /admin/cache from the query (percent-decoded):
 * tenant, namespace, model, older-than. -1 with a message in err.
 */
static int query_filter(const char *q, struct purge_filter *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof(*f));
    int64_t now = pc_wall_ms();
    for (const char *p = q; p != NULL && *p;) {
        size_t n = strcspn(p, "&"), nl = strcspn(p, "=&");
        char name[32], value[ENTRY_META_MAX + 1];
        if (nl == n || nl >= sizeof name) {
            snprintf(err, errlen,
                     "query parameters are NAME=VALUE (filters: " PURGE_FILTER_NAMES ")");
            return -1;
        }
        snprintf(name, sizeof name, "%.*s", (int)nl, p);
        if (url_decode(p + nl + 1, n - nl - 1, value, sizeof value) < 0) {
            snprintf(err, errlen, "%s: the value is not valid percent-encoding (or too long)",
                     name);
            return -1;
        }
        if (purge_filter_set(f, name, value, now, err, errlen) < 0)
            return -1;
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}

/* "namespace=x model=y older-than=... tenant=..." for the log line. */
static void describe_filter(const struct purge_filter *f, char *out, size_t n)
{
    int64_t age_s = f->before_ms ? (pc_wall_ms() - f->before_ms) / 1000 : 0;
    snprintf(out, n, "purge%s%s%s%s%s%s", f->ns[0] ? " namespace=" : "", f->ns,
             f->model[0] ? " model=" : "", f->model, f->tenant[0] ? " tenant=" : "", f->tenant);
    if (f->before_ms)
        snprintf(out + strlen(out), n - strlen(out), " older-than=%llds", (long long)age_s);
}

static void admin_flush(struct worker *w, struct httpd_req *hr)
{
    struct purge_filter f;
    char err[256];
    const char *q = httpd_req_query(hr);
    if (query_filter(q, &f, err, sizeof err) < 0) {
        reply_error(hr, 400, err);
        return;
    }
    if (!cache_ready(w->cache)) {
        reply_error(hr, 503, "Redis is not available");
        return;
    }
    struct admin_op *op = op_new(w, hr);
    /* What is fetched meanwhile was asked for before: not stored (pc_fence.h). */
    fence_mark_all(w->fence);
    if (purge_filter_narrow(&f)) {
        describe_filter(&f, op->what, sizeof op->what);
        op->narrow = true;
        op->purge = purge_matching(w->store, w->l1, &w->stats, &f, op_done, op);
    } else {
        snprintf(op->what, sizeof op->what, "cache flush%s%s", f.tenant[0] ? " tenant=" : "",
                 f.tenant);
        op->cmd = cache_flush(w->cache, f.tenant[0] ? f.tenant : NULL, op_done, op);
    }
    op_started(op);
}

/* DELETE /admin/cache/entries/ID: one entry, by the id X-Cache-Key showed. */
static void admin_delete_entry(struct worker *w, struct httpd_req *hr, const char *id)
{
    char tenant[TENANT_ID_LEN + 1];
    unsigned char exact[PC_SHA256_LEN];
    const char *q = httpd_req_query(hr);
    /* Filters (or a dry run) asked of one entry's delete would be ignored: the entry would
     * go all the same. */
    if (q != NULL && q[0] != '\0') {
        reply_error(hr, 400,
                    "DELETE /admin/cache/entries/ID takes no query parameters (filters are "
                    "for DELETE /admin/cache)");
        return;
    }
    if (entry_id_parse(id, strlen(id), tenant, exact) < 0) {
        reply_error(hr, 400,
                    "the entry id is the 80 hex characters of an answer's X-Cache-Key header");
        return;
    }
    if (!cache_ready(w->cache)) {
        reply_error(hr, 503, "Redis is not available");
        return;
    }
    struct admin_op *op = op_new(w, hr);
    fence_mark(w->fence, exact); /* what is fetched meanwhile was asked for before */
    snprintf(op->what, sizeof op->what, "delete of entry %s", id);
    op->purge = purge_entry(w->store, w->l1, &w->stats, tenant, exact, op_done, op);
    op_started(op);
}

static void admin_api(struct worker *w, struct httpd_req *hr, const char *path)
{
    if (!authorized(w, hr)) {
        httpd_add_header(hr, "WWW-Authenticate", "Bearer");
        reply_error(hr, 401,
                    w->conf->admin_token[0] ? "admin endpoints require Authorization: Bearer "
                                              "<admin-token>"
                                            : "admin endpoints are disabled: set admin-token");
        return;
    }
    bool del = strcmp(httpd_req_method(hr), "DELETE") == 0;
    if (strcmp(path, "/admin/cache") == 0) {
        if (del)
            admin_flush(w, hr);
        else
            reply_error(hr, 405,
                        "use DELETE /admin/cache[?tenant=ID&namespace=NS&model=M&older-than=T]");
        return;
    }
    if (strncmp(path, ENTRIES_PATH, strlen(ENTRIES_PATH)) == 0) {
        if (del)
            admin_delete_entry(w, hr, path + strlen(ENTRIES_PATH));
        else
            reply_error(hr, 405, "use DELETE /admin/cache/entries/ID (ID: an X-Cache-Key)");
        return;
    }
    reply_error(hr, 404, "unknown admin endpoint");
}

void admin_handle(struct worker *w, struct httpd_req *hr)
{
    const char *path = httpd_req_path(hr);
    const char *method = httpd_req_method(hr);
    if (strcmp(path, "/admin") == 0 || strncmp(path, "/admin/", 7) == 0) {
        admin_api(w, hr, path);
        return;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        reply_error(hr, 405, "only GET is supported here");
        return;
    }
    if (strcmp(path, "/healthz") == 0) {
        reply_json(hr, 200, w->stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}");
    } else if (strcmp(path, "/readyz") == 0) {
        if (ready(w) && !w->stopping)
            reply_json(hr, 200, "{\"status\":\"ready\"}");
        else
            reply_json(hr, 503,
                       w->stopping ? "{\"status\":\"stopping\"}"
                                   : "{\"status\":\"not ready\",\"reason\":\"redis unavailable\"}");
    } else if (strcmp(path, "/favicon.ico") == 0) {
        struct pc_buf ico = PC_BUF_INIT;
        favicon(&ico);
        httpd_add_header(hr, "Content-Type", "image/x-icon");
        httpd_add_header(hr, "Cache-Control", "max-age=86400");
        httpd_reply(hr, 200, ico.data, ico.len);
        pc_buf_free(&ico);
    } else if (!metrics_allowed(w, hr)) {
        return;
    } else if (strcmp(path, "/stats") == 0) {
        serve_stats(w, hr);
    } else if (strcmp(path, "/metrics") == 0) {
        serve_metrics(w, hr);
    } else if (strcmp(path, "/dashboard/data") == 0) {
        serve_dash_data(w, hr);
    } else {
        httpd_add_header(hr, "Content-Type", "text/html; charset=utf-8");
        httpd_add_header(hr, "Cache-Control", "no-store");
        httpd_add_header(hr, "Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; style-src "
                         "'unsafe-inline'; connect-src 'self'; img-src 'self' data:");
        httpd_reply(hr, 200, pc_dashboard_html, pc_dashboard_html_len);
    }
}
