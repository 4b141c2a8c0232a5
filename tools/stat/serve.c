/* tessera-stat --serve [ADDR:PORT]: the Prometheus text of every tessera process on the node,
 * served at GET /metrics by libmicrohttpd (Debian's libmicrohttpd-dev).
 *
 * Bounds, against slow or many clients (slowloris):
 * - at most SERVE_PER_CLIENT_LIMIT connections per client, where a client is an IPv4 address
 *   or an IPv6 /64 (one host's addresses);
 * - SERVE_MAX_CONNECTIONS connections in all: when they are taken (many addresses: all of
 *   127/8 is every local user's, a /64 of IPv6 is anyone's), a new connection evicts the one
 *   that has waited longest for its request to arrive, so slow clients cannot shut out a
 *   scraper whose request arrives at once;
 * - SERVE_CONN_MEMORY bytes for a request (a longer request line or header is refused by the
 *   library with 431/413), SERVE_TIMEOUT_S seconds of idleness;
 * - a total time per request, whatever trickles in: the request must arrive whole within
 *   SERVE_REQUEST_S of the connection (or of the previous answer), and its answer be sent
 *   within SERVE_ANSWER_S; past that the connection is shut down.
 * The path is matched as sent, without percent-decoding: only "/metrics" (a query string aside)
 * is served. Anything else is answered (405 for other methods, 404 for other paths) and logged
 * to stderr. Pages are read fresh for every scrape, with the bounded work of ts_stat_load_all.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tools/stat/stat.h"

#define SERVE_MAX_CONNECTIONS 64
#define SERVE_HARD_CONNECTIONS 128 /* the library's own limit: admitted plus being evicted */
#define SERVE_PER_CLIENT_LIMIT 8
#define SERVE_CONN_MEMORY (16 * 1024)
#define SERVE_TIMEOUT_S 10
#define SERVE_REQUEST_S 5
#define SERVE_ANSWER_S 20
#define SERVE_DEFAULT_PORT 9464

#if MHD_VERSION < 0x00097002
typedef int mhd_result;
#else
typedef enum MHD_Result mhd_result;
#endif

static const char *serve_dir;
static ts_prom_labels serve_labels;
static volatile sig_atomic_t serve_stop;

/* One open connection. Invariant: on conns exactly while libmicrohttpd holds the connection
 * (from its STARTED to its CLOSED notification, both under conns_lock), so fd is still this
 * connection's socket whenever the sweeper shuts it down. */
typedef struct conn_rec {
    struct conn_rec *next;
    unsigned char client[17]; /* family byte + the address bits that name the client */
    int fd;
    bool answering;           /* its request arrived and is being answered */
    bool evicted;             /* shut down; gone at its CLOSED notification */
    int64_t waiting_since_ms; /* monotonic: connection or last answer, while !answering */
    int64_t deadline_ms;      /* monotonic; the connection is shut down past it */
} conn_rec;

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static conn_rec *conns;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The client a socket address belongs to: IPv4 /32, IPv6 /64 (::1 as itself). */
static void client_of(const struct sockaddr *sa, unsigned char key[17])
{
    memset(key, 0, 17);
    const unsigned char *v4 = NULL;
    if (sa->sa_family == AF_INET) {
        v4 = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))
            v4 = a->s6_addr + 12;
        else {
            key[0] = '6';
            memcpy(key + 1, a->s6_addr, IN6_IS_ADDR_LOOPBACK(a) ? 16 : 8);
        }
    }
    if (v4) {
        key[0] = '4';
        memcpy(key + 1, v4, 4);
    }
}

static void conn_evict(conn_rec *c)
{
    shutdown(c->fd, SHUT_RDWR);
    c->evicted = true;
}

/* Admit a new connection unless its client already holds its share; when every connection is
 * taken, make room by evicting the one waiting longest for its request. */
