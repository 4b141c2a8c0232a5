/* Pools: the free sets and the best-fit search with PyTorch's acceptance rules. */
#include "core/pool.h"

void pool_insert_free(ts_pool *p, ts_block *b)
{
    b->node.k0 = b->stream;
    b->node.k1 = b->size;
    b->node.k2 = b->addr;
    b->gc_count_base = p->get_free_blocks_call_count;
    b->state = TS_BLOCK_FREE;
    ts_freeidx_insert(&p->free, &b->node);
    if (b->seg->kind != TS_SEGMENT_PLAIN)
        p->vm_free += b->size;
}

void pool_remove_free(ts_pool *p, ts_block *b)
{
    ts_freeidx_remove(&p->free, &b->node);
    if (b->seg->kind != TS_SEGMENT_PLAIN)
        p->vm_free -= b->size;
}

void pool_insert_unmapped(ts_pool *p, ts_block *b)
{
    b->node.k0 = b->stream;
    b->node.k1 = b->addr;
    b->node.k2 = 0;
    b->state = TS_BLOCK_UNMAPPED;
    ts_tree_insert(&p->unmapped, &b->node);
}

void pool_remove_unmapped(ts_pool *p, ts_block *b)
{
    ts_tree_remove(&p->unmapped, &b->node);
}

/* What an expandable block could grow to: itself plus the unmapped range right after it. */
static size_t block_expandable_size(const ts_block *b)
{
    return b->size + (block_before_unmapped(b) ? b->next->size : 0);
}

static inline ts_block *node_block_on_stream(ts_node *n, uint64_t stream)
{
    return (n && n->k0 == stream) ? block_of_node(n) : NULL;
}

/* A block of whole pages can always be placed with nothing wasted. Placed in a hole where it
 * leaves a rest smaller than a page, that rest sits between live blocks until a neighbour is
 * freed: only a request smaller than a page fits it, and it holds no page that stitching or a
 * give-back can take.
 * Under defragment, such a request takes the best-fitting cached block that leaves at least a
 * page (an exact fit would have been b), and b when there is none. A growing tail is never taken
 * instead: as in best fit (below), it is kept for the requests that need what it can grow to
 * (taking tails too cost eor-nn-snapshot's smallest device a page). */
static ts_block *pool_whole_page_fit(const ts_pool *p, ts_block *b, size_t size, uint64_t stream)
{
    const size_t page = b->seg->page_size, rest = b->size - size;
    /* the division last: most fits leave nothing or a page and more */
    if (rest == 0 || rest >= page || size % page != 0)
        return b;
    /* like best fit's walk, this one passes only growing tails: one per unmapped range of the
     * stream's segment (its end, or a hole a give-back left) */
    for (ts_node *n = ts_freeidx_find(&p->free, stream, size + page); n;
         n = ts_freeidx_next_on_stream(&p->free, n)) {
        ts_block *c = block_of_node(n);
        if (!block_before_unmapped(c))
            return block_is_vm(c) ? c : b;
    }
    return b;
}

ts_block *pool_find_best(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    const ts_config *cfg = &a->cfg;

    if (pool_gc_enabled(a))
        p->get_free_blocks_call_count++;

    ts_node *n = ts_freeidx_find(&p->free, stream, size);
    ts_block *b = n ? block_of_node(n) : NULL;
    if (!b)
        return NULL;

    if (block_is_expandable(b)) {
        if (cfg->expandable_segments) {
            /* For best fit, an expandable block counts as what it could grow to: walk on while
             * the next candidate could grow less, which keeps a segment's growing tail for the
             * requests that need it. */
            ts_block *next = node_block_on_stream(ts_freeidx_next_on_stream(&p->free, &b->node), stream);
            while (block_is_expandable(b) && next &&
                   block_expandable_size(next) < block_expandable_size(b)) {
                b = next;
                next = node_block_on_stream(ts_freeidx_next_on_stream(&p->free, &b->node), stream);
            }
        } else {
            /* Expandable segments were turned off after some were made: only plain blocks. */
            do {
                n = ts_freeidx_next_on_stream(&p->free, &b->node);
                b = node_block_on_stream(n, stream);
            } while (b && block_is_expandable(b));
            if (!b)
                return NULL;
        }
    }

    if (cfg->defragment && !p->small && block_is_vm(b))
        b = pool_whole_page_fit(p, b, size, stream);

    /* The oversize rules keep large cached blocks for large requests, since a plain segment can
     * only be returned whole. An expandable block can always give pages back, so tessera does
     * not apply them there: PyTorch does, and with max_split_size_mb set its expandable
     * segments then grow without bound (issue #123548, fixed upstream by PR #193400). */
    if (!block_is_vm(b)) {
        /* Rule A: a request below max_split_size never takes an oversize block. */
        if (size < cfg->max_split_size && b->size >= cfg->max_split_size)
            return NULL;
        /* Rule B: an oversize request takes a cached block only when the excess is small. */
        if (size >= cfg->max_split_size && b->size >= size + cfg->max_non_split_rounding)
            return NULL;
    }

    pool_remove_free(p, b);
    return b;
}

