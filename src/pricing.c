/*
 * pricing.c - price lists and the cost of a call (see pc_pricing.h). Owns
 * the loaded lists (immutable, reference counted) and the process-wide set
 * of models already warned about.
 *
 *   file ─▶ detect format ─▶ one entry per model (per million, validated)
 *        ─▶ provider aliases (LiteLLM "openai/X" also prices "X")
 *   pricing_find(model): exact ─▶ without provider prefix ─▶ dated/tagged name
 */
#include "pc_pricing.h"
#include "pc_api.h"
#include "pc_tally.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define PRICING_MAGIC 0x50524943u /* "PRIC" */
#define WARN_MAX      1000        /* distinct unpriced models remembered */

struct pricing {
    unsigned magic;
    int refs; /* atomic */
    enum pricing_format format;
    char *path;
    char *currency;
    struct price *v;
    size_t n;
    uint64_t digest; /* of the prices themselves, for pricing_same */
};

/* Providers whose LiteLLM prefix names the models the proxy sees without it. */
static const char *const bare_providers[] = {"openai/", "anthropic/", "text-completion-openai/"};

const char *pricing_format_name(enum pricing_format f)
{
    return f == PRICING_LITELLM ? "litellm" : "promptcache";
}

/* ---- building a list -------------------------------------------------------- */

static struct price *entry_get(struct pricing *p, const char *model)
{
    char name[TALLY_MODEL_MAX + 1];
    tally_model(model, name);
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].model, name) == 0)
            return &p->v[i]; /* a repeated name: the last one counts */
    p->v = pc_realloc(p->v, (p->n + 1) * sizeof(*p->v));
    struct price *e = &p->v[p->n++];
    memset(e, 0, sizeof(*e));
    e->model = pc_strdup(name);
    return e;
}

/* Per-million figures rounded to 1e-9, so 1.5e-07 per token and 0.15 per million agree. */
static double per_million(double v, bool per_token)
{
    return per_token ? round(v * 1e6 * 1e9) / 1e9 : v;
}

/* A price member: absent (fallback), or a finite number in [0, PRICING_MAX]. -1 if bad. */
static int price_member(const cJSON *obj, const char *key, bool per_token, double fallback,
                        double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v == NULL || cJSON_IsNull(v)) {
        *out = fallback;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return -1;
    *out = per_million(v->valuedouble, per_token);
    return *out >= 0 && *out <= PRICING_MAX ? 0 : -1;
}

struct keys {
    const char *input, *output, *cache_read, *cache_write;
    bool per_token;
};

static const struct keys own_keys = {"input", "output", "cache_read", "cache_write", false};
static const struct keys litellm_keys = {"input_cost_per_token", "output_cost_per_token",
                                         "cache_read_input_token_cost",
                                         "cache_creation_input_token_cost", true};

/* Read one entry into pr; -1 with the reason in why. */
static int read_entry(const cJSON *m, const struct keys *k, struct price *pr, char *why,
                      size_t wlen)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(m, k->input);
    if (!cJSON_IsNumber(in) || price_member(m, k->input, k->per_token, 0, &pr->input) < 0 ||
        price_member(m, k->output, k->per_token, 0, &pr->output) < 0 ||
        price_member(m, k->cache_read, k->per_token, pr->input, &pr->cache_read) < 0 ||
        price_member(m, k->cache_write, k->per_token, pr->input, &pr->cache_write) < 0) {
        snprintf(why, wlen,
                 "\"%s\" must be a number and every price a number from 0 to %g per million "
                 "tokens",
                 k->input, PRICING_MAX);
        return -1;
    }
    if (pr->cache_read > pr->input) {
        snprintf(why, wlen, "a cache read (%g per million) dearer than input (%g)", pr->cache_read,
                 pr->input);
        return -1;
    }
    return 0;
}

static int load_own(struct pricing *p, const cJSON *root, char *err, size_t errlen)
{
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(root, "models");
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(root, "currency");
    if (cur != NULL &&
        (!cJSON_IsString(cur) || !tally_valid_model(cur->valuestring, strlen(cur->valuestring)))) {
        snprintf(err, errlen, "%s: \"currency\" must be a code such as \"USD\"", p->path);
        return -1;
    }
    p->currency = pc_strdup(cur ? cur->valuestring : "USD");
    for (const cJSON *m = models->child; m != NULL; m = m->next) {
        struct price pr = {0};
        char why[192];
        if (!cJSON_IsObject(m) || read_entry(m, &own_keys, &pr, why, sizeof why) < 0) {
            snprintf(err, errlen, "%s: model \"%.64s\": %s", p->path, m->string,
                     cJSON_IsObject(m) ? why : "not an object");
            return -1;
        }
        struct price *e = entry_get(p, m->string);
        pr.model = e->model;
        *e = pr;
    }
    return 0;
}

