/*
 * pc_pricing.h - list prices per model, and what a call costs at them.
 *
 * A price list is read from a JSON file in one of two formats, told apart by
 * their shape:
 *   - the project's own: {"currency": "USD", "source": "...", "date":
 *     "YYYY-MM-DD", "models": {NAME: {"input": N, "output": N, "cache_read":
 *     N, "cache_write": N, "cache_write_1h": N, "input_audio": N,
 *     "output_audio": N, "match": RULE}}}, prices per million tokens (all
 *     but "input" optional, as are "source" and "date").
 *     tools/prices.js writes @pydantic/genai-prices in this format (`make
 *     prices`: build/prices.json);
 *   - LiteLLM's model_prices_and_context_window.json: {NAME: {
 *     "input_cost_per_token", "output_cost_per_token",
 *     "cache_read_input_token_cost", "cache_creation_input_token_cost",
 *     "cache_creation_input_token_cost_above_1hr", "input_cost_per_audio_token",
 *     "output_cost_per_audio_token", ...}},
 *     prices per token in USD; "sample_spec" and entries without a token
 *     price (images, audio) are skipped.
 * A cache price that is not given is the input price (the provider charges
 * cached tokens in full); an hour's write that is not given is the
 * 5-minute write's price; an audio price not given is the text one. Implausible entries - a
 * negative or non-finite price, more than PRICING_MAX per million, a cache read dearer than input -
 * are refused: in the project's format the file is refused (an error naming
 * the file and the model), in LiteLLM's (thousands of entries kept by
 * others) the entry is left out with a warning naming both.
 *
 * Names: a model is priced by the entry of its own name; else by the first
 * entry (in the file's order) whose match rule takes the name in lower case;
 * else by an entry it only extends with a date or tag
 * ("gpt-4o-mini-2024-07-18" by "gpt-4o-mini": -YYYY-MM-DD, -YYYYMMDD,
 * -latest, @..., :...), never by a different model that starts the same
 * ("claude-opus-4-5" is not "claude-opus-4"). A name with a vendor's
 * prefix ("openai/gpt-4o", "anthropic/claude-sonnet-4.5") is priced by the
 * entry of its own name, else as the name without the prefix, and only then
 * as above (another provider's rule may take the prefixed name).
 * LiteLLM entries named "openai/X" or "anthropic/X" also price "X" when the
 * file has no entry "X" itself.
 *
 * A match rule is genai-prices' vocabulary, one member per object:
 * {"equals": S}, {"starts_with": S}, {"ends_with": S}, {"contains": S},
 * {"regex": POSIX-ERE}, {"or": [RULE...]}, {"and": [RULE...]}, {"not": RULE};
 * at most PRICING_RULE_DEPTH deep, strings of at most PRICING_RULE_STR bytes.
 *
 * Where the prices come from: the list's "source" and "date" (a name and
 * version, and the day the prices are of); without them the file's name and
 * its modification day (LiteLLM's file says neither: "LiteLLM").
 *
 * A struct pricing is immutable once loaded and reference counted, so a
 * configuration snapshot (pc_conf.h) can share it across threads and a
 * reload can replace it without a lock.
 */
#ifndef PC_PRICING_H
#define PC_PRICING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_util.h"

struct api_usage;
struct pricing;

#define PRICING_MAX        10000.0 /* per million tokens: anything dearer is a mistake */
#define PRICING_FILE_MAX   (64 * 1024 * 1024)
#define PRICING_NAME_MAX   64 /* model names are matched as the tally stores them */
#define PRICING_RULE_DEPTH 8
#define PRICING_RULE_STR   256
#define PRICING_SOURCE_MAX 120 /* bytes of "source" kept (shown in labels and tables) */

enum pricing_format {
    PRICING_OWN = 0, /* the project's per-million format */
    PRICING_LITELLM,
};

struct pricing_rule;

/*
 * One model's prices, per million tokens, in the list's currency;
 * cache_write_1h is a write kept for an hour (Anthropic), cache_write the
 * 5-minute one.
 */
struct price {
    char *model;
    double input, output, cache_read, cache_write, cache_write_1h;
    double input_audio, output_audio; /* audio tokens in and out (OpenAI's audio models) */
    struct pricing_rule *match;       /* the names it also prices, or NULL (owned by the list) */
};

