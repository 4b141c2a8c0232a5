/* CUDA IPC of memory tessera hands out, under every policy.
 *
 * The driver's legacy handle names a whole driver allocation, and memory mapped with the
 * virtual-memory API has none at all; a tessera block is a piece of one or the other. So a handle
 * for a tessera block is tessera's own (the 64 bytes of CUipcMemHandle, struct ipc_wire), and
 * it names a *manifest*: a small memfd the exporter fills with what another process needs to map
 * the block's bytes:
 *   - a block of a plain segment (cuMemAlloc): the segment's legacy handle and the block's offset
 *     in it; the importer opens the legacy handle with the driver and adds the offset;
 *   - a block of an expandable segment or a stitched range: the physical handles mapped over it,
 *     each exported once as a POSIX file descriptor (tessera creates them exportable); the
 *     importer takes each descriptor (pidfd_getfd), imports it, maps the handles in order into
 *     an address range of its own and grants its device access. A handle maps only whole, so the
 *     block starts at an offset into that range.
 * Either way the importer gets a pointer to the block's first byte, with the whole block behind
 * it (and, as with PyTorch's own IPC, the rest of the first and last handle or of the segment).
 *
 * Lifetime. The manifest also counts, per importing process, how many opens it holds. A block the
 * exporter frees while a process still has it open is *held*: the program sees a successful free,
 * but the block stays allocated in the core until every importer has closed it or died (checked
 * by pid and start time), so nothing new is placed in bytes another process still uses. Held
 * blocks are looked at again at the next allocations and frees.
 *
 * Identity. The handle carries the exporter's pid, its start time (PID reuse), a random nonce the
 * manifest repeats, and the manifest's descriptor number. The importer pins the exporter with
 * pidfd_open, checks the start time, then takes the descriptor: a handle whose process is gone,
 * or whose pid now names another process, fails with an error and maps nothing.
 *
 * A process not under tessera that opens such a handle gives the driver 64 bytes it never made:
 * it refuses them (docs/DESIGN.md, "IPC"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim/shim.h"

#define IPC_WIRE_MAGIC "TSIPCv1"    /* 8 bytes with its NUL */
#define IPC_MANIFEST_MAGIC "TSIPCMF" /* 8 bytes with its NUL */
#define IPC_IMPORTERS 16              /* importing processes counted per export */
#define IPC_MAX_PIECES (1u << 20)     /* a manifest claiming more is refused */
#define IPC_LIVENESS_NS 50000000ull   /* held blocks: importer processes checked at most 20x/s */

enum { IPC_PLAIN = 1, IPC_VM = 2 };

/* The handle's 64 bytes. */
typedef struct ipc_wire {
    char magic[8];
    int32_t pid;      /* the exporter */
    int32_t mfd;      /* the manifest's descriptor in the exporter */
    uint64_t start;   /* the exporter's start time (/proc/PID/stat), against PID reuse */
    uint64_t nonce;   /* repeated in the manifest */
    uint64_t size;    /* the block's size (for a reader of the handle; the manifest decides) */
    uint64_t serial;  /* the allocation's number in its allocator */
    uint64_t spare[2];
} ipc_wire;
_Static_assert(sizeof(ipc_wire) == sizeof(CUipcMemHandle), "IPC handle layout");

/* One importing process. pid is claimed with a compare-and-swap from 0; refs counts its opens. */
typedef struct ipc_importer {
    int32_t pid;
    uint32_t refs;
    uint64_t start;
} ipc_importer;

typedef struct ipc_piece {
    int32_t fd; /* the exporter's descriptor of the handle */
    uint32_t pad;
    uint64_t size;
} ipc_piece;

/* The manifest, shared (MAP_SHARED) between the exporter and its importers. Written once by the
 * exporter before the handle exists, except the fields marked shared. */
