/*
 * The inference-engine pattern: 8 graphs captured into one pool, as an
 * engine captures one graph per batch size. Graph i's capture allocates a
 * scratch of (1 << i) MiB, fills it with a byte unique to i, allocates an
 * output of (64 << i) KiB, copies the start of the scratch into it and frees
 * the scratch; the output lives as long as the graph.
 * For each way of allocating the output (cpool_alloc or cpool_alloc_output
 * under cpool_capture, cpool_alloc under cpool_graphed_call with one eager
 * run) and each capture order (ascending, descending, a fixed shuffle), it
 * reports the pool's graph_reserved_bytes over the lower bound (the largest
 * scratch plus every output), then launches the graphs 300 times in one
 * random order (the same for every row) and counts the launches refused
 * (any status but CPOOL_OK) and the graphs whose output was found
 * overwritten: a graph's output is read back after each of its launches,
 * and every launched graph's every 10 launches.
 * bench/engine_torch.py runs the same pattern in PyTorch's shared graph
 * pool. Besides the table it prints "csv,engine,..." lines for
 * scripts/bench_report.py. Exits 1 where an output was overwritten (no
 * launch may do that); refusals are only counted.
 * Usage: engine_bench [smallest-scratch-KiB (1024)] [launches (300)]
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "capturepool.h"

enum { GRAPHS = 8, CHECK_EVERY = 10, OUTPUT_DIVISOR = 16 };
static const int MIXED_ORDER[GRAPHS] = {3, 7, 0, 5, 2, 6, 1, 4};
static const uint64_t LAUNCH_SEED = 42;

typedef enum style { STYLE_ALLOC, STYLE_ALLOC_OUTPUT, STYLE_GRAPHED_CALL, STYLES } style;
typedef enum order { ASCENDING, DESCENDING, MIXED, ORDERS } order;
static const char *const STYLE_NAMES[STYLES] = {"cpool_alloc", "cpool_alloc_output", "cpool_graphed_call"};
static const char *const ORDER_NAMES[ORDERS] = {"ascending", "descending", "mixed"};

typedef struct engine_graph {
    cpool_pool *pool;
    style style;
    size_t scratch_bytes, output_bytes;
    int pattern;
    void *output;       /* the last run's: after the capture, the graph's */
    void *eager_output; /* a graphed call's eager run's, freed after its capture */
    cpool_graph *graph;
    bool launched, overwritten;
} engine_graph;

typedef struct case_result {
    uint64_t graph_reserved;
    int refused, overwritten;
} case_result;

/* splitmix64; bench/engine_torch.py draws the same launch order. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The graph captured k-th in an order. */
static int capture_index(order o, int k) {
    return o == ASCENDING ? k : o == DESCENDING ? GRAPHS - 1 - k : MIXED_ORDER[k];
}

/* The graph's work. On a failure the run ends, leaving its blocks to the
 * process's exit. */
static cpool_status engine_body(cpool_stream *s, void *ctx) {
    engine_graph *e = ctx;
    void *scratch, *out;
    cpool_status rc = cpool_alloc(e->pool, e->scratch_bytes, s, &scratch);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, scratch, e->pattern, e->scratch_bytes);
    if (rc == CPOOL_OK)
        rc = e->style == STYLE_ALLOC_OUTPUT ? cpool_alloc_output(e->pool, e->output_bytes, s, &out)
                                            : cpool_alloc(e->pool, e->output_bytes, s, &out);
    if (rc == CPOOL_OK) rc = cpool_memcpy_async(s, out, scratch, e->output_bytes);
    if (rc == CPOOL_OK) rc = cpool_free(e->pool, scratch, s);
    if (rc != CPOOL_OK) return rc;
    e->eager_output = e->output;
    e->output = out;
    return CPOOL_OK;
}

/* Reads the graph's output back (host is big enough for any output) and
 * marks the graph if it no longer holds its pattern. */
static void check_output(engine_graph *e, cpool_stream *s, unsigned char *host) {
    BENCH_CHECK(cpool_memcpy_async(s, host, e->output, e->output_bytes));
    BENCH_CHECK(cpool_stream_synchronize(s));
    for (size_t i = 0; i < e->output_bytes; i++)
        if (host[i] != (unsigned char)e->pattern) {
            e->overwritten = true;
            return;
        }
}

