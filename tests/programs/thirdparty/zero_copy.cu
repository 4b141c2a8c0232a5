// Zero-copy and registered host memory, as NVIDIA's simpleZeroCopy and simpleHostRegister-style
// programs use them: page-lock a malloc'ed buffer with cudaHostRegister (mapped), take its device
// pointer, copy through it, allocate mapped pinned memory with cudaHostAlloc, run a kernel on the
// mapped pointers, then unregister. The kernel computes nothing on the simulator; the copies do.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "zero_copy: %s failed: %s\n", #call, cudaGetErrorString(e_));  \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

int main()
{
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    // registered: the program's own memory, page-locked in place
    float *a = (float *)malloc(bytes);
    if (!a)
        return 2;
    for (int i = 0; i < n; i++)
        a[i] = (float)i;
    CHECK(cudaHostRegister(a, bytes, cudaHostRegisterMapped));
    cudaError_t again = cudaHostRegister(a + 16, 64, cudaHostRegisterDefault);
    cudaGetLastError();
    float *a_dev = NULL;
    CHECK(cudaHostGetDevicePointer((void **)&a_dev, a, 0));
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, a));
    // allocated mapped pinned memory
    float *b, *c, *b_dev, *c_dev;
    CHECK(cudaHostAlloc(&b, bytes, cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&c, bytes, cudaHostAllocMapped | cudaHostAllocWriteCombined));
    CHECK(cudaHostGetDevicePointer((void **)&b_dev, b, 0));
    CHECK(cudaHostGetDevicePointer((void **)&c_dev, c, 0));
    for (int i = 0; i < n; i++) {
        b[i] = 2.0f * i;
        c[i] = -1.0f;
    }
    add<<<(n + 255) / 256, 256>>>(a_dev, b_dev, c_dev, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    // copies through the mapped and registered pointers: a -> device -> c
    float *d;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(c, d, bytes, cudaMemcpyDeviceToHost));
    int copied = 0;
    for (int i = 0; i < n; i++)
        copied += c[i] == (float)i;
    // a device pointer taken from unregistered memory, and unregistering twice, fail
    void *none;
    cudaError_t unknown = cudaHostGetDevicePointer(&none, d, 0);
    CHECK(cudaHostUnregister(a));
    cudaError_t twice = cudaHostUnregister(a);
    cudaGetLastError();
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(b));
    CHECK(cudaFreeHost(c));
    free(a);
    printf("RESULT registered_type=%d same_address=%d register_again=%s copied=%d "
           "unregistered_pointer=%s unregister_twice=%s\n",
           (int)pa.type, a_dev == a, cudaGetErrorName(again), copied, cudaGetErrorName(unknown),
           cudaGetErrorName(twice));
    return copied == n ? 0 : 1;
}
