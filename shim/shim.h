/* The interposer's internals: shared between the files of shim/. Nothing here is exported.
 *
 * Layers, outermost first:
 *   dlsym.c           the dlsym interposer: hands out our cuGetProcAddress wrappers
 *   hooks_driver.c    cuGetProcAddress(_v2) wrappers and the driver hooks (exported too)
 *   hooks_runtime.c   cudaMalloc, cudaFree, cudaMemGetInfo, ... (shared cudart only)
 *   pluggable.c       PyTorch's pluggable allocator entry points (the library is loaded, not
 *                     preloaded: nothing is interposed), over the stream-ordered hooks' service
 *   context.c         CUDA context -> allocator; page, trace, fork and exit handling
 *   lend.c            memory lent between the processes of a device (asked for when out of
 *                     memory, given when asked), the cache released from outside
 *   pause.c           a process paused (its device memory copied to the host, the pages given
 *                     back) and resumed, asked from outside or by the program itself
 *   gate.c            the door every call that could touch device memory passes; shut while
 *                     paused
 *   ipc.c             CUDA IPC of tessera's blocks: what is exported, held, imported
 *   control.c         the control channel: a socket and a thread of tessera's own, started at
 *                     the first export; its clients (ipc.c) plug in as services
 *   backend_cuda.c    the core's backend over the real driver; fences on tracked streams
 *   streams.c         which streams exist, which threads use a context, whether a capture runs
 *   real.c            the real dlsym, the real driver entry points, the routing table
 *
 * hooks.def lists every entry point hooked or called; the struct of real pointers below, the
 * hook table, the exports and the linker's version script (libtessera.map.in) come from it.
 *
 * Hooks stay thin: lazy init, pick the allocator, call the core, return. tessera's own driver
 * calls always go through the real pointers resolved here, never through an exported name, so
 * they never re-enter a hook.
 */
#ifndef TS_SHIM_H
#define TS_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda.h>

#include "config/config.h"
#include "core/allocator.h"

#define TS_HIDDEN __attribute__((visibility("hidden")))
#define TS_EXPORT __attribute__((visibility("default")))

