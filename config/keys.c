/* The key table: one row per key drives parsing, defaults, the printout and the description
 * (config/internal.h). Adding a key means one enum value (internal.h) and one row here; a kind
 * that needs new code gets one case in parse.c's parse_value and one in format.c's format_value. */
#include "config/internal.h"

#include <stdio.h>
#include <string.h>

_Static_assert(KEY_COUNT - KEY_FIRST_NA == TS_CONFIG_NOT_APPLICABLE_COUNT,
               "TS_CONFIG_NOT_APPLICABLE_COUNT must match the table");
_Static_assert(KEY_COUNT <= 64, "the 'given' set is a uint64_t");
_Static_assert(sizeof(ts_backend_kind) == sizeof(unsigned) && sizeof(ts_fence_mode) == sizeof(unsigned),
               "enum fields are read and written as unsigned");

static const choice backend_choices[] = {
    { "native", TS_BACKEND_NATIVE },
    { "cudaMallocAsync", TS_BACKEND_CUDA_MALLOC_ASYNC },
    { NULL, 0 },
};

static const choice handle_choices[] = {
    { "page", TS_HANDLES_PAGE },
    { "geometric", TS_HANDLES_GEOMETRIC },
    { "coarse", TS_HANDLES_COARSE },
    { NULL, 0 },
};

static const choice stitch_when_choices[] = {
    { "always", TS_STITCH_ALWAYS },
    { "pressure", TS_STITCH_PRESSURE },
    { NULL, 0 },
};

static const choice fence_choices[] = {
    { "order", TS_FENCE_ORDER },
    { "events", TS_FENCE_EVENTS },
    { "sync", TS_FENCE_SYNC },
    { "none", TS_FENCE_NONE },
    { NULL, 0 },
};

#define FIELD(f) offsetof(ts_config, f)

