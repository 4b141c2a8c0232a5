/* Process life: configuration at load time, one allocator per CUDA context, the stats page,
 * out-of-memory reports, fork and exit.
 *
 * The context table: entries are created on first use of a context and never freed (a pointer
 * to an entry may be held by a hook running on another thread). When a context dies (cuCtxDestroy,
 * a primary context reset), its allocator forgets its memory without touching the device and the
 * entry becomes free for the next context of the same device, allocator and all.
 *
 * Lock order: table_lock, then an allocator's mutex. The fast path takes neither: it reads the
 * calling thread's last entry, checks it against the current context, and calls the core.
 */
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/history.h"
#include "statspage/writer.h"
#include "shim/shim.h"
#include "core/hostcache.h"
#include "core/peers.h"

#define MAX_CONTEXTS 256
#define STATS_PUBLISH_EVERY 64 /* ops between segment-map refreshes */

typedef struct ctx_entry {
    CUcontext ctx; /* NULL: free (or dead); read without the lock */
    CUdevice dev;
    bool primary;
    bool used;     /* has an allocator (alive or dead) */
    ts_allocator *a;
    ts_cuda_backend *be;
    int slot;      /* stats page slot, < 0 when none */
    ts_history *history; /* its history ring (history_events), or NULL */
} ctx_entry;

/* Peer access enabled towards a context that has no allocator yet: applied when it gets one.
 * Guarded by table_lock. */
typedef struct peer_grant {
    CUcontext ctx; /* NULL: free */
    uint64_t devices;
} peer_grant;

static ctx_entry table[MAX_CONTEXTS];
static peer_grant grants[MAX_CONTEXTS];
/* Devices given access to each device's default pool (bit d: device d), for the allocators of
 * that device made from then on. Guarded by table_lock. */
static uint64_t pool_grants[64];
static int table_used; /* entries [0, table_used) have been used */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread ctx_entry *tls_last __attribute__((tls_model("initial-exec")));

static ts_config g_cfg;
static bool g_active;
static const char *g_source;
static char g_warnings[2048];
static size_t g_warnings_len;
static bool g_announced;

static ts_statspage *g_page;
static bool g_page_tried;
static bool g_control_due; /* the page exists and its control channel is yet to start */
static pthread_mutex_t page_lock = PTHREAD_MUTEX_INITIALIZER;

const ts_config *ts_shim_config(void)
{
    return &g_cfg;
}

static void announce(void);

/* A strict configuration error stops only processes that use CUDA: the preload reaches every
 * process of a job script (ls, bash, python). A program linked with a CUDA library stops before
 * main; any other stops at its first hooked call. One line, then _exit (no atexit handler of a
 * half-started program runs). */
static char g_conf_error[sizeof(((ts_config_diag *)0)->message) + 256];
static bool g_conf_failed;
static bool g_snapshot_check_due; /* snapshot_on_oom not checked yet: at the first CUDA call */
static bool snapshot_dir_refused(void);

__attribute__((noreturn, cold)) static void config_stop(const char *when)
{
    ts_log("%s; stopping %s (fix or unset TESSERA_ALLOC_CONF)", g_conf_error, when);
    _exit(1);
}

static int find_cuda_library(struct dl_phdr_info *info, size_t size, void *user)
{
    (void)size;
    (void)user;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name;
    return base && (strncmp(base, "libcudart.so", 12) == 0 || strncmp(base, "libcuda.so", 10) == 0);
}

bool ts_shim_active(void)
{
    if (__builtin_expect(g_conf_failed, 0))
        config_stop("at the first CUDA call");
    if (__builtin_expect(g_snapshot_check_due, 0) &&
        __atomic_exchange_n(&g_snapshot_check_due, false, __ATOMIC_ACQ_REL) && snapshot_dir_refused())
        config_stop("at the first CUDA call");
    /* Stepping aside (caching:False, backend:cudaMallocAsync) creates no allocator, the usual
     * place to announce: the first hook that steps aside says the warnings and verbose lines. */
    if (!g_active)
        announce();
    return g_active;
}

/* --- load time ------------------------------------------------------------------------------- */

