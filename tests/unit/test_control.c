/* The control channel (shim/control.c), server and clients in one process, with a service of
 * the test's own: framing and sequence numbers, answers with descriptors, admission and its
 * bounds, peers dropped and what they held released, descriptors that are no longer the
 * channel's, a forked child. It has a thread of its own: scripts/test.sh runs it under TSan. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "shim/shim.h"

/* The test's service: types 0x200-0x20f. */
enum { ECHO = 0x200, HOLD = 0x201, FDS = 0x202, BAD = 0x203, QUIET = 0x204, BIG = 0x205,
       SLOW = 0x206, LAST = 0x20f };

typedef struct msg {
    ts_ctl_header h;
    char body[64];
} msg;

static int holding;   /* atomic: peers whose state is set */
static int peer_uid;  /* atomic: the uid the last request came from */

static bool served(void **data, const ts_ctl_peer_info *who, const void *in, size_t len,
                   ts_ctl_answer *ans)
{
    msg m;
    memset(&m, 0, sizeof m);
    memcpy(&m, in, len < sizeof m ? len : sizeof m);
    __atomic_store_n(&peer_uid, (int)who->uid, __ATOMIC_RELAXED);
    switch (m.h.type) {
    case ECHO:
        memcpy(ans->buf + sizeof m.h, m.body, sizeof m.body);
        ans->len = sizeof m;
        return true;
    case HOLD:
        if (!*data) {
            *data = &holding;
            __atomic_add_fetch(&holding, 1, __ATOMIC_SEQ_CST);
        }
        return true;
    case FDS:
        for (int i = 0; i < m.body[0] && i < TS_CTL_FDS_MAX; i++)
            ans->fds[ans->nfds++] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return true;
    case QUIET:
        ans->len = 0;
        return true;
    case BIG: /* an answer of the most a message may hold */
        memset(ans->buf + sizeof m.h, 0x5a, TS_CTL_MSG_MAX - sizeof m.h);
        ans->len = TS_CTL_MSG_MAX;
        return true;
    case SLOW: /* an answer that takes 200 ms */
        nanosleep(&(struct timespec){0, 200000000}, NULL);
        memcpy(ans->buf + sizeof m.h, m.body, sizeof m.body);
        ans->len = sizeof m;
        return true;
    case LAST: /* the last type of the range is the service's */
        return true;
    default:
        return false; /* BAD */
    }
}

static void gone(void **data)
{
    if (*data)
        __atomic_sub_fetch(&holding, 1, __ATOMIC_SEQ_CST);
    *data = NULL;
}

static const ts_ctl_service service = {0x200, 0x20f, served, gone};
static ts_ctl_address addr;

static ssize_t call(ts_ctl_client *c, uint16_t type, const char *body, msg *ans)
{
    msg q;
    memset(&q, 0, sizeof q);
    q.h.type = type;
    if (body)
        snprintf(q.body, sizeof q.body, "%s", body);
    unsigned nfds = 0;
    return ts_ctl_call(c, &q, sizeof q, ans, sizeof *ans, NULL, 0, &nfds);
}

static ts_ctl_client *connected(void)
{
    ts_ctl_client *c = NULL;
    assert_int_equal(ts_ctl_connect(&addr, &c), 0);
    return c;
}

static int count_fds(const char *kind)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[300], link[128];
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        link[k > 0 ? k : 0] = '\0';
        n += !kind || strncmp(link, kind, strlen(kind)) == 0;
    }
    closedir(d);
    return n;
}

/* Wait (bounded) until count_fds(kind) is want: the server closes its end after the client. */
static int fds_settle(const char *kind, int want)
{
    int n = count_fds(kind);
    for (int i = 0; i < 10000 && n != want; i++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        n = count_fds(kind);
    }
    return n;
}

/* Wait (bounded) until holding is want: the server sees a close after the client made it. */
static int holding_settles(int want)
{
    for (int i = 0; i < 10000 && __atomic_load_n(&holding, __ATOMIC_SEQ_CST) != want; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return __atomic_load_n(&holding, __ATOMIC_SEQ_CST);
}

/* A raw connection to the server, as any process could make it. */
static int raw_connect(void)
{
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "tessera.%d.%016llx",
                     (int)addr.pid, (unsigned long long)addr.secret);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&un,
                             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)),
                     0);
    struct timeval tv = {.tv_sec = 60};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* What the server did after a raw request: 1 answered, 0 closed the connection, -1 neither
 * (nothing for 60 s). */
static int raw_answered(int fd)
{
    char buf[TS_CTL_MSG_MAX];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == ECONNRESET)
        return 0;
    return n > 0 ? 1 : n == 0 ? 0 : -1;
}

