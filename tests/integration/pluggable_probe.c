/* PyTorch's pluggable allocator, as PyTorch drives it: libtessera.so loaded with dlopen
 * (RTLD_LOCAL, as ctypes loads it; no LD_PRELOAD needed), its two functions looked up by name and
 * called with PyTorch's signatures, on several streams, from a second thread, for another
 * device, and during a stream capture. Prints what it saw; test_pluggable.py reads the counters
 * from the stats page while it waits (READY), then after the frees (FREED).
 *
 *   pluggable_probe LIBTESSERA [--devices 2]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/types.h>

#include "probe_common.h"

typedef void *(*alloc_fn)(ssize_t size, int device, cudaStream_t stream);
typedef void (*free_fn)(void *ptr, ssize_t size, int device, cudaStream_t stream);

static alloc_fn al;
static free_fn fr;

#define MiB ((size_t)1 << 20)

/* Write a pattern through stream s and read it back: 1 when every byte came back. */
static int bytes_ok(void *dev, size_t n, unsigned char seed, cudaStream_t s)
{
    unsigned char *in = malloc(n), *out = malloc(n);
    int ok = in && out;
    if (ok) {
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)(seed + i * 7);
        CHECK(cudaMemcpyAsync(dev, in, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaMemcpyAsync(out, dev, n, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        ok = memcmp(in, out, n) == 0;
    }
    free(in);
    free(out);
    return ok;
}

static cudaStream_t s1;
static void *thread_block;
static int thread_ctx_current;

/* The driver's current context (the driver the runtime loaded, asked directly). */
static void *current_ctx(void)
{
    typedef int (*get_fn)(void **ctx);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    get_fn get = drv ? (get_fn)dlsym(drv, "cuCtxGetCurrent") : NULL;
    void *ctx = NULL;
    if (!get || get(&ctx) != 0)
        ctx = NULL;
    return ctx;
}

/* A thread that has made no CUDA call: PyTorch's allocation must still find its context, and
 * the thread keeps it current afterwards, as after the runtime's first call. */
static void *worker(void *arg)
{
    (void)arg;
    thread_block = al((ssize_t)MiB, 0, s1);
    thread_ctx_current = current_ctx() == arg;
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: pluggable_probe LIBTESSERA [--devices 2]\n");
        return 2;
    }
    int two = argc > 3 && strcmp(argv[2], "--devices") == 0 && atoi(argv[3]) == 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("RESULT status=error dlopen=%s\n", dlerror());
        return 1;
    }
    al = (alloc_fn)dlsym(lib, "tessera_pluggable_alloc");
    fr = (free_fn)dlsym(lib, "tessera_pluggable_free");
    if (!al || !fr) {
        printf("RESULT status=error dlsym=missing\n");
        return 1;
    }

    /* what torch.cuda's lazy initialisation leaves: the device's context current, streams */
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    cudaStream_t s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));

    const size_t n = 3 * MiB;
    void *a = al((ssize_t)n, 0, s1);
    int a_bytes = a && bytes_ok(a, n, 1, s1);
    void *b = al((ssize_t)n, 0, s2);
    int b_bytes = b && bytes_ok(b, n, 2, s2);
    fr(a, (ssize_t)n, 0, s1);
    void *c = al((ssize_t)n, 0, s1); /* s1's own block: reused at once */
    void *d = al((ssize_t)n, 0, s2); /* s2 never gets s1's block */
    void *e = al((ssize_t)n, 0, NULL); /* the legacy default stream, PyTorch's default */
    int e_bytes = e && bytes_ok(e, n, 3, 0);
    void *zero = al(0, 0, s1);
    void *negative = al(-1, 0, s1);
    void *no_device = al((ssize_t)n, -1, s1);
    void *past_devices = al((ssize_t)n, 64, s1);
    fr(NULL, 0, 0, s1);
    void *one = al(1, 0, s1); /* a one-byte tensor */
    int one_bytes = one && bytes_ok(one, 1, 5, s1);

    void *main_ctx = current_ctx();
    pthread_t t;
    if (pthread_create(&t, NULL, worker, main_ctx) != 0 || pthread_join(t, NULL) != 0)
        thread_block = NULL;
    int t_bytes = thread_block && bytes_ok(thread_block, MiB, 4, s1);

    /* another device than the current one: served on that device, the current one unchanged */
    void *other = NULL;
    int other_dev = -1, cur_dev = -1;
    if (two) {
        other = al((ssize_t)MiB, 1, NULL);
        struct cudaPointerAttributes at;
        if (other && cudaPointerGetAttributes(&at, other) == cudaSuccess)
            other_dev = at.device;
        CHECK(cudaGetDevice(&cur_dev));
    }
    int ctx_kept = current_ctx() == main_ctx;

    /* during a capture: allocations are the graph's (the driver's), not tessera's; a block of
     * tessera's freed inside the capture is freed (never reused by the capture's work) */
    void *f = al((ssize_t)MiB, 0, s1);
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    void *g = al((ssize_t)MiB, 0, s1);
    fr(f, (ssize_t)MiB, 0, s1);
    void *h = al((ssize_t)MiB, 0, s1);
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s1, &graph));
    if (graph)
        CHECK(cudaGraphDestroy(graph));

    printf("SEEN a_bytes=%d b_bytes=%d e_bytes=%d t_bytes=%d one_bytes=%d same_stream_reuse=%d "
           "other_stream_differs=%d distinct_streams=%d zero_is_null=%d refused_is_null=%d "
           "thread_ctx_current=%d other_dev=%d cur_dev=%d ctx_kept=%d capture_alloc_reused_f=%d\n",
           a_bytes, b_bytes, e_bytes, t_bytes, one_bytes, c == a, d != a && d != c, b != a,
           zero == NULL, !negative && !no_device && !past_devices, thread_ctx_current, other_dev,
           cur_dev, ctx_kept, (g && g == f) || (h && h == f));
    wait_for_go("READY");

    fr(c, (ssize_t)n, 0, s1);
    fr(b, (ssize_t)n, 0, s2);
    fr(d, (ssize_t)n, 0, s2);
    fr(e, (ssize_t)n, 0, NULL);
    fr(thread_block, (ssize_t)MiB, 0, s1);
    fr(one, 1, 0, s1);
    if (other)
        fr(other, (ssize_t)MiB, 1, NULL);
    if (g)
        fr(g, (ssize_t)MiB, 0, s1);
    if (h)
        fr(h, (ssize_t)MiB, 0, s1);
    CHECK(cudaDeviceSynchronize());
    wait_for_go("FREED");
    printf("RESULT status=ok\n");
    return 0;
}
