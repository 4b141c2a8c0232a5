/* The validator: every invariant of the block and segment structures, and the counters recomputed
 * from them. Run after every operation in debug builds and tests; never on a production path. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/check.h"
#include "core/handles.h"
#include "core/inspect.h"

typedef struct check_totals {
    int64_t allocation[TESSERA_POOL_COUNT];
    int64_t allocated_bytes[TESSERA_POOL_COUNT];
    int64_t active[TESSERA_POOL_COUNT];
    int64_t active_bytes[TESSERA_POOL_COUNT];
    int64_t requested_bytes[TESSERA_POOL_COUNT];
    int64_t segment[TESSERA_POOL_COUNT];
    int64_t reserved_bytes[TESSERA_POOL_COUNT];
    int64_t inactive_split[TESSERA_POOL_COUNT];
    int64_t inactive_split_bytes[TESSERA_POOL_COUNT];
    int64_t oversize_allocations, oversize_segments;
    size_t free_blocks[2], unmapped_blocks[2], pending, allocated;
    size_t lent_bytes, stitched_bytes, stitched_segments;
} check_totals;

__attribute__((format(printf, 3, 4))) static int check_fail(char *why, size_t whylen, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void totals_add(int64_t *arr, const ts_pool *p, int64_t v)
{
    arr[TESSERA_POOL_ALL] += v;
    arr[p->stat_index] += v;
}

/* A block's place in its segment: it follows the previous one exactly, in whole 512-byte units,
 * linked both ways, on its segment's stream (a stitched range may serve any stream). */
static int check_block_tiling(const ts_segment *seg, const ts_block *b, uintptr_t expect,
                              char *why, size_t whylen)
{
    if (b->seg != seg)
        return check_fail(why, whylen, "block %#" PRIxPTR ": wrong segment", b->addr);
    if (b->addr != expect)
        return check_fail(why, whylen, "block %#" PRIxPTR ": expected at %#" PRIxPTR
                          " (gap or overlap)", b->addr, expect);
    if (b->size == 0 || b->size % TS_MIN_BLOCK != 0)
        return check_fail(why, whylen, "block %#" PRIxPTR ": size %zu", b->addr, b->size);
    if (b->next && b->next->prev != b)
        return check_fail(why, whylen, "block %#" PRIxPTR ": broken links", b->addr);
    if (b->stream != seg->stream && seg->kind != TS_SEGMENT_STITCHED)
        return check_fail(why, whylen, "block %#" PRIxPTR ": stream differs", b->addr);
    return 0;
}

/* Is [lo, hi) mapped throughout in seg, mapping after mapping? */
static bool range_mapped(ts_segment *seg, uintptr_t lo, uintptr_t hi)
{
    ts_handle_rec *h = segment_handle_at(seg, lo);
    uintptr_t at = lo;
    for (; h && h->addr <= at && at < hi; h = handle_of_node(ts_tree_next(&h->node)))
        at = h->addr + h->size;
    return at >= hi;
}

/* A LENT block: in a virtual-memory segment, listed by the stitched range it backs, lent only
 * to a newer range (no lending cycle), and exactly whole pages, all mapped. */
static int check_lent_block(ts_segment *seg, const ts_block *b, char *why, size_t whylen)
{
    if (seg->kind == TS_SEGMENT_PLAIN || !b->lent_to || b->lent_to->kind != TS_SEGMENT_STITCHED)
        return check_fail(why, whylen, "lent block %#" PRIxPTR " in a wrong place", b->addr);
    bool listed = false;
    for (size_t i = 0; i < b->lent_to->nlenders; i++)
        listed |= b->lent_to->lenders[i] == b;
    if (!listed)
        return check_fail(why, whylen, "lent block %#" PRIxPTR " not listed by its "
                          "stitched segment", b->addr);
    if (b->lent_to->stitch_serial <= seg->stitch_serial)
        return check_fail(why, whylen, "lent block %#" PRIxPTR " lent to a range "
                          "not newer than its own segment (a lending cycle)", b->addr);
    uintptr_t lo, hi;
    if (!segment_whole_pages(seg, b->addr, b->addr + b->size, &lo, &hi) || lo != b->addr ||
        hi != b->addr + b->size || !range_mapped(seg, b->addr, b->addr + b->size))
        return check_fail(why, whylen, "lent block %#" PRIxPTR " not whole mapped pages",
                          b->addr);
    return 0;
}

