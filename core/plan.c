/* Planned memory (plan:True).
 *
 * Detection. Every allocation is logged (rounded size, event time of its allocation and of its
 * free) with a rolling hash of the sequence of (rounded size, stream) codes. After every free the
 * bytes the program holds (requested, so that placement never changes the reading) form a
 * "level". A level met again with allocations in between marks a candidate period: the
 * allocations since its last visit. When the two periods before it were equally long and their
 * code sequences hash equal, the step is confirmed; it is then seen from its best boundary (the
 * free in that period after which the fewest bytes are held), so that the fewest blocks cross
 * it. Warm-up steps that differ (in length or sizes) confirm nothing; levels that a step does
 * not revisit (activations piling up) never confirm a sub-period.
 *
 * The plan. The step's short-lived blocks (allocated and freed within it) have known lifetimes;
 * ts_plan_pack places them in one range. The rest (blocks alive across steps) stays with the
 * normal policy. The range is one plain segment obtained through the backend once; its free
 * blocks live in the plan's own address tree (seg->plan_free), never in the pool's free index, so
 * the normal policy never carves it and the plan finds the block at an offset with one lookup.
 *
 * The room. A range is memory beside the normal policy's, so it is made only below the most
 * memory the program has held (the peak), at the step's next boundary after the confirmation
 * (when this round's blocks of the step are freed): what the normal policy keeps after giving its
 * cache back, plus the range, plus what the normal policy would have to grow by for the blocks
 * left out, stays under it. The packed step is cut at that height; the blocks above the cut are left
 * to the normal policy. No room: no plan, and no new try until the peak moves. Later plans take
 * the range as it is. Should the normal policy have to grow past the peak while a range exists
 * (the program does what the plan never saw), the range goes first: given back when empty, else
 * handed to the normal policy as one more cached segment. So a plan never raises the peak.
 *
 * Serving. The k-th allocation of a step is handed [base + offset[k], + rounded) when it is no
 * larger than the slot and that range is free; freed blocks merge back as in any segment, so
 * frees, stats, lookups and stream-ordered reuse (reuse_ready) work unchanged. Anything else is a
 * miss: the normal policy serves that request.
 */
#include "core/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/block.h"
#include "core/fence.h"
#include "core/pool.h"
#include "core/release.h"

#define LOG_MASK (TS_PLAN_LOG - 1)
#define HASH_BASE UINT64_C(0x100000001b3)

/* One allocation in the log (a ring indexed by allocation number). */
typedef struct plan_rec {
    uint64_t size;            /* rounded */
    uint64_t t_alloc, t_free; /* event clock; t_free 0 while live */
} plan_rec;

/* A level (bytes held after a free) and the allocation counts at its last two visits with
 * allocations in between. A hash table entry: a colliding level overwrites it. */
typedef struct plan_level {
    uint64_t level;
    uint64_t n, prev_n;
    uint8_t used, has_prev;
} plan_level;

typedef struct plan_slot {
    uint64_t offset, size; /* size 0: this position of the step is not planned */
} plan_slot;

/* Invariants: seg, when set, is the range: a plain segment of the large pool whose plan_free is
 * &free_by_addr and whose FREE blocks are all in free_by_addr keyed (addr, 0, 0); active implies
 * seg and period > 0; pending implies !active, !seg and period > 0; pos < period; slots, items
 * and full describe the same packed step of period positions. */
