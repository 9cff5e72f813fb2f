/*
 * fuzz_embed.c - libFuzzer target for the embedders (src/embed.c,
 * src/embed/), the tokenizer (src/text.c) and the guards (src/guard.c).
 *
 * Input: byte 0 says where the rest is cut into two texts a and b (at
 * byte0/255 of its length). Checked, aborting on violation:
 *   - embed_text returns 0 with a finite unit vector, or -1 with zeros, and
 *     the same vector twice (hash always; builtin too when PC_WORDVEC names
 *     a vectors file, as `make fuzz-replay` and `make fuzz` do);
 *   - guard_check answers a guard or GUARD__COUNT, the same for (a, b) and
 *     (b, a), and GUARD__COUNT for (a, a).
 * Seed corpus: tests/fuzz/corpus/embed/.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pc_embed.h"
#include "pc_guard.h"
#include "pc_log.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct embedder *embedders[2];

static void setup(void)
{
    log_init(PC_LOG_ERROR, NULL, NULL, NULL, 0);
    struct embed_opts o;
    char err[256];
    embed_opts_default(&o, embed_id("hash"));
    embedders[0] = embed_create_opts(&o, err, sizeof err);
    const char *path = getenv("PC_WORDVEC");
    if (path != NULL && *path) {
        embed_opts_default(&o, embed_id("builtin"));
        o.vectors = path;
        embedders[1] = embed_create_opts(&o, err, sizeof err);
    }
    CHECK(embedders[0] != NULL);
}

static void check_embed(const struct embedder *e, const char *s, size_t n)
{
    static float v[EMBED_MAX_DIM], w[EMBED_MAX_DIM];
    int dim = embed_dim(e);
    int rc = embed_text(e, s, n, v);
    CHECK(rc == 0 || rc == -1);
    double sq = 0;
    for (int i = 0; i < dim; i++) {
        CHECK(isfinite(v[i]));
        sq += (double)v[i] * v[i];
    }
    CHECK(rc == 0 ? fabs(sq - 1.0) < 1e-3 : sq == 0);
    CHECK(embed_text(e, s, n, w) == rc);
    CHECK(memcmp(v, w, (size_t)dim * sizeof *v) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (embedders[0] == NULL)
        setup();
    if (size == 0)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1, cut = n * data[0] / 255;
    const char *a = s, *b = s + cut;
    size_t alen = cut, blen = n - cut;
    for (int k = 0; k < 2; k++) {
        if (embedders[k] == NULL)
            continue;
        check_embed(embedders[k], a, alen);
        check_embed(embedders[k], b, blen);
    }
    int ab = guard_check(a, alen, b, blen, GUARD_ALL);
    CHECK(ab >= 0 && ab <= GUARD__COUNT);
    CHECK(guard_check(b, blen, a, alen, GUARD_ALL) == ab);
    CHECK(guard_check(a, alen, a, alen, GUARD_ALL) == GUARD__COUNT);
    return 0;
}
