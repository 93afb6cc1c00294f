/*
 * The cost of a growable segment's page: growing a pool by one page (an
 * allocation that maps one) and giving one back (a trim that unmaps it),
 * side by side in one run with a plain device allocation of the same size
 * and its free (cudaMalloc / cudaFree on CUDA, posix_memalign / free on
 * the host backend).
 * Medians of ROUNDS rounds; each round times one operation.
 * Usage: page_bench [ROUNDS]
 */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define PAGE ((size_t)2 << 20)

typedef struct costs {
    double grow, trim;
} costs;

/* One round: an allocation that takes one new page (the pool keeps one
 * live block, so the segment or range exists), then a trim that gives it
 * back. */
static costs pool_round(cpool_pool *pool, cpool_stream *s) {
    void *p;
    double t0 = bench_now_ns();
    BENCH_CHECK(cpool_alloc(pool, PAGE, s, &p));
    double t1 = bench_now_ns();
    BENCH_CHECK(cpool_free(pool, p, s));
    BENCH_CHECK(cpool_stream_synchronize(s));
    double t2 = bench_now_ns();
    BENCH_CHECK(cpool_pool_trim(pool));
    double t3 = bench_now_ns();
    return (costs){t1 - t0, t3 - t2};
}

static costs system_round(int cuda) {
    void *p = NULL;
    double t0 = bench_now_ns(), t1, t2, t3;
#ifdef CPOOL_HAVE_CUDA
    if (cuda) {
        if (cudaMalloc(&p, PAGE) != cudaSuccess) exit(1);
        t1 = bench_now_ns();
        t2 = bench_now_ns();
        cudaFree(p);
        t3 = bench_now_ns();
        return (costs){t1 - t0, t3 - t2};
    }
#endif
    (void)cuda;
    if (posix_memalign(&p, 4096, PAGE) != 0) exit(1);
    memset(p, 0, 1); /* one page of it in use, as a device allocation would be */
    t1 = bench_now_ns();
    t2 = bench_now_ns();
    free(p);
    t3 = bench_now_ns();
    return (costs){t1 - t0, t3 - t2};
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 1) rounds = 1;
    cpool_device *dev;
    cpool_stream *s;
    bench_open(&dev, &s, NULL);
    int cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
    cpool_pool *grow;
    BENCH_CHECK(cpool_pool_create(dev, NULL, &grow));
    if (!cpool_pool_grows_in_place(grow)) {
        printf("page_bench: this platform has no growable segments; nothing to time\n");
        cpool_pool_release(grow);
        bench_close(dev, s, NULL);
        return 0;
    }
    void *keep;
    BENCH_CHECK(cpool_alloc(grow, PAGE, s, &keep));
    double *v[4];
    for (int k = 0; k < 4; k++) v[k] = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) { /* alternated, so that drift hits both alike */
        costs g = pool_round(grow, s), y = system_round(cuda);
        v[0][r] = g.grow, v[1][r] = g.trim, v[2][r] = y.grow, v[3][r] = y.trim;
    }
    double m[4];
    for (int k = 0; k < 4; k++) m[k] = bench_median(v[k], rounds);
    const char *sys = cuda ? "cudaMalloc / cudaFree" : "posix_memalign / free";
    printf("page_bench: backend %s, one %zu MiB page, median of %d rounds (us)\n", cuda ? "cuda" : "host",
           PAGE >> 20, rounds);
    printf("%-34s %12s %12s\n", "", "grow (alloc)", "give back");
    printf("%-34s %12.2f %12.2f\n", "pool, one page (map / unmap)", m[0] / 1e3, m[1] / 1e3);
    printf("%-34s %12.2f %12.2f\n", sys, m[2] / 1e3, m[3] / 1e3);
    printf("%-34s %11.2fx %11.2fx\n", "pool / system", m[0] / m[2], m[1] / m[3]);
    printf("csv,page,%s,%.1f,%.1f,%.1f,%.1f\n", cuda ? "cuda" : "host", m[0], m[1], m[2], m[3]);
    BENCH_CHECK(cpool_free(grow, keep, s));
    cpool_pool_release(grow);
    for (int k = 0; k < 4; k++) free(v[k]);
    bench_close(dev, s, NULL);
    return 0;
}
