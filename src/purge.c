/*
 * purge.c - targeted invalidation (see pc_purge.h for the flow). Owns the
 * Lua scripts that pick and delete entries inside Redis, the parsing of the
 * filters, the asynchronous operations the admin API runs on a worker's
 * store (struct purge_op, holding the one store command it waits on) and the
 * `promptcache purge` command.
 *
 * The pick script reads the entry layout of entry.c (the fixed head, then
 * after the body the sections, tag 3 holding namespace and model); a value
 * it cannot read (or a key of another type) is left alone and counted,
 * never deleted by a filter. Its reply is checked before use (pc_store.h,
 * and pick_reply_ok here for the command): positions, not key names, so
 * nothing Redis sends is trusted as a key.
 */
#include "pc_purge.h"
#include "pc_bound.h"
#include "pc_cluster.h"
#include "pc_conf.h"
#include "pc_fence.h"
#include "pc_l1.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_vsync.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define PURGE_MAGIC     0x50555247u /* "PURG" */
#define SCAN_COUNT      "1000"
#define DURATION_MAX_MS (INT64_C(100) * 366 * 24 * 3600 * 1000)
#define OWED_KEY_MAX    (ENTRY_KEY_MAX + 16)
#define OWED_RETRY_MS   3000 /* a failed purge waits this long for Redis to publish what it owes */
#define OWED_TRIES      4    /* ... and publishes them at most this many times */

static const char entry_prefix[] = PC_KEY_PREFIX "e:";
static const char vector_prefix[] = PC_KEY_PREFIX "v:";
static const char owed_prefix[] = PC_KEY_PREFIX "pd:";

/*
 * KEYS: entry, vector record, owed mark, entry, vector record, owed mark ...
 * (each triple one hash tag). ARGV: dry-run (1: delete nothing), namespace,
 * model, created-before (ms), each "" for any. Returns {unreadable, position
 * of each picked entry in KEYS}. A key gone since SCAN (expired) is skipped
 * quietly. A Redis out of memory (noeviction) takes UNLINK but refuses the
 * XADD del events that follow: the batch's first pick writes nothing with a
 * command Redis refuses then, so the script fails before it deletes (and a
 * purge run again once Redis takes writes finds the entries, and tells every
 * instance).
 *
 * Each entry deleted leaves its owed mark (PC_KEY_PREFIX "pd:{tenant:exact}",
 * for the entry's remaining TTL, as long as an L1 may hold it), in the same
 * script, so with the delete or not at all (a Redis that restarts keeps both
 * or neither): the del event is owed until an instance has published it and
 * then removed the mark. A reply that never comes (a timeout, a lost
 * connection) leaves the marks, and the next targeted purge publishes their
 * events first (owed_script).
 */
static const char pick_script[] =
    "-- promptcache purge: pick entries by namespace, model and age (entry.c layout)\n"
    "local dry, ns, model, before = ARGV[1] == '1', ARGV[2], ARGV[3], tonumber(ARGV[4])\n"
    "local function num(s, at, n)\n"
    "  local v = 0\n"
    "  for i = at + n - 1, at, -1 do v = v * 256 + string.byte(s, i) end\n"
    "  return v\n"
    "end\n"
    "-- namespace and model from the sections after the body; nil if unreadable\n"
    "local function meta(key, ctlen)\n"
    "  local at = 47 + ctlen\n"
    "  local bl = redis.call('GETRANGE', key, at, at + 3)\n"
    "  if #bl < 4 then return nil end\n"
    "  local t = redis.call('GETRANGE', key, at + 4 + num(bl, 1, 4), -1)\n"
    "  if #t < 1 then return nil end\n"
    "  local pos = 2\n"
    "  for _ = 1, string.byte(t, 1) do\n"
    "    if pos + 4 > #t then return nil end\n"
    "    local tag, len, body = string.byte(t, pos), num(t, pos + 1, 4), pos + 5\n"
    "    if body + len - 1 > #t then return nil end\n"
    "    if tag == 3 then\n"
    "      if len < 2 then return nil end\n"
    "      local nl = string.byte(t, body)\n"
    "      if nl + 2 > len then return nil end\n"
    "      local ml = string.byte(t, body + 1 + nl)\n"
    "      if nl + ml + 2 ~= len then return nil end\n"
    "      return string.sub(t, body + 1, body + nl), string.sub(t, body + 2 + nl, body + 1 + nl "
    "+ ml)\n"
    "    end\n"
    "    pos = body + len\n"
    "  end\n"
    "  return '', ''\n"
    "end\n"
    "local out, guarded = {0}, dry\n"
    "for i = 1, #KEYS, 3 do\n"
    "  -- a key of another type (a WRONGTYPE error) is unreadable, not the end of the batch\n"
    "  local h = redis.pcall('GETRANGE', KEYS[i], 0, 46)\n"
    "  if type(h) ~= 'string' then h = '?' end\n"
    "  local fmt = #h == 47 and string.sub(h, 1, 3) == 'PCE' and string.byte(h, 4) or 0\n"
    "  if #h == 0 then\n"
    "  elseif fmt ~= 1 and fmt ~= 2 then out[1] = out[1] + 1\n"
    "  else\n"
    "    local pick = not before or num(h, 9, 8) < before\n"
    "    if pick and (ns ~= '' or model ~= '') then\n"
    "      local n, m = '', ''\n"
    "      if fmt == 2 then n, m = meta(KEYS[i], num(h, 46, 2)) end\n"
    "      if n == nil then out[1] = out[1] + 1 end\n"
    "      pick = n ~= nil and (ns == '' or n == ns) and (model == '' or m == model)\n"
    "    end\n"
    "    if pick then\n"
    "      -- a write Redis refuses when full (UNLINK it lets through, the del events not): a\n"
    "      -- full Redis fails the batch before anything is deleted (an empty SETRANGE of a\n"
    "      -- string changes nothing)\n"
    "      if not guarded then redis.call('SETRANGE', KEYS[i], 0, ''); guarded = true end\n"
    "      if not dry then\n"
    "        -- its del event is owed until an instance published it (the mark lives as long\n"
    "        -- as the entry would have: no L1 holds it longer)\n"
    "        local ttl = redis.call('PTTL', KEYS[i])\n"
    "        redis.call('UNLINK', KEYS[i], KEYS[i + 1])\n"
    "        redis.call('SET', KEYS[i + 2], '1', 'PX', ttl > 0 and ttl or 604800000)\n"
    "      end\n"
    "      out[#out + 1] = i\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return out\n";

/*
 * KEYS: owed mark, its entry, owed mark, its entry ... (each pair one hash tag), the marks SCAN
 * found. Returns {0, position of each mark whose del event is still owed}. A mark whose entry
 * is there again goes: the instance that stored it again published its set event, which every
 * instance applies as the del would (the del now would only drop its new vector).
 */
