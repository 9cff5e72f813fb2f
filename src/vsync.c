/*
 * vsync.c - the vector records' and member lists' key names, the commands
 * that write them and the stream events; the handler of those events (run by
 * the process's stream follower) and the loader thread that brings
 * partitions into the process's vindex from Redis (the picture is in
 * pc_vsync.h).
 *
 * Owns the loader: its thread, its blocking connection (struct rcli, quiet:
 * this module logs), the queue of partitions to load, the member lists'
 * one-time build, and the counters. The vindex is the caller's; this module
 * only adds to it, removes from it and loads it.
 */
#include "pc_vsync.h"
#include "pc_log.h"
#include "pc_migrate.h"
#include "pc_rcli.h"
#include "pc_stats.h"
#include "pc_store.h"
#include "pc_util.h"
#include "pc_vindex.h"
#include "pc_vrec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define VSYNC_MAGIC     0x5653594eu /* "VSYN" */
#define BACKOFF_MIN_MS  100
#define BACKOFF_MAX_MS  5000
#define SCHEMA_RETRY_MS 2000 /* the longest wait between two reads of pc:schema */
#define SCHEMA_FIRST_MS 25   /* the first: on a fresh Redis the store writes it at start */
#define SCHEMA_KICK_MS  250  /* lookups ask for a read at most this often */
#define PROGRESS_MS     5000 /* bulk loads log their progress this often */

#define STR_(x) #x
#define STR(x)  STR_(x)

static const char stream_key[] = PC_KEY_PREFIX "vs";
static const char vector_prefix[] = PC_KEY_PREFIX "v:{";
static const char members_prefix[] = PC_KEY_PREFIX "pm:{";

/* --- names ------------------------------------------------------------------------------ */

const char *vsync_stream_key(void)
{
    return stream_key;
}

void vsync_id(const unsigned char tenant[VINDEX_TENANT_LEN],
              const unsigned char key[VINDEX_KEY_LEN], char out[VSYNC_ID_LEN + 1])
{
    pc_hex(tenant, VINDEX_TENANT_LEN, out);
    out[2 * VINDEX_TENANT_LEN] = ':';
    pc_hex(key, VINDEX_KEY_LEN, out + 2 * VINDEX_TENANT_LEN + 1);
}

size_t vsync_vector_key(const unsigned char tenant[VINDEX_TENANT_LEN],
                        const unsigned char key[VINDEX_KEY_LEN], char out[VSYNC_KEY_MAX])
{
    char id[VSYNC_ID_LEN + 1];
    vsync_id(tenant, key, id);
    return (size_t)snprintf(out, VSYNC_KEY_MAX, "%s%s}", vector_prefix, id);
}

size_t vsync_members_key(const unsigned char tenant[VINDEX_TENANT_LEN],
                         const unsigned char partition[VINDEX_PART_LEN], char out[VSYNC_KEY_MAX])
{
    char t[2 * VINDEX_TENANT_LEN + 1], p[2 * VINDEX_PART_LEN + 1];
    pc_hex(tenant, VINDEX_TENANT_LEN, t);
    pc_hex(partition, VINDEX_PART_LEN, p);
    return (size_t)snprintf(out, VSYNC_KEY_MAX, "%s%s:%s}", members_prefix, t, p);
}

void vsync_members_pattern(const char *tenant_hex, char out[VSYNC_KEY_MAX])
{
    if (tenant_hex == NULL)
        snprintf(out, VSYNC_KEY_MAX, "%s*", members_prefix);
    else
        snprintf(out, VSYNC_KEY_MAX, "%s%.*s:*", members_prefix, 2 * VINDEX_TENANT_LEN, tenant_hex);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Exactly 2n lower-case hex digits into out[0..n); 0 or -1. */
static int unhex(const char *s, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

int vsync_parse_id(const char *s, size_t len, unsigned char tenant[VINDEX_TENANT_LEN],
                   unsigned char key[VINDEX_KEY_LEN])
{
    if (len != VSYNC_ID_LEN || s[2 * VINDEX_TENANT_LEN] != ':')
        return -1;
    if (unhex(s, VINDEX_TENANT_LEN, tenant) < 0 ||
        unhex(s + 2 * VINDEX_TENANT_LEN + 1, VINDEX_KEY_LEN, key) < 0)
        return -1;
    return 0;
}

int vsync_parse_tenant(const char *s, size_t len, unsigned char tenant[VINDEX_TENANT_LEN])
{
    return len == 2 * VINDEX_TENANT_LEN ? unhex(s, VINDEX_TENANT_LEN, tenant) : -1;
}

static pthread_once_t instance_once = PTHREAD_ONCE_INIT;
static char instance_hex[VSYNC_INSTANCE_LEN + 1];

static void instance_init(void)
{
    unsigned char b[VSYNC_INSTANCE_LEN / 2];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        uint64_t x = pc_mono_us() ^ ((uint64_t)pc_wall_ms() << 20) ^ (uint64_t)getpid();
        memcpy(b, &x, sizeof(b));
    }
    pc_hex(b, sizeof(b), instance_hex);
}

const char *vsync_instance(void)
{
    pthread_once(&instance_once, instance_init);
    return instance_hex;
}

int vsync_parse_stream_id(const char *s, size_t len, uint64_t *ms, uint64_t *seq)
{
    /* "<ms>-<seq>", both decimal without sign or leading space, each fitting 64 bits */
    uint64_t v[2] = {0, 0};
    size_t i = 0;
    for (int part = 0; part < 2; part++) {
        size_t start = i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            unsigned d = (unsigned)(s[i] - '0');
            if (v[part] > (UINT64_MAX - d) / 10)
                return -1;
            v[part] = v[part] * 10 + d;
        }
        if (i == start || (part == 0 && (i >= len || s[i++] != '-')))
            return -1;
    }
    if (i != len)
        return -1;
    *ms = v[0];
    *seq = v[1];
    return 0;
}

/* A vector key's tenant and entry key; -1 if it is not exactly one. */
static int parse_vector_key(const char *s, size_t len, unsigned char *tenant, unsigned char *key)
{
    size_t pl = sizeof(vector_prefix) - 1;
    if (len != pl + VSYNC_ID_LEN + 1 || memcmp(s, vector_prefix, pl) != 0 || s[len - 1] != '}')
        return -1;
    return vsync_parse_id(s + pl, VSYNC_ID_LEN, tenant, key);
}

/* --- commands ---------------------------------------------------------------------------- */

static void arg(struct vsync_argv *a, const void *p, size_t n)
{
    if (a->argc >= VSYNC_ARGV_MAX)
        abort(); /* a command of this file outgrew the struct: never at run time */
    a->argv[a->argc] = p;
    a->lens[a->argc++] = n;
}

static void arg_str(struct vsync_argv *a, const char *s)
{
    arg(a, s, strlen(s));
}

void vsync_argv_field(struct vsync_argv *a, const char *name, const char *val, size_t len)
{
    arg_str(a, name);
    arg(a, val, len);
}

static void xadd_head(struct vsync_argv *a, const char *op)
{
    a->argc = 0;
    arg_str(a, "XADD");
    arg_str(a, stream_key);
    arg_str(a, "MAXLEN");
    arg_str(a, "~");
    arg_str(a, STR(VSYNC_STREAM_MAXLEN));
    arg_str(a, "*");
    arg_str(a, "op");
    arg_str(a, op);
}

void vsync_argv_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms)
{
    a->argc = 0;
    arg_str(a, "SET");
    arg(a, a->key, vsync_vector_key(tenant, key, a->key));
    arg(a, rec, rec_len);
    arg_str(a, "PX");
    snprintf(a->num, sizeof(a->num), "%lld", (long long)PC_MAX(ttl_ms, (int64_t)1));
    arg_str(a, a->num);
}

void vsync_argv_unlink(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                       const unsigned char key[VINDEX_KEY_LEN])
{
    a->argc = 0;
    arg_str(a, "DEL");
    arg(a, a->key, vsync_vector_key(tenant, key, a->key));
}

void vsync_argv_add(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    bool listed)
{
    xadd_head(a, "add");
    vsync_id(tenant, key, a->id);
    arg_str(a, "k");
    arg(a, a->id, VSYNC_ID_LEN);
    arg_str(a, "r");
    arg(a, rec, rec_len);
    /* m: its partition's member list has it; without, its readers list it (as older writers') */
    if (listed) {
        arg_str(a, "m");
        arg_str(a, "1");
    }
}

