/*
 * pc_conf.h - configuration. One declarative table in conf.c (name, type,
 * default, bounds, description) drives parsing of the config file and of
 * `--key value` command-line options, validation with file/line messages,
 * `promptcache -t`, `--help` and the commented sample conf/promptcache.conf
 * (`promptcache --sample-config` prints it; a test checks the committed file
 * matches).
 *
 * File syntax (redis-server style): one `key value...` per line, `#` starts
 * a comment line, values may be double-quoted ("a b", with \" \\ \n escapes).
 * A list key (upstream, shared-namespaces) may repeat; for every other key the
 * last occurrence wins. Command-line options are applied after the file; if a
 * list key appears on the command line, its command-line values replace the
 * file's values rather than adding to them.
 *
 * Environment: every key can come from PROMPTCACHE_<KEY> (the key
 * upper-cased, '-' as '_'; an empty variable counts as unset); a list key's
 * values are separated by commas and/or white space in its one variable
 * (PROMPTCACHE_UPSTREAM="http://a:8000 http://b:8000"). Precedence is by
 * source: command line, then environment, then config file, then the
 * default. A misspelt key anywhere is reported with the closest real one
 * ("did you mean ..."); conf_env_unknown lists PROMPTCACHE_* names that are
 * no key (`-t` rejects them, a running proxy logs them).
 *
 * Secrets: every key flagged secret in the table (upstream-key, admin-token,
 * redis-password, ...) can also be read from a file, `KEY-file PATH` in the
 * file or `--KEY-file PATH` on the command line, or PROMPTCACHE_KEY_FILE in
 * the environment; giving both KEY and KEY-file in one source is an error.
 * redis-user, redis-password and the sentinels' credentials are folded into
 * the redis URL once loaded, so that every Redis client reads one URL.
 *
 * Reload (SIGHUP): conf_reload reads the same sources again and
 * conf_merge_reload takes over only the keys the table marks safe to change
 * at runtime; the others keep their running values until a restart.
 *
 * struct conf holds values. A module that owns a key and knows more about
 * it than its type (the guard names, the price list a path names) checks
 * and loads it through a struct conf_rule it registers (conf_add_rules,
 * all of them at start-up: server_add_conf_rules), so the configuration
 * depends on none of them.
 */
#ifndef PC_CONF_H
#define PC_CONF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pc_util.h"

struct pricing;
struct tenants;

struct conf_list {
    char **v;
    size_t n;
};

struct conf {
    /* network */
    char *listen;            /* "host:port" as configured */
    char *listen_host;       /* derived from listen; an IPv6 address without its brackets */
    int listen_port;         /* derived from listen */
    int workers;             /* 0 in the file means "one per core"; conf_load resolves it to >= 1 */
    int64_t max_connections; /* all workers together */
    int64_t max_connections_per_ip;                 /* 0 = no limit */
    struct conf_list max_connections_per_ip_exempt; /* addresses or ADDRESS/BITS it ignores */
    int64_t max_body_size;                          /* bytes */
    int64_t max_request_memory;    /* bytes of request bodies and their copies; -1 = auto */
    double client_timeout;         /* seconds: read a request, keep-alive idle, stalled writes */
    double shutdown_timeout;       /* seconds to finish in-flight requests on SIGTERM */
    struct conf_list cors_origins; /* origins browsers may call from ("*": any); none: off */

    /* upstream */
    struct conf_list upstream; /* base URLs, at least one */
    int upstream_type;         /* position in BACKEND_LIST (src/backend/backends.h) */
    char *upstream_key;        /* "" = pass client credentials through */
    double upstream_timeout;   /* seconds to the response head and between body bytes */
    double upstream_connect_timeout;
    int routing;                  /* position in ROUTE_POLICY_LIST (src/route/policies.h) */
    double upstream_fail_timeout; /* seconds a refusing replica is left out */
    int upstream_dp_size;         /* data-parallel ranks per replica (X-data-parallel-rank) */