static const char owed_script[] =
    "-- promptcache purge: the del events a purge whose reply was lost still owes\n"
    "local out = {0}\n"
    "for i = 1, #KEYS, 2 do\n"
    "  if redis.call('EXISTS', KEYS[i + 1]) == 1 then redis.call('UNLINK', KEYS[i])\n"
    "  elseif redis.call('EXISTS', KEYS[i]) == 1 then out[#out + 1] = i end\n"
    "end\n"
    "return out\n";

/*
 * KEYS: an entry, its vector record and its error-bound marks (one hash tag). Returns 1 if
 * the entry was there.
 */
static const char one_script[] = "local n = redis.call('UNLINK', KEYS[1])\n"
                                 "redis.call('UNLINK', KEYS[2], KEYS[3])\n"
                                 "return n\n";

/* ---- filters ----------------------------------------------------------------- */

static bool valid_tenant(const char *v)
{
    if (strlen(v) != TENANT_ID_LEN)
        return false;
    for (const char *p = v; *p; p++)
        if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
            return false;
    return true;
}

/* As X-Cache-Namespace allows: 1 to 64 of A-Z a-z 0-9 . _ - */
static bool valid_ns(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > PURGE_NS_MAX)
        return false;
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
            return false;
    return true;
}

static bool valid_model(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > ENTRY_META_MAX)
        return false;
    for (const char *p = v; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* "NNN" of exactly n digits at *p (advanced); -1 if not digits. */
static int digits(const char **p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (!isdigit((unsigned char)**p))
            return -1;
        v = v * 10 + (**p - '0');
    }
    return v;
}

/* "Z", "z" or "+HH:MM" / "-HH:MM" at p: the offset east of UTC in seconds; -1 on anything else. */
static int64_t rfc3339_offset(const char *p, bool *ok)
{
    *ok = false;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *ok = true;
        return 0;
    }
    if ((*p != '+' && *p != '-') || strlen(p) != 6 || p[3] != ':')
        return 0;
    int sign = *p == '-' ? -1 : 1;
    const char *q = p + 1;
    int hh = digits(&q, 2);
    q++;
    int mm = digits(&q, 2);
    if (hh < 0 || hh > 23 || mm < 0 || mm > 59)
        return 0;
    *ok = true;
    return sign * (int64_t)(hh * 3600 + mm * 60);
}

/* RFC 3339 date-time, or a full-date (midnight UTC): wall-clock ms; -1 if v is not one. */
static int64_t parse_rfc3339(const char *v)
{
    const char *p = v;
    struct tm tm = {0};
    int y = digits(&p, 4), mo = (*p == '-' ? p++, digits(&p, 2) : -1);
    int d = (*p == '-' ? p++, digits(&p, 2) : -1);
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31)
        return -1;
    tm.tm_year = y - 1900, tm.tm_mon = mo - 1, tm.tm_mday = d;
    int64_t frac_ms = 0, offset = 0;
    if (*p != '\0') {
        if (*p != 'T' && *p != 't' && *p != ' ')
            return -1;
        p++;
        tm.tm_hour = digits(&p, 2);
        tm.tm_min = *p == ':' ? (p++, digits(&p, 2)) : -1;
        tm.tm_sec = *p == ':' ? (p++, digits(&p, 2)) : -1;
        if (tm.tm_hour < 0 || tm.tm_hour > 23 || tm.tm_min < 0 || tm.tm_min > 59 || tm.tm_sec < 0 ||
            tm.tm_sec > 60)
            return -1;
        if (*p == '.') {
            p++;
            int64_t scale = 100;
            if (!isdigit((unsigned char)*p))
                return -1;
            for (; isdigit((unsigned char)*p); p++, scale /= 10)
                frac_ms += (*p - '0') * scale;
        }
        bool ok;
        offset = rfc3339_offset(p, &ok);
        if (!ok)
            return -1;
    }
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || tm.tm_mday != d) /* timegm normalises 31 February: refuse it */
        return -1;
    return ((int64_t)t - offset) * 1000 + frac_ms;
}

/* "1h30m", "90s", "7d": milliseconds; -1 if v is not such a duration. */
static int64_t parse_duration(const char *v)
{
    static const struct {
        char unit;
        int64_t ms;
    } units[] = {{'s', 1000}, {'m', 60000}, {'h', 3600000}, {'d', 86400000}, {'w', 604800000}};
    int64_t total = 0;
    const char *p = v;
    if (*p == '\0')
        return -1;
    while (*p != '\0') {
        int64_t n = 0;
        if (!isdigit((unsigned char)*p))
            return -1;
        for (; isdigit((unsigned char)*p); p++)
            if ((n = n * 10 + (*p - '0')) > DURATION_MAX_MS)
                return -1;
        size_t u = 0;
        while (u < PC_ARRAY_LEN(units) && units[u].unit != *p)
            u++;
        if (u == PC_ARRAY_LEN(units) || n > DURATION_MAX_MS / units[u].ms)
            return -1;
        total += n * units[u].ms;
        p++;
        if (total > DURATION_MAX_MS)
            return -1;
    }
    return total > 0 ? total : -1;
}

int purge_parse_older_than(const char *v, int64_t now_ms, int64_t *cutoff_ms)
{
    int64_t ms = parse_duration(v), at;
    if (ms > 0)
        at = now_ms - ms;
    else if ((at = parse_rfc3339(v)) < 0)
        return -1;
    /*
     * before_ms 0 is "no age filter" (purge_filter_narrow): the epoch itself (1970-01-01,
     * or a time that is it in another offset) would turn "older than 1970" into a flush of
     * everything. Nothing is stored before -1 ms either.
     */
    *cutoff_ms = at != 0 ? at : -1;
    return 0;
}

int purge_filter_set(struct purge_filter *f, const char *name, const char *value, int64_t now_ms,
                     char *err, size_t errlen)
{
    /* Every filter given must match: one given twice with two values matches nothing, and
     * keeping only the last would delete what the first excludes. */
    bool given = (strcmp(name, "tenant") == 0 && f->tenant[0] != '\0') ||
                 (strcmp(name, "namespace") == 0 && f->ns[0] != '\0') ||
                 (strcmp(name, "model") == 0 && f->model[0] != '\0') ||
                 (strcmp(name, "older-than") == 0 && f->before_ms != 0);
    if (given)
        return snprintf(err, errlen,
                        "%s given twice (filters combine: every one given must match; one "
                        "value each)",
                        name),
               -1;
    if (strcmp(name, "tenant") == 0) {
        if (!valid_tenant(value))
            return snprintf(err, errlen,
                            "tenant must be the 16 lower-case hex characters shown in the "
                            "access log and /stats"),
                   -1;
        snprintf(f->tenant, sizeof f->tenant, "%s", value);
    } else if (strcmp(name, "namespace") == 0) {
        if (!valid_ns(value))
            return snprintf(err, errlen,
                            "namespace must be 1-64 characters of A-Z a-z 0-9 . _ - (an "
                            "X-Cache-Namespace value)"),
                   -1;
        snprintf(f->ns, sizeof f->ns, "%s", value);
    } else if (strcmp(name, "model") == 0) {
        if (!valid_model(value))
            return snprintf(err, errlen,
                            "model must be 1-255 characters without control characters"),
                   -1;
        snprintf(f->model, sizeof f->model, "%s", value);
    } else if (strcmp(name, "older-than") == 0) {
        if (purge_parse_older_than(value, now_ms, &f->before_ms) < 0)
            return snprintf(err, errlen,
                            "older-than must be an RFC 3339 date (2026-12-01T00:00:00Z, or "
                            "2026-12-01) or a duration (90m, 2h, 7d, 1h30m)"),
                   -1;
    } else {
        return snprintf(err, errlen, "unknown filter %s (filters: " PURGE_FILTER_NAMES ")", name),
               -1;
    }
    return 0;
}

