/* The core's backend over the real CUDA driver, for one context.
 *
 * Every call goes through the real entry points in ts_real (never an exported name), so nothing
 * re-enters tessera's hooks. Calls are made with the allocator's mutex held, by the thread whose
 * current context is this backend's (allocations happen in the caller's context).
 *
 * Stream order (reuse_fence:order, the default): an order point makes every stream of the
 * context wait, on the device, for the work issued on every stream before it. With no
 * non-blocking stream, one event recorded on the legacy default stream does it (blocking and
 * per-thread default streams wait for earlier legacy work, and legacy work waits for theirs);
 * with non-blocking streams S1..Sn: an event on each Si, the legacy stream waits for them all,
 * an event F on the legacy stream, and each Si waits for F. While the context's work can only run
 * in one queue (its census: no stream created, one host thread) an order point is nothing at all.
 * A non-blocking stream created later waits for an event recorded on the legacy stream at its
 * creation, which follows every earlier order point. docs/DESIGN.md has the argument.
 *
 * Fences (reuse_fence:events): an event on the legacy default stream, which waits for every
 * blocking stream of the context, plus one on each non-blocking stream the program created.
 * Once all of them complete, no work issued before the fence can touch memory freed before it.
 * reuse_fence:sync synchronises the context instead (covers streams tessera never saw).
 * While a graph capture is underway nothing here records, queries or waits (the core is told
 * through capture_active), and allocations run in relaxed capture mode so they cannot
 * invalidate the capture.
 *
 * Inputs: what ts_cuda_backend_create is given (the context, its device, the fence mode; the
 * configuration itself is never read here), and the shim's process-wide view of the device: the
 * real driver entry points (ts_real, real.c), and the streams, census and captures of streams.c.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/shim.h"
#include "core/peers.h"

#define FENCE_MAX_EVENTS 129 /* the legacy stream + 128 non-blocking streams */

typedef struct cuda_fence {
    struct cuda_fence *next_free;
    struct cuda_fence *next_all; /* every fence this backend made, for teardown */
    uint32_t nevents;
    bool sync;    /* complete only after a context synchronise */
    bool done;
    CUevent events[FENCE_MAX_EVENTS];
} cuda_fence;

struct ts_cuda_backend {
    CUcontext ctx;
    CUdevice dev;
    uint64_t peers; /* bit d: device d gets read-write access to every mapping (peer access) */
    bool no_fd_export; /* the driver refused exportable handles: created without (ipc.c then
                        * cannot share such memory, and says so) */
    ts_fence_mode mode;  /* reuse_fence, fixed at creation */
    CUevent *event_pool; /* recycled events (never destroyed while the context lives) */
    size_t nevents, events_cap;
    cuda_fence *fence_pool;
    cuda_fence *fences_all;

    /* Stream order. order_lock serialises order points with the registration of new streams,
     * so that a stream is either covered by an order point or created after it. */
    const ts_census *census;
    pthread_mutex_t order_lock;
    CUevent order_event;   /* F: recorded on the legacy stream at each order point */
    CUevent *join_events;  /* one per non-blocking stream, reused from one order point to the next */
    CUstream *join_streams;
    size_t join_cap;
};

static int cu_status(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return TS_OK;
    case CUDA_ERROR_OUT_OF_MEMORY: return TS_ENOMEM;
    case CUDA_ERROR_NOT_READY: return TS_EAGAIN;
    case CUDA_ERROR_INVALID_VALUE: return TS_EINVAL;
    default: return TS_EBACKEND;
    }
}

/* Allocations during a capture run in relaxed mode (as PyTorch's cudaMalloc does). */
typedef struct capture_relax {
    bool on;
    CUstreamCaptureMode saved;
} capture_relax;

static void relax_begin(capture_relax *r)
{
    r->on = ts_capture_underway() && ts_real.cuThreadExchangeStreamCaptureMode;
    if (r->on) {
        r->saved = CU_STREAM_CAPTURE_MODE_RELAXED;
        ts_real.cuThreadExchangeStreamCaptureMode(&r->saved);
    }
}

static void relax_end(capture_relax *r)
{
    if (r->on)
        ts_real.cuThreadExchangeStreamCaptureMode(&r->saved);
}

