/* An allocator paused: every byte it holds on the device copied to host memory and its physical
 * pages given back, with every address kept reserved; and resumed: new pages mapped at the same
 * addresses and the bytes copied back. Who may pause, and keeping the program off the device
 * meanwhile, are the shim's (shim/pause.c, shim/gate.c); here is only what happens to memory.
 *
 * What is kept. The virtual reservations stay, and so does every record: segments, blocks, the
 * handle records of each mapping. Only the physical handles change: each owned handle (an
 * expandable segment's) is copied out whole, unmapped and destroyed; each alias (a stitched
 * range's mapping of a page owned elsewhere) is unmapped. On resume each owned handle is created
 * again at its size, mapped at its address and filled; each alias is then mapped onto the new
 * handle that replaced the one it aliased. The addresses the program holds therefore read the
 * same bytes afterwards.
 *
 * What is refused (the allocator is left as it was):
 *  - a capture underway (TS_PAUSE_CAPTURE): nothing is released during one;
 *  - memory that cannot come back at the same address: a plain segment (one seg_alloc, which a
 *    free would give back with its address) holding a live block (TS_PAUSE_PLAIN);
 *  - memory the program holds from the driver itself (TS_PAUSE_DRIVER_MEMORY): not tessera's;
 *  - a backend without virtual memory or copies (TS_PAUSE_UNSUPPORTED).
 * The free cache goes first, as with empty_cache, so only pages holding live blocks are copied.
 *
 * The copies and the page changes bypass the history ring's wrapper: a pause changes no block,
 * and a trace that showed live memory unmapped would be a lie about the program.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/internal.h"
#include "core/history.h"
#include "core/release.h"

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The device itself, not the history ring's wrapper around it. */
static const ts_backend *device_of(const ts_allocator *a)
{
    return a->history ? ts_history_backend(a->history) : &a->be;
}

static bool backend_can_pause(const ts_backend *b)
{
    return ts_backend_has_vm(b) && b->copy_out && b->copy_in && b->synchronize;
}

/* Owned handles: an expandable segment's own pages. */
static bool segment_owns(const ts_segment *s)
{
    return s->kind == TS_SEGMENT_EXPANDABLE;
}

static ts_segment *seg_first(ts_allocator *a)
{
    ts_node *n = ts_tree_first(&a->segments);
    return n ? segment_of_node(n) : NULL;
}

static ts_segment *seg_next(ts_segment *s)
{
    ts_node *n = ts_tree_next(&s->node);
    return n ? segment_of_node(n) : NULL;
}

static ts_handle_rec *rec_first(ts_segment *s)
{
    return handle_of_node(ts_tree_first(&s->handles));
}

static ts_handle_rec *rec_next(ts_handle_rec *h)
{
    return handle_of_node(ts_tree_next(&h->node));
}

/* Does a plain segment hold a live block? Its memory could not come back at the same address. A
 * plain segment whose blocks are free, or freed and waiting for their fence, is no obstacle: the
 * pause's release waits for the fences and gives it back. */
static bool plain_live(ts_allocator *a)
{
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        if (s->kind == TS_SEGMENT_PLAIN)
            for (const ts_block *blk = s->first; blk; blk = blk->next)
                if (blk->state == TS_BLOCK_ALLOCATED)
                    return true;
    return false;
}

/* The bytes of the owned handles: what a pause copies. */
static size_t owned_bytes(ts_allocator *a)
{
    size_t n = 0;
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        if (segment_owns(s))
            for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h))
                n += h->size;
    return n;
}

static void report(const ts_allocator *a, ts_pause_report *out, size_t saved, size_t given,
                   uint64_t t0)
{
    if (!out)
        return;
    out->saved = saved;
    out->given = given;
    out->reserved = a->total_allocated_memory;
    out->allocated = (size_t)a->st->allocated_bytes[TESSERA_POOL_ALL].current;
    out->time_us = now_us() - t0;
}

/* Map every owned handle of the pause again from the saved copy; on failure undo what this call
 * mapped (old[] keeps the handles the records named before) and return the failure. */
