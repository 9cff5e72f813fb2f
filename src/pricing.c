/*
 * pricing.c - price lists and the cost of a call (see pc_pricing.h). Owns
 * the loaded lists (immutable, reference counted) and the process-wide set
 * of models already warned about.
 *
 *   file ─▶ detect format ─▶ one entry per model (per million, validated,
 *        match rules compiled) ─▶ provider aliases (LiteLLM "openai/X" also
 *        prices "X") ─▶ source and date (the list's, else the file's)
 *   pricing_find(model): memo ─▶ exact ─▶ first matching rule ─▶ dated/tagged
 *        name ─▶ the same without a provider prefix ─▶ memo
 */
#include "pc_pricing.h"
#include "pc_api.h"
#include "pc_conf.h"
#include "pc_secret.h"
#include "pc_tally.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define PRICING_MAGIC  0x50524943u /* "PRIC" */
#define WARN_MAX       1000        /* distinct unpriced models remembered */
#define RULE_KIDS_MAX  256         /* alternatives of one "or" / "and" */
#define MEMO_SLOTS     1024        /* names remembered per list (a power of two) */
#define UNPRICED_SHOWN 50          /* names listed in /stats */

enum rule_op {
    RULE_EQUALS = 0,
    RULE_STARTS,
    RULE_ENDS,
    RULE_CONTAINS,
    RULE_REGEX,
    RULE_OR,
    RULE_AND,
    RULE_NOT
};

struct pricing_rule {
    enum rule_op op;
    char *s; /* the string of equals .. regex */
    size_t len;
    regex_t re;
    bool compiled;             /* re holds a compiled expression */
    struct pricing_rule *kids; /* or, and: n of them; not: one */
    size_t n;
};

static const struct {
    const char *name;
    enum rule_op op;
} rule_ops[] = {{"equals", RULE_EQUALS},  {"starts_with", RULE_STARTS},
                {"ends_with", RULE_ENDS}, {"contains", RULE_CONTAINS},
                {"regex", RULE_REGEX},    {"or", RULE_OR},
                {"and", RULE_AND},        {"not", RULE_NOT}};

/* Answers of pricing_find by name: an index into v, or -1 (unpriced). */
struct memo {
    pthread_mutex_t mu;
    size_t used;
    struct {
        char name[TALLY_MODEL_MAX + 1]; /* "" = free */
        int idx;
    } slot[MEMO_SLOTS];
};

