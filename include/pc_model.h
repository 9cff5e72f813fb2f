/*
 * pc_model.h - a model's name as the proxy's counters write it: the
 * request's model with characters outside [A-Za-z0-9._:/@+-] replaced by
 * '_', at most MODEL_NAME_MAX bytes, "-" when there is none. A leaf: the
 * metrics, the hourly counters, the price list and the fetch all name models
 * this way, and none of them needs the others for it.
 */
#ifndef PC_MODEL_H
#define PC_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#define MODEL_NAME_MAX 64

/* The model as counters name it (see above); NULL or "" becomes "-". */
void model_clean(const char *model, char out[MODEL_NAME_MAX + 1]);
/* Whether s[0..n) is a name model_clean can write (not "", at most MODEL_NAME_MAX). */
bool model_valid(const char *s, size_t n);

#endif
