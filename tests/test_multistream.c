/* Multi-stream capture, CUDA's rules on both backends: an event recorded on
 * a capturing stream and waited for by another stream forks that stream into
 * the capture (its work, allocations and frees go into the same graph); a
 * record on the fork waited for by the origin joins it back. The capture
 * ends only on its origin and only with every fork joined; an unjoined end
 * or a destroyed fork invalidates it, frees every stream and leaks nothing.
 * Bad waits and queries are refused and change nothing. A block freed on one
 * branch is never handed to a branch that may run at the same time; replays
 * keep the captured order between branches and run branches concurrently;
 * a fork may be driven from another thread. */
#include "check.h"
#include "helpers.h"

#include <stdatomic.h>

#define GRAPH_SENTINEL ((cpool_graph *)(uintptr_t)0x10)
enum { MIB = 1 << 20, NEVENTS = 6 };

/* ---- the fixture: an origin, three more streams, a pool, events ----------- */

typedef struct ms_fixture {
    cpool_stream *o, *x, *y, *z; /* o: the origin of the captures */
    cpool_pool *pool;
    cpool_event *e[NEVENTS];
} ms_fixture;

/* Events first; then the forks (a destroy invalidates a capture left open
 * by an abandoned case), the pool, and the origin (which discards it). */
static void ms_close_(void *arg) {
    ms_fixture *f = (ms_fixture *)arg;
    for (int i = 0; i < NEVENTS; i++) cpool_event_destroy(f->e[i]);
    cpool_stream_destroy(f->z);
    cpool_stream_destroy(f->y);
    cpool_stream_destroy(f->x);
    cpool_pool_release(f->pool);
    cpool_stream_destroy(f->o);
    memset(f, 0, sizeof *f);
}

/* f must be static: its cleanup runs after the case returned. */
static int ms_open(cpool_device *dev, ms_fixture *f) {
    memset(f, 0, sizeof *f);
    check_defer(ms_close_, f);
    if (!CHECK_OK(cpool_stream_create(dev, &f->o))) return 0;
    if (!CHECK_OK(cpool_stream_create(dev, &f->x))) return 0;
    if (!CHECK_OK(cpool_stream_create(dev, &f->y))) return 0;
    if (!CHECK_OK(cpool_stream_create(dev, &f->z))) return 0;
    if (!CHECK_OK(cpool_pool_create(dev, NULL, &f->pool))) return 0;
    for (int i = 0; i < NEVENTS; i++)
        if (!CHECK_OK(cpool_event_create(dev, &f->e[i]))) return 0;
    return 1;
}

static void release_graph_(void *g) { cpool_graph_release((cpool_graph *)g); }

/* Orders the work enqueued on `to` from now on after the work enqueued on
 * `from` so far: a fork when `from` captures and `to` does not, a join when
 * both are in one capture, a plain dependency outside capture. */
static cpool_status link_streams(cpool_event *e, cpool_stream *from, cpool_stream *to) {
    cpool_status st = cpool_event_record(e, from);
    return st != CPOOL_OK ? st : cpool_stream_wait_event(to, e);
}

static cpool_capture_state state_of(cpool_stream *s) {
    cpool_capture_state st = CPOOL_CAPTURE_INVALIDATED;
    CHECK_OK(cpool_capture_status(s, &st));
    return st;
}

/* A plain (eager) block of the pool, zeroed, ready to be read back. */
static int plain_block(ms_fixture *f, size_t n, void **out) {
    if (!CHECK_OK(cpool_alloc(f->pool, n, f->o, out))) return 0;
    if (!CHECK_OK(cpool_memset_async(f->o, *out, 0, n))) return 0;
    return CHECK_OK(cpool_stream_synchronize(f->o));
}

/* A stream that works eagerly: a fill and a read back see each other. */
static void check_eager(cpool_stream *s, void *buf, size_t n, int v) {
    CHECK_EQ(state_of(s), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_memset_async(s, buf, v, n));
    CHECK_BYTES(s, buf, n, v);
}

/* ---- fork and join ------------------------------------------------------ */

static void fork_joins_the_capture(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 4096 };
    void *buf = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &buf));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x)); /* fork */
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_memset_async(f.x, buf, 0x5a, N));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o)); /* join */
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_ACTIVE); /* in the capture until it ends */
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_BYTES(f.o, buf, N, 0); /* captured, not run */
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_BYTES(f.o, buf, N, 0x5a);
    check_eager(f.x, buf, N, 0x33);
}

/* Allocations and frees on a fork are served as under the capture. */
static void fork_allocates_graph_memory(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 64 * 1024 };
    void *out = NULL, *tmp = NULL;
    cpool_graph *g = NULL;
    cpool_pool_stats before, during;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &out));
    before = stats_of(f.pool);
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    REQUIRE_OK(cpool_alloc(f.pool, N, f.x, &tmp));
    during = stats_of(f.pool);
    CHECK_GT(during.graph_reserved_bytes, before.graph_reserved_bytes);
    CHECK_OK(cpool_memset_async(f.x, tmp, 0x42, N));
    CHECK_OK(cpool_memcpy_async(f.x, out, tmp, N));
    CHECK_OK(cpool_free(f.pool, tmp, f.x));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    CHECK_EQ(stats_of(f.pool).graph_count, 1);
    CHECK_EQ(stats_of(f.pool).allocated_bytes, before.allocated_bytes);
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_BYTES(f.o, out, N, 0x42);
}

typedef struct scoped_ctx {
    ms_fixture *f;
    void *buf;
    size_t n;
    cpool_capture_state x_inside;
} scoped_ctx;
static cpool_status scoped_body(cpool_stream *s, void *arg) {
    scoped_ctx *c = (scoped_ctx *)arg;
    cpool_status st = link_streams(c->f->e[0], s, c->f->x);
    if (st != CPOOL_OK) return st;
    if ((st = cpool_capture_status(c->f->x, &c->x_inside)) != CPOOL_OK) return st;
    if ((st = cpool_memset_async(c->f->x, c->buf, 0x6b, c->n)) != CPOOL_OK) return st;
    return link_streams(c->f->e[1], c->f->x, s);
}

