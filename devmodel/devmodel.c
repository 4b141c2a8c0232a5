/* A model of a device for driving the core without CUDA; see devmodel.h. */
#include "devmodel/devmodel.h"

#include <stdlib.h>
#include <string.h>

#include "core/peers.h"
#include "core/tree.h"

#define DEVMODEL_SEG_BASE ((uintptr_t)0x7f0000000000ull) /* plain allocations */
#define DEVMODEL_VA_BASE ((uintptr_t)0x1000000000000000ull) /* virtual reservations */
#define DEVMODEL_VA_LIMIT ((uintptr_t)0xf000000000000000ull)

/* A range in one of the address maps: an allocation, a reservation or a mapping. */
typedef struct dm_range {
    ts_node node; /* key (addr, 0, 0) */
    uintptr_t addr;
    size_t size;
    uint64_t handle; /* mappings: the physical handle */
    size_t offset;   /* mappings: where in the handle the mapping starts */
    uint64_t access; /* mappings: bit d, peer device d may touch it (the owner always may) */
} dm_range;

/* content stands for the handle's bytes: a number given at creation, which copies carry (a
 * copy out writes it at the mapping's place in the host buffer, a copy in takes it from there),
 * so a test can see which bytes an address reads without the model holding any. */
typedef struct dm_handle {
    size_t size;
    uint32_t maps;
    bool live; /* not yet destroyed */
    uint64_t content;
} dm_handle;

struct ts_devmodel {
    size_t capacity, page;
    size_t in_use;
    ts_tree allocs, reserves, maps;
    uint64_t peers; /* devices every later mapping grants (vm_peer_add) */
    dm_handle *handles;
    size_t nhandles, handles_cap;
    bool manual_fences;
    uint64_t fence_next, fence_done;
    ts_devmodel_order order;
    uint64_t fail_seg, fail_create, fail_map, fail_fence;
    ts_devmodel_addr_fn script;
    void *script_user;
    ts_driver_costs costs;
    ts_devmodel_counters c;
    const uint64_t *seq; /* the allocator's stats sequence lock, watched at every call */
    /* Pinned host memory: real host bytes (a test writes and reads them), one record each. */
    struct dm_host { uintptr_t addr; size_t size; unsigned flags; } *host;
    size_t nhost, host_cap;
    size_t host_capacity, host_in_use; /* 0: no limit */
};

static size_t dm_round(const ts_devmodel *m, size_t size)
{
    return (size + m->page - 1) / m->page * m->page;
}

static dm_range *dm_range_of(ts_node *n)
{
    return n ? (dm_range *)((char *)n - offsetof(dm_range, node)) : NULL;
}

static dm_range *dm_find(const ts_tree *t, uintptr_t addr)
{
    dm_range *r = dm_range_of(ts_tree_lower_bound(t, addr, 0, 0));
    return r && r->addr == addr ? r : NULL;
}

/* The range containing addr, if any. */
static dm_range *dm_containing(const ts_tree *t, uintptr_t addr)
{
    dm_range *r = dm_range_of(ts_tree_floor(t, addr, 0, 0));
    return r && addr < r->addr + r->size ? r : NULL;
}

static bool dm_overlaps(const ts_tree *t, uintptr_t addr, size_t size)
{
    dm_range *r = dm_range_of(ts_tree_floor(t, addr + size - 1, 0, 0));
    return r && r->addr + r->size > addr;
}

static dm_range *dm_insert(ts_tree *t, uintptr_t addr, size_t size, uint64_t handle)
{
    dm_range *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->addr = addr;
    r->size = size;
    r->handle = handle;
    r->node.k0 = addr;
    ts_tree_insert(t, &r->node);
    return r;
}

static void dm_erase(ts_tree *t, dm_range *r)
{
    ts_tree_remove(t, &r->node);
    free(r);
}

static void dm_free_subtree(ts_node *n)
{
    /* post-order: a node goes only after both subtrees (in-order walks climb through parents) */
    while (n) {
        dm_free_subtree(n->left);
        ts_node *right = n->right;
        free(dm_range_of(n));
        n = right;
    }
}

