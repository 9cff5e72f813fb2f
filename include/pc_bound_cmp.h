/*
 * pc_bound_cmp.h - how the semantic error bound compares a cached answer with
 * the fresh one (semantic-verify-answers): the enum and its config names, in
 * one order. Apart from pc_bound.h so that the configuration can name the
 * values without depending on the bound (nothing here but the list).
 */
#ifndef PC_BOUND_CMP_H
#define PC_BOUND_CMP_H

enum bound_comparator { BOUND_CMP_EXACT = 0, BOUND_CMP_EMBEDDING, BOUND_CMP_MODEL };
#define BOUND_CMP_NAMES                     \
    {                                       \
        "exact", "embedding", "model", NULL \
    }

#endif