const key_desc cfg_keys[KEY_COUNT] = {
    [KEY_MAX_SPLIT_SIZE_MB] = {
        .name = "max_split_size_mb", .kind = KIND_MIB,
        .flags = F_MIN_LARGE_SEG | F_UNLIMITED | F_NATIVE_ONLY,
        .offset = FIELD(max_split_size), .def.u = UINT64_MAX,
        .help = "Blocks of at least this size are never split and are reused only for requests "
                "close to their size. unlimited: no such blocks. Values of 1 EiB or more are "
                "refused (PyTorch caps them at SIZE_MAX / 1 MiB).",
    },
    [KEY_MAX_NON_SPLIT_ROUNDING_MB] = {
        .name = "max_non_split_rounding_mb", .kind = KIND_MIB,
        .flags = F_MIN_LARGE_SEG | F_NATIVE_ONLY,
        .offset = FIELD(max_non_split_rounding), .def.u = 20,
        .help = "How much larger than the request an oversize block may be and still be reused. "
                "Default: large_segment_size_mb.",
    },
    [KEY_GARBAGE_COLLECTION_THRESHOLD] = {
        .name = "garbage_collection_threshold", .kind = KIND_FRACTION,
        .flags = F_OPEN | F_NATIVE_ONLY,
        .offset = FIELD(garbage_collection_threshold), .def.d = 0.0,
        .range = "a number in (0, 1), exclusive, or off",
        .help = "Reclaim unused cached blocks once reserved memory exceeds this fraction of the "
                "memory cap. Needs per_process_memory_fraction < 1 (as in PyTorch).",
    },
    [KEY_ROUNDUP_POWER2_DIVISIONS] = {
        .name = "roundup_power2_divisions", .kind = KIND_DIVISIONS, .flags = F_NATIVE_ONLY,
        .offset = FIELD(roundup_power2_divisions), .def.u = 0,
        .range = "a power of two, or a list [K:V,...,>:V] with K a power of two (MiB) and V 0 "
                 "or a power of two",
        .help = "Round requests up to one of V steps between powers of two. List: K:V applies to "
                "sizes in [K, 2K) MiB, the first K:V also to all smaller sizes, >:V to every "
                "interval after the last K. 0 or 1: no power-of-two rounding.",
    },
    [KEY_EXPANDABLE_SEGMENTS] = {
        .name = "expandable_segments", .kind = KIND_BOOL,
        .offset = FIELD(expandable_segments), .def.b = false,
        .help = "Grow segments in place with CUDA virtual memory instead of one cudaMalloc each.",
    },
    [KEY_PER_PROCESS_MEMORY_FRACTION] = {
        .name = "per_process_memory_fraction", .kind = KIND_FRACTION,
        .offset = FIELD(per_process_memory_fraction), .def.d = 1.0,
        .range = "a number in [0, 1]",
        .help = "Cap the memory the allocator reserves on a device at this fraction of its total "
                "memory. 1: no cap.",
    },
    [KEY_LARGE_SEGMENT_SIZE_MB] = {
        .name = "large_segment_size_mb", .kind = KIND_MIB, .flags = F_EARLY,
        .offset = FIELD(large_segment_size), .min = 11, .max = 1024, .def.u = 20,
        .range = "an integer from 11 to 1024 MiB",
        .help = "Segment size for requests between 1 and 10 MiB; also the default and minimum of "
                "max_split_size_mb and max_non_split_rounding_mb. Applied first, wherever it is.",
    },
    [KEY_BACKEND] = {
        .name = "backend", .kind = KIND_CHOICE,
        .offset = FIELD(backend), .def.u = TS_BACKEND_NATIVE, .choices = backend_choices,
        .help = "native: tessera's caching allocator. cudaMallocAsync: tessera steps aside and "
                "passes every call through uncached.",
    },
    [KEY_CACHING] = {
        .name = "caching", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(caching), .def.b = true,
        .help = "False: every allocation goes straight to the driver (like "
                "PYTORCH_NO_CUDA_MEMORY_CACHING=1).",
    },
    [KEY_MEMORY_LIMIT] = {
        .name = "memory_limit", .kind = KIND_SIZE, .flags = F_TESSERA,
        .offset = FIELD(memory_limit), .def.u = 0,
        .range = "a size in bytes with an optional K, M, G or T suffix (binary multiples), "
                 "0 for no limit",
        .help = "Most bytes the allocator may reserve per device, e.g. 8G or 512M. 0: no limit. "
                "Memory left to the driver (managed memory, pools the program creates) counts "
                "too: a request past the limit gets the driver's out-of-memory error.",
    },
    [KEY_STATS] = {
        .name = "stats", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(stats), .def.b = true,
        .help = "Publish the statistics page in /dev/shm (read by tessera-stat).",
    },
    [KEY_OOM_REPORT] = {
        .name = "oom_report", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(oom_report), .def.b = true,
        .help = "One diagnostic line on stderr per out-of-memory (rate-limited).",
    },
    [KEY_REUSE_FENCE] = {
        .name = "reuse_fence", .kind = KIND_CHOICE, .flags = F_TESSERA,
        .offset = FIELD(reuse_fence), .def.u = TS_FENCE_ORDER, .choices = fence_choices,
        .help = "How a freed block is kept from reuse while earlier device work may touch it: "
                "order (reuse at once; later work is ordered after earlier work on the device), "
                "events (wait for per-stream events), sync (context synchronise), "
                "none (single-stream only).",
    },
    [KEY_STITCHING] = {
        .name = "stitching", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(stitching), .def.b = false,
        .help = "Map free pages of expandable segments into new virtual ranges to serve "
                "requests no single free block can.",
    },
    [KEY_STITCH_WHEN] = {
        .name = "stitch_when", .kind = KIND_CHOICE, .flags = F_TESSERA,
        .offset = FIELD(stitch_when), .def.u = TS_STITCH_ALWAYS, .choices = stitch_when_choices,
        .help = "always: stitch before growing (the least memory reserved). pressure: only once "
                "growing fails (the device or the cap is full), before the cache is released "
                "with a device synchronise: far fewer driver calls while memory is plentiful.",
    },
    [KEY_STITCH_MIN_BLOCK_MB] = {
        .name = "stitch_min_block_mb", .kind = KIND_MIB, .flags = F_TESSERA,
        .offset = FIELD(stitch_min_block), .min = TS_CONFIG_STITCH_MIN_BLOCK_LEAST_MB,
        .def.u = TS_CONFIG_STITCH_MIN_BLOCK_LEAST_MB,
        .help = "Requests below this size are never stitched.",
    },
    [KEY_STITCH_MAX_RANGES] = {
        .name = "stitch_max_ranges", .kind = KIND_U32, .flags = F_TESSERA,
        .offset = FIELD(stitch_max_ranges), .min = 1, .max = 4096, .def.u = 4096,
        .help = "Most live stitched virtual ranges per device.",
    },
    [KEY_EXPANDABLE_PAGE_MB] = {
        .name = "expandable_page_mb", .kind = KIND_MIB, .flags = F_TESSERA,
        .offset = FIELD(expandable_page), .min = 0, .max = 1024, .def.u = 0,
        .range = "an integer from 0 to 1024 MiB, 0 for the default",
        .help = "Page size of expandable segments, rounded up to the device's granularity. 0: "
                "PyTorch's (2 MiB small pool, large_segment_size_mb large pool), or the "
                "granularity (2 MiB) with defragment. Smaller pages let smaller free holes go "
                "back to the device or be stitched. At most 1024, the bound of "
                "large_segment_size_mb: a page larger than the device fails every allocation.",
    },
    [KEY_HANDLE_POLICY] = {
        .name = "handle_policy", .kind = KIND_CHOICE, .flags = F_TESSERA,
        .offset = FIELD(handle_policy), .def.u = TS_HANDLES_PAGE, .choices = handle_choices,
        .help = "How expandable segments cut new memory into physical handles. page: one per "
                "page (PyTorch's; the default without defragment). geometric: halving towards "
                "the end of each growth, about log2(growth / page) + 1 handles. coarse (the "
                "default with defragment): handles of large_segment_size_mb, the rest of a "
                "growth in one: about PyTorch's driver calls with small pages. Stitching lends "
                "any whole page of any handle; memory goes back to the device a whole handle at "
                "a time, so larger handles give back more coarsely.",
    },
    [KEY_GROWTH_BATCH_MB] = {
        .name = "growth_batch_mb", .kind = KIND_MIB, .flags = F_TESSERA,
        .offset = FIELD(growth_batch), .min = 0, .def.u = 0,
        .range = "an integer number of MiB, 0 to map only what each growth needs",
        .help = "With defragment, a segment of the large pool that grows at its end right where "
                "its last growth ended maps ahead to whole batches of this size, and the next "
                "requests are served with no driver call. With coarse handles the batch is part "
                "of the growth's handles: one create, map and grant per batch instead of per "
                "growth (the default policy's: large_segment_size_mb, one handle), and at most "
                "a quarter of what the segment maps is held ahead (those pages go back only "
                "with their handle). With a handle a page: one grant per batch, the same driver "
                "time (a GPU charges a grant per handle). Never within the last sixteenth of "
                "the cap or of the device's free memory (the last quarter with coarse handles); "
                "released with the rest of the cache. 0: map only what each growth needs.",
    },
    [KEY_DEFRAGMENT] = {
        .name = "defragment", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(defragment), .def.b = false,
        .help = "True also turns on expandable_segments and stitching unless the same string "
                "sets them. Stitching needs expandable segments: a string that leaves stitching "
                "on and sets expandable_segments:False is refused.",
    },
    [KEY_VERBOSE] = {
        .name = "verbose", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(verbose), .def.b = false,
        .help = "Print the effective configuration on stderr at start-up, and each driver entry "
                "point tessera takes over with the object that first asked for it (a check that "
                "a binary, static-cudart ones included, is really served).",
    },
    [KEY_HISTORY_EVENTS] = {
        .name = "history_events", .kind = KIND_U32, .flags = F_TESSERA,
        .offset = FIELD(history_events), .min = 0, .max = 1u << 24, .def.u = 0,
        .help = "Keep the last N allocator events per device (alloc, free, segment changes, out "
                "of memory) in a ring next to the stats page, for the device_traces of a memory "
                "snapshot. 0: no history (nothing recorded, nothing measurable spent).",
    },
    [KEY_HISTORY_FRAMES] = {
        .name = "history_frames", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(history_frames), .def.b = false,
        .help = "Record the native call stack (backtrace, 16 frames) with each history event.",
    },
    [KEY_SNAPSHOT_ON_OOM] = {
        .name = "snapshot_on_oom", .kind = KIND_PATH, .flags = F_TESSERA,
        .offset = FIELD(snapshot_on_oom),
        .range = "a file path without ':', ',' or spaces; %p: the pid, %n: a count, %%: %",
        .help = "Write a PyTorch memory snapshot (pickle; open it with PyTorch's memory_viz) to "
                "this path when an allocation fails with out of memory. The directory must be "
                "one only this user can write, not a symbolic link (a missing one is created, "
                "mode 0700; /tmp and other shared directories are refused), e.g. "
                "$HOME/tessera-oom/oom-%p-%n.pickle; one that would be refused is refused at "
                "start (TESSERA_ALLOC_CONF: as a bad key; the PyTorch variables: a warning, no "
                "snapshots). A taken name gets a number (oom-2.pickle, ...): no file is "
                "replaced but the eighth one a process writes, which each later failure's "
                "snapshot replaces, so the failure that ends the run has its snapshot. Files "
                "are mode 0600 and at most 64 MiB (the oldest history is cut, and a line says "
                "so). With history_events, the snapshot holds the events that led there; with "
                "history_frames, each event's, block's and segment's call stack, as file "
                "offsets, which tessera-stat symbolize names.",
    },
    [KEY_PINNED_CACHE] = {
        .name = "pinned_cache", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(pinned_cache), .def.b = true,
        .help = "Cache pinned host memory (cudaHostAlloc, cudaMallocHost, cuMemHostAlloc, "
                "cuMemAllocHost): buffers pinned at the size asked in whole pages (not powers "
                "of two), split and merged as the device pools split and merge blocks; a freed "
                "piece is reused once the device work queued before its free is done. False: "
                "every call goes to the driver.",
    },
    [KEY_PINNED_IDLE_S] = {
        .name = "pinned_idle_s", .kind = KIND_U32, .flags = F_TESSERA,
        .offset = FIELD(pinned_idle_s), .min = 0, .max = 86400, .def.u = 10,
        .help = "Give a cached pinned buffer back to the driver once none of it has been used "
                "for this many seconds (checked at the process's next CUDA allocation or free: "
                "no thread of its own). 0: as soon as it is free and its device work is done.",
    },
    [KEY_LENDING] = {
        .name = "lending", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(lending), .def.b = true,
        .help = "When a request cannot be served even after this process released its own "
                "cache, ask the other tessera processes of its user on the same device to give "
                "their free cached memory back, then try once more; and give free cache back "
                "when they ask. Only free memory moves, never a live byte. False: neither.",
    },
    [KEY_LENDING_WAIT_MS] = {
        .name = "lending_wait_ms", .kind = KIND_U32, .flags = F_TESSERA,
        .offset = FIELD(lending_wait_ms), .min = 1, .max = 60000, .def.u = 2000,
        .help = "The longest an out-of-memory waits for the other processes' answers (all of "
                "them together), in milliseconds; then it fails as it would have, and says who "
                "held what.",
    },
    [KEY_LENDING_ALL_USERS] = {
        .name = "lending_all_users", .kind = KIND_BOOL, .flags = F_TESSERA,
        .offset = FIELD(lending_all_users), .def.b = false,
        .help = "For a process running as root: ask the tessera processes of every user on the "
                "device, not only root's. Ignored for any other user (another user's processes "
                "refuse it).",
    },
    [KEY_RELEASE_LOCK_ON_CUDAMALLOC] = {
        .name = "release_lock_on_cudamalloc", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch: drop its device lock around cudaMalloc.",
    },
    [KEY_PINNED_USE_CUDA_HOST_REGISTER] = {
        .name = "pinned_use_cuda_host_register", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch's pinned host allocator: cudaHostRegister instead of cudaHostAlloc.",
    },
    [KEY_PINNED_NUM_REGISTER_THREADS] = {
        .name = "pinned_num_register_threads", .kind = KIND_NA_POW2, .max = 128,
        .range = "a power of two <= 128", .pytorch_default = "1",
        .help = "PyTorch's pinned host allocator: threads that pre-fault pages.",
    },
    [KEY_PINNED_USE_BACKGROUND_THREADS] = {
        .name = "pinned_use_background_threads", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch's pinned host allocator: process events on a background thread.",
    },
    [KEY_PINNED_RESERVE_SEGMENT_SIZE_MB] = {
        .name = "pinned_reserve_segment_size_mb", .kind = KIND_NA_MIB, .min = 1,
        .range = "an integer > 0 MiB", .pytorch_default = "off",
        .help = "PyTorch's pinned host allocator: one pre-allocated pinned slab.",
    },
    [KEY_PINNED_FREE_CATCH_ALL] = {
        .name = "pinned_free_catch_all", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch's pinned host allocator policy.",
    },
    [KEY_GRAPH_CAPTURE_RECORD_STREAM_REUSE] = {
        .name = "graph_capture_record_stream_reuse", .kind = KIND_NA_BOOL,
        .pytorch_default = "False",
        .help = "PyTorch: block reuse during CUDA graph capture.",
    },
    [KEY_THROW_ON_CUDAMALLOC_OOM] = {
        .name = "throw_on_cudamalloc_oom", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch: reject up front past the memory fraction.",
    },
    [KEY_EXPANDABLE_SEGMENTS_RESERVE] = {
        .name = "expandable_segments_reserve", .kind = KIND_NA_RAW,
        .range = "any value (not interpreted)", .pytorch_default = "9/8 x total",
        .help = "PyTorch: virtual address reserve per expandable segment.",
    },
    [KEY_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS] = {
        .name = "expandable_segments_reserve_by_class", .kind = KIND_NA_RAW,
        .range = "any value or [list] (not interpreted)", .pytorch_default = "unset",
        .help = "PyTorch: virtual address reserve per stream class.",
    },
    [KEY_RELEASE_LOCK_ON_HIPMALLOC] = {
        .name = "release_lock_on_hipmalloc", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch on ROCm: release_lock_on_cudamalloc.",
    },
    [KEY_PINNED_USE_HIP_HOST_REGISTER] = {
        .name = "pinned_use_hip_host_register", .kind = KIND_NA_BOOL, .pytorch_default = "False",
        .help = "PyTorch on ROCm: pinned_use_cuda_host_register.",
    },
};

