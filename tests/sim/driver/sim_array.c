/* Simulated CUDA driver: CUDA arrays (cuArrayCreate_v2, cuArray3DCreate_v2, their descriptors,
 * cuArrayDestroy).
 *
 * An array is a plain allocation of width x height x depth elements of its format and channels
 * (no padding, no tiling: nothing reads it as a texture here), counted against the device like
 * cuMemAlloc; its handle is its base address. It keeps the descriptor it was made with. The
 * shapes and limits are those of the H100's device attributes: 1-D, 2-D and 3-D arrays, layered
 * 1-D and 2-D arrays (Depth layers) and cube maps (Width == Height, Depth 6, or a multiple of 6
 * when layered). Sparse and deferred-mapping arrays are not simulated
 * (CUDA_ERROR_NOT_SUPPORTED). */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

static size_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

#define ARRAY_FLAGS                                                                             \
    (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |                    \
     CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE | CUDA_ARRAY3D_COLOR_ATTACHMENT)

static int attr(CUdevice_attribute a)
{
    int v = 0;
    sim_device_attribute(&v, a, 0);
    return v;
}

/* The shape rules of cuArray3DCreate: CUDA_SUCCESS when the descriptor names an array this
 * device can make. */
static CUresult shape_check(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    size_t w = d->Width, h = d->Height, depth = d->Depth;
    unsigned fl = d->Flags;
    if (fl & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((fl & ~(unsigned)ARRAY_FLAGS) || !format_bytes(d->Format) ||
        (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) || w == 0)
        return CUDA_ERROR_INVALID_VALUE;
    bool layered = fl & CUDA_ARRAY3D_LAYERED;
    if (fl & CUDA_ARRAY3D_CUBEMAP) {
        size_t max_layers = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS);
        bool faces = layered ? depth % 6 == 0 && depth >= 6 && depth <= max_layers : depth == 6;
        return w == h && faces && w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH)
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    }
    if ((fl & CUDA_ARRAY3D_TEXTURE_GATHER) && (h == 0 || depth != 0 || layered))
        return CUDA_ERROR_INVALID_VALUE; /* gather works on 2-D arrays only */
    if (layered) {
        if (depth == 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (h == 0)
            return w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH) &&
                           depth <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS)
                       ? CUDA_SUCCESS
                       : CUDA_ERROR_INVALID_VALUE;
        return w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH) &&
                       h <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT) &&
                       depth <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS)
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    }
    /* a 1-D array a surface can write is bounded by the surface's limit (an H100 refuses a
     * 65536-wide one that its texture limit would allow) */
    if ((fl & CUDA_ARRAY3D_SURFACE_LDST) && h == 0 && depth == 0 &&
        w > (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH))
        return CUDA_ERROR_INVALID_VALUE;
    if (depth == 0)
        return (h == 0 ? w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH)
                       : w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH) &&
                             h <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT))
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    /* a 3-D array needs a height */
    return h != 0 && w <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH) &&
                   h <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT) &&
                   depth <= (size_t)attr(CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH)
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

CUresult sim_array3d_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !desc)
        return CUDA_ERROR_INVALID_VALUE;
    r = shape_check(desc);
    if (r != CUDA_SUCCESS)
        return r;
    /* every dimension is bounded above (at most 2^17 x 2^16 x 2^14): no overflow */
    size_t bytes = desc->Width * (desc->Height ? desc->Height : 1) *
                   (desc->Depth ? desc->Depth : 1) * desc->NumChannels *
                   format_bytes(desc->Format);
    CUDA_ARRAY3D_DESCRIPTOR *kept = malloc(sizeof *kept);
    if (!kept)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *kept = *desc;
    CUdeviceptr p = 0;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_mem_alloc_locked(cur, bytes, SIM_ALLOC_ARRAY, &p);
    if (r == CUDA_SUCCESS)
        sim_mem_alloc_at(p)->array = kept;
    sim_unlock();
    if (r != CUDA_SUCCESS) {
        free(kept);
        return r;
    }
    *out = (CUarray)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* cuArrayCreate_v2: a 1-D or 2-D array, a 3-D descriptor with no depth and no flags. */
CUresult sim_array_create(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    if (!desc)
        return sim_array3d_create(out, NULL);
    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    d3.Width = desc->Width;
    d3.Height = desc->Height;
    d3.Format = desc->Format;
    d3.NumChannels = desc->NumChannels;
    return sim_array3d_create(out, &d3);
}

/* lock held: the live array a handle names, or NULL */
static struct sim_alloc *array_of(CUarray arr)
{
    struct sim_alloc *a = arr ? sim_mem_alloc_at((CUdeviceptr)(uintptr_t)arr) : NULL;
    return a && a->kind == SIM_ALLOC_ARRAY && !a->free_pending ? a : NULL;
}

CUresult sim_array_destroy(CUarray arr)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_alloc *a = array_of(arr);
    if (!a) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        /* like cuMemFree: the memory goes once the context's queued work is done */
        a->free_pending = true;
        uint64_t serial = a->serial;
        sim_wait_ctx_idle(a->ctx);
        a = sim_mem_alloc_at((CUdeviceptr)(uintptr_t)arr);
        if (a && a->serial == serial)
            sim_alloc_release(a, true);
    }
    sim_unlock();
    return r;
}

/* cuArrayGetDescriptor_v2 (d2) or cuArray3DGetDescriptor_v2 (d3): the descriptor the array was
 * made with. A 2-D descriptor cannot describe a layered, cube map or 3-D array. */
CUresult sim_array_descriptor(CUarray arr, CUDA_ARRAY_DESCRIPTOR *d2, CUDA_ARRAY3D_DESCRIPTOR *d3)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!d2 && !d3)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_alloc *a = array_of(arr);
    if (!a) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (d3) {
        *d3 = *a->array;
    } else if (a->array->Depth != 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        d2->Width = a->array->Width;
        d2->Height = a->array->Height;
        d2->Format = a->array->Format;
        d2->NumChannels = a->array->NumChannels;
    }
    sim_unlock();
    return r;
}
