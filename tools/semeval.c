/*
 * semeval.c - offline quality figures of the local embedders and the
 * semantic guards, for tuning and for the notes (`make semeval`; not part of
 * `make test`). Reads the dev sets of ../shared/data/semantic/ (PC_DATA_DIR
 * or --data; absent data is a clean skip, exit 0):
 *
 *   hard_pairs_dev.csv    sentence1,sentence2,label (entity/number/polarity/time swaps)
 *   quora_pairs_dev.csv   question1,question2,is_duplicate
 *   paraphrases_dev.json  [{"origin","similar"}], all positive (GPTCache)
 *   apt_train_dev.tsv     text_a<TAB>text_b<TAB>labels (adversarial rewrites; 0 = meaning flipped)
 *   sick_pairs_dev.csv    sentence1,sentence2,label,kind (paraphrase, contradiction, neutral,
 *                         one-way; label 1 = paraphrase)
 *
 * and builds two more sets from Quora questions: near-duplicate variants
 * (typo, case, punctuation, white space, word order, filler words,
 * singular/plural; each should hit) and counterfeits (one number, name,
 * date or negation changed; none should hit).
 *
 * For each embedder it prints ROC-AUC, the threshold at which at most 1%
 * (and 2%) of the hard negatives hit with every guard on, precision, recall
 * and hit rates there and at the embedder's default threshold (with APT's
 * flipped rewrites served, recall and precision, and SICK's contradictions,
 * paraphrases, neutral and one-way pairs served on a second line), the
 * threshold rule of pc_embed.h (1% hard false hits and Quora precision >=
 * 0.82), a precision/recall table over thresholds, and the same figures with
 * each guard off in turn. Nothing is written to disk but what --pairs-out
 * and --dump name.
 *
 *   usage: semeval [--vectors PATH] [--data DIR] [--embedder NAME|both]
 *                  (--embedder both: every local embedder of src/embed/embedders.h)
 *                  [--set KNOB=VALUE]... [--guards LIST] [--threshold T] [--show N]
 *                  [--why GUARD] [--antonyms FILE] [--swap] [--synonyms FILE]
 *                  [--dump FILE]
 *          semeval --pairs-out FILE          every pair as a JSON line ["a","b"]
 *          semeval --sims FILE [--threshold T] ...   another embedder's similarities
 *          semeval --speed [--vectors PATH]
 *
 * --set changes an embedder knob (hash_dim, char_min, char_max, w_word,
 * w_bigram, w_char, w_glove, sif_a, typo_fix, remove_common); --guards
 * chooses the guards (as semantic-guards); --threshold replaces the
 * embedder's default threshold; --show N prints N false hits
 * (hard, Quora and APT negatives, SICK's contradictions), missed variants
 * and counterfeits that hit at the default threshold; --why GUARD the
 * pairs above it that GUARD alone rejects (positives lost, negatives
 * caught). The table "alone" gives, per guard and set, how many pairs above
 * the default threshold that guard alone rejects: negatives caught /
 * positives lost (bench/semantic-quality --guards-off measures the same
 * through the proxy). An embedder semeval cannot run (the sentence encoder
 * behind embedder openai) is measured from its similarities: --pairs-out
 * writes the pairs, tools/encsims.js scores them with the encoder, --sims
 * reads the scores (default threshold 0.92, openai's auto). Experiments on WordNet's lists as
 * text (tools/wnanto.c prints them): --antonyms FILE adds
 * word pairs ("a b" per line) as an extra guard; --swap a one-word swap guard
 * of its own, which with --synonyms FILE (one synset per line) lets swaps of
 * synonyms through. --dump FILE writes one JSON line per pair, [set, kind,
 * label, similarity, guards' reject mask], in the same order every run, so
 * that two runs (builtin, and --sims) join line by line to try ways of
 * combining two embedders. --speed times embedders and guards on typical and
 * worst-case texts, and each guard alone on 8 KiB texts.
 */
#include "pc_embed.h"
#include "pc_guard.h"
#include "pc_text.h"
#include "pc_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- pairs ------------------------------------------------------------------ */

enum set_id { S_HARD, S_QUORA, S_PARA, S_VAR, S_FAKE, S_APT, S_SICK, S__COUNT };
static const char *const set_names[] = {"hard",         "quora", "gptcache", "variants",
                                        "counterfeits", "apt",   "sick"};

enum { KIND_NONE = 0 };
static const char *const var_kinds[] = {
    "-",      "typo", "case", "punct",    "space",      "order",         "filler",  "plural",
    "number", "name", "date", "negation", "paraphrase", "contradiction", "neutral", "one-way"};
enum var_kind {
    V_TYPO = 1,
    V_CASE,
    V_PUNCT,
    V_SPACE,
    V_ORDER,
    V_FILLER,
    V_PLURAL,
    F_NUMBER,
    F_NAME,
    F_DATE,
    F_NEGATION,
    V__COUNT,
    /* SICK's kinds of pair (its fourth column) */
    K_PARAPHRASE = V__COUNT,
    K_CONTRADICTION,
    K_NEUTRAL,
    K_ONEWAY,
    K__COUNT
};

struct pair {
    char *a, *b;
    int label;
    int set;
    int kind;
    float sim;
    unsigned reject; /* bit per guard that rejects the pair */
    unsigned extra;  /* the --antonyms guard rejects it */
};

static struct pair *pairs;
static size_t npairs, cap_pairs;

static void add_pair(const char *a, const char *b, int label, int set, int kind)
{
    if (npairs == cap_pairs) {
        cap_pairs = cap_pairs ? 2 * cap_pairs : 4096;
        pairs = pc_realloc(pairs, cap_pairs * sizeof *pairs);
    }
    pairs[npairs++] = (struct pair){pc_strdup(a), pc_strdup(b), label, set, kind, 0, 0, 0};
}

/* ---- loading ------------------------------------------------------------------ */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    struct pc_buf b = PC_BUF_INIT;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        pc_buf_append(&b, tmp, n);
    fclose(f);
    return pc_buf_cstr(&b);
}

/* One RFC 4180 field at *p into out (quotes, doubled quotes, newlines in quotes). */
static int csv_field(const char **p, struct pc_buf *out)
{
    const char *s = *p;
    pc_buf_reset(out);
    if (*s == '"') {
        for (s++;; s++) {
            if (*s == '\0')
                return -1;
            if (*s == '"' && s[1] == '"')
                pc_buf_append_char(out, *s++);
            else if (*s == '"')
                break;
            else
                pc_buf_append_char(out, *s);
        }
        s++;
    } else {
        while (*s && *s != ',' && *s != '\n' && *s != '\r')
            pc_buf_append_char(out, *s++);
    }
    *p = s;
    pc_buf_cstr(out);
    return 0;
}

/* SICK's kind column as a K_* value (KIND_NONE when absent or unknown). */
static int sick_kind(const char *k)
{
    for (int i = K_PARAPHRASE; i < K__COUNT; i++)
        if (strcmp(k, var_kinds[i]) == 0)
            return i;
    return KIND_NONE;
}

