/* Modules (loaded and checked, their kernels found by name, launched like any kernel), context
 * limits, stream attributes and the persisting L2 reset: what the driver answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drv.h"

/* the per-thread default stream variants, which cuda.h declares only for
 * CUDA_API_PER_THREAD_DEFAULT_STREAM builds */
CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                           const CUstreamAttrValue *value);
CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                           CUstreamAttrValue *value_out);

static const char ptx[] = ".version 7.0\n"
                          ".target sm_70\n"
                          ".address_size 64\n"
                          ".visible .entry touch(.param .u64 p)\n"
                          "{\n  ret;\n}\n"
                          ".entry\tsecond_one (.param .u32 n)\n"
                          "{\n  ret;\n}\n";

static void test_modules(void)
{
    CUmodule m;
    CUfunction f, f2, again;
    CU(cuModuleLoadData(&m, ptx));
    CU(cuModuleGetFunction(&f, m, "touch"));
    CU(cuModuleGetFunction(&f2, m, "second_one"));
    CU(cuModuleGetFunction(&again, m, "touch"));
    CHECK(f == again && f != f2);
    EXPECT(cuModuleGetFunction(&f, m, "touc"), CUDA_ERROR_NOT_FOUND);   /* a prefix */
    EXPECT(cuModuleGetFunction(&f, m, "second"), CUDA_ERROR_NOT_FOUND); /* of a longer name */
    EXPECT(cuModuleGetFunction(&f, m, ".version"), CUDA_ERROR_NOT_FOUND);
    EXPECT(cuModuleGetFunction(NULL, m, "touch"), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuModuleGetFunction(&f, m, NULL), CUDA_ERROR_INVALID_VALUE);
    /* a launch is ordered work that computes nothing */
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CUdeviceptr d;
    CU(cuMemAlloc(&d, 4));
    void *args[] = {&d};
    CU(cuLaunchKernel(again, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CU(cuStreamSynchronize(s));
    CU(cuModuleUnload(m));
    EXPECT(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuModuleGetFunction(&f, m, "touch"), CUDA_ERROR_INVALID_HANDLE);

    /* what is not an image for this device */
    EXPECT(cuModuleLoadData(&m, "not a module"), CUDA_ERROR_INVALID_IMAGE);
    EXPECT(cuModuleLoadData(&m, ".version 8.0\n.target sm_100\n.entry k() { ret; }\n"),
           CUDA_ERROR_INVALID_PTX); /* newer than sm_90 */
    EXPECT(cuModuleLoadData(&m, ".version 8.0\n.target compute\n"), CUDA_ERROR_INVALID_PTX);
    EXPECT(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuModuleLoadData(NULL, ptx), CUDA_ERROR_INVALID_VALUE);

    /* options: checked; an empty log and no compile time come back */
    char info[64] = "stale", err[64] = "stale";
    CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_WALL_TIME};
    void *vals[] = {info, (void *)(uintptr_t)sizeof info, err, (void *)(uintptr_t)sizeof err,
                    (void *)(uintptr_t)7};
    CU(cuModuleLoadDataEx(&m, ptx, 5, opts, vals));
    CHECK_EQ(info[0], 0);
    CHECK_EQ(err[0], 0);
    CHECK_EQ((uintptr_t)vals[1], 0);
    CHECK_EQ((uintptr_t)vals[3], 0);
    float wall = 1.0f;
    memcpy(&wall, &vals[4], sizeof wall);
    CHECK(wall == 0.0f);
    CU(cuModuleGetFunction(&f, m, "second_one"));
    CU(cuModuleUnload(m));
    CUjit_option badopt = (CUjit_option)CU_JIT_NUM_OPTIONS;
    void *badval = NULL;
    EXPECT(cuModuleLoadDataEx(&m, ptx, 1, &badopt, &badval), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuModuleLoadDataEx(&m, ptx, 1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL));
    CU(cuModuleUnload(m));

    /* a binary image: its kernels are NUL-delimited names inside it; from a file too */
    static unsigned char elf[256];
    memset(elf, 0, sizeof elf);
    memcpy(elf, "\177ELF", 4);
    elf[4] = 2;
    uint64_t shoff = 192;
    uint16_t shentsize = 64, shnum = 1;
    memcpy(elf + 0x28, &shoff, 8);
    memcpy(elf + 0x3a, &shentsize, 2);
    memcpy(elf + 0x3c, &shnum, 2);
    memcpy(elf + 100, "kern_a\0.text.kern_a", 20);
    CU(cuModuleLoadData(&m, elf));
    CU(cuModuleGetFunction(&f, m, "kern_a"));
    EXPECT(cuModuleGetFunction(&f, m, "kern"), CUDA_ERROR_NOT_FOUND);
    CU(cuModuleUnload(m));
    char path[] = "/tmp/tessera-sim-module.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, elf, sizeof elf) == (ssize_t)sizeof elf);
    close(fd);
    CU(cuModuleLoad(&m, path));
    CU(cuModuleGetFunction(&f, m, "kern_a"));
    CU(cuModuleUnload(m));
    unlink(path);
    EXPECT(cuModuleLoad(&m, path), CUDA_ERROR_FILE_NOT_FOUND);
    EXPECT(cuModuleLoad(&m, "/dev/null"), CUDA_ERROR_INVALID_IMAGE);
    /* a module needs a context */
    CUcontext cur;
    CU(cuCtxPopCurrent(&cur));
    EXPECT(cuModuleLoadData(&m, ptx), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxPushCurrent(cur));
    CU(cuMemFree(d));
    CU(cuStreamDestroy(s));
}

static size_t limit(CUlimit l)
{
    size_t v = 12345;
    CU(cuCtxGetLimit(&v, l));
    return v;
}

static void test_limits(void)
{
    /* an H100's defaults */
    CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 1024);
    CHECK_EQ(limit(CU_LIMIT_PRINTF_FIFO_SIZE), 1 << 20);
    CHECK_EQ(limit(CU_LIMIT_MALLOC_HEAP_SIZE), 8 << 20);
    CHECK_EQ(limit(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT), 2048);
    CHECK_EQ(limit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY), 64);
    CHECK_EQ(limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), 0);
    CHECK_EQ(limit(CU_LIMIT_CIG_ENABLED), 0);
    CHECK_EQ(limit(CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED), 1);
    int optin = 0;
    CU(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
    CHECK_EQ(limit(CU_LIMIT_SHMEM_SIZE), optin);
    /* set and read back */
    CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
    CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 << 20));
    CU(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 128));
    CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 4096);
    CHECK_EQ(limit(CU_LIMIT_MALLOC_HEAP_SIZE), 64 << 20);
    CHECK_EQ(limit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY), 128);
    CHECK_EQ(limit(CU_LIMIT_PRINTF_FIFO_SIZE), 1 << 20); /* the others keep theirs */
    /* the persisting L2 size is clamped to the device's */
    int max = 0;
    CU(cuDeviceGetAttribute(&max, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 0));
    CU(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (size_t)max / 2));
    CHECK_EQ(limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), max / 2);
    CU(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (size_t)max + 1));
    CHECK_EQ(limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE), max);
    CU(cuCtxResetPersistingL2Cache());
    /* refused */
    size_t v;
    EXPECT(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 129), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCtxSetLimit(CU_LIMIT_SHMEM_SIZE, 1024), CUDA_ERROR_INVALID_VALUE); /* read-only */
    EXPECT(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4), CUDA_ERROR_UNSUPPORTED_LIMIT);
    EXPECT(cuCtxGetLimit(&v, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH), CUDA_ERROR_UNSUPPORTED_LIMIT);
    EXPECT(cuCtxGetLimit(&v, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
    EXPECT(cuCtxSetLimit(CU_LIMIT_MAX, 1), CUDA_ERROR_UNSUPPORTED_LIMIT);
    EXPECT(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(limit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY), 128); /* a refused set changes nothing */
    /* per context: another context starts from the defaults */
    CUcontext cur, own;
    CU(cuCtxGetCurrent(&cur));
    CU(cuCtxCreate(&own, NULL, 0, 0));
    CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 1024);
    CU(cuCtxDestroy(own));
    CU(cuCtxSetCurrent(cur));
    CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 4096);
    /* and a reset primary context does too */
    CU(cuDevicePrimaryCtxReset(0));
    CUcontext again;
    CU(cuDevicePrimaryCtxRetain(&again, 0));
    CU(cuCtxSetCurrent(again));
    CHECK_EQ(limit(CU_LIMIT_STACK_SIZE), 1024);
    CU(cuCtxSetCurrent(NULL));
    EXPECT(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxResetPersistingL2Cache(), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxSetCurrent(again));
}

