/* Simulated CUDA driver: device memory, pinned host memory, pointer queries, IPC.
 *
 * Each device owns an address range of 2 x its memory size, backed by a sparse memfd and
 * mapped MAP_SHARED | MAP_NORESERVE, PROT_NONE while unallocated. cuMemAlloc takes
 * ceil(n / 2 MiB) pages from the device's page budget and places the allocation at the
 * lowest 2 MiB-aligned address with room (address-ordered first fit), read-write. Freeing
 * gives the pages back (madvise MADV_REMOVE) and makes the range PROT_NONE again, so a
 * use after free faults. The memfd is what lets another process map an allocation for
 * cuIpcOpenMemHandle (through /proc/<pid>/fd/<n>). */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct sim_host {
    uintptr_t base;
    size_t size;
    size_t map_size;
    unsigned flags;
    bool registered; /* cuMemHostRegister: the program's memory (map_size 0), not ours to unmap */
    struct sim_ctx *ctx;
    uint64_t serial;
    struct sim_host *next;
};

static struct sim_host *hosts;

static struct sim_device *dev_of(uintptr_t p)
{
    for (int i = 0; i < sim_g.ndev; i++) {
        struct sim_device *d = &sim_g.dev[i];
        if (p >= d->base && p - d->base < d->va_size)
            return d;
    }
    return NULL;
}

