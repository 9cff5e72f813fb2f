/*
 * flight.c - in-flight upstream answers shared between waiting clients (see
 * pc_flight.h for the picture). Owns the process-wide table of registered
 * flights, each flight's head and body log, and the subscriptions.
 */
#include "pc_flight.h"

#include <pthread.h>
#include <string.h>

#include <event2/event.h>

#define FLIGHT_MAGIC 0x464c4754u /* "FLGT" */
#define SUB_MAGIC    0x46535542u /* "FSUB" */
#define NSHARDS      256
#define TRIM_CHUNK   (64 * 1024)

struct flight_sub {
    unsigned magic;
    struct flight *fl;
    struct event *ev; /* on the subscriber's base */
    size_t off;       /* absolute offset of the next unread body byte */
    flight_notify_fn *notify;
    void *arg;
    struct flight_sub *next;
    struct flight_sub *prev;
};

struct flight {
    unsigned magic;
    pthread_mutex_t mu;
    int refs; /* under mu */

    /* Table membership, under the shard's mutex. */
    bool registered;
    bool keyed;
    unsigned char key[PC_SHA256_LEN];
    struct flight *tnext;

    /* The creator's request digest (flight_asked_same); set at creation, immutable. */
    bool have_asked;
    unsigned char asked[PC_SHA256_LEN];
    /* The purge fences' mark when the call began (struct flight_fence); set at creation,
       immutable. */
    uint64_t mark;

    /* Everything below is under mu. */
    enum flight_state state;
    int status;
    struct flight_header *hdrs;
    size_t nhdrs;
    char *upstream;
    struct api_usage usage;
    struct pc_buf body;
    size_t base; /* absolute offset of body.data[0] */
    bool trim;
    int result;
    char *errmsg;
    struct flight_sub *subs;
    size_t nsubs;
    bool paused;
    bool abandoned;
    struct event *resume_ev; /* on the fetch's base */
    struct event *abort_ev;
};

struct shard {
    pthread_mutex_t mu;
    struct flight *head;
};

static struct shard shards[NSHARDS];

void flight_table_init(void)
{
    for (size_t i = 0; i < NSHARDS; i++) {
        pthread_mutex_init(&shards[i].mu, NULL);
        shards[i].head = NULL;
    }
}

void flight_table_destroy(void)
{
    for (size_t i = 0; i < NSHARDS; i++)
        pthread_mutex_destroy(&shards[i].mu);
}

static struct shard *shard_of(const unsigned char *key)
{
    return &shards[key[0] % NSHARDS];
}

/* Caller holds the shard lock. */
static void table_remove_locked(struct shard *sh, struct flight *fl)
{
    for (struct flight **pp = &sh->head; *pp != NULL; pp = &(*pp)->tnext) {
        if (*pp == fl) {
            *pp = fl->tnext;
            break;
        }
    }
    fl->tnext = NULL;
    fl->registered = false;
}

static void table_unregister(struct flight *fl)
{
    if (!fl->keyed)
        return;
    struct shard *sh = shard_of(fl->key);
    pthread_mutex_lock(&sh->mu);
    if (fl->registered)
        table_remove_locked(sh, fl);
    pthread_mutex_unlock(&sh->mu);
}

static struct flight *flight_new(const unsigned char *key, const unsigned char *asked,
                                 uint64_t mark)
{
    struct flight *fl = pc_calloc(1, sizeof(*fl));
    fl->magic = FLIGHT_MAGIC;
    fl->mark = mark;
    pthread_mutex_init(&fl->mu, NULL);
    if (key != NULL) {
        fl->keyed = true;
        memcpy(fl->key, key, PC_SHA256_LEN);
    }
    if (asked != NULL) {
        fl->have_asked = true;
        memcpy(fl->asked, asked, PC_SHA256_LEN);
    }
    fl->state = FLIGHT_PENDING;
    return fl;
}

