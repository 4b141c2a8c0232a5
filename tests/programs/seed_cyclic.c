/* seed_cyclic: fill the device with big tensors, punch three holes, ask for more than a hole.
 *
 * Sizes: a cycle of --period (8) pseudo-random sizes, drawn once from --seed, uniform in
 * [--min, --max] (0.5 GiB .. 2 GiB) and rounded down to a multiple of --align (2 MiB; use
 * --align 1 for arbitrary byte sizes). The program allocates sizes from the cycle, round and
 * round, until the first cudaMalloc failure (which must be cudaErrorMemoryAllocation; it is
 * cleared with cudaGetLastError) or --max-count allocations. It then sorts the blocks by
 * address, frees three that are not neighbours (address ranks 1, n/2 and n-2, so each hole is
 * bounded by live blocks), and asks for
 *     request = largest freed + (sum of the other two freed) / 2   (rounded down to --align)
 * which is more than any single hole but less than the total freed. --request overrides it.
 *
 * Exit: 0 final request served, 2 it failed with cudaErrorMemoryAllocation, 3 corruption,
 * 1 other error (including: fewer than 7 blocks fit). RESULT: status final_alloc bytes live
 * live_bytes free0 free_before free_after free_end total count filled_bytes freed_bytes
 * largest_hole seed.
 */
#include "common.h"

#include <getopt.h>

static const char usage_text[] =
    "[--min SIZE=512M] [--max SIZE=2G] [--align SIZE=2M] [--period N=8] [--seed N=1]\n"
    "       [--max-count N=100000] [--request SIZE (default: computed)]";

static int by_address(const void *a, const void *b) {
  uintptr_t pa = (uintptr_t)((const block_t *)a)->ptr, pb = (uintptr_t)((const block_t *)b)->ptr;
  return pa < pb ? -1 : pa > pb;
}

int main(int argc, char **argv) {
  size_t min_size = 512 * MiB, max_size = 2 * GiB, align = 2 * MiB, request = 0, free0 = 0;
  size_t period = 8, max_count = 100000, n = 0, cap = 0, filled = 0, i;
  size_t *cycle;
  unsigned long long seed = 1;
  block_t *blocks = NULL;
  size_t pick[3], freed_bytes = 0, largest = 0;
  char what[48], s1[32], s2[32], s3[32], extra[200];
  rng_t rng;
  cudaError_t err;
  static const struct option opts[] = {
      {"min", required_argument, NULL, 'a'},    {"max", required_argument, NULL, 'b'},
      {"align", required_argument, NULL, 'g'},  {"period", required_argument, NULL, 'p'},
      {"seed", required_argument, NULL, 's'},   {"max-count", required_argument, NULL, 'n'},
      {"request", required_argument, NULL, 'r'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'a': min_size = opt_size("min", optarg); break;
    case 'b': max_size = opt_size("max", optarg); break;
    case 'g': align = opt_size("align", optarg); break;
    case 'p': period = (size_t)opt_long("period", optarg, 1, 1000000); break;
    case 's': seed = (unsigned long long)opt_long("seed", optarg, 0, 0x7fffffffL); break;
    case 'n': max_count = (size_t)opt_long("max-count", optarg, 7, 100000000); break;
    case 'r': request = opt_size("request", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || align == 0 || min_size < align || max_size < min_size)
    bad_usage(argv[0], usage_text);

  cycle = (size_t *)xmalloc(period * sizeof *cycle);
  rng_seed(&rng, seed);
  for (i = 0; i < period; i++) cycle[i] = rng_range(&rng, min_size, max_size) / align * align;

  printf("seed_cyclic: cycle of %zu sizes in [%s, %s], align %s, seed %llu\n", period,
         fmt_size(s1, sizeof s1, min_size), fmt_size(s2, sizeof s2, max_size),
         fmt_size(s3, sizeof s3, align), seed);
  print_meminfo("at start", &free0, NULL);

  for (;;) {
    size_t size = cycle[n % period];
    if (n == max_count) {
      printf("error: the device did not fill up after %zu allocations (--max-count)\n", n);
      printf("RESULT status=error what=never_full count=%zu\n", n);
      return EXIT_OTHER_ERROR;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      blocks = (block_t *)realloc(blocks, cap * sizeof *blocks);
      if (!blocks) die_msg("host realloc", "out of memory");
    }
    memset(&blocks[n], 0, sizeof blocks[n]);
    err = cudaMalloc(&blocks[n].ptr, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaError_t last = cudaGetLastError();
      printf("device full: allocation %zu (%s) failed with %s; cleared (cudaGetLastError -> %s)\n",
             n, fmt_size(s1, sizeof s1, size), cudaGetErrorName(err), cudaGetErrorName(last));
      if (last != cudaErrorMemoryAllocation || cudaGetLastError() != cudaSuccess)
        die_msg("cudaGetLastError", "did not report and clear the allocation failure");
      break;
    }
    if (err != cudaSuccess) die_cuda("cudaMalloc(fill)", err, __FILE__, __LINE__);
    blocks[n].size = size;
    blocks[n].tag = 0xC7C0000ULL + n;
    blocks[n].live = 1;
    fill_pattern(blocks[n].ptr, size, blocks[n].tag);
    filled += size;
    n++;
  }
  printf("filled the device with %zu blocks, %s\n", n, fmt_size(s1, sizeof s1, filled));
  print_meminfo("after fill", NULL, NULL);
  if (n < 7) {
    printf("error: only %zu blocks fit; need at least 7 (lower --min/--max)\n", n);
    printf("RESULT status=error what=too_few_blocks count=%zu\n", n);
    return EXIT_OTHER_ERROR;
  }

  qsort(blocks, n, sizeof *blocks, by_address);
  pick[0] = 1;
  pick[1] = n / 2;
  pick[2] = n - 2;
  for (i = 0; i < 3; i++) {
    block_t *b = &blocks[pick[i]];
    printf("free address rank %zu: %p, %s\n", pick[i], b->ptr, fmt_size(s1, sizeof s1, b->size));
    freed_bytes += b->size;
    if (b->size > largest) largest = b->size;
    snprintf(what, sizeof what, "block at rank %zu", pick[i]);
    block_free(b, what);
  }
  if (!request) {
    request = (largest + (freed_bytes - largest) / 2) / align * align;
    if (request <= largest) request = largest + align;
  }
  printf("freed %s in 3 holes, the largest %s; request %s\n",
         fmt_size(s1, sizeof s1, freed_bytes), fmt_size(s2, sizeof s2, largest),
         fmt_size(s3, sizeof s3, request));
  print_meminfo("after frees", NULL, NULL);

  snprintf(extra, sizeof extra,
           "count=%zu filled_bytes=%zu freed_bytes=%zu largest_hole=%zu seed=%llu", n, filled,
           freed_bytes, largest, seed);
  {
    int rc = seed_final_request(blocks, n, request, free0, extra);
    free(blocks);
    free(cycle);
    return rc;
  }
}
