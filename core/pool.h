/* Pools and the core's internal operations, shared between the files of core/. */
#ifndef TS_POOL_H
#define TS_POOL_H

#include "core/internal.h"

/* Garbage collection runs when a threshold is set. PyTorch also requires a memory fraction
 * (issue #106660: the threshold silently does nothing without one); tessera measures against the
 * cap when there is one and against the device's capacity otherwise. */
static inline bool pool_gc_enabled(const ts_allocator *a)
{
    return a->cfg.garbage_collection_threshold > 0.0;
}

static inline bool backend_capturing(const ts_allocator *a)
{
    return a->be.capture_active && a->be.capture_active(a->be.ctx);
}

/* Best fit on stream under PyTorch's rules (get_free_block), removing the block from the free
 * tree; NULL when no cached block may serve the request. Advances the GC clock. */
ts_block *pool_find_best(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);

/* PyTorch's should_split. */
bool pool_should_split(const ts_allocator *a, const ts_block *b, size_t size);

/* Absorb neighbour src into dst when both are free, or both unmapped (pool.c). */
size_t block_merge(ts_allocator *a, ts_block *dst, ts_block *src);

/* The inverses of block_merge: give the first (front) or last (back) size bytes of b to nb,
 * linked in as b's neighbour; b keeps the rest. States and trees are the caller's: b must not be
 * in a tree keyed by its address or size while it shrinks. Inline: splitting is on the hot path. */
static inline void block_split_front(ts_block *b, ts_block *nb, size_t size)
{
    nb->addr = b->addr;
    nb->size = size;
    nb->stream = b->stream;
    nb->seg = b->seg;
    nb->free_epoch = b->free_epoch;
    nb->prev = b->prev;
    nb->next = b;
    if (b->prev)
        b->prev->next = nb;
    else
        b->seg->first = nb;
    b->prev = nb;
    b->addr += size;
    b->size -= size;
    b->seg->nblocks++;
}

static inline void block_split_back(ts_block *b, ts_block *nb, size_t size)
{
    b->size -= size;
    nb->addr = b->addr + b->size;
    nb->size = size;
    nb->stream = b->stream;
    nb->seg = b->seg;
    nb->free_epoch = b->free_epoch;
    nb->prev = b;
    nb->next = b->next;
    if (b->next)
        b->next->prev = nb;
    b->next = nb;
    b->seg->nblocks++;
}

/* Count b, just made ALLOCATED with its requested size set, in the allocation counters.
 * Inline: every allocation passes here. */
static inline void block_count_allocated(ts_allocator *a, ts_pool *p, const ts_block *b)
{
    tessera_device_stats *st = a->st;
    stat_array_increase(a, st->allocation, p, 1);
    stat_array_increase(a, st->allocated_bytes, p, (int64_t)b->size);
    stat_array_increase(a, st->active, p, 1);
    stat_array_increase(a, st->active_bytes, p, (int64_t)b->size);
    stat_array_increase(a, st->requested_bytes, p, (int64_t)b->requested);
    if (b->size >= a->cfg.max_split_size)
        stat_increase(a, &st->oversize_allocations, 1);
}

/* allocator.c */
void block_free_complete(ts_allocator *a, ts_block *b); /* PyTorch's free_block */
ts_block *block_new(ts_allocator *a);
void block_delete(ts_allocator *a, ts_block *b);
/* Fill in a fresh (zeroed) segment and enter it in the segment tree. Plain and stitched segments
 * are mapped whole, expandable ones start with nothing mapped. whole, when not NULL, becomes the
 * segment's one block, spanning it (its state and trees are the caller's). */
void segment_install(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                     uint64_t stream, ts_pool *p, ts_segment_kind kind, ts_block *whole);
/* segment_install for a plain segment just obtained from the device, counted as reserved: the
 * inverse of the accounting in release_block. */
void segment_install_plain(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                           uint64_t stream, ts_pool *p, ts_block *whole);

/* release.c */
void release_block(ts_allocator *a, ts_block *b);
bool release_available_cached_blocks(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
void release_cached_blocks(ts_allocator *a);
void garbage_collect_cached_blocks(ts_allocator *a);

/* fence.c */
/* Stream-ordered reuse (fence.c). reuse_order_point makes an order point now (false when none
 * can be made: a capture is underway); reuse_ready says whether b may be handed out, making an
 * order point first when b was freed since the last one. */
bool reuse_order_point(ts_allocator *a);
bool reuse_ready(ts_allocator *a, const ts_block *b);

void fences_process(ts_allocator *a);
void fences_synchronize_all(ts_allocator *a);
void fences_defer_free(ts_allocator *a, ts_block *b);
void fences_drop_all(ts_allocator *a);
bool fences_wait_pending(ts_allocator *a);
/* A request of size found no free block in p while at least size bytes of p wait for fences:
 * wait for the oldest fence. Returns true when some block became free (try best fit again). */
bool fences_wait_oldest(ts_allocator *a, ts_pool *p, size_t size);

/* expandable.c */
ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
void expandable_unmap_free_block(ts_allocator *a, ts_block *b);
void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg);
void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory);

bool segment_whole_handles(ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                           uintptr_t *run_hi);
void segment_unmap_handles(ts_allocator *a, ts_segment *seg, uintptr_t lo, uintptr_t hi,
                           bool unmap_only);

/* stitch.c */
ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
size_t stitch_release_free(ts_allocator *a, bool synced);
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory);

/* check.c */
void allocator_update_largest_free(ts_allocator *a);
size_t ts_largest_free_block_locked(ts_allocator *a);
int allocator_check_locked(ts_allocator *a, char *why, size_t whylen);

#endif /* TS_POOL_H */