/* sentence1,sentence2,label[,kind] after a header line. */
static size_t load_csv(const char *path, int set)
{
    char *text = slurp(path);
    if (text == NULL)
        return 0;
    const char *p = strchr(text, '\n');
    size_t n = 0;
    struct pc_buf f[4] = {PC_BUF_INIT, PC_BUF_INIT, PC_BUF_INIT, PC_BUF_INIT};
    while (p != NULL && *++p) {
        int k = 0;
        pc_buf_reset(&f[3]);
        pc_buf_cstr(&f[3]);
        for (; k < 4; k++) {
            if (csv_field(&p, &f[k]) < 0)
                break;
            if (*p != ',')
                break;
            p++;
        }
        if (k >= 2 && f[0].len > 0 && f[1].len > 0) {
            add_pair(f[0].data, f[1].data, atoi(f[2].data), set, sick_kind(f[3].data));
            n++;
        }
        p = strchr(p, '\n');
    }
    for (int k = 0; k < 4; k++)
        pc_buf_free(&f[k]);
    free(text);
    return n;
}

/* APT: text_a<TAB>text_b<TAB>label after a header line, no quoting. */
static size_t load_tsv(const char *path, int set)
{
    char *text = slurp(path);
    if (text == NULL)
        return 0;
    size_t n = 0;
    char *save = NULL;
    bool header = true;
    for (char *line = strtok_r(text, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (header || t2 == NULL) {
            header = false;
            continue;
        }
        *t1 = *t2 = '\0';
        if (*line && t1[1]) {
            add_pair(line, t1 + 1, atoi(t2 + 1), set, KIND_NONE);
            n++;
        }
    }
    free(text);
    return n;
}

static size_t load_paraphrases(const char *path)
{
    char *text = slurp(path);
    if (text == NULL)
        return 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    size_t n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(it, "origin");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "similar");
        if (cJSON_IsString(o) && cJSON_IsString(s)) {
            add_pair(o->valuestring, s->valuestring, 1, S_PARA, KIND_NONE);
            n++;
        }
    }
    cJSON_Delete(root);
    return n;
}

/* ---- variants and counterfeits ---------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return n ? (unsigned)(rng_state % n) : 0;
}

#define MAXW 64

struct words {
    char *w[MAXW];
    size_t n;
};

static void split(const char *s, struct words *ws)
{
    ws->n = 0;
    while (*s && ws->n < MAXW) {
        while (*s == ' ')
            s++;
        size_t k = strcspn(s, " ");
        if (k > 0)
            ws->w[ws->n++] = pc_strndup(s, k);
        s += k;
    }
}

static char *join(const struct words *ws)
{
    struct pc_buf b = PC_BUF_INIT;
    for (size_t i = 0; i < ws->n; i++) {
        if (i > 0)
            pc_buf_append_char(&b, ' ');
        pc_buf_append_str(&b, ws->w[i]);
    }
    return pc_buf_cstr(&b);
}

static void words_free(struct words *ws)
{
    for (size_t i = 0; i < ws->n; i++)
        free(ws->w[i]);
    ws->n = 0;
}

static bool all_alpha(const char *w, size_t min)
{
    size_t n = 0;
    for (; *w; w++, n++)
        if (!((*w >= 'a' && *w <= 'z') || (*w >= 'A' && *w <= 'Z')))
            return false;
    return n >= min;
}

static const char *const keyboard[] = {"qwertyuiop", "asdfghjkl", "zxcvbnm"};

static char neighbour_key(char c)
{
    for (int r = 0; r < 3; r++) {
        const char *p = strchr(keyboard[r], c | 0x20);
        if (p != NULL) {
            size_t i = (size_t)(p - keyboard[r]);
            size_t len = strlen(keyboard[r]);
            return keyboard[r][i + 1 < len ? i + 1 : i - 1];
        }
    }
    return c;
}

static char *v_typo(const char *q)
{
    struct words ws;
    split(q, &ws);
    size_t cand[MAXW], nc = 0;
    for (size_t i = 0; i < ws.n; i++)
        if (all_alpha(ws.w[i], 5))
            cand[nc++] = i;
    char *out = NULL;
    if (nc > 0) {
        char *w = ws.w[cand[rnd((unsigned)nc)]];
        size_t n = strlen(w), p = 1 + rnd((unsigned)(n - 2));
        switch (rnd(4)) {
        case 0: { /* swap two letters */
            char t = w[p];
            w[p] = w[p + 1];
            w[p + 1] = t;
            break;
        }
        case 1: /* drop one */
            memmove(w + p, w + p + 1, n - p);
            break;
        case 2: { /* double one */
            char *d = pc_malloc(n + 2);
            memcpy(d, w, p + 1);
            memcpy(d + p + 1, w + p, n - p + 1);
            for (size_t i = 0; i < ws.n; i++)
                if (ws.w[i] == w)
                    ws.w[i] = d;
            free(w);
            break;
        }
        default: /* hit the key next to it */
            w[p] = neighbour_key(w[p]);
            break;
        }
        out = join(&ws);
    }
    words_free(&ws);
    return out;
}

static char *v_case(const char *q)
{
    char *s = pc_strdup(q);
    bool title = rnd(2);
    for (size_t i = 0; s[i]; i++) {
        bool first = i == 0 || s[i - 1] == ' ';
        if (s[i] >= 'A' && s[i] <= 'Z' && !(title && first))
            s[i] = (char)(s[i] + 32);
        else if (title && first && s[i] >= 'a' && s[i] <= 'z')
            s[i] = (char)(s[i] - 32);
    }
    return s;
}

static char *v_punct(const char *q)
{
    struct pc_buf b = PC_BUF_INIT;
    bool strip = rnd(2);
    for (const char *p = q; *p; p++)
        if (!strip || strchr("?!.,;:\"", *p) == NULL)
            pc_buf_append_char(&b, *p);
    if (!strip)
        pc_buf_append_str(&b, rnd(2) ? "??" : "!");
    return pc_buf_cstr(&b);
}

static char *v_space(const char *q)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append_str(&b, rnd(2) ? "  " : "\n");
    for (const char *p = q; *p; p++)
        pc_buf_append_str(&b, *p == ' ' ? (rnd(2) ? "   " : " \t") : (char[]){*p, 0});
    pc_buf_append_str(&b, " \n");
    return pc_buf_cstr(&b);
}

/* Move a trailing prepositional phrase ("... in 2020?") to the front. */
static char *v_order(const char *q)
{
    static const char *const preps[] = {"in", "for", "on", "at", "with", "during"};
    struct words ws;
    split(q, &ws);
    char *out = NULL;
    for (size_t p = ws.n >= 4 ? ws.n - 2 : 0; p >= 2 && p + 5 >= ws.n && out == NULL; p--) {
        for (size_t k = 0; k < PC_ARRAY_LEN(preps) && out == NULL; k++) {
            if (strcmp(ws.w[p], preps[k]) != 0)
                continue;
            struct pc_buf b = PC_BUF_INIT;
            for (size_t i = p; i < ws.n; i++) {
                char *w = ws.w[i];
                size_t n = strlen(w);
                if (i == p)
                    pc_buf_append_char(&b, (char)(w[0] - 32)), pc_buf_append(&b, w + 1, n - 1);
                else
                    pc_buf_printf(&b, " %.*s", (int)(n - (i + 1 == ws.n && w[n - 1] == '?')), w);
            }
            pc_buf_append_str(&b, ", ");
            for (size_t i = 0; i < p; i++) {
                const char *w = ws.w[i];
                if (i == 0 && w[0] >= 'A' && w[0] <= 'Z' && !(w[1] >= 'A' && w[1] <= 'Z'))
                    pc_buf_printf(&b, "%c%s", w[0] + 32, w + 1);
                else
                    pc_buf_printf(&b, "%s%s", i ? " " : "", w);
            }
            pc_buf_append_char(&b, '?');
            out = pc_buf_cstr(&b);
        }
    }
    words_free(&ws);
    return out;
}

