/* Thread safety: several threads alloc/free/record/retain/release on one
 * shared pool, capture and launch into it, and race the last release; the
 * counts are exact afterwards. A trim on one thread waits for the work a
 * capture on another was begun after, whether the capture is open or ending.
 * A thread's first calls may be a capture and launches. */
#include "check.h"
#include "helpers.h"

#include <sched.h> /* after check.h, which asks for POSIX */
#include <stdatomic.h>

enum { T = 4 };

/* ---- alloc / free / record / retain / release ------------------------------------ */

enum { ITERS = 150, LIVE = 4 };

typedef struct worker {
    cpool_device *dev;
    cpool_pool *pool;
    int id;
    drop_log *log;
    tracked *objs;   /* ITERS of them */
    size_t *indices; /* index_out of each record */
    uint64_t bytes;  /* total bytes this thread allocated */
} worker;

static void *alloc_worker(void *arg) {
    worker *w = (worker *)arg;
    cpool_stream *s = NULL;
    void *live[LIVE] = {NULL, NULL, NULL, NULL};
    size_t live_n[LIVE] = {0, 0, 0, 0};
    int i, k;
    if (!CHECK_OK(cpool_stream_create(w->dev, &s))) return NULL;
    for (i = 0; i < ITERS; i++) {
        size_t n = 64 + (size_t)((i * 977 + w->id * 131) % 20000);
        unsigned char pattern = (unsigned char)(w->id * 16 + i % 16);
        cpool_pool *ref;
        int slot = i % LIVE;
        ref = cpool_pool_retain(w->pool);
        CHECK(ref == w->pool);
        if (live[slot]) {
            /* The block still holds what this thread wrote: no other thread got it. */
            if (i % 8 == 0) CHECK_BYTES(s, live[slot], live_n[slot], (unsigned char)(w->id * 16 + (i - LIVE) % 16));
            CHECK_OK(cpool_free(w->pool, live[slot], s));
            live[slot] = NULL;
        }
        if (!CHECK_OK(cpool_alloc(w->pool, n, s, &live[slot]))) {
            cpool_pool_release(ref);
            continue;
        }
        live_n[slot] = n;
        w->bytes += n;
        CHECK_OK(cpool_memset_async(s, live[slot], pattern, n));
        tracked_init(&w->objs[i], w->log, w->id * ITERS + i, NULL);
        w->indices[i] = (size_t)-1;
        CHECK_OK(cpool_pool_record(w->pool, &w->objs[i], tracked_drop, &w->indices[i]));
        cpool_pool_release(ref);
    }
    for (k = 0; k < LIVE; k++)
        if (live[k]) CHECK_OK(cpool_free(w->pool, live[k], s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
    return NULL;
}

static void shared_pool_alloc_free_record(cpool_device *dev) {
    static drop_log log;
    static tracked objs[T][ITERS];
    static size_t indices[T][ITERS];
    static char seen[T * ITERS];
    cpool_pool *pool = NULL;
    pthread_t th[T];
    worker w[T];
    cpool_pool_stats st;
    uint64_t total = 0;
    int i, j;
    drop_log_init(&log);
    memset(seen, 0, sizeof seen);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < T; i++) {
        w[i].dev = dev;
        w[i].pool = pool;
        w[i].id = i;
        w[i].log = &log;
        w[i].objs = objs[i];
        w[i].indices = indices[i];
        w[i].bytes = 0;
        CHECK_EQ(pthread_create(&th[i], NULL, alloc_worker, &w[i]), 0);
    }
    for (i = 0; i < T; i++) pthread_join(th[i], NULL);
    for (i = 0; i < T; i++) total += w[i].bytes;

    st = stats_of(pool);
    CHECK_EQ(st.alloc_count, T * ITERS);
    CHECK_EQ(st.free_count, T * ITERS);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_GT(total, 0);
    CHECK_STATS_SANE(st);
    CHECK_EQ(cpool_pool_buffer_count(pool), T * ITERS);
    /* The indices are exactly 0 .. T*ITERS-1. */
    for (i = 0; i < T; i++)
        for (j = 0; j < ITERS; j++) {
            size_t x = indices[i][j];
            if (x >= (size_t)(T * ITERS) || seen[x]) {
                check_report_(__FILE__, __LINE__, "index %zu (thread %d, record %d) out of range or repeated", x, i,
                              j);
                continue;
            }
            seen[x] = 1;
        }
    CHECK_EQ(aload(&log.count), 0);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&log.count), T * ITERS);
    for (i = 0; i < T; i++)
        for (j = 0; j < ITERS; j++) CHECK_EQ(aload(&objs[i][j].drops), 1);
}

