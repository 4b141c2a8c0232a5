/* Allocates a known set of blocks, then waits on stdin so the test can read the process's stats
 * page: 3 x 4 MiB (large pool: one 20 MiB segment) and 2 x 100 KiB (small pool: one 2 MiB
 * segment). */
#include "probe_common.h"

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *big[3], *small[2];
    for (int i = 0; i < 3; i++)
        CHECK(cudaMalloc(&big[i], (size_t)4 << 20));
    for (int i = 0; i < 2; i++)
        CHECK(cudaMalloc(&small[i], 102400));
    wait_for_go("READY");
    for (int i = 0; i < 3; i++)
        CHECK(cudaFree(big[i]));
    for (int i = 0; i < 2; i++)
        CHECK(cudaFree(small[i]));
    wait_for_go("FREED");
    printf("RESULT status=ok\n");
    return 0;
}
