/* The allocator history: a bounded ring of events (tessera/history.h) that a memory snapshot's
 * device_traces are made of.
 *
 * Writer: the shim creates one ring per allocator (ts_history_create), then attaches it
 * (ts_history_attach) before the allocator serves anything. The allocator records alloc, free
 * and oom events through TS_HISTORY_NOTE (internal.h): one predictable branch when no ring is
 * attached. Segment events are recorded by a thin backend wrapper that ts_history_attach puts in
 * front of the allocator's backend, so the core's device calls need no call site at all.
 *
 * Readers (statspage/history_read.h) copy a ring, or another process's ring file, event by
 * event, dropping events overwritten while they read.
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
/* The backend the wrapper forwards to: for changes that are no segment event (a pause). */
const struct ts_backend *ts_history_backend(const ts_history *h);

/* Record one event (the allocator's mutex held). */
void ts_history_note(ts_history *h, uint32_t action, uint64_t addr, uint64_t size,
                     uint64_t stream, uint64_t requested);

/* Remove the file (normal exit) or leave it (TESSERA_STATS_KEEP). The mapping is replaced by
 * private memory, so a late event from another thread lands harmlessly; h is never freed. */
void ts_history_close(ts_history *h, bool unlink_file);
/* In a fork child: stop writing the parent's ring without touching its file. */
void ts_history_forget(ts_history *h);

/* The shared ring of h: its header, with capacity events right after it (read by
 * statspage/snapshot_own.c for this process's own snapshots). */
const tessera_history_header *ts_history_ring(const ts_history *h);

#endif /* TS_HISTORY_H */
