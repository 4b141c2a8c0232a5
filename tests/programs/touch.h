/* A kernel that touches one word of device memory, for the sample programs that check which
 * device may reach which memory (peer_access, pool_p2p) or load a module (vmm_ipc_drv). It is
 * PTX, loaded through the driver (cuModuleLoadData), so the programs stay plain C. On the
 * simulated device kernels compute nothing; the programs ask tessera_sim_can_access there
 * instead (tests/sim/tessera_sim.h). Valid C11 and C++. */
#ifndef TESSERA_TEST_PROGRAMS_TOUCH_H
#define TESSERA_TEST_PROGRAMS_TOUCH_H

#include <cuda.h>
#include <dlfcn.h>

#include "common.h"

/* touch(p): the 32-bit word at p is incremented */
static const char touch_ptx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry touch(.param .u64 p)\n"
    "{\n"
    "  .reg .b64 %rd<3>;\n"
    "  .reg .b32 %r<3>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  ld.global.u32 %r1, [%rd2];\n"
    "  add.s32 %r2, %r1, 1;\n"
    "  st.global.u32 [%rd2], %r2;\n"
    "  ret;\n"
    "}\n";

typedef int (*can_access_fn)(int device, uint64_t ptr, uint64_t size);
typedef CUresult (*touch_load_fn)(CUmodule *, const void *);
typedef CUresult (*touch_getfn_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*touch_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, CUstream, void **, void **);

/* On a GPU: run `touch` on device run_on against ptr, memory of device owner; 1 when owner then
 * reads the word + 1, 0 when the kernel could not reach it. Leaves device `owner` current. */
static inline int touch_from(void *drv, void *ptr, int run_on, int owner) {
  static CUfunction fn[16];
  touch_load_fn load = (touch_load_fn)dlsym(drv, "cuModuleLoadData");
  touch_getfn_fn getfn = (touch_getfn_fn)dlsym(drv, "cuModuleGetFunction");
  touch_launch_fn launch = (touch_launch_fn)dlsym(drv, "cuLaunchKernel");
  uint32_t word = 41, back = 0;
  if (!load || !getfn || !launch) die_msg("libcuda.so.1", "no cuModuleLoadData/cuLaunchKernel");
  if (run_on < 0 || run_on >= 16) die_msg("touch", "device out of range");
  CHECK(cudaSetDevice(owner));
  CHECK(cudaMemcpy(ptr, &word, sizeof word, cudaMemcpyHostToDevice));
  CHECK(cudaSetDevice(run_on));
  if (!fn[run_on]) {
    CUmodule mod;
    if (load(&mod, touch_ptx) != CUDA_SUCCESS || getfn(&fn[run_on], mod, "touch") != CUDA_SUCCESS)
      die_msg("cuModuleLoadData", "cannot load the touch kernel");
  }
  void *args[] = {&ptr};
  if (launch(fn[run_on], 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS) return 0;
  if (cudaDeviceSynchronize() != cudaSuccess) return 0; /* an illegal address: not reachable */
  CHECK(cudaSetDevice(owner));
  CHECK(cudaMemcpy(&back, ptr, sizeof back, cudaMemcpyDeviceToHost));
  return back == word + 1;
}

#endif
