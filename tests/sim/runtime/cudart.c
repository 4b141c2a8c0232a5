/* Simulated CUDA runtime (libcudart.so.13), built on the driver the way the real one is:
 *
 *   dlopen("libcuda.so.1", RTLD_NOW), one dlsym(handle, "cuGetProcAddress_v2"), the probe
 *   gpa("", 0, 0), gpa("cuInit", 2000), the self-lookups gpa("cuGetProcAddress", 11030) and
 *   gpa("cuGetProcAddress", 12000); every other driver function comes from the pointer the
 *   12000 self-lookup returned, requested by base name and ABI version (cuMemAlloc at 3020
 *   for cuMemAlloc_v2, the stream-ordered ones a second time with flags 2 for _ptsz).
 *
 * Nothing in here calls a cu* function by name, and no exported cuda* function calls
 * another exported one: each is a wrapper around a static implementation. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define RT_API __attribute__((visibility("default")))
#define RT_MAX_DEVICES 64

/* field, prototype (for the type), base name, cudaVersion, flags (2: per-thread default
 * stream variant, which exists from CUDA 7.0 on) */
#define DRIVER_FUNCS(X)                                                                       \
    X(cuInit, cuInit, "cuInit", 2000, 0)                                                      \
    X(cuDriverGetVersion, cuDriverGetVersion, "cuDriverGetVersion", 2020, 0)                  \
    X(cuDeviceGetCount, cuDeviceGetCount, "cuDeviceGetCount", 2000, 0)                        \
    X(cuDeviceGetName, cuDeviceGetName, "cuDeviceGetName", 2000, 0)                           \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)                     \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000, 0)            \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2, "cuDeviceGetUuid", 11040, 0)                       \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0) \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0) \
    X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 7000, 0) \
    X(cuCtxGetCurrent, cuCtxGetCurrent, "cuCtxGetCurrent", 4000, 0)                           \
    X(cuCtxSetCurrent, cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0)                           \
    X(cuCtxGetDevice, cuCtxGetDevice, "cuCtxGetDevice", 2000, 0)                              \
    X(cuCtxGetDevice_v2, cuCtxGetDevice_v2, "cuCtxGetDevice", 13000, 0)                       \
    X(cuCtxSynchronize, cuCtxSynchronize, "cuCtxSynchronize", 2000, 0)                        \
    X(cuCtxSynchronize_v2, cuCtxSynchronize_v2, "cuCtxSynchronize", 13000, 0)                 \
    X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 4000, 0)         \
    X(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", 4000, 0)      \
    X(cuMemAlloc, cuMemAlloc_v2, "cuMemAlloc", 3020, 0)                                       \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)                        \
    X(cuMemFree, cuMemFree_v2, "cuMemFree", 3020, 0)                                          \
    X(cuMemGetInfo, cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)                                 \
    X(cuMemAllocAsync, cuMemAllocAsync, "cuMemAllocAsync", 11020, 0)                          \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 2)                \
    X(cuMemFreeAsync, cuMemFreeAsync, "cuMemFreeAsync", 11020, 0)                             \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 2)                   \
    X(cuMemHostAlloc, cuMemHostAlloc, "cuMemHostAlloc", 2020, 0)                              \
    X(cuMemAllocHost, cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0)                           \
    X(cuMemFreeHost, cuMemFreeHost, "cuMemFreeHost", 2000, 0)                                 \
    X(cuMemcpy, cuMemcpy, "cuMemcpy", 4000, 0)                                                \
    X(cuMemcpy_ptds, cuMemcpy_ptds, "cuMemcpy", 7000, 2)                                      \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2, "cuMemcpyHtoD", 3020, 0)                                 \
    X(cuMemcpyHtoD_ptds, cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD", 7000, 2)                       \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2, "cuMemcpyDtoH", 3020, 0)                                 \
    X(cuMemcpyDtoH_ptds, cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH", 7000, 2)                       \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2, "cuMemcpyDtoD", 3020, 0)                                 \
    X(cuMemcpyDtoD_ptds, cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD", 7000, 2)                       \
    X(cuMemcpyAsync, cuMemcpyAsync, "cuMemcpyAsync", 4000, 0)                                 \
    X(cuMemcpyAsync_ptsz, cuMemcpyAsync_ptsz, "cuMemcpyAsync", 7000, 2)                       \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync", 3020, 0)                  \
    X(cuMemcpyHtoDAsync_ptsz, cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync", 7000, 2)        \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync", 3020, 0)                  \
    X(cuMemcpyDtoHAsync_ptsz, cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync", 7000, 2)        \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync", 3020, 0)                  \
    X(cuMemcpyDtoDAsync_ptsz, cuMemcpyDtoDAsync_v2_ptsz, "cuMemcpyDtoDAsync", 7000, 2)        \
    X(cuMemsetD8, cuMemsetD8_v2, "cuMemsetD8", 3020, 0)                                       \
    X(cuMemsetD8_ptds, cuMemsetD8_v2_ptds, "cuMemsetD8", 7000, 2)                             \
    X(cuMemsetD8Async, cuMemsetD8Async, "cuMemsetD8Async", 3020, 0)                           \
    X(cuMemsetD8Async_ptsz, cuMemsetD8Async_ptsz, "cuMemsetD8Async", 7000, 2)                 \
    X(cuPointerGetAttributes, cuPointerGetAttributes, "cuPointerGetAttributes", 7000, 0)      \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, 0)                     \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, 0)              \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, 0)               \
    X(cuStreamCreate, cuStreamCreate, "cuStreamCreate", 2000, 0)                              \
    X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, 0) \
    X(cuStreamDestroy, cuStreamDestroy_v2, "cuStreamDestroy", 4000, 0)                        \
    X(cuStreamGetFlags, cuStreamGetFlags, "cuStreamGetFlags", 5050, 0)                        \
    X(cuStreamGetFlags_ptsz, cuStreamGetFlags_ptsz, "cuStreamGetFlags", 7000, 2)              \
    X(cuStreamQuery, cuStreamQuery, "cuStreamQuery", 2000, 0)                                 \
    X(cuStreamQuery_ptsz, cuStreamQuery_ptsz, "cuStreamQuery", 7000, 2)                       \
    X(cuStreamSynchronize, cuStreamSynchronize, "cuStreamSynchronize", 2000, 0)               \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000, 2)     \
    X(cuStreamWaitEvent, cuStreamWaitEvent, "cuStreamWaitEvent", 3020, 0)                     \
    X(cuStreamWaitEvent_ptsz, cuStreamWaitEvent_ptsz, "cuStreamWaitEvent", 7000, 2)           \
    X(cuStreamIsCapturing, cuStreamIsCapturing, "cuStreamIsCapturing", 10000, 0)              \
    X(cuStreamIsCapturing_ptsz, cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", 10000, 2)    \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, 0)        \
    X(cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, 2) \
    X(cuStreamEndCapture, cuStreamEndCapture, "cuStreamEndCapture", 10000, 0)                 \
    X(cuStreamEndCapture_ptsz, cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, 2)       \
    X(cuGraphDestroy, cuGraphDestroy, "cuGraphDestroy", 10000, 0)                             \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, 0) \
    X(cuGraphLaunch, cuGraphLaunch, "cuGraphLaunch", 10000, 0)                                \
    X(cuGraphLaunch_ptsz, cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 2)                      \
    X(cuGraphExecDestroy, cuGraphExecDestroy, "cuGraphExecDestroy", 10000, 0)                 \
    X(cuEventCreate, cuEventCreate, "cuEventCreate", 2000, 0)                                 \
    X(cuEventRecord, cuEventRecord, "cuEventRecord", 2000, 0)                                 \
    X(cuEventRecord_ptsz, cuEventRecord_ptsz, "cuEventRecord", 7000, 2)                       \
    X(cuEventQuery, cuEventQuery, "cuEventQuery", 2000, 0)                                    \
    X(cuEventSynchronize, cuEventSynchronize, "cuEventSynchronize", 2000, 0)                  \
    X(cuEventDestroy, cuEventDestroy_v2, "cuEventDestroy", 4000, 0)                           \
    X(cuEventElapsedTime, cuEventElapsedTime_v2, "cuEventElapsedTime", 12080, 0)              \
    X(cuLaunchHostFunc, cuLaunchHostFunc, "cuLaunchHostFunc", 10000, 0)                       \
    X(cuLaunchHostFunc_ptsz, cuLaunchHostFunc_ptsz, "cuLaunchHostFunc", 10000, 2)             \
    X(cuLaunchKernel, cuLaunchKernel, "cuLaunchKernel", 4000, 0)                              \
    X(cuLaunchKernel_ptsz, cuLaunchKernel_ptsz, "cuLaunchKernel", 7000, 2)                    \
    X(cuMemHostRegister, cuMemHostRegister_v2, "cuMemHostRegister", 6050, 0)                 \
    X(cuMemHostUnregister, cuMemHostUnregister, "cuMemHostUnregister", 4000, 0)               \
    X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer", 3020, 0) \
    X(cuMemAllocManaged, cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)                     \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync_v2, "cuMemPrefetchAsync", 12020, 0)              \
    X(cuMemPrefetchAsync_ptsz, cuMemPrefetchAsync_v2_ptsz, "cuMemPrefetchAsync", 12020, 2)    \
    X(cuMemAdvise, cuMemAdvise_v2, "cuMemAdvise", 12020, 0)                                   \
    X(cuStreamAttachMemAsync, cuStreamAttachMemAsync, "cuStreamAttachMemAsync", 6000, 0)      \
    X(cuStreamAttachMemAsync_ptsz, cuStreamAttachMemAsync_ptsz, "cuStreamAttachMemAsync", 7000, 2) \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0) \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, 0)        \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020, 0)        \
    X(cuMemPoolCreate, cuMemPoolCreate, "cuMemPoolCreate", 11020, 0)                          \
    X(cuMemPoolDestroy, cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0)                       \
    X(cuDeviceSetMemPool, cuDeviceSetMemPool, "cuDeviceSetMemPool", 11020, 0)                 \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0)                 \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0)  \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 2) \
    X(cuProfilerStart, cuProfilerStart, "cuProfilerStart", 4000, 0)                           \
    X(cuProfilerStop, cuProfilerStop, "cuProfilerStop", 4000, 0)                              \
    X(cuMemcpyPeer, cuMemcpyPeer, "cuMemcpyPeer", 4000, 0)                                    \
    X(cuMemcpyPeer_ptds, cuMemcpyPeer_ptds, "cuMemcpyPeer", 7000, 2)                          \
    X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 4000, 0)                     \
    X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync_ptsz, "cuMemcpyPeerAsync", 7000, 2)           \
    X(cuStreamAddCallback, cuStreamAddCallback, "cuStreamAddCallback", 5000, 0)               \
    X(cuStreamAddCallback_ptsz, cuStreamAddCallback_ptsz, "cuStreamAddCallback", 7000, 2)     \
    X(cuIpcGetEventHandle, cuIpcGetEventHandle, "cuIpcGetEventHandle", 4010, 0)               \
    X(cuIpcOpenEventHandle, cuIpcOpenEventHandle, "cuIpcOpenEventHandle", 4010, 0)            \
    X(cuMemPoolSetAccess, cuMemPoolSetAccess, "cuMemPoolSetAccess", 11020, 0)                 \
    X(cuMemPoolGetAccess, cuMemPoolGetAccess, "cuMemPoolGetAccess", 11020, 0)                 \
    X(cuMemPoolExportToShareableHandle, cuMemPoolExportToShareableHandle,                     \
      "cuMemPoolExportToShareableHandle", 11020, 0)                                           \
    X(cuMemPoolImportFromShareableHandle, cuMemPoolImportFromShareableHandle,                 \
      "cuMemPoolImportFromShareableHandle", 11020, 0)                                         \
    X(cuMemPoolExportPointer, cuMemPoolExportPointer, "cuMemPoolExportPointer", 11020, 0)     \
    X(cuMemPoolImportPointer, cuMemPoolImportPointer, "cuMemPoolImportPointer", 11020, 0)     \
    X(cuCtxSetLimit, cuCtxSetLimit, "cuCtxSetLimit", 3010, 0)                                 \
    X(cuCtxGetLimit, cuCtxGetLimit, "cuCtxGetLimit", 3010, 0)                                 \
    X(cuCtxResetPersistingL2Cache, cuCtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache", 11000, 0) \
    X(cuStreamSetAttribute, cuStreamSetAttribute, "cuStreamSetAttribute", 11000, 0)           \
    X(cuStreamSetAttribute_ptsz, cuStreamSetAttribute_ptsz, "cuStreamSetAttribute", 11000, 2) \
    X(cuStreamGetAttribute, cuStreamGetAttribute, "cuStreamGetAttribute", 11000, 0)           \
    X(cuStreamGetAttribute_ptsz, cuStreamGetAttribute_ptsz, "cuStreamGetAttribute", 11000, 2) \
    X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, 0)           \
    X(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 11040, 0) \
    X(cuDeviceSetGraphMemAttribute, cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute", 11040, 0) \
    X(cuGetExportTable, cuGetExportTable, "cuGetExportTable", 3000, 0)

static struct driver {
#define X(field, proto, name, ver, fl) __typeof__(proto) *field;
    DRIVER_FUNCS(X)
#undef X
} drv;

static const struct lookup {
    const char *name;
    int version;
    cuuint64_t flags;
    size_t offset;
} lookups[] = {
#define X(field, proto, name, ver, fl) {name, ver, fl, offsetof(struct driver, field)},
    DRIVER_FUNCS(X)
#undef X
};

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static cudaError_t rt_status = cudaErrorInitializationError;
static bool drv_loaded;
static gpa_v2_fn gpa; /* from the 12000 self-lookup */
static int ndev;

static pthread_mutex_t rt_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    bool retained;
    unsigned flags;
} prim[RT_MAX_DEVICES];

