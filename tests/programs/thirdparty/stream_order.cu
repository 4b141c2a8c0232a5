// Stream order around kernel launches: work queued after a kernel on its stream waits for it,
// an invalid launch configuration is refused, an unknown kernel pointer too.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void spin(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

static const char *ready(cudaError_t e)
{
    return e == cudaSuccess ? "ready" : e == cudaErrorNotReady ? "notready" : cudaGetErrorName(e);
}

int main()
{
    cudaStream_t s;
    cudaEvent_t ev;
    if (cudaStreamCreate(&s) != cudaSuccess || cudaEventCreate(&ev) != cudaSuccess)
        return 2;
    spin<<<1, 1, 0, s>>>(2000000000LL); // about a second on a GPU
    cudaError_t launch = cudaGetLastError();
    cudaError_t q_stream = cudaStreamQuery(s);
    cudaEventRecord(ev, s);
    cudaError_t q_event = cudaEventQuery(ev);
    cudaError_t sync = cudaStreamSynchronize(s);
    cudaError_t q_after = cudaEventQuery(ev);

    spin<<<0, 1, 0, s>>>(1);
    cudaError_t zero_grid = cudaGetLastError();
    spin<<<1, 4096, 0, s>>>(1);
    cudaError_t big_block = cudaGetLastError();
    cudaError_t bogus = cudaLaunchKernel((const void *)&ready, dim3(1), dim3(1), NULL, 0, s);
    cudaGetLastError();
    printf("RESULT launch=%s stream_after_launch=%s event_after_launch=%s sync=%s "
           "event_after_sync=%s zero_grid=%s big_block=%s unknown_kernel=%s\n",
           cudaGetErrorName(launch), ready(q_stream), ready(q_event), cudaGetErrorName(sync),
           ready(q_after), cudaGetErrorName(zero_grid), cudaGetErrorName(big_block),
           cudaGetErrorName(bogus));
    cudaEventDestroy(ev);
    cudaStreamDestroy(s);
    return 0;
}