static void test_round_trip_and_sequence(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg a;
    assert_int_equal(call(c, ECHO, "hello", &a), sizeof a);
    assert_int_equal(a.h.magic, TS_CTL_MAGIC);
    assert_int_equal(a.h.type, ECHO);
    assert_string_equal(a.body, "hello");
    /* a request without an answer, then a call: its own answer, not a stale one */
    msg q = {.h = {.type = QUIET}};
    assert_int_equal(ts_ctl_send(c, &q, sizeof q), 0);
    assert_int_equal(call(c, ECHO, "again", &a), sizeof a);
    assert_string_equal(a.body, "again");
    /* a late answer to an earlier request is skipped: ECHO sent one way, then a call */
    msg e = {.h = {.type = ECHO}, .body = "late"};
    assert_int_equal(ts_ctl_send(c, &e, sizeof e), 0);
    assert_int_equal(call(c, ECHO, "now", &a), sizeof a);
    assert_string_equal(a.body, "now");
    /* a request type nobody serves: said, and the connection stays */
    assert_int_equal(call(c, 0x7777, NULL, &a), sizeof a.h);
    assert_int_equal(a.h.type, TS_CTL_UNKNOWN);
    assert_int_equal(call(c, ECHO, "still", &a), sizeof a);
    assert_string_equal(a.body, "still");
    assert_int_equal(__atomic_load_n(&peer_uid, __ATOMIC_RELAXED), (int)geteuid());
    ts_ctl_close(c);
}

static void test_answers_at_their_bounds(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    /* a message of exactly TS_CTL_MSG_MAX bytes */
    static unsigned char big[TS_CTL_MSG_MAX];
    msg q = {.h = {.type = BIG}};
    unsigned nfds = 0;
    assert_int_equal(ts_ctl_call(c, &q, sizeof q, big, sizeof big, NULL, 0, &nfds), TS_CTL_MSG_MAX);
    assert_int_equal(big[TS_CTL_MSG_MAX - 1], 0x5a);
    /* TS_CTL_FDS_MAX descriptors with one answer */
    int fds[TS_CTL_FDS_MAX];
    msg f = {.h = {.type = FDS}, .body = {TS_CTL_FDS_MAX}}, a;
    assert_int_equal(ts_ctl_call(c, &f, sizeof f, &a, sizeof a, fds, TS_CTL_FDS_MAX, &nfds),
                     sizeof a.h);
    assert_int_equal(nfds, TS_CTL_FDS_MAX);
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    /* the last type of the service's range is its own (it answers; BAD would drop) */
    assert_int_equal(call(c, LAST, NULL, &a), sizeof a.h);
    assert_int_equal(a.h.type, LAST);
    ts_ctl_close(c);
}

static void test_answers_carry_descriptors(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg q = {.h = {.type = FDS}, .body = {3}}, a;
    assert_int_equal(call(c, ECHO, "accepted", &a), sizeof a); /* the server's end exists */
    int before = count_fds(NULL);
    int fds[4];
    unsigned nfds = 0;
    assert_true(ts_ctl_call(c, &q, sizeof q, &a, sizeof a, fds, 4, &nfds) >= (ssize_t)sizeof a.h);
    assert_int_equal(nfds, 3);
    for (unsigned i = 0; i < nfds; i++) {
        struct stat st;
        assert_int_equal(fstat(fds[i], &st), 0);
        assert_true(S_ISCHR(st.st_mode)); /* /dev/null, sent */
        assert_true(fcntl(fds[i], F_GETFD) & FD_CLOEXEC);
        close(fds[i]);
    }
    /* a descriptor received is the client's: the server's later answers leave it alone (its
     * own copy, whose number it had, is long closed) */
    msg one = {.h = {.type = FDS}, .body = {1}};
    assert_int_equal(ts_ctl_call(c, &one, sizeof one, &a, sizeof a, fds, 4, &nfds), sizeof a.h);
    assert_int_equal(nfds, 1);
    assert_int_equal(call(c, ECHO, "after one", &a), sizeof a);
    assert_int_equal(call(c, ECHO, "and again", &a), sizeof a);
    struct stat kept;
    assert_int_equal(fstat(fds[0], &kept), 0);
    assert_true(S_ISCHR(kept.st_mode));
    close(fds[0]);
    /* a late answer (to a request sent one way) is skipped, and its descriptors closed */
    int nulls = count_fds("/dev/null");
    assert_int_equal(ts_ctl_send(c, &q, sizeof q), 0);
    msg e = {.h = {.type = ECHO}, .body = "after"};
    assert_int_equal(ts_ctl_call(c, &e, sizeof e, &a, sizeof a, fds, 4, &nfds), sizeof a);
    assert_int_equal(nfds, 0);
    assert_string_equal(a.body, "after");
    assert_int_equal(fds_settle("/dev/null", nulls), nulls);
    /* more descriptors than asked for: refused, none kept */
    assert_int_equal(ts_ctl_call(c, &q, sizeof q, &a, sizeof a, fds, 2, &nfds), -EPROTO);
    assert_int_equal(nfds, 0);
    assert_int_equal(fds_settle(NULL, before), before); /* the server closes its copies after */
    ts_ctl_close(c);
    assert_int_equal(fds_settle(NULL, before - 2), before - 2); /* both ends */
}

