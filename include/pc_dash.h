/*
 * pc_dash.h - the figures behind /dashboard: hit rate, money and latency
 * over the last hours, read from the hourly counters in Redis (pc_tally.h),
 * so they survive restarts and sum every instance's traffic.
 *
 * One per process, shared by the workers. Reading Redis is done by a
 * background thread with the blocking client (pc_rcli.h: HSCAN a page at a
 * time), never on an event loop: a request renders whatever was read last
 * and, when that is older than DASH_FRESH_MS, starts a new read (at most one
 * at a time). Hours before the previous one do not change any more and are
 * read once; the current and the previous hour are read again each time.
 * The raw fields are kept, so every render prices them with the price list
 * in force (a reload applies at once).
 */
#ifndef PC_DASH_H
#define PC_DASH_H

#include <stdint.h>

#include "pc_util.h"

struct conf;
struct dash;
struct pricing;
struct tenants;

#define DASH_HOURS_MAX 168 /* a week */
#define DASH_FRESH_MS  2000

/* Reads conf->redis (copied). Never NULL. */
struct dash *dash_create(const struct conf *c);
/*
 * Start the first read now (so the dashboard has figures at once), and let
 * it hand the busiest models of the last 24 hours, every instance's, to the
 * metrics' model label (stats_seed_models): "top N by traffic" across
 * restarts, with the slots left over taken first come.
 */
void dash_start(struct dash *d);
/* Waits for a read in progress. *d is NULLed. */
void dash_destroy(struct dash **d);
/*
 * The JSON of /dashboard/data for the last `hours` hours (1..DASH_HOURS_MAX),
 * priced with p (may be NULL), the tenants named with t (tenant-names; may be
 * NULL). Thread-safe; never blocks on Redis.
 */
void dash_render(struct dash *d, const struct pricing *p, struct tenants *t, int hours,
                 struct pc_buf *out);

#endif
