/* Simulated CUDA driver: the exported API (libcuda.so.1).
 *
 * Every exported function is a thin wrapper around a hidden sim_* implementation; no
 * exported function calls another exported one, so an LD_PRELOADed interposer sees exactly
 * the calls a program makes. cuGetProcAddress answers from one table (gpa_table below):
 * base name, the CUDA version that introduced that ABI, the function, and its per-thread
 * default stream variant (asked for with flags 2 from CUDA 7.0 on). Older-ABI entry points (32-bit sizes and pointers, pre-4.0
 * context semantics) exist as distinct stubs returning CUDA_ERROR_NOT_SUPPORTED. */
#include "sim.h"

#include <cudaProfiler.h>

#include <stdio.h>
#include <string.h>

/* ---- initialisation, devices --------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuInit(unsigned int Flags) { return sim_init(Flags); }

SIM_API CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim_device_check(ordinal);
    if (r == CUDA_SUCCESS)
        *device = ordinal;
    return r;
}

SIM_API CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim_g.ndev;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "NVIDIA H100 80GB HBM3 (tessera-sim)");
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = sim_g.dev[dev].total_pages * SIM_PAGE;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    return sim_device_attribute(pi, attrib, dev);
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    static const char tag[8] = {'t', 'e', 's', 's', '-', 's', 'i', 'm'};
    memcpy(uuid->bytes, tag, sizeof tag);
    for (int i = 0; i < 4; i++) /* which processes share this device (sim_g.uuid_tag) */
        uuid->bytes[8 + i] = (char)(sim_g.uuid_tag >> (8 * i));
    uuid->bytes[12] = 0;
    uuid->bytes[13] = 0;
    uuid->bytes[14] = (char)(dev >> 8);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

SIM_API CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIM_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }

SIM_API CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", 0x18 + 0x10 * dev);
    return CUDA_SUCCESS;
}

/* ---- contexts ------------------------------------------------------------------------ */

SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    return sim_primary_retain(pctx, dev);
}
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return sim_primary_release(dev); }
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return sim_primary_reset(dev); }
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    return sim_primary_state(dev, flags, active);
}

SIM_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return sim_ctx_create(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                        int numParams, unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    if (numParams > 0)
        return CUDA_ERROR_NOT_SUPPORTED; /* execution affinity is not simulated */
    return sim_ctx_create(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                        unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && (ctxCreateParams->numExecAffinityParams > 0 || ctxCreateParams->cigParams))
        return CUDA_ERROR_NOT_SUPPORTED;
    return sim_ctx_create(pctx, flags, dev);
}

SIM_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return sim_ctx_destroy(ctx); }
SIM_API CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) { return sim_ctx_get_current(pctx); }
SIM_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) { return sim_ctx_set_current(ctx); }
SIM_API CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return sim_ctx_push(ctx); }
SIM_API CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) { return sim_ctx_pop(pctx); }
SIM_API CUresult CUDAAPI cuCtxGetDevice(CUdevice *device) { return sim_ctx_get_device(device, NULL); }
SIM_API CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    return sim_ctx_get_device(device, ctx);
}
SIM_API CUresult CUDAAPI cuCtxSynchronize(void) { return sim_ctx_synchronize(NULL); }
SIM_API CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return sim_ctx_synchronize(ctx); }
SIM_API CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
    return sim_ctx_set_limit(limit, value);
}
SIM_API CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    return sim_ctx_get_limit(pvalue, limit);
}
SIM_API CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) { return sim_ctx_reset_persisting_l2(); }
/* any two distinct devices are peers here (see sim_peer.c) */
SIM_API CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = sim_device_check(dev);
    if (r == CUDA_SUCCESS)
        r = sim_device_check(peerDev);
    if (r == CUDA_SUCCESS && !canAccessPeer)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *canAccessPeer = dev != peerDev;
    return r;
}

