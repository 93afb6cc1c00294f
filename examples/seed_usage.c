/*
 * seed_usage: the typical use of capturepool that README.md ("Usage") shows,
 * as a program; include/capturepool.h states each call's promises.
 *
 * Two buffers that the captured work uses are handed to a pool with
 * cpool_pool_record; the pool is sealed, the work is captured with it, the
 * caller drops its own reference to the pool right after the capture, and the
 * graph is launched and released. The buffers must be freed exactly then:
 * after the graph's last reference is gone and its launch has finished, a
 * before b. The program checks that and says what happened.
 *
 * On the CUDA backend the buffers come from cudaMalloc and are given back
 * with cudaFree; on the host backend from malloc and free. The captured work
 * is a fill of a and a copy of a into b (kernels on cpool_stream_native(s)
 * would do as well); each drop reads its buffer before freeing it, so it
 * also shows that the launch had finished.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <capturepool.h>
#ifdef CPOOL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* Exits with a message when a call does not return CPOOL_OK. */
#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) {                                                                               \
            fprintf(stderr, "seed_usage: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                  \
                    cpool_status_string(st_), cpool_last_error());                                           \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

#define N 1024         /* floats per buffer */
#define PATTERN 0x2a   /* the byte the captured work writes */

static cpool_backend backend;

/* What the drops saw, filled on whatever thread the pool drops on. */
static uintptr_t allocated[2]; /* the buffers' addresses, in allocation order */
static int allocated_count;
static uintptr_t drop_order[2];
static int drop_saw_pattern[2];
static atomic_int drops_started, drops_done;

static void *alloc_device_buffer(size_t bytes)
{
    void *p = NULL;
#ifdef CPOOL_HAVE_CUDA
    if (backend == CPOOL_BACKEND_CUDA) {
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
            fprintf(stderr, "seed_usage: cudaMalloc/cudaMemset failed\n");
            exit(1);
        }
    } else
#endif
    {
        p = calloc(1, bytes);
        if (p == NULL) {
            fprintf(stderr, "seed_usage: out of host memory\n");
            exit(1);
        }
    }
    if (allocated_count < 2)
        allocated[allocated_count++] = (uintptr_t)p;
    return p;
}

/* The drop the pool calls: notes what the graph wrote, then frees. */
static void free_device_buffer(void *buf)
{
    unsigned char head[64];
#ifdef CPOOL_HAVE_CUDA
    if (backend == CPOOL_BACKEND_CUDA) {
        if (cudaMemcpy(head, buf, sizeof head, cudaMemcpyDeviceToHost) != cudaSuccess)
            memset(head, 0, sizeof head);
    } else
#endif
    {
        memcpy(head, buf, sizeof head);
    }
    int i = atomic_fetch_add(&drops_started, 1);
    if (i < 2) {
        int seen = 1;
        for (size_t k = 0; k < sizeof head; k++)
            seen &= head[k] == PATTERN;
        drop_order[i] = (uintptr_t)buf;
        drop_saw_pattern[i] = seen;
    }
#ifdef CPOOL_HAVE_CUDA
    if (backend == CPOOL_BACKEND_CUDA)
        cudaFree(buf);
    else
#endif
        free(buf);
    atomic_fetch_add(&drops_done, 1);
}

static void expect_no_drops(const char *when)
{
    if (atomic_load(&drops_started) != 0) {
        fprintf(stderr, "FAIL: a buffer was dropped %s\n", when);
        exit(1);
    }
    printf("  no buffer dropped %s\n", when);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(void)
{
    cpool_device *dev;
    cpool_stream *stream;
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &dev));
    backend = cpool_device_backend(dev);
#ifndef CPOOL_HAVE_CUDA
    if (backend == CPOOL_BACKEND_CUDA) {
        fprintf(stderr, "seed_usage: built without the CUDA toolkit but the library opened a CUDA device\n");
        return 1;
    }
#endif
    printf("capturepool %s on the %s backend\n", cpool_version_string(),
           backend == CPOOL_BACKEND_CUDA ? "CUDA" : "host");
    CHECK(cpool_stream_create(dev, &stream));

    /* ---- the seed's usage (README.md shows this part) ---- */
    cpool_pool *pool;
    CHECK(cpool_pool_create(dev, NULL, &pool));

    float *a = alloc_device_buffer(N * sizeof(float)); /* cudaMalloc, or malloc on the host backend */
    float *b = alloc_device_buffer(N * sizeof(float));
    CHECK(cpool_pool_record(pool, a, free_device_buffer, NULL)); /* the pool now owns a and b */
    CHECK(cpool_pool_record(pool, b, free_device_buffer, NULL));

    cpool_pool_seal(pool);
    CHECK(cpool_capture_begin(stream, pool, CPOOL_CAPTURE_GLOBAL));
    /* recorded into the graph, not run; kernels on cpool_stream_native(stream) are captured alike */
    CHECK(cpool_memset_async(stream, a, PATTERN, N * sizeof(float)));
    CHECK(cpool_memcpy_async(stream, b, a, N * sizeof(float)));
    cpool_graph *graph;
    CHECK(cpool_capture_end(stream, &graph));
    cpool_pool_release(pool); /* safe: the graph holds its own reference */
    CHECK(cpool_graph_launch(graph, stream));
    expect_no_drops("while the graph lives");
    cpool_graph_release(graph); /* last reference: a, then b, are dropped once the launch finished */
    /* ---- end of the seed's usage ---- */

    printf("captured a fill of a and a copy a -> b (%d floats each) with a sealed pool owning both,\n"
           "released the pool, launched the graph once and released it\n", N);

    /* The drops happen once the launch has finished, on a thread of the
     * library or of this program; wait for them, within limits. */
    double t0 = now_ms();
    while (atomic_load(&drops_done) < 2 && now_ms() - t0 < 10000.0) {
        cpool_stream_synchronize(stream);
        cpool_wait_deferred();
        if (atomic_load(&drops_done) < 2) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    int done = atomic_load(&drops_done);
    int ok = 1;
    if (done != 2) {
        fprintf(stderr, "FAIL: %d of 2 buffers dropped after the graph's release\n", done);
        ok = 0;
    } else {
        printf("  both buffers dropped %.1f ms after the graph's release\n", now_ms() - t0);
        if (drop_order[0] != allocated[0] || drop_order[1] != allocated[1]) {
            fprintf(stderr, "FAIL: the buffers were not dropped in registration order (a, then b)\n");
            ok = 0;
        } else {
            printf("  dropped in registration order: a, then b\n");
        }
        if (!drop_saw_pattern[0] || !drop_saw_pattern[1]) {
            fprintf(stderr, "FAIL: a drop ran before the graph's work had written its buffer\n");
            ok = 0;
        } else {
            printf("  each drop saw the graph's writes: the launch had finished\n");
        }
    }

    cpool_stream_destroy(stream);
    cpool_device_close(dev);
    printf(ok ? "OK\n" : "FAIL\n");
    return ok ? 0 : 1;
}
