/* The requests other processes of the user make to a tessera process over its control channel
 * (shim/control.c) about its memory, beyond IPC: give free cache back for a process of the same
 * device that is out of memory (lending), and release the cache (tessera-stat release). The
 * server side is shim/lend.c; tessera-stat is a client too, so this is the one definition of the
 * messages. Every request and every answer has one exact size. */
#ifndef TS_SHIM_LEND_H
#define TS_SHIM_LEND_H

#include <stdint.h>

#include "shim/shim.h"

/* Request types (ts_ctl_header.type): the range lend.c serves. */
enum {
    TS_LEND_ASK = 0x200,     /* give back free cache of the device `uuid`, `bytes` wanted */
    TS_LEND_RELEASE = 0x201, /* release the cache of every device, keeping at most `bytes` each */
    TS_LEND_TYPE_LAST = 0x2ff
};

/* Answer statuses (ts_ctl_header.status). */
enum {
    TS_LEND_OK = 0,
    TS_LEND_OFF = 1,      /* TS_LEND_ASK to a process with lending:False: nothing given */
    TS_LEND_CAPTURE = 2,  /* a CUDA graph capture is underway there: nothing given */
    TS_LEND_LATE = 3      /* read after the asker's deadline (it no longer waits): nothing given */
};

#define TS_LEND_DEVICES 16 /* devices an answer describes (a process has at most 16 slots) */

typedef struct ts_lend_request {
    ts_ctl_header h;
    uint8_t uuid[16]; /* TS_LEND_ASK: the device (cuDeviceGetUuid) */
    uint64_t bytes;   /* TS_LEND_ASK: wanted; TS_LEND_RELEASE: to keep cached per device */
    uint64_t deadline_ns; /* TS_LEND_ASK: CLOCK_MONOTONIC (one clock for the machine) after which
                           * the asker no longer waits, so nothing is given; 0: none */
} ts_lend_request;

/* What each allocator (device context) concerned did, and held afterwards. */
typedef struct ts_lend_device {
    int32_t device;
    uint32_t reserved0;
    uint64_t given;     /* bytes given back to the device */
    uint64_t reserved;  /* reserved_bytes.all.current afterwards */
    uint64_t allocated; /* allocated_bytes.all.current afterwards */
} ts_lend_device;

typedef struct ts_lend_answer {
    ts_ctl_header h;
    uint32_t ndevices; /* entries of dev in use */
    uint32_t reserved0;
    ts_lend_device dev[TS_LEND_DEVICES];
} ts_lend_answer;
_Static_assert(sizeof(ts_lend_answer) <= TS_CTL_MSG_MAX, "an answer fits one message");

#endif /* TS_SHIM_LEND_H */
