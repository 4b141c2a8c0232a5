/* TESSERA_SIM_OP_DELAY_US=100000: every queued async operation waits 100 ms on its worker;
 * TESSERA_SIM_ALLOC_DELAY_US=20000: cuMemAlloc_v2 and cuMemFree_v2 take 20 ms longer.
 * Shows that async calls return at once, that frees wait for queued work, and that the
 * legacy stream serialises with blocking streams but not with non-blocking ones. */
#include "drv.h"

#define DELAY_MS 100.0

static void test_async_returns_at_once(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    double t0 = now_ms();
    CU(cuMemsetD8Async(p, 0x5a, 4096, s));
    double t1 = now_ms();
    CHECK(t1 - t0 < DELAY_MS / 2);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU(cuStreamSynchronize(s));
    CHECK(now_ms() - t0 >= DELAY_MS * 0.9);
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[4095], 0x5a);
    /* synchronous calls are not delayed */
    unsigned char h[16] = {1};
    t0 = now_ms();
    CU(cuMemcpyHtoD(p, h, sizeof h));
    CHECK(now_ms() - t0 < DELAY_MS / 2);
    CU(cuStreamDestroy(s));
    CU(cuMemFree(p));
}

static void test_free_waits_for_queued_work(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 2 * MiB));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD8Async(p, 1, 2 * MiB, s));
    double t0 = now_ms();
    CU(cuMemFree(p)); /* must not pull the memory from under the queued memset */
    CHECK(now_ms() - t0 >= DELAY_MS * 0.9);
    CU(cuStreamQuery(s));
    CHECK_EQ(counters(0).live_allocations, 0);
    CU(cuStreamDestroy(s));
}

static void test_serialisation(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 64));
    CUstream blocking, nb;
    CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    /* blocking stream then legacy stream: one after the other */
    double t0 = now_ms();
    CU(cuMemsetD8Async(p, 1, 64, blocking));
    CU(cuMemsetD8Async(p, 2, 64, NULL));
    CU(cuCtxSynchronize());
    CHECK(now_ms() - t0 >= 2 * DELAY_MS * 0.9);
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[0], 2); /* legacy ran last */
    /* non-blocking stream and legacy stream: side by side */
    t0 = now_ms();
    CU(cuMemsetD8Async(p, 3, 32, nb));
    CU(cuMemsetD8Async(p + 32, 4, 32, NULL));
    CU(cuCtxSynchronize());
    CHECK(now_ms() - t0 < 1.8 * DELAY_MS);
    CU(cuStreamDestroy(blocking));
    CU(cuStreamDestroy(nb));
    CU(cuMemFree(p));
}

static void test_alloc_delay(void)
{
    CUdeviceptr p;
    double t0 = now_ms();
    CU(cuMemAlloc(&p, 100));
    double t1 = now_ms();
    CU(cuMemFree(p));
    double t2 = now_ms();
    CHECK(t1 - t0 >= 18.0);
    CHECK(t2 - t1 >= 18.0);
}

int main(void)
{
    alarm(60);
    drv_setup(0);
    RUN(test_async_returns_at_once);
    RUN(test_free_waits_for_queued_work);
    RUN(test_serialisation);
    RUN(test_alloc_delay);
    return 0;
}
