/* Fixed-size object pool; see slab.h. */
#include "core/slab.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_CHUNK_BYTES (64u * 1024u)

void ts_slab_init(ts_slab *s, size_t obj_size)
{
    const size_t align = alignof(max_align_t);
    memset(s, 0, sizeof *s);
    if (obj_size < sizeof(void *))
        obj_size = sizeof(void *);
    s->obj_size = (obj_size + align - 1) / align * align;
    s->per_chunk = (SLAB_CHUNK_BYTES - align) / s->obj_size;
    if (s->per_chunk == 0)
        s->per_chunk = 1;
}

void ts_slab_destroy(ts_slab *s)
{
    void *c = s->chunks;
    while (c) {
        void *next = *(void **)c;
        free(c);
        c = next;
    }
    s->chunks = NULL;
    s->free_list = NULL;
    s->live = 0;
}

static int slab_grow(ts_slab *s)
{
    const size_t align = alignof(max_align_t);
    char *chunk = malloc(align + s->per_chunk * s->obj_size);
    if (!chunk)
        return -1;
    *(void **)chunk = s->chunks;
    s->chunks = chunk;
    /* Thread the new objects onto the free list, lowest address first. */
    char *base = chunk + align;
    for (size_t i = s->per_chunk; i-- > 0;) {
        void *obj = base + i * s->obj_size;
        *(void **)obj = s->free_list;
        s->free_list = obj;
    }
    return 0;
}

void *ts_slab_alloc(ts_slab *s)
{
    if (!s->free_list && slab_grow(s) != 0)
        return NULL;
    void *obj = s->free_list;
    s->free_list = *(void **)obj;
    memset(obj, 0, s->obj_size);
    s->live++;
    return obj;
}

void ts_slab_free(ts_slab *s, void *obj)
{
    *(void **)obj = s->free_list;
    s->free_list = obj;
    s->live--;
}
