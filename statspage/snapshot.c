/* PyTorch memory snapshots from tessera's state (statspage/snapshot.h): the model and a minimal
 * pickle writer (protocol 2: dicts, lists, tuples, str, int, float, bool; no classes). */
#include "statspage/snapshot.h"

#include "config/config.h"
#include "statspage/history_read.h"
#include "statspage/symbols.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- the model ------------------------------------------------------------------------------ */

void ts_snap_init(ts_snap *s)
{
    memset(s, 0, sizeof *s);
    s->settings.max_split_size = -1;
}

void ts_snap_free(ts_snap *s)
{
    free(s->segs);
    free(s->blocks);
    free(s->maps);
    for (size_t i = 0; i < s->ntraces; i++)
        free(s->traces[i].events);
    ts_snap_init(s);
}

/* Grow *arr (elements of size esz) to hold one more; 0 or ENOMEM. */
static int grow(void **arr, size_t *cap, size_t n, size_t esz)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, ncap * esz);
    if (!p)
        return ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

int ts_snap_add_segment(ts_snap *s, int device, uint64_t stream, bool small_pool,
                        bool expandable)
{
    memset(&s->adding, 0, sizeof s->adding);
    s->adding.device = device;
    s->adding.stream = stream;
    s->adding.small_pool = small_pool;
    s->adding.expandable = expandable;
    s->adding.origin.trace = -1;
    s->have_adding = true;
    s->run_open = false;
    return 0;
}

/* Blocks with device memory of their segment behind them. */
static bool block_is_mapped(uint32_t state)
{
    return state == TESSERA_BLOCK_ALLOCATED || state == TESSERA_BLOCK_PENDING ||
           state == TESSERA_BLOCK_FREE;
}

int ts_snap_add_block(ts_snap *s, uint64_t addr, uint64_t size, uint64_t requested,
                      uint32_t state)
{
    if (!s->have_adding)
        return EINVAL;
    if (!block_is_mapped(state)) {
        s->run_open = false; /* a hole: the next mapped block starts a segment of its own */
        return 0;
    }
    ts_snap_segment *g = s->run_open ? &s->segs[s->nsegs - 1] : NULL;
    /* A block that does not continue the run (a truncated or forged map) starts a new one: a
     * segment's blocks always tile it from its address. */
    if (g && addr != g->addr + g->size)
        g = NULL;
    if (!g) {
        if (grow((void **)&s->segs, &s->cap_segs, s->nsegs, sizeof *s->segs))
            return ENOMEM;
        g = &s->segs[s->nsegs++];
        *g = s->adding;
        g->addr = addr;
        g->size = 0;
        g->first_block = s->nblocks;
        g->nblocks = 0;
        s->run_open = true;
    }
    if (grow((void **)&s->blocks, &s->cap_blocks, s->nblocks, sizeof *s->blocks))
        return ENOMEM;
    ts_snap_block *b = &s->blocks[s->nblocks++];
    b->addr = addr;
    b->size = size;
    b->requested = requested > size ? size : requested;
    b->state = state;
    b->origin.trace = -1;
    g->nblocks++;
    g->size += size;
    s->linked = false;
    return 0;
}

int ts_snap_add_trace(ts_snap *s, int device, tessera_history_event *events, size_t n)
{
    if (s->ntraces == TESSERA_PAGE_MAX_SLOT_COUNT)
        return ENOSPC;
    ts_snap_trace *t = &s->traces[s->ntraces++];
    t->device = device;
    t->events = events;
    t->nevents = n;
    s->linked = false;
    return 0;
}

void ts_snap_add_device(ts_snap *s, int device, uint64_t total, uint64_t limit)
{
    for (size_t i = 0; i < s->ndevices; i++)
        if (s->devices[i].device == device)
            return;
    if (s->ndevices == TESSERA_PAGE_MAX_SLOT_COUNT)
        return;
    s->devices[s->ndevices++] = (ts_snap_device){device, total, limit};
}

