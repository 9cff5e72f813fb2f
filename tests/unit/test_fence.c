/* test_fence.c - purge fences: what a mark crosses, and what it does not. */
#include "pc_fence.h"
#include "pc_vsync.h"
#include "t.h"

#include <string.h>

#include <hiredis/hiredis.h>

static void key(unsigned char k[PC_SHA256_LEN], unsigned char first, unsigned char rest)
{
    memset(k, rest, PC_SHA256_LEN);
    k[0] = first;
}

static void test_key_marks(void)
{
    struct fence *f = fence_create();
    unsigned char a[PC_SHA256_LEN], b[PC_SHA256_LEN];
    key(a, 1, 0xaa);
    key(b, 2, 0xbb);
    uint64_t before = fence_now(f);
    T_CHECK(!fence_crossed(f, a, before));
    fence_mark(f, a);
    T_CHECK(fence_crossed(f, a, before));
    T_CHECK(!fence_crossed(f, b, before)); /* another slot */
    /* asked for after the mark: not crossed */
    T_CHECK(!fence_crossed(f, a, fence_now(f)));
    fence_destroy(&f);
    T_CHECK(f == NULL);
}

static void test_mark_all(void)
{
    struct fence *f = fence_create();
    unsigned char a[PC_SHA256_LEN];
    key(a, 3, 0x11);
    uint64_t before = fence_now(f);
    fence_mark_all(f);
    T_CHECK(fence_crossed(f, a, before));
    uint64_t after = fence_now(f);
    T_CHECK(!fence_crossed(f, a, after));
    fence_mark(f, a);
    T_CHECK(fence_crossed(f, a, after));
    fence_destroy(&f);
}

/* The last purge of a key's entry: its slot's delete or a flush, whichever came later. */
static void test_last(void)
{
    struct fence *f = fence_create();
    unsigned char a[PC_SHA256_LEN], b[PC_SHA256_LEN];
    key(a, 5, 0x33);
    key(b, 6, 0x44);
    T_CHECK_INT(fence_last(f, a), 0);
    fence_mark(f, a);
    uint64_t one = fence_now(f);
    T_CHECK_INT(fence_last(f, a), one);
    T_CHECK_INT(fence_last(f, b), 0); /* another slot */
    fence_mark_all(f);
    uint64_t all = fence_now(f);
    T_CHECK_INT(fence_last(f, a), all);
    T_CHECK_INT(fence_last(f, b), all);
    /* crossed since a mark exactly when the last purge came after it */
    T_CHECK(fence_crossed(f, a, one));
    T_CHECK(!fence_crossed(f, a, all));
    T_CHECK_INT(fence_last(NULL, a), 0);
    fence_destroy(&f);
}

/* Without a fence (the cache off) nothing is ever crossed. */
static void test_none(void)
{
    unsigned char a[PC_SHA256_LEN];
    key(a, 4, 0x22);
    T_CHECK_INT(fence_now(NULL), 0);
    fence_mark(NULL, a);
    fence_mark_all(NULL);
    T_CHECK(!fence_crossed(NULL, a, 0));
}

/* The notice is a del event of no entry, with p=1, that the event parser accepts. */
static void test_notice(void)
{
    struct vsync_argv a;
    fence_argv_notice(&a);
    T_CHECK(a.argc > 4);
    T_CHECK_STR(a.argv[0], "XADD");
    int p = -1, op = -1;
    for (int i = 0; i + 1 < a.argc; i++) {
        if (a.lens[i] == 1 && a.argv[i][0] == 'p')
            p = i;
        if (a.lens[i] == 2 && memcmp(a.argv[i], "op", 2) == 0)
            op = i;
    }
    T_CHECK(op >= 0 && a.lens[op + 1] == 3 && memcmp(a.argv[op + 1], "del", 3) == 0);
    T_CHECK(p >= 0 && a.lens[p + 1] == 1 && a.argv[p + 1][0] == '1');
    /* a purge's del event of one entry says p=1 too */
    unsigned char tenant[VINDEX_TENANT_LEN] = {1}, exact[PC_SHA256_LEN] = {2};
    struct vsync_argv b;
    fence_argv_purged(&b, tenant, exact);
    T_CHECK_INT(b.argc, a.argc);
    T_CHECK(b.lens[b.argc - 4] == 1 && b.argv[b.argc - 4][0] == 'p');
    /* and which process purged */
    T_CHECK(b.lens[b.argc - 2] == 1 && b.argv[b.argc - 2][0] == 'i');
    T_CHECK(b.lens[b.argc - 1] == VSYNC_INSTANCE_LEN &&
            memcmp(b.argv[b.argc - 1], vsync_instance(), VSYNC_INSTANCE_LEN) == 0);
}

