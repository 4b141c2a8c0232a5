/* Internal header of the simulated libcuda.so.1. Nothing here is exported: the library is
 * built with -fvisibility=hidden and only the SIM_API functions of sim_api.c (listed in
 * libcuda.map) leave it. Implementation functions are called directly, never through
 * an exported cu* symbol, so an LD_PRELOADed interposer only sees what a program calls. */
#ifndef TESSERA_SIM_DRIVER_SIM_H
#define TESSERA_SIM_DRIVER_SIM_H

/* The internal API view: every versioned name (_v2, _ptsz, ...) is declared once with its
 * real prototype, so the definitions in sim_api.c are checked against the toolkit. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tessera_sim.h"

#define SIM_API __attribute__((visibility("default")))

#define SIM_PAGE ((size_t)2 << 20) /* physical page and VMM granularity: 2 MiB */
#define SIM_MAX_DEVICES 16
#define SIM_DRIVER_VERSION 13000
#define SIM_CTX_STACK 32

#define SIM_MAGIC_CTX 0x43545853u    /* 'SXTC' */
#define SIM_MAGIC_STREAM 0x4d545253u
#define SIM_MAGIC_EVENT 0x54564553u
#define SIM_MAGIC_GRAPH 0x48505247u
#define SIM_MAGIC_GRAPH_EXEC 0x43455847u

struct sim_ctx;
struct sim_stream;
struct sim_event;
struct sim_capture;
struct sim_xevent;

/* ---- global configuration and state (sim_core.c) ---------------------------------------- */

enum sim_alloc_kind {
    SIM_ALLOC_DEVICE, /* cuMemAlloc_v2 */
    SIM_ALLOC_ASYNC,  /* cuMemAllocAsync */
    SIM_ALLOC_IPC,    /* cuIpcOpenMemHandle import: address space only, no pages of ours */
    SIM_ALLOC_MANAGED, /* cuMemAllocManaged: device pages, host-visible (as all of ours) */
    SIM_ALLOC_ARRAY,   /* cuArrayCreate_v2, cuArray3DCreate_v2: device pages; the CUarray is the
                        * base address */
    SIM_ALLOC_POOL_IMPORT, /* cuMemPoolImportPointer: another process's pool memory mapped here */
    SIM_ALLOC_GRAPH,   /* a graph's allocation node (sim_graph.c): address space for the graph's
                        * life, pages only while backed */
};

struct sim_alloc {
    uintptr_t base;
    size_t size;   /* requested bytes */
    size_t pages;  /* 2 MiB pages of address space (and of memory, except IPC imports) */
    int device;
    enum sim_alloc_kind kind;
    struct sim_ctx *ctx;
    uint64_t serial;
    bool free_pending; /* cuMemFree waiting or cuMemFreeAsync queued: no second free */
    struct sim_mempool *mpool; /* SIM_ALLOC_ASYNC: the pool it came from */
    /* IPC imports */
    int ipc_refs;
    pid_t ipc_pid;
    uint64_t ipc_serial;
    uint64_t ipc_offset;
    int ipc_device;
    CUDA_ARRAY3D_DESCRIPTOR *array; /* SIM_ALLOC_ARRAY: its descriptor (Depth 0 for 2-D) */
    /* SIM_ALLOC_GRAPH (sim_graph.c). Invariants: live implies backed; free_pending implies
     * live; the record lives while a graph or an executable graph names it (g_refs) or it is
     * live. */
    bool g_backed;   /* pages counted and mapped read-write */
    bool g_live;     /* allocated by a launch, not yet freed */
    int g_refs;      /* the capture, graph and executable graph holding its node */
    uint64_t g_gen;  /* launches that allocated it: a queued free frees that allocation only */
    uint8_t g_mark;  /* scratch of a launch's check */
};

/* A memory pool (sim_pool.c): the default one of each device, or one of cuMemPoolCreate. Its
 * stream-ordered memory live now (requested bytes, 2 MiB pages) and the high-water marks
 * cuMemPoolSetAttribute may reset; its settable values, stored and read back only. */