static void test_dropped_peer_lets_go(void **state)
{
    (void)state;
    int base = holding_settles(0);
    assert_int_equal(base, 0);
    ts_ctl_client *c = connected(), *d = connected();
    msg a;
    assert_int_equal(call(c, HOLD, NULL, &a), sizeof a.h);
    assert_int_equal(call(d, HOLD, NULL, &a), sizeof a.h);
    assert_int_equal(__atomic_load_n(&holding, __ATOMIC_SEQ_CST), 2);
    /* a request the service calls wrong: the peer is dropped, released before it sees the close */
    assert_int_equal(call(c, BAD, NULL, &a), -ECONNRESET);
    assert_int_equal(__atomic_load_n(&holding, __ATOMIC_SEQ_CST), 1);
    /* a close lets go too */
    ts_ctl_close(d);
    assert_int_equal(holding_settles(0), 0);
    ts_ctl_close(c);
}

static void test_raw_requests_out_of_bounds_are_dropped(void **state)
{
    (void)state;
    msg q = {.h = {.magic = TS_CTL_MAGIC, .type = ECHO, .seq = 1}, .body = "x"};
    /* an honest raw request is answered */
    int fd = raw_connect();
    assert_int_equal(send(fd, &q, sizeof q, 0), sizeof q);
    assert_int_equal(raw_answered(fd), 1);
    close(fd);
    /* longer than a message */
    static char big[TS_CTL_MSG_MAX + 1];
    memcpy(big, &q, sizeof q);
    fd = raw_connect();
    assert_int_equal(send(fd, big, sizeof big, 0), sizeof big);
    assert_int_equal(raw_answered(fd), 0);
    close(fd);
    /* exactly a message is not too long */
    fd = raw_connect();
    assert_int_equal(send(fd, big, TS_CTL_MSG_MAX, 0), TS_CTL_MSG_MAX);
    assert_int_equal(raw_answered(fd), 1);
    close(fd);
    /* a head alone is a request */
    fd = raw_connect();
    assert_int_equal(send(fd, &q, sizeof q.h, 0), sizeof q.h);
    assert_int_equal(raw_answered(fd), 1);
    close(fd);
    /* shorter than a head, and a foreign head */
    fd = raw_connect();
    assert_int_equal(send(fd, &q, sizeof q.h - 1, 0), sizeof q.h - 1);
    assert_int_equal(raw_answered(fd), 0);
    close(fd);
    msg bad = q;
    bad.h.magic ^= 1;
    fd = raw_connect();
    assert_int_equal(send(fd, &bad, sizeof bad, 0), sizeof bad);
    assert_int_equal(raw_answered(fd), 0);
    close(fd);
    /* descriptors sent to the server: never installed there, the sender dropped */
    int before = count_fds(NULL), nulls = count_fds("/dev/null");
    fd = raw_connect();
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = {&q, sizeof q};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                        .msg_controllen = sizeof cm.b};
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &devnull, sizeof devnull);
    assert_int_equal(sendmsg(fd, &mh, 0), sizeof q);
    close(devnull);
    assert_int_equal(raw_answered(fd), 0);
    close(fd);
    assert_int_equal(fds_settle(NULL, before), before);
    assert_int_equal(count_fds("/dev/null"), nulls);
}

/* A connection that holds nothing and says nothing is closed once idle (CTL_IDLE_NS, 10 s),
 * with nothing else waking the server; one that holds something stays as long. */
static void test_idle_peer_closed(void **state)
{
    (void)state;
    ts_ctl_client *h = connected();
    msg a;
    assert_int_equal(call(h, HOLD, NULL, &a), sizeof a.h);
    int held = __atomic_load_n(&holding, __ATOMIC_SEQ_CST);
    int fd = raw_connect();
    assert_int_equal(raw_answered(fd), 0); /* closed by the server (raw_connect waits 60 s) */
    close(fd);
    assert_int_equal(__atomic_load_n(&holding, __ATOMIC_SEQ_CST), held);
    assert_int_equal(call(h, ECHO, "held", &a), sizeof a);
    assert_string_equal(a.body, "held");
    ts_ctl_close(h);
    assert_int_equal(holding_settles(held - 1), held - 1);
}

/* A process's start time: field 22 of /proc/PID/stat, read with no descriptor kept; a pid with
 * no process gives none. */
static void test_proc_start_keeps_no_descriptor(void **state)
{
    (void)state;
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')') + 1; /* the space before field 3 */
    for (int field = 3; field < 22; field++)
        p = strchr(p + 1, ' ');
    unsigned long long want = strtoull(p + 1, NULL, 10);
    int before = count_fds("/proc/"); /* not the channel's, which the server closes when it may */
    uint64_t start = 0;
    for (int i = 0; i < 100; i++) {
        assert_true(ts_ctl_proc_start(getpid(), &start));
        assert_int_equal(start, want);
    }
    assert_false(ts_ctl_proc_start(-1, &start));
    assert_int_equal(count_fds("/proc/"), before);
}

