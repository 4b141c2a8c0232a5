/* tessera-replay --check-pytorch: does the core put every allocation where PyTorch did?
 *
 * A snapshot records what the program asked for (alloc, free_requested) and what PyTorch's
 * allocator did about it (segment_alloc / segment_free: its cudaMalloc and cudaFree calls, and
 * the address of every block). The check:
 *  1. rebuilds the state at the start of the trace: the segments are the final snapshot's,
 *     minus those allocated during the trace, plus those freed during it; the live blocks are
 *     the final snapshot's active blocks, minus those allocated during the trace, plus those
 *     freed during it without having been allocated in it (a ring buffer that started late);
 *  2. installs that state in the core (ts_allocator_import_segment) with PyTorch's settings;
 *  3. replays alloc and free_requested; each new segment takes the address of the trace's next
 *     segment_alloc (and must have its size), and each segment_free releases that segment;
 *  4. counts allocations returned at PyTorch's address and segments matched.
 * Anything less than 100% is a behavioural difference from PyTorch.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/allocator.h"
#include "core/ptrmap.h"
#include "devmodel/devmodel.h"
#include "tools/replay/replay.h"

#define SMALL_SEGMENT ((size_t)2 << 20)

typedef struct seg_item {
    uint64_t addr, size, stream;
    bool small;
    bool present;
} seg_item;

typedef struct blk_item {
    uint64_t addr, size, requested;
    bool known_size;
    bool present;
} blk_item;

/* A pending segment_alloc the next device allocation must match. */
typedef struct script_state {
    uint64_t addr, size;
    bool armed;
    size_t matched;
    size_t core_extra; /* device allocations the trace did not make */
    size_t size_mismatch;
} script_state;

static uintptr_t script_next(void *user, size_t size)
{
    script_state *s = user;
    if (!s->armed) {
        s->core_extra++;
        return 0;
    }
    s->armed = false;
    if (s->size != size) {
        s->size_mismatch++;
        return 0;
    }
    s->matched++;
    return (uintptr_t)s->addr;
}