struct sim_mempool {
    uint64_t used, used_high, reserved, reserved_high;
    uint64_t threshold;
    int reuse[3]; /* follow event dependencies, opportunistic, internal dependencies */
    int device;
    bool created;   /* from cuMemPoolCreate or an import (else a device's default pool) */
    bool destroyed; /* cuMemPoolDestroy'd: gone once its last allocation is freed */
    size_t live;    /* allocations from it not yet freed (imported ones for an imported pool) */
    /* Access the program set (cuMemPoolSetAccess) for other devices, bit d: device d.
     * Invariant: writers is a subset of readers; the pool's own device always has read-write
     * access, which cannot be revoked, and has no bit. */
    uint32_t readers, writers;
    unsigned long long htypes; /* handle types it can be exported as (POSIX fd or none) */
    bool exported; /* cuMemPoolExportToShareableHandle'd: its pointers can be exported */
    uint64_t serial;           /* names it in exported pointers */
    /* imported (cuMemPoolImportFromShareableHandle, sim_pool_ipc.c): no allocations of its own;
     * pointers are imported from the exporter's device memory through devfd */
    bool imported;
    pid_t exp_pid;
    uint64_t exp_serial;
    int devfd;
};

struct sim_device {
    /* graph memory (sim_graph.c): bytes of live graph allocations and of backed ones */
    uint64_t graph_used, graph_used_high, graph_reserved, graph_reserved_high;
    int ordinal;
    uintptr_t base;      /* device address range: va_size bytes, memfd-backed, MAP_SHARED */
    size_t va_size;
    int memfd;
    size_t total_pages;
    size_t used_pages;
    struct sim_alloc **allocs; /* sorted by base */
    size_t nallocs, cap_allocs;
    struct tessera_sim_counters ctr;
    struct sim_ctx *primary;
    struct sim_mempool pool;           /* the default memory pool */
    struct sim_mempool *current_pool; /* what cuMemAllocAsync draws from (cuDeviceSetMemPool) */
};

struct sim_global {
    pthread_mutex_t mu;  /* one lock for all simulator state */
    pthread_cond_t cv;   /* broadcast whenever any stream makes progress */
    int init_status;     /* CUresult of configuration, valid once configured */
    bool initialized;    /* cuInit succeeded */
    volatile int forked; /* set in a fork()ed child: every call fails like a real driver */
    int ndev;
    size_t mem_bytes;
    unsigned op_delay_us;
    bool marker_delay; /* TESSERA_SIM_MARKER_DELAY=1: event records and waits pay op_delay_us too */
    unsigned alloc_delay_us;
    uint64_t fail_alloc_after, fail_map_after;
    uint64_t alloc_attempts, map_attempts;
    int verbose;
    char *report_path;
    struct sim_device dev[SIM_MAX_DEVICES];
    uint64_t serial;       /* allocation / handle serial numbers */
    uint64_t uid;          /* context activation ids */
    struct sim_ctx *ctxs;  /* every context ever created (never freed: stale handles stay safe) */
    struct sim_stream *streams; /* live user stream handles */
    struct sim_event *events;   /* live event handles */
    struct sim_capture *captures; /* active captures */
    uint64_t capture_ids;
    /* bytes 8-11 of every device's UUID: who shares the devices. A hash of TESSERA_SIM_SHARED's
     * name (processes that share one device see one UUID, as on a GPU), else this process's pid
     * (its devices are its own) */
    uint32_t uuid_tag;
};

extern struct sim_global sim_g;

void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
CUresult sim_configure(void);        /* parse TESSERA_SIM_* once; returns status */
CUresult sim_init(unsigned flags);   /* cuInit */
CUresult sim_check_init(void);       /* CUDA_ERROR_NOT_INITIALIZED until cuInit */
void sim_lock(void);
void sim_unlock(void);
void sim_sleep_us(unsigned us);
uint64_t sim_now_ns(void);

/* ---- threads and contexts (sim_core.c) ------------------------------------------------ */

/* ---- the device's order, modelled (sim_order.c) ---------------------------------------- */

enum { SIM_ORDER_STREAMS = 128, SIM_ORDER_LOG = 4096 };

/* A vector clock: component i counts the ops of the i-th tracked stream that happen before. */
struct sim_vclock {
    uint32_t c[SIM_ORDER_STREAMS];
};

/* An op being queued: what it happens after, and when it starts and ends on the model. */
struct sim_order_op {
    struct sim_vclock vc;
    uint64_t start, end;
};

struct sim_tls {
    uint64_t tid;
    struct sim_ctx *stack[SIM_CTX_STACK];
    int depth;
    CUstreamCaptureMode capmode;
    bool in_callback;
    struct sim_ptds {
        uint64_t ctx_uid;
        struct sim_stream *s;
    } *ptds;
    size_t nptds, cap_ptds;
    bool key_set;
};

struct sim_tls *sim_tls(void);
void sim_tls_arm(struct sim_tls *t); /* make the thread-exit destructor run (lock held) */

