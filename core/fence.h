/* Safe reuse: stream-order points and reuse fences (fence.c). */
#ifndef TS_FENCE_H
#define TS_FENCE_H

#include "core/internal.h"

/* Stream-ordered reuse (fence.c). reuse_order_point makes an order point now (false when none
 * can be made: a capture is underway); reuse_ready says whether b may be handed out, making an
 * order point first when b was freed since the last one. */
bool reuse_order_point(ts_allocator *a);
bool reuse_ready(ts_allocator *a, const ts_block *b);

void fences_process(ts_allocator *a);
void fences_synchronize_all(ts_allocator *a);
void fences_defer_free(ts_allocator *a, ts_block *b);
void fences_drop_all(ts_allocator *a);
bool fences_wait_pending(ts_allocator *a);
/* A request of size found no free block in p while at least size bytes of p wait for fences:
 * wait for the oldest fence. Returns true when some block became free (try best fit again). */
bool fences_wait_oldest(ts_allocator *a, ts_pool *p, size_t size);

#endif /* TS_FENCE_H */
