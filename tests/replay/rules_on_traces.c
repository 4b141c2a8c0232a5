/* max_split_size_mb and garbage_collection_threshold on the real traces (tests/data/traces).
 *
 * The traces were recorded with PyTorch's defaults, so their addresses say nothing about these
 * two settings, and PyTorch is not here to record them again. Instead this replays each trace
 * under PyTorch's policy with the settings on, and before every allocation works out from the
 * free blocks (a walk of the heap) what PyTorch's rules choose, written down here on their own
 * (docs/DESIGN.md; PyTorch's get_free_block, should_split, get_allocation_size and
 * garbage_collect_cached_blocks):
 *
 *  - the candidate is the smallest free block of the request's pool and stream that fits (the
 *    lowest address among equals);
 *  - rule A: a request below max_split_size never takes a block of max_split_size or more;
 *    rule B: a request of max_split_size or more never takes a block max_non_split_rounding
 *    (20 MiB) or more larger than itself; a refused candidate means a new segment, never the
 *    next candidate;
 *  - split: the small pool when 512 bytes or more are left; the large pool only for a request
 *    below max_split_size and more than 1 MiB left; the request takes the front;
 *  - a new segment is 2 MiB (small pool), 20 MiB (below 10 MiB) or the request rounded up to
 *    2 MiB;
 *  - garbage collection, before a new segment and only above threshold x the cap: every
 *    unsplit large free block whose age (large-pool searches since it became free) is at least
 *    the average age goes, round after round with the average taken again, until reserved
 *    memory is back under the threshold or a round frees nothing.
 *
 * and checks that the allocator did exactly that: the block it handed out (address and size),
 * the segment it made, the segments collection gave back. The ages are kept here, from one walk
 * to the next (a free block keeps its age while its address and size stay the same). Each rule
 * must have decided something on these traces, or the test fails: a rule no allocation reached
 * is not checked by it.
 *
 *   rules-on-traces TRACE.pickle...
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/allocator.h"
#include "devmodel/devmodel.h"
#include "tools/replay/trace.h"

#define MiB ((size_t)1 << 20)
#define MIN_BLOCK ((size_t)512)
#define SMALL_SIZE MiB              /* kSmallSize: the small pool's largest request */
#define SMALL_BUFFER (2 * MiB)      /* kSmallBuffer */
#define LARGE_BUFFER (20 * MiB)     /* kLargeBuffer, and max_non_split_rounding's default */
#define MIN_LARGE_ALLOC (10 * MiB)  /* kMinLargeAlloc */
#define ROUND_LARGE (2 * MiB)       /* kRoundLarge */
#define UNLIMITED ((size_t)1 << 50)

/* A free block as a walk sees it. */
typedef struct fblock {
    uintptr_t addr, seg;
    size_t size;
    uintptr_t stream;
    bool small, whole; /* whole: the block is its segment (unsplit) */
    uint64_t base;     /* the large pool's search count when it became free */
} fblock;

typedef struct heap {
    fblock *b;
    size_t n, cap;
    uintptr_t *segs; /* segment addresses */
    size_t nsegs, capsegs;
} heap;

static void *grow(void *p, size_t *cap, size_t n, size_t esz)
{
    if (n < *cap)
        return p;
    *cap = *cap ? *cap * 2 : 256;
    void *q = realloc(p, *cap * esz);
    if (!q) {
        fprintf(stderr, "rules-on-traces: out of memory\n");
        exit(2);
    }
    return q;
}

static int walk_segment(void *user, const ts_segment_info *seg)
{
    heap *h = user;
    h->segs = grow(h->segs, &h->capsegs, h->nsegs, sizeof *h->segs);
    h->segs[h->nsegs++] = seg->addr;
    return 0;
}