bool pool_should_split(const ts_allocator *a, const ts_block *b, size_t size)
{
    size_t remaining = b->size - size;
    if (b->seg->pool->small || a->cfg.expandable_segments)
        return remaining >= TS_MIN_BLOCK;
    return size < a->cfg.max_split_size && remaining > TS_SMALL_SIZE;
}

/* PyTorch's try_merge_blocks: absorb src into dst when both are free (or both unmapped: dst's
 * state decides). dst must not be in a tree. Returns the bytes absorbed. */
size_t block_merge(ts_allocator *a, ts_block *dst, ts_block *src)
{
    if (!src || src->state != dst->state ||
        (src->state != TS_BLOCK_FREE && src->state != TS_BLOCK_UNMAPPED))
        return 0;
    if (src->state == TS_BLOCK_FREE)
        pool_remove_free(src->seg->pool, src);
    else
        pool_remove_unmapped(src->seg->pool, src);
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
        else
            dst->seg->first = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t absorbed = src->size;
    dst->size += absorbed;
    if (src->free_epoch > dst->free_epoch)
        dst->free_epoch = src->free_epoch; /* the merged block was freed when its last part was */
    dst->seg->nblocks--;
    block_delete(a, src);
    return absorbed;
}

/* --- the free path: PyTorch's free_block --------------------------------------------------- */

/* Is b (free, merged) in its segment's free top, the run of free and unmapped blocks that ends
 * the segment, and does that run hold a hole (an unmapped block with mapped memory after it)?
 * Only a pressure-time retry makes such holes, so the walk runs only at the edge: b must touch
 * a hole first, and the run alternates free and unmapped blocks, one hole in two blocks. */
static bool top_is_holed(const ts_block *b)
{
    const bool hole_before = b->prev && b->prev->state == TS_BLOCK_UNMAPPED;
    const bool hole_after = block_before_unmapped(b) && b->next->next;
    if (!hole_before && !hole_after)
        return false;
    for (const ts_block *r = b->next; r; r = r->next)
        if (r->state != TS_BLOCK_FREE && r->state != TS_BLOCK_UNMAPPED)
            return false;
    return true;
}

void block_free_complete(ts_allocator *a, ts_block *b)
{
    tessera_device_stats *st = a->st;
    ts_pool *p = b->seg->pool;
    const size_t original_size = b->size;
    const size_t requested = b->requested;
    int64_t net_blocks = 0, net_bytes = 0;

    TS_HISTORY_NOTE(a, TESSERA_EV_FREE_COMPLETED, b->addr, original_size, b->stream, requested);
    b->state = TS_BLOCK_FREE; /* merging joins blocks of the same state */
    ts_block *candidates[2] = {b->prev, b->next};
    for (int i = 0; i < 2; i++) {
        size_t absorbed = block_merge(a, b, candidates[i]);
        if (absorbed > 0) {
            net_blocks -= 1;
            net_bytes -= (int64_t)absorbed;
        }
    }
    pool_insert_free(p, b);
    if (a->cfg.defragment && b->seg->kind == TS_SEGMENT_EXPANDABLE && top_is_holed(b)) {
        b->seg->holed_top = true;
        a->holed_tops = true;
    }
    if (b->seg->kind == TS_SEGMENT_STITCHED && !b->prev && !b->next && !b->seg->retire_state) {
        /* a stitched range entirely free: queued, so that its pages go back where they came from
         * before the next request is placed (stitch.c retires it) */
        b->seg->retire_state = 1;
        b->seg->retire_link = a->retire_queue;
        a->retire_queue = b->seg;
    }
    if (block_is_split(b)) {
        net_blocks += 1;
        net_bytes += (int64_t)b->size;
    }
    /* Virtual-memory blocks are left out of inactive_split: their pages can always go back. */
    if (!block_is_vm(b)) {
        if (net_blocks > 0)
            stat_array_increase(a, st->inactive_split, p, net_blocks);
        else if (net_blocks < 0)
            stat_array_decrease(a, st->inactive_split, p, -net_blocks);
        if (net_bytes > 0)
            stat_array_increase(a, st->inactive_split_bytes, p, net_bytes);
        else if (net_bytes < 0)
            stat_array_decrease(a, st->inactive_split_bytes, p, -net_bytes);
    }
    stat_array_decrease(a, st->active, p, 1);
    stat_array_decrease(a, st->active_bytes, p, (int64_t)original_size);
    stat_array_decrease(a, st->requested_bytes, p, (int64_t)requested);
}
