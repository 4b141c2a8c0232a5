/* tessera-stat --serve ADDR:PORT: the Prometheus text of every tessera process on the node,
 * served at GET /metrics by libmicrohttpd (Debian's libmicrohttpd-dev).
 *
 * Bounds: at most SERVE_MAX_CONNECTIONS connections (SERVE_PER_IP_LIMIT per address), each with
 * SERVE_CONN_MEMORY bytes for its request (a longer request line or header is refused by the
 * library with 431/413) and SERVE_TIMEOUT_S seconds of idleness. Anything but GET /metrics is
 * answered (405 for other methods, 404 for other paths) and logged to stderr. Pages are read
 * fresh for every scrape, so processes that start or exit show up at the next one.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/stat/stat.h"

#define SERVE_MAX_CONNECTIONS 32
#define SERVE_PER_IP_LIMIT 8
#define SERVE_CONN_MEMORY (16 * 1024)
#define SERVE_TIMEOUT_S 10
#define SERVE_DEFAULT_PORT 9464

#if MHD_VERSION < 0x00097002
typedef int mhd_result;
#else
typedef enum MHD_Result mhd_result;
#endif

static const char *serve_dir;
static volatile sig_atomic_t serve_stop;

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
    ts_render_prometheus(f, vs.v, vs.n);
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

int ts_stat_serve(const char *dir, const char *listen)
{
    struct sockaddr_storage ss;
    if (parse_listen(listen, &ss) != 0)
        return 2;
    serve_dir = dir;
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
        flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)SERVE_MAX_CONNECTIONS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)SERVE_PER_IP_LIMIT,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVE_CONN_MEMORY,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_TIMEOUT_S, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tessera-stat: cannot serve on %s (address in use, or not this "
                        "machine's?)\n", listen);
        return 1;
    }
    fprintf(stderr, "tessera-stat: serving http://%s/metrics for the pages in %s\n", listen, dir);
    sigset_t none;
    sigemptyset(&none);
    while (!serve_stop)
        sigsuspend(&none);
    MHD_stop_daemon(d);
    return 0;
}
