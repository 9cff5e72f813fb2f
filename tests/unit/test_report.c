/*
 * test_report.c - the pure parts of `promptcache report` and of the tally
 * that feeds it: field parsing, aggregation, pricing, rendering, and the
 * tally's key and model forms.
 */
#include "pc_report.h"
#include "pc_tally.h"
#include "t.h"

#include <math.h>

#include <cjson/cJSON.h>

static const char prices[] = "{\"currency\":\"EUR\",\"models\":{"
                             "\"gpt-4o\":{\"input\":2.5,\"output\":10},"
                             "\"gpt-4o-mini\":{\"input\":0.15,\"output\":0.6}}}";

static void add(struct report *r, const char *field, int64_t n)
{
    T_CHECK_INT(report_add_field(r, field, strlen(field), n), 0);
}

static void test_fields_and_totals(void)
{
    struct report r;
    report_init(&r, 0, 3600 * 1000);
    add(&r, "requests|aaaaaaaaaaaaaaaa|gpt-4o", 3);
    add(&r, "hits|aaaaaaaaaaaaaaaa|gpt-4o", 2);
    add(&r, "misses|aaaaaaaaaaaaaaaa|gpt-4o", 1);
    add(&r, "requests|bbbbbbbbbbbbbbbb|gpt-4o", 1);
    add(&r, "misses|bbbbbbbbbbbbbbbb|gpt-4o", 1);
    add(&r, "requests|bbbbbbbbbbbbbbbb|claude-sonnet-4-5", 4);
    add(&r, "hits|bbbbbbbbbbbbbbbb|claude-sonnet-4-5", 4);
    /* Not ours: refused, nothing counted. */
    const char *bad[] = {"requests|x", "nosuch|a|b", "requests", "|a|b"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        T_CHECK_INT(report_add_field(&r, bad[i], strlen(bad[i]), 5), -1);
    T_CHECK_INT(r.total.v[TALLY_requests], 8);
    T_CHECK_INT(r.total.v[TALLY_hits], 6);
    T_CHECK_INT(r.total.v[TALLY_misses], 2);
    T_CHECK_INT(r.nmodels, 2);
    T_CHECK_INT(r.ntenants, 2);
    report_sort(&r);
    T_CHECK_STR(r.models[0].name, "claude-sonnet-4-5"); /* 4 requests each: ties by name */
    T_CHECK_INT(r.models[0].v[TALLY_requests], 4);
    T_CHECK_STR(r.models[1].name, "gpt-4o");
    T_CHECK_STR(r.tenants[0].name, "bbbbbbbbbbbbbbbb");
    T_CHECK_INT(r.tenants[0].v[TALLY_requests], 5);
    report_free(&r);
}

static void test_pricing(void)
{
    struct report r;
    char err[128];
    report_init(&r, 0, 3600 * 1000);
    T_CHECK_INT(report_load_prices(&r, prices, strlen(prices), err, sizeof(err)), 0);
    T_CHECK_STR(r.currency, "EUR");
    /* Longest prefix wins: a dated gpt-4o-mini is priced as gpt-4o-mini, not gpt-4o. */
    add(&r, "saved_prompt_tokens|t|gpt-4o-mini-2024-07-18", 1000000);
    add(&r, "saved_completion_tokens|t|gpt-4o-mini-2024-07-18", 1000000);
    add(&r, "saved_prompt_tokens|t|gpt-4o", 2000000);
    add(&r, "saved_prompt_tokens|t|unknown-model", 5000000);
    T_CHECK(fabs(r.total.money_saved - (0.15 + 0.6 + 5.0)) < 1e-9);
    T_CHECK(fabs(r.tenants[0].money_saved - 5.75) < 1e-9);
    report_free(&r);

    report_init(&r, 0, 0);
    const char *broken[] = {"", "[]", "{\"models\":3}",
                            "{\"models\":{\"m\":{\"input\":\"1\",\"output\":2}}}",
                            "{\"models\":{\"m\":{\"input\":-1,\"output\":2}}}"};
    for (size_t i = 0; i < PC_ARRAY_LEN(broken); i++)
        T_CHECK_INT(report_load_prices(&r, broken[i], strlen(broken[i]), err, sizeof(err)), -1);
    report_free(&r);
}

static void test_render(void)
{
    struct report r;
    char err[128];
    report_init(&r, 1764687600000, 1764687600000 + 3600 * 1000);
    report_load_prices(&r, prices, strlen(prices), err, sizeof(err));
    add(&r, "requests|aaaaaaaaaaaaaaaa|gpt-4o", 4);
    add(&r, "hits|aaaaaaaaaaaaaaaa|gpt-4o", 3);
    add(&r, "misses|aaaaaaaaaaaaaaaa|gpt-4o", 1);
    add(&r, "saved_prompt_tokens|aaaaaaaaaaaaaaaa|gpt-4o", 400000);
    add(&r, "requests|aaaaaaaaaaaaaaaa|we,ird\"model", 1);
    report_sort(&r);

    struct pc_buf out = PC_BUF_INIT;
    report_render(&r, REPORT_JSON, &out);
    cJSON *j = cJSON_Parse(pc_buf_cstr(&out));
    T_CHECK(j != NULL);
    const cJSON *total = cJSON_GetObjectItem(j, "total");
    T_CHECK_INT(cJSON_GetObjectItem(total, "requests")->valuedouble, 5);
    T_CHECK(fabs(cJSON_GetObjectItem(total, "hit_rate")->valuedouble - 0.75) < 1e-9);
    T_CHECK(fabs(cJSON_GetObjectItem(total, "money_saved")->valuedouble - 1.0) < 1e-9);
    T_CHECK_STR(cJSON_GetObjectItem(j, "from")->valuestring, "2025-12-02T15:00:00Z");
    T_CHECK_STR(cJSON_GetObjectItem(j, "currency")->valuestring, "EUR");
    T_CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(j, "models")), 2);
    cJSON_Delete(j);

    pc_buf_reset(&out);
    report_render(&r, REPORT_CSV, &out);
    const char *csv = pc_buf_cstr(&out);
    T_CHECK(strncmp(csv, "scope,name,requests,hits,misses,", 32) == 0);
    T_CHECK(strstr(csv, "\ntotal,,5,3,1,") != NULL);
    T_CHECK(strstr(csv, "\nmodel,\"we,ird\"\"model\",1,") != NULL); /* quoted */

    pc_buf_reset(&out);
    report_render(&r, REPORT_TABLE, &out);
    T_CHECK(strstr(pc_buf_cstr(&out), "by tenant") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&out), "75.0%") != NULL);
    pc_buf_free(&out);
    report_free(&r);
}

