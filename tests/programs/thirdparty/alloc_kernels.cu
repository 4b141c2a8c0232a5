// Allocation churn between kernels, as an application with temporary buffers does: allocate,
// clear, launch, copy a little back, free; on two streams; cudaMemGetInfo at the ends.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                       \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "alloc_kernels: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 2;                                                                     \
        }                                                                                 \
    } while (0)

__global__ void touch(unsigned char *p, size_t n)
{
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] ^= 0x5a;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    cudaStream_t st[2];
    CHECK(cudaStreamCreate(&st[0]));
    CHECK(cudaStreamCreate(&st[1]));
    size_t free0, total;
    CHECK(cudaMemGetInfo(&free0, &total));
    unsigned seed = 12345, memset_ok = 0, launches = 0;
    void *live[8] = {0};
    for (int r = 0; r < rounds; r++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 512 + (seed >> 8) % (6u << 20);
        int slot = r % 8;
        if (live[slot])
            CHECK(cudaFree(live[slot]));
        CHECK(cudaMalloc(&live[slot], n));
        cudaStream_t s = st[r & 1];
        CHECK(cudaMemsetAsync(live[slot], r & 0xff, n, s));
        unsigned char first;
        CHECK(cudaMemcpyAsync(&first, live[slot], 1, cudaMemcpyDeviceToHost, s));
        touch<<<32, 128, 0, s>>>((unsigned char *)live[slot], n);
        CHECK(cudaGetLastError());
        launches++;
        CHECK(cudaStreamSynchronize(s));
        memset_ok += first == (unsigned char)(r & 0xff); // the copy ran before the kernel
    }
    for (int i = 0; i < 8; i++)
        CHECK(cudaFree(live[i]));
    CHECK(cudaDeviceSynchronize());
    size_t free1;
    CHECK(cudaMemGetInfo(&free1, &total));
    printf("RESULT status=%s rounds=%d launches=%u memset_ok=%u free_back=%d\n",
           memset_ok == (unsigned)rounds ? "ok" : "wrong", rounds, launches, memset_ok, free1 == free0);
    return memset_ok == (unsigned)rounds ? 0 : 1;
}
