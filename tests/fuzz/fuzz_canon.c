/*
 * fuzz_canon.c - libFuzzer target for canonical JSON, cache keys and request
 * validation (src/canon.c, src/api.c) over untrusted request bodies.
 *
 * Properties checked (abort on violation):
 *   - canonical output parses again as JSON;
 *   - canonicalisation is idempotent: canon(parse(canon(x))) == canon(x);
 *   - keys and last_user_text of the canonical body equal those of the
 *     original for every endpoint (canonicalising never changes a key).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pc_api.h"
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
    api_usage_from_response(e, body, &u);
    api_error_body(api_dialect_of(e), 400, cJSON_GetStringValue(body), &b);
    pc_buf_free(&b);
}

/* Keys of body and of its canonical form must agree on endpoint e. */
static void check_keys(enum api_endpoint e, const cJSON *body, const cJSON *canon)
{
    unsigned char tenant[PC_SHA256_LEN];
    canon_tenant("authorization=Bearer fuzz", tenant);
    struct canon_input a = {e, body, tenant, "ns", NULL, false};
    struct canon_input b = {e, canon, tenant, "ns", NULL, false};
    struct canon_keys ka, kb;
    canon_keys(&a, &ka);
    canon_keys(&b, &kb);
    if (memcmp(ka.exact, kb.exact, PC_SHA256_LEN) != 0)
        fail("exact key changed by canonicalisation");
    if (memcmp(ka.partition, kb.partition, PC_SHA256_LEN) != 0)
        fail("partition changed by canonicalisation");
    if (!same_text(ka.last_user_text, kb.last_user_text))
        fail("last_user_text changed by canonicalisation");
    canon_keys_free(&ka);
    canon_keys_free(&kb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *body = cJSON_ParseWithLength((const char *)data, size);
    if (body == NULL)
        return 0;
    struct pc_buf once = PC_BUF_INIT, twice = PC_BUF_INIT;
    canon_json(body, &once);
    cJSON *canon = cJSON_ParseWithLength(once.data, once.len);
    if (canon == NULL)
        fail("canonical output does not parse");
    canon_json(canon, &twice);
    if (once.len != twice.len || memcmp(once.data, twice.data, once.len) != 0)
        fail("canonicalisation is not idempotent");
    for (int e = API_NONE; e < API__COUNT; e++) {
        exercise_api((enum api_endpoint)e, body);
        check_keys((enum api_endpoint)e, body, canon);
    }
    pc_buf_free(&once);
    pc_buf_free(&twice);
    cJSON_Delete(canon);
    cJSON_Delete(body);
    return 0;
}
