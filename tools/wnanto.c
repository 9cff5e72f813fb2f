/*
 * wnanto.c - build-time converter of WordNet 3.0 (Debian package
 * wordnet-base, /usr/share/wordnet) into the word lists of the semantic
 * guards (include/pc_wordnet.h): a C file compiled into the binary.
 *
 *   usage: wnanto -c [DIR] > build/gen/wordnet.c   the guards' table
 *          wnanto [DIR] > antonyms.txt              "word antonym" lines (semeval --antonyms)
 *          wnanto -s [DIR] > synsets.txt            one synset per line: its single words
 *
 * What the table holds, and why (figures in the README's guard section):
 *
 *   antonyms   WordNet's direct antonyms ('!' pointers between two words) of
 *              adjectives, adverbs and verbs, single words, both of them in
 *              the sense-tagged corpus (tagsense_cnt >= 1 in index.POS): the
 *              rare ones never met the dev sets and only grow the table.
 *   negations  a lemma made of a negating affix and another lemma: un-, non-,
 *              in-/im-/il-/ir-, dis-, de-, anti- + stem (4 letters or more),
 *              and -less against -ful. An affix is a negation when WordNet
 *              links the two words (any lexical pointer: antonym, derivation,
 *              pertainym...): illegal/legal, disconnect/connect; or, without
 *              a link, for un- and non- (unsafe/safe), and for de-, dis- and
 *              anti- when the longer word is rare (not in the tagged corpus)
 *              and the stem has 5 letters or more (deoxygenate/oxygenate):
 *              common words with those prefixes are words of their own
 *              (discover/cover, design/sign, depress/press), and in- without
 *              a link usually means "into" (intension, inpour).
 *   similar    verbs that can name one action: two words of one verb synset,
 *              or of a synset and its direct hypernym (cut/slice, look/stare,
 *              eat/devour), both in the tagged corpus; the verbs guard lets
 *              such a change of verb through.
 *   degrees    comparative and superlative forms of adjectives in the tagged
 *              corpus (cheap, cheaper, cheapest; good, better, best from
 *              adj.exc), for the rank guard. A regular form that is itself a
 *              common lemma is left out ("number" is not more numb).
 *
 * Every lemma of a pair gets its inflected forms: verbs -s/-es/-ies,
 * -ed/-d/-ied, -ing (e dropped, final consonant doubled or not), and the
 * irregular forms of verb.exc; adjectives their degrees; nouns -s/-es/-ies
 * and noun.exc. A form that two lemmas of one part of speech share goes
 * only to the common one when the other is RARE_LEMMA times rarer in the
 * tagged corpus (cntlist.rev): "putting" is put, not putt (a golf stroke,
 * which WordNet files under play, so "putting away a guitar" read like
 * "playing a guitar"); a lemma's own spelling is always its form.
 *
 * data.POS lines: OFFSET LEXFILE SSTYPE WCNT(hex) {WORD LEXID}... PCNT
 * {SYMBOL OFFSET POS SRC/TGT(hex 2+2)}... | gloss. A pointer with a non-zero
 * SRC/TGT links word SRC of this synset to word TGT of the target.
 * index.POS lines: LEMMA POS SYNSET_CNT P_CNT {SYMBOL}... SENSE_CNT
 * TAGSENSE_CNT {OFFSET}...
 */
#include "pc_wordnet.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW    64
#define WORDMAX 48

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "wnanto: out of memory\n");
        exit(1);
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "wnanto: out of memory\n");
        exit(1);
    }
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

/* ---- a string-keyed hash table ------------------------------------------------ */

#define TOP_SENSES 3 /* a word's usual senses: the first of index.POS (most frequent first) */

struct entry {
    char *key;
    int tag[4];              /* tagsense_cnt per part of speech (a r v n), -1 = not a lemma */
    int id;                  /* lemma id in the output, -1 = none yet */
    int freq[4];             /* times tagged in the corpus per part of speech (cntlist.rev) */
    long top[4][TOP_SENSES]; /* synset offsets of its usual senses, 0 = none */
};

static struct entry *tab;
static size_t tab_cap, tab_n;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static struct entry *tab_get(const char *key, bool create);

