/* Simulated CUDA driver: peer access between contexts (cuCtxEnablePeerAccess /
 * cuCtxDisablePeerAccess) and the question a test asks of it, whether a kernel of one
 * device may touch a range (tessera_sim_can_access).
 *
 * A grant is directional and per context pair: the current context `from` may reach the
 * cuMemAlloc-class memory of the device of context `to`. Grants die with either context
 * (cuCtxDestroy, last primary release, primary reset: all go through sim_ctx_teardown).
 * Peer access never opens cuMemMap memory: that memory is reachable from exactly the
 * devices cuMemSetAccess named (sim_mapping.writers), as on a GPU. Nor pool memory
 * (cuMemAllocAsync, imported pool pointers): it follows its pool's cuMemPoolSetAccess; a graph
 * allocation is reachable from its own device. */
#include "sim.h"

#include <stdlib.h>

struct sim_peer_grant {
    struct sim_ctx *from; /* the context that called cuCtxEnablePeerAccess */
    struct sim_ctx *to;   /* its peerContext; never on from's device */
};

/* Every live grant, unordered, no duplicates. Guarded by sim_g.mu. Contexts are never
 * freed, so the pointers stay valid; teardown removes the grants of a dying context. */
static struct sim_peer_grant *grants;
static size_t ngrants, cap_grants;

static ptrdiff_t grant_find(const struct sim_ctx *from, const struct sim_ctx *to)
{
    for (size_t i = 0; i < ngrants; i++)
        if (grants[i].from == from && grants[i].to == to)
            return (ptrdiff_t)i;
    return -1;
}

static void grant_remove(size_t i)
{
    grants[i] = grants[--ngrants]; /* order does not matter */
}

/* lock held: the checks both entry points make, in the driver's order: a current context,
 * flags 0, a live peer context (a destroyed or unretained one is as invalid as garbage:
 * CUDA_ERROR_INVALID_CONTEXT, not ..._CONTEXT_IS_DESTROYED) */
static CUresult peer_pair(CUcontext peer, unsigned flags, struct sim_ctx **from,
                          struct sim_ctx **to)
{
    CUresult r = sim_current_ctx(from);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_ctx_from_handle(peer, to) == CUDA_SUCCESS ? CUDA_SUCCESS
                                                         : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult sim_peer_enable(CUcontext peer, unsigned flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_ctx *from, *to;
    sim_lock();
    r = peer_pair(peer, flags, &from, &to);
    if (r == CUDA_SUCCESS && from->device == to->device)
        r = CUDA_ERROR_INVALID_DEVICE;
    if (r == CUDA_SUCCESS && grant_find(from, to) >= 0)
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (r == CUDA_SUCCESS) {
        struct sim_peer_grant *g = sim_grow(grants, &cap_grants, ngrants + 1, sizeof *g);
        if (g) {
            grants = g;
            grants[ngrants++] = (struct sim_peer_grant){from, to};
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    sim_unlock();
    return r;
}

CUresult sim_peer_disable(CUcontext peer)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_ctx *from, *to;
    sim_lock();
    r = peer_pair(peer, 0, &from, &to);
    ptrdiff_t i = r == CUDA_SUCCESS ? grant_find(from, to) : -1;
    if (r == CUDA_SUCCESS && i < 0)
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    if (r == CUDA_SUCCESS)
        grant_remove((size_t)i);
    sim_unlock();
    return r;
}

void sim_peer_drop_ctx(struct sim_ctx *c)
{
    for (size_t i = 0; i < ngrants;) {
        if (grants[i].from == c || grants[i].to == c)
            grant_remove(i); /* the last grant moved to i: look at i again */
        else
            i++;
    }
}

/* lock held: some context of device `from` reaches the cuMemAlloc memory of device `to` */
static bool peer_reaches(int from, int to)
{
    for (size_t i = 0; i < ngrants; i++)
        if (grants[i].from->device == from && grants[i].to->device == to)
            return true;
    return false;
}

/* lock held: 1 when every byte of [p, end) lies in cuMemMap ranges granting `device`
 * read-write, 0 when all are mapped but one does not, -1 on a hole. */
static int vmm_reaches(int device, uintptr_t p, uintptr_t end)
{
    int ok = 1;
    for (uintptr_t cur = p; cur < end;) {
        struct sim_resv *rv = sim_vmm_find_resv(cur);
        struct sim_mapping *m = rv ? sim_vmm_find_map(rv, cur) : NULL;
        if (!m)
            return -1;
        if (!(m->writers & (1u << device)))
            ok = 0; /* keep walking: a hole further on is still bad arguments */
        cur = m->va + m->size;
    }
    return ok;
}

int sim_can_access(int device, uint64_t ptr, uint64_t size)
{
    if (sim_configure() != CUDA_SUCCESS || device < 0 || device >= sim_g.ndev || size == 0 ||
        size > UINT64_MAX - ptr)
        return -1;
    uintptr_t p = (uintptr_t)ptr, end = p + (uintptr_t)size;
    int res = -1;
    sim_lock();
    struct sim_ptrinfo pi;
    sim_ptr_lookup(p, &pi);
    if (pi.kind == SIM_PTR_DEVICE) {
        const struct sim_alloc *a = pi.alloc;
        bool pooled = a->kind == SIM_ALLOC_ASYNC || a->kind == SIM_ALLOC_POOL_IMPORT;
        if (end > pi.base + pi.size)
            res = -1;
        else if (pooled && a->mpool) /* a pool's memory follows the pool's access, not peers' */
            res = sim_pool_reaches(a->mpool, device);
        else if (a->kind == SIM_ALLOC_GRAPH) /* graph memory: its own device */
            res = device == pi.device;
        else
            res = device == pi.device || peer_reaches(device, pi.device);
    } else if (pi.resv) { /* a reservation: its cuMemMap ranges count whatever their access */
        res = vmm_reaches(device, p, end);
    }
    sim_unlock();
    return res;
}
