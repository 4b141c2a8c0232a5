/* Memory lent between the tessera processes of one device, and the cache released from outside.
 *
 * Every caching allocator keeps what its process freed; several processes on one GPU then run out
 * of memory while the others hold it free. Here a request that fails even after the process gave
 * back its own cache (ts_malloc_try) asks the other tessera processes on the same device to give
 * back their free cache, then tries once more.
 *
 * Who is asked. The stats pages (statspage/neighbours.c): a page's slots name their device by its
 * UUID and its header names the process's control channel. Only pages of this process's user are
 * asked (root asks every user's with lending_all_users:True); each channel also admits only its
 * own user and root (shim/control.c), so another user's process could not be asked anyway.
 * The most cached first, one after another, until enough was given or lending_wait_ms passed.
 *
 * What is given: ts_allocator_give (core/lend.c): free blocks only, after every pending free,
 * the device synchronised before pages are unmapped and a plain segment's free waiting for the
 * work queued before it; never an allocated block (a block another process holds over IPC stays
 * allocated) and nothing while a capture is underway in the giving process.
 *
 * Answering. The control channel's thread (started with the stats page, shim/context.c) serves
 * the requests of lend.h: an idle process answers without waiting for its next CUDA call. It
 * costs a process with no neighbour one thread asleep in poll and one descriptor, nothing on the
 * allocation path (one function call) and no driver call but one cuDeviceGetUuid per device.
 *
 * Lock order: the channel's lock (its thread, serving), then lend_lock, then an allocator's mutex.
 * A program thread asks with no lock held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/lend.h"
#include "statspage/neighbours.h"

#define LEND_MAX_ALLOCATORS 256 /* context.c's table is no larger */
#define LEND_NEIGHBOURS 32      /* processes looked at per out-of-memory */

/* The allocators of this process and their devices, as context.c made them (never removed: an
 * allocator outlives its context, empty). */
typedef struct lend_entry {
    ts_allocator *a;
    int device;
    uint8_t uuid[16];
} lend_entry;

static lend_entry table[LEND_MAX_ALLOCATORS];
static unsigned ntable;
static pthread_mutex_t lend_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The child's allocators are none of these (context.c drops its table too): the table is
 * dropped whatever state a thread of the parent left it in. lend_lock is not taken before the
 * fork: the table is taken under context.c's lock, which its own handler takes before. */
static void fork_child(void)
{
    pthread_mutex_init(&lend_lock, NULL);
    ntable = 0;
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

void ts_lend_track(ts_allocator *a, int device, const uint8_t uuid[16])
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&lend_lock);
    unsigned i = 0;
    while (i < ntable && table[i].a != a)
        i++;
    if (i == ntable && ntable < LEND_MAX_ALLOCATORS)
        ntable++;
    if (i < ntable) {
        table[i] = (lend_entry){.a = a, .device = device};
        memcpy(table[i].uuid, uuid, sizeof table[i].uuid);
    }
    pthread_mutex_unlock(&lend_lock);
}

/* The UUID of a's device; false when a is not tracked (then nobody can be asked for it). */
static bool uuid_of(const ts_allocator *a, uint8_t uuid[16])
{
    static const uint8_t unknown[16];
    bool found = false;
    pthread_mutex_lock(&lend_lock);
    for (unsigned i = 0; i < ntable && !found; i++)
        if (table[i].a == a) {
            memcpy(uuid, table[i].uuid, 16);
            found = memcmp(uuid, unknown, 16) != 0;
        }
    pthread_mutex_unlock(&lend_lock);
    return found;
}

/* --- the server: requests of lend.h ----------------------------------------------------------- */

static void answer_device(ts_lend_answer *ans, const lend_entry *e, size_t given,
                          const ts_holdings *h)
{
    if (ans->ndevices == TS_LEND_DEVICES)
        return;
    ans->dev[ans->ndevices++] = (ts_lend_device){
        .device = e->device, .given = given, .reserved = h->reserved, .allocated = h->allocated};
}

/* The configuration in force, handed in by ts_lend_serve before the channel's thread starts
 * (which reads it only): whether this process gives when asked. */
static const ts_config *lend_cfg;

/* Another process of the device q->uuid is out of memory: give what is free, allocator after
 * allocator, until q->bytes went. */
