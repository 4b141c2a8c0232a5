/* Expandable segments: one virtual reservation per (stream, pool), backed page by page.
 *
 * PyTorch's design (reference section 8): the reservation spans 1 1/8 of the device's memory, so
 * pages unmapped early in a segment can be mapped again at its end; allocations tile it from the
 * low end and merge with their free neighbours; only the final out-of-memory retry and
 * empty_cache give pages back. Pages are 2 MiB (small pool) or large_segment_size (large pool),
 * rounded up to the granularity the backend reports (PyTorch assumes it).
 *
 * Where tessera differs on purpose:
 *  - a partial failure while mapping undoes the whole call (PyTorch issue #188008 leaves pages
 *    mapped that its bookkeeping does not know about);
 *  - the oversize rules do not apply to expandable blocks (see pool.c);
 *  - the device is synchronised once per release pass, not once per block.
 *
 * Pages and handles: the page is the unit of address arithmetic (every UNMAPPED block starts and
 * ends on a page boundary); the handle is the unit of physical memory. PyTorch creates one handle
 * per page. In defragment mode tessera creates one handle per growth, sized to it: far fewer
 * driver calls, and since programs mostly free what they allocated whole, whole handles still come
 * back free to be given back or stitched. Memory is only ever unmapped a whole handle at a time.
 *
 * Block states in an expandable segment: FREE / ALLOCATED / PENDING / LENT blocks are mapped;
 * UNMAPPED blocks have no memory behind them and sit in the pool's unmapped tree.
 */
#include <stdlib.h>
#include <string.h>

#include "core/expandable.h"
#include "core/handles.h"
#include "core/pool.h"
#include "core/stitch.h"

static size_t es_page_size(const ts_allocator *a, const ts_pool *p)
{
    size_t base = a->cfg.expandable_page
                      ? a->cfg.expandable_page
                      : (p->small ? TS_SMALL_BUFFER : a->cfg.large_segment_size);
    size_t g = a->vm_granularity;
    return (base + g - 1) / g * g;
}

/* A new reservation for (stream, pool): one UNMAPPED block covering all of it. */
static ts_block *es_create(ts_allocator *a, ts_pool *p, uint64_t stream)
{
    const size_t page = es_page_size(a, p);
    size_t total = a->device_total ? a->device_total : ((size_t)80 << 30);
    size_t npages = (total + total / 8 + page - 1) / page;
    size_t va_size = npages * page;

    ts_segment *seg = ts_slab_alloc(&a->segment_slab);
    ts_block *b = seg ? block_new(a) : NULL;
    uintptr_t va = 0;
    if (b) {
        backend_enter(a);
        if (a->be.vm_reserve(a->be.ctx, va_size, &va) != TS_OK)
            va = 0;
    }
    if (!va) {
        if (b)
            block_delete(a, b);
        if (seg)
            ts_slab_free(&a->segment_slab, seg);
        return NULL;
    }
    segment_install(a, seg, va, va_size, stream, p, TS_SEGMENT_EXPANDABLE, b);
    seg->page_size = page;
    pool_insert_unmapped(p, b);
    a->observe_now = true;
    return b;
}

/* The largest handle handle_policy:coarse creates: the large pool's segment size (PyTorch's
 * expandable page, 20 MiB by default) in whole pages, and never less than one page. */
static size_t es_coarse_handle(const ts_allocator *a, size_t page)
{
    size_t h = a->cfg.large_segment_size / page * page;
    return h > page ? h : page;
}

/* How a growth of size bytes is cut into handles: PyTorch uses one per page.
 * geometric halves towards its end: G/2, G/4, ..., one page, one page. Blocks are carved from
 * the low end, so when a smaller request later reuses the range, the free remainder is at its
 * end, and all of it but at most half lies in whole handles (the handle holding the cut is at
 * most the size of all the handles after it), ready to be given back or stitched. A growth of G
 * costs about log2(G / page) + 1 handles: fewer than PyTorch's pages above 60 MiB or so.
 * coarse cuts it into handles of the large segment size and one handle for the rest: the
 * driver calls of PyTorch's 20 MiB pages, while growth, give-back and stitching still count
 * small pages (a growth maps what it needs, not a whole 20 MiB page). A handle cannot be split
 * later (cuMemMap maps a handle from its start, whole), so a free hole lends or gives back only
 * the coarse handles it holds whole. */
