/* The tessera allocator core: one instance per device (per CUDA context in the shim).
 *
 * Behaviour is PyTorch's native CUDA caching allocator (docs/DESIGN.md lists every rule and the
 * few places tessera deliberately differs), plus expandable segments and stitching over the
 * backend's virtual-memory operations.
 *
 * Thread safety: every entry point takes the instance's mutex. Lock order, outermost first:
 * the shim's context table lock, then an allocator's mutex; an allocator never takes another
 * allocator's mutex, and backend calls made under the mutex never call back into tessera.
 */
#ifndef TS_ALLOCATOR_H
#define TS_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config/config.h"
#include "tessera/stats_fields.h"

typedef struct ts_allocator ts_allocator;

/* Where the counters live: normally a device slot of the shared stats page. seq is the slot's
 * sequence lock word (odd while the allocator writes). Both may be NULL: the allocator then
 * keeps private copies. */
typedef struct ts_stats_sink {
    tessera_device_stats *stats;
    uint64_t *seq;
} ts_stats_sink;

ts_allocator *ts_allocator_create(const ts_config *cfg, const ts_backend *backend, int device,
                                  ts_stats_sink sink);

/* Tear down. release_memory: give every cached segment back to the backend first (false after
 * the device's memory already vanished, e.g. cudaDeviceReset). Live allocations are abandoned. */
void ts_allocator_destroy(ts_allocator *a, bool release_memory);

/* Allocate size bytes for work on stream. TS_OK and *out, or TS_ENOMEM (counted in num_ooms),
 * or TS_EINVAL (size 0 or out NULL). */
int ts_malloc(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out);

/* What an out-of-memory looked like, for a diagnostic in PyTorch's spirit. */
typedef struct ts_oom_info {
    int device;
    size_t requested;          /* what the program asked for */
    size_t rounded;            /* the block size it needed */
    size_t segment_size;       /* the device allocation that failed */
    size_t capacity;           /* device total */
    size_t device_free;        /* free according to the driver after the failure */
    size_t allocated;          /* allocated_bytes.all.current */
    size_t reserved;           /* reserved_bytes.all.current */
    size_t largest_free_block; /* largest cached free block */
    size_t limit;              /* the allocator's cap, 0 when none */
    bool limit_reached;        /* the cap, not the device, refused the request */
    bool expandable_segments;
    bool stitching;
    bool vm_available;         /* the device has the virtual-memory API (expandable, stitching) */
    size_t stitch_min_block;   /* bytes; requests below it are never stitched */
    size_t max_split_size;
} ts_oom_info;

/* ts_malloc that also describes an out-of-memory failure in *oom (may be NULL). */
int ts_malloc_ex(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                 ts_oom_info *oom);

/* ts_malloc_ex, except that a request the device cannot serve even after this allocator gave
 * back its own cache and retried is not counted yet: TS_EAGAIN, with *oom describing it. The
 * caller may find memory elsewhere (other processes' caches) and call again; a request it gives
 * up on is counted with ts_malloc_oom. Every other failure is counted as ts_malloc_ex counts it. */
int ts_malloc_try(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                  ts_oom_info *oom);
/* Count the out-of-memory of a request ts_malloc_try left uncounted (num_ooms, the history's oom
 * event), and describe it in *oom (may be NULL) as it stands now. */
void ts_malloc_oom(ts_allocator *a, size_t size, uintptr_t stream, ts_oom_info *oom);

/* One line (no prefix, no newline): sizes, capacity, free, allocated, reserved but unallocated,
 * largest free block, and advice that can be followed in this configuration: defragment:True or
 * expandable_segments:True when memory already reserved could serve the request (or, under a cap,
 * allocated + request fits it) and they are off and the device has virtual memory; a lower
 * stitch_min_block_mb only when the request is below it and the key is above its least value;
 * the cap only when allocated + request exceeds it and the device is larger than the cap;
 * otherwise less memory or a larger device. Returns snprintf's value. */
int ts_format_oom(const ts_oom_info *oom, char *buf, size_t len);

/* Free a pointer returned by ts_malloc. TS_OK; TS_ENOTFOUND when ptr is not inside any of this
 * allocator's segments (a foreign pointer: forward it); TS_EINVAL when it is inside one but not
 * a live allocation (double free, interior pointer). The pool is untouched on error. */
int ts_free(ts_allocator *a, uintptr_t ptr);
/* ts_free that also reports the freed allocation's requested size (may be NULL). */
int ts_free_ex(ts_allocator *a, uintptr_t ptr, size_t *requested);

