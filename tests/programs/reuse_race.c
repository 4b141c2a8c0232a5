/* reuse_race: is freed device memory handed out again before the device stopped using it?
 *
 * Per round:
 *   1. S (source, --size bytes) is filled with byte P1 = 0xA1; A is allocated (--size);
 *   2. --copies async copies S -> A are enqueued on a non-blocking stream s (a long tail of
 *      device work that writes A);
 *   3. cudaFree(A): the real cudaFree waits for the device, so this is safe;
 *   4. cudaMalloc(&B, --size): an unsafe caching allocator returns A's memory at once;
 *   5. cudaMemset(B, P2 = 0xB2) on the legacy default stream, which does NOT wait for the
 *      non-blocking stream s;
 *   6. cudaStreamSynchronize(s), then B is copied back: it must be all P2. When B reuses A and
 *      the copies were still running, they overwrite the memset with P1.
 * On the simulated device TESSERA_SIM_OP_DELAY_US makes each async operation slow, which
 * widens the window deterministically.
 *
 * Exit: 0 every round saw all P2, 3 some round did not, 1 any error.
 * RESULT: status rounds reused (rounds where B == A) corrupt_rounds size copies.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] = "[--size SIZE=64M] [--copies N=8] [--rounds N=10]";

#define P1 0xA1
#define P2 0xB2

int main(int argc, char **argv) {
  size_t size = 64 * MiB, copies = 8, rounds = 10, r, k, i, reused = 0, corrupt = 0;
  cudaStream_t s;
  unsigned char *host;
  void *src = NULL;
  char s1[32];
  static const struct option opts[] = {{"size", required_argument, NULL, 'z'},
                                       {"copies", required_argument, NULL, 'c'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'z': size = opt_size("size", optarg); break;
    case 'c': copies = (size_t)opt_long("copies", optarg, 1, 100000); break;
    case 'r': rounds = (size_t)opt_long("rounds", optarg, 1, 1000000); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);

  printf("reuse_race: %zu rounds, %s, %zu async copies per round\n", rounds,
         fmt_size(s1, sizeof s1, size), copies);
  host = (unsigned char *)xmalloc(size);
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaMalloc(&src, size));
  CHECK(cudaMemset(src, P1, size));
  CHECK(cudaDeviceSynchronize());

  for (r = 0; r < rounds; r++) {
    void *a = NULL, *b = NULL;
    size_t bad = 0, first_bad = 0;
    CHECK(cudaMalloc(&a, size));
    for (k = 0; k < copies; k++)
      CHECK(cudaMemcpyAsync(a, src, size, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaFree(a));
    CHECK(cudaMalloc(&b, size));
    if (b == a) reused++;
    CHECK(cudaMemset(b, P2, size));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(host, b, size, cudaMemcpyDeviceToHost));
    for (i = 0; i < size; i++) {
      if (host[i] != P2) {
        if (!bad) first_bad = i;
        bad++;
      }
    }
    printf("round %zu: B %s A; %s\n", r, b == a ? "==" : "!=", bad ? "CORRUPTED" : "all P2");
    if (bad) {
      printf("CORRUPTION: round %zu: %zu of %zu bytes of B are not 0x%02x (first at %zu: 0x%02x);"
             " the copies into the freed A landed in B\n", r, bad, size, P2, first_bad,
             host[first_bad]);
      corrupt++;
    }
    CHECK(cudaFree(b));
  }
  /* The source must still hold P1 (nothing wrote to it). */
  CHECK(cudaMemcpy(host, src, size, cudaMemcpyDeviceToHost));
  for (i = 0; i < size; i++) {
    if (host[i] != P1) {
      printf("CORRUPTION: source buffer byte %zu is 0x%02x, expected 0x%02x\n", i, host[i], P1);
      corrupt++;
      break;
    }
  }
  CHECK(cudaFree(src));
  CHECK(cudaStreamDestroy(s));
  free(host);

  printf("%zu rounds, B reused A's address in %zu, corrupted in %zu\n", rounds, reused, corrupt);
  printf("RESULT status=%s rounds=%zu reused=%zu corrupt_rounds=%zu size=%zu copies=%zu\n",
         corrupt ? "corrupt" : "ok", rounds, reused, corrupt, size, copies);
  return corrupt ? EXIT_CORRUPTION : EXIT_WORKLOAD_OK;
}
