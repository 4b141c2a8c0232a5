/* pitched: an ordinary program using pitched and 3-D allocations (images, volumes).
 *
 *   pitched [--rows N] [--limit-probe]
 *
 * cudaMallocPitch of 1000-byte rows, cudaMalloc3D of a 700 x 20 x 5 volume, and
 * cuMemAllocPitch (through the driver, 8-byte elements) of 64-byte rows: each row is written with
 * its own pattern through the returned pitch and read back; the driver's refusals (an element
 * size of 3) are checked; each block is freed with cudaFree, one with cuMemFree. With
 * --limit-probe it then allocates 32 MiB pitched blocks until one fails and reports how many fit.
 * RESULT fields: pitch2d, pitch3d, pitchdrv, rows_bad, bad_elem (the error for an element size
 * of 3), fit (--limit-probe). */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--rows N] [--limit-probe]";

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*name_fn)(CUresult, const char **);

static int rows_check(void *base, size_t pitch, size_t width, size_t rows, int tag) {
  unsigned char *row = (unsigned char *)xmalloc(width), *back = (unsigned char *)xmalloc(width);
  int bad = 0;
  for (size_t r = 0; r < rows; r++) {
    memset(row, (int)((r * 7 + (size_t)tag) & 0xff), width);
    CHECK(cudaMemcpy((char *)base + r * pitch, row, width, cudaMemcpyHostToDevice));
  }
  for (size_t r = 0; r < rows; r++) {
    CHECK(cudaMemcpy(back, (char *)base + r * pitch, width, cudaMemcpyDeviceToHost));
    bad += back[0] != (unsigned char)((r * 7 + (size_t)tag) & 0xff) ||
           back[width - 1] != (unsigned char)((r * 7 + (size_t)tag) & 0xff);
  }
  free(row);
  free(back);
  return bad;
}

int main(int argc, char **argv) {
  prog_init();
  size_t rows = 300;
  int probe = 0, c;
  static const struct option opts[] = {{"rows", required_argument, NULL, 'r'},
                                       {"limit-probe", no_argument, NULL, 'l'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'r': rows = opt_size("rows", optarg); break;
    case 'l': probe = 1; break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || rows == 0) bad_usage(argv[0], usage_text);
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!drv) die_msg("dlopen libcuda.so.1", dlerror());
  pitch_fn alloc_pitch = (pitch_fn)dlsym(drv, "cuMemAllocPitch_v2");
  free_fn mem_free = (free_fn)dlsym(drv, "cuMemFree_v2");
  name_fn err_name = (name_fn)dlsym(drv, "cuGetErrorName");
  if (!alloc_pitch || !mem_free || !err_name) die_msg("dlsym", "a driver entry point is missing");

  void *img;
  size_t pitch2d = 0;
  CHECK(cudaMallocPitch(&img, &pitch2d, 1000, rows));
  struct cudaPitchedPtr vol;
  struct cudaExtent ext = {700, 20, 5};
  CHECK(cudaMalloc3D(&vol, ext));
  CUdeviceptr d;
  size_t pitchdrv = 0;
  CUresult r = alloc_pitch(&d, &pitchdrv, 64, rows, 8);
  if (r != CUDA_SUCCESS) die_msg("cuMemAllocPitch", "failed");
  int bad = rows_check(img, pitch2d, 1000, rows, 1);
  bad += rows_check(vol.ptr, vol.pitch, 700, 20 * 5, 2);
  bad += rows_check((void *)(uintptr_t)d, pitchdrv, 64, rows, 3);
  CUdeviceptr x;
  size_t px;
  const char *bad_elem = "?";
  err_name(alloc_pitch(&x, &px, 64, 4, 3), &bad_elem);
  CHECK(cudaFree(img));
  CHECK(cudaFree(vol.ptr));
  if (mem_free(d) != CUDA_SUCCESS) die_msg("cuMemFree", "failed");

  int fit = -1;
  if (probe) {
    void *blocks[256];
    fit = 0;
    while (fit < 256) {
      size_t p;
      cudaError_t e = cudaMallocPitch(&blocks[fit], &p, 4096, 8192); /* 32 MiB */
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        break;
      }
      fit++;
    }
    for (int i = 0; i < fit; i++) CHECK(cudaFree(blocks[i]));
  }
  printf("RESULT status=ok pitch2d=%zu pitch3d=%zu pitchdrv=%zu rows_bad=%d bad_elem=%s fit=%d\n",
         pitch2d, vol.pitch, pitchdrv, bad, bad_elem, fit);
  return bad ? EXIT_CORRUPTION : 0;
}
