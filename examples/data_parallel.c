/*
 * A data-parallel training step on every visible GPU: each GPU computes the
 * gradient of its own shard of the data, an NCCL all-reduce sums the
 * gradients of all GPUs, and each GPU updates its copy of the weights. The
 * step is captured once per GPU into a graph, with a pool whose memory is
 * registered with the GPU's communicator (capturepool_nccl.h), and
 * replayed. One thread per GPU, as NCCL asks of one process with several.
 *
 * It runs the steps eagerly, then from the same start as graph replays,
 * checks that every GPU ends with the same weights both ways (and that all
 * GPUs agree), and prints the time per step of both and what each GPU's pool
 * holds. With one GPU the all-reduce is a single rank's.
 * Usage: data_parallel [steps]   (default 200)
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capturepool.h"
#include "capturepool_nccl.h"
#include "data_parallel_ops.h"

#define N (1 << 22) /* weights per GPU: 16 MiB */
#define MAX_GPUS 8

typedef struct gpu {
    int ordinal, count, steps;
    ncclComm_t comm;
    pthread_barrier_t *phase; /* the GPUs move from eager to graph together */
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    float *w, *x;                  /* device: for the whole run */
    float *w_eager, *w_graph;      /* host: the weights after each way */
    double eager_us, graph_us;     /* per step */
    cpool_pool_stats stats;        /* after the replays */
    size_t registrations;
    char error[256];
} gpu;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Records the first failure of g; returns whether `ok`. */
static int ok_or(gpu *g, int ok, const char *what) {
    if (!ok && !g->error[0]) snprintf(g->error, sizeof g->error, "GPU %d: %s: %s", g->ordinal, what, cpool_last_error());
    return ok;
}
#define TRY(g, st) ok_or((g), (st) == CPOOL_OK, #st)

/* One step on g's stream: the gradient of its shard (scratch from the
 * pool, gone by the step's end), the all-reduce that sums every GPU's, the
 * update with their mean. */
static int step(gpu *g) {
    void *native = cpool_stream_native(g->s);
    float *grad = NULL;
    if (!TRY(g, cpool_alloc(g->pool, N * sizeof(float), g->s, (void **)&grad))) return 0;
    int ok = ok_or(g, dp_grad(native, g->x, g->w, grad, N) == 0, "the gradient kernel") &&
             ok_or(g, ncclAllReduce(grad, grad, N, ncclFloat, ncclSum, g->comm, (cudaStream_t)native) == ncclSuccess,
                   "ncclAllReduce") &&
             ok_or(g, dp_update(native, g->w, grad, 0.01f / (float)g->count, N) == 0, "the update kernel");
    return TRY(g, cpool_free(g->pool, grad, g->s)) && ok;
}

/* The same starting weights on every GPU, data of its own. */
static int upload_start(gpu *g, float *host) {
    for (int i = 0; i < N; i++) host[i] = (float)(i % 97) * 0.01f;
    if (!TRY(g, cpool_memcpy_async(g->s, g->w, host, N * sizeof(float)))) return 0;
    for (int i = 0; i < N; i++) host[i] = (float)((i + 31 * g->ordinal) % 89) * 0.02f - 0.5f;
    return TRY(g, cpool_memcpy_async(g->s, g->x, host, N * sizeof(float))) && TRY(g, cpool_stream_synchronize(g->s));
}

static int reset_weights(gpu *g, float *host) {
    for (int i = 0; i < N; i++) host[i] = (float)(i % 97) * 0.01f;
    return TRY(g, cpool_memcpy_async(g->s, g->w, host, N * sizeof(float))) && TRY(g, cpool_stream_synchronize(g->s));
}

static int download(gpu *g, float *host) {
    return TRY(g, cpool_memcpy_async(g->s, host, g->w, N * sizeof(float))) && TRY(g, cpool_stream_synchronize(g->s));
}

static int eager_and_graph(gpu *g, float *host) {
    if (!upload_start(g, host)) return 0;
    /* One step first, not timed: the pool's first segment (and its
     * registration) and NCCL's own setup. */
    if (!step(g) || !TRY(g, cpool_stream_synchronize(g->s)) || !reset_weights(g, host)) return 0;
    pthread_barrier_wait(g->phase);
    double t0 = now_us();
    for (int k = 0; k < g->steps; k++)
        if (!step(g)) return 0;
    if (!TRY(g, cpool_stream_synchronize(g->s))) return 0;
    g->eager_us = (now_us() - t0) / g->steps;
    if (!download(g, g->w_eager) || !reset_weights(g, host)) return 0;

    /* Thread-local capture: the other GPUs' threads go on with their own
     * CUDA calls meanwhile. */
    pthread_barrier_wait(g->phase);
    cpool_graph *graph = NULL;
    if (!TRY(g, cpool_capture_begin(g->s, g->pool, CPOOL_CAPTURE_THREAD_LOCAL))) return 0;
    int captured = step(g);
    if (!TRY(g, cpool_capture_end(g->s, &graph)) || !captured) return 0;
    pthread_barrier_wait(g->phase);
    t0 = now_us();
    int ok = 1;
    for (int k = 0; k < g->steps && ok; k++) ok = TRY(g, cpool_graph_launch(graph, g->s));
    ok = ok && TRY(g, cpool_stream_synchronize(g->s));
    g->graph_us = (now_us() - t0) / g->steps;
    ok = ok && download(g, g->w_graph);
    g->stats = (cpool_pool_stats)CPOOL_POOL_STATS_INIT;
    ok = ok && TRY(g, cpool_pool_get_stats(g->pool, &g->stats));
    g->registrations = cpool_nccl_registration_count(g->pool);
    cpool_graph_release(graph);
    return ok;
}

