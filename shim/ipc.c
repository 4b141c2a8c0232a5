/* CUDA IPC of memory tessera hands out, under every policy.
 *
 * The driver's legacy handle names a whole driver allocation, and memory mapped with the
 * virtual-memory API has none at all; a tessera block is a piece of one or the other. So a handle
 * for a tessera block is tessera's own (the 64 bytes of CUipcMemHandle, struct ipc_wire): it
 * names the exporting process (pid, start time, the secret of its control channel) and the
 * export (a random 64-bit id). The importer asks the exporter over the control channel
 * (shim/control.c) and gets, as plain messages and descriptors:
 *   - a block of a plain segment (cuMemAlloc): the segment's legacy handle and the block's offset
 *     in it; the importer opens the legacy handle with the driver and adds the offset;
 *   - a block of an expandable segment or a stitched range: the physical handles mapped over it,
 *     in order, in runs of up to IPC_CHUNK (the first with the open's answer), each exported by
 *     the exporter's channel thread at that moment as a POSIX file descriptor, sent with
 *     SCM_RIGHTS and closed there at once; the importer imports each, closes it, maps the
 *     handles in order into an address range of its own and grants its device access. A handle
 *     maps only whole, so the block starts at an offset into that range.
 * Either way the importer gets a pointer to the block's first byte, with the whole block behind
 * it (and, as with PyTorch's own IPC, the rest of the first and last handle or of the segment).
 *
 * Trust. The exporter keeps its own record of each export (struct ipc_export) and of what each
 * connected process holds (struct ipc_holds, the channel's per-peer state); a request names an
 * export only by its id and is checked against that record. Nothing the exporter keeps is
 * reachable from another process, and nothing an importer receives is trusted by it either:
 * each answer is checked for its exact size and every bound (offset, sizes, counts) before
 * anything is mapped.
 *
 * Lifetime. A connection holds what it opened. A block the exporter frees while some process
 * holds it is *held*: the program sees a successful free, but the block stays allocated in the
 * core until every holder has closed it or its connection has closed (a process that exits or
 * dies closes it), so nothing new is placed in bytes another process still uses. The channel
 * thread counts holders; the block goes back to the core at the program's next allocation or
 * free (ts_ipc_tick), on the program's thread.
 *
 * Lock order: the channel's lock (its thread, when it calls the service below), then ipc_lock.
 * Nothing here calls the channel while holding ipc_lock.
 *
 * A process not under tessera that opens such a handle gives the driver 64 bytes it never made:
 * it refuses them (docs/DESIGN.md, "Memory shared with another process"). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/shim.h"

#define IPC_WIRE_MAGIC "TSIPCv2"   /* 8 bytes with its NUL */
#define IPC_MAX_PIECES (1u << 20)  /* an answer claiming more handles is refused */
#define IPC_CHUNK TS_CTL_FDS_MAX   /* handles per IPC_PIECES answer */

enum { IPC_PLAIN = 1, IPC_VM = 2 };
/* Requests (ts_ctl_header.type). */
enum { IPC_OPEN = 0x100, IPC_PIECES = 0x101, IPC_CLOSE = 0x102, IPC_TYPE_LAST = 0x1ff };
/* Answer statuses. */
enum { IPC_OK = 0, IPC_GONE = 1, IPC_FAILED = 2 };

/* The handle's 64 bytes. */
typedef struct ipc_wire {
    char magic[8];
    int32_t pid;      /* the exporter */
    uint32_t version; /* 0 */
    uint64_t start;   /* the exporter's start time (/proc/PID/stat), against PID reuse */
    uint64_t secret;  /* names the exporter's control channel */
    uint64_t id;      /* the export: random, never reused */
    uint64_t size;    /* the block's size */
    uint64_t serial;  /* the allocation's number in its allocator */
    uint64_t spare;
} ipc_wire;
_Static_assert(sizeof(ipc_wire) == sizeof(CUipcMemHandle), "IPC handle layout");

/* Every request: IPC_OPEN and IPC_CLOSE name the export; IPC_PIECES a run of its handles. */
typedef struct ipc_request {
    ts_ctl_header h;
    uint64_t id;
    uint32_t first, count;
} ipc_request;

/* A run of a block's mappings: count descriptors come with the message that carries it, in
 * order, each mapped over size[i] bytes from offset[i] bytes into its handle. */
typedef struct ipc_run {
    uint32_t first, count;
    uint64_t size[IPC_CHUNK];
    uint64_t offset[IPC_CHUNK];
} ipc_run;

typedef struct ipc_open_answer {
    ts_ctl_header h;
    uint32_t kind;
    int32_t cu_error; /* IPC_FAILED: the driver's error */
    uint64_t size;    /* the block */
    uint64_t offset;  /* its first byte, from the start of what the importer maps */
    uint64_t map_size;
    uint32_t npieces; /* IPC_VM: its handles, the first run of them below */
    uint32_t reserved;
    CUipcMemHandle legacy; /* IPC_PLAIN: the segment's driver handle */
    ipc_run run;
} ipc_open_answer;
_Static_assert(sizeof(ipc_open_answer) <= TS_CTL_MSG_MAX, "an answer fits one message");