static void dm_free_tree(ts_tree *t)
{
    dm_free_subtree(t->root);
    t->root = NULL;
    t->count = 0;
}

/* Lowest address >= base where size bytes fit between existing ranges (first fit). */
static uintptr_t dm_first_fit(const ts_tree *t, uintptr_t base, size_t size, size_t align)
{
    uintptr_t cand = base;
    for (ts_node *n = ts_tree_first(t); n; n = ts_tree_next(n)) {
        dm_range *r = dm_range_of(n);
        if (r->addr + r->size <= cand)
            continue;
        if (r->addr >= cand + size)
            break;
        cand = (r->addr + r->size + align - 1) / align * align;
    }
    return cand;
}

static bool dm_take(ts_devmodel *m, size_t bytes)
{
    if (bytes > m->capacity - m->in_use)
        return false;
    m->in_use += bytes;
    m->c.bytes_in_use = m->in_use;
    if (m->in_use > m->c.peak_bytes_in_use)
        m->c.peak_bytes_in_use = m->in_use;
    return true;
}

static void dm_give(ts_devmodel *m, size_t bytes)
{
    m->in_use -= bytes;
    m->c.bytes_in_use = m->in_use;
}

/* One call that took ns. */
static void dm_charge_ns(ts_devmodel *m, ts_driver_call call, double ns)
{
    m->c.driver_ns += ns;
    m->c.call_ns[call] += ns;
    m->c.calls[call]++;
}

/* Charge one CUDA call covering bytes, whether it succeeds or not (a failed call costs too). */
static void dm_charge(ts_devmodel *m, ts_driver_call call, size_t bytes)
{
    dm_charge_ns(m, call, ts_driver_cost_ns(&m->costs, call, bytes));
}

static bool dm_fail_now(uint64_t *countdown)
{
    if (*countdown == 0)
        return false;
    return --*countdown == 0;
}

/* Every backend entry point starts here: a call made while the allocator's stats window is open
 * (the sequence lock odd) would keep a reader spinning through a device call. */
static ts_devmodel *dm_enter(void *ctx)
{
    ts_devmodel *m = ctx;
    if (m->seq && (__atomic_load_n(m->seq, __ATOMIC_RELAXED) & 1))
        m->c.calls_in_stats_window++;
    return m;
}

/* A call the driver would refuse as invalid (bad range, unknown handle, still mapped): the
 * allocator never makes one, so the tests count them. */
static int dm_refuse(ts_devmodel *m)
{
    m->c.invalid_calls++;
    return TS_EINVAL;
}

static bool dm_host_grow(ts_devmodel *m)
{
    size_t cap = m->host_cap ? m->host_cap * 2 : 16;
    struct dm_host *n = realloc(m->host, cap * sizeof *n);
    if (!n)
        return false;
    m->host = n;
    m->host_cap = cap;
    return true;
}

/* --- backend functions ---------------------------------------------------------------------- */

static int dm_seg_alloc(void *ctx, size_t size, uintptr_t *out)
{
    ts_devmodel *m = dm_enter(ctx);
    size_t bytes = dm_round(m, size);
    dm_charge(m, TS_CALL_MALLOC, size);
    if (dm_fail_now(&m->fail_seg) || !dm_take(m, bytes)) {
        m->c.seg_alloc_failures++;
        return TS_ENOMEM;
    }
    uintptr_t addr = 0;
    if (m->script)
        addr = m->script(m->script_user, size);
    if (addr == 0 || dm_overlaps(&m->allocs, addr, bytes))
        addr = dm_first_fit(&m->allocs, DEVMODEL_SEG_BASE, bytes, m->page);
    if (!dm_insert(&m->allocs, addr, bytes, 0)) {
        dm_give(m, bytes);
        return TS_ENOMEM;
    }
    m->c.seg_allocs++;
    m->c.live_segments++;
    *out = addr;
    return TS_OK;
}

static int dm_seg_free(void *ctx, uintptr_t ptr, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    (void)size;
    dm_range *r = dm_find(&m->allocs, ptr);
    if (!r)
        return dm_refuse(m);
    dm_charge(m, TS_CALL_FREE, r->size);
    dm_give(m, r->size);
    dm_erase(&m->allocs, r);
    m->c.seg_frees++;
    m->c.live_segments--;
    return TS_OK;
}