/* Make this backend's context current for the duration of a call, if it is not already. */
typedef struct ctx_guard {
    bool pushed;
} ctx_guard;

static void guard_begin(ts_cuda_backend *b, ctx_guard *g)
{
    CUcontext cur = NULL;
    g->pushed = false;
    if (ts_real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != b->ctx &&
        ts_real.cuCtxPushCurrent_v2 && ts_real.cuCtxPushCurrent_v2(b->ctx) == CUDA_SUCCESS)
        g->pushed = true;
}

static void guard_end(ctx_guard *g)
{
    CUcontext dummy;
    if (g->pushed)
        ts_real.cuCtxPopCurrent_v2(&dummy);
}

/* --- segments --------------------------------------------------------------------------------- */

static int cb_seg_alloc(void *ctx, size_t size, uintptr_t *out)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    capture_relax r;
    guard_begin(b, &g);
    relax_begin(&r);
    CUdeviceptr p = 0;
    CUresult res = ts_real.cuMemAlloc_v2(&p, size);
    relax_end(&r);
    guard_end(&g);
    if (res != CUDA_SUCCESS)
        return cu_status(res);
    *out = (uintptr_t)p;
    return TS_OK;
}

static int cb_seg_free(void *ctx, uintptr_t ptr, size_t size)
{
    ts_cuda_backend *b = ctx;
    (void)size;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult res = ts_real.cuMemFree_v2((CUdeviceptr)ptr);
    guard_end(&g);
    return cu_status(res);
}

static int cb_mem_info(void *ctx, size_t *free_bytes, size_t *total)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult res = ts_real.cuMemGetInfo_v2(free_bytes, total);
    guard_end(&g);
    return cu_status(res);
}

static int cb_synchronize(void *ctx)
{
    ts_cuda_backend *b = ctx;
    if (ts_capture_underway())
        return TS_EAGAIN;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult res = ts_real.cuCtxSynchronize();
    guard_end(&g);
    return cu_status(res);
}

static int cb_capture_active(void *ctx)
{
    (void)ctx;
    return ts_capture_underway();
}

/* --- fences --------------------------------------------------------------------------------- */

