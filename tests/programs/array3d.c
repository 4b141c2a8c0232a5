/* array3d: CUDA arrays of every shape next to ordinary allocations, with the device's free
 * memory watched, in the style of HAMi-core's 3-D array tests (which check that arrays are
 * counted against the device).
 *
 *   array3d [--block SIZE]
 *
 * With one block of SIZE allocated by cudaMalloc, the program creates a 3-D, a layered 2-D, a
 * cube map and a 1-D array with cuArray3DCreate (the driver API, through dlopen), checks after
 * each that cuMemGetInfo's free memory dropped by at least the array's bytes and that
 * cuArray3DGetDescriptor gives back its descriptor, destroys them (cuArrayDestroy), frees the
 * block, and checks that the free memory is back where it started. It also asks for an array
 * with a depth but no height. (It does not destroy an array twice: on an H100 that is undefined,
 * and this program once ended in SIGSEGV there, without tessera too.)
 * RESULT fields: arrays, counted (arrays the free memory dropped for), descs (descriptors given
 * back whole), given_back (the free memory is back), bad_shape (the driver's answer, by name).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>

#include "common.h"

static const char *usage_text = "[--block SIZE]";

typedef CUresult (*create_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*desc_fn)(CUDA_ARRAY3D_DESCRIPTOR *, CUarray);
typedef CUresult (*destroy_fn)(CUarray);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*name_fn)(CUresult, const char **);

static info_fn mem_info;

static size_t free_now(void) {
  size_t f = 0, t = 0;
  if (mem_info(&f, &t) != CUDA_SUCCESS) die_msg("cuMemGetInfo", "failed");
  return f;
}

static CUDA_ARRAY3D_DESCRIPTOR shape(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch,
                                     unsigned flags) {
  CUDA_ARRAY3D_DESCRIPTOR x;
  memset(&x, 0, sizeof x);
  x.Width = w;
  x.Height = h;
  x.Depth = d;
  x.Format = f;
  x.NumChannels = ch;
  x.Flags = flags;
  return x;
}

int main(int argc, char **argv) {
  size_t block = 8 * MiB;
  int c;
  static const struct option opts[] = {{"block", required_argument, NULL, 'b'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'b': block = opt_size("block", optarg); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || block == 0) bad_usage(argv[0], usage_text);
  CHECK(cudaFree(NULL)); /* a context */
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!drv) die_msg("dlopen libcuda.so.1", "the runtime did not load the driver");
  create_fn create = (create_fn)dlsym(drv, "cuArray3DCreate_v2");
  desc_fn describe = (desc_fn)dlsym(drv, "cuArray3DGetDescriptor_v2");
  destroy_fn destroy = (destroy_fn)dlsym(drv, "cuArrayDestroy");
  name_fn err_name = (name_fn)dlsym(drv, "cuGetErrorName");
  mem_info = (info_fn)dlsym(drv, "cuMemGetInfo_v2");
  if (!create || !describe || !destroy || !err_name || !mem_info)
    die_msg("libcuda.so.1", "no array entry points");

  size_t free0 = free_now();
  void *blk = NULL;
  CHECK(cudaMalloc(&blk, block));
  CHECK(cudaMemset(blk, 0x2a, block));
  CUDA_ARRAY3D_DESCRIPTOR shapes[4];
  size_t bytes[4];
  shapes[0] = shape(256, 256, 64, CU_AD_FORMAT_FLOAT, 4, 0);
  bytes[0] = 256ull * 256 * 64 * 16;
  shapes[1] = shape(512, 512, 8, CU_AD_FORMAT_UNSIGNED_INT16, 2, CUDA_ARRAY3D_LAYERED);
  bytes[1] = 512ull * 512 * 8 * 4;
  shapes[2] = shape(256, 256, 6, CU_AD_FORMAT_HALF, 1, CUDA_ARRAY3D_CUBEMAP);
  bytes[2] = 256ull * 256 * 6 * 2;
  /* 16384 wide: within every GPU's 1-D surface limit (an H100 refuses 65536) */
  shapes[3] = shape(16384, 0, 0, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_SURFACE_LDST);
  bytes[3] = 16384ull * 16;
  CUarray arrays[4];
  int counted = 0, descs = 0;
  for (int i = 0; i < 4; i++) {
    size_t before = free_now();
    CUresult r = create(&arrays[i], &shapes[i]);
    if (r != CUDA_SUCCESS) {
      const char *n = "?";
      err_name(r, &n);
      printf("RESULT status=error create_failed=%d error=%s\n", i, n);
      return EXIT_OTHER_ERROR;
    }
    size_t after = free_now();
    counted += before >= after && before - after >= bytes[i];
    CUDA_ARRAY3D_DESCRIPTOR back;
    memset(&back, 0xff, sizeof back);
    descs += describe(&back, arrays[i]) == CUDA_SUCCESS &&
             memcmp(&back, &shapes[i], sizeof back) == 0;
  }
  CUDA_ARRAY3D_DESCRIPTOR bad = shape(64, 0, 64, CU_AD_FORMAT_FLOAT, 1, 0);
  CUarray none;
  const char *bad_shape = "?";
  err_name(create(&none, &bad), &bad_shape);
  for (int i = 0; i < 4; i++)
    if (destroy(arrays[i]) != CUDA_SUCCESS) die_msg("cuArrayDestroy", "failed");
  unsigned char probe = 0;
  CHECK(cudaMemcpy(&probe, (char *)blk + block - 1, 1, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(blk));
  int given_back = free_now() == free0;
  int ok = counted == 4 && descs == 4 && given_back && probe == 0x2a;
  printf("RESULT status=%s arrays=4 counted=%d descs=%d given_back=%d block_intact=%d "
         "bad_shape=%s\n",
         ok ? "ok" : "error", counted, descs, given_back, probe == 0x2a, bad_shape);
  return ok ? EXIT_WORKLOAD_OK : EXIT_OTHER_ERROR;
}