static int dm_mem_info(void *ctx, size_t *free_bytes, size_t *total)
{
    ts_devmodel *m = dm_enter(ctx);
    m->c.mem_info_queries++;
    *free_bytes = m->capacity - m->in_use;
    *total = m->capacity;
    return TS_OK;
}

static int dm_synchronize(void *ctx)
{
    ts_devmodel *m = dm_enter(ctx);
    m->c.synchronizes++;
    dm_charge(m, TS_CALL_SYNCHRONIZE, 0);
    m->fence_done = m->fence_next;
    return TS_OK;
}

/* A capture is underway (TS_DEVMODEL_CAPTURING): as on a GPU, no fence can be recorded, queried or
 * waited for, and nothing may be unpinned. */
static bool dm_capturing(const ts_devmodel *m)
{
    return m->order == TS_DEVMODEL_CAPTURING;
}

static int dm_capture_active(void *ctx)
{
    return dm_capturing(dm_enter(ctx));
}

static int dm_fence_record(void *ctx, ts_fence *out)
{
    ts_devmodel *m = dm_enter(ctx);
    if (dm_capturing(m))
        return TS_EAGAIN;
    if (dm_fail_now(&m->fail_fence))
        return TS_ENOMEM; /* no fence to be had (the backend out of host memory) */
    *out = ++m->fence_next;
    if (!m->manual_fences)
        m->fence_done = m->fence_next;
    m->c.fences_recorded++;
    dm_charge(m, TS_CALL_EVENT_RECORD, 0);
    return TS_OK;
}

static int dm_fence_query(void *ctx, ts_fence f)
{
    ts_devmodel *m = dm_enter(ctx);
    if (dm_capturing(m))
        return TS_EAGAIN;
    m->c.fence_queries++;
    return f <= m->fence_done ? TS_OK : TS_EAGAIN;
}

static int dm_fence_wait(void *ctx, ts_fence f)
{
    ts_devmodel *m = dm_enter(ctx);
    if (dm_capturing(m))
        return dm_refuse(m);
    m->c.fence_waits++;
    if (f > m->fence_done)
        m->fence_done = f;
    return TS_OK;
}

static void dm_fence_release(void *ctx, ts_fence f)
{
    ts_devmodel *m = dm_enter(ctx);
    (void)f;
    m->c.fences_released++;
}

static int dm_reuse_order(void *ctx, int *issued)
{
    ts_devmodel *m = dm_enter(ctx);
    *issued = 0;
    if (m->order == TS_DEVMODEL_CAPTURING)
        return TS_EAGAIN;
    if (m->order == TS_DEVMODEL_STREAMS) {
        *issued = 1;
        m->c.order_points++;
        dm_charge(m, TS_CALL_EVENT_RECORD, 0);
    }
    return TS_OK;
}

void ts_devmodel_set_order(ts_devmodel *m, ts_devmodel_order mode)
{
    m->order = mode;
}

static int dm_vm_granularity(void *ctx, size_t *g)
{
    ts_devmodel *m = dm_enter(ctx);
    *g = m->page;
    return TS_OK;
}

static int dm_vm_reserve(void *ctx, size_t size, uintptr_t *out)
{
    ts_devmodel *m = dm_enter(ctx);
    if (size == 0 || size % m->page)
        return dm_refuse(m);
    uintptr_t addr = dm_first_fit(&m->reserves, DEVMODEL_VA_BASE, size, m->page);
    if (addr + size > DEVMODEL_VA_LIMIT || !dm_insert(&m->reserves, addr, size, 0))
        return TS_ENOMEM;
    m->c.vm_reserves++;
    dm_charge(m, TS_CALL_ADDRESS_RESERVE, size);
    *out = addr;
    return TS_OK;
}

