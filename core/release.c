/* Giving memory back: whole free segments, oversize blocks, garbage collection. */
#include <stdlib.h>

#include "core/release.h"
#include "core/expandable.h"
#include "core/fence.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/stitch.h"

/* PyTorch's release_block: free a cached block that is a whole plain segment. */
void release_block(ts_allocator *a, ts_block *b)
{
    tessera_device_stats *st = a->st;
    ts_segment *seg = b->seg;
    ts_pool *p = seg->pool;
    if (b->state == TS_BLOCK_FREE)
        pool_remove_free(p, b);

    backend_enter(a);
    /* A refusal here means the memory is already gone (its context died): the segment is
     * forgotten either way, so the accounting stays conserved. */
    (void)a->be.seg_free(a->be.ctx, seg->addr, seg->size);

    a->total_allocated_memory -= seg->size;
    stat_array_decrease(a, st->segment, p, 1);
    stat_array_decrease(a, st->reserved_bytes, p, (int64_t)seg->size);
    if (seg->size >= a->cfg.max_split_size)
        stat_decrease(a, &st->oversize_segments, 1);
    counter_add(a, &st->num_device_free, 1);

    ts_tree_remove(&a->segments, &seg->node);
    block_delete(a, b);
    ts_slab_free(&a->segment_slab, seg);
    a->observe_now = true;
}

static inline ts_block *tree_block(ts_node *n)
{
    return n ? block_of_node(n) : NULL;
}

/* PyTorch's release_available_cached_blocks: with max_split_size set, free oversize cached
 * blocks on this stream until the request could fit. */
bool release_available_cached_blocks(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    const size_t max_split = a->cfg.max_split_size;
    if (max_split == SIZE_MAX)
        return false;
    const size_t key_size = size < max_split ? max_split : size;

    ts_node *it = ts_freeidx_lower_bound(&p->free, stream, key_size, 0);
    ts_block *b = tree_block(it);
    if (!b || b->stream != stream || block_is_vm(b)) {
        /* No single block is large enough: free oversize blocks from the largest down. */
        ts_node *first = ts_freeidx_first(&p->free);
        if (it == first)
            return false;
        it = it ? ts_freeidx_prev(&p->free, it) : ts_freeidx_last(&p->free);
        size_t released = 0;
        while (released < key_size) {
            ts_block *cur = block_of_node(it);
            if (cur->size < max_split || cur->stream != stream)
                break;
            bool is_first = it == first;
            if (!is_first)
                it = ts_freeidx_prev(&p->free, it);
            if (!block_is_vm(cur)) {
                released += cur->size;
                release_block(a, cur);
            }
            if (is_first)
                break;
        }
        return released >= key_size;
    }
    release_block(a, b);
    return true;
}

/* Free non-split cached blocks of a pool and unmap the free pages of its expandable segments,
 * the largest first (the free index's last nodes), until about budget bytes went (SIZE_MAX:
 * every one). synced: the device was already waited for in this pass. */
static void release_pool_blocks(ts_allocator *a, ts_pool *p, bool synced, size_t budget)
{
    ts_block *to_unmap = NULL;
    size_t planned = 0;
    ts_node *n = ts_freeidx_last(&p->free);
    while (n && planned < budget) {
        ts_node *prev = ts_freeidx_prev(&p->free, n);
        ts_block *b = block_of_node(n);
        if (b->seg->kind == TS_SEGMENT_STITCHED) {
            /* stitched ranges were given back before this pass, or are still in use */
        } else if (block_is_expandable(b)) {
            /* unmapping changes the free tree: collect first (free blocks never use
             * pending_next, so it can thread this list) */
            b->pending_next = to_unmap;
            to_unmap = b;
            planned += b->size;
        } else if (!block_is_split(b)) {
            planned += b->size;
            release_block(a, b);
        }
        n = prev;
    }
    /* Unmapping is not ordered with device work: wait for it once, for the whole pass (the
     * blocks are free, but work issued before their free may still be running). */
    if (to_unmap && !synced && a->be.synchronize) {
        backend_enter(a);
        a->be.synchronize(a->be.ctx);
    }
    while (to_unmap) {
        ts_block *b = to_unmap;
        to_unmap = b->pending_next;
        b->pending_next = NULL;
        ts_segment *seg = b->seg;
        expandable_unmap_free_block(a, b);
        expandable_release_segment_if_empty(a, seg);
    }
}

/* PyTorch's release_cached_blocks (also empty_cache): wait for every pending free, then give
 * back every segment that holds no live block. */
void release_cached_blocks(ts_allocator *a)
{
    (void)release_some(a, SIZE_MAX);
}

size_t release_some(ts_allocator *a, size_t target)
{
    if (target == 0 || backend_capturing(a))
        return 0;
    const size_t before = a->total_allocated_memory;
    fences_synchronize_all(a);
    /* Free stitched ranges go first (their pages return to the segments they came from and can
     * then be unmapped in the same pass); one device synchronise covers both. */
    bool synced = stitch_release_free(a, false) > 0;
    ts_pool *pools[2] = {&a->large, &a->small};
    for (int i = 0; i < 2; i++) {
        size_t gone = before - a->total_allocated_memory;
        if (gone < target)
            release_pool_blocks(a, pools[i], synced, target - gone);
    }
    return before - a->total_allocated_memory;
}

