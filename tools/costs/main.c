/* tessera-costs: measure, on this machine's GPU, the latency of every driver call tessera's CUDA
 * backend makes, over the range sizes it makes them, and write a costs file for
 * `tessera-replay --driver-costs FILE` (format: devmodel/costs.h).
 *
 *   tessera-costs [--device N] [--reps N] [--max-size SIZE] [-o FILE]
 *
 * Each call is timed one by one (CLOCK_MONOTONIC around the call) and its median kept, at every
 * size from 2 MiB to 1 GiB (2, 4, 8, 16, 20, 32, ... MiB: 20 MiB is PyTorch's expandable page):
 * cuMemAlloc/cuMemFree of a segment of that size (what cudaMalloc/cudaFree cost tessera: its
 * backend calls the driver), cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease of one handle of that
 * size, cuMemSetAccess of one handle of that size, and cuMemSetAccess over a range of that size
 * made of 2 MiB handles mapped back to back (written as a comment). Each becomes a measured point
 * of the file. A grant over several handles costs about one grant per handle (an H100: 512
 * handles of 2 MiB, 16.5 ms; one of 2 MiB, 33 us), so the replay prices it that way and the
 * range measurement checks it on each GPU: one call over many handles saves nothing there. cuMemAddressReserve
 * and cuMemAddressFree of an expandable segment's range (9/8 of the device), cuCtxSynchronize on
 * an idle device and cuEventRecord are one figure each. The driver is reached with
 * dlopen("libcuda.so.1") like any CUDA program; nothing of tessera is loaded. Memory: at a size,
 * as many handles as fit in half the free memory, up to --reps; a size where fewer than 3 fit is
 * left out. Every call is undone before exit, on errors too.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
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

/* The sizes measured, in MiB, up to --max-size: tessera's 2 MiB page, PyTorch's 20 MiB, and
 * powers of two up to 1 GiB. */
static const size_t size_mib[] = {2, 4, 8, 16, 20, 32, 64, 128, 256, 512, 1024};
#define NSIZES (sizeof size_mib / sizeof size_mib[0])

/* Medians per call (microseconds) at each size; 0: not measured there (too large). */
typedef struct measured {
    double us[TS_CALL_COUNT][NSIZES];
    double access_pages[NSIZES]; /* cuMemSetAccess over 2 MiB handles (a comment: the check
                                  * that a grant costs one per handle it covers) */
    double fixed[TS_CALL_COUNT]; /* calls whose cost does not depend on a range */
} measured;

/* Everything a measurement holds, so that a failure can undo it: segments, handles of one size
 * (the first nmapped of them mapped back to back from va), an address range, an event. */
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

static void measure_segments(measured *m, size_t reps, size_t k, size_t size)
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

static CUmemAccessDesc rw_access(CUdevice dev)
{
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = pinned_prop(dev).location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return access;
}

/* reps handles of size bytes in a range of their own: create, map, grant (one handle at a
 * time), unmap, release. */