bool purge_filter_narrow(const struct purge_filter *f)
{
    return f->ns[0] != '\0' || f->model[0] != '\0' || f->before_ms != 0;
}

bool purge_key_valid(const char *id)
{
    char tenant_id[TENANT_ID_LEN + 1];
    unsigned char key[PC_SHA256_LEN];
    return id != NULL && entry_id_parse(id, strlen(id), tenant_id, key) == 0;
}

/* ---- keys and events ------------------------------------------------------------ */

/*
 * The tenant and exact key of an entry's Redis key ("pc:2:e:{TENANT:KEY}"),
 * range-checked: -1 for anything else.
 */
static int key_parse(const char *key, size_t len, unsigned char tenant[VINDEX_TENANT_LEN],
                     unsigned char exact[PC_SHA256_LEN], char tenant_hex[TENANT_ID_LEN + 1])
{
    size_t pl = sizeof(entry_prefix) - 1;
    if (len != pl + 2 + VSYNC_ID_LEN || memcmp(key, entry_prefix, pl) != 0 || key[pl] != '{' ||
        key[len - 1] != '}')
        return -1;
    if (vsync_parse_id(key + pl + 1, VSYNC_ID_LEN, tenant, exact) < 0)
        return -1;
    memcpy(tenant_hex, key + pl + 1, TENANT_ID_LEN);
    tenant_hex[TENANT_ID_LEN] = '\0';
    return 0;
}

/*
 * The entry key of key, an entry key or (owed) an owed mark: its tenant and exact key too,
 * range-checked. Its length, 0 for anything else.
 */
static size_t entry_of(const char *key, size_t len, bool owed, char ekey[ENTRY_KEY_MAX + 8],
                       unsigned char tenant[VINDEX_TENANT_LEN], unsigned char exact[PC_SHA256_LEN],
                       char tenant_hex[TENANT_ID_LEN + 1])
{
    size_t from = owed ? sizeof(owed_prefix) - 1 : sizeof(entry_prefix) - 1;
    size_t pl = sizeof(entry_prefix) - 1;
    if (len < from || len - from + pl >= ENTRY_KEY_MAX + 8 ||
        memcmp(key, owed ? owed_prefix : entry_prefix, from) != 0)
        return 0;
    memcpy(ekey, entry_prefix, pl);
    memcpy(ekey + pl, key + from, len - from);
    size_t elen = pl + len - from;
    ekey[elen] = '\0';
    return key_parse(ekey, elen, tenant, exact, tenant_hex) == 0 ? elen : 0;
}

/* The filter as the pick script's ARGV (after the dry-run flag); before holds the number. */
static void pick_args(const struct purge_filter *f, bool dry, char before[24], const char *args[4])
{
    if (f->before_ms != 0)
        snprintf(before, 24, "%lld", (long long)f->before_ms);
    else
        before[0] = '\0';
    args[0] = dry ? "1" : "0";
    args[1] = f->ns;
    args[2] = f->model;
    args[3] = before;
}

/* ---- on a worker's store ----------------------------------------------------------- */

struct purge_op {
    unsigned magic;
    struct store *store;
    struct l1 *l1;
    struct stats *st;
    struct store_cmd *cmd;
    purge_fn *cb;
    void *arg;
    unsigned char tenant[VINDEX_TENANT_LEN]; /* purge_entry: the one entry */
    unsigned char exact[PC_SHA256_LEN];
    char tenant_hex[TENANT_ID_LEN + 1];
    bool has_part; /* its vector record named its partition: the member list drops it too */
    unsigned char partition[VINDEX_PART_LEN];
    long long deleted; /* purge_entry: 1 if the entry was there */
    /* purge_matching: the del events not answered yet, whether one failed, the deletes' end */
    size_t events;
    bool event_failed, matched;
    enum store_status matched_st;
    struct purge_filter filter; /* purge_matching: what it picks once the owed events are out */
    long long owed;             /* del events an earlier purge owed, published by this one */
    /* purge_matching that failed: publishing what it owes once Redis answers again */
    bool retried;
    unsigned tries;
    uint64_t retry_until_ms;
};

static struct purge_op *op_new(struct store *s, struct l1 *l1, struct stats *st, purge_fn *cb,
                               void *arg)
{
    struct purge_op *op = pc_calloc(1, sizeof(*op));
    op->magic = PURGE_MAGIC;
    op->store = s;
    op->l1 = l1;
    op->st = st;
    op->cb = cb;
    op->arg = arg;
    return op;
}

static void op_free(struct purge_op *op)
{
    op->magic = 0;
    free(op);
}

static void finish(struct purge_op *op, enum store_status st, long long n)
{
    purge_fn *cb = op->cb;
    void *arg = op->arg;
    op_free(op);
    if (cb != NULL) /* NULL: purge_cancel came first */
        cb(arg, st == STORE_OK, n);
}

/* The entry's del event: the delete has worked once the stream took it. */
static void on_published(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    finish(op, st, op->deleted);
}

static void on_one(void *arg, enum store_status st, long long n)
{
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    if (st != STORE_OK) {
        finish(op, st, 0);
        return;
    }
    op->deleted = n > 0 ? 1 : 0;
    if (op->has_part) { /* the list's own slot: a command of its own */
        struct vsync_argv a;
        vsync_argv_member_del(&a, op->tenant, op->exact, op->partition);
        store_write(op->store, a.argc, a.argv, a.lens);
    }
    /*
     * Every instance drops it (XADD del: their L1 and vector index), this one's L1 at once. An
     * event the stream refused (a full Redis refuses XADD, not the delete) fails the delete
     * (503): the other instances' L1 would serve the answer for the rest of its TTL.
     */
    struct vsync_argv a;
    fence_argv_purged(&a, op->tenant, op->exact);
    l1_delete(op->l1, op->tenant_hex, op->exact);
    op->cmd = store_write_cb(op->store, a.argc, a.argv, a.lens, on_published, op);
    if (op->cmd == NULL)
        finish(op, STORE_ERR, op->deleted);
}