static void serve_ask(const ts_lend_request *q, ts_lend_answer *ans)
{
    if (!lend_cfg || !lend_cfg->lending) {
        ans->h.status = TS_LEND_OFF;
        return;
    }
    if (ts_capture_underway()) {
        ans->h.status = TS_LEND_CAPTURE; /* nothing is released during a capture */
        return;
    }
    /* a request read after its asker gave up (this process was stopped, or busy) would free
     * memory for nobody: it is answered, and counted as a give of nothing */
    bool late = q->deadline_ns && now_ns() >= q->deadline_ns;
    if (late)
        ans->h.status = TS_LEND_LATE;
    size_t given = 0;
    pthread_mutex_lock(&lend_lock);
    for (unsigned i = 0; i < ntable; i++) {
        if (memcmp(table[i].uuid, q->uuid, sizeof q->uuid) != 0)
            continue;
        ts_holdings h;
        size_t want = late ? 0 : q->bytes - given;
        size_t g = given < q->bytes ? ts_allocator_give(table[i].a, want, &h) : 0;
        if (given >= q->bytes)
            ts_allocator_holdings(table[i].a, &h);
        given += g;
        answer_device(ans, &table[i], g, &h);
    }
    pthread_mutex_unlock(&lend_lock);
}

/* tessera-stat release: every allocator keeps at most q->bytes cached. */
static void serve_release(const ts_lend_request *q, ts_lend_answer *ans)
{
    pthread_mutex_lock(&lend_lock);
    for (unsigned i = 0; i < ntable; i++) {
        ts_holdings h;
        size_t g = ts_allocator_release_to(table[i].a, q->bytes, &h);
        answer_device(ans, &table[i], g, &h);
    }
    pthread_mutex_unlock(&lend_lock);
}

static bool lend_request_served(void **data, const ts_ctl_peer_info *who, const void *msg,
                                size_t len, ts_ctl_answer *out)
{
    (void)data; /* a peer holds nothing here: it may be closed when idle */
    (void)who;  /* the channel admits only this process's user and root */
    ts_lend_request q;
    if (len != sizeof q)
        return false; /* every request has one size: anything else is forged or cut */
    memcpy(&q, msg, sizeof q);
    ts_lend_answer ans;
    memset(&ans, 0, sizeof ans);
    memcpy(&ans.h, out->buf, sizeof ans.h);
    if (q.h.type == TS_LEND_ASK)
        serve_ask(&q, &ans);
    else if (q.h.type == TS_LEND_RELEASE)
        serve_release(&q, &ans);
    else
        return false;
    memcpy(out->buf, &ans, sizeof ans);
    out->len = sizeof ans;
    return true;
}

static void lend_peer_gone(void **data)
{
    *data = NULL;
}

static const ts_ctl_service lend_service = {
    .type_first = TS_LEND_ASK,
    .type_last = TS_LEND_TYPE_LAST,
    .request = lend_request_served,
    .gone = lend_peer_gone,
};

int ts_lend_serve(const ts_config *cfg, uint64_t *secret)
{
    lend_cfg = cfg;
    ts_ctl_address addr;
    int rc = ts_ctl_serve(&lend_service, &addr);
    if (rc == 0)
        *secret = addr.secret;
    return rc;
}

/* --- the client: asking the neighbours -------------------------------------------------------- */

/* What one neighbour did, for the line an out-of-memory says. */
typedef enum ask_outcome {
    ASK_GAVE,       /* answered: gave `given` (maybe 0) */
    ASK_OFF,        /* answered: lending:False there */
    ASK_CAPTURE,    /* answered: a capture is underway there */
    ASK_NO_CHANNEL, /* its page names no channel */
    ASK_OTHER_USER, /* another user's: not asked */
    ASK_NOTHING,    /* holds nothing free: not asked */
    ASK_LATE,       /* not asked or not answered within lending_wait_ms */
    ASK_REFUSED,    /* its channel refused this process */
    ASK_FAILED,     /* gone, or an answer not of this protocol */
    ASK_OFF_HERE    /* lending:False in this process: nobody asked */
} ask_outcome;

typedef struct ask_result {
    ts_neighbour who;
    ask_outcome outcome;
    uint64_t given;
} ask_result;

