/*
 * test_tenants.c - tenant names (src/tenants.c): the file's forms and every
 * refusal with its line, lookups by id, learning a name from a key (and
 * from a fingerprint read back from Redis, checked), the /stats list.
 */
#include "pc_tenants.h"
#include "t.h"

#include <unistd.h>

static char path[64];

static struct tenants *load(const char *text, char *err, size_t errlen)
{
    snprintf(path, sizeof path, "/tmp/pc_tenants_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        exit(2);
    close(fd);
    err[0] = '\0';
    struct tenants *t = tenants_load(path, err, errlen);
    unlink(path);
    return t;
}

static void sha_hex(const char *s, char out[65])
{
    unsigned char d[PC_SHA256_LEN];
    pc_sha256(s, strlen(s), d);
    pc_hex(d, PC_SHA256_LEN, out);
    out[64] = '\0';
}

static void test_forms(void)
{
    char err[256], text[512], kb[65];
    sha_hex("sk-key-b-0123456789", kb);
    snprintf(text, sizeof text,
             "# comment\n\n0123456789abcdef   team a  \n...wxyz:1111111111111111 search (eu)\n"
             "\xe2\x80\xa6wxyz:2222222222222222 search (eu)\nsha256:%s billing/prod\n%.64s b2\n",
             kb, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    struct tenants *t = load(text, err, sizeof err);
    T_CHECK(t != NULL);
    if (t == NULL) {
        fprintf(stderr, "  %s\n", err);
        return;
    }
    T_CHECK_INT(tenants_count(t), 5);
    T_CHECK_STR(tenants_name(t, "0123456789abcdef"), "team a");
    T_CHECK_STR(tenants_name(t, "1111111111111111"), "search (eu)");
    T_CHECK_STR(tenants_name(t, "2222222222222222"), "search (eu)");
    T_CHECK(tenants_name(t, "3333333333333333") == NULL);
    T_CHECK(tenants_name(NULL, "0123456789abcdef") == NULL);

    /* a key named by its hash: learned on use, once; the fingerprint is the hash's start */
    char fp[17];
    T_CHECK(!tenants_note(t, "7777777777777777", "sk-long-key-abcdefgh", 20, fp));
    T_CHECK(tenants_name(t, "4444444444444444") == NULL);
    T_CHECK(!tenants_note(t, "4444444444444444", "sk-other", 8, fp));
    T_CHECK(tenants_note(t, "4444444444444444", "sk-key-b-0123456789", 19, fp));
    T_CHECK(strncmp(fp, kb, 16) == 0 && fp[16] == '\0');
    T_CHECK_STR(tenants_name(t, "4444444444444444"), "billing/prod");
    T_CHECK(!tenants_note(t, "4444444444444444", "sk-key-b-0123456789", 19, fp));

    /* ... or from a fingerprint another proxy recorded (checked first) */
    T_CHECK(tenants_learn_fp(t, "5555555555555555", 16, "aaaaaaaaaaaaaaaa", 16));
    T_CHECK_STR(tenants_name(t, "5555555555555555"), "b2");
    T_CHECK(!tenants_learn_fp(t, "5555", 4, "aaaaaaaaaaaaaaaa", 16));
    T_CHECK(!tenants_learn_fp(t, "6666666666666666", 16, "AAAAAAAAAAAAAAAA", 16));
    T_CHECK(tenants_learn_fp(t, "6666666666666666", 16, "0000000000000000", 16)); /* unnamed */
    T_CHECK(tenants_name(t, "6666666666666666") == NULL);

    /* /stats: the tenants seen, a long key's last 4 characters, never a short key's */
    T_CHECK(!tenants_note(t, "0123456789abcdef", "tiny", 4, fp));
    struct pc_buf b = PC_BUF_INIT;
    tenants_render_json(t, &b);
    T_CHECK_STR(pc_buf_cstr(&b),
                "\"tenants\":[{\"id\":\"7777777777777777\",\"key\":\"\xe2\x80\xa6"
                "efgh\",\"name\":null},{\"id\":\"4444444444444444\",\"key\":null,\"name\":"
                "\"billing/prod\"},{\"id\":\"0123456789abcdef\",\"key\":null,"
                "\"name\":\"team a\"}]");
    pc_buf_free(&b);
    struct tenants *r = tenants_ref(t);
    tenants_release(&t);
    T_CHECK(t == NULL && tenants_name(r, "0123456789abcdef") != NULL);
    tenants_release(&r);
    tenants_render_json(NULL, &b);
    T_CHECK_STR(pc_buf_cstr(&b), "\"tenants\":null");
    pc_buf_free(&b);
}

/*
 * A file naming many keys: every one is named when used, and every
 * fingerprint read back names its tenant (the learned list stopped at 1024,
 * so the others stayed unnamed in /metrics, the report and the dashboard,
 * and their fingerprints were never recorded).
 */
static void test_many_keys(void)
{
    enum { N = 3000 };
    struct pc_buf text = PC_BUF_INIT;
    char key[32], kh[65], id[17], fp[17];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "sk-many-keys-%06d", i);
        sha_hex(key, kh);
        pc_buf_printf(&text, "sha256:%s key %d\n", kh, i);
    }
    char err[256];
    struct tenants *t = load(pc_buf_cstr(&text), err, sizeof err);
    struct tenants *u = load(pc_buf_cstr(&text), err, sizeof err);
    T_CHECK(t != NULL && u != NULL && tenants_count(t) == N);
    int named = 0, learned = 0;
    for (int i = 0; t != NULL && u != NULL && i < N; i++) {
        char want[32];
        snprintf(key, sizeof key, "sk-many-keys-%06d", i);
        snprintf(id, sizeof id, "%016x", 0x10000000u + (unsigned)i);
        snprintf(want, sizeof want, "key %d", i);
        if (tenants_note(t, id, key, strlen(key), fp) && tenants_name(t, id) != NULL &&
            strcmp(tenants_name(t, id), want) == 0)
            named++;
        /* another process learns the same from the fingerprint recorded in Redis */
        if (tenants_learn_fp(u, id, 16, fp, 16) && tenants_name(u, id) != NULL &&
            strcmp(tenants_name(u, id), want) == 0)
            learned++;
    }
    T_CHECK(named == N);
    T_CHECK(learned == N);
    /* the same id again learns nothing new; an unknown id stays unnamed */
    T_CHECK(t == NULL || !tenants_note(t, "0000000010000000", "sk-many-keys-000000", 19, fp));
    T_CHECK(t == NULL || tenants_name(t, "00000000ffffffff") == NULL);
    /* a report's rows "-" and "(other)" are no ids: read as what they are (ASan: not past them) */
    char *dash = pc_strdup("-"), *other = pc_strdup("(other)");
    T_CHECK(t == NULL || (tenants_name(t, dash) == NULL && tenants_name(t, other) == NULL));
    free(dash);
    free(other);
    tenants_release(&t);
    tenants_release(&u);
    pc_buf_free(&text);
}

