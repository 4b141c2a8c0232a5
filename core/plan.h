/* Planned memory (plan:True, plan.c): learn the step a program repeats from its allocation
 * sequence, pack the step's short-lived blocks into one range with their lifetimes known, and
 * serve later steps at the planned offsets. docs/DESIGN.md, "Planned memory", has the algorithm,
 * its guarantees and its limits. */
#ifndef TS_PLAN_H
#define TS_PLAN_H

#include "core/internal.h"

/* Detection remembers this many allocations (a step longer than half of it is never planned),
 * and this many live-byte levels. */
#define TS_PLAN_LOG ((size_t)1 << 16)
#define TS_PLAN_LEVELS ((size_t)1 << 16)
/* The shortest and the longest step planned, in allocations: a shorter loop is served as well
 * by any cache, and packing costs O(n^2) once per plan. */
#define TS_PLAN_MIN_STEP ((size_t)16)
#define TS_PLAN_MAX_STEP ((size_t)8192)
/* The range is a plain segment of a multiple of this. */
#define TS_PLAN_ALIGN ((size_t)2 << 20)
/* A new range is fitted to the room at most this many times more (plan.c, range_make). */
#define TS_PLAN_FIT_ROUNDS 4

/* One block of a step for the packer: its size and its lifetime [start, end) in event times. */
typedef struct ts_plan_item {
    uint64_t size;
    uint64_t start, end;
} ts_plan_item;

/* Greedy by size with lifetimes (the offline packer): items in decreasing size (ties: earlier
 * start first, then lower index), each at the smallest gap that holds it among the items already
 * placed whose lifetimes overlap its own (the lowest such gap on ties), else right above the
 * highest of them. offsets[i] receives item i's offset. Returns the range's end (the largest
 * offset + size), and in *lower_bound the peak of the sum of live sizes (no packing can do with
 * less); UINT64_MAX when host memory for its scratch ran out. Offsets are multiples of 512 when
 * sizes are. */
uint64_t ts_plan_pack(const ts_plan_item *items, size_t n, uint64_t *offsets,
                      uint64_t *lower_bound);

/* The allocator's hooks (all under its mutex). plan_create/plan_destroy: with cfg.plan only.
 * plan_take: the planned block for the next request of the step, ALLOCATED and counted, or NULL
 * (not planned, or a miss: the normal policy serves it). plan_note_alloc after every successful
 * allocation (planned or not); plan_note_free after every free, with what the freed block carried
 * (it may be gone: merged). Blocks of the range carry the range's stream (the stream of the
 * allocation before it was made) whatever stream asked for them: any stream may be served there,
 * stream-ordered reuse keeps that safe (reuse_ready). plan_yield, before the normal policy takes
 * bytes of new memory: when that would pass the peak of reserved memory and a range exists, the
 * range goes (given back when empty, else handed to the normal policy) and true is returned: the
 * caller looks at its free blocks again. plan_release_idle gives the range back when nothing is in
 * it (empty cache, memory pressure); plan_forget drops it without the backend (the device
 * vanished). */
struct ts_plan *plan_create(void);
void plan_destroy(struct ts_plan *pl);
ts_block *plan_take(ts_allocator *a, size_t rounded, size_t requested);
bool plan_yield(ts_allocator *a, size_t bytes);
void plan_note_alloc(ts_allocator *a, ts_block *b, size_t rounded, uint64_t stream);
void plan_note_free(ts_allocator *a, uint64_t plan_n, size_t requested);
void plan_release_idle(ts_allocator *a);
void plan_forget(ts_allocator *a);

/* pool.c's free-set membership for blocks of the plan's range (seg->plan_free set). */
static inline void plan_insert_free(ts_block *b)
{
    b->node.k0 = b->addr;
    b->node.k1 = 0;
    b->node.k2 = 0;
    b->state = TS_BLOCK_FREE;
    ts_tree_insert(b->seg->plan_free, &b->node);
}

#endif /* TS_PLAN_H */
