/* The requests that pause and resume a tessera process from another one (tessera-stat pause,
 * resume) over its control channel (shim/control.c), and the statuses a pause answers, there
 * and to the program's own tessera_pause and tessera_resume. The server side is shim/pause.c;
 * tessera-stat is a client too, so this is the one definition of the messages. Every request
 * and every answer has one exact size. */
#ifndef TS_SHIM_PAUSE_H
#define TS_SHIM_PAUSE_H

#include <stdint.h>

#include "shim/shim.h"

/* Request types (ts_ctl_header.type): the range pause.c serves. */
enum {
    TS_PAUSE_ASK = 0x300,  /* copy device memory to the host, give the pages back */
    TS_RESUME_ASK = 0x301, /* map pages at the same addresses again, copy the bytes back */
    TS_PAUSE_TYPE_LAST = 0x3ff
};

/* What a pause or a resume of the whole process did (ts_ctl_header.status of an answer, and what
 * tessera_pause and tessera_resume return). */
enum {
    TS_PROC_OK = 0,
    TS_PROC_ALREADY = 1,    /* pause: the process is paused already */
    TS_PROC_NOT_PAUSED = 2, /* resume: it is not paused */
    TS_PROC_CAPTURE = 3,    /* a CUDA graph capture is underway */
    TS_PROC_IPC = 4,        /* blocks of the process are exported over CUDA IPC */
    TS_PROC_BUSY = 5,       /* a CUDA call of the program did not return within the wait */
    TS_PROC_DEVICE = 6      /* a device refused (its entry in dev[] says why); nothing changed
                             * (pause) or the process is still paused (resume) */
};

/* A sentence for a status of the enum above, completing "the process ...". */
static inline const char *ts_proc_why(unsigned status)
{
    switch (status) {
    case TS_PROC_OK: return "did it";
    case TS_PROC_ALREADY: return "is paused already";
    case TS_PROC_NOT_PAUSED: return "is not paused";
    case TS_PROC_CAPTURE: return "is capturing a CUDA graph";
    case TS_PROC_IPC: return "has blocks exported over CUDA IPC, which another process may map";
    case TS_PROC_BUSY: return "has a CUDA call that did not return within 10 s";
    case TS_PROC_DEVICE: return "has a device that refused";
    default: return "answered with a status tessera does not give";
    }
}

/* A sentence for a device's ts_pause_status (core/allocator.h). */
static inline const char *ts_pause_why(unsigned status)
{
    switch (status) {
    case TS_PAUSE_OK: return "done";
    case TS_PAUSE_ALREADY: return "paused already";
    case TS_PAUSE_NOT_PAUSED: return "not paused";
    case TS_PAUSE_CAPTURE: return "a CUDA graph capture is underway";
    case TS_PAUSE_PLAIN: return "live memory in plain segments, which could not come back at the "
                                "same address (expandable segments are off)";
    case TS_PAUSE_DRIVER_MEMORY: return "device memory the program holds from the driver itself "
                                        "(managed memory, its own pools), which is not tessera's";
    case TS_PAUSE_UNSUPPORTED: return "the device offers no virtual memory or copies";
    case TS_PAUSE_HOST_MEMORY: return "no host memory for the copy";
    case TS_PAUSE_DEVICE: return "the device refused (on resume: most likely it is full now)";
    default: return "a status tessera does not give";
    }
}

typedef struct ts_pause_request {
    ts_ctl_header h;
    uint64_t reserved;
} ts_pause_request;

typedef struct ts_pause_device {
    int32_t device;
    uint32_t status;    /* ts_pause_status */
    uint64_t saved;     /* bytes copied to the host (pause) or back (resume) */
    uint64_t given;     /* bytes given back to the device (pause) */
    uint64_t reserved;  /* reserved_bytes.all.current afterwards */
    uint64_t allocated; /* allocated_bytes.all.current afterwards */
    uint64_t time_us;
} ts_pause_device;

#define TS_PAUSE_DEVICES 16

typedef struct ts_pause_answer {
    ts_ctl_header h;
    uint32_t ndevices;
    uint32_t reserved0;
    ts_pause_device dev[TS_PAUSE_DEVICES];
} ts_pause_answer;
_Static_assert(sizeof(ts_pause_answer) <= TS_CTL_MSG_MAX, "an answer fits one message");

#endif /* TS_SHIM_PAUSE_H */
