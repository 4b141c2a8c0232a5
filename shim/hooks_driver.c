/* Driver-level hooks. Reached three ways: cuGetProcAddress (every cudart, static or shared, asks
 * it for its whole table through the pointer it got from dlsym, which tessera wraps), dlsym on a
 * libcuda handle (old runtimes, libraries that resolve entry points themselves), and the exported
 * symbols below (programs linked with -lcuda). Each hook: lazy init, pick the allocator, call the
 * core, return. */
#include <dlfcn.h>
#include <string.h>

#include "shim/shim.h"
#include "core/hostcache.h"

#define HOOK_READY() (ts_driver_ready() || ts_driver_init(true, true))

/* Every hook of the list, hook_<name>, with the list's signature (a body that disagrees with its
 * line in hooks.def does not compile). */
#define TS_DRIVER_HOOK(name, symbol, version, ptsz, ret, params) static ret hook_##name params;
#include "shim/hooks.def"

static bool hook_pass(const ts_tls *t)
{
    return t->depth > 0 || !ts_shim_active();
}

/* --- the gated calls: launches, copies, memsets, synchronises ------------------------------- */

/* Each waits at the gate while the process is paused (shim/pause.c), then calls the driver. */
#define TS_DRIVER_HOOK(name, symbol, version, ptsz, ret, params)
#define TS_DRIVER_GATE(name, symbol, version, ptsz, params, args)                                 \
    static CUresult hook_##name params                                                             \
    {                                                                                              \
        if (!HOOK_READY() || !ts_real.name)                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
        ts_gate_enter();                                                                           \
        CUresult r = ts_real.name args;                                                            \
        ts_gate_leave();                                                                           \
        return r;                                                                                  \
    }
#include "shim/hooks.def"

/* --- allocation ---------------------------------------------------------------------------- */

/* tessera's runtime hook asked cudart to record a failure as its last error: this call, made
 * by cudart on that hook's behalf, returns it untouched. */
static bool hook_forced(ts_tls *t, CUresult *r)
{
    if (!t->force_result)
        return false;
    *r = (CUresult)t->force_result;
    t->force_result = 0;
    return true;
}

/* Serve size bytes from the current context's allocator: CUDA_SUCCESS, the driver's error for
 * out of memory, or *served false when tessera cannot serve this context (forward the call). */
static CUresult alloc_served(CUdeviceptr *dptr, size_t size, bool *served)
{
    ts_ipc_tick();
    CUcontext ctx;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    *served = a != NULL;
    if (!a)
        return CUDA_SUCCESS;
    uintptr_t p = 0;
    ts_oom_info oom;
    int rc = ts_lend_malloc(a, size, 0, &p, &oom);
    if (rc == TS_OK) {
        *dptr = (CUdeviceptr)p;
        ts_trace_alloc(p, size, false);
        return CUDA_SUCCESS;
    }
    ts_trace_alloc(0, size, true);
    ts_report_oom(&oom);
    *dptr = 0; /* the driver stores 0 on failure (cudaMalloc's NULL comes from here) */
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult ts_driver_alloc(CUdeviceptr *dptr, size_t size)
{
    ts_tls *t = ts_tls_get();
    CUresult forced;
    if (hook_forced(t, &forced)) {
        if (dptr)
            *dptr = 0; /* as the driver does on failure: cudart hands the caller's pointer on */
        return forced;
    }
    if (!HOOK_READY())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hook_pass(t) || !dptr || size == 0)
        return ts_real.cuMemAlloc_v2(dptr, size); /* the driver's own answer, errors included */
    bool served;
    CUresult r = alloc_served(dptr, size, &served);
    return served ? r : ts_real.cuMemAlloc_v2(dptr, size);
}

/* The row alignment the driver gives pitched allocations on each device, learnt from the
 * driver itself once (one allocation of one row, freed at once): tessera's pitch is then the
 * driver's. 0: not learnt yet. */
static size_t pitch_align[64];

static size_t pitch_alignment(void)
{
    CUdevice dev = 0;
    if (ts_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 || dev >= 64)
        return 0;
    size_t align = __atomic_load_n(&pitch_align[dev], __ATOMIC_ACQUIRE);
    if (align)
        return align;
    CUdeviceptr probe = 0;
    if (ts_real.cuMemAllocPitch_v2(&probe, &align, 1, 1, 4) != CUDA_SUCCESS)
        return 0;
    ts_real.cuMemFree_v2(probe);
    if (align == 0 || (align & (align - 1)))
        return 0; /* not a power of two: leave pitches to the driver */
    __atomic_store_n(&pitch_align[dev], align, __ATOMIC_RELEASE);
    return align;
}

/* cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch: height rows of the driver's pitch, served
 * like any allocation (counted, under memory_limit, freed by cudaFree/cuMemFree). Arguments the
 * driver refuses get its own answer. */
static CUresult hook_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    if (!HOOK_READY() || !ts_real.cuMemAllocPitch_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_tls *t = ts_tls_get();
    size_t align = 0;
    bool valid = dptr && pPitch && WidthInBytes && Height &&
                 (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16);
    if (hook_pass(t) || !valid || WidthInBytes > SIZE_MAX / 2 || !(align = pitch_alignment()))
        return ts_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    size_t pitch = (WidthInBytes + align - 1) & ~(align - 1);
    if (Height > SIZE_MAX / pitch)
        return ts_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    bool served;
    CUresult r = alloc_served(dptr, pitch * Height, &served);
    if (!served)
        return ts_real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* Free dptr if tessera served it: TS_OK, TS_EINVAL (inside a tessera segment but not a live
 * allocation: never to be forwarded, the driver would free the whole segment under other
 * allocations) or TS_ENOTFOUND (not tessera's). */
/* A free tessera may serve: in the order of stream `order` (0: none), recorded in the trace on
 * stream `tag`. TS_ENOTFOUND: not tessera's. */
static int served_free(CUdeviceptr dptr, const char *api, uintptr_t order, uintptr_t tag)
{
    size_t size = 0;
    int rc = ts_ctx_free_on_stream((uintptr_t)dptr, order, &size);
    if (rc == TS_OK)
        ts_trace_free_on((uintptr_t)dptr, size, tag);
    else if (rc == TS_EINVAL)
        ts_log_once(&served_free, "invalid %s of %#llx: double free or a pointer inside an "
                                  "allocation (returned CUDA_ERROR_INVALID_VALUE; further "
                                  "invalid frees are counted in num_invalid_frees)",
                    api, (unsigned long long)dptr);
    return rc;
}

CUresult ts_driver_free(CUdeviceptr dptr)
{
    ts_tls *t = ts_tls_get();
    CUresult forced;
    if (hook_forced(t, &forced))
        return forced;
    if (!HOOK_READY())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hook_pass(t) || dptr == 0)
        return ts_real.cuMemFree_v2(dptr);
    int rc = served_free(dptr, "free", 0, 0);
    if (rc == TS_OK)
        return CUDA_SUCCESS;
    if (rc == TS_EINVAL)
        return CUDA_ERROR_INVALID_VALUE;
    ts_ctx_count_passthrough();
    /* not ours: allocated before tessera, elsewhere, or left to the driver and counted */
    size_t left = 0;
    ts_allocator *a = ts_ctx_driver_left_take((uintptr_t)dptr, &left);
    CUresult r = ts_real.cuMemFree_v2(dptr);
    if (a && r != CUDA_SUCCESS)
        ts_ctx_driver_left_restore(a, (uintptr_t)dptr, left);
    return r;
}

/* --- stream-ordered allocation and memory left to the driver ----------------------------------- */

/* Whether the program made another pool than the device's default (default_pool.c) its current
 * one (cuDeviceSetMemPool): cuMemAllocAsync then draws from that pool, which is the driver's to
 * serve. pool_shared: the program gave other devices access to the default pool
 * (cuMemPoolSetAccess) while tessera's blocks are plain segments, which no other device can reach
 * without peer access: its stream-ordered requests go to the driver. */
static bool pool_replaced[64];
static bool pool_shared[64];

/* The stream a stream-ordered call names, as the core's stream tag: the legacy stream and the
 * per-thread one get their own tags (never 0, which is cudaMalloc's). A per-thread default stream
 * is a different queue in each thread: its frees are never in one stream's order. */
static uintptr_t stream_tag(CUstream s, bool ptsz)
{
    if (s == CU_STREAM_PER_THREAD || (ptsz && s == NULL))
        return (uintptr_t)CU_STREAM_PER_THREAD;
    if (s == NULL)
        return (uintptr_t)CU_STREAM_LEGACY;
    return (uintptr_t)s;
}

static uintptr_t free_order(CUstream s, bool ptsz)
{
    uintptr_t tag = stream_tag(s, ptsz);
    return tag == (uintptr_t)CU_STREAM_PER_THREAD ? 0 : tag;
}

/* An allocation call as the driver takes it (stream-ordered or managed), for the cases tessera
 * forwards. */
typedef struct alloc_call {
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream);                 /* cuMemAllocAsync(_ptsz) */
    CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream); /* or FromPool */
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned int);           /* or cuMemAllocManaged */
    CUdeviceptr *dptr;
    size_t size;
    CUmemoryPool pool;
    CUstream s;
    unsigned int flags;
} alloc_call;

