/* Helpers for tests that call the simulated driver directly (linked with libcuda.so.1). */
#ifndef TESSERA_SIM_TEST_DRV_H
#define TESSERA_SIM_TEST_DRV_H

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tessera_sim.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* Retain device dev's primary context and make it current. */
static inline CUcontext drv_setup(int dev)
{
    CU(cuInit(0));
    CUdevice d;
    CU(cuDeviceGet(&d, dev));
    CUcontext c;
    CU(cuDevicePrimaryCtxRetain(&c, d));
    CU(cuCtxSetCurrent(c));
    return c;
}

/* cuMemCreate properties: pinned memory of device dev */
static inline CUmemAllocationProp drv_vmm_prop(int dev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

/* cuMemSetAccess with one descriptor: device dev gets `flags` on [va, va+size) */
static inline void drv_set_access(CUdeviceptr va, size_t size, int dev, CUmemAccess_flags flags)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = flags;
    CU(cuMemSetAccess(va, size, &a, 1));
}

static inline struct tessera_sim_counters counters(int dev)
{
    struct tessera_sim_counters c;
    CHECK(tessera_sim_counters(dev, &c) == 0);
    return c;
}

/* Fault-safe probes: the kernel reports EFAULT instead of the process taking SIGSEGV. */
static inline int probe_readable(const void *p)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    ssize_t n = write(fds[1], p, 1);
    int ok = n == 1;
    CHECK(ok || errno == EFAULT);
    close(fds[0]);
    close(fds[1]);
    return ok;
}

static inline int probe_writable(void *p)
{
    if (!probe_readable(p))
        return 0;
    unsigned char b = *(volatile unsigned char *)p;
    int fds[2];
    CHECK(pipe(fds) == 0);
    CHECK(write(fds[1], &b, 1) == 1);
    ssize_t n = read(fds[0], p, 1); /* writes b back to p: content unchanged */
    int ok = n == 1;
    CHECK(ok || errno == EFAULT);
    close(fds[0]);
    close(fds[1]);
    return ok;
}

#endif
