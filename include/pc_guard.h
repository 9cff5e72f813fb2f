/*
 * pc_guard.h - semantic guards: checks on the two texts of a candidate
 * semantic hit that catch what word-level similarity cannot see. Two
 * questions can share almost every word and still ask different things
 * ("convert 10 USD to EUR" / "convert 10 EUR to USD"); a guard rejects such a
 * pair whatever its similarity.
 *
 * Each guard is switchable (config key semantic-guards) and the table below
 * drives the enum, the config names and the descriptions. Guards only ever
 * reject: a pair that passes every enabled guard is decided by similarity.
 *
 * Contract: any bytes are accepted (texts are capped like the embedder's, see
 * TEXT_MAX_READ); synchronous, allocation of one scratch block per call,
 * no shared mutable state: safe on any thread.
 */
#ifndef PC_GUARD_H
#define PC_GUARD_H

#include <stdbool.h>
#include <stddef.h>

/*
 * X(A, ENUM, name, "what differs when it rejects"): name is the config name
 * and the suffix of the guard's rejection counter
 * (semantic_guard_rejects_NAME, pc_stats.h); A is passed through for such
 * generated tables. GUARD_LIST(X) calls X(ENUM, name, what).
 */
#define GUARD_ROWS(X, A)                                                                           \
    X(A, NUMBERS, numbers, "a number, its sign, or the unit or currency bound to it")              \
    X(A, NEGATION, negation, "the number of negations (not, n't, no, never, without...)")          \
    X(A, ENTITIES, entities, "a name, acronym or product written as one (Berlin, NBA, X1)")        \
    X(A, ANTONYMS, antonyms, "a word swapped for its opposite (ascending/descending...)")          \
    X(A, DATES, dates, "a date or time: month, weekday, today/tomorrow, this/next week...")        \
    X(A, LENGTH, length, "the amount of content: one text says much more than the other")          \
    X(A, DIRECTION, direction, "the order around to/from/than/before/after (A to B, B to A)")      \
    X(A, QUESTION, question, "the kind of question: who, when, where, why, how many, yes/no...")   \
    X(A, EXTRA, extra, "one text adds words the other has no counterpart for, and not vice versa") \
    X(A, SWAP, swap, "a word or two replaced by others (\"nearest\" / \"cheapest\" gas station)")  \
    X(A, SYMBOLS, symbols,                                                                         \
      "an operator, sign, path or other symbol (3+3 / 3*3, x > 5 / x < 5); emoji when both have "  \
      "some")                                                                                      \
    X(A, PARTICLES, particles, "an opposite particle in the same place (into / out of, on / off)") \
    X(A, WORDNET, wordnet, "a word swapped for its WordNet antonym (empty/full, sit/stand)")       \
    X(A, AFFIXES, affixes, "a word negated by an affix (safe/unsafe, oxygenated/deoxygenated)")    \
    X(A, INTENT, intent,                                                                           \
      "an undoing added to one side (prevent, avoid, stop, cancel, fail to...)")                   \
    X(A, VERBS, verbs, "the action: a verb in the progressive (is running / is resting)")          \
    X(A, RANK, rank, "a rank or degree: first/second, closest/second closest, cheap/cheapest")     \
    X(A, QUANTITY, quantity, "a quantity word in one place: all/some, many/few, both/one")         \
    X(A, ACCENTS, accents,                                                                         \
      "a word's accents, when both texts use accents (año / ano, papá / papa)")                    \
    X(A, REPLACED, replaced,                                                                       \
      "one or two words replaced in a long text (32 content words or more), not by synonyms")      \
    X(A, SCRIPTS, scripts,                                                                         \
      "a word replaced on both sides in a script no word list covers (Chinese, Cyrillic...)")

#define GUARD_CALL_(A, e, name, what) A(e, name, what)
#define GUARD_LIST(X)                 GUARD_ROWS(GUARD_CALL_, X)

enum guard_kind {
#define GUARD_ENUM(e, name, what) GUARD_##e,
    GUARD_LIST(GUARD_ENUM)
#undef GUARD_ENUM
        GUARD__COUNT
};

#define GUARD_MASK(g) (1u << (g))
#define GUARD_ALL     ((1u << GUARD__COUNT) - 1)

/* Config name of g ("numbers"...), or NULL when g is out of range. */
const char *guard_name(enum guard_kind g);
/* What differs between two texts when g rejects them (for --help and logs). */
const char *guard_what(enum guard_kind g);

/*
 * The mask of the names in v[0..n): guard names, "all" or "none" (alone).
 * Returns 0 with *mask set, or -1 with err naming the bad word.
 */
int guard_parse(char *const *v, size_t n, unsigned *mask, char *err, size_t errlen);

/* The mask of semantic-guards' names v[0..n); every guard when they are not valid. */
unsigned guard_mask(char *const *v, size_t n);

/* Register the checks of semantic-guards with the configuration (pc_conf.h). */
int guard_add_conf_rules(void);

/*
 * Check the texts a[0..alen) and b[0..blen) with the guards in mask: the
 * first guard (in enum order) that rejects the pair, or GUARD__COUNT when
 * the pair passes every enabled guard.
 */
int guard_check(const char *a, size_t alen, const char *b, size_t blen, unsigned mask);

#endif
