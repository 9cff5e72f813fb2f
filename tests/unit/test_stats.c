/*
 * test_stats.c - the series other modules own (pc_stats.h's groups): one row
 * is one /stats member, one /metrics series and one doc/metrics.md row, whatever its
 * value (a number, a flag, a name, not known yet, or left out), for a plain
 * group and for a group per item.
 */
#include "pc_stats.h"
#include "pc_util.h"
#include "t.h"

#include <cjson/cJSON.h>

struct fig {
    int64_t calls;
    double ratio;
    bool known, on;
    const char *mode; /* NULL: left out */
    int64_t per[2];   /* per item */
};

#define FIG_SERIES(X)                                                                      \
    X(calls, "fig_calls", "fig_calls_total", "counter", 0, "Calls", stat_int(v, s->calls)) \
    X(ratio, "fig_ratio", "fig_ratio", "gauge", 3, "A ratio, once known",                  \
      stat_real_or_null(v, s->known, s->ratio))                                            \
    X(on, "fig_on", "fig_on", "gauge", 0, "A flag", stat_bool(v, s->on))                   \
    X(mode, "fig_mode", NULL, "info", 0, "A name, when there is one",                      \
      if (s->mode != NULL) stat_str(v, s->mode))                                           \
    X(hidden, NULL, "fig_hidden", "gauge", 0, "In /metrics only", stat_int(v, 7))

#define FIG_READ(id, name, prom, kind, dec, help, stmt) STAT_READER(fig, struct fig, id, stmt)
#define FIG_ROW(id, name, prom, kind, dec, help, stmt) \
    STAT_ROW(fig, id, name, prom, kind, dec, help)
FIG_SERIES(FIG_READ)
static const struct stat_row fig_rows[] = {FIG_SERIES(FIG_ROW)};

static int snapshots;

static void fig_snapshot(const void *obj, void *snap)
{
    snapshots++;
    memcpy(snap, obj, sizeof(struct fig));
}

static const struct stat_group fig_group = {
    .rows = fig_rows,
    .nrows = PC_ARRAY_LEN(fig_rows),
    .snap_size = sizeof(struct fig),
    .snapshot = fig_snapshot,
};

static void item_read(const void *snap, size_t i, struct stat_val *v)
{
    const struct fig *f = snap;
    stat_int(v, f->per[i]);
}

static const struct stat_row item_rows[] = {
    {"n", "fig_item_n_total", "counter", 0, "Per item", item_read},
};

static size_t item_count(const void *snap)
{
    (void)snap;
    return 2;
}

static const char *item_name(const void *snap, size_t i)
{
    (void)snap;
    return i ? "b:2" : "a:1";
}

static const struct stat_group item_group = {
    .rows = item_rows,
    .nrows = 1,
    .count = item_count,
    .item = item_name,
    .array = "items",
    .label = "upstream",
    .per = "item",
};

static bool has(const struct pc_buf *b, const char *s)
{
    return strstr(pc_buf_cstr((struct pc_buf *)b), s) != NULL;
}

