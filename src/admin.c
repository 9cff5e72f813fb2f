/*
 * admin.c - the proxy's own endpoints (see pc_admin.h). Owns the small
 * state of an asynchronous admin operation (a cache flush) while Redis works.
 *
 *   GET /healthz     200 while the process serves
 *   GET /readyz      200 when this worker can use the cache (or caching is off), else 503
 *   GET /stats       metrics as one flat JSON object
 *   GET /metrics     metrics in Prometheus text format
 *   GET /dashboard   a small HTML page over /stats
 *   DELETE /admin/cache[?tenant=ID]   flush all entries or one tenant's
 *                                     (Authorization: Bearer <admin-token>)
 */
#include "pc_admin.h"
#include "pc_api.h"
#include "pc_conf.h"
#include "pc_entry.h"
#include "pc_httpd.h"
#include "pc_log.h"
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

static const char dashboard_html[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>promptcache</title>\n"
    "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
    "table{border-collapse:collapse}td{padding:2px 12px;border-bottom:1px solid #eee}"
    "td.v{text-align:right;font-variant-numeric:tabular-nums}h1{font-size:20px}"
    "#hr{font-size:32px;font-weight:600}</style></head><body>\n"
    "<h1>promptcache</h1><div>hit rate <span id=\"hr\">-</span></div>\n"
    "<table id=\"t\"></table>\n"
    "<script>\n"
    "async function tick(){\n"
    "  try{const s=await (await fetch('/stats')).json();\n"
    "    document.getElementById('hr').textContent=(100*s.hit_rate).toFixed(1)+'%';\n"
    "    const t=document.getElementById('t');t.innerHTML='';\n"
    "    for(const [k,v] of Object.entries(s)){if(typeof v!=='number')continue;\n"
    "      const r=t.insertRow();r.insertCell().textContent=k;\n"
    "      const c=r.insertCell();c.className='v';c.textContent=v.toLocaleString();}\n"
    "  }catch(e){}\n"
    "}\n"
    "tick();setInterval(tick,2000);\n"
    "</script></body></html>\n";

bool admin_owns_path(const char *path)
{
    static const char *const own[] = {"/healthz", "/readyz",    "/stats",
                                      "/metrics", "/dashboard", "/admin"};
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
    pc_buf_printf(&extra,
                  ",\"routing\":\"%s\",\"replicas\":", route_policy_name(route_policy(w->route)));
    route_render_json(w->route, &extra);
    stats_render_json(&out, pc_buf_cstr(&extra));
    reply_json(hr, 200, pc_buf_cstr(&out));
    pc_buf_free(&extra);
    pc_buf_free(&out);
}

static void serve_metrics(struct worker *w, struct httpd_req *hr)
{
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out);
    route_render_prometheus(w->route, &out);
    httpd_add_header(hr, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    httpd_reply(hr, 200, out.data, out.len);
    pc_buf_free(&out);
}

/* Constant-time comparison of the presented bearer token with the configured one. */
static bool authorized(const struct worker *w, struct httpd_req *hr)
{
    const char *token = w->conf->admin_token;
    const char *auth = httpd_req_header(hr, "Authorization");
    if (token == NULL || token[0] == '\0' || auth == NULL || !pc_strncaseeq(auth, "Bearer ", 7))
        return false;
    const char *given = auth + 7;
    size_t tl = strlen(token), gl = strlen(given);
    unsigned char diff = (unsigned char)(tl != gl);
    for (size_t i = 0; i < tl; i++)
        diff |= (unsigned char)(token[i] ^ (i < gl ? given[i] : 0));
    return diff == 0;
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
        log_notice("admin: cache flush deleted %lld entries", n);
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
    } else if (strcmp(path, "/stats") == 0) {
        serve_stats(w, hr);
    } else if (strcmp(path, "/metrics") == 0) {
        serve_metrics(w, hr);
    } else {
        httpd_add_header(hr, "Content-Type", "text/html; charset=utf-8");
        httpd_reply(hr, 200, dashboard_html, sizeof(dashboard_html) - 1);
    }
}
