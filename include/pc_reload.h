/*
 * pc_reload.h - SIGHUP: reopen the log files, read the configuration again
 * and hand the keys that are safe to change at runtime to every worker.
 *
 * Workers read their configuration through w->conf, on their own thread,
 * inside their own callbacks. A reload never changes a struct conf in place:
 * it makes a new immutable copy (a snapshot, conf_merge_reload), publishes
 * it, and wakes every worker, which switches w->conf between two callbacks
 * of its loop and acknowledges. A snapshot is freed once every worker has
 * switched past it - no callback can still hold it then (RCU, with a turn of
 * each worker's loop as the grace period). This keeps every reader as it is
 * (plain reads of w->conf->cache_ttl, no atomics or locks on the request
 * path) and makes a multi-field change (cache-ttl with cache-max-ttl) appear
 * all at once. The configuration the process started with is never freed
 * here: modules built at start may keep pointers into it, for the keys that
 * need a restart anyway.
 */
#ifndef PC_RELOAD_H
#define PC_RELOAD_H

struct conf;
struct event_base;
struct reload;
struct worker;

/* On the main thread's base; boot is the configuration the workers start with. */
struct reload *reload_create(struct event_base *base, const struct conf *boot);
/* Set up the wake-up of each worker; before any worker is destroyed. -1 on failure. */
int reload_attach(struct reload *r, struct worker *const *workers, int n);
/* SIGHUP, on the main thread: reopen logs, reload, publish. Every outcome is logged. */
void reload_run(struct reload *r);
/* The configuration in force now, for the main thread. */
const struct conf *reload_current(const struct reload *r);
/* Drop the wake-ups: after the workers' threads were joined, before they are destroyed. */
void reload_detach(struct reload *r);
/* Free every snapshot: after the workers were destroyed. */
void reload_destroy(struct reload **r);

#endif
