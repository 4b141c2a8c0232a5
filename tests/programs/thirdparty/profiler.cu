// Profiler start/stop around the region of interest, as NVIDIA's samples bracket their timed
// loops: the calls succeed, and the work between them runs as usual.
#include <cstdio>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

__global__ void fill(int *x, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = v;
}

int main()
{
    const int n = 1 << 18;
    int *d, *h;
    if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess || cudaMallocHost(&h, n * sizeof(int)) != cudaSuccess)
        return 2;
    cudaError_t start = cudaProfilerStart();
    for (int round = 0; round < 10; round++) {
        fill<<<(n + 255) / 256, 256>>>(d, n, round);
        cudaMemset(d, round, n * sizeof(int));
    }
    cudaError_t launch = cudaGetLastError();
    cudaError_t stop = cudaProfilerStop();
    cudaError_t copy = cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost);
    int right = 0;
    for (int i = 0; i < n; i++)
        right += h[i] == 0x09090909; // the last memset's bytes
    cudaFree(d);
    cudaFreeHost(h);
    printf("RESULT start=%s stop=%s launch=%s copy=%s right=%d\n", cudaGetErrorName(start),
           cudaGetErrorName(stop), cudaGetErrorName(launch), cudaGetErrorName(copy), right);
    return start == cudaSuccess && stop == cudaSuccess && right == n ? 0 : 1;
}
