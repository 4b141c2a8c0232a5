/* Multi-process stress of the sequence locks: several writer processes hammer their pages through
 * ts_stats_sink exactly as the allocator will (counters in place, relaxed stores, sequence word
 * odd/even) and publish segment maps, while reader processes snapshot every slot and check
 * invariants that any torn copy would break:
 *   - every counter word w holds k * (w + 1) for one k (k = num_ops / 130), except the "all" pool
 *     words of stat arrays, which hold small + large;
 *   - the segment map is a pure function of map.ops, and its checksum matches.
 * The writers yield in the middle of their write sections to widen the windows. Then a writer
 * SIGKILLed inside a write section: readers give up with EBUSY in bounded time (never hang), the
 * page reads as stale, and collection removes it.
 *
 * Environment: TS_STRESS_MS (default 1000) to run longer.
 *
 * Nothing here depends on the machine's speed: the writers run until the readers are done, and a
 * reader runs for at least TS_STRESS_MS and then until it has enough snapshots to mean anything
 * (on a loaded machine under sanitizers that takes longer; the cap is a hang guard only).
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "statspage/collect.h"
#include "statspage/writer.h"

#define WRITERS 3
#define READERS 2
#define WORDS ((sizeof(tessera_device_stats) - sizeof(((tessera_device_stats *)0)->reserved_tail)) / 8)
#define NUM_OPS_WORD (offsetof(tessera_device_stats, num_ops) / 8)
#define ARRAY_WORDS (9 * 12) /* 9 stat arrays of 3 pools x 4 values */
#define MIN_SNAPSHOTS 50
#define MIN_MAPS 10
#define HANG_GUARD_S 120.0 /* a reader or writer still running after this has hung */

/* Set by SIGTERM: the parent's word to the writers that the readers are done. */
static volatile sig_atomic_t writer_stop;

