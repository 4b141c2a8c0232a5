/* tight_loop: the cost of one cudaMalloc + cudaFree pair of the same size, next to one glibc
 * malloc + free pair of that size measured in the same process, one after the other.
 *
 * Rounds alternate the two loops (--rounds, each of --pairs pairs) and the median round of each
 * is reported, so that a machine's drift affects both alike.
 * RESULT: status size pairs cuda_ns glibc_ns ratio (cuda_ns / glibc_ns, per pair, medians).
 */
#include "common.h"

#include <getopt.h>
#include <time.h>

static const char usage_text[] = "[--size SIZE=1M] [--pairs N=100000] [--rounds N=7]";

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t size = 1 * MiB, pairs = 100000, rounds = 7, r, i;
  static const struct option opts[] = {{"size", required_argument, NULL, 'z'},
                                       {"pairs", required_argument, NULL, 'p'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'z': size = opt_size("size", optarg); break;
    case 'p': pairs = (size_t)opt_long("pairs", optarg, 1, 100000000); break;
    case 'r': rounds = (size_t)opt_long("rounds", optarg, 1, 1001); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);

  double *cuda = (double *)xmalloc(rounds * sizeof *cuda);
  double *host = (double *)xmalloc(rounds * sizeof *host);
  void *p = NULL;
  CHECK(cudaMalloc(&p, size)); /* warm-up: context, first segment */
  CHECK(cudaFree(p));
  for (r = 0; r < rounds; r++) {
    double t0 = now_ns();
    for (i = 0; i < pairs; i++) {
      CHECK(cudaMalloc(&p, size));
      CHECK(cudaFree(p));
    }
    double t1 = now_ns();
    for (i = 0; i < pairs; i++) {
      void *volatile q = malloc(size);
      if (!q) {
        printf("RESULT status=error call=malloc\n");
        return EXIT_OTHER_ERROR;
      }
      free(q);
    }
    double t2 = now_ns();
    cuda[r] = (t1 - t0) / (double)pairs;
    host[r] = (t2 - t1) / (double)pairs;
  }
  qsort(cuda, rounds, sizeof *cuda, cmp_double);
  qsort(host, rounds, sizeof *host, cmp_double);
  double cm = cuda[rounds / 2], hm = host[rounds / 2];
  printf("RESULT status=ok size=%zu pairs=%zu cuda_ns=%.1f glibc_ns=%.1f ratio=%.2f\n", size,
         pairs, cm, hm, cm / hm);
  free(cuda);
  free(host);
  return EXIT_WORKLOAD_OK;
}