static void tab_grow(void)
{
    struct entry *old = tab;
    size_t cap = tab_cap;
    tab_cap = tab_cap ? 2 * tab_cap : 1 << 16;
    tab = xmalloc(tab_cap * sizeof *tab);
    memset(tab, 0, tab_cap * sizeof *tab);
    tab_n = 0;
    for (size_t i = 0; i < cap; i++)
        if (old[i].key != NULL) {
            struct entry *e = tab_get(old[i].key, true);
            free(e->key);
            *e = old[i];
        }
    free(old);
}

static struct entry *tab_get(const char *key, bool create)
{
    if (create && 2 * (tab_n + 1) > tab_cap)
        tab_grow();
    if (tab_cap == 0)
        return NULL;
    size_t b = hash_str(key) & (tab_cap - 1);
    while (tab[b].key != NULL) {
        if (strcmp(tab[b].key, key) == 0)
            return &tab[b];
        b = (b + 1) & (tab_cap - 1);
    }
    if (!create)
        return NULL;
    tab[b].key = xstrdup(key);
    for (int k = 0; k < 4; k++)
        tab[b].tag[k] = -1;
    tab[b].id = -1;
    tab_n++;
    return &tab[b];
}

static int pos_index(char pos)
{
    return pos == 'a' || pos == 's' ? 0 : pos == 'r' ? 1 : pos == 'v' ? 2 : 3;
}

static bool is_lemma(const char *w)
{
    const struct entry *e = tab_get(w, false);
    return e != NULL && (e->tag[0] >= 0 || e->tag[1] >= 0 || e->tag[2] >= 0 || e->tag[3] >= 0);
}

static int tag_of(const char *w)
{
    const struct entry *e = tab_get(w, false);
    int t = -1;
    for (int k = 0; e != NULL && k < 4; k++)
        t = e->tag[k] > t ? e->tag[k] : t;
    return t;
}

static bool lemma_as(const char *w, char pos)
{
    const struct entry *e = tab_get(w, false);
    return e != NULL && e->tag[pos_index(pos)] >= 0;
}

/* A word we keep: lower-case letters only, 2..WORDMAX-8 long (room for inflections). */
static bool plain_word(const char *w)
{
    size_t n = strlen(w);
    if (n < 2 || n > WORDMAX - 8)
        return false;
    for (; *w; w++)
        if (*w < 'a' || *w > 'z')
            return false;
    return true;
}

/* ---- reading WordNet ------------------------------------------------------------ */

static void load_index(const char *dir, const char *pos)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/index.%s", dir, pos);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == ' ')
            continue;
        char *save = NULL, *lemma = strtok_r(line, " ", &save), *p = strtok_r(NULL, " ", &save);
        char *scnt = strtok_r(NULL, " ", &save), *pcnt = strtok_r(NULL, " ", &save);
        if (lemma == NULL || p == NULL || scnt == NULL || pcnt == NULL || !plain_word(lemma))
            continue;
        int np = atoi(pcnt);
        for (int i = 0; i < np; i++)
            strtok_r(NULL, " ", &save);
        strtok_r(NULL, " ", &save); /* sense_cnt */
        char *tc = strtok_r(NULL, " ", &save);
        if (tc == NULL)
            continue;
        struct entry *e = tab_get(lemma, true);
        int k = pos_index(p[0]), t = atoi(tc);
        e->tag[k] = t > e->tag[k] ? t : e->tag[k];
        for (int i = 0; i < TOP_SENSES; i++) {
            char *off = strtok_r(NULL, " \n", &save);
            e->top[k][i] = off != NULL ? strtol(off, NULL, 10) : 0;
        }
    }
    free(line);
    fclose(f);
}

/*
 * How often each lemma is tagged in WordNet's sense-tagged corpus, per part
 * of speech: cntlist.rev lines "lemma%SS_TYPE:...  SENSE_NUMBER TAG_CNT"
 * (SS_TYPE 1 noun, 2 verb, 3 adjective, 4 adverb, 5 adjective satellite).
 * Missing file: every count stays 0.
 */
