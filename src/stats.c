/*
 * stats.c - sums per-worker metric rows and renders them (see pc_stats.h).
 * Owns the registry of rows, which is written once before workers start and
 * only read afterwards.
 */
#include "pc_stats.h"

#include <stdio.h>
#include <string.h>

#define MAX_ROWS 256

static struct stats *rows[MAX_ROWS];
static int nrows;

static const struct {
    const char *name;
    const char *help;
    bool gauge;
} meta[STAT__COUNT] = {
#define PC_STAT_META(n, kind, h) {#n, h, __builtin_strcmp(#kind, "gauge") == 0},
    PC_METRICS(PC_STAT_META)
#undef PC_STAT_META
};

int stats_register(struct stats *st)
{
    if (nrows >= MAX_ROWS)
        return -1;
    rows[nrows++] = st;
    return 0;
}

void stats_unregister_all(void)
{
    nrows = 0;
}

void stats_sum(uint64_t out[STAT__COUNT])
{
    memset(out, 0, sizeof(uint64_t) * STAT__COUNT);
    for (int r = 0; r < nrows; r++)
        for (int i = 0; i < STAT__COUNT; i++)
            out[i] += __atomic_load_n(&rows[r]->v[i], __ATOMIC_RELAXED);
}

static void append_value(struct pc_buf *out, enum stat_id id, uint64_t v)
{
    if (meta[id].gauge)
        pc_buf_printf(out, "%lld", (long long)(int64_t)v);
    else
        pc_buf_printf(out, "%llu", (unsigned long long)v);
}

void stats_render_json(struct pc_buf *out, const char *extra_json)
{
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    pc_buf_append_char(out, '{');
    for (int i = 0; i < STAT__COUNT; i++) {
        pc_buf_printf(out, "%s\"%s\":", i ? "," : "", meta[i].name);
        append_value(out, (enum stat_id)i, v[i]);
    }
    uint64_t looked = v[STAT_cache_hits] + v[STAT_cache_misses];
    pc_buf_printf(out, ",\"hit_rate\":%.4f",
                  looked ? (double)v[STAT_cache_hits] / (double)looked : 0.0);
    if (extra_json != NULL && *extra_json != '\0') {
        pc_buf_append_char(out, ',');
        pc_buf_append_str(out, extra_json);
    }
    pc_buf_append_char(out, '}');
}

void stats_render_prometheus(struct pc_buf *out)
{
    uint64_t v[STAT__COUNT];
    stats_sum(v);
    for (int i = 0; i < STAT__COUNT; i++) {
        const char *suffix =
            (!meta[i].gauge && strstr(meta[i].name, "_total") == NULL) ? "_total" : "";
        pc_buf_printf(out, "# HELP promptcache_%s%s %s\n", meta[i].name, suffix, meta[i].help);
        pc_buf_printf(out, "# TYPE promptcache_%s%s %s\n", meta[i].name, suffix,
                      meta[i].gauge ? "gauge" : "counter");
        pc_buf_printf(out, "promptcache_%s%s ", meta[i].name, suffix);
        append_value(out, (enum stat_id)i, v[i]);
        pc_buf_append_char(out, '\n');
    }
}

void stats_render_doc(struct pc_buf *out)
{
    pc_buf_append_str(out, "| metric | kind | meaning |\n|---|---|---|\n");
    for (int i = 0; i < STAT__COUNT; i++)
        pc_buf_printf(out, "| `%s` | %s | %s |\n", meta[i].name,
                      meta[i].gauge ? "gauge" : "counter", meta[i].help);
}
