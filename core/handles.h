/* The physical handles mapped in a virtual-memory segment (expandable or stitched): finding runs
 * of whole handles and giving them back. */
#ifndef TS_HANDLES_H
#define TS_HANDLES_H

#include "core/internal.h"

bool segment_whole_handles(ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                           uintptr_t *run_hi);
void segment_unmap_handles(ts_allocator *a, ts_segment *seg, uintptr_t lo, uintptr_t hi,
                           bool unmap_only);

#endif /* TS_HANDLES_H */
