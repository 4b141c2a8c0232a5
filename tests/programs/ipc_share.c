/* ipc_share: an ordinary program that shares device memory with another process over CUDA IPC
 * and asks the driver about its pointers, as CUDA-aware MPI, UCX and torch.multiprocessing do.
 *
 *   ipc_share [--mode MODE] [--plain-child] [--importer-uid UID]
 *
 * The parent keeps 8 blocks of 512 B to 64 MiB live together, plus, after freeing every other
 * one of 8 blocks of 2 MiB (made where a 16 MiB block was), one of 6 MiB (a caching allocator
 * may serve it from the holes). For each block it checks the driver's answers about a pointer
 * in its middle (cuMemGetAddressRange, cuPointerGetAttribute(s), cudaPointerGetAttributes,
 * cuMemRetainAllocationHandle), exports it with cudaIpcGetMemHandle (some through the base of
 * the range query, some through an interior pointer, one twice), and starts itself again as
 * the importer, which opens every handle (one twice), checks the block's first, middle and last
 * bytes, writes its last byte, and reports.
 * The parent then checks that it sees the importer's writes. MODE:
 *   basic    the importer checks and closes; done
 *   reuse    while the importer still has the blocks open, the parent frees them and allocates
 *            and fills the same sizes again; the importer must still see its own bytes
 *            (nothing handed out again under it), then closes them
 *   exit     the parent exits while the importer has the blocks open; the importer checks the
 *            bytes again after its exporter is gone (its report goes to stderr, prefixed
 *            "importer:")
 * --plain-child starts the importer without LD_PRELOAD (a process not under tessera);
 * --importer-uid (as root) starts it as another user, who may not take this process's memory.
 * RESULT fields: pid, blocks, attr_bad (pointer-query answers that are not the block's), ids (distinct
 * buffer ids), same_handle (exporting a block twice gives the same bytes), own_open (the error
 * for opening one's own handle), opened, open_failed, bytes_bad (the importer's checks),
 * seen_back (importer writes the parent saw), held_ok (reuse: the importer's bytes survived),
 * export_us and open_us (mean microseconds per cudaIpcGetMemHandle and cudaIpcOpenMemHandle),
 * open_first_us (the first open alone: a process's first open of an exporter's handles),
 * stale_refused (a copy of a handle with its bytes 16-23 changed, where tessera keeps the
 * exporter's start time against PID reuse, was refused). */
#include <cuda.h>
#include <dlfcn.h>
#include <getopt.h>
#include <grp.h>
#include <stdbool.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define NBLOCKS 9

static const char *usage_text = "[--mode basic|reuse|exit] [--plain-child] [--importer-uid UID]";

typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
typedef CUresult (*ctx_fn)(CUcontext *);

static range_fn get_range;
static attr_fn get_attr;
static attrs_fn get_attrs;
static retain_fn retain;
static ctx_fn get_ctx;

static void driver_load(void) {
  void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!drv) die_msg("dlopen libcuda.so.1", dlerror());
  get_range = (range_fn)dlsym(drv, "cuMemGetAddressRange_v2");
  get_attr = (attr_fn)dlsym(drv, "cuPointerGetAttribute");
  get_attrs = (attrs_fn)dlsym(drv, "cuPointerGetAttributes");
  retain = (retain_fn)dlsym(drv, "cuMemRetainAllocationHandle");
  get_ctx = (ctx_fn)dlsym(drv, "cuCtxGetCurrent");
  if (!get_range || !get_attr || !get_attrs || !retain || !get_ctx)
    die_msg("dlsym", "a driver entry point is missing");
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static unsigned char first_of(int i) { return (unsigned char)(0xa0 + i); }
static unsigned char middle_of(int i) { return (unsigned char)(0xc0 + i); }
static unsigned char last_of(int i) { return (unsigned char)(0xb0 + i); }
static unsigned char back_of(int i) { return (unsigned char)(0xd0 + i); }

