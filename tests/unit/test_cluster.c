/*
 * test_cluster.c - Redis Cluster arithmetic and replies (pc_cluster.h): CRC16
 * and hash slots against known values (the ones `redis-cli cluster keyslot`
 * gives), the routing key of the commands the project sends, the parsing of
 * MOVED / ASK / TRYAGAIN / CLUSTERDOWN, and slot maps from CLUSTER SHARDS
 * and CLUSTER SLOTS replies - well-formed, and every way a hostile or broken
 * node could get one wrong. Also the reply of a migration script, whose
 * pc:meta fields are written apart (another slot than pc:schema).
 *
 * Replies are real hiredis reply objects: RESP text fed to hiredis' reader.
 */
#include "pc_cluster.h"
#include "pc_migrate.h"
#include "pc_util.h"
#include "t.h"

#include <hiredis/hiredis.h>

/* The reply that RESP text r parses to (the caller frees it). */
static redisReply *resp(const char *r)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;
    redisReaderFeed(rd, r, strlen(r));
    if (redisReaderGetReply(rd, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(rd);
    T_CHECK(reply != NULL);
    return reply;
}

/* RESP building, so the replies below read like what a node sends. */
static void arr(struct pc_buf *b, size_t n)
{
    pc_buf_printf(b, "*%zu\r\n", n);
}
static void str(struct pc_buf *b, const char *s)
{
    pc_buf_printf(b, "$%zu\r\n%s\r\n", strlen(s), s);
}
static void num(struct pc_buf *b, long long v)
{
    pc_buf_printf(b, ":%lld\r\n", v);
}

static unsigned slot_of(const char *k)
{
    return cluster_slot(k, strlen(k));
}

static void test_crc16_and_slots(void)
{
    T_CHECK_INT(cluster_crc16("123456789", 9), 0x31C3); /* CRC16 XMODEM check value */
    T_CHECK_INT(cluster_crc16("", 0), 0);
    T_CHECK_INT(slot_of("123456789"), 12739);
    T_CHECK_INT(slot_of("foo"), 12182);
    T_CHECK_INT(slot_of(""), 0);
    /* hash tags: the first {...} that is not empty */
    T_CHECK_INT(slot_of("{user1000}.following"), 3443);
    T_CHECK_INT(slot_of("{user1000}.followers"), 3443);
    T_CHECK_INT(slot_of("user1000"), 3443);
    T_CHECK_INT(slot_of("foo{}{bar}"), 8363);    /* "{}" is no tag: the whole key */
    T_CHECK_INT(slot_of("foo{{bar}}zap"), 4015); /* the tag is "{bar" */
    T_CHECK_INT(slot_of("foo{bar}{zap}"), 5061); /* the first tag: "bar" */
    T_CHECK_INT(slot_of("a{"), 14311);           /* no closing brace: the whole key */
    /* an entry and its vector record share a slot */
    T_CHECK_INT(slot_of("pc:2:e:{ab:cd}"), 14088);
    T_CHECK_INT(slot_of("pc:2:v:{ab:cd}"), 14088);
    /* binary keys: the length counts, not a NUL */
    T_CHECK(cluster_slot("a\0b", 3) != cluster_slot("a", 1));
}

static int key_index(int argc, const char **argv)
{
    return cluster_key_index(argc, argv, NULL);
}

static void test_key_index(void)
{
    const char *get[] = {"GET", "k"};
    const char *set[] = {"set", "k", "v", "PX", "1"};
    const char *eval[] = {"EVAL", "return 1", "1", "pc:2:r:2026120400", "a"};
    const char *eval0[] = {"EVAL", "return 1", "0"};
    const char *xread[] = {"XREAD", "COUNT", "5", "BLOCK", "1", "STREAMS", "pc:2:vs", "0-0"};
    const char *xinfo[] = {"XINFO", "STREAM", "pc:2:vs"};
    const char *scan[] = {"SCAN", "0", "MATCH", "pc:*"};
    const char *cluster[] = {"CLUSTER", "SHARDS"};
    const char *ping[] = {"PING"};
    T_CHECK_INT(key_index(2, get), 1);
    T_CHECK_INT(key_index(5, set), 1);
    T_CHECK_INT(key_index(5, eval), 3);
    T_CHECK_INT(key_index(3, eval0), -1);
    T_CHECK_INT(key_index(8, xread), 6);
    T_CHECK_INT(key_index(3, xinfo), 2);
    T_CHECK_INT(key_index(4, scan), -1);
    T_CHECK_INT(key_index(2, cluster), -1);
    T_CHECK_INT(key_index(1, ping), -1);
    T_CHECK_INT(key_index(1, get), -1); /* GET without its key */
    size_t lens[] = {4, 1, 1, 17, 1};   /* lengths given: "EVAL" counted, not strlen */
    T_CHECK_INT(cluster_key_index(5, eval, lens), 3);
}

static void check_redirect(const char *err, enum cluster_redirect_kind kind, unsigned slot,
                           const char *host, int port)
{
    struct cluster_redirect r;
    enum cluster_redirect_kind k = cluster_redirect_parse(err, strlen(err), &r);
    if (k != kind)
        fprintf(stderr, "  '%s': kind %d, want %d\n", err, (int)k, (int)kind);
    T_CHECK_INT(k, kind);
    T_CHECK_INT(r.kind, kind);
    if (kind == CLUSTER_MOVED || kind == CLUSTER_ASK) {
        T_CHECK_INT(r.slot, slot);
        T_CHECK_STR(r.host, host);
        T_CHECK_INT(r.port, port);
    }
}

static void test_redirects(void)
{
    check_redirect("MOVED 3999 127.0.0.1:6381", CLUSTER_MOVED, 3999, "127.0.0.1", 6381);
    check_redirect("ASK 3999 127.0.0.1:6381", CLUSTER_ASK, 3999, "127.0.0.1", 6381);
    check_redirect("MOVED 0 redis-2.internal:7000", CLUSTER_MOVED, 0, "redis-2.internal", 7000);
    check_redirect("MOVED 16383 ::1:7002", CLUSTER_MOVED, 16383, "::1", 7002); /* IPv6 */
    check_redirect("MOVED 12 :6380", CLUSTER_MOVED, 12, "", 6380); /* unknown endpoint: same host */
    check_redirect("TRYAGAIN Multiple keys request during rehashing of slot", CLUSTER_TRYAGAIN, 0,
                   "", 0);
    check_redirect("CLUSTERDOWN The cluster is down", CLUSTER_DOWN, 0, "", 0);
    check_redirect("CLUSTERDOWN Hash slot not served", CLUSTER_DOWN, 0, "", 0);
    /* not redirections */
    check_redirect("ERR unknown command", CLUSTER_REPLY_OTHER, 0, "", 0);
    check_redirect("MOVEDX 1 h:1", CLUSTER_REPLY_OTHER, 0, "", 0);
    check_redirect("READONLY You can't write against a read only replica.", CLUSTER_REPLY_OTHER, 0,
                   "", 0);
    check_redirect("", CLUSTER_REPLY_OTHER, 0, "", 0);
    /* redirections that do not parse: never followed */
    static const char *const bad[] = {
        "MOVED",        "MOVED ",        "MOVED 16384 h:1", "MOVED -1 h:1",
        "MOVED x h:1",  "MOVED 1 h",     "MOVED 1 h:0",     "MOVED 1 h:65536",
        "MOVED 1 h:7x", "MOVED 1 a b:1", "MOVED 1 h:",      "ASK 99999999 h:1",
        "MOVED 1  h:1", "ASK 1 h\n:1",   "MOVED 1 h;rm:1",  "MOVED 0012345678 h:1",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++)
        check_redirect(bad[i], CLUSTER_MALFORMED, 0, "", 0);
    char longhost[400];
    memset(longhost, 'a', sizeof(longhost));
    memcpy(longhost, "MOVED 1 ", 8);
    snprintf(longhost + 300, 100, ":7000");
    check_redirect(longhost, CLUSTER_MALFORMED, 0, "", 0);

    /* reply objects: only error replies redirect */
    struct cluster_redirect r;
    redisReply *e = resp("-MOVED 5 10.0.0.5:7001\r\n"), *s = resp("$11\r\nMOVED 5 h:1\r\n");
    T_CHECK_INT(cluster_reply_redirect(e, &r), CLUSTER_MOVED);
    T_CHECK_STR(r.host, "10.0.0.5");
    T_CHECK_INT(cluster_reply_redirect(s, &r), CLUSTER_REPLY_OTHER);
    T_CHECK_INT(cluster_reply_redirect(NULL, &r), CLUSTER_REPLY_OTHER);
    freeReplyObject(e);
    freeReplyObject(s);
}

/* One CLUSTER SHARDS node entry (a flat name/value array, as RESP2 gives maps). */
static void shard_node(struct pc_buf *b, const char *ip, long long port, const char *endpoint,
                       const char *role)
{
    arr(b, 12);
    str(b, "id");
    str(b, "0123456789abcdef0123456789abcdef01234567");
    str(b, "port");
    num(b, port);
    str(b, "ip");
    str(b, ip);
    str(b, "endpoint");
    str(b, endpoint);
    str(b, "role");
    str(b, role);
    str(b, "health");
    str(b, "online");
}

/* A shard owning [from, to] (and, if from2 >= 0, [from2, to2]) with a primary and a replica. */
static void shard(struct pc_buf *b, long long from, long long to, long long from2, long long to2,
                  long long port, const char *endpoint)
{
    arr(b, 4);
    str(b, "slots");
    arr(b, from2 >= 0 ? 4 : 2);
    num(b, from);
    num(b, to);
    if (from2 >= 0) {
        num(b, from2);
        num(b, to2);
    }
    str(b, "nodes");
    arr(b, 2);
    shard_node(b, "10.0.0.9", port + 100, "10.0.0.9", "replica");
    shard_node(b, "10.0.0.1", port, endpoint, "master");
}

static int map_shards(const char *text, struct cluster_map *m, char *err)
{
    redisReply *r = resp(text);
    int rc = cluster_map_from_shards(r, "seed.local", m, err, 160);
    freeReplyObject(r);
    return rc;
}

static void test_map_shards(void)
{
    struct pc_buf b = PC_BUF_INIT;
    struct cluster_map m = {0};
    char err[160];
    /* given out of order, with a shard of two ranges */
    arr(&b, 3);
    shard(&b, 10923, 16383, -1, -1, 7003, "10.0.0.3");
    shard(&b, 5461, 10922, -1, -1, 7002, ""); /* not known yet: the host asked */
    shard(&b, 0, 100, 101, 5460, 7001, "?");  /* unknown-endpoint: the host asked too */
    T_CHECK_INT(map_shards(pc_buf_cstr(&b), &m, err), 0);
    T_CHECK_INT(m.nnodes, 3);
    T_CHECK_INT(m.covered, CLUSTER_SLOTS);
    /* ordered by their first slot */
    T_CHECK_STR(m.nodes[0].host, "seed.local");
    T_CHECK_INT(m.nodes[0].port, 7001);
    T_CHECK_STR(m.nodes[1].host, "seed.local");
    T_CHECK_INT(m.nodes[1].port, 7002);
    T_CHECK_STR(m.nodes[2].host, "10.0.0.3");
    T_CHECK_INT(cluster_map_node(&m, 0)->port, 7001);
    T_CHECK_INT(cluster_map_node(&m, 5460)->port, 7001);
    T_CHECK_INT(cluster_map_node(&m, 5461)->port, 7002);
    T_CHECK_INT(cluster_map_node(&m, 16383)->port, 7003);
    T_CHECK(cluster_map_node(&m, CLUSTER_SLOTS) == NULL);
    cluster_map_free(&m);

    /* slots nobody serves are left without an owner */
    pc_buf_reset(&b);
    arr(&b, 1);
    shard(&b, 0, 99, -1, -1, 7001, "h1");
    T_CHECK_INT(map_shards(pc_buf_cstr(&b), &m, err), 0);
    T_CHECK_INT(m.covered, 100);
    T_CHECK(cluster_map_node(&m, 100) == NULL);
    cluster_map_free(&m);

    /* a shard whose primary failed (only a replica left): no owner, not an error */
    pc_buf_reset(&b);
    arr(&b, 1);
    arr(&b, 4);
    str(&b, "slots");
    arr(&b, 2);
    num(&b, 0);
    num(&b, 16383);
    str(&b, "nodes");
    arr(&b, 1);
    shard_node(&b, "10.0.0.9", 7009, "10.0.0.9", "replica");
    T_CHECK_INT(map_shards(pc_buf_cstr(&b), &m, err), 0);
    T_CHECK_INT(m.nnodes, 0);
    T_CHECK_INT(m.covered, 0);
    cluster_map_free(&m);
    pc_buf_free(&b);
}

/* Each of these is refused whole, with a message, and leaves nothing to free. */
static void test_map_shards_refused(void)
{
    struct pc_buf b = PC_BUF_INIT;
    struct cluster_map m = {0};
    char err[160];
    const char *cases[12];
    struct pc_buf bufs[12];
    size_t n = 0;
    for (size_t i = 0; i < PC_ARRAY_LEN(bufs); i++)
        bufs[i] = (struct pc_buf)PC_BUF_INIT;
    /* two primaries claim slot 100 */
    arr(&bufs[n], 2);
    shard(&bufs[n], 0, 100, -1, -1, 7001, "h1");
    shard(&bufs[n], 100, 200, -1, -1, 7002, "h2");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* a slot past 16383 */
    arr(&bufs[n], 1);
    shard(&bufs[n], 0, 16384, -1, -1, 7001, "h1");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* a range backwards */
    arr(&bufs[n], 1);
    shard(&bufs[n], 10, 5, -1, -1, 7001, "h1");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* port 0 */
    arr(&bufs[n], 1);
    shard(&bufs[n], 0, 1, -1, -1, 0, "h1");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* a host with a space */
    arr(&bufs[n], 1);
    shard(&bufs[n], 0, 1, -1, -1, 7001, "evil host");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* two primaries in one shard */
    arr(&bufs[n], 1);
    arr(&bufs[n], 4);
    str(&bufs[n], "slots");
    arr(&bufs[n], 2);
    num(&bufs[n], 0);
    num(&bufs[n], 1);
    str(&bufs[n], "nodes");
    arr(&bufs[n], 2);
    shard_node(&bufs[n], "10.0.0.1", 7001, "a", "master");
    shard_node(&bufs[n], "10.0.0.2", 7002, "b", "master");
    cases[n] = pc_buf_cstr(&bufs[n]), n++;
    /* slots as text, an odd slot list, no nodes, not an array at all */
    cases[n++] = "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n$1\r\n0\r\n$1\r\n1\r\n$5\r\nnodes\r\n*0\r\n";
    cases[n++] = "*1\r\n*4\r\n$5\r\nslots\r\n*1\r\n:0\r\n$5\r\nnodes\r\n*0\r\n";
    cases[n++] = "*1\r\n*2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n";
    cases[n++] = "$2\r\nno\r\n";
    for (size_t i = 0; i < n; i++) {
        err[0] = '\0';
        int rc = map_shards(cases[i], &m, err);
        if (rc != -1)
            fprintf(stderr, "  case %zu accepted\n", i);
        T_CHECK_INT(rc, -1);
        T_CHECK(err[0] != '\0');
        T_CHECK(m.nodes == NULL && m.nnodes == 0 && m.covered == 0);
        T_CHECK(cluster_map_node(&m, 0) == NULL);
    }
    for (size_t i = 0; i < PC_ARRAY_LEN(bufs); i++)
        pc_buf_free(&bufs[i]);
    pc_buf_free(&b);
}

static void test_map_slots(void)
{
    /* CLUSTER SLOTS (Redis before 7): [start, end, [ip, port, id], replicas...] */
    struct pc_buf b = PC_BUF_INIT;
    struct cluster_map m = {0};
    char err[160];
    arr(&b, 2);
    arr(&b, 4);
    num(&b, 8192);
    num(&b, 16383);
    arr(&b, 3);
    str(&b, "10.0.0.2");
    num(&b, 7002);
    str(&b, "id2");
    arr(&b, 3);
    str(&b, "10.0.0.9");
    num(&b, 7009);
    str(&b, "id9");
    arr(&b, 3);
    num(&b, 0);
    num(&b, 8191);
    arr(&b, 3);
    str(&b, ""); /* the node asked */
    num(&b, 7001);
    str(&b, "id1");
    redisReply *r = resp(pc_buf_cstr(&b));
    T_CHECK_INT(cluster_map_from_slots(r, "10.0.0.1", &m, err, sizeof(err)), 0);
    freeReplyObject(r);
    T_CHECK_INT(m.nnodes, 2);
    T_CHECK_INT(m.covered, CLUSTER_SLOTS);
    T_CHECK_STR(m.nodes[0].host, "10.0.0.1");
    T_CHECK_INT(cluster_map_node(&m, 8192)->port, 7002);
    cluster_map_free(&m);

    /* refused: a range past the end, a primary without a port */
    r = resp("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n");
    T_CHECK_INT(cluster_map_from_slots(r, "h", &m, err, sizeof(err)), -1);
    freeReplyObject(r);
    r = resp("*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\nh\r\n");
    T_CHECK_INT(cluster_map_from_slots(r, "h", &m, err, sizeof(err)), -1);
    freeReplyObject(r);
    T_CHECK(m.nnodes == 0);

    r = resp("-ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.\r\n");
    T_CHECK(cluster_shards_unknown(r));
    freeReplyObject(r);
    r = resp("-ERR This instance has cluster support disabled\r\n");
    T_CHECK(!cluster_shards_unknown(r));
    freeReplyObject(r);
    pc_buf_free(&b);
}

/* A migration's reply: [version, field, value...]; the fields go to pc:meta apart. */
static void test_migration_reply(void)
{
    struct migrate_meta mm;
    redisReply *r = resp("*5\r\n:2\r\n$11\r\nmigrated_at\r\n$3\r\n123\r\n$18\r\n"
                         "migrated_0002_keys\r\n$1\r\n0\r\n");
    T_CHECK(migrate_reply_applied(r));
    migrate_meta_from(r, &mm);
    T_CHECK_INT(mm.argc, 6);
    T_CHECK(mm.argc == 6 && strcmp(mm.argv[1], PC_META_KEY) == 0 &&
            strcmp(mm.argv[4], "migrated_0002_keys") == 0 && mm.lens[5] == 1);
    freeReplyObject(r);
    /* the reply of a build before: the version alone counts as applied, with nothing to record */
    r = resp(":2\r\n");
    T_CHECK(!migrate_reply_applied(r));
    freeReplyObject(r);
    r = resp("*1\r\n:2\r\n");
    T_CHECK(migrate_reply_applied(r));
    migrate_meta_from(r, &mm);
    T_CHECK_INT(mm.argc, 0);
    freeReplyObject(r);
    /* fields that do not make sense are not written */
    static const char *const bad[] = {
        "*2\r\n:2\r\n$1\r\na\r\n",           /* a field without its value */
        "*3\r\n:2\r\n$1\r\na\r\n:5\r\n",     /* a value that is no string */
        "*3\r\n:2\r\n$0\r\n\r\n$1\r\nv\r\n", /* an empty name */
        "*3\r\n:2\r\n$1\r\na\r\n$65\r\n"     /* a value too long */
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        r = resp(bad[i]);
        migrate_meta_from(r, &mm);
        T_CHECK_INT(mm.argc, 0);
        freeReplyObject(r);
    }
    struct pc_buf b = PC_BUF_INIT; /* too many fields */
    arr(&b, 1 + 2 * (MIGRATE_META_MAX + 1));
    num(&b, 2);
    for (int i = 0; i < 2 * (MIGRATE_META_MAX + 1); i++)
        str(&b, "x");
    r = resp(pc_buf_cstr(&b));
    migrate_meta_from(r, &mm);
    T_CHECK_INT(mm.argc, 0);
    freeReplyObject(r);
    pc_buf_free(&b);
}

int main(void)
{
    T_RUN(test_crc16_and_slots);
    T_RUN(test_key_index);
    T_RUN(test_redirects);
    T_RUN(test_map_shards);
    T_RUN(test_map_shards_refused);
    T_RUN(test_map_slots);
    T_RUN(test_migration_reply);
    T_DONE();
}
