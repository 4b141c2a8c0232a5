/* The simulated runtime through a binary linked against the real toolkit.
 * Run with TESSERA_SIM_MEMORY=1G; "fault" mode with TESSERA_SIM_FAIL_ALLOC_AFTER=2. */
#include <cuda.h>
#include <string.h>

#include "gate.h"
#include "rt.h"

/* what a --default-stream per-thread build calls (the header maps the name to it) */
extern cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus);

static void test_versions_and_device(void)
{
    int v = 0;
    RT(cudaRuntimeGetVersion(&v));
    CHECK_EQ(v, 13000);
    RT(cudaDriverGetVersion(&v));
    CHECK_EQ(v, 13000);
    int n = 0;
    RT(cudaGetDeviceCount(&n));
    CHECK_EQ(n, 1);
    int dev = -1;
    RT(cudaGetDevice(&dev));
    CHECK_EQ(dev, 0);
    struct cudaDeviceProp prop;
    RT(cudaGetDeviceProperties(&prop, 0));
    CHECK(strstr(prop.name, "H100") != NULL);
    CHECK_EQ(prop.totalGlobalMem, GiB);
    CHECK_EQ(prop.major, 9);
    CHECK_EQ(prop.minor, 0);
    CHECK_EQ(prop.multiProcessorCount, 132);
    CHECK_EQ(prop.warpSize, 32);
    CHECK_EQ(prop.maxThreadsDim[2], 64);
    CHECK_EQ(prop.sharedMemPerBlock, 49152);
    CHECK_EQ(prop.unifiedAddressing, 1);
    CHECK_EQ(prop.l2CacheSize, 52428800);
    int cc = 0;
    RT(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK_EQ(cc, 9);
    EXPECT(cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
    EXPECT(cudaSetDevice(1), cudaErrorInvalidDevice);
    RT(cudaSetDevice(0));
    int can = 1;
    RT(cudaDeviceCanAccessPeer(&can, 0, 0));
    CHECK_EQ(can, 0);
    EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported); /* as an H100 */
    EXPECT(cudaDeviceEnablePeerAccess(3, 0), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
}

static void *other_thread(void *p)
{
    (void)p;
    EXPECT(cudaPeekAtLastError(), cudaSuccess); /* the error state is per thread */
    EXPECT(cudaMalloc(NULL, 1), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    return NULL;
}

static void test_last_error(void)
{
    EXPECT(cudaGetLastError(), cudaSuccess);
    EXPECT(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue); /* peek does not reset */
    void *p = NULL;
    RT(cudaMalloc(&p, 16));
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue); /* success does not clear it */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue); /* get returns and resets */
    EXPECT(cudaGetLastError(), cudaSuccess);
    /* the most recent failure wins */
    EXPECT(cudaFree((char *)p + 1), cudaErrorInvalidValue);
    EXPECT(cudaSetDevice(7), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    RT(cudaFree(p));

    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorStreamCaptureUnsupported), "cudaErrorStreamCaptureUnsupported") == 0);
    CHECK(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0);
}