/*
 * A file near the size limit: 40,000 tenants, most with a name of their own
 * and every tenth one sharing one name. Every id resolves to its name. (The
 * names were interned by a linear search and the arrays grown one entry a
 * line: minutes to load under ASan.)
 */
static void test_many_names(void)
{
    enum { N = 40000 };
    struct pc_buf text = PC_BUF_INIT;
    for (int i = 0; i < N; i++)
        if (i % 10 == 0)
            pc_buf_printf(&text, "%016x shared\n", 0x20000000u + (unsigned)i);
        else
            pc_buf_printf(&text, "%016x n%05d\n", 0x20000000u + (unsigned)i, i);
    T_CHECK(text.len <= TENANTS_FILE_MAX);
    char err[256] = "";
    struct tenants *t = load(pc_buf_cstr(&text), err, sizeof err);
    T_CHECK(t != NULL && tenants_count(t) == N);
    int named = 0;
    const char *shared = NULL;
    bool one_copy = true;
    for (int i = 0; t != NULL && i < N; i++) {
        char id[17], want[16];
        snprintf(id, sizeof id, "%016x", 0x20000000u + (unsigned)i);
        snprintf(want, sizeof want, i % 10 == 0 ? "shared" : "n%05d", i);
        const char *name = tenants_name(t, id);
        if (name != NULL && strcmp(name, want) == 0)
            named++;
        if (i % 10 == 0 && name != NULL) {
            one_copy = one_copy && (shared == NULL || shared == name);
            shared = name;
        }
    }
    T_CHECK(named == N);
    T_CHECK(one_copy); /* a name given to many ids is held once */
    T_CHECK(t == NULL || tenants_name(t, "000000001fffffff") == NULL);
    tenants_release(&t);
    pc_buf_free(&text);
}

/*
 * One key's holder presenting it beside ever other headers (each mix a tenant id of its
 * own) learns at most LEARNED_PER_KEY names: the room of the other keys the file names
 * stays theirs. It was one pool for all keys, so two keys' holders could take it all,
 * and the third key's tenant stayed "other" in /metrics, the report and the dashboard.
 */