static char *v_filler(const char *q)
{
    static const char *const pre[] = {"Please tell me: ", "Hey, ",
                                      "Quick question: ", "I was wondering, ", "Hi there! "};
    static const char *const post[] = {" Thanks!", " Please help.", " Thank you in advance.",
                                       " Any ideas?"};
    struct pc_buf b = PC_BUF_INIT;
    if (rnd(2))
        pc_buf_printf(&b, "%s%s", pre[rnd(PC_ARRAY_LEN(pre))], q);
    else
        pc_buf_printf(&b, "%s%s", q, post[rnd(PC_ARRAY_LEN(post))]);
    return pc_buf_cstr(&b);
}

static char *v_plural(const char *q)
{
    static const char *const skip[] = {
        "what", "which", "does", "this",  "that",   "there", "their", "with",  "from", "have",
        "when", "where", "will", "would", "should", "could", "your",  "about", "some", "many"};
    struct words ws;
    split(q, &ws);
    size_t cand[MAXW], nc = 0;
    for (size_t i = 1; i < ws.n; i++) {
        bool sk = false;
        for (size_t k = 0; k < PC_ARRAY_LEN(skip); k++)
            sk |= strcmp(ws.w[i], skip[k]) == 0;
        if (!sk && all_alpha(ws.w[i], 4) && ws.w[i][0] >= 'a')
            cand[nc++] = i;
    }
    char *out = NULL;
    if (nc > 0) {
        size_t i = cand[rnd((unsigned)nc)];
        char *w = ws.w[i];
        size_t n = strlen(w);
        if (w[n - 1] == 's' && w[n - 2] != 's') {
            w[n - 1] = '\0';
        } else {
            ws.w[i] = pc_malloc(n + 2);
            snprintf(ws.w[i], n + 2, "%ss", w);
            free(w);
        }
        out = join(&ws);
    }
    words_free(&ws);
    return out;
}

static char *f_number(const char *q)
{
    const char *d = strpbrk(q, "0123456789");
    if (d == NULL)
        return NULL;
    size_t k = strspn(d, "0123456789");
    long v = strtol(d, NULL, 10);
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_append(&b, q, (size_t)(d - q));
    pc_buf_printf(&b, "%ld", v % 10 == 9 ? v - 1 - rnd(3) : v + 1 + rnd(3));
    pc_buf_append_str(&b, d + k);
    return pc_buf_cstr(&b);
}

static char *name_pool[4096];
static size_t nname_pool;

static bool is_name(const struct words *ws, size_t i)
{
    const char *w = ws->w[i];
    static const char *const qw[] = {"What", "Why", "How", "Which", "Who", "Where",  "When",
                                     "Are",  "Is",  "Do",  "Does",  "Can", "Should", "Will"};
    for (size_t k = 0; k < PC_ARRAY_LEN(qw); k++)
        if (strcmp(w, qw[k]) == 0)
            return false;
    return i > 0 && all_alpha(w, 3) && w[0] >= 'A' && w[0] <= 'Z' && w[1] >= 'a' &&
           strpbrk(ws->w[i - 1], ".?:!") == NULL;
}

static void collect_names(const char *q)
{
    struct words ws;
    split(q, &ws);
    for (size_t i = 0; i < ws.n && nname_pool < PC_ARRAY_LEN(name_pool); i++)
        if (is_name(&ws, i) && rnd(4) == 0)
            name_pool[nname_pool++] = pc_strdup(ws.w[i]);
    words_free(&ws);
}

static char *f_name(const char *q)
{
    struct words ws;
    split(q, &ws);
    char *out = NULL;
    for (size_t i = 0; i < ws.n && out == NULL && nname_pool > 0; i++) {
        if (!is_name(&ws, i))
            continue;
        const char *r = name_pool[rnd((unsigned)nname_pool)];
        if (strcasecmp(r, ws.w[i]) == 0)
            continue;
        free(ws.w[i]);
        ws.w[i] = pc_strdup(r);
        out = join(&ws);
    }
    words_free(&ws);
    return out;
}

static char *f_date(const char *q)
{
    static const char *const m[] = {"January",   "February", "March",     "April",     "June",
                                    "July",      "August",   "September", "October",   "November",
                                    "December",  "Monday",   "Tuesday",   "Wednesday", "Thursday",
                                    "Friday",    "Saturday", "Sunday",    "today",     "tomorrow",
                                    "yesterday", "tonight"};
    struct words ws;
    split(q, &ws);
    char *out = NULL;
    for (size_t i = 0; i < ws.n && out == NULL; i++) {
        char *w = ws.w[i];
        size_t n = strcspn(w, "?,.!");
        if (n == 4 && (strncmp(w, "19", 2) == 0 || strncmp(w, "20", 2) == 0) &&
            strspn(w, "0123456789") == 4) {
            char y[24];
            snprintf(y, sizeof y, "%04d", (int)(strtol(w, NULL, 10) % 10000 + 1 + rnd(3)) % 10000);
            memcpy(w, y, 4);
            out = join(&ws);
            continue;
        }
        for (size_t k = 0; k < PC_ARRAY_LEN(m) && out == NULL; k++) {
            if (strlen(m[k]) != n || strncasecmp(w, m[k], n) != 0)
                continue;
            size_t base = k < 11 ? 0 : k < 18 ? 11 : 18;
            size_t span = k < 11 ? 11 : k < 18 ? 7 : 4;
            const char *r = m[base + (k - base + 1 + rnd((unsigned)span - 1)) % span];
            char *nw = pc_malloc(strlen(r) + strlen(w + n) + 1);
            sprintf(nw, "%s%s", r, w + n);
            free(ws.w[i]);
            ws.w[i] = nw;
            out = join(&ws);
        }
    }
    words_free(&ws);
    return out;
}

static char *f_negation(const char *q)
{
    static const char *const aux[] = {"is",    "are",  "was",  "were", "can", "could", "should",
                                      "would", "will", "does", "do",   "did", "has",   "have"};
    struct words ws;
    split(q, &ws);
    char *out = NULL;
    for (size_t i = 0; i < ws.n && out == NULL; i++) {
        char *w = ws.w[i];
        size_t n = strlen(w);
        if (strcmp(w, "not") == 0 || strcmp(w, "never") == 0) {
            ws.w[i][0] = '\0';
            out = join(&ws);
        } else if (n > 3 && strcmp(w + n - 3, "n't") == 0) {
            w[n - 3] = '\0';
            if (strcmp(w, "ca") == 0 || strcmp(w, "wo") == 0)
                strcpy(w, w[0] == 'c' ? "can" : "will");
            out = join(&ws);
        }
    }
    for (size_t i = 1; i < ws.n && out == NULL; i++) {
        for (size_t k = 0; k < PC_ARRAY_LEN(aux) && out == NULL; k++) {
            if (strcasecmp(ws.w[i], aux[k]) != 0)
                continue;
            char *nw = pc_malloc(strlen(ws.w[i]) + 5);
            sprintf(nw, "%s not", ws.w[i]);
            free(ws.w[i]);
            ws.w[i] = nw;
            out = join(&ws);
        }
    }
    words_free(&ws);
    return out;
}

typedef char *variant_fn(const char *q);

