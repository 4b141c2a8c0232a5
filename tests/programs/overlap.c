/* overlap: streams that should run side by side, with the host freeing and allocating between
 * their launches and never synchronising a round.
 *
 *   overlap [--streams N] [--rounds R] [--ops K] [--size BYTES] [--async]
 *
 * Each round, for each of N non-blocking streams in turn: cudaMalloc a scratch buffer, queue K
 * memsets of it and one copy of it into a result slot of its own (one per round and stream),
 * cudaFree it. The host never
 * waits until the end, so a freed buffer is typically handed to the next stream while the work
 * that used it is still queued: an allocator that orders the reuse with an event makes the new
 * owner's stream wait for exactly that work, and no more. The device time is measured with
 * events (never with the host's clock), recorded around each round's work on its stream: after
 * the allocation (so after any wait an allocator queued there) and after the copy:
 *   busy_ms     the sum over every round of every stream of its work's time;
 *   span_ms     the last round's end minus the first round's start;
 *   overlap     busy / span: N when the streams run fully side by side, 1 when serialised.
 * On a GPU the driver's own cudaFree synchronises the device, so natively the streams cannot
 * overlap across rounds; the point is what an allocator that does not synchronise keeps.
 * With --async the scratch buffers are stream-ordered (cudaMallocAsync/cudaFreeAsync on the
 * round's stream): the allocator knows the stream, reuses a block within it in order, and the
 * streams can overlap without any wait.
 * Every slot must hold its round's and stream's pattern at the end (RESULT bad_slots).
 */
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--streams N] [--rounds R] [--ops K] [--size BYTES] [--async]";

enum { MAX_STREAMS = 8 };

static unsigned char round_pattern(long round, int stream) {
  return (unsigned char)(1 + (round * 31 + stream * 7) % 250);
}

int main(int argc, char **argv) {
  prog_init();
  long nstreams = 2, rounds = 16, ops = 4;
  size_t size = 4 * MiB;
  int c, async = 0;
  static const struct option opts[] = {{"streams", required_argument, NULL, 's'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"ops", required_argument, NULL, 'k'},
                                       {"size", required_argument, NULL, 'b'},
                                       {"async", no_argument, NULL, 'a'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's': nstreams = opt_long("streams", optarg, 1, MAX_STREAMS); break;
    case 'r': rounds = opt_long("rounds", optarg, 1, 1000000); break;
    case 'k': ops = opt_long("ops", optarg, 1, 1000); break;
    case 'b': size = opt_size("size", optarg); break;
    case 'a': async = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);

  cudaStream_t streams[MAX_STREAMS];
  size_t nev = (size_t)rounds * (size_t)nstreams;
  cudaEvent_t *before = (cudaEvent_t *)xmalloc(nev * sizeof *before);
  cudaEvent_t *after = (cudaEvent_t *)xmalloc(nev * sizeof *after);
  unsigned char *slots = NULL;
  CHECK(cudaMalloc((void **)&slots, size * nev));
  for (int s = 0; s < nstreams; s++)
    CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
  for (size_t i = 0; i < nev; i++) {
    CHECK(cudaEventCreate(&before[i]));
    CHECK(cudaEventCreate(&after[i]));
  }
  CHECK(cudaDeviceSynchronize());
  for (long r = 0; r < rounds; r++) {
    for (int s = 0; s < nstreams; s++) {
      size_t i = (size_t)r * (size_t)nstreams + (size_t)s;
      void *scratch = NULL;
      if (async)
        CHECK(cudaMallocAsync(&scratch, size, streams[s]));
      else
        CHECK(cudaMalloc(&scratch, size));
      CHECK(cudaEventRecord(before[i], streams[s]));
      for (long k = 0; k < ops; k++)
        CHECK(cudaMemsetAsync(scratch, round_pattern(r, s), size, streams[s]));
      CHECK(cudaMemcpyAsync(slots + i * size, scratch, size, cudaMemcpyDeviceToDevice,
                            streams[s]));
      CHECK(cudaEventRecord(after[i], streams[s]));
      if (async)
        CHECK(cudaFreeAsync(scratch, streams[s]));
      else
        CHECK(cudaFree(scratch));
    }
  }
  CHECK(cudaDeviceSynchronize());

  /* device time, from the events, each against the first round's start on stream 0 */
  float first = 0, last = 0, busy = 0;
  for (size_t i = 0; i < nev; i++) {
    float t0 = 0, t1 = 0;
    CHECK(cudaEventElapsedTime(&t0, before[0], before[i]));
    CHECK(cudaEventElapsedTime(&t1, before[0], after[i]));
    if (i == 0 || t0 < first) first = t0;
    if (i == 0 || t1 > last) last = t1;
    busy += t1 - t0;
  }
  float span = last - first;
  int bad = 0;
  for (size_t i = 0; i < nev; i++) {
    unsigned char b[2];
    const unsigned char *slot = slots + i * size;
    const unsigned char want = round_pattern((long)(i / (size_t)nstreams), (int)(i % (size_t)nstreams));
    CHECK(cudaMemcpy(&b[0], slot, 1, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&b[1], slot + size - 1, 1, cudaMemcpyDeviceToHost));
    bad += b[0] != want || b[1] != want;
  }
  for (size_t i = 0; i < nev; i++) {
    CHECK(cudaEventDestroy(before[i]));
    CHECK(cudaEventDestroy(after[i]));
  }
  free(before);
  free(after);
  for (int s = 0; s < nstreams; s++) CHECK(cudaStreamDestroy(streams[s]));
  CHECK(cudaFree(slots));
  printf("%ld streams x %ld rounds: device busy %.2f ms over a span of %.2f ms: overlap %.2f\n",
         nstreams, rounds, busy, span, span > 0 ? busy / span : 0.0);
  printf("RESULT status=%s mode=%s streams=%ld rounds=%ld busy_ms=%.3f span_ms=%.3f overlap=%.3f "
         "bad_slots=%d\n",
         bad ? "corrupt" : "ok", async ? "async" : "malloc", nstreams, rounds, busy, span, span > 0 ? busy / span : 0.0, bad);
  return bad ? EXIT_CORRUPTION : EXIT_WORKLOAD_OK;
}
