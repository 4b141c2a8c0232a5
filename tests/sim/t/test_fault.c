/* Fault injection: TESSERA_SIM_FAIL_ALLOC_AFTER=3 TESSERA_SIM_FAIL_MAP_AFTER=2. */
#include <string.h>

#include "drv.h"

static void test_nth_allocation_fails(void)
{
    drv_setup(0);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUdeviceptr a, b, c, d;
    CUmemGenericAllocationHandle h;
    EXPECT(cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE); /* refused calls do not count */
    CU(cuMemAlloc(&a, 1000));                           /* #1 */
    CU(cuMemAllocAsync(&b, 1000, NULL));                /* #2 */
    EXPECT(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY); /* #3 */
    CU(cuMemCreate(&h, 2 * MiB, &prop, 0));             /* #4: only the third one fails */
    CU(cuMemAlloc(&c, 1000));                           /* #5 */
    CU(cuMemAlloc(&d, 1000));
    struct tessera_sim_counters k = counters(0);
    CHECK_EQ(k.failed_allocs, 1);
    CHECK_EQ(k.alloc_calls, 4);
    CHECK_EQ(k.create_calls, 1);

    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
    CU(cuMemMap(va, 2 * MiB, 0, h, 0));                 /* map #1 */
    CU(cuMemUnmap(va, 2 * MiB));
    EXPECT(cuMemMap(va, 2 * MiB, 0, h, 0), CUDA_ERROR_OUT_OF_MEMORY); /* map #2 */
    CHECK(!probe_readable((void *)(uintptr_t)va));
    CU(cuMemMap(va, 2 * MiB, 0, h, 0));                 /* map #3 */
    CHECK_EQ(counters(0).map_calls, 2);
    CU(cuMemUnmap(va, 2 * MiB));
    CU(cuMemRelease(h));
    CU(cuMemAddressFree(va, 2 * MiB));
    CU(cuMemFree(a));
    CU(cuMemFreeAsync(b, NULL));
    CU(cuMemFree(c));
    CU(cuMemFree(d));
    CU(cuCtxSynchronize());
    CHECK_EQ(counters(0).live_allocations, 0);
}

int main(void)
{
    alarm(60);
    RUN(test_nth_allocation_fails);
    return 0;
}