static __thread int t_device;
static __thread cudaError_t t_last_error;

/* ---- errors -------------------------------------------------------------------------- */

static cudaError_t from_cu(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_STUB_LIBRARY: return cudaErrorStubLibrary;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
    case CUDA_ERROR_MAP_FAILED: return cudaErrorMapBufferObjectFailed;
    case CUDA_ERROR_UNMAP_FAILED: return cudaErrorUnmapBufferObjectFailed;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: return cudaErrorPeerAccessAlreadyEnabled;
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: return cudaErrorPeerAccessNotEnabled;
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: return cudaErrorPeerAccessUnsupported;
    case CUDA_ERROR_NOT_PERMITTED: return cudaErrorNotPermitted;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_OPERATING_SYSTEM: return cudaErrorOperatingSystem;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_MERGE: return cudaErrorStreamCaptureMerge;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED: return cudaErrorStreamCaptureUnjoined;
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION: return cudaErrorStreamCaptureIsolation;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_TIMEOUT: return cudaErrorTimeout;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_UNSUPPORTED_LIMIT: return cudaErrorUnsupportedLimit;
    case CUDA_ERROR_TOO_MANY_PEERS: return cudaErrorTooManyPeers;
    default: return cudaErrorUnknown;
    }
}

/* Every failing call records its error for this thread; successes leave it alone.
 * cudaErrorNotReady (a query result, "not actually an error") is not recorded. */
static cudaError_t rt_ret(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        t_last_error = e;
    return e;
}

static cudaError_t rt_cu(CUresult r) { return rt_ret(from_cu(r)); }