static mhd_result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)cls;
    (void)addrlen;
    unsigned char key[17];
    client_of(addr, key);
    unsigned held = 0, total = 0;
    conn_rec *oldest = NULL;
    pthread_mutex_lock(&conns_lock);
    for (conn_rec *c = conns; c; c = c->next) {
        if (c->evicted)
            continue;
        total++;
        held += memcmp(c->client, key, sizeof key) == 0;
        /* <=: conns is newest first, and connections the server took in the same
         * millisecond (a backlog drained at once) are then ranked by arrival */
        if (!c->answering && c->fd >= 0 &&
            (!oldest || c->waiting_since_ms <= oldest->waiting_since_ms))
            oldest = c;
    }
    bool ok = held < SERVE_PER_CLIENT_LIMIT;
    if (ok && total >= SERVE_MAX_CONNECTIONS) {
        ok = oldest != NULL;
        if (ok)
            conn_evict(oldest);
    }
    pthread_mutex_unlock(&conns_lock);
    return ok ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_rec *r = calloc(1, sizeof *r);
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ca = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        *socket_context = r;
        if (!r)
            return;
        r->fd = fd ? fd->connect_fd : -1;
        if (ca && ca->client_addr)
            client_of(ca->client_addr, r->client);
        r->waiting_since_ms = now_ms();
        r->deadline_ms = r->waiting_since_ms + SERVE_REQUEST_S * 1000;
        pthread_mutex_lock(&conns_lock);
        r->next = conns;
        conns = r;
        pthread_mutex_unlock(&conns_lock);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_rec *r = *socket_context;
        if (!r)
            return;
        pthread_mutex_lock(&conns_lock);
        for (conn_rec **p = &conns; *p; p = &(*p)->next)
            if (*p == r) {
                *p = r->next;
                break;
            }
        pthread_mutex_unlock(&conns_lock);
        free(r);
        *socket_context = NULL;
    }
}

/* c's request arrived (answering) or was answered (waiting for the next one): its deadline,
 * SERVE_ANSWER_S or SERVE_REQUEST_S from now. */
static void conn_state(struct MHD_Connection *c, bool answering)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_rec *r = i ? i->socket_context : NULL;
    if (!r)
        return;
    int64_t now = now_ms();
    pthread_mutex_lock(&conns_lock);
    r->answering = answering;
    if (!answering)
        r->waiting_since_ms = now;
    if (!r->evicted)
        r->deadline_ms = now + (int64_t)(answering ? SERVE_ANSWER_S : SERVE_REQUEST_S) * 1000;
    pthread_mutex_unlock(&conns_lock);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)state;
    (void)toe;
    conn_state(c, false);
}

/* Shut down every connection past its deadline; libmicrohttpd then sees it closed and cleans
 * it up (and notifies CLOSED, which takes it off conns). */
static void conns_sweep(void)
{
    int64_t now = now_ms();
    pthread_mutex_lock(&conns_lock);
    for (conn_rec *c = conns; c; c = c->next)
        if (c->fd >= 0 && !c->evicted && now > c->deadline_ms)
            conn_evict(c);
    pthread_mutex_unlock(&conns_lock);
}

/* The path exactly as sent: no percent-decoding, so "/%6detrics" or "/metrics%00x" are not
 * "/metrics". */
static size_t keep_escapes(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    return strlen(s);
}

static void on_signal(int sig)
{
    (void)sig;
    serve_stop = 1;
}

/* A request's method or path, safe to print: control and non-ASCII bytes as '?', cut short. */
static void printable(const char *in, char *out, size_t len)
{
    size_t k = 0;
    for (; in && *in && k + 4 < len; in++)
        out[k++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    if (in && *in)
        out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = '\0';
}

static void log_refusal(struct MHD_Connection *c, unsigned status, const char *method,
                        const char *url)
{
    char m[24], u[128], who[INET6_ADDRSTRLEN] = "?";
    printable(method, m, sizeof m);
    printable(url, u, sizeof u);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ci && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, who,
                      sizeof who);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, who,
                      sizeof who);
    }
    fprintf(stderr, "tessera-stat: %u for %s %s from %s\n", status, m, u, who);
}

static mhd_result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body,
                        size_t len, bool allow_get)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (allow_get)
        MHD_add_response_header(r, "Allow", "GET");
    mhd_result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static mhd_result reply_text(struct MHD_Connection *c, unsigned status, const char *text,
                             bool allow_get)
{
    char *body = strdup(text);
    if (!body)
        return MHD_NO;
    return reply(c, status, "text/plain; charset=utf-8", body, strlen(body), allow_get);
}