void vsync_argv_member_add(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                           const unsigned char key[VINDEX_KEY_LEN],
                           const unsigned char partition[VINDEX_PART_LEN], int64_t expires_ms)
{
    a->argc = 0;
    arg_str(a, "ZADD");
    arg(a, a->key, vsync_members_key(tenant, partition, a->key));
    snprintf(a->num, sizeof(a->num), "%lld", (long long)expires_ms);
    arg_str(a, a->num);
    pc_hex(key, VINDEX_KEY_LEN, a->id); /* the list's key names the tenant */
    arg(a, a->id, 2 * VINDEX_KEY_LEN);
}

void vsync_argv_member_expire(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                              const unsigned char partition[VINDEX_PART_LEN], int64_t expires_ms,
                              const char *cond)
{
    a->argc = 0;
    arg_str(a, "PEXPIREAT");
    arg(a, a->key, vsync_members_key(tenant, partition, a->key));
    snprintf(a->num, sizeof(a->num), "%lld", (long long)expires_ms);
    arg_str(a, a->num);
    arg_str(a, cond);
}

void vsync_argv_member_del(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                           const unsigned char key[VINDEX_KEY_LEN],
                           const unsigned char partition[VINDEX_PART_LEN])
{
    a->argc = 0;
    arg_str(a, "ZREM");
    arg(a, a->key, vsync_members_key(tenant, partition, a->key));
    pc_hex(key, VINDEX_KEY_LEN, a->id);
    arg(a, a->id, 2 * VINDEX_KEY_LEN);
}

void vsync_argv_member_trim(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                            const unsigned char partition[VINDEX_PART_LEN], int64_t now_ms)
{
    a->argc = 0;
    arg_str(a, "ZREMRANGEBYSCORE");
    arg(a, a->key, vsync_members_key(tenant, partition, a->key));
    arg_str(a, "-inf");
    snprintf(a->num, sizeof(a->num), "(%lld", (long long)now_ms);
    arg_str(a, a->num);
}

void vsync_argv_del(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN])
{
    xadd_head(a, "del");
    vsync_id(tenant, key, a->id);
    arg_str(a, "k");
    arg(a, a->id, VSYNC_ID_LEN);
}

void vsync_argv_flush(struct vsync_argv *a, const unsigned char *tenant)
{
    xadd_head(a, "flush");
    if (tenant != NULL) {
        pc_hex(tenant, VINDEX_TENANT_LEN, a->tenant);
        arg_str(a, "t");
        arg(a, a->tenant, 2 * VINDEX_TENANT_LEN);
    }
}

void vsync_argv_entry_set(struct vsync_argv *a, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN])
{
    xadd_head(a, "set");
    vsync_id(tenant, key, a->id);
    arg_str(a, "k");
    arg(a, a->id, VSYNC_ID_LEN);
    arg_str(a, "i");
    arg(a, vsync_instance(), VSYNC_INSTANCE_LEN);
}

static int send_argv(struct store *s, struct vsync_argv *a)
{
    return store_write(s, a->argc, a->argv, a->lens);
}

/* As send_argv, with store_write_bg_cb's time (and cb, which may be NULL); NULL if not sent. */
static struct store_cmd *send_bg(struct store *s, struct vsync_argv *a, store_int_fn *cb, void *arg)
{
    return store_write_bg_cb(s, a->argc, a->argv, a->lens, cb, arg);
}

/*
 * A vector's writes, each sent once Redis has answered the one before: its record (SET), then
 * its member on the partition's list (ZADD), then the add event on the stream (XADD). On a
 * cluster the three keys live on up to three primaries, written over as many connections, and
 * another instance reads the event and may then load the list: in this order it finds the
 * member, and the member's record. Sent together, an instance could read the event (ignored:
 * the partition only queued for a load) before the member reached the list it loaded, or find
 * the member before its record (and drop it from the list as gone).
 *
 * Each step waits for Redis' real answer, up to store_write_bg_cb's time: under the client
 * commands' redis-timeout (50 ms by default), a primary answering the ZADD late made the event
 * go unsent, and every instance holding the partition in memory never learnt of the vector.
 * A step that fails or times out does not stop the next: the record may be there all the
 * same, and the event is what tells the instances that hold the partition (a member without a
 * record is dropped from the list by the next load). An event whose member Redis did not take
 * says so (no "m"): the instances that read it list the member, or one that loads the
 * partition later never finds the vector. The store being destroyed refuses them.
 */
struct held_add {
    struct store *s;
    store_int_fn *cb; /* the caller's, told the record's outcome */
    void *arg;
    int tries;   /* sends of the event that failed so far */
    bool listed; /* Redis answered its member's ZADD */
    unsigned char tenant[VINDEX_TENANT_LEN];
    unsigned char key[VINDEX_KEY_LEN];
    unsigned char partition[VINDEX_PART_LEN];
    int64_t expires_ms;
    size_t rec_len;
    char rec[];
};

#define EVENT_TRIES    7 /* an add event that failed: tried again 100, 200 ... 3200 ms later */
#define EVENT_RETRY_MS 100

static void send_event(struct held_add *h);

static void on_event_retry(void *arg, enum store_status st, long long n)
{
    struct held_add *h = arg;
    (void)n;
    if (st == STORE_ERR) { /* the store is closing */
        free(h);
        return;
    }
    send_event(h);
}

/* The event failed: sent again in a while, unless tried enough or the store is closing. */
static void event_again(struct held_add *h)
{
    if (++h->tries >= EVENT_TRIES ||
        store_after(h->s, (int64_t)EVENT_RETRY_MS << (h->tries - 1), on_event_retry, h) == NULL)
        free(h);
}

/*
 * Failed (an error reply: READONLY after a failover, OOM, LOADING; the connection lost with
 * it; no answer in time): sent again. One that timed out may be in the stream already: an add
 * read twice is applied once.
 */
static void on_event_sent(void *arg, enum store_status st, long long n)
{
    (void)n;
    if (st == STORE_OK)
        free(arg);
    else
        event_again(arg);
}

/*
 * The add event, once the ZADD is answered (or failed). Refused while the stream's primary is
 * away (its connection dropped, reconnecting), or failed once sent: tried again a few times
 * over 6 s, since the instances holding the partition learn of the vector from it alone.
 */
static void send_event(struct held_add *h)
{
    struct vsync_argv a;
    vsync_argv_add(&a, h->tenant, h->key, h->rec, h->rec_len, h->listed);
    if (send_bg(h->s, &a, on_event_sent, h) == NULL)
        event_again(h);
}

static void on_member_added(void *arg, enum store_status st, long long n)
{
    struct held_add *h = arg;
    (void)n;
    h->listed = st == STORE_OK;
    send_event(h);
}

/*
 * The member list: the member, then its key's expiry raised to the member's
 * (NX sets one on a new list, GT only ever lengthens it), and the members
 * already expired trimmed: a list nobody loads again still goes with its last
 * member. Each command names one key (the list's tag is not the record's).
 * The add event goes once the ZADD is answered (on_member_added), or at once
 * if the ZADD cannot be sent.
 */
static void on_record_written(void *arg, enum store_status st, long long n)
{
    struct held_add *h = arg;
    if (h->cb != NULL)
        h->cb(h->arg, st, n);
    struct vsync_argv a;
    vsync_argv_member_add(&a, h->tenant, h->key, h->partition, h->expires_ms);
    if (send_bg(h->s, &a, on_member_added, h) == NULL) {
        send_event(h); /* the list's primary away: the event says it is not listed */
        return;
    }
    vsync_argv_member_expire(&a, h->tenant, h->partition, h->expires_ms, "NX");
    send_bg(h->s, &a, NULL, NULL);
    vsync_argv_member_expire(&a, h->tenant, h->partition, h->expires_ms, "GT");
    send_bg(h->s, &a, NULL, NULL);
    vsync_argv_member_trim(&a, h->tenant, h->partition, pc_wall_ms());
    send_bg(h->s, &a, NULL, NULL);
}

