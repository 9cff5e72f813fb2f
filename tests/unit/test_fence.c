/* test_fence.c - purge fences: what a mark crosses, and what it does not. */
#include "pc_fence.h"
#include "pc_vsync.h"
#include "t.h"

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
    T_CHECK(b.lens[b.argc - 2] == 1 && b.argv[b.argc - 2][0] == 'p');
}

int main(void)
{
    T_RUN(test_key_marks);
    T_RUN(test_mark_all);
    T_RUN(test_none);
    T_RUN(test_notice);
    T_DONE();
}