struct ts_plan {
    /* detection */
    plan_rec *log;       /* TS_PLAN_LOG */
    uint64_t *prefix;    /* prefix[n & LOG_MASK]: hash of the codes of allocations 0..n-1 */
    plan_level *levels;  /* TS_PLAN_LEVELS */
    uint64_t nalloc;     /* allocations seen */
    uint64_t clock;      /* allocations plus frees seen */
    uint64_t live;       /* requested bytes held */
    uint64_t stream;     /* the stream of the latest allocation: a new range's */
    /* the plan */
    plan_slot *slots;    /* TS_PLAN_MAX_STEP */
    ts_plan_item *items; /* TS_PLAN_MAX_STEP, by position: the step's blocks (size 0: alive
                          * across the boundary) while a new range waits for the boundary */
    uint64_t *full;      /* TS_PLAN_MAX_STEP: their offsets in the packed step */
    uint64_t *phash;     /* prefix hashes of the planned step's codes: period + 1 */
    uint64_t *rot;       /* rot[r]: hash of the planned step rotated to begin at r: period */
    uint64_t pow_n, pow_v; /* HASH_BASE^pow_n (the last period asked for) */
    size_t period;       /* allocations per step; 0: none */
    uint64_t n0;         /* an allocation number where a step began */
    size_t pos;          /* the next allocation's position in the step */
    size_t step_misses;
    bool active;
    uint64_t plans;
    uint64_t retry_at;   /* after a plan could not get its range: no new try before this count */
    uint32_t backoff;    /* plans refused in a row: the wait before the next try doubles */
    int64_t room_peak;   /* a new range found no room under this peak: no new try until the
                          * program has needed more memory (0: none refused) */
    uint64_t short_by;   /* the most the normal policy lacked when a range gave way; from the
                          * second time on, a new range leaves it that much more room */
    uint32_t yields;     /* ranges that gave way */
    bool pending;        /* a step is packed, its new range is made at allocation pending_at */
    uint64_t pending_at; /* the step's next boundary (its position 0), as an allocation count */
    uint64_t lower_bound;
    ts_segment *seg;
    ts_tree free_by_addr;
};

static uint64_t hash_pow(uint64_t e)
{
    uint64_t r = 1, b = HASH_BASE;
    for (; e; e >>= 1, b *= b)
        if (e & 1)
            r *= b;
    return r;
}

static uint64_t code_of(size_t rounded, uint64_t stream)
{
    return ((uint64_t)rounded * UINT64_C(0x9E3779B97F4A7C15)) ^
           ((stream + 1) * UINT64_C(0xC2B2AE3D27D4EB4F)) ^ 1;
}

/* HASH_BASE^e, remembered for the last e: in a steady loop every check is for one period. */
static uint64_t period_pow(struct ts_plan *pl, uint64_t e)
{
    if (pl->pow_n != e) {
        pl->pow_n = e;
        pl->pow_v = hash_pow(e);
    }
    return pl->pow_v;
}

/* Hash of the codes of allocations [s, e): both within the log. */
static uint64_t range_hash(struct ts_plan *pl, uint64_t s, uint64_t e)
{
    return pl->prefix[e & LOG_MASK] - pl->prefix[s & LOG_MASK] * period_pow(pl, e - s);
}

/* Hash of the planned step rotated to begin at position r. */
static uint64_t rotated_hash(const struct ts_plan *pl, size_t r)
{
    const uint64_t *h = pl->phash;
    const size_t p = pl->period;
    uint64_t tail = h[p] - h[r] * hash_pow(p - r); /* positions r..p-1 */
    return tail * hash_pow(r) + h[r];              /* then 0..r-1 */
}

struct ts_plan *plan_create(void)
{
    struct ts_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return NULL;
    pl->log = calloc(TS_PLAN_LOG, sizeof *pl->log);
    pl->prefix = calloc(TS_PLAN_LOG, sizeof *pl->prefix);
    pl->levels = calloc(TS_PLAN_LEVELS, sizeof *pl->levels);
    pl->slots = calloc(TS_PLAN_MAX_STEP, sizeof *pl->slots);
    pl->items = calloc(TS_PLAN_MAX_STEP, sizeof *pl->items);
    pl->full = calloc(TS_PLAN_MAX_STEP, sizeof *pl->full);
    pl->phash = calloc(TS_PLAN_MAX_STEP + 1, sizeof *pl->phash);
    pl->rot = calloc(TS_PLAN_MAX_STEP, sizeof *pl->rot);
    if (!pl->log || !pl->prefix || !pl->levels || !pl->slots || !pl->items || !pl->full ||
        !pl->phash || !pl->rot) {
        plan_destroy(pl);
        return NULL;
    }
    return pl;
}

void plan_destroy(struct ts_plan *pl)
{
    if (!pl)
        return;
    free(pl->log);
    free(pl->prefix);
    free(pl->levels);
    free(pl->slots);
    free(pl->items);
    free(pl->full);
    free(pl->phash);
    free(pl->rot);
    free(pl);
}