#undef FIELD

bool is_not_applicable(const key_desc *k)
{
    return k->kind >= KIND_NA_BOOL;
}

unsigned key_index(const key_desc *k)
{
    return (unsigned)(k - cfg_keys);
}

unsigned na_bit(const key_desc *k)
{
    return key_index(k) - KEY_FIRST_NA;
}

const key_desc *key_lookup(const char *name)
{
    for (unsigned i = 0; i < KEY_COUNT; i++)
        if (strcmp(cfg_keys[i].name, name) == 0)
            return &cfg_keys[i];
    return NULL;
}

/* Typed access to a field of ts_config named by a table row. */
void *field_ptr(ts_config *cfg, const key_desc *k)
{
    return (char *)cfg + k->offset;
}

const void *field_cptr(const ts_config *cfg, const key_desc *k)
{
    return (const char *)cfg + k->offset;
}

unsigned get_enum(const ts_config *cfg, const key_desc *k)
{
    unsigned v;
    memcpy(&v, field_cptr(cfg, k), sizeof v);
    return v;
}

void set_enum(ts_config *cfg, const key_desc *k, unsigned v)
{
    memcpy(field_ptr(cfg, k), &v, sizeof v);
}

const char *choice_name(const choice *c, unsigned v)
{
    for (; c->name; c++)
        if (c->value == v)
            return c->name;
    return "?";
}

