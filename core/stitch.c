/* Stitching: serve a request from free pages scattered over non-adjacent free blocks by mapping
 * them, in order, into one fresh virtual range (in the spirit of GMLake, ASPLOS'24), instead of
 * mapping new memory or failing. Online and bounded.
 *
 * The pages are not moved: the same physical handles become visible at a second address. Their
 * first mapping stays, so nothing has to wait for the device; the blocks they came from become
 * LENT (neither free nor allocated). Whole free pages of stitched segments can be lent onward in
 * the same way, so memory cached in a stitched range is never stuck there. The stitched range is a segment of its own (kind
 * STITCHED) whose blocks split, merge and get reused like any other: a stitched range is freed
 * by the program but kept, cached, for the next request it fits (reuse costs no driver call).
 *
 * Giving a range back (unstitching) unmaps its address range, which is not ordered with device
 * work, so it needs a synchronised device: it happens in the release pass (empty_cache and the
 * final out-of-memory retry, which synchronise anyway), and when the number of live ranges
 * reaches stitch_max_ranges (one synchronise for all the free ones). The LENT blocks then become
 * free again and merge with their neighbours.
 *
 * Accounting: reserved_bytes counts physical memory once, in the segment the pages belong to;
 * a stitched segment adds nothing to it. allocated_bytes counts stitched blocks like any other.
 * stitched_bytes is the size of all live ranges.
 */
#include <stdlib.h>
#include <string.h>

#include "core/stitch.h"
#include "core/handles.h"
#include "core/pool.h"

/* A run of whole handles inside a free block of an expandable or stitched segment. */
typedef struct handle_run {
    ts_block *b;
    uintptr_t lo, hi; /* whole handles [lo, hi); the taken prefix ends at take_hi */
    uintptr_t take_hi;
} handle_run;

static int run_cmp(const void *x, const void *y)
{
    const handle_run *a = x, *b = y;
    /* Smallest holes first: they are the fragmentation; large free blocks stay whole for the
     * requests that fit them. Address breaks ties, so the choice is deterministic. */
    size_t sa = a->hi - a->lo, sb = b->hi - b->lo;
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return a->lo < b->lo ? -1 : (a->lo > b->lo);
}

/* Carve [start, start + bytes) out of free block b as a LENT block lent to `to`. Returns the
 * LENT block (b itself, narrowed). Metadata for up to two neighbours comes from spare. */
static ts_block *carve_lent(ts_block *b, uintptr_t start, size_t bytes, ts_segment *to,
                            ts_block **spare, size_t *nspare)
{
    ts_pool *p = b->seg->pool;
    pool_remove_free(p, b);
    size_t before = start - b->addr, after = b->addr + b->size - (start + bytes);
    if (before) {
        ts_block *h = spare[--*nspare];
        block_split_front(b, h, before);
        pool_insert_free(p, h);
    }
    if (after) {
        ts_block *t = spare[--*nspare];
        block_split_back(b, t, after);
        pool_insert_free(p, t);
    }
    b->state = TS_BLOCK_LENT;
    b->lent_to = to;
    return b;
}

static void stitch_destroy_segment(ts_allocator *a, ts_segment *s)
{
    free(s->lenders);
    ts_slab_free(&a->segment_slab, s);
}

/* Give a stitched segment back: its one block is free. The device was synchronised. */
static void unstitch(ts_allocator *a, ts_segment *s)
{
    ts_pool *p = s->pool;
    ts_block *b = s->first;
    pool_remove_free(p, b);
    segment_unmap_handles(a, s, s->addr, s->addr + s->size, true);
    a->be.vm_release(a->be.ctx, s->addr, s->size);
    for (size_t i = 0; i < s->nlenders; i++) {
        ts_block *l = s->lenders[i];
        l->lent_to = NULL;
        l->state = TS_BLOCK_FREE;
        block_merge(a, l, l->prev);
        block_merge(a, l, l->next);
        pool_insert_free(p, l);
    }
    ts_tree_remove(&a->segments, &s->node);
    gauge_set(a, &a->st->stitched_bytes, a->st->stitched_bytes - (int64_t)s->size);
    counter_add(a, &a->st->num_device_free, 1);
    a->stitched_segments--;
    block_delete(a, b);
    stitch_destroy_segment(a, s);
    a->observe_now = true;
}