typedef struct ipc_manifest {
    char magic[8];
    uint32_t version;
    uint32_t kind;     /* IPC_PLAIN or IPC_VM */
    uint64_t nonce;
    uint64_t size;     /* the block's bytes */
    uint64_t offset;   /* its first byte, from the start of what the importer maps */
    uint64_t map_size; /* IPC_VM: the sum of the pieces */
    int32_t device;
    uint32_t npieces;
    uint32_t released; /* shared: the owner freed the block; no new opens */
    uint32_t overflow; /* shared: more importers than slots; held until the exporter exits */
    ipc_importer importers[IPC_IMPORTERS]; /* shared */
    CUipcMemHandle legacy;                 /* IPC_PLAIN: the segment's driver handle */
    ipc_piece pieces[];                    /* IPC_VM */
} ipc_manifest;

/* Exporter side: one per exported live block (or held block). */
typedef struct ipc_export {
    uintptr_t addr;
    uint64_t serial;
    ts_allocator *a;
    int mfd;
    ipc_manifest *m;
    size_t msize;
    bool held; /* freed by the program, waiting for its importers */
    uint64_t checked_ns;
    CUipcMemHandle handle;
} ipc_export;

/* Importer side: one per (exporter, block, context) opened. */
typedef struct ipc_import {
    int32_t pid;
    uint64_t start, nonce;
    CUcontext ctx;
    CUdeviceptr ptr; /* what the program got */
    int refs;
    uint32_t kind;
    CUdeviceptr base; /* IPC_PLAIN: the driver's mapping; IPC_VM: our range */
    size_t map_size;
    ipc_manifest *m;
    size_t msize;
    int slot;
} ipc_import;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_export *exports;
static size_t nexports, cap_exports;
static ipc_import *imports;
static size_t nimports, cap_imports;
static unsigned imported; /* atomic: nimports, for the close path's quick test */

unsigned ts_ipc_exported; /* atomic: nexports, for the free path's quick test */
unsigned ts_ipc_held;     /* atomic: held exports, for the allocation path's quick test */

/* Room for one more entry in a table of n (doubling; export and import time only). */
static bool table_room(void **table, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t grown = *cap ? 2 * *cap : 16;
    void *t = realloc(*table, grown * size);
    if (!t)
        return false;
    *table = t;
    *cap = grown;
    return true;
}

/* --- processes ---------------------------------------------------------------------------------- */

/* The start time of pid (field 22 of /proc/PID/stat, after the command's closing parenthesis). */
static bool proc_start(pid_t pid, uint64_t *out)
{
    char path[40], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return false;
    p++;
    for (int field = 3; field < 22 && p; field++) /* p stands before field `field` */
        p = strchr(p + 1, ' ');
    if (!p)
        return false;
    char *end;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (end == p + 1)
        return false;
    *out = v;
    return true;
}

static bool proc_alive(int32_t pid, uint64_t start)
{
    uint64_t s;
    return pid > 0 && proc_start(pid, &s) && s == start;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A copy of the exporter's descriptor fd: pidfd_getfd (the descriptor itself, as the kernel
 * allows a process that may ptrace the exporter), else reopening /proc/PID/fd/FD (enough for a
 * memfd, and allowed where Yama forbids attaching). -errno on failure. */
static int fd_take(int pidfd, int32_t pid, int32_t fd)
{
    int got = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    if (got >= 0)
        return got;
    int err = errno;
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    got = open(path, O_RDWR | O_CLOEXEC);
    return got >= 0 ? got : -err;
}

/* The driver's answer for a descriptor fd_take could not take: not permitted (another user,
 * ptrace rules), or a handle that names nothing (the exporter closed it, a forged handle). */
static CUresult fd_error(int err)
{
    return err == -EPERM || err == -EACCES ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_INVALID_HANDLE;
}

/* Yama's ptrace_scope 1 lets only a process's ancestors take its descriptors; an importer is
 * usually its child or sibling. A process that exports virtual memory lets processes of its own
 * user take them (what ptrace_scope 0 allows everywhere); other users never can. */
static void ptracer_allow(void)
{
    static bool done;
    if (__atomic_exchange_n(&done, true, __ATOMIC_ACQ_REL))
        return;
    int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);
    char c = '0';
    if (fd >= 0) {
        if (read(fd, &c, 1) != 1)
            c = '0';
        close(fd);
    }
    if (c == '1' && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0 &&
        ts_shim_config()->verbose)
        ts_log("IPC of virtual memory: Yama ptrace_scope is 1, so this process lets processes "
               "of its own user take the exported descriptors (PR_SET_PTRACER)");
}

