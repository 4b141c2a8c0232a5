/* Giving cached memory back to the device (release.c). */
#ifndef TS_RELEASE_H
#define TS_RELEASE_H

#include "core/internal.h"

/* PyTorch's release_block: give a whole free plain segment back to the device. */
void release_block(ts_allocator *a, ts_block *b);
/* PyTorch's release_available_cached_blocks: free oversize cached blocks of p on stream, largest
 * first, until size bytes went back. true when enough did. */
bool release_available_cached_blocks(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
/* empty_cache: synchronise once, then give back every free segment, handle and stitched range. */
void release_cached_blocks(ts_allocator *a);
/* garbage_collection_threshold: free the oldest unsplit cached blocks until the target is met. */
void garbage_collect_cached_blocks(ts_allocator *a);

#endif /* TS_RELEASE_H */
