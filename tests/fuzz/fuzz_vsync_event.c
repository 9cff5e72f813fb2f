/*
 * fuzz_vsync_event.c - libFuzzer target for the events of the Redis stream
 * pc:2:vs as its readers get them (vsync_event_parse, src/vsync.c): any
 * writer of the shared Redis can put anything there.
 *
 * Input: bytes in Redis's wire format (RESP), read by hiredis's own reader
 * as a reply arrives from Redis; each complete reply, and each array in it,
 * is parsed as an entry's field/value array. Checked, aborting on violation:
 *   - parsing never reads past the reply (ASan) and takes any shape of reply;
 *   - an accepted event is within the documented limits: a known op, a key
 *     exactly when the op names an entry (and then its k field is the id
 *     that key and tenant print as), a record of 1..VREC_MAX_LEN bytes only
 *     for add, an instance of VSYNC_INSTANCE_LEN lower-case hex or none;
 *   - a stream id that parses is decimal digits, a '-' and decimal digits.
 * Seed corpus: tests/fuzz/corpus/vsync_event/ (each op, and near misses).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "pc_vrec.h"
#include "pc_vsync.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* The value of the field named name (the last one: the parser accepts only one). */
static const redisReply *field(const redisReply *kv, const char *name)
{
    const redisReply *v = NULL;
    for (size_t i = 0; i + 1 < kv->elements; i += 2)
        if (kv->element[i]->type == REDIS_REPLY_STRING && kv->element[i]->len == strlen(name) &&
            memcmp(kv->element[i]->str, name, kv->element[i]->len) == 0)
            v = kv->element[i + 1];
    return v;
}

static void check_event(const redisReply *kv)
{
    struct vsync_event ev;
    if (vsync_event_parse(kv, &ev) < 0)
        return;
    CHECK(ev.op == VSYNC_OP_ADD || ev.op == VSYNC_OP_DEL || ev.op == VSYNC_OP_FLUSH ||
          ev.op == VSYNC_OP_SET);
    CHECK(ev.has_key == (ev.op != VSYNC_OP_FLUSH));
    CHECK(!ev.has_tenant || ev.op == VSYNC_OP_FLUSH);
    if (ev.has_key) {
        char id[VSYNC_ID_LEN + 1];
        vsync_id(ev.tenant, ev.key, id);
        const redisReply *k = field(kv, "k");
        CHECK(k != NULL && k->len == VSYNC_ID_LEN && memcmp(k->str, id, VSYNC_ID_LEN) == 0);
    }
    if (ev.op == VSYNC_OP_ADD)
        CHECK(ev.rec != NULL && ev.rec_len >= 1 && ev.rec_len <= VREC_MAX_LEN);
    else
        CHECK(ev.rec == NULL && ev.rec_len == 0);
    size_t il = strlen(ev.instance);
    CHECK(il == 0 || (il == VSYNC_INSTANCE_LEN && lower_hex(ev.instance, il)));
}

/* Every array of the reply, at any depth, as an event. */
static void walk(const redisReply *r, int depth)
{
    check_event(r);
    if (r->type != REDIS_REPLY_ARRAY || depth > 8)
        return;
    for (size_t i = 0; i < r->elements; i++)
        walk(r->element[i], depth + 1);
}

static void check_stream_id(const uint8_t *data, size_t size)
{
    uint64_t ms, seq;
    size_t n = size < 48 ? size : 48;
    if (vsync_parse_stream_id((const char *)data, n, &ms, &seq) < 0)
        return;
    size_t dash = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK((data[i] >= '0' && data[i] <= '9') || (data[i] == '-' && dash == 0));
        if (data[i] == '-')
            dash = i;
    }
    CHECK(dash > 0 && dash + 1 < n);
}

/*
 * Whether a length or count in the input ("*N", "$N") is beyond what a test
 * needs: hiredis 0.14 allocates what a header announces before the data
 * comes (Redis itself never sends such an entry; the reader is not what is
 * tested here).
 */
static bool huge_header(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i + 1 < size; i++) {
        if (data[i] != '*' && data[i] != '$')
            continue;
        uint64_t n = 0;
        for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9' && n <= 65536; j++)
            n = n * 10 + (data[j] - '0');
        if (n > 65536)
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_stream_id(data, size);
    if (huge_header(data, size))
        return 0;
    redisReader *rd = redisReaderCreate();
    if (rd == NULL || redisReaderFeed(rd, (const char *)data, size) != REDIS_OK) {
        redisReaderFree(rd);
        return 0;
    }
    for (int i = 0; i < 16; i++) {
        void *reply = NULL;
        if (redisReaderGetReply(rd, &reply) != REDIS_OK || reply == NULL)
            break;
        walk(reply, 0);
        freeReplyObject(reply);
    }
    redisReaderFree(rd);
    return 0;
}
