/* train_loop: the allocation pattern of a training step on the legacy default stream, with a
 * host that runs ahead of the device.
 *
 * Each step allocates --layers activations (sizes cycling through a few values around --unit)
 * and fills each with an async memset (the forward pass); then, layer by layer from the last,
 * allocates a gradient of the same size, fills it, and frees the layer's activation and the
 * gradient (the backward pass). Every 8 steps a result is copied back, which waits for the
 * device, as a loss read-back does. Nothing else synchronises: with a slow device
 * (TESSERA_SIM_OP_DELAY_US on the simulator) the host issues frees long before the device gets to
 * the work that used the memory.
 * --verify: copy every activation and gradient back before it is freed and check that it still
 * holds the byte it was filled with (exit 3 when not): the copies wait for the device, the
 * allocation sequence stays the same.
 * RESULT: status steps layers unit wall_ms checksum (the last read-back's first byte).
 */
#include "common.h"

#include <getopt.h>
#include <time.h>

static const char usage_text[] = "[--steps N=32] [--layers N=12] [--unit SIZE=4M] [--verify]";

/* Does every byte of [p, p + size) hold v? Exits with the corruption status when not. */
static void verify_fill(const void *p, size_t size, int v, const char *what) {
  unsigned char *buf = staging();
  size_t off, i;
  for (off = 0; off < size; off += STAGING_BYTES) {
    size_t n = size - off < STAGING_BYTES ? size - off : STAGING_BYTES;
    CHECK(cudaMemcpy(buf, (const char *)p + off, n, cudaMemcpyDeviceToHost));
    for (i = 0; i < n; i++)
      if (buf[i] != (unsigned char)v) {
        printf("CORRUPTION: %s (%zu bytes at %p): byte %zu is 0x%02x, expected 0x%02x\n", what,
               size, p, off + i, buf[i], (unsigned)(v & 0xff));
        printf("RESULT status=corrupt\n");
        exit(EXIT_CORRUPTION);
      }
  }
}

int main(int argc, char **argv) {
  size_t steps = 32, layers = 12, unit = 4 * MiB, s, l;
  int verify = 0;
  static const struct option opts[] = {{"steps", required_argument, NULL, 's'},
                                       {"layers", required_argument, NULL, 'l'},
                                       {"unit", required_argument, NULL, 'u'},
                                       {"verify", no_argument, NULL, 'v'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': steps = (size_t)opt_long("steps", optarg, 1, 1000000); break;
    case 'l': layers = (size_t)opt_long("layers", optarg, 1, 1024); break;
    case 'u': unit = opt_size("unit", optarg); break;
    case 'v': verify = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit < 1024) bad_usage(argv[0], usage_text);

  void **act = (void **)xmalloc(layers * sizeof *act);
  unsigned char first = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (s = 0; s < steps; s++) {
    for (l = 0; l < layers; l++) {
      size_t size = unit / 2 + (l % 4) * (unit / 4); /* 0.5, 0.75, 1, 1.25 x unit */
      CHECK(cudaMalloc(&act[l], size));
      CHECK(cudaMemsetAsync(act[l], (int)(s + l) & 0xff, size, 0));
    }
    for (l = layers; l-- > 0;) {
      size_t size = unit / 2 + (l % 4) * (unit / 4);
      void *grad = NULL;
      CHECK(cudaMalloc(&grad, size));
      CHECK(cudaMemsetAsync(grad, (int)(s * 3 + l) & 0xff, size, 0));
      if (verify) {
        verify_fill(act[l], size, (int)(s + l) & 0xff, "activation");
        verify_fill(grad, size, (int)(s * 3 + l) & 0xff, "gradient");
      }
      CHECK(cudaFree(act[l]));
      if (l == 0 && s % 8 == 7)
        CHECK(cudaMemcpy(&first, grad, 1, cudaMemcpyDeviceToHost)); /* the loss read-back */
      CHECK(cudaFree(grad));
    }
  }
  CHECK(cudaDeviceSynchronize());
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("RESULT status=ok steps=%zu layers=%zu unit=%zu wall_ms=%.1f checksum=%u\n", steps,
         layers, unit, ms, first);
  free(act);
  return EXIT_WORKLOAD_OK;
}
