/* fork_child: a process that forks after using CUDA.
 *
 * Allocate and write --count blocks of --unit bytes; fork(). The child does not touch CUDA
 * (CUDA is unusable in a child forked after initialisation on a real GPU): it sleeps
 * --child-sleep-ms and calls exit(0), so atexit handlers run. With --child-cuda the child
 * also calls cudaMalloc and prints the error it gets (whatever it is), then exits 0. The parent
 * waits for the child and prints its exit status, then verifies its blocks, allocates, writes,
 * verifies and frees --count more, verifies and frees everything.
 *
 * Exit: 0 ok, 3 corruption, 1 any error (the child not exiting with status 0 included).
 * RESULT (parent only): status child_exit child_signal blocks unit child_cuda.
 */
#include "common.h"

#include <getopt.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "[--unit SIZE=16M] [--count N=4] [--child-sleep-ms N=100] [--child-cuda]";

static void sleep_ms(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int main(int argc, char **argv) {
  size_t unit = 16 * MiB, count = 4, i;
  long child_sleep_ms = 100;
  int child_cuda = 0, status = 0, child_exit = -1, child_signal = 0, c;
  block_t *blocks;
  char what[48], s1[32];
  pid_t pid;
  static const struct option opts[] = {{"unit", required_argument, NULL, 'u'},
                                       {"count", required_argument, NULL, 'n'},
                                       {"child-sleep-ms", required_argument, NULL, 's'},
                                       {"child-cuda", no_argument, NULL, 'c'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'u': unit = opt_size("unit", optarg); break;
    case 'n': count = (size_t)opt_long("count", optarg, 1, 1000000); break;
    case 's': child_sleep_ms = opt_long("child-sleep-ms", optarg, 0, 600000); break;
    case 'c': child_cuda = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || unit == 0) bad_usage(argv[0], usage_text);

  printf("fork_child: %zu x %s, then fork%s\n", count, fmt_size(s1, sizeof s1, unit),
         child_cuda ? " (the child calls cudaMalloc)" : "");
  blocks = (block_t *)calloc(2 * count, sizeof *blocks);
  if (!blocks) die_msg("host calloc", "out of memory");
  for (i = 0; i < count; i++) {
    snprintf(what, sizeof what, "block %zu", i);
    block_alloc(&blocks[i], unit, 0xF0C0000ULL + i, what);
  }
  printf("parent: allocated and wrote %zu blocks\n", count);

  fflush(NULL);
  pid = fork();
  if (pid < 0) die_msg("fork", strerror(errno));
  if (pid == 0) {
    if (child_cuda) {
      void *p = NULL;
      cudaError_t e = cudaMalloc(&p, unit);
      printf("child: cudaMalloc -> %s\n", cudaGetErrorName(e));
    }
    sleep_ms(child_sleep_ms);
    printf("child: exiting with exit(0)\n");
    exit(0);
  }
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) die_msg("waitpid", strerror(errno));
  }
  if (WIFEXITED(status)) {
    child_exit = WEXITSTATUS(status);
    printf("parent: child exited with status %d\n", child_exit);
  } else if (WIFSIGNALED(status)) {
    child_signal = WTERMSIG(status);
    printf("parent: child was killed by signal %d\n", child_signal);
  }

  blocks_verify_all(blocks, count);
  printf("parent: verified %zu blocks after the fork\n", count);
  for (i = count; i < 2 * count; i++) {
    snprintf(what, sizeof what, "block %zu", i);
    block_alloc(&blocks[i], unit, 0xF0C0000ULL + i, what);
  }
  blocks_verify_all(blocks, 2 * count);
  blocks_free_all(blocks, 2 * count);
  printf("parent: allocated %zu more, verified and freed all %zu\n", count, 2 * count);
  free(blocks);

  if (child_exit != 0) {
    printf("error: the child did not exit normally with status 0\n");
    printf("RESULT status=error child_exit=%d child_signal=%d blocks=%zu unit=%zu child_cuda=%d\n",
           child_exit, child_signal, 2 * count, unit, child_cuda);
    return EXIT_OTHER_ERROR;
  }
  printf("RESULT status=ok child_exit=%d child_signal=%d blocks=%zu unit=%zu child_cuda=%d\n",
         child_exit, child_signal, 2 * count, unit, child_cuda);
  return EXIT_WORKLOAD_OK;
}
