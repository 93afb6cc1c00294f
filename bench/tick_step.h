/* The step the graph benchmarks capture: `kernels` tiny kernels that each add
 * 1 to 32 floats at x (host tasks doing the same on the host backend). */
#ifndef CPOOL_BENCH_TICK_STEP_H
#define CPOOL_BENCH_TICK_STEP_H

#include <stdbool.h>

#include "capturepool.h"
#ifdef CPOOL_HAVE_NVCC
#include "bench_kernels.h"
#endif

typedef struct tick_step {
    int kernels;
    bool cuda; /* real kernels on the stream; else host tasks */
    void *x;   /* 32 floats: device memory (CUDA) or host memory */
} tick_step;

static inline void tick_host(void *arg) {
    float *x = (float *)arg;
    for (int i = 0; i < 32; i++) x[i] += 1.0f;
}

static inline cpool_status tick_step_enqueue(cpool_stream *s, void *ctx) {
    tick_step *st = (tick_step *)ctx;
    for (int i = 0; i < st->kernels; i++) {
#ifdef CPOOL_HAVE_NVCC
        if (st->cuda) {
            if (bench_tick(cpool_stream_native(s), (float *)st->x) != 0) return CPOOL_ERR_BACKEND;
            continue;
        }
#endif
        cpool_status rc = cpool_launch_host(s, tick_host, st->x);
        if (rc != CPOOL_OK) return rc;
    }
    return CPOOL_OK;
}

#endif
