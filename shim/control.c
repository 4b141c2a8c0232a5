/* The control channel: how another process of the same user asks this process's tessera for
 * something (today: the descriptors of an exported block, shim/ipc.c), and how this process asks
 * another one.
 *
 * Server. A Unix socket of type SOCK_SEQPACKET in the abstract namespace, named
 * "tessera.<pid>.<secret>" (the secret is 64 random bits a client learns from what it was given,
 * an IPC handle, or the stats page), served by one thread of tessera's own. Nothing exists
 * before the first ts_ctl_serve (context.c calls it once the stats page exists, ipc.c at the
 * first export): until then there is no thread, no socket and no descriptor.
 *   - Who: each connection is checked once, at accept, with SO_PEERCRED: the peer runs as this
 *     process's effective uid, or as root; anyone else gets a refusal and is closed.
 *   - Bounds: a message is one datagram of at most TS_CTL_MSG_MAX bytes (a longer one is cut by
 *     the kernel and drops the peer); a peer may not send descriptors (they are discarded by the
 *     kernel, and the peer dropped); at most `peers_max` connections (a quarter of the
 *     descriptor limit, 16 to 1024), of which at most three quarters per uid.
 *   - Never held: every socket is non-blocking; an answer that does not fit the peer's buffer at
 *     once drops the peer; a peer that holds nothing and has sent nothing for CTL_IDLE_NS is
 *     closed. No peer can keep the thread from the others.
 *   - Identity of descriptors: the program may close descriptors it does not know are tessera's
 *     and get the numbers back for its own files. Before each use, a descriptor is checked to be
 *     the socket it was (device and inode); one that is not is forgotten, never read, written or
 *     closed.
 *
 * Client. ts_ctl_connect connects to the server an address names and checks, with SO_PEERCRED,
 * that it is the process named: its pid, and its start time (a reused pid has another). A call
 * is one request and its answer (the answer echoes the request's sequence number; a late answer
 * to an earlier call that timed out is discarded), bounded by CTL_CALL_NS.
 *
 * fork: a child has no server thread; it closes every descriptor of the channel (its copies:
 * the parent's stay open), so that a connection's close keeps meaning what it says, and its
 * clients fail from then on without touching a descriptor number.
 *
 * Lock order: ctl_lock, then whatever a service takes (ipc.c's lock); a service's caller never
 * calls in here while holding its own lock. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shim/shim.h"

#define CTL_IDLE_NS (10ull * 1000000000ull)  /* a peer holding nothing, silent this long: closed */
#define CTL_CALL_NS (30ull * 1000000000ull)  /* a client's wait for an answer */
#define CTL_SERVICES_MAX 4
#define CTL_PEERS_MIN 16
#define CTL_PEERS_MAX 1024
#define CTL_ACCEPT_BATCH 16 /* connections accepted per round of the loop */
#define CTL_READ_BATCH 1    /* requests read from a peer per round: each waits for its answer */

/* One connected process, as the server sees it. data[i] is service i's state for it (NULL:
 * none, and then the peer holds nothing and may be closed when idle). */
struct ts_ctl_peer {
    int fd;
    dev_t dev;
    ino_t ino;
    pid_t pid;
    uid_t uid;
    uint64_t last_ns;
    void *data[CTL_SERVICES_MAX];
};

/* A connection this process opened to another one's server. fd is -1 once the channel is gone
 * here (a fork child); lock serialises calls. Registered in `clients` while open. */
struct ts_ctl_client {
    int fd;
    dev_t dev;
    ino_t ino;
    uint32_t seq;
    pthread_mutex_t lock;
    struct ts_ctl_client *next;
};

/* The server. Written under ctl_lock; peers[] and pfd[] are the thread's own between rounds. */
typedef struct ctl_server {
    bool started;
    int lfd;
    dev_t ldev;
    ino_t lino;
    uid_t euid;
    ts_ctl_address addr;
    const ts_ctl_service *services[CTL_SERVICES_MAX];
    unsigned nservices;
    ts_ctl_peer **peers;
    size_t npeers, peers_max;
    struct pollfd *pfd;
} ctl_server;

static ctl_server srv = {.lfd = -1};

static struct ts_ctl_client *clients;
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool ts_ctl_proc_start(pid_t pid, uint64_t *out)
{
    char path[40], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* field 22, counted after the command's closing parenthesis (the command may hold any byte) */
    char *p = strrchr(buf, ')');
    if (!p)
        return false;
    p++;
    for (int field = 3; field < 22 && p; field++) /* p stands before field `field` */
        p = strchr(p + 1, ' ');
    if (!p)
        return false;
    char *end;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (end == p + 1)
        return false;
    *out = v;
    return true;
}

