/*
 * migrate.c - Redis schema migrations (see pc_migrate.h). Owns the wrapper
 * that turns an embedded migration body into the script EVALed for it, the
 * EVAL command and the reading of the stored version (both shared with the
 * store, which applies the same scripts asynchronously on connect when
 * redis-auto-migrate is on), the script that puts the version back when it
 * was deleted under a running store, and the `promptcache migrate` command
 * (blocking hiredis: a command-line tool, not the event loop).
 */
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_util.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#define CLI_EVAL_TIMEOUT_MS 60000 /* a migration may have many keys to convert */

/* How a migration script refuses to run on a schema that is not at its start version. */
#define SCHEMA_MOVED "schema is at "

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
                  "  return redis.error_reply('" SCHEMA_MOVED "' .. stored .. ', expected ' .. "
                  "ARGV[1])\n"
                  "end\n"
                  "local function migration()\n",
                  m->version, m->name);
    pc_buf_append_str(out, m->body);
    pc_buf_append_str(out, "\nend\n"
                           "local meta = migration()\n"
                           "redis.call('SET', KEYS[1], ARGV[2])\n"
                           "local out = {tonumber(ARGV[2]), 'migrated_at', ARGV[3]}\n"
                           "for _, v in ipairs(type(meta) == 'table' and meta or {}) do\n"
                           "  out[#out + 1] = tostring(v)\n"
                           "end\n"
                           "return out\n");
}

/* EVAL script 1 PC_SCHEMA_KEY from to now: migration i goes from version i to i + 1. */
void migrate_eval_init(struct migrate_eval *e, size_t i)
{
    const struct pc_migration *m = &pc_migrations[i];
    memset(e, 0, sizeof(*e));
    migrate_script(i, &e->script);
    snprintf(e->from, sizeof(e->from), "%zu", i);
    snprintf(e->to, sizeof(e->to), "%ld", m->version);
    snprintf(e->now, sizeof(e->now), "%lld", (long long)(pc_wall_ms() / 1000));
    snprintf(e->what, sizeof(e->what), "migration %04ld %s", m->version, m->name);
    const char *argv[MIGRATE_EVAL_ARGC] = {"EVAL",  e->script.data, "1",   PC_SCHEMA_KEY,
                                           e->from, e->to,          e->now};
    for (size_t k = 0; k < MIGRATE_EVAL_ARGC; k++) {
        e->argv[k] = argv[k];
        e->lens[k] = k == 1 ? e->script.len : strlen(argv[k]);
    }
}

void migrate_eval_free(struct migrate_eval *e)
{
    pc_buf_free(&e->script);
}

/* SET NX: of the stores that find the key gone at once, one sets it and says so. */
static const char restore_script[] = "-- promptcache: the schema version, after it was deleted\n"
                                     "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then\n"
                                     "  return 1\n"
                                     "end\n"
                                     "return 0\n";

void migrate_restore_init(struct migrate_restore *m)
{
    snprintf(m->version, sizeof(m->version), "%ld", migrate_latest());
    const char *argv[MIGRATE_RESTORE_ARGC] = {"EVAL", restore_script, "1", PC_SCHEMA_KEY,
                                              m->version};
    for (size_t k = 0; k < MIGRATE_RESTORE_ARGC; k++) {
        m->argv[k] = argv[k];
        m->lens[k] = strlen(argv[k]);
    }
}

int migrate_parse_version(const redisReply *r, long *v, char *err, size_t errlen)
{
    int64_t n = 0;
    *v = 0;
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "unexpected reply to GET %s", PC_SCHEMA_KEY);
        return -1;
    }
    if (pc_parse_i64(r->str, &n) < 0 || n < 0 || n > LONG_MAX) {
        snprintf(err, errlen, "%s holds '%.40s', not a schema version", PC_SCHEMA_KEY, r->str);
        return -1;
    }
    *v = (long)n;
    return 0;
}

bool migrate_reply_applied(const redisReply *r)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER;
}

#define META_TEXT_MAX 64

void migrate_meta_from(const redisReply *r, struct migrate_meta *m)
{
    m->argc = 0;
    if (!migrate_reply_applied(r) || r->elements < 3 || (r->elements - 1) % 2 != 0 ||
        (r->elements - 1) / 2 > MIGRATE_META_MAX)
        return;
    for (size_t i = 1; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING || r->element[i]->len == 0 ||
            r->element[i]->len > META_TEXT_MAX)
            return;
    m->argv[0] = "HSET";
    m->lens[0] = 4;
    m->argv[1] = PC_META_KEY;
    m->lens[1] = strlen(PC_META_KEY);
    for (size_t i = 1; i < r->elements; i++) {
        m->argv[1 + i] = r->element[i]->str;
        m->lens[1 + i] = r->element[i]->len;
    }
    m->argc = (int)r->elements + 1;
}

/* --- promptcache migrate ------------------------------------------------------ */