static void flight_free(struct flight *fl)
{
    table_unregister(fl);
    free(fl->hdrs); /* one block (flight_set_head) */
    free(fl->upstream);
    free(fl->errmsg);
    pc_buf_free(&fl->body);
    pthread_mutex_destroy(&fl->mu);
    fl->magic = 0;
    free(fl);
}

void flight_get(struct flight *fl)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    fl->refs++;
    pthread_mutex_unlock(&fl->mu);
}

void flight_put(struct flight **flp)
{
    struct flight *fl = *flp;
    if (fl == NULL)
        return;
    *flp = NULL;
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    int refs = --fl->refs;
    pthread_mutex_unlock(&fl->mu);
    if (refs == 0)
        flight_free(fl);
}

/* Wake every subscriber; caller holds mu. event_active is thread-safe. */
static void notify_all_locked(struct flight *fl)
{
    for (struct flight_sub *s = fl->subs; s != NULL; s = s->next)
        event_active(s->ev, EV_READ, 0);
}

static void sub_event_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct flight_sub *sub = arg;
    PC_CHECK_OBJ(sub, SUB_MAGIC);
    sub->notify(sub, sub->arg);
}

/* Attach a new subscription; caller holds mu. */
static struct flight_sub *attach_locked(struct flight *fl, struct event_base *base,
                                        flight_notify_fn *notify, void *arg)
{
    struct flight_sub *sub = pc_calloc(1, sizeof(*sub));
    sub->magic = SUB_MAGIC;
    sub->fl = fl;
    sub->notify = notify;
    sub->arg = arg;
    sub->off = 0; /* late joiners read from the start */
    sub->ev = event_new(base, -1, 0, sub_event_cb, sub);
    if (sub->ev == NULL)
        pc_magic_fail(__FILE__, __LINE__, "event_new", 0, 0);
    sub->next = fl->subs;
    if (fl->subs != NULL)
        fl->subs->prev = sub;
    fl->subs = sub;
    fl->nsubs++;
    fl->refs++;
    /* Anything already there is news to the newcomer. */
    if (fl->state != FLIGHT_PENDING)
        event_active(sub->ev, EV_READ, 0);
    return sub;
}

static struct flight_sub *subscribe_keyed(const unsigned char *key, const unsigned char *asked,
                                          const struct flight_fence *fence, struct event_base *base,
                                          flight_notify_fn *notify, void *arg, bool *leader)
{
    struct shard *sh = shard_of(key);
    struct flight_sub *sub = NULL;
    uint64_t purged = fence != NULL ? fence->purged : 0;
    pthread_mutex_lock(&sh->mu);
    for (struct flight *f = sh->head; f != NULL; f = f->tnext) {
        if (memcmp(f->key, key, PC_SHA256_LEN) != 0)
            continue;
        pthread_mutex_lock(&f->mu);
        /* Not when torn down, nor when its call began before a purge of the key (the
           subscribers it has keep it): start afresh. */
        bool joinable = !f->abandoned && f->state != FLIGHT_DONE && !f->trim && f->mark >= purged;
        if (joinable)
            sub = attach_locked(f, base, notify, arg);
        pthread_mutex_unlock(&f->mu);
        if (!joinable)
            table_remove_locked(sh, f);
        break;
    }
    if (sub == NULL) {
        struct flight *fl = flight_new(key, asked, fence != NULL ? fence->now : 0);
        fl->registered = true;
        fl->tnext = sh->head;
        sh->head = fl;
        pthread_mutex_lock(&fl->mu);
        sub = attach_locked(fl, base, notify, arg);
        pthread_mutex_unlock(&fl->mu);
        *leader = true;
    }
    pthread_mutex_unlock(&sh->mu);
    return sub;
}