/* Free, in stream order, a block the program frees on stream (cudaFreeAsync): a block allocated
 * for that same stream (stream != 0) is reusable at once by later requests on it, with no order
 * point and no fence (reuse_fence:order, none), since the stream's own order puts its later work
 * after the free and no other stream is ever handed it; any other block is freed as ts_free_ex
 * frees it. Results as ts_free_ex. */
int ts_free_on_stream(ts_allocator *a, uintptr_t ptr, uintptr_t stream, size_t *requested);

/* Stream is gone (its handle may name a new stream later): blocks freed in its order are
 * ordered like any other free before they are handed out again. */
void ts_allocator_stream_retire(ts_allocator *a, uintptr_t stream);

/* What the stream-ordered allocations served here (those made with a non-zero stream) add up
 * to, as a memory pool reports its own: used, the bytes asked for; reserved, the memory of the
 * segments made for a stream (mapped, cached blocks included), never below their live blocks;
 * each now and at its high mark (reserved's: the highest seen by an allocation or a query).
 * reset_used_high, reset_reserved_high: drop that mark to the current value first. */
typedef struct ts_stream_usage {
    size_t used, used_high, reserved, reserved_high;
} ts_stream_usage;
void ts_allocator_stream_usage(ts_allocator *a, bool reset_used_high, bool reset_reserved_high,
                               ts_stream_usage *out);

/* Memory the program holds from the driver directly, outside tessera's segments (managed memory,
 * pools left to the driver): counted in driver_bytes and against the cap (driver.c).
 * reserve: count bytes before the driver call; TS_OK, or TS_ENOMEM (counted in num_ooms) when
 * they would exceed the cap even after releasing the cache (capped false: count them whatever the
 * cap, for memory the program already holds). record: the call succeeded at addr
 * (TS_ENOMEM: no host memory to remember it; the bytes are then uncounted). unreserve: the call
 * failed. forget: addr was freed; TS_OK with its bytes uncounted, or TS_ENOTFOUND. */
int ts_allocator_driver_reserve(ts_allocator *a, size_t bytes, bool capped);
int ts_allocator_driver_record(ts_allocator *a, uintptr_t addr, size_t bytes);
void ts_allocator_driver_unreserve(ts_allocator *a, size_t bytes);
int ts_allocator_driver_forget(ts_allocator *a, uintptr_t addr, size_t *bytes);

/* Make a stream-order point now (reuse_fence:order): work issued on the device from here on is
 * ordered after all work issued before, whatever became of the blocks freed earlier. The shim
 * calls it when a context's work stops being confined to one queue (a second host thread). */
void ts_allocator_order_reuse(ts_allocator *a);

/* The program enabled peer access from device `device` to this allocator's context: grant that
 * device read-write access to every virtual-memory mapping the allocator has made and will make
 * (CUDA's peer access covers driver allocations but not cuMemMap mappings). Idempotent.
 * TS_OK; TS_EINVAL for a device outside [0, 64); TS_EUNSUPPORTED when the backend maps virtual
 * memory but cannot grant it; else the first backend failure (every mapping is still tried). */
int ts_allocator_peer_add(ts_allocator *a, int device);

/* The device's memory vanished with its context (cudaDeviceReset, cuCtxDestroy): drop every
 * segment and block without calling the backend. Current counters go to zero; accumulated
 * counters stay. The allocator remains usable (empty). */
void ts_allocator_forget_all(ts_allocator *a);

/* Count a call the shim forwarded to the driver untouched (num_passthrough_calls). */
void ts_note_passthrough(ts_allocator *a);

/* The allocator's cap in bytes (memory_limit or per_process_memory_fraction), 0 when none. */
size_t ts_allocator_cap(const ts_allocator *a);

/* Release every cached segment that holds no live allocation (torch.cuda.empty_cache). Returns
 * the number of bytes given back to the backend. */
size_t ts_empty_cache(ts_allocator *a);

/* Memory that moves between processes of one device (lend.c). What may go is what the
 * allocator's own release gives back: free blocks, the largest first, after every pending free,
 * the device synchronised before pages are unmapped; never an allocated block (one another
 * process holds over IPC included) and nothing during a capture. Each returns the bytes given
 * back to the device, and what the allocator holds then in *after (may be NULL). */
typedef struct ts_holdings {
    size_t reserved;  /* reserved_bytes.all.current */
    size_t allocated; /* allocated_bytes.all.current */
} ts_holdings;
/* Another process of the device is out of memory: give at least want bytes where that much is
 * free (counted: num_lend_gives, lend_given_bytes, lend_give_time). */
size_t ts_allocator_give(ts_allocator *a, size_t want, ts_holdings *after);
/* Release asked from outside (tessera-stat release): keep at most `keep` bytes cached
 * (counted: num_remote_releases and num_empty_cache). */
