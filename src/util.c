/*
 * util.c - allocation, growable buffers, clocks, hex and SHA-256 helpers
 * (see pc_util.h). Owns no state.
 */
#include "pc_util.h"
#include "pc_log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>

static PC_NORETURN void oom(size_t n)
{
    log_error("out of memory allocating %zu bytes", n);
    abort();
}

void *pc_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *pc_calloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (p == NULL)
        oom(nmemb * size);
    return p;
}

void *pc_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        oom(n);
    return q;
}

char *pc_strdup(const char *s)
{
    return pc_strndup(s, strlen(s));
}

char *pc_strndup(const char *s, size_t n)
{
    char *d = pc_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

void pc_magic_fail(const char *file, int line, const char *expr, unsigned got, unsigned want)
{
    log_error("%s:%d: bad object %s (magic 0x%08x, want 0x%08x)", file, line, expr, got, want);
    abort();
}

void pc_buf_reserve(struct pc_buf *b, size_t extra)
{
    if (b->cap - b->len > extra)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2)
            oom(SIZE_MAX);
        cap *= 2;
    }
    b->data = pc_realloc(b->data, cap);
    b->cap = cap;
}

void pc_buf_append(struct pc_buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    pc_buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void pc_buf_append_str(struct pc_buf *b, const char *s)
{
    pc_buf_append(b, s, strlen(s));
}

void pc_buf_append_char(struct pc_buf *b, char c)
{
    pc_buf_reserve(b, 1);
    b->data[b->len++] = c;
}

void pc_buf_vprintf(struct pc_buf *b, const char *fmt, va_list ap)
{
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, aq);
    va_end(aq);
    if (n < 0)
        return;
    if (b->data == NULL || (size_t)n >= b->cap - b->len) {
        pc_buf_reserve(b, (size_t)n + 1);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)n;
}

