/*
 * two_stream: a step that runs on two streams, captured into one graph.
 *
 * The compute stream `s` works on the state x while the copy stream `c`
 * saves a checkpoint of x at the start of the step:
 *
 *        s: ---- record fork ---- y = relu(1.5 * x + b) ---- wait join ---- x = (x + y) / 2
 *                    |                                           ^
 *        c:      wait fork ---- hist = x (through a scratch) ---- record join
 *
 * An event recorded on the capturing stream and waited for by `c` forks `c`
 * into the capture; an event recorded on `c` and waited for by `s` joins it
 * back. The capture can only end on `s`, and only once `c` joined. The join
 * is also what keeps the last operation (which overwrites x) after the
 * checkpoint's read of x, eagerly and in every replay.
 *
 * Both streams allocate their scratch from the pool: under capture those
 * blocks are reserved for the graph, at the same address on every replay,
 * and a block is never handed to a branch that may run at the same time.
 *
 * The program runs K steps eagerly, captures one step, replays it K times
 * from the same start, and compares x and hist byte for byte.
 * Exit status: 0 if they match, 1 if not, 2 on an error.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <capturepool.h>

#include "demo_ops.h"

/* CHECK: exit on failure (main's setup); TRY: hand the status back (the step). */
#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        cpool_status st_ = (call);                                                                         \
        if (st_ != CPOOL_OK) {                                                                             \
            fprintf(stderr, "two_stream: line %d: %s: %s (%s)\n", __LINE__, #call, cpool_status_string(st_), \
                    cpool_last_error());                                                                   \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)
#define TRY(call)                                                                                          \
    do {                                                                                                   \
        cpool_status st_ = (call);                                                                         \
        if (st_ != CPOOL_OK) return st_;                                                                   \
    } while (0)

typedef struct app {
    cpool_stream *s, *c; /* compute, copies */
    cpool_pool *pool;
    cpool_event *fork, *join;
    bool cuda, capturing;
    size_t n;
    float *x, *b, *y, *hist; /* persistent buffers */
} app;

/* Host versions of the demo's operations used here (demo_kernels.cu has the
 * CUDA ones). An eager op frees itself; a captured one is replayed, so the
 * pool keeps it as long as the graph (cpool_pool_record). */
typedef struct host_op { demo_op op; bool owned; } host_op;

static void run_host_op(void *arg)
{
    host_op *h = arg;
    const demo_op *o = &h->op;
    for (size_t i = 0; i < o->n; i++) {
        if (o->kind == DEMO_OP_SCALE)
            o->out[i] = o->a * o->in[i];
        else if (o->kind == DEMO_OP_ADD)
            o->out[i] += o->in[i];
        else if (o->kind == DEMO_OP_RELU)
            o->out[i] = o->in[i] > 0.0f ? o->in[i] : 0.0f;
        else if (o->kind == DEMO_OP_BLEND)
            o->out[i] = o->a * o->out[i] + (1.0f - o->a) * o->in[i];
    }
    if (h->owned)
        free(h);
}

static cpool_status enqueue(app *p, cpool_stream *s, demo_op_kind kind, float *out, const float *in, float a)
{
    demo_op op = {kind, out, in, a, p->n};
#ifdef DEMO_HAVE_KERNELS
    if (p->cuda) /* a kernel on the stream's cudaStream_t: captured like any other work */
        return demo_cuda_launch(cpool_stream_native(s), &op) == 0 ? CPOOL_OK : CPOOL_ERR_BACKEND;
#endif
    host_op *h = malloc(sizeof *h);
    if (h == NULL)
        return CPOOL_ERR_OUT_OF_MEMORY;
    *h = (host_op){op, !p->capturing};
    if (p->capturing && cpool_pool_record(p->pool, h, free, NULL) != CPOOL_OK) {
        free(h);
        return CPOOL_ERR_OUT_OF_MEMORY;
    }
    bool owned = h->owned; /* once enqueued, an owned op may already have freed itself */
    cpool_status st = cpool_launch_host(s, run_host_op, h);
    if (st != CPOOL_OK && owned)
        free(h);
    return st;
}

