/* cuGetProcAddress as the real driver answers it: base names, ABI versions, per-thread
 * variants, unknown symbols, versions newer than the driver, the 4-argument 11.x ABI.
 * Resolves everything like cudart does: dlopen("libcuda.so.1") + dlsym. */
#include <dlfcn.h>
#include <string.h>

#include "drv.h"

typedef CUresult (*gpa5_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa4_t)(const char *, void **, int, cuuint64_t);

static void *lib;
static gpa5_t gpa5;
static gpa4_t gpa4;

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "not exported: %s\n", name);
    CHECK(p != NULL);
    return p;
}

static void *get(const char *base, int ver, cuuint64_t flags)
{
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
    CU(gpa5(base, &p, ver, flags, &st));
    CHECK_EQ(st, p ? CU_GET_PROC_ADDRESS_SUCCESS : st);
    return p;
}

/* base name, version, expected symbol, expected per-thread symbol (or NULL) */
static const struct {
    const char *base;
    int ver;
    const char *fn;
    const char *ptsz;
} table[] = {
    {"cuInit", 2000, "cuInit", NULL},
    {"cuDriverGetVersion", 2020, "cuDriverGetVersion", NULL},
    {"cuDeviceGet", 2000, "cuDeviceGet", NULL},
    {"cuDeviceGetCount", 2000, "cuDeviceGetCount", NULL},
    {"cuDeviceGetName", 2000, "cuDeviceGetName", NULL},
    {"cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", NULL},
    {"cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", NULL},
    {"cuDeviceGetUuid", 9020, "cuDeviceGetUuid", NULL},
    {"cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", NULL},
    {"cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", NULL},
    {"cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", NULL},
    {"cuDevicePrimaryCtxReset", 11000, "cuDevicePrimaryCtxReset_v2", NULL},
    {"cuDevicePrimaryCtxGetState", 7000, "cuDevicePrimaryCtxGetState", NULL},
    {"cuCtxCreate", 3020, "cuCtxCreate_v2", NULL},
    {"cuCtxCreate", 11040, "cuCtxCreate_v3", NULL},
    {"cuCtxCreate", 12050, "cuCtxCreate_v4", NULL},
    {"cuCtxDestroy", 4000, "cuCtxDestroy_v2", NULL},
    {"cuCtxGetCurrent", 4000, "cuCtxGetCurrent", NULL},
    {"cuCtxSetCurrent", 4000, "cuCtxSetCurrent", NULL},
    {"cuCtxPushCurrent", 4000, "cuCtxPushCurrent_v2", NULL},
    {"cuCtxPopCurrent", 4000, "cuCtxPopCurrent_v2", NULL},
    {"cuCtxGetDevice", 2000, "cuCtxGetDevice", NULL},
    {"cuCtxGetDevice", 13000, "cuCtxGetDevice_v2", NULL},
    {"cuCtxSynchronize", 2000, "cuCtxSynchronize", NULL},
    {"cuCtxSynchronize", 13000, "cuCtxSynchronize_v2", NULL},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2", NULL},
    {"cuMemFree", 3020, "cuMemFree_v2", NULL},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2", NULL},
    {"cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
    {"cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    {"cuMemHostAlloc", 2020, "cuMemHostAlloc", NULL},
    {"cuMemAllocHost", 3020, "cuMemAllocHost_v2", NULL},
    {"cuMemFreeHost", 2000, "cuMemFreeHost", NULL},
    {"cuMemGetAddressRange", 3020, "cuMemGetAddressRange_v2", NULL},
    {"cuMemsetD8", 3020, "cuMemsetD8_v2", "cuMemsetD8_v2_ptds"},
    {"cuMemsetD32", 3020, "cuMemsetD32_v2", "cuMemsetD32_v2_ptds"},
    {"cuMemsetD8Async", 3020, "cuMemsetD8Async", "cuMemsetD8Async_ptsz"},
    {"cuMemsetD32Async", 3020, "cuMemsetD32Async", "cuMemsetD32Async_ptsz"},
    {"cuMemcpy", 4000, "cuMemcpy", "cuMemcpy_ptds"},
    {"cuMemcpyAsync", 4000, "cuMemcpyAsync", "cuMemcpyAsync_ptsz"},
    {"cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpyDtoD", 3020, "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"},
    {"cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"},
    {"cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"},
    {"cuPointerGetAttribute", 4000, "cuPointerGetAttribute", NULL},
    {"cuPointerGetAttributes", 7000, "cuPointerGetAttributes", NULL},
    {"cuIpcGetMemHandle", 4010, "cuIpcGetMemHandle", NULL},
    {"cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2", NULL},
    {"cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle", NULL},
    {"cuStreamCreate", 2000, "cuStreamCreate", NULL},
    {"cuStreamCreateWithPriority", 5050, "cuStreamCreateWithPriority", NULL},
    {"cuStreamDestroy", 4000, "cuStreamDestroy_v2", NULL},
    {"cuStreamGetFlags", 5050, "cuStreamGetFlags", "cuStreamGetFlags_ptsz"},
    {"cuStreamQuery", 2000, "cuStreamQuery", "cuStreamQuery_ptsz"},
    {"cuStreamSynchronize", 2000, "cuStreamSynchronize", "cuStreamSynchronize_ptsz"},
    {"cuStreamWaitEvent", 3020, "cuStreamWaitEvent", "cuStreamWaitEvent_ptsz"},
    {"cuStreamIsCapturing", 10000, "cuStreamIsCapturing", "cuStreamIsCapturing_ptsz"},
    {"cuStreamBeginCapture", 10000, "cuStreamBeginCapture", "cuStreamBeginCapture_ptsz"},
    {"cuStreamBeginCapture", 10010, "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz"},
    {"cuStreamEndCapture", 10000, "cuStreamEndCapture", "cuStreamEndCapture_ptsz"},
    {"cuThreadExchangeStreamCaptureMode", 10010, "cuThreadExchangeStreamCaptureMode", NULL},
    {"cuEventCreate", 2000, "cuEventCreate", NULL},
    {"cuEventRecord", 2000, "cuEventRecord", "cuEventRecord_ptsz"},
    {"cuEventQuery", 2000, "cuEventQuery", NULL},
    {"cuEventSynchronize", 2000, "cuEventSynchronize", NULL},
    {"cuEventDestroy", 4000, "cuEventDestroy_v2", NULL},
    {"cuEventElapsedTime", 2000, "cuEventElapsedTime", NULL},
    {"cuEventElapsedTime", 12080, "cuEventElapsedTime_v2", NULL},
    {"cuLaunchHostFunc", 10000, "cuLaunchHostFunc", "cuLaunchHostFunc_ptsz"},
    {"cuGetErrorString", 6000, "cuGetErrorString", NULL},
    {"cuGetErrorName", 6000, "cuGetErrorName", NULL},
    {"cuGetExportTable", 3000, "cuGetExportTable", NULL},
    {"cuMemAddressReserve", 10020, "cuMemAddressReserve", NULL},
    {"cuMemAddressFree", 10020, "cuMemAddressFree", NULL},
    {"cuMemCreate", 10020, "cuMemCreate", NULL},
    {"cuMemRelease", 10020, "cuMemRelease", NULL},
    {"cuMemMap", 10020, "cuMemMap", NULL},
    {"cuMemUnmap", 10020, "cuMemUnmap", NULL},
    {"cuMemSetAccess", 10020, "cuMemSetAccess", NULL},
    {"cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", NULL},
    {"cuGetProcAddress", 11030, "cuGetProcAddress", NULL},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", NULL},
};

static void test_before_init(void)
{
    /* cudart resolves everything before cuInit: lookups must work uninitialised */
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
    CU(gpa5("", &p, 0, 0, NULL)); /* cudart's probe */
    CHECK(p == NULL);
    CU(gpa5("", &p, 0, 0, &st));
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CHECK(get("cuInit", 2000, 0) == sym("cuInit"));
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))get("cuMemAlloc", 3020, 0);
    CUdeviceptr d;
    EXPECT(alloc(&d, 1), CUDA_ERROR_NOT_INITIALIZED);
}

