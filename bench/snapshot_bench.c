/*
 * What looking at a pool costs, measured side by side in one run:
 * - cpool_pool_get_stats, ns per call (the cheap tier);
 * - cpool_graph_get_stats, ns per call, on a graph whose capture allocated
 *   and freed a scratch buffer and left an output;
 * - cpool_pool_write_snapshot of a pool with N live blocks (100000 by
 *   default), N/8 freed ones between them and a few graphs with scratch and
 *   outputs, written to a file: ns per block of the snapshot, total ms, and
 *   the file's MiB;
 * - the cached alloc+free pair (as in alloc_bench) on that pool, alone and
 *   while another thread writes snapshots of it in a loop: a snapshot is
 *   built under the pool's lock, so allocations that need the lock wait for
 *   it. Blocks of up to 1 MiB are served from the front cache without the
 *   lock; 16 MiB ones take it.
 * Times are medians of repeats of the mean per call. The pair is timed in
 * windows of 100 ms that alternate between alone and with snapshots, and
 * the ratio is the median of the ratios of side-by-side windows; the
 * longest single pair of a window of each kind is shown too (with
 * snapshots, about the longest a snapshot held the lock).
 * The targets are printed next to the figures: get_stats well under 1 us,
 * a snapshot at most 200 ns per block. None is enforced: like every
 * benchmark here it exits 0 whatever the times. Besides the tables it
 * prints "csv,snapshot,..." and "csv,snapshotpair,..." lines for
 * scripts/bench_report.py. The snapshot file is left in place.
 * Usage: snapshot_bench [--smoke] [live-blocks] [path]
 * --smoke: 100 stats calls a repeat and pair windows of 1 ms.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench_util.h"
#include "capturepool.h"

enum { REPEATS = 7, GRAPHS = 4, PAIR_CHUNK = 256 };
static int stat_calls = 100000;

static const double GET_STATS_TARGET_NS = 1000.0; /* well under it */
static const double SNAPSHOT_TARGET_NS_PER_BLOCK = 200.0;
static double pair_window_ns = 100e6; /* pairs are timed in windows of 100 ms */

static double time_pool_stats(const cpool_pool *pool) {
    double samples[REPEATS];
    cpool_pool_stats st = {.struct_size = sizeof st};
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < stat_calls; i++) cpool_pool_get_stats(pool, &st);
        samples[r] = (bench_now_ns() - t0) / stat_calls;
    }
    return bench_median(samples, REPEATS);
}

static double time_graph_stats(const cpool_graph *g) {
    double samples[REPEATS];
    cpool_graph_stats st = {.struct_size = sizeof st};
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < stat_calls; i++) cpool_graph_get_stats(g, &st);
        samples[r] = (bench_now_ns() - t0) / stat_calls;
    }
    return bench_median(samples, REPEATS);
}

/* One graph: a scratch buffer of `scratch` bytes allocated, written and
 * freed inside the capture, and an output of `output` bytes left allocated
 * (*out_ptr, for the caller to free). */
static cpool_graph *capture_graph(cpool_pool *pool, cpool_stream *s, size_t scratch, size_t output,
                                  void **out_ptr) {
    void *tmp;
    cpool_graph *g;
    BENCH_CHECK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    BENCH_CHECK(cpool_alloc(pool, scratch, s, &tmp));
    BENCH_CHECK(cpool_memset_async(s, tmp, 0, scratch));
    BENCH_CHECK(cpool_alloc_output(pool, output, s, out_ptr));
    BENCH_CHECK(cpool_memcpy_async(s, *out_ptr, tmp, output));
    BENCH_CHECK(cpool_free(pool, tmp, s));
    BENCH_CHECK(cpool_capture_end(s, &g));
    BENCH_CHECK(cpool_graph_launch(g, s));
    return g;
}

/* Blocks in a snapshot file: one "offset" key each. */
static size_t count_blocks(const char *path, double *mib_out) {
    struct stat sb;
    FILE *f = fopen(path, "rb");
    if (!f || stat(path, &sb) != 0) {
        fprintf(stderr, "snapshot_bench: cannot read %s back\n", path);
        exit(1);
    }
    *mib_out = (double)sb.st_size / (1 << 20);
    static const char key[] = "\"offset\"";
    size_t n = 0, matched = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        matched = c == key[matched] ? matched + 1 : (c == key[0] ? 1 : 0);
        if (matched == sizeof key - 1) {
            n++;
            matched = 0;
        }
    }
    fclose(f);
    return n;
}

static double time_snapshot(const cpool_pool *pool, const char *path) {
    double samples[REPEATS];
    BENCH_CHECK(cpool_pool_write_snapshot(pool, path)); /* warm: the file exists */
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        BENCH_CHECK(cpool_pool_write_snapshot(pool, path));
        samples[r] = bench_now_ns() - t0;
    }
    return bench_median(samples, REPEATS);
}

/* The other thread: snapshots of the pool, one after another, until told
 * to stop. */
typedef struct snapshot_loop {
    const cpool_pool *pool;
    const char *path;
    pthread_t thread;
    atomic_bool stop;
    atomic_long written;
    atomic_int failed; /* a cpool_status */
} snapshot_loop;

