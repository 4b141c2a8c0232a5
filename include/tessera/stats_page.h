/* tessera: the live stats page, one file per process, as a stable binary ABI.
 *
 * Public and self-contained: a third-party reader (C, C++, or any language that can read
 * fixed-width little or big endian integers from a file) needs only this header and
 * tessera/stats_fields.h. docs/stats-page.md describes every byte and the reading protocol.
 *
 *   file      <dir>/tessera.<pid>, dir = $TESSERA_STATS_DIR or /dev/shm, mode 0644,
 *             written only by its owner process, read by anyone
 *   layout    [tessera_page_header: header_size bytes][slot 0]...[slot slot_count-1],
 *             each slot slot_size bytes; total_size = header_size + slot_count * slot_size
 *   integers  fixed width, host byte order, naturally aligned; no pointers, no size_t, no bool
 *   strings   fixed char arrays, always NUL-terminated inside their array
 *
 * Publication: the owner fills the header, then stores magic last with release semantics. A
 * reader that sees magic == TESSERA_PAGE_MAGIC (load with acquire) sees a complete header. The
 * header never changes after that, except `flags`, and `control_secret`, set once (from 0) when
 * the owner's control channel starts.
 *
 * Consistency: each slot has its own sequence lock (`seq`), with a single writer (the allocator
 * of that device, under its own mutex). Writer: seq odd, update fields with relaxed atomic
 * stores, seq even (release). Reader: load seq (acquire); if odd, retry; copy; acquire fence;
 * load seq again; accept only if unchanged. The writer never waits for readers; readers retry a
 * bounded number of times. No cross-process lock exists anywhere.
 *
 * Liveness: (pid, start_time_ticks, boot_id, pid_namespace) identify the owner. A page whose pid
 * is gone, or now names another process (different start time), or that was written before a
 * reboot (different boot id) is stale. The identity prefix (bytes 0..127 of the header) keeps
 * its meaning in every layout version, so stale pages of any version can be recognised.
 */
#ifndef TESSERA_STATS_PAGE_H
#define TESSERA_STATS_PAGE_H

#include <stdint.h>
#include <string.h>

#include "tessera/stats_fields.h"

#ifdef __cplusplus
#define TESSERA_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TESSERA_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* "tessera" followed by 0x01, read as a host-order 64-bit integer (little endian shown). */
#define TESSERA_PAGE_MAGIC UINT64_C(0x0161726573736574)
#define TESSERA_PAGE_LAYOUT_VERSION 3u
/* The oldest layout a reader of this header reads: layout 2 is layout 3 with the header's
 * control_secret and the slots' device_uuid still reserved (zero), so it reads as a page whose
 * process has no control channel and whose devices are unknown. */
#define TESSERA_PAGE_LAYOUT_OLDEST 2u

#define TESSERA_PAGE_FILE_PREFIX "tessera."
#define TESSERA_PAGE_DEFAULT_DIR "/dev/shm"
#define TESSERA_PAGE_DIR_ENV "TESSERA_STATS_DIR"

/* Layout 1 sizes. */
#define TESSERA_PAGE_HEADER_SIZE 4096u
#define TESSERA_PAGE_SLOTS 16u            /* slots a tessera writer creates */
#define TESSERA_PAGE_MAX_SLOT_COUNT 64u   /* the most a reader accepts */
#define TESSERA_PAGE_MAX_SEGMENTS 512u    /* segments recorded per slot map */
#define TESSERA_PAGE_MAX_BLOCKS 4096u     /* blocks recorded per slot map (all segments) */
#define TESSERA_PAGE_BOOT_ID_LEN 40u
#define TESSERA_PAGE_VERSION_LEN 32u
#define TESSERA_PAGE_CMDLINE_LEN 512u
#define TESSERA_PAGE_CONFIG_LEN 2048u
#define TESSERA_PAGE_STATS_AREA 2048u     /* bytes reserved for tessera_device_stats */
#define TESSERA_PAGE_SLOT_SIZE 94208u     /* 23 pages of 4 KiB */

/* tessera_page_header.flags */
#define TESSERA_PAGE_FLAG_CLOSED 1u /* the owner closed the page without removing it */