static void test_table(void)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        void *fn = get(table[i].base, table[i].ver, 0);
        if (fn != sym(table[i].fn))
            fprintf(stderr, "%s@%d is not %s\n", table[i].base, table[i].ver, table[i].fn);
        CHECK(fn == sym(table[i].fn));
        CHECK(get(table[i].base, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM) != NULL);
        int ptver = table[i].ver < 7000 ? 7000 : table[i].ver; /* per-thread since CUDA 7.0 */
        void *pt = get(table[i].base, ptver, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        if (table[i].ptsz) {
            CHECK(pt == sym(table[i].ptsz));
            CHECK(pt != fn); /* distinct entry points */
        } else {
            CHECK(pt == fn); /* no per-thread variant: the legacy one */
        }
    }
}

static void test_versions(void)
{
    /* cuMemAlloc below 3.2 is the 32-bit v1 ABI: a different function, unsupported */
    void *v2 = get("cuMemAlloc", 3020, 0), *v1 = get("cuMemAlloc", 2000, 0);
    CHECK(v1 == sym("cuMemAlloc"));
    CHECK(v1 != v2);
    CHECK(get("cuMemAlloc", 13000, 0) == v2);
    CHECK(get("cuMemAlloc", 3010, 0) == v1);
    CUresult (*alloc1)(unsigned int *, unsigned int) = (CUresult(*)(unsigned int *, unsigned int))v1;
    unsigned int small;
    EXPECT(alloc1(&small, 16), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(get("cuMemFree", 2000, 0) != get("cuMemFree", 3020, 0));
    CHECK(get("cuMemGetInfo", 2000, 0) == sym("cuMemGetInfo"));
    CHECK(get("cuCtxCreate", 11000, 0) == sym("cuCtxCreate_v2"));
    CHECK(get("cuCtxCreate", 13000, 0) == sym("cuCtxCreate_v4"));
    CHECK(get("cuCtxDestroy", 3020, 0) == sym("cuCtxDestroy"));
    CHECK(get("cuCtxGetDevice", 12090, 0) == sym("cuCtxGetDevice"));
    /* per-thread variants from CUDA 7.0: none for an older version (as on an H100) */
    void *q = (void *)1;
    CUdriverProcAddressQueryResult qs;
    CU(gpa5("cuStreamQuery", &q, 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qs));
    CHECK(q == NULL);
    CHECK_EQ(qs, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CHECK(get("cuStreamQuery", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == sym("cuStreamQuery_ptsz"));
    CHECK(get("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == v2); /* no variant */

    /* introduced later than the requested version */
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st;
    CU(gpa5("cuMemAllocAsync", &p, 11010, 0, &st));
    CHECK(p == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* unknown */
    p = (void *)1;
    CU(gpa5("cuNoSuchFunction", &p, 13000, 0, &st));
    CHECK(p == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CU(gpa5("cuMemAlloc_v2", &p, 13000, 0, &st)); /* versioned names are not base names */
    CHECK(p == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* newer than the driver, bad flags, bad arguments */
    EXPECT(gpa5("cuMemAlloc", &p, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
    EXPECT(gpa5("cuMemAlloc", &p, 20000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    EXPECT(gpa5("cuMemAlloc", &p, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    EXPECT(gpa5(NULL, &p, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    EXPECT(gpa5("cuMemAlloc", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
}

static void test_self_lookup_and_4arg_abi(void)
{
    CHECK(get("cuGetProcAddress", 11030, 0) == (void *)gpa4);
    CHECK(get("cuGetProcAddress", 12000, 0) == (void *)gpa5);
    CHECK(get("cuGetProcAddress", 12080, 0) == (void *)gpa5);
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st;
    CU(gpa5("cuGetProcAddress", &p, 11020, 0, &st));
    CHECK(p == NULL);
    CHECK_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* the 11.3-11.8 ABI: four arguments, same answers */
    CU(gpa4("cuMemFree", &p, 3020, 0));
    CHECK(p == sym("cuMemFree_v2"));
    CU(gpa4("cuStreamQuery", &p, 11030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    CHECK(p == sym("cuStreamQuery_ptsz"));
    p = (void *)1;
    CU(gpa4("cuNothing", &p, 11030, 0));
    CHECK(p == NULL);
    EXPECT(gpa4("cuMemAlloc", &p, 13010, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_misc_entry_points(void)
{
    CU(cuInit(0));
    const void *tbl = (const void *)1;
    CUuuid id;
    memset(&id, 0, sizeof id);
    EXPECT(cuGetExportTable(&tbl, &id), CUDA_ERROR_NOT_SUPPORTED);
    const char *s = NULL;
    CU(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
    CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(strcmp(s, "out of memory") == 0);
    CU(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &s));
    CHECK(strcmp(s, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED") == 0);
    EXPECT(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
}

int main(void)
{
    alarm(60);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(lib != NULL);
    gpa5 = (gpa5_t)sym("cuGetProcAddress_v2");
    gpa4 = (gpa4_t)sym("cuGetProcAddress");
    CHECK((void *)gpa5 == (void *)&cuGetProcAddress_v2); /* the same library */
    RUN(test_before_init);
    RUN(test_table);
    RUN(test_versions);
    RUN(test_self_lookup_and_4arg_abi);
    RUN(test_misc_entry_points);
    return 0;
}
