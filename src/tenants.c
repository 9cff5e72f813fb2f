/*
 * tenants.c - tenant names (see pc_tenants.h). Owns a loaded table: the
 * identifiers of the file, sorted for binary search (tenant ids, key
 * hashes), the names, and two append-only lists filled while it serves:
 * the tenants learned by key (id -> name) and the tenants seen (for /stats).
 *
 * The lists are read without a lock on the request path: an entry is
 * complete before the count (seen) or the hash slot (learned) that covers it
 * is published (release/acquire), and never changes afterwards; writers
 * append under the mutex. Both are bounded, so a flood of tenants costs
 * nothing beyond them: the learned ones by LEARNED_PER_KEY per key the file
 * names (a key presented in another header is another tenant id), found
 * through an open-addressing index of twice as many slots.
 *
 *   request ─▶ tenants_note(id, key) ─▶ seen? no: append (id, "…wxyz")
 *                                  └──▶ key hash in the file? append (id, name),
 *                                       caller HSETs TENANTS_KEY_FP id fp
 *   report, dashboard ─▶ HSCAN TENANTS_KEY_FP (bounded) ─▶ tenants_learn_fp
 *   label ─▶ tenants_name(id): the file's ids, then the learned ones
 */
#include "pc_tenants.h"
#include "pc_conf.h"
#include "pc_secret.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TENANTS_MAGIC   0x544e4e54u /* "TNNT" */
#define LEARNED_PER_KEY 4           /* tenant ids learned per key the file names (headers, mixes) */
#define FP_BYTES        8           /* a fingerprint: the first 8 bytes of the key's hash, in hex */
#define HINT_MIN_KEY    16          /* a key shorter than this shows no last characters */
#define ELLIPSIS        "\xe2\x80\xa6"

enum ident_kind { IDENT_TENANT, IDENT_KEY };

struct ident {
    enum ident_kind kind;
    char id[TENANT_ID_LEN + 1];       /* IDENT_TENANT */
    unsigned char key[PC_SHA256_LEN]; /* IDENT_KEY: the key's SHA-256 */
    const char *name;                 /* into names */
    int line;
};

struct learned {
    char id[TENANT_ID_LEN + 1];
    const char *name;
};

struct seen {
    char id[TENANT_ID_LEN + 1];
    char hint[sizeof(ELLIPSIS) + 4]; /* "…wxyz", or "" */
};

struct tenants {
    unsigned magic;
    int refs; /* atomic */
    char *path;
    uint64_t digest;
    struct ident *ids, *keys; /* sorted by id / by key */
    size_t nids, nkeys, ids_cap, keys_cap;
    char **names;
    size_t nnames, names_cap;
    size_t *name_slots; /* while loading: index + 1 into names, or 0 (open addressing) */
    size_t name_mask;
    pthread_mutex_t mu;
    struct learned *learned; /* learned_cap entries, made at load (never moved) */
    size_t learned_cap, nlearned;
    unsigned char *key_learned; /* per key of the file (as sorted): the ids learned for it */
    size_t *learned_slots;      /* learned_mask + 1 of them: index + 1 into learned, or 0; atomic */
    size_t learned_mask;
    struct seen seen[TENANTS_SEEN_MAX];
    size_t nseen; /* atomic */
};

/* ---- loading ------------------------------------------------------------------ */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static bool lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (hexval(s[i]) < 0)
            return false;
    return true;
}

static bool name_char(char c)
{
    return isalnum((unsigned char)c) || (c != '\0' && strchr(" ._-:/@()+", c) != NULL);
}

/* A name as the label, JSON and CSV take it unescaped; NULL if fine, else why not. */
static const char *name_problem(const char *s, size_t n)
{
    if (n == 0 || n > TENANT_NAME_MAX)
        return "a name is 1 to 64 characters";
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i]))
            return "a name may hold only A-Z a-z 0-9 space . _ - : / @ ( ) +";
    if (n == 5 && strncmp(s, "other", 5) == 0)
        return "\"other\" is the label of every unnamed tenant";
    return NULL;
}

