/* vmm_ipc_drv: device memory made with the driver's virtual-memory API and shared with another
 * process over a Unix socket, which loads a module to work on it, in the style of NVIDIA's
 * memMapIPCDrv sample. Driver API only (libcuda.so.1 through dlopen, as driver_api does).
 *
 *   vmm_ipc_drv [--size SIZE]
 *
 * The parent creates a physical allocation that can be exported as a POSIX file descriptor
 * (cuMemCreate), maps it (cuMemAddressReserve, cuMemMap, cuMemSetAccess), fills it, exports it
 * (cuMemExportToShareableHandle) and sends the descriptor to a copy of itself over the socket
 * (SCM_RIGHTS). The child imports it (cuMemImportFromShareableHandle), maps it, checks the
 * parent's bytes, loads a module from PTX (cuModuleLoadDataEx, with a log buffer), finds its
 * kernel (cuModuleGetFunction) and launches it on the first word, then writes the last 4 KiB
 * with cuMemsetD8. The parent checks the child's bytes.
 * RESULT fields: child_saw (the parent's bytes, in the child), module (cuModuleLoadDataEx),
 * function (cuModuleGetFunction), launch (cuLaunchKernel), parent_saw (the child's bytes, in
 * the parent), kernel_effect (what the kernel added to the first word: 1 on a GPU, 0 on the
 * simulated device, which runs no kernel). Exit 0 when both sides saw the other's bytes.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>

#include "common.h"
#include "share.h"
#include "touch.h"

static const char *usage_text = "[--size SIZE]";

#define TAIL (4 * KiB)

static struct {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                        unsigned long long);
  CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*memset8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*load_ex)(CUmodule *, const void *, unsigned, CUjit_option *, void **);
  CUresult (*get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*unload)(CUmodule);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*synchronize)(void);
  CUresult (*error_name)(CUresult, const char **);
} cu;

static void *sym(void *h, const char *name) {
  void *f = dlsym(h, name);
  if (!f) die_msg("libcuda.so.1", name);
  return f;
}

static void driver_load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) die_msg("dlopen libcuda.so.1", dlerror());
  *(void **)&cu.init = sym(h, "cuInit");
  *(void **)&cu.device_get = sym(h, "cuDeviceGet");
  *(void **)&cu.retain = sym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.set_current = sym(h, "cuCtxSetCurrent");
  *(void **)&cu.granularity = sym(h, "cuMemGetAllocationGranularity");
  *(void **)&cu.create = sym(h, "cuMemCreate");
  *(void **)&cu.release = sym(h, "cuMemRelease");
  *(void **)&cu.export_fd = sym(h, "cuMemExportToShareableHandle");
  *(void **)&cu.import_fd = sym(h, "cuMemImportFromShareableHandle");
  *(void **)&cu.reserve = sym(h, "cuMemAddressReserve");
  *(void **)&cu.address_free = sym(h, "cuMemAddressFree");
  *(void **)&cu.map = sym(h, "cuMemMap");
  *(void **)&cu.unmap = sym(h, "cuMemUnmap");
  *(void **)&cu.set_access = sym(h, "cuMemSetAccess");
  *(void **)&cu.htod = sym(h, "cuMemcpyHtoD_v2");
  *(void **)&cu.dtoh = sym(h, "cuMemcpyDtoH_v2");
  *(void **)&cu.memset8 = sym(h, "cuMemsetD8_v2");
  *(void **)&cu.load_ex = sym(h, "cuModuleLoadDataEx");
  *(void **)&cu.get_function = sym(h, "cuModuleGetFunction");
  *(void **)&cu.unload = sym(h, "cuModuleUnload");
  *(void **)&cu.launch = sym(h, "cuLaunchKernel");
  *(void **)&cu.synchronize = sym(h, "cuCtxSynchronize");
  *(void **)&cu.error_name = sym(h, "cuGetErrorName");
}

static const char *err_name(CUresult r) {
  const char *n = "unknown";
  cu.error_name(r, &n);
  return n;
}

#define CU(call)                                                                   \
  do {                                                                             \
    CUresult cu_r_ = (call);                                                       \
    if (cu_r_ != CUDA_SUCCESS) {                                                   \
      printf("error: %s failed: %s at %s:%d\n", #call, err_name(cu_r_), __FILE__, \
             __LINE__);                                                            \
      printf("RESULT status=error error=%s\n", err_name(cu_r_));                   \
      exit(EXIT_OTHER_ERROR);                                                      \
    }                                                                              \
  } while (0)

static CUmemAllocationProp fd_prop(CUdevice dev) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

/* map handle h over a new range of size bytes, read-write for dev */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size, CUdevice dev) {
  CUdeviceptr va = 0;
  CU(cu.reserve(&va, size, 0, 0, 0));
  CU(cu.map(va, size, 0, h, 0));
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dev;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cu.set_access(va, size, &acc, 1));
  return va;
}

