/*
 * migrate.c - Redis schema migrations (see pc_migrate.h). Owns the wrapper
 * that turns an embedded migration body into the script EVALed for it, and
 * the `promptcache migrate` command (blocking hiredis: a command-line tool,
 * not the event loop). The store applies the same scripts asynchronously on
 * connect when redis-auto-migrate is on.
 */
#include "pc_migrate.h"
#include "pc_conf.h"
#include "pc_store.h"
#include "pc_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#define CLI_MIN_TIMEOUT_MS  1000
#define CLI_EVAL_TIMEOUT_MS 60000 /* a migration may have many keys to convert */

long migrate_latest(void)
{
    return pc_migrations_count > 0 ? pc_migrations[pc_migrations_count - 1].version : 0;
}

/*
 * The body runs inside a local function so that a `return` in it ends the
 * body, not the script. Redis does not roll back a script that fails half
 * way, so a body should check what it needs before it writes.
 */
void migrate_script(size_t i, struct pc_buf *out)
{
    const struct pc_migration *m = &pc_migrations[i];
    pc_buf_printf(out,
                  "-- promptcache migration %04ld %s\n"
                  "local stored = redis.call('GET', KEYS[1]) or '0'\n"
                  "if tonumber(stored) ~= tonumber(ARGV[1]) then\n"
                  "  return redis.error_reply('schema is at ' .. stored .. ', expected ' .. "
                  "ARGV[1])\n"
                  "end\n"
                  "local function migration()\n",
                  m->version, m->name);
    pc_buf_append_str(out, m->body);
    pc_buf_append_str(out, "\nend\n"
                           "migration()\n"
                           "redis.call('SET', KEYS[1], ARGV[2])\n"
                           "return tonumber(ARGV[2])\n");
}

/* --- promptcache migrate ------------------------------------------------------ */

struct cli {
    redisContext *rc;
    char *host, *unix_path, *password;
    int port, db;
    char where[320]; /* URL without the password */
};