static void load_counts(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cntlist.rev", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *pct = strchr(line, '%');
        int num, cnt;
        if (pct == NULL || pct[1] < '1' || pct[1] > '5')
            continue;
        char *sp = strchr(pct, ' ');
        if (sp == NULL || sscanf(sp, "%d %d", &num, &cnt) != 2)
            continue;
        *pct = '\0';
        struct entry *e = tab_get(line, false);
        static const char pos_of_type[] = "nvars";
        if (e != NULL)
            e->freq[pos_index(pos_of_type[pct[1] - '1'])] += cnt;
    }
    fclose(f);
}

struct synset {
    long offset;
    char *line; /* the whole line, owned */
};

struct pos_file {
    char pos; /* a r v n */
    struct synset *sets;
    size_t n;
};

static struct pos_file files[4] = {{'a', NULL, 0}, {'r', NULL, 0}, {'v', NULL, 0}, {'n', NULL, 0}};
static const char *const file_names[4] = {"adj", "adv", "verb", "noun"};

static int by_offset(const void *a, const void *b)
{
    long x = ((const struct synset *)a)->offset, y = ((const struct synset *)b)->offset;
    return x < y ? -1 : x > y;
}

static void load_data(const char *dir, struct pos_file *pf, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/data.%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0, capsets = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == ' ')
            continue; /* licence header */
        if (pf->n == capsets) {
            capsets = capsets ? 2 * capsets : 65536;
            pf->sets = xrealloc(pf->sets, capsets * sizeof *pf->sets);
        }
        pf->sets[pf->n].offset = strtol(line, NULL, 10);
        pf->sets[pf->n++].line = xstrdup(line);
    }
    free(line);
    fclose(f);
    qsort(pf->sets, pf->n, sizeof *pf->sets, by_offset);
}

static struct pos_file *file_of(char pos)
{
    return &files[pos_index(pos)];
}

/* The words of a synset line, lower-cased, "(a)" markers cut; returns the count. */
static int words_of(const char *line, char w[][WORDMAX], int max, const char **rest)
{
    const char *p = line;
    for (int i = 0; i < 3; i++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return 0;
        p++;
    }
    int wcnt = (int)strtol(p, NULL, 16), n = 0;
    p = strchr(p, ' ');
    for (int k = 0; k < wcnt && p != NULL; k++) {
        p++;
        size_t len = strcspn(p, " ");
        if (n < max) {
            size_t j = 0;
            for (; j < len && p[j] != '(' && j + 1 < WORDMAX; j++)
                w[n][j] = (char)tolower((unsigned char)p[j]);
            w[n][j] = '\0';
            n++;
        }
        p = strchr(p + len + 1, ' '); /* skip the lex id */
    }
    *rest = p;
    return n < max ? n : max;
}

/* ---- links and antonyms ------------------------------------------------------------ */

static char **links;
static size_t nlinks, caplinks;

