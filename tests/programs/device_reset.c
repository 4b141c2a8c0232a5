/* device_reset: allocations across cudaDeviceReset().
 *
 * Allocate --count blocks of --unit bytes and write/verify them; cudaDeviceReset() (which
 * destroys the primary context and every allocation in it); then allocate --count blocks again
 * (CUDA re-creates the context on the next call), write/verify/free them. The pointers from
 * before the reset are dead: the program does NOT free them (it prints that it skips them),
 * because cudaFree on them would be a use of a stale handle.
 *
 * Exit: 0 ok, 3 corruption, 1 any error. RESULT: status before after skipped_frees unit.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] = "[--unit SIZE=16M] [--count N=8]";

int main(int argc, char **argv) {
  size_t unit = 16 * MiB, count = 8, i;
  block_t *before, *after;
  char what[48], s1[32];
  static const struct option opts[] = {{"unit", required_argument, NULL, 'u'},
                                       {"count", required_argument, NULL, 'n'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'u': unit = opt_size("unit", optarg); break;
    case 'n': count = (size_t)opt_long("count", optarg, 1, 1000000); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit == 0) bad_usage(argv[0], usage_text);

  printf("device_reset: %zu x %s before and after cudaDeviceReset\n", count,
         fmt_size(s1, sizeof s1, unit));
  before = (block_t *)calloc(count, sizeof *before);
  after = (block_t *)calloc(count, sizeof *after);
  if (!before || !after) die_msg("host calloc", "out of memory");

  print_meminfo("at start", NULL, NULL);
  for (i = 0; i < count; i++) {
    snprintf(what, sizeof what, "block %zu (before reset)", i);
    block_alloc(&before[i], unit, 0xDE50000ULL + i, what);
  }
  blocks_verify_all(before, count);
  printf("allocated, wrote and verified %zu blocks\n", count);
  print_meminfo("before reset", NULL, NULL);

  CHECK(cudaDeviceReset());
  printf("cudaDeviceReset: ok\n");
  for (i = 0; i < count; i++) {
    printf("skip cudaFree of block %zu from before the reset (its context is gone)\n", i);
    before[i].live = 0;
  }
  print_meminfo("after reset", NULL, NULL);

  for (i = 0; i < count; i++) {
    snprintf(what, sizeof what, "block %zu (after reset)", i);
    block_alloc(&after[i], unit, 0xAF70000ULL + i, what);
  }
  blocks_verify_all(after, count);
  printf("allocated, wrote and verified %zu blocks after the reset\n", count);
  blocks_free_all(after, count);
  print_meminfo("at end", NULL, NULL);

  printf("RESULT status=ok before=%zu after=%zu skipped_frees=%zu unit=%zu\n", count, count,
         count, unit);
  free(before);
  free(after);
  return EXIT_WORKLOAD_OK;
}