/* index of the last allocation whose base <= p, or -1 */
static ptrdiff_t floor_index(const struct sim_device *d, uintptr_t p)
{
    size_t lo = 0, hi = d->nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->allocs[mid]->base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

/* the allocation that starts exactly at p (any kind), or NULL */
static struct sim_alloc *alloc_at(uintptr_t p)
{
    struct sim_device *d = dev_of(p);
    if (!d)
        return NULL;
    ptrdiff_t i = floor_index(d, p);
    if (i >= 0 && d->allocs[i]->base == p)
        return d->allocs[i];
    return NULL;
}

void sim_ptr_lookup(uintptr_t p, struct sim_ptrinfo *pi)
{
    memset(pi, 0, sizeof *pi);
    pi->device = -2;
    struct sim_device *d = dev_of(p);
    if (d) {
        pi->in_device_space = true;
        pi->device = d->ordinal;
        ptrdiff_t i = floor_index(d, p);
        if (i >= 0) {
            struct sim_alloc *a = d->allocs[i];
            if (p - a->base < a->size) {
                pi->kind = SIM_PTR_DEVICE;
                pi->alloc = a;
                pi->base = a->base;
                pi->size = a->size;
                pi->ctx = a->ctx;
            }
        }
        return;
    }
    struct sim_resv *r = sim_vmm_find_resv(p);
    if (r) {
        pi->in_device_space = true;
        pi->resv = r;
        struct sim_mapping *m = sim_vmm_find_map(r, p);
        if (m && m->prot != PROT_NONE) { /* like the driver: unknown until access is set */
            pi->kind = SIM_PTR_VMM;
            pi->map = m;
            pi->base = m->va;
            pi->size = m->size;
            pi->device = m->h->device;
        }
        return;
    }
    for (struct sim_host *h = hosts; h; h = h->next) {
        if (p >= h->base && p - h->base < h->size) {
            pi->kind = SIM_PTR_HOST;
            pi->host = h;
            pi->base = h->base;
            pi->size = h->size;
            pi->ctx = h->ctx;
            pi->device = h->ctx ? h->ctx->device : 0;
            return;
        }
    }
}

CUresult sim_check_range(uintptr_t p, size_t n, bool device_side, bool write)
{
    if (p + n < p)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ptrinfo pi;
    sim_ptr_lookup(p, &pi);
    switch (pi.kind) {
    case SIM_PTR_DEVICE:
    case SIM_PTR_HOST:
        return p + n <= pi.base + pi.size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case SIM_PTR_VMM: {
        int need = write ? PROT_WRITE : PROT_READ;
        for (uintptr_t cur = p; cur < p + n;) {
            struct sim_mapping *m = sim_vmm_find_map(pi.resv, cur);
            if (!m || !(m->prot & need))
                return CUDA_ERROR_INVALID_VALUE;
            cur = m->va + m->size;
        }
        return CUDA_SUCCESS;
    }
    case SIM_PTR_NONE:
        break;
    }
    if (device_side || pi.in_device_space)
        return CUDA_ERROR_INVALID_VALUE;
    /* plain host memory; it must not run into device space either */
    struct sim_ptrinfo last;
    sim_ptr_lookup(p + n - 1, &last);
    return last.in_device_space ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- device allocations -------------------------------------------------------------- */

bool sim_fault_alloc(void)
{
    sim_g.alloc_attempts++;
    if (sim_g.fail_alloc_after && sim_g.alloc_attempts == sim_g.fail_alloc_after) {
        sim_log("TESSERA_SIM_FAIL_ALLOC_AFTER: allocation #%llu fails",
                (unsigned long long)sim_g.alloc_attempts);
        return true;
    }
    return false;
}

/* lowest gap of `pages` pages in the device range */
static bool find_gap(const struct sim_device *d, size_t pages, uintptr_t *addr, size_t *idx)
{
    size_t need = pages * SIM_PAGE;
    uintptr_t prev = d->base;
    for (size_t i = 0; i <= d->nallocs; i++) {
        uintptr_t next = i < d->nallocs ? d->allocs[i]->base : d->base + d->va_size;
        if (next - prev >= need) {
            *addr = prev;
            *idx = i;
            return true;
        }
        if (i < d->nallocs)
            prev = d->allocs[i]->base + d->allocs[i]->pages * SIM_PAGE;
    }
    return false;
}

static int insert_alloc(struct sim_device *d, size_t idx, struct sim_alloc *a)
{
    struct sim_alloc **na = sim_grow(d->allocs, &d->cap_allocs, d->nallocs + 1, sizeof *na);
    if (!na)
        return -1;
    d->allocs = na;
    memmove(&na[idx + 1], &na[idx], (d->nallocs - idx) * sizeof *na);
    na[idx] = a;
    d->nallocs++;
    return 0;
}

static void remove_alloc(struct sim_device *d, struct sim_alloc *a)
{
    ptrdiff_t i = floor_index(d, a->base);
    if (i < 0 || d->allocs[i] != a)
        return;
    memmove(&d->allocs[i], &d->allocs[i + 1], (d->nallocs - (size_t)i - 1) * sizeof a);
    d->nallocs--;
}

struct sim_alloc *sim_mem_place_locked(struct sim_device *d, size_t size, size_t pages)
{
    uintptr_t addr;
    size_t idx;
    if (!find_gap(d, pages, &addr, &idx))
        return NULL;
    struct sim_alloc *a = calloc(1, sizeof *a);
    if (!a || insert_alloc(d, idx, a) != 0) {
        free(a);
        return NULL;
    }
    a->base = addr;
    a->size = size;
    a->pages = pages;
    a->device = d->ordinal;
    a->serial = ++sim_g.serial;
    return a;
}

bool sim_mem_back(struct sim_device *d, uintptr_t base, size_t pages)
{
    if (!sim_device_reserve(d, pages))
        return false; /* the device is full (with TESSERA_SIM_SHARED: every process's pages) */
    if (mprotect((void *)base, pages * SIM_PAGE, PROT_READ | PROT_WRITE) != 0) {
        sim_log("mprotect: %s", strerror(errno));
        sim_device_unreserve(d, pages);
        return false;
    }
    sim_device_account(d, (long)pages, 0, 0);
    return true;
}

void sim_mem_unback(struct sim_device *d, uintptr_t base, size_t pages)
{
    size_t len = pages * SIM_PAGE;
    /* give the host memory back: on a shared memfd mapping MADV_DONTNEED would only drop the
     * page table entries, MADV_REMOVE frees the pages themselves */
    if (madvise((void *)base, len, MADV_REMOVE) != 0 &&
        fallocate(d->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(base - d->base),
                  (off_t)len) != 0)
        sim_log("releasing %zu bytes: %s", len, strerror(errno));
    mprotect((void *)base, len, PROT_NONE);
    sim_device_account(d, -(long)pages, 0, 0);
}

CUresult sim_mem_alloc_locked(struct sim_ctx *ctx, size_t size, enum sim_alloc_kind kind,
                              CUdeviceptr *out)
{
    struct sim_device *d = &sim_g.dev[ctx->device];
    size_t pages = sim_pages(size);
    struct sim_alloc *a = NULL;
    if (sim_fault_alloc() || pages > sim_device_free_pages(d) ||
        !(a = sim_mem_place_locked(d, size, pages)) || !sim_mem_back(d, a->base, pages)) {
        if (a) {
            remove_alloc(d, a);
            free(a);
        }
        d->ctr.failed_allocs++;
        sim_log("device %d: out of memory for %zu bytes (%zu of %zu pages free)", d->ordinal,
                size, sim_device_free_pages(d), d->total_pages);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->kind = kind;
    a->ctx = ctx;
    d->ctr.alloc_calls++;
    sim_device_account(d, 0, 1, 0);
    if (kind == SIM_ALLOC_ASYNC) {
        a->mpool = d->current_pool; /* the caller may name another pool */
        sim_pool_charge(a, 1);
    }
    *out = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

CUresult sim_mem_alloc(CUdeviceptr *out, size_t size)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_sleep_us(sim_g.alloc_delay_us);
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (r == CUDA_SUCCESS)
        r = sim_mem_alloc_locked(cur, size, SIM_ALLOC_DEVICE, out);
    sim_unlock();
    if (r != CUDA_SUCCESS)
        *out = 0; /* as the real driver: a failed cudaMalloc's NULL comes from here */
    return r;
}

/* Managed memory: device pages counted against the device like cuMemAlloc, freed by
 * cuMemFree; the host reaches it directly (as it reaches all device memory here). */
CUresult sim_mem_alloc_managed(CUdeviceptr *out, size_t size, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (r == CUDA_SUCCESS)
        r = sim_mem_alloc_locked(cur, size, SIM_ALLOC_MANAGED, out);
    sim_unlock();
    if (r != CUDA_SUCCESS)
        *out = 0;
    return r;
}

/* [p, p+n) inside one managed allocation; n 0 means to its end */
static CUresult managed_range(CUdeviceptr p, size_t n, struct sim_alloc **out)
{
    struct sim_ptrinfo pi;
    sim_ptr_lookup((uintptr_t)p, &pi);
    if (pi.kind != SIM_PTR_DEVICE || !pi.alloc || pi.alloc->kind != SIM_ALLOC_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > pi.base + pi.size - (uintptr_t)p)
        return CUDA_ERROR_INVALID_VALUE;
    if (out)
        *out = pi.alloc;
    return CUDA_SUCCESS;
}

static bool location_valid(CUmemLocation loc)
{
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE)
        return loc.id >= 0 && loc.id < sim_g.ndev;
    return loc.type == CU_MEM_LOCATION_TYPE_HOST ||
           loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
           (loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && loc.id == 0);
}

static void CUDA_CB managed_noop(void *data) { (void)data; }

/* lock not held: queue the stream work a prefetch or attach is (it moves nothing here) */
static CUresult managed_stream_work(CUstream h, bool ptsz)
{
    struct sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = managed_noop;
    return sim_submit(h, ptsz, op, false);
}

CUresult sim_mem_prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream h,
                          bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0 || flags != 0 || !location_valid(loc))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    r = managed_range(p, n, NULL);
    sim_unlock();
    return r != CUDA_SUCCESS ? r : managed_stream_work(h, ptsz);
}