/* The old 4-argument cuGetProcAddress ABI (CUDA 11.3 - 11.8). */
typedef CUresult (*ts_gpa_v1_fn)(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags);
typedef CUresult (*ts_gpa_v2_fn)(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* The real driver, as resolved from libcuda.so.1 itself: one pointer per driver entry point of
 * shim/hooks.def, under its versioned name. Optional entries may be NULL. */
typedef struct ts_real_driver {
    ts_gpa_v2_fn cuGetProcAddress_v2;
    ts_gpa_v1_fn cuGetProcAddress_v1; /* the 4-argument export "cuGetProcAddress" */
#define TS_DRIVER_HOOK(name, symbol, version, ptsz, ret, params) ret(*name) params;
#define TS_DRIVER_REAL(name, ret, params) ret(*name) params;
#include "shim/hooks.def"
} ts_real_driver;

extern TS_HIDDEN ts_real_driver ts_real;

/* --- real.c ---------------------------------------------------------------------------------- */

/* glibc's dlsym, found with dlvsym (plain dlsym would be tessera's own) once per process: the
 * one versioned look-up, shared by tessera's own look-ups and the exported dlsym's RTLD_NEXT
 * path. ts_dlsym_glibc caches it (NULL until found; dlsym.c's assembly reads it); resolve returns
 * it, looking it up first if need be (NULL when glibc has none). */
extern TS_HIDDEN void *ts_dlsym_glibc;
TS_HIDDEN void *ts_dlsym_resolve(void);
/* glibc's dlsym(handle, name) (NULL when it cannot be found). */
TS_HIDDEN void *ts_real_dlsym(void *handle, const char *name);

/* Resolve the driver (dlopen libcuda.so.1 when load is true and it is not loaded yet), fill
 * ts_real and the routing table. Idempotent and thread-safe. Returns true when the driver is
 * usable. Never waits for another thread's initialisation when called with wait false.
 * ts_driver_init (hooks_driver.c) hands real.c the hooks to route to: real.c, below the hooks,
 * knows none of them by name. */
TS_HIDDEN bool ts_driver_init(bool load, bool wait);
TS_HIDDEN bool ts_driver_ready(void);

/* Our hook for a real driver function pointer, by identity; fn itself when not hooked. */
TS_HIDDEN void *ts_route(void *fn);

/* Remember a real cuGetProcAddress pointer seen through dlsym before initialisation. */
TS_HIDDEN void ts_real_note_gpa(void *fn, bool v2);

/* --- per-thread state ----------------------------------------------------------------------- */

typedef struct ts_tls {
    int depth;         /* > 0 while tessera itself calls into CUDA: hooks pass straight through */
    int force_result;  /* a CUresult the next cuMemAlloc_v2 / cuMemFree_v2 hook returns as is */
    bool in_init;      /* this thread is initialising tessera */
} ts_tls;

TS_HIDDEN ts_tls *ts_tls_get(void);

/* --- hooks_driver.c -------------------------------------------------------------------------- */

/* The wrappers handed out for cuGetProcAddress (v1: 4 arguments, v2: 5), and exported. */
#define TS_DRIVER_GPA(name, wrapper, ret, params) TS_HIDDEN ret wrapper params;
#include "shim/hooks.def"

/* The hook table routing maps real pointers into (hooks_driver.c; routed by real.c). */
typedef struct ts_hook_entry {
    const char *symbol;  /* base name for cuGetProcAddress */
    const char *export;  /* the exported (versioned) name in libcuda */
    int version;         /* the cudaVersion whose ABI the hook implements */
    bool ptsz;           /* the per-thread-default-stream variant */
    void *hook;
    void **real;         /* where the real pointer goes in ts_real */
} ts_hook_entry;

/* What routing maps real pointers to: the hook table, and the wrappers of the two exported
 * cuGetProcAddress symbols. */
typedef struct ts_driver_hooks {
    const ts_hook_entry *table;
    size_t n;
    void *gpa_v1, *gpa_v2;
} ts_driver_hooks;
TS_HIDDEN bool ts_real_init(bool load, bool wait, const ts_driver_hooks *hooks);

/* With verbose:True, log once per hook the first object handed it (via: "dlsym",
 * "cuGetProcAddress_v2", ...; version 0 when the lookup had none). */
TS_HIDDEN void ts_hook_announce(const char *via, const char *symbol, int version,
                                unsigned long long flags, const void *hook, const void *caller);

/* Driver-level allocation paths, shared with the runtime hooks. */
TS_HIDDEN CUresult ts_driver_alloc(CUdeviceptr *dptr, size_t size);
TS_HIDDEN CUresult ts_driver_free(CUdeviceptr dptr);
/* Stream-ordered allocation and free on stream s (not the per-thread variants), served exactly as
 * the cuMemAllocAsync and cuMemFreeAsync hooks serve them: for other entry points of the shim
 * (pluggable.c), which must never call tessera's exported names (they may bind to the driver's). */
TS_HIDDEN CUresult ts_driver_alloc_async(CUdeviceptr *dptr, size_t size, CUstream s);
TS_HIDDEN CUresult ts_driver_free_async(CUdeviceptr dptr, CUstream s);
TS_HIDDEN void ts_meminfo_adjust(size_t *free_bytes, size_t *total);

/* --- default_pool.c --------------------------------------------------------------------------- */

/* Device dev's default memory pool, learnt from the driver once (NULL when it has none). */
TS_HIDDEN CUmemoryPool ts_pool_default(int dev);

/* --- context.c ------------------------------------------------------------------------------- */

/* The global configuration (parsed at load time). */
TS_HIDDEN const ts_config *ts_shim_config(void);
/* Is tessera serving allocations (caching on, native backend)? */
TS_HIDDEN bool ts_shim_active(void);

/* The allocator of the current context (created on first use); NULL when there is no current
 * context or tessera cannot serve it. *ctx_out receives the current context. */
TS_HIDDEN ts_allocator *ts_ctx_allocator(CUcontext *ctx_out);
/* The allocator that owns ptr: TS_OK (freed), TS_EINVAL (inside one of ours but not live),
 * TS_ENOTFOUND (foreign). */
TS_HIDDEN int ts_ctx_free(uintptr_t ptr, size_t *requested);
/* The calling thread uses ctx (made it current, or allocates in it): census, and an order
 * point when this is the context's second host thread. */
TS_HIDDEN void ts_ctx_note_thread(CUcontext ctx);
/* A stream was created in ctx (the current context). */
TS_HIDDEN void ts_ctx_stream_created(CUcontext ctx, CUstream s, unsigned int flags);
/* Free a pinned host buffer of any allocator's host cache: TS_OK, TS_EINVAL (interior pointer or
 * freed twice), TS_ENOTFOUND (not tessera's: the driver's business). */
TS_HIDDEN int ts_ctx_host_free(uintptr_t ptr);
/* The host cache whose regions hold ptr: TS_OK with its allocator's table index and what it
 * knows of the piece (core/hostcache.h); TS_ENOTFOUND when none does. */
struct ts_host_info;
TS_HIDDEN int ts_ctx_host_owner(uintptr_t ptr, int *index, struct ts_host_info *info);
/* Look a pointer up in every allocator. */
TS_HIDDEN int ts_ctx_lookup(uintptr_t ptr, ts_segment_info *seg, ts_block_info *blk);
/* The allocator whose segments hold ptr: TS_OK with its allocator, context and table index (any
 * output may be NULL), and the block in *blk (may be NULL); TS_ENOTFOUND when none does. */
TS_HIDDEN int ts_ctx_owner(uintptr_t ptr, ts_allocator **a, CUcontext *ctx, int *index,
                           ts_block_info *blk);
/* A context or a device's primary context is going away: forget its allocator's memory. */
TS_HIDDEN void ts_ctx_forget(CUcontext ctx);
/* The current context, on device `from`, was given peer access to the memory of context peer:
 * peer's allocator grants `from` its virtual-memory mappings, now or once it exists. */
TS_HIDDEN void ts_ctx_peer_enabled(CUcontext peer, CUdevice from);
/* Device `to` was given access to device `owner`'s default memory pool (cuMemPoolSetAccess):
 * every allocator of `owner` grants `to` its virtual-memory mappings, now or once it exists.
 * owner: 0-63 (a device whose default pool tessera knows). */
TS_HIDDEN void ts_ctx_pool_access(CUdevice owner, CUdevice to);
TS_HIDDEN void ts_ctx_forget_primary(CUdevice dev);
/* cudaFreeAsync on stream (0: not one stream's order): ts_ctx_free, with ts_free_on_stream's
 * rule for a block allocated for that stream. */
TS_HIDDEN int ts_ctx_free_on_stream(uintptr_t ptr, uintptr_t stream, size_t *requested);
/* Stream s is being destroyed: every allocator forgets the order of its frees. */
TS_HIDDEN void ts_ctx_stream_retired(CUstream s);
/* Allocations left to the driver and counted by an allocator (ts_allocator_driver_*): note one
 * recorded; take ptr's record before its free is forwarded (the allocator that counted it, and
 * its bytes; NULL when none did); restore it when the driver refused that free. */
TS_HIDDEN void ts_ctx_driver_left_note(void);
TS_HIDDEN ts_allocator *ts_ctx_driver_left_take(uintptr_t ptr, size_t *bytes);
TS_HIDDEN void ts_ctx_driver_left_restore(ts_allocator *a, uintptr_t ptr, size_t bytes);
/* Count a call forwarded untouched. */
TS_HIDDEN void ts_ctx_count_passthrough(void);
/* Report an out-of-memory (rate-limited). */
TS_HIDDEN void ts_report_oom(const ts_oom_info *oom);
/* Record an allocation event in the TESSERA_TRACE log (no-op when off). */
TS_HIDDEN void ts_trace_alloc(uintptr_t ptr, size_t size, bool failed);
TS_HIDDEN void ts_trace_free(uintptr_t ptr, size_t size);
/* The same for a stream-ordered call, with the stream it names (the core's stream tag). */
TS_HIDDEN void ts_trace_alloc_on(uintptr_t ptr, size_t size, bool failed, uintptr_t stream);
TS_HIDDEN void ts_trace_free_on(uintptr_t ptr, size_t size, uintptr_t stream);

/* --- streams.c ------------------------------------------------------------------------------- */

/* A context's census (stream-ordered reuse): see streams.c. Fields change one way, under the
 * streams lock; readers without it load them atomically. */
typedef struct ts_census {
    CUcontext ctx;
    uint64_t owner;    /* the first host thread seen using the context */
    bool many_threads; /* a second host thread has used it */
    uint32_t streams;  /* streams created in it */
} ts_census;

/* The census record of ctx (never moves; a shared always-many record when the table is full). */
TS_HIDDEN ts_census *ts_census_of(CUcontext ctx);
/* The calling thread uses ctx. Returns true when this made ctx many-threaded. */
TS_HIDDEN bool ts_census_note_thread(CUcontext ctx);
/* All of ctx's device work runs in one queue: no stream created, one host thread. */
static inline bool ts_census_single_queue(const ts_census *c)
{
    return !__atomic_load_n(&c->many_threads, __ATOMIC_ACQUIRE) &&
           __atomic_load_n(&c->streams, __ATOMIC_ACQUIRE) == 0;
}

TS_HIDDEN void ts_streams_add(CUstream s, CUcontext ctx, unsigned int flags);
TS_HIDDEN void ts_streams_remove(CUstream s);
/* Copy the non-blocking streams of ctx into out (at most max); returns how many there are. */
TS_HIDDEN size_t ts_streams_nonblocking(CUcontext ctx, CUstream *out, size_t max);
TS_HIDDEN void ts_capture_begin(CUstream s);
TS_HIDDEN void ts_capture_end(CUstream s);
TS_HIDDEN bool ts_capture_underway(void);
TS_HIDDEN void ts_streams_reset_after_fork(void);

/* --- backend_cuda.c ---------------------------------------------------------------------------- */

typedef struct ts_cuda_backend ts_cuda_backend;
/* The backend of context ctx (on device dev), filling *out; mode: the resolved configuration's
 * reuse_fence (the backend reads no configuration itself). NULL when out of host memory. */
TS_HIDDEN ts_cuda_backend *ts_cuda_backend_create(CUcontext ctx, CUdevice dev, ts_fence_mode mode,
                                                  ts_backend *out);
/* Drop the backend's events without calling the driver (the context is gone). */
TS_HIDDEN void ts_cuda_backend_forget(ts_cuda_backend *b);
/* Point a forgotten backend at a new context (a device's primary context after a reset). */
TS_HIDDEN void ts_cuda_backend_rebind(ts_cuda_backend *b, CUcontext ctx, CUdevice dev);
/* A stream was created in the backend's context (current in this thread): register it and, for
 * a non-blocking one, order its work after everything issued before (stream-ordered reuse). */
TS_HIDDEN void ts_cuda_backend_stream_created(ts_cuda_backend *b, CUstream s, unsigned int flags);

/* --- ipc.c: CUDA IPC of tessera's blocks ------------------------------------------------------ */

/* What a free of an exported block found (ts_ipc_on_free). */
enum { TS_IPC_NOT_EXPORTED = 0, TS_IPC_HELD = 1, TS_IPC_INVALID = 2 };
extern TS_HIDDEN unsigned ts_ipc_exported; /* exports alive (atomic) */
extern TS_HIDDEN unsigned ts_ipc_reapable; /* held blocks no process holds any more (atomic) */
/* A handle for the live block of a (an allocator of context ctx) that contains ptr
 * (cuIpcGetMemHandle). */
TS_HIDDEN CUresult ts_ipc_export(CUipcMemHandle *h, ts_allocator *a, CUcontext ctx, uintptr_t ptr);
/* The program frees ptr: TS_IPC_HELD when another process still has the block open (the free
 * succeeds, the block stays allocated until they close it), TS_IPC_INVALID when the block was
 * already freed and is held, else TS_IPC_NOT_EXPORTED (free it as usual). */
TS_HIDDEN int ts_ipc_on_free(uintptr_t ptr, size_t *requested);
/* Give the core back the held blocks no process has open any more. */
TS_HIDDEN void ts_ipc_reap(void);
/* a's memory vanished (its context went away): drop its exports. */
TS_HIDDEN void ts_ipc_forget(ts_allocator *a);
/* Is h one of tessera's handles (else it is the driver's)? */
TS_HIDDEN bool ts_ipc_is_ours(const CUipcMemHandle *h);
/* cuIpcOpenMemHandle of one of tessera's handles, in the current context. */
TS_HIDDEN CUresult ts_ipc_open(CUdeviceptr *out, const CUipcMemHandle *h, unsigned int flags);
/* cuIpcCloseMemHandle: *handled is false when p is not a tessera import (forward it). */
TS_HIDDEN CUresult ts_ipc_close(CUdeviceptr p, bool *handled);
/* On the allocation and free paths: one relaxed load while nothing is to be given back. */
static inline void ts_ipc_tick(void)
{
    if (__builtin_expect(__atomic_load_n(&ts_ipc_reapable, __ATOMIC_RELAXED) != 0, 0))
        ts_ipc_reap();
}

/* --- control.c: the control channel between processes of one user ----------------------------- */

#define TS_CTL_MAGIC 0x31435354u /* "TSC1" */
#define TS_CTL_MSG_MAX 4096      /* bytes in one message, header included */
#define TS_CTL_FDS_MAX 64        /* descriptors in one answer */

/* Types the channel itself uses; services take their own ranges (ipc.c: 0x100-0x1ff).
 * REFUSED: the connection is not admitted (status: why); UNKNOWN: a request type no service
 * answers; FAILED: the answer could not be sent now (status: errno). */
enum { TS_CTL_REFUSED = 1, TS_CTL_UNKNOWN = 2, TS_CTL_FAILED = 3 };
/* Why a connection was refused (the status of TS_CTL_REFUSED). */
enum { TS_CTL_WHY_USER = 1, TS_CTL_WHY_BUSY = 2 };

/* The head of every message. A request's seq comes back in its answer; status is the answer's. */
typedef struct ts_ctl_header {
    uint32_t magic;
    uint16_t type;
    uint16_t status;
    uint32_t seq;
    uint32_t reserved;
} ts_ctl_header;

/* Where a process's server is: its pid, its start time (/proc/PID/stat, against pid reuse) and
 * the secret its name carries. */
typedef struct ts_ctl_address {
    int32_t pid;
    uint64_t start;
    uint64_t secret;
} ts_ctl_address;

typedef struct ts_ctl_peer ts_ctl_peer;
typedef struct ts_ctl_peer_info {
    pid_t pid;
    uid_t uid;
} ts_ctl_peer_info;

/* An answer a service fills: buf starts with the header (type and status the service's; magic
 * and seq the channel's), len bytes in all (0: no answer), and nfds descriptors the channel
 * sends with it and then closes, sent or not. */
typedef struct ts_ctl_answer {
    unsigned char buf[TS_CTL_MSG_MAX];
    size_t len;
    int fds[TS_CTL_FDS_MAX];
    unsigned nfds;
} ts_ctl_answer;

/* A client of the server: the requests of types [type_first, type_last]. Both calls run on the
 * server's thread, under the channel's lock, and must not block on a peer. *data is the
 * service's state for that peer, NULL at first; while it is not NULL the peer holds something
 * and is never closed for being idle. request returns false to drop the peer (a request no
 * honest client sends); gone releases *data when the peer is closed, dies or is dropped. */
typedef struct ts_ctl_service {
    uint16_t type_first, type_last;
    bool (*request)(void **data, const ts_ctl_peer_info *who, const void *msg, size_t len,
                    ts_ctl_answer *answer);
    void (*gone)(void **data);
    /* the line said when the program closes the listening socket (NULL: nothing said) */
    const char *lost;
} ts_ctl_service;

/* Serve svc: starts the thread and the socket at the first call; *addr is where clients find
 * it. 0, or -errno. */
TS_HIDDEN int ts_ctl_serve(const ts_ctl_service *svc, ts_ctl_address *addr);

typedef struct ts_ctl_client ts_ctl_client;
/* Connect to the server at addr and check it is that process (SO_PEERCRED pid and its start
 * time). 0, or -ESRCH (no such server: the process exited), -ESTALE (the pid is another
 * process now), -EPERM (the name is held by another process), -errno. */
TS_HIDDEN int ts_ctl_connect(const ts_ctl_address *addr, ts_ctl_client **out);
/* One request (its header's type set; magic and seq are filled in) and its answer: the
 * answer's length with up to max_fds descriptors in fds (*nfds), or -errno: -EACCES (this
 * user is refused), -EUSERS (the server is full), -ECONNRESET (it went away), -ETIMEDOUT,
 * -EAGAIN (the server could not send its answer now), -EMFILE (no room here for the
 * descriptors it sent), -EPROTO (not an answer of this channel: too long, stray descriptors,
 * a foreign head). */
TS_HIDDEN ssize_t ts_ctl_call(ts_ctl_client *c, void *req, size_t len, void *ans, size_t cap,
                              int *fds, unsigned max_fds, unsigned *nfds);
/* A request sent without waiting for an answer (one that comes is skipped by the next call).
 * 0 or -errno. */
TS_HIDDEN int ts_ctl_send(ts_ctl_client *c, void *msg, size_t len);
/* Bound each later send and wait for an answer of c to ns (30 s from the connect). 0 or
 * -errno. */
TS_HIDDEN int ts_ctl_timeout(ts_ctl_client *c, uint64_t ns);
/* Close the connection (the server lets go of what it held for it) and free c. */
TS_HIDDEN void ts_ctl_close(ts_ctl_client *c);
/* The start time of pid (field 22 of /proc/PID/stat); false when it cannot be read. */
TS_HIDDEN bool ts_ctl_proc_start(pid_t pid, uint64_t *out);
/* n random bytes (getrandom; unique if not random when the kernel has no entropy yet). */
TS_HIDDEN void ts_ctl_random(void *out, size_t n);

/* --- lend.c: memory lent between the processes of a device, the cache released from outside ---- */

/* context.c made allocator a for device ordinal `device`, whose UUID is uuid (all zero: unknown;
 * nobody is asked for it then). */
TS_HIDDEN void ts_lend_track(ts_allocator *a, int device, const uint8_t uuid[16]);
/* Start answering the requests of shim/lend.h on the control channel; *secret: its name, for the
 * stats page. 0 or -errno. */
TS_HIDDEN int ts_lend_serve(const ts_config *cfg, uint64_t *secret);
/* The allocators tracked, at most max of them, with their device ordinals; returns how many. */
TS_HIDDEN size_t ts_lend_allocators(ts_allocator **out, int *devices, size_t max);
/* ts_malloc_ex, and when the device cannot serve the request even after a released its own
 * cache, the other tessera processes on the device are asked to give theirs back first (the
 * out-of-memory, when it comes, then also says who held what). */
TS_HIDDEN int ts_lend_malloc(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                             ts_oom_info *oom);

/* --- gate.c: the door of every call that could touch device memory ---------------------------- */

/* Around each such call (hooks.def's TS_DRIVER_GATE entries, allocations, frees, IPC exports):
 * while the gate is shut, ts_gate_enter waits for it to open. A thread already inside a gated
 * call passes through. */
TS_HIDDEN void ts_gate_enter(void);
TS_HIDDEN void ts_gate_leave(void);
/* Shut the gate and wait, at most timeout_ns, until no thread is inside a gated call: 0, or
 * -ETIMEDOUT (the gate is open again) or -EALREADY (it was shut). */
TS_HIDDEN int ts_gate_close(uint64_t timeout_ns);
TS_HIDDEN void ts_gate_open(void);
TS_HIDDEN bool ts_gate_closed(void);

/* --- pause.c: the process paused and resumed -------------------------------------------------- */

/* Answer tessera-stat pause and resume on the control channel (shim/pause.h). 0 or -errno. */
TS_HIDDEN int ts_pause_serve(void);

/* --- pointer.c: pointer queries answered for tessera's blocks and pinned pieces ---------------- */

/* Each returns false when ptr is not in tessera's memory (forward the call), else true with the
 * call's result in *r: for a live block, what the driver answers for a cudaMalloc of its size;
 * for memory tessera holds but has not handed out, what it answers for unallocated memory. */
TS_HIDDEN bool ts_pointer_range(CUdeviceptr ptr, CUdeviceptr *base, size_t *size, CUresult *r);
TS_HIDDEN bool ts_pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr,
                                    CUresult *r);
