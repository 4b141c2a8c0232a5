/* Expandable segments (expandable.c). */
#ifndef TS_EXPANDABLE_H
#define TS_EXPANDABLE_H

#include "core/internal.h"

/* A FREE block of at least size bytes on stream from p's expandable segments (mapping pages at
 * the end of one, or a new reservation), out of every tree; NULL when the device has no room. */
ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
/* Map bytes (whole pages) more of p's expandable segments on stream, as free memory in the free
 * tree, for a stitch that lacks them: in the lowest unmapped block that holds them. false when
 * the device has no room, or no segment on stream (nothing changed). */
bool expandable_grow_free(ts_allocator *a, ts_pool *p, size_t bytes, uint64_t stream);
/* The page of p's expandable segments: the unit a growth maps. */
size_t expandable_page_of(const ts_allocator *a, const ts_pool *p);
/* Give back whole handles at the end of free block b, at least bytes of them when it holds as
 * many (device synchronised); the rest of b stays mapped and free. Returns the bytes given back. */
size_t expandable_unmap_free_end(ts_allocator *a, ts_block *b, size_t bytes);
/* PyTorch's unmap_block: give back every whole handle inside free block b (device synchronised). */
void expandable_unmap_free_block(ts_allocator *a, ts_block *b);
/* A repeated step at the edge: every expandable segment whose free top (the free and unmapped
 * blocks that end it) holds a hole gives back every whole handle of that top (the device
 * synchronised once), so the next step grows from the layout the first one grew from. Runs when
 * a free flagged one (holed_tops), before the next request is placed; not during a capture. */
void expandable_drop_holed_tops(ts_allocator *a);
/* A segment that is one unmapped block gives its reservation back. */
void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg);
/* Tear a segment down (allocator destroy); release_memory: give its memory to the backend. */
void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory);

#endif /* TS_EXPANDABLE_H */
