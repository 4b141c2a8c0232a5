/* A process that speaks tessera's IPC protocol dishonestly, without tessera, to show that
 * neither side of a share trusts the other.
 *
 *   ipc_hostile server KIND   a fake exporter: prints a handle naming itself ("handle HEX"),
 *                             then answers every request on every connection the KIND way,
 *                             until stdin closes. KIND: short, long, magic, seq, fds, offset,
 *                             size, kind, npieces, plain_offset (a real legacy handle with an
 *                             offset past its allocation), pieces_short (fewer descriptors than
 *                             handles), pieces_big (a handle larger than the range), gone,
 *                             refuse, hangup, squat (the name of another process's channel).
 *   ipc_hostile client HEX ATTACK
 *                             a fake importer of a real exporter's handle HEX: makes ATTACK and
 *                             prints "RESULT status=ok attack=ATTACK outcome=... " where outcome
 *                             says what the exporter did (answered STATUS, dropped the
 *                             connection, refused it). ATTACK: truncated, huge, fds, wrong_id,
 *                             close_unheld, pieces_unheld, pieces_range, unknown_type, bad_magic,
 *                             flood, silent (connects, says nothing, waits for the close),
 *                             open_hold (opens, prints "held", holds until stdin closes),
 *                             connections N (opens N connections, each asks once; prints how
 *                             many were answered and refused; holds them until stdin closes).
 *
 * The protocol is written out here again on purpose: a forged peer must not share the code it
 * attacks. Layouts as in shim/ipc.c and shim/control.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "probe_common.h"

#define MAGIC 0x31435354u
enum { REFUSED = 1, UNKNOWN = 2, OPEN = 0x100, PIECES = 0x101, CLOSE = 0x102 };
enum { OK = 0, GONE = 1 };

typedef struct head {
    uint32_t magic;
    uint16_t type, status;
    uint32_t seq, reserved;
} head;

typedef struct wire {
    char magic[8];
    int32_t pid;
    uint32_t version;
    uint64_t start, secret, id, size, serial, spare;
} wire;

typedef struct request {
    head h;
    uint64_t id;
    uint32_t first, count;
} request;

typedef struct run {
    uint32_t first, count;
    uint64_t size[64];
    uint64_t offset[64];
} run;

typedef struct open_answer {
    head h;
    uint32_t kind;
    int32_t cu_error;
    uint64_t size, offset, map_size;
    uint32_t npieces, reserved;
    unsigned char legacy[64];
    run run;
} open_answer;

typedef struct pieces_answer {
    head h;
    int32_t cu_error;
    uint32_t reserved;
    run run;
} pieces_answer;

static uint64_t start_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p)
        p++; /* before field 3 */
    for (int field = 3; field < 22 && p; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static socklen_t name_of(int32_t pid, uint64_t secret, struct sockaddr_un *un)
{
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "tessera.%d.%016llx", (int)pid,
                     (unsigned long long)secret);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static ssize_t send_fds(int fd, const void *buf, size_t len, int nfds)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 8)];
    } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = {(void *)buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    int fds[8];
    for (int i = 0; i < nfds; i++)
        fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nfds) {
        mh.msg_control = cm.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    return w;
}

/* ---- the fake exporter ---------------------------------------------------------------------- */

static unsigned char legacy[64];

