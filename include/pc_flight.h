/*
 * pc_flight.h - one upstream answer on its way, shared by every client
 * waiting for it (request coalescing), across worker threads.
 *
 *            fetch (worker A)                      subscribers (any worker)
 *   xfer on_head ─▶ flight_set_head ─┐
 *   xfer on_data ─▶ flight_append ───┼─▶ body log ──event_active──▶ notify_fn
 *   xfer on_done ─▶ flight_finish ───┘        ▲                      │
 *            ▲                                └── flight_sub_read ◀──┘
 *            └─ resume/abort events ◀── (all subscribers slow / all gone)
 *
 * A flight holds the response head and a log of body bytes. Subscribers read
 * the log at their own pace from their own offset, so a waiter that joins
 * late still gets the whole answer, and a slow client never slows a fast one:
 * the upstream is paused only when every subscriber is far behind, and
 * aborted when the last subscriber leaves before the answer is complete.
 *
 * Registered flights live in a table keyed by the request's coalescing key
 * (sharded, one mutex per shard; touched only on cache misses), so identical
 * misses on any worker join one upstream call. A private flight (no key) is
 * the same machinery for a single client (pass-through, bypass). A call
 * begun before a purge of its key (pc_fence.h) is not joined by a request
 * asked after it (struct flight_fence).
 *
 * Locking: shard mutex before flight mutex. Notify callbacks run on the
 * subscriber's own event_base, never under a lock. Reference counting: the
 * table holds no reference (a flight leaves the table before it can be
 * freed); each subscription and the fetch hold one.
 */
#ifndef PC_FLIGHT_H
#define PC_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pc_api.h"
#include "pc_util.h"

struct event_base;
struct event;
struct flight;
struct flight_sub;

enum flight_state {
    FLIGHT_PENDING = 0, /* waiting for the response head */
    FLIGHT_HEAD,        /* head known, body arriving */
    FLIGHT_DONE,        /* complete or failed */
};

struct flight_header {
    char *name;
    char *value;
};

/* What a subscriber sees (filled by flight_sub_read). */
struct flight_view {
    enum flight_state state;
    int status;                       /* valid from FLIGHT_HEAD */
    const struct flight_header *hdrs; /* valid from FLIGHT_HEAD, immutable after */
    size_t nhdrs;
    const char *upstream;   /* replica name, valid from FLIGHT_HEAD (or at a failure, if one was
                               called) */
    int result;             /* valid at FLIGHT_DONE: 0 ok, else enum xfer_result */
    const char *errmsg;     /* valid at FLIGHT_DONE when result != 0 */
    bool more;              /* unread body bytes remain after this read */
    size_t total;           /* body bytes received so far */
    struct api_usage usage; /* the answer's usage, at FLIGHT_DONE (present false: none) */
};

typedef void flight_notify_fn(struct flight_sub *sub, void *arg);

/*
 * The purge fences (pc_fence.h) as a subscriber reads them before flight_subscribe: now, the
 * mark a flight it creates keeps (fence_now: its call begins after it); purged, the mark of
 * the last purge that may have deleted the key's entry (fence_last). A flight whose mark is
 * below purged began its call before that purge: its answer, made by the model or with the
 * prompt the purge was for, is not stored (pc_fence.h), and it is not joined either. Its
 * subscribers keep it: they asked before the purge (or before this process knew of it).
 */
struct flight_fence {
    uint64_t now;
    uint64_t purged;
};

/* Process-wide table, set up before workers start and torn down after. */
void flight_table_init(void);
void flight_table_destroy(void);

/*
 * Subscribe to the in-flight call for key, or start one. key NULL makes a
 * private flight (never shared). On return *leader says whether the caller
 * created the flight and must now start its fetch (flight_fetch_*). notify
 * runs on base (the subscriber's event loop) whenever there is something new
 * to read. A flight records the whole answer until its fetch calls
 * flight_stop_recording (answers over cache-max-entry-size).
 *
 * asked (NULL: none) is a digest of the request exactly as sent; a flight
 * this call creates keeps it, so that a subscriber can tell whether the call
 * was made for a request identical to its own (flight_asked_same), beyond
 * the key.
 *
 * fence (NULL: no fences, as all zeros) is read for a keyed flight only: a
 * flight of key whose mark is below fence->purged is not joined; it leaves
 * the table (its subscribers keep it), and the caller leads a new one, which
 * keeps fence->now as its mark.
 */
struct flight_sub *flight_subscribe(const unsigned char *key, const unsigned char *asked,
                                    const struct flight_fence *fence, struct event_base *base,
                                    flight_notify_fn *notify, void *arg, bool *leader);
/* Leave; if this was the last subscriber of an unfinished flight, its fetch is aborted. */
void flight_unsubscribe(struct flight_sub **sub);
/*
 * Copy up to max unread body bytes into out (appending) and snapshot the
 * state into v. Returns the number of bytes copied.
 */
size_t flight_sub_read(struct flight_sub *sub, struct flight_view *v, struct pc_buf *out,
                       size_t max);
/*
 * Whether the flight's call was made for a request whose digest is asked
 * (the one its creator gave flight_subscribe). False when it was given none.
 */
bool flight_asked_same(const struct flight_sub *sub, const unsigned char asked[PC_SHA256_LEN]);
/* The flight a subscription belongs to (the fetch side needs it for the leader). */
struct flight *flight_sub_flight(struct flight_sub *sub);

/* Fetch side: all of these run on the fetching worker's thread. */
void flight_get(struct flight *fl);
void flight_put(struct flight **fl);
/* Events (on the fetch's base) the flight activates to resume or abort the fetch; NULL clears. */
void flight_fetch_bind(struct flight *fl, struct event *resume_ev, struct event *abort_ev);
/* The response head; takes ownership of hdrs: one pc_malloc'd block, the array then its strings. */
void flight_set_head(struct flight *fl, int status, struct flight_header *hdrs, size_t nhdrs,
                     const char *upstream);
#define FLIGHT_CONTINUE 0
#define FLIGHT_PAUSE    1
/* Append body bytes; FLIGHT_PAUSE means they were NOT taken: offer them again after resume. */
int flight_append(struct flight *fl, const char *data, size_t len);
/* Stop sharing: no new subscribers, and data read by everyone may be dropped. */
void flight_stop_recording(struct flight *fl);
/* The answer's usage (before flight_finish), for the access log of every subscriber. */
void flight_set_usage(struct flight *fl, const struct api_usage *u);
/* The replica called, when the call failed before a head named one (errors are logged with it). */
void flight_note_upstream(struct flight *fl, const char *upstream);
/* The call ended (result 0 or an xfer_result); wakes every subscriber. */
void flight_finish(struct flight *fl, int result, const char *errmsg);
/*
 * For the fetch, after its last flight_append: the whole body, if it was kept
 * (never trimmed); NULL if part of it was dropped. Valid while the caller
 * holds its reference.
 */
const struct pc_buf *flight_body(struct flight *fl);
/* Tuning (bytes): pause upstream when every subscriber is this far behind, resume below LOW. */
#define FLIGHT_HIGH_WATER (1024 * 1024)
#define FLIGHT_LOW_WATER  (256 * 1024)

#endif