/* A block by its state: in the structure that state requires (free set, unmapped tree, live
 * map, lender list), never next to a free (unmapped) neighbour it should have merged with; its
 * bytes added to the totals the counters are checked against. */
static int check_block_state(ts_allocator *a, ts_segment *seg, ts_block *b, bool split,
                             check_totals *t, char *why, size_t whylen)
{
    ts_pool *p = seg->pool;
    const int pi = p->small ? 0 : 1;
    switch (b->state) {
    case TS_BLOCK_FREE: {
        if (b->next && b->next->state == TS_BLOCK_FREE)
            return check_fail(why, whylen, "free blocks %#" PRIxPTR " and %#" PRIxPTR
                              " not merged", b->addr, b->next->addr);
        t->free_blocks[pi]++;
        ts_node *n = ts_freeidx_lower_bound(&p->free, b->stream, b->size, b->addr);
        if (n != &b->node)
            return check_fail(why, whylen, "free block %#" PRIxPTR " not in its free set",
                              b->addr);
        if (split && seg->kind == TS_SEGMENT_PLAIN) {
            totals_add(t->inactive_split, p, 1);
            totals_add(t->inactive_split_bytes, p, (int64_t)b->size);
        }
        return 0;
    }
    case TS_BLOCK_UNMAPPED: {
        t->unmapped_blocks[pi]++;
        if (block_before_unmapped(b))
            return check_fail(why, whylen, "unmapped blocks %#" PRIxPTR " not merged", b->addr);
        ts_node *n = ts_tree_lower_bound(&p->unmapped, b->stream, b->addr, 0);
        if (n != &b->node)
            return check_fail(why, whylen, "unmapped block %#" PRIxPTR " not indexed", b->addr);
        return 0;
    }
    case TS_BLOCK_ALLOCATED:
        t->allocated++;
        if (ts_ptrmap_get(&a->live, b->addr) != b)
            return check_fail(why, whylen, "allocated block %#" PRIxPTR " not in live map",
                              b->addr);
        totals_add(t->allocation, p, 1);
        totals_add(t->allocated_bytes, p, (int64_t)b->size);
        if (b->size >= a->cfg.max_split_size)
            t->oversize_allocations++;
        totals_add(t->active, p, 1);
        totals_add(t->active_bytes, p, (int64_t)b->size);
        totals_add(t->requested_bytes, p, (int64_t)b->requested);
        return 0;
    case TS_BLOCK_LENT: {
        int rc = check_lent_block(seg, b, why, whylen);
        t->lent_bytes += b->size;
        return rc;
    }
    case TS_BLOCK_PENDING:
        t->pending++;
        totals_add(t->active, p, 1);
        totals_add(t->active_bytes, p, (int64_t)b->size);
        totals_add(t->requested_bytes, p, (int64_t)b->requested);
        return 0;
    default:
        return check_fail(why, whylen, "block %#" PRIxPTR ": bad state %u", b->addr,
                          (unsigned)b->state);
    }
}

/* A virtual-memory segment's handles: sorted, inside the segment, never overlapping, covering
 * exactly the mapped bytes, and behind every mapped block and no unmapped one. */