/* tessera_page_slot.state */
#define TESSERA_SLOT_FREE 0u
#define TESSERA_SLOT_CLAIMING 1u /* being (re)initialised by its owner: skip */
#define TESSERA_SLOT_ACTIVE 2u

/* tessera_page_map.flags */
#define TESSERA_MAP_VALID 1u     /* a map has been published (else the map is empty) */
#define TESSERA_MAP_TRUNCATED 2u /* more segments or blocks existed than were recorded */
#define TESSERA_MAP_HISTORY 4u   /* history_written is set: the slot has a history ring */

/* tessera_page_segment.pool: a tessera_pool_index (never TESSERA_POOL_ALL). */
/* tessera_page_segment.kind */
#define TESSERA_SEGMENT_PLAIN 0u
#define TESSERA_SEGMENT_EXPANDABLE 1u
#define TESSERA_SEGMENT_STITCHED 2u
#define TESSERA_SEGMENT_KIND_COUNT 3u

/* tessera_page_block.state */
#define TESSERA_BLOCK_ALLOCATED 0u
#define TESSERA_BLOCK_PENDING 1u  /* freed by the program, waiting for its reuse fence */
#define TESSERA_BLOCK_FREE 2u
#define TESSERA_BLOCK_UNMAPPED 3u /* part of an expandable segment with no memory behind it */
#define TESSERA_BLOCK_LENT 4u     /* whole pages mapped, for now, into a stitched segment too: in
                                   * use there, counted there (written since tessera 0.2; before,
                                   * such blocks were written as allocated) */
#define TESSERA_BLOCK_STATE_COUNT 5u

typedef struct tessera_page_header {
    /* --- identity prefix: same offsets and meaning in every layout version --- */
    uint64_t magic;            /*   0: TESSERA_PAGE_MAGIC, stored last (release) */
    uint32_t layout_version;   /*   8: TESSERA_PAGE_LAYOUT_VERSION */
    uint32_t header_size;      /*  12: offset of slot 0 */
    uint32_t slot_size;        /*  16 */
    uint32_t slot_count;       /*  20 */
    uint64_t total_size;       /*  24: header_size + slot_count * slot_size */
    int32_t pid;               /*  32: owner, as its own pid namespace numbers it */
    uint32_t flags;            /*  36: TESSERA_PAGE_FLAG_*; the only mutable header field */
    uint64_t start_time_ticks; /*  40: field 22 of /proc/<pid>/stat (clock ticks after boot) */
    uint64_t pid_namespace;    /*  48: inode of /proc/self/ns/pid; 0 when unknown */
    uint64_t created_ns;       /*  56: CLOCK_REALTIME nanoseconds when the page was created */
    char boot_id[TESSERA_PAGE_BOOT_ID_LEN]; /* 64: /proc/sys/kernel/random/boot_id, "" if unknown */
    uint32_t clock_ticks_per_second;        /* 104: sysconf(_SC_CLK_TCK) of the owner */
    uint32_t identity_reserved[5];          /* 108 */
    /* --- layout 1 --- */
    uint32_t max_segments;     /* 128: TESSERA_PAGE_MAX_SEGMENTS */
    uint32_t max_blocks;       /* 132: TESSERA_PAGE_MAX_BLOCKS */
    uint32_t stats_words;      /* 136: int64 words of tessera_device_stats in use (no tail) */
    uint32_t reserved0;        /* 140 */
    /* --- layout 3 (0 in layout 2) --- */
    uint64_t control_secret;   /* 144: the owner's control channel is the abstract Unix socket
                                * "tessera.<pid>.<16 hex digits of this>" (docs/DESIGN.md); 0: it
                                * has none (yet) */
    uint64_t reserved1;        /* 152 */
    char version[TESSERA_PAGE_VERSION_LEN]; /* 160: tessera version, e.g. "0.1.0" */
    char cmdline[TESSERA_PAGE_CMDLINE_LEN]; /* 192: /proc/self/cmdline, NULs as spaces */
    char config[TESSERA_PAGE_CONFIG_LEN];   /* 704: effective configuration (ts_config_format) */
    uint8_t reserved_end[1344];             /* 2752 .. 4095 */
} tessera_page_header;

