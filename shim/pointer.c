/* Pointer queries about memory tessera hands out, answered for the block or the pinned piece.
 *
 * To the driver, a tessera block is a piece of a bigger allocation: a 20 MiB segment holding other
 * blocks, or a range mapped with the virtual-memory API. A library that asks the driver for a
 * pointer's range (CUDA-aware MPI and UCX do, then export the range's base over IPC) would get the
 * segment instead of its allocation. So for a pointer in a live block, tessera answers what the
 * driver answers for a cudaMalloc of the block's size:
 *   range (cuMemGetAddressRange, RANGE_START_ADDR / RANGE_SIZE): the block's start and the size
 *     the program asked for; MAPPING_BASE_ADDR / MAPPING_SIZE: the block's start and size;
 *   BUFFER_ID: one per allocation, never reused (a block handed out again gets a new one);
 *   IS_LEGACY_CUDA_IPC_CAPABLE: true (ipc.c exports every block); ALLOWED_HANDLE_TYPES: none, as
 *     for cudaMalloc memory; MAPPED: true; CONTEXT, DEVICE_ORDINAL, MEMORY_TYPE: the allocator's;
 *   MEMPOOL_HANDLE: the device's default pool for a stream-ordered block (cudaMallocAsync),
 *     none for the others;
 *   everything else: the driver's own answer for the pointer.
 * Pinned host memory is the same story: a piece of a region the driver pinned (core/hostcache.c).
 * For a pointer in a live piece, within the bytes the program asked for, tessera answers what the
 * driver answers for a cudaHostAlloc of that size: the range, the mapping (start, and the asked
 * size rounded up to 2 MiB, as a GPU gives them), and BUFFER_ID and MEMORY_BLOCK_ID are the piece's;
 * everything else (memory type, context, device and host pointers, flags) is the driver's answer
 * for the region, pinned with the piece's flags.
 * Memory tessera holds but has not handed out (cached, free, freed and waiting for its fence)
 * answers as unallocated memory does: device memory as the driver's unallocated device
 * addresses, host memory as memory CUDA does not know.
 * The host-memory queries (cuMemHostGetDevicePointer, cuMemHostGetFlags) refuse every device
 * address tessera holds, as the driver refuses cudaMalloc memory: on a GPU the driver itself
 * answers them for memory mapped with the virtual-memory API, with flags 3 and the mapping's
 * start, which no program asking about a cudaMalloc pointer would see. */
#include <string.h>

#include "core/hostcache.h"
#include "shim/shim.h"

/* Buffer ids of tessera's blocks: bit 62 set, so they never meet the driver's own small
 * counters; the allocator's table index above each allocator's allocation number. Pinned pieces
 * have bit 61 set too: their numbers are the host cache's own. */
#define BUFFER_ID_BASE (1ull << 62)
#define BUFFER_ID_HOST (1ull << 61)
#define BUFFER_ID_INDEX_SHIFT 48
#define HOST_MAPPING_UNIT ((size_t)2 << 20)

typedef enum view_kind {
    VIEW_NONE,      /* not tessera's memory: the driver answers */
    VIEW_BLOCK,     /* a live block */
    VIEW_PIECE,     /* a live pinned piece */
    VIEW_UNDEVICE,  /* device memory tessera holds, not handed out */
    VIEW_UNHOST,    /* host memory tessera holds, not handed out */
} view_kind;

typedef struct ptr_view {
    view_kind kind;
    uintptr_t base;   /* VIEW_BLOCK, VIEW_PIECE */
    size_t requested; /* the size the program asked for */
    size_t size;      /* VIEW_BLOCK: the block's */
    uintptr_t stream; /* VIEW_BLOCK: the stream of a stream-ordered block */
    CUcontext ctx;
    int device;
    uint64_t buffer_id;
} ptr_view;

static uint64_t buffer_id(int index, uint64_t serial)
{
    return BUFFER_ID_BASE | ((uint64_t)index << BUFFER_ID_INDEX_SHIFT) | serial;
}

/* What tessera knows about ptr. */
static view_kind ptr_view_get(CUdeviceptr ptr, ptr_view *v)
{
    memset(v, 0, sizeof *v);
    if (!ts_shim_active() || !ts_driver_ready())
        return VIEW_NONE;
    ts_allocator *a = NULL;
    int index = 0;
    ts_block_info blk;
    ts_host_info host;
    if (ts_ctx_owner((uintptr_t)ptr, &a, &v->ctx, &index, &blk) == TS_OK) {
        v->kind = blk.state == TS_BLOCK_ALLOCATED ? VIEW_BLOCK : VIEW_UNDEVICE;
        v->base = blk.addr;
        v->requested = blk.requested;
        v->size = blk.size;
        v->stream = blk.stream;
        v->device = ts_allocator_device(a);
        v->buffer_id = buffer_id(index, blk.serial);
    } else if (ts_ctx_host_owner((uintptr_t)ptr, &index, &host) == TS_OK) {
        /* The bytes past the request (the last page's rest) are not the program's either. */
        bool live = host.live && (uintptr_t)ptr - host.base < host.requested;
        v->kind = live ? VIEW_PIECE : VIEW_UNHOST;
        v->base = host.base;
        v->requested = host.requested;
        v->buffer_id = buffer_id(index, host.serial) | BUFFER_ID_HOST;
    }
    return v->kind;
}