/* Parse IDENTIFIER into x; NULL if fine, else why not. */
static const char *ident_parse(const char *s, size_t n, struct ident *x)
{
    if (n > 7 && strncmp(s, "sha256:", 7) == 0) {
        s += 7;
        n -= 7;
    }
    if (n == 2 * PC_SHA256_LEN && lower_hex(s, n)) {
        x->kind = IDENT_KEY;
        for (size_t i = 0; i < PC_SHA256_LEN; i++)
            x->key[i] = (unsigned char)(hexval(s[2 * i]) << 4 | hexval(s[2 * i + 1]));
        return NULL;
    }
    const char *colon = memchr(s, ':', n);
    if (colon != NULL) { /* "…wxyz:ID" or "...wxyz:ID": the id counts */
        size_t hint = (size_t)(colon - s);
        bool dots =
            (hint >= 3 && strncmp(s, "...", 3) == 0) || (hint >= 3 && strncmp(s, ELLIPSIS, 3) == 0);
        if (!dots || hint > 3 + 4)
            return "a key hint is written …wxyz:ID (or ...wxyz:ID), as /stats shows it";
        n -= hint + 1;
        s = colon + 1;
    }
    if (n != TENANT_ID_LEN || !lower_hex(s, n))
        return "the identifier is a tenant id (16 lower-case hex characters), sha256:<the "
               "key's 64 hex SHA-256>, or …wxyz:<tenant id>";
    x->kind = IDENT_TENANT;
    memcpy(x->id, s, TENANT_ID_LEN);
    x->id[TENANT_ID_LEN] = '\0';
    return NULL;
}

static int ident_cmp(const void *a, const void *b)
{
    const struct ident *x = a, *y = b;
    return x->kind == IDENT_KEY ? memcmp(x->key, y->key, PC_SHA256_LEN) : strcmp(x->id, y->id);
}

/* Rebuild the names' index with twice the slots (at least 64), so it stays under half full. */
static void names_reindex(struct tenants *t)
{
    size_t slots = t->name_slots != NULL ? 2 * (t->name_mask + 1) : 64;
    free(t->name_slots);
    t->name_slots = pc_calloc(slots, sizeof(*t->name_slots));
    t->name_mask = slots - 1;
    for (size_t i = 0; i < t->nnames; i++) {
        size_t h = (size_t)pc_fnv1a(PC_FNV_SEED, t->names[i], strlen(t->names[i])) & t->name_mask;
        while (t->name_slots[h] != 0)
            h = (h + 1) & t->name_mask;
        t->name_slots[h] = i + 1;
    }
}

/* The one copy of name s[0..n), made if new: a hashed lookup (a file may hold 40,000 names). */
static const char *name_intern(struct tenants *t, const char *s, size_t n)
{
    if (t->name_slots == NULL || 2 * (t->nnames + 1) > t->name_mask + 1)
        names_reindex(t);
    size_t h = (size_t)pc_fnv1a(PC_FNV_SEED, s, n) & t->name_mask;
    for (; t->name_slots[h] != 0; h = (h + 1) & t->name_mask) {
        const char *name = t->names[t->name_slots[h] - 1];
        if (strlen(name) == n && memcmp(name, s, n) == 0)
            return name;
    }
    if (t->nnames == t->names_cap) {
        t->names_cap = t->names_cap ? 2 * t->names_cap : 64;
        t->names = pc_realloc(t->names, t->names_cap * sizeof(*t->names));
    }
    t->names[t->nnames] = pc_strndup(s, n);
    t->name_slots[h] = ++t->nnames;
    return t->names[t->nnames - 1];
}

static void add_ident(struct tenants *t, const struct ident *x)
{
    struct ident **set = x->kind == IDENT_KEY ? &t->keys : &t->ids;
    size_t *n = x->kind == IDENT_KEY ? &t->nkeys : &t->nids;
    size_t *cap = x->kind == IDENT_KEY ? &t->keys_cap : &t->ids_cap;
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *set = pc_realloc(*set, *cap * sizeof(**set));
    }
    (*set)[(*n)++] = *x;
}

/* One line; -1 with err set. */
static int load_line(struct tenants *t, const char *line, size_t len, int lineno, char *err,
                     size_t errlen)
{
    while (len > 0 && isspace((unsigned char)line[len - 1]))
        len--;
    size_t at = 0;
    while (at < len && isspace((unsigned char)line[at]))
        at++;
    if (at == len || line[at] == '#')
        return 0;
    size_t idn = 0;
    while (at + idn < len && !isspace((unsigned char)line[at + idn]))
        idn++;
    size_t nat = at + idn;
    while (nat < len && isspace((unsigned char)line[nat]))
        nat++;
    struct ident x = {.line = lineno};
    const char *why = ident_parse(line + at, idn, &x);
    if (why == NULL)
        why =
            nat == len ? "a name must follow the identifier" : name_problem(line + nat, len - nat);
    if (why != NULL) {
        snprintf(err, errlen, "%s:%d: %s", t->path, lineno, why);
        return -1;
    }
    x.name = name_intern(t, line + nat, len - nat);
    add_ident(t, &x);
    return 0;
}