CUresult sim_mem_advise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0 || advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    /* read-mostly ignores the location; the others name a device or the host */
    bool needs_loc = advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
                     advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY;
    if (needs_loc && !location_valid(loc))
        return loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? CUDA_ERROR_INVALID_DEVICE
                                                       : CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    r = managed_range(p, n, NULL);
    sim_unlock();
    return r;
}

CUresult sim_stream_attach(CUstream h, CUdeviceptr p, size_t n, unsigned flags, bool ptsz)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_alloc *a = NULL;
    r = managed_range(p, n, &a);
    /* a managed allocation is attached whole: from its base, length 0 or its size */
    if (r == CUDA_SUCCESS && (a->base != (uintptr_t)p || (n != 0 && n != a->size)))
        r = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return r != CUDA_SUCCESS ? r : managed_stream_work(h, ptsz);
}

void sim_alloc_release(struct sim_alloc *a, bool explicit_free)
{
    struct sim_device *d = &sim_g.dev[a->device];
    size_t len = a->pages * SIM_PAGE;
    remove_alloc(d, a);
    if (a->kind == SIM_ALLOC_IPC || a->kind == SIM_ALLOC_POOL_IMPORT) {
        /* put our own (unallocated) device memory back under the imported range */
        if (mmap((void *)a->base, len, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                 d->memfd, (off_t)(a->base - d->base)) == MAP_FAILED)
            sim_log("mmap(restore): %s", strerror(errno));
        if (a->kind == SIM_ALLOC_POOL_IMPORT) {
            sim_pool_charge(a, -1);
            if (explicit_free)
                d->ctr.imported_frees++;
        }
    } else if (a->kind == SIM_ALLOC_GRAPH) {
        sim_graph_mem_forget(a);
    } else {
        sim_mem_unback(d, a->base, a->pages);
        if (explicit_free)
            d->ctr.free_calls++;
        else
            d->ctr.implicit_frees++;
        sim_device_account(d, 0, -1, 0);
        if (a->kind == SIM_ALLOC_ASYNC)
            sim_pool_charge(a, -1);
    }
    free(a->array);
    free(a);
}