int vsync_store_put(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN],
                    const unsigned char partition[VINDEX_PART_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms, int64_t expires_ms, store_int_fn *cb, void *arg)
{
    struct held_add *h = pc_malloc(sizeof(*h) + rec_len);
    *h = (struct held_add){
        .s = s, .cb = cb, .arg = arg, .expires_ms = expires_ms, .rec_len = rec_len};
    memcpy(h->tenant, tenant, VINDEX_TENANT_LEN);
    memcpy(h->key, key, VINDEX_KEY_LEN);
    memcpy(h->partition, partition, VINDEX_PART_LEN);
    memcpy(h->rec, rec, rec_len);
    struct vsync_argv a;
    vsync_argv_set(&a, tenant, key, rec, rec_len, ttl_ms);
    if (send_bg(s, &a, on_record_written, h) == NULL) {
        free(h);
        return -1;
    }
    return 0;
}

int vsync_store_del(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const unsigned char *partition)
{
    struct vsync_argv a;
    vsync_argv_unlink(&a, tenant, key);
    if (send_argv(s, &a) < 0)
        return -1;
    if (partition != NULL) {
        vsync_argv_member_del(&a, tenant, key, partition);
        send_argv(s, &a);
    }
    vsync_argv_del(&a, tenant, key);
    return send_argv(s, &a);
}

int vsync_store_flush(struct store *s, const unsigned char *tenant)
{
    struct vsync_argv a;
    vsync_argv_flush(&a, tenant);
    return send_argv(s, &a);
}

struct store_cmd *vsync_store_flush_cb(struct store *s, const unsigned char *tenant,
                                       store_int_fn *cb, void *arg)
{
    struct vsync_argv a;
    vsync_argv_flush(&a, tenant);
    return store_write_cb(s, a.argc, a.argv, a.lens, cb, arg);
}

int vsync_store_entry_set(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                          const unsigned char key[VINDEX_KEY_LEN])
{
    struct vsync_argv a;
    vsync_argv_entry_set(&a, tenant, key);
    return send_argv(s, &a);
}

/* --- events, as read back ------------------------------------------------------------------ */

/* The value of the event's field, checked to be the only one of its name. */
static int take_field(const redisReply **slot, const redisReply *val)
{
    if (*slot != NULL)
        return -1; /* twice: which one would count? */
    *slot = val;
    return 0;
}

struct raw_event {
    const redisReply *op, *k, *r, *t, *i, *m, *p;
};

/* The fields of an entry: strings in name/value pairs, each known name at most once. */
static int raw_fields(const redisReply *kv, struct raw_event *f)
{
    memset(f, 0, sizeof(*f));
    if (kv == NULL || kv->type != REDIS_REPLY_ARRAY || kv->elements % 2 != 0 ||
        kv->elements > 2 * VSYNC_EVENT_FIELDS_MAX)
        return -1;
    for (size_t i = 0; i < kv->elements; i += 2) {
        const redisReply *name = kv->element[i], *val = kv->element[i + 1];
        if (name->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING)
            return -1;
        const redisReply **slot = rcli_str_is(name, "op")  ? &f->op
                                  : rcli_str_is(name, "k") ? &f->k
                                  : rcli_str_is(name, "r") ? &f->r
                                  : rcli_str_is(name, "t") ? &f->t
                                  : rcli_str_is(name, "i") ? &f->i
                                  : rcli_str_is(name, "m") ? &f->m
                                  : rcli_str_is(name, "p") ? &f->p
                                                           : NULL;
        if (slot != NULL && take_field(slot, val) < 0)
            return -1; /* other names: a later writer's additions, not ours to judge */
    }
    return f->op != NULL ? 0 : -1;
}

static const char *const op_names[] = {"add", "del", "flush", "set"};

int vsync_event_parse(const struct redisReply *kv, struct vsync_event *ev)
{
    struct raw_event f;
    memset(ev, 0, sizeof(*ev));
    if (raw_fields(kv, &f) < 0)
        return -1;
    size_t op = 0;
    while (op < PC_ARRAY_LEN(op_names) && !rcli_str_is(f.op, op_names[op]))
        op++;
    if (op == PC_ARRAY_LEN(op_names))
        return -1;
    ev->op = (enum vsync_op)op;
    if (ev->op != VSYNC_OP_FLUSH) { /* one entry: its id is required and exact */
        if (f.k == NULL || vsync_parse_id(f.k->str, f.k->len, ev->tenant, ev->key) < 0)
            return -1;
        ev->has_key = true;
    } else if (f.t != NULL) { /* one tenant's flush */
        if (vsync_parse_tenant(f.t->str, f.t->len, ev->tenant) < 0)
            return -1;
        ev->has_tenant = true;
    }
    if (ev->op == VSYNC_OP_ADD) {
        if (f.r == NULL || f.r->len == 0 || f.r->len > VREC_MAX_LEN)
            return -1;
        ev->rec = f.r->str;
        ev->rec_len = f.r->len;
        if (f.m != NULL && !rcli_str_is(f.m, "1"))
            return -1;
        ev->listed = f.m != NULL;
    }
    if (ev->op == VSYNC_OP_DEL)
        ev->purged = f.p != NULL && rcli_str_is(f.p, "1");
    if (f.i != NULL) {
        unsigned char scratch[VSYNC_INSTANCE_LEN / 2];
        if (f.i->len != VSYNC_INSTANCE_LEN || unhex(f.i->str, sizeof(scratch), scratch) < 0)
            return -1;
        memcpy(ev->instance, f.i->str, VSYNC_INSTANCE_LEN);
    }
    return 0;
}

bool vsync_event_is_mine(const struct vsync_event *ev)
{
    return memcmp(ev->instance, vsync_instance(), VSYNC_INSTANCE_LEN) == 0;
}

/* --- the stream's handler and the loader -------------------------------------------------------
 */

#define LOAD_MEMBERS_MAX (1 << 20) /* members read for one partition, at most */
#define GET_BATCH        256       /* GETs per pipeline */
#define UPKEEP_MAX       4096      /* members of older writers' events waiting to be listed */
#define BUILD_LOCK_MS    60000     /* the member lists' builder holds its lease this long */
#define BUILD_POLL_MS    5000      /* another instance builds: look again this often */

static const char built_key[] = PC_KEY_PREFIX "pm-ready";  /* the lists were built once */
static const char build_lock[] = PC_KEY_PREFIX "pm-build"; /* an instance is building them */

enum job_kind { JOB_LOAD, JOB_LIST };

/* A partition to load (or reload), or a member an older writer did not list. */
struct job {
    struct job *next;
    enum job_kind kind;
    unsigned char tenant[VINDEX_TENANT_LEN];
    unsigned char partition[VINDEX_PART_LEN];
    unsigned char key[VINDEX_KEY_LEN]; /* JOB_LIST */
    int64_t expires_ms;                /* JOB_LIST */
};

struct vsync {
    unsigned magic;
    char *url, *space;
    struct vindex *index;
    int dim;
    int64_t timeout_ms;
    int64_t max_ttl_ms;
    size_t load_max; /* members read per partition */
    struct stats *row;

    pthread_t thread;
    pthread_mutex_t mu;  /* the queue, the waiters, stop, fd */
    pthread_cond_t work; /* the loader: a job came, or stop */
    pthread_cond_t done; /* the waiters: a load ended */
    struct job *head, *tail;
    struct job *utail; /* the last of the lookups' loads, which come first (NULL: none) */
    size_t queued, listing;
    bool stop;
    bool schema_wait; /* the loader waits for pc:schema or its first connect (not a lost one) */
    bool kicked;      /* a lookup asked it to read pc:schema again now */
    uint64_t schema_reads; /* reads of pc:schema that found it not current */
    int fd;                /* the loader's socket (-1: none), shut down by vsync_stop */
    atomic_bool stopping;

    /* The loader's own. */
    struct rcli k;
    bool connected;
    bool down_logged, schema_logged;
    float *vec;  /* decode buffer, VINDEX_DIM_MAX floats */
    bool built;  /* the member lists exist (or this instance built them) */
    bool was_up; /* connected before: a reconnect reads what is loaded again */
    uint64_t build_next_ms;
    struct resync_log {
        uint64_t t0, last_log;
        size_t total, done;
    } rs;

    /* The follower's own decode buffer (VINDEX_DIM_MAX floats): events are decoded on its
     * thread while the loader decodes records into vec. */
    float *evec;

    atomic_bool ready, loader_up;
    atomic_uint_fast64_t loaded, events, loads, errors, corrupt, skipped, ignored;
};