#define E(code, str) {code, #code, str}
static const struct {
    cudaError_t code;
    const char *name;
    const char *str;
} rt_errors[] = {
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorCudartUnloading, "driver shutting down"),
    E(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidDeviceFunction, "invalid device function"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, "invalid device symbol"),
    E(cudaErrorInvalidHostPointer, "invalid host pointer"),
    E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    E(cudaErrorStubLibrary, "CUDA driver is a stub library"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorStartupFailure, "unspecified driver error"),
    E(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    E(cudaErrorDeviceUninitialized, "invalid device context"),
    E(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed"),
    E(cudaErrorUnmapBufferObjectFailed, "unmapping of buffer object failed"),
    E(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    E(cudaErrorSymbolNotFound, "named symbol not found"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    E(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
    E(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
    E(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
    E(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process"),
    E(cudaErrorContextIsDestroyed, "context is destroyed"),
    E(cudaErrorLaunchFailure, "unspecified launch failure"),
    E(cudaErrorNotPermitted, "operation not permitted"),
    E(cudaErrorNotSupported, "operation not supported"),
    E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    E(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
    E(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences"),
    E(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
    E(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
    E(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream"),
    E(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream"),
    E(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread"),
    E(cudaErrorTimeout, "wait operation timed out"),
    E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    E(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
    E(cudaErrorTooManyPeers, "peer mapping resources exhausted"),
    E(cudaErrorUnknown, "unknown error"),
};
#undef E

RT_API const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof rt_errors / sizeof rt_errors[0]; i++)
        if (rt_errors[i].code == error)
            return rt_errors[i].name;
    return "unrecognized error code";
}

RT_API const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof rt_errors / sizeof rt_errors[0]; i++)
        if (rt_errors[i].code == error)
            return rt_errors[i].str;
    return "unrecognized error code";
}

RT_API cudaError_t CUDARTAPI cudaGetLastError(void)
{
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    return e;
}

RT_API cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return t_last_error; }

/* ---- initialisation ------------------------------------------------------------------ */

static void rt_init_once(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        rt_status = cudaErrorInsufficientDriver;
        return;
    }
    /* the only dlsym: everything else goes through cuGetProcAddress */
    gpa_v2_fn first = (gpa_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!first) {
        rt_status = cudaErrorInsufficientDriver;
        return;
    }
    CUdriverProcAddressQueryResult st;
    void *p = NULL;
    first("", &p, 0, 0, NULL); /* probe */
    first("cuInit", &p, 2000, 0, &st);
    void *g11 = NULL, *g12 = NULL;
    first("cuGetProcAddress", &g11, 11030, 0, &st);
    if (first("cuGetProcAddress", &g12, 12000, 0, &st) != CUDA_SUCCESS || !g12) {
        rt_status = cudaErrorInsufficientDriver;
        return;
    }
    gpa = (gpa_v2_fn)g12;
    for (size_t i = 0; i < sizeof lookups / sizeof lookups[0]; i++) {
        void *f = NULL;
        if (gpa(lookups[i].name, &f, lookups[i].version, lookups[i].flags, &st) != CUDA_SUCCESS ||
            !f) {
            rt_status = cudaErrorInsufficientDriver;
            return;
        }
        memcpy((char *)&drv + lookups[i].offset, &f, sizeof f);
    }
    drv_loaded = true;
    /* the real runtime fetches private export tables here; their absence is fine */
    const void *table = NULL;
    CUuuid id;
    memset(&id, 0, sizeof id);
    (void)drv.cuGetExportTable(&table, &id);
    CUresult r = drv.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = drv.cuDeviceGetCount(&ndev);
    if (r == CUDA_SUCCESS && ndev > RT_MAX_DEVICES)
        ndev = RT_MAX_DEVICES;
    rt_status = from_cu(r);
}

static cudaError_t rt_ready(void)
{
    pthread_once(&rt_once, rt_init_once);
    return rt_status;
}

static cudaError_t primary_of(int dev, CUcontext *out)
{
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&rt_mu);
    if (prim[dev].retained) {
        /* reset or released through the driver API behind our back: start it again, as
         * the real runtime does */
        unsigned flags;
        int active = 1;
        if (drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
            prim[dev].retained = false;
    }
    if (!prim[dev].retained) {
        CUcontext c;
        CUresult r = drv.cuDevicePrimaryCtxRetain(&c, dev);
        if (r == CUDA_SUCCESS) {
            prim[dev].ctx = c;
            prim[dev].retained = true;
        } else {
            e = from_cu(r);
        }
    }
    *out = prim[dev].ctx;
    pthread_mutex_unlock(&rt_mu);
    return e;
}

/* Make sure a context is current: the program's own (driver API) context if it set one,
 * otherwise the primary context of this thread's device, retained again after a reset. */
static cudaError_t rt_ctx(void)
{
    cudaError_t e = rt_ready();
    if (e != cudaSuccess)
        return e;
    CUcontext cur = NULL, c;
    drv.cuCtxGetCurrent(&cur);
    if (cur) {
        int owner = -1;
        pthread_mutex_lock(&rt_mu);
        for (int d = 0; d < ndev; d++)
            if (prim[d].ctx == cur)
                owner = d;
        pthread_mutex_unlock(&rt_mu);
        if (owner < 0)
            return cudaSuccess;
        t_device = owner;
        return primary_of(owner, &c);
    }
    e = primary_of(t_device, &c);
    if (e == cudaSuccess)
        e = from_cu(drv.cuCtxSetCurrent(c));
    return e;
}

static int current_device(void)
{
    CUcontext cur = NULL;
    CUdevice d;
    if (drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && drv.cuCtxGetDevice(&d) == CUDA_SUCCESS)
        return d;
    return t_device;
}

#define RT_ENTER()                                                                            \
    do {                                                                                      \
        cudaError_t e_ = rt_ctx();                                                            \
        if (e_ != cudaSuccess)                                                                \
            return rt_ret(e_);                                                                \
    } while (0)

#define RT_READY()                                                                            \
    do {                                                                                      \
        cudaError_t e_ = rt_ready();                                                          \
        if (e_ != cudaSuccess)                                                                \
            return rt_ret(e_);                                                                \
    } while (0)

#define DP(p) ((CUdeviceptr)(uintptr_t)(p))

/* ---- versions, devices --------------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return rt_ret(cudaErrorInvalidValue);
    rt_ready();
    if (!drv_loaded) { /* no driver: version 0, as documented */
        *driverVersion = 0;
        return cudaSuccess;
    }
    return rt_cu(drv.cuDriverGetVersion(driverVersion));
}

RT_API cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return rt_ret(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
    if (!count)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_ready();
    if (e != cudaSuccess) {
        *count = 0;
        return rt_ret(e);
    }
    *count = ndev;
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    if (!device)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    *device = current_device();
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    t_device = device;
    CUcontext c;
    cudaError_t e = primary_of(device, &c); /* CUDA 12+: the primary context starts here */
    if (e == cudaSuccess)
        e = from_cu(drv.cuCtxSetCurrent(c));
    return rt_ret(e);
}

RT_API cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags)
{
    RT_READY();
    int d = current_device();
    pthread_mutex_lock(&rt_mu);
    prim[d].flags = flags;
    pthread_mutex_unlock(&rt_mu);
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *flags)
{
    if (!flags)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    int d = current_device();
    pthread_mutex_lock(&rt_mu);
    *flags = prim[d].flags;
    pthread_mutex_unlock(&rt_mu);
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    /* the runtime's cudaDevAttr* values are the driver's CU_DEVICE_ATTRIBUTE_* values */
    return rt_cu(drv.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, device));
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    RT_ENTER();
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return cudaSuccess;
}

#define PI(field, attr) {offsetof(struct cudaDeviceProp, field), sizeof(((struct cudaDeviceProp *)0)->field), attr}
static const struct {
    size_t offset;
    size_t size;
    CUdevice_attribute attr;
} prop_attrs[] = {
    PI(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    PI(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
    PI(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    PI(memPitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH),
    PI(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    PI(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
    PI(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
    PI(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
    PI(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
    PI(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
    PI(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
    PI(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
    PI(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    PI(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    PI(textureAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
    PI(texturePitchAlignment, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT),
    PI(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    PI(integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED),
    PI(canMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
    PI(maxTexture1D, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH),
    PI(maxTexture2D[0], CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH),
    PI(maxTexture2D[1], CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT),
    PI(maxTexture3D[0], CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH),
    PI(maxTexture3D[1], CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT),
    PI(maxTexture3D[2], CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH),
    PI(surfaceAlignment, CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT),
    PI(concurrentKernels, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
    PI(ECCEnabled, CU_DEVICE_ATTRIBUTE_ECC_ENABLED),
    PI(pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
    PI(pciDeviceID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    PI(pciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
    PI(tccDriver, CU_DEVICE_ATTRIBUTE_TCC_DRIVER),
    PI(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
    PI(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
    PI(memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    PI(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    PI(persistingL2CacheMaxSize, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE),
    PI(maxThreadsPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
    PI(streamPrioritiesSupported, CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED),
    PI(globalL1CacheSupported, CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED),
    PI(localL1CacheSupported, CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED),
    PI(sharedMemPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    PI(regsPerMultiprocessor, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
    PI(managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY),
    PI(isMultiGpuBoard, CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD),
    PI(multiGpuBoardGroupID, CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID),
    PI(hostNativeAtomicSupported, CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED),
    PI(pageableMemoryAccess, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS),
    PI(concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS),
    PI(computePreemptionSupported, CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED),
    PI(canUseHostPointerForRegisteredMem, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM),
    PI(cooperativeLaunch, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH),
    PI(sharedMemPerBlockOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    PI(pageableMemoryAccessUsesHostPageTables, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES),
    PI(directManagedMemAccessFromHost, CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST),
    PI(maxBlocksPerMultiProcessor, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
    PI(accessPolicyMaxWindowSize, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE),
    PI(reservedSharedMemPerBlock, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK),
    PI(hostRegisterSupported, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED),
    PI(sparseCudaArraySupported, CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED),
    PI(hostRegisterReadOnlySupported, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED),
    PI(timelineSemaphoreInteropSupported, CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED),
    PI(memoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
    PI(gpuDirectRDMASupported, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED),
    PI(gpuDirectRDMAFlushWritesOptions, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS),
    PI(gpuDirectRDMAWritesOrdering, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING),
    PI(memoryPoolSupportedHandleTypes, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES),
    PI(deferredMappingCudaArraySupported, CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED),
    PI(ipcEventSupported, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED),
    PI(clusterLaunch, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH),
    PI(unifiedFunctionPointers, CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS),
    PI(deviceNumaConfig, CU_DEVICE_ATTRIBUTE_NUMA_CONFIG),
    PI(deviceNumaId, CU_DEVICE_ATTRIBUTE_NUMA_ID),
    PI(mpsEnabled, CU_DEVICE_ATTRIBUTE_MPS_ENABLED),
    PI(hostNumaId, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID),
    PI(gpuPciDeviceID, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID),
    PI(gpuPciSubsystemID, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID),
    PI(hostNumaMultinodeIpcSupported, CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED),
};
#undef PI

RT_API cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    CUresult r = drv.cuDeviceGetName(prop->name, (int)sizeof prop->name, device);
    if (r == CUDA_SUCCESS)
        r = drv.cuDeviceGetUuid((CUuuid *)&prop->uuid, device);
    if (r == CUDA_SUCCESS)
        r = drv.cuDeviceTotalMem(&prop->totalGlobalMem, device);
    for (size_t i = 0; r == CUDA_SUCCESS && i < sizeof prop_attrs / sizeof prop_attrs[0]; i++) {
        int v = 0;
        r = drv.cuDeviceGetAttribute(&v, prop_attrs[i].attr, device);
        char *dst = (char *)prop + prop_attrs[i].offset;
        if (prop_attrs[i].size == sizeof(size_t)) {
            size_t sv = (size_t)(unsigned)v;
            memcpy(dst, &sv, sizeof sv);
        } else {
            memcpy(dst, &v, sizeof v);
        }
    }
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
    RT_ENTER();
    return rt_cu(drv.cuCtxSynchronize());
}

RT_API cudaError_t CUDARTAPI cudaDeviceReset(void)
{
    RT_READY();
    int d = current_device();
    pthread_mutex_lock(&rt_mu);
    /* every allocation, stream and event of the primary context goes away */
    CUresult r = drv.cuDevicePrimaryCtxReset(d);
    prim[d].retained = false; /* the driver dropped its peer grants with it */
    pthread_mutex_unlock(&rt_mu);
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    if (!canAccessPeer)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    if (device < 0 || device >= ndev || peerDevice < 0 || peerDevice >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    *canAccessPeer = device != peerDevice;
    return cudaSuccess;
}

/* Peer access is the driver's: the current context gets (or loses) access to the peer
 * device's primary context, retained as for the runtime's own device. The driver's answers
 * map to the runtime's codes (..._PEER_ACCESS_ALREADY_ENABLED -> cudaErrorPeerAccess-
 * AlreadyEnabled, ..._NOT_ENABLED -> cudaErrorPeerAccessNotEnabled, ...). */
RT_API cudaError_t CUDARTAPI cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    RT_ENTER();
    if (flags)
        return rt_ret(cudaErrorInvalidValue);
    if (peerDevice < 0 || peerDevice >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    if (peerDevice == current_device()) /* what an H100 answers */
        return rt_ret(cudaErrorPeerAccessUnsupported);
    CUcontext peer;
    cudaError_t e = primary_of(peerDevice, &peer);
    if (e != cudaSuccess)
        return rt_ret(e);
    return rt_cu(drv.cuCtxEnablePeerAccess(peer, flags));
}

RT_API cudaError_t CUDARTAPI cudaDeviceDisablePeerAccess(int peerDevice)
{
    RT_ENTER();
    if (peerDevice < 0 || peerDevice >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    CUcontext peer;
    cudaError_t e = primary_of(peerDevice, &peer);
    if (e != cudaSuccess)
        return rt_ret(e);
    return rt_cu(drv.cuCtxDisablePeerAccess(peer));
}

/* ---- memory -------------------------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (size == 0) { /* the runtime succeeds with NULL (the driver refuses 0 bytes) */
        *devPtr = NULL;
        return cudaSuccess;
    }
    /* The real runtime hands the caller's pointer to the driver and stores nothing itself: the
     * NULL a failed cudaMalloc leaves comes from cuMemAlloc (seen on an H100, CUDA 13: with a
     * driver hook that left it alone, the static and the shared runtime both left it alone). */
    _Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "device pointers are host-sized");
    CUresult r = drv.cuMemAlloc((CUdeviceptr *)(void *)devPtr, size);
    return rt_cu(r);
}

/* Rows of width bytes, each at a pitch the driver chooses (cuMemAllocPitch, 16-byte elements);
 * an empty extent succeeds with NULL, as cudaMalloc's size 0 does. */
static cudaError_t malloc_pitched(void **devPtr, size_t *pitch, size_t width, size_t rows)
{
    if (!devPtr || !pitch)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (width == 0 || rows == 0) {
        *devPtr = NULL;
        *pitch = width;
        return cudaSuccess;
    }
    return rt_cu(drv.cuMemAllocPitch((CUdeviceptr *)(void *)devPtr, pitch, width, rows, 16));
}

RT_API cudaError_t CUDARTAPI cudaMallocPitch(void **devPtr, size_t *pitch, size_t width,
                                             size_t height)
{
    return malloc_pitched(devPtr, pitch, width, height);
}

RT_API cudaError_t CUDARTAPI cudaMalloc3D(struct cudaPitchedPtr *p, struct cudaExtent extent)
{
    if (!p)
        return rt_ret(cudaErrorInvalidValue);
    if (extent.height && extent.depth > SIZE_MAX / extent.height)
        return rt_ret(cudaErrorInvalidValue);
    void *ptr = NULL;
    size_t pitch = 0;
    cudaError_t e = malloc_pitched(&ptr, &pitch, extent.width, extent.height * extent.depth);
    if (e == cudaSuccess) {
        p->ptr = ptr;
        p->pitch = pitch;
        p->xsize = extent.width;
        p->ysize = extent.height;
    }
    return e;
}

RT_API cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
    RT_ENTER(); /* cudaFree(NULL) is the idiomatic way to initialise the context */
    if (!devPtr)
        return cudaSuccess;
    return rt_cu(drv.cuMemFree(DP(devPtr)));
}

RT_API cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    RT_ENTER();
    return rt_cu(drv.cuMemGetInfo(free_b, total_b));
}

RT_API cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    return rt_cu(drv.cuMemAllocHost(ptr, size));
}

RT_API cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (size == 0) {
        *pHost = NULL;
        return cudaSuccess;
    }
    return rt_cu(drv.cuMemHostAlloc(pHost, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
    RT_ENTER();
    if (!ptr)
        return cudaSuccess;
    return rt_cu(drv.cuMemFreeHost(ptr));
}

static cudaError_t malloc_async(void **p, size_t size, cudaStream_t s, bool ptsz)
{
    if (!p)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d;
    CUresult r = (ptsz ? drv.cuMemAllocAsync_ptsz : drv.cuMemAllocAsync)(&d, size, (CUstream)s);
    if (r == CUDA_SUCCESS)
        *p = (void *)(uintptr_t)d;
    return rt_cu(r);
}

static cudaError_t free_async(void *p, cudaStream_t s, bool ptsz)
{
    RT_ENTER();
    if (!p)
        return cudaSuccess;
    return rt_cu((ptsz ? drv.cuMemFreeAsync_ptsz : drv.cuMemFreeAsync)(DP(p), (CUstream)s));
}

RT_API cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, false);
}
RT_API cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, true);
}
RT_API cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, false);
}
RT_API cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, true);
}

static cudaError_t memcpy_sync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                               bool ptds)
{
    RT_ENTER();
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        r = (ptds ? drv.cuMemcpy_ptds : drv.cuMemcpy)(DP(dst), DP(src), n);
        break;
    case cudaMemcpyHostToDevice:
        r = (ptds ? drv.cuMemcpyHtoD_ptds : drv.cuMemcpyHtoD)(DP(dst), src, n);
        break;
    case cudaMemcpyDeviceToHost:
        r = (ptds ? drv.cuMemcpyDtoH_ptds : drv.cuMemcpyDtoH)(dst, DP(src), n);
        break;
    case cudaMemcpyDeviceToDevice:
        r = (ptds ? drv.cuMemcpyDtoD_ptds : drv.cuMemcpyDtoD)(DP(dst), DP(src), n);
        break;
    default:
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    }
    return rt_cu(r);
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t s, bool ptsz)
{
    RT_ENTER();
    CUstream cs = (CUstream)s;
    CUresult r;
    switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        r = (ptsz ? drv.cuMemcpyAsync_ptsz : drv.cuMemcpyAsync)(DP(dst), DP(src), n, cs);
        break;
    case cudaMemcpyHostToDevice:
        r = (ptsz ? drv.cuMemcpyHtoDAsync_ptsz : drv.cuMemcpyHtoDAsync)(DP(dst), src, n, cs);
        break;
    case cudaMemcpyDeviceToHost:
        r = (ptsz ? drv.cuMemcpyDtoHAsync_ptsz : drv.cuMemcpyDtoHAsync)(dst, DP(src), n, cs);
        break;
    case cudaMemcpyDeviceToDevice:
        r = (ptsz ? drv.cuMemcpyDtoDAsync_ptsz : drv.cuMemcpyDtoDAsync)(DP(dst), DP(src), n, cs);
        break;
    default:
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    }
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return memcpy_sync(dst, src, count, kind, false);
}
RT_API cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind)
{
    return memcpy_sync(dst, src, count, kind, true);
}
RT_API cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, false);
}
RT_API cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                                  enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, true);
}

RT_API cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
    RT_ENTER();
    return rt_cu(drv.cuMemsetD8(DP(devPtr), (unsigned char)value, count));
}
RT_API cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    RT_ENTER();
    return rt_cu(drv.cuMemsetD8_ptds(DP(devPtr), (unsigned char)value, count));
}
RT_API cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuMemsetD8Async(DP(devPtr), (unsigned char)value, count, (CUstream)stream));
}
RT_API cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                                  cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuMemsetD8Async_ptsz(DP(devPtr), (unsigned char)value, count, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                      const void *ptr)
{
    if (!attributes)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    unsigned int type = 0;
    int ordinal = -2;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    bool managed = false;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&type, &ordinal, &dptr, &hptr, &managed};
    CUresult r = drv.cuPointerGetAttributes(5, attrs, data, DP(ptr));
    if (r != CUDA_SUCCESS)
        return rt_cu(r);
    memset(attributes, 0, sizeof *attributes);
    switch (type) {
    case CU_MEMORYTYPE_DEVICE:
        attributes->type = cudaMemoryTypeDevice;
        break;
    case CU_MEMORYTYPE_HOST:
        attributes->type = cudaMemoryTypeHost;
        break;
    default: /* memory CUDA does not know: not an error since CUDA 11 */
        attributes->type = cudaMemoryTypeUnregistered;
        hptr = (void *)(uintptr_t)ptr;
        break;
    }
    if (managed) { /* reachable from host and device at the same address */
        attributes->type = cudaMemoryTypeManaged;
        hptr = (void *)(uintptr_t)ptr;
    }
    attributes->device = ordinal;
    attributes->devicePointer = (void *)(uintptr_t)dptr;
    attributes->hostPointer = hptr;
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcMemHandle h;
    CUresult r = drv.cuIpcGetMemHandle(&h, DP(devPtr));
    if (r == CUDA_SUCCESS)
        memcpy(handle, &h, sizeof h < sizeof *handle ? sizeof h : sizeof *handle);
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                                  unsigned int flags)
{
    if (!devPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    memcpy(&h, &handle, sizeof h < sizeof handle ? sizeof h : sizeof handle);
    CUdeviceptr p;
    CUresult r = drv.cuIpcOpenMemHandle(&p, h, flags);
    if (r == CUDA_SUCCESS)
        *devPtr = (void *)(uintptr_t)p;
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void *devPtr)
{
    RT_ENTER();
    return rt_cu(drv.cuIpcCloseMemHandle(DP(devPtr)));
}

/* Interprocess events: the driver's (a cudaIpcEventHandle_t has CUipcEventHandle's layout). */
RT_API cudaError_t CUDARTAPI cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    if (!handle)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcEventHandle h;
    CUresult r = drv.cuIpcGetEventHandle(&h, (CUevent)event);
    if (r == CUDA_SUCCESS)
        memcpy(handle, &h, sizeof h < sizeof *handle ? sizeof h : sizeof *handle);
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    if (!event)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    CUipcEventHandle h;
    memset(&h, 0, sizeof h);
    memcpy(&h, &handle, sizeof h < sizeof handle ? sizeof h : sizeof handle);
    return rt_cu(drv.cuIpcOpenEventHandle((CUevent *)event, h));
}

/* ---- streams ------------------------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
    if (!pStream)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuStreamCreate((CUstream *)pStream, 0));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (!pStream)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuStreamCreate((CUstream *)pStream, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                          int priority)
{
    if (!pStream)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuStreamCreateWithPriority((CUstream *)pStream, flags, priority));
}

RT_API cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamDestroy((CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamGetFlags((CUstream)hStream, flags));
}
RT_API cudaError_t CUDARTAPI cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamGetFlags_ptsz((CUstream)hStream, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamSynchronize((CUstream)stream));
}
RT_API cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamSynchronize_ptsz((CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamQuery((CUstream)stream));
}
RT_API cudaError_t CUDARTAPI cudaStreamQuery_ptsz(cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamQuery_ptsz((CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamWaitEvent((CUstream)stream, (CUevent)event, flags));
}
RT_API cudaError_t CUDARTAPI cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                      unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamWaitEvent_ptsz((CUstream)stream, (CUevent)event, flags));
}

RT_API cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *pCaptureStatus)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamIsCapturing((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus));
}
RT_API cudaError_t CUDARTAPI cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                        enum cudaStreamCaptureStatus *pCaptureStatus)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamIsCapturing_ptsz((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus));
}

RT_API cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamBeginCapture((CUstream)stream, (CUstreamCaptureMode)mode));
}
RT_API cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                         enum cudaStreamCaptureMode mode)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamBeginCapture_ptsz((CUstream)stream, (CUstreamCaptureMode)mode));
}

RT_API cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamEndCapture((CUstream)stream, (CUgraph *)pGraph));
}
RT_API cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamEndCapture_ptsz((CUstream)stream, (CUgraph *)pGraph));
}

RT_API cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphDestroy((CUgraph)graph));
}

RT_API cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                  unsigned long long flags)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph,
                                                 flags));
}

RT_API cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                           cudaGraph_t graph,
                                                           unsigned long long flags)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph,
                                                 flags));
}

RT_API cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphLaunch((CUgraphExec)graphExec, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphLaunch_ptsz((CUgraphExec)graphExec, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    RT_ENTER();
    return rt_cu(drv.cuGraphExecDestroy((CUgraphExec)graphExec));
}

RT_API cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    RT_ENTER();
    return rt_cu(drv.cuLaunchHostFunc((CUstream)stream, (CUhostFn)fn, userData));
}
RT_API cudaError_t CUDARTAPI cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    RT_ENTER();
    return rt_cu(drv.cuLaunchHostFunc_ptsz((CUstream)stream, (CUhostFn)fn, userData));
}

/* ---- events -------------------------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
    if (!event)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuEventCreate((CUevent *)event, 0));
}

RT_API cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuEventCreate((CUevent *)event, flags));
}

RT_API cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuEventRecord((CUevent)event, (CUstream)stream));
}
RT_API cudaError_t CUDARTAPI cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuEventRecord_ptsz((CUevent)event, (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
    RT_ENTER();
    return rt_cu(drv.cuEventQuery((CUevent)event));
}

RT_API cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
    RT_ENTER();
    return rt_cu(drv.cuEventSynchronize((CUevent)event));
}

RT_API cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
    RT_ENTER();
    return rt_cu(drv.cuEventDestroy((CUevent)event));
}

RT_API cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    RT_ENTER();
    return rt_cu(drv.cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
}

/* ---- driver entry points ------------------------------------------------------------- */

static cudaError_t entry_point(const char *symbol, void **funcPtr, int version,
                               unsigned long long flags, enum cudaDriverEntryPointQueryResult *st,
                               bool ptsz)
{
    if (!symbol || !funcPtr)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    cuuint64_t f = flags;
    if (ptsz && !(f & (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        f |= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    CUdriverProcAddressQueryResult qs = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    /* served by the same cuGetProcAddress pointer as everything else */
    CUresult r = gpa(symbol, funcPtr, version, f, &qs);
    if (st && r == CUDA_SUCCESS)
        *st = (enum cudaDriverEntryPointQueryResult)qs;
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false);
}
RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                                          unsigned long long flags,
                                                          enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true);
}
RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                              unsigned int cudaVersion,
                                                              unsigned long long flags,
                                                              enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, false);
}
RT_API cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                                   unsigned int cudaVersion,
                                                                   unsigned long long flags,
                                                                   enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, true);
}

/* ---- modules and kernels ----------------------------------------------------------------
 *
 * nvcc's host code registers every fat binary, kernel and device variable from a constructor
 * (__cudaRegisterFatBinary, __cudaRegisterFunction, __cudaRegisterVar, ...) and launches with
 * __cudaPushCallConfiguration / __cudaPopCallConfiguration around __cudaLaunchKernel (CUDA 13)
 * or cudaLaunchKernel. The simulator keeps the registrations so that an unknown host function
 * is refused as on a GPU, and hands every launch to the driver's cuLaunchKernel, which queues
 * it in stream order and computes nothing (one stderr line per process says so). */

/* nvcc's headers declare these for C++ only (crt/host_runtime.h, crt/device_functions.h). */
void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
char CUDARTAPI __cudaInitModule(void **fatCubinHandle);
void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global);
void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                        char *deviceAddress, const char *deviceName, int ext,
                                        size_t size, int constant, int global);
unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream);
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream);
cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);

/* One registered kernel. The record's address is the CUfunction / cudaKernel_t handed out.
 * Invariant: on rt_kernels (under rt_kernels_mu) from registration to its module's unregister. */
struct rt_kernel {
    struct rt_kernel *next;
    void **module;        /* the handle __cudaRegisterFatBinary returned */
    const void *host_fun; /* the host stub's address: the key of cudaLaunchKernel */
    const char *name;     /* nvcc's static string */
    /* cudaFuncSetAttribute / cudaFuncSetCacheConfig: stored, reported, not scheduled */
    int max_dyn_smem;     /* cudaFuncAttributeMaxDynamicSharedMemorySize, 49152 at first */
    int carveout;         /* cudaFuncAttributePreferredSharedMemoryCarveout, -1 at first */
    int cache_config;     /* enum cudaFuncCache */
};

static pthread_mutex_t rt_kernels_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rt_kernel *rt_kernels;

/* A module handle only needs to be unique and live: one word per fat binary. */
RT_API void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
    void **module = calloc(1, sizeof *module);
    if (module)
        *module = fatCubin;
    return module;
}

