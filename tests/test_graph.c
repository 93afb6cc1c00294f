/* Graphs: launch, upload, replays, references, the pool a graph holds,
 * stale graphs, and the memory of allocations made under capture. */
#include "check.h"
#include "helpers.h"

/* Captures one cb_inc(counter) on s into a graph bound to pool (may be NULL). */
static cpool_graph *capture_inc(cpool_stream *s, cpool_pool *pool, int *counter) {
    cpool_graph *g = NULL;
    if (!CHECK_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL))) return NULL;
    CHECK_OK(cpool_launch_host(s, cb_inc, counter));
    CHECK_OK(cpool_capture_end(s, &g));
    return g;
}

static void graph_launch_arguments(cpool_device *dev) {
    cpool_stream *s = NULL, *t = NULL;
    cpool_graph *g = NULL, *h = NULL;
    cpool_capture_state state;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    g = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL);
    CHECK_STATUS(cpool_graph_launch(NULL, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_launch(g, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_upload(NULL, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_upload(g, NULL), CPOOL_ERR_INVALID_ARGUMENT);

    /* Launching into a capturing stream is refused; that capture goes on. */
    REQUIRE_OK(cpool_capture_begin(t, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_graph_launch(g, t), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_capture_status(t, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_capture_end(t, &h));
    cpool_graph_release(h);

    /* A stream of another device (where two backends exist). */
    if (cpool_device_backend(dev) == CPOOL_BACKEND_CUDA) {
        cpool_device *host = NULL;
        cpool_stream *hs = NULL;
        REQUIRE_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &host));
        REQUIRE_OK(cpool_stream_create(host, &hs));
        CHECK_STATUS(cpool_graph_launch(g, hs), CPOOL_ERR_INVALID_ARGUMENT);
        cpool_stream_destroy(hs);
        cpool_device_close(host);
    }
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(cpool_graph_replays(g), 0);
    CHECK_EQ(aload(&count), 0);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
}

static void graph_replays_count_launches(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    int count = 0, i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    g = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL);
    CHECK_EQ(cpool_graph_replays(NULL), 0);
    CHECK_EQ(cpool_graph_replays(g), 0);
    for (i = 0; i < 10; i++) CHECK_OK(cpool_graph_launch(g, s));
    CHECK_EQ(cpool_graph_replays(g), 10);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 10);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

/* Upload is idempotent, runs nothing, counts no replay. */
static void graph_upload_idempotent(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    g = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL);
    CHECK_OK(cpool_graph_upload(g, s));
    CHECK_OK(cpool_graph_upload(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 0);
    CHECK_EQ(cpool_graph_replays(g), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_upload(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    CHECK_EQ(cpool_graph_replays(g), 2);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

static void graph_retain_release(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    g = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL);
    CHECK_PTR_EQ(cpool_graph_retain(g), g);
    CHECK_PTR_EQ(cpool_graph_retain(g), g);
    cpool_graph_release(g);
    cpool_graph_release(g);
    cpool_graph_release(NULL); /* no-op */
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    CHECK_EQ(cpool_graph_replays(g), 1);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

typedef struct seen_flag {
    const int *flag;
    int seen;
} seen_flag;
static void cb_see_flag(void *arg) {
    seen_flag *a = (seen_flag *)arg;
    astore(&a->seen, aload(a->flag));
}

/* The native executable: NULL on the host backend and for NULL, the
 * cudaGraphExec_t (non-NULL, the same on every call) on CUDA. */
static void graph_native_per_backend(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    g = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL);
    CHECK(cpool_graph_native(NULL) == NULL);
    if (cpool_device_backend(dev) == CPOOL_BACKEND_HOST) {
        CHECK(cpool_graph_native(g) == NULL);
    } else {
        CHECK(cpool_graph_native(g) != NULL);
        CHECK_PTR_EQ(cpool_graph_native(g), cpool_graph_native(g));
    }
    cpool_graph_release(g);
    cpool_stream_destroy(s);
}

/* A launch runs after the stream's earlier work, on any stream. */
static void graph_launch_in_stream_order(cpool_device *dev) {
    cpool_stream *s = NULL, *t = NULL;
    cpool_graph *g = NULL;
    static int flag;
    static sleep_set slow;
    static seen_flag seen;
    astore(&flag, 0);
    slow.ms = 40, slow.flag = &flag, slow.value = 1;
    seen.flag = &flag;
    astore(&seen.seen, -1);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_see_flag, &seen));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_launch_host(t, cb_sleep_set, &slow));
    CHECK_OK(cpool_graph_launch(g, t)); /* another stream than the capture's */
    CHECK_OK(cpool_stream_synchronize(t));
    CHECK_EQ(aload(&seen.seen), 1);
    cpool_graph_release(g);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
}

