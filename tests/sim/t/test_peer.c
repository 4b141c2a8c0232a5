/* Peer access: cuCtxEnablePeerAccess / cuCtxDisablePeerAccess, per-device cuMemSetAccess and
 * tessera_sim_can_access; with the argument "runtime", cudaDevice{Enable,Disable}PeerAccess
 * through the simulated runtime. Run with TESSERA_SIM_DEVICES=2, TESSERA_SIM_MEMORY=1G. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "drv.h"

#define N (4 * MiB) /* bytes of every allocation here */

static CUcontext prim0, prim1;

/* allocate n bytes in context c, leaving the current context as it was */
static CUdeviceptr alloc_in(CUcontext c, size_t n)
{
    CUdeviceptr p;
    CU(cuCtxPushCurrent(c));
    CU(cuMemAlloc(&p, n));
    CU(cuCtxPopCurrent(NULL));
    return p;
}

/* a context of device dev, created and taken off this thread's stack again */
static CUcontext ctx_created(int dev)
{
    CUcontext c;
    CU(cuCtxCreate(&c, NULL, 0, dev));
    CU(cuCtxPopCurrent(NULL));
    return c;
}

static void test_before_init(void)
{
    /* no cuInit needed for the introspection, and no device memory yet */
    CHECK_EQ(tessera_sim_can_access(0, 4096, 1), -1);
    CHECK_EQ(tessera_sim_can_access(2, 4096, 1), -1);
    EXPECT(cuCtxEnablePeerAccess(NULL, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT(cuCtxDisablePeerAccess(NULL), CUDA_ERROR_NOT_INITIALIZED);
}

static void test_proc_address(void)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CU(cuGetProcAddress("cuCtxEnablePeerAccess", &fn, 4000, 0, &st));
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(fn == (void *)cuCtxEnablePeerAccess);
    CU(cuGetProcAddress("cuCtxDisablePeerAccess", &fn, 13000, 0, &st));
    CHECK(fn == (void *)cuCtxDisablePeerAccess);
    CU(cuGetProcAddress("cuCtxEnablePeerAccess", &fn, 3020, 0, &st));
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(fn == NULL);
}

static void test_errors(void)
{
    CU(cuInit(0));
    CU(cuDevicePrimaryCtxRetain(&prim0, 0));
    CU(cuDevicePrimaryCtxRetain(&prim1, 1));
    /* no current context */
    EXPECT(cuCtxEnablePeerAccess(prim1, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDisablePeerAccess(prim1), CUDA_ERROR_INVALID_CONTEXT);

    CU(cuCtxSetCurrent(prim0));
    EXPECT(cuCtxEnablePeerAccess(prim1, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuCtxEnablePeerAccess(NULL, 0), CUDA_ERROR_INVALID_CONTEXT);
    int junk[16] = {0};
    EXPECT(cuCtxEnablePeerAccess((CUcontext)junk, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDisablePeerAccess((CUcontext)junk), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxEnablePeerAccess(prim0, 0), CUDA_ERROR_INVALID_DEVICE);
    CUcontext same_dev = ctx_created(0);
    EXPECT(cuCtxEnablePeerAccess(same_dev, 0), CUDA_ERROR_INVALID_DEVICE);

    CU(cuCtxEnablePeerAccess(prim1, 0));
    EXPECT(cuCtxEnablePeerAccess(prim1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    CU(cuCtxDisablePeerAccess(prim1));
    EXPECT(cuCtxDisablePeerAccess(prim1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    EXPECT(cuCtxDisablePeerAccess(prim0), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);

    /* a destroyed peer is invalid, not "destroyed" */
    CUcontext gone = ctx_created(1);
    CU(cuCtxDestroy(gone));
    EXPECT(cuCtxEnablePeerAccess(gone, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT(cuCtxDisablePeerAccess(gone), CUDA_ERROR_INVALID_CONTEXT);

    /* per context: another context of device 0 has its own grants */
    CU(cuCtxEnablePeerAccess(prim1, 0));
    CU(cuCtxPushCurrent(same_dev));
    CU(cuCtxEnablePeerAccess(prim1, 0));
    CU(cuCtxPopCurrent(NULL));
    /* directional: device 1's context towards device 0 is a grant of its own */
    CU(cuCtxPushCurrent(prim1));
    CU(cuCtxEnablePeerAccess(prim0, 0));
    EXPECT(cuCtxEnablePeerAccess(prim0, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    CU(cuCtxDisablePeerAccess(prim0));
    CU(cuCtxPopCurrent(NULL));
    CU(cuCtxDestroy(same_dev));
    CU(cuCtxDisablePeerAccess(prim1));
}

static void test_device_memory(void)
{
    CUcontext own1 = ctx_created(1); /* owns d1: survives a reset of device 1's primary */
    CUdeviceptr d1 = alloc_in(own1, N), d0 = alloc_in(prim0, N);
    CHECK_EQ(tessera_sim_can_access(1, d1, N), 1);
    CHECK_EQ(tessera_sim_can_access(0, d0, N), 1);
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 0);

    CU(cuCtxEnablePeerAccess(prim1, 0)); /* a context of device 1: any of them will do */
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 1);
    CHECK_EQ(tessera_sim_can_access(0, d1 + N - 1, 1), 1);
    CHECK_EQ(tessera_sim_can_access(1, d0, N), 0); /* directional */
    CU(cuCtxDisablePeerAccess(prim1));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 0);

    /* bad arguments */
    CHECK_EQ(tessera_sim_can_access(0, d1, 0), -1);
    CHECK_EQ(tessera_sim_can_access(0, d1, N + 1), -1);      /* past the allocation */
    CHECK_EQ(tessera_sim_can_access(1, d1 + N, 1), -1);      /* after it, unallocated */
    CHECK_EQ(tessera_sim_can_access(2, d1, N), -1);          /* no device 2 */
    CHECK_EQ(tessera_sim_can_access(-1, d1, N), -1);
    CHECK_EQ(tessera_sim_can_access(1, d1, UINT64_MAX), -1); /* wraps */
    char host[16];
    CHECK_EQ(tessera_sim_can_access(0, (uintptr_t)host, sizeof host), -1);

    /* destroying the granting context drops its grant */
    CUcontext own0 = ctx_created(0);
    CU(cuCtxPushCurrent(own0));
    CU(cuCtxEnablePeerAccess(own1, 0));
    CU(cuCtxPopCurrent(NULL));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 1);
    CU(cuCtxDestroy(own0));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 0);

    /* resetting the peer's primary context drops the grants towards it */
    CU(cuCtxEnablePeerAccess(prim1, 0));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 1);
    CU(cuDevicePrimaryCtxReset(1));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 0);
    EXPECT(cuCtxEnablePeerAccess(prim1, 0), CUDA_ERROR_INVALID_CONTEXT); /* not retained */
    CU(cuDevicePrimaryCtxRetain(&prim1, 1));
    CU(cuCtxEnablePeerAccess(prim1, 0)); /* not "already enabled": the grant went */
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 1);

    /* resetting the granting primary context drops its grants too */
    CU(cuDevicePrimaryCtxReset(0));
    CHECK_EQ(tessera_sim_can_access(0, d1, N), 0);
    CU(cuDevicePrimaryCtxRetain(&prim0, 0));
    CU(cuCtxSetCurrent(prim0));
    CU(cuCtxDestroy(own1));
    CHECK_EQ(tessera_sim_can_access(1, d1, N), -1); /* freed with its context */
}

static void test_vmm_memory(void)
{
    CUmemAllocationProp prop = drv_vmm_prop(1);
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, N, &prop, 0));
    CUdeviceptr va; /* [va, va+2M) and [va+2M, va+4M) map h; [va+4M, va+6M) stays a hole */
    CU(cuMemAddressReserve(&va, N + 2 * MiB, 0, 0, 0));
    const size_t half = N / 2;
    CU(cuMemMap(va, half, 0, h, 0));
    CU(cuMemMap(va + half, half, half, h, 0));
    CHECK_EQ(tessera_sim_can_access(1, va, N), 0); /* mapped, no access yet */
    CHECK_EQ(tessera_sim_can_access(1, va, N + 1), -1); /* runs into the hole */
    CHECK_EQ(tessera_sim_can_access(1, va + N, 1), -1);

    drv_set_access(va, N, 1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(tessera_sim_can_access(1, va, N), 1);
    CHECK_EQ(tessera_sim_can_access(0, va, N), 0);
    CHECK(probe_writable((void *)(uintptr_t)va)); /* the host plays device 1 */

    /* peer access does not open cuMemMap memory */
    CU(cuCtxEnablePeerAccess(prim1, 0));
    CHECK_EQ(tessera_sim_can_access(0, va, N), 0);

    /* a later cuMemSetAccess for device 0 adds it, range by range; device 1 keeps its own */
    drv_set_access(va, half, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(tessera_sim_can_access(0, va, half), 1);
    CHECK_EQ(tessera_sim_can_access(0, va, N), 0); /* the second range does not grant it */
    CHECK_EQ(tessera_sim_can_access(1, va, N), 1);
    drv_set_access(va + half, half, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK_EQ(tessera_sim_can_access(0, va + half, half), 0); /* read-only is not enough */
    drv_set_access(va + half, half, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(tessera_sim_can_access(0, va, N), 1);

    /* PROT_NONE takes one device away; the host keeps what the others have */
    drv_set_access(va, N, 1, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CHECK_EQ(tessera_sim_can_access(1, va, N), 0);
    CHECK_EQ(tessera_sim_can_access(0, va, N), 1);
    CHECK(probe_writable((void *)(uintptr_t)va));
    drv_set_access(va, N, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK(probe_readable((void *)(uintptr_t)va));
    CHECK(!probe_writable((void *)(uintptr_t)va));
    drv_set_access(va, N, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CHECK(!probe_readable((void *)(uintptr_t)va));
    CHECK_EQ(tessera_sim_can_access(0, va, N), 0); /* still mapped: 0, not -1 */

    /* two descriptors in one call, each for its device */
    CUmemAccessDesc two[2];
    memset(two, 0, sizeof two);
    for (int i = 0; i < 2; i++) {
        two[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        two[i].location.id = i;
        two[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    CU(cuMemSetAccess(va, N, two, 2));
    CHECK_EQ(tessera_sim_can_access(0, va, N), 1);
    CHECK_EQ(tessera_sim_can_access(1, va, N), 1);
    /* one device named twice: the last descriptor wins */
    two[0].location.id = 1;
    two[1].flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CU(cuMemSetAccess(va, N, two, 2));
    CHECK_EQ(tessera_sim_can_access(1, va, N), 0);
    CHECK_EQ(tessera_sim_can_access(0, va, N), 1);

    CU(cuCtxDisablePeerAccess(prim1));
    CU(cuMemUnmap(va, N));
    CHECK_EQ(tessera_sim_can_access(1, va, half), -1);
    CU(cuMemRelease(h));
    CU(cuMemAddressFree(va, N + 2 * MiB));
}

/* ---- the runtime (the program gets the simulated libcudart.so.13 too) ----------------- */

static void test_runtime(void)
{
    void *d1 = NULL, *d0 = NULL;
    EXPECT(cudaSetDevice(1), cudaSuccess);
    EXPECT(cudaMalloc(&d1, N), cudaSuccess);
    EXPECT(cudaSetDevice(0), cudaSuccess);
    EXPECT(cudaMalloc(&d0, N), cudaSuccess);
    uint64_t p1 = (uintptr_t)d1;
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 0);

    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 1); /* the driver holds the grant */
    CHECK_EQ(tessera_sim_can_access(1, (uintptr_t)d0, N), 0);
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    EXPECT(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
    EXPECT(cudaDeviceDisablePeerAccess(1), cudaSuccess);
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 0);
    EXPECT(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    EXPECT(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
    EXPECT(cudaDeviceEnablePeerAccess(2, 0), cudaErrorInvalidDevice);
    EXPECT(cudaDeviceDisablePeerAccess(-1), cudaErrorInvalidDevice);
    EXPECT(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* cudaDeviceReset resets the primary context: its grants go with it */
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 1);
    EXPECT(cudaDeviceReset(), cudaSuccess);
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 0);
    EXPECT(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    CHECK_EQ(tessera_sim_can_access(0, p1, N), 1);
    EXPECT(cudaSetDevice(1), cudaSuccess);
    EXPECT(cudaFree(d1), cudaSuccess);
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc > 1 && strcmp(argv[1], "runtime") == 0) {
        RUN(test_runtime);
        return 0;
    }
    RUN(test_before_init);
    RUN(test_proc_address);
    RUN(test_errors);
    RUN(test_device_memory);
    RUN(test_vmm_memory);
    return 0;
}
