/* The pinned host memory cache: size classes, free lists and the reuse rule (hostcache.h). */
#include "core/hostcache.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"

#define SIZE_BITS 64
#define NCLASSES ((TS_HOST_FLAGS_MASK + 1) * SIZE_BITS)
#define MIN_SIZE ((size_t)512)

/* One pinned buffer. Invariants: a buffer is in the cache's address tree (key (addr, 0, 0)) for
 * as long as it is pinned; live buffers are in no free list; a cached (not live) buffer is in exactly the
 * free list of its class (flags, log2 size), in free order; fenced means its fence has not yet
 * been seen complete. */
typedef struct host_buf {
    ts_node node; /* in by_addr */
    uintptr_t addr;
    size_t size; /* the pinned size: a power of two */
    unsigned flags;
    bool live;
    bool fenced;
    ts_fence fence;
    struct host_buf *prev, *next; /* free list */
} host_buf;

typedef struct host_list {
    host_buf *head, *tail;
} host_list;

struct ts_hostcache {
    ts_tree by_addr; /* every pinned buffer */
    host_list classes[NCLASSES];
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The size class of a request: the next power of two (at least MIN_SIZE), and its log2. 0 when
 * no power of two of a size_t holds it. */
static size_t class_size(size_t size, unsigned *log2)
{
    size_t s = MIN_SIZE;
    unsigned l = 9;
    while (s < size) {
        if (s > SIZE_MAX / 2)
            return 0;
        s <<= 1;
        l++;
    }
    *log2 = l;
    return s;
}

static host_list *class_of(struct ts_hostcache *c, unsigned flags, unsigned log2)
{
    return &c->classes[(flags & TS_HOST_FLAGS_MASK) * SIZE_BITS + log2];
}

static unsigned log2_of(size_t s)
{
    return (unsigned)__builtin_ctzll((unsigned long long)s);
}

static void list_push(host_list *l, host_buf *b)
{
    b->next = NULL;
    b->prev = l->tail;
    if (l->tail)
        l->tail->next = b;
    else
        l->head = b;
    l->tail = b;
}

static void list_remove(host_list *l, host_buf *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        l->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        l->tail = b->prev;
    b->prev = b->next = NULL;
}

static host_buf *buf_of(ts_node *n)
{
    return n ? (host_buf *)(void *)((char *)n - offsetof(host_buf, node)) : NULL;
}

/* The pinned buffer holding ptr, or NULL. */
static host_buf *table_find(const struct ts_hostcache *c, uintptr_t ptr)
{
    host_buf *b = buf_of(ts_tree_floor(&c->by_addr, ptr, UINT64_MAX, UINT64_MAX));
    return b && ptr - b->addr < b->size ? b : NULL;
}

static void table_insert(struct ts_hostcache *c, host_buf *b)
{
    b->node.k0 = b->addr;
    b->node.k1 = b->node.k2 = 0;
    ts_tree_insert(&c->by_addr, &b->node);
}

static void table_remove(struct ts_hostcache *c, host_buf *b)
{
    ts_tree_remove(&c->by_addr, &b->node);
}

/* Has the work queued before b's free completed? Asks the backend at most once per call, and
 * never waits. */
static bool buf_reusable(ts_allocator *a, host_buf *b)
{
    if (!b->fenced)
        return true;
    backend_enter(a);
    if (a->be.fence_query(a->be.ctx, b->fence) != TS_OK)
        return false;
    a->be.fence_release(a->be.ctx, b->fence);
    b->fenced = false;
    stat_decrease(a, &a->st->host_active_requests, 1);
    stat_decrease(a, &a->st->host_active_bytes, (int64_t)b->size);
    return true;
}

/* Unpin a cached buffer (its fence complete) and forget it. */
static void buf_unpin(ts_allocator *a, host_buf *b)
{
    struct ts_hostcache *c = a->host;
    list_remove(class_of(c, b->flags, log2_of(b->size)), b);
    table_remove(c, b);
    backend_enter(a);
    int64_t t0 = now_us();
    a->be.host_free(a->be.ctx, b->addr);
    counter_add(a, &a->st->host_free_time, now_us() - t0);
    counter_add(a, &a->st->num_host_free, 1);
    stat_decrease(a, &a->st->host_allocations, 1);
    stat_decrease(a, &a->st->host_allocated_bytes, (int64_t)b->size);
    free(b);
}

/* Unpin the cached buffers whose fence is complete; with wait, wait for the others first. */
static size_t cache_release(ts_allocator *a, bool wait)
{
    struct ts_hostcache *c = a->host;
    size_t bytes = 0;
    for (size_t k = 0; k < NCLASSES; k++) {
        host_buf *b = c->classes[k].head;
        while (b) {
            host_buf *next = b->next;
            if (wait && b->fenced) {
                backend_enter(a);
                a->be.fence_wait(a->be.ctx, b->fence);
                counter_add(a, &a->st->num_fence_waits, 1);
            }
            if (buf_reusable(a, b)) {
                bytes += b->size;
                buf_unpin(a, b);
            }
            b = next;
        }
    }
    return bytes;
}

static int pin(ts_allocator *a, size_t size, unsigned flags, uintptr_t *out)
{
    backend_enter(a);
    int64_t t0 = now_us();
    int rc = a->be.host_alloc(a->be.ctx, size, flags, out);
    counter_add(a, &a->st->host_alloc_time, now_us() - t0);
    return rc;
}

int ts_host_alloc(ts_allocator *a, size_t size, unsigned flags, uintptr_t *out)
{
    unsigned l2 = 0;
    size_t csize = class_size(size, &l2);
    if (!a->be.host_alloc || !a->be.host_free || csize == 0 || (flags & ~TS_HOST_FLAGS_MASK))
        return TS_EUNSUPPORTED;
    pthread_mutex_lock(&a->lock);
    if (!a->host && !(a->host = calloc(1, sizeof *a->host))) {
        pthread_mutex_unlock(&a->lock);
        return TS_EUNSUPPORTED;
    }
    struct ts_hostcache *c = a->host;
    host_list *cls = class_of(c, flags, l2);
    host_buf *b = cls->head;
    /* Fences complete in the order they were recorded (each covers every stream up to its
     * record), so when the oldest free of the class is still in use, the later ones are too. */
    if (b && buf_reusable(a, b)) {
        list_remove(cls, b);
    } else {
        b = calloc(1, sizeof *b);
        int rc = b ? pin(a, csize, flags, &b->addr) : TS_ENOMEM;
        if (rc == TS_ENOMEM && b) {
            /* Short of pinnable memory: give back what the cache holds, first what is free
             * already, then, waiting for their fences, the rest (the only wait here). */
            if (cache_release(a, false) == 0 || (rc = pin(a, csize, flags, &b->addr)) == TS_ENOMEM) {
                cache_release(a, true);
                rc = pin(a, csize, flags, &b->addr);
            }
        }
        if (rc != TS_OK) {
            free(b);
            st_close(a);
            pthread_mutex_unlock(&a->lock);
            return rc == TS_ENOMEM ? TS_ENOMEM : TS_EBACKEND;
        }
        b->size = csize;
        b->flags = flags;
        table_insert(c, b);
        counter_add(a, &a->st->num_host_alloc, 1);
        stat_increase(a, &a->st->host_allocations, 1);
        stat_increase(a, &a->st->host_allocated_bytes, (int64_t)csize);
    }
    b->live = true;
    stat_increase(a, &a->st->host_active_requests, 1);
    stat_increase(a, &a->st->host_active_bytes, (int64_t)csize);
    counter_add(a, &a->st->num_host_alloc_calls, 1);
    *out = b->addr;
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return TS_OK;
}

int ts_host_free(ts_allocator *a, uintptr_t ptr)
{
    pthread_mutex_lock(&a->lock);
    host_buf *b = a->host ? table_find(a->host, ptr) : NULL;
    int rc = TS_OK;
    if (!b) {
        rc = TS_ENOTFOUND;
    } else if (b->addr != ptr || !b->live) {
        counter_add(a, &a->st->num_invalid_frees, 1);
        rc = TS_EINVAL;
    } else {
        b->live = false;
        counter_add(a, &a->st->num_host_free_calls, 1);
        /* The fence: work queued before this free (copies reading or writing the buffer) must
         * be done before the buffer is handed out again, since the next owner's host writes
         * land at once. No fence can be recorded during a capture: the buffer then goes back
         * to the driver, as the program's own free would have. */
        int fr = TS_OK;
        if (a->be.fence_record) {
            backend_enter(a);
            fr = a->be.fence_record(a->be.ctx, &b->fence);
            if (fr == TS_OK) {
                b->fenced = true;
                counter_add(a, &a->st->num_fences_recorded, 1);
            }
        }
        if (fr == TS_OK) {
            if (!b->fenced) {
                stat_decrease(a, &a->st->host_active_requests, 1);
                stat_decrease(a, &a->st->host_active_bytes, (int64_t)b->size);
            }
            list_push(class_of(a->host, b->flags, log2_of(b->size)), b);
        } else {
            stat_decrease(a, &a->st->host_active_requests, 1);
            stat_decrease(a, &a->st->host_active_bytes, (int64_t)b->size);
            list_push(class_of(a->host, b->flags, log2_of(b->size)), b);
            buf_unpin(a, b);
        }
    }
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int ts_host_lookup(ts_allocator *a, uintptr_t ptr, uintptr_t *base, size_t *size)
{
    pthread_mutex_lock(&a->lock);
    host_buf *b = a->host ? table_find(a->host, ptr) : NULL;
    if (b && base)
        *base = b->addr;
    if (b && size)
        *size = b->size;
    pthread_mutex_unlock(&a->lock);
    return b ? TS_OK : TS_ENOTFOUND;
}

size_t ts_host_empty_cache(ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    size_t bytes = a->host ? cache_release(a, false) : 0;
    st_close(a);
    pthread_mutex_unlock(&a->lock);
    return bytes;
}

void ts_hostcache_teardown(ts_allocator *a, bool release)
{
    struct ts_hostcache *c = a->host;
    if (!c)
        return;
    if (release)
        cache_release(a, true);
    ts_node *n;
    while ((n = ts_tree_first(&c->by_addr)) != NULL) {
        host_buf *b = buf_of(n);
        ts_tree_remove(&c->by_addr, n);
        if (b->fenced && !release) {
            stat_decrease(a, &a->st->host_active_requests, 1);
            stat_decrease(a, &a->st->host_active_bytes, (int64_t)b->size);
        }
        if (b->live) {
            stat_decrease(a, &a->st->host_active_requests, 1);
            stat_decrease(a, &a->st->host_active_bytes, (int64_t)b->size);
        }
        stat_decrease(a, &a->st->host_allocations, 1);
        stat_decrease(a, &a->st->host_allocated_bytes, (int64_t)b->size);
        free(b);
    }
    free(c);
    a->host = NULL;
}
