/* Driver time for the device model: what each CUDA call a backend operation stands for would
 * cost on a real device, so that replays compare policies in estimated time, not in calls.
 *
 * A call is priced in one of two forms:
 *  - measured points: one call over SIZE bytes took US microseconds, at a few sizes. Between two
 *    measured sizes the cost is interpolated; below the smallest it is the smallest's (a call
 *    has its floor); beyond the largest the range is priced as if it were cut into pieces of the
 *    largest size, so the model never rewards batching that was not measured to pay;
 *  - a line: microseconds per call plus microseconds per MiB the call covers (for calls whose
 *    cost does not depend on a range: reserving address space, a synchronise, an event).
 * cuMemSetAccess is priced per handle: a grant over several mappings costs what one grant over
 * each would (devmodel.c, dm_charge_grant), as a GPU measured it.
 * Three tables are built in, each a costs file of tests/data/driver-costs/ compiled in at build
 * time: "h100", the latencies tessera-costs measured on an NVIDIA H100 from 2 MiB to 1 GiB (the
 * default), "h200", those measured on an NVIDIA H200 at 2 and 20 MiB, and "a100", the
 * published A100 figures earlier releases used. A costs file overrides any call:
 *
 *     # comment (to the end of the line)
 *     CALL  SIZE:MICROSECONDS  [SIZE:MICROSECONDS ...]      measured points
 *     CALL  MICROSECONDS_PER_CALL  [MICROSECONDS_PER_MIB]   a line
 *
 * CALL is one of the names below, once per file; numbers are plain decimals (digits with an
 * optional fraction, at most 1e9); a SIZE is digits with an optional K, M or G (binary), from
 * 1 KiB to 1 TiB, at most 16 points a call, each size once. Calls the file does not name keep
 * the values they had.
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
    TS_CALL_MAP,             /* cuMemMap: one per handle (vm_map) */
    TS_CALL_SET_ACCESS,      /* cuMemSetAccess: one per vm_map call, over all it mapped; and
                              * vm_access */
    TS_CALL_UNMAP,           /* cuMemUnmap: charged once per mapping it removes (vm_unmap) */
    TS_CALL_SYNCHRONIZE,     /* cuCtxSynchronize (synchronize) */
    TS_CALL_EVENT_RECORD,    /* cuEventRecord (a fence, an order point that asks the device) */
    TS_CALL_COUNT
} ts_driver_call;

#define TS_COST_POINTS_MAX 16

typedef struct ts_driver_cost {
    /* The line form, used when npoints is 0. */
    double call_ns; /* per call */
    double mib_ns;  /* per MiB the call covers */
    /* The measured form: one call over point_bytes[i] bytes took point_ns[i], sizes strictly
     * increasing. */
    unsigned npoints;
    size_t point_bytes[TS_COST_POINTS_MAX];
    double point_ns[TS_COST_POINTS_MAX];
} ts_driver_cost;

typedef struct ts_driver_costs {
    ts_driver_cost call[TS_CALL_COUNT];
} ts_driver_costs;

/* The name a costs file uses for a call ("cuMemCreate"). */
const char *ts_driver_call_name(ts_driver_call call);

/* The default table: the H100's measured latencies. */
void ts_driver_costs_defaults(ts_driver_costs *c);

/* A built-in table by name ("h100", "h200", "a100"): 0, or -1 when there is none of that name. */
int ts_driver_costs_builtin(ts_driver_costs *c, const char *name);

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
