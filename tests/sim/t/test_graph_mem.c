/* Graph memory nodes: cuMemAllocAsync and cuMemFreeAsync on a capturing stream record
 * allocation and free nodes; the memory exists from the launch that allocates it until a free
 * (in the graph, in another graph, or outside any graph); relaunching with the allocation still
 * live fails unless the executable graph frees on launch; cuDeviceGraphMemTrim gives back what
 * is not in use; the graph memory attributes count it all. */
#include <string.h>

#include "drv.h"

static CUcontext ctx;

static uint64_t attr(CUgraphMem_attribute a)
{
    cuuint64_t v = 12345;
    CU(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

/* Capture on s: allocate n bytes, set them to val, copy them to host, and (if free_it) free
 * them; returns the graph and the allocation's address. */
static CUgraph capture_fill(CUstream s, size_t n, unsigned char val, void *host, int free_it,
                            CUdeviceptr *out)
{
    CUgraph g = NULL;
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p = 0;
    CU(cuMemAllocAsync(&p, n, s));
    CHECK(p != 0);
    CU(cuMemsetD8Async(p, val, n, s));
    CU(cuMemcpyDtoHAsync(host, p, n, s));
    if (free_it)
        CU(cuMemFreeAsync(p, s));
    CU(cuStreamEndCapture(s, &g));
    *out = p;
    return g;
}

static void test_nodes_allocate_at_launch_and_free_in_order(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static unsigned char host[3 << 20];
    struct tessera_sim_counters c0 = counters(0);
    CUdeviceptr p;
    memset(host, 0, sizeof host);
    CUgraph g = capture_fill(s, 3 << 20, 0x4c, host, 1, &p);
    /* captured, not run: the address exists, no memory yet */
    CHECK_EQ(counters(0).bytes_in_use, c0.bytes_in_use);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
    CHECK_EQ(host[0], 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    CUgraphExec second;
    EXPECT(cuGraphInstantiateWithFlags(&second, g, 0), CUDA_ERROR_INVALID_VALUE); /* one at a time */
    for (int round = 0; round < 3; round++) { /* freed in the graph: relaunching is fine */
        host[0] = host[(3 << 20) - 1] = 0;
        CU(cuGraphLaunch(x, s));
        CU(cuStreamSynchronize(s));
        CHECK_EQ(host[0], 0x4c);
        CHECK_EQ(host[(3 << 20) - 1], 0x4c);
    }
    struct tessera_sim_counters c1 = counters(0);
    CHECK_EQ(c1.graph_alloc_calls - c0.graph_alloc_calls, 3);
    CHECK_EQ(c1.graph_free_calls - c0.graph_free_calls, 3);
    /* freed memory stays reserved for the graph (4 MiB: two pages), used by nothing */
    CHECK_EQ(c1.bytes_in_use - c0.bytes_in_use, 4 << 20);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 4 << 20);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 4 << 20);
    EXPECT(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);       /* not allocated now */
    EXPECT(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    CU(cuDeviceGraphMemTrim(0));
    CHECK_EQ(counters(0).bytes_in_use, c0.bytes_in_use);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 4 << 20);
    cuuint64_t zero = 0, one = 1;
    CU(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0);
    EXPECT(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGetGraphMemAttribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero),
           CUDA_ERROR_INVALID_DEVICE);
    EXPECT(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, NULL),
           CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuDeviceGraphMemTrim(7), CUDA_ERROR_INVALID_DEVICE);
    /* trimmed, and launched again: backed again */
    CU(cuGraphLaunch(x, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 4 << 20);
    CU(cuGraphExecDestroy(x));
    CU(cuGraphInstantiateWithFlags(&x, g, 0)); /* the first one is gone: allowed again */
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(g));
    /* neither graph nor executable graph: the address and its memory are gone */
    CHECK_EQ(counters(0).bytes_in_use, c0.bytes_in_use);
    EXPECT(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    CU(cuStreamDestroy(s));
}

static void test_unfreed_allocation_outlives_the_launch(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    static unsigned char host[1 << 20];
    CUdeviceptr p;
    CUgraph g = capture_fill(s, 1 << 20, 0x17, host, 0, &p);
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    CU(cuGraphDestroy(g)); /* the executable graph keeps the node */
    CU(cuGraphLaunch(x, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[100], 0x17); /* usable after the launch */
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 2 << 20);
    EXPECT(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE); /* still allocated */
    CU(cuMemsetD8(p, 0x18, 16));                           /* ordinary work may use it */
    CU(cuMemFreeAsync(p, s));                              /* freed outside the graph */
    EXPECT(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE); /* once */
    CU(cuGraphLaunch(x, s)); /* the free is queued before this launch: allowed */
    CU(cuStreamSynchronize(s));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 2 << 20); /* this launch's allocation */
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[100], 0x17);
    CU(cuMemFree(p)); /* cuMemFree too */
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    CU(cuGraphExecDestroy(x));
    CU(cuStreamDestroy(s));
}