struct sim_ctx {
    uint32_t magic;
    int device;
    bool primary;
    bool active;     /* created ctx: until destroyed; primary: while retained */
    bool destroyed;  /* created ctx destroyed (handle dead forever) */
    unsigned flags;
    int retain;
    uint64_t uid;    /* changes at every activation */
    struct sim_stream *legacy;
    /* cuCtxSetLimit values (sim_limits.c): limit l is set when bit l of limits_set is, for the
     * activation limits_uid (a reset primary context starts again from the defaults) */
    size_t limits[CU_LIMIT_MAX];
    uint32_t limits_set;
    uint64_t limits_uid;
    struct sim_stream **streams; /* user + per-thread streams (also draining ones) */
    size_t nstreams, cap_streams;
    struct sim_ctx *next_all;
};

bool sim_ctx_valid(const struct sim_ctx *c); /* handle check (caller holds lock) */
CUresult sim_current_ctx(struct sim_ctx **out); /* current, active context */
CUresult sim_ctx_from_handle(CUcontext h, struct sim_ctx **out);
void sim_ctx_teardown(struct sim_ctx *c); /* waits for work, frees everything (lock held) */
CUresult sim_ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev);
CUresult sim_ctx_destroy(CUcontext h);
CUresult sim_primary_retain(CUcontext *pctx, CUdevice dev);
CUresult sim_primary_release(CUdevice dev);
CUresult sim_primary_reset(CUdevice dev);
CUresult sim_primary_state(CUdevice dev, unsigned *flags, int *active);
CUresult sim_ctx_push(CUcontext h);
CUresult sim_ctx_pop(CUcontext *out);
CUresult sim_ctx_set_current(CUcontext h);
CUresult sim_ctx_get_current(CUcontext *out);
CUresult sim_ctx_get_device(CUdevice *dev, CUcontext h);
CUresult sim_ctx_synchronize(CUcontext h);

CUresult sim_device_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult sim_device_check(CUdevice dev);
void sim_report_counters(int device, struct tessera_sim_counters *out);

/* Device memory shared by processes (sim_shared.c, TESSERA_SIM_SHARED). Without it each
 * process has its own devices and these check and count the process's own pages. */
int sim_shared_attach(const char *name);
void sim_shared_forget(void); /* in a forked child */
/* Take pages of d for this process; false: the device (every process's pages) is full. */
bool sim_device_reserve(struct sim_device *d, size_t pages);
void sim_device_unreserve(struct sim_device *d, size_t pages);
size_t sim_device_free_pages(struct sim_device *d);

const char *sim_error_name(CUresult e);
const char *sim_error_string(CUresult e);

/* ---- capture rules (sim_stream.c) ----------------------------------------------------- */

/* An unsafe call (cuMemAlloc, cuMemFree, synchronisation...) while a capture forbids it:
 * invalidates the offending captures and returns `code`; CUDA_SUCCESS otherwise. */
CUresult sim_capture_unsafe(CUresult code);
/* Any use of the legacy stream of ctx: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT when forbidden. */
CUresult sim_capture_legacy(struct sim_ctx *ctx);

/* ---- device memory (sim_mem.c) -------------------------------------------------------- */

enum sim_ptr_kind { SIM_PTR_NONE, SIM_PTR_DEVICE, SIM_PTR_VMM, SIM_PTR_HOST };

struct sim_mapping;
struct sim_resv;
struct sim_host;

struct sim_ptrinfo {
    enum sim_ptr_kind kind;
    bool in_device_space; /* inside a device range or VA reservation (even if unallocated) */
    int device;
    struct sim_ctx *ctx;
    uintptr_t base;
    size_t size;
    struct sim_alloc *alloc;
    struct sim_mapping *map;
    struct sim_resv *resv;
    struct sim_host *host;
};

void sim_ptr_lookup(uintptr_t p, struct sim_ptrinfo *pi);
/* [p, p+n) must be usable memory. device_side: must be CUDA memory (device, mapped VMM or
 * pinned host); otherwise plain host memory is fine too unless it lies in device space. */
CUresult sim_check_range(uintptr_t p, size_t n, bool device_side, bool write);

CUresult sim_mem_alloc_locked(struct sim_ctx *ctx, size_t size, enum sim_alloc_kind kind,
                              CUdeviceptr *out);
