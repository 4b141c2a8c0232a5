/* Address -> object map for live allocations: open addressing, linear probing, backward-shift
 * deletion (no tombstones, so lookups stay short however long the process runs).
 *
 * Keys are device addresses and never 0 (0 marks an empty slot). The table grows by doubling
 * when it is half full; it never shrinks, so a steady state never allocates.
 */
#ifndef TS_PTRMAP_H
#define TS_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ts_ptrmap_slot {
    uintptr_t key;
    void *val;
} ts_ptrmap_slot;

typedef struct ts_ptrmap {
    ts_ptrmap_slot *slots;
    size_t mask;  /* capacity - 1; capacity is a power of two */
    size_t count;
    unsigned shift; /* 64 - log2(capacity), for Fibonacci hashing */
} ts_ptrmap;

int ts_ptrmap_init(ts_ptrmap *m, size_t capacity_pow2);
void ts_ptrmap_destroy(ts_ptrmap *m);

static inline size_t ts_ptrmap_index(const ts_ptrmap *m, uintptr_t key)
{
    /* Addresses are 512-byte aligned: the multiply spreads the useful middle bits. */
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static inline void *ts_ptrmap_get(const ts_ptrmap *m, uintptr_t key)
{
    size_t i = ts_ptrmap_index(m, key);
    for (;;) {
        const ts_ptrmap_slot *s = &m->slots[i];
        if (s->key == key)
            return s->val;
        if (s->key == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Insert a key that is not present. Returns 0, or -1 when growing the table failed. */
int ts_ptrmap_put(ts_ptrmap *m, uintptr_t key, void *val);
/* Remove key; returns its value or NULL when absent. */
void *ts_ptrmap_del(ts_ptrmap *m, uintptr_t key);

#endif /* TS_PTRMAP_H */