/* ---- stats snapshots are consistent while others allocate ------------------------- */

typedef struct reader {
    cpool_pool *pool;
    int *stop;
    int reads;
} reader;

static void *stats_reader(void *arg) {
    reader *r = (reader *)arg;
    while (!aload(r->stop)) {
        cpool_pool_stats st = stats_of(r->pool);
        CHECK_STATS_SANE(st);
        r->reads++;
    }
    return NULL;
}

static void stats_consistent_under_contention(cpool_device *dev) {
    static drop_log log;
    static tracked objs[T][ITERS];
    static size_t indices[T][ITERS];
    cpool_pool *pool = NULL;
    pthread_t th[T], rt;
    worker w[T];
    reader r;
    int stop = 0, i;
    drop_log_init(&log);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    r.pool = pool;
    r.stop = &stop;
    r.reads = 0;
    CHECK_EQ(pthread_create(&rt, NULL, stats_reader, &r), 0);
    for (i = 0; i < T - 1; i++) {
        w[i].dev = dev;
        w[i].pool = pool;
        w[i].id = i;
        w[i].log = &log;
        w[i].objs = objs[i];
        w[i].indices = indices[i];
        w[i].bytes = 0;
        CHECK_EQ(pthread_create(&th[i], NULL, alloc_worker, &w[i]), 0);
    }
    for (i = 0; i < T - 1; i++) pthread_join(th[i], NULL);
    astore(&stop, 1);
    pthread_join(rt, NULL);
    CHECK_GT(r.reads, 0);
    CHECK_EQ(stats_of(pool).alloc_count, (T - 1) * ITERS);
    CHECK_EQ(stats_of(pool).allocated_bytes, 0);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&log.count), (T - 1) * ITERS);
}

/* ---- captures and launches from several threads ----------------------------------- */

enum { LAUNCHES = 20 };

typedef struct capturer {
    cpool_device *dev;
    cpool_pool *pool;
    cpool_capture_mode mode;
    int *counter;
    cpool_graph *graph; /* out */
} capturer;

static void *capture_worker(void *arg) {
    capturer *c = (capturer *)arg;
    cpool_stream *s = NULL;
    void *p = NULL;
    int i;
    if (!CHECK_OK(cpool_stream_create(c->dev, &s))) return NULL;
    for (i = 0; i < 10; i++) { /* captures that are thrown away, racing the others */
        cpool_graph *g = NULL;
        if (!CHECK_OK(cpool_capture_begin(s, c->pool, c->mode))) break;
        CHECK_OK(cpool_alloc(c->pool, 4096 * (size_t)(i + 1), s, &p));
        CHECK_OK(cpool_free(c->pool, p, s));
        CHECK_OK(cpool_capture_end(s, &g));
        cpool_graph_release(g);
    }
    if (CHECK_OK(cpool_capture_begin(s, c->pool, c->mode))) {
        CHECK_OK(cpool_alloc(c->pool, 1 << 16, s, &p));
        CHECK_OK(cpool_memset_async(s, p, 0x7e, 1 << 16));
        CHECK_OK(cpool_launch_host(s, cb_inc, c->counter));
        CHECK_OK(cpool_free(c->pool, p, s));
        CHECK_OK(cpool_capture_end(s, &c->graph));
    }
    cpool_stream_destroy(s);
    return NULL;
}

/* Threads capture into one pool at once (in modes that allow concurrent
 * captures). Their graphs share the pool's graph memory, so, as the design
 * asks, they are launched one after the other, not at once. */