static void test_server_identity_checked(void **state)
{
    (void)state;
    ts_ctl_client *c = NULL;
    ts_ctl_address a = addr;
    a.start ^= 1; /* the pid is another process now */
    assert_int_equal(ts_ctl_connect(&a, &c), -ESTALE);
    a = addr;
    a.secret ^= 1; /* no such server */
    assert_int_equal(ts_ctl_connect(&a, &c), -ESRCH);
    /* this process holds the name of another's (its parent's) channel */
    a = (ts_ctl_address){.pid = getppid(), .secret = 0x5eed};
    assert_true(ts_ctl_proc_start(a.pid, &a.start));
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "tessera.%d.%016llx", (int)a.pid,
                     (unsigned long long)a.secret);
    int squat = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(squat, (struct sockaddr *)&un,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)),
                     0);
    assert_int_equal(listen(squat, 4), 0);
    assert_int_equal(ts_ctl_connect(&a, &c), -EPERM);
    close(squat);
}

/* A listening socket of the test's own under a server's name (this process's pid, another
 * secret), with the given backlog: what a client finds there is no tessera, only the name. */
static int own_listener(ts_ctl_address *a, int backlog)
{
    *a = addr;
    a->secret = addr.secret ^ 0x5a5a;
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "tessera.%d.%016llx",
                     (int)a->pid, (unsigned long long)a->secret);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&un,
                          (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)),
                     0);
    assert_int_equal(listen(fd, backlog), 0);
    return fd;
}

/* A connection closed before the request went out carries no answer to it, even one that
 * looks like it (this call's number, sent before the close): the call says the connection was
 * reset, not that the channel spoke another protocol. */
static void test_no_answer_before_the_request(void **state)
{
    (void)state;
    ts_ctl_address a;
    int lfd = own_listener(&a, 4);
    ts_ctl_client *c = NULL;
    assert_int_equal(ts_ctl_connect(&a, &c), 0);
    int sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(sfd >= 0);
    msg forged = {.h = {.magic = TS_CTL_MAGIC, .type = ECHO, .seq = 1}, .body = "forged"};
    assert_int_equal(send(sfd, &forged, sizeof forged, 0), sizeof forged);
    close(sfd);
    msg ans;
    ssize_t rc = call(c, ECHO, "x", &ans);
    ts_ctl_close(c);
    close(lfd);
    assert_int_equal(rc, -ECONNRESET);
}

/* A server of the test's own that takes one connection, waits for its request and closes it
 * unread, after a refusal or with nothing said. */
typedef struct closer {
    int lfd;
    bool refuse;
} closer;

static void *close_unread(void *arg)
{
    closer *k = arg;
    struct pollfd l = {.fd = k->lfd, .events = POLLIN};
    poll(&l, 1, 60000);
    int sfd = accept4(k->lfd, NULL, NULL, SOCK_CLOEXEC);
    struct pollfd p = {.fd = sfd, .events = POLLIN};
    poll(&p, 1, 60000);
    if (k->refuse) {
        ts_ctl_header h = {.magic = TS_CTL_MAGIC, .type = TS_CTL_REFUSED,
                           .status = TS_CTL_WHY_USER};
        send(sfd, &h, sizeof h, MSG_NOSIGNAL);
    }
    close(sfd);
    return NULL;
}

/* A server that closes a connection with the request unread resets it: the refusal it sent
 * first is still read (-EACCES), and with nothing sent the call says the connection was reset
 * (an exporter that went away), not that it timed out. */
static void test_closed_with_the_request_unread(void **state)
{
    (void)state;
    for (int refuse = 0; refuse < 2; refuse++) {
        closer k = {.refuse = refuse};
        ts_ctl_address a;
        k.lfd = own_listener(&a, 4);
        ts_ctl_client *c = NULL;
        assert_int_equal(ts_ctl_connect(&a, &c), 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, close_unread, &k), 0);
        msg ans;
        ssize_t rc = call(c, ECHO, "x", &ans);
        pthread_join(t, NULL);
        ts_ctl_close(c);
        close(k.lfd);
        assert_int_equal(rc, refuse ? -EACCES : -ECONNRESET);
    }
}

static void on_signal(int sig)
{
    (void)sig;
}

/* Run fn(arg) in a thread and send it SIGUSR1 (a handler that does nothing, no SA_RESTART)
 * every `every_ns` until it sets *done: what a profiler's timer does to a program's threads. */
static void run_under_signals(void *(*fn)(void *), void *arg, const int *done, long every_ns)
{
    struct sigaction sa = {.sa_handler = on_signal}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
    while (!__atomic_load_n(done, __ATOMIC_ACQUIRE)) {
        pthread_kill(t, SIGUSR1);
        nanosleep(&(struct timespec){0, every_ns}, NULL);
    }
    pthread_join(t, NULL);
    sigaction(SIGUSR1, &old, NULL);
}

