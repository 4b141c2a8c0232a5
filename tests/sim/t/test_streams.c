/* Stream ordering, legacy default stream semantics, per-thread streams, events.
 * Host functions blocked on a gate make every ordering check deterministic. */
#include <string.h>

#include "drv.h"
#include "gate.h"

static CUcontext ctx;

/* per-thread default stream entry points, as a --default-stream per-thread program gets them */
static __typeof__(cuMemsetD8Async) *cuMemsetD8Async_ptsz;
static __typeof__(cuStreamSynchronize) *cuStreamSynchronize_ptsz;
static __typeof__(cuStreamQuery) *cuStreamQuery_ptsz;
static __typeof__(cuLaunchHostFunc) *cuLaunchHostFunc_ptsz;
static __typeof__(cuMemAllocAsync) *cuMemAllocAsync_ptsz;
static __typeof__(cuMemFreeAsync) *cuMemFreeAsync_ptsz;

#define PTSZ(var, name, ver)                                                                  \
    do {                                                                                      \
        CUdriverProcAddressQueryResult st_;                                                   \
        CU(cuGetProcAddress(name, (void **)&var, ver,                                        \
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st_));            \
        CHECK(var != NULL);                                                                   \
    } while (0)

static void load_ptsz(void)
{
    PTSZ(cuMemsetD8Async_ptsz, "cuMemsetD8Async", 7000);
    PTSZ(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000);
    PTSZ(cuStreamQuery_ptsz, "cuStreamQuery", 7000);
    PTSZ(cuLaunchHostFunc_ptsz, "cuLaunchHostFunc", 10000);
    PTSZ(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020);
    PTSZ(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020);
    CHECK((void *)cuStreamQuery_ptsz != (void *)cuStreamQuery);
}
static unsigned char *buf; /* device memory, host-readable */
static CUdeviceptr dbuf;
#define N 4096

static void reset_buf(void)
{
    CU(cuMemsetD8(dbuf, 0, N));
}

static void test_nonblocking_is_independent(void)
{
    CUstream nb;
    CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    unsigned flags = 99;
    CU(cuStreamGetFlags(nb, &flags));
    CHECK_EQ(flags, CU_STREAM_NON_BLOCKING);
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(nb, gate_fn, &g));
    gate_wait_entered(&g);
    EXPECT(cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
    /* legacy work does not wait for the blocked non-blocking stream */
    CU(cuMemsetD8Async(dbuf, 7, N, NULL));
    CU(cuStreamSynchronize(NULL));
    CHECK_EQ(buf[N - 1], 7);
    CU(cuMemsetD8(dbuf, 8, N)); /* synchronous call: legacy stream + host wait */
    CHECK_EQ(buf[0], 8);
    gate_open(&g);
    CU(cuStreamSynchronize(nb));
    CU(cuStreamDestroy(nb));
    EXPECT(cuStreamDestroy(nb), CUDA_ERROR_INVALID_HANDLE);
}

static void test_legacy_waits_for_blocking(void)
{
    reset_buf();
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(s, gate_fn, &g));
    gate_wait_entered(&g);
    CU(cuMemsetD8Async(dbuf, 9, N, CU_STREAM_LEGACY));
    CUevent e;
    CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    CU(cuEventRecord(e, NULL));
    sleep_ms(30);
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CHECK_EQ(buf[0], 0);
    gate_open(&g);
    CU(cuStreamSynchronize(NULL));
    CHECK_EQ(buf[0], 9);
    CU(cuEventQuery(e));
    CU(cuEventDestroy(e));
    CU(cuStreamDestroy(s));
}

static void test_blocking_waits_for_legacy(void)
{
    reset_buf();
    CUstream s, nb;
    CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(NULL, gate_fn, &g));
    gate_wait_entered(&g);
    CU(cuMemsetD8Async(dbuf, 5, 16, s));
    CU(cuMemsetD8Async(dbuf + 16, 6, 16, nb));
    CU(cuStreamSynchronize(nb)); /* non-blocking: not held back by the legacy stream */
    CHECK_EQ(buf[16], 6);
    sleep_ms(30);
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CHECK_EQ(buf[0], 0);
    /* the per-thread default stream is a blocking stream too */
    CU(cuMemsetD8Async_ptsz(dbuf + 32, 4, 16, NULL));
    EXPECT(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    gate_open(&g);
    CU(cuStreamSynchronize(s));
    CHECK_EQ(buf[0], 5);
    CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK_EQ(buf[32], 4);
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(nb));
}

