/* Driver entry points that NVIDIA's samples and HAMi-core's tests use: registered host memory,
 * mapped device pointers, managed memory, arrays, the default pool's attributes, profiler
 * start/stop, stream callbacks and peer copies, each with the driver's error codes.
 * Run with 2 devices of 1 GiB. */
#include <cudaProfiler.h>
#include <stdbool.h>

#include "drv.h"

static void test_host_register(void)
{
    size_t n = 3 * 4096 + 100;
    unsigned char *buf = malloc(n);
    CHECK(buf);
    memset(buf, 0x11, n);
    EXPECT(cuMemHostRegister_v2(NULL, n, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostRegister_v2(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostRegister_v2(buf, n, 0x100), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemHostRegister_v2(buf, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    /* any overlap with a registered range */
    EXPECT(cuMemHostRegister_v2(buf + 10, 20, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    /* pinned now: pointer queries and mapped device pointers see it */
    unsigned type = 0;
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(buf + 5)));
    CHECK_EQ(type, CU_MEMORYTYPE_HOST);
    CUdeviceptr d = 0;
    CU(cuMemHostGetDevicePointer_v2(&d, buf + 7, 0));
    CHECK_EQ(d, (uintptr_t)(buf + 7)); /* unified addressing */
    EXPECT(cuMemHostGetDevicePointer_v2(&d, buf, 1), CUDA_ERROR_INVALID_VALUE);
    /* the device writes it, the host reads it */
    CUdeviceptr dev;
    CU(cuMemAlloc(&dev, n));
    CU(cuMemsetD8(dev, 0x5a, n));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemcpyDtoHAsync(buf, dev, n, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(buf[0], 0x5a);
    CHECK_EQ(buf[n - 1], 0x5a);
    /* freed only by unregistering, at its base */
    EXPECT(cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemHostUnregister(buf + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU(cuMemHostUnregister(buf));
    EXPECT(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    EXPECT(cuMemHostGetDevicePointer_v2(&d, buf, 0), CUDA_ERROR_INVALID_VALUE);
    /* device memory is not the host's to register; allocated pinned memory not to unregister */
    EXPECT(cuMemHostRegister_v2((void *)(uintptr_t)dev, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    void *pinned;
    CU(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CU(cuMemHostGetDevicePointer_v2(&d, pinned, 0));
    CHECK_EQ(d, (uintptr_t)pinned);
    EXPECT(cuMemHostUnregister(pinned), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CU(cuMemFreeHost(pinned));
    CU(cuStreamDestroy(s));
    CU(cuMemFree(dev));
    free(buf);
}

static void test_managed(void)
{
    struct tessera_sim_counters before = counters(0);
    CUdeviceptr p;
    EXPECT(cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocManaged(&p, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemAllocManaged(&p, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
    /* counted against the device like cuMemAlloc: two 2 MiB pages */
    struct tessera_sim_counters c = counters(0);
    CHECK_EQ(c.bytes_in_use - before.bytes_in_use, 4 * MiB);
    CHECK_EQ(c.live_allocations - before.live_allocations, 1);
    size_t fr, tot;
    CU(cuMemGetInfo(&fr, &tot));
    CHECK_EQ(tot - fr, c.bytes_in_use);
    /* the host reaches it directly */
    unsigned char *h = (unsigned char *)(uintptr_t)p;
    h[0] = 7;
    h[3 * MiB - 1] = 9;
    CU(cuMemsetD8(p + 1, 3, 10));
    CHECK_EQ(h[0], 7);
    CHECK_EQ(h[1], 3);
    bool managed = false;
    CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    CHECK(managed);
    void *hp = NULL;
    CU(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, p));
    CHECK(hp == h);
    CUdeviceptr plain;
    CU(cuMemAlloc(&plain, 4096));
    CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
    CHECK(!managed);
    CU(cuMemFree(plain));
    /* out of memory like any allocation */
    CUdeviceptr big;
    EXPECT(cuMemAllocManaged(&big, 2 * GiB, CU_MEM_ATTACH_HOST), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(big, 0);
    /* hints: checked, then nothing to migrate; prefetch and attach are stream work */
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemLocation dev1 = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1};
    CUmemLocation host = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0};
    CUmemLocation nodev = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 9};
    CU(cuMemPrefetchAsync(p, 3 * MiB, dev1, 0, s));
    CU(cuMemPrefetchAsync(p + 4096, 4096, host, 0, s));
    EXPECT(cuMemPrefetchAsync(p, 3 * MiB + 1, dev1, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(p, 4096, nodev, 0, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(p, 4096, dev1, 1, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPrefetchAsync(plain, 4096, dev1, 0, s), CUDA_ERROR_INVALID_VALUE); /* freed */
    CU(cuMemAdvise(p, 3 * MiB, CU_MEM_ADVISE_SET_READ_MOSTLY, nodev)); /* location ignored */
    CU(cuMemAdvise(p, 4096, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev1));
    CU(cuMemAdvise(p, 4096, CU_MEM_ADVISE_SET_ACCESSED_BY, host));
    EXPECT(cuMemAdvise(p, 4096, CU_MEM_ADVISE_SET_ACCESSED_BY, nodev), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuMemAdvise(p, 4096, (CUmem_advise)9, dev1), CUDA_ERROR_INVALID_VALUE);
    CU(cuStreamAttachMemAsync(s, p, 0, CU_MEM_ATTACH_SINGLE));
    CU(cuStreamAttachMemAsync(s, p, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
    EXPECT(cuStreamAttachMemAsync(s, p + 4096, 0, CU_MEM_ATTACH_HOST), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, p, 4096, CU_MEM_ATTACH_HOST), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAttachMemAsync(s, p, 0, 8), CUDA_ERROR_INVALID_VALUE);
    CU(cuStreamSynchronize(s));
    CU(cuStreamDestroy(s));
    CHECK_EQ(h[0], 7); /* nothing moved or changed */
    EXPECT(cuMemFree(p + 1), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree(p));
    CHECK_EQ(counters(0).bytes_in_use, before.bytes_in_use);
}

static void test_arrays(void)
{
    struct tessera_sim_counters before = counters(0);
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 1000, .Height = 600,
                               .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
    CUarray a;
    CU(cuArrayCreate_v2(&a, &d));
    /* 1000 x 600 x 16 bytes = 9.15 MiB: five pages */
    CHECK_EQ(counters(0).bytes_in_use - before.bytes_in_use, 10 * MiB);
    /* an array is not a cuMemAlloc allocation */
    EXPECT(cuMemFree((CUdeviceptr)(uintptr_t)a), CUDA_ERROR_INVALID_VALUE);
    CU(cuArrayDestroy(a));
    EXPECT(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ(counters(0).bytes_in_use, before.bytes_in_use);
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    EXPECT(cuArrayDestroy((CUarray)(uintptr_t)p), CUDA_ERROR_INVALID_HANDLE);
    CU(cuMemFree(p));
    d.NumChannels = 3;
    EXPECT(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
    d.NumChannels = 1;
    d.Width = 0;
    EXPECT(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
    d.Width = 16;
    d.Height = 0; /* one-dimensional */
    d.Format = (CUarray_format)0x77;
    EXPECT(cuArrayCreate_v2(&a, &d), CUDA_ERROR_INVALID_VALUE);
    d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    CU(cuArrayCreate_v2(&a, &d));
    CU(cuArrayDestroy(a));
    EXPECT(cuArrayCreate_v2(&a, NULL), CUDA_ERROR_INVALID_VALUE);
}

static uint64_t pool_u64(CUmemoryPool pool, CUmemPool_attribute attr)
{
    uint64_t v = 0xdead;
    CU(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static void test_default_pool(void)
{
    CUmemoryPool pool, pool1;
    CU(cuDeviceGetDefaultMemPool(&pool, 0));
    CU(cuDeviceGetDefaultMemPool(&pool1, 1));
    CHECK(pool != pool1);
    EXPECT(cuDeviceGetDefaultMemPool(&pool1, 5), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
    uint64_t t = UINT64_MAX;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
    CHECK(pool_u64(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == UINT64_MAX);
    CHECK_EQ(pool_u64(pool1, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0); /* per device */
    int reuse = -1;
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    CHECK_EQ(reuse, 1);
    reuse = 0;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    reuse = -1;
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    CHECK_EQ(reuse, 0);
    /* usage follows cuMemAllocAsync */
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CU(cuMemAllocAsync(&a, 3 * MiB, s));
    CU(cuMemAllocAsync(&b, 1000, s));
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 3 * MiB + 1000);
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 6 * MiB);
    CU(cuMemFreeAsync(a, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1000);
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * MiB + 1000);
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6 * MiB);
    CHECK_EQ(pool_u64(pool1, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0);
    /* the high marks reset to 0 only, and come down to what is used now */
    uint64_t v = 5;
    EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v), CUDA_ERROR_INVALID_VALUE);
    v = 0;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v));
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 1000);
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 2 * MiB);
    /* current usage is read-only; unknown pools and attributes are invalid */
    EXPECT(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute(pool, (CUmemPool_attribute)99, &v), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolGetAttribute((CUmemoryPool)&v, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v),
           CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFreeAsync(b, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    t = 0;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
    reuse = 1;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    CU(cuStreamDestroy(s));
}

static void test_profiler(void)
{
    CU(cuProfilerStart());
    CU(cuProfilerStop());
    CUcontext cur;
    CU(cuCtxPopCurrent(&cur));
    EXPECT(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxPushCurrent(cur));
}

static int order[4], norder;
static CUstream cb_stream;
static void CUDA_CB on_done(CUstream s, CUresult status, void *data)
{
    CHECK(s == cb_stream);
    CHECK_EQ(status, CUDA_SUCCESS);
    /* what the memset before it wrote is there */
    CHECK_EQ(*(unsigned char *)data, 0x42);
    order[norder++] = 1;
    /* no blocking call from a callback */
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_NOT_PERMITTED);
}
static void CUDA_CB after(void *data)
{
    (void)data;
    order[norder++] = 2;
}

static void test_stream_callback(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 64));
    CU(cuStreamCreate(&cb_stream, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD8Async(p, 0x42, 64, cb_stream));
    CU(cuStreamAddCallback(cb_stream, on_done, (void *)(uintptr_t)p, 0));
    CU(cuLaunchHostFunc(cb_stream, after, NULL));
    EXPECT(cuStreamAddCallback(cb_stream, on_done, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamAddCallback(cb_stream, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cuStreamSynchronize(cb_stream));
    CHECK_EQ(norder, 2);
    CHECK_EQ(order[0], 1);
    CHECK_EQ(order[1], 2);
    CU(cuStreamDestroy(cb_stream));
    CU(cuMemFree(p));
}

static void test_peer_copy(void)
{
    CUcontext c0 = NULL, c1;
    CU(cuCtxGetCurrent(&c0));
    CU(cuDevicePrimaryCtxRetain(&c1, 1));
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, 1 << 20));
    CU(cuCtxSetCurrent(c1));
    CU(cuMemAlloc(&b, 1 << 20));
    CU(cuMemsetD8(b, 0, 1 << 20));
    CU(cuCtxSetCurrent(c0));
    CU(cuMemsetD8(a, 0x3c, 1 << 20));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemcpyPeerAsync(b, c1, a, c0, 1 << 20, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(((unsigned char *)(uintptr_t)b)[(1 << 20) - 1], 0x3c);
    EXPECT(cuMemcpyPeerAsync(b, NULL, a, c0, 16, s), CUDA_ERROR_INVALID_CONTEXT);
    /* past the end of the destination allocation */
    EXPECT(cuMemcpyPeerAsync(b + 16, c1, a, c0, 1 << 20, s), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemsetD8(a, 0x11, 16));
    CU(cuMemcpyPeer(b, c1, a, c0, 16));
    CHECK_EQ(((unsigned char *)(uintptr_t)b)[15], 0x11);
    CU(cuStreamDestroy(s));
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    CU(cuDevicePrimaryCtxRelease(1));
}

int main(void)
{
    alarm(60);
    drv_setup(0);
    RUN(test_host_register);
    RUN(test_managed);
    RUN(test_arrays);
    RUN(test_default_pool);
    RUN(test_profiler);
    RUN(test_stream_callback);
    RUN(test_peer_copy);
    return 0;
}