/* EVAL the delete of the entry, its vector record and its marks. */
static int delete_one(struct purge_op *op)
{
    char ekey[ENTRY_KEY_MAX], vkey[VSYNC_KEY_MAX], mkey[BOUND_KEY_MAX];
    size_t elen = entry_key(op->tenant_hex, op->exact, ekey);
    size_t vlen = vsync_vector_key(op->tenant, op->exact, vkey);
    bound_entry_key(op->tenant_hex, op->exact, mkey);
    const char *argv[] = {"EVAL", one_script, "3", ekey, vkey, mkey};
    size_t lens[] = {4, sizeof(one_script) - 1, 1, elen, vlen, strlen(mkey)};
    op->cmd = store_call_int(op->store, 6, argv, lens, on_one, op);
    return op->cmd != NULL ? 0 : -1;
}

/* The vector record, read first: its partition names the member list to drop it from. */
static void on_record(void *arg, enum store_status st, const char *val, size_t len)
{
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    int64_t expires;
    op->has_part = st == STORE_OK && val != NULL &&
                   vsync_record_partition(val, len, op->partition, &expires) == 0;
    if (delete_one(op) < 0)
        finish(op, STORE_ERR, 0);
}

struct purge_op *purge_entry(struct store *s, struct l1 *l1, struct stats *st,
                             const char *tenant_id, const unsigned char exact[PC_SHA256_LEN],
                             purge_fn *cb, void *arg)
{
    char ekey[ENTRY_KEY_MAX], vkey[VSYNC_KEY_MAX];
    size_t elen = entry_key(tenant_id, exact, ekey);
    struct purge_op *op = op_new(s, l1, st, cb, arg);
    memcpy(op->exact, exact, PC_SHA256_LEN);
    snprintf(op->tenant_hex, sizeof op->tenant_hex, "%.*s", TENANT_ID_LEN, tenant_id);
    if (key_parse(ekey, elen, op->tenant, op->exact, op->tenant_hex) < 0) {
        op_free(op); /* a tenant id that is no hex: the caller checks it first */
        return NULL;
    }
    size_t vlen = vsync_vector_key(op->tenant, op->exact, vkey);
    op->cmd = store_get(s, vkey, vlen, on_record, op);
    if (op->cmd == NULL) {
        op_free(op);
        return NULL;
    }
    return op;
}

/*
 * purge_matching is over once the deletes are and every del event is answered: an event the
 * stream refused (a full Redis refuses XADD, not the deletes) fails it (503), as the other
 * instances' L1 would serve those answers for the rest of their TTL (their owed marks stay,
 * and the purge run again publishes them).
 */
static void owed_retry_start(struct purge_op *op);

static void matching_end(struct purge_op *op)
{
    if (!op->matched || op->events > 0)
        return;
    if ((op->event_failed || op->matched_st != STORE_OK) && !op->retried) {
        owed_retry_start(op);
        return;
    }
    if (op->owed > 0)
        log_notice("purge: published the del events of %lld entr%s an earlier purge deleted "
                   "without telling the other instances (its reply from Redis was lost)",
                   op->owed, op->owed == 1 ? "y" : "ies");
    finish(op, op->event_failed ? STORE_ERR : op->matched_st, op->deleted);
}

/*
 * The entry's error-bound marks (and once its del event is on the stream, its owed mark) went
 * with it (or failed to: only counted, as running the purge again would not find the entry;
 * marks left only hold back an answer stored again under that key, for their TTL at most; an
 * owed mark left only makes a later purge publish the event again).
 */
static void on_marks_deleted(void *arg, enum store_status st, long long n)
{
    (void)st;
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->events--;
    matching_end(op);
}

/* A deleted entry's del event on its way, and what goes once the stream took it. */
struct owed_ev {
    struct purge_op *op;
    char mkey[BOUND_KEY_MAX]; /* its error-bound marks */
    char okey[OWED_KEY_MAX];  /* its owed mark */
};

/* UNLINK the marks of an entry, and its owed mark once its event is published (one tag). */
static void delete_marks(struct purge_op *op, const struct owed_ev *ev, bool published)
{
    const char *argv[] = {"UNLINK", ev->mkey, ev->okey};
    size_t lens[] = {6, strlen(ev->mkey), strlen(ev->okey)};
    if (store_write_cb(op->store, published ? 3 : 2, argv, lens, on_marks_deleted, op) != NULL)
        op->events++;
}

static void on_del_event(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct owed_ev *ev = arg;
    struct purge_op *op = ev->op;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->event_failed |= st != STORE_OK;
    delete_marks(op, ev, st == STORE_OK);
    free(ev);
    op->events--;
    matching_end(op);
}

/*
 * Tell every instance that the entry of key (an entry key, or with owed set an owed mark's)
 * is gone: its del event, then its marks; this instance's L1 drops it at once.
 */
static void publish_del(struct purge_op *op, const char *key, size_t len, bool owed)
{
    unsigned char tenant[VINDEX_TENANT_LEN], exact[PC_SHA256_LEN];
    char tenant_hex[TENANT_ID_LEN + 1], ekey[ENTRY_KEY_MAX + 8];
    size_t pl = sizeof(entry_prefix) - 1;
    if (entry_of(key, len, owed, ekey, tenant, exact, tenant_hex) == 0) {
        stats_incr(op->st, STAT_cache_corrupt); /* SCAN's pattern should have kept it out */
        return;
    }
    struct owed_ev *ev = pc_calloc(1, sizeof(*ev));
    ev->op = op;
    bound_entry_key(tenant_hex, exact, ev->mkey);
    snprintf(ev->okey, sizeof ev->okey, "%s%s", owed_prefix, ekey + pl);
    struct vsync_argv a;
    fence_argv_purged(&a, tenant, exact);
    if (store_write_cb(op->store, a.argc, a.argv, a.lens, on_del_event, ev) != NULL) {
        op->events++;
    } else {
        op->event_failed = true;
        delete_marks(op, ev, false);
        free(ev);
    }
    l1_delete(op->l1, tenant_hex, exact);
}

/* A picked entry (key), or key NULL and len entries the script could not read. */
static void on_picked(void *arg, const char *key, size_t len)
{
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    if (key == NULL)
        stats_add(op->st, STAT_cache_corrupt, (int64_t)len);
    else
        publish_del(op, key, len, false);
}

/* An owed mark still there: an earlier purge deleted its entry and did not publish that. */
static void on_owed(void *arg, const char *key, size_t len)
{
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    if (key == NULL)
        return;
    op->owed++;
    publish_del(op, key, len, true);
}

static void on_matching(void *arg, enum store_status st, long long n)
{
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    op->matched = true;
    op->matched_st = st;
    op->deleted = n;
    matching_end(op);
}

