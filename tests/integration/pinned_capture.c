/* A pinned buffer freed while a graph is being captured, with a copy from it still queued on
 * another stream (copies are slow: TESSERA_SIM_OP_DELAY_US). The next buffers, allocated and
 * written at once during the capture and right after it, must not be that one until the copy has
 * read it: the device must receive the first buffer's bytes. The capture is relaxed, so that
 * the driver's own cudaFreeHost is allowed in it (it waits for the copy). Prints one RESULT
 * line; the test compares it with and without tessera. */
#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const size_t n = (size_t)1 << 20;
    cudaStream_t copy, cap;
    CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    unsigned char *dev = NULL, *h = NULL, *h2 = NULL, *h3 = NULL;
    CHECK(cudaMalloc((void **)&dev, 3 * n));
    CHECK(cudaHostAlloc((void **)&h, n, cudaHostAllocDefault));
    memset(h, 0xa1, n);
    CHECK(cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, copy)); /* runs late */

    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed));
    cudaError_t rf = cudaFreeHost(h);
    cudaError_t r2 = cudaHostAlloc((void **)&h2, n, cudaHostAllocDefault);
    if (r2 == cudaSuccess) {
        memset(h2, 0xb2, n);
        CHECK(cudaMemcpyAsync(dev + n, h2, n, cudaMemcpyHostToDevice, cap)); /* captured */
    }
    cudaGraph_t g = NULL;
    cudaError_t re = cudaStreamEndCapture(cap, &g);
    if (g)
        CHECK(cudaGraphDestroy(g));

    CHECK(cudaHostAlloc((void **)&h3, n, cudaHostAllocDefault));
    memset(h3, 0xc3, n);
    CHECK(cudaMemcpyAsync(dev + 2 * n, h3, n, cudaMemcpyHostToDevice, copy));
    CHECK(cudaStreamSynchronize(copy));
    int first = device_holds(dev, n, 0xa1);
    int third = device_holds(dev + 2 * n, n, 0xc3);
    if (r2 == cudaSuccess)
        CHECK(cudaFreeHost(h2));
    CHECK(cudaFreeHost(h3));
    CHECK(cudaFree(dev));
    CHECK(cudaStreamDestroy(copy));
    CHECK(cudaStreamDestroy(cap));
    printf("RESULT status=ok free=%s alloc=%s end=%s first=%s third=%s\n", cudaGetErrorName(rf),
           cudaGetErrorName(r2), cudaGetErrorName(re), first ? "ok" : "corrupt",
           third ? "ok" : "corrupt");
    return 0;
}
