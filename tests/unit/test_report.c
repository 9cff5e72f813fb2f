/*
 * test_report.c - the pure parts of `promptcache report` and of the tally
 * that feeds it: field validation and aggregation, pricing, rendering, and
 * the tally's key and model forms and its bounds.
 */
#include "pc_report.h"
#include "pc_tally.h"
#include "t.h"

#include <math.h>

#include <cjson/cJSON.h>

#define TA "aaaaaaaaaaaaaaaa"
#define TB "bbbbbbbbbbbbbbbb"

static const char prices[] = "{\"currency\":\"EUR\",\"models\":{"
                             "\"gpt-4o\":{\"input\":2.5,\"output\":10},"
                             "\"gpt-4o-mini\":{\"input\":0.15,\"output\":0.6},"
                             "\"claude-opus-4\":{\"input\":15,\"output\":75},"
                             "\"text-embedding-3-small\":{\"input\":0.02}}}";

static void add(struct report *r, const char *field, int64_t n)
{
    T_CHECK_INT(report_add_field(r, field, strlen(field), n), 0);
}

static const struct report_row *find(const struct report_rows *rows, const char *name)
{
    for (size_t i = 0; i < rows->n; i++)
        if (strcmp(rows->v[i].name, name) == 0)
            return &rows->v[i];
    return NULL;
}

static void test_fields_and_totals(void)
{
    struct report r;
    report_init(&r, 0, TALLY_HOUR_MS);
    add(&r, "requests|" TA "|gpt-4o", 3);
    add(&r, "hits|" TA "|gpt-4o", 2);
    add(&r, "misses|" TA "|gpt-4o", 1);
    add(&r, "requests|" TB "|gpt-4o", 1);
    add(&r, "misses|" TB "|gpt-4o", 1);
    add(&r, "requests|" TB "|claude-sonnet-4-5", 4);
    add(&r, "hits|" TB "|claude-sonnet-4-5", 4);
    add(&r, "errors|" TALLY_OTHER "|" TALLY_OTHER, 2);
    /* Not the proxy's: refused and counted, nothing added. */
    const char *bad[] = {"requests|x",
                         "nosuch|" TA "|m",
                         "requests",
                         "|" TA "|m",
                         "requests|AAAAAAAAAAAAAAAA|m",        /* upper-case tenant */
                         "requests|" TA "|bad\x1bmodel",       /* control character */
                         "requests|" TA "|",                   /* empty model */
                         "requests|" TA "|a|b",                /* '|' in the model */
                         "requests|" TA "|\xc3\xa9t\xc3\xa9"}; /* not in the model set */
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        T_CHECK_INT(report_add_field(&r, bad[i], strlen(bad[i]), 5), -1);
    T_CHECK_INT(report_add_field(&r, "hits|" TA "|gpt-4o", 19, -1), -1); /* negative */
    T_CHECK_INT(r.skipped, PC_ARRAY_LEN(bad) + 1);
    T_CHECK_INT(r.total.v[TALLY_requests], 8);
    T_CHECK_INT(r.total.v[TALLY_hits], 6);
    T_CHECK_INT(r.total.v[TALLY_misses], 2);
    T_CHECK_INT(r.total.v[TALLY_errors], 2);
    T_CHECK_INT(r.models.n, 3);
    T_CHECK_INT(r.tenants.n, 3);
    report_sort(&r);
    T_CHECK_STR(r.models.v[0].name, "claude-sonnet-4-5"); /* 4 requests each: ties by name */
    T_CHECK_STR(r.models.v[1].name, "gpt-4o");
    T_CHECK_STR(r.tenants.v[0].name, TB);
    T_CHECK_INT(r.tenants.v[0].v[TALLY_requests], 5);
    report_free(&r);
}

static void test_many_rows_and_saturation(void)
{
    struct report r;
    report_init(&r, 0, TALLY_HOUR_MS);
    /* Many distinct names stay fast (indexed) and each is counted once. */
    for (int i = 0; i < 20000; i++) {
        char field[TALLY_FIELD_MAX];
        snprintf(field, sizeof(field), "requests|%016x|model-%d", i, i % 5000);
        add(&r, field, 1);
    }
    T_CHECK_INT(r.models.n, 5000);
    T_CHECK_INT(r.tenants.n, 20000);
    T_CHECK_INT(r.total.v[TALLY_requests], 20000);
    /* Sums saturate instead of wrapping. */
    add(&r, "hits|" TA "|m", INT64_MAX);
    add(&r, "hits|" TA "|m", INT64_MAX);
    T_CHECK(r.total.v[TALLY_hits] == INT64_MAX);
    report_free(&r);
}

