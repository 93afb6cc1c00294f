/* Safety promises of the second wave (capturepool.h and docs/GUIDE.md):
 * 1. a stream being destroyed still counts: a last release, a trim and a clear
 *    wait for its pending work; its freed block goes to no other stream early;
 * 2. a free under capture keeps the block's stream order for later captures;
 * 3. under capture, a bounded pool gives idle cached segments back first;
 * 4. drops may call the library on their own pool: no deadlock, each once, in order;
 * 5. dead handles are refused (CPOOL_ERR_INVALID_ARGUMENT and a reason), also
 *    after a new handle was made; waits from a stream callback on its own stream
 *    are refused at once; CPOOL_BACKEND is checked, a good AUTO open leaves
 *    cpool_last_error() alone;
 * 6. a graph released inside a callback is torn down later, completely.
 *
 * Calls that may hang on a broken library run on a helper thread with a
 * deadline (job_* below). A hang leaves library threads stuck that every later
 * case (and the runner's cpool_wait_deferred) would wait on, so it fails the
 * case and ends the binary with status 1. Run one case with its name as argument. */
#include "check.h" /* first: it sets _POSIX_C_SOURCE */
#include "helpers.h"

#include <unistd.h> /* _exit */

#define MiB ((size_t)1 << 20)
enum { SLOW_MS = 200, SETTLE_MS = 50 };

/* ---- bounded calls --------------------------------------------------------------- */

/* Reports a hang and ends the binary: the stuck library would hang the rest. */
static void stuck_(const char *what, const char *file, int line) {
    check_report_(file, line, "%s did not return within %u ms: a hang", what, WAIT_TIMEOUT_MS);
    printf("FAIL [%s] %s: hung; the binary stops here (later cases would wait on the stuck library)\n",
           check_backend_name_, check_case_name_);
    fflush(stdout);
    _exit(1);
}
#define STUCK(what) stuck_((what), __FILE__, __LINE__)

typedef enum { JOB_RELEASE, JOB_CLEAR, JOB_TRIM, JOB_SYNC, JOB_WAIT_DEFERRED, JOB_DESTROY_STREAM } job_kind;
static const char *const job_names[] = {"cpool_pool_release", "cpool_pool_clear_buffers", "cpool_pool_trim",
                                        "cpool_stream_synchronize", "cpool_wait_deferred", "cpool_stream_destroy"};

typedef struct job {
    job_kind kind;
    cpool_pool *pool;
    cpool_stream *s;
    cpool_status st;
    int done;
    pthread_t th;
} job;

static void *job_main(void *arg) {
    job *j = (job *)arg;
    switch (j->kind) {
    case JOB_RELEASE: cpool_pool_release(j->pool); break;
    case JOB_CLEAR: cpool_pool_clear_buffers(j->pool); break;
    case JOB_TRIM: j->st = cpool_pool_trim(j->pool); break;
    case JOB_SYNC: j->st = cpool_stream_synchronize(j->s); break;
    case JOB_WAIT_DEFERRED: cpool_wait_deferred(); break;
    case JOB_DESTROY_STREAM: cpool_stream_destroy(j->s); break;
    }
    astore(&j->done, 1);
    return NULL;
}

static void job_start(job *j, job_kind kind, cpool_pool *pool, cpool_stream *s) {
    j->kind = kind;
    j->pool = pool;
    j->s = s;
    j->st = CPOOL_OK;
    astore(&j->done, 0);
    if (pthread_create(&j->th, NULL, job_main, j) != 0) stuck_("pthread_create", __FILE__, __LINE__);
}

/* Waits for the job with a deadline; a hang ends the binary (the job, on the
 * stack, is then never looked at again). */
static cpool_status job_finish_(job *j, const char *file, int line) {
    if (!wait_for_int(&j->done, 1, WAIT_TIMEOUT_MS)) stuck_(job_names[j->kind], file, line);
    pthread_join(j->th, NULL);
    return j->st;
}
#define JOB_FINISH(j) job_finish_((j), __FILE__, __LINE__)

static cpool_status run_bounded_(job_kind kind, cpool_pool *pool, cpool_stream *s, const char *file, int line) {
    job j;
    job_start(&j, kind, pool, s);
    return job_finish_(&j, file, line);
}
#define RUN_BOUNDED(kind, pool, s) run_bounded_((kind), (pool), (s), __FILE__, __LINE__)

/* ---- last-error helpers ---------------------------------------------------------- */

/* Provokes a known failure and copies its text, so that a later check can
 * tell whether a call left a reason of its own. */
static void prime_last_error(char *buf, size_t n) {
    cpool_pool *none = NULL;
    (void)cpool_pool_create(NULL, NULL, &none);
    snprintf(buf, n, "%s", cpool_last_error());
}

static void check_new_reason_(const char *before, const char *what, const char *file, int line) {
    const char *now = cpool_last_error();
    if (!now || !*now || strcmp(now, before) == 0)
        check_report_(file, line, "%s left no reason in cpool_last_error() (it still reads \"%s\")", what,
                      now ? now : "(NULL)");
}
#define CHECK_NEW_REASON(before, what) check_new_reason_((before), (what), __FILE__, __LINE__)

/* ---- callbacks ------------------------------------------------------------------ */

/* Releases a pool or a graph reference from inside stream work. */
static void cb_release(void *arg) {
    release_in_callback *r = (release_in_callback *)arg;
    r->thread = pthread_self();
    cpool_graph_release(r->graph);
    cpool_pool_release(r->pool);
    astore(&r->done, 1);
}

static cpool_status body_nop(cpool_stream *s, void *ctx) {
    (void)s;
    (void)ctx;
    return CPOOL_OK;
}

/* ==== 1. a stream being destroyed still has work ============================= */

/* S's slow work: a nap, then a write into a block, then a flag. While
 * cpool_stream_destroy(S) waits for it on a thread, another operation runs. */
typedef enum { VIA_RELEASE, VIA_TRIM, VIA_CLEAR, VIA_ALLOC } destroy_race;

