/* Stream capture model: recorded work, capture modes, prohibited calls, invalidation. */
#include <string.h>

#include "drv.h"

static CUcontext ctx;
static CUdeviceptr dbuf;
static unsigned char *buf;

struct thread_call {
    CUcontext ctx;
    int what; /* 0: cuMemAlloc + cuMemFree, 1: cuMemFree(arg), 2: cuStreamEndCapture(stream),
               * 3: cuMemsetD8(arg) */
    CUstreamCaptureMode mode;
    CUdeviceptr arg;
    CUstream stream;
    CUresult result;
};

static void *thread_main(void *p)
{
    struct thread_call *c = p;
    CU(cuCtxSetCurrent(c->ctx));
    CUstreamCaptureMode m = c->mode;
    CU(cuThreadExchangeStreamCaptureMode(&m));
    CHECK_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL); /* every thread starts in global mode */
    if (c->what == 0) {
        CUdeviceptr x;
        c->result = cuMemAlloc(&x, 4096);
        if (c->result == CUDA_SUCCESS)
            CU(cuMemFree(x));
    } else if (c->what == 1) {
        c->result = cuMemFree(c->arg);
    } else if (c->what == 3) {
        c->result = cuMemsetD8(c->arg, 0, 4);
    } else {
        CUgraph g = NULL;
        c->result = cuStreamEndCapture(c->stream, &g);
        if (g)
            CU(cuGraphDestroy(g));
    }
    return NULL;
}

static CUresult in_thread(int what, CUstreamCaptureMode mode, CUdeviceptr arg, CUstream s)
{
    struct thread_call c = {ctx, what, mode, arg, s, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_main, &c) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    return c.result;
}

static CUstreamCaptureStatus status(CUstream s)
{
    CUstreamCaptureStatus st = (CUstreamCaptureStatus)99;
    CU(cuStreamIsCapturing(s, &st));
    return st;
}

static void end_ok(CUstream s)
{
    CUgraph g = NULL;
    CU(cuStreamEndCapture(s, &g));
    CHECK(g != NULL);
    CU(cuGraphDestroy(g));
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
}

static void end_invalidated(CUstream s)
{
    CUgraph g = (CUgraph)1;
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
}

static void test_captured_work_is_not_executed(void)
{
    CUstream s, other;
    CU(cuStreamCreate(&s, CU_STREAM_DEFAULT));
    CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD8(dbuf, 0, 64));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK_EQ(status(other), CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CU(cuMemsetD8Async(dbuf, 0xee, 64, s));
    unsigned char h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CU(cuMemcpyHtoDAsync(dbuf, h, 8, s));
    end_ok(s);
    CU(cuCtxSynchronize());
    CHECK_EQ(buf[0], 0); /* recorded into the graph, never run */
    CHECK_EQ(buf[63], 0);
    EXPECT(cuStreamEndCapture(s, &(CUgraph){0}), CUDA_ERROR_ILLEGAL_STATE);
    EXPECT(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
           CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* the legacy stream cannot capture */
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(other));
}