static void test_plain_group(void)
{
    struct fig f = {.calls = 3, .ratio = 0.25, .known = false, .on = true, .mode = NULL};
    struct stat_source src = {&fig_group, &f};
    struct pc_buf b = PC_BUF_INIT;
    snapshots = 0;
    stats_render_source_json(&b, &src);
    T_CHECK_STR(pc_buf_cstr(&b), ",\"fig_calls\":3,\"fig_ratio\":null,\"fig_on\":true");
    T_CHECK_INT(snapshots, 1); /* once per rendering */
    pc_buf_reset(&b);
    stats_render_source_prometheus(&b, &src);
    T_CHECK(has(&b, "# HELP promptcache_fig_calls_total Calls\n"
                    "# TYPE promptcache_fig_calls_total counter\npromptcache_fig_calls_total 3\n"));
    T_CHECK(!has(&b, "fig_ratio")); /* not known: no series, not a made-up value */
    T_CHECK(has(&b, "promptcache_fig_on 1\n"));
    T_CHECK(has(&b, "promptcache_fig_hidden 7\n"));
    T_CHECK(!has(&b, "fig_mode"));
    /* Known, and a name. */
    f.known = true;
    f.mode = "fast";
    pc_buf_reset(&b);
    stats_render_source_json(&b, &src);
    T_CHECK(has(&b, "\"fig_ratio\":0.250,\"fig_on\":true,\"fig_mode\":\"fast\""));
    T_CHECK(!has(&b, "hidden"));
    pc_buf_reset(&b);
    stats_render_source_prometheus(&b, &src);
    T_CHECK(has(&b, "# TYPE promptcache_fig_ratio gauge\npromptcache_fig_ratio 0.250\n"));
    /* A part that is off shows nothing. */
    pc_buf_reset(&b);
    struct stat_source off = {&fig_group, NULL};
    stats_render_source_json(&b, &off);
    stats_render_source_prometheus(&b, &off);
    T_CHECK_INT(b.len, 0);
    pc_buf_free(&b);
}

static void test_item_group(void)
{
    struct fig f = {.per = {5, 9}};
    struct stat_source src = {&item_group, &f};
    struct pc_buf b = PC_BUF_INIT;
    stats_render_source_json(&b, &src);
    T_CHECK_STR(pc_buf_cstr(&b),
                ",\"items\":[{\"name\":\"a:1\",\"n\":5},{\"name\":\"b:2\",\"n\":9}]");
    pc_buf_reset(&b);
    stats_render_source_prometheus(&b, &src);
    T_CHECK_STR(pc_buf_cstr(&b), "# HELP promptcache_fig_item_n_total Per item\n"
                                 "# TYPE promptcache_fig_item_n_total counter\n"
                                 "promptcache_fig_item_n_total{upstream=\"a:1\"} 5\n"
                                 "promptcache_fig_item_n_total{upstream=\"b:2\"} 9\n");
    pc_buf_free(&b);
}

/*
 * An item's name is a label value as Prometheus reads it whatever it holds: a backslash, a
 * double quote and a line feed escaped. Written as they were, a name with a quote and a line
 * feed ended the series and wrote one of its own (promptcache_fig_item_n_total{upstream="x"} 1e9).
 */
static const char *odd_name(const void *snap, size_t i)
{
    (void)snap;
    return i ? "b\\" : "x\"} 1000000000\npromptcache_fig_item_n_total{upstream=\"y";
}

static void test_item_names_escaped(void)
{
    struct stat_group g = item_group;
    g.item = odd_name;
    struct fig f = {.per = {5, 9}};
    struct stat_source src = {&g, &f};
    struct pc_buf b = PC_BUF_INIT;
    stats_render_source_prometheus(&b, &src);
    T_CHECK_STR(pc_buf_cstr(&b), "# HELP promptcache_fig_item_n_total Per item\n"
                                 "# TYPE promptcache_fig_item_n_total counter\n"
                                 "promptcache_fig_item_n_total{upstream=\"x\\\"} 1000000000\\n"
                                 "promptcache_fig_item_n_total{upstream=\\\"y\"} 5\n"
                                 "promptcache_fig_item_n_total{upstream=\"b\\\\\"} 9\n");
    pc_buf_free(&b);
}

/* The whole documents: the rows and families first, then each source in order. */
static void test_documents(void)
{
    struct fig f = {.calls = 1};
    struct stat_source src[] = {{&fig_group, &f}, {&item_group, &f}};
    struct pc_buf b = PC_BUF_INIT;
    stats_render_json(&b, src, 2, false);
    const char *j = pc_buf_cstr(&b);
    T_CHECK(j[0] == '{' && j[b.len - 1] == '}');
    const char *calls = strstr(j, "\"fig_calls\":1"), *items = strstr(j, "\"items\":[");
    T_CHECK(calls != NULL && items != NULL && calls < items);
    T_CHECK(strstr(j, "\"money_partial\":false") < calls);
    pc_buf_reset(&b);
    stats_render_prometheus(&b, src, 2);
    T_CHECK(has(&b, "promptcache_fig_calls_total 1\n"));
    T_CHECK(has(&b, "promptcache_fig_item_n_total{upstream=\"b:2\"} 0\n"));
    pc_buf_free(&b);
}