static size_t es_handle_sizes(const ts_allocator *a, const ts_segment *seg, size_t size,
                              size_t *out, size_t max)
{
    const size_t page = seg->page_size;
    const size_t coarse = es_coarse_handle(a, page);
    size_t n = 0;
    while (size > 0 && n < max) {
        size_t h;
        if (a->handle_per_page)
            h = page;
        else if (a->cfg.handle_policy == TS_HANDLES_COARSE)
            h = size < coarse ? size : coarse;
        else if (size <= 2 * page)
            h = page;
        else
            h = size / 2 / page * page;
        if (n == max - 1)
            h = size; /* never more handles than the table holds: the rest in one */
        out[n++] = h;
        size -= h;
    }
    return n;
}

/* Back [addr, addr + size) (whole pages, unmapped) with new memory: its handles created, then
 * mapped and granted in one vm_map. ahead: bytes more (whole pages, a handle each) mapped after
 * it, when the device gives them: a handle of them that cannot be created drops them all, never
 * the growth. Returns the bytes mapped (size, or size + ahead), 0 when the growth failed: all or
 * nothing. */
static size_t es_map_range(ts_allocator *a, ts_segment *seg, uintptr_t addr, size_t size,
                           size_t ahead)
{
    /* per page: exactly size / page handles; coarse: size / coarse + 1; geometric: about
     * log2(size / page) + 1, fewer than 64 + 2 for any size_t, so a table of 128 never fills
     * (es_handle_sizes puts the rest in the last entry if it did) */
    const size_t max = a->handle_per_page ? size / seg->page_size
                       : a->cfg.handle_policy == TS_HANDLES_COARSE
                           ? size / es_coarse_handle(a, seg->page_size) + 1
                           : 128;
    /* a handle a page: the pages ahead, a handle each, dropped alone when the device lacks them */
    const size_t nahead = a->handle_per_page ? ahead / seg->page_size : 0;
    size_t *sizes = malloc((max + nahead) * sizeof *sizes);
    if (!sizes)
        return 0;
    const size_t need = es_handle_sizes(a, seg, size, sizes, max);
    for (size_t i = 0; i < nahead; i++)
        sizes[need + i] = seg->page_size;
    size_t n = need + nahead;
    ts_handle_rec **recs = malloc(n * sizeof *recs);
    ts_vm_piece *pieces = malloc(n * sizeof *pieces);
    if (!recs || !pieces) {
        free(pieces);
        free(recs);
        free(sizes);
        return 0;
    }
    size_t made = 0, created = 0;
    for (; made < n; made++)
        if (!(recs[made] = ts_slab_alloc(&a->handle_slab)))
            break;
    backend_enter(a);
    if (made == n)
        for (; created < n; created++) {
            pieces[created].size = sizes[created];
            pieces[created].offset = 0;
            if (a->be.vm_create(a->be.ctx, sizes[created], &pieces[created].handle) != TS_OK)
                break;
        }
    if (created < n && created >= need) {
        /* the device gave what the growth needs but not the batch ahead: none of it, so that
         * memory short stays exactly as short as without batching */
        for (size_t i = need; i < created; i++)
            a->be.vm_destroy(a->be.ctx, pieces[i].handle);
        created = n = need;
    }
    bool ok = created == n && a->be.vm_map(a->be.ctx, addr, pieces, n) == TS_OK;
    size_t bytes = 0;
    if (ok) {
        for (size_t i = 0; i < n; bytes += sizes[i++]) {
            recs[i]->addr = addr + bytes;
            recs[i]->size = sizes[i];
            recs[i]->handle = pieces[i].handle;
            recs[i]->offset = 0;
            recs[i]->node.k0 = addr + bytes;
            ts_tree_insert(&seg->handles, &recs[i]->node);
        }
    } else {
        /* Undo this call completely: nothing is left mapped that the blocks do not say (vm_map
         * maps all or nothing). */
        for (size_t i = 0; i < created; i++)
            a->be.vm_destroy(a->be.ctx, pieces[i].handle);
    }
    for (size_t i = ok ? n : 0; i < made; i++)
        ts_slab_free(&a->handle_slab, recs[i]);
    free(pieces);
    free(recs);
    free(sizes);
    return bytes;
}

