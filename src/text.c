/*
 * text.c - the tokenizer shared by the embedders and the guards (see
 * pc_text.h). Owns no state; the caller's text_doc receives the tokens.
 *
 *   bytes --utf8_next--> code point --classify--> letter / digit / apostrophe
 *         / dot / comma / CJK / separator (sentence break or not)
 *         --scan_token--> one raw token (folded bytes + how it was written)
 *         --finish_token--> contractions split, pushed into the doc
 *
 * Folding: ASCII and Latin-1 / Latin Extended-A letters to lower-case ASCII
 * without accents, Greek and Cyrillic capitals to lower case, fullwidth
 * ASCII to ASCII, combining accents dropped; other letters are kept as they
 * are. Punctuation and symbols separate tokens.
 */
#include "pc_text.h"
#include "pc_util.h"

#include <string.h>

enum cls {
    C_SEP = 0, /* separator */
    C_BREAK,   /* separator that ends a sentence: ! ? : ; newline */
    C_LETTER,
    C_DIGIT,
    C_APOS,
    C_DOT,
    C_COMMA,
    C_CJK,
    C_MARK, /* combining mark: part of the token, contributes nothing */
};

/* One decoded code point: its class and, for letters and digits, folded bytes. */
struct cp_info {
    enum cls cls;
    bool upper, lower;
    unsigned char fold[4];
    size_t nfold;
};

/* Decode s[0..len) (len >= 1): length of the sequence, *cp = -1 if invalid. */
static size_t utf8_next(const unsigned char *s, size_t len, long *cp)
{
    unsigned char c = s[0];
    size_t n = c < 0x80             ? 1
               : (c & 0xe0) == 0xc0 ? 2
               : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4
                                    : 0;
    *cp = -1;
    if (n == 0 || n > len)
        return 1;
    long v = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 1;
        v = (v << 6) | (s[i] & 0x3f);
    }
    static const long min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
        return 1;
    *cp = v;
    return n;
}

/* Base letters of U+00C0..U+00FF: '*' not a letter, A = ae, T = th, S = ss. */
static const char latin1[] = "aaaaaaAceeeeiiiidnooooo*ouuuuyTS"
                             "aaaaaaAceeeeiiiidnooooo*ouuuuyTy";
/* Base letters of U+0100..U+017F. */
static const char latin_ext_a[] = "aaaaaaccccccccddddeeeeeeeeeegggggggghhhhiiiiiiiiiiiijjkkk"
                                  "llllllllllnnnnnnnnnoooooooorrrrrrssssssssttttttuuuuuuuuuuuu"
                                  "wwyyyzzzzzzs";

_Static_assert(sizeof latin1 == 65, "latin1 covers U+00C0..U+00FF");
_Static_assert(sizeof latin_ext_a == 129, "latin_ext_a covers U+0100..U+017F");

static bool ext_a_upper(long cp)
{
    if (cp <= 0x137 || (cp >= 0x14a && cp <= 0x177))
        return cp % 2 == 0;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e))
        return cp % 2 == 1;
    return cp == 0x178;
}

static void put_ascii(struct cp_info *ci, char base, bool upper)
{
    ci->cls = C_LETTER;
    ci->upper = upper;
    ci->lower = !upper;
    if (base == 'A' || base == 'T' || base == 'S') {
        ci->fold[0] = base == 'A' ? 'a' : base == 'T' ? 't' : 's';
        ci->fold[1] = base == 'A' ? 'e' : base == 'T' ? 'h' : 's';
        ci->nfold = 2;
    } else {
        ci->fold[0] = (unsigned char)base;
        ci->nfold = 1;
    }
}

/* UTF-8 of cp into ci->fold as a letter that is neither upper nor lower case. */
static void put_cp(struct cp_info *ci, long cp, enum cls cls)
{
    unsigned char *b = ci->fold;
    ci->cls = cls;
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        ci->nfold = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        ci->nfold = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        ci->nfold = 4;
    }
}