void sim_alloc_free(struct sim_alloc *a, uint64_t gen)
{
    if (a->kind == SIM_ALLOC_GRAPH)
        sim_graph_mem_free(a, gen);
    else
        sim_alloc_release(a, true);
}

/* What cuMemFree and cuMemFreeAsync take: an allocation's base, once. Arrays go with
 * cuArrayDestroy and IPC mappings with cuIpcCloseMemHandle only; a graph allocation only while
 * a launch has it allocated. */
static struct sim_alloc *freeable_at(CUdeviceptr p)
{
    struct sim_alloc *a = alloc_at((uintptr_t)p);
    if (!a || a->kind == SIM_ALLOC_IPC || a->kind == SIM_ALLOC_ARRAY || a->free_pending ||
        (a->kind == SIM_ALLOC_GRAPH && !a->g_live))
        return NULL;
    return a;
}

CUresult sim_mem_free(CUdeviceptr p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_sleep_us(sim_g.alloc_delay_us);
    if (!p)
        return CUDA_SUCCESS; /* as the real driver does */
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    struct sim_alloc *a = NULL;
    if (r == CUDA_SUCCESS && !(a = freeable_at(p)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        /* like a GPU: the free waits until all work of the context queued so far is done */
        a->free_pending = true;
        uint64_t serial = a->serial, gen = a->g_gen;
        sim_wait_ctx_idle(a->ctx);
        a = alloc_at((uintptr_t)p);
        if (a && a->serial == serial) /* else a context teardown took it meanwhile */
            sim_alloc_free(a, gen);
    }
    sim_unlock();
    return r;
}

/* the allocation at p (under the lock), for a caller that charges it to another pool */
struct sim_alloc *sim_mem_alloc_at(CUdeviceptr p)
{
    return alloc_at((uintptr_t)p);
}

CUresult sim_mem_free_async_prepare(CUdeviceptr p, struct sim_alloc **out)
{
    struct sim_alloc *a = freeable_at(p);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    a->free_pending = true;
    *out = a;
    return CUDA_SUCCESS;
}

void sim_ctx_free_allocs(struct sim_ctx *ctx)
{
    for (int i = 0; i < sim_g.ndev; i++) {
        struct sim_device *d = &sim_g.dev[i];
        for (size_t j = d->nallocs; j-- > 0;) {
            struct sim_alloc *a = d->allocs[j];
            if (a->ctx == ctx)
                sim_alloc_release(a, false);
        }
    }
}

CUresult sim_mem_get_info(size_t *free_b, size_t *total_b)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    /* NULL outputs are accepted and skipped, as the CUDA 13 driver does (seen on an H100). */
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS) {
        struct sim_device *d = &sim_g.dev[cur->device];
        if (free_b)
            *free_b = sim_device_free_pages(d) * SIM_PAGE;
        if (total_b)
            *total_b = d->total_pages * SIM_PAGE;
    }
    sim_unlock();
    return r;
}