/* How much more than needed a growth of b (unmapped) by mapped bytes maps ahead: on plainly
 * sequential growth (the last growth of the segment ended where b starts) under defragment
 * (PyTorch's expandable segments keep PyTorch's growth), in the large pool (a small-pool page
 * holds hundreds of blocks: a batch there would sit idle), up to whole batches, and the pages
 * ahead serve the next requests with no driver call; they go back with the rest of the cache
 * (release).
 * - coarse handles: the batch is part of the growth's handles (by default one coarse handle,
 *   20 MiB): a growth of a few pages costs what a growth of a whole handle does (a create, a map
 *   and a grant), so sequential growth pays once per 20 MiB instead of once per growth. At most
 *   a quarter of what the segment maps is held ahead: those pages share a handle with live
 *   blocks and go back to the device only with it (with a handle a page each goes back alone);
 * - a handle a page: batches of growth_batch_mb, one grant per batch instead of one per growth:
 *   fewer calls, not less driver time (a GPU charges a grant per handle it covers,
 *   tests/data/driver-costs/h100.txt).
 * Bounded: never past b (a hole between mapped pages, or the reservation's end), only while what
 * the allocator holds stays below 15/16 of the cap (or of the device), and only while the device
 * keeps a sixteenth of itself free after it (3/4 and a quarter with coarse handles, below), so
 * that batching never takes the last memory a request elsewhere (another process's too) needs. */
static size_t es_ahead(ts_allocator *a, const ts_block *b, size_t mapped)
{
    const ts_segment *seg = b->seg;
    const bool coarse = !a->handle_per_page && a->cfg.handle_policy == TS_HANDLES_COARSE;
    const size_t batch = a->cfg.growth_batch / seg->page_size * seg->page_size;
    if (!a->cfg.defragment || !(coarse || a->handle_per_page) || seg->pool->small || batch == 0 ||
        b->addr != seg->grow_end || mapped % batch == 0)
        return 0;
    size_t ahead = batch - mapped % batch; /* to whole batches: one handle's cost per 20 MiB */
    if (ahead > b->size - mapped)
        ahead = b->size - mapped; /* a hole between mapped pages: up to its end */
    if (coarse) {
        /* at most a quarter of what the segment maps with it: a small program's segment grows
         * geometrically, a large one's by whole handles, and memory held ahead stays a bounded
         * part of the segment */
        const size_t quarter = (seg->mapped + mapped) / 4 / seg->page_size * seg->page_size;
        if (ahead > quarter)
            ahead = quarter;
        if (ahead == 0)
            return 0;
    }
    /* The room a batch leaves: a sixteenth of the cap and of the device; a quarter with coarse
     * handles, whose pages ahead cannot go back before their handle's blocks are all free (a
     * neighbour short of memory would ask for them in vain: four processes cycling on one
     * shared device asked each other 57 times with a sixteenth, never with a quarter). */
    const size_t room = coarse ? 4 : 16;
    /* (no limit known, a device that did not say its size: no batch either) */
    const size_t limit = a->set_fraction ? a->allowed_memory_maximum : a->device_total;
    const size_t held = a->total_allocated_memory + a->driver_bytes + mapped + ahead;
    if (held > limit - limit / room)
        return 0;
    /* Nor within that room of what the device has free: other processes on it (and other
     * allocators of this one) hold memory this allocator does not count, and a batch they then
     * have to ask back (lending) costs them a round trip. One query per batched growth. */
    size_t free_bytes = 0, total = 0;
    backend_enter(a);
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &free_bytes, &total) == TS_OK &&
        free_bytes < mapped + ahead + total / room) /* the growth, the batch and the room */
        return 0;
    return ahead;
}

/* PyTorch's map_block: back the first size bytes (rounded up to pages) of an UNMAPPED block,
 * merge the result with free neighbours and put it in the free tree. */
static bool es_map_block(ts_allocator *a, ts_block *b, size_t size)
{
    ts_segment *seg = b->seg;
    ts_pool *p = seg->pool;
    const size_t page = seg->page_size;
    const size_t need = (size + page - 1) / page * page;
    const size_t ahead = es_ahead(a, b, need);
    /* the rest's record is taken before any device call (the batch ahead may be dropped, so
     * whenever the growth itself leaves a rest) */
    ts_block *rest = need < b->size ? block_new(a) : NULL;
    if (need < b->size && !rest)
        return false;
    size_t mapped;
    if (ahead && !a->handle_per_page) {
        /* coarse: the batch is part of the growth's handles; a device that cannot give it
         * serves the growth alone, so memory short stays as short as without batching */
        mapped = es_map_range(a, seg, b->addr, need + ahead, 0);
        if (mapped == 0)
            mapped = es_map_range(a, seg, b->addr, need, 0);
    } else {
        mapped = es_map_range(a, seg, b->addr, need, ahead);
    }
    if (mapped == 0) {
        if (rest)
            block_delete(a, rest);
        return false;
    }
    pool_remove_unmapped(p, b);
    if (mapped < b->size) {
        block_split_back(b, rest, b->size - mapped);
        pool_insert_unmapped(p, rest);
    } else if (rest) {
        block_delete(a, rest);
    }
    seg->grow_end = b->addr + mapped;
    b->state = TS_BLOCK_FREE;
    block_merge(a, b, b->prev);
    block_merge(a, b, b->next);
    pool_insert_free(p, b);

    seg->mapped += mapped;
    a->total_allocated_memory += mapped;
    stat_array_increase(a, a->st->reserved_bytes, p, (int64_t)mapped);
    counter_add(a, &a->st->num_device_alloc, 1);
    a->observe_now = true;
    return true;
}