static void measure_handles(measured *m, size_t reps, size_t k, size_t size, CUdevice dev)
{
    held *h = &g_held;
    const CUmemAllocationProp prop = pinned_prop(dev);
    const CUmemAccessDesc access = rw_access(dev);
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

/* One grant over a range of size bytes made of page-sized handles mapped back to back, as
 * tessera's backend grants a growth: reps times, the handles mapped afresh each time (a grant
 * on a range already granted may be cheaper than tessera's first one). */
static void measure_ranges(measured *m, size_t reps, size_t k, size_t size, size_t page,
                           CUdevice dev)
{
    held *h = &g_held;
    const CUmemAllocationProp prop = pinned_prop(dev);
    const CUmemAccessDesc access = rw_access(dev);
    const size_t n = size / page;
    CUresult r = drv.cuMemAddressReserve(&h->va, size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        fail("cuMemAddressReserve", size, r);
    h->va_size = size;
    h->size = page;
    for (size_t i = 0; i < n; i++) {
        if ((r = drv.cuMemCreate(&h->h[i], page, &prop, 0)) != CUDA_SUCCESS)
            fail("cuMemCreate", page, r);
        h->nh++;
    }
    for (size_t rep = 0; rep < reps; rep++) {
        for (size_t i = 0; i < n; i++) {
            if ((r = drv.cuMemMap(h->va + i * page, page, 0, h->h[i], 0)) != CUDA_SUCCESS)
                fail("cuMemMap", page, r);
            h->nmapped++;
        }
        TIMED(g_t[rep], "cuMemSetAccess", size, drv.cuMemSetAccess(h->va, size, &access, 1));
        drv.cuCtxSynchronize();
        for (size_t i = n; i-- > 0;) {
            h->nmapped--;
            if ((r = drv.cuMemUnmap(h->va + i * page, page)) != CUDA_SUCCESS)
                fail("cuMemUnmap", page, r);
        }
    }
    m->access_pages[k] = median(g_t, reps);
    held_release(h);
}

/* Calls whose cost does not depend on a range. */
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
    m->fixed[TS_CALL_ADDRESS_RESERVE] = median(g_t, reps);
    m->fixed[TS_CALL_ADDRESS_FREE] = median(t2, reps);
    for (size_t i = 0; i < reps; i++)
        TIMED(g_t[i], "cuCtxSynchronize", 0, drv.cuCtxSynchronize());
    m->fixed[TS_CALL_SYNCHRONIZE] = median(g_t, reps);
    CUresult r = drv.cuEventCreate(&h->ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS)
        fail("cuEventCreate", 0, r);
    for (size_t i = 0; i < reps; i++)
        TIMED(g_t[i], "cuEventRecord", 0, drv.cuEventRecord(h->ev, NULL));
    m->fixed[TS_CALL_EVENT_RECORD] = median(g_t, reps);
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
    fprintf(f, "usage: tessera-costs [--device N] [--reps N] [--max-size SIZE] [-o FILE]\n"
               "       tessera-costs --help | --version\n"
               "  Times every driver call tessera's CUDA backend makes, over range sizes from\n"
               "  2 MiB to 1 GiB, and writes the costs file tessera-replay --driver-costs reads.\n"
               "  --device N       the GPU to measure (default 0)\n"
               "  --reps N         calls timed per call and size, %d to %d (default 32; fewer\n"
               "                   at a size where the device cannot hold N handles of it)\n"
               "  --max-size SIZE  the largest size measured, 2M to 1G (default 1G)\n"
               "  -o FILE          write the file there (default: standard output)\n",
            REPS_MIN, REPS_MAX);
}

/* --max-size: digits with M or G, from 2M to 1G. Returns MiB, or 0 when it is not one. */
static size_t parse_mib(const char *s)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s < '0' || *s > '9' || v > 1024)
        return 0;
    if (strcmp(end, "G") == 0)
        v *= 1024;
    else if (strcmp(end, "M") != 0)
        return 0;
    return v >= 2 && v <= 1024 ? (size_t)v : 0;
}

/* One line of the file: the call's points at every size measured, or its one figure. */
static void write_call(FILE *out, const measured *m, ts_driver_call call, const size_t *sizes,
                       size_t nsizes)
{
    const char *name = ts_driver_call_name(call);
    const bool by_range = call != TS_CALL_ADDRESS_RESERVE && call != TS_CALL_ADDRESS_FREE &&
                          call != TS_CALL_SYNCHRONIZE && call != TS_CALL_EVENT_RECORD;
    if (!by_range) {
        fprintf(out, "%s %.3f\n", name, m->fixed[call]);
        return;
    }
    fprintf(out, "%s", name);
    for (size_t k = 0; k < nsizes; k++)
        fprintf(out, " %zuM:%.3f", sizes[k] / MIB, m->us[call][k]);
    fprintf(out, "\n");
}

