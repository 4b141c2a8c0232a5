/* Simulated CUDA driver: virtual memory management (cuMemCreate / cuMemMap / ...).
 *
 * Done with real mappings: a cuMemCreate handle is a memfd of its size (its pages count
 * against the device like cuMemAlloc); cuMemAddressReserve reserves PROT_NONE anonymous
 * address space; cuMemMap maps the memfd MAP_SHARED | MAP_FIXED there but keeps it
 * PROT_NONE until cuMemSetAccess grants access (a missing cuMemSetAccess faults, as on a
 * GPU); two ranges mapping one handle share their bytes; cuMemUnmap puts anonymous
 * PROT_NONE memory back; the memory of a handle lives until it is released and unmapped.
 * cuMemSetAccess and cuMemUnmap take whole cuMemMap ranges (one or several adjacent ones),
 * as the real driver does. A handle created with requestedHandleTypes POSIX_FILE_DESCRIPTOR
 * exports as a descriptor of its memfd; another process imports that descriptor (received with
 * pidfd_getfd or SCM_RIGHTS) as a handle of its own onto the same memory, which lives until
 * every process has released and unmapped it. cuMemRetainAllocationHandle takes one more
 * reference, as on a GPU; it refuses memory that cuMemMap did not map. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct sim_resv *resvs;
static struct sim_vhandle *handles;

struct sim_resv *sim_vmm_find_resv(uintptr_t p)
{
    for (struct sim_resv *r = resvs; r; r = r->next)
        if (p >= r->base && p - r->base < r->size)
            return r;
    return NULL;
}

/* index of the last piece with va <= p, or -1 */
static ptrdiff_t map_floor(const struct sim_resv *r, uintptr_t p)
{
    size_t lo = 0, hi = r->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->maps[mid]->va <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

struct sim_mapping *sim_vmm_find_map(struct sim_resv *r, uintptr_t p)
{
    ptrdiff_t i = map_floor(r, p);
    if (i >= 0 && p - r->maps[i]->va < r->maps[i]->size)
        return r->maps[i];
    return NULL;
}

static struct sim_vhandle *handle_lookup(CUmemGenericAllocationHandle h)
{
    for (struct sim_vhandle *v = handles; v; v = v->next)
        if ((CUmemGenericAllocationHandle)(uintptr_t)v == h && v->refs > 0)
            return v;
    return NULL;
}

static void handle_destroy(struct sim_vhandle *v)
{
    for (struct sim_vhandle **pp = &handles; *pp; pp = &(*pp)->next) {
        if (*pp == v) {
            *pp = v->next;
            break;
        }
    }
    close(v->memfd);
    if (!v->imported)
        sim_device_account(&sim_g.dev[v->device], -(long)v->pages, 0, -1);
    free(v);
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->location.id < 0 || prop->location.id >= sim_g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_granularity(size_t *g, const CUmemAllocationProp *prop, int option)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!g || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    r = check_prop(prop);
    if (r == CUDA_SUCCESS)
        *g = SIM_PAGE;
    return r;
}

CUresult sim_vmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                         unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || !size || size % SIM_PAGE || flags || addr % SIM_PAGE || (align & (align - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    if (align < SIM_PAGE)
        align = SIM_PAGE;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    uintptr_t got = 0;
    if (addr && addr % align == 0) { /* the hint, when that address range is free */
        void *m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE,
                       -1, 0);
        if (m == (void *)(uintptr_t)addr)
            got = (uintptr_t)m;
        else if (m != MAP_FAILED)
            munmap(m, size);
    }
    if (!got) {
        size_t span = size + align;
        void *m = mmap(NULL, span, PROT_NONE, mflags, -1, 0);
        if (m == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        got = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
        if (got > (uintptr_t)m)
            munmap(m, got - (uintptr_t)m);
        uintptr_t end = (uintptr_t)m + span;
        if (end > got + size)
            munmap((void *)(got + size), end - (got + size));
    }
    struct sim_resv *rv = calloc(1, sizeof *rv);
    if (!rv) {
        munmap((void *)got, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    rv->base = got;
    rv->size = size;
    sim_lock();
    rv->next = resvs;
    resvs = rv;
    sim_unlock();
    *ptr = (CUdeviceptr)got;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_free(CUdeviceptr ptr, size_t size)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_resv **pp = &resvs;
    while (*pp && ((*pp)->base != (uintptr_t)ptr || (*pp)->size != size))
        pp = &(*pp)->next;
    /* stricter than documented: ranges still mapped are refused instead of leaked */
    if (!*pp || (*pp)->nmaps) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct sim_resv *rv = *pp;
        *pp = rv->next;
        munmap((void *)rv->base, rv->size);
        free(rv->maps);
        free(rv);
    }
    sim_unlock();
    return r;
}

CUresult sim_vmm_create(CUmemGenericAllocationHandle *h, size_t size,
                        const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!h || !prop || flags || !size || size % SIM_PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_device *d = &sim_g.dev[prop->location.id];
    size_t pages = size / SIM_PAGE;
    sim_lock();
    if (sim_fault_alloc() || !sim_device_reserve(d, pages)) {
        d->ctr.failed_allocs++;
        sim_unlock();
        sim_log("device %d: cuMemCreate(%zu): out of memory", d->ordinal, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct sim_vhandle *v = calloc(1, sizeof *v);
    /* the name carries the device, for a process that imports the memory */
    char name[32];
    snprintf(name, sizeof name, "tessera-sim-vmm.%d", d->ordinal);
    int fd = v ? memfd_create(name, MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        sim_log("cuMemCreate: memfd: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        free(v);
        sim_device_unreserve(d, pages);
        sim_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->memfd = fd;
    v->size = size;
    v->pages = pages;
    v->device = d->ordinal;
    v->serial = ++sim_g.serial;
    v->htypes = prop->requestedHandleTypes;
    v->refs = 1;
    v->next = handles;
    handles = v;
    d->ctr.create_calls++;
    sim_device_account(d, (long)pages, 0, 1);
    sim_unlock();
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_release(CUmemGenericAllocationHandle h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_vhandle *v = handle_lookup(h);
    if (!v) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        v->refs--;
        sim_g.dev[v->device].ctr.release_calls++;
        if (v->refs == 0 && v->map_count == 0) /* mapped: the memory lives until the last unmap */
            handle_destroy(v);
    }
    sim_unlock();
    return r;
}

CUresult sim_vmm_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                     unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (flags || !size || ptr % SIM_PAGE || size % SIM_PAGE || offset % SIM_PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)ptr;
    sim_lock();
    struct sim_vhandle *v = handle_lookup(h);
    struct sim_resv *rv = sim_vmm_find_resv(p);
    ptrdiff_t i = rv ? map_floor(rv, p + size - 1) : -1;
    struct sim_mapping *m = NULL;
    if (!v || offset > v->size || size > v->size - offset || !rv ||
        size > rv->base + rv->size - p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (i >= 0 && rv->maps[i]->va + rv->maps[i]->size > p) {
        r = CUDA_ERROR_NOT_SUPPORTED; /* already mapped: what the real driver answers */
        goto out;
    }
    sim_g.map_attempts++;
    if (sim_g.fail_map_after && sim_g.map_attempts == sim_g.fail_map_after) {
        sim_log("TESSERA_SIM_FAIL_MAP_AFTER: cuMemMap #%llu fails",
                (unsigned long long)sim_g.map_attempts);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    struct sim_mapping **nm = sim_grow(rv->maps, &rv->cap_maps, rv->nmaps + 1, sizeof *nm);
    if (!nm || !(m = calloc(1, sizeof *m))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    rv->maps = nm;
    if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, v->memfd, (off_t)offset) ==
        MAP_FAILED) {
        sim_log("cuMemMap: mmap: %s", strerror(errno));
        mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
             -1, 0);
        free(m);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->va = p;
    m->size = size;
    m->h = v;
    m->offset = offset;
    m->prot = PROT_NONE; /* no access until cuMemSetAccess */
    size_t at = (size_t)(i + 1);
    memmove(&rv->maps[at + 1], &rv->maps[at], (rv->nmaps - at) * sizeof *nm);
    rv->maps[at] = m;
    rv->nmaps++;
    v->map_count++;
    sim_g.dev[v->device].ctr.map_calls++;
out:
    sim_unlock();
    return r;
}

CUresult sim_vmm_unmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!size || ptr % SIM_PAGE || size % SIM_PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    uintptr_t p = (uintptr_t)ptr, end = p + size;
    sim_lock();
    /* cuMemUnmap is synchronous: queued work that may touch the range finishes first */
    sim_wait_ctx_idle(NULL);
    struct sim_resv *rv = sim_vmm_find_resv(p);
    ptrdiff_t first = rv ? map_floor(rv, p) : -1, last = first;
    if (first < 0 || rv->maps[first]->va != p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (uintptr_t cur = p;;) {
        if ((size_t)last >= rv->nmaps || rv->maps[last]->va != cur) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        cur += rv->maps[last]->size;
        if (cur == end)
            break;
        if (cur > end) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        last++;
    }
    if (mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
             -1, 0) == MAP_FAILED)
        sim_log("cuMemUnmap: mmap: %s", strerror(errno));
    for (ptrdiff_t j = first; j <= last; j++) {
        struct sim_vhandle *v = rv->maps[j]->h;
        free(rv->maps[j]);
        v->map_count--;
        sim_g.dev[v->device].ctr.unmap_calls++;
        if (v->refs == 0 && v->map_count == 0)
            handle_destroy(v); /* released earlier: its memory goes with the last mapping */
    }
    memmove(&rv->maps[first], &rv->maps[last + 1], (rv->nmaps - (size_t)last - 1) * sizeof *rv->maps);
    rv->nmaps -= (size_t)(last - first + 1);
out:
    sim_unlock();
    return r;
}

CUresult sim_vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                            size_t count)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!desc || !count || !size || ptr % SIM_PAGE || size % SIM_PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    /* Access is tracked per device: each descriptor sets (or, with PROT_NONE, takes away)
     * the rights of its device, in array order, and leaves other devices as they were. */
    uint32_t set = 0, readers = 0, writers = 0; /* devices named, and what they get */
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0 || desc[i].location.id >= sim_g.ndev)
            return CUDA_ERROR_INVALID_DEVICE;
        uint32_t bit = 1u << desc[i].location.id;
        set |= bit;
        readers &= ~bit;
        writers &= ~bit;
        switch (desc[i].flags) {
        case CU_MEM_ACCESS_FLAGS_PROT_NONE: break;
        case CU_MEM_ACCESS_FLAGS_PROT_READ: readers |= bit; break;
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: readers |= bit; writers |= bit; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    uintptr_t p = (uintptr_t)ptr, end = p + size;
    sim_lock();
    struct sim_resv *rv = sim_vmm_find_resv(p);
    if (!rv || size > rv->base + rv->size - p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* whole mappings only, back to back (the real driver refuses part of a mapping) */
    ptrdiff_t first = map_floor(rv, p);
    if (first < 0 || rv->maps[first]->va != p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (ptrdiff_t j = first; ; j++) {
        uintptr_t cur = j == first ? p : rv->maps[j - 1]->va + rv->maps[j - 1]->size;
        if ((size_t)j >= rv->nmaps || rv->maps[j]->va != cur ||
            rv->maps[j]->va + rv->maps[j]->size > end) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        if (rv->maps[j]->va + rv->maps[j]->size == end)
            break;
    }
    /* The host plays every device: each mapping gets the union of its devices' rights. A
     * mapping's record changes only after its mprotect succeeded, so prot always tells the
     * truth, even when a later mapping of the range fails. */
    for (ptrdiff_t j = first; (size_t)j < rv->nmaps && rv->maps[j]->va < end; j++) {
        struct sim_mapping *m = rv->maps[j];
        uint32_t rd = (m->readers & ~set) | readers, wr = (m->writers & ~set) | writers;
        int prot = (rd ? PROT_READ : 0) | (wr ? PROT_WRITE : 0);
        if (prot != m->prot && mprotect((void *)m->va, m->size, prot) != 0) {
            sim_log("cuMemSetAccess: mprotect: %s", strerror(errno));
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        m->readers = rd;
        m->writers = wr;
        m->prot = prot;
    }
out:
    sim_unlock();
    return r;
}

/* ---- sharing a handle with another process ------------------------------------------ */

CUresult sim_vmm_export(void *out, CUmemGenericAllocationHandle h, int type,
                        unsigned long long flags)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_vhandle *v = handle_lookup(h);
    if (!v) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (!(v->htypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        r = CUDA_ERROR_NOT_PERMITTED; /* not requested at cuMemCreate */
    } else {
        int fd = fcntl(v->memfd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            r = errno == EMFILE ? CUDA_ERROR_TOO_MANY_PEERS : CUDA_ERROR_OUT_OF_MEMORY;
        else
            *(int *)out = fd;
    }
    sim_unlock();
    return r;
}

/* the device a simulated handle's memfd belongs to, from its name; -1 when fd is none of ours */
static int memfd_device(int fd)
{
    char path[48], link[96];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return -1;
    link[n] = '\0';
    int dev = -1;
    if (sscanf(link, "/memfd:tessera-sim-vmm.%d", &dev) != 1 || dev < 0)
        return -1;
    return dev;
}

CUresult sim_vmm_import(CUmemGenericAllocationHandle *h, void *os_handle, int type)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int src = (int)(intptr_t)os_handle;
    int dev = memfd_device(src);
    struct stat st;
    if (dev < 0 || dev >= sim_g.ndev || fstat(src, &st) != 0 || st.st_size <= 0 ||
        (size_t)st.st_size % SIM_PAGE)
        return CUDA_ERROR_INVALID_HANDLE;
    struct sim_vhandle *v = calloc(1, sizeof *v);
    int fd = v ? fcntl(src, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_lock();
    v->memfd = fd;
    v->size = (size_t)st.st_size;
    v->pages = v->size / SIM_PAGE;
    v->device = dev;
    v->serial = ++sim_g.serial;
    v->htypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    v->refs = 1;
    v->imported = true;
    v->next = handles;
    handles = v;
    sim_unlock();
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

CUresult sim_vmm_retain(CUmemGenericAllocationHandle *h, void *addr)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_resv *rv = sim_vmm_find_resv((uintptr_t)addr);
    struct sim_mapping *m = rv ? sim_vmm_find_map(rv, (uintptr_t)addr) : NULL;
    if (!m) {
        r = CUDA_ERROR_INVALID_VALUE; /* cuMemAlloc memory, host memory, nothing mapped */
    } else {
        m->h->refs++;
        *h = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
    }
    sim_unlock();
    return r;
}