struct flight_sub *flight_subscribe(const unsigned char *key, const unsigned char *asked,
                                    const struct flight_fence *fence, struct event_base *base,
                                    flight_notify_fn *notify, void *arg, bool *leader)
{
    *leader = false;
    if (key != NULL)
        return subscribe_keyed(key, asked, fence, base, notify, arg, leader);
    struct flight *fl = flight_new(NULL, asked, 0);
    pthread_mutex_lock(&fl->mu);
    struct flight_sub *sub = attach_locked(fl, base, notify, arg);
    pthread_mutex_unlock(&fl->mu);
    *leader = true;
    return sub;
}

/* No lock: have_asked and asked are written before the flight can be found, and never again. */
bool flight_asked_same(const struct flight_sub *sub, const unsigned char asked[PC_SHA256_LEN])
{
    PC_CHECK_OBJ(sub, SUB_MAGIC);
    const struct flight *fl = sub->fl;
    return fl->have_asked && memcmp(fl->asked, asked, PC_SHA256_LEN) == 0;
}

struct flight *flight_sub_flight(struct flight_sub *sub)
{
    PC_CHECK_OBJ(sub, SUB_MAGIC);
    return sub->fl;
}

static size_t end_locked(const struct flight *fl)
{
    return fl->base + fl->body.len;
}

/* The fastest subscriber is near enough: the fetch may run. Caller holds mu. */
static bool someone_keeps_up_locked(const struct flight *fl, size_t mark)
{
    size_t end = end_locked(fl);
    for (const struct flight_sub *s = fl->subs; s != NULL; s = s->next)
        if (end - s->off <= mark)
            return true;
    return fl->subs == NULL;
}

static void maybe_resume_locked(struct flight *fl)
{
    if (fl->paused && someone_keeps_up_locked(fl, FLIGHT_LOW_WATER)) {
        fl->paused = false;
        if (fl->resume_ev != NULL)
            event_active(fl->resume_ev, EV_TIMEOUT, 0);
    }
}

/* Drop bytes every subscriber has read (trim mode only). Caller holds mu. */
static void maybe_trim_locked(struct flight *fl)
{
    if (!fl->trim || fl->subs == NULL)
        return;
    size_t min = end_locked(fl);
    for (const struct flight_sub *s = fl->subs; s != NULL; s = s->next)
        min = PC_MIN(min, s->off);
    size_t n = min - fl->base;
    if (n >= TRIM_CHUNK || (n > 0 && n == fl->body.len)) {
        pc_buf_consume(&fl->body, n);
        fl->base += n;
    }
}

void flight_unsubscribe(struct flight_sub **subp)
{
    struct flight_sub *sub = *subp;
    if (sub == NULL)
        return;
    *subp = NULL;
    PC_CHECK_OBJ(sub, SUB_MAGIC);
    struct flight *fl = sub->fl;
    bool unregister = false;

    pthread_mutex_lock(&fl->mu);
    if (sub->prev != NULL)
        sub->prev->next = sub->next;
    else
        fl->subs = sub->next;
    if (sub->next != NULL)
        sub->next->prev = sub->prev;
    fl->nsubs--;
    if (fl->nsubs == 0 && fl->state != FLIGHT_DONE && !fl->abandoned) {
        /* Nobody wants this answer any more: stop the upstream call. */
        fl->abandoned = true;
        unregister = true;
        if (fl->abort_ev != NULL)
            event_active(fl->abort_ev, EV_TIMEOUT, 0);
    } else {
        maybe_resume_locked(fl);
        maybe_trim_locked(fl);
    }
    pthread_mutex_unlock(&fl->mu);

    if (unregister)
        table_unregister(fl);
    event_free(sub->ev);
    sub->magic = 0;
    free(sub);
    flight_put(&fl);
}

