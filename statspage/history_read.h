/* Reading allocator history rings (tessera/history.h; the writer is core/history.c): copies of
 * a ring held in memory (this process's own: history_copy.c) or read from another process's
 * ring file (history_read.c). Neither needs the allocator. */
#ifndef TS_STATSPAGE_HISTORY_READ_H
#define TS_STATSPAGE_HISTORY_READ_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/history.h"
#include "tessera/stats_page.h"

/* Events a copy of a ring holds at most, the newest ones (48 MiB of events): a snapshot's work
 * and size stay bounded whatever a ring claims (2^24 events of a sparse file, say). */
#define TS_HISTORY_COPY_MAX_EVENTS (1u << 18)

/* A copy of the events of a ring. */
typedef struct ts_history_copy {
    tessera_history_header hdr;
    tessera_history_event *events; /* oldest first; malloc'd */
    size_t n;
    uint64_t dropped;              /* events lost to the ring's bound or overwritten */
    uint64_t cut;                  /* older events in the ring not copied: past
                                    * TS_HISTORY_COPY_MAX_EVENTS (counted in dropped too) */
} ts_history_copy;

/* Read <dir>/tessera.<pid>.history.<slot>, the ring of a page whose file belongs to owner_uid:
 * the ring must be a regular file of that user, not writable by group or others (anyone can
 * create a file of that name in a shared directory). 0 (copy filled), ENOENT (no history), or
 * an errno value with a reason in err (EPERM: not the page owner's). */
int ts_history_read(const char *dir, int pid, uint32_t slot, uint32_t owner_uid,
                    ts_history_copy *out, char *err, size_t errlen);
void ts_history_copy_free(ts_history_copy *c);

/* Copy the complete events of a ring (hdr validated: capacity events at ev), the newest
 * TS_HISTORY_COPY_MAX_EVENTS at most. 0 or ENOMEM. */
int ts_history_copy_ring(const tessera_history_header *hdr, const tessera_history_event *ev,
                         ts_history_copy *out);

/* The events a copy takes of a ring with written events and capacity: [*first, written). */
uint64_t ts_history_window(uint64_t written, uint64_t capacity, uint64_t *first);

/* Append event number n (a copy of it) to out when it is complete (its seq says n, whole);
 * else count it dropped. out->events has room. */
void ts_history_take(ts_history_copy *out, const tessera_history_event *e, uint64_t seq_after,
                     uint64_t n);

/* "alloc", "free_requested", ... in a snapshot's spelling ("unknown" past the table). */
static inline const char *ts_history_action_name(uint32_t action)
{
    static const char *const names[TESSERA_EV_COUNT] = {
        "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
        "segment_map", "segment_unmap", "oom", "snapshot"};
    return action < TESSERA_EV_COUNT ? names[action] : "unknown";
}

#endif /* TS_STATSPAGE_HISTORY_READ_H */