static void *run_gpu(void *arg) {
    gpu *g = arg;
    float *host = malloc(N * sizeof(float));
    int ok = host && ok_or(g, dp_set_device(g->ordinal) == 0, "cudaSetDevice") &&
             TRY(g, cpool_device_open(CPOOL_BACKEND_CUDA, g->ordinal, &g->dev)) && TRY(g, cpool_stream_create(g->dev, &g->s)) &&
             TRY(g, cpool_nccl_pool_create(g->dev, g->comm, NULL, &g->pool)) &&
             TRY(g, cpool_alloc(g->pool, N * sizeof(float), g->s, (void **)&g->w)) &&
             TRY(g, cpool_alloc(g->pool, N * sizeof(float), g->s, (void **)&g->x));
    if (ok) ok = eager_and_graph(g, host);
    if (!ok) {
        /* The other GPUs wait at the barriers and in the all-reduce: a
         * failure on one GPU ends the program. */
        fprintf(stderr, "data_parallel: %s\n", g->error[0] ? g->error : "out of host memory");
        exit(1);
    }
    TRY(g, cpool_free(g->pool, g->w, g->s));
    TRY(g, cpool_free(g->pool, g->x, g->s));
    cpool_pool_release(g->pool);
    cpool_stream_destroy(g->s);
    cpool_device_close(g->dev);
    free(host);
    return NULL;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    if (steps < 1) steps = 1;
    int count = 0;
    cpool_device *probe = NULL;
    if (cpool_device_open(CPOOL_BACKEND_CUDA, 0, &probe) != CPOOL_OK) {
        printf("data_parallel: no CUDA device (%s): nothing to run\n", cpool_last_error());
        return 0;
    }
    cpool_device_close(probe);
    while (count < MAX_GPUS) {
        if (cpool_device_open(CPOOL_BACKEND_CUDA, count, &probe) != CPOOL_OK) break;
        cpool_device_close(probe);
        count++;
    }
    ncclComm_t comms[MAX_GPUS];
    if (ncclCommInitAll(comms, count, NULL) != ncclSuccess) {
        fprintf(stderr, "data_parallel: ncclCommInitAll over %d GPUs failed\n", count);
        return 1;
    }
    pthread_barrier_t phase;
    pthread_barrier_init(&phase, NULL, (unsigned)count);
    gpu g[MAX_GPUS];
    pthread_t threads[MAX_GPUS];
    memset(g, 0, sizeof g);
    for (int i = 0; i < count; i++) {
        g[i] = (gpu){.ordinal = i, .count = count, .steps = steps, .comm = comms[i], .phase = &phase,
                     .w_eager = malloc(N * sizeof(float)), .w_graph = malloc(N * sizeof(float))};
        if (!g[i].w_eager || !g[i].w_graph) return 1;
        pthread_create(&threads[i], NULL, run_gpu, &g[i]);
    }
    for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);

    /* Eager and graph agree on every GPU, and every GPU holds the same weights. */
    double worst = 0;
    for (int i = 0; i < count; i++)
        for (int k = 0; k < N; k++) {
            double ref = g[0].w_eager[k];
            double d1 = fabs(g[i].w_graph[k] - g[i].w_eager[k]), d2 = fabs(g[i].w_eager[k] - ref);
            double scale = fabs(ref) > 1 ? fabs(ref) : 1;
            if (d1 / scale > worst) worst = d1 / scale;
            if (d2 / scale > worst) worst = d2 / scale;
        }
    printf("data_parallel: %d GPU(s), %d steps of %d weights each; all-reduce over NCCL\n", count, steps, N);
    printf("  %-6s %14s %14s %12s %12s %14s\n", "GPU", "eager us/step", "graph us/step", "eager/graph", "pool MiB",
           "registrations");
    for (int i = 0; i < count; i++)
        printf("  %-6d %14.1f %14.1f %11.2fx %12.1f %14zu\n", i, g[i].eager_us, g[i].graph_us,
               g[i].eager_us / g[i].graph_us, (double)g[i].stats.reserved_bytes / (1 << 20), g[i].registrations);
    printf("  largest difference, graph against eager and GPU against GPU 0 (relative): %.2g\n", worst);
    for (int i = 0; i < count; i++) /* for scripts/bench_report.py */
        printf("csv,dp,%d,%d,%.2f,%.2f,%llu,%zu\n", i, count, g[i].eager_us, g[i].graph_us,
               (unsigned long long)g[i].stats.reserved_bytes, g[i].registrations);
    for (int i = 0; i < count; i++) {
        ncclCommDestroy(comms[i]);
        free(g[i].w_eager);
        free(g[i].w_graph);
    }
    pthread_barrier_destroy(&phase);
    if (worst > 1e-5) {
        printf("FAILED: the replays and the eager steps differ\n");
        return 1;
    }
    printf("OK: the replays match the eager steps on every GPU\n");
    return 0;
}
