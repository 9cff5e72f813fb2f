/*
 * pc_resolve.h - a host name resolved without blocking an event loop: the
 * system's getaddrinfo (so /etc/hosts, nsswitch and the container's DNS
 * behave as for every other program) runs on a short-lived thread of its
 * own, and the answer comes back on the loop that asked.
 *
 *   loop: resolve_start ─▶ thread: getaddrinfo ─▶ eventfd ─▶ loop: cb(addr)
 *
 * The first IPv4 address is taken, else the first IPv6 one: the order in
 * which hiredis itself tries them. A lookup that hangs keeps only its own
 * thread; the caller bounds its wait with its own timer and cancels.
 */
#ifndef PC_RESOLVE_H
#define PC_RESOLVE_H

#include <stddef.h>

#define RESOLVE_ADDR_MAX 64 /* room for any numeric address (NI_MAXHOST is more than needed) */

struct event_base;
struct resolve;

/*
 * The answer: addr is a numeric address (valid during the call), or NULL
 * and err says why. Runs once, on the loop of base, from a libevent
 * callback; never after resolve_cancel.
 */
typedef void resolve_fn(void *arg, const char *addr, const char *err);

/*
 * Resolve host; NULL (and no callback) if no thread could be started. The
 * request frees itself after its callback; the caller drops its pointer then.
 */
struct resolve *resolve_start(struct event_base *base, const char *host, resolve_fn *cb, void *arg);
/* The callback of *r will not run; *r is NULLed (NULL is ignored). Only before the callback. */
void resolve_cancel(struct resolve **r);

/* Blocking: the first address of host (IPv4 first) into out; 0, or a getaddrinfo error code. */
int resolve_now(const char *host, char *out, size_t n);

#endif
