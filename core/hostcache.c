/* The pinned host memory cache: regions, pieces, the reuse rule and the give-back rules
 * (hostcache.h). */
#include "core/hostcache.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

#define NFLAGS (TS_HOST_FLAGS_MASK + 1)

/* Larger requests are not the cache's (the driver answers them): no host has a quarter of the
 * address space to pin, and below it no sum of the floor rule can overflow. */
#define HOST_MAX (SIZE_MAX / 4)

/* The floor rule: a new region may take the pinned bytes up to the most the program has held at
 * once (in pages) plus this fraction of it; past that, idle regions are given back first. */
#define FLOOR_SLACK_DIV 25 /* 1/25: 4% */

enum piece_state {
    PIECE_FREE,     /* in its class's free tree: may be handed out */
    PIECE_LIVE,     /* handed out */
    PIECE_PENDING,  /* freed; in the fence queue until its fence is seen complete */
    PIECE_DEFERRED, /* freed during a capture: no fence could be recorded yet */
};

struct host_region;

/* A piece of a region. Invariants: the pieces of a region tile it in address order (prev/next),
 * each a whole number of TS_HOST_PAGE; every piece is in the cache's address tree (key (addr,
 * 0, 0)); FREE pieces, and only they, are in the free tree of their region's class (key (size,
 * addr, 0)), and no two FREE pieces are neighbours (they merge); PENDING pieces are in the fence
 * queue in the order their fences were recorded; DEFERRED pieces are in the deferred list. */
typedef struct host_piece {
    ts_node addr_node;
    ts_node size_node;
    struct host_region *region;
    struct host_piece *prev, *next; /* neighbours in the region */
    struct host_piece *q_next;      /* fence queue, deferred list, or the spare records */
    uintptr_t addr;
    size_t size;
    size_t requested; /* LIVE */
    uint64_t serial;  /* LIVE */
    ts_fence fence;   /* PENDING */
    unsigned char state;
} host_piece;

/* One driver buffer. Invariants: nlive counts its LIVE pieces and nbusy its pieces that are not
 * FREE (so nbusy == 0: one FREE piece covers it, and it may be unpinned); it is in the idle
 * list exactly while nlive == 0, ordered by idle_since (the program's last free in it, or the
 * last time the idle rule found it still waiting for a fence); every region is in the list of
 * all regions. */
typedef struct host_region {
    uintptr_t addr;
    size_t size;
    unsigned flags;
    bool small;
    uint32_t nlive, nbusy;
    int64_t idle_since;
    struct host_region *idle_prev, *idle_next;
    struct host_region *all_prev, *all_next;
} host_region;

struct ts_hostcache {
    ts_tree by_addr;              /* every piece */
    ts_tree free[2][NFLAGS];      /* FREE pieces by class: [small][flags] */
    host_piece *fence_head, *fence_tail; /* PENDING pieces, oldest fence first */
    host_piece *deferred;         /* DEFERRED pieces */
    host_piece *spare;            /* piece records to reuse (no heap on the hot path) */
    host_region *idle_head, *idle_tail;
    host_region *regions;         /* every region */
    size_t pinned;                /* bytes of all regions */
    size_t live_pages, peak_pages; /* bytes of LIVE pieces (whole pages), and their peak */
    uint64_t serial;
    int64_t (*clock)(void *);
    void *clock_user;
};

/* --- time ------------------------------------------------------------------------------------- */