static void classify_ascii(long cp, struct cp_info *ci)
{
    if (cp >= 'a' && cp <= 'z') {
        put_ascii(ci, (char)cp, false);
    } else if (cp >= 'A' && cp <= 'Z') {
        put_ascii(ci, (char)(cp + 32), true);
    } else if (cp >= '0' && cp <= '9') {
        ci->cls = C_DIGIT;
        ci->fold[0] = (unsigned char)cp;
        ci->nfold = 1;
    } else {
        ci->cls = cp == '\''                                     ? C_APOS
                  : cp == '.'                                    ? C_DOT
                  : cp == ','                                    ? C_COMMA
                  : strchr("!?:;\n", (int)cp) != NULL && cp != 0 ? C_BREAK
                                                                 : C_SEP;
    }
}

static bool is_separator_cp(long cp)
{
    return cp < 0xc0 || cp == 0xd7 || cp == 0xf7 || (cp >= 0x2000 && cp <= 0x2bff) ||
           (cp >= 0x2e00 && cp <= 0x2e7f) || (cp >= 0x3000 && cp <= 0x303f) ||
           (cp >= 0xe000 && cp <= 0xf8ff) || (cp >= 0xfe10 && cp <= 0xfe6f) ||
           (cp >= 0xff00 && cp <= 0xff0f) || (cp >= 0xff1a && cp <= 0xff20) ||
           (cp >= 0xff3b && cp <= 0xff40) || (cp >= 0xff5b && cp <= 0xff65) || cp >= 0xfff0 ||
           (cp >= 0x1f000 && cp <= 0x1faff);
}