/* An XADD's fields (after "XADD key MAXLEN ~ N *") as the follower hands them out. */
struct kv {
    redisReply r, el[VSYNC_ARGV_MAX];
    redisReply *els[VSYNC_ARGV_MAX];
};

static const redisReply *kv_of(struct kv *k, const struct vsync_argv *a)
{
    memset(k, 0, sizeof(*k));
    k->r.type = REDIS_REPLY_ARRAY;
    k->r.element = k->els;
    for (int i = 6; i < a->argc; i++) {
        redisReply *e = &k->el[k->r.elements];
        e->type = REDIS_REPLY_STRING;
        e->str = (char *)a->argv[i];
        e->len = a->lens[i];
        k->els[k->r.elements++] = e;
    }
    return &k->r;
}

/*
 * What the stream's events cross: another process's notice, every fence; its del of one
 * entry, that key's; this process's own purge events, none (it set its fences as the purge
 * started: read again, they held back answers asked for since); a flush event, none (its
 * notice came first); a del without p=1 (a refresh's), none.
 */
static void test_events(void)
{
    struct fence *f = fence_create();
    unsigned char a[PC_SHA256_LEN], b[PC_SHA256_LEN], tenant[VINDEX_TENANT_LEN] = {7};
    key(a, 5, 0x33);
    key(b, 6, 0x44);
    struct vsync_argv ev;
    struct kv k;
    char other[VSYNC_INSTANCE_LEN + 1];
    memset(other, 'f', VSYNC_INSTANCE_LEN);
    other[VSYNC_INSTANCE_LEN] = '\0';
    T_CHECK(memcmp(other, vsync_instance(), VSYNC_INSTANCE_LEN) != 0);

    uint64_t since = fence_now(f);
    fence_argv_notice(&ev);
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(!fence_crossed(f, a, since)); /* its own notice */
    fence_argv_purged(&ev, tenant, a);
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(!fence_crossed(f, a, since)); /* its own del */
    vsync_argv_flush(&ev, NULL);
    fence_apply(f, kv_of(&k, &ev));
    vsync_argv_flush(&ev, tenant);
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(!fence_crossed(f, a, since)); /* flushes: their notices fence */
    vsync_argv_del(&ev, tenant, a);
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(!fence_crossed(f, a, since)); /* a refresh's del */

    fence_argv_purged(&ev, tenant, a);
    ev.argv[ev.argc - 1] = other;
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(fence_crossed(f, a, since)); /* another's del: its key */
    T_CHECK(!fence_crossed(f, b, since));
    fence_argv_notice(&ev);
    ev.argv[ev.argc - 1] = other;
    fence_apply(f, kv_of(&k, &ev));
    T_CHECK(fence_crossed(f, b, since)); /* another's notice: every key */
    T_CHECK(!fence_crossed(f, b, fence_now(f)));
    fence_destroy(&f);
}

int main(void)
{
    T_RUN(test_key_marks);
    T_RUN(test_mark_all);
    T_RUN(test_last);
    T_RUN(test_none);
    T_RUN(test_notice);
    T_RUN(test_events);
    T_DONE();
}
