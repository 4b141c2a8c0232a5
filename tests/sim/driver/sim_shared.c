/* Simulated CUDA driver: one device's memory shared by several processes.
 *
 * Processes that set TESSERA_SIM_SHARED to the same name share the memory of each simulated
 * device, as processes share a GPU: what one holds, another cannot allocate, and
 * cuMemGetInfo's free bytes count every process's allocations. Each process keeps its own
 * address space, allocations and counters (bytes_in_use and the rest are its own); only the
 * pages are pooled. The pool is a small shared file, /dev/shm/tessera-sim.<name>: a robust
 * process-shared mutex, the device sizes (set by the first process; a later one that asks
 * for other sizes gets the pool's, with a line under TESSERA_SIM_VERBOSE) and one slot per
 * process holding its pid, its start time and the pages it holds on each device. A process
 * that exits or dies gives its pages back: its slot is cleared at exit, and a slot whose
 * process is gone (its pid dead or reused) is cleared by the next process that counts. The
 * file is readable and writable by every user (mode 0666): a test device that processes of
 * several users share on purpose, never a production path.
 * Without TESSERA_SIM_SHARED nothing here is used and each process has devices of its own. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARED_MAGIC 0x7473696d73686172ull /* "tsimshar" */
enum { SHARED_SLOTS = 64 };

struct shared_slot {
    int32_t pid;                          /* 0: free */
    uint64_t start;                       /* /proc/PID/stat start time, against pid reuse */
    uint64_t pages[SIM_MAX_DEVICES];
};

struct shared_pool {
    uint64_t magic;
    pthread_mutex_t mu; /* robust, process-shared */
    int32_t ndev;
    uint64_t total_pages[SIM_MAX_DEVICES];
    struct shared_slot slot[SHARED_SLOTS];
};

static struct shared_pool *pool;
static int my_slot = -1;
static pid_t my_pid;

static uint64_t start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
    if (!p)
        return 0;
    unsigned long long t = 0;
    /* after ") ": state, then fields 4..21; the start time is field 22 */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu", &t) != 1)
        return 0;
    return t;
}

static bool slot_alive(const struct shared_slot *s)
{
    return s->pid > 0 && start_time(s->pid) == s->start;
}

static void pool_lock(void)
{
    int rc = pthread_mutex_lock(&pool->mu);
    if (rc == EOWNERDEAD) /* a process died holding it: the slots are consistent after every
                           * single write, so the state is usable as it is */
        pthread_mutex_consistent(&pool->mu);
}

static void release_at_exit(void)
{
    if (!pool || my_slot < 0 || getpid() != my_pid)
        return;
    pool_lock();
    memset(&pool->slot[my_slot], 0, sizeof pool->slot[my_slot]);
    pthread_mutex_unlock(&pool->mu);
}

int sim_shared_attach(const char *name)
{
    if (strlen(name) > 64 || strchr(name, '/')) {
        sim_log("TESSERA_SIM_SHARED=%s: a name of at most 64 characters, without '/'", name);
        return -1;
    }
    char path[96];
    snprintf(path, sizeof path, "/tessera-sim.%s", name);
    mode_t old = umask(0);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    umask(old);
    if (fd < 0) {
        sim_log("TESSERA_SIM_SHARED: shm_open %s: %s", path, strerror(errno));
        return -1;
    }
    /* whoever comes first sizes and initialises it, under an exclusive file lock */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(fd, F_SETLKW, &fl) != 0 && errno == EINTR)
        ;
    struct stat st;
    bool fresh = fstat(fd, &st) == 0 && st.st_size == 0;
    if (fresh && ftruncate(fd, (off_t)sizeof *pool) != 0) {
        sim_log("TESSERA_SIM_SHARED: ftruncate: %s", strerror(errno));
        close(fd);
        return -1;
    }
    pool = mmap(NULL, sizeof *pool, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (pool == MAP_FAILED) {
        pool = NULL;
        close(fd);
        return -1;
    }
    if (fresh || pool->magic != SHARED_MAGIC) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&pool->mu, &a);
        pthread_mutexattr_destroy(&a);
        pool->ndev = sim_g.ndev;
        for (int i = 0; i < sim_g.ndev; i++)
            pool->total_pages[i] = sim_g.dev[i].total_pages;
        __atomic_store_n(&pool->magic, SHARED_MAGIC, __ATOMIC_RELEASE);
    }
    fl.l_type = F_UNLCK;
    fcntl(fd, F_SETLK, &fl);
    close(fd);

    my_pid = getpid();
    uint64_t start = start_time(my_pid);
    pool_lock();
    for (int i = 0; i < sim_g.ndev && i < pool->ndev; i++) {
        if (pool->total_pages[i] != sim_g.dev[i].total_pages)
            sim_log("TESSERA_SIM_SHARED=%s: device %d has %" PRIu64 " MiB (its first process "
                    "set it), not %zu", name, i, pool->total_pages[i] * 2, sim_g.mem_bytes >> 20);
        sim_g.dev[i].total_pages = (size_t)pool->total_pages[i];
        sim_g.dev[i].ctr.total_bytes = pool->total_pages[i] * SIM_PAGE;
    }
    for (int i = 0; i < SHARED_SLOTS && my_slot < 0; i++)
        if (!slot_alive(&pool->slot[i])) {
            memset(&pool->slot[i], 0, sizeof pool->slot[i]);
            pool->slot[i].start = start;
            pool->slot[i].pid = (int32_t)my_pid;
            my_slot = i;
        }
    pthread_mutex_unlock(&pool->mu);
    if (my_slot < 0) {
        sim_log("TESSERA_SIM_SHARED=%s: %d processes share it already", name, SHARED_SLOTS);
        return -1;
    }
    atexit(release_at_exit);
    sim_log("shared device memory %s: slot %d", path, my_slot);
    return 0;
}

void sim_shared_forget(void)
{
    pool = NULL; /* a forked child holds nothing of its parent's */
    my_slot = -1;
}

/* Pages every live process holds on device dev, dead processes' slots cleared. Pool locked. */
static uint64_t used_pages(int dev)
{
    uint64_t used = 0;
    for (int i = 0; i < SHARED_SLOTS; i++) {
        struct shared_slot *s = &pool->slot[i];
        if (!s->pid)
            continue;
        if (i != my_slot && !slot_alive(s)) {
            memset(s, 0, sizeof *s);
            continue;
        }
        used += s->pages[dev];
    }
    return used;
}

bool sim_device_reserve(struct sim_device *d, size_t pages)
{
    if (!pool)
        return pages <= d->total_pages - d->used_pages;
    pool_lock();
    bool ok = pages <= pool->total_pages[d->ordinal] - used_pages(d->ordinal);
    if (ok)
        pool->slot[my_slot].pages[d->ordinal] += pages;
    pthread_mutex_unlock(&pool->mu);
    return ok;
}

void sim_device_unreserve(struct sim_device *d, size_t pages)
{
    if (!pool)
        return;
    pool_lock();
    pool->slot[my_slot].pages[d->ordinal] -= pages;
    pthread_mutex_unlock(&pool->mu);
}

size_t sim_device_free_pages(struct sim_device *d)
{
    if (!pool)
        return d->total_pages - d->used_pages;
    pool_lock();
    uint64_t free_pages = pool->total_pages[d->ordinal] - used_pages(d->ordinal);
    pthread_mutex_unlock(&pool->mu);
    return (size_t)free_pages;
}