size_t ts_allocator_release_to(ts_allocator *a, size_t keep, ts_holdings *after);
void ts_allocator_holdings(ts_allocator *a, ts_holdings *out);
/* This allocator asked the other processes of its device for memory (num_lend_asks): they gave
 * back `received` bytes, the answers took wait_us, and the request was then served or not. */
void ts_allocator_note_ask(ts_allocator *a, size_t received, uint64_t wait_us, bool served);

/* Pause and resume (pause.c): every byte the allocator holds on the device copied to host
 * memory and its pages given back, every address kept reserved; then new pages mapped at the
 * same addresses and the bytes copied back. The caller keeps the program off the device
 * meanwhile (no launch, copy, allocation or free may run: shim/gate.c). A paused allocator gives
 * nothing to other processes and releases nothing. */
typedef enum ts_pause_status {
    TS_PAUSE_OK = 0,
    TS_PAUSE_ALREADY = 1,       /* pause: it is paused already */
    TS_PAUSE_NOT_PAUSED = 2,    /* resume: it is not paused */
    TS_PAUSE_CAPTURE = 3,       /* a CUDA graph capture is underway */
    TS_PAUSE_PLAIN = 4,         /* a live block lies in a plain segment (expandable segments off):
                                 * its memory could not come back at the same address */
    TS_PAUSE_DRIVER_MEMORY = 5, /* the program holds device memory from the driver itself */
    TS_PAUSE_UNSUPPORTED = 6,   /* the device offers no virtual memory or copies */
    TS_PAUSE_HOST_MEMORY = 7,   /* no host memory for the copy */
    TS_PAUSE_DEVICE = 8         /* the device failed (resume: most likely it is full now; the
                                 * allocator stays paused and may be resumed later) */
} ts_pause_status;
typedef struct ts_pause_report {
    size_t saved;     /* pause: bytes copied to the host; resume: bytes copied back */
    size_t given;     /* pause: bytes given back to the device (the free cache included) */
    size_t reserved;  /* reserved_bytes.all.current afterwards (a pause keeps the addresses) */
    size_t allocated; /* allocated_bytes.all.current */
    uint64_t time_us;
} ts_pause_report;
int ts_allocator_pause(ts_allocator *a, ts_pause_report *out);
int ts_allocator_resume(ts_allocator *a, ts_pause_report *out);
bool ts_allocator_paused(ts_allocator *a);

/* What cudaMemGetInfo/cuMemGetInfo report to a program under tessera (meminfo.c), from what the
 * device reports (dev_free, dev_total):
 *  - bytes tessera holds cached but not allocated count as free: it gives them back on demand;
 *  - with a cap (memory_limit, per_process_memory_fraction) the device looks as large as the cap,
 *    and free is at most the cap less what is allocated;
 *  - free never exceeds total, and nothing underflows.
 * One consistent reading of the allocator (taken under its mutex). free_out/total_out may be
 * NULL. */
void ts_allocator_mem_info(ts_allocator *a, size_t dev_free, size_t dev_total, size_t *free_out,
                           size_t *total_out);

/* Bytes reserved from the device but not allocated. */
size_t ts_cached_bytes(ts_allocator *a);

/* Copy of the counters (consistent: taken under the mutex). */
void ts_get_stats(ts_allocator *a, tessera_device_stats *out);

/* What tessera knows about an address. */
typedef enum ts_block_state {
    TS_BLOCK_ALLOCATED = 0,
    TS_BLOCK_PENDING = 1,  /* freed, waiting for its fence */
    TS_BLOCK_FREE = 2,
    TS_BLOCK_UNMAPPED = 3, /* virtual range of an expandable segment with no pages behind it */
    TS_BLOCK_LENT = 4      /* whole pages of an expandable segment mapped, for now, into a
                            * stitched segment: in use there, neither free nor allocated here */
} ts_block_state;

typedef enum ts_segment_kind {
    TS_SEGMENT_PLAIN = 0,      /* one seg_alloc */
    TS_SEGMENT_EXPANDABLE = 1, /* a virtual reservation with pages mapped on demand */
    TS_SEGMENT_STITCHED = 2    /* a virtual range aliasing free pages of expandable segments */
} ts_segment_kind;

typedef struct ts_block_info {
    uintptr_t addr;
    size_t size;
    size_t requested;
    ts_block_state state;
    uintptr_t stream;
    uint64_t serial; /* ALLOCATED blocks: the allocation's number in its allocator, from 1 (a
                      * block handed out again gets a new one); 0 otherwise */
} ts_block_info;