static void add_link(const char *a, const char *b)
{
    if (!plain_word(a) || !plain_word(b) || strcmp(a, b) == 0)
        return;
    if (nlinks + 2 > caplinks) {
        caplinks = caplinks ? 2 * caplinks : 1 << 16;
        links = xrealloc(links, caplinks * sizeof *links);
    }
    char buf[2 * WORDMAX + 2];
    snprintf(buf, sizeof buf, "%s|%s", a, b);
    links[nlinks++] = xstrdup(buf);
    snprintf(buf, sizeof buf, "%s|%s", b, a);
    links[nlinks++] = xstrdup(buf);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool linked(const char *a, const char *b)
{
    char buf[2 * WORDMAX + 2], *key = buf;
    snprintf(buf, sizeof buf, "%s|%s", a, b);
    return bsearch(&key, links, nlinks, sizeof *links, str_cmp) != NULL;
}

struct anto {
    char a[WORDMAX], b[WORDMAX];
    char pos;
};

static struct anto *antos;
static size_t nantos, capantos;

static void add_anto(const char *a, const char *b, char pos)
{
    if (nantos == capantos) {
        capantos = capantos ? 2 * capantos : 4096;
        antos = xrealloc(antos, capantos * sizeof *antos);
    }
    struct anto *t = &antos[nantos++];
    snprintf(t->a, sizeof t->a, "%s", a);
    snprintf(t->b, sizeof t->b, "%s", b);
    t->pos = pos;
}

static struct anto *sims;
static size_t nsims, capsims;

/* Whether synset off (of pos) is one of w's usual senses. */
static bool usual_sense(const char *w, char pos, long off)
{
    const struct entry *e = tab_get(w, false);
    for (int i = 0; e != NULL && i < TOP_SENSES; i++)
        if (e->top[pos_index(pos)][i] == off)
            return true;
    return false;
}

/* Words a and b can name one thing (kept when both are common: see table()). */
static void add_similar(const char *a, const char *b, char pos)
{
    if (!plain_word(a) || !plain_word(b) || strcmp(a, b) == 0)
        return;
    if (nsims == capsims) {
        capsims = capsims ? 2 * capsims : 8192;
        sims = xrealloc(sims, capsims * sizeof *sims);
    }
    struct anto *t = &sims[nsims++];
    snprintf(t->a, sizeof t->a, "%s", a);
    snprintf(t->b, sizeof t->b, "%s", b);
    t->pos = pos == 's' ? 'a' : pos;
}

/*
 * The pointers of one synset line: links between words, antonyms ('!'),
 * and for verbs the words of one synset and of a direct hypernym ('@').
 */
static void pointers_of(const char *line, char pos)
{
    char w[MAXW][WORDMAX], tw[MAXW][WORDMAX];
    const char *p;
    long self = strtol(line, NULL, 10);
    int nw = words_of(line, w, MAXW, &p);
    if (p == NULL)
        return;
    for (int i = 0; i < nw; i++)
        for (int j = i + 1; j < nw; j++)
            if (usual_sense(w[i], pos, self) && usual_sense(w[j], pos, self))
                add_similar(w[i], w[j], pos);
    int pcnt = (int)strtol(p + 1, NULL, 10);
    p = strchr(p + 1, ' ');
    for (int k = 0; k < pcnt && p != NULL; k++) {
        char sym[4], tpos[4];
        long off;
        unsigned st;
        if (sscanf(p, " %3s %ld %3s %x", sym, &off, tpos, &st) != 4)
            return;
        for (int s = 0; s < 4 && p != NULL; s++)
            p = strchr(p + 1, ' ');
        unsigned src = st >> 8, tgt = st & 0xff;
        struct pos_file *tf = file_of(tpos[0]);
        struct synset key = {off, NULL},
                      *t = bsearch(&key, tf->sets, tf->n, sizeof *tf->sets, by_offset);
        const char *trest;
        int ntw = t != NULL ? words_of(t->line, tw, MAXW, &trest) : 0;
        if (pos == 'v' && strcmp(sym, "@") == 0 && tpos[0] == 'v')
            for (int i = 0; i < nw; i++)
                for (int j = 0; j < ntw; j++)
                    if (usual_sense(w[i], pos, self) && usual_sense(tw[j], pos, off))
                        add_similar(w[i], tw[j], pos);
        if (src == 0 || tgt == 0 || (int)src > nw || (int)tgt > ntw)
            continue; /* a semantic pointer between synsets: not between words */
        add_link(w[src - 1], tw[tgt - 1]);
        if (strcmp(sym, "!") == 0 && pos != 'n' && plain_word(w[src - 1]) &&
            plain_word(tw[tgt - 1]))
            add_anto(w[src - 1], tw[tgt - 1], pos == 's' ? 'a' : pos);
    }
}

/* ---- exceptions (irregular forms) ------------------------------------------------------ */

struct exc {
    char form[WORDMAX], base[WORDMAX];
    char pos;
};

static struct exc *excs;
static size_t nexcs, capexcs;

static void load_exc(const char *dir, const char *name, char pos)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.exc", dir, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *form = strtok_r(line, " \n", &save);
        for (char *b = strtok_r(NULL, " \n", &save); form && b; b = strtok_r(NULL, " \n", &save)) {
            if (!plain_word(form) || !plain_word(b) || strcmp(form, b) == 0)
                continue;
            if (nexcs == capexcs) {
                capexcs = capexcs ? 2 * capexcs : 8192;
                excs = xrealloc(excs, capexcs * sizeof *excs);
            }
            struct exc *e = &excs[nexcs++];
            snprintf(e->form, sizeof e->form, "%s", form);
            snprintf(e->base, sizeof e->base, "%s", b);
            e->pos = pos;
        }
    }
    fclose(f);
}

/* ---- the output: forms and pairs ------------------------------------------------------- */