/* Ask one neighbour for want bytes of the device uuid, within deadline. */
static void ask_one(ask_result *r, const uint8_t uuid[16], size_t want, uint64_t deadline)
{
    uint64_t now = now_ns();
    if (now >= deadline) {
        r->outcome = ASK_LATE;
        return;
    }
    ts_ctl_address addr = {.pid = r->who.pid, .start = r->who.start_ticks,
                           .secret = r->who.secret};
    ts_ctl_client *c = NULL;
    int rc = ts_ctl_connect(&addr, &c);
    if (rc == 0)
        rc = ts_ctl_timeout(c, deadline - now);
    ts_lend_request q = {.h = {.type = TS_LEND_ASK}, .bytes = want, .deadline_ns = deadline};
    memcpy(q.uuid, uuid, sizeof q.uuid);
    ts_lend_answer a;
    unsigned nfds = 0;
    ssize_t n = rc == 0 ? ts_ctl_call(c, &q, sizeof q, &a, sizeof a, NULL, 0, &nfds) : rc;
    if (c)
        ts_ctl_close(c);
    if (n == (ssize_t)sizeof a && a.h.type == TS_LEND_ASK && a.ndevices <= TS_LEND_DEVICES) {
        r->outcome = a.h.status == TS_LEND_OFF       ? ASK_OFF
                     : a.h.status == TS_LEND_CAPTURE ? ASK_CAPTURE
                     : a.h.status == TS_LEND_LATE    ? ASK_LATE
                                                     : ASK_GAVE;
        for (uint32_t i = 0; i < a.ndevices; i++) {
            r->given += a.dev[i].given;
            if (i == 0) { /* what it holds now, for the line (its page may lag) */
                r->who.reserved = 0;
                r->who.allocated = 0;
            }
            r->who.reserved += a.dev[i].reserved;
            r->who.allocated += a.dev[i].allocated;
        }
    } else {
        /* timed out, or past the deadline in a step bounded otherwise (the connect) */
        r->outcome = n == -EACCES                              ? ASK_REFUSED
                     : n == -ETIMEDOUT || now_ns() >= deadline ? ASK_LATE
                                                               : ASK_FAILED;
    }
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* One line: who held what on the device, and what each did when asked (or, with lending:False
 * here, that free memory sat in their caches unasked). At most one a second, as the
 * out-of-memory line it comes with. */
static void say_who_held(int device, const ask_result *r, size_t n, uint32_t wait_ms)
{
    static time_t last;
    time_t now = time(NULL);
    if (__atomic_exchange_n(&last, now, __ATOMIC_RELAXED) == now)
        return;
    const bool off_here = n > 0 && r[0].outcome == ASK_OFF_HERE;
    char line[1000];
    int len = snprintf(line, sizeof line,
                       off_here ? "device %d: lending:False, so the other tessera processes of this "
                                  "user on it were not asked for the memory their caches hold free "
                                  "(TESSERA_ALLOC_CONF=lending:True asks them):"
                                : "device %d: the other tessera processes on it were asked for "
                                  "memory (lending) and did not give enough:",
                       device);
    static const char *const what[] = {
        [ASK_GAVE] = "gave",
        [ASK_OFF] = "has lending:False; gave",
        [ASK_CAPTURE] = "is capturing a CUDA graph; gave",
        [ASK_NO_CHANNEL] = "has no control channel; not asked",
        [ASK_OTHER_USER] = "another user's; not asked",
        [ASK_NOTHING] = "holds nothing free; not asked",
        [ASK_LATE] = "did not answer in time",
        [ASK_REFUSED] = "refused this process",
        [ASK_FAILED] = "could not be asked",
        [ASK_OFF_HERE] = "not asked",
    };
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof line; i++) {
        const ask_result *x = &r[i];
        char given[48] = "";
        if (x->outcome <= ASK_CAPTURE)
            snprintf(given, sizeof given, " %.1f MiB", mib(x->given));
        len += snprintf(line + len, sizeof line - (size_t)len,
                        "%s pid %d (%.24s) holds %.1f MiB reserved, %.1f MiB allocated: %s%s",
                        i ? ";" : "", x->who.pid, x->who.command, mib(x->who.reserved),
                        mib(x->who.allocated), what[x->outcome], given);
    }
    if (len > 0 && (size_t)len < sizeof line && !off_here)
        snprintf(line + len, sizeof line - (size_t)len, " (asked for %u ms at most)", wait_ms);
    ts_log("%s", line);
}

/* lending:False here and out of memory: the neighbours of this user on the device whose caches
 * hold memory free, said (never asked), so that the advice names what would have served. */
static void say_unasked(int device, const uint8_t uuid[16])
{
    uid_t me = geteuid();
    ts_neighbour nb[LEND_NEIGHBOURS];
    size_t n = ts_neighbours_find(NULL, uuid, (int)getpid(), (uint32_t)me, false, nb,
                                  LEND_NEIGHBOURS);
    ask_result r[LEND_NEIGHBOURS];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (nb[i].uid == (uint32_t)me && nb[i].reserved > nb[i].allocated)
            r[k++] = (ask_result){.who = nb[i], .outcome = ASK_OFF_HERE};
    if (k > 0)
        say_who_held(device, r, k, 0);
}