enum applied { APPLIED, SKIPPED, CORRUPT, IGNORED };

static bool stopping(struct vsync *s)
{
    return atomic_load(&s->stopping);
}

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add(c, n);
}

static void row_add(struct vsync *s, enum stat_id id, int64_t n)
{
    if (s->row != NULL && n != 0)
        stats_add(s->row, id, n);
}

/* A record or event rejected: counted here and in the metrics row (semantic_sync_rejected). */
static void reject(struct vsync *s, uint64_t n)
{
    count(&s->corrupt, n);
    row_add(s, STAT_semantic_sync_rejected, (int64_t)n);
}

/* A member of a list rejected: semantic_members_rejected. */
static void reject_member(struct vsync *s, const char *why)
{
    count(&s->corrupt, 1);
    row_add(s, STAT_semantic_members_rejected, 1);
    log_debug("vsync: a partition's member rejected: %s", why);
}

int vsync_record_partition(const char *rec, size_t len, unsigned char partition[VINDEX_PART_LEN],
                           int64_t *expires_ms)
{
    if (len < 6 || memcmp(rec, "PCV\x01", 4) != 0)
        return -1;
    size_t at = 6 + (unsigned char)rec[5] + 2;
    if (len < at + VINDEX_PART_LEN + 16)
        return -1;
    memcpy(partition, rec + at, VINDEX_PART_LEN);
    uint64_t e = 0;
    for (int i = 7; i >= 0; i--)
        e = e << 8 | (unsigned char)rec[at + VINDEX_PART_LEN + 8 + i];
    *expires_ms = (int64_t)e;
    return 0;
}

/*
 * Decode a record into buf (VINDEX_DIM_MAX floats: the calling thread's own, the loader's or
 * the follower's) and add it (load_gen 0: an event) to the index.
 */
static enum applied apply_record(struct vsync *s, float *buf, const unsigned char *tenant,
                                 const unsigned char *key, const char *data, size_t len,
                                 const unsigned char *want_partition, uint32_t load_gen)
{
    struct vrec r;
    char err[96];
    if (vrec_decode(data, len, &r, buf, VINDEX_DIM_MAX, err, sizeof(err)) < 0) {
        log_debug("vsync: corrupt vector record skipped: %s", err);
        return CORRUPT;
    }
    if (want_partition != NULL && memcmp(r.partition, want_partition, VINDEX_PART_LEN) != 0) {
        reject_member(s, "it names a vector record of another partition");
        return SKIPPED;
    }
    if (strcmp(r.space, s->space) != 0 || (int)r.dim != s->dim)
        return SKIPPED;
    int64_t now = pc_wall_ms();
    if (r.expires_ms != 0 && r.expires_ms <= now)
        return SKIPPED;
    /* No entry lives longer than the longest TTL: a record saying so is not one of ours. */
    if (s->max_ttl_ms > 0 &&
        (r.expires_ms == 0 || r.expires_ms - now > s->max_ttl_ms || r.expires_ms < r.created_ms)) {
        log_debug("vsync: vector record with an impossible expiry skipped");
        return CORRUPT;
    }
    struct vindex_item it = {.expires_ms = r.expires_ms};
    memcpy(it.key, key, VINDEX_KEY_LEN);
    memcpy(it.tenant, tenant, VINDEX_TENANT_LEN);
    int rc = load_gen != 0 ? vindex_load_add(s->index, r.partition, &it, r.vec, load_gen)
                           : vindex_add(s->index, r.partition, &it, r.vec);
    return rc < 0 ? CORRUPT : rc == 0 ? APPLIED : SKIPPED;
}

/* --- the queue ------------------------------------------------------------------------------ */

/* Under mu. */
static void enqueue(struct vsync *s, struct job *j)
{
    j->next = NULL;
    if (s->tail != NULL)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->queued++;
    if (j->kind == JOB_LIST)
        s->listing++;
    pthread_cond_signal(&s->work);
}

/*
 * Under mu: j ahead of every job but the lookups' loads queued before it. A lookup waits for
 * its load (redis-timeout at most); a re-sync (after a reconnect, a trim) queues every
 * partition in memory, which serve meanwhile: behind them, a lookup of a partition not in
 * memory missed until they were all read again, seconds with thousands of partitions.
 */
static void enqueue_urgent(struct vsync *s, struct job *j)
{
    struct job **at = s->utail != NULL ? &s->utail->next : &s->head;
    j->next = *at;
    *at = j;
    if (j->next == NULL)
        s->tail = j;
    s->utail = j;
    s->queued++;
    pthread_cond_signal(&s->work);
}

/* A job loading one partition (not queued yet). */
static struct job *load_job(const unsigned char *tenant, const unsigned char *partition)
{
    struct job *j = pc_calloc(1, sizeof(*j));
    j->kind = JOB_LOAD;
    memcpy(j->tenant, tenant, VINDEX_TENANT_LEN);
    memcpy(j->partition, partition, VINDEX_PART_LEN);
    return j;
}

/* A partition a lookup waits for: ahead of the re-syncs' loads. */
static void queue_load(struct vsync *s, const unsigned char *tenant, const unsigned char *partition)
{
    struct job *j = load_job(tenant, partition);
    pthread_mutex_lock(&s->mu);
    enqueue_urgent(s, j);
    pthread_mutex_unlock(&s->mu);
}

static struct job *dequeue(struct vsync *s)
{
    struct job *j = s->head;
    if (j != NULL) {
        s->head = j->next;
        if (s->head == NULL)
            s->tail = NULL;
        if (s->utail == j)
            s->utail = NULL;
        s->queued--;
        if (j->kind == JOB_LIST)
            s->listing--;
    }
    return j;
}

/* --- the follower's side: events ------------------------------------------------------------ */

/* An add of an older writer (no m): its member goes on the list by the loader. */
static void list_later(struct vsync *s, const struct vsync_event *ev)
{
    unsigned char partition[VINDEX_PART_LEN];
    int64_t expires;
    if (vsync_record_partition(ev->rec, ev->rec_len, partition, &expires) < 0 ||
        expires <= pc_wall_ms())
        return;
    pthread_mutex_lock(&s->mu);
    if (s->listing < UPKEEP_MAX) {
        struct job *j = pc_calloc(1, sizeof(*j));
        j->kind = JOB_LIST;
        memcpy(j->tenant, ev->tenant, VINDEX_TENANT_LEN);
        memcpy(j->key, ev->key, VINDEX_KEY_LEN);
        memcpy(j->partition, partition, VINDEX_PART_LEN);
        j->expires_ms = expires;
        enqueue(s, j);
    }
    pthread_mutex_unlock(&s->mu);
}

/* An add: applied only to a partition loaded (or loading); others cost a peek. */
static enum applied apply_add(struct vsync *s, const struct vsync_event *ev)
{
    unsigned char partition[VINDEX_PART_LEN];
    int64_t expires;
    if (!ev->listed)
        list_later(s, ev);
    if (vsync_record_partition(ev->rec, ev->rec_len, partition, &expires) < 0)
        return CORRUPT;
    int st = vindex_state(s->index, partition);
    if (st != VINDEX_RESIDENT && st != VINDEX_LOADING) {
        count(&s->ignored, 1);
        return IGNORED;
    }
    enum applied a = apply_record(s, s->evec, ev->tenant, ev->key, ev->rec, ev->rec_len, NULL, 0);
    if (a == SKIPPED)
        count(&s->skipped, 1);
    return a;
}

void vsync_on_entry(struct vsync *s, const struct redisReply *kv)
{
    PC_CHECK_OBJ(s, VSYNC_MAGIC);
    struct vsync_event ev;
    if (vsync_event_parse(kv, &ev) < 0) {
        reject(s, 1);
        return;
    }
    switch (ev.op) {
    case VSYNC_OP_ADD: {
        enum applied a = apply_add(s, &ev);
        if (a == CORRUPT)
            reject(s, 1);
        if (a == CORRUPT || a == IGNORED)
            return;
        break;
    }
    case VSYNC_OP_DEL:
        vindex_remove(s->index, ev.key); /* a key not in memory: one table probe */
        break;
    case VSYNC_OP_FLUSH:
        if (ev.has_tenant)
            vindex_remove_tenant(s->index, ev.tenant);
        else
            vindex_clear(s->index);
        break;
    case VSYNC_OP_SET:
        /* An entry was written: its vector, if any, comes with its own add or del. */
        return;
    }
    count(&s->events, 1);
}

