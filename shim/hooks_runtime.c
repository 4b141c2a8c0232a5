/* Runtime-level hooks: cudaMalloc, cudaFree, cudaMemGetInfo, cudaDeviceReset and the driver
 * entry-point queries, for programs that use the shared libcudart. (A statically linked cudart
 * never calls these: it is served by the driver hooks, which it reaches through cuGetProcAddress.)
 *
 * Allocations are served straight from the core, skipping cudart. Errors must look exactly like
 * the real call's, including cudaGetLastError's state afterwards, which only cudart can set: so on
 * failure the hook calls the real cudart function, having told its own driver hook (through the
 * thread's force_result) to return the failure the program must see. A success leaves cudart's
 * error state untouched, as a real successful call does.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "shim/shim.h"

/* cuda_runtime_api.h may spell these as macros (per-thread default stream builds): here each
 * name is its own symbol. */
#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion

/* For each runtime function of hooks.def: its type, name##_fn, and real_##name(), the next
 * definition after tessera (the real libcudart's), resolved on first use. */
#define REAL_RUNTIME(name, ret, params)                                                            \
    typedef ret (*name##_fn) params;                                                               \
    static name##_fn real_##name(void)                                                             \
    {                                                                                              \
        static name##_fn fn;                                                                       \
        name##_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);                                      \
        if (!f) {                                                                                  \
            f = (name##_fn)ts_real_dlsym(RTLD_NEXT, #name);                                        \
            __atomic_store_n(&fn, f, __ATOMIC_RELEASE);                                            \
        }                                                                                          \
        return f;                                                                                  \
    }
#define TS_RUNTIME_HOOK(name, ret, params) REAL_RUNTIME(name, ret, params)
#define TS_RUNTIME_REAL(name, ret, params) REAL_RUNTIME(name, ret, params)
#include "shim/hooks.def"

/* The interposed ones are exported under their own names. */
#define TS_RUNTIME_HOOK(name, ret, params) TS_EXPORT ret name params;
#include "shim/hooks.def"

/* A size no device can ever provide: if tessera's driver hook were somehow not in cudart's path,
 * the real driver still answers "out of memory". */
#define IMPOSSIBLE_SIZE ((size_t)1 << 62)

static ts_allocator *runtime_allocator(void)
{
    CUcontext ctx = NULL;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    if (a || ctx)
        return a;
    /* No current context yet: let the runtime make its primary context current, as the real
     * cudaMalloc would (cudaFree(NULL) is the documented way). */
    cudaFree_fn f = real_cudaFree();
    if (!f)
        return NULL;
    ts_tls *t = ts_tls_get();
    t->depth++;
    cudaError_t r = f(NULL);
    t->depth--;
    if (r != cudaSuccess)
        return NULL;
    return ts_ctx_allocator(&ctx);
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    cudaMalloc_fn real = real_cudaMalloc();
    if (!real)
        return cudaErrorInitializationError;
    ts_tls *t = ts_tls_get();
    /* NULL out-pointer and size 0 get exactly the real call's answer. */
    if (t->depth > 0 || !devPtr || size == 0 || !ts_shim_active() || !ts_driver_init(true, true))
        return real(devPtr, size);
    ts_allocator *a = runtime_allocator();
    if (!a)
        return real(devPtr, size);
    ts_ipc_tick();
    uintptr_t p = 0;
    ts_oom_info oom;
    if (ts_lend_malloc(a, size, 0, &p, &oom) == TS_OK) {
        *devPtr = (void *)p;
        ts_trace_alloc(p, size, false);
        return cudaSuccess;
    }
    ts_trace_alloc(0, size, true);
    ts_report_oom(&oom);
    t->force_result = CUDA_ERROR_OUT_OF_MEMORY;
    cudaError_t r = real(devPtr, IMPOSSIBLE_SIZE);
    t->force_result = 0;
    if (r == cudaSuccess) {
        /* cannot happen with the hook in place; never hand out memory past the cap */
        t->depth++;
        real_cudaFree()(*devPtr);
        t->depth--;
        *devPtr = NULL;
        return cudaErrorMemoryAllocation;
    }
    return r;
}

cudaError_t cudaFree(void *devPtr)
{
    cudaFree_fn real = real_cudaFree();
    if (!real)
        return cudaErrorInitializationError;
    ts_tls *t = ts_tls_get();
    /* cudaFree(NULL) creates the context: always the runtime's business. */
    if (t->depth > 0 || !devPtr || !ts_shim_active() || !ts_driver_init(true, true))
        return real(devPtr);
    size_t size = 0;
    int rc = ts_ctx_free((uintptr_t)devPtr, &size);
    if (rc == TS_OK) {
        ts_trace_free((uintptr_t)devPtr, size);
        return cudaSuccess;
    }
    if (rc == TS_ENOTFOUND) {
        ts_ctx_count_passthrough();
        size_t left = 0; /* memory left to the driver and counted (managed, the program's pools) */
        ts_allocator *a = ts_ctx_driver_left_take((uintptr_t)devPtr, &left);
        t->depth++; /* the driver hook must not look it up a second time */
        cudaError_t r = real(devPtr);
        t->depth--;
        if (a && r != cudaSuccess)
            ts_ctx_driver_left_restore(a, (uintptr_t)devPtr, left);
        return r;
    }
    ts_log_once(&cudaFree, "invalid cudaFree(%p): double free or a pointer inside an allocation "
                           "(returned cudaErrorInvalidValue; further invalid frees are counted "
                           "in num_invalid_frees)", devPtr);
    /* Let cudart record the error: its cuMemFree reaches our hook, which returns the forced
     * result without touching anything. The pointer passed is one no driver owns, so even
     * without the hook the real answer is "invalid value", and the segment is never freed. */
    t->force_result = CUDA_ERROR_INVALID_VALUE;
    cudaError_t r = real((void *)(uintptr_t)1);
    t->force_result = 0;
    return r == cudaSuccess ? cudaErrorInvalidValue : r;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    cudaMemGetInfo_fn real = real_cudaMemGetInfo();
    if (!real)
        return cudaErrorInitializationError;
    ts_tls *t = ts_tls_get();
    if (t->depth > 0 || !ts_shim_active())
        return real(free_bytes, total);
    /* The real call first, as is (its NULL handling and errors); then tessera's view. */
    t->depth++;
    cudaError_t r = real(free_bytes, total);
    t->depth--;
    if (r == cudaSuccess && ts_driver_init(true, true))
        ts_meminfo_adjust(free_bytes, total);
    return r;
}

cudaError_t cudaDeviceReset(void)
{
    cudaDeviceReset_fn real = real_cudaDeviceReset();
    if (!real)
        return cudaErrorInitializationError;
    int dev = -1;
    cudaGetDevice_fn gd = real_cudaGetDevice();
    if (ts_shim_active() && gd && gd(&dev) == cudaSuccess && ts_driver_init(true, true))
        ts_ctx_forget_primary((CUdevice)dev); /* before the memory vanishes */
    return real();
}

/* The runtime answers these through its own cuGetProcAddress pointer, which is tessera's wrapper
 * once cudart started under tessera; routing here again covers the rest (a runtime that resolved
 * the driver before tessera was loaded). Routing a hook twice is harmless: hooks map to
 * themselves. */
static void entry_fix(const char *symbol, void **fn)
{
    if (!symbol || !fn || !*fn)
        return;
    if (strcmp(symbol, "cuGetProcAddress") == 0)
        return; /* the version decides the ABI: cuGetProcAddress answered it already */
    if (ts_driver_ready() || ts_driver_init(false, true))
        *fn = ts_route(*fn);
}

/* Their prototypes come from hooks.def (above); the bodies differ only in the version argument. */
#define ENTRY_HOOK(name)                                                                           \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned long long flags,                 \
                     enum cudaDriverEntryPointQueryResult *status)                                 \
    {                                                                                              \
        name##_fn real = real_##name();                                                            \
        if (!real)                                                                                 \
            return cudaErrorInitializationError;                                                   \
        cudaError_t r = real(symbol, funcPtr, flags, status);                                      \
        if (r == cudaSuccess)                                                                      \
            entry_fix(symbol, funcPtr);                                                            \
        return r;                                                                                  \
    }

#define ENTRY_VER_HOOK(name)                                                                       \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned int version,                     \
                     unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)       \
    {                                                                                              \
        name##_fn real = real_##name();                                                            \
        if (!real)                                                                                 \
            return cudaErrorInitializationError;                                                   \
        cudaError_t r = real(symbol, funcPtr, version, flags, status);                             \
        if (r == cudaSuccess)                                                                      \
            entry_fix(symbol, funcPtr);                                                            \
        return r;                                                                                  \
    }

ENTRY_HOOK(cudaGetDriverEntryPoint)
ENTRY_HOOK(cudaGetDriverEntryPoint_ptsz)
ENTRY_VER_HOOK(cudaGetDriverEntryPointByVersion)
ENTRY_VER_HOOK(cudaGetDriverEntryPointByVersion_ptsz)
