/*
 * fuzz_cluster.c - libFuzzer target for what a Redis Cluster node sends the
 * proxy (src/cluster.c): redirections (MOVED, ASK...) and slot maps
 * (CLUSTER SHARDS, CLUSTER SLOTS). A node can be wrong or hostile.
 *
 * Input: RESP bytes, parsed by hiredis' reader into replies (as a
 * connection would), each handed to the redirect parser and to both map
 * parsers; and the raw bytes to the redirect parser as an error's text.
 * Checked, aborting on violation:
 *   - nothing reads past the input or a reply (ASan);
 *   - a MOVED / ASK that parses has a slot < 16384, a port in 1-65535 and a
 *     host of allowed bytes;
 *   - a map either is refused with a message and holds nothing, or every
 *     slot's owner is one of its nodes, covered counts the owned slots, every
 *     node owns a slot, has a host and a port, and nodes are ordered by the
 *     first slot they own.
 * Seed corpus: tests/fuzz/corpus/cluster/ (replies of a real Redis 7, and
 * near misses).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "pc_cluster.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_redirect(const struct cluster_redirect *r)
{
    if (r->kind != CLUSTER_MOVED && r->kind != CLUSTER_ASK)
        return;
    CHECK(r->slot < CLUSTER_SLOTS && r->port >= 1 && r->port <= 65535);
    for (const char *p = r->host; *p; p++)
        CHECK(isalnum((unsigned char)*p) || strchr(".-_:%", *p) != NULL);
}

static void check_map(int rc, const struct cluster_map *m, const char *err)
{
    if (rc < 0) {
        CHECK(err[0] != '\0' && m->nodes == NULL && m->nnodes == 0 && m->covered == 0);
        return;
    }
    size_t covered = 0, *owns = calloc(m->nnodes ? m->nnodes : 1, sizeof(*owns));
    unsigned *first = calloc(m->nnodes ? m->nnodes : 1, sizeof(*first));
    for (unsigned s = 0; s < CLUSTER_SLOTS; s++) {
        uint16_t o = m->owner[s];
        if (o == CLUSTER_NO_OWNER)
            continue;
        CHECK(o < m->nnodes && cluster_map_node(m, s) == &m->nodes[o]);
        if (owns[o]++ == 0)
            first[o] = s;
        covered++;
    }
    CHECK(covered == m->covered);
    for (size_t i = 0; i < m->nnodes; i++) {
        CHECK(owns[i] > 0 && m->nodes[i].host[0] != '\0');
        CHECK(m->nodes[i].port >= 1 && m->nodes[i].port <= 65535);
        CHECK(i == 0 || first[i] > first[i - 1]);
    }
    free(owns);
    free(first);
}

static void check_reply(const redisReply *r)
{
    struct cluster_redirect red;
    struct cluster_map *m = calloc(1, sizeof(*m));
    char err[160] = "";
    cluster_reply_redirect(r, &red);
    check_redirect(&red);
    check_map(cluster_map_from_shards(r, "asked.host", m, err, sizeof(err)), m, err);
    cluster_map_free(m);
    err[0] = '\0';
    check_map(cluster_map_from_slots(r, "asked.host", m, err, sizeof(err)), m, err);
    cluster_map_free(m);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cluster_redirect red;
    cluster_redirect_parse((const char *)data, size, &red);
    check_redirect(&red);
    redisReader *rd = redisReaderCreate();
    redisReaderFeed(rd, (const char *)data, size);
    for (int i = 0; i < 16; i++) {
        void *reply = NULL;
        if (redisReaderGetReply(rd, &reply) != REDIS_OK || reply == NULL)
            break;
        check_reply(reply);
        freeReplyObject(reply);
    }
    redisReaderFree(rd);
    return 0;
}
