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
 * Growing in place: a range's virtual reservation has headroom after what is mapped (an eighth of
 * the range). When a request fits no free block but a range's free last block plus that headroom
 * would hold it, only the missing pages are lent and mapped at the range's end, instead of a
 * new range mapping every page of the request: tensors whose sizes drift up a little each step
 * then cost a map or two per step, not one per page. Lending stays acyclic (stitch_serial), so
 * every range can still be given back.
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

/* A run of whole pages inside a free block of an expandable or stitched segment. A page may be
 * part of a larger handle: it is lent as that part (CUDA maps a handle from any whole page of
 * it, and in several places at once), so how a segment cut its memory into handles decides how
 * it gives memory back, never what it can lend. */
typedef struct handle_run {
    ts_block *b;
    uintptr_t lo, hi; /* whole pages [lo, hi); the taken prefix is [lo, take_hi) */
    uintptr_t take_hi;
} handle_run;

/* The runs one stitch may take pages from (every free block of the stream holding a whole
 * page, smallest first), and the free last block of a stitched range that could grow in place
 * to serve the request. */
typedef struct stitch_runs {
    handle_run *v;
    size_t n, cap;
    ts_block *tail;
} stitch_runs;

/* Metadata a stitch needs before it changes anything: two neighbour blocks per run it carves
 * (spare) and one record per mapping it makes (alias: a handle, or the part of one in a run). */
typedef struct stitch_meta {
    ts_block **spare;
    ts_handle_rec **alias;
    size_t nspare, nalias;
} stitch_meta;

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

/* Bytes a stitched range's reservation holds beyond what is mapped in it. */
static size_t stitch_headroom(const ts_segment *s)
{
    return s->va_size - s->size;
}

/* Could tail (free, the last block of a stitched range) grow in place to size bytes, and would it
 * need fewer bytes than the best candidate so far? The most that is already there wins: it maps
 * the fewest pages. */
static bool tail_better(const ts_block *tail, size_t size, const ts_block *best)
{
    if (tail->seg->kind != TS_SEGMENT_STITCHED || tail->next || tail->size >= size ||
        tail->size + stitch_headroom(tail->seg) < size)
        return false;
    return !best || tail->size > best->size || (tail->size == best->size && tail->addr < best->addr);
}

/* Gather the runs of whole free pages in this stream's free blocks, and the best range to grow
 * in place for size bytes. false when host memory ran out (r->v is then freed). */
static bool runs_gather(ts_pool *p, size_t size, uint64_t stream, stitch_runs *r)
{
    r->cap = 64;
    r->n = 0;
    r->tail = NULL;
    r->v = malloc(r->cap * sizeof *r->v);
    if (!r->v)
        return false;
    for (ts_node *n = ts_freeidx_find(&p->free, stream, 0); n;
         n = ts_freeidx_next_on_stream(&p->free, n)) {
        ts_block *b = block_of_node(n);
        if (b->seg->kind == TS_SEGMENT_PLAIN)
            continue; /* one seg_alloc: nothing to lend */
        if (tail_better(b, size, r->tail))
            r->tail = b;
        uintptr_t lo, hi;
        if (!segment_whole_pages(b->seg, b->addr, b->addr + b->size, &lo, &hi))
            continue; /* no whole page */
        if (r->n == r->cap) {
            handle_run *v = realloc(r->v, 2 * r->cap * sizeof *v);
            if (!v)
                break; /* fewer runs: still a consistent choice */
            r->v = v;
            r->cap *= 2;
        }
        r->v[r->n++] = (handle_run){b, lo, hi, lo};
    }
    qsort(r->v, r->n, sizeof *r->v, run_cmp);
    return true;
}

/* May a range with serial `serial` borrow pages from b's segment? A range borrows only from
 * expandable segments and from ranges made (or last renumbered) before it, so lending is acyclic
 * and every range can eventually be given back. `self` is never a lender to itself. */
static bool run_lendable(const handle_run *run, const ts_segment *self, uint64_t serial)
{
    const ts_segment *seg = run->b->seg;
    return seg != self && (seg->kind == TS_SEGMENT_EXPANDABLE || seg->stitch_serial < serial);
}

/* How many mappings [lo, hi) of seg is cut into: one per handle (or alias) it touches. */
static size_t run_pieces(ts_segment *seg, uintptr_t lo, uintptr_t hi)
{
    size_t n = 0;
    for (ts_handle_rec *h = segment_handle_at(seg, lo); h && h->addr < hi;
         h = handle_of_node(ts_tree_next(&h->node)))
        n++;
    return n;
}