/* With room for 3 models and 2 tenants, the rest go to (other) and the rows still sum to the total.
 */
static void test_bounded_rows(void)
{
    struct report r;
    report_init(&r, 0, TALLY_HOUR_MS);
    r.max_models = 3;
    r.max_tenants = 2;
    for (int i = 0; i < 10; i++) {
        char field[TALLY_FIELD_MAX];
        snprintf(field, sizeof(field), "requests|%016x|model-%d", i, i);
        add(&r, field, i + 1);
        add(&r, field, 1); /* a model or tenant with a row keeps it */
    }
    T_CHECK_INT(r.models.n, 3 + 1);
    T_CHECK_INT(r.tenants.n, 2 + 1);
    int64_t models = 0, tenants = 0;
    for (size_t i = 0; i < r.models.n; i++)
        models += r.models.v[i].v[TALLY_requests];
    for (size_t i = 0; i < r.tenants.n; i++)
        tenants += r.tenants.v[i].v[TALLY_requests];
    T_CHECK_INT(r.total.v[TALLY_requests], 55 + 10);
    T_CHECK_INT(models, r.total.v[TALLY_requests]);
    T_CHECK_INT(tenants, r.total.v[TALLY_requests]);
    T_CHECK(r.folded > 0);
    report_sort(&r);
    T_CHECK_STR(r.models.v[0].name, TALLY_OTHER); /* 7 models' 49 + 7 requests */
    report_free(&r);
}

static void test_pricing(void)
{
    struct report r;
    char err[160];
    report_init(&r, 0, TALLY_HOUR_MS);
    T_CHECK_INT(report_load_prices(&r, prices, strlen(prices), err, sizeof(err)), 0);
    T_CHECK_STR(report_currency(&r), "EUR");
    add(&r, "saved_prompt_tokens|" TA "|gpt-4o-mini-2024-07-18", 1000000);     /* dated: 0.15 */
    add(&r, "saved_completion_tokens|" TA "|gpt-4o-mini-2024-07-18", 1000000); /* 0.6 */
    add(&r, "saved_prompt_tokens|" TA "|gpt-4o", 2000000);                     /* 5.0 */
    add(&r, "saved_prompt_tokens|" TA "|text-embedding-3-small", 1000000);     /* 0.02 */
    T_CHECK(fabs(r.total.money.saved - (0.15 + 0.6 + 5.0 + 0.02)) < 1e-9);
    T_CHECK(!r.total.unpriced);
    /* A different model that merely starts like a priced one is not priced by it. */
    add(&r, "saved_prompt_tokens|" TB "|claude-opus-4-5", 1000000);
    add(&r, "saved_prompt_tokens|" TB "|gpt-4o-mini-turbo", 1000000);
    const struct report_row *opus = find(&r.models, "claude-opus-4-5");
    T_CHECK(opus != NULL && opus->unpriced && opus->money.saved == 0);
    T_CHECK(r.total.unpriced);
    T_CHECK(fabs(r.total.money.saved - 5.77) < 1e-9);
    report_free(&r);

    /* A repeated name: the last one counts. */
    report_init(&r, 0, 0);
    const char *twice =
        "{\"models\":{\"m\":{\"input\":1,\"output\":1},\"m\":{\"input\":2,\"output\":2}}}";
    T_CHECK_INT(report_load_prices(&r, twice, strlen(twice), err, sizeof(err)), 0);
    T_CHECK_INT(pricing_count(r.prices), 1);
    T_CHECK(pricing_find(r.prices, "m")->input == 2);
    report_free(&r);

    const char *broken[] = {"",
                            "[]",
                            "{\"models\":3}",
                            "{\"models\":{\"m\":{\"input\":\"1\",\"output\":2}}}",
                            "{\"models\":{\"m\":{\"input\":-1,\"output\":2}}}",
                            "{\"models\":{\"m\":{\"input\":1e400,\"output\":2}}}",
                            "{\"models\":{\"m\":{\"input\":1e7,\"output\":2}}}",
                            "{\"models\":{\"m\":{\"output\":2}}}"};
    for (size_t i = 0; i < PC_ARRAY_LEN(broken); i++) {
        report_init(&r, 0, 0);
        T_CHECK_INT(report_load_prices(&r, broken[i], strlen(broken[i]), err, sizeof(err)), -1);
        report_free(&r);
    }
}