/* IPC_PIECES: a later run, for a block of more than IPC_CHUNK handles. */
typedef struct ipc_pieces_answer {
    ts_ctl_header h;
    int32_t cu_error;
    uint32_t reserved;
    ipc_run run;
} ipc_pieces_answer;
_Static_assert(sizeof(ipc_pieces_answer) <= TS_CTL_MSG_MAX, "an answer fits one message");

typedef struct ipc_piece {
    uint64_t handle; /* the backend's physical handle */
    uint64_t size;
    uint64_t offset; /* where in the handle the block's mapping starts */
} ipc_piece;

/* Exporter side: one per exported live block (or held block). Only this process sees it.
 * holders is the sum of this id's counts in the holds of the connected processes; a record
 * released with no holder is counted in ts_ipc_reapable until ts_ipc_reap gives it back. */
typedef struct ipc_export {
    uint64_t id;
    uintptr_t addr;
    uint64_t serial;
    ts_allocator *a;
    CUcontext ctx;
    uint32_t kind;
    uint64_t size, offset, map_size;
    CUipcMemHandle legacy; /* IPC_PLAIN */
    ipc_piece *pieces;     /* IPC_VM */
    uint32_t npieces;
    uint64_t holders; /* opens held by connected processes */
    bool released;    /* the program freed it; it goes back when holders is 0 */
    CUipcMemHandle handle;
} ipc_export;

/* What one connected process holds: export ids with their open counts (the channel's per-peer
 * state; NULL once it holds nothing). */
typedef struct ipc_holds {
    size_t n, cap;
    struct ipc_hold {
        uint64_t id;
        uint64_t count;
    } *v;
} ipc_holds;

/* Importer side: a connection to one exporter, shared by the imports from it; closed with the
 * last of them. */
typedef struct ipc_conn {
    ts_ctl_address addr;
    ts_ctl_client *client;
    unsigned users; /* imports, and opens under way */
} ipc_conn;

/* Importer side: one per (exporter, block, context) opened. */
typedef struct ipc_import {
    ipc_conn *conn;
    uint64_t id;
    CUcontext ctx;
    CUdeviceptr ptr; /* what the program got */
    int refs;
    uint32_t kind;
    CUdeviceptr base; /* IPC_PLAIN: the driver's mapping; IPC_VM: our range */
    size_t map_size;
} ipc_import;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_export *exports;
static size_t nexports, cap_exports;
static ipc_import *imports;
static size_t nimports, cap_imports;
static ipc_conn **conns;
static size_t nconns, cap_conns;
static unsigned imported; /* atomic: nimports, for the close path's quick test */

static const char log_keys[8]; /* ts_log_once: one line per kind of refusal */

unsigned ts_ipc_exported; /* atomic: nexports, for the free path's quick test */
unsigned ts_ipc_reapable; /* atomic: released exports nobody holds, for the tick */

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

/* --- exporter: the record ------------------------------------------------------------------ */

static ipc_export *export_by_addr(uintptr_t addr)
{
    for (size_t i = 0; i < nexports; i++)
        if (exports[i].addr == addr)
            return &exports[i];
    return NULL;
}

static ipc_export *export_by_id(uint64_t id)
{
    for (size_t i = 0; i < nexports; i++)
        if (exports[i].id == id)
            return &exports[i];
    return NULL;
}

/* Released exports no process holds: what ts_ipc_reap gives back. Under ipc_lock. */
static void reapable_count(void)
{
    unsigned n = 0;
    for (size_t i = 0; i < nexports; i++)
        n += exports[i].released && exports[i].holders == 0;
    __atomic_store_n(&ts_ipc_reapable, n, __ATOMIC_RELEASE);
}

static void export_remove(size_t i)
{
    free(exports[i].pieces);
    exports[i] = exports[--nexports];
    __atomic_store_n(&ts_ipc_exported, (unsigned)nexports, __ATOMIC_RELEASE);
}

/* One holder fewer of id (a close, or a connection gone). Under ipc_lock. */
static void export_unhold(uint64_t id, uint64_t count)
{
    ipc_export *e = export_by_id(id);
    if (!e) /* its context went away meanwhile */
        return;
    bool held = e->holders != 0;
    e->holders = count < e->holders ? e->holders - count : 0;
    if (held && e->released && e->holders == 0) /* the last holder let go: give it back */
        __atomic_add_fetch(&ts_ipc_reapable, 1, __ATOMIC_RELEASE);
}

/* --- exporter: the channel's service --------------------------------------------------------- */

static struct ipc_hold *hold_find(ipc_holds *hs, uint64_t id)
{
    for (size_t i = 0; hs && i < hs->n; i++)
        if (hs->v[i].id == id)
            return &hs->v[i];
    return NULL;
}

