/* Giving cached memory back to the device (release.c). */
#ifndef TS_RELEASE_H
#define TS_RELEASE_H

#include "core/internal.h"

void release_block(ts_allocator *a, ts_block *b);
bool release_available_cached_blocks(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream);
void release_cached_blocks(ts_allocator *a);
void garbage_collect_cached_blocks(ts_allocator *a);

#endif /* TS_RELEASE_H */