CUresult sim_mem_alloc(CUdeviceptr *out, size_t size);  /* cuMemAlloc_v2 */
CUresult sim_mem_free(CUdeviceptr p);                   /* cuMemFree_v2 */
/* lock held: find the allocation based at p and mark it being freed */
CUresult sim_mem_free_async_prepare(CUdeviceptr p, struct sim_alloc **out);
void sim_alloc_release(struct sim_alloc *a, bool explicit_free); /* lock held */
void sim_ctx_free_allocs(struct sim_ctx *ctx);          /* lock held */
CUresult sim_mem_get_info(size_t *free_b, size_t *total_b);
CUresult sim_mem_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr p);
CUresult sim_host_alloc(void **pp, size_t size, unsigned flags);
CUresult sim_host_free(void *p);
CUresult sim_host_register(void *p, size_t size, unsigned flags);   /* cuMemHostRegister_v2 */
CUresult sim_host_unregister(void *p);                               /* cuMemHostUnregister */
CUresult sim_host_device_pointer(CUdeviceptr *d, void *p, unsigned flags);
CUresult sim_host_get_flags(unsigned *flags, void *p);                 /* cuMemHostGetFlags */
CUresult sim_mem_alloc_managed(CUdeviceptr *out, size_t size, unsigned flags);
/* Managed-memory hints: checked (a range inside one managed allocation, a valid location,
 * flags), then nothing to migrate. Prefetch and attach are stream work that does nothing. */
CUresult sim_mem_prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream h,
                          bool ptsz);
CUresult sim_mem_advise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc);
CUresult sim_stream_attach(CUstream h, CUdeviceptr p, size_t n, unsigned flags, bool ptsz);
/* memory pools (sim_pool.c) */
CUresult sim_pool_default(CUmemoryPool *pool, CUdevice dev);
CUresult sim_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult sim_pool_destroy(CUmemoryPool pool);
CUresult sim_pool_set_current(CUdevice dev, CUmemoryPool pool);
CUresult sim_pool_get_current(CUmemoryPool *pool, CUdevice dev);
/* under the lock: the live pool a handle names (NULL when none), and an allocation's charge to
 * its pool (sign +1 at allocation, -1 at release) */
struct sim_mempool *sim_pool_lookup(CUmemoryPool pool);
void sim_pool_charge(struct sim_alloc *a, int sign);
struct sim_alloc *sim_mem_alloc_at(CUdeviceptr p);
/* lock held: a record for `pages` pages of address space on device d at the lowest gap, with
 * nothing mapped or counted (NULL: no room or no host memory) */
struct sim_alloc *sim_mem_place_locked(struct sim_device *d, size_t size, size_t pages);
/* lock held: back [base, base + pages) with device memory (read-write, counted), or give it
 * back (PROT_NONE, the host pages freed, uncounted) */
bool sim_mem_back(struct sim_device *d, uintptr_t base, size_t pages);
void sim_mem_unback(struct sim_device *d, uintptr_t base, size_t pages);
/* lock held: map another process's device memory (fd, offset) into a new record of kind, in
 * device `device`'s range, owned by ctx */
CUresult sim_mem_map_foreign(struct sim_ctx *ctx, int device, int fd, uint64_t offset,
                             size_t size, size_t pages, enum sim_alloc_kind kind,
                             struct sim_alloc **out);
/* Open descriptor fdnum of process pid through /proc (same user needed); it must be one of the
 * simulator's memfds, whose name contains `name`: CUDA_ERROR_INVALID_HANDLE otherwise. */
CUresult sim_open_foreign_fd(pid_t pid, int fdnum, const char *name, int *out);
/* lock held: an allocation the program freed (cuMemFree, a cuMemFreeAsync that ran); gen: for a
 * graph allocation, the allocation the free was asked for */
void sim_alloc_free(struct sim_alloc *a, uint64_t gen);
CUresult sim_mem_alloc_pool(CUdeviceptr *out, size_t size, CUmemoryPool pool, CUstream h,
                            bool ptsz);
CUresult sim_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult sim_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult sim_pool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
CUresult sim_pool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc);
/* lock held: a free pool record (NULL when all SIM_MAX_POOLS are taken), and whether device
 * `device` may reach the memory of an allocation through its pool's access */
struct sim_mempool *sim_pool_new_locked(int device);
bool sim_pool_reaches(const struct sim_mempool *p, int device);
CUresult sim_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p,
                               bool multi);
CUresult sim_ipc_get(CUipcMemHandle *h, CUdeviceptr p);
CUresult sim_ipc_open(CUdeviceptr *out, CUipcMemHandle h, unsigned flags);
CUresult sim_ipc_close(CUdeviceptr p);
bool sim_fault_alloc(void); /* lock held: counts one allocation; true = inject OOM */
void sim_device_account(struct sim_device *d, long pages, int live_delta, int handle_delta);