/* Take whole pages, smallest runs first, from the low end of each lendable run, until at least
 * need bytes are taken. Returns the bytes taken (less than need when the runs hold too few) and
 * sets the runs used and the mappings the taken pages need; the taken runs are those with
 * take_hi > lo. */
static size_t runs_take(stitch_runs *r, size_t need, const ts_segment *self, uint64_t serial,
                        size_t *used, size_t *nhandles)
{
    size_t taken = 0;
    *used = *nhandles = 0;
    for (size_t i = 0; i < r->n; i++) {
        handle_run *run = &r->v[i];
        run->take_hi = run->lo;
        if (taken >= need || !run_lendable(run, self, serial))
            continue;
        const size_t page = run->b->seg->page_size;
        const size_t want = (need - taken + page - 1) / page * page;
        run->take_hi = run->hi - run->lo > want ? run->lo + want : run->hi;
        taken += run->take_hi - run->lo;
        *nhandles += run_pieces(run->b->seg, run->lo, run->take_hi);
        ++*used;
    }
    return taken;
}

/* Host metadata for a stitch of `used` runs and nhandles mappings: all or nothing. */
static bool meta_get(ts_allocator *a, size_t used, size_t nhandles, stitch_meta *m)
{
    m->nspare = m->nalias = 0;
    m->spare = calloc(2 * used, sizeof *m->spare);
    m->alias = m->spare ? calloc(nhandles, sizeof *m->alias) : NULL;
    for (size_t i = 0; m->alias && i < 2 * used && (m->spare[i] = block_new(a)); i++)
        m->nspare++;
    for (size_t i = 0; m->alias && i < nhandles && (m->alias[i] = ts_slab_alloc(&a->handle_slab));
         i++)
        m->nalias++;
    return m->alias && m->nspare == 2 * used && m->nalias == nhandles;
}

/* Give back the metadata a stitch did not consume: spare blocks left over, and the alias records
 * from index `kept` on (those before it are in a handle tree now). */
static void meta_put(ts_allocator *a, stitch_meta *m, size_t kept)
{
    for (size_t i = 0; i < m->nspare; i++)
        block_delete(a, m->spare[i]);
    for (size_t i = kept; i < m->nalias; i++)
        ts_slab_free(&a->handle_slab, m->alias[i]);
    free(m->alias);
    free(m->spare);
}

/* Map the taken pages, in run order, at va onwards, in one vm_map: a piece per handle (or
 * alias) they lie in, from the taken pages' place in it, filling one alias record each. Returns
 * how many were mapped: all of them, or none when the device refused (vm_map maps all or
 * nothing). */
static size_t runs_map(ts_allocator *a, const stitch_runs *r, uintptr_t va, stitch_meta *m)
{
    ts_vm_piece *pieces = malloc(m->nalias * sizeof *pieces);
    if (!pieces)
        return 0;
    size_t k = 0;
    uintptr_t off = 0;
    for (size_t i = 0; i < r->n; i++) {
        const handle_run *run = &r->v[i];
        ts_handle_rec *h = run->take_hi > run->lo ? segment_handle_at(run->b->seg, run->lo) : NULL;
        for (; h && h->addr < run->take_hi; h = handle_of_node(ts_tree_next(&h->node))) {
            const uintptr_t lo = h->addr > run->lo ? h->addr : run->lo;
            const uintptr_t hi =
                h->addr + h->size < run->take_hi ? h->addr + h->size : run->take_hi;
            ts_handle_rec *al = m->alias[k];
            pieces[k++] = (ts_vm_piece){hi - lo, h->handle, h->offset + (lo - h->addr)};
            al->addr = va + off;
            al->size = hi - lo;
            al->handle = h->handle;
            al->offset = h->offset + (lo - h->addr);
            al->node.k0 = va + off;
            off += hi - lo;
        }
    }
    backend_enter(a);
    const bool ok = k > 0 && a->be.vm_map(a->be.ctx, va, pieces, k) == TS_OK;
    free(pieces);
    return ok ? k : 0;
}

static void aliases_unmap(ts_allocator *a, stitch_meta *m, size_t mapped)
{
    for (size_t i = 0; i < mapped; i++)
        a->be.vm_unmap(a->be.ctx, m->alias[i]->addr, m->alias[i]->size);
}

/* Carve [start, start + bytes) out of free block b as a LENT block lent to `to`. Returns the
 * LENT block (b itself, narrowed). Metadata for up to two neighbours comes from m's spares. */
