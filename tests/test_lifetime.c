/* Lifetimes: nothing is dropped while device work that may use it can run,
 * nothing is skipped, nothing runs twice; releases from stream callbacks are
 * deferred, not skipped; drops run on ordinary threads.
 *
 * Arguments of captured or enqueued work live in static storage: if the
 * library got a lifetime wrong, the work must not read a dead stack frame. */
#include "check.h"
#include "helpers.h"

/* A drop that calls into the runtime (as a cudaFree would): it synchronizes a
 * stream of its own, which is legal only on an ordinary thread. */
typedef struct runtime_drop {
    tracked t;
    cpool_stream *other;
    int ran;
    cpool_status sync_status;
} runtime_drop;
static void runtime_drop_fn(void *object) {
    runtime_drop *r = (runtime_drop *)object;
    int dummy = 0;
    r->sync_status = cpool_launch_host(r->other, cb_inc, &dummy);
    if (r->sync_status == CPOOL_OK) r->sync_status = cpool_stream_synchronize(r->other);
    r->ran = dummy;
    tracked_drop(&r->t);
}

/* The graph sleeps ~50 ms and then sets a flag. Graph and pool are released
 * right after the launch; the drops must see the flag set, and run on a
 * thread that is not the stream's callback thread. */
static void drops_wait_for_launched_graph(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    static thread_note note;
    static drop_log log;
    static tracked obj[3];
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    int i;
    astore(&flag, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;
    memset(&note, 0, sizeof note);
    drop_log_init(&log);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 3; i++) {
        tracked_init(&obj[i], &log, i, &flag);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    cpool_pool_seal(pool);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_note_thread, &note));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    cpool_graph_release(g);
    cpool_pool_release(pool);
    CHECK(wait_for_int(&log.count, 3, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 3);
    for (i = 0; i < 3; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
        CHECK_EQ(obj[i].watch_at_drop, 1); /* the graph had finished */
        if (aload(&note.set)) CHECK(!pthread_equal(obj[i].drop_thread, note.thread));
    }
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&note.set), 1);
    cpool_stream_destroy(s);
    CHECK_EQ(aload(&log.count), 3);
}

/* The last pool reference goes from inside a cpool_launch_host callback: no
 * deadlock, and the drops are deferred, not skipped. */
static void cb_release_pool(void *arg) {
    release_in_callback *r = (release_in_callback *)arg;
    r->thread = pthread_self();
    cpool_pool_release(r->pool);
    astore(&r->done, 1);
}
static void cb_release_graph(void *arg) {
    release_in_callback *r = (release_in_callback *)arg;
    r->thread = pthread_self();
    cpool_graph_release(r->graph);
    astore(&r->done, 1);
}
static void cb_clear_pool(void *arg) {
    release_in_callback *r = (release_in_callback *)arg;
    r->thread = pthread_self();
    cpool_pool_clear_buffers(r->pool);
    astore(&r->done, 1);
}

static void last_pool_release_in_host_callback(cpool_device *dev) {
    static drop_log log;
    static tracked obj[4];
    static runtime_drop rd;
    static release_in_callback r;
    cpool_stream *s = NULL, *other = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    int i;
    drop_log_init(&log);
    memset(&r, 0, sizeof r);
    memset(&rd, 0, sizeof rd);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &other));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p)); /* memory to give back too */
    for (i = 0; i < 4; i++) {
        tracked_init(&obj[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    tracked_init(&rd.t, &log, 4, NULL);
    rd.other = other;
    CHECK_OK(cpool_pool_record(pool, &rd, runtime_drop_fn, NULL));
    r.pool = pool;
    CHECK_OK(cpool_memset_async(s, p, 0, 4096));
    CHECK_OK(cpool_launch_host(s, cb_release_pool, &r));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&r.done), 1);
    cpool_wait_deferred();
    CHECK_EQ(aload(&log.count), 5);
    for (i = 0; i < 5 && i < aload(&log.count); i++) CHECK_EQ(log.order[i], i);
    for (i = 0; i < 4; i++) {
        CHECK_EQ(aload(&obj[i].drops), 1);
        if (aload(&obj[i].drops)) CHECK(!pthread_equal(obj[i].drop_thread, r.thread));
    }
    CHECK_EQ(aload(&rd.t.drops), 1);
    CHECK_STATUS(rd.sync_status, CPOOL_OK); /* the drop could use the runtime */
    CHECK_EQ(rd.ran, 1);
    cpool_stream_destroy(s);
    cpool_stream_destroy(other);
}