static int check_segment_handles(const ts_segment *seg, char *why, size_t whylen)
{
    size_t handle_bytes = 0;
    uintptr_t prev_end = seg->addr;
    for (ts_node *hn = ts_tree_first(&seg->handles); hn; hn = ts_tree_next(hn)) {
        ts_handle_rec *h = handle_of_node(hn);
        if (h->addr < prev_end || h->addr + h->size > seg->addr + seg->size || !h->handle)
            return check_fail(why, whylen, "segment %#" PRIxPTR ": bad handle at %#" PRIxPTR,
                              seg->addr, h->addr);
        prev_end = h->addr + h->size;
        handle_bytes += h->size;
    }
    if (handle_bytes != seg->mapped)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": handles cover %zu, mapped %zu",
                          seg->addr, handle_bytes, seg->mapped);
    for (ts_block *b = seg->first; b; b = b->next) {
        ts_handle_rec *h = segment_handle_at(seg, b->addr + b->size - 1);
        bool backed = h && h->addr + h->size >= b->addr + b->size && h->addr < b->addr + b->size;
        if ((b->state == TS_BLOCK_UNMAPPED) == backed)
            return check_fail(why, whylen, "block %#" PRIxPTR ": %s", b->addr,
                              backed ? "unmapped block has memory" : "mapped block has none");
    }
    return 0;
}

/* A stitched range: fully mapped, its reservation whole pages and at least its size, and exactly
 * covered by the blocks it lists as lent to it. */
static int check_stitched_segment(const ts_segment *seg, char *why, size_t whylen)
{
    if (seg->mapped != seg->size)
        return check_fail(why, whylen, "stitched segment %#" PRIxPTR " not fully mapped",
                          seg->addr);
    if (seg->va_size < seg->size || seg->va_size % seg->page_size != 0)
        return check_fail(why, whylen, "stitched segment %#" PRIxPTR ": %zu bytes reserved "
                          "for %zu", seg->addr, seg->va_size, seg->size);
    size_t lent = 0;
    for (size_t i = 0; i < seg->nlenders; i++) {
        if (seg->lenders[i]->state != TS_BLOCK_LENT || seg->lenders[i]->lent_to != seg)
            return check_fail(why, whylen, "stitched segment %#" PRIxPTR " lists a block "
                              "that is not lent to it", seg->addr);
        lent += seg->lenders[i]->size;
    }
    if (lent != seg->size)
        return check_fail(why, whylen, "stitched segment %#" PRIxPTR ": %zu bytes lent, "
                          "%zu mapped", seg->addr, lent, seg->size);
    if (seg->nblocks == 1 && seg->first->state == TS_BLOCK_FREE)
        return check_fail(why, whylen, "stitched segment %#" PRIxPTR " entirely free but not "
                          "retired", seg->addr);
    return 0;
}

/* One segment: its blocks tile it (check_block_tiling) and each is where its state says
 * (check_block_state); its handles (check_segment_handles) and, for a stitched range, its
 * lenders (check_stitched_segment) agree; its block count and mapped bytes are the recorded
 * ones. Adds what it holds to the totals. */
