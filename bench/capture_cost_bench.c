/*
 * What a graph's memory costs when it is made: capture, instantiation and
 * the first launch (synchronized) of a graph whose capture allocates a
 * scratch of S bytes, fills it and frees it (cpool_alloc,
 * cpool_memset_async, cpool_free), for S = 2 MiB, 128 MiB and 1 GiB:
 *  - cold: into a fresh pool each time;
 *  - warm: into one pool whose previous such graph was released (the
 *    library may reuse what that graph held: mappings, address ranges).
 * On CUDA, side by side, the same graph made with CUDA's graph memory nodes
 * (cudaMallocAsync, cudaMemsetAsync and cudaFreeAsync captured), cold
 * (cudaDeviceGraphMemTrim before each) and warm, with the ratios ours/CUDA:
 * medians of the ratios of side-by-side rounds, whose order flips each
 * round. On the host backend only our side is measured.
 * Times are medians of ROUNDS, in us. Prints "csv,capture_cost,..." lines
 * for scripts/bench_report.py.
 * Usage: capture_cost_bench [rounds (20)] [scratch-KiB ... (2048 131072 1048576)]
 */
#include <stdbool.h>
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));                             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#endif

enum { MAX_ROUNDS = 1000, MAX_SIZES = 16 };

typedef struct scratch_step {
    cpool_pool *pool;
    size_t bytes;
} scratch_step;

static cpool_status scratch_body(cpool_stream *s, void *ctx) {
    scratch_step *st = ctx;
    void *p;
    cpool_status rc = cpool_alloc(st->pool, st->bytes, s, &p);
    if (rc == CPOOL_OK) rc = cpool_memset_async(s, p, 1, st->bytes);
    if (rc == CPOOL_OK) rc = cpool_free(st->pool, p, s);
    return rc;
}

/* Capture + instantiate + first launch + synchronize into `pool`, in ns;
 * the graph is released afterwards, untimed. */
static double ours_once(cpool_pool *pool, cpool_stream *s, size_t bytes) {
    scratch_step st = {pool, bytes};
    cpool_graph *g;
    double t0 = bench_now_ns();
    BENCH_CHECK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, scratch_body, &st, &g));
    BENCH_CHECK(cpool_graph_launch(g, s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    double t = bench_now_ns() - t0;
    cpool_graph_release(g);
    return t;
}

/* ours_once into a pool of its own, torn down before the next round. */
static double ours_cold(cpool_device *dev, cpool_stream *s, size_t bytes) {
    cpool_pool *pool;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &pool));
    double t = ours_once(pool, s, bytes);
    cpool_pool_release(pool);
    cpool_wait_deferred();
    return t;
}

#ifdef CPOOL_HAVE_CUDA
/* The same graph with CUDA's graph memory nodes, in ns; cold trims the
 * device's graph memory first, untimed. */
static double cuda_once(cudaStream_t cs, int ordinal, size_t bytes, bool cold) {
    if (cold) CUDA_CHECK(cudaDeviceGraphMemTrim(ordinal));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    void *p;
    double t0 = bench_now_ns();
    CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaMallocAsync(&p, bytes, cs));
    CUDA_CHECK(cudaMemsetAsync(p, 1, bytes, cs));
    CUDA_CHECK(cudaFreeAsync(p, cs));
    CUDA_CHECK(cudaStreamEndCapture(cs, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaGraphLaunch(exec, cs));
    CUDA_CHECK(cudaStreamSynchronize(cs));
    double t = bench_now_ns() - t0;
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    return t;
}
#endif

typedef struct side_by_side {
    double ours[MAX_ROUNDS], cuda[MAX_ROUNDS], ratio[MAX_ROUNDS];
} side_by_side;

typedef struct cost {
    double ours_us, cuda_us, ratio; /* CUDA's and the ratio: 0 on the host backend */
} cost;

/* `rounds` side-by-side rounds, cold or warm (one pool for every round,
 * after one untimed round on each side). */