/* A message on stderr, after whatever stdout holds so far (the two may share a file). */
static PC_PRINTF(1, 2) void cli_error(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fputs("promptcache migrate: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void cli_close(struct cli *k)
{
    if (k->rc != NULL)
        redisFree(k->rc);
    k->rc = NULL;
    PC_FREE(&k->host);
    PC_FREE(&k->unix_path);
    PC_FREE(&k->password);
}

static struct timeval ms_tv(int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* Run one command; the reply (never an error reply) or NULL after a message on stderr. */
static redisReply *cli_command(struct cli *k, const char *what, int argc, const char **argv,
                               const size_t *lens)
{
    redisReply *r = redisCommandArgv(k->rc, argc, argv, lens);
    if (r == NULL) {
        cli_error("%s: %s: %s", k->where, what, k->rc->errstr[0] ? k->rc->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        cli_error("%s: %s failed: %s", k->where, what, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int cli_simple(struct cli *k, const char *cmd, const char *arg)
{
    const char *argv[] = {cmd, arg};
    redisReply *r = cli_command(k, cmd, 2, argv, NULL);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

static int cli_connect(const struct conf *conf, struct cli *k)
{
    char err[192];
    if (store_parse_url(conf->redis, &k->host, &k->port, &k->unix_path, &k->password, &k->db, err,
                        sizeof(err)) < 0) {
        cli_error("invalid redis URL: %s", err);
        return -1;
    }
    if (k->unix_path != NULL)
        snprintf(k->where, sizeof(k->where), "unix:%s", k->unix_path);
    else
        snprintf(k->where, sizeof(k->where),
                 strchr(k->host, ':') ? "redis://[%s]:%d/%d" : "redis://%s:%d/%d", k->host, k->port,
                 k->db);
    struct timeval tv = ms_tv(PC_MAX(conf->redis_timeout, CLI_MIN_TIMEOUT_MS));
    k->rc = k->unix_path ? redisConnectUnixWithTimeout(k->unix_path, tv)
                         : redisConnectWithTimeout(k->host, k->port, tv);
    if (k->rc == NULL || k->rc->err) {
        cli_error("cannot connect to %s: %s", k->where, k->rc ? k->rc->errstr : "out of memory");
        return -1;
    }
    redisSetTimeout(k->rc, tv);
    char db[16];
    snprintf(db, sizeof(db), "%d", k->db);
    if (k->password != NULL && cli_simple(k, "AUTH", k->password) < 0)
        return -1;
    if (k->db != 0 && cli_simple(k, "SELECT", db) < 0)
        return -1;
    return 0;
}

static int cli_version(struct cli *k, long *v)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    redisReply *r = cli_command(k, "GET " PC_SCHEMA_KEY, 2, argv, NULL);
    if (r == NULL)
        return -1;
    int64_t n = 0;
    int rc = 0;
    if (r->type == REDIS_REPLY_STRING && (pc_parse_i64(r->str, &n) < 0 || n < 0)) {
        cli_error("%s: %s holds '%s', not a schema version", k->where, PC_SCHEMA_KEY, r->str);
        rc = -1;
    } else if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL) {
        cli_error("%s: unexpected reply to GET %s", k->where, PC_SCHEMA_KEY);
        rc = -1;
    }
    *v = (long)n;
    freeReplyObject(r);
    return rc;
}

/* EVAL pc_migrations[i] (from version i to i + 1). */
static int cli_apply(struct cli *k, size_t i)
{
    const struct pc_migration *m = &pc_migrations[i];
    struct pc_buf script = PC_BUF_INIT;
    char from[24], to[24], now[24], what[160];
    migrate_script(i, &script);
    snprintf(from, sizeof(from), "%zu", i);
    snprintf(to, sizeof(to), "%ld", m->version);
    snprintf(now, sizeof(now), "%lld", (long long)(pc_wall_ms() / 1000));
    snprintf(what, sizeof(what), "migration %04ld %s", m->version, m->name);
    const char *argv[] = {"EVAL", script.data, "1", PC_SCHEMA_KEY, from, to, now};
    size_t lens[] = {4,          script.len, 1, strlen(PC_SCHEMA_KEY), strlen(from),
                     strlen(to), strlen(now)};
    redisSetTimeout(k->rc, ms_tv(CLI_EVAL_TIMEOUT_MS));
    redisReply *r = cli_command(k, what, 7, argv, lens);
    pc_buf_free(&script);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    printf("applied %04ld %s\n", m->version, m->name);
    return 0;
}

static int cli_migrate(struct cli *k, long v, bool dry_run)
{
    long latest = migrate_latest();
    printf("schema version: %ld (this build: %ld)\n", v, latest);
    if (v > latest) {
        cli_error(
            "%s: schema version %ld is newer than this build knows (%ld): upgrade promptcache",
            k->where, v, latest);
        return -1;
    }
    if (v == latest) {
        printf("the schema is current: nothing to do\n");
        return 0;
    }
    printf("pending migrations:\n");
    for (size_t i = (size_t)v; i < pc_migrations_count; i++)
        printf("  %04ld %s\n", pc_migrations[i].version, pc_migrations[i].name);
    if (dry_run) {
        printf("dry run: nothing applied\n");
        return 0;
    }
    for (size_t i = (size_t)v; i < pc_migrations_count; i++)
        if (cli_apply(k, i) < 0)
            return -1;
    return 0;
}

int migrate_cli(const struct conf *c, bool dry_run)
{
    struct cli k = {0};
    long v = 0;
    int rc = 1;
    if (cli_connect(c, &k) == 0 && cli_version(&k, &v) == 0 && cli_migrate(&k, v, dry_run) == 0)
        rc = 0;
    fflush(stdout);
    cli_close(&k);
    return rc;
}