/* --- the packer --------------------------------------------------------------------------- */

typedef struct pack_key {
    uint64_t size, start;
    uint32_t index;
} pack_key;

static int pack_key_cmp(const void *x, const void *y)
{
    const pack_key *a = x, *b = y;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

typedef struct sweep_ev {
    uint64_t t;
    int64_t delta;
} sweep_ev;

static int sweep_cmp(const void *x, const void *y)
{
    const sweep_ev *a = x, *b = y;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->delta < b->delta ? -1 : a->delta > b->delta; /* an end before a start */
}

/* A placed block, copied where the packer scans: the scan is over every placed block in offset
 * order, so it reads one compact array from front to back. */
typedef struct pack_placed {
    uint64_t offset, size, start, end;
} pack_placed;

uint64_t ts_plan_pack(const ts_plan_item *items, size_t n, uint64_t *offsets,
                      uint64_t *lower_bound)
{
    pack_key *keys = malloc((n ? n : 1) * sizeof *keys);
    pack_placed *placed = malloc((n ? n : 1) * sizeof *placed); /* by offset */
    sweep_ev *ev = malloc((n ? 2 * n : 1) * sizeof *ev);
    if (!keys || !placed || !ev) {
        free(keys);
        free(placed);
        free(ev);
        return UINT64_MAX;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (pack_key){items[i].size, items[i].start, (uint32_t)i};
    qsort(keys, n, sizeof *keys, pack_key_cmp);

    uint64_t end = 0;
    size_t nplaced = 0;
    for (size_t k = 0; k < n; k++) {
        const uint32_t i = keys[k].index;
        const ts_plan_item *it = &items[i];
        uint64_t cur = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
        for (size_t q = 0; q < nplaced; q++) {
            const pack_placed *pj = &placed[q];
            if (!(pj->start < it->end && it->start < pj->end))
                continue; /* never alive together: may share addresses */
            if (pj->offset > cur) {
                uint64_t gap = pj->offset - cur;
                if (gap >= it->size && gap < best_gap) {
                    best_gap = gap;
                    best = cur;
                }
            }
            if (pj->offset + pj->size > cur)
                cur = pj->offset + pj->size;
        }
        offsets[i] = best != UINT64_MAX ? best : cur;
        if (offsets[i] + it->size > end)
            end = offsets[i] + it->size;
        size_t q = nplaced; /* insert, keeping offset order (after equal offsets) */
        while (q > 0 && placed[q - 1].offset > offsets[i])
            q--;
        memmove(&placed[q + 1], &placed[q], (nplaced - q) * sizeof *placed);
        placed[q] = (pack_placed){offsets[i], it->size, it->start, it->end};
        nplaced++;
    }

    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = (sweep_ev){items[i].start, (int64_t)items[i].size};
        ev[2 * i + 1] = (sweep_ev){items[i].end, -(int64_t)items[i].size};
    }
    qsort(ev, 2 * n, sizeof *ev, sweep_cmp);
    int64_t live = 0, peak = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        live += ev[i].delta;
        if (live > peak)
            peak = live;
    }
    *lower_bound = (uint64_t)peak;
    free(keys);
    free(placed);
    free(ev);
    return end;
}

/* --- the range ---------------------------------------------------------------------------- */

static bool range_idle(const struct ts_plan *pl)
{
    const ts_block *b = pl->seg->first;
    return b->state == TS_BLOCK_FREE && b->next == NULL;
}

static void range_gauges(ts_allocator *a, size_t range, size_t lower_bound)
{
    gauge_set(a, &a->st->plan_range_bytes, (int64_t)range);
    gauge_set(a, &a->st->plan_lower_bound_bytes, (int64_t)lower_bound);
}

void plan_release_idle(ts_allocator *a)
{
    struct ts_plan *pl = a->plan;
    if (!pl || !pl->seg || !range_idle(pl))
        return;
    ts_segment *seg = pl->seg;
    pl->seg = NULL;
    pl->active = false;
    release_block(a, seg->first);
    gauge_set(a, &a->st->plan_range_bytes, 0);
}