static int dm_vm_release(void *ctx, uintptr_t va, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    dm_range *r = dm_find(&m->reserves, va);
    if (!r || r->size != size || dm_overlaps(&m->maps, va, size))
        return dm_refuse(m); /* unknown, partial, or still mapped */
    dm_erase(&m->reserves, r);
    m->c.vm_releases++;
    dm_charge(m, TS_CALL_ADDRESS_FREE, size);
    return TS_OK;
}

static int dm_vm_create(void *ctx, size_t size, uint64_t *out)
{
    ts_devmodel *m = dm_enter(ctx);
    if (size == 0 || size % m->page)
        return dm_refuse(m);
    dm_charge(m, TS_CALL_CREATE, size);
    if (dm_fail_now(&m->fail_create) || !dm_take(m, size))
        return TS_ENOMEM;
    if (m->nhandles == m->handles_cap) {
        size_t cap = m->handles_cap ? m->handles_cap * 2 : 64;
        dm_handle *h = realloc(m->handles, cap * sizeof *h);
        if (!h) {
            dm_give(m, size);
            return TS_ENOMEM;
        }
        m->handles = h;
        m->handles_cap = cap;
    }
    m->handles[m->nhandles] = (dm_handle){
        .size = size, .maps = 0, .live = true, .content = 0xc0de000000000000ull | (m->nhandles + 1)};
    *out = ++m->nhandles; /* handles are 1-based: 0 means none */
    m->c.vm_creates++;
    return TS_OK;
}

static dm_handle *dm_handle_get(ts_devmodel *m, uint64_t h)
{
    return (h >= 1 && h <= m->nhandles) ? &m->handles[h - 1] : NULL;
}

static void dm_handle_maybe_free(ts_devmodel *m, dm_handle *h)
{
    /* As the driver: a released handle's memory stays until its last mapping goes. */
    if (!h->live && h->maps == 0 && h->size) {
        dm_give(m, h->size);
        h->size = 0;
    }
}

static int dm_vm_destroy(void *ctx, uint64_t handle)
{
    ts_devmodel *m = dm_enter(ctx);
    dm_handle *h = dm_handle_get(m, handle);
    if (!h || !h->live)
        return dm_refuse(m);
    dm_charge(m, TS_CALL_RELEASE, h->size);
    h->live = false;
    dm_handle_maybe_free(m, h);
    m->c.vm_destroys++;
    return TS_OK;
}

/* The devices a new access grant names, as the CUDA backend computes them (core/peers.h): the
 * model is device 0. */
static uint64_t dm_granted(const ts_devmodel *m)
{
    int dev[TS_PEER_MAX];
    const unsigned n = ts_peer_grantees(m->peers, 0, dev);
    uint64_t access = 0;
    for (unsigned i = 0; i < n; i++)
        access |= (uint64_t)1 << dev[i];
    return access;
}

/* cuMemSetAccess over the mappings of [va, va + size): one call, priced as one grant per
 * mapping at that mapping's size. A GPU does the work per physical handle: on an H100 a grant
 * over 512 handles of 2 MiB took 16.5 ms where one over a single 1 GiB handle took 75 us and one
 * over a single 2 MiB handle 33 us (tools/costs, tests/data/driver-costs/h100.txt), so fewer
 * calls over the same handles save nothing and larger handles save almost all of it. */
static void dm_charge_grant(ts_devmodel *m, uintptr_t va, size_t size)
{
    double ns = 0;
    for (dm_range *r = dm_find(&m->maps, va); r && r->addr < va + size;
         r = dm_range_of(ts_tree_next(&r->node)))
        ns += ts_driver_cost_ns(&m->costs, TS_CALL_SET_ACCESS, r->size);
    dm_charge_ns(m, TS_CALL_SET_ACCESS, ns);
}

/* As the CUDA backend: a cuMemMap per piece (whole pages of a handle), back to back, then one
 * cuMemSetAccess over the whole range; a failed map unmaps the pieces mapped before it (a
 * cuMemUnmap each). */
