/* Stitching: one virtual range over free pages of several expandable segments (stitch.c). */
#ifndef TS_STITCH_H
#define TS_STITCH_H

#include "core/internal.h"

/* A block of size bytes on stream mapped over whole free pages of p's expandable segments (a
 * new stitched range); NULL when there are not enough free pages or ranges. */
ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
/* The bytes of whole free pages on stream that a new range in p could take. */
size_t stitch_free_pages(ts_pool *p, uint64_t stream);
/* Retire the ranges found entirely free since the last call (pool.c queues them): their pages
 * go back to the segments they came from, as free blocks, with no driver call. Called before a
 * request is placed and after a free, so that a range never outlives the blocks it served. */
void stitch_retire_queued(ts_allocator *a);
/* Retire what is queued, then unmap every retired range (synced: the device was waited for);
 * returns how many were unmapped. */
size_t stitch_release_free(ts_allocator *a, bool synced);
/* Tear a stitched range down (allocator destroy). */
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory);
/* Tear the retired ranges down (allocator destroy, a context gone: release_memory false), and
 * forget the queue. */
void stitch_forget_retired(ts_allocator *a, bool release_memory);

#endif /* TS_STITCH_H */
