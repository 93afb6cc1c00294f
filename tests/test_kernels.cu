/* CUDA only: real kernels captured into graphs whose buffers come from
 * cpool_alloc, on one stream and on two branches of a multi-stream capture,
 * allocation under GLOBAL capture while the pool grows, a graph
 * released while its kernels still run, capture_begin on a stream captured
 * outside capturepool, host work in forked and outside captures, and
 * kernels of a second GPU on the first one's pool memory. Skips visibly
 * without a GPU. */
#include <string.h>

#include <cuda_runtime.h>

#include "check.h"
#include "helpers.h"

static int check_cuda_(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 1;
    check_report_(file, line, "%s returned %s: %s", call, cudaGetErrorName(e), cudaGetErrorString(e));
    return 0;
}
#define CHECK_CUDA(call) check_cuda_((call), #call, __FILE__, __LINE__)

static cudaStream_t native(cpool_stream *s) { return (cudaStream_t)cpool_stream_native(s); }

/* ---- kernels ------------------------------------------------------------------------ */

__global__ void k_fill(float *y, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
__global__ void k_axpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void k_scale_add(float *y, float s, float c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * s + c;
}
__device__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* Spins ~ns nanoseconds, then writes buf and raises a flag in mapped host memory. */
__global__ void k_spin_then_write(unsigned long long ns, float *buf, int n, volatile int *done) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        unsigned long long t0 = global_ns();
        while (global_ns() - t0 < ns) {
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = 7.0f;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system();
        *done = 1;
    }
}

static unsigned blocks_for(int n) { return (unsigned)((n + 255) / 256); }

/* The computation, enqueued on s: y = 0.9 * (y + 0.5 * (3 * x + 2)) + 1 with a
 * temporary taken from the pool on s (under capture: graph memory). */
static void enqueue_step(cpool_pool *pool, cpool_stream *s, const float *x, float *y, int n) {
    void *tmp = NULL;
    if (!CHECK_OK(cpool_alloc(pool, (size_t)n * sizeof(float), s, &tmp))) return;
    k_fill<<<blocks_for(n), 256, 0, native(s)>>>((float *)tmp, 2.0f, n);
    k_axpy<<<blocks_for(n), 256, 0, native(s)>>>(3.0f, x, (float *)tmp, n);
    k_axpy<<<blocks_for(n), 256, 0, native(s)>>>(0.5f, (const float *)tmp, y, n);
    k_scale_add<<<blocks_for(n), 256, 0, native(s)>>>(y, 0.9f, 1.0f, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_OK(cpool_free(pool, tmp, s));
}

/* ---- captured kernels replay like eager ones ------------------------------------- */

static void kernels_replay_matches_eager(cpool_device *dev) {
    const int n = 1 << 16, reps = 3;
    const size_t bytes = (size_t)n * sizeof(float);
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *x = NULL, *y = NULL, *xe = NULL, *ye = NULL;
    float *hx = (float *)malloc(bytes), *hy = (float *)malloc(bytes), *he = (float *)malloc(bytes);
    int i, bad = 0;
    REQUIRE(hx && hy && he);
    for (i = 0; i < n; i++) {
        hx[i] = (float)(i % 17) * 0.5f;
        hy[i] = 1.0f + (float)(i % 5);
    }
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, bytes, s, &x));
    REQUIRE_OK(cpool_alloc(pool, bytes, s, &y));
    REQUIRE_OK(cpool_alloc(pool, bytes, s, &xe));
    REQUIRE_OK(cpool_alloc(pool, bytes, s, &ye));
    CHECK_OK(cpool_memcpy_async(s, x, hx, bytes));
    CHECK_OK(cpool_memcpy_async(s, xe, hx, bytes));
    CHECK_OK(cpool_memcpy_async(s, y, hy, bytes));
    CHECK_OK(cpool_memcpy_async(s, ye, hy, bytes));
    CHECK_OK(cpool_stream_synchronize(s));

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    enqueue_step(pool, s, (const float *)x, (float *)y, n);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_GT(stats_of(pool).graph_reserved_bytes, 0);
    /* Captured, not run. */
    CHECK_OK(read_back(s, he, y, bytes));
    CHECK(memcmp(he, hy, bytes) == 0);

    CHECK_OK(cpool_graph_upload(g, s));
    for (i = 0; i < reps; i++) {
        CHECK_OK(cpool_graph_launch(g, s));
        enqueue_step(pool, s, (const float *)xe, (float *)ye, n);
    }
    CHECK_OK(read_back(s, hy, y, bytes));
    CHECK_OK(read_back(s, he, ye, bytes));
    for (i = 0; i < n && bad < 5; i++) {
        if (hy[i] != he[i]) {
            check_report_(__FILE__, __LINE__, "element %d: graph %g, eager %g", i, (double)hy[i], (double)he[i]);
            bad++;
        }
    }
    CHECK_EQ(cpool_graph_replays(g), reps);
    cpool_graph_release(g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, x, s));
    CHECK_OK(cpool_free(pool, y, s));
    CHECK_OK(cpool_free(pool, xe, s));
    CHECK_OK(cpool_free(pool, ye, s));
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    free(hx);
    free(hy);
    free(he);
}

