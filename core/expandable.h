/* Expandable segments (expandable.c). */
#ifndef TS_EXPANDABLE_H
#define TS_EXPANDABLE_H

#include "core/internal.h"

/* A FREE block of at least size bytes on stream from p's expandable segments (mapping pages at
 * the end of one, or a new reservation), out of every tree; NULL when the device has no room. */
ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
/* PyTorch's unmap_block: give back every whole handle inside free block b (device synchronised). */
void expandable_unmap_free_block(ts_allocator *a, ts_block *b);
/* A segment that is one unmapped block gives its reservation back. */
void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg);
/* Tear a segment down (allocator destroy); release_memory: give its memory to the backend. */
void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory);

#endif /* TS_EXPANDABLE_H */
