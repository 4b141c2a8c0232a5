/* Capacity accounting: 2 MiB pages, cuMemGetInfo, out of memory, first fit, contexts.
 * Run with TESSERA_SIM_MEMORY=1G TESSERA_SIM_DEVICES=2. */
#include <string.h>
#include <sys/wait.h>

#include "drv.h"

static void test_before_init(void)
{
    CUdeviceptr p;
    EXPECT(cuMemAlloc(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    int v = 0;
    CU(cuDriverGetVersion(&v)); /* works before cuInit */
    CHECK_EQ(v, 13000);
    EXPECT(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

static void test_device_properties(void)
{
    drv_setup(0);
    int n = 0;
    CU(cuDeviceGetCount(&n));
    CHECK_EQ(n, 2);
    char name[128];
    CU(cuDeviceGetName(name, sizeof name, 0));
    CHECK(strstr(name, "H100") != NULL);
    size_t total = 0;
    CU(cuDeviceTotalMem(&total, 1));
    CHECK_EQ(total, GiB);
    int v = 0;
    CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    CHECK_EQ(v, 9);
    CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CHECK_EQ(v, 132);
    CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
    CHECK_EQ(v, 1);
    EXPECT(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    CUdevice d;
    EXPECT(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    CUuuid a, b;
    CU(cuDeviceGetUuid(&a, 0));
    CU(cuDeviceGetUuid(&b, 1));
    CHECK(memcmp(&a, &b, sizeof a) != 0);
}

static void test_fill_until_oom(void)
{
    drv_setup(0);
    size_t free_b = 0, total_b = 0;
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(total_b, GiB);
    CHECK_EQ(free_b, GiB);
    struct tessera_sim_counters c0 = counters(0);
    CHECK_EQ(c0.total_bytes, GiB);
    CHECK_EQ(c0.bytes_in_use, 0);

    EXPECT(cuMemAlloc(NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr p[16];
    EXPECT(cuMemAlloc(&p[0], 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAlloc(&p[0], SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuMemAlloc(&p[0], GiB + 1), CUDA_ERROR_OUT_OF_MEMORY);

    /* 100 MiB = 50 pages; 512 pages fit 10 of them */
    int n = 0;
    for (;;) {
        CUresult r = cuMemAlloc(&p[n], 100 * MiB);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            break;
        CU(r);
        CHECK_EQ(p[n] % (2 * MiB), 0);
        if (n)
            CHECK_EQ(p[n], p[n - 1] + 100 * MiB); /* address-ordered first fit */
        n++;
        CU(cuMemGetInfo(&free_b, &total_b));
        CHECK_EQ(free_b, GiB - (size_t)n * 100 * MiB);
        CHECK(n < 16);
    }
    CHECK_EQ(n, 10);
    /* device memory is host memory: readable and writable after the allocation */
    for (int i = 0; i < n; i++) {
        volatile unsigned char *q = (volatile unsigned char *)(uintptr_t)p[i];
        q[0] = (unsigned char)i;
        q[100 * MiB - 1] = (unsigned char)i;
        CHECK_EQ(q[0], i);
    }
    struct tessera_sim_counters c = counters(0);
    CHECK_EQ(c.alloc_calls, 10);
    CHECK_EQ(c.live_allocations, 10);
    CHECK_EQ(c.failed_allocs, 3);
    CHECK_EQ(c.bytes_in_use, 500 * 2 * MiB);

    /* 12 pages left: 24 MiB fits, then not even one byte */
    CU(cuMemAlloc(&p[n++], 24 * MiB));
    CUdeviceptr x;
    EXPECT(cuMemAlloc(&x, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, 0);
    c = counters(0);
    CHECK_EQ(c.bytes_in_use, GiB);
    CHECK_EQ(c.peak_bytes_in_use, GiB);

    CU(cuMemFree(0)); /* like the real driver */
    /* only allocation bases can be freed, once */
    EXPECT(cuMemFree(p[0] + 4096), CUDA_ERROR_INVALID_VALUE);
    for (int i = 0; i < n; i++) {
        CU(cuMemFree(p[i]));
        CHECK(!probe_readable((void *)(uintptr_t)p[i])); /* freed memory faults */
    }
    EXPECT(cuMemFree(p[0]), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB);
    c = counters(0);
    CHECK_EQ(c.free_calls, 11);
    CHECK_EQ(c.live_allocations, 0);
    CHECK_EQ(c.peak_live_allocations, 11);
    CHECK_EQ(c.bytes_in_use, 0);

    /* one byte still costs a whole page */
    CU(cuMemAlloc(&x, 1));
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB - 2 * MiB);
    CU(cuMemFree(x));
}

static long rss_shmem_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssShmem: %ld kB", &kib) == 1)
            break;
    fclose(f);
    CHECK(kib >= 0);
    return kib;
}

static void test_memory_goes_back_to_the_host(void)
{
    drv_setup(0);
    long before = rss_shmem_kib();
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 64 * MiB));
    CHECK(rss_shmem_kib() - before < 8 * 1024); /* untouched device memory costs nothing */
    CU(cuMemsetD8(p, 0x11, 64 * MiB));
    CHECK(rss_shmem_kib() - before >= 60 * 1024);
    CU(cuMemFree(p));
    CHECK(rss_shmem_kib() - before < 8 * 1024); /* freed pages are given back */
    CU(cuMemAlloc(&p, 64 * MiB));
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[12345], 0); /* and come back zeroed */
    CU(cuMemFree(p));
}

static void test_first_fit_and_ranges(void)
{
    drv_setup(0);
    CUdeviceptr a, b, c, d, e;
    CU(cuMemAlloc(&a, 2 * MiB));
    CU(cuMemAlloc(&b, 4 * MiB));
    CU(cuMemAlloc(&c, 3 * MiB)); /* 2 pages */
    CHECK_EQ(b, a + 2 * MiB);
    CHECK_EQ(c, b + 4 * MiB);
    CU(cuMemFree(b));
    CU(cuMemAlloc(&d, 1000));
    CHECK_EQ(d, b); /* lowest hole */
    CU(cuMemAlloc(&e, 4 * MiB));
    CHECK_EQ(e, c + 4 * MiB); /* the 2 MiB left in the hole is too small */

    CUdeviceptr base;
    size_t size;
    CU(cuMemGetAddressRange(&base, &size, c + 12345));
    CHECK_EQ(base, c);
    CHECK_EQ(size, 3 * MiB);
    EXPECT(cuMemGetAddressRange(&base, &size, c + 3 * MiB + 1), CUDA_ERROR_NOT_FOUND);

    unsigned int type = 0;
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    int ord = -1;
    CU(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    CHECK_EQ(ord, 0);
    CUcontext ctx = NULL, cur = NULL;
    CU(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    CU(cuCtxGetCurrent(&cur));
    CHECK(ctx == cur);
    void *start = NULL;
    size_t rsize = 0;
    CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 999));
    CU(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 999));
    CHECK_EQ((uintptr_t)start, d);
    CHECK_EQ(rsize, 1000);
    int host_var = 0;
    EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&host_var),
           CUDA_ERROR_INVALID_VALUE);
    /* cuPointerGetAttributes reports unknown memory instead of failing */
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
    CUdeviceptr dp = 1;
    type = 7;
    void *data[] = {&type, &dp};
    CU(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)(uintptr_t)&host_var));
    CHECK_EQ(type, 0);
    CHECK_EQ(dp, 0);
    CUpointer_attribute more[] = {CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *hp = NULL;
    ord = 0;
    void *mdata[] = {&hp, &ord};
    CU(cuPointerGetAttributes(2, more, mdata, (CUdeviceptr)(uintptr_t)&host_var));
    CHECK(hp == &host_var); /* values a real H100 driver reports */
    CHECK_EQ(ord, -2);
    CU(cuPointerGetAttributes(2, attrs, data, e + 5));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(dp, e + 5);

    /* pinned host memory */
    void *h = NULL;
    CU(cuMemHostAlloc(&h, 5000, CU_MEMHOSTALLOC_PORTABLE));
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
    CHECK_EQ(type, CU_MEMORYTYPE_HOST);
    memset(h, 0x3c, 5000);
    CU(cuMemcpyHtoD(d, h, 1000));
    CHECK_EQ(((unsigned char *)(uintptr_t)d)[999], 0x3c);
    EXPECT(cuMemFreeHost((char *)h + 1), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFreeHost(h));
    EXPECT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    h = (void *)1;
    CU(cuMemHostAlloc(&h, 0, 0)); /* zero bytes: success, NULL (real driver) */
    CHECK(h == NULL);

    CU(cuMemFree(a));
    CU(cuMemFree(c));
    CU(cuMemFree(d));
    CU(cuMemFree(e));
}

static void test_devices_and_contexts(void)
{
    drv_setup(0);
    CUdeviceptr p0;
    CU(cuMemAlloc(&p0, 10 * MiB));
    CUcontext c1;
    CU(cuDevicePrimaryCtxRetain(&c1, 1));
    CU(cuCtxPushCurrent(c1));
    CUdevice dev = -1;
    CU(cuCtxGetDevice(&dev));
    CHECK_EQ(dev, 1);
    CUdeviceptr p1;
    CU(cuMemAlloc(&p1, 6 * MiB));
    int ord = -1;
    CU(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p1));
    CHECK_EQ(ord, 1);
    size_t free_b, total_b;
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB - 6 * MiB); /* per device */
    CHECK_EQ(counters(1).bytes_in_use, 6 * MiB);
    CHECK_EQ(counters(0).bytes_in_use, 10 * MiB);
    CHECK(p1 >= p0 + 2 * GiB || p0 >= p1 + 2 * GiB); /* disjoint device ranges */

    /* a driver-API context owns its allocations: they die with it */
    CUcontext own;
    CU(cuCtxCreate(&own, NULL, 0, 1));
    CUcontext cur;
    CU(cuCtxGetCurrent(&cur));
    CHECK(cur == own);
    CUdeviceptr q;
    CU(cuMemAlloc(&q, 20 * MiB));
    CHECK_EQ(counters(1).live_allocations, 2);
    CU(cuCtxDestroy(own));
    CU(cuCtxGetCurrent(&cur));
    CHECK(cur == c1); /* destroying the current context popped it */
    struct tessera_sim_counters c = counters(1);
    CHECK_EQ(c.live_allocations, 1);
    CHECK_EQ(c.implicit_frees, 1);
    CHECK_EQ(c.bytes_in_use, 6 * MiB);
    unsigned int type;
    EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCtxDestroy(own), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    EXPECT(cuCtxPushCurrent(own), CUDA_ERROR_INVALID_CONTEXT);

    /* primary context reset frees everything of that context */
    CU(cuDevicePrimaryCtxReset(1));
    unsigned flags;
    int active = 1;
    CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK_EQ(active, 0);
    c = counters(1);
    CHECK_EQ(c.live_allocations, 0);
    CHECK_EQ(c.implicit_frees, 2);
    CHECK_EQ(c.bytes_in_use, 0);
    CUdeviceptr z;
    EXPECT(cuMemAlloc(&z, 1), CUDA_ERROR_CONTEXT_IS_DESTROYED); /* c1 is inactive now */
    CU(cuDevicePrimaryCtxRetain(&c1, 1));
    CU(cuMemAlloc(&z, 1));
    CU(cuMemFree(z));
    CU(cuDevicePrimaryCtxRelease(1)); /* last retain: context resources go */
    CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
    CHECK_EQ(active, 0);
    CU(cuCtxPopCurrent(&cur));
    CHECK(cur == c1);
    CU(cuMemFree(p0));
}

static void test_forked_child(void)
{
    /* like the real driver, a fork()ed child of an initialised process cannot use CUDA */
    drv_setup(0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CUdeviceptr p;
        _exit(cuMemAlloc(&p, 1) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
    alarm(60);
    RUN(test_before_init);
    RUN(test_device_properties);
    RUN(test_fill_until_oom);
    RUN(test_memory_goes_back_to_the_host);
    RUN(test_first_fit_and_ranges);
    RUN(test_devices_and_contexts);
    RUN(test_forked_child);
    return 0;
}