struct reloads {
    struct job *head, *tail;
};

static void collect_reload(void *arg, const unsigned char *partition, const unsigned char *tenant)
{
    struct reloads *rl = arg;
    struct job *j = load_job(tenant, partition);
    if (rl->tail != NULL)
        rl->tail->next = j;
    else
        rl->head = j;
    rl->tail = j;
}

/*
 * Under mu: take the earlier re-syncs' reads still queued off the queue (returned as a
 * chain). Those are the loads behind the lookups' (utail); a new re-sync reads every
 * partition in memory again, so they would be read twice.
 */
static struct job *unqueue_reloads(struct vsync *s)
{
    struct job **at = s->utail != NULL ? &s->utail->next : &s->head, *gone = NULL;
    s->tail = s->utail;
    while (*at != NULL) {
        struct job *j = *at;
        if (j->kind != JOB_LOAD) {
            s->tail = j;
            at = &j->next;
            continue;
        }
        *at = j->next;
        j->next = gone;
        gone = j;
        s->queued--;
    }
    return gone;
}

/*
 * What is in memory is read again, in the background (events were, or may have been, missed).
 * A reconnect comes here twice (the loader's, the follower's) one right after the other: what
 * the first queued and the loader has not read yet is replaced, not read twice.
 */
static void resync(struct vsync *s, const char *why)
{
    struct reloads rl = {0};
    size_t n = vindex_each_loaded(s->index, collect_reload, &rl);
    pthread_mutex_lock(&s->mu);
    struct job *gone = unqueue_reloads(s);
    if (rl.head != NULL) {
        if (s->tail != NULL)
            s->tail->next = rl.head;
        else
            s->head = rl.head;
        s->tail = rl.tail;
        s->queued += n;
        pthread_cond_signal(&s->work);
    }
    s->rs = (struct resync_log){.t0 = pc_mono_ms(), .total = n};
    s->rs.last_log = s->rs.t0;
    pthread_mutex_unlock(&s->mu);
    while (gone != NULL) {
        struct job *next = gone->next;
        free(gone);
        gone = next;
    }
    if (n > 0)
        log_notice("vsync: %s: the %zu partitions in memory are read again from Redis", why, n);
}

void vsync_on_start(struct vsync *s)
{
    PC_CHECK_OBJ(s, VSYNC_MAGIC);
    resync(s, "following the vector stream from its end");
    atomic_store(&s->ready, true);
}

void vsync_on_down(struct vsync *s)
{
    PC_CHECK_OBJ(s, VSYNC_MAGIC);
    atomic_store(&s->ready, false); /* the index keeps what it has meanwhile */
}

/* --- the lookups' side: waiting for a load ---------------------------------------------------- */

int vsync_load_wait(struct vsync *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char partition[VINDEX_PART_LEN], int64_t wait_ms)
{
    PC_CHECK_OBJ(s, VSYNC_MAGIC);
    if (vindex_want(s->index, partition, tenant))
        queue_load(s, tenant, partition);
    int st = vindex_state(s->index, partition);
    if (wait_ms <= 0)
        return st;
    struct timespec until = pc_mono_after(wait_ms);
    pthread_mutex_lock(&s->mu);
    if (!atomic_load(&s->loader_up)) {
        /*
         * Redis away: a miss now. Waiting for the schema (a fresh Redis, where this process's
         * store writes it at start): the loader reads it again at once and the lookup waits.
         */
        if (s->schema_wait && !s->stop) {
            uint64_t reads = s->schema_reads; /* one more read that fails: a miss */
            s->kicked = true;
            pthread_cond_broadcast(&s->work);
            while (!atomic_load(&s->loader_up) && s->schema_wait && s->schema_reads == reads &&
                   !s->stop && pthread_cond_timedwait(&s->done, &s->mu, &until) == 0) {
            }
        }
        if (!atomic_load(&s->loader_up)) {
            pthread_mutex_unlock(&s->mu);
            return vindex_state(s->index, partition);
        }
        st = vindex_state(s->index, partition);
    }
    while ((st == VINDEX_WANTED || st == VINDEX_LOADING) && !s->stop &&
           pthread_cond_timedwait(&s->done, &s->mu, &until) == 0)
        st = vindex_state(s->index, partition);
    pthread_mutex_unlock(&s->mu);
    return vindex_state(s->index, partition);
}

/* --- the loader: connection ---------------------------------------------------------------------
 */

/* A failure of the connection or a command: counted, logged once per outage. */
static void trouble(struct vsync *s, const char *what)
{
    count(&s->errors, 1);
    if (!s->down_logged && !stopping(s)) /* a read cut by vsync_stop is no outage */
        /* Info: the store reports an outage once per process (one warning, one notice). */
        log_info("vsync: %s: %s; retrying with backoff (the vector index keeps what it has, and "
                 "partitions not in it are misses meanwhile)",
                 what, s->k.errmsg[0] ? s->k.errmsg : "error");
    s->down_logged = true;
}

static void loader_fd(struct vsync *s, int fd)
{
    pthread_mutex_lock(&s->mu);
    s->fd = fd;
    pthread_mutex_unlock(&s->mu);
}

static void drop(struct vsync *s)
{
    atomic_store(&s->loader_up, false);
    loader_fd(s, -1);
    if (s->connected)
        rcli_close(&s->k);
    s->connected = false;
}

/* A command on the loader's connection (routed by rcli: cluster:// to the node of its key): the
 * reply, error replies included, or NULL after the connection failed. */
static redisReply *command(struct vsync *s, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = rcli_call(&s->k, argc, argv, lens);
    if (r == NULL)
        trouble(s, "Redis connection lost");
    return r;
}

/* An error reply (freed here): counted and logged once per outage. */
static void error_reply(struct vsync *s, redisReply *r, const char *what)
{
    snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: %.200s", s->k.where, r->str);
    freeReplyObject(r);
    trouble(s, what);
}

/* 1: the schema is current; 0: not yet (wait); -1: failed. */
static int schema_current(struct vsync *s)
{
    const char *argv[] = {"GET", PC_SCHEMA_KEY};
    redisReply *r = command(s, 2, argv, NULL);
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        error_reply(s, r, "GET " PC_SCHEMA_KEY " failed");
        return -1;
    }
    long v;
    char err[128];
    int rc = migrate_parse_version(r, &v, err, sizeof(err));
    freeReplyObject(r);
    if (rc < 0 || v != migrate_latest()) {
        if (!s->schema_logged)
            log_warn("vsync: %s; waiting for schema %ld before loading vectors",
                     rc < 0 ? err : "the Redis schema is not this build's", migrate_latest());
        s->schema_logged = true;
        return 0;
    }
    s->schema_logged = false;
    return 1;
}

static int connect_redis(struct vsync *s)
{
    drop(s);
    s->k.quiet = true;
    s->k.errmsg[0] = '\0';
    s->connected = true; /* rcli_close is needed even after a failed open */
    if (rcli_open(&s->k, s->url, s->timeout_ms, "vsync") < 0) {
        trouble(s, "cannot connect to Redis");
        drop(s);
        return -1;
    }
    loader_fd(s, s->k.rc->fd);
    int rc = schema_current(s);
    if (rc <= 0) {
        drop(s);
        return rc < 0 ? -1 : 0;
    }
    if (s->down_logged)
        log_info("vsync: loading vectors from Redis again at %s", s->k.where);
    s->down_logged = false;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->loader_up, true);
    s->schema_wait = false;
    pthread_cond_broadcast(&s->done); /* lookups waiting for it */
    pthread_mutex_unlock(&s->mu);
    if (s->was_up) /* reloads queued meanwhile were dropped with the connection */
        resync(s, "the loader reconnected");
    s->was_up = true;
    return 1;
}

/* Sleep ms, or less if vsync_stop is called meanwhile. */
static void nap(struct vsync *s, int64_t ms)
{
    struct timespec ts = pc_mono_after(ms);
    pthread_mutex_lock(&s->mu);
    while (!s->stop && pthread_cond_timedwait(&s->work, &s->mu, &ts) == 0) {
    }
    pthread_mutex_unlock(&s->mu);
}

