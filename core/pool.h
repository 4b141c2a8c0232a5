/* Pools: the free and unmapped trees, PyTorch's best fit and split rules, merging, and the free
 * path that returns a block to its pool. */
#ifndef TS_POOL_H
#define TS_POOL_H

#include "core/block.h"

/* Garbage collection runs when a threshold is set. PyTorch also requires a memory fraction
 * (issue #106660: the threshold silently does nothing without one); tessera measures against the
 * cap when there is one and against the device's capacity otherwise. */
static inline bool pool_gc_enabled(const ts_allocator *a)
{
    return a->cfg.garbage_collection_threshold > 0.0;
}

/* Free-tree membership. */
void pool_insert_free(ts_pool *p, ts_block *b);
void pool_remove_free(ts_pool *p, ts_block *b);
void pool_insert_unmapped(ts_pool *p, ts_block *b);
void pool_remove_unmapped(ts_pool *p, ts_block *b);

/* Best fit on stream under PyTorch's rules (get_free_block), removing the block from the free
 * tree; NULL when no cached block may serve the request. Advances the GC clock. */
ts_block *pool_find_best(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);

/* PyTorch's should_split. */
bool pool_should_split(const ts_allocator *a, const ts_block *b, size_t size);

/* Absorb neighbour src into dst when both are free, or both unmapped (pool.c). */
size_t block_merge(ts_allocator *a, ts_block *dst, ts_block *src);

/* PyTorch's free_block: b (ALLOCATED or PENDING, out of every tree) becomes FREE, merged with free
 * neighbours, in its pool's free tree; the active and inactive-split counters follow. */
void block_free_complete(ts_allocator *a, ts_block *b);

#endif /* TS_POOL_H */
