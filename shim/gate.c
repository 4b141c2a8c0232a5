/* The gate every CUDA call of the program that could touch device memory passes (a launch, a
 * copy, a memset, a synchronise, an allocation, a free, an IPC export): open, it costs an
 * atomic add and a load on the way in and an atomic subtract on the way out; closed (the
 * process is paused, shim/pause.c), a call waits at the door until it opens again. A program
 * that wakes early therefore waits; it never reaches memory whose pages are gone.
 *
 * Invariant: once ts_gate_close returned 0, no thread is inside a gated call, and none enters
 * until ts_gate_open. Entering announces itself first (inside + 1) and looks at `closed` second;
 * closing sets `closed` first and waits for `inside` to reach 0 second. Both sides are
 * sequentially consistent, so at least one of them sees the other: either the closer waits for
 * the caller, or the caller sees the gate closed, steps back out and waits. So `inside` is only
 * read until it is seen 0 once: after that, a non-zero count is a caller on its way back out.
 *
 * A call already inside when the gate closes (a synchronise waiting for a long kernel) is waited
 * for, but only so long: ts_gate_close gives up after its timeout, opens the gate again and says
 * so, rather than wait for a call that may never return (one blocked on the program's own host
 * function, for instance). */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "shim/shim.h"

static unsigned long inside; /* threads inside a gated call (atomic) */
static unsigned closed;      /* 1 while paused (atomic) */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER; /* closed went 1 -> 0 */
static pthread_cond_t gate_left = PTHREAD_COND_INITIALIZER;   /* inside went down, closed */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
/* Gated calls this thread is inside: a gated call that makes another (a driver whose entry
 * point calls its own exported symbol, which is tessera's) is one call, counted once, so it
 * never waits at the door for itself. */
static __thread unsigned depth __attribute__((tls_model("initial-exec")));

/* A child starts open and empty: its parent's threads are not its own, and its device memory
 * (none usable after a fork) is nothing to wait for. */
static void fork_child(void)
{
    pthread_mutex_init(&gate_lock, NULL);
    pthread_cond_init(&gate_opened, NULL);
    pthread_cond_init(&gate_left, NULL);
    __atomic_store_n(&inside, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&closed, 0, __ATOMIC_SEQ_CST);
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

/* Out again: tell a closer waiting for the last one. */
static void gate_step_out(void)
{
    if (__atomic_sub_fetch(&inside, 1, __ATOMIC_SEQ_CST) == 0 &&
        __atomic_load_n(&closed, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&gate_lock);
        pthread_cond_broadcast(&gate_left);
        pthread_mutex_unlock(&gate_lock);
    }
}

void ts_gate_enter(void)
{
    if (depth++ > 0)
        return;
    for (;;) {
        __atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST);
        if (__builtin_expect(!__atomic_load_n(&closed, __ATOMIC_SEQ_CST), 1))
            return;
        gate_step_out(); /* paused: wait outside, then try again */
        pthread_mutex_lock(&gate_lock);
        while (__atomic_load_n(&closed, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&gate_opened, &gate_lock);
        pthread_mutex_unlock(&gate_lock);
    }
}

void ts_gate_leave(void)
{
    if (--depth > 0)
        return;
    gate_step_out();
}

bool ts_gate_closed(void)
{
    return __atomic_load_n(&closed, __ATOMIC_SEQ_CST) != 0;
}

void ts_gate_open(void)
{
    pthread_mutex_lock(&gate_lock);
    __atomic_store_n(&closed, 0, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&gate_opened);
    pthread_mutex_unlock(&gate_lock);
}

/* CLOCK_MONOTONIC, in ns: the close's deadline, which no change of the wall clock moves. */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ts_gate_close(uint64_t timeout_ns)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&gate_lock);
    if (__atomic_exchange_n(&closed, 1, __ATOMIC_SEQ_CST)) {
        pthread_mutex_unlock(&gate_lock);
        return -EALREADY;
    }
    const uint64_t deadline = mono_ns() + timeout_ns;
    /* Waits of at most 50 ms, the deadline judged on the monotonic clock: what the condition
     * variable's wait returns (a timeout on the wall clock, which may jump; or a spurious
     * wake-up) decides nothing, so the gate gives up only once the deadline truly passed. */
    /* Once inside was seen 0 with the gate shut, it is empty for good: a thread that adds
     * itself afterwards sees the gate shut and steps out again without making its call, so a
     * later non-zero reading is such a passer-by, never a call (read once, never again). */
    bool empty;
    for (;;) {
        empty = __atomic_load_n(&inside, __ATOMIC_SEQ_CST) == 0;
        const uint64_t now = mono_ns();
        if (empty || now >= deadline)
            break;
        uint64_t step = deadline - now < 50000000u ? deadline - now : 50000000u;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until); /* pthread_cond_timedwait's clock */
        until.tv_nsec += (long)step;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&gate_left, &gate_lock, &until);
    }
    if (!empty) {
        __atomic_store_n(&closed, 0, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&gate_opened);
    }
    pthread_mutex_unlock(&gate_lock);
    return empty ? 0 : -ETIMEDOUT;
}
