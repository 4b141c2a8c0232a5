/* Allocator internals shared by the core's files. Not part of any API. */
#ifndef TS_INTERNAL_H
#define TS_INTERNAL_H

#include <pthread.h>
#include <sys/mman.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"
#include "core/ptrmap.h"
#include "core/slab.h"
#include "core/freeidx.h"
#include "core/tree.h"
#include "tessera/history.h"
#include "tessera/stats_page.h"

/* PyTorch's constants (reference: pytorch-caching-allocator.md section 2.1). */
#define TS_MIN_BLOCK ((size_t)512)            /* kMinBlockSize */
#define TS_SMALL_SIZE ((size_t)1 << 20)       /* kSmallSize: <= goes to the small pool */
#define TS_SMALL_BUFFER ((size_t)2 << 20)     /* kSmallBuffer: small-pool segment size */
#define TS_MIN_LARGE_ALLOC ((size_t)10 << 20) /* kMinLargeAlloc */
#define TS_ROUND_LARGE ((size_t)2 << 20)      /* kRoundLarge */
#define TS_ONE_EXABYTE ((size_t)1 << 60)      /* requests at or above: out of memory at once */

typedef struct ts_block ts_block;
typedef struct ts_segment ts_segment;
typedef struct ts_pool ts_pool;

/* A block: a contiguous piece of one segment. Metadata only, never in device memory.
 *
 * Invariants (checked by ts_allocator_check):
 *  - blocks of a segment tile it exactly, in address order through prev/next;
 *  - FREE blocks are in their pool's free tree with key (stream, size, addr), UNMAPPED blocks in
 *    its unmapped tree with key (stream, addr, 0), other states in no tree;
 *  - ALLOCATED blocks, and only they, are in the allocator's live map;
 *  - two FREE neighbours never touch (they are merged), nor two UNMAPPED ones;
 *  - PENDING blocks are on the pending FIFO in free order. */
struct ts_block {
    ts_node node;
    uintptr_t addr;
    size_t size;
    size_t requested;
    ts_block *prev, *next;
    ts_segment *seg;
    uint64_t stream;
    uint64_t gc_count_base; /* pool clock when the block entered the free tree */
    uint64_t free_epoch;    /* epoch current when the block was freed: the fence epoch
                             * (reuse_fence:events), or the order epoch (reuse_fence:order), in
                             * which case merged blocks keep the later of their epochs */
    ts_block *pending_next;
    uint64_t serial; /* ALLOCATED blocks: this allocation's number (a reused block gets a new one) */
    uint8_t state; /* ts_block_state */
    ts_segment *lent_to; /* LENT blocks: the stitched segment their pages back */
};

/* A segment: one device allocation (or one virtual reservation for expandable segments).
 * Its pool, stream and kind never change. */
struct ts_segment {
    ts_node node; /* in the allocator's segment tree, key (addr, 0, 0) */
    uintptr_t addr;
    size_t size;   /* virtual size */
    size_t mapped; /* bytes backed by device memory: == size for plain segments */
    uint64_t stream;
    ts_pool *pool;
    ts_block *first;
    size_t nblocks;
    uint8_t kind; /* ts_segment_kind */

