/* Physical handles of virtual-memory segments (see core/handles.h). */
#include "core/handles.h"

ts_handle_rec *segment_handle_at(const ts_segment *seg, uintptr_t addr)
{
    return handle_of_node(ts_tree_floor(&seg->handles, addr, UINT64_MAX, UINT64_MAX));
}

bool segment_whole_pages(const ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                         uintptr_t *run_hi)
{
    const size_t page = seg->page_size;
    const uintptr_t first = seg->addr + (lo - seg->addr + page - 1) / page * page;
    const uintptr_t end = seg->addr + (hi - seg->addr) / page * page;
    if (first >= end)
        return false;
    *run_lo = first;
    *run_hi = end;
    return true;
}

/* The run of whole handles inside [lo, hi): [*run_lo, *run_hi), or false when there is none. */
bool segment_whole_handles(ts_segment *seg, uintptr_t lo, uintptr_t hi, uintptr_t *run_lo,
                           uintptr_t *run_hi)
{
    ts_handle_rec *h = handle_of_node(ts_tree_lower_bound(&seg->handles, lo, 0, 0));
    if (!h || h->addr + h->size > hi)
        return false;
    *run_lo = h->addr;
    uintptr_t end = h->addr;
    while (h && h->addr == end && h->addr + h->size <= hi) {
        end = h->addr + h->size;
        h = handle_of_node(ts_tree_next(&h->node));
    }
    *run_hi = end;
    return true;
}

/* Give back the handles in [lo, hi), which are whole. unmap_only: they are aliases (a stitched
 * segment's), owned elsewhere. The caller synchronised the device. */
void segment_unmap_handles(ts_allocator *a, ts_segment *seg, uintptr_t lo, uintptr_t hi,
                           bool unmap_only)
{
    backend_enter(a);
    ts_handle_rec *h = handle_of_node(ts_tree_lower_bound(&seg->handles, lo, 0, 0));
    while (h && h->addr < hi) {
        ts_handle_rec *next = handle_of_node(ts_tree_next(&h->node));
        a->be.vm_unmap(a->be.ctx, h->addr, h->size);
        if (!unmap_only)
            a->be.vm_destroy(a->be.ctx, h->handle);
        ts_tree_remove(&seg->handles, &h->node);
        ts_slab_free(&a->handle_slab, h);
        h = next;
    }
}

/* Grant the backend's peer devices access to every handle mapped in seg (vm_access): one grant
 * per run of handles mapped back to back. */
int segment_grant_handles(ts_allocator *a, ts_segment *seg)
{
    int rc = TS_OK;
    backend_enter(a);
    ts_handle_rec *h = handle_of_node(ts_tree_first(&seg->handles));
    while (h) {
        const uintptr_t lo = h->addr;
        uintptr_t hi = h->addr + h->size;
        for (h = handle_of_node(ts_tree_next(&h->node)); h && h->addr == hi;
             h = handle_of_node(ts_tree_next(&h->node)))
            hi += h->size;
        int r = a->be.vm_access(a->be.ctx, lo, hi - lo);
        if (r != TS_OK && rc == TS_OK)
            rc = r;
    }
    return rc;
}