static void concurrent_captures_on_one_pool(cpool_device *dev) {
    static int counter;
    static drop_log log;
    static tracked obj;
    cpool_pool *pool = NULL;
    cpool_stream *s = NULL;
    pthread_t th[T];
    capturer c[T];
    cpool_pool_stats st;
    int i, k;
    astore(&counter, 0);
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    for (i = 0; i < T; i++) {
        c[i].dev = dev;
        c[i].pool = pool;
        c[i].mode = i % 2 ? CPOOL_CAPTURE_RELAXED : CPOOL_CAPTURE_THREAD_LOCAL;
        c[i].counter = &counter;
        c[i].graph = NULL;
        CHECK_EQ(pthread_create(&th[i], NULL, capture_worker, &c[i]), 0);
    }
    for (i = 0; i < T; i++) pthread_join(th[i], NULL);
    CHECK_EQ(stats_of(pool).graph_count, T);
    for (k = 0; k < LAUNCHES; k++)
        for (i = 0; i < T; i++)
            if (c[i].graph) CHECK_OK(cpool_graph_launch(c[i].graph, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&counter), T * LAUNCHES);
    for (i = 0; i < T; i++) {
        CHECK_EQ(cpool_graph_replays(c[i].graph), LAUNCHES);
        cpool_graph_release(c[i].graph);
    }
    CHECK(wait_graph_count(pool, 0, WAIT_TIMEOUT_MS));
    st = stats_of(pool);
    CHECK_EQ(st.alloc_count, T * 11);
    CHECK_EQ(st.free_count, T * 11);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_STATS_SANE(st);
    CHECK_EQ(aload(&obj.drops), 0);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

/* ---- a GLOBAL capture on one thread, pool work on another --------------------- */

typedef struct other_thread_work {
    cpool_device *dev;
    cpool_stream *t; /* made and destroyed outside the capture */
    int *capture_started;
    int *work_done;
} other_thread_work;

/* Grows, frees, trims, clears and releases pools while another thread
 * captures in GLOBAL mode: the library's internal device work must not break
 * that capture. */
static void *pool_work_worker(void *arg) {
    other_thread_work *w = (other_thread_work *)arg;
    static drop_log log;
    static tracked obj;
    cpool_stream *t = w->t;
    cpool_pool *q = NULL;
    void *p = NULL;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    wait_for_int(w->capture_started, 1, WAIT_TIMEOUT_MS);
    if (CHECK_OK(cpool_pool_create(w->dev, NULL, &q))) {
        CHECK_OK(cpool_pool_record(q, &obj, tracked_drop, NULL));
        CHECK_OK(cpool_alloc(q, 32u << 20, t, &p));
        CHECK_OK(cpool_memset_async(t, p, 1, 32u << 20));
        CHECK_OK(cpool_free(q, p, t));
        CHECK_OK(cpool_alloc(q, 1000, t, &p));
        CHECK_OK(cpool_free(q, p, t));
        CHECK_OK(cpool_pool_trim(q));
        cpool_pool_clear_buffers(q);
        CHECK_EQ(aload(&obj.drops), 1);
        cpool_pool_release(q);
    }
    astore(w->work_done, 1);
    return NULL;
}

static void global_capture_survives_pool_work_elsewhere(cpool_device *dev) {
    static int started, done, count;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    cpool_capture_state state;
    pthread_t th;
    other_thread_work w;
    void *p = NULL;
    astore(&started, 0);
    astore(&done, 0);
    astore(&count, 0);
    w.dev = dev;
    w.capture_started = &started;
    w.work_done = &done;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &w.t));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_EQ(pthread_create(&th, NULL, pool_work_worker, &w), 0);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, 4096, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 2, 4096));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    astore(&started, 1);
    CHECK(wait_for_int(&done, 1, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_capture_end(s, &g));
    pthread_join(th, NULL);
    if (g) {
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_EQ(aload(&count), 1);
    }
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(w.t);
    cpool_stream_destroy(s);
}

/* ---- a teardown's wait against captures that begin and end ------------------ */

typedef struct trimmer {
    cpool_pool *pool;
    int *begun, *trimmed, *done, *stop;
} trimmer;

/* Trims whenever a new capture began: the trim waits for the device, so the
 * work enqueued before that capture (its stream still captures, or has just
 * ended the capture) must be finished when it returns. */
