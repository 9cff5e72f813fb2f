/*
 * test_purge.c - the filters of targeted invalidation (src/purge.c): the
 * older-than forms (RFC 3339 dates, durations) and the checks of each filter.
 * Deleting itself runs against Redis in tests/integration/purge.test.js.
 */
#include "pc_purge.h"
#include "t.h"

#define NOW INT64_C(1764867600000) /* 2025-12-04T17:00:00Z */

static int64_t cutoff(const char *v)
{
    int64_t ms = 0;
    return purge_parse_older_than(v, NOW, &ms) == 0 ? ms : -1;
}

static void test_durations(void)
{
    T_CHECK_INT(cutoff("90s"), NOW - 90000);
    T_CHECK_INT(cutoff("15m"), NOW - 900000);
    T_CHECK_INT(cutoff("2h"), NOW - 7200000);
    T_CHECK_INT(cutoff("7d"), NOW - INT64_C(7) * 86400000);
    T_CHECK_INT(cutoff("2w"), NOW - INT64_C(14) * 86400000);
    T_CHECK_INT(cutoff("1h30m"), NOW - 5400000);
    static const char *const bad[] = {"",    "0s",  "h",    "2",   "2x",
                                      "-2h", "2h-", "1.5h", "2 h", "99999999999999999999d"};
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        T_CHECK_INT(cutoff(bad[i]), -1);
}

static void test_dates(void)
{
    T_CHECK_INT(cutoff("2025-12-04T17:00:00Z"), NOW);
    T_CHECK_INT(cutoff("2025-12-04t17:00:00z"), NOW);
    T_CHECK_INT(cutoff("2025-12-04 17:00:00Z"), NOW);
    T_CHECK_INT(cutoff("2025-12-04T18:00:00+01:00"), NOW);
    T_CHECK_INT(cutoff("2025-12-04T16:30:00-00:30"), NOW);
    T_CHECK_INT(cutoff("2025-12-04T17:00:00.25Z"), NOW + 250);
    T_CHECK_INT(cutoff("2025-12-04T17:00:00.123456Z"), NOW + 123);
    T_CHECK_INT(cutoff("2025-12-04"), NOW - INT64_C(17) * 3600000);
    static const char *const bad[] = {
        "2025-12-04T17:00:00",       /* no offset */
        "2025-02-30T00:00:00Z",      /* no such day */
        "2025-13-01",                /* no such month */
        "2025-12-04T24:00:00Z",      /* no such hour */
        "2025-12-04T17:00Z",         /* no seconds */
        "2025-12-04T17:00:00.Z",     /* an empty fraction */
        "2025-12-04T17:00:00+0100",  /* the offset needs its colon */
        "2025-12-04T17:00:00Z junk", /* anything after */
        "25-12-04",
        "yesterday",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        if (cutoff(bad[i]) != -1)
            fprintf(stderr, "  accepted: %s\n", bad[i]);
        T_CHECK_INT(cutoff(bad[i]), -1);
    }
}

static void test_filters(void)
{
    struct purge_filter f = {0};
    char err[256];
    T_CHECK(!purge_filter_narrow(&f));
    T_CHECK_INT(purge_filter_set(&f, "tenant", "0123456789abcdef", NOW, err, sizeof err), 0);
    T_CHECK(!purge_filter_narrow(&f)); /* a tenant alone is a flush */
    T_CHECK_INT(purge_filter_set(&f, "namespace", "docs-v1.2_x", NOW, err, sizeof err), 0);
    T_CHECK(purge_filter_narrow(&f));
    T_CHECK_INT(purge_filter_set(&f, "model", "openai/gpt-4o mini", NOW, err, sizeof err), 0);
    T_CHECK_INT(purge_filter_set(&f, "older-than", "1h", NOW, err, sizeof err), 0);
    T_CHECK_STR(f.tenant, "0123456789abcdef");
    T_CHECK_STR(f.ns, "docs-v1.2_x");
    T_CHECK_STR(f.model, "openai/gpt-4o mini");
    T_CHECK_INT(f.before_ms, NOW - 3600000);
    /* The epoch is a cutoff that picks nothing, never "no age filter" (before_ms 0): an
     * older-than=1970-01-01 alone was a flush of everything. */
    static const char *const epoch[] = {"1970-01-01", "1970-01-01T01:00:00+01:00",
                                        "1970-01-01T00:00:00.000Z"};
    for (size_t i = 0; i < PC_ARRAY_LEN(epoch); i++) {
        struct purge_filter e = {0};
        T_CHECK_INT(purge_filter_set(&e, "older-than", epoch[i], NOW, err, sizeof err), 0);
        T_CHECK(purge_filter_narrow(&e));
        T_CHECK(e.before_ms < 0);
    }
    struct purge_filter e = {0};
    T_CHECK_INT(purge_filter_set(&e, "older-than", "1h", 3600000, err, sizeof err), 0);
    T_CHECK(purge_filter_narrow(&e));

    static const struct {
        const char *name, *value, *says;
    } bad[] = {
        {"tenant", "0123456789ABCDEF", "16 lower-case hex"},
        {"tenant", "0123", "16 lower-case hex"},
        {"namespace", "", "1-64 characters"},
        {"namespace", "a b", "1-64 characters"},
        {"namespace", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "1-64"},
        {"model", "", "1-255 characters"},
        {"model", "a\nb", "control"},
        {"older-than", "soon", "RFC 3339"},
        {"age", "1h", "unknown filter age"},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        struct purge_filter g = {0}, none = {0};
        err[0] = '\0';
        T_CHECK_INT(purge_filter_set(&g, bad[i].name, bad[i].value, NOW, err, sizeof err), -1);
        T_CHECK(strstr(err, bad[i].says) != NULL);
        T_CHECK(memcmp(&g, &none, sizeof none) == 0); /* a refused value changes nothing */
    }
    /* Given twice, even alike: every filter given must match, so the last one alone would
     * delete what the first excludes. f has each one already. */
    static const char *const twice[][2] = {{"tenant", "0123456789abcdef"},
                                           {"namespace", "other"},
                                           {"model", "openai/gpt-4o mini"},
                                           {"older-than", "2h"}};
    for (size_t i = 0; i < PC_ARRAY_LEN(twice); i++) {
        struct purge_filter g = f;
        err[0] = '\0';
        T_CHECK_INT(purge_filter_set(&g, twice[i][0], twice[i][1], NOW, err, sizeof err), -1);
        T_CHECK(strstr(err, "given twice") != NULL);
        T_CHECK(strncmp(err, twice[i][0], strlen(twice[i][0])) == 0);
        T_CHECK(memcmp(&g, &f, sizeof f) == 0);
    }
}

int main(void)
{
    T_RUN(test_durations);
    T_RUN(test_dates);
    T_RUN(test_filters);
    T_DONE();
}