/* ---- virtual memory management (sim_vmm.c) -------------------------------------------- */

struct sim_vhandle {
    int memfd;
    size_t size;
    size_t pages;
    int device;
    int refs;        /* cuMemCreate/cuMemImportFromShareableHandle and each
                      * cuMemRetainAllocationHandle: one each, until cuMemRelease */
    bool imported;   /* from cuMemImportFromShareableHandle: another process's memory,
                      * not counted against this process's device */
    int map_count;   /* live cuMemMap ranges */
    uint64_t serial;
    unsigned long long htypes; /* requestedHandleTypes */
    struct sim_vhandle *next;
};

/* one cuMemMap range. Invariants: writers is a subset of readers (bit d: device d, as
 * cuMemSetAccess granted it); prot is what the host (playing every device) gets, the union
 * of the devices' rights: PROT_READ when readers != 0, PROT_WRITE too when writers != 0. */
struct sim_mapping {
    uintptr_t va;
    size_t size;
    struct sim_vhandle *h;
    size_t offset;
    int prot;         /* PROT_* currently granted to the host */
    uint32_t readers; /* devices that may read */
    uint32_t writers; /* devices that may also write */
};

struct sim_resv {
    uintptr_t base;
    size_t size;
    struct sim_mapping **maps; /* sorted by va */
    size_t nmaps, cap_maps;
    struct sim_resv *next;
};

struct sim_resv *sim_vmm_find_resv(uintptr_t p); /* lock held */
struct sim_mapping *sim_vmm_find_map(struct sim_resv *r, uintptr_t p);
CUresult sim_vmm_granularity(size_t *g, const CUmemAllocationProp *prop, int option);
CUresult sim_vmm_reserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                         unsigned long long flags);
CUresult sim_vmm_free(CUdeviceptr ptr, size_t size);
CUresult sim_vmm_create(CUmemGenericAllocationHandle *h, size_t size,
                        const CUmemAllocationProp *prop, unsigned long long flags);
CUresult sim_vmm_release(CUmemGenericAllocationHandle h);
CUresult sim_vmm_export(void *out, CUmemGenericAllocationHandle h, int type,
                        unsigned long long flags);
CUresult sim_vmm_import(CUmemGenericAllocationHandle *h, void *os_handle, int type);
CUresult sim_vmm_retain(CUmemGenericAllocationHandle *h, void *addr);
CUresult sim_vmm_map(CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult sim_vmm_unmap(CUdeviceptr ptr, size_t size);
CUresult sim_vmm_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                            size_t count);

/* ---- peer access (sim_peer.c) --------------------------------------------------------- */

CUresult sim_peer_enable(CUcontext peer, unsigned flags); /* cuCtxEnablePeerAccess */
CUresult sim_peer_disable(CUcontext peer);                /* cuCtxDisablePeerAccess */
void sim_peer_drop_ctx(struct sim_ctx *c); /* lock held: grants from or to c go */
int sim_can_access(int device, uint64_t ptr, uint64_t size); /* tessera_sim_can_access */

/* ---- streams, events, capture (sim_stream.c) ------------------------------------------ */

enum sim_stream_kind { SIM_STREAM_USER, SIM_STREAM_LEGACY, SIM_STREAM_PTDS };

struct sim_dep {
    struct sim_stream *s;
    uint64_t seq;
};

enum sim_op_type {
    SIM_OP_COPY,
    SIM_OP_SET8,
    SIM_OP_SET32,
    SIM_OP_HOSTFN,
    SIM_OP_EVENT,
    SIM_OP_WAIT,
    SIM_OP_FREE,
    SIM_OP_KERNEL, /* a kernel launch: ordered like any other work, computes nothing */
    SIM_OP_GALLOC, /* a graph's allocation node: in graphs only, done when a launch is queued */
    SIM_OP_GFREE,  /* a graph's free node: in graphs, and queued by a launch */
};

/* A graph allocation as graphs and ops name it: its base and serial (the record may have gone
 * with its context; sim_graph.c looks it up again). */
struct sim_gref {
    uintptr_t base;
    uint64_t serial;
};

