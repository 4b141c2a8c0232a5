/* ipc_events: processes that share device memory and order their work with interprocess
 * events, in the style of NVIDIA's simpleIPC sample (which does the same with kernels; here
 * copies and memsets do the work, so every check holds on the simulated device too).
 *
 *   ipc_events [--procs N] [--size SIZE]
 *
 * The parent allocates one buffer of SIZE per child with cudaMalloc, exports each with
 * cudaIpcGetMemHandle and one event made with cudaEventInterprocess | cudaEventDisableTiming with
 * cudaIpcGetEventHandle, and holds its stream on a host function until every child has queued
 * its wait: only then does it fill each buffer with its pattern and record the event. Each child
 * opens its buffer and the event, sees the event pending (cudaEventQuery: cudaErrorNotReady),
 * makes its stream wait on it (cudaStreamWaitEvent), copies its buffer back and checks the
 * parent's pattern, writes a pattern of its own with cudaMemsetAsync, records an interprocess
 * event of its own and exports it back. The parent opens each child's event, makes its stream
 * wait on it and checks that each buffer holds its child's pattern.
 * RESULT fields: procs, not_ready (children that saw the parent's event pending), ordered
 * (children whose copy saw the parent's fill), back (buffers the parent saw with their child's
 * bytes), own_open (opening one's own event handle), plain_export (exporting an event made
 * without cudaEventInterprocess). Exit 0 when every child was ordered and every buffer came
 * back, 3 otherwise.
 */
#include <getopt.h>

#include "common.h"
#include "share.h"

#define MAX_PROCS 8

static const char *usage_text = "[--procs N] [--size SIZE]";

static unsigned char parent_byte(int k) { return (unsigned char)(0xa0 + k); }
static unsigned char child_byte(int k) { return (unsigned char)(0x50 + k); }

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

/* the parent's stream waits here until the children have queued their waits */
static void CUDART_CB hold(void *arg) {
  char b;
  if (read(*(int *)arg, &b, 1) != 1) fprintf(stderr, "ipc_events: gate closed early\n");
}

static int child_main(void) {
  char line[512], mtext[200], etext[200];
  size_t size = 0;
  int k = -1;
  if (!chan_get(0, line, sizeof line) ||
      sscanf(line, "buf %199s ev %199s size %zu id %d", mtext, etext, &size, &k) != 4)
    return 1;
  cudaIpcMemHandle_t mh;
  cudaIpcEventHandle_t eh;
  if (hex_get(mtext, &mh, sizeof mh) || hex_get(etext, &eh, sizeof eh)) return 1;
  void *buf = NULL;
  cudaEvent_t ev, mine;
  cudaStream_t s;
  CHECK(cudaIpcOpenMemHandle(&buf, mh, cudaIpcMemLazyEnablePeerAccess));
  CHECK(cudaIpcOpenEventHandle(&ev, eh));
  int not_ready = cudaEventQuery(ev) == cudaErrorNotReady;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char *host;
  CHECK(cudaMallocHost((void **)&host, size));
  memset(host, 0, size);
  CHECK(cudaStreamWaitEvent(s, ev, 0));
  CHECK(cudaMemcpyAsync(host, buf, size, cudaMemcpyDeviceToHost, s));
  chan_put(0, "queued\n");
  CHECK(cudaStreamSynchronize(s));
  int ordered = all_bytes(host, size, parent_byte(k));
  CHECK(cudaMemsetAsync(buf, child_byte(k), size, s));
  CHECK(cudaEventCreateWithFlags(&mine, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventRecord(mine, s));
  cudaIpcEventHandle_t back;
  CHECK(cudaIpcGetEventHandle(&back, mine));
  char btext[2 * sizeof back + 1], reply[300];
  hex_put(&back, sizeof back, btext);
  snprintf(reply, sizeof reply, "done %s ordered %d not_ready %d\n", btext, ordered, not_ready);
  chan_put(0, reply);
  chan_get(0, line, sizeof line); /* "bye": the parent has waited on our event */
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventDestroy(mine));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaIpcCloseMemHandle(buf));
  CHECK(cudaFreeHost(host));
  CHECK(cudaStreamDestroy(s));
  return 0;
}

