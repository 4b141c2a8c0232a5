/* Address -> object map; see ptrmap.h. */
#include "core/ptrmap.h"

#include <stdlib.h>

static int ptrmap_alloc(ts_ptrmap *m, size_t capacity)
{
    ts_ptrmap_slot *slots = calloc(capacity, sizeof *slots);
    if (!slots)
        return -1;
    unsigned bits = 0;
    while (((size_t)1 << bits) < capacity)
        bits++;
    m->slots = slots;
    m->mask = capacity - 1;
    m->shift = 64 - bits;
    m->count = 0;
    return 0;
}

int ts_ptrmap_init(ts_ptrmap *m, size_t capacity_pow2)
{
    size_t cap = 16;
    while (cap < capacity_pow2)
        cap <<= 1;
    return ptrmap_alloc(m, cap);
}

void ts_ptrmap_destroy(ts_ptrmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->count = 0;
}

static void ptrmap_insert_nogrow(ts_ptrmap *m, uintptr_t key, void *val)
{
    size_t i = ts_ptrmap_index(m, key);
    while (m->slots[i].key != 0)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].val = val;
    m->count++;
}

static int ptrmap_grow(ts_ptrmap *m)
{
    ts_ptrmap old = *m;
    if (ptrmap_alloc(m, (old.mask + 1) * 2) != 0) {
        *m = old;
        return -1;
    }
    for (size_t i = 0; i <= old.mask; i++)
        if (old.slots[i].key)
            ptrmap_insert_nogrow(m, old.slots[i].key, old.slots[i].val);
    free(old.slots);
    return 0;
}

int ts_ptrmap_put(ts_ptrmap *m, uintptr_t key, void *val)
{
    /* Keep the load factor at or below 1/2: probe sequences stay around 1.5 slots. */
    if ((m->count + 1) * 2 > m->mask + 1 && ptrmap_grow(m) != 0)
        return -1;
    ptrmap_insert_nogrow(m, key, val);
    return 0;
}

void *ts_ptrmap_del(ts_ptrmap *m, uintptr_t key)
{
    size_t i = ts_ptrmap_index(m, key);
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
    void *val = m->slots[i].val;
    /* Backward shift: pull later members of the cluster into the hole when their home slot
     * lies at or before it (cyclically), so every key stays reachable from its home. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (m->slots[j].key == 0)
            break;
        size_t home = ts_ptrmap_index(m, m->slots[j].key);
        size_t dist_hole = (j - hole) & m->mask;
        size_t dist_home = (j - home) & m->mask;
        if (dist_home >= dist_hole) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].key = 0;
    m->slots[hole].val = NULL;
    m->count--;
    return val;
}