static int check_segment(ts_allocator *a, ts_segment *seg, check_totals *t, char *why,
                         size_t whylen)
{
    ts_pool *p = seg->pool;
    if (seg->pool != &a->small && seg->pool != &a->large)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": bad pool", seg->addr);
    if (!seg->first || seg->first->prev)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": bad first block", seg->addr);
    uintptr_t expect = seg->addr;
    size_t nblocks = 0, mapped = 0;
    const bool split = seg->first->next != NULL;
    int rc;
    for (ts_block *b = seg->first; b; b = b->next) {
        nblocks++;
        if ((rc = check_block_tiling(seg, b, expect, why, whylen)) != 0 ||
            (rc = check_block_state(a, seg, b, split, t, why, whylen)) != 0)
            return rc;
        expect = b->addr + b->size;
        if (b->state != TS_BLOCK_UNMAPPED)
            mapped += b->size;
    }
    if (expect != seg->addr + seg->size)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": blocks end at %#" PRIxPTR
                          " not %#" PRIxPTR, seg->addr, expect, seg->addr + seg->size);
    if (seg->kind != TS_SEGMENT_PLAIN && (rc = check_segment_handles(seg, why, whylen)) != 0)
        return rc;
    if (nblocks != seg->nblocks)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": %zu blocks, recorded %zu",
                          seg->addr, nblocks, seg->nblocks);
    if (mapped != seg->mapped)
        return check_fail(why, whylen, "segment %#" PRIxPTR ": mapped %zu, recorded %zu",
                          seg->addr, mapped, seg->mapped);
    if (seg->kind == TS_SEGMENT_PLAIN) {
        totals_add(t->segment, p, 1);
        if (seg->size >= a->cfg.max_split_size)
            t->oversize_segments++;
    }
    if (seg->kind != TS_SEGMENT_STITCHED) {
        totals_add(t->reserved_bytes, p, (int64_t)seg->mapped);
        return 0;
    }
    t->stitched_bytes += seg->size;
    t->stitched_segments++;
    return check_stitched_segment(seg, why, whylen);
}

static int check_stat_array(const char *name, const tessera_stat *s, const int64_t *want,
                            char *why, size_t whylen)
{
    for (int i = 0; i < TESSERA_POOL_COUNT; i++) {
        if (s[i].current != want[i])
            return check_fail(why, whylen, "%s[%d].current is %" PRId64 ", heap says %" PRId64,
                              name, i, s[i].current, want[i]);
        if (s[i].peak < s[i].current)
            return check_fail(why, whylen, "%s[%d].peak below current", name, i);
        if (s[i].allocated - s[i].freed != s[i].current)
            return check_fail(why, whylen, "%s[%d]: allocated - freed != current", name, i);
    }
    return 0;
}