/* The owed events are on their way: now the entries the filter picks. */
static void on_owed_done(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    char pattern[ENTRY_KEY_MAX], before[24];
    const char *args[4];
    entry_pattern(op->filter.tenant[0] ? op->filter.tenant : NULL, pattern);
    pick_args(&op->filter, false, before, args);
    struct store_pick pick = {
        .script = pick_script,
        .nargs = 4,
        .args = args,
        .twin_from = entry_prefix,
        .twin_to = vector_prefix,
        .twin2_to = owed_prefix,
        .each = on_picked,
    };
    if (st == STORE_OK)
        op->cmd = store_delete_picked(op->store, pattern, &pick, on_matching, op);
    if (op->cmd == NULL)
        on_matching(op, st == STORE_OK ? STORE_ERR : st, 0);
}

static const char owed_pattern[] = PC_KEY_PREFIX "pd:*";

/* The del events earlier purges still owe (their owed marks), published; cb gets the count. */
static struct store_cmd *owed_publish(struct purge_op *op, store_int_fn *cb)
{
    const struct store_pick pick = {
        .script = owed_script,
        .twin_from = owed_prefix,
        .twin_to = entry_prefix,
        .each = on_owed,
    };
    return store_delete_picked(op->store, owed_pattern, &pick, cb, op);
}

static void owed_retry_wait(struct purge_op *op);

/* The retry's owed events are on their way: the purge ends (failed); its SCAN failed: again. */
static void on_retry_done(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    if (st != STORE_OK && op->tries < OWED_TRIES && pc_mono_ms() < op->retry_until_ms) {
        owed_retry_wait(op);
        return;
    }
    op->matched = true;
    matching_end(op);
}

/* Redis answers again (a lost reply drops the connection first), or it did not in time. */
static void on_retry_ready(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    if (st == STORE_OK) {
        op->tries++;
        op->cmd = owed_publish(op, on_retry_done);
        if (op->cmd != NULL)
            return;
    }
    if (st != STORE_ERR && op->tries < OWED_TRIES && pc_mono_ms() < op->retry_until_ms) {
        owed_retry_wait(op); /* READY, yet refused: the writes' connection is going */
        return;
    }
    op->matched = true; /* Redis did not answer again: the owed marks wait for a rerun */
    matching_end(op);
}

static void owed_retry_wait(struct purge_op *op)
{
    uint64_t now = pc_mono_ms();
    int64_t left = now < op->retry_until_ms ? (int64_t)(op->retry_until_ms - now) : 0;
    op->cmd = store_when_ready(op->store, left, on_retry_ready, op);
    if (op->cmd == NULL) {
        op->matched = true;
        matching_end(op);
    }
}

/*
 * The purge failed: some of its picks may have deleted entries whose reply never came (their
 * owed marks are in Redis). Before it says so, it publishes their events once Redis answers
 * again (within OWED_RETRY_MS), so that no instance's L1 goes on serving them after the
 * failure is reported; what is left waits for the purge run again.
 */
static void owed_retry_start(struct purge_op *op)
{
    op->retried = true;
    op->matched = false;
    op->retry_until_ms = pc_mono_ms() + OWED_RETRY_MS;
    owed_retry_wait(op);
}

/*
 * The notice is in the stream (or refused): the deletes start, or the purge fails having
 * deleted nothing. The other instances hold back the answers on their way from the notice
 * alone (a del event names only a key stored already): refused (a full Redis refuses XADD,
 * not the deletes that free memory) and the purge said done, they stored those answers.
 */
static void on_notice(void *arg, enum store_status st, long long n)
{
    (void)n;
    struct purge_op *op = arg;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cmd = NULL;
    if (st == STORE_OK)
        op->cmd = owed_publish(op, on_owed_done);
    if (op->cmd == NULL)
        finish(op, STORE_ERR, 0);
}

/*
 * The notice; then the del events earlier purges still owe (their owed marks: the reply of
 * their pick never came), then the entries the filter picks.
 */
struct purge_op *purge_matching(struct store *s, struct l1 *l1, struct stats *st,
                                const struct purge_filter *f, purge_fn *cb, void *arg)
{
    struct purge_op *op = op_new(s, l1, st, cb, arg);
    op->filter = *f;
    op->cmd = fence_notice(s, on_notice, op); /* before the deletes */
    if (op->cmd == NULL) {
        op_free(op);
        return NULL;
    }
    return op;
}

/*
 * The operation runs on to its end, only its callback is dropped: a script or UNLINK on its
 * way may already have deleted entries, and their del events must follow (left out, every
 * other instance's L1 would serve the purged answers for the rest of their TTL, and a purge
 * run again would not find them to tell it). The op frees itself when its commands end (the
 * store completes every command, at the latest when it is destroyed).
 */
void purge_cancel(struct purge_op **opp)
{
    struct purge_op *op = *opp;
    if (op == NULL)
        return;
    *opp = NULL;
    PC_CHECK_OBJ(op, PURGE_MAGIC);
    op->cb = NULL;
}

/* ---- the command ------------------------------------------------------------------ */

/*
 * Commands whose replies are judged together (pipe_drain). On a single
 * server they go out pipelined on the one connection; on a cluster each goes
 * at once to the node of its key (a pipeline is one connection's), and the
 * first failure is kept for pipe_drain.
 */
struct cli_pipe {
    struct rcli *k;
    size_t queued;
    char failed[256]; /* cluster: the first failure; "" if none */
};

static void pipe_add(struct cli_pipe *p, int argc, const char **argv, const size_t *lens)
{
    if (p->k->cl == NULL) {
        redisAppendCommandArgv(p->k->rc, argc, argv, lens);
        p->queued++;
        return;
    }
    redisReply *r = rcli_call(p->k, argc, argv, lens);
    if (p->failed[0] == '\0' && (r == NULL || r->type == REDIS_REPLY_ERROR))
        snprintf(p->failed, sizeof(p->failed), "%.200s", r != NULL ? r->str : p->k->errmsg);
    if (r != NULL)
        freeReplyObject(r);
}

/* Judge what pipe_add sent; -1 after a message if one failed. */
static int pipe_drain(struct cli_pipe *p, const char *what)
{
    struct rcli *k = p->k;
    int rc = 0;
    if (p->failed[0] != '\0') {
        rcli_error(k, "%s: %s failed: %s", k->where, what, p->failed);
        p->failed[0] = '\0';
        rc = -1;
    }
    for (; p->queued > 0; p->queued--) {
        void *r = NULL;
        if (rcli_get_reply(k->rc, &r) != REDIS_OK || r == NULL) {
            rcli_error(k, "%s: %s: %s", k->where, what,
                       k->rc->errstr[0] ? k->rc->errstr : "no reply");
            p->queued = 0;
            return -1;
        }
        if (((redisReply *)r)->type == REDIS_REPLY_ERROR && rc == 0) {
            rcli_error(k, "%s: %s failed: %s", k->where, what, ((redisReply *)r)->str);
            rc = -1;
        }
        freeReplyObject(r);
    }
    return rc;
}

