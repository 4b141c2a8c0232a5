/* pool_ipc: a memory pool shared with another process, in the style of NVIDIA's
 * streamOrderedAllocationIPC sample.
 *
 *   pool_ipc [--size SIZE]
 *
 * The parent creates a pool that can be exported as a POSIX file descriptor
 * (cudaMemPoolCreate, handleTypes cudaMemHandleTypePosixFileDescriptor) and a second one,
 * allocates from each with cudaMallocFromPoolAsync, fills the first allocation, exports the pool
 * (cudaMemPoolExportToShareableHandle) and both allocations (cudaMemPoolExportPointer), and sends
 * the descriptor over a Unix socket (SCM_RIGHTS) to a copy of itself. The child imports the pool
 * (cudaMemPoolImportFromShareableHandle), asks its access from its device (cudaMemPoolGetAccess)
 * and sets it when missing, imports the pointer of the other pool into it (refused) and its own
 * (cudaMemPoolImportPointer), checks the parent's bytes, writes its own, and frees the pointer
 * with cudaFreeAsync (and, imported again, with cudaFree), before the parent frees its
 * allocation, as the driver requires. The parent checks the child's bytes. The default pool,
 * which cannot be exported, is tried too.
 * RESULT fields: default_export (exporting the default pool), default_ptr_export (exporting a
 * pointer of the default pool's, cudaMallocAsync), wrong_pool (importing a pointer
 * into a pool it does not come from), access (the imported pool's access from the child's device
 * before the child set it), child_saw (the parent's bytes, in the child), parent_saw (the child's
 * bytes, in the parent), child_free and child_free_sync (the child's cudaFreeAsync and cudaFree of
 * the imported pointer).
 * Exit 0 when both sides saw the other's bytes, 3 otherwise.
 */
#include <getopt.h>

#include "common.h"
#include "share.h"

static const char *usage_text = "[--size SIZE]";

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return 0;
  return 1;
}

static const char *access_name(enum cudaMemAccessFlags f) {
  return f == cudaMemAccessFlagsProtReadWrite ? "readwrite"
         : f == cudaMemAccessFlagsProtRead    ? "read"
                                              : "none";
}

