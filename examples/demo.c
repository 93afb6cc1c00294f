/*
 * demo: one "training step" of dependent operations, run eagerly and replayed
 * from a graph captured with a capture pool.
 *
 * The step is a small MLP-like chain over a state vector x of n floats:
 *
 *   t1 = 1.5 * x + b1          scale, add bias
 *   t2 = relu(t1)              (t1 freed)
 *   t3 = tanh(-0.75 * t2 + b2) scale, add bias, activation (t2 freed)
 *   loss = sum(t3^2)           partial sums into p, then one sum (p freed)
 *   x = 0.5 * x + 0.5 * t3     the state for the next step (t3 freed)
 *
 * Nine operations; the intermediates t1, t2, t3 and p are allocated from the
 * pool inside the step and freed inside it. Under capture they come from
 * memory the pool keeps for the graph, at the same addresses on every replay.
 *
 * The demo runs the step eagerly K times, captures it once, replays the graph
 * K times from the same starting state, and checks that x and loss are
 * bitwise equal. Then it times both (median of several repeats) and prints
 * a summary: the times, and the pool's statistics at each stage, in one
 * table, each row with a note that says what made its numbers. On the host
 * backend the speed-up of the replay measures the library's host task
 * queue, not a GPU. On CUDA the operations are kernels launched on
 * cpool_stream_native(s) (demo_kernels.cu); on the host backend they are
 * host functions enqueued with cpool_launch_host.
 *
 * With --snapshot PATH it writes a snapshot of the pool to PATH
 * (cpool_pool_write_snapshot) after the replays, while the graph still holds
 * the pool; scripts/snapshot_plot.py draws it.
 *
 * Usage: demo [--quick] [--n ELEMENTS] [--steps K] [--repeats R] [--snapshot PATH]
 * Defaults: n = 16384, K = 500 on CUDA and 100 on the host backend, R = 7.
 * Exit status: 0 if the graph's results match the eager ones, 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <capturepool.h>

#include "demo_ops.h"

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) {                                                                               \
            fprintf(stderr, "demo: %s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, cpool_status_string(st_), \
                    cpool_last_error());                                                                     \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK)                                                                                 \
            return st_;                                                                                      \
    } while (0)

typedef struct demo {
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *pool;
    bool cuda;      /* ops are CUDA kernels (else host functions) */
    bool capturing; /* the step is being captured, not run */
    size_t n;
    float *x, *b1, *b2, *loss; /* persistent device buffers */
} demo;

/* ---- host versions of the operations --------------------------------- */

/* A host op as enqueued: owned ops (eager) are freed by the function after
 * running; captured ops are recorded in the pool, which frees them when the
 * graph and the pool are gone. */
typedef struct host_op {
    demo_op op;
    bool owned;
} host_op;

static void run_host_op(void *arg)
{
    host_op *h = arg;
    const demo_op *o = &h->op;
    size_t n = o->n;
    switch (o->kind) {
    case DEMO_OP_SCALE:
        for (size_t i = 0; i < n; i++)
            o->out[i] = o->a * o->in[i];
        break;
    case DEMO_OP_ADD:
        for (size_t i = 0; i < n; i++)
            o->out[i] += o->in[i];
        break;
    case DEMO_OP_RELU:
        for (size_t i = 0; i < n; i++)
            o->out[i] = o->in[i] > 0.0f ? o->in[i] : 0.0f;
        break;
    case DEMO_OP_TANH:
        for (size_t i = 0; i < n; i++)
            o->out[i] = tanhf(o->out[i]);
        break;
    case DEMO_OP_BLEND:
        for (size_t i = 0; i < n; i++)
            o->out[i] = o->a * o->out[i] + (1.0f - o->a) * o->in[i];
        break;
    case DEMO_OP_SUMSQ_PARTIAL:
        for (size_t j = 0; j < demo_parts(n); j++) {
            size_t end = (j + 1) * DEMO_CHUNK < n ? (j + 1) * DEMO_CHUNK : n;
            float acc = 0.0f;
            for (size_t i = j * DEMO_CHUNK; i < end; i++)
                acc += o->in[i] * o->in[i];
            o->out[j] = acc;
        }
        break;
    case DEMO_OP_SUM: {
        float acc = 0.0f;
        for (size_t i = 0; i < n; i++)
            acc += o->in[i];
        o->out[0] = acc;
        break;
    }
    }
    if (h->owned)
        free(h);
}

