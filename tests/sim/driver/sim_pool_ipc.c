/* Simulated CUDA driver: memory pools shared between processes (cuMemPoolExportToShareableHandle,
 * cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer, cuMemPoolImportPointer).
 *
 * A pool created with the POSIX file descriptor handle type exports as a descriptor of a small
 * memfd naming the exporting process, the pool and the descriptor of the exporter's device
 * memory. Importing it opens that device memory through /proc (same user needed) and makes a
 * pool of the importer's: it serves no allocations (cuDeviceSetMemPool and
 * cuMemAllocFromPoolAsync refuse it), starts with access from its own device only, and counts
 * the allocations imported into this process. An exported pointer (64 opaque bytes) names the
 * pool and where the allocation lies in the exporter's device memory; importing it into the
 * pool it came from maps those bytes at a new address of the importer's, freed there with
 * cuMemFree or cuMemFreeAsync (which unmap it). Each import is its own mapping. As the driver
 * asks, the importer frees before the exporter does: the exporter's free gives the memory back
 * under the importer's mapping (it then reads zeros). */
#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char pool_magic[8] = {'T', 'S', 'I', 'M', 'P', 'O', 'O', 'L'};
static const char ptr_magic[8] = {'T', 'S', 'I', 'M', 'P', 'P', 'T', 'R'};

/* what a pool's descriptor holds */
struct pool_wire {
    char magic[8];
    int32_t pid;
    int32_t devfd; /* the exporter's descriptor of its device memory */
    int32_t device;
    int32_t pad;
    uint64_t serial;
};

/* what CUmemPoolPtrExportData holds */
struct ptr_wire {
    char magic[8];
    int32_t pid;
    int32_t pad;
    uint64_t pool_serial;
    uint64_t offset; /* in the exporter's device memory */
    uint64_t size;
    uint64_t pages;
};
_Static_assert(sizeof(struct ptr_wire) <= sizeof(CUmemPoolPtrExportData), "export data layout");

CUresult sim_pool_export(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType type,
                         unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_mempool *p = sim_pool_lookup(pool);
    struct pool_wire w;
    memset(&w, 0, sizeof w);
    if (!p || p->destroyed || p->imported || !(p->htypes & type)) {
        r = CUDA_ERROR_INVALID_VALUE; /* the default pool and pools made without it included */
    } else {
        p->exported = true;
        memcpy(w.magic, pool_magic, sizeof w.magic);
        w.pid = (int32_t)getpid();
        w.devfd = sim_g.dev[p->device].memfd;
        w.device = p->device;
        w.serial = p->serial;
    }
    sim_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    int fd = memfd_create("tessera-sim-pool", MFD_CLOEXEC);
    if (fd < 0)
        return errno == EMFILE ? CUDA_ERROR_TOO_MANY_PEERS : CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, &w, sizeof w, 0) != (ssize_t)sizeof w) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

CUresult sim_pool_import(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType type,
                         unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = (int)(intptr_t)handle;
    char path[48], link[96];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    struct pool_wire w;
    if (n <= 0 || (link[n] = '\0', !strstr(link, "tessera-sim-pool")) ||
        pread(fd, &w, sizeof w, 0) != (ssize_t)sizeof w ||
        memcmp(w.magic, pool_magic, sizeof w.magic) != 0)
        return CUDA_ERROR_INVALID_VALUE; /* not a pool's descriptor */
    if (sim_device_check(w.device) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE; /* the exporter's device is not one of ours */
    int devfd;
    r = sim_open_foreign_fd(w.pid, w.devfd, "tessera-sim-dev", &devfd);
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_mempool *p = sim_pool_new_locked(w.device);
    if (p) {
        p->imported = true;
        p->exp_pid = w.pid;
        p->exp_serial = w.serial;
        p->devfd = devfd;
        *pool_out = (CUmemoryPool)(void *)p;
    }
    sim_unlock();
    if (!p) {
        close(devfd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult sim_pool_export_pointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_alloc *a = sim_mem_alloc_at(ptr);
    const struct sim_mempool *p = a && a->kind == SIM_ALLOC_ASYNC ? a->mpool : NULL;
    /* an allocation's base, from a pool exported already (a GPU refuses a pointer of a pool
     * that could be exported but was not yet) */
    if (!p || !(p->htypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) || !p->exported ||
        a->free_pending) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct ptr_wire w;
        memset(&w, 0, sizeof w);
        memcpy(w.magic, ptr_magic, sizeof w.magic);
        w.pid = (int32_t)getpid();
        w.pool_serial = p->serial;
        w.offset = a->base - sim_g.dev[a->device].base;
        w.size = a->size;
        w.pages = a->pages;
        memset(out, 0, sizeof *out);
        memcpy(out, &w, sizeof w);
    }
    sim_unlock();
    return r;
}

CUresult sim_pool_import_pointer(CUdeviceptr *out, CUmemoryPool pool,
                                 const CUmemPoolPtrExportData *data)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_wire w;
    memcpy(&w, data, sizeof w);
    sim_lock();
    struct sim_mempool *p = sim_pool_lookup(pool);
    struct sim_ctx *cur = NULL;
    /* the data must come from the pool this one was imported from */
    if (!p || p->destroyed || !p->imported || memcmp(w.magic, ptr_magic, sizeof w.magic) != 0 ||
        w.pid != p->exp_pid || w.pool_serial != p->exp_serial || w.pages == 0 ||
        w.size > w.pages * SIM_PAGE || w.pages > sim_g.dev[p->device].total_pages)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = sim_current_ctx(&cur);
    struct sim_alloc *a = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_mem_map_foreign(cur, p->device, p->devfd, w.offset, w.size, w.pages,
                                SIM_ALLOC_POOL_IMPORT, &a);
    if (r == CUDA_SUCCESS) {
        a->mpool = p;
        sim_pool_charge(a, 1);
        *out = (CUdeviceptr)a->base;
    }
    sim_unlock();
    return r;
}
