// Streams, events and async copies: each stream copies its chunk in from pinned memory, scales
// it with a kernel, copies it out, and records an event; the host times and checks the result.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "streams_events: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void scale(int *x, int n, int by)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] *= by;
}

int main()
{
    const int nstreams = 4, chunk = 1 << 18;
    int *host;
    CHECK(cudaMallocHost(&host, sizeof(int) * chunk * nstreams));
    for (int i = 0; i < chunk * nstreams; i++)
        host[i] = i;
    cudaStream_t streams[nstreams];
    cudaEvent_t done[nstreams], start;
    int *dev[nstreams];
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventRecord(start, 0));
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&done[s]));
        // a non-blocking stream does not wait for the legacy stream: without this wait its
        // work may finish before start is recorded, and the elapsed time comes out negative
        CHECK(cudaStreamWaitEvent(streams[s], start, 0));
        CHECK(cudaMalloc(&dev[s], sizeof(int) * chunk));
        int *h = host + s * chunk;
        CHECK(cudaMemcpyAsync(dev[s], h, sizeof(int) * chunk, cudaMemcpyHostToDevice, streams[s]));
        scale<<<64, 256, 0, streams[s]>>>(dev[s], chunk, 3);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(h, dev[s], sizeof(int) * chunk, cudaMemcpyDeviceToHost, streams[s]));
        CHECK(cudaEventRecord(done[s], streams[s]));
    }
    float ms_total = 0;
    CHECK(cudaEventSynchronize(start));
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaEventSynchronize(done[s]));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, done[s]));
        ms_total += ms;
        CHECK(cudaFree(dev[s]));
        CHECK(cudaStreamDestroy(streams[s]));
        CHECK(cudaEventDestroy(done[s]));
    }
    // on a GPU every element is 3 * i; where kernels do not run it comes back as i
    int scaled = 0, unchanged = 0, other = 0;
    for (int i = 0; i < chunk * nstreams; i++) {
        if (host[i] == 3 * i && i != 0)
            scaled++;
        else if (host[i] == i)
            unchanged++;
        else
            other++;
    }
    CHECK(cudaFreeHost(host));
    CHECK(cudaEventDestroy(start));
    printf("RESULT status=%s streams=%d scaled=%d unchanged=%d other=%d events_ms_ok=%d\n",
           scaled == chunk * nstreams - 1 ? "ok" : "wrong", nstreams, scaled, unchanged, other,
           ms_total >= 0);
    return scaled == chunk * nstreams - 1 ? 0 : 1;
}
