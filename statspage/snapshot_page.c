/* A memory snapshot from a stats page's segment map (statspage/snapshot.h): what tessera-stat
 * snapshot reads from another process. Kept apart from snapshot.c, which the shim links for
 * snapshot_on_oom and which needs no page reader. */
#include "statspage/snapshot.h"

#include <errno.h>

#include "statspage/history_read.h"

int ts_snap_add_page_slot(ts_snap *s, const tessera_page_slot_head *head,
                          const tessera_page_segment *segs, const tessera_page_block *blocks)
{
    const tessera_page_map *m = &head->map;
    /* what the device had, for a replay at the capacity the process ran on */
    ts_snap_add_device(s, head->device,
                       head->stats.device_total_bytes > 0 ? (uint64_t)head->stats.device_total_bytes : 0,
                       head->stats.memory_limit_bytes > 0 ? (uint64_t)head->stats.memory_limit_bytes : 0);
    for (uint32_t i = 0; i < m->nsegments; i++) {
        const tessera_page_segment *g = &segs[i];
        /* Every kind, every block: the model splits each segment into its mapped runs. */
        if (ts_snap_add_segment(s, head->device, g->stream, g->pool == TESSERA_POOL_SMALL,
                                g->kind != TESSERA_SEGMENT_PLAIN))
            return ENOMEM;
        uint64_t at = g->address;
        for (uint32_t k = 0; k < g->nblocks && g->first_block + k < m->nblocks; k++) {
            const tessera_page_block *b = &blocks[g->first_block + k];
            if (ts_snap_add_block(s, at, b->size, b->size - (b->slack < b->size ? b->slack : 0),
                                  b->state))
                return ENOMEM;
            at += b->size;
        }
    }
    return 0;
}

int ts_snap_add_page_trace(ts_snap *s, const tessera_page_slot_head *head, ts_history_copy *c,
                           uint64_t *past)
{
    *past = 0;
    bool cut = (head->map.flags & TESSERA_MAP_HISTORY) != 0;
    if (cut) {
        /* Event n carries seq 2n+2 (tessera/history.h): keep those before the map's instant. */
        size_t keep = 0;
        for (size_t i = 0; i < c->n; i++) {
            uint64_t n = c->events[i].seq / 2 - 1;
            if (n < head->map.history_written)
                c->events[keep++] = c->events[i];
            else
                (*past)++;
        }
        c->n = keep;
    }
    int e = ts_snap_add_trace(s, head->device, c->events, c->n);
    if (e)
        return -e;
    c->events = NULL; /* the snapshot owns them now */
    c->n = 0;
    return cut ? 0 : 1;
}