    /* Expandable and stitched segments: the physical handles mapped in the range, keyed by
     * address (ts_handle_rec). Expandable segments own theirs; a stitched segment maps handles
     * owned elsewhere (aliases), and lists the LENT blocks they came from. page_size is the unit
     * of address arithmetic; a handle covers one or more whole pages. */
    size_t page_size;
    ts_tree handles;
    /* Expandable segments: where the last growth ended (the end of what it mapped). A growth that
     * starts there is plainly sequential: the next one will most likely follow it, so it maps a
     * batch ahead (expandable.c). */
    uintptr_t grow_end;
    ts_block **lenders;
    size_t nlenders;
    /* Stitched segments: the virtual range reserved is [addr, addr + va_size); the blocks cover
     * [addr, addr + size), the rest is headroom with nothing mapped, where the range grows in
     * place. stitch_serial orders lending: a range borrows only from expandable segments (serial
     * 0) and from ranges of a lower serial, so no two ranges wait on each other to be given back.
     * A range is numbered when made, and again (as the newest) when it grows while lending
     * nothing. */
    size_t va_size;
    uint64_t stitch_serial;
    /* Stitched segments: a range whose blocks are all free is queued (retire_state 1) and then
     * retired (2): its pages go back to the segments they came from and it leaves the segment
     * tree, its aliases still mapped until the next synchronised release unmaps them (stitch.c).
     * retire_link chains the queue, then the retired list. */
    ts_segment *retire_link;
    uint8_t retire_state;
    /* Expandable segments: a free found the segment's top free up to its end with an unmapped
     * hole inside (expandable_drop_holed_top looks before the next request is placed). */
    bool holed_top;
};

/* One mapping at [addr, addr + size) of a segment: size bytes of a physical handle from offset
 * bytes into it. An expandable segment's own handles are mapped whole (offset 0, size the
 * handle's); a stitched segment's aliases may map any whole pages of one. Each record is one
 * mapping, unmapped whole. */
typedef struct ts_handle_rec {
    ts_node node; /* key (addr, 0, 0) */
    uintptr_t addr;
    size_t size;
    uint64_t handle;
    size_t offset;
} ts_handle_rec;

/* One of the two pools (small: rounded size <= 1 MiB; large). */
struct ts_pool {
    ts_freeidx free;  /* FREE blocks: (stream, size, addr) */
    size_t vm_free;   /* bytes in FREE blocks of expandable and stitched segments (any stream):
                       * an upper bound on what stitching could gather, so a hopeless attempt
                       * costs nothing */
    ts_tree unmapped; /* UNMAPPED blocks of expandable segments: (stream, addr, 0) */
    uint64_t get_free_blocks_call_count; /* the garbage collector's clock */
    size_t pending_bytes; /* bytes of this pool's PENDING blocks (freed, waiting for a fence) */
    bool small;
    int stat_index; /* TESSERA_POOL_SMALL or TESSERA_POOL_LARGE */
};

typedef struct ts_fence_rec {
    ts_fence fence;
    uint64_t epoch; /* covers blocks freed with free_epoch <= epoch */
} ts_fence_rec;

#define TS_MAX_FENCES 64
/* Oldest fences one allocation may wait for, one by one, before it takes new memory while freed
 * blocks of its pool that could serve it wait for theirs. */
#define TS_MAX_PENDING_WAITS 16

struct ts_allocator {
    pthread_mutex_t lock;
    ts_config cfg;
    ts_backend be;
    int device;

    ts_pool small, large;
    ts_tree segments;
    ts_ptrmap live;
    ts_slab block_slab;
    ts_slab segment_slab;
    ts_slab handle_slab;
    ts_block *spare; /* a metadata block kept for the next split (never in any structure) */

    size_t total_allocated_memory; /* bytes obtained from the device (PyTorch's name) */
    uint64_t alloc_serial;         /* the last allocation's number (ts_block.serial) */
    bool set_fraction;             /* a cap applies (memory fraction or memory_limit) */
    size_t allowed_memory_maximum;
    size_t device_total;

    /* Memory the program holds from the driver itself (driver.c): address -> bytes, counted in
     * driver_bytes and against the cap together with total_allocated_memory. */
    ts_ptrmap driver_live;
    size_t driver_bytes;
    /* Stream-ordered allocations served here (blocks with a stream tag), live now and at their
     * high marks: requested bytes (used) and block bytes (reserved). */
    ts_stream_usage tagged;

    /* Counters: in the stats page when there is one, else in own_stats. */
    tessera_device_stats *st;
    uint64_t *seq;
    bool st_open; /* the sequence lock is odd: a write window is open */
    tessera_device_stats own_stats;
    uint64_t own_seq;