struct other_args {
    CUcontext ctx;
    int done;
};

static void *other_thread(void *p)
{
    struct other_args *a = p;
    CU(cuCtxSetCurrent(a->ctx));
    /* this thread's per-thread stream is not the main thread's */
    CU(cuMemsetD8Async_ptsz(dbuf + 100, 3, 10, NULL));
    CU(cuStreamSynchronize_ptsz(NULL));
    CHECK_EQ(buf[100], 3);
    a->done = 1;
    return NULL;
}

static void test_per_thread_streams(void)
{
    reset_buf();
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc_ptsz(NULL, gate_fn, &g)); /* blocks the main thread's stream */
    gate_wait_entered(&g);
    struct other_args a = {ctx, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, &a) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_EQ(a.done, 1);
    EXPECT(cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY);
    /* the legacy stream waits for the blocked per-thread stream */
    CU(cuMemsetD8Async(dbuf, 1, 1, NULL));
    sleep_ms(20);
    CHECK_EQ(buf[0], 0);
    gate_open(&g);
    CU(cuCtxSynchronize());
    CHECK_EQ(buf[0], 1);
}

static void test_stream_order(void)
{
    reset_buf();
    CUstream s;
    CU(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -3));
    unsigned char host[N];
    memset(host, 0x77, N);
    CU(cuMemsetD8Async(dbuf, 1, N, s));
    CU(cuMemcpyHtoDAsync(dbuf, host, N / 2, s));
    CU(cuMemsetD32Async(dbuf + N / 2, 0xa1b2c3d4u, N / 8, s));
    CU(cuMemcpyDtoDAsync(dbuf + N / 4, dbuf + N / 2, 8, s));
    unsigned char out[N];
    CU(cuMemcpyDtoHAsync(out, dbuf, N, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(out[0], 0x77);
    CHECK_EQ(out[N / 4], 0xd4);
    CHECK_EQ(out[N / 4 + 8], 0x77);
    CHECK_EQ(out[N / 2 + 3], 0xa1);
    CU(cuStreamDestroy(s));
}

static void test_events(void)
{
    reset_buf();
    CUstream s1, s2;
    CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent e, never, notime;
    CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&never, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING));
    EXPECT(cuEventCreate(&notime, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    CU(cuEventQuery(never)); /* never recorded: complete */
    CU(cuEventSynchronize(never));

    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(s1, gate_fn, &g));
    CU(cuEventRecord(e, s1));
    CU(cuStreamWaitEvent(s2, e, 0));
    CU(cuMemsetD8Async(dbuf, 2, 8, s2));
    gate_wait_entered(&g);
    sleep_ms(20);
    EXPECT(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    EXPECT(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
    CHECK_EQ(buf[0], 0);
    gate_open(&g);
    CU(cuEventSynchronize(e));
    CU(cuStreamSynchronize(s2));
    CHECK_EQ(buf[0], 2);

    /* elapsed time is the device's modelled time between the records (sim_order.c): the one
     * op between them costs 1 us (TESSERA_SIM_OP_DELAY_US unset), however long it really took
     * on its worker (30 ms here) */
    CUevent a, b;
    CU(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(cuEventCreate(&b, CU_EVENT_DEFAULT));
    float ms = -1;
    EXPECT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
    CU(cuEventRecord(a, s1));
    struct gate g2 = GATE_INIT;
    CU(cuLaunchHostFunc(s1, gate_fn, &g2));
    CU(cuEventRecord(b, s1));
    gate_wait_entered(&g2);
    EXPECT(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
    sleep_ms(30);
    gate_open(&g2);
    CU(cuEventSynchronize(b));
    CU(cuEventElapsedTime(&ms, a, b));
    CHECK(ms > 0.00099f && ms < 0.00101f);
    CU(cuEventRecord(notime, s1));
    CU(cuStreamSynchronize(s1));
    EXPECT(cuEventElapsedTime(&ms, a, notime), CUDA_ERROR_INVALID_HANDLE);

    /* an event destroyed while its record is pending is still recorded safely */
    struct gate g3 = GATE_INIT;
    CU(cuLaunchHostFunc(s1, gate_fn, &g3));
    CU(cuEventRecord(e, s1));
    CU(cuEventDestroy(e));
    EXPECT(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    gate_open(&g3);
    CU(cuStreamSynchronize(s1));

    CU(cuEventDestroy(a));
    CU(cuEventDestroy(b));
    CU(cuEventDestroy(never));
    CU(cuEventDestroy(notime));
    CU(cuStreamDestroy(s1));
    CU(cuStreamDestroy(s2));
}

struct sync_args {
    CUcontext ctx;
    int done;
    pthread_mutex_t mu;
};

static void *ctx_sync_thread(void *p)
{
    struct sync_args *a = p;
    CU(cuCtxSetCurrent(a->ctx));
    CU(cuCtxSynchronize());
    pthread_mutex_lock(&a->mu);
    a->done = 1;
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void test_ctx_synchronize_and_destroy(void)
{
    reset_buf();
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(s, gate_fn, &g));
    CU(cuMemsetD8Async(dbuf, 0x61, 4, s));
    gate_wait_entered(&g);
    CU(cuStreamDestroy(s)); /* queued work still runs */
    struct sync_args a = {ctx, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, ctx_sync_thread, &a) == 0);
    sleep_ms(30);
    pthread_mutex_lock(&a.mu);
    CHECK_EQ(a.done, 0); /* cuCtxSynchronize waits for every stream */
    pthread_mutex_unlock(&a.mu);
    gate_open(&g);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_EQ(a.done, 1);
    CHECK_EQ(buf[3], 0x61);
}

static CUresult cb_result = CUDA_SUCCESS;
static void sync_in_callback(void *p)
{
    (void)p;
    cb_result = cuStreamSynchronize(NULL);
}

static void test_validation(void)
{
    unsigned char h[64] = {0};
    EXPECT(cuMemcpyHtoD(dbuf + N - 10, h, 64), CUDA_ERROR_INVALID_VALUE); /* past the end */
    CUdeviceptr tmp;
    CU(cuMemAlloc(&tmp, 64));
    CU(cuMemFree(tmp));
    EXPECT(cuMemcpyHtoD(tmp, h, 64), CUDA_ERROR_INVALID_VALUE); /* freed */
    EXPECT(cuMemcpyDtoH(h, tmp, 64), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemsetD32(dbuf + 2, 0, 4), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    EXPECT(cuMemsetD8Async(dbuf, 0, 1, (CUstream)(uintptr_t)0x1234), CUDA_ERROR_INVALID_HANDLE);
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    CU(cuLaunchHostFunc(s, sync_in_callback, NULL));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(cb_result, CUDA_ERROR_NOT_PERMITTED); /* no blocking calls from host functions */
    CU(cuStreamDestroy(s));
}

static void test_stream_ordered_allocation(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct tessera_sim_counters c0 = counters(0);
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, 3 * MiB, s));
    CU(cuMemsetD8Async(p, 1, 3 * MiB, s));
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(s, gate_fn, &g));
    CU(cuMemFreeAsync(p, s));
    EXPECT(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE); /* already being freed */
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    gate_wait_entered(&g);
    struct tessera_sim_counters c1 = counters(0);
    CHECK_EQ(c1.alloc_calls, c0.alloc_calls + 1);
    CHECK_EQ(c1.live_allocations, c0.live_allocations + 1); /* freed in stream order */
    gate_open(&g);
    CU(cuStreamSynchronize(s));
    c1 = counters(0);
    CHECK_EQ(c1.free_calls, c0.free_calls + 1);
    CHECK_EQ(c1.live_allocations, c0.live_allocations);
    CU(cuMemAllocAsync_ptsz(&p, 100, NULL));
    CU(cuMemFreeAsync_ptsz(p, NULL));
    CU(cuStreamSynchronize_ptsz(NULL));
    CU(cuStreamDestroy(s));
}

int main(void)
{
    alarm(60);
    ctx = drv_setup(0);
    CU(cuMemAlloc(&dbuf, N));
    buf = (unsigned char *)(uintptr_t)dbuf;
    load_ptsz();
    RUN(test_nonblocking_is_independent);
    RUN(test_legacy_waits_for_blocking);
    RUN(test_blocking_waits_for_legacy);
    RUN(test_per_thread_streams);
    RUN(test_stream_order);
    RUN(test_events);
    RUN(test_ctx_synchronize_and_destroy);
    RUN(test_validation);
    RUN(test_stream_ordered_allocation);
    CU(cuMemFree(dbuf));
    return 0;
}