/*
 * Commands whose replies are judged together: pipelined on one server's
 * connection; on a cluster each is sent to the node of its key in turn (a
 * pipeline is one connection's). -1 if the connection failed; error replies
 * are counted, not fatal.
 */
static int run_batch(struct vsync *s, struct vsync_argv *a, size_t n)
{
    if (s->k.cl == NULL) {
        for (size_t i = 0; i < n; i++)
            redisAppendCommandArgv(s->k.rc, a[i].argc, a[i].argv, a[i].lens);
    }
    for (size_t i = 0; i < n; i++) {
        void *r = NULL;
        if (s->k.cl != NULL)
            r = rcli_call(&s->k, a[i].argc, a[i].argv, a[i].lens);
        else if (rcli_get_reply(s->k.rc, &r) != REDIS_OK)
            r = NULL;
        if (r == NULL) {
            if (s->k.cl == NULL)
                snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: %s: %s", s->k.where, a[i].argv[0],
                         s->k.rc->errstr[0] ? s->k.rc->errstr : "no reply");
            trouble(s, "Redis connection lost");
            return -1;
        }
        if (((redisReply *)r)->type == REDIS_REPLY_ERROR)
            count(&s->errors, 1);
        freeReplyObject(r);
    }
    return 0;
}

/* --- the loader: one partition ------------------------------------------------------------------
 */

/* A member list's score: the member's expiry, written as a decimal integer of ms. */
static bool parse_ms(const redisReply *r, int64_t *out)
{
    if (r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 16)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < r->len; i++) {
        if (r->str[i] < '0' || r->str[i] > '9')
            return false;
        v = v * 10 + (r->str[i] - '0');
    }
    *out = v;
    return true;
}

struct member {
    unsigned char key[VINDEX_KEY_LEN];
    char vkey[VSYNC_KEY_MAX];
    size_t vlen;
};

struct load {
    const struct job *j;
    char key[VSYNC_KEY_MAX]; /* the member list */
    size_t klen;
    uint32_t gen;
    struct member *m;
    size_t n;
    struct vsync_argv *stale; /* ZREM of members whose record has gone */
    size_t nstale;
    size_t counts[4]; /* by enum applied */
};

/* One member (key, score) of the list's reply, range-checked, into ld->m. */
static void take_member(struct vsync *s, struct load *ld, const redisReply *key,
                        const redisReply *score, int64_t now)
{
    struct member *m = &ld->m[ld->n];
    int64_t e = 0;
    if (key->type != REDIS_REPLY_STRING || key->len != 2 * VINDEX_KEY_LEN ||
        unhex(key->str, VINDEX_KEY_LEN, m->key) < 0)
        reject_member(s, "not an entry's key (64 lower-case hex characters)");
    else if (!parse_ms(score, &e) || e <= now || (s->max_ttl_ms > 0 && e - now > s->max_ttl_ms))
        reject_member(s, "its score is not an expiry to come");
    else {
        m->vlen = vsync_vector_key(ld->j->tenant, m->key, m->vkey);
        ld->n++;
    }
}

/* The list's live members, newest first, at most load_max; 0 or -1 (connection failed). */
static int read_members(struct vsync *s, struct load *ld)
{
    int64_t now = pc_wall_ms();
    char min[24], lim[24];
    snprintf(min, sizeof(min), "(%lld", (long long)now);
    snprintf(lim, sizeof(lim), "%zu", s->load_max);
    const char *argv[] = {"ZREVRANGEBYSCORE", ld->key, "+inf", min,
                          "WITHSCORES",       "LIMIT", "0",    lim};
    size_t lens[] = {16, ld->klen, 4, strlen(min), 10, 5, 1, strlen(lim)};
    redisReply *r = command(s, 8, argv, lens);
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "WRONGTYPE", 9) == 0) {
        /* A key of another type where the list should be: input that is not a list, so no
         * member of it is loaded (the partition is loaded empty). The connection is sound:
         * dropping it failed every other load queued and read every partition again, at
         * each lookup in this one. */
        reject_member(s, "the member list is a key of another type");
        freeReplyObject(r);
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        error_reply(s, r, "ZREVRANGEBYSCORE failed");
        return -1;
    }
    int rc = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0 || r->elements > 2 * s->load_max) {
        snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: unexpected ZREVRANGEBYSCORE reply",
                 s->k.where);
        trouble(s, "cannot read a partition's member list");
        rc = -1;
    } else {
        ld->m = pc_malloc((r->elements / 2 + 1) * sizeof(*ld->m));
        for (size_t i = 0; i < r->elements; i += 2)
            take_member(s, ld, r->element[i], r->element[i + 1], now);
    }
    freeReplyObject(r);
    return rc;
}

/* A GET's reply for member i: added, skipped, or noted stale (the record has gone). */
static int take_record(struct vsync *s, struct load *ld, size_t i, const redisReply *r)
{
    if (r->type == REDIS_REPLY_NIL) {
        if (ld->stale == NULL)
            ld->stale = pc_malloc(ld->n * sizeof(*ld->stale));
        vsync_argv_member_del(&ld->stale[ld->nstale++], ld->j->tenant, ld->m[i].key,
                              ld->j->partition);
        return 0;
    }
    if (r->type != REDIS_REPLY_STRING) {
        count(&s->errors, 1);
        return 0;
    }
    ld->counts[apply_record(s, s->vec, ld->j->tenant, ld->m[i].key, r->str, r->len,
                            ld->j->partition, ld->gen)]++;
    return 0;
}

/* GET every member's vector record (pipelined on one server) and add what is sound. */
static int read_records(struct vsync *s, struct load *ld)
{
    for (size_t at = 0; at < ld->n; at += GET_BATCH) {
        size_t end = PC_MIN(ld->n, at + GET_BATCH);
        for (size_t i = at; s->k.cl == NULL && i < end; i++) {
            const char *argv[] = {"GET", ld->m[i].vkey};
            const size_t lens[] = {3, ld->m[i].vlen};
            redisAppendCommandArgv(s->k.rc, 2, argv, lens);
        }
        for (size_t i = at; i < end; i++) {
            void *r = NULL;
            const char *argv[] = {"GET", ld->m[i].vkey};
            const size_t lens[] = {3, ld->m[i].vlen};
            if (s->k.cl != NULL)
                r = rcli_call(&s->k, 2, argv, lens);
            else if (rcli_get_reply(s->k.rc, &r) != REDIS_OK)
                r = NULL;
            if (r == NULL) {
                if (s->k.cl == NULL)
                    snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: GET: %s", s->k.where,
                             s->k.rc->errstr[0] ? s->k.rc->errstr : "no reply");
                trouble(s, "Redis connection lost during a load");
                return -1;
            }
            take_record(s, ld, i, r);
            freeReplyObject(r);
        }
    }
    return 0;
}

/* After a load: members whose record has gone out, and those expired trimmed (lazily, here). */
static int tidy_list(struct vsync *s, struct load *ld)
{
    struct vsync_argv trim;
    vsync_argv_member_trim(&trim, ld->j->tenant, ld->j->partition, pc_wall_ms());
    if (run_batch(s, &trim, 1) < 0)
        return -1;
    return ld->nstale > 0 ? run_batch(s, ld->stale, ld->nstale) : 0;
}

/* A bulk re-sync's progress, with counts and an ETA, every PROGRESS_MS and at its end. */
static void resync_progress(struct vsync *s)
{
    pthread_mutex_lock(&s->mu);
    struct resync_log *rs = &s->rs;
    bool log = false;
    uint64_t now = pc_mono_ms(), eta = 0;
    if (rs->total > 0) {
        rs->done++;
        log = rs->done == rs->total || now - rs->last_log >= PROGRESS_MS;
        if (rs->done < rs->total)
            eta = (now - rs->t0) * (rs->total - rs->done) / rs->done / 1000;
    }
    size_t done = rs->done, total = rs->total;
    if (log)
        rs->last_log = now;
    if (rs->done >= rs->total)
        rs->total = rs->done = 0;
    pthread_mutex_unlock(&s->mu);
    if (log)
        log_notice("vsync: %zu of %zu partitions read again from Redis%s (ETA %llu s)", done, total,
                   done == total ? ": the index is in step" : "", (unsigned long long)eta);
}

