/* Driver time for the device model: what each CUDA call a backend operation stands for would
 * cost on a real device, so that replays compare policies in estimated time, not in calls.
 *
 * A cost is a latency per call plus a latency per MiB the call covers. The defaults are
 * published figures (see costs.c); a costs file overrides any of them:
 *
 *     # comment (to the end of the line)
 *     CALL  MICROSECONDS_PER_CALL  [MICROSECONDS_PER_MIB]
 *
 * CALL is one of the names below, once per file; numbers are plain decimals (digits with an
 * optional fraction, at most 1e9). Calls the file does not name keep their defaults.
 */
#ifndef TS_DEVMODEL_COSTS_H
#define TS_DEVMODEL_COSTS_H

#include <stddef.h>

/* The CUDA calls a backend operation stands for (shim/backend_cuda.c makes exactly these). */
typedef enum ts_driver_call {
    TS_CALL_MALLOC = 0,      /* cudaMalloc: a plain segment (seg_alloc) */
    TS_CALL_FREE,            /* cudaFree (seg_free) */
    TS_CALL_ADDRESS_RESERVE, /* cuMemAddressReserve (vm_reserve) */
    TS_CALL_ADDRESS_FREE,    /* cuMemAddressFree (vm_release) */
    TS_CALL_CREATE,          /* cuMemCreate: one physical handle (vm_create) */
    TS_CALL_RELEASE,         /* cuMemRelease (vm_destroy) */
    TS_CALL_MAP,             /* cuMemMap (vm_map, with the next one) */
    TS_CALL_SET_ACCESS,      /* cuMemSetAccess (vm_map) */
    TS_CALL_UNMAP,           /* cuMemUnmap: charged once per mapping it removes (vm_unmap) */
    TS_CALL_SYNCHRONIZE,     /* cuCtxSynchronize (synchronize) */
    TS_CALL_EVENT_RECORD,    /* cuEventRecord (a fence, an order point that asks the device) */
    TS_CALL_COUNT
} ts_driver_call;

typedef struct ts_driver_cost {
    double call_ns; /* per call */
    double mib_ns;  /* per MiB the call covers */
} ts_driver_cost;

typedef struct ts_driver_costs {
    ts_driver_cost call[TS_CALL_COUNT];
} ts_driver_costs;

/* The name a costs file uses for a call ("cuMemCreate"). */
const char *ts_driver_call_name(ts_driver_call call);

void ts_driver_costs_defaults(ts_driver_costs *c);

/* Estimated nanoseconds of one call covering bytes. */
double ts_driver_cost_ns(const ts_driver_costs *c, ts_driver_call call, size_t bytes);

/* Apply a costs file's text (len bytes) over c. Returns 0, or -1 with one line in err naming
 * the line number and what is wrong; c is unchanged then. */
int ts_driver_costs_parse(ts_driver_costs *c, const char *text, size_t len, char *err,
                          size_t errlen);

/* Read and apply a costs file: a regular file of at most 64 KiB. Same result as parse; err
 * starts with the path. */
int ts_driver_costs_load(ts_driver_costs *c, const char *path, char *err, size_t errlen);

#endif /* TS_DEVMODEL_COSTS_H */
