/* tessera configuration: a PYTORCH_CUDA_ALLOC_CONF-style string, parsed from one table.
 *
 * Sources, first one set wins and is used alone (PyTorch's precedence):
 *   TESSERA_ALLOC_CONF       strict: unknown key or bad value is an error (the shim exits 1)
 *   PYTORCH_CUDA_ALLOC_CONF  lenient: PyTorch validates it itself; problems are warned about
 *   PYTORCH_ALLOC_CONF       lenient, as above
 *
 * Syntax: key:value,key:value,key:[k:v,k:v,>:v]  (whitespace ignored, as PyTorch's tokenizer).
 */
#ifndef TS_CONFIG_H
#define TS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TS_ROUNDUP_INTERVALS 16

#define TS_CONFIG_TOKEN_MAX 256           /* longest key or value, whitespace removed */
#define TS_CONFIG_PATH_MAX (TS_CONFIG_TOKEN_MAX + 1) /* a path value and its NUL */
#define TS_CONFIG_RAW_MAX 64              /* kept text of an uninterpreted key, NUL included */
#define TS_CONFIG_NOT_APPLICABLE_COUNT 12 /* bits used in ts_config.not_applicable_mask */
#define TS_CONFIG_FORMAT_MAX 2048         /* always holds ts_config_format's output and its NUL */

typedef enum ts_backend_kind {
    TS_BACKEND_NATIVE = 0,
    TS_BACKEND_CUDA_MALLOC_ASYNC = 1 /* tessera steps aside: calls pass through uncached */
} ts_backend_kind;

/* How the shim makes sure a freed block is not reused while earlier device work may touch it. */
typedef enum ts_fence_mode {
    TS_FENCE_EVENTS = 0, /* events on the legacy stream and the tracked non-blocking streams */
    TS_FENCE_SYNC = 1,   /* context synchronise (also covers streams tessera never saw) */
    TS_FENCE_NONE = 2,   /* reuse at once: only safe for single-stream programs */
    TS_FENCE_ORDER = 3   /* stream order: the device, not the host, orders a reuse after the
                          * work issued before the free (the default; docs/DESIGN.md) */
} ts_fence_mode;

/* How expandable segments cut the physical memory of a growth into handles (the unit that can be
 * given back or stitched). */
typedef enum ts_handle_policy {
    TS_HANDLES_PAGE = 0,      /* one handle per page (PyTorch's layout) */
    TS_HANDLES_GEOMETRIC = 1, /* halving towards the growth's end: fewer driver calls */
    TS_HANDLES_COARSE = 2     /* large_segment_size each, the rest in one: PyTorch's calls */
} ts_handle_policy;

/* When stitching is tried for a request that no free block can serve. */
typedef enum ts_stitch_when {
    TS_STITCH_ALWAYS = 0,  /* before growing: the least memory reserved, the most driver calls */
    TS_STITCH_PRESSURE = 1 /* once growing has failed (the device or the cap is full), before the
                            * release of the cache that needs a device synchronise */
} ts_stitch_when;

/* The least stitch_min_block_mb accepts: a stitched range is made of whole 2 MiB pages. */
#define TS_CONFIG_STITCH_MIN_BLOCK_LEAST_MB 2

typedef struct ts_config {
    /* --- PyTorch keys, PyTorch's meaning --- */
    size_t max_split_size;              /* bytes; SIZE_MAX: unlimited (default) */
    size_t max_non_split_rounding;      /* bytes; default: large_segment_size */
    double garbage_collection_threshold; /* 0: off; else in (0, 1) */
    uint32_t roundup_power2_divisions[TS_ROUNDUP_INTERVALS]; /* 0 or 1: no power-2 rounding */
    bool expandable_segments;
    double per_process_memory_fraction; /* in [0, 1]; 1: no cap */
    size_t large_segment_size;          /* bytes; default 20 MiB */
    ts_backend_kind backend;

    /* --- tessera keys --- */
    bool caching;               /* false: every allocation goes straight to the driver */
    size_t memory_limit;        /* bytes the allocator may reserve per device; 0: none */
    bool stats;                 /* publish the /dev/shm stats page */
    bool oom_report;            /* one diagnostic line on stderr per out-of-memory (rate-limited) */
    ts_fence_mode reuse_fence;  /* see ts_fence_mode */
    bool stitching;             /* map free pages of expandable segments into new ranges */
    ts_stitch_when stitch_when; /* see ts_stitch_when */
    size_t stitch_min_block;    /* bytes; requests below this never stitch (default 2 MiB) */
    uint32_t stitch_max_ranges; /* live stitched virtual ranges per device (default 64) */
    size_t expandable_page;     /* bytes per page of expandable segments; 0: PyTorch's (2 MiB
                                 * small pool, large_segment_size large pool; with defragment,
                                 * the device's granularity) */
    ts_handle_policy handle_policy;
    size_t growth_batch;        /* bytes; with defragment's page or coarse handles, a segment
                                 * growing at its end again maps ahead to whole batches of this
                                 * (0: only what each growth needs; coarse: large_segment_size
                                 * unless given) */
    bool defragment;            /* tessera's best combination: expandable + stitching */
    bool verbose;               /* print the effective configuration at start-up */
    uint32_t history_events;    /* events kept in the history ring per device; 0: no history */
    bool history_frames;        /* record native stack frames with each history event */
    char snapshot_on_oom[TS_CONFIG_PATH_MAX]; /* path template of the snapshot written at an
                                               * out of memory (%p pid, %n count); "": none */
    bool pinned_cache;          /* serve pinned host memory from a cache (core/hostcache.c) */
    uint32_t pinned_idle_s;     /* a cached pinned region nothing used for this long goes back */
    bool lending;               /* ask the other tessera processes of the device for memory when
                                 * out of it, and give them free cache when they ask */
    uint32_t lending_wait_ms;   /* the longest an out-of-memory waits for their answers */
    bool lending_all_users;     /* root only: ask every user's processes, not only root's */

    /* Keys PyTorch accepts that do not apply to tessera: remembered only to be reported. */
    uint32_t not_applicable_mask; /* bit i: not_applicable key i was given (see keys.c) */
    /* Their values, kept only so that ts_config_format can print them back; never interpreted. */
    struct ts_config_not_applicable {
        uint32_t bools;                       /* bit i: boolean key i was given as True */
        uint32_t pinned_num_register_threads; /* a power of two <= 128 */
        size_t pinned_reserve_segment_size_mb;
        char expandable_segments_reserve[TS_CONFIG_RAW_MAX];          /* as given, no spaces */
        char expandable_segments_reserve_by_class[TS_CONFIG_RAW_MAX]; /* as given, no spaces */
    } not_applicable;
} ts_config;