static CUresult call_driver(const alloc_call *c)
{
    if (c->alloc)
        return c->alloc(c->dptr, c->size, c->s);
    if (c->from_pool)
        return c->from_pool(c->dptr, c->size, c->pool, c->s);
    return c->managed(c->dptr, c->size, c->flags);
}

/* Memory the driver serves (managed memory, a pool the program configured): counted by the
 * current context's allocator, in driver_bytes and against memory_limit, before the call (a
 * request past the cap gets the driver's out-of-memory answer); uncounted by whichever free
 * releases it (ts_ctx_driver_left_take). When the driver itself is out of memory, tessera's cache
 * is given back and the call made once more. */
static CUresult alloc_left(const alloc_call *c)
{
    CUcontext ctx;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    if (!a)
        return call_driver(c);
    if (ts_allocator_driver_reserve(a, c->size, true) != TS_OK) {
        ts_log_once(&alloc_left, "a request of %zu bytes left to the driver (managed memory or "
                                 "the program's own pool) would exceed memory_limit: refused "
                                 "with CUDA_ERROR_OUT_OF_MEMORY", c->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult r = call_driver(c);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && ts_empty_cache(a) > 0)
        r = call_driver(c);
    if (r != CUDA_SUCCESS) {
        ts_allocator_driver_unreserve(a, c->size);
        return r;
    }
    if (ts_allocator_driver_record(a, (uintptr_t)*c->dptr, c->size) == TS_OK)
        ts_ctx_driver_left_note();
    return r;
}

/* cuMemAllocAsync, and cuMemAllocFromPoolAsync given the device's default pool: served by the
 * current context's allocator on the stream's own pool of blocks (its tag), counted and limited
 * like any allocation. Forwarded: what the driver must refuse (no pointer, size 0), allocations
 * inside a stream capture (graph memory, the graph's own), and requests while the program has
 * made another pool the device's current one (counted, alloc_left). */
static CUresult alloc_async(const alloc_call *c, bool ptsz)
{
    if (!HOOK_READY() || !(c->alloc || c->from_pool))
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_tls *t = ts_tls_get();
    if (hook_pass(t) || !c->dptr || c->size == 0 || ts_capture_underway())
        return call_driver(c);
    ts_ipc_tick();
    CUcontext ctx;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    if (!a)
        return call_driver(c);
    int dev = ts_allocator_device(a);
    bool ours = c->from_pool ? c->pool && c->pool == ts_pool_default(dev)
                             : dev < 0 || dev >= 64 ||
                                   !__atomic_load_n(&pool_replaced[dev], __ATOMIC_ACQUIRE);
    if (ts_pool_default(dev) && __atomic_load_n(&pool_shared[dev], __ATOMIC_ACQUIRE))
        ours = false; /* (a default pool is known for devices 0-63 only) */
    if (!ours)
        return alloc_left(c);
    uintptr_t p = 0, tag = stream_tag(c->s, ptsz);
    ts_oom_info oom;
    if (ts_lend_malloc(a, c->size, tag, &p, &oom) == TS_OK) {
        *c->dptr = (CUdeviceptr)p;
        ts_trace_alloc_on(p, c->size, false, tag);
        return CUDA_SUCCESS;
    }
    ts_trace_alloc_on(0, c->size, true, tag);
    ts_report_oom(&oom);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    alloc_call c = {.alloc = ts_real.cuMemAllocAsync, .dptr = dptr, .size = size, .s = s};
    return alloc_async(&c, false);
}

static CUresult hook_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    alloc_call c = {.alloc = ts_real.cuMemAllocAsync_ptsz, .dptr = dptr, .size = size, .s = s};
    return alloc_async(&c, true);
}

static CUresult hook_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream s)
{
    alloc_call c = {.from_pool = ts_real.cuMemAllocFromPoolAsync, .dptr = dptr, .size = size,
                    .pool = pool, .s = s};
    return alloc_async(&c, false);
}

static CUresult hook_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                                  CUmemoryPool pool, CUstream s)
{
    alloc_call c = {.from_pool = ts_real.cuMemAllocFromPoolAsync_ptsz, .dptr = dptr,
                    .size = size, .pool = pool, .s = s};
    return alloc_async(&c, true);
}

/* Managed memory migrates between host and device at the driver's will: left to the driver,
 * counted and limited (alloc_left), freed by cudaFree/cuMemFree. */