void plan_forget(ts_allocator *a)
{
    struct ts_plan *pl = a->plan;
    if (!pl)
        return;
    pl->seg = NULL;
    memset(&pl->free_by_addr, 0, sizeof pl->free_by_addr);
    pl->active = false;
    pl->pending = false;
    gauge_set(a, &a->st->plan_range_bytes, 0);
}

/* A new range of size bytes (there is none); false when the cap or the device refuses. */
static bool range_new(ts_allocator *a, size_t size)
{
    struct ts_plan *pl = a->plan;
    ts_block *b = segment_new_plain(a, &a->large, size, pl->stream);
    if (!b)
        return false;
    memset(&pl->free_by_addr, 0, sizeof pl->free_by_addr);
    b->seg->plan_free = &pl->free_by_addr;
    plan_insert_free(b);
    pl->seg = b->seg;
    return true;
}

static size_t align_up(uint64_t x, size_t to)
{
    return (size_t)((x + to - 1) / to * to);
}

/* The range becomes one more segment of the normal policy's cache: its free blocks go to the
 * pool's free index, and blocks still allocated there go to it when freed (seg->plan_free is
 * cleared). The plan stops. */
static void range_hand_over(ts_allocator *a)
{
    struct ts_plan *pl = a->plan;
    ts_segment *seg = pl->seg;
    seg->plan_free = NULL;
    for (ts_node *n; (n = ts_tree_first(&pl->free_by_addr)) != NULL;) {
        ts_tree_remove(&pl->free_by_addr, n);
        pool_insert_free(seg->pool, block_of_node(n));
    }
    pl->seg = NULL;
    pl->active = false;
    gauge_set(a, &a->st->plan_range_bytes, 0);
}

bool plan_yield(ts_allocator *a, size_t bytes)
{
    struct ts_plan *pl = a->plan;
    const tessera_stat *r = &a->st->reserved_bytes[TESSERA_POOL_ALL];
    if (!pl->seg || r->current + (int64_t)bytes <= r->peak)
        return false;
    const uint64_t short_by = align_up((uint64_t)(r->current + (int64_t)bytes - r->peak),
                                       TS_PLAN_ALIGN);
    if (short_by > pl->short_by)
        pl->short_by = short_by;
    pl->yields++;
    if (range_idle(pl) && !backend_capturing(a)) /* no driver call inside a graph capture */
        plan_release_idle(a);
    else
        range_hand_over(a);
    return true;
}

/* --- planning ----------------------------------------------------------------------------- */

/* A new range found no room under the peak, and the peak has not moved since. */
static bool room_refused(const ts_allocator *a)
{
    const struct ts_plan *pl = a->plan;
    return !pl->seg && pl->room_peak &&
           a->st->reserved_bytes[TESSERA_POOL_ALL].peak <= pl->room_peak;
}

/* No plan could be made (no room, or the device refused): no new try for a step, then 2, 4 ...
 * up to 64 steps, so a program that never fits does not pay for packing at every step. */
static void plan_backoff(struct ts_plan *pl, size_t period)
{
    pl->retry_at = pl->nalloc + ((uint64_t)period << pl->backoff);
    if (pl->backoff < 6)
        pl->backoff++;
}

/* The best boundary of the step [s, e) just confirmed (now is the time of the confirming free):
 * the free after which the fewest bytes are held, found by sweeping the allocations and frees
 * since s. Returns the allocation count b at that free (s <= b <= e) and its time in *t_b. The
 * step seen from there, [b - p, b), is all in the past: the allocations before s are the
 * previous period's, which repeated. */