struct sim_op {
    struct sim_op *next;
    enum sim_op_type type;
    uint64_t seq;
    bool sync; /* part of a synchronous call: no TESSERA_SIM_OP_DELAY_US */
    const struct sim_event *after_event; /* SIM_OP_WAIT: the event, while it is queued */
    struct sim_dep *deps;
    size_t ndeps, cap_deps;
    union {
        struct { void *dst; const void *src; size_t n; } copy;
        struct { void *dst; uint32_t val; size_t count; } set;
        /* cb set: a cuStreamAddCallback callback, called with stream and CUDA_SUCCESS */
        struct { CUhostFn fn; void *data; CUstreamCallback cb; CUstream stream; } host;
        /* xgen: the interprocess generation this record completes (0: not interprocess) */
        struct { struct sim_event *ev; uint64_t gen; uint32_t xgen; } ev;
        /* a wait on an interprocess event (ev referenced): until its generation xgen is done,
         * in whichever process recorded it; ev NULL for a wait expressed with deps */
        struct { struct sim_event *ev; uint32_t xgen; } wait;
        struct { struct sim_alloc *a; uint64_t gen; } free; /* gen: a graph allocation's */
        /* SIM_OP_GALLOC, SIM_OP_GFREE; gen: the allocation a queued free node frees */
        struct { struct sim_gref g; uint64_t gen; } gnode;
    } u;
};

struct sim_capture {
    int status; /* CU_STREAM_CAPTURE_STATUS_ACTIVE or _INVALIDATED */
    CUstreamCaptureMode mode;
    uint64_t owner_tid;
    uint64_t id;
    int refs;
    size_t nops;
    struct sim_ctx *ctx;
    struct sim_stream *origin;
    struct sim_capture *next; /* active list */
    bool ended;
    /* The work a graph launch replays, in capture order (copies, memsets, kernels, host
     * functions, allocation and free nodes; deps cleared). Events and waits inside a capture are
     * not kept: a graph of this device is one chain, launched on one stream. */
    struct sim_op *ops_head, *ops_tail;
    /* the allocation nodes it made (their address space), handed to its graph at the end */
    struct sim_gref *grefs;
    size_t ngrefs, cap_grefs;
    bool mem_nodes; /* it recorded an allocation or free node */
};

struct sim_stream {
    uint32_t magic;
    enum sim_stream_kind kind;
    struct sim_ctx *ctx; /* NULL once the context dropped it */
    unsigned flags;
    int priority;
    int refs;
    bool stop;
    struct sim_op *head, *tail;
    uint64_t submitted, completed;
    struct sim_capture *cap;
    struct sim_stream *reg_next; /* registry of live user handles */
    CUaccessPolicyWindow window; /* cuStreamSetAttribute: stored and read back (sim_limits.c) */
    CUsynchronizationPolicy sync_policy;
    struct {
        int ix;               /* component in vector clocks; -1: not tracked */
        bool counted;         /* counted in untracked_streams */
        struct sim_vclock vc; /* clock after its last submitted op */
        uint64_t end_ns;      /* modelled end of its last submitted op */
    } order;
};

struct sim_event {
    uint32_t magic;
    struct sim_ctx *ctx;
    unsigned flags;
    int refs;
    bool recorded;
    struct sim_stream *rec_stream;
    uint64_t rec_seq;
    uint64_t gen;
    bool timed; /* the record op ran: its modelled timestamp (order.time_ns) may be read */
    struct {
        struct sim_vclock vc; /* clock of the last record */
        uint64_t time_ns;     /* modelled time of the last record */
    } order;
    struct sim_capture *cap; /* last recorded into this capture */
    struct sim_event *reg_next;
    struct sim_xevent *x; /* CU_EVENT_INTERPROCESS: its completion, shared between processes */
};

/* A graph (sim_graph.c). With memory nodes, at most one executable graph of it exists at a
 * time (exec); the two point at each other until either is destroyed. */
struct sim_graph {
    uint32_t magic;
    size_t nops;            /* every op the capture recorded */
    struct sim_op *ops;     /* those a launch replays (sim_capture.ops_head) */
    struct sim_gref *grefs; /* its allocation nodes, each holding its record (g_refs) */
    size_t ngrefs;
    bool mem_nodes;
    struct sim_graph_exec *exec;
};

/* An instantiated graph: its own copy of the graph's ops and allocation nodes, so the graph
 * may be destroyed. */
struct sim_graph_exec {
    uint32_t magic;
    struct sim_op *ops;
    struct sim_gref *grefs;
    size_t ngrefs;
    bool auto_free; /* CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH */
    struct sim_graph *graph;
};

void sim_stream_unref(struct sim_stream *s); /* lock held */
struct sim_stream *sim_stream_new(struct sim_ctx *ctx, enum sim_stream_kind kind,
                                  unsigned flags, int priority, CUresult *err);