int main(int argc, char **argv) {
  int procs = 2, c;
  size_t size = 2 * MiB;
  static const struct option opts[] = {{"procs", required_argument, NULL, 'p'},
                                       {"size", required_argument, NULL, 's'},
                                       {"child", no_argument, NULL, 'c'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'p': procs = (int)opt_long("procs", optarg, 1, MAX_PROCS); break;
    case 's': size = opt_size("size", optarg); break;
    case 'c': return child_main();
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);

  void *bufs[MAX_PROCS];
  cudaIpcMemHandle_t mh[MAX_PROCS];
  for (int k = 0; k < procs; k++) {
    CHECK(cudaMalloc(&bufs[k], size));
    CHECK(cudaMemset(bufs[k], 0, size));
    CHECK(cudaIpcGetMemHandle(&mh[k], bufs[k]));
  }
  cudaEvent_t ev, plain;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
  cudaIpcEventHandle_t eh, unused;
  cudaError_t plain_export = cudaIpcGetEventHandle(&unused, plain);
  (void)cudaGetLastError();
  CHECK(cudaIpcGetEventHandle(&eh, ev));
  cudaEvent_t self_open;
  cudaError_t own_open = cudaIpcOpenEventHandle(&self_open, eh);
  (void)cudaGetLastError();

  /* the stream is held until every child has queued its wait on the event */
  int gate[2];
  if (pipe(gate) != 0) die_msg("pipe", strerror(errno));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaLaunchHostFunc(s, hold, &gate[0]));
  for (int k = 0; k < procs; k++) CHECK(cudaMemsetAsync(bufs[k], parent_byte(k), size, s));
  CHECK(cudaEventRecord(ev, s));

  int chans[MAX_PROCS];
  pid_t pids[MAX_PROCS];
  char etext[2 * sizeof eh + 1], line[512];
  hex_put(&eh, sizeof eh, etext);
  for (int k = 0; k < procs; k++) {
    char *cargv[] = {argv[0], (char *)"--child", NULL};
    pids[k] = chan_spawn(cargv, &chans[k]);
    char mtext[2 * sizeof mh[k] + 1], msg[600];
    hex_put(&mh[k], sizeof mh[k], mtext);
    snprintf(msg, sizeof msg, "buf %s ev %s size %zu id %d\n", mtext, etext, size, k);
    chan_put(chans[k], msg);
  }
  for (int k = 0; k < procs; k++)
    if (!chan_get(chans[k], line, sizeof line) || strcmp(line, "queued") != 0)
      die_msg("child", "did not queue its wait");
  if (write(gate[1], "x", 1) != 1) die_msg("gate", strerror(errno));

  int not_ready = 0, ordered = 0, back = 0;
  unsigned char *host;
  CHECK(cudaMallocHost((void **)&host, size));
  for (int k = 0; k < procs; k++) {
    char btext[200];
    int o = 0, nr = 0;
    if (!chan_get(chans[k], line, sizeof line) ||
        sscanf(line, "done %199s ordered %d not_ready %d", btext, &o, &nr) != 3)
      die_msg("child", "no report");
    ordered += o;
    not_ready += nr;
    cudaIpcEventHandle_t ch;
    cudaEvent_t cev;
    if (hex_get(btext, &ch, sizeof ch)) die_msg("child", "bad event handle");
    CHECK(cudaIpcOpenEventHandle(&cev, ch));
    memset(host, 0, size);
    CHECK(cudaStreamWaitEvent(s, cev, 0));
    CHECK(cudaMemcpyAsync(host, bufs[k], size, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    back += all_bytes(host, size, child_byte(k));
    CHECK(cudaEventDestroy(cev));
    chan_put(chans[k], "bye\n");
  }
  int exits_bad = 0;
  for (int k = 0; k < procs; k++) {
    exits_bad += chan_wait(pids[k]) != 0;
    close(chans[k]);
  }
  for (int k = 0; k < procs; k++) CHECK(cudaFree(bufs[k]));
  CHECK(cudaFreeHost(host));
  CHECK(cudaEventDestroy(ev));
  CHECK(cudaEventDestroy(plain));
  CHECK(cudaStreamDestroy(s));
  close(gate[0]);
  close(gate[1]);
  int ok = ordered == procs && back == procs && exits_bad == 0;
  printf("RESULT status=%s procs=%d not_ready=%d ordered=%d back=%d children_failed=%d "
         "own_open=%s plain_export=%s\n",
         ok ? "ok" : "corrupt", procs, not_ready, ordered, back, exits_bad,
         cudaGetErrorName(own_open), cudaGetErrorName(plain_export));
  return ok ? EXIT_WORKLOAD_OK : EXIT_CORRUPTION;
}