static CUresult hook_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    if (!HOOK_READY() || !ts_real.cuMemAllocManaged)
        return CUDA_ERROR_NOT_INITIALIZED;
    alloc_call c = {.managed = ts_real.cuMemAllocManaged, .dptr = dptr, .size = size,
                    .flags = flags};
    if (hook_pass(ts_tls_get()) || !dptr || size == 0 || ts_capture_underway())
        return call_driver(&c);
    return alloc_left(&c);
}

static CUresult hook_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    if (!HOOK_READY() || !ts_real.cuDeviceSetMemPool)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuDeviceSetMemPool(dev, pool);
    if (r == CUDA_SUCCESS && dev >= 0 && dev < 64)
        __atomic_store_n(&pool_replaced[dev], pool != ts_pool_default(dev), __ATOMIC_RELEASE);
    return r;
}

/* The device whose default pool `pool` is, or -1 (a pool of the program's own, or unknown):
 * devices are asked in order until the driver knows none (ts_pool_default stops at 64). */
static int pool_owner(CUmemoryPool pool)
{
    CUmemoryPool p;
    for (int d = 0; (p = ts_pool_default(d)) != NULL; d++)
        if (p == pool)
            return d;
    return -1;
}

/* Access to a device's default pool for other devices (cuMemPoolSetAccess). The driver applies it
 * to every allocation of the pool, made before the call and after; tessera serves that pool's
 * stream-ordered blocks, so tessera applies it to them: each device given read or read-write
 * access is granted every virtual-memory mapping of the pool's device (expandable segments,
 * stitched ranges), now and later, as peer access is. A plain segment (expandable_segments:False)
 * cannot be opened to one device without peer access to all of its context's memory, so with
 * plain segments the device's later stream-ordered requests go to the driver instead (counted
 * and capped), whose pool memory follows the access; the blocks served before stay out of the
 * other device's reach, which a line says. Taking access away changes nothing of tessera's
 * (grants allow, never forbid). */
static CUresult hook_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    if (!HOOK_READY() || !ts_real.cuMemPoolSetAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuMemPoolSetAccess(pool, map, count);
    int owner = r == CUDA_SUCCESS && !hook_pass(ts_tls_get()) ? pool_owner(pool) : -1;
    for (size_t i = 0; owner >= 0 && i != count; i++) {
        int to = map[i].location.id;
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || to == owner ||
            map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            continue;
        ts_ctx_pool_access(owner, to);
        if (!ts_shim_config()->expandable_segments) {
            __atomic_store_n(&pool_shared[owner], true, __ATOMIC_RELEASE);
            ts_log_once(pool_shared, "device %d was given access to device %d's default pool: its "
                        "stream-ordered allocations now go to the driver; blocks tessera served "
                        "before sit in plain segments (expandable_segments:False) that device %d "
                        "cannot reach", to, owner, to);
        }
    }
    return r;
}

/* The allocator whose stream-ordered blocks a query of pool covers: the current context's, when
 * pool is its device's default pool. */
static ts_allocator *pool_allocator(CUmemoryPool pool)
{
    CUcontext ctx;
    ts_allocator *a = pool && ts_shim_active() && !hook_pass(ts_tls_get()) ? ts_ctx_allocator(&ctx)
                                                                            : NULL;
    return a && pool == ts_pool_default(ts_allocator_device(a)) ? a : NULL;
}

/* A program's own view of its default pool: the driver's figures plus the stream-ordered blocks
 * tessera serves in its place (used: bytes asked for; reserved: block bytes; the high marks are
 * the sum of the two marks). Everything else is the driver's answer. */
static CUresult hook_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    if (!HOOK_READY() || !ts_real.cuMemPoolGetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuMemPoolGetAttribute(pool, attr, value);
    ts_allocator *a = r == CUDA_SUCCESS ? pool_allocator(pool) : NULL;
    if (!a)
        return r;
    ts_stream_usage u;
    ts_allocator_stream_usage(a, false, false, &u);
    size_t add = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT       ? u.used
                 : attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH        ? u.used_high
                 : attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? u.reserved
                 : attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH    ? u.reserved_high
                                                                : 0;
    if (add) {
        cuuint64_t v;
        memcpy(&v, value, sizeof v);
        v += add;
        memcpy(value, &v, sizeof v);
    }
    return r;
}