static void destroying_stream_case(cpool_device *dev, destroy_race kind) {
    /* 12 MiB: a segment of its own that the block fills, so that a request
     * of the same size elsewhere can only get this block or a new segment. */
    const size_t n = 12 * MiB;
    static int napped, done;
    static sleep_set nap;
    static drop_log log;
    static tracked obj;
    cpool_stream *s = NULL, *u = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL, *q = NULL;
    job destroy;
    astore(&napped, 0);
    astore(&done, 0);
    nap = (sleep_set){SLOW_MS, &napped, 1};
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, &done);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &u));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, n, s, &p));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &nap));
    CHECK_OK(cpool_memset_async(s, p, 0x5a, n));
    CHECK_OK(cpool_launch_host(s, cb_inc, &done));
    if (kind == VIA_TRIM || kind == VIA_ALLOC) CHECK_OK(cpool_free(pool, p, s));

    job_start(&destroy, JOB_DESTROY_STREAM, NULL, s);
    sleep_ms(SETTLE_MS); /* the destroy now waits for S's work */
    switch (kind) {
    case VIA_RELEASE: /* the last reference: waits for S, then drops and frees */
        RUN_BOUNDED(JOB_RELEASE, pool, NULL);
        pool = NULL;
        CHECK_EQ(aload(&obj.drops), 1);
        CHECK_EQ(obj.watch_at_drop, 1); /* 0: dropped while S's work still ran */
        break;
    case VIA_CLEAR:
        RUN_BOUNDED(JOB_CLEAR, pool, NULL);
        CHECK_EQ(aload(&obj.drops), 1);
        CHECK_EQ(obj.watch_at_drop, 1);
        break;
    case VIA_TRIM:
        CHECK_OK(RUN_BOUNDED(JOB_TRIM, pool, NULL));
        if (!aload(&done)) check_report_(__FILE__, __LINE__, "cpool_pool_trim returned before S's work finished");
        break;
    case VIA_ALLOC: {
        int done_at_alloc;
        CHECK_OK(cpool_alloc(pool, n, u, &q));
        done_at_alloc = aload(&done);
        if (q == p && !done_at_alloc)
            check_report_(__FILE__, __LINE__, "U was handed %p, freed on S, while S's work on it still ran", q);
        break;
    }
    }
    JOB_FINISH(&destroy);
    CHECK_EQ(aload(&done), 1); /* the destroy waited for its stream's work */
    if (q) CHECK_OK(cpool_free(pool, q, u));
    cpool_pool_release(pool);
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(u);
}

static void destroying_stream_vs_last_release(cpool_device *dev) { destroying_stream_case(dev, VIA_RELEASE); }
static void destroying_stream_vs_trim(cpool_device *dev) { destroying_stream_case(dev, VIA_TRIM); }
static void destroying_stream_vs_clear(cpool_device *dev) { destroying_stream_case(dev, VIA_CLEAR); }
static void destroying_stream_vs_alloc_elsewhere(cpool_device *dev) { destroying_stream_case(dev, VIA_ALLOC); }

/* ==== 2. a free under capture keeps the block's stream order =================== */

/* s: write 0xa5 into p, [started], nap, copy p out to `seen`, [done]. Then a
 * capture on s frees p; a capture on u allocates the same size and fills it
 * with 0x3c, and its graph is launched while s naps. */
static void free_under_capture_keeps_stream_order(cpool_device *dev) {
    enum { N = 64 << 10 };
    static unsigned char seen[N];
    static int started, napped, done;
    static sleep_set nap;
    cpool_stream *s = NULL, *u = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    void *p = NULL, *q = NULL;
    int done_at_alloc = -1;
    size_t i;
    astore(&started, 0);
    astore(&napped, 0);
    astore(&done, 0);
    nap = (sleep_set){SLOW_MS, &napped, 1};
    memset(seen, 0, sizeof seen);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_stream_create(dev, &u));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, N, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 0xa5, N));
    CHECK_OK(cpool_launch_host(s, cb_inc, &started));
    CHECK_OK(cpool_launch_host(s, cb_sleep_set, &nap));
    CHECK_OK(cpool_memcpy_async(s, seen, p, N));
    CHECK_OK(cpool_launch_host(s, cb_inc, &done));

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_free(pool, p, s));
    REQUIRE_OK(cpool_capture_end(s, &g1));

    REQUIRE_OK(cpool_capture_begin(u, pool, CPOOL_CAPTURE_GLOBAL));
    if (CHECK_OK(cpool_alloc(pool, N, u, &q))) {
        done_at_alloc = aload(&done);
        CHECK_OK(cpool_memset_async(u, q, 0x3c, N));
        CHECK_OK(cpool_free(pool, q, u));
    }
    REQUIRE_OK(cpool_capture_end(u, &g2));
    if (q == p && !done_at_alloc)
        check_report_(__FILE__, __LINE__, "the capture on u got %p while s's earlier work on it still ran", q);

    CHECK(wait_for_int(&started, 1, WAIT_TIMEOUT_MS)); /* s wrote 0xa5 and naps */
    CHECK_OK(cpool_graph_launch(g2, u));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, u));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&done), 1);
    for (i = 0; i < N; i++)
        if (seen[i] != 0xa5) {
            check_report_(__FILE__, __LINE__, "s read byte %zu of its block as 0x%02x, not 0xa5: the graph on u wrote it",
                          i, seen[i]);
            break;
        }
    cpool_graph_release(g1);
    cpool_graph_release(g2);
    cpool_pool_release(pool);
    cpool_stream_destroy(u);
    cpool_stream_destroy(s);
}

/* ==== 3. give-back under capture ============================================= */

static void capture_gives_idle_segment_back_at_bound(cpool_device *dev) {
    cpool_pool_options o;
    cpool_pool_stats st;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *p = NULL, *big = NULL;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.max_reserved_bytes = 4 * MiB;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, &o, &pool));
    /* A small block eagerly: a 2 MiB segment, idle and cached once freed. */
    REQUIRE_OK(cpool_alloc(pool, 1000, s, &p));
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_EQ(stats_of(pool).reserved_bytes, 2 * MiB);

    /* 3 MiB under capture needs a 4 MiB segment: only if the idle 2 MiB one
     * goes back first. */
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    if (CHECK_OK(cpool_alloc(pool, 3 * MiB, s, &big))) {
        CHECK_OK(cpool_memset_async(s, big, 0x11, 3 * MiB));
        CHECK_OK(cpool_free(pool, big, s));
    }
    CHECK_LE(stats_of(pool).reserved_bytes, 4 * MiB);
    CHECK_OK(cpool_capture_end(s, &g));
    if (g) {
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    }
    st = stats_of(pool);
    CHECK_LE(st.reserved_bytes, 4 * MiB);
    CHECK_STATS_SANE(st);
    cpool_graph_release(g);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* ==== 4. drops that call the library ========================================== */

