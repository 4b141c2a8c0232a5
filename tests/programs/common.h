/* Shared helpers for tessera's sample CUDA programs.
 *
 * The programs are ordinary, unmodified CUDA runtime-API programs: they are built with the C
 * compiler against the toolkit headers and linked against the real libcudart.so, and the same
 * source also builds with `nvcc -x cu` (see Makefile.nvcc), so everything here is valid C11 and
 * valid C++.
 *
 * Conventions shared by every program:
 *   exit 0  the workload succeeded
 *   exit 1  any other error (the failing call and its cudaGetErrorName are printed)
 *   exit 2  the workload's final request failed with cudaErrorMemoryAllocation
 *   exit 3  data corruption detected (a live allocation did not hold its pattern)
 * The last line on stdout is `RESULT status=ok|oom|corrupt|error key=value ...`.
 */
#ifndef TESSERA_TEST_PROGRAMS_COMMON_H
#define TESSERA_TEST_PROGRAMS_COMMON_H

#include <cuda_runtime_api.h>

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  EXIT_WORKLOAD_OK = 0,
  EXIT_OTHER_ERROR = 1,
  EXIT_FINAL_OOM = 2,
  EXIT_CORRUPTION = 3,
};

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* Line-buffer stdout so output interleaves predictably with stderr, child processes and
 * crashes. Call first thing in main(). */
static inline void prog_init(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
}

/* ---- failures ---------------------------------------------------------------------------- */

/* Print the failing call (the text up to its '(' in RESULT, all of it in the human line) and
 * exit 1. */
__attribute__((noreturn)) static inline void die_cuda(const char *call, cudaError_t err,
                                                      const char *file, int line) {
  size_t n = strcspn(call, "( ");
  printf("error: %s failed: %s (%s) at %s:%d\n", call, cudaGetErrorName(err),
         cudaGetErrorString(err), file, line);
  printf("RESULT status=error call=%.*s error=%s\n", (int)n, call, cudaGetErrorName(err));
  fflush(stdout);
  exit(EXIT_OTHER_ERROR);
}

#define CHECK(call)                                            \
  do {                                                         \
    cudaError_t check_err_ = (call);                           \
    if (check_err_ != cudaSuccess)                             \
      die_cuda(#call, check_err_, __FILE__, __LINE__);         \
  } while (0)

__attribute__((noreturn)) static inline void die_msg(const char *what, const char *detail) {
  printf("error: %s: %s\n", what, detail);
  printf("RESULT status=error\n");
  fflush(stdout);
  exit(EXIT_OTHER_ERROR);
}

__attribute__((noreturn)) static inline void die_corrupt(const char *what) {
  char tag[64];
  size_t i;
  for (i = 0; what[i] && i + 1 < sizeof tag; i++) tag[i] = what[i] == ' ' ? '_' : what[i];
  tag[i] = 0;
  printf("RESULT status=corrupt what=%s\n", tag);
  fflush(stdout);
  exit(EXIT_CORRUPTION);
}

static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die_msg("host malloc", strerror(errno));
  return p;
}

/* ---- options ----------------------------------------------------------------------------- */

/* Parse "4096", "16K", "16M", "1G", "2T", optionally followed by "B" or "iB" (always binary
 * units: 16M == 16MB == 16MiB == 16777216). Returns 0 and sets *out, or -1. */
static inline int parse_size(const char *s, size_t *out) {
  char *end = NULL;
  unsigned long long v;
  unsigned shift = 0;
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  if (shift && v > (~0ULL >> shift)) return -1;
  v <<= shift;
  if (v > (unsigned long long)SIZE_MAX) return -1;
  *out = (size_t)v;
  return 0;
}

static inline size_t opt_size(const char *opt, const char *arg) {
  size_t v = 0;
  if (parse_size(arg, &v) != 0) {
    printf("error: --%s: bad size '%s' (use e.g. 4096, 512K, 16M, 1G)\n", opt, arg);
    printf("RESULT status=error\n");
    exit(EXIT_OTHER_ERROR);
  }
  return v;
}

static inline long opt_long(const char *opt, const char *arg, long lo, long hi) {
  char *end = NULL;
  long v;
  errno = 0;
  v = strtol(arg, &end, 0);
  if (errno || end == arg || *end || v < lo || v > hi) {
    printf("error: --%s: expected an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, arg);
    printf("RESULT status=error\n");
    exit(EXIT_OTHER_ERROR);
  }
  return v;
}

/* Bad command line: print the usage and exit 1. --help: print it and exit 0. */
__attribute__((noreturn)) static inline void bad_usage(const char *prog, const char *usage) {
  printf("usage: %s %s\n", prog, usage);
  printf("RESULT status=error\n");
  exit(EXIT_OTHER_ERROR);
}

__attribute__((noreturn)) static inline void show_help(const char *prog, const char *usage) {
  printf("usage: %s %s\n", prog, usage);
  exit(EXIT_WORKLOAD_OK);
}

/* Human-readable size into a caller buffer ("1.50 GiB"). */
static inline const char *fmt_size(char *buf, size_t cap, size_t n) {
  if (n >= GiB)
    snprintf(buf, cap, "%.2f GiB", (double)n / (double)GiB);
  else if (n >= MiB)
    snprintf(buf, cap, "%.2f MiB", (double)n / (double)MiB);
  else if (n >= KiB)
    snprintf(buf, cap, "%.2f KiB", (double)n / (double)KiB);
  else
    snprintf(buf, cap, "%zu B", n);
  return buf;
}

/* ---- deterministic pseudo-random numbers ------------------------------------------------- */

static inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/* xorshift64* generator; the state must not be 0 (rng_seed takes care of that). */
typedef struct { uint64_t s; } rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed) {
  r->s = splitmix64(seed);
  if (!r->s) r->s = 0x2545F4914F6CDD1DULL;
}

