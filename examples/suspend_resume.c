/*
 * suspend_resume: an engine that gives its GPU memory to another program
 * and takes it back, without capturing its graphs again.
 *
 * The engine keeps its weights (w1, w2, w3) in one pool and its graphs and
 * caches in another: the request's input x, and two graphs captured once,
 * "prefill" over n elements and "decode" over n / 8, each a few operations
 * that read the weights and write an output of its own that the graph keeps
 * (allocated under capture with cpool_alloc_output):
 *
 *   t1 = 1.5 * x + w1;  t2 = relu(t1);  out = tanh(-0.75 * t2 + w2);  out = (out + w3) / 2
 *
 * It replays both graphs and saves their outputs as the reference, then
 * suspends both pools; while they are suspended another program takes most
 * of the device's memory and gives it back; then the engine resumes, writes
 * the input again, replays, and checks that both outputs are bitwise equal
 * to the reference. A table shows each pool's memory at every stage.
 *
 * The modes, and why the final check is honest with them:
 *  - weights: CPOOL_SUSPEND_KEEP_CONTENTS. Nothing else has their bytes; the
 *    pool copies them to host memory and back.
 *  - graphs and caches: CPOOL_SUSPEND_DISCARD. A replay rewrites its scratch
 *    and its output from x and the weights, and the engine writes x anew
 *    for every request, so no byte of this pool is worth a copy. The
 *    outputs computed before the suspend do not survive it: the reference
 *    is the host copy taken before, and the check compares it with what
 *    the replays after the resume write. An engine whose outputs or caches
 *    must survive (a KV cache between two requests) suspends that pool with
 *    KEEP_CONTENTS instead and pays for the copy of those bytes.
 *
 * The other program: on CUDA it is a cudaMalloc of all but 512 MiB of what
 * cudaMemGetInfo says is free; on the host backend, whose device is as
 * large as CPOOL_HOST_MEMORY says (this program sets 256M when it is
 * unset: the machine's whole memory would be a poor model of a GPU), it is
 * a pool of its own on the same device that takes 2 MiB blocks until the
 * device refuses. "Device free" is cudaMemGetInfo's free memory on CUDA and,
 * on the host backend, what such a pool could take (probed, then given
 * back). While the other program holds the memory the engine tries once to
 * resume its weights: that fails with CPOOL_ERR_OUT_OF_MEMORY (where the
 * memory left is too small), and the pool stays suspended until a later
 * resume succeeds.
 *
 * On CUDA the operations are the demo's kernels (demo_kernels.cu) launched on
 * cpool_stream_native(s); on the host backend they are host functions
 * enqueued with cpool_launch_host.
 *
 * Usage: suspend_resume [--n ELEMENTS]   (default: 64M floats on CUDA, 1M on the host backend)
 * Exit status: 0 if the replays after the resume match those before, 1 if
 * not, 2 on an error.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <capturepool.h>

#include "demo_ops.h"

#ifdef DEMO_HAVE_KERNELS
#include <cuda_runtime_api.h>
#endif

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK) {                                                                               \
            fprintf(stderr, "suspend_resume: line %d: %s: %s (%s)\n", __LINE__, #call,                      \
                    cpool_status_string(st_), cpool_last_error());                                           \
            exit(2);                                                                                         \
        }                                                                                                    \
    } while (0)
#define TRY(call)                                                                                            \
    do {                                                                                                     \
        cpool_status st_ = (call);                                                                           \
        if (st_ != CPOOL_OK)                                                                                 \
            return st_;                                                                                      \
    } while (0)

#define MIB (1024.0 * 1024.0)

typedef struct engine {
    cpool_device *dev;
    cpool_stream *s;
    cpool_pool *weights; /* w1, w2, w3: suspended with KEEP_CONTENTS */
    cpool_pool *graphs;  /* x, the graphs' scratch and outputs: suspended with DISCARD */
    bool cuda, capturing;
    float *w1, *w2, *w3, *x;
} engine;

