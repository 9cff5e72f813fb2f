/*
 * faiss_stop.cc - FAISS's interrupt callback, asked per thread (see
 * include/pc_faiss_stop.h). Compiled whichever FAISS C API is linked: the C
 * API has no interrupt callback, so this is the one place C++ reaches FAISS
 * directly besides the shim (src/faiss_c.cc).
 */
#include "pc_faiss_stop.h"

#include <faiss/impl/AuxIndexStructures.h>

#include <memory>
#include <mutex>

namespace
{

/* What the calling thread's computations stop on; none by default. */
thread_local faiss_stop_fn *watch_fn;
thread_local void *watch_arg;

/*
 * FAISS calls want_interrupt() under its own lock, from the thread running
 * the computation (is_interrupted() from inside a search, check() between
 * blocks): the thread-local watch is that thread's.
 */
struct per_thread_stop : faiss::InterruptCallback {
    bool want_interrupt() override
    {
        return watch_fn != nullptr && watch_fn(watch_arg);
    }
};

std::once_flag installed;

} // namespace

extern "C" void faiss_stop_install(void)
{
    std::call_once(installed, [] {
        std::lock_guard<std::mutex> guard(faiss::InterruptCallback::lock);
        faiss::InterruptCallback::instance.reset(new per_thread_stop());
    });
}

extern "C" void faiss_stop_watch(faiss_stop_fn *fn, void *arg)
{
    watch_fn = fn;
    watch_arg = arg;
}