/* The graph holds its pool: the caller releases the pool right after
 * capture_end, the graph still launches, and drops come after the graph. */
static void graph_holds_pool_reference(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    drop_log log;
    tracked obj[2];
    int count = 0;
    drop_log_init(&log);
    tracked_init(&obj[0], &log, 0, NULL);
    tracked_init(&obj[1], &log, 1, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj[0], tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(pool, &obj[1], tracked_drop, NULL));
    cpool_pool_seal(pool);
    g = capture_inc(s, pool, &count);
    REQUIRE(g != NULL);
    cpool_pool_release(pool);
    CHECK_PTR_EQ(cpool_graph_pool(g), pool);
    CHECK_EQ(cpool_graph_pool_buffer_count(g), 2);
    CHECK(cpool_pool_is_sealed(cpool_graph_pool(g)));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    CHECK_EQ(aload(&log.count), 0);
    cpool_graph_release(g);
    CHECK(wait_for_int(&log.count, 2, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 2);
    CHECK_EQ(log.order[0], 0);
    CHECK_EQ(log.order[1], 1);
    CHECK_EQ(aload(&obj[0].drops), 1);
    CHECK_EQ(aload(&obj[1].drops), 1);
    cpool_stream_destroy(s);
}

static void graph_pool_buffer_count_follows_pool(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL, *none = NULL;
    int count = 0;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL));
    g = capture_inc(s, pool, &count);
    none = capture_inc(s, NULL, &count);
    REQUIRE(g != NULL && none != NULL);
    CHECK_EQ(cpool_graph_pool_buffer_count(g), 1);
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL));
    CHECK_EQ(cpool_graph_pool_buffer_count(g), 2);
    CHECK(cpool_graph_pool(none) == NULL);
    CHECK_EQ(cpool_graph_pool_buffer_count(none), 0);
    CHECK_EQ(stats_of(pool).graph_count, 1);
    cpool_graph_release(g);
    cpool_graph_release(none);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* After clear_buffers, a graph captured before it is stale: launch returns
 * STALE_GRAPH and runs nothing. Graphs captured after, without a pool, or
 * with another pool, are unaffected. */
static void stale_graph_after_clear(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *other = NULL;
    cpool_graph *old = NULL, *fresh = NULL, *none = NULL, *theirs = NULL;
    drop_log log;
    tracked obj;
    int c_old = 0, c_fresh = 0, c_none = 0, c_theirs = 0;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    old = capture_inc(s, pool, &c_old);
    none = capture_inc(s, NULL, &c_none);
    theirs = capture_inc(s, other, &c_theirs);
    REQUIRE(old && none && theirs);
    CHECK_OK(cpool_graph_launch(old, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&c_old), 1);

    cpool_pool_clear_buffers(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_STATUS(cpool_graph_launch(old, s), CPOOL_ERR_STALE_GRAPH);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&c_old), 1);
    CHECK_EQ(cpool_graph_replays(old), 1);

    fresh = capture_inc(s, pool, &c_fresh);
    REQUIRE(fresh != NULL);
    CHECK_OK(cpool_graph_launch(fresh, s));
    CHECK_OK(cpool_graph_launch(none, s));
    CHECK_OK(cpool_graph_launch(theirs, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&c_fresh), 1);
    CHECK_EQ(aload(&c_none), 1);
    CHECK_EQ(aload(&c_theirs), 1);

    /* New records do not revive the old graph. */
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, NULL));
    CHECK_STATUS(cpool_graph_launch(old, s), CPOOL_ERR_STALE_GRAPH);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&c_old), 1);
    /* A second clear makes `fresh` stale too. */
    cpool_pool_clear_buffers(pool);
    CHECK_STATUS(cpool_graph_launch(fresh, s), CPOOL_ERR_STALE_GRAPH);
    CHECK_EQ(cpool_graph_replays(fresh), 1);

    cpool_graph_release(old);
    cpool_graph_release(fresh);
    cpool_graph_release(none);
    cpool_graph_release(theirs);
    cpool_pool_release(pool);
    cpool_pool_release(other);
    CHECK_EQ(aload(&obj.drops), 1); /* exactly once */
    cpool_stream_destroy(s);
}