typedef enum ts_config_mode {
    TS_CONFIG_STRICT = 0,  /* first problem is an error; *out is left untouched */
    TS_CONFIG_LENIENT = 1  /* problems become warnings; the offending key keeps its default */
} ts_config_mode;

/* One problem found while parsing. The message is a single line without the "tessera: " prefix
 * and without a newline, naming the variable, the key, the offending text, its 0-based position
 * in the string and the valid range. */
typedef struct ts_config_diag {
    char message[512];
} ts_config_diag;

/* Callback for lenient-mode problems (one call per problem) and, in both modes, notes. */
typedef void (*ts_config_warn_fn)(void *user, const char *message);

void ts_config_defaults(ts_config *cfg);

/* Parse text into *out, starting from the defaults. varname appears in messages.
 * Returns 0 on success. STRICT: returns -1 and fills *diag on the first problem; *out unchanged.
 * LENIENT: always returns 0; each problem goes to warn(user, msg) when warn is non-NULL (the
 * message then ends in "; ignored"), and the entry is skipped.
 * In both modes, after a successful parse, warn also receives notes (not problems): one line per
 * given key that does not apply to tessera, and one when backend:cudaMallocAsync is combined with
 * keys only the native allocator reads. text NULL reads as "". diag and warn may be NULL.
 * Beyond PyTorch's syntax the parser accepts max_split_size_mb:unlimited and
 * garbage_collection_threshold:off (the defaults), so that ts_config_format's output parses. */
int ts_config_parse(ts_config *out, const char *text, const char *varname, ts_config_mode mode,
                    ts_config_diag *diag, ts_config_warn_fn warn, void *user);

/* The configuration text a policy name stands for (config/names.c): "default" (tessera's default
 * policy, what no configuration gives: "") and "pytorch" (PyTorch's caching allocator:
 * "expandable_segments:False"); NULL when text is not a name. ts_config_parse takes a whole
 * string that is a name as the text it stands for. */
const char *ts_config_named_policy(const char *text);

/* Read the environment with the precedence above. *source receives the variable used (NULL when
 * none is set). Returns 0, or -1 with *diag filled when TESSERA_ALLOC_CONF is invalid. */
int ts_config_from_env(ts_config *out, const char **source, ts_config_diag *diag,
                       ts_config_warn_fn warn, void *user);

/* The effective configuration as "key:value,key:value,..." (every key, canonical spelling,
 * sizes in MiB where PyTorch uses MiB, then the not-applicable keys that were given). Parsing it
 * in strict mode gives an identical configuration. Returns the length it needed, like snprintf
 * (buf may be NULL when len is 0). */
size_t ts_config_format(const ts_config *cfg, char *buf, size_t len);

/* Human-readable table of every key: name, value syntax, default, meaning. For --help and docs. */
size_t ts_config_describe(char *buf, size_t len);

/* What the configuration in force depends on that only a device can tell. */
typedef struct ts_config_device {
    size_t vm_granularity; /* bytes; 0: the device has no virtual-memory API */
} ts_config_device;

/* The one resolve step: turn a parsed configuration into the one in force, in place. Every rule
 * that makes one setting follow from others lives here, and what it produces is what the
 * allocator uses and what verbose output and the stats page print:
 *  - stitching needs expandable segments (it lends their pages), so it turns them on;
 *  - on a device without the virtual-memory API (dev->vm_granularity 0) both are off;
 *  - with defragment, expandable pages default to 2 MiB (every CUDA device's granularity), so
 *    that the process's configuration is the one in force on its devices;
 *  - on a device, an expandable page is whole granules of it (rounded up).
 * dev NULL applies the rules that need no device (ts_config_parse does, before returning).
 * Idempotent: resolving a resolved configuration changes nothing. */
void ts_config_resolve(ts_config *cfg, const ts_config_device *dev);

/* Name of the key behind bit `bit` of not_applicable_mask; NULL when bit is out of range. */
const char *ts_config_not_applicable_name(unsigned bit);

/* Field-by-field equality (padding and unused string bytes are ignored). */
bool ts_config_equal(const ts_config *a, const ts_config *b);

/* Canonical spellings, as accepted by the parser ("native", "events", ...); "?" if out of range. */
const char *ts_config_backend_name(ts_backend_kind backend);
const char *ts_config_fence_name(ts_fence_mode mode);

#endif /* TS_CONFIG_H */
