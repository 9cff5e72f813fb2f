/*
 * test_memo.c - the memo of request bodies: an entry answers only the exact
 * input it was stored for (each field, NULL against "", every byte), bodies
 * over the size limit are never kept, and the byte budget holds however many
 * bodies come.
 */
#include "t.h"

#include "pc_memo.h"

static const unsigned char tenant_a[PC_SHA256_LEN] = {1, 2, 3};
static const unsigned char tenant_b[PC_SHA256_LEN] = {1, 2, 4};

static struct memo_input input(const char *raw)
{
    return (struct memo_input){
        .endpoint = API_CHAT,
        .exact_only = true,
        .tenant = tenant_a,
        .ns = NULL,
        .variant = "openai-organization=org-1\n",
        .raw = raw,
        .raw_len = strlen(raw),
    };
}

static struct memo_facts facts(unsigned char tag, const char *model, const char *text)
{
    struct memo_facts f = {.stream = tag & 1, .include_usage = tag & 2};
    memset(f.exact, tag, PC_SHA256_LEN);
    memset(f.partition, tag ^ 0xff, PC_SHA256_LEN);
    f.model = model;
    f.last_user_text = text;
    return f;
}

static void test_round_trip(void)
{
    struct memo *m = memo_create();
    char body[] = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    struct memo_input in = input(body);
    T_CHECK(memo_get(m, &in, memo_hash(&in)) == NULL);
    struct memo_facts f = facts(3, "m", "hi");
    memo_put(m, &in, memo_hash(&in), &f);
    /* A copy was kept: the caller's buffers may change. */
    char model[] = "m";
    f.model = model;
    model[0] = 'x';
    const struct memo_facts *got = memo_get(m, &in, memo_hash(&in));
    T_CHECK(got != NULL);
    if (got != NULL) {
        T_CHECK(got->stream && got->include_usage);
        T_CHECK(memcmp(got->exact, f.exact, PC_SHA256_LEN) == 0);
        T_CHECK(memcmp(got->partition, f.partition, PC_SHA256_LEN) == 0);
        T_CHECK_STR(got->model, "m");
        T_CHECK_STR(got->last_user_text, "hi");
    }
    T_CHECK_INT(memo_count(m), 1);
    T_CHECK(memo_bytes(m) > sizeof(body));
    /* Stored again: replaced, not doubled. */
    struct memo_facts g = facts(4, NULL, NULL);
    memo_put(m, &in, memo_hash(&in), &g);
    got = memo_get(m, &in, memo_hash(&in));
    T_CHECK(got != NULL && got->model == NULL && got->last_user_text == NULL && !got->stream);
    T_CHECK_INT(memo_count(m), 1);
    memo_destroy(&m);
    T_CHECK(m == NULL);
}

static void test_every_input_counts(void)
{
    struct memo *m = memo_create();
    const char *body = "{\"model\":\"m\",\"messages\":[]}";
    struct memo_input in = input(body);
    struct memo_facts f = facts(1, "m", NULL);
    memo_put(m, &in, memo_hash(&in), &f);

    struct memo_input o = in;
    o.endpoint = API_COMPLETIONS;
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.exact_only = false;
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.tenant = tenant_b;
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.ns = "team";
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.ns = ""; /* an empty namespace header is not no header */
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.variant = NULL;
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.variant = "openai-organization=org-2\n";
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    /* The same body bytes at another address match; one byte more or changed does not. */
    char copy[64];
    snprintf(copy, sizeof(copy), "%s", body);
    o = in;
    o.raw = copy;
    T_CHECK(memo_get(m, &o, memo_hash(&o)) != NULL);
    copy[strlen(copy) - 2] = '1';
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    snprintf(copy, sizeof(copy), "%s ", body);
    o.raw_len = strlen(copy);
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    o = in;
    o.raw_len--; /* a prefix of the stored body */
    T_CHECK(memo_get(m, &o, memo_hash(&o)) == NULL);
    memo_destroy(&m);
}

static void test_big_bodies_skipped(void)
{
    struct memo *m = memo_create();
    size_t n = MEMO_MAX_BODY + 1;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    struct memo_input in = input(big);
    struct memo_facts f = facts(1, NULL, NULL);
    memo_put(m, &in, memo_hash(&in), &f);
    T_CHECK(memo_get(m, &in, memo_hash(&in)) == NULL);
    T_CHECK_INT(memo_count(m), 0);
    /* Exactly the limit is kept. */
    in.raw_len = MEMO_MAX_BODY;
    memo_put(m, &in, memo_hash(&in), &f);
    T_CHECK(memo_get(m, &in, memo_hash(&in)) != NULL);
    free(big);
    memo_destroy(&m);
}

static void test_budget(void)
{
    struct memo *m = memo_create();
    size_t n = 60 * 1024;
    char *body = malloc(n + 1);
    struct memo_facts f = facts(1, "m", NULL);
    /* 1,000 bodies of 60 KiB: 60 MB offered to an 8 MiB budget. */
    for (int i = 0; i < 1000; i++) {
        memset(body, 'a' + i % 26, n);
        snprintf(body, n, "%d-", i);
        body[strlen(body)] = '-';
        body[n] = '\0';
        struct memo_input in = input(body);
        memo_put(m, &in, memo_hash(&in), &f);
        T_CHECK(memo_bytes(m) <= MEMO_MAX_BYTES);
        T_CHECK(memo_get(m, &in, memo_hash(&in)) != NULL); /* the newest is always kept */
    }
    T_CHECK(memo_count(m) > 100);
    T_CHECK(memo_bytes(m) > MEMO_MAX_BYTES / 2);
    free(body);
    memo_destroy(&m);
}

int main(void)
{
    T_RUN(test_round_trip);
    T_RUN(test_every_input_counts);
    T_RUN(test_big_bodies_skipped);
    T_RUN(test_budget);
    T_DONE();
}
