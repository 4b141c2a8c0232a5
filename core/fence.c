/* Safe reuse of freed blocks, two ways.
 *
 * Stream order (reuse_fence:order, the default): a freed block is free at once, tagged with the
 * current order epoch. Handing out a block freed since the last order point first makes a new
 * one: the backend orders, on the device, all work issued afterwards after all work issued
 * before (events and stream waits; nothing at all when the program's work can only run in one
 * queue). The host never waits. docs/DESIGN.md has the rule and why it is safe.
 *
 * Fences (reuse_fence:events, sync): a freed block stays "pending" until a fence recorded after
 * its free completes.
 *
 * The shim cannot see which streams a program will use a pointer on, so every free is treated
 * like PyTorch treats a block used on another stream: it becomes reusable only once the device
 * has finished the work issued before the free. Fences are recorded lazily (at most one per
 * epoch, at the next allocation) and queried in order at every allocation. They are waited for
 * where PyTorch synchronises (release of cached blocks: empty cache, the last retry), under
 * memory pressure, and, oldest first and a few at most, when a request finds no free block while
 * enough of its pool waits for fences: a program that frees while the device still runs far
 * behind it would otherwise grow its reservation by everything in flight (seen on an H100 with
 * PyTorch, PYTORCH_NO_CUDA_MEMORY_CACHING=1: 70 GiB reserved for 16 GiB allocated).
 * Pending blocks count as active (PyTorch's active_pending_free), never as free.
 */
#include "core/fence.h"
#include "core/pool.h"

static ts_fence_rec *fence_front(ts_allocator *a)
{
    return &a->fences[a->fence_head];
}

static void fence_pop(ts_allocator *a)
{
    /* Completing the blocks a fence covers opened the stats window; releasing the fence can
     * reach the driver (cuEventDestroy), and no device call is made with the window open. */
    backend_enter(a);
    a->be.fence_release(a->be.ctx, fence_front(a)->fence);
    a->fence_head = (a->fence_head + 1) % TS_MAX_FENCES;
    a->fence_count--;
}

/* Complete every pending block freed in an epoch <= epoch. */
static void pending_complete_through(ts_allocator *a, uint64_t epoch)
{
    while (a->pending_head && a->pending_head->free_epoch <= epoch) {
        ts_block *b = a->pending_head;
        a->pending_head = b->pending_next;
        if (!a->pending_head)
            a->pending_tail = NULL;
        b->pending_next = NULL;
        a->pending_count--;
        b->seg->pool->pending_bytes -= b->size;
        block_free_complete(a, b);
    }
}

void fences_defer_free(ts_allocator *a, ts_block *b)
{
    b->state = TS_BLOCK_PENDING;
    b->free_epoch = a->epoch;
    b->pending_next = NULL;
    if (a->pending_tail)
        a->pending_tail->pending_next = b;
    else
        a->pending_head = b;
    a->pending_tail = b;
    a->pending_count++;
    b->seg->pool->pending_bytes += b->size;
    a->epoch_dirty = true;
}

/* Wait for the oldest fence (there is one) and complete the blocks it covers. Returns false
 * when the wait failed: the blocks stay pending. */
static bool fence_wait_front(ts_allocator *a)
{
    ts_fence_rec *f = fence_front(a);
    counter_add(a, &a->st->num_fence_waits, 1);
    backend_enter(a); /* after the count: counting opens the stats window */
    if (a->be.fence_wait(a->be.ctx, f->fence) != TS_OK)
        return false;
    pending_complete_through(a, f->epoch);
    fence_pop(a);
    return true;
}