/* Under a GLOBAL-mode capture the pool grows (new segments from the device)
 * for the capture and for a second, non-capturing stream; the capture stays
 * valid and the graph computes the right thing. */
static void global_capture_while_pool_grows(cpool_device *dev) {
    static const size_t sizes[] = {1u << 20, 64u << 20, 256u << 20, 3u << 20};
    enum { K = sizeof sizes / sizeof sizes[0] };
    const int n = 4096;
    cpool_stream *s = NULL, *other = NULL;
    cpool_pool *pool = NULL, *side = NULL;
    cpool_graph *g = NULL;
    cpool_capture_state state;
    void *bufs[K], *out = NULL, *eager = NULL;
    uint64_t segs_before;
    int i;
    float h[4096];
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &other));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &side));
    REQUIRE_OK(cpool_alloc(pool, (size_t)n * sizeof(float) * K, s, &out));
    CHECK_OK(cpool_memset_async(s, out, 0, (size_t)n * sizeof(float) * K));
    CHECK_OK(cpool_stream_synchronize(s));
    segs_before = stats_of(pool).segment_count;

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    for (i = 0; i < K; i++) {
        REQUIRE_OK(cpool_alloc(pool, sizes[i], s, &bufs[i]));
        k_fill<<<blocks_for(n), 256, 0, native(s)>>>((float *)bufs[i], (float)(i + 1), n);
        k_axpy<<<blocks_for(n), 256, 0, native(s)>>>(1.0f, (const float *)bufs[i], (float *)out + (size_t)i * n, n);
    }
    /* Another stream, not capturing, grows another pool meanwhile. */
    CHECK_OK(cpool_alloc(side, 128u << 20, other, &eager));
    if (eager) k_fill<<<blocks_for(n), 256, 0, native(other)>>>((float *)eager, 5.0f, n);
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
    for (i = 0; i < K; i++) CHECK_OK(cpool_free(pool, bufs[i], s));
    CHECK_CUDA(cudaGetLastError());
    REQUIRE_OK(cpool_capture_end(s, &g));
    if (eager) {
        CHECK_OK(read_back(other, h, eager, sizeof h));
        CHECK(h[0] == 5.0f && h[n - 1] == 5.0f);
        CHECK_OK(cpool_free(side, eager, other));
    }
    CHECK_GT(stats_of(pool).segment_count, segs_before);
    CHECK_GE(stats_of(pool).graph_reserved_bytes, (256u << 20));

    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    for (i = 0; i < K; i++) {
        CHECK_OK(read_back(s, h, (float *)out + (size_t)i * n, sizeof h));
        CHECK(h[0] == 2.0f * (float)(i + 1));
        CHECK(h[n - 1] == 2.0f * (float)(i + 1));
    }
    cpool_graph_release(g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, out, s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_pool_release(side);
    cpool_stream_destroy(s);
    cpool_stream_destroy(other);
}

