/* IPC memory handles between two processes. The handle names the allocation that contains
 * the pointer (its base), as the real driver does; a process cannot open its own handles. */
#include <string.h>

#include "drv.h"
#include "child.h"

static void hex(const void *p, size_t n, char *out)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void unhex(const char *s, void *p, size_t n)
{
    unsigned char *b = p;
    CHECK(strlen(s) == 2 * n);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        CHECK(sscanf(s + 2 * i, "%2x", &v) == 1);
        b[i] = (unsigned char)v;
    }
}

static int child(const char *hexhandle)
{
    CUipcMemHandle h;
    unhex(hexhandle, &h, sizeof h);
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
    hex(&hbase, sizeof hbase, text);
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

int main(int argc, char **argv)
{
    alarm(60);
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);
    RUN(test_ipc_between_processes);
    return 0;
}
