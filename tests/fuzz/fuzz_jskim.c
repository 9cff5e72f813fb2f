/*
 * fuzz_jskim.c - libFuzzer target for the skimming JSON parser
 * (jskim_parse, src/jskim.c), which reads upstream answers.
 *
 * Input: byte 0 picks the cut depth (0 to 5); the rest is the text. Checked,
 * aborting on violation: the skim accepts the text exactly when
 * cJSON_ParseWithLength does, its tree is cJSON's cut at that depth, and at
 * API_ANSWER_DEPTH every endpoint's shape verdict and usage are the same.
 * Seed corpus: tests/fuzz/corpus/jskim/.
 */
#include <stdint.h>
#include <stdlib.h>

#include "jskim_agree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1;
    cJSON *full = cJSON_ParseWithLength(text, size - 1);
    if (jskim_disagree(full, text, size - 1, data[0] % 6) != NULL)
        abort();
    cJSON_Delete(full);
    return 0;
}
