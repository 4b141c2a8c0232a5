/* The allocator history: a bounded ring of events (tessera/history.h) that a memory snapshot's
 * device_traces are made of.
 *
 * Writer: the shim creates one ring per allocator (ts_history_create), then attaches it
 * (ts_history_attach) before the allocator serves anything. The allocator records alloc, free
 * and oom events through TS_HISTORY_NOTE (internal.h): one predictable branch when no ring is
 * attached. Segment events are recorded by a thin backend wrapper that ts_history_attach puts in
 * front of the allocator's backend, so the core's device calls need no call site at all.
 *
 * Reader: ts_history_read copies a ring file (another process's) event by event, dropping
 * events overwritten while it read.
 */
#ifndef TS_HISTORY_H
#define TS_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"
#include "tessera/history.h"

typedef struct ts_history ts_history;
struct ts_allocator;

/* Create <dir>/tessera.<pid>.history.<slot> holding capacity events. 0 and *out, or an errno
 * value with a reason in err. */
int ts_history_create(const char *dir, int slot, int device, uint32_t capacity, bool frames,
                      ts_history **out, char *err, size_t errlen);

/* Make a record events from now on (call once, before it serves anything). */
void ts_history_attach(ts_history *h, struct ts_allocator *a);

/* Record one event (the allocator's mutex held). */
void ts_history_note(ts_history *h, uint32_t action, uint64_t addr, uint64_t size,
                     uint64_t stream, uint64_t requested);

/* Remove the file (normal exit) or leave it (TESSERA_STATS_KEEP). The mapping is replaced by
 * private memory, so a late event from another thread lands harmlessly; h is never freed. */
void ts_history_close(ts_history *h, bool unlink_file);
/* In a fork child: stop writing the parent's ring without touching its file. */
void ts_history_forget(ts_history *h);

/* Copy the events of a ring held in memory (the owner's own) or read from a file. */
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
/* The shared ring of h: its header, with capacity events right after it. */
const tessera_history_header *ts_history_ring(const ts_history *h);
/* The ring of this process's own allocator (core/snapshot_own.c). */
int ts_history_read_own(ts_history *h, ts_history_copy *out);
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

#endif /* TS_HISTORY_H */
