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
 *     that rejects the pair alone, or GUARD__COUNT when none does;
 *   - every guard runs on the pair: after the first guard that rejects it,
 *     the guards after that one are asked, and so on (the chain of rejecting
 *     guards, each answer past the one before);
 *   - two guards picked by the input's hash answer alone as they did in the
 *     chain (themselves if they rejected there, GUARD__COUNT if not): a
 *     guard's answer does not depend on the guards around it.
 * Every guard_check tokenizes both texts again, so asking all 21 guards
 * alone per input (as this target first did) made it run about 50 inputs a
 * second; the chain and the sample run every guard on every input with a
 * third of the calls. Seed corpus: tests/fuzz/corpus/guard/.
 */
#include <stdint.h>
#include <stdlib.h>

#include "pc_guard.h"
#include "pc_util.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    if (all < GUARD__COUNT)
        CHECK(guard_check(a, alen, b, blen, GUARD_MASK(all)) == all);
    unsigned rejected = 0;
    for (int g = all; g < GUARD__COUNT;) {
        rejected |= GUARD_MASK(g);
        int next = guard_check(a, alen, b, blen, GUARD_ALL & ~((GUARD_MASK(g) << 1) - 1));
        CHECK(next > g && next <= GUARD__COUNT);
        g = next;
    }
    uint64_t h = pc_fnv1a(PC_FNV_SEED, data, size);
    for (int k = 0; k < 2; k++, h /= GUARD__COUNT) {
        int g = (int)(h % GUARD__COUNT);
        int want = (rejected & GUARD_MASK(g)) ? g : GUARD__COUNT;
        CHECK(guard_check(a, alen, b, blen, GUARD_MASK(g)) == want);
    }
    return 0;
}
