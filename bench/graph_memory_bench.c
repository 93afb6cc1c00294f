/*
 * Graph memory: 8 graphs, each allocating a 256 MiB scratch inside its
 * capture, writing it, and freeing it again, all sharing one pool. Reports
 * the pool's reserved memory after all 8 were captured and launched, and, on
 * CUDA, side by side in the same run, the same 8 graphs made with CUDA graph
 * memory nodes (cudaMallocAsync/cudaFreeAsync under capture), whose reserved
 * memory the driver reports as cudaGraphMemAttrReservedMemHigh.
 * bench/graph_memory_torch.py adds PyTorch's figures (private pools and one
 * shared pool) in the same run under scripts/gpu-check.sh.
 * Then the same 8 graphs with a small live output each (the first graph's
 * allocated before its scratch, the others' after), made with
 * cpool_graphed_call into a pool of their own: the graph-reserved memory
 * they hold, and every ordered pair of them launched one after the other,
 * which must never be refused (CPOOL_ERR_OUTPUT_LIVE).
 * Usage: graph_memory_bench [graphs] [scratch-MiB]
 */
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

typedef struct scratch_step {
    cpool_pool *pool;
    size_t bytes;
    int value;
} scratch_step;

static cpool_status scratch_body(cpool_stream *s, void *ctx) {
    scratch_step *st = ctx;
    void *p;
    cpool_status rc = cpool_alloc(st->pool, st->bytes, s, &p);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, p, st->value, st->bytes);
    if (rc == CPOOL_OK) rc = cpool_free(st->pool, p, s);
    return rc;
}

enum { OUTPUT_BYTES = 4096 };

/* A scratch and a small output that outlives the body; `outputs` gets one
 * per run (the eager one, then the captured one). */
typedef struct output_step {
    cpool_pool *pool;
    size_t bytes;
    int value;
    bool output_first;
    void *outputs[2];
    int runs;
} output_step;

static cpool_status output_body(cpool_stream *s, void *ctx) {
    output_step *st = ctx;
    void *scratch, *out = NULL;
    cpool_status rc = CPOOL_OK;
    if (st->output_first) rc = cpool_alloc(st->pool, OUTPUT_BYTES, s, &out);
    if (rc == CPOOL_OK) rc = cpool_alloc(st->pool, st->bytes, s, &scratch);
    if (rc == CPOOL_OK && !out) rc = cpool_alloc(st->pool, OUTPUT_BYTES, s, &out);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, scratch, st->value, st->bytes);
    if (rc == CPOOL_OK) rc = cpool_memcpy_async(s, out, scratch, OUTPUT_BYTES);
    if (rc == CPOOL_OK) rc = cpool_free(st->pool, scratch, s);
    if (rc == CPOOL_OK && st->runs < 2) st->outputs[st->runs++] = out;
    return rc;
}

/* Graph-reserved memory of the graphs with outputs, in scratch sizes, and
 * how many of the ordered pairs' launches were refused. */
static double outputs_variant(cpool_device *dev, cpool_stream *s, int graphs, size_t bytes, int *refused) {
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    output_step *st = calloc((size_t)graphs, sizeof *st);
    cpool_graph **g = calloc((size_t)graphs, sizeof *g);
    for (int i = 0; i < graphs; i++) {
        st[i] = (output_step){.pool = pool, .bytes = bytes, .value = i + 1, .output_first = i == 0};
        BENCH_CHECK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, output_body, &st[i], &g[i]));
        BENCH_CHECK(cpool_free(pool, st[i].outputs[0], s)); /* the eager run's */
    }
    *refused = 0;
    for (int i = 0; i < graphs; i++)
        for (int j = 0; j < graphs; j++) {
            if (i == j) continue;
            cpool_status a = cpool_graph_launch(g[i], s), b = cpool_graph_launch(g[j], s);
            *refused += (a == CPOOL_ERR_OUTPUT_LIVE) + (b == CPOOL_ERR_OUTPUT_LIVE);
            if (a != CPOOL_OK && a != CPOOL_ERR_OUTPUT_LIVE) BENCH_CHECK(a);
            if (b != CPOOL_OK && b != CPOOL_ERR_OUTPUT_LIVE) BENCH_CHECK(b);
        }
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_stats stats = {.struct_size = sizeof stats};
    BENCH_CHECK(cpool_pool_get_stats(pool, &stats));
    for (int i = 0; i < graphs; i++) {
        BENCH_CHECK(cpool_free(pool, st[i].outputs[1], s));
        cpool_graph_release(g[i]);
    }
    free(g);
    free(st);
    cpool_pool_release(pool);
    return (double)stats.graph_reserved_bytes / (double)bytes;
}