static int walk_block(void *user, const ts_segment_info *seg, const ts_block_info *blk)
{
    heap *h = user;
    if (blk->state != TS_BLOCK_FREE)
        return 0;
    h->b = grow(h->b, &h->cap, h->n, sizeof *h->b);
    h->b[h->n++] = (fblock){blk->addr, seg->addr, blk->size, blk->stream, seg->small_pool,
                            blk->size == seg->size, 0};
    return 0;
}

static void heap_walk(ts_allocator *a, heap *h)
{
    h->n = h->nsegs = 0;
    ts_walker w = {h, walk_segment, walk_block};
    ts_allocator_walk(a, &w);
}

static bool has_segment(const heap *h, uintptr_t addr)
{
    for (size_t i = 0; i < h->nsegs; i++)
        if (h->segs[i] == addr)
            return true;
    return false;
}

/* Carry the ages over from the walk before (prev): a block with the same address and size
 * stayed free; any other became free during the last operation, at clock. */
static void heap_ages(heap *h, const heap *prev, uint64_t clock)
{
    size_t j = 0;
    for (size_t i = 0; i < h->n; i++) { /* both in address order */
        while (j < prev->n && prev->b[j].addr < h->b[i].addr)
            j++;
        bool same = j < prev->n && prev->b[j].addr == h->b[i].addr &&
                    prev->b[j].size == h->b[i].size;
        h->b[i].base = same ? prev->b[j].base : clock;
    }
}