static bool es_allocatable(const ts_block *b)
{
    return b && (b->state == TS_BLOCK_FREE || b->state == TS_BLOCK_UNMAPPED);
}

/* PyTorch's find_expandable_block: the lowest unmapped range on this stream from which (counting
 * a free block right before it) consecutive free and unmapped blocks add up to size; else a new
 * segment. */
static ts_block *es_find(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    for (ts_node *n = ts_tree_lower_bound(&p->unmapped, stream, 0, 0); n && n->k0 == stream;
         n = ts_tree_next(n)) {
        ts_block *c = block_of_node(n);
        if (es_allocatable(c->prev))
            c = c->prev;
        size_t bytes = 0;
        for (ts_block *r = c; bytes < size && es_allocatable(r); r = r->next)
            bytes += r->size;
        if (bytes >= size)
            return c;
    }
    return es_create(a, p, stream);
}

bool expandable_grow_free(ts_allocator *a, ts_pool *p, size_t bytes, uint64_t stream)
{
    /* (a stream with free pages has a segment, and a segment's reservation is larger than the
     * device: its end is unmapped) */
    for (ts_node *n = ts_tree_lower_bound(&p->unmapped, stream, 0, 0); n && n->k0 == stream;
         n = ts_tree_next(n)) {
        ts_block *c = block_of_node(n);
        if (c->size >= bytes)
            return es_map_block(a, c, bytes);
    }
    return false;
}

ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    ts_block *c = es_find(a, p, size, stream);
    if (!c)
        return NULL;
    if (c->state == TS_BLOCK_UNMAPPED && !es_map_block(a, c, c->size < size ? c->size : size))
        return NULL;
    /* Invariant from here: c is free and mapped, followed by unmapped space. */
    while (c->size < size) {
        ts_block *next = c->next;
        size_t want = size - c->size;
        if (!next || next->state != TS_BLOCK_UNMAPPED ||
            !es_map_block(a, next, next->size < want ? next->size : want))
            return NULL; /* what was mapped stays, as a free block: the pool is consistent */
        c = next; /* mapping merged the previous candidate into it */
    }
    pool_remove_free(p, c);
    return c;
}

/* PyTorch's unmap_block: give back every whole handle inside a free block (whole pages, in
 * PyTorch's one-handle-per-page layout); what is left at either end stays mapped as free blocks.
 * The caller synchronised the device. */
void expandable_unmap_free_block(ts_allocator *a, ts_block *b)
{
    ts_segment *seg = b->seg;
    ts_pool *p = seg->pool;
    uintptr_t lo, hi;
    if (!segment_whole_handles(seg, b->addr, b->addr + b->size, &lo, &hi))
        return;
    size_t before = lo - b->addr, after = b->addr + b->size - hi;
    ts_block *bf = before ? block_new(a) : NULL;
    ts_block *af = after ? block_new(a) : NULL;
    if ((before && !bf) || (after && !af)) {
        if (bf)
            block_delete(a, bf);
        if (af)
            block_delete(a, af);
        return; /* host memory exhausted: keep the pages, stay consistent */
    }
    segment_unmap_handles(a, seg, lo, hi, false);
    pool_remove_free(p, b);
    /* the partial pages at either end stay mapped, as free blocks; b narrows to [lo, hi) */
    if (bf) {
        block_split_front(b, bf, before);
        pool_insert_free(p, bf);
    }
    if (af) {
        block_split_back(b, af, after);
        pool_insert_free(p, af);
    }
    b->state = TS_BLOCK_UNMAPPED;
    block_merge(a, b, b->prev);
    block_merge(a, b, b->next);
    pool_insert_unmapped(p, b);

    seg->mapped -= hi - lo;
    a->total_allocated_memory -= hi - lo;
    stat_array_decrease(a, a->st->reserved_bytes, p, (int64_t)(hi - lo));
    counter_add(a, &a->st->num_device_free, 1);
    a->observe_now = true;
}