/* One step; the same code runs eagerly and under capture. */
static cpool_status step(cpool_stream *s, void *ctx)
{
    app *p = ctx;
    size_t bytes = p->n * sizeof(float);
    void *t, *snap;
    /* Fork: c's work from here on comes after s's work so far. */
    TRY(cpool_event_record(p->fork, s));
    TRY(cpool_stream_wait_event(p->c, p->fork));
    /* Compute on s: y = relu(1.5 * x + b). */
    TRY(cpool_alloc(p->pool, bytes, s, &t));
    TRY(enqueue(p, s, DEMO_OP_SCALE, t, p->x, 1.5f));
    TRY(enqueue(p, s, DEMO_OP_ADD, t, p->b, 0.0f));
    TRY(enqueue(p, s, DEMO_OP_RELU, p->y, t, 0.0f));
    TRY(cpool_free(p->pool, t, s));
    /* Copies on c, at the same time: the checkpoint hist = x. */
    TRY(cpool_alloc(p->pool, bytes, p->c, &snap));
    TRY(cpool_memcpy_async(p->c, snap, p->x, bytes));
    TRY(cpool_memcpy_async(p->c, p->hist, snap, bytes));
    TRY(cpool_free(p->pool, snap, p->c));
    /* Join: s goes on only after c's copies, which read the x it overwrites. */
    TRY(cpool_event_record(p->join, p->c));
    TRY(cpool_stream_wait_event(s, p->join));
    return enqueue(p, s, DEMO_OP_BLEND, p->x, p->y, 0.5f);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts from x0, runs `steps` steps (eagerly, or graph launches), reads x
 * and hist back into out (2n floats); returns the time per step. */
static double run(app *p, cpool_graph *g, int steps, const float *x0, float *out)
{
    size_t bytes = p->n * sizeof(float);
    CHECK(cpool_memcpy_async(p->s, p->x, x0, bytes));
    CHECK(cpool_memset_async(p->s, p->hist, 0, bytes));
    CHECK(cpool_stream_synchronize(p->s));
    double t0 = now_s();
    for (int k = 0; k < steps; k++)
        CHECK(g ? cpool_graph_launch(g, p->s) : step(p->s, p));
    CHECK(cpool_stream_synchronize(p->s)); /* c joined s in every step */
    double per_step = (now_s() - t0) / steps;
    CHECK(cpool_memcpy_async(p->s, out, p->x, bytes));
    CHECK(cpool_memcpy_async(p->s, out + p->n, p->hist, bytes));
    CHECK(cpool_stream_synchronize(p->s));
    return per_step;
}

int main(void)
{
    app p;
    memset(&p, 0, sizeof p);
    p.n = 1 << 16;
    cpool_device *dev;
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &dev));
#ifdef DEMO_HAVE_KERNELS
    p.cuda = cpool_device_backend(dev) == CPOOL_BACKEND_CUDA;
#else
    if (cpool_device_backend(dev) == CPOOL_BACKEND_CUDA) { /* no kernels were built: run on the CPU */
        cpool_device_close(dev);
        CHECK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev));
    }
#endif
    int steps = p.cuda ? 200 : 50;
    size_t bytes = p.n * sizeof(float);
    CHECK(cpool_stream_create(dev, &p.s));
    CHECK(cpool_stream_create(dev, &p.c));
    CHECK(cpool_pool_create(dev, NULL, &p.pool));
    CHECK(cpool_event_create(dev, &p.fork));
    CHECK(cpool_event_create(dev, &p.join));
    void *bufs[4];
    for (int i = 0; i < 4; i++) /* x, b, y, hist: plain blocks, allocated outside capture */
        CHECK(cpool_alloc(p.pool, bytes, p.s, &bufs[i]));
    p.x = bufs[0], p.b = bufs[1], p.y = bufs[2], p.hist = bufs[3];

    float *x0 = malloc(bytes), *ref = malloc(2 * bytes), *got = malloc(2 * bytes);
    if (!x0 || !ref || !got)
        return 2;
    for (size_t i = 0; i < p.n; i++) /* deterministic values in [-1, 1) */
        x0[i] = (float)((i * 7919u) % 2000u) / 1000.0f - 1.0f;
    CHECK(cpool_memcpy_async(p.s, p.b, x0 + 1, bytes - sizeof(float))); /* b: x0 shifted by one */
    CHECK(cpool_memset_async(p.s, p.b + p.n - 1, 0, sizeof(float)));

    double t_eager = run(&p, NULL, steps, x0, ref);

    cpool_graph *g;
    p.capturing = true;
    CHECK(cpool_capture(p.s, p.pool, CPOOL_CAPTURE_GLOBAL, step, &p, &g));
    p.capturing = false;
    double t_graph = run(&p, g, steps, x0, got);

    bool x_ok = memcmp(ref, got, bytes) == 0, hist_ok = memcmp(ref + p.n, got + p.n, bytes) == 0;
    printf("two_stream: backend %s, n = %zu floats, %d steps\n", p.cuda ? "CUDA" : "host", p.n, steps);
    printf("  %-8s %12s %9s %12s\n", "run", "us per step", "x equal", "hist equal");
    printf("  %-8s %12.2f %9s %12s\n", "eager", t_eager * 1e6, "-", "-");
    printf("  %-8s %12.2f %9s %12s\n", "replay", t_graph * 1e6, x_ok ? "yes" : "no", hist_ok ? "yes" : "no");

    cpool_graph_release(g);
    for (int i = 0; i < 4; i++)
        CHECK(cpool_free(p.pool, bufs[i], p.s));
    cpool_event_destroy(p.join);
    cpool_event_destroy(p.fork);
    cpool_pool_release(p.pool);
    cpool_stream_destroy(p.c);
    cpool_stream_destroy(p.s);
    cpool_device_close(dev);
    free(x0), free(ref), free(got);
    if (!x_ok || !hist_ok) {
        printf("FAIL: the replays' results differ from the eager run\n");
        return 1;
    }
    return 0;
}
