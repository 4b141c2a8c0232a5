/* async_pool: an ordinary program using stream-ordered allocation, memory pools and managed memory.
 *
 *   async_pool [--mode all|reuse|cross] [--rounds N] [--limit-probe]
 *
 * Mode all (the default), on a non-blocking stream S:
 *  - cudaMallocAsync, cudaMallocFromPoolAsync with the device's default pool, and through the
 *    driver cuMemAllocAsync, cuMemAllocAsync_ptsz, cuMemAllocFromPoolAsync(_ptsz) and
 *    cuMemAllocManaged, on S, the legacy and the per-thread stream: each block is written with
 *    its own pattern, read back, and freed by the call that goes with it (cudaFreeAsync,
 *    cuMemFreeAsync(_ptsz), cudaFree, cuMemFree);
 *  - the default pool's usage as the program reads it (cudaMemPoolGetAttribute) while 1 MiB of
 *    it is live and after its free, and its high mark before and after a reset to 0; the pool
 *    a block says it came from (3: the default pool for cudaMallocAsync's, none for cudaMalloc's);
 *  - an explicit pool (cudaMemPoolCreate): a block from it, its usage, and cudaMallocAsync while
 *    it is the device's current pool (cudaDeviceSetMemPool): the block must come from it;
 *  - managed memory (cudaMallocManaged), written by the host and copied back;
 *  - the driver's answers to wrong calls: cudaFree of a stream-ordered block (allowed), a second
 *    cudaFreeAsync of a block (refused).
 *  With --limit-probe: how many 32 MiB blocks fit from cudaMallocAsync, from an explicit pool and
 *  from cudaMallocManaged (each set freed before the next).
 * Mode reuse: N rounds of cudaMallocAsync / cudaFreeAsync of 1 MiB on S (a stream's own order).
 * Mode cross: N rounds of cudaMallocAsync on S / cudaFreeAsync on another stream S2.
 * Kernels are not used: every check goes through copies.
 * RESULT fields: bytes_bad, used_live, reserved_ok, used_after, high_before, high_reset, pool_of, pool_used, current_pool, free_sync,
 * double_free, fit_async, fit_pool, fit_managed (-1 without --limit-probe), rounds. */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--mode all|reuse|cross] [--rounds N] [--limit-probe]";

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*attr_fn)(void *, CUpointer_attribute, CUdeviceptr);

static struct {
  alloc_async_fn alloc, alloc_ptsz;
  alloc_pool_fn pool, pool_ptsz;
  free_async_fn free_async, free_async_ptsz;
  managed_fn managed;
  free_fn free;
  attr_fn attr;
} drv;

static void *sym(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (!f) die_msg("dlsym", name);
  return f;
}

