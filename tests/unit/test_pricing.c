/*
 * test_pricing.c - price lists in both formats (the same prices give the
 * same costs), name matching, refusals, the cost of a call by token kind,
 * and the labelled metric families built on them (stats).
 */
#include "pc_api.h"
#include "pc_pricing.h"
#include "pc_stats.h"
#include "t.h"

#include <math.h>
#include <string.h>

static const char own[] =
    "{\"currency\":\"USD\",\"models\":{"
    "\"gpt-4o-mini\":{\"input\":0.15,\"cache_read\":0.075,\"output\":0.6},"
    "\"claude-sonnet-4-5\":{\"input\":3,\"cache_read\":0.3,\"cache_write\":3.75,\"output\":15}}}";
static const char litellm[] =
    "{\"sample_spec\":{\"input_cost_per_token\":0,\"litellm_provider\":\"x\"},"
    "\"openai/gpt-4o-mini\":{\"input_cost_per_token\":1.5e-7,\"cache_read_input_token_cost\":"
    "7.5e-8,\"output_cost_per_token\":6e-7,\"litellm_provider\":\"openai\"},"
    "\"claude-sonnet-4-5\":{\"input_cost_per_token\":3e-6,\"cache_read_input_token_cost\":3e-7,"
    "\"cache_creation_input_token_cost\":3.75e-6,\"output_cost_per_token\":1.5e-5},"
    "\"weird\":{\"input_cost_per_token\":1e-6,\"cache_read_input_token_cost\":2e-6},"
    "\"dall-e-3\":{\"input_cost_per_pixel\":1e-8,\"litellm_provider\":\"openai\"}}";

static struct pricing *parse(const char *json, struct pc_buf *warns)
{
    char err[256];
    struct pricing *p = pricing_parse(json, strlen(json), "prices.json", err, sizeof err, warns);
    if (p == NULL)
        fprintf(stderr, "  %s\n", err);
    return p;
}

static void test_formats_agree(void)
{
    struct pc_buf warns = PC_BUF_INIT;
    struct pricing *a = parse(own, NULL), *b = parse(litellm, &warns);
    T_CHECK(a != NULL && b != NULL);
    T_CHECK(pricing_format(a) == PRICING_OWN && pricing_format(b) == PRICING_LITELLM);
    /* The implausible LiteLLM entry is left out, named with the file. */
    T_CHECK(strstr(pc_buf_cstr(&warns), "prices.json: model \"weird\" left out") != NULL);
    T_CHECK(pricing_find(b, "weird") == NULL && pricing_find(b, "dall-e-3") == NULL);
    struct api_usage u = {
        .present = true, .prompt = 400, .completion = 50, .cached = 288, .cache_write = 100};
    struct pricing_tokens t;
    pricing_tokens_of(&u, &t);
    T_CHECK_INT(t.input, 12);
    const char *models[] = {"gpt-4o-mini", "gpt-4o-mini-2024-07-18", "openai/gpt-4o-mini",
                            "claude-sonnet-4-5", "claude-sonnet-4-5-20250929"};
    for (size_t i = 0; i < PC_ARRAY_LEN(models); i++) {
        const struct price *x = pricing_find(a, models[i]), *y = pricing_find(b, models[i]);
        T_CHECK(x != NULL && y != NULL);
        if (x == NULL || y == NULL)
            continue;
        T_CHECK(pricing_nano(pricing_cost(x, &t)) == pricing_nano(pricing_cost(y, &t)));
        T_CHECK(x->input == y->input && x->cache_read == y->cache_read &&
                x->cache_write == y->cache_write && x->output == y->output);
    }
    /* 12 x 3 + 288 x 0.3 + 100 x 3.75 + 50 x 15 per million. */
    const struct price *c = pricing_find(a, "claude-sonnet-4-5");
    T_CHECK_INT(pricing_nano(pricing_cost(c, &t)), 1247400);
    T_CHECK_INT(pricing_nano(pricing_cache_saving(c, &t)), 777600);
    T_CHECK_INT(pricing_nano(pricing_write_premium(c, &t)), 75000);
    /* OpenAI: no write price given, cache writes cost input. */
    T_CHECK(pricing_find(a, "gpt-4o-mini")->cache_write == 0.15);
    T_CHECK(pricing_find(a, "claude-opus-4") == NULL);
    T_CHECK(pricing_find(a, "gpt-4o-mini-turbo") == NULL);
    T_CHECK(pricing_find(NULL, "gpt-4o-mini") == NULL);
    T_CHECK(pricing_same(a, a) && !pricing_same(a, NULL));
    struct pricing *r = pricing_ref(a);
    pricing_release(&r);
    T_CHECK(r == NULL);
    pricing_release(&a);
    pricing_release(&b);
    pc_buf_free(&warns);
}

