/* churn: many threads doing random cudaMalloc/cudaFree with data checks.
 *
 * Each of --threads threads runs --iters iterations. An iteration either allocates (when the
 * thread holds fewer than --live allocations, with probability 55%, or always when it holds
 * none) or frees a random one of its live allocations. Sizes: with probability --large-pct %
 * uniform in (--small-max, --max-size], otherwise log-uniform in [1, --small-max].
 *
 * Every allocation is filled with a byte derived from (thread, iteration, address) plus a
 * 40-byte stamp {magic, thread, iteration, address, size} at its start and, when it is at
 * least 80 bytes long, at its end; it is copied back and checked in full before it is freed,
 * and all live ones again at the end. With --streams every thread uses its own non-blocking
 * stream: cudaMemsetAsync + cudaMemcpyAsync to write, cudaMemcpyAsync + cudaStreamSynchronize
 * to read back. Without it: cudaMemset/cudaMemcpy on the legacy default stream.
 *
 * Exit: 0 ok; 3 corruption; 1 any other error; 2 an allocation failed with
 * cudaErrorMemoryAllocation (unless --tolerate-oom: then the thread frees one of its blocks and
 * goes on, and the failures are counted in ooms=).
 * RESULT: status threads iters allocs frees bytes ooms verified seconds ops_per_s streams.
 */
#include "common.h"

#include <getopt.h>
#include <pthread.h>
#include <time.h>

static const char usage_text[] =
    "[--threads N=1] [--iters N=2000] [--live K=32] [--max-size SIZE=64M]\n"
    "       [--small-max SIZE=1M] [--large-pct P=10] [--seed N=1] [--streams] [--tolerate-oom]";

#define STAMP_MAGIC 0x7E55E4A5C4042ULL

typedef struct {
  uint64_t magic, thread, iter, addr, size;
} stamp_t;

typedef struct {
  void *ptr; /* NULL: slot unused */
  size_t size;
  unsigned char byte;
  stamp_t stamp; /* source of the async stamp copies: stays put while the slot is used */
} slot_t;

typedef struct {
  size_t threads, iters, live, max_size, small_max;
  unsigned large_pct;
  unsigned long long seed;
  int streams, tolerate_oom;
} config_t;

enum { W_OK = 0, W_OOM, W_ERROR, W_CORRUPT };

typedef struct {
  const config_t *cfg;
  size_t id;
  pthread_t thread;
  cudaStream_t stream;
  slot_t *slots;
  unsigned char *host;
  rng_t rng;
  /* results */
  int status;
  char msg[256];
  uint64_t allocs, frees, bytes, ooms, verified;
} worker_t;

static int failed(worker_t *w, const char *call, cudaError_t err) {
  w->status = W_ERROR;
  snprintf(w->msg, sizeof w->msg, "thread %zu: %s failed: %s", w->id, call,
           cudaGetErrorName(err));
  return -1;
}