static void fork_inside_scoped_capture(cpool_device *dev) {
    static ms_fixture f;
    static scoped_ctx c;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    c = (scoped_ctx){&f, NULL, 4096, CPOOL_CAPTURE_NONE};
    REQUIRE(plain_block(&f, c.n, &c.buf));
    REQUIRE_OK(cpool_capture(f.o, f.pool, CPOOL_CAPTURE_GLOBAL, scoped_body, &c, &g));
    check_defer(release_graph_, g);
    CHECK_EQ(c.x_inside, CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_BYTES(f.o, c.buf, c.n, 0x6b);
}

/* O forks X and Z; X forks Y; Y joins X, then X and Z join O. Each copy
 * reads what the branch it depends on wrote, so a lost edge shows. */
static void forks_of_forks_join_through_a_fork(cpool_device *dev) {
    static ms_fixture f;
    enum { Q = 4096 };
    unsigned char *buf = NULL, *out = NULL;
    cpool_graph *g = NULL;
    static const unsigned char want[4] = {0x10, 0x11, 0x11, 0x10};
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, 4 * Q, (void **)&buf));
    REQUIRE(plain_block(&f, 4 * Q, (void **)&out));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_memset_async(f.o, buf, 0x10, Q));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.z, f.e[0])); /* one record, two forks */
    CHECK_OK(cpool_memset_async(f.x, buf + Q, 0x11, Q));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.y)); /* a fork of a fork */
    CHECK_EQ(state_of(f.y), CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(f.z), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_memcpy_async(f.y, buf + 2 * Q, buf + Q, Q));
    CHECK_OK(cpool_memcpy_async(f.z, buf + 3 * Q, buf, Q));
    REQUIRE_OK(link_streams(f.e[2], f.y, f.x)); /* Y joins X ... */
    CHECK_OK(cpool_memcpy_async(f.x, out + 2 * Q, buf + 2 * Q, Q));
    REQUIRE_OK(link_streams(f.e[3], f.x, f.o)); /* ... which joins O */
    REQUIRE_OK(link_streams(f.e[4], f.z, f.o));
    CHECK_OK(cpool_memcpy_async(f.o, out, buf, 2 * Q));
    CHECK_OK(cpool_memcpy_async(f.o, out + 3 * Q, buf + 3 * Q, Q));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.y), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.z), CPOOL_CAPTURE_NONE);
    for (int r = 0; r < 3; r++) {
        CHECK_OK(cpool_memset_async(f.o, buf, 0, 4 * Q));
        CHECK_OK(cpool_memset_async(f.o, out, 0, 4 * Q));
        CHECK_OK(cpool_graph_launch(g, f.o));
        for (int i = 0; i < 4; i++) CHECK_BYTES(f.o, out + i * Q, Q, want[i]);
    }
}

/* ---- ends ---------------------------------------------------------------- */

static void end_on_a_fork_is_refused(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g = GRAPH_SENTINEL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    CHECK_STATUS(cpool_capture_end(f.x, &g), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_ACTIVE); /* the capture goes on */
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    g = NULL;
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
}

/* After a failed end: every stream works eagerly, no graph holds the pool,
 * and the same streams capture again. */
static void check_after_failed_end(ms_fixture *f, void *buf, size_t n) {
    cpool_graph *g = NULL;
    CHECK_EQ(stats_of(f->pool).graph_count, 0);
    check_eager(f->o, buf, n, 0x21);
    if (f->x) check_eager(f->x, buf, n, 0x22);
    if (f->y) check_eager(f->y, buf, n, 0x23);
    REQUIRE_OK(cpool_capture_begin(f->o, f->pool, CPOOL_CAPTURE_GLOBAL));
    if (f->x) {
        REQUIRE_OK(link_streams(f->e[4], f->o, f->x));
        CHECK_OK(cpool_memset_async(f->x, buf, 0x24, n));
        REQUIRE_OK(link_streams(f->e[5], f->x, f->o));
    } else {
        CHECK_OK(cpool_memset_async(f->o, buf, 0x24, n));
    }
    REQUIRE_OK(cpool_capture_end(f->o, &g));
    CHECK_OK(cpool_graph_launch(g, f->o));
    CHECK_BYTES(f->o, buf, n, 0x24);
    cpool_graph_release(g);
}

/* X never joins (Y does): the end fails, frees every stream and leaks
 * nothing; X's allocation in it is a plain block its user may free. */
static void unjoined_fork_invalidates_end(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 4096 };
    void *buf = NULL, *a = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    cpool_pool_stats before;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &buf));
    before = stats_of(f.pool);
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &a));
    CHECK_OK(cpool_memset_async(f.x, a, 1, MIB));
    CHECK_OK(cpool_memset_async(f.y, buf, 2, N));
    REQUIRE_OK(link_streams(f.e[1], f.y, f.o));
    CHECK_STATUS(cpool_capture_end(f.o, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.y), CPOOL_CAPTURE_NONE);
    CHECK_BYTES(f.o, buf, N, 0); /* the discarded work never ran */
    CHECK_OK(cpool_free(f.pool, a, f.x));
    CHECK_OK(cpool_stream_synchronize(f.x));
    CHECK_EQ(stats_of(f.pool).allocated_bytes, before.allocated_bytes);
    CHECK_STATS_SANE(stats_of(f.pool));
    check_after_failed_end(&f, buf, N);
}

static void work_after_join_invalidates_end(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 4096 };
    void *buf = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &buf));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    CHECK_OK(cpool_memset_async(f.x, buf, 1, N));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    CHECK_OK(cpool_memset_async(f.x, buf, 2, N)); /* after its last join */
    CHECK_STATUS(cpool_capture_end(f.o, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_NONE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_BYTES(f.o, buf, N, 0);
    check_after_failed_end(&f, buf, N);
}

/* Destroying a fork mid-capture breaks the capture, never the process. */
static void destroyed_fork_invalidates_end(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 4096 };
    void *buf = NULL, *a = NULL;
    cpool_graph *g = GRAPH_SENTINEL;
    cpool_pool_stats before;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &buf));
    before = stats_of(f.pool);
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &a));
    CHECK_OK(cpool_memset_async(f.x, a, 1, MIB));
    CHECK_OK(cpool_memcpy_async(f.x, buf, a, N));
    cpool_stream_destroy(f.x);
    f.x = NULL;
    CHECK_STATUS(cpool_capture_end(f.o, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(g == NULL);
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_NONE);
    CHECK_BYTES(f.o, buf, N, 0);
    CHECK_OK(cpool_free(f.pool, a, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    CHECK_EQ(stats_of(f.pool).allocated_bytes, before.allocated_bytes);
    check_after_failed_end(&f, buf, N);
}

/* ---- bad input: refused, and nothing changes ------------------------------ */

static void wait_across_two_captures_refused(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g1 = NULL, *g2 = NULL;
    REQUIRE(ms_open(dev, &f));
    /* Relaxed: CUDA refuses to instantiate one capture's graph on a thread
     * where another captures in GLOBAL mode. */
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_RELAXED));
    REQUIRE_OK(cpool_capture_begin(f.y, NULL, CPOOL_CAPTURE_RELAXED));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    CHECK_STATUS(cpool_stream_wait_event(f.y, f.e[0]), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(f.y), CPOOL_CAPTURE_ACTIVE);
    CHECK_OK(cpool_capture_end(f.y, &g2));
    CHECK_OK(cpool_capture_end(f.o, &g1));
    CHECK_OK(cpool_graph_launch(g1, f.o));
    CHECK_OK(cpool_graph_launch(g2, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g2);
    cpool_graph_release(g1);
}

static void capture_waits_for_outside_record_refused(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_event_record(f.e[0], f.x)); /* outside any capture */
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_stream_wait_event(f.o, f.e[0]), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g);
    CHECK_OK(cpool_event_synchronize(f.e[0]));
}

