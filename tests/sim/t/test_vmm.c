/* Virtual memory management done with real mappings. Run with TESSERA_SIM_MEMORY=1G. */
#include <string.h>

#include "drv.h"

static CUmemAllocationProp prop0(void) { return drv_vmm_prop(0); }

static void set_rw(CUdeviceptr va, size_t size)
{
    drv_set_access(va, size, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static void test_granularity(void)
{
    drv_setup(0);
    CUmemAllocationProp p = prop0();
    size_t g = 0;
    CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK_EQ(g, 2 * MiB);
    g = 0;
    CU(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK_EQ(g, 2 * MiB);
    p.location.id = 3;
    EXPECT(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_ERROR_INVALID_DEVICE);
}

static void test_aliasing(void)
{
    drv_setup(0);
    CUmemAllocationProp p = prop0();
    CUmemGenericAllocationHandle h;
    EXPECT(cuMemCreate(&h, 3 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemCreate(&h, 4 * MiB, &p, 0));
    size_t free_b, total_b;
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB - 4 * MiB); /* physical pages are taken at cuMemCreate */
    struct tessera_sim_counters c = counters(0);
    CHECK_EQ(c.create_calls, 1);
    CHECK_EQ(c.live_handles, 1);
    CHECK_EQ(c.bytes_in_use, 4 * MiB);

    CUdeviceptr va1, va2;
    EXPECT(cuMemAddressReserve(&va1, 3 * MiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemAddressReserve(&va1, 4 * MiB, 0, 0, 0));
    CU(cuMemAddressReserve(&va2, 8 * MiB, 0, 0, 0));
    CHECK_EQ(va1 % (2 * MiB), 0);
    CHECK(!probe_readable((void *)(uintptr_t)va1));
    EXPECT(cuMemMap(va1 + 4096, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemMap(va1, 4 * MiB, 2 * MiB, h, 0), CUDA_ERROR_INVALID_VALUE); /* past the handle */
    EXPECT(cuMemMap(va1, 8 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);       /* past the reservation */
    CU(cuMemMap(va1, 4 * MiB, 0, h, 0));
    EXPECT(cuMemMap(va1 + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED); /* already mapped */
    CU(cuMemMap(va2 + 2 * MiB, 4 * MiB, 0, h, 0));
    CHECK_EQ(counters(0).map_calls, 2);

    /* mapped but no access granted yet: faults, and copies are refused */
    unsigned char *a = (unsigned char *)(uintptr_t)va1, *b = (unsigned char *)(uintptr_t)(va2 + 2 * MiB);
    CHECK(!probe_readable(a));
    char src[64];
    memset(src, 0x11, sizeof src);
    EXPECT(cuMemcpyHtoD(va1, src, sizeof src), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base;
    size_t size;
    EXPECT(cuMemGetAddressRange(&base, &size, va1), CUDA_ERROR_NOT_FOUND); /* as on an H100 */

    CHECK_EQ(counters(0).set_access_calls, 0);
    set_rw(va1, 4 * MiB);
    CHECK_EQ(counters(0).set_access_calls, 1);
    CHECK(probe_writable(a) && probe_writable(a + 4 * MiB - 1));
    CHECK(!probe_readable(b));
    a[0] = 0xab;
    a[3 * MiB] = 0xcd;
    set_rw(va2 + 2 * MiB, 4 * MiB);
    CHECK_EQ(b[0], 0xab); /* one handle, two mappings, same bytes */
    CHECK_EQ(b[3 * MiB], 0xcd);
    b[100] = 0x42;
    CHECK_EQ(a[100], 0x42);
    CU(cuMemcpyHtoD(va2 + 2 * MiB + 200, src, sizeof src));
    CHECK_EQ(a[200], 0x11);
    CHECK_EQ(a[263], 0x11);
    char back[64];
    CU(cuMemcpyDtoH(back, va1 + 200, sizeof back));
    CHECK(memcmp(back, src, sizeof src) == 0);
    /* copies may span the whole mapped range, not past it */
    EXPECT(cuMemcpyDtoH(back, va1 + 4 * MiB - 32, sizeof back), CUDA_ERROR_INVALID_VALUE);

    CU(cuMemGetAddressRange(&base, &size, va1 + 12345));
    CHECK_EQ(base, va1);
    CHECK_EQ(size, 4 * MiB);
    unsigned int type = 0;
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va2 + 3 * MiB));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    int ord = -1;
    CU(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va2 + 3 * MiB));
    CHECK_EQ(ord, 0);
    /* the mapping for cuMemGetAddressRange, the reservation for the RANGE attributes */
    CU(cuMemGetAddressRange(&base, &size, va2 + 3 * MiB));
    CHECK_EQ(base, va2 + 2 * MiB);
    CHECK_EQ(size, 4 * MiB);
    void *start = NULL;
    size_t rsize = 0;
    CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va2 + 3 * MiB));
    CU(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va2 + 3 * MiB));
    CHECK_EQ((uintptr_t)start, va2);
    CHECK_EQ(rsize, 8 * MiB);
    CUcontext pctx = (CUcontext)1;
    CU(cuPointerGetAttribute(&pctx, CU_POINTER_ATTRIBUTE_CONTEXT, va2 + 3 * MiB));
    CHECK(pctx == NULL); /* VMM memory belongs to no context */
    /* the host-memory queries answer for mapped memory, as an H100 (driver 580) answers: flags
     * PORTABLE | DEVICEMAP and the start of the mapping; a cuMemAlloc pointer is refused */
    unsigned int hflags = 0;
    CU(cuMemHostGetFlags(&hflags, (void *)(uintptr_t)(va2 + 3 * MiB)));
    CHECK_EQ(hflags, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    CUdeviceptr hdev = 0;
    CU(cuMemHostGetDevicePointer(&hdev, (void *)(uintptr_t)(va2 + 3 * MiB), 0));
    CHECK_EQ(hdev, va2 + 2 * MiB);
    CUdeviceptr plain_dev;
    CU(cuMemAlloc(&plain_dev, 4096));
    EXPECT(cuMemHostGetFlags(&hflags, (void *)(uintptr_t)plain_dev), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemFree(plain_dev));
    EXPECT(cuMemFree(va1), CUDA_ERROR_INVALID_VALUE); /* not a cuMemAlloc allocation */

    /* access and unmapping take whole mappings, as on an H100 */
    CUmemAccessDesc none;
    memset(&none, 0, sizeof none);
    none.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    none.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    EXPECT(cuMemSetAccess(va1 + 2 * MiB, 2 * MiB, &none, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemSetAccess(va1, 2 * MiB, &none, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(probe_readable(a + 2 * MiB));
    EXPECT(cuMemUnmap(va1, 2 * MiB), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAddressFree(va1, 4 * MiB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CU(cuMemUnmap(va1, 4 * MiB));
    CHECK(!probe_readable(a));
    EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va1), CUDA_ERROR_INVALID_VALUE);
    CU(cuMemAddressFree(va1, 4 * MiB));
    EXPECT(cuMemAddressFree(va1, 4 * MiB), CUDA_ERROR_INVALID_VALUE);

    /* release while mapped: the memory lives until the last unmap */
    CU(cuMemRelease(h));
    EXPECT(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    c = counters(0);
    CHECK_EQ(c.release_calls, 1);
    CHECK_EQ(c.live_handles, 1);
    CHECK_EQ(c.bytes_in_use, 4 * MiB);
    CHECK_EQ(b[0], 0xab);
    CHECK_EQ(b[100], 0x42);
    EXPECT(cuMemMap(va2, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* released handle */
    CU(cuMemUnmap(va2 + 2 * MiB, 4 * MiB));
    c = counters(0);
    CHECK_EQ(c.unmap_calls, 2);
    CHECK_EQ(c.live_handles, 0);
    CHECK_EQ(c.bytes_in_use, 0);
    CU(cuMemGetInfo(&free_b, &total_b));
    CHECK_EQ(free_b, GiB);
    CU(cuMemAddressFree(va2, 8 * MiB));
}

static void test_reserve_placement(void)
{
    drv_setup(0);
    CUdeviceptr r, r2;
    CU(cuMemAddressReserve(&r, 16 * MiB, 0, 0, 0));
    CU(cuMemAddressFree(r, 16 * MiB));
    CU(cuMemAddressReserve(&r2, 16 * MiB, 0, r, 0)); /* the hint is honoured when free */
    CHECK_EQ(r2, r);
    CUdeviceptr r3;
    CU(cuMemAddressReserve(&r3, 2 * MiB, 0, r, 0)); /* taken: placed elsewhere */
    CHECK(r3 != r);
    CU(cuMemAddressFree(r3, 2 * MiB));
    CU(cuMemAddressFree(r2, 16 * MiB));
    CUdeviceptr big;
    CU(cuMemAddressReserve(&big, 2 * MiB, GiB, 0, 0));
    CHECK_EQ(big % GiB, 0);
    CU(cuMemAddressFree(big, 2 * MiB));
    EXPECT(cuMemAddressReserve(&big, 2 * MiB, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

static void test_several_handles(void)
{
    /* a reservation backed by several handles behaves as one contiguous range */
    drv_setup(0);
    CUmemAllocationProp p = prop0();
    CUmemGenericAllocationHandle h[3];
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, 6 * MiB, 0, 0, 0));
    for (int i = 0; i < 3; i++) {
        CU(cuMemCreate(&h[i], 2 * MiB, &p, 0));
        CU(cuMemMap(va + (size_t)i * 2 * MiB, 2 * MiB, 0, h[i], 0));
        CU(cuMemRelease(h[i]));
    }
    const uint64_t granted = counters(0).set_access_calls;
    set_rw(va, 6 * MiB); /* three whole mappings in one call */
    CHECK_EQ(counters(0).set_access_calls, granted + 1);
    CU(cuMemsetD32(va, 0x01020304u, 6 * MiB / 4));
    CHECK_EQ(((uint32_t *)(uintptr_t)va)[6 * MiB / 4 - 1], 0x01020304u);
    CUdeviceptr dst;
    CU(cuMemAlloc(&dst, 6 * MiB));
    CU(cuMemcpyDtoD(dst, va, 6 * MiB));
    CHECK_EQ(((uint32_t *)(uintptr_t)dst)[1000], 0x01020304u);
    CU(cuMemFree(dst));
    CHECK_EQ(counters(0).live_handles, 3);
    CU(cuMemUnmap(va, 6 * MiB)); /* three whole mappings at once */
    CHECK_EQ(counters(0).live_handles, 0);
    CU(cuMemAddressFree(va, 6 * MiB));

    /* cuMemCreate draws from the same page budget as cuMemAlloc */
    CUmemGenericAllocationHandle big;
    EXPECT(cuMemCreate(&big, 2 * GiB, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU(cuMemCreate(&big, GiB, &p, 0));
    CUdeviceptr x;
    EXPECT(cuMemAlloc(&x, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU(cuMemRelease(big));
    CU(cuMemAlloc(&x, 1));
    CU(cuMemFree(x));
}

int main(void)
{
    alarm(60);
    RUN(test_granularity);
    RUN(test_aliasing);
    RUN(test_reserve_placement);
    RUN(test_several_handles);
    return 0;
}
