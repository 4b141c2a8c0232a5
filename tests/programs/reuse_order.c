/* reuse_order: is a freed block reused before work of another stream or thread stopped using it?
 *
 * Every round of every variant does the same five steps, with the streams the variant names:
 *   1. A is allocated (--size bytes) and a slow tail of work that writes A (--copies async
 *      copies from a source filled with P1 = 0xA1) is issued on the "old" stream;
 *   2. cudaFree(A): the real cudaFree waits for the device, so a correct program may do this;
 *   3. cudaMalloc(&B, --size): a caching allocator may hand out A's memory again;
 *   4. cudaMemsetAsync(B, P2 = 0xB2) is issued on the "new" stream;
 *   5. everything is synchronised and B is read back: it must be all P2. If B reuses A and the
 *      new stream was not ordered after the old one, the late copies overwrite the memset.
 * Variants (old stream -> new stream):
 *   legacy         the legacy default stream -> the same (one queue: always safe)
 *   nb-to-legacy   a non-blocking stream -> the legacy stream
 *   legacy-to-nb   the legacy stream -> a non-blocking stream created at the start
 *   two-blocking   a blocking stream -> another blocking stream
 *   new-stream     the legacy stream -> a non-blocking stream created after the free
 *   ptds-threads   this thread's per-thread default stream -> another thread's, that thread
 *                  started after the allocation
 *   host-func      a non-blocking stream whose copies wait behind a host function that sleeps
 *                  (--sleep-ms) -> the legacy stream
 *   graph          a non-blocking stream whose copies are a CUDA graph (captured on that stream,
 *                  instantiated, launched) -> the legacy stream
 * On the simulated device TESSERA_SIM_OP_DELAY_US makes each async operation slow.
 *
 * Exit: 0 every round saw all P2, 3 some round did not, 1 any error.
 * RESULT: status variant rounds reused (rounds where B == A) corrupt_rounds size copies.
 */
#include "common.h"

#include <getopt.h>
#include <pthread.h>
#include <time.h>

static const char usage_text[] =
    "--variant NAME [--size SIZE=8M] [--copies N=4] [--rounds N=4] [--sleep-ms N=50]";

#define P1 0xA1
#define P2 0xB2

static const char *const variants[] = {"legacy",       "nb-to-legacy", "legacy-to-nb",
                                       "two-blocking", "new-stream",   "ptds-threads",
                                       "host-func",    "graph"};

typedef struct memset_job {
  void *b;
  size_t size;
} memset_job;

/* ptds-threads: the new owner's work, from a thread that has not used CUDA before. */
static void *memset_on_own_ptds(void *arg) {
  memset_job *j = (memset_job *)arg;
  CHECK(cudaMemsetAsync(j->b, P2, j->size, cudaStreamPerThread));
  CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  return NULL;
}

static void CUDART_CB sleep_ms(void *arg) {
  long ms = *(const long *)arg;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  size_t size = 8 * MiB, copies = 4, rounds = 4, r, k, i, reused = 0, corrupt = 0;
  long sleep = 50;
  const char *variant = NULL;
  int v = -1;
  static const struct option opts[] = {{"variant", required_argument, NULL, 'v'},
                                       {"size", required_argument, NULL, 'z'},
                                       {"copies", required_argument, NULL, 'c'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"sleep-ms", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int c;

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'v': variant = optarg; break;
    case 'z': size = opt_size("size", optarg); break;
    case 'c': copies = (size_t)opt_long("copies", optarg, 1, 100000); break;
    case 'r': rounds = (size_t)opt_long("rounds", optarg, 1, 1000000); break;
    case 's': sleep = opt_long("sleep-ms", optarg, 0, 10000); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  for (i = 0; variant && i < sizeof variants / sizeof variants[0]; i++)
    if (strcmp(variant, variants[i]) == 0) v = (int)i;
  if (optind != argc || size == 0 || v < 0) bad_usage(argv[0], usage_text);

  unsigned char *host = (unsigned char *)xmalloc(size);
  void *src = NULL;
  CHECK(cudaMalloc(&src, size));
  CHECK(cudaMemset(src, P1, size));
  CHECK(cudaDeviceSynchronize());

  /* the streams each variant uses as old and new; 0 is the legacy default stream */
  cudaStream_t s1 = 0, s2 = 0;
  if (v == 1 || v == 6 || v == 7) CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  if (v == 2) CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  if (v == 3) {
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreate(&s2));
  }
  cudaStream_t old_stream = v == 5 ? cudaStreamPerThread : s1;

  for (r = 0; r < rounds; r++) {
    void *a = NULL, *b = NULL;
    size_t bad = 0, first_bad = 0;
    CHECK(cudaMalloc(&a, size));
    if (v == 6) CHECK(cudaLaunchHostFunc(s1, sleep_ms, &sleep));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (v == 7) CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    for (k = 0; k < copies; k++)
      CHECK(cudaMemcpyAsync(a, src, size, cudaMemcpyDeviceToDevice, old_stream));
    if (v == 7) {
      CHECK(cudaStreamEndCapture(s1, &graph));
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      CHECK(cudaGraphLaunch(exec, s1));
    }
    CHECK(cudaFree(a));
    CHECK(cudaMalloc(&b, size));
    if (b == a) reused++;
    if (v == 4) CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    if (v == 5) {
      memset_job job = {b, size};
      pthread_t t;
      if (pthread_create(&t, NULL, memset_on_own_ptds, &job) != 0) {
        printf("RESULT status=error call=pthread_create\n");
        return EXIT_OTHER_ERROR;
      }
      pthread_join(t, NULL);
    } else {
      CHECK(cudaMemsetAsync(b, P2, size, s2));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(host, b, size, cudaMemcpyDeviceToHost));
    for (i = 0; i < size; i++) {
      if (host[i] != P2) {
        if (!bad) first_bad = i;
        bad++;
      }
    }
    printf("round %zu: B %s A; %s\n", r, b == a ? "==" : "!=", bad ? "CORRUPTED" : "all P2");
    if (bad) {
      printf("CORRUPTION: round %zu: %zu of %zu bytes of B are not 0x%02x (first at %zu: 0x%02x)\n",
             r, bad, size, P2, first_bad, host[first_bad]);
      corrupt++;
    }
    CHECK(cudaFree(b));
    if (exec) CHECK(cudaGraphExecDestroy(exec));
    if (graph) CHECK(cudaGraphDestroy(graph));
    if (v == 4) {
      CHECK(cudaStreamDestroy(s2));
      s2 = 0;
    }
  }
  if (s1) CHECK(cudaStreamDestroy(s1));
  if (s2) CHECK(cudaStreamDestroy(s2));
  CHECK(cudaFree(src));
  free(host);
  printf("RESULT status=%s variant=%s rounds=%zu reused=%zu corrupt_rounds=%zu size=%zu copies=%zu\n",
         corrupt ? "corrupt" : "ok", variant, rounds, reused, corrupt, size, copies);
  return corrupt ? EXIT_CORRUPTION : EXIT_WORKLOAD_OK;
}
