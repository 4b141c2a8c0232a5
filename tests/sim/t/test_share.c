/* Sharing between processes and devices. Interprocess events order one process's stream after
 * another's recorded work, both ways (the processes hold their streams on pipes, so the order
 * is proven, never timed); memory pools exported as descriptors, pointers imported into the
 * pool they came from, read, written and freed by the importer; pool access per device (2
 * simulated devices). */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv.h"
#include "child.h"

#define N ((size_t)2 << 20)

static unsigned char host[N];

/* a host function that blocks its stream until a byte arrives on the descriptor */
static void CUDA_CB wait_byte(void *arg)
{
    char b;
    CHECK(read(*(int *)arg, &b, 1) == 1);
}

static void put_byte(int fd)
{
    CHECK(write(fd, "x", 1) == 1);
}

static int all_equal(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* Run this binary with args while the caller goes on (descriptors without FD_CLOEXEC are
 * inherited); wait_child returns its exit status. */
static pid_t spawn_child(char *const *args)
{
    pid_t pid;
    CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) == 0);
    return pid;
}

static int wait_child(pid_t pid)
{
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- interprocess events ---------------------------------------------------------------- */

static int event_child(char **argv)
{
    CUipcMemHandle mh;
    CUipcEventHandle eh;
    hex_decode(argv[2], &mh, sizeof mh);
    hex_decode(argv[3], &eh, sizeof eh);
    int queued = atoi(argv[4]), recorded = atoi(argv[5]), go = atoi(argv[6]);
    drv_setup(0);
    CUdeviceptr p;
    CUevent ev;
    CU(cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CU(cuIpcOpenEventHandle(&ev, eh));
    /* the exporter's record is queued behind its blocked stream */
    EXPECT(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
    float ms;
    EXPECT(cuEventElapsedTime(&ms, ev, ev), CUDA_ERROR_INVALID_HANDLE); /* no timing */
    CUstream t;
    CU(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CU(cuStreamWaitEvent(t, ev, 0));
    CU(cuMemcpyDtoHAsync(host, p, N, t));
    put_byte(queued); /* the exporter's stream may run now */
    CU(cuStreamSynchronize(t));
    CHECK(all_equal(host, N, 0x5a)); /* the copy ran after the exporter's memset */
    CU(cuEventQuery(ev));
    CU(cuEventSynchronize(ev));
    /* now this process records and the exporter waits */
    CUstream u;
    CU(cuStreamCreate(&u, CU_STREAM_NON_BLOCKING));
    CU(cuLaunchHostFunc(u, wait_byte, &go));
    CU(cuMemsetD8Async(p, 0x6b, N, u));
    CU(cuEventRecord(ev, u));
    put_byte(recorded);
    CU(cuEventSynchronize(ev)); /* returns once this process's record ran */
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[N - 1], 0x6b);
    CU(cuStreamDestroy(t));
    CU(cuStreamDestroy(u));
    CU(cuEventDestroy(ev));
    CU(cuIpcCloseMemHandle(p));
    return 0;
}

static void test_events_order_work_across_processes(void)
{
    CUdeviceptr d;
    CU(cuMemAlloc(&d, N));
    CU(cuMemsetD8(d, 0, N));
    CUevent e, plain, bad;
    CU(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CU(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
    EXPECT(cuEventCreate(&bad, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    CUipcEventHandle eh, junk;
    EXPECT(cuIpcGetEventHandle(&eh, plain), CUDA_ERROR_INVALID_VALUE); /* not interprocess */
    EXPECT(cuIpcGetEventHandle(NULL, e), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcGetEventHandle(&eh, (CUevent)&junk), CUDA_ERROR_INVALID_HANDLE);
    CU(cuIpcGetEventHandle(&eh, e));
    CUevent x;
    EXPECT(cuIpcOpenEventHandle(&x, eh), CUDA_ERROR_INVALID_CONTEXT); /* its own process */
    memset(&junk, 0x3c, sizeof junk);
    EXPECT(cuIpcOpenEventHandle(&x, junk), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuIpcOpenEventHandle(NULL, eh), CUDA_ERROR_INVALID_VALUE);
    CUipcMemHandle mh;
    CU(cuIpcGetMemHandle(&mh, d));

    int queued[2], recorded[2], go[2];
    CHECK(pipe(queued) == 0 && pipe(recorded) == 0 && pipe(go) == 0);
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuLaunchHostFunc(s, wait_byte, &queued[0])); /* held until the child queued its wait */
    CU(cuMemsetD8Async(d, 0x5a, N, s));
    CU(cuEventRecord(e, s));
    char mtext[2 * sizeof mh + 1], etext[2 * sizeof eh + 1], q[16], r[16], g[16];
    hex_encode(&mh, sizeof mh, mtext);
    hex_encode(&eh, sizeof eh, etext);
    snprintf(q, sizeof q, "%d", queued[1]);
    snprintf(r, sizeof r, "%d", recorded[1]);
    snprintf(g, sizeof g, "%d", go[0]);
    char *args[] = {"test", "evchild", mtext, etext, q, r, g, NULL};
    pid_t pid = spawn_child(args);
    char b;
    CHECK(read(recorded[0], &b, 1) == 1); /* the child recorded, its stream held on `go` */
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CUstream s2;
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CU(cuStreamWaitEvent(s2, e, 0));
    CU(cuMemcpyDtoHAsync(host, d, N, s2));
    put_byte(go[1]);
    CU(cuStreamSynchronize(s2));
    CHECK(all_equal(host, N, 0x6b)); /* after the child's memset */
    CHECK_EQ(wait_child(pid), 0);
    CU(cuEventQuery(e));
    /* a capture may not wait on another process's work */
    CUstream c;
    CU(cuStreamCreate(&c, 0));
    CU(cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamWaitEvent(c, e, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    CUgraph graph = NULL;
    EXPECT(cuStreamEndCapture(c, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    for (int i = 0; i < 2; i++) {
        close(queued[i]);
        close(recorded[i]);
        close(go[i]);
    }
    CU(cuStreamDestroy(c));
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(s2));
    CU(cuEventDestroy(e));
    CU(cuEventDestroy(plain));
    CU(cuMemFree(d));
}

/* ---- pools shared between processes ------------------------------------------------------ */

static CUmemPoolProps pool_props(int dev, unsigned long long types)
{
    CUmemPoolProps p;
    memset(&p, 0, sizeof p);
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.handleTypes = (CUmemAllocationHandleType)types;
    return p;
}

static CUmemAccess_flags access_of(CUmemoryPool pool, int dev)
{
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    CUmemAccess_flags f = (CUmemAccess_flags)99;
    CU(cuMemPoolGetAccess(&f, pool, &loc));
    return f;
}

static uint64_t pool_used(CUmemoryPool pool)
{
    cuuint64_t v = 0;
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
    return v;
}

static int pool_child(char **argv)
{
    int fd = atoi(argv[2]);
    CUmemPoolPtrExportData data, other;
    hex_decode(argv[3], &data, sizeof data);
    hex_decode(argv[4], &other, sizeof other);
    drv_setup(0);
    CUmemoryPool pool;
    const CUmemAllocationHandleType fdtype = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    EXPECT(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd, fdtype, 1),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)2, fdtype, 0),
           CUDA_ERROR_INVALID_VALUE); /* stderr is not a pool */
    CU(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd, fdtype, 0));
    close(fd);
    /* access from its own device only, whatever the exporter set */
    CHECK_EQ(access_of(pool, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(access_of(pool, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    /* no allocations of its own */
    CUdeviceptr q;
    EXPECT(cuDeviceSetMemPool(0, pool), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAllocFromPoolAsync(&q, 64, pool, NULL), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolImportPointer(&q, pool, &other), CUDA_ERROR_INVALID_VALUE); /* other pool */
    CU(cuMemPoolImportPointer(&q, pool, &data));
    unsigned char *b = (unsigned char *)(uintptr_t)q;
    CHECK_EQ(b[0], 0x21);
    CHECK_EQ(b[3 * (1 << 20) - 1], 0x21);
    size_t size = 0;
    CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, q + 5));
    CHECK_EQ(size, 3 << 20);
    CHECK_EQ(counters(0).bytes_in_use, 0);      /* the exporter's memory */
    CHECK_EQ(pool_used(pool), 3 << 20);         /* counted in the imported pool */
    CHECK_EQ(tessera_sim_can_access(1, q, 16), 0);
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(cuMemPoolSetAccess(pool, &acc, 1));
    CHECK_EQ(tessera_sim_can_access(1, q, 16), 1);
    CU(cuMemsetD8(q + 7, 0x44, 1)); /* the exporter reads it */
    CU(cuMemFreeAsync(q, NULL));    /* freed here: unmapped, the exporter's memory stays */
    CU(cuCtxSynchronize());
    CHECK(!probe_readable(b));
    CHECK_EQ(counters(0).imported_frees, 1);
    CHECK_EQ(pool_used(pool), 0);
    CU(cuMemPoolImportPointer(&q, pool, &data)); /* again: a mapping of its own */
    CU(cuMemFree(q));
    CHECK_EQ(counters(0).imported_frees, 2);
    CU(cuMemPoolDestroy(pool));
    EXPECT(cuMemPoolImportPointer(&q, pool, &data), CUDA_ERROR_INVALID_VALUE);
    return 0;
}

static void test_pools_exported_to_another_process(void)
{
    const CUmemAllocationHandleType fdtype = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemPoolProps props = pool_props(0, fdtype), plainp = pool_props(0, 0),
                   badp = pool_props(0, 0x8);
    CUmemoryPool pool, other, plain, def;
    EXPECT(cuMemPoolCreate(&pool, &badp), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemPoolCreate(&pool, &props));
    CU(cuMemPoolCreate(&other, &props));
    CU(cuMemPoolCreate(&plain, &plainp));
    CU(cuDeviceGetDefaultMemPool(&def, 0));
    int fd = -1;
    EXPECT(cuMemPoolExportToShareableHandle(&fd, def, fdtype, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, plain, fdtype, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, pool, fdtype, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_FABRIC, 0),
           CUDA_ERROR_INVALID_VALUE);
    CU(cuMemPoolExportToShareableHandle(&fd, pool, fdtype, 0));
    CHECK(fd >= 0);
    CHECK(fcntl(fd, F_SETFD, 0) == 0); /* the child inherits it (a program would send it) */
    CUdeviceptr a, b, plain_ptr, d;
    CU(cuMemAllocFromPoolAsync(&a, 3 << 20, pool, NULL));
    CU(cuMemAllocFromPoolAsync(&b, 4096, other, NULL));
    CU(cuMemAllocFromPoolAsync(&plain_ptr, 4096, plain, NULL));
    CU(cuMemAlloc(&d, 4096));
    CU(cuMemsetD8(a, 0x21, 3 << 20));
    CUmemPoolPtrExportData data, odata, junk;
    EXPECT(cuMemPoolExportPointer(&junk, plain_ptr), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolExportPointer(&junk, d), CUDA_ERROR_INVALID_VALUE); /* not a pool's */
    EXPECT(cuMemPoolExportPointer(&junk, a + 16), CUDA_ERROR_INVALID_VALUE); /* its base */
    EXPECT(cuMemPoolExportPointer(NULL, a), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemPoolExportPointer(&data, a));
    /* a pool not exported yet exports no pointer (a GPU refuses it); once exported, it does */
    EXPECT(cuMemPoolExportPointer(&odata, b), CUDA_ERROR_INVALID_VALUE);
    int ofd = -1;
    CU(cuMemPoolExportToShareableHandle(&ofd, other, fdtype, 0));
    close(ofd);
    CU(cuMemPoolExportPointer(&odata, b));
    CUmemoryPool same;
    CU(cuMemPoolImportFromShareableHandle(&same, (void *)(intptr_t)fd, fdtype, 0));
    CU(cuMemPoolDestroy(same));
    char fds[16], dtext[2 * sizeof data + 1], otext[2 * sizeof odata + 1];
    snprintf(fds, sizeof fds, "%d", fd);
    hex_encode(&data, sizeof data, dtext);
    hex_encode(&odata, sizeof odata, otext);
    char *args[] = {"test", "poolchild", fds, dtext, otext, NULL};
    CHECK_EQ(wait_child(spawn_child(args)), 0);
    close(fd);
    unsigned char *p = (unsigned char *)(uintptr_t)a;
    CHECK_EQ(p[7], 0x44); /* written by the importer */
    CHECK_EQ(p[8], 0x21);
    CU(cuMemFreeAsync(a, NULL));
    CU(cuMemFreeAsync(b, NULL));
    CU(cuMemFreeAsync(plain_ptr, NULL));
    CU(cuMemFree(d));
    CU(cuCtxSynchronize());
    CU(cuMemPoolDestroy(pool));
    CU(cuMemPoolDestroy(other));
    CU(cuMemPoolDestroy(plain));
}

/* ---- pool access per device ------------------------------------------------------------- */

static void test_pool_access_per_device(void)
{
    CUmemoryPool def;
    CU(cuDeviceGetDefaultMemPool(&def, 0));
    CUdeviceptr before, plain;
    CU(cuMemAllocAsync(&before, 4096, NULL));
    CU(cuMemAlloc(&plain, 4096));
    CHECK_EQ(access_of(def, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(access_of(def, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CHECK_EQ(tessera_sim_can_access(1, before, 4096), 0);
    /* peer access opens cuMemAlloc memory, not a pool's */
    CUcontext c1;
    CUdevice dev1;
    CU(cuDeviceGet(&dev1, 1));
    CU(cuDevicePrimaryCtxRetain(&c1, dev1));
    CU(cuCtxSetCurrent(c1));
    CUcontext c0;
    CUdevice dev0;
    CU(cuDeviceGet(&dev0, 0));
    CU(cuDevicePrimaryCtxRetain(&c0, dev0));
    CU(cuCtxEnablePeerAccess(c0, 0));
    CU(cuCtxSetCurrent(c0));
    CHECK_EQ(tessera_sim_can_access(1, plain, 4096), 1);
    CHECK_EQ(tessera_sim_can_access(1, before, 4096), 0);
    /* the pool's access covers the allocations made before the call, and later ones */
    CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU(cuMemPoolSetAccess(def, &rw, 1));
    CHECK_EQ(access_of(def, 1), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK_EQ(tessera_sim_can_access(1, before, 4096), 1);
    CUdeviceptr after;
    CU(cuMemAllocAsync(&after, 4096, NULL));
    CHECK_EQ(tessera_sim_can_access(1, after, 4096), 1);
    CUmemAccessDesc ro = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READ};
    CU(cuMemPoolSetAccess(def, &ro, 1));
    CHECK_EQ(access_of(def, 1), CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK_EQ(tessera_sim_can_access(1, before, 4096), 0); /* read and write asked */
    /* refused whole: the pool's own device cannot lose access; no such device; no such flag */
    CUmemAccessDesc two[2] = {rw, {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_NONE}};
    EXPECT(cuMemPoolSetAccess(def, two, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(access_of(def, 1), CU_MEM_ACCESS_FLAGS_PROT_READ);
    CHECK_EQ(access_of(def, 0), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAccessDesc bad = {{CU_MEM_LOCATION_TYPE_DEVICE, 5}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT(cuMemPoolSetAccess(def, &bad, 1), CUDA_ERROR_INVALID_DEVICE);
    bad.location.id = 1;
    bad.flags = (CUmemAccess_flags)2;
    EXPECT(cuMemPoolSetAccess(def, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    bad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(cuMemPoolSetAccess(def, &bad, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAccess(def, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemPoolSetAccess((CUmemoryPool)&bad, &rw, 1), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemPoolSetAccess(def, NULL, 0));
    CUmemAccessDesc none = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_NONE};
    CU(cuMemPoolSetAccess(def, &none, 1));
    CHECK_EQ(access_of(def, 1), CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 9};
    CUmemAccess_flags f;
    EXPECT(cuMemPoolGetAccess(&f, def, &loc), CUDA_ERROR_INVALID_DEVICE);
    loc.id = 1;
    EXPECT(cuMemPoolGetAccess(NULL, def, &loc), CUDA_ERROR_INVALID_VALUE);
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(cuMemPoolGetAccess(&f, def, &loc), CUDA_ERROR_INVALID_VALUE);
    /* another pool has its own access */
    CUmemPoolProps props = pool_props(0, 0);
    CUmemoryPool own;
    CU(cuMemPoolCreate(&own, &props));
    CU(cuMemPoolSetAccess(own, &rw, 1));
    CUdeviceptr mine;
    CU(cuMemAllocFromPoolAsync(&mine, 4096, own, NULL));
    CHECK_EQ(tessera_sim_can_access(1, mine, 4096), 1);
    CHECK_EQ(tessera_sim_can_access(1, after, 4096), 0);
    CU(cuMemFreeAsync(mine, NULL));
    CU(cuMemFreeAsync(before, NULL));
    CU(cuMemFreeAsync(after, NULL));
    CU(cuMemFree(plain));
    CU(cuCtxSynchronize());
    CU(cuMemPoolDestroy(own));
    CU(cuCtxSetCurrent(c1));
    CU(cuCtxDisablePeerAccess(c0));
    CU(cuCtxSetCurrent(c0));
    CU(cuDevicePrimaryCtxRelease(dev1));
    CU(cuDevicePrimaryCtxRelease(dev0));
}

int main(int argc, char **argv)
{
    alarm(60);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 7 && strcmp(argv[1], "evchild") == 0)
        return event_child(argv);
    if (argc == 5 && strcmp(argv[1], "poolchild") == 0)
        return pool_child(argv);
    drv_setup(0);
    RUN(test_events_order_work_across_processes);
    RUN(test_pools_exported_to_another_process);
    RUN(test_pool_access_per_device);
    return 0;
}