/* The same identifier twice: an error, whatever the names (which one would count?). */
static int check_duplicates(struct tenants *t, char *err, size_t errlen)
{
    struct ident *sets[] = {t->ids, t->keys};
    size_t ns[] = {t->nids, t->nkeys};
    for (int s = 0; s < 2; s++) {
        if (ns[s] > 1)
            qsort(sets[s], ns[s], sizeof(*sets[s]), ident_cmp);
        for (size_t i = 1; i < ns[s]; i++)
            if (ident_cmp(&sets[s][i - 1], &sets[s][i]) == 0) {
                int a = PC_MIN(sets[s][i - 1].line, sets[s][i].line);
                int b = PC_MAX(sets[s][i - 1].line, sets[s][i].line);
                snprintf(err, errlen, "%s:%d: the identifier of line %d again", t->path, b, a);
                return -1;
            }
    }
    return 0;
}

static int parse(struct tenants *t, const char *text, size_t len, char *err, size_t errlen)
{
    int lineno = 0;
    /* A UTF-8 byte order mark (Windows editors write one) is no part of the first line. */
    size_t start = len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
    for (size_t at = start; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (memchr(text + at, '\0', n) != NULL) {
            snprintf(err, errlen, "%s:%d: a NUL byte", t->path, lineno + 1);
            return -1;
        }
        if (load_line(t, text + at, n, ++lineno, err, errlen) < 0)
            return -1;
        at += n + (nl != NULL);
    }
    return check_duplicates(t, err, errlen);
}

/* The file, read again by every reload: a regular file only (pc_secret.h). */
static int read_file(const char *path, struct pc_buf *out, char *err, size_t errlen)
{
    struct stat st;
    int fd = secret_open_regular(path, &st);
    if (fd == -2) {
        snprintf(err, errlen, "%s: not a regular file (a reload reads it again)", path);
        return -1;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (f == NULL) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && out->len <= TENANTS_FILE_MAX)
        pc_buf_append(out, chunk, n);
    int rc = ferror(f) ? -1 : 0;
    fclose(f);
    if (rc < 0)
        snprintf(err, errlen, "%s: read error", path);
    else if (out->len > TENANTS_FILE_MAX)
        snprintf(err, errlen, "%s: larger than %d bytes", path, TENANTS_FILE_MAX);
    return rc < 0 || out->len > TENANTS_FILE_MAX ? -1 : 0;
}

/* Room for what the keys of the file may teach: a fixed array and its index, never moved. */
static void learned_init(struct tenants *t)
{
    t->learned_cap = t->nkeys * LEARNED_PER_KEY;
    if (t->learned_cap == 0)
        return;
    size_t slots = 1;
    while (slots < 2 * t->learned_cap)
        slots *= 2;
    t->learned = pc_calloc(t->learned_cap, sizeof(*t->learned));
    t->key_learned = pc_calloc(t->nkeys, sizeof(*t->key_learned));
    t->learned_slots = pc_calloc(slots, sizeof(*t->learned_slots));
    t->learned_mask = slots - 1;
}

struct tenants *tenants_load(const char *path, char *err, size_t errlen)
{
    struct pc_buf text = PC_BUF_INIT;
    if (read_file(path, &text, err, errlen) < 0) {
        pc_buf_free(&text);
        return NULL;
    }
    struct tenants *t = pc_calloc(1, sizeof(*t));
    t->magic = TENANTS_MAGIC;
    t->refs = 1;
    t->path = pc_strdup(path);
    t->digest = pc_fnv1a(UINT64_C(14695981039346656037), text.data, text.len);
    pthread_mutex_init(&t->mu, NULL);
    int rc = parse(t, text.data ? text.data : "", text.len, err, errlen);
    pc_buf_free(&text);
    free(t->name_slots); /* the names are interned: the index is for loading only */
    t->name_slots = NULL;
    if (rc < 0) {
        tenants_release(&t);
        return NULL;
    }
    learned_init(t);
    return t;
}

struct tenants *tenants_ref(struct tenants *t)
{
    if (t != NULL) {
        PC_CHECK_OBJ(t, TENANTS_MAGIC);
        __atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
    }
    return t;
}