static int owned_restore(ts_allocator *a, const ts_backend *b, uint64_t *old)
{
    size_t i = 0, off = 0;
    int rc = TS_OK;
    for (ts_segment *s = seg_first(a); s && rc == TS_OK; s = seg_next(s)) {
        if (!segment_owns(s))
            continue;
        for (ts_handle_rec *h = rec_first(s); h && rc == TS_OK; h = rec_next(h), i++) {
            uint64_t fresh;
            rc = b->vm_create(b->ctx, h->size, &fresh);
            if (rc != TS_OK)
                break;
            ts_vm_piece piece = {.size = h->size, .handle = fresh};
            rc = b->vm_map(b->ctx, h->addr, &piece, 1);
            const bool mapped = rc == TS_OK;
            if (mapped)
                rc = b->copy_in(b->ctx, h->addr, (const char *)a->pause_copy + off, h->size);
            if (rc != TS_OK) {
                /* an unmap where the map failed is a call the driver refuses as invalid */
                if (mapped)
                    b->vm_unmap(b->ctx, h->addr, h->size);
                b->vm_destroy(b->ctx, fresh);
                break;
            }
            old[i] = h->handle;
            h->handle = fresh;
            off += h->size;
        }
    }
    if (rc == TS_OK)
        return TS_OK;
    /* undo: the first i records hold new handles; give them back and name the old ones again */
    size_t j = 0;
    for (ts_segment *s = seg_first(a); s && j < i; s = seg_next(s)) {
        if (!segment_owns(s))
            continue;
        for (ts_handle_rec *h = rec_first(s); h && j < i; h = rec_next(h), j++) {
            b->vm_unmap(b->ctx, h->addr, h->size);
            b->vm_destroy(b->ctx, h->handle);
            h->handle = old[j];
        }
    }
    return rc;
}

typedef struct handle_pair {
    uint64_t old, fresh;
} handle_pair;

static int pair_cmp(const void *x, const void *y)
{
    uint64_t a = ((const handle_pair *)x)->old, b = ((const handle_pair *)y)->old;
    return (a > b) - (a < b);
}

int ts_allocator_pause(ts_allocator *a, ts_pause_report *out)
{
    const uint64_t t0 = now_us();
    allocator_lock(a);
    const ts_backend *b = device_of(a);
    int rc = TS_PAUSE_OK;
    size_t given = 0, saved = 0;
    if (a->paused)
        rc = TS_PAUSE_ALREADY;
    else if (a->driver_bytes > 0)
        rc = TS_PAUSE_DRIVER_MEMORY;
    else if (backend_capturing(a))
        rc = TS_PAUSE_CAPTURE;
    if (rc != TS_PAUSE_OK)
        goto done;
    if (plain_live(a)) {
        rc = TS_PAUSE_PLAIN;
        goto done;
    }
    given = release_some(a, SIZE_MAX); /* the free cache first, as empty_cache */
    saved = owned_bytes(a);
    if (saved == 0) { /* nothing mapped: nothing to keep */
        a->paused = true;
        goto done;
    }
    if (!backend_can_pause(b) || a->retired) {
        rc = TS_PAUSE_UNSUPPORTED;
        goto done;
    }
    void *copy = mmap(NULL, saved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) {
        rc = TS_PAUSE_HOST_MEMORY;
        goto done;
    }
    backend_enter(a);
    /* every queued kernel and copy is done before a byte is read */
    if (b->synchronize(b->ctx) != TS_OK) {
        munmap(copy, saved);
        rc = TS_PAUSE_DEVICE;
        goto done;
    }
    size_t off = 0;
    for (ts_segment *s = seg_first(a); s && rc == TS_PAUSE_OK; s = seg_next(s)) {
        if (!segment_owns(s))
            continue;
        for (ts_handle_rec *h = rec_first(s); h && rc == TS_PAUSE_OK; h = rec_next(h)) {
            if (b->copy_out(b->ctx, (char *)copy + off, h->addr, h->size) != TS_OK)
                rc = TS_PAUSE_DEVICE;
            off += h->size;
        }
    }
    if (rc != TS_PAUSE_OK) { /* nothing was unmapped yet: the allocator is as it was */
        munmap(copy, saved);
        goto done;
    }
    /* aliases and owners unmapped, then the owners' handles destroyed (a handle's memory goes
     * when it is destroyed and no longer mapped anywhere) */
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h))
            b->vm_unmap(b->ctx, h->addr, h->size);
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        if (segment_owns(s))
            for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h))
                b->vm_destroy(b->ctx, h->handle);
    a->pause_copy = copy;
    a->pause_bytes = saved;
    a->paused = true;
    given += saved;
