/* meminfo: what does cudaMemGetInfo report around some allocations?
 *
 * Prints cudaMemGetInfo (free, total) before any allocation (free0), after allocating --count
 * blocks of --unit bytes (free1) and after freeing them (free2). The blocks are written and
 * verified before they are freed.
 *
 * Exit: 0 ok, 3 corruption, 1 any error (an allocation failure included).
 * RESULT: status free0 total free1 free2 count unit.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] = "[--unit SIZE=1G] [--count N=4]";

int main(int argc, char **argv) {
  size_t unit = 1 * GiB, count = 4, i, free0 = 0, free1 = 0, free2 = 0, total = 0, total1 = 0;
  block_t *blocks;
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
    case 'n': count = (size_t)opt_long("count", optarg, 0, 10000000); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit == 0) bad_usage(argv[0], usage_text);

  printf("meminfo: %zu x %s\n", count, fmt_size(s1, sizeof s1, unit));
  print_meminfo("before allocating", &free0, &total);
  blocks = (block_t *)calloc(count ? count : 1, sizeof *blocks);
  if (!blocks) die_msg("host calloc", "out of memory");
  for (i = 0; i < count; i++) {
    snprintf(what, sizeof what, "block %zu", i);
    block_alloc(&blocks[i], unit, 0x3E30000ULL + i, what);
  }
  print_meminfo("after allocating", &free1, &total1);
  blocks_verify_all(blocks, count);
  blocks_free_all(blocks, count);
  print_meminfo("after freeing", &free2, NULL);
  free(blocks);

  if (total1 != total) printf("note: total changed from %zu to %zu\n", total, total1);
  printf("free dropped by %s%zu bytes while %zu bytes were allocated\n",
         free1 > free0 ? "-" : "", free1 > free0 ? free1 - free0 : free0 - free1, count * unit);
  printf("RESULT status=ok free0=%zu total=%zu free1=%zu free2=%zu count=%zu unit=%zu\n", free0,
         total, free1, free2, count, unit);
  return EXIT_WORKLOAD_OK;
}