/* --- the manifest's importer slots ---------------------------------------------------------- */

/* Some process still has the block open. check_liveness: forget slots of dead processes. */
static bool importers_active(ipc_manifest *m, bool check_liveness)
{
    if (__atomic_load_n(&m->overflow, __ATOMIC_SEQ_CST))
        return true;
    bool any = false;
    for (int i = 0; i < IPC_IMPORTERS; i++) {
        ipc_importer *s = &m->importers[i];
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_SEQ_CST);
        if (pid == 0 || __atomic_load_n(&s->refs, __ATOMIC_SEQ_CST) == 0)
            continue;
        if (check_liveness && !proc_alive(pid, __atomic_load_n(&s->start, __ATOMIC_ACQUIRE))) {
            __atomic_store_n(&s->refs, 0, __ATOMIC_SEQ_CST);
            __atomic_compare_exchange_n(&s->pid, &pid, 0, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
            continue;
        }
        any = true;
    }
    return any;
}

/* Count one open by this process; the slot index, or -1 (overflow: counted as held forever). */
static int importer_claim(ipc_manifest *m, uint64_t my_start)
{
    int32_t me = (int32_t)getpid();
    for (int i = 0; i < IPC_IMPORTERS; i++) {
        ipc_importer *s = &m->importers[i];
        int32_t expect = 0;
        if (__atomic_load_n(&s->pid, __ATOMIC_SEQ_CST) == me ||
            __atomic_compare_exchange_n(&s->pid, &expect, me, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&s->start, my_start, __ATOMIC_RELEASE);
            __atomic_add_fetch(&s->refs, 1, __ATOMIC_SEQ_CST);
            return i;
        }
    }
    __atomic_store_n(&m->overflow, 1, __ATOMIC_SEQ_CST);
    return -1;
}

static void importer_drop(ipc_manifest *m, int slot)
{
    if (slot < 0)
        return;
    ipc_importer *s = &m->importers[slot];
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_SEQ_CST) == 0) {
        int32_t me = (int32_t)getpid();
        __atomic_compare_exchange_n(&s->pid, &me, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    }
}

/* --- exporter ---------------------------------------------------------------------------------- */

static void export_destroy(ipc_export *e)
{
    if (e->m->kind == IPC_VM)
        for (uint32_t i = 0; i < e->m->npieces; i++)
            if (e->m->pieces[i].fd >= 0)
                close(e->m->pieces[i].fd);
    munmap(e->m, e->msize);
    close(e->mfd);
}

static void export_remove(size_t i)
{
    if (exports[i].held)
        __atomic_sub_fetch(&ts_ipc_held, 1, __ATOMIC_RELAXED);
    exports[i] = exports[--nexports];
    __atomic_store_n(&ts_ipc_exported, (unsigned)nexports, __ATOMIC_RELEASE);
}

static ipc_export *export_find(uintptr_t addr)
{
    for (size_t i = 0; i < nexports; i++)
        if (exports[i].addr == addr)
            return &exports[i];
    return NULL;
}