/* For the driver time counters: precise. */
static int64_t precise_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* For the idle rule: a few nanoseconds, a few milliseconds' resolution (seconds matter). */
static int64_t coarse_us(void *user)
{
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t cache_now(const struct ts_hostcache *c)
{
    return c->clock(c->clock_user);
}

static struct ts_hostcache *cache_get(ts_allocator *a)
{
    if (!a->host && (a->host = calloc(1, sizeof *a->host)) != NULL)
        a->host->clock = coarse_us;
    return a->host;
}

/* --- pieces ----------------------------------------------------------------------------------- */

static host_piece *piece_of_addr(ts_node *n)
{
    return n ? (host_piece *)(void *)((char *)n - offsetof(host_piece, addr_node)) : NULL;
}

static host_piece *piece_of_size(ts_node *n)
{
    return n ? (host_piece *)(void *)((char *)n - offsetof(host_piece, size_node)) : NULL;
}

static host_piece *piece_new(struct ts_hostcache *c)
{
    host_piece *p = c->spare;
    if (p)
        c->spare = p->q_next;
    else
        p = malloc(sizeof *p);
    if (p)
        memset(p, 0, sizeof *p);
    return p;
}

static void piece_recycle(struct ts_hostcache *c, host_piece *p)
{
    p->q_next = c->spare;
    c->spare = p;
}

/* The piece holding ptr, or NULL when ptr is in none of the regions. */
static host_piece *piece_find(const struct ts_hostcache *c, uintptr_t ptr)
{
    host_piece *p = piece_of_addr(ts_tree_floor(&c->by_addr, ptr, UINT64_MAX, UINT64_MAX));
    return p && ptr - p->addr < p->size ? p : NULL;
}

static void addr_insert(struct ts_hostcache *c, host_piece *p)
{
    p->addr_node.k0 = p->addr;
    p->addr_node.k1 = p->addr_node.k2 = 0;
    ts_tree_insert(&c->by_addr, &p->addr_node);
}

static ts_tree *free_tree(struct ts_hostcache *c, const host_region *r)
{
    return &c->free[r->small][r->flags & TS_HOST_FLAGS_MASK];
}

static void free_insert(struct ts_hostcache *c, host_piece *p)
{
    p->state = PIECE_FREE;
    p->size_node.k0 = p->size;
    p->size_node.k1 = p->addr;
    p->size_node.k2 = 0;
    ts_tree_insert(free_tree(c, p->region), &p->size_node);
}

static void free_remove(struct ts_hostcache *c, host_piece *p)
{
    ts_tree_remove(free_tree(c, p->region), &p->size_node);
}

/* p absorbs its next neighbour n; neither is in a free tree. */
static void piece_merge(struct ts_hostcache *c, host_piece *p, host_piece *n)
{
    ts_tree_remove(&c->by_addr, &n->addr_node);
    p->size += n->size;
    p->next = n->next;
    if (n->next)
        n->next->prev = p;
    piece_recycle(c, n);
}

/* A busy piece (its fence done, or none needed) becomes free: merged with its free neighbours,
 * back in its class. */
static void piece_release(ts_allocator *a, struct ts_hostcache *c, host_piece *p)
{
    stat_decrease(a, &a->st->host_active_requests, 1);
    stat_decrease(a, &a->st->host_active_bytes, (int64_t)p->size);
    p->region->nbusy--;
    if (p->prev && p->prev->state == PIECE_FREE) {
        host_piece *q = p->prev;
        free_remove(c, q);
        piece_merge(c, q, p);
        p = q;
    }
    if (p->next && p->next->state == PIECE_FREE) {
        free_remove(c, p->next);
        piece_merge(c, p, p->next);
    }
    free_insert(c, p);
}

/* --- regions ---------------------------------------------------------------------------------- */

static void idle_push(struct ts_hostcache *c, host_region *r, int64_t now)
{
    r->idle_since = now;
    r->idle_next = NULL;
    r->idle_prev = c->idle_tail;
    if (c->idle_tail)
        c->idle_tail->idle_next = r;
    else
        c->idle_head = r;
    c->idle_tail = r;
}

static void idle_remove(struct ts_hostcache *c, host_region *r)
{
    if (r->idle_prev)
        r->idle_prev->idle_next = r->idle_next;
    else
        c->idle_head = r->idle_next;
    if (r->idle_next)
        r->idle_next->idle_prev = r->idle_prev;
    else
        c->idle_tail = r->idle_prev;
    r->idle_prev = r->idle_next = NULL;
}

/* Forget a region's records (its single piece too when it is wholly free). */
static void region_forget(ts_allocator *a, struct ts_hostcache *c, host_region *r)
{
    if (r->nlive == 0)
        idle_remove(c, r);
    if (r->all_prev)
        r->all_prev->all_next = r->all_next;
    else
        c->regions = r->all_next;
    if (r->all_next)
        r->all_next->all_prev = r->all_prev;
    c->pinned -= r->size;
    stat_decrease(a, &a->st->host_allocations, 1);
    stat_decrease(a, &a->st->host_allocated_bytes, (int64_t)r->size);
    free(r);
}

/* Give a wholly free region back to the driver. */
static void region_unpin(ts_allocator *a, struct ts_hostcache *c, host_region *r)
{
    host_piece *p = piece_find(c, r->addr);
    free_remove(c, p);
    ts_tree_remove(&c->by_addr, &p->addr_node);
    piece_recycle(c, p);
    backend_enter(a);
    int64_t t0 = precise_us();
    a->be.host_free(a->be.ctx, r->addr);
    counter_add(a, &a->st->host_free_time, precise_us() - t0);
    counter_add(a, &a->st->num_host_free, 1);
    region_forget(a, c, r);
}

/* Pin a new region for a request of psize bytes (whole pages) of a class; NULL when the backend
 * cannot (*rc: its answer). The region is one FREE piece. */
static host_region *region_pin(ts_allocator *a, struct ts_hostcache *c, size_t psize,
                               unsigned flags, bool small, int *rc)
{
    host_region *r = calloc(1, sizeof *r);
    host_piece *p = piece_new(c);
    if (!r || !p) {
        free(r);
        if (p)
            piece_recycle(c, p);
        *rc = TS_ENOMEM;
        return NULL;
    }
    backend_enter(a);
    int64_t t0 = precise_us();
    *rc = a->be.host_alloc(a->be.ctx, psize, flags, &r->addr);
    counter_add(a, &a->st->host_alloc_time, precise_us() - t0);
    if (*rc != TS_OK) {
        free(r);
        piece_recycle(c, p);
        return NULL;
    }
    r->size = psize;
    r->flags = flags;
    r->small = small;
    r->all_next = c->regions;
    if (c->regions)
        c->regions->all_prev = r;
    c->regions = r;
    c->pinned += psize;
    /* nlive == 0 but not idle: the caller hands a piece out at once. */
    p->region = r;
    p->addr = r->addr;
    p->size = psize;
    addr_insert(c, p);
    free_insert(c, p);
    counter_add(a, &a->st->num_host_alloc, 1);
    stat_increase(a, &a->st->host_allocations, 1);
    stat_increase(a, &a->st->host_allocated_bytes, (int64_t)psize);
    return r;
}

/* --- fences ----------------------------------------------------------------------------------- */

/* Make FREE every PENDING piece whose fence has completed, oldest first. Fences complete in the
 * order they were recorded (each covers every stream up to its record), so the first one still
 * pending ends the walk: at most one query that answers "not yet", and never a wait. */
static void fences_drain(ts_allocator *a, struct ts_hostcache *c)
{
    host_piece *p;
    while ((p = c->fence_head) != NULL) {
        backend_enter(a);
        if (a->be.fence_query(a->be.ctx, p->fence) != TS_OK)
            return;
        a->be.fence_release(a->be.ctx, p->fence);
        c->fence_head = p->q_next;
        if (!c->fence_head)
            c->fence_tail = NULL;
        p->q_next = NULL;
        piece_release(a, c, p);
    }
}

/* Wait for every pending fence (memory short, or teardown), then drain. */
static void fences_wait_all(ts_allocator *a, struct ts_hostcache *c)
{
    for (host_piece *p = c->fence_head; p; p = p->q_next) {
        backend_enter(a);
        a->be.fence_wait(a->be.ctx, p->fence);
        counter_add(a, &a->st->num_fence_waits, 1);
    }
    fences_drain(a, c);
}

/* A freed piece gets its fence: every device operation issued before now must be done before
 * the piece is handed out again, since the next owner's host writes land at once. During a
 * capture no fence can be recorded: the piece waits (DEFERRED) for the first operation after
 * it. Without fences in the backend the piece is free at once. */
static void piece_fence(ts_allocator *a, struct ts_hostcache *c, host_piece *p)
{
    if (!a->be.fence_record) {
        piece_release(a, c, p);
        return;
    }
    backend_enter(a);
    if (a->be.fence_record(a->be.ctx, &p->fence) == TS_OK) {
        counter_add(a, &a->st->num_fences_recorded, 1);
        p->state = PIECE_PENDING;
        p->q_next = NULL;
        if (c->fence_tail)
            c->fence_tail->q_next = p;
        else
            c->fence_head = p;
        c->fence_tail = p;
        return;
    }
    if (backend_capturing(a)) {
        p->state = PIECE_DEFERRED;
        p->q_next = c->deferred;
        c->deferred = p;
        return;
    }
    /* No fence to be had outside a capture (out of host memory): the device's whole queue
     * stands in for it, as the driver's own free would wait for it. */
    if (a->be.synchronize) {
        backend_enter(a);
        a->be.synchronize(a->be.ctx);
        counter_add(a, &a->st->num_fence_waits, 1);
    }
    piece_release(a, c, p);
}

/* Pieces freed during a capture that has ended get their fences now. */
static void fences_deferred(ts_allocator *a, struct ts_hostcache *c)
{
    if (!c->deferred || backend_capturing(a))
        return;
    host_piece *p = c->deferred;
    c->deferred = NULL;
    while (p) {
        host_piece *next = p->q_next;
        piece_fence(a, c, p);
        p = next;
    }
}

/* --- giving regions back ------------------------------------------------------------------------ */

/* Unpin every region nothing uses (its fences done). Never during a capture: unpinning is not
 * allowed in one. Returns the bytes given back. */
static size_t regions_release(ts_allocator *a, struct ts_hostcache *c)
{
    if (!c->idle_head || backend_capturing(a))
        return 0;
    size_t bytes = 0;
    for (host_region *r = c->idle_head, *next; r; r = next) {
        next = r->idle_next;
        if (r->nbusy == 0) {
            bytes += r->size;
            region_unpin(a, c, r);
        }
    }
    return bytes;
}

/* The floor rule's bound for a request of need bytes: 1.04 times the most the program has held
 * at once, this request counted (in whole pages: 1.04 leaves room for the page rounding and the
 * small regions, so that the bytes pinned stay within 1.05 times the bytes asked for). */
static size_t floor_bound(const struct ts_hostcache *c, size_t need)
{
    size_t peak = c->peak_pages;
    if (c->live_pages + need > peak)
        peak = c->live_pages + need;
    return peak + peak / FLOOR_SLACK_DIV;
}

/* The idle rule. A due region still waiting for a fence asks the device once, and if the fence
 * is still pending waits another period (no query at every operation). */
static void idle_release(ts_allocator *a, struct ts_hostcache *c, int64_t now)
{
    const int64_t period = (int64_t)a->cfg.pinned_idle_s * 1000000;
    if (now - c->idle_head->idle_since < period || backend_capturing(a))
        return;
    bool drained = false;
    host_region *r, *moved = NULL; /* the first region sent to wait another period */
    while ((r = c->idle_head) != NULL && r != moved && now - r->idle_since >= period) {
        if (r->nbusy > 0 && !drained) {
            fences_deferred(a, c);
            fences_drain(a, c);
            drained = true;
        }
        if (r->nbusy == 0) {
            region_unpin(a, c, r);
        } else {
            idle_remove(c, r);
            idle_push(c, r, now);
            if (!moved)
                moved = r;
        }
    }
}

void ts_hostcache_tick(ts_allocator *a)
{
    struct ts_hostcache *c = a->host;
    if (c && c->idle_head)
        idle_release(a, c, cache_now(c));
}

/* --- the entry points -------------------------------------------------------------------------- */

/* The floor rule, before a region of psize bytes is pinned: when that would take the pinned bytes
 * past the bound, regions nothing uses go back first, oldest first. Those of the request's class
 * are given back until they add up to the request, and come back as one region of their total
 * (returned): the later requests they would have served fit in its rest, so that a program
 * whose sizes drift gathers its memory in few regions instead of pinning new ones. Other idle
 * regions go back while the bound is still passed. */
static size_t floor_make_room(ts_allocator *a, struct ts_hostcache *c, size_t psize,
                              size_t rsize, unsigned flags, bool small)
{
    const size_t bound = floor_bound(c, psize);
    if (c->pinned + rsize <= bound || backend_capturing(a))
        return rsize;
    size_t got = 0;
    host_region *r, *next;
    for (r = c->idle_head; r && got < rsize; r = next) {
        next = r->idle_next;
        if (r->nbusy == 0 && r->small == small && r->flags == flags) {
            got += r->size;
            region_unpin(a, c, r);
        }
    }
    const size_t want = got > rsize ? got : rsize;
    for (r = c->idle_head; r && c->pinned + want > bound; r = next) {
        next = r->idle_next;
        if (r->nbusy == 0)
            region_unpin(a, c, r);
    }
    return want;
}

/* A new region for the request: within the floor rule, then, when the backend cannot pin,
 * after giving back what the cache holds: what is free already, then, waiting for their fences
 * (the only wait), the rest. */
static host_region *grow(ts_allocator *a, struct ts_hostcache *c, size_t psize, unsigned flags,
                         bool small, int *rc)
{
    const size_t rsize = small ? TS_HOST_SMALL_REGION : psize;
    const size_t want = floor_make_room(a, c, psize, rsize, flags, small);
    host_region *r = region_pin(a, c, want, flags, small, rc);
    if (r || *rc != TS_ENOMEM)
        return r;
    if (regions_release(a, c) > 0 && (r = region_pin(a, c, rsize, flags, small, rc)))
        return r;
    if (*rc != TS_ENOMEM || !c->fence_head || backend_capturing(a))
        return NULL; /* no fence can be waited for in a capture */
    fences_wait_all(a, c);
    regions_release(a, c);
    return region_pin(a, c, rsize, flags, small, rc);
}

int ts_host_alloc(ts_allocator *a, size_t size, unsigned flags, uintptr_t *out)
{
    if (!a->be.host_alloc || !a->be.host_free || size == 0 || size > HOST_MAX ||
        (flags & ~TS_HOST_FLAGS_MASK))
        return TS_EUNSUPPORTED;
    const size_t psize = (size + TS_HOST_PAGE - 1) / TS_HOST_PAGE * TS_HOST_PAGE;
    const bool small = psize <= TS_HOST_SMALL;
    pthread_mutex_lock(&a->lock);
    struct ts_hostcache *c = cache_get(a);
    if (!c) {
        pthread_mutex_unlock(&a->lock);
        return TS_EUNSUPPORTED;
    }
    fences_deferred(a, c);
    fences_drain(a, c);
    /* Best fit: the smallest free piece of the class that holds the request, lowest address
     * first. */
    host_piece *p = piece_of_size(ts_tree_lower_bound(&c->free[small][flags], psize, 0, 0));
    if (!p) {
        int rc = TS_OK;
        host_region *r = grow(a, c, psize, flags, small, &rc);
        if (!r) {
            st_close(a);
            pthread_mutex_unlock(&a->lock);
            return rc == TS_ENOMEM ? TS_ENOMEM : TS_EBACKEND;
        }
        p = piece_find(c, r->addr);
    }
    free_remove(c, p);
    /* The rest goes back as a piece of its own (kept whole when no record can be had). */
    host_piece *rest = p->size - psize >= TS_HOST_PAGE ? piece_new(c) : NULL;
    if (rest) {
        rest->region = p->region;
        rest->addr = p->addr + psize;
        rest->size = p->size - psize;
        rest->prev = p;
        rest->next = p->next;
        if (p->next)
            p->next->prev = rest;
        p->next = rest;
        p->size = psize;
        addr_insert(c, rest);
        free_insert(c, rest);
    }
    host_region *r = p->region;
    if (r->nlive++ == 0 && (r->idle_prev || c->idle_head == r))
        idle_remove(c, r);
    r->nbusy++;
    p->state = PIECE_LIVE;
    p->requested = size;
    p->serial = ++c->serial;
    c->live_pages += p->size;
    if (c->live_pages > c->peak_pages)
        c->peak_pages = c->live_pages;
    stat_increase(a, &a->st->host_active_requests, 1);
    stat_increase(a, &a->st->host_active_bytes, (int64_t)p->size);
    counter_add(a, &a->st->num_host_alloc_calls, 1);
    *out = p->addr;
    ts_hostcache_tick(a);
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return TS_OK;
}

int ts_host_free(ts_allocator *a, uintptr_t ptr)
{
    pthread_mutex_lock(&a->lock);
    struct ts_hostcache *c = a->host;
    host_piece *p = c ? piece_find(c, ptr) : NULL;
    int rc = TS_OK;
    if (!p) {
        rc = TS_ENOTFOUND;
    } else if (p->addr != ptr || p->state != PIECE_LIVE) {
        counter_add(a, &a->st->num_invalid_frees, 1);
        rc = TS_EINVAL;
    } else {
        counter_add(a, &a->st->num_host_free_calls, 1);
        host_region *r = p->region;
        c->live_pages -= p->size;
        const int64_t now = cache_now(c); /* one clock read for the free and the idle rule */
        if (--r->nlive == 0)
            idle_push(c, r, now);
        fences_deferred(a, c);
        piece_fence(a, c, p);
        if (c->idle_head)
            idle_release(a, c, now);
    }
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int ts_host_lookup(ts_allocator *a, uintptr_t ptr, ts_host_info *info)
{
    pthread_mutex_lock(&a->lock);
    host_piece *p = a->host ? piece_find(a->host, ptr) : NULL;
    if (p && info) {
        info->base = p->addr;
        info->size = p->size;
        info->live = p->state == PIECE_LIVE;
        info->requested = info->live ? p->requested : 0;
        info->serial = info->live ? p->serial : 0;
        info->flags = p->region->flags;
    }
    pthread_mutex_unlock(&a->lock);
    return p ? TS_OK : TS_ENOTFOUND;
}

size_t ts_host_empty_cache(ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    struct ts_hostcache *c = a->host;
    size_t bytes = 0;
    if (c) {
        fences_deferred(a, c);
        fences_drain(a, c);
        bytes = regions_release(a, c);
    }
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return bytes;
}

void ts_host_set_clock(ts_allocator *a, int64_t (*now_us)(void *user), void *user)
{
    pthread_mutex_lock(&a->lock);
    struct ts_hostcache *c = cache_get(a);
    if (c) {
        c->clock = now_us ? now_us : coarse_us;
        c->clock_user = now_us ? user : NULL;
    }
    pthread_mutex_unlock(&a->lock);
}

void ts_hostcache_teardown(ts_allocator *a, bool release)
{
    struct ts_hostcache *c = a->host;
    if (!c)
        return;
    if (release) {
        fences_deferred(a, c);
        fences_wait_all(a, c);
        regions_release(a, c);
    } else {
        /* The context died: its fences with it (the backend forgets them without a call). */
        c->fence_head = c->fence_tail = NULL;
    }
    ts_node *n;
    while ((n = ts_tree_first(&c->by_addr)) != NULL) {
        host_piece *p = piece_of_addr(n);
        ts_tree_remove(&c->by_addr, n);
        if (p->state != PIECE_FREE) {
            stat_decrease(a, &a->st->host_active_requests, 1);
            stat_decrease(a, &a->st->host_active_bytes, (int64_t)p->size);
        }
        free(p);
    }
    while (c->regions)
        region_forget(a, c, c->regions);
    while (c->spare) {
        host_piece *p = c->spare;
        c->spare = p->q_next;
        free(p);
    }
    free(c);
    a->host = NULL;
}
