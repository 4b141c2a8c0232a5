/* peer_access: an ordinary two-GPU program that lets device 0's kernels read and write device
 * 1's memory. It allocates on device 1, enables peer access from device 0 with
 * cudaDeviceEnablePeerAccess, allocates more on device 1, and then checks that a kernel on
 * device 0 may touch every allocation, those made before peer access was enabled and after.
 *
 *   peer_access [--count N] [--size SIZE]
 *
 * The check: on the simulated device, tessera_sim_can_access (tests/sim/tessera_sim.h); on a
 * GPU, a kernel on device 0 (PTX, loaded through the driver) that increments a word of each
 * allocation, whose result device 1 must then see.
 * Needs two devices or more: with fewer it prints RESULT status=skip and exits 0.
 * RESULT fields: devices, before, after (allocations made before and after peer access was
 * enabled), denied (allocations device 0 may not touch). Exit 0 when denied is 0, else 3.
 */
#include <getopt.h>

#include "common.h"
#include "touch.h"

#define MAX_COUNT 256

static const char *usage_text = "[--count N] [--size SIZE]";

int main(int argc, char **argv) {
  size_t count = 4, size = 4 * MiB, i, denied = 0;
  int ndev = 0, c;
  void *ptrs[2 * MAX_COUNT];
  static const struct option opts[] = {{"count", required_argument, NULL, 'n'},
                                       {"size", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'n': count = (size_t)opt_long("count", optarg, 1, MAX_COUNT); break;
    case 's': size = opt_size("size", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size < sizeof(uint32_t)) bad_usage(argv[0], usage_text);

  CHECK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    printf("RESULT status=skip devices=%d\n", ndev);
    return EXIT_WORKLOAD_OK;
  }
  int can = 0;
  CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
  if (!can) {
    printf("RESULT status=skip devices=%d peer=unsupported\n", ndev);
    return EXIT_WORKLOAD_OK;
  }

  CHECK(cudaSetDevice(1));
  for (i = 0; i < count; i++) CHECK(cudaMalloc(&ptrs[i], size));
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceEnablePeerAccess(1, 0));
  CHECK(cudaSetDevice(1));
  for (i = count; i < 2 * count; i++) CHECK(cudaMalloc(&ptrs[i], size));

  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!drv) die_msg("dlopen libcuda.so.1", "the runtime did not load the driver");
  can_access_fn sim_can = drv ? (can_access_fn)dlsym(drv, "tessera_sim_can_access") : NULL;
  for (i = 0; i < 2 * count; i++) {
    int ok = sim_can ? sim_can(0, (uint64_t)(uintptr_t)ptrs[i], size) == 1
                     : touch_from(drv, ptrs[i], 0, 1);
    if (!ok) {
      printf("DENIED: device 0 may not touch allocation %zu (%p, made %s peer access)\n", i,
             ptrs[i], i < count ? "before" : "after");
      denied++;
    }
  }
  CHECK(cudaSetDevice(1));
  for (i = 0; i < 2 * count; i++) CHECK(cudaFree(ptrs[i]));
  printf("RESULT status=%s devices=%d before=%zu after=%zu denied=%zu check=%s\n",
         denied ? "denied" : "ok", ndev, count, count, denied, sim_can ? "sim" : "kernel");
  return denied ? EXIT_CORRUPTION : EXIT_WORKLOAD_OK;
}
