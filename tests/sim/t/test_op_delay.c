/* TESSERA_SIM_OP_DELAY_US=100000: every queued async operation waits 100 ms on its worker;
 * TESSERA_SIM_ALLOC_DELAY_US=20000: cuMemAlloc_v2 and cuMemFree_v2 take 20 ms longer.
 * Shows that async calls return before their work ran, that frees wait for queued work, and
 * that the legacy stream serialises with blocking streams but not with non-blocking ones.
 * Only lower bounds are read from the host's clock (a sleep lasts at least its time, however
 * loaded the machine); what must be quick is shown by the order of events instead, and how the
 * streams serialise by the device's modelled time (sim_order.c). */
#include "drv.h"

#define DELAY_MS 100.0

static void set_flag(void *arg)
{
    __atomic_store_n((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static int flag_of(const int *f)
{
    return __atomic_load_n(f, __ATOMIC_SEQ_CST);
}

static void test_async_returns_at_once(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int ran = 0;
    double t0 = now_ms();
    CU(cuMemsetD8Async(p, 0x5a, 4096, s));
    CU(cuLaunchHostFunc(s, set_flag, &ran));
    /* both calls returned before the memset's 100 ms were over: the host function after it
     * has not run (a host paused that long could only make this pass, never fail) */
    if (now_ms() - t0 < DELAY_MS * 0.9)
        CHECK_EQ(flag_of(&ran), 0);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU(cuStreamSynchronize(s));
    CHECK(now_ms() - t0 >= DELAY_MS * 0.9);
    CHECK_EQ(flag_of(&ran), 1);
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[4095], 0x5a);
    /* synchronous calls are not delayed: they cost no modelled time */
    CUevent a, b;
    CU(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&b, CU_EVENT_DEFAULT));
    unsigned char h[16] = {1};
    CU(cuEventRecord(a, NULL));
    CU(cuMemcpyHtoD(p, h, sizeof h));
    CU(cuEventRecord(b, NULL));
    CU(cuEventSynchronize(b));
    float ms = -1;
    CU(cuEventElapsedTime(&ms, a, b));
    CHECK(ms == 0.0f);
    CU(cuEventDestroy(a));
    CU(cuEventDestroy(b));
    CU(cuStreamDestroy(s));
    CU(cuMemFree(p));
}

static void test_free_waits_for_queued_work(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 2 * MiB));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int done = 0;
    CU(cuMemsetD8Async(p, 1, 2 * MiB, s));
    CU(cuLaunchHostFunc(s, set_flag, &done));
    double t0 = now_ms();
    CU(cuMemFree(p)); /* must not pull the memory from under the queued memset */
    CHECK_EQ(flag_of(&done), 1); /* the work queued before it ran first */
    CHECK(now_ms() - t0 >= DELAY_MS * 0.9);
    CU(cuStreamQuery(s));
    CHECK_EQ(counters(0).live_allocations, 0);
    CU(cuStreamDestroy(s));
}

/* ms between two completed events, on the device's modelled time */
static double span(CUevent a, CUevent b)
{
    float ms = -1;
    CU(cuEventElapsedTime(&ms, a, b));
    return ms;
}

static void test_serialisation(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 64));
    CUstream blocking, nb;
    CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CUevent start, end;
    CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&end, CU_EVENT_DEFAULT));
    /* blocking stream then legacy stream: one after the other */
    double t0 = now_ms();
    CU(cuEventRecord(start, blocking));
    CU(cuMemsetD8Async(p, 1, 64, blocking));
    CU(cuMemsetD8Async(p, 2, 64, NULL));
    CU(cuEventRecord(end, NULL));
    CU(cuCtxSynchronize());
    CHECK(now_ms() - t0 >= 2 * DELAY_MS * 0.9);
    CHECK(span(start, end) == 2 * DELAY_MS);
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[0], 2); /* legacy ran last */
    /* non-blocking stream and legacy stream: side by side */
    CU(cuEventRecord(start, nb));
    CU(cuMemsetD8Async(p, 3, 32, nb));
    CU(cuMemsetD8Async(p + 32, 4, 32, NULL));
    CU(cuEventRecord(end, NULL));
    CU(cuCtxSynchronize());
    CHECK(span(start, end) == DELAY_MS);
    CU(cuEventDestroy(start));
    CU(cuEventDestroy(end));
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