/* One of the engine's graphs: the elements it works on and its output. */
typedef struct step {
    engine *e;
    size_t n;
    float *out; /* set by the capture */
    cpool_graph *graph;
} step;

/* ---- the operations: kernels on CUDA, host functions otherwise ---------- */

/* A host op as enqueued: an eager one frees itself; a captured one is
 * replayed, so the graphs' pool keeps it as long as the graphs
 * (cpool_pool_record). */
typedef struct host_op {
    demo_op op;
    bool owned;
} host_op;

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
        else if (o->kind == DEMO_OP_TANH)
            o->out[i] = tanhf(o->out[i]);
        else if (o->kind == DEMO_OP_BLEND)
            o->out[i] = o->a * o->out[i] + (1.0f - o->a) * o->in[i];
    }
    if (h->owned)
        free(h);
}

static cpool_status enqueue(engine *e, demo_op_kind kind, float *out, const float *in, float a, size_t n)
{
    demo_op op = {kind, out, in, a, n};
#ifdef DEMO_HAVE_KERNELS
    if (e->cuda)
        return demo_cuda_launch(cpool_stream_native(e->s), &op) == 0 ? CPOOL_OK : CPOOL_ERR_BACKEND;
#endif
    host_op *h = malloc(sizeof *h);
    if (h == NULL)
        return CPOOL_ERR_OUT_OF_MEMORY;
    *h = (host_op){op, !e->capturing};
    if (e->capturing && cpool_pool_record(e->graphs, h, free, NULL) != CPOOL_OK) {
        free(h);
        return CPOOL_ERR_OUT_OF_MEMORY;
    }
    bool owned = h->owned; /* once enqueued, an owned op may already have freed itself */
    cpool_status st = cpool_launch_host(e->s, run_host_op, h);
    if (st != CPOOL_OK && owned)
        free(h);
    return st;
}

/* The step's body, captured once per graph: scratch t1 and t2 from the
 * graphs' pool (shared by both graphs), the output kept by the graph. */
static cpool_status step_body(cpool_stream *s, void *ctx)
{
    step *st = ctx;
    engine *e = st->e;
    size_t n = st->n, bytes = n * sizeof(float);
    void *t1, *t2, *out;
    TRY(cpool_alloc(e->graphs, bytes, s, &t1));
    TRY(enqueue(e, DEMO_OP_SCALE, t1, e->x, 1.5f, n));
    TRY(enqueue(e, DEMO_OP_ADD, t1, e->w1, 0.0f, n));
    TRY(cpool_alloc(e->graphs, bytes, s, &t2));
    TRY(enqueue(e, DEMO_OP_RELU, t2, t1, 0.0f, n));
    TRY(cpool_free(e->graphs, t1, s));
    TRY(cpool_alloc_output(e->graphs, bytes, s, &out));
    TRY(enqueue(e, DEMO_OP_SCALE, out, t2, -0.75f, n));
    TRY(cpool_free(e->graphs, t2, s));
    TRY(enqueue(e, DEMO_OP_ADD, out, e->w2, 0.0f, n));
    TRY(enqueue(e, DEMO_OP_TANH, out, NULL, 0.0f, n));
    TRY(enqueue(e, DEMO_OP_BLEND, out, e->w3, 0.5f, n));
    st->out = out;
    return CPOOL_OK;
}

/* ---- memory of the device, and the other program ------------------------ */

/* Deterministic pseudo-random floats in [-1, 1). */
static void fill(float *v, size_t n, uint32_t seed)
{
    uint32_t r = seed;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        v[i] = (float)(r >> 8) / (float)(1u << 23) - 1.0f;
    }
}

enum { HOST_BLOCK = 2 << 20, MAX_HOST_BLOCKS = 1 << 16 };

/* The other program on the host backend: a pool of its own on the device,
 * filled with 2 MiB blocks until the device refuses (at most `limit`
 * bytes). Returns the pool (release it to give the memory back) and the
 * bytes it holds. */
