/* Simulated CUDA driver: events shared between processes (CU_EVENT_INTERPROCESS,
 * cuIpcGetEventHandle, cuIpcOpenEventHandle).
 *
 * Streams run on host threads here, so an event crossing processes needs its completion in
 * memory both processes map: each interprocess event owns a small memfd holding two counters,
 * `recorded` (the generation of its last record, counted over every process that records it)
 * and `done` (the highest generation whose record ran). A record takes the next generation when
 * it is queued and publishes it when its stream reaches it; the event is complete when done
 * has caught up with recorded. Querying, synchronising and stream waits compare the two:
 * cuEventSynchronize and a stream waiting on the event (its worker thread) sleep on `done`
 * with a futex shared between the processes, woken by every record that runs.
 *
 * The handle names the exporting process and the memfd's descriptor there; another process
 * opens it through /proc (same user needed). The opened event behaves like an event created
 * with CU_EVENT_DISABLE_TIMING: it can be recorded, queried, synchronised and waited on in either
 * process. Opening a handle in its own process fails with CUDA_ERROR_INVALID_CONTEXT, as for
 * memory handles. Using an opened event after its exporter destroyed it keeps working on the
 * last state (the driver calls it undefined). */
#include "sim.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define XEVENT_BYTES 4096

/* The shared page. Generations are 32-bit (a futex word) and compared modulo 2^32. */
struct xevent_page {
    _Atomic uint32_t recorded;
    _Atomic uint32_t done;
};

/* One process's view of an interprocess event: the mapping, and the memfd in the exporter. */
struct sim_xevent {
    struct xevent_page *page;
    int fd; /* -1 in an importer */
};

static const char event_magic[8] = {'T', 'S', 'I', 'M', 'E', 'V', 'T', '1'};

struct event_wire {
    char magic[8];
    int32_t pid;
    int32_t fd;
};
_Static_assert(sizeof(struct event_wire) <= sizeof(CUipcEventHandle), "IPC event handle layout");

static bool reached(uint32_t done, uint32_t gen)
{
    return (int32_t)(done - gen) >= 0;
}

static struct sim_xevent *xevent_map(int fd, bool owner)
{
    struct sim_xevent *x = calloc(1, sizeof *x);
    void *m = x ? mmap(NULL, XEVENT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
    if (m == MAP_FAILED) {
        free(x);
        return NULL;
    }
    x->page = m;
    x->fd = owner ? fd : -1;
    return x;
}

CUresult sim_xevent_create(struct sim_event *e)
{
    int fd = memfd_create("tessera-sim-event", MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_xevent *x = ftruncate(fd, XEVENT_BYTES) == 0 ? xevent_map(fd, true) : NULL;
    if (!x) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->x = x;
    return CUDA_SUCCESS;
}

void sim_xevent_release(struct sim_event *e)
{
    struct sim_xevent *x = e->x;
    if (!x)
        return;
    munmap(x->page, XEVENT_BYTES);
    if (x->fd >= 0)
        close(x->fd);
    free(x);
    e->x = NULL;
}

uint32_t sim_xevent_record(struct sim_event *e)
{
    uint32_t gen = atomic_fetch_add(&e->x->page->recorded, 1) + 1;
    return gen ? gen : 1; /* 0 means "not interprocess" in an op: skip it when wrapping */
}

void sim_xevent_done(struct sim_event *e, uint32_t xgen)
{
    _Atomic uint32_t *done = &e->x->page->done;
    uint32_t cur = atomic_load(done);
    /* records of several processes may finish out of order: done only moves forward */
    while (!reached(cur, xgen) && !atomic_compare_exchange_weak(done, &cur, xgen)) {
    }
    syscall(SYS_futex, done, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

uint32_t sim_xevent_pending(const struct sim_event *e)
{
    uint32_t rec = atomic_load(&e->x->page->recorded);
    return reached(atomic_load(&e->x->page->done), rec) ? 0 : rec;
}

void sim_xevent_wait(const struct sim_event *e, uint32_t xgen)
{
    _Atomic uint32_t *done = &e->x->page->done;
    for (;;) {
        uint32_t cur = atomic_load(done);
        if (reached(cur, xgen))
            return;
        /* sleeps only while done still holds cur; a bounded sleep also covers a recorder that
         * died between its record and its wake */
        struct timespec ts = {0, 50 * 1000 * 1000};
        syscall(SYS_futex, done, FUTEX_WAIT, cur, &ts, NULL, 0);
    }
}

CUresult sim_ipc_event_get(CUipcEventHandle *h, CUevent ev)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_event *e = sim_event_lookup(ev);
    if (!e) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!e->x || e->x->fd < 0) {
        r = CUDA_ERROR_INVALID_VALUE; /* not created with CU_EVENT_INTERPROCESS, or imported */
    } else {
        struct event_wire w;
        memset(&w, 0, sizeof w);
        memcpy(w.magic, event_magic, sizeof w.magic);
        w.pid = (int32_t)getpid();
        w.fd = e->x->fd;
        memset(h, 0, sizeof *h);
        memcpy(h, &w, sizeof w);
    }
    sim_unlock();
    return r;
}

CUresult sim_ipc_event_open(CUevent *out, CUipcEventHandle h)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct event_wire w;
    memcpy(&w, &h, sizeof w);
    if (memcmp(w.magic, event_magic, sizeof w.magic) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* not in the exporting process */
    int fd;
    r = sim_open_foreign_fd(w.pid, w.fd, "tessera-sim-event", &fd);
    if (r != CUDA_SUCCESS)
        return r;
    struct sim_xevent *x = xevent_map(fd, false);
    close(fd); /* the mapping keeps the page */
    if (!x)
        return CUDA_ERROR_MAP_FAILED;
    sim_lock();
    struct sim_ctx *cur;
    struct sim_event *e = NULL;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS)
        r = sim_event_new_locked(cur, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, &e);
    if (r == CUDA_SUCCESS) {
        e->x = x;
        *out = (CUevent)e;
    }
    sim_unlock();
    if (r != CUDA_SUCCESS) {
        munmap(x->page, XEVENT_BYTES);
        free(x);
    }
    return r;
}
