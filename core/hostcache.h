/* Pinned host memory, cached per allocator (docs/DESIGN.md, "Pinned host memory").
 *
 * The policy follows PyTorch's CachingHostAllocator: a request is rounded up to a power of two
 * and served by a cached buffer of exactly that size and the same flags, or by a new buffer the
 * backend pins (host_alloc); a freed buffer goes back to its class and is handed out again only
 * once a fence recorded at its free has completed (the host writes pinned memory directly, so the
 * device's stream order cannot protect it: the wait is on the host, by query, never blocking).
 * Only when the backend cannot pin any more are cached buffers unpinned, and only then does the
 * cache wait for their fences.
 *
 * Every function takes the allocator's lock; the backend's host_alloc, host_free and fence calls
 * are made under it, like the allocator's own backend calls.
 */
#ifndef TS_HOSTCACHE_H
#define TS_HOSTCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/allocator.h"

/* Serve size bytes (> 0) of pinned host memory with flags (TS_HOST_*, core/backend.h):
 * TS_OK and *out; TS_ENOMEM when the backend cannot pin that much even after the cache gave its
 * buffers back; TS_EUNSUPPORTED when this allocator cannot serve it (no host_alloc in the backend,
 * a size no power of two holds, unknown flags): the caller asks the driver itself. */
int ts_host_alloc(ts_allocator *a, size_t size, unsigned flags, uintptr_t *out);

/* Free a buffer ts_host_alloc gave: TS_OK; TS_EINVAL for a pointer inside one of the cache's
 * buffers that is not a live buffer's start (interior pointer, or freed twice: refused as the
 * driver refuses it, nothing changes); TS_ENOTFOUND when the pointer is not the cache's. */
int ts_host_free(ts_allocator *a, uintptr_t ptr);

/* Is ptr inside one of the cache's buffers (live or cached)? *base and *size (may be NULL)
 * receive the buffer. */
int ts_host_lookup(ts_allocator *a, uintptr_t ptr, uintptr_t *base, size_t *size);

/* Unpin every cached buffer whose fence has completed (no wait). Returns the bytes given back. */
size_t ts_host_empty_cache(ts_allocator *a);

/* Called by the allocator with its lock held. release: unpin the cached buffers (waiting for
 * their fences); else the memory is gone already (the context died): only forget it. Live
 * buffers are never unpinned here: the program still holds them. */
void ts_hostcache_teardown(ts_allocator *a, bool release);

#endif /* TS_HOSTCACHE_H */
