/* tessera configuration parser.
 *
 * One table (`keys`, indexed by `enum key_id` with designated initialisers) drives everything:
 * parsing, defaults (ts_config_defaults), documentation (ts_config_describe) and the printout of
 * the effective configuration (ts_config_format). Adding a key means adding one enum value and
 * one table row; a kind that needs new code gets one case in parse_value and one in format_value.
 *
 * Syntax (PyTorch's tokenizer): the separators are , : [ ] and whitespace is dropped everywhere,
 * even inside words ("max split" reads as "maxsplit"). Grammar, checked here although the newest
 * PyTorch tokenizer ignores separator mistakes:
 *
 *   config := [ entry { ',' entry } ] [ ',' ]
 *   entry  := WORD ':' ( WORD | '[' [ item { ',' item } ] [ ',' ] ']' )
 *   item   := WORD ':' WORD
 *
 * The string is walked twice. Pass 1 checks the syntax and applies large_segment_size_mb, which
 * sets the default and the minimum of max_split_size_mb and max_non_split_rounding_mb wherever it
 * appears. Pass 2 applies every other key. Both passes recover from a syntax error the same way
 * (skip to the next ',' outside brackets), so they see the same entries; only pass 1 reports
 * syntax problems. Nothing here allocates: tokens are copied into fixed buffers, and a single
 * token longer than TS_CONFIG_TOKEN_MAX is a syntax error, whatever the length of the string.
 */
#include "config/config.h"

#include <langinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define DIVISIONS_MAX ((uint64_t)1 << 31) /* largest power of two a uint32_t entry holds */
#define SHOW_MAX 48                       /* characters of offending text quoted in a message */
#define UNKNOWN_SEEN_MAX 32               /* distinct unknown keys remembered per call */

/* ------------------------------------------------------------------------------------------ */
/* The key table                                                                               */
/* ------------------------------------------------------------------------------------------ */

enum key_id {
    /* PyTorch keys that tessera honours */
    KEY_MAX_SPLIT_SIZE_MB,
    KEY_MAX_NON_SPLIT_ROUNDING_MB,
    KEY_GARBAGE_COLLECTION_THRESHOLD,
    KEY_ROUNDUP_POWER2_DIVISIONS,
    KEY_EXPANDABLE_SEGMENTS,
    KEY_PER_PROCESS_MEMORY_FRACTION,
    KEY_LARGE_SEGMENT_SIZE_MB,
    KEY_BACKEND,
    /* tessera keys */
    KEY_CACHING,
    KEY_MEMORY_LIMIT,
    KEY_STATS,
    KEY_OOM_REPORT,
    KEY_REUSE_FENCE,
    KEY_STITCHING,
    KEY_STITCH_WHEN,
    KEY_STITCH_MIN_BLOCK_MB,
    KEY_STITCH_MAX_RANGES,
    KEY_EXPANDABLE_PAGE_MB,
    KEY_HANDLE_POLICY,
    KEY_DEFRAGMENT,
    KEY_VERBOSE,
    KEY_HISTORY_EVENTS,
    KEY_HISTORY_FRAMES,
    KEY_SNAPSHOT_ON_OOM,
    /* PyTorch keys accepted but not applicable; bit (id - KEY_FIRST_NA) of not_applicable_mask */
    KEY_RELEASE_LOCK_ON_CUDAMALLOC,
    KEY_PINNED_USE_CUDA_HOST_REGISTER,
    KEY_PINNED_NUM_REGISTER_THREADS,
    KEY_PINNED_USE_BACKGROUND_THREADS,
    KEY_PINNED_RESERVE_SEGMENT_SIZE_MB,
    KEY_PINNED_FREE_CATCH_ALL,
    KEY_GRAPH_CAPTURE_RECORD_STREAM_REUSE,
    KEY_THROW_ON_CUDAMALLOC_OOM,
    KEY_EXPANDABLE_SEGMENTS_RESERVE,
    KEY_EXPANDABLE_SEGMENTS_RESERVE_BY_CLASS,
    KEY_RELEASE_LOCK_ON_HIPMALLOC,
    KEY_PINNED_USE_HIP_HOST_REGISTER,
    KEY_COUNT,
    KEY_FIRST_NA = KEY_RELEASE_LOCK_ON_CUDAMALLOC
};

_Static_assert(KEY_COUNT - KEY_FIRST_NA == TS_CONFIG_NOT_APPLICABLE_COUNT,
               "TS_CONFIG_NOT_APPLICABLE_COUNT must match the table");
_Static_assert(KEY_COUNT <= 64, "the 'given' set is a uint64_t");
_Static_assert(sizeof(ts_backend_kind) == sizeof(unsigned) && sizeof(ts_fence_mode) == sizeof(unsigned),
               "enum fields are read and written as unsigned");

enum value_kind {
    KIND_MIB = 1,  /* size_t bytes, written as an integer number of MiB */
    KIND_SIZE,     /* size_t bytes, integer with an optional K/M/G/T suffix */
    KIND_BOOL,     /* bool, True or False */
    KIND_U32,      /* uint32_t in [min, max] */
    KIND_FRACTION, /* double in [0, 1], or (0, 1) with F_OPEN */
    KIND_DIVISIONS,
    KIND_CHOICE, /* enum field, one of choices[] */
    KIND_PATH,   /* char[TS_CONFIG_PATH_MAX] path template, checked by path_template_ok */
    KIND_NA_BOOL,
    KIND_NA_POW2, /* pinned_num_register_threads */
    KIND_NA_MIB,  /* pinned_reserve_segment_size_mb */
    KIND_NA_RAW   /* kept as text, never interpreted */
};

enum key_flag {
    F_EARLY = 1 << 0,         /* applied in pass 1, before every other key */
    F_MIN_LARGE_SEG = 1 << 1, /* minimum (and default) come from large_segment_size_mb */
    F_UNLIMITED = 1 << 2,     /* 'unlimited' stores SIZE_MAX */
    F_OPEN = 1 << 3,          /* fraction in (0, 1) exclusive; 'off' stores 0 */
    F_NATIVE_ONLY = 1 << 4,   /* has no effect with backend:cudaMallocAsync */
    F_TESSERA = 1 << 5        /* tessera's own key (describe groups by this) */
};

typedef struct choice {
    const char *name;
    unsigned value;
} choice;

typedef struct key_desc {
    const char *name;
    unsigned char kind;
    unsigned char flags;
    size_t offset;         /* field in ts_config; unused by KIND_NA_* */
    uint64_t min, max;     /* KIND_MIB (in MiB; max 0: capped at SIZE_MAX / 1 MiB, else an
                            * error above it), KIND_U32 */
    union {
        bool b;
        uint64_t u; /* KIND_MIB: MiB, UINT64_MAX for unlimited; KIND_SIZE: bytes */
        double d;
    } def;
    const choice *choices; /* KIND_CHOICE, terminated by a NULL name */
    const char *range;     /* value syntax, as in "(must be <range>)"; NULL: generated */
    const char *pytorch_default; /* KIND_NA_*: PyTorch's default, for describe */
    const char *help;
} key_desc;

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