/* ---- the step -------------------------------------------------------- */

static cpool_status enqueue(demo *d, demo_op_kind kind, float *out, const float *in, float a, size_t n)
{
    demo_op op = {kind, out, in, a, n};
#ifdef DEMO_HAVE_KERNELS
    if (d->cuda) {
        int err = demo_cuda_launch(cpool_stream_native(d->s), &op);
        if (err != 0) {
            fprintf(stderr, "demo: kernel launch failed: %s\n", demo_cuda_error_string(err));
            return CPOOL_ERR_BACKEND;
        }
        return CPOOL_OK;
    }
#endif
    host_op *h = malloc(sizeof *h);
    if (h == NULL)
        return CPOOL_ERR_OUT_OF_MEMORY;
    bool owned = !d->capturing;
    h->op = op;
    h->owned = owned;
    if (!owned) {
        /* The graph replays this op: its arguments must live as long as the
         * graph. The pool keeps them and frees them after the graph. */
        cpool_status st = cpool_pool_record(d->pool, h, free, NULL);
        if (st != CPOOL_OK) {
            free(h);
            return st;
        }
    }
    /* Once enqueued, an owned op may already have run and freed itself. */
    cpool_status st = cpool_launch_host(d->s, run_host_op, h);
    if (st != CPOOL_OK && owned)
        free(h);
    return st;
}

/* The pool allocations of one step (t1, t2, t3, p), and their KiB. */
enum { EAGER_ALLOCS_PER_STEP = 4 };
static double step_kib(size_t n) { return (3.0 * (double)n + (double)demo_parts(n)) * sizeof(float) / 1024.0; }

static cpool_status alloc_floats(demo *d, size_t count, float **out)
{
    void *p;
    TRY(cpool_alloc(d->pool, count * sizeof(float), d->s, &p));
    *out = p;
    return CPOOL_OK;
}

static cpool_status step(cpool_stream *s, void *ctx)
{
    demo *d = ctx;
    (void)s; /* d->s: the same stream */
    size_t n = d->n;
    float *t1, *t2, *t3, *p;

    TRY(alloc_floats(d, n, &t1));
    TRY(enqueue(d, DEMO_OP_SCALE, t1, d->x, 1.5f, n));
    TRY(enqueue(d, DEMO_OP_ADD, t1, d->b1, 0.0f, n));
    TRY(alloc_floats(d, n, &t2));
    TRY(enqueue(d, DEMO_OP_RELU, t2, t1, 0.0f, n));
    TRY(cpool_free(d->pool, t1, d->s));
    TRY(alloc_floats(d, n, &t3)); /* may reuse t1's block: same stream */
    TRY(enqueue(d, DEMO_OP_SCALE, t3, t2, -0.75f, n));
    TRY(cpool_free(d->pool, t2, d->s));
    TRY(enqueue(d, DEMO_OP_ADD, t3, d->b2, 0.0f, n));
    TRY(enqueue(d, DEMO_OP_TANH, t3, NULL, 0.0f, n));
    TRY(alloc_floats(d, demo_parts(n), &p));
    TRY(enqueue(d, DEMO_OP_SUMSQ_PARTIAL, p, t3, 0.0f, n));
    TRY(enqueue(d, DEMO_OP_SUM, d->loss, p, 0.0f, demo_parts(n)));
    TRY(cpool_free(d->pool, p, d->s));
    TRY(enqueue(d, DEMO_OP_BLEND, d->x, t3, 0.5f, n));
    TRY(cpool_free(d->pool, t3, d->s));
    return CPOOL_OK;
}

/* ---- helpers --------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int count)
{
    qsort(v, (size_t)count, sizeof *v, cmp_double);
    return count % 2 ? v[count / 2] : 0.5 * (v[count / 2 - 1] + v[count / 2]);
}

/* Deterministic pseudo-random floats in [-1, 1). */
static void fill(float *v, size_t n, uint32_t seed)
{
    uint32_t r = seed;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        v[i] = (float)(r >> 8) / (float)(1u << 23) - 1.0f;
    }
}

static void reset_state(demo *d, const float *x0)
{
    CHECK(cpool_memcpy_async(d->s, d->x, x0, d->n * sizeof(float)));
    CHECK(cpool_memset_async(d->s, d->loss, 0, sizeof(float)));
    CHECK(cpool_stream_synchronize(d->s));
}