/* Cache reads and writes at their own prices; provider caching apart; the proxy's own calls. */
static void test_money_by_token_kind(void)
{
    static const char list[] = "{\"models\":{\"claude-sonnet-4-5\":{\"input\":3,"
                               "\"cache_read\":0.3,\"cache_write\":3.75,\"output\":15}}}";
    struct report r;
    char err[160];
    report_init(&r, 0, TALLY_HOUR_MS);
    T_CHECK_INT(report_load_prices(&r, list, strlen(list), err, sizeof(err)), 0);
    /* The hit: 12 input + 288 cache-read tokens, nothing else. */
    add(&r, "saved_prompt_tokens|" TA "|claude-sonnet-4-5", 300);
    add(&r, "saved_cached_tokens|" TA "|claude-sonnet-4-5", 288);
    T_CHECK(fabs(r.total.money.saved - (12 * 3 + 288 * 0.3) / 1e6) < 1e-15);
    /* A miss with a cache read and a write. */
    add(&r, "requests|" TA "|claude-sonnet-4-5", 4);
    add(&r, "upstream_prompt_tokens|" TA "|claude-sonnet-4-5", 1000);
    add(&r, "upstream_cached_tokens|" TA "|claude-sonnet-4-5", 600);
    add(&r, "upstream_cache_write_tokens|" TA "|claude-sonnet-4-5", 300);
    add(&r, "upstream_completion_tokens|" TA "|claude-sonnet-4-5", 10);
    double paid = (100 * 3 + 600 * 0.3 + 300 * 3.75 + 10 * 15) / 1e6;
    T_CHECK(fabs(r.total.money.upstream - paid) < 1e-15);
    T_CHECK(fabs(r.total.money.cache_saving - 600 * 2.7 / 1e6) < 1e-15);
    T_CHECK(fabs(r.total.money.write_premium - 300 * 0.75 / 1e6) < 1e-15);
    add(&r, "own_prompt_tokens|-|claude-sonnet-4-5", 1000);
    T_CHECK(fabs(report_net_saved(&r.total) - (r.total.money.saved - 3000 / 1e6)) < 1e-15);
    T_CHECK(fabs(report_cost_per_1k(&r.total, false) - (paid + r.total.money.saved) * 1000 / 4) <
            1e-12);
    /* The latency histogram. */
    add(&r, "lat|hit|0", 9);
    add(&r, "lat|hit|3", 1);
    T_CHECK_INT(r.lat[TALLY_LAT_HIT][0], 9);
    T_CHECK(report_lat_quantile(r.lat[TALLY_LAT_HIT], 0.5) <= 1.0);
    T_CHECK(report_lat_quantile(r.lat[TALLY_LAT_HIT], 0.99) > 5.0);
    T_CHECK(isnan(report_lat_quantile(r.lat[TALLY_LAT_MISS], 0.5)));
    T_CHECK_INT(report_add_field(&r, "lat|hit|16", 10, 1), -1);
    T_CHECK_INT(report_add_field(&r, "lat|nope|1", 10, 1), -1);
    report_free(&r);
}

