/*
 * jskim_agree.h - the comparison of jskim_parse with cJSON_ParseWithLength
 * shared by tests/unit/test_jskim.c and tests/fuzz/fuzz_jskim.c.
 */
#ifndef PC_JSKIM_AGREE_H
#define PC_JSKIM_AGREE_H

#include <stdbool.h>
#include <string.h>

#include "pc_api.h"
#include "pc_dialect.h"
#include "pc_jskim.h"

/*
 * Whether skim is full cut at depth cut (both nodes at depth d). Strings are
 * compared as C strings, as cJSON keeps them: bytes after a U+0000 from a
 * \u0000 escape are not seen by anyone reading the tree.
 */
static bool jskim_same_cut(const cJSON *full, const cJSON *skim, unsigned d, unsigned cut)
{
    if ((full->type & 0xFF) != (skim->type & 0xFF))
        return false;
    if ((full->string == NULL) != (skim->string == NULL) ||
        (full->string != NULL && strcmp(full->string, skim->string) != 0))
        return false;
    if (cJSON_IsNumber(full))
        return memcmp(&full->valuedouble, &skim->valuedouble, sizeof(double)) == 0 &&
               full->valueint == skim->valueint;
    if (cJSON_IsTrue(full) || cJSON_IsFalse(full) || cJSON_IsNull(full))
        return full->valueint == skim->valueint;
    if (cJSON_IsString(full))
        return strcmp(d < cut ? full->valuestring : "", skim->valuestring) == 0;
    const cJSON *a = full->child, *b = skim->child;
    if (d >= cut)
        return b == NULL;
    for (; a != NULL && b != NULL; a = a->next, b = b->next)
        if (!jskim_same_cut(a, b, d + 1, cut))
            return false;
    return a == NULL && b == NULL;
}

/*
 * NULL if both parsers agree on text at cut depth cut (full: cJSON's tree of
 * it, or NULL if cJSON refused it), else what differs. At API_ANSWER_DEPTH,
 * every endpoint's shape verdict and usage are compared too.
 */
static const char *jskim_disagree(const cJSON *full, const char *text, size_t len, unsigned cut)
{
    cJSON *skim = jskim_parse(text, len, cut);
    const char *why = NULL;
    if ((full == NULL) != (skim == NULL))
        why = full == NULL ? "accepted by the skim only" : "refused by the skim only";
    else if (full != NULL && !jskim_same_cut(full, skim, 0, cut))
        why = "tree";
    for (int e = API_NONE + 1;
         why == NULL && full != NULL && cut == API_ANSWER_DEPTH && e < API__COUNT; e++) {
        struct api_usage a, b;
        dialect_usage((enum api_endpoint)e, full, &a);
        dialect_usage((enum api_endpoint)e, skim, &b);
        if (api_answer_check((enum api_endpoint)e, full, NULL) !=
            api_answer_check((enum api_endpoint)e, skim, NULL))
            why = "shape verdict";
        else if (a.present != b.present || a.prompt != b.prompt || a.completion != b.completion ||
                 a.cached != b.cached || a.cache_write != b.cache_write)
            why = "usage";
    }
    cJSON_Delete(skim);
    return why;
}

#endif