static void writer_on_term(int sig)
{
    (void)sig;
    writer_stop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int is_all_word(size_t w)
{
    return w < ARRAY_WORDS && (w % 12) < 4;
}

static int64_t expect_word(size_t w, int64_t k)
{
    if (is_all_word(w))
        return expect_word(w + 4, k) + expect_word(w + 8, k);
    return k * (int64_t)(w + 1);
}

static void write_counters(ts_stats_sink sink, int64_t k, unsigned yield_every, uint64_t iter)
{
    int64_t *words = (int64_t *)(void *)sink.stats;
    tessera_seq_write_begin(sink.seq);
    for (size_t w = 0; w < WORDS; w++) {
        tessera_stat_store(&words[w], expect_word(w, k));
        if (w == WORDS / 2 && yield_every && iter % yield_every == 0)
            sched_yield(); /* a reader copying now must not accept what it copied */
    }
    tessera_seq_write_end(sink.seq);
}

/* The map for a given ops value. */
static uint32_t map_nsegs(uint64_t ops)
{
    return 1 + (uint32_t)(ops % 23);
}
static uint64_t seg_size(uint64_t ops, uint32_t i)
{
    return (uint64_t)(i + 1) * 4096 * (1 + ops % 5);
}
static uint32_t seg_nblocks(uint64_t ops, uint32_t i)
{
    return 1 + (uint32_t)((ops + i) % 6);
}
static uint64_t blk_size(uint64_t ops, uint32_t i, uint32_t b)
{
    uint64_t n = seg_nblocks(ops, i), sz = seg_size(ops, i);
    return b + 1 < n ? sz / n : sz - (n - 1) * (sz / n);
}
static uint32_t blk_state(uint64_t ops, uint32_t i, uint32_t b)
{
    return (uint32_t)((ops + i + b) % 4);
}

static void walk_ops(void *ctx, const ts_walker *w)
{
    uint64_t ops = *(const uint64_t *)ctx;
    for (uint32_t i = 0; i < map_nsegs(ops); i++) {
        ts_segment_info si = {.addr = 0x100000 * (uintptr_t)(i + 1), .size = seg_size(ops, i),
                              .mapped = seg_size(ops, i), .small_pool = (i & 1) != 0,
                              .kind = TS_SEGMENT_PLAIN, .nblocks = seg_nblocks(ops, i)};
        w->segment(w->user, &si);
        for (uint32_t b = 0; b < seg_nblocks(ops, i); b++) {
            ts_block_info bi = {.size = blk_size(ops, i, b), .state = (ts_block_state)blk_state(ops, i, b)};
            w->block(w->user, &si, &bi);
        }
    }
}

static int writer(void)
{
    char err[256];
    ts_statspage *p = NULL;
    if (ts_statspage_create(NULL, "stress", &p, err, sizeof err) != 0) {
        fprintf(stderr, "writer: %s\n", err);
        return 1;
    }
    ts_stats_sink sinks[2];
    int slots[2];
    for (int i = 0; i < 2; i++) {
        slots[i] = ts_statspage_claim(p, i, (uint64_t)(i + 1), &sinks[i]);
        if (slots[i] < 0)
            return 1;
        write_counters(sinks[i], 1, 0, 0);
    }
    int64_t k[2] = {1, 1};
    double end = now_s() + HANG_GUARD_S;
    uint64_t iter = 0;
    while (!writer_stop && now_s() < end) {
        for (int i = 0; i < 2; i++) {
            k[i]++;
            write_counters(sinks[i], k[i], 7, iter);
            if (iter % 5 == 0) {
                uint64_t ops = (uint64_t)expect_word(NUM_OPS_WORD, k[i]);
                ts_statspage_publish_walk(p, slots[i], walk_ops, &ops);
            }
        }
        iter++;
    }
    ts_statspage_close(p, true);
    return 0;
}

struct seen {
    int pid;
    int64_t k[TESSERA_PAGE_MAX_SLOT_COUNT];
};

static int check_snapshot(const tessera_page_slot_head *h, const tessera_page_segment *segs,
                          const tessera_page_block *blocks, int with_map, char *why, size_t len)
{
    const int64_t *words = (const int64_t *)(const void *)&h->stats;
    int64_t ops = words[NUM_OPS_WORD];
    if (ops <= 0 || ops % (int64_t)(NUM_OPS_WORD + 1) != 0) {
        snprintf(why, len, "num_ops %" PRId64 " is not a multiple of %zu", ops, NUM_OPS_WORD + 1);
        return -1;
    }
    int64_t k = ops / (int64_t)(NUM_OPS_WORD + 1);
    for (size_t w = 0; w < WORDS; w++) {
        if (words[w] != expect_word(w, k)) {
            snprintf(why, len, "torn: word %zu is %" PRId64 ", k=%" PRId64 " wants %" PRId64, w,
                     words[w], k, expect_word(w, k));
            return -1;
        }
    }
    if (!with_map || !(h->map.flags & TESSERA_MAP_VALID))
        return 0;
    uint64_t mops = h->map.ops;
    if (mops > (uint64_t)ops) {
        snprintf(why, len, "map from the future: ops %" PRIu64 " > %" PRId64, mops, ops);
        return -1;
    }
    if (h->map.nsegments != map_nsegs(mops)) {
        snprintf(why, len, "map of ops %" PRIu64 " has %" PRIu32 " segments", mops, h->map.nsegments);
        return -1;
    }
    for (uint32_t i = 0; i < h->map.nsegments; i++) {
        if (segs[i].size != seg_size(mops, i) || segs[i].nblocks != seg_nblocks(mops, i)) {
            snprintf(why, len, "torn map: segment %" PRIu32, i);
            return -1;
        }
        for (uint32_t b = 0; b < segs[i].nblocks; b++) {
            const tessera_page_block *bl = &blocks[segs[i].first_block + b];
            if (bl->size != blk_size(mops, i, b) || bl->state != blk_state(mops, i, b)) {
                snprintf(why, len, "torn map: segment %" PRIu32 " block %" PRIu32, i, b);
                return -1;
            }
        }
    }
    return 0;
}

static int reader(double seconds, int id)
{
    struct {
        tessera_page_slot_head head;
        tessera_page_segment segs[TESSERA_PAGE_MAX_SEGMENTS];
        tessera_page_block blocks[TESSERA_PAGE_MAX_BLOCKS];
    } *s = malloc(sizeof *s);
    struct seen seen[16];
    int nseen = 0;
    memset(seen, 0, sizeof seen);
    uint64_t ok = 0, maps = 0, busy = 0, bad = 0, round = 0;
    double start = now_s(), end = start + seconds;
    /* at least `seconds`, then until there is enough to judge by, within the hang guard */
    while (bad == 0 && now_s() < start + HANG_GUARD_S &&
           (now_s() < end || ok < MIN_SNAPSHOTS || maps < MIN_MAPS)) {
        int *pids;
        size_t n;
        if (ts_page_list(NULL, &pids, &n) != 0)
            return 1;
        for (size_t i = 0; i < n; i++) {
            ts_page pg;
            ts_page_init(&pg);
            int st = ts_page_open_pid(&pg, NULL, pids[i]);
            if (st != TS_PAGE_OK) {
                /* a writer that finished removes its page; one starting has no magic yet (or
                 * not even its size) */
                if (st != TS_PAGE_ENOENT && st != TS_PAGE_ENOTREADY &&
                    !(st == TS_PAGE_ETRUNCATED && pg.size == 0)) {
                    fprintf(stderr, "reader %d: pid %d: %s\n", id, pids[i], pg.error);
                    bad++;
                }
                ts_page_close(&pg);
                continue;
            }
            struct seen *sv = NULL;
            for (int j = 0; j < nseen; j++)
                if (seen[j].pid == pids[i])
                    sv = &seen[j];
            if (!sv && nseen < 16) {
                sv = &seen[nseen++];
                sv->pid = pids[i];
            }
            for (uint32_t slot = 0; slot < 2; slot++) {
                int with_map = (round + slot) % 2 == 0;
                st = ts_page_snapshot(&pg, slot, &s->head, with_map ? s->segs : NULL,
                                      with_map ? s->blocks : NULL);
                if (st == TS_PAGE_EBUSY) {
                    busy++;
                    continue;
                }
                if (st == TS_PAGE_EEMPTY && (!sv || sv->k[slot] == 0))
                    continue; /* published, its slots not claimed yet */
                char why[256];
                if (st != TS_PAGE_OK) {
                    if (st == TS_PAGE_ETRUNCATED || st == TS_PAGE_EIO) /* removed while reading */
                        continue;
                    fprintf(stderr, "reader %d: pid %d slot %" PRIu32 ": %s: %s\n", id, pids[i],
                            slot, ts_page_status_name(st), pg.error);
                    bad++;
                    continue;
                }
                if (check_snapshot(&s->head, s->segs, s->blocks, with_map, why, sizeof why) != 0) {
                    fprintf(stderr, "reader %d: pid %d slot %" PRIu32 ": %s\n", id, pids[i], slot, why);
                    bad++;
                    continue;
                }
                int64_t k = s->head.stats.num_ops / (int64_t)(NUM_OPS_WORD + 1);
                if (sv && k < sv->k[slot]) {
                    fprintf(stderr, "reader %d: pid %d slot %" PRIu32 ": went back from k=%" PRId64
                                    " to %" PRId64 "\n", id, pids[i], slot, sv->k[slot], k);
                    bad++;
                }
                if (sv)
                    sv->k[slot] = k;
                ok++;
                maps += with_map && (s->head.map.flags & TESSERA_MAP_VALID);
            }
            ts_page_close(&pg);
        }
        free(pids);
        round++;
    }
    free(s);
    printf("reader %d: %" PRIu64 " consistent snapshots (%" PRIu64 " with maps), %" PRIu64
           " busy, %" PRIu64 " inconsistent\n", id, ok, maps, busy, bad);
    fflush(stdout);
    if (bad)
        return 1;
    if (ok < MIN_SNAPSHOTS || maps < MIN_MAPS) {
        fprintf(stderr, "reader %d: too few snapshots to mean anything\n", id);
        return 1;
    }
    return 0;
}

/* A writer killed with its sequence lock held. */
static int killed_writer_case(void)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pid_t c = fork();
    if (c == 0) {
        char err[256];
        ts_statspage *p = NULL;
        ts_stats_sink sink;
        if (ts_statspage_create(NULL, "doomed", &p, err, sizeof err) != 0 ||
            ts_statspage_claim(p, 0, 9, &sink) != 0)
            _exit(1);
        write_counters(sink, 5, 0, 0);
        tessera_seq_write_begin(sink.seq); /* and never leave it */
        tessera_stat_store(&sink.stats->num_ops, -1);
        if (write(pfd[1], "r", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(pfd[1]);
    char ch;
    if (read(pfd[0], &ch, 1) != 1)
        return 1;
    close(pfd[0]);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);

    ts_page pg;
    ts_page_init(&pg);
    if (ts_page_open_pid(&pg, NULL, (int)c) != TS_PAGE_OK) {
        fprintf(stderr, "killed writer: %s\n", pg.error);
        return 1;
    }
    char why[256];
    int owner = ts_page_owner_state(&pg.hdr, why, sizeof why);
    tessera_page_slot_head head;
    double t0 = now_s();
    int st = ts_page_snapshot(&pg, 0, &head, NULL, NULL);
    double took = now_s() - t0;
    ts_page_close(&pg);
    printf("killed writer: owner %s (%s); snapshot %s after %.3f s\n", ts_owner_state_name(owner),
           why, ts_page_status_name(st), took);
    /* a hang guard, not a speed goal: the point is that the reader gives up at all */
    if (owner != TS_OWNER_DEAD || st != TS_PAGE_EBUSY || took > HANG_GUARD_S / 4)
        return 1;
    int removed = ts_page_gc(NULL, NULL, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s/tessera.%d", ts_statspage_dir(), (int)c);
    if (removed != 1 || access(path, F_OK) == 0) {
        fprintf(stderr, "killed writer: collection removed %d pages\n", removed);
        return 1;
    }
    return 0;
}

int main(void)
{
    const char *ms = getenv("TS_STRESS_MS");
    double seconds = (ms ? atof(ms) : 1000.0) / 1000.0;
    char dir[] = "/tmp/tessera-stress-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    setenv(TESSERA_PAGE_DIR_ENV, dir, 1);

    pid_t w[WRITERS], r[READERS];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = writer_on_term;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < WRITERS; i++)
        if ((w[i] = fork()) == 0) {
            sigaction(SIGTERM, &sa, NULL);
            _exit(writer());
        }
    /* let the pages appear */
    for (int tries = 0; tries < 200; tries++) {
        int *pids;
        size_t n = 0;
        if (ts_page_list(NULL, &pids, &n) == 0)
            free(pids);
        if (n == WRITERS)
            break;
        usleep(5000);
    }
    for (int i = 0; i < READERS; i++)
        if ((r[i] = fork()) == 0)
            _exit(reader(seconds, i));
    int fail = 0;
    for (int i = 0; i < READERS; i++) {
        int st;
        waitpid(r[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "reader %d failed\n", i);
            fail = 1;
        }
    }
    for (int i = 0; i < WRITERS; i++)
        kill(w[i], SIGTERM);
    for (int i = 0; i < WRITERS; i++) {
        int st;
        waitpid(w[i], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "writer %d failed\n", i);
            fail = 1;
        }
    }
    int *pids;
    size_t n = 0;
    if (ts_page_list(NULL, &pids, &n) == 0)
        free(pids);
    if (n != 0) {
        fprintf(stderr, "%zu pages left behind by writers that closed them\n", n);
        fail = 1;
    }
    if (killed_writer_case() != 0) {
        fprintf(stderr, "killed writer case failed\n");
        fail = 1;
    }
    /* leave nothing behind, even after a failure */
    if (ts_page_list(NULL, &pids, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            char path[512];
            snprintf(path, sizeof path, "%s/tessera.%d", dir, pids[i]);
            unlink(path);
        }
        free(pids);
    }
    rmdir(dir);
    return fail;
}