static bool is_cjk_cp(long cp)
{
    return (cp >= 0x3040 && cp <= 0x30ff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
           (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0xac00 && cp <= 0xd7af) ||
           (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x20000 && cp <= 0x2ffff);
}

/* Letters of scripts with case that we fold; false if cp is none of them. */
static bool classify_cased(long cp, struct cp_info *ci)
{
    if (cp >= 0xc0 && cp <= 0xff) {
        put_ascii(ci, latin1[cp - 0xc0], cp < 0xdf && cp != 0xd7);
        return true;
    }
    if (cp >= 0x100 && cp <= 0x17f) {
        put_ascii(ci, latin_ext_a[cp - 0x100], ext_a_upper(cp));
        return true;
    }
    bool up = (cp >= 0x391 && cp <= 0x3a9) || (cp >= 0x400 && cp <= 0x42f);
    bool low = (cp >= 0x3b1 && cp <= 0x3c9) || (cp >= 0x430 && cp <= 0x45f);
    if (!up && !low)
        return false;
    put_cp(ci, !up ? cp : cp < 0x400 ? cp + 0x20 : cp < 0x410 ? cp + 0x50 : cp + 0x20, C_LETTER);
    ci->upper = up;
    ci->lower = low;
    return true;
}

static void classify(long cp, struct cp_info *ci)
{
    memset(ci, 0, sizeof *ci);
    if (cp < 0) {
        ci->cls = C_SEP;
    } else if (cp < 0x80) {
        classify_ascii(cp, ci);
    } else if (cp == 0x2019 || cp == 0x2bc) {
        ci->cls = C_APOS;
    } else if (cp == 0x3002 || cp == 0xff01 || cp == 0xff1f) {
        ci->cls = C_BREAK;
    } else if (cp >= 0xff10 && cp <= 0xff19) {
        classify_ascii(cp - 0xff10 + '0', ci);
    } else if ((cp >= 0xff21 && cp <= 0xff3a) || (cp >= 0xff41 && cp <= 0xff5a)) {
        classify_ascii(cp - 0xff21 + 'A', ci);
    } else if (cp >= 0x300 && cp <= 0x36f) {
        ci->cls = C_MARK;
    } else if (classify_cased(cp, ci)) {
        return;
    } else if (is_separator_cp(cp)) {
        ci->cls = C_SEP;
    } else {
        put_cp(ci, cp, is_cjk_cp(cp) ? C_CJK : C_LETTER);
    }
}

/* The code point at s[i..len) classified; returns its length (0 at the end). */
static size_t peek(const unsigned char *s, size_t len, size_t i, struct cp_info *ci)
{
    if (i >= len) {
        memset(ci, 0, sizeof *ci);
        ci->cls = C_SEP;
        return 0;
    }
    long cp;
    size_t n = utf8_next(s + i, len - i, &cp);
    classify(cp, ci);
    return n;
}

/* ---- building one token ------------------------------------------------- */

struct tok_build {
    char norm[TEXT_TOK_MAX + 8];
    size_t len;
    bool full;
    bool alpha, digit, mixed, seen_lower, first_upper, first_set;
    int letters, uppers;
    enum cls last; /* class of the last letter/digit/joiner taken */
};

static void tb_put(struct tok_build *tb, const unsigned char *b, size_t n)
{
    if (tb->full || tb->len + n > TEXT_TOK_MAX) {
        tb->full = true;
        return;
    }
    memcpy(tb->norm + tb->len, b, n);
    tb->len += n;
}

static void tb_letter(struct tok_build *tb, const struct cp_info *ci)
{
    tb_put(tb, ci->fold, ci->nfold);
    if (ci->cls == C_DIGIT) {
        tb->digit = true;
    } else {
        tb->alpha = true;
        tb->letters++;
        tb->uppers += ci->upper;
        if (ci->upper && tb->seen_lower)
            tb->mixed = true;
        tb->seen_lower |= ci->lower;
        if (!tb->first_set) {
            tb->first_upper = ci->upper;
            tb->first_set = true;
        }
    }
    tb->last = ci->cls;
}

/* "1,000" keeps its comma out: exactly three digits follow, then no digit. */
static bool thousands_comma(const unsigned char *s, size_t len, size_t i)
{
    for (int k = 1; k <= 3; k++)
        if (i + (size_t)k >= len || s[i + (size_t)k] < '0' || s[i + (size_t)k] > '9')
            return false;
    return i + 4 >= len || s[i + 4] < '0' || s[i + 4] > '9';
}

/*
 * Whether the joiner (apostrophe, dot or comma) at s[i] continues the token:
 * an apostrophe between letters, a dot between digits, a thousands comma.
 */
static bool joins(const struct tok_build *tb, const struct cp_info *ci, const unsigned char *s,
                  size_t len, size_t i, size_t n)
{
    struct cp_info next;
    peek(s, len, i + n, &next);
    if (ci->cls == C_APOS)
        return tb->last == C_LETTER && next.cls == C_LETTER;
    if (ci->cls == C_DOT)
        return tb->last == C_DIGIT && next.cls == C_DIGIT;
    return tb->last == C_DIGIT && !tb->alpha && thousands_comma(s, len, i);
}

static bool ascii_alnum(const unsigned char *s, size_t len, size_t i)
{
    return i < len &&
           ((s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z'));
}

/* "C#", "F#", "C++", "Notepad++": the suffix is part of the name. */
static size_t name_suffix(const unsigned char *s, size_t len, size_t i)
{
    size_t n = i < len && s[i] == '#' ? 1 : i + 1 < len && s[i] == '+' && s[i + 1] == '+' ? 2 : 0;
    return n > 0 && !ascii_alnum(s, len, i + n) && !(i + n < len && s[i + n] == '+') ? n : 0;
}

/* Scan one token starting at s[i] (a letter or digit); returns the end offset. */
static size_t scan_token(const unsigned char *s, size_t len, size_t i, struct tok_build *tb)
{
    memset(tb, 0, sizeof *tb);
    while (i < len) {
        struct cp_info ci;
        size_t n = peek(s, len, i, &ci);
        if (ci.cls == C_LETTER || ci.cls == C_DIGIT) {
            tb_letter(tb, &ci);
        } else if (ci.cls == C_MARK) {
            /* combining accent: dropped, the token goes on */
        } else if ((ci.cls == C_APOS || ci.cls == C_DOT || ci.cls == C_COMMA) &&
                   joins(tb, &ci, s, len, i, n)) {
            if (ci.cls != C_COMMA)
                tb_put(tb, (const unsigned char *)(ci.cls == C_APOS ? "'" : "."), 1);
            tb->last = ci.cls;
        } else {
            break;
        }
        i += n;
    }
    size_t suffix = tb->alpha ? name_suffix(s, len, i) : 0;
    tb_put(tb, s + i, suffix);
    return i + suffix;
}

/* ---- pushing tokens --------------------------------------------------------- */

static void push(struct text_doc *d, const char *raw, size_t raw_len, const char *w, size_t n,
                 enum text_kind kind, unsigned flags)
{
    if (n == 0)
        return;
    if (d->n == TEXT_MAX_TOKENS) {
        d->truncated = true;
        return;
    }
    struct text_tok *t = &d->tok[d->n++];
    t->raw = raw;
    t->raw_len = (uint32_t)raw_len;
    t->off = (uint32_t)d->buflen;
    t->len = (uint8_t)n;
    t->kind = (uint8_t)kind;
    t->flags = (uint8_t)flags;
    memcpy(d->buf + d->buflen, w, n);
    d->buf[d->buflen + n] = '\0';
    d->buflen += n + 1;
}

/* Negations written without their apostrophe, and the verb they stand for. */
static const char *const bare_negations[][2] = {
    {"dont", "do"},         {"doesnt", "does"},   {"didnt", "did"},     {"isnt", "is"},
    {"arent", "are"},       {"wasnt", "was"},     {"werent", "were"},   {"cant", "can"},
    {"cannot", "can"},      {"couldnt", "could"}, {"wouldnt", "would"}, {"shouldnt", "should"},
    {"wont", "will"},       {"havent", "have"},   {"hasnt", "has"},     {"hadnt", "had"},
    {"aint", "is"},         {"mustnt", "must"},   {"neednt", "need"},   {"mightnt", "might"},
    {"shouldve", "should"}, {"couldve", "could"}, {"wouldve", "would"},
};

/* Verb stems before "n't" that are not the verb itself. */
static const char *const nt_stems[][2] = {
    {"ca", "can"},
    {"wo", "will"},
    {"sha", "shall"},
    {"ai", "is"},
};

/* Contraction suffixes after the last apostrophe and the word they stand for. */
static const char *const suffixes[][2] = {
    {"s", NULL}, {"re", "are"}, {"m", "am"}, {"ll", "will"}, {"ve", "have"}, {"d", "would"},
};

struct tok_out {
    struct text_doc *d;
    const char *raw;
    size_t raw_len;
    unsigned flags;
};

static void out_word(struct tok_out *o, const char *w, size_t n, bool synth)
{
    unsigned f = synth ? (TEXT_F_SYNTH | TEXT_F_ALPHA) : o->flags;
    push(o->d, o->raw, o->raw_len, w, n, TEXT_WORD, f);
    o->flags &= ~TEXT_F_START;
}

/* "don't" -> do not; "can't" -> can not; "it's" -> it; "we're" -> we are. */
static void split_contraction(struct tok_out *o, char *w, size_t n)
{
    char *a = memchr(w, '\'', n);
    char *last = a;
    while (a != NULL) {
        last = a;
        a = memchr(a + 1, '\'', n - (size_t)(a + 1 - w));
    }
    const char *suf = last + 1;
    size_t slen = n - (size_t)(suf - w), blen = (size_t)(last - w);
    if (slen == 1 && suf[0] == 't' && blen >= 1 && w[blen - 1] == 'n') {
        blen--;
        const char *stem = NULL;
        for (size_t i = 0; i < sizeof nt_stems / sizeof nt_stems[0]; i++)
            if (strlen(nt_stems[i][0]) == blen && memcmp(nt_stems[i][0], w, blen) == 0)
                stem = nt_stems[i][1];
        if (stem != NULL)
            out_word(o, stem, strlen(stem), false);
        else
            out_word(o, w, blen, false);
        out_word(o, "not", 3, true);
        return;
    }
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (strlen(suffixes[i][0]) == slen && memcmp(suffixes[i][0], suf, slen) == 0) {
            out_word(o, w, blen, false);
            if (suffixes[i][1] != NULL)
                out_word(o, suffixes[i][1], strlen(suffixes[i][1]), true);
            return;
        }
    }
    size_t k = 0; /* o'clock, rock'n'roll: the apostrophes go */
    for (size_t i = 0; i < n; i++)
        if (w[i] != '\'')
            w[k++] = w[i];
    out_word(o, w, k, false);
}

static void finish_word(struct tok_out *o, char *w, size_t n)
{
    if (memchr(w, '\'', n) != NULL) {
        split_contraction(o, w, n);
        return;
    }
    bool maybe = n >= 4 && n <= 8 && (w[n - 1] == 't' || (w[n - 1] == 'e' && w[n - 2] == 'v'));
    for (size_t i = 0; maybe && i < sizeof bare_negations / sizeof bare_negations[0]; i++) {
        if (strlen(bare_negations[i][0]) == n && memcmp(bare_negations[i][0], w, n) == 0) {
            out_word(o, bare_negations[i][1], strlen(bare_negations[i][1]), false);
            if (bare_negations[i][0][n - 1] == 't')
                out_word(o, "not", 3, true);
            else
                out_word(o, "have", 4, true);
            return;
        }
    }
    out_word(o, w, n, false);
}

static unsigned tb_flags(const struct tok_build *tb, bool start)
{
    unsigned f = start ? TEXT_F_START : 0;
    f |= tb->alpha ? TEXT_F_ALPHA : 0;
    f |= tb->digit ? TEXT_F_DIGIT : 0;
    f |= tb->first_upper ? TEXT_F_CAP : 0;
    f |= tb->letters >= 2 && tb->uppers == tb->letters ? TEXT_F_ALLCAPS : 0;
    f |= tb->mixed ? TEXT_F_MIXED : 0;
    return f;
}

/* A cut token must not end inside a UTF-8 sequence. */
static size_t utf8_trim(const char *w, size_t n)
{
    size_t k = n;
    while (k > 0 && ((unsigned char)w[k - 1] & 0xc0) == 0x80)
        k--;
    if (k == 0)
        return n;
    unsigned char lead = (unsigned char)w[k - 1];
    size_t need = lead < 0x80 ? 1 : (lead & 0xe0) == 0xc0 ? 2 : (lead & 0xf0) == 0xe0 ? 3 : 4;
    return n - (k - 1) >= need ? n : k - 1;
}

static void finish_token(struct text_doc *d, const char *raw, size_t raw_len, struct tok_build *tb,
                         bool start)
{
    size_t n = tb->full ? utf8_trim(tb->norm, tb->len) : tb->len;
    while (n > 0 && (tb->norm[n - 1] == '\'' || tb->norm[n - 1] == '.'))
        n--;
    struct tok_out o = {d, raw, raw_len, tb_flags(tb, start)};
    if (!tb->alpha)
        push(d, raw, raw_len, tb->norm, n, TEXT_NUM, o.flags);
    else
        finish_word(&o, tb->norm, n);
}

void text_doc_reset(struct text_doc *d)
{
    d->n = 0;
    d->buflen = 0;
    d->truncated = false;
}

void text_tokenize(struct text_doc *d, const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    bool start = true;
    size_t i = 0;
    while (i < len && d->n < TEXT_MAX_TOKENS) {
        struct cp_info ci;
        size_t n = peek(s, len, i, &ci);
        if (ci.cls == C_LETTER || ci.cls == C_DIGIT) {
            struct tok_build tb;
            size_t end = scan_token(s, len, i, &tb);
            finish_token(d, text + i, end - i, &tb, start);
            start = false;
            i = end;
            continue;
        }
        if (ci.cls == C_CJK) {
            push(d, text + i, n, (const char *)ci.fold, ci.nfold, TEXT_CJK,
                 start ? TEXT_F_START | TEXT_F_ALPHA : TEXT_F_ALPHA);
            start = false;
        } else if (ci.cls == C_BREAK || ci.cls == C_DOT) {
            start = true;
        }
        i += n;
    }
    if (i < len)
        d->truncated = true;
}

/* Politeness phrases, as normalised tokens ("don't" is "do not" by now). */
static const char *const fillers[] = {
    "thank you very much",
    "thank you in advance",
    "thanks in advance",
    "thanks a lot",
    "thank you",
    "many thanks",
    "can you please tell me",
    "could you please tell me",
    "can you tell me",
    "could you tell me",
    "can someone tell me",
    "please tell me",
    "i would like to know",
    "i want to know",
    "i was wondering",
    "i am wondering",
    "just wondering",
    "quick question",
    "any ideas",
    "any help",
    "please help",
    "help please",
    "asking for a friend",
    "hi there",
    "hey there",
    "please",
    "pls",
    "plz",
    "kindly",
    "thanks",
    "thx",
    "hi",
    "hey",
    "hello",
    "cheers",
};

/* Whether the tokens from i spell phrase p; *n receives its token count. */
static bool phrase_at(const struct text_doc *d, size_t i, const char *p, size_t *n)
{
    if (text_str(d, i)[0] != p[0])
        return false; /* the common case, cheaply */
    size_t k = 0;
    while (*p) {
        size_t len = strcspn(p, " ");
        if (i + k >= d->n || d->tok[i + k].len != len || memcmp(text_str(d, i + k), p, len) != 0)
            return false;
        k++;
        p += len;
        p += *p == ' ';
    }
    *n = k;
    return true;
}

void text_mark_fillers(struct text_doc *d)
{
    for (size_t i = 0; i < d->n;) {
        size_t n = 0;
        for (size_t f = 0; f < sizeof fillers / sizeof fillers[0] && n == 0; f++)
            if (!phrase_at(d, i, fillers[f], &n))
                n = 0;
        for (size_t k = 0; k < n; k++)
            d->tok[i + k].flags |= TEXT_F_FILLER;
        i += n > 0 ? n : 1;
    }
}

bool text_is(const struct text_doc *d, size_t i, const char *w)
{
    return strcmp(text_str(d, i), w) == 0;
}

static bool ends_with(const char *w, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && memcmp(w + n - k, suf, k) == 0;
}

/* Words ending in s that are not plurals (or whose singular would mislead). */
static const char *const not_plural[] = {
    "always",    "analytics", "afterwards", "besides",    "bias",    "chaos",   "does",
    "economics", "ethics",    "gas",        "has",        "hers",    "lens",    "mathematics",
    "means",     "news",      "nowadays",   "ours",       "perhaps", "physics", "politics",
    "series",    "sometimes", "species",    "statistics", "theirs",  "thus",    "towards",
    "was",       "whereas",   "yes",        "yours",
};

static bool is_not_plural(const char *w, size_t n)
{
    for (size_t i = 0; i < sizeof not_plural / sizeof not_plural[0]; i++)
        if (strlen(not_plural[i]) == n && memcmp(not_plural[i], w, n) == 0)
            return true;
    return false;
}

size_t text_singular(const char *w, size_t n, char *out)
{
    memcpy(out, w, n);
    out[n] = '\0';
    if (n <= 3 || w[n - 1] != 's' || ends_with(w, n, "ss") || ends_with(w, n, "us") ||
        ends_with(w, n, "is") || is_not_plural(w, n))
        return n;
    if (n > 4 && ends_with(w, n, "ies")) {
        out[n - 3] = 'y';
        out[n - 2] = '\0';
        return n - 2;
    }
    if (ends_with(w, n, "sses") || ends_with(w, n, "xes") || ends_with(w, n, "ches") ||
        ends_with(w, n, "shes") || ends_with(w, n, "zzes")) {
        out[n - 2] = '\0';
        return n - 2;
    }
    out[n - 1] = '\0';
    return n - 1;
}

/*
 * The last tokens of s[0..len) after d's, which keeps at most half the
 * token budget: a long text's question is as likely at its end.
 */
static void append_tail(struct text_doc *d, const char *s, size_t len)
{
    if (d->n > TEXT_MAX_TOKENS / 2) {
        d->n = TEXT_MAX_TOKENS / 2;
        d->buflen = d->tok[d->n].off;
        d->truncated = true;
    }
    struct text_doc *t = pc_malloc(sizeof *t);
    text_doc_reset(t);
    text_tokenize(t, s, len);
    size_t room = TEXT_MAX_TOKENS - d->n, from = t->n > room ? t->n - room : 0;
    d->truncated |= t->truncated || from > 0;
    for (size_t i = from; i < t->n; i++) {
        const struct text_tok *k = &t->tok[i];
        push(d, k->raw, k->raw_len, text_str(t, i), k->len, (enum text_kind)k->kind, k->flags);
    }
    free(t);
}

void text_tokenize_capped(struct text_doc *d, const char *s, size_t len, size_t max)
{
    size_t head, tail;
    text_doc_reset(d);
    text_cap(s, len, max, &head, &tail);
    text_tokenize(d, s, head);
    if (tail > 0)
        append_tail(d, s + len - tail, tail);
    text_mark_fillers(d);
}

void text_cap(const char *s, size_t len, size_t max, size_t *head, size_t *tail)
{
    if (len <= max) {
        *head = len;
        *tail = 0;
        return;
    }
    size_t h = max / 2;
    while (h > 0 && ((unsigned char)s[h] & 0xc0) == 0x80)
        h--;
    size_t start = len - (max - max / 2);
    while (start < len && ((unsigned char)s[start] & 0xc0) == 0x80)
        start++;
    *head = h;
    *tail = len - start;
}