struct pricing {
    unsigned magic;
    int refs; /* atomic */
    enum pricing_format format;
    char *path;
    char *currency;
    char *source;
    char date[11]; /* YYYY-MM-DD or "" */
    struct price *v;
    size_t n;
    size_t nrules;         /* entries with a match rule */
    uint64_t rules_digest; /* of the rules as they were written */
    uint64_t digest;       /* of the prices, rules, source and date, for pricing_same */
    struct memo *memo;
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
    model_clean(model, name);
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

/* ---- match rules ------------------------------------------------------------ */

static void rule_free(struct pricing_rule *r)
{
    free(r->s);
    if (r->compiled)
        regfree(&r->re);
    for (size_t i = 0; i < r->n; i++)
        rule_free(&r->kids[i]);
    free(r->kids);
    memset(r, 0, sizeof(*r));
}

static int rule_parse(const cJSON *j, int depth, struct pricing_rule *r, char *why, size_t wlen);

/* The operands of or / and (an array) or not (one rule). */
static int rule_kids(const cJSON *v, int depth, struct pricing_rule *r, char *why, size_t wlen)
{
    if (depth >= PRICING_RULE_DEPTH) {
        snprintf(why, wlen, "a match rule nested deeper than %d", PRICING_RULE_DEPTH);
        return -1;
    }
    bool one = r->op == RULE_NOT;
    int n = one ? 1 : cJSON_GetArraySize(v);
    if ((one && !cJSON_IsObject(v)) ||
        (!one && (!cJSON_IsArray(v) || n < 1 || n > RULE_KIDS_MAX))) {
        snprintf(why, wlen, "\"%s\" takes %s",
                 one                ? "not"
                 : r->op == RULE_OR ? "or"
                                    : "and",
                 one ? "a rule" : "an array of 1 to 256 rules");
        return -1;
    }
    r->kids = pc_calloc((size_t)n, sizeof(*r->kids));
    r->n = (size_t)n;
    const cJSON *k = one ? v : v->child;
    for (size_t i = 0; i < r->n; i++, k = k->next)
        if (rule_parse(k, depth + 1, &r->kids[i], why, wlen) < 0)
            return -1;
    return 0;
}

/* A string operand; a regex is compiled as POSIX extended. */
static int rule_string(const cJSON *v, struct pricing_rule *r, const char *op, char *why,
                       size_t wlen)
{
    size_t len = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    if (len == 0 || len > PRICING_RULE_STR) {
        snprintf(why, wlen, "\"%s\" takes a string of 1 to %d bytes", op, PRICING_RULE_STR);
        return -1;
    }
    r->s = pc_strdup(v->valuestring);
    r->len = len;
    if (r->op != RULE_REGEX)
        return 0;
    int rc = regcomp(&r->re, r->s, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[64];
        regerror(rc, &r->re, msg, sizeof msg);
        snprintf(why, wlen, "regex \"%.64s\": %s (POSIX extended syntax)", r->s, msg);
        return -1;
    }
    r->compiled = true;
    return 0;
}

/* One rule: an object of one member naming its operation. -1 with the reason in why. */
static int rule_parse(const cJSON *j, int depth, struct pricing_rule *r, char *why, size_t wlen)
{
    const cJSON *m = cJSON_IsObject(j) ? j->child : NULL;
    if (m == NULL || m->next != NULL) {
        snprintf(why, wlen, "a match rule is an object of one member (\"equals\", ...)");
        return -1;
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(rule_ops); i++) {
        if (strcmp(m->string, rule_ops[i].name) != 0)
            continue;
        r->op = rule_ops[i].op;
        return r->op >= RULE_OR ? rule_kids(m, depth, r, why, wlen)
                                : rule_string(m, r, rule_ops[i].name, why, wlen);
    }
    snprintf(why, wlen,
             "unknown match rule \"%.32s\" (equals, starts_with, ends_with, contains, regex, or, "
             "and, not)",
             m->string);
    return -1;
}

bool pricing_rule_match(const struct pricing_rule *r, const char *name)
{
    size_t nl = strlen(name);
    switch (r->op) {
    case RULE_EQUALS:
        return strcmp(name, r->s) == 0;
    case RULE_STARTS:
        return strncmp(name, r->s, r->len) == 0;
    case RULE_ENDS:
        return nl >= r->len && memcmp(name + nl - r->len, r->s, r->len) == 0;
    case RULE_CONTAINS:
        return strstr(name, r->s) != NULL;
    case RULE_REGEX:
        return regexec(&r->re, name, 0, NULL, 0) == 0;
    case RULE_NOT:
        return !pricing_rule_match(&r->kids[0], name);
    case RULE_OR:
    case RULE_AND: {
        /* or: the first kid that matches decides; and: the first that does not. */
        bool want = r->op == RULE_OR;
        for (size_t i = 0; i < r->n; i++)
            if (pricing_rule_match(&r->kids[i], name) == want)
                return want;
        return !want;
    }
    }
    return false;
}

struct keys {
    const char *input, *output, *cache_read, *cache_write, *cache_write_1h, *input_audio,
        *output_audio;
    bool per_token;
};

static const struct keys own_keys = {"input",          "output",      "cache_read",   "cache_write",
                                     "cache_write_1h", "input_audio", "output_audio", false};
static const struct keys litellm_keys = {"input_cost_per_token",
                                         "output_cost_per_token",
                                         "cache_read_input_token_cost",
                                         "cache_creation_input_token_cost",
                                         "cache_creation_input_token_cost_above_1hr",
                                         "input_cost_per_audio_token",
                                         "output_cost_per_audio_token",
                                         true};

/* Read one entry into pr; -1 with the reason in why. */
static int read_entry(const cJSON *m, const struct keys *k, struct price *pr, char *why,
                      size_t wlen)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(m, k->input);
    if (!cJSON_IsNumber(in) || price_member(m, k->input, k->per_token, 0, &pr->input) < 0 ||
        price_member(m, k->output, k->per_token, 0, &pr->output) < 0 ||
        price_member(m, k->cache_read, k->per_token, pr->input, &pr->cache_read) < 0 ||
        price_member(m, k->cache_write, k->per_token, pr->input, &pr->cache_write) < 0 ||
        price_member(m, k->cache_write_1h, k->per_token, pr->cache_write, &pr->cache_write_1h) <
            0 ||
        price_member(m, k->input_audio, k->per_token, pr->input, &pr->input_audio) < 0 ||
        price_member(m, k->output_audio, k->per_token, pr->output, &pr->output_audio) < 0) {
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

/* A model's match rule (absent: none); its printed form goes into the digest. -1 if bad. */
static int read_match(struct pricing *p, const cJSON *m, struct price *pr, char *why, size_t wlen)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(m, "match");
    if (j == NULL)
        return 0;
    pr->match = pc_calloc(1, sizeof(*pr->match));
    if (rule_parse(j, 0, pr->match, why, wlen) < 0) {
        rule_free(pr->match);
        free(pr->match);
        pr->match = NULL;
        return -1;
    }
    char *text = cJSON_PrintUnformatted(j);
    if (text != NULL) {
        p->rules_digest = pc_fnv1a(p->rules_digest, m->string, strlen(m->string) + 1);
        p->rules_digest = pc_fnv1a(p->rules_digest, text, strlen(text) + 1);
        free(text);
    }
    return 0;
}

/*
 * "source" (any text) as /metrics' label and the JSON take it: control
 * characters as spaces, each byte that is no part of a UTF-8 character as
 * U+FFFD (Prometheus refuses a scrape with an invalid UTF-8 label value),
 * kept to PRICING_SOURCE_MAX bytes, cut before a whole character.
 */
static char *clean_source(const char *s)
{
    size_t n = strlen(s), o = 0;
    char *out = pc_malloc(PRICING_SOURCE_MAX + 1);
    for (size_t i = 0; i < n;) {
        size_t len = pc_utf8_char_len(s + i, n - i);
        const char *c = len > 0 ? s + i : "\xef\xbf\xbd";
        size_t clen = len > 0 ? len : 3;
        if (o + clen > PRICING_SOURCE_MAX)
            break;
        memcpy(out + o, c, clen);
        if (clen == 1 && ((unsigned char)*c < 0x20 || *c == 0x7f))
            out[o] = ' ';
        o += clen;
        i += len > 0 ? len : 1;
    }
    out[o] = '\0';
    return out;
}

static bool valid_date(const char *s)
{
    static const char shape[] = "dddd-dd-dd";
    if (strlen(s) != sizeof shape - 1)
        return false;
    for (size_t i = 0; shape[i]; i++)
        if (shape[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != shape[i])
            return false;
    return true;
}

/* Where the list says its prices come from: "source" and "date" (both optional). */
static void read_origin(struct pricing *p, const cJSON *root)
{
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    const cJSON *date = cJSON_GetObjectItemCaseSensitive(root, "date");
    if (cJSON_IsString(src) && src->valuestring[0] != '\0')
        p->source = clean_source(src->valuestring);
    if (cJSON_IsString(date) && valid_date(date->valuestring))
        pc_strlcpy(p->date, date->valuestring, sizeof p->date);
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
    read_origin(p, root);
    for (const cJSON *m = models->child; m != NULL; m = m->next) {
        struct price pr = {0};
        char why[256];
        if (!cJSON_IsObject(m) || read_entry(m, &own_keys, &pr, why, sizeof why) < 0 ||
            read_match(p, m, &pr, why, sizeof why) < 0) {
            snprintf(err, errlen, "%s: model \"%.64s\": %s", p->path, m->string,
                     cJSON_IsObject(m) ? why : "not an object");
            return -1;
        }
        struct price *e = entry_get(p, m->string);
        if (e->match != NULL) { /* a repeated name: the last one counts */
            rule_free(e->match);
            free(e->match);
        }
        pr.model = e->model;
        *e = pr;
    }
    for (size_t i = 0; i < p->n; i++)
        p->nrules += p->v[i].match != NULL;
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
        char why[256];
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
        double d[7] = {e->input,          e->output,      e->cache_read,  e->cache_write,
                       e->cache_write_1h, e->input_audio, e->output_audio};
        h = pc_fnv1a(h, d, sizeof d);
    }
    h = pc_fnv1a(h, &p->rules_digest, sizeof p->rules_digest);
    h = pc_fnv1a(h, p->source, strlen(p->source) + 1);
    p->digest = pc_fnv1a(h, p->date, strlen(p->date));
}

static bool looks_litellm(const cJSON *root)
{
    for (const cJSON *m = root->child; m != NULL; m = m->next)
        if (cJSON_IsObject(m) && (cJSON_GetObjectItemCaseSensitive(m, "input_cost_per_token") ||
                                  cJSON_GetObjectItemCaseSensitive(m, "litellm_provider")))
            return true;
    return false;
}

/*
 * What the list does not say about itself, from where it was read: LiteLLM
 * or the file's name as the source, the file's modification day (mtime, 0
 * if none) as the date.
 */
static void default_origin(struct pricing *p, time_t mtime)
{
    if (p->source == NULL) {
        const char *base = strrchr(p->path, '/');
        p->source = clean_source(p->format == PRICING_LITELLM ? "LiteLLM"
                                 : base                       ? base + 1
                                                              : p->path);
    }
    struct tm tm;
    if (p->date[0] == '\0' && mtime > 0 && gmtime_r(&mtime, &tm) != NULL)
        strftime(p->date, sizeof p->date, "%Y-%m-%d", &tm);
}

static struct pricing *parse_list(const char *json, size_t len, const char *name, time_t mtime,
                                  char *err, size_t errlen, struct pc_buf *warns)
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
    default_origin(p, mtime);
    digest(p);
    p->memo = pc_calloc(1, sizeof(*p->memo));
    pthread_mutex_init(&p->memo->mu, NULL);
    return p;
}

