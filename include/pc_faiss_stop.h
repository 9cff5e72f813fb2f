/*
 * pc_faiss_stop.h - stopping a long FAISS computation (k-means training, the
 * fill of a new IVF) from C, so that a shutdown does not wait for it.
 *
 * FAISS polls a process-wide interrupt callback between blocks of its work
 * (each k-means iteration, each block of queries of a brute-force
 * assignment) and throws when it says so; the C API functions then return an
 * error code. That callback is not in FAISS's C API: src/faiss_stop.cc sets
 * it, whichever FAISS C API the build links.
 *
 * faiss_stop_install() sets the callback once per process. It must run before
 * any other thread calls FAISS (FAISS reads the callback's pointer without a
 * lock): vindex_create calls it before its thread starts, and every FAISS
 * call of the process is made on a vindex's data.
 *
 * faiss_stop_watch(fn, arg): from now on, FAISS computations on the calling
 * thread stop (fail) once fn(arg) returns true; fn is called from that thread
 * only, between blocks, and must be cheap (an atomic load). NULL: never
 * (the default of every thread). Other threads' computations never stop.
 */
#ifndef PC_FAISS_STOP_H
#define PC_FAISS_STOP_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef bool faiss_stop_fn(void *arg);

void faiss_stop_install(void);
void faiss_stop_watch(faiss_stop_fn *fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