struct form {
    char text[WORDMAX];
    int lemma;
    int degree;
    char pos;
};

static struct form *forms;
static size_t nforms, capforms;
static int nlemmas;

struct pair {
    int a, b, kind;
};

static struct pair *pairs;
static size_t npairs, cappairs;

static char **lemma_words; /* by lemma id: the lemma (tab's key) */
static int cap_lemma_words;

static int lemma_id(const char *w)
{
    struct entry *e = tab_get(w, true);
    if (e->id < 0) {
        if (nlemmas == cap_lemma_words) {
            cap_lemma_words = cap_lemma_words ? 2 * cap_lemma_words : 16384;
            lemma_words = xrealloc(lemma_words, (size_t)cap_lemma_words * sizeof *lemma_words);
        }
        lemma_words[nlemmas] = xstrdup(w);
        e->id = nlemmas++;
    }
    return e->id;
}

/* How often lemma id is tagged as pos in WordNet's corpus (0 when never). */
static int lemma_tag(int id, char pos)
{
    const struct entry *e = tab_get(lemma_words[id], false);
    return e != NULL ? e->freq[pos_index(pos)] : 0;
}

#define RARE_LEMMA 8 /* a lemma this many times rarer than another of one form loses the form */

/*
 * Whether forms[i] is an inflection of a rare lemma that spells a form of a
 * common lemma of the same part of speech: "putting" of "putt" (golf)
 * against "putting" of "put". Such a form reads as the common lemma; else
 * the rare sense makes unrelated words look alike (putt is a kind of play,
 * put is not). A lemma's own spelling is always kept.
 */
static bool form_shadowed(size_t i)
{
    const struct form *f = &forms[i];
    if (strcmp(f->text, lemma_words[f->lemma]) == 0)
        return false;
    int mine = lemma_tag(f->lemma, f->pos);
    for (size_t j = i; j-- > 0 && strcmp(forms[j].text, f->text) == 0;)
        if (forms[j].pos == f->pos && lemma_tag(forms[j].lemma, f->pos) > RARE_LEMMA * mine)
            return true;
    for (size_t j = i + 1; j < nforms && strcmp(forms[j].text, f->text) == 0; j++)
        if (forms[j].pos == f->pos && lemma_tag(forms[j].lemma, f->pos) > RARE_LEMMA * mine)
            return true;
    return false;
}

static void add_form(const char *text, int lemma, int degree, char pos)
{
    if (nforms == capforms) {
        capforms = capforms ? 2 * capforms : 16384;
        forms = xrealloc(forms, capforms * sizeof *forms);
    }
    struct form *f = &forms[nforms++];
    snprintf(f->text, sizeof f->text, "%s", text);
    f->lemma = lemma;
    f->degree = degree;
    f->pos = pos;
}

static bool vowel(char c)
{
    return strchr("aeiou", c) != NULL;
}

/* Consonant-vowel-consonant at the end: the final consonant may double (sit, sitting). */
static bool cvc(const char *w, size_t n)
{
    return n >= 3 && !vowel(w[n - 1]) && strchr("wxy", w[n - 1]) == NULL && vowel(w[n - 2]) &&
           !vowel(w[n - 3]);
}

static void add_suffixed(const char *w, size_t cut, const char *suf, int lemma, int degree,
                         char pos)
{
    char buf[2 * WORDMAX];
    snprintf(buf, sizeof buf, "%.*s%s", (int)(strlen(w) - cut), w, suf);
    add_form(buf, lemma, degree, pos);
}

static void add_irregular(const char *w, int lemma, char pos, int degree)
{
    for (size_t i = 0; i < nexcs; i++)
        if (excs[i].pos == pos && strcmp(excs[i].base, w) == 0)
            add_form(excs[i].form, lemma, degree, pos);
}

