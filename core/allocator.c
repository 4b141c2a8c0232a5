/* The allocation and free paths, in PyTorch's order (DESIGN.md, "The malloc path"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/expandable.h"
#include "core/fence.h"
#include "core/handles.h"
#include "core/hostcache.h"
#include "core/inspect.h"
#include "core/pool.h"
#include "core/release.h"
#include "core/stitch.h"

/* --- locking ---------------------------------------------------------------------------------- */

void allocator_lock(ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
}

static void allocator_observe(ts_allocator *a)
{
    if (!a->observer)
        return;
    if (!a->observe_now && ++a->ops_since_observe < a->observer_every &&
        !(a->observe_request &&
          __atomic_load_n(a->observe_request, __ATOMIC_RELAXED) != a->observe_served))
        return;
    if (a->observe_request) /* a snapshot request is served by this refresh */
        a->observe_served = __atomic_load_n(a->observe_request, __ATOMIC_RELAXED);
    a->observe_now = false;
    a->ops_since_observe = 0;
    allocator_update_largest_free(a);
    st_open(a); /* the observer writes the segment map inside the same window */
    a->observer(a->observer_user, a);
}

void allocator_unlock(ts_allocator *a)
{
#ifdef TS_EXPENSIVE_CHECKS
    char why[256];
    if (allocator_check_locked(a, why, sizeof why) != 0) {
        fprintf(stderr, "tessera: internal error: heap check failed: %s\n", why);
        abort();
    }
#endif
    /* Pinned regions idle for pinned_idle_s go back at the next operation of any kind: a
     * pointer test while the program has no pinned memory. */
    if (__builtin_expect(a->host != NULL, 0))
        ts_hostcache_tick(a);
    allocator_observe(a);
    st_close(a);
    pthread_mutex_unlock(&a->lock);
}

/* --- create / destroy -------------------------------------------------------------------------- */

static void pool_init(ts_pool *p, bool small)
{
    memset(p, 0, sizeof *p);
    p->small = small;
    p->stat_index = small ? TESSERA_POOL_SMALL : TESSERA_POOL_LARGE;
}

ts_allocator *ts_allocator_create(const ts_config *cfg, const ts_backend *backend, int device,
                                  ts_stats_sink sink)
{
    ts_allocator *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    /* Adaptive: a brief spin before sleeping, since the mutex is held for tens of nanoseconds
     * on the cached path (a sleeping waiter costs microseconds to wake). */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    int mrc = pthread_mutex_init(&a->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (mrc != 0 || ts_ptrmap_init(&a->live, 1024) != 0) {
        free(a);
        return NULL;
    }
    if (ts_ptrmap_init(&a->driver_live, 16) != 0) {
        ts_ptrmap_destroy(&a->live);
        free(a);
        return NULL;
    }
    a->cfg = *cfg;
    a->be = *backend;
    a->device = device;
    pool_init(&a->small, true);
    pool_init(&a->large, false);
    ts_slab_init(&a->block_slab, sizeof(ts_block));
    ts_slab_init(&a->segment_slab, sizeof(ts_segment));
    ts_slab_init(&a->handle_slab, sizeof(ts_handle_rec));

    a->st = sink.stats ? sink.stats : &a->own_stats;
    a->seq = sink.seq ? sink.seq : &a->own_seq;

    size_t free_bytes = 0, total = 0;
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &free_bytes, &total) == TS_OK)
        a->device_total = total;

    /* The cap: PyTorch's memory fraction (of total memory), and tessera's memory_limit. */
    size_t cap = SIZE_MAX;
    if (a->cfg.per_process_memory_fraction < 1.0 && a->device_total > 0)
        cap = (size_t)(a->cfg.per_process_memory_fraction * (double)a->device_total);
    if (a->cfg.memory_limit > 0 && a->cfg.memory_limit < cap)
        cap = a->cfg.memory_limit;
    if (cap != SIZE_MAX) {
        a->set_fraction = true;
        a->allowed_memory_maximum = cap;
    }

    /* Stream order by default; fences only where the backend has them and the configuration
     * asks for them. */
    a->use_order = a->cfg.reuse_fence == TS_FENCE_ORDER;
    a->order_epoch = 1; /* fresh blocks carry epoch 0: never freed, nothing to order */
    a->use_fences = a->be.fence_record && a->be.fence_query && a->be.fence_wait &&
                    (a->cfg.reuse_fence == TS_FENCE_EVENTS || a->cfg.reuse_fence == TS_FENCE_SYNC);

    /* The configuration in force on this device (ts_config_resolve: the one place where
     * settings follow from each other and from the device). */
    ts_config_device dev = {0};
    size_t g = 0;
    ts_config_resolve(&a->cfg, NULL); /* a caller may pass an unresolved configuration */
    if (a->cfg.expandable_segments && ts_backend_has_vm(&a->be) && /* asked only when needed */
        a->be.vm_granularity(a->be.ctx, &g) == TS_OK)
        dev.vm_granularity = g;
    ts_config_resolve(&a->cfg, &dev);
    if (a->cfg.expandable_segments) {
        a->vm_granularity = dev.vm_granularity;
        a->handle_per_page = a->cfg.handle_policy == TS_HANDLES_PAGE;
    }

    tessera_device_stats *st = a->st;
    gauge_set(a, &st->max_split_size,
              a->cfg.max_split_size == SIZE_MAX ? -1 : (int64_t)a->cfg.max_split_size);
    gauge_set(a, &st->memory_limit_bytes, (int64_t)ts_allocator_cap(a));
    gauge_set(a, &st->device_total_bytes, (int64_t)a->device_total);
    st_close(a);
    return a;
}

