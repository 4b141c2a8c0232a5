/* PyTorch memory snapshots (the pickle torch.cuda.memory._snapshot() returns and
 * torch.cuda.memory._dump_snapshot() writes), built from tessera's own state.
 *
 * A ts_snap is filled from either source, then written by ts_snap_write_pickle:
 *  - another process: the segment map of its stats page slots and its history rings
 *    (tessera-stat snapshot, tools/stat/snapshot.c, statspage/snapshot_page.c);
 *  - this process: its allocator, walked under the mutex, and its own ring (the shim's
 *    snapshot_on_oom, statspage/snapshot_own.c).
 *
 * The segments are PyTorch's: one per contiguous range of device memory the allocator holds, as
 * PyTorch's snapshot() reports an expandable segment. A tessera segment with unmapped pages, or
 * with pages lent to a stitched range, becomes one snapshot segment per mapped run; a stitched
 * range is listed where it is mapped; a segment with nothing mapped is not listed. Each byte of
 * device memory is then listed once, and the blocks of every segment tile it from its address
 * (PyTorch's viewer places blocks by adding sizes from the segment's start).
 *
 * Layout written (the keys PyTorch's own snapshots carry, in its spelling):
 *   {'segments': [{'device', 'address', 'total_size', 'allocated_size', 'active_size',
 *                  'requested_size', 'stream', 'segment_type': 'small'|'large',
 *                  'segment_pool_id': (0, 0), 'is_expandable', 'frames',
 *                  'blocks': [{'address', 'size', 'requested_size',
 *                              'state': 'active_allocated'|'active_pending_free'|'inactive',
 *                              'frames'}]}],
 *    'device_traces': [[{'action', 'addr' (oom: 'device_free'), 'size', 'stream', 'time_us',
 *                        'frames'}], ...],
 *    'allocator_settings': {'PYTORCH_CUDA_ALLOC_CONF', 'max_split_size',
 *                           'garbage_collection_threshold', 'expandable_segments',
 *                           'pinned_num_register_threads', 'release_lock_on_cudamalloc',
 *                           'pinned_use_cuda_host_register',
 *                           'roundup_power2_divisions': {'1': n, ..., '32768': n}},
 *    'tessera': {'source', 'consistency', 'pid',
 *                'devices': [{'device', 'total_bytes', 'memory_limit_bytes'}]}}
 * A segment's and a block's frames are those of the history event that mapped the segment's
 * first byte (segment_alloc, segment_map) or allocated the block (alloc), when the history holds
 * it with frames (history_frames:True); else []. Trace entries' sizes are PyTorch's: what the
 * program asked for (alloc, free_requested, free_completed), the request (oom), the bytes
 * mapped (segment_*). allocator_settings is in every snapshot (PYTORCH_CUDA_ALLOC_CONF holds
 * tessera's effective configuration, in that syntax; the pinned_* and release_lock keys, which
 * tessera accepts but does not use, hold PyTorch's defaults); 'devices' says what each device
 * had, so that a replay of a run that died uses the capacity the run had (tools/replay).
 */
#ifndef TS_SNAPSHOT_H
#define TS_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/history.h"
#include "tessera/stats_page.h"

/* Where a block's or a segment's frames come from: event `index` of traces[trace] (set by
 * ts_snap_link; trace -1: none). */
typedef struct ts_snap_origin {
    int trace;
    size_t index;
} ts_snap_origin;

typedef struct ts_snap_block {
    uint64_t addr, size, requested;
    uint32_t state; /* TESSERA_BLOCK_ALLOCATED, _PENDING or _FREE */
    ts_snap_origin origin;
} ts_snap_block;

/* A snapshot segment: one contiguous mapped range; its blocks tile [addr, addr + size). */
typedef struct ts_snap_segment {
    int device;
    uint64_t addr, size, stream;
    bool small_pool, expandable;
    size_t first_block, nblocks; /* into ts_snap.blocks */
    ts_snap_origin origin;
} ts_snap_segment;

typedef struct ts_snap_trace {
    int device;
    tessera_history_event *events; /* owned (malloc'd) */
    size_t nevents;
} ts_snap_trace;

/* Where native frames point: the file mapped there, for {'name', 'filename', 'line'}. */
typedef struct ts_snap_mapping {
    uint64_t start, end, offset;
    char path[240];
} ts_snap_mapping;

/* What a device had: its total and the allocator's cap (0: none). */
typedef struct ts_snap_device {
    int device;
    uint64_t total, limit;
} ts_snap_device;

/* The allocator settings a snapshot reports (allocator_settings). */
typedef struct ts_snap_settings {
    int64_t max_split_size; /* -1: unlimited */
    double garbage_collection_threshold;
    bool expandable_segments;
    uint32_t divisions[16]; /* roundup_power2_divisions per power of two MiB, 1 .. 32768 */
} ts_snap_settings;

