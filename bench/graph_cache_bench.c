/*
 * What a graph cache's hit costs over a plain launch, side by side in one
 * run: cpool_graph_cache_launch of a kept key against cpool_graph_launch of
 * the same graph (cpool_graph_cache_get), in rounds that alternate the two
 * and flip which goes first. The graph is a small step (one tiny kernel,
 * a host task on the host backend); the cache keeps 64 other keys beside
 * it, so a hit is a lookup in a table of some size. Each round times a
 * batch of launches of one side and synchronizes the stream untimed; the
 * figures are medians over rounds of ns per launch call, and the ratio is
 * the median of each round's cache / plain. Target on the GPU: <= 1.05x.
 * Usage: graph_cache_bench [--smoke] [rounds] [launches-per-round]
 * Defaults: 41 rounds of 2000 launches; --smoke: 5 of 50 (its figures mean
 * nothing).
 */
#include <stdlib.h>

#include "bench_util.h"
#include "capturepool.h"
#include "tick_step.h"

enum { OTHER_KEYS = 64, KEY = 1000 };

int main(int argc, char **argv) {
    bool smoke = bench_smoke(&argc, argv);
    int rounds = argc > 1 ? atoi(argv[1]) : smoke ? 5 : 41;
    int launches = argc > 2 ? atoi(argv[2]) : smoke ? 50 : 2000;
    if (rounds < 1 || launches < 1) {
        fprintf(stderr, "usage: graph_cache_bench [--smoke] [rounds] [launches-per-round]\n");
        return 2;
    }
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bench_open(&dev, &s, &pool);
    tick_step st = {.kernels = 1};
#ifdef CPOOL_HAVE_NVCC
    st.cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA; /* else host tasks, as without kernels */
#endif
    BENCH_CHECK(cpool_alloc(pool, 32 * sizeof(float), s, &st.x));
    BENCH_CHECK(cpool_memset_async(s, st.x, 0, 32 * sizeof(float)));

    cpool_graph_cache *cache;
    BENCH_CHECK(cpool_graph_cache_create(pool, NULL, &cache));
    for (uint64_t k = 0; k < OTHER_KEYS; k++)
        BENCH_CHECK(cpool_graph_cache_launch(cache, k, s, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, &st, NULL));
    bool hit = true;
    BENCH_CHECK(cpool_graph_cache_launch(cache, KEY, s, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, &st, &hit));
    if (hit) {
        fprintf(stderr, "graph_cache_bench: the first launch of the key was a hit\n");
        return 1;
    }
    cpool_graph *g;
    BENCH_CHECK(cpool_graph_cache_get(cache, KEY, &g));
    BENCH_CHECK(cpool_graph_upload(g, s));
    BENCH_CHECK(cpool_stream_synchronize(s));

    double *cached = malloc((size_t)rounds * sizeof *cached), *plain = malloc((size_t)rounds * sizeof *plain);
    double *ratio = malloc((size_t)rounds * sizeof *ratio);
    if (!cached || !plain || !ratio) {
        fprintf(stderr, "graph_cache_bench: out of memory\n");
        return 1;
    }
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < 2; turn++) {
            bool cache_turn = (turn + r) % 2 == 0;
            double t0 = bench_now_ns();
            if (cache_turn)
                for (int i = 0; i < launches; i++)
                    BENCH_CHECK(cpool_graph_cache_launch(cache, KEY, s, CPOOL_CAPTURE_GLOBAL, tick_step_enqueue, &st,
                                                         &hit));
            else
                for (int i = 0; i < launches; i++) BENCH_CHECK(cpool_graph_launch(g, s));
            double ns = (bench_now_ns() - t0) / launches;
            BENCH_CHECK(cpool_stream_synchronize(s));
            if (cache_turn)
                cached[r] = ns;
            else
                plain[r] = ns;
        }
    for (int r = 0; r < rounds; r++) ratio[r] = cached[r] / plain[r];
    double m_ratio = bench_median(ratio, rounds);
    double m_cached = bench_median(cached, rounds), m_plain = bench_median(plain, rounds);

    cpool_graph_cache_stats cs = CPOOL_GRAPH_CACHE_STATS_INIT;
    BENCH_CHECK(cpool_graph_cache_get_stats(cache, &cs));
    printf("graph_cache_bench on the %s backend%s: %d rounds of %d launches each side, %llu keys kept\n",
           st.cuda ? "CUDA" : "host", smoke ? " (smoke run: figures mean nothing)" : "", rounds, launches,
           (unsigned long long)cs.graphs);
    printf("%-34s %12s\n", "", "ns / launch");
    printf("%-34s %12.0f\n", "cpool_graph_launch", m_plain);
    printf("%-34s %12.0f\n", "cpool_graph_cache_launch (a hit)", m_cached);
    printf("cache / plain: %.3fx (median of the rounds' ratios; target on the GPU <= 1.05x)\n", m_ratio);
    printf("csv,graph_cache_bench,%s,%.1f,%.1f,%.4f\n", st.cuda ? "cuda" : "host", m_plain, m_cached, m_ratio);
    if (!hit || cs.hits < (uint64_t)rounds * (uint64_t)launches) {
        fprintf(stderr, "graph_cache_bench: a timed cache launch was not a hit\n");
        return 1;
    }

    free(cached);
    free(plain);
    free(ratio);
    cpool_graph_release(g);
    cpool_graph_cache_destroy(cache);
    BENCH_CHECK(cpool_stream_synchronize(s));
    BENCH_CHECK(cpool_free(pool, st.x, s));
    bench_close(dev, s, pool);
    return 0;
}
