/*
 * fuzz_guard.c - libFuzzer target for the semantic guards alone
 * (src/guard.c, and the tokenizer under it): each guard on its own next to
 * all of them, which fuzz_embed does not check. Long seeds (past
 * EMBED_MAX_TEXT, the length the guards read) are in the corpus; run with
 * -max_len=20000 to keep making them.
 *
 * Input: byte 0 says where the rest is cut into two texts a and b (at
 * byte0/255 of its length), as fuzz_embed. Checked, aborting on violation:
 *   - guard_check answers a guard or GUARD__COUNT, the same for (a, b) and
 *     (b, a), and GUARD__COUNT for (a, a);
 *   - with every guard on, the answer is the first guard (in enum order)
 *     that rejects the pair alone, or GUARD__COUNT when none does: a
 *     guard's answer does not depend on the guards around it;
 *   - a guard alone answers itself or GUARD__COUNT.
 * Seed corpus: tests/fuzz/corpus/guard/.
 */
#include <stdint.h>
#include <stdlib.h>

#include "pc_guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)  \
    do {             \
        if (!(cond)) \
            abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1, cut = n * data[0] / 255;
    const char *a = s, *b = s + cut;
    size_t alen = cut, blen = n - cut;
    int all = guard_check(a, alen, b, blen, GUARD_ALL);
    CHECK(all >= 0 && all <= GUARD__COUNT);
    CHECK(guard_check(b, blen, a, alen, GUARD_ALL) == all);
    CHECK(guard_check(a, alen, a, alen, GUARD_ALL) == GUARD__COUNT);
    int first = GUARD__COUNT;
    for (int g = 0; g < GUARD__COUNT; g++) {
        int one = guard_check(a, alen, b, blen, GUARD_MASK(g));
        CHECK(one == g || one == GUARD__COUNT);
        if (one == g && first == GUARD__COUNT)
            first = g;
    }
    CHECK(first == all);
    return 0;
}