/* Resetting a high mark of the default pool resets tessera's part of it too. */
static CUresult hook_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    if (!HOOK_READY() || !ts_real.cuMemPoolSetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuMemPoolSetAttribute(pool, attr, value);
    bool used = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
    ts_allocator *a = r == CUDA_SUCCESS && (used || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
                          ? pool_allocator(pool)
                          : NULL;
    if (a)
        ts_allocator_stream_usage(a, used, !used, NULL);
    return r;
}

/* cudaFreeAsync / cuMemFreeAsync of a block tessera served: the driver would free the whole
 * segment under its other blocks, or refuse a pointer it never gave out. tessera frees the block
 * itself. A stream-ordered block freed on the stream it was allocated for is reusable at once by
 * that stream (its order covers the free), by no other; any other block (cudaMalloc's, or one
 * freed on another stream) waits for an order point or fence like a cudaFree'd one. During a
 * stream capture nothing of tessera's may be freed (a free node needs a graph allocation): its
 * blocks get the driver's answer to a non-graph pointer, without the driver ever seeing them.
 * Memory left to the driver goes to it, and is uncounted when it accepts the free. */
static CUresult free_async(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr dptr, CUstream s,
                           bool ptsz)
{
    if (!HOOK_READY() || !real)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hook_pass(ts_tls_get()) || dptr == 0)
        return real(dptr, s);
    if (ts_capture_underway()) {
        if (ts_ctx_lookup((uintptr_t)dptr, NULL, NULL) == TS_OK)
            return CUDA_ERROR_INVALID_VALUE;
        return real(dptr, s);
    }
    int rc = served_free(dptr, "cudaFreeAsync/cuMemFreeAsync", free_order(s, ptsz),
                         stream_tag(s, ptsz));
    if (rc == TS_OK)
        return CUDA_SUCCESS;
    if (rc == TS_EINVAL)
        return CUDA_ERROR_INVALID_VALUE;
    size_t left = 0;
    ts_allocator *a = ts_ctx_driver_left_take((uintptr_t)dptr, &left);
    CUresult r = real(dptr, s);
    if (a && r != CUDA_SUCCESS)
        ts_ctx_driver_left_restore(a, (uintptr_t)dptr, left);
    return r;
}

static CUresult hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    return free_async(ts_real.cuMemFreeAsync, dptr, s, false);
}

static CUresult hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return free_async(ts_real.cuMemFreeAsync_ptsz, dptr, s, true);
}

CUresult ts_driver_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return hook_cuMemAllocAsync(dptr, size, s);
}

CUresult ts_driver_free_async(CUdeviceptr dptr, CUstream s)
{
    return hook_cuMemFreeAsync(dptr, s);
}

void ts_meminfo_adjust(size_t *free_bytes, size_t *total)
{
    /* The allocator is created here if need be: a program may size itself from
     * cudaMemGetInfo before its first allocation, and must see the cap already. */
    CUcontext ctx = NULL;
    ts_allocator *a = (free_bytes || total) ? ts_ctx_allocator(&ctx) : NULL;
    size_t f = 0, tot = 0;
    if (a && ts_real.cuMemGetInfo_v2(&f, &tot) == CUDA_SUCCESS)
        ts_allocator_mem_info(a, f, tot, free_bytes, total);
}

static CUresult hook_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    return ts_driver_alloc(dptr, size);
}

static CUresult hook_cuMemFree_v2(CUdeviceptr dptr)
{
    return ts_driver_free(dptr);
}

/* --- pinned host memory: cached per context (core/hostcache.c) ----------------------------------- */

/* Serve a pinned host buffer from the current context's host cache. *served false: the driver's
 * business (tessera inactive or pinned_cache:False, arguments the driver refuses or answers
 * itself, no current context, a size or flags the cache does not take). cudaHostAlloc,
 * cudaMallocHost and cudaFreeHost reach these hooks through cudart's driver table. */
static CUresult host_alloc_served(void **pp, size_t size, unsigned flags, bool *served)
{
    *served = false;
    if (hook_pass(ts_tls_get()) || !pp || size == 0 || !ts_shim_config()->pinned_cache)
        return CUDA_SUCCESS;
    CUcontext ctx;
    ts_allocator *a = ts_ctx_allocator(&ctx);
    if (!a)
        return CUDA_SUCCESS;
    uintptr_t p = 0;
    int rc = ts_host_alloc(a, size, flags, &p);
    if (rc == TS_EUNSUPPORTED || rc == TS_EBACKEND)
        return CUDA_SUCCESS; /* the driver answers (and gives its own error) */
    *served = true;
    if (rc != TS_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = (void *)p;
    return CUDA_SUCCESS;
}

static CUresult hook_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (!HOOK_READY() || !ts_real.cuMemHostAlloc)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool served = false;
    CUresult r = (Flags & ~(unsigned)(TS_HOST_PORTABLE | TS_HOST_DEVICEMAP | TS_HOST_WRITECOMBINED))
                     ? CUDA_SUCCESS
                     : host_alloc_served(pp, bytesize, Flags, &served);
    return served ? r : ts_real.cuMemHostAlloc(pp, bytesize, Flags);
}