/* LiteLLM: entries priced per token; the rest (images, audio, the sample spec) skipped. */
static int load_litellm(struct pricing *p, const cJSON *root, struct pc_buf *warns)
{
    p->currency = pc_strdup("USD");
    for (const cJSON *m = root->child; m != NULL; m = m->next) {
        if (!cJSON_IsObject(m) || strcmp(m->string, "sample_spec") == 0 ||
            cJSON_GetObjectItemCaseSensitive(m, "input_cost_per_token") == NULL)
            continue;
        struct price pr = {0};
        char why[192];
        if (read_entry(m, &litellm_keys, &pr, why, sizeof why) < 0) {
            if (warns != NULL)
                pc_buf_printf(warns, "%s: model \"%.64s\" left out: %s\n", p->path, m->string, why);
            continue;
        }
        struct price *e = entry_get(p, m->string);
        pr.model = e->model;
        *e = pr;
    }
    return 0;
}

static const struct price *exact(const struct pricing *p, const char *name)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].model, name) == 0)
            return &p->v[i];
    return NULL;
}

/* "openai/X" also prices "X" when the file has no "X". */
static void add_aliases(struct pricing *p)
{
    size_t n = p->n;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < PC_ARRAY_LEN(bare_providers); j++) {
            size_t pl = strlen(bare_providers[j]);
            const char *bare = p->v[i].model + pl;
            if (strncmp(p->v[i].model, bare_providers[j], pl) != 0 || *bare == '\0' ||
                exact(p, bare) != NULL)
                continue;
            struct price pr = p->v[i];
            struct price *e = entry_get(p, bare);
            pr.model = e->model;
            *e = pr;
        }
    }
}

static void digest(struct pricing *p)
{
    uint64_t h = pc_fnv1a(PC_FNV_SEED, p->currency, strlen(p->currency) + 1);
    for (size_t i = 0; i < p->n; i++) {
        const struct price *e = &p->v[i];
        h = pc_fnv1a(h, e->model, strlen(e->model) + 1);
        double d[4] = {e->input, e->output, e->cache_read, e->cache_write};
        h = pc_fnv1a(h, d, sizeof d);
    }
    p->digest = h;
}

static bool looks_litellm(const cJSON *root)
{
    for (const cJSON *m = root->child; m != NULL; m = m->next)
        if (cJSON_IsObject(m) && (cJSON_GetObjectItemCaseSensitive(m, "input_cost_per_token") ||
                                  cJSON_GetObjectItemCaseSensitive(m, "litellm_provider")))
            return true;
    return false;
}

struct pricing *pricing_parse(const char *json, size_t len, const char *name, char *err,
                              size_t errlen, struct pc_buf *warns)
{
    struct pricing *p = pc_calloc(1, sizeof(*p));
    p->magic = PRICING_MAGIC;
    p->refs = 1;
    p->path = pc_strdup(name);
    cJSON *root = cJSON_ParseWithLength(json, len);
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "%s: not a JSON object", name);
        rc = -1;
    } else if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "models"))) {
        p->format = PRICING_OWN;
        rc = load_own(p, root, err, errlen);
    } else if (looks_litellm(root)) {
        p->format = PRICING_LITELLM;
        rc = load_litellm(p, root, warns);
    } else {
        snprintf(err, errlen,
                 "%s: neither the project's format ({\"models\": {NAME: {\"input\": ...}}}) nor "
                 "LiteLLM's (model_prices_and_context_window.json)",
                 name);
        rc = -1;
    }
    cJSON_Delete(root);
    if (rc < 0) {
        pricing_release(&p);
        return NULL;
    }
    if (p->format == PRICING_LITELLM)
        add_aliases(p);
    digest(p);
    return p;
}

struct pricing *pricing_load(const char *path, char *err, size_t errlen, struct pc_buf *warns)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct pc_buf b = PC_BUF_INIT;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len <= PRICING_FILE_MAX)
        pc_buf_append(&b, chunk, n);
    bool failed = ferror(f) != 0;
    fclose(f);
    struct pricing *p = NULL;
    if (failed)
        snprintf(err, errlen, "%s: cannot read it", path);
    else if (b.len > PRICING_FILE_MAX)
        snprintf(err, errlen, "%s: larger than %d bytes", path, PRICING_FILE_MAX);
    else
        p = pricing_parse(b.data ? b.data : "", b.len, path, err, errlen, warns);
    pc_buf_free(&b);
    return p;
}

struct pricing *pricing_ref(struct pricing *p)
{
    if (p != NULL) {
        PC_CHECK_OBJ(p, PRICING_MAGIC);
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    }
    return p;
}

void pricing_release(struct pricing **pp)
{
    struct pricing *p = *pp;
    if (p == NULL)
        return;
    *pp = NULL;
    PC_CHECK_OBJ(p, PRICING_MAGIC);
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i].model);
    free(p->v);
    free(p->path);
    free(p->currency);
    p->magic = 0;
    free(p);
}

const char *pricing_path(const struct pricing *p)
{
    return p->path;
}

const char *pricing_currency(const struct pricing *p)
{
    return p->currency;
}

enum pricing_format pricing_format(const struct pricing *p)
{
    return p->format;
}

size_t pricing_count(const struct pricing *p)
{
    return p->n;
}

