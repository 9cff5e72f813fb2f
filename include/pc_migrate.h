/*
 * pc_migrate.h - Redis schema migrations. migrations/NNNN_name.lua are
 * embedded at build time (tools/embed.c) in ascending order. Each script runs
 * inside one EVAL with the version check and bump around it, so a migration
 * applies atomically and at most once even with several proxies starting at
 * the same time.
 *
 * A script touches PC_SCHEMA_KEY and the keys it converts, never PC_META_KEY:
 * in a Redis Cluster the two live on different slots (often different
 * nodes), and a script may only touch keys of its node. What a migration
 * records there (when, what it did) comes back in its reply, and whoever
 * applied it writes it with HSET afterwards (informational: not atomic with
 * the migration).
 *
 * Schema version key: PC_SCHEMA_KEY (missing = 0). Data keys carry the schema
 * major in their prefix (PC_KEY_PREFIX).
 */
#ifndef PC_MIGRATE_H
#define PC_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>

#include "pc_util.h"

#define PC_SCHEMA_KEY "pc:schema"
#define PC_META_KEY   "pc:meta"
#define PC_KEY_PREFIX "pc:2:"

struct pc_migration {
    long version;
    const char *name;
    const char *body; /* Lua; KEYS[1] = schema key, ARGV[1] = from, ARGV[2] = to,
                       * ARGV[3] = wall-clock unix seconds; may return a flat list of
                       * pc:meta fields and values to record */
};

extern const struct pc_migration pc_migrations[];
extern const size_t pc_migrations_count;

/* The version this build expects (the last migration's). */
long migrate_latest(void);
/*
 * The full script EVALed for migration i: checks the stored version equals
 * version-1 (else returns an error reply "schema is at N, expected M"), runs
 * the body, sets the version, and returns [version, field, value, ...]: the
 * new version and the pc:meta fields to record (migrated_at, and what the
 * body returned).
 */
void migrate_script(size_t i, struct pc_buf *out);

/*
 * The EVAL command for migration i, shared by the store (async, on connect)
 * and `promptcache migrate` (blocking): argv/lens point into the struct, so
 * they are valid until migrate_eval_free.
 */
#define MIGRATE_EVAL_ARGC 7
struct migrate_eval {
    const char *argv[MIGRATE_EVAL_ARGC];
    size_t lens[MIGRATE_EVAL_ARGC];
    char what[96]; /* "migration 0001 initial", for messages */
    struct pc_buf script;
    char from[24], to[24], now[24];
};
void migrate_eval_init(struct migrate_eval *e, size_t i);
void migrate_eval_free(struct migrate_eval *e);

/*
 * The EVAL that puts this build's version back in PC_SCHEMA_KEY where there
 * is none, for a store that is ready at this version and finds the key gone
 * (FLUSHALL, FLUSHDB, DEL): its reply is 1 if it set it, 0 if a version was
 * there (another got there first, or a migration of a store that connected
 * meanwhile: those check the version in their own script). argv/lens point
 * into the struct.
 */
#define MIGRATE_RESTORE_ARGC 5
struct migrate_restore {
    const char *argv[MIGRATE_RESTORE_ARGC];
    size_t lens[MIGRATE_RESTORE_ARGC];
    char version[24];
};
void migrate_restore_init(struct migrate_restore *m);

/*
 * The schema version in a reply to GET PC_SCHEMA_KEY (nil counts as 0).
 * Error replies are the caller's to handle first. -1 with a message in err if
 * the reply is not a version.
 */
struct redisReply;
int migrate_parse_version(const struct redisReply *r, long *v, char *err, size_t errlen);

/* Whether r is the reply of a migration script that was applied ([version, ...]). */
bool migrate_reply_applied(const struct redisReply *r);

/*
 * The HSET PC_META_KEY that an applied migration's reply asks for. argv
 * points into r (valid while r is); argc 0 when there is nothing to record
 * or the fields do not make sense (at most MIGRATE_META_MAX pairs of at most
 * 64 bytes each: the reply is data from Redis).
 */
#define MIGRATE_META_MAX 8
struct migrate_meta {
    const char *argv[2 + 2 * MIGRATE_META_MAX];
    size_t lens[2 + 2 * MIGRATE_META_MAX];
    int argc;
};
void migrate_meta_from(const struct redisReply *r, struct migrate_meta *m);

struct conf;
/*
 * `promptcache migrate`: connect (blocking; this is a command-line tool, not
 * the event loop), print the current version and each pending migration, apply
 * them unless dry_run. A migration another instance applied meanwhile counts as
 * done. Ignores SIGPIPE from then on (for the rest of the process), so a
 * dropped connection is reported, not fatal. Returns the process exit status.
 */
int migrate_cli(const struct conf *c, bool dry_run);

#endif
