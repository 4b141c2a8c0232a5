/* Simulated CUDA driver: configuration, devices, contexts, counters, error strings. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct sim_global sim_g = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
};

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static pthread_key_t tls_key;
static uint64_t tid_counter;
static __thread struct sim_tls t_tls;

/* ---- small helpers ------------------------------------------------------------------- */

void sim_log(const char *fmt, ...)
{
    if (!sim_g.verbose)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    /* one write(2): lines of concurrent threads and processes do not interleave */
    char line[600];
    int m = snprintf(line, sizeof line, "tessera-sim: %.*s", n, buf);
    if (m > 0) {
        ssize_t w = write(2, line, (size_t)m < sizeof line ? (size_t)m : sizeof line - 1);
        (void)w;
    }
}

void sim_lock(void) { pthread_mutex_lock(&sim_g.mu); }
void sim_unlock(void) { pthread_mutex_unlock(&sim_g.mu); }

void sim_sleep_us(unsigned us)
{
    if (!us)
        return;
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *sim_grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return arr;
    size_t ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(arr, ncap * elem);
    if (!p)
        return NULL;
    *cap = ncap;
    return p;
}

/* ---- configuration ------------------------------------------------------------------- */

/* "80G", "512M", "1073741824", "4GiB", "64k": binary multiples. */
static int parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && *end == 'i')
        end++;
    if (*end == 'B' || (*end == 'b' && shift))
        end++;
    if (*end)
        return -1;
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_uint(const char *name, uint64_t max, uint64_t *out)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-' || v > max) {
        sim_log("%s=%s is not a number in [0, %" PRIu64 "]", name, s, max);
        return -1;
    }
    *out = v;
    return 0;
}

static void report_at_exit(void);

static void forked_child(void)
{
    /* A real driver refuses to work in a fork()ed child of an initialised process. Do not
     * touch the lock here: another thread may have held it at fork time. */
    sim_g.forked = 1;
    sim_shared_forget();
}

static void tls_destructor(void *arg)
{
    if (arg)
        sim_tls_release((struct sim_tls *)arg);
}

static int setup_device(int i, size_t mem)
{
    struct sim_device *d = &sim_g.dev[i];
    d->ordinal = i;
    d->total_pages = mem / SIM_PAGE;
    /* Twice the memory as address space: VA fragmentation never causes a false OOM
     * before the page budget is exhausted (as on a GPU, whose VA space is much larger). */
    d->va_size = 2 * mem;
    d->ctr.total_bytes = (uint64_t)d->total_pages * SIM_PAGE;
    for (int k = 0; k < 3; k++)
        d->pool.reuse[k] = 1; /* a default pool allows every kind of reuse */
    d->pool.device = i;
    d->current_pool = &d->pool;
    char name[64];
    snprintf(name, sizeof name, "tessera-sim-dev%d", i);
    d->memfd = memfd_create(name, MFD_CLOEXEC);
    if (d->memfd < 0) {
        sim_log("memfd_create: %s", strerror(errno));
        return -1;
    }
    if (ftruncate(d->memfd, (off_t)d->va_size) != 0) {
        sim_log("ftruncate(%zu): %s", d->va_size, strerror(errno));
        return -1;
    }
    /* reserve va_size + one page, then place the shared mapping at a 2 MiB boundary */
    size_t span = d->va_size + SIM_PAGE;
    void *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        sim_log("mmap(%zu): %s", span, strerror(errno));
        return -1;
    }
    uintptr_t base = ((uintptr_t)r + SIM_PAGE - 1) & ~(uintptr_t)(SIM_PAGE - 1);
    void *m = mmap((void *)base, d->va_size, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                   d->memfd, 0);
    if (m == MAP_FAILED) {
        sim_log("mmap(device %d): %s", i, strerror(errno));
        munmap(r, span);
        return -1;
    }
    if (base > (uintptr_t)r)
        munmap(r, base - (uintptr_t)r);
    uintptr_t rend = (uintptr_t)r + span, mend = base + d->va_size;
    if (rend > mend)
        munmap((void *)mend, rend - mend);
    /* a fork()ed child has no device (its driver calls fail anyway) */
    madvise((void *)base, d->va_size, MADV_DONTFORK);
    d->base = base;

    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->magic = SIM_MAGIC_CTX;
    c->device = i;
    c->primary = true;
    c->next_all = sim_g.ctxs;
    sim_g.ctxs = c;
    d->primary = c;
    sim_log("device %d: %zu MiB at [%#" PRIxPTR ", %#" PRIxPTR ")", i, mem >> 20, base,
            base + d->va_size);
    return 0;
}

