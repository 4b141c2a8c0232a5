/* driver_api: allocate through the CUDA DRIVER API the way cudart reaches it.
 *
 * Built twice from this file:
 *   driver_api     dlopen("libcuda.so.1"), ONE dlsym(h, "cuGetProcAddress_v2"), the
 *                  self-lookup cuGetProcAddress("cuGetProcAddress", 12000), then every other
 *                  entry point through the pointer that self-lookup returned (base names with
 *                  the ABI version: cuMemAlloc at 3020 is cuMemAlloc_v2, and so on);
 *   driver_linked  (TESSERA_DRIVER_LINKED) linked with -lcuda; calls cuMemAlloc_v2,
 *                  cuMemFree_v2, cuMemGetInfo_v2, ... directly by name.
 *
 * Workload: cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain + cuCtxSetCurrent; --count blocks of
 * pseudo-random sizes in [1, --max-size] are allocated, written (cuMemcpyHtoD) and verified
 * (cuMemcpyDtoH); half of them, chosen at random, are verified and freed, as many again are
 * allocated, then everything is verified and freed. With --own-context a second context is
 * created with cuCtxCreate (the CUDA 13 cuda.h signature, cuCtxCreate_v4, looked up at 12050)
 * and the same workload runs in it, interleaved: both sets stay live together and each is
 * verified (with its own context current) before anything is freed.
 *
 * Exit: 0 ok, 3 corruption, 1 any error (the failing call and cuGetErrorName are printed).
 * RESULT: status mode allocs frees bytes contexts free0 total.
 */
#include "common.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <getopt.h>

static const char usage_text[] =
    "[--count N=300] [--max-size SIZE=4M] [--device N=0] [--seed N=1] [--own-context]";

#ifdef TESSERA_DRIVER_LINKED
#define MODE "linked"
#else
#define MODE "dlopen"
#endif

/* The entry points, with the ABI of the version they are looked up at. (The field names are
 * the base names; where cuda.h #defines one to its versioned name, the field is renamed the
 * same way everywhere, which is harmless.) */
static struct {
  PFN_cuGetErrorName_v6000 cuGetErrorName;
  PFN_cuInit_v2000 cuInit;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuCtxCreate_v12050 cuCtxCreate;
  PFN_cuCtxDestroy_v4000 cuCtxDestroy;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
  PFN_cuMemAlloc_v3020 cuMemAlloc;
  PFN_cuMemFree_v3020 cuMemFree;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH;
} drv;