static int child_main(void) {
  int fd = chan_get_fd(0);
  char line[512], mine[300], other[300];
  size_t size = 0;
  if (fd < 0 || !chan_get(0, line, sizeof line) ||
      sscanf(line, "ptr %299s other %299s size %zu", mine, other, &size) != 3)
    return 1;
  struct cudaMemPoolPtrExportData data, odata;
  if (hex_get(mine, &data, sizeof data) || hex_get(other, &odata, sizeof odata)) return 1;
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool;
  CHECK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)fd,
                                             cudaMemHandleTypePosixFileDescriptor, 0));
  close(fd);
  struct cudaMemLocation loc;
  loc.type = cudaMemLocationTypeDevice;
  loc.id = dev;
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CHECK(cudaMemPoolGetAccess(&flags, pool, &loc));
  if (flags != cudaMemAccessFlagsProtReadWrite) {
    struct cudaMemAccessDesc desc;
    desc.location = loc;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
  }
  void *ptr = NULL, *wrong = NULL;
  cudaError_t wrong_pool = cudaMemPoolImportPointer(&wrong, pool, &odata);
  (void)cudaGetLastError();
  CHECK(cudaMemPoolImportPointer(&ptr, pool, &data));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char *host = (unsigned char *)xmalloc(size);
  CHECK(cudaMemcpyAsync(host, ptr, size, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int saw = all_bytes(host, size, 0x3d);
  CHECK(cudaMemsetAsync(ptr, 0x4e, size, s));
  /* the importer frees first; its free is an unmapping, the exporter's memory stays */
  cudaError_t freed = cudaFreeAsync(ptr, s);
  CHECK(cudaStreamSynchronize(s));
  /* imported again, freed with cudaFree this time */
  void *again = NULL;
  CHECK(cudaMemPoolImportPointer(&again, pool, &data));
  cudaError_t freed_sync = cudaFree(again);
  char reply[200];
  snprintf(reply, sizeof reply, "saw %d wrong_pool %s access %s free %s free_sync %s\n", saw,
           cudaGetErrorName(wrong_pool), access_name(flags), cudaGetErrorName(freed),
           cudaGetErrorName(freed_sync));
  chan_put(0, reply);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaMemPoolDestroy(pool));
  free(host);
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
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': size = opt_size("size", optarg); break;
    case 'c': return child_main();
    case 'h': show_help(argv[0], usage_text);
    default: bad_usage(argv[0], usage_text);
    }
  }
  if (optind != argc || size == 0) bad_usage(argv[0], usage_text);

  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool, other, def;
  CHECK(cudaMemPoolCreate(&pool, &props));
  CHECK(cudaMemPoolCreate(&other, &props));
  CHECK(cudaDeviceGetDefaultMemPool(&def, dev));
  int fd = -1;
  cudaError_t default_export =
      cudaMemPoolExportToShareableHandle(&fd, def, cudaMemHandleTypePosixFileDescriptor, 0);
  (void)cudaGetLastError();

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *ptr = NULL, *optr = NULL;
  CHECK(cudaMallocFromPoolAsync(&ptr, size, pool, s));
  CHECK(cudaMallocFromPoolAsync(&optr, 4096, other, s));
  CHECK(cudaMemsetAsync(ptr, 0x3d, size, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  /* the other pool is exported too: a GPU exports no pointer of a pool before its handle */
  int ofd = -1;
  CHECK(cudaMemPoolExportToShareableHandle(&ofd, other, cudaMemHandleTypePosixFileDescriptor, 0));
  close(ofd);
  struct cudaMemPoolPtrExportData data, odata;
  CHECK(cudaMemPoolExportPointer(&data, ptr));
  CHECK(cudaMemPoolExportPointer(&odata, optr));
  /* an allocation of the default pool, which cannot be exported: nor can its pointers */
  void *dptr = NULL;
  struct cudaMemPoolPtrExportData ddata;
  CHECK(cudaMallocAsync(&dptr, 4096, s));
  cudaError_t default_ptr_export = cudaMemPoolExportPointer(&ddata, dptr);
  (void)cudaGetLastError();
  CHECK(cudaFreeAsync(dptr, s));

  int chan;
  char *cargv[] = {argv[0], (char *)"--child", NULL};
  pid_t pid = chan_spawn(cargv, &chan);
  if (chan_put_fd(chan, fd) != 0) die_msg("sendmsg", strerror(errno));
  close(fd);
  char dtext[2 * sizeof data + 1], otext[2 * sizeof odata + 1], msg[700], line[300];
  hex_put(&data, sizeof data, dtext);
  hex_put(&odata, sizeof odata, otext);
  snprintf(msg, sizeof msg, "ptr %s other %s size %zu\n", dtext, otext, size);
  chan_put(chan, msg);
  int child_saw = -1;
  char wrong_pool[64] = "none", access[32] = "none", child_free[64] = "none",
       child_free_sync[64] = "none";
  if (!chan_get(chan, line, sizeof line) ||
      sscanf(line, "saw %d wrong_pool %63s access %31s free %63s free_sync %63s", &child_saw,
             wrong_pool, access, child_free, child_free_sync) != 5)
    die_msg("child", "no report");
  int child_exit = chan_wait(pid);
  close(chan);

  unsigned char *host = (unsigned char *)xmalloc(size);
  CHECK(cudaMemcpyAsync(host, ptr, size, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int parent_saw = all_bytes(host, size, 0x4e);
  CHECK(cudaFreeAsync(ptr, s));
  CHECK(cudaFreeAsync(optr, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaMemPoolDestroy(other));
  free(host);
  int ok = child_saw == 1 && parent_saw == 1 && child_exit == 0;
  printf("RESULT status=%s default_export=%s default_ptr_export=%s wrong_pool=%s access=%s "
         "child_saw=%d parent_saw=%d child_free=%s child_free_sync=%s child_exit=%d\n",
         ok ? "ok" : "corrupt", cudaGetErrorName(default_export),
         cudaGetErrorName(default_ptr_export), wrong_pool, access, child_saw,
         parent_saw, child_free, child_free_sync, child_exit);
  return ok ? EXIT_WORKLOAD_OK : EXIT_CORRUPTION;
}