/* The last graph reference (holding the pool's last) goes inside a callback
 * on the stream the graph ran on. */
static void last_graph_release_in_host_callback(cpool_device *dev) {
    static drop_log log;
    static tracked obj[2];
    static release_in_callback r;
    static int count;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    int i;
    drop_log_init(&log);
    memset(&r, 0, sizeof r);
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 2; i++) {
        tracked_init(&obj[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool);
    r.graph = g;
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_launch_host(s, cb_release_graph, &r));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&r.done), 1);
    CHECK_EQ(aload(&count), 1);
    cpool_wait_deferred();
    CHECK(wait_for_int(&log.count, 2, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 2);
    for (i = 0; i < 2; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
        if (aload(&obj[i].drops)) CHECK(!pthread_equal(obj[i].drop_thread, r.thread));
    }
    cpool_stream_destroy(s);
}

/* clear_buffers inside a callback: the drops are handed off, then happen. */
static void clear_in_host_callback(cpool_device *dev) {
    static drop_log log;
    static tracked obj[3];
    static release_in_callback r;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    size_t idx = 99;
    int i;
    drop_log_init(&log);
    memset(&r, 0, sizeof r);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 3; i++) {
        tracked_init(&obj[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    r.pool = pool;
    CHECK_OK(cpool_launch_host(s, cb_clear_pool, &r));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&r.done), 1);
    cpool_wait_deferred();
    CHECK_EQ(aload(&log.count), 3);
    for (i = 0; i < 3; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
        if (aload(&obj[i].drops)) CHECK(!pthread_equal(obj[i].drop_thread, r.thread));
    }
    CHECK_EQ(cpool_pool_buffer_count(pool), 0);
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, &idx));
    CHECK_EQ(idx, 0);
    cpool_pool_release(pool);
    for (i = 0; i < 3; i++) CHECK_EQ(aload(&obj[i].drops), 1);
    cpool_stream_destroy(s);
}

/* The last release waits for every stream of the device, not only the ones
 * that touched the pool. */
static void release_waits_for_every_stream(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL, *unrelated = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    astore(&flag, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &flag);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &unrelated));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 1024, s, &p));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    CHECK_OK(cpool_launch_host(unrelated, cb_sleep_set, &slow));
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_EQ(obj.watch_at_drop, 1);
    cpool_stream_destroy(s);
    cpool_stream_destroy(unrelated);
}

/* Holds the stream until the test opens the gate (or ~3 s passed, so that
 * a release that waits for the work shows as a failed check, not a hang),
 * then sets *done: stream work that ends when the test says so. */
typedef struct gate {
    int open;
    int done;
} gate;
static void cb_wait_gate(void *arg) {
    gate *g = (gate *)arg;
    for (unsigned waited = 0; !aload(&g->open) && waited < 3000; waited++) sleep_ms(1);
    astore(&g->done, 1);
}

/* The graph's last release, holding its pool's last reference, returns while
 * the stream still runs work (a serving loop must not stall on it); the pool
 * is torn down by the library's thread once that work ended: the drop sees
 * the work done, and the graph's write into the pool's memory, made after
 * the gate, finds the memory still there. */