typedef enum { DROP_CLEARS, DROP_RELEASES, DROP_WAITS } drop_action;

/* A recorded object whose drop counts itself, then calls the library. */
typedef struct lib_drop {
    tracked t;
    drop_action action;
    cpool_pool *pool; /* the pool it clears or releases */
    tracked *late;    /* DROP_RELEASES: recorded into `pool` before the release (may be NULL) */
} lib_drop;

static void lib_drop_fn(void *object) {
    lib_drop *d = (lib_drop *)object;
    tracked_drop(&d->t); /* first: what its call drops comes after it in the log */
    switch (d->action) {
    case DROP_CLEARS: cpool_pool_clear_buffers(d->pool); break;
    case DROP_RELEASES:
        if (d->late) CHECK_OK(cpool_pool_record(d->pool, d->late, tracked_drop, NULL));
        cpool_pool_release(d->pool);
        break;
    case DROP_WAITS: cpool_wait_deferred(); break;
    }
}

/* Records t0 (id 0), d (id 1), t2 (id 2) into pool. */
static void record_three(cpool_pool *pool, drop_log *log, tracked *t0, lib_drop *d, tracked *t2, drop_action action,
                         cpool_pool *target) {
    drop_log_init(log);
    memset(d, 0, sizeof *d);
    tracked_init(t0, log, 0, NULL);
    tracked_init(&d->t, log, 1, NULL);
    tracked_init(t2, log, 2, NULL);
    d->action = action;
    d->pool = target;
    CHECK_OK(cpool_pool_record(pool, t0, tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(pool, d, lib_drop_fn, NULL));
    CHECK_OK(cpool_pool_record(pool, t2, tracked_drop, NULL));
}

/* Exactly `n` drops, in id order, each object once. */
static void check_drops_in_order(drop_log *log, tracked *const *objs, int n) {
    int i, count = aload(&log->count);
    CHECK_EQ(count, n);
    for (i = 0; i < n && i < count; i++) CHECK_EQ(log->order[i], i);
    for (i = 0; i < n; i++) CHECK_EQ(aload(&objs[i]->drops), 1);
}

static void drop_clears_own_pool_during_clear(cpool_device *dev) {
    static drop_log log;
    static tracked t0, t2;
    static lib_drop d;
    tracked *const all[] = {&t0, &d.t, &t2};
    cpool_pool *pool = NULL;
    size_t idx = 99;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    record_three(pool, &log, &t0, &d, &t2, DROP_CLEARS, pool);
    RUN_BOUNDED(JOB_CLEAR, pool, NULL);
    check_drops_in_order(&log, all, 3);
    CHECK_EQ(cpool_pool_buffer_count(pool), 0);
    CHECK_OK(cpool_pool_record(pool, NULL, NULL, &idx)); /* the pool is usable */
    CHECK_EQ(idx, 0);
    RUN_BOUNDED(JOB_RELEASE, pool, NULL);
    check_drops_in_order(&log, all, 3);
}

static void drop_clears_own_pool_during_last_release(cpool_device *dev) {
    static drop_log log;
    static tracked t0, t2;
    static lib_drop d;
    tracked *const all[] = {&t0, &d.t, &t2};
    cpool_pool *pool = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    record_three(pool, &log, &t0, &d, &t2, DROP_CLEARS, pool);
    RUN_BOUNDED(JOB_RELEASE, pool, NULL);
    RUN_BOUNDED(JOB_WAIT_DEFERRED, NULL, NULL);
    check_drops_in_order(&log, all, 3);
}

/* The last pool reference goes inside a callback: the teardown runs on the
 * library's thread, where a drop calls cpool_wait_deferred(). */
static void drop_waits_deferred_on_library_thread(cpool_device *dev) {
    static drop_log log;
    static tracked t0, t2;
    static lib_drop d;
    static release_in_callback r;
    tracked *const all[] = {&t0, &d.t, &t2};
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    memset(&r, 0, sizeof r);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    record_three(pool, &log, &t0, &d, &t2, DROP_WAITS, NULL);
    r.pool = pool;
    CHECK_OK(cpool_launch_host(s, cb_release, &r));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&r.done), 1);
    RUN_BOUNDED(JOB_WAIT_DEFERRED, NULL, NULL);
    check_drops_in_order(&log, all, 3);
    if (aload(&t0.drops)) CHECK(!pthread_equal(t0.drop_thread, r.thread));
    cpool_stream_destroy(s);
}

/* A drop releases a reference to its own pool while a clear runs: first an
 * extra one the test took, then the last one, through which the clear was
 * called (the drop records one more object first: the teardown drops it). */
static void drop_releases_own_pool_during_clear(cpool_device *dev) {
    static drop_log log;
    static tracked t0, t2, t3;
    static lib_drop d;
    tracked *const all[] = {&t0, &d.t, &t2, &t3};
    cpool_pool *pool = NULL, *extra;

    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    extra = cpool_pool_retain(pool);
    record_three(pool, &log, &t0, &d, &t2, DROP_RELEASES, extra);
    RUN_BOUNDED(JOB_CLEAR, pool, NULL);
    check_drops_in_order(&log, all, 3);
    tracked_init(&t3, &log, 3, NULL); /* the pool lives on: one reference left */
    CHECK_OK(cpool_pool_record(pool, &t3, tracked_drop, NULL));
    CHECK_EQ(aload(&t3.drops), 0);
    RUN_BOUNDED(JOB_RELEASE, pool, NULL);
    check_drops_in_order(&log, all, 4);

    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    record_three(pool, &log, &t0, &d, &t2, DROP_RELEASES, pool);
    tracked_init(&t3, &log, 3, NULL);
    d.late = &t3;
    RUN_BOUNDED(JOB_CLEAR, pool, NULL); /* the drop lets the last reference go */
    RUN_BOUNDED(JOB_WAIT_DEFERRED, NULL, NULL);
    check_drops_in_order(&log, all, 4);
}

/* ==== 5a. dead handles ======================================================= */