typedef struct tessera_page_segment {
    uint64_t address;       /*  0: device virtual address */
    uint64_t size;          /*  8: virtual size */
    uint64_t mapped;        /* 16: bytes backed by device memory */
    uint64_t stream;        /* 24: the stream it was allocated for */
    uint32_t first_block;   /* 32: index of its first block in blocks[] */
    uint32_t nblocks;       /* 36: blocks recorded */
    uint32_t nblocks_total; /* 40: blocks it had (more than nblocks when truncated) */
    uint8_t pool;           /* 44: TESSERA_POOL_SMALL or TESSERA_POOL_LARGE */
    uint8_t kind;           /* 45: TESSERA_SEGMENT_* */
    uint16_t reserved;      /* 46 */
} tessera_page_segment;

typedef struct tessera_page_block {
    uint64_t size;     /* 0: bytes; blocks of a segment are contiguous, in address order */
    uint32_t state;    /* 8: TESSERA_BLOCK_* */
    uint32_t slack;    /* 12: allocated and pending blocks: size minus the size the program
                        * asked for (saturated at UINT32_MAX); else 0. 0 in pages written
                        * before tessera 0.2 (the field was reserved) */
} tessera_page_block;

/* Summary of the segment map; totals cover every segment, recorded or not. */
typedef struct tessera_page_map {
    uint64_t ops;             /*   0: stats.num_ops when the map was taken */
    uint64_t time_ns;         /*   8: CLOCK_REALTIME nanoseconds when taken */
    uint64_t largest_free;    /*  16: largest free (mapped, cached) block */
    uint64_t free_bytes;      /*  24: bytes in free blocks */
    uint64_t pending_bytes;   /*  32: bytes in blocks waiting for their fence */
    uint64_t allocated_bytes; /*  40: bytes in allocated blocks */
    uint64_t unmapped_bytes;  /*  48: unmapped bytes of expandable segments */
    uint64_t segment_bytes;   /*  56: sum of segment virtual sizes */
    uint64_t mapped_bytes;    /*  64: sum of segment mapped bytes */
    uint64_t checksum;        /*  72: tessera_page_map_checksum() of this map */
    uint32_t nsegments;       /*  80: segments recorded (<= max_segments) */
    uint32_t nblocks;         /*  84: blocks recorded (<= max_blocks) */
    uint32_t total_segments;  /*  88 */
    uint32_t total_blocks;    /*  92 */
    uint32_t free_blocks;     /*  96: number of free blocks */
    uint32_t flags;           /* 100: TESSERA_MAP_* */
    uint64_t request_served;  /* 104: the slot's map_request value this map was taken for */
    uint64_t history_written; /* 112: with TESSERA_MAP_HISTORY, the `written` count of the
                               * slot's history ring when the map was taken: events numbered
                               * below it happened before the layout, the others after (a reader
                               * cuts the history there, so that layout and history are one
                               * instant); 0 in pages written before tessera 0.3 */
    uint64_t reserved[1];     /* 120 */
} tessera_page_map;

/* The part of a slot a reader copies for the counters alone (2240 bytes). */
typedef struct tessera_page_slot_head {
    uint32_t state;       /*    0: TESSERA_SLOT_* (only ACTIVE slots are meaningful) */
    int32_t device;       /*    4: device ordinal */
    uint64_t context_id;  /*    8: label of the CUDA context, chosen by the owner */
    uint64_t seq;         /*   16: sequence lock: odd while the owner writes */
    uint64_t claimed_ns;  /*   24: CLOCK_REALTIME nanoseconds when the slot was claimed */
    uint64_t map_request; /*   32: written by readers (the only such word): a value different
                           * from map.request_served asks the owner to publish a fresh map at
                           * its next allocator operation; readers write increasing values
                           * (CLOCK_REALTIME ns) and wait for request_served >= theirs */
    /* layout 3 (0 in layout 2): the device's UUID as the driver gives it (cuDeviceGetUuid), the
     * same in every process that uses that device or MIG instance; all zero: unknown */
    uint8_t device_uuid[16]; /* 40 */
    uint64_t reserved;       /* 56 */
    tessera_device_stats stats; /* 64: maintained by the allocator of this device */
    uint8_t stats_pad[TESSERA_PAGE_STATS_AREA - sizeof(tessera_device_stats)];
    tessera_page_map map; /* 2112: summary of the segment map below */
} tessera_page_slot_head;