static void put_byte(void *p, size_t off, unsigned char v) {
  CHECK(cudaMemcpy((char *)p + off, &v, 1, cudaMemcpyHostToDevice));
}

static unsigned char get_byte(const void *p, size_t off) {
  unsigned char v;
  CHECK(cudaMemcpy(&v, (const char *)p + off, 1, cudaMemcpyDeviceToHost));
  return v;
}

static void fill(void *p, size_t size, int i) {
  CHECK(cudaMemset(p, 0x40 + i, size));
  put_byte(p, 0, first_of(i));
  put_byte(p, size / 2, middle_of(i));
  put_byte(p, size - 1, last_of(i));
}

/* The driver's answers about the middle of block p (size bytes), as for a cudaMalloc of size:
 * how many are not the block's. *id gets its buffer id. */
/* The names of the pointer-query checks that failed, for every block together: when a driver
 * answers differently from what is expected here, the RESULT line says which answer differs. */
static char attr_why[512];

static void attr_note(int failed, const char *name, int *bad) {
  if (!failed) return;
  (*bad)++;
  if (strstr(attr_why, name)) return;
  size_t n = strlen(attr_why);
  snprintf(attr_why + n, sizeof attr_why - n, "%s%s", n ? "," : "", name);
}

static int attributes_bad(void *p, size_t size, unsigned long long *id) {
  int bad = 0;
  CUdeviceptr mid = (CUdeviceptr)(uintptr_t)p + size / 2, base = 0;
  size_t range = 0;
  int rc = get_range(&base, &range, mid);
  attr_note(rc != CUDA_SUCCESS || base != (CUdeviceptr)(uintptr_t)p, "range_base", &bad);
  attr_note(rc != CUDA_SUCCESS || range != size, "range_size", &bad);
  if (rc == CUDA_SUCCESS && range != size)
    printf("attr: block of %zu bytes: cuMemGetAddressRange size %zu\n", size, range);
  void *start = NULL;
  size_t rsize = 0;
  unsigned int type = 0;
  int ordinal = -1;
  bool legacy = false, mapped = false;
  unsigned long long handles = 99;
  CUcontext ctx = NULL, cur = NULL;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_MAPPED,
                                 CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                                 CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *data[] = {&start, &rsize, &type, &ordinal, &legacy, &mapped, &handles, &ctx, id};
  attr_note(get_attrs(9, attrs, data, mid) != CUDA_SUCCESS, "attrs_call", &bad);
  attr_note(get_ctx(&cur) != CUDA_SUCCESS, "ctx_call", &bad);
  attr_note(start != p, "start", &bad);
  attr_note(rsize != size, "size", &bad);
  attr_note(type != CU_MEMORYTYPE_DEVICE, "type", &bad);
  attr_note(ordinal != 0, "ordinal", &bad);
  attr_note(!legacy, "legacy_ipc", &bad);
  attr_note(!mapped, "mapped", &bad);
  attr_note(handles != 0, "handle_types", &bad);
  if (handles != 0) printf("attr: block of %zu bytes: allowed handle types %#llx\n", size, handles);
  attr_note(ctx != cur, "context", &bad);
  void *start1 = NULL;
  size_t size1 = 0;
  attr_note(get_attr(&start1, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, mid) != CUDA_SUCCESS ||
                start1 != p,
            "start_one", &bad);
  attr_note(get_attr(&size1, CU_POINTER_ATTRIBUTE_RANGE_SIZE, mid) != CUDA_SUCCESS || size1 != size,
            "size_one", &bad);
  struct cudaPointerAttributes pa;
  attr_note(cudaPointerGetAttributes(&pa, (char *)p + size / 2) != cudaSuccess ||
                pa.type != cudaMemoryTypeDevice || pa.device != 0 ||
                pa.devicePointer != (char *)p + size / 2,
            "runtime_attrs", &bad);
  /* cudaMalloc memory has no virtual-memory handle to retain */
  CUmemGenericAllocationHandle h;
  attr_note(retain(&h, (char *)p + size / 2) == CUDA_SUCCESS, "retain", &bad);
  return bad;
}

