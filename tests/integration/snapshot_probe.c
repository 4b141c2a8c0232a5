/* snapshot_probe UNIT COUNT STITCH FAIL [free]: the layouts a memory snapshot must draw right.
 *
 * Allocates COUNT blocks of UNIT bytes (the device full, or nearly), frees every other one, asks
 * for STITCH bytes (more than any free block: stitched from the scattered free pages under the
 * default policy, mapped after giving the free pages back under expandable segments, refused
 * under PyTorch's policy), then for FAIL bytes (more than the device: an out of memory, whose
 * final retry gives every free page back, leaving holes). Prints "LIVE <address> <size>" for each
 * block it holds, waits on stdin ("READY <pid>") while the test takes a snapshot, frees
 * everything and prints "RESULT status=ok". With "free", the STITCH block is freed before the
 * FAIL request: its stitched range is then given back in the final retry. */
#include "probe_common.h"

#include <stdint.h>

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5 && !(argc == 6 && strcmp(argv[5], "free") == 0)) {
        fprintf(stderr, "usage: snapshot_probe UNIT COUNT STITCH FAIL [free] (bytes)\n");
        return 2;
    }
    size_t unit = strtoull(argv[1], NULL, 0), count = strtoull(argv[2], NULL, 0);
    size_t stitch = strtoull(argv[3], NULL, 0), fail = strtoull(argv[4], NULL, 0);
    void **blocks = calloc(count + 1, sizeof *blocks);
    if (!blocks)
        return 1;
    for (size_t i = 0; i < count; i++)
        CHECK(cudaMalloc(&blocks[i], unit));
    for (size_t i = 0; i < count; i += 2) {
        CHECK(cudaFree(blocks[i]));
        blocks[i] = NULL;
    }
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, stitch);
    printf("STITCH %s\n", e == cudaSuccess ? "served" : cudaGetErrorName(e));
    if (e != cudaSuccess) {
        big = NULL;
        (void)cudaGetLastError();
    }
    if (big && argc == 6) {
        CHECK(cudaFree(big));
        big = NULL;
    }
    void *none = NULL;
    e = cudaMalloc(&none, fail);
    printf("FAIL %s\n", e == cudaSuccess ? "served" : cudaGetErrorName(e));
    if (e == cudaSuccess)
        CHECK(cudaFree(none));
    (void)cudaGetLastError();
    for (size_t i = 1; i < count; i += 2)
        printf("LIVE %llu %zu\n", (unsigned long long)(uintptr_t)blocks[i], unit);
    if (big)
        printf("LIVE %llu %zu\n", (unsigned long long)(uintptr_t)big, stitch);
    wait_for_go("READY");
    for (size_t i = 1; i < count; i += 2)
        CHECK(cudaFree(blocks[i]));
    if (big)
        CHECK(cudaFree(big));
    free(blocks);
    printf("RESULT status=ok\n");
    return 0;
}