/* A call's tokens as they are billed: prompt tokens split by how they were read. */
struct pricing_tokens {
    int64_t input;       /* prompt tokens read in full (neither read from nor written to a cache) */
    int64_t cache_read;  /* prompt tokens read from the provider's prompt cache */
    int64_t cache_write; /* prompt tokens written to it (Anthropic, at a premium) */
    int64_t cache_write_1h; /* of cache_write, those written for an hour (a higher premium) */
    int64_t audio_input;    /* of input, audio tokens (their own price) */
    int64_t audio_output;   /* of output, audio tokens */
    int64_t output;         /* completion tokens */
};

/*
 * Parse a price list; name is how messages call it (the file's path). NULL on
 * error, with the reason in err ("NAME: ..."); warnings about entries left
 * out are appended to warns (one line each; warns may be NULL).
 */
struct pricing *pricing_parse(const char *json, size_t len, const char *name, char *err,
                              size_t errlen, struct pc_buf *warns);
/* The same for a file (at most PRICING_FILE_MAX bytes). */
struct pricing *pricing_load(const char *path, char *err, size_t errlen, struct pc_buf *warns);
/* Another reference to p (NULL stays NULL). */
struct pricing *pricing_ref(struct pricing *p);
/* Drop a reference; *p is NULLed. */
void pricing_release(struct pricing **p);

const char *pricing_path(const struct pricing *p);
const char *pricing_currency(const struct pricing *p);
/* Where the prices come from ("@pydantic/genai-prices 0.1.8", "LiteLLM", a file name). */
const char *pricing_source(const struct pricing *p);
/* The day they are of, YYYY-MM-DD ("" when unknown: a list parsed from memory without one). */
const char *pricing_date(const struct pricing *p);
enum pricing_format pricing_format(const struct pricing *p);
const char *pricing_format_name(enum pricing_format f); /* "promptcache", "litellm" */
size_t pricing_count(const struct pricing *p);
/* Whether a and b hold the same prices (either may be NULL). */
bool pricing_same(const struct pricing *a, const struct pricing *b);

/*
 * The price of model, or NULL (p may be NULL: nothing is priced). Answers
 * are remembered per list (a bounded table under a lock), so a name no rule
 * prices costs one scan of the rules, not one per request. Thread-safe.
 */
const struct price *pricing_find(const struct pricing *p, const char *model);
/* Whether rule takes name (as given: pricing_find lowers the case first). */
bool pricing_rule_match(const struct pricing_rule *rule, const char *name);

/*
 * The list in /stats: "currency" and "pricing" members (after a comma) with
 * the file, format, count, source, date and the models answered since start
 * that the list does not price; null members with no list.
 */
void pricing_render_json(const struct pricing *p, struct pc_buf *out);
/* The promptcache_pricing_info series of /metrics (nothing with no list). */
void pricing_render_prometheus(const struct pricing *p, struct pc_buf *out);

/*
 * Split a usage block into billed tokens (uncached input = prompt - read -
 * written). The one clamp rule of every money figure: negative counts are 0,
 * cache reads are at most the prompt tokens, cache writes at most what is
 * left of them, 1-hour writes at most the writes, audio at most the uncached
 * input (output).
 */
void pricing_tokens_of(const struct api_usage *u, struct pricing_tokens *t);
/* What the tokens cost at pr, in the list's currency. */
double pricing_cost(const struct price *pr, const struct pricing_tokens *t);
/* Provider prefix caching: what reading cache_read tokens from the cache saved. */
double pricing_cache_saving(const struct price *pr, const struct pricing_tokens *t);
/* ... and what writing cache_write tokens cost beyond the input price. */
double pricing_write_premium(const struct price *pr, const struct pricing_tokens *t);
/* An amount in billionths of the currency unit (rounded), the unit the counters add up. */
int64_t pricing_nano(double amount);

/*
 * Whether this process should warn now that model has no price: true the
 * first time a model is seen (up to a bound on distinct names), false after.
 * Thread-safe.
 */
bool pricing_warn_once(const char *model);

/*
 * The list for the default `pricing`: first the maintained one, prices.json
 * (genai-prices converted by `make prices`) next to the binary or one or two
 * folders up (build/promptcache, build/asan/promptcache, build/asan/tests/...),
 * in ../share/promptcache/ (an installed binary) or /etc/promptcache/; else
 * the shipped hand-copied pricing.json in ../conf/, ../../conf/ or
 * ../../../conf/ from the binary, ../share/promptcache/ or /etc/promptcache/.
 * Writes the path found into out and returns 0; -1 if none exists (out then
 * lists where it looked).
 */
int pricing_default_path(char *out, size_t outlen);

/*
 * Register the key pricing with the configuration (pc_conf.h): a conf's
 * prices are the list its pricing names, loaded with it and shared by its
 * copies; a reload takes a list whose file changed.
 */
int pricing_add_conf_rules(void);

#endif
