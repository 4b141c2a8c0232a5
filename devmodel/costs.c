/* Driver-call costs for the device model: defaults, and the costs file; see costs.h. */
#include "devmodel/costs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COSTS_FILE_MAX ((size_t)64 << 10)
#define COSTS_VALUE_MAX 1e9 /* microseconds: a call slower than 17 minutes is a typo */
#define MIB ((double)(1 << 20))

static const char *const call_names[TS_CALL_COUNT] = {
    [TS_CALL_MALLOC] = "cudaMalloc",
    [TS_CALL_FREE] = "cudaFree",
    [TS_CALL_ADDRESS_RESERVE] = "cuMemAddressReserve",
    [TS_CALL_ADDRESS_FREE] = "cuMemAddressFree",
    [TS_CALL_CREATE] = "cuMemCreate",
    [TS_CALL_RELEASE] = "cuMemRelease",
    [TS_CALL_MAP] = "cuMemMap",
    [TS_CALL_SET_ACCESS] = "cuMemSetAccess",
    [TS_CALL_UNMAP] = "cuMemUnmap",
    [TS_CALL_SYNCHRONIZE] = "cuCtxSynchronize",
    [TS_CALL_EVENT_RECORD] = "cuEventRecord",
};

const char *ts_driver_call_name(ts_driver_call call)
{
    return call < TS_CALL_COUNT ? call_names[call] : "?";
}

/* Defaults, in microseconds per call (no per-MiB term: the published figures are per call, and
 * PyTorch's notes on expandable segments find the VMM calls' cost grows with the number of
 * handles, not with bytes).
 * - The VMM calls: the A100 sample output of the bench_vmm latency benchmark
 *   (github.com/magnate3/linux-riscv-dev, nccl/gpu/shm/bench_vmm/README.md), averages over 4096
 *   pages of 2 MiB on one thread: cuMemCreate 193.32, cuMemMap 1.45, cuMemSetAccess 35.99,
 *   cuMemUnmap 25.63; cuMemAddressReserve 19 (8 GB).
 * - cudaMalloc 50 and cudaFree 10: the figures tutorials quote (docs/BENCHMARKS.md's sources;
 *   about 50 us flat up to 512 KiB in the University of Virginia "memory allocation overhead"
 *   measurements, more above).
 * - No published figure: cuMemAddressFree is taken as cuMemAddressReserve, cuMemRelease as
 *   cudaFree. cuCtxSynchronize and cuEventRecord are 0: a synchronise costs the queued work,
 *   which a replay does not know, and replays record no events.
 * tools/costs (tessera-costs) measures them on a GPU and writes a costs file; scripts/gpu runs it. */
void ts_driver_costs_defaults(ts_driver_costs *c)
{
    static const double us[TS_CALL_COUNT] = {
        [TS_CALL_MALLOC] = 50.0,
        [TS_CALL_FREE] = 10.0,
        [TS_CALL_ADDRESS_RESERVE] = 19.0,
        [TS_CALL_ADDRESS_FREE] = 19.0,
        [TS_CALL_CREATE] = 193.32,
        [TS_CALL_RELEASE] = 10.0,
        [TS_CALL_MAP] = 1.45,
        [TS_CALL_SET_ACCESS] = 35.99,
        [TS_CALL_UNMAP] = 25.63,
        [TS_CALL_SYNCHRONIZE] = 0.0,
        [TS_CALL_EVENT_RECORD] = 0.0,
    };
    for (int i = 0; i < TS_CALL_COUNT; i++)
        c->call[i] = (ts_driver_cost){us[i] * 1000.0, 0.0};
}

double ts_driver_cost_ns(const ts_driver_costs *c, ts_driver_call call, size_t bytes)
{
    return c->call[call].call_ns + c->call[call].mib_ns * ((double)bytes / MIB);
}

/* A plain decimal: digits, optionally '.' and digits. No sign, exponent, hex, inf or nan. */
static int parse_decimal(const char *tok, size_t len, double *out)
{
    char buf[32];
    size_t digits = 0, dots = 0;
    if (len == 0 || len >= sizeof buf)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (tok[i] >= '0' && tok[i] <= '9')
            digits++;
        else if (tok[i] == '.' && dots == 0 && i > 0 && i + 1 < len)
            dots++;
        else
            return -1;
    }
    if (digits == 0)
        return -1;
    memcpy(buf, tok, len);
    buf[len] = '\0';
    double v = strtod(buf, NULL);
    if (!(v <= COSTS_VALUE_MAX))
        return -1;
    *out = v;
    return 0;
}

