/*
 * fuzz_json_strict.c - libFuzzer target for pc_json_strict (src/util.c),
 * which holds a request body cJSON accepted to RFC 8259.
 *
 * Input: the text. Checked, aborting on violation: a refusal names a byte
 * inside the text; a text kept and accepted by cJSON prints (cJSON's own
 * output: escapes, %.15g or %.17g numbers, UTF-8 passed through) to a text
 * that is kept too, so a body the proxy accepts never has a form that it
 * would refuse. Reads stay inside the text (run under ASan).
 * Seed corpus: tests/fuzz/corpus/json_strict/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pc_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[256];
    const char *text = (const char *)data;
    if (!pc_json_strict(text, size, msg, sizeof(msg))) {
        const char *at = strstr(msg, " at byte ");
        if (at == NULL || strtoull(at + 9, NULL, 10) >= size)
            abort();
        return 0;
    }
    cJSON *tree = cJSON_ParseWithLength(text, size);
    if (tree == NULL)
        return 0;
    char *printed = cJSON_PrintUnformatted(tree);
    if (printed != NULL && memchr(text, '\0', size) == NULL &&
        !pc_json_strict(printed, strlen(printed), msg, sizeof(msg))) {
        fprintf(stderr, "printed form refused: %s\n", msg);
        abort();
    }
    cJSON_free(printed);
    cJSON_Delete(tree);
    return 0;
}