static void verb_forms(const char *w, int id)
{
    size_t n = strlen(w);
    char last = w[n - 1];
    add_form(w, id, 0, 'v');
    if (strchr("sxzo", last) != NULL ||
        (n >= 2 && (strcmp(w + n - 2, "ch") == 0 || strcmp(w + n - 2, "sh") == 0)))
        add_suffixed(w, 0, "es", id, 0, 'v');
    else if (last == 'y' && !vowel(w[n - 2]))
        add_suffixed(w, 1, "ies", id, 0, 'v');
    else
        add_suffixed(w, 0, "s", id, 0, 'v');
    if (n >= 2 && strcmp(w + n - 2, "ie") == 0) {
        add_suffixed(w, 0, "d", id, 0, 'v');
        add_suffixed(w, 2, "ying", id, 0, 'v');
    } else if (last == 'e') {
        add_suffixed(w, 0, "d", id, 0, 'v');
        add_suffixed(w, 1, "ing", id, 0, 'v');
    } else if (last == 'y' && !vowel(w[n - 2])) {
        add_suffixed(w, 1, "ied", id, 0, 'v');
        add_suffixed(w, 0, "ing", id, 0, 'v');
    } else {
        add_suffixed(w, 0, "ed", id, 0, 'v');
        add_suffixed(w, 0, "ing", id, 0, 'v');
        if (cvc(w, n)) {
            char dbl[4] = {last, 'e', 'd', '\0'}, dbi[5] = {last, 'i', 'n', 'g', '\0'};
            add_suffixed(w, 0, dbl, id, 0, 'v');
            add_suffixed(w, 0, dbi, id, 0, 'v');
        }
    }
    add_irregular(w, id, 'v', 0);
}

/* A regular degree form of an adjective, unless it is a common word of its own. */
static void add_degree(const char *w, size_t cut, const char *suf, int id, int degree)
{
    char buf[2 * WORDMAX];
    snprintf(buf, sizeof buf, "%.*s%s", (int)(strlen(w) - cut), w, suf);
    if (tag_of(buf) < 1)
        add_form(buf, id, degree, 'a');
}

static void adj_forms(const char *w, int id)
{
    size_t n = strlen(w);
    char last = w[n - 1];
    add_form(w, id, 0, 'a');
    bool participle =
        (n > 4 && strcmp(w + n - 2, "ed") == 0) || (n > 5 && strcmp(w + n - 3, "ing") == 0);
    if (n <= 7 && !participle) { /* longer adjectives take more/most; participles too */
        if (last == 'e') {
            add_degree(w, 0, "r", id, 1);
            add_degree(w, 0, "st", id, 2);
        } else if (last == 'y' && !vowel(w[n - 2])) {
            add_degree(w, 1, "ier", id, 1);
            add_degree(w, 1, "iest", id, 2);
        } else {
            add_degree(w, 0, "er", id, 1);
            add_degree(w, 0, "est", id, 2);
            if (cvc(w, n)) {
                char dr[4] = {last, 'e', 'r', '\0'}, ds[5] = {last, 'e', 's', 't', '\0'};
                add_degree(w, 0, dr, id, 1);
                add_degree(w, 0, ds, id, 2);
            }
        }
    }
    for (size_t i = 0; i < nexcs; i++) /* better/best, worse/worst, happier... */
        if (excs[i].pos == 'a' && strcmp(excs[i].base, w) == 0) {
            size_t m = strlen(excs[i].form);
            bool sup = m >= 3 && strcmp(excs[i].form + m - 2, "st") == 0;
            add_form(excs[i].form, id, sup ? 2 : 1, 'a');
        }
}

static void noun_forms(const char *w, int id)
{
    size_t n = strlen(w);
    char last = w[n - 1];
    add_form(w, id, 0, 'n');
    if (strchr("sxz", last) != NULL ||
        (n >= 2 && (strcmp(w + n - 2, "ch") == 0 || strcmp(w + n - 2, "sh") == 0)))
        add_suffixed(w, 0, "es", id, 0, 'n');
    else if (last == 'y' && !vowel(w[n - 2]))
        add_suffixed(w, 1, "ies", id, 0, 'n');
    else
        add_suffixed(w, 0, "s", id, 0, 'n');
    add_irregular(w, id, 'n', 0);
}

static void forms_of(const char *w, char pos)
{
    int id = lemma_id(w);
    if (pos == 'v')
        verb_forms(w, id);
    else if (pos == 'a')
        adj_forms(w, id);
    else if (pos == 'n')
        noun_forms(w, id);
    else
        add_form(w, id, 0, pos);
}

