/*
 * admin.c - the proxy's own endpoints (see pc_admin.h). Owns the small
 * state of an asynchronous admin operation (a cache flush) while Redis works.
 *
 *   GET /healthz     200 while the process serves
 *   GET /readyz      200 when this worker can use the cache (or caching is off), else 503
 *   GET /stats       metrics as one flat JSON object
 *   GET /metrics     metrics in Prometheus text format
 *   GET /dashboard   one self-contained HTML page (its script reads the two below)
 *   GET /dashboard/data   hit rate, money and latency of the last hours (pc_dash.h)
 *   GET /favicon.ico the browser's icon, so it never goes upstream
 *   (/stats, /metrics and /dashboard* require metrics-token while it is set)
 *   DELETE /admin/cache[?tenant=ID]   flush all entries or one tenant's
 *                                     (Authorization: Bearer <admin-token>)
 */
#include "pc_admin.h"
#include "pc_api.h"
#include "pc_conf.h"
#include "pc_dash.h"
#include "pc_entry.h"
#include "pc_l1.h"
#include "pc_httpd.h"
#include "pc_log.h"
#include "pc_pricing.h"
#include "pc_route.h"
#include "pc_semantic.h"
#include "pc_cache.h"
#include "pc_worker.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define ADMIN_OP_MAGIC 0x41444d4eu /* "ADMN" */

struct admin_op {
    unsigned magic;
    struct worker *w;
    struct httpd_req *hr;
    struct cache_op *cmd;
};

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
    api_error_body(API_DIALECT_OPENAI, status, msg, &b);
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

static void serve_stats(struct worker *w, struct httpd_req *hr)
{
    struct pc_buf extra = PC_BUF_INIT, out = PC_BUF_INIT;
    pc_buf_printf(&extra, "\"version\":\"%s\",\"uptime_seconds\":%lld,\"workers\":%d,\"ready\":%s",
                  PC_VERSION, (long long)((pc_wall_ms() - w->started_ms) / 1000), w->conf->workers,
                  ready(w) ? "true" : "false");
    if (w->semantic != NULL) {
        pc_buf_append_char(&extra, ',');
        semantic_render_json(w->semantic, &extra);
    }
    if (w->l1 != NULL) {
        pc_buf_append_char(&extra, ',');
        l1_render_json(w->l1, &extra);
    }
    pricing_render_json(w->conf->prices, &extra);
    pc_buf_printf(&extra,
                  ",\"routing\":\"%s\",\"replicas\":", route_policy_name(route_policy(w->route)));
    route_render_json(w->route, &extra);
    stats_render_json(&out, pc_buf_cstr(&extra), w->conf->prices != NULL);
    reply_json(hr, 200, pc_buf_cstr(&out));
    pc_buf_free(&extra);
    pc_buf_free(&out);
}

static void serve_metrics(struct worker *w, struct httpd_req *hr)
{
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out);
    route_render_prometheus(w->route, &out);
    pricing_render_prometheus(w->conf->prices, &out);
    pc_buf_printf(&out, /* /readyz as a series: the Redis alert watches it */
                  "# HELP promptcache_ready Whether every worker can use the cache (1; or "
                  "caching is off), as /readyz says; 0 while Redis is unreachable for one\n"
                  "# TYPE promptcache_ready gauge\npromptcache_ready %d\n",
                  ready(w) ? 1 : 0);
    if (w->l1 != NULL) /* an alert watches it: off means every exact hit costs a Redis call */
        pc_buf_printf(&out,
                      "# HELP promptcache_l1_live Whether the in-process L1 serves hits (1), or "
                      "is off because its stream reader lost Redis (0); absent with l1-size 0\n"
                      "# TYPE promptcache_l1_live gauge\npromptcache_l1_live %d\n",
                      l1_live(w->l1) ? 1 : 0);
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