static uint64_t best_boundary(struct ts_plan *pl, uint64_t s, uint64_t e, uint64_t *t_b)
{
    const uint64_t t_s = pl->log[s & LOG_MASK].t_alloc;
    const uint64_t lo = pl->nalloc > TS_PLAN_LOG - 1 ? pl->nalloc - (TS_PLAN_LOG - 1) : 0;
    size_t nev = 0, cap = 2 * (size_t)(e - lo);
    sweep_ev *ev = malloc((cap ? cap : 1) * sizeof *ev);
    *t_b = pl->clock;
    if (!ev)
        return e;
    for (uint64_t j = lo; j < e; j++) {
        const plan_rec *r = &pl->log[j & LOG_MASK];
        if (j >= s)
            ev[nev++] = (sweep_ev){r->t_alloc, (int64_t)r->size};
        if (r->t_free >= t_s)
            ev[nev++] = (sweep_ev){r->t_free, -(int64_t)r->size};
    }
    qsort(ev, nev, sizeof *ev, sweep_cmp);
    int64_t held = 0, best = 0;
    uint64_t allocs = 0, b = s;
    *t_b = t_s - 1; /* the boundary at s: just before its first allocation */
    for (size_t i = 0; i < nev; i++) {
        held += ev[i].delta;
        if (ev[i].delta > 0)
            allocs++;
        else if (held < best) {
            best = held;
            b = s + allocs;
            *t_b = ev[i].t;
        }
    }
    free(ev);
    return b;
}

/* Whether the step's block at position k is left out when the packed step is cut at cap. */
static inline bool cut_out(const struct ts_plan *pl, size_t k, uint64_t cap)
{
    return pl->items[k].size && pl->full[k] + pl->items[k].size > cap;
}

/* The most bytes of one pool's blocks left out at cap (small or not) alive at once, among those
 * no larger than fit (fit_only) or those larger. ev: scratch for 2 p events. */
static uint64_t leftout_peak(const struct ts_plan *pl, size_t p, uint64_t cap, bool small,
                             uint64_t fit, bool fit_only, sweep_ev *ev)
{
    size_t m = 0;
    for (size_t k = 0; k < p; k++) {
        const ts_plan_item *it = &pl->items[k];
        if (cut_out(pl, k, cap) && (it->size <= TS_SMALL_SIZE) == small &&
            (it->size <= fit) == fit_only) {
            ev[m++] = (sweep_ev){it->start, (int64_t)it->size};
            ev[m++] = (sweep_ev){it->end, -(int64_t)it->size};
        }
    }
    qsort(ev, m, sizeof *ev, sweep_cmp);
    int64_t live = 0, peak = 0;
    for (size_t i = 0; i < m; i++)
        if ((live += ev[i].delta) > peak)
            peak = live;
    return (uint64_t)peak;
}

/* What the blocks left out at cap would make the normal policy grow by, per pool: those larger
 * than its largest free block need new memory; the others, what they hold at once beyond the
 * free memory the pool holds. UINT64_MAX when host memory for the sweep ran out. */
static uint64_t leftout_excess(ts_allocator *a, size_t p, uint64_t cap)
{
    const struct ts_plan *pl = a->plan;
    sweep_ev *ev = malloc(2 * p * sizeof *ev);
    if (!ev)
        return UINT64_MAX;
    uint64_t excess = 0;
    for (int small = 0; small < 2; small++) {
        ts_pool *pool = small ? &a->small : &a->large;
        uint64_t held = 0, largest = 0;
        for (ts_node *x = ts_freeidx_first(&pool->free); x; x = ts_freeidx_next(&pool->free, x)) {
            const ts_block *b = block_of_node(x);
            held += b->size;
            if (b->size > largest)
                largest = b->size;
        }
        const uint64_t fit = leftout_peak(pl, p, cap, small, largest, true, ev);
        excess += leftout_peak(pl, p, cap, small, largest, false, ev);
        if (fit > held)
            excess += fit - held;
    }
    free(ev);
    return excess;
}

/* The end of the packed step cut at cap (0: nothing fits). */
static uint64_t cut_end(const struct ts_plan *pl, size_t p, uint64_t cap)
{
    uint64_t end = 0;
    for (size_t k = 0; k < p; k++)
        if (pl->items[k].size && !cut_out(pl, k, cap) && pl->full[k] + pl->items[k].size > end)
            end = pl->full[k] + pl->items[k].size;
    return end;
}

/* Serve the packed step (pl->items, pl->full) cut at cap from the range, from position pos. */
static void plan_start(ts_allocator *a, uint64_t cap, size_t pos)
{
    struct ts_plan *pl = a->plan;
    const size_t p = pl->period;
    for (size_t k = 0; k < p; k++) /* left out: the normal policy's */
        pl->slots[k] = cut_out(pl, k, cap) ? (plan_slot){0, 0}
                                           : (plan_slot){pl->full[k], pl->items[k].size};
    pl->pos = pos;
    pl->step_misses = 0;
    pl->pending = false;
    pl->active = true;
    if (pl->plans++ > 0)
        counter_add(a, &a->st->num_plan_replans, 1);
    range_gauges(a, pl->seg->size, (size_t)pl->lower_bound);
}