    /* prefix reuse */
    int64_t prefix_capacity;     /* KV tokens per replica; 0: from prefix-kv-* or the default */
    char *prefix_kv_model;       /* model geometry for the capacity (kv-size table), or "" */
    double prefix_kv_memory;     /* GiB of GPU memory for the KV cache per replica, or 0 */
    int64_t prefix_balance_abs;  /* in-flight calls over the least loaded replica ... */
    double prefix_balance_rel;   /* ... and times its load, before a match is overruled */
    double prefix_min_match;     /* share of the prompt a match must cover to decide */
    bool prefix_hints;           /* add the upstream type's KV-cache hints */
    bool prefix_share_tenants;   /* tenants may share KV state (no cache_salt, one chain root) */
    char *prefix_routing_header; /* extra request header carrying the routing key, or "" */
    bool prefix_sync;            /* share the prefix index with other instances through Redis */
    bool stream_usage;           /* ask OpenAI-style streams for usage, strip it if not asked */

    /* redis */
    char *redis;                   /* a Redis URL (pc_rurl.h), credentials folded in */
    char *redis_user;              /* "" = the default user; conf_load folds it into redis */
    char *redis_password;          /* "" = none; conf_load folds it into redis */
    char *redis_sentinel_user;     /* sentinel://: the sentinels' ACL user, folded into redis */
    char *redis_sentinel_password; /* sentinel://: the sentinels' password, folded into redis */
    int64_t redis_timeout;         /* milliseconds per command */
    bool redis_auto_migrate;

    /* cache */
    bool cache;                    /* master switch: no = every request BYPASS */
    int64_t cache_ttl;             /* seconds */
    int64_t l1_size;               /* bytes; -1 = auto (l1_size_bytes) */
    int64_t semantic_index_memory; /* bytes; -1 = auto (semantic_index_memory_bytes) */
    int64_t cache_max_ttl;         /* upper bound for X-Cache-TTL */
    int64_t cache_max_entry_size;  /* bytes; larger answers are relayed, not stored */
    bool coalesce;
    struct conf_list shared_namespaces;
    struct conf_list cache_key_headers; /* request headers in the key, compared by value */

    /* semantic cache */
    bool semantic;
    double semantic_threshold;        /* < 0 = auto: the embedder's tuned default */
    struct conf_list semantic_guards; /* guard names (pc_guard.h: guard_mask), "all" or "none" */
    int embedder;                     /* a position in src/embed/embedders.h (embed_id) */
    char *embedder_vectors; /* word-vector file of embedder builtin; "" = next to the binary */
    char *embedder_url;
    char *embedder_model;
    char *embedder_key;
    int64_t embedder_timeout; /* milliseconds */
    int embedder_batch;
    int embedder_breaker_failures;     /* failed calls in a row that open the breaker; 0 = never */
    int64_t embedder_breaker_cooldown; /* milliseconds before the first probe */
    char *semantic_verify_url;
    char *semantic_verify_model;
    char *semantic_verify_key;
    int64_t semantic_verify_timeout; /* milliseconds */
    double semantic_sure_threshold;
    double semantic_max_error;    /* the error bound's delta; 0 = off (pc_bound.h) */
    double semantic_explore_rate; /* most of the allowed candidates sent upstream to verify */
    int semantic_verify_answers;  /* enum bound_comparator (pc_bound_cmp.h) */
    double semantic_verify_answers_threshold; /* embedding comparator: same answer at or above */

    /* admin and reporting */
    char *admin_token;       /* "" = admin endpoints disabled */
    char *pricing;           /* price list: a path, "" = the shipped one, "off" = none */
    struct pricing *prices;  /* loaded by pricing's rule: the list (shared, immutable), or NULL */
    char *metrics_token;     /* "" = /metrics, /stats and /dashboard are open */
    char *tenant_names;      /* names for tenants: a path, or "" */
    struct tenants *tenants; /* loaded by tenants' rule: the names (shared), or NULL */
    int metrics_models;      /* models with their own label in /metrics; the rest "other" */