/* ---- modules --------------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    return sim_module_load_file(module, fname);
}
SIM_API CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    return sim_module_load_data(module, image, 0, NULL, NULL);
}
SIM_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image,
                                            unsigned int numOptions, CUjit_option *options,
                                            void **optionValues)
{
    return sim_module_load_data(module, image, numOptions, options, optionValues);
}
SIM_API CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return sim_module_get_function(hfunc, hmod, name);
}
SIM_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod) { return sim_module_unload(hmod); }
SIM_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    return sim_peer_enable(peerContext, Flags);
}
SIM_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
    return sim_peer_disable(peerContext);
}

/* ---- memory -------------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return sim_mem_alloc(dptr, bytesize);
}
SIM_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) { return sim_mem_free(dptr); }
/* Pitched allocations: each row rounded up to SIM_PITCH_ALIGN bytes, as a GPU aligns rows for
 * coalescing; the element size must be 4, 8 or 16 (the driver's rule). */
#define SIM_PITCH_ALIGN ((size_t)512)
SIM_API CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                            size_t Height, unsigned int ElementSizeBytes)
{
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (WidthInBytes > SIZE_MAX - SIM_PITCH_ALIGN)
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + SIM_PITCH_ALIGN - 1) / SIM_PITCH_ALIGN * SIM_PITCH_ALIGN;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = sim_mem_alloc(dptr, pitch * Height);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}
SIM_API CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    return sim_mem_get_info(free_b, total_b);
}
SIM_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return sim_mem_alloc_async(dptr, bytesize, hStream, false);
}
SIM_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return sim_mem_alloc_async(dptr, bytesize, hStream, true);
}
SIM_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return sim_mem_free_async(dptr, hStream, false);
}
SIM_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return sim_mem_free_async(dptr, hStream, true);
}
SIM_API CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return sim_host_alloc(pp, bytesize, Flags);
}
SIM_API CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    /* a GPU reports such memory as mapped into the device (cuMemHostGetFlags: DEVICEMAP) */
    return sim_host_alloc(pp, bytesize, CU_MEMHOSTALLOC_DEVICEMAP);
}
SIM_API CUresult CUDAAPI cuMemFreeHost(void *p) { return sim_host_free(p); }
SIM_API CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return sim_host_register(p, bytesize, Flags);
}
SIM_API CUresult CUDAAPI cuMemHostUnregister(void *p) { return sim_host_unregister(p); }
SIM_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p,
                                                      unsigned int Flags)
{
    return sim_host_device_pointer(pdptr, p, Flags);
}
SIM_API CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    return sim_host_get_flags(pFlags, p);
}
SIM_API CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    return sim_mem_alloc_managed(dptr, bytesize, flags);
}
SIM_API CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
                                               CUmemLocation location, unsigned int flags,
                                               CUstream hStream)
{
    return sim_mem_prefetch(devPtr, count, location, flags, hStream, false);
}
SIM_API CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                    CUmemLocation location, unsigned int flags,
                                                    CUstream hStream)
{
    return sim_mem_prefetch(devPtr, count, location, flags, hStream, true);
}
SIM_API CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                       CUmemLocation location)
{
    return sim_mem_advise(devPtr, count, advice, location);
}
SIM_API CUresult CUDAAPI cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
                                               unsigned int flags)
{
    return sim_stream_attach(hStream, dptr, length, flags, false);
}
SIM_API CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr,
                                                    size_t length, unsigned int flags)
{
    return sim_stream_attach(hStream, dptr, length, flags, true);
}
SIM_API CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle,
                                          const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    return sim_array_create(pHandle, pAllocateArray);
}
SIM_API CUresult CUDAAPI cuArrayDestroy(CUarray hArray) { return sim_array_destroy(hArray); }
SIM_API CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    return sim_array3d_create(pHandle, pAllocateArray);
}
SIM_API CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor,
                                                 CUarray hArray)
{
    return sim_array_descriptor(hArray, pArrayDescriptor, NULL);
}
SIM_API CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor,
                                                   CUarray hArray)
{
    return sim_array_descriptor(hArray, NULL, pArrayDescriptor);
}
SIM_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return sim_pool_default(pool_out, dev);
}
SIM_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                               void *value)
{
    return sim_pool_set_attribute(pool, attr, value);
}
SIM_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                               void *value)
{
    return sim_pool_get_attribute(pool, attr, value);
}
SIM_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    return sim_pool_create(pool, props);
}
SIM_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) { return sim_pool_destroy(pool); }
SIM_API CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    return sim_pool_set_current(dev, pool);
}
SIM_API CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return sim_pool_get_current(pool, dev);
}
SIM_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map,
                                            size_t count)
{
    return sim_pool_set_access(pool, map, count);
}
SIM_API CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                            CUmemLocation *location)
{
    return sim_pool_get_access(flags, memPool, location);
}
SIM_API CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                          CUmemAllocationHandleType handleType,
                                                          unsigned long long flags)
{
    return sim_pool_export(handle_out, pool, handleType, flags);
}
SIM_API CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                            CUmemAllocationHandleType handleType,
                                                            unsigned long long flags)
{
    return sim_pool_import(pool_out, handle, handleType, flags);
}
SIM_API CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out,
                                                CUdeviceptr ptr)
{
    return sim_pool_export_pointer(shareData_out, ptr);
}
SIM_API CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                                CUmemPoolPtrExportData *shareData)
{
    return sim_pool_import_pointer(ptr_out, pool, shareData);
}
SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream)
{
    return sim_mem_alloc_pool(dptr, bytesize, pool ? pool : (CUmemoryPool)1, hStream, false);
}
SIM_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                      CUmemoryPool pool, CUstream hStream)
{
    return sim_mem_alloc_pool(dptr, bytesize, pool ? pool : (CUmemoryPool)1, hStream, true);
}
/* the profiler is not there: starting and stopping it only needs a current context */
static CUresult profiler_toggle(void)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    sim_unlock();
    return r;
}
SIM_API CUresult CUDAAPI cuProfilerStart(void) { return profiler_toggle(); }
SIM_API CUresult CUDAAPI cuProfilerStop(void) { return profiler_toggle(); }
SIM_API CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    return sim_mem_address_range(pbase, psize, dptr);
}

