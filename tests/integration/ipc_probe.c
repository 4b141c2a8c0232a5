/* cudaIpcGetMemHandle on the first and on a later block of what a caching allocator would put
 * in one segment: prints the result for each. */
#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *first, *second;
    CHECK(cudaMalloc(&first, 4096));
    CHECK(cudaMalloc(&second, 4096));
    cudaIpcMemHandle_t h;
    cudaError_t r1 = cudaIpcGetMemHandle(&h, first);
    cudaError_t r2 = cudaIpcGetMemHandle(&h, second);
    (void)cudaGetLastError();
    CHECK(cudaFree(first));
    CHECK(cudaFree(second));
    printf("RESULT status=ok first=%s second=%s\n", cudaGetErrorName(r1), cudaGetErrorName(r2));
    return 0;
}
