/* Fixed-size object pool for allocator metadata (blocks, segments).
 *
 * Objects come from 64 KiB chunks obtained with malloc and are recycled through a free list;
 * chunks are only returned when the slab is destroyed. After warm-up, allocating and freeing
 * metadata never calls malloc: the steady-state hot path does no heap allocation.
 */
#ifndef TS_SLAB_H
#define TS_SLAB_H

#include <stddef.h>

typedef struct ts_slab {
    size_t obj_size;
    size_t per_chunk;
    void *free_list;  /* objects, linked through their first word */
    void *chunks;     /* chunks, linked through their first word */
    size_t live;      /* objects handed out and not returned */
} ts_slab;

void ts_slab_init(ts_slab *s, size_t obj_size);
void ts_slab_destroy(ts_slab *s);
/* Zeroed object, or NULL when memory is exhausted. */
void *ts_slab_alloc(ts_slab *s);
void ts_slab_free(ts_slab *s, void *obj);

#endif /* TS_SLAB_H */