void ts_ctl_random(void *out, size_t n)
{
    if (getrandom(out, n, GRND_NONBLOCK) == (ssize_t)n)
        return;
    /* no entropy yet (early boot): a name that is unique is all the channel needs of it; access
     * rests on SO_PEERCRED */
    static uint64_t counter;
    unsigned char *b = out;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)out ^
                     __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        b[i] = (unsigned char)(x >> 56);
    }
}

/* The abstract name of the server at addr. Returns the address length for bind/connect. */
static socklen_t ctl_name(const ts_ctl_address *addr, struct sockaddr_un *un)
{
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    int n = snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "tessera.%d.%016llx",
                     (int)addr->pid, (unsigned long long)addr->secret);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static bool fd_identity(int fd, dev_t *dev, ino_t *ino)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
        return false;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return true;
}

/* Is fd still the socket (dev, ino)? Else the program closed it and the number is another
 * file now, or nothing. */
static bool fd_is(int fd, dev_t dev, ino_t ino)
{
    dev_t d;
    ino_t i;
    return fd_identity(fd, &d, &i) && d == dev && i == ino;
}

/* --- fork ------------------------------------------------------------------------------------ */

static void fork_prepare(void)
{
    pthread_mutex_lock(&ctl_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&ctl_lock);
}

/* The child closes its copies of the channel's descriptors (only those still the sockets they
 * were: a number the program took over is left alone; a forgotten one, -1, is no socket) and
 * starts without a server. The server's tables are the parent's, copied: left as they are
 * (the child has no thread to serve them, and a later export starts a new server). The client
 * records its callers still point to stay, without a descriptor. */
static void fork_child(void)
{
    pthread_mutex_init(&ctl_lock, NULL);
    if (srv.started) {
        for (size_t i = 0; i < srv.npeers; i++) {
            ts_ctl_peer *p = srv.peers[i];
            if (fd_is(p->fd, p->dev, p->ino))
                close(p->fd);
        }
        if (fd_is(srv.lfd, srv.ldev, srv.lino))
            close(srv.lfd);
        srv = (ctl_server){.lfd = -1};
    }
    for (struct ts_ctl_client *c = clients; c; c = c->next) {
        pthread_mutex_init(&c->lock, NULL);
        if (fd_is(c->fd, c->dev, c->ino))
            close(c->fd); /* the child's copy: the parent's connection stays open */
        c->fd = -1;
    }
}

static void atfork_register(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* --- server ---------------------------------------------------------------------------------- */

static bool peer_holds(const ts_ctl_peer *p)
{
    for (unsigned s = 0; s < CTL_SERVICES_MAX; s++)
        if (p->data[s])
            return true;
    return false;
}

/* Forget peer i: its services release what it held first, then its descriptor is closed (if
 * it is still the peer's socket). */
static void peer_drop(size_t i)
{
    ts_ctl_peer *p = srv.peers[i];
    for (unsigned s = 0; s < srv.nservices; s++)
        if (p->data[s])
            srv.services[s]->gone(&p->data[s]);
    if (fd_is(p->fd, p->dev, p->ino)) /* -1, forgotten, is no socket */
        close(p->fd);
    free(p);
    srv.peers[i] = srv.peers[--srv.npeers];
}

/* One answer, with its descriptors, now or never: a peer whose buffer is full is not reading. */
static bool answer_send(int fd, const ts_ctl_answer *ans)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * TS_CTL_FDS_MAX)];
    } cm;
    struct iovec iov = {(void *)ans->buf, ans->len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (ans->nfds) {
        memset(&cm, 0, sizeof cm);
        mh.msg_control = cm.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * ans->nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * ans->nfds);
        memcpy(CMSG_DATA(c), ans->fds, sizeof(int) * ans->nfds);
    }
    return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)ans->len;
}

/* The server thread's request and answer. */
typedef struct ctl_buffers {
    unsigned char in[TS_CTL_MSG_MAX];
    ts_ctl_answer ans;
} ctl_buffers;

/* Read and answer up to CTL_READ_BATCH requests of p. False: drop it (closed, a protocol error,
 * an answer it would not take, or its descriptor is no longer its socket). */