/* The peer opens id once more: counted in its holds. False when out of host memory. */
static bool hold_add(void **data, uint64_t id)
{
    ipc_holds *hs = *data;
    struct ipc_hold *h = hold_find(hs, id);
    if (h) {
        h->count++;
        return true;
    }
    if (!hs && !(hs = calloc(1, sizeof *hs)))
        return false;
    *data = hs;
    if (!table_room((void **)&hs->v, &hs->cap, hs->n, sizeof *hs->v))
        return false;
    hs->v[hs->n++] = (struct ipc_hold){.id = id, .count = 1};
    return true;
}

static void holds_free(void **data)
{
    ipc_holds *hs = *data;
    if (hs) {
        free(hs->v);
        free(hs);
    }
    *data = NULL; /* holding nothing: the channel may close the peer when it is idle */
}

/* The peer closes one open of id. One it does not hold changes nothing (an importer whose
 * open timed out closes what the exporter may or may not have counted). */
static void serve_close(void **data, const ipc_request *q)
{
    ipc_holds *hs = *data;
    struct ipc_hold *h = hold_find(hs, q->id);
    if (!h)
        return;
    pthread_mutex_lock(&ipc_lock);
    export_unhold(q->id, 1);
    pthread_mutex_unlock(&ipc_lock);
    if (--h->count == 0)
        *h = hs->v[--hs->n];
    if (hs->n == 0)
        holds_free(data);
}

/* Export n handles of ctx as descriptors, now, into the answer (the channel sends them with it
 * and closes them) and their sizes into *run. The caller's peer holds the block, so its handles
 * stay mapped meanwhile. */
static CUresult export_run(CUcontext ctx, const ipc_piece *pieces, uint32_t first, uint32_t n,
                           ipc_run *run, ts_ctl_answer *ans)
{
    CUresult r = ts_real.cuMemExportToShareableHandle ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS && ts_real.cuCtxSetCurrent)
        r = ts_real.cuCtxSetCurrent(ctx);
    run->first = first;
    run->count = n;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
        int fd = -1;
        r = ts_real.cuMemExportToShareableHandle(
            &fd, (CUmemGenericAllocationHandle)pieces[i].handle,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r == CUDA_SUCCESS) {
            ans->fds[ans->nfds++] = fd;
            run->size[i] = pieces[i].size;
            run->offset[i] = pieces[i].offset;
        }
    }
    if (r != CUDA_SUCCESS) {
        for (unsigned i = 0; i < ans->nfds; i++)
            close(ans->fds[i]);
        ans->nfds = 0;
    }
    return r;
}

/* The peer opens id: counted in its holds and the export's, answered with how to map it and,
 * for a block of physical handles, the first run of them. */
static void serve_open(void **data, const ipc_request *q, ts_ctl_answer *ans)
{
    ipc_open_answer a;
    memset(&a, 0, sizeof a);
    memcpy(&a.h, ans->buf, sizeof a.h);
    ipc_piece run[IPC_CHUNK];
    CUcontext ctx = NULL;
    pthread_mutex_lock(&ipc_lock);
    ipc_export *e = export_by_id(q->id);
    if (!e || e->released) {
        a.h.status = IPC_GONE; /* freed (or never this process's): nothing new is handed out */
    } else if (!hold_add(data, q->id)) {
        a.h.status = IPC_FAILED;
        a.cu_error = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        e->holders++; /* from here the block outlives the program's free */
        a.kind = e->kind;
        a.size = e->size;
        a.offset = e->offset;
        a.map_size = e->map_size;
        a.npieces = e->npieces;
        a.legacy = e->legacy;
        a.run.count = e->npieces < IPC_CHUNK ? e->npieces : IPC_CHUNK;
        if (a.run.count)
            memcpy(run, e->pieces, a.run.count * sizeof *run);
        ctx = e->ctx;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (a.h.status == IPC_OK && a.run.count) {
        CUresult r = export_run(ctx, run, 0, a.run.count, &a.run, ans);
        if (r != CUDA_SUCCESS) {
            a.h.status = IPC_FAILED; /* not opened after all: the hold goes */
            a.cu_error = (int32_t)r;
            ipc_request undo = *q;
            serve_close(data, &undo);
        }
    }
    if (*data && ((ipc_holds *)*data)->n == 0)
        holds_free(data);
    memcpy(ans->buf, &a, sizeof a);
    ans->len = sizeof a;
}

/* A later run of id's handles. False: a request no honest importer makes. */
static bool serve_pieces(void **data, const ipc_request *q, ts_ctl_answer *ans)
{
    if (!hold_find(*data, q->id) || q->count == 0 || q->count > IPC_CHUNK)
        return false; /* only what the peer has opened, and a bounded run of it */
    ipc_pieces_answer a;
    memset(&a, 0, sizeof a);
    memcpy(&a.h, ans->buf, sizeof a.h);
    ipc_piece run[IPC_CHUNK];
    CUcontext ctx = NULL;
    pthread_mutex_lock(&ipc_lock);
    ipc_export *e = export_by_id(q->id);
    bool found = e != NULL;
    bool ok = e && e->kind == IPC_VM && q->first < e->npieces && q->count <= e->npieces - q->first;
    if (ok) {
        memcpy(run, e->pieces + q->first, q->count * sizeof *run);
        ctx = e->ctx;
    }
    pthread_mutex_unlock(&ipc_lock);
    if (found && !ok)
        return false; /* outside the export's handles */
    if (!ok) {
        a.h.status = IPC_GONE; /* its context went away meanwhile */
    } else {
        CUresult r = export_run(ctx, run, q->first, q->count, &a.run, ans);
        if (r != CUDA_SUCCESS) {
            a.h.status = IPC_FAILED;
            a.cu_error = (int32_t)r;
        }
    }
    memcpy(ans->buf, &a, sizeof a);
    ans->len = sizeof a;
    return true;
}

static bool ipc_request_served(void **data, const ts_ctl_peer_info *who, const void *msg,
                               size_t len, ts_ctl_answer *ans)
{
    (void)who; /* the channel admits only this user and root */
    ipc_request q;
    if (len != sizeof q)
        return false; /* every request has one size: anything else is forged or cut */
    memcpy(&q, msg, sizeof q);
    switch (q.h.type) {
    case IPC_OPEN:
        serve_open(data, &q, ans);
        return true;
    case IPC_PIECES:
        return serve_pieces(data, &q, ans);
    case IPC_CLOSE:
        serve_close(data, &q); /* answered with the header alone: let go */
        return true;
    default:
        return false;
    }
}

/* The peer's connection closed (it closed its last import, exited or died) or was dropped:
 * everything it held is let go. */
static void ipc_peer_gone(void **data)
{
    ipc_holds *hs = *data;
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; hs && i < hs->n; i++)
        export_unhold(hs->v[i].id, hs->v[i].count);
    pthread_mutex_unlock(&ipc_lock);
    holds_free(data);
}