TS_HIDDEN bool ts_pointer_attributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                     CUdeviceptr ptr, CUresult *r);
/* Must the driver's host-memory queries (cuMemHostGetDevicePointer, cuMemHostGetFlags) refuse p
 * (CUDA_ERROR_INVALID_VALUE)? True for device memory tessera holds, live or not, and for pinned
 * memory it has not handed out (freed, cached, never handed out). */
TS_HIDDEN bool ts_pointer_host_refused(const void *p);

/* --- pluggable.c: the library functions of exports.def, exported ------------------------------ */

#define TS_EXPORT_API(name, ret, params) TS_EXPORT ret name params;
#define TS_EXPORT_CALL(name, ret, params) TS_EXPORT ret name params;
#include "shim/exports.def"

/* --- log.c ------------------------------------------------------------------------------------- */

/* One line on stderr, prefixed "tessera: ", formatted on the stack (no allocation), written with
 * a single write(2). */
/* oom_snapshot.c: write the snapshot_on_oom snapshot of a (its history ring h may be NULL). */
struct ts_history;
TS_HIDDEN void ts_oom_snapshot(const char *path_template, ts_allocator *a, struct ts_history *h);
/* At start: would a snapshot be written into the directory path_template names (created, mode
 * 0700, when missing)? false with why when it would be refused at the out of memory. */
TS_HIDDEN bool ts_oom_snapshot_check(const char *path_template, char *why, size_t len);
/* In a fork child. */
TS_HIDDEN void ts_oom_snapshot_forget(void);
TS_HIDDEN void ts_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same at most once per key per process (key: any stable pointer). */
TS_HIDDEN void ts_log_once(const void *key, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* TS_SHIM_H */
