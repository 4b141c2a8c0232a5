/* host-pair: the core's own work for one pinned host allocation and its free
 * (ts_host_alloc + ts_host_free) over the device model, with fences recorded and complete at once:
 * no driver, no simulator. Built by tests/bench/pinned.py against a build directory's core
 * libraries, so that two trees' cores run the same source side by side.
 *
 *   host-pair SIZE PAIRS    prints the best of 7 rounds, in ns per pair
 *
 * Uses only calls both trees share: ts_config_defaults, ts_devmodel_create/backend,
 * ts_allocator_create, ts_host_alloc, ts_host_free. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/allocator.h"
#include "core/hostcache.h"
#include "devmodel/devmodel.h"

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    size_t size = strtoull(argv[1], NULL, 0);
    long pairs = strtol(argv[2], NULL, 0);
    ts_config cfg;
    ts_config_defaults(&cfg);
    ts_devmodel *m = ts_devmodel_create((size_t)1 << 30, 0);
    ts_backend be = ts_devmodel_backend(m, false, true);
    ts_stats_sink sink = {0};
    ts_allocator *a = ts_allocator_create(&cfg, &be, 0, sink);
    if (!m || !a || size == 0 || pairs <= 0)
        return 1;
    uintptr_t warm[4];
    for (int i = 0; i < 4; i++) /* a few buffers cached, as after a warm-up */
        if (ts_host_alloc(a, size, 0, &warm[i]) != TS_OK)
            return 1;
    for (int i = 0; i < 4; i++)
        ts_host_free(a, warm[i]);
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        double t0 = now_ns();
        for (long i = 0; i < pairs; i++) {
            uintptr_t p;
            if (ts_host_alloc(a, size, 0, &p) != TS_OK || ts_host_free(a, p) != TS_OK)
                return 1;
        }
        double ns = (now_ns() - t0) / (double)pairs;
        if (ns < best)
            best = ns;
    }
    printf("%.1f\n", best);
    ts_allocator_destroy(a, true);
    ts_devmodel_destroy(m);
    return 0;
}
