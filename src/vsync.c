/*
 * vsync.c - the vector records' key names, the commands that write them and
 * the stream events, and the reader thread that keeps the process's vindex in
 * step with Redis (the picture is in pc_vsync.h).
 *
 * Owns the reader: its thread, its blocking connection (struct rcli, quiet:
 * this module logs), the stream position and the counters. The vindex is the
 * caller's; the reader only adds to it and removes from it.
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

#define VSYNC_MAGIC      0x5653594eu /* "VSYN" */
#define BACKOFF_MIN_MS   100
#define BACKOFF_MAX_MS   5000
#define SCHEMA_RETRY_MS  2000
#define PROGRESS_VECTORS 20000 /* a rebuild logs progress this often ... */
#define PROGRESS_MS      5000  /* ... or this often, whichever comes first */
#define STREAM_ID_MAX    48

#define STR_(x) #x
#define STR(x)  STR_(x)

static const char stream_key[] = PC_KEY_PREFIX "vs";
static const char vector_prefix[] = PC_KEY_PREFIX "v:{";

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
    a->argv[a->argc] = p;
    a->lens[a->argc++] = n;
}

static void arg_str(struct vsync_argv *a, const char *s)
{
    arg(a, s, strlen(s));
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
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len)
{
    xadd_head(a, "add");
    vsync_id(tenant, key, a->id);
    arg_str(a, "k");
    arg(a, a->id, VSYNC_ID_LEN);
    arg_str(a, "r");
    arg(a, rec, rec_len);
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

int vsync_store_put(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN], const void *rec, size_t rec_len,
                    int64_t ttl_ms)
{
    struct vsync_argv a;
    vsync_argv_set(&a, tenant, key, rec, rec_len, ttl_ms);
    if (send_argv(s, &a) < 0)
        return -1;
    vsync_argv_add(&a, tenant, key, rec, rec_len);
    return send_argv(s, &a);
}

int vsync_store_del(struct store *s, const unsigned char tenant[VINDEX_TENANT_LEN],
                    const unsigned char key[VINDEX_KEY_LEN])
{
    struct vsync_argv a;
    vsync_argv_unlink(&a, tenant, key);
    if (send_argv(s, &a) < 0)
        return -1;
    vsync_argv_del(&a, tenant, key);
    return send_argv(s, &a);
}

int vsync_store_flush(struct store *s, const unsigned char *tenant)
{
    struct vsync_argv a;
    vsync_argv_flush(&a, tenant);
    return send_argv(s, &a);
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
    const redisReply *op, *k, *r, *t, *i;
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
    }
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

/* --- the reader ---------------------------------------------------------------------------- */

struct vsync {
    unsigned magic;
    char *url, *space;
    struct vindex *index;
    int dim;
    int64_t timeout_ms;
    int64_t max_ttl_ms;
    struct stats *row; /* semantic_sync_rejected, or NULL */
    int block_ms;
    size_t batch;

    pthread_t thread;
    pthread_mutex_t mu; /* with cond: wakes the thread's waits for vsync_stop */
    pthread_cond_t cond;
    bool stop; /* under mu */
    int fd;    /* under mu: the thread's socket (-1: none), shut down by vsync_stop */
    atomic_bool stopping;

    /* The thread's own. */
    struct rcli k;
    bool connected;
    bool down_logged;   /* an outage has been logged */
    bool schema_logged; /* waiting for the schema has been logged */
    char last_id[STREAM_ID_MAX];
    uint64_t base_added; /* the stream's entries-added when last_id was noted by a rebuild */
    uint64_t read;       /* entries read since then */
    bool no_trim_check;  /* Redis before 7: entries lost to trimming cannot be told */
    float *vec;          /* decode buffer, VINDEX_DIM_MAX floats */

    atomic_bool ready;
    atomic_uint_fast64_t loaded, events, rebuilds, errors, corrupt, skipped;
    atomic_int_fast64_t last_rebuild_ms;
};

enum applied { APPLIED, SKIPPED, CORRUPT };

static bool stopping(struct vsync *s)
{
    return atomic_load(&s->stopping);
}

/* Sleep ms, or less if vsync_stop is called meanwhile. */
static void nap(struct vsync *s, int64_t ms)
{
    struct timespec ts = pc_mono_after(ms);
    pthread_mutex_lock(&s->mu);
    while (!s->stop && pthread_cond_timedwait(&s->cond, &s->mu, &ts) == 0) {
    }
    pthread_mutex_unlock(&s->mu);
}

