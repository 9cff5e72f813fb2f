/*
 * model.c - model names as the counters write them (see pc_model.h). Owns
 * nothing: two pure functions over the one character set.
 */
#include "pc_model.h"

#include <string.h>

static bool model_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("._:/@+-", c) != NULL);
}

void model_clean(const char *model, char out[MODEL_NAME_MAX + 1])
{
    size_t n = 0;
    for (; model != NULL && model[n] != '\0' && n < MODEL_NAME_MAX; n++)
        out[n] = model_char(model[n]) ? model[n] : '_';
    if (n == 0)
        out[n++] = '-';
    out[n] = '\0';
}

bool model_valid(const char *s, size_t n)
{
    if (n == 0 || n > MODEL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!model_char(s[i]))
            return false;
    return true;
}
