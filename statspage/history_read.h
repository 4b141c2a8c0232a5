/* Reading allocator history rings (tessera/history.h; the writer is core/history.c): copies of
 * a ring held in memory (this process's own: history_copy.c) or read from another process's
 * ring file (history_read.c). Neither needs the allocator. */
#ifndef TS_STATSPAGE_HISTORY_READ_H
#define TS_STATSPAGE_HISTORY_READ_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/history.h"
#include "tessera/stats_page.h"

/* A copy of the events of a ring. */
typedef struct ts_history_copy {
    tessera_history_header hdr;
    tessera_history_event *events; /* oldest first; malloc'd */
    size_t n;
    uint64_t dropped;              /* events lost to the ring's bound or overwritten */
} ts_history_copy;

/* Read <dir>/tessera.<pid>.history.<slot>. 0 (copy filled), ENOENT (no history), or an errno
 * value with a reason in err. */
int ts_history_read(const char *dir, int pid, uint32_t slot, ts_history_copy *out, char *err,
                    size_t errlen);
void ts_history_copy_free(ts_history_copy *c);

/* Copy the complete events of a ring (hdr validated: capacity events at ev). 0 or ENOMEM. */
int ts_history_copy_ring(const tessera_history_header *hdr, const tessera_history_event *ev,
                         ts_history_copy *out);

/* "alloc", "free_requested", ... in a snapshot's spelling ("unknown" past the table). */
static inline const char *ts_history_action_name(uint32_t action)
{
    static const char *const names[TESSERA_EV_COUNT] = {
        "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
        "segment_map", "segment_unmap", "oom", "snapshot"};
    return action < TESSERA_EV_COUNT ? names[action] : "unknown";
}

#endif /* TS_STATSPAGE_HISTORY_READ_H */