static cpool_pool *host_tenant_fill(engine *e, uint64_t limit, uint64_t *taken)
{
    cpool_pool *tenant;
    CHECK(cpool_pool_create(e->dev, NULL, &tenant));
    *taken = 0;
    for (int i = 0; i < MAX_HOST_BLOCKS && *taken + HOST_BLOCK <= limit; i++) {
        void *p;
        cpool_status st = cpool_alloc(tenant, HOST_BLOCK, e->s, &p);
        if (st == CPOOL_ERR_OUT_OF_MEMORY)
            break;
        CHECK(st);
        *taken += HOST_BLOCK;
    }
    return tenant;
}

/* The device's free memory: cudaMemGetInfo on CUDA; on the host backend
 * what another pool could take, probed and given back at once. */
static uint64_t device_free(engine *e)
{
#ifdef DEMO_HAVE_KERNELS
    if (e->cuda) {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            fprintf(stderr, "suspend_resume: cudaMemGetInfo failed\n");
            exit(2);
        }
        return free_b;
    }
#endif
    uint64_t taken;
    cpool_pool_release(host_tenant_fill(e, UINT64_MAX, &taken));
    return taken;
}

/* What the other program holds while it runs. */
typedef struct tenant {
    cpool_pool *pool; /* host backend */
    void *cuda_block; /* CUDA */
    uint64_t bytes;
} tenant;

static tenant tenant_start(engine *e)
{
    tenant t = {NULL, NULL, 0};
#ifdef DEMO_HAVE_KERNELS
    if (e->cuda) {
        /* All but 512 MiB of the free memory, stepping down where the
         * allocator wants more room than that. */
        const uint64_t margin = 512ull << 20;
        uint64_t free_b = device_free(e);
        for (uint64_t want = free_b > margin ? free_b - margin : 0; want >= margin; want -= margin) {
            if (cudaMalloc(&t.cuda_block, want) == cudaSuccess) {
                t.bytes = want;
                return t;
            }
            (void)cudaGetLastError();
        }
        fprintf(stderr, "suspend_resume: the other program could not allocate\n");
        exit(2);
    }
#endif
    t.pool = host_tenant_fill(e, UINT64_MAX, &t.bytes);
    return t;
}

static void tenant_stop(tenant *t)
{
#ifdef DEMO_HAVE_KERNELS
    if (t->cuda_block && cudaFree(t->cuda_block) != cudaSuccess) {
        fprintf(stderr, "suspend_resume: cudaFree failed\n");
        exit(2);
    }
#endif
    cpool_pool_release(t->pool);
    t->pool = NULL;
    t->cuda_block = NULL;
}

/* ---- the table ------------------------------------------------------------ */

enum { MAX_ROWS = 10 };

typedef struct row {
    const char *stage;
    cpool_pool_stats w, g;
    uint64_t device_free;
} row;

typedef struct table {
    row v[MAX_ROWS];
    int count;
} table;

static void take_row(table *tb, engine *e, const char *stage)
{
    if (tb->count == MAX_ROWS)
        return;
    row *r = &tb->v[tb->count++];
    r->stage = stage;
    r->w = (cpool_pool_stats)CPOOL_POOL_STATS_INIT;
    r->g = (cpool_pool_stats)CPOOL_POOL_STATS_INIT;
    CHECK(cpool_pool_get_stats(e->weights, &r->w));
    CHECK(cpool_pool_get_stats(e->graphs, &r->g));
    r->device_free = device_free(e);
}

static void print_table(const table *tb)
{
    printf("\n%-34s | %9s %9s %9s | %9s %9s %9s | %11s\n", "stage (MiB)", "weights", "kept", "host",
           "graphs", "graph mem", "kept", "device free");
    for (int i = 0; i < tb->count; i++) {
        const row *r = &tb->v[i];
        printf("%-34s | %9.1f %9.1f %9.1f | %9.1f %9.1f %9.1f | %11.1f\n", r->stage, r->w.reserved_bytes / MIB,
               r->w.host_kept_bytes / MIB, r->w.host_reserved_bytes / MIB, r->g.reserved_bytes / MIB,
               r->g.graph_reserved_bytes / MIB, r->g.host_kept_bytes / MIB, r->device_free / MIB);
    }
    printf("weights, graphs: reserved_bytes of each pool; graph mem: the graphs' part; kept: host_kept_bytes "
           "(bytes of live blocks in host memory while suspended); host: host_reserved_bytes (the host "
           "buffer, kept after the resume until cpool_pool_trim)\n");
}

