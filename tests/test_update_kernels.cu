/* CUDA only: graph update with real kernels whose arguments change (in
 * place: the executable stays the same) and whose shape changes (a new
 * executable), a parameter block read by a kernel on every replay, a
 * graphed call of kernels, and an update of kernels with host work. Skips
 * visibly without a GPU. */
#include <cuda_runtime.h>

#include <vector>

#include "check.h"
#include "helpers.h"

static cudaStream_t native(cpool_stream *s) { return (cudaStream_t)cpool_stream_native(s); }

__global__ void k_set(float *y, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = v;
}
__global__ void k_add_param(float *y, const float *param, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += *param;
}

/* `kernels` kernels, kernel k setting slice k of y to base + k. */
typedef struct slices {
    float *y;
    int kernels, slice;
    float base;
} slices;

static cpool_status set_slices(cpool_stream *s, void *ctx) {
    slices *j = (slices *)ctx;
    for (int k = 0; k < j->kernels; k++)
        k_set<<<(j->slice + 127) / 128, 128, 0, native(s)>>>(j->y + (size_t)k * j->slice, j->base + (float)k, j->slice);
    return cudaGetLastError() == cudaSuccess ? CPOOL_OK : CPOOL_ERR_BACKEND;
}

static void check_slices(cpool_stream *s, const slices *j, int kernels) {
    std::vector<float> h((size_t)kernels * j->slice);
    CHECK_OK(read_back(s, h.data(), j->y, h.size() * sizeof(float)));
    for (int k = 0; k < kernels; k++)
        for (int i = 0; i < j->slice; i++)
            if (h[(size_t)k * j->slice + i] != j->base + (float)k) {
                CHECK_EQ(h[(size_t)k * j->slice + i], j->base + (float)k);
                return;
            }
}

static void update_kernel_arguments_in_place(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *y = NULL;
    const int kernels = 100, slice = 256;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, (size_t)2 * kernels * slice * sizeof(float), s, &y));
    slices job = {(float *)y, kernels, slice, 1.0f};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, set_slices, &job, &g));
    void *exec = cpool_graph_native(g);
    CHECK_OK(cpool_graph_launch(g, s));
    check_slices(s, &job, kernels);

    for (int round = 0; round < 3; round++) {
        job.base = 100.0f * (float)(round + 2);
        CHECK_OK(cpool_graph_update(g, s, set_slices, &job));
        CHECK(cpool_graph_native(g) == exec); /* updated in place */
        CHECK_OK(cpool_graph_launch(g, s));
        check_slices(s, &job, kernels);
    }
    /* Another pointer argument: still the same shape. */
    job.y = (float *)y + (size_t)kernels * slice;
    job.base = -5.0f;
    CHECK_OK(cpool_graph_update(g, s, set_slices, &job));
    CHECK(cpool_graph_native(g) == exec);
    CHECK_OK(cpool_graph_launch(g, s));
    check_slices(s, &job, kernels);

    /* More kernels: a new shape, so a new executable. */
    job.y = (float *)y;
    job.kernels = 2 * kernels;
    job.base = 7.0f;
    CHECK_OK(cpool_graph_update(g, s, set_slices, &job));
    CHECK(cpool_graph_native(g) != exec);
    CHECK_OK(cpool_graph_launch(g, s));
    check_slices(s, &job, 2 * kernels);
    CHECK_EQ(cpool_graph_replays(g), 6);

    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

typedef struct param_job {
    float *y;
    const float *param;
    int n;
} param_job;

static cpool_status add_param(cpool_stream *s, void *ctx) {
    param_job *j = (param_job *)ctx;
    k_add_param<<<(j->n + 255) / 256, 256, 0, native(s)>>>(j->y, j->param, j->n);
    return cudaGetLastError() == cudaSuccess ? CPOOL_OK : CPOOL_ERR_BACKEND;
}

static void kernel_reads_param_every_replay(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_param *param = NULL;
    cpool_graph *g = NULL;
    void *y = NULL;
    const int n = 4096;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_param_create(pool, sizeof(float), &param));
    REQUIRE_OK(cpool_alloc(pool, n * sizeof(float), s, &y));
    CHECK_OK(cpool_memset_async(s, y, 0, n * sizeof(float)));
    param_job job = {(float *)y, (const float *)cpool_param_device_ptr(param), n};
    /* Warm up once eagerly, then capture: the kernel's argument is the
     * block's address, its value is read at every replay. */
    float v = 0.0f;
    CHECK_OK(cpool_param_set(param, &v, sizeof v, s));
    REQUIRE_OK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, add_param, &job, &g));
    float expect = 0.0f;
    for (int i = 1; i <= 5; i++) {
        v = (float)i;
        CHECK_OK(cpool_param_set(param, &v, sizeof v, s));
        CHECK_OK(cpool_graph_launch(g, s));
        expect += (float)i;
    }
    std::vector<float> h(n);
    CHECK_OK(read_back(s, h.data(), y, n * sizeof(float)));
    CHECK_EQ(h[0], expect);
    CHECK_EQ(h[n - 1], expect);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void dump_dot_names_kernels(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *y = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4 * 256 * sizeof(float), s, &y));
    slices job = {(float *)y, 4, 256, 1.0f};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, set_slices, &job, &g));
    const char *path = "capturepool_test_kernels.dot";
    CHECK_OK(cpool_graph_dump_dot(g, path));
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        std::vector<char> text(1 << 20);
        size_t got = fread(text.data(), 1, text.size() - 1, f);
        text[got] = 0;
        fclose(f);
        remove(path);
        CHECK(strstr(text.data(), "digraph") != NULL);
        CHECK(strstr(text.data(), "k_set") != NULL);
    }
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Kernels plus host work, updated to the same shape with another host
 * argument: the host nodes' thunks are owned by the graph they were
 * captured into, so the update makes a new executable, which runs the new
 * host work only. */
typedef struct host_job {
    slices kernels;
    int *count;
} host_job;

static cpool_status set_slices_then_count(cpool_stream *s, void *ctx) {
    host_job *j = (host_job *)ctx;
    cpool_status st = set_slices(s, &j->kernels);
    return st == CPOOL_OK ? cpool_launch_host(s, cb_inc, j->count) : st;
}

static void update_with_host_work_makes_new_executable(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *y = NULL;
    int first = 0, second = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4 * 256 * sizeof(float), s, &y));
    host_job job = {{(float *)y, 4, 256, 1.0f}, &first};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, set_slices_then_count, &job, &g));
    void *exec = cpool_graph_native(g);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&first), 1);

    job.kernels.base = 5.0f;
    job.count = &second;
    CHECK_OK(cpool_graph_update(g, s, set_slices_then_count, &job));
    CHECK(cpool_graph_native(g) != exec);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&first), 1);
    CHECK_EQ(aload(&second), 2);
    check_slices(s, &job.kernels, 4);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, y, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(update_kernel_arguments_in_place),
    CHECK_CASE(kernel_reads_param_every_replay),
    CHECK_CASE(dump_dot_names_kernels),
    CHECK_CASE(update_with_host_work_makes_new_executable),
};
CHECK_MAIN(cases, CHECK_ON_CUDA)