RT_API void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

RT_API char CUDARTAPI __cudaInitModule(void **fatCubinHandle)
{
    return fatCubinHandle != NULL;
}

RT_API void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    if (!fatCubinHandle)
        return;
    pthread_mutex_lock(&rt_kernels_mu);
    for (struct rt_kernel **pp = &rt_kernels; *pp;) {
        struct rt_kernel *k = *pp;
        if (k->module == fatCubinHandle) {
            *pp = k->next;
            free(k);
        } else {
            pp = &k->next;
        }
    }
    pthread_mutex_unlock(&rt_kernels_mu);
    free(fatCubinHandle);
}

RT_API void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                             char *deviceFun, const char *deviceName,
                                             int thread_limit, uint3 *tid, uint3 *bid,
                                             dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    struct rt_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return; /* the launch then fails with cudaErrorInvalidDeviceFunction */
    k->module = fatCubinHandle;
    k->host_fun = hostFun;
    k->name = deviceName;
    k->max_dyn_smem = 49152;
    k->carveout = -1;
    pthread_mutex_lock(&rt_kernels_mu);
    k->next = rt_kernels;
    rt_kernels = k;
    pthread_mutex_unlock(&rt_kernels_mu);
}

/* Device variables have no device copy here (cudaMemcpyToSymbol is not simulated). */
RT_API void CUDARTAPI __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                        const char *deviceName, int ext, size_t size,
                                        int constant, int global)
{
    (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext;
    (void)size, (void)constant, (void)global;
}

RT_API void CUDARTAPI __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                               char *deviceAddress, const char *deviceName,
                                               int ext, size_t size, int constant, int global)
{
    (void)fatCubinHandle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName;
    (void)ext, (void)size, (void)constant, (void)global;
}