static void *trim_worker(void *arg) {
    trimmer *w = (trimmer *)arg;
    int seen = 0;
    while (!aload(w->stop)) {
        int begun = aload(w->begun);
        if (begun == seen) {
            sched_yield();
            continue;
        }
        CHECK_OK(cpool_pool_trim(w->pool));
        CHECK(aload(w->done) >= begun);
        astore(w->trimmed, begun);
        seen = begun;
    }
    return NULL;
}

/* Every other capture stays open until a trim on another thread has waited
 * during it; the rest end at once, racing the trim. */
static void quiesce_waits_for_work_before_captures_that_end(cpool_device *dev) {
    enum { CAPTURES = 50 };
    static int begun, trimmed, done, stop, captured_runs;
    static sleep_set tasks[CAPTURES + 1]; /* each says how far the stream got */
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *other = NULL;
    pthread_t th;
    trimmer w;
    int k;
    astore(&begun, 0);
    astore(&trimmed, 0);
    astore(&done, 0);
    astore(&stop, 0);
    astore(&captured_runs, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    w = (trimmer){other, &begun, &trimmed, &done, &stop};
    CHECK_EQ(pthread_create(&th, NULL, trim_worker, &w), 0);
    for (k = 1; k <= CAPTURES; k++) {
        cpool_graph *g = NULL;
        tasks[k] = (sleep_set){1, &done, k};
        CHECK_OK(cpool_launch_host(s, cb_sleep_set, &tasks[k]));
        if (!CHECK_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_THREAD_LOCAL))) break;
        astore(&begun, k);
        CHECK_OK(cpool_launch_host(s, cb_inc, &captured_runs));
        if (k % 2) CHECK(wait_for_int(&trimmed, k, WAIT_TIMEOUT_MS));
        CHECK_OK(cpool_capture_end(s, &g));
        cpool_graph_release(g);
    }
    CHECK(wait_for_int(&done, CAPTURES, WAIT_TIMEOUT_MS));
    astore(&stop, 1);
    pthread_join(th, NULL);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&captured_runs), 0); /* no graph was launched */
    CHECK_EQ(stats_of(pool).graph_count, 0);
    cpool_pool_release(other);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

typedef struct trim_arg {
    cpool_pool *pool;
    int *started, *finished;
} trim_arg;

static void *trim_once(void *arg) {
    trim_arg *a = (trim_arg *)arg;
    astore(a->started, 1);
    CHECK_OK(cpool_pool_trim(a->pool));
    astore(a->finished, 1);
    return NULL;
}

/* A capture takes hold of the pool and lets go while a trim waits for the
 * device: the launch of its graph may still run, so that trim keeps the
 * graph memory. The next trim, with no holder in between, gives it back. */
static void trim_keeps_graph_memory_held_during_its_wait(cpool_device *dev) {
    static int blocker_done, started, finished;
    sleep_set blocker = {600, &blocker_done, 1};
    cpool_stream *slow = NULL, *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *tmp = NULL;
    pthread_t th;
    trim_arg a;
    astore(&blocker_done, 0);
    astore(&started, 0);
    astore(&finished, 0);
    REQUIRE_OK(cpool_stream_create(dev, &slow));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_launch_host(slow, cb_sleep_set, &blocker));
    a = (trim_arg){pool, &started, &finished};
    CHECK_EQ(pthread_create(&th, NULL, trim_once, &a), 0);
    CHECK(wait_for_int(&started, 1, WAIT_TIMEOUT_MS));
    sleep_ms(100); /* the trim has looked for holders and waits for `slow` */
    if (CHECK_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_THREAD_LOCAL))) {
        CHECK_OK(cpool_alloc(pool, 1000, s, &tmp));
        CHECK_OK(cpool_memset_async(s, tmp, 1, 1000));
        CHECK_OK(cpool_free(pool, tmp, s));
        CHECK_OK(cpool_capture_end(s, &g));
    }
    CHECK_OK(cpool_graph_launch(g, s));
    cpool_graph_release(g);
    CHECK(!aload(&finished)); /* all of it happened while the trim waited */
    pthread_join(th, NULL);
    CHECK_EQ(aload(&blocker_done), 1);
    CHECK_GT(stats_of(pool).graph_reserved_bytes, 0);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(stats_of(pool).graph_reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_stream_destroy(slow);
}

