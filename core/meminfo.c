/* The memory-info policy: what a program sees from cudaMemGetInfo under tessera (allocator.h). */
#include "core/internal.h"

void ts_allocator_mem_info(ts_allocator *a, size_t dev_free, size_t dev_total, size_t *free_out,
                           size_t *total_out)
{
    pthread_mutex_lock(&a->lock);
    size_t reserved = a->total_allocated_memory;
    int64_t allocated_now = a->st->allocated_bytes[TESSERA_POOL_ALL].current;
    size_t cap = ts_allocator_cap(a);
    size_t driver = a->driver_bytes; /* the driver's own allocations count under the cap */
    pthread_mutex_unlock(&a->lock);

    size_t allocated = allocated_now > 0 ? (size_t)allocated_now : 0;
    size_t cached = reserved > allocated ? reserved - allocated : 0;
    size_t total = (cap && cap < dev_total) ? cap : dev_total;
    /* the device's free bytes plus the cache; the sum cannot wrap (both are bytes of one
     * device), but a device that misreports must not make free exceed total */
    size_t free_bytes = dev_free > SIZE_MAX - cached ? SIZE_MAX : dev_free + cached;
    if (free_bytes > total)
        free_bytes = total;
    if (cap) {
        size_t room = cap > allocated + driver ? cap - allocated - driver : 0;
        if (free_bytes > room)
            free_bytes = room;
    }
    if (free_out)
        *free_out = free_bytes;
    if (total_out)
        *total_out = total;
}
