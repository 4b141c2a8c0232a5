/* Helpers for tests of the runtime API. These programs link the REAL toolkit
 * (-L<cuda>/lib64 -lcudart) and get the simulated libcudart.so.13 and libcuda.so.1 at run
 * time through LD_LIBRARY_PATH (sim_env). */
#ifndef TESSERA_SIM_TEST_RT_H
#define TESSERA_SIM_TEST_RT_H

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "tessera_sim.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

#define RT(call) EXPECT(call, cudaSuccess)

/* The driver the runtime loaded (after the runtime initialised). */
static inline void *sim_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != NULL);
    return h;
}

static inline struct tessera_sim_counters rt_counters(int dev)
{
    tessera_sim_counters_fn fn = (tessera_sim_counters_fn)dlsym(sim_driver(), "tessera_sim_counters");
    CHECK(fn != NULL); /* this is the simulator, not a real driver */
    struct tessera_sim_counters c;
    CHECK(fn(dev, &c) == 0);
    return c;
}

#endif
