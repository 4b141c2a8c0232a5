/* Which streams exist, which host threads use each context, and whether a graph capture is
 * underway.
 *
 * The census (stream-ordered reuse, docs/DESIGN.md): while a context has had no stream created
 * and only one host thread has made it current or allocated in it, all of its device work runs
 * in one queue (the legacy default stream, and that thread's per-thread default stream, which
 * the legacy stream is ordered with both ways), so a freed block can be reused at once with no
 * device call. Both facts only ever change one way. A context's census record never moves, so a
 * backend may keep a pointer to it and read it without the lock.
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
    bool nonblocking;
} stream_rec;

#define MAX_CENSUS 256
static ts_census census[MAX_CENSUS];
static size_t ncensus;
static uint64_t thread_serial; /* host threads numbered from 1, never reused (atomic) */
static __thread uint64_t tls_thread __attribute__((tls_model("initial-exec")));

static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;
static stream_rec *streams;
static size_t nstreams, streams_cap;

#define MAX_CAPTURED 64
static CUstream captured[MAX_CAPTURED];
static int captures; /* captures underway (atomic) */

/* The census record of ctx, created when create is set (NULL when the table is full: callers
 * then treat the context as having many streams and threads). Under streams_lock. */
static ts_census *census_find(CUcontext ctx, bool create)
{
    for (size_t i = 0; i < ncensus; i++)
        if (census[i].ctx == ctx)
            return &census[i];
    if (!create || ncensus == MAX_CENSUS)
        return NULL;
    census[ncensus].ctx = ctx;
    return &census[ncensus++];
}

static ts_census census_overflow = {NULL, 0, true, 1};

ts_census *ts_census_of(CUcontext ctx)
{
    pthread_mutex_lock(&streams_lock);
    ts_census *c = census_find(ctx, true);
    pthread_mutex_unlock(&streams_lock);
    return c ? c : &census_overflow;
}

bool ts_census_note_thread(CUcontext ctx)
{
    if (!tls_thread)
        tls_thread = __atomic_add_fetch(&thread_serial, 1, __ATOMIC_RELAXED);
    bool flipped = false;
    pthread_mutex_lock(&streams_lock);
    ts_census *c = census_find(ctx, true);
    if (c && !c->owner) {
        c->owner = tls_thread;
    } else if (c && c->owner != tls_thread && !c->many_threads) {
        __atomic_store_n(&c->many_threads, true, __ATOMIC_RELEASE);
        flipped = true;
    }
    pthread_mutex_unlock(&streams_lock);
    return flipped;
}

void ts_streams_add(CUstream s, CUcontext ctx, unsigned int flags)
{
    pthread_mutex_lock(&streams_lock);
    ts_census *c = census_find(ctx, true);
    if (c)
        __atomic_add_fetch(&c->streams, 1, __ATOMIC_RELEASE);
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
    streams[nstreams++] = (stream_rec){s, ctx, (flags & CU_STREAM_NON_BLOCKING) != 0};
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
        if (streams[i].ctx != ctx || !streams[i].nonblocking)
            continue; /* the legacy stream orders blocking streams */
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
    memset(census, 0, sizeof census);
    ncensus = 0;
    memset(captured, 0, sizeof captured);
    captures = 0;
}
