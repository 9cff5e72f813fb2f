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
    /* Of the 100 writes, 40 kept for an hour: at 6, not 3.75 (the own list); LiteLLM the same. */
    struct pricing *a1 = parse("{\"models\":{\"claude-sonnet-4-5\":{\"input\":3,\"cache_read\":0.3,"
                               "\"cache_write\":3.75,\"cache_write_1h\":6,\"output\":15}}}",
                               NULL);
    struct pricing *b1 = parse("{\"claude-sonnet-4-5\":{\"input_cost_per_token\":3e-6,"
                               "\"cache_read_input_token_cost\":3e-7,"
                               "\"cache_creation_input_token_cost\":3.75e-6,"
                               "\"cache_creation_input_token_cost_above_1hr\":6e-6,"
                               "\"output_cost_per_token\":1.5e-5}}",
                               NULL);
    u.cache_write_1h = 40;
    struct pricing_tokens t1;
    pricing_tokens_of(&u, &t1);
    T_CHECK_INT(t1.cache_write_1h, 40);
    T_CHECK(a1 != NULL && b1 != NULL);
    if (a1 != NULL && b1 != NULL) {
        const struct price *x = pricing_find(a1, "claude-sonnet-4-5");
        T_CHECK_INT(pricing_nano(pricing_cost(x, &t1)), 1247400 + 40 * 2250);
        T_CHECK_INT(pricing_nano(pricing_write_premium(x, &t1)), 75000 + 40 * 2250);
        T_CHECK_INT(pricing_nano(pricing_cost(pricing_find(b1, "claude-sonnet-4-5"), &t1)),
                    1247400 + 40 * 2250);
    }
    /* A list without an hour's price: those writes cost the 5-minute price. */
    T_CHECK(c->cache_write_1h == 3.75);
    T_CHECK_INT(pricing_nano(pricing_cost(c, &t1)), 1247400);
    pricing_release(&a1);
    pricing_release(&b1);
    u.cache_write_1h = 0;
    /* Audio in and out at their own prices (gpt-audio: 32 and 64 per million); the text rest. */
    struct pricing *au = parse("{\"models\":{\"gpt-audio\":{\"input\":2.5,\"output\":10,"
                               "\"input_audio\":32,\"output_audio\":64}}}",
                               NULL);
    struct api_usage ua = {.present = true,
                           .prompt = 1000,
                           .completion = 100,
                           .audio_prompt = 400,
                           .audio_completion = 60};
    struct pricing_tokens ta;
    pricing_tokens_of(&ua, &ta);
    T_CHECK(au != NULL);
    if (au != NULL) /* 600 x 2.5 + 400 x 32 + 40 x 10 + 60 x 64 */
        T_CHECK_INT(pricing_nano(pricing_cost(pricing_find(au, "gpt-audio"), &ta)), 18540000);
    T_CHECK(c->input_audio == c->input && c->output_audio == c->output); /* not given: text's */
    pricing_release(&au);
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

/*
 * A slice of the maintained list as tools/prices.js writes it: genai-prices'
 * match rules (its regular expressions turned POSIX), in its order.
 */
static const char ruled[] =
    "{\"source\":\"@pydantic/genai-prices 0.1.8\",\"date\":\"2026-09-23\",\"currency\":\"USD\","
    "\"models\":{"
    "\"gpt-4o\":{\"input\":2.5,\"cache_read\":1.25,\"output\":10,\"match\":{\"or\":["
    "{\"equals\":\"gpt-4o\"},{\"equals\":\"gpt-4o-2024-08-06\"},{\"equals\":\"gpt-4o-2024-11-20\"}]"
    "}},"
    "\"gpt-4o-2024-05-13\":{\"input\":5,\"output\":15,\"match\":{\"equals\":\"gpt-4o-2024-05-13\"}}"
    ","
    "\"gpt-4o-mini\":{\"input\":0.15,\"cache_read\":0.075,\"output\":0.6,\"match\":{\"or\":["
    "{\"equals\":\"gpt-4o-mini\"},{\"equals\":\"gpt-4o-mini-2024-07-18\"}]}},"
    "\"claude-3-5-sonnet\":{\"input\":3,\"cache_write\":3.75,\"cache_read\":0.3,\"output\":15,"
    "\"match\":{\"or\":[{\"starts_with\":\"claude-3-5-sonnet\"},{\"starts_with\":"
    "\"claude-3.5-sonnet\"}]}},"
    "\"claude-opus-5\":{\"input\":5,\"cache_write\":6.25,\"cache_read\":0.5,\"output\":25,"
    "\"match\":{\"or\":[{\"equals\":\"claude-opus-5\"},{\"regex\":\"^claude-opus-5-[0-9]{8}$\"}]}},"
    "\"gemini-2.5-pro\":{\"input\":1.25,\"output\":10,\"match\":{\"and\":[{\"starts_with\":"
    "\"gemini-2.5-pro\"},{\"not\":{\"regex\":\"^.*-[tT][tT][sS]($|-)\"}}]}},"
    "\"google/claude-3-5-sonnet\":{\"input\":9,\"output\":9,\"match\":{\"contains\":"
    "\"claude-3-5-sonnet\"}},"
    "\"text-embedding-3-small\":{\"input\":0.02,\"match\":{\"ends_with\":\"embedding-3-small\"}}}}";

