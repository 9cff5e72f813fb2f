/*
 * test_cors.c - CORS policy (src/cors.c): which origins are allowed, what a
 * preflight is, and which request headers browser code may send.
 */
#include "pc_cors.h"
#include "t.h"

static void test_origins(void)
{
    char *list[] = {"https://app.example.com", "http://localhost:3000"};
    struct conf_list some = {list, 2};
    T_CHECK_STR(cors_allow_origin(&some, "https://app.example.com"), "https://app.example.com");
    T_CHECK_STR(cors_allow_origin(&some, "HTTPS://APP.example.com"), "HTTPS://APP.example.com");
    T_CHECK_STR(cors_allow_origin(&some, "http://localhost:3000"), "http://localhost:3000");
    T_CHECK(cors_allow_origin(&some, "http://localhost:3001") == NULL);
    T_CHECK(cors_allow_origin(&some, "https://app.example.com.evil.net") == NULL);
    T_CHECK(cors_allow_origin(&some, "null") == NULL);
    T_CHECK(cors_allow_origin(&some, "") == NULL);
    T_CHECK(cors_allow_origin(&some, NULL) == NULL);
    char *star[] = {"https://app.example.com", "*"};
    struct conf_list any = {star, 2};
    T_CHECK_STR(cors_allow_origin(&any, "https://whatever.example"), "*");
    T_CHECK(cors_allow_origin(&any, NULL) == NULL);
    struct conf_list none = {NULL, 0};
    T_CHECK(cors_allow_origin(&none, "https://app.example.com") == NULL);
    T_CHECK(cors_allow_origin(NULL, "https://app.example.com") == NULL);
}

static void test_preflight(void)
{
    T_CHECK(cors_is_preflight("OPTIONS", "https://a", "POST"));
    T_CHECK(!cors_is_preflight("OPTIONS", "https://a", NULL)); /* a plain OPTIONS request */
    T_CHECK(!cors_is_preflight("OPTIONS", NULL, "POST"));
    T_CHECK(!cors_is_preflight("POST", "https://a", "POST"));
    T_CHECK(!cors_is_preflight("options", "https://a", "POST")); /* methods are case-sensitive */
}

static void test_headers(void)
{
    static const char *const yes[] = {
        "Authorization",
        "x-api-key",
        "api-key",
        "Content-Type",
        "accept",
        "x-stainless-os",
        "X-Stainless-Lang",
        "x-stainless-retry-count",
        "anthropic-version",
        "anthropic-beta",
        "openai-beta",
        "openai-organization",
        "x-cache-ttl",
        "X-Cache-Namespace",
        "cache-control",
        "idempotency-key",
        "anthropic-dangerous-direct-browser-access",
    };
    static const char *const no[] = {"cookie",    "x-evil", "x-stainless",
                                     "anthropic", "openai", "x-cache",
                                     "host",      "",       "x-forwarded-for"};
    for (size_t i = 0; i < PC_ARRAY_LEN(yes); i++)
        T_CHECK(cors_header_allowed(yes[i]));
    for (size_t i = 0; i < PC_ARRAY_LEN(no); i++)
        T_CHECK(!cors_header_allowed(no[i]));
    T_CHECK(!cors_header_allowed(NULL));

    struct pc_buf out = PC_BUF_INIT;
    T_CHECK_INT(cors_filter_headers(" Authorization ,content-type,x-evil,,X-Stainless-OS\t", &out),
                1);
    T_CHECK_STR(pc_buf_cstr(&out), "authorization, content-type, x-stainless-os");
    pc_buf_reset(&out);
    T_CHECK_INT(cors_filter_headers("", &out), 0);
    T_CHECK_INT(cors_filter_headers(NULL, &out), 0);
    T_CHECK_INT(out.len, 0);
    char longname[200];
    memset(longname, 'a', sizeof(longname) - 1);
    memcpy(longname, "x-stainless-", 12);
    longname[sizeof(longname) - 1] = '\0';
    T_CHECK_INT(cors_filter_headers(longname, &out), 1);
    pc_buf_free(&out);
}

int main(void)
{
    T_RUN(test_origins);
    T_RUN(test_preflight);
    T_RUN(test_headers);
    T_DONE();
}
