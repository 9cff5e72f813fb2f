/*
 * pc_redisev.h - ties a hiredis async context to a libevent loop, in place
 * of hiredis' own adapters/libevent.h, with fewer system calls per command:
 *
 *   command queued ─▶ addWrite ─▶ a "flush" event made active (no epoll
 *                     change) ─▶ after the callbacks of this loop turn, one
 *                     write of everything queued in it
 *                     └─ socket full (partial write) or still connecting ─▶
 *                        a real EV_WRITE event until hiredis is done
 *   reply readable ─▶ one persistent EV_READ event, registered once
 *
 * hiredis' adapter registers EV_WRITE for every command (epoll_ctl on, a
 * loop turn to learn the socket is writable, epoll_ctl off) and a one-shot
 * EV_READ that libevent removes and hiredis re-adds after every reply: five
 * epoll_ctl calls and an extra loop turn per command. The flush still
 * happens after the current callback returns, never inside
 * redisAsyncCommand, so hiredis is not re-entered and a write error frees
 * the context from the loop, as with the stock adapter.
 */
#ifndef PC_REDISEV_H
#define PC_REDISEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct redisAsyncContext;
struct redisReader;

/* What one reply on a connection may hold (0: no cap); a reply past either fails it. */
struct redisev_caps {
    size_t bytes;    /* its bytes waiting unparsed; its strings parsed, together */
    size_t elements; /* the element counts its arrays announce, added up */
};

/*
 * 0, or -1 if ac already has an adapter or memory ran out (ac is left as it was). A reply
 * that grows past reply_max bytes not parsed yet (0: no cap) drops the connection: hiredis
 * 0.14 buffers a bulk of whatever length Redis announces (2^40 and more) as long as bytes come.
 * So does one past the caps of redisev_guard (reply_max, elements_max), installed here.
 */
int redisev_attach(struct redisAsyncContext *ac, struct event_base *base, size_t reply_max,
                   size_t elements_max);
/* The cap of a context attached here, for the replies still to come. */
void redisev_set_reply_max(struct redisAsyncContext *ac, size_t max);
/*
 * For a reader that is fed by hand (redisBufferRead): if more than max bytes (not 0) of a
 * reply are waiting unparsed, fail r with a protocol error - its next feed or read fails
 * and the caller drops the connection - and return true.
 */
bool redisev_reader_cap(struct redisReader *r, size_t max);
/*
 * redisGetReply of a blocking context with two bounds hiredis 0.14 lacks. A reply that grows
 * past max bytes not parsed yet fails the context (REDIS_ERR, rc->errstr says so) instead of
 * filling the memory for as long as bytes come. And a reply must come whole within within_ms
 * from this call (0: the socket's receive timeout, redisSetTimeout's), plus 1 ms for every
 * REDISEV_BYTES_PER_MS bytes it brought: hiredis bounds each read, so a peer sending a byte
 * just within the timeout held a reply open for ever. Past that, or a read that timed out,
 * fails the context as a timeout: rc->err REDIS_ERR_IO, errno EAGAIN, rc->errstr "timed out
 * (no reply in time): no whole reply within N ms". The socket's timeout is as it was after.
 * REDIS_OK with *reply set, or REDIS_ERR.
 */
#define REDISEV_BYTES_PER_MS 16384 /* 16 MB/s: a reply of the 64 MiB caps gets 4 s more */
struct redisContext;
int redisev_get_reply(struct redisContext *rc, void **reply, size_t max, int64_t within_ms);
/*
 * Make r refuse a reply past caps as it parses it: hiredis 0.14 makes an object per
 * element and callocs the element list an array announces ("*2000000000": 16 GB), while
 * what it parsed leaves the buffer that redisev_reader_cap watches. An array whose count
 * takes the counts announced in its reply past caps->elements, or a
 * string that takes the reply's strings past caps->bytes fails r with REDIS_ERR_PROTOCOL
 * (its next reads fail: the caller drops the connection), never allocating for it. Call
 * it before r reads a reply; caps is read, never written, and must outlive r.
 */
void redisev_guard(struct redisReader *r, const struct redisev_caps *caps);

#endif