static void test_stream_attributes(void)
{
    CUstream s;
    CU(cuStreamCreateWithPriority(&s, 0, -2));
    CUstreamAttrValue v;
    memset(&v, 0x5a, sizeof v);
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CHECK(v.accessPolicyWindow.base_ptr == NULL && v.accessPolicyWindow.num_bytes == 0);
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    CHECK_EQ(v.syncPolicy, CU_SYNC_POLICY_AUTO);
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK_EQ(v.priority, -2);
    int maxwin = 0;
    CU(cuDeviceGetAttribute(&maxwin, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 0));
    CUstreamAttrValue w;
    memset(&w, 0, sizeof w);
    w.accessPolicyWindow.base_ptr = (void *)0x1000;
    w.accessPolicyWindow.num_bytes = (size_t)maxwin;
    w.accessPolicyWindow.hitRatio = 0.6f;
    w.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    w.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &w));
    memset(&v, 0, sizeof v);
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CHECK(v.accessPolicyWindow.base_ptr == (void *)0x1000);
    CHECK_EQ(v.accessPolicyWindow.num_bytes, maxwin);
    CHECK(v.accessPolicyWindow.hitRatio == 0.6f);
    CHECK_EQ(v.accessPolicyWindow.hitProp, CU_ACCESS_PROPERTY_PERSISTING);
    CHECK_EQ(v.accessPolicyWindow.missProp, CU_ACCESS_PROPERTY_STREAMING);
    /* refused windows change nothing */
    CUstreamAttrValue bad = w;
    bad.accessPolicyWindow.num_bytes = (size_t)maxwin + 1;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &bad),
           CUDA_ERROR_INVALID_VALUE);
    bad = w;
    bad.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &bad),
           CUDA_ERROR_INVALID_VALUE);
    bad.accessPolicyWindow.hitRatio = -0.1f;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &bad),
           CUDA_ERROR_INVALID_VALUE);
    bad = w;
    bad.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_PERSISTING;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &bad),
           CUDA_ERROR_INVALID_VALUE);
    bad = w;
    bad.accessPolicyWindow.hitProp = (CUaccessProperty)3;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &bad),
           CUDA_ERROR_INVALID_VALUE);
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CHECK_EQ(v.accessPolicyWindow.num_bytes, maxwin);
    /* the synchronisation policy and the priority */
    CUstreamAttrValue p;
    memset(&p, 0, sizeof p);
    p.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
    CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &p));
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    CHECK_EQ(v.syncPolicy, CU_SYNC_POLICY_BLOCKING_SYNC);
    p.syncPolicy = (CUsynchronizationPolicy)5;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &p),
           CUDA_ERROR_INVALID_VALUE);
    p.syncPolicy = (CUsynchronizationPolicy)0;
    EXPECT(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &p),
           CUDA_ERROR_INVALID_VALUE);
    p.priority = -9;
    CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &p));
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK_EQ(v.priority, -5); /* clamped to the device's range */
    p.priority = 3;
    CU(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &p));
    CU(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CHECK_EQ(v.priority, 0);
    EXPECT(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuStreamGetAttribute((CUstream)&v, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v),
           CUDA_ERROR_INVALID_HANDLE);
    /* the per-thread default stream has attributes of its own */
    CU(cuStreamSetAttribute_ptsz(CU_STREAM_PER_THREAD, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
                                 &w));
    CU(cuStreamGetAttribute(NULL, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CHECK_EQ(v.accessPolicyWindow.num_bytes, 0); /* the legacy stream's */
    CU(cuStreamGetAttribute_ptsz(NULL, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CHECK_EQ(v.accessPolicyWindow.num_bytes, maxwin);
    CU(cuStreamDestroy(s));
}

static void test_peer_capability(void)
{
    int can = -1;
    CU(cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK_EQ(can, 0);
    EXPECT(cuDeviceCanAccessPeer(&can, 0, 1), CUDA_ERROR_INVALID_DEVICE); /* one device */
    EXPECT(cuDeviceCanAccessPeer(&can, -1, 0), CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceCanAccessPeer(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
    alarm(60);
    drv_setup(0);
    RUN(test_modules);
    RUN(test_limits);
    RUN(test_stream_attributes);
    RUN(test_peer_capability);
    return 0;
}