static const char *priced_as(const struct pricing *p, const char *model)
{
    const struct price *e = pricing_find(p, model);
    return e ? e->model : "(unpriced)";
}

static void test_rules(void)
{
    struct pricing *p = parse(ruled, NULL);
    T_CHECK(p != NULL);
    if (p == NULL)
        return;
    /* The common names and their dated variants, as genai-prices matches them. */
    T_CHECK_STR(priced_as(p, "gpt-4o"), "gpt-4o");
    T_CHECK_STR(priced_as(p, "gpt-4o-2024-08-06"), "gpt-4o");
    T_CHECK_STR(priced_as(p, "gpt-4o-2024-05-13"), "gpt-4o-2024-05-13"); /* its own, dearer */
    T_CHECK_STR(priced_as(p, "gpt-4o-mini-2024-07-18"), "gpt-4o-mini");
    T_CHECK_STR(priced_as(p, "claude-3-5-sonnet-20241022"), "claude-3-5-sonnet");
    T_CHECK_STR(priced_as(p, "claude-3.5-sonnet-latest"), "claude-3-5-sonnet");
    T_CHECK_STR(priced_as(p, "Claude-3-5-Sonnet-20240620"), "claude-3-5-sonnet"); /* case */
    T_CHECK_STR(priced_as(p, "claude-opus-5-20260101"), "claude-opus-5");
    T_CHECK_STR(priced_as(p, "claude-opus-5-2026"), "(unpriced)"); /* the regex wants 8 digits */
    T_CHECK_STR(priced_as(p, "gemini-2.5-pro-preview-06-05"), "gemini-2.5-pro");
    T_CHECK_STR(priced_as(p, "gemini-2.5-pro-preview-tts"), "(unpriced)"); /* and + not */
    T_CHECK_STR(priced_as(p, "vertex/claude-3-5-sonnet@20240620"), "google/claude-3-5-sonnet");
    T_CHECK_STR(priced_as(p, "openai/gpt-4o-2024-11-20"), "gpt-4o"); /* provider prefix */
    /* The vendor's prefix names the vendor's model, not another provider's that takes it too. */
    T_CHECK_STR(priced_as(p, "anthropic/claude-3-5-sonnet-20241022"), "claude-3-5-sonnet");
    T_CHECK_STR(priced_as(p, "anthropic/claude-3.5-sonnet"), "claude-3-5-sonnet");
    T_CHECK_STR(priced_as(p, "text-embedding-3-small"), "text-embedding-3-small");
    T_CHECK_STR(priced_as(p, "gpt-4o-mini-2099-01-01"), "gpt-4o-mini"); /* a date the list lacks */
    T_CHECK_STR(priced_as(p, "gpt-4o-mini-turbo"), "(unpriced)");
    T_CHECK_STR(priced_as(p, "meta-llama/Llama-3.1-8B-Instruct"), "(unpriced)");
    /* Answers are remembered: the same again, unpriced ones included. */
    for (int i = 0; i < 3; i++) {
        T_CHECK_STR(priced_as(p, "claude-3-5-sonnet-20241022"), "claude-3-5-sonnet");
        T_CHECK_STR(priced_as(p, "meta-llama/Llama-3.1-8B-Instruct"), "(unpriced)");
    }
    /* More names than the memo holds still get their answers. */
    char name[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(name, sizeof name, "claude-3-5-sonnet-%d", i);
        T_CHECK(pricing_find(p, name) != NULL);
    }
    T_CHECK(pricing_find(p, "claude-3-5-sonnet-7") == pricing_find(p, "claude-3-5-sonnet"));
    T_CHECK_STR(pricing_source(p), "@pydantic/genai-prices 0.1.8");
    T_CHECK_STR(pricing_date(p), "2026-09-23");
    /* A rule that differs is another list (a reload applies it). */
    char *other = strdup(ruled);
    memcpy(strstr(other, "\"claude-3.5-sonnet\""), "\"claude-3.6-sonnet\"", 19);
    struct pricing *q = parse(other, NULL);
    T_CHECK(q != NULL && !pricing_same(p, q) && pricing_same(p, p));
    free(other);
    pricing_release(&q);
    pricing_release(&p);
}

