/* Device time as a GPU spends it, read from the simulator's own event timestamps (the device's
 * modelled time, sim_order.c), never from wall-clock bounds around host calls.
 * Run with TESSERA_SIM_OP_DELAY_US=100000: every piece of queued work takes 100 ms.
 *
 *   (no argument)  markers (event records, stream waits) cost no device time; two non-blocking
 *                  streams with queued work run side by side.
 *   old            TESSERA_SIM_MARKER_DELAY=1: markers pay the delay like work, as before. */
#include "drv.h"

#define DELAY_MS 100.0

static int charged; /* markers pay the delay (the "old" run) */

static CUevent ev_new(void)
{
    CUevent e;
    CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
    return e;
}

/* ms from a to b, both completed */
static double span(CUevent a, CUevent b)
{
    float ms;
    CU(cuEventElapsedTime(&ms, a, b));
    return ms;
}

/* Two non-blocking streams, each: record, two pieces of work, record. Their work intervals
 * overlap: each stream takes two delays, both together not much more. */
static void test_streams_overlap(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s[2];
    CUevent a[2], b[2];
    for (int i = 0; i < 2; i++) {
        CU(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
        a[i] = ev_new();
        b[i] = ev_new();
    }
    for (int i = 0; i < 2; i++) {
        CU(cuEventRecord(a[i], s[i]));
        CU(cuMemsetD8Async(p + (CUdeviceptr)i * 2048, (unsigned char)(i + 1), 1024, s[i]));
        CU(cuMemsetD8Async(p + (CUdeviceptr)i * 2048 + 1024, (unsigned char)(i + 1), 1024, s[i]));
        CU(cuEventRecord(b[i], s[i]));
    }
    CU(cuCtxSynchronize());
    /* every time relative to a[0] */
    double a1 = span(a[0], a[1]), b0 = span(a[0], b[0]), b1 = span(a[0], b[1]);
    double start = a1 < 0 ? a1 : 0, end = b0 > b1 ? b0 : b1;
    double late_start = a1 > 0 ? a1 : 0, early_end = b0 < b1 ? b0 : b1;
    fprintf(stderr, "  stream 0 [0, %.1f] ms, stream 1 [%.1f, %.1f] ms\n", b0, a1, b1);
    /* each stream did its two delays of work between its markers */
    CHECK(b0 >= 2 * DELAY_MS * 0.9);
    CHECK(b1 - a1 >= 2 * DELAY_MS * 0.9);
    /* side by side: they share at least one delay's worth of device time, and the pair takes
     * far less than the sum of the two streams' times it would take one after the other */
    double longest = b0 > b1 - a1 ? b0 : b1 - a1;
    CHECK(early_end - late_start >= DELAY_MS);
    CHECK(end - start < 1.5 * longest);
    for (int i = 0; i < 2; i++) {
        CU(cuEventDestroy(a[i]));
        CU(cuEventDestroy(b[i]));
        CU(cuStreamDestroy(s[i]));
    }
    CU(cuMemFree(p));
}

/* One stream: record, work, three records, work, record. The three records in a row take no
 * device time between them; the whole stream takes its two delays of work. */
static void test_event_record_costs_nothing(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent r[5];
    for (int i = 0; i < 5; i++)
        r[i] = ev_new();
    CU(cuEventRecord(r[0], s));
    CU(cuMemsetD8Async(p, 7, 4096, s));
    CU(cuEventRecord(r[1], s));
    CU(cuEventRecord(r[2], s));
    CU(cuEventRecord(r[3], s));
    CU(cuMemsetD8Async(p, 8, 4096, s));
    CU(cuEventRecord(r[4], s));
    CU(cuStreamSynchronize(s));
    double work = span(r[0], r[1]), markers = span(r[1], r[3]), all = span(r[0], r[4]);
    fprintf(stderr, "  work %.1f ms, two records %.1f ms, all %.1f ms\n", work, markers, all);
    CHECK(work >= DELAY_MS * 0.9);
    if (charged) {
        CHECK(markers >= 2 * DELAY_MS * 0.9);
        CHECK(all >= 5 * DELAY_MS * 0.9);
    } else {
        CHECK(markers < DELAY_MS / 2);
        CHECK(all < 2.5 * DELAY_MS);
    }
    for (int i = 0; i < 5; i++)
        CU(cuEventDestroy(r[i]));
    CU(cuStreamDestroy(s));
    CU(cuMemFree(p));
}

/* Stream 1 waits on an event stream 0 recorded after its work: it starts as soon as that work is
 * done, the wait adding no device time of its own. */
static void test_stream_wait_costs_nothing(void)
{
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    CUstream s0, s1;
    CU(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CUevent done = ev_new(), after = ev_new();
    CU(cuMemsetD8Async(p, 1, 4096, s0));
    CU(cuEventRecord(done, s0));
    CU(cuStreamWaitEvent(s1, done, 0));
    CU(cuEventRecord(after, s1));
    CU(cuCtxSynchronize());
    double gap = span(done, after);
    fprintf(stderr, "  record on 0 to record after the wait on 1: %.1f ms\n", gap);
    CHECK(gap >= 0);
    if (charged)
        CHECK(gap >= 2 * DELAY_MS * 0.9); /* the wait, then the record */
    else
        CHECK(gap < DELAY_MS / 2);
    CU(cuEventDestroy(done));
    CU(cuEventDestroy(after));
    CU(cuStreamDestroy(s0));
    CU(cuStreamDestroy(s1));
    CU(cuMemFree(p));
}

int main(int argc, char **argv)
{
    alarm(60);
    charged = argc > 1 && strcmp(argv[1], "old") == 0;
    drv_setup(0);
    RUN(test_streams_overlap);
    RUN(test_event_record_costs_nothing);
    RUN(test_stream_wait_costs_nothing);
    return 0;
}