#define TRY(w, call)                                           \
  do {                                                         \
    cudaError_t try_err_ = (call);                             \
    if (try_err_ != cudaSuccess) return failed((w), #call, try_err_); \
  } while (0)

static size_t stamp_len(size_t size) {
  return size < sizeof(stamp_t) ? size : sizeof(stamp_t);
}

static int write_slot(worker_t *w, slot_t *s, uint64_t iter) {
  size_t n = stamp_len(s->size);
  char *p = (char *)s->ptr;
  s->byte = (unsigned char)splitmix64(((uint64_t)w->id << 48) ^ (iter << 8) ^ (uintptr_t)p);
  s->stamp.magic = STAMP_MAGIC;
  s->stamp.thread = w->id;
  s->stamp.iter = iter;
  s->stamp.addr = (uintptr_t)p;
  s->stamp.size = s->size;
  if (w->cfg->streams) {
    TRY(w, cudaMemsetAsync(p, s->byte, s->size, w->stream));
    TRY(w, cudaMemcpyAsync(p, &s->stamp, n, cudaMemcpyHostToDevice, w->stream));
    if (s->size >= 2 * sizeof(stamp_t))
      TRY(w, cudaMemcpyAsync(p + s->size - n, &s->stamp, n, cudaMemcpyHostToDevice, w->stream));
  } else {
    TRY(w, cudaMemset(p, s->byte, s->size));
    TRY(w, cudaMemcpy(p, &s->stamp, n, cudaMemcpyHostToDevice));
    if (s->size >= 2 * sizeof(stamp_t))
      TRY(w, cudaMemcpy(p + s->size - n, &s->stamp, n, cudaMemcpyHostToDevice));
  }
  return 0;
}

static int check_slot(worker_t *w, const slot_t *s) {
  size_t n = stamp_len(s->size), i, lo = n, hi = s->size;
  const unsigned char *h = w->host;
  if (w->cfg->streams) {
    TRY(w, cudaMemcpyAsync(w->host, s->ptr, s->size, cudaMemcpyDeviceToHost, w->stream));
    TRY(w, cudaStreamSynchronize(w->stream));
  } else {
    TRY(w, cudaMemcpy(w->host, s->ptr, s->size, cudaMemcpyDeviceToHost));
  }
  w->verified++;
  if (memcmp(h, &s->stamp, n) != 0) {
    snprintf(w->msg, sizeof w->msg, "thread %zu: allocation %p (%zu bytes, iteration %llu): "
             "head stamp overwritten", w->id, s->ptr, s->size, (unsigned long long)s->stamp.iter);
    w->status = W_CORRUPT;
    return -1;
  }
  if (s->size >= 2 * sizeof(stamp_t)) {
    hi = s->size - n;
    if (memcmp(h + hi, &s->stamp, n) != 0) {
      snprintf(w->msg, sizeof w->msg, "thread %zu: allocation %p (%zu bytes, iteration %llu): "
               "tail stamp overwritten", w->id, s->ptr, s->size,
               (unsigned long long)s->stamp.iter);
      w->status = W_CORRUPT;
      return -1;
    }
  }
  for (i = lo; i < hi; i++) {
    if (h[i] != s->byte) {
      snprintf(w->msg, sizeof w->msg, "thread %zu: allocation %p (%zu bytes, iteration %llu): "
               "byte %zu is 0x%02x, expected 0x%02x", w->id, s->ptr, s->size,
               (unsigned long long)s->stamp.iter, i, h[i], s->byte);
      w->status = W_CORRUPT;
      return -1;
    }
  }
  return 0;
}

static int free_slot(worker_t *w, slot_t *s) {
  if (check_slot(w, s)) return -1;
  TRY(w, cudaFree(s->ptr));
  s->ptr = NULL;
  w->frees++;
  return 0;
}

static size_t pick_size(worker_t *w) {
  const config_t *c = w->cfg;
  if (c->max_size > c->small_max && rng_range(&w->rng, 0, 99) < c->large_pct)
    return (size_t)rng_range(&w->rng, c->small_max + 1, c->max_size);
  {
    unsigned bits = 0, b;
    size_t lo;
    while (bits < 63 && ((size_t)2 << bits) <= c->small_max) bits++;
    b = (unsigned)rng_range(&w->rng, 0, bits);
    lo = (size_t)1 << b;
    return (size_t)rng_range(&w->rng, lo, (2 * lo - 1) < c->small_max ? 2 * lo - 1 : c->small_max);
  }
}

/* A random used slot (there must be one). */
static slot_t *random_used(worker_t *w, size_t nlive) {
  size_t k = (size_t)rng_range(&w->rng, 0, nlive - 1), i;
  for (i = 0; i < w->cfg->live; i++)
    if (w->slots[i].ptr && k-- == 0) return &w->slots[i];
  return NULL;
}

static int run_worker(worker_t *w) {
  const config_t *c = w->cfg;
  size_t nlive = 0, i;
  uint64_t iter;

  if (c->streams) TRY(w, cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  for (iter = 0; iter < c->iters; iter++) {
    if (nlive == 0 || (nlive < c->live && rng_range(&w->rng, 0, 99) < 55)) {
      slot_t *s = NULL;
      cudaError_t err;
      for (i = 0; i < c->live; i++)
        if (!w->slots[i].ptr) { s = &w->slots[i]; break; }
      s->size = pick_size(w);
      err = cudaMalloc(&s->ptr, s->size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        s->ptr = NULL;
        w->ooms++;
        if (!c->tolerate_oom) {
          w->status = W_OOM;
          snprintf(w->msg, sizeof w->msg, "thread %zu: cudaMalloc(%zu) failed: %s", w->id,
                   s->size, cudaGetErrorName(err));
          return -1;
        }
        if (nlive) {
          if (free_slot(w, random_used(w, nlive))) return -1;
          nlive--;
        }
        continue;
      }
      if (err != cudaSuccess) return failed(w, "cudaMalloc", err);
      w->allocs++;
      w->bytes += s->size;
      nlive++;
      if (write_slot(w, s, iter)) return -1;
    } else {
      if (free_slot(w, random_used(w, nlive))) return -1;
      nlive--;
    }
  }
  for (i = 0; i < c->live; i++)
    if (w->slots[i].ptr && check_slot(w, &w->slots[i])) return -1;
  for (i = 0; i < c->live; i++) {
    if (!w->slots[i].ptr) continue;
    TRY(w, cudaFree(w->slots[i].ptr));
    w->slots[i].ptr = NULL;
    w->frees++;
  }
  if (c->streams) TRY(w, cudaStreamDestroy(w->stream));
  return 0;
}

static void *worker_main(void *arg) {
  worker_t *w = (worker_t *)arg;
  (void)run_worker(w);
  return NULL;
}

int main(int argc, char **argv) {
  config_t cfg;
  worker_t *ws;
  size_t i;
  struct timespec t0, t1;
  double secs;
  uint64_t allocs = 0, frees = 0, bytes = 0, ooms = 0, verified = 0;
  int worst = W_OK, rc, c;
  static const char *const status_name[] = {"ok", "oom", "error", "corrupt"};
  static const int status_exit[] = {EXIT_WORKLOAD_OK, EXIT_FINAL_OOM, EXIT_OTHER_ERROR,
                                    EXIT_CORRUPTION};
  char s1[32], s2[32];
  static const struct option opts[] = {
      {"threads", required_argument, NULL, 't'},   {"iters", required_argument, NULL, 'i'},
      {"live", required_argument, NULL, 'k'},      {"max-size", required_argument, NULL, 'm'},
      {"small-max", required_argument, NULL, 'S'}, {"large-pct", required_argument, NULL, 'p'},
      {"seed", required_argument, NULL, 's'},      {"streams", no_argument, NULL, 'x'},
      {"tolerate-oom", no_argument, NULL, 'o'},    {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};

  prog_init();
  memset(&cfg, 0, sizeof cfg);
  cfg.threads = 1;
  cfg.iters = 2000;
  cfg.live = 32;
  cfg.max_size = 64 * MiB;
  cfg.small_max = 1 * MiB;
  cfg.large_pct = 10;
  cfg.seed = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 't': cfg.threads = (size_t)opt_long("threads", optarg, 1, 1024); break;
    case 'i': cfg.iters = (size_t)opt_long("iters", optarg, 0, 1000000000L); break;
    case 'k': cfg.live = (size_t)opt_long("live", optarg, 1, 1000000); break;
    case 'm': cfg.max_size = opt_size("max-size", optarg); break;
    case 'S': cfg.small_max = opt_size("small-max", optarg); break;
    case 'p': cfg.large_pct = (unsigned)opt_long("large-pct", optarg, 0, 100); break;
    case 's': cfg.seed = (unsigned long long)opt_long("seed", optarg, 0, 0x7fffffffL); break;
    case 'x': cfg.streams = 1; break;
    case 'o': cfg.tolerate_oom = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || cfg.max_size == 0 || cfg.small_max == 0) bad_usage(argv[0], usage_text);
  if (cfg.small_max > cfg.max_size) cfg.small_max = cfg.max_size;

  printf("churn: %zu threads x %zu iterations, up to %zu live each, sizes up to %s "
         "(%u%% above %s), %s\n", cfg.threads, cfg.iters, cfg.live,
         fmt_size(s1, sizeof s1, cfg.max_size), cfg.large_pct,
         fmt_size(s2, sizeof s2, cfg.small_max),
         cfg.streams ? "one non-blocking stream per thread" : "legacy default stream");
  print_meminfo("at start", NULL, NULL); /* also initialises CUDA before the threads start */

  ws = (worker_t *)calloc(cfg.threads, sizeof *ws);
  if (!ws) die_msg("host calloc", "out of memory");
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (i = 0; i < cfg.threads; i++) {
    worker_t *w = &ws[i];
    w->cfg = &cfg;
    w->id = i;
    w->slots = (slot_t *)calloc(cfg.live, sizeof *w->slots);
    w->host = (unsigned char *)malloc(cfg.max_size);
    if (!w->slots || !w->host) die_msg("host malloc", "out of memory");
    rng_seed(&w->rng, cfg.seed * 1000003ULL + i);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc) die_msg("pthread_create", strerror(rc));
  }
  for (i = 0; i < cfg.threads; i++) {
    worker_t *w = &ws[i];
    pthread_join(w->thread, NULL);
    allocs += w->allocs;
    frees += w->frees;
    bytes += w->bytes;
    ooms += w->ooms;
    verified += w->verified;
    if (w->status != W_OK) printf("%s\n", w->msg);
    /* precedence: corruption, then other errors, then allocation failures */
    if ((w->status == W_CORRUPT) || (w->status == W_ERROR && worst != W_CORRUPT) ||
        (w->status == W_OOM && worst == W_OK))
      worst = w->status;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  if (worst == W_OK) print_meminfo("at end", NULL, NULL);

  printf("%llu allocations, %llu frees, %s allocated in total, %llu allocation failures, "
         "%llu verifications, %.3f s, %.0f ops/s\n", (unsigned long long)allocs,
         (unsigned long long)frees, fmt_size(s1, sizeof s1, (size_t)bytes),
         (unsigned long long)ooms, (unsigned long long)verified, secs,
         secs > 0 ? (double)(allocs + frees) / secs : 0.0);
  printf("RESULT status=%s threads=%zu iters=%zu allocs=%llu frees=%llu bytes=%llu ooms=%llu "
         "verified=%llu seconds=%.6f ops_per_s=%.0f streams=%d\n", status_name[worst],
         cfg.threads, cfg.iters, (unsigned long long)allocs, (unsigned long long)frees,
         (unsigned long long)bytes, (unsigned long long)ooms, (unsigned long long)verified, secs,
         secs > 0 ? (double)(allocs + frees) / secs : 0.0, cfg.streams);
  for (i = 0; i < cfg.threads; i++) {
    free(ws[i].slots);
    free(ws[i].host);
  }
  free(ws);
  return status_exit[worst];
}