static int cmp_seg(const void *a, const void *b)
{
    const seg_item *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int cmp_blk(const void *a, const void *b)
{
    const blk_item *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Index of the item with this address among present ones (linear maps are fine here: a few
 * thousand entries, run once). */
typedef struct addr_index {
    ts_ptrmap map; /* addr -> index + 1 */
} addr_index;

static void config_from_snapshot(const snapshot *s, ts_config *cfg)
{
    ts_config_defaults(cfg);
    if (s->max_split_size > 0)
        cfg->max_split_size = (size_t)s->max_split_size;
    cfg->garbage_collection_threshold = s->gc_threshold;
    cfg->expandable_segments = s->expandable_segments;
    for (int i = 0; i < 16; i++)
        cfg->roundup_power2_divisions[i] = s->divisions[i];
    cfg->stats = false;
}

/* Size of a pre-trace block known only by its request: PyTorch rounded it and carved it from the
 * low end, leaving the rest unsplit when the remainder was too small to split. */
static uint64_t infer_block_size(const ts_config *cfg, const blk_item *b, uint64_t gap, bool small)
{
    uint64_t size = ts_round_size(cfg, b->requested);
    if (size > gap)
        return gap;
    uint64_t rest = gap - size;
    bool would_split = small ? rest >= 512
                             : (size < cfg->max_split_size && rest > ((uint64_t)1 << 20));
    return would_split ? size : gap;
}

/* Step 1: the state at the start of the trace (segments and live blocks, sorted by address). */
typedef struct start_state {
    seg_item *segs;
    blk_item *blks;
    size_t nseg, nblk;
    size_t skipped_expandable; /* expandable segments of the snapshot: not rebuilt */
} start_state;

/* The final snapshot's segments and active blocks, minus what the trace allocated, plus what it
 * freed (walking the events backwards). false when host memory ran out. */
static bool start_state_rebuild(const snapshot *s, start_state *st)
{
    memset(st, 0, sizeof *st);
    size_t nseg_cap = s->nsegs + s->nev + 1, nblk_cap = s->nblocks + s->nev + 1;
    seg_item *segs = st->segs = calloc(nseg_cap, sizeof *segs);
    blk_item *blks = st->blks = calloc(nblk_cap, sizeof *blks);
    addr_index si, bi;
    if (!segs || !blks || ts_ptrmap_init(&si.map, 1024) != 0)
        return false;
    if (ts_ptrmap_init(&bi.map, 4096) != 0) {
        ts_ptrmap_destroy(&si.map);
        return false;
    }
    size_t nseg = 0, nblk = 0;
    for (size_t i = 0; i < s->nsegs; i++) {
        const snap_segment *g = &s->segs[i];
        if (g->expandable) {
            st->skipped_expandable++;
            continue;
        }
        segs[nseg] = (seg_item){g->addr, g->size, g->stream, g->small, true};
        ts_ptrmap_put(&si.map, (uintptr_t)g->addr, (void *)(uintptr_t)(nseg + 1));
        nseg++;
        for (size_t k = 0; k < g->nblocks; k++) {
            const snap_block *b = &s->blocks[g->first_block + k];
            if (b->state == 0)
                continue;
            blks[nblk] = (blk_item){b->addr, b->size, b->requested, true, true};
            ts_ptrmap_put(&bi.map, (uintptr_t)b->addr, (void *)(uintptr_t)(nblk + 1));
            nblk++;
        }
    }
    for (size_t i = s->nev; i-- > 0;) {
        const snap_event *e = &s->ev[i];
        uintptr_t key = (uintptr_t)e->addr;
        if (e->action == SNAP_SEGMENT_ALLOC) {
            void *v = ts_ptrmap_del(&si.map, key);
            if (v)
                segs[(uintptr_t)v - 1].present = false;
        } else if (e->action == SNAP_SEGMENT_FREE) {
            segs[nseg] = (seg_item){e->addr, e->size, e->stream, e->size == SMALL_SEGMENT, true};
            void *old = ts_ptrmap_del(&si.map, key);
            if (old)
                segs[(uintptr_t)old - 1].present = false;
            ts_ptrmap_put(&si.map, key, (void *)(uintptr_t)(nseg + 1));
            nseg++;
        } else if (e->action == SNAP_ALLOC) {
            void *v = ts_ptrmap_del(&bi.map, key);
            if (v)
                blks[(uintptr_t)v - 1].present = false;
        } else if (e->action == SNAP_FREE_REQUESTED) {
            blks[nblk] = (blk_item){e->addr, 0, e->size, false, true};
            void *old = ts_ptrmap_del(&bi.map, key);
            if (old)
                blks[(uintptr_t)old - 1].present = false;
            ts_ptrmap_put(&bi.map, key, (void *)(uintptr_t)(nblk + 1));
            nblk++;
        }
    }
    ts_ptrmap_destroy(&si.map);
    ts_ptrmap_destroy(&bi.map);
    /* compact and sort */
    for (size_t i = 0; i < nseg; i++)
        if (segs[i].present)
            segs[st->nseg++] = segs[i];
    for (size_t i = 0; i < nblk; i++)
        if (blks[i].present)
            blks[st->nblk++] = blks[i];
    qsort(segs, st->nseg, sizeof *segs, cmp_seg);
    qsort(blks, st->nblk, sizeof *blks, cmp_blk);
    return true;
}

static void start_state_free(start_state *st)
{
    free(st->segs);
    free(st->blks);
}

/* What installing the start state found. */
typedef struct install_result {
    size_t orphan_blocks; /* live blocks that fit no segment */
    size_t import_errors;
    size_t initial_live;
} install_result;

/* Step 2: declare every start segment to the device model and import it into the core with its
 * blocks (live ones, and free gaps between them). */
static void start_state_install(const start_state *st, const ts_config *cfg, ts_devmodel *dev,
                                ts_allocator *a, install_result *r)
{
    memset(r, 0, sizeof *r);
    const seg_item *segs = st->segs;
    const blk_item *blks = st->blks;
    const size_t ns = st->nseg, nb = st->nblk;
    size_t bj = 0;
    ts_import_block *layout = calloc(2 * nb + ns + 1, sizeof *layout);
    if (!layout) {
        r->import_errors = ns;
        return;
    }
    for (size_t i = 0; i < ns; i++) {
        const seg_item *g = &segs[i];
        while (bj < nb && blks[bj].addr < g->addr)
            r->orphan_blocks++, bj++;
        size_t n = 0;
        uint64_t at = g->addr, end = g->addr + g->size;
        while (bj < nb && blks[bj].addr < end) {
            const blk_item *b = &blks[bj++];
            if (b->addr > at) {
                layout[n++] = (ts_import_block){at, b->addr - at, 0, false};
                at = b->addr;
            }
            uint64_t next = (bj < nb && blks[bj].addr < end) ? blks[bj].addr : end;
            uint64_t size = b->known_size ? b->size : infer_block_size(cfg, b, next - at, g->small);
            if (size == 0 || at + size > end) {
                r->orphan_blocks++;
                continue;
            }
            layout[n++] = (ts_import_block){at, size, b->requested, true};
            at += size;
            r->initial_live++;
        }
        if (at < end)
            layout[n++] = (ts_import_block){at, end - at, 0, false};
        if (ts_devmodel_adopt(dev, g->addr, g->size) != 0 ||
            ts_allocator_import_segment(a, g->addr, g->size, g->stream, g->small, layout, n) !=
                TS_OK)
            r->import_errors++;
    }
    r->orphan_blocks += nb - bj;
    free(layout);
}

/* What the replay of the trace's events counted. */
typedef struct replay_tally {
    size_t allocs, at_address, segments, seg_unmatched, free_errors, segfree_errors;
} replay_tally;

/* Step 3: replay alloc and free_requested; each segment_alloc arms the address script so the
 * core's next device allocation gets PyTorch's address, and each segment_free releases that
 * segment. */
static void replay_events(const snapshot *s, ts_allocator *a, script_state *script, bool verbose,
                          replay_tally *t)
{
    memset(t, 0, sizeof *t);
    ts_ptrmap live; /* trace address -> our address */
    ts_ptrmap_init(&live, 4096);
    size_t reported = 0;
    for (size_t i = 0; i < s->nev; i++) {
        const snap_event *e = &s->ev[i];
        switch (e->action) {
        case SNAP_SEGMENT_ALLOC:
            t->segments++;
            if (script->armed)
                t->seg_unmatched++; /* two in a row: the first was never asked for */
            script->armed = true;
            script->addr = e->addr;
            script->size = e->size;
            break;
        case SNAP_SEGMENT_FREE:
            if (ts_allocator_release_segment(a, (uintptr_t)e->addr) != TS_OK)
                t->segfree_errors++;
            break;
        case SNAP_ALLOC: {
            t->allocs++;
            uintptr_t p = 0;
            int rc = ts_malloc(a, e->size, e->stream, &p);
            if (script->armed) {
                t->seg_unmatched++; /* PyTorch allocated a segment here; the core did not */
                script->armed = false;
            }
            if (rc == TS_OK && p == e->addr) {
                t->at_address++;
            } else if (verbose && reported < 10) {
                fprintf(stderr,
                        "tessera-replay: event %zu: alloc %" PRIu64 " bytes: PyTorch %#" PRIx64
                        ", tessera %#" PRIxPTR "\n",
                        i, e->size, e->addr, p);
                reported++;
            }
            if (rc == TS_OK) {
                ts_ptrmap_del(&live, (uintptr_t)e->addr);
                ts_ptrmap_put(&live, (uintptr_t)e->addr, (void *)p);
            }
            break;
        }
        case SNAP_FREE_REQUESTED: {
            void *ours = ts_ptrmap_del(&live, (uintptr_t)e->addr);
            uintptr_t p = ours ? (uintptr_t)ours : (uintptr_t)e->addr;
            if (ts_free(a, p) != TS_OK)
                t->free_errors++;
            break;
        }
        default:
            break;
        }
    }
    if (script->armed)
        t->seg_unmatched++;
    ts_ptrmap_destroy(&live);
}

int replay_check_pytorch(const char *path, bool verbose)
{
    snapshot s;
    if (snapshot_load(&s, path) != 0)
        return 1; /* unreadable: tessera-replay's status 1 */
    ts_config cfg;
    config_from_snapshot(&s, &cfg);

    start_state st;
    if (!start_state_rebuild(&s, &st)) {
        fprintf(stderr, "tessera-replay: %s: out of host memory\n", s.source);
        start_state_free(&st);
        snapshot_free(&s);
        return 2;
    }

    ts_devmodel *dev = ts_devmodel_create((size_t)1 << 50, 0);
    ts_backend be = ts_devmodel_backend(dev, true, false);
    ts_stats_sink sink = {NULL, NULL};
    ts_allocator *a = ts_allocator_create(&cfg, &be, 0, sink);
    script_state script = {0};
    ts_devmodel_set_address_script(dev, script_next, &script);
    install_result in;
    start_state_install(&st, &cfg, dev, a, &in);

    replay_tally t;
    replay_events(&s, a, &script, verbose, &t);

    /* Step 4: the counts. */
    char why[256] = "";
    int heap_ok = ts_allocator_check(a, why, sizeof why) == 0;
    size_t seg_matched = script.matched;
    if (verbose || in.import_errors || in.orphan_blocks || t.free_errors || t.segfree_errors ||
        !heap_ok) {
        fprintf(stderr,
                "tessera-replay: %s: %zu events; start state: %zu segments, %zu live blocks "
                "(%zu unplaced, %zu import errors, %zu expandable skipped); %zu frees refused, "
                "%zu segment frees refused, %zu extra device allocations, %zu size "
                "mismatches%s%s\n",
                s.source, s.nev, st.nseg, in.initial_live, in.orphan_blocks, in.import_errors,
                st.skipped_expandable, t.free_errors, t.segfree_errors, script.core_extra,
                script.size_mismatch, heap_ok ? "" : "; heap check: ", heap_ok ? "" : why);
    }
    printf("allocations at PyTorch's address: %zu/%zu; segments matched: %zu/%zu\n",
           t.at_address, t.allocs, seg_matched, t.segments);

    ts_allocator_destroy(a, false);
    ts_devmodel_destroy(dev);
    start_state_free(&st);
    snapshot_free(&s);
    return (t.at_address == t.allocs && seg_matched == t.segments && heap_ok) ? 0 : 1;
}