static void allocator_free_segment_metadata(ts_allocator *a, ts_segment *seg)
{
    ts_block *b = seg->first;
    while (b) {
        ts_block *next = b->next;
        block_delete(a, b);
        b = next;
    }
    ts_node *n;
    while ((n = ts_tree_first(&seg->handles)) != NULL) {
        ts_tree_remove(&seg->handles, n);
        ts_slab_free(&a->handle_slab, handle_of_node(n));
    }
    free(seg->lenders);
    ts_slab_free(&a->segment_slab, seg);
}

void ts_allocator_destroy(ts_allocator *a, bool release_memory)
{
    if (!a)
        return;
    pthread_mutex_lock(&a->lock);
    if (a->paused) {
        /* its handles are gone already, and the records name handles that no longer exist:
         * nothing of them goes to the device (the context's own teardown takes the ranges) */
        release_memory = false;
        pause_drop(a);
    }
    if (release_memory)
        fences_synchronize_all(a);
    else
        fences_drop_all(a);
    ts_hostcache_teardown(a, release_memory);
    stitch_forget_retired(a, release_memory); /* their aliases first: the pages are others' */
    /* Remove each segment from the tree before freeing it: an in-order walk would climb
     * through parents already freed. */
    ts_node *n;
    while ((n = ts_tree_first(&a->segments)) != NULL) {
        ts_segment *seg = segment_of_node(n);
        ts_tree_remove(&a->segments, n);
        if (release_memory) {
            backend_enter(a);
            if (seg->kind == TS_SEGMENT_PLAIN)
                a->be.seg_free(a->be.ctx, seg->addr, seg->size);
            else if (seg->kind == TS_SEGMENT_STITCHED)
                stitch_destroy(a, seg, true);
            else
                expandable_destroy_segment(a, seg, true);
        }
        allocator_free_segment_metadata(a, seg);
    }
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    ts_ptrmap_destroy(&a->live);
    ts_ptrmap_destroy(&a->driver_live);
    ts_slab_destroy(&a->block_slab);
    ts_slab_destroy(&a->segment_slab);
    ts_slab_destroy(&a->handle_slab);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

static void stat_to_zero(ts_allocator *a, tessera_stat *s)
{
    if (s->current > 0)
        stat_decrease(a, s, s->current);
    else if (s->current < 0)
        stat_increase(a, s, -s->current);
}

void ts_allocator_forget_all(ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    fences_drop_all(a);
    stitch_forget_retired(a, false);
    ts_node *n;
    while ((n = ts_tree_first(&a->segments)) != NULL) {
        ts_tree_remove(&a->segments, n);
        allocator_free_segment_metadata(a, segment_of_node(n));
    }
    /* every block went with its segment: the indexes are empty */
    memset(&a->small.free, 0, sizeof a->small.free);
    memset(&a->small.unmapped, 0, sizeof a->small.unmapped);
    memset(&a->large.free, 0, sizeof a->large.free);
    memset(&a->large.unmapped, 0, sizeof a->large.unmapped);
    memset(a->live.slots, 0, (a->live.mask + 1) * sizeof *a->live.slots);
    a->live.count = 0;
    memset(a->driver_live.slots, 0, (a->driver_live.mask + 1) * sizeof *a->driver_live.slots);
    a->driver_live.count = 0;
    a->driver_bytes = 0; /* the driver's memory of the context went with it */
    gauge_set(a, &a->st->driver_bytes, 0);
    a->tagged.used = a->tagged.reserved = 0;
    a->total_allocated_memory = 0;
    a->stitched_segments = 0;
    a->peer_devices = 0; /* peer access ends with the context */
    tessera_device_stats *st = a->st;
#define ZERO_ARRAY(name, unit, help)                                                               \
    for (int i = 0; i < TESSERA_POOL_COUNT; i++)                                                   \
        stat_to_zero(a, &st->name[i]);
    TESSERA_STAT_ARRAYS(ZERO_ARRAY)
#undef ZERO_ARRAY
    ts_hostcache_teardown(a, false);
#define ZERO_SINGLE(name, help) stat_to_zero(a, &st->name);
    TESSERA_STAT_SINGLES(ZERO_SINGLE)
#undef ZERO_SINGLE
    gauge_set(a, &st->largest_free_block_bytes, 0);
    gauge_set(a, &st->stitched_bytes, 0);
    a->observe_now = true;
    allocator_observe(a);
    st_close(a);
    pthread_mutex_unlock(&a->lock);
}

void ts_note_passthrough(ts_allocator *a)
{
    allocator_lock(a);
    counter_add(a, &a->st->num_passthrough_calls, 1);
    allocator_unlock(a);
}

size_t ts_allocator_cap(const ts_allocator *a)
{
    return a->set_fraction ? a->allowed_memory_maximum : 0;
}

/* --- the allocation path -------------------------------------------------------------------- */

/* Stitched ranges found entirely free (by a free, or a fence that completed) give their pages
 * back before anything is placed: a range never outlives the blocks it served, so the layout at
 * the end of a repeated step does not depend on the ranges of the steps before it. */
static void retire_free_ranges(ts_allocator *a)
{
    if (a->retire_queue)
        stitch_retire_queued(a);
}

/* PyTorch's alloc_block: a new segment (or expandable mapping) for the request. */
static ts_block *alloc_block(ts_allocator *a, ts_pool *p, size_t size, size_t alloc_size,
                             uint64_t stream, bool is_retry)
{
    if (is_retry)
        counter_add(a, &a->st->num_alloc_retries, 1);
    if (a->cfg.expandable_segments) {
        if (!cap_allows(a, alloc_size))
            return NULL;
        return expandable_alloc(a, p, size, stream);
    }
    return segment_new_plain(a, p, alloc_size, stream);
}

/* Under pressure, with handles larger than a page: a request that the free pages on its stream
 * nearly hold (a stitch lacks some) and the device cannot serve whole: map only what the pages
 * lack, then stitch them and it. Without it, the memory lacking would have to come from giving
 * back free pages, which such a handle allows only when it is free whole. */
static ts_block *stitch_topped(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    /* (a handle per page: any free page can go back, and the retry's give-back does that) */
    if (!a->cfg.stitching || a->handle_per_page || size < a->cfg.stitch_min_block)
        return NULL;
    const size_t have = stitch_free_pages(p, stream);
    if (have == 0 || have >= size)
        return NULL; /* nothing to stitch to, or the stitch failed for another reason */
    const size_t page = expandable_page_of(a, p);
    const size_t lack = (size - have + page - 1) / page * page;
    if (!cap_allows(a, lack) || !expandable_grow_free(a, p, lack, stream))
        return NULL;
    ts_block *b = pool_find_best(a, p, size, stream);
    return b ? b : stitch_alloc(a, p, size, stream);
}

/* b was found for a request but may not be handed out yet (it was freed since the last order
 * point and a capture keeps one from being made): keep it cached and take a new plain segment,
 * which no earlier work can have touched. NULL when that fails too. */
static ts_block *alloc_unordered_fallback(ts_allocator *a, ts_block *b, size_t alloc_size,
                                          uint64_t stream)
{
    ts_pool *p = b->seg->pool;
    pool_insert_free(p, b);
    return segment_new_plain(a, p, alloc_size, stream);
}

/* PyTorch's alloc_found_block: carve the request from the low end of b (split) or take b whole.
 * spare is a preallocated metadata block, consumed when splitting. */
static ts_block *alloc_found_block(ts_allocator *a, ts_block *b, size_t size, size_t orig_size,
                                   bool split, ts_block **spare)
{
    tessera_device_stats *st = a->st;
    ts_pool *p = b->seg->pool;
    const bool already_split = block_is_split(b);
    const bool expandable = block_is_vm(b);

    if (split) {
        ts_block *remaining = b;
        b = *spare;
        *spare = NULL;
        block_split_front(remaining, b, size);
        pool_insert_free(p, remaining);

        if (!expandable) {
            if (already_split) {
                /* an already-split free block shrinks by size */
                stat_array_decrease(a, st->inactive_split_bytes, p, (int64_t)size);
            } else {
                /* a new split free block appears */
                stat_array_increase(a, st->inactive_split_bytes, p, (int64_t)remaining->size);
                stat_array_increase(a, st->inactive_split, p, 1);
            }
        }
    } else if (already_split && !expandable) {
        stat_array_decrease(a, st->inactive_split_bytes, p, (int64_t)b->size);
        stat_array_decrease(a, st->inactive_split, p, 1);
    }

    b->state = TS_BLOCK_ALLOCATED;
    b->requested = orig_size;
    b->serial = ++a->alloc_serial;
    ts_ptrmap_put(&a->live, b->addr, b); /* capacity was reserved by the caller */
    block_count_allocated(a, p, b);
    return b;
}

/* Make sure the live map can take one more entry without allocating later (so that a failure to
 * grow it is reported before any state changes). */
static int live_reserve(ts_allocator *a)
{
    ts_ptrmap *m = &a->live;
    if ((m->count + 1) * 2 <= m->mask + 1)
        return 0;
    /* Grow by inserting and removing a placeholder key that no device address can equal. */
    if (ts_ptrmap_put(m, (uintptr_t)1, NULL) != 0)
        return -1;
    ts_ptrmap_del(m, (uintptr_t)1);
    return 0;
}

static void oom_fill(ts_allocator *a, ts_oom_info *oom, size_t orig, size_t rounded,
                     size_t alloc_size)
{
    if (!oom)
        return;
    memset(oom, 0, sizeof *oom);
    oom->device = a->device;
    oom->requested = orig;
    oom->rounded = rounded;
    oom->segment_size = alloc_size;
    oom->capacity = a->device_total;
    size_t free_bytes = 0, total = 0;
    backend_enter(a);
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &free_bytes, &total) == TS_OK) {
        oom->device_free = free_bytes;
        if (!oom->capacity)
            oom->capacity = total;
    }
    oom->allocated = (size_t)a->st->allocated_bytes[TESSERA_POOL_ALL].current;
    oom->reserved = (size_t)a->st->reserved_bytes[TESSERA_POOL_ALL].current;
    oom->largest_free_block = ts_largest_free_block_locked(a);
    oom->limit = ts_allocator_cap(a);
    oom->limit_reached = !cap_allows(a, alloc_size);
    oom->expandable_segments = a->cfg.expandable_segments;
    oom->stitching = a->cfg.stitching;
    oom->vm_available = ts_backend_has_vm(&a->be);
    oom->stitch_min_block = a->cfg.stitch_min_block;
    oom->max_split_size = a->cfg.max_split_size;
}

