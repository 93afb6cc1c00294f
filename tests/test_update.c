/*
 * Graph update, parameter blocks, graphed calls and DOT dumps, on every
 * backend present.
 */
#include "check.h"
#include "helpers.h"

typedef struct fill_job {
    void *dst;
    size_t n;
    int value;
    int calls; /* how often the body ran on the host */
    cpool_status fail_with;
    int sync_inside; /* break the capture with a stream sync */
} fill_job;

static cpool_status fill_body(cpool_stream *s, void *ctx) {
    fill_job *j = (fill_job *)ctx;
    j->calls++;
    if (j->fail_with != CPOOL_OK) return j->fail_with;
    if (j->sync_inside) cpool_stream_synchronize(s);
    return cpool_memset_async(s, j->dst, j->value, j->n);
}

/* Two fills: a different shape from fill_body's one. */
static cpool_status fill_twice_body(cpool_stream *s, void *ctx) {
    fill_job *j = (fill_job *)ctx;
    cpool_status st = cpool_memset_async(s, j->dst, 0, j->n);
    return st != CPOOL_OK ? st : cpool_memset_async(s, j->dst, j->value, j->n / 2);
}

static void update_replaces_work(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *buf = NULL;
    const size_t n = 4096;
    fill_job job = {NULL, n, 0x11, 0, CPOOL_OK, 0};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, s, &buf));
    job.dst = buf;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, fill_body, &job, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, n, 0x11);

    CHECK_OK(cpool_memset_async(s, buf, 0, n));
    job.value = 0x22;
    CHECK_OK(cpool_graph_update(g, s, fill_body, &job));
    CHECK_BYTES(s, buf, n, 0x00); /* the update ran nothing */
    CHECK_EQ(cpool_graph_replays(g), 1);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, n, 0x22);
    CHECK_EQ(cpool_graph_replays(g), 2);
    CHECK_PTR_EQ(cpool_graph_pool(g), pool);

    /* Another shape: instantiated anew, same outcome for the caller. */
    job.value = 0x33;
    CHECK_OK(cpool_graph_update(g, s, fill_twice_body, &job));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, n / 2, 0x33);
    CHECK_BYTES(s, (char *)buf + n / 2, n / 2, 0x00);
    CHECK_EQ(cpool_graph_replays(g), 3);

    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, buf, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void failed_update_keeps_old_work(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *buf = NULL;
    const size_t n = 1024;
    fill_job job = {NULL, n, 0x44, 0, CPOOL_OK, 0};
    cpool_capture_state state;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, s, &buf));
    job.dst = buf;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, fill_body, &job, &g));

    CHECK_STATUS(cpool_graph_update(NULL, s, fill_body, &job), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_update(g, NULL, fill_body, &job), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_update(g, s, NULL, &job), CPOOL_ERR_INVALID_ARGUMENT);

    job.value = 0x55;
    job.fail_with = CPOOL_ERR_OUT_OF_MEMORY;
    CHECK_STATUS(cpool_graph_update(g, s, fill_body, &job), CPOOL_ERR_OUT_OF_MEMORY);
    job.fail_with = CPOOL_OK;
    job.sync_inside = 1;
    CHECK_STATUS(cpool_graph_update(g, s, fill_body, &job), CPOOL_ERR_CAPTURE_INVALIDATED);
    job.sync_inside = 0;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);

    /* Updating on a capturing stream is refused and leaves both alone. */
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_graph_update(g, s, fill_body, &job), CPOOL_ERR_INVALID_ARGUMENT);
    {
        cpool_graph *empty = NULL;
        CHECK_OK(cpool_capture_end(s, &empty));
        cpool_graph_release(empty);
    }

    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, n, 0x44); /* still the old work */
    CHECK_EQ(cpool_graph_replays(g), 1);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, buf, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void update_revives_stale_graph(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *buf = NULL;
    fill_job job = {NULL, 512, 0x66, 0, CPOOL_OK, 0};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 512, s, &buf));
    job.dst = buf;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, fill_body, &job, &g));
    cpool_pool_clear_buffers(pool);
    CHECK_STATUS(cpool_graph_launch(g, s), CPOOL_ERR_STALE_GRAPH);
    CHECK_OK(cpool_graph_update(g, s, fill_body, &job));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, 512, 0x66);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, buf, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A graph that copies the parameter block into `out`. */
typedef struct param_copy {
    cpool_param *param;
    void *out;
} param_copy;

static cpool_status copy_param_body(cpool_stream *s, void *ctx) {
    param_copy *c = (param_copy *)ctx;
    return cpool_memcpy_async(s, c->out, cpool_param_device_ptr(c->param), sizeof(int));
}