static void null_event_or_stream_refused(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_event_record(NULL, f.o), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_STATUS(cpool_event_record(f.e[0], NULL), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    CHECK_STATUS(cpool_stream_wait_event(NULL, f.e[0]), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_stream_wait_event(f.x, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_stream_wait_event(f.o, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE); /* no fork */
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    cpool_graph_release(g);
}

/* A record in a capture marks no point of any stream's eager work. */
static void captured_record_cannot_be_queried(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g = NULL;
    float ms = -1;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_event_record(f.e[1], f.x));
    REQUIRE_OK(cpool_event_synchronize(f.e[1])); /* a completed record to time against */
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    CHECK_STATUS(cpool_event_query(f.e[0]), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_STATUS(cpool_event_synchronize(f.e[0]), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_event_elapsed_ms(f.e[1], f.e[0], &ms), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_event_elapsed_ms(f.e[0], f.e[1], &ms), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(ms == -1);
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g);
    CHECK_OK(cpool_event_record(f.e[0], f.o)); /* an eager record makes it usable again */
    CHECK_OK(cpool_event_synchronize(f.e[0]));
    CHECK_OK(cpool_event_query(f.e[0]));
}

/* An event never recorded gives nothing to wait for, in a capture too: the
 * wait forks nobody and the capture ends as if it had not happened. */
static void never_recorded_event_forks_nothing(cpool_device *dev) {
    static ms_fixture f;
    enum { N = 4096 };
    void *buf = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, N, &buf));
    CHECK_OK(cpool_event_query(f.e[0]));
    CHECK_OK(cpool_event_synchronize(f.e[0]));
    /* Relaxed: the eager check synchronizes another stream, which a GLOBAL
     * capture forbids on CUDA. */
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_RELAXED));
    CHECK_OK(cpool_stream_wait_event(f.o, f.e[0]));
    CHECK_OK(cpool_stream_wait_event(f.x, f.e[0]));
    CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_ACTIVE);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    check_eager(f.x, buf, N, 0x44); /* not in the capture */
    CHECK_OK(cpool_memset_async(f.o, buf, 0x45, N));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_BYTES(f.o, buf, N, 0x45);
    cpool_graph_release(g);
    CHECK_OK(cpool_event_query(f.e[0]));
}

static void begin_on_a_fork_refused(cpool_device *dev) {
    static ms_fixture f;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    CHECK_STATUS(cpool_capture_begin(f.x, f.pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK(cpool_last_error()[0] != '\0');
    CHECK_STATUS(cpool_capture_begin(f.x, NULL, CPOOL_CAPTURE_RELAXED), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g);
}

/* ---- memory between branches ------------------------------------------------ */

/* X and Y fork from one record: they may run at the same time. */
static void branch_free_not_handed_to_sibling(cpool_device *dev) {
    static ms_fixture f;
    void *a = NULL, *b = NULL, *a2 = NULL, *d = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &a));
    CHECK_OK(cpool_memset_async(f.x, a, 1, MIB));
    CHECK_OK(cpool_free(f.pool, a, f.x));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.y, &b));
    CHECK(!ranges_overlap(a, MIB, b, MIB));
    CHECK_OK(cpool_memset_async(f.y, b, 2, MIB));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &a2)); /* may reuse a: same branch */
    CHECK(!ranges_overlap(a2, MIB, b, MIB));
    CHECK_OK(cpool_free(f.pool, a2, f.x));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.o, &d)); /* may reuse a: X joined O */
    CHECK(!ranges_overlap(d, MIB, b, MIB));       /* b is live on Y */
    CHECK_OK(cpool_free(f.pool, d, f.o));
    CHECK_OK(cpool_free(f.pool, b, f.y));
    REQUIRE_OK(link_streams(f.e[2], f.y, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g);
}

/* O's own work after the fork runs at the same time as the forks. */
static void origin_free_after_fork_not_handed_to_branch(cpool_device *dev) {
    static ms_fixture f;
    void *c = NULL, *b = NULL, *d = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.o, &c));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    CHECK_OK(cpool_memset_async(f.o, c, 3, MIB)); /* after the fork */
    CHECK_OK(cpool_free(f.pool, c, f.o));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.y, &b));
    CHECK(!ranges_overlap(c, MIB, b, MIB));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &d));
    CHECK(!ranges_overlap(c, MIB, d, MIB));
    CHECK(!ranges_overlap(b, MIB, d, MIB));
    CHECK_OK(cpool_memset_async(f.y, b, 4, MIB));
    CHECK_OK(cpool_memset_async(f.x, d, 5, MIB));
    CHECK_OK(cpool_free(f.pool, b, f.y));
    CHECK_OK(cpool_free(f.pool, d, f.x));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(link_streams(f.e[2], f.y, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    cpool_graph_release(g);
}

/* A block O freed before the fork is ordered before the branch: reusing it
 * is allowed (not required), and the replay's bytes are right either way. */
static void free_before_fork_may_serve_branch(cpool_device *dev) {
    static ms_fixture f;
    void *c = NULL, *d = NULL, *out1 = NULL, *out2 = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, MIB, &out1));
    REQUIRE(plain_block(&f, MIB, &out2));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.o, &c));
    CHECK_OK(cpool_memset_async(f.o, c, 0x11, MIB));
    CHECK_OK(cpool_memcpy_async(f.o, out1, c, MIB));
    CHECK_OK(cpool_free(f.pool, c, f.o));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &d));
    CHECK_OK(cpool_memset_async(f.x, d, 0x22, MIB));
    CHECK_OK(cpool_memcpy_async(f.x, out2, d, MIB));
    CHECK_OK(cpool_free(f.pool, d, f.x));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    for (int r = 0; r < 3; r++) {
        CHECK_OK(cpool_memset_async(f.o, out1, 0, MIB));
        CHECK_OK(cpool_memset_async(f.o, out2, 0, MIB));
        CHECK_OK(cpool_graph_launch(g, f.o));
        CHECK_BYTES(f.o, out1, MIB, 0x11);
        CHECK_BYTES(f.o, out2, MIB, 0x22);
    }
}

/* A fork runs after the record it waits for, not after O's work since:
 * a block O freed after the record, even before any fork, is not the
 * branch's. */
