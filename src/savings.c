/*
 * savings.c - money and tokens saved or spent, counted per answer (see
 * pc_savings.h). Owns nothing but the worker's record of which of its own
 * calls' tokens are already priced (struct worker own_priced).
 */
#include "pc_savings.h"
#include "pc_conf.h"
#include "pc_log.h"
#include "pc_pricing.h"
#include "pc_stats.h"
#include "pc_context.h"

#include <string.h>

/* The price of model, or NULL; warns once per model when a list is loaded but lacks it. */
static const struct price *price_of(struct worker *w, const char *model)
{
    const struct pricing *p = w->conf->prices;
    if (p == NULL)
        return NULL;
    const struct price *pr = pricing_find(p, model);
    if (pr == NULL) {
        stats_incr(&w->stats, STAT_answers_unpriced);
        if (pricing_warn_once(model))
            log_warn("pricing: %s has no price for model \"%.64s\": its tokens are counted, its "
                     "money is unknown",
                     pricing_path(p), model ? model : "-");
    }
    return pr;
}

/* Tokens of one answer by kind into a token-labelled family. */
static void add_tokens(struct worker *w, enum stat_family f, struct stat_labels *l,
                       const struct pricing_tokens *t)
{
    const int64_t n[STATS_TOKEN_N] = {t->input, t->cache_read, t->cache_write, t->output};
    for (int k = 0; k < STATS_TOKEN_N; k++) {
        l->token = k;
        stats_fam_add(&w->stats, f, l, n[k]);
    }
}

void savings_hit(struct worker *w, const char *model, enum cache_match match,
                 const struct api_usage *u, int64_t orig_latency_ms, int64_t took_us,
                 int64_t v[TALLY__COUNT], struct savings *out)
{
    memset(out, 0, sizeof(*out));
    struct pricing_tokens t;
    pricing_tokens_of(u, &t);
    bool semantic = match == CACHE_MATCH_SEMANTIC;
    struct stat_labels l = {.match = semantic ? 1 : 0, .model = stats_model_slot(model, true)};
    add_tokens(w, SF_saved_tokens, &l, &t);
    stats_add(&w->stats, STAT_tokens_saved_cached, t.cache_read);
    stats_add(&w->stats, STAT_tokens_saved_cache_write, t.cache_write);
    out->latency_saved_ms = PC_MAX(orig_latency_ms - took_us / 1000, 0);
    stats_fam_add(&w->stats, SF_latency_saved_seconds, &l, out->latency_saved_ms);
    const struct price *pr = u->present ? price_of(w, model) : NULL;
    if (pr != NULL) {
        out->priced = true;
        out->amount = pricing_cost(pr, &t);
        stats_fam_add(&w->stats, SF_saved_cost, &l, pricing_nano(out->amount));
    }
    v[TALLY_saved_cached_tokens] += t.cache_read;
    v[TALLY_saved_cache_write_tokens] += t.cache_write;
    v[TALLY_saved_cache_write_1h_tokens] += t.cache_write_1h;
    v[TALLY_saved_audio_prompt_tokens] += t.audio_input;
    v[TALLY_saved_audio_completion_tokens] += t.audio_output;
    v[TALLY_latency_saved_ms] += out->latency_saved_ms;
    if (semantic) {
        v[TALLY_semantic_saved_prompt_tokens] += u->present ? u->prompt : 0;
        v[TALLY_semantic_saved_cached_tokens] += t.cache_read;
        v[TALLY_semantic_saved_cache_write_tokens] += t.cache_write;
        v[TALLY_semantic_saved_cache_write_1h_tokens] += t.cache_write_1h;
        v[TALLY_semantic_saved_audio_prompt_tokens] += t.audio_input;
        v[TALLY_semantic_saved_audio_completion_tokens] += t.audio_output;
        v[TALLY_semantic_saved_completion_tokens] += t.output;
        v[TALLY_semantic_latency_saved_ms] += out->latency_saved_ms;
    }
}

