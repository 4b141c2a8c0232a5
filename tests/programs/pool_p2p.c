/* pool_p2p: stream-ordered memory of one device used from another, in the style of NVIDIA's
 * streamOrderedAllocationP2P sample.
 *
 *   pool_p2p [--size SIZE] [--grant-first]
 *
 * On device 0 the program allocates from the default pool (cudaMallocAsync) and fills the
 * buffer; on device 1 it allocates a destination, then grants device 1 access to device 0's
 * default pool (cudaMemPoolSetAccess), which covers the allocations made before the call and
 * every later one. Device 1's stream waits on an event of device 0's, copies the buffer across
 * (cudaMemcpyPeerAsync) and back to the host, and frees both buffers (the source on device 1's
 * stream). Calls that grant nothing come first: access taken from device 1 (which it never
 * had), a call the driver refuses (device 0 losing access to its own pool, with device 1
 * gaining it), read-write for device 0 itself, and a pool of the program's own made reachable
 * from device 1. With --grant-first, device 1 is given access to the default pool before anything else
 * (before device 0 allocates at all), so `before` is 1. Access is checked with tessera_sim_can_access on the simulated device, with a kernel
 * (touch.h) on a GPU, where an access before the grant is not tried (it would fault).
 * Needs two devices: with fewer it prints RESULT status=skip and exits 0.
 * RESULT fields: refused (the refused call's answer), own_pool (device 1 reaches the program's
 * own pool), before (device 1 may reach
 * the buffer before the grant: 0, 1, or skip on a GPU), access (cudaMemPoolGetAccess for device
 * 1 after the grant), after, mid (a block allocated between the calls that grant nothing and the
 * grant), later (an allocation made after the grant), same (the bytes arrived), check (sim or
 * kernel). Exit 0 when device 1 reaches every buffer and the bytes arrived, 3 otherwise.
 */
#include <getopt.h>

#include "common.h"
#include "touch.h"

static const char *usage_text = "[--size SIZE] [--grant-first]";