/* Free device memory for the history's oom event: oom_fill's reading when there is one. */
static size_t oom_device_free(ts_allocator *a, const ts_oom_info *oom)
{
    if (oom)
        return oom->device_free;
    size_t free_bytes = 0, total = 0;
    backend_enter(a);
    if (a->be.mem_info && a->be.mem_info(a->be.ctx, &free_bytes, &total) == TS_OK)
        return free_bytes;
    return 0;
}

static void stream_usage_add(ts_stream_usage *u, size_t used, size_t reserved)
{
    u->used += used;
    u->reserved += reserved;
    if (u->used > u->used_high)
        u->used_high = u->used;
    if (u->reserved > u->reserved_high)
        u->reserved_high = u->reserved;
}

/* Count an out-of-memory (the history's event carries the free memory the driver reports after
 * the failure, PyTorch's device_free, as the out-of-memory line does). Under the mutex. */
static void oom_count(ts_allocator *a, size_t size, uintptr_t stream, ts_oom_info *oom)
{
    const size_t rounded = ts_round_size(&a->cfg, size);
    counter_add(a, &a->st->num_ooms, 1);
    oom_fill(a, oom, size, rounded, ts_allocation_size(&a->cfg, rounded));
    TS_HISTORY_NOTE(a, TESSERA_EV_OOM, oom_device_free(a, oom), size, stream, size);
    a->observe_now = true;
}