static void warn_collect(void *user, const char *message)
{
    (void)user;
    int n = snprintf(g_warnings + g_warnings_len, sizeof g_warnings - g_warnings_len, "%s\n",
                     message);
    if (n > 0 && (size_t)n < sizeof g_warnings - g_warnings_len)
        g_warnings_len += (size_t)n;
}

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

/* snapshot_on_oom is checked when the configuration is: a directory it would be refused at the
 * out of memory is refused now, so that no snapshot is lost to it. TESSERA_ALLOC_CONF (strict):
 * like any bad key; the PyTorch variables (lenient): a warning, and no snapshots. Only a process
 * that uses CUDA gets here (the missing directory is created then). */
static bool snapshot_dir_refused(void)
{
    char why[640];
    if (!g_cfg.snapshot_on_oom[0] || ts_oom_snapshot_check(g_cfg.snapshot_on_oom, why, sizeof why))
        return false;
    if (g_source && strcmp(g_source, "TESSERA_ALLOC_CONF") == 0) {
        snprintf(g_conf_error, sizeof g_conf_error, "TESSERA_ALLOC_CONF: key 'snapshot_on_oom': %s",
                 why);
        return true;
    }
    char line[sizeof why + 96];
    snprintf(line, sizeof line, "%s: key 'snapshot_on_oom': %s; ignored (no snapshots)",
             g_source ? g_source : "configuration", why);
    warn_collect(NULL, line);
    g_cfg.snapshot_on_oom[0] = '\0';
    return false;
}

/* Runs when the library is loaded, before main: no CUDA here, only the configuration. A bad
 * TESSERA_ALLOC_CONF stops a program linked with CUDA now; any other program keeps it for its
 * first hook (config_stop), so one that never uses CUDA runs untouched and silent. */
