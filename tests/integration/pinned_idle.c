/* A pinned buffer freed, then nothing pinned for a while: the process only allocates device
 * memory. Prints the bytes the driver holds pinned (the simulator's counter) right after the
 * free and after a pause of --pause-ms (default 1100) followed by one cudaMalloc: under tessera
 * with pinned_idle_s:1 the cached buffer has gone back to the driver by then; with the default
 * (10 s) it is still cached. Prints one RESULT line. */
#include <dlfcn.h>
#include <time.h>

#include "../sim/tessera_sim.h"
#include "probe_common.h"

static unsigned long long pinned_now(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    tessera_sim_counters_fn fn = lib ? (tessera_sim_counters_fn)dlsym(lib, "tessera_sim_counters") : NULL;
    struct tessera_sim_counters c;
    if (!fn || fn(0, &c) != 0) {
        printf("RESULT status=error call=tessera_sim_counters\n");
        exit(1);
    }
    return (unsigned long long)c.host_bytes;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long pause_ms = argc > 2 && !strcmp(argv[1], "--pause-ms") ? atol(argv[2]) : 1100;
    void *h = NULL, *d = NULL;
    CHECK(cudaHostAlloc(&h, (size_t)4 << 20, cudaHostAllocDefault));
    memset(h, 1, (size_t)4 << 20);
    CHECK(cudaFreeHost(h));
    CHECK(cudaDeviceSynchronize());
    unsigned long long after_free = pinned_now();
    struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    CHECK(cudaMalloc(&d, 4096)); /* any allocator operation */
    unsigned long long after_pause = pinned_now();
    CHECK(cudaFree(d));
    printf("RESULT status=ok after_free=%llu after_pause=%llu\n", after_free, after_pause);
    return 0;
}