typedef struct ts_snap {
    ts_snap_segment *segs;
    size_t nsegs, cap_segs;
    ts_snap_block *blocks;
    size_t nblocks, cap_blocks;
    /* The tessera segment being added (ts_snap_add_segment) and whether its current mapped run
     * is open as segs[nsegs - 1]. */
    ts_snap_segment adding;
    bool have_adding, run_open;
    ts_snap_trace traces[TESSERA_PAGE_MAX_SLOT_COUNT];
    size_t ntraces;
    bool linked;            /* origins set (ts_snap_link) */
    ts_snap_mapping *maps;
    size_t nmaps;
    ts_snap_device devices[TESSERA_PAGE_MAX_SLOT_COUNT];
    size_t ndevices;
    ts_snap_settings settings; /* PyTorch's defaults until set */
    char conf[2048];        /* the effective configuration (ts_config_format), "" unknown */
    struct ts_symbols *symbols; /* set: frames get function names (a reader's snapshot, never
                                 * the allocation path's); tessera's own frames are left out
                                 * either way. Owned by whoever set it. */
    char source[64];        /* "tessera-stat", "snapshot_on_oom" */
    char consistency[320];  /* how current the block layout is, in words */
    int pid;
} ts_snap;

void ts_snap_init(ts_snap *s);
void ts_snap_free(ts_snap *s);

/* Start a tessera segment (device, stream, pool, expandable: a virtual-memory segment), then add
 * its blocks in address order, every one of them: mapped blocks (allocated, pending, free) go
 * into the snapshot segment of their run, which starts at the first of them and at any block
 * that does not follow the previous one; unmapped and lent blocks (and unknown states) end the
 * run. 0, or ENOMEM (EINVAL: a block before any segment). */
int ts_snap_add_segment(ts_snap *s, int device, uint64_t stream, bool small_pool,
                        bool expandable);
int ts_snap_add_block(ts_snap *s, uint64_t addr, uint64_t size, uint64_t requested,
                      uint32_t state);

/* Take over a copy of events (oldest first) as the trace of device. */
int ts_snap_add_trace(ts_snap *s, int device, tessera_history_event *events, size_t n);

/* Record what device had (once per device: a second call is ignored). */
void ts_snap_add_device(ts_snap *s, int device, uint64_t total, uint64_t limit);

struct ts_config;
/* Report cfg's settings, and conf (its text, as ts_config_format writes it: made printable and
 * bounded here, for it may come from a page another process wrote) as PYTORCH_CUDA_ALLOC_CONF.
 * cfg NULL: PyTorch's defaults with that text. */
void ts_snap_set_settings(ts_snap *s, const struct ts_config *cfg, const char *conf);

/* Set every segment's and active block's origin: the newest event of its device's trace that
 * mapped the segment's first byte or allocated the block. Done by ts_snap_bound and
 * ts_snap_write_pickle when not done yet; call it again after changing the traces. */
void ts_snap_link(ts_snap *s);

/* Load /proc/<pid>/maps (pid 0: self) to name native frames. Failure leaves frames unnamed. */
void ts_snap_load_mappings(ts_snap *s, int pid);

/* Write the pickle to fd (the origins as they are: ts_snap_link first). 0, or an errno value. */
int ts_snap_write_pickle(const ts_snap *s, int fd);

/* Write to path through path.tmp and a rename, mode 0600 (a snapshot shows the program's memory
 * and code paths). replace: an existing regular file is replaced, anything else there (a device,
 * a FIFO, a symbolic link, a directory) refused, and the file synced (a tool's output). Not
 * replace (snapshot_on_oom): the file must not exist, and it is not synced, so a failing
 * allocation never waits for the disk. Nothing is ever followed through a symbolic link. Links
 * the origins first when they are not. 0, or an errno value with a reason in err. */
int ts_snap_write_file(ts_snap *s, const char *path, bool replace, char *err, size_t errlen);
/* snapshot_on_oom's new file: never replacing one, not synced. When path is taken the next free
 * of path with "-2", "-3", ... "-<tries>" before its extension is used; the name written goes to
 * chosen. 0, or an errno value with a reason in err. */
int ts_snap_write_new_file(ts_snap *s, const char *path, unsigned tries, char *chosen,
                           size_t chosenlen, char *err, size_t errlen);
/* Replace path (the caller knows it wrote that file), not synced. */
int ts_snap_replace_file(ts_snap *s, const char *path, char *err, size_t errlen);
/* The same for a pickle already in memory (buf, n bytes): tessera-stat symbolize. */
int ts_snap_write_bytes_file(const void *buf, size_t n, const char *path, bool replace,
                             char *err, size_t errlen);

struct ts_history_copy;

/* Add the events of c (the slot's history ring, read after the slot's map) as the trace of the
 * slot's device, cut at the map's instant (tessera_page_map.history_written): layout and
 * history then describe one moment. *past receives how many later events were left out.
 * Returns 0 (cut), 1 (the map carries no history mark, from an older tessera: the events go in
 * uncut and may run past the layout), or a negative errno value (c untouched). On success the
 * snapshot owns c's events. */
int ts_snap_add_page_trace(ts_snap *s, const tessera_page_slot_head *head,
                           struct ts_history_copy *c, uint64_t *past);

/* Snapshots are bounded in bytes: TS_SNAP_MAX_BYTES, whatever the history holds. */
#define TS_SNAP_MAX_BYTES (64u << 20)

/* Cut the history (oldest events first, across devices) until the pickle of s is at most
 * max_bytes, by an upper estimate; the segments and blocks are kept whole. Returns the number
 * of events cut (0: it fits as it is). */
uint64_t ts_snap_bound(ts_snap *s, uint64_t max_bytes);

/* Fill s from one slot of a stats page copy (segs/blocks as ts_page_snapshot returns them). */
int ts_snap_add_page_slot(ts_snap *s, const tessera_page_slot_head *head,
                          const tessera_page_segment *segs, const tessera_page_block *blocks);

#endif /* TS_SNAPSHOT_H */
