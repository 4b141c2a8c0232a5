/* Looking at the heap: lookup, walk, the largest free block. The shim and the stats page use
 * these in production; the validator is check.c. */
#include "core/inspect.h"
#include "core/handles.h"

static ts_segment *segment_containing(ts_allocator *a, uintptr_t addr)
{
    ts_node *n = ts_tree_floor(&a->segments, addr, UINT64_MAX, UINT64_MAX);
    if (!n)
        return NULL;
    ts_segment *seg = segment_of_node(n);
    return addr < seg->addr + seg->size ? seg : NULL;
}

static void segment_info_fill(const ts_segment *seg, ts_segment_info *info)
{
    info->addr = seg->addr;
    info->size = seg->size;
    info->mapped = seg->mapped;
    info->small_pool = seg->pool->small;
    info->kind = (ts_segment_kind)seg->kind;
    info->stream = seg->stream;
    info->nblocks = seg->nblocks;
}

static void block_info_fill(const ts_block *b, ts_block_info *info)
{
    info->addr = b->addr;
    info->size = b->size;
    info->requested = (b->state == TS_BLOCK_ALLOCATED || b->state == TS_BLOCK_PENDING)
                          ? b->requested
                          : 0;
    info->state = (ts_block_state)b->state;
    info->stream = b->stream;
    info->serial = b->state == TS_BLOCK_ALLOCATED ? b->serial : 0;
}

/* The block of seg that contains addr (live blocks are found by their start in O(1); an
 * interior address walks the segment). Lock held. */
static ts_block *segment_block_at(ts_allocator *a, ts_segment *seg, uintptr_t addr)
{
    ts_block *b = ts_ptrmap_get(&a->live, addr);
    for (ts_block *c = seg->first; !b && c; c = c->next)
        if (addr >= c->addr && addr < c->addr + c->size)
            b = c;
    return b;
}

int ts_lookup(ts_allocator *a, uintptr_t addr, ts_segment_info *seg_out, ts_block_info *blk_out)
{
    int rc = TS_ENOTFOUND;
    pthread_mutex_lock(&a->lock);
    ts_segment *seg = segment_containing(a, addr);
    if (seg) {
        ts_block *b = segment_block_at(a, seg, addr);
        if (b) {
            if (seg_out)
                segment_info_fill(seg, seg_out);
            if (blk_out)
                block_info_fill(b, blk_out);
            rc = TS_OK;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int ts_lookup_backing(ts_allocator *a, uintptr_t addr, ts_segment_info *seg_out,
                      ts_block_info *blk_out, ts_backing_piece *pieces, size_t max,
                      size_t *npieces)
{
    int rc = TS_ENOTFOUND;
    size_t n = 0;
    pthread_mutex_lock(&a->lock);
    ts_segment *seg = segment_containing(a, addr);
    ts_block *b = seg ? segment_block_at(a, seg, addr) : NULL;
    if (b && b->state == TS_BLOCK_ALLOCATED) {
        rc = TS_OK;
        if (seg_out)
            segment_info_fill(seg, seg_out);
        if (blk_out)
            block_info_fill(b, blk_out);
        if (seg->kind != TS_SEGMENT_PLAIN) {
            /* the handle mapped at or below the block's start, then every one up to its end */
            for (ts_handle_rec *h = segment_handle_at(seg, b->addr);
                 h && h->addr < b->addr + b->size; h = handle_of_node(ts_tree_next(&h->node))) {
                if (h->addr + h->size <= b->addr)
                    continue;
                if (pieces && n < max)
                    pieces[n] = (ts_backing_piece){h->addr, h->size, h->handle, h->offset};
                n++;
            }
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (npieces)
        *npieces = n;
    return rc;
}

void ts_allocator_walk_locked(ts_allocator *a, const ts_walker *w)
{
    for (ts_node *n = ts_tree_first(&a->segments); n; n = ts_tree_next(n)) {
        ts_segment *seg = segment_of_node(n);
        ts_segment_info si;
        segment_info_fill(seg, &si);
        if (w->segment && w->segment(w->user, &si))
            return;
        if (!w->block)
            continue;
        for (ts_block *b = seg->first; b; b = b->next) {
            ts_block_info bi;
            block_info_fill(b, &bi);
            if (w->block(w->user, &si, &bi))
                return;
        }
    }
}

void ts_allocator_walk(ts_allocator *a, const ts_walker *w)
{
    pthread_mutex_lock(&a->lock);
    ts_allocator_walk_locked(a, w);
    pthread_mutex_unlock(&a->lock);
}

/* The largest free block over all streams. */
static size_t pool_largest_free(const ts_pool *p)
{
    return (size_t)ts_freeidx_max_size(&p->free);
}

size_t ts_largest_free_block_locked(ts_allocator *a)
{
    size_t s = pool_largest_free(&a->small), l = pool_largest_free(&a->large);
    return s > l ? s : l;
}

size_t ts_largest_free_block(ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    size_t r = ts_largest_free_block_locked(a);
    pthread_mutex_unlock(&a->lock);
    return r;
}

void allocator_update_largest_free(ts_allocator *a)
{
    gauge_set(a, &a->st->largest_free_block_bytes, (int64_t)ts_largest_free_block_locked(a));
}