static int dm_vm_map(void *ctx, uintptr_t va, const ts_vm_piece *pieces, size_t n)
{
    ts_devmodel *m = dm_enter(ctx);
    dm_range *res = dm_containing(&m->reserves, va);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const dm_handle *h = dm_handle_get(m, pieces[i].handle);
        /* cuMemMap's rule: offset and size whole pages, inside the handle */
        if (!h || !h->live || pieces[i].offset % m->page || pieces[i].size % m->page ||
            !pieces[i].size || pieces[i].offset > h->size ||
            pieces[i].size > h->size - pieces[i].offset)
            return dm_refuse(m);
        total += pieces[i].size;
    }
    if (n == 0 || !res || va + total > res->addr + res->size || va % m->page ||
        dm_overlaps(&m->maps, va, total))
        return dm_refuse(m);
    size_t mapped = 0;
    uintptr_t at = va;
    for (; mapped < n; at += pieces[mapped++].size) {
        dm_charge(m, TS_CALL_MAP, pieces[mapped].size);
        dm_range *r = dm_fail_now(&m->fail_map)
                          ? NULL
                          : dm_insert(&m->maps, at, pieces[mapped].size, pieces[mapped].handle);
        if (!r)
            break;
        r->offset = pieces[mapped].offset;
        dm_handle_get(m, pieces[mapped].handle)->maps++;
        m->c.vm_maps++;
    }
    if (mapped < n) {
        for (size_t i = 0; i < mapped; i++) {
            dm_range *r = dm_find(&m->maps, va);
            dm_charge(m, TS_CALL_UNMAP, r->size);
            dm_handle *h = dm_handle_get(m, r->handle);
            h->maps--;
            dm_handle_maybe_free(m, h);
            va += r->size;
            dm_erase(&m->maps, r);
            m->c.vm_unmaps++;
        }
        return TS_ENOMEM;
    }
    dm_charge_grant(m, va, total); /* one grant over everything mapped */
    const uint64_t access = dm_granted(m);
    for (dm_range *r = dm_find(&m->maps, va); r && r->addr < va + total;
         r = dm_range_of(ts_tree_next(&r->node)))
        r->access = access;
    return TS_OK;
}

static int dm_vm_peer_add(void *ctx, int device)
{
    ts_devmodel *m = dm_enter(ctx);
    return ts_peer_add(&m->peers, device) == TS_OK ? TS_OK : dm_refuse(m);
}

/* The range must be whole mappings, back to back. */
static bool dm_whole_mappings(const ts_devmodel *m, uintptr_t va, size_t size)
{
    uintptr_t at = va;
    while (at < va + size) {
        const dm_range *r = dm_find(&m->maps, at);
        if (!r || at + r->size > va + size)
            return false;
        at += r->size;
    }
    return size > 0;
}

static int dm_vm_access(void *ctx, uintptr_t va, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    if (!dm_whole_mappings(m, va, size))
        return dm_refuse(m);
    dm_charge_grant(m, va, size);
    const uint64_t access = dm_granted(m);
    for (dm_range *r = dm_find(&m->maps, va); r && r->addr < va + size;
         r = dm_range_of(ts_tree_next(&r->node)))
        r->access = access;
    return TS_OK;
}

static int dm_vm_unmap(void *ctx, uintptr_t va, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    if (!dm_whole_mappings(m, va, size))
        return dm_refuse(m);
    uintptr_t at = va;
    while (at < va + size) {
        dm_range *r = dm_find(&m->maps, at);
        at += r->size;
        dm_charge(m, TS_CALL_UNMAP, r->size); /* one page-table teardown per mapping */
        dm_handle *h = dm_handle_get(m, r->handle);
        h->maps--;
        dm_handle_maybe_free(m, h);
        dm_erase(&m->maps, r);
        m->c.vm_unmaps++;
    }
    return TS_OK;
}

/* --- copies: the content number of each mapping, carried through host memory --------------- */

static int dm_copy_out(void *ctx, void *host, uintptr_t dev, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    if (!dm_whole_mappings(m, dev, size))
        return dm_refuse(m);
    for (dm_range *r = dm_find(&m->maps, dev); r && r->addr < dev + size;
         r = dm_range_of(ts_tree_next(&r->node))) {
        uint64_t c = dm_handle_get(m, r->handle)->content + r->offset;
        memcpy((char *)host + (r->addr - dev), &c, sizeof c);
    }
    m->c.copied_out += size;
    return TS_OK;
}

