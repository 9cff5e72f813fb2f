/*
 * wnanto.c - build-time experiment helper: prints the direct antonym pairs
 * of WordNet 3.0 (Debian package wordnet-base, /usr/share/wordnet), one
 * "word antonym" line per pair, single words only, to measure whether they
 * help the antonyms guard (`tools/semeval --antonyms FILE`). Nothing it
 * prints is committed.
 *
 *   usage: wnanto [DIR] > antonyms.txt     (DIR default /usr/share/wordnet)
 *          wnanto -s [DIR] > synsets.txt   (one synset per line: its single words)
 *
 * data.POS lines: OFFSET LEXFILE SSTYPE WCNT(hex) {WORD LEXID}... PCNT
 * {SYMBOL OFFSET POS SRC/TGT(hex 2+2)}... | gloss. A "!" pointer with a
 * non-zero SRC/TGT links word SRC of this synset to word TGT of the target.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 64

struct synset {
    long offset;
    char *line; /* the whole line, owned */
};

static struct synset *sets;
static size_t nsets, capsets;

static int by_offset(const void *a, const void *b)
{
    long x = ((const struct synset *)a)->offset, y = ((const struct synset *)b)->offset;
    return x < y ? -1 : x > y;
}

static void load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0;
    nsets = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == ' ')
            continue; /* licence header */
        if (nsets == capsets) {
            capsets = capsets ? 2 * capsets : 65536;
            sets = realloc(sets, capsets * sizeof *sets);
            if (sets == NULL)
                exit(1);
        }
        sets[nsets].offset = strtol(line, NULL, 10);
        sets[nsets++].line = strdup(line);
    }
    free(line);
    fclose(f);
    qsort(sets, nsets, sizeof *sets, by_offset);
}

/* Word k (1-based) of a synset line, lower-cased, "(a)" markers cut; 0 if multiword. */
static int word_of(const char *line, int k, char *out, size_t n)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    for (int i = 0; i < 3 && tok; i++)
        tok = strtok_r(NULL, " ", &save);
    int wcnt = tok ? (int)strtol(tok, NULL, 16) : 0;
    if (k < 1 || k > wcnt)
        return 0;
    for (int i = 1; i <= k; i++) {
        tok = strtok_r(NULL, " ", &save);
        if (i < k)
            strtok_r(NULL, " ", &save);
    }
    if (tok == NULL || strchr(tok, '_') != NULL || strchr(tok, '-') != NULL)
        return 0;
    size_t j = 0;
    for (; tok[j] && tok[j] != '(' && j + 1 < n; j++)
        out[j] = (char)(tok[j] | 0x20);
    out[j] = '\0';
    return j > 0;
}

static void pairs_of(const char *line)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    for (int i = 0; i < 3 && tok; i++)
        tok = strtok_r(NULL, " ", &save);
    int wcnt = tok ? (int)strtol(tok, NULL, 16) : 0;
    for (int i = 0; i < 2 * wcnt && tok; i++)
        tok = strtok_r(NULL, " ", &save);
    int pcnt = (tok = strtok_r(NULL, " ", &save)) ? atoi(tok) : 0;
    for (int p = 0; p < pcnt; p++) {
        char *sym = strtok_r(NULL, " ", &save), *off = strtok_r(NULL, " ", &save);
        char *pos = strtok_r(NULL, " ", &save), *st = strtok_r(NULL, " ", &save);
        if (sym == NULL || off == NULL || pos == NULL || st == NULL)
            return;
        if (strcmp(sym, "!") != 0)
            continue;
        unsigned v = (unsigned)strtoul(st, NULL, 16);
        struct synset key = {strtol(off, NULL, 10), NULL};
        struct synset *t = bsearch(&key, sets, nsets, sizeof *sets, by_offset);
        char a[128], b[128];
        if (t != NULL && word_of(line, (int)(v >> 8), a, sizeof a) &&
            word_of(t->line, (int)(v & 0xff), b, sizeof b) && strcmp(a, b) < 0)
            printf("%s %s\n", a, b);
    }
}

/* The synset's word count (hex field 4 of the line). */
static int word_count(const char *line)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    for (int i = 0; i < 3 && tok; i++)
        tok = strtok_r(NULL, " ", &save);
    return tok ? (int)strtol(tok, NULL, 16) : 0;
}

/* One line per synset with two or more single-word lemmas (-s). */
static void synonyms_of(const char *line)
{
    char out[4096] = "", w[128];
    int n = 0, wcnt = word_count(line);
    for (int k = 1; k <= wcnt && k < MAXW; k++) {
        if (!word_of(line, k, w, sizeof w))
            continue;
        size_t len = strlen(out);
        snprintf(out + len, sizeof out - len, "%s%s", n++ ? " " : "", w);
    }
    if (n > 1)
        printf("%s\n", out);
}

int main(int argc, char **argv)
{
    int syn = argc > 1 && strcmp(argv[1], "-s") == 0;
    if (syn) {
        argc--;
        argv++;
    }
    const char *dir = argc > 1 ? argv[1] : "/usr/share/wordnet";
    static const char *const pos[] = {"adj", "adv", "noun", "verb"};
    for (size_t i = 0; i < 4; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/data.%s", dir, pos[i]);
        load(path);
        for (size_t k = 0; k < nsets; k++) {
            if (syn)
                synonyms_of(sets[k].line);
            else
                pairs_of(sets[k].line);
        }
        for (size_t k = 0; k < nsets; k++)
            free(sets[k].line);
    }
    free(sets);
    return 0;
}
