/* Helpers for the sample programs that share memory with another process (ipc_events,
 * pool_ipc, vmm_ipc_drv): a channel to a copy of the program, lines of text and descriptors
 * over it, and handles as hex text. Valid C11 and C++ (the programs also build with nvcc).
 *
 * The channel is one end of a Unix socket pair; the child gets the other end as its stdin and
 * stdout (so a child writes its own messages to stderr), and is this program again
 * (/proc/self/exe) started with the given arguments. A child started this way under
 * LD_PRELOAD keeps it: both processes run under tessera or neither does. */
#ifndef TESSERA_TEST_PROGRAMS_SHARE_H
#define TESSERA_TEST_PROGRAMS_SHARE_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Start this program again with argv (argv[0] included, NULL-terminated); *chan is the
 * parent's end of the channel. Exits the program on failure. */
static inline pid_t chan_spawn(char *const *argv, int *chan) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    printf("error: socketpair: %s\nRESULT status=error\n", strerror(errno));
    exit(1);
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    printf("error: fork: %s\nRESULT status=error\n", strerror(errno));
    exit(1);
  }
  if (pid == 0) {
    dup2(sv[1], 0);
    dup2(sv[1], 1);
    close(sv[0]);
    close(sv[1]);
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  close(sv[1]);
  *chan = sv[0];
  return pid;
}

/* The child's exit status (128 + N when signal N killed it). */
static inline int chan_wait(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static inline void chan_put(int fd, const char *line) {
  size_t n = strlen(line), off = 0;
  while (off < n) {
    ssize_t w = write(fd, line + off, n - off);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) off += (size_t)w;
  }
}

/* One line (without its newline) into buf; 0 when the other side closed first. */
static inline int chan_get(int fd, char *buf, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    char c;
    ssize_t r = read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (c == '\n') {
      buf[n] = '\0';
      return 1;
    }
    buf[n++] = c;
  }
  buf[n] = '\0';
  return 0;
}

/* The one-byte message that carries a descriptor (SCM_RIGHTS): its parts, which must outlive
 * the msghdr that points at them. */
struct chan_fd_msg {
  char byte;
  struct iovec iov;
  /* Aligned as a cmsghdr is (size_t): the header itself cannot be a member, glibc's ends in
   * a flexible array, which clang refuses inside a struct that goes on. */
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    size_t align; /* a cmsghdr's alignment (its cmsg_len); the struct itself ends in a flexible
                   * array, which clang refuses inside another struct */
  } ctl;
  struct msghdr msg;
};

static inline void chan_fd_msg_init(struct chan_fd_msg *m) {
  memset(m, 0, sizeof *m);
  m->byte = 'F';
  m->iov.iov_base = &m->byte;
  m->iov.iov_len = 1;
  m->msg.msg_iov = &m->iov;
  m->msg.msg_iovlen = 1;
  m->msg.msg_control = m->ctl.buf;
  m->msg.msg_controllen = sizeof m->ctl.buf;
}

/* A descriptor over the channel, as a program shares a POSIX handle. */
static inline int chan_put_fd(int chan, int fd) {
  struct chan_fd_msg m;
  chan_fd_msg_init(&m);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(chan, &m.msg, 0) == 1 ? 0 : -1;
}

static inline int chan_get_fd(int chan) {
  struct chan_fd_msg m;
  chan_fd_msg_init(&m);
  if (recvmsg(chan, &m.msg, 0) != 1) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

static inline void hex_put(const void *p, size_t n, char *out) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* 0 when s is exactly 2n hex digits (written to p), -1 otherwise */
static inline int hex_get(const char *s, void *p, size_t n) {
  unsigned char *b = (unsigned char *)p;
  if (strlen(s) != 2 * n) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    b[i] = (unsigned char)v;
  }
  return 0;
}

#endif
