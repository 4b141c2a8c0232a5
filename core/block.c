/* Segment records: obtaining a plain segment and installing a fresh segment in the allocator's
 * segment tree. */
#include "core/block.h"

void segment_install(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                     uint64_t stream, ts_pool *p, ts_segment_kind kind, ts_block *whole)
{
    seg->addr = addr;
    seg->size = size;
    seg->mapped = kind == TS_SEGMENT_EXPANDABLE ? 0 : size;
    seg->stream = stream;
    seg->pool = p;
    seg->kind = (uint8_t)kind;
    seg->node.k0 = addr;
    ts_tree_insert(&a->segments, &seg->node);
    if (whole) {
        whole->addr = addr;
        whole->size = size;
        whole->stream = stream;
        whole->seg = seg;
        seg->first = whole;
        seg->nblocks = 1;
    }
}

void segment_install_plain(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                           uint64_t stream, ts_pool *p, ts_block *whole)
{
    tessera_device_stats *st = a->st;
    segment_install(a, seg, addr, size, stream, p, TS_SEGMENT_PLAIN, whole);
    a->total_allocated_memory += size;
    stat_array_increase(a, st->segment, p, 1);
    stat_array_increase(a, st->reserved_bytes, p, (int64_t)size);
    if (size >= a->cfg.max_split_size)
        stat_increase(a, &st->oversize_segments, 1);
}

ts_block *segment_new_plain(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    if (!cap_allows(a, size))
        return NULL;
    ts_segment *seg = ts_slab_alloc(&a->segment_slab);
    ts_block *b = seg ? block_new(a) : NULL;
    if (!b) {
        if (seg)
            ts_slab_free(&a->segment_slab, seg);
        return NULL;
    }
    uintptr_t addr = 0;
    backend_enter(a);
    if (a->be.seg_alloc(a->be.ctx, size, &addr) != TS_OK) {
        block_delete(a, b);
        ts_slab_free(&a->segment_slab, seg);
        return NULL;
    }
    segment_install_plain(a, seg, addr, size, stream, p, b);
    b->state = TS_BLOCK_FREE; /* in no free tree: the caller takes it or files it */
    counter_add(a, &a->st->num_device_alloc, 1);
    a->observe_now = true;
    return b;
}