static void count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add(c, n);
}

/* A failure of the connection or a command: counted, logged once per outage. */
static void trouble(struct vsync *s, const char *what)
{
    count(&s->errors, 1);
    if (!s->down_logged && !stopping(s)) /* a read cut by vsync_stop is no outage */
        /* Info: the store reports an outage once per process (one warning, one notice). */
        log_info("vsync: %s: %s; retrying with backoff (the vector index keeps what it has)", what,
                 s->k.errmsg[0] ? s->k.errmsg : "error");
    s->down_logged = true;
}

/* The thread's socket (-1: none) for vsync_stop to shut down. */
static void reader_fd(struct vsync *s, int fd)
{
    pthread_mutex_lock(&s->mu);
    s->fd = fd;
    pthread_mutex_unlock(&s->mu);
}

static void drop(struct vsync *s)
{
    atomic_store(&s->ready, false);
    reader_fd(s, -1);
    rcli_close(&s->k);
    s->connected = false;
}

static int connect_redis(struct vsync *s)
{
    drop(s);
    s->k.quiet = true;
    s->k.errmsg[0] = '\0';
    if (rcli_open(&s->k, s->url, s->timeout_ms + s->block_ms, "vsync") < 0) {
        trouble(s, "cannot connect to Redis");
        rcli_close(&s->k);
        return -1;
    }
    s->connected = true;
    reader_fd(s, s->k.rc->fd); /* set after a stop: its few commands run, no XREAD */
    return 0;
}

/* A command on the reader's connection: the reply, error replies included (the caller's to
 * judge), or NULL after the connection failed. rcli_call routes it (cluster://: to the node of
 * its key; SCAN over every primary, k.rc left on the node scanned for the GETs that follow). */
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
    snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: %s", s->k.where, r->str);
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
        if (!s->schema_logged && rc < 0)
            log_warn("vsync: %s; waiting for schema %ld before loading vectors", err,
                     migrate_latest());
        else if (!s->schema_logged)
            log_warn("vsync: Redis schema is at %ld, this build needs %ld: waiting for it "
                     "before loading vectors",
                     v, migrate_latest());
        s->schema_logged = true;
        return 0;
    }
    s->schema_logged = false;
    return 1;
}

/* --- stream positions ------------------------------------------------------------------------ */

struct stream_id {
    uint64_t ms, seq;
};

static bool parse_stream_id(const char *s, struct stream_id *id)
{
    return s != NULL && vsync_parse_stream_id(s, strlen(s), &id->ms, &id->seq) == 0;
}

/* The value of field name in an XINFO STREAM reply (a flat name/value array), or NULL. */
static const redisReply *xinfo_field(const redisReply *r, const char *name)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *f = r->element[i];
        if ((f->type == REDIS_REPLY_STATUS || f->type == REDIS_REPLY_STRING) &&
            strcmp(f->str, name) == 0)
            return r->element[i + 1];
    }
    return NULL;
}

struct stream_state {
    char last_id[STREAM_ID_MAX]; /* last-generated-id: "0-0" when there is no stream */
    uint64_t added;              /* entries-added (Redis 7) */
    uint64_t length;
    bool has_added;
};

/* XINFO STREAM into st; 0, or -1 failed. */
static int stream_state(struct vsync *s, struct stream_state *st)
{
    const char *argv[] = {"XINFO", "STREAM", stream_key};
    memset(st, 0, sizeof(*st));
    snprintf(st->last_id, sizeof(st->last_id), "0-0");
    redisReply *r = command(s, 3, argv, NULL);
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR && strstr(r->str, "no such key") != NULL) {
        freeReplyObject(r);
        st->has_added = true; /* nothing was ever added, as far as anyone can tell */
        return 0;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        error_reply(s, r, "XINFO STREAM failed");
        return -1;
    }
    const redisReply *id = xinfo_field(r, "last-generated-id");
    const redisReply *added = xinfo_field(r, "entries-added");
    const redisReply *len = xinfo_field(r, "length");
    struct stream_id sid;
    int rc = -1;
    if (id != NULL && id->type == REDIS_REPLY_STRING && id->len < STREAM_ID_MAX &&
        parse_stream_id(id->str, &sid) && len != NULL && len->type == REDIS_REPLY_INTEGER) {
        snprintf(st->last_id, sizeof(st->last_id), "%s", id->str);
        st->length = (uint64_t)len->integer;
        st->has_added = added != NULL && added->type == REDIS_REPLY_INTEGER;
        st->added = st->has_added ? (uint64_t)added->integer : 0;
        rc = 0;
    }
    freeReplyObject(r);
    if (rc < 0) {
        snprintf(s->k.errmsg, sizeof(s->k.errmsg), "unexpected XINFO STREAM reply");
        trouble(s, "cannot read the vector stream's position");
    }
    return rc;
}

