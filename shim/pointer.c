/* Pointer queries about memory tessera hands out, answered for the block.
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
 * Memory tessera holds but has not handed out (cached, free) answers as unallocated memory does. */
#include <string.h>

#include "shim/shim.h"

/* Buffer ids of tessera's blocks: bit 62 set, so they never meet the driver's own small
 * counters; the allocator's table index above each allocator's allocation number. */
#define BUFFER_ID_BASE (1ull << 62)
#define BUFFER_ID_INDEX_SHIFT 48

typedef struct ptr_view {
    bool live;
    ts_block_info blk;
    CUcontext ctx;
    int device;
    uint64_t buffer_id;
} ptr_view;

/* false: not tessera's memory. */
static bool ptr_view_get(CUdeviceptr ptr, ptr_view *v)
{
    if (!ts_shim_active() || !ts_driver_ready())
        return false;
    ts_allocator *a = NULL;
    int index = 0;
    if (ts_ctx_owner((uintptr_t)ptr, &a, &v->ctx, &index, &v->blk) != TS_OK)
        return false;
    v->live = v->blk.state == TS_BLOCK_ALLOCATED;
    v->device = ts_allocator_device(a);
    v->buffer_id = BUFFER_ID_BASE | ((uint64_t)index << BUFFER_ID_INDEX_SHIFT) | v->blk.serial;
    return true;
}

static void put_bool(void *data, bool b)
{
    /* One byte, as the driver writes its boolean attributes. */
    *(unsigned char *)data = b ? 1 : 0;
}

/* Write attr for a live block; false when the driver's own answer stands. */
static bool attr_put(void *data, CUpointer_attribute attr, const ptr_view *v)
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
        *(void **)data = (void *)v->blk.addr;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = v->blk.requested;
        return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = v->blk.size;
        return true;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        return true;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        /* a stream-ordered block comes from the device's default pool, as far as the program
         * knows; cudaMalloc memory from none */
        *(CUmemoryPool *)data = v->blk.stream ? ts_pool_default(v->device) : NULL;
        return true;
    default:
        return false;
    }
}

/* cuPointerGetAttributes' "default NULL values" for memory that is not allocated. */
static void attr_put_none(void *data, CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
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
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = 0;
        break;
    default: /* the boolean ones */
        put_bool(data, false);
        break;
    }
}

bool ts_pointer_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *size, CUresult *r)
{
    ptr_view v;
    if (!ptr_view_get(ptr, &v))
        return false;
    if (!v.live) {
        *r = CUDA_ERROR_NOT_FOUND;
        return true;
    }
    if (base)
        *base = (CUdeviceptr)v.blk.addr;
    if (size)
        *size = v.blk.requested;
    *r = CUDA_SUCCESS;
    return true;
}

bool ts_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, CUresult *r)
{
    ptr_view v;
    if (!data || !ptr_view_get(ptr, &v))
        return false;
    if (!v.live)
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
    if (!attrs || !data || !ptr_view_get(ptr, &v))
        return false;
    if (v.live) {
        *r = ts_real.cuPointerGetAttributes(n, attrs, data, ptr);
        for (unsigned int i = 0; *r == CUDA_SUCCESS && i < n; i++)
            if (data[i])
                (void)attr_put(data[i], attrs[i], &v);
        return true;
    }
    for (unsigned int i = 0; i < n; i++)
        if (data[i])
            attr_put_none(data[i], attrs[i]);
    *r = CUDA_SUCCESS;
    return true;
}