static struct rt_kernel *kernel_find(const void *host_fun, const void *handle)
{
    pthread_mutex_lock(&rt_kernels_mu);
    struct rt_kernel *k = rt_kernels;
    while (k && k->host_fun != host_fun && (const void *)k != handle)
        k = k->next;
    pthread_mutex_unlock(&rt_kernels_mu);
    return k;
}

/* <<<grid, block, shmem, stream>>>: pushed by the caller, popped by the host stub. Nested
 * pushes happen when a launch argument itself launches; 16 levels is plenty. */
#define RT_CALL_CONFIG_DEPTH 16
struct rt_call_config {
    dim3 grid, block;
    size_t shmem;
    void *stream;
};
static __thread struct rt_call_config t_call_config[RT_CALL_CONFIG_DEPTH];
static __thread unsigned t_call_config_depth;

RT_API unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
                                                      size_t sharedMem, struct CUstream_st *stream)
{
    if (t_call_config_depth >= RT_CALL_CONFIG_DEPTH)
        return 1;
    t_call_config[t_call_config_depth++] =
        (struct rt_call_config){gridDim, blockDim, sharedMem, stream};
    return 0;
}

RT_API cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
                                                        size_t *sharedMem, void *stream)
{
    if (t_call_config_depth == 0)
        return rt_ret(cudaErrorMissingConfiguration);
    struct rt_call_config c = t_call_config[--t_call_config_depth];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shmem;
    *(void **)stream = c.stream;
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (!kernel)
        return rt_ret(cudaErrorInvalidValue);
    struct rt_kernel *k = kernel_find(hostFun, NULL);
    *kernel = (cudaKernel_t)k;
    return k ? cudaSuccess : rt_ret(cudaErrorInvalidDeviceFunction);
}

