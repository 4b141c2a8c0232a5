/* multi_device: an ordinary multi-GPU program. Allocates on every device it sees, frees each
 * device's memory while another device is current (cudaFree takes any device's pointer), and,
 * with --threads, runs one thread per device that hands its allocations to the next device's
 * thread to free. Every allocation must be on the device that was current when it was made
 * (cudaPointerGetAttributes) and hold its pattern until it is freed.
 *
 *   multi_device [--count N] [--min SIZE] [--max SIZE] [--rounds R] [--seed S] [--threads]
 *
 * Needs two devices or more: with fewer it prints RESULT status=skip and exits 0.
 * RESULT fields: devices, allocs, cross_frees (frees made while another device was current),
 * thread_frees (frees by another device's thread), wrong_device, free_dev<d> (cudaMemGetInfo
 * of device d with every allocation live, bytes).
 */
#include <pthread.h>
#include <sched.h>

#include "common.h"

#define MAX_DEVICES 16
#define MAX_COUNT 4096

static const char *usage_text =
    "[--count N] [--min SIZE] [--max SIZE] [--rounds R] [--seed S] [--threads]";

static size_t opt_count = 24, opt_min = 4 * KiB, opt_max = 6 * MiB;
static long opt_rounds = 2;
static uint64_t opt_seed = 1;

static block_t blocks[MAX_DEVICES][MAX_COUNT];

static uint64_t tag_of(int dev, long round, size_t i) {
  return ((uint64_t)(unsigned)dev << 40) | ((uint64_t)round << 24) | (uint64_t)i;
}

/* The device an allocation lives on, according to the runtime. */
static int device_of(const void *ptr) {
  struct cudaPointerAttributes at;
  CHECK(cudaPointerGetAttributes(&at, ptr));
  return at.type == cudaMemoryTypeDevice ? at.device : -1;
}

static void check_device(const block_t *b, int dev, unsigned long *wrong) {
  int got = device_of(b->ptr);
  if (got != dev) {
    printf("WRONG DEVICE: %zu bytes at %p allocated on device %d, lives on device %d\n",
           b->size, b->ptr, dev, got);
    (*wrong)++;
  }
}

/* ---- --threads: one thread per device; each frees what the previous device's thread made -- */

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  block_t q[64];
  size_t head, tail;
  int closed;
} handoff_t;

typedef struct {
  int dev, ndev;
  handoff_t *in, *out; /* in: blocks made on device dev - 1, freed here */
  unsigned long allocs, frees, wrong;
  int failed;
} worker_t;

/* Returns 1 when b was queued, 0 when the queue is full. */
static int handoff_try_push(handoff_t *h, const block_t *b) {
  int ok;
  pthread_mutex_lock(&h->lock);
  ok = h->tail - h->head < sizeof h->q / sizeof h->q[0];
  if (ok) {
    h->q[h->tail++ % (sizeof h->q / sizeof h->q[0])] = *b;
    pthread_cond_broadcast(&h->cond);
  }
  pthread_mutex_unlock(&h->lock);
  return ok;
}

/* Returns 1 with a block; 0 when the queue is empty and either wait is 0 or the producer is
 * done. */
static int handoff_pop(handoff_t *h, block_t *b, int wait) {
  int got = 0;
  pthread_mutex_lock(&h->lock);
  while (wait && h->head == h->tail && !h->closed)
    pthread_cond_wait(&h->cond, &h->lock);
  if (h->head != h->tail) {
    *b = h->q[h->head++ % (sizeof h->q / sizeof h->q[0])];
    got = 1;
  }
  pthread_mutex_unlock(&h->lock);
  return got;
}

static void handoff_close(handoff_t *h) {
  pthread_mutex_lock(&h->lock);
  h->closed = 1;
  pthread_cond_broadcast(&h->cond);
  pthread_mutex_unlock(&h->lock);
}