/* A new manifest for blk: a memfd of header + pieces, mapped shared. */
static CUresult manifest_create(const ts_segment_info *seg, const ts_block_info *blk,
                                const ts_backing_piece *pieces, size_t npieces, int device,
                                ipc_export *e)
{
    size_t msize = sizeof(ipc_manifest) + npieces * sizeof(ipc_piece);
    int mfd = memfd_create("tessera-ipc", MFD_CLOEXEC);
    if (mfd < 0)
        return errno == EMFILE || errno == ENFILE ? CUDA_ERROR_TOO_MANY_PEERS
                                                   : CUDA_ERROR_OUT_OF_MEMORY;
    ipc_manifest *m = MAP_FAILED;
    if (ftruncate(mfd, (off_t)msize) == 0)
        m = mmap(NULL, msize, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (m == MAP_FAILED) {
        close(mfd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(m->magic, IPC_MANIFEST_MAGIC, sizeof m->magic);
    m->version = 1;
    m->size = blk->size;
    m->device = device;
    if (getrandom(&m->nonce, sizeof m->nonce, GRND_NONBLOCK) != sizeof m->nonce)
        m->nonce = now_ns() ^ ((uint64_t)blk->addr << 7) ^ blk->serial;
    if (seg->kind == TS_SEGMENT_PLAIN) {
        m->kind = IPC_PLAIN;
        m->offset = blk->addr - seg->addr;
    } else {
        m->kind = IPC_VM;
        m->npieces = (uint32_t)npieces;
        m->offset = blk->addr - pieces[0].addr;
        for (size_t i = 0; i < npieces; i++) {
            m->pieces[i].fd = -1;
            m->pieces[i].size = pieces[i].size;
            m->map_size += pieces[i].size;
        }
    }
    e->mfd = mfd;
    e->m = m;
    e->msize = msize;
    return CUDA_SUCCESS;
}

/* Fill the manifest's driver part: the segment's legacy handle, or each handle's descriptor. */
static CUresult manifest_export(ipc_export *e, const ts_segment_info *seg,
                                const ts_backing_piece *pieces)
{
    ipc_manifest *m = e->m;
    if (m->kind == IPC_PLAIN)
        return ts_real.cuIpcGetMemHandle(&m->legacy, (CUdeviceptr)seg->addr);
    if (!ts_real.cuMemExportToShareableHandle)
        return CUDA_ERROR_NOT_SUPPORTED;
    for (uint32_t i = 0; i < m->npieces; i++) {
        int fd = -1;
        CUresult r = ts_real.cuMemExportToShareableHandle(
            &fd, (CUmemGenericAllocationHandle)pieces[i].handle,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r != CUDA_SUCCESS)
            return r;
        m->pieces[i].fd = fd;
    }
    ptracer_allow();
    return CUDA_SUCCESS;
}

CUresult ts_ipc_export(CUipcMemHandle *h, ts_allocator *a, uintptr_t ptr)
{
    enum { ON_STACK = 64 };
    ts_backing_piece stack[ON_STACK], *pieces = stack;
    ts_segment_info seg;
    ts_block_info blk;
    size_t n = 0;
    if (ts_lookup_backing(a, ptr, &seg, &blk, stack, ON_STACK, &n) != TS_OK)
        return CUDA_ERROR_INVALID_VALUE; /* not a live allocation: the driver's answer too */
    if (n > ON_STACK) {
        /* a block over many handles (a large stitched range): the full list */
        if (n > IPC_MAX_PIECES || !(pieces = calloc(n, sizeof *pieces)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        size_t again = 0;
        if (ts_lookup_backing(a, ptr, &seg, &blk, pieces, n, &again) != TS_OK || again != n) {
            free(pieces);
            return CUDA_ERROR_INVALID_VALUE; /* freed meanwhile by another thread */
        }
    }
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ipc_lock);
    ipc_export *old = export_find(blk.addr);
    if (old && old->held) {
        r = CUDA_ERROR_INVALID_VALUE; /* the program freed it; only its importers hold it */
        goto out;
    }
    if (old && old->serial == blk.serial) {
        *h = old->handle; /* the same allocation exported again: the same handle */
        goto out;
    }
    if (old) { /* an earlier allocation here, freed without tessera's free path (cannot happen) */
        export_destroy(old);
        export_remove((size_t)(old - exports));
    }
    ipc_export e = {.addr = blk.addr, .serial = blk.serial, .a = a};
    r = manifest_create(&seg, &blk, pieces, n, ts_allocator_device(a), &e);
    if (r != CUDA_SUCCESS)
        goto out;
    r = manifest_export(&e, &seg, pieces);
    uint64_t start = 0;
    if (r == CUDA_SUCCESS && !proc_start(getpid(), &start))
        r = CUDA_ERROR_OPERATING_SYSTEM;
    if (r == CUDA_SUCCESS &&
        !table_room((void **)&exports, &cap_exports, nexports, sizeof *exports))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        if (e.m->kind == IPC_VM)
            ts_log_once(&ts_ipc_export,
                        "cuIpcGetMemHandle/cudaIpcGetMemHandle on %#llx: the physical memory "
                        "tessera mapped cannot be exported as a file descriptor here (error %d); "
                        "refused with CUDA_ERROR_INVALID_VALUE. Run the exporting process with "
                        "TESSERA_ALLOC_CONF=expandable_segments:False",
                        (unsigned long long)ptr, (int)r);
        export_destroy(&e);
        r = r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_TOO_MANY_PEERS
                ? r
                : CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    ipc_wire w;
    memset(&w, 0, sizeof w);
    memcpy(w.magic, IPC_WIRE_MAGIC, sizeof w.magic);
    w.pid = (int32_t)getpid();
    w.mfd = e.mfd;
    w.start = start;
    w.nonce = e.m->nonce;
    w.size = blk.size;
    w.serial = blk.serial;
    memcpy(&e.handle, &w, sizeof w);
    exports[nexports++] = e;
    __atomic_store_n(&ts_ipc_exported, (unsigned)nexports, __ATOMIC_RELEASE);
    *h = e.handle;
out:
    pthread_mutex_unlock(&ipc_lock);
    if (pieces != stack)
        free(pieces);
    return r;
}

int ts_ipc_on_free(uintptr_t ptr, size_t *requested)
{
    int rc = TS_IPC_NOT_EXPORTED;
    pthread_mutex_lock(&ipc_lock);
    ipc_export *e = export_find(ptr);
    if (e && e->held) {
        rc = TS_IPC_INVALID; /* freed twice: the block is still the importers' */
    } else if (e) {
        /* Dekker with importer_claim + its look at released: either the importer sees the
         * release and gives up, or this sees the importer and holds the block. */
        __atomic_store_n(&e->m->released, 1, __ATOMIC_SEQ_CST);
        if (importers_active(e->m, true)) {
            e->held = true;
            e->checked_ns = now_ns();
            __atomic_add_fetch(&ts_ipc_held, 1, __ATOMIC_RELAXED);
            if (requested)
                *requested = e->m->size;
            rc = TS_IPC_HELD;
        } else {
            export_destroy(e);
            export_remove((size_t)(e - exports));
        }
    }
    pthread_mutex_unlock(&ipc_lock);
    return rc;
}

void ts_ipc_reap(void)
{
    enum { BATCH = 32 };
    ts_allocator *alloc[BATCH];
    uintptr_t addr[BATCH];
    size_t n = 0;
    uint64_t now = now_ns();
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nexports && n < BATCH;) {
        ipc_export *e = &exports[i];
        if (!e->held) {
            i++;
            continue;
        }
        bool check = now - e->checked_ns >= IPC_LIVENESS_NS;
        if (check)
            e->checked_ns = now;
        if (importers_active(e->m, check)) {
            i++;
            continue;
        }
        alloc[n] = e->a;
        addr[n++] = e->addr;
        export_destroy(e);
        export_remove(i);
    }
    pthread_mutex_unlock(&ipc_lock);
    /* the program freed these long ago; their importers are gone now */
    for (size_t i = 0; i < n; i++)
        (void)ts_free(alloc[i], addr[i]);
}

void ts_ipc_forget(ts_allocator *a)
{
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nexports;) {
        if (exports[i].a == a) {
            export_destroy(&exports[i]);
            export_remove(i);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&ipc_lock);
}

/* --- importer ---------------------------------------------------------------------------------- */

bool ts_ipc_is_ours(const CUipcMemHandle *h)
{
    return memcmp(h->reserved, IPC_WIRE_MAGIC, 8) == 0;
}

static ipc_import *import_find_ptr(CUdeviceptr p)
{
    for (size_t i = 0; i < nimports; i++)
        if (imports[i].ptr == p)
            return &imports[i];
    return NULL;
}

/* Map the manifest's handles in order into a range of our own, with access for our device. */
static CUresult import_vm(const ipc_manifest *m, int pidfd, int32_t pid, CUdeviceptr *base)
{
    if (!ts_real.cuMemImportFromShareableHandle || !ts_real.cuMemAddressReserve)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUdevice dev;
    CUresult r = ts_real.cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr va = 0;
    r = ts_real.cuMemAddressReserve(&va, m->map_size, 0, 0, 0);
    if (r != CUDA_SUCCESS)
        return r;
    size_t mapped = 0;
    for (uint32_t i = 0; i < m->npieces && r == CUDA_SUCCESS; i++) {
        int fd = fd_take(pidfd, pid, m->pieces[i].fd);
        if (fd < 0) {
            ts_log_once(&import_vm, "cudaIpcOpenMemHandle: cannot take descriptor %d of process "
                                    "%d: %s%s", (int)m->pieces[i].fd, (int)pid, strerror(-fd),
                        fd == -EPERM ? " (the importer may not ptrace the exporter: same user "
                                       "needed, and kernel.yama.ptrace_scope at most 1)"
                                     : "");
            r = fd_error(fd);
            break;
        }
        CUmemGenericAllocationHandle h;
        r = ts_real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fd);
        if (r != CUDA_SUCCESS)
            break;
        r = ts_real.cuMemMap(va + mapped, m->pieces[i].size, 0, h, 0);
        ts_real.cuMemRelease(h); /* the mapping keeps the memory */
        if (r == CUDA_SUCCESS)
            mapped += m->pieces[i].size;
    }
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev},
                                CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = ts_real.cuMemSetAccess(va, m->map_size, &desc, 1);
    }
    if (r != CUDA_SUCCESS) {
        if (mapped)
            ts_real.cuMemUnmap(va, mapped);
        ts_real.cuMemAddressFree(va, m->map_size);
        return r;
    }
    *base = va;
    return CUDA_SUCCESS;
}