static variant_fn *const makers[V__COUNT] = {
    [V_TYPO] = v_typo,   [V_CASE] = v_case,     [V_PUNCT] = v_punct,       [V_SPACE] = v_space,
    [V_ORDER] = v_order, [V_FILLER] = v_filler, [V_PLURAL] = v_plural,     [F_NUMBER] = f_number,
    [F_NAME] = f_name,   [F_DATE] = f_date,     [F_NEGATION] = f_negation,
};

#define VARIANT_SOURCES 3000 /* Quora questions the variants are made from */

static bool plain_question(const char *q)
{
    size_t words = 1;
    for (const char *p = q; *p; p++) {
        if ((unsigned char)*p >= 0x80 || *p == '\n')
            return false;
        words += *p == ' ';
    }
    return words >= 4 && words <= 30;
}

static void make_variants(size_t quora_from, size_t quora_to)
{
    size_t used = 0;
    for (size_t i = quora_from; i < quora_to; i++)
        collect_names(pairs[i].a);
    size_t per_kind[V__COUNT] = {0};
    for (size_t i = quora_from; i < quora_to && used < VARIANT_SOURCES; i++) {
        const char *q = pairs[i].a;
        if (!plain_question(q))
            continue;
        used++;
        for (int k = V_TYPO; k < V__COUNT; k++) {
            char *v = makers[k](q);
            if (v != NULL && strcmp(v, q) != 0 && per_kind[k] < 1000) {
                add_pair(q, v, k < F_NUMBER, k < F_NUMBER ? S_VAR : S_FAKE, k);
                per_kind[k]++;
            }
            free(v);
        }
    }
}

/* ---- the extra antonym guard (--antonyms) ---------------------------------------------- */

struct anto {
    char a[48], b[48];
};
static struct anto *antos;
static size_t nantos;

static int anto_cmp(const void *x, const void *y)
{
    return strcmp(((const struct anto *)x)->a, ((const struct anto *)y)->a);
}

static void load_antonyms(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char line[256];
    size_t cap = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        struct anto t;
        if (sscanf(line, "%47s %47s", t.a, t.b) != 2)
            continue;
        if (nantos + 2 > cap) {
            cap = cap ? 2 * cap : 4096;
            antos = pc_realloc(antos, cap * sizeof *antos);
        }
        antos[nantos++] = t;
        struct anto r;
        memcpy(r.a, t.b, sizeof r.a);
        memcpy(r.b, t.a, sizeof r.b);
        antos[nantos++] = r;
    }
    fclose(f);
    qsort(antos, nantos, sizeof *antos, anto_cmp);
    fprintf(stderr, "semeval: %zu antonym pairs from %s\n", nantos / 2, path);
}

static bool doc_has(const struct text_doc *d, const char *w)
{
    for (size_t i = 0; i < d->n; i++)
        if (text_is(d, i, w))
            return true;
    return false;
}

/* Text a uses x, b uses y (an antonym of x), and neither uses the other's word. */
static bool anto_reject(const char *a, const char *b)
{
    static struct text_doc da, db;
    text_doc_reset(&da);
    text_doc_reset(&db);
    text_tokenize(&da, a, strlen(a));
    text_tokenize(&db, b, strlen(b));
    for (size_t i = 0; i < da.n; i++) {
        struct anto key;
        snprintf(key.a, sizeof key.a, "%s", text_str(&da, i));
        struct anto *hit = bsearch(&key, antos, nantos, sizeof *antos, anto_cmp);
        if (hit == NULL)
            continue;
        while (hit > antos && strcmp(hit[-1].a, key.a) == 0)
            hit--;
        for (; hit < antos + nantos && strcmp(hit->a, key.a) == 0; hit++)
            if (doc_has(&db, hit->b) && !doc_has(&db, hit->a) && !doc_has(&da, hit->b))
                return true;
    }
    return false;
}

/* ---- the swap experiment (--swap, --synonyms FILE) -------------------------------------- */

/*
 * A swap: each text has one or two content words the other lacks (a word
 * replaced). --swap rejects every swap; with --synonyms (WordNet synsets,
 * one per line, from `wnanto -s`) a swap whose words are synonyms passes.
 */
struct syn {
    char w[48];
    unsigned id;
};
static struct syn *syns;
static size_t nsyns;
static bool swap_on;

static int syn_cmp(const void *x, const void *y)
{
    return strcmp(((const struct syn *)x)->w, ((const struct syn *)y)->w);
}

static void load_synonyms(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char line[4096];
    size_t cap = 0;
    unsigned id = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        id++;
        for (char *save = NULL, *w = strtok_r(line, " \n", &save); w;
             w = strtok_r(NULL, " \n", &save)) {
            if (nsyns == cap) {
                cap = cap ? 2 * cap : 65536;
                syns = pc_realloc(syns, cap * sizeof *syns);
            }
            snprintf(syns[nsyns].w, sizeof syns[nsyns].w, "%s", w);
            syns[nsyns++].id = id;
        }
    }
    fclose(f);
    qsort(syns, nsyns, sizeof *syns, syn_cmp);
    swap_on = true;
}

static bool synonyms(const char *a, const char *b)
{
    struct syn ka, kb;
    snprintf(ka.w, sizeof ka.w, "%s", a);
    snprintf(kb.w, sizeof kb.w, "%s", b);
    struct syn *x = bsearch(&ka, syns, nsyns, sizeof *syns, syn_cmp);
    struct syn *y = bsearch(&kb, syns, nsyns, sizeof *syns, syn_cmp);
    if (x == NULL || y == NULL)
        return false;
    while (x > syns && strcmp(x[-1].w, a) == 0)
        x--;
    while (y > syns && strcmp(y[-1].w, b) == 0)
        y--;
    for (struct syn *p = x; p < syns + nsyns && strcmp(p->w, a) == 0; p++)
        for (struct syn *q = y; q < syns + nsyns && strcmp(q->w, b) == 0; q++)
            if (p->id == q->id)
                return true;
    return false;
}

static const char *const stop[] = {
    "a",     "an",    "the",    "of",    "to",    "in",   "on",    "at",    "for",  "by",
    "with",  "from",  "as",     "into",  "about", "and",  "or",    "but",   "if",   "so",
    "than",  "that",  "this",   "these", "those", "it",   "its",   "is",    "are",  "was",
    "were",  "be",    "been",   "being", "am",    "do",   "does",  "did",   "have", "has",
    "had",   "i",     "me",     "my",    "we",    "us",   "our",   "you",   "your", "he",
    "him",   "his",   "she",    "her",   "they",  "them", "their", "there", "here", "can",
    "could", "would", "should", "will",  "shall", "may",  "might", "must",  "some", "any",
    "all",   "what",  "which",  "how",   "who",   "when", "where", "why",   "not",  "no",
    "get",   "best",  "good",   "way",   "ways",  "one",  "much",  "many",  "more", "most"};

static size_t content_of(const char *s, char out[][TEXT_TOK_MAX + 1], size_t max)
{
    static struct text_doc d;
    text_tokenize_capped(&d, s, strlen(s), EMBED_MAX_TEXT);
    size_t n = 0;
    for (size_t i = 0; i < d.n && n < max; i++) {
        const struct text_tok *t = &d.tok[i];
        if (t->kind != TEXT_WORD || (t->flags & (TEXT_F_FILLER | TEXT_F_SYNTH | TEXT_F_DIGIT)))
            continue;
        bool sw = false;
        for (size_t k = 0; k < PC_ARRAY_LEN(stop) && !sw; k++)
            sw = strcmp(stop[k], text_str(&d, i)) == 0;
        if (!sw)
            text_singular(text_str(&d, i), t->len, out[n++]);
    }
    return n;
}