static void read_state(demo *d, float *x_out, float *loss_out)
{
    CHECK(cpool_memcpy_async(d->s, x_out, d->x, d->n * sizeof(float)));
    CHECK(cpool_memcpy_async(d->s, loss_out, d->loss, sizeof(float)));
    CHECK(cpool_stream_synchronize(d->s));
}

/* The pool's statistics at each stage of the run, printed together at the
 * end (print_summary), each with a note that says what made its numbers. */
enum { MAX_STAGES = 9 };

typedef struct stage {
    const char *when;
    cpool_pool_stats st;
    char note[200];
} stage;

typedef struct stages {
    stage v[MAX_STAGES];
    int count;
    bool grows_in_place; /* the pool's segments (cpool_pool_grows_in_place) */
} stages;

/* The statistics now, with a note (printf format). */
__attribute__((format(printf, 4, 5))) static void take_stats(stages *log, const char *when, const cpool_pool *pool,
                                                             const char *note, ...)
{
    if (log->count == MAX_STAGES)
        return;
    stage *sg = &log->v[log->count++];
    memset(sg, 0, sizeof *sg);
    sg->when = when;
    sg->st.struct_size = sizeof sg->st;
    CHECK(cpool_pool_get_stats(pool, &sg->st));
    va_list ap;
    va_start(ap, note);
    vsnprintf(sg->note, sizeof sg->note, note, ap);
    va_end(ap);
}

/* The allocations made since the last stage taken. */
static unsigned long long allocs_since_last(const stages *log, const cpool_pool *pool)
{
    cpool_pool_stats now = CPOOL_POOL_STATS_INIT;
    CHECK(cpool_pool_get_stats(pool, &now));
    return now.alloc_count - (log->count ? log->v[log->count - 1].st.alloc_count : 0);
}

/* The captured body: the step, then the pool's statistics at its end,
 * while the capture still holds every page it mapped (the peak). */
typedef struct captured_step {
    demo *d;
    stages *log;
} captured_step;

static cpool_status step_and_look(cpool_stream *s, void *ctx)
{
    captured_step *c = ctx;
    cpool_status st = step(s, c->d);
    if (st == CPOOL_OK)
        take_stats(c->log, "inside the capture", c->d->pool,
                   "the step's %d allocations mapped graph pages: its scratch, and a packed page for its "
                   "blocks of up to 4 KiB; the eager pages stay cached",
                   EAGER_ALLOCS_PER_STEP);
    return st;
}

static void print_summary(const stages *log, bool cuda, int repeats, int steps, double eager_s, double graph_s,
                          uint64_t replays, size_t n)
{
    printf("\nsummary\n");
    printf("  time per step (median of %d runs of %d steps): eager %.2f us, graph %.2f us, eager/graph %.2fx\n",
           repeats, steps, eager_s * 1e6, graph_s * 1e6, eager_s / graph_s);
    if (!cuda)
        printf("  (host backend: eager/graph measures the library's host task queue, not a GPU: the operations are host functions)\n");
    printf("  graph replays: %llu (%d checked against the eager run, then %d timed runs of %d); intermediates per "
           "step: %.1f KiB\n",
           (unsigned long long)replays, steps, repeats, steps, step_kib(n));
    printf("  pool statistics, in KiB:\n"
           "    reserved: device memory the pool holds; graph: the part of it kept for graphs;\n"
           "    peak: the highest reserved since the pool's creation (the row where it first shows is its moment);\n"
           "    allocated: live allocations; allocs, frees: counts since the pool's creation;\n"
           "    segments: %s\n",
           log->grows_in_place ? "runs of mapped pages: the eager segment, the packed region (graph blocks of up\n"
                                 "    to 4 KiB) and each graph's address range; a range whose page is borrowed from "
                                 "the packed region\n"
                                 "    counts as a segment but holds no bytes of its own"
                               : "plain, one device allocation each (no virtual memory management here, or turned off)");
    printf("    %-26s %10s %10s %10s %10s %8s %8s %8s\n", "stage", "reserved", "graph", "peak", "allocated",
           "segments", "allocs", "frees");
    for (int i = 0; i < log->count; i++) {
        const cpool_pool_stats *st = &log->v[i].st;
        printf("    %-26s %10.1f %10.1f %10.1f %10.1f %8llu %8llu %8llu\n", log->v[i].when,
               st->reserved_bytes / 1024.0, st->graph_reserved_bytes / 1024.0, st->reserved_bytes_peak / 1024.0,
               st->allocated_bytes / 1024.0, (unsigned long long)st->segment_count,
               (unsigned long long)st->alloc_count, (unsigned long long)st->free_count);
        if (log->v[i].note[0])
            printf("      %s\n", log->v[i].note);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: demo [--quick] [--n ELEMENTS] [--steps K] [--repeats R] [--snapshot PATH]\n"
                    "  --snapshot PATH  write a JSON snapshot of the pool after the replays\n");
    exit(2);
}