static void test_render(void)
{
    struct report r;
    char err[160];
    report_init(&r, 1764687600000, 1764687600000 + TALLY_HOUR_MS);
    report_load_prices(&r, prices, strlen(prices), err, sizeof(err));
    add(&r, "requests|" TA "|gpt-4o", 4);
    add(&r, "hits|" TA "|gpt-4o", 3);
    add(&r, "misses|" TA "|gpt-4o", 1);
    add(&r, "saved_prompt_tokens|" TA "|gpt-4o", 400000);
    add(&r, "requests|" TA "|accounts/fireworks/models/llama-v3p1-405b-instruct", 1);
    add(&r, "requests|" TA "|accounts/fireworks/models/llama-v3p1-70b-instruct", 1);
    add(&r, "saved_prompt_tokens|" TB "|unpriced-model", 10);
    report_sort(&r);

    struct pc_buf out = PC_BUF_INIT;
    report_render(&r, REPORT_JSON, &out);
    cJSON *j = cJSON_Parse(pc_buf_cstr(&out));
    T_CHECK(j != NULL);
    const cJSON *total = cJSON_GetObjectItem(j, "total");
    T_CHECK_INT(cJSON_GetObjectItem(total, "requests")->valuedouble, 6);
    T_CHECK(fabs(cJSON_GetObjectItem(total, "hit_rate")->valuedouble - 0.75) < 1e-9);
    /* Part of the saved tokens have no price: the total sums the priced part and says so. */
    T_CHECK(fabs(cJSON_GetObjectItem(total, "money_saved")->valuedouble - 1.0) < 1e-9);
    T_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(total, "money_partial")));
    const cJSON *models = cJSON_GetObjectItem(j, "models");
    T_CHECK_INT(cJSON_GetArraySize(models), 4);
    T_CHECK_STR(cJSON_GetObjectItem(cJSON_GetArrayItem(models, 0), "model")->valuestring, "gpt-4o");
    for (int i = 0; i < cJSON_GetArraySize(models); i++) {
        const cJSON *m = cJSON_GetArrayItem(models, i);
        if (strcmp(cJSON_GetObjectItem(m, "model")->valuestring, "unpriced-model") == 0)
            T_CHECK(cJSON_IsNull(cJSON_GetObjectItem(m, "money_saved"))); /* unknown, not 0 */
    }
    T_CHECK(fabs(cJSON_GetObjectItem(cJSON_GetArrayItem(models, 0), "money_saved")->valuedouble -
                 1.0) < 1e-9);
    T_CHECK_STR(cJSON_GetObjectItem(j, "from")->valuestring, "2025-12-02T15:00:00Z");
    T_CHECK_STR(cJSON_GetObjectItem(j, "currency")->valuestring, "EUR");
    cJSON_Delete(j);

    pc_buf_reset(&out);
    report_render(&r, REPORT_CSV, &out);
    const char *csv = pc_buf_cstr(&out);
    T_CHECK(strncmp(csv, "scope,name,requests,hits,misses,", 32) == 0);
    T_CHECK(strstr(csv, "\ntotal,,6,3,1,") != NULL);
    T_CHECK(strstr(csv, "\nmodel,gpt-4o,4,3,1,") != NULL);

    pc_buf_reset(&out);
    report_render(&r, REPORT_TABLE, &out);
    const char *table = pc_buf_cstr(&out);
    T_CHECK(strstr(table, "by tenant") != NULL);
    T_CHECK(strstr(table, "75.0%") != NULL);
    /* Long names are not cut: the two llama models stay apart. */
    T_CHECK(strstr(table, "llama-v3p1-405b-instruct ") != NULL);
    T_CHECK(strstr(table, "llama-v3p1-70b-instruct ") != NULL);
    pc_buf_free(&out);
    report_free(&r);
}

/*
 * Counts read from Redis are each in range, but need not sum in an int64_t: the hit rate's
 * hits + misses and a latency histogram's total overflowed (UBSan aborted `promptcache report`
 * and the proxy's /dashboard/data on two forged hourly fields).
 */
static void test_render_huge_counts(void)
{
    struct report r;
    report_init(&r, 0, TALLY_HOUR_MS);
    add(&r, "requests|" TA "|m", INT64_MAX);
    add(&r, "hits|" TA "|m", INT64_MAX - 1);
    add(&r, "misses|" TA "|m", INT64_MAX - 1);
    add(&r, "lat|hit|0", INT64_MAX - 1);
    add(&r, "lat|hit|1", INT64_MAX - 1);
    T_CHECK(report_lat_count(r.lat[TALLY_LAT_HIT]) == INT64_MAX);
    T_CHECK(report_lat_quantile(r.lat[TALLY_LAT_HIT], 0.5) >= 0);
    report_sort(&r);
    struct pc_buf out = PC_BUF_INIT;
    report_render(&r, REPORT_JSON, &out);
    cJSON *j = cJSON_Parse(pc_buf_cstr(&out));
    T_CHECK(j != NULL);
    const cJSON *total = cJSON_GetObjectItem(j, "total");
    T_CHECK(fabs(cJSON_GetObjectItem(total, "hit_rate")->valuedouble - 0.5) < 1e-9);
    const cJSON *hit = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "latency_ms"), "hit");
    T_CHECK(cJSON_GetObjectItem(hit, "count")->valuedouble > 9e18);
    cJSON_Delete(j);
    pc_buf_reset(&out);
    report_render(&r, REPORT_TABLE, &out);
    T_CHECK(strstr(pc_buf_cstr(&out), "50.0%") != NULL);
    T_CHECK(strstr(pc_buf_cstr(&out), " 9223372036854775807\n") != NULL);
    pc_buf_free(&out);
    report_free(&r);
}

