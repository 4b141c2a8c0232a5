/* tessera: the allocator history ring, a sibling file of the stats page, as a stable ABI.
 *
 *   file      <dir>/tessera.<pid>.history.<slot>: the events of the allocator that owns slot
 *             <slot> of the stats page <dir>/tessera.<pid>; mode 0644, written only by its owner
 *   layout    [tessera_history_header: header_size bytes][event 0]...[event capacity-1],
 *             each event event_size bytes
 *   present   only when the process runs with history_events:N (N > 0); removed with the page
 *
 * Ring: event number n (counting from 0 for the first event ever written) lives at index
 * n % capacity. The writer (the allocator, under its mutex) stores seq = 2n+1, fills the event,
 * stores seq = 2n+2 (release), then written = n+1 (release). A reader loads written (acquire),
 * copies events max(0, written - capacity) .. written-1, and keeps event n only if its seq read
 * (acquire) before and after the copy was 2n+2: an event overwritten meanwhile is dropped, never
 * mixed up with its successor.
 */
#ifndef TESSERA_HISTORY_H
#define TESSERA_HISTORY_H

#include <stdint.h>

#include "tessera/stats_page.h"

/* "tsshist" followed by 0x01, as a host-order 64-bit integer (little endian shown). */
#define TESSERA_HISTORY_MAGIC UINT64_C(0x0174736968737374)
#define TESSERA_HISTORY_VERSION 1u
#define TESSERA_HISTORY_FILE_INFIX ".history."
#define TESSERA_HISTORY_MAX_FRAMES 16u
#define TESSERA_HISTORY_MAX_CAPACITY (1u << 24)

/* tessera_history_event.action: PyTorch's trace entry actions, in the snapshot's spelling. */
#define TESSERA_EV_ALLOC 0u          /* "alloc": a block handed out */
#define TESSERA_EV_FREE_REQUESTED 1u /* "free_requested": the program freed it */
#define TESSERA_EV_FREE_COMPLETED 2u /* "free_completed": its reuse fence passed; reusable */
#define TESSERA_EV_SEGMENT_ALLOC 3u  /* "segment_alloc": a device allocation */
#define TESSERA_EV_SEGMENT_FREE 4u   /* "segment_free" */
#define TESSERA_EV_SEGMENT_MAP 5u    /* "segment_map": pages mapped into a virtual range, or
                                      * pages a stitched range lent given back to their segment */
#define TESSERA_EV_SEGMENT_UNMAP 6u  /* "segment_unmap": the reverse; also pages lent to a
                                      * stitched range, leaving their segment for its time */
#define TESSERA_EV_OOM 7u            /* "oom": size = the request, addr = free device bytes */
#define TESSERA_EV_SNAPSHOT 8u       /* "snapshot": a snapshot was taken */
#define TESSERA_EV_COUNT 9u

typedef struct tessera_history_header {
    uint64_t magic;        /*  0: TESSERA_HISTORY_MAGIC, stored last (release) */
    uint32_t version;      /*  8: TESSERA_HISTORY_VERSION */
    uint32_t header_size;  /* 12: offset of event 0 */
    uint32_t event_size;   /* 16: sizeof(tessera_history_event) */
    uint32_t capacity;     /* 20: events in the ring (1 .. TESSERA_HISTORY_MAX_CAPACITY) */
    int32_t pid;           /* 24: owner, as in the stats page header */
    int32_t device;        /* 28: device ordinal of the slot */
    uint32_t slot;         /* 32: slot index in the stats page */
    uint32_t frames;       /* 36: 1 when events carry native stack frames */
    uint64_t written;      /* 40: events written so far (the next event's number) */
    uint64_t created_ns;   /* 48: CLOCK_REALTIME nanoseconds at creation */
    uint64_t reserved[9];  /* 56 .. 127 */
} tessera_history_header;

typedef struct tessera_history_event {
    uint64_t seq;      /*   0: 2n+1 while event n is written, 2n+2 once complete */
    uint64_t time_us;  /*   8: CLOCK_REALTIME microseconds */
    uint64_t addr;     /*  16: block or segment address (oom: free device bytes) */
    uint64_t size;     /*  24: bytes (alloc/free: the block's size; oom: the request) */
    uint64_t stream;   /*  32 */
    uint32_t action;   /*  40: TESSERA_EV_* */
    uint32_t nframes;  /*  44: frames[] entries in use */
    uint64_t requested;/*  48: alloc, free_requested, free_completed: the size the program
                        *      asked for; oom: the request; else 0 */
    uint64_t frames[TESSERA_HISTORY_MAX_FRAMES]; /* 56: return addresses, innermost first */
} tessera_history_event;

TESSERA_STATIC_ASSERT(sizeof(tessera_history_header) == 128, "history header size");
TESSERA_STATIC_ASSERT(sizeof(tessera_history_event) == 184, "history event size");

#endif /* TESSERA_HISTORY_H */
