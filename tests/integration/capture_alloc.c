/* Allocations while a graph is being captured, with frees still waiting for their reuse fence.
 * A blocking stream is captured: touching the legacy default stream (which is what recording a
 * fence there does) would invalidate the capture. The allocation inside the capture runs in
 * relaxed mode, which allows it. The capture must end cleanly, and allocation and reuse must
 * work again afterwards. */
#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const size_t n = (size_t)4 << 20;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s)); /* blocking */
    void *a;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMemsetAsync(a, 1, n, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaFree(a)); /* pending until a fence proves the device is done with it */

    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    void *b = NULL;
    cudaError_t rb = cudaMalloc(&b, n);
    if (rb == cudaSuccess)
        cudaMemsetAsync(b, 2, n, s);
    cudaGraph_t g = NULL;
    cudaError_t re = cudaStreamEndCapture(s, &g);
    printf("capture: malloc=%s end=%s\n", cudaGetErrorName(rb), cudaGetErrorName(re));
    if (g)
        cudaGraphDestroy(g);
    if (rb == cudaSuccess)
        CHECK(cudaFree(b));
    /* after the capture: fences work again, memory is reused and intact */
    int ok = 1;
    for (int i = 0; i < 8 && ok; i++) {
        void *c;
        CHECK(cudaMalloc(&c, n));
        ok = fill_check(c, n, (unsigned char)(0x30 + i));
        CHECK(cudaFree(c));
    }
    CHECK(cudaStreamDestroy(s));
    int clean = rb == cudaSuccess && re == cudaSuccess;
    printf("RESULT status=%s capture=%s data=%s\n", clean && ok ? "ok" : "error",
           clean ? "clean" : "broken", ok ? "ok" : "corrupt");
    return clean && ok ? 0 : 1;
}