/*
 * Whether entries this reader has not read yet were trimmed away. The
 * stream keeps entries number added-length+1 .. added (counting every entry
 * ever added); this reader has read up to number base_added + read. Only a
 * full batch can come after such a loss (a trim keeps at least MAXLEN
 * entries, more than a batch), so only then is this asked. 1 lost, 0 not,
 * -1 failed.
 */
static int events_lost(struct vsync *s)
{
    struct stream_state st;
    if (s->no_trim_check)
        return 0;
    if (stream_state(s, &st) < 0)
        return -1;
    if (!st.has_added) {
        log_warn("vsync: this Redis does not report entries-added (Redis 7 does): vector "
                 "stream events lost to trimming cannot be detected");
        s->no_trim_check = true;
        return 0;
    }
    return st.added - PC_MIN(st.length, st.added) > s->base_added + s->read;
}

/* --- applying records and events ---------------------------------------------------------- */

static enum applied apply_record(struct vsync *s, const unsigned char *tenant,
                                 const unsigned char *key, const char *data, size_t len)
{
    struct vrec r;
    char err[96];
    if (vrec_decode(data, len, &r, s->vec, VINDEX_DIM_MAX, err, sizeof(err)) < 0) {
        log_debug("vsync: corrupt vector record skipped: %s", err);
        return CORRUPT;
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
    return vindex_add(s->index, r.partition, &it, r.vec) == 0 ? APPLIED : CORRUPT;
}

/* A record or event rejected: counted here and in the metrics row (semantic_sync_rejected). */
static void reject(struct vsync *s, uint64_t n)
{
    count(&s->corrupt, n);
    if (s->row != NULL && n > 0)
        stats_add(s->row, STAT_semantic_sync_rejected, (int64_t)n);
}

static void tally(struct vsync *s, enum applied a)
{
    if (a == CORRUPT)
        reject(s, 1);
    else
        count(a == APPLIED ? &s->loaded : &s->skipped, 1);
}

enum event_fate { EV_APPLIED, EV_IGNORED, EV_REJECTED };

/* Apply one stream event. */
static enum event_fate apply_event(struct vsync *s, const redisReply *kv)
{
    struct vsync_event ev;
    if (vsync_event_parse(kv, &ev) < 0)
        return EV_REJECTED;
    switch (ev.op) {
    case VSYNC_OP_ADD: {
        enum applied a = apply_record(s, ev.tenant, ev.key, ev.rec, ev.rec_len);
        if (a == SKIPPED)
            tally(s, a);
        return a != CORRUPT ? EV_APPLIED : EV_REJECTED;
    }
    case VSYNC_OP_DEL:
        vindex_remove(s->index, ev.key);
        return EV_APPLIED;
    case VSYNC_OP_FLUSH:
        if (ev.has_tenant)
            vindex_remove_tenant(s->index, ev.tenant);
        else
            vindex_clear(s->index);
        return EV_APPLIED;
    case VSYNC_OP_SET:
        /* An entry was written: its vector, if any, comes with its own add or del. */
        return EV_IGNORED;
    }
    return EV_REJECTED;
}

/* --- rebuild ------------------------------------------------------------------------------------
 */

struct rebuild {
    uint64_t t0, last_log;
    size_t next_log;        /* vectors loaded at which to log progress next */
    size_t keys, counts[3]; /* by enum applied */
};

/* GET every vector key of a SCAN batch, pipelined, and load what decodes; -1 if failed. */
static int load_batch(struct vsync *s, const redisReply *keys, struct rebuild *rb)
{
    size_t sent = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        const char *argv[] = {"GET", k->str};
        const size_t lens[] = {3, k->len};
        redisAppendCommandArgv(s->k.rc, 2, argv, lens);
        sent++;
    }
    size_t got = 0;
    for (size_t i = 0; i < keys->elements && got < sent; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING)
            continue;
        void *rp = NULL;
        if (redisGetReply(s->k.rc, &rp) != REDIS_OK || rp == NULL) {
            snprintf(s->k.errmsg, sizeof(s->k.errmsg), "%s: GET: %s", s->k.where,
                     s->k.rc->errstr[0] ? s->k.rc->errstr : "no reply");
            trouble(s, "Redis connection lost during a rebuild");
            return -1;
        }
        got++;
        redisReply *r = rp;
        unsigned char tenant[VINDEX_TENANT_LEN], key[VINDEX_KEY_LEN];
        rb->keys++;
        if (parse_vector_key(k->str, k->len, tenant, key) < 0)
            rb->counts[CORRUPT]++;
        else if (r->type == REDIS_REPLY_STRING)
            rb->counts[apply_record(s, tenant, key, r->str, r->len)]++;
        freeReplyObject(r); /* nil: expired or deleted since the SCAN */
    }
    return 0;
}