typedef struct connecting {
    ts_ctl_address a;
    int rc, done;
} connecting;

static void *connect_thread(void *arg)
{
    connecting *k = arg;
    ts_ctl_client *c = NULL;
    k->rc = ts_ctl_connect(&k->a, &c);
    if (c)
        ts_ctl_close(c);
    __atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A connect that fails for another reason than "nobody serves that name" says so: one
 * interrupted while it waits for room in a full backlog is -EINTR, neither an exited process
 * (-ESRCH) nor a timeout. */
static void test_connect_errors_are_not_an_exit(void **state)
{
    (void)state;
    connecting k = {.rc = 1};
    int lfd = own_listener(&k.a, 0);
    /* fill the backlog: connections nobody accepts */
    int fill[8], nfill = 0;
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "tessera.%d.%016llx",
                     (int)k.a.pid, (unsigned long long)k.a.secret);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    for (;;) {
        assert_true(nfill < 8);
        fill[nfill] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (connect(fill[nfill], (struct sockaddr *)&un, len) != 0) {
            assert_int_equal(errno, EAGAIN);
            close(fill[nfill]);
            break;
        }
        nfill++;
    }
    run_under_signals(connect_thread, &k, &k.done, 10000000);
    while (nfill > 0)
        close(fill[--nfill]);
    close(lfd);
    assert_int_equal(k.rc, -EINTR);
}

enum { CLIENT_END, SERVER_END, LISTENING };

/* A socket of the channel in this process: a client's end (its peer has the server's name), the
 * server's end of a connection (its own name is the server's, it does not listen), or the
 * listening socket. The last one found, or -1. */
static int channel_fd(int which)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct sockaddr_un un;
        socklen_t len = sizeof un;
        int listening = 0;
        socklen_t ll = sizeof listening;
        if (e->d_name[0] == '.' || fd == dirfd(d) ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0)
            continue;
        int named = which == CLIENT_END ? getpeername(fd, (struct sockaddr *)&un, &len)
                                        : getsockname(fd, (struct sockaddr *)&un, &len);
        if (named == 0 && len > sizeof(sa_family_t) + 1 && un.sun_path[0] == '\0' &&
            strncmp(un.sun_path + 1, "tessera.", 8) == 0 &&
            (which == CLIENT_END || listening == (which == LISTENING)))
            found = fd;
    }
    closedir(d);
    return found;
}

static int client_fd(void)
{
    return channel_fd(CLIENT_END);
}

/* A call whose answer does not come within the client's bound times out: -ETIMEDOUT (the
 * importer says the exporter did not answer in time), not a reset connection (which it would
 * take for an exporter that went away); the connection still serves the next call. */
static void test_call_times_out(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    assert_int_equal(ts_ctl_timeout(c, 50000000ull), 0);
    msg a;
    assert_int_equal(call(c, QUIET, NULL, &a), -ETIMEDOUT);
    assert_int_equal(call(c, ECHO, "later", &a), sizeof a);
    assert_string_equal(a.body, "later");
    ts_ctl_close(c);
}

typedef struct slow_call {
    ts_ctl_client *c;
    ssize_t rc;
    msg ans;
    int done;
} slow_call;

static void *call_slow(void *arg)
{
    slow_call *k = arg;
    k->rc = call(k->c, SLOW, "patient", &k->ans);
    __atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A signal of the program's while a call waits for its answer (a profiler's timer, say) does
 * not fail the call: the answer still comes. */
static void test_call_survives_signals(void **state)
{
    (void)state;
    slow_call k = {.c = connected()};
    run_under_signals(call_slow, &k, &k.done, 5000000);
    ts_ctl_close(k.c);
    assert_int_equal(k.rc, sizeof k.ans);
    assert_string_equal(k.ans.body, "patient");
}

/* A program that closed its standard input: the client's socket may be descriptor 0, a
 * descriptor like any other (whatever errno the program's last call left). */
static void test_client_on_descriptor_zero(void **state)
{
    (void)state;
    int saved = fcntl(0, F_DUPFD_CLOEXEC, 3);
    assert_true(saved >= 0);
    close(0);
    errno = EINVAL;
    ts_ctl_client *c = NULL;
    int rc = ts_ctl_connect(&addr, &c);
    msg a;
    ssize_t n = rc == 0 ? call(c, ECHO, "zero", &a) : rc;
    int fd = rc == 0 ? client_fd() : -1;
    if (c)
        ts_ctl_close(c);
    assert_int_equal(dup2(saved, 0), 0);
    close(saved);
    assert_int_equal(rc, 0);
    assert_int_equal(fd, 0);
    assert_int_equal(n, sizeof a);
    assert_string_equal(a.body, "zero");
}

