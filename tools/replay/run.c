/* Replaying a trace through the core over the device model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/allocator.h"
#include "devmodel/devmodel.h"
#include "tools/replay/replay.h"

#define REPLAY_UNLIMITED ((size_t)1 << 50) /* 1 PiB: never the limit */
#define PAGE ((size_t)2 << 20)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* TESSERA_REPLAY_DEBUG_PEAK=1: where the reserved-but-unallocated bytes sit at each new peak
 * of reserved memory (a development aid for tuning policies). */
typedef struct peak_walk {
    size_t free_bytes, free_blocks, free_full_pages, free_small_pool, pending, lent, stitched_free;
    size_t page;
} peak_walk;

static int peak_block(void *user, const ts_segment_info *seg, const ts_block_info *blk)
{
    peak_walk *w = user;
    if (blk->state == TS_BLOCK_FREE) {
        if (seg->kind == TS_SEGMENT_STITCHED) {
            w->stitched_free += blk->size;
            return 0;
        }
        w->free_bytes += blk->size;
        w->free_blocks++;
        if (seg->small_pool)
            w->free_small_pool += blk->size;
        size_t pg = w->page;
        uintptr_t lo = (blk->addr + pg - 1) / pg * pg, hi = (blk->addr + blk->size) / pg * pg;
        if (hi > lo)
            w->free_full_pages += hi - lo;
    } else if (blk->state == TS_BLOCK_PENDING) {
        w->pending += blk->size;
    } else if (blk->state == TS_BLOCK_LENT) {
        w->lent += blk->size;
    }
    return 0;
}

static void peak_report(ts_allocator *a, size_t event)
{
    tessera_device_stats st;
    ts_get_stats(a, &st);
    peak_walk w = {.page = (size_t)2 << 20};
    ts_walker walker = {&w, NULL, peak_block};
    ts_allocator_walk(a, &walker);
    const double M = 1024.0 * 1024;
    fprintf(stderr,
            "peak @%zu: reserved %.1f MiB allocated %.1f MiB | free %.1f MiB in %zu blocks "
            "(%.1f MiB in whole 2 MiB pages, %.1f MiB small pool) | stitched free %.1f MiB\n",
            event, (double)st.reserved_bytes[0].current / M,
            (double)st.allocated_bytes[0].current / M, (double)w.free_bytes / M, w.free_blocks,
            (double)w.free_full_pages / M, (double)w.free_small_pool / M,
            (double)w.stitched_free / M);
}

/* Every call the device model received that reaches the driver (replay_result.device_calls). */
static uint64_t calls_of(const ts_devmodel *dev)
{
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(dev, &dc);
    return dc.seg_allocs + dc.seg_alloc_failures + dc.seg_frees + dc.vm_reserves +
           dc.vm_releases + dc.vm_creates + dc.vm_destroys + dc.vm_maps + dc.vm_unmaps +
           dc.synchronizes;
}

/* Step k (1-based) of steps ends after this many events: where trace_repeat put the end, else
 * equal shares of the trace. */
static size_t step_end(const trace *t, size_t steps, size_t k)
{
    if (t->step_ends && t->nsteps == steps)
        return t->step_ends[k - 1];
    return (size_t)((unsigned __int128)t->n * k / steps);
}

/* A request the recorded run failed, replayed: served or not, and for the first one, how much
 * of the capacity (the device, or the cap when smaller) was left right after it. */
static void run_failure_note(replay_result *r, ts_allocator *a, size_t capacity,
                             const trace_event *e, bool served)
{
    r->run_failures_served += served;
    if (r->run_failures++)
        return;
    r->run_first_failed = (size_t)e->slot + 1;
    r->run_first_size = e->size;
    r->run_first_served = served;
    if (!served)
        return;
    tessera_device_stats st;
    ts_get_stats(a, &st);
    uint64_t room = capacity ? capacity : REPLAY_UNLIMITED;
    if (st.memory_limit_bytes > 0 && (uint64_t)st.memory_limit_bytes < room)
        room = (uint64_t)st.memory_limit_bytes;
    r->run_first_bounded = room != REPLAY_UNLIMITED;
    uint64_t reserved = (uint64_t)st.reserved_bytes[TESSERA_POOL_ALL].current;
    r->run_first_spare = room > reserved ? room - reserved : 0;
}