static void record_before_free_forks_branch_apart(cpool_device *dev) {
    static ms_fixture f;
    void *c = NULL, *d = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o)); /* the fork point */
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.o, &c));
    CHECK_OK(cpool_memset_async(f.o, c, 1, MIB)); /* runs beside X's branch */
    CHECK_OK(cpool_free(f.pool, c, f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &d));
    CHECK(!ranges_overlap(c, MIB, d, MIB));
    CHECK_OK(cpool_memset_async(f.x, d, 2, MIB));
    CHECK_OK(cpool_free(f.pool, d, f.x));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    cpool_graph_release(g);
}

/* A join hands over what the recording branch had freed before its record,
 * not what it took over from a join after it: Y waits for O's record made
 * before O joined X, so X's freed block is not Y's. */
static void join_hands_over_only_what_preceded_the_record(cpool_device *dev) {
    static ms_fixture f;
    void *a = NULL, *b = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &a));
    CHECK_OK(cpool_memset_async(f.x, a, 1, MIB));
    CHECK_OK(cpool_free(f.pool, a, f.x));
    REQUIRE_OK(cpool_event_record(f.e[1], f.x));
    REQUIRE_OK(cpool_event_record(f.e[2], f.o));      /* before O depends on X */
    REQUIRE_OK(cpool_stream_wait_event(f.o, f.e[1])); /* O joins X: a is O's */
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[2])); /* Y: after O's record only */
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.y, &b));
    CHECK(!ranges_overlap(a, MIB, b, MIB));
    CHECK_OK(cpool_memset_async(f.y, b, 2, MIB));
    CHECK_OK(cpool_free(f.pool, b, f.y));
    REQUIRE_OK(link_streams(f.e[3], f.y, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    cpool_graph_release(g);
}

/* A plain block freed on O's branch waits for O's work from before the
 * capture; once that work is over it is O's branch's, not a sibling's. */
static void plain_block_freed_on_a_branch_stays_its(cpool_device *dev) {
    static ms_fixture f;
    void *c = NULL, *d = NULL, *big[2] = {NULL, NULL};
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE(plain_block(&f, MIB, &c));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    CHECK_OK(cpool_memset_async(f.o, c, 1, MIB)); /* O's branch uses c, beside X's */
    CHECK_OK(cpool_free(f.pool, c, f.o));
    /* O's new segments: each looks at the fences (O's work before the
     * capture finished long ago) and unfences c. */
    for (int i = 0; i < 2; i++) REQUIRE_OK(cpool_alloc(f.pool, (size_t)(3 + 2 * i) * MIB, f.o, &big[i]));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &d));
    CHECK(!ranges_overlap(c, MIB, d, MIB));
    CHECK_OK(cpool_memset_async(f.x, d, 2, MIB));
    CHECK_OK(cpool_free(f.pool, d, f.x));
    for (int i = 0; i < 2; i++) CHECK_OK(cpool_free(f.pool, big[i], f.o));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    cpool_graph_release(g);
}

/* A plain block freed on X, still waiting for X's work from before the
 * capture, moves with a join to O; Y waits for O's record made before that
 * join, so once X's work is over (the trim waits for it) the block is O's,
 * not Y's. */
static void waiting_block_follows_joins_by_their_records(cpool_device *dev) {
    static ms_fixture f;
    void *c = NULL, *d = NULL;
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.x, &c));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    CHECK_OK(cpool_memset_async(f.x, c, 1, MIB));
    CHECK_OK(cpool_free(f.pool, c, f.x));
    REQUIRE_OK(cpool_event_record(f.e[1], f.o));      /* before O depends on X */
    REQUIRE_OK(link_streams(f.e[2], f.x, f.o));       /* O joins X: c goes to O */
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[1])); /* Y: after O's record only */
    CHECK_OK(cpool_pool_trim(f.pool));                /* X's earlier work is over */
    REQUIRE_OK(cpool_alloc(f.pool, MIB, f.y, &d));
    CHECK(!ranges_overlap(c, MIB, d, MIB));
    CHECK_OK(cpool_memset_async(f.y, d, 2, MIB));
    CHECK_OK(cpool_free(f.pool, d, f.y));
    REQUIRE_OK(link_streams(f.e[3], f.y, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    cpool_graph_release(g);
}

/* Host work that fills a block with its tag again and again, and counts
 * the times it finds another's bytes there. */
enum { TAG_BYTES = 4096 };
typedef struct tag_work {
    unsigned char *p;
    unsigned char tag;
    atomic_int *clashes;
} tag_work;

static void fill_and_check(void *arg) {
    tag_work *w = (tag_work *)arg;
    for (int round = 0; round < 40; round++) {
        memset(w->p, w->tag, TAG_BYTES);
        for (volatile int spin = 0; spin < 2000; spin++) {
        }
        for (int i = 0; i < TAG_BYTES; i++)
            if (w->p[i] != w->tag) {
                atomic_fetch_add(w->clashes, 1);
                return;
            }
    }
}

typedef struct rerecord_race {
    cpool_event *e;
    cpool_stream *on; /* the record's stream, or the waiting one */
    atomic_int *go;
    bool wait;
    cpool_status st;
} rerecord_race;

static void *rerecord_side(void *arg) {
    rerecord_race *r = (rerecord_race *)arg;
    while (!atomic_load(r->go)) {
    }
    r->st = r->wait ? cpool_stream_wait_event(r->on, r->e) : cpool_event_record(r->e, r->on);
    return NULL;
}

/* A record moving an event from X to Y while Z waits for it, on two
 * threads: Z gets X's freed block only if its wait is for X's record, so
 * replays never run Z's work on it beside X's. The work that would see it
 * is host work on the blocks, which only the host backend's memory allows:
 * on CUDA the race runs and the replays are left out. */
static void rerecord_racing_a_join(cpool_device *dev) {
    static ms_fixture f;
    atomic_int clashes = 0;
    bool host_memory = cpool_device_backend(dev) == CPOOL_BACKEND_HOST;
    REQUIRE(ms_open(dev, &f));
    for (int trial = 0; trial < 60; trial++) {
        void *a = NULL, *b = NULL;
        cpool_graph *g = NULL;
        REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
        REQUIRE_OK(cpool_event_record(f.e[0], f.o));
        REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
        REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
        REQUIRE_OK(cpool_stream_wait_event(f.z, f.e[0]));
        REQUIRE_OK(cpool_alloc(f.pool, TAG_BYTES, f.x, &a));
        tag_work wa = {a, 1, &clashes};
        if (host_memory) REQUIRE_OK(cpool_launch_host(f.x, fill_and_check, &wa));
        CHECK_OK(cpool_free(f.pool, a, f.x));
        REQUIRE_OK(cpool_event_record(f.e[1], f.x));
        atomic_int go = 0;
        rerecord_race rec = {f.e[1], f.y, &go, false, CPOOL_OK}, wait = {f.e[1], f.z, &go, true, CPOOL_OK};
        pthread_t t1, t2;
        REQUIRE(pthread_create(&t1, NULL, rerecord_side, &rec) == 0);
        REQUIRE(pthread_create(&t2, NULL, rerecord_side, &wait) == 0);
        atomic_store(&go, 1);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        CHECK_OK(rec.st);
        CHECK_OK(wait.st);
        REQUIRE_OK(cpool_alloc(f.pool, TAG_BYTES, f.z, &b));
        tag_work wb = {b, 2, &clashes};
        if (host_memory) REQUIRE_OK(cpool_launch_host(f.z, fill_and_check, &wb));
        CHECK_OK(cpool_free(f.pool, b, f.z));
        REQUIRE_OK(link_streams(f.e[2], f.x, f.o));
        REQUIRE_OK(link_streams(f.e[3], f.y, f.o));
        REQUIRE_OK(link_streams(f.e[4], f.z, f.o));
        REQUIRE_OK(cpool_capture_end(f.o, &g));
        if (a == b && host_memory)
            for (int r = 0; r < 3; r++) CHECK_OK(cpool_graph_launch(g, f.o));
        CHECK_OK(cpool_stream_synchronize(f.o));
        cpool_graph_release(g);
    }
    CHECK_EQ(atomic_load(&clashes), 0);
}

/* The origin of a capture destroyed while another thread allocates on a
 * stream forked into it: the fork's calls reach the capture's lock after
 * the origin is gone (under TSan a destroyed mutex was seen locked). */
typedef struct fork_worker {
    cpool_pool *pool;
    cpool_stream *fork;
    atomic_int stop;
} fork_worker;

static void *alloc_on_fork(void *arg) {
    fork_worker *w = (fork_worker *)arg;
    while (!atomic_load(&w->stop)) {
        void *p = NULL;
        if (cpool_alloc(w->pool, 256, w->fork, &p) == CPOOL_OK) CHECK_OK(cpool_free(w->pool, p, w->fork));
    }
    return NULL;
}

static void origin_destroyed_while_a_fork_allocates(cpool_device *dev) {
    static ms_fixture f;
    static fork_worker w;
    REQUIRE(ms_open(dev, &f));
    w.pool = f.pool;
    w.fork = f.x;
    for (int round = 0; round < 40; round++) {
        cpool_stream *origin = NULL;
        REQUIRE_OK(cpool_stream_create(dev, &origin));
        REQUIRE_OK(cpool_capture_begin(origin, f.pool, CPOOL_CAPTURE_RELAXED));
        REQUIRE_OK(cpool_event_record(f.e[0], origin));
        REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
        atomic_store(&w.stop, 0);
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, alloc_on_fork, &w) == 0);
        sched_yield();
        cpool_stream_destroy(origin); /* ends the capture: X is no fork any more */
        atomic_store(&w.stop, 1);
        pthread_join(th, NULL);
        CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
    }
    CHECK_OK(cpool_stream_synchronize(f.x));
}