static cudaError_t kernel_launch(struct rt_kernel *k, dim3 grid, dim3 block, size_t shmem,
                                 cudaStream_t stream, bool ptsz)
{
    RT_ENTER();
    if (!k)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
        (uint64_t)block.x * block.y * block.z > 1024 || shmem > UINT_MAX)
        return rt_ret(cudaErrorInvalidConfiguration);
    __typeof__(cuLaunchKernel) *launch = ptsz ? drv.cuLaunchKernel_ptsz : drv.cuLaunchKernel;
    return rt_cu(launch((CUfunction)k, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                        (unsigned)shmem, (CUstream)stream, NULL, NULL));
}

RT_API cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem,
                                                cudaStream_t stream)
{
    (void)args;
    return kernel_launch(kernel_find(NULL, kernel), gridDim, blockDim, sharedMem, stream, false);
}
RT_API cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                                     dim3 blockDim, void **args, size_t sharedMem,
                                                     cudaStream_t stream)
{
    (void)args;
    return kernel_launch(kernel_find(NULL, kernel), gridDim, blockDim, sharedMem, stream, true);
}
RT_API cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream)
{
    (void)args;
    return kernel_launch(kernel_find(func, NULL), gridDim, blockDim, sharedMem, stream, false);
}
RT_API cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                   void **args, size_t sharedMem,
                                                   cudaStream_t stream)
{
    (void)args;
    return kernel_launch(kernel_find(func, NULL), gridDim, blockDim, sharedMem, stream, true);
}

/* ---- registered and mapped host memory, managed memory --------------------------------- */

RT_API cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    RT_ENTER(); /* cudaHostRegister* flags have the driver's CU_MEMHOSTREGISTER_* values */
    return rt_cu(drv.cuMemHostRegister(ptr, size, flags));
}

RT_API cudaError_t CUDARTAPI cudaHostUnregister(void *ptr)
{
    RT_ENTER();
    return rt_cu(drv.cuMemHostUnregister(ptr));
}

RT_API cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    if (!pDevice)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuMemHostGetDevicePointer((CUdeviceptr *)(void *)pDevice, pHost, flags));
}

RT_API cudaError_t CUDARTAPI cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (!devPtr || size == 0) /* unlike cudaMalloc, 0 bytes is an error here */
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuMemAllocManaged((CUdeviceptr *)(void *)devPtr, size, flags));
}