/* The schema must be the one this build writes: entries of another layout are not read. */
static int cli_schema(struct rcli *k)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    redisReply *r = rcli_command(k, "GET " PC_SCHEMA_KEY, 2, argv, NULL);
    if (r == NULL)
        return -1;
    char err[160];
    long v = 0;
    int rc = migrate_parse_version(r, &v, err, sizeof err);
    freeReplyObject(r);
    if (rc < 0) {
        rcli_error(k, "%s: %s", k->where, err);
        return -1;
    }
    if (v != migrate_latest()) {
        rcli_error(k,
                   "%s: schema version %ld, this build reads %ld: run `promptcache migrate` (or "
                   "use the matching promptcache)",
                   k->where, v, migrate_latest());
        return -1;
    }
    return 0;
}

/* --key ID: that entry, its vector record and marks (dry: whether the entry is there). */
static int cli_one(struct rcli *k, const char *id, bool dry, long long *n)
{
    char tenant_hex[TENANT_ID_LEN + 1], ekey[ENTRY_KEY_MAX], vkey[VSYNC_KEY_MAX];
    unsigned char exact[PC_SHA256_LEN], tenant[VINDEX_TENANT_LEN];
    if (entry_id_parse(id, strlen(id), tenant_hex, exact) < 0) {
        rcli_error(k, "--key must be an entry id: the %d hex characters of X-Cache-Key",
                   ENTRY_ID_LEN);
        return -1;
    }
    size_t elen = entry_key(tenant_hex, exact, ekey);
    if (key_parse(ekey, elen, tenant, exact, tenant_hex) < 0)
        return -1;
    size_t vlen = vsync_vector_key(tenant, exact, vkey);
    char mkey[BOUND_KEY_MAX];
    bound_entry_key(tenant_hex, exact, mkey);
    const char *argv[] = {"EVAL", one_script, "3", ekey, vkey, mkey};
    size_t lens[] = {4, sizeof(one_script) - 1, 1, elen, vlen, strlen(mkey)};
    const char *exists[] = {"EXISTS", ekey};
    size_t exists_lens[] = {6, elen};
    const char *get[] = {"GET", vkey};
    size_t get_lens[] = {3, vlen};
    unsigned char part[VINDEX_PART_LEN];
    int64_t expires;
    /* Its vector record names its partition: the member list drops it too. */
    redisReply *r = dry ? NULL : rcli_command(k, "GET (its vector record)", 2, get, get_lens);
    bool has_part = r != NULL && r->type == REDIS_REPLY_STRING &&
                    vsync_record_partition(r->str, r->len, part, &expires) == 0;
    if (r != NULL)
        freeReplyObject(r);
    r = dry ? rcli_command(k, "EXISTS", 2, exists, exists_lens)
            : rcli_command(k, "EVAL (delete one entry)", 6, argv, lens);
    if (r == NULL)
        return -1;
    *n = r->type == REDIS_REPLY_INTEGER && r->integer > 0 ? 1 : 0;
    freeReplyObject(r);
    if (dry)
        return 0;
    struct vsync_argv a, m;
    struct cli_pipe p = {.k = k};
    if (has_part) {
        vsync_argv_member_del(&m, tenant, exact, part);
        pipe_add(&p, m.argc, m.argv, m.lens);
    }
    fence_argv_purged(&a, tenant, exact);
    pipe_add(&p, a.argc, a.argv, a.lens);
    return pipe_drain(&p, "ZREM, XADD del");
}

/* The pick's reply: {unreadable >= 0, positions of entries (1, 4, 7...) <= nkeys}. */
static bool pick_reply_ok(const redisReply *r, size_t nkeys)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->elements > nkeys / 3 + 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0)
        return false;
    for (size_t i = 1; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_INTEGER || e->integer < 1 || (size_t)e->integer > nkeys ||
            (e->integer - 1) % 3 != 0)
            return false;
    }
    return true;
}

struct cli_batch {
    const char **argv;
    size_t *lens;
    char **twins; /* per entry: its vector record, its owed mark */
    size_t nkeys; /* entries, vector records and owed marks */
    char num[24];
};

/* One argument of the batch's EVAL. */
static void batch_arg(struct cli_batch *b, size_t i, const char *s, size_t len)
{
    b->argv[i] = s;
    b->lens[i] = len;
}

/* key with the entry prefix (pl bytes) replaced by prefix: same tag. */
static char *twin_of(const redisReply *e, size_t pl, const char *prefix)
{
    size_t rest = e->len > pl ? e->len - pl : 0, tl = strlen(prefix);
    char *t = pc_malloc(tl + rest + 1);
    memcpy(t, prefix, tl);
    memcpy(t + tl, e->str + e->len - rest, rest);
    t[tl + rest] = '\0';
    return t;
}

/*
 * EVAL pick 3N entry vector owed ... args for one SCAN batch (keys: entries; the vector record
 * and the owed mark are the key with the e: prefix replaced by v: and pd:, the same tag).
 */
static void batch_build(struct cli_batch *b, const redisReply *keys, const char *const args[4])
{
    size_t n = keys->elements, argc = 3 + 3 * n + 4, pl = sizeof(entry_prefix) - 1;
    snprintf(b->num, sizeof b->num, "%zu", 3 * n);
    b->argv = pc_calloc(argc, sizeof(*b->argv));
    b->lens = pc_calloc(argc, sizeof(*b->lens));
    b->twins = pc_calloc(2 * n, sizeof(*b->twins));
    b->nkeys = 3 * n;
    batch_arg(b, 0, "EVAL", 4);
    batch_arg(b, 1, pick_script, sizeof(pick_script) - 1);
    batch_arg(b, 2, b->num, strlen(b->num));
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = keys->element[i];
        b->twins[2 * i] = twin_of(e, pl, vector_prefix);
        b->twins[2 * i + 1] = twin_of(e, pl, owed_prefix);
        batch_arg(b, 3 + 3 * i, e->str, e->len);
        batch_arg(b, 4 + 3 * i, b->twins[2 * i], strlen(b->twins[2 * i]));
        batch_arg(b, 5 + 3 * i, b->twins[2 * i + 1], strlen(b->twins[2 * i + 1]));
    }
    for (size_t i = 0; i < 4; i++)
        batch_arg(b, 3 + 3 * n + i, args[i], strlen(args[i]));
}

static void batch_free(struct cli_batch *b, size_t n)
{
    for (size_t i = 0; i < 2 * n; i++)
        free(b->twins[i]);
    free(b->twins);
    free(b->argv);
    free(b->lens);
}

/*
 * The del events of entries deleted (keys, each an entry key or with owed set an owed mark's),
 * then, once the stream took every one, their marks and owed marks (one tag each); with an
 * event refused only the marks, the owed marks stay for the purge run again.
 */