/* At the step's boundary (its blocks are all freed): make the range of a pending plan and start
 * serving. What the normal policy cached goes back first, so that the range replaces it. What
 * stays there (blocks alive across steps, and the free pieces among them that cannot go back),
 * the range, and what the normal policy would have to grow by for the blocks left out must not
 * pass the most memory the program has held so far: the packed step is cut at the height that
 * keeps to it (a subset of a packing is a packing), the blocks above left to the normal policy. */
static void range_make(ts_allocator *a)
{
    struct ts_plan *pl = a->plan;
    const size_t p = pl->period;
    pl->pending = false;
    release_cached_blocks(a);
    const int64_t peak = a->st->reserved_bytes[TESSERA_POOL_ALL].peak;
    const int64_t now = a->st->reserved_bytes[TESSERA_POOL_ALL].current;
    /* Once is not a pattern (an odd step, an evaluation): from the second time a range had to
     * give way, the next leaves the normal policy the room it lacked. */
    const uint64_t held = (uint64_t)now + (pl->yields > 1 ? pl->short_by : 0);
    const uint64_t room =
        (uint64_t)peak > held ? ((uint64_t)peak - held) / TS_PLAN_ALIGN * TS_PLAN_ALIGN : 0;
    uint64_t cap = room, end = 0;
    for (int round = 0;; round++) {
        end = cut_end(pl, p, cap);
        if (end == 0 || round == TS_PLAN_FIT_ROUNDS)
            break;
        const uint64_t need = align_up(leftout_excess(a, p, cap), TS_PLAN_ALIGN);
        if (need == 0 || need == UINT64_MAX || align_up(end, TS_PLAN_ALIGN) + need <= room)
            break;
        const uint64_t smaller = room > need ? room - need : 0;
        if (smaller >= cap)
            break;
        cap = smaller;
    }
    if (end == 0) {
        pl->room_peak = peak; /* no room: no new try until the peak moves */
        return;
    }
    if (!range_new(a, align_up(end, TS_PLAN_ALIGN))) {
        plan_backoff(pl, p); /* the device or the cap refused */
        return;
    }
    pl->backoff = 0;
    pl->room_peak = 0;
    plan_start(a, cap, 0);
}

/* Plan the step of allocations [s, e), just confirmed (a re-plan when a plan was made before):
 * pack it, then serve it from the range there is at once, or make a new range at the step's next
 * boundary. */
