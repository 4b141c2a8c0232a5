/* The device's order, modelled (sim_order.c): event timestamps are modelled device time, and
 * copies or memsets of queued work on bytes that another stream's work touches without an
 * order between them are counted as races. Neither depends on how the host schedules the
 * simulator's threads: host functions hold streams back here for real (gates) and the answers
 * stay the same. Run with TESSERA_SIM_OP_DELAY_US=1000: each piece of work costs 1 ms. */
#include "drv.h"

#define OP_MS 1.0f

struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
};
#define GATE_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static void gate_fn(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static CUevent ev_new(void)
{
    CUevent e;
    CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    return e;
}

static float elapsed(CUevent a, CUevent b)
{
    float ms = -1;
    CU(cuEventElapsedTime(&ms, a, b));
    return ms;
}

static uint64_t races(void)
{
    return counters(0).races;
}

static CUstream nb_stream(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

/* Two non-blocking streams with three memsets each: side by side on the model, exactly, even
 * when one stream is held back on the host until the other finished. */
static void test_time_side_by_side(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 2 * MiB));
    CUstream s0 = nb_stream(), s1 = nb_stream();
    CUevent start = ev_new(), end0 = ev_new(), end1 = ev_new();
    struct gate g = GATE_INIT;
    CU(cuEventRecord(start, s0));
    CU(cuStreamWaitEvent(s1, start, 0));
    CU(cuLaunchHostFunc(s1, gate_fn, &g)); /* s1 runs nothing until s0 is done, for real */
    for (int i = 0; i < 3; i++) {
        CU(cuMemsetD8Async(p + (CUdeviceptr)i * 4096, 1, 4096, s0));
        CU(cuMemsetD8Async(p + MiB + (CUdeviceptr)i * 4096, 2, 4096, s1));
    }
    CU(cuEventRecord(end0, s0));
    CU(cuEventRecord(end1, s1));
    CU(cuEventSynchronize(end0));
    gate_open(&g);
    CU(cuCtxSynchronize());
    CHECK(elapsed(start, end0) == 3 * OP_MS);
    CHECK(elapsed(start, end1) == 4 * OP_MS); /* the host function is work too */
    CHECK_EQ(races(), 0);
    CU(cuStreamDestroy(s0));
    CU(cuStreamDestroy(s1));
    CU(cuMemFree(p));
}

/* A stream that waits for another's event starts after it, on the model. */
static void test_time_after_wait(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s0 = nb_stream(), s1 = nb_stream();
    CUevent start = ev_new(), mid = ev_new(), end1 = ev_new();
    CU(cuEventRecord(start, s0));
    CU(cuMemsetD8Async(p, 1, 64, s0));
    CU(cuMemsetD8Async(p, 2, 64, s0));
    CU(cuEventRecord(mid, s0));
    CU(cuStreamWaitEvent(s1, mid, 0));
    CU(cuMemsetD8Async(p, 3, 64, s1));
    CU(cuEventRecord(end1, s1));
    CU(cuCtxSynchronize());
    CHECK(elapsed(start, mid) == 2 * OP_MS);
    CHECK(elapsed(start, end1) == 3 * OP_MS);
    CHECK_EQ(races(), 0); /* the same bytes, ordered by the wait */
    unsigned char h;
    CU(cuMemcpyDtoH(&h, p, 1));
    CHECK_EQ(h, 3);
    CU(cuStreamDestroy(s0));
    CU(cuStreamDestroy(s1));
    CU(cuMemFree(p));
}

/* Work queued after the host synchronised starts after what it waited for. */
static void test_time_after_host_sync(void)
{
    CUstream s0 = nb_stream(), s1 = nb_stream();
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUevent start = ev_new(), end1 = ev_new();
    CU(cuEventRecord(start, s0));
    CU(cuMemsetD8Async(p, 1, 64, s0));
    CU(cuMemsetD8Async(p, 1, 64, s0));
    CU(cuStreamSynchronize(s0));
    CU(cuMemsetD8Async(p, 2, 64, s1));
    CU(cuEventRecord(end1, s1));
    CU(cuEventSynchronize(end1));
    CHECK(elapsed(start, end1) == 3 * OP_MS);
    CHECK_EQ(races(), 0);
    CU(cuStreamDestroy(s0));
    CU(cuStreamDestroy(s1));
    CU(cuMemFree(p));
}