static cost measure(cpool_device *dev, cpool_stream *s, size_t bytes, int rounds, bool cold, side_by_side *m) {
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
    cpool_pool *warm = NULL;
#ifdef CPOOL_HAVE_CUDA
    cudaStream_t cs = (cudaStream_t)cpool_stream_native(s);
    int ordinal = 0;
    if (cuda) CUDA_CHECK(cudaGetDevice(&ordinal));
#endif
    if (!cold) {
        BENCH_CHECK(cpool_pool_create(dev, NULL, &warm));
        ours_once(warm, s, bytes);
#ifdef CPOOL_HAVE_CUDA
        if (cuda) cuda_once(cs, ordinal, bytes, false);
#endif
    }
    for (int r = 0; r < rounds; r++) {
        m->cuda[r] = 0;
#ifdef CPOOL_HAVE_CUDA
        if (cuda && r % 2) m->cuda[r] = cuda_once(cs, ordinal, bytes, cold);
#endif
        m->ours[r] = cold ? ours_cold(dev, s, bytes) : ours_once(warm, s, bytes);
#ifdef CPOOL_HAVE_CUDA
        if (cuda && r % 2 == 0) m->cuda[r] = cuda_once(cs, ordinal, bytes, cold);
#endif
        m->ratio[r] = cuda ? m->ours[r] / m->cuda[r] : 0;
    }
    cpool_pool_release(warm);
    cpool_wait_deferred();
#ifdef CPOOL_HAVE_CUDA
    if (cuda) CUDA_CHECK(cudaDeviceGraphMemTrim(ordinal));
#endif
    return (cost){bench_median(m->ours, rounds) / 1e3, bench_median(m->cuda, rounds) / 1e3,
                  bench_median(m->ratio, rounds)};
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    size_t sizes[MAX_SIZES] = {2048, 131072, 1048576};
    int nsizes = argc > 2 ? argc - 2 : 3;
    if (rounds < 1 || rounds > MAX_ROUNDS || nsizes > MAX_SIZES) {
        fprintf(stderr, "usage: capture_cost_bench [rounds, 1 to %d] [scratch-KiB ..., at most %d]\n", MAX_ROUNDS,
                MAX_SIZES);
        return 2;
    }
    for (int i = 0; argc > 2 && i < nsizes; i++) sizes[i] = strtoull(argv[i + 2], NULL, 10);
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
    const char *backend = cuda ? "cuda" : "host";
    side_by_side *m = malloc(sizeof *m);
    if (!m) return 1;
    cost cold[MAX_SIZES], warm[MAX_SIZES];
    for (int i = 0; i < nsizes; i++) {
        size_t bytes = sizes[i] << 10;
        cold[i] = measure(dev, s, bytes, rounds, true, m);
        warm[i] = measure(dev, s, bytes, rounds, false, m);
        printf("csv,capture_cost,%s,%zu,%.2f,%.2f,%.4f,%.2f,%.2f,%.4f\n", backend, bytes, cold[i].ours_us,
               cold[i].cuda_us, cold[i].ratio, warm[i].ours_us, warm[i].cuda_us, warm[i].ratio);
    }
    printf("capture_cost_bench: capture + instantiate + first launch (synchronized) of a graph whose capture "
           "allocates, fills and frees a scratch; us, medians of %d; backend %s\n",
           rounds, backend);
    printf("cold: a fresh pool (CUDA: graph memory trimmed first); warm: the pool (CUDA: the device) kept the "
           "memory of the previous such graph, released\n");
    if (cuda) {
        printf("%12s | %10s %10s %9s | %10s %10s %9s\n", "scratch MiB", "cold ours", "CUDA", "ours/CUDA",
               "warm ours", "CUDA", "ours/CUDA");
        for (int i = 0; i < nsizes; i++)
            printf("%12.6g | %10.1f %10.1f %8.3fx | %10.1f %10.1f %8.3fx\n", sizes[i] / 1024.0, cold[i].ours_us,
                   cold[i].cuda_us, cold[i].ratio, warm[i].ours_us, warm[i].cuda_us, warm[i].ratio);
    } else {
        printf("%12s | %10s | %10s\n", "scratch MiB", "cold ours", "warm ours");
        for (int i = 0; i < nsizes; i++)
            printf("%12.6g | %10.1f | %10.1f\n", sizes[i] / 1024.0, cold[i].ours_us, warm[i].ours_us);
    }
    free(m);
    bench_close(dev, s, NULL);
    return 0;
}
