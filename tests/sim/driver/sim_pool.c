/* Simulated CUDA driver: memory pools, the one cuMemAllocAsync serves.
 *
 * Each device has a default pool; cuMemPoolCreate makes others (device memory, pinned, on one
 * device; at most SIM_MAX_POOLS alive). A pool's usage attributes come from its live
 * stream-ordered allocations: used is their requested bytes, reserved their 2 MiB pages, since
 * the simulator holds nothing back after cuMemFreeAsync. The release threshold and the three
 * reuse switches are stored and read back; the simulator's behaviour does not depend on them.
 * cuDeviceSetMemPool makes a pool the one cuMemAllocAsync draws from on its device.
 *
 * Access (cuMemPoolSetAccess) is per device and covers every allocation of the pool, those made
 * before the call too; the pool's own device always has it. A pool created with the POSIX file
 * descriptor handle type can be exported (sim_pool_ipc.c); an imported pool serves no
 * allocations of its own. */
#include "sim.h"

#include <string.h>
#include <unistd.h>

#define SIM_MAX_POOLS 32

/* A pool handle is the address of its record: a device's default pool or one of these. */
static struct sim_mempool created[SIM_MAX_POOLS];

struct sim_mempool *sim_pool_lookup(CUmemoryPool pool)
{
    struct sim_mempool *p = (struct sim_mempool *)(void *)pool;
    for (int i = 0; p && i < sim_g.ndev; i++)
        if (p == &sim_g.dev[i].pool)
            return p;
    for (int i = 0; p && i < SIM_MAX_POOLS; i++)
        if (p == &created[i] && created[i].created)
            return p;
    return NULL;
}

static struct sim_mempool *pool_live(CUmemoryPool pool)
{
    struct sim_mempool *p = sim_pool_lookup(pool);
    return p && !p->destroyed ? p : NULL;
}

/* A destroyed pool's record becomes free (an imported one lets go of the exporter's memory). */
static void pool_forget(struct sim_mempool *p)
{
    if (p->imported && p->devfd >= 0)
        close(p->devfd);
    memset(p, 0, sizeof *p);
}

void sim_pool_charge(struct sim_alloc *a, int sign)
{
    struct sim_mempool *p = a->mpool;
    if (!p)
        return;
    if (sign > 0) {
        p->used += a->size;
        p->reserved += a->pages * SIM_PAGE;
        p->live++;
        if (p->used > p->used_high)
            p->used_high = p->used;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
        return;
    }
    p->used -= a->size;
    p->reserved -= a->pages * SIM_PAGE;
    if (--p->live == 0 && p->destroyed)
        pool_forget(p); /* its last allocation went: the record is free again */
}

CUresult sim_pool_default(CUmemoryPool *pool, CUdevice dev)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    r = sim_device_check(dev);
    if (r == CUDA_SUCCESS)
        *pool = (CUmemoryPool)(void *)&sim_g.dev[dev].pool;
    return r;
}

struct sim_mempool *sim_pool_new_locked(int device)
{
    static uint64_t serials;
    for (int i = 0; i < SIM_MAX_POOLS; i++) {
        if (created[i].created)
            continue;
        memset(&created[i], 0, sizeof created[i]);
        created[i].created = true;
        created[i].device = device;
        created[i].serial = ++serials;
        created[i].devfd = -1;
        for (int k = 0; k < 3; k++)
            created[i].reuse[k] = 1;
        return &created[i];
    }
    return NULL;
}

bool sim_pool_reaches(const struct sim_mempool *p, int device)
{
    return device == p->device || (p->writers & (1u << device));
}