/* Every call with a status refuses the released pool `a`; void calls leave a reason. */
static void check_dead_pool_calls(cpool_pool *a, cpool_stream *s, tracked *spare) {
    char before[512];
    void *sentinel = &before, *p = sentinel;
    size_t idx = 77;
    cpool_pool_stats st;
    cpool_capture_state state = CPOOL_CAPTURE_ACTIVE;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    CHECK_STATUS(cpool_alloc(a, 256, s, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(p == sentinel);
    CHECK_STATUS(cpool_free(a, sentinel, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_record(a, spare, tracked_drop, &idx), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(idx, 77);
    CHECK_STATUS(cpool_pool_get_stats(a, &st), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_pool_trim(a), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_begin(s, a, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
    prime_last_error(before, sizeof before);
    cpool_pool_seal(a);
    CHECK_NEW_REASON(before, "cpool_pool_seal on a released pool");
    prime_last_error(before, sizeof before);
    cpool_pool_clear_buffers(a);
    CHECK_NEW_REASON(before, "cpool_pool_clear_buffers on a released pool");
}

static void dead_pool_handle(cpool_device *dev) {
    static drop_log log;
    static tracked obj_a, obj_b, spare;
    char before[512];
    cpool_stream *s = NULL;
    cpool_pool *a = NULL, *b = NULL;
    void *p = NULL;
    drop_log_init(&log);
    tracked_init(&obj_a, &log, 0, NULL);
    tracked_init(&obj_b, &log, 1, NULL);
    tracked_init(&spare, &log, 2, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &a));
    CHECK_OK(cpool_pool_record(a, &obj_a, tracked_drop, NULL));
    REQUIRE_OK(cpool_alloc(a, 4096, s, &p));
    CHECK_OK(cpool_free(a, p, s));
    cpool_pool_release(a);
    CHECK_EQ(aload(&obj_a.drops), 1);

    prime_last_error(before, sizeof before);
    cpool_pool_release(a); /* a second release */
    CHECK_NEW_REASON(before, "a second cpool_pool_release");
    CHECK_EQ(aload(&obj_a.drops), 1);
    check_dead_pool_calls(a, s, &spare);

    /* A new pool, maybe in a's memory: a stays dead, b works. */
    REQUIRE_OK(cpool_pool_create(dev, NULL, &b));
    CHECK(b != a);
    CHECK_OK(cpool_pool_record(b, &obj_b, tracked_drop, NULL));
    check_dead_pool_calls(a, s, &spare);
    cpool_pool_release(a);
    CHECK_EQ(aload(&obj_b.drops), 0);
    if (CHECK_OK(cpool_alloc(b, 4096, s, &p))) {
        CHECK_OK(cpool_memset_async(s, p, 0x42, 4096));
        CHECK_BYTES(s, p, 4096, 0x42);
        CHECK_OK(cpool_free(b, p, s));
    }
    CHECK_EQ(stats_of(b).alloc_count, 1);
    cpool_pool_release(b);
    CHECK_EQ(aload(&obj_b.drops), 1);
    CHECK_EQ(aload(&obj_a.drops), 1);
    CHECK_EQ(aload(&spare.drops), 0);
    cpool_stream_destroy(s);
}

/* The user's second release while a graph holds the pool must not take the
 * graph's reference. */
static void dead_pool_release_while_graph_holds_it(cpool_device *dev) {
    static drop_log log;
    static tracked obj;
    static int count;
    char before[512];
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool); /* the user's only reference: the graph holds the pool */
    prime_last_error(before, sizeof before);
    cpool_pool_release(pool); /* one too many */
    CHECK_NEW_REASON(before, "a second cpool_pool_release while a graph holds the pool");
    CHECK_EQ(aload(&obj.drops), 0);
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&count), 1);
    CHECK_EQ(stats_of(cpool_graph_pool(g)).graph_count, 1);
    cpool_graph_release(g);
    CHECK(wait_for_int(&obj.drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&obj.drops), 1);
    cpool_stream_destroy(s);
}

static void check_dead_graph_calls(cpool_graph *g, cpool_stream *s) {
    CHECK_STATUS(cpool_graph_launch(g, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_upload(g, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_update(g, s, body_nop, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_dump_dot(g, "/dev/null"), CPOOL_ERR_INVALID_ARGUMENT);
}

static void dead_graph_handle(cpool_device *dev) {
    static int count;
    char before[512];
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL, *g2 = NULL;
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    cpool_graph_release(g);
    prime_last_error(before, sizeof before);
    cpool_graph_release(g); /* a second release */
    CHECK_NEW_REASON(before, "a second cpool_graph_release");
    check_dead_graph_calls(g, s);
    CHECK_EQ(stats_of(pool).graph_count, 0);

    /* A new graph, maybe in g's memory: g stays dead, g2 works. */
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g2));
    CHECK(g2 != g);
    check_dead_graph_calls(g, s);
    cpool_graph_release(g);
    CHECK_OK(cpool_graph_launch(g2, s));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&count), 2); /* g ran once, g2 once, nothing else */
    CHECK_EQ(cpool_graph_replays(g2), 1);
    CHECK_EQ(stats_of(pool).graph_count, 1);
    cpool_graph_release(g2);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void check_dead_stream_calls(cpool_stream *s, cpool_pool *pool) {
    static unsigned char buf[64];
    static int never;
    void *sentinel = buf, *p = sentinel;
    cpool_capture_state state;
    CHECK_STATUS(cpool_stream_synchronize(s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_launch_host(s, cb_inc, &never), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memset_async(s, buf, 1, sizeof buf), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_memcpy_async(s, buf, buf + 32, 16), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_begin(s, NULL, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_status(s, &state), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_alloc(pool, 64, s, &p), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(p == sentinel);
    CHECK_EQ(aload(&never), 0);
}

static void dead_stream_handle(cpool_device *dev) {
    static int count;
    char before[512];
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    astore(&count, 0);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_stream_create(dev, &s));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    cpool_stream_destroy(s);
    CHECK_EQ(aload(&count), 1);
    prime_last_error(before, sizeof before);
    cpool_stream_destroy(s); /* a second destroy */
    CHECK_NEW_REASON(before, "a second cpool_stream_destroy");
    check_dead_stream_calls(s, pool);

    /* A new stream, maybe in s's memory: s stays dead, t works. */
    REQUIRE_OK(cpool_stream_create(dev, &t));
    CHECK(t != s);
    check_dead_stream_calls(s, pool);
    cpool_stream_destroy(s);
    CHECK_OK(cpool_launch_host(t, cb_inc, &count));
    if (CHECK_OK(cpool_alloc(pool, 4096, t, &p))) {
        CHECK_OK(cpool_memset_async(t, p, 0x24, 4096));
        CHECK_BYTES(t, p, 4096, 0x24);
        CHECK_OK(cpool_free(pool, p, t));
    }
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, t));
    CHECK_EQ(aload(&count), 2);
    CHECK_OK(RUN_BOUNDED(JOB_TRIM, pool, NULL)); /* waits over the device's streams */
    cpool_pool_release(pool);
    cpool_stream_destroy(t);
}

/* The runner's `dev` is closed here, with the case's own reference, and then
 * once more (the dead close). The runner closes it again after the case:
 * another dead close, which must do nothing. */
static void dead_device_handle(cpool_device *dev) {
    char before[512];
    cpool_backend backend = cpool_device_backend(dev);
    cpool_device *mine = NULL, *fresh = NULL;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *p = NULL;
    REQUIRE_OK(cpool_device_open(backend, 0, &mine)); /* the same device, one more reference */
    cpool_device_close(mine);
    cpool_device_close(dev); /* both references gone: the device is closed */
    prime_last_error(before, sizeof before);
    cpool_device_close(dev); /* one close too many */
    CHECK_NEW_REASON(before, "a second cpool_device_close");
    CHECK_STATUS(cpool_stream_create(dev, &s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_STATUS(cpool_pool_create(dev, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(pool == NULL);

    REQUIRE_OK(cpool_device_open(backend, 0, &fresh));
    CHECK(fresh != dev);
    CHECK_STATUS(cpool_stream_create(dev, &s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(s == NULL);
    REQUIRE_OK(cpool_stream_create(fresh, &s));
    REQUIRE_OK(cpool_pool_create(fresh, NULL, &pool));
    if (CHECK_OK(cpool_alloc(pool, 4096, s, &p))) {
        CHECK_OK(cpool_memset_async(s, p, 0x66, 4096));
        CHECK_BYTES(s, p, 4096, 0x66);
        CHECK_OK(cpool_free(pool, p, s));
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    cpool_device_close(fresh);
}

/* A parameter block ends with its pool: its handle is then dead, also once
 * its memory went to a new block. */
static void dead_param_handle(cpool_device *dev) {
    char before[512];
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *other = NULL;
    cpool_param *param = NULL, *fresh = NULL;
    int v = 5;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_param_create(pool, sizeof v, &param));
    CHECK_OK(cpool_param_set(param, &v, sizeof v, s));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool); /* the last reference: the block goes with it */
    prime_last_error(before, sizeof before);
    CHECK_STATUS(cpool_param_set(param, &v, sizeof v, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_NEW_REASON(before, "cpool_param_set of a dead parameter block");
    prime_last_error(before, sizeof before);
    CHECK(cpool_param_device_ptr(param) == NULL);
    CHECK_NEW_REASON(before, "cpool_param_device_ptr of a dead parameter block");

    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    REQUIRE_OK(cpool_param_create(other, sizeof v, &fresh));
    CHECK(fresh != param);
    CHECK_STATUS(cpool_param_set(param, &v, sizeof v, s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_param_set(fresh, &v, sizeof v, s));
    {
        int got = 0;
        CHECK_OK(read_back(s, &got, cpool_param_device_ptr(fresh), sizeof got));
        CHECK_EQ(got, v);
    }
    cpool_pool_release(other);
    cpool_stream_destroy(s);
}

/* ==== 5b. calls from a stream callback that would wait for that stream ==== */

typedef struct in_callback {
    cpool_stream *s;
    cpool_pool *pool;
    int trim; /* else: synchronize s */
    cpool_status st;
    char err[256];
    int done;
} in_callback;

static void cb_wait_on_own_stream(void *arg) {
    in_callback *x = (in_callback *)arg;
    x->st = x->trim ? cpool_pool_trim(x->pool) : cpool_stream_synchronize(x->s);
    snprintf(x->err, sizeof x->err, "%s", cpool_last_error()); /* the callback thread's */
    astore(&x->done, 1);
}

static void check_refused_in_callback(in_callback *x, const char *what) {
    if (!wait_for_int(&x->done, 1, WAIT_TIMEOUT_MS)) STUCK(what);
    CHECK_STATUS(x->st, CPOOL_ERR_INVALID_ARGUMENT);
    if (!x->err[0]) check_report_(__FILE__, __LINE__, "%s: refused without a reason in cpool_last_error()", what);
}

/* Refused from a callback enqueued on s, and from one captured and replayed
 * on s; afterwards s works on, and a trim from an ordinary thread works. */
static void callback_wait_case(cpool_device *dev, int trim) {
    static in_callback x;
    static int count;
    const char *what = trim ? "cpool_pool_trim in a callback" : "cpool_stream_synchronize of its own stream in a callback";
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *p = NULL;
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_alloc(pool, 4096, s, &p)); /* something to trim */
    CHECK_OK(cpool_free(pool, p, s));
    memset(&x, 0, sizeof x);
    x.s = s;
    x.pool = pool;
    x.trim = trim;
    CHECK_OK(cpool_launch_host(s, cb_wait_on_own_stream, &x));
    check_refused_in_callback(&x, what);

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_launch_host(s, cb_wait_on_own_stream, &x));
    REQUIRE_OK(cpool_capture_end(s, &g));
    astore(&x.done, 0);
    x.st = CPOOL_OK;
    x.err[0] = '\0';
    CHECK_OK(cpool_graph_launch(g, s));
    check_refused_in_callback(&x, what);

    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&count), 1);
    cpool_graph_release(g);
    CHECK_OK(RUN_BOUNDED(JOB_TRIM, pool, NULL));
    CHECK_EQ(stats_of(pool).reserved_bytes, 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static void callback_sync_of_own_stream_refused(cpool_device *dev) { callback_wait_case(dev, 0); }
static void callback_trim_refused(cpool_device *dev) { callback_wait_case(dev, 1); }

/* ==== 5c. the environment ==================================================== */

static char *env_save(void) {
    const char *v = getenv("CPOOL_BACKEND");
    return v ? strdup(v) : NULL;
}
static void env_restore(char *saved) {
    if (saved)
        setenv("CPOOL_BACKEND", saved, 1);
    else
        unsetenv("CPOOL_BACKEND");
    free(saved);
}

static void env_unknown_backend_refused(cpool_device *dev) {
    char *saved = env_save();
    cpool_device *d = NULL;
    cpool_status st;
    setenv("CPOOL_BACKEND", "gpu", 1);
    st = cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d);
    CHECK_STATUS(st, CPOOL_ERR_INVALID_ARGUMENT);
    if (!strstr(cpool_last_error(), "gpu"))
        check_report_(__FILE__, __LINE__, "cpool_last_error() does not name the value \"gpu\": \"%s\"",
                      cpool_last_error());
    CHECK(d == NULL);
    if (st == CPOOL_OK) cpool_device_close(d);
    /* An explicit backend is not the variable's business. */
    d = NULL;
    CHECK_OK(cpool_device_open(cpool_device_backend(dev), 0, &d));
    cpool_device_close(d);
    env_restore(saved);
}

/* CPOOL_VIRTUAL_MEMORY is 0 (growable segments off) or 1 (on); a typo
 * such as "banana" is refused by device opens and pool creations, naming
 * the variable and the value, instead of silently meaning "on". */
static void env_virtual_memory_value_refused(cpool_device *dev) {
    const char *v = getenv("CPOOL_VIRTUAL_MEMORY");
    char *saved = v ? strdup(v) : NULL;
    cpool_device *d = (cpool_device *)&d;
    cpool_pool *pool = (cpool_pool *)&pool;
    setenv("CPOOL_VIRTUAL_MEMORY", "banana", 1);
    CHECK_STATUS(cpool_device_open(cpool_device_backend(dev), 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strncmp(cpool_last_error(), "cpool_device_open: ", 19) == 0);
    CHECK(strstr(cpool_last_error(), "CPOOL_VIRTUAL_MEMORY") && strstr(cpool_last_error(), "banana"));
    CHECK(d == (cpool_device *)&d); /* untouched */
    CHECK_STATUS(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(cpool_last_error(), "banana") != NULL);
    CHECK(d == (cpool_device *)&d);
    /* Set after the device was opened: the pool, which reads it, refuses. */
    CHECK_STATUS(cpool_pool_create(dev, NULL, &pool), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strncmp(cpool_last_error(), "cpool_pool_create: ", 19) == 0);
    CHECK(strstr(cpool_last_error(), "CPOOL_VIRTUAL_MEMORY") && strstr(cpool_last_error(), "banana"));
    CHECK(pool == (cpool_pool *)&pool);
    setenv("CPOOL_VIRTUAL_MEMORY", "10", 1); /* not a prefix match */
    CHECK_STATUS(cpool_device_open(cpool_device_backend(dev), 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
    /* 0, 1 and empty (unset) are accepted. */
    static const char *const accepted[] = {"0", "1", ""};
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        setenv("CPOOL_VIRTUAL_MEMORY", accepted[i], 1);
        d = NULL;
        pool = NULL;
        if (CHECK_OK(cpool_device_open(cpool_device_backend(dev), 0, &d))) cpool_device_close(d);
        if (CHECK_OK(cpool_pool_create(dev, NULL, &pool))) {
            CHECK_EQ(cpool_pool_grows_in_place(pool), strcmp(accepted[i], "0") != 0);
            cpool_pool_release(pool);
        }
    }
    if (saved)
        setenv("CPOOL_VIRTUAL_MEMORY", saved, 1);
    else
        unsetenv("CPOOL_VIRTUAL_MEMORY");
    free(saved);
}

static void auto_open_leaves_last_error(cpool_device *dev) {
    char *saved = env_save();
    char before[512];
    cpool_device *d = NULL;
    (void)dev;
    setenv("CPOOL_BACKEND", "host", 1);
    prime_last_error(before, sizeof before);
    if (CHECK_OK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d))) {
        CHECK_STR_EQ(cpool_last_error(), before);
        CHECK_EQ(cpool_device_backend(d), CPOOL_BACKEND_HOST);
        cpool_device_close(d);
    }
    /* Unset: CUDA where it opens, else the host backend; neither is a failure. */
    unsetenv("CPOOL_BACKEND");
    d = NULL;
    prime_last_error(before, sizeof before);
    if (CHECK_OK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d))) {
        CHECK_STR_EQ(cpool_last_error(), before);
        cpool_device_close(d);
    }
    env_restore(saved);
}

/* ==== 6. a graph released inside a callback ================================== */

/* The graph releases its own last reference from a captured callback, in the
 * middle of its replay, and goes on using its pool's memory after that
 * (test_lifetime covers the release from a callback after the launch). */
static void graph_released_in_callback_torn_down_later(cpool_device *dev) {
    enum { N = 4096 };
    static unsigned char out[N];
    static drop_log log;
    static tracked obj[2];
    static release_in_callback r;
    static int count;
    tracked *const all[] = {&obj[0], &obj[1]};
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL, *kept = NULL;
    cpool_graph *g = NULL;
    void *p = NULL, *k = NULL;
    size_t i;
    memset(out, 0, sizeof out);
    drop_log_init(&log);
    tracked_init(&obj[0], &log, 0, NULL);
    tracked_init(&obj[1], &log, 1, NULL);
    memset(&r, 0, sizeof r);
    astore(&count, 0);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &kept)); /* the user keeps this one */
    CHECK_OK(cpool_pool_record(pool, &obj[0], tracked_drop, NULL));
    CHECK_OK(cpool_pool_record(pool, &obj[1], tracked_drop, NULL));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(kept, N, s, &k));
    CHECK_OK(cpool_memset_async(s, k, 0x70, N));
    CHECK_OK(cpool_free(kept, k, s));
    CHECK_OK(cpool_alloc(pool, N, s, &p));
    CHECK_OK(cpool_memset_async(s, p, 0x71, N));
    CHECK_OK(cpool_launch_host(s, cb_release, &r)); /* the graph's last reference, mid-replay */
    CHECK_OK(cpool_memset_async(s, p, 0x72, N));
    CHECK_OK(cpool_memcpy_async(s, out, p, N));
    CHECK_OK(cpool_free(pool, p, s));
    CHECK_OK(cpool_launch_host(s, cb_inc, &count));
    REQUIRE_OK(cpool_capture_end(s, &g));
    cpool_pool_release(pool); /* the graph holds the last reference */
    CHECK_EQ(stats_of(kept).graph_count, 1);

    r.graph = g;
    CHECK_OK(cpool_graph_launch(g, s));
    CHECK_OK(RUN_BOUNDED(JOB_SYNC, NULL, s));
    CHECK_EQ(aload(&r.done), 1);
    CHECK_EQ(aload(&count), 1); /* the replay ran to its end */
    for (i = 0; i < N; i++)
        if (out[i] != 0x72) {
            check_report_(__FILE__, __LINE__, "byte %zu written after the release reads 0x%02x, not 0x72", i, out[i]);
            break;
        }
    RUN_BOUNDED(JOB_WAIT_DEFERRED, NULL, NULL);
    /* The whole teardown happened, once, on an ordinary thread. */
    check_drops_in_order(&log, all, 2);
    if (aload(&obj[0].drops)) CHECK(!pthread_equal(obj[0].drop_thread, r.thread));
    CHECK_EQ(stats_of(kept).graph_count, 0);
    CHECK_OK(RUN_BOUNDED(JOB_TRIM, kept, NULL)); /* no graph holds it: its graph memory goes back */
    CHECK_EQ(stats_of(kept).graph_reserved_bytes, 0);
    cpool_pool_release(kept);
    cpool_stream_destroy(s);
}

/* Two pools whose drops clear each other's pool, cleared on two threads at
 * once: each drop waits until the other thread is inside its drop too, so
 * both clears are at work when the drops call the library. */
typedef struct cross_drop {
    cpool_pool *other;
    int *inside; /* drops running, both threads' */
    int drops;
} cross_drop;
static void cross_drop_fn(void *arg) {
    cross_drop *c = (cross_drop *)arg;
    ainc(c->inside);
    wait_for_int(c->inside, 2, 2000); /* the other clear is dropping too */
    cpool_pool_clear_buffers(c->other);
    ainc(&c->drops);
}

static void drops_clear_each_others_pools(cpool_device *dev) {
    static int inside;
    static cross_drop ca, cb;
    cpool_pool *a = NULL, *b = NULL;
    job ja, jb;
    astore(&inside, 0);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &a));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &b));
    ca = (cross_drop){.other = b, .inside = &inside};
    cb = (cross_drop){.other = a, .inside = &inside};
    CHECK_OK(cpool_pool_record(a, &ca, cross_drop_fn, NULL));
    CHECK_OK(cpool_pool_record(b, &cb, cross_drop_fn, NULL));
    job_start(&ja, JOB_CLEAR, a, NULL);
    job_start(&jb, JOB_CLEAR, b, NULL);
    JOB_FINISH(&ja);
    JOB_FINISH(&jb);
    CHECK_EQ(aload(&inside), 2);
    CHECK_EQ(aload(&ca.drops), 1);
    CHECK_EQ(aload(&cb.drops), 1);
    CHECK_EQ(cpool_pool_buffer_count(a), 0);
    CHECK_EQ(cpool_pool_buffer_count(b), 0);
    cpool_pool_release(a);
    cpool_pool_release(b);
}