void pc_buf_printf(struct pc_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pc_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

static const char hexd[] = "0123456789abcdef";

/* s[0..n) with the JSON string escapes, no quotes. */
static void json_escape(struct pc_buf *b, const char *s, size_t n)
{
    size_t run = 0; /* start of the current run of bytes that need no escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        pc_buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 0, 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hexd[c >> 4];
            esc[5] = hexd[c & 15];
            elen = 6;
        }
        pc_buf_append(b, esc, elen);
    }
    pc_buf_append(b, s + run, n - run);
}

void pc_buf_json_str(struct pc_buf *b, const char *s, size_t n)
{
    pc_buf_reserve(b, n + 2);
    pc_buf_append_char(b, '"');
    json_escape(b, s, n);
    pc_buf_append_char(b, '"');
}

/* The length of the well-formed UTF-8 character at s[0..n) (RFC 3629), or 0. */
static size_t utf8_char_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* beyond U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

size_t pc_utf8_char_len(const char *s, size_t n)
{
    return n > 0 ? utf8_char_len((const unsigned char *)s, n) : 0;
}

void pc_buf_json_text(struct pc_buf *b, const char *s, size_t n, size_t max)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t end = PC_MIN(n, max);
    pc_buf_reserve(b, end + 2);
    pc_buf_append_char(b, '"');
    size_t run = 0, i = 0;
    while (i < end) {
        size_t len = utf8_char_len(u + i, n - i);
        if (len > 0 && i + len > end)
            break; /* a character the cut would split: left out whole */
        if (len > 0) {
            i += len;
            continue;
        }
        json_escape(b, s + run, i - run);
        pc_buf_append_str(b, "\\ufffd");
        run = ++i;
    }
    json_escape(b, s + run, i - run);
    pc_buf_append_char(b, '"');
}

void pc_buf_consume(struct pc_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

char *pc_buf_cstr(struct pc_buf *b)
{
    pc_buf_reserve(b, 1);
    b->data[b->len] = '\0';
    return b->data;
}

void pc_buf_reset(struct pc_buf *b)
{
    b->len = 0;
}

void pc_buf_free(struct pc_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

uint64_t pc_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t pc_mono_ms(void)
{
    return pc_mono_us() / 1000u;
}

struct timespec pc_mono_after(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int64_t pc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void pc_iso8601(int64_t wall_ms, char out[PC_ISO8601_LEN])
{
    time_t secs = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(out, PC_ISO8601_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000));
}

struct timeval pc_timeval(double secs)
{
    struct timeval tv = {0, 0};
    if (secs > 0) {
        tv.tv_sec = (time_t)secs;
        tv.tv_usec = (suseconds_t)((secs - (double)tv.tv_sec) * 1e6);
    }
    return tv;
}

struct timeval pc_timeval_ms(int64_t ms)
{
    struct timeval tv = {0, 0};
    if (ms > 0) {
        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
    }
    return tv;
}

uint64_t pc_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * UINT64_C(1099511628211);
    return h;
}

void pc_url_shown(const char *url, char *out, size_t outlen)
{
    const char *sep = strstr(url, "://");
    size_t scheme = sep != NULL ? (size_t)(sep + 3 - url) : 0;
    const char *rest = url + scheme;
    const char *at = memrchr(rest, '@', strcspn(rest, "/?#"));
    const char *host = at != NULL ? at + 1 : rest;
    snprintf(out, outlen, "%.*s%.*s", (int)scheme, url, (int)strcspn(host, "?#"), host);
}

void pc_hex(const unsigned char *in, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexd[in[i] >> 4];
        out[2 * i + 1] = hexd[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void pc_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strnlen(src, size - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The digits of v in base (10 or 16) into out, NUL-terminated; returns their number. */
static size_t u64_digits(uint64_t v, unsigned base, char *out)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = hexd[v % base];
        v /= base;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

size_t pc_u64_dec(uint64_t v, char out[21])
{
    return u64_digits(v, 10, out);
}

int pc_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

size_t pc_u64_hex(uint64_t v, char out[17])
{
    return u64_digits(v, 16, out);
}

void pc_buf_append_i64(struct pc_buf *b, int64_t v)
{
    char d[21];
    if (v < 0)
        pc_buf_append_char(b, '-');
    /* The magnitude of INT64_MIN is not an int64_t: negate in unsigned arithmetic. */
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    pc_buf_append(b, d, pc_u64_dec(m, d));
}

/*
 * OpenSSL 3 looks EVP_sha256() up in its provider tables (under a lock) on
 * every digest; fetching it once keeps that off the request path. EVP_Digest
 * also makes and frees a context per call (more than the hashing costs for
 * a key's few hundred bytes): each thread keeps one instead, freed when the
 * thread ends.
 */
static EVP_MD *sha256_md;
static pthread_key_t sha256_ctx_key;
static bool sha256_have_key;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    sha256_have_key = pthread_key_create(&sha256_ctx_key, sha256_ctx_free) == 0;
}

void pc_sha256(const void *data, size_t len, unsigned char out[PC_SHA256_LEN])
{
    unsigned int outlen = 0;
    pthread_once(&sha256_once, sha256_fetch);
    const EVP_MD *md = sha256_md != NULL ? sha256_md : EVP_sha256();
    EVP_MD_CTX *ctx = sha256_have_key ? pthread_getspecific(sha256_ctx_key) : NULL;
    if (ctx == NULL && sha256_have_key && (ctx = EVP_MD_CTX_new()) != NULL &&
        pthread_setspecific(sha256_ctx_key, ctx) != 0) {
        EVP_MD_CTX_free(ctx);
        ctx = NULL;
    }
    int ok = ctx != NULL ? EVP_DigestInit_ex2(ctx, md, NULL) == 1 &&
                               EVP_DigestUpdate(ctx, data, len) == 1 &&
                               EVP_DigestFinal_ex(ctx, out, &outlen) == 1
                         : EVP_Digest(data, len, out, &outlen, md, NULL) == 1;
    if (!ok || outlen != PC_SHA256_LEN) {
        log_error("SHA-256 failed in libcrypto");
        abort();
    }
}

/* ASCII case folding: header names and tokens, never locale-dependent (and no call per byte:
 * header lookups made tolower() a tenth of a hit's instructions). */
static inline unsigned char ascii_lower(unsigned char c)
{
    return (unsigned char)((unsigned)c - 'A' < 26u ? c | 0x20 : c);
}

bool pc_strcaseeq(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    for (; *x == *y || ascii_lower(*x) == ascii_lower(*y); x++, y++)
        if (*x == '\0')
            return true;
    return false;
}

bool pc_strncaseeq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ascii_lower((unsigned char)a[i]) != ascii_lower((unsigned char)b[i]))
            return false;
        if (a[i] == '\0')
            return true;
    }
    return true;
}

bool pc_hop_by_hop(const char *name)
{
    static const char *const hop[] = {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(hop); i++)
        if (pc_strcaseeq(name, hop[i]))
            return true;
    return false;
}

bool pc_token_list_has(const char *list, const char *token)
{
    size_t tl = strlen(token);
    while (list != NULL && *list) {
        while (*list == ' ' || *list == '\t' || *list == ',')
            list++;
        size_t n = strcspn(list, ",");
        size_t end = n;
        while (end > 0 && (list[end - 1] == ' ' || list[end - 1] == '\t'))
            end--;
        if (end == tl && pc_strncaseeq(list, token, tl))
            return true;
        list += n;
    }
    return false;
}

/*
 * RFC 9110 character classes, one byte per character: 1 = PC_HTTP_TCHAR
 * (5.6.2), 2 = PC_HTTP_FIELD_CHAR (5.5: HTAB, SP, visible ASCII, obs-text).
 * Every tchar is also a field-value byte (3); controls and DEL are 0.
 */
const unsigned char pc_http_char_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 3, 2, 3, 3, 3, 3, 3, 2, 2, 3, 3, 2, 3, 3, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2,
    2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 3, 2, 3, 0,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
};

