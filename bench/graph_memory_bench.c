/*
 * Graph memory: 8 graphs, each allocating a 256 MiB scratch inside its
 * capture, writing it, and freeing it again, all sharing one pool. Reports
 * the pool's reserved memory after all 8 were captured and launched, and, on
 * CUDA, side by side in the same run, the same 8 graphs made with CUDA graph
 * memory nodes (cudaMallocAsync/cudaFreeAsync under capture), whose reserved
 * memory the driver reports as cudaGraphMemAttrReservedMemHigh.
 * bench/graph_memory_torch.py adds PyTorch's figures (private pools and one
 * shared pool) in the same run under scripts/gpu-check.sh.
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
    bench_close(dev, s, pool);
    return ours <= 1.05 ? 0 : 1;
}