static const ts_ctl_service ipc_service = {
    .type_first = IPC_OPEN,
    .type_last = IPC_TYPE_LAST,
    .request = ipc_request_served,
    .gone = ipc_peer_gone,
    .lost = "the socket another process opens this process's CUDA IPC handles through was "
            "closed by the program; handles exported before cannot be opened any more",
};

/* --- exporter: the program's calls ------------------------------------------------------------ */

/* The driver's answer for an export that cannot be made, said once. */
static CUresult export_refused(uintptr_t ptr, CUresult r)
{
    ts_log_once(&export_refused,
                "cuIpcGetMemHandle/cudaIpcGetMemHandle on %#llx: the physical memory tessera "
                "mapped cannot be exported as a file descriptor here (error %d); refused with "
                "CUDA_ERROR_INVALID_VALUE. Run the exporting process with "
                "TESSERA_ALLOC_CONF=expandable_segments:False",
                (unsigned long long)ptr, (int)r);
    return CUDA_ERROR_INVALID_VALUE;
}

/* Can the driver export this memory's handles at all? Asked of a block's first handle, whose
 * descriptor is closed at once, until it once can: the backend creates every handle exportable
 * unless the driver refused that at its first creation, so one success answers for the rest
 * (and the program's exports pay no driver call after it: the handles are exported when an
 * importer asks). */
