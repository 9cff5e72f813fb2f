/*
 * resolve.c - host names resolved off the event loop (see pc_resolve.h).
 * Owns each request: its thread (detached), its eventfd and the event that
 * watches it. A request has two owners, the thread and the asker, and is
 * freed by whichever lets go last:
 *
 *   thread: getaddrinfo ─▶ lock: answer, write(efd) unless cancelled ─▶ drop
 *   loop:   efd readable ─▶ cb(answer) ─▶ event_free ─▶ drop
 *   loop:   resolve_cancel ─▶ lock: cancelled ─▶ event_free ─▶ drop
 *
 * The eventfd (rather than event_active from the thread) keeps this
 * independent of libevent's threading support.
 */
#include "pc_resolve.h"
#include "pc_log.h"
#include "pc_util.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#define RESOLVE_MAGIC 0x7e501e55u
#define HOST_MAX      256

struct resolve {
    unsigned magic;
    pthread_mutex_t mu;
    int owners;     /* the thread and the asker, each until it lets go */
    bool cancelled; /* the asker let go before the answer: nobody reads efd */
    int efd;
    struct event *ev; /* the asker's: on its loop, freed there */
    resolve_fn *cb;
    void *arg;
    char host[HOST_MAX];
    char addr[RESOLVE_ADDR_MAX];
    int rc; /* getaddrinfo's result */
};

/* The first address of host in family af, as text: 0, or a getaddrinfo error code. */
static int resolve_in(const char *host, int af, char *out, size_t n)
{
    struct addrinfo hints = {.ai_family = af, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &ai);
    if (rc == 0) {
        rc = getnameinfo(ai->ai_addr, ai->ai_addrlen, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST);
        freeaddrinfo(ai);
    }
    return rc;
}

int resolve_now(const char *host, char *out, size_t n)
{
    int rc = resolve_in(host, AF_INET, out, n);
    if (rc != 0)
        rc = resolve_in(host, AF_INET6, out, n);
    return rc;
}

/* One owner lets go; the last frees. */
static void drop(struct resolve *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->owners == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    close(r->efd);
    pthread_mutex_destroy(&r->mu);
    r->magic = 0;
    free(r);
}

static void *lookup_main(void *arg)
{
    struct resolve *r = arg;
    char addr[RESOLVE_ADDR_MAX];
    int rc = resolve_now(r->host, addr, sizeof(addr));
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    if (rc == 0)
        snprintf(r->addr, sizeof(r->addr), "%s", addr);
    if (!r->cancelled) {
        uint64_t one = 1;
        if (write(r->efd, &one, sizeof(one)) < 0)
            log_error("resolve: cannot wake the event loop: %s", strerror(errno));
    }
    pthread_mutex_unlock(&r->mu);
    drop(r);
    return NULL;
}

/* The answer is in: hand it to the asker, then let go. */
static void on_answer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct resolve *r = arg;
    PC_CHECK_OBJ(r, RESOLVE_MAGIC);
    event_free(r->ev);
    r->ev = NULL;
    pthread_mutex_lock(&r->mu);
    int rc = r->rc;
    pthread_mutex_unlock(&r->mu);
    r->cb(r->arg, rc == 0 ? r->addr : NULL, rc == 0 ? NULL : gai_strerror(rc));
    drop(r);
}

/* Start the detached thread; -1 if it cannot be. */
static int spawn(struct resolve *r)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, lookup_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0)
        log_error("resolve: cannot start a thread: %s", strerror(rc));
    return rc == 0 ? 0 : -1;
}

struct resolve *resolve_start(struct event_base *base, const char *host, resolve_fn *cb, void *arg)
{
    if (strlen(host) >= HOST_MAX)
        return NULL;
    struct resolve *r = pc_calloc(1, sizeof(*r));
    r->magic = RESOLVE_MAGIC;
    r->cb = cb;
    r->arg = arg;
    snprintf(r->host, sizeof(r->host), "%s", host);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->ev = r->efd >= 0 ? event_new(base, r->efd, EV_READ, on_answer, r) : NULL;
    if (r->ev == NULL || event_add(r->ev, NULL) < 0) {
        log_error("resolve: cannot watch an eventfd: %s", strerror(errno));
        if (r->ev != NULL)
            event_free(r->ev);
        if (r->efd >= 0)
            close(r->efd);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->owners = 2;
    if (spawn(r) < 0) {
        r->owners = 1;
        resolve_cancel(&r);
        return NULL;
    }
    return r;
}

void resolve_cancel(struct resolve **rp)
{
    struct resolve *r = *rp;
    if (r == NULL)
        return;
    *rp = NULL;
    PC_CHECK_OBJ(r, RESOLVE_MAGIC);
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    pthread_mutex_unlock(&r->mu);
    event_free(r->ev); /* also if the thread woke it: the callback will not run */
    r->ev = NULL;
    drop(r);
}