    /* logging */
    int log_level; /* enum pc_log_level */
    char *log_file;
    char *access_log;

    struct conf_meta *meta; /* owned: where each value came from, load warnings, the sources */
};

/*
 * A conf with every key at its default (workers already resolved, every
 * string non-NULL). Never NULL.
 */
struct conf *conf_create(void);
void conf_destroy(struct conf **c);

/*
 * Read `path` (NULL = no file) and then apply the options in argv[0..argc)
 * ("--key value" pairs; a bare "--key" for a bool means yes). Every problem is
 * appended to errs as one line, "FILE:LINE: KEY: message" for the file and
 * "command line: --KEY: message" for options, and the count is returned (0 =
 * valid). Derived fields (listen_host/port, workers) are resolved on success.
 */
int conf_load(struct conf *c, const char *path, int argc, char **argv, struct pc_buf *errs);

/*
 * Load the sources c was loaded from (the same file, the environment as it
 * is now, the same command-line options) into a new conf, for a reload.
 * Returns the number of errors (appended to errs); *next is the new conf, or
 * NULL when there were errors.
 */
int conf_reload(const struct conf *c, struct conf **next, struct pc_buf *errs);

/*
 * The configuration to run after a reload: a copy of cur in which every key
 * that is safe to change at runtime and differs in next takes next's value.
 * NULL when no such key differs. Each applied change is appended to applied
 * ("key old -> new", secrets masked, separated by ", ") and the name of each
 * differing key that needs a restart to restart (separated by ", ").
 */
struct conf *conf_merge_reload(const struct conf *cur, const struct conf *next,
                               struct pc_buf *applied, struct pc_buf *restart);

/*
 * What a module that owns a key does with it, run by conf on every
 * configuration it reads; any hook may be NULL.
 *   check   each value of key as given (a list: each item); 0, or -1 with
 *           err set (reported at the value's file line or option)
 *   check_all  after every key is read, even if some failed: the key's
 *           value as a whole (a list's items together); 0, or -1 with err
 *           (reported at key)
 *   load    after every key is read and none failed: load or derive what the
 *           value names into c's field the module owns; 0, or -1 with err
 *           (reported at key); warnings appended to warns, one a line
 *   share   conf_dup: dst takes src's loaded object (a reference of its own)
 *   drop    conf_destroy: release c's loaded object
 *   changed conf_merge_reload: whether next's loaded object differs from
 *           cur's although the key may not (a file read again); if so,
 *           describe it in applied ("what (detail)", after a ", " when
 *           applied is not empty)
 *   merge   conf_merge_reload, when a merged conf m is made: take what
 *           m should run with of next's loaded object (cur's is m's now)
 */
struct conf_rule {
    const char *key;
    const char *also[3]; /* other keys check_all reads: its error goes to whichever came last */
    int (*check)(const char *v, char *err, size_t errlen);
    int (*check_all)(const struct conf *c, char *err, size_t errlen);
    int (*load)(struct conf *c, struct pc_buf *warns, char *err, size_t errlen);
    void (*share)(struct conf *dst, const struct conf *src);
    void (*drop)(struct conf *c);
    bool (*changed)(const struct conf *cur, const struct conf *next, struct pc_buf *applied);
    void (*merge)(struct conf *m, const struct conf *cur, const struct conf *next);
};

/*
 * Register rules[0..n) (a static table: kept, not copied); a table given
 * twice counts once. Call before any configuration is read, from one thread
 * (main does, through server_add_conf_rules). -1 if a key or an also key is
 * no config key, or too many tables were given (a programming error).
 */
int conf_add_rules(const struct conf_rule *rules, size_t n);

/*
 * A value as an error message shows it: quoted, escaped and cut to 60 bytes,
 * so a stray line cannot flood the log; written into buf[0..n), returned.
 * For the rules' messages.
 */
const char *conf_show(const char *v, char *buf, size_t n);

/* A deep copy (values, origins, sources). */
struct conf *conf_dup(const struct conf *c);