/* ---- a graph released while its kernel still runs ----------------------------------- */

typedef struct device_buffer {
    float *ptr;             /* cudaMalloc'd, owned by the pool once recorded */
    volatile int *done;     /* raised by the kernel when it finished with ptr */
    int done_at_drop;
    cudaError_t free_error; /* what cudaFree said inside the drop */
    int drops;
} device_buffer;

static void drop_device_buffer(void *object) {
    device_buffer *b = (device_buffer *)object;
    b->done_at_drop = b->done ? *b->done : -1;
    b->free_error = cudaFree(b->ptr);
    ainc(&b->drops);
}

static void graph_released_while_kernel_runs(cpool_device *dev) {
    static device_buffer buf;
    const int n = 1 << 20;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    int *done_host = NULL, *done_dev = NULL;
    void *scratch = NULL;
    memset(&buf, 0, sizeof buf);
    REQUIRE(CHECK_CUDA(cudaHostAlloc((void **)&done_host, sizeof(int), cudaHostAllocMapped)));
    REQUIRE(CHECK_CUDA(cudaHostGetDevicePointer((void **)&done_dev, done_host, 0)));
    *(volatile int *)done_host = 0;
    REQUIRE(CHECK_CUDA(cudaMalloc((void **)&buf.ptr, (size_t)n * sizeof(float))));
    buf.done = done_host;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &buf, drop_device_buffer, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, (size_t)n * sizeof(float), s, &scratch));
    k_spin_then_write<<<1, 256, 0, native(s)>>>(80ull * 1000 * 1000, buf.ptr, n, done_dev);
    k_axpy<<<blocks_for(n), 256, 0, native(s)>>>(1.0f, buf.ptr, (float *)scratch, n);
    CHECK_OK(cpool_free(pool, scratch, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool);
    CHECK_OK(cpool_graph_launch(g, s));
    cpool_graph_release(g); /* the kernel is still spinning */
    CHECK(wait_for_int(&buf.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&buf.drops), 1);
    CHECK_EQ(buf.done_at_drop, 1);              /* dropped only after the kernel finished */
    CHECK_EQ((int)buf.free_error, (int)cudaSuccess); /* on an ordinary thread */
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_CUDA(cudaGetLastError());
    cpool_stream_destroy(s);
    CHECK_CUDA(cudaFreeHost(done_host));
}

/* The last pool reference goes inside a host callback; the drop calls
 * cudaFree, which a stream callback may not: it must be deferred. */
typedef struct release_arg {
    cpool_pool *pool;
} release_arg;
static void cb_release(void *arg) { cpool_pool_release(((release_arg *)arg)->pool); }

static void cudafree_drop_after_release_in_callback(cpool_device *dev) {
    static device_buffer buf;
    static release_arg r;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    memset(&buf, 0, sizeof buf);
    REQUIRE(CHECK_CUDA(cudaMalloc((void **)&buf.ptr, 4096)));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &buf, drop_device_buffer, NULL));
    r.pool = pool;
    CHECK_OK(cpool_launch_host(s, cb_release, &r));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_wait_deferred();
    CHECK_EQ(aload(&buf.drops), 1);
    CHECK_EQ((int)buf.free_error, (int)cudaSuccess);
    cpool_stream_destroy(s);
}

/* A stream the user created, wrapped: capture and kernels on it; destroying
 * the wrapper leaves the user's stream alive. */