/* Two threads destroy the same stream at once, many times: one tears it
 * down, the other finds a dead handle (a plain check-then-kill let both
 * tear it down: a double free or a hang). */
typedef struct racing_destroy {
    cpool_stream *s;
    int *go;
} racing_destroy;
static void *destroy_when_go(void *arg) {
    racing_destroy *r = (racing_destroy *)arg;
    while (!aload(r->go)) {
    }
    cpool_stream_destroy(r->s);
    return NULL;
}

static void racing_destroys_of_one_stream(cpool_device *dev) {
    enum { ROUNDS = 3000 };
    int i;
    for (i = 0; i < ROUNDS; i++) {
        static int go;
        cpool_stream *s = NULL;
        pthread_t th;
        racing_destroy r;
        REQUIRE_OK(cpool_stream_create(dev, &s));
        astore(&go, 0);
        r = (racing_destroy){s, &go};
        REQUIRE(pthread_create(&th, NULL, destroy_when_go, &r) == 0);
        astore(&go, 1);
        cpool_stream_destroy(s);
        pthread_join(th, NULL);
        CHECK_STATUS(cpool_stream_synchronize(s), CPOOL_ERR_INVALID_ARGUMENT);
    }
    /* The device's stream list is intact: a pool teardown walks it. */
    cpool_pool *pool = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_pool_release(pool);
}