static CUevent event_get(ts_cuda_backend *b)
{
    if (b->nevents > 0)
        return b->event_pool[--b->nevents];
    CUevent e = NULL;
    if (ts_real.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return e;
}

static void event_put(ts_cuda_backend *b, CUevent e)
{
    if (b->nevents == b->events_cap) {
        size_t cap = b->events_cap ? b->events_cap * 2 : 32;
        CUevent *n = realloc(b->event_pool, cap * sizeof *n);
        if (!n) {
            ts_real.cuEventDestroy_v2(e);
            return;
        }
        b->event_pool = n;
        b->events_cap = cap;
    }
    b->event_pool[b->nevents++] = e;
}

static void fence_put(ts_cuda_backend *b, cuda_fence *f)
{
    for (uint32_t i = 0; i < f->nevents; i++)
        event_put(b, f->events[i]);
    f->nevents = 0;
    f->next_free = b->fence_pool;
    b->fence_pool = f;
}

static int cb_fence_record(void *ctx, ts_fence *out)
{
    ts_cuda_backend *b = ctx;
    if (ts_capture_underway())
        return TS_EAGAIN;
    cuda_fence *f = b->fence_pool;
    if (f) {
        b->fence_pool = f->next_free;
    } else {
        if (!(f = malloc(sizeof *f)))
            return TS_ENOMEM;
        f->next_all = b->fences_all;
        b->fences_all = f;
    }
    f->next_free = NULL;
    f->nevents = 0;
    f->sync = f->done = false;

    ctx_guard g;
    guard_begin(b, &g);
    CUstream streams[FENCE_MAX_EVENTS];
    streams[0] = CU_STREAM_LEGACY;
    size_t n = 1;
    if (b->mode == TS_FENCE_SYNC) {
        f->sync = true;
    } else {
        size_t total = ts_streams_nonblocking(b->ctx, streams + 1, FENCE_MAX_EVENTS - 1);
        if (total > FENCE_MAX_EVENTS - 1) {
            f->sync = true; /* more streams than one fence holds: synchronise instead */
            ts_log_once(&cb_fence_record, "more than %d non-blocking streams: reuse fences "
                                          "synchronise the context instead",
                        FENCE_MAX_EVENTS - 1);
        } else {
            n += total;
        }
    }
    for (size_t i = 0; i < n && !f->sync; i++) {
        CUevent e = event_get(b);
        if (!e || ts_real.cuEventRecord(e, streams[i]) != CUDA_SUCCESS) {
            /* a stream destroyed meanwhile, or no events left: fall back to synchronising */
            if (e)
                event_put(b, e);
            f->sync = true;
            break;
        }
        f->events[f->nevents++] = e;
    }
    guard_end(&g);
    *out = (ts_fence)(uintptr_t)f;
    return TS_OK;
}

/* What a query or wait can answer without asking the device: TS_OK (known complete), TS_EAGAIN
 * (a capture is underway: ask nothing), or -1 (ask). */
static int fence_known(const cuda_fence *f)
{
    if (f->done)
        return TS_OK;
    return ts_capture_underway() ? TS_EAGAIN : -1;
}

static int cb_fence_query(void *ctx, ts_fence fence)
{
    ts_cuda_backend *b = ctx;
    cuda_fence *f = (cuda_fence *)(uintptr_t)fence;
    int known = fence_known(f);
    if (known >= 0)
        return known;
    if (f->sync) {
        /* Without events to ask, the only proof is a synchronise: do it now, once. */
        ctx_guard g;
        guard_begin(b, &g);
        ts_real.cuCtxSynchronize();
        guard_end(&g);
        f->done = true;
        return TS_OK;
    }
    for (uint32_t i = 0; i < f->nevents; i++) {
        CUresult r = ts_real.cuEventQuery(f->events[i]);
        if (r == CUDA_ERROR_NOT_READY)
            return TS_EAGAIN;
        /* Any other error means the context is broken (a sticky fault): nothing will run
         * any more, so the memory cannot be touched either. */
    }
    f->done = true;
    return TS_OK;
}

static int cb_fence_wait(void *ctx, ts_fence fence)
{
    cuda_fence *f = (cuda_fence *)(uintptr_t)fence;
    int known = fence_known(f);
    if (known >= 0)
        return known;
    if (f->sync)
        return cb_fence_query(ctx, fence);
    for (uint32_t i = 0; i < f->nevents; i++)
        ts_real.cuEventSynchronize(f->events[i]);
    f->done = true;
    return TS_OK;
}

static void cb_fence_release(void *ctx, ts_fence fence)
{
    fence_put(ctx, (cuda_fence *)(uintptr_t)fence);
}

/* --- stream order ------------------------------------------------------------------------------ */

/* Make room for n non-blocking streams' events (created lazily, kept for the context's life). */
static bool join_reserve(ts_cuda_backend *b, size_t n)
{
    if (n > b->join_cap) {
        size_t cap = b->join_cap ? b->join_cap : 8;
        while (cap < n)
            cap *= 2;
        CUevent *ev = realloc(b->join_events, cap * sizeof *ev);
        if (ev)
            b->join_events = ev;
        CUstream *st = ev ? realloc(b->join_streams, cap * sizeof *st) : NULL;
        if (!st)
            return false;
        b->join_streams = st;
        memset(ev + b->join_cap, 0, (cap - b->join_cap) * sizeof *ev);
        b->join_cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        if (!b->join_events[i] &&
            ts_real.cuEventCreate(&b->join_events[i], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
            return false;
    return b->order_event ||
           ts_real.cuEventCreate(&b->order_event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
}

/* The order point proper, under order_lock with the context current. False when a driver call
 * failed (a stream destroyed meanwhile, no events left). */
static bool order_streams(ts_cuda_backend *b)
{
    size_t n = ts_streams_nonblocking(b->ctx, NULL, 0);
    if (!ts_real.cuStreamWaitEvent || !join_reserve(b, n))
        return false;
    n = ts_streams_nonblocking(b->ctx, b->join_streams, n); /* same list: creation needs our lock */
    for (size_t i = 0; i < n; i++)
        if (ts_real.cuEventRecord(b->join_events[i], b->join_streams[i]) != CUDA_SUCCESS ||
            ts_real.cuStreamWaitEvent(CU_STREAM_LEGACY, b->join_events[i], 0) != CUDA_SUCCESS)
            return false;
    if (ts_real.cuEventRecord(b->order_event, CU_STREAM_LEGACY) != CUDA_SUCCESS)
        return false;
    for (size_t i = 0; i < n; i++)
        if (ts_real.cuStreamWaitEvent(b->join_streams[i], b->order_event, 0) != CUDA_SUCCESS)
            return false;
    return true;
}

static int cb_reuse_order(void *ctx, int *issued)
{
    ts_cuda_backend *b = ctx;
    *issued = 0;
    if (ts_census_single_queue(b->census))
        return TS_OK; /* one queue: stream order alone keeps later work after earlier work */
    if (ts_capture_underway())
        return TS_EAGAIN; /* an event or a wait now could invalidate the capture */
    *issued = 1;
    ctx_guard g;
    guard_begin(b, &g);
    pthread_mutex_lock(&b->order_lock);
    bool ok = order_streams(b);
    pthread_mutex_unlock(&b->order_lock);
    if (!ok) {
        /* Correct before fast: the host waits, once, rather than reuse unordered. */
        ts_log_once(&cb_reuse_order, "a stream-order point failed; synchronising the context "
                                     "instead");
        ts_real.cuCtxSynchronize();
    }
    guard_end(&g);
    return TS_OK;
}

void ts_cuda_backend_stream_created(ts_cuda_backend *b, CUstream s, unsigned int flags)
{
    pthread_mutex_lock(&b->order_lock);
    ts_streams_add(s, b->ctx, flags);
    /* A blocking stream waits for earlier legacy work by itself. A non-blocking one must wait
     * for the blocks reused before it existed: everything before an event on the legacy stream
     * now, which follows every earlier order point (and, when the context's work ran in one
     * queue until now, all of that work). During a capture, touching the legacy stream could
     * invalidate it: the last order point's event then stands in (no reuse since could have
     * made one). */
    if ((flags & CU_STREAM_NON_BLOCKING) && b->mode == TS_FENCE_ORDER &&
        (b->order_event || ts_real.cuEventCreate(&b->order_event, CU_EVENT_DISABLE_TIMING) ==
                               CUDA_SUCCESS)) {
        bool ok = ts_capture_underway() ||
                  ts_real.cuEventRecord(b->order_event, CU_STREAM_LEGACY) == CUDA_SUCCESS;
        if (!ok || ts_real.cuStreamWaitEvent(s, b->order_event, 0) != CUDA_SUCCESS) {
            ts_log_once(&ts_cuda_backend_stream_created, "cannot order a new stream after "
                                                         "earlier work; synchronising instead");
            ts_real.cuCtxSynchronize();
        }
    }
    pthread_mutex_unlock(&b->order_lock);
}

/* --- virtual memory ------------------------------------------------------------------------------ */

/* Physical memory is created exportable as a POSIX file descriptor, so that another process can
 * map a block of it (CUDA IPC, shim/ipc.c), unless the driver refused that once. */
static void alloc_prop(const ts_cuda_backend *b, CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = b->dev;
    if (!__atomic_load_n(&b->no_fd_export, __ATOMIC_RELAXED))
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static int cb_vm_granularity(void *ctx, size_t *gran)
{
    ts_cuda_backend *b = ctx;
    CUmemAllocationProp prop;
    alloc_prop(b, &prop);
    return cu_status(ts_real.cuMemGetAllocationGranularity(gran, &prop,
                                                           CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

static int cb_vm_reserve(void *ctx, size_t size, uintptr_t *out)
{
    (void)ctx;
    CUdeviceptr va = 0;
    CUresult r = ts_real.cuMemAddressReserve(&va, size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return cu_status(r);
    *out = (uintptr_t)va;
    return TS_OK;
}

static int cb_vm_release(void *ctx, uintptr_t va, size_t size)
{
    (void)ctx;
    return cu_status(ts_real.cuMemAddressFree((CUdeviceptr)va, size));
}

static int cb_vm_create(void *ctx, size_t size, uint64_t *out)
{
    ts_cuda_backend *b = ctx;
    CUmemAllocationProp prop;
    alloc_prop(b, &prop);
    CUmemGenericAllocationHandle h = 0;
    capture_relax r;
    relax_begin(&r);
    CUresult res = ts_real.cuMemCreate(&h, size, &prop, 0);
    if ((res == CUDA_ERROR_NOT_SUPPORTED || res == CUDA_ERROR_INVALID_VALUE) &&
        prop.requestedHandleTypes) {
        /* a driver or device without shareable descriptors: plain handles from now on */
        __atomic_store_n(&b->no_fd_export, true, __ATOMIC_RELAXED);
        prop.requestedHandleTypes = 0;
        res = ts_real.cuMemCreate(&h, size, &prop, 0);
    }
    relax_end(&r);
    if (res != CUDA_SUCCESS)
        return cu_status(res);
    *out = (uint64_t)h;
    return TS_OK;
}

static int cb_vm_destroy(void *ctx, uint64_t handle)
{
    (void)ctx;
    return cu_status(ts_real.cuMemRelease((CUmemGenericAllocationHandle)handle));
}

/* Read-write access to [va, va + size) for the owning device and every peer, in one call. */
static CUresult cb_set_access(const ts_cuda_backend *b, uintptr_t va, size_t size)
{
    CUmemAccessDesc access[TS_PEER_MAX];
    int dev[TS_PEER_MAX];
    const unsigned n = ts_peer_grantees(b->peers, b->dev, dev);
    memset(access, 0, sizeof access);
    for (unsigned i = 0; i < n; i++) {
        access[i].location.id = dev[i];
        access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    return ts_real.cuMemSetAccess((CUdeviceptr)va, size, access, n);
}

/* The pieces back to back, then one grant over the whole range (cuMemSetAccess takes whole
 * mappings, several adjacent ones too). */
static int cb_vm_map(void *ctx, uintptr_t va, const ts_vm_piece *pieces, size_t n)
{
    ts_cuda_backend *b = ctx;
    size_t mapped = 0, at = 0;
    CUresult r = CUDA_SUCCESS;
    for (; mapped < n; at += pieces[mapped++].size) {
        r = ts_real.cuMemMap((CUdeviceptr)(va + at), pieces[mapped].size, pieces[mapped].offset,
                             (CUmemGenericAllocationHandle)pieces[mapped].handle, 0);
        if (r != CUDA_SUCCESS)
            break;
    }
    if (r == CUDA_SUCCESS)
        r = cb_set_access(b, va, at);
    if (r != CUDA_SUCCESS) {
        /* Never leave a mapping the core does not know about (PyTorch issue #188008). */
        for (size_t i = 0, off = 0; i < mapped; off += pieces[i++].size)
            ts_real.cuMemUnmap((CUdeviceptr)(va + off), pieces[i].size);
        return cu_status(r);
    }
    return TS_OK;
}

static int cb_vm_unmap(void *ctx, uintptr_t va, size_t size)
{
    (void)ctx;
    return cu_status(ts_real.cuMemUnmap((CUdeviceptr)va, size));
}

static int cb_vm_peer_add(void *ctx, int device)
{
    ts_cuda_backend *b = ctx;
    return ts_peer_add(&b->peers, device);
}

static int cb_vm_access(void *ctx, uintptr_t va, size_t size)
{
    return cu_status(cb_set_access(ctx, va, size));
}

/* --- pinned host memory ------------------------------------------------------------------------ */

static int cb_host_alloc(void *ctx, size_t size, unsigned flags, uintptr_t *out)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    guard_begin(b, &g);
    void *p = NULL;
    CUresult r = (flags & TS_HOST_ALLOC_HOST)
                     ? ts_real.cuMemAllocHost_v2(&p, size)
                     : ts_real.cuMemHostAlloc(&p, size, flags & ~TS_HOST_ALLOC_HOST);
    guard_end(&g);
    if (r != CUDA_SUCCESS)
        return cu_status(r);
    *out = (uintptr_t)p;
    return TS_OK;
}

static int cb_host_free(void *ctx, uintptr_t ptr)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult r = ts_real.cuMemFreeHost((void *)ptr);
    guard_end(&g);
    return cu_status(r);
}

/* --- copies (a pause keeps the device's bytes in host memory) ------------------------------- */

static int cb_copy_out(void *ctx, void *host, uintptr_t dev, size_t size)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult r = ts_real.cuMemcpyDtoH_v2(host, (CUdeviceptr)dev, size);
    guard_end(&g);
    return cu_status(r);
}

static int cb_copy_in(void *ctx, uintptr_t dev, const void *host, size_t size)
{
    ts_cuda_backend *b = ctx;
    ctx_guard g;
    guard_begin(b, &g);
    CUresult r = ts_real.cuMemcpyHtoD_v2((CUdeviceptr)dev, host, size);
    guard_end(&g);
    return cu_status(r);
}

/* --- construction -------------------------------------------------------------------------------- */

ts_cuda_backend *ts_cuda_backend_create(CUcontext ctx, CUdevice dev, ts_fence_mode mode,
                                        ts_backend *out)
{
    ts_cuda_backend *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->ctx = ctx;
    b->dev = dev;
    b->mode = mode;
    b->census = ts_census_of(ctx);
    pthread_mutex_init(&b->order_lock, NULL);
    memset(out, 0, sizeof *out);
    out->ctx = b;
    out->seg_alloc = cb_seg_alloc;
    out->seg_free = cb_seg_free;
    out->mem_info = cb_mem_info;
    out->synchronize = cb_synchronize;
    out->capture_active = cb_capture_active;
    if (ts_real.cuEventCreate && ts_real.cuEventRecord && ts_real.cuEventQuery &&
        ts_real.cuEventSynchronize) {
        out->fence_record = cb_fence_record;
        out->fence_query = cb_fence_query;
        out->fence_wait = cb_fence_wait;
        out->fence_release = cb_fence_release;
        out->reuse_order = cb_reuse_order;
    }
    if (ts_real.cuMemHostAlloc && ts_real.cuMemAllocHost_v2 && ts_real.cuMemFreeHost) {
        out->host_alloc = cb_host_alloc;
        out->host_free = cb_host_free;
    }
    if (ts_real.cuMemAddressReserve && ts_real.cuMemAddressFree && ts_real.cuMemCreate &&
        ts_real.cuMemRelease && ts_real.cuMemMap && ts_real.cuMemUnmap &&
        ts_real.cuMemSetAccess && ts_real.cuMemGetAllocationGranularity) {
        out->vm_granularity = cb_vm_granularity;
        out->vm_reserve = cb_vm_reserve;
        out->vm_release = cb_vm_release;
        out->vm_create = cb_vm_create;
        out->vm_destroy = cb_vm_destroy;
        out->vm_map = cb_vm_map;
        out->vm_unmap = cb_vm_unmap;
        out->vm_peer_add = cb_vm_peer_add;
        out->vm_access = cb_vm_access;
    }
    if (ts_real.cuMemcpyDtoH_v2 && ts_real.cuMemcpyHtoD_v2) {
        out->copy_out = cb_copy_out;
        out->copy_in = cb_copy_in;
    }
    return b;
}

void ts_cuda_backend_forget(ts_cuda_backend *b)
{
    /* The events died with the context: drop the handles without calling the driver. */
    b->nevents = 0;
    cuda_fence *f = b->fences_all;
    while (f) {
        cuda_fence *next = f->next_all;
        free(f);
        f = next;
    }
    b->fences_all = NULL;
    b->fence_pool = NULL;
    b->peers = 0; /* peer access ends with the context */
    b->order_event = NULL;
    if (b->join_events)
        memset(b->join_events, 0, b->join_cap * sizeof *b->join_events);
}

void ts_cuda_backend_rebind(ts_cuda_backend *b, CUcontext ctx, CUdevice dev)
{
    ts_cuda_backend_forget(b);
    b->ctx = ctx;
    b->dev = dev;
    b->census = ts_census_of(ctx);
}