int replay_run(const trace *t, const ts_config *cfg, size_t capacity, const replay_opts *o,
               replay_result *r)
{
    const bool debug_peak = getenv("TESSERA_REPLAY_DEBUG_PEAK") != NULL;
    int64_t last_peak = 0;
    memset(r, 0, sizeof *r);
    ts_devmodel *dev = ts_devmodel_create(capacity ? capacity : REPLAY_UNLIMITED, PAGE);
    if (!dev)
        return -1;
    if (o && o->costs)
        ts_devmodel_set_costs(dev, o->costs);
    const size_t steps = o && o->steps <= t->n ? o->steps : 0;
    /* driver time at the end of each step (steps + 1 entries; [0] = 0) */
    double *step_ns = steps ? calloc(steps + 1, sizeof *step_ns) : NULL;
    uint64_t *step_calls = steps ? calloc(steps + 1, sizeof *step_calls) : NULL;
    size_t next_step = 1;
    size_t peak_in_use = 0;
    /* Fences off: a single-stream trace reuses at once, as PyTorch does on one stream. */
    ts_backend be = ts_devmodel_backend(dev, true, false);
    ts_stats_sink sink = {NULL, NULL};
    ts_allocator *a = ts_allocator_create(cfg, &be, 0, sink);
    uintptr_t *slots = calloc(t->nslots ? t->nslots : 1, sizeof *slots);
    if (!a || !slots || (steps && (!step_ns || !step_calls))) {
        free(step_ns);
        free(step_calls);
        free(slots);
        ts_allocator_destroy(a, false);
        ts_devmodel_destroy(dev);
        return -1;
    }
    const bool progress = t->n > 2000000 && getenv("TESSERA_REPLAY_QUIET") == NULL;
    /* host time is also taken over the last quarter of the steps (at least one) */
    const size_t tail_steps = steps > 4 ? steps / 4 : 1;
    double t0 = now_ns(), last = t0, t_tail = t0;
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == TRACE_ALLOC || e->kind == TRACE_FAILED) {
            uintptr_t p = 0;
            const bool served = ts_malloc(a, e->size, e->stream, &p) == TS_OK;
            if (served)
                slots[e->slot] = p;
            else if (r->failed_allocs++ == 0) {
                r->first_failed = (size_t)e->slot + 1; /* slots number allocations in order */
                r->first_failed_size = e->size;
            }
            if (e->kind == TRACE_FAILED)
                run_failure_note(r, a, capacity, e, served);
        } else if (slots[e->slot]) {
            ts_free(a, slots[e->slot]);
            slots[e->slot] = 0;
        }
        /* growth ends with the last event that raised the peak of memory in use */
        if (ts_devmodel_peak_bytes(dev) > peak_in_use) {
            peak_in_use = ts_devmodel_peak_bytes(dev);
            r->driver_ns_growth = ts_devmodel_driver_ns(dev);
            r->device_calls_growth = calls_of(dev);
            r->growth_events = i + 1;
        }
        while (steps && next_step <= steps && i + 1 == step_end(t, steps, next_step))
        {
            if (next_step == steps - tail_steps)
                t_tail = now_ns();
            step_calls[next_step] = calls_of(dev);
            step_ns[next_step++] = ts_devmodel_driver_ns(dev);
        }
        if (debug_peak && e->kind == TRACE_ALLOC) {
            tessera_device_stats st;
            ts_get_stats(a, &st);
            if (st.reserved_bytes[0].current > last_peak + (64 << 20)) {
                last_peak = st.reserved_bytes[0].current;
                peak_report(a, i);
            }
        }
        if (progress && (i & 0xffff) == 0) {
            double now = now_ns();
            if (now - last > 1e9) {
                fprintf(stderr, "tessera-replay: %s: %zu/%zu events\r", t->source, i, t->n);
                last = now;
            }
        }
    }
    double elapsed = now_ns() - t0;
    if (progress)
        fprintf(stderr, "\n");

    tessera_device_stats st;
    ts_get_stats(a, &st);
    ts_devmodel_counters dc;
    ts_devmodel_counters_get(dev, &dc);
    r->peak_allocated = (size_t)st.allocated_bytes[TESSERA_POOL_ALL].peak;
    r->peak_reserved = (size_t)st.reserved_bytes[TESSERA_POOL_ALL].peak;
    r->peak_requested = (size_t)st.requested_bytes[TESSERA_POOL_ALL].peak;
    r->utilization = r->peak_reserved ? (double)r->peak_allocated / (double)r->peak_reserved : 0;
    r->num_device_alloc = (uint64_t)st.num_device_alloc;
    r->num_device_free = (uint64_t)st.num_device_free;
    r->num_alloc_retries = (uint64_t)st.num_alloc_retries;
    r->num_ooms = (uint64_t)st.num_ooms;
    r->num_stitches = (uint64_t)st.num_stitches;
    r->vm_maps = dc.vm_maps;
    r->vm_unmaps = dc.vm_unmaps;
    r->vm_creates = dc.vm_creates;
    r->device_calls = calls_of(dev);
    r->ops = t->n;
    r->ns_per_op = t->n ? elapsed / (double)t->n : 0;
    r->driver_ns = dc.driver_ns;
    r->driver_ns_per_step = -1;
    r->driver_ns_last_step = -1;
    if (steps) {
        /* the first step that ends at or after growth's end is the last growing one */
        size_t k = 1;
        while (k < steps && step_end(t, steps, k) < r->growth_events)
            k++;
        r->steady_steps = steps - k;
        if (steps > 1) {
            r->device_calls_last_step = step_calls[steps] - step_calls[steps - 1];
            r->driver_ns_last_step = step_ns[steps] - step_ns[steps - 1];
            const size_t ops = step_end(t, steps, steps) - step_end(t, steps, steps - tail_steps);
            r->ns_per_op_tail = ops ? (t0 + elapsed - t_tail) / (double)ops : 0;
            r->tail_steps = tail_steps;
        }
        if (r->steady_steps) {
            r->driver_ns_per_step = (step_ns[steps] - step_ns[k]) / (double)r->steady_steps;
            r->device_calls_per_step =
                (double)(step_calls[steps] - step_calls[k]) / (double)r->steady_steps;
        }
    }

    free(step_ns);
    free(step_calls);
    free(slots);
    ts_allocator_destroy(a, true);
    ts_devmodel_destroy(dev);
    return 0;
}