static bool in_list(const char *w, char l[][TEXT_TOK_MAX + 1], size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(w, l[i]) == 0)
            return true;
    return false;
}

static bool swap_reject(const char *a, const char *b)
{
    static char ca[256][TEXT_TOK_MAX + 1], cb[256][TEXT_TOK_MAX + 1];
    size_t na = content_of(a, ca, 256), nb = content_of(b, cb, 256);
    const char *ua[3], *ub[3];
    size_t nua = 0, nub = 0;
    for (size_t i = 0; i < na; i++)
        if (!in_list(ca[i], cb, nb) && nua < 3)
            ua[nua++] = ca[i];
        else if (!in_list(ca[i], cb, nb))
            return false;
    for (size_t i = 0; i < nb; i++)
        if (!in_list(cb[i], ca, na) && nub < 3)
            ub[nub++] = cb[i];
        else if (!in_list(cb[i], ca, na))
            return false;
    if (nua == 0 || nub == 0 || nua > 1 || nub > 1)
        return false;
    for (size_t i = 0; i < nua; i++) {
        bool ok = false;
        for (size_t j = 0; j < nub && !ok && nsyns > 0; j++)
            ok = synonyms(ua[i], ub[j]);
        if (!ok)
            return true;
    }
    return false;
}

/* ---- similarities from outside (--pairs-out, --sims) ---------------------------------- */

/*
 * An embedder semeval cannot run itself (the sentence encoder behind
 * embedder openai) is measured from a file: --pairs-out FILE writes every
 * pair as a JSON line ["a","b"], tools/encsims.js answers each line with
 * ["a","b",cosine], and --sims FILE reads those back. A pair missing from
 * the file scores 0 and is counted.
 */
struct ext_sim {
    uint64_t key;
    float sim;
};
static struct ext_sim *ext_sims;
static size_t next_sims;

/* FNV-1a over a, a NUL, b: the pair's key in the file. */
static uint64_t pair_key(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *s = a;; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
        if (*s == '\0')
            break;
    }
    for (const char *s = b; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int ext_cmp(const void *x, const void *y)
{
    uint64_t a = ((const struct ext_sim *)x)->key, b = ((const struct ext_sim *)y)->key;
    return a < b ? -1 : a > b;
}

static void pairs_out(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    for (size_t i = 0; i < npairs; i++) {
        cJSON *row = cJSON_CreateArray();
        cJSON_AddItemToArray(row, cJSON_CreateString(pairs[i].a));
        cJSON_AddItemToArray(row, cJSON_CreateString(pairs[i].b));
        char *line = cJSON_PrintUnformatted(row);
        fprintf(f, "%s\n", line);
        free(line);
        cJSON_Delete(row);
    }
    fclose(f);
    printf("semeval: %zu pairs written to %s\n", npairs, path);
}

/* --dump FILE: one JSON line per pair, [set, kind, label, sim, reject mask], in pair order. */
static const char *dump_path;

static void dump_pairs(void)
{
    if (dump_path == NULL)
        return;
    FILE *f = fopen(dump_path, "w");
    if (f == NULL) {
        perror(dump_path);
        exit(1);
    }
    for (size_t i = 0; i < npairs; i++)
        fprintf(f, "[%d,%d,%d,%.5f,%u]\n", pairs[i].set, pairs[i].kind, pairs[i].label,
                (double)pairs[i].sim, pairs[i].reject);
    fclose(f);
}

static void load_sims(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    struct pc_buf line = PC_BUF_INIT;
    size_t cap = 0;
    int c;
    do {
        c = fgetc(f);
        if (c != '\n' && c != EOF) {
            pc_buf_append_char(&line, (char)c);
            continue;
        }
        cJSON *row = line.len ? cJSON_ParseWithLength(line.data, line.len) : NULL;
        const cJSON *a = cJSON_GetArrayItem(row, 0), *b = cJSON_GetArrayItem(row, 1);
        const cJSON *s = cJSON_GetArrayItem(row, 2);
        if (cJSON_IsString(a) && cJSON_IsString(b) && cJSON_IsNumber(s)) {
            if (next_sims == cap) {
                cap = cap ? 2 * cap : 65536;
                ext_sims = pc_realloc(ext_sims, cap * sizeof *ext_sims);
            }
            ext_sims[next_sims++] =
                (struct ext_sim){pair_key(a->valuestring, b->valuestring), (float)s->valuedouble};
        }
        cJSON_Delete(row);
        pc_buf_reset(&line);
    } while (c != EOF);
    pc_buf_free(&line);
    fclose(f);
    qsort(ext_sims, next_sims, sizeof *ext_sims, ext_cmp);
}

/* Every pair's similarity from the --sims file; says how many it lacks. */
static void sims_all(const char *path)
{
    size_t missing = 0;
    for (size_t i = 0; i < npairs; i++) {
        struct ext_sim key = {pair_key(pairs[i].a, pairs[i].b), 0};
        const struct ext_sim *hit = bsearch(&key, ext_sims, next_sims, sizeof key, ext_cmp);
        pairs[i].sim = hit ? hit->sim : 0.0f;
        missing += hit == NULL;
    }
    printf("  similarities from %s: %zu pairs, %zu missing (scored 0)\n", path, npairs - missing,
           missing);
}

/* ---- metrics ------------------------------------------------------------------------ */

static unsigned guards_on = GUARD_ALL;
static bool use_extra;

/* The pair's score with the guards of mask: its similarity, or -2 when a guard rejects it. */
static float score(const struct pair *p, unsigned mask)
{
    if ((p->reject & mask) || (use_extra && p->extra))
        return -2.0f;
    return p->sim;
}

struct scored {
    float s;
    int label;
};

static int scored_desc(const void *x, const void *y)
{
    float a = ((const struct scored *)x)->s, b = ((const struct scored *)y)->s;
    return a > b ? -1 : a < b;
}

static double auc(int set, unsigned mask)
{
    struct scored *v = pc_malloc(npairs * sizeof *v);
    size_t n = 0, pos = 0, neg = 0;
    for (size_t i = 0; i < npairs; i++) {
        if (pairs[i].set != set)
            continue;
        v[n++] = (struct scored){score(&pairs[i], mask), pairs[i].label};
        pos += pairs[i].label == 1;
    }
    neg = n - pos;
    qsort(v, n, sizeof *v, scored_desc);
    double area = 0, tp = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        double tpi = 0, fpi = 0;
        while (j < n && v[j].s == v[i].s) {
            tpi += v[j].label == 1;
            fpi += v[j].label != 1;
            j++;
        }
        area += fpi * (tp + tpi / 2);
        tp += tpi;
        i = j;
    }
    free(v);
    return pos && neg ? area / ((double)pos * (double)neg) : 0;
}

/* The lowest threshold at which at most rate of the hard negatives hit. */
static float threshold_for(double rate, unsigned mask)
{
    float *neg = pc_malloc(npairs * sizeof *neg);
    size_t n = 0;
    for (size_t i = 0; i < npairs; i++)
        if (pairs[i].set == S_HARD && pairs[i].label == 0)
            neg[n++] = score(&pairs[i], mask);
    struct scored *v = pc_malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (struct scored){neg[i], 0};
    qsort(v, n, sizeof *v, scored_desc);
    size_t allowed = (size_t)floor(rate * (double)n);
    float t = allowed < n && v[allowed].s > -1.5f ? nextafterf(v[allowed].s, 2.0f) : -1.0f;
    free(v);
    free(neg);
    return t;
}

