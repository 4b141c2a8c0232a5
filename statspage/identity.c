/* Process facts from /proc (statspage/identity.h). Every file is read whole into a small
 * buffer and parsed from there: nothing here trusts a field to be present or well formed. */
#include "statspage/identity.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read up to len-1 bytes of a small file; returns bytes read (NUL-terminated) or -errno. */
static ssize_t read_small_file(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    close(fd);
    return (ssize_t)got;
}

int ts_proc_stat(int pid, char *state, uint64_t *start_ticks)
{
    char path[64], buf[1024];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
    else
        snprintf(path, sizeof path, "/proc/self/stat");
    ssize_t n = read_small_file(path, buf, sizeof buf);
    if (n < 0)
        return (int)-n;
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return EPROTO;
    p += 2;
    char st = *p;
    /* p is at field 3 (state); starttime is field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return EPROTO;
        p++;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p || errno != 0)
        return EPROTO;
    if (state)
        *state = st;
    if (start_ticks)
        *start_ticks = v;
    return 0;
}

int ts_read_boot_id(char *buf, size_t len)
{
    char tmp[128];
    if (len == 0)
        return EINVAL;
    buf[0] = '\0';
    ssize_t n = read_small_file("/proc/sys/kernel/random/boot_id", tmp, sizeof tmp);
    if (n < 0)
        return (int)-n;
    size_t k = 0;
    while (k < (size_t)n && tmp[k] != '\n' && k + 1 < len) {
        buf[k] = tmp[k];
        k++;
    }
    buf[k] = '\0';
    return k ? 0 : EPROTO;
}

uint64_t ts_pid_namespace(const char *pid_or_self)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", pid_or_self ? pid_or_self : "self");
    if (stat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_ino;
}

/* The inode of the initial pid namespace (the kernel's PROC_PID_INIT_INO): a reader there sees
 * every process of the machine. */
#define TS_PID_NS_INIT 0xEFFFFFFCu
/* Distinct pid namespaces remembered from one scan; a machine with more cannot be judged. */
#define TS_PID_NS_SCAN_MAX 512

static struct {
    time_t taken;       /* CLOCK_MONOTONIC seconds of the scan; 0 none */
    size_t n;           /* namespaces in ns[], or SIZE_MAX after an incomplete scan */
    uint64_t ns[TS_PID_NS_SCAN_MAX];
} ns_scan;

static void pid_namespaces_scan(void)
{
    ns_scan.n = 0;
    DIR *d = opendir("/proc");
    if (!d) {
        ns_scan.n = SIZE_MAX;
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char pid[24];
        snprintf(pid, sizeof pid, "%.20s", de->d_name);
        uint64_t ns = ts_pid_namespace(pid);
        if (ns == 0)
            continue; /* exited meanwhile */
        size_t i = 0;
        while (i < ns_scan.n && ns_scan.ns[i] != ns)
            i++;
        if (i < ns_scan.n)
            continue;
        if (ns_scan.n == TS_PID_NS_SCAN_MAX) {
            ns_scan.n = SIZE_MAX;
            break;
        }
        ns_scan.ns[ns_scan.n++] = ns;
    }
    closedir(d);
}

int ts_pid_namespace_in_use(uint64_t ns)
{
    if (ns == 0 || geteuid() != 0 || ts_pid_namespace("self") != TS_PID_NS_INIT)
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (ns_scan.taken == 0 || now.tv_sec != ns_scan.taken) {
        pid_namespaces_scan();
        ns_scan.taken = now.tv_sec ? now.tv_sec : 1;
    }
    if (ns_scan.n == SIZE_MAX)
        return -1;
    for (size_t i = 0; i < ns_scan.n; i++)
        if (ns_scan.ns[i] == ns)
            return 1;
    return 0;
}

int ts_pid_is_gone(int pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    char state = 0;
    int e = ts_proc_stat(pid, &state, NULL);
    if (e == ENOENT || e == ESRCH)
        return 1;
    return e == 0 && (state == 'Z' || state == 'X');
}

void ts_identity_self(ts_identity *id)
{
    memset(id, 0, sizeof *id);
    id->pid = (int)getpid();
    if (ts_proc_stat(0, NULL, &id->start_ticks) != 0)
        id->start_ticks = 0;
    id->pid_ns = ts_pid_namespace("self");
    if (ts_read_boot_id(id->boot_id, sizeof id->boot_id) != 0)
        id->boot_id[0] = '\0';
}

int ts_proc_uids(int pid, uint32_t uids[4])
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    ssize_t n = read_small_file(path, buf, sizeof buf);
    if (n < 0)
        return (int)-n;
    const char *p = strstr(buf, "\nUid:");
    if (!p)
        return EPROTO;
    p += 5;
    for (int i = 0; i < 4; i++) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno != 0 || v > UINT32_MAX)
            return EPROTO;
        uids[i] = (uint32_t)v;
        p = end;
    }
    return 0;
}

long ts_proc_cmdline(char *buf, size_t len)
{
    ssize_t n = read_small_file("/proc/self/cmdline", buf, len);
    if (n <= 0)
        return n;
    size_t k = (size_t)n;
    for (size_t i = 0; i < k; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    while (k > 0 && buf[k - 1] == ' ')
        k--;
    buf[k] = '\0';
    return (long)k;
}
