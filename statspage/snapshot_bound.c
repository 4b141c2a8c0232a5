/* The byte bound of a memory snapshot (statspage/snapshot.h): a snapshot_on_oom or a tessera-stat
 * snapshot stays under a size whatever the history holds (a million events with frames made
 * 778 MB). The segments and blocks are the layout and are always kept whole; the history is cut
 * to its newest events until the estimate fits, and a segment or block whose frames came from a
 * cut event loses them with it. The estimate is an upper bound of what ts_snap_write_pickle
 * writes for each piece. */
#include "statspage/snapshot.h"

#include <stdlib.h>
#include <string.h>

/* Upper bounds of the pickle bytes of each piece (keys, values as their longest encoding, the
 * dict and list opcodes). */
#define BOUND_FIXED 12288u   /* the outer dict, allocator_settings, tessera (source, consistency,
                              * one device entry per slot) */
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

static uint64_t frames_bytes(const ts_snap *s, const tessera_history_event *e)
{
    uint64_t b = 0;
    for (uint32_t i = 0; i < e->nframes && i < TESSERA_HISTORY_MAX_FRAMES; i++)
        b += frame_bytes(s, e->frames[i]);
    return b;
}

/* An event's bytes: itself, and its frames again for each segment or block linked to it (which
 * lose their frames with it). links: per event of the trace, how many are linked to it. */
static uint64_t event_bytes(const ts_snap *s, const tessera_history_event *e, uint32_t links)
{
    return BOUND_EVENT + (1 + (uint64_t)links) * frames_bytes(s, e);
}

static void count_links(const ts_snap *s, ts_snap_origin o, uint32_t **links)
{
    if (o.trace >= 0 && (size_t)o.trace < s->ntraces && links[o.trace] &&
        o.index < s->traces[o.trace].nevents)
        links[o.trace][o.index]++;
}

/* After the oldest first[t] events of each trace were cut: origins move with their events, or
 * are gone with them. */
static void shift_origin(ts_snap_origin *o, const size_t *first)
{
    if (o->trace < 0)
        return;
    if (o->index < first[o->trace])
        o->trace = -1;
    else
        o->index -= first[o->trace];
}

uint64_t ts_snap_bound(ts_snap *s, uint64_t max_bytes)
{
    if (!s->linked)
        ts_snap_link(s);
    uint32_t *links[TESSERA_PAGE_MAX_SLOT_COUNT] = {0};
    for (size_t t = 0; t < s->ntraces; t++)
        links[t] = calloc(s->traces[t].nevents ? s->traces[t].nevents : 1, sizeof *links[t]);
    for (size_t i = 0; i < s->nsegs; i++)
        count_links(s, s->segs[i].origin, links);
    for (size_t i = 0; i < s->nblocks; i++)
        count_links(s, s->blocks[i].origin, links);
#define LINKS(t, k) (links[t] ? links[t][k] : 0u)
    uint64_t fixed = BOUND_FIXED + (uint64_t)s->nsegs * BOUND_SEGMENT +
                     (uint64_t)s->nblocks * BOUND_BLOCK;
    uint64_t events = 0, total = fixed;
    for (size_t t = 0; t < s->ntraces; t++)
        for (size_t k = 0; k < s->traces[t].nevents; k++)
            total += event_bytes(s, &s->traces[t].events[k], LINKS(t, k));
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
        size_t k = first[pick]++;
        total -= event_bytes(s, &s->traces[pick].events[k], LINKS(pick, k));
        events++;
    }
#undef LINKS
    for (size_t t = 0; t < s->ntraces; t++) {
        free(links[t]);
        ts_snap_trace *tr = &s->traces[t];
        memmove(tr->events, tr->events + first[t], (tr->nevents - first[t]) * sizeof *tr->events);
        tr->nevents -= first[t];
    }
    if (events) {
        for (size_t i = 0; i < s->nsegs; i++)
            shift_origin(&s->segs[i].origin, first);
        for (size_t i = 0; i < s->nblocks; i++)
            shift_origin(&s->blocks[i].origin, first);
    }
    return events;
}