static void add_pair(const char *a, const char *b, int kind, char pos)
{
    if (cappairs < npairs + 2) {
        cappairs = cappairs ? 2 * cappairs : 8192;
        pairs = xrealloc(pairs, cappairs * sizeof *pairs);
    }
    int x = lemma_id(a), y = lemma_id(b);
    pairs[npairs++] = (struct pair){x, y, kind};
    pairs[npairs++] = (struct pair){y, x, kind};
    forms_of(a, pos);
    forms_of(b, pos);
}

/* The part of speech both words are lemmas of (adjective first), or 0. */
static char shared_pos(const char *a, const char *b)
{
    static const char order[] = "avrn";
    for (const char *p = order; *p; p++)
        if (lemma_as(a, *p) && lemma_as(b, *p))
            return *p;
    return 0;
}

static void negation(const char *w)
{
    static const char *const prefixes[] = {"un", "non", "in", "im",  "il",
                                           "ir", "dis", "de", "anti"};
    size_t n = strlen(w);
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0]; k++) {
        size_t pl = strlen(prefixes[k]);
        const char *stem = w + pl;
        if (n < pl + 4 || strncmp(w, prefixes[k], pl) != 0 || !is_lemma(stem))
            continue;
        char pos = shared_pos(w, stem);
        if (pos == 0)
            continue;
        bool link = linked(w, stem);
        bool un = strcmp(prefixes[k], "un") == 0 || strcmp(prefixes[k], "non") == 0;
        bool rare = (strcmp(prefixes[k], "de") == 0 || strcmp(prefixes[k], "dis") == 0 ||
                     strcmp(prefixes[k], "anti") == 0) &&
                    tag_of(w) < 1 && strlen(stem) >= 5;
        if (link || un || rare)
            add_pair(stem, w, WN_NEGATION, pos);
    }
    if (n > 6 && strcmp(w + n - 4, "less") == 0) { /* careless / careful */
        char ful[WORDMAX];
        snprintf(ful, sizeof ful, "%.*sful", (int)(n - 4), w);
        char pos = shared_pos(w, ful);
        if (pos != 0)
            add_pair(ful, w, WN_NEGATION, pos);
    }
}

static int form_cmp(const void *x, const void *y)
{
    const struct form *a = x, *b = y;
    int c = strcmp(a->text, b->text);
    if (c != 0)
        return c;
    return a->lemma != b->lemma ? a->lemma - b->lemma : a->degree - b->degree;
}

static int pair_cmp(const void *x, const void *y)
{
    const struct pair *a = x, *b = y;
    if (a->a != b->a)
        return a->a - b->a;
    return a->b != b->b ? a->b - b->b : a->kind - b->kind;
}

static void emit(void)
{
    qsort(forms, nforms, sizeof *forms, form_cmp);
    qsort(pairs, npairs, sizeof *pairs, pair_cmp);
    if (nlemmas > 65535) {
        fprintf(stderr, "wnanto: %d lemmas do not fit 16 bits\n", nlemmas);
        exit(1);
    }
    printf("/* Generated by tools/wnanto.c from WordNet 3.0 (wordnet-base): do not edit. */\n"
           "#include \"pc_wordnet.h\"\n\nconst char wordnet_text[] =\n");
    uint32_t *offs = xmalloc((nforms + 1) * sizeof *offs), off = 0;
    size_t kept = 0;
    bool *shadowed = xmalloc(nforms * sizeof *shadowed);
    size_t nshadowed = 0;
    for (size_t i = 0; i < nforms; i++)
        nshadowed += shadowed[i] = form_shadowed(i);
    for (size_t i = 0; i < nforms; i++) {
        if ((i > 0 && form_cmp(&forms[i - 1], &forms[i]) == 0) || shadowed[i])
            continue; /* the same form of the same lemma twice; a rare lemma's */
        forms[kept] = forms[i];
        if (kept > 0 && strcmp(forms[kept - 1].text, forms[kept].text) == 0) {
            offs[kept] = offs[kept - 1];
        } else {
            printf("    \"%s\\0\"\n", forms[kept].text);
            offs[kept] = off;
            off += (uint32_t)strlen(forms[kept].text) + 1;
        }
        kept++;
    }
    printf("    ;\n\nconst struct wordnet_form wordnet_forms[] = {\n");
    for (size_t i = 0; i < kept; i++)
        printf("    {%u, %d, %d, '%c'},\n", offs[i], forms[i].lemma, forms[i].degree, forms[i].pos);
    printf(
        "};\nconst size_t wordnet_nforms = %zu;\n\nconst struct wordnet_pair wordnet_pairs[] = {\n",
        kept);
    size_t np = 0;
    for (size_t i = 0; i < npairs; i++) {
        if (i > 0 && pairs[i].a == pairs[i - 1].a && pairs[i].b == pairs[i - 1].b)
            continue; /* an antonym that is also a negation: the first kind */
        printf("    {%d, %d, %d},\n", pairs[i].a, pairs[i].b, pairs[i].kind);
        np++;
    }
    printf("};\nconst size_t wordnet_npairs = %zu;\n", np);
    fprintf(stderr,
            "wnanto: %zu forms of %d lemmas, %zu pairs (%zu forms of rare lemmas left out)\n", kept,
            nlemmas, np, nshadowed);
    free(shadowed);
    free(offs);
}