static CUresult export_probe(const ts_backing_piece *first)
{
    static bool exportable;
    if (__atomic_load_n(&exportable, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    if (!ts_real.cuMemExportToShareableHandle)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = -1;
    CUresult r = ts_real.cuMemExportToShareableHandle(
        &fd, (CUmemGenericAllocationHandle)first->handle,
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS) {
        close(fd);
        __atomic_store_n(&exportable, true, __ATOMIC_RELEASE);
    }
    return r;
}

/* Fill e for blk from its segment and backing (under ipc_lock). */
static CUresult export_fill(ipc_export *e, const ts_segment_info *seg, const ts_block_info *blk,
                            const ts_backing_piece *pieces, size_t n)
{
    e->size = blk->size;
    if (seg->kind == TS_SEGMENT_PLAIN) {
        e->kind = IPC_PLAIN;
        e->offset = blk->addr - seg->addr;
        e->map_size = seg->size;
        return ts_real.cuIpcGetMemHandle(&e->legacy, (CUdeviceptr)seg->addr);
    }
    e->kind = IPC_VM;
    e->pieces = calloc(n, sizeof *e->pieces);
    if (!e->pieces)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->npieces = (uint32_t)n;
    e->offset = blk->addr - pieces[0].addr;
    for (size_t i = 0; i < n; i++) {
        e->pieces[i] = (ipc_piece){
            .handle = pieces[i].handle, .size = pieces[i].size, .offset = pieces[i].offset};
        e->map_size += pieces[i].size;
    }
    return CUDA_SUCCESS;
}

CUresult ts_ipc_export(CUipcMemHandle *h, ts_allocator *a, CUcontext ctx, uintptr_t ptr)
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
    if (seg.kind != TS_SEGMENT_PLAIN)
        r = n ? export_probe(&pieces[0]) : CUDA_ERROR_NOT_SUPPORTED;
    if (r != CUDA_SUCCESS) {
        r = export_refused(ptr, r);
        goto done;
    }
    /* The channel first (the first export starts it), outside ipc_lock: lock order. */
    ts_ctl_address addr;
    int rc = ts_ctl_serve(&ipc_service, &addr);
    if (rc != 0) {
        ts_log_once(&log_keys[5], "cuIpcGetMemHandle/cudaIpcGetMemHandle: cannot open the socket "
                                   "other processes ask this one through (%s); refused",
                    strerror(-rc));
        r = rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
        goto done;
    }
    pthread_mutex_lock(&ipc_lock);
    ipc_export *old = export_by_addr(blk.addr);
    if (old && old->released) {
        r = CUDA_ERROR_INVALID_VALUE; /* the program freed it; only its holders keep it */
    } else if (old && old->serial == blk.serial) {
        *h = old->handle; /* the same allocation exported again: the same handle */
    } else {
        if (old) /* an earlier allocation here, freed without tessera's free path */
            export_remove((size_t)(old - exports));
        ipc_export e = {.addr = blk.addr, .serial = blk.serial, .a = a, .ctx = ctx};
        do
            ts_ctl_random(&e.id, sizeof e.id);
        while (e.id == 0 || export_by_id(e.id));
        r = export_fill(&e, &seg, &blk, pieces, n);
        if (r == CUDA_SUCCESS &&
            !table_room((void **)&exports, &cap_exports, nexports, sizeof *exports))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) {
            ipc_wire w;
            memset(&w, 0, sizeof w);
            memcpy(w.magic, IPC_WIRE_MAGIC, sizeof w.magic);
            w.pid = addr.pid;
            w.start = addr.start;
            w.secret = addr.secret;
            w.id = e.id;
            w.size = blk.size;
            w.serial = blk.serial;
            memcpy(&e.handle, &w, sizeof w);
            exports[nexports++] = e;
            __atomic_store_n(&ts_ipc_exported, (unsigned)nexports, __ATOMIC_RELEASE);
            *h = e.handle;
        } else {
            free(e.pieces);
            if (r != CUDA_ERROR_OUT_OF_MEMORY)
                r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&ipc_lock);
done:
    if (pieces != stack)
        free(pieces);
    return r;
}

int ts_ipc_on_free(uintptr_t ptr, size_t *requested)
{
    int rc = TS_IPC_NOT_EXPORTED;
    pthread_mutex_lock(&ipc_lock);
    ipc_export *e = export_by_addr(ptr);
    if (e && e->released) {
        rc = TS_IPC_INVALID; /* freed twice: the block is still its holders' */
    } else if (e && e->holders) {
        /* Ordered with the channel's opens by ipc_lock: an open counted before this keeps the
         * block; one after finds it released and hands nothing out. */
        e->released = true;
        if (requested)
            *requested = e->size;
        rc = TS_IPC_HELD;
    } else if (e) {
        export_remove((size_t)(e - exports));
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
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nexports && n < BATCH;) {
        if (exports[i].released && exports[i].holders == 0) {
            alloc[n] = exports[i].a;
            addr[n++] = exports[i].addr;
            export_remove(i);
        } else {
            i++;
        }
    }
    reapable_count();
    pthread_mutex_unlock(&ipc_lock);
    /* the program freed these before; no process holds them now */
    for (size_t i = 0; i < n; i++)
        (void)ts_free(alloc[i], addr[i]);
}

void ts_ipc_forget(ts_allocator *a)
{
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nexports;) {
        if (exports[i].a == a)
            export_remove(i);
        else
            i++;
    }
    reapable_count();
    pthread_mutex_unlock(&ipc_lock);
}

/* --- importer --------------------------------------------------------------------------------- */

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

static bool addr_same(const ts_ctl_address *x, const ipc_wire *w)
{
    return x->pid == w->pid && x->start == w->start && x->secret == w->secret;
}

/* A connection to the exporter of w, shared with the other imports from it (users counted);
 * a new one is connected and checked. */
