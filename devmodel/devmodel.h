/* A model of a device for driving the core without CUDA: tessera-replay and the unit tests.
 *
 * Nothing is ever allocated for device memory: addresses are numbers handed out from a virtual
 * range. Physical memory is accounted in pages (2 MiB, like a GPU and like the simulated device),
 * so capacity, out-of-memory and memory info behave like a card's. Virtual-memory operations are
 * checked as the driver would (granularity, double map, unmapped ranges). Fences complete when
 * the model's "device clock" passes them: at once by default, or under a test's control.
 * Every call is charged the driver time it would take on a real device (costs.h), so a replay
 * can compare policies in estimated time as well as in calls.
 */
#ifndef TS_DEVMODEL_H
#define TS_DEVMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "devmodel/costs.h"

typedef struct ts_devmodel ts_devmodel;

typedef struct ts_devmodel_counters {
    uint64_t seg_allocs, seg_frees, seg_alloc_failures;
    uint64_t vm_reserves, vm_releases, vm_creates, vm_destroys, vm_maps, vm_unmaps;
    uint64_t fences_recorded, fences_released, fence_queries, fence_waits, synchronizes;
    uint64_t order_points; /* stream-order points that asked the device for something */
    uint64_t mem_info_queries; /* free and total memory asked for (cuMemGetInfo) */
    uint64_t invalid_calls; /* calls refused as invalid (a bad range or handle): must be 0 */
    uint64_t calls_in_stats_window; /* calls made with the watched sequence lock odd (must be 0) */
    size_t bytes_in_use, peak_bytes_in_use; /* physical, page-rounded */
    size_t live_segments;
    uint64_t host_allocs, host_frees; /* pinned host buffers pinned and unpinned */
    size_t host_bytes_in_use;
    size_t copied_out, copied_in; /* bytes copied from device to host, and back (a pause) */
    /* Estimated driver time (costs.h), in all and per CUDA call, and how many of each call. */
    double driver_ns;
    double call_ns[TS_CALL_COUNT];
    uint64_t calls[TS_CALL_COUNT];
} ts_devmodel_counters;

/* What va reads: the content number of the handle mapped there (a fresh handle's is unique;
 * copies carry it) plus va's byte offset in that handle, so every mapping of one byte reads the
 * same number. False when nothing is mapped there. */
bool ts_devmodel_content(const ts_devmodel *m, uintptr_t va, uint64_t *content);

/* capacity: bytes of device memory. page: accounting granularity (0: 2 MiB). */
ts_devmodel *ts_devmodel_create(size_t capacity, size_t page);
void ts_devmodel_destroy(ts_devmodel *m);

/* A backend table whose ctx is the model. with_vm / with_fences select the optional parts. */
ts_backend ts_devmodel_backend(ts_devmodel *m, bool with_vm, bool with_fences);

void ts_devmodel_counters_get(const ts_devmodel *m, ts_devmodel_counters *out);

/* The costs every later call is charged (ts_driver_costs_defaults until set). */
void ts_devmodel_set_costs(ts_devmodel *m, const ts_driver_costs *costs);
/* Cheap reads for a replay loop: driver time so far, and the peak of physical memory in use. */
double ts_devmodel_driver_ns(const ts_devmodel *m);
size_t ts_devmodel_peak_bytes(const ts_devmodel *m);

/* Stream-order points (reuse_fence:order): how the modelled device answers them. */
typedef enum ts_devmodel_order {
    TS_DEVMODEL_ONE_QUEUE = 0, /* all work in one queue: nothing to do (the default) */
    TS_DEVMODEL_STREAMS = 1,   /* several streams: each order point asks the device */
    TS_DEVMODEL_CAPTURING = 2  /* a capture is underway: order points and fences are refused, and
                                * unpinning host memory is an invalid call */
} ts_devmodel_order;
void ts_devmodel_set_order(ts_devmodel *m, ts_devmodel_order mode);

/* Watch the allocator's stats sequence lock (its sink's seq): every backend call made while it is
 * odd, a write window open, is counted in calls_in_stats_window. NULL stops watching. */
void ts_devmodel_watch_seq(ts_devmodel *m, const uint64_t *seq);

/* Fences: when manual, a fence completes only when the clock reaches it. */
void ts_devmodel_set_manual_fences(ts_devmodel *m, bool manual);
void ts_devmodel_complete_fences(ts_devmodel *m); /* the device catches up with everything */

/* Failure injection: the nth next call of that kind fails (1 = the next one); 0 disarms. */
void ts_devmodel_fail_seg_alloc_after(ts_devmodel *m, uint64_t n);
void ts_devmodel_fail_vm_create_after(ts_devmodel *m, uint64_t n);
void ts_devmodel_fail_vm_map_after(ts_devmodel *m, uint64_t n);
void ts_devmodel_fail_fence_record_after(ts_devmodel *m, uint64_t n);

/* Scripted addresses (tessera-replay's PyTorch check): when set, seg_alloc asks fn for the
 * address to return for a segment of size bytes; fn returns 0 to fall back to the model. */
typedef uintptr_t (*ts_devmodel_addr_fn)(void *user, size_t size);
void ts_devmodel_set_address_script(ts_devmodel *m, ts_devmodel_addr_fn fn, void *user);

/* Declare an existing allocation (state that predates a replay). Returns 0, -1 on overlap. */
int ts_devmodel_adopt(ts_devmodel *m, uintptr_t addr, size_t size);

/* Pinned host memory: the most bytes host_alloc may pin at once (0: no limit); and the size and
 * flags a live pinned buffer was made with (TS_ENOTFOUND when ptr is none). */
void ts_devmodel_set_host_capacity(ts_devmodel *m, size_t bytes);
int ts_devmodel_host_info(const ts_devmodel *m, uintptr_t ptr, size_t *size, unsigned *flags);

/* Does [addr, addr+size) lie in memory that is currently allocated or mapped? */
bool ts_devmodel_is_backed(const ts_devmodel *m, uintptr_t addr, size_t size);
/* May a kernel of peer device `device` (program-enabled peer access) touch [addr, addr + size)?
 * Driver allocations: yes. Mappings: only those whose access names it (vm_peer_add before the
 * map, or vm_access after). False when the range is not wholly backed. */
bool ts_devmodel_peer_can_access(const ts_devmodel *m, int device, uintptr_t addr, size_t size);

#endif /* TS_DEVMODEL_H */