/* Thread-safe checks (no shared staging buffer): sample the first and last 8 bytes. */
static int thread_fill(void *ptr, size_t size, uint64_t tag) {
  unsigned char buf[16];
  pattern_gen(buf, 8, tag, 0);
  pattern_gen(buf + 8, 8, tag, (size - 8) & ~(size_t)7);
  return cudaMemcpy(ptr, buf, 8, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy((char *)ptr + ((size - 8) & ~(size_t)7), buf + 8, 8,
                    cudaMemcpyHostToDevice) == cudaSuccess;
}

static int thread_check(const void *ptr, size_t size, uint64_t tag) {
  unsigned char buf[16], want[16];
  pattern_gen(want, 8, tag, 0);
  pattern_gen(want + 8, 8, tag, (size - 8) & ~(size_t)7);
  if (cudaMemcpy(buf, ptr, 8, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(buf + 8, (const char *)ptr + ((size - 8) & ~(size_t)7), 8,
                 cudaMemcpyDeviceToHost) != cudaSuccess)
    return 0;
  return memcmp(buf, want, 16) == 0;
}

/* Check and free one block handed over by the previous device's thread. */
static void worker_take(worker_t *w, const block_t *b) {
  if (!thread_check(b->ptr, b->size, b->tag)) w->failed = 2;
  if (cudaFree(b->ptr) != cudaSuccess && !w->failed) w->failed = 1;
  w->frees++;
}

static void *worker_main(void *arg) {
  worker_t *w = (worker_t *)arg;
  rng_t rng;
  size_t i, n = opt_count * (size_t)opt_rounds;
  block_t b;
  rng_seed(&rng, opt_seed * 1000 + (uint64_t)w->dev);
  if (cudaSetDevice(w->dev) != cudaSuccess) {
    w->failed = 1;
    handoff_close(w->out);
    return NULL;
  }
  for (i = 0; i < n && !w->failed; i++) {
    memset(&b, 0, sizeof b);
    b.size = (size_t)rng_range(&rng, opt_min, opt_max) & ~(size_t)7;
    if (b.size < 16) b.size = 16;
    b.tag = tag_of(w->dev, 100 + (long)(i / opt_count), i);
    if (cudaMalloc(&b.ptr, b.size) != cudaSuccess || !thread_fill(b.ptr, b.size, b.tag)) {
      w->failed = 1;
      break;
    }
    w->allocs++;
    if (device_of(b.ptr) != w->dev) w->wrong++;
    /* A full queue: free what this thread was handed meanwhile (every thread does, so a ring
     * of full queues always drains), else give the next thread a moment. */
    while (!handoff_try_push(w->out, &b)) {
      block_t in;
      int took = 0;
      while (handoff_pop(w->in, &in, 0)) {
        worker_take(w, &in);
        took = 1;
      }
      if (!took) sched_yield();
    }
  }
  handoff_close(w->out);
  /* Free the rest of what the previous device's thread made, while this device is current. */
  while (handoff_pop(w->in, &b, 1)) worker_take(w, &b);
  return NULL;
}

static void run_threads(int ndev, unsigned long *allocs, unsigned long *frees,
                        unsigned long *wrong) {
  pthread_t th[MAX_DEVICES];
  worker_t w[MAX_DEVICES];
  handoff_t h[MAX_DEVICES];
  int d;
  memset(w, 0, sizeof w);
  memset(h, 0, sizeof h);
  for (d = 0; d < ndev; d++) {
    pthread_mutex_init(&h[d].lock, NULL);
    pthread_cond_init(&h[d].cond, NULL);
  }
  for (d = 0; d < ndev; d++) {
    w[d].dev = d;
    w[d].ndev = ndev;
    w[d].out = &h[d];
    w[d].in = &h[(d + ndev - 1) % ndev];
    if (pthread_create(&th[d], NULL, worker_main, &w[d]) != 0) die_msg("pthread_create", "failed");
  }
  for (d = 0; d < ndev; d++) pthread_join(th[d], NULL);
  for (d = 0; d < ndev; d++) {
    if (w[d].failed == 2) die_corrupt("thread handoff");
    if (w[d].failed) die_msg("device thread", "a CUDA call failed");
    *allocs += w[d].allocs;
    *frees += w[d].frees;
    *wrong += w[d].wrong;
  }
}

int main(int argc, char **argv) {
  int ndev = 0, d, use_threads = 0, i;
  long r;
  size_t k;
  unsigned long allocs = 0, cross = 0, thread_frees = 0, wrong = 0;
  size_t free_live[MAX_DEVICES];
  char extra[64 * MAX_DEVICES], *e = extra;
  rng_t rng;

  prog_init();
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) show_help(argv[0], usage_text);
    else if (!strcmp(a, "--threads")) use_threads = 1;
    else if (!v) bad_usage(argv[0], usage_text);
    else if (!strcmp(a, "--count")) { opt_count = (size_t)opt_long("count", v, 1, MAX_COUNT); i++; }
    else if (!strcmp(a, "--min")) { opt_min = opt_size("min", v); i++; }
    else if (!strcmp(a, "--max")) { opt_max = opt_size("max", v); i++; }
    else if (!strcmp(a, "--rounds")) { opt_rounds = opt_long("rounds", v, 1, 1000); i++; }
    else if (!strcmp(a, "--seed")) { opt_seed = (uint64_t)opt_long("seed", v, 0, 1L << 30); i++; }
    else bad_usage(argv[0], usage_text);
  }
  if (opt_min < 8 || opt_max < opt_min) die_msg("options", "need 8 <= --min <= --max");

  CHECK(cudaGetDeviceCount(&ndev));
  if (ndev > MAX_DEVICES) ndev = MAX_DEVICES;
  if (ndev < 2) {
    printf("multi_device: needs 2 devices or more, found %d\n", ndev);
    printf("RESULT status=skip devices=%d\n", ndev);
    return EXIT_WORKLOAD_OK;
  }
  printf("multi_device: %d devices, %zu allocations per device and round, %ld rounds%s\n", ndev,
         opt_count, opt_rounds, use_threads ? ", then one thread per device" : "");
  rng_seed(&rng, opt_seed);

  for (r = 0; r < opt_rounds; r++) {
    /* Every device: fill its table (a slot freed last round is reused). */
    for (d = 0; d < ndev; d++) {
      CHECK(cudaSetDevice(d));
      for (k = 0; k < opt_count; k++) {
        block_t *b = &blocks[d][k];
        char what[64];
        if (b->live) continue;
        snprintf(what, sizeof what, "device %d block %zu", d, k);
        block_alloc(b, (size_t)rng_range(&rng, opt_min, opt_max), tag_of(d, r, k), what);
        check_device(b, d, &wrong);
        allocs++;
      }
    }
    /* Free about half of each device's blocks while the NEXT device is current. */
    for (d = 0; d < ndev; d++) {
      int other = (d + 1) % ndev;
      for (k = 0; k < opt_count; k++) {
        block_t *b = &blocks[d][k];
        char what[64];
        if (!b->live || (rng_next(&rng) & 1)) continue;
        snprintf(what, sizeof what, "device %d block %zu", d, k);
        CHECK(cudaSetDevice(d));
        block_verify(b, what); /* copies run on the owning device */
        CHECK(cudaSetDevice(other));
        CHECK(cudaFree(b->ptr));
        b->live = 0;
        b->ptr = NULL;
        cross++;
      }
    }
  }

  /* Everything left, verified on its device; what each device reports as free meanwhile. */
  for (d = 0; d < ndev; d++) {
    size_t total = 0;
    CHECK(cudaSetDevice(d));
    for (k = 0; k < opt_count; k++) {
      char what[64];
      snprintf(what, sizeof what, "device %d block %zu", d, k);
      block_verify(&blocks[d][k], what);
    }
    CHECK(cudaMemGetInfo(&free_live[d], &total));
    e += snprintf(e, sizeof extra - (size_t)(e - extra), " free_dev%d=%zu", d, free_live[d]);
  }

  if (use_threads) run_threads(ndev, &allocs, &thread_frees, &wrong);

  /* Free the rest from device 0, whichever device they live on. */
  CHECK(cudaSetDevice(0));
  for (d = 0; d < ndev; d++)
    for (k = 0; k < opt_count; k++) {
      block_t *b = &blocks[d][k];
      if (!b->live) continue;
      CHECK(cudaFree(b->ptr));
      b->live = 0;
      if (d != 0) cross++;
    }
  CHECK(cudaDeviceSynchronize());

  if (wrong) {
    printf("RESULT status=corrupt what=wrong_device devices=%d allocs=%lu wrong_device=%lu\n",
           ndev, allocs, wrong);
    return EXIT_CORRUPTION;
  }
  printf("RESULT status=ok devices=%d allocs=%lu cross_frees=%lu thread_frees=%lu "
         "wrong_device=0%s\n",
         ndev, allocs, cross, thread_frees, extra);
  return EXIT_WORKLOAD_OK;
}