static bool peer_serve(ts_ctl_peer *p, uint64_t now, ctl_buffers *bufs)
{
    unsigned char *in = bufs->in;
    ts_ctl_answer *ans = &bufs->ans;
    if (!fd_is(p->fd, p->dev, p->ino)) {
        p->fd = -1; /* the number is the program's now: never touched again */
        return false;
    }
    for (int k = 0; k < CTL_READ_BATCH; k++) {
        struct iovec iov = {in, TS_CTL_MSG_MAX};
        /* no control buffer: descriptors a peer sends are discarded by the kernel (MSG_CTRUNC),
         * never installed in this process */
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n = recvmsg(p->fd, &mh, MSG_DONTWAIT);
        if (n < 0)
            return errno == EAGAIN; /* nothing after all; any other error drops the peer */
        if (n == 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
            (size_t)n < sizeof(ts_ctl_header))
            return false; /* closed (the peer let go of everything), too long, descriptors */
        p->last_ns = now;
        ts_ctl_header h;
        memcpy(&h, in, sizeof h);
        if (h.magic != TS_CTL_MAGIC)
            return false;
        ts_ctl_header ah = {.magic = TS_CTL_MAGIC, .type = h.type, .seq = h.seq};
        ans->len = sizeof ah;
        ans->nfds = 0;
        unsigned s = 0;
        while (s < srv.nservices &&
               (h.type < srv.services[s]->type_first || h.type > srv.services[s]->type_last))
            s++;
        bool keep = true;
        if (s == srv.nservices) {
            ah.type = TS_CTL_UNKNOWN; /* a request this tessera does not know: said, not fatal */
        } else {
            ts_ctl_peer_info who = {.pid = p->pid, .uid = p->uid};
            memcpy(ans->buf, &ah, sizeof ah);
            keep = srv.services[s]->request(&p->data[s], &who, in, (size_t)n, ans);
            memcpy(&ah, ans->buf, sizeof ah);
            ah.magic = TS_CTL_MAGIC; /* the envelope is the channel's */
            ah.seq = h.seq;
        }
        memcpy(ans->buf, &ah, sizeof ah);
        bool sent = keep && ans->len <= sizeof ans->buf && ans->nfds <= TS_CTL_FDS_MAX &&
                    (ans->len < sizeof ah || answer_send(p->fd, ans));
        if (!sent && keep && (errno == ETOOMANYREFS || errno == ENOBUFS || errno == ENOMEM)) {
            /* descriptors this process may not have in flight now (its limit), or no memory:
             * the request failed, the peer did nothing wrong */
            ts_ctl_header failed = {.magic = TS_CTL_MAGIC, .type = TS_CTL_FAILED,
                                    .status = (uint16_t)errno, .seq = h.seq};
            sent = send(p->fd, &failed, sizeof failed, MSG_DONTWAIT | MSG_NOSIGNAL) ==
                   (ssize_t)sizeof failed;
        }
        for (unsigned f = 0; f < ans->nfds && f < TS_CTL_FDS_MAX; f++)
            close(ans->fds[f]); /* sent or not: this process keeps no copy */
        if (!sent)
            return false;
    }
    return true;
}