bool pc_http_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!pc_http_tchar(s[i]))
            return false;
    return true;
}

bool pc_http_field_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!pc_http_field_char(s[i]))
            return false;
    return true;
}

int pc_parse_i64(const char *s, int64_t *out)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    *out = (int64_t)v;
    return 0;
}

int pc_parse_double(const char *s, double *out)
{
    if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
        return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* ---- strict JSON (pc_json_strict) --------------------------------------- */

static bool js_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* The four hex digits at p (p + 4 <= end), or -1. */
static long js_hex4(const unsigned char *p, const unsigned char *end)
{
    if (end - p < 4)
        return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = pc_hex_digit(p[i]);
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

/* The length of the UTF-8 sequence at p (RFC 3629: no overlong form, no surrogate), or 0. */
static size_t js_utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) <= need || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i <= need; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return need + 1;
}

#define JS_FAIL(at, ...)                                                                          \
    do {                                                                                          \
        char why_[160];                                                                           \
        snprintf(why_, sizeof(why_), __VA_ARGS__);                                                \
        snprintf(msg, msglen, "%s at byte %zu", why_, (size_t)((at) - (const unsigned char *)s)); \
        return false;                                                                             \
    } while (0)

/* A string's body from p (after its opening quote); *pp is left after its closing quote. */
static bool js_string(const char *s, const unsigned char **pp, const unsigned char *end, char *msg,
                      size_t msglen)
{
    const unsigned char *p = *pp;
    for (;;) {
        /* Eight plain bytes at a time: none below 0x20, none a quote, backslash or past 0x7F. */
        const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
            uint64_t special = ((w - ones * 0x20) | (q - ones) | (b - ones)) & ~w & highs;
            if ((special | (w & highs)) != 0)
                break;
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            break; /* unterminated: cJSON's to refuse */
        unsigned char c = *p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20)
            JS_FAIL(p, "a control character (U+%04X) not escaped in a string", c);
        if (c >= 0x80) {
            size_t l = js_utf8(p, end);
            if (l == 0)
                JS_FAIL(p, "a byte (0x%02X) that is not UTF-8 in a string", c);
            p += l;
            continue;
        }
        /* a backslash */
        if (end - p < 2)
            JS_FAIL(p, "an escape cut short");
        unsigned char e = p[1];
        if (strchr("\"\\/bfnrt", e) != NULL && e != '\0') {
            p += 2;
            continue;
        }
        if (e != 'u')
            JS_FAIL(p, "an invalid escape in a string");
        long cp = js_hex4(p + 2, end);
        if (cp < 0)
            JS_FAIL(p, "a \\u escape without four hex digits");
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            JS_FAIL(p, "a low surrogate escape (\\u%04lX) without a high one", (unsigned long)cp);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            long lo = end - p >= 12 && p[6] == '\\' && p[7] == 'u' ? js_hex4(p + 8, end) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                JS_FAIL(p, "a high surrogate escape (\\u%04lX) without a low one",
                        (unsigned long)cp);
            p += 12;
        } else
            p += 6;
    }
    *pp = p;
    return true;
}

/* A number from p (a '-' or a digit); *pp is left after it. */
static bool js_number(const char *s, const unsigned char **pp, const unsigned char *end, char *msg,
                      size_t msglen)
{
    const unsigned char *start = *pp, *p = start;
    if (*p == '-')
        p++;
    if (p >= end || !js_digit(*p))
        JS_FAIL(start, "a '-' not followed by a digit");
    if (*p == '0') {
        p++;
        if (p < end && js_digit(*p))
            JS_FAIL(start, "a number with a leading zero");
    } else
        while (p < end && js_digit(*p))
            p++;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !js_digit(*p))
            JS_FAIL(p - 1, "a decimal point not followed by a digit");
        while (p < end && js_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        const unsigned char *ex = p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !js_digit(*p))
            JS_FAIL(ex, "an exponent without digits");
        while (p < end && js_digit(*p))
            p++;
    }
    *pp = p;
    return true;
}

bool pc_json_strict(const char *s, size_t n, char *msg, size_t msglen)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    if (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
        p += 3;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') {
            p++;
            if (!js_string(s, &p, end, msg, msglen))
                return false;
        } else if (c == '-' || js_digit(c)) {
            if (!js_number(s, &p, end, msg, msglen))
                return false;
        } else if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r')
            JS_FAIL(p, "a control character (U+%04X) outside a string", c);
        else if (c == '+' || c == '.')
            JS_FAIL(p, "a number starting with '%c'", c);
        else
            p++;
    }
    return true;
}

uint64_t pc_seed64(const void *salt)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
        return seed;
    return pc_mix64(pc_mono_us() ^ ((uint64_t)pc_wall_ms() << 20) ^ (uint64_t)(uintptr_t)salt);
}