static size_t round_size(size_t s)
{
    return s < MIN_BLOCK ? MIN_BLOCK : (s + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

static size_t allocation_size(size_t r)
{
    if (r <= SMALL_SIZE)
        return SMALL_BUFFER;
    if (r < MIN_LARGE_ALLOC)
        return LARGE_BUFFER;
    return (r + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

static bool should_split(size_t block, size_t r, bool small, size_t max_split)
{
    size_t remaining = block - r;
    return small ? remaining >= MIN_BLOCK : r < max_split && remaining > SMALL_SIZE;
}

typedef struct tally {
    size_t checked, cached, new_segments, rule_a, rule_b, whole_oversize, gc_runs, gc_rounds2,
        gc_released, gc_unchecked, gc_spared;
} tally;

typedef struct run_cfg {
    const char *name;
    size_t max_split;  /* SIZE_MAX: unlimited */
    double gc;         /* 0: off */
    double fraction;   /* of the capacity */
} run_cfg;

static int failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            if (failures++ < 20) {                                                            \
                fprintf(stderr, "FAIL %s %s event %zu: ", t->source, rc->name, i);            \
                fprintf(stderr, __VA_ARGS__);                                                 \
                fputc('\n', stderr);                                                          \
            }                                                                                 \
            goto next;                                                                        \
        }                                                                                     \
    } while (0)

/* Which unsplit large free blocks PyTorch's garbage collection frees (marks them in gone[]);
 * their bytes, or 0 when it does not run. */
static size_t gc_expected(const heap *h, uint64_t clock, size_t reserved, size_t cap, double gcthr,
                          bool *gone, size_t *rounds)
{
    const size_t threshold = (size_t)(gcthr * (double)cap);
    *rounds = 0;
    if (reserved <= threshold)
        return 0;
    const size_t target = reserved - threshold;
    uint64_t total_age = 0;
    size_t freeable = 0, reclaimed = 0;
    for (size_t k = 0; k < h->n; k++)
        if (!h->b[k].small && h->b[k].whole) {
            total_age += clock - h->b[k].base;
            freeable++;
        }
    bool freed_any = true;
    while (reclaimed < target && freed_any && freeable > 0) {
        const double avg = (double)total_age / (double)freeable;
        freed_any = false;
        ++*rounds;
        for (size_t k = 0; k < h->n; k++) {
            const fblock *b = &h->b[k];
            uint64_t age = clock - b->base;
            if (b->small || !b->whole || gone[k] || (double)age < avg)
                continue;
            gone[k] = true;
            freed_any = true;
            reclaimed += b->size;
            total_age -= age;
            freeable--;
        }
    }
    return reclaimed;
}

static void check_trace(const trace *t, const run_cfg *rc, size_t capacity, tally *ty,
                        size_t *peak_reserved)
{
    ts_config cfg;
    ts_config_defaults(&cfg); /* PyTorch's policy */
    cfg.max_split_size = rc->max_split;
    cfg.garbage_collection_threshold = rc->gc;
    cfg.per_process_memory_fraction = rc->fraction;
    ts_devmodel *dev = ts_devmodel_create(capacity, 2 * MiB);
    ts_backend be = ts_devmodel_backend(dev, true, false);
    ts_stats_sink sink = {NULL, NULL};
    ts_allocator *a = ts_allocator_create(&cfg, &be, 0, sink);
    uintptr_t *slots = calloc(t->nslots ? t->nslots : 1, sizeof *slots);
    bool *gone = NULL;
    size_t capgone = 0;
    if (!dev || !a || !slots) {
        fprintf(stderr, "rules-on-traces: cannot create the allocator\n");
        exit(2);
    }
    const size_t cap = ts_allocator_cap(a) ? ts_allocator_cap(a) : capacity; /* the fraction's */
    const bool gc_on = rc->gc > 0;
    heap pre = {0}, post = {0};
    uint64_t clock = 0; /* large-pool searches, PyTorch's get_free_blocks_call_count */
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        bool walked = false;
        if (e->kind == TRACE_FREE) {
            if (slots[e->slot])
                ts_free(a, slots[e->slot]);
            slots[e->slot] = 0;
            goto next;
        }
        if (e->size == 0)
            goto next;
        {
            const size_t r = round_size((size_t)e->size);
            const bool small = r <= SMALL_SIZE;
            tessera_device_stats st0, st1;
            ts_get_stats(a, &st0);
            if (gc_on && !small)
                clock++;
            /* the candidate: smallest fit on the stream, lowest address among equals */
            const fblock *cand = NULL;
            for (size_t k = 0; k < pre.n; k++) {
                const fblock *b = &pre.b[k];
                if (b->small == small && b->stream == e->stream && b->size >= r &&
                    (!cand || b->size < cand->size))
                    cand = b;
            }
            bool take = cand != NULL;
            if (take && !small && r < rc->max_split && cand->size >= rc->max_split) {
                take = false;
                ty->rule_a++;
            } else if (take && !small && r >= rc->max_split && cand->size >= r + LARGE_BUFFER) {
                take = false;
                ty->rule_b++;
            }
            /* garbage collection runs before a new segment */
            gone = grow(gone, &capgone, pre.n + 1, sizeof *gone);
            memset(gone, 0, (pre.n + 1) * sizeof *gone);
            size_t rounds = 0, collected = 0;
            if (!take && gc_on)
                collected = gc_expected(&pre, clock, (size_t)st0.reserved_bytes[0].current, cap,
                                        rc->gc, gone, &rounds);

            uintptr_t p = 0;
            int rcode = ts_malloc(a, (size_t)e->size, (uintptr_t)e->stream, &p);
            ts_get_stats(a, &st1);
            heap_walk(a, &post);
            walked = true;
            if (rcode == TS_OK)
                slots[e->slot] = p;
            ty->checked++;
            const size_t reserved_after_gc = (size_t)st0.reserved_bytes[0].current - collected;
            /* The exact expectation holds while nothing beyond collection runs: the new segment
             * fits the cap once collection freed what it frees (else PyTorch goes on to release
             * oversize blocks and then everything, which the unit tests pin). */
            if (!take && reserved_after_gc + allocation_size(r) > cap) {
                ty->gc_unchecked++;
                goto next;
            }
            CHECK(rcode == TS_OK, "%zu bytes not served", (size_t)e->size);
            ts_segment_info seg;
            ts_block_info blk;
            CHECK(ts_lookup(a, p, &seg, &blk) == TS_OK && blk.addr == p, "no block at %#" PRIxPTR,
                  p);
            if (take) {
                ty->cached++;
                size_t want = should_split(cand->size, r, small, rc->max_split) ? r : cand->size;
                CHECK(p == cand->addr && blk.size == want,
                      "%zu bytes: got %#" PRIxPTR " (%zu bytes), the rules give the cached block "
                      "%#" PRIxPTR " (%zu bytes of its %zu)",
                      r, p, blk.size, cand->addr, want, cand->size);
                CHECK(st1.num_device_alloc == st0.num_device_alloc &&
                      st1.num_device_free == st0.num_device_free,
                      "a cached block was taken, yet segments changed");
                if (!small && r >= rc->max_split)
                    ty->whole_oversize++;
                goto next;
            }
            ty->new_segments++;
            size_t segsize = allocation_size(r);
            size_t want = should_split(segsize, r, small, rc->max_split) ? r : segsize;
            CHECK(seg.addr == p && seg.size == segsize && blk.size == want,
                  "%zu bytes: got %#" PRIxPTR " (%zu bytes) in a segment of %zu at %#" PRIxPTR
                  "; the rules give a new segment of %zu, the block %zu bytes%s",
                  r, p, blk.size, seg.size, seg.addr, segsize, want,
                  cand ? " (the candidate was refused)" : "");
            CHECK(st1.num_device_alloc == st0.num_device_alloc + 1,
                  "a new segment, but %" PRId64 " device allocations",
                  (int64_t)(st1.num_device_alloc - st0.num_device_alloc));
            /* the segments collection gave back: exactly the expected ones (the new segment
             * may take the address of one that went) */
            size_t released = 0;
            for (size_t k = 0; k < pre.n; k++) {
                bool still = has_segment(&post, pre.b[k].seg) && pre.b[k].seg != seg.addr;
                if (pre.b[k].whole && !still)
                    released++;
                CHECK(still != gone[k],
                      "free block %#" PRIxPTR " (%zu bytes, age %" PRIu64 "): %s, the rules "
                      "say %s",
                      pre.b[k].addr, pre.b[k].size, clock - pre.b[k].base,
                      still ? "kept" : "released", gone[k] ? "collect it" : "keep it");
            }
            CHECK(st1.num_device_free == st0.num_device_free + (int64_t)released,
                  "%zu segments released, %" PRId64 " device frees", released,
                  (int64_t)(st1.num_device_free - st0.num_device_free));
            if (collected) {
                ty->gc_runs++;
                ty->gc_released += released;
                ty->gc_rounds2 += rounds >= 2;
                for (size_t k = 0; k < pre.n; k++)
                    ty->gc_spared += !pre.b[k].small && pre.b[k].whole && !gone[k];
            }
        }
    next:
        if (!walked)
            heap_walk(a, &post);
        heap_ages(&post, &pre, clock);
        heap tmp = pre;
        pre = post;
        post = tmp;
    }
    tessera_device_stats st;
    ts_get_stats(a, &st);
    *peak_reserved = (size_t)st.reserved_bytes[0].peak;
    char why[256];
    if (ts_allocator_check(a, why, sizeof why) != 0) {
        fprintf(stderr, "FAIL %s %s: heap check: %s\n", t->source, rc->name, why);
        failures++;
    }
    free(pre.b);
    free(pre.segs);
    free(post.b);
    free(post.segs);
    free(gone);
    free(slots);
    ts_allocator_destroy(a, false);
    ts_devmodel_destroy(dev);
}

static void print_tally(const trace *t, const run_cfg *rc, size_t capacity, const tally *ty)
{
    printf("%s %s on %zu MiB: %zu allocations checked: %zu cached, %zu new segments; rule A "
           "refused %zu, rule B %zu, oversize taken whole %zu; collection ran %zu times "
           "(%zu with two rounds or more), released %zu segments and spared %zu younger "
           "ones; %zu past the cap not checked\n",
           t->source, rc->name, capacity == UNLIMITED ? 0 : capacity / MiB, ty->checked,
           ty->cached, ty->new_segments, ty->rule_a, ty->rule_b, ty->whole_oversize, ty->gc_runs,
           ty->gc_rounds2, ty->gc_released, ty->gc_spared, ty->gc_unchecked);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: rules-on-traces TRACE.pickle...\n");
        return 2;
    }
    tally all_split = {0}, all_gc = {0};
    for (int ti = 1; ti < argc; ti++) {
        trace t;
        if (trace_load(&t, argv[ti]) != 0)
            return 2;
        /* 1. max_split_size_mb alone, on an unlimited device: every allocation checked. The
         *    full step asks for exactly 25, 32, 40 and 100 MiB many times: at 32 MiB requests of
         *    exactly max_split_size meet cached blocks of exactly max_split_size (the rules'
         *    boundaries); 25 MiB makes most large requests oversize. */
        const run_cfg split_cfgs[] = {
            {"max_split_size_mb:32", 32 * MiB, 0, 1.0},
            {"max_split_size_mb:25", 25 * MiB, 0, 1.0},
        };
        size_t peak = 0;
        for (size_t k = 0; k < 2; k++) {
            tally ty = {0};
            check_trace(&t, &split_cfgs[k], UNLIMITED, &ty, &peak);
            print_tally(&t, &split_cfgs[k], UNLIMITED, &ty);
            all_split.rule_a += ty.rule_a;
            all_split.rule_b += ty.rule_b;
            all_split.whole_oversize += ty.whole_oversize;
            all_split.checked += ty.checked;
        }
        /* 2. garbage_collection_threshold with a memory fraction of 0.8, on a device whose cap
         *    is 1.25 x the reserved peak without collection: collection runs near the peak. */
        size_t capacity = (size_t)((double)peak * 1.25 / 0.8);
        capacity = (capacity + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
        const run_cfg gc_cfgs[] = {
            {"garbage_collection_threshold:0.6,per_process_memory_fraction:0.8", SIZE_MAX, 0.6,
             0.8},
            {"garbage_collection_threshold:0.7,max_split_size_mb:32,"
             "per_process_memory_fraction:0.8", 32 * MiB, 0.7, 0.8},
        };
        for (size_t k = 0; k < 2; k++) {
            tally ty = {0};
            size_t unused;
            check_trace(&t, &gc_cfgs[k], capacity, &ty, &unused);
            print_tally(&t, &gc_cfgs[k], capacity, &ty);
            all_gc.gc_runs += ty.gc_runs;
            all_gc.gc_rounds2 += ty.gc_rounds2;
            all_gc.gc_released += ty.gc_released;
            all_gc.gc_spared += ty.gc_spared;
            all_gc.rule_a += ty.rule_a;
            all_gc.checked += ty.checked;
            all_gc.gc_unchecked += ty.gc_unchecked;
        }
        trace_free(&t);
    }
    /* Each rule decided something, or it was not checked. */
    if (all_split.rule_a == 0 || all_split.rule_b == 0 || all_split.whole_oversize == 0) {
        fprintf(stderr, "FAIL: max_split_size's rules never decided (A %zu, B %zu, whole %zu)\n",
                all_split.rule_a, all_split.rule_b, all_split.whole_oversize);
        failures++;
    }
    if (all_gc.gc_runs == 0 || all_gc.gc_released == 0 || all_gc.gc_spared == 0) {
        fprintf(stderr, "FAIL: garbage collection never decided (runs %zu, released %zu, "
                "spared %zu)\n", all_gc.gc_runs, all_gc.gc_released, all_gc.gc_spared);
        failures++;
    }
    printf("%s: %zu allocations checked with max_split_size_mb, %zu with collection (%zu past "
           "the cap not checked)\n", failures ? "FAIL" : "ok", all_split.checked, all_gc.checked,
           all_gc.gc_unchecked);
    return failures ? 1 : 0;
}