/* ---- replays ---------------------------------------------------------------- */

enum { RN = 4096, RHEAD = 64 };
typedef struct replay_bufs {
    ms_fixture *f;
    unsigned char *p, *q1, *q2, *r; /* r: 2 * RN */
} replay_bufs;

/* O fills P's head, forks X and Y; each copies P and overwrites a part of
 * its copy; both join, then O gathers the copies into R. */
static cpool_status replay_step(cpool_stream *o, void *arg) {
    replay_bufs *b = (replay_bufs *)arg;
    ms_fixture *f = b->f;
    cpool_status st;
#define STEP_TRY(call) \
    if ((st = (call)) != CPOOL_OK) return st
    STEP_TRY(cpool_memset_async(o, b->p, 0xee, RHEAD));
    STEP_TRY(cpool_event_record(f->e[0], o));
    STEP_TRY(cpool_stream_wait_event(f->x, f->e[0]));
    STEP_TRY(cpool_stream_wait_event(f->y, f->e[0]));
    STEP_TRY(cpool_memcpy_async(f->x, b->q1, b->p, RN));
    STEP_TRY(cpool_memset_async(f->x, b->q1 + RN / 2, 0xa1, RN / 4));
    STEP_TRY(cpool_memcpy_async(f->y, b->q2, b->p, RN));
    STEP_TRY(cpool_memset_async(f->y, b->q2, 0xb2, 16));
    STEP_TRY(link_streams(f->e[1], f->x, o));
    STEP_TRY(link_streams(f->e[2], f->y, o));
    STEP_TRY(cpool_memcpy_async(o, b->r, b->q1, RN));
    STEP_TRY(cpool_memcpy_async(o, b->r + RN, b->q2, RN));
#undef STEP_TRY
    return CPOOL_OK;
}

static void fill_input(unsigned char *in, int k) {
    for (int i = 0; i < RN; i++) in[i] = (unsigned char)(i * 7 + k * 13 + 1);
}

/* R as replay_step computes it from input `in`. */
static void model_step(const unsigned char *in, unsigned char *r) {
    memcpy(r, in, RN);
    memset(r, 0xee, RHEAD);
    memset(r + RN / 2, 0xa1, RN / 4);
    memcpy(r + RN, in, RN);
    memset(r + RN, 0xee, RHEAD);
    memset(r + RN, 0xb2, 16);
}

static void check_same_(const unsigned char *got, const unsigned char *want, size_t n, const char *what,
                        const char *file, int line) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            check_report_(file, line, "%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, got[i],
                          want[i]);
            return;
        }
    }
}
#define CHECK_SAME(got, want, n) check_same_((got), (want), (n), #got, __FILE__, __LINE__)

static void replays_match_eager_across_branches(cpool_device *dev) {
    static ms_fixture f;
    static replay_bufs b;
    static unsigned char in[RN], model[2 * RN], eager[2 * RN], replay[2 * RN];
    cpool_graph *g = NULL;
    REQUIRE(ms_open(dev, &f));
    b.f = &f;
    REQUIRE(plain_block(&f, RN, (void **)&b.p));
    REQUIRE(plain_block(&f, RN, (void **)&b.q1));
    REQUIRE(plain_block(&f, RN, (void **)&b.q2));
    REQUIRE(plain_block(&f, 2 * RN, (void **)&b.r));
    /* The eager step agrees with the model before anything is captured. */
    fill_input(in, 99);
    model_step(in, model);
    CHECK_OK(cpool_memcpy_async(f.o, b.p, in, RN));
    REQUIRE_OK(replay_step(f.o, &b));
    REQUIRE_OK(read_back(f.o, eager, b.r, 2 * RN));
    CHECK_SAME(eager, model, 2 * RN);
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(replay_step(f.o, &b));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    for (int k = 0; k < 5; k++) {
        fill_input(in, k);
        model_step(in, model);
        /* Eagerly: the same step on the same streams, outside capture. */
        CHECK_OK(cpool_memcpy_async(f.o, b.p, in, RN));
        CHECK_OK(replay_step(f.o, &b));
        CHECK_OK(read_back(f.o, eager, b.r, 2 * RN));
        CHECK_SAME(eager, model, 2 * RN);
        /* Replayed, from cleared intermediates and a new input. */
        CHECK_OK(cpool_memset_async(f.o, b.q1, 0, RN));
        CHECK_OK(cpool_memset_async(f.o, b.q2, 0, RN));
        CHECK_OK(cpool_memset_async(f.o, b.r, 0, 2 * RN));
        CHECK_OK(cpool_memcpy_async(f.o, b.p, in, RN));
        CHECK_OK(cpool_graph_launch(g, f.o));
        CHECK_OK(read_back(f.o, replay, b.r, 2 * RN));
        CHECK_SAME(replay, eager, 2 * RN);
    }
    CHECK_EQ(cpool_graph_replays(g), 5);
}

