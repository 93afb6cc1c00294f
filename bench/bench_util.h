/* Timing helpers shared by the benchmarks: a monotonic clock and medians. */
#ifndef CPOOL_BENCH_UTIL_H
#define CPOOL_BENCH_UTIL_H


#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capturepool.h"

static inline double bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n samples (sorts them). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Whether the first argument is --smoke: a run of a few milliseconds that
 * only shows the benchmark builds and runs (the test suite's smoke runs);
 * its figures mean nothing. The flag is taken out of argv, so the other
 * arguments keep their places. */
static inline bool bench_smoke(int *argc, char **argv) {
    if (*argc < 2 || strcmp(argv[1], "--smoke") != 0) return false;
    for (int i = 1; i < *argc; i++) argv[i] = argv[i + 1];
    (*argc)--;
    return true;
}

#define BENCH_CHECK(call)                                                                          \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        if (rc_ != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #call, rc_,          \
                    cpool_last_error());                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Opens the default device (CPOOL_BACKEND_AUTO), a stream on it and, where
 * pool is not NULL, a pool. Exits on failure. */
static inline void bench_open(cpool_device **dev, cpool_stream **s, cpool_pool **pool) {
    BENCH_CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, dev));
    BENCH_CHECK(cpool_stream_create(*dev, s));
    if (pool) BENCH_CHECK(cpool_pool_create(*dev, NULL, pool));
}

static inline void bench_close(cpool_device *dev, cpool_stream *s, cpool_pool *pool) {
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_device_close(dev);
}

#endif