static bool replay_fits(const trace *t, const ts_config *cfg, size_t capacity)
{
    replay_result r;
    if (replay_run(t, cfg, capacity, NULL, &r) != 0)
        return false;
    return r.failed_allocs == 0;
}

/* replay_fits for the search: user is the trace and the configuration. */
typedef struct fits_ctx {
    const trace *t;
    const ts_config *cfg;
} fits_ctx;

static bool fits_pages(void *user, size_t pages)
{
    const fits_ctx *c = user;
    return replay_fits(c->t, c->cfg, pages * PAGE);
}

size_t replay_min_capacity(const trace *t, const ts_config *cfg, const replay_result *unlimited,
                           replay_min_check *chk)
{
    replay_min_check none;
    if (!chk)
        chk = &none;
    memset(chk, 0, sizeof *chk);
    size_t top = (unlimited->peak_reserved + PAGE - 1) / PAGE; /* in pages: known to fit */
    if (top == 0)
        return 0;
    if (!replay_fits(t, cfg, top * PAGE))
        top *= 2; /* not expected: capacity changes nothing until it is reached */
    /* nothing can fit below the peak of what the program holds at once */
    const size_t floor_pages = unlimited->peak_requested / PAGE;
    fits_ctx ctx = {t, cfg};
    const size_t pages = replay_min_search(floor_pages ? floor_pages - 1 : 0, top, fits_pages,
                                           &ctx, chk);
    chk->checked_to *= PAGE;
    return pages * PAGE;
}