CUresult sim_mem_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_ptrinfo pi;
    sim_ptr_lookup((uintptr_t)p, &pi);
    if (pi.kind == SIM_PTR_NONE) {
        r = CUDA_ERROR_NOT_FOUND;
    } else {
        if (base)
            *base = (CUdeviceptr)pi.base;
        if (size)
            *size = pi.size;
    }
    sim_unlock();
    return r;
}

/* ---- pinned host memory -------------------------------------------------------------- */

/* Fill in a pinned or registered host range and put it on the list. Lock held. */
static void host_link(struct sim_host *h, uintptr_t base, size_t size, unsigned flags,
                      struct sim_ctx *ctx)
{
    h->base = base;
    h->size = size;
    h->flags = flags;
    h->ctx = ctx;
    h->serial = ++sim_g.serial;
    h->next = hosts;
    hosts = h;
}

/* Pinned bytes of the device whose context allocated h (not registered memory). Lock held. */
static void host_count(const struct sim_host *h, int64_t sign)
{
    if (!h->ctx || h->registered)
        return;
    struct tessera_sim_counters *c = &sim_g.dev[h->ctx->device].ctr;
    c->host_bytes = (uint64_t)((int64_t)c->host_bytes + sign * (int64_t)h->map_size);
    if (c->host_bytes > c->peak_host_bytes)
        c->peak_host_bytes = c->host_bytes;
}

