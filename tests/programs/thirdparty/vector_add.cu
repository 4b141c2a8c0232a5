// The classic vector add, written as a third-party sample would be: allocate, copy in, launch,
// copy out, check every element on the host. Exit 0 when every sum is right, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "vector_add: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 2;                                                                  \
        }                                                                              \
    } while (0)

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
    float *back = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        ha[i] = (float)(i % 1000) / 7.0f;
        hb[i] = (float)(i % 333) / 3.0f;
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    int threads = 256, blocks = (n + threads - 1) / threads;
    vector_add<<<blocks, threads>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(back, da, bytes, cudaMemcpyDeviceToHost));
    int wrong = 0, input_wrong = 0;
    for (int i = 0; i < n; i++) {
        if (hc[i] != ha[i] + hb[i])
            wrong++;
        if (back[i] != ha[i])
            input_wrong++;
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    printf("%s\n", wrong ? "Test FAILED" : "Test PASSED");
    printf("RESULT status=%s n=%d wrong_sums=%d input_roundtrip_wrong=%d\n", wrong ? "wrong" : "ok", n,
           wrong, input_wrong);
    free(ha), free(hb), free(hc), free(back);
    return wrong ? 1 : 0;
}
