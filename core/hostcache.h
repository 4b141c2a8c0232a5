/* Pinned host memory, cached per allocator (docs/DESIGN.md, "Pinned host memory").
 *
 * The backend pins regions (host_alloc: one driver buffer each); the cache hands out pieces of
 * them as the device pools hand out blocks of segments: best fit among the free pieces of the
 * request's class (its flags, and small or large), the rest of the piece split off, neighbours
 * merged again on free. A request is rounded up to whole pages; a large one that nothing cached
 * holds gets a region of exactly that size, a small one (at most TS_HOST_SMALL) a piece of a
 * TS_HOST_SMALL_REGION region of small requests. So the bytes pinned follow the requests, not
 * their powers of two. A freed piece is handed out again only once a fence recorded at its free
 * has completed (the host writes pinned memory directly, so the device's stream order cannot
 * protect it: the wait is on the host, by query, never blocking); a piece freed during a stream
 * capture gets its fence once the capture is over.
 *
 * Regions go back to the driver whole, in three cases:
 *   - the idle rule: a region none of which was used for pinned_idle_s seconds, checked at the
 *     allocator's operations with no driver call until one is due;
 *   - the floor rule: before a new region would take the pinned bytes past 1.04 times the most
 *     the program has held at once, regions nothing uses go back first (those of the request's
 *     class coming back as one region, see floor_make_room);
 *   - when the backend cannot pin any more (then, and only then, the cache waits for fences).
 *
 * Every function takes the allocator's lock (ts_hostcache_tick and ts_hostcache_teardown are
 * called with it held); the backend's host_alloc, host_free and fence calls are made under it,
 * like the allocator's own backend calls.
 */
#ifndef TS_HOSTCACHE_H
#define TS_HOSTCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"

/* The granularity of pieces (every piece starts on one, as a driver buffer starts on a page).
 * Requests whose rounded size is at most TS_HOST_SMALL are small: served only by regions of
 * TS_HOST_SMALL_REGION bytes pinned for small requests, so that many small buffers cost one
 * driver call and a long-lived small buffer never holds a large region. */
#define TS_HOST_PAGE ((size_t)4096)
#define TS_HOST_SMALL ((size_t)1 << 20)
#define TS_HOST_SMALL_REGION ((size_t)2 << 20)

/* Serve size bytes (> 0) of pinned host memory with flags (TS_HOST_*, core/backend.h):
 * TS_OK and *out; TS_ENOMEM when the backend cannot pin that much even after the cache gave its
 * regions back; TS_EUNSUPPORTED when this allocator cannot serve it (no host_alloc in the
 * backend, more than a quarter of the address space, unknown flags): the caller asks the driver
 * itself. */
int ts_host_alloc(ts_allocator *a, size_t size, unsigned flags, uintptr_t *out);

/* Free a piece ts_host_alloc gave: TS_OK; TS_EINVAL for any other pointer inside the cache's
 * regions (interior pointer, freed twice, never handed out: refused as the driver refuses it,
 * nothing changes); TS_ENOTFOUND when the pointer is not the cache's. */
int ts_host_free(ts_allocator *a, uintptr_t ptr);

/* What the cache knows about a pointer inside one of its regions. */
typedef struct ts_host_info {
    uintptr_t base;   /* the piece holding the pointer */
    size_t size;      /* the piece's size (whole pages) */
    bool live;        /* handed out and not freed since */
    size_t requested; /* live: the bytes the program asked for */
    uint64_t serial;  /* live: this hand-out's number, never reused by this cache */
    unsigned flags;   /* the region's flags */
} ts_host_info;

/* TS_OK and *info (may be NULL) when ptr is inside one of the cache's regions, TS_ENOTFOUND
 * otherwise. */
int ts_host_lookup(ts_allocator *a, uintptr_t ptr, ts_host_info *info);

/* Unpin every region nothing uses whose fences have completed (no wait). Returns the bytes given
 * back. */
size_t ts_host_empty_cache(ts_allocator *a);

/* The clock of the idle rule, in microseconds (monotonic); NULL restores the default
 * (CLOCK_MONOTONIC_COARSE). For tests: no test compares wall-clock times. */
void ts_host_set_clock(ts_allocator *a, int64_t (*now_us)(void *user), void *user);

/* With the allocator's lock held, at each of its operations: give back the regions idle for
 * pinned_idle_s. Costs a pointer test while no region is idle, a clock read while one is, and a
 * driver call only when one is due. */
void ts_hostcache_tick(ts_allocator *a);

/* Called by the allocator with its lock held. release: unpin the regions nothing uses (waiting
 * for their fences); else the memory is gone already (the context died): only forget it.
 * Regions with live pieces are never unpinned here: the program still holds them. */
void ts_hostcache_teardown(ts_allocator *a, bool release);

#endif /* TS_HOSTCACHE_H */