/* Two streams writing the same bytes with nothing ordering them race, however the threads
 * happened to run; reads of the same bytes do not; disjoint bytes do not. */
static void test_races(void)
{
    CUdeviceptr p, q, r;
    CU(cuMemAlloc(&p, 4096));
    CU(cuMemAlloc(&q, 4096));
    CU(cuMemAlloc(&r, 4096));
    CU(cuMemsetD8(r, 7, 4096)); /* synchronous: before everything below */
    CUstream s0 = nb_stream(), s1 = nb_stream();
    uint64_t before = races();

    /* disjoint bytes, and reads of the same bytes: no race */
    CU(cuMemsetD8Async(p, 1, 2048, s0));
    CU(cuMemsetD8Async(p + 2048, 2, 2048, s1));
    CU(cuMemcpyDtoDAsync(q, r, 16, s0));
    CU(cuMemcpyDtoDAsync(q + 2048, r, 16, s1)); /* both read r: no race */
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 0);

    /* a write and a read of the same bytes, unordered: a race, even when the reader's stream
     * ran to the end before the writer started (the gate) */
    struct gate g = GATE_INIT;
    CU(cuLaunchHostFunc(s1, gate_fn, &g));
    CU(cuMemcpyDtoDAsync(q, p, 64, s0));   /* reads p */
    CU(cuMemsetD8Async(p + 32, 9, 8, s1)); /* writes p+32 */
    CU(cuStreamSynchronize(s0));
    gate_open(&g);
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 1);

    /* the same two after an event orders them: no race */
    CUevent e = ev_new();
    CU(cuMemcpyDtoDAsync(q, p, 64, s0));
    CU(cuEventRecord(e, s0));
    CU(cuStreamWaitEvent(s1, e, 0));
    CU(cuMemsetD8Async(p + 32, 9, 8, s1));
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 1);

    /* a successful query orders too: the host learnt the reader finished */
    CU(cuMemcpyDtoDAsync(q, p, 64, s0));
    while (cuStreamQuery(s0) == CUDA_ERROR_NOT_READY)
        ;
    CU(cuMemsetD8Async(p + 32, 9, 8, s1));
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 1);

    /* an event query that says done orders as well; one that was never asked does not */
    CU(cuMemcpyDtoDAsync(q, p, 64, s0));
    CU(cuEventRecord(e, s0));
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY)
        ;
    CU(cuMemsetD8Async(p + 32, 9, 8, s1));
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 1);
    CU(cuMemcpyDtoDAsync(q, p, 64, s0));
    CU(cuEventRecord(e, s0));
    CU(cuMemsetD8Async(p + 32, 9, 8, s1));
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 2);

    CU(cuStreamDestroy(s0));
    CU(cuStreamDestroy(s1));
    CU(cuMemFree(p));
    CU(cuMemFree(q));
    CU(cuMemFree(r));
}

/* The legacy stream orders blocking streams both ways; non-blocking streams it does not. */
static void test_legacy_stream_order(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream blocking, nb = nb_stream();
    CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    uint64_t before = races();
    CU(cuMemsetD8Async(p, 1, 64, blocking));
    CU(cuMemsetD8Async(p, 2, 64, NULL)); /* legacy waits for the blocking stream */
    CU(cuMemsetD8Async(p, 3, 64, blocking)); /* and the blocking stream for the legacy one */
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 0);
    CU(cuMemsetD8Async(p, 4, 64, nb));
    CU(cuMemsetD8Async(p, 5, 64, NULL)); /* not ordered after the non-blocking stream */
    CU(cuCtxSynchronize());
    CHECK_EQ(races() - before, 1);
    CU(cuStreamDestroy(blocking));
    CU(cuStreamDestroy(nb));
    CU(cuMemFree(p));
}

int main(void)
{
    alarm(60);
    drv_setup(0);
    RUN(test_time_side_by_side);
    RUN(test_time_after_wait);
    RUN(test_time_after_host_sync);
    RUN(test_races);
    RUN(test_legacy_stream_order);
    return 0;
}