size_t flight_sub_read(struct flight_sub *sub, struct flight_view *v, struct pc_buf *out,
                       size_t max)
{
    PC_CHECK_OBJ(sub, SUB_MAGIC);
    struct flight *fl = sub->fl;
    pthread_mutex_lock(&fl->mu);
    size_t end = end_locked(fl);
    size_t n = PC_MIN(max, end - sub->off);
    if (n > 0 && out != NULL) {
        pc_buf_append(out, fl->body.data + (sub->off - fl->base), n);
        sub->off += n;
    } else {
        n = 0;
    }
    v->state = fl->state;
    v->status = fl->status;
    v->hdrs = fl->hdrs;
    v->nhdrs = fl->nhdrs;
    v->upstream = fl->upstream;
    v->result = fl->result;
    v->errmsg = fl->errmsg;
    v->more = sub->off < end;
    v->total = end;
    v->usage = fl->usage;
    maybe_resume_locked(fl);
    maybe_trim_locked(fl);
    pthread_mutex_unlock(&fl->mu);
    return n;
}

void flight_fetch_bind(struct flight *fl, struct event *resume_ev, struct event *abort_ev)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    fl->resume_ev = resume_ev;
    fl->abort_ev = abort_ev;
    /* Abandoned before the fetch could bind: tell it now. */
    if (abort_ev != NULL && fl->abandoned)
        event_active(abort_ev, EV_TIMEOUT, 0);
    pthread_mutex_unlock(&fl->mu);
}

void flight_set_head(struct flight *fl, int status, struct flight_header *hdrs, size_t nhdrs,
                     const char *upstream)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    if (fl->state == FLIGHT_PENDING) {
        fl->status = status;
        fl->hdrs = hdrs;
        fl->nhdrs = nhdrs;
        free(fl->upstream);
        fl->upstream = pc_strdup(upstream ? upstream : "");
        fl->state = FLIGHT_HEAD;
        hdrs = NULL;
        notify_all_locked(fl);
    }
    pthread_mutex_unlock(&fl->mu);
    free(hdrs);
}

int flight_append(struct flight *fl, const char *data, size_t len)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    if (fl->subs != NULL && !someone_keeps_up_locked(fl, FLIGHT_HIGH_WATER)) {
        fl->paused = true;
        pthread_mutex_unlock(&fl->mu);
        return FLIGHT_PAUSE;
    }
    pc_buf_append(&fl->body, data, len);
    notify_all_locked(fl);
    pthread_mutex_unlock(&fl->mu);
    return FLIGHT_CONTINUE;
}

void flight_stop_recording(struct flight *fl)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    table_unregister(fl);
    pthread_mutex_lock(&fl->mu);
    fl->trim = true;
    maybe_trim_locked(fl);
    pthread_mutex_unlock(&fl->mu);
}

void flight_set_usage(struct flight *fl, const struct api_usage *u)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    fl->usage = *u;
    pthread_mutex_unlock(&fl->mu);
}

void flight_note_upstream(struct flight *fl, const char *upstream)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    if (fl->upstream == NULL && upstream != NULL)
        fl->upstream = pc_strdup(upstream);
    pthread_mutex_unlock(&fl->mu);
}

void flight_finish(struct flight *fl, int result, const char *errmsg)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    table_unregister(fl);
    pthread_mutex_lock(&fl->mu);
    if (fl->state != FLIGHT_DONE) {
        fl->state = FLIGHT_DONE;
        fl->result = result;
        if (errmsg != NULL)
            fl->errmsg = pc_strdup(errmsg);
        fl->paused = false;
        fl->resume_ev = NULL;
        fl->abort_ev = NULL;
        notify_all_locked(fl);
    }
    pthread_mutex_unlock(&fl->mu);
}

const struct pc_buf *flight_body(struct flight *fl)
{
    PC_CHECK_OBJ(fl, FLIGHT_MAGIC);
    pthread_mutex_lock(&fl->mu);
    /* Once trimming, readers on other threads move the log: it is not ours to read. */
    const struct pc_buf *b = (!fl->trim && fl->base == 0) ? &fl->body : NULL;
    pthread_mutex_unlock(&fl->mu);
    return b;
}