/* ---- memset / memcpy ----------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return sim_memset(dstDevice, uc, N, 1, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return sim_memset(dstDevice, uc, N, 1, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return sim_memset(dstDevice, ui, N, 4, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return sim_memset(dstDevice, ui, N, 4, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                         CUstream hStream)
{
    return sim_memset(dstDevice, uc, N, 1, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                              CUstream hStream)
{
    return sim_memset(dstDevice, uc, N, 1, hStream, true, false);
}
SIM_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                          CUstream hStream)
{
    return sim_memset(dstDevice, ui, N, 4, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                               CUstream hStream)
{
    return sim_memset(dstDevice, ui, N, 4, hStream, true, false);
}

#define HPTR(p) ((CUdeviceptr)(uintptr_t)(p))

SIM_API CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return sim_memcpy(dst, src, ByteCount, SIM_ANY, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return sim_memcpy(dst, src, ByteCount, SIM_ANY, NULL, true, true);
}
/* Peer copies: every device shares one address space, so a copy between contexts is a plain
 * copy once both contexts are known to be valid. */
static CUresult peer_ctxs(CUcontext a, CUcontext b)
{
    if (!a || !b)
        return CUDA_ERROR_INVALID_CONTEXT;
    return CUDA_SUCCESS;
}
SIM_API CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
                                      CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
    CUresult r = peer_ctxs(dstContext, srcContext);
    return r ? r : sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                           CUdeviceptr srcDevice, CUcontext srcContext,
                                           size_t ByteCount)
{
    CUresult r = peer_ctxs(dstContext, srcContext);
    return r ? r : sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                           CUdeviceptr srcDevice, CUcontext srcContext,
                                           size_t ByteCount, CUstream hStream)
{
    CUresult r = peer_ctxs(dstContext, srcContext);
    return r ? r : sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                                CUdeviceptr srcDevice, CUcontext srcContext,
                                                size_t ByteCount, CUstream hStream)
{
    CUresult r = peer_ctxs(dstContext, srcContext);
    return r ? r : sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, hStream, true, false);
}
SIM_API CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                       CUstream hStream)
{
    return sim_memcpy(dst, src, ByteCount, SIM_ANY, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                            CUstream hStream)
{
    return sim_memcpy(dst, src, ByteCount, SIM_ANY, hStream, true, false);
}
SIM_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return sim_memcpy(dstDevice, HPTR(srcHost), ByteCount, SIM_HTOD, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                              size_t ByteCount)
{
    return sim_memcpy(dstDevice, HPTR(srcHost), ByteCount, SIM_HTOD, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return sim_memcpy(HPTR(dstHost), srcDevice, ByteCount, SIM_DTOH, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return sim_memcpy(HPTR(dstHost), srcDevice, ByteCount, SIM_DTOH, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, NULL, false, true);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                              size_t ByteCount)
{
    return sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, NULL, true, true);
}
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                              size_t ByteCount, CUstream hStream)
{
    return sim_memcpy(dstDevice, HPTR(srcHost), ByteCount, SIM_HTOD, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                                   size_t ByteCount, CUstream hStream)
{
    return sim_memcpy(dstDevice, HPTR(srcHost), ByteCount, SIM_HTOD, hStream, true, false);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                              CUstream hStream)
{
    return sim_memcpy(HPTR(dstHost), srcDevice, ByteCount, SIM_DTOH, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                                   size_t ByteCount, CUstream hStream)
{
    return sim_memcpy(HPTR(dstHost), srcDevice, ByteCount, SIM_DTOH, hStream, true, false);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                              size_t ByteCount, CUstream hStream)
{
    return sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, hStream, false, false);
}
SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                                   size_t ByteCount, CUstream hStream)
{
    return sim_memcpy(dstDevice, srcDevice, ByteCount, SIM_DTOD, hStream, true, false);
}

/* ---- pointers, IPC ------------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                               CUdeviceptr ptr)
{
    CUresult r = sim_check_init();
    return r != CUDA_SUCCESS ? r : sim_pointer_attribute(data, attribute, ptr, false);
}

SIM_API CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes,
                                                CUpointer_attribute *attributes, void **data,
                                                CUdeviceptr ptr)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!attributes || !data || numAttributes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes && r == CUDA_SUCCESS; i++)
        r = sim_pointer_attribute(data[i], attributes[i], ptr, true);
    return r;
}

SIM_API CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    return sim_ipc_get(pHandle, dptr);
}
SIM_API CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                               unsigned int Flags)
{
    return sim_ipc_open(pdptr, handle, Flags);
}
SIM_API CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) { return sim_ipc_close(dptr); }
SIM_API CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    return sim_ipc_event_get(pHandle, event);
}
SIM_API CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    return sim_ipc_event_open(phEvent, handle);
}

/* ---- streams, capture ---------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return sim_stream_create(phStream, Flags, 0);
}
SIM_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return sim_stream_create(phStream, flags, priority);
}
SIM_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) { return sim_stream_destroy(hStream); }
SIM_API CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    return sim_stream_get_flags(hStream, false, flags);
}
SIM_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return sim_stream_get_flags(hStream, true, flags);
}
SIM_API CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr,
                                              CUstreamAttrValue *value_out)
{
    return sim_stream_attribute(hStream, false, attr, value_out, false);
}
SIM_API CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                   CUstreamAttrValue *value_out)
{
    return sim_stream_attribute(hStream, true, attr, value_out, false);
}
SIM_API CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr,
                                              const CUstreamAttrValue *value)
{
    return sim_stream_attribute(hStream, false, attr, (CUstreamAttrValue *)value, true);
}
SIM_API CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr,
                                                   const CUstreamAttrValue *value)
{
    return sim_stream_attribute(hStream, true, attr, (CUstreamAttrValue *)value, true);
}
SIM_API CUresult CUDAAPI cuStreamQuery(CUstream hStream) { return sim_stream_query(hStream, false); }
SIM_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream) { return sim_stream_query(hStream, true); }
SIM_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return sim_stream_synchronize(hStream, false);
}
SIM_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return sim_stream_synchronize(hStream, true);
}
SIM_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return sim_stream_wait_event(hStream, hEvent, Flags, false);
}
SIM_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return sim_stream_wait_event(hStream, hEvent, Flags, true);
}
SIM_API CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return sim_stream_is_capturing(hStream, false, captureStatus);
}
SIM_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream,
                                                  CUstreamCaptureStatus *captureStatus)
{
    return sim_stream_is_capturing(hStream, true, captureStatus);
}
SIM_API CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    return sim_stream_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
SIM_API CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return sim_stream_begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
SIM_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return sim_stream_begin_capture(hStream, mode, false);
}
SIM_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return sim_stream_begin_capture(hStream, mode, true);
}
SIM_API CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return sim_stream_end_capture(hStream, phGraph, false);
}
SIM_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return sim_stream_end_capture(hStream, phGraph, true);
}
SIM_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    return sim_thread_exchange_capture_mode(mode);
}
SIM_API CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) { return sim_graph_destroy(hGraph); }
SIM_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                      unsigned long long flags)
{
    return sim_graph_instantiate(phGraphExec, hGraph, flags);
}
SIM_API CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) { return sim_graph_mem_trim(device); }
SIM_API CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                      void *value)
{
    return sim_graph_mem_attribute(device, attr, value, false);
}
SIM_API CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                      void *value)
{
    return sim_graph_mem_attribute(device, attr, value, true);
}
SIM_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return sim_graph_launch(hGraphExec, hStream, false);
}
SIM_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return sim_graph_launch(hGraphExec, hStream, true);
}
SIM_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    return sim_graph_exec_destroy(hGraphExec);
}

/* ---- events, host functions ---------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    return sim_event_create(phEvent, Flags);
}
SIM_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return sim_event_record(hEvent, hStream, false);
}
SIM_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return sim_event_record(hEvent, hStream, true);
}
SIM_API CUresult CUDAAPI cuEventQuery(CUevent hEvent) { return sim_event_query(hEvent); }
SIM_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) { return sim_event_synchronize(hEvent); }
SIM_API CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) { return sim_event_destroy(hEvent); }
SIM_API CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return sim_event_elapsed(pMilliseconds, hStart, hEnd);
}
SIM_API CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return sim_event_elapsed(pMilliseconds, hStart, hEnd);
}
SIM_API CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                             void *userData, unsigned int flags)
{
    return sim_stream_add_callback(hStream, callback, userData, flags, false);
}
SIM_API CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                                  void *userData, unsigned int flags)
{
    return sim_stream_add_callback(hStream, callback, userData, flags, true);
}
SIM_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    return sim_launch_host_func(hStream, fn, userData, false);
}
SIM_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    return sim_launch_host_func(hStream, fn, userData, true);
}

/* ---- kernel launches: accepted and queued in stream order, nothing computed -------------- */

static CUresult launch_dims(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, CUstream s, bool ptsz)
{
    const unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    return sim_launch_kernel(f, dims, s, ptsz);
}

static CUresult launch_config(const CUlaunchConfig *c, CUfunction f, bool ptsz)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return launch_dims(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                       c->blockDimZ, c->hStream, ptsz);
}

