/* graph_mem: stream-ordered allocations inside captured graphs, in the style of NVIDIA's
 * graphMemoryNodes sample (where kernels square and negate; here device-to-device copies stand
 * in for them, so every check holds on the simulated device too).
 *
 *   graph_mem [--size SIZE]
 *
 * One step runs on two streams: allocate an input and a result (cudaMallocAsync), copy the
 * input in, derive the result, hand it to the second stream through an event, free the input,
 * allocate a second result, derive it, copy both results out, and free them, the first on the
 * second stream. The program runs the step on its streams, then captures it into a graph
 * (cudaStreamBeginCapture: the allocations become allocation nodes, the frees free nodes),
 * launches the graph three times, and checks the copies out each time. A second graph leaves
 * its last allocation for later: the program uses it after the launch and frees it outside any
 * graph (cudaFree, then cudaFreeAsync), and in a graph of one free node; relaunching while it is
 * still allocated fails, unless the graph was instantiated with
 * cudaGraphInstantiateFlagAutoFreeOnLaunch. The graph memory attributes are read before and
 * after cudaDeviceGraphMemTrim. Finally a free of cudaMalloc memory during a capture is refused
 * (a free node needs a graph allocation) and the memory stays intact.
 * RESULT fields: stream_ok, graph_ok (launches whose copies were right), kept_ok (the kept
 * allocation held the step's result), relaunch_live (relaunching with it allocated),
 * auto_free_ok, free_graph_ok, used_after (graph memory counted as used at the end, before the
 * trim: a GPU counts freed memory until then), used_trimmed and reserved_trimmed (graph memory
 * used and reserved after the trim, both 0 for the program to pass), foreign_free (cudaFreeAsync of cudaMalloc memory in a
 * capture), foreign_intact.
 */
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--size SIZE]";

struct step {
  size_t size;
  unsigned char *in, *first, *second; /* host: the input and the two results copied out */
  cudaStream_t s1, s2;
  cudaEvent_t derived, done, freed;
};

/* The step on s1 (and s2, joined through events). keep: the second result is not freed, its
 * address is returned. */
static void *run_step(struct step *st, int keep) {
  void *input = NULL, *res1 = NULL, *res2 = NULL;
  CHECK(cudaMallocAsync(&input, st->size, st->s1));
  CHECK(cudaMallocAsync(&res1, st->size, st->s1));
  CHECK(cudaMemcpyAsync(input, st->in, st->size, cudaMemcpyHostToDevice, st->s1));
  CHECK(cudaMemcpyAsync(res1, input, st->size, cudaMemcpyDeviceToDevice, st->s1));
  CHECK(cudaEventRecord(st->derived, st->s1));
  CHECK(cudaStreamWaitEvent(st->s2, st->derived, 0));
  CHECK(cudaMemcpyAsync(st->first, res1, st->size, cudaMemcpyDeviceToHost, st->s2));
  CHECK(cudaFreeAsync(input, st->s1));
  CHECK(cudaMallocAsync(&res2, st->size, st->s1));
  CHECK(cudaMemcpyAsync(res2, res1, st->size, cudaMemcpyDeviceToDevice, st->s1));
  CHECK(cudaEventRecord(st->done, st->s1));
  CHECK(cudaMemcpyAsync(st->second, res2, st->size, cudaMemcpyDeviceToHost, st->s1));
  if (!keep) CHECK(cudaFreeAsync(res2, st->s1));
  CHECK(cudaStreamWaitEvent(st->s2, st->done, 0));
  CHECK(cudaFreeAsync(res1, st->s2));
  CHECK(cudaEventRecord(st->freed, st->s2));
  CHECK(cudaStreamWaitEvent(st->s1, st->freed, 0));
  return keep ? res2 : NULL;
}

static cudaGraph_t capture_step(struct step *st, int keep, void **kept) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(st->s1, cudaStreamCaptureModeGlobal));
  void *k = run_step(st, keep);
  CHECK(cudaStreamEndCapture(st->s1, &g));
  if (kept) *kept = k;
  return g;
}

static void clear(struct step *st) {
  memset(st->first, 0, st->size);
  memset(st->second, 0, st->size);
}

static int results_ok(const struct step *st) {
  return memcmp(st->first, st->in, st->size) == 0 && memcmp(st->second, st->in, st->size) == 0;
}

static unsigned long long graph_attr(enum cudaGraphMemAttributeType a) {
  unsigned long long v = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, a, &v));
  return v;
}

