/*
 * Graph memory of a multi-stream capture, against PyTorch on the same
 * pattern (bench/multistream_memory_torch.py, in the same run under
 * scripts/gpu-check.sh). One capture a case, into a pool of its own: the
 * origin stream O forks S-1 side streams (S = 1, 2, 3, 4; S = 1 is the
 * single-stream reference), then N allocations in all are made, the i-th
 * on branch i % S (O is branch 0), in that order:
 * - its size comes from ms_sizes (below): 4 KiB to 4 MiB, a uniformly drawn
 *   octave and a uniform size within it, from splitmix64 with a fixed seed,
 *   the same generator as the Python twin's;
 * - the branch fills it (a memset on its stream), then frees its own
 *   allocation from WINDOW allocations earlier, so that WINDOW stay live
 *   after each step (WINDOW + 1 for a moment);
 * at the end every branch frees what it still holds and the side streams
 * join back to O. Reports the pool's graph_reserved_bytes after the
 * capture ended, against the sum of every branch's peak of live bytes (the
 * least memory that serves branches running at the same time), and the
 * total allocated; the graph is then launched once. Besides the table it
 * prints "csv,msmem,..." lines for scripts/bench_report.py. Any failed call
 * ends the run with its status and reason (exit status 1).
 * Usage: multistream_memory_bench [allocs ...]   (default: 1000 10000)
 */
#include <stdint.h>
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"

enum { MAX_STREAMS = 4, WINDOW = 4, MS_SEED = 42 };

/* splitmix64; bench/multistream_memory_torch.py has the same. */
static uint64_t ms_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A size from 4 KiB to 4 MiB - 1: an octave [4 KiB << k, 4 KiB << (k+1))
 * for k uniform in 0..9, and a uniform size within it (integers only, so
 * that C and Python draw the same). */
static size_t ms_size(uint64_t *state) {
    uint64_t r = ms_next(state);
    uint64_t span = (uint64_t)4096 << (r % 10);
    return (size_t)(span + (r >> 4) % span);
}

typedef struct ms_case {
    int streams, allocs;
    uint64_t reserved, peak_live, total;
} ms_case;

/* A branch's live buffers, oldest first. */
typedef struct branch {
    void *ptr[WINDOW + 1];
    size_t bytes[WINDOW + 1];
    int head, count;
    uint64_t live, peak;
} branch;

static void fail(const char *what, cpool_status st, const ms_case *c) {
    fprintf(stderr, "multistream_memory_bench: %d streams, %d allocs: %s failed: %s: %s\n", c->streams, c->allocs,
            what, cpool_status_string(st), cpool_last_error());
    exit(1);
}

/* A failed call under capture: the reason is kept, the capture ended and
 * discarded, then the run fails. */
static void fail_in_capture(const char *what, cpool_status st, const ms_case *c, cpool_stream *origin) {
    char reason[512];
    snprintf(reason, sizeof reason, "%s", cpool_last_error());
    cpool_graph *g = NULL;
    (void)cpool_capture_end(origin, &g);
    cpool_graph_release(g);
    fprintf(stderr, "multistream_memory_bench: %d streams, %d allocs: %s failed under capture: %s: %s\n", c->streams,
            c->allocs, what, cpool_status_string(st), reason);
    if (st == CPOOL_ERR_UNSUPPORTED)
        fprintf(stderr, "multistream_memory_bench: this build does not support events in a capture (multi-stream "
                        "capture)\n");
    exit(1);
}

