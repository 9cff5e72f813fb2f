/*
 * hash.c - the hash embedder: hashed word, bigram and character n-gram
 * features alone (embed_ngrams), with function words weighted down. Needs no
 * file and no download; it only matches near-identical wording (same words,
 * typos, word order, inflection), never synonyms. Owns nothing beyond the
 * embedder object.
 */
#include "embed_int.h"

#include <string.h>

#define HASH_FUNCTION_WEIGHT 0.2f  /* weight of a function word; other words weigh 1 */
#define HASH_THRESHOLD       0.905 /* tools/semeval's threshold rule (see pc_embed.h) */

/* English function words: they say little about what a question asks. */
static const char *const function_words[] = {
    "a",     "an",    "the",    "of",    "to",     "in",     "on",    "at",    "for",  "by",
    "with",  "from",  "as",     "into",  "about",  "and",    "or",    "but",   "if",   "so",
    "than",  "that",  "this",   "these", "those",  "it",     "its",   "is",    "are",  "was",
    "were",  "be",    "been",   "being", "am",     "do",     "does",  "did",   "have", "has",
    "had",   "i",     "me",     "my",    "we",     "us",     "our",   "you",   "your", "he",
    "him",   "his",   "she",    "her",   "they",   "them",   "their", "there", "here", "can",
    "could", "would", "should", "will",  "shall",  "may",    "might", "must",  "some", "any",
    "all",   "also",  "just",   "very",  "really", "please", "get",   "got",   "make", "one",
    "up",    "out",   "s",      "t",     "tell",   "know",   "like",  "want",  "need", "way",
};

static bool is_function_word(const char *w)
{
    for (size_t i = 0; i < sizeof function_words / sizeof function_words[0]; i++)
        if (function_words[i][0] == w[0] && strcmp(function_words[i], w) == 0)
            return true;
    return false;
}

static int hash_open(struct embedder *e, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    e->dim = e->opts.hash_dim;
    e->threshold = HASH_THRESHOLD;
    embed_name_space(e, "hash");
    return 0;
}

/* Character trigrams alone, weighted up: the n-grams are all this embedder has. */
static void hash_defaults(struct embed_opts *o)
{
    o->char_max = 3;
    o->w_char = 2.0f;
}

static void hash_close(struct embedder *e)
{
    (void)e;
}

static void hash_embed(const struct embedder *e, struct embed_scratch *s, float *out)
{
    for (size_t i = 0; i < s->doc.n; i++)
        if (s->w[i] > 0 && is_function_word(text_str(&s->doc, i)))
            s->w[i] = HASH_FUNCTION_WEIGHT;
    embed_ngrams(&e->opts, s, out);
}

const struct embed_ops embed_hash_ops = {
    .name = "hash",
    .defaults = hash_defaults,
    .open = hash_open,
    .close = hash_close,
    .embed = hash_embed,
    EMBED_LOCAL_PORT,
};