static CUresult hook_cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    if (!HOOK_READY() || !ts_real.cuMemAllocHost_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool served;
    CUresult r = host_alloc_served(pp, bytesize, TS_HOST_ALLOC_HOST, &served);
    return served ? r : ts_real.cuMemAllocHost_v2(pp, bytesize);
}

/* A buffer of a host cache goes back to it; a pointer inside one that is not a live buffer's
 * start gets the driver's answer to an interior pointer or a second free; any other pointer goes
 * to the driver unchanged. */
static CUresult hook_cuMemFreeHost(void *p)
{
    if (!HOOK_READY() || !ts_real.cuMemFreeHost)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (hook_pass(ts_tls_get()) || !p)
        return ts_real.cuMemFreeHost(p);
    int rc = ts_ctx_host_free((uintptr_t)p);
    if (rc == TS_OK)
        return CUDA_SUCCESS;
    if (rc == TS_EINVAL)
        return CUDA_ERROR_INVALID_VALUE;
    return ts_real.cuMemFreeHost(p);
}

/* A pointer into device memory tessera holds, or into pinned memory it has not handed out, gets
 * the driver's answer for a cudaMalloc pointer or memory it does not know (pointer.c); the others,
 * the driver's own. */
static CUresult hook_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!HOOK_READY() || !ts_real.cuMemHostGetDevicePointer_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hook_pass(ts_tls_get()) && ts_pointer_host_refused(p))
        return CUDA_ERROR_INVALID_VALUE;
    return ts_real.cuMemHostGetDevicePointer_v2(pdptr, p, Flags);
}

static CUresult hook_cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    if (!HOOK_READY() || !ts_real.cuMemHostGetFlags)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hook_pass(ts_tls_get()) && ts_pointer_host_refused(p))
        return CUDA_ERROR_INVALID_VALUE;
    return ts_real.cuMemHostGetFlags(pFlags, p);
}

static CUresult hook_cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (!HOOK_READY())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuMemGetInfo_v2(free_bytes, total);
    if (r == CUDA_SUCCESS && !hook_pass(ts_tls_get()))
        ts_meminfo_adjust(free_bytes, total);
    return r;
}

/* --- streams and captures (what the reuse fences must cover) -------------------------------- */

static void stream_note(CUresult r, CUstream *ph, unsigned int flags)
{
    CUcontext ctx = NULL;
    if (r == CUDA_SUCCESS && ph && ts_real.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
        ts_ctx_stream_created(ctx, *ph, flags);
}

/* A host thread that makes a context current may issue work on its own per-thread default
 * stream: the census must know it before that work can meet a reused block. */
static void ctx_thread_note(CUresult r, CUcontext ctx)
{
    if (r == CUDA_SUCCESS && ctx && ts_shim_active())
        ts_ctx_note_thread(ctx);
}

static CUresult hook_cuCtxSetCurrent(CUcontext ctx)
{
    if (!HOOK_READY() || !ts_real.cuCtxSetCurrent)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuCtxSetCurrent(ctx);
    ctx_thread_note(r, ctx);
    return r;
}

static CUresult hook_cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!HOOK_READY() || !ts_real.cuCtxPushCurrent_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuCtxPushCurrent_v2(ctx);
    ctx_thread_note(r, ctx);
    return r;
}

static CUresult hook_cuStreamCreate(CUstream *ph, unsigned int flags)
{
    if (!HOOK_READY() || !ts_real.cuStreamCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamCreate(ph, flags);
    stream_note(r, ph, flags);
    return r;
}

static CUresult hook_cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    if (!HOOK_READY() || !ts_real.cuStreamCreateWithPriority)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamCreateWithPriority(ph, flags, priority);
    stream_note(r, ph, flags);
    return r;
}

static CUresult hook_cuStreamDestroy_v2(CUstream s)
{
    if (!HOOK_READY() || !ts_real.cuStreamDestroy_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_streams_remove(s);
    ts_ctx_stream_retired(s);
    return ts_real.cuStreamDestroy_v2(s);
}

static CUresult hook_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    if (!HOOK_READY() || !ts_real.cuStreamBeginCapture_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamBeginCapture_v2(s, mode);
    if (r == CUDA_SUCCESS)
        ts_capture_begin(s);
    return r;
}

static CUresult hook_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    if (!HOOK_READY() || !ts_real.cuStreamBeginCapture_v2_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamBeginCapture_v2_ptsz(s, mode);
    if (r == CUDA_SUCCESS)
        ts_capture_begin(s);
    return r;
}

static CUresult hook_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    if (!HOOK_READY() || !ts_real.cuStreamEndCapture)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamEndCapture(s, g);
    ts_capture_end(s); /* the capture is over whatever the result (invalidated ones too) */
    return r;
}