static void *snapshot_thread(void *arg) {
    snapshot_loop *l = arg;
    while (!atomic_load(&l->stop)) {
        cpool_status st = cpool_pool_write_snapshot(l->pool, l->path);
        if (st != CPOOL_OK) {
            atomic_store(&l->failed, (int)st);
            fprintf(stderr, "snapshot_bench: snapshot on the other thread failed: %s: %s\n", cpool_status_string(st),
                    cpool_last_error());
            break;
        }
        atomic_fetch_add(&l->written, 1);
    }
    return NULL;
}

static void snapshots_start(snapshot_loop *l) {
    atomic_store(&l->stop, false);
    if (pthread_create(&l->thread, NULL, snapshot_thread, l) != 0) {
        fprintf(stderr, "snapshot_bench: cannot start a thread\n");
        exit(1);
    }
}

static void snapshots_stop(snapshot_loop *l) {
    atomic_store(&l->stop, true);
    pthread_join(l->thread, NULL);
    if (atomic_load(&l->failed) != CPOOL_OK) exit(1);
}

/* The mean of cached alloc+free pairs over a window of pair_window_ns. */
static double pair_window(cpool_pool *pool, cpool_stream *s, size_t size) {
    void *p;
    long pairs = 0;
    double t0 = bench_now_ns(), elapsed;
    do {
        for (int i = 0; i < PAIR_CHUNK; i++) {
            cpool_alloc(pool, size, s, &p);
            cpool_free(pool, p, s);
        }
        pairs += PAIR_CHUNK;
        elapsed = bench_now_ns() - t0;
    } while (elapsed < pair_window_ns);
    return elapsed / (double)pairs;
}

/* The longest single pair over a window, us (each pair timed on its own). */
static double pair_longest_us(cpool_pool *pool, cpool_stream *s, size_t size) {
    void *p;
    double longest = 0, start = bench_now_ns();
    while (bench_now_ns() - start < pair_window_ns) {
        double t0 = bench_now_ns();
        cpool_alloc(pool, size, s, &p);
        cpool_free(pool, p, s);
        double t = bench_now_ns() - t0;
        if (t > longest) longest = t;
    }
    return longest / 1e3;
}

typedef struct pair_figures {
    double alone_ns, during_ns; /* medians over the windows of the mean pair */
    double ratio;               /* median of the ratios of side-by-side windows */
    double longest_alone_us, longest_during_us;
    long snapshots; /* written by the other thread in the during windows */
} pair_figures;

/* Windows alone and with snapshots running alternate, so that both sides
 * see the pool and the machine in the same state. */
static pair_figures time_pairs(cpool_pool *pool, cpool_stream *s, size_t size, snapshot_loop *loop) {
    double alone[REPEATS], during[REPEATS], ratio[REPEATS];
    void *p;
    BENCH_CHECK(cpool_alloc(pool, size, s, &p)); /* warm: the block is cached */
    BENCH_CHECK(cpool_free(pool, p, s));
    atomic_store(&loop->written, 0);
    for (int r = 0; r < REPEATS; r++) {
        alone[r] = pair_window(pool, s, size);
        snapshots_start(loop);
        during[r] = pair_window(pool, s, size);
        snapshots_stop(loop);
        ratio[r] = during[r] / alone[r];
    }
    pair_figures f = {.alone_ns = bench_median(alone, REPEATS),
                      .during_ns = bench_median(during, REPEATS),
                      .ratio = bench_median(ratio, REPEATS),
                      .snapshots = atomic_load(&loop->written)};
    f.longest_alone_us = pair_longest_us(pool, s, size);
    snapshots_start(loop);
    f.longest_during_us = pair_longest_us(pool, s, size);
    snapshots_stop(loop);
    return f;
}