/* The refusal a connection gets before it is closed (best effort: it may not be reading). */
static void refuse(int fd, uint16_t why)
{
    ts_ctl_header h = {.magic = TS_CTL_MAGIC, .type = TS_CTL_REFUSED, .status = why};
    ssize_t w = send(fd, &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
}

static size_t peers_of(uid_t uid)
{
    size_t n = 0;
    for (size_t i = 0; i < srv.npeers; i++)
        n += srv.peers[i]->uid == uid;
    return n;
}

/* Accept what is waiting, up to CTL_ACCEPT_BATCH. False when out of descriptors (the program's
 * limit): the connections wait in the backlog, and the listening socket is left alone a while. */
static bool accept_some(uint64_t now)
{
    for (int k = 0; k < CTL_ACCEPT_BATCH; k++) {
        int fd = accept4(srv.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return !(errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM);
        struct ucred cr;
        socklen_t cl = sizeof cr;
        dev_t dev = 0;
        ino_t ino = 0;
        uint16_t why = 0;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 ||
            !fd_identity(fd, &dev, &ino) || (cr.uid != srv.euid && cr.uid != 0))
            why = TS_CTL_WHY_USER;
        else if (srv.npeers >= srv.peers_max ||
                 peers_of(cr.uid) >= srv.peers_max - srv.peers_max / 4)
            why = TS_CTL_WHY_BUSY; /* root keeps a quarter when the user takes the rest */
        ts_ctl_peer *p = why ? NULL : calloc(1, sizeof *p);
        if (!p) {
            refuse(fd, why ? why : TS_CTL_WHY_BUSY);
            close(fd);
            continue;
        }
        *p = (ts_ctl_peer){.fd = fd, .dev = dev, .ino = ino, .pid = cr.pid, .uid = cr.uid,
                           .last_ns = now};
        srv.peers[srv.npeers++] = p;
    }
    return true;
}

/* Milliseconds until the first idle peer is due, or -1 when none can be. */
static int next_timeout_ms(uint64_t now)
{
    uint64_t soonest = UINT64_MAX;
    for (size_t i = 0; i < srv.npeers; i++)
        if (!peer_holds(srv.peers[i]) && srv.peers[i]->last_ns + CTL_IDLE_NS < soonest)
            soonest = srv.peers[i]->last_ns + CTL_IDLE_NS;
    if (soonest == UINT64_MAX)
        return -1;
    return soonest <= now ? 0 : (int)((soonest - now + 999999) / 1000000);
}

static void *server_main(void *arg)
{
    (void)arg;
    /* the thread's buffers, from its own heap: its first allocation (an arena of its own) is
     * made now, at the first export, not when the first importer waits for an answer */
    static ctl_buffers spare;
    ctl_buffers *bufs = malloc(sizeof *bufs);
    if (!bufs)
        bufs = &spare;
    uint64_t listen_pause = 0;
    for (;;) {
        uint64_t now = now_ns();
        /* peers[] and lfd change only on this thread (and in a fork child, which has none) */
        bool listening = srv.lfd >= 0 && now >= listen_pause;
        size_t n = 0;
        srv.pfd[n++] = (struct pollfd){.fd = listening ? srv.lfd : -1, .events = POLLIN};
        for (size_t i = 0; i < srv.npeers; i++)
            srv.pfd[n++] = (struct pollfd){.fd = srv.peers[i]->fd, .events = POLLIN};
        int timeout = next_timeout_ms(now);
        if (srv.lfd >= 0 && !listening) {
            int ms = (int)((listen_pause - now) / 1000000) + 1;
            timeout = timeout < 0 || ms < timeout ? ms : timeout;
        }
        int r = poll(srv.pfd, n, timeout);
        pthread_mutex_lock(&ctl_lock);
        now = now_ns();
        for (size_t i = srv.npeers; i-- > 0;) {
            /* downwards: a dropped peer's place takes the last one, already seen */
            ts_ctl_peer *p = srv.peers[i];
            short ev = r > 0 ? srv.pfd[i + 1].revents : 0;
            bool keep = ev ? peer_serve(p, now, bufs)
                           : peer_holds(p) || now - p->last_ns < CTL_IDLE_NS;
            if (!keep)
                peer_drop(i);
        }
        if (listening && r > 0 && srv.pfd[0].revents) {
            if (!fd_is(srv.lfd, srv.ldev, srv.lino)) {
                /* the program closed it: nothing more can be asked here, nothing is touched;
                 * each service that loses something a user would miss says what */
                for (unsigned i = 0; i < srv.nservices; i++)
                    if (srv.services[i]->lost)
                        ts_log("%s", srv.services[i]->lost);
                srv.lfd = -1;
            } else if (!accept_some(now)) {
                listen_pause = now + 100000000ull;
            }
        }
        pthread_mutex_unlock(&ctl_lock);
    }
    return NULL;
}

static int server_start(void)
{
    ts_ctl_address a = {.pid = getpid()};
    if (!ts_ctl_proc_start(a.pid, &a.start))
        return -ESRCH;
    size_t peers_max = CTL_PEERS_MAX;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur / 4 < CTL_PEERS_MAX)
        peers_max = rl.rlim_cur / 4 < CTL_PEERS_MIN ? CTL_PEERS_MIN : (size_t)rl.rlim_cur / 4;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int err = 0;
    for (int tries = 0;; tries++) {
        ts_ctl_random(&a.secret, sizeof a.secret);
        struct sockaddr_un un;
        socklen_t len = ctl_name(&a, &un);
        if (bind(fd, (struct sockaddr *)&un, len) == 0)
            break;
        if (errno != EADDRINUSE || tries == 3) {
            err = errno;
            break;
        }
    }
    if (!err && listen(fd, 128) != 0)
        err = errno;
    if (!err && !fd_identity(fd, &srv.ldev, &srv.lino))
        err = EBADF;
    ts_ctl_peer **peers = err ? NULL : calloc(peers_max, sizeof *peers);
    struct pollfd *pfd = peers ? calloc(peers_max + 1, sizeof *pfd) : NULL;
    if (!err && !pfd)
        err = ENOMEM;
    if (!err) {
        srv.lfd = fd;
        srv.euid = geteuid();
        srv.addr = a;
        srv.peers = peers;
        srv.pfd = pfd;
        srv.peers_max = peers_max;
        srv.npeers = 0;
        /* the thread takes no signal of the program's: they go to the program's threads */
        sigset_t all, old;
        sigfillset(&all);
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 << 10);
        pthread_t t;
        pthread_sigmask(SIG_SETMASK, &all, &old);
        err = pthread_create(&t, &at, server_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&at);
        if (!err)
            pthread_setname_np(t, "tessera-ctl");
    }
    if (err) {
        free(peers);
        free(pfd);
        srv.peers = NULL;
        srv.pfd = NULL;
        srv.lfd = -1;
        close(fd);
        return -err;
    }
    srv.started = true;
    return 0;
}

