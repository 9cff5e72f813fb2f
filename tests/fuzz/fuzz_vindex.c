/*
 * fuzz_vindex.c - libFuzzer target for the vector index's partition store
 * (src/vindex.c): the bytes are a sequence of operations (add, replace,
 * move, remove, runs of either, expiry, tenant removal, generation sweeps,
 * clear, IVF builds, searches), run on a fresh index and on a brute-force
 * model by tests/fuzz/vindex_model.h, which says the byte format.
 *
 * Checked, aborting on violation: no memory error (ASan) or undefined
 * behaviour (UBSan) whatever the sequence, every return value and count as
 * the model says, every search answer equal to brute force (float codes) or
 * at least right in every hit (SQ8 codes). The same interpreter runs the
 * property test in tests/unit/test_vindex.c.
 * Seed corpus: tests/fuzz/corpus/vindex/ (issue 20's compaction-then-growth
 * sequence, IVF build and shrink, TTL churn with sweeps, tenant removal).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pc_log.h"
#include "vindex_model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * FAISS's block sizes for its BLAS distance computations (faiss/utils/
 * distances.h: faiss::distance_compute_blas_query_bs, _database_bs, 4096 and
 * 1024), by their C++ names. Every k-means iteration of an IVF build
 * allocates one block of query_bs x database_bs floats, 16 MB, whatever the
 * number of vectors; under ASan each one is mapped, its shadow poisoned and
 * quarantined on free, which took 85% of this target's time (46 inputs a
 * second). The index here holds at most 4096 vectors of dimension 8: blocks
 * of 256 x 256 cover them with the same answers.
 */
extern int _ZN5faiss30distance_compute_blas_query_bsE;
extern int _ZN5faiss33distance_compute_blas_database_bsE;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    _ZN5faiss30distance_compute_blas_query_bsE = 256;
    _ZN5faiss33distance_compute_blas_database_bsE = 256;
    return 0;
}

static void vm_fail(const char *what, unsigned long long got, unsigned long long want)
{
    fprintf(stderr, "fuzz_vindex: %s: got %llu, want %llu\n", what, got, want);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct vm m;
    static bool init;
    if (!init) {
        log_init(PC_LOG_ERROR, NULL, NULL, NULL, 0); /* FAISS build notices are not findings */
        init = true;
    }
    if (size > 1 + 9 * 512)
        return 0;               /* long enough: longer inputs only slow the search down */
    vm_run(&m, data, size, 61); /* a sample of the keys: IVF searches are the slow part */
    return 0;
}