/* Each branch's callback raises its own flag, then waits for the other's:
 * both see the other's only if the branches run at the same time, whatever
 * the order of their start. */
typedef struct meet {
    int *mine;
    const int *other;
    int saw;
} meet;
static void cb_meet(void *arg) {
    meet *m = (meet *)arg;
    astore(m->mine, 1);
    astore(&m->saw, wait_for_int(m->other, 1, 2000));
}

static void branches_replay_concurrently(cpool_device *dev) {
    static ms_fixture f;
    static int flag_x, flag_y;
    static meet mx, my;
    cpool_graph *g = NULL;
    /* CUDA may run the host nodes of one graph one after another on its
     * callback thread; the host backend runs one worker per branch. */
    if (cpool_device_backend(dev) != CPOOL_BACKEND_HOST) return;
    REQUIRE(ms_open(dev, &f));
    mx = (meet){&flag_x, &flag_y, 0};
    my = (meet){&flag_y, &flag_x, 0};
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_event_record(f.e[0], f.o));
    REQUIRE_OK(cpool_stream_wait_event(f.x, f.e[0]));
    REQUIRE_OK(cpool_stream_wait_event(f.y, f.e[0]));
    CHECK_OK(cpool_launch_host(f.x, cb_meet, &mx));
    CHECK_OK(cpool_launch_host(f.y, cb_meet, &my));
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(link_streams(f.e[2], f.y, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    for (int r = 0; r < 2; r++) {
        astore(&flag_x, 0);
        astore(&flag_y, 0);
        astore(&mx.saw, -1);
        astore(&my.saw, -1);
        CHECK_OK(cpool_graph_launch(g, f.o));
        CHECK_OK(cpool_stream_synchronize(f.o));
        CHECK_EQ(aload(&mx.saw), 1);
        CHECK_EQ(aload(&my.saw), 1);
    }
}

/* ---- threads ------------------------------------------------------------------ */

enum { TROUNDS = 32, TCHUNK = 4096 };
typedef struct thread_branch {
    ms_fixture *f;
    cpool_stream *s;
    unsigned char *out; /* TROUNDS * TCHUNK */
    int base;           /* the fill of round i is base + i */
    int calls;
} thread_branch;

/* Rounds of alloc, fill, copy out, free and a callback on one stream. */
static void *branch_rounds(void *arg) {
    thread_branch *t = (thread_branch *)arg;
    for (int i = 0; i < TROUNDS; i++) {
        void *tmp = NULL;
        if (!CHECK_OK(cpool_alloc(t->f->pool, TCHUNK, t->s, &tmp))) break;
        CHECK_OK(cpool_memset_async(t->s, tmp, t->base + i, TCHUNK));
        CHECK_OK(cpool_memcpy_async(t->s, t->out + (size_t)i * TCHUNK, tmp, TCHUNK));
        CHECK_OK(cpool_launch_host(t->s, cb_inc, &t->calls));
        CHECK_OK(cpool_free(t->f->pool, tmp, t->s));
    }
    return NULL;
}

/* X is forked, then driven by its own thread while this one works on O. */
static void fork_driven_from_another_thread(cpool_device *dev) {
    static ms_fixture f;
    static thread_branch tx, to;
    cpool_graph *g = NULL;
    pthread_t th;
    REQUIRE(ms_open(dev, &f));
    tx = (thread_branch){&f, f.x, NULL, 0x40, 0};
    to = (thread_branch){&f, f.o, NULL, 0x80, 0};
    REQUIRE(plain_block(&f, TROUNDS * TCHUNK, (void **)&tx.out));
    REQUIRE(plain_block(&f, TROUNDS * TCHUNK, (void **)&to.out));
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_RELAXED));
    REQUIRE_OK(link_streams(f.e[0], f.o, f.x));
    REQUIRE(pthread_create(&th, NULL, branch_rounds, &tx) == 0);
    branch_rounds(&to);
    pthread_join(th, NULL);
    REQUIRE_OK(link_streams(f.e[1], f.x, f.o));
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    check_defer(release_graph_, g);
    CHECK_EQ(aload(&tx.calls), 0);
    CHECK_EQ(aload(&to.calls), 0);
    CHECK_OK(cpool_graph_launch(g, f.o));
    CHECK_OK(cpool_stream_synchronize(f.o));
    CHECK_EQ(aload(&tx.calls), TROUNDS);
    CHECK_EQ(aload(&to.calls), TROUNDS);
    for (int i = 0; i < TROUNDS; i++) {
        CHECK_BYTES(f.o, tx.out + (size_t)i * TCHUNK, TCHUNK, 0x40 + i);
        CHECK_BYTES(f.o, to.out + (size_t)i * TCHUNK, TCHUNK, 0x80 + i);
    }
}

/* A fork, and allocations and frees on the fork, from another thread while
 * this one ends the capture (a program that races its own capture's end):
 * never a crash or a leak; each call either lands in the capture or finds
 * it ended; afterwards both streams are out of capture and usable. */
typedef struct end_racer {
    ms_fixture *f;
    cpool_event *e;
    int go, forked;
} end_racer;

static void *race_the_end(void *arg) {
    end_racer *r = (end_racer *)arg;
    while (!aload(&r->go)) {
    }
    cpool_status st = cpool_stream_wait_event(r->f->x, r->e);
    if (st != CPOOL_OK && st != CPOOL_ERR_INVALID_ARGUMENT)
        check_report_(__FILE__, __LINE__, "a fork racing the end returned %d", (int)st);
    if (st == CPOOL_OK) astore(&r->forked, 1);
    for (int i = 0; i < 8; i++) {
        void *p = NULL;
        if (cpool_alloc(r->f->pool, 4096 << (i % 4), r->f->x, &p) == CPOOL_OK) cpool_free(r->f->pool, p, r->f->x);
    }
    return NULL;
}