/* ---- threads that made no CUDA call before ------------------------------------- */

typedef struct fresh_thread {
    cpool_stream *s;
    cpool_pool *pool;
    cpool_graph *main_graph; /* captured on the main thread: one host task */
    cpool_graph *graph;       /* captured on the fresh thread */
} fresh_thread;

/* A launch, then a capture and its end, then a launch of what it made, as a
 * thread's first calls: on CUDA, the first of them finds no context current
 * on the thread. */
static void *fresh_thread_work(void *arg) {
    fresh_thread *f = (fresh_thread *)arg;
    CHECK_OK(cpool_graph_launch(f->main_graph, f->s));
    if (CHECK_OK(cpool_capture_begin(f->s, f->pool, CPOOL_CAPTURE_GLOBAL)))
        CHECK_OK(cpool_capture_end(f->s, &f->graph));
    if (f->graph) CHECK_OK(cpool_graph_launch(f->graph, f->s));
    return NULL;
}

/* A capture and launches from a thread new to the device work, and a launch
 * runs its graph exactly once. */
static void capture_and_launch_on_a_fresh_thread(cpool_device *dev) {
    static int counter;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    fresh_thread f = {NULL, NULL, NULL, NULL};
    pthread_t th;
    astore(&counter, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &counter));
    REQUIRE_OK(cpool_capture_end(s, &f.main_graph));
    f.s = s;
    f.pool = pool;
    CHECK_EQ(pthread_create(&th, NULL, fresh_thread_work, &f), 0);
    pthread_join(th, NULL);
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&counter), 1);
    CHECK_EQ(cpool_graph_replays(f.main_graph), 1);
    CHECK(f.graph != NULL);
    if (f.graph) CHECK_EQ(cpool_graph_replays(f.graph), 1);
    CHECK_EQ(stats_of(pool).graph_count, f.graph ? 2 : 1);
    cpool_graph_release(f.graph);
    cpool_graph_release(f.main_graph);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* ---- reference races --------------------------------------------------------------- */

typedef struct refs_arg {
    cpool_pool *pool;
    cpool_graph *graph;
    int release_at_end; /* release one reference owned by this thread at the end */
} refs_arg;

static void *refs_worker(void *arg) {
    refs_arg *a = (refs_arg *)arg;
    int i;
    for (i = 0; i < 2000; i++) {
        cpool_pool *p = cpool_pool_retain(a->pool);
        cpool_graph *g = a->graph ? cpool_graph_retain(a->graph) : NULL;
        if (i % 3 == 0) CHECK_OK(cpool_pool_record(p, NULL, NULL, NULL));
        cpool_graph_release(g);
        cpool_pool_release(p);
    }
    if (a->release_at_end) {
        cpool_graph_release(a->graph);
        cpool_pool_release(a->pool);
    }
    return NULL;
}

/* Retains and releases race each other, then the threads drop the last
 * references at once: exactly one teardown, every drop exactly once. */
static void retain_release_races(cpool_device *dev) {
    static drop_log log;
    static tracked obj[3];
    static int count;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    pthread_t th[T];
    refs_arg a[T];
    int i;
    drop_log_init(&log);
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < 3; i++) {
        tracked_init(&obj[i], &log, i, NULL);
        CHECK_OK(cpool_pool_record(pool, &obj[i], tracked_drop, NULL));
    }
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    /* One pool and one graph reference per thread; the caller's go now. */
    for (i = 0; i < T; i++) {
        a[i].pool = cpool_pool_retain(pool);
        a[i].graph = cpool_graph_retain(g);
        a[i].release_at_end = 1;
    }
    cpool_pool_release(pool);
    cpool_graph_release(g);
    for (i = 0; i < T; i++) CHECK_EQ(pthread_create(&th[i], NULL, refs_worker, &a[i]), 0);
    for (i = 0; i < T; i++) pthread_join(th[i], NULL);
    CHECK(wait_for_int(&log.count, 3, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&log.count), 3);
    for (i = 0; i < 3; i++) {
        CHECK_EQ(log.order[i], i);
        CHECK_EQ(aload(&obj[i].drops), 1);
    }
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(aload(&count), 1);
    cpool_stream_destroy(s);
}

