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

/* The built-in tables (devmodel/embed_tables.py compiles tests/data/driver-costs/ in): NULL-
 * terminated, the default first. */
extern const char *const ts_costs_table_names[];
extern const char *const ts_costs_table_texts[];

int ts_driver_costs_builtin(ts_driver_costs *c, const char *name)
{
    for (size_t i = 0; ts_costs_table_names[i]; i++) {
        if (strcmp(ts_costs_table_names[i], name) != 0)
            continue;
        char err[200];
        memset(c, 0, sizeof *c);
        /* the tables are files of the repository, parsed by the tests: they do not fail */
        return ts_driver_costs_parse(c, ts_costs_table_texts[i], strlen(ts_costs_table_texts[i]),
                                     err, sizeof err);
    }
    return -1;
}

void ts_driver_costs_defaults(ts_driver_costs *c)
{
    (void)ts_driver_costs_builtin(c, ts_costs_table_names[0]);
}

/* One call over bytes, priced from its measured points (npoints > 0). */
static double points_ns(const ts_driver_cost *k, size_t bytes)
{
    const unsigned n = k->npoints;
    const size_t top = k->point_bytes[n - 1];
    /* Beyond the largest measured size: as many calls of that size, and one for the rest. A GPU
     * was never seen to charge less, so the model gives no discount it did not measure. */
    if (bytes > top) {
        const size_t whole = bytes / top, rest = bytes % top;
        return (double)whole * k->point_ns[n - 1] + (rest ? points_ns(k, rest) : 0.0);
    }
    if (bytes <= k->point_bytes[0])
        return k->point_ns[0];
    unsigned i = 1;
    while (k->point_bytes[i] < bytes)
        i++;
    /* point_bytes[i - 1] < bytes <= point_bytes[i]: on the straight line between the two */
    const double x0 = (double)k->point_bytes[i - 1], x1 = (double)k->point_bytes[i];
    const double f = ((double)bytes - x0) / (x1 - x0);
    return k->point_ns[i - 1] + f * (k->point_ns[i] - k->point_ns[i - 1]);
}

double ts_driver_cost_ns(const ts_driver_costs *c, ts_driver_call call, size_t bytes)
{
    const ts_driver_cost *k = &c->call[call];
    if (k->npoints)
        return points_ns(k, bytes);
    return k->call_ns + k->mib_ns * ((double)bytes / MIB);
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

/* A size: digits with an optional K, M or G (binary), from 1 KiB to 1 TiB. */
static int parse_size(const char *tok, size_t len, size_t *out)
{
    size_t shift = 0;
    if (len > 1 && (tok[len - 1] == 'K' || tok[len - 1] == 'M' || tok[len - 1] == 'G')) {
        shift = tok[len - 1] == 'K' ? 10 : tok[len - 1] == 'M' ? 20 : 30;
        len--;
    }
    if (len == 0 || len > 13)
        return -1;
    size_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (tok[i] < '0' || tok[i] > '9')
            return -1;
        v = v * 10 + (size_t)(tok[i] - '0'); /* 13 digits cannot overflow */
    }
    if (v > ((size_t)1 << 40) >> shift)
        return -1;
    v <<= shift;
    if (v < ((size_t)1 << 10))
        return -1;
    *out = v;
    return 0;
}

#define SHOWN(len) ((int)((len) > 40 ? 40 : (len)))

/* The line form: microseconds per call, and optionally per MiB. */
static int parse_line(const char *at, const char *stop, int line, ts_driver_call call,
                      ts_driver_cost *out, char *err, size_t errlen)
{
    const char *tok;
    size_t tlen;
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
                     "(a plain decimal from 0 to 1e9)", line, SHOWN(tlen), tok);
            return -1;
        }
        nv++;
    }
    if (nv == 0) {
        snprintf(err, errlen, "line %d: %s needs microseconds per call", line, call_names[call]);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->call_ns = v[0] * 1000.0;
    out->mib_ns = v[1] * 1000.0;
    return 0;
}

/* The measured form: SIZE:MICROSECONDS tokens, kept sorted by size. */
static int parse_points(const char *at, const char *stop, int line, ts_driver_call call,
                        ts_driver_cost *out, char *err, size_t errlen)
{
    const char *tok;
    size_t tlen;
    ts_driver_cost k;
    memset(&k, 0, sizeof k);
    while (next_token(&at, stop, &tok, &tlen)) {
        const char *colon = memchr(tok, ':', tlen);
        size_t bytes;
        double us;
        if (!colon) {
            snprintf(err, errlen, "line %d: '%.*s': %s takes SIZE:MICROSECONDS points only "
                     "(2M:22.0)", line, SHOWN(tlen), tok, call_names[call]);
            return -1;
        }
        const size_t slen = (size_t)(colon - tok);
        if (parse_size(tok, slen, &bytes) != 0) {
            snprintf(err, errlen, "line %d: '%.*s' is not a size (digits with K, M or G, from "
                     "1K to 1024G)", line, SHOWN(slen), tok);
            return -1;
        }
        if (parse_decimal(colon + 1, tlen - slen - 1, &us) != 0) {
            snprintf(err, errlen, "line %d: '%.*s' is not a number of microseconds "
                     "(a plain decimal from 0 to 1e9)", line, SHOWN(tlen - slen - 1), colon + 1);
            return -1;
        }
        if (k.npoints == TS_COST_POINTS_MAX) {
            snprintf(err, errlen, "line %d: %s has more than %d points", line, call_names[call],
                     TS_COST_POINTS_MAX);
            return -1;
        }
        unsigned i = k.npoints;
        while (i > 0 && k.point_bytes[i - 1] > bytes)
            i--;
        if (i > 0 && k.point_bytes[i - 1] == bytes) {
            snprintf(err, errlen, "line %d: %s gives the size %.*s twice", line,
                     call_names[call], SHOWN(slen), tok);
            return -1;
        }
        memmove(&k.point_bytes[i + 1], &k.point_bytes[i], (k.npoints - i) * sizeof k.point_bytes[0]);
        memmove(&k.point_ns[i + 1], &k.point_ns[i], (k.npoints - i) * sizeof k.point_ns[0]);
        k.point_bytes[i] = bytes;
        k.point_ns[i] = us * 1000.0;
        k.npoints++;
    }
    *out = k;
    return 0;
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
        const int rc = memchr(at, ':', (size_t)(stop - at))
                           ? parse_points(at, stop, line, (ts_driver_call)call, &out.call[call],
                                          err, errlen)
                           : parse_line(at, stop, line, (ts_driver_call)call, &out.call[call],
                                        err, errlen);
        if (rc != 0)
            return -1;
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