static int run_load(struct vsync *s, const struct job *j)
{
    struct load ld = {.j = j};
    ld.gen = vindex_load_begin(s->index, j->partition);
    if (ld.gen == 0)
        return 0; /* evicted or flushed meanwhile: the next lookup asks again */
    ld.klen = vsync_members_key(j->tenant, j->partition, ld.key);
    int rc = read_members(s, &ld);
    if (rc == 0)
        rc = read_records(s, &ld);
    if (rc == 0)
        rc = tidy_list(s, &ld);
    /* Counted first: a lookup woken below may look at the counters at once. */
    if (rc == 0) {
        count(&s->loads, 1);
        count(&s->loaded, ld.counts[APPLIED]);
        count(&s->skipped, ld.counts[SKIPPED]);
        reject(s, ld.counts[CORRUPT]);
        row_add(s, STAT_semantic_index_loads, 1);
        row_add(s, STAT_semantic_index_loaded_vectors, (int64_t)ld.counts[APPLIED]);
    } else {
        row_add(s, STAT_semantic_index_load_errors, 1);
    }
    vindex_load_end(s->index, j->partition, ld.gen, rc == 0);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    resync_progress(s);
    free(ld.m);
    free(ld.stale);
    return rc;
}

/* An older writer's member: listed now (ZADD and the list's expiry). */
static int run_list(struct vsync *s, const struct job *j)
{
    struct vsync_argv a[3];
    vsync_argv_member_add(&a[0], j->tenant, j->key, j->partition, j->expires_ms);
    vsync_argv_member_expire(&a[1], j->tenant, j->partition, j->expires_ms, "NX");
    vsync_argv_member_expire(&a[2], j->tenant, j->partition, j->expires_ms, "GT");
    return run_batch(s, a, 3);
}

/* The loader is down: queued loads fail (their partitions COLD again, asked for anew). */
static void fail_queued(struct vsync *s)
{
    pthread_mutex_lock(&s->mu);
    struct job *j = s->head;
    s->head = s->tail = s->utail = NULL;
    s->queued = s->listing = 0;
    s->rs.total = s->rs.done = 0;
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    while (j != NULL) {
        struct job *next = j->next;
        if (j->kind == JOB_LOAD) {
            uint32_t g = vindex_load_begin(s->index, j->partition);
            if (g != 0)
                vindex_load_end(s->index, j->partition, g, false);
        }
        free(j);
        j = next;
    }
}

/* --- the loader: the member lists' one-time build ------------------------------------------- */

/*
 * Vectors stored by a version without member lists are in none: the first
 * instance of this version to start lists them all once (SCAN of the vector
 * records on every primary), holding a lease (build_lock) so that instances
 * starting together do not all do it, and marks it done (built_key). Loads
 * go on meanwhile, between its steps; when it is done, what is loaded is read
 * again.
 */
struct build {
    bool running;
    char cursor[32];
    uint64_t t0, last_log;
    long long dbsize; /* keys in Redis at the start (one node's on a cluster): for the ETA */
    size_t scanned, listed;
};

/* A string reply equal to s (freed); NULL reply: -1 (the connection failed). */
static int reply_is(struct vsync *s, redisReply *r, const char *str)
{
    if (r == NULL)
        return -1;
    int is = rcli_str_is(r, str);
    if (r->type == REDIS_REPLY_ERROR)
        count(&s->errors, 1);
    freeReplyObject(r);
    return is;
}

/* 1 the lists exist (or another instance builds them: asked again later); 0 build; -1 failed. */
static int build_check(struct vsync *s, struct build *b)
{
    const char *get[] = {"GET", built_key};
    int rc = reply_is(s, command(s, 2, get, NULL), "1");
    if (rc != 0)
        return rc < 0 ? -1 : (s->built = true, 1);
    char ms[24];
    snprintf(ms, sizeof(ms), "%d", BUILD_LOCK_MS);
    const char *lock[] = {"SET", build_lock, vsync_instance(), "NX", "PX", ms};
    rc = reply_is(s, command(s, 6, lock, NULL), "OK");
    if (rc < 0)
        return -1;
    if (rc == 0) {
        s->build_next_ms = pc_mono_ms() + BUILD_POLL_MS;
        return 1;
    }
    const char *dbsize[] = {"DBSIZE"};
    redisReply *r = command(s, 1, dbsize, NULL);
    if (r == NULL)
        return -1;
    *b = (struct build){.running = true, .t0 = pc_mono_ms(), .cursor = "0"};
    b->last_log = b->t0;
    b->dbsize = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    log_notice("vsync: listing the vectors stored before member lists existed (once, for every "
               "instance): scanning about %lld keys",
               b->dbsize);
    return 0;
}

/* The member of each vector record of a SCAN batch: GETs (pipelined), then ZADDs. */
static int build_batch(struct vsync *s, struct build *b, const redisReply *keys)
{
    struct vsync_argv *a = pc_malloc((3 * keys->elements + 1) * sizeof(*a));
    size_t n = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        const char *argv[] = {"GET", k->str};
        const size_t lens[] = {3, k->len};
        redisAppendCommandArgv(s->k.rc, 2, argv, lens); /* SCAN left k.rc on their node */
    }
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < keys->elements; i++) {
        void *rp = NULL;
        if (rcli_get_reply(s->k.rc, &rp) != REDIS_OK || rp == NULL) {
            snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: GET: %s", s->k.where,
                     s->k.rc->errstr[0] ? s->k.rc->errstr : "no reply");
            trouble(s, "Redis connection lost while listing vectors");
            rc = -1;
            break;
        }
        redisReply *r = rp;
        const redisReply *k = keys->element[i];
        unsigned char tenant[VINDEX_TENANT_LEN], key[VINDEX_KEY_LEN], part[VINDEX_PART_LEN];
        int64_t exp;
        if (parse_vector_key(k->str, k->len, tenant, key) == 0 && r->type == REDIS_REPLY_STRING &&
            vsync_record_partition(r->str, r->len, part, &exp) == 0 && exp > pc_wall_ms() &&
            (s->max_ttl_ms <= 0 || exp - pc_wall_ms() <= s->max_ttl_ms)) {
            vsync_argv_member_add(&a[n++], tenant, key, part, exp);
            vsync_argv_member_expire(&a[n++], tenant, part, exp, "NX");
            vsync_argv_member_expire(&a[n++], tenant, part, exp, "GT");
            b->listed++;
        }
        freeReplyObject(r);
    }
    if (rc == 0 && n > 0)
        rc = run_batch(s, a, n);
    free(a);
    return rc;
}

static void build_progress(struct build *b, bool done)
{
    uint64_t now = pc_mono_ms();
    if (!done && now - b->last_log < PROGRESS_MS)
        return;
    b->last_log = now;
    long long left = b->dbsize - (long long)b->scanned;
    unsigned long long eta = b->scanned > 0 && left > 0
                                 ? (now - b->t0) * (unsigned long long)left / b->scanned / 1000
                                 : 0;
    if (done)
        log_notice("vsync: %zu vectors listed in their partitions' member lists in %llu ms",
                   b->listed, (unsigned long long)(now - b->t0));
    else
        log_notice("vsync: listing vectors: %zu listed, about %zu of %lld keys scanned (ETA %llu "
                   "s)",
                   b->listed, b->scanned, b->dbsize, eta);
}

/* One SCAN step of the build (its lease renewed); at the end the mark. 0, or -1 failed. */
static int build_step(struct vsync *s, struct build *b)
{
    char pattern[64], count_s[24];
    snprintf(pattern, sizeof(pattern), "%s*", vector_prefix);
    snprintf(count_s, sizeof(count_s), "%d", GET_BATCH);
    const char *argv[] = {"SCAN", b->cursor, "MATCH", pattern, "COUNT", count_s};
    redisReply *r = command(s, 6, argv, NULL);
    if (r == NULL)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof(b->cursor) &&
        r->element[1]->type == REDIS_REPLY_ARRAY) {
        snprintf(b->cursor, sizeof(b->cursor), "%s", r->element[0]->str);
        b->scanned += GET_BATCH;
        rc = build_batch(s, b, r->element[1]);
    } else {
        snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: unexpected SCAN reply", s->k.where);
        trouble(s, "cannot list the vectors");
    }
    freeReplyObject(r);
    if (rc < 0)
        return -1;
    char ms[24];
    snprintf(ms, sizeof(ms), "%d", BUILD_LOCK_MS);
    const char *renew[] = {"PEXPIRE", build_lock, ms};
    if (reply_is(s, command(s, 3, renew, NULL), "") < 0)
        return -1;
    if (strcmp(b->cursor, "0") != 0) {
        build_progress(b, false);
        return 0;
    }
    const char *mark[] = {"SET", built_key, "1"};
    const char *unlock[] = {"DEL", build_lock};
    if (reply_is(s, command(s, 3, mark, NULL), "OK") < 0 ||
        reply_is(s, command(s, 2, unlock, NULL), "") < 0)
        return -1;
    b->running = false;
    s->built = true;
    build_progress(b, true);
    resync(s, "vectors listed"); /* what was loaded before may lack what is listed now */
    return 0;
}