/* Clear and record race: every object recorded is dropped exactly once. */
typedef struct clear_arg {
    cpool_pool *pool;
    drop_log *log;
    tracked *objs;
    int n;
    int base;
} clear_arg;

static void *record_worker(void *arg) {
    clear_arg *c = (clear_arg *)arg;
    int i;
    for (i = 0; i < c->n; i++) {
        tracked_init(&c->objs[i], c->log, c->base + i, NULL);
        CHECK_OK(cpool_pool_record(c->pool, &c->objs[i], tracked_drop, NULL));
        if (i % 50 == 49) cpool_pool_clear_buffers(c->pool);
    }
    return NULL;
}

static void record_and_clear_race(cpool_device *dev) {
    enum { PER = 400 };
    static drop_log log;
    static tracked objs[T][PER];
    cpool_pool *pool = NULL;
    pthread_t th[T];
    clear_arg c[T];
    int i, j;
    drop_log_init(&log);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    for (i = 0; i < T; i++) {
        c[i].pool = pool;
        c[i].log = &log;
        c[i].objs = objs[i];
        c[i].n = PER;
        c[i].base = i * PER;
        CHECK_EQ(pthread_create(&th[i], NULL, record_worker, &c[i]), 0);
    }
    for (i = 0; i < T; i++) pthread_join(th[i], NULL);
    cpool_pool_release(pool);
    CHECK_EQ(aload(&log.count), T * PER);
    for (i = 0; i < T; i++)
        for (j = 0; j < PER; j++) CHECK_EQ(aload(&objs[i][j].drops), 1);
}

/* A clear on another thread racing a capture that records an object and
 * ends: the clear either comes first (the object, recorded after it,
 * stays) or the graph is stale. A launch that returns OK after the object
 * was dropped would run on it. */
typedef struct clear_loop {
    cpool_pool *pool;
    atomic_int stop;
} clear_loop;

static void *clear_until_stopped(void *arg) {
    clear_loop *c = (clear_loop *)arg;
    while (!atomic_load(&c->stop)) cpool_pool_clear_buffers(c->pool);
    return NULL;
}

static void mark_dropped(void *flag) { atomic_store((atomic_int *)flag, 1); }

static void clear_racing_a_capture(cpool_device *dev) {
    enum { ROUNDS = 10000 };
    static atomic_int dropped[ROUNDS];
    static clear_loop c;
    cpool_stream *s = NULL;
    pthread_t th;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &c.pool));
    atomic_store(&c.stop, 0);
    REQUIRE(pthread_create(&th, NULL, clear_until_stopped, &c) == 0);
    int ran_on_dropped = 0;
    for (int i = 0; i < ROUNDS && !ran_on_dropped; i++) {
        cpool_graph *g = NULL;
        atomic_store(&dropped[i], 0);
        if (!CHECK_OK(cpool_capture_begin(s, c.pool, CPOOL_CAPTURE_GLOBAL))) break;
        CHECK_OK(cpool_pool_record(c.pool, &dropped[i], mark_dropped, NULL));
        if (!CHECK_OK(cpool_capture_end(s, &g))) break;
        while (!atomic_load(&dropped[i])) sched_yield(); /* the next clear drops it */
        cpool_status st = cpool_graph_launch(g, s);
        if (st == CPOOL_OK) ran_on_dropped = i + 1;
        CHECK(st == CPOOL_OK || st == CPOOL_ERR_STALE_GRAPH);
        CHECK_OK(cpool_stream_synchronize(s));
        cpool_graph_release(g);
    }
    CHECK_EQ(ran_on_dropped, 0);
    atomic_store(&c.stop, 1);
    pthread_join(th, NULL);
    cpool_pool_release(c.pool);
    cpool_stream_destroy(s);
}

/* ---- refusals name their cause ---------------------------------------- */