__attribute__((constructor)) static void shim_load(void)
{
    ts_config_diag diag;
    bool cuda = dl_iterate_phdr(find_cuda_library, NULL) != 0;
    if (ts_config_from_env(&g_cfg, &g_source, &diag, warn_collect, NULL) != 0) {
        snprintf(g_conf_error, sizeof g_conf_error, "%s", diag.message);
        if (cuda)
            config_stop("before the program starts");
        g_conf_failed = true;
    } else if (cuda && snapshot_dir_refused()) {
        config_stop("before the program starts");
    } else if (!cuda) {
        g_snapshot_check_due = g_cfg.snapshot_on_oom[0] != '\0';
    }
    g_active = g_cfg.caching && g_cfg.backend == TS_BACKEND_NATIVE;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Said once, by the first allocator: only processes that use CUDA talk. */
static void announce(void)
{
    /* Reached under the context table's lock, or by any hook when tessera steps aside. */
    if (__atomic_exchange_n(&g_announced, true, __ATOMIC_ACQ_REL))
        return;
    if (g_warnings_len) {
        char *save = NULL;
        for (char *line = strtok_r(g_warnings, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            ts_log("%s", line);
    }
    if (g_cfg.verbose) {
        char text[2048];
        ts_config_format(&g_cfg, text, sizeof text);
        ts_log("configuration from %s: %s", g_source ? g_source : "defaults", text);
    }
}

/* What a device changed in the configuration (ts_config_resolve with the device): said when the
 * device cannot give what was asked for, and in full under verbose:True. */
static void announce_device(const ts_allocator *a, int dev)
{
    const ts_config *in_force = ts_allocator_config(a);
    if (ts_config_equal(in_force, &g_cfg))
        return;
    if (g_cfg.expandable_segments && !in_force->expandable_segments)
        ts_log("device %d has no virtual-memory API: expandable_segments%s off there", dev,
               g_cfg.stitching ? " and stitching are" : " is");
    if (g_cfg.verbose) {
        char text[2048];
        ts_config_format(in_force, text, sizeof text);
        ts_log("device %d: configuration in force: %s", dev, text);
    }
}

/* --- the stats page ---------------------------------------------------------------------------- */

/* Normal exit removes the page; TESSERA_STATS_KEEP=1 leaves it for a post-mortem (it then reads
 * as stale, and tessera-stat --gc removes it). */
static void shim_exit(void)
{
    ts_statspage *p = __atomic_exchange_n(&g_page, NULL, __ATOMIC_ACQ_REL);
    const char *keep = getenv("TESSERA_STATS_KEEP");
    bool unlink_files = !(keep && strcmp(keep, "1") == 0);
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        ts_history_close(table[i].history, unlink_files);
    ts_statspage_close(p, unlink_files);
}

/* The history ring of a new allocator (history_events:N), next to the page. Without a page
 * there is nowhere a reader could find it: no ring then. */
static ts_history *history_start(ts_allocator *a, int slot, int dev)
{
    if (!g_cfg.history_events || slot < 0)
        return NULL;
    ts_history *h = NULL;
    char err[600];
    if (ts_history_create(ts_statspage_dir(), slot, dev, g_cfg.history_events,
                          g_cfg.history_frames, &h, err, sizeof err) != 0) {
        ts_log("no allocator history (%s)", err);
        return NULL;
    }
    ts_history_attach(h, a);
    return h;
}

static ts_statspage *page_get(void)
{
    if (!g_cfg.stats)
        return NULL;
    pthread_mutex_lock(&page_lock);
    if (!g_page && !g_page_tried) {
        g_page_tried = true;
        char conf[2048], err[320];
        ts_config_format(&g_cfg, conf, sizeof conf);
        ts_statspage *p = NULL;
        int rc = ts_statspage_create(NULL, conf, &p, err, sizeof err);
        if (rc == 0) {
            g_page = p;
            atexit(shim_exit);
            __atomic_store_n(&g_control_due, true, __ATOMIC_RELEASE);
        } else {
            ts_log("no stats page (%s); counters stay private to the process", err);
        }
    }
    ts_statspage *p = g_page;
    pthread_mutex_unlock(&page_lock);
    return p;
}

/* The control channel, started once the page exists (outside the table's and the page's locks:
 * the channel's fork handler takes its own lock first), and named in the page: other processes
 * of the user find it there to ask for memory (lending) or for a release. */
static void control_start(void)
{
    if (!__atomic_exchange_n(&g_control_due, false, __ATOMIC_ACQ_REL))
        return;
    uint64_t secret = 0;
    int rc = ts_lend_serve(&g_cfg, &secret);
    if (rc == 0)
        rc = ts_pause_serve();
    if (rc == 0)
        ts_statspage_set_control(__atomic_load_n(&g_page, __ATOMIC_ACQUIRE), secret);
    else
        ts_log("no control channel (%s): other processes can neither ask this one for memory "
               "nor release its cache", strerror(-rc));
}

/* The UUID of device dev, by which other processes find the ones that share it (zero when the
 * driver cannot say). */
static void device_uuid(CUdevice dev, uint8_t uuid[16])
{
    CUuuid u;
    memset(uuid, 0, 16);
    if (ts_real.cuDeviceGetUuid_v2 && ts_real.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS)
        memcpy(uuid, u.bytes, 16);
}

/* --- the context table ---------------------------------------------------------------------- */

static ctx_entry *table_find(CUcontext ctx)
{
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&table[i].ctx, __ATOMIC_ACQUIRE) == ctx)
            return &table[i];
    return NULL;
}

static bool context_is_primary(CUcontext ctx, CUdevice dev)
{
    CUcontext primary = NULL;
    if (!ts_real.cuDevicePrimaryCtxRetain || !ts_real.cuDevicePrimaryCtxRelease_v2)
        return false;
    /* Retaining an inactive primary context would create one (hundreds of MB on a GPU) only to
     * destroy it again: when it is not active, this context cannot be it. */
    unsigned int flags = 0;
    int active = 0;
    if (ts_real.cuDevicePrimaryCtxGetState &&
        ts_real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active)
        return false;
    if (ts_real.cuDevicePrimaryCtxRetain(&primary, dev) != CUDA_SUCCESS)
        return false;
    ts_real.cuDevicePrimaryCtxRelease_v2(dev);
    return primary == ctx;
}

/* table_lock held: the grants waiting for ctx, forgotten. */
static uint64_t grants_take(CUcontext ctx)
{
    uint64_t devices = 0;
    for (int i = 0; i < MAX_CONTEXTS; i++)
        if (grants[i].ctx == ctx) {
            devices |= grants[i].devices;
            grants[i].ctx = NULL;
            grants[i].devices = 0;
        }
    return devices;
}

/* table_lock held. */
static void allocator_grant_peers(ts_allocator *a, uint64_t devices)
{
    for (int d = 0; d < 64; d++)
        if ((devices & ((uint64_t)1 << d)) && ts_allocator_peer_add(a, d) != TS_OK)
            ts_log("peer access from device %d: cannot grant it tessera's virtual-memory mappings; "
                   "kernels on that device may fault on them (set expandable_segments:False)",
                   d);
}

void ts_ctx_peer_enabled(CUcontext peer, CUdevice from)
{
    if (!peer || from < 0 || from >= 64)
        return;
    pthread_mutex_lock(&table_lock);
    ctx_entry *e = table_find(peer);
    if (e) {
        allocator_grant_peers(e->a, (uint64_t)1 << from);
    } else {
        peer_grant *slot = NULL; /* the context's record, else the first free one */
        for (int i = 0; i < MAX_CONTEXTS; i++) {
            if (grants[i].ctx == peer) {
                slot = &grants[i];
                break;
            }
            if (!slot && !grants[i].ctx)
                slot = &grants[i];
        }
        if (slot) {
            slot->ctx = peer;
            slot->devices |= (uint64_t)1 << from;
        } else {
            ts_log_once(grants, "more than %d contexts with peer access pending: device %d is "
                        "not granted tessera's virtual-memory mappings", MAX_CONTEXTS, (int)from);
        }
    }
    pthread_mutex_unlock(&table_lock);
}

void ts_ctx_pool_access(CUdevice owner, CUdevice to)
{
    uint64_t bit = 0;
    ts_peer_add(&bit, to); /* a device past 63 gets nothing, as with peer access */
    pthread_mutex_lock(&table_lock);
    pool_grants[owner] |= bit;
    for (int i = 0; i != table_used; i++)
        if (table[i].ctx && table[i].dev == owner && table[i].a)
            allocator_grant_peers(table[i].a, bit);
    pthread_mutex_unlock(&table_lock);
}

static ctx_entry *table_create(CUcontext ctx)
{
    CUdevice dev = 0;
    if (ts_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return NULL;
    pthread_mutex_lock(&table_lock);
    ctx_entry *e = table_find(ctx);
    if (e) {
        pthread_mutex_unlock(&table_lock);
        return e;
    }
    announce();
    /* A dead entry of the same device is revived with its (empty) allocator. */
    for (int i = 0; i < table_used && !e; i++)
        if (table[i].used && table[i].ctx == NULL && table[i].dev == dev && table[i].a)
            e = &table[i];
    if (e) {
        ts_cuda_backend_rebind(e->be, ctx, dev);
    } else {
        if (table_used == MAX_CONTEXTS) {
            pthread_mutex_unlock(&table_lock);
            ts_log_once(&table, "more than %d CUDA contexts: the others are not cached",
                        MAX_CONTEXTS);
            return NULL;
        }
        e = &table[table_used];
        ts_backend be;
        e->be = ts_cuda_backend_create(ctx, dev, g_cfg.reuse_fence, &be);
        ts_stats_sink sink = {NULL, NULL};
        ts_statspage *page = page_get();
        uint8_t uuid[16];
        device_uuid(dev, uuid);
        e->slot = page ? ts_statspage_claim(page, (int)dev, (uint64_t)(uintptr_t)ctx, &sink) : -1;
        if (e->slot >= 0)
            ts_statspage_set_device_uuid(page, e->slot, uuid);
        e->a = e->be ? ts_allocator_create(&g_cfg, &be, (int)dev, sink) : NULL;
        if (!e->a) {
            pthread_mutex_unlock(&table_lock);
            ts_log_once(&table_create, "cannot create an allocator (out of host memory)");
            return NULL;
        }
        announce_device(e->a, (int)dev);
        if (page && e->slot >= 0) {
            ts_allocator_set_observer(e->a, ts_statspage_observer,
                                      ts_statspage_observer_user(page, e->slot),
                                      STATS_PUBLISH_EVERY);
            /* tessera-stat snapshot asks for a fresh map through this word */
            ts_allocator_set_observer_request(e->a,
                                              &ts_statspage_slot(page, e->slot)->head.map_request);
            e->history = history_start(e->a, e->slot, (int)dev);
            if (e->history) /* maps say where the history stood when they were taken */
                ts_statspage_set_history(page, e->slot, ts_history_ring(e->history));
        }
        ts_lend_track(e->a, (int)dev, uuid);
        e->used = true;
        __atomic_store_n(&table_used, table_used + 1, __ATOMIC_RELEASE);
    }
    e->dev = dev;
    e->primary = context_is_primary(ctx, dev);
    uint64_t pending = grants_take(ctx), self = 0;
    if (ts_peer_add(&self, dev) == TS_OK) /* a device 0-63: its pool may have been shared */
        pending |= pool_grants[dev];
    allocator_grant_peers(e->a, pending);
    __atomic_store_n(&e->ctx, ctx, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&table_lock);
    return e;
}

ts_allocator *ts_ctx_allocator(CUcontext *ctx_out)
{
    CUcontext ctx = NULL;
    if (ts_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
        *ctx_out = NULL;
        return NULL;
    }
    *ctx_out = ctx;
    ctx_entry *e = tls_last;
    if (!e || __atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) != ctx) {
        e = table_find(ctx);
        if (!e) {
            e = table_create(ctx);
            control_start();
        }
        if (!e)
            return NULL;
        /* This thread's first use of the context, as far as the fast path knows. */
        if (ts_census_note_thread(ctx))
            ts_allocator_order_reuse(e->a);
        tls_last = e;
    }
    return e->a;
}

void ts_ctx_note_thread(CUcontext ctx)
{
    if (!ts_census_note_thread(ctx))
        return;
    /* A second host thread: blocks reused so far with no device call (the context's work ran in
     * one queue) must be ordered before anything this thread issues. */
    ctx_entry *e = table_find(ctx);
    if (e && e->a)
        ts_allocator_order_reuse(e->a);
}

void ts_ctx_stream_created(CUcontext ctx, CUstream s, unsigned int flags)
{
    ctx_entry *e = table_find(ctx);
    if (e && e->be)
        ts_cuda_backend_stream_created(e->be, s, flags);
    else
        ts_streams_add(s, ctx, flags); /* no allocator yet: nothing was reused to order */
}

/* The free of every kind (cudaFree, cuMemFree, a stream-ordered free on `stream`, 0 for none):
 * the thread's usual context first, then the others. */
static int free_on_stream(uintptr_t ptr, uintptr_t stream, size_t *requested)
{
    /* A block another process has open stays allocated until it closes it (ipc.c); an exported
     * block is freed in no stream's order. */
    if (__builtin_expect(__atomic_load_n(&ts_ipc_exported, __ATOMIC_RELAXED) != 0, 0)) {
        int held = ts_ipc_on_free(ptr, requested);
        if (held == TS_IPC_HELD)
            return TS_OK;
        if (held == TS_IPC_INVALID)
            return TS_EINVAL;
        stream = 0;
    }
    ts_ipc_tick();
    ctx_entry *first = tls_last;
    if (first && first->a) {
        int rc = ts_free_on_stream(first->a, ptr, stream, requested);
        if (rc != TS_ENOTFOUND)
            return rc;
    }
    /* Not the thread's usual context: another device's pointer, or a foreign one. */
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        if (e == first || !__atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) || !e->a)
            continue;
        int rc = ts_free_on_stream(e->a, ptr, stream, requested);
        if (rc != TS_ENOTFOUND)
            return rc;
    }
    return TS_ENOTFOUND;
}

