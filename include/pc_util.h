/*
 * pc_util.h - small helpers every module uses: allocation that dies loudly on
 * OOM, a growable byte buffer, magic-number checks for objects that travel
 * through void * callbacks, clocks, hex and SHA-256.
 *
 * Nothing here allocates behind the caller's back except pc_buf, whose memory
 * belongs to the struct that embeds it (release with pc_buf_free).
 */
#ifndef PC_UTIL_H
#define PC_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

#define PC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define PC_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define PC_MAX(a, b)    ((a) > (b) ? (a) : (b))

#define PC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define PC_NORETURN     __attribute__((noreturn))

/* Allocation. These never return NULL: on OOM they log and abort. */
void *pc_malloc(size_t n);
void *pc_calloc(size_t nmemb, size_t size);
void *pc_realloc(void *p, size_t n);
char *pc_strdup(const char *s);
char *pc_strndup(const char *s, size_t n);

/* Free *pp and NULL the caller's pointer. */
#define PC_FREE(pp)   \
    do {              \
        free(*(pp));  \
        *(pp) = NULL; \
    } while (0)

/*
 * Magic numbers (Varnish miniobj style): every object handed to a library as
 * a void * carries one, checked on entry to each callback and cleared when the
 * object is freed, so a stale pointer fails loudly instead of corrupting.
 */
PC_NORETURN void pc_magic_fail(const char *file, int line, const char *expr, unsigned got,
                               unsigned want);
#define PC_CHECK_OBJ(o, m)                                                                 \
    do {                                                                                   \
        if ((o) == NULL || (o)->magic != (m))                                              \
            pc_magic_fail(__FILE__, __LINE__, #o, (o) == NULL ? 0u : (unsigned)(o)->magic, \
                          (unsigned)(m));                                                  \
    } while (0)

/* Growable byte buffer. Zero-initialise (PC_BUF_INIT) before use. */
struct pc_buf {
    char *data;
    size_t len;
    size_t cap;
};
#define PC_BUF_INIT \
    {               \
        NULL, 0, 0  \
    }

void pc_buf_reserve(struct pc_buf *b, size_t extra);
void pc_buf_append(struct pc_buf *b, const void *p, size_t n);
void pc_buf_append_str(struct pc_buf *b, const char *s);
void pc_buf_append_char(struct pc_buf *b, char c);
void pc_buf_printf(struct pc_buf *b, const char *fmt, ...) PC_PRINTF(2, 3);
void pc_buf_vprintf(struct pc_buf *b, const char *fmt, va_list ap);
/* Append s[0..n) as a JSON string literal (quotes included, RFC 8259 escapes). */
void pc_buf_json_str(struct pc_buf *b, const char *s, size_t n);
/*
 * The same for text that must be valid UTF-8 (a log line: a log shipper
 * refuses or mangles a line that is not): at most max bytes of s[0..n), cut
 * before a character the cut would split, and each byte that is no part of a
 * well-formed UTF-8 character written as \ufffd (U+FFFD).
 */
void pc_buf_json_text(struct pc_buf *b, const char *s, size_t n, size_t max);
/* The length of the well-formed UTF-8 character at s[0..n) (RFC 3629), or 0 if none is. */
size_t pc_utf8_char_len(const char *s, size_t n);
/* Remove the first n bytes. */
void pc_buf_consume(struct pc_buf *b, size_t n);
/* NUL-terminate (the NUL is not counted in len) and return data; never NULL. */
char *pc_buf_cstr(struct pc_buf *b);
void pc_buf_reset(struct pc_buf *b);
void pc_buf_free(struct pc_buf *b);

/* Clocks. Monotonic for durations and timers, wall clock for stored ages. */
uint64_t pc_mono_us(void);

/* splitmix64's finalizer: every input bit moves every output bit (hash table homes). */
static inline uint64_t pc_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}
/* A secret 64-bit seed: getrandom, or (no entropy yet) the clocks and salt mixed. */
uint64_t pc_seed64(const void *salt);
uint64_t pc_mono_ms(void);
/* CLOCK_MONOTONIC now + ms: the deadline of a pthread_cond_timedwait on a condition made with
 * that clock (the background threads' naps). */
struct timespec pc_mono_after(int64_t ms);
int64_t pc_wall_ms(void);

/* UTC timestamp "YYYY-MM-DDTHH:MM:SS.mmmZ" of a wall-clock time in ms. */
#define PC_ISO8601_LEN 80
void pc_iso8601(int64_t wall_ms, char out[PC_ISO8601_LEN]);

/* A duration in seconds as a struct timeval (negative counts as 0). */
struct timeval pc_timeval(double secs);
/* The same for a whole number of milliseconds (negative counts as 0). */
struct timeval pc_timeval_ms(int64_t ms);