SIM_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                        CUstream hStream, void **params, void **extra)
{
    (void)shmem, (void)params, (void)extra;
    return launch_dims(f, gx, gy, gz, bx, by, bz, hStream, false);
}
SIM_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                             CUstream hStream, void **params, void **extra)
{
    (void)shmem, (void)params, (void)extra;
    return launch_dims(f, gx, gy, gz, bx, by, bz, hStream, true);
}
SIM_API CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy,
                                                   unsigned gz, unsigned bx, unsigned by,
                                                   unsigned bz, unsigned shmem, CUstream hStream,
                                                   void **params)
{
    (void)shmem, (void)params;
    return launch_dims(f, gx, gy, gz, bx, by, bz, hStream, false);
}
SIM_API CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                        unsigned gz, unsigned bx, unsigned by,
                                                        unsigned bz, unsigned shmem,
                                                        CUstream hStream, void **params)
{
    (void)shmem, (void)params;
    return launch_dims(f, gx, gy, gz, bx, by, bz, hStream, true);
}
SIM_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                          void **params, void **extra)
{
    (void)params, (void)extra;
    return launch_config(config, f, false);
}
SIM_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                               void **params, void **extra)
{
    (void)params, (void)extra;
    return launch_config(config, f, true);
}

/* ---- errors, export tables ----------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = sim_error_string(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = sim_error_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    (void)pExportTableId;
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED; /* private ABI of the real driver */
}