/* doc/metrics.md: a row per series, plain groups in one table, each per-item group in its own. */
static void test_doc(void)
{
    const struct stat_group *groups[] = {&fig_group, &item_group};
    struct pc_buf b = PC_BUF_INIT;
    stats_render_doc(&b, groups, 2);
    T_CHECK(has(&b, "| `fig_calls` | `fig_calls_total` | counter | Calls |\n"));
    T_CHECK(has(&b, "| `fig_mode` | - | info | A name, when there is one |\n"));
    T_CHECK(has(&b, "| - | `fig_hidden` | gauge | In /metrics only |\n"));
    T_CHECK(has(&b, "Per item: in `/stats` in `items`"));
    T_CHECK(has(&b, "| `n` | `fig_item_n_total` | counter | Per item |\n"));
    pc_buf_free(&b);
}

/*
 * A family's sums saturate, never wrap: an upstream that reports 1e15 tokens of a dear model
 * is priced at pricing_nano's cap (9e18 billionths) per answer, and two such answers on one
 * worker, or on two, summed past 2^64 (and past INT64_MAX, which /metrics reads as negative).
 */
static void test_family_saturates(void)
{
    static struct stats a, b;
    stats_unregister_all();
    stats_register(&a);
    stats_register(&b);
    struct stat_labels l = {.match = 0, .model = STATS_MODEL_N - 1};
    const int64_t cap = INT64_C(9000000000000000000);
    for (int i = 0; i < 3; i++) {
        stats_fam_add(&a, SF_saved_cost, &l, cap);
        stats_fam_add(&b, SF_saved_cost, &l, cap);
    }
    l.match = 1;
    stats_fam_add(&a, SF_saved_cost, &l, cap);
    uint64_t *cells = stats_sum_cells();
    double total = stats_family_total(cells, SF_saved_cost);
    T_CHECK(total >= 9e9 && total <= (double)INT64_MAX * 1e-9 * 1.0000001);
    T_CHECK(stats_family_by(cells, SF_saved_cost, SL_MATCH, 0) >= 9e9);
    free(cells);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out, NULL, 0);
    const char *t = pc_buf_cstr(&out);
    const char *m = strstr(t, "promptcache_saved_cost_total{match=\"exact\",model=\"other\"} ");
    T_CHECK(m != NULL);
    if (m != NULL)
        T_CHECK(strtod(m + strlen("promptcache_saved_cost_total{match=\"exact\",model=\"other\"} "),
                       NULL) >= 9e9);
    pc_buf_free(&out);
    stats_unregister_all();
}

/*
 * The flat counters an upstream's usage feeds saturate too: one that reports 1e15 prompt
 * tokens (dialect_tokens' cap) per answer took tokens_upstream_prompt past 2^64 on two
 * workers after 10000 answers each, and /stats and /metrics showed it wrapped (smaller than
 * before). A gauge still goes down as well as up.
 */