static void configure(void)
{
    const char *v = getenv("TESSERA_SIM_VERBOSE");
    sim_g.verbose = v && *v && strcmp(v, "0") != 0;

    uint64_t ndev = 1, mem = 80ull << 30, delay = 0, adelay = 0, fa = 0, fm = 0, mdelay = 0;
    int bad = 0;
    bad |= parse_uint("TESSERA_SIM_DEVICES", SIM_MAX_DEVICES, &ndev);
    bad |= parse_uint("TESSERA_SIM_OP_DELAY_US", 10000000, &delay);
    bad |= parse_uint("TESSERA_SIM_ALLOC_DELAY_US", 10000000, &adelay);
    bad |= parse_uint("TESSERA_SIM_MARKER_DELAY", 1, &mdelay);
    bad |= parse_uint("TESSERA_SIM_FAIL_ALLOC_AFTER", UINT64_MAX, &fa);
    bad |= parse_uint("TESSERA_SIM_FAIL_MAP_AFTER", UINT64_MAX, &fm);
    const char *ms = getenv("TESSERA_SIM_MEMORY");
    if (ms && *ms) {
        if (parse_size(ms, &mem) != 0 || mem < SIM_PAGE || mem > (1ull << 44)) {
            sim_log("TESSERA_SIM_MEMORY=%s: expected a size such as 80G, 512M (2M..16T)", ms);
            bad = -1;
        }
    }
    if (bad) {
        sim_g.init_status = CUDA_ERROR_INVALID_VALUE;
        return;
    }
    mem &= ~(uint64_t)(SIM_PAGE - 1);
    sim_g.ndev = (int)ndev;
    sim_g.mem_bytes = (size_t)mem;
    sim_g.op_delay_us = (unsigned)delay;
    sim_g.marker_delay = mdelay != 0;
    sim_g.alloc_delay_us = (unsigned)adelay;
    sim_g.fail_alloc_after = fa;
    sim_g.fail_map_after = fm;
    const char *rp = getenv("TESSERA_SIM_REPORT");
    if (rp && *rp)
        sim_g.report_path = strdup(rp);

    if (pthread_key_create(&tls_key, tls_destructor) != 0) {
        sim_g.init_status = CUDA_ERROR_OPERATING_SYSTEM;
        return;
    }
    for (int i = 0; i < sim_g.ndev; i++) {
        if (setup_device(i, sim_g.mem_bytes) != 0) {
            sim_g.init_status = CUDA_ERROR_OPERATING_SYSTEM;
            return;
        }
    }
    const char *shared = getenv("TESSERA_SIM_SHARED");
    if (shared && *shared && sim_shared_attach(shared) != 0) {
        sim_g.init_status = CUDA_ERROR_INVALID_VALUE;
        return;
    }
    sim_g.uuid_tag = (uint32_t)getpid();
    if (shared && *shared) {
        uint32_t h = 2166136261u; /* FNV-1a of the name */
        for (const char *c = shared; *c; c++)
            h = (h ^ (unsigned char)*c) * 16777619u;
        sim_g.uuid_tag = h | 0x80000000u; /* never a pid */
    }
    pthread_atfork(NULL, NULL, forked_child);
    if (sim_g.report_path)
        atexit(report_at_exit);
    sim_log("%d device(s) x %zu MiB, op delay %u us%s, alloc delay %u us, fail alloc #%" PRIu64
            ", fail map #%" PRIu64,
            sim_g.ndev, sim_g.mem_bytes >> 20, sim_g.op_delay_us,
            sim_g.marker_delay ? " (markers too)" : "", sim_g.alloc_delay_us,
            sim_g.fail_alloc_after, sim_g.fail_map_after);
    sim_g.init_status = CUDA_SUCCESS;
}

