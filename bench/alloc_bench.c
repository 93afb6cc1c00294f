/*
 * Cached alloc+free pair cost, measured side by side in one run:
 * - capturepool's cpool_alloc + cpool_free (cached: the block is reused),
 * - on CUDA: cudaMallocAsync + cudaFreeAsync on the same stream, and
 *   cudaMalloc + cudaFree;
 * - on the host backend: glibc malloc + free.
 * Each figure is the median over repeats of the mean time of a pair.
 * Usage: alloc_bench [--smoke] [pairs-per-repeat]
 * --smoke: 20 pairs a repeat and 64 live blocks in the crowded pool.
 */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "capturepool.h"
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { REPEATS = 7 };

static double time_ours(cpool_pool *pool, cpool_stream *s, size_t size, int pairs) {
    double samples[REPEATS];
    void *p;
    BENCH_CHECK(cpool_alloc(pool, size, s, &p)); /* warm: the segment exists */
    BENCH_CHECK(cpool_free(pool, p, s));
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < pairs; i++) {
            cpool_alloc(pool, size, s, &p);
            cpool_free(pool, p, s);
        }
        samples[r] = (bench_now_ns() - t0) / pairs;
    }
    return bench_median(samples, REPEATS);
}

static double time_malloc(size_t size, int pairs) {
    double samples[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < pairs; i++) {
            void *volatile p = malloc(size);
            free(p);
        }
        samples[r] = (bench_now_ns() - t0) / pairs;
    }
    return bench_median(samples, REPEATS);
}

#ifdef CPOOL_HAVE_CUDA
static double time_malloc_async(cudaStream_t st, size_t size, int pairs) {
    double samples[REPEATS];
    void *p;
    cudaMallocAsync(&p, size, st);
    cudaFreeAsync(p, st);
    cudaStreamSynchronize(st);
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < pairs; i++) {
            cudaMallocAsync(&p, size, st);
            cudaFreeAsync(p, st);
        }
        samples[r] = (bench_now_ns() - t0) / pairs;
    }
    cudaStreamSynchronize(st);
    return bench_median(samples, REPEATS);
}

static double time_cuda_malloc(size_t size, int pairs) {
    double samples[REPEATS];
    void *p;
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < pairs; i++) {
            cudaMalloc(&p, size);
            cudaFree(p);
        }
        samples[r] = (bench_now_ns() - t0) / pairs;
    }
    return bench_median(samples, REPEATS);
}
#endif

int main(int argc, char **argv) {
    bool smoke = bench_smoke(&argc, argv);
    int pairs = argc > 1 ? atoi(argv[1]) : smoke ? 20 : 200000;
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    const size_t sizes[] = {512, 4096, 65536, 1 << 20, 16 << 20};
    bool cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
    printf("alloc_bench: cached alloc+free pair, ns (median of %d repeats of %d pairs), backend %s\n", REPEATS, pairs,
           cuda ? "cuda" : "host");
    if (cuda)
        printf("%10s %10s %16s %8s %14s %8s\n", "bytes", "capturepool", "cudaMallocAsync", "speedup", "cudaMalloc",
               "speedup");
    else
        printf("%10s %10s %12s %14s\n", "bytes", "capturepool", "malloc+free", "ours/malloc");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        double ours = time_ours(pool, s, sizes[i], pairs);
#ifdef CPOOL_HAVE_CUDA
        if (cuda) {
            double async = time_malloc_async((cudaStream_t)cpool_stream_native(s), sizes[i], pairs);
            double sync = time_cuda_malloc(sizes[i], pairs / 1000 > 50 ? pairs / 1000 : 50);
            printf("%10zu %10.1f %16.1f %7.1fx %14.1f %7.0fx\n", sizes[i], ours, async, async / ours, sync, sync / ours);
            continue;
        }
#endif
        double sys = time_malloc(sizes[i], pairs);
        printf("%10zu %10.1f %12.1f %13.2fx\n", sizes[i], ours, sys, ours / sys);
    }
    /* The same pair in a pool that holds many live small blocks of other
     * sizes, with frees between them: the blocks the callers keep, or no
     * longer ask for, must not keep this size out of the front cache. */
    enum { LIVE_MAX = 10000 };
    static void *live[LIVE_MAX];
    const int LIVE = smoke ? 64 : LIVE_MAX;
    cpool_pool *busy;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &busy));
    for (int i = 0; i < LIVE; i++) BENCH_CHECK(cpool_alloc(busy, 256 + (size_t)(i % 8) * 256, s, &live[i]));
    for (int i = 0; i < LIVE; i += 8) BENCH_CHECK(cpool_free(busy, live[i], s));
    double plain = time_ours(pool, s, 4096, pairs), crowded = time_ours(busy, s, 4096, pairs);
    printf("4096-byte pair, ns: fresh pool %.1f, pool with %d live small blocks and frees between them %.1f "
           "(%.2fx)\n",
           plain, LIVE - LIVE / 8, crowded, crowded / plain);
    for (int i = 1; i < LIVE; i++)
        if (i % 8) BENCH_CHECK(cpool_free(busy, live[i], s));
    cpool_pool_release(busy);
    bench_close(dev, s, pool);
    return 0;
}