void ts_malloc_oom(ts_allocator *a, size_t size, uintptr_t stream, ts_oom_info *oom)
{
    allocator_lock(a);
    oom_count(a, size, stream, oom);
    allocator_unlock(a);
}

int ts_malloc_ex(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                 ts_oom_info *oom)
{
    int rc = ts_malloc_try(a, size, stream, out, oom);
    if (rc != TS_EAGAIN)
        return rc;
    ts_malloc_oom(a, size, stream, oom);
    return TS_ENOMEM;
}

int ts_malloc_try(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                  ts_oom_info *oom)
{
    if (!out || size == 0)
        return TS_EINVAL;
    tessera_device_stats *st = a->st;
    allocator_lock(a);
    counter_add(a, &st->num_alloc_calls, 1);
    counter_add(a, &st->num_ops, 1);

    if (size >= TS_ONE_EXABYTE) {
        /* Rounding would overflow; PyTorch refuses these outright ("more than 1EB"). */
        counter_add(a, &st->num_ooms, 1);
        oom_fill(a, oom, size, size, size);
        a->observe_now = true;
        allocator_unlock(a);
        return TS_ENOMEM;
    }

    fences_process(a);
    retire_free_ranges(a);
    if (a->holed_tops)
        expandable_drop_holed_tops(a);

    const size_t rounded = ts_round_size(&a->cfg, size);
    ts_pool *p = rounded <= TS_SMALL_SIZE ? &a->small : &a->large;
    const size_t alloc_size = ts_allocation_size(&a->cfg, rounded);

    /* The metadata block a split needs, taken before anything changes (kept between calls). */
    if (!a->spare)
        a->spare = block_new(a);
    ts_block *spare = a->spare;
    a->spare = NULL;
    if (!spare || live_reserve(a) != 0) {
        /* Host memory for metadata is exhausted: report it as out of memory, change nothing. */
        a->spare = spare;
        counter_add(a, &st->num_ooms, 1);
        oom_fill(a, oom, size, rounded, alloc_size);
        allocator_unlock(a);
        return TS_ENOMEM;
    }

    ts_block *b = pool_find_best(a, p, rounded, stream);
    /* Blocks of this pool freed but still waiting for their fences could serve the request:
     * wait for the oldest fences, a few at most, before new memory is taken. */
    for (int i = 0; !b && i < TS_MAX_PENDING_WAITS && fences_wait_oldest(a, p, rounded); i++) {
        retire_free_ranges(a);
        b = pool_find_best(a, p, rounded, stream);
    }
    const bool stitch_first = a->cfg.stitch_when == TS_STITCH_ALWAYS;
    if (!b && stitch_first)
        b = stitch_alloc(a, p, rounded, stream); /* free pages, before new memory */
    if (!b) {
        if (pool_gc_enabled(a))
            garbage_collect_cached_blocks(a);
        b = alloc_block(a, p, rounded, alloc_size, stream, false);
        /* Under pressure: gather free pages before anything that waits for the device. */
        if (!b && !stitch_first)
            b = stitch_alloc(a, p, rounded, stream);
        if (!b && !stitch_first)
            b = stitch_topped(a, p, rounded, stream);
        /* defragment, memory short: a small request takes a free piece of the large pool
         * (pieces smaller than a page are the large pool's waste, and a small-pool page taken
         * now would be taken from the large pool's next step) */
        if (!b && p->small && a->cfg.defragment)
            b = pool_find_best(a, &a->large, rounded, stream);
        if (!b && fences_wait_pending(a)) {
            retire_free_ranges(a);
            b = pool_find_best(a, p, rounded, stream);
            if (!b)
                b = stitch_alloc(a, p, rounded, stream);
            if (!b)
                b = alloc_block(a, p, rounded, alloc_size, stream, false);
        }
        if (!b && release_available_cached_blocks(a, p, rounded, stream))
            b = alloc_block(a, p, rounded, alloc_size, stream, false);
        /* defragment gives back only what the request lacks first, other pools' and streams'
         * memory before its own segment's (release.c): pages the request's segment uses again
         * are not unmapped only to be mapped again at its end */
        if (!b && a->cfg.defragment && release_for_request(a, p, rounded, stream)) {
            b = alloc_block(a, p, rounded, alloc_size, stream, true);
            if (!b) /* what went back is less than the request, not than what it lacks */
                b = stitch_topped(a, p, rounded, stream);
        }
        if (!b && !backend_capturing(a)) {
            release_cached_blocks(a);
            b = alloc_block(a, p, rounded, alloc_size, stream, true);
            if (!b)
                b = stitch_topped(a, p, rounded, stream);
        }
    }
    if (b && !reuse_ready(a, b))
        b = alloc_unordered_fallback(a, b, alloc_size, stream);
    if (!b) {
        /* counted by the caller's ts_malloc_oom, unless memory turns up elsewhere first */
        a->spare = spare;
        oom_fill(a, oom, size, rounded, alloc_size);
        allocator_unlock(a);
        return TS_EAGAIN;
    }

    bool split = pool_should_split(a, b, rounded);
    b = alloc_found_block(a, b, rounded, size, split, &spare);
    if (spare)
        a->spare = spare; /* unused: still zeroed (alloc_found_block touches it only to split) */
    *out = b->addr;
    if (stream)
        stream_usage_add(&a->tagged, size, b->size);
    TS_HISTORY_NOTE(a, TESSERA_EV_ALLOC, b->addr, b->size, stream, size);
    allocator_unlock(a);
    return TS_OK;
}

