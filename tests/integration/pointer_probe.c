/* Pointer queries about device memory as a program sees them (probe_queries.h): cudaMalloc blocks
 * whose sizes end less than 512 bytes short of a whole number of 2 MiB pages, so that the block
 * tessera hands out and the driver's own allocation have the same mapping; asked about at an
 * interior pointer while live, and again after cudaFree (tessera keeps the memory cached, the
 * driver gives it back: both must answer as for unallocated memory). Another block stays live
 * meanwhile. Prints one RESULT line; the test compares it with and without tessera. */
#include "probe_queries.h"

static char qbuf[8192];

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    q_load();
    const size_t sizes[] = {(4u << 20) - 100, 6u << 20, (2u << 20) - 511};
    enum { N = sizeof sizes / sizeof sizes[0] };
    char *p[N];
    void *keep = NULL;
    unsigned long long ids[N], gone;
    CHECK(cudaMalloc(&keep, 1u << 20));
    for (int i = 0; i < N; i++)
        CHECK(cudaMalloc((void **)&p[i], sizes[i]));
    char label[32];
    for (int i = 0; i < N; i++) {
        snprintf(label, sizeof label, "live%d", i);
        q_describe(qbuf, sizeof qbuf, label, p[i] + sizes[i] / 2, &ids[i]);
    }
    for (int i = 0; i < N; i++) {
        CHECK(cudaFree(p[i]));
        snprintf(label, sizeof label, "freed%d", i);
        q_describe(qbuf, sizeof qbuf, label, p[i] + sizes[i] / 2, &gone);
    }
    CHECK(cudaFree(keep));
    int distinct = ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2];
    printf("RESULT status=ok ids=%d%s\n", distinct, qbuf);
    return 0;
}