void savings_upstream(struct worker *w, const char *model, const struct api_usage *u,
                      int64_t v[TALLY__COUNT], struct savings *out)
{
    memset(out, 0, sizeof(*out));
    struct pricing_tokens t;
    pricing_tokens_of(u, &t);
    struct stat_labels l = {.model = stats_model_slot(model, true)};
    add_tokens(w, SF_upstream_tokens, &l, &t);
    const struct price *pr = price_of(w, model);
    if (pr != NULL) {
        out->priced = true;
        out->amount = pricing_cost(pr, &t);
        stats_fam_add(&w->stats, SF_upstream_cost, &l, pricing_nano(out->amount));
        stats_fam_add(&w->stats, SF_provider_cache_saved_cost, &l,
                      pricing_nano(pricing_cache_saving(pr, &t)));
        stats_fam_add(&w->stats, SF_provider_cache_write_premium_cost, &l,
                      pricing_nano(pricing_write_premium(pr, &t)));
    }
    v[TALLY_upstream_cached_tokens] += t.cache_read;
    v[TALLY_upstream_cache_write_tokens] += t.cache_write;
    v[TALLY_upstream_cache_write_1h_tokens] += t.cache_write_1h;
    v[TALLY_upstream_audio_prompt_tokens] += t.audio_input;
    v[TALLY_upstream_audio_completion_tokens] += t.audio_output;
}

void savings_price(const struct worker *w, const char *model, const struct api_usage *u,
                   struct savings *out)
{
    memset(out, 0, sizeof(*out));
    const struct price *pr = u->present ? pricing_find(w->conf->prices, model) : NULL;
    if (pr == NULL)
        return;
    struct pricing_tokens t;
    pricing_tokens_of(u, &t);
    out->priced = true;
    out->amount = pricing_cost(pr, &t);
}

/* Price in and out tokens of one caller's model; counted in the families and the tally. */
static void own_add(struct worker *w, enum stat_caller who, const char *model, int64_t in,
                    int64_t outn)
{
    if (in <= 0 && outn <= 0)
        return;
    struct stat_labels l = {.caller = who, .token = ST_INPUT};
    stats_fam_add(&w->stats, SF_own_calls_tokens, &l, in);
    l.token = ST_OUTPUT;
    stats_fam_add(&w->stats, SF_own_calls_tokens, &l, outn);
    const struct price *pr = model[0] != '\0' ? price_of(w, model) : NULL;
    if (pr != NULL) {
        struct pricing_tokens t = {.input = in, .output = outn};
        stats_fam_add(&w->stats, SF_own_calls_cost, &l, pricing_nano(pricing_cost(pr, &t)));
    }
    int64_t v[TALLY__COUNT] = {0};
    v[TALLY_own_prompt_tokens] = in;
    v[TALLY_own_completion_tokens] = outn;
    tally_add(w->tally, model[0] != '\0' ? model : NULL, "-", true, v);
}

void savings_own_calls(struct worker *w)
{
    int64_t now[3] = {
        (int64_t)__atomic_load_n(&w->stats.v[STAT_semantic_embed_tokens], __ATOMIC_RELAXED),
        (int64_t)__atomic_load_n(&w->stats.v[STAT_semantic_verify_tokens], __ATOMIC_RELAXED),
        (int64_t)__atomic_load_n(&w->stats.v[STAT_semantic_verify_completion_tokens],
                                 __ATOMIC_RELAXED),
    };
    if (memcmp(now, w->own_priced, sizeof(now)) == 0)
        return;
    int64_t embed = now[0] - w->own_priced[0];
    int64_t vout = now[2] - w->own_priced[2];
    int64_t vin = now[1] - w->own_priced[1] - vout;
    memcpy(w->own_priced, now, sizeof(now));
    own_add(w, SCALLER_EMBEDDER, w->conf->embedder_model, embed, 0);
    own_add(w, SCALLER_VERIFIER, w->conf->semantic_verify_model, vin, vout);
}
