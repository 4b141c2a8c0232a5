/* The seam between the allocator core and a device.
 *
 * The core never names a CUDA symbol: everything it needs from a device goes through this table.
 * Implementations:
 *   shim/backend_cuda.c   the CUDA driver, one backend per context, made by
 *                         ts_cuda_backend_create with every setting it uses passed in (the fence
 *                         mode); it calls the driver through the pointers the shim resolved
 *                         itself, so no call re-enters tessera's hooks. The simulated device of
 *                         the tests (tests/sim) is a libcuda, reached through this backend too.
 *   devmodel/devmodel.c   a model of a device's address space and driver calls, with counters
 *                         and fault injection (ts_devmodel_backend): for tessera-replay, the unit
 *                         tests and the core benchmarks.
 * core/history.c wraps whichever backend an allocator has, to record segment events in the
 * history ring, and forwards every call to it.
 *
 * Contract for every function: returns TS_OK on success or a ts_status error; outputs are
 * written only on success. Calls are made with the allocator's lock held, so an implementation
 * must not call back into the allocator. Optional entries may be NULL (virtual memory and fences);
 * the core then does without the feature.
 */
#ifndef TS_BACKEND_H
#define TS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef enum ts_status {
    TS_OK = 0,
    TS_ENOMEM = 1,     /* the device is out of memory (or the request can never fit) */
    TS_EINVAL = 2,     /* bad argument: double free, interior pointer, NULL output ... */
    TS_ENOTFOUND = 3,  /* the pointer is not tessera's: the caller forwards it to the driver */
    TS_EAGAIN = 4,     /* not yet (a fence still pending) */
    TS_EBACKEND = 5,   /* the device reported some other failure */
    TS_EUNSUPPORTED = 6
} ts_status;

/* Opaque handle to a recorded fence (events on every stream the backend tracks). */
typedef uint64_t ts_fence;

/* One mapping for vm_map: size bytes of a physical handle from offset bytes into it (whole
 * pages; a handle may be mapped in several places, whole or in parts, and every mapping is
 * unmapped whole: CUDA's rules for cuMemMap and cuMemUnmap). */
typedef struct ts_vm_piece {
    size_t size;
    uint64_t handle;
    size_t offset;
} ts_vm_piece;

typedef struct ts_backend {
    void *ctx;

    /* Whole device allocations: a cudaMalloc-style segment. */
    int (*seg_alloc)(void *ctx, size_t size, uintptr_t *out);
    int (*seg_free)(void *ctx, uintptr_t ptr, size_t size);

    /* Free and total device memory as the driver sees it. */
    int (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);

    /* Wait for all device work issued so far (before unmapping or releasing memory). */
    int (*synchronize)(void *ctx);

    /* Fences: fence_record covers all device work issued before it returns, on every stream
     * the backend tracks. fence_query returns TS_OK once that work is done, TS_EAGAIN before.
     * fence_release gives the fence's resources back (after completion or on teardown).
     * Optional: when fence_record is NULL the core reuses freed memory at once. */
    int (*fence_record)(void *ctx, ts_fence *out);
    int (*fence_query)(void *ctx, ts_fence fence);
    int (*fence_wait)(void *ctx, ts_fence fence);
    void (*fence_release)(void *ctx, ts_fence fence);

    /* Stream-ordered reuse (reuse_fence:order): order every device operation issued after this
     * call returns, on any stream the program can use in this context, after every operation
     * issued before it, without the host waiting. TS_OK, with *issued telling whether the device
     * had to be asked for anything (a program whose work can only run in one queue needs
     * nothing); TS_EAGAIN when it cannot be done now (a capture is underway). Optional: when
     * NULL, stream order is taken as given (the device model without fences). */
    int (*reuse_order)(void *ctx, int *issued);

    /* Is a CUDA graph capture underway (optional)? While one is, the core records, queries and
     * waits on no fence and never releases cached segments (PyTorch skips that step during
     * capture too): any of those could invalidate the capture. */
    int (*capture_active)(void *ctx);

    /* Virtual memory (optional; all or none). vm_map maps n pieces of physical handles back to
     * back from va (pieces[i].size bytes of pieces[i].handle from pieces[i].offset), then grants
     * read-write access to the owning device (and the devices of vm_peer_add) over the whole
     * range in one grant (a GPU charges it per mapping covered: one call saves calls, not
     * time). All or nothing: when it fails, nothing it mapped stays mapped. */
    int (*vm_granularity)(void *ctx, size_t *granularity);
    int (*vm_reserve)(void *ctx, size_t size, uintptr_t *va_out);
    int (*vm_release)(void *ctx, uintptr_t va, size_t size);
    int (*vm_create)(void *ctx, size_t size, uint64_t *handle_out);
    int (*vm_destroy)(void *ctx, uint64_t handle);
    int (*vm_map)(void *ctx, uintptr_t va, const ts_vm_piece *pieces, size_t n);
    int (*vm_unmap)(void *ctx, uintptr_t va, size_t size);

    /* Peer access to virtual memory (optional; both or none). Memory from seg_alloc is visible to
     * every device the program enabled peer access for, but a mapping only to the devices named
     * when its access was set (CUDA's rule for cuMemMap). vm_peer_add: every later vm_map grants
     * device read-write too. vm_access: grant every such device on [va, va + size), whole
     * earlier mappings back to back. */
    int (*vm_peer_add)(void *ctx, int device);
    int (*vm_access)(void *ctx, uintptr_t va, size_t size);

    /* Copies between device memory and host memory, synchronous (optional; both or none):
     * what a pause keeps of the device's bytes (core/pause.c). */
    int (*copy_out)(void *ctx, void *host, uintptr_t dev, size_t size);
    int (*copy_in)(void *ctx, uintptr_t dev, const void *host, size_t size);

    /* Pinned host memory (optional; both or none): host_alloc pins size bytes of page-locked
     * host memory with the driver's flags (TS_HOST_* below, which are CUDA's own bit values plus
     * TS_HOST_ALLOC_HOST for the flag-less cuMemAllocHost call); host_free unpins a whole buffer
     * host_alloc gave. The pointer is the driver's, so its own queries (device pointer, flags)
     * answer for it. Fences above order host reuse too: the host writes pinned memory directly. */
    int (*host_alloc)(void *ctx, size_t size, unsigned flags, uintptr_t *out);
    int (*host_free)(void *ctx, uintptr_t ptr);
} ts_backend;

/* host_alloc flags: CU_MEMHOSTALLOC_PORTABLE, _DEVICEMAP, _WRITECOMBINED (same bits), and
 * TS_HOST_ALLOC_HOST: a cuMemAllocHost buffer (no flags argument; kept in its own class). */
#define TS_HOST_PORTABLE 0x01u
#define TS_HOST_DEVICEMAP 0x02u
#define TS_HOST_WRITECOMBINED 0x04u
#define TS_HOST_ALLOC_HOST 0x08u
#define TS_HOST_FLAGS_MASK 0x0fu

static inline int ts_backend_has_vm(const ts_backend *b)
{
    return b->vm_reserve && b->vm_release && b->vm_create && b->vm_destroy && b->vm_map &&
           b->vm_unmap && b->vm_granularity;
}

#endif /* TS_BACKEND_H */