static CUresult hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    if (!HOOK_READY() || !ts_real.cuStreamEndCapture_ptsz)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuStreamEndCapture_ptsz(s, g);
    ts_capture_end(s);
    return r;
}

/* --- contexts dying ------------------------------------------------------------------------------ */

static CUresult hook_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    if (!HOOK_READY() || !ts_real.cuDevicePrimaryCtxReset_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_ctx_forget_primary(dev); /* its memory is about to vanish: no double frees later */
    return ts_real.cuDevicePrimaryCtxReset_v2(dev);
}

static CUresult hook_cuCtxDestroy_v2(CUcontext ctx)
{
    if (!HOOK_READY() || !ts_real.cuCtxDestroy_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_ctx_forget(ctx);
    return ts_real.cuCtxDestroy_v2(ctx);
}

/* --- peer access ------------------------------------------------------------------------------- */

/* Peer access makes the peer context's driver allocations visible to the current device, but not
 * memory mapped with cuMemMap, which is visible only to the devices its access was set for:
 * tessera grants the current device its mappings in that context, those made so far and every
 * later one. Disabling peer access leaves the grants in place (they allow, never forbid). */
static CUresult hook_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    if (!HOOK_READY() || !ts_real.cuCtxEnablePeerAccess)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = ts_real.cuCtxEnablePeerAccess(peer, flags);
    CUdevice from = 0;
    if ((r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) && ts_shim_active() &&
        ts_real.cuCtxGetDevice(&from) == CUDA_SUCCESS)
        ts_ctx_peer_enabled(peer, from);
    return r;
}

/* --- IPC and pointer queries: answered for the block (ipc.c, pointer.c) ------------------------ */

/* A handle names the allocation that contains the pointer: for a tessera block, tessera's own
 * handle (ipc.c), whatever memory the block sits in. */
static CUresult hook_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    if (!HOOK_READY() || !ts_real.cuIpcGetMemHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    ts_allocator *a = NULL;
    CUcontext ctx = NULL;
    if (h && !hook_pass(ts_tls_get()) &&
        ts_ctx_owner((uintptr_t)dptr, &a, &ctx, NULL, NULL) == TS_OK) {
        ts_gate_enter(); /* no block is exported while its pages are away (paused) */
        CUresult r = ts_ipc_export(h, a, ctx, (uintptr_t)dptr);
        ts_gate_leave();
        return r;
    }
    return ts_real.cuIpcGetMemHandle(h, dptr);
}

static CUresult hook_cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                           unsigned int flags)
{
    if (!HOOK_READY() || !ts_real.cuIpcOpenMemHandle_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pdptr && ts_ipc_is_ours(&handle))
        return ts_ipc_open(pdptr, &handle, flags);
    return ts_real.cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

static CUresult hook_cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (!HOOK_READY() || !ts_real.cuIpcCloseMemHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool handled;
    CUresult r = ts_ipc_close(dptr, &handled);
    return handled ? r : ts_real.cuIpcCloseMemHandle(dptr);
}

static CUresult hook_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!HOOK_READY() || !ts_real.cuMemGetAddressRange_v2)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r;
    if (!hook_pass(ts_tls_get()) && ts_pointer_range(dptr, pbase, psize, &r))
        return r;
    return ts_real.cuMemGetAddressRange_v2(pbase, psize, dptr);
}

static CUresult hook_cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    if (!HOOK_READY() || !ts_real.cuPointerGetAttribute)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r;
    if (!hook_pass(ts_tls_get()) && ts_pointer_attribute(data, attribute, ptr, &r))
        return r;
    return ts_real.cuPointerGetAttribute(data, attribute, ptr);
}

static CUresult hook_cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute *attributes, void **data,
                                            CUdeviceptr ptr)
{
    if (!HOOK_READY() || !ts_real.cuPointerGetAttributes)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r;
    if (!hook_pass(ts_tls_get()) &&
        ts_pointer_attributes(numAttributes, attributes, data, ptr, &r))
        return r;
    return ts_real.cuPointerGetAttributes(numAttributes, attributes, data, ptr);
}

/* The physical handle under a tessera block is tessera's, shared with other blocks: the program
 * gets the driver's answer for cudaMalloc memory, which has none. */
static CUresult hook_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!HOOK_READY() || !ts_real.cuMemRetainAllocationHandle)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!hook_pass(ts_tls_get()) &&
        ts_ctx_owner((uintptr_t)addr, NULL, NULL, NULL, NULL) == TS_OK)
        return CUDA_ERROR_INVALID_VALUE;
    return ts_real.cuMemRetainAllocationHandle(handle, addr);
}