int allocator_check_locked(ts_allocator *a, char *why, size_t whylen)
{
    if (ts_tree_check(&a->segments) || ts_freeidx_check(&a->small.free) ||
        ts_freeidx_check(&a->large.free) || ts_tree_check(&a->small.unmapped) ||
        ts_tree_check(&a->large.unmapped))
        return check_fail(why, whylen, "a tree is malformed");

    check_totals t = {0};
    uintptr_t prev_end = 0;
    size_t reserved = 0;
    for (ts_node *n = ts_tree_first(&a->segments); n; n = ts_tree_next(n)) {
        ts_segment *seg = segment_of_node(n);
        if (seg->node.k0 != seg->addr)
            return check_fail(why, whylen, "segment %#" PRIxPTR ": wrong key", seg->addr);
        if (seg->addr < prev_end)
            return check_fail(why, whylen, "segment %#" PRIxPTR " overlaps its predecessor",
                              seg->addr);
        prev_end = seg->addr + seg->size;
        if (check_segment(a, seg, &t, why, whylen))
            return -1;
        if (seg->kind != TS_SEGMENT_STITCHED)
            reserved += seg->mapped;
    }
    if (t.free_blocks[0] != a->small.free.count || t.free_blocks[1] != a->large.free.count)
        return check_fail(why, whylen, "free sets hold %zu/%zu blocks, heap has %zu/%zu",
                          a->small.free.count, a->large.free.count, t.free_blocks[0],
                          t.free_blocks[1]);
    if (t.unmapped_blocks[0] != a->small.unmapped.count ||
        t.unmapped_blocks[1] != a->large.unmapped.count)
        return check_fail(why, whylen, "unmapped sets disagree with the heap");
    if (t.allocated != a->live.count)
        return check_fail(why, whylen, "live map holds %zu, heap has %zu allocated",
                          a->live.count, t.allocated);
    if (t.pending != a->pending_count)
        return check_fail(why, whylen, "pending list holds %zu, heap has %zu", a->pending_count,
                          t.pending);
    size_t pending_seen = 0, pending_bytes[2] = {0, 0};
    for (ts_block *b = a->pending_head; b; b = b->pending_next) {
        if (b->state != TS_BLOCK_PENDING)
            return check_fail(why, whylen, "pending list has a block in state %u",
                              (unsigned)b->state);
        if (b->pending_next && b->pending_next->free_epoch < b->free_epoch)
            return check_fail(why, whylen, "pending list out of epoch order");
        pending_seen++;
        pending_bytes[b->seg->pool->small ? 0 : 1] += b->size;
    }
    if (pending_seen != a->pending_count)
        return check_fail(why, whylen, "pending list length mismatch");
    if (pending_bytes[0] != a->small.pending_bytes || pending_bytes[1] != a->large.pending_bytes)
        return check_fail(why, whylen, "pending bytes %zu/%zu, pools say %zu/%zu",
                          pending_bytes[0], pending_bytes[1], a->small.pending_bytes,
                          a->large.pending_bytes);
    if (t.lent_bytes != t.stitched_bytes || t.stitched_segments != a->stitched_segments ||
        (int64_t)t.stitched_bytes != a->st->stitched_bytes)
        return check_fail(why, whylen, "stitching accounts disagree: %zu lent, %zu stitched, "
                          "gauge %lld", t.lent_bytes, t.stitched_bytes,
                          (long long)a->st->stitched_bytes);
    if (a->retire_queue) /* every call retires what it queued before it returns */
        return check_fail(why, whylen, "range %#" PRIxPTR " still queued to retire",
                          a->retire_queue->addr);
    size_t retired = 0;
    for (const ts_segment *s = a->retired; s; s = s->retire_link, retired++)
        if (s->kind != TS_SEGMENT_STITCHED || s->retire_state != 2 || s->nblocks || s->nlenders)
            return check_fail(why, whylen, "retired range %#" PRIxPTR " still holds blocks",
                              s->addr);
    if (retired != a->retired_ranges)
        return check_fail(why, whylen, "%zu ranges retired, %zu counted", retired,
                          a->retired_ranges);
    if (reserved != a->total_allocated_memory)
        return check_fail(why, whylen, "segments hold %zu bytes, total_allocated_memory %zu",
                          reserved, a->total_allocated_memory);

    const tessera_device_stats *st = a->st;
    if (check_stat_array("allocation", st->allocation, t.allocation, why, whylen) ||
        check_stat_array("allocated_bytes", st->allocated_bytes, t.allocated_bytes, why,
                         whylen) ||
        check_stat_array("active", st->active, t.active, why, whylen) ||
        check_stat_array("active_bytes", st->active_bytes, t.active_bytes, why, whylen) ||
        check_stat_array("requested_bytes", st->requested_bytes, t.requested_bytes, why,
                         whylen) ||
        check_stat_array("segment", st->segment, t.segment, why, whylen) ||
        check_stat_array("reserved_bytes", st->reserved_bytes, t.reserved_bytes, why, whylen) ||
        check_stat_array("inactive_split", st->inactive_split, t.inactive_split, why, whylen) ||
        check_stat_array("inactive_split_bytes", st->inactive_split_bytes,
                         t.inactive_split_bytes, why, whylen))
        return -1;
    if (st->oversize_allocations.current != t.oversize_allocations ||
        st->oversize_segments.current != t.oversize_segments)
        return check_fail(why, whylen, "oversize counters disagree with the heap");
    if (a->set_fraction && a->total_allocated_memory > a->allowed_memory_maximum)
        return check_fail(why, whylen, "reserved %zu exceeds the cap %zu",
                          a->total_allocated_memory, a->allowed_memory_maximum);
    return 0;
}

int ts_allocator_check(ts_allocator *a, char *why, size_t whylen)
{
    pthread_mutex_lock(&a->lock);
    int rc = allocator_check_locked(a, why, whylen);
    pthread_mutex_unlock(&a->lock);
    return rc;
}
