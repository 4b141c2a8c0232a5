/* tessera_sim.h - introspection of the simulated CUDA device (tests/sim).
 *
 * libcuda.so.1 from tests/sim exports two functions besides the driver API:
 *
 *     int tessera_sim_counters(int device, struct tessera_sim_counters *out);

typedef int (*tessera_sim_can_access_fn)(int device, uint64_t ptr, uint64_t size);

int tessera_sim_can_access(int device, uint64_t ptr, uint64_t size);
 *
 * It fills *out with the counters of simulated device `device` and returns 0, or returns -1
 * (out untouched) when the device does not exist, out is NULL, or the simulator cannot
 * start (bad TESSERA_SIM_* configuration, forked child). It does not need cuInit.
 *
 *     int tessera_sim_can_access(int device, uint64_t ptr, uint64_t size);
 *
 * It returns 1 when a kernel running on simulated device `device` may read and write every
 * byte of [ptr, ptr + size), 0 when it may not, and -1 on bad arguments: no such device,
 * size 0, a range not wholly inside one cuMemAlloc-class allocation nor wholly in cuMemMap
 * ranges (mapped, whatever their access), or a simulator that cannot start. CUDA's rules:
 * cuMemAlloc-class memory of device P is reachable from P, and from `device` while some
 * context of `device` has peer access enabled (cuCtxEnablePeerAccess) to a context of P;
 * stream-ordered memory (a pool's, an imported pool's) from P and from the devices the pool's
 * access grants read-write (cuMemPoolSetAccess; peer access does not matter there);
 * cuMemMap memory only when every cuMemMap range covering the bytes grants `device`
 * read-write through cuMemSetAccess (peer access does not matter there). It does not
 * need cuInit.
 *
 * Programs that link the real toolkit (and only get the simulator at run time through
 * LD_LIBRARY_PATH) should resolve it at run time:
 *
 *     void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
 *     tessera_sim_counters_fn fn = (tessera_sim_counters_fn)dlsym(h, "tessera_sim_counters");
 *     tessera_sim_can_access_fn ca = (tessera_sim_can_access_fn)dlsym(h, "tessera_sim_can_access");
 *
 * "Allocations" are cuMemAlloc-class allocations (cuMemAlloc_v2 and cuMemAllocAsync);
 * cuMemCreate handles are counted separately but also hold physical pages, and so does the
 * memory backing graph allocations (bytes_in_use), which the graph_* counters follow.
 */
#ifndef TESSERA_SIM_H
#define TESSERA_SIM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tessera_sim_counters {
    uint64_t total_bytes;           /* device memory (TESSERA_SIM_MEMORY, 2 MiB multiple) */
    uint64_t alloc_calls;           /* successful cuMemAlloc_v2, _AllocPitch_v2, _AllocAsync, _AllocManaged, cuArrayCreate_v2 */
    uint64_t free_calls;            /* successful cuMemFree_v2, executed cuMemFreeAsync, cuArrayDestroy */
    uint64_t implicit_frees;        /* allocations dropped by context destroy / primary reset */
    uint64_t failed_allocs;         /* allocation requests refused with out-of-memory */
    uint64_t create_calls;          /* successful cuMemCreate */
    uint64_t release_calls;         /* successful cuMemRelease */
    uint64_t map_calls;             /* successful cuMemMap */
    uint64_t unmap_calls;           /* successful cuMemUnmap (one per unmapped cuMemMap range) */
    uint64_t bytes_in_use;          /* physical bytes held (2 MiB pages): allocations + handles */
    uint64_t peak_bytes_in_use;
    uint64_t live_allocations;      /* cuMemAlloc-class allocations alive now */
    uint64_t peak_live_allocations;
    uint64_t live_handles;          /* cuMemCreate handles whose memory is still alive */
    uint64_t graph_alloc_calls;     /* graph allocation nodes run (each launch of each node) */
    uint64_t graph_free_calls;      /* graph allocations freed (free node, cuMemFree, cuMemFreeAsync) */
    uint64_t imported_frees;        /* pool pointers imported from another process and freed here */
    uint64_t races;                 /* copies and memsets of queued work on bytes another
                                       stream's work reads or writes, neither ordered before
                                       the other (README, "The device's order") */
    uint64_t untracked_streams;     /* streams past the first 128: no race check */
};

typedef int (*tessera_sim_counters_fn)(int device, struct tessera_sim_counters *out);

int tessera_sim_counters(int device, struct tessera_sim_counters *out);

typedef int (*tessera_sim_can_access_fn)(int device, uint64_t ptr, uint64_t size);

int tessera_sim_can_access(int device, uint64_t ptr, uint64_t size);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_SIM_H */