CUresult sim_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        sim_device_check(props->location.id) != CUDA_SUCCESS ||
        (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE; /* the simulator shares memory as descriptors only */
    sim_lock();
    struct sim_mempool *p = sim_pool_new_locked(props->location.id);
    if (p) {
        p->htypes = props->handleTypes;
        *pool = (CUmemoryPool)(void *)p;
    }
    sim_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult sim_pool_destroy(CUmemoryPool pool)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_mempool *p = pool_live(pool);
    if (!p || !p->created) {
        r = CUDA_ERROR_INVALID_VALUE; /* a default pool is never destroyed */
    } else {
        /* a device whose current pool this was draws from its default pool again */
        for (int i = 0; i < sim_g.ndev; i++)
            if (sim_g.dev[i].current_pool == p)
                sim_g.dev[i].current_pool = &sim_g.dev[i].pool;
        p->destroyed = true;
        if (p->live == 0)
            pool_forget(p);
    }
    sim_unlock();
    return r;
}

CUresult sim_pool_set_current(CUdevice dev, CUmemoryPool pool)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_mempool *p = pool_live(pool);
    if (!p || p->device != dev || p->imported) /* an imported pool serves no allocations */
        r = CUDA_ERROR_INVALID_VALUE;
    else
        sim_g.dev[dev].current_pool = p;
    sim_unlock();
    return r;
}

CUresult sim_pool_get_current(CUmemoryPool *pool, CUdevice dev)
{
    CUresult r = sim_check_init();
    if (r == CUDA_SUCCESS)
        r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *pool = (CUmemoryPool)(void *)sim_g.dev[dev].current_pool;
    sim_unlock();
    return r;
}

static int *reuse_flag(struct sim_mempool *d, CUmemPool_attribute attr)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        return &d->reuse[0];
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        return &d->reuse[1];
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return &d->reuse[2];
    default:
        return NULL;
    }
}

CUresult sim_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_mempool *d = pool_live(pool);
    if (!d || !value) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    int *flag = reuse_flag(d, attr);
    uint64_t v = 0;
    if (flag) {
        *flag = *(int *)value != 0;
    } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        memcpy(&v, value, sizeof v);
        d->threshold = v;
    } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        /* only a reset to 0 is allowed: the mark drops to what is in use now */
        memcpy(&v, value, sizeof v);
        if (v != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            d->reserved_high = d->reserved;
        else
            d->used_high = d->used;
    } else {
        r = CUDA_ERROR_INVALID_VALUE; /* read-only (current usage) or unknown */
    }
    sim_unlock();
    return r;
}

CUresult sim_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_mempool *d = pool_live(pool);
    if (!d || !value) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    int *flag = reuse_flag(d, attr);
    uint64_t v = 0;
    bool is64 = true;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = d->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = d->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = d->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = d->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = d->used_high; break;
    default:
        is64 = false;
        if (flag)
            *(int *)value = *flag;
        else
            r = CUDA_ERROR_INVALID_VALUE;
    }
    if (is64)
        memcpy(value, &v, sizeof v);
    sim_unlock();
    return r;
}

/* One descriptor per device; the last one naming a device wins, as with cuMemSetAccess. */
CUresult sim_pool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (count && !map)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_mempool *p = pool_live(pool);
    uint32_t readers = p ? p->readers : 0, writers = p ? p->writers : 0;
    if (!p)
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
        const CUmemAccessDesc *d = &map[i];
        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (unsigned)d->flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
            d->flags == (CUmemAccess_flags)2 /* write without read: no such access */) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (sim_device_check(d->location.id) != CUDA_SUCCESS) {
            r = CUDA_ERROR_INVALID_DEVICE;
        } else if (d->location.id == p->device) {
            /* the pool's own device keeps read-write: asking for less is an error */
            if (d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                r = CUDA_ERROR_INVALID_VALUE;
        } else {
            uint32_t bit = 1u << d->location.id;
            readers = d->flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? readers & ~bit : readers | bit;
            writers = d->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? writers | bit
                                                                       : writers & ~bit;
        }
    }
    if (r == CUDA_SUCCESS) { /* all or nothing */
        p->readers = readers;
        p->writers = writers;
    }
    sim_unlock();
    return r;
}

CUresult sim_pool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_device_check(loc->id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    struct sim_mempool *p = pool_live(pool);
    if (!p) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        uint32_t bit = 1u << loc->id;
        *flags = sim_pool_reaches(p, loc->id) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : (p->readers & bit)          ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    }
    sim_unlock();
    return r;
}
