/* cudaFreeAsync on memory from cudaMalloc, next to other live allocations: a caching allocator
 * puts these in one driver allocation, whose first block starts it and whose second lies inside
 * it. Both frees must succeed, the neighbour must keep its bytes, the memory must be usable
 * again, and a stream-ordered allocation (cudaMallocAsync) freed as well. A
 * double cudaFreeAsync must fail with cudaErrorInvalidValue. */
#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const size_t n = 256 * 1024;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *a, *b, *c;
    CHECK(cudaMalloc(&a, n));
    CHECK(cudaMalloc(&b, n));
    CHECK(cudaMemsetAsync(a, 0x11, n, s));
    CHECK(cudaMemset(b, 0x22, n));

    /* the first block (a segment's start under a caching allocator), then the second */
    cudaError_t first = cudaFreeAsync(a, s);
    CHECK(cudaStreamSynchronize(s));
    int kept = device_holds(b, n, 0x22);
    cudaError_t second = cudaFreeAsync(b, s);
    CHECK(cudaStreamSynchronize(s));
    cudaError_t twice = cudaFreeAsync(b, s);
    (void)cudaGetLastError();

    /* the memory is usable again */
    CHECK(cudaMalloc(&c, n));
    int reused = fill_check(c, n, 0x33);
    CHECK(cudaFree(c));

    /* stream-ordered memory still belongs to the driver */
    void *d;
    CHECK(cudaMallocAsync(&d, n, s));
    CHECK(cudaMemsetAsync(d, 0x44, n, s));
    cudaError_t pool = cudaFreeAsync(d, s);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));

    printf("RESULT status=ok first=%s second=%s twice=%s neighbour=%s reused=%s pool=%s\n",
           cudaGetErrorName(first), cudaGetErrorName(second), cudaGetErrorName(twice),
           kept ? "intact" : "lost", reused ? "ok" : "bad", cudaGetErrorName(pool));
    return 0;
}
