/* Starts CUDA, then changes directory: a relative TESSERA_STATS_DIR must still name the page it
 * created, so the page is removed at exit. Prints RESULT status=ok. */
#include "probe_common.h"

int main(void)
{
    void *p;
    CHECK(cudaMalloc(&p, (size_t)1 << 20));
    if (chdir("/") != 0)
        return 1;
    CHECK(cudaFree(p));
    printf("RESULT status=ok\n");
    return 0;
}