#define CHECK(call)                                                                                               \
    do {                                                                                                          \
        cpool_status st_ = (call);                                                                                \
        if (st_ != CPOOL_OK) fail(#call, st_, c);                                                                 \
    } while (0)
#define CHECK_CAPTURE(call)                                                                                       \
    do {                                                                                                          \
        cpool_status st_ = (call);                                                                                \
        if (st_ != CPOOL_OK) fail_in_capture(#call, st_, c, s[0]);                                                \
    } while (0)

static cpool_status free_oldest(cpool_pool *pool, branch *br, cpool_stream *s) {
    cpool_status st = cpool_free(pool, br->ptr[br->head], s);
    br->live -= br->bytes[br->head];
    br->head = (br->head + 1) % (WINDOW + 1);
    br->count--;
    return st;
}

static void run_case(cpool_device *dev, cpool_stream *const *s, cpool_event *fork, cpool_event *const *join,
                     ms_case *c) {
    cpool_pool *pool;
    CHECK(cpool_pool_create(dev, NULL, &pool));
    branch br[MAX_STREAMS] = {0};
    uint64_t state = MS_SEED;
    c->total = 0;

    CHECK(cpool_capture_begin(s[0], pool, CPOOL_CAPTURE_GLOBAL));
    if (c->streams > 1) CHECK_CAPTURE(cpool_event_record(fork, s[0]));
    for (int b = 1; b < c->streams; b++) CHECK_CAPTURE(cpool_stream_wait_event(s[b], fork));
    for (int i = 0; i < c->allocs; i++) {
        int b = i % c->streams;
        size_t bytes = ms_size(&state);
        void *p;
        CHECK_CAPTURE(cpool_alloc(pool, bytes, s[b], &p));
        CHECK_CAPTURE(cpool_memset_async(s[b], p, 1 + i % 255, bytes));
        int slot = (br[b].head + br[b].count) % (WINDOW + 1);
        br[b].ptr[slot] = p;
        br[b].bytes[slot] = bytes;
        br[b].count++;
        br[b].live += bytes;
        if (br[b].live > br[b].peak) br[b].peak = br[b].live;
        c->total += bytes;
        if (br[b].count > WINDOW) CHECK_CAPTURE(free_oldest(pool, &br[b], s[b]));
    }
    for (int b = 0; b < c->streams; b++)
        while (br[b].count > 0) CHECK_CAPTURE(free_oldest(pool, &br[b], s[b]));
    for (int b = 1; b < c->streams; b++) {
        CHECK_CAPTURE(cpool_event_record(join[b - 1], s[b]));
        CHECK_CAPTURE(cpool_stream_wait_event(s[0], join[b - 1]));
    }
    cpool_graph *g;
    CHECK(cpool_capture_end(s[0], &g));

    cpool_pool_stats stats = {.struct_size = sizeof stats};
    CHECK(cpool_pool_get_stats(pool, &stats));
    c->reserved = stats.graph_reserved_bytes;
    c->peak_live = 0;
    for (int b = 0; b < c->streams; b++) c->peak_live += br[b].peak;

    CHECK(cpool_graph_launch(g, s[0]));
    CHECK(cpool_stream_synchronize(s[0]));
    cpool_graph_release(g);
    cpool_pool_release(pool);
}

int main(int argc, char **argv) {
    int counts[8] = {1000, 10000}, ncounts = 2;
    if (argc > 1) {
        ncounts = 0;
        for (int i = 1; i < argc && ncounts < 8; i++) {
            counts[ncounts] = atoi(argv[i]);
            if (counts[ncounts] < 1) {
                fprintf(stderr, "usage: multistream_memory_bench [allocs ...]\n");
                return 2;
            }
            ncounts++;
        }
    }
    cpool_device *dev;
    cpool_stream *s[MAX_STREAMS];
    bench_open(&dev, &s[0], NULL);
    cpool_event *fork, *join[MAX_STREAMS - 1];
    BENCH_CHECK(cpool_event_create(dev, &fork));
    for (int b = 1; b < MAX_STREAMS; b++) {
        BENCH_CHECK(cpool_stream_create(dev, &s[b]));
        BENCH_CHECK(cpool_event_create(dev, &join[b - 1]));
    }
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    printf("multistream_memory_bench: backend %s; one capture a case: O forks streams-1 side streams, allocs "
           "allocations in all, round-robin over the branches, 4 KiB to 4 MiB (log-uniform octaves, splitmix64 "
           "seed %d), each filled on its stream; a branch frees its own buffer from %d allocations earlier; "
           "reserved: the pool's graph_reserved_bytes after the capture; peak live: the sum of the branches' "
           "peaks\n",
           backend, MS_SEED, WINDOW);
    printf("%7s %7s | %10s %14s %12s %14s\n", "streams", "allocs", "total MiB", "peak live MiB", "ours MiB",
           "ours/peak live");
    fflush(stdout);
    for (int k = 0; k < ncounts; k++)
        for (int streams = 1; streams <= MAX_STREAMS; streams++) {
            ms_case c = {.streams = streams, .allocs = counts[k]};
            run_case(dev, s, fork, join, &c);
            double mib = 1 << 20;
            printf("%7d %7d | %10.1f %14.1f %12.1f %13.3fx\n", c.streams, c.allocs, (double)c.total / mib,
                   (double)c.peak_live / mib, (double)c.reserved / mib, (double)c.reserved / (double)c.peak_live);
            printf("csv,msmem,capturepool,%s,%d,%d,%llu,%llu,%llu\n", backend, c.streams, c.allocs,
                   (unsigned long long)c.reserved, (unsigned long long)c.peak_live, (unsigned long long)c.total);
            fflush(stdout);
        }
    cpool_event_destroy(fork);
    for (int b = 1; b < MAX_STREAMS; b++) {
        cpool_event_destroy(join[b - 1]);
        cpool_stream_destroy(s[b]);
    }
    bench_close(dev, s[0], NULL);
    return 0;
}
