/* What the core knows of memory it does not serve: allocations the program holds from the driver
 * directly (managed memory, pools the program configures itself), counted and capped with the
 * segments; and the stream-ordered allocations it does serve, for a program's pool queries and
 * for streams that go away.
 *
 * The address -> size table of driver memory is a ts_ptrmap: it grows (heap) only when more such
 * allocations are live than ever before, never on tessera's own allocation path.
 */
#include "core/internal.h"
#include "core/release.h"

int ts_allocator_driver_reserve(ts_allocator *a, size_t bytes, bool capped)
{
    allocator_lock(a);
    int rc = TS_OK;
    if (capped && !cap_allows(a, bytes) && !backend_capturing(a))
        release_cached_blocks(a); /* the cache gives way, as it does to its own requests */
    if (capped && !cap_allows(a, bytes)) {
        counter_add(a, &a->st->num_ooms, 1);
        a->observe_now = true;
        rc = TS_ENOMEM;
    } else {
        a->driver_bytes += bytes;
        gauge_set(a, &a->st->driver_bytes, (int64_t)a->driver_bytes);
    }
    allocator_unlock(a);
    return rc;
}

void ts_allocator_driver_unreserve(ts_allocator *a, size_t bytes)
{
    allocator_lock(a);
    a->driver_bytes -= bytes < a->driver_bytes ? bytes : a->driver_bytes;
    gauge_set(a, &a->st->driver_bytes, (int64_t)a->driver_bytes);
    allocator_unlock(a);
}

int ts_allocator_driver_record(ts_allocator *a, uintptr_t addr, size_t bytes)
{
    allocator_lock(a);
    /* bytes + 1: a value never NULL, even for a size the driver accepted as 0 */
    int rc = addr && ts_ptrmap_put(&a->driver_live, addr, (void *)(bytes + 1)) == 0 ? TS_OK
                                                                                 : TS_ENOMEM;
    allocator_unlock(a);
    if (rc != TS_OK)
        ts_allocator_driver_unreserve(a, bytes);
    return rc;
}

int ts_allocator_driver_forget(ts_allocator *a, uintptr_t addr, size_t *bytes)
{
    allocator_lock(a);
    void *v = addr ? ts_ptrmap_del(&a->driver_live, addr) : NULL;
    size_t n = v ? (size_t)v - 1 : 0;
    if (v) {
        a->driver_bytes -= n;
        gauge_set(a, &a->st->driver_bytes, (int64_t)a->driver_bytes);
    }
    allocator_unlock(a);
    if (bytes)
        *bytes = n;
    return v ? TS_OK : TS_ENOTFOUND;
}

/* What a pool's reserved memory is, for the stream-ordered allocations: the memory of the
 * segments made for a stream (a stream's blocks come only from those), mapped, its free cached
 * blocks included; a stitched range maps pages of those and is not counted again. Walked at a
 * query: pool queries are rare, the allocation path keeps no count of it. */
static size_t tagged_reserved(const ts_allocator *a)
{
    size_t r = 0;
    for (ts_node *n = ts_tree_first(&a->segments); n; n = ts_tree_next(n)) {
        const ts_segment *seg = segment_of_node(n);
        if (seg->stream && seg->kind != TS_SEGMENT_STITCHED)
            r += seg->mapped;
    }
    return r;
}

void ts_allocator_stream_usage(ts_allocator *a, bool reset_used_high, bool reset_reserved_high,
                               ts_stream_usage *out)
{
    allocator_lock(a);
    /* tagged.reserved counts live block bytes (ts_malloc_ex, ts_free); reserved memory holds them
     * and what is cached beside them. Its high mark is the highest of the two seen: the block
     * bytes at every allocation, the memory at every query. */
    size_t reserved = tagged_reserved(a);
    if (reserved < a->tagged.reserved)
        reserved = a->tagged.reserved;
    if (reset_used_high)
        a->tagged.used_high = a->tagged.used;
    if (reset_reserved_high || reserved > a->tagged.reserved_high)
        a->tagged.reserved_high = reserved;
    if (out) {
        *out = a->tagged;
        out->reserved = reserved;
    }
    allocator_unlock(a);
}

void ts_allocator_stream_retire(ts_allocator *a, uintptr_t stream)
{
    if (!stream)
        return;
    allocator_lock(a);
    /* Blocks freed in the stream's own order carry epoch 0: a new stream given the same handle
     * must not take them before an order point. */
    ts_pool *pools[2] = {&a->small, &a->large};
    for (int i = 0; i < 2 && a->use_order; i++)
        for (ts_node *n = ts_freeidx_find(&pools[i]->free, stream, 0); n;
             n = ts_freeidx_next_on_stream(&pools[i]->free, n)) {
            ts_block *b = block_of_node(n);
            if (b->free_epoch < a->order_epoch)
                b->free_epoch = a->order_epoch;
        }
    allocator_unlock(a);
}
