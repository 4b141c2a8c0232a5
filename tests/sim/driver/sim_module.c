/* Simulated CUDA driver: modules (cuModuleLoad, cuModuleLoadData, cuModuleLoadDataEx,
 * cuModuleGetFunction, cuModuleUnload).
 *
 * No code is compiled or run for the simulated device, so a module is what the driver checks
 * before it would: an image that is PTX text (".version" and ".target" present, a target no newer
 * than the device's sm_90), an ELF cubin or a fat binary; and the names of its kernels. PTX names
 * them with ".entry"; in a binary image a kernel's name is a string of its symbol table, found
 * as a NUL-delimited string inside the image (a compressed fat binary hides them:
 * cuModuleGetFunction then answers CUDA_ERROR_NOT_FOUND). A function is launched like any
 * kernel here: in stream order, computing nothing. A module belongs to the context current when
 * it was loaded. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_MAGIC_MODULE 0x444f4d53u   /* 'SMOD' */
#define SIM_MAGIC_FUNCTION 0x434e5546u /* 'FUNC' */
#define MODULE_FILE_MAX ((size_t)256 << 20)
#define FATBIN_MAGIC 0xba55ed50u

struct sim_function {
    uint32_t magic;
    struct sim_module *mod;
    struct sim_function *next;
    char name[];
};

/* A loaded module. Invariant: on the registry list exactly while its handle is valid. */
struct sim_module {
    uint32_t magic;
    struct sim_ctx *ctx;
    char *image;  /* a copy: PTX text (NUL-terminated) or the binary image */
    size_t size;  /* bytes of image (PTX: without the NUL) */
    bool binary;
    struct sim_function *funcs;
    struct sim_module *next;
};

static struct sim_module *modules;

static struct sim_module *module_lookup(CUmodule h)
{
    for (struct sim_module *m = modules; m; m = m->next)
        if (m == (struct sim_module *)h)
            return m;
    return NULL;
}

/* The size of a binary image from its header, 0 when it is not one (or is truncated nonsense). */
static size_t binary_size(const unsigned char *p)
{
    if (p[0] != 0x7f && p[0] != (FATBIN_MAGIC & 0xff))
        return 0; /* text: the header fields below may lie past its end */
    if (memcmp(p, "\177ELF", 4) == 0 && p[4] == 2 /* ELFCLASS64 */) {
        uint64_t shoff;
        uint16_t shentsize, shnum;
        memcpy(&shoff, p + 0x28, sizeof shoff);
        memcpy(&shentsize, p + 0x3a, sizeof shentsize);
        memcpy(&shnum, p + 0x3c, sizeof shnum);
        uint64_t end = shoff + (uint64_t)shentsize * shnum;
        return shoff && end > shoff && end <= MODULE_FILE_MAX ? (size_t)end : 0;
    }
    uint32_t magic;
    memcpy(&magic, p, sizeof magic);
    if (magic == FATBIN_MAGIC) {
        uint16_t header;
        uint64_t fat;
        memcpy(&header, p + 6, sizeof header);
        memcpy(&fat, p + 8, sizeof fat);
        return header >= 16 && fat <= MODULE_FILE_MAX ? header + (size_t)fat : 0;
    }
    return 0;
}

/* PTX: CUDA_SUCCESS, or why the driver would refuse to compile it for an sm_90 device. */
static CUresult ptx_check(const char *text)
{
    const char *target = strstr(text, ".target");
    if (!strstr(text, ".version") || !target)
        return CUDA_ERROR_INVALID_IMAGE;
    const char *sm = strstr(target, "sm_");
    if (!sm)
        return CUDA_ERROR_INVALID_PTX;
    long arch = strtol(sm + 3, NULL, 10);
    return arch > 0 && arch <= 90 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '$';
}

/* Does the module define a kernel called name? */
static bool module_has(const struct sim_module *m, const char *name)
{
    size_t n = strlen(name);
    if (m->binary) { /* a NUL-delimited string of the image */
        for (size_t i = 0; i + n + 2 <= m->size; i++)
            if (m->image[i] == '\0' && memcmp(m->image + i + 1, name, n) == 0 &&
                m->image[i + 1 + n] == '\0')
                return true;
        return false;
    }
    for (const char *p = m->image; (p = strstr(p, ".entry")) != NULL;) {
        p += 6;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (strncmp(p, name, n) == 0 && !name_char(p[n]))
            return true;
    }
    return false;
}