static int cli_publish(struct rcli *k, const redisReply *const *keys, size_t n, bool owed)
{
    size_t pl = sizeof(entry_prefix) - 1;
    struct cli_pipe p = {.k = k};
    bool *ok = pc_calloc(n ? n : 1, sizeof(*ok));
    char ekey[ENTRY_KEY_MAX + 8], hex[TENANT_ID_LEN + 1];
    unsigned char tenant[VINDEX_TENANT_LEN], exact[PC_SHA256_LEN];
    for (size_t i = 0; i < n; i++) {
        if (entry_of(keys[i]->str, keys[i]->len, owed, ekey, tenant, exact, hex) == 0)
            continue; /* not an entry's: SCAN's pattern keeps them out */
        struct vsync_argv a;
        fence_argv_purged(&a, tenant, exact);
        pipe_add(&p, a.argc, a.argv, a.lens);
        ok[i] = true;
    }
    int rc = pipe_drain(&p, "XADD del");
    for (size_t i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        char okey[OWED_KEY_MAX], mkey[BOUND_KEY_MAX];
        entry_of(keys[i]->str, keys[i]->len, owed, ekey, tenant, exact, hex);
        bound_entry_key(hex, exact, mkey); /* its error-bound marks go with it */
        snprintf(okey, sizeof okey, "%s%s", owed_prefix, ekey + pl);
        const char *unlink[] = {"UNLINK", mkey, okey};
        size_t unlink_lens[] = {6, strlen(mkey), strlen(okey)};
        pipe_add(&p, rc == 0 ? 3 : 2, unlink, unlink_lens);
    }
    free(ok);
    int rc2 = pipe_drain(&p, "UNLINK marks");
    return rc < 0 ? rc : rc2;
}

/* One SCAN batch through the pick script, then a del event per picked entry. */
static int cli_pick_batch(struct rcli *k, const redisReply *keys, const char *const args[4],
                          bool dry, long long *n, long long *unreadable)
{
    struct cli_batch b;
    batch_build(&b, keys, args);
    redisReply *r = rcli_command(k, "EVAL (pick)", (int)(3 + b.nkeys + 4), b.argv, b.lens);
    int rc = -1;
    if (r != NULL && !pick_reply_ok(r, b.nkeys)) {
        rcli_error(k, "%s: the pick script's reply is not what it sends", k->where);
    } else if (r != NULL) {
        size_t m = dry ? 0 : r->elements - 1;
        const redisReply **picked = pc_calloc(m ? m : 1, sizeof(*picked));
        for (size_t i = 0; i < m; i++)
            picked[i] = keys->element[(size_t)(r->element[i + 1]->integer - 1) / 3];
        *n += (long long)r->elements - 1;
        *unreadable += r->element[0]->integer;
        rc = cli_publish(k, picked, m, false);
        free(picked);
    }
    if (r != NULL)
        freeReplyObject(r);
    batch_free(&b, keys->elements);
    return rc;
}

struct slot_of {
    unsigned slot;
    redisReply *key;
};

static int slot_of_cmp(const void *a, const void *b)
{
    const struct slot_of *x = a, *y = b;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : 0;
}

/*
 * A SCAN batch through the pick script: in one EVAL on a single server; on a
 * cluster one EVAL per slot (a script's keys must share one there; an entry
 * and its vector record do: one tag).
 */
static int cli_pick_slots(struct rcli *k, const redisReply *keys, const char *const args[4],
                          bool dry, long long *n, long long *unreadable)
{
    if (k->cl == NULL)
        return cli_pick_batch(k, keys, args, dry, n, unreadable);
    size_t m = keys->elements;
    struct slot_of *so = pc_malloc(m * sizeof(*so));
    redisReply **sorted = pc_malloc(m * sizeof(*sorted));
    for (size_t i = 0; i < m; i++) {
        so[i].key = keys->element[i];
        so[i].slot = cluster_slot(so[i].key->str, so[i].key->len);
    }
    qsort(so, m, sizeof(*so), slot_of_cmp);
    for (size_t i = 0; i < m; i++)
        sorted[i] = so[i].key;
    int rc = 0;
    for (size_t g = 0, end; g < m && rc == 0; g = end) {
        for (end = g + 1; end < m && so[end].slot == so[g].slot; end++)
            ;
        redisReply group = {.type = REDIS_REPLY_ARRAY, .elements = end - g, .element = sorted + g};
        rc = cli_pick_batch(k, &group, args, dry, n, unreadable);
    }
    free(sorted);
    free(so);
    return rc;
}

/* SCAN reply [cursor, [key...]] with string keys; the cursor copied into cursor. */
static bool scan_ok(const redisReply *r, char cursor[32])
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len == 0 ||
        r->element[0]->len >= 32 || r->element[1]->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < r->element[1]->elements; i++)
        if (r->element[1]->element[i]->type != REDIS_REPLY_STRING)
            return false;
    memcpy(cursor, r->element[0]->str, r->element[0]->len);
    cursor[r->element[0]->len] = '\0';
    return true;
}

/*
 * The del events earlier purges owe: the entries their pick deleted, its reply lost (a
 * timeout, a lost connection) before they were published. *owed: how many.
 */