static void rebuild_progress(struct rebuild *rb)
{
    uint64_t now = pc_mono_ms();
    size_t n = rb->counts[APPLIED];
    if (n < rb->next_log && now - rb->last_log < PROGRESS_MS)
        return;
    rb->last_log = now;
    rb->next_log = n + PROGRESS_VECTORS;
    log_notice("vsync: rebuilding the vector index: %zu vectors loaded from %zu keys so far", n,
               rb->keys);
}

/* One SCAN step: *cursor advanced; 0, or -1 if failed. */
static int scan_step(struct vsync *s, char cursor[32], struct rebuild *rb)
{
    char count_s[24], pattern[64];
    snprintf(count_s, sizeof(count_s), "%zu", s->batch);
    snprintf(pattern, sizeof(pattern), "%s*", vector_prefix);
    const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", count_s};
    redisReply *r = command(s, 6, argv, NULL);
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        error_reply(s, r, "SCAN failed");
        return -1;
    }
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[0]->len < 32 &&
        r->element[1]->type == REDIS_REPLY_ARRAY) {
        snprintf(cursor, 32, "%s", r->element[0]->str);
        rc = load_batch(s, r->element[1], rb);
    }
    freeReplyObject(r);
    return rc;
}

/*
 * Load every vector record of Redis into the index, then drop from the index
 * what Redis no longer has. The stream position is noted first, so an event
 * written during the SCAN is read afterwards (applying one twice is
 * harmless). 0, or -1 (failed or stopping: nothing is dropped).
 */
static int rebuild(struct vsync *s)
{
    struct rebuild rb = {.t0 = pc_mono_ms(), .next_log = PROGRESS_VECTORS};
    rb.last_log = rb.t0;
    struct stream_state st;
    if (stream_state(s, &st) < 0)
        return -1;
    snprintf(s->last_id, sizeof(s->last_id), "%s", st.last_id);
    s->base_added = st.added;
    s->read = 0;
    uint32_t gen = vindex_generation_begin(s->index);
    char cursor[32] = "0";
    do {
        if (scan_step(s, cursor, &rb) < 0)
            return -1;
        rebuild_progress(&rb);
    } while (strcmp(cursor, "0") != 0 && !stopping(s));
    if (stopping(s))
        return -1;
    size_t gone = vindex_sweep_before(s->index, gen);
    uint64_t ms = pc_mono_ms() - rb.t0;
    count(&s->loaded, rb.counts[APPLIED]);
    count(&s->skipped, rb.counts[SKIPPED]);
    reject(s, rb.counts[CORRUPT]);
    count(&s->rebuilds, 1);
    atomic_store(&s->last_rebuild_ms, (int_fast64_t)ms);
    log_notice("vsync: vector index rebuilt from Redis in %llu ms: %zu vectors loaded, %zu of "
               "another embedding space or expired, %zu corrupt, %zu no longer in Redis removed",
               (unsigned long long)ms, rb.counts[APPLIED], rb.counts[SKIPPED], rb.counts[CORRUPT],
               gone);
    return 0;
}

/* --- following the stream ------------------------------------------------------------------- */

/* Apply the entries of an XREAD reply; how many entries there were, or -1 if malformed. */
static long apply_entries(struct vsync *s, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 ||
        r->element[0]->type != REDIS_REPLY_ARRAY || r->element[0]->elements != 2 ||
        r->element[0]->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    const redisReply *entries = r->element[0]->element[1];
    for (size_t i = 0; i < entries->elements; i++) {
        const redisReply *e = entries->element[i];
        struct stream_id id;
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING || e->element[0]->len >= STREAM_ID_MAX ||
            !parse_stream_id(e->element[0]->str, &id))
            return -1;
        snprintf(s->last_id, sizeof(s->last_id), "%s", e->element[0]->str);
        s->read++;
        enum event_fate fate = apply_event(s, e->element[1]);
        if (fate == EV_APPLIED)
            count(&s->events, 1);
        else if (fate == EV_REJECTED)
            reject(s, 1);
    }
    return (long)entries->elements;
}