static void table(const char *dir)
{
    for (int k = 0; k < 4; k++)
        load_index(dir, file_names[k]);
    load_counts(dir);
    for (int k = 0; k < 4; k++)
        load_data(dir, &files[k], file_names[k]);
    load_exc(dir, "verb", 'v');
    load_exc(dir, "adj", 'a');
    load_exc(dir, "noun", 'n');
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < files[k].n; i++)
            pointers_of(files[k].sets[i].line, files[k].pos);
    qsort(links, nlinks, sizeof *links, str_cmp);
    for (size_t i = 0; i < nantos; i++)
        if (tag_of(antos[i].a) >= 1 && tag_of(antos[i].b) >= 1)
            add_pair(antos[i].a, antos[i].b, WN_ANTONYM, antos[i].pos);
    for (size_t i = 0; i < nsims; i++) {
        const struct entry *ea = tab_get(sims[i].a, false), *eb = tab_get(sims[i].b, false);
        int k = pos_index(sims[i].pos);
        if (ea != NULL && eb != NULL && ea->tag[k] >= 1 && eb->tag[k] >= 1)
            add_pair(sims[i].a, sims[i].b, WN_SIMILAR, sims[i].pos);
    }
    /* The lemmas in a fixed order (the table may not grow while it is walked). */
    char **keys = xmalloc(tab_n * sizeof *keys);
    size_t nkeys = 0;
    for (size_t i = 0; i < tab_cap; i++)
        if (tab[i].key != NULL && is_lemma(tab[i].key))
            keys[nkeys++] = tab[i].key;
    qsort(keys, nkeys, sizeof *keys, str_cmp);
    for (size_t i = 0; i < nkeys; i++)
        negation(keys[i]);
    for (size_t i = 0; i < nkeys; i++) /* degrees of the common adjectives */
        if (tab_get(keys[i], false)->tag[0] >= 1)
            forms_of(keys[i], 'a');
    free(keys);
    emit();
}

/* The old listings, for semeval's experiments: antonym pairs, or synsets (-s). */
static void listing(const char *dir, bool synsets)
{
    for (int k = 0; k < 4; k++)
        load_data(dir, &files[k], file_names[k]);
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < files[k].n; i++) {
            const char *line = files[k].sets[i].line, *rest;
            char w[MAXW][WORDMAX];
            if (!synsets) {
                pointers_of(line, files[k].pos);
                continue;
            }
            int nw = words_of(line, w, MAXW, &rest), kept = 0;
            for (int j = 0; j < nw; j++)
                if (plain_word(w[j]))
                    printf("%s%s", kept++ ? " " : "", w[j]);
            if (kept > 0)
                printf("\n");
        }
    for (size_t i = 0; !synsets && i < nantos; i++)
        if (strcmp(antos[i].a, antos[i].b) < 0)
            printf("%s %s\n", antos[i].a, antos[i].b);
}

int main(int argc, char **argv)
{
    char mode = argc > 1 && argv[1][0] == '-' ? argv[1][1] : 0;
    if (mode != 0) {
        argc--;
        argv++;
    }
    const char *dir = argc > 1 ? argv[1] : "/usr/share/wordnet";
    if (mode == 'c')
        table(dir);
    else
        listing(dir, mode == 's');
    return ferror(stdout) ? 1 : 0;
}
