/* tessera: the per-device allocator counters, as published on the stats page.
 *
 * Public, self-contained, stable ABI: third-party readers include this header (through
 * tessera/stats_page.h). Every field is a fixed-width 64-bit integer. Names and meanings follow
 * torch.cuda.memory_stats(): a "stat array" is {current, peak, allocated, freed} for each of
 * {all, small_pool, large_pool}; the flattened key is "<name>.<pool>.<sub>", e.g.
 * "allocated_bytes.all.current".
 *
 * Fields are only ever appended (at the end of struct tessera_device_stats, before the reserved
 * tail); the layout version in the page header changes on any other change.
 */
#ifndef TESSERA_STATS_FIELDS_H
#define TESSERA_STATS_FIELDS_H

#include <stdint.h>

/* One torch-style Stat. current may go negative only through a bug; peak >= current always. */
typedef struct tessera_stat {
    int64_t current;
    int64_t peak;
    int64_t allocated; /* sum of increases */
    int64_t freed;     /* sum of decreases */
} tessera_stat;

enum tessera_pool_index {
    TESSERA_POOL_ALL = 0,
    TESSERA_POOL_SMALL = 1,
    TESSERA_POOL_LARGE = 2,
    TESSERA_POOL_COUNT = 3
};

#define TESSERA_POOL_NAMES { "all", "small_pool", "large_pool" }

/* X(name, unit, help): stat arrays, one tessera_stat per pool index. */
#define TESSERA_STAT_ARRAYS(X)                                                                     \
    X(allocation, "count", "Blocks handed out to the program and not yet freed")                  \
    X(segment, "count", "Device allocations (cudaMalloc-style segments) held by the allocator")   \
    X(active, "count", "Blocks allocated or freed but still pending a fence")                     \
    X(inactive_split, "count", "Free blocks inside segments that also hold other blocks")        \
    X(allocated_bytes, "bytes", "Bytes in allocated blocks (rounded sizes)")                      \
    X(reserved_bytes, "bytes", "Bytes of device memory held by the allocator")                   \
    X(active_bytes, "bytes", "Bytes in active blocks (allocated or pending free)")                \
    X(inactive_split_bytes, "bytes", "Bytes in free blocks of split segments (fragmentation)")    \
    X(requested_bytes, "bytes", "Bytes the program asked for (unrounded) in active blocks")

/* X(name, help): single Stats (no pool breakdown). */
#define TESSERA_STAT_SINGLES(X)                                                                    \
    X(oversize_allocations, "Allocated blocks of at least max_split_size bytes")                  \
    X(oversize_segments, "Segments of at least max_split_size bytes")

/* X(name, help): monotonically increasing counters. */
#define TESSERA_COUNTERS(X)                                                                        \
    X(num_alloc_retries, "Allocations that released every cached segment and retried")           \
    X(num_ooms, "Allocations that failed with out of memory")                                     \
    X(num_sync_all_streams, "Waits on every outstanding fence (empty_cache and final retries)")   \
    X(num_device_alloc, "Device allocation calls (segment allocations plus page maps)")           \
    X(num_device_free, "Device free calls (segment frees plus page unmaps)")                      \
    X(num_alloc_calls, "Allocation requests served by the allocator")                             \
    X(num_free_calls, "Free requests served by the allocator")                                    \
    X(num_passthrough_calls, "Calls forwarded untouched to the driver (foreign pointers etc.)")   \
    X(num_invalid_frees, "Frees rejected: double free, interior or unknown pointer")              \
    X(num_fences_recorded, "Reuse fences recorded (events on the tracked streams)")               \
    X(num_fence_waits, "Host waits for a reuse fence")                                            \
    X(num_stitches, "Requests served by stitching free pages into a new virtual range")           \
    X(num_empty_cache, "Explicit empty-cache operations")                                         \
    X(num_ops, "Allocator operations (allocations plus frees), for change detection")            \
    X(num_plan_hits, "Unused (planned memory was removed): always 0, kept for the layout")        \
    X(num_plan_misses, "Unused (planned memory was removed): always 0, kept for the layout")      \
    X(num_plan_replans, "Unused (planned memory was removed): always 0, kept for the layout")

/* X(name, unit, help): gauges that are not Stats. */
#define TESSERA_GAUGES(X)                                                                          \
    X(max_split_size, "bytes", "The max_split_size setting (-1 when unlimited)")                  \
    X(largest_free_block_bytes, "bytes", "Largest free cached block (0 when none)")               \
    X(stitched_bytes, "bytes", "Bytes currently mapped in stitched virtual ranges")               \
    X(memory_limit_bytes, "bytes", "The effective allocator limit (0 when none)")                 \
    X(device_total_bytes, "bytes", "Device memory capacity as the driver reports it")            \
    X(driver_bytes, "bytes", "Live allocations left to the driver (managed, own pools), capped")  \
    X(plan_range_bytes, "bytes", "Unused (planned memory was removed): always 0")                \
    X(plan_lower_bound_bytes, "bytes", "Unused (planned memory was removed): always 0")