int main(int argc, char **argv) {
  struct step st;
  int c;
  memset(&st, 0, sizeof st);
  st.size = 3 * MiB;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': st.size = opt_size("size", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || st.size == 0) bad_usage(argv[0], usage_text);
  CHECK(cudaSetDevice(0));
  CHECK(cudaMallocHost((void **)&st.in, st.size));
  CHECK(cudaMallocHost((void **)&st.first, st.size));
  CHECK(cudaMallocHost((void **)&st.second, st.size));
  pattern_gen(st.in, st.size, 0x6a4, 0);
  CHECK(cudaStreamCreateWithFlags(&st.s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&st.s2, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&st.derived, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&st.freed, cudaEventDisableTiming));

  /* on the streams */
  clear(&st);
  run_step(&st, 0);
  CHECK(cudaStreamSynchronize(st.s1));
  int stream_ok = results_ok(&st);

  /* captured, launched three times */
  cudaGraph_t g = capture_step(&st, 0, NULL);
  cudaGraphExec_t x;
  CHECK(cudaGraphInstantiate(&x, g, 0));
  int graph_ok = 0;
  for (int i = 0; i < 3; i++) {
    clear(&st);
    CHECK(cudaGraphLaunch(x, st.s1));
    CHECK(cudaStreamSynchronize(st.s1));
    graph_ok += results_ok(&st);
  }
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphDestroy(g));

  /* a graph that keeps its last allocation */
  void *kept = NULL;
  g = capture_step(&st, 1, &kept);
  CHECK(cudaGraphInstantiate(&x, g, 0));
  clear(&st);
  CHECK(cudaGraphLaunch(x, st.s1));
  CHECK(cudaStreamSynchronize(st.s1));
  unsigned char *check = (unsigned char *)xmalloc(st.size);
  CHECK(cudaMemcpy(check, kept, st.size, cudaMemcpyDeviceToHost)); /* used outside the graph */
  int kept_ok = memcmp(check, st.in, st.size) == 0 && results_ok(&st);
  cudaError_t relaunch_live = cudaGraphLaunch(x, st.s1);
  (void)cudaGetLastError();
  CHECK(cudaFree(kept));                /* freed outside any graph */
  CHECK(cudaGraphLaunch(x, st.s1));
  CHECK(cudaFreeAsync(kept, st.s1));    /* in stream order */
  CHECK(cudaGraphLaunch(x, st.s1));     /* allowed: the free is queued before it */
  cudaGraph_t fg;                       /* a graph of one free node */
  CHECK(cudaStreamBeginCapture(st.s1, cudaStreamCaptureModeGlobal));
  CHECK(cudaFreeAsync(kept, st.s1));
  CHECK(cudaStreamEndCapture(st.s1, &fg));
  cudaGraphExec_t fx;
  CHECK(cudaGraphInstantiate(&fx, fg, 0));
  CHECK(cudaGraphLaunch(fx, st.s1));
  CHECK(cudaGraphLaunch(x, st.s1));
  CHECK(cudaGraphLaunch(fx, st.s1));
  CHECK(cudaStreamSynchronize(st.s1));
  int free_graph_ok = results_ok(&st);
  CHECK(cudaGraphExecDestroy(x));
  /* freed on launch: relaunching is allowed */
  CHECK(cudaGraphInstantiate(&x, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  int auto_free_ok = 1;
  for (int i = 0; i < 3; i++) {
    clear(&st);
    auto_free_ok &= cudaGraphLaunch(x, st.s1) == cudaSuccess;
    CHECK(cudaStreamSynchronize(st.s1));
    auto_free_ok &= results_ok(&st);
  }
  CHECK(cudaFree(kept)); /* the flag does not free at destruction: the program does */
  CHECK(cudaGraphExecDestroy(x));
  CHECK(cudaGraphExecDestroy(fx));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaGraphDestroy(fg));
  unsigned long long used_after = graph_attr(cudaGraphMemAttrUsedMemCurrent);
  CHECK(cudaDeviceGraphMemTrim(0));
  unsigned long long reserved_trimmed = graph_attr(cudaGraphMemAttrReservedMemCurrent);
  /* a GPU keeps freed graph memory counted as used until the trim (32 MiB here on an H100) */
  unsigned long long used_trimmed = graph_attr(cudaGraphMemAttrUsedMemCurrent);

  /* a free node needs a graph allocation: cudaMalloc memory is refused during a capture */
  void *plain = NULL;
  CHECK(cudaMalloc(&plain, st.size));
  CHECK(cudaMemset(plain, 0x5c, st.size));
  CHECK(cudaStreamBeginCapture(st.s1, cudaStreamCaptureModeRelaxed));
  cudaError_t foreign_free = cudaFreeAsync(plain, st.s1);
  (void)cudaGetLastError();
  cudaGraph_t eg = NULL;
  cudaError_t ended = cudaStreamEndCapture(st.s1, &eg);
  (void)cudaGetLastError();
  if (eg) CHECK(cudaGraphDestroy(eg));
  CHECK(cudaMemcpy(check, plain, st.size, cudaMemcpyDeviceToHost));
  int foreign_intact = 1;
  for (size_t i = 0; i < st.size; i++) foreign_intact &= check[i] == 0x5c;
  CHECK(cudaFree(plain));

  CHECK(cudaEventDestroy(st.derived));
  CHECK(cudaEventDestroy(st.done));
  CHECK(cudaEventDestroy(st.freed));
  CHECK(cudaStreamDestroy(st.s1));
  CHECK(cudaStreamDestroy(st.s2));
  CHECK(cudaFreeHost(st.in));
  CHECK(cudaFreeHost(st.first));
  CHECK(cudaFreeHost(st.second));
  free(check);
  int ok = stream_ok && graph_ok == 3 && kept_ok && free_graph_ok && auto_free_ok &&
           used_trimmed == 0 && reserved_trimmed == 0 && foreign_intact;
  printf("RESULT status=%s stream_ok=%d graph_ok=%d kept_ok=%d relaunch_live=%s auto_free_ok=%d "
         "free_graph_ok=%d used_after=%llu used_trimmed=%llu reserved_trimmed=%llu foreign_free=%s "
         "capture_end=%s foreign_intact=%d\n",
         ok ? "ok" : "error", stream_ok, graph_ok, kept_ok, cudaGetErrorName(relaunch_live),
         auto_free_ok, free_graph_ok, used_after, used_trimmed, reserved_trimmed,
         cudaGetErrorName(foreign_free),
         cudaGetErrorName(ended), foreign_intact);
  return ok ? EXIT_WORKLOAD_OK : EXIT_OTHER_ERROR;
}
