/* Minimal assertions for the simulator's tests: print where and why, exit non-zero. */
#ifndef TESSERA_SIM_TEST_CHECK_H
#define TESSERA_SIM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define CHECK_EQ(a, b)                                                                        \
    do {                                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                                   \
        if (a_ != b_) {                                                                       \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__,     \
                    __LINE__, #a, a_, #b, b_);                                                \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* a driver or runtime call that must return `expect` */
#define EXPECT(call, expect) CHECK_EQ((call), (expect))
#define CU(call) EXPECT(call, 0)

#define RUN(fn)                                                                               \
    do {                                                                                      \
        fprintf(stderr, "[ RUN      ] %s\n", #fn);                                            \
        fn();                                                                                 \
        fprintf(stderr, "[       OK ] %s\n", #fn);                                            \
    } while (0)

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#endif
