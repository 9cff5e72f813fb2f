/*
 * cors.c - cross-origin access for browser clients (see pc_cors.h). Owns
 * nothing; the allowed request headers are one table.
 *
 * Credentials are never "allowed" in the CORS sense (no
 * Access-Control-Allow-Credentials): browser SDKs send their API key in a
 * header, not a cookie, and "*" could not be combined with it anyway.
 */
#include "pc_cors.h"
#include "pc_httpd.h"

#include <ctype.h>
#include <string.h>

#define CORS_NAME_MAX 128

/* Request headers browser code may send: exact names, then families ending in '-'. */
static const char *const cors_headers[] = {
    "authorization", "x-api-key", "api-key",         "content-type", "accept",
    "cache-control", "pragma",    "idempotency-key", "x-session-id", "x-user-id",
    "anthropic-",    "openai-",   "x-stainless-",    "x-cache-",
};

const char *cors_allow_origin(const struct conf_list *origins, const char *origin)
{
    if (origins == NULL || origin == NULL || *origin == '\0')
        return NULL;
    for (size_t i = 0; i < origins->n; i++) {
        if (strcmp(origins->v[i], "*") == 0)
            return "*";
        if (pc_strcaseeq(origins->v[i], origin))
            return origin;
    }
    return NULL;
}

bool cors_is_preflight(const char *method, const char *origin, const char *request_method)
{
    return method != NULL && strcmp(method, "OPTIONS") == 0 && origin != NULL &&
           request_method != NULL;
}

bool cors_header_allowed(const char *name)
{
    if (name == NULL || *name == '\0')
        return false;
    for (size_t i = 0; i < PC_ARRAY_LEN(cors_headers); i++) {
        const char *h = cors_headers[i];
        size_t n = strlen(h);
        if (h[n - 1] == '-' ? strlen(name) > n && pc_strncaseeq(name, h, n) : pc_strcaseeq(name, h))
            return true;
    }
    return false;
}

/* One name of the list (blanks trimmed): appended if allowed; returns 1 if refused. */
static size_t filter_one(const char *p, size_t n, struct pc_buf *out)
{
    char name[CORS_NAME_MAX + 1];
    while (n > 0 && (*p == ' ' || *p == '\t'))
        p++, n--;
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n == 0)
        return 0;
    if (n > CORS_NAME_MAX)
        return 1;
    for (size_t i = 0; i < n; i++)
        name[i] = (char)tolower((unsigned char)p[i]);
    name[n] = '\0';
    if (!cors_header_allowed(name))
        return 1;
    if (out->len > 0)
        pc_buf_append_str(out, ", ");
    pc_buf_append(out, name, n);
    return 0;
}

size_t cors_filter_headers(const char *list, struct pc_buf *out)
{
    size_t refused = 0;
    if (list == NULL)
        return 0;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        refused += filter_one(p, n, out);
        if (comma == NULL)
            return refused;
        p = comma + 1;
    }
}

void cors_add_headers(struct httpd_req *hr, const char *allow_origin)
{
    httpd_add_header(hr, "Access-Control-Allow-Origin", allow_origin);
    if (strcmp(allow_origin, "*") != 0)
        httpd_add_header(hr, "Vary", "Origin");
    httpd_add_header(hr, "Access-Control-Expose-Headers", CORS_EXPOSE_HEADERS);
}

void cors_add_preflight(struct httpd_req *hr, const char *allow_origin, const char *request_headers)
{
    struct pc_buf allowed = PC_BUF_INIT;
    httpd_add_header(hr, "Access-Control-Allow-Origin", allow_origin);
    httpd_add_header(hr, "Vary", "Origin, Access-Control-Request-Headers");
    httpd_add_header(hr, "Access-Control-Allow-Methods", CORS_ALLOW_METHODS);
    cors_filter_headers(request_headers, &allowed);
    if (allowed.len > 0)
        httpd_add_header(hr, "Access-Control-Allow-Headers", pc_buf_cstr(&allowed));
    httpd_add_header(hr, "Access-Control-Max-Age", CORS_MAX_AGE);
    pc_buf_free(&allowed);
}
