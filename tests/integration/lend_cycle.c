/* One of four processes cycling through a PyTorch-like cache pattern on a shared device
 * (tests/bench/lending_four.py; the suite's FourProcesses drives the same pattern step by step
 * over ipc_peer). Each cycle: three blocks of 3*UNIT live, written and read back, freed; then two
 * of 3.5*UNIT (which the first three's segments cannot serve), the same. Live peak 9*UNIT, what
 * PyTorch's policy caches 16*UNIT. A cycle that runs out of memory frees what it holds and is
 * counted; the next one starts afresh. With "turns", each cycle waits for a line on stdin and
 * says "done" when it is over: the caller runs the processes in turns, each idle with its cache
 * kept while the others work, as workers between requests.
 *
 *   lend_cycle UNIT_MIB CYCLES [turns]
 *   RESULT status=ok cycles=N ooms=K bytes=B us=T    (B: bytes written and read back intact;
 *                                                     T: time in the cycles, waits left out)
 */
#include <stdint.h>
#include <time.h>

#include "probe_common.h"

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One phase: n blocks of size, written with v and read back. Bytes checked, or -1 at an
 * out-of-memory (what was allocated is freed). */
static long long phase(int n, size_t size, unsigned char v)
{
    void *p[4] = {0};
    long long done = 0;
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaMalloc(&p[i], size);
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError();
            for (int k = 0; k < i; k++)
                CHECK(cudaFree(p[k]));
            return -1;
        }
        CHECK(e);
    }
    for (int i = 0; i < n; i++) {
        if (!fill_check(p[i], size, (unsigned char)(v + i))) {
            printf("RESULT status=corrupt\n");
            exit(1);
        }
        done += (long long)size;
    }
    for (int i = 0; i < n; i++)
        CHECK(cudaFree(p[i]));
    return done;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4)
        return 2;
    int turns = argc == 4 && strcmp(argv[3], "turns") == 0;
    uint64_t idle_us = 0;
    size_t unit = (size_t)atol(argv[1]) << 20;
    int cycles = atoi(argv[2]), ooms = 0;
    long long bytes = 0;
    CHECK(cudaFree(0));
    uint64_t t0 = now_us();
    for (int c = 0; c < cycles; c++) {
        if (turns) {
            uint64_t t = now_us();
            char line[16];
            if (!fgets(line, sizeof line, stdin))
                return 1;
            idle_us += now_us() - t;
        }
        long long a = phase(3, 3 * unit, (unsigned char)(7 * c + 1));
        long long b = a < 0 ? -1 : phase(2, 7 * unit / 2, (unsigned char)(7 * c + 4));
        if (a < 0 || b < 0)
            ooms++;
        else
            bytes += a + b;
        if (turns) {
            printf("done %d\n", ooms);
            fflush(stdout);
        }
    }
    printf("RESULT status=ok cycles=%d ooms=%d bytes=%lld us=%llu\n", cycles, ooms, bytes,
           (unsigned long long)(now_us() - t0 - idle_us));
    return 0;
}