struct counts {
    size_t tp, fp, pos, neg;
};

static struct counts count(int set, int kind, float t, unsigned mask)
{
    struct counts c = {0, 0, 0, 0};
    for (size_t i = 0; i < npairs; i++) {
        const struct pair *p = &pairs[i];
        if (p->set != set || (kind >= 0 && p->kind != kind))
            continue;
        bool hit = score(p, mask) >= t;
        c.pos += p->label == 1;
        c.neg += p->label != 1;
        c.tp += hit && p->label == 1;
        c.fp += hit && p->label != 1;
    }
    return c;
}

static double ratio(size_t a, size_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

/* One line of figures at threshold t with the guards of mask. */
static void figures(const char *label, float t, unsigned mask)
{
    struct counts h = count(S_HARD, -1, t, mask), q = count(S_QUORA, -1, t, mask);
    struct counts g = count(S_PARA, -1, t, mask), v = count(S_VAR, -1, t, mask);
    struct counts f = count(S_FAKE, -1, t, mask);
    printf("  %-22s t=%.4f  hard: fh %5.1f%% rec %5.1f%%  quora: P %.3f R %5.1f%%  "
           "gptcache %5.1f%%  variants %5.1f%%  counterfeits %4.1f%%\n",
           label, (double)t, 100 * ratio(h.fp, h.neg), 100 * ratio(h.tp, h.pos),
           ratio(q.tp, q.tp + q.fp), 100 * ratio(q.tp, q.pos), 100 * ratio(g.tp, g.pos),
           100 * ratio(v.tp, v.pos), 100 * ratio(f.fp, f.neg));
    struct counts a = count(S_APT, -1, t, mask), sp = count(S_SICK, K_PARAPHRASE, t, mask);
    struct counts sc = count(S_SICK, K_CONTRADICTION, t, mask);
    struct counts sn = count(S_SICK, K_NEUTRAL, t, mask), so = count(S_SICK, K_ONEWAY, t, mask);
    printf("  %-22s           apt: flips %4.1f%% R %5.1f%% P %.3f  sick: contradictions %4.1f%% "
           "paraphrases %5.1f%% neutral %4.1f%% one-way %4.1f%%\n",
           "", 100 * ratio(a.fp, a.neg), 100 * ratio(a.tp, a.pos), ratio(a.tp, a.tp + a.fp),
           100 * ratio(sc.fp, sc.neg), 100 * ratio(sp.tp, sp.pos), 100 * ratio(sn.fp, sn.neg),
           100 * ratio(so.fp, so.neg));
}

static void per_kind(float t, unsigned mask)
{
    printf("  per kind at t=%.4f:", (double)t);
    for (int k = V_TYPO; k < V__COUNT; k++) {
        int set = k < F_NUMBER ? S_VAR : S_FAKE;
        struct counts c = count(set, k, t, mask);
        size_t tot = c.pos + c.neg, hit = c.tp + c.fp;
        printf(" %s %.1f%% (%zu)", var_kinds[k], 100 * ratio(hit, tot), tot);
    }
    printf("\n");
}

static void show_failures(float t, unsigned mask, int nshow)
{
    int shown = 0;
    static const int neg_sets[] = {S_HARD, S_QUORA, S_APT, S_SICK};
    for (size_t k = 0; k < PC_ARRAY_LEN(neg_sets); k++) {
        int set = neg_sets[k];
        shown = 0;
        printf("  %s negatives that hit:\n", set_names[set]);
        for (size_t i = 0; i < npairs && shown < nshow; i++) {
            const struct pair *p = &pairs[i];
            if (p->set == set && p->label == 0 && (set != S_SICK || p->kind == K_CONTRADICTION) &&
                score(p, mask) >= t && ++shown)
                printf("    %.3f  %s  ||  %s\n", (double)p->sim, p->a, p->b);
        }
    }
    for (int set = S_VAR; set <= S_FAKE; set++) {
        shown = 0;
        printf("  %s that %s:\n", set_names[set], set == S_VAR ? "miss" : "hit");
        for (size_t i = 0; i < npairs && shown < nshow; i++) {
            const struct pair *p = &pairs[i];
            bool hit = score(p, mask) >= t;
            if (p->set == set && hit == (set == S_FAKE) && ++shown) {
                int g = 0;
                while (g < GUARD__COUNT && !(p->reject & mask & GUARD_MASK(g)))
                    g++;
                printf("    %.3f %-8s %-9s %s  ||  %s\n", (double)p->sim, var_kinds[p->kind],
                       g < GUARD__COUNT ? guard_name((enum guard_kind)g) : "-", p->a, p->b);
            }
        }
    }
}

static int why_guard = -1;

/*
 * The pairs above t that guard g rejects and no other guard of mask does:
 * positives (what it costs), then negatives (what it catches; of SICK, the
 * contradictions).
 */
static void show_rejected(float t, int g, unsigned mask, int nshow)
{
    for (int label = 1; label >= 0; label--) {
        printf("  %s above t=%.4f that only guard %s rejects:\n", label ? "positives" : "negatives",
               (double)t, guard_name((enum guard_kind)g));
        int shown = 0;
        for (size_t i = 0; i < npairs && shown < nshow; i++) {
            const struct pair *p = &pairs[i];
            if ((p->label == 1) == (label == 1) && p->sim >= t &&
                (p->set != S_SICK || label == 1 || p->kind == K_CONTRADICTION) &&
                (p->reject & (mask | GUARD_MASK(g))) == GUARD_MASK(g) && ++shown)
                printf("    %.3f %-9s %s  ||  %s\n", (double)p->sim, set_names[p->set], p->a, p->b);
        }
    }
}

/* The threshold at which Quora recall (with the guards of mask) first reaches recall. */
static float threshold_at_recall(double recall, unsigned mask)
{
    struct scored *v = pc_malloc(npairs * sizeof *v);
    size_t n = 0, pos = 0;
    for (size_t i = 0; i < npairs; i++) {
        if (pairs[i].set != S_QUORA)
            continue;
        v[n++] = (struct scored){score(&pairs[i], mask), pairs[i].label};
        pos += pairs[i].label == 1;
    }
    qsort(v, n, sizeof *v, scored_desc);
    size_t tp = 0, i = 0;
    while (i < n && (double)tp < recall * (double)pos)
        tp += v[i++].label == 1;
    float t = i > 0 ? v[i - 1].s : 1.0f;
    free(v);
    return t;
}

static float default_t;

/*
 * The threshold rule: the lowest threshold on a 0.005 grid at which at most
 * 1% of the hard negatives hit and Quora precision is at least min_p (at it
 * and at every grid point above it), so that strong guards, which clear the
 * small hard set, cannot drag the threshold down on their own.
 */
static float threshold_rule(double min_p, unsigned mask)
{
    float best = 1.0f;
    for (int k = 199; k >= 0; k--) {
        float t = (float)k * 0.005f;
        struct counts h = count(S_HARD, -1, t, mask), q = count(S_QUORA, -1, t, mask);
        if (ratio(h.fp, h.neg) > 0.01 || (q.tp + q.fp > 0 && ratio(q.tp, q.tp + q.fp) < min_p))
            break;
        best = t;
    }
    return best;
}

/*
 * Each guard's own worth at threshold t: the pairs above t that this guard
 * alone rejects (every other guard of mask lets them through), negatives
 * caught / positives lost, per set (SICK: contradictions / paraphrases).
 * The same table as bench/semantic-quality --guards-off, offline.
 */
static void guard_table(float t, unsigned mask)
{
    static const int sets[] = {S_QUORA, S_HARD, S_PARA, S_APT, S_SICK, S_VAR, S_FAKE};
    printf("  alone at t=%.4f (caught / lost):", (double)t);
    for (size_t k = 0; k < PC_ARRAY_LEN(sets); k++)
        printf(" %s", set_names[sets[k]]);
    printf("\n");
    for (int g = 0; g < GUARD__COUNT; g++) {
        if (!(mask & GUARD_MASK(g)))
            continue;
        printf("    %-10s", guard_name((enum guard_kind)g));
        for (size_t k = 0; k < PC_ARRAY_LEN(sets); k++) {
            size_t caught = 0, lost = 0;
            for (size_t i = 0; i < npairs; i++) {
                const struct pair *p = &pairs[i];
                if (p->set != sets[k] || p->sim < t || (p->reject & mask) != GUARD_MASK(g))
                    continue;
                if (p->label == 1)
                    lost++;
                else if (p->set != S_SICK || p->kind == K_CONTRADICTION)
                    caught++;
            }
            printf(" %4zu/%-4zu", caught, lost);
        }
        printf("\n");
    }
}

static void report(const char *name, int nshow)
{
    printf("\n== embedder %s\n", name);
    printf("  ROC-AUC, similarity alone: hard %.4f  quora %.4f\n", auc(S_HARD, 0), auc(S_QUORA, 0));
    printf("  ROC-AUC, guards on:        hard %.4f  quora %.4f\n", auc(S_HARD, guards_on),
           auc(S_QUORA, guards_on));
    float t1 = threshold_for(0.01, guards_on), t2 = threshold_for(0.02, guards_on);
    figures("1% hard false hits", t1, guards_on);
    figures("2% hard false hits", t2, guards_on);
    figures("quora recall 10%", threshold_at_recall(0.10, guards_on), guards_on);
    figures("default threshold", default_t, guards_on);
    figures("rule: 1%, quora P>=.82", threshold_rule(0.82, guards_on), guards_on);
    figures("rule: 1%, quora P>=.80", threshold_rule(0.80, guards_on), guards_on);
    per_kind(default_t, guards_on);
    guard_table(default_t, guards_on);
    printf("  one guard off (then none): at the default threshold, at the threshold rule's\n"
           "  threshold for the remaining guards, and at Quora recall 10%%:\n");
    for (int g = 0; g <= GUARD__COUNT; g++) {
        if (g < GUARD__COUNT && !(guards_on & GUARD_MASK(g)))
            continue;
        unsigned m = g < GUARD__COUNT ? guards_on & ~GUARD_MASK(g) : 0;
        figures(g < GUARD__COUNT ? guard_name((enum guard_kind)g) : "no guards", default_t, m);
        figures("  its own rule", threshold_rule(0.82, m), m);
        figures("  quora recall 10%", threshold_at_recall(0.10, m), m);
    }
    printf("  thresholds (guards on):\n");
    for (float t = 0.70f; t < 0.995f; t += 0.02f)
        figures("", t, guards_on);
    if (nshow > 0 && why_guard < 0)
        show_failures(default_t, guards_on, nshow);
    if (why_guard >= 0)
        show_rejected(default_t, why_guard, guards_on, nshow > 0 ? nshow : 20);
}

/* ---- running ------------------------------------------------------------------------ */

static int set_knob(struct embed_opts *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (eq == NULL)
        return -1;
    double v = atof(eq + 1);
    size_t n = (size_t)(eq - kv);
#define KNOB(name, expr)                                    \
    if (n == strlen(#name) && strncmp(kv, #name, n) == 0) { \
        expr;                                               \
        return 0;                                           \
    }
    KNOB(hash_dim, o->hash_dim = (int)v)
    KNOB(char_min, o->char_min = (int)v)
    KNOB(char_max, o->char_max = (int)v)
    KNOB(w_word, o->w_word = (float)v)
    KNOB(w_bigram, o->w_bigram = (float)v)
    KNOB(w_char, o->w_char = (float)v)
    KNOB(w_glove, o->w_glove = (float)v)
    KNOB(sif_a, o->sif_a = (float)v)
    KNOB(typo_fix, o->typo_fix = (int)v)
    KNOB(remove_common, o->remove_common = (int)v)
#undef KNOB
    return -1;
}

static void embed_all(const struct embedder *e)
{
    int dim = embed_dim(e);
    float *va = pc_malloc((size_t)dim * sizeof *va), *vb = pc_malloc((size_t)dim * sizeof *vb);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < npairs; i++) {
        int ra = embed_text(e, pairs[i].a, strlen(pairs[i].a), va);
        int rb = embed_text(e, pairs[i].b, strlen(pairs[i].b), vb);
        pairs[i].sim = ra == 0 && rb == 0 ? embed_dot(va, vb, dim) : 0.0f;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 /
                (2.0 * (double)npairs);
    printf("  %s: %d dimensions, %.1f us per text (mean over %zu texts)\n", embed_space(e), dim, us,
           2 * npairs);
    free(va);
    free(vb);
}

static void run_guards(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < npairs; i++) {
        unsigned r = 0;
        for (int g = 0; g < GUARD__COUNT; g++)
            if (guard_check(pairs[i].a, strlen(pairs[i].a), pairs[i].b, strlen(pairs[i].b),
                            GUARD_MASK(g)) == g)
                r |= GUARD_MASK(g);
        pairs[i].reject = r;
        pairs[i].extra = (nantos > 0 && (anto_reject(pairs[i].a, pairs[i].b) ||
                                         anto_reject(pairs[i].b, pairs[i].a))) ||
                         (swap_on && swap_reject(pairs[i].a, pairs[i].b));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 /
                ((double)npairs * GUARD__COUNT);
    printf("  guards: %.1f us per guard_check of one guard (mean)\n", us);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Mean microseconds per call of embed_text (e) or guard_check with the guards of mask. */
static double time_mask(const struct embedder *e, const char *a, const char *b, int rounds,
                        unsigned mask)
{
    float v[EMBED_MAX_DIM];
    double t0 = now_us();
    for (int i = 0; i < rounds; i++) {
        if (e != NULL)
            embed_text(e, a, strlen(a), v);
        else
            guard_check(a, strlen(a), b, strlen(b), mask);
    }
    return (now_us() - t0) / rounds;
}

static double time_one(const struct embedder *e, const char *a, const char *b, int rounds)
{
    return time_mask(e, a, b, rounds, GUARD_ALL);
}

/*
 * --speed: typical and worst-case costs. Worst cases: 8 KiB (the cap) of
 * ordinary words, and 8 KiB of unknown 12-letter words (every typo lookup
 * taken), and a 1 MiB text (only its head and tail are read).
 */
static void speed(const char *vectors)
{
    static char normal[8193], unknown[8193];
    static const char *const words[] = {"the", "quick", "brown", "fox",  "jumps", "over", "lazy",
                                        "dog", "and",   "runs",  "away", "from",  "home"};
    size_t n = 0;
    for (unsigned i = 0; n + 8 < sizeof normal - 1; i++)
        n += (size_t)sprintf(normal + n, "%s ", words[rnd(PC_ARRAY_LEN(words))]);
    n = 0;
    while (n + 14 < sizeof unknown - 1) {
        for (int k = 0; k < 12; k++)
            unknown[n++] = (char)('a' + rnd(26));
        unknown[n++] = ' ';
    }
    size_t mlen = 1 << 20;
    char *mega = pc_malloc(mlen + 1);
    for (size_t i = 0; i < mlen; i++)
        mega[i] = normal[i % 8000];
    mega[mlen] = '\0';
    const char *q = "What are the best coffee shops in Seattle for working remotely?";
    const char *q2 = "Which coffee shops in Seattle are best for remote work?";
    for (int k = 0; k < embed_count(); k++) {
        if (!embed_is_local(k)) /* a remote one is measured through the proxy */
            continue;
        struct embed_opts o;
        embed_opts_default(&o, k);
        o.vectors = vectors;
        char err[256];
        struct embedder *e = embed_create_opts(&o, err, sizeof err);
        if (e == NULL)
            continue;
        printf("speed %-8s question %.1f us, 8 KiB text %.1f us, 8 KiB unknown words %.1f us, "
               "1 MiB text %.1f us\n",
               embed_name(k), time_one(e, q, NULL, 2000), time_one(e, normal, NULL, 200),
               time_one(e, unknown, NULL, 50), time_one(e, mega, NULL, 50));
        embed_destroy(&e);
    }
    printf("speed guards   question pair %.1f us, 8 KiB pair %.1f us, 1 MiB pair %.1f us\n",
           time_one(NULL, q, q2, 2000), time_one(NULL, normal, unknown, 200),
           time_one(NULL, mega, normal, 50));
    /* Each guard alone (the shared tokenizing and look-ups included), 8 KiB against 8 KiB. */
    printf("speed each guard, 8 KiB pair (us):");
    for (int g = 0; g < GUARD__COUNT; g++)
        printf(" %s %.0f", guard_name((enum guard_kind)g),
               time_mask(NULL, normal, normal + 1, 50, GUARD_MASK(g)));
    printf("\n");
    free(mega);
}

static const char *data_dir(const char *given)
{
    static char buf[4096];
    const char *env = getenv("PC_DATA_DIR");
    const char *cands[] = {given, env, "../shared/data", "/work/shared/data"};
    for (size_t i = 0; i < PC_ARRAY_LEN(cands); i++) {
        if (cands[i] == NULL)
            continue;
        snprintf(buf, sizeof buf, "%s/semantic/hard_pairs_dev.csv", cands[i]);
        FILE *f = fopen(buf, "r");
        if (f != NULL) {
            fclose(f);
            return cands[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *vectors = "build/wordvec.bin", *data = NULL, *which = "both", *guards = NULL;
    const char *knobs[32], *out_path = NULL, *sims_path = NULL;
    double threshold = 0;
    size_t nknobs = 0;
    int nshow = 0;
    bool want_speed = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--vectors") == 0 && i + 1 < argc)
            vectors = argv[++i];
        else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strcmp(argv[i], "--embedder") == 0 && i + 1 < argc)
            which = argv[++i];
        else if (strcmp(argv[i], "--guards") == 0 && i + 1 < argc)
            guards = argv[++i];
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nknobs < 32)
            knobs[nknobs++] = argv[++i];
        else if (strcmp(argv[i], "--synonyms") == 0 && i + 1 < argc)
            load_synonyms(argv[++i]);
        else if (strcmp(argv[i], "--swap") == 0)
            swap_on = true;
        else if (strcmp(argv[i], "--speed") == 0)
            want_speed = true;
        else if (strcmp(argv[i], "--show") == 0 && i + 1 < argc)
            nshow = atoi(argv[++i]);
        else if (strcmp(argv[i], "--why") == 0 && i + 1 < argc) {
            unsigned m;
            if (guard_parse(&argv[i + 1], 1, &m, NULL, 0) < 0 || m == 0 || (m & (m - 1)))
                return 2;
            why_guard = __builtin_ctz(m);
            i++;
        } else if (strcmp(argv[i], "--antonyms") == 0 && i + 1 < argc)
            load_antonyms(argv[++i]);
        else if (strcmp(argv[i], "--pairs-out") == 0 && i + 1 < argc)
            out_path = argv[++i];
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            dump_path = argv[++i];
        else if (strcmp(argv[i], "--sims") == 0 && i + 1 < argc)
            sims_path = argv[++i];
        else if (strcmp(argv[i], "--threshold") == 0 && i + 1 < argc)
            threshold = atof(argv[++i]);
        else {
            fprintf(stderr, "semeval: unknown argument %s (see tools/semeval.c)\n", argv[i]);
            return 2;
        }
    }
    if (guards != NULL) {
        char *copy = pc_strdup(guards), *v[64], *save = NULL;
        size_t n = 0;
        for (char *w = strtok_r(copy, ", ", &save); w && n < 64; w = strtok_r(NULL, ", ", &save))
            v[n++] = w;
        char err[256];
        if (guard_parse(v, n, &guards_on, err, sizeof err) < 0) {
            fprintf(stderr, "semeval: %s\n", err);
            return 2;
        }
        free(copy);
    }
    if (want_speed) {
        speed(vectors);
        return 0;
    }
    const char *dir = data_dir(data);
    if (dir == NULL) {
        printf("semeval: no dev data (set PC_DATA_DIR or --data): skipped\n");
        return 0;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/semantic/hard_pairs_dev.csv", dir);
    size_t nh = load_csv(path, S_HARD);
    size_t qfrom = npairs;
    snprintf(path, sizeof path, "%s/semantic/quora_pairs_dev.csv", dir);
    size_t nq = load_csv(path, S_QUORA);
    snprintf(path, sizeof path, "%s/semantic/paraphrases_dev.json", dir);
    size_t np = load_paraphrases(path);
    make_variants(qfrom, qfrom + nq);
    size_t nv = npairs - nh - nq - np;
    snprintf(path, sizeof path, "%s/semantic/apt_train_dev.tsv", dir);
    size_t na = load_tsv(path, S_APT);
    snprintf(path, sizeof path, "%s/semantic/sick_pairs_dev.csv", dir);
    size_t ns = load_csv(path, S_SICK);
    printf("semeval: %s: hard %zu, quora %zu, gptcache %zu, apt %zu, sick %zu pairs; %zu variants "
           "and counterfeits\n",
           dir, nh, nq, np, na, ns, nv);
    if (out_path != NULL) {
        pairs_out(out_path);
        return 0;
    }
    run_guards();
    use_extra = nantos > 0 || swap_on;
    if (sims_path != NULL) {
        load_sims(sims_path);
        sims_all(sims_path);
        default_t = threshold > 0 ? (float)threshold : 0.92f;
        dump_pairs();
        report("from --sims", nshow);
        return 0;
    }
    for (int k = 0; k < embed_count(); k++) {
        if (!embed_is_local(k) || (strcmp(which, "both") != 0 && strcmp(which, embed_name(k))))
            continue;
        struct embed_opts o;
        embed_opts_default(&o, k);
        o.vectors = vectors;
        for (size_t i = 0; i < nknobs; i++)
            if (set_knob(&o, knobs[i]) < 0) {
                fprintf(stderr, "semeval: bad --set %s\n", knobs[i]);
                return 2;
            }
        char err[256];
        struct embedder *e = embed_create_opts(&o, err, sizeof err);
        if (e == NULL) {
            fprintf(stderr, "semeval: %s\n", err);
            return 1;
        }
        embed_all(e);
        dump_pairs();
        default_t = threshold > 0 ? (float)threshold : (float)embed_default_threshold(e);
        report(embed_name(k), nshow);
        embed_destroy(&e);
    }
    return 0;
}
