/*
 * fuzz_canon.c - libFuzzer target for canonical JSON, cache keys, request
 * validation and answer shapes (src/canon.c, src/api.c) over untrusted bodies.
 *
 * Properties checked (abort on violation):
 *   - canonical output parses again as JSON;
 *   - canonicalisation is idempotent: canon(parse(canon(x))) == canon(x);
 *   - the text a tree was parsed from always pairs with it (canon_json_text
 *     succeeds), and the literal-keeping form is idempotent too;
 *   - keys and last_user_text of the canonical body equal those of the
 *     original for every endpoint (canonicalising never changes a key), both
 *     with the raw text and, when nothing was lossy, without it (a body naming a
 *     member twice has keys of its own: never those of its canonical form).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_api.h"
#include "pc_dialect.h"
#include "pc_canon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_canon: %s\n", what);
    abort();
}

static bool same_text(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

/* Everything api.c offers, for crash detection only. */
static void exercise_api(enum api_endpoint e, const cJSON *body)
{
    char msg[128];
    struct api_usage u;
    struct pc_buf b = PC_BUF_INIT;
    api_validate(e, body, msg, sizeof(msg));
    api_wants_stream(e, body);
    api_stream_include_usage(e, body);
    api_model(body);
    dialect_usage(e, body, &u);
    dialect_error_body(dialect_of(e), 400, cJSON_GetStringValue(body), &b);
    pc_buf_free(&b);
    const char *reason = NULL;
    int rc = api_answer_check(e, body, &reason);
    if (reason == NULL || (rc == 0) != (strcmp(reason, "ok") == 0))
        fail("api_answer_check verdict and reason disagree");
}

/* A text and the tree parsed from it. */
struct doc {
    const cJSON *tree;
    const char *raw; /* NULL: keys without the raw text */
    size_t len;
};

/* Keys of body and of its canonical form must agree on endpoint e. */
static void check_keys(enum api_endpoint e, struct doc body, struct doc canon)
{
    unsigned char tenant[PC_SHA256_LEN];
    canon_tenant("authorization=Bearer fuzz", tenant);
    struct canon_input a = {e, body.tree, tenant, "ns", NULL, false, body.raw, body.len};
    struct canon_input b = {e, canon.tree, tenant, "ns", NULL, false, canon.raw, canon.len};
    struct canon_keys ka, kb;
    canon_keys(&a, &ka);
    canon_keys(&b, &kb);
    if (body.raw != NULL && (ka.lossy || kb.lossy))
        fail("keys lossy although the raw text was given");
    if (kb.repeated)
        fail("a canonical body names a member twice");
    if (ka.lossy || kb.lossy || ka.repeated) { /* unique by design */
        canon_keys_free(&ka);
        canon_keys_free(&kb);
        return;
    }
    if (memcmp(ka.exact, kb.exact, PC_SHA256_LEN) != 0)
        fail("exact key changed by canonicalisation");
    if (memcmp(ka.partition, kb.partition, PC_SHA256_LEN) != 0)
        fail("partition changed by canonicalisation");
    if (!same_text(ka.last_user_text, kb.last_user_text))
        fail("last_user_text changed by canonicalisation");
    canon_keys_free(&ka);
    canon_keys_free(&kb);
}

static bool same_buf(const struct pc_buf *a, const struct pc_buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/*
 * The literal-keeping canonical text of body (raw: what it was parsed from)
 * parses, is idempotent, and yields the same keys as body. Returns nothing;
 * aborts on a violation.
 */
static void check_text_form(const cJSON *body, const char *raw, size_t len)
{
    struct pc_buf once = PC_BUF_INIT, twice = PC_BUF_INIT;
    if (canon_json_text(body, raw, len, &once) < 0)
        fail("the raw text of a parsed body does not pair with its tree");
    cJSON *canon = cJSON_ParseWithLength(once.data, once.len);
    if (canon == NULL)
        fail("literal-keeping canonical output does not parse");
    if (canon_json_text(canon, once.data, once.len, &twice) < 0 || !same_buf(&once, &twice))
        fail("literal-keeping canonicalisation is not idempotent");
    for (int e = API_NONE; e < API__COUNT; e++)
        check_keys((enum api_endpoint)e, (struct doc){body, raw, len},
                   (struct doc){canon, once.data, once.len});
    pc_buf_free(&once);
    pc_buf_free(&twice);
    cJSON_Delete(canon);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *end = NULL;
    cJSON *body = cJSON_ParseWithLengthOpts((const char *)data, size, &end, 0);
    if (body == NULL)
        return 0;
    struct pc_buf once = PC_BUF_INIT, twice = PC_BUF_INIT;
    canon_json(body, &once);
    cJSON *canon = cJSON_ParseWithLength(once.data, once.len);
    if (canon == NULL)
        fail("canonical output does not parse");
    canon_json(canon, &twice);
    if (!same_buf(&once, &twice))
        fail("canonicalisation is not idempotent");
    for (int e = API_NONE; e < API__COUNT; e++) {
        exercise_api((enum api_endpoint)e, body);
        check_keys((enum api_endpoint)e, (struct doc){body, NULL, 0}, (struct doc){canon, NULL, 0});
    }
    check_text_form(body, (const char *)data, (size_t)(end - (const char *)data));
    pc_buf_free(&once);
    pc_buf_free(&twice);
    cJSON_Delete(canon);
    cJSON_Delete(body);
    return 0;
}
