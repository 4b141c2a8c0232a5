/* The process paused and resumed: asked by another process of the user (tessera-stat pause PID,
 * resume PID, over the control channel) or by the program itself (tessera_pause,
 * tessera_resume, exported).
 *
 * Pause: the gate shuts (shim/gate.c), so every CUDA call of the program that could touch device
 * memory waits from then on, and the calls already inside are waited for (10 s at most); then
 * each allocator copies its live device memory to host memory and gives its pages back, keeping
 * every address reserved (core/pause.c). Resume: each allocator maps new pages at the same
 * addresses and copies the bytes back; then the gate opens and the waiting calls go on, on the
 * same bytes at the same addresses.
 *
 * Refused, with nothing changed, where it is not safe:
 *  - a capture is underway (a graph would record work on memory about to go);
 *  - blocks of this process are exported over CUDA IPC: another process may have them mapped,
 *    and its mapping names pages a pause would destroy;
 *  - a program call does not leave the device within 10 s (the gate opens again);
 *  - a device holds memory tessera does not own (the program's own driver allocations), or live
 *    memory in plain segments, which could not come back at the same address.
 * Who may ask: the control channel admits only this process's user and root (shim/control.c).
 *
 * pause_lock serialises pauses and resumes, whoever asks; it is taken before the gate's lock
 * and the allocators' mutexes, and the channel's thread takes it while serving (the channel's
 * lock is not held then).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "shim/pause.h"

#define PAUSE_WAIT_NS (10ull * 1000000000ull) /* for the program's calls to leave the device */
#define PAUSE_ALLOCATORS 256

static pthread_mutex_t pause_lock = PTHREAD_MUTEX_INITIALIZER;
static bool paused; /* under pause_lock */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A child is not paused: its gate starts open (gate.c) and it has no allocator yet (lend.c drops
 * the table), whatever state a thread of the parent left here. */
static void fork_child(void)
{
    pthread_mutex_init(&pause_lock, NULL);
    paused = false;
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

static void answer_device(ts_pause_answer *ans, int device, int status,
                          const ts_pause_report *r)
{
    if (ans->ndevices == TS_PAUSE_DEVICES)
        return;
    ans->dev[ans->ndevices++] = (ts_pause_device){
        .device = device, .status = (uint32_t)status, .saved = r->saved, .given = r->given,
        .reserved = r->reserved, .allocated = r->allocated, .time_us = r->time_us};
}

/* Pause every allocator; on a refusal, resume the ones already paused. Under pause_lock, the
 * gate shut. */
static unsigned allocators_pause(ts_pause_answer *ans)
{
    ts_allocator *a[PAUSE_ALLOCATORS];
    int dev[PAUSE_ALLOCATORS];
    size_t n = ts_lend_allocators(a, dev, PAUSE_ALLOCATORS);
    size_t done = 0;
    int rc = TS_PAUSE_OK;
    for (; done < n && rc == TS_PAUSE_OK; done++) {
        ts_pause_report r = {0};
        rc = ts_allocator_pause(a[done], &r);
        answer_device(ans, dev[done], rc, &r);
    }
    if (rc == TS_PAUSE_OK)
        return TS_PROC_OK;
    for (size_t i = 0; i + 1 < done; i++) /* the last one refused, and changed nothing */
        (void)ts_allocator_resume(a[i], NULL);
    return TS_PROC_DEVICE;
}

/* Resume every paused allocator: TS_PROC_OK when none is left paused. */
static unsigned allocators_resume(ts_pause_answer *ans)
{
    ts_allocator *a[PAUSE_ALLOCATORS];
    int dev[PAUSE_ALLOCATORS];
    size_t n = ts_lend_allocators(a, dev, PAUSE_ALLOCATORS);
    unsigned status = TS_PROC_OK;
    for (size_t i = 0; i < n; i++) {
        ts_pause_report r = {0};
        int rc = ts_allocator_resume(a[i], &r);
        if (rc == TS_PAUSE_NOT_PAUSED) /* made while paused, or resumed by an earlier try */
            rc = TS_PAUSE_OK;
        else if (rc != TS_PAUSE_OK)
            status = TS_PROC_DEVICE;
        answer_device(ans, dev[i], rc, &r);
    }
    return status;
}

static unsigned process_pause(ts_pause_answer *ans)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&pause_lock);
    unsigned status = TS_PROC_OK;
    if (paused)
        status = TS_PROC_ALREADY;
    else if (ts_capture_underway())
        status = TS_PROC_CAPTURE;
    else if (__atomic_load_n(&ts_ipc_exported, __ATOMIC_ACQUIRE) != 0)
        status = TS_PROC_IPC;
    else if (ts_gate_close(PAUSE_WAIT_NS) != 0)
        status = TS_PROC_BUSY;
    else {
        /* looked at again with the gate shut: an export or a capture may have begun meanwhile */
        if (ts_capture_underway())
            status = TS_PROC_CAPTURE;
        else if (__atomic_load_n(&ts_ipc_exported, __ATOMIC_ACQUIRE) != 0)
            status = TS_PROC_IPC;
        else
            status = allocators_pause(ans);
        paused = status == TS_PROC_OK;
        if (!paused)
            ts_gate_open();
    }
    pthread_mutex_unlock(&pause_lock);
    return status;
}

