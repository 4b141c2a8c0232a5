/* The dlsym interposer: the only way to reach what a CUDA runtime asks the driver for. cudart
 * (static or shared) does dlopen("libcuda.so.1"), one dlsym for cuGetProcAddress_v2, and gets
 * everything else through that pointer; tessera hands back its wrapper, which routes each entry
 * point by the identity of the real pointer (real.c).
 *
 * Contract with glibc: RTLD_NEXT is resolved relative to the *caller* of dlsym. Forwarding it
 * from C would make tessera the caller and return the wrong symbol (libomp's OMPT lookup then
 * loops). So on x86-64 the exported entry point is a few instructions of assembly that jump
 * straight into glibc's dlsym for RTLD_NEXT, leaving the caller's return address in place;
 * every other handle goes to the C handler below, for which the caller does not matter.
 */
#include <dlfcn.h>
#include <string.h>

#include "shim/shim.h"

TS_HIDDEN void *ts_dlsym_hook(void *handle, const char *name);

void *ts_dlsym_hook(void *handle, const char *name)
{
    void *r = ts_real_dlsym(handle, name);
    if (!r || !name || name[0] != 'c' || name[1] != 'u')
        return r;
    if (ts_tls_get()->in_init)
        return r;
    /* The assembly entry point jumps here, so this is dlsym's caller. */
    const void *caller = __builtin_return_address(0);
    void *out;
    if (strcmp(name, "cuGetProcAddress_v2") == 0) {
        ts_real_note_gpa(r, true);
        out = (void *)ts_gpa_v2_wrapper;
    } else if (strcmp(name, "cuGetProcAddress") == 0) {
        ts_real_note_gpa(r, false);
        out = (void *)ts_gpa_v1_wrapper;
    } else {
        /* Other driver entry points: routed once the table exists. Never wait for another
         * thread's initialisation here: the caller may hold the dynamic loader's lock. */
        if (!ts_driver_ready())
            ts_driver_init(false, false);
        out = ts_route(r);
    }
    if (out != r)
        ts_hook_announce("dlsym", name, 0, 0, out, caller);
    return out;
}

#if defined(__x86_64__)
/* dlsym(handle, name): rdi = handle, rsi = name. RTLD_NEXT is (void *)-1. */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    cmpq $-1, %rdi\n"
        "    je 1f\n"
        "    jmp ts_dlsym_hook\n"
        "1:  movq ts_dlsym_glibc(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 2f\n"
        "    jmp *%rax\n"
        "2:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n"
        "    call ts_dlsym_resolve\n" /* fills ts_dlsym_glibc */
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    jz 3f\n"
        "    jmp *%rax\n"
        "3:  xorl %eax, %eax\n"
        "    ret\n"
        ".size dlsym, .-dlsym\n");
#else
/* Elsewhere: a C tail call. Compilers emit it as a jump at -O1 and above, which keeps the
 * caller; debug builds on such platforms lose RTLD_NEXT's caller (documented). */
__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT) {
        void *(*glibc)(void *, const char *) = (void *(*)(void *, const char *))ts_dlsym_resolve();
        return glibc ? glibc(handle, name) : NULL;
    }
    return ts_dlsym_hook(handle, name);
}
#endif