/*
 * FNV-1a over p[0..n), continuing from h (start with PC_FNV_SEED): a fast,
 * non-cryptographic hash for in-memory tables (never for cache keys).
 */
#define PC_FNV_SEED UINT64_C(14695981039346656037)
uint64_t pc_fnv1a(uint64_t h, const void *p, size_t n);

/* Lower-case hex of in[0..n) into out, which must hold 2n+1 bytes. */
void pc_hex(const unsigned char *in, size_t n, char *out);
/*
 * url as a log line may show it: scheme, host and path, without the user:password@ of its
 * authority (the last '@' before the path ends it) nor its query or fragment (a key in
 * ?key=...). Cut to outlen.
 */
void pc_url_shown(const char *url, char *out, size_t outlen);

/* The value of hex digit c (either case), or -1. */
int pc_hex_digit(int c);

/* Lower-case hex text of v into out (NUL-terminated, at most 16 digits); returns its length. */
size_t pc_u64_hex(uint64_t v, char out[17]);
/*
 * src copied into dst[0..size), cut to fit and always NUL-terminated (size >
 * 0), as snprintf(dst, size, "%s", src) does without parsing a format.
 */
void pc_strlcpy(char *dst, const char *src, size_t size);
/* Decimal text of v into out (NUL-terminated, at most 20 digits); returns its length. */
size_t pc_u64_dec(uint64_t v, char out[21]);
/* The same, signed, appended to b. */
void pc_buf_append_i64(struct pc_buf *b, int64_t v);

#define PC_SHA256_LEN 32
/* One-shot SHA-256 (OpenSSL libcrypto). */
void pc_sha256(const void *data, size_t len, unsigned char out[PC_SHA256_LEN]);

/* Case-insensitive ASCII comparisons (header names, tokens). */
bool pc_strcaseeq(const char *a, const char *b);
bool pc_strncaseeq(const char *a, const char *b, size_t n);

/*
 * HTTP header helpers shared by the server, the proxy and the upstream side.
 * pc_hop_by_hop: the RFC 9110 7.6.1 connection-specific headers (plus the
 * legacy Keep-Alive / Proxy-Connection), never forwarded by a proxy.
 * pc_token_list_has: whether a comma-separated header value (such as
 * Connection's) lists token, in any case.
 */
bool pc_hop_by_hop(const char *name);
bool pc_token_list_has(const char *list, const char *token);

/*
 * The one definition of the RFC 9110 field syntax, used by the server (what
 * clients send, what handlers reply) and the upstream side (what upstreams
 * answer, what we send them), so the two can never disagree.
 * pc_http_tchar: a token character (5.6.2): ALPHA, DIGIT, "!#$%&'*+-.^_`|~".
 * pc_http_field_char: a field-value byte (5.5): visible ASCII, SP, HTAB or
 * obs-text (0x80-0xff); never CR, LF, NUL, DEL or another control.
 * pc_http_token: s[0..n) is a non-empty token (method, field name).
 * pc_http_field_value: every byte of s[0..n) is a field-value byte (empty ok;
 * the caller trims surrounding blanks).
 */
#define PC_HTTP_TCHAR      0x01
#define PC_HTTP_FIELD_CHAR 0x02
extern const unsigned char pc_http_char_class[256];
static inline bool pc_http_tchar(char c)
{
    return (pc_http_char_class[(unsigned char)c] & PC_HTTP_TCHAR) != 0;
}
static inline bool pc_http_field_char(char c)
{
    return (pc_http_char_class[(unsigned char)c] & PC_HTTP_FIELD_CHAR) != 0;
}
bool pc_http_token(const char *s, size_t n);
bool pc_http_field_value(const char *s, size_t n);

/*
 * Strict number parsing for config values and headers: the whole string must
 * be the number (surrounding blanks are not allowed). Return 0 or -1.
 */
int pc_parse_i64(const char *s, int64_t *out);
int pc_parse_double(const char *s, double *out);

/*
 * RFC 8259's rules that cJSON does not keep, checked over a text cJSON has
 * accepted (structure is cJSON's to check): white space is only space, tab,
 * LF and CR; strings hold no raw control character (U+0000..U+001F), only
 * well-formed UTF-8 and escapes with four hex digits (a surrogate escape
 * paired); numbers are -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?.
 * A UTF-8 byte order mark at the start is allowed (the RFC lets a parser
 * ignore it; cJSON does). True if s[0..n) keeps them; otherwise false with
 * what is wrong and its byte offset written to msg.
 */
bool pc_json_strict(const char *s, size_t n, char *msg, size_t msglen);

#endif
