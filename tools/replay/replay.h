/* tessera-replay's engine: a trace through the core over the device model. */
#ifndef TS_REPLAY_H
#define TS_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "devmodel/costs.h"
#include "tools/replay/search.h"
#include "tools/replay/trace.h"

typedef struct replay_result {
    size_t peak_allocated;  /* allocated_bytes.all.peak */
    size_t peak_reserved;   /* reserved_bytes.all.peak */
    size_t peak_requested;  /* requested_bytes.all.peak */
    double utilization;     /* peak_allocated / peak_reserved */
    uint64_t num_device_alloc, num_device_free;
    uint64_t num_alloc_retries, num_ooms, num_stitches;
    uint64_t vm_maps, vm_unmaps, vm_creates;
    uint64_t device_calls;  /* every backend call that reaches the driver: segment alloc/free,
                             * reserve/release, create/destroy, map/unmap, synchronise */
    size_t failed_allocs;   /* allocations that got out of memory (the run's failed requests
                             * included, when they fail again) */
    size_t first_failed;    /* the first of them: its allocation number (1-based), 0 if none */
    uint64_t first_failed_size; /* and its requested bytes */
    /* The requests the recorded run failed (trace.h: TRACE_FAILED), replayed here. */
    size_t run_failures;        /* how many there were */
    size_t run_failures_served; /* how many of them this configuration served */
    size_t run_first_failed;    /* the first one: its allocation number (1-based), 0 if none */
    uint64_t run_first_size;    /* its requested bytes */
    bool run_first_served;      /* served here */
    bool run_first_bounded;     /* the replay had a device size or a cap (else no spare) */
    uint64_t run_first_spare;   /* if served and bounded: the capacity left right after it (the
                                 * device, or the cap when smaller, less
                                 * reserved_bytes.all.current) */
    size_t ops;             /* allocations plus frees replayed */
    double ns_per_op;       /* host time per replayed operation */
    /* Estimated driver time (devmodel/costs.h). Growth: up to the end of the event that last
     * raised the peak of device memory in use (growth_events events); after it, the rest. */
    double driver_ns, driver_ns_growth;
    size_t growth_events;
    /* With replay_opts.steps: driver time per step over the whole steps after growth ended
     * (steady_steps of them); -1 when growth ended in the last step. */
    double driver_ns_per_step;
    size_t steady_steps;
    uint64_t device_calls_growth; /* driver calls up to the end of growth */
    double device_calls_per_step; /* with steps: per step after growth (as driver_ns_per_step) */
    /* With replay_opts.steps (2 or more): driver calls and time in the last step alone, the
     * steady state once whatever happens once (growth) is over; time -1
     * otherwise. */
    uint64_t device_calls_last_step;
    double driver_ns_last_step;
    double ns_per_op_tail;      /* host time per operation over the last tail_steps steps, */
    size_t tail_steps;          /* the last quarter of them (at least one) */
    replay_min_check min_check; /* with --min-capacity: how its answer was checked */
} replay_result;

typedef struct replay_opts {
    const ts_driver_costs *costs; /* NULL: the defaults */
    size_t steps;                 /* 0: unknown; else the trace is this many steps of equal
                                   * event counts (a training loop) */
} replay_opts;

/* Replay t from an empty device of capacity bytes (0: effectively unlimited) under cfg (whose
 * cap, memory_limit or memory fraction, applies as in a live run). o may be NULL.
 * Returns 0, or -1 when the core could not be created (host memory). */
int replay_run(const trace *t, const ts_config *cfg, size_t capacity, const replay_opts *o,
               replay_result *r);

/* Smallest capacity (a multiple of 2 MiB) on which t runs without an out-of-memory error, between
 * the program's peak and the peak reserved of an unlimited run: replay_min_search, checked
 * rather than assumed monotone. chk (may be NULL) says what was checked (checked_to in
 * bytes). */
size_t replay_min_capacity(const trace *t, const ts_config *cfg, const replay_result *unlimited,
                           replay_min_check *chk);

/* The PyTorch fidelity check of a snapshot (see check.c). Prints the summary line; returns 0
 * only when every allocation and segment matched. */
int replay_check_pytorch(const char *path, bool verbose);

#endif /* TS_REPLAY_H */