typedef struct tessera_page_slot {
    tessera_page_slot_head head;                              /*     0 */
    tessera_page_segment segments[TESSERA_PAGE_MAX_SEGMENTS]; /*  2240 */
    tessera_page_block blocks[TESSERA_PAGE_MAX_BLOCKS];       /* 26816 */
    uint8_t reserved_end[1856];                               /* 92352 .. 94207 */
} tessera_page_slot;

TESSERA_STATIC_ASSERT(sizeof(tessera_device_stats) % 8 == 0, "stats are int64 words");
TESSERA_STATIC_ASSERT(sizeof(tessera_device_stats) <= TESSERA_PAGE_STATS_AREA,
                      "tessera_device_stats outgrew its area of the slot");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_header) == TESSERA_PAGE_HEADER_SIZE, "header size");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_segment) == 48, "segment entry size");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_block) == 16, "block entry size");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_map) == 128, "map header size");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_slot_head) == 2240, "slot head size");
TESSERA_STATIC_ASSERT(sizeof(tessera_page_slot) == TESSERA_PAGE_SLOT_SIZE, "slot size");
TESSERA_STATIC_ASSERT(TESSERA_PAGE_SLOT_SIZE % 4096 == 0, "slots are whole pages");

/* The map checksum: 64-bit FNV-1a over 64-bit words, folded over the map header (checksum
 * field taken as 0) then the recorded segments, then the recorded blocks. Readers recompute it
 * to reject a map that does not match its summary. */
#define TESSERA_FNV_OFFSET UINT64_C(0xcbf29ce484222325)
#define TESSERA_FNV_PRIME UINT64_C(0x100000001b3)

static inline uint64_t tessera_page_fold(uint64_t h, const void *data, uint64_t nwords)
{
    const unsigned char *p = (const unsigned char *)data;
    for (uint64_t i = 0; i < nwords; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, sizeof w);
        h ^= w;
        h *= TESSERA_FNV_PRIME;
    }
    return h;
}

static inline uint64_t tessera_page_map_checksum(const tessera_page_map *m,
                                                 const tessera_page_segment *segs,
                                                 const tessera_page_block *blocks)
{
    tessera_page_map copy = *m;
    copy.checksum = 0;
    uint64_t h = tessera_page_fold(TESSERA_FNV_OFFSET, &copy, sizeof copy / 8);
    h = tessera_page_fold(h, segs, (uint64_t)m->nsegments * (sizeof *segs / 8));
    h = tessera_page_fold(h, blocks, (uint64_t)m->nblocks * (sizeof *blocks / 8));
    return h;
}

/* --- The sequence-lock protocol, for writers and C readers (GCC/Clang __atomic builtins). --- */

/* Writer: enter (seq becomes odd). Call with the writer's own mutex held. */
static inline void tessera_seq_write_begin(uint64_t *seq)
{
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

/* Writer: leave (seq becomes even, publishing every store made since begin). */
static inline void tessera_seq_write_end(uint64_t *seq)
{
    uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 1, __ATOMIC_RELEASE);
}

/* Writer: one field inside a write section. */
static inline void tessera_stat_store(int64_t *field, int64_t value)
{
    __atomic_store_n(field, value, __ATOMIC_RELAXED);
}

/* Reader: the value to compare against; odd means "writer inside, retry". */
static inline uint64_t tessera_seq_read_begin(const uint64_t *seq)
{
    return __atomic_load_n(seq, __ATOMIC_ACQUIRE);
}

/* Reader: after copying with relaxed loads; non-zero means the copy may be torn: retry. */
static inline int tessera_seq_read_retry(const uint64_t *seq, uint64_t begin)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return (begin & 1u) != 0 || __atomic_load_n(seq, __ATOMIC_RELAXED) != begin;
}

#endif /* TESSERA_STATS_PAGE_H */