struct pricing *pricing_parse(const char *json, size_t len, const char *name, char *err,
                              size_t errlen, struct pc_buf *warns)
{
    return parse_list(json, len, name, 0, err, errlen, warns);
}

struct pricing *pricing_load(const char *path, char *err, size_t errlen, struct pc_buf *warns)
{
    /* A regular file only: a reload reads it again (a FIFO would block it, pc_secret.h). */
    struct stat st;
    int fd = secret_open_regular(path, &st);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (f == NULL) {
        if (fd == -2)
            snprintf(err, errlen, "%s: not a regular file (a reload reads it again)", path);
        else
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    time_t mtime = st.st_mtime;
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
        p = parse_list(b.data ? b.data : "", b.len, path, mtime, err, errlen, warns);
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
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].model);
        if (p->v[i].match != NULL)
            rule_free(p->v[i].match);
        free(p->v[i].match);
    }
    free(p->v);
    free(p->path);
    free(p->currency);
    free(p->source);
    if (p->memo != NULL)
        pthread_mutex_destroy(&p->memo->mu);
    free(p->memo);
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

const char *pricing_source(const struct pricing *p)
{
    return p->source;
}

const char *pricing_date(const struct pricing *p)
{
    return p->date;
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

/* name in lower case, at most TALLY_MODEL_MAX bytes of it. */
static void lower_copy(const char *name, char low[TALLY_MODEL_MAX + 1])
{
    size_t i = 0;
    for (; name[i] != '\0' && i < TALLY_MODEL_MAX; i++)
        low[i] = (char)tolower((unsigned char)name[i]);
    low[i] = '\0';
}

/* The first entry whose rule takes name, compared in lower case (as genai-prices does). */
static const struct price *by_rule(const struct pricing *p, const char *name)
{
    if (p->nrules == 0)
        return NULL;
    char low[TALLY_MODEL_MAX + 1];
    lower_copy(name, low);
    for (size_t i = 0; i < p->n; i++)
        if (p->v[i].match != NULL && pricing_rule_match(p->v[i].match, low))
            return &p->v[i];
    return NULL;
}

static const struct price *by_name(const struct pricing *p, const char *name)
{
    const struct price *e = exact(p, name);
    if (e == NULL)
        e = by_rule(p, name);
    for (size_t i = 0; e == NULL && i < p->n; i++) {
        size_t n = strlen(p->v[i].model);
        if (strncmp(name, p->v[i].model, n) == 0 && name[n] != '\0' && version_suffix(name + n))
            e = &p->v[i];
    }
    return e;
}

static size_t memo_slot(const char *name)
{
    return (size_t)pc_fnv1a(PC_FNV_SEED, name, strlen(name)) & (MEMO_SLOTS - 1);
}

/* The remembered answer for name: 1 and *idx (-1: unpriced), or 0 if not remembered. */
static int memo_get(struct memo *m, const char *name, int *idx)
{
    int found = 0;
    pthread_mutex_lock(&m->mu);
    for (size_t k = memo_slot(name); m->slot[k].name[0] != '\0'; k = (k + 1) & (MEMO_SLOTS - 1))
        if (strcmp(m->slot[k].name, name) == 0) {
            *idx = m->slot[k].idx;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* Remember an answer while the table is under 3/4 full (then lookups just scan). */
static void memo_put(struct memo *m, const char *name, int idx)
{
    pthread_mutex_lock(&m->mu);
    if (m->used < MEMO_SLOTS / 4 * 3) {
        size_t k = memo_slot(name);
        while (m->slot[k].name[0] != '\0' && strcmp(m->slot[k].name, name) != 0)
            k = (k + 1) & (MEMO_SLOTS - 1);
        if (m->slot[k].name[0] == '\0')
            m->used++;
        pc_strlcpy(m->slot[k].name, name, sizeof m->slot[k].name);
        m->slot[k].idx = idx;
    }
    pthread_mutex_unlock(&m->mu);
}

/* After an entry of its very name: the bare name of a vendor's prefix first, then the rules. */
static const struct price *by_spelling(const struct pricing *p, const char *name)
{
    const struct price *e = NULL;
    for (size_t j = 0; e == NULL && j < PC_ARRAY_LEN(bare_providers); j++) {
        size_t pl = strlen(bare_providers[j]);
        if (strncmp(name, bare_providers[j], pl) == 0 && name[pl] != '\0')
            e = by_name(p, name + pl);
    }
    return e != NULL ? e : by_name(p, name);
}

const struct price *pricing_find(const struct pricing *p, const char *model)
{
    if (p == NULL || model == NULL)
        return NULL;
    char name[TALLY_MODEL_MAX + 1];
    model_clean(model, name);
    int idx;
    if (memo_get(p->memo, name, &idx))
        return idx >= 0 ? &p->v[idx] : NULL;
    /*
     * A vendor's prefix (a gateway's name: openai/X, anthropic/X) names the
     * vendor's own model: after an entry of that very name, the bare name is
     * matched first, or another provider's rule that takes the prefixed name
     * (Vertex's claude-sonnet-4-5 takes anthropic/claude-sonnet-4.5) would
     * price it.
     */
    const struct price *e = exact(p, name);
    if (e == NULL)
        e = by_spelling(p, name);
    /*
     * Then in lower case (the lists' names are; an upstream that answered
     * GPT-4o billed gpt-4o), as every match rule takes it: only a name
     * priced by no spelling of its own is looked up so.
     */
    if (e == NULL) {
        char low[TALLY_MODEL_MAX + 1]; /* name is model_clean's: no longer */
        lower_copy(name, low);
        if (strcmp(low, name) != 0)
            e = by_spelling(p, low);
    }
    memo_put(p->memo, name, e != NULL ? (int)(e - p->v) : -1);
    return e;
}

/* ---- costs ------------------------------------------------------------------ */

void pricing_tokens_of(const struct api_usage *u, struct pricing_tokens *t)
{
    memset(t, 0, sizeof(*t));
    if (u == NULL || !u->present)
        return;
    /*
     * The parts never exceed the whole: a usage block with more cache reads
     * and writes than prompt tokens (inconsistent, or forged to inflate the
     * savings) is read as prompt tokens all read from the cache, then
     * written, so the report (which prices the hourly prompt, cached and
     * written counts: pc_report.h) and /stats price the same tokens.
     */
    int64_t prompt = PC_MAX(u->prompt, 0);
    t->cache_read = PC_MIN(PC_MAX(u->cached, 0), prompt);
    t->cache_write = PC_MIN(PC_MAX(u->cache_write, 0), prompt - t->cache_read);
    t->cache_write_1h = PC_MIN(PC_MAX(u->cache_write_1h, 0), t->cache_write);
    t->input = prompt - t->cache_read - t->cache_write;
    t->output = PC_MAX(u->completion, 0);
    t->audio_input = PC_MIN(PC_MAX(u->audio_prompt, 0), t->input);
    t->audio_output = PC_MIN(PC_MAX(u->audio_completion, 0), t->output);
}

double pricing_cost(const struct price *pr, const struct pricing_tokens *t)
{
    return ((double)(t->input - t->audio_input) * pr->input +
            (double)t->audio_input * pr->input_audio + (double)t->cache_read * pr->cache_read +
            (double)(t->cache_write - t->cache_write_1h) * pr->cache_write +
            (double)t->cache_write_1h * pr->cache_write_1h +
            (double)(t->output - t->audio_output) * pr->output +
            (double)t->audio_output * pr->output_audio) /
           1e6;
}

double pricing_cache_saving(const struct price *pr, const struct pricing_tokens *t)
{
    return (double)t->cache_read * (pr->input - pr->cache_read) / 1e6;
}

double pricing_write_premium(const struct price *pr, const struct pricing_tokens *t)
{
    return ((double)(t->cache_write - t->cache_write_1h) *
                PC_MAX(pr->cache_write - pr->input, 0.0) +
            (double)t->cache_write_1h * PC_MAX(pr->cache_write_1h - pr->input, 0.0)) /
           1e6;
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
    model_clean(model, name);
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

/* ---- showing the list ---------------------------------------------------------- */

void pricing_render_json(const struct pricing *p, struct pc_buf *out)
{
    if (p == NULL) {
        pc_buf_append_str(out, ",\"currency\":null,\"pricing\":null");
        return;
    }
    pc_buf_append_str(out, ",\"currency\":");
    pc_buf_json_str(out, p->currency, strlen(p->currency));
    pc_buf_append_str(out, ",\"pricing\":{\"file\":");
    pc_buf_json_str(out, p->path, strlen(p->path));
    pc_buf_printf(
        out, ",\"format\":\"%s\",\"models\":%zu,\"source\":", pricing_format_name(p->format), p->n);
    pc_buf_json_str(out, p->source, strlen(p->source));
    pc_buf_append_str(out, ",\"date\":");
    if (p->date[0] != '\0')
        pc_buf_json_str(out, p->date, strlen(p->date));
    else
        pc_buf_append_str(out, "null");
    /* The models warned about that this list does not price either (a reload may have). */
    pc_buf_append_str(out, ",\"unpriced_models\":[");
    size_t shown = 0;
    pthread_mutex_lock(&warn_mu);
    for (size_t i = 0; i < nwarned && shown < UNPRICED_SHOWN; i++) {
        if (pricing_find(p, warned[i]) != NULL)
            continue;
        pc_buf_append_str(out, shown++ ? "," : "");
        pc_buf_json_str(out, warned[i], strlen(warned[i]));
    }
    pthread_mutex_unlock(&warn_mu);
    pc_buf_append_str(out, "]}");
}

/* A Prometheus label value: backslash, double quote and line feed escaped. */
static void prom_label(struct pc_buf *out, const char *name, const char *v)
{
    pc_buf_printf(out, ",%s=\"", name);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            pc_buf_append_char(out, '\\');
        if (*v == '\n')
            pc_buf_append_str(out, "\\n");
        else
            pc_buf_append_char(out, *v);
    }
    pc_buf_append_char(out, '"');
}

void pricing_render_prometheus(const struct pricing *p, struct pc_buf *out)
{
    if (p == NULL)
        return;
    /* The file path is the operator's own: shown like the version. */
    pc_buf_printf(out,
                  "# HELP promptcache_pricing_info The price list in force (value 1): where "
                  "its prices come from and the day they are of; the *_cost metrics are in "
                  "its currency\n"
                  "# TYPE promptcache_pricing_info gauge\n"
                  "promptcache_pricing_info{currency=\"%s\",format=\"%s\",models=\"%zu\"",
                  p->currency, pricing_format_name(p->format), p->n);
    prom_label(out, "source", p->source);
    prom_label(out, "date", p->date);
    pc_buf_append_str(out, "} 1\n");
}

/* ---- the shipped list ----------------------------------------------------------- */

int pricing_default_path(char *out, size_t outlen)
{
    /*
     * The maintained list first, then the hand-copied one; each in the build
     * trees (build/, build/asan/, build/asan/tests/), beside an installed
     * binary (../share/promptcache/) and in /etc/promptcache/ ("/etc..." is
     * absolute, the rest relative to the binary's folder).
     */
    static const char *const cand[] = {"/prices.json",
                                       "/../prices.json",
                                       "/../../prices.json",
                                       "/../share/promptcache/prices.json",
                                       "/etc/promptcache/prices.json",
                                       "/../conf/pricing.json",
                                       "/../../conf/pricing.json",
                                       "/../../../conf/pricing.json",
                                       "/../share/promptcache/pricing.json",
                                       "/etc/promptcache/pricing.json"};
    char exe[PATH_MAX] = "(binary)";
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL)
            *slash = '\0';
    }
    struct pc_buf looked = PC_BUF_INIT;
    for (size_t i = 0; i < PC_ARRAY_LEN(cand); i++) {
        char path[PATH_MAX + 64], real[PATH_MAX];
        bool abs = strncmp(cand[i], "/etc/", 5) == 0;
        if (!abs && k <= 0)
            continue;
        snprintf(path, sizeof path, "%s%s", abs ? "" : exe, cand[i]);
        if (access(path, R_OK) == 0) {
            snprintf(out, outlen, "%s", realpath(path, real) ? real : path);
            pc_buf_free(&looked);
            return 0;
        }
        pc_buf_printf(&looked, "%s%s", i ? ", " : "", path);
    }
    snprintf(out, outlen, "%s", pc_buf_cstr(&looked));
    pc_buf_free(&looked);
    return -1;
}

/* ---- the pricing key (pc_conf.h's rules) -------------------------------------------- */

/*
 * Load the price list the key names: a broken file is an error (so -t and a
 * reload refuse it), a shipped list that cannot be found only a warning
 * (dollars are then unknown).
 */
static int conf_load_prices(struct conf *c, struct pc_buf *warns, char *err, size_t errlen)
{
    pricing_release(&c->prices);
    if (strcmp(c->pricing, "off") == 0)
        return 0;
    char path[PATH_MAX + 128];
    if (c->pricing[0] == '\0' && pricing_default_path(path, sizeof path) < 0) {
        pc_buf_printf(warns,
                      "pricing: the shipped price list was not found (looked in %s); dollars "
                      "are unknown until pricing names a file\n",
                      path);
        return 0;
    }
    const char *file = c->pricing[0] != '\0' ? c->pricing : path;
    c->prices = pricing_load(file, err, errlen, warns);
    return c->prices == NULL ? -1 : 0;
}

static void conf_share_prices(struct conf *dst, const struct conf *src)
{
    dst->prices = pricing_ref(src->prices);
}

static void conf_drop_prices(struct conf *c)
{
    pricing_release(&c->prices);
}

/* The list follows its file's content, not only its path (a reload reads it again). */
static bool conf_prices_changed(const struct conf *cur, const struct conf *next,
                                struct pc_buf *applied)
{
    if (pricing_same(cur->prices, next->prices))
        return false;
    pc_buf_printf(applied, "%sprices (%s)", applied->len ? ", " : "",
                  next->prices ? pricing_path(next->prices) : "none");
    return true;
}

static void conf_merge_prices(struct conf *m, const struct conf *cur, const struct conf *next)
{
    (void)cur;
    if (m->prices != next->prices) {
        pricing_release(&m->prices);
        m->prices = pricing_ref(next->prices);
    }
}

static const struct conf_rule rules[] = {
    {.key = "pricing",
     .load = conf_load_prices,
     .share = conf_share_prices,
     .drop = conf_drop_prices,
     .changed = conf_prices_changed,
     .merge = conf_merge_prices},
};

int pricing_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