static void test_auto_free_on_launch(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    static unsigned char host[1 << 20];
    CUdeviceptr p;
    CUgraph g = capture_fill(s, 1 << 20, 0x29, host, 0, &p);
    CUgraphExec x;
    EXPECT(cuGraphInstantiateWithFlags(&x, g, 1u << 20), CUDA_ERROR_INVALID_VALUE);
    CU(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    struct tessera_sim_counters c0 = counters(0);
    for (int i = 0; i < 3; i++)
        CU(cuGraphLaunch(x, s)); /* each launch frees the last one's allocation first */
    CU(cuStreamSynchronize(s));
    struct tessera_sim_counters c1 = counters(0);
    CHECK_EQ(c1.graph_alloc_calls - c0.graph_alloc_calls, 3);
    CHECK_EQ(c1.graph_free_calls - c0.graph_free_calls, 2);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 2 << 20);
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(g));
    /* the allocation outlives both (the flag does not change destruction): freed here */
    CHECK_EQ(((unsigned char *)(uintptr_t)p)[0], 0x29);
    CU(cuMemFree(p));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    size_t size;
    CUdeviceptr base;
    EXPECT(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    CU(cuStreamDestroy(s));
}

static void test_free_node_of_another_graph(void)
{
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    static unsigned char host[4096];
    CUdeviceptr p;
    CUgraph ga = capture_fill(s, 4096, 0x33, host, 0, &p);
    /* a graph of one free node */
    CUgraph gf;
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU(cuMemFreeAsync(p, s));
    CU(cuStreamEndCapture(s, &gf));
    CUgraphExec xa, xf;
    CU(cuGraphInstantiateWithFlags(&xa, ga, 0));
    CU(cuGraphInstantiateWithFlags(&xf, gf, 0));
    EXPECT(cuGraphLaunch(xf, s), CUDA_ERROR_INVALID_VALUE); /* nothing allocated to free */
    for (int i = 0; i < 2; i++) {
        CU(cuGraphLaunch(xa, s));
        CU(cuGraphLaunch(xf, s));
    }
    CU(cuStreamSynchronize(s));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    /* a free node needs a graph allocation */
    CUdeviceptr plain;
    CU(cuMemAlloc(&plain, 4096));
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuMemFreeAsync(plain, s), CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureStatus st;
    CU(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE); /* refused, not invalidated */
    CUgraph empty;
    CU(cuStreamEndCapture(s, &empty));
    CU(cuGraphDestroy(empty));
    CHECK_EQ(((unsigned char *)(uintptr_t)plain)[0], 0); /* and not freed */
    CU(cuMemFree(plain));
    CU(cuGraphExecDestroy(xa));
    CU(cuGraphExecDestroy(xf));
    CU(cuGraphDestroy(ga));
    CU(cuGraphDestroy(gf));
    CU(cuStreamDestroy(s));
}

static void test_capture_edges(void)
{
    CUstream s, t;
    CU(cuStreamCreate(&s, 0));
    CU(cuStreamCreate(&t, 0));
    size_t base_used = counters(0).bytes_in_use;
    /* an invalidated capture drops its allocation nodes' addresses */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p;
    CU(cuMemAllocAsync(&p, 1 << 20, s));
    CUdeviceptr q;
    EXPECT(cuMemAlloc(&q, 16), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* invalidates */
    EXPECT(cuMemAllocAsync(&q, 16, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUgraph g = NULL;
    EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUdeviceptr base;
    size_t size;
    EXPECT(cuMemGetAddressRange(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    /* a graph with memory nodes cannot be launched into a capture */
    static unsigned char host[64];
    CUgraph gm = capture_fill(s, 64, 1, host, 1, &p);
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, gm, 0));
    CU(cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_GLOBAL));
    EXPECT(cuGraphLaunch(x, t), CUDA_ERROR_NOT_SUPPORTED);
    CU(cuStreamEndCapture(t, &g));
    CU(cuGraphDestroy(g));
    /* launch memory that does not fit: out of memory, nothing allocated */
    CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CUdeviceptr big;
    CU(cuMemAllocAsync(&big, (size_t)3 << 29, s)); /* the device has 1 GiB: the address fits */
    CU(cuMemFreeAsync(big, s));
    CU(cuStreamEndCapture(s, &g));
    CUgraphExec xb;
    CU(cuGraphInstantiateWithFlags(&xb, g, 0));
    struct tessera_sim_counters c0 = counters(0);
    EXPECT(cuGraphLaunch(xb, s), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ(counters(0).graph_alloc_calls, c0.graph_alloc_calls);
    CHECK_EQ(counters(0).failed_allocs, c0.failed_allocs + 1);
    CU(cuGraphExecDestroy(xb));
    CU(cuGraphDestroy(g));
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(gm));
    CHECK_EQ(counters(0).bytes_in_use, base_used);
    CU(cuStreamDestroy(s));
    CU(cuStreamDestroy(t));
}

/* A context that goes takes its graph allocations; its graphs then fail to launch. */
static void test_context_teardown(void)
{
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext own;
    CU(cuCtxCreate(&own, NULL, 0, dev));
    CUstream s;
    CU(cuStreamCreate(&s, 0));
    static unsigned char host[64];
    CUdeviceptr p;
    CUgraph g = capture_fill(s, 64, 2, host, 0, &p);
    CUgraphExec x;
    CU(cuGraphInstantiateWithFlags(&x, g, 0));
    CU(cuGraphLaunch(x, s));
    CU(cuStreamSynchronize(s));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 2 << 20);
    CU(cuCtxDestroy(own));
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
    CHECK_EQ(attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
    CU(cuCtxSetCurrent(ctx));
    CU(cuGraphExecDestroy(x));
    CU(cuGraphDestroy(g));
}

int main(void)
{
    alarm(60);
    ctx = drv_setup(0);
    RUN(test_nodes_allocate_at_launch_and_free_in_order);
    RUN(test_unfreed_allocation_outlives_the_launch);
    RUN(test_auto_free_on_launch);
    RUN(test_free_node_of_another_graph);
    RUN(test_capture_edges);
    RUN(test_context_teardown);
    return 0;
}
