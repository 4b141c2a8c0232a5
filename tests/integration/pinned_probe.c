/* Pinned host memory as a program sees it: bytes through a copy, the mapped device pointer, and
 * the errors of an interior pointer, a second free and a pointer the driver never pinned, with
 * cudaGetLastError after each. Prints one RESULT line; the test compares it with and without
 * tessera. */
#include "probe_common.h"

static const char *last(void)
{
    return cudaGetErrorName(cudaGetLastError());
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const size_t n = 5000;
    unsigned char *p = NULL, *q = NULL, *r = NULL;
    void *dev = NULL, *d = NULL;
    CHECK(cudaMalloc(&dev, n));
    CHECK(cudaHostAlloc((void **)&p, n, cudaHostAllocMapped | cudaHostAllocPortable));
    cudaError_t devptr = cudaHostGetDevicePointer(&d, p, 0);
    int same = d == (void *)p;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7);
    CHECK(cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice));
    memset(p, 0, n);
    CHECK(cudaMemcpy(p, dev, n, cudaMemcpyDeviceToHost));
    int bytes = 1;
    for (size_t i = 0; i < n; i++)
        bytes &= p[i] == (unsigned char)(i * 7);
    cudaError_t interior = cudaFreeHost(p + 1);
    const char *interior_last = last();
    cudaError_t first = cudaFreeHost(p);
    cudaError_t twice = cudaFreeHost(p);
    const char *twice_last = last();
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostAlloc((void **)&q, n, cudaHostAllocMapped | cudaHostAllocPortable));
    cudaError_t devptr2 = cudaHostGetDevicePointer(&d, q, 0);
    int same2 = d == (void *)q;
    CHECK(cudaMallocHost((void **)&r, 100));
    memset(r, 0x5a, 100);
    CHECK(cudaMemcpy(dev, r, 100, cudaMemcpyHostToDevice));
    unsigned char *heap = malloc(64);
    cudaError_t foreign = cudaFreeHost(heap);
    const char *foreign_last = last();
    free(heap);
    CHECK(cudaFreeHost(q));
    CHECK(cudaFreeHost(r));
    CHECK(cudaFree(dev));
    printf("RESULT status=ok bytes=%d devptr=%s same=%d interior=%s interior_last=%s first=%s "
           "twice=%s twice_last=%s devptr2=%s same2=%d foreign=%s foreign_last=%s\n",
           bytes, cudaGetErrorName(devptr), same, cudaGetErrorName(interior), interior_last,
           cudaGetErrorName(first), cudaGetErrorName(twice), twice_last,
           cudaGetErrorName(devptr2), same2, cudaGetErrorName(foreign), foreign_last);
    return 0;
}
