/* PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator): PyTorch loads
 * libtessera.so with dlopen (ctypes, RTLD_LOCAL), looks these two names up and calls them for
 * every tensor, with the device and the stream it is allocated on:
 *
 *   void *tessera_pluggable_alloc(ssize_t size, int device, cudaStream_t stream);
 *   void tessera_pluggable_free(void *ptr, ssize_t size, int device, cudaStream_t stream);
 *
 * Each is served as cudaMallocAsync / cudaFreeAsync on that stream are (hooks_driver.c): a block
 * for the stream, from the stream's own free blocks; freed on that stream (PyTorch frees on the
 * allocation stream), reusable by it at once, by no other stream before an order point.
 *
 * Loaded, not preloaded: nothing is interposed, so nothing here may rely on a hook having seen
 * the program's calls. Initialisation is lazy (the first call resolves the driver); the thread's
 * context is the one PyTorch means (its device's primary context, made current as the runtime
 * would when the thread has none); and a stream capture is asked of the driver for the stream
 * itself (no capture hook saw it begin). Preloaded as well (tessera run), the same library serves
 * both ways and nothing is counted twice: these calls go to the core, never through a hook.
 */
#include "shim/shim.h"

/* The calling thread's context is verified for this device (cache: the context last checked). */
static __thread CUcontext tls_ctx __attribute__((tls_model("initial-exec")));
static __thread int tls_dev __attribute__((tls_model("initial-exec")));

/* Each device's primary context is retained once for the process, as the runtime retains it,
 * when tessera has to make it current itself (never released: the runtime holds it too). */
static CUcontext primary_ctx[64];

static bool ready(void)
{
    return ts_driver_ready() || ts_driver_init(true, true);
}

static CUcontext primary_of(int device)
{
    CUcontext c = __atomic_load_n(&primary_ctx[device], __ATOMIC_ACQUIRE);
    if (c)
        return c;
    if (!ts_real.cuDevicePrimaryCtxRetain ||
        ts_real.cuDevicePrimaryCtxRetain(&c, (CUdevice)device) != CUDA_SUCCESS)
        return NULL;
    CUcontext none = NULL;
    /* another thread may have retained it first: one retain per device is kept */
    if (!__atomic_compare_exchange_n(&primary_ctx[device], &none, c, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        ts_real.cuDevicePrimaryCtxRelease_v2)
        ts_real.cuDevicePrimaryCtxRelease_v2((CUdevice)device);
    return c;
}

/* Make device's context current for this call. PyTorch passes its current device, whose primary
 * context the runtime makes current on the thread's first runtime call that needs one: a thread
 * with no context yet gets it now, as the runtime would give it. A thread whose current context
 * belongs to another device (a program that pushed its own) gets the device's primary context
 * pushed for this call: *pushed is then true and leave() pops it. */
static bool enter(int device, bool *pushed)
{
    *pushed = false;
    if (device < 0 || device >= 64)
        return false;
    CUcontext cur = NULL;
    if (ts_real.cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
        return false;
    if (cur && cur == tls_ctx && tls_dev == device)
        return true;
    CUdevice dev = -1;
    if (cur && ts_real.cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == device) {
        tls_ctx = cur;
        tls_dev = device;
        return true;
    }
    CUcontext primary = primary_of(device);
    if (!primary)
        return false;
    if (!cur) {
        if (!ts_real.cuCtxSetCurrent || ts_real.cuCtxSetCurrent(primary) != CUDA_SUCCESS)
            return false;
        tls_ctx = primary;
        tls_dev = device;
        return true;
    }
    if (!ts_real.cuCtxPushCurrent_v2 || ts_real.cuCtxPushCurrent_v2(primary) != CUDA_SUCCESS)
        return false;
    *pushed = true;
    return true;
}

static void leave(bool pushed)
{
    CUcontext popped;
    if (pushed)
        ts_real.cuCtxPopCurrent_v2(&popped);
}

/* Is stream s capturing a graph? Asked of the driver: no hook saw the capture begin. */
static bool capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return ts_real.cuStreamIsCapturing && ts_real.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void *tessera_pluggable_alloc(ssize_t size, int device, CUstream stream)
{
    /* PyTorch asks for 0 bytes for empty tensors and frees what it got: NULL, as cudaMalloc */
    if (size <= 0 || !ready())
        return NULL;
    bool pushed;
    if (!enter(device, &pushed))
        return NULL;
    CUdeviceptr p = 0;
    CUresult r;
    if (capturing(stream)) /* a graph's allocation node: the graph's memory, the driver's */
        r = ts_real.cuMemAllocAsync(&p, (size_t)size, stream);
    else
        r = ts_driver_alloc_async(&p, (size_t)size, stream);
    leave(pushed);
    /* PyTorch does not check what a pluggable allocator returns: an out of memory has been said
     * on stderr by tessera's line (ts_report_oom), and the tensor gets NULL. */
    return r == CUDA_SUCCESS ? (void *)(uintptr_t)p : NULL;
}

void tessera_pluggable_free(void *ptr, ssize_t size, int device, CUstream stream)
{
    (void)size;
    (void)device; /* the block's allocator is found from the pointer, in any context */
    if (!ptr || !ready())
        return;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
    if (capturing(stream)) {
        /* A block of tessera's freed inside a capture is freed as cudaFree frees: reused only
         * after an order point, never by work of the capture. Anything else was the graph's
         * allocation: its free is a node of the graph. */
        if (ts_ctx_lookup((uintptr_t)ptr, NULL, NULL) == TS_OK)
            (void)ts_driver_free(p);
        else
            (void)ts_real.cuMemFreeAsync(p, stream);
        return;
    }
    /* A double free or a foreign pointer has no caller to answer: tessera's line and
     * num_invalid_frees say it (served_free). */
    (void)ts_driver_free_async(p, stream);
}