/* Valid values of a key for messages and describe, given the current large_segment_size. */
void cfg_range_text(const key_desc *k, size_t large_seg_mb, char *dst, size_t cap)
{
    if (k->range) {
        snprintf(dst, cap, "%s", k->range);
        return;
    }
    switch (k->kind) {
    case KIND_MIB:
        snprintf(dst, cap, "an integer from %llu to %llu MiB",
                 (unsigned long long)((k->flags & F_MIN_LARGE_SEG) ? large_seg_mb : k->min),
                 (unsigned long long)(k->max ? k->max : MIB_KEY_MAX));
        return;
    case KIND_U32:
        snprintf(dst, cap, "an integer from %llu to %llu", (unsigned long long)k->min,
                 (unsigned long long)k->max);
        return;
    case KIND_BOOL:
    case KIND_NA_BOOL:
        snprintf(dst, cap, "True or False (case-sensitive)");
        return;
    case KIND_CHOICE: {
        sbuf b;
        sb_init(&b, dst, cap);
        for (const choice *c = k->choices; c->name; c++) {
            if (c != k->choices)
                sb_str(&b, c[1].name ? ", " : " or ");
            sb_str(&b, c->name);
        }
        return;
    }
    default:
        snprintf(dst, cap, "?");
        return;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Public functions                                                                            */
/* ------------------------------------------------------------------------------------------ */

static void set_default(ts_config *cfg, const key_desc *k)
{
    switch ((enum value_kind)k->kind) {
    case KIND_MIB:
        *(size_t *)field_ptr(cfg, k) = k->def.u == UINT64_MAX ? SIZE_MAX : (size_t)k->def.u * MIB;
        break;
    case KIND_SIZE: *(size_t *)field_ptr(cfg, k) = (size_t)k->def.u; break;
    case KIND_BOOL: *(bool *)field_ptr(cfg, k) = k->def.b; break;
    case KIND_U32: *(uint32_t *)field_ptr(cfg, k) = (uint32_t)k->def.u; break;
    case KIND_FRACTION: *(double *)field_ptr(cfg, k) = k->def.d; break;
    case KIND_DIVISIONS:
        for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++)
            ((uint32_t *)field_ptr(cfg, k))[i] = (uint32_t)k->def.u;
        break;
    case KIND_CHOICE: set_enum(cfg, k, (unsigned)k->def.u); break;
    case KIND_PATH: ((char *)field_ptr(cfg, k))[0] = '\0'; break;
    default: break; /* not applicable keys: absent unless given */
    }
}

void ts_config_defaults(ts_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (unsigned i = 0; i < KEY_COUNT; i++)
        set_default(cfg, &cfg_keys[i]);
}

const char *ts_config_not_applicable_name(unsigned bit)
{
    if (bit >= TS_CONFIG_NOT_APPLICABLE_COUNT)
        return NULL;
    return cfg_keys[KEY_FIRST_NA + bit].name;
}

const char *ts_config_backend_name(ts_backend_kind backend)
{
    return choice_name(backend_choices, (unsigned)backend);
}

const char *ts_config_fence_name(ts_fence_mode mode)
{
    return choice_name(fence_choices, (unsigned)mode);
}
