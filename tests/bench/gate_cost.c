/* gate-cost: what the gate of shim/gate.c costs a CUDA call while the process is not paused (an
 * enter and a leave around the call), one thread alone and THREADS threads at once (each
 * thread's own calls; the counter they share is one cache line).
 *
 *   gate-cost [THREADS=2] [CALLS=20000000]
 *   RESULT threads=1 ns_per_call=X threads=N ns_per_call_each=Y
 * The times are the CPU's (CLOCK_THREAD_CPUTIME_ID of each thread), so a loaded machine's other
 * work does not count; the contended figure still depends on how often the threads run at the
 * same time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "shim/shim.h"

static long calls;

static double cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *loop(void *out)
{
    double t0 = cpu_ns();
    for (long i = 0; i < calls; i++) {
        ts_gate_enter();
        __asm__ volatile("" ::: "memory"); /* the call itself */
        ts_gate_leave();
    }
    *(double *)out = (cpu_ns() - t0) / (double)calls;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    calls = argc > 2 ? atol(argv[2]) : 20000000L;
    if (threads < 1 || threads > 64 || calls < 1)
        return 2;
    double alone;
    loop(&alone);
    pthread_t t[64];
    double each[64], sum = 0;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, loop, &each[i]);
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        sum += each[i];
    }
    printf("RESULT threads=1 ns_per_call=%.2f threads=%d ns_per_call_each=%.2f\n", alone, threads,
           sum / threads);
    return 0;
}