static void last_graph_release_does_not_wait_for_the_device(cpool_device *dev) {
    static gate gt;
    static drop_log log;
    static tracked obj;
    const size_t n = 4096;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *scratch = NULL;
    astore(&gt.open, 0);
    astore(&gt.done, 0);
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &gt.done);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &scratch));
    CHECK_OK(cpool_memset_async(s, scratch, 0x5a, n));
    CHECK_OK(cpool_free(pool, scratch, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool); /* the graph holds the last reference */
    CHECK_OK(cpool_launch_host(s, cb_wait_gate, &gt));
    CHECK_OK(cpool_graph_launch(g, s)); /* runs after the gate */
    cpool_graph_release(g);
    CHECK_EQ(aload(&gt.done), 0); /* returned while the stream was still held */
    CHECK_EQ(aload(&obj.drops), 0);
    astore(&gt.open, 1);
    cpool_wait_deferred();
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_EQ(obj.watch_at_drop, 1); /* after the work ended */
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
}

/* The seed's last release: once the device finished the graph's work, the
 * release of the last reference drops the recorded objects, in
 * registration order, on the calling thread, before it returns. */
static void last_graph_release_after_the_work_drops_here(cpool_device *dev) {
    static drop_log log;
    static tracked objs[3];
    const size_t n = 4 * 1024 * 1024;
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    drop_log_init(&log);
    cpool_pool *pool = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (int i = 0; i < 3; i++) {
        tracked_init(&objs[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &objs[i], tracked_drop, NULL));
    }
    void *eager = NULL;
    CHECK_OK(cpool_alloc(pool, n, fx.s, &eager));
    CHECK_OK(cpool_free(pool, eager, fx.s));
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture_begin(fx.s, pool, CPOOL_CAPTURE_GLOBAL));
    void *scratch = NULL;
    CHECK_OK(cpool_alloc(pool, n, fx.s, &scratch));
    CHECK_OK(cpool_memset_async(fx.s, scratch, 0x5a, n));
    CHECK_OK(cpool_free(pool, scratch, fx.s));
    REQUIRE_OK(cpool_capture_end(fx.s, &g));
    cpool_pool_release(pool); /* the graph holds the last reference */
    CHECK_OK(cpool_graph_launch(g, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_graph_release(g);
    CHECK_EQ(aload(&log.count), 3); /* dropped before the release returned */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&objs[i].drops), 1);
        CHECK(pthread_equal(objs[i].drop_thread, pthread_self()));
    }
    cpool_wait_deferred();
    CHECK_EQ(aload(&log.count), 3);
}

/* Releasing the last graph reference while its launch still runs is safe:
 * the launch completes, and its pool goes only after it. */