/* The value of `name` in a query string (copied into out); false if absent. */
static bool query_param(const char *query, const char *name, char *out, size_t outlen);

static void serve_dash_data(struct worker *w, struct httpd_req *hr)
{
    if (w->dash == NULL) {
        reply_error(hr, 503, "the dashboard needs the cache's Redis (cache is off)");
        return;
    }
    char hv[16];
    int64_t hours = 24;
    const char *q = httpd_req_query(hr);
    if (q != NULL && query_param(q, "hours", hv, sizeof hv) &&
        (pc_parse_i64(hv, &hours) < 0 || hours < 1 || hours > DASH_HOURS_MAX)) {
        reply_error(hr, 400, "hours must be from 1 to 168");
        return;
    }
    struct pc_buf out = PC_BUF_INIT;
    dash_render(w->dash, w->conf->prices, (int)hours, &out);
    reply_json(hr, 200, pc_buf_cstr(&out));
    pc_buf_free(&out);
}

/* The value of `name` in a query string (copied into out); false if absent. */
static bool query_param(const char *query, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    for (const char *p = query; p != NULL && *p;) {
        size_t n = strcspn(p, "&");
        if (n > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            snprintf(out, outlen, "%.*s", (int)(n - nl - 1), p + nl + 1);
            return true;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return false;
}

static bool valid_tenant_id(const char *id)
{
    if (strlen(id) != TENANT_ID_LEN)
        return false;
    for (size_t i = 0; i < TENANT_ID_LEN; i++)
        if (!isxdigit((unsigned char)id[i]) || isupper((unsigned char)id[i]))
            return false;
    return true;
}

static void op_free(struct admin_op *op)
{
    cache_cancel(&op->cmd);
    op->magic = 0;
    free(op);
}

static void flush_closed(struct httpd_req *hr, void *arg)
{
    (void)hr;
    struct admin_op *op = arg;
    PC_CHECK_OBJ(op, ADMIN_OP_MAGIC);
    op_free(op);
}

static void flush_done(void *arg, bool ok, long long n)
{
    struct admin_op *op = arg;
    PC_CHECK_OBJ(op, ADMIN_OP_MAGIC);
    op->cmd = NULL;
    httpd_set_close_cb(op->hr, NULL, NULL);
    if (!ok) {
        reply_error(op->hr, 503, "cache flush failed: Redis error or timeout");
    } else {
        char body[64];
        snprintf(body, sizeof(body), "{\"deleted\":%lld}", n);
        log_notice("admin: cache flush deleted %lld entr%s", n, n == 1 ? "y" : "ies");
        reply_json(op->hr, 200, body);
    }
    op_free(op);
}

static void admin_flush(struct worker *w, struct httpd_req *hr)
{
    char tenant[64];
    bool one = false;
    const char *q = httpd_req_query(hr);
    if (q != NULL && query_param(q, "tenant", tenant, sizeof(tenant))) {
        if (!valid_tenant_id(tenant)) {
            reply_error(hr, 400,
                        "tenant must be the 16 lower-case hex characters shown in the "
                        "access log");
            return;
        }
        one = true;
    }
    if (!cache_ready(w->cache)) {
        reply_error(hr, 503, "Redis is not available");
        return;
    }
    struct admin_op *op = pc_calloc(1, sizeof(*op));
    op->magic = ADMIN_OP_MAGIC;
    op->w = w;
    op->hr = hr;
    op->cmd = cache_flush(w->cache, one ? tenant : NULL, flush_done, op);
    if (op->cmd == NULL) {
        op_free(op);
        reply_error(hr, 503, "Redis is not available");
        return;
    }
    httpd_set_close_cb(hr, flush_closed, op);
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
    if (strcmp(path, "/admin/cache") == 0) {
        if (strcmp(httpd_req_method(hr), "DELETE") == 0)
            admin_flush(w, hr);
        else
            reply_error(hr, 405, "use DELETE /admin/cache[?tenant=ID]");
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