static CUresult conn_take(const ipc_wire *w, ipc_conn **out)
{
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nconns; i++)
        if (addr_same(&conns[i]->addr, w)) {
            conns[i]->users++;
            *out = conns[i];
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&ipc_lock);
    ipc_conn *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->addr = (ts_ctl_address){.pid = w->pid, .start = w->start, .secret = w->secret};
    c->users = 1;
    int rc = ts_ctl_connect(&c->addr, &c->client);
    if (rc != 0) {
        free(c);
        if (rc == -ESRCH || rc == -ESTALE)
            ts_log_once(&conn_take, "cudaIpcOpenMemHandle: the process that exported this handle "
                                    "(pid %d) has exited; refused with CUDA_ERROR_INVALID_HANDLE",
                        (int)w->pid);
        else
            ts_log_once(&log_keys[6], "cudaIpcOpenMemHandle: cannot reach the process that "
                                         "exported this handle (pid %d): %s; refused",
                        (int)w->pid, rc == -EPERM ? "its socket is held by another process"
                                                  : strerror(-rc));
        return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&ipc_lock);
    ipc_conn *other = NULL;
    for (size_t i = 0; i < nconns && !other; i++)
        if (addr_same(&conns[i]->addr, w))
            other = conns[i]; /* another thread connected meanwhile: use one */
    bool room = other || table_room((void **)&conns, &cap_conns, nconns, sizeof *conns);
    if (other)
        other->users++;
    else if (room)
        conns[nconns++] = c;
    pthread_mutex_unlock(&ipc_lock);
    if (other || !room) {
        ts_ctl_close(c->client);
        free(c);
        if (!room)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c = other;
    }
    *out = c;
    return CUDA_SUCCESS;
}

/* One use of c ends. How the exporter learns that the open of id (if it counted one) is over:
 * IPC_ASK: a close it answers, so that once this returns the exporter has let go (a program
 * that closes, then tells the exporter, finds the block given back); IPC_TELL: a close not
 * waited for (a failed open); 0: nothing was opened. The last use closes the connection, which
 * lets go of whatever it still held. */
enum { IPC_TELL = 1, IPC_ASK = 2 };
static void conn_put(ipc_conn *c, uint64_t id, int how)
{
    if (how == IPC_ASK) {
        ipc_request q = {.h = {.type = IPC_CLOSE}, .id = id};
        ts_ctl_header a;
        unsigned nfds = 0;
        (void)ts_ctl_call(c->client, &q, sizeof q, &a, sizeof a, NULL, 0, &nfds);
    }
    pthread_mutex_lock(&ipc_lock);
    bool last = --c->users == 0;
    if (last)
        for (size_t i = 0; i < nconns; i++)
            if (conns[i] == c) {
                conns[i] = conns[--nconns];
                break;
            }
    pthread_mutex_unlock(&ipc_lock);
    if (last) {
        ts_ctl_close(c->client);
        free(c);
    } else if (how == IPC_TELL) {
        ipc_request q = {.h = {.type = IPC_CLOSE}, .id = id};
        (void)ts_ctl_send(c->client, &q, sizeof q); /* its answer is skipped by the next call */
    }
}

/* The error an importer gets for a failed call on the channel, said once per kind. */
static CUresult call_error(ssize_t rc, int32_t pid)
{
    switch (rc) {
    case -EACCES:
        ts_log_once(&log_keys[0], "cudaIpcOpenMemHandle: process %d shares its memory only with "
                                 "processes of its own user (and root); refused", (int)pid);
        return CUDA_ERROR_NOT_PERMITTED;
    case -EUSERS:
        ts_log_once(&log_keys[1], "cudaIpcOpenMemHandle: process %d serves as many processes as "
                                  "it may already; refused", (int)pid);
        return CUDA_ERROR_TOO_MANY_PEERS;
    case -ETIMEDOUT:
        ts_log_once(&log_keys[2], "cudaIpcOpenMemHandle: process %d did not answer in time; "
                                   "refused", (int)pid);
        return CUDA_ERROR_OPERATING_SYSTEM;
    case -ECONNRESET:
    case -EPIPE:
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter went away */
    case -EAGAIN:
    case -EMFILE:
        ts_log_once(&log_keys[7], "cudaIpcOpenMemHandle: %s; refused",
                    rc == -EMFILE ? "this process has no descriptor left for the block's handles"
                                  : "the exporter could not send the block's handles now");
        return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        ts_log_once(&log_keys[3], "cudaIpcOpenMemHandle: the answer of process %d is not one "
                                     "tessera gives (%s); refused",
                    (int)pid, strerror((int)-rc));
        return CUDA_ERROR_INVALID_HANDLE;
    }
}