#define DRV(call)                                                       \
  do {                                                                  \
    CUresult drv_r_ = (call);                                           \
    if (drv_r_ != CUDA_SUCCESS) {                                       \
      printf("error: %s failed: %d\n", #call, (int)drv_r_);             \
      printf("RESULT status=error call=%.*s\n", (int)strcspn(#call, "("), #call); \
      exit(EXIT_OTHER_ERROR);                                           \
    }                                                                   \
  } while (0)

/* Write a tag-dependent pattern to n bytes of device memory on stream s, read it back after the
 * stream is done: 0 when every byte came back. */
static int round_trip(void *p, size_t n, int tag, cudaStream_t s) {
  unsigned char *out = (unsigned char *)xmalloc(n), *back = (unsigned char *)xmalloc(n);
  for (size_t i = 0; i < n; i++) out[i] = (unsigned char)((i * 31 + (size_t)tag * 7) & 0xff);
  CHECK(cudaMemcpyAsync(p, out, n, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(back, p, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int bad = memcmp(out, back, n) != 0;
  free(out);
  free(back);
  return bad;
}

static unsigned long long pool_attr(cudaMemPool_t pool, enum cudaMemPoolAttr attr) {
  cuuint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return (unsigned long long)v;
}

/* 32 MiB blocks until one fails (kind 0: cudaMallocAsync, 1: from pool, 2: managed); all freed. */
static int probe(int kind, cudaMemPool_t pool, cudaStream_t s) {
  void *blocks[256];
  int fit = 0;
  while (fit < 256) {
    cudaError_t e = kind == 0   ? cudaMallocAsync(&blocks[fit], 32 * MiB, s)
                    : kind == 1 ? cudaMallocFromPoolAsync(&blocks[fit], 32 * MiB, pool, s)
                                : cudaMallocManaged(&blocks[fit], 32 * MiB, cudaMemAttachGlobal);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      break;
    }
    fit++;
  }
  for (int i = 0; i < fit; i++) CHECK(kind == 2 ? cudaFree(blocks[i]) : cudaFreeAsync(blocks[i], s));
  CHECK(cudaStreamSynchronize(s));
  return fit;
}

int main(int argc, char **argv) {
  prog_init();
  const char *mode = "all";
  long rounds = 100;
  int limit_probe = 0, c;
  static const struct option opts[] = {{"mode", required_argument, NULL, 'm'},
                                       {"rounds", required_argument, NULL, 'r'},
                                       {"limit-probe", no_argument, NULL, 'l'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': mode = optarg; break;
    case 'r': rounds = opt_long("rounds", optarg, 1, 1000000); break;
    case 'l': limit_probe = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || (strcmp(mode, "all") && strcmp(mode, "reuse") && strcmp(mode, "cross")))
    bad_usage(argv[0], usage_text);

  cudaStream_t s, s2;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  int bad = 0;
  if (strcmp(mode, "all")) {
    int cross = !strcmp(mode, "cross");
    for (long i = 0; i < rounds; i++) {
      void *p;
      CHECK(cudaMallocAsync(&p, 1 * MiB, s));
      CHECK(cudaMemsetAsync(p, (int)(i & 0xff), 1 * MiB, s));
      if (cross) { /* S2 may free it only once S is done with it */
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaFreeAsync(p, s2));
      } else {
        CHECK(cudaFreeAsync(p, s));
      }
    }
    CHECK(cudaDeviceSynchronize());
    printf("RESULT status=ok mode=%s rounds=%ld\n", mode, rounds);
    return 0;
  }

  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) die_msg("dlopen libcuda.so.1", dlerror());
  drv.alloc = (alloc_async_fn)sym(h, "cuMemAllocAsync");
  drv.alloc_ptsz = (alloc_async_fn)sym(h, "cuMemAllocAsync_ptsz");
  drv.pool = (alloc_pool_fn)sym(h, "cuMemAllocFromPoolAsync");
  drv.pool_ptsz = (alloc_pool_fn)sym(h, "cuMemAllocFromPoolAsync_ptsz");
  drv.free_async = (free_async_fn)sym(h, "cuMemFreeAsync");
  drv.free_async_ptsz = (free_async_fn)sym(h, "cuMemFreeAsync_ptsz");
  drv.managed = (managed_fn)sym(h, "cuMemAllocManaged");
  drv.free = (free_fn)sym(h, "cuMemFree_v2");
  drv.attr = (attr_fn)sym(h, "cuPointerGetAttribute");

  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaMemPool_t def;
  CHECK(cudaDeviceGetDefaultMemPool(&def, dev));

  /* the runtime's calls, and the default pool's usage while 1 MiB of it is live */
  void *a, *b;
  CHECK(cudaMallocAsync(&a, 1 * MiB, s));
  unsigned long long used_live = pool_attr(def, cudaMemPoolAttrUsedMemCurrent);
  /* reserved is memory held for the pool, in whole pages: more than the 1 MiB asked for */
  unsigned long long reserved_live = pool_attr(def, cudaMemPoolAttrReservedMemCurrent);
  bad += round_trip(a, 1 * MiB, 1, s);
  void *plain;
  CHECK(cudaMalloc(&plain, 1 * MiB));
  CUmemoryPool of_async = NULL, of_malloc = (CUmemoryPool)1;
  DRV(drv.attr(&of_async, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)(uintptr_t)a));
  DRV(drv.attr(&of_malloc, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)(uintptr_t)plain));
  int pool_of = (of_async == (CUmemoryPool)def) + 2 * (of_malloc == NULL);
  CHECK(cudaFree(plain));
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  unsigned long long used_after = pool_attr(def, cudaMemPoolAttrUsedMemCurrent);
  unsigned long long high_before = pool_attr(def, cudaMemPoolAttrUsedMemHigh);
  cuuint64_t zero = 0;
  CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &zero)); /* reset the mark */
  unsigned long long high_reset = pool_attr(def, cudaMemPoolAttrUsedMemHigh);
  CHECK(cudaMallocFromPoolAsync(&b, 3 * MiB + 5, def, s));
  bad += round_trip(b, 3 * MiB + 5, 2, s);
  CHECK(cudaFreeAsync(b, s));
  CHECK(cudaMallocAsync(&a, 4000, 0)); /* the legacy stream */
  bad += round_trip(a, 4000, 3, 0);
  CHECK(cudaFreeAsync(a, 0));

  /* the driver's calls: each stream kind, each free */
  CUdeviceptr d[6];
  DRV(drv.alloc(&d[0], 2 * MiB, (CUstream)s));
  DRV(drv.alloc_ptsz(&d[1], 700 * KiB, NULL));       /* the per-thread default stream */
  DRV(drv.pool(&d[2], 512, (CUmemoryPool)def, NULL)); /* the legacy stream */
  DRV(drv.pool_ptsz(&d[3], 5 * MiB, (CUmemoryPool)def, (CUstream)s));
  DRV(drv.managed(&d[4], 6 * MiB, CU_MEM_ATTACH_GLOBAL));
  DRV(drv.alloc(&d[5], 9 * MiB, (CUstream)s2));
  const size_t dsz[6] = {2 * MiB, 700 * KiB, 512, 5 * MiB, 6 * MiB, 9 * MiB};
  for (int i = 0; i < 6; i++) bad += round_trip((void *)(uintptr_t)d[i], dsz[i], 10 + i, s);
  DRV(drv.free_async(d[0], (CUstream)s));
  DRV(drv.free_async_ptsz(d[1], NULL));
  DRV(drv.free_async(d[2], NULL));
  DRV(drv.free(d[3]));                      /* cuMemFree of a stream-ordered block */
  DRV(drv.free(d[4]));                      /* managed memory */
  DRV(drv.free_async(d[5], (CUstream)s));   /* freed on another stream than its own */

  /* wrong and unusual calls, as the driver answers them */
  CHECK(cudaMallocAsync(&a, 64 * KiB, s));
  CHECK(cudaStreamSynchronize(s));
  cudaError_t e = cudaFree(a); /* allowed: the program has made sure S is done with it */
  const char *free_sync = cudaGetErrorName(e);
  CHECK(cudaMallocAsync(&a, 64 * KiB, s));
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  e = cudaFreeAsync(a, s);
  const char *double_free = cudaGetErrorName(e);
  (void)cudaGetLastError();

  /* a pool of the program's own, and the device's current pool changed to it */
  cudaMemPool_t own;
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  CHECK(cudaMemPoolCreate(&own, &props));
  CHECK(cudaMallocFromPoolAsync(&a, 4 * MiB, own, s));
  unsigned long long pool_used = pool_attr(own, cudaMemPoolAttrUsedMemCurrent);
  bad += round_trip(a, 4 * MiB, 20, s);
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaDeviceSetMemPool(dev, own));
  CHECK(cudaMallocAsync(&a, 1 * MiB, s));
  CUmemoryPool from = NULL;
  DRV(drv.attr(&from, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)(uintptr_t)a));
  int current_pool = from == (CUmemoryPool)own;
  bad += round_trip(a, 1 * MiB, 21, s);
  CHECK(cudaFreeAsync(a, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaDeviceSetMemPool(dev, def));

  /* managed memory: the host writes it, the device copies it back */
  unsigned char *m;
  CHECK(cudaMallocManaged((void **)&m, 3 * MiB, cudaMemAttachGlobal));
  for (size_t i = 0; i < 3 * MiB; i++) m[i] = (unsigned char)(i * 13);
  unsigned char *back = (unsigned char *)xmalloc(3 * MiB);
  CHECK(cudaMemcpy(back, m, 3 * MiB, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < 3 * MiB; i++) bad += back[i] != (unsigned char)(i * 13);
  free(back);
  CHECK(cudaFree(m));

  int fit_async = -1, fit_pool = -1, fit_managed = -1;
  if (limit_probe) {
    fit_async = probe(0, own, s);
    fit_pool = probe(1, own, s);
    fit_managed = probe(2, own, s);
  }
  CHECK(cudaMemPoolDestroy(own));
  CHECK(cudaDeviceSynchronize());
  printf("RESULT status=ok bytes_bad=%d used_live=%llu reserved_ok=%d used_after=%llu "
         "high_before=%llu high_reset=%llu pool_of=%d pool_used=%llu current_pool=%d "
         "free_sync=%s double_free=%s fit_async=%d fit_pool=%d fit_managed=%d\n",
         bad, used_live, reserved_live > used_live, used_after, high_before, high_reset, pool_of,
         pool_used, current_pool, free_sync, double_free, fit_async, fit_pool, fit_managed);
  return bad ? EXIT_CORRUPTION : 0;
}