static ts_block *carve_lent(ts_block *b, uintptr_t start, size_t bytes, ts_segment *to,
                            stitch_meta *m)
{
    ts_pool *p = b->seg->pool;
    pool_remove_free(p, b);
    size_t before = start - b->addr, after = b->addr + b->size - (start + bytes);
    if (before) {
        ts_block *h = m->spare[--m->nspare];
        block_split_front(b, h, before);
        pool_insert_free(p, h);
    }
    if (after) {
        ts_block *t = m->spare[--m->nspare];
        block_split_back(b, t, after);
        pool_insert_free(p, t);
    }
    b->state = TS_BLOCK_LENT;
    b->lent_to = to;
    return b;
}

/* Committed: lend the taken pages to s (their blocks become LENT, listed from lenders[0] on),
 * and enter the nhandles aliases in s's handle tree. Returns the latest free epoch among the
 * lenders: the pages were last freed when the latest of them was. */
static uint64_t runs_lend(ts_allocator *a, stitch_runs *r, ts_segment *s, ts_block **lenders,
                          stitch_meta *m, size_t nhandles)
{
    uint64_t epoch = 0;
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        handle_run *run = &r->v[i];
        if (run->take_hi == run->lo)
            continue;
        ts_block *l = carve_lent(run->b, run->lo, run->take_hi - run->lo, s, m);
        /* In the history the pages leave their segment (and appear in s, through the backend's
         * map events): a snapshot lists each byte once, where it is in use. */
        TS_HISTORY_NOTE(a, TESSERA_EV_SEGMENT_UNMAP, l->addr, l->size, l->seg->stream, 0);
        if (l->free_epoch > epoch)
            epoch = l->free_epoch;
        lenders[k++] = l;
    }
    for (size_t i = 0; i < nhandles; i++)
        ts_tree_insert(&s->handles, &m->alias[i]->node);
    return epoch;
}

/* Retire s, a live range whose one block is free: its lenders become free again and merge with
 * their neighbours, each as recent as the range's block (the pages were last used through the
 * range), and s leaves the segment tree for the retired list. Its aliases stay mapped: unmapping
 * is not ordered with device work, so it waits for a synchronised release (stitch_release_free).
 * No driver call. A lender that was another range's and now leaves that range entirely free is
 * queued in turn (lending is acyclic, so this ends). */
static void stitch_retire(ts_allocator *a, ts_segment *s)
{
    ts_pool *p = s->pool;
    ts_block *b = s->first;
    const uint64_t epoch = b->free_epoch;
    pool_remove_free(p, b);
    for (size_t i = 0; i < s->nlenders; i++) {
        ts_block *l = s->lenders[i];
        TS_HISTORY_NOTE(a, TESSERA_EV_SEGMENT_MAP, l->addr, l->size, l->seg->stream, 0);
        l->lent_to = NULL;
        l->state = TS_BLOCK_FREE;
        if (epoch > l->free_epoch)
            l->free_epoch = epoch;
        block_merge(a, l, l->prev);
        block_merge(a, l, l->next);
        pool_insert_free(l->seg->pool, l);
        if (l->seg->kind == TS_SEGMENT_STITCHED && !l->prev && !l->next &&
            !l->seg->retire_state) {
            l->seg->retire_state = 1;
            l->seg->retire_link = a->retire_queue;
            a->retire_queue = l->seg;
        }
    }
    free(s->lenders);
    s->lenders = NULL;
    s->nlenders = 0;
    ts_tree_remove(&a->segments, &s->node);
    block_delete(a, b);
    s->first = NULL;
    s->nblocks = 0;
    gauge_set(a, &a->st->stitched_bytes, a->st->stitched_bytes - (int64_t)s->size);
    a->stitched_segments--;
    s->retire_state = 2;
    s->retire_link = a->retired;
    a->retired = s;
    a->retired_ranges++;
    a->observe_now = true;
}

/* Invariant: nothing is placed between a range's queueing and this call (the allocator calls it
 * after every free and fence completion, before any request is placed), so a queued range is
 * still entirely free. */
void stitch_retire_queued(ts_allocator *a)
{
    while (a->retire_queue) {
        ts_segment *s = a->retire_queue;
        a->retire_queue = s->retire_link;
        s->retire_link = NULL;
        s->retire_state = 0;
        stitch_retire(a, s);
    }
}

/* Unmap a retired range's aliases and give its address range back. The device was
 * synchronised. */
