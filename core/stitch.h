/* Stitching: one virtual range over free pages of several expandable segments (stitch.c). */
#ifndef TS_STITCH_H
#define TS_STITCH_H

#include "core/internal.h"

ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
size_t stitch_release_free(ts_allocator *a, bool synced);
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory);

#endif /* TS_STITCH_H */