/* Managed-memory hints: cudaMemLocation is laid out as CUmemLocation. */
static CUmemLocation cu_location(struct cudaMemLocation l)
{
    CUmemLocation c;
    c.type = (CUmemLocationType)l.type;
    c.id = l.id;
    return c;
}

cudaError_t CUDARTAPI cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                struct cudaMemLocation location,
                                                unsigned int flags, cudaStream_t stream);
cudaError_t CUDARTAPI cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                    size_t length, unsigned int flags);

RT_API cudaError_t CUDARTAPI cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                                  struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPrefetchAsync(DP(devPtr), count, cu_location(location), flags,
                                        (CUstream)stream));
}
RT_API cudaError_t CUDARTAPI cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                       struct cudaMemLocation location,
                                                       unsigned int flags, cudaStream_t stream)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPrefetchAsync_ptsz(DP(devPtr), count, cu_location(location), flags,
                                             (CUstream)stream));
}

RT_API cudaError_t CUDARTAPI cudaMemAdvise(const void *devPtr, size_t count,
                                           enum cudaMemoryAdvise advice,
                                           struct cudaMemLocation location)
{
    RT_ENTER();
    return rt_cu(drv.cuMemAdvise(DP(devPtr), count, (CUmem_advise)advice, cu_location(location)));
}

RT_API cudaError_t CUDARTAPI cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr,
                                                      size_t length, unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamAttachMemAsync((CUstream)stream, DP(devPtr), length, flags));
}
RT_API cudaError_t CUDARTAPI cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                           size_t length, unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuStreamAttachMemAsync_ptsz((CUstream)stream, DP(devPtr), length, flags));
}

/* ---- the default memory pool ----------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    if (!memPool)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceGetDefaultMemPool((CUmemoryPool *)memPool, device));
}

/* cudaMemPoolAttr has the driver's CUmemPool_attribute values */
RT_API cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                     void *value)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolSetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                     void *value)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolGetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
}

/* cudaMemPoolProps has CUmemPoolProps' layout */
RT_API cudaError_t CUDARTAPI cudaMemPoolCreate(cudaMemPool_t *memPool,
                                               const struct cudaMemPoolProps *poolProps)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolCreate((CUmemoryPool *)memPool, (const CUmemPoolProps *)poolProps));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolDestroy((CUmemoryPool)memPool));
}

RT_API cudaError_t CUDARTAPI cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceSetMemPool(device, (CUmemoryPool)memPool));
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    if (!memPool)
        return rt_ret(cudaErrorInvalidValue);
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceGetMemPool((CUmemoryPool *)memPool, device));
}

/* Pool access and sharing: the driver's (cudaMemAccessDesc, cudaMemLocation and
 * cudaMemPoolPtrExportData have the driver's layouts). */
RT_API cudaError_t CUDARTAPI cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                                  const struct cudaMemAccessDesc *descList,
                                                  size_t count)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolSetAccess((CUmemoryPool)memPool, (const CUmemAccessDesc *)descList,
                                        count));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags,
                                                  cudaMemPool_t memPool,
                                                  struct cudaMemLocation *location)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolGetAccess((CUmemAccess_flags *)flags, (CUmemoryPool)memPool,
                                        (CUmemLocation *)location));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolExportToShareableHandle(
    void *shareableHandle, cudaMemPool_t memPool, enum cudaMemAllocationHandleType handleType,
    unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolExportToShareableHandle(
        shareableHandle, (CUmemoryPool)memPool, (CUmemAllocationHandleType)handleType, flags));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolImportFromShareableHandle(
    cudaMemPool_t *memPool, void *shareableHandle, enum cudaMemAllocationHandleType handleType,
    unsigned int flags)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolImportFromShareableHandle(
        (CUmemoryPool *)memPool, shareableHandle, (CUmemAllocationHandleType)handleType, flags));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData,
                                                      void *ptr)
{
    RT_ENTER();
    return rt_cu(drv.cuMemPoolExportPointer((CUmemPoolPtrExportData *)exportData, DP(ptr)));
}

RT_API cudaError_t CUDARTAPI cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                                      struct cudaMemPoolPtrExportData *exportData)
{
    if (!ptr)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    return rt_cu(drv.cuMemPoolImportPointer((CUdeviceptr *)(void *)ptr, (CUmemoryPool)memPool,
                                            (CUmemPoolPtrExportData *)exportData));
}

/* the per-thread default stream variant, not declared by cuda_runtime_api.h */
cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                   cudaStream_t stream);

static cudaError_t malloc_from_pool(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s,
                                    bool ptsz)
{
    if (!p)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (size == 0) {
        *p = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d;
    CUresult r = (ptsz ? drv.cuMemAllocFromPoolAsync_ptsz : drv.cuMemAllocFromPoolAsync)(
        &d, size, (CUmemoryPool)pool, (CUstream)s);
    if (r == CUDA_SUCCESS)
        *p = (void *)(uintptr_t)d;
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                     cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, memPool, stream, false);
}

RT_API cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                          cudaMemPool_t memPool,
                                                          cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, memPool, stream, true);
}

/* ---- limits, L2 persistence, stream attributes -------------------------------------------- */

/* cudaLimit has the driver's CUlimit values; the current device's primary context holds them. */
RT_API cudaError_t CUDARTAPI cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    RT_ENTER();
    return rt_cu(drv.cuCtxSetLimit((CUlimit)limit, value));
}

RT_API cudaError_t CUDARTAPI cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
    RT_ENTER();
    return rt_cu(drv.cuCtxGetLimit(pValue, (CUlimit)limit));
}

RT_API cudaError_t CUDARTAPI cudaCtxResetPersistingL2Cache(void)
{
    RT_ENTER();
    return rt_cu(drv.cuCtxResetPersistingL2Cache());
}

/* the per-thread default stream variants, not declared by cuda_runtime_api.h */
cudaError_t CUDARTAPI cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                  const cudaStreamAttrValue *value);
cudaError_t CUDARTAPI cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr,
                                                  cudaStreamAttrValue *value_out);

/* cudaStreamAttrValue has CUstreamAttrValue's layout and the attribute ids are the driver's. */
static cudaError_t stream_attribute(cudaStream_t s, cudaStreamAttrID attr, void *value, bool set,
                                    bool ptsz)
{
    RT_ENTER();
    CUstream cs = (CUstream)s;
    CUstreamAttrID id = (CUstreamAttrID)attr;
    if (set)
        return rt_cu((ptsz ? drv.cuStreamSetAttribute_ptsz : drv.cuStreamSetAttribute)(
            cs, id, (const CUstreamAttrValue *)value));
    return rt_cu((ptsz ? drv.cuStreamGetAttribute_ptsz : drv.cuStreamGetAttribute)(
        cs, id, (CUstreamAttrValue *)value));
}

RT_API cudaError_t CUDARTAPI cudaStreamSetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    const cudaStreamAttrValue *value)
{
    return stream_attribute(hStream, attr, (void *)(uintptr_t)value, true, false);
}
RT_API cudaError_t CUDARTAPI cudaStreamSetAttribute_ptsz(cudaStream_t hStream,
                                                         cudaStreamAttrID attr,
                                                         const cudaStreamAttrValue *value)
{
    return stream_attribute(hStream, attr, (void *)(uintptr_t)value, true, true);
}
RT_API cudaError_t CUDARTAPI cudaStreamGetAttribute(cudaStream_t hStream, cudaStreamAttrID attr,
                                                    cudaStreamAttrValue *value_out)
{
    return stream_attribute(hStream, attr, value_out, false, false);
}
RT_API cudaError_t CUDARTAPI cudaStreamGetAttribute_ptsz(cudaStream_t hStream,
                                                         cudaStreamAttrID attr,
                                                         cudaStreamAttrValue *value_out)
{
    return stream_attribute(hStream, attr, value_out, false, true);
}

/* ---- graph memory ------------------------------------------------------------------------ */

RT_API cudaError_t CUDARTAPI cudaDeviceGraphMemTrim(int device)
{
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceGraphMemTrim(device));
}

/* cudaGraphMemAttributeType has the driver's CUgraphMem_attribute values */
RT_API cudaError_t CUDARTAPI cudaDeviceGetGraphMemAttribute(int device,
                                                            enum cudaGraphMemAttributeType attr,
                                                            void *value)
{
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceGetGraphMemAttribute(device, (CUgraphMem_attribute)attr, value));
}

