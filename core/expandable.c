/* Expandable segments over the backend's virtual-memory operations (being written). */
#include "core/pool.h"

ts_block *expandable_alloc(ts_allocator *a, ts_pool *p, size_t size, uint64_t stream)
{
    (void)a; (void)p; (void)size; (void)stream;
    return NULL;
}

void expandable_unmap_free_block(ts_allocator *a, ts_block *b)
{
    (void)a; (void)b;
}

void expandable_release_segment_if_empty(ts_allocator *a, ts_segment *seg)
{
    (void)a; (void)seg;
}

void expandable_destroy_segment(ts_allocator *a, ts_segment *seg, bool release_memory)
{
    (void)a; (void)seg; (void)release_memory;
}
