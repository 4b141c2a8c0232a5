/* IPC memory handles between two processes. The handle names the allocation that contains
 * the pointer (its base), as the real driver does; a process cannot open its own handles.
 * Virtual memory shared as POSIX file descriptors: exported, taken by another process with
 * pidfd_getfd, imported, mapped; the memory lives while any process maps it. */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "drv.h"
#include "child.h"

static int child(const char *hexhandle)
{
    CUipcMemHandle h;
    hex_decode(hexhandle, &h, sizeof h);
    drv_setup(0);
    CUdeviceptr p, p2;
    CU(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    unsigned char *b = (unsigned char *)(uintptr_t)p;
    for (int i = 0; i < 16; i++)
        CHECK_EQ(b[i], 0x10 + i); /* the base of the exporter's allocation */
    CHECK_EQ(b[MiB], 0x5b);
    CHECK_EQ(b[3 * MiB - 1], 0x3e);
    size_t size = 0;
    CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 5));
    CHECK_EQ(size, 3 * MiB);
    unsigned int type = 0;
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_EQ(counters(0).bytes_in_use, 0); /* the exporter's memory, not ours */
    CU(cuMemsetD8(p, 0xee, 16));
    CU(cuIpcOpenMemHandle(&p2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_EQ(p2, p); /* opened twice: same mapping, counted */
    CU(cuIpcCloseMemHandle(p));
    CHECK(probe_readable(b));
    CU(cuIpcCloseMemHandle(p));
    CHECK(!probe_readable(b));
    EXPECT(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    return 0;
}

static void test_ipc_between_processes(void)
{
    drv_setup(0);
    CUdeviceptr pad, a;
    CU(cuMemAlloc(&pad, 1000)); /* so the allocation does not sit at the range start */
    CU(cuMemAlloc(&a, 3 * MiB));
    unsigned char *b = (unsigned char *)(uintptr_t)a;
    for (int i = 0; i < 16; i++)
        b[i] = (unsigned char)(0x10 + i);
    b[MiB] = 0x5b;
    b[3 * MiB - 1] = 0x3e;

    CUipcMemHandle h, hbase;
    CU(cuIpcGetMemHandle(&h, a + MiB + 123)); /* a pointer inside the allocation */
    CU(cuIpcGetMemHandle(&hbase, a));
    CHECK(memcmp(&h, &hbase, sizeof h) == 0);
    CUdeviceptr x;
    EXPECT(cuIpcOpenMemHandle(&x, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
    int host_var;
    EXPECT(cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)&host_var), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr pool;
    CU(cuMemAllocAsync(&pool, 100, NULL));
    EXPECT(cuIpcGetMemHandle(&h, pool), CUDA_ERROR_INVALID_VALUE); /* pool memory: no legacy IPC */
    CU(cuMemFreeAsync(pool, NULL));
    CUipcMemHandle junk;
    memset(&junk, 0x7f, sizeof junk);
    EXPECT(cuIpcOpenMemHandle(&x, junk, 0), CUDA_ERROR_INVALID_VALUE);

    char text[2 * sizeof(CUipcMemHandle) + 1];
    hex_encode(&hbase, sizeof hbase, text);
    const char *args[] = {"child", text, NULL};
    const char *env[] = {"TESSERA_SIM_MEMORY=1G", NULL};
    struct child_result res;
    spawn_self(args, env, &res);
    CHECK_CHILD_OK(&res);
    for (int i = 0; i < 16; i++)
        CHECK_EQ(b[i], 0xee); /* written by the other process */
    CHECK_EQ(b[16], 0);
    CHECK_EQ(b[MiB], 0x5b);
    CU(cuMemFree(a));
    CU(cuMemFree(pad));
}

/* the importer: take descriptor fd of process pid, import, map 4 MiB, check and write */
static int fd_child(const char *pid_s, const char *fd_s)
{
    drv_setup(0);
    int pidfd = (int)syscall(SYS_pidfd_open, atoi(pid_s), 0);
    CHECK(pidfd >= 0);
    int fd = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(fd_s), 0);
    CHECK(fd >= 0);
    CUmemGenericAllocationHandle h;
    EXPECT(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)0x7fff,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           CUDA_ERROR_INVALID_HANDLE);
    CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    CU(cuMemMap(va, 4 * MiB, 0, h, 0));
    CU(cuMemRelease(h));
    drv_set_access(va, 4 * MiB, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    unsigned char *b = (unsigned char *)(uintptr_t)va;
    CHECK_EQ(b[0], 0x3c);
    CHECK_EQ(b[4 * MiB - 1], 0x3d);
    CHECK_EQ(counters(0).bytes_in_use, 0); /* the exporter's memory, not this process's */
    b[1] = 0x77;
    CU(cuMemUnmap(va, 4 * MiB));
    CU(cuMemAddressFree(va, 4 * MiB));
    CHECK_EQ(counters(0).bytes_in_use, 0); /* nothing was charged, nothing is given back */
    CHECK_EQ(counters(0).live_handles, 0);
    return 0;
}

static void test_shareable_descriptors(void)
{
    drv_setup(0);
    CUmemAllocationProp p = drv_vmm_prop(0), plain = p;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle h, noexport, again;
    CU(cuMemCreate(&h, 4 * MiB, &p, 0));
    CU(cuMemCreate(&noexport, 2 * MiB, &plain, 0));
    int fd = -1;
    EXPECT(cuMemExportToShareableHandle(&fd, noexport, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
           CUDA_ERROR_NOT_PERMITTED);
    CU(cuMemRelease(noexport));
    CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd >= 0);
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    CU(cuMemMap(va, 4 * MiB, 0, h, 0));
    CU(cuMemRelease(h)); /* the mapping keeps it */
    drv_set_access(va, 4 * MiB, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    unsigned char *b = (unsigned char *)(uintptr_t)va;
    b[0] = 0x3c;
    b[4 * MiB - 1] = 0x3d;
    /* cuMemRetainAllocationHandle: the mapped handle, one more reference; none for cuMemAlloc */
    CU(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + MiB)));
    CU(cuMemRelease(again));
    CUdeviceptr d;
    CU(cuMemAlloc(&d, MiB));
    EXPECT(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree(d));
    unsigned long long types = 0;
    CU(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va));
    CHECK_EQ(types, (unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

    char pid_s[16], fd_s[16];
    snprintf(pid_s, sizeof pid_s, "%d", (int)getpid());
    snprintf(fd_s, sizeof fd_s, "%d", fd);
    const char *args[] = {"fdchild", pid_s, fd_s, NULL};
    const char *env[] = {"TESSERA_SIM_MEMORY=1G", NULL};
    struct child_result res;
    spawn_self(args, env, &res);
    CHECK_CHILD_OK(&res);
    CHECK_EQ(b[1], 0x77); /* written by the other process */
    close(fd);
    CU(cuMemUnmap(va, 4 * MiB));
    CU(cuMemAddressFree(va, 4 * MiB));
    CHECK_EQ(counters(0).live_handles, 0);
}

int main(int argc, char **argv)
{
    alarm(60);
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);
    if (argc == 4 && strcmp(argv[1], "fdchild") == 0)
        return fd_child(argv[2], argv[3]);
    RUN(test_ipc_between_processes);
    RUN(test_shareable_descriptors);
    return 0;
}
