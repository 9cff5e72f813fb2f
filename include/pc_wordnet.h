/*
 * pc_wordnet.h - the word lists the semantic guards take from WordNet 3.0
 * (Debian package wordnet-base), converted once at build time by
 * tools/wnanto.c into build/gen/wordnet.c and compiled into the binary:
 *
 *   - forms: every inflected form of the lemmas below ("sit", "sits",
 *     "sat", "sitting"; "cheap", "cheaper", "cheapest"), sorted by text,
 *     each with its lemma and, for adjectives, its degree;
 *   - pairs: lemmas of opposite meaning, both ways round, sorted: WordNet's
 *     direct antonyms of adjectives, adverbs and verbs whose two words are
 *     both in its sense-tagged corpus (WN_ANTONYM), and negations by affix
 *     whose stem is a WordNet lemma too (WN_NEGATION: safe/unsafe,
 *     oxygenate/deoxygenate, careful/careless; see the tool for the rules),
 *     and verbs that can name the same action (WN_SIMILAR: one synset, or
 *     one is the other's direct hypernym: cut/slice, look/stare).
 *
 * Read-only data, no functions: guard.c searches it.
 */
#ifndef PC_WORDNET_H
#define PC_WORDNET_H

#include <stddef.h>
#include <stdint.h>

enum wordnet_kind { WN_ANTONYM = 1, WN_NEGATION = 2, WN_SIMILAR = 3 };

struct wordnet_form {
    uint32_t off;   /* the form's text: wordnet_text + off, NUL-terminated */
    uint16_t lemma; /* lemma id (an index into nothing: ids only compare) */
    uint8_t degree; /* 0 base, 1 comparative, 2 superlative (adjectives) */
    uint8_t pos;    /* 'a' adjective, 'r' adverb, 'v' verb, 'n' noun */
};

struct wordnet_pair {
    uint16_t a, b; /* lemma ids, a's opposite is b (each pair is listed both ways) */
    uint8_t kind;  /* enum wordnet_kind */
};

extern const char wordnet_text[];
extern const struct wordnet_form wordnet_forms[]; /* sorted by text, then lemma */
extern const size_t wordnet_nforms;
extern const struct wordnet_pair wordnet_pairs[]; /* sorted by a, then b */
extern const size_t wordnet_npairs;

#endif