/* ---- main ------------------------------------------------------------------ */

static void write_floats(engine *e, float *dst, const float *src, size_t n)
{
    CHECK(cpool_memcpy_async(e->s, dst, src, n * sizeof(float)));
    CHECK(cpool_stream_synchronize(e->s));
}

static void read_floats(engine *e, float *dst, const float *src, size_t n)
{
    CHECK(cpool_memcpy_async(e->s, dst, src, n * sizeof(float)));
    CHECK(cpool_stream_synchronize(e->s));
}

/* Replays both graphs from the input x0 and copies their outputs out. */
static void serve(engine *e, step *steps, int count, const float *x0, size_t n, float **outs)
{
    write_floats(e, e->x, x0, n);
    for (int i = 0; i < count; i++)
        CHECK(cpool_graph_launch(steps[i].graph, e->s));
    for (int i = 0; i < count; i++)
        read_floats(e, outs[i], steps[i].out, steps[i].n);
}

int main(int argc, char **argv)
{
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc && (n = strtoul(argv[++i], &end, 10)) >= 8 && !*end)
            continue;
        fprintf(stderr, "usage: suspend_resume [--n ELEMENTS (8 or more)]\n");
        return 2;
    }
    /* Read by the host backend only, when the device is opened. */
    setenv("CPOOL_HOST_MEMORY", "256M", 0);

    engine e;
    memset(&e, 0, sizeof e);
    CHECK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &e.dev));
#ifdef DEMO_HAVE_KERNELS
    e.cuda = cpool_device_backend(e.dev) == CPOOL_BACKEND_CUDA;
#else
    if (cpool_device_backend(e.dev) == CPOOL_BACKEND_CUDA) {
        printf("suspend_resume: built without nvcc, so it has no CUDA kernels: using the host backend\n");
        cpool_device_close(e.dev);
        CHECK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &e.dev));
    }