bool pricing_same(const struct pricing *a, const struct pricing *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return a->digest == b->digest && a->n == b->n && strcmp(a->currency, b->currency) == 0;
}

/* ---- lookups ---------------------------------------------------------------- */

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return n > 0;
}

/* Whether what follows a priced name only dates or tags it. */
static bool version_suffix(const char *s)
{
    size_t n = strlen(s);
    if (s[0] == '@' || s[0] == ':' || strcmp(s, "-latest") == 0)
        return true;
    if (n == 9 && s[0] == '-' && all_digits(s + 1, 8)) /* -YYYYMMDD */
        return true;
    return n == 11 && s[0] == '-' && all_digits(s + 1, 4) && s[5] == '-' && all_digits(s + 6, 2) &&
           s[8] == '-' && all_digits(s + 9, 2); /* -YYYY-MM-DD */
}

static const struct price *by_name(const struct pricing *p, const char *name)
{
    const struct price *e = exact(p, name);
    if (e != NULL)
        return e;
    for (size_t i = 0; i < p->n; i++) {
        size_t n = strlen(p->v[i].model);
        if (strncmp(name, p->v[i].model, n) == 0 && name[n] != '\0' && version_suffix(name + n))
            return &p->v[i];
    }
    return NULL;
}

const struct price *pricing_find(const struct pricing *p, const char *model)
{
    if (p == NULL || model == NULL)
        return NULL;
    char name[TALLY_MODEL_MAX + 1];
    tally_model(model, name);
    const struct price *e = by_name(p, name);
    for (size_t j = 0; e == NULL && j < PC_ARRAY_LEN(bare_providers); j++) {
        size_t pl = strlen(bare_providers[j]);
        if (strncmp(name, bare_providers[j], pl) == 0 && name[pl] != '\0')
            e = by_name(p, name + pl);
    }
    return e;
}

/* ---- costs ------------------------------------------------------------------ */

void pricing_tokens_of(const struct api_usage *u, struct pricing_tokens *t)
{
    memset(t, 0, sizeof(*t));
    if (u == NULL || !u->present)
        return;
    t->cache_read = PC_MAX(u->cached, 0);
    t->cache_write = PC_MAX(u->cache_write, 0);
    t->input = PC_MAX(u->prompt - t->cache_read - t->cache_write, 0);
    t->output = PC_MAX(u->completion, 0);
}

double pricing_cost(const struct price *pr, const struct pricing_tokens *t)
{
    return ((double)t->input * pr->input + (double)t->cache_read * pr->cache_read +
            (double)t->cache_write * pr->cache_write + (double)t->output * pr->output) /
           1e6;
}

double pricing_cache_saving(const struct price *pr, const struct pricing_tokens *t)
{
    return (double)t->cache_read * (pr->input - pr->cache_read) / 1e6;
}

double pricing_write_premium(const struct price *pr, const struct pricing_tokens *t)
{
    return (double)t->cache_write * PC_MAX(pr->cache_write - pr->input, 0.0) / 1e6;
}

int64_t pricing_nano(double amount)
{
    if (!isfinite(amount) || amount <= 0)
        return 0;
    return amount >= 9e9 ? INT64_C(9000000000000000000) : (int64_t)llround(amount * 1e9);
}

/* ---- warnings --------------------------------------------------------------- */

static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static char *warned[WARN_MAX];
static size_t nwarned;

bool pricing_warn_once(const char *model)
{
    char name[TALLY_MODEL_MAX + 1];
    tally_model(model, name);
    bool first = true;
    pthread_mutex_lock(&warn_mu);
    for (size_t i = 0; i < nwarned && first; i++)
        first = strcmp(warned[i], name) != 0;
    if (first && nwarned < WARN_MAX)
        warned[nwarned++] = pc_strdup(name);
    else if (first)
        first = false; /* beyond the bound: quiet, so a client cannot flood the log */
    pthread_mutex_unlock(&warn_mu);
    return first;
}

/* ---- the shipped list ----------------------------------------------------------- */

int pricing_default_path(char *out, size_t outlen)
{
    /* Build trees: build/, build/asan/, build/asan/tests/; then an installed binary. */
    static const char *const rel[] = {"/../conf/pricing.json", "/../../conf/pricing.json",
                                      "/../../../conf/pricing.json",
                                      "/../share/promptcache/pricing.json"};
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL)
            *slash = '\0';
        for (size_t i = 0; i < PC_ARRAY_LEN(rel); i++) {
            char cand[PATH_MAX + 64], real[PATH_MAX];
            snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
            if (access(cand, R_OK) == 0) {
                snprintf(out, outlen, "%s", realpath(cand, real) ? real : cand);
                return 0;
            }
        }
    }
    snprintf(out, outlen, "/etc/promptcache/pricing.json");
    if (access(out, R_OK) == 0)
        return 0;
    snprintf(out, outlen, "%s{%s,%s,%s,%s}, /etc/promptcache/pricing.json",
             k > 0 ? exe : "(binary)", rel[0], rel[1], rel[2], rel[3]);
    return -1;
}