RT_API cudaError_t CUDARTAPI cudaDeviceSetGraphMemAttribute(int device,
                                                            enum cudaGraphMemAttributeType attr,
                                                            void *value)
{
    RT_READY();
    if (device < 0 || device >= ndev)
        return rt_ret(cudaErrorInvalidDevice);
    return rt_cu(drv.cuDeviceSetGraphMemAttribute(device, (CUgraphMem_attribute)attr, value));
}

/* ---- peer copies ------------------------------------------------------------------------ */

/* the per-thread default stream variants, not declared by cuda_runtime_api.h */
cudaError_t CUDARTAPI cudaMemcpyPeer_ptds(void *dst, int dstDevice, const void *src, int srcDevice,
                                          size_t count);
cudaError_t CUDARTAPI cudaMemcpyPeerAsync_ptsz(void *dst, int dstDevice, const void *src,
                                               int srcDevice, size_t count, cudaStream_t stream);

static cudaError_t peer_contexts(int dstDevice, int srcDevice, CUcontext *dc, CUcontext *sc)
{
    if (dstDevice < 0 || dstDevice >= ndev || srcDevice < 0 || srcDevice >= ndev)
        return cudaErrorInvalidDevice;
    cudaError_t e = primary_of(dstDevice, dc);
    return e != cudaSuccess ? e : primary_of(srcDevice, sc);
}

static cudaError_t memcpy_peer(void *dst, int dstDevice, const void *src, int srcDevice,
                               size_t count, cudaStream_t stream, bool async, bool ptsz)
{
    RT_ENTER();
    if (count == 0)
        return cudaSuccess;
    CUcontext dc, sc;
    cudaError_t e = peer_contexts(dstDevice, srcDevice, &dc, &sc);
    if (e != cudaSuccess)
        return rt_ret(e);
    CUresult r;
    if (async)
        r = (ptsz ? drv.cuMemcpyPeerAsync_ptsz : drv.cuMemcpyPeerAsync)(DP(dst), dc, DP(src), sc,
                                                                        count, (CUstream)stream);
    else
        r = (ptsz ? drv.cuMemcpyPeer_ptds : drv.cuMemcpyPeer)(DP(dst), dc, DP(src), sc, count);
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaMemcpyPeer(void *dst, int dstDevice, const void *src,
                                            int srcDevice, size_t count)
{
    return memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, false, false);
}
RT_API cudaError_t CUDARTAPI cudaMemcpyPeer_ptds(void *dst, int dstDevice, const void *src,
                                                 int srcDevice, size_t count)
{
    return memcpy_peer(dst, dstDevice, src, srcDevice, count, NULL, false, true);
}
RT_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                                 int srcDevice, size_t count, cudaStream_t stream)
{
    return memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, true, false);
}
RT_API cudaError_t CUDARTAPI cudaMemcpyPeerAsync_ptsz(void *dst, int dstDevice, const void *src,
                                                      int srcDevice, size_t count,
                                                      cudaStream_t stream)
{
    return memcpy_peer(dst, dstDevice, src, srcDevice, count, stream, true, true);
}

/* ---- stream callbacks ------------------------------------------------------------------- */

/* The driver calls back with its own types; the program's callback wants the runtime's. One
 * record per queued callback, freed when it has run (or when queueing fails). */
struct rt_callback {
    cudaStreamCallback_t fn;
    cudaStream_t stream;
    void *data;
};

static void CUDA_CB rt_callback_run(CUstream s, CUresult status, void *arg)
{
    (void)s;
    struct rt_callback cb = *(struct rt_callback *)arg;
    free(arg);
    cb.fn(cb.stream, from_cu(status), cb.data);
}

static cudaError_t stream_add_callback(cudaStream_t stream, cudaStreamCallback_t fn, void *data,
                                       unsigned flags, bool ptsz)
{
    if (!fn)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    struct rt_callback *cb = malloc(sizeof *cb);
    if (!cb)
        return rt_ret(cudaErrorMemoryAllocation);
    *cb = (struct rt_callback){fn, stream, data};
    CUresult r = (ptsz ? drv.cuStreamAddCallback_ptsz : drv.cuStreamAddCallback)(
        (CUstream)stream, rt_callback_run, cb, flags);
    if (r != CUDA_SUCCESS)
        free(cb);
    return rt_cu(r);
}

RT_API cudaError_t CUDARTAPI cudaStreamAddCallback(cudaStream_t stream,
                                                   cudaStreamCallback_t callback, void *userData,
                                                   unsigned int flags)
{
    return stream_add_callback(stream, callback, userData, flags, false);
}
RT_API cudaError_t CUDARTAPI cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                        cudaStreamCallback_t callback,
                                                        void *userData, unsigned int flags)
{
    return stream_add_callback(stream, callback, userData, flags, true);
}

/* ---- profiler --------------------------------------------------------------------------- */

RT_API cudaError_t CUDARTAPI cudaProfilerStart(void)
{
    RT_ENTER();
    return rt_cu(drv.cuProfilerStart());
}

RT_API cudaError_t CUDARTAPI cudaProfilerStop(void)
{
    RT_ENTER();
    return rt_cu(drv.cuProfilerStop());
}

/* ---- kernel attributes and occupancy ----------------------------------------------------- */

/* No kernel is compiled for the simulated device, so every kernel gets the same resources:
 * 32 registers a thread, no static shared, constant or local memory. */
#define RT_KERNEL_REGS 32

static int dev_attr(CUdevice_attribute a, int dev)
{
    int v = 0;
    return drv.cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

RT_API cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    struct rt_kernel *k = kernel_find(func, NULL);
    if (!k)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = RT_KERNEL_REGS;
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    pthread_mutex_lock(&rt_kernels_mu);
    attr->maxDynamicSharedSizeBytes = k->max_dyn_smem;
    attr->preferredShmemCarveout = k->carveout;
    pthread_mutex_unlock(&rt_kernels_mu);
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                                  int value)
{
    RT_ENTER();
    struct rt_kernel *k = kernel_find(func, NULL);
    if (!k)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    int optin = dev_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, current_device());
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&rt_kernels_mu);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && value >= 0 && value <= optin)
        k->max_dyn_smem = value;
    else if (attr == cudaFuncAttributePreferredSharedMemoryCarveout && value >= -1 && value <= 100)
        k->carveout = value;
    else
        e = cudaErrorInvalidValue;
    pthread_mutex_unlock(&rt_kernels_mu);
    return rt_ret(e);
}

RT_API cudaError_t CUDARTAPI cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
    RT_ENTER();
    struct rt_kernel *k = kernel_find(func, NULL);
    if (!k)
        return rt_ret(cudaErrorInvalidDeviceFunction);
    if (cacheConfig < cudaFuncCachePreferNone || cacheConfig > cudaFuncCachePreferEqual)
        return rt_ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&rt_kernels_mu);
    k->cache_config = cacheConfig;
    pthread_mutex_unlock(&rt_kernels_mu);
    return cudaSuccess;
}

/* Resident blocks of blockSize threads on one SM, limited by threads, blocks, registers and
 * shared memory as the occupancy calculator counts them (warp granularity). */
static cudaError_t occupancy(int *numBlocks, const void *func, int blockSize, size_t dynSmem,
                             unsigned flags)
{
    if (!numBlocks || blockSize <= 0 || (flags & ~(unsigned)cudaOccupancyDisableCachingOverride))
        return rt_ret(cudaErrorInvalidValue);
    RT_ENTER();
    if (!kernel_find(func, NULL))
        return rt_ret(cudaErrorInvalidDeviceFunction);
    int dev = current_device();
    if (blockSize > dev_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev) ||
        dynSmem > (size_t)dev_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)) {
        *numBlocks = 0;
        return cudaSuccess;
    }
    int warps = (blockSize + 31) / 32;
    int n = dev_attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev);
    int by_threads = dev_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) / (warps * 32);
    int by_regs = dev_attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev) /
                  (warps * 32 * RT_KERNEL_REGS);
    size_t smem = dynSmem + (size_t)dev_attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev);
    int by_smem = smem ? (int)((size_t)dev_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev) / smem) : n;
    if (by_threads < n)
        n = by_threads;
    if (by_regs < n)
        n = by_regs;
    if (by_smem < n)
        n = by_smem;
    *numBlocks = n;
    return cudaSuccess;
}

RT_API cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks,
                                                                           const void *func,
                                                                           int blockSize,
                                                                           size_t dynamicSMemSize)
{
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

RT_API cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags)
{
    return occupancy(numBlocks, func, blockSize, dynamicSMemSize, flags);
}