int main(int argc, char **argv)
{
    int ordinal = 0;
    long reps_opt = 32;
    size_t max_mib = 1024;
    const char *out_path = NULL;
    static const struct option opts[] = {{"device", required_argument, NULL, 'd'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"max-size", required_argument, NULL, 'm'},
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
        case 'm':
            if ((max_mib = parse_mib(optarg)) == 0) {
                fprintf(stderr, "tessera-costs: --max-size: '%s' is not a size from 2M to 1G\n",
                        optarg);
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

    /* tessera's sizes in whole granules, up to --max-size; at each, as many calls as fit in half
     * the free memory, up to --reps; a size where fewer than REPS_MIN fit is left out */
    const size_t page = (2 * MIB + gran - 1) / gran * gran;
    size_t sizes[NSIZES], reps[NSIZES], nsizes = 0, most_handles = 0;
    for (size_t k = 0; k < NSIZES && size_mib[k] <= max_mib; k++) {
        const size_t size = (size_mib[k] * MIB + gran - 1) / gran * gran;
        size_t n = (size_t)reps_opt;
        if (n * size > free_b / 2)
            n = free_b / 2 / size;
        if (n < REPS_MIN)
            break;
        sizes[nsizes] = size;
        reps[nsizes++] = n;
        if (n > most_handles)
            most_handles = n;
        if (size / page > most_handles)
            most_handles = size / page;
    }
    if (nsizes == 0) {
        fprintf(stderr, "tessera-costs: device %d has %zu MiB free: %d handles of %zu MiB need "
                        "twice that; free the device first\n",
                ordinal, free_b / MIB, REPS_MIN, page / MIB);
        return 1;
    }
    const size_t range = (total + total / 8 + page - 1) / page * page;

    g_t = calloc(2 * (size_t)reps_opt, sizeof *g_t);
    g_held.seg = calloc((size_t)reps_opt, sizeof *g_held.seg);
    g_held.h = calloc(most_handles, sizeof *g_held.h);
    if (!g_t || !g_held.seg || !g_held.h) {
        fprintf(stderr, "tessera-costs: out of host memory\n");
        return 1;
    }
    measured m;
    memset(&m, 0, sizeof m);
    for (size_t k = 0; k < nsizes; k++) {
        measure_segments(&m, reps[k], k, sizes[k]);
        measure_handles(&m, reps[k], k, sizes[k], dev);
        measure_ranges(&m, reps[k], k, sizes[k], page, dev);
    }
    measure_fixed(&m, (size_t)reps_opt, range);
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
                 "# medians of up to %ld calls per size (%zu at %zu MiB), microseconds, from %zu to "
                 "%zu MiB;\n"
                 "# cuMemSetAccess: a grant over one handle of the size (tessera-replay prices a\n"
                 "# grant over several as one per handle; the grants over ranges of %zu MiB handles\n"
                 "# below check it); the address range is %zu MiB (9/8 of the device, as\n"
                 "# expandable segments reserve)\n"
                 "# CALL  SIZE:US ...        measured points\n"
                 "# CALL  US_PER_CALL        a call whose cost does not depend on a range\n",
            ordinal, name, total / MIB, version / 1000, version % 1000 / 10, gran >> 10,
            reps_opt, reps[nsizes - 1], sizes[nsizes - 1] / MIB, sizes[0] / MIB,
            sizes[nsizes - 1] / MIB, page / MIB, range / MIB);
    fprintf(out, "# cuMemSetAccess over a range of %zu MiB handles of each size:", page / MIB);
    for (size_t k = 0; k < nsizes; k++)
        fprintf(out, " %zuM:%.3f", sizes[k] / MIB, m.access_pages[k]);
    fprintf(out, "\n");
    for (int call = 0; call < TS_CALL_COUNT; call++)
        write_call(out, &m, (ts_driver_call)call, sizes, nsizes);
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "tessera-costs: %s: %s\n", out_path, strerror(errno));
        return 1;
    }
    free(g_t);
    free(g_held.seg);
    free(g_held.h);
    return 0;
}