static const char *err_name(CUresult r) {
  const char *s = NULL;
  if (drv.cuGetErrorName && drv.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
  return "(unknown CUresult)";
}

__attribute__((noreturn)) static void die_cu(const char *call, CUresult r, int line) {
  size_t n;
  if (strncmp(call, "drv.", 4) == 0) call += 4;
  n = strcspn(call, "( ");
  printf("error: %s failed: %s (%d) at driver_api.c:%d\n", call, err_name(r), (int)r, line);
  printf("RESULT status=error call=%.*s error=%s\n", (int)n, call, err_name(r));
  exit(EXIT_OTHER_ERROR);
}

#define CU(call)                                      \
  do {                                                \
    CUresult cu_r_ = (call);                          \
    if (cu_r_ != CUDA_SUCCESS) die_cu(#call, cu_r_, __LINE__); \
  } while (0)

#ifdef TESSERA_DRIVER_LINKED
static void load_driver(void) {
  drv.cuGetErrorName = cuGetErrorName;
  drv.cuInit = cuInit;
  drv.cuDeviceGet = cuDeviceGet;
  drv.cuDevicePrimaryCtxRetain = cuDevicePrimaryCtxRetain;
  drv.cuDevicePrimaryCtxRelease = cuDevicePrimaryCtxRelease_v2;
  drv.cuCtxSetCurrent = cuCtxSetCurrent;
  drv.cuCtxCreate = cuCtxCreate_v4;
  drv.cuCtxDestroy = cuCtxDestroy_v2;
  drv.cuCtxSynchronize = cuCtxSynchronize;
  drv.cuMemAlloc = cuMemAlloc_v2;
  drv.cuMemFree = cuMemFree_v2;
  drv.cuMemGetInfo = cuMemGetInfo_v2;
  drv.cuMemcpyHtoD = cuMemcpyHtoD_v2;
  drv.cuMemcpyDtoH = cuMemcpyDtoH_v2;
  printf("driver: linked with -lcuda, calling cuMemAlloc_v2/cuMemFree_v2/cuMemGetInfo_v2 by name\n");
}
#else
static PFN_cuGetProcAddress_v12000 gpa;

static void *lookup(const char *name, int version) {
  void *fn = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = gpa(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
    printf("error: cuGetProcAddress(\"%s\", %d) failed: result %d, symbolStatus %d, pfn %s\n",
           name, version, (int)r, (int)st, fn ? "set" : "NULL");
    printf("RESULT status=error call=cuGetProcAddress symbol=%s version=%d\n", name, version);
    exit(EXIT_OTHER_ERROR);
  }
  return fn;
}

/* Function pointers and data pointers are interchangeable on every platform CUDA supports
 * (POSIX requires it for dlsym); the memcpy keeps ISO C quiet. */
#define LOOKUP(field, name, version)                 \
  do {                                               \
    void *lookup_p_ = lookup((name), (version));     \
    memcpy(&drv.field, &lookup_p_, sizeof lookup_p_); \
  } while (0)

static void load_driver(void) {
  PFN_cuGetProcAddress_v12000 first = NULL;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *sym;
  if (!h) die_msg("dlopen(libcuda.so.1)", dlerror());
  sym = dlsym(h, "cuGetProcAddress_v2");
  if (!sym) die_msg("dlsym(cuGetProcAddress_v2)", dlerror());
  memcpy(&first, &sym, sizeof sym);
  gpa = first;
  /* The self-lookup: from here on, everything goes through the pointer it returns. */
  {
    void *self = lookup("cuGetProcAddress", 12000);
    memcpy(&gpa, &self, sizeof self);
  }
  printf("driver: dlopen(libcuda.so.1) + dlsym(cuGetProcAddress_v2) + self-lookup at 12000: "
         "pointer %s\n", gpa == first ? "unchanged" : "changed");
  LOOKUP(cuGetErrorName, "cuGetErrorName", 6000);
  LOOKUP(cuInit, "cuInit", 2000);
  LOOKUP(cuDeviceGet, "cuDeviceGet", 2000);
  LOOKUP(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
  LOOKUP(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
  LOOKUP(cuCtxSetCurrent, "cuCtxSetCurrent", 4000);
  LOOKUP(cuCtxDestroy, "cuCtxDestroy", 4000);
  LOOKUP(cuCtxSynchronize, "cuCtxSynchronize", 2000);
  LOOKUP(cuMemAlloc, "cuMemAlloc", 3020);
  LOOKUP(cuMemFree, "cuMemFree", 3020);
  LOOKUP(cuMemGetInfo, "cuMemGetInfo", 3020);
  LOOKUP(cuMemcpyHtoD, "cuMemcpyHtoD", 3020);
  LOOKUP(cuMemcpyDtoH, "cuMemcpyDtoH", 3020);
}
#endif

typedef struct {
  CUdeviceptr ptr;
  size_t size;
  uint64_t tag;
  int live;
} dblock_t;

static uint64_t n_allocs, n_frees, n_bytes;

static void dfill(dblock_t *b) {
  unsigned char *buf = staging();
  size_t off;
  for (off = 0; off < b->size; off += STAGING_BYTES) {
    size_t n = b->size - off < STAGING_BYTES ? b->size - off : STAGING_BYTES;
    pattern_gen(buf, n, b->tag, off);
    CU(drv.cuMemcpyHtoD(b->ptr + off, buf, n));
  }
}

static void dverify(const dblock_t *b, const char *set, size_t idx) {
  unsigned char *buf = staging();
  size_t off;
  for (off = 0; off < b->size; off += STAGING_BYTES) {
    size_t n = b->size - off < STAGING_BYTES ? b->size - off : STAGING_BYTES, bad;
    CU(drv.cuMemcpyDtoH(buf, b->ptr + off, n));
    bad = pattern_check(buf, n, b->tag, off);
    if (bad != (size_t)-1) {
      printf("CORRUPTION: %s block %zu (%zu bytes at 0x%llx): byte %zu is wrong\n", set, idx,
             b->size, (unsigned long long)b->ptr, off + bad);
      die_corrupt("driver_block");
    }
  }
}

static void dalloc(dblock_t *b, size_t size, uint64_t tag) {
  CU(drv.cuMemAlloc(&b->ptr, size));
  b->size = size;
  b->tag = tag;
  b->live = 1;
  n_allocs++;
  n_bytes += size;
  dfill(b);
}

static void dfree(dblock_t *b, const char *set, size_t idx) {
  dverify(b, set, idx);
  CU(drv.cuMemFree(b->ptr));
  b->live = 0;
  n_frees++;
}

static void verify_set(const dblock_t *bs, size_t n, const char *set) {
  size_t i;
  for (i = 0; i < n; i++)
    if (bs[i].live) dverify(&bs[i], set, i);
}

/* Phase 1: allocate the first `count` blocks of a set of 2*count. */
static void set_fill(dblock_t *bs, size_t count, size_t max_size, rng_t *rng, uint64_t salt) {
  size_t i;
  for (i = 0; i < count; i++) dalloc(&bs[i], (size_t)rng_range(rng, 1, max_size), salt + i);
}

/* Phase 2: free a random half, allocate `count` more (into the second half of the array). */
static void set_churn(dblock_t *bs, size_t count, size_t max_size, rng_t *rng, uint64_t salt,
                      const char *set) {
  size_t i;
  for (i = 0; i < count; i++)
    if (bs[i].live && (rng_next(rng) & 1)) dfree(&bs[i], set, i);
  for (i = count; i < 2 * count; i++)
    dalloc(&bs[i], (size_t)rng_range(rng, 1, max_size), salt + i);
}

static void set_free(dblock_t *bs, size_t n, const char *set) {
  size_t i;
  for (i = 0; i < n; i++)
    if (bs[i].live) dfree(&bs[i], set, i);
}

int main(int argc, char **argv) {
  size_t count = 300, max_size = 4 * MiB, free0 = 0, total = 0, fr = 0;
  int device = 0, own_context = 0, c;
  unsigned long long seed = 1;
  CUdevice dev;
  CUcontext primary = NULL, own = NULL;
  dblock_t *set_p, *set_o = NULL;
  rng_t rng;
  char s1[32], s2[32];
  static const struct option opts[] = {
      {"count", required_argument, NULL, 'n'}, {"max-size", required_argument, NULL, 'm'},
      {"device", required_argument, NULL, 'd'}, {"seed", required_argument, NULL, 's'},
      {"own-context", no_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};

  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'n': count = (size_t)opt_long("count", optarg, 1, 10000000); break;
    case 'm': max_size = opt_size("max-size", optarg); break;
    case 'd': device = (int)opt_long("device", optarg, 0, 1024); break;
    case 's': seed = (unsigned long long)opt_long("seed", optarg, 0, 0x7fffffffL); break;
    case 'o': own_context = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || max_size == 0) bad_usage(argv[0], usage_text);

  load_driver();
#ifndef TESSERA_DRIVER_LINKED
  if (own_context) LOOKUP(cuCtxCreate, "cuCtxCreate", 12050);
#endif
  CU(drv.cuInit(0));
  CU(drv.cuDeviceGet(&dev, device));
  CU(drv.cuDevicePrimaryCtxRetain(&primary, dev));
  CU(drv.cuCtxSetCurrent(primary));
  CU(drv.cuMemGetInfo(&free0, &total));
  printf("cuMemGetInfo at start: free=%zu (%s) total=%zu (%s)\n", free0,
         fmt_size(s1, sizeof s1, free0), total, fmt_size(s2, sizeof s2, total));

  set_p = (dblock_t *)calloc(2 * count, sizeof *set_p);
  if (!set_p) die_msg("host calloc", "out of memory");
  rng_seed(&rng, seed);
  set_fill(set_p, count, max_size, &rng, 0xD1000000ULL);
  if (own_context) {
    set_o = (dblock_t *)calloc(2 * count, sizeof *set_o);
    if (!set_o) die_msg("host calloc", "out of memory");
    CU(drv.cuCtxCreate(&own, NULL, 0, dev)); /* becomes current */
    set_fill(set_o, count, max_size, &rng, 0xD2000000ULL);
    printf("own context: allocated %zu blocks\n", count);
    CU(drv.cuCtxSetCurrent(primary));
  }
  verify_set(set_p, count, "primary");
  printf("primary context: allocated and verified %zu blocks\n", count);

  set_churn(set_p, count, max_size, &rng, 0xD1000000ULL, "primary");
  if (own_context) {
    CU(drv.cuCtxSetCurrent(own));
    verify_set(set_o, count, "own");
    set_churn(set_o, count, max_size, &rng, 0xD2000000ULL, "own");
    CU(drv.cuCtxSynchronize());
    CU(drv.cuCtxSetCurrent(primary));
  }
  CU(drv.cuCtxSynchronize());
  CU(drv.cuMemGetInfo(&fr, &total));
  printf("cuMemGetInfo with everything live: free=%zu (%s)\n", fr, fmt_size(s1, sizeof s1, fr));

  /* Both sets are live: verify both, each with its own context current, then free. */
  verify_set(set_p, 2 * count, "primary");
  if (own_context) {
    CU(drv.cuCtxSetCurrent(own));
    verify_set(set_o, 2 * count, "own");
    set_free(set_o, 2 * count, "own");
    printf("own context: verified and freed everything\n");
    CU(drv.cuCtxSetCurrent(primary));
    CU(drv.cuCtxDestroy(own));
  }
  set_free(set_p, 2 * count, "primary");
  CU(drv.cuCtxSynchronize());
  CU(drv.cuMemGetInfo(&fr, &total));
  printf("cuMemGetInfo at end: free=%zu (%s)\n", fr, fmt_size(s1, sizeof s1, fr));
  CU(drv.cuCtxSetCurrent(NULL));
  CU(drv.cuDevicePrimaryCtxRelease(dev));

  printf("%llu allocations, %llu frees, %s\n", (unsigned long long)n_allocs,
         (unsigned long long)n_frees, fmt_size(s1, sizeof s1, (size_t)n_bytes));
  printf("RESULT status=ok mode=%s allocs=%llu frees=%llu bytes=%llu contexts=%d free0=%zu "
         "total=%zu\n", MODE, (unsigned long long)n_allocs, (unsigned long long)n_frees,
         (unsigned long long)n_bytes, own_context ? 2 : 1, free0, total);
  free(set_p);
  free(set_o);
  return EXIT_WORKLOAD_OK;
}
