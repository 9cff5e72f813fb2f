/*
 * fuzz_rurl.c - libFuzzer target for the Redis URL grammar (src/rurl.c),
 * which reads the redis key of the config, the command line and the
 * environment.
 *
 * Input: any bytes, taken as a URL up to the first NUL. Checked, aborting on
 * violation:
 *   - parsing never reads past the input (ASan) and either fails with a
 *     message or yields a URL within the documented limits;
 *   - a parsed URL's canonical text with its secrets parses again to the
 *     same URL, and its text without secrets parses again to the same
 *     servers, master and database with no credentials at all.
 * Seed corpus: tests/fuzz/corpus/rurl/ (each form, and near misses).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_rurl.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool str_eq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The same servers, master and database (credentials aside). */
static void check_same_place(const struct rurl *a, const struct rurl *b)
{
    CHECK(a->kind == b->kind && a->db == b->db && a->nsentinels == b->nsentinels);
    CHECK(str_eq(a->tcp.host, b->tcp.host) && a->tcp.port == b->tcp.port);
    CHECK(str_eq(a->unix_path, b->unix_path) && str_eq(a->master, b->master));
    for (size_t i = 0; i < a->nsentinels; i++)
        CHECK(str_eq(a->sentinels[i].host, b->sentinels[i].host) &&
              a->sentinels[i].port == b->sentinels[i].port);
    CHECK(a->nseeds == b->nseeds);
    for (size_t i = 0; i < a->nseeds; i++)
        CHECK(str_eq(a->seeds[i].host, b->seeds[i].host) && a->seeds[i].port == b->seeds[i].port);
}

static void check_limits(const struct rurl *u)
{
    CHECK(u->db >= 0);
    if (u->kind == RURL_TCP)
        CHECK(u->tcp.host != NULL && u->tcp.port >= 1 && u->tcp.port <= 65535);
    if (u->kind == RURL_UNIX)
        CHECK(u->unix_path != NULL && u->unix_path[0] == '/');
    if (u->kind == RURL_SENTINEL)
        CHECK(u->nsentinels >= 1 && u->nsentinels <= RURL_SENTINELS_MAX && u->master != NULL &&
              u->master[0] != '\0');
    if (u->kind == RURL_CLUSTER) /* seeds, database 0 only */
        CHECK(u->nseeds >= 1 && u->nseeds <= RURL_SEEDS_MAX && u->db == 0 && u->nsentinels == 0);
    for (size_t i = 0; i < u->nseeds; i++)
        CHECK(u->seeds[i].host != NULL && u->seeds[i].port >= 1 && u->seeds[i].port <= 65535);
    CHECK(u->sentinel_user == NULL || u->sentinel_password != NULL);
}

static void check_round_trip(const struct rurl *u, unsigned flags)
{
    char err[192];
    struct rurl again, bare;
    char *with = rurl_format(u, true), *without = rurl_format(u, false);
    CHECK(rurl_parse(with, flags, &again, err, sizeof(err)) == 0);
    check_same_place(u, &again);
    CHECK(str_eq(u->user, again.user) && str_eq(u->password, again.password));
    CHECK(str_eq(u->sentinel_user, again.sentinel_user) &&
          str_eq(u->sentinel_password, again.sentinel_password));
    CHECK(rurl_parse(without, 0, &bare, err, sizeof(err)) == 0);
    check_same_place(u, &bare);
    CHECK(bare.user == NULL && bare.password == NULL && bare.sentinel_password == NULL);
    rurl_free(&again);
    rurl_free(&bare);
    free(with);
    free(without);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    memcpy(url, data, size);
    url[size] = '\0';
    static const unsigned flags[] = {0, RURL_USER_ALONE};
    for (size_t i = 0; i < 2; i++) {
        struct rurl u;
        char err[192] = "";
        if (rurl_parse(url, flags[i], &u, err, sizeof(err)) < 0) {
            CHECK(err[0] != '\0');
            continue;
        }
        check_limits(&u);
        check_round_trip(&u, flags[i]);
        rurl_free(&u);
    }
    free(url);
    return 0;
}
