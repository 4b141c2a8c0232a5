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
/* defragment's retry, before empty_cache's: give back only what a request of size bytes from p
 * on stream lacks (the device's free memory and the cap, as they stand): whole handles from the
 * ends of free blocks, first other pools' and streams' (segment ends before holes), then holes
 * among the request's own blocks; never the free end of the request's own segment, which its
 * growth maps again. Free memory in the middle of the request's segment stays mapped unless
 * nothing else is left, so that the next, identical step finds the layout this one had. One
 * synchronise. true when enough went back (or nothing lacked). */
bool release_for_request(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);

/* Give free cached memory back to the device, the largest blocks first, until at least target
 * bytes went (SIZE_MAX: all of it; less when no more is free), as release_cached_blocks does:
 * every pending free waited for, free stitched ranges unmapped first, the device synchronised
 * once before pages are unmapped; nothing during a capture. Returns the bytes given back. */
size_t release_some(ts_allocator *a, size_t target);
/* garbage_collection_threshold: free the oldest unsplit cached blocks until the target is met. */
void garbage_collect_cached_blocks(ts_allocator *a);

#endif /* TS_RELEASE_H */