/* --- cuGetProcAddress ---------------------------------------------------------------------------- */

static const char *hook_name(const void *hook);

/* verbose:True: say once per hook which object first received it and how, so that a user can
 * check that a binary (a static-cudart one above all) is really served by tessera. */
void ts_hook_announce(const char *via, const char *symbol, int version, unsigned long long flags,
                      const void *hook, const void *caller)
{
    if (!ts_shim_config()->verbose || !hook)
        return;
    Dl_info di;
    const char *obj = caller && dladdr(caller, &di) && di.dli_fname && di.dli_fname[0]
                          ? di.dli_fname
                          : "(unknown object)";
    if (version)
        ts_log_once(hook, "%s(\"%s\", %d, flags %#llx) from %s: tessera's %s hook", via, symbol,
                    version, flags, obj, hook_name(hook));
    else
        ts_log_once(hook, "%s(\"%s\") from %s: tessera's %s hook", via, symbol, obj,
                    hook_name(hook));
}

static void gpa_fix(const char *symbol, void **pfn, int version, cuuint64_t flags, bool v2,
                    const void *caller)
{
    if (!symbol || !pfn || !*pfn)
        return;
    if (!ts_driver_ready())
        ts_driver_init(false, true);
    void *was = *pfn;
    if (strcmp(symbol, "cuGetProcAddress") == 0)
        *pfn = version >= 12000 ? (void *)ts_gpa_v2_wrapper : (void *)ts_gpa_v1_wrapper;
    else
        *pfn = ts_route(*pfn);
    if (*pfn != was)
        ts_hook_announce(v2 ? "cuGetProcAddress_v2" : "cuGetProcAddress", symbol, version,
                         (unsigned long long)flags, *pfn, caller);
}

CUresult ts_gpa_v2_wrapper(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                           CUdriverProcAddressQueryResult *status)
{
    ts_gpa_v2_fn real = __atomic_load_n(&ts_real.cuGetProcAddress_v2, __ATOMIC_ACQUIRE);
    if (!real) {
        ts_driver_init(true, true);
        real = __atomic_load_n(&ts_real.cuGetProcAddress_v2, __ATOMIC_ACQUIRE);
        if (!real)
            return CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS)
        gpa_fix(symbol, pfn, cudaVersion, flags, true, __builtin_return_address(0));
    return r;
}

CUresult ts_gpa_v1_wrapper(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    ts_gpa_v1_fn real = __atomic_load_n(&ts_real.cuGetProcAddress_v1, __ATOMIC_ACQUIRE);
    if (!real) {
        ts_driver_init(true, true);
        real = __atomic_load_n(&ts_real.cuGetProcAddress_v1, __ATOMIC_ACQUIRE);
        if (!real)
            return CUDA_ERROR_NOT_INITIALIZED;
    }
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS)
        gpa_fix(symbol, pfn, cudaVersion, flags, false, __builtin_return_address(0));
    return r;
}

/* --- the table routing maps real pointers into ------------------------------------------------ */

static const ts_hook_entry hook_table[] = {
#define TS_DRIVER_HOOK(name, symbol, version, ptsz, ret, params)                                   \
    {symbol, #name, version, ptsz, (void *)hook_##name, (void **)&ts_real.name},
#include "shim/hooks.def"
};

bool ts_driver_init(bool load, bool wait)
{
    static const ts_driver_hooks hooks = {hook_table, sizeof hook_table / sizeof hook_table[0],
                                          (void *)ts_gpa_v1_wrapper, (void *)ts_gpa_v2_wrapper};
    return ts_real_init(load, wait, &hooks);
}

static const char *hook_name(const void *hook)
{
#define TS_DRIVER_GPA(name, wrapper, ret, params)                                                  \
    if (hook == (const void *)wrapper)                                                             \
        return #name;
#include "shim/hooks.def"
    for (size_t i = 0; i < sizeof hook_table / sizeof hook_table[0]; i++)
        if (hook_table[i].hook == hook)
            return hook_table[i].export;
    return "?";
}

/* --- exported symbols, for programs linked with -lcuda and lookups that find them first ------ */

/* cuda.h spells cuGetProcAddress as a macro for cuGetProcAddress_v2: the 4-argument export is
 * its own symbol. */
#undef cuGetProcAddress

#define EXPORT_ALIAS(target) __attribute__((alias(#target), visibility("default")))
#define TS_DRIVER_HOOK(name, symbol, version, ptsz, ret, params)                                   \
    ret name params EXPORT_ALIAS(hook_##name);
#define TS_DRIVER_GPA(name, wrapper, ret, params) ret name params EXPORT_ALIAS(wrapper);
#include "shim/hooks.def"
