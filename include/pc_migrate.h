/*
 * pc_migrate.h - Redis schema migrations. migrations/NNNN_name.lua are
 * embedded at build time (tools/embed.c) in ascending order. Each script runs
 * inside one EVAL with the version check and bump around it, so a migration
 * applies atomically and at most once even with several proxies starting at
 * the same time.
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
#define PC_KEY_PREFIX "pc:1:"

struct pc_migration {
    long version;
    const char *name;
    const char *body; /* Lua; KEYS[1] = schema key, ARGV[1] = from, ARGV[2] = to,
                       * ARGV[3] = wall-clock unix seconds */
};

extern const struct pc_migration pc_migrations[];
extern const size_t pc_migrations_count;

/* The version this build expects (the last migration's). */
long migrate_latest(void);
/*
 * The full script EVALed for migration i: checks the stored version equals
 * version-1 (else returns an error reply), runs the body, sets the version.
 */
void migrate_script(size_t i, struct pc_buf *out);

struct conf;
/*
 * `promptcache migrate`: connect (blocking; this is a command-line tool, not
 * the event loop), print the current version and each pending migration, apply
 * them unless dry_run. Returns the process exit status.
 */
int migrate_cli(const struct conf *c, bool dry_run);

#endif
