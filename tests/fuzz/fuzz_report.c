/*
 * fuzz_report.c - libFuzzer target for what `promptcache report` and the
 * dashboard do with the hourly hashes read from Redis (report_add_field,
 * src/report.c), which anyone with access to that Redis may have written.
 *
 * Input: byte 0 chooses the bounds on rows and whether there is a price
 * list; the rest is lines "FIELD COUNT", COUNT parsed as the reader parses a
 * hash value. Checked, aborting on violation:
 *   - a field is taken or skipped, never anything else, and the totals are
 *     the sums of the model rows and of the tenant rows;
 *   - the JSON rendering parses, with the same requests total;
 *   - every CSV line has as many columns as its header (no name breaks a
 *     row), and the table renders.
 * Seed corpus: tests/fuzz/corpus/report/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pc_report.h"
#include "pc_tally.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char prices[] = "{\"currency\":\"USD\",\"models\":{"
                             "\"gpt-4o\":{\"input\":2.5,\"cache_read\":1.25,\"output\":10},"
                             "\"claude-sonnet-4-5\":{\"input\":3,\"cache_read\":0.3,"
                             "\"cache_write\":3.75,\"cache_write_1h\":6,\"output\":15,"
                             "\"input_audio\":40,\"output_audio\":80}}}";

/* Columns of each line of text: all equal, or -1. */
static int csv_columns(const char *s, size_t len)
{
    int want = -1, n = 1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ',')
            n++;
        else if (s[i] == '\n') {
            if (want >= 0 && n != want)
                return -1;
            want = n;
            n = 1;
        }
    }
    return want;
}

static int64_t sum_rows(const struct report_rows *rows)
{
    int64_t s = 0;
    for (size_t i = 0; i < rows->n; i++)
        s = rows->v[i].v[TALLY_requests] > INT64_MAX - s ? INT64_MAX
                                                         : s + rows->v[i].v[TALLY_requests];
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct report r;
    report_init(&r, 0, TALLY_HOUR_MS);
    r.max_models = data[0] & 3;
    r.max_tenants = (data[0] >> 2) & 3;
    if (data[0] & 16) {
        char err[160];
        CHECK(report_load_prices(&r, prices, strlen(prices), err, sizeof err) == 0);
    }
    const char *s = (const char *)data + 1;
    size_t len = size - 1, taken = 0, lines = 0;
    while (len > 0) {
        const char *nl = memchr(s, '\n', len);
        size_t n = nl ? (size_t)(nl - s) : len;
        const char *sp = memchr(s, ' ', n);
        if (sp != NULL) {
            size_t flen = (size_t)(sp - s);
            char value[32];
            size_t vl = n - flen - 1 < sizeof value - 1 ? n - flen - 1 : sizeof value - 1;
            memcpy(value, sp + 1, vl);
            value[vl] = '\0';
            int64_t count;
            if (pc_parse_i64(value, &count) == 0) {
                int rc = report_add_field(&r, s, flen, count);
                CHECK(rc == 0 || rc == -1);
                taken += rc == 0;
                lines++;
            }
        }
        s += n + (nl != NULL);
        len -= n + (nl != NULL);
    }
    CHECK(r.skipped + taken == lines);
    int64_t total = r.total.v[TALLY_requests];
    if (total < INT64_MAX) { /* below saturation, the rows add up to the total */
        CHECK(sum_rows(&r.models) == total);
        CHECK(sum_rows(&r.tenants) == total);
    }
    report_sort(&r);
    struct pc_buf out = PC_BUF_INIT;
    report_render(&r, REPORT_JSON, &out);
    cJSON *j = cJSON_ParseWithLength(out.data, out.len);
    CHECK(j != NULL);
    const cJSON *req = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "total"), "requests");
    CHECK(cJSON_IsNumber(req) && req->valuedouble == (double)total);
    cJSON_Delete(j);
    pc_buf_reset(&out);
    report_render(&r, REPORT_CSV, &out);
    CHECK(out.len > 0 && csv_columns(out.data, out.len) > 0);
    pc_buf_reset(&out);
    report_render(&r, REPORT_TABLE, &out);
    CHECK(out.len > 0);
    pc_buf_free(&out);
    report_free(&r);
    return 0;
}
