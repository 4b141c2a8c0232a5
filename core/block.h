/* Block and segment records: creating, splitting, installing, and the allocation counters of a
 * block. The lowest layer of the core above internal.h: it calls no other core file. */
#ifndef TS_BLOCK_H
#define TS_BLOCK_H

#include "core/internal.h"

static inline ts_block *block_new(ts_allocator *a)
{
    return ts_slab_alloc(&a->block_slab);
}

static inline void block_delete(ts_allocator *a, ts_block *b)
{
    ts_slab_free(&a->block_slab, b);
}

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

/* Fill in a fresh (zeroed) segment and enter it in the segment tree. Plain and stitched segments
 * are mapped whole, expandable ones start with nothing mapped. whole, when not NULL, becomes the
 * segment's one block, spanning it (its state and trees are the caller's). */
void segment_install(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                     uint64_t stream, ts_pool *p, ts_segment_kind kind, ts_block *whole);
/* segment_install for a plain segment just obtained from the device, counted as reserved: the
 * inverse of the accounting in release_block. */
void segment_install_plain(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                           uint64_t stream, ts_pool *p, ts_block *whole);
/* A new plain segment of size bytes from the device (one seg_alloc, within the cap) in pool p on
 * stream, installed and counted; its one block FREE and in no free tree. NULL when the cap, host
 * memory or the device refuses (nothing changed). */
ts_block *segment_new_plain(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);

#endif /* TS_BLOCK_H */