void sim_stream_stop(struct sim_stream *s); /* lock held */
CUresult sim_stream_create(CUstream *ph, unsigned flags, int priority);
CUresult sim_stream_destroy(CUstream h);
CUresult sim_stream_get_flags(CUstream h, bool ptsz, unsigned *flags);
CUresult sim_stream_query(CUstream h, bool ptsz);
CUresult sim_stream_synchronize(CUstream h, bool ptsz);
CUresult sim_stream_wait_event(CUstream h, CUevent e, unsigned flags, bool ptsz);
CUresult sim_stream_is_capturing(CUstream h, bool ptsz, CUstreamCaptureStatus *st);
CUresult sim_stream_begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz);
CUresult sim_stream_end_capture(CUstream h, CUgraph *g, bool ptsz);
CUresult sim_thread_exchange_capture_mode(CUstreamCaptureMode *mode);

/* ---- graphs and graph memory nodes (sim_graph.c) -------------------------------------- */

CUresult sim_graph_destroy(CUgraph g);
CUresult sim_graph_instantiate(CUgraphExec *exec, CUgraph g, unsigned long long flags);
/* Queue the exec's ops on stream h, in order, as asynchronous work of that stream. */
CUresult sim_graph_launch(CUgraphExec exec, CUstream h, bool ptsz);
CUresult sim_graph_exec_destroy(CUgraphExec exec);
/* Lock held. The graph made of a capture that ended well: its ops and allocation nodes. */
CUresult sim_graph_from_capture(struct sim_capture *c, struct sim_op *ops, size_t nops,
                                CUgraph *out);
/* Lock held. cuMemAllocAsync / cuMemFreeAsync on a capturing stream: an allocation node (the
 * address space now, the memory at each launch) or a free node of a graph allocation. */
CUresult sim_graph_capture_alloc(struct sim_stream *s, size_t size, CUdeviceptr *out);
CUresult sim_graph_capture_free(struct sim_stream *s, CUdeviceptr p);
void sim_graph_capture_drop(struct sim_capture *c); /* lock held: its nodes, unused, go */
/* lock held: a graph allocation freed outside a graph (allocation gen), or a queued free node
 * that ran; a graph allocation record going with its context */
void sim_graph_mem_free(struct sim_alloc *a, uint64_t gen);
void sim_graph_op_finish(const struct sim_op *op);
void sim_graph_mem_forget(struct sim_alloc *a);
CUresult sim_graph_mem_trim(CUdevice dev);
CUresult sim_graph_mem_attribute(CUdevice dev, CUgraphMem_attribute attr, void *value,
                                 bool set);

/* ---- internals shared by sim_stream.c and sim_graph.c --------------------------------- */

CUresult sim_resolve_locked(CUstream h, bool ptsz, struct sim_stream **out);
CUresult sim_submit_locked(struct sim_stream *s, struct sim_op *op, bool sync);
struct sim_op *sim_op_clone(const struct sim_op *op);
void sim_ops_free(struct sim_op *op);

/* ---- interprocess events (sim_ipc_event.c) -------------------------------------------- */

/* Lock held for all of these but sim_xevent_wait. A generation counts the records of an
 * interprocess event in every process; an event is done when its last record ran. */
CUresult sim_xevent_create(struct sim_event *e);
void sim_xevent_release(struct sim_event *e);
uint32_t sim_xevent_record(struct sim_event *e);           /* a record queued: its generation */
void sim_xevent_done(struct sim_event *e, uint32_t xgen);  /* that record ran */
uint32_t sim_xevent_pending(const struct sim_event *e);    /* the record to wait for, 0: none */
void sim_xevent_wait(const struct sim_event *e, uint32_t xgen); /* lock NOT held: blocks */
CUresult sim_ipc_event_get(CUipcEventHandle *h, CUevent ev);
CUresult sim_ipc_event_open(CUevent *out, CUipcEventHandle h);
/* sim_stream.c: the live event a handle names (NULL: none), and a new event registered as
 * cuEventCreate registers one (an imported one) */
struct sim_event *sim_event_lookup(CUevent h);
CUresult sim_event_new_locked(struct sim_ctx *ctx, unsigned flags, struct sim_event **out);

/* ---- pool sharing (sim_pool_ipc.c) ----------------------------------------------------- */

CUresult sim_pool_export(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType type,
                         unsigned long long flags);
CUresult sim_pool_import(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType type,
                         unsigned long long flags);
CUresult sim_pool_export_pointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr);
CUresult sim_pool_import_pointer(CUdeviceptr *out, CUmemoryPool pool,
                                 const CUmemPoolPtrExportData *data);

