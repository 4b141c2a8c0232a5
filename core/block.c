/* Segment records: installing a fresh segment in the allocator's segment tree. */
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