CUresult sim_host_alloc(void **pp, size_t size, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned valid = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                           CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp || (flags & ~valid))
        return CUDA_ERROR_INVALID_VALUE;
    if (size == 0) { /* succeeds with NULL, like the real driver */
        *pp = NULL;
        return CUDA_SUCCESS;
    }
    long pg = sysconf(_SC_PAGESIZE);
    size_t psz = pg > 0 ? (size_t)pg : 4096;
    if (size > SIZE_MAX - psz)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t msz = (size + psz - 1) / psz * psz;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    struct sim_host *h = NULL;
    if (r == CUDA_SUCCESS && !(h = calloc(1, sizeof *h)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        void *m = mmap(NULL, msz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            free(h);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            h->map_size = msz;
            host_link(h, (uintptr_t)m, size, flags, cur);
            host_count(h, 1);
            *pp = m;
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_host_free(void *p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_host **pp = &hosts;
    while (*pp && (*pp)->base != (uintptr_t)p)
        pp = &(*pp)->next;
    if (!p || !*pp || (*pp)->registered) { /* registered memory: cuMemHostUnregister */
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        r = sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    if (r == CUDA_SUCCESS) {
        struct sim_host *h = *pp;
        *pp = h->next;
        /* pinned memory may be the source or target of queued copies: like the real
         * driver, freeing it synchronises with the device first */
        sim_wait_ctx_idle(NULL);
        host_count(h, -1);
        munmap((void *)h->base, h->map_size);
        free(h);
    }
    sim_unlock();
    return r;
}

/* Page-lock the program's own memory [p, p+size): from here on it is pinned host memory for
 * copies and pointer queries, until cuMemHostUnregister(p). Overlapping a pinned range:
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, as the driver says. */
CUresult sim_host_register(void *p, size_t size, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned valid = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    uintptr_t b = (uintptr_t)p;
    if (!p || size == 0 || (flags & ~valid) || size > UINTPTR_MAX - b)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    struct sim_ptrinfo pi;
    sim_ptr_lookup(b, &pi);
    if (r == CUDA_SUCCESS && (pi.in_device_space || dev_of(b + size - 1)))
        r = CUDA_ERROR_INVALID_VALUE; /* device memory is not the host's to page-lock */
    for (struct sim_host *h = hosts; r == CUDA_SUCCESS && h; h = h->next)
        if (b < h->base + h->size && h->base < b + size)
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    struct sim_host *h = NULL;
    if (r == CUDA_SUCCESS && !(h = calloc(1, sizeof *h)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        h->registered = true;
        host_link(h, b, size, flags, cur);
    }
    sim_unlock();
    return r;
}

CUresult sim_host_unregister(void *p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_host **pp = &hosts;
    while (*pp && ((*pp)->base != (uintptr_t)p || !(*pp)->registered))
        pp = &(*pp)->next;
    if (!p || !*pp) {
        r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
        struct sim_host *h = *pp;
        *pp = h->next;
        sim_wait_ctx_idle(NULL); /* queued copies may still read or write it */
        free(h);
    }
    sim_unlock();
    return r;
}

/* Is p in pinned (allocated or registered) host memory? CUDA_SUCCESS, its flags and its device
 * address, or the driver's error for another memory (CUDA_ERROR_INVALID_VALUE) or no usable
 * context. Memory mapped with the virtual-memory API answers too, as a GPU answers it (an H100,
 * driver 580): flags PORTABLE | DEVICEMAP and the start of the cuMemMap range holding p. A
 * cudaMalloc pointer is refused. */
static CUresult host_flags_of(const void *p, unsigned *flags, CUdeviceptr *dev)
{
    sim_lock();
    struct sim_ctx *cur;
    CUresult r = sim_current_ctx(&cur);
    struct sim_ptrinfo pi;
    sim_ptr_lookup((uintptr_t)p, &pi);
    if (r == CUDA_SUCCESS && pi.kind == SIM_PTR_HOST) {
        *flags = pi.host->flags;
        *dev = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    } else if (r == CUDA_SUCCESS && pi.kind == SIM_PTR_VMM) {
        *flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
        *dev = (CUdeviceptr)pi.base;
    } else if (r == CUDA_SUCCESS) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return r;
}

CUresult sim_host_device_pointer(CUdeviceptr *d, void *p, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!d || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned made_with;
    return host_flags_of(p, &made_with, d);
}

/* The flags pinned (allocated or registered) host memory was made with, for any pointer into
 * it; CUDA_ERROR_INVALID_VALUE for other memory. */
CUresult sim_host_get_flags(unsigned *flags, void *p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr dev;
    return host_flags_of(p, flags, &dev);
}

/* ---- pointer attributes -------------------------------------------------------------- */

static void put_bool(void *data, bool v) { *(bool *)data = v; }

static CUresult put_attr(void *data, CUpointer_attribute attr, const struct sim_ptrinfo *pi,
                         uintptr_t p, bool multi)
{
    bool known = pi->kind != SIM_PTR_NONE;
    bool dev = pi->kind == SIM_PTR_DEVICE || pi->kind == SIM_PTR_VMM;
    uint64_t serial = pi->alloc ? pi->alloc->serial
                      : pi->map ? pi->map->h->serial
                      : pi->host ? pi->host->serial : 0;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = (CUcontext)pi->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = dev                          ? CU_MEMORYTYPE_DEVICE
                                : pi->kind == SIM_PTR_HOST ? CU_MEMORYTYPE_HOST
                                                           : 0u;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = known ? (CUdeviceptr)p : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (dev && !multi && !(pi->alloc && pi->alloc->kind == SIM_ALLOC_MANAGED))
            return CUDA_ERROR_INVALID_VALUE;
        /* pinned and managed memory, and memory CUDA does not know (unallocated device
         * addresses too, as a GPU answers for freed memory), is its own host pointer */
        *(void **)data = (pi->kind == SIM_PTR_HOST || !known ||
                          (pi->alloc && pi->alloc->kind == SIM_ALLOC_MANAGED))
                             ? (void *)p
                             : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        put_bool(data, false);
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        put_bool(data, pi->alloc && pi->alloc->kind == SIM_ALLOC_MANAGED);
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = serial;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = known ? pi->device : -2;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        put_bool(data, pi->alloc && pi->alloc->kind == SIM_ALLOC_DEVICE);
        break;
    /* for VMM memory the range is the whole reservation, the mapping is the cuMemMap range
     * (cuMemGetAddressRange gives the latter), as the real driver reports them */
    /* cuPointerGetAttributes leaves the range of unallocated memory as it was (a GPU does) */
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (known)
            *(void **)data = (void *)(pi->map ? pi->resv->base : pi->base);
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (known)
            *(size_t *)data = pi->map ? pi->resv->size : pi->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        put_bool(data, known);
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = pi->map ? pi->map->h->htypes : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        put_bool(data, dev);
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
        int f = 0;
        if (pi->kind == SIM_PTR_DEVICE || pi->kind == SIM_PTR_HOST)
            f = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        else if (pi->map)
            f = (pi->map->prot & PROT_WRITE)  ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                : (pi->map->prot & PROT_READ) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                                              : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        *(int *)data = f;
        break;
    }
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = pi->alloc && pi->alloc->kind == SIM_ALLOC_ASYNC
                                    ? (CUmemoryPool)(void *)pi->alloc->mpool
                                    : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        /* pinned memory is mapped in 2 MiB units (a GPU's answer: 10,000 bytes map 2 MiB) */
        *(size_t *)data = pi->alloc                           ? pi->alloc->pages * SIM_PAGE
                          : pi->host && !pi->host->registered ? (pi->size + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE
                                                              : pi->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)pi->base;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult sim_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p, bool multi)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ptrinfo pi;
    sim_ptr_lookup((uintptr_t)p, &pi);
    CUresult r = (pi.kind == SIM_PTR_NONE && !multi) ? CUDA_ERROR_INVALID_VALUE
                                                     : put_attr(data, attr, &pi, (uintptr_t)p, multi);
    sim_unlock();
    return r;
}

/* ---- IPC ----------------------------------------------------------------------------- */

CUresult sim_open_foreign_fd(pid_t pid, int fdnum, const char *name, int *out)
{
    char path[64], link[128];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fdnum);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0) {
        sim_log("%s: %s", path, strerror(errno));
        return CUDA_ERROR_INVALID_HANDLE;
    }
    link[n] = 0;
    if (!strstr(link, name)) /* not a descriptor of the simulator's */
        return CUDA_ERROR_INVALID_HANDLE;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        sim_log("open %s: %s", path, strerror(errno));
        return CUDA_ERROR_MAP_FAILED;
    }
    *out = fd;
    return CUDA_SUCCESS;
}