/* A callback of a graph's own replay releases it twice: the second release
 * is refused (the caller held one reference), so it cannot take the one the
 * launch holds while it is under way. */
typedef struct twice {
    cpool_graph *g;
    char reason[256];
    int done;
} twice;
static void cb_release_twice(void *arg) {
    twice *t = (twice *)arg;
    cpool_graph_release(t->g);
    cpool_graph_release(t->g);
    snprintf(t->reason, sizeof t->reason, "%s", cpool_last_error());
    astore(&t->done, 1);
}
static cpool_status body_release_twice(cpool_stream *s, void *ctx) { return cpool_launch_host(s, cb_release_twice, ctx); }

static void graph_released_twice_in_its_replay(cpool_device *dev) {
    static twice t;
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    astore(&t.done, 0);
    t.reason[0] = '\0';
    REQUIRE_OK(cpool_capture(s, NULL, CPOOL_CAPTURE_GLOBAL, body_release_twice, &t, &t.g));
    CHECK_OK(cpool_graph_launch(t.g, s));
    CHECK(wait_for_int(&t.done, 1, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_wait_deferred();
    CHECK(t.reason[0] != '\0'); /* the second release said why it did nothing */
    CHECK_STATUS(cpool_graph_launch(t.g, s), CPOOL_ERR_INVALID_ARGUMENT);
    cpool_stream_destroy(s);
}

/* Two threads begin a capture on one stream at once, many times: one wins
 * and ends its capture into a graph that holds the pool; the other is told
 * the stream captures, and takes nothing (the loser once emptied the
 * winner's record, leaking a pool reference and making graphs without one). */
typedef struct begin_race {
    cpool_stream *s;
    cpool_pool *pool;
    int *go;
    cpool_status begun;
    cpool_graph *g;
} begin_race;
static void *begin_when_go(void *arg) {
    begin_race *r = (begin_race *)arg;
    void *p = NULL;
    while (!aload(r->go)) {
    }
    r->begun = cpool_capture_begin(r->s, r->pool, CPOOL_CAPTURE_THREAD_LOCAL);
    if (r->begun != CPOOL_OK) return NULL;
    if (CHECK_OK(cpool_alloc(r->pool, 4096, r->s, &p))) CHECK_OK(cpool_free(r->pool, p, r->s));
    CHECK_OK(cpool_capture_end(r->s, &r->g));
    return NULL;
}

static void racing_capture_begins(cpool_device *dev) {
    enum { ROUNDS = 400 };
    static drop_log log;
    static tracked obj;
    static int go;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    int i, wins = 0;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
    for (i = 0; i < ROUNDS; i++) {
        begin_race a = {s, pool, &go, CPOOL_OK, NULL}, b = {s, pool, &go, CPOOL_OK, NULL};
        pthread_t ta, tb;
        astore(&go, 0);
        REQUIRE(pthread_create(&ta, NULL, begin_when_go, &a) == 0);
        REQUIRE(pthread_create(&tb, NULL, begin_when_go, &b) == 0);
        astore(&go, 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(a.begun == CPOOL_OK || b.begun == CPOOL_OK); /* both, when one ended before the other began */
        begin_race *w[2] = {&a, &b};
        for (int k = 0; k < 2; k++) {
            if (w[k]->begun != CPOOL_OK) {
                CHECK_EQ(w[k]->begun, CPOOL_ERR_ALREADY_CAPTURING);
                continue;
            }
            wins++;
            CHECK(cpool_graph_pool(w[k]->g) == pool); /* the graph holds the pool */
            cpool_graph_release(w[k]->g);
        }
    }
    CHECK_GE(wins, ROUNDS);
    CHECK_EQ(stats_of(pool).graph_count, 0);
    cpool_pool_release(pool);
    cpool_wait_deferred();
    CHECK_EQ(aload(&obj.drops), 1); /* no reference was left behind */
    cpool_stream_destroy(s);
}

/* ==== 5b. values that were never handles ================================== */

/* Whether the last error says the value is no handle at all. */
static int says_no_handle(void) { return strstr(cpool_last_error(), "is not a handle of capturepool") != NULL; }

/* Small numbers, plain addresses (a stack variable's, a heap block's, a
 * live handle's with its top bits cut) and misaligned values are refused
 * before the library reads anything at them: no crash, a status, and a
 * message that says it was never a handle. */
static void values_that_are_no_handles(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    int on_stack = 0;
    void *on_heap = malloc(64);
    REQUIRE(on_heap != NULL);
    uintptr_t cut = (uintptr_t)fx.pool & (((uintptr_t)1 << 48) - 1);
    const uintptr_t values[] = {0x1234, 0xfff0, (uintptr_t)&on_stack, (uintptr_t)on_heap, cut,
                                (uintptr_t)fx.pool + 8, (uintptr_t)fx.pool | 1};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        cpool_pool *pool = (cpool_pool *)values[i];
        cpool_stream *s = (cpool_stream *)values[i];
        cpool_graph *g = (cpool_graph *)values[i];
        cpool_event *e = (cpool_event *)values[i];
        void *p = NULL;
        CHECK_STATUS(cpool_alloc(pool, 64, fx.s, &p), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK(says_no_handle());
        CHECK_STATUS(cpool_alloc(fx.pool, 64, s, &p), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK(says_no_handle());
        cpool_pool_stats st = CPOOL_POOL_STATS_INIT;
        CHECK_STATUS(cpool_pool_get_stats(pool, &st), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(cpool_graph_launch(g, fx.s), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK(says_no_handle());
        CHECK_STATUS(cpool_stream_synchronize(s), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK_STATUS(cpool_event_record(e, fx.s), CPOOL_ERR_INVALID_ARGUMENT);
        CHECK(says_no_handle());
        cpool_pool_release(pool); /* void: refused, with the reason */
        CHECK(says_no_handle());
        cpool_graph_release(g);
        cpool_stream_destroy(s);
        cpool_event_destroy(e);
        cpool_device_close((cpool_device *)values[i]);
        CHECK(says_no_handle());
        CHECK(!cpool_pool_is_sealed(pool));
    }
    free(on_heap);
    void *p = NULL; /* the real handles still work */
    CHECK_OK(cpool_alloc(fx.pool, 64, fx.s, &p));
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
}

static const check_case cases[] = {
    CHECK_CASE(values_that_are_no_handles),
    CHECK_CASE(destroying_stream_vs_last_release),
    CHECK_CASE(destroying_stream_vs_trim),
    CHECK_CASE(destroying_stream_vs_clear),
    CHECK_CASE(destroying_stream_vs_alloc_elsewhere),
    CHECK_CASE(free_under_capture_keeps_stream_order),
    CHECK_CASE(capture_gives_idle_segment_back_at_bound),
    CHECK_CASE(drop_clears_own_pool_during_clear),
    CHECK_CASE(drop_clears_own_pool_during_last_release),
    CHECK_CASE(drop_waits_deferred_on_library_thread),
    CHECK_CASE(drop_releases_own_pool_during_clear),
    CHECK_CASE(drops_clear_each_others_pools),
    CHECK_CASE(dead_pool_handle),
    CHECK_CASE(dead_pool_release_while_graph_holds_it),
    CHECK_CASE(dead_graph_handle),
    CHECK_CASE(dead_stream_handle),
    CHECK_CASE(dead_device_handle),
    CHECK_CASE(dead_param_handle),
    CHECK_CASE(racing_destroys_of_one_stream),
    CHECK_CASE(racing_capture_begins),
    CHECK_CASE(graph_released_twice_in_its_replay),
    CHECK_CASE(callback_sync_of_own_stream_refused),
    CHECK_CASE(callback_trim_refused),
    CHECK_CASE(env_unknown_backend_refused),
    CHECK_CASE(env_virtual_memory_value_refused),
    CHECK_CASE(auto_open_leaves_last_error),
    CHECK_CASE(graph_released_in_callback_torn_down_later),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