/* ---- virtual memory management ------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                             CUdeviceptr addr, unsigned long long flags)
{
    return sim_vmm_reserve(ptr, size, alignment, addr, flags);
}
SIM_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) { return sim_vmm_free(ptr, size); }
SIM_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    return sim_vmm_create(handle, size, prop, flags);
}
SIM_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) { return sim_vmm_release(handle); }
SIM_API CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                                      CUmemGenericAllocationHandle handle,
                                                      CUmemAllocationHandleType handleType,
                                                      unsigned long long flags)
{
    return sim_vmm_export(shareableHandle, handle, (int)handleType, flags);
}
SIM_API CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                        void *osHandle,
                                                        CUmemAllocationHandleType shHandleType)
{
    return sim_vmm_import(handle, osHandle, (int)shHandleType);
}
SIM_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    return sim_vmm_retain(handle, addr);
}
SIM_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    return sim_vmm_map(ptr, size, offset, handle, flags);
}
SIM_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) { return sim_vmm_unmap(ptr, size); }
SIM_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                        size_t count)
{
    return sim_vmm_set_access(ptr, size, desc, count);
}
SIM_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity,
                                                       const CUmemAllocationProp *prop,
                                                       CUmemAllocationGranularity_flags option)
{
    return sim_vmm_granularity(granularity, prop, (int)option);
}

/* ---- older ABI versions: distinct entry points, not supported -------------------------- */

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
SIM_API CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemGetInfo(unsigned int *free_b, unsigned int *total_b) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize, CUdeviceptr_v1 dptr) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount, CUstream hStream) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return CUDA_ERROR_NOT_SUPPORTED; }
SIM_API CUresult CUDAAPI cuEventDestroy(CUevent hEvent) { return CUDA_ERROR_NOT_SUPPORTED; }
#pragma GCC diagnostic pop

