/* offload: a CPU-offload-like use of pinned host memory, of mixed sizes, as a transformer's
 * training step with offloaded weights and activations makes it.
 *
 *   offload [--layers N] [--steps N] [--hidden H]
 *
 * Weights: an embedding of 129.5 MiB (the size a power-of-two cache pins 256 MiB for) and per
 * layer two layer norms (small), qkv, proj, fc1 and fc2, each pinned once (cudaHostAlloc,
 * portable) and kept. Each step (sequence lengths cycle through 256, 512, 1024, 768, 384 tokens)
 * offloads four activations per layer in the forward pass (cudaHostAlloc, then a copy from the
 * device into their first 64 KiB on a stream) and brings them back in the backward pass, in
 * reverse order (the stream is synchronised, the bytes checked, a copy to the device queued,
 * and the buffer freed at once: the copy may still be running, which the driver's free allows).
 * Every weight's first and last bytes are checked at the end.
 * RESULT fields: peak_requested (the most pinned bytes the program held at once), driver_peak
 * (the most bytes the driver had pinned at once: the simulator's counter, "-" on a GPU),
 * ratio (driver_peak / peak_requested), pair_ns (mean ns of one allocation and its free in the
 * last cycle of sequence lengths), allocs (pinned allocations made). */
#include <dlfcn.h>
#include <getopt.h>
#include <time.h>

#include "../sim/tessera_sim.h"
#include "common.h"

static const char *usage_text = "[--layers N] [--steps N] [--hidden H]";

enum { SLICE = 64 * 1024, ACTS = 4, CYCLE = 5 };
static const size_t seqs[CYCLE] = {256, 512, 1024, 768, 384};

static size_t live, peak;
static uint64_t spent_ns, pairs, allocs;
static int timing;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned char *pin(size_t n) {
  void *p = NULL;
  uint64_t t0 = now_ns();
  CHECK(cudaHostAlloc(&p, n, cudaHostAllocPortable));
  if (timing) spent_ns += now_ns() - t0;
  allocs++;
  live += n;
  if (live > peak) peak = live;
  return (unsigned char *)p;
}

static void unpin(void *p, size_t n) {
  uint64_t t0 = now_ns();
  CHECK(cudaFreeHost(p));
  if (timing) {
    spent_ns += now_ns() - t0;
    pairs++;
  }
  live -= n;
}

static unsigned char tag_of(long step, int layer, int k) {
  return (unsigned char)(1 + (step * 131 + layer * 7 + k) % 251);
}

int main(int argc, char **argv) {
  prog_init();
  long layers = 12, steps = 20;
  size_t hidden = 1280;
  int c;
  static const struct option opts[] = {{"layers", required_argument, NULL, 'l'},
                                       {"steps", required_argument, NULL, 'n'},
                                       {"hidden", required_argument, NULL, 'd'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'l': layers = opt_long("layers", optarg, 1, 96); break;
    case 'n': steps = opt_long("steps", optarg, 1, 100000); break;
    case 'd': hidden = (size_t)opt_long("hidden", optarg, 64, 8192); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  const size_t h = hidden, bytes = 2; /* fp16 */
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned char *dev = NULL;
  CHECK(cudaMalloc((void **)&dev, 2 * SLICE));
  CHECK(cudaMemset(dev, 0x5c, SLICE));

  /* the weights, kept for the whole run */
  const size_t nw = 1 + 6 * (size_t)layers;
  unsigned char **w = (unsigned char **)xmalloc(nw * sizeof *w);
  size_t *wn = (size_t *)xmalloc(nw * sizeof *wn);
  wn[0] = (size_t)129 * MiB + 512 * KiB;
  for (long l = 0; l < layers; l++) {
    size_t *s = wn + 1 + 6 * l;
    s[0] = s[1] = 2 * h * bytes;       /* layer norms: weight and bias */
    s[2] = 3 * h * h * bytes;          /* qkv */
    s[3] = h * h * bytes;              /* proj */
    s[4] = s[5] = 4 * h * h * bytes;   /* fc1, fc2 */
  }
  for (size_t i = 0; i < nw; i++) {
    w[i] = pin(wn[i]);
    w[i][0] = w[i][wn[i] - 1] = (unsigned char)(i * 13 + 1);
  }

  /* the steps */
  unsigned char **act = (unsigned char **)xmalloc((size_t)layers * ACTS * sizeof *act);
  size_t *an = (size_t *)xmalloc((size_t)layers * ACTS * sizeof *an);
  int bad = 0;
  for (long step = 0; step < steps; step++) {
    timing = step >= steps - CYCLE; /* the last cycle of sequence lengths */
    const size_t s = seqs[step % CYCLE];
    for (long l = 0; l < layers; l++) {
      const size_t sizes[ACTS] = {s * h * bytes, 3 * s * h * bytes, s * h * bytes,
                                  4 * s * h * bytes};
      for (int k = 0; k < ACTS; k++) {
        size_t i = (size_t)l * ACTS + (size_t)k, n = sizes[k];
        act[i] = pin(n);
        an[i] = n;
        act[i][n - 1] = tag_of(step, (int)l, k);
        CHECK(cudaMemcpyAsync(act[i], dev, n < SLICE ? n - 1 : SLICE, cudaMemcpyDeviceToHost,
                              stream));
      }
    }
    CHECK(cudaStreamSynchronize(stream));
    for (long l = layers - 1; l >= 0; l--) {
      for (int k = ACTS - 1; k >= 0; k--) {
        size_t i = (size_t)l * ACTS + (size_t)k, n = an[i];
        bad += act[i][0] != 0x5c || act[i][n - 1] != tag_of(step, (int)l, k);
        CHECK(cudaMemcpyAsync(dev + SLICE, act[i], n < SLICE ? n : SLICE,
                              cudaMemcpyHostToDevice, stream));
        unpin(act[i], n);
      }
    }
    /* the step ends as a training step does, the host waiting for the device */
    CHECK(cudaDeviceSynchronize());
  }
  for (size_t i = 0; i < nw; i++) {
    bad += w[i][0] != (unsigned char)(i * 13 + 1) || w[i][wn[i] - 1] != (unsigned char)(i * 13 + 1);
    unpin(w[i], wn[i]);
  }
  CHECK(cudaFree(dev));
  CHECK(cudaStreamDestroy(stream));

  /* what the driver pinned at most, when the driver is the simulator */
  char driver_peak[32] = "-", ratio[32] = "-";
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  tessera_sim_counters_fn sim = lib ? (tessera_sim_counters_fn)dlsym(lib, "tessera_sim_counters") : NULL;
  struct tessera_sim_counters sc;
  if (sim && sim(0, &sc) == 0) {
    snprintf(driver_peak, sizeof driver_peak, "%" PRIu64, sc.peak_host_bytes);
    snprintf(ratio, sizeof ratio, "%.4f", (double)sc.peak_host_bytes / (double)peak);
  }
  free(w);
  free(wn);
  free(act);
  free(an);
  printf("RESULT status=%s peak_requested=%zu driver_peak=%s ratio=%s pair_ns=%.0f allocs=%" PRIu64
         " bad=%d\n",
         bad ? "corrupt" : "ok", peak, driver_peak, ratio,
         pairs ? (double)spent_ns / (double)pairs : 0.0, allocs, bad);
  return bad ? EXIT_CORRUPTION : EXIT_WORKLOAD_OK;
}