static int dm_copy_in(void *ctx, uintptr_t dev, const void *host, size_t size)
{
    ts_devmodel *m = dm_enter(ctx);
    if (!dm_whole_mappings(m, dev, size))
        return dm_refuse(m);
    for (dm_range *r = dm_find(&m->maps, dev); r && r->addr < dev + size;
         r = dm_range_of(ts_tree_next(&r->node))) {
        uint64_t c;
        memcpy(&c, (const char *)host + (r->addr - dev), sizeof c);
        dm_handle_get(m, r->handle)->content = c - r->offset;
    }
    m->c.copied_in += size;
    return TS_OK;
}

bool ts_devmodel_content(const ts_devmodel *m, uintptr_t va, uint64_t *content)
{
    const dm_range *r = dm_containing(&m->maps, va);
    if (!r)
        return false;
    /* a byte's number: its handle's plus its place in the handle, the same through every
     * mapping of that byte */
    *content = m->handles[r->handle - 1].content + r->offset + (va - r->addr);
    return true;
}

/* --- pinned host memory --------------------------------------------------------------------- */

static int dm_host_alloc(void *ctx, size_t size, unsigned flags, uintptr_t *out)
{
    ts_devmodel *m = dm_enter(ctx);
    if (size == 0)
        return dm_refuse(m);
    if ((m->host_capacity && size > m->host_capacity - m->host_in_use) ||
        (m->nhost == m->host_cap && !dm_host_grow(m)))
        return TS_ENOMEM;
    void *p = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
    if (!p)
        return TS_ENOMEM;
    m->host[m->nhost++] = (struct dm_host){(uintptr_t)p, size, flags};
    m->host_in_use += size;
    m->c.host_allocs++;
    m->c.host_bytes_in_use = m->host_in_use;
    *out = (uintptr_t)p;
    return TS_OK;
}

static int dm_host_free(void *ctx, uintptr_t ptr)
{
    ts_devmodel *m = dm_enter(ctx);
    if (dm_capturing(m))
        return dm_refuse(m); /* cuMemFreeHost is not allowed in a capture */
    for (size_t i = 0; i < m->nhost; i++) {
        if (m->host[i].addr != ptr)
            continue;
        m->host_in_use -= m->host[i].size;
        m->host[i] = m->host[--m->nhost];
        free((void *)ptr);
        m->c.host_frees++;
        m->c.host_bytes_in_use = m->host_in_use;
        return TS_OK;
    }
    return dm_refuse(m);
}

void ts_devmodel_set_host_capacity(ts_devmodel *m, size_t bytes)
{
    m->host_capacity = bytes;
}

int ts_devmodel_host_info(const ts_devmodel *m, uintptr_t ptr, size_t *size, unsigned *flags)
{
    for (size_t i = 0; i < m->nhost; i++) {
        if (m->host[i].addr == ptr) {
            *size = m->host[i].size;
            *flags = m->host[i].flags;
            return TS_OK;
        }
    }
    return TS_ENOTFOUND;
}

/* --- public ---------------------------------------------------------------------------------- */

ts_devmodel *ts_devmodel_create(size_t capacity, size_t page)
{
    ts_devmodel *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->page = page ? page : ((size_t)2 << 20);
    m->capacity = capacity / m->page * m->page;
    ts_driver_costs_defaults(&m->costs);
    return m;
}

void ts_devmodel_destroy(ts_devmodel *m)
{
    if (!m)
        return;
    dm_free_tree(&m->allocs);
    dm_free_tree(&m->reserves);
    dm_free_tree(&m->maps);
    for (size_t i = 0; i < m->nhost; i++)
        free((void *)m->host[i].addr);
    free(m->host);
    free(m->handles);
    free(m);
}