/* Ask the neighbours on the device uuid for need bytes; the bytes they gave back. *asked: at
 * least one was asked. What each did goes to r (*nr of them). */
static size_t ask_neighbours(const ts_config *cfg, const uint8_t uuid[16], size_t need,
                             bool *asked, ask_result *r, size_t *nr)
{
    uid_t me = geteuid();
    bool all_users = cfg->lending_all_users && me == 0;
    ts_neighbour nb[LEND_NEIGHBOURS];
    /* every user's pages are read, to say who held what; only this user's are asked */
    size_t n = ts_neighbours_find(NULL, uuid, (int)getpid(), (uint32_t)me, true, nb,
                                  LEND_NEIGHBOURS);
    uint64_t deadline = now_ns() + (uint64_t)cfg->lending_wait_ms * 1000000ull;
    size_t got = 0;
    *asked = false;
    for (size_t i = 0; i < n; i++) {
        r[i] = (ask_result){.who = nb[i]};
        if (!all_users && nb[i].uid != (uint32_t)me)
            r[i].outcome = ASK_OTHER_USER;
        else if (!nb[i].secret)
            r[i].outcome = ASK_NO_CHANNEL;
        else if (nb[i].reserved <= nb[i].allocated)
            r[i].outcome = ASK_NOTHING;
        else if (got >= need)
            r[i].outcome = ASK_GAVE; /* enough already: not asked, nothing given */
        else {
            *asked = true;
            ask_one(&r[i], uuid, need - got, deadline);
            got += r[i].given;
        }
    }
    *nr = n;
    return got;
}

/* What the device lacked for the request oom describes, in whole 2 MiB pages. */
static size_t bytes_needed(const ts_oom_info *oom)
{
    size_t need = oom->segment_size > oom->device_free ? oom->segment_size - oom->device_free
                                                       : oom->segment_size;
    const size_t page = (size_t)2 << 20;
    return need > SIZE_MAX - page ? need : (need + page - 1) / page * page;
}

static int lend_malloc(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                       ts_oom_info *oom)
{
    const ts_config *cfg = ts_allocator_config(a);
    ts_oom_info info;
    if (!oom)
        oom = &info;
    uint8_t uuid[16];
    if (!cfg->lending) {
        int rc = ts_malloc_ex(a, size, stream, out, oom);
        if (rc == TS_ENOMEM && !oom->limit_reached && uuid_of(a, uuid))
            say_unasked(ts_allocator_device(a), uuid);
        return rc;
    }
    int rc = ts_malloc_try(a, size, stream, out, oom);
    if (rc != TS_EAGAIN || oom->limit_reached || !uuid_of(a, uuid)) {
        if (rc == TS_EAGAIN) { /* the cap refused it, or no neighbour can be found */
            ts_malloc_oom(a, size, stream, oom);
            rc = TS_ENOMEM;
        }
        return rc;
    }
    ask_result r[LEND_NEIGHBOURS];
    size_t nr = 0;
    bool asked = false;
    uint64_t t0 = now_ns();
    size_t got = ask_neighbours(cfg, uuid, bytes_needed(oom), &asked, r, &nr);
    uint64_t waited_us = (now_ns() - t0) / 1000u;
    if (got > 0)
        rc = ts_malloc_try(a, size, stream, out, oom);
    if (asked)
        ts_allocator_note_ask(a, got, waited_us, rc == TS_OK);
    if (rc != TS_EAGAIN)
        return rc;
    ts_malloc_oom(a, size, stream, oom);
    if (nr)
        say_who_held(ts_allocator_device(a), r, nr, cfg->lending_wait_ms);
    return TS_ENOMEM;
}

/* An allocation waits while the process is paused (shim/gate.c): the allocator's pages are away,
 * and what it mapped now would be unknown to the resume. */
int ts_lend_malloc(ts_allocator *a, size_t size, uintptr_t stream, uintptr_t *out,
                   ts_oom_info *oom)
{
    ts_gate_enter();
    int rc = lend_malloc(a, size, stream, out, oom);
    ts_gate_leave();
    return rc;
}

size_t ts_lend_allocators(ts_allocator **out, int *devices, size_t max)
{
    pthread_mutex_lock(&lend_lock);
    size_t n = 0;
    for (unsigned i = 0; i < ntable && n < max; i++, n++) {
        out[n] = table[i].a;
        devices[n] = table[i].device;
    }
    pthread_mutex_unlock(&lend_lock);
    return n;
}