static void put_bool(void *data, bool b)
{
    /* One byte, as the driver writes its boolean attributes. */
    *(unsigned char *)data = b ? 1 : 0;
}

/* Write attr for a live block; false when the driver's own answer stands. */
static bool attr_put_block(void *data, CUpointer_attribute attr, const ptr_view *v)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = v->ctx;
        return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
        return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = v->buffer_id;
        return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = v->device;
        return true;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_bool(data, true);
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)v->base;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = v->requested;
        return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = v->size;
        return true;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return true;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        /* a stream-ordered block comes from the device's default pool, as far as the program
         * knows; cudaMalloc memory from none */
        *(CUmemoryPool *)data = v->stream ? ts_pool_default(v->device) : NULL;
        return true;
    default:
        return false;
    }
}

/* Write attr for a live pinned piece; false when the driver's answer for its region stands. */
static bool attr_put_piece(void *data, CUpointer_attribute attr, const ptr_view *v)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = v->buffer_id;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)v->base;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = v->requested;
        return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        /* the driver maps pinned memory in 2 MiB units: a 10,000-byte cudaHostAlloc answers
         * 2 MiB, one of 3 MiB + 7 bytes 4 MiB (an H100, driver 580) */
        *(size_t *)data = (v->requested + HOST_MAPPING_UNIT - 1) / HOST_MAPPING_UNIT * HOST_MAPPING_UNIT;
        return true;
    default:
        return false;
    }
}

static bool attr_put(void *data, CUpointer_attribute attr, const ptr_view *v)
{
    return v->kind == VIEW_BLOCK ? attr_put_block(data, attr, v) : attr_put_piece(data, attr, v);
}

/* cuPointerGetAttributes' "default NULL values" for memory that is not allocated, as a GPU gives
 * them for freed cudaMalloc and cudaHostAlloc memory alike: the host pointer is the pointer itself,
 * the range's start and size are left as they were, the rest is null. */
static void attr_put_none(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = -2;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = 0;
        break;
    default: /* the boolean ones */
        put_bool(data, false);
        break;
    }
}

static bool view_live(const ptr_view *v)
{
    return v->kind == VIEW_BLOCK || v->kind == VIEW_PIECE;
}

bool ts_pointer_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *size, CUresult *r)
{
    ptr_view v;
    if (ptr_view_get(ptr, &v) == VIEW_NONE)
        return false;
    if (!view_live(&v)) {
        *r = CUDA_ERROR_NOT_FOUND;
        return true;
    }
    if (base)
        *base = (CUdeviceptr)v.base;
    if (size)
        *size = v.requested;
    *r = CUDA_SUCCESS;
    return true;
}

bool ts_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, CUresult *r)
{
    ptr_view v;
    if (!data || ptr_view_get(ptr, &v) == VIEW_NONE)
        return false;
    if (!view_live(&v))
        *r = CUDA_ERROR_INVALID_VALUE; /* not a valid CUDA pointer */
    else if (attr_put(data, attr, &v))
        *r = CUDA_SUCCESS;
    else
        *r = ts_real.cuPointerGetAttribute(data, attr, ptr);
    return true;
}

bool ts_pointer_attributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                           CUdeviceptr ptr, CUresult *r)
{
    ptr_view v;
    if (!attrs || !data || ptr_view_get(ptr, &v) == VIEW_NONE)
        return false;
    if (view_live(&v)) {
        *r = ts_real.cuPointerGetAttributes(n, attrs, data, ptr);
        for (unsigned int i = 0; *r == CUDA_SUCCESS && i < n; i++)
            if (data[i])
                (void)attr_put(data[i], attrs[i], &v);
        return true;
    }
    for (unsigned int i = 0; i < n; i++)
        if (data[i])
            attr_put_none(data[i], attrs[i], ptr);
    *r = CUDA_SUCCESS;
    return true;
}

bool ts_pointer_host_refused(const void *p)
{
    ptr_view v;
    view_kind k = ptr_view_get((CUdeviceptr)(uintptr_t)p, &v);
    return k != VIEW_NONE && k != VIEW_PIECE;
}
