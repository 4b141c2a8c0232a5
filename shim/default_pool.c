/* Each device's default memory pool, learnt from the driver on first use. Below the hooks and
 * the pointer queries, which both ask for it (cuMemAllocAsync's pool, MEMPOOL_HANDLE), so that
 * neither calls into the other. */
#include "shim/shim.h"

#define MAX_DEVICES 64

static CUmemoryPool default_pool[MAX_DEVICES]; /* NULL: not learnt yet */

CUmemoryPool ts_pool_default(int dev)
{
    if (dev < 0 || dev >= MAX_DEVICES || !ts_real.cuDeviceGetDefaultMemPool)
        return NULL;
    CUmemoryPool p = __atomic_load_n(&default_pool[dev], __ATOMIC_ACQUIRE);
    if (!p && ts_real.cuDeviceGetDefaultMemPool(&p, (CUdevice)dev) == CUDA_SUCCESS)
        __atomic_store_n(&default_pool[dev], p, __ATOMIC_RELEASE);
    return p;
}