/* One XREAD round. 0: go on; 1: events were lost, rebuild; -1: failed. */
static int follow(struct vsync *s)
{
    char count_s[24], block_s[24];
    snprintf(count_s, sizeof(count_s), "%zu", s->batch);
    snprintf(block_s, sizeof(block_s), "%d", s->block_ms);
    const char *argv[] = {"XREAD", "COUNT",   count_s,    "BLOCK",
                          block_s, "STREAMS", stream_key, s->last_id};
    redisReply *r = command(s, 8, argv, NULL);
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        error_reply(s, r, "XREAD failed");
        return -1;
    }
    long n = r->type == REDIS_REPLY_NIL ? 0 : apply_entries(s, r);
    freeReplyObject(r);
    if (n < 0) {
        snprintf(s->k.errmsg, sizeof(s->k.errmsg), "unexpected XREAD reply");
        trouble(s, "cannot follow the vector stream");
        return -1;
    }
    if ((size_t)n < s->batch)
        return 0;
    int lost = events_lost(s);
    if (lost > 0)
        log_warn("vsync: vector stream events were trimmed before this instance read them; "
                 "rebuilding the index from Redis");
    return lost;
}

/* --- the thread ----------------------------------------------------------------------------------
 */

/* Connected, schema current, rebuilt: follow the stream until stop, an error or a loss. */
static int serve(struct vsync *s)
{
    int rc = schema_current(s);
    if (rc <= 0)
        return rc;
    while (!stopping(s)) {
        if (rebuild(s) < 0)
            return -1;
        if (s->down_logged) /* an outage is over only once the index is in step again */
            log_info("vsync: back in step with Redis at %s", s->k.where);
        s->down_logged = false;
        atomic_store(&s->ready, true);
        while (!stopping(s) && (rc = follow(s)) == 0) {
        }
        atomic_store(&s->ready, false);
        if (rc < 0)
            return -1;
    }
    return 1;
}

static void *vsync_main(void *arg)
{
    struct vsync *s = arg;
    int64_t backoff = BACKOFF_MIN_MS;
    while (!stopping(s)) {
        if (!s->connected && connect_redis(s) < 0) {
            nap(s, backoff);
            backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
            continue;
        }
        uint64_t rebuilds = atomic_load(&s->rebuilds);
        int rc = serve(s);
        /* It was in step: a new outage starts again from the shortest wait. */
        if (atomic_load(&s->rebuilds) != rebuilds)
            backoff = BACKOFF_MIN_MS;
        if (rc == 0) {
            nap(s, SCHEMA_RETRY_MS);
        } else if (rc < 0) {
            drop(s);
            nap(s, backoff);
            backoff = PC_MIN(backoff * 2, (int64_t)BACKOFF_MAX_MS);
        } else {
            backoff = BACKOFF_MIN_MS;
        }
    }
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
    s->block_ms = o->block_ms > 0 ? o->block_ms : 1000;
    s->batch = o->batch > 0 ? o->batch : 500;
    s->vec = pc_malloc(VINDEX_DIM_MAX * sizeof(float));
    snprintf(s->last_id, sizeof(s->last_id), "0-0");
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&s->thread, NULL, vsync_main, s);
    if (rc != 0) {
        log_error("vsync: cannot start the reader thread: %s", strerror(rc));
        s->magic = 0;
        free(s->vec);
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
    if (s->fd >= 0) /* out of a blocked XREAD at once, not after up to block_ms */
        shutdown(s->fd, SHUT_RDWR);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
    s->magic = 0;
    free(s->vec);
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
    out->ready = atomic_load(&s->ready);
    out->loaded = atomic_load(&s->loaded);
    out->events = atomic_load(&s->events);
    out->rebuilds = atomic_load(&s->rebuilds);
    out->errors = atomic_load(&s->errors);
    out->corrupt = atomic_load(&s->corrupt);
    out->skipped = atomic_load(&s->skipped);
    out->last_rebuild_ms = atomic_load(&s->last_rebuild_ms);
}