static long parse_positive(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v <= 0)
        usage();
    return v;
}

/* ---- main ------------------------------------------------------------ */

int main(int argc, char **argv)
{
    size_t n = 16384;
    int steps = 0, repeats = 7; /* steps 0: the backend's default */
    const char *snapshot_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            n = 4096;
            steps = 20;
            repeats = 3;
        } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n = (size_t)parse_positive(argv[++i]);
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = (int)parse_positive(argv[++i]);
        } else if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
            repeats = (int)parse_positive(argv[++i]);
        } else if (strcmp(argv[i], "--snapshot") == 0 && i + 1 < argc) {
            snapshot_path = argv[++i];
        } else {
            usage();
        }
    }

    demo d;
    memset(&d, 0, sizeof d);
    d.n = n;
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d.dev));
#ifdef DEMO_HAVE_KERNELS
    d.cuda = cpool_device_backend(d.dev) == CPOOL_BACKEND_CUDA;
#else
    if (cpool_device_backend(d.dev) == CPOOL_BACKEND_CUDA) {
        printf("demo: built without nvcc, so it has no CUDA kernels: using the host backend\n");
        cpool_device_close(d.dev);
        CHECK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &d.dev));
    }
#endif
    if (steps == 0)
        steps = d.cuda ? 500 : 100; /* the host backend's steps take far longer */
    printf("capturepool %s, backend %s, n = %zu floats, %d steps per run, %d runs\n", cpool_version_string(),
           d.cuda ? "CUDA (kernels)" : "host (cpool_launch_host)", n, steps, repeats);

    CHECK(cpool_stream_create(d.dev, &d.s));
    CHECK(cpool_pool_create(d.dev, NULL, &d.pool));

    /* Persistent buffers: allocated outside any capture, freed at the end. */
    CHECK(alloc_floats(&d, n, &d.x));
    CHECK(alloc_floats(&d, n, &d.b1));
    CHECK(alloc_floats(&d, n, &d.b2));
    CHECK(alloc_floats(&d, 1, &d.loss));

    float *x0 = malloc(n * sizeof(float));
    float *host_b = malloc(n * sizeof(float));
    float *ref_x = malloc(n * sizeof(float));
    float *got_x = malloc(n * sizeof(float));
    double *t_eager = malloc((size_t)repeats * sizeof(double));
    double *t_graph = malloc((size_t)repeats * sizeof(double));
    if (!x0 || !host_b || !ref_x || !got_x || !t_eager || !t_graph) {
        fprintf(stderr, "demo: out of host memory\n");
        return 2;
    }
    fill(x0, n, 1);
    fill(host_b, n, 2);
    CHECK(cpool_memcpy_async(d.s, d.b1, host_b, n * sizeof(float)));
    CHECK(cpool_stream_synchronize(d.s)); /* host_b is reused right below */
    fill(host_b, n, 3);
    CHECK(cpool_memcpy_async(d.s, d.b2, host_b, n * sizeof(float)));
    CHECK(cpool_stream_synchronize(d.s));

    stages log;
    memset(&log, 0, sizeof log);
    take_stats(&log, "after the inputs", d.pool,
               "x, b1, b2 and loss, live to the end; reserved: the pages mapped for them");

    /* 1. Eager reference: K steps from x0. */
    float ref_loss, got_loss;
    reset_state(&d, x0);
    for (int k = 0; k < steps; k++)
        CHECK(step(d.s, &d));
    read_state(&d, ref_x, &ref_loss);
    take_stats(&log, "after the eager steps", d.pool,
               "%d eager steps: %d allocations each (t1, t2, t3, p), freed in the step", steps,
               EAGER_ALLOCS_PER_STEP);

    /* 2. Capture one step, with the pool: its intermediates come from
     *    memory the pool keeps for the graph. */
    cpool_graph *graph;
    d.capturing = true;
    captured_step body = {&d, &log};
    CHECK(cpool_capture(d.s, d.pool, CPOOL_CAPTURE_GLOBAL, step_and_look, &body, &graph));
    d.capturing = false;
    CHECK(cpool_graph_upload(graph, d.s));
    /* Less reserved than inside the capture: its last scratch page, filled
     * only in part, borrowed the packed page's free bottom at the end. */
    cpool_pool_stats after = CPOOL_POOL_STATS_INIT;
    CHECK(cpool_pool_get_stats(d.pool, &after));
    bool settled = log.count && after.reserved_bytes < log.v[log.count - 1].st.reserved_bytes;
    take_stats(&log, "after the capture", d.pool, "the step's %.1f KiB kept for the graph%s", step_kib(n),
               settled ? "; at the capture's end its last scratch page, filled only in part, borrowed the packed "
                         "page's free bottom, and its own page went back"
                       : "");

    /* 3. Replay K times from x0 and compare bit for bit. */
    reset_state(&d, x0);
    for (int k = 0; k < steps; k++)
        CHECK(cpool_graph_launch(graph, d.s));
    read_state(&d, got_x, &got_loss);
    take_stats(&log, "after the replays", d.pool, "%d replays: they allocate nothing", steps);
    if (snapshot_path) {
        /* The graph still holds the pool: its memory is in the picture. */
        CHECK(cpool_pool_write_snapshot(d.pool, snapshot_path));
        printf("pool snapshot written to %s\n", snapshot_path);
    }

    int mismatch = 0;
    size_t first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&ref_x[i], &got_x[i], sizeof(float)) != 0) {
            if (mismatch++ == 0)
                first_bad = i;
        }
    }
    bool loss_ok = memcmp(&ref_loss, &got_loss, sizeof(float)) == 0;
    printf("results after %d steps: eager loss %.9g, graph loss %.9g; x: %d of %zu elements differ\n", steps,
           (double)ref_loss, (double)got_loss, mismatch, n);
    if (mismatch || !loss_ok) {
        if (mismatch)
            printf("  first difference at x[%zu]: eager %.9g, graph %.9g\n", first_bad, (double)ref_x[first_bad],
                   (double)got_x[first_bad]);
        printf("FAIL: the graph's results differ from the eager ones\n");
        return 1;
    }

    /* 4. Time both: wall clock for K steps, ending with a synchronize. */
    for (int r = 0; r < repeats; r++) {
        reset_state(&d, x0);
        double t0 = now_s();
        for (int k = 0; k < steps; k++)
            CHECK(step(d.s, &d));
        CHECK(cpool_stream_synchronize(d.s));
        t_eager[r] = (now_s() - t0) / steps;

        reset_state(&d, x0);
        t0 = now_s();
        for (int k = 0; k < steps; k++)
            CHECK(cpool_graph_launch(graph, d.s));
        CHECK(cpool_stream_synchronize(d.s));
        t_graph[r] = (now_s() - t0) / steps;
    }
    double me = median(t_eager, repeats), mg = median(t_graph, repeats);
    uint64_t replays = cpool_graph_replays(graph);
    take_stats(&log, "after the timed runs", d.pool,
               "%d timed runs of %d eager steps (%llu allocations) and of %d replays (none)", repeats, steps,
               allocs_since_last(&log, d.pool), steps);

    /* 5. Tear down. The graph holds its own reference to the pool. */
    cpool_graph_release(graph);
    CHECK(cpool_free(d.pool, d.x, d.s));
    CHECK(cpool_free(d.pool, d.b1, d.s));
    CHECK(cpool_free(d.pool, d.b2, d.s));
    CHECK(cpool_free(d.pool, d.loss, d.s));
    CHECK(cpool_stream_synchronize(d.s));
    take_stats(&log, "after the graph's release", d.pool,
               "the inputs freed; graph memory stays reserved for later captures into this pool until a trim");
    CHECK(cpool_pool_trim(d.pool)); /* no graph holds the pool now: all of it can go */
    take_stats(&log, "after a trim", d.pool,
               "no graph holds the pool: a trim gives everything back (peak: since creation)");
    log.grows_in_place = cpool_pool_grows_in_place(d.pool);
    cpool_pool_release(d.pool);
    cpool_stream_destroy(d.s);
    cpool_device_close(d.dev);
    free(x0);
    free(host_b);
    free(ref_x);
    free(got_x);
    free(t_eager);
    free(t_graph);
    print_summary(&log, d.cuda, repeats, steps, me, mg, replays, n);
    printf("OK: graph results match the eager run bit for bit\n");
    return 0;
}
