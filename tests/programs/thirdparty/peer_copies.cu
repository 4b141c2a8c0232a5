// Peer copies between two devices, as NVIDIA's simpleP2P sample makes them: peer access enabled
// both ways, cudaMemcpyPeerAsync on a stream each way, cudaMemcpyPeer, a kernel reading the peer
// buffer, and the bytes checked on the host. Needs two devices.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "peer_copies: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void copy_kernel(const float *src, float *dst, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = src[i] * 2.0f;
}

int main()
{
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) {
        printf("RESULT devices=%d\n", ndev);
        return 3;
    }
    int can01 = 0, can10 = 0;
    CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    float *g0, *g1, *h;
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceEnablePeerAccess(1, 0));
    CHECK(cudaMalloc(&g0, bytes));
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaMalloc(&g1, bytes));
    CHECK(cudaMallocHost(&h, bytes));
    for (int i = 0; i < n; i++)
        h[i] = (float)i;
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemcpyAsync(g0, h, bytes, cudaMemcpyHostToDevice, s));
    // ping-pong: 0 -> 1 -> 0, each on the stream after the last
    for (int r = 0; r < 10; r++) {
        CHECK(cudaMemcpyPeerAsync(g1, 1, g0, 0, bytes, s));
        CHECK(cudaMemsetAsync(g0, 0, bytes, s));
        CHECK(cudaMemcpyPeerAsync(g0, 0, g1, 1, bytes, s));
    }
    copy_kernel<<<(n + 255) / 256, 256, 0, s>>>(g1, g0, n); // reads the peer's memory
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemset(h, 0, bytes));
    CHECK(cudaMemcpyPeer(g1, 1, g0, 0, bytes));
    CHECK(cudaMemcpy(h, g1, bytes, cudaMemcpyDeviceToHost));
    // on a GPU the kernel doubled every element; where kernels do not run they round-trip as is
    int same = 0, doubled = 0;
    for (int i = 1; i < n; i++) {
        same += h[i] == (float)i;
        doubled += h[i] == 2.0f * i;
    }
    cudaError_t bad_device = cudaMemcpyPeerAsync(g1, 7, g0, 0, bytes, s);
    cudaGetLastError();
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(g0));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(g1));
    CHECK(cudaFreeHost(h));
    printf("RESULT devices=%d can_access=%d%d same=%d doubled=%d bad_device=%s\n", ndev, can01,
           can10, same, doubled, cudaGetErrorName(bad_device));
    return same + doubled == n - 1 ? 0 : 1;
}
