// Streams with callbacks, as NVIDIA's simpleCallback sample does: each stream copies its chunk in,
// runs a kernel, copies it out, then a cudaStreamAddCallback callback (and a cudaLaunchHostFunc
// after it) checks on the host what came back. Callbacks run in stream order, after the copies.
#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "stream_callbacks: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            return 2;                                                                      \
        }                                                                                  \
    } while (0)

__global__ void increment(int *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] += 1;
}

struct work {
    cudaStream_t stream;
    int *host;
    int n, base;
    int seen_stream_ok, copied_back, order; // filled in by the callbacks
};

static int order_counter;

static void CUDART_CB on_stream_done(cudaStream_t stream, cudaError_t status, void *data)
{
    work *w = (work *)data;
    w->seen_stream_ok = stream == w->stream && status == cudaSuccess;
    // on a GPU every element is base + i + 1; where kernels do not run it is base + i
    int same = 0;
    for (int i = 0; i < w->n; i++)
        same += w->host[i] == w->base + i || w->host[i] == w->base + i + 1;
    w->copied_back = same == w->n;
    w->order = ++order_counter;
}

static void CUDART_CB after_callback(void *data)
{
    work *w = (work *)data;
    if (w->order) // the callback before it has run
        w->order = -w->order;
}

int main()
{
    const int nstreams = 4, n = 1 << 16;
    work w[nstreams];
    int *dev[nstreams];
    for (int s = 0; s < nstreams; s++) {
        w[s] = work();
        w[s].n = n;
        w[s].base = s * n;
        CHECK(cudaStreamCreateWithFlags(&w[s].stream, cudaStreamNonBlocking));
        CHECK(cudaMallocHost(&w[s].host, n * sizeof(int)));
        CHECK(cudaMalloc(&dev[s], n * sizeof(int)));
        for (int i = 0; i < n; i++)
            w[s].host[i] = w[s].base + i;
    }
    for (int s = 0; s < nstreams; s++) {
        CHECK(cudaMemsetAsync(dev[s], 0xff, n * sizeof(int), w[s].stream));
        CHECK(cudaMemcpyAsync(dev[s], w[s].host, n * sizeof(int), cudaMemcpyHostToDevice, w[s].stream));
        increment<<<(n + 255) / 256, 256, 0, w[s].stream>>>(dev[s], n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(w[s].host, dev[s], n * sizeof(int), cudaMemcpyDeviceToHost, w[s].stream));
        CHECK(cudaStreamAddCallback(w[s].stream, on_stream_done, &w[s], 0));
        CHECK(cudaLaunchHostFunc(w[s].stream, after_callback, &w[s]));
    }
    cudaError_t bad_flags = cudaStreamAddCallback(w[0].stream, on_stream_done, &w[0], 1);
    cudaGetLastError();
    CHECK(cudaDeviceSynchronize());
    int ok_stream = 0, ok_copy = 0, ok_order = 0;
    for (int s = 0; s < nstreams; s++) {
        ok_stream += w[s].seen_stream_ok;
        ok_copy += w[s].copied_back;
        ok_order += w[s].order < 0;
        CHECK(cudaFree(dev[s]));
        CHECK(cudaFreeHost(w[s].host));
        CHECK(cudaStreamDestroy(w[s].stream));
    }
    printf("RESULT callbacks=%d stream_and_status=%d copied_back=%d host_func_after=%d bad_flags=%s\n",
           order_counter, ok_stream, ok_copy, ok_order, cudaGetErrorName(bad_flags));
    return ok_stream == nstreams && ok_copy == nstreams && ok_order == nstreams ? 0 : 1;
}