/* A free waits while the process is paused: its block's pages are away (shim/gate.c). */
int ts_ctx_free_on_stream(uintptr_t ptr, uintptr_t stream, size_t *requested)
{
    ts_gate_enter();
    int rc = free_on_stream(ptr, stream, requested);
    ts_gate_leave();
    return rc;
}

int ts_ctx_free(uintptr_t ptr, size_t *requested)
{
    return ts_ctx_free_on_stream(ptr, 0, requested);
}

int ts_ctx_host_free(uintptr_t ptr)
{
    /* Pinned buffers are freed from any context (or none): each host cache is asked. */
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        if (!__atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) || !e->a)
            continue; /* as the other walks: an entry without an allocator is skipped */
        int rc = ts_host_free(e->a, ptr);
        if (rc != TS_ENOTFOUND)
            return rc;
    }
    return TS_ENOTFOUND;
}

int ts_ctx_host_owner(uintptr_t ptr, int *index, ts_host_info *info)
{
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        if (__atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) && e->a &&
            ts_host_lookup(e->a, ptr, info) == TS_OK) {
            *index = i;
            return TS_OK;
        }
    }
    return TS_ENOTFOUND;
}

int ts_ctx_lookup(uintptr_t ptr, ts_segment_info *seg, ts_block_info *blk)
{
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        if (__atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) && ts_lookup(e->a, ptr, seg, blk) == TS_OK)
            return TS_OK;
    }
    return TS_ENOTFOUND;
}

