/* repeat_step: one training-like step, identical every time, repeated.
 *
 * Parameters are allocated once (a tensor and a small bias per layer). Each step then runs a
 * forward pass (per layer: a workspace, the activation, a small temporary; the workspace and
 * the temporary freed at once), a backward pass (per layer, from the last: a workspace, the
 * weight's gradient and the bias's gradient, then the layer's activation and the workspace
 * freed) and frees every gradient at the end (the optimizer step). Sizes are drawn once from
 * --seed, in units of --unit, not multiples of a page, so every step asks for exactly the same
 * sequence. Every allocation is filled with a byte (cudaMemset); the parameters are checked
 * at the end.
 *
 * What it shows: an allocator that served step k has no reason to fail step k + 1, and one that
 * runs on a device should run on every larger one. On an out of memory it stops and says in
 * which step (exit 2).
 * RESULT: status steps step (the step that ran out, 0 when none) layers unit seed peak_bytes
 * (the most bytes the program held at once).
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] = "[--steps N=30] [--layers N=12] [--unit SIZE=1M] [--seed N=1]";

typedef struct layer {
  size_t param, bias, act, ws;
  void *p, *b, *a, *gp, *gb;
} layer;

/* A size in [lo, hi) units of `unit`, a multiple of 4 bytes, drawn from r. */
static size_t draw(rng_t *r, size_t unit, unsigned lo, unsigned hi) {
  const uint64_t span = (uint64_t)(hi - lo) * unit;
  return ((size_t)lo * unit + (size_t)rng_range(r, 0, span - 1)) / 4 * 4;
}

static size_t held, peak;
static size_t step_now;

/* cudaMalloc, or the end of the run when the device is out of memory. */
static void *take(size_t size, int fill) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation) {
    printf("RESULT status=oom step=%zu\n", step_now);
    exit(EXIT_FINAL_OOM);
  }
  CHECK(e);
  CHECK(cudaMemsetAsync(p, fill, size, 0));
  held += size;
  if (held > peak) peak = held;
  return p;
}

static void give(void *p, size_t size) {
  CHECK(cudaFree(p));
  held -= size;
}

int main(int argc, char **argv) {
  size_t steps = 30, layers = 12, unit = MiB, l, s;
  uint64_t seed = 1;
  static const struct option opts[] = {{"steps", required_argument, NULL, 's'},
                                       {"layers", required_argument, NULL, 'l'},
                                       {"unit", required_argument, NULL, 'u'},
                                       {"seed", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': steps = (size_t)opt_long("steps", optarg, 1, 1000000); break;
    case 'l': layers = (size_t)opt_long("layers", optarg, 1, 1024); break;
    case 'u': unit = opt_size("unit", optarg); break;
    case 'r': seed = (uint64_t)opt_long("seed", optarg, 0, 1000000); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit < 4096) bad_usage(argv[0], usage_text);

  layer *L = (layer *)xmalloc(layers * sizeof *L);
  rng_t r;
  rng_seed(&r, seed);
  for (l = 0; l < layers; l++) {
    L[l].param = draw(&r, unit, 2, 9);
    L[l].bias = draw(&r, unit / 16, 1, 3); /* a small-pool block */
    L[l].act = draw(&r, unit, 5, 17);
    L[l].ws = draw(&r, unit, 1, 12);
  }
  for (l = 0; l < layers; l++) {
    L[l].p = take(L[l].param, 0x50 + (int)l);
    L[l].b = take(L[l].bias, 0x70 + (int)l);
  }
  for (s = 1; s <= steps; s++) {
    step_now = s;
    for (l = 0; l < layers; l++) {
      void *ws = take(L[l].ws, 1);
      L[l].a = take(L[l].act, 2);
      void *tmp = take(L[l].bias, 3);
      give(ws, L[l].ws);
      give(tmp, L[l].bias);
    }
    for (l = layers; l-- > 0;) {
      void *ws = take(L[l].ws, 4);
      L[l].gp = take(L[l].param, 5);
      L[l].gb = take(L[l].bias, 6);
      give(L[l].a, L[l].act);
      give(ws, L[l].ws);
    }
    for (l = 0; l < layers; l++) {
      give(L[l].gp, L[l].param);
      give(L[l].gb, L[l].bias);
    }
  }
  CHECK(cudaDeviceSynchronize());
  for (l = 0; l < layers; l++) {
    unsigned char first = 0, last = 0, bfirst = 0;
    CHECK(cudaMemcpy(&first, L[l].p, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&last, (char *)L[l].p + L[l].param - 1, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&bfirst, L[l].b, 1, cudaMemcpyDeviceToHost));
    if (first != 0x50 + l || last != 0x50 + l || bfirst != 0x70 + l) die_corrupt("parameter");
    CHECK(cudaFree(L[l].p));
    CHECK(cudaFree(L[l].b));
  }
  printf("RESULT status=ok steps=%zu step=0 layers=%zu unit=%zu seed=%" PRIu64
         " peak_bytes=%zu\n", steps, layers, unit, seed, peak);
  free(L);
  return EXIT_WORKLOAD_OK;
}
