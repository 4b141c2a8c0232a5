/* The allocator history ring (core/history.h, tessera/history.h). */
#include "core/history.h"

#include <errno.h>
#include <stddef.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

/* One ring. The shared mapping (hdr, ev) is written only by the allocator that owns it, under
 * its mutex; `next` mirrors hdr->written privately. `inner` is the allocator's real backend,
 * which the wrapper functions below forward to. */
struct ts_history {
    tessera_history_header *hdr;
    tessera_history_event *ev;
    size_t map_len;
    uint32_t capacity;
    bool frames;
    uint64_t next;
    ts_backend inner;
    char path[512];
};

static size_t ring_bytes(uint32_t capacity)
{
    return sizeof(tessera_history_header) + (size_t)capacity * sizeof(tessera_history_event);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ts_history_create(const char *dir, int slot, int device, uint32_t capacity, bool frames,
                      ts_history **out, char *err, size_t errlen)
{
    *out = NULL;
    if (capacity == 0 || capacity > TESSERA_HISTORY_MAX_CAPACITY || slot < 0) {
        snprintf(err, errlen, "bad history size %u", capacity);
        return EINVAL;
    }
    ts_history *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return ENOMEM;
    }
    snprintf(h->path, sizeof h->path, "%s/" TESSERA_PAGE_FILE_PREFIX "%d" TESSERA_HISTORY_FILE_INFIX
             "%d", dir, (int)getpid(), slot);
    /* A file of that name belongs to an earlier process with this pid: replace it, never follow
     * a link planted there. */
    unlink(h->path);
    int fd = open(h->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t len = ring_bytes(capacity);
    int e = 0;
    if (fd < 0) {
        e = errno;
    } else {
        fchmod(fd, 0644); /* readable by tessera-stat whatever the umask */
        e = posix_fallocate(fd, 0, (off_t)len); /* ENOSPC now rather than SIGBUS later */
    }
    void *mem = MAP_FAILED;
    if (!e) {
        mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (mem == MAP_FAILED)
            e = errno;
    }
    if (fd >= 0)
        close(fd);
    if (e) {
        snprintf(err, errlen, "%s: %s", h->path, strerror(e));
        if (fd >= 0)
            unlink(h->path);
        free(h);
        return e;
    }
    h->hdr = mem;
    h->ev = (tessera_history_event *)((char *)mem + sizeof(tessera_history_header));
    h->map_len = len;
    h->capacity = capacity;
    h->frames = frames;
    tessera_history_header *hd = h->hdr;
    hd->version = TESSERA_HISTORY_VERSION;
    hd->header_size = sizeof(tessera_history_header);
    hd->event_size = sizeof(tessera_history_event);
    hd->capacity = capacity;
    hd->pid = (int32_t)getpid();
    hd->device = device;
    hd->slot = (uint32_t)slot;
    hd->frames = frames ? 1u : 0u;
    hd->created_ns = now_ns();
    if (frames) {
        void *prime[1];
        backtrace(prime, 1); /* loads the unwinder now, not under the allocator's mutex */
    }
    __atomic_store_n(&hd->magic, TESSERA_HISTORY_MAGIC, __ATOMIC_RELEASE);
    *out = h;
    return 0;
}

void ts_history_note(ts_history *h, uint32_t action, uint64_t addr, uint64_t size,
                     uint64_t stream, uint64_t requested)
{
    const uint64_t n = h->next++;
    tessera_history_event *e = &h->ev[n % h->capacity];
    __atomic_store_n(&e->seq, 2 * n + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->time_us = now_ns() / 1000u;
    e->addr = addr;
    e->size = size;
    e->stream = stream;
    e->action = action;
    e->requested = requested;
    e->nframes = 0;
    if (h->frames) {
        /* One frame more than kept: the first is this function. */
        void *pcs[TESSERA_HISTORY_MAX_FRAMES + 1];
        int k = backtrace(pcs, (int)TESSERA_HISTORY_MAX_FRAMES + 1);
        for (int i = 1; i < k; i++)
            e->frames[i - 1] = (uint64_t)(uintptr_t)pcs[i];
        e->nframes = k > 1 ? (uint32_t)(k - 1) : 0u;
    }
    __atomic_store_n(&e->seq, 2 * n + 2, __ATOMIC_RELEASE);
    __atomic_store_n(&h->hdr->written, n + 1, __ATOMIC_RELEASE);
}

/* --- the backend wrapper: segment events without a call site in the core ------------------- */

static int w_seg_alloc(void *ctx, size_t size, uintptr_t *out)
{
    ts_history *h = ctx;
    int rc = h->inner.seg_alloc(h->inner.ctx, size, out);
    if (rc == TS_OK)
        ts_history_note(h, TESSERA_EV_SEGMENT_ALLOC, *out, size, 0, 0);
    return rc;
}

static int w_seg_free(void *ctx, uintptr_t ptr, size_t size)
{
    ts_history *h = ctx;
    ts_history_note(h, TESSERA_EV_SEGMENT_FREE, ptr, size, 0, 0);
    return h->inner.seg_free(h->inner.ctx, ptr, size);
}

static int w_vm_map(void *ctx, uintptr_t va, const ts_vm_piece *pieces, size_t n)
{
    ts_history *h = ctx;
    int rc = h->inner.vm_map(h->inner.ctx, va, pieces, n);
    if (rc == TS_OK) {
        for (size_t i = 0; i < n; va += pieces[i++].size) /* an event per handle, as before */
            ts_history_note(h, TESSERA_EV_SEGMENT_MAP, va, pieces[i].size, 0, 0);
    }
    return rc;
}

static int w_vm_unmap(void *ctx, uintptr_t va, size_t size)
{
    ts_history *h = ctx;
    ts_history_note(h, TESSERA_EV_SEGMENT_UNMAP, va, size, 0, 0);
    return h->inner.vm_unmap(h->inner.ctx, va, size);
}

/* The rest forward unchanged. */
static int w_mem_info(void *c, size_t *f, size_t *t)
{
    ts_history *h = c;
    return h->inner.mem_info(h->inner.ctx, f, t);
}
static int w_synchronize(void *c)
{
    ts_history *h = c;
    return h->inner.synchronize(h->inner.ctx);
}
static int w_fence_record(void *c, ts_fence *out)
{
    ts_history *h = c;
    return h->inner.fence_record(h->inner.ctx, out);
}
static int w_host_alloc(void *c, size_t size, unsigned flags, uintptr_t *out)
{
    ts_history *h = c;
    return h->inner.host_alloc(h->inner.ctx, size, flags, out);
}
static int w_host_free(void *c, uintptr_t ptr)
{
    ts_history *h = c;
    return h->inner.host_free(h->inner.ctx, ptr);
}
static int w_fence_query(void *c, ts_fence f)
{
    ts_history *h = c;
    return h->inner.fence_query(h->inner.ctx, f);
}
static int w_fence_wait(void *c, ts_fence f)
{
    ts_history *h = c;
    return h->inner.fence_wait(h->inner.ctx, f);
}
static void w_fence_release(void *c, ts_fence f)
{
    ts_history *h = c;
    h->inner.fence_release(h->inner.ctx, f);
}
static int w_capture_active(void *c)
{
    ts_history *h = c;
    return h->inner.capture_active(h->inner.ctx);
}
static int w_vm_granularity(void *c, size_t *g)
{
    ts_history *h = c;
    return h->inner.vm_granularity(h->inner.ctx, g);
}
static int w_vm_reserve(void *c, size_t size, uintptr_t *va)
{
    ts_history *h = c;
    return h->inner.vm_reserve(h->inner.ctx, size, va);
}
static int w_vm_release(void *c, uintptr_t va, size_t size)
{
    ts_history *h = c;
    return h->inner.vm_release(h->inner.ctx, va, size);
}
static int w_vm_create(void *c, size_t size, uint64_t *out)
{
    ts_history *h = c;
    return h->inner.vm_create(h->inner.ctx, size, out);
}
static int w_vm_destroy(void *c, uint64_t handle)
{
    ts_history *h = c;
    return h->inner.vm_destroy(h->inner.ctx, handle);
}

const ts_backend *ts_history_backend(const ts_history *h)
{
    return &h->inner;
}

/* A wrapper entry only where the real backend has one: the core tests optional entries for
 * NULL to decide which features it has. */
#define WRAP(field, fn) out.field = in->field ? fn : NULL

void ts_history_attach(ts_history *h, ts_allocator *a)
{
    pthread_mutex_lock(&a->lock);
    h->inner = a->be;
    const ts_backend *in = &h->inner;
    ts_backend out;
    memset(&out, 0, sizeof out);
    out.ctx = h;
    WRAP(seg_alloc, w_seg_alloc);
    WRAP(seg_free, w_seg_free);
    WRAP(mem_info, w_mem_info);
    WRAP(synchronize, w_synchronize);
    WRAP(fence_record, w_fence_record);
    WRAP(fence_query, w_fence_query);
    WRAP(fence_wait, w_fence_wait);
    WRAP(fence_release, w_fence_release);
    WRAP(capture_active, w_capture_active);
    WRAP(vm_granularity, w_vm_granularity);
    WRAP(vm_reserve, w_vm_reserve);
    WRAP(vm_release, w_vm_release);
    WRAP(vm_create, w_vm_create);
    WRAP(vm_destroy, w_vm_destroy);
    WRAP(vm_map, w_vm_map);
    WRAP(vm_unmap, w_vm_unmap);
    WRAP(host_alloc, w_host_alloc);
    WRAP(host_free, w_host_free);
    a->be = out;
    a->history = h;
    pthread_mutex_unlock(&a->lock);
}

/* Swap the shared mapping for private memory at the same address (as the stats page does), so
 * a late writer never faults and never touches the file again. */
static void ring_detach(ts_history *h)
{
    if (!h || !h->hdr)
        return;
    void *p = mmap(h->hdr, h->map_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    (void)p; /* on failure the shared mapping stays: still valid memory */
}

void ts_history_close(ts_history *h, bool unlink_file)
{
    if (!h)
        return;
    if (unlink_file)
        unlink(h->path);
    ring_detach(h);
}

void ts_history_forget(ts_history *h)
{
    ring_detach(h);
}


const tessera_history_header *ts_history_ring(const ts_history *h)
{
    return h->hdr;
}