static void stitch_unmap_retired(ts_allocator *a, ts_segment *s)
{
    segment_unmap_handles(a, s, s->addr, s->addr + s->size, true);
    a->be.vm_release(a->be.ctx, s->addr, s->va_size);
    counter_add(a, &a->st->num_device_free, 1);
    ts_slab_free(&a->segment_slab, s);
}

size_t stitch_release_free(ts_allocator *a, bool synced)
{
    stitch_retire_queued(a);
    if (!a->retired)
        return 0;
    if (!synced) {
        if (backend_capturing(a))
            return 0;
        backend_enter(a);
        if (a->be.synchronize && a->be.synchronize(a->be.ctx) != TS_OK)
            return 0;
    }
    size_t released = 0;
    while (a->retired) {
        ts_segment *s = a->retired;
        a->retired = s->retire_link;
        stitch_unmap_retired(a, s);
        released++;
    }
    a->retired_ranges = 0;
    a->observe_now = true;
    return released;
}

/* Does any block of s lend its pages to another range? */
static bool segment_lends(const ts_segment *s)
{
    for (const ts_block *b = s->first; b; b = b->next)
        if (b->state == TS_BLOCK_LENT)
            return true;
    return false;
}

/* Grow the stitched range whose free last block is r->tail to serve size bytes: lend only the
 * missing pages and map them in the range's headroom, right after its end. Returns the grown
 * block (out of the free set), or NULL with nothing changed. */
static ts_block *stitch_grow(ts_allocator *a, ts_pool *p, size_t size, stitch_runs *r)
{
    ts_block *tail = r->tail;
    ts_segment *s = tail->seg;
    /* A range that lends nothing has no range depending on it: it may borrow from any other
     * range, and is renumbered as the newest when it does. */
    const bool renumber = !segment_lends(s);
    const uint64_t serial = renumber ? UINT64_MAX : s->stitch_serial;
    size_t used, nhandles;
    const size_t grown = runs_take(r, size - tail->size, s, serial, &used, &nhandles);
    if (grown < size - tail->size || grown > stitch_headroom(s))
        return NULL; /* too few lendable pages, or more than the headroom holds */

    stitch_meta m;
    bool ok = meta_get(a, used, nhandles, &m);
    ts_block **lenders = ok ? realloc(s->lenders, (s->nlenders + used) * sizeof *lenders) : NULL;
    if (lenders)
        s->lenders = lenders; /* larger than needed until the growth commits: harmless */
    size_t mapped = lenders ? runs_map(a, r, s->addr + s->size, &m) : 0;
    if (!lenders || mapped < nhandles) {
        aliases_unmap(a, &m, mapped);
        meta_put(a, &m, 0);
        return NULL;
    }

    /* Committed: the pages are now also mapped at [s->addr + s->size, + grown). */
    uint64_t epoch = runs_lend(a, r, s, s->lenders + s->nlenders, &m, nhandles);
    meta_put(a, &m, nhandles);
    s->nlenders += used;
    if (renumber)
        s->stitch_serial = ++a->stitch_serial;
    pool_remove_free(p, tail);
    tail->size += grown;
    s->size += grown;
    s->mapped += grown;
    if (epoch > tail->free_epoch)
        tail->free_epoch = epoch;

    counter_add(a, &a->st->num_device_alloc, 1);
    gauge_set(a, &a->st->stitched_bytes, a->st->stitched_bytes + (int64_t)grown);
    a->observe_now = true;
    return tail;
}

/* A new stitched range of size bytes (rounded up to whole pages) over the taken pages, with
 * as much virtual headroom again for growing in place. Returns its one block, FREE and out of the
 * free set, or NULL with nothing changed. */