/* Several graphs share one pool; it lives until the last of them. */
static void graphs_share_a_pool(cpool_device *dev) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    drop_log log;
    tracked obj;
    int count = 0;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    g1 = capture_inc(s, pool, &count);
    g2 = capture_inc(s, pool, &count);
    REQUIRE(g1 && g2);
    CHECK_EQ(stats_of(pool).graph_count, 2);
    cpool_pool_release(pool);
    CHECK_OK(cpool_graph_launch(g1, s));
    cpool_graph_release(g1);
    CHECK_OK(cpool_graph_launch(g2, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    CHECK(wait_graph_count(cpool_graph_pool(g2), 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 0);
    cpool_graph_release(g2);
    CHECK(wait_for_int(&obj.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

/* ---- memory of allocations under capture ----------------------------------------- */

typedef struct graph_scratch {
    cpool_graph *g;
    void *scratch; /* allocated and freed under capture */
    void *out;     /* allocated under capture, left allocated: the graph's output */
} graph_scratch;

/* Captures: scratch = alloc(n); fill scratch with v; out = alloc(n);
 * out <- scratch; free(scratch). */
static void capture_scratch(cpool_stream *s, cpool_pool *pool, size_t n, int v, graph_scratch *gs) {
    memset(gs, 0, sizeof *gs);
    if (!CHECK_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL))) return;
    CHECK_OK(cpool_alloc(pool, n, s, &gs->scratch));
    CHECK_OK(cpool_memset_async(s, gs->scratch, v, n));
    CHECK_OK(cpool_alloc(pool, n, s, &gs->out));
    CHECK_OK(cpool_memcpy_async(s, gs->out, gs->scratch, n));
    CHECK_OK(cpool_free(pool, gs->scratch, s));
    CHECK_OK(cpool_capture_end(s, &gs->g));
}

/* Graph memory is never handed to allocations outside capture while the
 * graph lives, and a replay never touches what they hold. */
static void graph_memory_not_handed_out(cpool_device *dev) {
    enum { K = 16 };
    const size_t n = 4096;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    graph_scratch gs;
    void *mine[K];
    int i, r;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    capture_scratch(s, pool, n, 0x77, &gs);
    REQUIRE(gs.g != NULL);
    for (i = 0; i < K; i++) {
        REQUIRE_OK(cpool_alloc(pool, n, s, &mine[i]));
        CHECK(!ranges_overlap(mine[i], n, gs.scratch, n));
        CHECK(!ranges_overlap(mine[i], n, gs.out, n));
        CHECK_OK(cpool_memset_async(s, mine[i], 0x11, n));
    }
    for (r = 0; r < 3; r++) {
        CHECK_OK(cpool_graph_launch(gs.g, s));
        CHECK_BYTES(s, gs.out, n, 0x77);
        for (i = 0; i < K; i++) CHECK_BYTES(s, mine[i], n, 0x11);
    }
    /* Free and allocate again, outside capture: still never the graph's blocks. */
    for (i = 0; i < K; i++) CHECK_OK(cpool_free(pool, mine[i], s));
    for (i = 0; i < K; i++) {
        REQUIRE_OK(cpool_alloc(pool, n, s, &mine[i]));
        CHECK(!ranges_overlap(mine[i], n, gs.scratch, n));
        CHECK(!ranges_overlap(mine[i], n, gs.out, n));
    }
    for (i = 0; i < K; i++) CHECK_OK(cpool_free(pool, mine[i], s));
    CHECK_EQ(stats_of(pool).allocated_bytes, n); /* the graph's output */
    cpool_graph_release(gs.g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, gs.out, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A graph's output block is never reused by a later capture into the same
 * pool; a graph's freed scratch may be. */
static void graph_output_not_reused_by_later_capture(cpool_device *dev) {
    const size_t n = 8192;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    graph_scratch a, b;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    capture_scratch(s, pool, n, 0x77, &a);
    capture_scratch(s, pool, n, 0x99, &b);
    REQUIRE(a.g && b.g);
    CHECK(!ranges_overlap(b.scratch, n, a.out, n));
    CHECK(!ranges_overlap(b.out, n, a.out, n));
    CHECK(!ranges_overlap(a.scratch, n, b.out, n));
    CHECK_OK(cpool_graph_launch(a.g, s));
    CHECK_OK(cpool_graph_launch(b.g, s));
    CHECK_BYTES(s, a.out, n, 0x77);
    CHECK_BYTES(s, b.out, n, 0x99);
    CHECK_OK(cpool_graph_launch(b.g, s));
    CHECK_OK(cpool_graph_launch(a.g, s));
    CHECK_BYTES(s, a.out, n, 0x77);
    CHECK_BYTES(s, b.out, n, 0x99);
    CHECK_EQ(stats_of(pool).graph_count, 2);
    cpool_graph_release(a.g);
    cpool_graph_release(b.g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, a.out, s));
    CHECK_OK(cpool_free(pool, b.out, s));
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Trim keeps graph-reserved memory while a graph holds the pool, and gives it
 * back once none does. */
static void trim_respects_live_graphs(cpool_device *dev) {
    const size_t n = 1 << 20;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    graph_scratch gs;
    cpool_pool_stats before, after;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    capture_scratch(s, pool, n, 0x42, &gs);
    REQUIRE(gs.g != NULL);
    before = stats_of(pool);
    CHECK_GE(before.graph_reserved_bytes, 2 * n);
    CHECK_OK(cpool_pool_trim(pool));
    after = stats_of(pool);
    CHECK_EQ(after.graph_reserved_bytes, before.graph_reserved_bytes);
    CHECK_GE(after.reserved_bytes, after.graph_reserved_bytes);
    CHECK_OK(cpool_graph_launch(gs.g, s));
    CHECK_BYTES(s, gs.out, n, 0x42);
    cpool_graph_release(gs.g);
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, gs.out, s));
    CHECK_OK(cpool_pool_trim(pool));
    after = stats_of(pool);
    CHECK_EQ(after.reserved_bytes, 0);
    CHECK_EQ(after.graph_reserved_bytes, 0);
    CHECK_EQ(after.segment_count, 0);
    CHECK_EQ(after.cached_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* A block allocated outside capture and freed under capture stays with the
 * graph (it is used on every replay): not handed to allocations outside
 * while the graph lives. */
static void block_freed_under_capture_stays_with_graph(cpool_device *dev) {
    enum { K = 8 };
    const size_t n = 4096;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *x = NULL, *out = NULL, *mine[K];
    uint64_t graph_before;
    int i;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, s, &out));
    REQUIRE_OK(cpool_alloc(pool, n, s, &x));
    graph_before = stats_of(pool).graph_reserved_bytes;
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_memset_async(s, x, 0x66, n));
    CHECK_OK(cpool_memcpy_async(s, out, x, n));
    CHECK_OK(cpool_free(pool, x, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_GT(stats_of(pool).graph_reserved_bytes, graph_before);
    CHECK_EQ(stats_of(pool).allocated_bytes, n);
    CHECK_OK(cpool_stream_synchronize(s));
    for (i = 0; i < K; i++) {
        REQUIRE_OK(cpool_alloc(pool, n, s, &mine[i]));
        CHECK(!ranges_overlap(mine[i], n, x, n));
        CHECK_OK(cpool_memset_async(s, mine[i], 0x11, n));
    }
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_BYTES(s, out, n, 0x66);
    for (i = 0; i < K; i++) CHECK_BYTES(s, mine[i], n, 0x11);
    for (i = 0; i < K; i++) CHECK_OK(cpool_free(pool, mine[i], s));
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, out, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* Trim while a capture holds the pool keeps the capture's graph memory. */
static void trim_during_capture_keeps_graph_memory(cpool_device *dev) {
    const size_t n = 1 << 20;
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *scratch = NULL, *out = NULL;
    uint64_t graph_bytes;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, t, &out));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &scratch));
    CHECK_OK(cpool_memset_async(s, scratch, 0x4d, n));
    CHECK_OK(cpool_memcpy_async(s, out, scratch, n));
    CHECK_OK(cpool_free(pool, scratch, s));
    graph_bytes = stats_of(pool).graph_reserved_bytes;
    CHECK_GE(graph_bytes, n);
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).graph_reserved_bytes, graph_bytes);
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_BYTES(t, out, n, 0x4d);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, out, t));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
}

static const check_case cases[] = {
    CHECK_CASE(graph_launch_arguments),
    CHECK_CASE(graph_replays_count_launches),
    CHECK_CASE(graph_upload_idempotent),
    CHECK_CASE(graph_retain_release),
    CHECK_CASE(graph_native_per_backend),
    CHECK_CASE(graph_launch_in_stream_order),
    CHECK_CASE(graph_holds_pool_reference),
    CHECK_CASE(graph_pool_buffer_count_follows_pool),
    CHECK_CASE(stale_graph_after_clear),
    CHECK_CASE(graphs_share_a_pool),
    CHECK_CASE(graph_memory_not_handed_out),
    CHECK_CASE(graph_output_not_reused_by_later_capture),
    CHECK_CASE(trim_respects_live_graphs),
    CHECK_CASE(block_freed_under_capture_stays_with_graph),
    CHECK_CASE(trim_during_capture_keeps_graph_memory),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
