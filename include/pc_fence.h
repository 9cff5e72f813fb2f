/*
 * pc_fence.h - purge fences: what this process knows of the deletes and
 * flushes made through any instance, so that an answer whose upstream call
 * began before one is not stored after it.
 *
 * An upstream call takes seconds; a purge (DELETE /admin/cache, a tenant's,
 * a filter's, one entry's, `promptcache purge`) that runs meanwhile deletes
 * what Redis holds, and the call's answer, made before the purge (by the
 * model or with the prompt the purge was for), was stored when it ended and
 * served for its whole TTL, as if the purge had never been.
 *
 *   lookup (or a refresh's start) ── fence_now ─────────────────▶ since
 *   this instance's purges (fence_mark, fence_mark_all, as they start), the
 *   purge events of every other process on pc:2:vs (fence_follow) ──▶ newer marks
 *   the answer, before its SET ── fence_crossed(exact, since) ──▶ not stored
 *   a request joining a call in flight ── fence_last(exact) above the call's
 *   fence_now ──▶ not joined: a call of its own (pc_flight.h, struct flight_fence)
 *
 * A purge's del events say p=1 and which process purged (i, fence_argv_purged):
 * a del event without p=1 drops a vector with its entry (an answer stored
 * again without one), which is no purge, and a process's own purge events
 * are not applied again (it set its fences as the purge started: read again,
 * they would hold back answers asked for since). Every purge but one entry's
 * also tells the other instances as it starts, before its deletes: such a
 * del event of no entry (tenant and key all zeros, fence_argv_notice), which
 * crosses every fence. Instances of versions without fences read these as
 * before (the fields are new to them, and a delete of no entry deletes
 * nothing). The purge's own events follow: a del per deleted entry, which
 * crosses its key's fence, or a flush, which crosses none (its notice did:
 * an answer asked for after the notice was read was made after the purge
 * began).
 *
 * A key's deletes are kept in a slot of its hash: a slot shared with another
 * key costs that key's store (an answer relayed, not cached), never a stale
 * answer. A flush's notice, of one tenant or of all, crosses every fence,
 * and so does a targeted purge of this instance (its keys are not known when
 * it starts).
 * What is left: a purge that ran while the answer's SET was on its way, or
 * whose event this process had not read yet when the answer was checked
 * (its follower's lag, a moment), and a purge made while the follower could
 * not follow (it starts again from the stream's end: what it missed is not
 * known). Marking every fence when it starts again would cover the last, but
 * it holds back every answer in flight then, right after a failover, when
 * the instance says it is ready (and its stores work) before its follower
 * follows; a purge that succeeds while this instance's follower alone cannot
 * read Redis is rarer than that.
 */
#ifndef PC_FENCE_H
#define PC_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "pc_store.h"
#include "pc_util.h"
#include "pc_vindex.h"

struct fence;
struct follow;
struct vsync_argv;

struct fence *fence_create(void);
void fence_destroy(struct fence **f);
/* Apply other processes' purge events of pc:2:vs (on the follower's thread); -1 if not added. */
int fence_follow(struct fence *f, struct follow *fl);
/* One entry of pc:2:vs (its field/value array), as fence_follow's handler applies it. */
struct redisReply;
void fence_apply(struct fence *f, const struct redisReply *kv);

/* The mark an answer's fetch starts from (0 without a fence). Any thread. */
uint64_t fence_now(const struct fence *f);
/* The entry of exact is being deleted, or every entry may be. Any thread. */
void fence_mark(struct fence *f, const unsigned char exact[PC_SHA256_LEN]);
void fence_mark_all(struct fence *f);
/*
 * The mark of the last purge that may have deleted exact's entry (0: none known, or no
 * fence): an answer whose fetch started from a mark below it was made before that purge.
 * Any thread.
 */
uint64_t fence_last(const struct fence *f, const unsigned char exact[PC_SHA256_LEN]);
/* Whether exact's entry may have been deleted since the mark since (false without a fence). */
bool fence_crossed(const struct fence *f, const unsigned char exact[PC_SHA256_LEN], uint64_t since);
/* The XADD of a purge's del event of one entry, and of its notice (see the top), into a. */
void fence_argv_purged(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                       const unsigned char exact[PC_SHA256_LEN]);
void fence_argv_notice(struct vsync_argv *a);
/*
 * Write the notice through s; cb gets Redis' answer (store_write_cb). A purge starts its
 * deletes once the notice is in the stream, and fails without deleting if it is not: the
 * other instances would store the answers on their way (a flush event holds back nothing).
 * NULL if it cannot be sent.
 */
struct store_cmd *fence_notice(struct store *s, store_int_fn *cb, void *arg);

#endif