CUresult sim_mem_map_foreign(struct sim_ctx *ctx, int device, int fd, uint64_t offset,
                             size_t size, size_t pages, enum sim_alloc_kind kind,
                             struct sim_alloc **out)
{
    struct sim_device *d = &sim_g.dev[device];
    struct sim_alloc *a = sim_mem_place_locked(d, size, pages);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (mmap((void *)a->base, pages * SIM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             fd, (off_t)offset) == MAP_FAILED) {
        sim_log("mapping another process's memory: %s", strerror(errno));
        mmap((void *)a->base, pages * SIM_PAGE, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
             d->memfd, (off_t)(a->base - d->base));
        remove_alloc(d, a);
        free(a);
        return CUDA_ERROR_MAP_FAILED;
    }
    a->kind = kind;
    a->ctx = ctx;
    *out = a;
    return CUDA_SUCCESS;
}

struct ipc_wire {
    char magic[8];
    int32_t pid;
    int32_t memfd;
    int32_t device;
    int32_t pad;
    uint64_t offset;
    uint64_t size;
    uint64_t pages;
    uint64_t serial;
    uint64_t spare;
};
_Static_assert(sizeof(struct ipc_wire) <= sizeof(CUipcMemHandle), "IPC handle layout");

static const char ipc_magic[8] = {'T', 'S', 'I', 'M', 'I', 'P', 'C', '1'};

