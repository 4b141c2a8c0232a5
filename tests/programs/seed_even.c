/* seed_even: many small blocks, free every other one, ask for one big block.
 *
 * Allocate --count (100) blocks of --unit (4 MiB), free the even-indexed ones (0, 2, 4, ...),
 * then ask for --request (100 MiB): the freed total is larger (200 MiB) but lies in --unit
 * sized holes.
 *
 * Exit: 0 final request served, 2 it failed with cudaErrorMemoryAllocation, 3 corruption,
 * 1 other error. RESULT: status final_alloc bytes live live_bytes free0 free_before free_after
 * free_end total count unit freed freed_bytes.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] = "[--unit SIZE=4M] [--count N=100] [--request SIZE=100M]";

int main(int argc, char **argv) {
  size_t unit = 4 * MiB, request = 100 * MiB, count = 100, i, freed = 0, free0 = 0;
  block_t *blocks;
  char what[48], s1[32], s2[32], extra[160];
  static const struct option opts[] = {
      {"unit", required_argument, NULL, 'u'},    {"count", required_argument, NULL, 'n'},
      {"request", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'u': unit = opt_size("unit", optarg); break;
    case 'n': count = (size_t)opt_long("count", optarg, 1, 10000000); break;
    case 'r': request = opt_size("request", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit == 0 || request == 0) bad_usage(argv[0], usage_text);

  printf("seed_even: %zu x %s, free the even-indexed ones, then request %s\n", count,
         fmt_size(s1, sizeof s1, unit), fmt_size(s2, sizeof s2, request));
  print_meminfo("at start", &free0, NULL);

  blocks = (block_t *)calloc(count, sizeof *blocks);
  if (!blocks) die_msg("host calloc", "out of memory");
  for (i = 0; i < count; i++) {
    snprintf(what, sizeof what, "block %zu", i);
    block_alloc(&blocks[i], unit, 0xE0E0000ULL + i, what);
  }
  printf("allocated %zu blocks\n", count);
  print_meminfo("after fill", NULL, NULL);

  for (i = 0; i < count; i += 2) {
    snprintf(what, sizeof what, "block %zu", i);
    block_free(&blocks[i], what);
    freed++;
  }
  printf("freed %zu blocks (%s in holes of %s)\n", freed, fmt_size(s1, sizeof s1, freed * unit),
         fmt_size(s2, sizeof s2, unit));
  print_meminfo("after frees", NULL, NULL);

  snprintf(extra, sizeof extra, "count=%zu unit=%zu freed=%zu freed_bytes=%zu", count, unit,
           freed, freed * unit);
  {
    int rc = seed_final_request(blocks, count, request, free0, extra);
    free(blocks);
    return rc;
  }
}
