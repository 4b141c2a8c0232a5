/* What a program learns about a pointer from the driver's and the runtime's queries, written as
 * RESULT fields that do not depend on where the memory is: every address as an offset from the
 * pointer asked about, every error by name. A probe that prints them with and without tessera
 * lets the test compare tessera's answers with the driver's, field by field. */
#ifndef TS_PROBE_QUERIES_H
#define TS_PROBE_QUERIES_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>

#include "probe_common.h"

typedef CUresult (*q_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*q_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*q_attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*q_hflags_fn)(unsigned int *, void *);
typedef CUresult (*q_hdev_fn)(CUdeviceptr *, void *, unsigned int);
typedef CUresult (*q_name_fn)(CUresult, const char **);

static struct {
    q_range_fn range;
    q_attr_fn attr;
    q_attrs_fn attrs;
    q_hflags_fn host_flags;
    q_hdev_fn host_devptr;
    q_name_fn name;
} q_drv;

/* The driver's entry points, through dlsym on libcuda (tessera's hooks when it is preloaded). */
static inline void q_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        printf("RESULT status=error call=dlopen\n");
        exit(1);
    }
    q_drv.range = (q_range_fn)dlsym(h, "cuMemGetAddressRange_v2");
    q_drv.attr = (q_attr_fn)dlsym(h, "cuPointerGetAttribute");
    q_drv.attrs = (q_attrs_fn)dlsym(h, "cuPointerGetAttributes");
    q_drv.host_flags = (q_hflags_fn)dlsym(h, "cuMemHostGetFlags");
    q_drv.host_devptr = (q_hdev_fn)dlsym(h, "cuMemHostGetDevicePointer_v2");
    q_drv.name = (q_name_fn)dlsym(h, "cuGetErrorName");
    if (!q_drv.range || !q_drv.attr || !q_drv.attrs || !q_drv.host_flags || !q_drv.host_devptr ||
        !q_drv.name) {
        printf("RESULT status=error call=dlsym\n");
        exit(1);
    }
}

static inline const char *q_err(CUresult r)
{
    const char *s = NULL;
    return q_drv.name(r, &s) == CUDA_SUCCESS && s ? s : "?";
}

/* An address as the offset of ptr from it ("-" for NULL). */
static inline void q_off(char *buf, size_t cap, uintptr_t ptr, uintptr_t addr)
{
    if (addr)
        snprintf(buf, cap, "%lld", (long long)(ptr - addr));
    else
        snprintf(buf, cap, "-");
}

