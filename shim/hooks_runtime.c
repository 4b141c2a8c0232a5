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

typedef cudaError_t (*malloc_fn)(void **, size_t);
typedef cudaError_t (*free_fn)(void *);
typedef cudaError_t (*meminfo_fn)(size_t *, size_t *);
typedef cudaError_t (*reset_fn)(void);
typedef cudaError_t (*getdevice_fn)(int *);
typedef cudaError_t (*entry_fn)(const char *, void **, unsigned long long,
                                enum cudaDriverEntryPointQueryResult *);
typedef cudaError_t (*entry_ver_fn)(const char *, void **, unsigned int, unsigned long long,
                                    enum cudaDriverEntryPointQueryResult *);

/* The next definition after tessera: the real libcudart's. */
#define REAL_RUNTIME(type, name)                                                                   \
    static type real_##name(void)                                                                  \
    {                                                                                              \
        static type fn;                                                                            \
        type f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);                                           \
        if (!f) {                                                                                  \
            f = (type)ts_real_dlsym(RTLD_NEXT, #name);                                             \
            __atomic_store_n(&fn, f, __ATOMIC_RELEASE);                                            \
        }                                                                                          \
        return f;                                                                                  \
    }

REAL_RUNTIME(malloc_fn, cudaMalloc)
REAL_RUNTIME(free_fn, cudaFree)
REAL_RUNTIME(meminfo_fn, cudaMemGetInfo)
REAL_RUNTIME(reset_fn, cudaDeviceReset)
REAL_RUNTIME(getdevice_fn, cudaGetDevice)
REAL_RUNTIME(entry_fn, cudaGetDriverEntryPoint)
REAL_RUNTIME(entry_fn, cudaGetDriverEntryPoint_ptsz)
REAL_RUNTIME(entry_ver_fn, cudaGetDriverEntryPointByVersion)
REAL_RUNTIME(entry_ver_fn, cudaGetDriverEntryPointByVersion_ptsz)

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
    free_fn f = real_cudaFree();
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

cudaError_t cudaMalloc(void **devPtr, size_t size) __attribute__((visibility("default")));
cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    malloc_fn real = real_cudaMalloc();
    if (!real)
        return cudaErrorInitializationError;
    ts_tls *t = ts_tls_get();
    /* NULL out-pointer and size 0 get exactly the real call's answer. */
    if (t->depth > 0 || !devPtr || size == 0 || !ts_shim_active() || !ts_driver_init(true, true))
        return real(devPtr, size);
    ts_allocator *a = runtime_allocator();
    if (!a)
        return real(devPtr, size);
    uintptr_t p = 0;
    ts_oom_info oom;
    if (ts_malloc_ex(a, size, 0, &p, &oom) == TS_OK) {
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

cudaError_t cudaFree(void *devPtr) __attribute__((visibility("default")));
cudaError_t cudaFree(void *devPtr)
{
    free_fn real = real_cudaFree();
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
        t->depth++; /* the driver hook must not look it up a second time */
        cudaError_t r = real(devPtr);
        t->depth--;
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

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) __attribute__((visibility("default")));
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    meminfo_fn real = real_cudaMemGetInfo();
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

cudaError_t cudaDeviceReset(void) __attribute__((visibility("default")));
cudaError_t cudaDeviceReset(void)
{
    reset_fn real = real_cudaDeviceReset();
    if (!real)
        return cudaErrorInitializationError;
    int dev = -1;
    getdevice_fn gd = real_cudaGetDevice();
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

#define ENTRY_HOOK(name, fnty)                                                                     \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned long long flags,                 \
                     enum cudaDriverEntryPointQueryResult *status)                                 \
        __attribute__((visibility("default")));                                                    \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned long long flags,                 \
                     enum cudaDriverEntryPointQueryResult *status)                                 \
    {                                                                                              \
        fnty real = real_##name();                                                                 \
        if (!real)                                                                                 \
            return cudaErrorInitializationError;                                                   \
        cudaError_t r = real(symbol, funcPtr, flags, status);                                      \
        if (r == cudaSuccess)                                                                      \
            entry_fix(symbol, funcPtr);                                                            \
        return r;                                                                                  \
    }

#define ENTRY_VER_HOOK(name, fnty)                                                                 \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned int version,                     \
                     unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)       \
        __attribute__((visibility("default")));                                                    \
    cudaError_t name(const char *symbol, void **funcPtr, unsigned int version,                     \
                     unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)       \
    {                                                                                              \
        fnty real = real_##name();                                                                 \
        if (!real)                                                                                 \
            return cudaErrorInitializationError;                                                   \
        cudaError_t r = real(symbol, funcPtr, version, flags, status);                             \
        if (r == cudaSuccess)                                                                      \
            entry_fix(symbol, funcPtr);                                                            \
        return r;                                                                                  \
    }

#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
                                         enum cudaDriverEntryPointQueryResult *);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *, void **, unsigned int,
                                                  unsigned long long,
                                                  enum cudaDriverEntryPointQueryResult *);
ENTRY_HOOK(cudaGetDriverEntryPoint, entry_fn)
ENTRY_HOOK(cudaGetDriverEntryPoint_ptsz, entry_fn)
ENTRY_VER_HOOK(cudaGetDriverEntryPointByVersion, entry_ver_fn)
ENTRY_VER_HOOK(cudaGetDriverEntryPointByVersion_ptsz, entry_ver_fn)