static void plan_build(ts_allocator *a, uint64_t s, uint64_t e)
{
    struct ts_plan *pl = a->plan;
    const size_t p = (size_t)(e - s);
    pl->active = false;
    pl->pending = false;
    if (pl->nalloc < pl->retry_at)
        return; /* the range was refused less than a step ago */
    if (room_refused(a))
        return; /* trying again would only churn the cache */
    /* Plan the step as seen from its best boundary b: [b - p, b); the next allocation, e, is at
     * position e - b of it. */
    uint64_t t_b;
    const uint64_t b = best_boundary(pl, s, e, &t_b);
    s = b - p;
    ts_plan_item *items = malloc(p * sizeof *items);
    uint64_t *offsets = malloc(p * sizeof *offsets);
    uint32_t *pos_of = malloc(p * sizeof *pos_of);
    if (!items || !offsets || !pos_of)
        goto out;
    size_t n = 0;
    for (size_t k = 0; k < p; k++) {
        const plan_rec *r = &pl->log[(s + k) & LOG_MASK];
        if (r->t_free == 0 || r->t_free > t_b)
            continue; /* alive across the boundary: the normal policy's */
        items[n] = (ts_plan_item){r->size, r->t_alloc, r->t_free};
        pos_of[n++] = (uint32_t)k;
    }
    uint64_t end = n ? ts_plan_pack(items, n, offsets, &pl->lower_bound) : 0;
    if (end == 0 || end == UINT64_MAX)
        goto out; /* nothing short-lived to plan, or no host memory */
    memset(pl->items, 0, p * sizeof *pl->items);
    for (size_t i = 0; i < n; i++) {
        pl->items[pos_of[i]] = items[i];
        pl->full[pos_of[i]] = offsets[i];
    }
    pl->phash[0] = 0;
    for (size_t k = 0; k < p; k++) {
        uint64_t code = pl->prefix[(s + k + 1) & LOG_MASK] -
                        pl->prefix[(s + k) & LOG_MASK] * HASH_BASE;
        pl->phash[k + 1] = pl->phash[k] * HASH_BASE + code;
    }
    pl->period = p;
    for (size_t r = 0; r < p; r++)
        pl->rot[r] = rotated_hash(pl, r);
    pl->n0 = s;
    if (pl->seg) {
        /* A re-plan takes the range as it is, at once, so that a program whose step changes
         * does not trade memory with the device at each change: blocks of the old plan still
         * there drain as the step goes on (a slot they hold is a miss meanwhile), and what does
         * not fit is left to the normal policy. */
        plan_start(a, pl->seg->size, (size_t)((e - b) % p)); /* the next allocation is e */
    } else {
        /* A new range waits for the boundary, when the step's blocks of this round are freed
         * and what the normal policy cached for them can go back. */
        pl->pending = true;
        pl->pending_at = b + p;
    }
out:
    free(items);
    free(offsets);
    free(pos_of);
}

/* A step [s, e) was confirmed. */
static void plan_confirm(ts_allocator *a, uint64_t s, uint64_t e)
{
    struct ts_plan *pl = a->plan;
    const size_t p = (size_t)(e - s);
    /* While the plan serves, a shorter step is a part of it (a layer of a model), and a longer
     * one is a step the plan is a part of: only a longer one replaces it. */
    if ((pl->active || pl->pending) && p < pl->period)
        return;
    if ((pl->seg || pl->pending) && pl->period == p) {
        const size_t r = (size_t)((s % p + p - pl->n0 % p) % p);
        if (pl->rot[r] == range_hash(pl, s, e)) {
            if (pl->pending)
                return; /* packed already: its range is made at the boundary */
            /* The planned step again, seen from boundary r: the next allocation is at r. A plan
             * stopped by misses (a block it did not foresee held its slots) serves again, with
             * no new packing. */
            pl->pos = r;
            if (!pl->active) {
                pl->active = true;
                pl->step_misses = 0;
            }
            return;
        }
    }
    plan_build(a, s, e);
}

/* --- the hooks ---------------------------------------------------------------------------- */

/* Hand out [addr, addr + rounded) of the range's free block fb (ALLOCATED and counted), its head
 * and tail staying free; NULL when no metadata block could be had (nothing changed). */
static ts_block *range_hand_out(ts_allocator *a, ts_block *fb, uintptr_t addr, size_t rounded,
                                size_t requested)
{
    struct ts_plan *pl = a->plan;
    tessera_device_stats *st = a->st;
    const uintptr_t end = addr + rounded;
    const size_t head = addr - fb->addr, tail = fb->addr + fb->size - end;
    ts_block *front = head ? block_new(a) : NULL, *back = tail ? block_new(a) : NULL;
    if ((head && !front) || (tail && !back)) {
        if (front)
            block_delete(a, front);
        if (back)
            block_delete(a, back);
        return NULL;
    }
    ts_pool *p = fb->seg->pool;
    ts_tree_remove(&pl->free_by_addr, &fb->node);
    if (block_is_split(fb)) {
        stat_array_decrease(a, st->inactive_split, p, 1);
        stat_array_decrease(a, st->inactive_split_bytes, p, (int64_t)fb->size);
    }
    if (head) {
        block_split_front(fb, front, head);
        plan_insert_free(front);
    }
    if (tail) {
        block_split_back(fb, back, tail);
        plan_insert_free(back);
    }
    if (head || tail) {
        stat_array_increase(a, st->inactive_split, p, (head != 0) + (tail != 0));
        stat_array_increase(a, st->inactive_split_bytes, p, (int64_t)(head + tail));
    }
    fb->state = TS_BLOCK_ALLOCATED;
    fb->requested = requested;
    fb->serial = ++a->alloc_serial;
    ts_ptrmap_put(&a->live, fb->addr, fb); /* capacity was reserved by the caller */
    block_count_allocated(a, p, fb);
    return fb;
}