static void wrapped_user_stream_capture(cpool_device *dev) {
    const int n = 1024;
    cudaStream_t user;
    cpool_stream *w = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *y = NULL, *tmp = NULL;
    float h[1024];
    REQUIRE(CHECK_CUDA(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking)));
    REQUIRE_OK(cpool_stream_wrap(dev, (void *)user, &w));
    CHECK_PTR_EQ(cpool_stream_native(w), user);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, sizeof h, w, &y));
    k_fill<<<blocks_for(n), 256, 0, user>>>((float *)y, 1.0f, n);
    REQUIRE_OK(cpool_capture_begin(w, pool, CPOOL_CAPTURE_THREAD_LOCAL));
    CHECK_OK(cpool_alloc(pool, sizeof h, w, &tmp));
    k_fill<<<blocks_for(n), 256, 0, user>>>((float *)tmp, 2.0f, n);
    k_axpy<<<blocks_for(n), 256, 0, user>>>(1.0f, (const float *)tmp, (float *)y, n);
    CHECK_OK(cpool_free(pool, tmp, w));
    REQUIRE_OK(cpool_capture_end(w, &g));
    CHECK_OK(cpool_graph_launch(g, w));
    CHECK_OK(cpool_graph_launch(g, w));
    CHECK_OK(read_back(w, h, y, sizeof h));
    CHECK(h[0] == 5.0f && h[n - 1] == 5.0f);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, w));
    cpool_pool_release(pool);
    cpool_stream_destroy(w);
    CHECK_CUDA(cudaStreamQuery(user)); /* still a valid stream */
    CHECK_CUDA(cudaStreamDestroy(user));
}

static bool stream_status_is(cpool_stream *s, enum cudaStreamCaptureStatus want) {
    enum cudaStreamCaptureStatus status;
    return CHECK_CUDA(cudaStreamIsCapturing(native(s), &status)) && status == want;
}

/* A stream whose capture was begun outside capturepool: cpool_capture_begin
 * refuses it and leaves that capture as it was (the capture fence recorded
 * into it adds no node); an invalidated one is refused too. After either,
 * capturepool's own capture works on the stream. */
static void begin_on_stream_captured_outside(cpool_device *dev) {
    const int n = 256;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    cudaGraph_t graph = NULL;
    size_t nodes = 0;
    void *y = NULL;
    float h[256];
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, sizeof h, s, &y));

    REQUIRE(CHECK_CUDA(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeGlobal)));
    k_fill<<<blocks_for(n), 256, 0, native(s)>>>((float *)y, 1.0f, n);
    CHECK_STATUS(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(strstr(cpool_last_error(), "already capturing") != NULL);
    CHECK_STATUS(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_RELAXED), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(stream_status_is(s, cudaStreamCaptureStatusActive));
    REQUIRE(CHECK_CUDA(cudaStreamEndCapture(native(s), &graph)));
    CHECK(CHECK_CUDA(cudaGraphGetNodes(graph, NULL, &nodes)) && nodes == 1);
    CHECK_CUDA(cudaGraphDestroy(graph));

    /* A stream query is forbidden under GLOBAL capture: it breaks it. */
    REQUIRE(CHECK_CUDA(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeGlobal)));
    CHECK(cudaStreamQuery(native(s)) != cudaSuccess);
    cudaGetLastError();
    CHECK(stream_status_is(s, cudaStreamCaptureStatusInvalidated));
    CHECK_STATUS(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(stream_status_is(s, cudaStreamCaptureStatusInvalidated));
    graph = NULL;
    CHECK(cudaStreamEndCapture(native(s), &graph) != cudaSuccess);
    cudaGetLastError();
    CHECK(graph == NULL);

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    k_fill<<<blocks_for(n), 256, 0, native(s)>>>((float *)y, 3.0f, n);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(read_back(s, h, y, sizeof h));
    CHECK(h[0] == 3.0f && h[n - 1] == 3.0f);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Host work joins the capture of the stream it is enqueued on, whoever
 * began it: on a stream forked into capturepool's capture (through events)
 * and on a stream captured with the CUDA runtime alone. It runs once a
 * launch, never at capture. */
static void host_work_in_forked_and_outside_captures(cpool_device *dev) {
    cpool_stream *s = NULL, *side = NULL;
    cpool_graph *g = NULL;
    cudaEvent_t fork_ev, join_ev;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int forked = 0, outside = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &side));
    REQUIRE(CHECK_CUDA(cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming)));
    REQUIRE(CHECK_CUDA(cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming)));

    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_CUDA(cudaEventRecord(fork_ev, native(s)));
    CHECK_CUDA(cudaStreamWaitEvent(native(side), fork_ev, 0));
    CHECK_OK(cpool_launch_host(side, cb_inc, &forked));
    CHECK_CUDA(cudaEventRecord(join_ev, native(side)));
    CHECK_CUDA(cudaStreamWaitEvent(native(s), join_ev, 0));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_EQ(aload(&forked), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&forked), 2);
    cpool_graph_release(g);

    REQUIRE(CHECK_CUDA(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeGlobal)));
    CHECK_OK(cpool_launch_host(s, cb_inc, &outside));
    REQUIRE(CHECK_CUDA(cudaStreamEndCapture(native(s), &graph)));
    REQUIRE(CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0)));
    CHECK_CUDA(cudaGraphDestroy(graph)); /* the executable keeps the thunk */
    CHECK_EQ(aload(&outside), 0);
    CHECK_CUDA(cudaGraphLaunch(exec, native(s)));
    CHECK_CUDA(cudaGraphLaunch(exec, native(s)));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&outside), 2);
    CHECK_CUDA(cudaGraphExecDestroy(exec));

    CHECK_CUDA(cudaEventDestroy(fork_ev));
    CHECK_CUDA(cudaEventDestroy(join_ev));
    cpool_stream_destroy(side);
    cpool_stream_destroy(s);
}