static CUdevice setup(void) {
  CUdevice dev;
  CUcontext ctx;
  CU(cu.init(0));
  CU(cu.device_get(&dev, 0));
  CU(cu.retain(&ctx, dev));
  CU(cu.set_current(ctx));
  return dev;
}

/* the parent's bytes: the pattern, but for the first word (the kernel's) and the tail */
static int pattern_ok(const unsigned char *buf, size_t size) {
  return pattern_check(buf + 8, size - 8 - TAIL, 0x5eed, 8) == (size_t)-1;
}

static int child_main(void) {
  int fd = chan_get_fd(0);
  char line[128];
  size_t size = 0;
  if (fd < 0 || !chan_get(0, line, sizeof line) || sscanf(line, "size %zu", &size) != 1) return 1;
  CUdevice dev = setup();
  CUmemGenericAllocationHandle h;
  CU(cu.import_fd(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);
  CUdeviceptr va = map_rw(h, size, dev);
  CU(cu.release(h)); /* the mapping keeps the memory */
  unsigned char *buf = (unsigned char *)xmalloc(size);
  CU(cu.dtoh(buf, va, size));
  int saw = pattern_ok(buf, size);
  char log[256] = "";
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule mod = NULL;
  CUfunction fn = NULL;
  CUresult loaded = cu.load_ex(&mod, touch_ptx, 2, opts, vals);
  CUresult found = loaded == CUDA_SUCCESS ? cu.get_function(&fn, mod, "touch") : loaded;
  CUresult launched = found;
  if (found == CUDA_SUCCESS) {
    void *args[] = {&va};
    launched = cu.launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
  }
  CU(cu.synchronize());
  CU(cu.memset8(va + size - TAIL, 0x77, TAIL));
  CU(cu.synchronize());
  if (mod) CU(cu.unload(mod));
  CU(cu.unmap(va, size));
  CU(cu.address_free(va, size));
  char reply[200];
  snprintf(reply, sizeof reply, "done saw %d module %s function %s launch %s\n", saw,
           err_name(loaded), err_name(found), err_name(launched));
  chan_put(0, reply);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  size_t size = 4 * MiB;
  int c;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"child", no_argument, NULL, 'c'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  prog_init();
  driver_load();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': size = opt_size("size", optarg); break;
    case 'c': return child_main();
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size < 2 * TAIL) bad_usage(argv[0], usage_text);
  CUdevice dev = setup();
  CUmemAllocationProp prop = fd_prop(dev);
  size_t gran = 0;
  CU(cu.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size = (size + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h;
  CU(cu.create(&h, size, &prop, 0));
  CUdeviceptr va = map_rw(h, size, dev);
  unsigned char *buf = (unsigned char *)xmalloc(size);
  pattern_gen(buf, size, 0x5eed, 0);
  uint32_t first = 41;
  memcpy(buf, &first, sizeof first);
  CU(cu.htod(va, buf, size));
  int fd = -1;
  CU(cu.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

  int chan;
  char *cargv[] = {argv[0], (char *)"--child", NULL};
  pid_t pid = chan_spawn(cargv, &chan);
  if (chan_put_fd(chan, fd) != 0) die_msg("sendmsg", strerror(errno));
  close(fd);
  char msg[64], line[256], module[64] = "none", function[64] = "none", launch[64] = "none";
  snprintf(msg, sizeof msg, "size %zu\n", size);
  chan_put(chan, msg);
  int child_saw = -1;
  if (!chan_get(chan, line, sizeof line) ||
      sscanf(line, "done saw %d module %63s function %63s launch %63s", &child_saw, module,
             function, launch) != 4)
    die_msg("child", "no report");
  int child_exit = chan_wait(pid);
  close(chan);

  memset(buf, 0, size);
  CU(cu.dtoh(buf, va, size));
  int parent_saw = pattern_ok(buf, size);
  for (size_t i = size - TAIL; i < size; i++) parent_saw &= buf[i] == 0x77;
  uint32_t word = 0;
  memcpy(&word, buf, sizeof word);
  CU(cu.unmap(va, size));
  CU(cu.address_free(va, size));
  CU(cu.release(h));
  free(buf);
  int ok = child_saw == 1 && parent_saw == 1 && child_exit == 0;
  printf("RESULT status=%s child_saw=%d module=%s function=%s launch=%s parent_saw=%d "
         "kernel_effect=%u child_exit=%d\n",
         ok ? "ok" : "corrupt", child_saw, module, function, launch, parent_saw,
         (unsigned)(word - first), child_exit);
  return ok ? EXIT_WORKLOAD_OK : EXIT_CORRUPTION;
}