/* The exporter's driver could not export the block's handles as descriptors. */
static CUresult driver_refused(int32_t pid, int32_t error)
{
    ts_log_once(&log_keys[4], "cudaIpcOpenMemHandle: process %d could not export the block's "
                              "memory as descriptors (error %d); refused",
                (int)pid, (int)error);
    return error == CUDA_ERROR_OUT_OF_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult malformed(int32_t pid, const char *what)
{
    ts_log_once(&malformed, "cudaIpcOpenMemHandle: the answer of process %d is not one tessera "
                            "gives (%s); refused with CUDA_ERROR_INVALID_HANDLE",
                (int)pid, what);
    return CUDA_ERROR_INVALID_HANDLE;
}

static void close_all(const int *fds, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
}

/* Map one run of handles (their descriptors fds[0..nfds), each closed here, imported or not) at
 * va + *mapped, after checking it is the run expected and fits the range. */
static CUresult map_run(int32_t pid, const ipc_run *run, uint32_t first, uint32_t count,
                        const int *fds, unsigned nfds, CUdeviceptr va, size_t map_size,
                        size_t *mapped)
{
    CUresult r = CUDA_SUCCESS;
    if (run->first != first || run->count != count || nfds != count)
        r = malformed(pid, "a run of handles not the one asked for");
    for (unsigned i = 0; i < nfds; i++) {
        uint64_t size = run->size[i];
        if (r == CUDA_SUCCESS && (size == 0 || size > map_size - *mapped))
            r = malformed(pid, "handles larger than the range");
        CUmemGenericAllocationHandle h = 0;
        if (r == CUDA_SUCCESS)
            r = ts_real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[i],
                                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        close(fds[i]); /* imported or not: this process keeps no descriptor */
        if (r != CUDA_SUCCESS)
            continue;
        r = ts_real.cuMemMap(va + *mapped, size, run->offset[i], h, 0);
        ts_real.cuMemRelease(h); /* the mapping keeps the memory */
        if (r == CUDA_SUCCESS)
            *mapped += size;
    }
    return r;
}

/* Map the block's handles in order into a range of our own, with access for our device: the
 * first run came with the open's answer (fds), the others are asked for. Every descriptor
 * received is closed, on success and on failure. */
static CUresult import_vm(ipc_conn *c, uint64_t id, const ipc_open_answer *o, const int *fds,
                          unsigned nfds, CUdeviceptr *base)
{
    CUdevice dev;
    CUdeviceptr va = 0;
    CUresult r = ts_real.cuMemImportFromShareableHandle && ts_real.cuMemAddressReserve
                     ? ts_real.cuCtxGetDevice(&dev)
                     : CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        r = ts_real.cuMemAddressReserve(&va, o->map_size, 0, 0, 0);
    if (r != CUDA_SUCCESS) {
        close_all(fds, nfds);
        return r;
    }
    size_t mapped = 0;
    uint32_t count = o->npieces < IPC_CHUNK ? o->npieces : IPC_CHUNK;
    r = map_run(c->addr.pid, &o->run, 0, count, fds, nfds, va, o->map_size, &mapped);
    for (uint32_t first = count; r == CUDA_SUCCESS && first < o->npieces; first += count) {
        count = o->npieces - first < IPC_CHUNK ? o->npieces - first : IPC_CHUNK;
        ipc_request q = {.h = {.type = IPC_PIECES}, .id = id, .first = first, .count = count};
        ipc_pieces_answer a;
        int more[IPC_CHUNK];
        unsigned got = 0;
        ssize_t n = ts_ctl_call(c->client, &q, sizeof q, &a, sizeof a, more, IPC_CHUNK, &got);
        if (n < 0)
            r = call_error(n, c->addr.pid);
        else if ((size_t)n != sizeof a || a.h.type != IPC_PIECES)
            r = malformed(c->addr.pid, "the size of a run of handles");
        else if (a.h.status == IPC_FAILED)
            r = driver_refused(c->addr.pid, a.cu_error);
        else if (a.h.status != IPC_OK)
            r = CUDA_ERROR_INVALID_HANDLE; /* gone meanwhile */
        if (r != CUDA_SUCCESS) {
            close_all(more, got);
            break;
        }
        r = map_run(c->addr.pid, &a.run, first, count, more, got, va, o->map_size, &mapped);
    }
    if (r == CUDA_SUCCESS && mapped != o->map_size)
        r = malformed(c->addr.pid, "handles that do not fill the range");
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev},
                                CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        r = ts_real.cuMemSetAccess(va, o->map_size, &desc, 1);
    }
    if (r != CUDA_SUCCESS) {
        if (mapped)
            ts_real.cuMemUnmap(va, mapped);
        ts_real.cuMemAddressFree(va, o->map_size);
        return r;
    }
    *base = va;
    return CUDA_SUCCESS;
}

/* Check the open's answer (every bound, before anything is mapped: it is another process's
 * word) and map the block. Takes the descriptors that came with it: each is closed. */