static inline uint64_t rng_next(rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [lo, hi] (inclusive). */
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi) {
  if (hi <= lo) return lo;
  return lo + rng_next(r) % (hi - lo + 1);
}

/* ---- data patterns ----------------------------------------------------------------------- */

/* The pattern of an allocation is a sequence of 64-bit words that depends on the allocation's
 * tag AND on the position, so a wrong pointer, two aliased allocations, or a shifted copy all
 * show up as a mismatch: word i of tag t is splitmix64(t) + i * 0x9E3779B97F4A7C15. */
static inline void pattern_gen(unsigned char *buf, size_t nbytes, uint64_t tag, size_t offset) {
  uint64_t base = splitmix64(tag);
  uint64_t idx = offset / 8;
  size_t i = 0;
  for (; i + 8 <= nbytes; i += 8, idx++) {
    uint64_t w = base + idx * 0x9E3779B97F4A7C15ULL;
    memcpy(buf + i, &w, 8);
  }
  if (i < nbytes) {
    uint64_t w = base + idx * 0x9E3779B97F4A7C15ULL;
    memcpy(buf + i, &w, nbytes - i);
  }
}

/* Returns (size_t)-1 when buf holds the pattern, else the offset (within buf) of the first
 * wrong byte. `offset` must be a multiple of 8. */
static inline size_t pattern_check(const unsigned char *buf, size_t nbytes, uint64_t tag,
                                   size_t offset) {
  uint64_t base = splitmix64(tag);
  uint64_t idx = offset / 8;
  size_t i = 0;
  for (; i + 8 <= nbytes; i += 8, idx++) {
    uint64_t w = base + idx * 0x9E3779B97F4A7C15ULL, got;
    memcpy(&got, buf + i, 8);
    if (got != w) break;
  }
  for (; i < nbytes; i++) {
    uint64_t w = base + (offset / 8 + i / 8) * 0x9E3779B97F4A7C15ULL;
    unsigned char want[8];
    memcpy(want, &w, 8);
    if (buf[i] != want[i % 8]) return i;
  }
  return (size_t)-1;
}

/* Host staging buffer for the synchronous helpers below (single-threaded programs only). */
#define STAGING_BYTES (8 * MiB)
static inline unsigned char *staging(void) {
  static unsigned char *buf;
  if (!buf) buf = (unsigned char *)xmalloc(STAGING_BYTES);
  return buf;
}

/* Write the pattern of `tag` over the whole allocation with cudaMemcpy (host to device). */
static inline void fill_pattern(void *dptr, size_t size, uint64_t tag) {
  unsigned char *buf = staging();
  size_t off;
  for (off = 0; off < size; off += STAGING_BYTES) {
    size_t n = size - off < STAGING_BYTES ? size - off : STAGING_BYTES;
    pattern_gen(buf, n, tag, off);
    CHECK(cudaMemcpy((char *)dptr + off, buf, n, cudaMemcpyHostToDevice));
  }
}

/* Copy the whole allocation back and compare; prints the first mismatch. Returns 0 when the
 * allocation holds its pattern, 1 when it does not. */
static inline int verify_pattern(const void *dptr, size_t size, uint64_t tag, const char *what) {
  unsigned char *buf = staging();
  size_t off;
  for (off = 0; off < size; off += STAGING_BYTES) {
    size_t n = size - off < STAGING_BYTES ? size - off : STAGING_BYTES;
    size_t bad;
    CHECK(cudaMemcpy(buf, (const char *)dptr + off, n, cudaMemcpyDeviceToHost));
    bad = pattern_check(buf, n, tag, off);
    if (bad != (size_t)-1) {
      unsigned char want[8];
      size_t at = off + bad;
      pattern_gen(want, 8, tag, at & ~(size_t)7);
      printf("CORRUPTION: %s (%zu bytes at %p): byte %zu is 0x%02x, expected 0x%02x\n", what,
             size, dptr, at, buf[bad], want[at & 7]);
      return 1;
    }
  }
  return 0;
}

/* ---- tracked device allocations --------------------------------------------------------- */

typedef struct {
  void *ptr;
  size_t size;
  uint64_t tag;
  int live;
} block_t;