static void test_malloc_free(void)
{
    void *p = (void *)1;
    RT(cudaMalloc(&p, 0)); /* zero bytes: success, NULL */
    CHECK(p == NULL);
    RT(cudaFree(NULL)); /* initialises, succeeds */
    RT(cudaMalloc(&p, 3 * MiB));
    CHECK_EQ((uintptr_t)p % (2 * MiB), 0);
    size_t free_b, total_b;
    RT(cudaMemGetInfo(&free_b, &total_b));
    CHECK_EQ(total_b, GiB);
    CHECK_EQ(free_b, GiB - 4 * MiB);
    EXPECT(cudaFree((char *)p + 64), cudaErrorInvalidValue); /* not an allocation base */
    void *big;
    EXPECT(cudaMalloc(&big, 2 * GiB), cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    RT(cudaFree(p));
    EXPECT(cudaFree(p), cudaErrorInvalidValue); /* double free */
    (void)cudaGetLastError();
    RT(cudaMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB);
}

static void test_copies(void)
{
    char *d1, *d2;
    RT(cudaMalloc((void **)&d1, 1024));
    RT(cudaMalloc((void **)&d2, 1024));
    char h[1024], back[1024];
    for (int i = 0; i < 1024; i++)
        h[i] = (char)(i * 7);
    RT(cudaMemcpy(d1, h, 1024, cudaMemcpyHostToDevice));
    RT(cudaMemcpy(d2, d1, 1024, cudaMemcpyDeviceToDevice));
    memset(back, 0, sizeof back);
    RT(cudaMemcpy(back, d2, 1024, cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, h, 1024) == 0);
    RT(cudaMemset(d1, 0x5c, 512));
    RT(cudaMemcpy(back, d1, 1024, cudaMemcpyDefault));
    CHECK_EQ((unsigned char)back[511], 0x5c);
    CHECK_EQ(back[512], h[512]);
    EXPECT(cudaMemcpy(back, d1, 1024, (enum cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    EXPECT(cudaMemcpy(back, d1, 2048, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT(cudaMemsetAsync(d2, 1, 1024, s));
    RT(cudaMemcpyAsync(back, d2, 1024, cudaMemcpyDeviceToHost, s));
    RT(cudaStreamSynchronize(s));
    CHECK_EQ(back[1023], 1);
    RT(cudaStreamDestroy(s));

    struct cudaPointerAttributes a;
    RT(cudaPointerGetAttributes(&a, d1 + 10));
    CHECK_EQ(a.type, cudaMemoryTypeDevice);
    CHECK_EQ(a.device, 0);
    CHECK(a.devicePointer == d1 + 10);
    RT(cudaPointerGetAttributes(&a, h));
    CHECK_EQ(a.type, cudaMemoryTypeUnregistered);
    CHECK_EQ(a.device, -2); /* what an H100 reports */
    CHECK(a.hostPointer == h);
    CHECK(a.devicePointer == NULL);
    void *pinned;
    RT(cudaMallocHost(&pinned, 4096));
    RT(cudaPointerGetAttributes(&a, pinned));
    CHECK_EQ(a.type, cudaMemoryTypeHost);
    CHECK(a.hostPointer == pinned);
    RT(cudaFreeHost(pinned));
    RT(cudaHostAlloc(&pinned, 100, cudaHostAllocPortable));
    RT(cudaFreeHost(pinned));
    RT(cudaFree(d1));
    RT(cudaFree(d2));
}

static void test_streams_events(void)
{
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    cudaEvent_t a, b;
    RT(cudaEventCreate(&a));
    RT(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
    struct gate g = GATE_INIT;
    RT(cudaLaunchHostFunc(s, gate_fn, &g));
    RT(cudaEventRecord(a, s));
    gate_wait_entered(&g);
    EXPECT(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT(cudaEventQuery(a), cudaErrorNotReady);
    EXPECT(cudaPeekAtLastError(), cudaSuccess); /* "not ready" is not recorded as an error */
    gate_open(&g);
    RT(cudaEventSynchronize(a));
    RT(cudaEventRecord(b, s));
    RT(cudaStreamWaitEvent(NULL, b, 0));
    RT(cudaDeviceSynchronize());
    float ms;
    EXPECT(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    RT(cudaEventDestroy(a));
    RT(cudaEventDestroy(b));
    RT(cudaStreamDestroy(s));
    EXPECT(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();

    void *p;
    RT(cudaMallocAsync(&p, 1000, cudaStreamPerThread));
    RT(cudaMemsetAsync(p, 0, 1000, cudaStreamPerThread));
    RT(cudaFreeAsync(p, cudaStreamPerThread));
    RT(cudaStreamSynchronize(cudaStreamPerThread));
}

static void test_capture(void)
{
    cudaStream_t s;
    RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enum cudaStreamCaptureStatus st;
    RT(cudaStreamIsCapturing(s, &st));
    CHECK_EQ(st, cudaStreamCaptureStatusActive);
    void *p;
    EXPECT(cudaMalloc(&p, 100), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph;
    EXPECT(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    RT(cudaMemsetAsync(p = NULL, 0, 0, s));
    RT(cudaStreamEndCapture(s, &graph));
    CHECK(graph != NULL);
    RT(cudaGraphDestroy(graph));
    RT(cudaStreamDestroy(s));
}

static void test_ipc_and_entry_points(void)
{
    char *d;
    RT(cudaMalloc((void **)&d, 5 * MiB));
    cudaIpcMemHandle_t h;
    RT(cudaIpcGetMemHandle(&h, d + MiB)); /* any pointer into the allocation */
    void *q;
    EXPECT(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess),
           cudaErrorDeviceUninitialized); /* not in the exporting process */
    (void)cudaGetLastError();
    RT(cudaFree(d));

    void *drv = sim_driver();
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult qs = cudaDriverEntryPointSymbolNotFound;
    RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &qs));
    CHECK_EQ(qs, cudaDriverEntryPointSuccess);
    CHECK(fn == dlsym(drv, "cuMemAlloc_v2"));
    RT(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 12000, cudaEnablePerThreadDefaultStream, &qs));
    CHECK(fn == dlsym(drv, "cuMemAllocAsync_ptsz"));
    RT(cudaGetDriverEntryPointByVersion_ptsz("cuMemAllocAsync", &fn, 12000, cudaEnableDefault, &qs));
    CHECK(fn == dlsym(drv, "cuMemAllocAsync_ptsz"));
    RT(cudaGetDriverEntryPointByVersion("cuNoSuchThing", &fn, 12000, cudaEnableDefault, &qs));
    CHECK(fn == NULL);
    CHECK_EQ(qs, cudaDriverEntryPointSymbolNotFound);
    EXPECT(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 13010, cudaEnableDefault, &qs),
           cudaErrorInvalidValue);
    (void)cudaGetLastError();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    RT(cudaGetDriverEntryPoint("cuMemCreate", &fn, cudaEnableDefault, &qs));
#pragma GCC diagnostic pop
    CHECK(fn == dlsym(drv, "cuMemCreate"));
}

/* The runtime's wrappers of what programs share memory with: limits, stream attributes, pool
 * access and sharing, interprocess events, graph memory; each the driver's answer in the
 * runtime's codes. */
static void test_sharing_and_settings(void)
{
    size_t v = 0;
    RT(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 * MiB));
    RT(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
    CHECK_EQ(v, 32 * MiB);
    EXPECT(cudaDeviceGetLimit(&v, cudaLimitDevRuntimeSyncDepth), cudaErrorUnsupportedLimit);
    EXPECT(cudaGetLastError(), cudaErrorUnsupportedLimit);
    CHECK(strcmp(cudaGetErrorName(cudaErrorUnsupportedLimit), "cudaErrorUnsupportedLimit") == 0);
    RT(cudaCtxResetPersistingL2Cache());
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    cudaStreamAttrValue w, back;
    memset(&w, 0, sizeof w);
    w.accessPolicyWindow.num_bytes = MiB;
    w.accessPolicyWindow.hitRatio = 1.0f;
    w.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    RT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &w));
    RT(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
    CHECK_EQ(back.accessPolicyWindow.num_bytes, MiB);
    w.accessPolicyWindow.hitRatio = 2.0f;
    EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &w),
           cudaErrorInvalidValue);
    cudaMemPool_t pool;
    RT(cudaDeviceGetDefaultMemPool(&pool, 0));
    struct cudaMemLocation loc = {cudaMemLocationTypeDevice, 0};
    enum cudaMemAccessFlags f = cudaMemAccessFlagsProtNone;
    RT(cudaMemPoolGetAccess(&f, pool, &loc));
    CHECK_EQ(f, cudaMemAccessFlagsProtReadWrite);
    struct cudaMemAccessDesc none = {{cudaMemLocationTypeDevice, 0}, cudaMemAccessFlagsProtNone};
    EXPECT(cudaMemPoolSetAccess(pool, &none, 1), cudaErrorInvalidValue); /* its own device */
    int fd = -1;
    EXPECT(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
           cudaErrorInvalidValue); /* the default pool does not share */
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location = loc;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    cudaMemPool_t own, imported;
    RT(cudaMemPoolCreate(&own, &props));
    RT(cudaMemPoolExportToShareableHandle(&fd, own, cudaMemHandleTypePosixFileDescriptor, 0));
    RT(cudaMemPoolImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                            cudaMemHandleTypePosixFileDescriptor, 0));
    void *p = NULL, *q = NULL;
    RT(cudaMallocFromPoolAsync(&p, 4096, own, s));
    struct cudaMemPoolPtrExportData data;
    RT(cudaMemPoolExportPointer(&data, p));
    RT(cudaMemPoolImportPointer(&q, imported, &data)); /* its own pool: a second mapping */
    CHECK(q != NULL && q != p);
    EXPECT(cudaMemPoolImportPointer(NULL, imported, &data), cudaErrorInvalidValue);
    RT(cudaFree(q));
    RT(cudaFreeAsync(p, s));
    RT(cudaStreamSynchronize(s));
    RT(cudaMemPoolDestroy(imported));
    RT(cudaMemPoolDestroy(own));
    close(fd);
    cudaEvent_t e, plain;
    RT(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
    RT(cudaEventCreate(&plain));
    cudaIpcEventHandle_t eh;
    EXPECT(cudaIpcGetEventHandle(&eh, plain), cudaErrorInvalidValue);
    EXPECT(cudaIpcGetEventHandle(NULL, e), cudaErrorInvalidValue);
    RT(cudaIpcGetEventHandle(&eh, e));
    cudaEvent_t opened;
    EXPECT(cudaIpcOpenEventHandle(&opened, eh), cudaErrorDeviceUninitialized); /* own process */
    EXPECT(cudaIpcOpenEventHandle(NULL, eh), cudaErrorInvalidValue);
    RT(cudaEventDestroy(e));
    RT(cudaEventDestroy(plain));
    /* graph memory: an allocation node's memory exists from the launch */
    cudaGraph_t g;
    RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    RT(cudaMallocAsync(&p, MiB, s));
    RT(cudaFreeAsync(p, s));
    RT(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    RT(cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    RT(cudaGraphLaunch(x, s));
    RT(cudaStreamSynchronize(s));
    unsigned long long reserved = 0, zero = 0;
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    CHECK_EQ(reserved, 2 * MiB);
    RT(cudaDeviceGraphMemTrim(0));
    RT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    CHECK_EQ(reserved, 0);
    RT(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero));
    EXPECT(cudaDeviceGraphMemTrim(5), cudaErrorInvalidDevice);
    EXPECT(cudaDeviceGetGraphMemAttribute(5, cudaGraphMemAttrReservedMemCurrent, &reserved),
           cudaErrorInvalidDevice);
    EXPECT(cudaDeviceSetGraphMemAttribute(-1, cudaGraphMemAttrReservedMemHigh, &zero),
           cudaErrorInvalidDevice);
    RT(cudaGraphExecDestroy(x));
    RT(cudaGraphDestroy(g));
    RT(cudaStreamDestroy(s));
    (void)cudaGetLastError();
}

static void test_device_reset(void)
{
    void *p[3];
    struct tessera_sim_counters c0 = rt_counters(0);
    for (int i = 0; i < 3; i++)
        RT(cudaMalloc(&p[i], MiB));
    cudaStream_t s;
    RT(cudaStreamCreate(&s));
    CHECK_EQ(rt_counters(0).live_allocations, c0.live_allocations + 3);
    RT(cudaDeviceReset());
    struct tessera_sim_counters c1 = rt_counters(0);
    CHECK_EQ(c1.live_allocations, 0);
    CHECK_EQ(c1.implicit_frees, c0.implicit_frees + c0.live_allocations + 3);
    CHECK_EQ(c1.bytes_in_use, 0);
    size_t free_b, total_b;
    RT(cudaMemGetInfo(&free_b, &total_b)); /* the context comes back on the next call */
    CHECK_EQ(free_b, total_b);
    EXPECT(cudaFree(p[0]), cudaErrorInvalidValue);
    EXPECT(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    void *q;
    RT(cudaMalloc(&q, MiB));
    RT(cudaFree(q));

    /* a reset through the driver API behind the runtime's back: the runtime starts the
     * primary context again (what the real one does on an H100) */
    CUresult (*reset)(CUdevice) = NULL;
    enum cudaDriverEntryPointQueryResult qs;
    RT(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxReset", (void **)&reset, 11000,
                                        cudaEnableDefault, &qs));
    CHECK(reset != NULL);
    RT(cudaMalloc(&q, MiB));
    CHECK_EQ(reset(0), 0);
    CHECK_EQ(rt_counters(0).live_allocations, 0);
    EXPECT(cudaFree(q), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT(cudaMalloc(&q, MiB));
    RT(cudaFree(q));
}

static void fault_mode(void)
{
    /* TESSERA_SIM_FAIL_ALLOC_AFTER=2: the driver's OOM surfaces as cudaErrorMemoryAllocation */
    void *a, *b, *c;
    RT(cudaMalloc(&a, 100));
    EXPECT(cudaMalloc(&b, 100), cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    RT(cudaMalloc(&c, 100));
    EXPECT(cudaGetLastError(), cudaSuccess);
    CHECK_EQ(rt_counters(0).failed_allocs, 1);
    RT(cudaFree(a));
    RT(cudaFree(c));
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc > 1 && strcmp(argv[1], "fault") == 0) {
        RUN(fault_mode);
        return 0;
    }
    RUN(test_versions_and_device);
    RUN(test_last_error);
    RUN(test_malloc_free);
    RUN(test_copies);
    RUN(test_streams_events);
    RUN(test_capture);
    RUN(test_ipc_and_entry_points);
    RUN(test_sharing_and_settings);
    RUN(test_device_reset);
    return 0;
}