static case_result run_case(cpool_device *dev, cpool_stream *s, style st, order o, size_t unit, int launches,
                            unsigned char *host) {
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    engine_graph g[GRAPHS];
    for (int k = 0; k < GRAPHS; k++) {
        int i = capture_index(o, k);
        g[i] = (engine_graph){.pool = pool, .style = st, .scratch_bytes = unit << i,
                              .output_bytes = (unit << i) / OUTPUT_DIVISOR, .pattern = 0x11 * (i + 1)};
        if (st == STYLE_GRAPHED_CALL) {
            BENCH_CHECK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, engine_body, &g[i], &g[i].graph));
            BENCH_CHECK(cpool_free(pool, g[i].eager_output, s));
        } else {
            BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, engine_body, &g[i], &g[i].graph));
        }
    }
    case_result r = {0, 0, 0};
    uint64_t rng = LAUNCH_SEED;
    for (int n = 0; n < launches; n++) {
        engine_graph *e = &g[next_random(&rng) % GRAPHS];
        cpool_status rc = cpool_graph_launch(e->graph, s);
        if (rc != CPOOL_OK) {
            if (r.refused++ == 0) printf("  first refusal: %s: %s\n", cpool_status_string(rc), cpool_last_error());
        } else {
            e->launched = true;
            check_output(e, s, host);
        }
        if ((n + 1) % CHECK_EVERY == 0)
            for (int i = 0; i < GRAPHS; i++)
                if (g[i].launched) check_output(&g[i], s, host);
    }
    cpool_pool_stats stats = {.struct_size = sizeof stats};
    BENCH_CHECK(cpool_pool_get_stats(pool, &stats));
    r.graph_reserved = stats.graph_reserved_bytes;
    for (int i = 0; i < GRAPHS; i++) {
        r.overwritten += g[i].overwritten;
        BENCH_CHECK(cpool_free(pool, g[i].output, s));
        cpool_graph_release(g[i].graph);
    }
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    return r;
}

int main(int argc, char **argv) {
    size_t unit_kib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    int launches = argc > 2 ? atoi(argv[2]) : 300;
    if (unit_kib == 0 || unit_kib % OUTPUT_DIVISOR != 0 || launches < 0) {
        fprintf(stderr, "usage: engine_bench [smallest-scratch-KiB, a multiple of 16] [launches]\n");
        return 2;
    }
    size_t unit = unit_kib << 10, largest = unit << (GRAPHS - 1), outputs = 0;
    for (int i = 0; i < GRAPHS; i++) outputs += (unit << i) / OUTPUT_DIVISOR;
    size_t bound = largest + outputs;
    unsigned char *host = malloc(largest / OUTPUT_DIVISOR);
    if (!host) return 1;
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    const char *backend = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA ? "cuda" : "host";
    double mib = 1 << 20;
    printf("engine_bench: %d graphs in one pool, scratch %.3g to %.4g MiB, outputs %zu to %zu KiB, %d launches "
           "in one random order; backend %s\n",
           GRAPHS, (double)unit / mib, (double)largest / mib, unit / OUTPUT_DIVISOR >> 10,
           largest / OUTPUT_DIVISOR >> 10, launches, backend);
    case_result results[STYLES][ORDERS];
    for (style st = 0; st < STYLES; st++)
        for (order o = 0; o < ORDERS; o++) {
            printf("%s, %s\n", STYLE_NAMES[st], ORDER_NAMES[o]);
            case_result r = results[st][o] = run_case(dev, s, st, o, unit, launches, host);
            printf("csv,engine,%s,%s,%.4f,%llu,%zu,%d,%d,%d,%s\n", STYLE_NAMES[st], ORDER_NAMES[o],
                   (double)r.graph_reserved / (double)bound, (unsigned long long)r.graph_reserved, bound, r.refused,
                   launches, r.overwritten, backend);
        }
    printf("lower bound: the largest scratch plus every output, %.1f MiB; refused: of %d launches; "
           "overwritten: graphs whose output was found overwritten, of %d\n",
           (double)bound / mib, launches, GRAPHS);
    printf("%-20s %-11s | %10s %9s | %7s | %11s\n", "output style", "order", "graph MiB", "x bound", "refused",
           "overwritten");
    int overwritten = 0;
    for (style st = 0; st < STYLES; st++)
        for (order o = 0; o < ORDERS; o++) {
            case_result r = results[st][o];
            overwritten += r.overwritten;
            printf("%-20s %-11s | %10.1f %8.3fx | %7d | %11d\n", STYLE_NAMES[st], ORDER_NAMES[o],
                   (double)r.graph_reserved / mib, (double)r.graph_reserved / (double)bound, r.refused,
                   r.overwritten);
        }
    bench_close(dev, s, NULL);
    free(host);
    return overwritten ? 1 : 0;
}