static void test_tally_forms(void)
{
    char key[TALLY_KEY_MAX], model[TALLY_MODEL_MAX + 1];
    tally_key(1764690000000, key); /* 2025-12-02 15:40 UTC */
    T_CHECK_STR(key, "pc:1:r:2025120215");
    tally_model("gpt-4o-mini-2024-07-18", model);
    T_CHECK_STR(model, "gpt-4o-mini-2024-07-18");
    tally_model("a|b c\n", model); /* '|' would split report fields */
    T_CHECK_STR(model, "a_b_c_");
    tally_model(NULL, model);
    T_CHECK_STR(model, "-");
    char longname[200];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    tally_model(longname, model);
    T_CHECK_INT(strlen(model), TALLY_MODEL_MAX);
    for (int m = 0; m < TALLY__COUNT; m++) {
        const char *name = tally_metric_name((enum tally_metric)m);
        T_CHECK_INT(tally_metric_parse(name, strlen(name)), m);
    }
    T_CHECK_INT(tally_metric_parse("hit", 3), -1);
}

static void test_tally_rows(void)
{
    struct tally *t = tally_create(NULL, NULL);
    tally_add(t, "m1", "aaaaaaaaaaaaaaaa", TALLY_requests, 1);
    tally_add(t, "m1", "aaaaaaaaaaaaaaaa", TALLY_hits, 1);
    tally_add(t, "m2", "aaaaaaaaaaaaaaaa", TALLY_requests, 1);
    tally_add(t, "m2", "aaaaaaaaaaaaaaaa", TALLY_misses, 0); /* zero: no row */
    T_CHECK_INT(tally_pending(t), 2);
    /* Without a store nothing is flushed: the rows wait. */
    tally_flush(t);
    T_CHECK_INT(tally_pending(t), 2);
    /* Unbounded model names cannot grow memory without bound. */
    for (int i = 0; i < 10000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "model-%d", i);
        tally_add(t, name, "bbbbbbbbbbbbbbbb", TALLY_requests, 1);
    }
    T_CHECK(tally_pending(t) <= 4097);
    tally_destroy(&t);
    T_CHECK(t == NULL);
}

int main(void)
{
    T_RUN(test_fields_and_totals);
    T_RUN(test_pricing);
    T_RUN(test_render);
    T_RUN(test_tally_forms);
    T_RUN(test_tally_rows);
    T_DONE();
}