done:
    if (rc == TS_PAUSE_OK) { /* a pause of nothing mapped is a pause too: its calls wait */
        counter_add(a, &a->st->num_pauses, 1);
        counter_add(a, &a->st->pause_saved_bytes, (int64_t)saved);
        counter_add(a, &a->st->pause_time, (int64_t)(now_us() - t0));
    }
    report(a, out, rc == TS_PAUSE_OK ? saved : 0, given, t0);
    a->observe_now = given > 0;
    allocator_unlock(a);
    return rc;
}

int ts_allocator_resume(ts_allocator *a, ts_pause_report *out)
{
    const uint64_t t0 = now_us();
    allocator_lock(a);
    const ts_backend *b = device_of(a);
    int rc = TS_PAUSE_OK;
    size_t restored = 0;
    uint64_t *old = NULL;
    handle_pair *pairs = NULL;
    if (!a->paused) {
        rc = TS_PAUSE_NOT_PAUSED;
        goto done;
    }
    if (a->pause_bytes == 0) {
        pause_drop(a);
        goto resumed;
    }
    size_t nowned = 0;
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        if (segment_owns(s))
            for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h))
                nowned++;
    old = malloc(nowned * sizeof *old);
    pairs = malloc(nowned * sizeof *pairs);
    if (!old || !pairs) {
        rc = TS_PAUSE_HOST_MEMORY;
        goto done;
    }
    backend_enter(a);
    if (owned_restore(a, b, old) != TS_OK) {
        rc = TS_PAUSE_DEVICE; /* most likely the device is full: still paused, try again later */
        goto done;
    }
    size_t i = 0;
    for (ts_segment *s = seg_first(a); s; s = seg_next(s))
        if (segment_owns(s))
            for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h), i++)
                pairs[i] = (handle_pair){.old = old[i], .fresh = h->handle};
    qsort(pairs, nowned, sizeof *pairs, pair_cmp);
    for (ts_segment *s = seg_first(a); s; s = seg_next(s)) {
        if (segment_owns(s))
            continue;
        for (ts_handle_rec *h = rec_first(s); h; h = rec_next(h)) {
            handle_pair key = {.old = h->handle};
            handle_pair *p = bsearch(&key, pairs, nowned, sizeof *pairs, pair_cmp);
            ts_vm_piece piece = {.size = h->size, .handle = p ? p->fresh : 0, .offset = h->offset};
            /* an alias whose page cannot be mapped again would read as unmapped memory: a
             * failure here is the device's, and is said (the owners are back, so it stays) */
            if (!p || b->vm_map(b->ctx, h->addr, &piece, 1) != TS_OK)
                rc = TS_PAUSE_DEVICE;
            else
                h->handle = p->fresh;
        }
    }
    restored = a->pause_bytes;
    pause_drop(a);
resumed:
    counter_add(a, &a->st->num_resumes, 1);
    counter_add(a, &a->st->pause_time, (int64_t)(now_us() - t0));
done:
    free(old);
    free(pairs);
    report(a, out, restored, 0, t0);
    a->observe_now = true;
    allocator_unlock(a);
    return rc;
}

bool ts_allocator_paused(ts_allocator *a)
{
    allocator_lock(a);
    bool p = a->paused;
    allocator_unlock(a);
    return p;
}