static unsigned process_resume(ts_pause_answer *ans)
{
    pthread_mutex_lock(&pause_lock);
    unsigned status = paused ? allocators_resume(ans) : TS_PROC_NOT_PAUSED;
    if (paused && status == TS_PROC_OK) {
        paused = false;
        ts_gate_open();
    }
    pthread_mutex_unlock(&pause_lock);
    return status;
}

/* --- the control channel's service ----------------------------------------------------------- */

static bool pause_request_served(void **data, const ts_ctl_peer_info *who, const void *msg,
                                 size_t len, ts_ctl_answer *out)
{
    (void)data; /* a peer holds nothing here */
    (void)who;  /* the channel admits only this process's user and root */
    ts_pause_request q;
    if (len != sizeof q)
        return false;
    memcpy(&q, msg, sizeof q);
    ts_pause_answer ans;
    memset(&ans, 0, sizeof ans);
    memcpy(&ans.h, out->buf, sizeof ans.h);
    if (q.h.type == TS_PAUSE_ASK)
        ans.h.status = (uint16_t)process_pause(&ans);
    else if (q.h.type == TS_RESUME_ASK)
        ans.h.status = (uint16_t)process_resume(&ans);
    else
        return false;
    memcpy(out->buf, &ans, sizeof ans);
    out->len = sizeof ans;
    return true;
}

static void pause_peer_gone(void **data)
{
    *data = NULL;
}

static const ts_ctl_service pause_service = {
    .type_first = TS_PAUSE_ASK,
    .type_last = TS_PAUSE_TYPE_LAST,
    .request = pause_request_served,
    .gone = pause_peer_gone,
};

int ts_pause_serve(void)
{
    ts_ctl_address addr;
    return ts_ctl_serve(&pause_service, &addr);
}

/* --- the program's own calls (exports.def) ---------------------------------------------------- */

/* Why a call of the program was refused, on stderr (the program gets the status too). */
static void say_refused(const char *call, unsigned status, const ts_pause_answer *ans)
{
    if (status != TS_PROC_DEVICE) {
        ts_log("%s: refused: the process %s", call, ts_proc_why(status));
        return;
    }
    for (uint32_t i = 0; i < ans->ndevices; i++)
        if (ans->dev[i].status != TS_PAUSE_OK)
            ts_log("%s: refused: device %d: %s", call, ans->dev[i].device,
                   ts_pause_why(ans->dev[i].status));
}

/* The program's own pause or resume: the status, and why on stderr when it was refused. */
static int own_call(const char *call, unsigned (*act)(ts_pause_answer *))
{
    ts_pause_answer ans;
    memset(&ans, 0, sizeof ans);
    unsigned status = act(&ans);
    if (status != TS_PROC_OK)
        say_refused(call, status, &ans);
    return (int)status;
}

int tessera_pause(void)
{
    return own_call("tessera_pause", process_pause);
}

int tessera_resume(void)
{
    return own_call("tessera_resume", process_resume);
}
