/* Looking at the heap in production: lookup, walk, the largest free block (inspect.c). */
#ifndef TS_INSPECT_H
#define TS_INSPECT_H

#include "core/internal.h"

/* The largest free block of either pool, and its gauge. Lock held. */
size_t ts_largest_free_block_locked(ts_allocator *a);
void allocator_update_largest_free(ts_allocator *a);

#endif /* TS_INSPECT_H */
