/* seed_middle: free the middle of three blocks and ask for more than the hole.
 *
 * Allocate --first (1 GiB), --middle (2 GiB), --last (1 GiB); free the middle one; ask for
 * --request (3 GiB).
 *
 * Exit: 0 final request served, 2 it failed with cudaErrorMemoryAllocation, 3 corruption,
 * 1 other error. RESULT: status final_alloc bytes live live_bytes free0 free_before free_after
 * free_end total first middle last.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] =
    "[--first SIZE=1G] [--middle SIZE=2G] [--last SIZE=1G] [--request SIZE=3G]";

int main(int argc, char **argv) {
  size_t sizes[3] = {1 * GiB, 2 * GiB, 1 * GiB}, request = 3 * GiB, free0 = 0;
  static const char *const names[3] = {"first", "middle", "last"};
  block_t blocks[3];
  char s1[32], s2[32], s3[32], s4[32], extra[128];
  static const struct option opts[] = {
      {"first", required_argument, NULL, 'f'},   {"middle", required_argument, NULL, 'm'},
      {"last", required_argument, NULL, 'l'},    {"request", required_argument, NULL, 'r'},
      {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
  int c, i;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'f': sizes[0] = opt_size("first", optarg); break;
    case 'm': sizes[1] = opt_size("middle", optarg); break;
    case 'l': sizes[2] = opt_size("last", optarg); break;
    case 'r': request = opt_size("request", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || !sizes[0] || !sizes[1] || !sizes[2] || !request)
    bad_usage(argv[0], usage_text);

  printf("seed_middle: %s + %s + %s, free the middle, then request %s\n",
         fmt_size(s1, sizeof s1, sizes[0]), fmt_size(s2, sizeof s2, sizes[1]),
         fmt_size(s3, sizeof s3, sizes[2]), fmt_size(s4, sizeof s4, request));
  print_meminfo("at start", &free0, NULL);

  memset(blocks, 0, sizeof blocks);
  for (i = 0; i < 3; i++) block_alloc(&blocks[i], sizes[i], 0x3D0000ULL + (uint64_t)i, names[i]);
  printf("allocated first=%p middle=%p last=%p\n", blocks[0].ptr, blocks[1].ptr, blocks[2].ptr);
  print_meminfo("after fill", NULL, NULL);

  block_free(&blocks[1], "middle");
  printf("freed the middle block\n");
  print_meminfo("after free", NULL, NULL);

  snprintf(extra, sizeof extra, "first=%zu middle=%zu last=%zu", sizes[0], sizes[1], sizes[2]);
  return seed_final_request(blocks, 3, request, free0, extra);
}