static CUresult import_answered(ipc_conn *c, const ipc_wire *w, const ipc_open_answer *o,
                                unsigned int flags, const int *fds, unsigned nfds, ipc_import *im)
{
    CUresult r = CUDA_SUCCESS;
    if (o->h.status == IPC_GONE) {
        ts_log_once(&import_answered, "cudaIpcOpenMemHandle: process %d no longer exports this "
                                      "block (freed, or the handle was altered); refused with "
                                      "CUDA_ERROR_INVALID_HANDLE", (int)w->pid);
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (o->h.status == IPC_FAILED) {
        r = driver_refused(w->pid, o->cu_error);
    } else if (o->h.status != IPC_OK || o->size != w->size || o->size == 0 ||
               o->offset >= o->map_size || o->size > o->map_size - o->offset) {
        r = malformed(w->pid, "a block outside its mapping");
    } else if ((o->kind == IPC_PLAIN && (o->npieces != 0 || nfds != 0)) ||
               (o->kind == IPC_VM && (o->npieces == 0 || o->npieces > IPC_MAX_PIECES)) ||
               (o->kind != IPC_PLAIN && o->kind != IPC_VM)) {
        r = malformed(w->pid, "its kind");
    }
    if (r != CUDA_SUCCESS) {
        close_all(fds, nfds);
        return r;
    }
    CUdeviceptr base = 0;
    if (o->kind == IPC_VM) {
        r = import_vm(c, w->id, o, fds, nfds, &base);
    } else {
        r = ts_real.cuIpcOpenMemHandle_v2(&base, o->legacy, flags);
        CUdeviceptr rb = 0;
        size_t rs = 0;
        /* the offset, checked against what the driver mapped, not against the answer */
        if (r == CUDA_SUCCESS &&
            (ts_real.cuMemGetAddressRange_v2(&rb, &rs, base) != CUDA_SUCCESS || rb != base ||
             o->offset >= rs || o->size > rs - o->offset)) {
            ts_real.cuIpcCloseMemHandle(base);
            r = malformed(w->pid, "a block outside the segment");
        }
    }
    if (r != CUDA_SUCCESS)
        return r;
    im->kind = o->kind;
    im->base = base;
    im->map_size = o->map_size;
    im->ptr = base + o->offset;
    return CUDA_SUCCESS;
}

/* Ask the exporter for the block of w and map it: *im gets the mapping. *opened: the exporter
 * may count an open for us (to be closed if this fails). */
static CUresult import_block(ipc_conn *c, const ipc_wire *w, unsigned int flags, ipc_import *im,
                             bool *opened)
{
    ipc_request q = {.h = {.type = IPC_OPEN}, .id = w->id};
    ipc_open_answer o;
    int fds[IPC_CHUNK];
    unsigned nfds = 0;
    ssize_t n = ts_ctl_call(c->client, &q, sizeof q, &o, sizeof o, fds, IPC_CHUNK, &nfds);
    *opened = n != -ECONNRESET && n != -EPIPE && n != -EACCES && n != -EUSERS;
    if (n < 0)
        return call_error(n, w->pid);
    if ((size_t)n != sizeof o || o.h.type != IPC_OPEN) {
        close_all(fds, nfds);
        return malformed(w->pid, "the size of the answer");
    }
    *opened = o.h.status == IPC_OK;
    return import_answered(c, w, &o, flags, fds, nfds, im);
}

static void unmap(const ipc_import *im)
{
    if (im->kind == IPC_PLAIN) {
        ts_real.cuIpcCloseMemHandle(im->base);
    } else {
        ts_real.cuMemUnmap(im->base, im->map_size);
        ts_real.cuMemAddressFree(im->base, im->map_size);
    }
}

CUresult ts_ipc_open(CUdeviceptr *out, const CUipcMemHandle *h, unsigned int flags)
{
    ipc_wire w;
    memcpy(&w, h, sizeof w);
    if (w.pid <= 0 || w.version != 0 || w.id == 0)
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
        if (addr_same(&im->conn->addr, &w) && im->id == w.id && im->ctx == ctx) {
            im->refs++; /* opened again in this context: the same mapping, counted */
            *out = im->ptr;
            pthread_mutex_unlock(&ipc_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&ipc_lock);

    ipc_conn *c = NULL;
    r = conn_take(&w, &c);
    if (r != CUDA_SUCCESS)
        return r;
    ipc_import im = {.conn = c, .id = w.id, .ctx = ctx, .refs = 1};
    bool opened = false;
    r = import_block(c, &w, flags, &im, &opened);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&ipc_lock);
        if (table_room((void **)&imports, &cap_imports, nimports, sizeof *imports)) {
            imports[nimports++] = im;
            __atomic_store_n(&imported, (unsigned)nimports, __ATOMIC_RELEASE);
        } else {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        pthread_mutex_unlock(&ipc_lock);
        if (r != CUDA_SUCCESS)
            unmap(&im);
    }
    if (r != CUDA_SUCCESS) {
        conn_put(c, w.id, opened ? IPC_TELL : 0);
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
    CUresult r = CUDA_SUCCESS;
    if (gone.kind == IPC_PLAIN) {
        r = ts_real.cuIpcCloseMemHandle(gone.base);
    } else {
        r = ts_real.cuMemUnmap(gone.base, gone.map_size);
        CUresult r2 = ts_real.cuMemAddressFree(gone.base, gone.map_size);
        if (r == CUDA_SUCCESS)
            r = r2;
    }
    conn_put(gone.conn, gone.id, IPC_ASK); /* after the unmap: the exporter may reuse it now */
    return r;
}
