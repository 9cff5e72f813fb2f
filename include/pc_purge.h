/*
 * pc_purge.h - targeted invalidation: delete one entry by its id (pc_entry.h,
 * what X-Cache-Key shows), or the entries that match a filter - X-Cache-
 * Namespace, model, created before a time, optionally within one tenant -
 * each with its vector record and error-bound marks, and tell every instance through the vector
 * stream (op=del, pc_vsync.h), which every process's L1 and vector index
 * follow. The admin API runs it on a worker's store (asynchronous); the
 * `promptcache purge` command on a blocking connection (pc_rcli.h). Both
 * run the same Lua script over each SCAN batch:
 *   SCAN pc:2:e:[{tenant:]* ─▶ EVAL pick (KEYS: entry, vector, owed mark, ...;
 *        ▲                       reads each entry's head and sections with
 *        │                       GETRANGE, never its body; UNLINKs the picked
 *        │                       entry and its vector and sets its owed mark
 *        │                       pc:2:pd:{tenant:key}, all of one hash tag)
 *        │                               │ {unreadable, position...}
 *        └──── next batch ◀── XADD vs op=del k=<tenant:key> per picked entry (the
 *                             stream is a key of its own: a separate command), then
 *                             UNLINK pc:2:o:{tenant:key} (its error-bound marks) and,
 *                             once the XADD was answered, its owed mark
 * Before the batches, SCAN pc:2:pd:* and EVAL owed: the del events of entries an
 * earlier purge deleted whose pick reply never came (a timeout, a lost
 * connection) are published, then their marks go.
 * Entries carry their namespace and model since they are kept (entry.c,
 * section ENTRY_SEC_META); older ones carry neither, so a delete by
 * namespace or model leaves them alone (they still go by age, by tenant, or
 * with everything). No schema change: the section is an addition older
 * versions skip.
 */
#ifndef PC_PURGE_H
#define PC_PURGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_entry.h"

struct conf;
struct l1;
struct stats;
struct store;

#define PURGE_NS_MAX 64 /* X-Cache-Namespace values are at most this long */

/* What to delete; an empty string (or 0) is "any". */
struct purge_filter {
    char tenant[TENANT_ID_LEN + 1]; /* one tenant's entries (16 lower-case hex) */
    char ns[PURGE_NS_MAX + 1];      /* X-Cache-Namespace */
    char model[ENTRY_META_MAX + 1]; /* the request's "model" */
    int64_t before_ms;              /* created before this (wall clock, ms) */
};

/* The filter names, as query parameters and (with --) command-line options. */
#define PURGE_FILTER_NAMES "tenant, namespace, model, older-than"

/*
 * Set the filter called name ("tenant", "namespace", "model" or
 * "older-than") from its text; now_ms is the clock older-than counts back
 * from. -1 with a message in err for an unknown name, a bad value, or a
 * filter f already has (given twice).
 */
int purge_filter_set(struct purge_filter *f, const char *name, const char *value, int64_t now_ms,
                     char *err, size_t errlen);
/* Whether f selects by namespace, model or age (else it is a tenant's flush, or everything's). */
bool purge_filter_narrow(const struct purge_filter *f);
/* Whether id reads as an entry id (an X-Cache-Key: ENTRY_ID_LEN hex characters). */
bool purge_key_valid(const char *id);
/*
 * older-than: an RFC 3339 date-time (2026-12-01T00:00:00Z, with an offset or
 * fraction as RFC 3339 allows) or date (midnight UTC), or a duration back
 * from now_ms: a sequence of NUMBER UNIT with units s, m, h, d, w (90m,
 * 1h30m, 7d). The cutoff in wall-clock ms; -1 if v is neither.
 */
int purge_parse_older_than(const char *v, int64_t now_ms, int64_t *cutoff_ms);

/* ---- on a worker's store (the admin API) --------------------------------- */

struct purge_op;
/* ok false: Redis failed or timed out (some entries may be gone already). */
typedef void purge_fn(void *arg, bool ok, long long deleted);

/*
 * Delete the entry (tenant_id, exact), its vector record and its error-bound
 * marks (pc_bound.h), then publish
 * its del event (also when it was not there: an L1 may still hold it) and
 * drop it from l1 (may be NULL). NULL (no callback) if Redis is not ready;
 * else cb runs exactly once unless purge_cancel comes first.
 */
struct purge_op *purge_entry(struct store *s, struct l1 *l1, struct stats *st,
                             const char *tenant_id, const unsigned char exact[PC_SHA256_LEN],
                             purge_fn *cb, void *arg);
/* Delete what f selects (purge_filter_narrow must hold), as purge_entry does for one. */
struct purge_op *purge_matching(struct store *s, struct l1 *l1, struct stats *st,
                                const struct purge_filter *f, purge_fn *cb, void *arg);
/*
 * The callback of *op will not run; *op is NULLed (NULL *op is ignored). The
 * deletes run on to their end, with their del events (the op frees itself).
 */
void purge_cancel(struct purge_op **op);

/* ---- the command ---------------------------------------------------------- */

struct purge_cli {
    struct purge_filter filter;
    const char *id; /* --key ID: that one entry, or NULL */
    bool all;       /* --all: every entry (no filter given) */
    bool dry_run;   /* count, delete nothing */
};

/*
 * `promptcache purge`: connect to c->redis (blocking), check the schema,
 * delete (or with dry_run only count) what the options select, publish the
 * stream events, print the count. Returns the exit status.
 */
int purge_cli(const struct conf *c, const struct purge_cli *o);

#endif