static void test_tally_forms(void)
{
    char key[TALLY_KEY_MAX], model[TALLY_MODEL_MAX + 1];
    tally_key(1764690000000, key); /* 2025-12-02 15:40 UTC */
    T_CHECK_STR(key, "pc:2:r:2025120215");
    model_clean("gpt-4o-mini-2024-07-18", model);
    T_CHECK_STR(model, "gpt-4o-mini-2024-07-18");
    model_clean("a|b c\n", model); /* '|' would split report fields */
    T_CHECK_STR(model, "a_b_c_");
    model_clean("(other)", model); /* a client cannot pose as the overflow row */
    T_CHECK_STR(model, "_other_");
    model_clean(NULL, model);
    T_CHECK_STR(model, "-");
    char longname[200];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    model_clean(longname, model);
    T_CHECK_INT(strlen(model), TALLY_MODEL_MAX);
    for (int m = 0; m < TALLY__COUNT; m++) {
        const char *name = tally_metric_name((enum tally_metric)m);
        T_CHECK_INT(tally_metric_parse(name, strlen(name)), m);
    }
    T_CHECK_INT(tally_metric_parse("hit", 3), -1);
    T_CHECK(tally_valid_tenant(TA, 16) && tally_valid_tenant("-", 1) &&
            tally_valid_tenant(TALLY_OTHER, strlen(TALLY_OTHER)));
    T_CHECK(!tally_valid_tenant("0123456789abcdeX", 16) && !tally_valid_tenant("abc", 3));
}

static void test_tally_rows(void)
{
    struct tally *t = tally_create(NULL, NULL);
    int64_t v[TALLY__COUNT] = {0};
    v[TALLY_requests] = 1;
    v[TALLY_hits] = 1;
    tally_add(t, "m1", TA, true, v);
    tally_add(t, "m1", TA, true, v);
    tally_add(t, "m2", TA, true, v);
    T_CHECK_INT(tally_rows(t), 2);
    /* Failed requests, or a tenant that is not a tenant id, share one row. */
    tally_add(t, "junk-1", TB, false, v);
    tally_add(t, "junk-2", "not-a-tenant", true, v);
    T_CHECK_INT(tally_rows(t), 3);
    /* Nothing to send without a store: the rows wait. */
    tally_flush(t);
    T_CHECK_INT(tally_dirty(t), 3);
    /* Distinct pairs are bounded per hour; the rest go to the overflow row. */
    for (int i = 0; i < 10000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "model-%d", i);
        tally_add(t, name, TB, true, v);
    }
    T_CHECK(tally_rows(t) <= TALLY_MAX_ROWS + 1);
    tally_destroy(&t);
    T_CHECK(t == NULL);
    tally_add(NULL, "m", TA, true, v); /* no tally: a no-op */
}

/*
 * Rows are by the model's name as the client wrote it: spellings that price alike are rows of
 * their own (they are different calls: a gateway routes openai/X apart from X), each priced.
 */
static void test_spellings(void)
{
    struct report r;
    char err[160];
    report_init(&r, 0, TALLY_HOUR_MS);
    T_CHECK_INT(report_load_prices(&r, prices, strlen(prices), err, sizeof(err)), 0);
    const char *names[] = {"gpt-4o", "GPT-4o", "openai/gpt-4o", "OpenAI/GPT-4o"};
    for (size_t i = 0; i < PC_ARRAY_LEN(names); i++) {
        char f[128];
        snprintf(f, sizeof f, "requests|" TA "|%s", names[i]);
        add(&r, f, 1);
        snprintf(f, sizeof f, "saved_prompt_tokens|" TA "|%s", names[i]);
        add(&r, f, 1000000);
    }
    T_CHECK_INT(r.models.n, 4);
    for (size_t i = 0; i < PC_ARRAY_LEN(names); i++) {
        const struct report_row *row = find(&r.models, names[i]);
        T_CHECK(row != NULL && !row->unpriced && fabs(row->money.saved - 2.5) < 1e-9);
    }
    T_CHECK(!r.total.unpriced && fabs(r.total.money.saved - 10.0) < 1e-9);
    report_free(&r);
}

int main(void)
{
    T_RUN(test_fields_and_totals);
    T_RUN(test_many_rows_and_saturation);
    T_RUN(test_bounded_rows);
    T_RUN(test_pricing);
    T_RUN(test_spellings);
    T_RUN(test_money_by_token_kind);
    T_RUN(test_render);
    T_RUN(test_render_huge_counts);
    T_RUN(test_tally_forms);
    T_RUN(test_tally_rows);
    T_DONE();
}
