/*
 * Capture order: the graph-reserved memory of 16 graphs of one model's
 * forward at 16 batch sizes (1 to 256), all captured into one pool, as a
 * server captures a graph per batch size. Each capture runs LAYERS layers of
 * ACTS activations, b * 64, b * 256 and b * 128 KiB for batch b: each is
 * allocated before the one before it is freed and filled by a memset on the
 * capture stream, and the last is freed before the capture ends. A graph's
 * scratch is so its peak of live bytes, the largest pair of neighbours:
 * b * 384 KiB. Graphs that share a pool share their scratch (README, "Graphs
 * that share a pool"), so the least the pool can hold is the largest graph's
 * scratch, in either order.
 * The graphs are captured smallest batch first into one pool, then largest
 * first into a fresh one; for each order it reports the pool's
 * graph_reserved_bytes and reserved_bytes after the 16 captures over the
 * largest graph's scratch, then launches every graph once and waits for
 * them. A third pool captures the largest graph alone ("largest-alone"):
 * what the segments' sizes make of its scratch, the floor of both orders.
 * Runs on both backends (CPOOL_BACKEND=host or cuda);
 * bench/capture_order_torch.py runs the same pattern in PyTorch's shared
 * graph pool. Besides the table it prints "csv,capture_order,..." lines for
 * scripts/bench_report.py.
 * Usage: capture_order_bench [--smoke]
 * --smoke: activations of bytes instead of KiB (b * 64 B and so on).
 */
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"

static const size_t BATCHES[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 208, 224, 256};
static const size_t ACT_KIB[] = {64, 256, 128};
enum {
    GRAPHS = sizeof BATCHES / sizeof BATCHES[0],
    ACTS = sizeof ACT_KIB / sizeof ACT_KIB[0],
    LAYERS = 4,
};

/* The unit of ACT_KIB: 1 KiB, or 1 byte in a smoke run. */
static size_t act_unit = 1024;

/* The k-th activation of a forward at `batch`, k from 0 to LAYERS * ACTS. */
static size_t act_bytes(size_t batch, int k) { return batch * ACT_KIB[k % ACTS] * act_unit; }

/* A forward's peak of live bytes: an activation and the one before it. */
static size_t forward_scratch(size_t batch) {
    size_t prev = 0, peak = 0;
    for (int k = 0; k < LAYERS * ACTS; k++) {
        size_t cur = act_bytes(batch, k);
        if (prev + cur > peak) peak = prev + cur;
        prev = cur;
    }
    return peak;
}

typedef struct forward {
    cpool_pool *pool;
    size_t batch;
} forward;

/* The captured forward. On a failure the capture is discarded and the run
 * ends, so a block still held then is left to the pool's teardown. */
static cpool_status forward_body(cpool_stream *s, void *ctx) {
    const forward *f = ctx;
    void *prev = NULL;
    for (int k = 0; k < LAYERS * ACTS; k++) {
        size_t bytes = act_bytes(f->batch, k);
        void *cur;
        cpool_status rc = cpool_alloc(f->pool, bytes, s, &cur);
        if (rc == CPOOL_OK) rc = cpool_memset_async(s, cur, k + 1, bytes);
        if (rc == CPOOL_OK && prev) rc = cpool_free(f->pool, prev, s);
        if (rc != CPOOL_OK) return rc;
        prev = cur;
    }
    return cpool_free(f->pool, prev, s);
}

typedef struct order_result {
    const char *name;
    uint64_t graph_reserved, reserved, segments;
} order_result;

typedef enum order { SMALLEST_FIRST, LARGEST_FIRST, LARGEST_ALONE } order;

/* The batch of the i-th capture of an order. */
static size_t order_batch(order o, int i) { return BATCHES[o == SMALLEST_FIRST ? i : GRAPHS - 1 - i]; }

/* Captures the forwards into a fresh pool in the given order, keeping every
 * graph, reads the pool's stats, then launches each graph once. */
static order_result run_order(cpool_device *dev, cpool_stream *s, order o) {
    static const char *names[] = {"smallest-first", "largest-first", "largest-alone"};
    order_result r = {names[o], 0, 0, 0};
    int graphs = o == LARGEST_ALONE ? 1 : GRAPHS;
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    cpool_graph *g[GRAPHS];
    for (int i = 0; i < graphs; i++) {
        forward f = {pool, order_batch(o, i)};
        BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, forward_body, &f, &g[i]));
    }
    cpool_pool_stats st = {.struct_size = sizeof st};
    BENCH_CHECK(cpool_pool_get_stats(pool, &st));
    r.graph_reserved = st.graph_reserved_bytes;
    r.reserved = st.reserved_bytes;
    r.segments = st.segment_count;
    for (int i = 0; i < graphs; i++) BENCH_CHECK(cpool_graph_launch(g[i], s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    for (int i = 0; i < graphs; i++) cpool_graph_release(g[i]);
    cpool_pool_release(pool);
    return r;
}

static void print_result(const order_result *r, size_t largest, size_t sum, const char *backend) {
    double mib = 1 << 20, ratio = (double)r->graph_reserved / (double)largest;
    double reserved_ratio = (double)r->reserved / (double)largest;
    printf("%-16s | %12.1f %9.3fx | %12.1f %9.3fx | %8llu\n", r->name, (double)r->graph_reserved / mib, ratio,
           (double)r->reserved / mib, reserved_ratio, (unsigned long long)r->segments);
    printf("csv,capture_order,%s,%.4f,%.4f,%llu,%llu,%zu,%zu,%llu,%s\n", r->name, ratio, reserved_ratio,
           (unsigned long long)r->graph_reserved, (unsigned long long)r->reserved, largest, sum,
           (unsigned long long)r->segments, backend);
}

int main(int argc, char **argv) {
    if (bench_smoke(&argc, argv)) act_unit = 1;
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    size_t largest = 0, sum = 0;
    for (int i = 0; i < GRAPHS; i++) {
        size_t scratch = forward_scratch(BATCHES[i]);
        sum += scratch;
        if (scratch > largest) largest = scratch;
    }
    double mib = 1 << 20;
    printf("capture_order_bench: %d graphs, batch %zu to %zu, %d layers of %zu, %zu and %zu %s x batch, captured "
           "into one pool; backend %s\n",
           GRAPHS, BATCHES[0], BATCHES[GRAPHS - 1], LAYERS, ACT_KIB[0], ACT_KIB[1], ACT_KIB[2],
           act_unit == 1 ? "bytes" : "KiB", backend);
    printf("largest graph's scratch (its peak live bytes) %.1f MiB, all %d graphs' together %.1f MiB; "
           "x largest: over the largest graph's scratch\n",
           (double)largest / mib, GRAPHS, (double)sum / mib);
    printf("%-16s | %12s %10s | %12s %10s | %8s\n", "order", "graph MiB", "x largest", "reserved MiB", "x largest",
           "segments");
    for (order o = SMALLEST_FIRST; o <= LARGEST_ALONE; o++) {
        order_result r = run_order(dev, s, o);
        print_result(&r, largest, sum, backend);
    }
    printf("every graph launched once after its order's captures\n");
    bench_close(dev, s, NULL);
    return 0;
}
