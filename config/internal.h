/* The configuration library's internals, shared by its files (not part of any API):
 *   keys.c     the key table (one row per key: kind, limits, default, help), defaults, names
 *   lex.c      bounded string building, numbers, the tokenizer
 *   parse.c    the parser: diagnostics, values, the walk, ts_config_parse / ts_config_from_env
 *   format.c   the configuration in force, and the description of every key
 *   resolve.c  what follows from what (ts_config_resolve), equality
 *   names.c    the named policies ("default", "pytorch")
 */
#ifndef TS_CONFIG_INTERNAL_H
#define TS_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define MIB ((size_t)1 << 20)
/* The largest value of a MiB key without a bound of its own: its bytes stay below 1 EiB, where
 * every request is out of memory at once (core/internal.h), so no sum of such a size and a
 * request can wrap and no value can name more than a device could ever hold. */
#define MIB_KEY_MAX (((uint64_t)1 << 40) - 1)
#define SHOW_MAX 48 /* characters of offending text quoted in a message */

/* --- the key table (keys.c) ---------------------------------------------------------------- */

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
    KEY_GROWTH_BATCH_MB,
    KEY_DEFRAGMENT,
    KEY_VERBOSE,
    KEY_HISTORY_EVENTS,
    KEY_HISTORY_FRAMES,
    KEY_SNAPSHOT_ON_OOM,
    KEY_PINNED_CACHE,
    KEY_PINNED_IDLE_S,
    KEY_LENDING,
    KEY_LENDING_WAIT_MS,
    KEY_LENDING_ALL_USERS,
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
    uint64_t min, max;     /* KIND_MIB (in MiB; max 0: MIB_KEY_MAX), KIND_U32; a value above
                            * max is refused */
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

extern const key_desc cfg_keys[KEY_COUNT];

bool is_not_applicable(const key_desc *k);
unsigned key_index(const key_desc *k);
unsigned na_bit(const key_desc *k);
const key_desc *key_lookup(const char *name);
void *field_ptr(ts_config *cfg, const key_desc *k);
const void *field_cptr(const ts_config *cfg, const key_desc *k);
unsigned get_enum(const ts_config *cfg, const key_desc *k);
void set_enum(ts_config *cfg, const key_desc *k, unsigned v);
const char *choice_name(const choice *c, unsigned v);
void cfg_range_text(const key_desc *k, size_t large_seg_mb, char *dst, size_t cap);

/* --- bounded strings, numbers, tokens (lex.c) ------------------------------------------------ */

/* snprintf-like builder: len counts what was needed, buf always stays NUL-terminated. */
typedef struct sbuf {
    char *buf;
    size_t cap;
    size_t len;
} sbuf;

enum { NUM_OK = 0, NUM_SYNTAX = -1, NUM_RANGE = -2 };

enum tok_type { T_END, T_WORD, T_COLON, T_COMMA, T_LBRACKET, T_RBRACKET };

typedef struct token {
    enum tok_type type;
    size_t pos;                          /* first character, in the original string */
    size_t len;                          /* characters, whitespace removed; may exceed the max */
    char text[TS_CONFIG_TOKEN_MAX + 1]; /* NUL-terminated, cut at TS_CONFIG_TOKEN_MAX */
} token;

void sb_put(sbuf *b, const char *s, size_t n);
void sb_str(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_init(sbuf *b, char *buf, size_t cap);
int cfg_parse_u64(const char *s, uint64_t *out);
int cfg_parse_double(const char *s, double *out);
void cfg_format_double(double d, char *buf, size_t n);
void cfg_show(char *dst, size_t cap, const char *s, size_t n);
void cfg_next_token(const char *s, size_t *i, token *t);
bool token_too_long(const token *t);
void cfg_show_token(char *dst, size_t cap, const token *t);

static inline bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static inline bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static inline bool is_pow2(uint64_t v)
{
    return v != 0 && (v & (v - 1)) == 0;
}

static inline unsigned log2_floor(uint64_t v) /* v > 0 */
{
    return 63u - (unsigned)__builtin_clzll((unsigned long long)v);
}

#endif /* TS_CONFIG_INTERNAL_H */