static bool is_blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r';
}

/* The next whitespace-separated token of [*at, end); false when there is none. */
static bool next_token(const char **at, const char *end, const char **tok, size_t *len)
{
    const char *p = *at;
    while (p < end && is_blank(*p))
        p++;
    if (p == end)
        return false;
    const char *q = p;
    while (q < end && !is_blank(*q))
        q++;
    *tok = p;
    *len = (size_t)(q - p);
    *at = q;
    return true;
}

static int call_of(const char *tok, size_t len)
{
    for (int i = 0; i < TS_CALL_COUNT; i++)
        if (strlen(call_names[i]) == len && memcmp(call_names[i], tok, len) == 0)
            return i;
    return -1;
}

int ts_driver_costs_parse(ts_driver_costs *c, const char *text, size_t len, char *err,
                          size_t errlen)
{
    ts_driver_costs out = *c;
    bool seen[TS_CALL_COUNT] = {false};
    const char *p = text, *end = text + len;
    for (int line = 1; p < end; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *stop = memchr(p, '#', (size_t)(eol - p));
        if (!stop)
            stop = eol;
        if (memchr(p, '\0', (size_t)(eol - p))) {
            snprintf(err, errlen, "line %d: a NUL byte (not a text file)", line);
            return -1;
        }
        const char *at = p, *tok;
        size_t tlen;
        p = eol + (eol < end);
        if (!next_token(&at, stop, &tok, &tlen))
            continue; /* blank or comment */
        int call = call_of(tok, tlen);
        if (call < 0) {
            snprintf(err, errlen,
                     "line %d: unknown call '%.*s' (cudaMalloc, cudaFree, cuMemAddressReserve, "
                     "cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap, cuMemSetAccess, "
                     "cuMemUnmap, cuCtxSynchronize, cuEventRecord)",
                     line, (int)(tlen > 40 ? 40 : tlen), tok);
            return -1;
        }
        if (seen[call]) {
            snprintf(err, errlen, "line %d: %s is given twice", line, call_names[call]);
            return -1;
        }
        seen[call] = true;
        double v[2] = {0, 0};
        int nv = 0;
        while (next_token(&at, stop, &tok, &tlen)) {
            if (nv == 2) {
                snprintf(err, errlen, "line %d: %s takes at most two numbers (microseconds per "
                         "call, per MiB)", line, call_names[call]);
                return -1;
            }
            if (parse_decimal(tok, tlen, &v[nv]) != 0) {
                snprintf(err, errlen, "line %d: '%.*s' is not a number of microseconds "
                         "(a plain decimal from 0 to 1e9)", line, (int)(tlen > 40 ? 40 : tlen),
                         tok);
                return -1;
            }
            nv++;
        }
        if (nv == 0) {
            snprintf(err, errlen, "line %d: %s needs microseconds per call", line,
                     call_names[call]);
            return -1;
        }
        out.call[call] = (ts_driver_cost){v[0] * 1000.0, v[1] * 1000.0};
    }
    *c = out;
    return 0;
}

int ts_driver_costs_load(ts_driver_costs *c, const char *path, char *err, size_t errlen)
{
    /* O_NONBLOCK: a FIFO must not hang the tool before fstat refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    char *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
    } else if ((size_t)st.st_size > COSTS_FILE_MAX) {
        snprintf(err, errlen, "%s: larger than 64 KiB (a costs file is a few lines)", path);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        snprintf(err, errlen, "%s: out of host memory", path);
    } else {
        size_t got = 0;
        ssize_t n = 1;
        while (got < (size_t)st.st_size && (n = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
            got += (size_t)n;
        if (n < 0) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        } else {
            char why[200];
            rc = ts_driver_costs_parse(c, buf, got, why, sizeof why);
            if (rc != 0)
                snprintf(err, errlen, "%s: %s", path, why);
        }
    }
    free(buf);
    close(fd);
    return rc;
}
