/* The shared-memory stats page, writer side: the shim publishes one page per process. The byte
 * layout is include/tessera/stats_page.h; docs/stats-page.md describes it and the protocols.
 * Readers use statspage/reader.h.
 *
 * Writer, in the order the shim uses it:
 *
 *   ts_statspage *page;
 *   if (ts_statspage_create(NULL, config_text, &page, err, sizeof err) != 0) -> run without page
 *   ts_stats_sink sink;
 *   int slot = ts_statspage_claim(page, device, context_id, &sink);   (< 0: no slot: sink {0})
 *   a = ts_allocator_create(cfg, backend, device, sink);
 *   ts_allocator_set_observer(a, ts_statspage_observer, ts_statspage_observer_user(page, slot), N);
 *   ...
 *   ts_statspage_close(page, true);      at normal exit (file removed)
 *   ts_statspage_forget(page);           in the atfork child handler (file untouched)
 *
 * Neither close nor forget ever unmaps memory a sink or an observer may still touch: the shared
 * mapping is replaced, at the same address, by private anonymous memory, and the handle is
 * retired rather than freed, so a late counter update or observer call from another thread (or
 * from the forked child's copy of an allocator) lands in private memory or returns at once.
 *
 * Every writer function is async-signal-unsafe but never blocks on a reader, never prints, and
 * never terminates the process: failures are returned (0 / errno value / negative errno).
 */
#ifndef TS_STATSPAGE_WRITER_H
#define TS_STATSPAGE_WRITER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"
#include "statspage/common.h"
#include "tessera/history.h"
#include "tessera/stats_page.h"

typedef struct ts_statspage ts_statspage;

/* Create <dir>/tessera.<pid> (dir NULL: ts_statspage_dir(); a relative dir is made absolute).
 * config_text (may be NULL) is the effective configuration, normally ts_config_format() output;
 * it is truncated with "..." past TESSERA_PAGE_CONFIG_LEN - 1 bytes. A stale file of that name
 * (an earlier process of this user that had this pid) is replaced; a page of this very process,
 * or another user's file, makes it fail with EEXIST. No descriptor is kept once it returns.
 * Returns 0 and *out, or an errno value with a one-line reason in err (when err is non-NULL). */
int ts_statspage_create(const char *dir, const char *config_text, ts_statspage **out, char *err,
                        size_t errlen);

/* Claim a free slot for (device, context_id) and point *sink at its counters and sequence word.
 * The counters start at zero. Thread-safe (lock-free claim). Returns the slot index, or a
 * negative errno: -ENOSPC when every slot is taken or the file system is full, -EINVAL, -ESTALE
 * after close/forget. On failure *sink is {NULL, NULL} (the allocator then keeps private
 * counters). */
int ts_statspage_claim(ts_statspage *p, int device, uint64_t context_id, ts_stats_sink *sink);

/* The device's UUID (cuDeviceGetUuid) in the slot, by which other processes on the same device
 * find this one (layout 3). Call after claim and before an allocator writes the slot. */
void ts_statspage_set_device_uuid(ts_statspage *p, int slot, const uint8_t uuid[16]);

/* Where other processes reach this one's control channel: the secret in its name (layout 3).
 * Set once: a later call changes nothing. */
void ts_statspage_set_control(ts_statspage *p, uint64_t secret);

/* Give a slot back (context destroyed). Only after the allocator using it was destroyed. */
void ts_statspage_release(ts_statspage *p, int slot);

/* The slot's history ring (the shim's history_events:N): each map published from now on
 * records the ring's `written` count at its instant (tessera_page_map.history_written). */
void ts_statspage_set_history(ts_statspage *p, int slot, const tessera_history_header *ring);

/* The observer to register with ts_allocator_set_observer, and its user argument for a slot.
 * The observer refreshes the slot's segment map (ts_statspage_publish_map). */
void ts_statspage_observer(void *user, ts_allocator *a);
void *ts_statspage_observer_user(ts_statspage *p, int slot);
/* The (page, slot) an observer user argument stands for; -1 when user is NULL. */
int ts_statspage_observer_target(void *user, ts_statspage **page);

/* Refresh the segment map of a slot from the allocator, inside the slot's sequence lock (joining
 * the allocator's write window when it already holds the word odd, as it does around observer
 * calls; else opening a short one). Call with the allocator's mutex held (the observer is): it
 * uses ts_allocator_walk_locked. Counters are the allocator's: only the map is written. */
void ts_statspage_publish_map(ts_statspage *p, int slot, ts_allocator *a);

/* The same over any walk function (walk(ctx, w) must call w's callbacks like ts_allocator_walk
 * does). For tests and other cores. */
typedef void (*ts_statspage_walk_fn)(void *ctx, const ts_walker *w);
void ts_statspage_publish_walk(ts_statspage *p, int slot, ts_statspage_walk_fn walk, void *ctx);

/* Normal exit: remove the file when unlink_file, else mark it closed (it then reads as stale once
 * the process is gone). The handle must not be used afterwards. NULL is a no-op. */
void ts_statspage_close(ts_statspage *p, bool unlink_file);

/* In a fork child: stop writing the parent's page without touching the file. NULL is a no-op. */
void ts_statspage_forget(ts_statspage *p);

/* For tests and messages. */
const char *ts_statspage_path(const ts_statspage *p);
tessera_page_slot *ts_statspage_slot(ts_statspage *p, int slot);

#endif /* TS_STATSPAGE_WRITER_H */