static const key_desc keys[KEY_COUNT] = {
    [KEY_MAX_SPLIT_SIZE_MB] = {
        .name = "max_split_size_mb", .kind = KIND_MIB,
        .flags = F_MIN_LARGE_SEG | F_UNLIMITED | F_NATIVE_ONLY,
        .offset = FIELD(max_split_size), .def.u = UINT64_MAX,
        .help = "Blocks of at least this size are never split and are reused only for requests "
                "close to their size. unlimited: no such blocks. Larger values are capped at "
                "SIZE_MAX / 1 MiB, as in PyTorch.",
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
        .help = "Most bytes the allocator may reserve per device, e.g. 8G or 512M. 0: no limit.",
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
        .offset = FIELD(stitch_min_block), .min = 2, .def.u = 2,
        .help = "Requests below this size are never stitched.",
    },
    [KEY_STITCH_MAX_RANGES] = {
        .name = "stitch_max_ranges", .kind = KIND_U32, .flags = F_TESSERA,
        .offset = FIELD(stitch_max_ranges), .min = 1, .max = 4096, .def.u = 4096,
        .help = "Most live stitched virtual ranges per device.",
    },
    [KEY_EXPANDABLE_PAGE_MB] = {
        .name = "expandable_page_mb", .kind = KIND_MIB, .flags = F_TESSERA,
        .offset = FIELD(expandable_page), .min = 0, .def.u = 0,
        .range = "an integer number of MiB, 0 for the default",
        .help = "Page size of expandable segments, rounded up to the device's granularity. 0: "
                "PyTorch's (2 MiB small pool, large_segment_size_mb large pool), or the "
                "granularity (2 MiB) with defragment. Smaller pages let smaller free holes go "
                "back to the device or be stitched.",
    },
    [KEY_HANDLE_POLICY] = {
        .name = "handle_policy", .kind = KIND_CHOICE, .flags = F_TESSERA,
        .offset = FIELD(handle_policy), .def.u = TS_HANDLES_PAGE, .choices = handle_choices,
        .help = "How expandable segments cut new memory into physical handles. page: one per "
                "page (PyTorch's). geometric: halving towards the end of each growth, about "
                "log2(growth / page) + 1 handles: fewer driver calls, coarser give-back. "
                "coarse: handles of large_segment_size_mb, the rest of a growth in one: about "
                "PyTorch's driver calls with small pages, give-back and stitching by 20 MiB.",
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
                "this path when an allocation fails with out of memory, at most 8 per process. "
                "An existing file is never replaced. With history_events, the snapshot holds the "
                "events that led there.",
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

static bool is_not_applicable(const key_desc *k)
{
    return k->kind >= KIND_NA_BOOL;
}

static unsigned key_index(const key_desc *k)
{
    return (unsigned)(k - keys);
}

static unsigned na_bit(const key_desc *k)
{
    return key_index(k) - KEY_FIRST_NA;
}

static const key_desc *key_lookup(const char *name)
{
    for (unsigned i = 0; i < KEY_COUNT; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* Typed access to a field of ts_config named by a table row. */
static void *field_ptr(ts_config *cfg, const key_desc *k)
{
    return (char *)cfg + k->offset;
}

static const void *field_cptr(const ts_config *cfg, const key_desc *k)
{
    return (const char *)cfg + k->offset;
}

static unsigned get_enum(const ts_config *cfg, const key_desc *k)
{
    unsigned v;
    memcpy(&v, field_cptr(cfg, k), sizeof v);
    return v;
}

static void set_enum(ts_config *cfg, const key_desc *k, unsigned v)
{
    memcpy(field_ptr(cfg, k), &v, sizeof v);
}

static const char *choice_name(const choice *c, unsigned v)
{
    for (; c->name; c++)
        if (c->value == v)
            return c->name;
    return "?";
}

/* ------------------------------------------------------------------------------------------ */
/* Small helpers: bounded string building, numbers                                             */
/* ------------------------------------------------------------------------------------------ */

/* snprintf-like builder: len counts what was needed, buf always stays NUL-terminated. */
typedef struct sbuf {
    char *buf;
    size_t cap;
    size_t len;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len < b->cap) {
        size_t room = b->cap - 1 - b->len;
        size_t k = n < room ? n : room;
        memcpy(b->buf + b->len, s, k);
        b->buf[b->len + k] = '\0';
    }
    b->len += n;
}

static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    /* Longer than tmp: write straight into the caller's buffer. */
    if (b->len < b->cap) {
        va_start(ap, fmt);
        vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

static void sb_init(sbuf *b, char *buf, size_t cap)
{
    b->buf = cap ? buf : NULL;
    b->cap = buf ? cap : 0;
    b->len = 0;
    if (b->cap)
        b->buf[0] = '\0';
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_pow2(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static unsigned log2_floor(uint64_t v) /* v > 0 */
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

enum { NUM_OK = 0, NUM_SYNTAX = -1, NUM_RANGE = -2 };

/* Decimal digits only: no sign, no spaces, no trailing text (stricter than std::stoull). */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!is_digit(*s))
        return NUM_SYNTAX;
    for (; *s; s++) {
        if (!is_digit(*s))
            return NUM_SYNTAX;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return NUM_RANGE; /* keep scanning would only confirm it is too large */
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* A decimal number: [-]digits[.digits][e[+-]digits] (at least one mantissa digit). Checked by
 * hand, then converted by strtod with '.' swapped for the locale's radix character, so that a
 * host process running under a decimal-comma locale reads "0.5" as one half. */
static int parse_double(const char *s, double *out)
{
    const char *p = s;
    unsigned digits = 0;
    if (*p == '-')
        p++;
    while (is_digit(*p))
        p++, digits++;
    const char *dot = NULL;
    if (*p == '.') {
        dot = p++;
        while (is_digit(*p))
            p++, digits++;
    }
    if (digits == 0)
        return NUM_SYNTAX;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!is_digit(*p))
            return NUM_SYNTAX;
        while (is_digit(*p))
            p++;
    }
    if (*p)
        return NUM_SYNTAX;

    char tmp[TS_CONFIG_TOKEN_MAX + 16];
    const char *radix = nl_langinfo(RADIXCHAR);
    size_t rlen = radix ? strlen(radix) : 0;
    const char *conv = s;
    if (dot && rlen && strcmp(radix, ".") != 0) {
        size_t head = (size_t)(dot - s), tail = strlen(dot + 1);
        if (head + rlen + tail + 1 > sizeof tmp)
            return NUM_SYNTAX;
        memcpy(tmp, s, head);
        memcpy(tmp + head, radix, rlen);
        memcpy(tmp + head + rlen, dot + 1, tail + 1);
        conv = tmp;
    }
    char *end;
    double v = strtod(conv, &end);
    if (*end)
        return NUM_SYNTAX;
    if (v != v || v > 1e308 || v < -1e308)
        return NUM_RANGE;
    *out = v == 0 ? 0.0 : v; /* no negative zero */
    return NUM_OK;
}

/* Shortest %g spelling that reads back to the same double, always with '.' as the radix. */
static void format_double(double d, char *buf, size_t n)
{
    for (int prec = 1; prec <= 17; prec++) {
        char raw[64];
        snprintf(raw, sizeof raw, "%.*g", prec, d);
        size_t o = 0;
        bool in_radix = false;
        for (const char *r = raw; *r && o + 1 < n; r++) {
            bool plain = is_digit(*r) || *r == '-' || *r == '+' || *r == 'e';
            if (plain) {
                buf[o++] = *r;
                in_radix = false;
            } else if (!in_radix) {
                buf[o++] = '.'; /* a (possibly multibyte) locale radix */
                in_radix = true;
            }
        }
        buf[o] = '\0';
        double back;
        if (parse_double(buf, &back) == NUM_OK && back == d)
            return;
    }
}

/* Quote untrusted text for a message: at most SHOW_MAX characters, control bytes escaped. */
static void show(char *dst, size_t cap, const char *s, size_t n)
{
    sbuf b;
    sb_init(&b, dst, cap);
    size_t i;
    for (i = 0; i < n && i < SHOW_MAX; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            sb_printf(&b, "\\x%02x", c);
        else
            sb_put(&b, (const char *)&s[i], 1);
    }
    if (i < n)
        sb_str(&b, "...");
}

/* ------------------------------------------------------------------------------------------ */
/* Tokenizer                                                                                   */
/* ------------------------------------------------------------------------------------------ */

enum tok_type { T_END, T_WORD, T_COLON, T_COMMA, T_LBRACKET, T_RBRACKET };

typedef struct token {
    enum tok_type type;
    size_t pos;                          /* first character, in the original string */
    size_t len;                          /* characters, whitespace removed; may exceed the max */
    char text[TS_CONFIG_TOKEN_MAX + 1]; /* NUL-terminated, cut at TS_CONFIG_TOKEN_MAX */
} token;

static enum tok_type sep_type(char c)
{
    switch (c) {
    case ':': return T_COLON;
    case ',': return T_COMMA;
    case '[': return T_LBRACKET;
    case ']': return T_RBRACKET;
    default: return T_WORD;
    }
}

static void next_token(const char *s, size_t *i, token *t)
{
    while (is_space(s[*i]))
        (*i)++;
    t->pos = *i;
    t->len = 0;
    t->text[0] = '\0';
    if (s[*i] == '\0') {
        t->type = T_END;
        return;
    }
    t->type = sep_type(s[*i]);
    if (t->type != T_WORD) {
        t->text[0] = s[*i];
        t->text[1] = '\0';
        t->len = 1;
        (*i)++;
        return;
    }
    for (; s[*i] && sep_type(s[*i]) == T_WORD; (*i)++) {
        if (is_space(s[*i]))
            continue;
        if (t->len < TS_CONFIG_TOKEN_MAX)
            t->text[t->len] = s[*i];
        t->len++;
    }
    t->text[t->len < TS_CONFIG_TOKEN_MAX ? t->len : TS_CONFIG_TOKEN_MAX] = '\0';
}

static bool token_too_long(const token *t)
{
    return t->len > TS_CONFIG_TOKEN_MAX;
}

/* "',' at position 7", "'abc' at position 7", "the end" */
static void show_token(char *dst, size_t cap, const token *t)
{
    if (t->type == T_END) {
        snprintf(dst, cap, "the end");
        return;
    }
    char q[SHOW_MAX * 4 + 8];
    show(q, sizeof q, t->text, strlen(t->text));
    snprintf(dst, cap, "'%s'%s", q, token_too_long(t) ? "..." : "");
}

/* ------------------------------------------------------------------------------------------ */
/* Parser state and problem reporting                                                          */
/* ------------------------------------------------------------------------------------------ */

typedef struct parser {
    const char *text;
    const char *var;
    ts_config_mode mode;
    ts_config_diag *diag;
    ts_config_warn_fn warn;
    void *user;
    int pass;       /* 1: syntax and F_EARLY keys; 2: everything else */
    bool failed;    /* strict: *diag holds the first problem */
    uint64_t given; /* bit per key_id: applied successfully */
    ts_config cfg;  /* work copy; *out is written only at the end */
    uint64_t unknown_seen[UNKNOWN_SEEN_MAX];
    unsigned unknown_count;
} parser;

/* Report one problem. Returns true when parsing must stop (strict mode). */
static bool problem(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool problem(parser *p, const char *fmt, ...)
{
    char msg[sizeof p->diag->message];
    sbuf b;
    sb_init(&b, msg, sizeof msg);
    sb_printf(&b, "%s: ", p->var);
    va_list ap;
    va_start(ap, fmt);
    if (b.len < sizeof msg)
        vsnprintf(msg + b.len, sizeof msg - b.len, fmt, ap);
    va_end(ap);
    if (p->mode == TS_CONFIG_STRICT) {
        if (!p->failed && p->diag)
            memcpy(p->diag->message, msg, sizeof msg);
        p->failed = true;
        return true;
    }
    size_t n = strlen(msg);
    snprintf(msg + n, sizeof msg - n, "; ignored");
    if (p->warn)
        p->warn(p->user, msg);
    return false;
}

/* Informational line (not applicable keys, backend notes): both modes, after a good parse. */
static void note(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(parser *p, const char *fmt, ...)
{
    if (!p->warn)
        return;
    char msg[sizeof p->diag->message];
    int n = snprintf(msg, sizeof msg, "%s: ", p->var);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg)
        vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    p->warn(p->user, msg);
}

/* Syntax problems are found by both passes but reported by pass 1 only. */
static bool syntax_problem(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool syntax_problem(parser *p, const char *fmt, ...)
{
    if (p->pass != 1)
        return false;
    char msg[sizeof p->diag->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return problem(p, "%s", msg);
}

/* ------------------------------------------------------------------------------------------ */
/* Values                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* One syntactically valid entry, handed to the key's handler. */
typedef struct entry {
    const key_desc *key;
    size_t key_pos;
    const token *val; /* the value; for a list, its '[' */
    size_t list_end;  /* lists: index just after ']' */
} entry;

static bool is_list(const entry *e)
{
    return e->val->type == T_LBRACKET;
}

/* Whitespace-free text of the value (a word, or a list from '[' to ']'). Returns its length. */
static size_t value_text(const parser *p, const entry *e, char *dst, size_t cap)
{
    if (!is_list(e)) {
        snprintf(dst, cap, "%s", e->val->text);
        return e->val->len;
    }
    size_t n = 0;
    for (size_t i = e->val->pos; i < e->list_end; i++) {
        if (is_space(p->text[i]))
            continue;
        if (n + 1 < cap)
            dst[n] = p->text[i];
        n++;
    }
    if (cap)
        dst[n < cap ? n : cap - 1] = '\0';
    return n;
}

/* Valid values of a key for messages and describe, given the current large_segment_size. */
static void range_text(const key_desc *k, size_t large_seg_mb, char *dst, size_t cap)
{
    if (k->range) {
        snprintf(dst, cap, "%s", k->range);
        return;
    }
    switch (k->kind) {
    case KIND_MIB:
        snprintf(dst, cap, "an integer >= %llu MiB",
                 (unsigned long long)((k->flags & F_MIN_LARGE_SEG) ? large_seg_mb : k->min));
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

/* Value problems. They return true ("there was a problem"); p->failed says whether to stop. */

/* "key 'k' at position P: value 'v' <what> (must be <range>)" */
static bool bad_value(parser *p, const entry *e, const char *what)
{
    char text[TS_CONFIG_TOKEN_MAX + 1], q[SHOW_MAX * 4 + 8], range[256];
    size_t n = value_text(p, e, text, sizeof text);
    show(q, sizeof q, text, n < sizeof text ? n : sizeof text - 1);
    range_text(e->key, p->cfg.large_segment_size / MIB, range, sizeof range);
    problem(p, "key '%s' at position %zu: value '%s'%s %s (must be %s)", e->key->name, e->key_pos,
            q, n >= sizeof text ? "..." : "", what, range);
    return true;
}

/* A problem with one item of a list: "key 'k' at position P: <part> 't' at position Q <what> (<range>)" */
static bool bad_item(parser *p, const entry *e, const char *part, const token *t, const char *what,
                     const char *range)
{
    char q[SHOW_MAX * 4 + 8];
    show(q, sizeof q, t->text, strlen(t->text));
    problem(p, "key '%s' at position %zu: %s '%s' at position %zu %s (%s)", e->key->name,
            e->key_pos, part, q, t->pos, what, range);
    return true;
}

static const char *num_problem(int r)
{
    return r == NUM_RANGE ? "is out of range" : "is not an integer";
}

static bool parse_bool(const char *s, bool *out)
{
    if (strcmp(s, "True") == 0)
        *out = true;
    else if (strcmp(s, "False") == 0)
        *out = false;
    else
        return false;
    return true;
}

/* Integer with an optional binary suffix: K, M, G, T (any case), optionally followed by B or iB. */
static int parse_size(const char *s, size_t *out)
{
    char digits[TS_CONFIG_TOKEN_MAX + 1];
    size_t n = 0;
    while (is_digit(s[n]))
        n++;
    if (n == 0 || n >= sizeof digits)
        return NUM_SYNTAX;
    memcpy(digits, s, n);
    digits[n] = '\0';
    unsigned shift = 0;
    const char *suf = s + n;
    if (*suf) {
        switch (*suf) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        case 't': case 'T': shift = 40; break;
        default: return NUM_SYNTAX;
        }
        suf++;
        if (strcmp(suf, "") != 0 && strcmp(suf, "B") != 0 && strcmp(suf, "iB") != 0 &&
            strcmp(suf, "b") != 0 && strcmp(suf, "ib") != 0)
            return NUM_SYNTAX;
    }
    uint64_t v;
    int r = parse_u64(digits, &v);
    if (r != NUM_OK)
        return r;
    if (v > ((uint64_t)SIZE_MAX >> shift))
        return NUM_RANGE;
    *out = (size_t)(v << shift);
    return NUM_OK;
}

/* list iteration over an entry that pass 1 already checked */
static bool list_next(const char *s, size_t *i, token *k, token *v)
{
    token t;
    next_token(s, i, k);
    if (k->type != T_WORD)
        return false; /* ']' */
    next_token(s, i, &t); /* ':' */
    next_token(s, i, v);
    size_t save = *i;
    next_token(s, i, &t); /* ',' or ']' */
    if (t.type == T_RBRACKET)
        *i = save;
    return true;
}

static bool parse_divisions(parser *p, const entry *e)
{
    uint32_t *table = field_ptr(&p->cfg, e->key);
    uint64_t v;
    if (!is_list(e)) {
        int r = parse_u64(e->val->text, &v);
        if (r != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (!is_pow2(v))
            return bad_value(p, e, "is not a power of two");
        if (v > DIVISIONS_MAX)
            return bad_value(p, e, "is too large");
        for (unsigned i = 0; i < TS_ROUNDUP_INTERVALS; i++)
            table[i] = (uint32_t)v;
        return false;
    }

    static const char interval_range[] = "intervals are sizes in MiB that are powers of two, "
                                         "or '>' for all later intervals";
    static const char division_range[] = "must be 0 or a power of two <= 2147483648";
    uint32_t work[TS_ROUNDUP_INTERVALS];
    memcpy(work, table, sizeof work);
    bool seen = false; /* an explicit K:V came before */
    unsigned last = 0;
    size_t i = e->val->pos + 1;
    token k, val;
    while (list_next(p->text, &i, &k, &val)) {
        int r = parse_u64(val.text, &v);
        if (r != NUM_OK)
            return bad_item(p, e, "division", &val, num_problem(r), division_range);
        if (v != 0 && !is_pow2(v))
            return bad_item(p, e, "division", &val, "is not 0 or a power of two", division_range);
        if (v > DIVISIONS_MAX)
            return bad_item(p, e, "division", &val, "is too large", division_range);
        if (strcmp(k.text, ">") == 0) {
            for (unsigned j = seen ? last + 1 : 0; j < TS_ROUNDUP_INTERVALS; j++)
                work[j] = (uint32_t)v;
            continue;
        }
        uint64_t mib;
        r = parse_u64(k.text, &mib);
        if (r != NUM_OK)
            return bad_item(p, e, "interval", &k, num_problem(r), interval_range);
        if (!is_pow2(mib))
            return bad_item(p, e, "interval", &k, "is not a power of two", interval_range);
        unsigned idx = log2_floor(mib);
        if (idx > TS_ROUNDUP_INTERVALS - 1)
            idx = TS_ROUNDUP_INTERVALS - 1;
        if (!seen)
            for (unsigned j = 0; j < idx; j++)
                work[j] = (uint32_t)v;
        work[idx] = (uint32_t)v;
        last = idx;
        seen = true;
    }
    memcpy(table, work, sizeof work);
    return false;
}

/* Apply one entry to p->cfg. Returns true if there was a problem, in which case nothing was
 * written: every handler checks the whole value before storing it. */
/* A path template: printable ASCII without spaces, and % only as %p, %n or %%. The file itself
 * is created later with O_EXCL|O_NOFOLLOW, so the template never needs to be trusted further. */
static bool path_template_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c >= 0x7f)
            return false;
        if (c == '%') {
            s++;
            if (*s != 'p' && *s != 'n' && *s != '%')
                return false;
        }
    }
    return true;
}

static bool parse_value(parser *p, const entry *e)
{
    const key_desc *k = e->key;
    ts_config *cfg = &p->cfg;
    const char *s = e->val->text;
    uint64_t v;
    int r;

    if (is_list(e) && k->kind != KIND_DIVISIONS && k->kind != KIND_NA_RAW)
        return bad_value(p, e, "is a list");

    switch ((enum value_kind)k->kind) {
    case KIND_MIB: {
        size_t *f = field_ptr(cfg, k);
        if ((k->flags & F_UNLIMITED) && strcmp(s, "unlimited") == 0) {
            *f = SIZE_MAX;
            break;
        }
        if ((r = parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        uint64_t min = (k->flags & F_MIN_LARGE_SEG) ? cfg->large_segment_size / MIB : k->min;
        if (v < min)
            return bad_value(p, e, "is too small");
        /* A bound where the value is a segment size: one larger than any device makes every
         * request it applies to fail (with an out-of-memory line blaming a full device). */
        if (k->max && v > k->max)
            return bad_value(p, e, "is too large");
        if (v > SIZE_MAX / MIB) /* PyTorch caps at SIZE_MAX / 1 MiB */
            v = SIZE_MAX / MIB;
        *f = (size_t)v * MIB;
        break;
    }
    case KIND_SIZE:
        if ((r = parse_size(s, field_ptr(cfg, k))) != NUM_OK)
            return bad_value(p, e, r == NUM_RANGE ? "is too large" : "is not a size");
        break;
    case KIND_BOOL:
        if (!parse_bool(s, field_ptr(cfg, k)))
            return bad_value(p, e, "is not a boolean");
        break;
    case KIND_U32:
        if ((r = parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (v < k->min)
            return bad_value(p, e, "is too small");
        if (v > k->max)
            return bad_value(p, e, "is too large");
        *(uint32_t *)field_ptr(cfg, k) = (uint32_t)v;
        break;
    case KIND_FRACTION: {
        double d;
        if ((k->flags & F_OPEN) && strcmp(s, "off") == 0) {
            d = 0.0;
        } else {
            if ((r = parse_double(s, &d)) != NUM_OK)
                return bad_value(p, e, r == NUM_RANGE ? "is out of range" : "is not a number");
            bool ok = (k->flags & F_OPEN) ? (d > 0.0 && d < 1.0) : (d >= 0.0 && d <= 1.0);
            if (!ok)
                return bad_value(p, e, "is out of range");
        }
        *(double *)field_ptr(cfg, k) = d;
        break;
    }
    case KIND_DIVISIONS:
        if (parse_divisions(p, e))
            return true;
        break;
    case KIND_CHOICE: {
        const choice *c;
        for (c = k->choices; c->name; c++)
            if (strcmp(c->name, s) == 0)
                break;
        if (!c->name)
            return bad_value(p, e, "is not a valid option");
        set_enum(cfg, k, c->value);
        break;
    }
    case KIND_PATH: {
        char *dst = field_ptr(cfg, k);
        if (value_text(p, e, dst, TS_CONFIG_PATH_MAX) >= TS_CONFIG_PATH_MAX) {
            dst[0] = '\0';
            return bad_value(p, e, "is too long");
        }
        if (!path_template_ok(dst)) {
            dst[0] = '\0';
            return bad_value(p, e, "is not a path template");
        }
        break;
    }
    case KIND_NA_BOOL: {
        bool b;
        if (!parse_bool(s, &b))
            return bad_value(p, e, "is not a boolean");
        uint32_t bit = UINT32_C(1) << na_bit(k);
        cfg->not_applicable.bools = b ? (cfg->not_applicable.bools | bit)
                                      : (cfg->not_applicable.bools & ~bit);
        break;
    }
    case KIND_NA_POW2:
        if ((r = parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (!is_pow2(v))
            return bad_value(p, e, "is not a power of two");
        if (v > k->max)
            return bad_value(p, e, "is too large");
        cfg->not_applicable.pinned_num_register_threads = (uint32_t)v;
        break;
    case KIND_NA_MIB:
        if ((r = parse_u64(s, &v)) != NUM_OK)
            return bad_value(p, e, num_problem(r));
        if (v < k->min)
            return bad_value(p, e, "is too small");
        if (v > SIZE_MAX)
            return bad_value(p, e, "is out of range");
        cfg->not_applicable.pinned_reserve_segment_size_mb = (size_t)v;
        break;
    case KIND_NA_RAW: {
        char *dst = key_index(k) == KEY_EXPANDABLE_SEGMENTS_RESERVE
                        ? cfg->not_applicable.expandable_segments_reserve
                        : cfg->not_applicable.expandable_segments_reserve_by_class;
        char tmp[TS_CONFIG_RAW_MAX];
        if (value_text(p, e, tmp, sizeof tmp) >= sizeof tmp) {
            char what[64];
            snprintf(what, sizeof what, "is too long (tessera keeps at most %d characters)",
                     TS_CONFIG_RAW_MAX - 1);
            return bad_value(p, e, what);
        }
        memcpy(dst, tmp, sizeof tmp);
        break;
    }
    }
    return false;
}

/* ------------------------------------------------------------------------------------------ */
/* Unknown keys                                                                                */
/* ------------------------------------------------------------------------------------------ */

static unsigned edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned row[64];
    if (lb >= sizeof row / sizeof row[0])
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The closest key within edit distance 2, or the key this one lacks the "_mb" unit of. */
static const char *suggest(const char *name)
{
    const char *best = NULL;
    unsigned best_d = 3;
    size_t ln = strlen(name);
    for (unsigned i = 0; i < KEY_COUNT; i++) {
        size_t lk = strlen(keys[i].name);
        if (lk == ln + 3 && strncmp(keys[i].name, name, ln) == 0 &&
            strcmp(keys[i].name + ln, "_mb") == 0)
            return keys[i].name;
        if ((ln > lk ? ln - lk : lk - ln) > 2)
            continue;
        unsigned d = edit_distance(name, keys[i].name);
        if (d < best_d) {
            best_d = d;
            best = keys[i].name;
        }
    }
    return best;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void unknown_key(parser *p, const token *key)
{
    if (p->mode == TS_CONFIG_LENIENT) {
        uint64_t h = hash_name(key->text);
        for (unsigned i = 0; i < p->unknown_count; i++)
            if (p->unknown_seen[i] == h)
                return; /* warned about already */
        if (p->unknown_count < UNKNOWN_SEEN_MAX)
            p->unknown_seen[p->unknown_count++] = h;
    }
    char q[SHOW_MAX * 4 + 8];
    show(q, sizeof q, key->text, key->len);
    const char *s = suggest(key->text);
    if (s)
        problem(p, "unknown key '%s' at position %zu (did you mean '%s'?)", q, key->pos, s);
    else
        problem(p, "unknown key '%s' at position %zu (see docs/configuration.md for the keys)", q,
                key->pos);
}

/* ------------------------------------------------------------------------------------------ */
/* The walk                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Skip to just after the next ',' outside brackets (or to the end). */
static void recover(const char *s, size_t *i, int depth)
{
    token t;
    for (;;) {
        next_token(s, i, &t);
        switch (t.type) {
        case T_END: return;
        case T_LBRACKET: depth = 1; break;
        case T_RBRACKET: depth = 0; break;
        case T_COMMA:
            if (depth == 0)
                return;
            break;
        default: break;
        }
    }
}

static void apply_entry(parser *p, const token *key, const entry *e0)
{
    const key_desc *k = key_lookup(key->text);
    if (!k) {
        if (p->pass == 2)
            unknown_key(p, key);
        return;
    }
    bool early = (k->flags & F_EARLY) != 0;
    if (early != (p->pass == 1))
        return;
    entry e = *e0;
    e.key = k;
    if (!parse_value(p, &e))
        p->given |= UINT64_C(1) << key_index(k);
}

/* Walk the whole string once. Returns -1 if a strict problem stopped it. */
static int walk(parser *p)
{
    const char *s = p->text;
    size_t i = 0;
    token key, t, val;
    char found[SHOW_MAX * 4 + 16], kq[SHOW_MAX * 4 + 8];

    for (;;) {
        next_token(s, &i, &key);
        if (key.type == T_END)
            return 0;
        if (key.type != T_WORD) {
            if (syntax_problem(p, "position %zu: found '%c' where a key was expected "
                                  "(syntax: key:value,key:value,...)", key.pos, key.text[0]))
                return -1;
            if (key.type != T_COMMA)
                recover(s, &i, key.type == T_LBRACKET);
            continue;
        }
        show(kq, sizeof kq, key.text, strlen(key.text));
        if (token_too_long(&key)) {
            if (syntax_problem(p, "position %zu: key '%s' is too long (at most %d characters)",
                               key.pos, kq, TS_CONFIG_TOKEN_MAX))
                return -1;
            recover(s, &i, 0);
            continue;
        }

        next_token(s, &i, &t);
        if (t.type != T_COLON) {
            show_token(found, sizeof found, &t);
            if (syntax_problem(p, "key '%s' at position %zu: expected ':' at position %zu but "
                                  "found %s (syntax: key:value)", kq, key.pos, t.pos, found))
                return -1;
            if (t.type == T_END)
                return 0;
            if (t.type != T_COMMA)
                recover(s, &i, t.type == T_LBRACKET);
            continue;
        }

        next_token(s, &i, &val);
        entry e = { .key = NULL, .key_pos = key.pos, .val = &val, .list_end = 0 };
        if (val.type == T_WORD) {
            if (token_too_long(&val)) {
                if (syntax_problem(p, "key '%s' at position %zu: value at position %zu is too "
                                      "long (at most %d characters)", kq, key.pos, val.pos,
                                   TS_CONFIG_TOKEN_MAX))
                    return -1;
                recover(s, &i, 0);
                continue;
            }
        } else if (val.type == T_LBRACKET) {
            /* list: WORD ':' WORD { ',' WORD ':' WORD } [','] ']' */
            bool bad = false;
            for (;;) {
                token ik, ic, iv, is;
                next_token(s, &i, &ik);
                if (ik.type == T_RBRACKET)
                    break;
                const token *culprit = NULL;
                const char *expected = NULL;
                if (ik.type != T_WORD || token_too_long(&ik)) {
                    culprit = &ik, expected = "K:V or ']'";
                } else {
                    next_token(s, &i, &ic);
                    if (ic.type != T_COLON) {
                        culprit = &ic, expected = "':'";
                    } else {
                        next_token(s, &i, &iv);
                        if (iv.type != T_WORD || token_too_long(&iv)) {
                            culprit = &iv, expected = "a value";
                        } else {
                            next_token(s, &i, &is);
                            if (is.type == T_RBRACKET)
                                break;
                            if (is.type != T_COMMA)
                                culprit = &is, expected = "',' or ']'";
                        }
                    }
                }
                if (!culprit)
                    continue;
                if (culprit->type == T_END) {
                    if (syntax_problem(p, "key '%s' at position %zu: the list opened at position "
                                          "%zu is not closed (expected %s but reached the end)",
                                       kq, key.pos, val.pos, expected))
                        return -1;
                    return 0;
                }
                show_token(found, sizeof found, culprit);
                if (syntax_problem(p, "key '%s' at position %zu: expected %s at position %zu in "
                                      "the list but found %s%s (syntax: [K:V,K:V,...])", kq,
                                   key.pos, expected, culprit->pos, found,
                                   token_too_long(culprit) ? " (too long)" : ""))
                    return -1;
                recover(s, &i, culprit->type == T_RBRACKET ? 0 : 1);
                bad = true;
                break;
            }
            if (bad)
                continue;
            e.list_end = i;
        } else {
            show_token(found, sizeof found, &val);
            if (syntax_problem(p, "key '%s' at position %zu: missing value at position %zu "
                                  "(found %s)", kq, key.pos, val.pos, found))
                return -1;
            if (val.type == T_END)
                return 0;
            if (val.type != T_COMMA)
                recover(s, &i, 0);
            continue;
        }

        next_token(s, &i, &t);
        if (t.type != T_END && t.type != T_COMMA) {
            show_token(found, sizeof found, &t);
            if (syntax_problem(p, "key '%s' at position %zu: expected ',' or the end at position "
                                  "%zu but found %s (syntax: key:value,key:value)", kq, key.pos,
                               t.pos, found))
                return -1;
            recover(s, &i, t.type == T_LBRACKET);
            continue;
        }
        apply_entry(p, &key, &e);
        if (p->failed)
            return -1;
        if (t.type == T_END)
            return 0;
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
        set_default(cfg, &keys[i]);
}

/* tessera's default policy, for a string (or no string) that says nothing about expandable
 * segments, stitching or defragment: defragment with coarse handles, stitching only under
 * pressure, chosen by the rule in docs/BENCHMARKS.md ("The default, after IPC"). Any of those
 * three keys, in any variable, gives the policy it names instead: expandable_segments:False is
 * PyTorch's policy, expandable_segments:True PyTorch's expandable segments. */
static void default_policy(parser *p)
{
    const uint64_t names_policy = (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS) |
                                  (UINT64_C(1) << KEY_STITCHING) | (UINT64_C(1) << KEY_DEFRAGMENT);
    if (p->given & names_policy)
        return;
    p->cfg.defragment = p->cfg.expandable_segments = p->cfg.stitching = true;
    if (!(p->given & (UINT64_C(1) << KEY_HANDLE_POLICY)))
        p->cfg.handle_policy = TS_HANDLES_COARSE;
    if (!(p->given & (UINT64_C(1) << KEY_STITCH_WHEN)))
        p->cfg.stitch_when = TS_STITCH_PRESSURE;
}

int ts_config_parse(ts_config *out, const char *text, const char *varname, ts_config_mode mode,
                    ts_config_diag *diag, ts_config_warn_fn warn, void *user)
{
    parser p;
    memset(&p, 0, sizeof p);
    p.text = text ? text : "";
    p.var = varname ? varname : "config";
    p.mode = mode == TS_CONFIG_STRICT ? TS_CONFIG_STRICT : TS_CONFIG_LENIENT;
    p.diag = diag;
    p.warn = warn;
    p.user = user;
    if (diag)
        diag->message[0] = '\0';
    ts_config_defaults(&p.cfg);

    p.pass = 1;
    if (walk(&p) != 0)
        return -1;
    if (!(p.given & (UINT64_C(1) << KEY_MAX_NON_SPLIT_ROUNDING_MB)))
        p.cfg.max_non_split_rounding = p.cfg.large_segment_size;
    p.pass = 2;
    if (walk(&p) != 0)
        return -1;

    default_policy(&p);
    if (p.cfg.defragment && (p.given & (UINT64_C(1) << KEY_DEFRAGMENT))) {
        if (!(p.given & (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS)))
            p.cfg.expandable_segments = true;
        if (!(p.given & (UINT64_C(1) << KEY_STITCHING)))
            p.cfg.stitching = true;
    }
    /* Stitching maps pages of expandable segments: it cannot run without them. A string that
     * asks for both is refused (strict) or has expandable segments win over the "False". */
    if (p.cfg.stitching && !p.cfg.expandable_segments &&
        (p.given & (UINT64_C(1) << KEY_EXPANDABLE_SEGMENTS))) {
        bool by_defragment = !(p.given & (UINT64_C(1) << KEY_STITCHING));
        if (problem(&p, "stitching:True%s needs expandable segments, and expandable_segments:False "
                        "is given: drop one of them",
                    by_defragment ? " (from defragment:True)" : ""))
            return -1;
    }
    ts_config_resolve(&p.cfg, NULL);
    for (unsigned i = KEY_FIRST_NA; i < KEY_COUNT; i++)
        if (p.given & (UINT64_C(1) << i))
            p.cfg.not_applicable_mask |= UINT32_C(1) << (i - KEY_FIRST_NA);

    /* notes, one line each */
    if (p.cfg.backend == TS_BACKEND_CUDA_MALLOC_ASYNC) {
        char list[512];
        sbuf b;
        sb_init(&b, list, sizeof list);
        for (unsigned i = 0; i < KEY_COUNT; i++) {
            if ((keys[i].flags & F_NATIVE_ONLY) && (p.given & (UINT64_C(1) << i))) {
                sb_str(&b, b.len ? ", " : "");
                sb_str(&b, keys[i].name);
            }
        }
        if (b.len)
            note(&p, "backend:cudaMallocAsync ignores %s (tessera passes allocations through "
                     "uncached)", list);
    }
    for (unsigned i = KEY_FIRST_NA; i < KEY_COUNT; i++)
        if (p.given & (UINT64_C(1) << i))
            note(&p, "key '%s' is not applicable to tessera (accepted and ignored)",
                 keys[i].name);

    *out = p.cfg;
    return 0;
}

int ts_config_from_env(ts_config *out, const char **source, ts_config_diag *diag,
                       ts_config_warn_fn warn, void *user)
{
    static const struct {
        const char *name;
        ts_config_mode mode;
    } vars[] = {
        { "TESSERA_ALLOC_CONF", TS_CONFIG_STRICT },
        { "PYTORCH_CUDA_ALLOC_CONF", TS_CONFIG_LENIENT },
        { "PYTORCH_ALLOC_CONF", TS_CONFIG_LENIENT },
    };
    if (source)
        *source = NULL;
    if (diag)
        diag->message[0] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i].name);
        if (!v)
            continue;
        if (source)
            *source = vars[i].name;
        return ts_config_parse(out, v, vars[i].name, vars[i].mode, diag, warn, user);
    }
    return ts_config_parse(out, "", NULL, TS_CONFIG_STRICT, diag, warn, user);
}

static void format_divisions(sbuf *b, const uint32_t *t)
{
    unsigned a = 0; /* end of the first run */
    while (a + 1 < TS_ROUNDUP_INTERVALS && t[a + 1] == t[0])
        a++;
    if (a == TS_ROUNDUP_INTERVALS - 1) {
        if (t[0] != 0 && is_pow2(t[0]))
            sb_printf(b, "%u", (unsigned)t[0]);
        else
            sb_printf(b, "[1:%u,>:%u]", (unsigned)t[0], (unsigned)t[0]);
        return;
    }
    unsigned z = TS_ROUNDUP_INTERVALS - 1; /* start of the last run */
    while (t[z - 1] == t[TS_ROUNDUP_INTERVALS - 1])
        z--;
    /* the first K:V also covers every lower interval; '>' covers everything after the last K */
    sb_printf(b, "[%llu:%u", 1ull << a, (unsigned)t[0]);
    for (unsigned i = a + 1; i < z; i++)
        sb_printf(b, ",%llu:%u", 1ull << i, (unsigned)t[i]);
    sb_printf(b, ",>:%u]", (unsigned)t[z]);
}

static void format_size(sbuf *b, size_t v)
{
    static const char suffix[] = "TGMK";
    for (unsigned i = 0; i < 4; i++) {
        unsigned shift = 40 - 10 * i;
        if (v != 0 && shift < sizeof(size_t) * 8 && (v & (((size_t)1 << shift) - 1)) == 0) {
            sb_printf(b, "%zu%c", v >> shift, suffix[i]);
            return;
        }
    }
    sb_printf(b, "%zu", v);
}

static void format_value(sbuf *b, const ts_config *cfg, const key_desc *k)
{
    const struct ts_config_not_applicable *na = &cfg->not_applicable;
    switch ((enum value_kind)k->kind) {
    case KIND_MIB: {
        size_t v = *(const size_t *)field_cptr(cfg, k);
        if ((k->flags & F_UNLIMITED) && v == SIZE_MAX)
            sb_str(b, "unlimited");
        else
            sb_printf(b, "%zu", v / MIB);
        break;
    }
    case KIND_SIZE: format_size(b, *(const size_t *)field_cptr(cfg, k)); break;
    case KIND_BOOL: sb_str(b, *(const bool *)field_cptr(cfg, k) ? "True" : "False"); break;
    case KIND_U32: sb_printf(b, "%u", (unsigned)*(const uint32_t *)field_cptr(cfg, k)); break;
    case KIND_FRACTION: {
        double d = *(const double *)field_cptr(cfg, k);
        char tmp[64];
        if ((k->flags & F_OPEN) && d == 0.0) {
            sb_str(b, "off");
        } else {
            format_double(d, tmp, sizeof tmp);
            sb_str(b, tmp);
        }
        break;
    }
    case KIND_DIVISIONS: format_divisions(b, field_cptr(cfg, k)); break;
    case KIND_CHOICE: sb_str(b, choice_name(k->choices, get_enum(cfg, k))); break;
    case KIND_PATH: sb_str(b, field_cptr(cfg, k)); break;
    case KIND_NA_BOOL: sb_str(b, (na->bools >> na_bit(k)) & 1 ? "True" : "False"); break;
    case KIND_NA_POW2: sb_printf(b, "%u", (unsigned)na->pinned_num_register_threads); break;
    case KIND_NA_MIB: sb_printf(b, "%zu", na->pinned_reserve_segment_size_mb); break;
    case KIND_NA_RAW:
        sb_str(b, key_index(k) == KEY_EXPANDABLE_SEGMENTS_RESERVE
                      ? na->expandable_segments_reserve
                      : na->expandable_segments_reserve_by_class);
        break;
    }
}

size_t ts_config_format(const ts_config *cfg, char *buf, size_t len)
{
    sbuf b;
    sb_init(&b, buf, len);
    for (unsigned i = 0; i < KEY_COUNT; i++) {
        const key_desc *k = &keys[i];
        if (is_not_applicable(k) && !(cfg->not_applicable_mask & (UINT32_C(1) << na_bit(k))))
            continue;
        if (k->kind == KIND_PATH && !*(const char *)field_cptr(cfg, k))
            continue; /* unset: no value would read back */
        sb_str(&b, b.len ? "," : "");
        sb_str(&b, k->name);
        sb_put(&b, ":", 1);
        format_value(&b, cfg, k);
    }
    return b.len;
}

/* Word-wrap text at width columns, every line indented by indent spaces. */
static void wrap(sbuf *b, const char *text, unsigned indent, unsigned width)
{
    const char *p = text;
    while (*p) {
        size_t room = width - indent, n = strlen(p);
        if (n > room) {
            n = room;
            while (n > 0 && p[n] != ' ')
                n--;
            if (n == 0) /* one long word */
                n = strcspn(p, " ");
        }
        sb_printf(b, "%*s%.*s\n", (int)indent, "", (int)n, p);
        p += n;
        while (*p == ' ')
            p++;
    }
}

size_t ts_config_describe(char *buf, size_t len)
{
    static const struct {
        const char *title;
        unsigned first, end;
    } groups[] = {
        { "PyTorch keys (PyTorch's meaning and validation)", 0, KEY_CACHING },
        { "tessera keys", KEY_CACHING, KEY_FIRST_NA },
        { "PyTorch keys accepted but not applicable to tessera (validated, reported, ignored)",
          KEY_FIRST_NA, KEY_COUNT },
    };
    ts_config def;
    ts_config_defaults(&def);
    sbuf b;
    sb_init(&b, buf, len);
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        sb_printf(&b, "%s%s:\n", g ? "\n" : "", groups[g].title);
        for (unsigned i = groups[g].first; i < groups[g].end; i++) {
            const key_desc *k = &keys[i];
            char range[256];
            range_text(k, def.large_segment_size / MIB, range, sizeof range);
            sb_printf(&b, "  %s\n", k->name);
            sb_printf(&b, "      value:   %s%s\n", range,
                      (k->flags & F_UNLIMITED) ? ", or unlimited" : "");
            sb_str(&b, "      default: ");
            if (is_not_applicable(k)) {
                sb_printf(&b, "%s (PyTorch)", k->pytorch_default);
            } else if (k->kind == KIND_PATH && !*(const char *)field_cptr(&def, k)) {
                sb_str(&b, "unset");
            } else {
                format_value(&b, &def, k);
                if ((k->flags & F_MIN_LARGE_SEG) && !(k->flags & F_UNLIMITED))
                    sb_str(&b, " (the value of large_segment_size_mb)");
            }
            sb_put(&b, "\n", 1);
            wrap(&b, k->help, 6, 96);
        }
    }
    return b.len;
}

void ts_config_resolve(ts_config *cfg, const ts_config_device *dev)
{
    if (cfg->stitching)
        cfg->expandable_segments = true; /* stitching lends pages of expandable segments */
    if (!dev)
        return;
    if (dev->vm_granularity == 0) {
        cfg->expandable_segments = cfg->stitching = false; /* no VM API: plain segments */
        return;
    }
    /* defragment: the finest pages the device allows, so that any free hole of at least a page
     * can be given back or stitched (20 MiB pages leave holes below 20 MiB stuck) */
    if (cfg->expandable_segments && cfg->defragment && cfg->expandable_page == 0)
        cfg->expandable_page = dev->vm_granularity;
}

const char *ts_config_not_applicable_name(unsigned bit)
{
    if (bit >= TS_CONFIG_NOT_APPLICABLE_COUNT)
        return NULL;
    return keys[KEY_FIRST_NA + bit].name;
}

const char *ts_config_backend_name(ts_backend_kind backend)
{
    return choice_name(backend_choices, (unsigned)backend);
}

const char *ts_config_fence_name(ts_fence_mode mode)
{
    return choice_name(fence_choices, (unsigned)mode);
}

bool ts_config_equal(const ts_config *a, const ts_config *b)
{
    const struct ts_config_not_applicable *x = &a->not_applicable, *y = &b->not_applicable;
    return a->max_split_size == b->max_split_size &&
           a->max_non_split_rounding == b->max_non_split_rounding &&
           a->garbage_collection_threshold == b->garbage_collection_threshold &&
           memcmp(a->roundup_power2_divisions, b->roundup_power2_divisions,
                  sizeof a->roundup_power2_divisions) == 0 &&
           a->expandable_segments == b->expandable_segments &&
           a->per_process_memory_fraction == b->per_process_memory_fraction &&
           a->large_segment_size == b->large_segment_size && a->backend == b->backend &&
           a->caching == b->caching && a->memory_limit == b->memory_limit &&
           a->stats == b->stats && a->oom_report == b->oom_report &&
           a->reuse_fence == b->reuse_fence && a->stitching == b->stitching &&
           a->stitch_when == b->stitch_when &&
           a->stitch_min_block == b->stitch_min_block &&
           a->stitch_max_ranges == b->stitch_max_ranges && a->defragment == b->defragment &&
           a->expandable_page == b->expandable_page && a->handle_policy == b->handle_policy &&
           a->verbose == b->verbose && a->history_events == b->history_events &&
           a->history_frames == b->history_frames &&
           strncmp(a->snapshot_on_oom, b->snapshot_on_oom, TS_CONFIG_PATH_MAX) == 0 &&
           a->not_applicable_mask == b->not_applicable_mask &&
           x->bools == y->bools &&
           x->pinned_num_register_threads == y->pinned_num_register_threads &&
           x->pinned_reserve_segment_size_mb == y->pinned_reserve_segment_size_mb &&
           strncmp(x->expandable_segments_reserve, y->expandable_segments_reserve,
                   TS_CONFIG_RAW_MAX) == 0 &&
           strncmp(x->expandable_segments_reserve_by_class,
                   y->expandable_segments_reserve_by_class, TS_CONFIG_RAW_MAX) == 0;
}