static void test_refusals(void)
{
    const char *bad[] = {"",
                         "[]",
                         "{\"x\":1}",
                         "{\"models\":{\"m\":{\"input\":-1}}}",
                         "{\"models\":{\"m\":{\"input\":1,\"cache_read\":2}}}",
                         "{\"models\":{\"m\":{\"input\":1e400}}}",
                         "{\"models\":{\"m\":{\"input\":1,\"output\":\"2\"}}}",
                         "{\"models\":{\"m\":{\"output\":2}}}",
                         "{\"currency\":\"a|b\",\"models\":{}}"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        struct pricing *p = pricing_parse(bad[i], strlen(bad[i]), "f.json", err, sizeof err, NULL);
        T_CHECK(p == NULL);
        T_CHECK(strncmp(err, "f.json: ", 8) == 0);
        pricing_release(&p);
    }
    char err[256] = "";
    const char *dear = "{\"models\":{\"cheap\":{\"input\":1,\"cache_read\":2}}}";
    T_CHECK(pricing_parse(dear, strlen(dear), "f.json", err, sizeof err, NULL) == NULL);
    T_CHECK(strstr(err, "model \"cheap\"") != NULL);
    T_CHECK(pricing_warn_once("unknown-model-x") && !pricing_warn_once("unknown-model-x"));
    T_CHECK_INT(pricing_nano(-1), 0);
    T_CHECK_INT(pricing_nano(NAN), 0);
}

static void test_families(void)
{
    static struct stats st;
    stats_unregister_all();
    stats_register(&st);
    stats_set_model_limit(2);
    T_CHECK_INT(stats_model_slot("m1", false), STATS_MODEL_N - 1); /* not admitted: other */
    T_CHECK_INT(stats_model_slot("m1", true), 0);
    T_CHECK_INT(stats_model_slot("m2", true), 1);
    T_CHECK_INT(stats_model_slot("m3", true), STATS_MODEL_N - 1); /* beyond the limit */
    T_CHECK_INT(stats_model_slot("m1", false), 0);
    struct stat_labels l = {.match = 1, .model = 0};
    stats_fam_add(&st, SF_saved_cost, &l, 1500);
    l.match = 0;
    stats_fam_add(&st, SF_saved_cost, &l, 500);
    l.cache = SC_HIT;
    stats_observe(&st, SF_request_duration_seconds, &l, 3000);
    stats_observe(&st, SF_request_duration_seconds, &l, 200000000); /* beyond every bucket */
    uint64_t *cells = stats_sum_cells();
    T_CHECK(fabs(stats_family_total(cells, SF_saved_cost) - 2e-6) < 1e-15);
    T_CHECK(fabs(stats_family_by(cells, SF_saved_cost, SL_MATCH, 1) - 1.5e-6) < 1e-15);
    free(cells);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out);
    const char *t = pc_buf_cstr(&out);
    T_CHECK(strstr(t, "promptcache_saved_cost_total{match=\"semantic\",model=\"m1\"} 1.5e-06\n") !=
            NULL);
    T_CHECK(strstr(t, "promptcache_request_duration_seconds_bucket{cache=\"hit\",endpoint="
                      "\"other\",le=\"0.005\"} 1\n") != NULL);
    T_CHECK(strstr(t, "promptcache_request_duration_seconds_bucket{cache=\"hit\",endpoint="
                      "\"other\",le=\"+Inf\"} 2\n") != NULL);
    T_CHECK(strstr(t, "promptcache_request_duration_seconds_count{cache=\"hit\",endpoint="
                      "\"other\"} 2\n") != NULL);
    T_CHECK(strstr(t, "# TYPE promptcache_redis_latency_seconds histogram\n") != NULL);
    T_CHECK(strstr(t, "promptcache_build_info{version=") != NULL);
    pc_buf_reset(&out);
    stats_render_json(&out, NULL);
    T_CHECK(strstr(pc_buf_cstr(&out), "\"saved_cost_semantic\":1.5e-06") != NULL);
    pc_buf_free(&out);
    stats_unregister_all();
}

int main(void)
{
    T_RUN(test_formats_agree);
    T_RUN(test_refusals);
    T_RUN(test_families);
    T_DONE();
}
