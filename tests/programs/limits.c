/* limits: device limits and an L2 access policy window, in the style of NVIDIA's
 * simpleAttributes sample (which then runs a kernel that benefits from the window).
 *
 *   limits [--size SIZE]
 *
 * The program reads the device's persisting L2 size (cudaGetDeviceProperties), gives it all to
 * persisting lines (cudaDeviceSetLimit), reads every limit back (cudaDeviceGetLimit), sets a
 * malloc heap and a stack size, asks for a limit the device does not have, sets an access policy
 * window over a device buffer on a stream (cudaStreamSetAttribute) and reads it back, resets the
 * persisting lines (cudaCtxResetPersistingL2Cache), and copies data through the buffer on that
 * stream from pinned host memory and back.
 * RESULT fields: persisting (the limit after setting it to the device's maximum, as a fraction:
 * "max" when equal), stack, heap, fifo, pending, granularity (the limits read back),
 * sync_depth (the answer for the device runtime's sync depth), window (the window read back
 * matches the one set), reset (cudaCtxResetPersistingL2Cache), same (the bytes came back).
 */
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--size SIZE]";

static size_t limit(enum cudaLimit l) {
  size_t v = 0;
  CHECK(cudaDeviceGetLimit(&v, l));
  return v;
}

int main(int argc, char **argv) {
  size_t size = 4 * MiB;
  int c, dev = 0;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': size = opt_size("size", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);
  CHECK(cudaGetDevice(&dev));
  struct cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  if (prop.persistingL2CacheMaxSize == 0) {
    printf("RESULT status=skip persisting=unsupported\n");
    return EXIT_WORKLOAD_OK;
  }
  CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)prop.persistingL2CacheMaxSize));
  size_t persisting = limit(cudaLimitPersistingL2CacheSize);
  CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32 * MiB));
  size_t v = 0;
  cudaError_t sync_depth = cudaDeviceGetLimit(&v, cudaLimitDevRuntimeSyncDepth);
  (void)cudaGetLastError();

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void *dbuf = NULL;
  unsigned char *in, *out;
  CHECK(cudaMalloc(&dbuf, size));
  CHECK(cudaMallocHost((void **)&in, size));
  CHECK(cudaMallocHost((void **)&out, size));
  pattern_gen(in, size, 0xa77, 0);
  memset(out, 0, size);
  size_t window = size < (size_t)prop.accessPolicyMaxWindowSize ? size
                                                                 : (size_t)prop.accessPolicyMaxWindowSize;
  cudaStreamAttrValue set, got;
  memset(&set, 0, sizeof set);
  memset(&got, 0, sizeof got);
  set.accessPolicyWindow.base_ptr = dbuf;
  set.accessPolicyWindow.num_bytes = window;
  set.accessPolicyWindow.hitRatio = 1.0f;
  set.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  set.accessPolicyWindow.missProp = cudaAccessPropertyNormal;
  CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &set));
  CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &got));
  int window_ok = got.accessPolicyWindow.base_ptr == dbuf &&
                  got.accessPolicyWindow.num_bytes == window &&
                  got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting;
  cudaError_t reset = cudaCtxResetPersistingL2Cache();
  CHECK(cudaMemcpyAsync(dbuf, in, size, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(out, dbuf, size, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int same = memcmp(in, out, size) == 0;
  CHECK(cudaFree(dbuf));
  CHECK(cudaFreeHost(in));
  CHECK(cudaFreeHost(out));
  CHECK(cudaStreamDestroy(s));
  printf("RESULT status=%s persisting=%s stack=%zu heap=%zu fifo=%zu pending=%zu "
         "granularity=%zu sync_depth=%s window=%d reset=%s same=%d\n",
         same ? "ok" : "corrupt",
         persisting == (size_t)prop.persistingL2CacheMaxSize ? "max" : "other",
         limit(cudaLimitStackSize), limit(cudaLimitMallocHeapSize),
         limit(cudaLimitPrintfFifoSize), limit(cudaLimitDevRuntimePendingLaunchCount),
         limit(cudaLimitMaxL2FetchGranularity), cudaGetErrorName(sync_depth), window_ok,
         cudaGetErrorName(reset), same);
  return same ? EXIT_WORKLOAD_OK : EXIT_CORRUPTION;
}
