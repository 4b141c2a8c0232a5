/* tessera-costs: measure, on this machine's GPU, the latency of every driver call tessera's CUDA
 * backend makes, at the sizes it makes them, and write a costs file for
 * `tessera-replay --driver-costs FILE` (format: devmodel/costs.h).
 *
 *   tessera-costs [--device N] [--reps N] [-o FILE]
 *
 * Each call is timed one by one (CLOCK_MONOTONIC around the call) and its median kept:
 * cuMemAlloc/cuMemFree of 2 MiB and 20 MiB segments (what cudaMalloc/cudaFree cost tessera:
 * its backend calls the driver), cuMemCreate/cuMemMap/cuMemSetAccess/cuMemUnmap/cuMemRelease of
 * 2 MiB and 20 MiB handles, cuMemAddressReserve/cuMemAddressFree of an expandable segment's
 * range (9/8 of the device), cuCtxSynchronize on an idle device and cuEventRecord. The two sizes
 * give a cost per call and a cost per MiB (a straight line through the two medians, never
 * negative). The driver is reached with dlopen("libcuda.so.1") like any CUDA program; nothing of
 * tessera is loaded. Memory: reps handles of 20 MiB at most, fewer reps when the device is
 * short. Every call is undone before exit, on errors too.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devmodel/costs.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

#define MIB ((size_t)1 << 20)
#define REPS_MAX 1000
#define REPS_MIN 3

/* The driver entry points used, resolved by their versioned names. */
#define DRIVER_CALLS(X)                                                                            \
    X(cuInit, (unsigned int))                                                                      \
    X(cuDriverGetVersion, (int *))                                                                 \
    X(cuDeviceGetCount, (int *))                                                                   \
    X(cuDeviceGet, (CUdevice *, int))                                                              \
    X(cuDeviceGetName, (char *, int, CUdevice))                                                    \
    X(cuDeviceTotalMem_v2, (size_t *, CUdevice))                                                   \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                           \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                    \
    X(cuCtxSetCurrent, (CUcontext))                                                                \
    X(cuCtxSynchronize, (void))                                                                    \
    X(cuMemGetInfo_v2, (size_t *, size_t *))                                                       \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                      \
    X(cuMemFree_v2, (CUdeviceptr))                                                                 \
    X(cuMemGetAllocationGranularity,                                                               \
      (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags))                   \
    X(cuMemAddressReserve, (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))       \
    X(cuMemAddressFree, (CUdeviceptr, size_t))                                                     \
    X(cuMemCreate,                                                                                 \
      (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long))   \
    X(cuMemRelease, (CUmemGenericAllocationHandle))                                                \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))   \
    X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t))                      \
    X(cuMemUnmap, (CUdeviceptr, size_t))                                                           \
    X(cuEventCreate, (CUevent *, unsigned int))                                                    \
    X(cuEventRecord, (CUevent, CUstream))                                                          \
    X(cuEventDestroy_v2, (CUevent))                                                                \
    X(cuGetErrorName, (CUresult, const char **))

static struct {
#define FIELD(name, params) CUresult (*name) params;
    DRIVER_CALLS(FIELD)
#undef FIELD
} drv;