int ts_malloc(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out)
{
    return ts_malloc_ex(a, size, stream, out, NULL);
}

int ts_free(ts_allocator *a, uintptr_t ptr)
{
    return ts_free_ex(a, ptr, NULL);
}

/* The free path; stream: the stream the program frees in the order of (0: none). */
static int free_on(ts_allocator *a, uintptr_t ptr, uintptr_t stream, size_t *requested)
{
    tessera_device_stats *st = a->st;
    allocator_lock(a);
    ts_block *b = ptr ? ts_ptrmap_del(&a->live, ptr) : NULL;
    if (!b) {
        /* Inside one of our segments but not a live allocation: double free or interior
         * pointer. Never forward it: the driver would free a whole segment. */
        ts_node *n = ts_tree_floor(&a->segments, ptr, UINT64_MAX, UINT64_MAX);
        ts_segment *seg = n ? segment_of_node(n) : NULL;
        int rc = TS_ENOTFOUND;
        if (ptr && seg && ptr < seg->addr + seg->size) {
            counter_add(a, &st->num_invalid_frees, 1);
            rc = TS_EINVAL;
        }
        allocator_unlock(a);
        return rc;
    }
    ts_pool *p = b->seg->pool;
    if (requested)
        *requested = b->requested;
    counter_add(a, &st->num_free_calls, 1);
    counter_add(a, &st->num_ops, 1);
    stat_array_decrease(a, st->allocation, p, 1);
    stat_array_decrease(a, st->allocated_bytes, p, (int64_t)b->size);
    if (b->size >= a->cfg.max_split_size)
        stat_decrease(a, &st->oversize_allocations, 1);
    TS_HISTORY_NOTE(a, TESSERA_EV_FREE_REQUESTED, b->addr, b->size, b->stream, b->requested);
    if (b->stream) {
        a->tagged.used -= b->requested;
        a->tagged.reserved -= b->size;
    }

    if (a->use_fences) {
        fences_defer_free(a, b);
    } else {
        /* reuse_fence:order: freed since the last order point, unless freed in the order of the
         * one stream the block serves (its pool is that stream's: no other stream takes it, and
         * that stream's later work follows the free) */
        b->free_epoch = stream && stream == b->stream ? 0 : a->order_epoch;
        block_free_complete(a, b);
    }
    retire_free_ranges(a);
    allocator_unlock(a);
    return TS_OK;
}

