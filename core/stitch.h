/* Stitching: one virtual range over free pages of several expandable segments (stitch.c). */
#ifndef TS_STITCH_H
#define TS_STITCH_H

#include "core/internal.h"

/* A block of size bytes on stream mapped over whole free handles of p's expandable segments (a
 * new stitched range); NULL when there are not enough free pages or ranges. */
ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
/* Give back every stitched range that is entirely free (synced: the device was waited for);
 * returns how many. */
size_t stitch_release_free(ts_allocator *a, bool synced);
/* Tear a stitched range down (allocator destroy). */
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory);

#endif /* TS_STITCH_H */