/* ---- kernels on two branches of one capture ------------------------------------- */

/* One step on two streams: o forks b through events; each branch runs the
 * computation on its own buffers with a temporary from the pool on its own
 * stream (branch memory, live at the same time on both); b joins back and
 * o adds b's result into its own. The graph replays like the same work on
 * one stream, eagerly. */
static void enqueue_two_branch_step(cpool_pool *pool, cpool_stream *o, cpool_stream *b, cpool_event *fork,
                                    cpool_event *join, void *const bufs[4], int n) {
    CHECK_OK(cpool_event_record(fork, o));
    CHECK_OK(cpool_stream_wait_event(b, fork));
    enqueue_step(pool, o, (const float *)bufs[0], (float *)bufs[1], n);
    enqueue_step(pool, b, (const float *)bufs[2], (float *)bufs[3], n);
    CHECK_OK(cpool_event_record(join, b));
    CHECK_OK(cpool_stream_wait_event(o, join));
    k_axpy<<<blocks_for(n), 256, 0, native(o)>>>(1.0f, (const float *)bufs[3], (float *)bufs[1], n);
    CHECK_CUDA(cudaGetLastError());
}

static void kernels_on_two_branches(cpool_device *dev) {
    const int n = 1 << 18, reps = 3;
    const size_t bytes = (size_t)n * sizeof(float);
    cpool_stream *o = NULL, *b = NULL;
    cpool_pool *pool = NULL;
    cpool_event *fork = NULL, *join = NULL;
    cpool_graph *g = NULL;
    void *graph_bufs[4] = {NULL}, *eager_bufs[4] = {NULL};
    float *h = (float *)malloc(bytes), *hg = (float *)malloc(bytes), *he = (float *)malloc(bytes);
    int i, k, bad = 0;
    REQUIRE(h && hg && he);
    REQUIRE_OK(cpool_stream_create(dev, &o));
    REQUIRE_OK(cpool_stream_create(dev, &b));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_event_create(dev, &fork));
    REQUIRE_OK(cpool_event_create(dev, &join));
    for (k = 0; k < 4; k++) {
        REQUIRE_OK(cpool_alloc(pool, bytes, o, &graph_bufs[k]));
        REQUIRE_OK(cpool_alloc(pool, bytes, o, &eager_bufs[k]));
        for (i = 0; i < n; i++) h[i] = (float)((i * (k + 3)) % 23) * 0.25f;
        CHECK_OK(cpool_memcpy_async(o, graph_bufs[k], h, bytes));
        CHECK_OK(cpool_memcpy_async(o, eager_bufs[k], h, bytes));
    }
    CHECK_OK(cpool_stream_synchronize(o));

    REQUIRE_OK(cpool_capture_begin(o, pool, CPOOL_CAPTURE_GLOBAL));
    enqueue_two_branch_step(pool, o, b, fork, join, graph_bufs, n);
    REQUIRE_OK(cpool_capture_end(o, &g));
    /* Both branches' temporaries, live at the same time, hold memory of their own. */
    CHECK_GE(stats_of(pool).graph_reserved_bytes, 2 * bytes);
    for (i = 0; i < reps; i++) {
        CHECK_OK(cpool_graph_launch(g, o));
        enqueue_two_branch_step(pool, o, b, fork, join, eager_bufs, n);
    }
    for (k = 1; k < 4; k += 2) {
        CHECK_OK(read_back(o, hg, graph_bufs[k], bytes));
        CHECK_OK(read_back(o, he, eager_bufs[k], bytes));
        for (i = 0; i < n && bad < 5; i++)
            if (hg[i] != he[i]) {
                check_report_(__FILE__, __LINE__, "buffer %d element %d: graph %g, eager %g", k, i, (double)hg[i],
                              (double)he[i]);
                bad++;
            }
    }
    cpool_graph_release(g);
    CHECK_OK(cpool_stream_synchronize(b));
    for (k = 0; k < 4; k++) {
        CHECK_OK(cpool_free(pool, graph_bufs[k], o));
        CHECK_OK(cpool_free(pool, eager_bufs[k], o));
    }
    cpool_event_destroy(fork);
    cpool_event_destroy(join);
    cpool_pool_release(pool);
    cpool_stream_destroy(b);
    cpool_stream_destroy(o);
    free(h);
    free(hg);
    free(he);
}