/* The manifest behind a handle, mapped shared; checked against the handle and its own size. */
static CUresult manifest_open(const ipc_wire *w, int pidfd, ipc_manifest **out, size_t *size_out)
{
    int mfd = fd_take(pidfd, w->pid, w->mfd);
    if (mfd < 0)
        return fd_error(mfd);
    struct stat st;
    ipc_manifest *m = MAP_FAILED;
    size_t msize = 0;
    if (fstat(mfd, &st) == 0 && st.st_size >= (off_t)sizeof(ipc_manifest) &&
        (size_t)st.st_size <= sizeof(ipc_manifest) + IPC_MAX_PIECES * sizeof(ipc_piece)) {
        msize = (size_t)st.st_size;
        m = mmap(NULL, msize, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    }
    close(mfd);
    if (m == MAP_FAILED)
        return CUDA_ERROR_INVALID_HANDLE;
    bool ok = memcmp(m->magic, IPC_MANIFEST_MAGIC, sizeof m->magic) == 0 && m->version == 1 &&
              m->nonce == w->nonce && m->size > 0;
    if (ok && m->kind == IPC_PLAIN) {
        ok = m->npieces == 0;
    } else if (ok && m->kind == IPC_VM) {
        uint64_t sum = 0;
        ok = m->npieces > 0 && m->npieces <= (msize - sizeof *m) / sizeof(ipc_piece);
        for (uint32_t i = 0; ok && i < m->npieces; i++) {
            ok = m->pieces[i].size > 0 && sum + m->pieces[i].size > sum;
            sum += m->pieces[i].size;
        }
        ok = ok && sum == m->map_size && m->offset < sum && m->size <= sum - m->offset;
    } else {
        ok = false;
    }
    if (!ok) {
        munmap(m, msize);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    *out = m;
    *size_out = msize;
    return CUDA_SUCCESS;
}

CUresult ts_ipc_open(CUdeviceptr *out, const CUipcMemHandle *h, unsigned int flags)
{
    ipc_wire w;
    memcpy(&w, h, sizeof w);
    if (w.pid <= 0 || w.mfd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* the driver's answer to opening one's own handle */
    CUcontext ctx = NULL;
    CUresult r = ts_real.cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;

    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports; i++) {
        ipc_import *im = &imports[i];
        if (im->pid == w.pid && im->start == w.start && im->nonce == w.nonce && im->ctx == ctx) {
            im->refs++; /* opened again in this context: the same mapping, counted */
            *out = im->ptr;
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&ipc_lock);

    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)w.pid, 0);
    if (pidfd < 0 || !proc_alive(w.pid, w.start)) {
        if (pidfd >= 0)
            close(pidfd);
        ts_log_once(&ts_ipc_open, "cudaIpcOpenMemHandle: the process that exported this handle "
                                  "(pid %d) has exited; refused with CUDA_ERROR_INVALID_HANDLE",
                    (int)w.pid);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    ipc_manifest *m = NULL;
    size_t msize = 0;
    r = manifest_open(&w, pidfd, &m, &msize);
    if (r != CUDA_SUCCESS) {
        close(pidfd);
        if (r == CUDA_ERROR_NOT_PERMITTED)
            ts_log_once(&manifest_open, "cudaIpcOpenMemHandle: process %d's handle cannot be read "
                                        "by this process (another user?); refused", (int)w.pid);
        return r;
    }
    uint64_t my_start = 0;
    (void)proc_start(getpid(), &my_start);
    int slot = importer_claim(m, my_start);
    CUdeviceptr base = 0;
    if (__atomic_load_n(&m->released, __ATOMIC_SEQ_CST)) {
        r = CUDA_ERROR_INVALID_HANDLE; /* its owner has freed it */
    } else if (m->kind == IPC_PLAIN) {
        CUipcMemHandle legacy = m->legacy;
        r = ts_real.cuIpcOpenMemHandle_v2(&base, legacy, flags);
    } else {
        r = import_vm(m, pidfd, w.pid, &base);
    }
    close(pidfd);
    ipc_import im = {.pid = w.pid, .start = w.start, .nonce = w.nonce, .ctx = ctx,
                     .ptr = base + m->offset, .refs = 1, .kind = m->kind, .base = base,
                     .map_size = m->map_size, .m = m, .msize = msize, .slot = slot};
    pthread_mutex_lock(&ipc_lock);
    if (r == CUDA_SUCCESS &&
        !table_room((void **)&imports, &cap_imports, nimports, sizeof *imports))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        imports[nimports++] = im;
        __atomic_store_n(&imported, (unsigned)nimports, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ipc_lock);
    if (r != CUDA_SUCCESS) {
        if (base && m->kind == IPC_PLAIN)
            ts_real.cuIpcCloseMemHandle(base);
        else if (base) {
            ts_real.cuMemUnmap(base, m->map_size);
            ts_real.cuMemAddressFree(base, m->map_size);
        }
        importer_drop(m, slot);
        munmap(m, msize);
        return r;
    }
    *out = im.ptr;
    return CUDA_SUCCESS;
}

CUresult ts_ipc_close(CUdeviceptr p, bool *handled)
{
    *handled = false;
    if (__atomic_load_n(&imported, __ATOMIC_ACQUIRE) == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&ipc_lock);
    ipc_import *im = import_find_ptr(p);
    ipc_import gone;
    bool last = false;
    if (im) {
        *handled = true;
        if (--im->refs == 0) {
            gone = *im;
            *im = imports[--nimports];
            __atomic_store_n(&imported, (unsigned)nimports, __ATOMIC_RELEASE);
            last = true;
        }
    }
    pthread_mutex_unlock(&ipc_lock);
    if (!last)
        return CUDA_SUCCESS;
    CUresult r;
    if (gone.kind == IPC_PLAIN) {
        r = ts_real.cuIpcCloseMemHandle(gone.base);
    } else {
        r = ts_real.cuMemUnmap(gone.base, gone.map_size);
        CUresult r2 = ts_real.cuMemAddressFree(gone.base, gone.map_size);
        if (r == CUDA_SUCCESS)
            r = r2;
    }
    importer_drop(gone.m, gone.slot); /* after the unmap: the exporter may reuse it now */
    munmap(gone.m, gone.msize);
    return r;
}
