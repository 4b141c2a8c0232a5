// The device's default memory pool, as NVIDIA's streamOrderedAllocation sample configures it:
// a release threshold so freed memory stays cached, stream-ordered allocations in a loop, and the
// program's own queries of what the pool holds.
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "mem_pools: %s failed: %s\n", #call, cudaGetErrorString(e_));  \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void scale(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= 2.0f;
}

static uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr a)
{
    uint64_t v = 0;
    if (cudaMemPoolGetAttribute(pool, a, &v) != cudaSuccess)
        return UINT64_MAX;
    return v;
}

int main()
{
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t threshold = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    uint64_t back = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &back));
    int reuse = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int n = 1 << 18, rounds = 20;
    const size_t bytes = n * sizeof(float);
    int used_ok = 0, reserved_ok = 0, moved = 0;
    float *h;
    CHECK(cudaMallocHost(&h, bytes));
    for (int r = 0; r < rounds; r++) {
        float *a, *b;
        CHECK(cudaMallocAsync(&a, bytes, s));
        CHECK(cudaMallocAsync(&b, bytes, s));
        // while both are live the pool holds at least them
        used_ok += attr(pool, cudaMemPoolAttrUsedMemCurrent) >= 2 * bytes;
        reserved_ok += attr(pool, cudaMemPoolAttrReservedMemCurrent) >=
                       attr(pool, cudaMemPoolAttrUsedMemCurrent);
        CHECK(cudaMemsetAsync(a, r, bytes, s));
        scale<<<(n + 255) / 256, 256, 0, s>>>(a, n);
        CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaMemcpyAsync(h, b, bytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaFreeAsync(a, s));
        CHECK(cudaFreeAsync(b, s));
        CHECK(cudaStreamSynchronize(s));
        moved += ((unsigned char *)h)[bytes - 1] == (unsigned char)r;
    }
    uint64_t used_after = attr(pool, cudaMemPoolAttrUsedMemCurrent);
    uint64_t high = attr(pool, cudaMemPoolAttrUsedMemHigh);
    uint64_t zero = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    uint64_t high_reset = attr(pool, cudaMemPoolAttrUsedMemHigh);
    uint64_t five = 5;
    cudaError_t bad_reset = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &five);
    cudaGetLastError();
    cudaMemPool_t none;
    cudaError_t bad_device = cudaDeviceGetDefaultMemPool(&none, 99);
    cudaGetLastError();
    CHECK(cudaFreeHost(h));
    CHECK(cudaStreamDestroy(s));
    printf("RESULT threshold_back=%d reuse_opportunistic=%d used_while_live=%d reserved_ge_used=%d "
           "moved=%d used_after=%llu high_ge_two=%d high_reset=%llu bad_reset=%s bad_device=%s\n",
           back == UINT64_MAX, reuse, used_ok, reserved_ok, moved,
           (unsigned long long)used_after, high >= 2 * bytes, (unsigned long long)high_reset,
           cudaGetErrorName(bad_reset), cudaGetErrorName(bad_device));
    return used_ok == rounds && moved == rounds ? 0 : 1;
}