/* Answer one request r (n bytes) the `kind` way. False: close the connection. */
static int answer(int fd, const char *kind, const unsigned char *in, ssize_t n, const wire *w)
{
    request r;
    memset(&r, 0, sizeof r);
    memcpy(&r, in, (size_t)n < sizeof r ? (size_t)n : sizeof r);
    if (!strcmp(kind, "hangup"))
        return 0;
    head h = {.magic = MAGIC, .type = r.h.type, .seq = r.h.seq};
    if (r.h.type == CLOSE) {
        send(fd, &h, sizeof h, MSG_NOSIGNAL);
        return 1;
    }
    if (r.h.type == PIECES) {
        pieces_answer p;
        memset(&p, 0, sizeof p);
        p.h = h;
        p.run.first = r.first;
        p.run.count = r.count;
        for (uint32_t i = 0; i < r.count && i < 64; i++)
            p.run.size[i] = 2u << 20;
        return send_fds(fd, &p, sizeof p, r.count > 8 ? 8 : (int)r.count) >= 0;
    }
    /* a block of two handles of 2 MiB, both in the open's answer, as tessera sends it; each
     * kind spoils one thing */
    open_answer o;
    memset(&o, 0, sizeof o);
    o.h = h;
    o.kind = 2;
    o.size = w->size;
    o.offset = 0;
    o.map_size = 4u << 20;
    o.npieces = 2;
    o.run.count = 2;
    o.run.size[0] = o.run.size[1] = 2u << 20;
    size_t len = sizeof o;
    int nfds = 2;
    if (!strcmp(kind, "short"))
        len -= 8;
    else if (!strcmp(kind, "long"))
        len += 8;
    else if (!strcmp(kind, "magic"))
        o.h.magic ^= 1;
    else if (!strcmp(kind, "seq"))
        o.h.seq += 5;
    else if (!strcmp(kind, "fds"))
        nfds = 3;
    else if (!strcmp(kind, "offset"))
        o.offset = o.map_size;
    else if (!strcmp(kind, "size"))
        o.size = w->size + 1;
    else if (!strcmp(kind, "kind"))
        o.kind = 7;
    else if (!strcmp(kind, "npieces"))
        o.npieces = 1u << 21;
    else if (!strcmp(kind, "gone"))
        o.h.status = GONE;
    else if (!strcmp(kind, "pieces_short"))
        nfds = 1;
    else if (!strcmp(kind, "pieces_big"))
        o.run.size[0] = 1ull << 40;
    else if (!strcmp(kind, "plain_offset")) {
        /* a real legacy handle of 2 MiB, an offset past it that the answer's own map_size allows */
        o.kind = 1;
        o.npieces = 0;
        o.run.count = 0;
        nfds = 0;
        o.offset = 3u << 20;
        o.map_size = 8u << 20;
        memcpy(o.legacy, legacy, sizeof legacy);
    }
    unsigned char out[sizeof o + 8];
    memset(out, 0, sizeof out);
    memcpy(out, &o, sizeof o);
    return send_fds(fd, out, len, nfds) >= 0;
}

static int server(const char *kind)
{
    pid_t me = getpid();
    wire w;
    memset(&w, 0, sizeof w);
    memcpy(w.magic, "TSIPCv2", 8);
    w.pid = me;
    w.start = start_of(me);
    w.secret = ((uint64_t)me << 32) ^ 0x5eed5eed1234ull;
    w.id = 0x0123456789abcdefull;
    w.size = 2u << 20;
    w.serial = 1;
    int32_t bind_pid = me;
    if (!strcmp(kind, "squat")) {
        /* the name of another process's channel (the parent's pid), held by this one */
        w.pid = bind_pid = getppid();
        w.start = start_of(w.pid);
    }
    if (!strcmp(kind, "plain_offset")) {
        void *p;
        CHECK(cudaMalloc(&p, 2u << 20));
        cudaIpcMemHandle_t h;
        CHECK(cudaIpcGetMemHandle(&h, p));
        memcpy(legacy, &h, sizeof legacy);
    }
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un un;
    socklen_t ul = name_of(bind_pid, w.secret, &un);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&un, ul) != 0 || listen(lfd, 16) != 0) {
        printf("RESULT status=error call=bind error=%s\n", strerror(errno));
        return 1;
    }
    char hx[2 * sizeof w + 1];
    hex(&w, sizeof w, hx);
    printf("handle %s\n", hx);
    fflush(stdout);
    int conns[64], nconns = 0;
    for (;;) {
        struct pollfd pf[66];
        int n = 0;
        pf[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < nconns; i++)
            pf[n++] = (struct pollfd){.fd = conns[i], .events = POLLIN};
        if (poll(pf, (nfds_t)n, -1) < 0)
            continue;
        if (pf[0].revents) {
            char buf[64];
            if (read(0, buf, sizeof buf) <= 0)
                return 0;
        }
        if ((pf[1].revents & POLLIN) && nconns < 64) {
            int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && !strcmp(kind, "refuse")) {
                head h = {.magic = MAGIC, .type = REFUSED, .status = 1};
                send(c, &h, sizeof h, MSG_NOSIGNAL);
                close(c);
            } else if (c >= 0) {
                conns[nconns++] = c;
            }
        }
        for (int i = nconns - 1; i >= 0; i--) {
            if (!pf[2 + i].revents)
                continue;
            unsigned char in[8192];
            ssize_t got = recv(conns[i], in, sizeof in, 0);
            if (got <= 0 || !answer(conns[i], kind, in, got, &w)) {
                close(conns[i]);
                conns[i] = conns[--nconns];
            }
        }
    }
}