static void test_counter_saturates(void)
{
    static struct stats a, b;
    stats_unregister_all();
    stats_register(&a);
    stats_register(&b);
    for (int i = 0; i < 10000; i++) {
        stats_add(&a, STAT_tokens_upstream_prompt, INT64_C(1000000000000000));
        stats_add(&b, STAT_tokens_upstream_prompt, INT64_C(1000000000000000));
    }
    stats_add(&a, STAT_requests_active, 3);
    stats_add(&b, STAT_requests_active, 2);
    stats_add(&a, STAT_requests_active, -4);
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    T_CHECK(v[STAT_tokens_upstream_prompt] == (uint64_t)INT64_MAX);
    T_CHECK((int64_t)v[STAT_requests_active] == 1);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out, NULL, 0);
    T_CHECK(strstr(pc_buf_cstr(&out), "\npromptcache_tokens_upstream_prompt_total "
                                      "9223372036854775807\n") != NULL);
    pc_buf_reset(&out);
    stats_render_json(&out, NULL, 0, false);
    T_CHECK(strstr(pc_buf_cstr(&out), "\"tokens_upstream_prompt\":9223372036854775807,") != NULL);
    pc_buf_free(&out);
    stats_unregister_all();
}

/*
 * A model named "other" (a client's, answered by an upstream that takes any name, as
 * llama.cpp's server does) took a label of its own, named "other" like the label of every
 * model past metrics-models: /metrics carried two series with the same labels, and
 * Prometheus refuses a whole scrape that has one ("duplicate sample for timestamp"). Such a
 * model is counted under that one label now, admitted or seeded alike.
 */
static void test_model_named_other(void)
{
    static struct stats a;
    stats_unregister_all();
    stats_register(&a);
    stats_set_model_limit(10);
    const char *const seeded[] = {"other", "m1"};
    stats_seed_models(seeded, 2);
    int slot = stats_model_slot("other", true);
    T_CHECK_INT(slot, STATS_MODEL_N - 1);
    T_CHECK(stats_model_slot("m1", false) != STATS_MODEL_N - 1);
    struct stat_labels l = {.model = slot, .token = 0};
    stats_fam_add(&a, SF_upstream_tokens, &l, 5);
    l.model = STATS_MODEL_N - 1;
    stats_fam_add(&a, SF_upstream_tokens, &l, 7);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_prometheus(&out, NULL, 0);
    const char *series = "promptcache_upstream_tokens_total{model=\"other\",token=\"input\"} ";
    const char *first = strstr(pc_buf_cstr(&out), series);
    T_CHECK(first != NULL);
    if (first != NULL) {
        T_CHECK(strncmp(first + strlen(series), "12\n", 3) == 0);
        T_CHECK(strstr(first + 1, series) == NULL);
    }
    pc_buf_free(&out);
    stats_unregister_all();
}

/*
 * /stats names a tenant family's series by the tenant's name: valid JSON whatever the name
 * holds (written as it was, a quote in one ended the string; the names of tenant-names are
 * checked, but the renderer took any).
 */
static void test_tenant_names_json(void)
{
    static struct stats a;
    stats_unregister_all();
    stats_register(&a);
    struct stat_labels l = {.cache = SC_HIT, .tenant = stats_tenant_slot("team \"a\\\n")};
    T_CHECK(l.tenant != STATS_TENANT_N - 1);
    stats_fam_add(&a, SF_tenant_requests, &l, 3);
    struct pc_buf out = PC_BUF_INIT;
    stats_render_json(&out, NULL, 0, false);
    cJSON *j = cJSON_Parse(pc_buf_cstr(&out));
    T_CHECK(j != NULL);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tenant_requests");
    const cJSON *team = cJSON_GetObjectItemCaseSensitive(t, "team \"a\\\n");
    T_CHECK(team != NULL && cJSON_GetObjectItemCaseSensitive(team, "hit") != NULL &&
            cJSON_GetObjectItemCaseSensitive(team, "hit")->valuedouble == 3);
    cJSON_Delete(j);
    pc_buf_free(&out);
    stats_unregister_all();
}

int main(void)
{
    T_RUN(test_plain_group);
    T_RUN(test_item_group);
    T_RUN(test_item_names_escaped);
    T_RUN(test_documents);
    T_RUN(test_doc);
    T_RUN(test_family_saturates);
    T_RUN(test_counter_saturates);
    T_RUN(test_model_named_other);
    T_RUN(test_tenant_names_json);
    T_DONE();
}