typedef struct flipper {
    cpool_pool *pool;
    atomic_int stop;
    int rounds;
    cpool_status unexpected; /* a suspend's status other than the refusal */
} flipper;

static void *flip_seal(void *arg) {
    flipper *f = arg;
    while (!atomic_load(&f->stop)) {
        cpool_pool_seal(f->pool);
        cpool_pool_unseal(f->pool);
        f->rounds++;
    }
    return NULL;
}

/* A pool sealed and unsealed by one thread while another allocates from it
 * refuses with CPOOL_ERR_SEALED or serves; it was never suspended, so it
 * never says so. */
static void seal_races_never_say_suspended(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    flipper f = {fx.pool, 0, 0, CPOOL_OK};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, flip_seal, &f) == 0);
    int served = 0, sealed = 0, other = 0;
    for (int i = 0; i < 20000; i++) {
        void *p = NULL;
        cpool_status st = cpool_alloc(fx.pool, 256 + (size_t)(i % 7) * 4096, fx.s, &p);
        if (st == CPOOL_OK) {
            served++;
            CHECK_OK(cpool_free(fx.pool, p, fx.s));
        } else if (st == CPOOL_ERR_SEALED) {
            sealed++;
        } else {
            if (!other) CHECK_STATUS(st, CPOOL_ERR_SEALED);
            other++;
        }
    }
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(other, 0);
    cpool_pool_unseal(fx.pool);
    printf("  %d served, %d sealed, %d flips\n", served, sealed, f.rounds);
}

static void *suspend_in_a_loop(void *arg) {
    flipper *f = arg;
    while (!atomic_load(&f->stop)) {
        cpool_status st = cpool_pool_suspend(f->pool, CPOOL_SUSPEND_KEEP_CONTENTS);
        if (st != CPOOL_ERR_INVALID_ARGUMENT && f->unexpected == CPOOL_OK) f->unexpected = st ? st : CPOOL_ERR_BACKEND;
        f->rounds++;
    }
    return NULL;
}

/* A suspend refused because a capture uses the pool changes nothing: the
 * capture's allocations and frees meanwhile all succeed, and so does its
 * end. */
static void refused_suspends_leave_a_capture_be(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    REQUIRE_OK(cpool_capture_begin(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL));
    flipper f = {fx.pool, 0, 0, CPOOL_OK};
    pthread_t th;
    if (pthread_create(&th, NULL, suspend_in_a_loop, &f) != 0) {
        cpool_graph *g = NULL;
        CHECK_OK(cpool_capture_end(fx.s, &g));
        cpool_graph_release(g);
        REQUIRE(0);
    }
    int failed = 0;
    for (int i = 0; i < 6000; i++) {
        void *p = NULL;
        cpool_status st = cpool_alloc(fx.pool, 512 + (size_t)(i % 5) * 8192, fx.s, &p);
        if (st != CPOOL_OK) {
            if (!failed) CHECK_OK(st);
            failed++;
            continue;
        }
        CHECK_OK(cpool_free(fx.pool, p, fx.s));
    }
    atomic_store(&f.stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(failed, 0);
    CHECK_EQ(f.unexpected, CPOOL_OK);
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture_end(fx.s, &g));
    if (g) CHECK_OK(cpool_graph_launch(g, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_graph_release(g);
    CHECK(!cpool_pool_is_suspended(fx.pool));
    printf("  %d suspends refused meanwhile\n", f.rounds);
}

static const check_case cases[] = {
    CHECK_CASE(shared_pool_alloc_free_record),
    CHECK_CASE(stats_consistent_under_contention),
    CHECK_CASE(concurrent_captures_on_one_pool),
    CHECK_CASE(global_capture_survives_pool_work_elsewhere),
    CHECK_CASE(quiesce_waits_for_work_before_captures_that_end),
    CHECK_CASE(trim_keeps_graph_memory_held_during_its_wait),
    CHECK_CASE(capture_and_launch_on_a_fresh_thread),
    CHECK_CASE(retain_release_races),
    CHECK_CASE(record_and_clear_race),
    CHECK_CASE(clear_racing_a_capture),
    CHECK_CASE(seal_races_never_say_suspended),
    CHECK_CASE(refused_suspends_leave_a_capture_be),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