int ts_ctx_owner(uintptr_t ptr, ts_allocator **a, CUcontext *ctx, int *index,
                 ts_block_info *blk)
{
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        CUcontext c = __atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE);
        if (c && ts_lookup(e->a, ptr, NULL, blk) == TS_OK) {
            if (a)
                *a = e->a;
            if (ctx)
                *ctx = c;
            if (index)
                *index = i;
            return TS_OK;
        }
    }
    return TS_ENOTFOUND;
}

static void entry_forget(ctx_entry *e)
{
    /* Remove the entry from lookups first, then drop the memory the context took with it. */
    (void)grants_take(e->ctx);
    __atomic_store_n(&e->ctx, NULL, __ATOMIC_RELEASE);
    ts_ipc_forget(e->a);
    ts_allocator_forget_all(e->a);
    ts_cuda_backend_forget(e->be);
}

void ts_ctx_forget(CUcontext ctx)
{
    if (!ctx)
        return;
    pthread_mutex_lock(&table_lock);
    ctx_entry *e = table_find(ctx);
    if (e)
        entry_forget(e);
    else
        (void)grants_take(ctx); /* peer access waiting for an allocator dies with it too */
    pthread_mutex_unlock(&table_lock);
}

void ts_ctx_forget_primary(CUdevice dev)
{
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < table_used; i++) {
        ctx_entry *e = &table[i];
        if (e->ctx && e->primary && e->dev == dev)
            entry_forget(e);
    }
    pthread_mutex_unlock(&table_lock);
}

