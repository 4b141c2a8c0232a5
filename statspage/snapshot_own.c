/* A memory snapshot of this process, taken from its own allocators (snapshot_on_oom). */
#include "statspage/snapshot_own.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

int ts_history_read_own(ts_history *h, ts_history_copy *out)
{
    memset(out, 0, sizeof *out);
    const tessera_history_header *hdr = ts_history_ring(h);
    out->hdr = *hdr;
    return ts_history_copy_ring(hdr, (const tessera_history_event *)(hdr + 1), out);
}

struct own_walk {
    ts_snap *s;
    int device;
    int err;
    ts_history *hist;     /* the ring to copy, under the mutex with the walk */
    ts_history_copy copy;
    bool copied;
};

/* Copy the ring from inside the walk, so that the copy and the block layout are one instant
 * and no other thread of this process writes the ring meanwhile. */
static void own_copy_ring(struct own_walk *w)
{
    if (w->hist && !w->copied)
        w->copied = ts_history_read_own(w->hist, &w->copy) == 0;
}

static int own_segment(void *user, const ts_segment_info *seg)
{
    struct own_walk *w = user;
    own_copy_ring(w);
    /* Every kind: a stitched range is where its pages are in use; its lenders list them as
     * lent, which ends their mapped runs (statspage/snapshot.h). */
    w->err = ts_snap_add_segment(w->s, w->device, seg->stream, seg->small_pool,
                                 seg->kind != TS_SEGMENT_PLAIN);
    return w->err;
}

static int own_block(void *user, const ts_segment_info *seg, const ts_block_info *blk)
{
    (void)seg;
    struct own_walk *w = user;
    w->err = ts_snap_add_block(w->s, blk->addr, blk->size, blk->requested, (uint32_t)blk->state);
    return w->err;
}

int ts_snapshot_own(ts_snap *s, ts_allocator *const *allocs, ts_history *const *hists, size_t n)
{
    bool settings = false;
    for (size_t i = 0; i < n; i++) {
        if (!allocs[i])
            continue;
        int device = ts_allocator_device(allocs[i]);
        struct own_walk w;
        memset(&w, 0, sizeof w);
        w.s = s;
        w.device = device;
        w.hist = hists ? hists[i] : NULL;
        ts_walker walker = {.user = &w, .segment = own_segment, .block = own_block};
        ts_allocator_walk(allocs[i], &walker); /* under the allocator's mutex: one instant */
        own_copy_ring(&w); /* no segment at all: nothing to be consistent with */
        if (w.copied && (w.err || ts_snap_add_trace(s, device, w.copy.events, w.copy.n) != 0))
            ts_history_copy_free(&w.copy);
        if (w.err)
            return w.err;
        tessera_device_stats st;
        ts_get_stats(allocs[i], &st);
        ts_snap_add_device(s, device, (uint64_t)st.device_total_bytes,
                           (uint64_t)st.memory_limit_bytes);
        if (!settings) { /* one configuration per process: the first allocator's */
            settings = true;
            const ts_config *cfg = ts_allocator_config(allocs[i]);
            char conf[sizeof s->conf];
            ts_config_format(cfg, conf, sizeof conf);
            ts_snap_set_settings(s, cfg, conf);
        }
    }
    return 0;
}