int ts_free_ex(ts_allocator *a, uintptr_t ptr, size_t *requested)
{
    return free_on(a, ptr, 0, requested);
}

int ts_free_on_stream(ts_allocator *a, uintptr_t ptr, uintptr_t stream, size_t *requested)
{
    return free_on(a, ptr, stream, requested);
}

void ts_allocator_order_reuse(ts_allocator *a)
{
    allocator_lock(a);
    if (a->use_order)
        reuse_order_point(a);
    allocator_unlock(a);
}

int ts_allocator_peer_add(ts_allocator *a, int device)
{
    if (device < 0 || device >= 64)
        return TS_EINVAL;
    const uint64_t bit = (uint64_t)1 << device;
    allocator_lock(a);
    int rc = TS_OK;
    if (device != a->device && !(a->peer_devices & bit)) {
        if (!a->be.vm_peer_add || !a->be.vm_access) {
            /* Without virtual memory there is nothing to grant: segments follow peer access. */
            rc = ts_backend_has_vm(&a->be) ? TS_EUNSUPPORTED : TS_OK;
        } else {
            backend_enter(a);
            rc = a->be.vm_peer_add(a->be.ctx, device);
            if (rc == TS_OK) {
                a->peer_devices |= bit;
                /* Mappings made before now: expandable handles and stitched aliases alike. */
                for (ts_node *n = ts_tree_first(&a->segments); n; n = ts_tree_next(n)) {
                    ts_segment *seg = segment_of_node(n);
                    int r = seg->kind == TS_SEGMENT_PLAIN ? TS_OK : segment_grant_handles(a, seg);
                    if (r != TS_OK && rc == TS_OK)
                        rc = r;
                }
            }
        }
    }
    allocator_unlock(a);
    return rc;
}

