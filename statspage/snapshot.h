/* PyTorch memory snapshots (the pickle torch.cuda.memory._snapshot() returns and
 * torch.cuda.memory._dump_snapshot() writes), built from tessera's own state.
 *
 * A ts_snap is filled from either source, then written by ts_snap_write_pickle:
 *  - another process: the segment map of its stats page slots and its history rings
 *    (tessera-stat snapshot, tools/stat/snapshot.c, statspage/snapshot_page.c);
 *  - this process: its allocator, walked under the mutex, and its own ring (the shim's
 *    snapshot_on_oom, statspage/snapshot_own.c).
 *
 * Layout written (the keys PyTorch's own snapshots carry, in its spelling):
 *   {'segments': [{'device', 'address', 'total_size', 'allocated_size', 'active_size',
 *                  'requested_size', 'stream', 'segment_type': 'small'|'large',
 *                  'segment_pool_id': (0, 0), 'is_expandable', 'frames': [],
 *                  'blocks': [{'address', 'size', 'requested_size',
 *                              'state': 'active_allocated'|'active_pending_free'|'inactive',
 *                              'frames': []}]}],
 *    'device_traces': [[{'action', 'addr', 'size', 'stream', 'time_us', 'frames'}], ...],
 *    'allocator_settings': {...}, 'tessera': {'source', 'consistency', ...}}
 */
#ifndef TS_SNAPSHOT_H
#define TS_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tessera/history.h"
#include "tessera/stats_page.h"

typedef struct ts_snap_block {
    uint64_t addr, size, requested;
    uint32_t state; /* TESSERA_BLOCK_ALLOCATED, _PENDING or _FREE */
} ts_snap_block;

typedef struct ts_snap_segment {
    int device;
    uint64_t addr, size, stream;
    bool small_pool, expandable;
    size_t first_block, nblocks; /* into ts_snap.blocks */
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

typedef struct ts_snap {
    ts_snap_segment *segs;
    size_t nsegs, cap_segs;
    ts_snap_block *blocks;
    size_t nblocks, cap_blocks;
    ts_snap_trace traces[TESSERA_PAGE_MAX_SLOT_COUNT];
    size_t ntraces;
    ts_snap_mapping *maps;
    size_t nmaps;
    bool have_settings;
    int64_t max_split_size; /* -1: unlimited */
    double garbage_collection_threshold;
    bool expandable_segments;
    char source[64];        /* "tessera-stat", "snapshot_on_oom" */
    char consistency[320];  /* how current the block layout is, in words */
    int pid;
} ts_snap;

void ts_snap_init(ts_snap *s);
void ts_snap_free(ts_snap *s);

/* Append a segment (device, address, size, stream, pool, expandable), then its blocks in
 * address order. Unmapped and lent pieces are left out by the callers (not device memory the
 * segment's owner holds). 0, or ENOMEM. */
int ts_snap_add_segment(ts_snap *s, int device, uint64_t addr, uint64_t size, uint64_t stream,
                        bool small_pool, bool expandable);
int ts_snap_add_block(ts_snap *s, uint64_t addr, uint64_t size, uint64_t requested,
                      uint32_t state);

/* Take over a copy of events (oldest first) as the trace of device. */
int ts_snap_add_trace(ts_snap *s, int device, tessera_history_event *events, size_t n);

/* Load /proc/<pid>/maps (pid 0: self) to name native frames. Failure leaves frames unnamed. */
void ts_snap_load_mappings(ts_snap *s, int pid);

/* Write the pickle to fd. 0, or an errno value. */
int ts_snap_write_pickle(const ts_snap *s, int fd);

/* Write to path through path.tmp and a rename, mode 0600 (a snapshot shows the program's memory
 * and code paths). replace: an existing regular file is replaced, anything else there (a device,
 * a FIFO, a symbolic link, a directory) refused, and the file synced (a tool's output). Not
 * replace (snapshot_on_oom): the file must not exist, and it is not synced, so a failing
 * allocation never waits for the disk. Nothing is ever followed through a symbolic link. 0, or
 * an errno value with a reason in err. */
int ts_snap_write_file(const ts_snap *s, const char *path, bool replace, char *err,
                       size_t errlen);

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