static void test_learned_per_key(void)
{
    const char *keys[] = {"sk-greedy-key-000000000", "sk-second-key-111111111",
                          "sk-quiet-key-2222222222"};
    struct pc_buf text = PC_BUF_INIT;
    for (size_t i = 0; i < PC_ARRAY_LEN(keys); i++) {
        char kh[65];
        sha_hex(keys[i], kh);
        pc_buf_printf(&text, "sha256:%s team %zu\n", kh, i);
    }
    char err[256], id[17], fp[17];
    struct tenants *t = load(pc_buf_cstr(&text), err, sizeof err);
    struct tenants *u = load(pc_buf_cstr(&text), err, sizeof err);
    T_CHECK(t != NULL && u != NULL);
    int greedy = 0, recorded = 0;
    for (unsigned i = 0; t != NULL && u != NULL && i < 20; i++) {
        snprintf(id, sizeof id, "%016x", 0x30000000u + i);
        if (tenants_note(t, id, keys[i % 2], strlen(keys[i % 2]), fp)) {
            greedy++;
            T_CHECK(tenants_learn_fp(u, id, 16, fp, 16));
        }
    }
    T_CHECK(greedy <= 8); /* 4 per key at most */
    snprintf(id, sizeof id, "%016x", 0x3fffffffu);
    T_CHECK(t == NULL || tenants_note(t, id, keys[2], strlen(keys[2]), fp));
    T_CHECK(t == NULL ||
            (tenants_name(t, id) != NULL && strcmp(tenants_name(t, id), "team 2") == 0));
    /* a process learning from Redis's fingerprints keeps the quiet key's room too */
    for (unsigned i = 0; u != NULL && i < 20; i++) {
        char other[17];
        snprintf(other, sizeof other, "%016x", 0x40000000u + i);
        char kfp[65];
        sha_hex(keys[i % 2], kfp);
        kfp[16] = '\0';
        recorded += tenants_learn_fp(u, other, 16, kfp, 16) && tenants_name(u, other) != NULL;
    }
    T_CHECK(recorded <= 8);
    T_CHECK(u == NULL || tenants_learn_fp(u, id, 16, fp, 16));
    T_CHECK(u == NULL ||
            (tenants_name(u, id) != NULL && strcmp(tenants_name(u, id), "team 2") == 0));
    tenants_release(&t);
    tenants_release(&u);
    pc_buf_free(&text);
}

static void test_refusals(void)
{
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"0123456789abcdef\n", ":1: a name must follow"},
        {"# x\n0123456789ABCDEF name\n", ":2: the identifier is a tenant id"},
        {"0123456789abcde name\n", ":1: the identifier"},
        {"sha256:abcd name\n", ":1: the identifier"},
        {"wxyz:0123456789abcdef name\n", ":1: a key hint is written"},
        {"0123456789abcdef other\n", ":1: \"other\" is the label"},
        {"0123456789abcdef a\"b\n", ":1: a name may hold only"},
        {"0123456789abcdef xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
         ":1: a name is 1 to 64"},
        {"0123456789abcdef a\n\n0123456789abcdef b\n", ":3: the identifier of line 1 again"},
    };
    for (size_t i = 0; i < PC_ARRAY_LEN(bad); i++) {
        char err[256];
        struct tenants *t = load(bad[i].text, err, sizeof err);
        T_CHECK(t == NULL);
        if (strstr(err, bad[i].says) == NULL || strncmp(err, path, strlen(path)) != 0)
            fprintf(stderr, "  case %zu: %s\n", i, err);
        T_CHECK(strstr(err, bad[i].says) != NULL);
        tenants_release(&t);
    }
    char err[256];
    T_CHECK(tenants_load("/nonexistent/tenants", err, sizeof err) == NULL);
    T_CHECK(strstr(err, "cannot read") != NULL);
    struct tenants *empty = load("", err, sizeof err);
    T_CHECK(empty != NULL && tenants_count(empty) == 0);
    struct tenants *same = load("", err, sizeof err);
    T_CHECK(tenants_same(empty, empty) && !tenants_same(empty, NULL));
    tenants_release(&empty);
    tenants_release(&same);
}

int main(void)
{
    T_RUN(test_forms);
    T_RUN(test_refusals);
    T_RUN(test_many_keys);
    T_RUN(test_learned_per_key);
    T_RUN(test_many_names);
    T_DONE();
}
