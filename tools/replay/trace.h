/* Allocation traces for tessera-replay: RMM CSV logs and PyTorch snapshots.
 *
 * A trace is a sequence of allocate/free events over dense slot numbers (one per allocation), so
 * the replay never depends on the addresses the recording process saw. Frees of addresses the
 * trace never allocated (a ring buffer that started late) are skipped and counted.
 *
 * A request that failed in the recorded run (an RMM "allocate failure" row, a snapshot's "oom"
 * event) is a TRACE_FAILED event: replayed like an allocation, so that each configuration says
 * whether it would have served it. Such a request has no address and so no free in the trace: a
 * configuration that serves it holds it to the end. What the run ran on (device total, the
 * allocator's cap, its configuration) comes with the trace when the recorder wrote it down.
 */
#ifndef TS_REPLAY_TRACE_H
#define TS_REPLAY_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum trace_kind {
    TRACE_ALLOC = 0,
    TRACE_FREE = 1,
    TRACE_FAILED = 2 /* a request the recorded run could not serve */
} trace_kind;

typedef struct trace_event {
    uint32_t kind; /* trace_kind */
    uint32_t slot; /* allocation number */
    uint64_t size; /* requested bytes (allocations) */
    uint64_t stream;
} trace_event;

typedef struct trace {
    trace_event *ev;
    size_t n, cap;
    size_t nslots;
    size_t allocations, frees;
    size_t skipped_frees;       /* frees of addresses never allocated in the trace */
    size_t run_failures;        /* TRACE_FAILED events: requests the recorded run failed */
    size_t never_freed;         /* allocations still live at the end */
    /* A snapshot's blocks in use that its history never allocated (it began late): they are
     * not replayed, and the replay says so. */
    size_t preexisting_blocks;
    uint64_t preexisting_bytes;
    /* What the recorded run ran on, when the trace says (TESSERA_TRACE's Note column, a
     * snapshot's 'tessera' entry): at its first failed request, else at its start. */
    bool has_capacity;
    uint64_t run_device_total;  /* bytes the device had */
    uint64_t run_limit;         /* the allocator's cap (memory_limit, memory fraction); 0: none */
    char run_conf[2048];        /* its configuration (TESSERA_ALLOC_CONF syntax), "" unknown */
    char source[256];
    /* trace_repeat: the event count at the end of each step (nsteps of them), else NULL. */
    size_t *step_ends;
    size_t nsteps;
} trace;

/* --- snapshot dumps (scripts/snapshot2trace --format dump) ---------------------------------- */

typedef struct snap_block {
    uint64_t addr, size, requested;
    int state; /* 0 inactive, 1 active_allocated, 2 active_pending_free */
} snap_block;

typedef struct snap_segment {
    uint64_t addr, size, stream;
    bool small, expandable;
    size_t first_block, nblocks; /* into snapshot.blocks */
} snap_segment;

typedef enum snap_action {
    SNAP_ALLOC, SNAP_FREE_REQUESTED, SNAP_FREE_COMPLETED, SNAP_SEGMENT_ALLOC, SNAP_SEGMENT_FREE,
    SNAP_SEGMENT_MAP, SNAP_SEGMENT_UNMAP, SNAP_OOM, SNAP_SNAPSHOT, SNAP_OTHER
} snap_action;

typedef struct snap_event {
    uint32_t action; /* snap_action */
    uint64_t addr, size, stream;
} snap_event;

typedef struct snapshot {
    bool has_capacity;      /* a 'capacity' line: what the run ran on */
    uint64_t device_total, limit;
    char conf[2048];        /* a 'conf' line: the run's configuration */
    int64_t max_split_size; /* -1: unlimited */
    double gc_threshold;
    bool expandable_segments;
    uint32_t divisions[16];
    snap_segment *segs;
    size_t nsegs, segs_cap;
    snap_block *blocks;
    size_t nblocks, blocks_cap;
    snap_event *ev;
    size_t nev, ev_cap;
    char source[256];
} snapshot;

/* Load a trace from a CSV log, a snapshot dump or a .pickle snapshot. Returns 0, or -1 after
 * printing one clear error line (with the line number for malformed input). */
int trace_load(trace *t, const char *path);
void trace_free(trace *t);

/* Make t n consecutive steps of itself (n >= 1): an allocation the trace never frees is made
 * once, in the first step (it persists: parameters, optimiser state); every other allocation and
 * free recurs in each step, with slots of its own. Frees of blocks from before the trace were
 * already dropped at load. Fills step_ends. 0, or -1 (host memory: t unchanged). */
int trace_repeat(trace *t, size_t n);

/* Load a snapshot (.pickle through the converter, or a dump file). */
int snapshot_load(snapshot *s, const char *path);
void snapshot_free(snapshot *s);

/* Is path a pickle (by content)? */
bool path_is_pickle(const char *path);

#endif /* TS_REPLAY_TRACE_H */