typedef struct ts_segment_info {
    uintptr_t addr;
    size_t size;      /* virtual size (mapped + unmapped for expandable segments) */
    size_t mapped;    /* bytes backed by device memory */
    bool small_pool;
    ts_segment_kind kind;
    uintptr_t stream;
    size_t nblocks;
} ts_segment_info;

/* Find the block containing addr. TS_OK with seg and blk filled (either may be NULL), or TS_ENOTFOUND. */
int ts_lookup(ts_allocator *a, uintptr_t addr, ts_segment_info *seg, ts_block_info *blk);

/* The device memory behind the live allocation that contains addr, for sharing it with another
 * process: for a plain segment nothing more than seg and blk; for a virtual-memory segment
 * (expandable or stitched) the physical handles mapped over [blk.addr, blk.addr + blk.size), in
 * address order (each whole: a handle maps only whole), up to max of them in pieces, and their
 * count in *npieces. TS_OK; TS_ENOTFOUND when addr is in no live allocation (free, cached,
 * foreign). Any output may be NULL. */
typedef struct ts_backing_piece {
    uintptr_t addr; /* where the handle is mapped in this process */
    size_t size;
    uint64_t handle; /* the backend's handle (vm_create) */
    size_t offset;   /* where in the handle the mapping starts */
} ts_backing_piece;
int ts_lookup_backing(ts_allocator *a, uintptr_t addr, ts_segment_info *seg, ts_block_info *blk,
                      ts_backing_piece *pieces, size_t max, size_t *npieces);

/* Visit every segment in address order, and each of its blocks in address order. A callback
 * returning non-zero stops the walk. Runs under the mutex: callbacks must not call tessera. */
typedef struct ts_walker {
    void *user;
    int (*segment)(void *user, const ts_segment_info *seg);
    int (*block)(void *user, const ts_segment_info *seg, const ts_block_info *blk);
} ts_walker;
void ts_allocator_walk(ts_allocator *a, const ts_walker *w);
/* The same without taking the mutex: only from inside an observer callback. */
void ts_allocator_walk_locked(ts_allocator *a, const ts_walker *w);

/* Called under the mutex after a segment-level change, an out-of-memory, and every `every` ops,
 * so a publisher can refresh a segment map. It runs with the stats sequence lock already odd
 * (inside the write window), so what it writes next to the counters is covered by the same lock.
 * NULL fn removes it. */
typedef void (*ts_observer_fn)(void *user, ts_allocator *a);
void ts_allocator_set_observer(ts_allocator *a, ts_observer_fn fn, void *user, uint32_t every);

/* A word (normally in the stats page) that readers change to ask for a fresh segment map: the
 * observer then runs at the next operation instead of waiting for `every` ops. NULL: none. */
void ts_allocator_set_observer_request(ts_allocator *a, const uint64_t *word);

/* Largest free cached block in bytes (mapped, any stream). */
size_t ts_largest_free_block(ts_allocator *a);

/* The heap validator: walks every structure and checks every invariant (no overlap, neighbours
 * merged, free sets consistent, accounting conserved, reserved == sum of segments). Returns 0
 * when sound, else -1 with a one-line reason in why. Cost: O(blocks). For tests and debug. */
int ts_allocator_check(ts_allocator *a, char *why, size_t whylen);

/* Install a segment that already exists on the device with the given block layout (blocks tile
 * it in address order; adjacent free pieces are merged). For tools that replay a recorded
 * state. TS_OK, TS_EINVAL (bad tiling or overlap), TS_ENOMEM. Not counted as a device call. */
typedef struct ts_import_block {
    uintptr_t addr;
    size_t size;
    size_t requested;
    bool allocated;
} ts_import_block;
int ts_allocator_import_segment(ts_allocator *a, uintptr_t addr, size_t size, uintptr_t stream,
                                bool small_pool, const ts_import_block *blocks, size_t n);

/* Give back the plain segment starting at addr if it is entirely free. TS_OK, TS_EINVAL (it
 * holds live or pending blocks), TS_ENOTFOUND. */
int ts_allocator_release_segment(ts_allocator *a, uintptr_t addr);

/* The sizes the core would use (size.c), exposed for tests and tools: the roundup_power2_divisions
 * entry for a size, the rounded request, the segment size that serves it. */
uint32_t ts_round_divisions(const ts_config *cfg, size_t size);
size_t ts_round_size(const ts_config *cfg, size_t size);
size_t ts_allocation_size(const ts_config *cfg, size_t rounded);

const ts_config *ts_allocator_config(const ts_allocator *a);
int ts_allocator_device(const ts_allocator *a);

#endif /* TS_ALLOCATOR_H */