/* ---- cuGetProcAddress ---------------------------------------------------------------- */

SIM_API CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                          cuuint64_t flags);
SIM_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *symbolStatus);

struct gpa_entry {
    const char *name; /* base name, as callers ask for it */
    int version;      /* first CUDA version with this ABI */
    void *fn;
    void *ptsz;       /* per-thread default stream variant, or NULL */
};

#define FN(f) ((void *)(f))
#define ROW(name, ver, f) {name, ver, FN(f), NULL}
#define ROWP(name, ver, f, p) {name, ver, FN(f), FN(p)}

static const struct gpa_entry gpa_table[] = {
    ROW("cuInit", 2000, cuInit),
    ROW("cuDriverGetVersion", 2020, cuDriverGetVersion),
    ROW("cuDeviceGet", 2000, cuDeviceGet),
    ROW("cuDeviceGetCount", 2000, cuDeviceGetCount),
    ROW("cuDeviceGetName", 2000, cuDeviceGetName),
    ROW("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    ROW("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    ROW("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    ROW("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    ROW("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    ROW("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    ROW("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    ROW("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    ROW("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    ROW("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    ROW("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    ROW("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    ROW("cuCtxCreate", 2000, cuCtxCreate),
    ROW("cuCtxCreate", 3020, cuCtxCreate_v2),
    ROW("cuCtxCreate", 11040, cuCtxCreate_v3),
    ROW("cuCtxCreate", 12050, cuCtxCreate_v4),
    ROW("cuCtxDestroy", 2000, cuCtxDestroy),
    ROW("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    ROW("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    ROW("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    ROW("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    ROW("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    ROW("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    ROW("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    ROW("cuCtxGetDevice", 2000, cuCtxGetDevice),
    ROW("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    ROW("cuCtxSynchronize", 2000, cuCtxSynchronize),
    ROW("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    ROW("cuCtxSetLimit", 3010, cuCtxSetLimit),
    ROW("cuCtxGetLimit", 3010, cuCtxGetLimit),
    ROW("cuCtxResetPersistingL2Cache", 11000, cuCtxResetPersistingL2Cache),
    ROW("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    ROW("cuModuleLoad", 2000, cuModuleLoad),
    ROW("cuModuleLoadData", 2000, cuModuleLoadData),
    ROW("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    ROW("cuModuleGetFunction", 2000, cuModuleGetFunction),
    ROW("cuModuleUnload", 2000, cuModuleUnload),
    ROW("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    ROW("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    ROW("cuMemAlloc", 2000, cuMemAlloc),
    ROW("cuMemAlloc", 3020, cuMemAlloc_v2),
    ROW("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    ROW("cuMemFree", 2000, cuMemFree),
    ROW("cuMemFree", 3020, cuMemFree_v2),
    ROW("cuMemGetInfo", 2000, cuMemGetInfo),
    ROW("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    ROWP("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    ROWP("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    ROW("cuMemHostAlloc", 2020, cuMemHostAlloc),
    ROW("cuMemAllocHost", 2000, cuMemAllocHost),
    ROW("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    ROW("cuMemFreeHost", 2000, cuMemFreeHost),
    ROW("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    ROW("cuMemHostUnregister", 4000, cuMemHostUnregister),
    ROW("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    ROW("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    ROW("cuMemAllocManaged", 6000, cuMemAllocManaged),
    ROWP("cuMemPrefetchAsync", 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz),
    ROW("cuMemAdvise", 12020, cuMemAdvise_v2),
    ROWP("cuStreamAttachMemAsync", 6000, cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz),
    ROW("cuArrayCreate", 3020, cuArrayCreate_v2),
    ROW("cuArrayDestroy", 2000, cuArrayDestroy),
    ROW("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    ROW("cuArrayGetDescriptor", 3020, cuArrayGetDescriptor_v2),
    ROW("cuArray3DGetDescriptor", 3020, cuArray3DGetDescriptor_v2),
    ROW("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    ROW("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    ROW("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    ROW("cuMemPoolCreate", 11020, cuMemPoolCreate),
    ROW("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    ROW("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    ROW("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    ROWP("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    ROW("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    ROW("cuMemPoolGetAccess", 11020, cuMemPoolGetAccess),
    ROW("cuMemPoolExportToShareableHandle", 11020, cuMemPoolExportToShareableHandle),
    ROW("cuMemPoolImportFromShareableHandle", 11020, cuMemPoolImportFromShareableHandle),
    ROW("cuMemPoolExportPointer", 11020, cuMemPoolExportPointer),
    ROW("cuMemPoolImportPointer", 11020, cuMemPoolImportPointer),
    ROW("cuProfilerStart", 4000, cuProfilerStart),
    ROW("cuProfilerStop", 4000, cuProfilerStop),
    ROWP("cuMemcpyPeer", 4000, cuMemcpyPeer, cuMemcpyPeer_ptds),
    ROWP("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz),
    ROWP("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    ROW("cuMemGetAddressRange", 2000, cuMemGetAddressRange),
    ROW("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    ROW("cuMemsetD8", 2000, cuMemsetD8),
    ROWP("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    ROW("cuMemsetD32", 2000, cuMemsetD32),
    ROWP("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    ROWP("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    ROWP("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),
    ROWP("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    ROWP("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    ROW("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    ROWP("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    ROW("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    ROWP("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    ROW("cuMemcpyDtoD", 2000, cuMemcpyDtoD),
    ROWP("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    ROW("cuMemcpyHtoDAsync", 2000, cuMemcpyHtoDAsync),
    ROWP("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    ROW("cuMemcpyDtoHAsync", 2000, cuMemcpyDtoHAsync),
    ROWP("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    ROW("cuMemcpyDtoDAsync", 3000, cuMemcpyDtoDAsync),
    ROWP("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    ROW("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    ROW("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    ROW("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    ROW("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    ROW("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    ROW("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    ROW("cuIpcGetEventHandle", 4010, cuIpcGetEventHandle),
    ROW("cuIpcOpenEventHandle", 4010, cuIpcOpenEventHandle),
    ROW("cuStreamCreate", 2000, cuStreamCreate),
    ROW("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    ROW("cuStreamDestroy", 2000, cuStreamDestroy),
    ROW("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    ROWP("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    ROWP("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    ROWP("cuStreamGetAttribute", 11000, cuStreamGetAttribute, cuStreamGetAttribute_ptsz),
    ROWP("cuStreamSetAttribute", 11000, cuStreamSetAttribute, cuStreamSetAttribute_ptsz),
    ROWP("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    ROWP("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    ROWP("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    ROWP("cuStreamBeginCapture", 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz),
    ROWP("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    ROWP("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    ROW("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    ROW("cuGraphDestroy", 10000, cuGraphDestroy),
    ROW("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    ROW("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    ROWP("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    ROW("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    ROW("cuDeviceGraphMemTrim", 11040, cuDeviceGraphMemTrim),
    ROW("cuDeviceGetGraphMemAttribute", 11040, cuDeviceGetGraphMemAttribute),
    ROW("cuDeviceSetGraphMemAttribute", 11040, cuDeviceSetGraphMemAttribute),
    ROW("cuEventCreate", 2000, cuEventCreate),
    ROWP("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    ROW("cuEventQuery", 2000, cuEventQuery),
    ROW("cuEventSynchronize", 2000, cuEventSynchronize),
    ROW("cuEventDestroy", 2000, cuEventDestroy),
    ROW("cuEventDestroy", 4000, cuEventDestroy_v2),
    ROW("cuEventElapsedTime", 2000, cuEventElapsedTime),
    ROW("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    ROWP("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    ROWP("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    ROWP("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    ROWP("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel,
         cuLaunchCooperativeKernel_ptsz),
    ROW("cuGetErrorString", 6000, cuGetErrorString),
    ROW("cuGetErrorName", 6000, cuGetErrorName),
    ROW("cuGetExportTable", 3000, cuGetExportTable),
    ROW("cuMemAddressReserve", 10020, cuMemAddressReserve),
    ROW("cuMemAddressFree", 10020, cuMemAddressFree),
    ROW("cuMemCreate", 10020, cuMemCreate),
    ROW("cuMemRelease", 10020, cuMemRelease),
    ROW("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    ROW("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    ROW("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    ROW("cuMemMap", 10020, cuMemMap),
    ROW("cuMemUnmap", 10020, cuMemUnmap),
    ROW("cuMemSetAccess", 10020, cuMemSetAccess),
    ROW("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    ROW("cuGetProcAddress", 11030, cuGetProcAddress),
    ROW("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

static CUresult gpa_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                           CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    if (cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE; /* newer than this driver */
    const struct gpa_entry *best = NULL;
    bool seen = false;
    for (size_t i = 0; i < sizeof gpa_table / sizeof gpa_table[0]; i++) {
        const struct gpa_entry *e = &gpa_table[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        seen = true;
        if (e->version <= cudaVersion && (!best || e->version > best->version))
            best = e;
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = seen ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                           : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_SUCCESS;
    }
    bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    if (ptds && best->ptsz && cudaVersion < 7000) {
        /* per-thread default streams came with CUDA 7.0: a real driver returns no function
         * for an older version rather than the legacy one */
        if (status)
            *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_SUCCESS;
    }
    *pfn = ptds && best->ptsz ? best->ptsz : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

/* The 11.3 - 11.8 ABI (four arguments). */
SIM_API CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                          cuuint64_t flags)
{
    return gpa_lookup(symbol, pfn, cudaVersion, flags, NULL);
}

SIM_API CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                             cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *symbolStatus)
{
    return gpa_lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ---- introspection for tests --------------------------------------------------------- */

SIM_API int tessera_sim_counters(int device, struct tessera_sim_counters *out)
{
    if (!out || sim_configure() != CUDA_SUCCESS || device < 0 || device >= sim_g.ndev)
        return -1;
    sim_report_counters(device, out);
    return 0;
}

SIM_API int tessera_sim_can_access(int device, uint64_t ptr, uint64_t size)
{
    return sim_can_access(device, ptr, size);
}
