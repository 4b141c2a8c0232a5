/* staging: an ordinary program that allocates a pinned staging buffer per step, as data loaders
 * and hand-written copy loops do, and a stream-ordered scratch buffer per step.
 *
 *   staging [--size BYTES] [--steps N] [--mode host|mallochost|driver|async|all]
 *
 * Each step allocates a host buffer (cudaHostAlloc, cudaMallocHost or cuMemHostAlloc), fills
 * it with the step's pattern, queues a cudaMemcpyAsync of it into one of 8 device slots on a
 * non-blocking stream, and frees it at once (cudaFreeHost / cuMemFreeHost): the copy may still
 * be running then, which is legal because the driver's free waits for it. Every 8 steps the
 * stream is synchronised and each slot's first, middle and last bytes are checked, so a host
 * buffer handed out again while a queued copy still read it shows up as a wrong pattern.
 * Mode `async` does the same with cudaMallocAsync/cudaFreeAsync device scratch (memset, copy
 * into the slot, free, all on the stream). Each mode also times the allocation and the free
 * calls alone. RESULT fields: <mode>_pair_ns (mean ns of one allocate + free pair),
 * <mode>_bad (slots with a wrong pattern), steps, size. */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>
#include <time.h>

#include "common.h"

static const char *usage_text = "[--size BYTES] [--steps N] [--mode host|mallochost|driver|async|all]";

enum { SLOTS = 8 };

typedef CUresult (*host_alloc_fn)(void **, size_t, unsigned int);
typedef CUresult (*host_free_fn)(void *);

static host_alloc_fn drv_host_alloc;
static host_free_fn drv_host_free;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned char step_pattern(long step) {
  return (unsigned char)(0x11 + (step * 37) % 200);
}

/* Checks the slots written by steps [first, first + SLOTS) and returns how many are wrong. */
static int slots_check(const unsigned char *dev, size_t size, long first) {
  int bad = 0;
  unsigned char b[3];
  for (long s = first; s < first + SLOTS; s++) {
    const unsigned char *slot = dev + (size_t)(s % SLOTS) * size;
    CHECK(cudaMemcpy(&b[0], slot, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&b[1], slot + size / 2, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&b[2], slot + size - 1, 1, cudaMemcpyDeviceToHost));
    unsigned char want = step_pattern(s);
    bad += b[0] != want || b[1] != want || b[2] != want;
  }
  return bad;
}

/* One mode's loop; returns the mean ns of an allocation and its free together. */
static double mode_run(const char *mode, size_t size, long steps, unsigned char *dev,
                       cudaStream_t stream, int *bad_out) {
  uint64_t spent = 0;
  int bad = 0;
  for (long step = 0; step < steps; step++) {
    unsigned char *slot = dev + (size_t)(step % SLOTS) * size;
    void *buf = NULL;
    uint64_t t0 = now_ns();
    if (!strcmp(mode, "host")) {
      CHECK(cudaHostAlloc(&buf, size, cudaHostAllocDefault));
    } else if (!strcmp(mode, "mallochost")) {
      CHECK(cudaMallocHost(&buf, size));
    } else if (!strcmp(mode, "driver")) {
      CUresult r = drv_host_alloc(&buf, size, 0);
      if (r != CUDA_SUCCESS) die_msg("cuMemHostAlloc", "failed");
    } else {
      CHECK(cudaMallocAsync(&buf, size, stream));
    }
    spent += now_ns() - t0;
    if (!strcmp(mode, "async")) {
      CHECK(cudaMemsetAsync(buf, step_pattern(step), size, stream));
      CHECK(cudaMemcpyAsync(slot, buf, size, cudaMemcpyDeviceToDevice, stream));
    } else {
      memset(buf, step_pattern(step), size);
      CHECK(cudaMemcpyAsync(slot, buf, size, cudaMemcpyHostToDevice, stream));
    }
    t0 = now_ns();
    if (!strcmp(mode, "async")) {
      CHECK(cudaFreeAsync(buf, stream));
    } else if (!strcmp(mode, "driver")) {
      if (drv_host_free(buf) != CUDA_SUCCESS) die_msg("cuMemFreeHost", "failed");
    } else {
      CHECK(cudaFreeHost(buf));
    }
    spent += now_ns() - t0;
    if (step % SLOTS == SLOTS - 1) {
      CHECK(cudaStreamSynchronize(stream));
      bad += slots_check(dev, size, step - (SLOTS - 1));
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  *bad_out = bad;
  return steps ? (double)spent / (double)steps : 0.0;
}

int main(int argc, char **argv) {
  prog_init();
  size_t size = 4 * MiB;
  long steps = 200;
  const char *which = "all";
  int c;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"steps", required_argument, NULL, 'n'},
                                       {"mode", required_argument, NULL, 'm'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's': size = opt_size("size", optarg); break;
    case 'n': steps = opt_long("steps", optarg, SLOTS, 1000000); break;
    case 'm': which = optarg; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  static const char *const modes[] = {"host", "mallochost", "driver", "async"};
  int known = !strcmp(which, "all");
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) known |= !strcmp(which, modes[i]);
  if (optind != argc || size < 4 || !known) bad_usage(argv[0], usage_text);
  steps -= steps % SLOTS;

  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!drv) die_msg("dlopen libcuda.so.1", dlerror());
  drv_host_alloc = (host_alloc_fn)dlsym(drv, "cuMemHostAlloc");
  drv_host_free = (host_free_fn)dlsym(drv, "cuMemFreeHost");
  if (!drv_host_alloc || !drv_host_free) die_msg("dlsym", "cuMemHostAlloc/cuMemFreeHost");

  unsigned char *dev = NULL;
  cudaStream_t stream;
  CHECK(cudaMalloc((void **)&dev, size * SLOTS));
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  char line[512];
  int len = snprintf(line, sizeof line, "RESULT status=ok steps=%ld size=%zu", steps, size);
  int bad_total = 0;
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (strcmp(which, "all") && strcmp(which, modes[i])) continue;
    int bad = 0;
    /* one untimed warm-up round, then the measured loop */
    mode_run(modes[i], size, SLOTS, dev, stream, &bad);
    double ns = mode_run(modes[i], size, steps, dev, stream, &bad);
    printf("%-10s %8.0f ns per allocate+free pair, %d bad slots\n", modes[i], ns, bad);
    len += snprintf(line + len, sizeof line - (size_t)len, " %s_pair_ns=%.0f %s_bad=%d",
                    modes[i], ns, modes[i], bad);
    bad_total += bad;
  }
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
  if (bad_total) {
    printf("RESULT status=corrupt%s\n", strstr(line, " steps="));
    return EXIT_CORRUPTION;
  }
  printf("%s\n", line);
  return EXIT_WORKLOAD_OK;
}
