// Managed memory, as NVIDIA's UnifiedMemoryStreams and HAMi-core's managed tests use it: one
// pointer the host and the device both use, attached to a stream, prefetched and advised. It is device memory on the device's budget
// (cudaMemGetInfo shows it), the runtime reports it as managed, and cudaFree frees it.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "managed: %s failed: %s\n", #call, cudaGetErrorString(e_));    \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void twice(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= 2;
}

int main()
{
    const int n = 3 << 20; // 12 MiB of ints
    size_t free0, free1, free2, total;
    CHECK(cudaFree(0));
    CHECK(cudaMemGetInfo(&free0, &total));
    int *m;
    CHECK(cudaMallocManaged(&m, n * sizeof(int)));
    CHECK(cudaMemGetInfo(&free1, &total));
    for (int i = 0; i < n; i++)
        m[i] = i; // the host writes it directly
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetPreferredLocation, dev0));
    CHECK(cudaMemAdvise(m, n * sizeof(int), cudaMemAdviseSetAccessedBy, host));
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), dev0, 0, s));
    twice<<<(n + 255) / 256, 256, 0, s>>>(m, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemPrefetchAsync(m, n * sizeof(int), host, 0, s));
    CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachGlobal));
    CHECK(cudaStreamSynchronize(s));
    cudaMemLocation nodev = {cudaMemLocationTypeDevice, 42};
    cudaError_t prefetch_past_end = cudaMemPrefetchAsync(m, n * sizeof(int) + 1, dev0, 0, s);
    cudaError_t advise_bad_device = cudaMemAdvise(m, 64, cudaMemAdviseSetAccessedBy, nodev);
    cudaError_t attach_interior = cudaStreamAttachMemAsync(s, m + 1, 0, cudaMemAttachHost);
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    // on a GPU every element is 2i; where kernels do not run it is still i
    int doubled = 0, unchanged = 0;
    for (int i = 1; i < n; i++) {
        doubled += m[i] == 2 * i;
        unchanged += m[i] == i;
    }
    // the device side through copies and memsets
    int *d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMemset(m, 0, n * sizeof(int)));
    CHECK(cudaMemset(d, 0x01, n * sizeof(int)));
    CHECK(cudaMemcpy(m, d, 1024 * sizeof(int), cudaMemcpyDefault));
    CHECK(cudaDeviceSynchronize());
    int copied = 0, zero = 0;
    for (int i = 0; i < n; i++) {
        copied += i < 1024 && m[i] == 0x01010101;
        zero += i >= 1024 && m[i] == 0;
    }
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, m + 100));
    int *host_attach;
    CHECK(cudaMallocManaged(&host_attach, 4096, cudaMemAttachHost));
    int *none = NULL;
    cudaError_t zero_bytes = cudaMallocManaged(&none, 0);
    cudaError_t bad_flags = cudaMallocManaged(&none, 4096, 0x40);
    cudaError_t interior = cudaFree(m + 1);
    cudaGetLastError();
    CHECK(cudaFree(host_attach));
    CHECK(cudaFree(d));
    CHECK(cudaFree(m));
    CHECK(cudaMemGetInfo(&free2, &total));
    printf("RESULT counted_mib=%zu doubled=%d unchanged=%d copied=%d zero=%d type_managed=%d "
           "same_host_pointer=%d zero_bytes=%s bad_flags=%s interior_free=%s given_back=%d "
           "prefetch_past_end=%s advise_bad_device=%s attach_interior=%s\n",
           (free0 - free1) >> 20, doubled, unchanged, copied, zero,
           pa.type == cudaMemoryTypeManaged, pa.hostPointer == m + 100 && pa.devicePointer == m + 100,
           cudaGetErrorName(zero_bytes), cudaGetErrorName(bad_flags), cudaGetErrorName(interior),
           free2 == free0, cudaGetErrorName(prefetch_past_end), cudaGetErrorName(advise_bad_device),
           cudaGetErrorName(attach_interior));
    return copied == 1024 && zero == n - 1024 ? 0 : 1;
}