static int cli_version(struct rcli *k, long *v)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    char err[160];
    redisReply *r = rcli_command(k, "GET " PC_SCHEMA_KEY, 2, argv, NULL);
    if (r == NULL)
        return -1;
    int rc = migrate_parse_version(r, v, err, sizeof(err));
    if (rc < 0)
        rcli_error(k, "%s: %s", k->where, err);
    freeReplyObject(r);
    return rc;
}

/* Record what an applied migration asks for in pc:meta; a failure is only reported. */
static void cli_meta(struct rcli *k, const redisReply *applied)
{
    struct migrate_meta mm;
    migrate_meta_from(applied, &mm);
    if (mm.argc == 0)
        return;
    redisReply *r = rcli_command(k, "HSET " PC_META_KEY, mm.argc, mm.argv, mm.lens);
    if (r != NULL)
        freeReplyObject(r);
}

/* The EVAL got no reply (errnum: errno right after the call). */
static void cli_eval_failed(struct rcli *k, const char *what, int errnum)
{
    if (k->rc->err == REDIS_ERR_IO && (errnum == EAGAIN || errnum == EWOULDBLOCK))
        rcli_error(k,
                   "%s: %s: no reply within %d s; Redis may still complete the migration: run "
                   "`promptcache migrate` again to check",
                   k->where, what, CLI_EVAL_TIMEOUT_MS / 1000);
    else
        rcli_error(k, "%s: %s: %s", k->where, what, k->rc->errstr[0] ? k->rc->errstr : "no reply");
}

/*
 * EVAL pc_migrations[i] (from version i to i + 1): 0 applied, 1 refused
 * because the schema is no longer at version i (another instance migrated
 * meanwhile: the caller re-reads the version), -1 failed (message printed).
 */
static int cli_apply(struct rcli *k, size_t i)
{
    struct migrate_eval e;
    int rc = 0;
    if (rcli_route(k, PC_SCHEMA_KEY, strlen(PC_SCHEMA_KEY)) < 0) { /* cluster: its node */
        char why[sizeof(k->errmsg)];
        snprintf(why, sizeof(why), "%s", k->errmsg); /* "WHERE: why" */
        rcli_error(k, "%s", why);
        return -1;
    }
    migrate_eval_init(&e, i);
    /* Its own timeout; read as every blocking reply is: capped, and whole within it. */
    redisSetTimeout(k->rc, pc_timeval_ms(CLI_EVAL_TIMEOUT_MS));
    void *reply = NULL;
    if (redisAppendCommandArgv(k->rc, MIGRATE_EVAL_ARGC, e.argv, e.lens) == REDIS_OK)
        rcli_get_reply(k->rc, &reply);
    redisReply *r = reply;
    if (r == NULL) {
        cli_eval_failed(k, e.what, errno);
        rc = -1;
    } else if (r->type == REDIS_REPLY_ERROR && strstr(r->str, SCHEMA_MOVED) != NULL) {
        printf("%s not applied here: %s\n", e.what, r->str);
        rc = 1;
    } else if (r->type == REDIS_REPLY_ERROR) {
        rcli_error(k, "%s: %s failed: %s", k->where, e.what, r->str);
        rc = -1;
    } else {
        printf("applied %04ld %s\n", pc_migrations[i].version, pc_migrations[i].name);
        cli_meta(k, r);
    }
    if (r != NULL)
        freeReplyObject(r);
    migrate_eval_free(&e);
    return rc;
}

/* True (after a message) if the schema is newer than this build knows. */
static bool cli_too_new(struct rcli *k, long v)
{
    long latest = migrate_latest();
    if (v <= latest)
        return false;
    rcli_error(k,
               "%s: schema version %ld is newer than this build knows (%ld): upgrade promptcache",
               k->where, v, latest);
    return true;
}

/* Apply the migrations pending from version v on, while the schema may move on under us. */
static int cli_apply_all(struct rcli *k, long v)
{
    while (v < migrate_latest()) {
        long was = v;
        int rc = cli_apply(k, (size_t)v);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            v++;
            continue;
        }
        if (cli_version(k, &v) < 0 || cli_too_new(k, v))
            return -1;
        if (v <= was) {
            rcli_error(k,
                       "%s: schema version %ld, but migration %04ld was refused: run "
                       "`promptcache migrate` again",
                       k->where, v, pc_migrations[was].version);
            return -1;
        }
        printf("another instance migrated the schema to version %ld meanwhile\n", v);
    }
    return 0;
}

static int cli_migrate(struct rcli *k, long v, bool dry_run)
{
    long latest = migrate_latest();
    printf("schema version: %ld (this build: %ld)\n", v, latest);
    if (cli_too_new(k, v))
        return -1;
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
    return cli_apply_all(k, v);
}

int migrate_cli(const struct conf *c, bool dry_run)
{
    struct rcli k = {0};
    long v = 0;
    int rc = 1;
    if (rcli_connect(&k, c, "migrate") == 0 && cli_version(&k, &v) == 0 &&
        cli_migrate(&k, v, dry_run) == 0)
        rc = 0;
    fflush(stdout);
    rcli_close(&k);
    return rc;
}
