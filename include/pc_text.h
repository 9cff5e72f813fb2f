/*
 * pc_text.h - text normalisation shared by the embedders and the semantic
 * guards: a UTF-8-safe tokenizer that folds case and Latin accents, keeps
 * numbers whole ("22.04", "1,000" -> "1000"), splits English contractions
 * ("don't" -> "do not", "it's" -> "it") and records, per token, how it was
 * written (capitalised, all caps, mixed case, sentence start) for the guards.
 *
 * Contract: any bytes are accepted (invalid UTF-8 is a separator, never read
 * past len, never NUL-terminated input required); the work is bounded by
 * TEXT_MAX_TOKENS and TEXT_TOK_MAX whatever the input. The caller owns the
 * text_doc (about 70 KB: allocate it, do not put it on a small thread
 * stack); only text_tokenize_capped allocates (a scratch document, for
 * texts longer than its cap). Pure functions: safe on any thread.
 */
#ifndef PC_TEXT_H
#define PC_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TEXT_MAX_TOKENS 1024 /* tokens kept per document; the rest is ignored */
#define TEXT_TOK_MAX    48   /* normalised bytes kept per token (longer ones are cut) */
/* Bytes of a text the embedders and the guards read: the first and last half. */
#define TEXT_MAX_READ 8192

enum text_kind {
    TEXT_WORD = 0, /* letters, possibly with digits ("iphone16", "5km") */
    TEXT_NUM,      /* digits with optional inner '.' ("2024", "22.04") */
    TEXT_CJK,      /* one ideograph / kana / hangul syllable */
};

/* How the token was written (raw text), for entity detection. */
#define TEXT_F_CAP     0x01u /* first letter upper case */
#define TEXT_F_ALLCAPS 0x02u /* two or more letters, all upper case */
#define TEXT_F_MIXED   0x04u /* an upper-case letter after a lower-case one (iPhone) */
#define TEXT_F_DIGIT   0x08u /* contains a digit */
#define TEXT_F_ALPHA   0x10u /* contains a letter */
#define TEXT_F_START   0x20u /* first token of the text or of a sentence */
#define TEXT_F_SYNTH   0x40u /* produced by a contraction ("not" of "don't") */
#define TEXT_F_FILLER  0x80u /* part of a politeness phrase (text_mark_fillers) */

struct text_tok {
    const char *raw;  /* where the token starts in the caller's text */
    uint32_t raw_len; /* bytes of the raw token (the whole contraction for its parts) */
    uint32_t off;     /* normalised form: doc->buf[off .. off+len) */
    uint8_t len;      /* 1..TEXT_TOK_MAX */
    uint8_t kind;     /* enum text_kind */
    uint8_t flags;    /* TEXT_F_* */
};

struct text_doc {
    size_t n; /* tokens */
    size_t buflen;
    bool truncated; /* tokens were dropped at TEXT_MAX_TOKENS */
    struct text_tok tok[TEXT_MAX_TOKENS];
    char buf[TEXT_MAX_TOKENS * (TEXT_TOK_MAX + 1)];
};

/* Empty the document. */
void text_doc_reset(struct text_doc *d);

/*
 * Tokenize s[0..len) and append its tokens to d (a later call continues the
 * same document: the embedder feeds the head and the tail of a long text).
 */
void text_tokenize(struct text_doc *d, const char *s, size_t len);

/* The normalised bytes of token i. */
static inline const char *text_str(const struct text_doc *d, size_t i)
{
    return d->buf + d->tok[i].off;
}

/*
 * Flag with TEXT_F_FILLER the tokens of phrases that do not change what a
 * question asks: greetings, thanks, "please", "quick question", "can you
 * tell me", "i was wondering"... Both the embedders (weight 0) and the
 * guards (not content) skip them.
 */
void text_mark_fillers(struct text_doc *d);

/*
 * Whether token i's normalised form equals the NUL-terminated word w.
 */
bool text_is(const struct text_doc *d, size_t i, const char *w);

/*
 * Light English singular form of w[0..n) into out (at least n + 1 bytes):
 * "queries" -> "query", "boxes" -> "box", "shops" -> "shop"; words that only
 * look plural ("bus", "class", "analysis") are kept. Returns the length.
 */
size_t text_singular(const char *w, size_t n, char *out);

/*
 * The head and tail of a long text: when len > max, [0, head) and
 * [len - tail, len) with head + tail <= max, both cut on UTF-8 character
 * boundaries; otherwise the whole text (tail 0).
 */
void text_cap(const char *s, size_t len, size_t max, size_t *head, size_t *tail);

/*
 * Reset d and tokenize s[0..len) capped to max bytes (text_cap): the head,
 * then the tail (its last tokens when it has too many), each given at least
 * half of the TEXT_MAX_TOKENS; then mark the fillers. Every caller that caps the work on long
 * texts uses it, so embedders and guards see the same words.
 */
void text_tokenize_capped(struct text_doc *d, const char *s, size_t len, size_t max);

#endif
