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

struct event_base;
struct redisAsyncContext;

/* 0, or -1 if ac already has an adapter or memory ran out (ac is left as it was). */
int redisev_attach(struct redisAsyncContext *ac, struct event_base *base);

#endif