static const char *err_name(CUresult r)
{
    const char *s = NULL;
    if (drv.cuGetErrorName && drv.cuGetErrorName(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "an unknown CUDA error";
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Medians per call (microseconds), at the two sizes where the call covers memory. */
typedef struct measured {
    double us[TS_CALL_COUNT][2];
} measured;

/* Everything a measurement holds, so that a failure can undo it. */
typedef struct held {
    CUdeviceptr *seg;
    CUmemGenericAllocationHandle *h;
    size_t nseg, nh, nmapped, size;
    CUdeviceptr va;
    size_t va_size;
    CUevent ev;
} held;

static void held_release(held *k)
{
    if (k->nmapped)
        drv.cuCtxSynchronize();
    for (size_t i = 0; i < k->nmapped; i++)
        drv.cuMemUnmap(k->va + i * k->size, k->size);
    for (size_t i = 0; i < k->nh; i++)
        drv.cuMemRelease(k->h[i]);
    if (k->va)
        drv.cuMemAddressFree(k->va, k->va_size);
    for (size_t i = 0; i < k->nseg; i++)
        drv.cuMemFree_v2(k->seg[i]);
    if (k->ev)
        drv.cuEventDestroy_v2(k->ev);
    k->nmapped = k->nh = k->nseg = 0;
    k->va = 0;
    k->ev = NULL;
}

static held g_held;
static double *g_t;

static void fail(const char *call, size_t bytes, CUresult r)
{
    if (bytes)
        fprintf(stderr, "tessera-costs: %s (%zu MiB): %s\n", call, bytes / MIB, err_name(r));
    else
        fprintf(stderr, "tessera-costs: %s: %s\n", call, err_name(r));
    held_release(&g_held);
    exit(1);
}

/* Time one call; on failure undo everything and exit. */
#define TIMED(slot, call, bytes, expr)                                                             \
    do {                                                                                           \
        double t0_ = now_us();                                                                     \
        CUresult r_ = (expr);                                                                      \
        (slot) = now_us() - t0_;                                                                   \
        if (r_ != CUDA_SUCCESS)                                                                    \
            fail((call), (bytes), r_);                                                             \
    } while (0)

static void measure_segments(measured *m, size_t reps, int k, size_t size)
{
    held *h = &g_held;
    for (size_t i = 0; i < reps; i++) {
        TIMED(g_t[i], "cuMemAlloc", size, drv.cuMemAlloc_v2(&h->seg[i], size));
        h->nseg++;
    }
    m->us[TS_CALL_MALLOC][k] = median(g_t, reps);
    drv.cuCtxSynchronize();
    for (size_t i = reps; i-- > 0;) {
        h->nseg--;
        TIMED(g_t[i], "cuMemFree", size, drv.cuMemFree_v2(h->seg[i]));
    }
    m->us[TS_CALL_FREE][k] = median(g_t, reps);
}

/* The physical memory tessera's backend asks for: pinned, on device dev. */
static CUmemAllocationProp pinned_prop(CUdevice dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

static void measure_handles(measured *m, size_t reps, int k, size_t size, CUdevice dev)
{
    held *h = &g_held;
    const CUmemAllocationProp prop = pinned_prop(dev);
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult r = drv.cuMemAddressReserve(&h->va, reps * size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        fail("cuMemAddressReserve", reps * size, r);
    h->va_size = reps * size;
    h->size = size;
    for (size_t i = 0; i < reps; i++) {
        TIMED(g_t[i], "cuMemCreate", size, drv.cuMemCreate(&h->h[i], size, &prop, 0));
        h->nh++;
    }
    m->us[TS_CALL_CREATE][k] = median(g_t, reps);
    for (size_t i = 0; i < reps; i++) {
        TIMED(g_t[i], "cuMemMap", size, drv.cuMemMap(h->va + i * size, size, 0, h->h[i], 0));
        h->nmapped++;
    }
    m->us[TS_CALL_MAP][k] = median(g_t, reps);
    for (size_t i = 0; i < reps; i++)
        TIMED(g_t[i], "cuMemSetAccess", size, drv.cuMemSetAccess(h->va + i * size, size, &access, 1));
    m->us[TS_CALL_SET_ACCESS][k] = median(g_t, reps);
    drv.cuCtxSynchronize();
    for (size_t i = reps; i-- > 0;) {
        h->nmapped--;
        TIMED(g_t[i], "cuMemUnmap", size, drv.cuMemUnmap(h->va + i * size, size));
    }
    m->us[TS_CALL_UNMAP][k] = median(g_t, reps);
    for (size_t i = reps; i-- > 0;) {
        h->nh--;
        TIMED(g_t[i], "cuMemRelease", size, drv.cuMemRelease(h->h[i]));
    }
    m->us[TS_CALL_RELEASE][k] = median(g_t, reps);
    r = drv.cuMemAddressFree(h->va, h->va_size);
    h->va = 0;
    if (r != CUDA_SUCCESS)
        fail("cuMemAddressFree", 0, r);
}

/* Calls whose cost does not depend on a size: the same median at both sizes. */
static void measure_fixed(measured *m, size_t reps, size_t range)
{
    held *h = &g_held;
    double *t2 = g_t + reps;
    for (size_t i = 0; i < reps; i++) {
        TIMED(g_t[i], "cuMemAddressReserve", range,
              drv.cuMemAddressReserve(&h->va, range, 0, 0, 0));
        h->va_size = range;
        CUdeviceptr va = h->va;
        h->va = 0;
        TIMED(t2[i], "cuMemAddressFree", range, drv.cuMemAddressFree(va, range));
    }
    m->us[TS_CALL_ADDRESS_RESERVE][0] = m->us[TS_CALL_ADDRESS_RESERVE][1] = median(g_t, reps);
    m->us[TS_CALL_ADDRESS_FREE][0] = m->us[TS_CALL_ADDRESS_FREE][1] = median(t2, reps);
    for (size_t i = 0; i < reps; i++)
        TIMED(g_t[i], "cuCtxSynchronize", 0, drv.cuCtxSynchronize());
    m->us[TS_CALL_SYNCHRONIZE][0] = m->us[TS_CALL_SYNCHRONIZE][1] = median(g_t, reps);
    CUresult r = drv.cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        fail("cuEventCreate", 0, r);
    for (size_t i = 0; i < reps; i++)
        TIMED(g_t[i], "cuEventRecord", 0, drv.cuEventRecord(h->ev, NULL));
    m->us[TS_CALL_EVENT_RECORD][0] = m->us[TS_CALL_EVENT_RECORD][1] = median(g_t, reps);
    drv.cuCtxSynchronize();
}

static int load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "tessera-costs: cannot load libcuda.so.1 (%s): is there a GPU driver?\n",
                dlerror());
        return -1;
    }
#define RESOLVE(name, params)                                                                      \
    *(void **)&drv.name = dlsym(lib, #name);                                                       \
    if (!drv.name) {                                                                               \
        fprintf(stderr, "tessera-costs: libcuda.so.1 has no %s (a driver older than CUDA 11?)\n", \
                #name);                                                                            \
        return -1;                                                                                 \
    }
    DRIVER_CALLS(RESOLVE)
#undef RESOLVE
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera-costs [--device N] [--reps N] [-o FILE]\n"
               "       tessera-costs --help | --version\n"
               "  Times every driver call tessera's CUDA backend makes, at the sizes it makes\n"
               "  them, and writes the costs file tessera-replay --driver-costs reads.\n"
               "  --device N  the GPU to measure (default 0)\n"
               "  --reps N    calls timed per call and size, %d to %d (default 32; fewer when\n"
               "              the device cannot hold N handles of 20 MiB)\n"
               "  -o FILE     write the file there (default: standard output)\n",
            REPS_MIN, REPS_MAX);
}

int main(int argc, char **argv)
{
    int ordinal = 0;
    long reps_opt = 32;
    const char *out_path = NULL;
    static const struct option opts[] = {{"device", required_argument, NULL, 'd'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"output", required_argument, NULL, 'o'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'd':
            errno = 0;
            ordinal = (int)strtol(optarg, &end, 10);
            if (errno || !*optarg || *end || ordinal < 0 || ordinal > 1023) {
                fprintf(stderr, "tessera-costs: --device: '%s' is not a device number\n", optarg);
                return 2;
            }
            break;
        case 'r':
            errno = 0;
            reps_opt = strtol(optarg, &end, 10);
            if (errno || !*optarg || *end || reps_opt < REPS_MIN || reps_opt > REPS_MAX) {
                fprintf(stderr, "tessera-costs: --reps: '%s' is not a number from %d to %d\n",
                        optarg, REPS_MIN, REPS_MAX);
                return 2;
            }
            break;
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tessera-costs %s\n", TESSERA_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (load_driver() != 0)
        return 1;

    CUresult r = drv.cuInit(0);
    if (r != CUDA_SUCCESS)
        fail("cuInit", 0, r);
    int count = 0, version = 0;
    drv.cuDeviceGetCount(&count);
    drv.cuDriverGetVersion(&version);
    if (ordinal >= count) {
        fprintf(stderr, "tessera-costs: --device %d: there %s %d device%s\n", ordinal,
                count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    char name[256] = "?";
    size_t total = 0, free_b = 0, gran = 0;
    if ((r = drv.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS)
        fail("cuDeviceGet", 0, r);
    drv.cuDeviceGetName(name, (int)sizeof name, dev);
    if ((r = drv.cuDeviceTotalMem_v2(&total, dev)) != CUDA_SUCCESS)
        fail("cuDeviceTotalMem", 0, r);
    if ((r = drv.cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
        fail("cuDevicePrimaryCtxRetain", 0, r);
    if ((r = drv.cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
        fail("cuCtxSetCurrent", 0, r);
    if ((r = drv.cuMemGetInfo_v2(&free_b, &total)) != CUDA_SUCCESS)
        fail("cuMemGetInfo", 0, r);
    const CUmemAllocationProp prop = pinned_prop(dev);
    if ((r = drv.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)) !=
            CUDA_SUCCESS ||
        gran == 0)
        fail("cuMemGetAllocationGranularity", 0, r);

    /* tessera's sizes: 2 MiB pages and 20 MiB large segments, in whole granules */
    const size_t sizes[2] = {(2 * MIB + gran - 1) / gran * gran, (20 * MIB + gran - 1) / gran * gran};
    size_t reps = (size_t)reps_opt;
    if (reps * sizes[1] > free_b / 2)
        reps = free_b / 2 / sizes[1];
    if (reps < REPS_MIN) {
        fprintf(stderr, "tessera-costs: device %d has %zu MiB free: %d handles of %zu MiB need "
                        "twice that; free the device first\n",
                ordinal, free_b / MIB, REPS_MIN, sizes[1] / MIB);
        return 1;
    }
    const size_t range = (total + total / 8 + sizes[1] - 1) / sizes[1] * sizes[1];

    g_t = calloc(2 * reps, sizeof *g_t);
    g_held.seg = calloc(reps, sizeof *g_held.seg);
    g_held.h = calloc(reps, sizeof *g_held.h);
    if (!g_t || !g_held.seg || !g_held.h) {
        fprintf(stderr, "tessera-costs: out of host memory\n");
        return 1;
    }
    measured m;
    memset(&m, 0, sizeof m);
    for (int k = 0; k < 2; k++) {
        measure_segments(&m, reps, k, sizes[k]);
        measure_handles(&m, reps, k, sizes[k], dev);
    }
    measure_fixed(&m, reps, range);
    held_release(&g_held);
    drv.cuDevicePrimaryCtxRelease_v2(dev);

    /* opened only now: a measurement that fails leaves no file behind */
    FILE *out = stdout;
    if (out_path && !(out = fopen(out_path, "w"))) {
        fprintf(stderr, "tessera-costs: %s: %s\n", out_path, strerror(errno));
        return 1;
    }

    fprintf(out, "# tessera driver-call costs (tessera-replay --driver-costs), by tessera-costs\n"
                 "# device %d: %s, %zu MiB, driver %d.%d, granularity %zu KiB\n"
                 "# medians of %zu calls per size, microseconds; sizes %zu and %zu MiB; the\n"
                 "# address range is %zu MiB (9/8 of the device, as expandable segments reserve)\n"
                 "# CALL  US_PER_CALL  US_PER_MIB\n",
            ordinal, name, total / MIB, version / 1000, version % 1000 / 10, gran >> 10, reps,
            sizes[0] / MIB, sizes[1] / MIB, range / MIB);
    const double dmib = (double)(sizes[1] - sizes[0]) / (double)MIB;
    for (int call = 0; call < TS_CALL_COUNT; call++) {
        double a = m.us[call][0], b = m.us[call][1];
        double per_mib = b > a ? (b - a) / dmib : 0.0;
        double per_call = a - per_mib * (double)sizes[0] / (double)MIB;
        if (per_call < 0)
            per_call = 0;
        fprintf(out, "# %s: %.3f us at %zu MiB, %.3f us at %zu MiB\n",
                ts_driver_call_name((ts_driver_call)call), a, sizes[0] / MIB, b, sizes[1] / MIB);
        fprintf(out, "%s %.3f %.6f\n", ts_driver_call_name((ts_driver_call)call), per_call,
                per_mib);
    }
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "tessera-costs: %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    free(g_t);
    free(g_held.seg);
    free(g_held.h);
    return 0;
}
