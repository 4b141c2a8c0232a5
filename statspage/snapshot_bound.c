/* The byte bound of a memory snapshot (statspage/snapshot.h): a snapshot_on_oom or a tessera-stat
 * snapshot stays under a size whatever the history holds (a million events with frames made
 * 778 MB). The segments and blocks are the layout and are always kept whole; the history is cut
 * to its newest events until the estimate fits. The estimate is an upper bound of what
 * ts_snap_write_pickle writes for each piece. */
#include "statspage/snapshot.h"

#include <string.h>

/* Upper bounds of the pickle bytes of each piece (keys, values as their longest encoding, the
 * dict and list opcodes). */
#define BOUND_FIXED 4096u    /* the outer dict, allocator_settings, tessera (source, consistency) */
#define BOUND_SEGMENT 400u
#define BOUND_BLOCK 160u
#define BOUND_EVENT 200u
#define BOUND_FRAME 80u      /* plus the length of its file's path */

static uint64_t frame_bytes(const ts_snap *s, uint64_t pc)
{
    for (size_t i = 0; i < s->nmaps; i++)
        if (pc >= s->maps[i].start && pc < s->maps[i].end)
            return BOUND_FRAME + strnlen(s->maps[i].path, sizeof s->maps[i].path);
    return BOUND_FRAME + 2;
}

static uint64_t event_bytes(const ts_snap *s, const tessera_history_event *e)
{
    uint64_t b = BOUND_EVENT;
    for (uint32_t i = 0; i < e->nframes && i < TESSERA_HISTORY_MAX_FRAMES; i++)
        b += frame_bytes(s, e->frames[i]);
    return b;
}

uint64_t ts_snap_bound(ts_snap *s, uint64_t max_bytes)
{
    uint64_t fixed = BOUND_FIXED + (uint64_t)s->nsegs * BOUND_SEGMENT +
                     (uint64_t)s->nblocks * BOUND_BLOCK;
    uint64_t events = 0, total = fixed;
    for (size_t t = 0; t < s->ntraces; t++)
        for (size_t k = 0; k < s->traces[t].nevents; k++)
            total += event_bytes(s, &s->traces[t].events[k]);
    if (total <= max_bytes)
        return 0;
    /* Drop the oldest event of whichever device's oldest kept event is oldest, until it fits:
     * the newest history of every device survives. */
    size_t first[TESSERA_PAGE_MAX_SLOT_COUNT] = {0};
    while (total > max_bytes) {
        size_t pick = SIZE_MAX;
        for (size_t t = 0; t < s->ntraces; t++)
            if (first[t] < s->traces[t].nevents &&
                (pick == SIZE_MAX || s->traces[t].events[first[t]].time_us <
                                         s->traces[pick].events[first[pick]].time_us))
                pick = t;
        if (pick == SIZE_MAX)
            break; /* the layout alone is over the bound: kept whole */
        total -= event_bytes(s, &s->traces[pick].events[first[pick]++]);
        events++;
    }
    for (size_t t = 0; t < s->ntraces; t++) {
        ts_snap_trace *tr = &s->traces[t];
        memmove(tr->events, tr->events + first[t], (tr->nevents - first[t]) * sizeof *tr->events);
        tr->nevents -= first[t];
    }
    return events;
}