static void param_set_in_stream_order(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_param *param = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    void *out1 = NULL, *out2 = NULL;
    int v, got1 = 0, got2 = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_param_create(pool, 64, &param));
    void *where = cpool_param_device_ptr(param);
    CHECK(where != NULL);
    REQUIRE_OK(cpool_alloc(pool, sizeof(int), s, &out1));
    REQUIRE_OK(cpool_alloc(pool, sizeof(int), s, &out2));
    param_copy c1 = {param, out1}, c2 = {param, out2};
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, copy_param_body, &c1, &g1));
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, copy_param_body, &c2, &g2));

    /* set(7); g1; set(9); g2: g1 sees 7, g2 sees 9, and `v` may be reused
     * as soon as each set returns. */
    v = 7;
    CHECK_OK(cpool_param_set(param, &v, sizeof v, s));
    v = -1;
    CHECK_OK(cpool_graph_launch(g1, s));
    v = 9;
    CHECK_OK(cpool_param_set(param, &v, sizeof v, s));
    v = -1;
    CHECK_OK(cpool_graph_launch(g2, s));
    CHECK_OK(read_back(s, &got1, out1, sizeof got1));
    CHECK_OK(read_back(s, &got2, out2, sizeof got2));
    CHECK_EQ(got1, 7);
    CHECK_EQ(got2, 9);
    CHECK_PTR_EQ(cpool_param_device_ptr(param), where);

    /* A clear leaves the block (and its value) alone. */
    cpool_pool_clear_buffers(pool);
    CHECK_PTR_EQ(cpool_param_device_ptr(param), where);
    CHECK_OK(read_back(s, &got1, where, sizeof got1));
    CHECK_EQ(got1, 9);

    cpool_graph_release(g1);
    cpool_graph_release(g2);
    CHECK_OK(cpool_free(pool, out1, s));
    CHECK_OK(cpool_free(pool, out2, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void param_misuse(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_param *param = NULL;
    char big[65] = {0};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_STATUS(cpool_param_create(NULL, 8, &param), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_create(pool, 0, &param), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_create(pool, 8, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_pool_stats before = stats_of(pool);
    cpool_pool_seal(pool);
    CHECK_STATUS(cpool_param_create(pool, 8, &param), CPOOL_ERR_SEALED);
    CHECK_STATS_EQ(before, stats_of(pool));
    cpool_pool_unseal(pool);
    REQUIRE_OK(cpool_param_create(pool, 64, &param));
    CHECK_EQ(stats_of(pool).allocated_bytes, before.allocated_bytes + 64);
    CHECK(cpool_param_device_ptr(NULL) == NULL);
    CHECK_STATUS(cpool_param_set(param, big, sizeof big, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_set(param, big, 0, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_set(param, NULL, 8, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_set(param, big, 8, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_param_set(NULL, big, 8, s), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_param_set(param, big, 8, s), CPOOL_ERR_INVALID_ARGUMENT);
    {
        cpool_graph *g = NULL;
        CHECK_OK(cpool_capture_end(s, &g));
        cpool_graph_release(g);
    }
    CHECK_OK(cpool_param_set(param, big, 64, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void graphed_call_warms_up_then_captures(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *buf = NULL;
    fill_job job = {NULL, 256, 0x77, 0, CPOOL_OK, 0};
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 256, s, &buf));
    job.dst = buf;
    CHECK_OK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 3, fill_body, &job, &g));
    CHECK_EQ(job.calls, 4); /* three eager runs, one capture */
    CHECK_BYTES(s, buf, 256, 0x77); /* the eager runs ran */
    CHECK_OK(cpool_memset_async(s, buf, 0, 256));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, buf, 256, 0x77);
    cpool_graph_release(g);

    g = (cpool_graph *)&job; /* must be reset to NULL on failure */
    CHECK_STATUS(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, -1, fill_body, &job, &g), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(g == NULL);
    CHECK_STATUS(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, NULL, &job, &g), CPOOL_ERR_INVALID_ARGUMENT);
    job.fail_with = CPOOL_ERR_BACKEND;
    job.calls = 0;
    CHECK_STATUS(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 2, fill_body, &job, &g), CPOOL_ERR_BACKEND);
    CHECK_EQ(job.calls, 1); /* stopped at the first failing eager run */
    CHECK(g == NULL);
    job.fail_with = CPOOL_OK;
    CHECK_OK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 0, fill_body, &job, &g));
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, buf, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void dump_dot_writes_graphviz(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *buf = NULL;
    fill_job job = {NULL, 128, 1, 0, CPOOL_OK, 0};
    char path[64], head[16] = {0};
    snprintf(path, sizeof path, "capturepool_test_%s.dot", check_backend_name_);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 128, s, &buf));
    job.dst = buf;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, fill_twice_body, &job, &g));
    CHECK_OK(cpool_graph_dump_dot(g, path));
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f) {
        CHECK(fread(head, 1, 7, f) == 7);
        CHECK_STR_EQ(head, "digraph");
        fclose(f);
        remove(path);
    }
    CHECK_STATUS(cpool_graph_dump_dot(NULL, path), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_dump_dot(g, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_dump_dot(g, "/nonexistent-dir/x.dot"), CPOOL_ERR_IO); /* a file error, not CUDA's */
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, buf, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(update_replaces_work),
    CHECK_CASE(failed_update_keeps_old_work),
    CHECK_CASE(update_revives_stale_graph),
    CHECK_CASE(param_set_in_stream_order),
    CHECK_CASE(param_misuse),
    CHECK_CASE(graphed_call_warms_up_then_captures),
    CHECK_CASE(dump_dot_writes_graphviz),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