static ts_block *stitch_new(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream,
                            stitch_runs *r)
{
    size_t used, nhandles;
    const size_t stitched = runs_take(r, size, NULL, UINT64_MAX, &used, &nhandles);
    /* One piece would be a plain fit: best fit already said no, so this only helps when the
     * free pages are spread over at least two blocks. */
    if (stitched < size || r->n < 2)
        return NULL;
    /* Headroom for drift: an eighth of the range, in whole pages. It costs no memory and no
     * call, only address space. Kept small on purpose: a range grows in place only while its free
     * end is most of the request, so a range that another, smaller request has taken the front
     * of is not grown into what would be a new range in disguise (as many maps, and its pages
     * borrowed for longer). */
    const size_t page = r->v[0].b->seg->page_size;
    const size_t va_size = stitched + (stitched / 8 + page - 1) / page * page;

    stitch_meta m;
    bool ok = meta_get(a, used, nhandles, &m);
    ts_segment *s = ok ? ts_slab_alloc(&a->segment_slab) : NULL;
    ts_block *sb = s ? block_new(a) : NULL;
    ts_block **lenders = sb ? calloc(used, sizeof *lenders) : NULL;
    uintptr_t va = 0;
    if (lenders) {
        backend_enter(a);
        if (a->be.vm_reserve(a->be.ctx, va_size, &va) != TS_OK)
            va = 0;
    }
    size_t mapped = va ? runs_map(a, r, va, &m) : 0;
    if (!va || mapped < nhandles) {
        /* undo everything: no state has changed yet */
        aliases_unmap(a, &m, mapped);
        if (va)
            a->be.vm_release(a->be.ctx, va, va_size);
        meta_put(a, &m, 0);
        free(lenders);
        if (sb)
            block_delete(a, sb);
        if (s)
            ts_slab_free(&a->segment_slab, s);
        return NULL;
    }

    /* Committed: the pages are now also mapped at [va, va + stitched). */
    uint64_t epoch = runs_lend(a, r, s, lenders, &m, nhandles);
    meta_put(a, &m, nhandles);
    segment_install(a, s, va, stitched, stream, p, TS_SEGMENT_STITCHED, sb);
    s->va_size = va_size;
    s->page_size = lenders[0]->seg->page_size;
    s->lenders = lenders;
    s->nlenders = used;
    s->stitch_serial = ++a->stitch_serial;
    sb->state = TS_BLOCK_FREE; /* not in the free tree: it goes straight to the request */
    sb->free_epoch = epoch;

    a->stitched_segments++;
    counter_add(a, &a->st->num_stitches, 1);
    counter_add(a, &a->st->num_device_alloc, 1);
    gauge_set(a, &a->st->stitched_bytes, a->st->stitched_bytes + (int64_t)s->size);
    a->observe_now = true;
    return sb;
}

size_t stitch_free_pages(ts_pool *p, uint64_t stream)
{
    /* the bytes runs_gather would gather, counted without gathering */
    size_t bytes = 0;
    for (ts_node *n = ts_freeidx_find(&p->free, stream, 0); n;
         n = ts_freeidx_next_on_stream(&p->free, n)) {
        const ts_block *b = block_of_node(n);
        uintptr_t lo, hi;
        if (b->seg->kind != TS_SEGMENT_PLAIN &&
            segment_whole_pages(b->seg, b->addr, b->addr + b->size, &lo, &hi))
            bytes += hi - lo;
    }
    return bytes;
}

ts_block *stitch_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    if (!a->cfg.stitching || size < a->cfg.stitch_min_block || p->vm_free < size)
        return NULL; /* (vm_free: all free virtual-memory bytes; whole pages are fewer) */

    stitch_runs r;
    if (!runs_gather(p, size, stream, &r))
        return NULL;
    /* A free range end that the request outgrew: map only what is missing, in place. */
    ts_block *b = r.tail ? stitch_grow(a, p, size, &r) : NULL;
    if (!b && a->stitched_segments + a->retired_ranges >= a->cfg.stitch_max_ranges) {
        /* At the bound: unmap the retired ranges (one synchronise), and look again; none
         * retired: every range is in use, refuse. */
        free(r.v);
        if (stitch_release_free(a, false) == 0 || !runs_gather(p, size, stream, &r))
            return NULL;
    }
    if (!b)
        b = stitch_new(a, p, size, stream, &r);
    free(r.v);
    return b;
}

/* Teardown: unmap a stitched range's aliases (the handles belong to other segments). */
void stitch_destroy(ts_allocator *a, ts_segment *s, bool release_memory)
{
    if (release_memory) {
        segment_unmap_handles(a, s, s->addr, s->addr + s->size, true);
        a->be.vm_release(a->be.ctx, s->addr, s->va_size);
    }
    free(s->lenders);
    s->lenders = NULL;
}

void stitch_forget_retired(ts_allocator *a, bool release_memory)
{
    while (a->retired) {
        ts_segment *s = a->retired;
        a->retired = s->retire_link;
        stitch_destroy(a, s, release_memory);
        ts_node *n;
        while ((n = ts_tree_first(&s->handles)) != NULL) {
            ts_tree_remove(&s->handles, n);
            ts_slab_free(&a->handle_slab, handle_of_node(n));
        }
        ts_slab_free(&a->segment_slab, s);
    }
    a->retired_ranges = 0;
    a->retire_queue = NULL;
}
