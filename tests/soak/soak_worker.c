/* One soak process: threads on several kinds of streams allocate, fill, hand blocks to each
 * other through a shared pool, verify every byte and free blocks other threads allocated; the
 * main thread forks children now and then and asks cudaMemGetInfo. Injected driver failures
 * (TESSERA_SIM_FAIL_*_AFTER) surface as cudaErrorMemoryAllocation and are tolerated.
 *
 * At the end every block is verified and freed, and the process checks what it would have
 * leaked: descriptors (count at the start and the end), device memory (cudaMemGetInfo: with
 * every block freed, tessera counts its whole cache as free, so free == total), host memory
 * (RSS after warm-up and at the end).
 *
 * Usage: soak_worker SECONDS THREADS SEED
 * RESULT status=ok|corrupt|error allocs frees verified ooms forks fds_start fds_end
 *        rss_warm_kb rss_end_kb free_end total */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define POOL 256
#define MAX_THREADS 16

typedef struct block {
    void *ptr;
    size_t size;
    unsigned char byte;
} block;

static block pool[POOL];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int stop;
static unsigned long long n_allocs, n_frees, n_verified, n_ooms;
static volatile int failed; /* 3: corruption, 1: unexpected error */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fail(int code, const char *what, cudaError_t e)
{
    fprintf(stderr, "soak_worker: %s: %s\n", what, cudaGetErrorName(e));
    __atomic_store_n(&failed, code, __ATOMIC_RELAXED);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
}

/* Read the block back on stream s and check every byte. */
static int verify(const block *b, cudaStream_t s, unsigned char *host)
{
    cudaError_t e = cudaMemcpyAsync(host, b->ptr, b->size, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        fail(1, "read back", e);
        return 0;
    }
    for (size_t i = 0; i < b->size; i++)
        if (host[i] != b->byte) {
            fprintf(stderr, "soak_worker: block %p+%zu: byte %zu is %u, want %u\n", b->ptr,
                    b->size, i, host[i], b->byte);
            __atomic_store_n(&failed, 3, __ATOMIC_RELAXED);
            __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
            return 0;
        }
    __atomic_fetch_add(&n_verified, 1, __ATOMIC_RELAXED);
    return 1;
}

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    unsigned kind = (unsigned)((uintptr_t)arg % 4);
    cudaStream_t s = 0;
    if (kind == 1)
        s = cudaStreamPerThread;
    else if (kind == 2 && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        fail(1, "stream", cudaErrorUnknown);
    else if (kind == 3 && cudaStreamCreate(&s) != cudaSuccess)
        fail(1, "stream", cudaErrorUnknown);
    unsigned char *host = malloc((size_t)8 << 20);
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED) && host) {
        unsigned slot = (unsigned)(rnd(&seed) % POOL);
        pthread_mutex_lock(&pool_lock);
        block b = pool[slot];
        pool[slot].ptr = NULL;
        pthread_mutex_unlock(&pool_lock);
        if (b.ptr) { /* maybe another thread's block: verify, then free it here */
            if (!verify(&b, s, host))
                break;
            cudaError_t e = cudaFree(b.ptr);
            if (e != cudaSuccess) {
                fail(1, "cudaFree", e);
                break;
            }
            __atomic_fetch_add(&n_frees, 1, __ATOMIC_RELAXED);
            continue;
        }
        /* log-uniform sizes from 1 B to 8 MiB */
        unsigned bits = (unsigned)(rnd(&seed) % 23);
        b.size = 1 + (size_t)(rnd(&seed) % ((size_t)1 << bits));
        b.byte = (unsigned char)(rnd(&seed) | 1);
        cudaError_t e = cudaMalloc(&b.ptr, b.size);
        if (e == cudaErrorMemoryAllocation) { /* injected, or the device is full: tolerated */
            __atomic_fetch_add(&n_ooms, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (e != cudaSuccess) {
            fail(1, "cudaMalloc", e);
            break;
        }
        __atomic_fetch_add(&n_allocs, 1, __ATOMIC_RELAXED);
        e = cudaMemsetAsync(b.ptr, b.byte, b.size, s);
        if (e == cudaSuccess) /* published to other streams' threads only once written */
            e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            fail(1, "memset", e);
            break;
        }
        pthread_mutex_lock(&pool_lock);
        block old = pool[slot];
        pool[slot] = b;
        pthread_mutex_unlock(&pool_lock);
        if (old.ptr) { /* a block another thread put there meanwhile */
            if (!verify(&old, s, host) || cudaFree(old.ptr) != cudaSuccess)
                break;
            __atomic_fetch_add(&n_frees, 1, __ATOMIC_RELAXED);
        }
    }
    free(host);
    if (kind >= 2 && s)
        cudaStreamDestroy(s);
    return NULL;
}

/* Open descriptors, less the simulated device's memory (memfds standing for device memory
 * that tessera legitimately keeps cached) and the directory stream's own. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char link[300], target[256];
        if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(d))
            continue;
        snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        target[len > 0 ? len : 0] = '\0';
        if (strncmp(target, "/memfd:tessera-sim", 18) != 0)
            n++;
    }
    closedir(d);
    return n;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    double seconds = atof(argv[1]);
    int threads = atoi(argv[2]);
    uint64_t seed = strtoull(argv[3], NULL, 10) | 1;
    if (threads < 1 || threads > MAX_THREADS)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    size_t free0 = 0, total = 0;
    if (cudaMemGetInfo(&free0, &total) != cudaSuccess)
        return 1;
    int fds_start = count_fds();
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + seed % 1000 * MAX_THREADS));
    double t0 = now();
    long rss_warm = 0;
    unsigned forks = 0;
    while (!stop && now() - t0 < seconds) {
        usleep(20000);
        if (!rss_warm && now() - t0 > seconds / 4)
            rss_warm = rss_kb();
        if (rnd(&seed) % 8 == 0) { /* fork: the child uses no CUDA and must exit cleanly */
            pid_t c = fork();
            if (c == 0)
                _exit(count_fds() >= 0 ? 0 : 1);
            int st = 0;
            if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "soak_worker: fork child failed\n");
                failed = 1;
            }
            forks++;
        }
        size_t f, tot;
        if (cudaMemGetInfo(&f, &tot) != cudaSuccess || tot != total) {
            fprintf(stderr, "soak_worker: cudaMemGetInfo\n");
            failed = 1;
        }
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    unsigned char *host = malloc((size_t)8 << 20);
    for (int i = 0; i < POOL && host; i++)
        if (pool[i].ptr) {
            if (!failed && !verify(&pool[i], 0, host))
                break;
            if (cudaFree(pool[i].ptr) == cudaSuccess)
                n_frees++;
            pool[i].ptr = NULL;
        }
    free(host);
    cudaDeviceSynchronize();
    size_t free_end = 0;
    cudaMemGetInfo(&free_end, &total);
    int fds_end = count_fds();
    long rss_end = rss_kb();
    const char *status = failed == 3 ? "corrupt" : failed ? "error" : "ok";
    printf("RESULT status=%s allocs=%llu frees=%llu verified=%llu ooms=%llu forks=%u "
           "fds_start=%d fds_end=%d rss_warm_kb=%ld rss_end_kb=%ld free_end=%zu total=%zu\n",
           status, n_allocs, n_frees, n_verified, n_ooms, forks, fds_start, fds_end, rss_warm,
           rss_end, free_end, total);
    return failed;
}
