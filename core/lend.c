/* Memory that moves between processes of one device, as the core sees it: free cached memory
 * given back to the device for another process (a neighbour out of memory, or an operator's
 * release), and what this allocator's own asking got. Who asks, who is asked and how is the
 * shim's (shim/lend.c); here is only what an allocator may give and how it is counted.
 *
 * What may go is exactly what the allocator's own release-and-retry gives back (release_some):
 * free blocks, after every pending free; never an allocated block (a block another process holds
 * over IPC stays allocated until it lets go), and nothing during a capture. The device is
 * synchronised before a page is unmapped, and a plain segment's free waits for the work queued
 * before it, so no queued work can touch memory once another process is handed it.
 */
#include <time.h>

#include "core/internal.h"
#include "core/release.h"

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Cached bytes: reserved but not allocated. Under the mutex. */
static size_t cached_locked(const ts_allocator *a)
{
    size_t allocated = (size_t)a->st->allocated_bytes[TESSERA_POOL_ALL].current;
    return a->total_allocated_memory > allocated ? a->total_allocated_memory - allocated : 0;
}

static void holdings_locked(const ts_allocator *a, ts_holdings *out)
{
    if (!out)
        return;
    out->reserved = a->total_allocated_memory;
    out->allocated = (size_t)a->st->allocated_bytes[TESSERA_POOL_ALL].current;
}

size_t ts_allocator_give(ts_allocator *a, size_t want, ts_holdings *after)
{
    uint64_t t0 = now_us();
    allocator_lock(a);
    size_t given = a->paused ? 0 : release_some(a, want); /* a paused one has nothing mapped */
    counter_add(a, &a->st->num_lend_gives, 1);
    counter_add(a, &a->st->lend_given_bytes, (int64_t)given);
    counter_add(a, &a->st->lend_give_time, (int64_t)(now_us() - t0));
    holdings_locked(a, after);
    a->observe_now = given > 0;
    allocator_unlock(a);
    return given;
}

size_t ts_allocator_release_to(ts_allocator *a, size_t keep, ts_holdings *after)
{
    allocator_lock(a);
    size_t cached = cached_locked(a);
    size_t released = cached > keep && !a->paused ? release_some(a, cached - keep) : 0;
    counter_add(a, &a->st->num_remote_releases, 1);
    counter_add(a, &a->st->num_empty_cache, 1);
    holdings_locked(a, after);
    a->observe_now = true;
    allocator_unlock(a);
    return released;
}

void ts_allocator_holdings(ts_allocator *a, ts_holdings *out)
{
    allocator_lock(a);
    holdings_locked(a, out);
    allocator_unlock(a);
}

void ts_allocator_note_ask(ts_allocator *a, size_t received, uint64_t wait_us, bool served)
{
    allocator_lock(a);
    counter_add(a, &a->st->num_lend_asks, 1);
    counter_add(a, &a->st->num_lend_asks_served, served);
    counter_add(a, &a->st->lend_received_bytes, (int64_t)received);
    counter_add(a, &a->st->lend_wait_time, (int64_t)wait_us);
    allocator_unlock(a);
}