void ts_ctx_stream_retired(CUstream s)
{
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (__atomic_load_n(&table[i].ctx, __ATOMIC_ACQUIRE) && table[i].a)
            ts_allocator_stream_retire(table[i].a, (uintptr_t)s);
}

/* Live allocations left to the driver and counted (any context): while none, a foreign free
 * costs one load more. */
static unsigned driver_left_live;

void ts_ctx_driver_left_note(void)
{
    __atomic_add_fetch(&driver_left_live, 1, __ATOMIC_RELAXED);
}

ts_allocator *ts_ctx_driver_left_take(uintptr_t ptr, size_t *bytes)
{
    if (__atomic_load_n(&driver_left_live, __ATOMIC_RELAXED) == 0 || !ptr)
        return NULL;
    int n = __atomic_load_n(&table_used, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++) {
        ctx_entry *e = &table[i];
        if (__atomic_load_n(&e->ctx, __ATOMIC_ACQUIRE) && e->a &&
            ts_allocator_driver_forget(e->a, ptr, bytes) == TS_OK) {
            __atomic_sub_fetch(&driver_left_live, 1, __ATOMIC_RELAXED);
            return e->a;
        }
    }
    return NULL;
}

void ts_ctx_driver_left_restore(ts_allocator *a, uintptr_t ptr, size_t bytes)
{
    if (a && ts_allocator_driver_reserve(a, bytes, false) == TS_OK &&
        ts_allocator_driver_record(a, ptr, bytes) == TS_OK)
        ts_ctx_driver_left_note();
}

