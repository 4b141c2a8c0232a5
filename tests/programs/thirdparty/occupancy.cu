// Occupancy queries, as NVIDIA's simpleOccupancy sample makes them: kernel attributes (and the
// settings cudaFuncSetAttribute and cudaFuncSetCacheConfig change), resident
// blocks per multiprocessor for a few block sizes and shared-memory amounts, the block size the
// occupancy calculator proposes, then a launch with it. The simulator compiles no kernel, so it
// answers with fixed resources (32 registers a thread, no static shared memory).
#include <cstdio>
#include <cuda_runtime.h>

__global__ void square(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= x[i];
}

int main()
{
    cudaFuncAttributes attr;
    cudaError_t cache = cudaFuncSetCacheConfig(square, cudaFuncCachePreferShared);
    cudaError_t smem = cudaFuncSetAttribute(square, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);
    cudaError_t smem_big = cudaFuncSetAttribute(square, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20);
    cudaError_t carve = cudaFuncSetAttribute(square, cudaFuncAttributePreferredSharedMemoryCarveout, 50);
    cudaGetLastError();
    cudaError_t fa = cudaFuncGetAttributes(&attr, square);
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return 2;
    int b128 = -1, b1024 = -1, b256_smem = -1, b96_flags = -1, b2048 = -1;
    cudaError_t e1 = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b128, square, 128, 0);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b1024, square, 1024, 0);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b256_smem, square, 256, 48 * 1024);
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&b96_flags, square, 96, 0,
                                                           cudaOccupancyDisableCachingOverride);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b2048, square, 2048, 0);
    int dummy;
    cudaError_t bad_flags =
        cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&dummy, square, 128, 0, 0x10);
    cudaError_t not_kernel =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&dummy, (const void *)&main, 128, 0);
    cudaGetLastError();
    // the runtime header's template: cudaFuncGetAttributes, device attributes, and the query
    // above for every block size
    int min_grid = 0, block = 0;
    cudaError_t pot = cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, square, 0, 0);
    const int n = 1 << 20;
    int *x;
    if (cudaMalloc(&x, n * sizeof(int)) != cudaSuccess)
        return 2;
    square<<<(n + block - 1) / block, block>>>(x, n);
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    cudaFree(x);
    double occupancy = (double)b128 * 128 / prop.maxThreadsPerMultiProcessor;
    printf("RESULT cache_config=%s set_smem=%s set_smem_too_big=%s set_carveout=%s max_dyn_smem=%d "
           "carveout=%d ", cudaGetErrorName(cache), cudaGetErrorName(smem), cudaGetErrorName(smem_big),
           cudaGetErrorName(carve), attr.maxDynamicSharedSizeBytes, attr.preferredShmemCarveout);
    printf("attributes=%s max_threads=%d regs=%d blocks_128=%d blocks_1024=%d "
           "blocks_256_48k=%d blocks_96_flags=%d blocks_2048=%d occupancy_128=%.2f bad_flags=%s "
           "not_kernel=%s potential=%s block=%d min_grid=%d launch=%s sync=%s\n",
           cudaGetErrorName(fa), attr.maxThreadsPerBlock, attr.numRegs, b128, b1024, b256_smem,
           b96_flags, b2048, occupancy, cudaGetErrorName(bad_flags), cudaGetErrorName(not_kernel),
           cudaGetErrorName(pot), block, min_grid, cudaGetErrorName(launch),
           cudaGetErrorName(sync));
    return e1 == cudaSuccess && launch == cudaSuccess ? 0 : 1;
}