static void test_unsafe_calls_invalidate(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr keep;
    CU(cuMemAlloc(&keep, 4096));

    /* the capturing thread itself */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr x;
    EXPECT(cuMemAlloc(&x, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    EXPECT(cuMemsetD8Async(dbuf, 1, 1, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    end_invalidated(s);
    CU(cuMemAlloc(&x, 4096)); /* fine again once the capture ended */
    CU(cuMemFree(x));

    /* another thread in global mode: cuMemAlloc during a global capture */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(in_thread(0, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);

    /* ... and cuMemFree: refused, and the memory stays allocated */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(in_thread(1, CU_STREAM_CAPTURE_MODE_GLOBAL, keep, NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);
    CHECK(probe_writable((void *)(uintptr_t)keep));

    /* a thread in relaxed mode may */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(in_thread(0, CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL));
    /* thread-local mode ignores other threads' captures */
    CU(in_thread(0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 0, NULL));
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    /* the capturing thread may switch itself to relaxed */
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CU(cuThreadExchangeStreamCaptureMode(&m));
    CHECK_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU(cuMemAlloc(&x, 4096));
    CU(cuMemFree(x));
    CU(cuThreadExchangeStreamCaptureMode(&m));
    CHECK_EQ(m, CU_STREAM_CAPTURE_MODE_RELAXED);
    end_ok(s);

    /* thread-local capture: other threads are unaffected, the owner is not */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CU(in_thread(0, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL));
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT(cuMemAlloc(&x, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);

    /* relaxed capture: nobody is prohibited */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemAlloc(&x, 4096));
    CU(cuMemFree(x));
    CU(in_thread(0, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL));
    end_ok(s);

    /* synchronisation */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* never on itself */
    end_invalidated(s);
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);

    /* ending a global capture from another thread fails and terminates it (as on an H100) */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(in_thread(2, CU_STREAM_CAPTURE_MODE_RELAXED, 0, s), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);
    EXPECT(cuStreamEndCapture(s, &(CUgraph){0}), CUDA_ERROR_ILLEGAL_STATE);
    /* a relaxed capture may be ended anywhere */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(in_thread(2, CU_STREAM_CAPTURE_MODE_GLOBAL, 0, s));
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_NONE);

    CU(cuMemFree(keep));
    CU(cuStreamDestroy(s));
}

static void test_legacy_stream(void)
{
    CUstream blocking, nb;
    CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    /* capturing a blocking stream: any legacy stream use would join the capture */
    CU(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuMemsetD8Async(dbuf, 1, 1, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    end_invalidated(blocking);
    CU(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUstreamCaptureStatus st;
    EXPECT(cuStreamIsCapturing(NULL, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    unsigned char h[4] = {0};
    EXPECT(cuMemcpyHtoD(dbuf, h, 4), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); /* synchronous copy */
    end_invalidated(blocking);
    /* capturing a non-blocking stream does not involve the legacy stream: work may still be
     * queued on it, even during a global capture (behaviour of an H100)... */
    CU(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuMemsetD8(dbuf, 3, 1));
    CU(cuStreamSynchronize(NULL));
    end_ok(nb);
    CU(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuMemsetD8Async(dbuf, 3, 1, NULL));
    CU(cuMemcpyHtoD(dbuf, h, 4));
    CUevent ev;
    CU(cuEventCreate(&ev, 0));
    CU(cuEventRecord(ev, NULL));
    CU(in_thread(3, CU_STREAM_CAPTURE_MODE_GLOBAL, dbuf, NULL)); /* sync memset, other thread */
    CU(cuStreamIsCapturing(NULL, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
    end_ok(nb);
    /* ... but synchronising with it is an unsafe call */
    CU(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamSynchronize(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(nb);
    CU(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuStreamQuery(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(nb);
    CU(cuEventDestroy(ev));
    CU(cuStreamDestroy(blocking));
    CU(cuStreamDestroy(nb));
}

static void test_events_and_fork_join(void)
{
    CUstream s, s2;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent fork_ev, join_ev, outside;
    CU(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
    CU(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
    CU(cuEventCreate(&outside, CU_EVENT_DEFAULT));
    CU(cuEventRecord(outside, s));
    CU(cuStreamSynchronize(s));

    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuEventRecord(fork_ev, s));
    CU(cuStreamWaitEvent(s2, fork_ev, 0)); /* s2 joins the capture */
    CHECK_EQ(status(s2), CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CU(cuMemsetD8Async(dbuf, 0x44, 8, s2));
    CU(cuEventRecord(join_ev, s2));
    CU(cuStreamWaitEvent(s, join_ev, 0));
    end_ok(s);
    CHECK_EQ(status(s2), CU_STREAM_CAPTURE_STATUS_NONE); /* left with the origin */
    CU(cuCtxSynchronize());
    CHECK(buf[0] != 0x44);

    /* querying an event outside the capture is an unsafe call */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuEventQuery(outside), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    end_invalidated(s);
    CU(cuEventQuery(outside));
    /* querying or synchronising an event recorded in the capture invalidates it */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuEventRecord(fork_ev, s));
    EXPECT(cuEventQuery(fork_ev), CUDA_ERROR_CAPTURED_EVENT);
    CHECK_EQ(status(s), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    end_invalidated(s);
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuEventRecord(fork_ev, s));
    EXPECT(cuEventSynchronize(fork_ev), CUDA_ERROR_CAPTURED_EVENT);
    end_invalidated(s);
    /* waiting on work outside the capture breaks its isolation, unless declared external */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    EXPECT(cuStreamWaitEvent(s, outside, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    end_invalidated(s);
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CU(cuStreamWaitEvent(s, outside, CU_EVENT_WAIT_EXTERNAL));
    end_ok(s);
    /* a joined stream that never rejoins does not fail the capture; it leaves with it */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuEventRecord(fork_ev, s));
    CU(cuStreamWaitEvent(s2, fork_ev, 0));
    end_ok(s);
    CHECK_EQ(status(s2), CU_STREAM_CAPTURE_STATUS_NONE);

    CU(cuEventDestroy(fork_ev));
    CU(cuEventDestroy(join_ev));
    CU(cuEventDestroy(outside));
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(s2));
}

/* A graph made from a capture replays the captured copies and memsets, in capture order, as
 * work of the stream it is launched on; the exec outlives its graph. */
static void test_graph_launch_replays_captured_work(void)
{
    CUstream s, other;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CU(cuMemsetD8(dbuf, 0, 64));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuMemsetD8Async(dbuf, 0xee, 64, s));
    CU(cuMemsetD8Async(dbuf + 8, 0x11, 8, s)); /* after the first: it must win */
    CUgraph g = NULL;
    CU(cuStreamEndCapture(s, &g));
    CUgraphExec x = NULL;
    EXPECT(cuGraphInstantiateWithFlags(&x, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    CU(cuGraphDestroy(g));
    CU(cuCtxSynchronize());
    CHECK_EQ(buf[0], 0); /* instantiating runs nothing */
    for (int round = 0; round < 2; round++) {
        CU(cuGraphLaunch(x, other));
        CU(cuStreamSynchronize(other));
        CHECK_EQ(buf[0], 0xee);
        CHECK_EQ(buf[8], 0x11);
        CHECK_EQ(buf[15], 0x11);
        CHECK_EQ(buf[16], 0xee);
        CU(cuMemsetD8(dbuf, 0, 64));
    }
    CU(cuGraphExecDestroy(x));
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(other));
}

int main(void)
{
    alarm(60);
    ctx = drv_setup(0);
    CU(cuMemAlloc(&dbuf, 4096));
    buf = (unsigned char *)(uintptr_t)dbuf;
    RUN(test_captured_work_is_not_executed);
    RUN(test_graph_launch_replays_captured_work);
    RUN(test_unsafe_calls_invalidate);
    RUN(test_legacy_stream);
    RUN(test_events_and_fork_join);
    CU(cuMemFree(dbuf));
    return 0;
}