int main(int argc, char **argv) {
    int graphs = argc > 1 ? atoi(argv[1]) : 8;
    size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 256;
    size_t bytes = mib << 20;
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;

    cpool_graph **g = calloc((size_t)graphs, sizeof *g);
    for (int i = 0; i < graphs; i++) {
        scratch_step st = {pool, bytes, i + 1};
        BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, scratch_body, &st, &g[i]));
    }
    for (int i = 0; i < graphs; i++) BENCH_CHECK(cpool_graph_launch(g[i], s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    cpool_pool_stats stats = {.struct_size = sizeof stats};
    BENCH_CHECK(cpool_pool_get_stats(pool, &stats));
    double ours = (double)stats.reserved_bytes / (double)bytes;

    double memnodes = 0;
#ifdef CPOOL_HAVE_CUDA
    if (cuda) {
        cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
        cudaGraphExec_t *exec = calloc((size_t)graphs, sizeof *exec);
        for (int i = 0; i < graphs; i++) {
            cudaGraph_t graph;
            void *p;
            BENCH_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
            BENCH_CHECK(cudaMallocAsync(&p, bytes, cs));
            BENCH_CHECK(cudaMemsetAsync(p, i + 1, bytes, cs));
            BENCH_CHECK(cudaFreeAsync(p, cs));
            BENCH_CHECK(cudaStreamEndCapture(cs, &graph));
            BENCH_CHECK(cudaGraphInstantiate(&exec[i], graph, 0));
            cudaGraphDestroy(graph);
        }
        for (int i = 0; i < graphs; i++) BENCH_CHECK(cudaGraphLaunch(exec[i], cs));
        BENCH_CHECK(cudaStreamSynchronize(cs));
        unsigned long long reserved = 0;
        int ordinal;
        cudaGetDevice(&ordinal);
        BENCH_CHECK(cudaDeviceGetGraphMemAttribute(ordinal, cudaGraphMemAttrReservedMemHigh, &reserved));
        memnodes = (double)reserved / (double)bytes;
        for (int i = 0; i < graphs; i++) cudaGraphExecDestroy(exec[i]);
        free(exec);
    }
#endif
    printf("graph_memory_bench: %d graphs, each a %zu MiB scratch allocated and freed inside its capture, backend %s\n",
           graphs, mib, cuda ? "cuda" : "host");
    printf("%-44s %14s %10s\n", "variant", "reserved MiB", "x scratch");
    printf("%-44s %14.1f %9.3fx\n", "capturepool, one shared pool", (double)stats.reserved_bytes / (1 << 20), ours);
    if (cuda)
        printf("%-44s %14.1f %9.3fx\n", "CUDA graph memory nodes (cudaMallocAsync)", memnodes * (double)mib, memnodes);
    printf("csv,graphmem,capturepool,%d,%zu,%.4f\n", graphs, mib, ours);
    if (cuda) printf("csv,graphmem,cuda-memnodes,%d,%zu,%.4f\n", graphs, mib, memnodes);

    for (int i = 0; i < graphs; i++) cpool_graph_release(g[i]);
    free(g);

    int refused;
    double with_outputs = outputs_variant(dev, s, graphs, bytes, &refused);
    printf("%-44s %14.1f %9.3fx  (%d of %d pair launches refused)\n", "capturepool, graphed calls with outputs",
           with_outputs * (double)mib, with_outputs, refused, 2 * graphs * (graphs - 1));
    printf("csv,graphmem,capturepool-outputs,%d,%zu,%.4f,%d\n", graphs, mib, with_outputs, refused);
    bench_close(dev, s, pool);
    /* Outputs' own small segments aside: 2 MiB. */
    double small = (double)(2u << 20) / (double)bytes;
    return ours <= 1.05 && with_outputs <= 1.05 + small && refused == 0 ? 0 : 1;
}
