/* The stats page's link to the allocator core: the observer that refreshes a slot's segment map.
 * Kept apart from writer.c so that readers (tessera-stat, tests, the fuzz target) never pull
 * in the allocator. */
#include "statspage/writer.h"

_Static_assert((int)TS_BLOCK_ALLOCATED == TESSERA_BLOCK_ALLOCATED, "block states match the ABI");
_Static_assert((int)TS_BLOCK_PENDING == TESSERA_BLOCK_PENDING, "block states match the ABI");
_Static_assert((int)TS_BLOCK_FREE == TESSERA_BLOCK_FREE, "block states match the ABI");
_Static_assert((int)TS_BLOCK_UNMAPPED == TESSERA_BLOCK_UNMAPPED, "block states match the ABI");
_Static_assert((int)TS_BLOCK_LENT == TESSERA_BLOCK_LENT, "block states match the ABI");
_Static_assert((int)TS_SEGMENT_PLAIN == TESSERA_SEGMENT_PLAIN, "segment kinds match the ABI");
_Static_assert((int)TS_SEGMENT_EXPANDABLE == TESSERA_SEGMENT_EXPANDABLE, "kinds match the ABI");
_Static_assert((int)TS_SEGMENT_STITCHED == TESSERA_SEGMENT_STITCHED, "kinds match the ABI");

/* The observer runs with the allocator's mutex held (and its sequence lock odd): walk without
 * taking the mutex again. */
static void walk_allocator(void *ctx, const ts_walker *w)
{
    ts_allocator_walk_locked((ts_allocator *)ctx, w);
}

void ts_statspage_publish_map(ts_statspage *p, int slot, ts_allocator *a)
{
    if (!a)
        return;
    ts_statspage_publish_walk(p, slot, walk_allocator, a);
}

void ts_statspage_observer(void *user, ts_allocator *a)
{
    ts_statspage *page = NULL;
    int slot = ts_statspage_observer_target(user, &page);
    if (slot >= 0 && a)
        ts_statspage_publish_map(page, slot, a);
}
