/* LD_PRELOAD probe for sim-dlsym-once: interposes dlsym and counts the lookups of cu*
 * symbols made on a libcuda.so.1 handle. cuGetProcAddress_v2 is answered with a wrapper
 * that logs every lookup (symbol, version, flags, and which pointer the caller used), the
 * same way an allocator shim hooks the runtime. The test reads the log through
 * tsim_probe_log(). Not thread safe: the runtime initialises under pthread_once. */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>

#define API __attribute__((visibility("default")))
#define MAX_CALLS 1024

struct tsim_probe_call {
    int via; /* 0: the dlsym'd pointer, 1: the 11030 self-lookup, 2: the 12000 one */
    char symbol[64];
    int version;
    unsigned long long flags;
};

struct tsim_probe_log {
    int ndlsym;
    char dlsym_names[8][64];
    int ncalls;
    struct tsim_probe_call calls[MAX_CALLS];
};

static struct tsim_probe_log log_;

typedef void *(*dlsym_fn)(void *, const char *);
typedef CUresult (*gpa5_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa4_t)(const char *, void **, int, cuuint64_t);

static gpa5_t real_gpa5;

static dlsym_fn real_dlsym(void)
{
    static dlsym_fn fn;
    if (!fn) {
        fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!fn)
            fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return fn;
}

static void record(int via, const char *symbol, int version, cuuint64_t flags)
{
    if (log_.ncalls >= MAX_CALLS)
        return;
    struct tsim_probe_call *c = &log_.calls[log_.ncalls++];
    c->via = via;
    strncpy(c->symbol, symbol ? symbol : "(null)", sizeof c->symbol - 1);
    c->version = version;
    c->flags = flags;
}

static CUresult wrap_gpa12(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult wrap_gpa11(const char *, void **, int, cuuint64_t);

static CUresult lookup(int via, const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *st)
{
    record(via, symbol, version, flags);
    CUresult r = real_gpa5(symbol, pfn, version, flags, st);
    if (r == CUDA_SUCCESS && symbol && strcmp(symbol, "cuGetProcAddress") == 0 && *pfn)
        *pfn = version >= 12000 ? (void *)wrap_gpa12 : (void *)wrap_gpa11;
    return r;
}

static CUresult wrap_gpa_dlsym(const char *s, void **p, int v, cuuint64_t f, CUdriverProcAddressQueryResult *st)
{
    return lookup(0, s, p, v, f, st);
}

static CUresult wrap_gpa11(const char *s, void **p, int v, cuuint64_t f)
{
    return lookup(1, s, p, v, f, NULL);
}

static CUresult wrap_gpa12(const char *s, void **p, int v, cuuint64_t f, CUdriverProcAddressQueryResult *st)
{
    return lookup(2, s, p, v, f, st);
}

static int is_libcuda(void *handle)
{
    struct link_map *lm = NULL;
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return 0;
    return lm->l_name && strstr(lm->l_name, "libcuda.so") != NULL;
}

API void *dlsym(void *handle, const char *name)
{
    void *r = real_dlsym()(handle, name);
    if (name[0] == 'c' && name[1] == 'u' && is_libcuda(handle)) {
        if (log_.ndlsym < 8)
            strncpy(log_.dlsym_names[log_.ndlsym], name, 63);
        log_.ndlsym++;
        if (r && strcmp(name, "cuGetProcAddress_v2") == 0) {
            real_gpa5 = (gpa5_t)r;
            return (void *)wrap_gpa_dlsym;
        }
    }
    return r;
}

API const struct tsim_probe_log *tsim_probe_log(void);
API const struct tsim_probe_log *tsim_probe_log(void) { return &log_; }