/* ---- the fake importer ---------------------------------------------------------------------- */

static int connect_to(const wire *w)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un un;
    socklen_t ul = name_of(w->pid, w->secret, &un);
    if (fd < 0 || connect(fd, (struct sockaddr *)&un, ul) != 0) {
        printf("RESULT status=error call=connect error=%s\n", strerror(errno));
        exit(1);
    }
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* What the exporter did after a request: "answered:TYPE:STATUS", "dropped", or "refused". */
static const char *outcome(int fd, char *buf, size_t cap)
{
    unsigned char in[8192];
    ssize_t n = recv(fd, in, sizeof in, 0);
    bool reset = n < 0 && errno == ECONNRESET;
    if (reset) /* reported before a last message still waiting */
        n = recv(fd, in, sizeof in, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && reset))
        return "dropped"; /* the exporter closed the connection */
    if (n < 0)
        return "silent"; /* nothing in 60 s, and still connected */
    head h;
    memcpy(&h, in, sizeof h);
    if (h.type == REFUSED)
        return "refused";
    snprintf(buf, cap, "answered:%#x:%u", h.type, h.status);
    return buf;
}

static int hold_until_eof(void)
{
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}

static int client(const char *hx, const char *attack, int count)
{
    wire w;
    if (unhex(hx, &w, sizeof w) != 0) {
        printf("RESULT status=error call=unhex\n");
        return 1;
    }
    char buf[64];
    const char *out = "none";
    request q = {.h = {.magic = MAGIC, .type = OPEN, .seq = 1}, .id = w.id};
    if (!strcmp(attack, "connections")) {
        int answered = 0, refused = 0;
        for (int i = 0; i < count; i++) {
            int fd = connect_to(&w);
            send(fd, &q, sizeof q, MSG_NOSIGNAL);
            const char *o = outcome(fd, buf, sizeof buf);
            answered += !strncmp(o, "answered", 8);
            refused += !strcmp(o, "refused");
        }
        printf("RESULT status=ok attack=connections answered=%d refused=%d\n", answered, refused);
        fflush(stdout);
        return hold_until_eof();
    }
    int fd = connect_to(&w);
    if (!strcmp(attack, "truncated")) {
        send(fd, &q, sizeof q - 8, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "huge")) {
        static unsigned char big[8192];
        memcpy(big, &q, sizeof q);
        send(fd, big, sizeof big, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "fds")) {
        send_fds(fd, &q, sizeof q, 3);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "wrong_id")) {
        q.id ^= 1;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "close_unheld")) {
        q.h.type = CLOSE;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "pieces_unheld")) {
        q.h.type = PIECES;
        q.count = 1;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "pieces_range")) {
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        (void)outcome(fd, buf, sizeof buf); /* opened: held */
        q.h.type = PIECES;
        q.h.seq = 2;
        q.first = 1u << 30;
        q.count = 1;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "unknown_type")) {
        q.h.type = 0x7777;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "bad_magic")) {
        q.h.magic ^= 1;
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
    } else if (!strcmp(attack, "flood")) {
        /* requests without reading an answer: the exporter will not queue answers for ever */
        int sent = 0;
        struct timeval tv = {.tv_sec = 60};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        while (sent < 100000 && send(fd, &q, sizeof q, MSG_NOSIGNAL) == (ssize_t)sizeof q)
            sent++;
        out = sent == 100000                                ? "answered"
              : errno == EPIPE || errno == ECONNRESET ? "dropped"
                                                            : "silent"; /* blocked for 60 s */
    } else if (!strcmp(attack, "silent")) {
        out = outcome(fd, buf, sizeof buf); /* says nothing: closed once idle */
    } else if (!strcmp(attack, "open_hold")) {
        send(fd, &q, sizeof q, MSG_NOSIGNAL);
        out = outcome(fd, buf, sizeof buf);
        printf("held %s\n", out);
        fflush(stdout);
        return hold_until_eof();
    }
    printf("RESULT status=ok attack=%s outcome=%s\n", attack, out);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "server"))
        return server(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "client"))
        return client(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 0);
    fprintf(stderr, "usage: ipc_hostile server KIND | client HEX ATTACK [N]\n");
    return 2;
}
