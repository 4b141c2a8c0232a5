/* Shared bits of the integration test programs: plain CUDA runtime programs (no tessera API),
 * run under LD_PRELOAD=libtessera.so by test_integration.py. */
#ifndef TS_PROBE_COMMON_H
#define TS_PROBE_COMMON_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            printf("RESULT status=error call=%s error=%s\n", #call, cudaGetErrorName(e_));       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Wait until the test writes a line on stdin (it inspects the process meanwhile). */
static inline void wait_for_go(const char *tag)
{
    printf("%s %d\n", tag, (int)getpid());
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        exit(1);
}

static inline int fill_check(void *dev, size_t n, unsigned char v)
{
    unsigned char *h = malloc(n);
    int ok = h != NULL;
    if (ok) {
        CHECK(cudaMemset(dev, v, n));
        CHECK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n && ok; i++)
            ok = h[i] == v;
    }
    free(h);
    return ok;
}

/* Bytes as hex (out holds 2n + 1) and back: how the IPC probes pass handles on their lines.
 * unhex returns -1 unless s is exactly n bytes of hex. */
static inline void hex(const void *v, size_t n, char *out)
{
    const unsigned char *b = v;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static inline int unhex(const char *s, void *v, size_t n)
{
    unsigned char *b = v;
    if (strlen(s) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned x;
        if (sscanf(s + 2 * i, "%2x", &x) != 1)
            return -1;
        b[i] = (unsigned char)x;
    }
    return 0;
}

#endif
