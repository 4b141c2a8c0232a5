/* Pinned host memory as a program sees it: bytes through a copy, the mapped device pointer, and
 * the errors of an interior pointer, a second free and a pointer the driver never pinned, with
 * cudaGetLastError after each. Then every pointer query (probe_queries.h) about a live buffer,
 * the same buffer freed, two smaller buffers allocated after it (under tessera, pieces of the
 * freed one's memory), one of them freed while the other lives, and a cudaMallocHost buffer
 * before and after its free. Prints one RESULT line; the test compares it with and without
 * tessera. */
#include "probe_queries.h"

static const char *last(void)
{
    return cudaGetErrorName(cudaGetLastError());
}

static char qbuf[8192];

static void queries(void)
{
    q_load();
    const unsigned fl = cudaHostAllocMapped | cudaHostAllocPortable;
    const size_t big = (8u << 20) + 123, n1 = (3u << 20) + 7, n2 = (2u << 20) + 11;
    unsigned long long id_big, id_freed, id1, id2, id2b, id_gone;
    char *b = NULL, *p1 = NULL, *p2 = NULL, *m = NULL;
    CHECK(cudaHostAlloc((void **)&b, big, fl));
    q_describe(qbuf, sizeof qbuf, "big", b + 5, &id_big);
    CHECK(cudaFreeHost(b));
    q_describe(qbuf, sizeof qbuf, "freed", b + 5, &id_freed);
    unsigned long long unused;
    q_describe(qbuf, sizeof qbuf, "freedbase", b, &unused);
    /* the device is idle: under tessera, the freed buffer's memory serves the next two */
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostAlloc((void **)&p1, n1, fl));
    CHECK(cudaHostAlloc((void **)&p2, n2, fl));
    memset(p1, 1, n1);
    memset(p2, 2, n2);
    q_describe(qbuf, sizeof qbuf, "p1", p1 + 1, &id1);
    q_describe(qbuf, sizeof qbuf, "p2", p2 + 100, &id2);
    q_describe(qbuf, sizeof qbuf, "p2last", p2 + n2 - 1, &unused);
    q_describe(qbuf, sizeof qbuf, "p2tail", p2 + n2, &unused); /* in its last page, past it */
    CHECK(cudaFreeHost(p1));
    q_describe(qbuf, sizeof qbuf, "p1freed", p1 + 1, &unused);
    q_describe(qbuf, sizeof qbuf, "p2live", p2, &id2b);
    int p2_bytes = p2[0] == 2 && p2[n2 - 1] == 2;
    CHECK(cudaFreeHost(p2));
    q_describe(qbuf, sizeof qbuf, "p2freed", p2 + 100, &id_gone);
    CHECK(cudaMallocHost((void **)&m, 10000));
    q_describe(qbuf, sizeof qbuf, "mh", m + 9999, &unused);
    CHECK(cudaFreeHost(m));
    q_describe(qbuf, sizeof qbuf, "mhfreed", m, &unused);
    /* one id per allocation, the same for the whole life of one, device memory's included */
    int ids = id_big && id1 && id2 && id1 != id2 && id1 != id_big && id2 != id_big &&
              id2 == id2b && !id_freed && !id_gone;
    for (int i = 0; i < 8; i++) {
        void *d = NULL;
        unsigned long long did = 0;
        CHECK(cudaMalloc(&d, 4096));
        ids &= q_drv.attr(&did, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)d) ==
                   CUDA_SUCCESS &&
               did != id_big && did != id1 && did != id2;
        CHECK(cudaFree(d));
    }
    size_t len = strlen(qbuf);
    snprintf(qbuf + len, sizeof qbuf - len, " ids=%d p2_bytes=%d", ids, p2_bytes);
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
    queries();
    printf("RESULT status=ok bytes=%d devptr=%s same=%d interior=%s interior_last=%s first=%s "
           "twice=%s twice_last=%s devptr2=%s same2=%d foreign=%s foreign_last=%s%s\n",
           bytes, cudaGetErrorName(devptr), same, cudaGetErrorName(interior), interior_last,
           cudaGetErrorName(first), cudaGetErrorName(twice), twice_last,
           cudaGetErrorName(devptr2), same2, cudaGetErrorName(foreign), foreign_last, qbuf);
    return 0;
}