CUresult sim_configure(void)
{
    if (sim_g.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_once(&cfg_once, configure);
    return (CUresult)sim_g.init_status;
}

CUresult sim_check_init(void)
{
    if (sim_g.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!__atomic_load_n(&sim_g.initialized, __ATOMIC_ACQUIRE))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

CUresult sim_init(unsigned flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_configure();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_g.ndev == 0)
        return CUDA_ERROR_NO_DEVICE;
    __atomic_store_n(&sim_g.initialized, true, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* ---- threads ------------------------------------------------------------------------- */

struct sim_tls *sim_tls(void)
{
    struct sim_tls *t = &t_tls;
    if (!t->tid)
        t->tid = __atomic_add_fetch(&tid_counter, 1, __ATOMIC_RELAXED);
    return t;
}

/* Called with the lock held when a thread first gets a per-thread stream: make sure the
 * thread-exit destructor runs. */
void sim_tls_arm(struct sim_tls *t)
{
    if (!t->key_set) {
        pthread_setspecific(tls_key, t);
        t->key_set = true;
    }
}

/* ---- devices ------------------------------------------------------------------------- */

CUresult sim_device_check(CUdevice dev)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (dev < 0 || dev >= sim_g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* H100 SXM-like values; attributes not listed read as 0. */
static const int attr_values[CU_DEVICE_ATTRIBUTE_MAX] = {
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = 49152,
    [CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = 65536,
    [CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32,
    [CU_DEVICE_ATTRIBUTE_MAX_PITCH] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = 65536,
    [CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = 1980000,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = 1,
    [CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 132,
    [CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = 1,
    [CU_DEVICE_ATTRIBUTE_ECC_ENABLED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = 2619000,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = 5120,
    [CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 52428800,
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048,
    [CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = 3,
    [CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE] = 32768,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = 32,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT] = 65000,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH] = 2097120,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = 233472,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = 65536,
    [CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = 2,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 1,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = 1,
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = 232448,
    [CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES] = 0,
    [CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = 32,
    [CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE] = 32505856,
    [CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE] = 134213632,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING] = 100,
    [CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = 1,
    [CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = 1,
    [CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT] = 4,
    [CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS] = 1,
    [CU_DEVICE_ATTRIBUTE_NUMA_ID] = -1,
    [CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = 0x233010de,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID] = 0x16c110de,
};

CUresult sim_device_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pi || (int)attrib <= 0 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x18 + 0x10 * dev; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: *pi = dev; break;
    default: *pi = attr_values[attrib]; break;
    }
    return CUDA_SUCCESS;
}

/* ---- counters and report ------------------------------------------------------------- */

void sim_device_account(struct sim_device *d, long pages, int live_delta, int handle_delta)
{
    d->used_pages = (size_t)((long)d->used_pages + pages);
    if (pages < 0) /* reserved with sim_device_reserve when it was taken */
        sim_device_unreserve(d, (size_t)-pages);
    d->ctr.bytes_in_use = (uint64_t)d->used_pages * SIM_PAGE;
    if (d->ctr.bytes_in_use > d->ctr.peak_bytes_in_use)
        d->ctr.peak_bytes_in_use = d->ctr.bytes_in_use;
    d->ctr.live_allocations = (uint64_t)((int64_t)d->ctr.live_allocations + live_delta);
    if (d->ctr.live_allocations > d->ctr.peak_live_allocations)
        d->ctr.peak_live_allocations = d->ctr.live_allocations;
    d->ctr.live_handles = (uint64_t)((int64_t)d->ctr.live_handles + handle_delta);
}

void sim_report_counters(int device, struct tessera_sim_counters *out)
{
    sim_lock();
    *out = sim_g.dev[device].ctr;
    sim_unlock();
}

static void report_at_exit(void)
{
    if (sim_g.forked || !sim_g.report_path)
        return;
    int fd = open(sim_g.report_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        sim_log("TESSERA_SIM_REPORT=%s: %s", sim_g.report_path, strerror(errno));
        return;
    }
    for (int i = 0; i < sim_g.ndev; i++) {
        struct tessera_sim_counters c;
        sim_report_counters(i, &c);
        char line[2048];
        int n = snprintf(line, sizeof line,
                         "{\"pid\":%ld,\"device\":%d,\"total_bytes\":%" PRIu64
                         ",\"event_creates\":%" PRIu64 ",\"live_events\":%" PRIu64
                         ",\"host_bytes\":%" PRIu64 ",\"peak_host_bytes\":%" PRIu64
                         ",\"alloc_calls\":%" PRIu64 ",\"free_calls\":%" PRIu64
                         ",\"implicit_frees\":%" PRIu64 ",\"failed_allocs\":%" PRIu64
                         ",\"create_calls\":%" PRIu64 ",\"release_calls\":%" PRIu64
                         ",\"map_calls\":%" PRIu64 ",\"unmap_calls\":%" PRIu64
                         ",\"bytes_in_use\":%" PRIu64 ",\"peak_bytes_in_use\":%" PRIu64
                         ",\"live_allocations\":%" PRIu64 ",\"peak_live_allocations\":%" PRIu64
                         ",\"live_handles\":%" PRIu64 ",\"graph_alloc_calls\":%" PRIu64
                         ",\"graph_free_calls\":%" PRIu64 ",\"imported_frees\":%" PRIu64
                         ",\"races\":%" PRIu64 ",\"untracked_streams\":%" PRIu64
                         ",\"set_access_calls\":%" PRIu64 "}\n",
                         (long)getpid(), i, c.total_bytes, c.event_creates, c.live_events,
                         c.host_bytes, c.peak_host_bytes, c.alloc_calls, c.free_calls,
                         c.implicit_frees, c.failed_allocs, c.create_calls, c.release_calls,
                         c.map_calls, c.unmap_calls, c.bytes_in_use, c.peak_bytes_in_use,
                         c.live_allocations, c.peak_live_allocations, c.live_handles,
                         c.graph_alloc_calls, c.graph_free_calls, c.imported_frees,
                         c.races, c.untracked_streams, c.set_access_calls);
        if (n > 0 && (size_t)n < sizeof line) {
            ssize_t w = write(fd, line, (size_t)n);
            (void)w;
        }
    }
    close(fd);
}

/* ---- contexts ------------------------------------------------------------------------ */

bool sim_ctx_valid(const struct sim_ctx *c)
{
    for (const struct sim_ctx *x = sim_g.ctxs; x; x = x->next_all)
        if (x == c)
            return c->magic == SIM_MAGIC_CTX;
    return false;
}

CUresult sim_ctx_from_handle(CUcontext h, struct sim_ctx **out)
{
    struct sim_ctx *c = (struct sim_ctx *)h;
    if (!c || !sim_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c->destroyed || !c->active) /* a reset or released primary context too */
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

CUresult sim_current_ctx(struct sim_ctx **out)
{
    struct sim_tls *t = sim_tls();
    if (t->depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = t->stack[t->depth - 1];
    if (c->destroyed || !c->active) /* a reset or released primary context too */
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

static void activate(struct sim_ctx *c)
{
    c->active = true;
    c->uid = ++sim_g.uid;
}

void sim_ctx_teardown(struct sim_ctx *c)
{
    sim_wait_ctx_idle(c);
    sim_ctx_drop_streams(c);
    sim_ctx_free_allocs(c);
    sim_peer_drop_ctx(c);
    c->active = false;
}

CUresult sim_ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx || (flags & ~0xffu))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_tls *t = sim_tls();
    if (t->depth == SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->magic = SIM_MAGIC_CTX;
    c->device = dev;
    c->flags = flags;
    sim_lock();
    activate(c);
    c->next_all = sim_g.ctxs;
    sim_g.ctxs = c;
    t->stack[t->depth++] = c;
    sim_unlock();
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_destroy(CUcontext h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_tls *t = sim_tls();
    if (t->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)h;
    if (!c || !sim_ctx_valid(c) || c->primary) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (c->destroyed) {
        sim_unlock();
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    c->destroyed = true; /* new work is refused from here on */
    sim_ctx_teardown(c);
    if (t->depth > 0 && t->stack[t->depth - 1] == c)
        t->depth--;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult sim_primary_retain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c = sim_g.dev[dev].primary;
    if (c->retain == 0)
        activate(c);
    c->retain++;
    sim_unlock();
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult sim_primary_release(CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_ctx *c = sim_g.dev[dev].primary;
    if (c->retain == 0) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->retain == 0)
        sim_ctx_teardown(c);
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult sim_primary_reset(CUdevice dev)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    sim_lock();
    struct sim_ctx *c = sim_g.dev[dev].primary;
    if (c->active)
        sim_ctx_teardown(c);
    c->retain = 0;
    sim_unlock();
    sim_log("device %d: primary context reset", dev);
    return CUDA_SUCCESS;
}

CUresult sim_primary_state(CUdevice dev, unsigned *flags, int *active)
{
    CUresult r = sim_device_check(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_ctx *c = sim_g.dev[dev].primary;
    *flags = c->flags;
    *active = c->active ? 1 : 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

CUresult sim_ctx_push(CUcontext h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_tls *t = sim_tls();
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)h;
    if (!c || !sim_ctx_valid(c) || c->destroyed) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    sim_unlock();
    if (t->depth == SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    t->stack[t->depth++] = c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_pop(CUcontext *out)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_tls *t = sim_tls();
    if (t->depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_ctx *c = t->stack[--t->depth];
    if (out)
        *out = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_set_current(CUcontext h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_tls *t = sim_tls();
    if (!h) {
        if (t->depth > 0)
            t->depth--;
        return CUDA_SUCCESS;
    }
    sim_lock();
    struct sim_ctx *c = (struct sim_ctx *)h;
    bool ok = sim_ctx_valid(c) && !c->destroyed;
    sim_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (t->depth == 0)
        t->depth = 1;
    t->stack[t->depth - 1] = c;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_get_current(CUcontext *out)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_tls *t = sim_tls();
    *out = t->depth ? (CUcontext)t->stack[t->depth - 1] : NULL;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_get_device(CUdevice *dev, CUcontext h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    sim_lock();
    r = h ? sim_ctx_from_handle(h, &c) : sim_current_ctx(&c);
    if (r == CUDA_SUCCESS)
        *dev = c->device;
    sim_unlock();
    return r;
}

CUresult sim_ctx_synchronize(CUcontext h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (sim_tls()->in_callback)
        return CUDA_ERROR_NOT_PERMITTED;
    struct sim_ctx *c;
    sim_lock();
    r = h ? sim_ctx_from_handle(h, &c) : sim_current_ctx(&c);
    if (r == CUDA_SUCCESS)
        r = sim_capture_unsafe(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (r == CUDA_SUCCESS)
        sim_wait_ctx_idle(c);
    sim_unlock();
    return r;
}

/* ---- error names and strings --------------------------------------------------------- */

#define E(code, str) {code, #code, str}
static const struct {
    CUresult code;
    const char *name;
    const char *str;
} errors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using external profiling tool"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
    E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
    E(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped"),
    E(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    E(CUDA_ERROR_ALREADY_ACQUIRED, "resource already acquired"),
    E(CUDA_ERROR_NOT_MAPPED, "resource not mapped"),
    E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
    E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
    E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
    E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
    E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
    E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    E(CUDA_ERROR_TOO_MANY_PEERS, "peer mapping resources exhausted"),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
    E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work"),
    E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_TIMEOUT, "wait operation timed out"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

const char *sim_error_name(CUresult e)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e)
            return errors[i].name;
    return NULL;
}

const char *sim_error_string(CUresult e)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e)
            return errors[i].str;
    return NULL;
}