/* JIT options: checked; the outputs say an empty log and no compile time. */
static CUresult jit_options(unsigned nopts, const CUjit_option *opts, void **vals)
{
    if (nopts && (!opts || !vals))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nopts; i++)
        if ((unsigned)opts[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nopts; i++) {
        switch (opts[i]) {
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            for (unsigned j = 0; j < nopts; j++) { /* its buffer gets an empty string */
                CUjit_option buf = opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
                                       ? CU_JIT_INFO_LOG_BUFFER
                                       : CU_JIT_ERROR_LOG_BUFFER;
                if (opts[j] == buf && vals[j] && (uintptr_t)vals[i] > 0)
                    *(char *)vals[j] = '\0';
            }
            vals[i] = (void *)(uintptr_t)0; /* OUT: bytes of log written */
            break;
        case CU_JIT_WALL_TIME: {
            float zero = 0.0f;
            memcpy(&vals[i], &zero, sizeof zero);
            break;
        }
        default:
            break;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult module_load(CUmodule *out, const void *image, size_t known_size)
{
    const unsigned char *p = image;
    size_t size = known_size ? known_size : binary_size(p);
    bool binary = size != 0;
    CUresult r = binary ? CUDA_SUCCESS : ptx_check(image);
    if (r != CUDA_SUCCESS)
        return r;
    if (!binary)
        size = strlen(image);
    struct sim_module *m = calloc(1, sizeof *m);
    char *copy = m ? malloc(size + 1) : NULL;
    if (!copy) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(copy, image, size);
    copy[size] = '\0';
    m->magic = SIM_MAGIC_MODULE;
    m->image = copy;
    m->size = size;
    m->binary = binary;
    sim_lock();
    struct sim_ctx *cur;
    r = sim_current_ctx(&cur);
    if (r == CUDA_SUCCESS) {
        m->ctx = cur;
        m->next = modules;
        modules = m;
        *out = (CUmodule)m;
    }
    sim_unlock();
    if (r != CUDA_SUCCESS) {
        free(copy);
        free(m);
    }
    return r;
}

CUresult sim_module_load_data(CUmodule *out, const void *image, unsigned nopts,
                              const CUjit_option *opts, void **vals)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    r = jit_options(nopts, opts, vals);
    return r == CUDA_SUCCESS ? module_load(out, image, 0) : r;
}

CUresult sim_module_load_file(CUmodule *out, const char *path)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !path)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    struct stat st;
    char *buf = NULL;
    r = CUDA_ERROR_INVALID_IMAGE;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 16 &&
        (size_t)st.st_size <= MODULE_FILE_MAX && (buf = malloc((size_t)st.st_size + 1))) {
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
            if (n <= 0 && errno != EINTR)
                break;
            if (n > 0)
                got += (size_t)n;
        }
        buf[got] = '\0';
        if (got == (size_t)st.st_size) /* a binary image is kept whole, PTX up to its NUL */
            r = module_load(out, buf, binary_size((unsigned char *)buf) ? got : 0);
    }
    free(buf);
    close(fd);
    return r;
}

CUresult sim_module_get_function(CUfunction *out, CUmodule mod, const char *name)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct sim_module *m = module_lookup(mod);
    struct sim_function *f = NULL;
    if (!m) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        for (f = m->funcs; f && strcmp(f->name, name) != 0; f = f->next) {
        }
        if (!f && !module_has(m, name)) {
            r = CUDA_ERROR_NOT_FOUND;
        } else if (!f && !(f = calloc(1, sizeof *f + strlen(name) + 1))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (!f->magic) {
            f->magic = SIM_MAGIC_FUNCTION;
            f->mod = m;
            strcpy(f->name, name);
            f->next = m->funcs;
            m->funcs = f;
        }
    }
    if (r == CUDA_SUCCESS)
        *out = (CUfunction)f;
    sim_unlock();
    return r;
}

CUresult sim_module_unload(CUmodule mod)
{
    CUresult r = sim_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    sim_lock();
    struct sim_module **pp = &modules;
    while (*pp && *pp != (struct sim_module *)mod)
        pp = &(*pp)->next;
    struct sim_module *m = *pp;
    if (!m) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        *pp = m->next;
        sim_wait_ctx_idle(m->ctx); /* launches of its functions finish first */
        for (struct sim_function *f = m->funcs, *next; f; f = next) {
            next = f->next;
            f->magic = 0;
            free(f);
        }
        m->magic = 0;
        free(m->image);
        free(m);
    }
    sim_unlock();
    return r;
}