CUresult sim_ipc_get(CUipcMemHandle *h, CUdeviceptr p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ptrinfo pi;
    sim_ptr_lookup((uintptr_t)p, &pi);
    /* like the real driver, the handle describes the whole allocation containing p */
    if (pi.kind != SIM_PTR_DEVICE || pi.alloc->kind != SIM_ALLOC_DEVICE) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct sim_alloc *a = pi.alloc;
        struct sim_device *d = &sim_g.dev[a->device];
        struct ipc_wire w;
        memset(&w, 0, sizeof w);
        memcpy(w.magic, ipc_magic, sizeof w.magic);
        w.pid = (int32_t)getpid();
        w.memfd = d->memfd;
        w.device = a->device;
        w.offset = a->base - d->base;
        w.size = a->size;
        w.pages = a->pages;
        w.serial = a->serial;
        memset(h, 0, sizeof *h);
        memcpy(h, &w, sizeof w);
    }
    sim_unlock();
    return r;
}

CUresult sim_ipc_open(CUdeviceptr *out, CUipcMemHandle h, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_wire w;
    memcpy(&w, &h, sizeof w);
    if (memcmp(w.magic, ipc_magic, sizeof w.magic) != 0 || w.pages == 0 || w.size == 0 ||
        w.pages > (1ull << 44) / SIM_PAGE || w.size > w.pages * SIM_PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* handles cannot be opened by their exporter */
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r != CUDA_SUCCESS)
        goto out;
    struct sim_device *d = &sim_g.dev[cur->device];
    for (size_t i = 0; i < d->nallocs; i++) {
        struct sim_alloc *a = d->allocs[i];
        if (a->kind == SIM_ALLOC_IPC && a->ctx == cur && a->ipc_pid == w.pid &&
            a->ipc_serial == w.serial && a->ipc_offset == w.offset) {
            a->ipc_refs++;
            *out = (CUdeviceptr)a->base;
            goto out;
        }
    }
    int fd;
    r = sim_open_foreign_fd(w.pid, w.memfd, "tessera-sim-dev", &fd);
    if (r != CUDA_SUCCESS)
        goto out;
    struct sim_alloc *a;
    r = sim_mem_map_foreign(cur, cur->device, fd, w.offset, w.size, w.pages, SIM_ALLOC_IPC, &a);
    close(fd);
    if (r != CUDA_SUCCESS)
        goto out;
    a->ipc_refs = 1;
    a->ipc_pid = w.pid;
    a->ipc_serial = w.serial;
    a->ipc_offset = w.offset;
    a->ipc_device = w.device;
    *out = (CUdeviceptr)a->base;
out:
    sim_unlock();
    return r;
}

CUresult sim_ipc_close(CUdeviceptr p)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_alloc *a = alloc_at((uintptr_t)p);
    if (!a || a->kind != SIM_ALLOC_IPC) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (--a->ipc_refs == 0) {
        uint64_t serial = a->serial;
        sim_wait_ctx_idle(a->ctx);
        a = alloc_at((uintptr_t)p);
        if (a && a->serial == serial)
            sim_alloc_release(a, false);
    }
    sim_unlock();
    return r;
}