int ts_ctl_serve(const ts_ctl_service *svc, ts_ctl_address *addr)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&ctl_lock);
    int rc = srv.started ? 0 : server_start();
    unsigned s = 0;
    while (rc == 0 && s < srv.nservices && srv.services[s] != svc)
        s++;
    if (rc == 0 && s == srv.nservices) {
        if (s < CTL_SERVICES_MAX)
            srv.services[srv.nservices++] = svc;
        else
            rc = -ENOSPC;
    }
    if (rc == 0)
        *addr = srv.addr;
    pthread_mutex_unlock(&ctl_lock);
    return rc;
}

/* --- client ---------------------------------------------------------------------------------- */

void ts_ctl_close(ts_ctl_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&ctl_lock);
    for (struct ts_ctl_client **pp = &clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (fd_is(c->fd, c->dev, c->ino))
        close(c->fd); /* the server sees the close: what this connection held is let go */
    pthread_mutex_unlock(&ctl_lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int ts_ctl_connect(const ts_ctl_address *addr, ts_ctl_client **out)
{
    pthread_once(&atfork_once, atfork_register);
    ts_ctl_client *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    /* created and registered under the lock: a fork sees it, and its child closes its copy */
    pthread_mutex_lock(&ctl_lock);
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int err = c->fd < 0 ? errno : 0;
    if (!err && !fd_identity(c->fd, &c->dev, &c->ino)) {
        err = EBADF;
        close(c->fd);
        c->fd = -1;
    }
    if (!err) {
        c->next = clients;
        clients = c;
    }
    pthread_mutex_unlock(&ctl_lock);
    if (err) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return -err;
    }
    struct timeval tv = {.tv_sec = (time_t)(CTL_CALL_NS / 1000000000ull)};
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_un un;
    socklen_t len = ctl_name(addr, &un);
    int rc = 0;
    struct ucred cr;
    socklen_t cl = sizeof cr;
    uint64_t start = 0;
    if (connect(c->fd, (struct sockaddr *)&un, len) != 0)
        rc = errno == ECONNREFUSED || errno == ENOENT ? -ESRCH
             : errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT
                                                       : -errno;
    else if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
        rc = -errno;
    else if (cr.pid != addr->pid)
        rc = -EPERM; /* another process holds the name: not the one the address names */
    else if (!ts_ctl_proc_start(cr.pid, &start) || start != addr->start)
        rc = -ESTALE; /* that pid is another process now */
    if (rc) {
        ts_ctl_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int ts_ctl_timeout(ts_ctl_client *c, uint64_t ns)
{
    struct timeval tv = {.tv_sec = (time_t)(ns / 1000000000ull),
                         .tv_usec = (suseconds_t)(ns % 1000000000ull / 1000u)};
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1; /* 0 would mean no bound at all */
    pthread_mutex_lock(&c->lock);
    int rc = !fd_is(c->fd, c->dev, c->ino) ? -EBADF
             : setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
                     setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0
                 ? -errno
                 : 0;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* One answer: its length, with the descriptors it carried in fds (at most max; *nfds of them),
 * or -errno with none kept (each received descriptor is closed on any error). */
static ssize_t answer_recv(const ts_ctl_client *c, void *buf, size_t cap, int *fds, unsigned max,
                           unsigned *nfds, int flags)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * TS_CTL_FDS_MAX)];
    } cm;
    *nfds = 0;
    if (max > TS_CTL_FDS_MAX)
        max = TS_CTL_FDS_MAX;
    struct iovec iov = {buf, cap};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = max ? cm.b : NULL,
                        .msg_controllen = max ? CMSG_SPACE(sizeof(int) * max) : 0};
    ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | flags);
    /* A server that closes a connection with our request unread makes the next read fail with
     * ECONNRESET even when its last message (a refusal) is waiting: the error is reported
     * first, and once; read again, the connection gives what waits, then its end (0). EAGAIN
     * is a receive bounded by SO_RCVTIMEO that timed out, never a reset. */
    if (n < 0 && errno == ECONNRESET)
        n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
    bool bad = false;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) {
            bad = true;
            continue;
        }
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
            if (*nfds < max)
                fds[(*nfds)++] = fd;
            else
                close(fd), bad = true;
        }
    }
    if (n == 0 || bad || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        /* descriptors cut off although there was room for them: this process is out of
         * descriptors (else the answer carried more than asked: not this channel's) */
        bool out_of_fds = n > 0 && !bad && !(mh.msg_flags & MSG_TRUNC) && *nfds < max;
        for (unsigned i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        return n == 0 ? -ECONNRESET : out_of_fds ? -EMFILE : -EPROTO;
    }
    return n;
}