static void test_rule_refusals(void)
{
    const char *bad[] = {
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"sounds_like\":\"m\"}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"equals\":\"m\",\"contains\":\"m\"}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"equals\":\"\"}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"equals\":7}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"regex\":\"^m-(\"}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"or\":[]}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"not\":[{\"equals\":\"m\"}]}}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":[]}}}",
        "{\"models\":{\"m\":{\"input\":1,\"match\":{\"not\":{\"not\":{\"not\":{\"not\":{\"not\":"
        "{\"not\":{\"not\":{\"not\":{\"not\":{\"equals\":\"m\"}}}}}}}}}}}}}",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        char err[256] = "";
        struct pricing *p = pricing_parse(bad[i], strlen(bad[i]), "f.json", err, sizeof err, NULL);
        T_CHECK(p == NULL);
        T_CHECK(strncmp(err, "f.json: model \"m\": ", 19) == 0);
        if (p != NULL || strncmp(err, "f.json: model \"m\": ", 19) != 0)
            fprintf(stderr, "  case %zu: %s\n", i, err);
        pricing_release(&p);
    }
    char err[256] = "";
    const char *re = bad[4];
    T_CHECK(pricing_parse(re, strlen(re), "f.json", err, sizeof err, NULL) == NULL);
    T_CHECK(strstr(err, "regex \"^m-(\"") != NULL);
}

static void test_origin(void)
{
    /* Without source and date: the file's name; LiteLLM says neither. */
    struct pricing *a = parse(own, NULL), *b = parse(litellm, NULL);
    T_CHECK(a != NULL && b != NULL);
    T_CHECK_STR(pricing_source(a), "prices.json");
    T_CHECK_STR(pricing_date(a), "");
    T_CHECK_STR(pricing_source(b), "LiteLLM");
    struct pc_buf out = PC_BUF_INIT;
    pricing_render_json(a, &out);
    T_CHECK(strstr(pc_buf_cstr(&out), "\"source\":\"prices.json\",\"date\":null") != NULL);
    pricing_release(&a);
    pricing_release(&b);
    /* A long source is cut on a character, control characters become spaces, bad dates dropped. */
    char json[512];
    snprintf(
        json, sizeof json,
        "{\"source\":\"list \\\"q\\\" \\\\ x\\nline %s\",\"date\":\"2026-9-1\","
        "\"models\":{\"m\":{\"input\":1}}}",
        "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
        "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
        "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
        "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9");
    struct pricing *c = parse(json, NULL);
    T_CHECK(c != NULL);
    if (c != NULL) {
        const char *src = pricing_source(c);
        T_CHECK(strlen(src) <= PRICING_SOURCE_MAX &&
                strncmp(src, "list \"q\" \\ x line ", 18) == 0);
        T_CHECK(((unsigned char)src[strlen(src) - 1] & 0xC0) == 0x80); /* ends on a whole é */
        T_CHECK_STR(pricing_date(c), "");
        pc_buf_reset(&out);
        pricing_render_prometheus(c, &out);
        T_CHECK(strstr(pc_buf_cstr(&out), "source=\"list \\\"q\\\" \\\\ x line ") != NULL);
        T_CHECK(strstr(pc_buf_cstr(&out), ",date=\"\"} 1\n") != NULL);
    }
    pricing_release(&c);
    pc_buf_reset(&out);
    pricing_render_json(NULL, &out);
    T_CHECK_STR(pc_buf_cstr(&out), ",\"currency\":null,\"pricing\":null");
    pc_buf_reset(&out);
    pricing_render_prometheus(NULL, &out);
    T_CHECK_INT(out.len, 0);
    pc_buf_free(&out);
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
    stats_render_prometheus(&out, NULL, 0);
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
    stats_render_json(&out, NULL, 0, true);
    T_CHECK(strstr(pc_buf_cstr(&out), "\"saved_cost_semantic\":1.5e-06") != NULL);
    pc_buf_free(&out);
    stats_unregister_all();
}

