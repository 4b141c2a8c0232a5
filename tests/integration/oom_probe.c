/* oom_probe SIZE...: one cudaMalloc of each SIZE (bytes, or with a K, M or G suffix), in order,
 * each expected to fail with out of memory; prints "OOM <size>" or "SERVED <size>" for each, and
 * "RESULT status=ok" (exit 0) at the end. */
#include "probe_common.h"

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (*end) {
    case 'K': return (size_t)v << 10;
    case 'M': return (size_t)v << 20;
    case 'G': return (size_t)v << 30;
    default: return (size_t)v;
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        size_t size = parse_size(argv[i]);
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, size);
        printf("%s %zu\n", e == cudaSuccess ? "SERVED" : "OOM", size);
        if (e == cudaSuccess)
            CHECK(cudaFree(p));
        (void)cudaGetLastError();
    }
    printf("RESULT status=ok\n");
    return 0;
}