/* Give back every stitched segment that is entirely free. synced: the caller already waited
 * for the device. Giving one back can free another (whose pages it had borrowed), so this goes
 * round until nothing more can go. Returns how many were given back. */
size_t stitch_release_free(ts_allocator *a, bool synced)
{
    size_t released = 0, before;
    do {
        before = released;
        ts_node *n = ts_tree_first(&a->segments);
        while (n && a->stitched_segments > 0) {
            ts_node *next = ts_tree_next(n);
            ts_segment *s = segment_of_node(n);
            if (s->kind == TS_SEGMENT_STITCHED && s->nblocks == 1 &&
                s->first->state == TS_BLOCK_FREE) {
                if (!synced) {
                    if (backend_capturing(a))
                        return released;
                    backend_enter(a);
                    if (a->be.synchronize && a->be.synchronize(a->be.ctx) != TS_OK)
                        return released;
                    synced = true;
                }
                unstitch(a, s);
                released++;
            }
            n = next;
        }
    } while (released > before && a->stitched_segments > 0);
    return released;
}

ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    if (!a->cfg.stitching || size < a->cfg.stitch_min_block || p->vm_free < size)
        return NULL; /* (vm_free: all free virtual-memory bytes; whole handles are fewer) */
    if (a->stitched_segments >= a->cfg.stitch_max_ranges && stitch_release_free(a, false) == 0)
        return NULL; /* at the bound, and every range is in use */

    /* Whole free handles in free blocks of this stream's virtual-memory segments. */
    size_t cap = 64, nruns = 0, total = 0;
    handle_run *runs = malloc(cap * sizeof *runs);
    if (!runs)
        return NULL;
    for (ts_node *n = ts_freeidx_find(&p->free, stream, 0); n;
         n = ts_freeidx_next_on_stream(&p->free, n)) {
        ts_block *b = block_of_node(n);
        uintptr_t lo, hi;
        if (b->seg->kind == TS_SEGMENT_PLAIN ||
            !segment_whole_handles(b->seg, b->addr, b->addr + b->size, &lo, &hi))
            continue; /* one seg_alloc, or no whole handle: nothing to lend */
        if (nruns == cap) {
            handle_run *r = realloc(runs, 2 * cap * sizeof *runs);
            if (!r)
                break;
            runs = r;
            cap *= 2;
        }
        runs[nruns++] = (handle_run){b, lo, hi, hi};
        total += hi - lo;
    }
    /* One piece would be a plain fit: best fit already said no, so this only helps when the
     * free handles are spread over at least two blocks. */
    if (total < size || nruns < 2) {
        free(runs);
        return NULL;
    }
    qsort(runs, nruns, sizeof *runs, run_cmp);
    size_t used = 0, taken = 0, nhandles = 0;
    while (taken < size) {
        handle_run *r = &runs[used++];
        /* whole handles from the run's low end, only as many as still needed */
        ts_handle_rec *h = handle_of_node(ts_tree_lower_bound(&r->b->seg->handles, r->lo, 0, 0));
        while (h && h->addr < r->hi && taken < size) {
            taken += h->size;
            r->take_hi = h->addr + h->size;
            nhandles++;
            h = handle_of_node(ts_tree_next(&h->node));
        }
    }
    const size_t stitched = taken;

    ts_segment *s = ts_slab_alloc(&a->segment_slab);
    ts_block *sb = s ? block_new(a) : NULL;
    ts_block **lenders = sb ? calloc(used, sizeof *lenders) : NULL;
    ts_block **spare = lenders ? calloc(2 * used, sizeof *spare) : NULL;
    ts_handle_rec **alias = spare ? calloc(nhandles, sizeof *alias) : NULL;
    size_t nspare = 0, nalias = 0;
    for (size_t i = 0; alias && i < 2 * used && (spare[i] = block_new(a)); i++)
        nspare++;
    for (size_t i = 0; alias && i < nhandles && (alias[i] = ts_slab_alloc(&a->handle_slab)); i++)
        nalias++;
    uintptr_t va = 0;
    if (alias && nspare == 2 * used && nalias == nhandles) {
        backend_enter(a);
        if (a->be.vm_reserve(a->be.ctx, stitched, &va) != TS_OK)
            va = 0;
    }
    size_t mapped = 0;
    bool failed = false;
    if (va) {
        uintptr_t off = 0;
        for (size_t r = 0; r < used && !failed; r++) {
            ts_handle_rec *h =
                handle_of_node(ts_tree_lower_bound(&runs[r].b->seg->handles, runs[r].lo, 0, 0));
            for (; h && h->addr < runs[r].take_hi; h = handle_of_node(ts_tree_next(&h->node))) {
                if (a->be.vm_map(a->be.ctx, va + off, h->size, h->handle) != TS_OK) {
                    failed = true;
                    break;
                }
                alias[mapped]->addr = va + off;
                alias[mapped]->size = h->size;
                alias[mapped]->handle = h->handle;
                alias[mapped]->node.k0 = va + off;
                off += h->size;
                mapped++;
            }
        }
    }
    if (!va || mapped < nhandles) {
        /* undo everything: no state has changed yet */
        for (size_t i = 0; i < mapped; i++)
            a->be.vm_unmap(a->be.ctx, alias[i]->addr, alias[i]->size);
        if (va)
            a->be.vm_release(a->be.ctx, va, stitched);
        for (size_t i = 0; i < nspare; i++)
            block_delete(a, spare[i]);
        for (size_t i = 0; i < nalias; i++)
            ts_slab_free(&a->handle_slab, alias[i]);
        free(alias);
        free(spare);
        free(lenders);
        if (sb)
            block_delete(a, sb);
        if (s)
            ts_slab_free(&a->segment_slab, s);
        free(runs);
        return NULL;
    }

    /* Committed: the handles are now also mapped at [va, va + stitched). */
    for (size_t r = 0; r < used; r++)
        lenders[r] = carve_lent(runs[r].b, runs[r].lo, runs[r].take_hi - runs[r].lo, s, spare,
                                &nspare);
    for (size_t i = 0; i < nspare; i++)
        block_delete(a, spare[i]);
    for (size_t i = 0; i < nhandles; i++)
        ts_tree_insert(&s->handles, &alias[i]->node);
    free(alias);
    free(spare);
    free(runs);

    segment_install(a, s, va, stitched, stream, p, TS_SEGMENT_STITCHED, sb);
    s->page_size = lenders[0]->seg->page_size;
    s->lenders = lenders;
    s->nlenders = used;
    s->stitch_serial = ++a->stitch_serial;
    sb->state = TS_BLOCK_FREE; /* not in the free tree: it goes straight to the request */
    for (size_t r = 0; r < used; r++) /* its pages were last freed when its latest lender was */
        if (lenders[r]->free_epoch > sb->free_epoch)
            sb->free_epoch = lenders[r]->free_epoch;

    a->stitched_segments++;
    counter_add(a, &a->st->num_stitches, 1);
    counter_add(a, &a->st->num_device_alloc, 1);
    gauge_set(a, &a->st->stitched_bytes, a->st->stitched_bytes + (int64_t)s->size);
    a->observe_now = true;
    return sb;
}

/* Teardown: unmap a stitched range's aliases (the handles belong to other segments). */
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory)
{
    if (release_memory) {
        segment_unmap_handles(a, s, s->addr, s->addr + s->size, true);
        a->be.vm_release(a->be.ctx, s->addr, s->size);
    }
    free(s->lenders);
    s->lenders = NULL;
}