static void graph_released_while_running(cpool_device *dev) {
    static int flag, after;
    static sleep_set slow;
    static drop_log log;
    static tracked obj;
    const size_t n = 4096;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *keep = NULL;
    cpool_graph *g = NULL;
    void *scratch = NULL, *out = NULL;
    astore(&flag, 0);
    astore(&after, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &flag);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &keep));
    REQUIRE_OK(cpool_alloc(keep, n, s, &out));
    CHECK_OK(cpool_memset_async(s, out, 0, n));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &scratch));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    CHECK_OK(cpool_memset_async(s, scratch, 0x2f, n));
    CHECK_OK(cpool_memcpy_async(s, out, scratch, n));
    CHECK_OK(cpool_free(pool, scratch, s));
    CHECK_OK(cpool_launch_host(s, cb_inc, &after));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool);
    CHECK_OK(cpool_graph_launch(g, s));
    cpool_graph_release(g); /* the launch is still sleeping */
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&after), 1);
    CHECK_BYTES(s, out, n, 0x2f);
    CHECK(wait_for_int(&log.count, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_EQ(obj.watch_at_drop, 1);
    CHECK_OK(cpool_free(keep, out, s));
    cpool_pool_release(keep);
    cpool_stream_destroy(s);
}

/* A pool used under a capture bound to another pool (or to none) is held
 * by the graph too. */
static void graph_holds_other_pool_used_under_capture(cpool_device *dev) {
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
    CHECK_OK(cpool_alloc(other, 2048, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 0x31, 2048));
    CHECK_OK(cpool_free(other, p, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_PTR_EQ(cpool_graph_pool(g), bound);
    CHECK_EQ(stats_of(other).graph_count, 1);
    CHECK_GT(stats_of(other).graph_reserved_bytes, 0);
    cpool_pool_release(other);
    cpool_pool_release(bound);
    CHECK_EQ(aload(&obj.drops), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    CHECK(wait_for_int(&obj.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_wait_deferred(); /* the drop has returned: obj may be reused */

    /* The same with a capture bound to no pool at all. */
    tracked_init(&obj, &log, 1, NULL);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    CHECK_OK(cpool_pool_record(other, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(other, 2048, s, &p));
    CHECK_OK(cpool_free(other, p, s));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK(cpool_graph_pool(g) == NULL);
    CHECK_EQ(stats_of(other).graph_count, 1);
    cpool_pool_release(other);
    CHECK_EQ(aload(&obj.drops), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    CHECK(wait_for_int(&obj.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

/* A capture that uses more pools than it holds without a heap array: every
 * pool is held by the graph (or, for a broken capture, by nobody), through
 * an update to fewer pools too. */
enum { MANY_POOLS = 10 };

typedef struct many_pools {
    cpool_pool *pools[MANY_POOLS];
    int used; /* the body allocates from pools[0..used) */
} many_pools;

static cpool_status alloc_from_each(cpool_stream *s, void *ctx) {
    many_pools *m = ctx;
    for (int i = 0; i < m->used; i++) {
        void *p = NULL;
        cpool_status st = cpool_alloc(m->pools[i], 512, s, &p);
        if (st == CPOOL_OK) st = cpool_free(m->pools[i], p, s);
        if (st != CPOOL_OK) return st;
    }
    return CPOOL_OK;
}

static void graph_holds_many_pools_used_under_capture(cpool_device *dev) {
    static drop_log log;
    static tracked objs[MANY_POOLS];
    many_pools m = {.used = MANY_POOLS};
    cpool_stream *s = NULL;
    cpool_graph *g = NULL;
    drop_log_init(&log);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    for (int i = 0; i < MANY_POOLS; i++) {
        tracked_init(&objs[i], &log, i, NULL);
        REQUIRE_OK(cpool_pool_create(dev, NULL, &m.pools[i]));
        CHECK_OK(cpool_pool_record(m.pools[i], &objs[i], tracked_drop, NULL));
    }

    /* A broken capture holds nothing once it ended. */
    REQUIRE_OK(cpool_capture_begin(s, m.pools[0], CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(alloc_from_each(s, &m));
    CHECK_STATUS(cpool_stream_synchronize(s), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK_STATUS(cpool_capture_end(s, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    for (int i = 0; i < MANY_POOLS; i++) CHECK_EQ(stats_of(m.pools[i]).graph_count, 0);

    REQUIRE_OK(cpool_capture(s, m.pools[0], CPOOL_CAPTURE_GLOBAL, alloc_from_each, &m, &g));
    CHECK_PTR_EQ(cpool_graph_pool(g), m.pools[0]);
    for (int i = 0; i < MANY_POOLS; i++) CHECK_EQ(stats_of(m.pools[i]).graph_count, 1);

    /* Updated to work on the first three pools: the others are let go. */
    m.used = 3;
    CHECK_OK(cpool_graph_update(g, s, alloc_from_each, &m));
    CHECK_PTR_EQ(cpool_graph_pool(g), m.pools[0]);
    for (int i = 0; i < MANY_POOLS; i++) CHECK_EQ(stats_of(m.pools[i]).graph_count, i < 3 ? 1 : 0);

    for (int i = 0; i < MANY_POOLS; i++) cpool_pool_release(m.pools[i]);
    for (int i = 3; i < MANY_POOLS; i++) CHECK(wait_for_int(&objs[i].drops, 1, WAIT_TIMEOUT_MS));
    for (int i = 0; i < 3; i++) CHECK_EQ(aload(&objs[i].drops), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_graph_release(g);
    for (int i = 0; i < MANY_POOLS; i++) {
        CHECK(wait_for_int(&objs[i].drops, 1, WAIT_TIMEOUT_MS));
        CHECK_EQ(aload(&objs[i].drops), 1);
    }
    cpool_stream_destroy(s);
}

/* Every object is dropped exactly once across clears, graphs, retains and
 * the last release, in registration order within each batch. */
static void exactly_once_across_everything(cpool_device *dev) {
    static drop_log log;
    static tracked obj[10];
    static int count;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    size_t idx;
    int i;
    drop_log_init(&log);
    astore(&count, 0);
    for (i = 0; i < 10; i++) tracked_init(&obj[i], &log, i, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 3; i++) {
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, &idx));
        CHECK_EQ(idx, i);
    }
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(cpool_pool_record(pool, &obj[3], tracked_drop, &idx)); /* under capture */
    CHECK_EQ(idx, 3);
    REQUIRE_OK(cpool_capture_end(s, &g1));
    CHECK_OK(cpool_graph_launch(g1, s));
    cpool_pool_clear_buffers(pool); /* waits for g1's launch, drops 0..3 */
    CHECK_EQ(aload(&count), 1);
    CHECK_EQ(aload(&log.count), 4);
    for (i = 4; i < 7; i++) {
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, &idx));
        CHECK_EQ(idx, i - 4);
    }
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g2));
    CHECK_PTR_EQ(cpool_pool_retain(pool), pool);
    cpool_pool_release(pool);
    cpool_pool_release(pool); /* the graphs hold it */
    for (i = 7; i < 10; i++) CHECK_OK(cpool_pool_record(cpool_graph_pool(g2), &obj[i], tracked_drop, NULL));
    CHECK_STATUS(cpool_graph_launch(g1, s), CPOOL_ERR_STALE_GRAPH);
    CHECK_OK(cpool_graph_launch(g2, s));
    cpool_graph_release(g1);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 2);
    CHECK_EQ(aload(&log.count), 4);
    cpool_graph_release(g2);
    CHECK(wait_for_int(&log.count, 10, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 10);
    for (i = 0; i < 10; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
    }
    cpool_stream_destroy(s);
}

/* Work enqueued on a stream before a capture began on it still runs, and
 * still uses the pool's memory: a clear, the last release and a trim wait for
 * it like for any other stream work ("every stream of the device"). */
typedef enum { VIA_CLEAR, VIA_RELEASE, VIA_TRIM } teardown_kind;

static void teardown_with_pending_precapture_work(cpool_device *dev, teardown_kind kind) {
    static int flag;
    static sleep_set slow;
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *p = NULL;
    astore(&flag, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &flag);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    /* Only the clear, which frees no memory, gets a pending write into the
     * pool's memory: after a premature release or trim that write would hit
     * freed memory and crash the binary instead of failing a check. The
     * flag shows the order. */
    if (kind == VIA_CLEAR) CHECK_OK(cpool_memset_async(s, p, 0x12, 4096));
    if (kind == VIA_TRIM) CHECK_OK(cpool_free(pool, p, s));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    switch (kind) {
    case VIA_CLEAR:
        cpool_pool_clear_buffers(pool);
        CHECK_EQ(aload(&obj.drops), 1);
        CHECK_EQ(obj.watch_at_drop, 1);
        break;
    case VIA_RELEASE:
        cpool_pool_release(pool); /* p still allocated: its memory goes back here */
        pool = NULL;
        CHECK_EQ(aload(&obj.drops), 1);
        CHECK_EQ(obj.watch_at_drop, 1);
        break;
    case VIA_TRIM:
        CHECK_OK(cpool_pool_trim(pool));
        CHECK_EQ(aload(&flag), 1);
        break;
    }
    CHECK_OK(cpool_capture_end(s, &g));
    cpool_graph_release(g);
    CHECK_OK(cpool_stream_synchronize(s));
    if (pool && kind == VIA_CLEAR) CHECK_OK(cpool_free(pool, p, s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void clear_waits_for_work_before_a_capture(cpool_device *dev) {
    teardown_with_pending_precapture_work(dev, VIA_CLEAR);
}
static void release_waits_for_work_before_a_capture(cpool_device *dev) {
    teardown_with_pending_precapture_work(dev, VIA_RELEASE);
}
static void trim_waits_for_work_before_a_capture(cpool_device *dev) {
    teardown_with_pending_precapture_work(dev, VIA_TRIM);
}

/* The same when the pending work is a launch of the pool's own graph and
 * the stream it runs on has begun another capture since. */
static void teardown_waits_for_graph_launch_before_a_capture(cpool_device *dev) {
    static int flag;
    static sleep_set slow;
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL, *h = NULL;
    astore(&flag, 0);
    slow.ms = 50, slow.flag = &flag, slow.value = 1;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &flag);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool);
    CHECK_OK(cpool_graph_launch(g, s));
    REQUIRE_OK(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL));
    cpool_graph_release(g); /* the pool's last reference */
    CHECK(wait_for_int(&log.count, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_EQ(obj.watch_at_drop, 1);
    REQUIRE_OK(cpool_capture_end(s, &h));
    cpool_graph_release(h);
    cpool_stream_destroy(s);
}

/* A clear handed off from a callback, then new records and the last release
 * on the caller's thread: registration order overall, each exactly once. */
static void deferred_clear_then_release_keeps_order(cpool_device *dev) {
    static drop_log log;
    static tracked obj[4];
    static release_in_callback r;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    int i;
    drop_log_init(&log);
    memset(&r, 0, sizeof r);
    for (i = 0; i < 4; i++) tracked_init(&obj[i], &log, i, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj[0], tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(pool, &obj[1], tracked_drop, NULL));
    r.pool = pool;
    CHECK_OK(cpool_launch_host(s, cb_clear_pool, &r));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_record(pool, &obj[2], tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(pool, &obj[3], tracked_drop, NULL));
    cpool_pool_release(pool);
    cpool_wait_deferred();
    CHECK(wait_for_int(&log.count, 4, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 4);
    for (i = 0; i < 4; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
    }
    cpool_stream_destroy(s);
}

/* A graph keeps its device alive, like streams and pools do. */
static void graph_outlives_closed_device(cpool_device *dev0) {
    static int count;
    cpool_device *dev = NULL;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    astore(&count, 0);
    REQUIRE_OK(cpool_device_open(cpool_device_backend(dev0), 0, &dev));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool);
    cpool_device_close(dev);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    cpool_stream_destroy(s);
    cpool_graph_release(g);
}

/* Opening the same backend and ordinal again gives the same device: a graph
 * launches on a stream of the second handle, and its pool serves it. */
static void reopened_device_is_the_same_device(cpool_device *dev) {
    static int count;
    cpool_device *again = NULL;
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *p = NULL;
    astore(&count, 0);
    REQUIRE_OK(cpool_device_open(cpool_device_backend(dev), 0, &again));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(again, &t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_alloc(pool, 256, t, &p));
    if (p) CHECK_OK(cpool_free(pool, p, t));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, t));
    CHECK_OK(cpool_stream_synchronize(t));
    CHECK_EQ(aload(&count), 1);
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_stream_destroy(t);
    cpool_device_close(again);
}

static const check_case cases[] = {
    CHECK_CASE(drops_wait_for_launched_graph),
    CHECK_CASE(last_pool_release_in_host_callback),
    CHECK_CASE(last_graph_release_in_host_callback),
    CHECK_CASE(clear_in_host_callback),
    CHECK_CASE(release_waits_for_every_stream),
    CHECK_CASE(graph_released_while_running),
    CHECK_CASE(last_graph_release_does_not_wait_for_the_device),
    CHECK_CASE(last_graph_release_after_the_work_drops_here),
    CHECK_CASE(graph_holds_other_pool_used_under_capture),
    CHECK_CASE(graph_holds_many_pools_used_under_capture),
    CHECK_CASE(exactly_once_across_everything),
    CHECK_CASE(deferred_clear_then_release_keeps_order),
    CHECK_CASE(graph_outlives_closed_device),
    CHECK_CASE(reopened_device_is_the_same_device),
    CHECK_CASE(clear_waits_for_work_before_a_capture),
    CHECK_CASE(teardown_waits_for_graph_launch_before_a_capture),
    CHECK_CASE(trim_waits_for_work_before_a_capture),
    CHECK_CASE(release_waits_for_work_before_a_capture),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