void ts_snap_set_settings(ts_snap *s, const ts_config *cfg, const char *conf)
{
    /* Bounded and printable ASCII: the text may come from a page another process wrote, and
     * the pickle's strings must be valid UTF-8. */
    size_t n = conf ? strnlen(conf, sizeof s->conf - 1) : 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)conf[i];
        s->conf[i] = c > 0x20 && c < 0x7f ? (char)c : '?';
    }
    s->conf[n] = '\0';
    memset(&s->settings, 0, sizeof s->settings);
    s->settings.max_split_size = -1;
    if (!cfg)
        return;
    /* PyTorch writes int64_t(SIZE_MAX), -1, for unlimited */
    s->settings.max_split_size = cfg->max_split_size == SIZE_MAX ? -1
                                                                 : (int64_t)cfg->max_split_size;
    s->settings.garbage_collection_threshold = cfg->garbage_collection_threshold;
    s->settings.expandable_segments = cfg->expandable_segments;
    _Static_assert(TS_ROUNDUP_INTERVALS == 16, "PyTorch's table has 16 intervals, 1 .. 32768 MiB");
    for (int k = 0; k < TS_ROUNDUP_INTERVALS; k++)
        s->settings.divisions[k] = cfg->roundup_power2_divisions[k];
}

void ts_snap_load_mappings(ts_snap *s, int pid)
{
    char path[64];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/maps", pid);
    else
        snprintf(path, sizeof path, "/proc/self/maps");
    FILE *f = fopen(path, "re");
    if (!f)
        return;
    char line[512];
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, off;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s%n", &lo, &hi, perms, &off, &pos) != 4 ||
            perms[2] != 'x')
            continue;
        while (line[pos] == ' ')
            pos++;
        line[strcspn(line, "\n")] = '\0';
        if (grow((void **)&s->maps, &cap, s->nmaps, sizeof *s->maps))
            break;
        ts_snap_mapping *m = &s->maps[s->nmaps++];
        m->start = lo;
        m->end = hi;
        m->offset = off;
        snprintf(m->path, sizeof m->path, "%s", line[pos] ? line + pos : "??");
    }
    fclose(f);
}

/* --- the pickle writer ------------------------------------------------------------------------ */

typedef struct pk {
    int fd;
    int err;
    size_t len;
    unsigned char buf[65536];
} pk;