static void fork_racing_the_end(cpool_device *dev) {
    static ms_fixture f;
    static end_racer r;
    REQUIRE(ms_open(dev, &f));
    for (int round = 0; round < 60; round++) {
        cpool_graph *g = NULL;
        pthread_t th;
        r = (end_racer){&f, f.e[0], 0, 0};
        REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_RELAXED));
        REQUIRE_OK(cpool_event_record(f.e[0], f.o));
        REQUIRE(pthread_create(&th, NULL, race_the_end, &r) == 0);
        astore(&r.go, 1);
        cpool_status st = cpool_capture_end(f.o, &g);
        pthread_join(th, NULL);
        /* Ended with the fork's allocations in it, or without the fork, or
         * broken by work the fork added unjoined: never anything else. */
        if (st != CPOOL_OK && st != CPOOL_ERR_CAPTURE_INVALIDATED)
            check_report_(__FILE__, __LINE__, "round %d: the end returned %d", round, (int)st);
        cpool_graph_release(g);
        CHECK_EQ(state_of(f.o), CPOOL_CAPTURE_NONE);
        CHECK_EQ(state_of(f.x), CPOOL_CAPTURE_NONE);
        CHECK_OK(cpool_stream_synchronize(f.x));
        CHECK_OK(cpool_stream_synchronize(f.o));
    }
    cpool_pool_stats st = stats_of(f.pool);
    CHECK_EQ(st.allocated_bytes, 0);
}

/* Graphed calls whose body forks a stream: scratch on the fork (allocated
 * first), an output on the origin. Each capture's scratch lies in pages
 * shared with the other graph, its output in pages of its own: the graphs
 * replay in any order, never refused, outputs intact. */
typedef struct fork_body {
    ms_fixture *f;
    unsigned char value;
    void *out, *eager_out; /* the capture's output, the eager run's */
} fork_body;