static mhd_result on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload,
                             size_t *upload_size, void **state)
{
    (void)cls;
    (void)version;
    (void)upload;
    if (*state == NULL) {
        /* First call: headers only. A body (any method but GET has none here) is not read. */
        static int marker;
        *state = &marker;
        conn_state(c, true);
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0; /* discard a body; the method check below answers */
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
        log_refusal(c, MHD_HTTP_METHOD_NOT_ALLOWED, method, url);
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics is served\n", true);
    }
    if (strcmp(url, "/metrics") != 0) {
        log_refusal(c, MHD_HTTP_NOT_FOUND, method, url);
        return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: only GET /metrics is served\n",
                          false);
    }
    char *body = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&body, &len);
    views vs;
    if (!f || ts_stat_load_all(serve_dir, &vs) != 0) {
        if (f)
            fclose(f);
        free(body);
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot read the stats pages\n",
                          false);
    }
    ts_render_prometheus_labels(f, vs.v, vs.n, &serve_labels);
    ts_stat_free_all(&vs);
    if (fclose(f) != 0) {
        free(body);
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", false);
    }
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len, false);
}

/* ADDR:PORT, [V6ADDR]:PORT or :PORT (loopback). 0, or -1 after a message. */
static int parse_listen(const char *s, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    char host[64] = "";
    const char *port_s;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof host)
            goto bad;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        port_s = end + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof host)
            goto bad;
        memcpy(host, s, (size_t)(colon - s));
        port_s = colon + 1;
    }
    char *end;
    long port = strtol(port_s, &end, 10);
    if (end == port_s || *end || port < 1 || port > 65535)
        goto bad;
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (!host[0] || strcmp(host, "localhost") == 0) {
        v4->sin_family = AF_INET;
        v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
    } else {
        goto bad;
    }
    return 0;
bad:
    fprintf(stderr, "tessera-stat: --serve wants ADDR:PORT (e.g. 127.0.0.1:%d, [::1]:%d or :%d "
                    "for loopback), not '%s'\n", SERVE_DEFAULT_PORT, SERVE_DEFAULT_PORT,
            SERVE_DEFAULT_PORT, s);
    return -1;
}

/* Is ss a loopback address (only local users can connect)? */
static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ((const unsigned char *)&((const struct sockaddr_in *)ss)->sin_addr)[0] == 127;
    return ss->ss_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

int ts_stat_serve(const char *dir, const char *listen, const char *labels)
{
    struct sockaddr_storage ss;
    if (parse_listen(listen, &ss) != 0)
        return 2;
    serve_dir = dir;
    /* Beyond loopback, by default, no command lines (arguments can hold secrets) and no
     * configuration (paths): the network sees pids, devices and numbers. */
    serve_labels = (ts_prom_labels){true, true, true};
    if (!labels && !is_loopback(&ss))
        labels = "version";
    char err[160];
    if (labels && ts_prom_labels_parse(labels, &serve_labels, err, sizeof err) != 0) {
        fprintf(stderr, "tessera-stat: %s\n", err);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, on_accept, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)SERVE_HARD_CONNECTIONS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)SERVE_PER_CLIENT_LIMIT,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVE_CONN_MEMORY,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_UNESCAPE_CALLBACK, keep_escapes, NULL, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tessera-stat: cannot serve on %s (address in use, or not this "
                        "machine's?)\n", listen);
        return 1;
    }
    fprintf(stderr, "tessera-stat: serving http://%s/metrics for the pages in %s (labels: pid%s%s%s)\n",
            listen, dir, serve_labels.command ? ", command" : "",
            serve_labels.config ? ", config" : "", serve_labels.version ? ", version" : "");
    while (!serve_stop) {
        struct timespec tick = {0, 250000000}; /* a signal ends it early */
        nanosleep(&tick, NULL);
        conns_sweep();
    }
    MHD_stop_daemon(d);
    return 0;
}
