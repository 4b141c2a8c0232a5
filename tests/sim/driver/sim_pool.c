/* Simulated CUDA driver: each device's default memory pool, the one cuMemAllocAsync serves.
 *
 * The pool is a fixed object per device (no cuMemPoolCreate). Its usage attributes come from
 * the live cuMemAllocAsync allocations of the device (sim_mem.c keeps the totals): used is
 * their requested bytes, reserved their 2 MiB pages, since the simulator holds nothing back
 * after cuMemFreeAsync. The release threshold and the three reuse switches are stored and
 * read back; the simulator's behaviour does not depend on them. */
#include "sim.h"

#include <string.h>

/* A pool handle is the address of its device's entry in this table. */
static char pool_tag[SIM_MAX_DEVICES];

static struct sim_device *pool_device(CUmemoryPool pool)
{
    uintptr_t p = (uintptr_t)pool, t = (uintptr_t)pool_tag;
    if (!pool || p < t || p - t >= (uintptr_t)sim_g.ndev)
        return NULL;
    return &sim_g.dev[p - t];
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
        *pool = (CUmemoryPool)(void *)&pool_tag[dev];
    return r;
}

static int *reuse_flag(struct sim_device *d, CUmemPool_attribute attr)
{
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        return &d->pool_reuse[0];
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        return &d->pool_reuse[1];
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return &d->pool_reuse[2];
    default:
        return NULL;
    }
}

CUresult sim_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_device *d = pool_device(pool);
    if (!d || !value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    int *flag = reuse_flag(d, attr);
    uint64_t v = 0;
    if (flag) {
        *flag = *(int *)value != 0;
    } else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        memcpy(&v, value, sizeof v);
        d->pool_threshold = v;
    } else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) {
        /* only a reset to 0 is allowed: the mark drops to what is in use now */
        memcpy(&v, value, sizeof v);
        if (v != 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            d->pool_reserved_high = d->pool_reserved;
        else
            d->pool_used_high = d->pool_used;
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
    struct sim_device *d = pool_device(pool);
    if (!d || !value)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    int *flag = reuse_flag(d, attr);
    uint64_t v = 0;
    bool is64 = true;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = d->pool_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = d->pool_reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = d->pool_reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = d->pool_used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = d->pool_used_high; break;
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