ts_backend ts_devmodel_backend(ts_devmodel *m, bool with_vm, bool with_fences)
{
    ts_backend b;
    memset(&b, 0, sizeof b);
    b.ctx = m;
    b.seg_alloc = dm_seg_alloc;
    b.seg_free = dm_seg_free;
    b.mem_info = dm_mem_info;
    b.synchronize = dm_synchronize;
    b.capture_active = dm_capture_active;
    b.host_alloc = dm_host_alloc;
    b.host_free = dm_host_free;
    b.copy_out = dm_copy_out;
    b.copy_in = dm_copy_in;
    if (with_fences) {
        b.fence_record = dm_fence_record;
        b.fence_query = dm_fence_query;
        b.fence_wait = dm_fence_wait;
        b.fence_release = dm_fence_release;
        b.reuse_order = dm_reuse_order;
    }
    if (with_vm) {
        b.vm_granularity = dm_vm_granularity;
        b.vm_reserve = dm_vm_reserve;
        b.vm_release = dm_vm_release;
        b.vm_create = dm_vm_create;
        b.vm_destroy = dm_vm_destroy;
        b.vm_map = dm_vm_map;
        b.vm_unmap = dm_vm_unmap;
        b.vm_peer_add = dm_vm_peer_add;
        b.vm_access = dm_vm_access;
    }
    return b;
}

void ts_devmodel_counters_get(const ts_devmodel *m, ts_devmodel_counters *out)
{
    *out = m->c;
}


void ts_devmodel_set_costs(ts_devmodel *m, const ts_driver_costs *costs)
{
    m->costs = *costs;
}

double ts_devmodel_driver_ns(const ts_devmodel *m)
{
    return m->c.driver_ns;
}

size_t ts_devmodel_peak_bytes(const ts_devmodel *m)
{
    return m->c.peak_bytes_in_use;
}

void ts_devmodel_watch_seq(ts_devmodel *m, const uint64_t *seq)
{
    m->seq = seq;
}

void ts_devmodel_set_manual_fences(ts_devmodel *m, bool manual)
{
    m->manual_fences = manual;
}

void ts_devmodel_complete_fences(ts_devmodel *m)
{
    m->fence_done = m->fence_next;
}


void ts_devmodel_fail_seg_alloc_after(ts_devmodel *m, uint64_t n)
{
    m->fail_seg = n;
}

void ts_devmodel_fail_vm_create_after(ts_devmodel *m, uint64_t n)
{
    m->fail_create = n;
}

void ts_devmodel_fail_vm_map_after(ts_devmodel *m, uint64_t n)
{
    m->fail_map = n;
}

void ts_devmodel_fail_fence_record_after(ts_devmodel *m, uint64_t n)
{
    m->fail_fence = n;
}

void ts_devmodel_set_address_script(ts_devmodel *m, ts_devmodel_addr_fn fn, void *user)
{
    m->script = fn;
    m->script_user = user;
}

int ts_devmodel_adopt(ts_devmodel *m, uintptr_t addr, size_t size)
{
    size_t bytes = dm_round(m, size);
    if (dm_overlaps(&m->allocs, addr, bytes) || !dm_take(m, bytes))
        return -1;
    if (!dm_insert(&m->allocs, addr, bytes, 0)) {
        dm_give(m, bytes);
        return -1;
    }
    m->c.live_segments++;
    return 0;
}

bool ts_devmodel_is_backed(const ts_devmodel *m, uintptr_t addr, size_t size)
{
    /* Plain allocations, or a run of mappings covering the whole range. */
    dm_range *r = dm_containing(&m->allocs, addr);
    if (r)
        return addr + size <= r->addr + r->size;
    uintptr_t at = addr;
    while (at < addr + size) {
        r = dm_containing(&m->maps, at);
        if (!r)
            return false;
        at = r->addr + r->size;
    }
    return true;
}

bool ts_devmodel_peer_can_access(const ts_devmodel *m, int device, uintptr_t addr, size_t size)
{
    if (device < 0 || device >= 64 || !ts_devmodel_is_backed(m, addr, size))
        return false;
    if (dm_containing(&m->allocs, addr))
        return true; /* driver allocations follow peer access itself */
    for (uintptr_t at = addr; at < addr + size;) {
        const dm_range *r = dm_containing(&m->maps, at);
        if (!(r->access & ((uint64_t)1 << device)))
            return false;
        at = r->addr + r->size;
    }
    return true;
}