/* Append " k=v" to out. */
static inline void q_put(char *out, size_t cap, const char *label, const char *key,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline void q_put(char *out, size_t cap, const char *label, const char *key,
                         const char *fmt, ...)
{
    size_t len = strlen(out);
    if (len >= cap)
        return;
    int n = snprintf(out + len, cap - len, " %s_%s=", label, key);
    if (n < 0 || (size_t)n >= cap - len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + len + (size_t)n, cap - len - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Every query about p, as fields label_*; *id receives the BUFFER_ID (0 when refused). */
static inline void q_describe(char *out, size_t cap, const char *label, const void *p,
                              unsigned long long *id)
{
    const uintptr_t u = (uintptr_t)p;
    const CUdeviceptr d = (CUdeviceptr)u;
    char o1[32], o2[32];

    struct cudaPointerAttributes pa;
    memset(&pa, 0, sizeof pa);
    cudaError_t re = cudaPointerGetAttributes(&pa, p);
    (void)cudaGetLastError();
    q_off(o1, sizeof o1, u, (uintptr_t)pa.devicePointer);
    q_off(o2, sizeof o2, u, (uintptr_t)pa.hostPointer);
    q_put(out, cap, label, "rt", "%s/%d/%d/%s/%s", cudaGetErrorName(re), (int)pa.type, pa.device,
          o1, o2);

    unsigned int type = 0;
    CUresult r = q_drv.attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d);
    q_put(out, cap, label, "type", "%s/%u", q_err(r), r == CUDA_SUCCESS ? type : 0u);
    void *start = NULL, *mbase = NULL;
    size_t rsize = 0, msize = 0;
    r = q_drv.attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d);
    q_off(o1, sizeof o1, u, r == CUDA_SUCCESS ? (uintptr_t)start : 0);
    q_put(out, cap, label, "start", "%s/%s", q_err(r), o1);
    r = q_drv.attr(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d);
    q_put(out, cap, label, "size", "%s/%zu", q_err(r), r == CUDA_SUCCESS ? rsize : 0);
    r = q_drv.attr(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, d);
    q_off(o1, sizeof o1, u, r == CUDA_SUCCESS ? (uintptr_t)mbase : 0);
    q_put(out, cap, label, "mbase", "%s/%s", q_err(r), o1);
    r = q_drv.attr(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, d);
    q_put(out, cap, label, "msize", "%s/%zu", q_err(r), r == CUDA_SUCCESS ? msize : 0);
    unsigned long long bid = 0;
    r = q_drv.attr(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID, d);
    q_put(out, cap, label, "id", "%s/%d", q_err(r), bid != 0);
    *id = r == CUDA_SUCCESS ? bid : 0;

    /* cuPointerGetAttributes answers for unallocated memory too, with its null values; it is
     * asked for all but the last attribute of the list, whose slot must stay as it was */
    CUpointer_attribute as[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
                                CU_POINTER_ATTRIBUTE_MAPPED, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    unsigned int mtype = 7;
    int ordinal = 7;
    void *host = (void *)1, *mstart = (void *)1;
    size_t msz = 7, mmap = 7;
    unsigned char mapped = 7;
    unsigned long long mid = 7;
    void *data[] = {&mtype, &ordinal, &host, &mstart, &msz, &mmap, &mapped, &mid};
    r = q_drv.attrs(sizeof as / sizeof as[0] - 1, as, data, d);
    q_off(o1, sizeof o1, u, (uintptr_t)host);
    if (mstart == (void *)1) /* left as it was (a GPU does, for unallocated memory) */
        snprintf(o2, sizeof o2, "kept");
    else
        q_off(o2, sizeof o2, u, (uintptr_t)mstart);
    q_put(out, cap, label, "multi", "%s/%u/%d/%s/%s/%zu/%zu/%u/%d", q_err(r), mtype, ordinal, o1,
          o2, msz, mmap, (unsigned)mapped, mid == 7);

    CUdeviceptr dp = 0;
    r = q_drv.range(&dp, &rsize, d);
    q_off(o1, sizeof o1, u, r == CUDA_SUCCESS ? (uintptr_t)dp : 0);
    q_put(out, cap, label, "range", "%s/%s/%zu", q_err(r), o1, r == CUDA_SUCCESS ? rsize : 0);

    /* the host-memory queries, runtime and driver */
    void *dev = NULL;
    re = cudaHostGetDevicePointer(&dev, (void *)p, 0);
    (void)cudaGetLastError();
    q_off(o1, sizeof o1, u, re == cudaSuccess ? (uintptr_t)dev : 0);
    q_put(out, cap, label, "hdev", "%s/%s", cudaGetErrorName(re), o1);
    dp = 0;
    r = q_drv.host_devptr(&dp, (void *)p, 0);
    q_off(o1, sizeof o1, u, r == CUDA_SUCCESS ? (uintptr_t)dp : 0);
    q_put(out, cap, label, "cdev", "%s/%s", q_err(r), o1);
    unsigned int flags = 0;
    re = cudaHostGetFlags(&flags, (void *)p);
    (void)cudaGetLastError();
    q_put(out, cap, label, "hflags", "%s/%u", cudaGetErrorName(re), re == cudaSuccess ? flags : 0u);
    flags = 0;
    r = q_drv.host_flags(&flags, (void *)p);
    q_put(out, cap, label, "cflags", "%s/%u", q_err(r), r == CUDA_SUCCESS ? flags : 0u);
}

#endif