#endif
    if (n == 0)
        n = e.cuda ? (size_t)64 << 20 : (size_t)1 << 20;
    size_t bytes = n * sizeof(float);
    printf("capturepool %s, backend %s, n = %zu floats (%.1f MiB a buffer)\n", cpool_version_string(),
           e.cuda ? "CUDA (kernels)" : "host (cpool_launch_host)", n, bytes / MIB);
    if (!e.cuda)
        printf("host backend: the device holds CPOOL_HOST_MEMORY=%s\n", getenv("CPOOL_HOST_MEMORY"));

    CHECK(cpool_stream_create(e.dev, &e.s));
    CHECK(cpool_pool_create(e.dev, NULL, &e.weights));
    CHECK(cpool_pool_create(e.dev, NULL, &e.graphs));

    float *host = malloc(bytes), *x0 = malloc(bytes);
    float *ref[2] = {malloc(bytes), malloc(bytes)}, *got[2] = {malloc(bytes), malloc(bytes)};
    if (!host || !x0 || !ref[0] || !ref[1] || !got[0] || !got[1]) {
        fprintf(stderr, "suspend_resume: out of host memory\n");
        return 2;
    }

    /* The weights: allocated once, written from the host. */
    float **weights[3] = {&e.w1, &e.w2, &e.w3};
    for (int i = 0; i < 3; i++) {
        void *p;
        CHECK(cpool_alloc(e.weights, bytes, e.s, &p));
        *weights[i] = p;
        fill(host, n, 10u + (uint32_t)i);
        write_floats(&e, p, host, n);
    }
    /* The input, in the graphs' pool: every request writes it anew. */
    void *xp;
    CHECK(cpool_alloc(e.graphs, bytes, e.s, &xp));
    e.x = xp;
    fill(x0, n, 1);

    /* Capture each graph once. */
    step steps[2] = {{&e, n, NULL, NULL}, {&e, n / 8, NULL, NULL}};
    const char *names[2] = {"prefill", "decode"};
    e.capturing = true;
    for (int i = 0; i < 2; i++)
        CHECK(cpool_capture(e.s, e.graphs, CPOOL_CAPTURE_GLOBAL, step_body, &steps[i], &steps[i].graph));
    e.capturing = false;

    table tb;
    memset(&tb, 0, sizeof tb);
    serve(&e, steps, 2, x0, n, ref);
    take_row(&tb, &e, "captured and replayed");

    /* Suspend: the weights' bytes go to host memory, the rest is given back. */
    CHECK(cpool_pool_suspend(e.weights, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK(cpool_pool_suspend(e.graphs, CPOOL_SUSPEND_DISCARD));
    cpool_status refused = cpool_graph_launch(steps[0].graph, e.s);
    printf("a replay while suspended: %s\n", cpool_status_string(refused));
    if (refused != CPOOL_ERR_SUSPENDED) {
        fprintf(stderr, "FAIL: a graph of a suspended pool launched (%s)\n", cpool_status_string(refused));
        return 1;
    }
    take_row(&tb, &e, "both pools suspended");

    /* The other program takes most of the device, and the engine cannot
     * come back while it holds it. */
    tenant other = tenant_start(&e);
    printf("the other program holds %.1f MiB\n", other.bytes / MIB);
    take_row(&tb, &e, "the other program holds memory");
    cpool_status early = cpool_pool_resume(e.weights);
    printf("resume of the weights meanwhile: %s; the pool %s suspended\n", cpool_status_string(early),
           cpool_pool_is_suspended(e.weights) ? "stays" : "is no longer");
    if (early != CPOOL_OK && (early != CPOOL_ERR_OUT_OF_MEMORY || !cpool_pool_is_suspended(e.weights))) {
        fprintf(stderr, "FAIL: %s (%s)\n", cpool_status_string(early), cpool_last_error());
        return 1;
    }
    if (early == CPOOL_OK) /* there was room after all: suspend it again for the rest of the story */
        CHECK(cpool_pool_suspend(e.weights, CPOOL_SUSPEND_KEEP_CONTENTS));
    tenant_stop(&other);
    take_row(&tb, &e, "the other program gave it back");

    /* Resume at the same addresses; the graphs launch as they are. */
    CHECK(cpool_pool_resume(e.weights));
    CHECK(cpool_pool_resume(e.graphs));
    take_row(&tb, &e, "both pools resumed");
    serve(&e, steps, 2, x0, n, got);
    take_row(&tb, &e, "replayed again");
    CHECK(cpool_pool_trim(e.weights)); /* the host buffer of the copy goes too */
    take_row(&tb, &e, "weights trimmed");
    print_table(&tb);

    int failed = 0;
    for (int i = 0; i < 2; i++) {
        size_t differ = 0;
        for (size_t k = 0; k < steps[i].n; k++)
            differ += memcmp(&ref[i][k], &got[i][k], sizeof(float)) != 0;
        printf("%-8s output: %zu of %zu elements differ from the replay before the suspend\n", names[i], differ,
               steps[i].n);
        failed |= differ != 0;
    }

    for (int i = 0; i < 2; i++)
        cpool_graph_release(steps[i].graph);
    for (int i = 0; i < 3; i++)
        CHECK(cpool_free(e.weights, *weights[i], e.s));
    CHECK(cpool_free(e.graphs, e.x, e.s));
    CHECK(cpool_stream_synchronize(e.s));
    cpool_pool_release(e.weights);
    cpool_pool_release(e.graphs);
    cpool_stream_destroy(e.s);
    cpool_device_close(e.dev);
    free(host);
    free(x0);
    for (int i = 0; i < 2; i++)
        free(ref[i]), free(got[i]);
    if (failed) {
        printf("FAIL: the replays after the resume differ from those before\n");
        return 1;
    }
    printf("OK: the replays after the resume match those before bit for bit\n");
    return 0;
}
