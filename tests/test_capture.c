/* Capture: begin / end / status / scoped capture, modes, invalidation, and
 * allocation under capture. */
#include "check.h"
#include "helpers.h"

#define GRAPH_SENTINEL ((cpool_graph *)(uintptr_t)0x10)

static cpool_capture_state state_of(cpool_stream *s) {
    cpool_capture_state st = (cpool_capture_state)-1;
    CHECK_OK(cpool_capture_status(s, &st));
    return st;
}

static void capture_argument_errors(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    cpool_capture_state st;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_STATUS(cpool_capture_begin(NULL, NULL, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_begin(s, NULL, (cpool_capture_mode)3), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_begin(s, NULL, (cpool_capture_mode)-1), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK_STATUS(cpool_capture_status(NULL, &st), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_status(s, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_end(NULL, &g), CPOOL_ERR_INVALID_ARGUMENT);
    /* capture_end on a stream that is not capturing */
    g = GRAPH_SENTINEL;
    CHECK_STATUS(cpool_capture_end(s, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK(g == NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    /* the stream is fine */
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
}

static void capture_status_transitions(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK(g != NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK(cpool_graph_pool(g) == NULL);
    CHECK_EQ(cpool_graph_pool_buffer_count(g), 0);
    CHECK_EQ(cpool_graph_replays(g), 0);
    /* an empty graph launches */
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(cpool_graph_replays(g), 1);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

/* begin twice: the second fails, the first capture goes on, no reference leaks. */
static void capture_begin_twice(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *other = NULL;
    cpool_graph *g = NULL;
    drop_log log;
    tracked a, b;
    int ran = 0;
    drop_log_init(&log);
    tracked_init(&a, &log, 0, NULL);
    tracked_init(&b, &log, 1, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    CHECK_OK(cpool_pool_record(pool, &a, tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(other, &b, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &ran));
    CHECK_STATUS(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_STATUS(cpool_capture_begin(s, other, CPOOL_CAPTURE_RELAXED), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_STATUS(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_launch_host(s, cb_inc, &ran));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_PTR_EQ(cpool_graph_pool(g), pool);
    CHECK_EQ(stats_of(other).graph_count, 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&ran), 2); /* both host tasks were captured */
    /* The failed begin took no reference on `other`: one release drops it. */
    cpool_pool_release(other);
    CHECK_EQ(aload(&b.drops), 1);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&a.drops), 0); /* the graph holds it */
    cpool_graph_release(g);
    CHECK(wait_for_int(&a.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&a.drops), 1);
    cpool_stream_destroy(s);
}

/* end(s, NULL) is an argument error: the capture goes on. */
static void capture_end_null_out_keeps_capturing(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_capture_end(s, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_capture_end(s, &g));
    CHECK(g != NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

/* Ending on another stream: that one is not capturing; the capture goes on. */
static void capture_end_on_other_stream(cpool_device *dev) {
    cpool_stream *s = NULL, *t = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_capture_end(t, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK(g == NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(t), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_capture_end(s, &g));
    cpool_graph_release(g);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
}

/* Captured host work does not run during capture (nor at a later sync), and
 * runs once per launch. */
static void captured_host_work_runs_only_on_launch(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    int count = 0, i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    sleep_ms(20); /* give a wrongly eager worker the chance to run it */
    CHECK_EQ(aload(&count), 0);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 0);
    for (i = 1; i <= 3; i++) {
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_EQ(aload(&count), 2 * i);
        CHECK_EQ(cpool_graph_replays(g), i);
    }
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

/* Captured copies and fills: nothing happens at capture; each launch uses the
 * captured addresses and the data current at launch time. */
static void captured_copies_replay(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *src = NULL, *dst = NULL, *tmp = NULL;
    const size_t n = 8192;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, s, &src));
    REQUIRE_OK(cpool_alloc(pool, n, s, &dst));
    CHECK_OK(cpool_memset_async(s, src, 0x5a, n));
    CHECK_OK(cpool_memset_async(s, dst, 0x11, n));
    CHECK_OK(cpool_stream_synchronize(s));

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &tmp));
    CHECK_OK(cpool_memset_async(s, dst, 0, n));
    CHECK_OK(cpool_memcpy_async(s, tmp, src, n));
    CHECK_OK(cpool_memcpy_async(s, dst, tmp, n));
    CHECK_OK(cpool_free(pool, tmp, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_BYTES(s, dst, n, 0x11); /* not run by the capture */

    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, dst, n, 0x5a);
    CHECK_OK(cpool_memset_async(s, src, 0x3c, n));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, dst, n, 0x3c);
    CHECK_EQ(cpool_graph_replays(g), 2);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, src, s));
    CHECK_OK(cpool_free(pool, dst, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Every mode captures and replays. */
static void capture_modes(cpool_device *dev) {
    static const cpool_capture_mode modes[] = {CPOOL_CAPTURE_GLOBAL, CPOOL_CAPTURE_THREAD_LOCAL,
                                               CPOOL_CAPTURE_RELAXED};
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    int i, count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 3; i++) {
        cpool_graph *g = NULL;
        void *p = NULL;
        REQUIRE_OK(cpool_capture_begin(s, pool, modes[i]));
        CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
        CHECK_OK(cpool_alloc(pool, 4096, s, &p));
        CHECK_OK(cpool_memset_async(s, p, i, 4096));
        CHECK_OK(cpool_launch_host(s, cb_inc, &count));
        CHECK_OK(cpool_free(pool, p, s));
        REQUIRE_OK(cpool_capture_end(s, &g));
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_EQ(aload(&count), i + 1);
        cpool_graph_release(g);
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A sync under capture breaks it: end reports CAPTURE_INVALIDATED, nothing
 * leaks, and the stream works again (also for a new capture). */
static void sync_under_capture_invalidates(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    drop_log log;
    tracked obj;
    int count = 0;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_STATUS(cpool_stream_synchronize(s), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_INVALIDATED);
    CHECK_STATUS(cpool_capture_end(s, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK_EQ(stats_of(pool).graph_count, 0);
    CHECK_EQ(aload(&count), 0); /* the partial graph's work never ran */

    /* The stream works again: eager work, then a fresh capture. */
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    g = NULL;
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    cpool_graph_release(g);

    /* The broken capture's pool reference is gone: one release drops. */
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

/* ---- scoped capture ------------------------------------------------------------- */

typedef struct body_ctx {
    int calls;
    int *count;
    cpool_pool *pool;
    cpool_status result;  /* what the body returns */
    int sync_inside;      /* break the capture with a sync */
    cpool_status sync_st; /* what that sync returned */
} body_ctx;

static cpool_status body(cpool_stream *s, void *ctx) {
    body_ctx *c = (body_ctx *)ctx;
    void *p = NULL;
    cpool_status st;
    c->calls++;
    st = cpool_launch_host(s, cb_inc, c->count);
    if (st != CPOOL_OK) return st;
    if (c->pool) {
        st = cpool_alloc(c->pool, 1024, s, &p);
        if (st != CPOOL_OK) return st;
        st = cpool_free(c->pool, p, s);
        if (st != CPOOL_OK) return st;
    }
    if (c->sync_inside) c->sync_st = cpool_stream_synchronize(s);
    return c->result;
}

static void scoped_capture_ok(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    body_ctx c;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    memset(&c, 0, sizeof c);
    c.count = &count;
    c.pool = pool;
    c.result = CPOOL_OK;
    CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body, &c, &g));
    CHECK_EQ(c.calls, 1);
    REQUIRE(g != NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK_PTR_EQ(cpool_graph_pool(g), pool);
    CHECK_EQ(aload(&count), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A failing body: its status comes back, no graph, no capture, no leak. */
static void scoped_capture_failing_body(cpool_device *dev) {
    static const cpool_status failures[] = {CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_BACKEND, CPOOL_ERR_INVALID_ARGUMENT,
                                            CPOOL_ERR_UNSUPPORTED};
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    drop_log log;
    tracked obj;
    body_ctx c;
    int count = 0, i;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    for (i = 0; i < 4; i++) {
        cpool_graph *g = GRAPH_SENTINEL;
        memset(&c, 0, sizeof c);
        c.count = &count;
        c.pool = pool;
        c.result = failures[i];
        CHECK_STATUS(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body, &c, &g), failures[i]);
        CHECK_EQ(c.calls, 1);
        CHECK(g == NULL);
        CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    }
    CHECK_EQ(stats_of(pool).graph_count, 0);
    /* the stream works again */
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 0);
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    cpool_pool_release(pool); /* no capture kept a reference */
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

/* A body that breaks the capture: returning the sync's status gives it back;
 * returning OK anyway gives end's CAPTURE_INVALIDATED. */
static void scoped_capture_body_breaks_capture(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    body_ctx c;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    memset(&c, 0, sizeof c);
    c.count = &count;
    c.sync_inside = 1;
    c.result = CPOOL_OK;
    CHECK_STATUS(cpool_capture(s, NULL, CPOOL_CAPTURE_GLOBAL, body, &c, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK_EQ(c.sync_st, CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    c.result = CPOOL_ERR_CAPTURE_INVALIDATED;
    g = GRAPH_SENTINEL;
    CHECK_STATUS(cpool_capture(s, NULL, CPOOL_CAPTURE_GLOBAL, body, &c, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    cpool_stream_destroy(s);
}

/* Scoped capture on a stream that already captures: begin's status, the body
 * is not called, the running capture is untouched. */
static void scoped_capture_already_capturing(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = GRAPH_SENTINEL, *outer = NULL;
    body_ctx c;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    memset(&c, 0, sizeof c);
    c.count = &count;
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_capture(s, NULL, CPOOL_CAPTURE_GLOBAL, body, &c, &g), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_EQ(c.calls, 0);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_capture_end(s, &outer));
    CHECK(outer != NULL);
    cpool_graph_release(outer);
    cpool_stream_destroy(s);
}

/* ---- allocation under capture ----------------------------------------------------- */

/* A sealed pool is accepted by begin; allocation under it fails with SEALED
 * and changes nothing; the capture goes on. */
static void sealed_pool_under_capture(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    cpool_pool_stats before, after;
    void *p = NULL;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_pool_seal(pool);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    before = stats_of(pool);
    CHECK_STATUS(cpool_alloc(pool, 1000, s, &p), CPOOL_ERR_SEALED);
    after = stats_of(pool);
    CHECK_STATS_EQ(before, after);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL)); /* record still works */
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_PTR_EQ(cpool_graph_pool(g), pool);
    CHECK_EQ(cpool_graph_pool_buffer_count(g), 1);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    CHECK(cpool_pool_is_sealed(pool));
    after = stats_of(pool);
    CHECK_EQ(after.alloc_count, 0);
    CHECK_EQ(after.reserved_bytes, 0);
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Exact counters through a capture that allocates and frees. */
static void alloc_under_capture_stats(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    cpool_pool_stats st;
    void *outside = NULL, *tmp = NULL, *out = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 500, s, &outside));
    st = stats_of(pool);
    CHECK_EQ(st.graph_reserved_bytes, 0);

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_alloc(pool, 1000, s, &tmp));
    CHECK_EQ((uintptr_t)tmp % 256, 0);
    CHECK(!ranges_overlap(tmp, 1000, outside, 500));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 1500);
    CHECK_EQ(st.allocated_bytes_peak, 1500);
    CHECK_EQ(st.alloc_count, 2);
    CHECK_GT(st.graph_reserved_bytes, 0);
    CHECK_STATS_SANE(st);
    REQUIRE_OK(cpool_alloc(pool, 3000, s, &out)); /* an output: stays allocated */
    CHECK_OK(cpool_memset_async(s, tmp, 1, 1000));
    CHECK_OK(cpool_memcpy_async(s, out, tmp, 1000));
    CHECK_OK(cpool_free(pool, tmp, s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 3500);
    CHECK_EQ(st.allocated_bytes_peak, 4500);
    CHECK_EQ(st.alloc_count, 3);
    CHECK_EQ(st.free_count, 1);
    CHECK_GT(st.graph_reserved_bytes, 0); /* the freed block stays with the graphs */
    CHECK_EQ(st.graph_count, 0);
    REQUIRE_OK(cpool_capture_end(s, &g));
    st = stats_of(pool);
    CHECK_EQ(st.graph_count, 1);
    CHECK_EQ(st.allocated_bytes, 3500);
    CHECK_GT(st.graph_reserved_bytes, 0);
    CHECK_STATS_SANE(st);

    /* Launches allocate nothing. */
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(stats_of(pool).alloc_count, 3);
    CHECK_EQ(stats_of(pool).allocated_bytes, 3500);
    CHECK_BYTES(s, out, 1000, 1);

    cpool_graph_release(g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, out, s));
    CHECK_OK(cpool_free(pool, outside, s));
    st = stats_of(pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.free_count, 3);
    /* No graph, no capture, nothing allocated: trim gives everything back. */
    CHECK_OK(cpool_pool_trim(pool));
    st = stats_of(pool);
    CHECK_EQ(st.reserved_bytes, 0);
    CHECK_EQ(st.graph_reserved_bytes, 0);
    CHECK_EQ(st.segment_count, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A failing allocation or free under capture from a pool other than the
 * capture's own changes nothing: that pool is not tied to the graph. */
static void failed_alloc_under_capture_takes_no_reference(cpool_device *dev) {
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL;
    cpool_pool *bound = NULL, *small = NULL;
    cpool_graph *g = NULL;
    cpool_pool_options opts;
    cpool_pool_stats before, after;
    void *p = NULL;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    memset(&opts, 0, sizeof opts);
    opts.struct_size = sizeof opts;
    opts.max_reserved_bytes = 2u << 20;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &bound));
    REQUIRE_OK(cpool_pool_create(dev, &opts, &small));
    CHECK_OK(cpool_pool_record(small, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, bound, CPOOL_CAPTURE_GLOBAL));
    before = stats_of(small);
    CHECK_STATUS(cpool_alloc(small, 8u << 20, s, &p), CPOOL_ERR_OUT_OF_MEMORY);
    CHECK_STATUS(cpool_free(small, &obj, s), CPOOL_ERR_INVALID_ARGUMENT); /* not the pool's */
    after = stats_of(small);
    CHECK_STATS_EQ(before, after);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_EQ(stats_of(small).graph_count, 0);
    cpool_pool_release(small); /* the caller's is the only reference */
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_graph_release(g);
    cpool_pool_release(bound);
    cpool_stream_destroy(s);
}

/* A pool a capture holds only once the capture allocated from it, after a
 * clear of that pool during the capture: work captured before may use what
 * the clear dropped, so the graph is stale, as it is for a pool held from
 * the begin. */
static void pool_held_after_its_clear_makes_the_graph_stale(cpool_device *dev) {
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL;
    cpool_pool *bound = NULL, *other = NULL;
    cpool_graph *g = NULL;
    void *p = NULL;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &bound));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    CHECK_OK(cpool_pool_record(other, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, bound, CPOOL_CAPTURE_GLOBAL));
    cpool_pool_clear_buffers(other); /* drops obj, which the capture may use */
    CHECK_EQ(aload(&obj.drops), 1);
    REQUIRE_OK(cpool_alloc(other, 1024, s, &p)); /* the graph holds `other` from here */
    CHECK_OK(cpool_free(other, p, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_STATUS(cpool_graph_launch(g, s), CPOOL_ERR_STALE_GRAPH);
    cpool_graph_release(g);
    cpool_pool_release(other);
    cpool_pool_release(bound);
    cpool_stream_destroy(s);
}

/* The pool and graph calls that do internal device work (grow, give back,
 * wait for the device, destroy an executable) keep a GLOBAL-mode capture on
 * the calling thread valid: that work is the library's, not the capture's.
 * Each call gets a capture of its own, so a failure names the call. */
typedef enum {
    OP_ALLOC_GROW_OTHER_STREAM,
    OP_RECORD_AND_STATS,
    OP_CLEAR_OTHER_POOL,
    OP_TRIM_OTHER_POOL,
    OP_RELEASE_OTHER_POOL,
    OP_RELEASE_GRAPH,
    OP_COUNT
} capture_op;
static const char *const capture_op_names[OP_COUNT] = {
    "alloc (growing) on another stream", "record and get_stats", "clear_buffers of another pool",
    "trim of another pool",              "last release of another pool", "last release of a graph"};

static void library_calls_keep_global_capture_valid(cpool_device *dev) {
    static drop_log log;
    static tracked obj;
    static int count;
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *bound = NULL;
    int op;
    drop_log_init(&log);
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &bound));
    for (op = 0; op < OP_COUNT; op++) {
        cpool_pool *other = NULL;
        cpool_graph *victim = NULL, *g = NULL;
        cpool_capture_state state;
        cpool_status st;
        void *p = NULL;
        tracked_init(&obj, &log, op, NULL);
        REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
        CHECK_OK(cpool_pool_record(other, &obj, tracked_drop, NULL));
        CHECK_OK(cpool_alloc(other, 1u << 20, t, &p)); /* a segment for trim/release to give back */
        CHECK_OK(cpool_free(other, p, t));
        if (op == OP_RELEASE_GRAPH) {
            REQUIRE_OK(cpool_capture_begin(t, NULL, CPOOL_CAPTURE_GLOBAL));
            CHECK_OK(cpool_launch_host(t, cb_inc, &count));
            REQUIRE_OK(cpool_capture_end(t, &victim));
            CHECK_OK(cpool_graph_launch(victim, t));
            CHECK_OK(cpool_stream_synchronize(t));
        }
        CHECK_OK(cpool_launch_host(t, cb_inc, &count)); /* t has work recorded before the capture */
        REQUIRE_OK(cpool_capture_begin(s, bound, CPOOL_CAPTURE_GLOBAL));
        CHECK_OK(cpool_launch_host(s, cb_inc, &count));
        switch ((capture_op)op) {
        case OP_ALLOC_GROW_OTHER_STREAM:
            CHECK_OK(cpool_alloc(other, 64u << 20, t, &p));
            CHECK_OK(cpool_free(other, p, t));
            break;
        case OP_RECORD_AND_STATS:
            CHECK_OK(cpool_pool_record(other, NULL, NULL, NULL));
            CHECK_OK(cpool_pool_record(bound, NULL, NULL, NULL));
            (void)stats_of(other);
            (void)stats_of(bound);
            break;
        case OP_CLEAR_OTHER_POOL:
            cpool_pool_clear_buffers(other);
            break;
        case OP_TRIM_OTHER_POOL:
            CHECK_OK(cpool_pool_trim(other));
            break;
        case OP_RELEASE_OTHER_POOL:
            cpool_pool_release(other);
            other = NULL;
            break;
        case OP_RELEASE_GRAPH:
            cpool_graph_release(victim);
            victim = NULL;
            break;
        case OP_COUNT:
            break;
        }
        CHECK_OK(cpool_capture_status(s, &state));
        if (state != CPOOL_CAPTURE_ACTIVE)
            check_report_(__FILE__, __LINE__, "%s broke the capture (state %d)", capture_op_names[op], (int)state);
        st = cpool_capture_end(s, &g);
        if (st != CPOOL_OK)
            check_report_(__FILE__, __LINE__, "after %s, capture_end returned %s: %s", capture_op_names[op],
                          cpool_status_string(st), cpool_last_error());
        if (g) {
            CHECK_OK(cpool_graph_launch(g, s));
            CHECK_OK(cpool_stream_synchronize(s));
        }
        cpool_graph_release(g);
        cpool_graph_release(victim);
        cpool_pool_release(other);
        CHECK_OK(cpool_stream_synchronize(t));
        CHECK(wait_for_int(&obj.drops, 1, WAIT_TIMEOUT_MS));
    }
    cpool_pool_release(bound);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
}

/* A capture bound to a pool of another device is refused (needs CUDA and the
 * host backend side by side). */
static void capture_pool_of_other_device(cpool_device *dev) {
    cpool_device *host = NULL;
    cpool_pool *hpool = NULL;
    cpool_stream *s = NULL;
    if (cpool_device_backend(dev) != CPOOL_BACKEND_CUDA) return; /* one device only */
    REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &host));
    REQUIRE_OK(cpool_pool_create(host, NULL, &hpool));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_STATUS(cpool_capture_begin(s, hpool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    cpool_stream_destroy(s);
    cpool_pool_release(hpool);
    cpool_device_close(host);
}

static const check_case cases[] = {
    CHECK_CASE(capture_argument_errors),
    CHECK_CASE(capture_status_transitions),
    CHECK_CASE(capture_begin_twice),
    CHECK_CASE(capture_end_null_out_keeps_capturing),
    CHECK_CASE(capture_end_on_other_stream),
    CHECK_CASE(captured_host_work_runs_only_on_launch),
    CHECK_CASE(captured_copies_replay),
    CHECK_CASE(capture_modes),
    CHECK_CASE(sync_under_capture_invalidates),
    CHECK_CASE(scoped_capture_ok),
    CHECK_CASE(scoped_capture_failing_body),
    CHECK_CASE(scoped_capture_body_breaks_capture),
    CHECK_CASE(scoped_capture_already_capturing),
    CHECK_CASE(sealed_pool_under_capture),
    CHECK_CASE(alloc_under_capture_stats),
    CHECK_CASE(failed_alloc_under_capture_takes_no_reference),
    CHECK_CASE(pool_held_after_its_clear_makes_the_graph_stale),
    CHECK_CASE(library_calls_keep_global_capture_valid),
    CHECK_CASE(capture_pool_of_other_device),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
