/* CUDA arrays: 1-D, 2-D, 3-D, layered and cube map shapes within an H100's limits, counted
 * against the device, their descriptors read back, destroyed by cuArrayDestroy only. */
#include <string.h>

#include "drv.h"

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d, CUarray_format f,
                                     unsigned ch, unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR x;
    memset(&x, 0, sizeof x);
    x.Width = w;
    x.Height = h;
    x.Depth = d;
    x.Format = f;
    x.NumChannels = ch;
    x.Flags = flags;
    return x;
}

/* make it, check the bytes it takes from the device (2 MiB pages) and its descriptor */
static CUarray make(const CUDA_ARRAY3D_DESCRIPTOR *d, uint64_t bytes)
{
    uint64_t before = counters(0).bytes_in_use;
    CUarray a;
    CU(cuArray3DCreate(&a, d));
    CHECK_EQ(counters(0).bytes_in_use - before, (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20));
    CUDA_ARRAY3D_DESCRIPTOR back;
    memset(&back, 0xff, sizeof back);
    CU(cuArray3DGetDescriptor(&back, a));
    CHECK(memcmp(&back, d, sizeof back) == 0);
    return a;
}

static void test_shapes(void)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUarray a[8];
    int n = 0;
    d = desc3(131072, 0, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0);           /* 1-D */
    a[n++] = make(&d, 131072);
    d = desc3(1000, 3000, 0, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_SURFACE_LDST); /* 2-D */
    a[n++] = make(&d, 1000ull * 3000 * 16);
    d = desc3(256, 256, 64, CU_AD_FORMAT_HALF, 2, 0);                    /* 3-D */
    a[n++] = make(&d, 256ull * 256 * 64 * 4);
    d = desc3(512, 0, 16, CU_AD_FORMAT_SIGNED_INT32, 1, CUDA_ARRAY3D_LAYERED); /* 1-D layered */
    a[n++] = make(&d, 512ull * 16 * 4);
    d = desc3(512, 512, 8, CU_AD_FORMAT_UNSIGNED_INT16, 1, CUDA_ARRAY3D_LAYERED);
    a[n++] = make(&d, 512ull * 512 * 8 * 2);
    d = desc3(128, 128, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);
    a[n++] = make(&d, 128ull * 128 * 6 * 4);
    d = desc3(64, 64, 12, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED);
    a[n++] = make(&d, 64ull * 64 * 12 * 4);
    d = desc3(640, 480, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, CUDA_ARRAY3D_TEXTURE_GATHER);
    a[n++] = make(&d, 640ull * 480 * 4);
    /* a 2-D descriptor describes the 2-D ones only */
    CUDA_ARRAY_DESCRIPTOR d2;
    CU(cuArrayGetDescriptor(&d2, a[1]));
    CHECK_EQ(d2.Width, 1000);
    CHECK_EQ(d2.Height, 3000);
    CHECK_EQ(d2.Format, CU_AD_FORMAT_FLOAT);
    CHECK_EQ(d2.NumChannels, 4);
    EXPECT(cuArrayGetDescriptor(&d2, a[2]), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuArray3DGetDescriptor(NULL, a[2]), CUDA_ERROR_INVALID_VALUE);
    /* cuArrayCreate's arrays have 3-D descriptors too */
    CUDA_ARRAY_DESCRIPTOR two = {64, 32, CU_AD_FORMAT_UNSIGNED_INT32, 2};
    CUarray t;
    CU(cuArrayCreate(&t, &two));
    CUDA_ARRAY3D_DESCRIPTOR back;
    CU(cuArray3DGetDescriptor(&back, t));
    CHECK_EQ(back.Width, 64);
    CHECK_EQ(back.Height, 32);
    CHECK_EQ(back.Depth, 0);
    CHECK_EQ(back.Flags, 0);
    CU(cuArrayDestroy(t));
    uint64_t used = counters(0).bytes_in_use;
    for (int i = 0; i < n; i++) {
        EXPECT(cuMemFree((CUdeviceptr)(uintptr_t)a[i]), CUDA_ERROR_INVALID_VALUE);
        CU(cuArrayDestroy(a[i]));
    }
    CHECK(counters(0).bytes_in_use < used);
    EXPECT(cuArrayDestroy(a[0]), CUDA_ERROR_INVALID_HANDLE);
    EXPECT(cuArray3DGetDescriptor(&back, a[0]), CUDA_ERROR_INVALID_HANDLE);
}

static void test_refused(void)
{
    struct {
        CUDA_ARRAY3D_DESCRIPTOR d;
        CUresult want;
    } cases[] = {
        {desc3(0, 4, 4, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE},      /* no width */
        {desc3(4, 0, 4, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE},      /* depth, no height */
        {desc3(4, 4, 4, CU_AD_FORMAT_FLOAT, 3, 0), CUDA_ERROR_INVALID_VALUE},      /* 3 channels */
        {desc3(4, 4, 4, (CUarray_format)0x77, 1, 0), CUDA_ERROR_INVALID_VALUE},    /* format */
        {desc3(131073, 0, 0, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE}, /* 1-D limit */
        {desc3(16, 65537, 0, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE}, /* 2-D limit */
        {desc3(16385, 4, 4, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE},  /* 3-D limits */
        {desc3(4, 16385, 4, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE},
        {desc3(4, 4, 16385, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE},
        {desc3(4, 4, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE},
        {desc3(4, 4, 2049, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE},
        {desc3(32769, 4, 2, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE},
        {desc3(32769, 0, 2, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 0, 2049, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 4, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE}, /* not square */
        {desc3(8, 8, 5, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE}, /* 6 faces */
        {desc3(8, 8, 12, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 8, 9, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED),
         CUDA_ERROR_INVALID_VALUE},
        {desc3(32769, 32769, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 8, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 0, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER), CUDA_ERROR_INVALID_VALUE},
        {desc3(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, 0x4000), CUDA_ERROR_INVALID_VALUE},  /* unknown flag */
        {desc3(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE), CUDA_ERROR_NOT_SUPPORTED},
        {desc3(8, 8, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING), CUDA_ERROR_NOT_SUPPORTED},
    };
    uint64_t used = counters(0).bytes_in_use;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CUarray a = (CUarray)(uintptr_t)1;
        CUresult r = cuArray3DCreate(&a, &cases[i].d);
        if (r != cases[i].want)
            fprintf(stderr, "case %zu: %d\n", i, (int)r);
        CHECK_EQ(r, cases[i].want);
    }
    CHECK_EQ(counters(0).bytes_in_use, used);
    CUarray a;
    EXPECT(cuArray3DCreate(&a, NULL), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR ok = desc3(8, 8, 8, CU_AD_FORMAT_FLOAT, 1, 0);
    EXPECT(cuArray3DCreate(NULL, &ok), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuArrayCreate(&a, NULL), CUDA_ERROR_INVALID_VALUE);
    /* as big as the device allows, then out of memory */
    CUDA_ARRAY3D_DESCRIPTOR big = desc3(16384, 16384, 1, CU_AD_FORMAT_FLOAT, 4, 0); /* 4 GiB */
    EXPECT(cuArray3DCreate(&a, &big), CUDA_ERROR_OUT_OF_MEMORY);
    CUcontext cur;
    CU(cuCtxPopCurrent(&cur));
    EXPECT(cuArray3DCreate(&a, &ok), CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxPushCurrent(cur));
}

int main(void)
{
    alarm(60);
    drv_setup(0);
    RUN(test_shapes);
    RUN(test_refused);
    return 0;
}
