/* Where the frames of a snapshot's segments and blocks come from (statspage/snapshot.h): PyTorch
 * gives each segment the stack that allocated it and each block the stack that allocated it;
 * tessera keeps stacks only in the history ring, so each segment and active block is linked to
 * the event of its device's trace that made it:
 *  - a block: the newest alloc at its address (if the ring holds an alloc there, its newest one
 *    is the block's own allocation: any later event is in the ring too);
 *  - a segment: the newest segment_alloc or segment_map whose range holds the segment's first
 *    byte (a mapped run may start inside a range mapped at once, after part of it went back).
 * Nothing found: no frames, which PyTorch's viewer reads as allocated before the history. */
#include "statspage/snapshot.h"

#include <stdlib.h>

/* Sort keys: indices into s->segs or s->blocks, ordered by address (one device's segments and
 * blocks never share an address). */
typedef struct link_key {
    uint64_t addr;
    size_t index;
} link_key;

static int key_cmp(const void *x, const void *y)
{
    const link_key *a = x, *b = y;
    return (a->addr > b->addr) - (a->addr < b->addr);
}

/* The first key at or above addr. */
static size_t lower_bound(const link_key *k, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (k[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool block_is_active(const ts_snap_block *b)
{
    return b->state == TESSERA_BLOCK_ALLOCATED || b->state == TESSERA_BLOCK_PENDING;
}

/* Link the segments and active blocks of trace t's device to its events, newest first. */
static void link_trace(ts_snap *s, int t, link_key *segs, link_key *blocks)
{
    const ts_snap_trace *tr = &s->traces[t];
    size_t ns = 0, nb = 0;
    for (size_t i = 0; i < s->nsegs; i++) {
        const ts_snap_segment *g = &s->segs[i];
        if (g->device != tr->device)
            continue;
        segs[ns++] = (link_key){g->addr, i};
        for (size_t k = g->first_block; k < g->first_block + g->nblocks; k++)
            if (block_is_active(&s->blocks[k]))
                blocks[nb++] = (link_key){s->blocks[k].addr, k};
    }
    qsort(segs, ns, sizeof *segs, key_cmp);
    qsort(blocks, nb, sizeof *blocks, key_cmp);
    for (size_t k = tr->nevents; k-- > 0;) {
        const tessera_history_event *e = &tr->events[k];
        if (e->action == TESSERA_EV_ALLOC) {
            size_t i = lower_bound(blocks, nb, e->addr);
            if (i < nb && blocks[i].addr == e->addr) {
                ts_snap_origin *o = &s->blocks[blocks[i].index].origin;
                if (o->trace < 0)
                    *o = (ts_snap_origin){t, k};
            }
        } else if (e->action == TESSERA_EV_SEGMENT_ALLOC || e->action == TESSERA_EV_SEGMENT_MAP) {
            /* every segment starting in [addr, addr + size); written so a forged size cannot
             * wrap around */
            for (size_t i = lower_bound(segs, ns, e->addr);
                 i < ns && segs[i].addr - e->addr < e->size; i++) {
                ts_snap_origin *o = &s->segs[segs[i].index].origin;
                if (o->trace < 0)
                    *o = (ts_snap_origin){t, k};
            }
        }
    }
}

void ts_snap_link(ts_snap *s)
{
    for (size_t i = 0; i < s->nsegs; i++)
        s->segs[i].origin.trace = -1;
    for (size_t i = 0; i < s->nblocks; i++)
        s->blocks[i].origin.trace = -1;
    s->linked = true;
    if (!s->ntraces)
        return;
    link_key *segs = malloc((s->nsegs ? s->nsegs : 1) * sizeof *segs);
    link_key *blocks = malloc((s->nblocks ? s->nblocks : 1) * sizeof *blocks);
    /* Out of memory: no frames on segments and blocks (the events keep theirs). */
    for (size_t t = 0; segs && blocks && t < s->ntraces; t++)
        link_trace(s, (int)t, segs, blocks);
    free(segs);
    free(blocks);
}
