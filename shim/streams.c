/* Which streams exist, and whether a graph capture is underway.
 *
 * Reuse fences must cover every stream work may still be running on. The legacy default stream
 * waits for all blocking streams (and per-thread default streams) of its context, so an event
 * there covers them; non-blocking streams need their own event, so they are registered here when
 * the program creates them (cuStreamCreate / cuStreamCreateWithPriority, which cudart uses for
 * cudaStreamCreate*). Captures are counted so that tessera never records, queries or waits on an
 * event, and never synchronises, while one is underway.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/shim.h"

typedef struct stream_rec {
    CUstream stream;
    CUcontext ctx;
} stream_rec;

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static stream_rec *streams;
static size_t nstreams, streams_cap;

#define MAX_CAPTURED 64
static CUstream captured[MAX_CAPTURED];
static int captures; /* captures underway (atomic) */

void ts_streams_add(CUstream s, CUcontext ctx, unsigned int flags)
{
    if (!(flags & CU_STREAM_NON_BLOCKING))
        return; /* the legacy stream's event covers blocking streams */
    pthread_mutex_lock(&streams_lock);
    if (nstreams == streams_cap) {
        size_t cap = streams_cap ? streams_cap * 2 : 64;
        stream_rec *n = realloc(streams, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&streams_lock);
            ts_log_once(&streams, "cannot track more non-blocking streams; set "
                                  "reuse_fence:sync to stay safe");
            return;
        }
        streams = n;
        streams_cap = cap;
    }
    streams[nstreams++] = (stream_rec){s, ctx};
    pthread_mutex_unlock(&streams_lock);
}

void ts_streams_remove(CUstream s)
{
    pthread_mutex_lock(&streams_lock);
    for (size_t i = 0; i < nstreams; i++) {
        if (streams[i].stream == s) {
            streams[i] = streams[--nstreams];
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
}

size_t ts_streams_nonblocking(CUcontext ctx, CUstream *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&streams_lock);
    for (size_t i = 0; i < nstreams; i++) {
        if (streams[i].ctx != ctx)
            continue;
        if (n < max)
            out[n] = streams[i].stream;
        n++;
    }
    pthread_mutex_unlock(&streams_lock);
    return n;
}

void ts_capture_begin(CUstream s)
{
    pthread_mutex_lock(&streams_lock);
    for (size_t i = 0; i < MAX_CAPTURED; i++) {
        if (!captured[i]) {
            captured[i] = s;
            break;
        }
    }
    __atomic_add_fetch(&captures, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&streams_lock);
}

void ts_capture_end(CUstream s)
{
    pthread_mutex_lock(&streams_lock);
    for (size_t i = 0; i < MAX_CAPTURED; i++) {
        if (captured[i] == s) {
            captured[i] = NULL;
            __atomic_sub_fetch(&captures, 1, __ATOMIC_ACQ_REL);
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
}

bool ts_capture_underway(void)
{
    return __atomic_load_n(&captures, __ATOMIC_ACQUIRE) > 0;
}

void ts_streams_reset_after_fork(void)
{
    /* The child has no CUDA streams of its own; the parent's handles mean nothing there. */
    pthread_mutex_init(&streams_lock, NULL);
    nstreams = 0;
    memset(captured, 0, sizeof captured);
    captures = 0;
}