/* A free block with whole handles that the retry may give back, and how it ranks. */
typedef struct release_candidate {
    ts_block *b;
    size_t whole; /* bytes of whole handles in it */
    int rank;     /* 0: another pool's or stream's segment end, 1: elsewhere in another's,
                   * 2: between live blocks of the request's own pool and stream */
} release_candidate;

static int candidate_cmp(const void *x, const void *y)
{
    const release_candidate *a = x, *b = y;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->whole != b->whole)
        return a->whole > b->whole ? -1 : 1; /* the fewest blocks cut */
    return a->b->addr < b->b->addr ? -1 : (a->b->addr > b->b->addr);
}

/* How much the device and the cap lack for bytes more. */
static size_t lacking(ts_allocator *a, size_t bytes)
{
    size_t lack = 0, free_bytes = 0, total = 0;
    backend_enter(a);
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &free_bytes, &total) == TS_OK &&
        free_bytes < bytes)
        lack = bytes - free_bytes;
    const size_t held = a->total_allocated_memory + a->driver_bytes;
    if (a->set_fraction && held + bytes > a->allowed_memory_maximum &&
        held + bytes - a->allowed_memory_maximum > lack)
        lack = held + bytes - a->allowed_memory_maximum;
    return lack;
}

bool release_for_request(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    if (backend_capturing(a))
        return false;
    fences_synchronize_all(a);
    bool synced = stitch_release_free(a, false) > 0;
    /* The candidates: free blocks of expandable segments holding whole handles, except the free
     * end of the request's own segment, which its growth maps again (so the growth needs only
     * what that end lacks). */
    size_t n = 0, cap = 64, own_end = 0;
    release_candidate *v = malloc(cap * sizeof *v);
    if (!v)
        return false;
    for (ts_node *sn = ts_tree_first(&a->segments); sn; sn = ts_tree_next(sn)) {
        ts_segment *seg = segment_of_node(sn);
        if (seg->kind != TS_SEGMENT_EXPANDABLE)
            continue;
        const bool own = seg->pool == p && seg->stream == stream;
        for (ts_block *b = seg->first; b; b = b->next) {
            uintptr_t lo, hi;
            const bool end = !b->next || b->next->state == TS_BLOCK_UNMAPPED;
            if (own && end && b->state == TS_BLOCK_FREE && b->size > own_end)
                own_end = b->size;
            if (b->state != TS_BLOCK_FREE || (own && end) ||
                !segment_whole_handles(seg, b->addr, b->addr + b->size, &lo, &hi))
                continue;
            if (n == cap) {
                release_candidate *w = realloc(v, 2 * cap * sizeof *w);
                if (!w)
                    break;
                v = w;
                cap *= 2;
            }
            v[n++] = (release_candidate){b, hi - lo, own ? 2 : end ? 0 : 1};
        }
    }
    const size_t page = expandable_page_of(a, p);
    const size_t need = size > own_end ? (size - own_end + page - 1) / page * page : 0;
    const size_t lack = lacking(a, need);
    qsort(v, n, sizeof *v, candidate_cmp);
    if (n && lack && !synced && a->be.synchronize) {
        backend_enter(a);
        a->be.synchronize(a->be.ctx); /* unmapping is not ordered with device work */
    }
    size_t released = 0;
    for (size_t i = 0; i < n && released < lack; i++) {
        ts_segment *seg = v[i].b->seg;
        released += expandable_unmap_free_end(a, v[i].b, lack - released);
        expandable_release_segment_if_empty(a, seg);
    }
    free(v);
    return released >= lack;
}

/* PyTorch's garbage_collect_cached_blocks: when reserved memory passes the threshold, free
 * unsplit large blocks that have stayed unused longer than average, repeating until the target
 * is reclaimed or nothing more can go. */
void garbage_collect_cached_blocks(ts_allocator *a)
{
    ts_pool *p = &a->large;
    const size_t basis = a->set_fraction ? a->allowed_memory_maximum : a->device_total;
    const size_t threshold = (size_t)(a->cfg.garbage_collection_threshold * (double)basis);
    if (a->total_allocated_memory <= threshold)
        return;
    const size_t target = a->total_allocated_memory - threshold;
    size_t reclaimed = 0;

    uint64_t total_age = 0;
    size_t freeable = 0;
    for (ts_node *n = ts_freeidx_first(&p->free); n; n = ts_freeidx_next(&p->free, n)) {
        ts_block *b = block_of_node(n);
        if (!block_is_split(b)) {
            total_age += p->get_free_blocks_call_count - b->gc_count_base;
            freeable++;
        }
    }
    if (freeable == 0)
        return;

    bool freed_any = true;
    while (reclaimed < target && freed_any && freeable > 0) {
        const double age_threshold = (double)total_age / (double)freeable;
        freed_any = false;
        /* No early stop inside a round, as PyTorch: GC should not trigger again too soon. */
        ts_node *n = ts_freeidx_first(&p->free);
        while (n) {
            ts_node *next = ts_freeidx_next(&p->free, n);
            ts_block *b = block_of_node(n);
            uint64_t age = p->get_free_blocks_call_count - b->gc_count_base;
            if (!block_is_split(b) && !block_is_vm(b) && (double)age >= age_threshold) {
                freed_any = true;
                reclaimed += b->size;
                total_age -= age;
                freeable--;
                release_block(a, b);
            }
            n = next;
        }
    }
}
