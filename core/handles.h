/* The physical handles mapped in a virtual-memory segment (expandable or stitched): finding the
 * mapping at an address, runs of whole pages and of whole handles, and giving them back. */
#ifndef TS_HANDLES_H
#define TS_HANDLES_H

#include "core/internal.h"

/* The mapping of seg that holds the byte at addr, or the last one below it (NULL: none). */
ts_handle_rec *segment_handle_at(const ts_segment *seg, uintptr_t addr);
/* The whole pages of [lo, hi) in seg (pages count from the segment's start: a page need not be
 * a power of two): [*run_lo, *run_hi), or false when there is none. */
bool segment_whole_pages(const ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                         uintptr_t *run_hi);
/* The run of whole handles inside [lo, hi): [*run_lo, *run_hi), or false when there is none. */
bool segment_whole_handles(ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                           uintptr_t *run_hi);
/* Give back the handles in [lo, hi), which are whole. unmap_only: they are aliases (a stitched
 * segment's), owned elsewhere. The caller synchronised the device. */
void segment_unmap_handles(ts_allocator *a, ts_segment *seg, uintptr_t lo, uintptr_t hi,
                           bool unmap_only);

/* Grant the backend's peer devices access to every handle mapped in seg (vm_access). Returns
 * TS_OK, or the first failure (the other handles are still tried). */
int segment_grant_handles(ts_allocator *a, ts_segment *seg);

#endif /* TS_HANDLES_H */
