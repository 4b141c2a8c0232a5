/* Importing and releasing whole segments by address: state that predates a replay, and the
 * segment frees a recorded trace dictates. Used by tessera-replay's PyTorch check. */
#include <string.h>

#include "core/pool.h"
#include "core/release.h"

int ts_allocator_import_segment(ts_allocator *a, uintptr_t addr, size_t size, uintptr_t stream,
                                bool small_pool, const ts_import_block *blocks, size_t n)
{
    if (n == 0 || size == 0)
        return TS_EINVAL;
    /* The blocks must tile [addr, addr + size) exactly, in order, in 512-byte multiples. */
    uintptr_t at = addr;
    for (size_t i = 0; i < n; i++) {
        if (blocks[i].addr != at || blocks[i].size == 0 || blocks[i].size % TS_MIN_BLOCK)
            return TS_EINVAL;
        at += blocks[i].size;
    }
    if (at != addr + size)
        return TS_EINVAL;

    pthread_mutex_lock(&a->lock);
    ts_node *lo = ts_tree_floor(&a->segments, addr + size - 1, UINT64_MAX, UINT64_MAX);
    if (lo && segment_of_node(lo)->addr + segment_of_node(lo)->size > addr) {
        pthread_mutex_unlock(&a->lock);
        return TS_EINVAL; /* overlaps a segment we have */
    }
    ts_segment *seg = ts_slab_alloc(&a->segment_slab);
    if (!seg) {
        pthread_mutex_unlock(&a->lock);
        return TS_ENOMEM;
    }
    ts_pool *p = small_pool ? &a->small : &a->large;
    tessera_device_stats *st = a->st;
    segment_install_plain(a, seg, addr, size, stream, p, NULL);

    ts_block *prev = NULL;
    for (size_t i = 0; i < n; i++) {
        /* adjacent free pieces become one block, as they would have merged */
        if (!blocks[i].allocated && prev && prev->state == TS_BLOCK_FREE) {
            prev->size += blocks[i].size;
            continue;
        }
        ts_block *b = block_new(a);
        if (!b)
            break; /* host memory exhausted: the validator will say so; never happens in tools */
        b->addr = blocks[i].addr;
        b->size = blocks[i].size;
        b->stream = stream;
        b->seg = seg;
        b->prev = prev;
        b->state = blocks[i].allocated ? TS_BLOCK_ALLOCATED : TS_BLOCK_FREE;
        if (prev)
            prev->next = b;
        else
            seg->first = b;
        seg->nblocks++;
        if (blocks[i].allocated) {
            b->requested = blocks[i].requested;
            b->serial = ++a->alloc_serial;
            ts_ptrmap_put(&a->live, b->addr, b);
            block_count_allocated(a, p, b);
        }
        prev = b;
    }
    /* Free blocks enter the free tree once their final size is known. */
    for (ts_block *b = seg->first; b; b = b->next) {
        if (b->state != TS_BLOCK_FREE)
            continue;
        pool_insert_free(p, b);
        if (block_is_split(b)) {
            stat_array_increase(a, st->inactive_split, p, 1);
            stat_array_increase(a, st->inactive_split_bytes, p, (int64_t)b->size);
        }
    }
    a->observe_now = true;
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return TS_OK;
}

int ts_allocator_release_segment(ts_allocator *a, uintptr_t addr)
{
    pthread_mutex_lock(&a->lock);
    ts_node *n = ts_tree_lower_bound(&a->segments, addr, 0, 0);
    ts_segment *seg = n ? segment_of_node(n) : NULL;
    int rc = TS_ENOTFOUND;
    if (seg && seg->addr == addr) {
        rc = TS_EINVAL;
        if (seg->kind == TS_SEGMENT_PLAIN && seg->nblocks == 1 &&
            seg->first->state == TS_BLOCK_FREE) {
            release_block(a, seg->first);
            rc = TS_OK;
        }
    }
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return rc;
}