static void hex(const void *v, size_t n, char *out) {
  const unsigned char *b = (const unsigned char *)v;
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int unhex(const char *s, void *v, size_t n) {
  unsigned char *b = (unsigned char *)v;
  for (size_t i = 0; i < n; i++) {
    unsigned x;
    if (sscanf(s + 2 * i, "%2x", &x) != 1) return -1;
    b[i] = (unsigned char)x;
  }
  return 0;
}

/* ---- the importer ------------------------------------------------------------------------ */

static int importer(void) {
  char line[512];
  void *ptrs[NBLOCKS];
  size_t sizes[NBLOCKS];
  int n = 0, opened = 0, failed = 0, bad = 0, stale_refused = -1;
  double open_us = 0, first_us = 0;
  CHECK(cudaSetDevice(0));
  while (n < NBLOCKS && fgets(line, sizeof line, stdin)) {
    int i;
    char hx[2 * sizeof(cudaIpcMemHandle_t) + 1];
    unsigned long long size;
    if (sscanf(line, "%d %llu %128s", &i, &size, hx) != 3 || i != n) break;
    cudaIpcMemHandle_t h;
    if (unhex(hx, &h, sizeof h) != 0) break;
    sizes[n] = (size_t)size;
    ptrs[n] = NULL;
    double t0 = now_us();
    cudaError_t opened_err = cudaIpcOpenMemHandle(&ptrs[n], h, cudaIpcMemLazyEnablePeerAccess);
    open_us += now_us() - t0;
    if (n == 0) first_us = now_us() - t0;
    if (opened_err != cudaSuccess) {
      (void)cudaGetLastError();
      ptrs[n] = NULL;
      failed++;
    } else {
      opened++;
      if (n == 0) {
        /* a stale handle: the same exporter pid, another start time (its pid reused) */
        cudaIpcMemHandle_t old = h;
        old.reserved[16] ^= 0x5a;
        void *gone = NULL;
        stale_refused = cudaIpcOpenMemHandle(&gone, old, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess;
        if (!stale_refused) CHECK(cudaIpcCloseMemHandle(gone));
        (void)cudaGetLastError();
        /* the same handle opened twice: the same mapping, closed twice */
        void *again = NULL;
        if (cudaIpcOpenMemHandle(&again, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess ||
            again != ptrs[0])
          bad++;
        else
          CHECK(cudaIpcCloseMemHandle(again));
      }
      bad += get_byte(ptrs[n], 0) != first_of(n);
      bad += get_byte(ptrs[n], sizes[n] / 2) != middle_of(n);
      bad += get_byte(ptrs[n], sizes[n] - 1) != last_of(n);
      put_byte(ptrs[n], sizes[n] - 1, back_of(n));
    }
    n++;
  }
  printf("opened %d failed %d bad %d open_us %.1f stale %d first_us %.1f\n", opened, failed, bad,
         n ? open_us / n : 0.0, stale_refused, first_us);
  fflush(stdout);
  /* the parent's next word: check (the blocks again, then close), or exit */
  if (!fgets(line, sizeof line, stdin)) line[0] = '\0';
  bool orphan = strncmp(line, "exit", 4) == 0;
  if (orphan) /* the exporter is going away: check once it is gone (its end of the pipe closed) */
    while (fgets(line, sizeof line, stdin) != NULL) {
    }
  int later_bad = 0;
  for (int i = 0; i < n; i++) {
    if (!ptrs[i]) continue;
    later_bad += get_byte(ptrs[i], 0) != first_of(i);
    later_bad += get_byte(ptrs[i], sizes[i] - 1) != back_of(i);
    put_byte(ptrs[i], sizes[i] / 2, (unsigned char)(middle_of(i) + 1));
    later_bad += get_byte(ptrs[i], sizes[i] / 2) != (unsigned char)(middle_of(i) + 1);
  }
  for (int i = 0; i < n; i++)
    if (ptrs[i]) CHECK(cudaIpcCloseMemHandle(ptrs[i]));
  if (orphan) {
    fprintf(stderr, "importer: later_bad=%d\n", later_bad);
  } else {
    printf("checked %d\n", later_bad);
    fflush(stdout);
  }
  return 0;
}

/* ---- the exporter ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  prog_init();
  const char *mode = "basic";
  bool plain_child = false, child = false;
  long importer_uid = -1;
  int c;
  static const struct option opts[] = {{"mode", required_argument, NULL, 'm'},
                                       {"plain-child", no_argument, NULL, 'p'},
                                       {"importer", no_argument, NULL, 'i'},
                                       {"importer-uid", required_argument, NULL, 'u'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': mode = optarg; break;
    case 'p': plain_child = true; break;
    case 'i': child = true; break;
    case 'u': importer_uid = strtol(optarg, NULL, 10); break;
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  driver_load();
  if (child) return importer();
  if (strcmp(mode, "basic") && strcmp(mode, "reuse") && strcmp(mode, "exit"))
    bad_usage(argv[0], usage_text);

  static const size_t sizes[NBLOCKS - 1] = {512, 4000, 100 * KiB, MiB + 1,
                                            3 * MiB, 12 * MiB, 30 * MiB, 64 * MiB};
  void *blocks[NBLOCKS];
  size_t bsize[NBLOCKS];
  /* holes first: 8 blocks of 2 MiB carved from the memory of one 16 MiB block freed before
   * (one piece of physical memory for an allocator that keeps it so), every other one freed
   * once the rest is allocated */
  void *holes[8], *whole;
  CHECK(cudaMalloc(&whole, 16 * MiB));
  CHECK(cudaFree(whole));
  for (int i = 0; i < 8; i++) CHECK(cudaMalloc(&holes[i], 2 * MiB));
  for (int i = 0; i < NBLOCKS - 1; i++) {
    bsize[i] = sizes[i];
    CHECK(cudaMalloc(&blocks[i], sizes[i]));
  }
  for (int i = 0; i < 8; i += 2) CHECK(cudaFree(holes[i]));
  bsize[NBLOCKS - 1] = 6 * MiB;
  CHECK(cudaMalloc(&blocks[NBLOCKS - 1], bsize[NBLOCKS - 1]));
  for (int i = 0; i < NBLOCKS; i++) fill(blocks[i], bsize[i], i);

  int attr_bad = 0, distinct = 0;
  unsigned long long ids[NBLOCKS];
  for (int i = 0; i < NBLOCKS; i++) {
    attr_bad += attributes_bad(blocks[i], bsize[i], &ids[i]);
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= ids[j] == ids[i];
    distinct += !dup;
  }

  /* export: the pointer, the base of a range query on its middle, or an interior pointer */
  cudaIpcMemHandle_t handles[NBLOCKS];
  double export_us = 0;
  for (int i = 0; i < NBLOCKS; i++) {
    void *what = blocks[i];
    if (i % 3 == 1) {
      CUdeviceptr base = 0;
      size_t range = 0;
      if (get_range(&base, &range, (CUdeviceptr)(uintptr_t)blocks[i] + bsize[i] / 2) ==
          CUDA_SUCCESS)
        what = (void *)(uintptr_t)base;
    } else if (i % 3 == 2) {
      what = (char *)blocks[i] + bsize[i] - 1;
    }
    double t0 = now_us();
    CHECK(cudaIpcGetMemHandle(&handles[i], what));
    double took = now_us() - t0;
    export_us += took;
    printf("export: block %d of %zu bytes: %.1f us\n", i, bsize[i], took);
  }
  cudaIpcMemHandle_t again;
  CHECK(cudaIpcGetMemHandle(&again, blocks[3]));
  int same_handle = memcmp(&again, &handles[3], sizeof again) == 0;
  void *own = NULL;
  cudaError_t own_err = cudaIpcOpenMemHandle(&own, handles[0], cudaIpcMemLazyEnablePeerAccess);
  (void)cudaGetLastError();

  /* the importer: this program again, talking over two pipes */
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) die_msg("pipe", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die_msg("fork", strerror(errno));
  if (pid == 0) {
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    close(to_child[1]);
    close(from_child[0]);
    if (plain_child) unsetenv("LD_PRELOAD");
    if (importer_uid >= 0 && (setgroups(0, NULL) != 0 || setgid((gid_t)importer_uid) != 0 ||
                              setuid((uid_t)importer_uid) != 0))
      _exit(126);
    execl("/proc/self/exe", argv[0], "--importer", (char *)NULL);
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE *out = fdopen(to_child[1], "w"), *in = fdopen(from_child[0], "r");
  for (int i = 0; i < NBLOCKS; i++) {
    char hx[2 * sizeof(cudaIpcMemHandle_t) + 1];
    hex(&handles[i], sizeof handles[i], hx);
    fprintf(out, "%d %zu %s\n", i, bsize[i], hx);
  }
  fflush(out);
  char line[256];
  int opened = -1, failed = -1, bytes_bad = -1;
  double open_us = 0;
  int stale = -1;
  double open_first_us = 0;
  if (!fgets(line, sizeof line, in) ||
      sscanf(line, "opened %d failed %d bad %d open_us %lf stale %d first_us %lf", &opened, &failed,
             &bytes_bad, &open_us, &stale, &open_first_us) != 6)
    die_msg("importer", "no report");
  int seen_back = 0;
  for (int i = 0; i < NBLOCKS; i++) seen_back += get_byte(blocks[i], bsize[i] - 1) == back_of(i);

  int held_ok = -1;
  if (strcmp(mode, "exit") == 0) {
    fprintf(out, "exit\n");
    fflush(out);
  } else {
    void *fresh[NBLOCKS];
    if (strcmp(mode, "reuse") == 0) { /* free under the importer, allocate the same again */
      for (int i = 0; i < NBLOCKS; i++) CHECK(cudaFree(blocks[i]));
      for (int i = 0; i < NBLOCKS; i++) {
        CHECK(cudaMalloc(&fresh[i], bsize[i]));
        CHECK(cudaMemset(fresh[i], 0x11, bsize[i]));
      }
    }
    fprintf(out, "check\n");
    fflush(out);
    int later_bad = -1;
    if (!fgets(line, sizeof line, in) || sscanf(line, "checked %d", &later_bad) != 1)
      die_msg("importer", "no second report");
    held_ok = later_bad == 0;
    if (strcmp(mode, "reuse") == 0) {
      /* closed now: the memory may come back */
      for (int i = 0; i < NBLOCKS; i++) CHECK(cudaFree(fresh[i]));
      for (int i = 0; i < NBLOCKS; i++) CHECK(cudaMalloc(&fresh[i], bsize[i]));
      for (int i = 0; i < NBLOCKS; i++) CHECK(cudaFree(fresh[i]));
    } else {
      for (int i = 0; i < NBLOCKS; i++) CHECK(cudaFree(blocks[i]));
    }
  }
  fclose(out);
  if (strcmp(mode, "exit") != 0) {
    for (int i = 1; i < 8; i += 2) CHECK(cudaFree(holes[i]));
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die_msg("importer", "did not exit cleanly");
  }
  printf("RESULT status=ok pid=%d blocks=%d attr_bad=%d attr_why=%s ids=%d same_handle=%d own_open=%s opened=%d "
         "open_failed=%d bytes_bad=%d seen_back=%d held_ok=%d export_us=%.1f open_us=%.1f "
         "stale_refused=%d open_first_us=%.1f\n",
         (int)getpid(), NBLOCKS, attr_bad, attr_why[0] ? attr_why : "none", distinct, same_handle, cudaGetErrorName(own_err), opened, failed,
         bytes_bad, seen_back, held_ok, export_us / NBLOCKS, open_us, stale, open_first_us);
  return 0;
}