/* cudaMalloc + fill with the block's pattern. A failure here is a setup failure (exit 1). */
static inline void block_alloc(block_t *b, size_t size, uint64_t tag, const char *what) {
  cudaError_t err = cudaMalloc(&b->ptr, size);
  if (err != cudaSuccess) {
    char s[32];
    printf("error: setup allocation %s (%s) failed: cudaMalloc -> %s\n", what,
           fmt_size(s, sizeof s, size), cudaGetErrorName(err));
    printf("RESULT status=error call=cudaMalloc error=%s what=setup\n", cudaGetErrorName(err));
    exit(EXIT_OTHER_ERROR);
  }
  b->size = size;
  b->tag = tag;
  b->live = 1;
  fill_pattern(b->ptr, size, tag);
}

static inline void block_verify(const block_t *b, const char *what) {
  if (b->live && verify_pattern(b->ptr, b->size, b->tag, what)) die_corrupt(what);
}

/* Verify, then cudaFree. */
static inline void block_free(block_t *b, const char *what) {
  block_verify(b, what);
  CHECK(cudaFree(b->ptr));
  b->live = 0;
  b->ptr = NULL;
}

/* Verify every live block; returns how many were checked. */
static inline size_t blocks_verify_all(const block_t *bs, size_t n) {
  size_t i, checked = 0;
  char what[48];
  for (i = 0; i < n; i++) {
    if (!bs[i].live) continue;
    snprintf(what, sizeof what, "block %zu", i);
    block_verify(&bs[i], what);
    checked++;
  }
  return checked;
}

static inline void blocks_free_all(block_t *bs, size_t n) {
  size_t i;
  char what[48];
  for (i = 0; i < n; i++) {
    if (!bs[i].live) continue;
    snprintf(what, sizeof what, "block %zu", i);
    block_free(&bs[i], what);
  }
}

/* ---- device memory info ------------------------------------------------------------------ */

static inline void print_meminfo(const char *label, size_t *free_out, size_t *total_out) {
  size_t fr = 0, total = 0;
  char a[32], b[32];
  CHECK(cudaMemGetInfo(&fr, &total));
  printf("cudaMemGetInfo %-22s free=%zu (%s) total=%zu (%s)\n", label, fr,
         fmt_size(a, sizeof a, fr), total, fmt_size(b, sizeof b, total));
  if (free_out) *free_out = fr;
  if (total_out) *total_out = total;
}

/* ---- the common tail of the seed_* programs ---------------------------------------------- */

/* Make the workload's final request of `request` bytes while `blocks` (n of them, some freed)
 * are live, then verify and free everything. Prints cudaMemGetInfo around it and the RESULT
 * line (with `extra`, "key=value ..." or ""), and returns the exit code: 0 when the request was
 * served, 2 when it failed with cudaErrorMemoryAllocation. */
static inline int seed_final_request(block_t *blocks, size_t n, size_t request, size_t free0,
                                     const char *extra) {
  block_t fin;
  size_t i, live = 0, live_bytes = 0, free_before = 0, free_after = 0, free_end = 0, total = 0;
  char s[32];
  cudaError_t err;
  int ok;

  memset(&fin, 0, sizeof fin);
  for (i = 0; i < n; i++)
    if (blocks[i].live) { live++; live_bytes += blocks[i].size; }
  printf("live: %zu allocations, %s\n", live, fmt_size(s, sizeof s, live_bytes));
  print_meminfo("before request", &free_before, &total);

  err = cudaMalloc(&fin.ptr, request);
  if (err == cudaErrorMemoryAllocation) {
    cudaError_t last = cudaGetLastError(); /* clear it: the program goes on */
    printf("final request of %s: FAILED with %s (last error %s)\n",
           fmt_size(s, sizeof s, request), cudaGetErrorName(err), cudaGetErrorName(last));
    ok = 0;
  } else if (err != cudaSuccess) {
    die_cuda("cudaMalloc(final request)", err, __FILE__, __LINE__);
    return EXIT_OTHER_ERROR;
  } else {
    printf("final request of %s: ok\n", fmt_size(s, sizeof s, request));
    fin.size = request;
    fin.tag = 0xF17A1ULL;
    fin.live = 1;
    fill_pattern(fin.ptr, request, fin.tag);
    ok = 1;
  }
  print_meminfo("after request", &free_after, NULL);

  blocks_verify_all(blocks, n);
  if (ok) block_verify(&fin, "final request");
  printf("verified %zu live allocations%s\n", live, ok ? " and the final one" : "");
  blocks_free_all(blocks, n);
  if (ok) block_free(&fin, "final request");
  print_meminfo("after cleanup", &free_end, NULL);

  printf("RESULT status=%s final_alloc=%s bytes=%zu live=%zu live_bytes=%zu free0=%zu "
         "free_before=%zu free_after=%zu free_end=%zu total=%zu%s%s\n",
         ok ? "ok" : "oom", ok ? "ok" : "oom", request, live, live_bytes, free0, free_before,
         free_after, free_end, total, extra && *extra ? " " : "", extra ? extra : "");
  return ok ? EXIT_WORKLOAD_OK : EXIT_FINAL_OOM;
}

#endif