int main(int argc, char **argv) {
  size_t size = 4 * MiB;
  int c, ndev = 0, grant_first = 0;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"grant-first", no_argument, NULL, 'g'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': size = opt_size("size", optarg); break;
    case 'g': grant_first = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size < sizeof(uint32_t)) bad_usage(argv[0], usage_text);
  CHECK(cudaGetDeviceCount(&ndev));
  int can = 0;
  if (ndev >= 2) CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
  if (ndev < 2 || !can) {
    printf("RESULT status=skip devices=%d\n", ndev);
    return EXIT_WORKLOAD_OK;
  }
  unsigned char *in = (unsigned char *)xmalloc(size), *out = (unsigned char *)xmalloc(size);
  pattern_gen(in, size, 0x9e7, 0);
  memset(out, 0, size);

  struct cudaMemAccessDesc desc;
  memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 1;
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  if (grant_first) {
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  }
  CHECK(cudaSetDevice(0));
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!drv) die_msg("dlopen libcuda.so.1", "the runtime did not load the driver");
  can_access_fn sim_can = (can_access_fn)dlsym(drv, "tessera_sim_can_access");
  cudaEvent_t filled;
  cudaStream_t s0, s1;
  CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  cudaError_t refused = cudaSuccess;
  if (!grant_first) {
    desc.flags = cudaMemAccessFlagsProtNone; /* nothing to take away */
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
    /* refused whole: device 0 cannot lose access to its own pool */
    struct cudaMemAccessDesc two[2];
    two[0] = desc;
    two[0].flags = cudaMemAccessFlagsProtReadWrite;
    two[1] = two[0];
    two[1].location.id = 0;
    two[1].flags = cudaMemAccessFlagsProtNone;
    refused = cudaMemPoolSetAccess(pool, two, 2);
    (void)cudaGetLastError();
  }
  /* a pool of the program's own, reachable from device 1 */
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own;
  CHECK(cudaMemPoolCreate(&own, &props));
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(cudaMemPoolSetAccess(own, &desc, 1));
  void *src = NULL, *dst = NULL, *later = NULL, *mid = NULL, *mine = NULL;
  CHECK(cudaMallocFromPoolAsync(&mine, size, own, s0));
  CHECK(cudaMallocAsync(&src, size, s0));
  CHECK(cudaMemcpyAsync(src, in, size, cudaMemcpyHostToDevice, s0));
  CHECK(cudaEventRecord(filled, s0));
  CHECK(cudaStreamSynchronize(s0));
  int before = sim_can ? sim_can(1, (uint64_t)(uintptr_t)src, size) : -1;
  int own_pool = sim_can ? sim_can(1, (uint64_t)(uintptr_t)mine, size) == 1
                         : touch_from(drv, mine, 1, 0);
  CHECK(cudaSetDevice(0));
  desc.location.id = 0; /* device 0 itself: it always has read-write access */
  CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  CHECK(cudaMallocAsync(&mid, size, s0));

  CHECK(cudaSetDevice(1));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaMallocAsync(&dst, size, s1));
  desc.location.id = 1;
  CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CHECK(cudaMemPoolGetAccess(&flags, pool, &desc.location));

  CHECK(cudaSetDevice(0));
  CHECK(cudaMallocAsync(&later, size, s0));
  CHECK(cudaStreamSynchronize(s0));
  int after, later_ok, mid_ok;
  if (sim_can) {
    after = sim_can(1, (uint64_t)(uintptr_t)src, size) == 1;
    mid_ok = sim_can(1, (uint64_t)(uintptr_t)mid, size) == 1;
    later_ok = sim_can(1, (uint64_t)(uintptr_t)later, size) == 1;
  } else {
    uint32_t keep = 0;
    CHECK(cudaMemcpy(&keep, src, sizeof keep, cudaMemcpyDeviceToHost));
    after = touch_from(drv, src, 1, 0);
    CHECK(cudaMemcpy(src, &keep, sizeof keep, cudaMemcpyHostToDevice)); /* the pattern again */
    mid_ok = touch_from(drv, mid, 1, 0);
    later_ok = touch_from(drv, later, 1, 0);
  }

  CHECK(cudaSetDevice(1));
  CHECK(cudaStreamWaitEvent(s1, filled, 0));
  CHECK(cudaMemcpyPeerAsync(dst, 1, src, 0, size, s1));
  CHECK(cudaMemcpyAsync(out, dst, size, cudaMemcpyDeviceToHost, s1));
  cudaError_t free_src = cudaFreeAsync(src, s1); /* device 0's memory, device 1's stream */
  CHECK(cudaFreeAsync(dst, s1));
  CHECK(cudaStreamSynchronize(s1));
  int same = memcmp(in, out, size) == 0;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFreeAsync(later, s0));
  CHECK(cudaFreeAsync(mid, s0));
  CHECK(cudaFreeAsync(mine, s0));
  CHECK(cudaStreamSynchronize(s0));
  CHECK(cudaMemPoolDestroy(own));
  CHECK(cudaStreamDestroy(s0));
  CHECK(cudaEventDestroy(filled));
  CHECK(cudaSetDevice(1));
  CHECK(cudaStreamDestroy(s1));
  free(in);
  free(out);
  int ok = own_pool && after && mid_ok && later_ok && same && free_src == cudaSuccess;
  char bs[8];
  if (before < 0) snprintf(bs, sizeof bs, "skip");
  else snprintf(bs, sizeof bs, "%d", before == 1);
  printf("RESULT status=%s devices=%d refused=%s own_pool=%d before=%s access=%s after=%d mid=%d "
         "later=%d same=%d free_src=%s check=%s\n",
         ok ? "ok" : "denied", ndev, cudaGetErrorName(refused), own_pool, bs,
         flags == cudaMemAccessFlagsProtReadWrite ? "readwrite" : "other", after, mid_ok, later_ok,
         same, cudaGetErrorName(free_src), sim_can ? "sim" : "kernel");
  return ok ? EXIT_WORKLOAD_OK : EXIT_CORRUPTION;
}