/* --- cache-level operations ------------------------------------------------------------------ */

size_t ts_empty_cache(ts_allocator *a)
{
    allocator_lock(a);
    size_t before = a->total_allocated_memory;
    counter_add(a, &a->st->num_empty_cache, 1);
    if (!a->paused) /* a paused allocator has nothing mapped to give */
        release_cached_blocks(a);
    size_t released = before - a->total_allocated_memory;
    a->observe_now = true;
    allocator_unlock(a);
    return released;
}

size_t ts_cached_bytes(ts_allocator *a)
{
    allocator_lock(a);
    size_t allocated = (size_t)a->st->allocated_bytes[TESSERA_POOL_ALL].current;
    size_t cached = a->total_allocated_memory > allocated ? a->total_allocated_memory - allocated
                                                          : 0;
    allocator_unlock(a);
    return cached;
}

void ts_get_stats(ts_allocator *a, tessera_device_stats *out)
{
    allocator_lock(a);
    allocator_update_largest_free(a);
    *out = *a->st;
    allocator_unlock(a);
}

void ts_allocator_set_observer(ts_allocator *a, ts_observer_fn fn, void *user, uint32_t every)
{
    allocator_lock(a);
    a->observer = fn;
    a->observer_user = user;
    a->observer_every = every ? every : 1;
    a->observe_now = fn != NULL;
    allocator_unlock(a);
}

void ts_allocator_set_observer_request(ts_allocator *a, const uint64_t *word)
{
    allocator_lock(a);
    a->observe_request = word;
    a->observe_served = word ? __atomic_load_n(word, __ATOMIC_RELAXED) : 0;
    allocator_unlock(a);
}

const ts_config *ts_allocator_config(const ts_allocator *a)
{
    return &a->cfg;
}

int ts_allocator_device(const ts_allocator *a)
{
    return a->device;
}

