/*
 * fuzz_http_head.c - libFuzzer target for httpd_parse_head (src/httpd.c).
 *
 * Input: the bytes a client sent. Checked, aborting on violation:
 *   - the result is 0 (need more), a head length within the input, or one of
 *     -400, -431, -501, -505;
 *   - for a complete head, every span (method, target, header names and
 *     values) lies inside it, the method and names are RFC 9110 tokens and
 *     values field-values by the shared pc_util rules (so no CR, LF, NUL or
 *     other controls) without surrounding blanks, and the minor version is 0
 *     or 1;
 *   - for a complete head, shorter prefixes need more bytes (a valid head is
 *     never rejected for being cut short), and appending bytes after it does
 *     not change the result (pipelining);
 *   - a smaller header array gives the same result, or -431 exactly when the
 *     head has more headers than the array holds;
 *   - the Host rule (httpd_head_check_host) says 0 or -400, and -400 for
 *     every HTTP/1.1 head without a Host line.
 * Seed corpus: tests/fuzz/corpus/http_head/.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_httpd.h"
#include "pc_util.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 128

static long parse(const char *buf, size_t len, struct httpd_head *hd,
                  struct httpd_header_span *spans, size_t cap)
{
    memset(hd, 0, sizeof(*hd));
    hd->headers = spans;
    hd->max_headers = cap;
    return httpd_parse_head(buf, len, hd);
}

static int inside(const char *buf, long n, const char *p, size_t len)
{
    return p >= buf && p + len <= buf + n;
}

static void check_spans(const char *buf, long n, const struct httpd_head *hd)
{
    CHECK(hd->method_len > 0 && inside(buf, n, hd->method, hd->method_len));
    CHECK(pc_http_token(hd->method, hd->method_len));
    CHECK(hd->target_len > 0 && inside(buf, n, hd->target, hd->target_len));
    CHECK(hd->minor_version == 0 || hd->minor_version == 1);
    CHECK(hd->nheaders <= hd->max_headers);
    for (size_t i = 0; i < hd->nheaders; i++) {
        const struct httpd_header_span *s = &hd->headers[i];
        CHECK(s->name_len > 0 && inside(buf, n, s->name, s->name_len));
        CHECK(inside(buf, n, s->value, s->value_len));
        CHECK(pc_http_token(s->name, s->name_len));
        CHECK(pc_http_field_value(s->value, s->value_len));
        CHECK(memchr(s->value, '\r', s->value_len) == NULL);
        CHECK(memchr(s->value, '\n', s->value_len) == NULL);
        if (s->value_len > 0) {
            CHECK(s->value[0] != ' ' && s->value[0] != '\t');
            CHECK(s->value[s->value_len - 1] != ' ' && s->value[s->value_len - 1] != '\t');
        }
    }
}

static void check_complete(const char *buf, size_t size, long n, const struct httpd_head *hd)
{
    struct httpd_head h2;
    struct httpd_header_span spans[CAP];
    check_spans(buf, n, hd);
    /* Prefixes need more bytes. */
    CHECK(parse(buf, (size_t)n - 1, &h2, spans, CAP) == 0);
    CHECK(parse(buf, (size_t)n / 2, &h2, spans, CAP) == 0);
    /* What follows the head does not matter. */
    if ((size_t)n < size)
        CHECK(parse(buf, (size_t)n, &h2, spans, CAP) == n);
    /* The Host rule. */
    int host = httpd_head_check_host(hd);
    CHECK(host == 0 || host == -400);
    bool any_host = false;
    for (size_t i = 0; i < hd->nheaders; i++)
        any_host |= hd->headers[i].name_len == 4 && pc_strncaseeq(hd->headers[i].name, "host", 4);
    if (hd->minor_version == 1 && !any_host)
        CHECK(host == -400);
    /* A smaller header array. */
    size_t small = hd->nheaders / 2;
    long rs = parse(buf, size, &h2, spans, small);
    CHECK(hd->nheaders > small ? rs == -431 : rs == n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct httpd_head hd;
    struct httpd_header_span spans[CAP];
    /* An exact-size copy, so reading past the end is caught by ASan. */
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    long n = parse(buf, size, &hd, spans, CAP);
    CHECK(n == 0 || n == -400 || n == -431 || n == -501 || n == -505 ||
          (n > 0 && (size_t)n <= size));
    if (n > 0)
        check_complete(buf, size, n, &hd);
    free(buf);
    return 0;
}