/* msg: a request of its service's fixed size (at least the header, at most TS_CTL_MSG_MAX). */
static int request_send(ts_ctl_client *c, void *msg, size_t len, uint32_t seq)
{
    if (!fd_is(c->fd, c->dev, c->ino)) {
        c->fd = -1; /* gone after a fork, or closed by the program: the number is not ours */
        return -EBADF;
    }
    ts_ctl_header h;
    memcpy(&h, msg, sizeof h);
    h.magic = TS_CTL_MAGIC;
    h.seq = seq;
    memcpy(msg, &h, sizeof h);
    ssize_t w = send(c->fd, msg, len, MSG_NOSIGNAL);
    if (w == (ssize_t)len)
        return 0;
    return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT
           : w < 0                                             ? -errno
                                                               : -EPROTO;
}

int ts_ctl_send(ts_ctl_client *c, void *msg, size_t len)
{
    pthread_mutex_lock(&c->lock);
    int rc = request_send(c, msg, len, ++c->seq);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

ssize_t ts_ctl_call(ts_ctl_client *c, void *req, size_t len, void *ans, size_t cap, int *fds,
                    unsigned max_fds, unsigned *nfds)
{
    *nfds = 0;
    pthread_mutex_lock(&c->lock);
    uint32_t seq = ++c->seq;
    ssize_t rc = request_send(c, req, len, seq);
    uint64_t deadline = now_ns() + CTL_CALL_NS;
    /* a server that refused this connection may have closed it before the request went out:
     * its refusal is still waiting to be read */
    bool closed = rc == -EPIPE || rc == -ECONNRESET;
    if (closed)
        rc = 0;
    while (rc == 0) {
        rc = answer_recv(c, ans, cap, fds, max_fds, nfds, closed ? MSG_DONTWAIT : 0);
        if (rc == -EINTR && now_ns() < deadline) {
            /* a signal of the program's (a profiler's timer, say): a receive bounded by
             * SO_RCVTIMEO is never restarted, whatever SA_RESTART says; the wait goes on */
            rc = 0;
            continue;
        }
        if (closed && rc < 0)
            rc = -ECONNRESET;
        if (rc < 0)
            break;
        ts_ctl_header h = {0};
        if ((size_t)rc >= sizeof h)
            memcpy(&h, ans, sizeof h);
        bool ours = (size_t)rc >= sizeof h && h.magic == TS_CTL_MAGIC;
        bool mine = ours && !closed && h.seq == seq && h.type != TS_CTL_REFUSED;
        if (mine && h.type != TS_CTL_FAILED)
            break; /* this call's answer */
        for (unsigned i = 0; i < *nfds; i++)
            close(fds[i]);
        *nfds = 0;
        if (mine)
            rc = -EAGAIN; /* TS_CTL_FAILED: the server could not send its answer now */
        else if (ours && h.type == TS_CTL_REFUSED)
            rc = h.status == TS_CTL_WHY_BUSY ? -EUSERS : -EACCES;
        else if (!ours || h.seq > seq)
            rc = -EPROTO; /* not an answer of this channel */
        else if (closed)
            rc = -ECONNRESET;
        else if (now_ns() >= deadline)
            rc = -ETIMEDOUT;
        else
            rc = 0; /* a late answer to an earlier call that timed out: skipped */
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