size_t expandable_page_of(const ts_allocator *a, const ts_pool *p)
{
    return es_page_size(a, p);
}

size_t expandable_unmap_free_end(ts_allocator *a, ts_block *b, size_t bytes)
{
    ts_segment *seg = b->seg;
    uintptr_t lo, hi;
    if (!segment_whole_handles(seg, b->addr, b->addr + b->size, &lo, &hi))
        return 0;
    /* whole handles from the run's end until bytes are covered */
    uintptr_t cut = hi;
    while (cut > lo && hi - cut < bytes)
        cut = handle_of_node(ts_tree_floor(&seg->handles, cut - 1, 0, 0))->addr;
    ts_block *front = cut > b->addr ? block_new(a) : NULL;
    if (cut > b->addr && !front)
        return 0; /* host memory exhausted: keep the pages, stay consistent */
    if (front) {
        ts_pool *p = seg->pool;
        pool_remove_free(p, b);
        block_split_front(b, front, cut - b->addr);
        pool_insert_free(p, front);
        pool_insert_free(p, b);
    }
    expandable_unmap_free_block(a, b); /* b starts at cut: its whole handles are [cut, hi) */
    return hi - cut;
}

/* The start of seg's free top (the free and unmapped blocks that end it) when it holds a hole,
 * an unmapped block with mapped memory after it; else NULL. */
static ts_block *es_holed_top(ts_segment *seg)
{
    ts_block *last = seg->first;
    while (last->next)
        last = last->next;
    ts_block *start = NULL;
    bool hole = false;
    for (ts_block *b = last; b && (b->state == TS_BLOCK_FREE || b->state == TS_BLOCK_UNMAPPED);
         b = b->prev) {
        hole |= b->state == TS_BLOCK_UNMAPPED && b != last;
        start = b;
    }
    return hole ? start : NULL;
}

void expandable_drop_holed_tops(ts_allocator *a)
{
    if (backend_capturing(a))
        return; /* nothing is unmapped during a capture: looked at again after it */
    a->holed_tops = false;
    bool synced = false;
    for (ts_node *sn = ts_tree_first(&a->segments), *next; sn; sn = next) {
        next = ts_tree_next(sn);
        ts_segment *seg = segment_of_node(sn);
        if (seg->kind != TS_SEGMENT_EXPANDABLE || !seg->holed_top)
            continue;
        seg->holed_top = false;
        ts_block *b = es_holed_top(seg);
        if (!b)
            continue; /* placed into since the free that flagged it */
        if (!synced) {
            /* unmapping is not ordered with device work; retired ranges' aliases of these
             * pages go first, so that the memory really returns to the device */
            synced = true;
            if (stitch_release_free(a, false) == 0 && a->be.synchronize) {
                backend_enter(a);
                a->be.synchronize(a->be.ctx);
            }
        }
        /* b survives its unmap (it absorbs the unmapped neighbours on both sides, which go):
         * its next is looked up only afterwards */
        for (; b; b = b->next)
            if (b->state == TS_BLOCK_FREE)
                expandable_unmap_free_block(a, b);
        expandable_release_segment_if_empty(a, seg);
    }
}

/* A segment that is one unmapped block gives its reservation back. */
void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg)
{
    if (seg->kind != TS_SEGMENT_EXPANDABLE || seg->nblocks != 1 ||
        seg->first->state != TS_BLOCK_UNMAPPED)
        return;
    pool_remove_unmapped(seg->pool, seg->first);
    backend_enter(a);
    a->be.vm_release(a->be.ctx, seg->addr, seg->size);
    ts_tree_remove(&a->segments, &seg->node);
    block_delete(a, seg->first);
    ts_slab_free(&a->segment_slab, seg);
    a->observe_now = true;
}

/* Teardown: unmap everything still mapped and give the reservation back. */
void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory)
{
    if (!release_memory || seg->kind != TS_SEGMENT_EXPANDABLE)
        return;
    if (a->be.synchronize) {
        backend_enter(a);
        a->be.synchronize(a->be.ctx);
    }
    segment_unmap_handles(a, seg, seg->addr, seg->addr + seg->size, false);
    a->be.vm_release(a->be.ctx, seg->addr, seg->size);
}