    /* Stream-ordered reuse (reuse_fence:order). Invariant: a FREE block with free_epoch ==
     * order_epoch was freed (at least in part) after the last order point, so the device must be
     * told to order later work after earlier work before the block is handed out again; blocks
     * with an older epoch, and fresh memory (epoch 0), are safe to hand out as they are. */
    bool use_order;
    uint64_t order_epoch; /* starts at 1; +1 at each order point */

    /* Deferred reuse (fences: reuse_fence:events and sync). */
    bool use_fences;
    ts_block *pending_head, *pending_tail;
    size_t pending_count;
    uint64_t epoch;         /* current epoch: frees are tagged with it */
    bool epoch_dirty;       /* a free happened in the current epoch: no fence covers it yet */
    ts_fence_rec fences[TS_MAX_FENCES];
    size_t fence_head, fence_count;

    /* Expandable segments and stitching. */
    size_t vm_granularity;
    bool handle_per_page; /* PyTorch's way: one handle per page; else one per growth */
    size_t stitched_segments; /* live ranges (in the segment tree) */
    uint64_t stitch_serial;
    ts_segment *retire_queue;   /* live ranges found entirely free, to retire (pool.c queues) */
    ts_segment *retired;        /* retired ranges, their aliases still mapped */
    size_t retired_ranges;
    bool holed_tops; /* some expandable segment has holed_top set */
    uint64_t peer_devices; /* bit d: device d was granted access to every mapping (peer access) */

    /* Observer (stats page segment map). */
    ts_observer_fn observer;
    void *observer_user;
    uint32_t observer_every;
    uint32_t ops_since_observe;
    bool observe_now;

    /* Snapshot requests (the stats page's request word): an observer call is due at the next
     * operation when *observe_request differs from the value last served. */
    const uint64_t *observe_request;
    uint64_t observe_served;

    /* History ring (core/history.c); NULL unless history_events is set. */
    struct ts_history *history;

    /* Pinned host memory (core/hostcache.c); NULL until the first host allocation. */
    struct ts_hostcache *host;

    /* Paused (pause.c): the owned handles' bytes, in segment and address order, are in
     * pause_copy (pause_bytes of host memory); no handle is mapped; nothing is released. */
    bool paused;
    void *pause_copy;
    size_t pause_bytes;
};

/* Forget a pause (pause.c): the saved bytes are dropped and the allocator is no longer paused.
 * Its records still name the handles the pause destroyed, so the caller must not give them to
 * the device (allocator destroy, which then leaves the ranges to the context's teardown). Here,
 * so that the allocator's destroy needs nothing of pause.c, which is above it. */
static inline void pause_drop(ts_allocator *a)
{
    if (a->pause_copy)
        munmap(a->pause_copy, a->pause_bytes);
    a->pause_copy = NULL;
    a->pause_bytes = 0;
    a->paused = false;
}

/* Record an allocator event in the history ring, when there is one: the only cost otherwise is
 * this predictable branch. */
void ts_history_note(struct ts_history *h, uint32_t action, uint64_t addr, uint64_t size,
                     uint64_t stream, uint64_t requested);
#define TS_HISTORY_NOTE(a, action, addr, size, stream, requested)                              \
    do {                                                                                         \
        if (__builtin_expect((a)->history != NULL, 0))                                           \
            ts_history_note((a)->history, (action), (addr), (size), (stream), (requested));      \
    } while (0)

/* --- counters -------------------------------------------------------------------------------
 * Single writer (the allocator, under its mutex); readers of the stats page may run in other
 * processes. Fields are written with relaxed atomic stores inside a sequence-lock window that is
 * opened lazily by the first update and closed before any backend call and at unlock, so a
 * reader never spins through a slow device call. */

/* The protocol itself is the public header's (tessera/stats_page.h), the one every writer and
 * C reader uses; here only the window is lazy. */
static inline void st_store(int64_t *p, int64_t v)
{
    tessera_stat_store(p, v);
}

static inline void st_open(ts_allocator *a)
{
    if (!a->st_open) {
        tessera_seq_write_begin(a->seq);
        a->st_open = true;
    }
}