void tenants_release(struct tenants **tp)
{
    struct tenants *t = *tp;
    if (t == NULL)
        return;
    *tp = NULL;
    PC_CHECK_OBJ(t, TENANTS_MAGIC);
    if (__atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (size_t i = 0; i < t->nnames; i++)
        free(t->names[i]);
    free(t->names);
    free(t->name_slots);
    free(t->ids);
    free(t->keys);
    free(t->learned);
    free(t->key_learned);
    free(t->learned_slots);
    free(t->path);
    pthread_mutex_destroy(&t->mu);
    t->magic = 0;
    free(t);
}

bool tenants_same(const struct tenants *a, const struct tenants *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return a->digest == b->digest && strcmp(a->path, b->path) == 0;
}

const char *tenants_path(const struct tenants *t)
{
    return t != NULL ? t->path : NULL;
}

size_t tenants_count(const struct tenants *t)
{
    return t != NULL ? t->nids + t->nkeys : 0;
}

/* ---- serving ------------------------------------------------------------------------ */

static size_t learned_home(const struct tenants *t, const char *id)
{
    return (size_t)pc_fnv1a(PC_FNV_SEED, id, TENANT_ID_LEN) & t->learned_mask;
}

/* The learned entry of id, or NULL. Lock-free: the index has an empty slot always. */
static const struct learned *learned_find(struct tenants *t, const char *id)
{
    if (t->learned_slots == NULL)
        return NULL;
    for (size_t h = learned_home(t, id);; h = (h + 1) & t->learned_mask) {
        size_t v = __atomic_load_n(&t->learned_slots[h], __ATOMIC_ACQUIRE);
        if (v == 0)
            return NULL;
        if (memcmp(t->learned[v - 1].id, id, TENANT_ID_LEN) == 0)
            return &t->learned[v - 1];
    }
}

const char *tenants_name(struct tenants *t, const char *tenant_id)
{
    if (t == NULL || tenant_id == NULL)
        return NULL;
    struct ident key = {.kind = IDENT_TENANT};
    snprintf(key.id, sizeof key.id, "%.*s", TENANT_ID_LEN, tenant_id);
    const struct ident *x = t->nids ? bsearch(&key, t->ids, t->nids, sizeof(key), ident_cmp) : NULL;
    if (x != NULL)
        return x->name;
    /* key.id, not tenant_id: a row's id may be shorter ("-", "(other)"), key.id is padded */
    const struct learned *l = learned_find(t, key.id);
    return l != NULL ? l->name : NULL;
}

/*
 * Append (id, the name of key x) to the learned list unless there, or the key
 * has its LEARNED_PER_KEY ids already (one holder mixing headers must not take
 * the other keys' room); true if it was added.
 */
static bool learn(struct tenants *t, const char *id, const struct ident *x)
{
    const char *name = x->name;
    unsigned char *count = &t->key_learned[x - t->keys];
    pthread_mutex_lock(&t->mu);
    bool add =
        learned_find(t, id) == NULL && *count < LEARNED_PER_KEY && t->nlearned < t->learned_cap;
    if (add) {
        (*count)++;
        struct learned *l = &t->learned[t->nlearned];
        memcpy(l->id, id, TENANT_ID_LEN);
        l->id[TENANT_ID_LEN] = '\0';
        l->name = name;
        size_t h = learned_home(t, id);
        while (__atomic_load_n(&t->learned_slots[h], __ATOMIC_RELAXED) != 0)
            h = (h + 1) & t->learned_mask;
        __atomic_store_n(&t->learned_slots[h], ++t->nlearned, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&t->mu);
    return add;
}

static bool seen_has(struct tenants *t, const char *id)
{
    size_t n = __atomic_load_n(&t->nseen, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (memcmp(t->seen[i].id, id, TENANT_ID_LEN) == 0)
            return true;
    return false;
}

static void see(struct tenants *t, const char *id, const char *secret, size_t len)
{
    if (__atomic_load_n(&t->nseen, __ATOMIC_ACQUIRE) >= TENANTS_SEEN_MAX || seen_has(t, id))
        return;
    pthread_mutex_lock(&t->mu);
    if (t->nseen < TENANTS_SEEN_MAX && !seen_has(t, id)) {
        struct seen *s = &t->seen[t->nseen];
        memcpy(s->id, id, TENANT_ID_LEN);
        s->id[TENANT_ID_LEN] = '\0';
        s->hint[0] = '\0';
        bool printable = true;
        for (size_t i = len >= 4 ? len - 4 : 0; i < len; i++)
            printable = printable && isgraph((unsigned char)secret[i]);
        if (len >= HINT_MIN_KEY && printable)
            snprintf(s->hint, sizeof s->hint, ELLIPSIS "%.4s", secret + len - 4);
        __atomic_store_n(&t->nseen, t->nseen + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&t->mu);
}

bool tenants_note(struct tenants *t, const char *tenant_id, const char *secret, size_t len,
                  char fp[17])
{
    if (t == NULL || tenant_id == NULL || secret == NULL)
        return false;
    see(t, tenant_id, secret, len);
    if (t->nkeys == 0 || learned_find(t, tenant_id) != NULL)
        return false;
    struct ident key = {.kind = IDENT_KEY};
    pc_sha256(secret, len, key.key);
    const struct ident *x = bsearch(&key, t->keys, t->nkeys, sizeof(key), ident_cmp);
    if (x == NULL || !learn(t, tenant_id, x))
        return false;
    pc_hex(key.key, FP_BYTES, fp);
    fp[16] = '\0';
    return true;
}

static int fp_cmp(const void *a, const void *b)
{
    return memcmp(((const struct ident *)a)->key, ((const struct ident *)b)->key, FP_BYTES);
}

bool tenants_learn_fp(struct tenants *t, const char *tenant_id, size_t idlen, const char *fp,
                      size_t fplen)
{
    if (t == NULL || idlen != TENANT_ID_LEN || fplen != 16 || !lower_hex(tenant_id, idlen) ||
        !lower_hex(fp, fplen))
        return false;
    if (learned_find(t, tenant_id) != NULL)
        return true;
    /* the keys are sorted by their hash, so by its first 8 bytes too */
    struct ident want = {.kind = IDENT_KEY};
    for (size_t i = 0; i < FP_BYTES; i++)
        want.key[i] = (unsigned char)(hexval(fp[2 * i]) << 4 | hexval(fp[2 * i + 1]));
    const struct ident *x =
        t->nkeys ? bsearch(&want, t->keys, t->nkeys, sizeof(want), fp_cmp) : NULL;
    if (x != NULL) {
        char id[TENANT_ID_LEN + 1];
        memcpy(id, tenant_id, TENANT_ID_LEN);
        id[TENANT_ID_LEN] = '\0';
        learn(t, id, x);
    }
    return true; /* a fingerprint the file no longer names: valid, and nothing to learn */
}

void tenants_render_json(struct tenants *t, struct pc_buf *out)
{
    pc_buf_append_str(out, "\"tenants\":");
    if (t == NULL) {
        pc_buf_append_str(out, "null");
        return;
    }
    pc_buf_append_char(out, '[');
    size_t n = __atomic_load_n(&t->nseen, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
        const struct seen *s = &t->seen[i];
        const char *name = tenants_name(t, s->id);
        pc_buf_printf(out, "%s{\"id\":\"%s\",\"key\":", i ? "," : "", s->id);
        if (s->hint[0] != '\0')
            pc_buf_json_str(out, s->hint, strlen(s->hint));
        else
            pc_buf_append_str(out, "null");
        pc_buf_append_str(out, ",\"name\":");
        if (name != NULL)
            pc_buf_json_str(out, name, strlen(name));
        else
            pc_buf_append_str(out, "null");
        pc_buf_append_char(out, '}');
    }
    pc_buf_append_char(out, ']');
}

/* ---- the tenant-names key (pc_conf.h's rules) --------------------------------------- */

/* Load the file the key names: a broken one is an error (-t and a reload refuse it). */
static int conf_load_names(struct conf *c, struct pc_buf *warns, char *err, size_t errlen)
{
    (void)warns;
    tenants_release(&c->tenants);
    if (c->tenant_names[0] == '\0')
        return 0;
    c->tenants = tenants_load(c->tenant_names, err, errlen);
    return c->tenants == NULL ? -1 : 0;
}

static void conf_share_names(struct conf *dst, const struct conf *src)
{
    dst->tenants = tenants_ref(src->tenants);
}

static void conf_drop_names(struct conf *c)
{
    tenants_release(&c->tenants);
}

static bool conf_names_changed(const struct conf *cur, const struct conf *next,
                               struct pc_buf *applied)
{
    if (tenants_same(cur->tenants, next->tenants))
        return false;
    pc_buf_printf(applied, "%stenant names (%s, %zu)", applied->len ? ", " : "",
                  next->tenants ? tenants_path(next->tenants) : "none",
                  tenants_count(next->tenants));
    return true;
}

/* What the table learned stays while its file is unchanged. */
static void conf_merge_names(struct conf *m, const struct conf *cur, const struct conf *next)
{
    if (tenants_same(cur->tenants, next->tenants))
        return;
    tenants_release(&m->tenants);
    m->tenants = tenants_ref(next->tenants);
}

static const struct conf_rule rules[] = {
    {.key = "tenant-names",
     .load = conf_load_names,
     .share = conf_share_names,
     .drop = conf_drop_names,
     .changed = conf_names_changed,
     .merge = conf_merge_names},
};

int tenants_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