/* X(name, unit, help): pinned host memory served by the context's allocator (cudaHostAlloc,
 * cudaMallocHost, cuMemHostAlloc, cuMemAllocHost), single Stats. torch.cuda.host_memory_stats()
 * has the same four without the "host_" prefix (allocations, allocated_bytes, active_requests,
 * active_bytes). Appended after the gauges (layout rule above). */
#define TESSERA_HOST_STATS(X)                                                                      \
    X(host_allocations, "count", "Pinned host regions held (the driver's buffers)")               \
    X(host_allocated_bytes, "bytes", "Bytes of pinned host regions held (the driver's buffers)")   \
    X(host_active_requests, "count", "Pinned host pieces handed out, or freed and not yet seen "   \
                                     "past their fence")                                            \
    X(host_active_bytes, "bytes", "Bytes of active pinned host pieces (whole pages)")

/* X(name, help): pinned host memory counters (PyTorch's num_host_alloc and num_host_free; its
 * host_alloc_time.total and host_free_time.total, in microseconds). */
#define TESSERA_HOST_COUNTERS(X)                                                                   \
    X(num_host_alloc, "Pinned host buffers obtained from the driver")                             \
    X(num_host_free, "Pinned host buffers given back to the driver")                              \
    X(num_host_alloc_calls, "Pinned host allocation requests served (cache hits included)")       \
    X(num_host_free_calls, "Pinned host frees served")                                            \
    X(host_alloc_time, "Microseconds spent in the driver pinning host buffers")                   \
    X(host_free_time, "Microseconds spent in the driver unpinning host buffers")

/* X(name, help): memory lent between the tessera processes of one device (docs/DESIGN.md,
 * "Memory lent between processes"), counted by the process that asked and by the one that gave;
 * times in microseconds. Appended after the pinned host memory fields. */
#define TESSERA_LEND_COUNTERS(X)                                                                   \
    X(num_lend_asks, "Requests not served after releasing this process's own cache, for which "    \
                     "it asked the other tessera processes on the device to give memory back")    \
    X(num_lend_asks_served, "Of those, the requests served once the others gave memory back")     \
    X(lend_received_bytes, "Bytes the other processes gave back to the device at this "           \
                           "process's asking")                                                     \
    X(lend_wait_time, "Microseconds this process waited for the other processes' answers")        \
    X(num_lend_gives, "Requests of other processes on the device this process answered")          \
    X(lend_given_bytes, "Bytes of free cached memory this process gave back to the device for "  \
                        "other processes")                                                         \
    X(lend_give_time, "Microseconds this process spent giving memory back for other processes")  \
    X(num_remote_releases, "Releases of the cache asked by another process (tessera-stat "         \
                           "release; each also counted in num_empty_cache)")

/* X(name, help): the process paused (its device memory copied to host memory, the pages given
 * back) and resumed (docs/DESIGN.md, "Pause and resume"); time in microseconds. Appended after
 * the lending fields, in the room the reserved tail kept: a process is paused while num_pauses
 * exceeds num_resumes. */
#define TESSERA_PAUSE_COUNTERS(X)                                                                  \
    X(num_pauses, "Pauses: device memory copied to host memory and its pages given back")        \
    X(num_resumes, "Resumes: pages mapped again at the same addresses and the bytes copied back") \
    X(pause_saved_bytes, "Bytes of device memory copied to host memory by pauses")               \
    X(pause_time, "Microseconds spent pausing and resuming")

typedef struct tessera_device_stats {
#define TESSERA_X_ARRAY(name, unit, help) tessera_stat name[TESSERA_POOL_COUNT];
    TESSERA_STAT_ARRAYS(TESSERA_X_ARRAY)
#undef TESSERA_X_ARRAY
#define TESSERA_X_SINGLE(name, help) tessera_stat name;
    TESSERA_STAT_SINGLES(TESSERA_X_SINGLE)
#undef TESSERA_X_SINGLE
#define TESSERA_X_COUNTER(name, help) int64_t name;
    TESSERA_COUNTERS(TESSERA_X_COUNTER)
#undef TESSERA_X_COUNTER
#define TESSERA_X_GAUGE(name, unit, help) int64_t name;
    TESSERA_GAUGES(TESSERA_X_GAUGE)
#undef TESSERA_X_GAUGE
#define TESSERA_X_HOST_STAT(name, unit, help) tessera_stat name;
    TESSERA_HOST_STATS(TESSERA_X_HOST_STAT)
#undef TESSERA_X_HOST_STAT
#define TESSERA_X_HOST_COUNTER(name, help) int64_t name;
    TESSERA_HOST_COUNTERS(TESSERA_X_HOST_COUNTER)
#undef TESSERA_X_HOST_COUNTER
#define TESSERA_X_LEND_COUNTER(name, help) int64_t name;
    TESSERA_LEND_COUNTERS(TESSERA_X_LEND_COUNTER)
#undef TESSERA_X_LEND_COUNTER
#define TESSERA_X_PAUSE_COUNTER(name, help) int64_t name;
    TESSERA_PAUSE_COUNTERS(TESSERA_X_PAUSE_COUNTER)
#undef TESSERA_X_PAUSE_COUNTER
    int64_t reserved_tail[4]; /* room to append fields without moving what follows */
} tessera_device_stats;

#endif /* TESSERA_STATS_FIELDS_H */