static int cli_owed(struct rcli *k, long long *owed)
{
    char cursor[32] = "0";
    size_t ol = sizeof(owed_prefix) - 1, el = sizeof(entry_prefix) - 1;
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", PC_KEY_PREFIX "pd:*", "COUNT", SCAN_COUNT};
        redisReply *r = rcli_command(k, "SCAN", 6, argv, NULL);
        if (r == NULL)
            return -1;
        int rc = scan_ok(r, cursor) ? 0 : -1;
        if (rc < 0)
            rcli_error(k, "%s: SCAN: unexpected reply", k->where);
        size_t m = rc == 0 ? r->element[1]->elements : 0, n = 0;
        const redisReply **due = pc_calloc(m ? m : 1, sizeof(*due));
        /* Usually none: one EVAL each (a mark and its entry, one tag) */
        for (size_t i = 0; i < m && rc == 0; i++) {
            const redisReply *e = r->element[1]->element[i];
            char ekey[OWED_KEY_MAX];
            if (e->len < ol || e->len - ol + el >= sizeof ekey)
                continue;
            memcpy(ekey, entry_prefix, el);
            memcpy(ekey + el, e->str + ol, e->len - ol);
            const char *eargv[] = {"EVAL", owed_script, "2", e->str, ekey};
            size_t elens[] = {4, sizeof(owed_script) - 1, 1, e->len, el + e->len - ol};
            redisReply *o = rcli_command(k, "EVAL (owed)", 5, eargv, elens);
            if (o == NULL) {
                rc = -1;
            } else if (o->type != REDIS_REPLY_ARRAY || o->elements < 1 || o->elements > 2) {
                rcli_error(k, "%s: EVAL (owed): %s", k->where,
                           o->type == REDIS_REPLY_ERROR ? o->str : "unexpected reply");
                rc = -1;
            } else if (o->elements == 2) {
                due[n++] = e;
            }
            if (o != NULL)
                freeReplyObject(o);
        }
        if (rc == 0 && n > 0)
            rc = cli_publish(k, due, n, true);
        if (rc == 0)
            *owed += (long long)n;
        free(due);
        freeReplyObject(r);
        if (rc < 0)
            return -1;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/* Before a purge's deletes: no instance stores an answer asked for before (pc_fence.h). */
static int cli_notice(struct rcli *k)
{
    struct vsync_argv a;
    struct cli_pipe p = {.k = k};
    fence_argv_notice(&a);
    pipe_add(&p, a.argc, a.argv, a.lens);
    return pipe_drain(&p, "XADD (the purge's notice)");
}

/* Every entry the filter picks, batch by batch; *unreadable: values the script could not read. */
static int cli_matching(struct rcli *k, const struct purge_filter *f, bool dry, long long *n,
                        long long *unreadable)
{
    char pattern[ENTRY_KEY_MAX], before[24], cursor[32] = "0";
    const char *args[4];
    entry_pattern(f->tenant[0] ? f->tenant : NULL, pattern);
    pick_args(f, dry, before, args);
    long long owed = 0;
    if (!dry && (cli_notice(k) < 0 || cli_owed(k, &owed) < 0))
        return -1;
    if (owed > 0)
        printf("published the del events of %lld entr%s an earlier purge deleted without telling "
               "the other instances\n",
               owed, owed == 1 ? "y" : "ies");
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
        redisReply *r = rcli_command(k, "SCAN", 6, argv, NULL);
        if (r == NULL)
            return -1;
        int rc = scan_ok(r, cursor) ? 0 : -1;
        if (rc < 0)
            rcli_error(k, "%s: SCAN: unexpected reply", k->where);
        else if (r->element[1]->elements > 0)
            rc = cli_pick_slots(k, r->element[1], args, dry, n, unreadable);
        freeReplyObject(r);
        if (rc < 0)
            return -1;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/*
 * Count the keys of pattern, and unless dry delete them (a tenant's or every
 * entry, then their vector records: a flush needs no filter, so no script).
 */
static int cli_flush_pattern(struct rcli *k, const char *pattern, bool dry, long long *n)
{
    char cursor[32] = "0";
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT};
        redisReply *r = rcli_command(k, "SCAN", 6, argv, NULL);
        if (r == NULL)
            return -1;
        int rc = scan_ok(r, cursor) ? 0 : -1;
        size_t m = rc == 0 ? r->element[1]->elements : 0;
        if (rc < 0)
            rcli_error(k, "%s: SCAN: unexpected reply", k->where);
        struct cli_pipe p = {.k = k};
        for (size_t i = 0; i < m && !dry; i++) {
            const redisReply *e = r->element[1]->element[i];
            const char *argv2[] = {"UNLINK", e->str};
            size_t lens2[] = {6, e->len};
            pipe_add(&p, 2, argv2, lens2);
        }
        if (rc == 0 && !dry)
            rc = pipe_drain(&p, "UNLINK");
        *n += (long long)m;
        freeReplyObject(r);
        if (rc < 0)
            return -1;
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

/*
 * --tenant alone, or --all: the keys, their vector records, their member lists and marks, one
 * flush event for every L1.
 */
static int cli_flush(struct rcli *k, const char *tenant_hex, bool dry, long long *n)
{
    char pattern[ENTRY_KEY_MAX];
    long long vectors = 0;
    entry_pattern(tenant_hex, pattern);
    if ((!dry && cli_notice(k) < 0) || cli_flush_pattern(k, pattern, dry, n) < 0)
        return -1;
    snprintf(pattern, sizeof pattern, "%s%s%.*s%s", vector_prefix, tenant_hex ? "{" : "",
             TENANT_ID_LEN, tenant_hex ? tenant_hex : "", tenant_hex ? ":*" : "*");
    if (dry || cli_flush_pattern(k, pattern, false, &vectors) < 0)
        return dry ? 0 : -1;
    char members[VSYNC_KEY_MAX];
    long long lists = 0;
    vsync_members_pattern(tenant_hex, members); /* the partitions' member lists go with them */
    if (cli_flush_pattern(k, members, false, &lists) < 0)
        return -1;
    char marks[BOUND_KEY_MAX];
    long long marked = 0;
    bound_entry_pattern(tenant_hex, marks); /* and the error bound's marks of the entries */
    if (cli_flush_pattern(k, marks, false, &marked) < 0)
        return -1;
    unsigned char t[VINDEX_TENANT_LEN];
    for (size_t i = 0; tenant_hex != NULL && i < VINDEX_TENANT_LEN; i++) {
        unsigned v = 0;
        sscanf(tenant_hex + 2 * i, "%2x", &v);
        t[i] = (unsigned char)v;
    }
    struct vsync_argv a;
    struct cli_pipe p = {.k = k};
    vsync_argv_flush(&a, tenant_hex != NULL ? t : NULL);
    pipe_add(&p, a.argc, a.argv, a.lens);
    return pipe_drain(&p, "XADD flush");
}

int purge_cli(const struct conf *c, const struct purge_cli *o)
{
    struct rcli k = {0};
    long long n = 0, unreadable = 0;
    int rc = -1;
    /* As migrate and report: SIGPIPE ignored, redis-timeout (at least 1 s) for every reply. */
    if (rcli_connect(&k, c, "purge") == 0 && cli_schema(&k) == 0) {
        if (o->id != NULL)
            rc = cli_one(&k, o->id, o->dry_run, &n);
        else if (purge_filter_narrow(&o->filter))
            rc = cli_matching(&k, &o->filter, o->dry_run, &n, &unreadable);
        else
            rc = cli_flush(&k, o->filter.tenant[0] ? o->filter.tenant : NULL, o->dry_run, &n);
    }
    if (rc != 0 && o->id == NULL && purge_filter_narrow(&o->filter) && !o->dry_run &&
        k.rc != NULL) {
        /*
         * A pick whose reply never came may have deleted entries (their owed marks are in
         * Redis): on a new connection, their del events before the failure is told.
         */
        struct rcli again = {0};
        long long owed = 0;
        if (rcli_connect(&again, c, "purge") == 0 && cli_owed(&again, &owed) == 0 && owed > 0)
            printf("published the del events of %lld entr%s this purge deleted before it "
                   "failed\n",
                   owed, owed == 1 ? "y" : "ies");
        rcli_close(&again);
    }
    if (rc == 0) {
        printf(o->dry_run ? "would delete %lld entr%s (dry run: nothing deleted)\n"
                          : "deleted %lld entr%s\n",
               n, n == 1 ? "y" : "ies");
        if (unreadable > 0)
            printf("left alone: %lld value%s that did not read as an entry\n", unreadable,
                   unreadable == 1 ? "" : "s");
    }
    rcli_close(&k);
    return rc == 0 ? 0 : 1;
}