/* The build's work for this turn of the loader; -1 if the connection failed. */
static int build_work(struct vsync *s, struct build *b)
{
    if (s->built || (!b->running && pc_mono_ms() < s->build_next_ms))
        return 0;
    if (!b->running) {
        int rc = build_check(s, b);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
    return build_step(s, b);
}

/* --- the loader's thread ------------------------------------------------------------------- */

/* The next job, waiting up to wait_ms for one; NULL if none (or stopping). */
static struct job *take_job(struct vsync *s, int64_t wait_ms)
{
    struct timespec until = pc_mono_after(wait_ms);
    pthread_mutex_lock(&s->mu);
    while (s->head == NULL && !s->stop && pthread_cond_timedwait(&s->work, &s->mu, &until) == 0) {
    }
    struct job *j = s->stop ? NULL : dequeue(s);
    pthread_mutex_unlock(&s->mu);
    return j;
}

/*
 * Wait for pc:schema: ms, or less once a lookup asks (vsync_load_wait), but
 * never under SCHEMA_KICK_MS (nor ms), so lookups do not make the loader
 * reconnect more often than that while the schema stays missing or old (an
 * operator has to run `promptcache migrate`). Loads queued meanwhile stay.
 */
static void nap_schema(struct vsync *s, int64_t ms)
{
    struct timespec least = pc_mono_after(PC_MIN(ms, (int64_t)SCHEMA_KICK_MS));
    struct timespec until = pc_mono_after(ms);
    pthread_mutex_lock(&s->mu);
    s->schema_wait = true;
    s->kicked = false;
    s->schema_reads++;
    pthread_cond_broadcast(&s->done); /* lookups that asked for this read: not yet */
    while (!s->stop && pthread_cond_timedwait(&s->work, &s->mu, &least) == 0) {
    }
    while (!s->stop && !s->kicked && pthread_cond_timedwait(&s->work, &s->mu, &until) == 0) {
    }
    pthread_mutex_unlock(&s->mu);
}

static void *loader_main(void *arg)
{
    struct vsync *s = arg;
    struct build b = {0};
    int64_t backoff = BACKOFF_MIN_MS, schema_backoff = SCHEMA_FIRST_MS;
    while (!stopping(s)) {
        if (!s->connected) {
            int rc = connect_redis(s);
            if (rc == 0) { /* connected, but the schema is not (yet) this build's */
                nap_schema(s, schema_backoff);
                schema_backoff = PC_MIN(schema_backoff * 2, (int64_t)SCHEMA_RETRY_MS);
                b.running = false; /* the connection was dropped: a build starts again */
                continue;
            }
            if (rc < 0) {
                pthread_mutex_lock(&s->mu);
                s->schema_wait = false; /* Redis away: lookups do not wait for the loader */
                pthread_cond_broadcast(&s->done);
                pthread_mutex_unlock(&s->mu);
                fail_queued(s);
                nap(s, backoff);
                backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
                b.running = false;
                continue;
            }
            backoff = BACKOFF_MIN_MS; /* it connected: a new outage starts from the shortest wait */
            schema_backoff = SCHEMA_FIRST_MS;
        }
        /* A build step only when no load waits: lookups come first. */
        pthread_mutex_lock(&s->mu);
        bool idle = s->head == NULL;
        pthread_mutex_unlock(&s->mu);
        int rc = idle ? build_work(s, &b) : 0;
        struct job *j = rc == 0 ? take_job(s, s->built || b.running ? 1000 : 200) : NULL;
        if (j != NULL) {
            rc = j->kind == JOB_LOAD ? run_load(s, j) : run_list(s, j);
            free(j);
        }
        if (rc < 0) {
            drop(s);
            b.running = false;
            fail_queued(s);
            nap(s, backoff);
            backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
        }
    }
    fail_queued(s);
    drop(s);
    return NULL;
}

struct vsync *vsync_start(const struct vsync_opts *o)
{
    char err[192];
    struct rurl u;
    if (rurl_parse(o->url, 0, &u, err, sizeof(err)) < 0) {
        log_error("vsync: invalid redis URL: %s", err);
        return NULL;
    }
    rurl_free(&u);
    if (o->index == NULL || o->space == NULL || o->space[0] == '\0' ||
        strlen(o->space) > VREC_SPACE_MAX) {
        log_error("vsync: an index and an embedding space name (1..%d bytes) are needed",
                  VREC_SPACE_MAX);
        return NULL;
    }
    struct vsync *s = pc_calloc(1, sizeof(*s));
    s->magic = VSYNC_MAGIC;
    s->url = pc_strdup(o->url);
    s->space = pc_strdup(o->space);
    s->index = o->index;
    s->dim = vindex_dim(o->index);
    s->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
    s->max_ttl_ms = o->max_ttl_ms;
    s->row = o->row;
    /* A partition fits in half the index's budget at most (the rest: the other partitions). */
    struct vindex_stats vs;
    vindex_get_stats(o->index, &vs);
    s->load_max = vs.max_bytes > 0
                      ? PC_MAX((size_t)16, vs.max_bytes / 2 / vindex_bytes_per_vector(o->index))
                      : LOAD_MEMBERS_MAX;
    s->load_max = PC_MIN(s->load_max, (size_t)LOAD_MEMBERS_MAX);
    s->vec = pc_malloc(VINDEX_DIM_MAX * sizeof(float));
    s->evec = pc_malloc(VINDEX_DIM_MAX * sizeof(float));
    s->fd = -1;
    /* Lookups wait for the first connect as for the schema: one that fails (Redis away) or
     * finds no current schema ends their wait (a miss); they did not wait at all before, so a
     * rewording asked right after start missed while the loader was still connecting. */
    s->schema_wait = true;
    atomic_store(&s->ready, o->following);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work, &ca);
    pthread_cond_init(&s->done, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&s->thread, NULL, loader_main, s);
    if (rc != 0) {
        log_error("vsync: cannot start the loader thread: %s", strerror(rc));
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->done);
        s->magic = 0;
        free(s->vec);
        free(s->evec);
        free(s->url);
        free(s->space);
        free(s);
        return NULL;
    }
    return s;
}

void vsync_stop(struct vsync **sp)
{
    struct vsync *s = *sp;
    *sp = NULL;
    if (s == NULL)
        return;
    PC_CHECK_OBJ(s, VSYNC_MAGIC);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    atomic_store(&s->stopping, true);
    if (s->fd >= 0) /* out of a blocked read at once */
        shutdown(s->fd, SHUT_RDWR);
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    s->magic = 0;
    free(s->vec);
    free(s->evec);
    if (s->url != NULL) /* it may hold a password */
        explicit_bzero(s->url, strlen(s->url));
    free(s->url);
    free(s->space);
    free(s);
}

bool vsync_ready(const struct vsync *s)
{
    return atomic_load(&s->ready);
}

void vsync_get_counters(const struct vsync *s, struct vsync_counters *out)
{
    struct vsync *m = (struct vsync *)s; /* the queue's lock */
    out->ready = atomic_load(&s->ready);
    out->loader_up = atomic_load(&s->loader_up);
    out->loaded = atomic_load(&s->loaded);
    out->events = atomic_load(&s->events);
    out->loads = atomic_load(&s->loads);
    out->errors = atomic_load(&s->errors);
    out->corrupt = atomic_load(&s->corrupt);
    out->skipped = atomic_load(&s->skipped);
    out->ignored = atomic_load(&s->ignored);
    pthread_mutex_lock(&m->mu);
    out->queued = s->queued;
    pthread_mutex_unlock(&m->mu);
}
