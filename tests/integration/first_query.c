/* A driver-API program (linked with libcuda, no runtime) whose first CUDA call is a host-memory
 * query, before cuInit: cuMemHostGetDevicePointer, or cuMemHostGetFlags with the argument
 * "flags". The driver answers CUDA_ERROR_NOT_INITIALIZED; under tessera that call is also the one
 * that initialises the shim, and must get the driver's answer. Then cuInit, the device's primary
 * context made current, and the same query about host memory CUDA does not know. Prints one RESULT line; the test compares it with and
 * without tessera. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static char unpinned[4096];

static CUresult query(int flags)
{
    CUdeviceptr d = 0;
    unsigned f = 0;
    return flags ? cuMemHostGetFlags(&f, unpinned) : cuMemHostGetDevicePointer(&d, unpinned, 0);
}

int main(int argc, char **argv)
{
    int flags = argc > 1 && strcmp(argv[1], "flags") == 0;
    CUresult before = query(flags);
    CUresult init = cuInit(0);
    CUdevice dev;
    CUcontext ctx;
    if (init == CUDA_SUCCESS)
        init = cuDeviceGet(&dev, 0);
    if (init == CUDA_SUCCESS)
        init = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (init == CUDA_SUCCESS)
        init = cuCtxSetCurrent(ctx);
    CUresult after = query(flags);
    printf("RESULT status=ok before=%d init=%d after=%d\n", (int)before, (int)init, (int)after);
    return 0;
}