int main(int argc, char **argv) {
    if (bench_smoke(&argc, argv)) {
        stat_calls = 100;
        pair_window_ns = 1e6;
    }
    long blocks = argc > 1 ? atol(argv[1]) : 100000;
    const char *path = argc > 2 ? argv[2] : "/tmp/capturepool_snapshot_bench.json";
    if (blocks < 1) {
        fprintf(stderr, "usage: snapshot_bench [--smoke] [live-blocks] [path]\n");
        return 2;
    }
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";

    /* Graphs first, so that their scratch and outputs sit among the blocks:
     * scratch of 64 KiB to 512 KiB (shared between the graphs), an output
     * of 4 KiB each. */
    cpool_graph *graphs[GRAPHS];
    void *outputs[GRAPHS];
    for (int k = 0; k < GRAPHS; k++)
        graphs[k] = capture_graph(pool, s, (size_t)65536 << k, 4096, &outputs[k]);

    /* N live blocks of 256 B to 2 KiB, and every ninth one of N + N/8
     * freed again, so that free blocks lie between live ones. */
    long extra = blocks / 8, total = blocks + extra, freed = 0;
    void **ptrs = malloc((size_t)total * sizeof *ptrs);
    if (!ptrs) {
        fprintf(stderr, "snapshot_bench: out of host memory\n");
        return 1;
    }
    for (long i = 0; i < total; i++) BENCH_CHECK(cpool_alloc(pool, (size_t)256 * (1 + i % 8), s, &ptrs[i]));
    for (long i = 8; i < total && freed < extra; i += 9, freed++) {
        BENCH_CHECK(cpool_free(pool, ptrs[i], s));
        ptrs[i] = NULL;
    }
    BENCH_CHECK(cpool_stream_synchronize(s));

    cpool_pool_stats ps = {.struct_size = sizeof ps};
    BENCH_CHECK(cpool_pool_get_stats(pool, &ps));
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    BENCH_CHECK(cpool_graph_get_stats(graphs[GRAPHS - 1], &gs));

    printf("snapshot_bench: backend %s, %llu live blocks (%ld of them, %d graph outputs), %ld freed between them, "
           "%d graphs, %llu segments, %.1f MiB reserved; medians of %d repeats\n",
           backend, (unsigned long long)(ps.alloc_count - ps.free_count), blocks, GRAPHS, freed, GRAPHS,
           (unsigned long long)ps.segment_count, (double)ps.reserved_bytes / (1 << 20), REPEATS);
    printf("graph %llu: write_bytes %llu, shared_write_bytes %llu, live_output_bytes %llu, live_outputs %llu, "
           "pool_count %llu\n",
           (unsigned long long)cpool_graph_id(graphs[GRAPHS - 1]), (unsigned long long)gs.write_bytes,
           (unsigned long long)gs.shared_write_bytes, (unsigned long long)gs.live_output_bytes,
           (unsigned long long)gs.live_outputs, (unsigned long long)gs.pool_count);

    double pool_stats_ns = time_pool_stats(pool);
    double graph_stats_ns = time_graph_stats(graphs[GRAPHS - 1]);
    double snap_ns = time_snapshot(pool, path);
    double file_mib;
    size_t snap_blocks = count_blocks(path, &file_mib);
    double per_block = snap_blocks ? snap_ns / (double)snap_blocks : 0;

    printf("%-44s %12s   %s\n", "measure", "figure", "target");
    printf("%-44s %12.1f   well under %.0f: %s\n", "cpool_pool_get_stats, ns per call", pool_stats_ns,
           GET_STATS_TARGET_NS, pool_stats_ns < GET_STATS_TARGET_NS ? "met" : "MISSED");
    printf("%-44s %12.1f   -\n", "cpool_graph_get_stats, ns per call", graph_stats_ns);
    printf("%-44s %12zu   -\n", "snapshot: blocks in the file", snap_blocks);
    printf("%-44s %12.1f   at most %.0f: %s\n", "snapshot: ns per block", per_block, SNAPSHOT_TARGET_NS_PER_BLOCK,
           per_block <= SNAPSHOT_TARGET_NS_PER_BLOCK ? "met" : "MISSED");
    printf("%-44s %12.2f   -\n", "snapshot: total ms", snap_ns / 1e6);
    printf("%-44s %12.2f   -   (%s)\n", "snapshot: file MiB", file_mib, path);
    printf("csv,snapshot,%s,%.2f,%.2f,%zu,%.2f,%.3f,%.3f\n", backend, pool_stats_ns, graph_stats_ns, snap_blocks,
           per_block, snap_ns / 1e6, file_mib);

    /* The pair alone and while the other thread writes snapshots. */
    const size_t sizes[] = {4096, 16 << 20};
    snapshot_loop loop = {.pool = pool, .path = path};
    atomic_init(&loop.stop, false);
    atomic_init(&loop.written, 0);
    atomic_init(&loop.failed, CPOOL_OK);
    printf("cached alloc+free pair on the same pool, ns (medians of %d windows of %.0f ms), alone and while another "
           "thread writes snapshots of it in a loop; ratio: median of side-by-side windows\n",
           REPEATS, pair_window_ns / 1e6);
    printf("%10s %10s %16s %8s %18s %19s %10s\n", "bytes", "alone", "with snapshots", "ratio", "longest alone us",
           "longest during us", "snapshots");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        pair_figures f = time_pairs(pool, s, sizes[k], &loop);
        printf("%10zu %10.1f %16.1f %7.2fx %18.1f %19.1f %10ld\n", sizes[k], f.alone_ns, f.during_ns, f.ratio,
               f.longest_alone_us, f.longest_during_us, f.snapshots);
        printf("csv,snapshotpair,%s,%zu,%.2f,%.2f,%.4f,%.2f,%.2f,%ld\n", backend, sizes[k], f.alone_ns, f.during_ns,
               f.ratio, f.longest_alone_us, f.longest_during_us, f.snapshots);
    }

    for (long i = 0; i < total; i++)
        if (ptrs[i]) BENCH_CHECK(cpool_free(pool, ptrs[i], s));
    free(ptrs);
    for (int k = 0; k < GRAPHS; k++) {
        BENCH_CHECK(cpool_free(pool, outputs[k], s));
        cpool_graph_release(graphs[k]);
    }
    BENCH_CHECK(cpool_stream_synchronize(s));
    bench_close(dev, s, pool);
    return 0;
}