ts_block *plan_take(ts_allocator *a, size_t rounded, size_t requested)
{
    struct ts_plan *pl = a->plan;
    if (pl->pending && pl->nalloc >= pl->pending_at)
        range_make(a); /* the boundary: this request is the step's first */
    if (!pl->active)
        return NULL;
    const size_t k = pl->pos;
    if (++pl->pos == pl->period) {
        pl->pos = 0;
        pl->step_misses = 0;
    }
    const plan_slot *slot = &pl->slots[k];
    if (slot->size == 0)
        return NULL; /* foreseen: the normal policy's */
    const uintptr_t addr = pl->seg->addr + slot->offset, end = addr + rounded;
    ts_node *n = rounded <= slot->size
                     ? ts_tree_floor(&pl->free_by_addr, addr, UINT64_MAX, UINT64_MAX)
                     : NULL;
    ts_block *fb = n ? block_of_node(n) : NULL;
    /* The slot must be free (an earlier block of the step may outlive its plan), and may be
     * handed out only once work that used it before is ordered before later work. */
    if (fb && fb->addr + fb->size >= end && reuse_ready(a, fb)) {
        ts_block *b = range_hand_out(a, fb, addr, rounded, requested);
        if (b) {
            counter_add(a, &a->st->num_plan_hits, 1);
            return b;
        }
    }
    counter_add(a, &a->st->num_plan_misses, 1);
    /* Most of a step missed: the program left the plan; stop until a step is confirmed. */
    if (++pl->step_misses > pl->period / 2)
        pl->active = false;
    return NULL;
}

void plan_note_alloc(ts_allocator *a, ts_block *b, size_t rounded, uint64_t stream)
{
    struct ts_plan *pl = a->plan;
    const uint64_t n = pl->nalloc++;
    plan_rec *r = &pl->log[n & LOG_MASK];
    r->size = rounded;
    r->t_alloc = ++pl->clock;
    r->t_free = 0;
    pl->prefix[(n + 1) & LOG_MASK] = pl->prefix[n & LOG_MASK] * HASH_BASE + code_of(rounded, stream);
    pl->live += b->requested;
    pl->stream = stream;
    b->plan_n = n + 1;
}

void plan_note_free(ts_allocator *a, uint64_t plan_n, size_t requested)
{
    struct ts_plan *pl = a->plan;
    pl->clock++;
    pl->live -= requested;
    if (plan_n && plan_n <= pl->nalloc && pl->nalloc - (plan_n - 1) <= TS_PLAN_LOG)
        pl->log[(plan_n - 1) & LOG_MASK].t_free = pl->clock;

    /* While a plan serves its step without a miss there is nothing to learn, and with no room
     * for a range nothing learnt could be used: detection rests (the level table is a cache miss
     * a free), and resumes at the first miss or once the peak moves. */
    if (pl->active && pl->step_misses == 0)
        return;
    if (room_refused(a))
        return;
    const uint64_t live = pl->live;
    plan_level *L = &pl->levels[(live * UINT64_C(0x9E3779B97F4A7C15)) >> 48 & (TS_PLAN_LEVELS - 1)];
    if (!L->used || L->level != live) {
        *L = (plan_level){.level = live, .n = pl->nalloc, .used = 1};
        return;
    }
    if (L->n == pl->nalloc)
        return; /* no allocation since: the same visit */
    const uint64_t p = pl->nalloc - L->n;
    if (L->has_prev && L->n - L->prev_n == p && p >= TS_PLAN_MIN_STEP && p <= TS_PLAN_MAX_STEP &&
        pl->nalloc - L->prev_n < TS_PLAN_LOG &&
        range_hash(pl, L->prev_n, L->n) == range_hash(pl, L->n, pl->nalloc))
        plan_confirm(a, L->n, pl->nalloc);
    L->prev_n = L->n;
    L->n = pl->nalloc;
    L->has_prev = 1;
}