static void pk_flush(pk *p)
{
    size_t off = 0;
    while (!p->err && off < p->len) {
        ssize_t n = write(p->fd, p->buf + off, p->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            p->err = n < 0 ? errno : EIO;
        else
            off += (size_t)n;
    }
    p->len = 0;
}

static void pk_bytes(pk *p, const void *data, size_t n)
{
    const unsigned char *d = data;
    while (n) {
        if (p->len == sizeof p->buf)
            pk_flush(p);
        size_t k = sizeof p->buf - p->len < n ? sizeof p->buf - p->len : n;
        memcpy(p->buf + p->len, d, k);
        p->len += k;
        d += k;
        n -= k;
    }
}

static void pk_op(pk *p, unsigned char op)
{
    pk_bytes(p, &op, 1);
}

static void pk_str(pk *p, const char *s)
{
    size_t n = strlen(s);
    unsigned char h[5] = {'X', (unsigned char)n, (unsigned char)(n >> 8),
                          (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    pk_bytes(p, h, 5); /* BINUNICODE: little-endian length, then UTF-8 (here: ASCII) */
    pk_bytes(p, s, n);
}

/* An unsigned integer: BININT when it fits 31 bits, else LONG1 (little-endian two's
 * complement, with a zero byte on top when the high bit is set so it stays positive). */
static void pk_uint(pk *p, uint64_t v)
{
    if (v <= INT32_MAX) {
        unsigned char h[5] = {'J', (unsigned char)v, (unsigned char)(v >> 8),
                              (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
        pk_bytes(p, h, 5);
        return;
    }
    unsigned char h[11] = {0x8a, 0};
    unsigned n = 0;
    for (uint64_t x = v; x; x >>= 8)
        h[2 + n++] = (unsigned char)(x & 0xff);
    if (h[2 + n - 1] & 0x80)
        h[2 + n++] = 0;
    h[1] = (unsigned char)n;
    pk_bytes(p, h, 2 + n);
}

static void pk_int(pk *p, int64_t v)
{
    if (v >= 0) {
        pk_uint(p, (uint64_t)v);
        return;
    }
    if (v >= INT32_MIN) {
        uint32_t u = (uint32_t)(int32_t)v;
        unsigned char h[5] = {'J', (unsigned char)u, (unsigned char)(u >> 8),
                              (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        pk_bytes(p, h, 5);
        return;
    }
    uint64_t u = (uint64_t)v;
    unsigned char h[10] = {0x8a, 8};
    for (int i = 0; i < 8; i++)
        h[2 + i] = (unsigned char)(u >> (8 * i));
    pk_bytes(p, h, 10);
}

static void pk_bool(pk *p, bool b)
{
    pk_op(p, b ? 0x88 : 0x89); /* NEWTRUE, NEWFALSE */
}

static void pk_float(pk *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    unsigned char h[9] = {'G'};
    for (int i = 0; i < 8; i++)
        h[1 + i] = (unsigned char)(u >> (56 - 8 * i)); /* BINFLOAT is big-endian */
    pk_bytes(p, h, 9);
}

/* Containers: '}' or ']' then MARK ... SETITEMS/APPENDS. */
static void pk_dict_begin(pk *p)
{
    pk_op(p, '}');
    pk_op(p, '(');
}
static void pk_dict_end(pk *p)
{
    pk_op(p, 'u');
}
static void pk_list_begin(pk *p)
{
    pk_op(p, ']');
    pk_op(p, '(');
}
static void pk_list_end(pk *p)
{
    pk_op(p, 'e');
}

static void pk_key_uint(pk *p, const char *k, uint64_t v)
{
    pk_str(p, k);
    pk_uint(p, v);
}

static void pk_key_str(pk *p, const char *k, const char *v)
{
    pk_str(p, k);
    pk_str(p, v);
}

/* --- the snapshot ----------------------------------------------------------------------------- */

/* The mapping a native frame points into, or NULL. */
static const ts_snap_mapping *frame_mapping(const ts_snap *s, uint64_t pc)
{
    for (size_t i = 0; i < s->nmaps; i++)
        if (pc >= s->maps[i].start && pc < s->maps[i].end)
            return &s->maps[i];
    return NULL;
}

/* Is the frame tessera's own (libtessera.so: the interposer and the allocator)? A stack then
 * starts where the program called CUDA, as in PyTorch's snapshots. */
static bool frame_is_tessera(const ts_snap *s, uint64_t pc)
{
    const ts_snap_mapping *m = frame_mapping(s, pc);
    if (!m)
        return false;
    const char *base = strrchr(m->path, '/');
    base = base ? base + 1 : m->path;
    return strncmp(base, "libtessera", 10) == 0;
}

/* A native frame as PyTorch writes one: name, filename, line. The name is the function, when
 * the snapshot is symbolised (s->symbols) and the file's symbol tables know it, else the
 * offset in the file (addr2line -e FILE OFFSET gives it offline). */
static void write_frame(pk *p, const ts_snap *s, uint64_t pc)
{
    char name[256];
    const char *file = "??";
    uint64_t off = pc;
    const ts_snap_mapping *m = frame_mapping(s, pc);
    if (m) {
        file = m->path;
        off = pc - m->start + m->offset;
    }
    /* a return address: the call is the instruction before it */
    if (!m || !s->symbols || off == 0 || !ts_symbols_lookup(s->symbols, file, off - 1, name,
                                                            sizeof name))
        snprintf(name, sizeof name, "0x%" PRIx64, off);
    pk_dict_begin(p);
    pk_key_str(p, "name", name);
    pk_key_str(p, "filename", file);
    pk_key_uint(p, "line", 0);
    pk_dict_end(p);
}

static const char *block_state_name(uint32_t state)
{
    switch (state) {
    case TESSERA_BLOCK_ALLOCATED: return "active_allocated";
    case TESSERA_BLOCK_PENDING: return "active_pending_free";
    default: return "inactive";
    }
}

/* The event a segment's or block's frames come from, or NULL. */
static const tessera_history_event *origin_event(const ts_snap *s, ts_snap_origin o)
{
    if (o.trace < 0 || (size_t)o.trace >= s->ntraces || o.index >= s->traces[o.trace].nevents)
        return NULL;
    return &s->traces[o.trace].events[o.index];
}

/* 'frames': e's native frames, tessera's own left out; [] without an event. */
static void write_frames(pk *p, const ts_snap *s, const tessera_history_event *e)
{
    pk_str(p, "frames");
    pk_list_begin(p);
    for (uint32_t i = 0; e && i < e->nframes && i < TESSERA_HISTORY_MAX_FRAMES; i++)
        if (!frame_is_tessera(s, e->frames[i]))
            write_frame(p, s, e->frames[i]);
    pk_list_end(p);
}

static void write_segment(pk *p, const ts_snap *s, const ts_snap_segment *g)
{
    uint64_t allocated = 0, active = 0, requested = 0;
    for (size_t i = 0; i < g->nblocks; i++) {
        const ts_snap_block *b = &s->blocks[g->first_block + i];
        if (b->state == TESSERA_BLOCK_ALLOCATED)
            allocated += b->size;
        if (b->state == TESSERA_BLOCK_ALLOCATED || b->state == TESSERA_BLOCK_PENDING) {
            active += b->size;
            requested += b->requested;
        }
    }
    pk_dict_begin(p);
    pk_key_uint(p, "device", (uint64_t)g->device);
    pk_key_uint(p, "address", g->addr);
    pk_key_uint(p, "total_size", g->size);
    pk_key_uint(p, "allocated_size", allocated);
    pk_key_uint(p, "active_size", active);
    pk_key_uint(p, "requested_size", requested);
    pk_key_uint(p, "stream", g->stream);
    pk_key_str(p, "segment_type", g->small_pool ? "small" : "large");
    pk_str(p, "segment_pool_id");
    pk_uint(p, 0);
    pk_uint(p, 0);
    pk_op(p, 0x86); /* TUPLE2 */
    pk_str(p, "is_expandable");
    pk_bool(p, g->expandable);
    write_frames(p, s, origin_event(s, g->origin));
    pk_str(p, "blocks");
    pk_list_begin(p);
    for (size_t i = 0; i < g->nblocks; i++) {
        const ts_snap_block *b = &s->blocks[g->first_block + i];
        pk_dict_begin(p);
        pk_key_uint(p, "address", b->addr);
        pk_key_uint(p, "size", b->size);
        pk_key_uint(p, "requested_size", b->state == TESSERA_BLOCK_FREE ? 0 : b->requested);
        pk_key_str(p, "state", block_state_name(b->state));
        write_frames(p, s, origin_event(s, b->origin));
        pk_dict_end(p);
    }
    pk_list_end(p);
    pk_dict_end(p);
}

/* PyTorch's trace entry sizes: what the program asked for (the ring's requested: block events
 * and oom; the block events' size is the block's), else the event's size (segment events, and
 * rings of tessera 0.1, which have no request). */
static uint64_t event_size(const tessera_history_event *e)
{
    return e->requested ? e->requested : e->size;
}

static void write_event(pk *p, const ts_snap *s, const tessera_history_event *e)
{
    pk_dict_begin(p);
    pk_key_str(p, "action", ts_history_action_name(e->action));
    /* an out of memory has no address: PyTorch puts the driver's free bytes in its place */
    pk_key_uint(p, e->action == TESSERA_EV_OOM ? "device_free" : "addr", e->addr);
    pk_key_uint(p, "size", event_size(e));
    pk_key_uint(p, "stream", e->stream);
    pk_key_uint(p, "time_us", e->time_us);
    write_frames(p, s, e);
    pk_dict_end(p);
}

int ts_snap_write_pickle(const ts_snap *s, int fd)
{
    pk *p = malloc(sizeof *p);
    if (!p)
        return ENOMEM;
    p->fd = fd;
    p->err = 0;
    p->len = 0;
    pk_op(p, 0x80);
    pk_op(p, 2); /* PROTO 2 */
    pk_dict_begin(p);

    pk_str(p, "segments");
    pk_list_begin(p);
    for (size_t i = 0; i < s->nsegs; i++)
        write_segment(p, s, &s->segs[i]);
    pk_list_end(p);

    /* device_traces is indexed by device ordinal: one list per device up to the highest. */
    int ndev = 0;
    for (size_t i = 0; i < s->ntraces; i++)
        if (s->traces[i].device + 1 > ndev)
            ndev = s->traces[i].device + 1;
    for (size_t i = 0; i < s->nsegs; i++)
        if (s->segs[i].device + 1 > ndev)
            ndev = s->segs[i].device + 1;
    pk_str(p, "device_traces");
    pk_list_begin(p);
    for (int d = 0; d < ndev; d++) {
        pk_list_begin(p);
        for (size_t i = 0; i < s->ntraces; i++)
            if (s->traces[i].device == d)
                for (size_t k = 0; k < s->traces[i].nevents; k++)
                    write_event(p, s, &s->traces[i].events[k]);
        pk_list_end(p);
    }
    pk_list_end(p);

    /* In every snapshot: PyTorch's viewer shows it in its settings tab. */
    pk_str(p, "allocator_settings");
    pk_dict_begin(p);
    pk_key_str(p, "PYTORCH_CUDA_ALLOC_CONF", s->conf);
    pk_str(p, "max_split_size");
    pk_int(p, s->settings.max_split_size);
    pk_str(p, "garbage_collection_threshold");
    pk_float(p, s->settings.garbage_collection_threshold);
    pk_str(p, "expandable_segments");
    pk_bool(p, s->settings.expandable_segments);
    /* accepted by tessera's parser but not used: PyTorch's defaults */
    pk_key_uint(p, "pinned_num_register_threads", 1);
    pk_str(p, "release_lock_on_cudamalloc");
    pk_bool(p, false);
    pk_str(p, "pinned_use_cuda_host_register");
    pk_bool(p, false);
    pk_str(p, "roundup_power2_divisions");
    pk_dict_begin(p);
    for (int i = 0; i < 16; i++) {
        char key[8];
        snprintf(key, sizeof key, "%d", 1 << i);
        pk_key_uint(p, key, s->settings.divisions[i]);
    }
    pk_dict_end(p);
    pk_dict_end(p);

    pk_str(p, "tessera");
    pk_dict_begin(p);
    pk_key_str(p, "source", s->source);
    pk_key_str(p, "consistency", s->consistency);
    pk_key_uint(p, "pid", (uint64_t)(s->pid > 0 ? s->pid : 0));
    pk_str(p, "devices");
    pk_list_begin(p);
    for (size_t i = 0; i < s->ndevices; i++) {
        pk_dict_begin(p);
        pk_key_uint(p, "device", (uint64_t)s->devices[i].device);
        pk_key_uint(p, "total_bytes", s->devices[i].total);
        pk_key_uint(p, "memory_limit_bytes", s->devices[i].limit);
        pk_dict_end(p);
    }
    pk_list_end(p);
    pk_dict_end(p);

    pk_dict_end(p);
    pk_op(p, '.'); /* STOP */
    pk_flush(p);
    int err = p->err;
    free(p);
    return err;
}
