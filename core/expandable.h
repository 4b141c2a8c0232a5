/* Expandable segments (expandable.c). */
#ifndef TS_EXPANDABLE_H
#define TS_EXPANDABLE_H

#include "core/internal.h"

ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
void expandable_unmap_free_block(ts_allocator *a, ts_block *b);
void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg);
void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory);

#endif /* TS_EXPANDABLE_H */