static void test_descriptor_taken_over_is_never_touched(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg a;
    assert_int_equal(call(c, ECHO, "x", &a), sizeof a);
    int fd = client_fd();
    assert_true(fd >= 0);
    /* the program closes it and gets the number back for a pipe of its own */
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(fd);
    assert_int_equal(dup2(p[1], fd), fd);
    close(p[1]);
    assert_int_equal(call(c, ECHO, "x", &a), -EBADF);
    msg q = {.h = {.type = QUIET}};
    assert_int_equal(ts_ctl_send(c, &q, sizeof q), -EBADF);
    ts_ctl_close(c);
    /* nothing was written to the pipe, and it is still open */
    assert_true(fcntl(fd, F_GETFD) >= 0);
    close(fd);
    char byte;
    assert_int_equal(read(p[0], &byte, 1), 0);
    close(p[0]);
}

/* The server's end of a connection, closed by the program and its number given to a socket
 * of the program's own: the server drops the peer (what it held is let go) and never reads
 * from, writes to or closes the program's socket. */
static void test_server_end_taken_over_is_never_touched(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg a;
    assert_int_equal(call(c, HOLD, NULL, &a), sizeof a.h);
    int held = __atomic_load_n(&holding, __ATOMIC_SEQ_CST);
    int fd = channel_fd(SERVER_END);
    assert_true(fd >= 0);
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
    close(fd);
    assert_int_equal(dup2(sp[0], fd), fd);
    close(sp[0]);
    /* a message waits on the program's socket: readable, as a request would be */
    msg q = {.h = {.magic = TS_CTL_MAGIC, .type = ECHO, .seq = 9}, .body = "mine"};
    assert_int_equal(send(sp[1], &q, sizeof q, 0), sizeof q);
    /* the server polls the number again once something else wakes it */
    ts_ctl_client *waker = connected();
    assert_int_equal(call(waker, ECHO, "wake", &a), sizeof a);
    assert_int_equal(call(waker, ECHO, "wake", &a), sizeof a);
    ts_ctl_close(waker);
    assert_int_equal(holding_settles(held - 1), held - 1);
    /* the program's message is still there, and nothing was sent to it */
    msg got;
    assert_int_equal(recv(fd, &got, sizeof got, MSG_DONTWAIT), sizeof got);
    assert_string_equal(got.body, "mine");
    assert_int_equal(recv(sp[1], &got, sizeof got, MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
    assert_true(fcntl(fd, F_GETFD) >= 0);
    close(fd);
    close(sp[1]);
    ts_ctl_close(c);
}

/* Descriptors that come with an answer need room here: a client with none left (a child of
 * its own, so that the server keeps its room) fails with -EMFILE and keeps nothing. */
static void test_answer_descriptors_without_room(void **state)
{
    (void)state;
    pid_t pid = fork();
    if (pid == 0) {
        ts_ctl_client *c = NULL;
        msg a;
        if (ts_ctl_connect(&addr, &c) != 0 || call(c, ECHO, "x", &a) != sizeof a)
            _exit(2);
        struct rlimit rl = {64, 64};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(4);
        int before = count_fds(NULL), fill[64], n = 0;
        while (n < 64 && (fill[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
            n++;
        if (n == 0 || n == 64)
            _exit(3);
        close(fill[--n]); /* one left: not room for three */
        msg q = {.h = {.type = FDS}, .body = {3}};
        int fds[4];
        unsigned nfds = 9;
        ssize_t rc = ts_ctl_call(c, &q, sizeof q, &a, sizeof a, fds, 4, &nfds);
        while (n > 0)
            close(fill[--n]);
        _exit(rc == -EMFILE && nfds == 0 && count_fds(NULL) == before ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_fork_child_closes_the_channel(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg a;
    assert_int_equal(call(c, HOLD, NULL, &a), sizeof a.h);
    assert_true(count_fds("socket:") >= 3); /* listening, the server's end, the client's */
    pid_t pid = fork();
    if (pid == 0) {
        /* the child keeps none of them; its client fails without a descriptor */
        int left = count_fds("socket:");
        _exit(left == 0 && call(c, ECHO, "x", &a) == -EBADF ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the parent's connection is intact */
    assert_int_equal(call(c, ECHO, "parent", &a), sizeof a);
    assert_string_equal(a.body, "parent");
    ts_ctl_close(c);
    assert_int_equal(holding_settles(0), 0);
}

typedef struct worker {
    ts_ctl_client *c;
    int id, bad;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    bool own = !w->c;
    if (own && ts_ctl_connect(&addr, &w->c) != 0) {
        w->bad = 1000;
        return NULL;
    }
    for (int i = 0; i < 200; i++) {
        char body[32];
        snprintf(body, sizeof body, "%d-%d", w->id, i);
        msg a;
        w->bad += call(w->c, ECHO, body, &a) != sizeof a || strcmp(a.body, body) != 0;
    }
    if (own)
        ts_ctl_close(w->c);
    return NULL;
}

static void test_many_threads(void **state)
{
    (void)state;
    enum { OWN = 6, SHARED = 4 };
    pthread_t t[OWN + SHARED];
    worker w[OWN + SHARED];
    assert_int_equal(fds_settle("socket:", 1), 1); /* the listening socket alone */
    ts_ctl_client *shared = connected();
    for (int i = 0; i < OWN + SHARED; i++) {
        w[i] = (worker){.c = i < OWN ? NULL : shared, .id = i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < OWN + SHARED; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].bad, 0);
    }
    ts_ctl_close(shared);
}

/* Run a check in a forked child (it has no server) as another user, whose limits apply (root's
 * do not): body itself, or, for a check that starts a server of its own (a thread: not after a
 * fork of this threaded process, under TSan), this program again, exec'd with "--child NAME"
 * (main). The check's result, 0 when all went as it should, is the child's exit status. Needs
 * root. */
static void as_another_user(int (*body)(void), const char *exec_name)
{
    if (geteuid() != 0)
        skip();
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(100);
        if (exec_name)
            execl("/proc/self/exe", "test_control", "--child", exec_name, (char *)NULL);
        _exit(exec_name ? 101 : body());
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* A server that cannot start (its thread cannot be made: the user may run no more processes)
 * says why and leaves nothing behind, no socket; once it may, it starts. */
static int start_fails(void)
{
    struct rlimit was;
    if (getrlimit(RLIMIT_NPROC, &was) != 0)
        return 3;
    struct rlimit none = {0, was.rlim_max};
    if (setrlimit(RLIMIT_NPROC, &none) != 0)
        return 4;
    int sockets = count_fds("socket:");
    ts_ctl_address a;
    if (ts_ctl_serve(&service, &a) != -EAGAIN)
        return 5;
    if (count_fds("socket:") != sockets)
        return 6;
    if (setrlimit(RLIMIT_NPROC, &was) != 0 || ts_ctl_serve(&service, &a) != 0)
        return 7;
    ts_ctl_client *c = NULL;
    msg ans;
    if (ts_ctl_connect(&a, &c) != 0 || call(c, ECHO, "child", &ans) != sizeof ans)
        return 8;
    ts_ctl_close(c);
    return strcmp(ans.body, "child") == 0 ? 0 : 9;
}

static void test_server_start_fails_cleanly(void **state)
{
    (void)state;
    as_another_user(NULL, "start_fails");
}

/* Descriptors this process may not have in flight now (more than its limit sent and not yet
 * received, for a user other than root): the request fails, said with TS_CTL_FAILED and the
 * reason, and the peer, which did nothing wrong, stays. With a limit of 64, the child's server
 * (its own) answers raw requests for 8 descriptors each that are not read until ten wait. */
static int failed_in_flight(void)
{
    struct rlimit rl = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 2;
    if (ts_ctl_serve(&service, &addr) != 0)
        return 3;
    int fd = raw_connect();
    enum { N = 10 };
    for (uint32_t i = 1; i <= N; i++) {
        msg q = {.h = {.magic = TS_CTL_MAGIC, .type = FDS, .seq = i}, .body = {8}};
        if (send(fd, &q, sizeof q, 0) != sizeof q)
            return 4;
    }
    int queued = 0;
    for (int i = 0; i < 10000 && queued < N * (int)sizeof(ts_ctl_header); i++) {
        nanosleep(&(struct timespec){0, 1000000}, NULL);
        if (ioctl(fd, FIONREAD, &queued) != 0)
            return 5;
    }
    int failed = 0;
    for (int i = 0; i < N; i++) {
        ts_ctl_header h;
        union {
            struct cmsghdr c;
            char b[CMSG_SPACE(sizeof(int) * 8)];
        } cm;
        struct iovec iov = {&h, sizeof h};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                            .msg_controllen = sizeof cm.b};
        if (recvmsg(fd, &mh, MSG_DONTWAIT) != sizeof h)
            return 6;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + k * sizeof got, sizeof got);
                close(got);
            }
        failed += h.type == TS_CTL_FAILED && h.status == ETOOMANYREFS && h.seq == (uint32_t)i + 1;
    }
    if (failed == 0)
        return 7;
    /* the peer stays: a request after is answered */
    msg q = {.h = {.magic = TS_CTL_MAGIC, .type = ECHO, .seq = N + 1}, .body = "still"}, a;
    if (send(fd, &q, sizeof q, 0) != sizeof q || recv(fd, &a, sizeof a, 0) != sizeof a)
        return 8;
    return strcmp(a.body, "still") == 0 ? 0 : 9;
}

static void test_descriptors_in_flight_over_the_limit(void **state)
{
    (void)state;
    as_another_user(NULL, "failed_in_flight");
}

/* Run last: fills the server. Its limit is a quarter of 64 descriptors (main sets it): 16
 * connections, 12 per user. */
static void test_connections_bounded(void **state)
{
    (void)state;
    assert_int_equal(fds_settle("socket:", 1), 1);
    ts_ctl_client *c[16];
    msg a;
    int admitted = 0;
    for (int i = 0; i < 12; i++) {
        c[i] = connected();
        admitted += call(c[i], ECHO, "in", &a) == sizeof a;
    }
    assert_int_equal(admitted, 12);
    ts_ctl_client *over = connected();
    assert_int_equal(call(over, ECHO, "over", &a), -EUSERS);
    ts_ctl_close(over);
    /* one leaves: one more may come (once the server has seen the close) */
    ts_ctl_close(c[0]);
    int rc = -EUSERS;
    for (int i = 0; i < 1000 && rc == -EUSERS; i++) {
        c[0] = connected();
        rc = (int)call(c[0], ECHO, "back", &a);
        if (rc == -EUSERS) {
            ts_ctl_close(c[0]);
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
    }
    assert_int_equal(rc, sizeof a);
    for (int i = 0; i < 12; i++)
        ts_ctl_close(c[i]);
}

static int refused(void)
{
    ts_ctl_client *c = NULL;
    msg a;
    return ts_ctl_connect(&addr, &c) == 0 && call(c, ECHO, "x", &a) == -EACCES ? 0 : 1;
}

static void test_another_user_refused(void **state)
{
    (void)state;
    as_another_user(refused, NULL);
}

/* Run last: the listening socket closed by the program and its number given to a listening
 * socket of the program's own, a connection waiting on it. The server stops taking connections
 * (its name is gone) and never accepts the program's; connections made before still work. */
static void test_listening_socket_taken_over(void **state)
{
    (void)state;
    ts_ctl_client *c = connected();
    msg a;
    assert_int_equal(call(c, ECHO, "before", &a), sizeof a);
    int lfd = channel_fd(LISTENING);
    assert_true(lfd >= 0);
    struct sockaddr_un un;
    memset(&un, 0, sizeof un);
    un.sun_family = AF_UNIX;
    int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, "program.%d", (int)getpid());
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int mine = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    assert_int_equal(bind(mine, (struct sockaddr *)&un, len), 0);
    assert_int_equal(listen(mine, 4), 0);
    close(lfd);
    assert_int_equal(dup2(mine, lfd), lfd);
    close(mine);
    int waiting = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(waiting, (struct sockaddr *)&un, len), 0);
    /* the server polls the number again: woken by a request; a second one after that round */
    assert_int_equal(call(c, ECHO, "wake", &a), sizeof a);
    assert_int_equal(call(c, ECHO, "after", &a), sizeof a);
    assert_string_equal(a.body, "after");
    /* the program's connection is still there for the program to take */
    int taken = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    assert_true(taken >= 0);
    close(taken);
    close(waiting);
    close(lfd);
    ts_ctl_client *late = NULL;
    assert_int_equal(ts_ctl_connect(&addr, &late), -ESRCH);
    ts_ctl_close(c);
}

int main(int argc, char **argv)
{
    /* a check as_another_user runs in a process of its own */
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return strcmp(argv[2], "start_fails") == 0        ? start_fails()
               : strcmp(argv[2], "failed_in_flight") == 0 ? failed_in_flight()
                                                          : 102;
    /* the server's bounds come from the descriptor limit when it starts */
    struct rlimit rl = {64, 4096};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1;
    if (ts_ctl_serve(&service, &addr) != 0)
        return 1;
    rl.rlim_cur = 1024; /* room for the tests' own descriptors; the server keeps its bounds */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_sequence),
        cmocka_unit_test(test_answers_carry_descriptors),
        cmocka_unit_test(test_answers_at_their_bounds),
        cmocka_unit_test(test_dropped_peer_lets_go),
        cmocka_unit_test(test_raw_requests_out_of_bounds_are_dropped),
        cmocka_unit_test(test_idle_peer_closed),
        cmocka_unit_test(test_proc_start_keeps_no_descriptor),
        cmocka_unit_test(test_server_identity_checked),
        cmocka_unit_test(test_no_answer_before_the_request),
        cmocka_unit_test(test_closed_with_the_request_unread),
        cmocka_unit_test(test_connect_errors_are_not_an_exit),
        cmocka_unit_test(test_client_on_descriptor_zero),
        cmocka_unit_test(test_call_times_out),
        cmocka_unit_test(test_call_survives_signals),
        cmocka_unit_test(test_descriptor_taken_over_is_never_touched),
        cmocka_unit_test(test_server_end_taken_over_is_never_touched),
        cmocka_unit_test(test_answer_descriptors_without_room),
        cmocka_unit_test(test_fork_child_closes_the_channel),
        cmocka_unit_test(test_many_threads),
        cmocka_unit_test(test_another_user_refused),
        cmocka_unit_test(test_server_start_fails_cleanly),
        cmocka_unit_test(test_descriptors_in_flight_over_the_limit),
        cmocka_unit_test(test_connections_bounded),
        cmocka_unit_test(test_listening_socket_taken_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