/* Warnings of the last conf_load, one per line ("" if none): insecure secret files, ... */
const char *conf_warnings(const struct conf *c);

/*
 * Overwrite, in place, the secrets among command-line options (values of
 * secret keys, passwords in URLs) so /proc/PID/cmdline and ps stop showing
 * them. Call after conf_load, which keeps its own copies for a reload.
 */
void conf_scrub_argv(int argc, char **argv);

/*
 * Set one key from its text form; -1 with a message in err if invalid (the
 * field keeps its old value). For a list key the value is appended, and ""
 * empties the list.
 */
int conf_set(struct conf *c, const char *key, const char *value, char *err, size_t errlen);

/* Whether key names a config key, or the KEY-file form of a secret one. */
bool conf_has_key(const char *key);

/*
 * The PROMPTCACHE_* variables of the environment that are no config key
 * (nor a name the project's scripts use, like PROMPTCACHE_BIN): one line
 * each appended to out, "environment: NAME: not a configuration variable",
 * with "; did you mean NAME?" when one is close. Returns their number.
 */
int conf_env_unknown(struct pc_buf *out);

/* The commented sample config (content of conf/promptcache.conf). */
void conf_write_sample(struct pc_buf *out);
/* --help: the usage lines (conf_forms) and the option list. */
void conf_write_help(struct pc_buf *out);

/*
 * What the documentation generators (pc_docgen.h) read; the same rows as
 * --help and the sample, so the manuals and doc/configuration.md cannot
 * drift from the binary.
 *
 * conf_forms: the command line's forms in --help's order (main.c parses
 * them). synopsis is what follows "promptcache", with '\n' where a line
 * breaks; summary is --help's words ('\n' where --help breaks them; NULL for
 * none); detail is the manual's text: paragraphs separated by "\n\n", and
 * each option of the form a line "OPTION\tTEXT".
 */
struct conf_form {
    const char *synopsis;
    const char *summary;
    const char *detail;
};
const struct conf_form *conf_forms(size_t *n);

/*
 * The configuration's introduction (syntax, lists, command line,
 * environment, precedence, reload) as paragraphs separated by a blank line;
 * a paragraph whose lines start with two spaces is an example, to be kept
 * as it is. Words in backquotes are commands.
 */
void conf_write_intro(struct pc_buf *out);

/* One config key as the documentation shows it. */
struct conf_key_doc {
    const char *name;
    const char *section; /* heading on the first key of a group, else NULL */
    const char *help;    /* the description: sentences, commands in backquotes */
    const char *def;     /* default in file syntax; "" for none */
    const char *example; /* a value to show when def is "" (NULL: none) */
    char arg[128];       /* the value's placeholder: HOST:PORT, yes|no, SIZE|auto, ... */
    char range[128];     /* what is accepted, when arg does not say it: "1 to 256"; or "" */
    char env[96];        /* PROMPTCACHE_<KEY> */
    char env_file[96];   /* PROMPTCACHE_<KEY>_FILE for a secret, else "" */
    bool list;           /* takes several values, may repeat */
    bool secret;         /* also KEY-file, masked in -T and the logs */
    bool reload;         /* a SIGHUP applies a change */
};
size_t conf_doc_nkeys(void);
/* Fills *d with key i (0 <= i < conf_doc_nkeys()). */
void conf_doc_key(size_t i, struct conf_key_doc *d);
/* The PROMPTCACHE_* names that are no key but not an error either (the scripts' own). */
const char *const *conf_doc_env_extra(size_t *n);
/* Effective config, one `key value` per line (secrets and URL passwords masked). */
void conf_write_effective(const struct conf *c, struct pc_buf *out);
/*
 * `promptcache -T`: the effective config, secrets masked, each line ending
 * in a comment that says where the value came from ("default", "FILE:LINE",
 * "environment NAME", "command line", with "(file PATH)" for a secret read
 * from a file).
 */
void conf_write_sources(const struct conf *c, struct pc_buf *out);

#endif
