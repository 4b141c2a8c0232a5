/* This process's memory snapshot, from its allocators and history rings (statspage/snapshot.h). */
#ifndef TS_SNAPSHOT_OWN_H
#define TS_SNAPSHOT_OWN_H

#include <stddef.h>

#include "core/allocator.h"
#include "core/history.h"
#include "statspage/history_read.h"
#include "statspage/snapshot.h"

/* Add the segments of every allocator (each walked under its mutex) and the events of its ring
 * (hists may be NULL, and so may any entry). 0, or an errno value. */
int ts_snapshot_own(ts_snap *s, ts_allocator *const *allocs, ts_history *const *hists, size_t n);

/* Copy the ring of this process's own allocator (the caller keeps other threads of this process
 * from writing it meanwhile: ts_snapshot_own copies it under the allocator's mutex). */
int ts_history_read_own(ts_history *h, ts_history_copy *out);

#endif /* TS_SNAPSHOT_OWN_H */