static inline void st_close(ts_allocator *a)
{
    if (a->st_open) {
        tessera_seq_write_end(a->seq);
        a->st_open = false;
    }
}

static inline void stat_increase(ts_allocator *a, tessera_stat *s, int64_t v)
{
    st_open(a);
    int64_t cur = s->current + v;
    st_store(&s->current, cur);
    if (cur > s->peak)
        st_store(&s->peak, cur);
    st_store(&s->allocated, s->allocated + v);
}

static inline void stat_decrease(ts_allocator *a, tessera_stat *s, int64_t v)
{
    st_open(a);
    st_store(&s->current, s->current - v);
    st_store(&s->freed, s->freed + v);
}

/* Update "all" and the pool's own entry of a stat array. */
static inline void stat_array_increase(ts_allocator *a, tessera_stat *arr, const ts_pool *p,
                                       int64_t v)
{
    stat_increase(a, &arr[TESSERA_POOL_ALL], v);
    stat_increase(a, &arr[p->stat_index], v);
}

static inline void stat_array_decrease(ts_allocator *a, tessera_stat *arr, const ts_pool *p,
                                       int64_t v)
{
    stat_decrease(a, &arr[TESSERA_POOL_ALL], v);
    stat_decrease(a, &arr[p->stat_index], v);
}

static inline void counter_add(ts_allocator *a, int64_t *c, int64_t v)
{
    st_open(a);
    st_store(c, *c + v);
}

static inline void gauge_set(ts_allocator *a, int64_t *g, int64_t v)
{
    if (*g != v) {
        st_open(a);
        st_store(g, v);
    }
}

/* --- block helpers ------------------------------------------------------------------------ */

static inline bool block_is_split(const ts_block *b)
{
    return b->prev != NULL || b->next != NULL;
}

static inline bool block_is_expandable(const ts_block *b)
{
    return b->seg->kind == TS_SEGMENT_EXPANDABLE;
}

/* Right before unmapped pages of its segment (a free one is a growing tail: a growth extends it). */
static inline bool block_before_unmapped(const ts_block *b)
{
    return b->next && b->next->state == TS_BLOCK_UNMAPPED;
}

/* Backed by virtual-memory pages (expandable or stitched), not by one seg_alloc: such blocks can
 * give pages back, are never released whole with seg_free, and are left out of inactive_split. */
static inline bool block_is_vm(const ts_block *b)
{
    return b->seg->kind != TS_SEGMENT_PLAIN;
}

static inline ts_block *block_of_node(ts_node *n)
{
    return (ts_block *)((char *)n - offsetof(ts_block, node));
}

static inline ts_segment *segment_of_node(ts_node *n)
{
    return (ts_segment *)((char *)n - offsetof(ts_segment, node));
}

static inline ts_handle_rec *handle_of_node(ts_node *n)
{
    return n ? (ts_handle_rec *)((char *)n - offsetof(ts_handle_rec, node)) : NULL;
}

/* Backend calls with the sequence lock closed around them. */
static inline void backend_enter(ts_allocator *a)
{
    st_close(a);
}

/* The allocator's mutex (allocator.c): unlock also runs the observer and closes the stats
 * window, as every entry point must. */
void allocator_lock(ts_allocator *a);
void allocator_unlock(ts_allocator *a);

/* A backend call like any other: the stats window is closed first. */
static inline bool backend_capturing(ts_allocator *a)
{
    if (!a->be.capture_active)
        return false;
    backend_enter(a);
    return a->be.capture_active(a->be.ctx);
}

/* Would reserving bytes more stay within the cap (memory_limit, memory fraction)? The cap covers
 * the segments and the memory left to the driver (driver.c) together. */
static inline bool cap_allows(const ts_allocator *a, size_t bytes)
{
    return !a->set_fraction ||
           a->total_allocated_memory + a->driver_bytes + bytes <= a->allowed_memory_maximum;
}

#endif /* TS_INTERNAL_H */