/* The parts of a usage block never exceed the whole (one rule for /stats and the report). */
static void test_clamp(void)
{
    struct pricing_tokens t;
    struct api_usage u = {.present = true, .prompt = 100, .completion = 10, .cached = 300};
    pricing_tokens_of(&u, &t);
    T_CHECK_INT(t.cache_read, 100);
    T_CHECK_INT(t.input, 0);
    T_CHECK_INT(t.cache_write, 0);
    T_CHECK_INT(t.input + t.cache_read + t.cache_write, 100);
    u = (struct api_usage){.present = true,
                           .prompt = 100,
                           .cached = 60,
                           .cache_write = 100,
                           .cache_write_1h = 90,
                           .audio_prompt = 50};
    pricing_tokens_of(&u, &t);
    T_CHECK_INT(t.cache_read, 60);
    T_CHECK_INT(t.cache_write, 40);
    T_CHECK_INT(t.cache_write_1h, 40);
    T_CHECK_INT(t.input, 0);
    T_CHECK_INT(t.audio_input, 0);
    u = (struct api_usage){.present = true, .prompt = -5, .completion = -1, .cached = 7};
    pricing_tokens_of(&u, &t);
    T_CHECK_INT(t.input + t.cache_read + t.cache_write + t.output, 0);
}

/*
 * A name in other case than the list's is priced as the list's, whatever its format: an
 * upstream that answered "GPT-4o-mini" billed gpt-4o-mini (genai-prices' rules already took
 * the lower case; an entry of the project's format or LiteLLM's did not).
 */
static void test_case(void)
{
    struct pricing *a = parse(own, NULL), *b = parse(litellm, NULL);
    T_CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL)
        goto out;
    const char *names[] = {"GPT-4o-mini", "gpt-4o-MINI-2024-07-18", "OpenAI/gpt-4o-mini",
                           "Claude-Sonnet-4-5", "ANTHROPIC/claude-sonnet-4-5-20250929"};
    for (size_t i = 0; i < PC_ARRAY_LEN(names); i++) {
        const struct price *x = pricing_find(a, names[i]), *y = pricing_find(b, names[i]);
        T_CHECK(x != NULL && y != NULL);
        if (x != NULL && y != NULL)
            T_CHECK(x->input == y->input && x->output == y->output);
    }
    T_CHECK(pricing_find(a, "GPT-4o-mini") == pricing_find(a, "gpt-4o-mini"));
    T_CHECK(pricing_find(a, "GPT-4o-mini-turbo") == NULL);
out:
    pricing_release(&a);
    pricing_release(&b);
}

/* Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong form, surrogate, or beyond U+10FFFF).
 */
static bool utf8_ok(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80                    ? 1
                     : u[i] >= 0xc2 && u[i] <= 0xdf ? 2
                     : u[i] >= 0xe0 && u[i] <= 0xef ? 3
                     : u[i] >= 0xf0 && u[i] <= 0xf4 ? 4
                                                    : 0;
        if (len == 0 || i + len > n)
            return false;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xc0) != 0x80)
                return false;
        if ((u[i] == 0xe0 && u[i + 1] < 0xa0) || (u[i] == 0xed && u[i + 1] > 0x9f) ||
            (u[i] == 0xf0 && u[i + 1] < 0x90) || (u[i] == 0xf4 && u[i + 1] > 0x8f))
            return false;
        i += len;
    }
    return true;
}

/*
 * A list's "source" with bytes that are no UTF-8 (cJSON takes them as they are): /metrics
 * carried them in pricing_info's source label, and Prometheus refuses a whole scrape with an
 * invalid UTF-8 label value; /stats and the dashboard's JSON carried them too. Each such byte
 * is U+FFFD now.
 */
static void test_source_utf8(void)
{
    static const char json[] = "{\"source\":\"bad \xff\xfe list \xc3\x28 \xed\xa0\x80 "
                               "\xe9\xa9\",\"models\":{\"m\":{\"input\":1}}}";
    struct pricing *p = parse(json, NULL);
    T_CHECK(p != NULL);
    if (p == NULL)
        return;
    const char *src = pricing_source(p);
    T_CHECK(utf8_ok(src, strlen(src)));
    T_CHECK(strncmp(src, "bad \xef\xbf\xbd\xef\xbf\xbd list \xef\xbf\xbd(", 15) == 0);
    struct pc_buf out = PC_BUF_INIT;
    pricing_render_prometheus(p, &out);
    T_CHECK(utf8_ok(out.data, out.len));
    pc_buf_reset(&out);
    pricing_render_json(p, &out);
    T_CHECK(utf8_ok(out.data, out.len));
    pc_buf_free(&out);
    pricing_release(&p);
}

int main(void)
{
    T_RUN(test_formats_agree);
    T_RUN(test_clamp);
    T_RUN(test_case);
    T_RUN(test_refusals);
    T_RUN(test_rules);
    T_RUN(test_rule_refusals);
    T_RUN(test_origin);
    T_RUN(test_source_utf8);
    T_RUN(test_families);
    T_DONE();
}