/* ---- several GPUs: pool memory of one used by kernels of another ------------------- */

/* Whether there are two GPUs, and kernels on device 1 may use device 0's
 * memory. */
static bool two_gpus_that_reach_each_other(void) {
    int count = 0, can = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) return false;
    return cudaDeviceCanAccessPeer(&can, 1, 0) == cudaSuccess && can;
}

/* y (n floats on device 1) = x (device 0's) + y, by a kernel on device 1;
 * then y is copied to host and checked to hold `want` everywhere. */
static void add_on_device_1(cpool_stream *s1, const float *x, float *y, int n, float want) {
    int before = 0;
    CHECK_CUDA(cudaGetDevice(&before));
    CHECK_CUDA(cudaSetDevice(1));
    k_axpy<<<blocks_for(n), 256, 0, native(s1)>>>(1.0f, x, y, n);
    CHECK_CUDA(cudaGetLastError());
    float *host = (float *)malloc((size_t)n * sizeof *host);
    REQUIRE(host != NULL);
    CHECK_CUDA(cudaMemcpyAsync(host, y, (size_t)n * sizeof *host, cudaMemcpyDeviceToHost, native(s1)));
    CHECK_CUDA(cudaStreamSynchronize(native(s1)));
    int wrong = 0;
    for (int i = 0; i < n; i++) wrong += host[i] != want;
    CHECK_EQ(wrong, 0);
    free(host);
    CHECK_CUDA(cudaSetDevice(before));
}