static cpool_status forked_graphed_body(cpool_stream *o, void *ctx) {
    fork_body *b = (fork_body *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_event_record(b->f->e[0], o);
    if (st == CPOOL_OK) st = cpool_stream_wait_event(b->f->x, b->f->e[0]);
    if (st == CPOOL_OK) st = cpool_alloc(b->f->pool, MIB, b->f->x, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(b->f->x, scratch, b->value, MIB);
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    if (st == CPOOL_OK) st = cpool_capture_status(o, &state);
    if (st == CPOOL_OK) st = cpool_alloc(b->f->pool, 4096, o, state == CPOOL_CAPTURE_NONE ? &b->eager_out : &b->out);
    void *out = state == CPOOL_CAPTURE_NONE ? b->eager_out : b->out;
    if (st == CPOOL_OK) st = cpool_event_record(b->f->e[1], b->f->x);
    if (st == CPOOL_OK) st = cpool_stream_wait_event(o, b->f->e[1]);
    if (st == CPOOL_OK) st = cpool_memcpy_async(o, out, scratch, 4096);
    if (scratch) {
        cpool_status freed = cpool_free(b->f->pool, scratch, b->f->x);
        if (st == CPOOL_OK) st = freed;
    }
    return st;
}

static void graphed_calls_with_forks_place_outputs_apart(cpool_device *dev) {
    static ms_fixture f;
    static fork_body b1, b2;
    cpool_graph *g1 = NULL, *g2 = NULL;
    REQUIRE(ms_open(dev, &f));
    b1 = (fork_body){&f, 0x11, NULL, NULL};
    b2 = (fork_body){&f, 0x22, NULL, NULL};
    REQUIRE_OK(cpool_graphed_call(f.o, f.pool, CPOOL_CAPTURE_GLOBAL, 1, forked_graphed_body, &b1, &g1));
    check_defer(release_graph_, g1);
    REQUIRE_OK(cpool_graphed_call(f.o, f.pool, CPOOL_CAPTURE_GLOBAL, 1, forked_graphed_body, &b2, &g2));
    check_defer(release_graph_, g2);
    /* The scratch is shared: one 2 MiB page holds either graph's 1 MiB
     * scratch. The 4 KiB outputs (small requests under capture) come from
     * the packed region, one page for both. So the bound is the largest
     * scratch in pages plus one packed page. */
    CHECK_LE(stats_of(f.pool).graph_reserved_bytes, 2 * MIB + 2 * MIB);
    for (int round = 0; round < 3; round++) {
        CHECK_OK(cpool_graph_launch(g2, f.o));
        CHECK_OK(cpool_graph_launch(g1, f.o));
        CHECK_BYTES(f.o, b1.out, 4096, 0x11);
        CHECK_BYTES(f.o, b2.out, 4096, 0x22);
        CHECK_OK(cpool_graph_launch(g1, f.o));
        CHECK_OK(cpool_graph_launch(g2, f.o));
        CHECK_BYTES(f.o, b1.out, 4096, 0x11);
        CHECK_BYTES(f.o, b2.out, 4096, 0x22);
    }
    CHECK_OK(cpool_stream_synchronize(f.o));
    CHECK_OK(cpool_free(f.pool, b1.out, f.o));
    CHECK_OK(cpool_free(f.pool, b2.out, f.o));
    CHECK_OK(cpool_free(f.pool, b1.eager_out, f.o));
    CHECK_OK(cpool_free(f.pool, b2.eager_out, f.o));
}

/* Four branches allocate at once, each keeping its last 4 blocks of 4 KiB
 * to 4 MiB (log-uniform) live, round-robin, as bench/multistream_memory_bench
 * does. Each branch grows address space of its own, so the graph holds
 * about what four streams with allocators of their own would: at most 1.4x
 * the branches' peaks summed (branches that took turns in one span held
 * 1.77x). The same capture again, after the graph is gone, reuses the
 * arena's spans and holds no more. */
static size_t branch_block_size(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    size_t octave = (size_t)4096 << (*x % 10);
    return octave + (size_t)(*x >> 8) % octave;
}

static uint64_t capture_branches_round_robin(ms_fixture *f, int allocs) {
    enum { BRANCHES = 4, WINDOW = 4 };
    cpool_stream *s[BRANCHES] = {f->o, f->x, f->y, f->z};
    void *live[BRANCHES][WINDOW];
    size_t bytes[BRANCHES][WINDOW];
    uint64_t sum[BRANCHES] = {0}, peak[BRANCHES] = {0}, x = 0x9e3779b97f4a7c15ull, peaks = 0;
    int count[BRANCHES] = {0};
    cpool_graph *g = NULL;
    memset(live, 0, sizeof live);
    if (!CHECK_OK(cpool_capture_begin(f->o, f->pool, CPOOL_CAPTURE_GLOBAL))) return 0;
    cpool_status st = cpool_event_record(f->e[0], f->o);
    for (int b = 1; b < BRANCHES && st == CPOOL_OK; b++) st = cpool_stream_wait_event(s[b], f->e[0]);
    for (int i = 0; i < allocs && st == CPOOL_OK; i++) {
        int b = i % BRANCHES, slot = count[b] % WINDOW;
        if (count[b] >= WINDOW) {
            st = cpool_free(f->pool, live[b][slot], s[b]);
            sum[b] -= bytes[b][slot];
        }
        bytes[b][slot] = branch_block_size(&x);
        if (st == CPOOL_OK) st = cpool_alloc(f->pool, bytes[b][slot], s[b], &live[b][slot]);
        if (st == CPOOL_OK) st = cpool_memset_async(s[b], live[b][slot], (int)(1 + i % 255), bytes[b][slot]);
        sum[b] += bytes[b][slot];
        if (sum[b] > peak[b]) peak[b] = sum[b];
        count[b]++;
    }
    for (int b = 0; b < BRANCHES; b++)
        for (int k = 0; k < WINDOW && k < count[b] && st == CPOOL_OK; k++) st = cpool_free(f->pool, live[b][k], s[b]);
    for (int b = 1; b < BRANCHES && st == CPOOL_OK; b++) st = link_streams(f->e[b], s[b], f->o);
    CHECK_OK(st);
    cpool_status ended = cpool_capture_end(f->o, &g);
    if (!CHECK_OK(ended) || st != CPOOL_OK) {
        cpool_graph_release(g);
        return 0;
    }
    CHECK_OK(cpool_graph_launch(g, f->o));
    CHECK_OK(cpool_stream_synchronize(f->o));
    cpool_graph_release(g);
    for (int b = 0; b < BRANCHES; b++) peaks += peak[b];
    return peaks;
}

static void branches_grow_spans_apart(cpool_device *dev) {
    static ms_fixture f;
    REQUIRE(ms_open(dev, &f));
    uint64_t peaks = capture_branches_round_robin(&f, 600);
    REQUIRE(peaks != 0);
    cpool_pool_stats first = stats_of(f.pool);
    CHECK_LE(first.graph_reserved_bytes, peaks * 14 / 10);
    CHECK_GE(first.graph_reserved_bytes, peaks);
    REQUIRE(capture_branches_round_robin(&f, 600) == peaks);
    CHECK_EQ(stats_of(f.pool).graph_reserved_bytes, first.graph_reserved_bytes);
}

/* More forks than a capture record keeps inline: each of 6 side streams
 * writes a block of its own from the pool; all join back and the replay
 * writes every block. */
static void many_forks_join(cpool_device *dev) {
    enum { SIDES = 6, N = 4096 };
    static ms_fixture f;
    cpool_stream *side[SIDES] = {NULL};
    cpool_event *fork = NULL, *join[SIDES] = {NULL};
    void *buf[SIDES] = {NULL};
    cpool_graph *g = NULL;
    int i;
    REQUIRE(ms_open(dev, &f));
    REQUIRE_OK(cpool_event_create(dev, &fork));
    for (i = 0; i < SIDES; i++) {
        REQUIRE_OK(cpool_stream_create(dev, &side[i]));
        REQUIRE_OK(cpool_event_create(dev, &join[i]));
        REQUIRE(plain_block(&f, N, &buf[i]));
    }
    REQUIRE_OK(cpool_capture_begin(f.o, f.pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_event_record(fork, f.o));
    for (i = 0; i < SIDES; i++) {
        void *scratch = NULL;
        CHECK_OK(cpool_stream_wait_event(side[i], fork));
        CHECK_EQ(state_of(side[i]), CPOOL_CAPTURE_ACTIVE);
        CHECK_OK(cpool_alloc(f.pool, N, side[i], &scratch));
        CHECK_OK(cpool_memset_async(side[i], scratch, 0x30 + i, N));
        CHECK_OK(cpool_memcpy_async(side[i], buf[i], scratch, N));
        CHECK_OK(cpool_free(f.pool, scratch, side[i]));
        CHECK_OK(cpool_event_record(join[i], side[i]));
        CHECK_OK(cpool_stream_wait_event(f.o, join[i]));
    }
    REQUIRE_OK(cpool_capture_end(f.o, &g));
    for (i = 0; i < SIDES; i++) CHECK_EQ(state_of(side[i]), CPOOL_CAPTURE_NONE);
    CHECK_OK(cpool_graph_launch(g, f.o));
    for (i = 0; i < SIDES; i++) CHECK_BYTES(f.o, buf[i], N, 0x30 + i);
    cpool_graph_release(g);
    for (i = 0; i < SIDES; i++) {
        cpool_event_destroy(join[i]);
        cpool_stream_destroy(side[i]);
    }
    cpool_event_destroy(fork);
}

static const check_case cases[] = {
    CHECK_CASE(fork_joins_the_capture),
    CHECK_CASE(many_forks_join),
    CHECK_CASE(fork_racing_the_end),
    CHECK_CASE(graphed_calls_with_forks_place_outputs_apart),
    CHECK_CASE(fork_allocates_graph_memory),
    CHECK_CASE(fork_inside_scoped_capture),
    CHECK_CASE(forks_of_forks_join_through_a_fork),
    CHECK_CASE(end_on_a_fork_is_refused),
    CHECK_CASE(unjoined_fork_invalidates_end),
    CHECK_CASE(work_after_join_invalidates_end),
    CHECK_CASE(destroyed_fork_invalidates_end),
    CHECK_CASE(wait_across_two_captures_refused),
    CHECK_CASE(capture_waits_for_outside_record_refused),
    CHECK_CASE(null_event_or_stream_refused),
    CHECK_CASE(captured_record_cannot_be_queried),
    CHECK_CASE(never_recorded_event_forks_nothing),
    CHECK_CASE(begin_on_a_fork_refused),
    CHECK_CASE(branch_free_not_handed_to_sibling),
    CHECK_CASE(origin_free_after_fork_not_handed_to_branch),
    CHECK_CASE(free_before_fork_may_serve_branch),
    CHECK_CASE(record_before_free_forks_branch_apart),
    CHECK_CASE(join_hands_over_only_what_preceded_the_record),
    CHECK_CASE(plain_block_freed_on_a_branch_stays_its),
    CHECK_CASE(waiting_block_follows_joins_by_their_records),
    CHECK_CASE(rerecord_racing_a_join),
    CHECK_CASE(origin_destroyed_while_a_fork_allocates),
    CHECK_CASE(replays_match_eager_across_branches),
    CHECK_CASE(branches_replay_concurrently),
    CHECK_CASE(fork_driven_from_another_thread),
    CHECK_CASE(branches_grow_spans_apart),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