/* Record a fence covering the current epoch. Returns false when none could be recorded. */
static bool fence_record_epoch(ts_allocator *a)
{
    if (!a->epoch_dirty)
        return true;
    /* Too many outstanding: wait for the oldest rather than grow without bound. */
    if (a->fence_count == TS_MAX_FENCES && !fence_wait_front(a))
        return false;
    ts_fence fence;
    backend_enter(a);
    if (a->be.fence_record(a->be.ctx, &fence) != TS_OK)
        return false; /* e.g. a graph capture is underway: try again later */
    size_t slot = (a->fence_head + a->fence_count) % TS_MAX_FENCES;
    a->fences[slot].fence = fence;
    a->fences[slot].epoch = a->epoch;
    a->fence_count++;
    a->epoch++;
    a->epoch_dirty = false;
    counter_add(a, &a->st->num_fences_recorded, 1);
    return true;
}

/* Retire fences oldest first, completing the blocks each covers. A fence the device has not
 * passed yet ends the walk, or, with wait, is waited for (num_fence_waits). */
static void fences_retire(ts_allocator *a, bool wait)
{
    while (a->fence_count > 0) {
        ts_fence_rec *f = fence_front(a);
        backend_enter(a);
        if (a->be.fence_query(a->be.ctx, f->fence) == TS_OK) {
            pending_complete_through(a, f->epoch);
            fence_pop(a);
        } else if (!wait || !fence_wait_front(a)) {
            return; /* not passed yet, or could not wait: the blocks stay pending */
        }
    }
}

void fences_process(ts_allocator *a)
{
    if (!a->use_fences || a->pending_count == 0 || backend_capturing(a))
        return;
    fence_record_epoch(a);
    fences_retire(a, false);
}

/* PyTorch's synchronize_and_free_events. */
void fences_synchronize_all(ts_allocator *a)
{
    counter_add(a, &a->st->num_sync_all_streams, 1);
    if (!a->use_fences)
        return;
    if (a->pending_count > 0 && !fence_record_epoch(a)) {
        /* No fence possible (capture underway): leave the pending blocks pending. */
        return;
    }
    fences_retire(a, true);
}

/* Forget every fence and pending block without touching the device: its memory and events are
 * gone with its context, which the backend cleans up on its side. */
void fences_drop_all(ts_allocator *a)
{
    a->fence_head = a->fence_count = 0;
    a->pending_head = a->pending_tail = NULL;
    a->pending_count = 0;
    a->small.pending_bytes = a->large.pending_bytes = 0;
    a->epoch_dirty = false;
}

bool fences_wait_oldest(ts_allocator *a, ts_pool *p, size_t size)
{
    if (!a->use_fences || p->pending_bytes < size || backend_capturing(a))
        return false;
    if (!fence_record_epoch(a) || a->fence_count == 0)
        return false;
    /* The oldest fence: the device reaches it first, so this is the shortest wait, and the work
     * queued after it keeps the device busy meanwhile. */
    size_t before = a->pending_count;
    if (!fence_wait_front(a))
        return false;
    fences_retire(a, false); /* and whatever else the device has passed meanwhile */
    return a->pending_count < before;
}

/* Under memory pressure (no new memory to be had): wait for every outstanding fence so that the
 * pending blocks become free, before anything more drastic. Not a PyTorch retry: on one stream
 * PyTorch would have had these blocks at once; tessera only waited to be sure. Returns true when
 * some block became free. */
bool fences_wait_pending(ts_allocator *a)
{
    if (!a->use_fences || a->pending_count == 0 || backend_capturing(a))
        return false;
    size_t before = a->pending_count;
    if (!fence_record_epoch(a))
        return false;
    fences_retire(a, true);
    return a->pending_count < before;
}

/* --- stream order ---------------------------------------------------------------------------- */

bool reuse_order_point(ts_allocator *a)
{
    int issued = 0;
    if (a->be.reuse_order) {
        backend_enter(a);
        if (a->be.reuse_order(a->be.ctx, &issued) != TS_OK)
            return false; /* a capture is underway: nothing may be ordered now */
    }
    a->order_epoch++;
    if (issued)
        counter_add(a, &a->st->num_fences_recorded, 1);
    return true;
}

bool reuse_ready(ts_allocator *a, const ts_block *b)
{
    if (!a->use_order || b->free_epoch != a->order_epoch)
        return true; /* fresh memory, or freed before the last order point */
    return reuse_order_point(a);
}