void ts_ctx_count_passthrough(void)
{
    /* Counted on the thread's last allocator, when it has one: a page reader then sees how
     * many calls tessera left to the driver. */
    ctx_entry *e = tls_last;
    if (e && e->a)
        ts_note_passthrough(e->a);
}

/* --- out of memory ------------------------------------------------------------------------------ */

/* The out-of-memory line is rate-limited to one a second, except that a failure larger than any
 * reported or held back in that second is always said: a later, larger failure is never hidden
 * behind a small one. What is held back is counted in the next line; the last of it is said at
 * exit when no line came after it, so the failure that ends a run has its line. */
static pthread_mutex_t oom_lock = PTHREAD_MUTEX_INITIALIZER;
static time_t oom_last;        /* the second of the last line said */
static size_t oom_largest;     /* the largest request said or held back in that second */
static unsigned oom_suppressed;
static ts_oom_info oom_held;   /* the last failure held back, when oom_suppressed */
static bool oom_atexit;

static void oom_exit(void)
{
    pthread_mutex_lock(&oom_lock);
    unsigned n = oom_suppressed;
    ts_oom_info last = oom_held;
    oom_suppressed = 0;
    pthread_mutex_unlock(&oom_lock);
    if (!n)
        return;
    char line[768];
    ts_format_oom(&last, line, sizeof line);
    ts_log("%u more out-of-memory report%s suppressed; the last: %s", n, n == 1 ? "" : "s", line);
}

void ts_report_oom(const ts_oom_info *oom)
{
    ctx_entry *e = tls_last; /* the entry whose allocator just failed */
    if (g_cfg.snapshot_on_oom[0] && e && e->a)
        ts_oom_snapshot(g_cfg.snapshot_on_oom, e->a, e->history);
    if (!g_cfg.oom_report)
        return;
    pthread_mutex_lock(&oom_lock);
    time_t now = time(NULL);
    if (oom_last != now)
        oom_largest = 0;
    bool say = oom_last != now || oom->requested > oom_largest;
    if (oom->requested > oom_largest)
        oom_largest = oom->requested;
    if (!say) {
        oom_suppressed++;
        oom_held = *oom;
        if (!oom_atexit)
            oom_atexit = atexit(oom_exit) == 0;
        pthread_mutex_unlock(&oom_lock);
        return;
    }
    unsigned suppressed = oom_suppressed;
    oom_suppressed = 0;
    oom_last = now;
    pthread_mutex_unlock(&oom_lock);
    char line[768];
    ts_format_oom(oom, line, sizeof line);
    if (suppressed)
        ts_log("%s (%u more out-of-memory reports suppressed)", line, suppressed);
    else
        ts_log("%s", line);
}

/* --- fork ----------------------------------------------------------------------------------------- */

static void fork_prepare(void)
{
    pthread_mutex_lock(&table_lock);
    pthread_mutex_lock(&page_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&page_lock);
    pthread_mutex_unlock(&table_lock);
}

/* The child starts clean: CUDA is unusable after fork, the parent's cache is not the child's,
 * and the parent's page must be neither written nor removed by the child. Entries are dropped
 * without touching their allocators (their mutexes may have been held by threads that do not
 * exist in the child). */
static void fork_child(void)
{
    pthread_mutex_init(&table_lock, NULL);
    pthread_mutex_init(&page_lock, NULL);
    pthread_mutex_init(&oom_lock, NULL);
    oom_suppressed = 0; /* the parent's held-back failure is the parent's to say */
    ts_oom_snapshot_forget();
    for (int i = 0; i < table_used; i++)
        ts_history_forget(table[i].history); /* the parent's rings: never written by the child */
    memset(table, 0, sizeof table);
    memset(pool_grants, 0, sizeof pool_grants);
    table_used = 0;
    tls_last = NULL;
    ts_statspage_forget(g_page);
    g_page = NULL;
    g_page_tried = false;
    g_control_due = false;
    ts_streams_reset_after_fork();
}