/* ---- modules, limits, stream attributes, arrays ---------------------------------------- */

/* sim_module.c: modules are loaded and checked; their functions run as any kernel here */
CUresult sim_module_load_data(CUmodule *out, const void *image, unsigned nopts,
                              const CUjit_option *opts, void **vals);
CUresult sim_module_load_file(CUmodule *out, const char *path);
CUresult sim_module_get_function(CUfunction *out, CUmodule mod, const char *name);
CUresult sim_module_unload(CUmodule mod);
/* sim_limits.c: settings stored per context or stream and read back */
CUresult sim_ctx_set_limit(CUlimit limit, size_t value);
CUresult sim_ctx_get_limit(size_t *value, CUlimit limit);
CUresult sim_ctx_reset_persisting_l2(void);
CUresult sim_stream_attribute(CUstream h, bool ptsz, CUstreamAttrID attr, CUstreamAttrValue *v,
                              bool set);
/* sim_array.c */
CUresult sim_array_create(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *desc);
CUresult sim_array3d_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *desc);
CUresult sim_array_destroy(CUarray a);
CUresult sim_array_descriptor(CUarray a, CUDA_ARRAY_DESCRIPTOR *d2, CUDA_ARRAY3D_DESCRIPTOR *d3);

/* Queue an op (freshly calloc'ed, ownership taken) on stream h. sync: wait for it. */
CUresult sim_submit(CUstream h, bool ptsz, struct sim_op *op, bool sync);
struct sim_op *sim_op_new(enum sim_op_type t);
CUresult sim_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, int dir, CUstream h,
                    bool ptsz, bool sync);
CUresult sim_memset(CUdeviceptr dst, uint32_t val, size_t count, int width, CUstream h,
                    bool ptsz, bool sync);
CUresult sim_launch_host_func(CUstream h, CUhostFn fn, void *data, bool ptsz);
CUresult sim_stream_add_callback(CUstream h, CUstreamCallback cb, void *data, unsigned flags,
                                 bool ptsz);
/* grid x,y,z then block x,y,z; any zero is CUDA_ERROR_INVALID_VALUE */
CUresult sim_launch_kernel(CUfunction f, const unsigned dims[6], CUstream h, bool ptsz);
CUresult sim_mem_free_async(CUdeviceptr p, CUstream h, bool ptsz);
CUresult sim_mem_alloc_async(CUdeviceptr *out, size_t size, CUstream h, bool ptsz);

/* direction for sim_memcpy */
enum { SIM_HTOD, SIM_DTOH, SIM_DTOD, SIM_ANY };

CUresult sim_event_create(CUevent *pe, unsigned flags);
CUresult sim_event_destroy(CUevent e);
CUresult sim_event_record(CUevent e, CUstream h, bool ptsz);
CUresult sim_event_query(CUevent e);
CUresult sim_event_synchronize(CUevent e);
CUresult sim_event_elapsed(float *ms, CUevent a, CUevent b);

/* Wait (lock held) until every stream of ctx finished the work submitted so far; all
 * contexts when ctx is NULL. */
void sim_wait_ctx_idle(struct sim_ctx *ctx);
void sim_ctx_drop_streams(struct sim_ctx *ctx); /* teardown helper, lock held */
void sim_tls_release(struct sim_tls *t);        /* thread exit: stop per-thread streams */

void sim_order_stream_init(struct sim_stream *s);
void sim_order_begin(struct sim_order_op *o, const struct sim_stream *s);
void sim_order_after_stream(struct sim_order_op *o, const struct sim_stream *d);
void sim_order_after_event(struct sim_order_op *o, const struct sim_event *e);
/* Ends o as op on s: modelled end, tick, race check of its bytes, the stream's (and a recorded
 * event's) clock and time. */
void sim_order_commit(struct sim_order_op *o, struct sim_stream *s, struct sim_op *op);
uint64_t sim_order_cost_ns(const struct sim_op *op);
/* The host learnt that o, all submitted work of s, or e finished. */
void sim_order_host_after(const struct sim_order_op *o);
void sim_order_host_after_stream(const struct sim_stream *s);
void sim_order_host_after_event(const struct sim_event *e);

/* ---- small helpers --------------------------------------------------------------------- */

void *sim_grow(void *arr, size_t *cap, size_t need, size_t elem); /* NULL on failure */

static inline size_t sim_pages(size_t bytes) { return bytes / SIM_PAGE + (bytes % SIM_PAGE != 0); }

#endif