/* Opening a second device connects the two where they allow it: kernels
 * on device 1 read blocks of device 0's pools, growable ones (pages mapped
 * before device 1 was opened and after) and plain ones, and a stream of one
 * device is refused by the other's pool. Needs two such GPUs; elsewhere it
 * says so and checks nothing more. */
static void kernels_of_one_gpu_use_another_gpus_pool(cpool_device *dev) {
    if (!two_gpus_that_reach_each_other()) {
        printf("  (two GPUs that reach each other's memory are needed: not run here)\n");
        return;
    }
    enum { N = 1 << 20 };
    cpool_stream *s0, *s1;
    cpool_pool *growable, *plain, *pool1;
    REQUIRE_OK(cpool_stream_create(dev, &s0));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &growable));
    cpool_pool_options plain_opts;
    memset(&plain_opts, 0, sizeof plain_opts);
    plain_opts.struct_size = sizeof plain_opts;
    plain_opts.plain_segments = true;
    REQUIRE_OK(cpool_pool_create(dev, &plain_opts, &plain));
    void *before = NULL, *after = NULL, *in_plain = NULL, *y = NULL;
    REQUIRE_OK(cpool_alloc(growable, N * sizeof(float), s0, &before)); /* mapped before device 1 opens */
    k_fill<<<blocks_for(N), 256, 0, native(s0)>>>((float *)before, 1.0f, N);
    CHECK_CUDA(cudaStreamSynchronize(native(s0)));

    cpool_device *dev1;
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_CUDA, 1, &dev1));
    REQUIRE_OK(cpool_stream_create(dev1, &s1));
    REQUIRE_OK(cpool_pool_create(dev1, NULL, &pool1));
    REQUIRE_OK(cpool_alloc(pool1, N * sizeof(float), s1, &y));
    CHECK_OK(cpool_memset_async(s1, y, 0, N * sizeof(float)));
    void *refused = NULL;
    CHECK_STATUS(cpool_alloc(growable, 64, s1, &refused), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(refused == NULL);

    REQUIRE_OK(cpool_alloc(growable, 64 * N, s0, &after)); /* new pages, mapped with device 1 known */
    REQUIRE_OK(cpool_alloc(plain, N * sizeof(float), s0, &in_plain));
    k_fill<<<blocks_for(N), 256, 0, native(s0)>>>((float *)after, 2.0f, N);
    k_fill<<<blocks_for(N), 256, 0, native(s0)>>>((float *)in_plain, 4.0f, N);
    CHECK_CUDA(cudaStreamSynchronize(native(s0)));
    add_on_device_1(s1, (const float *)before, (float *)y, N, 1.0f);
    add_on_device_1(s1, (const float *)after, (float *)y, N, 3.0f);
    add_on_device_1(s1, (const float *)in_plain, (float *)y, N, 7.0f);

    CHECK_OK(cpool_free(growable, before, s0));
    CHECK_OK(cpool_free(growable, after, s0));
    CHECK_OK(cpool_free(plain, in_plain, s0));
    CHECK_OK(cpool_free(pool1, y, s1));
    cpool_pool_release(pool1);
    cpool_stream_destroy(s1);
    cpool_device_close(dev1);
    cpool_pool_release(plain);
    cpool_pool_release(growable);
    cpool_stream_destroy(s0);
}

static const check_case cases[] = {
    CHECK_CASE(kernels_replay_matches_eager),
    CHECK_CASE(kernels_on_two_branches),
    CHECK_CASE(global_capture_while_pool_grows),
    CHECK_CASE(graph_released_while_kernel_runs),
    CHECK_CASE(cudafree_drop_after_release_in_callback),
    CHECK_CASE(wrapped_user_stream_capture),
    CHECK_CASE(begin_on_stream_captured_outside),
    CHECK_CASE(host_work_in_forked_and_outside_captures),
    CHECK_CASE(kernels_of_one_gpu_use_another_gpus_pool),
};
CHECK_MAIN(cases, CHECK_ON_CUDA)
