/*
 * Fault injection sweep (built when the library is configured with
 * CPOOL_FAULT_INJECTION=ON; links the static library for its hooks).
 *
 * Each scenario is run once to count the resource acquisitions it makes
 * (host memory, segments, events, streams, worker threads), then once for
 * every N in 1..count with the N-th acquisition failing. Every call must
 * return CPOOL_OK or a clear failure status; afterwards, with faults off,
 * the scenario releases everything and the checks are: the pool invariants
 * hold, every object whose record succeeded was dropped exactly once (in
 * registration order) and no other was, and (under AddressSanitizer in CI)
 * nothing leaked. The binary prints how many points it swept.
 */
#include "check.h"
#include "internal.h" /* the fault hooks and cpool__pool_check */
#include "helpers.h"

enum { OBJECTS = 4 };

typedef struct world {
    cpool_device *dev;
    drop_log log;
    tracked obj[OBJECTS];
    int recorded[OBJECTS]; /* whose record succeeded */
    int failures;          /* calls that failed under the fault */
    uint64_t acquisitions; /* counted while the scenario ran */
} world;

/* Launches refused because pages of the graph's memory were lost. */
static uint64_t lost_refusals;

/* Whether a failed call's error text starts with "cpool_xxx: ", its own
 * function's name; a call with a capture body may fail with the body's
 * status, whose text names the call in the body that failed. */
static int names_a_function(const char *msg, const char *call) {
    size_t n = strcspn(call, "(");
    if (strncmp(msg, call, n) == 0 && strncmp(msg + n, ": ", 2) == 0) return 1;
    if (!strstr(call, "body")) return 0;
    size_t m = strspn(msg, "abcdefghijklmnopqrstuvwxyz_");
    return strncmp(msg, "cpool_", 6) == 0 && strncmp(msg + m, ": ", 2) == 0;
}

/* Accepts CPOOL_OK; any other status must be a failure to get a resource. */
static int ok_or_fault_(world *w, cpool_status st, const char *call, int line) {
    if (st == CPOOL_OK) return 1;
    w->failures++;
    if (st != CPOOL_ERR_OUT_OF_MEMORY && st != CPOOL_ERR_BACKEND)
        check_report_(__FILE__, line, "%s returned %s under a fault (%s)", call, cpool_status_string(st),
                      cpool_last_error());
    if (cpool_last_error()[0] == 0) check_report_(__FILE__, line, "%s failed with no error text", call);
    if (st == CPOOL_ERR_BACKEND && strstr(cpool_last_error(), "memory were lost")) lost_refusals++;
    if (!names_a_function(cpool_last_error(), call))
        check_report_(__FILE__, line, "%s failed, but its error does not start with the function's name: \"%s\"",
                      call, cpool_last_error());
    return 0;
}
#define TRY(w, call) ok_or_fault_((w), (call), #call, __LINE__)

static void record_objects(world *w, cpool_pool *pool) {
    for (int i = 0; i < OBJECTS; i++) w->recorded[i] = TRY(w, cpool_pool_record(pool, &w->obj[i], tracked_drop, NULL));
}

typedef struct body_ctx {
    world *w;
    cpool_pool *pool;
    int counter;
} body_ctx;

/* Suspends the pool and resumes it: a failed resume leaves it suspended,
 * and one of the next (the faults armed are few) serves. */
static void suspend_resume(world *w, cpool_pool *pool, cpool_suspend_mode mode) {
    if (!TRY(w, cpool_pool_suspend(pool, mode))) return;
    for (int tries = 0; tries < 3 && !TRY(w, cpool_pool_resume(pool)); tries++) continue;
}

static cpool_status body_alloc_work(cpool_stream *s, void *arg) {
    body_ctx *c = (body_ctx *)arg;
    void *a = NULL, *b = NULL;
    cpool_status st = cpool_alloc(c->pool, 3000, s, &a);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 3u << 20, s, &b);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b, 1, 4096);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_inc, &c->counter);
    if (b && st == CPOOL_OK) st = cpool_free(c->pool, b, s);
    if (a && st == CPOOL_OK) st = cpool_free(c->pool, a, s);
    return st;
}

/* Pool life: options, records, allocations, stats, trim, clear, release. */
static void scenario_pool_life(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_pool_options opts = {.struct_size = sizeof opts, .reserve_bytes = 4u << 20, .max_reserved_bytes = 64u << 20};
    void *p[3] = {NULL, NULL, NULL};
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, &opts, &pool))) {
        record_objects(w, pool);
        TRY(w, cpool_alloc(pool, 100, s, &p[0]));
        TRY(w, cpool_alloc(pool, 5u << 20, s, &p[1]));
        TRY(w, cpool_alloc(pool, 12u << 20, s, &p[2]));
        for (int i = 0; i < 3; i++)
            if (p[i]) TRY(w, cpool_free(pool, p[i], s));
        TRY(w, cpool_pool_trim(pool));
        cpool_pool_clear_buffers(pool);
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* Capture with allocations, launches, upload, update, release while running. */
static void scenario_capture_launch(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    body_ctx c = {w, NULL, 0}; /* outlives the stream's work */
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        c.pool = pool;
        record_objects(w, pool);
        if (TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_alloc_work, &c, &g))) {
            TRY(w, cpool_graph_upload(g, s));
            TRY(w, cpool_graph_launch(g, s));
            TRY(w, cpool_graph_update(g, s, body_alloc_work, &c));
            TRY(w, cpool_graph_launch(g, s));
        }
        cpool__pool_check(pool);
        /* Release both while the launches may still run. */
        cpool_pool_release(pool);
        cpool_graph_release(g);
    }
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
    cpool_stream_destroy(s);
}

/* Clear with a stale graph, parameters, the last release in a callback. */
static void release_pool_in_callback(void *arg) { cpool_pool_release((cpool_pool *)arg); }

static void scenario_clear_params_callback(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    cpool_param *param = NULL;
    body_ctx c = {w, NULL, 0}; /* outlives the stream's work */
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        c.pool = pool;
        record_objects(w, pool);
        if (TRY(w, cpool_param_create(pool, 64, &param))) {
            int v = 3;
            TRY(w, cpool_param_set(param, &v, sizeof v, s));
        }
        if (TRY(w, cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, body_alloc_work, &c, &g))) {
            cpool_pool_clear_buffers(pool);
            CHECK_STATUS(cpool_graph_launch(g, s), CPOOL_ERR_STALE_GRAPH);
            cpool_graph_release(g);
        }
        cpool__pool_check(pool);
        /* The last reference goes inside stream work: the teardown is deferred. */
        if (!TRY(w, cpool_launch_host(s, release_pool_in_callback, pool))) cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* Growable segments: growth in place past a free block, pages given back
 * inside a segment and mapped again, a growth past the peak that gives
 * free pages back first, a graph's scratch kept across all of it. */
static void scenario_growable(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    body_ctx c = {w, NULL, 0};
    void *p[3] = {NULL, NULL, NULL};
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        c.pool = pool;
        record_objects(w, pool);
        TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_alloc_work, &c, &g));
        TRY(w, cpool_alloc(pool, 4u << 20, s, &p[0]));
        TRY(w, cpool_alloc(pool, 8u << 20, s, &p[1]));
        TRY(w, cpool_alloc(pool, 4u << 20, s, &p[2]));
        if (p[1]) TRY(w, cpool_free(pool, p[1], s));
        p[1] = NULL;
        TRY(w, cpool_pool_trim(pool));
        TRY(w, cpool_alloc(pool, 6u << 20, s, &p[1]));
        if (p[0]) TRY(w, cpool_free(pool, p[0], s));
        p[0] = NULL;
        TRY(w, cpool_stream_synchronize(s));
        TRY(w, cpool_alloc(pool, 24u << 20, s, &p[0]));
        if (g) TRY(w, cpool_graph_launch(g, s));
        for (int i = 0; i < 3; i++)
            if (p[i]) TRY(w, cpool_free(pool, p[i], s));
        cpool__pool_check(pool);
        cpool_graph_release(g);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* Graph pages: two captures into one pool whose scratch shares pages, each
 * keeping a 1 MiB output made with cpool_alloc right after its scratch (a
 * page the other graph maps too, so the end makes one of the graph's own)
 * and a small one (packed); launches, an output freed while its graph
 * lives, releases, a trim. Whatever fails, the capture's end leaves the
 * stream usable and the pool consistent. */
typedef struct pages_ctx {
    cpool_pool *pool;
    void *out, *small;
} pages_ctx;

static cpool_status body_outputs(cpool_stream *s, void *arg) {
    pages_ctx *c = (pages_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, 3u << 20, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 7, 3u << 20);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 1u << 20, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, 1u << 20);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 4096, s, &c->small);
    if (st == CPOOL_OK) st = cpool_memset_async(s, c->small, 9, 4096);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

static void scenario_graph_pages(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[2] = {NULL, NULL};
    pages_ctx c[2];
    memset(c, 0, sizeof c);
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i < 2; i++) {
            c[i].pool = pool;
            if (!TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_outputs, &c[i], &g[i]))) {
                /* A failed capture's blocks are the caller's to free. */
                if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
                if (c[i].small) TRY(w, cpool_free(pool, c[i].small, s));
                c[i].out = c[i].small = NULL;
            }
        }
        for (int i = 0; i < 2; i++)
            if (g[i]) TRY(w, cpool_graph_launch(g[i], s));
        if (c[0].small) TRY(w, cpool_free(pool, c[0].small, s));
        c[0].small = NULL;
        for (int i = 1; i >= 0; i--)
            if (g[i]) TRY(w, cpool_graph_launch(g[i], s));
        TRY(w, cpool_stream_synchronize(s));
        cpool__pool_check(pool);
        for (int i = 0; i < 2; i++) cpool_graph_release(g[i]);
        TRY(w, cpool_pool_trim(pool));
        for (int i = 0; i < 2; i++) {
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
            if (c[i].small) TRY(w, cpool_free(pool, c[i].small, s));
        }
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
    cpool_stream_destroy(s);
}

/* Pools attached to captures begun outside the library (through the
 * backend's table, as the CUDA runtime would be called): two graphs
 * with scratch, a large and a small output each, detached into holds,
 * ended and launched by their owner, then released. A failed attach or
 * detach leaves plain blocks for the caller to free, and an owner whose
 * detach failed never launches its graph. */
typedef struct foreign_graph {
    cpool__bevent *fence;
    cpool__bgraph *graph;
    cpool_graph *hold;
    int begun;
} foreign_graph;

static void scenario_attach(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    foreign_graph fg[2];
    pages_ctx c[2];
    memset(fg, 0, sizeof fg);
    memset(c, 0, sizeof c);
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    cpool_stream *so = cpool__handle_object(s, CPOOL__HANDLE_STREAM);
    const cpool__backend *be = so->dev->be;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i < 2; i++) {
            c[i].pool = pool;
            /* The owner's begin: its failures are not the library's. */
            if (be->event_create(so->dev->impl, &fg[i].fence) != CPOOL_OK) continue;
            if (be->capture_begin(so->impl, CPOOL_CAPTURE_GLOBAL, fg[i].fence) != CPOOL_OK) continue;
            fg[i].begun = 1;
            if (TRY(w, cpool_capture_attach(s, pool))) {
                int ok = TRY(w, body_outputs(s, &c[i]));
                if (TRY(w, cpool_capture_detach(s, &fg[i].hold)) && ok) continue;
            }
            /* No hold, or a body that failed: the owner discards its
             * capture, and the blocks are the caller's. */
            if (be->capture_end(so->impl, false, &fg[i].graph) == CPOOL_OK) be->graph_destroy(fg[i].graph);
            fg[i].graph = NULL;
            fg[i].begun = 0;
            cpool_graph_release(fg[i].hold);
            fg[i].hold = NULL;
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
            if (c[i].small) TRY(w, cpool_free(pool, c[i].small, s));
            c[i].out = c[i].small = NULL;
        }
        for (int i = 0; i < 2; i++)
            if (fg[i].begun && be->capture_end(so->impl, true, &fg[i].graph) != CPOOL_OK) fg[i].graph = NULL;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 2; i++)
                if (fg[i].graph) (void)be->graph_launch(fg[i].graph, so->impl);
        TRY(w, cpool_stream_synchronize(s));
        cpool__pool_check(pool);
        for (int i = 0; i < 2; i++) {
            if (fg[i].graph) be->graph_destroy(fg[i].graph);
            cpool_graph_release(fg[i].hold);
        }
        TRY(w, cpool_pool_trim(pool));
        for (int i = 0; i < 2; i++) {
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
            if (c[i].small) TRY(w, cpool_free(pool, c[i].small, s));
        }
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    for (int i = 0; i < 2; i++)
        if (fg[i].fence) be->event_destroy(fg[i].fence);
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
    cpool_stream_destroy(s);
}

/* Tails: graphs whose scratch ends partway into its last page, each with
 * a 4 KiB output (packed): the last page borrows the packed page. The
 * second graph is released and its arena taken by a capture that fills
 * that page (the borrowed page goes back first), then a suspend, a resume
 * and a trim. At every failure the pool stays consistent. */
typedef struct tail_ctx {
    cpool_pool *pool;
    size_t scratch;
    void *out;
} tail_ctx;

static cpool_status body_tail(cpool_stream *s, void *arg) {
    tail_ctx *c = (tail_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 5, c->scratch);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 4096, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, 4096);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

static void scenario_tails(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[3] = {NULL, NULL, NULL};
    tail_ctx c[3] = {{NULL, 1u << 20, NULL}, {NULL, 3u << 20, NULL}, {NULL, 4u << 20, NULL}};
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i < 3; i++) {
            c[i].pool = pool;
            if (i == 2) { /* graph 1's arena, once its work is over */
                cpool_graph_release(g[1]);
                g[1] = NULL;
                if (c[1].out) TRY(w, cpool_free(pool, c[1].out, s));
                c[1].out = NULL;
                TRY(w, cpool_stream_synchronize(s));
            }
            if (!TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_tail, &c[i], &g[i]))) {
                if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
                c[i].out = NULL;
            }
            if (g[i]) TRY(w, cpool_graph_launch(g[i], s));
        }
        /* A failed resume leaves the pool suspended: the next one serves. */
        suspend_resume(w, pool, CPOOL_SUSPEND_KEEP_CONTENTS);
        for (int i = 0; i < 3; i++)
            if (g[i]) TRY(w, cpool_graph_launch(g[i], s));
        TRY(w, cpool_stream_synchronize(s));
        cpool__pool_check(pool);
        for (int i = 0; i < 3; i++) {
            cpool_graph_release(g[i]);
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
        }
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* A graph whose scratch is a run (pages made in one allocation) runs, held
 * at a gate, while a second graph is captured: the run cannot be split
 * under it, so the second maps pages of its own, and a trim once the
 * device is idle settles it onto the run's pages (splitting the run). At
 * every failure, in a capture, a split or the settling, the pool stays
 * consistent and both graphs replay. */
typedef struct run_gate {
    cpool_pool *pool;
    int open;
} run_gate;

static void cb_wait_open(void *arg) {
    run_gate *g = (run_gate *)arg;
    (void)wait_for_int(&g->open, 1, 5000);
}

static cpool_status body_gated_run(cpool_stream *s, void *arg) {
    run_gate *g = (run_gate *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(g->pool, 6u << 20, s, &scratch);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_wait_open, g);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 3, 6u << 20);
    if (scratch && st == CPOOL_OK) st = cpool_free(g->pool, scratch, s);
    return st;
}

static void scenario_runs_in_use(world *w) {
    cpool_stream *s = NULL, *t = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g0 = NULL, *g1 = NULL;
    pages_ctx c;
    memset(&c, 0, sizeof c);
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_stream_create(w->dev, &t)) && TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        run_gate gate = {pool, 0};
        c.pool = pool;
        TRY(w, cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_gated_run, &gate, &g0));
        if (g0) TRY(w, cpool_graph_launch(g0, s));
        if (!TRY(w, cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, body_outputs, &c, &g1))) {
            if (c.out) TRY(w, cpool_free(pool, c.out, t));
            if (c.small) TRY(w, cpool_free(pool, c.small, t));
            c.out = c.small = NULL;
        }
        astore(&gate.open, 1);
        TRY(w, cpool_stream_synchronize(s));
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        if (g1) TRY(w, cpool_graph_launch(g1, s));
        if (g0) TRY(w, cpool_graph_launch(g0, s));
        TRY(w, cpool_stream_synchronize(s));
        cpool__pool_check(pool);
        cpool_graph_release(g0);
        cpool_graph_release(g1);
        if (c.out) TRY(w, cpool_free(pool, c.out, s));
        if (c.small) TRY(w, cpool_free(pool, c.small, s));
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(t);
    cpool_stream_destroy(s);
}

/* Growth into a hole inside a segment whose new pages merge with a free
 * block before the request's start (served apart from it): at every
 * failure there, also of the live-block map's growth when the request is
 * the 129th live block, the pool stays consistent. Offsets are from the
 * span's start: A [0, 4M-512), D and E 4 MiB each after it; D's pages
 * [4M, 6M) go back, leaving 512 bytes before the hole and 2M-512 after it,
 * which a request of 4M-1024 joins with the hole. */
enum { SMALLS = 126 };
static void scenario_growable_split(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *a = NULL, *d = NULL, *e = NULL, *f = NULL, *small[SMALLS] = {NULL};
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i < SMALLS - 1; i++) TRY(w, cpool_alloc(pool, 512, s, &small[i]));
        TRY(w, cpool_alloc(pool, (4u << 20) - 512, s, &a));
        TRY(w, cpool_alloc(pool, 4u << 20, s, &d));
        TRY(w, cpool_alloc(pool, 4u << 20, s, &e));
        if (d) TRY(w, cpool_free(pool, d, s));
        TRY(w, cpool_stream_synchronize(s));
        TRY(w, cpool_pool_trim(pool));
        TRY(w, cpool_alloc(pool, 512, s, &small[SMALLS - 1]));
        TRY(w, cpool_alloc(pool, (4u << 20) - 1024, s, &f));
        cpool__pool_check(pool);
        void *all[3] = {a, e, f};
        for (int i = 0; i < 3; i++)
            if (all[i]) TRY(w, cpool_free(pool, all[i], s));
        for (int i = 0; i < SMALLS; i++)
            if (small[i]) TRY(w, cpool_free(pool, small[i], s));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* Every page a live block is on stays backed, holding its bytes, whatever
 * acquisition fails: graphs with outputs of every placement (packed, a
 * tail page, pages of their own, past a page), read back after each
 * launch, after a graph's arena is taken by a new capture (its pages
 * renumbered, its borrowed tail given back), after a trim, and after a
 * suspension that keeps contents. */
enum { LIVE_GRAPHS = 4 };
static const size_t live_out[LIVE_GRAPHS] = {4096, 1u << 20, (3u << 20) + 4096, 64u << 10};
static const size_t live_scratch[LIVE_GRAPHS] = {1u << 20, 3u << 20, 5u << 20, (2u << 20) + 8192};

typedef struct live_ctx {
    cpool_pool *pool;
    size_t out_bytes, scratch_bytes;
    unsigned char value;
    void *out;
} live_ctx;

static cpool_status body_live(cpool_stream *s, void *arg) {
    live_ctx *c = (live_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->out_bytes, s, &c->out);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, c->scratch_bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, (int)(c->value ^ 0xFF), c->scratch_bytes);
    if (st == CPOOL_OK) st = cpool_memset_async(s, c->out, c->value, c->out_bytes);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* Each output a launch wrote reads back whole (a page left unbacked would
 * fault here, or read zeros). */
static void check_live(world *w, cpool_stream *s, const live_ctx *c, const int *written, unsigned char *host) {
    for (int i = 0; i < LIVE_GRAPHS; i++) {
        if (!written[i] || !c[i].out) continue;
        if (!TRY(w, cpool_memcpy_async(s, host, c[i].out, c[i].out_bytes))) continue;
        if (!TRY(w, cpool_stream_synchronize(s))) continue;
        size_t bad = 0;
        while (bad < c[i].out_bytes && host[bad] == c[i].value) bad++;
        if (bad < c[i].out_bytes)
            check_report_(__FILE__, __LINE__, "output %d (%zu bytes) reads %u at byte %zu, not %u", i, c[i].out_bytes,
                          host[bad], bad, c[i].value);
    }
}

static void capture_live(world *w, cpool_stream *s, live_ctx *c, cpool_graph **g, int *written) {
    *written = 0;
    if (!TRY(w, cpool_capture(s, c->pool, CPOOL_CAPTURE_GLOBAL, body_live, c, g))) {
        if (c->out) TRY(w, cpool_free(c->pool, c->out, s)); /* a failed capture's blocks are the caller's */
        c->out = NULL;
        return;
    }
    *written = TRY(w, cpool_graph_launch(*g, s)) && TRY(w, cpool_stream_synchronize(s));
}

static void scenario_live_bytes(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[LIVE_GRAPHS] = {NULL};
    live_ctx c[LIVE_GRAPHS];
    int written[LIVE_GRAPHS] = {0};
    unsigned char *host = malloc((4u << 20) + 8192);
    if (!host || !TRY(w, cpool_stream_create(w->dev, &s))) {
        free(host);
        return;
    }
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i < LIVE_GRAPHS; i++) {
            c[i] = (live_ctx){pool, live_out[i], live_scratch[i], (unsigned char)(0x31 + 17 * i), NULL};
            capture_live(w, s, &c[i], &g[i], &written[i]);
            check_live(w, s, c, written, host);
        }
        /* Graph 1 goes; its arena, quiet, is taken by the next capture. */
        cpool_graph_release(g[1]);
        g[1] = NULL;
        if (c[1].out) TRY(w, cpool_free(pool, c[1].out, s));
        c[1].out = NULL;
        TRY(w, cpool_stream_synchronize(s));
        c[1].out_bytes = 8192;
        capture_live(w, s, &c[1], &g[1], &written[1]);
        check_live(w, s, c, written, host);
        TRY(w, cpool_pool_trim(pool));
        check_live(w, s, c, written, host);
        /* A failed resume leaves the pool suspended: the next one serves. */
        suspend_resume(w, pool, CPOOL_SUSPEND_KEEP_CONTENTS);
        check_live(w, s, c, written, host);
        TRY(w, cpool_stream_synchronize(s));
        cpool__pool_check(pool);
        for (int i = 0; i < LIVE_GRAPHS; i++) {
            cpool_graph_release(g[i]);
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
        }
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
    free(host);
}

typedef void (*scenario_fn)(world *);

/* Graphs with nested scratch (4 to 12 MiB, ascending), each keeping a
 * 64 KiB output: they share the pages of the smallest, so a resume maps
 * their numbers as runs that several arenas map. Suspended and resumed,
 * launched (every output checked), one released and a new graph captured
 * (it may take that arena, whose runs then become pages alone),
 * launched, released, trimmed. */
enum { NESTED = 3 };
typedef struct nested_ctx {
    cpool_pool *pool;
    size_t scratch;
    int pattern;
    void *out;
} nested_ctx;

static cpool_status body_nested(cpool_stream *s, void *arg) {
    nested_ctx *c = (nested_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->pattern, c->scratch);
    if (st == CPOOL_OK) st = cpool_alloc_output(c->pool, 64u << 10, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, (char *)scratch + c->scratch - 4096, 4096);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* Reads `bytes` at `from` back through `host` and reports the first that
 * is not `value` (a page left unbacked would fault here, or read zeros). */
static void expect_bytes(world *w, cpool_stream *s, const void *from, unsigned char *host, size_t bytes, int value,
                         const char *what, int i) {
    if (!TRY(w, cpool_memcpy_async(s, host, from, bytes)) || !TRY(w, cpool_stream_synchronize(s))) return;
    size_t bad = 0;
    while (bad < bytes && host[bad] == (unsigned char)value) bad++;
    if (bad < bytes)
        check_report_(__FILE__, __LINE__, "%s %d reads %u at byte %zu, not %u", what, i, host[bad], bad,
                      (unsigned)(unsigned char)value);
}

/* A KEEP pool whose live bytes come back beside their mapping (residency.c
 * queues each run's copy once the run is mapped): a 40 MiB block, each MiB
 * of it a value of its own, so that a copy into the wrong place shows,
 * between smaller blocks. Suspended and resumed (a failed resume leaves it
 * suspended, the next serves), every byte read back. */
enum { KEPT_MIB = 40 };
static const size_t kept_small[] = {100u << 10, 3u << 20};

static void scenario_kept_by_the_mib(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    void *big = NULL, *small[2] = {NULL, NULL};
    unsigned char *host = malloc(3u << 20);
    if (!host || !TRY(w, cpool_stream_create(w->dev, &s))) {
        free(host);
        return;
    }
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        bool filled = TRY(w, cpool_alloc(pool, kept_small[0], s, &small[0])) &&
                      TRY(w, cpool_alloc(pool, (size_t)KEPT_MIB << 20, s, &big)) &&
                      TRY(w, cpool_alloc(pool, kept_small[1], s, &small[1]));
        for (int i = 0; filled && i < KEPT_MIB; i++)
            filled = TRY(w, cpool_memset_async(s, (char *)big + ((size_t)i << 20), 0x40 + i, 1u << 20));
        for (int i = 0; filled && i < 2; i++)
            filled = TRY(w, cpool_memset_async(s, small[i], 0x20 + i, kept_small[i]));
        if (filled && TRY(w, cpool_stream_synchronize(s))) {
            suspend_resume(w, pool, CPOOL_SUSPEND_KEEP_CONTENTS);
            if (!cpool_pool_is_suspended(pool)) {
                for (int i = 0; i < KEPT_MIB; i++) {
                    const char *mib = (char *)big + ((size_t)i << 20);
                    expect_bytes(w, s, mib, host, 1u << 20, 0x40 + i, "the large block's MiB", i);
                }
                for (int i = 0; i < 2; i++)
                    expect_bytes(w, s, small[i], host, kept_small[i], 0x20 + i, "small block", i);
            }
        }
        if (cpool_pool_is_suspended(pool)) TRY(w, cpool_pool_resume(pool));
        cpool__pool_check(pool);
        if (big) TRY(w, cpool_free(pool, big, s));
        for (int i = 0; i < 2; i++)
            if (small[i]) TRY(w, cpool_free(pool, small[i], s));
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
    free(host);
}

/* Launches the graphs there are and checks the outputs of those launched. */
static void launch_nested(world *w, cpool_stream *s, cpool_graph **g, const nested_ctx *c, int n) {
    bool launched[NESTED + 1] = {false};
    for (int i = 0; i < n; i++) launched[i] = g[i] && TRY(w, cpool_graph_launch(g[i], s));
    if (!TRY(w, cpool_stream_synchronize(s))) return;
    unsigned char host[4096];
    for (int i = 0; i < n; i++)
        if (launched[i]) expect_bytes(w, s, c[i].out, host, sizeof host, c[i].pattern, "the output of graph", i);
}

static void suspend_resume_nested(world *w, cpool_pool *pool) {
    suspend_resume(w, pool, CPOOL_SUSPEND_DISCARD);
    cpool__pool_check(pool);
}

static void scenario_nested_resume(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[NESTED + 1] = {NULL};
    nested_ctx c[NESTED + 1];
    memset(c, 0, sizeof c);
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        record_objects(w, pool);
        for (int i = 0; i <= NESTED; i++) c[i] = (nested_ctx){pool, (size_t)(4 + 4 * i) << 20, 0x21 + i, NULL};
        c[NESTED].scratch = 6u << 20;
        for (int i = 0; i < NESTED; i++)
            if (!TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_nested, &c[i], &g[i])) && c[i].out) {
                TRY(w, cpool_free(pool, c[i].out, s)); /* a failed capture's blocks are the caller's */
                c[i].out = NULL;
            }
        launch_nested(w, s, g, c, NESTED);
        suspend_resume_nested(w, pool);
        launch_nested(w, s, g, c, NESTED);
        /* The largest goes: a trim gives back what only spare addresses of
         * the smaller graphs still reach (cpool__runs_shed_spare). */
        TRY(w, cpool_stream_synchronize(s));
        cpool_graph_release(g[NESTED - 1]);
        g[NESTED - 1] = NULL;
        if (c[NESTED - 1].out) TRY(w, cpool_free(pool, c[NESTED - 1].out, s));
        c[NESTED - 1].out = NULL;
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        launch_nested(w, s, g, c, NESTED);
        cpool_graph_release(g[1]);
        g[1] = NULL;
        if (!TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_nested, &c[NESTED], &g[NESTED])) &&
            c[NESTED].out) {
            TRY(w, cpool_free(pool, c[NESTED].out, s));
            c[NESTED].out = NULL;
        }
        cpool__pool_check(pool);
        launch_nested(w, s, g, c, NESTED + 1);
        TRY(w, cpool_stream_synchronize(s));
        for (int i = 0; i <= NESTED; i++) {
            cpool_graph_release(g[i]);
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
        }
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* The blocks a graph kept stay backed after the graph goes: nested
 * graphs, each keeping a 64 KiB block it allocated after its scratch (on
 * the pages of its arena, not an output's), resumed (their pages then
 * runs that reach past the kept blocks), launched, released, and trimmed
 * (the runs' free pages go back, split from the kept blocks' pages). Every
 * kept block reads back its bytes after the trim. */
static cpool_status body_kept(cpool_stream *s, void *arg) {
    nested_ctx *c = (nested_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->pattern, c->scratch);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 64u << 10, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, 64u << 10);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

static void check_kept(world *w, cpool_stream *s, const nested_ctx *c, const bool *written, int n) {
    static unsigned char host[64u << 10];
    for (int i = 0; i < n; i++)
        if (written[i]) expect_bytes(w, s, c[i].out, host, sizeof host, c[i].pattern, "the kept block of graph", i);
}

static void scenario_kept_through_trim(world *w) {
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[NESTED] = {NULL};
    nested_ctx c[NESTED];
    bool written[NESTED] = {false};
    memset(c, 0, sizeof c);
    if (!TRY(w, cpool_stream_create(w->dev, &s))) return;
    if (TRY(w, cpool_pool_create(w->dev, NULL, &pool))) {
        for (int i = 0; i < NESTED; i++) {
            c[i] = (nested_ctx){pool, ((size_t)(4 + 4 * i) << 20) - (64u << 10), 0x41 + i, NULL};
            if (!TRY(w, cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_kept, &c[i], &g[i])) && c[i].out) {
                TRY(w, cpool_free(pool, c[i].out, s)); /* a failed capture's blocks are the caller's */
                c[i].out = NULL;
            }
        }
        suspend_resume_nested(w, pool);
        for (int i = 0; i < NESTED; i++) written[i] = g[i] && TRY(w, cpool_graph_launch(g[i], s));
        if (!TRY(w, cpool_stream_synchronize(s))) memset(written, 0, sizeof written);
        for (int i = 0; i < NESTED; i++) cpool_graph_release(g[i]);
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        check_kept(w, s, c, written, NESTED);
        for (int i = 0; i < NESTED; i++)
            if (c[i].out) TRY(w, cpool_free(pool, c[i].out, s));
        TRY(w, cpool_pool_trim(pool));
        cpool__pool_check(pool);
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
}

/* A resume maps the shared pages of graphs of nested scratch as one
 * allocation, mapped whole once per graph: eight graphs (8 to 64 MiB,
 * ascending) share 32 pages, and each maps all 32, the smaller ones past
 * their own pages at addresses they reserved for it. That is 8 mappings,
 * where a mapping per stretch that the same graphs share would be
 * 8 + 7 + ... + 1 = 36 (the resume then made 74 acquisitions) and page by
 * page 4 + 8 + ... + 32 = 144 (174). Counted as the acquisitions the
 * resume makes (each allocation, mapping and record). */
static void nested_resume_maps_runs(cpool_device *dev) {
    enum { GRAPHS = 8 };
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_graph *g[GRAPHS];
    nested_ctx c[GRAPHS];
    for (int i = 0; i < GRAPHS; i++) {
        c[i] = (nested_ctx){pool, (size_t)(8 + 8 * i) << 20, 0x31 + i, NULL};
        REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_nested, &c[i], &g[i]));
    }
    REQUIRE_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
    cpool__fault_arm(0);
    REQUIRE_OK(cpool_pool_resume(pool));
    uint64_t used = cpool__fault_count();
    printf("  a resume of %d nested graphs: %llu acquisitions\n", GRAPHS, (unsigned long long)used);
    CHECK_LE(used, 30);
    cpool__pool_check(pool);
    for (int i = 0; i < GRAPHS; i++) CHECK_OK(cpool_graph_launch(g[i], s));
    for (int i = 0; i < GRAPHS; i++) CHECK_BYTES(s, c[i].out, 4096, c[i].pattern);
    for (int i = 0; i < GRAPHS; i++) {
        cpool_graph_release(g[i]);
        CHECK_OK(cpool_free(pool, c[i].out, s));
    }
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

static uint64_t graph_bytes(cpool_pool *pool) {
    cpool_pool_stats st = {.struct_size = sizeof st};
    CHECK_OK(cpool_pool_get_stats(pool, &st));
    return st.graph_reserved_bytes;
}

/* Once every graph and output went and a trim ran, no graph memory is
 * left; the pool and stream end. */
static void end_with_no_graph_memory(cpool_pool *pool, cpool_stream *s) {
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(pool));
    CHECK_EQ(graph_bytes(pool), 0);
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
}

/* After such a resume the smaller graphs map the largest one's pages too
 * (past their own): released and trimmed, the largest graph's pages still
 * go back, and the others launch as before; a capture that takes an idle
 * arena of a smaller graph maps pages of its own there. */
static void nested_resume_gives_back_the_largest(cpool_device *dev) {
    enum { GRAPHS = 4 };
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    cpool_graph *g[GRAPHS + 1];
    nested_ctx c[GRAPHS + 1];
    for (int i = 0; i < GRAPHS; i++) {
        c[i] = (nested_ctx){pool, (size_t)(8 + 8 * i) << 20, 0x51 + i, NULL};
        REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_nested, &c[i], &g[i]));
    }
    uint64_t all = graph_bytes(pool);
    REQUIRE_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
    REQUIRE_OK(cpool_pool_resume(pool));
    CHECK_EQ(graph_bytes(pool), all);
    cpool_graph_release(g[GRAPHS - 1]);
    CHECK_OK(cpool_free(pool, c[GRAPHS - 1].out, s));
    CHECK_OK(cpool_pool_trim(pool));
    cpool__pool_check(pool);
    CHECK_LE(graph_bytes(pool), all - (8u << 20)); /* its 8 MiB past the next largest */
    c[GRAPHS] = (nested_ctx){pool, 4u << 20, 0x61, NULL};
    cpool_graph_release(g[0]); /* idle: the next capture takes its arena */
    CHECK_OK(cpool_free(pool, c[0].out, s));
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_nested, &c[GRAPHS], &g[GRAPHS]));
    cpool__pool_check(pool);
    for (int i = 1; i <= GRAPHS; i++)
        if (i != GRAPHS - 1) CHECK_OK(cpool_graph_launch(g[i], s));
    for (int i = 1; i <= GRAPHS; i++)
        if (i != GRAPHS - 1) CHECK_BYTES(s, c[i].out, 4096, c[i].pattern);
    for (int i = 1; i <= GRAPHS; i++) {
        if (i == GRAPHS - 1) continue;
        cpool_graph_release(g[i]);
        CHECK_OK(cpool_free(pool, c[i].out, s));
    }
    end_with_no_graph_memory(pool, s);
}

/* Random graphs through resumes: captures of random scratch (outputs packed
 * or on pages of their own, before or after the scratch), releases,
 * suspends of both kinds, trims, in a random order; after each step every
 * graph's output is right once launched, the invariants hold (runs that
 * reach past smaller graphs' pages among them), and at the end nothing is
 * left. */
typedef struct random_graph {
    cpool_pool *pool;
    size_t scratch;
    int pattern;
    bool packed, output_first;
    void *out;
    cpool_graph *g;
} random_graph;

static cpool_status body_random(cpool_stream *s, void *arg) {
    random_graph *c = (random_graph *)arg;
    void *scratch = NULL;
    cpool_status st = CPOOL_OK;
    if (c->output_first) st = (c->packed ? cpool_alloc_output : cpool_alloc)(c->pool, 4096, s, &c->out);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, c->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->pattern, c->scratch);
    if (st == CPOOL_OK && !c->output_first) st = (c->packed ? cpool_alloc_output : cpool_alloc)(c->pool, 4096, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, (char *)scratch + c->scratch - 4096, 4096);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

static void random_graphs_through_resumes(cpool_device *dev) {
    enum { SLOTS = 8, STEPS = 120 };
    cpool_stream *s;
    cpool_pool *pool;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    random_graph c[SLOTS];
    memset(c, 0, sizeof c);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int resumes = 0;
    for (int step = 0; step < STEPS; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(rng >> 33), slot = r % SLOTS, op = (r >> 8) % 10;
        random_graph *g = &c[slot];
        if (op < 5 && !g->g) {
            *g = (random_graph){pool, ((size_t)1 + (r >> 12) % 12) << 20, 1 + (int)(r >> 20) % 250,
                                (r >> 28) & 1, (r >> 29) & 1, NULL, NULL};
            g->scratch += (r >> 16) % 3 ? 0 : 12345; /* not a whole number of pages */
            REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_random, g, &g->g));
        } else if (op < 7 && g->g) {
            cpool_graph_release(g->g);
            CHECK_OK(cpool_free(pool, g->out, s));
            g->g = NULL;
        } else if (op < 9) {
            CHECK_OK(cpool_stream_synchronize(s));
            CHECK_OK(cpool_pool_suspend(pool, op == 7 ? CPOOL_SUSPEND_DISCARD : CPOOL_SUSPEND_KEEP_CONTENTS));
            CHECK_OK(cpool_pool_resume(pool));
            resumes++;
        } else {
            CHECK_OK(cpool_stream_synchronize(s));
            CHECK_OK(cpool_pool_trim(pool));
        }
        cpool__pool_check(pool);
        for (int i = 0; i < SLOTS; i++)
            if (c[i].g) CHECK_OK(cpool_graph_launch(c[i].g, s));
        for (int i = 0; i < SLOTS; i++)
            if (c[i].g) CHECK_BYTES(s, c[i].out, 4096, c[i].pattern);
    }
    printf("  %d steps, %d resumes\n", STEPS, resumes);
    for (int i = 0; i < SLOTS; i++) {
        if (!c[i].g) continue;
        cpool_graph_release(c[i].g);
        CHECK_OK(cpool_free(pool, c[i].out, s));
    }
    end_with_no_graph_memory(pool, s);
}

static void run_once(cpool_device *dev, scenario_fn fn, uint64_t nth, uint64_t span, world *w) {
    memset(w, 0, sizeof *w);
    w->dev = dev;
    drop_log_init(&w->log);
    for (int i = 0; i < OBJECTS; i++) tracked_init(&w->obj[i], &w->log, i, NULL);
    cpool__fault_arm_span(nth, span);
    fn(w);
    w->acquisitions = cpool__fault_count();
    cpool__fault_arm(0);
    cpool_wait_deferred();
    int expected = 0;
    for (int i = 0; i < OBJECTS; i++) {
        CHECK_EQ(aload(&w->obj[i].drops), w->recorded[i] ? 1 : 0);
        expected += w->recorded[i];
    }
    CHECK_EQ(aload(&w->log.count), expected);
    for (int i = 1; i < w->log.next; i++) CHECK_LT(w->log.order[i - 1], w->log.order[i]);
}

static uint64_t swept_points;

static void sweep_span(cpool_device *dev, scenario_fn fn, const char *name, uint64_t span) {
    world w;
    run_once(dev, fn, 0, 1, &w);
    uint64_t count = w.acquisitions;
    CHECK_GT(count, 0);
    CHECK_EQ(w.failures, 0);
    int hit = 0;
    for (uint64_t n = 1; n <= count; n++) {
        run_once(dev, fn, n, span, &w);
        hit += w.failures > 0;
    }
    /* Every point either failed a call or was absorbed (a cache, a fallback). */
    printf("  %s: %llu acquisition points swept, %d surfaced as a failed call\n", name, (unsigned long long)count, hit);
    swept_points += count;
}

static void sweep(cpool_device *dev, scenario_fn fn, const char *name) { sweep_span(dev, fn, name, 1); }

/* Two failures in a row: each failure's undoing fails too (a remap, then
 * mapping the old memory back). Every call still fails clearly or serves,
 * and no live block is read or launched on without its pages: a graph
 * whose pages were lost refuses to launch. Its own test (faults_twice,
 * CPOOL_SWEEP_TWICE=all, or a part of a scenario's name): it doubles the
 * time of the sweeps. */
static void sweep_twice(cpool_device *dev) {
    const char *only = getenv("CPOOL_SWEEP_TWICE");
    if (!only) {
        printf("  skipped: CPOOL_SWEEP_TWICE is not set (the test faults_twice sets it)\n");
        return;
    }
    if (strcmp(only, "all") == 0) only = NULL;
    static const struct {
        scenario_fn fn;
        const char *name;
    } all[] = {{scenario_pool_life, "pool life"},
               {scenario_capture_launch, "capture, launch"},
               {scenario_growable, "growable"},
               {scenario_graph_pages, "graph pages"},
               {scenario_tails, "tails"},
               {scenario_attach, "attach"},
               {scenario_runs_in_use, "runs in use"},
               {scenario_live_bytes, "live bytes"},
               {scenario_nested_resume, "nested resume"},
               {scenario_kept_through_trim, "kept through trim"},
               {scenario_kept_by_the_mib, "kept by the MiB"}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!only || strstr(all[i].name, only)) sweep_span(dev, all[i].fn, all[i].name, 2);
    printf("  launches refused for lost pages: %llu\n", (unsigned long long)lost_refusals);
    if (!only) CHECK_GT(lost_refusals, 0); /* the sweep reaches graphs whose pages were lost */
}

static void sweep_pool_life(cpool_device *dev) { sweep(dev, scenario_pool_life, "pool life"); }
static void sweep_capture_launch(cpool_device *dev) { sweep(dev, scenario_capture_launch, "capture, launch, update, release while running"); }
static void sweep_graph_pages(cpool_device *dev) {
    sweep(dev, scenario_graph_pages, "graph pages: shared scratch, outputs' own and packed pages, trim");
}
static void sweep_attach(cpool_device *dev) {
    sweep(dev, scenario_attach, "captures begun outside the library: attach, detach, the owner's launches, release");
}
static void sweep_tails(cpool_device *dev) {
    sweep(dev, scenario_tails, "graph pages: last pages on packed pages, given back, suspended, trimmed");
}
static void sweep_runs_in_use(cpool_device *dev) {
    sweep(dev, scenario_runs_in_use, "graph pages: a run in use left whole, then settled onto by a trim");
}
static void sweep_live_bytes(cpool_device *dev) {
    sweep(dev, scenario_live_bytes, "live blocks keep their bytes: capture, arena taken again, trim, suspend");
}
static void sweep_nested_resume(cpool_device *dev) {
    sweep(dev, scenario_nested_resume, "graph pages: nested graphs resumed as runs several arenas map, an arena taken again, the largest trimmed");
}
static void sweep_kept_through_trim(cpool_device *dev) {
    sweep(dev, scenario_kept_through_trim, "graph pages: blocks kept by released graphs, resumed as runs, trimmed");
}
static void sweep_kept_by_the_mib(cpool_device *dev) {
    sweep(dev, scenario_kept_by_the_mib, "a KEEP pool's bytes copied back as they are mapped, a MiB a value");
}
static void sweep_growable(cpool_device *dev) { sweep(dev, scenario_growable, "growable segments: grow, trim inside, regrow"); }
static void sweep_growable_split(cpool_device *dev) {
    sweep(dev, scenario_growable_split, "growable segments: growth joined to a free block before it");
}
static void sweep_clear_params_callback(cpool_device *dev) {
    sweep(dev, scenario_clear_params_callback, "clear, stale launch, params, release in a callback");
}

/* An update that fails at any acquisition leaves the graph as it was: it
 * still does its old work, its output keeps its bytes (a failed update once
 * dropped the graph's outputs), and another graph, whose scratch shares its
 * pages, launches without a refusal and without touching that output. */
typedef struct kb {
    cpool_pool *pool;
    int value;
    void *kept; /* allocated and kept (an output), or NULL: freed again */
} kb;
static cpool_status kb_body(cpool_stream *s, void *arg) {
    kb *b = (kb *)arg;
    void *p = NULL;
    cpool_status st = cpool_alloc(b->pool, 1024, s, &p);
    if (st == CPOOL_OK) st = cpool_memset_async(s, p, b->value, 1024);
    if (st == CPOOL_OK && b->kept == NULL) st = cpool_free(b->pool, p, s);
    if (st == CPOOL_OK && b->kept != NULL) b->kept = p;
    return st;
}

static void update_failure_keeps_outputs(cpool_device *dev) {
    uint64_t count = 0;
    for (uint64_t n = 0;; n++) {
        cpool_stream *s = NULL;
        cpool_pool *pool = NULL;
        cpool_graph *b = NULL, *g = NULL;
        REQUIRE_OK(cpool_stream_create(dev, &s));
        REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
        kb scratch = {pool, 0xBB, NULL}, output = {pool, 0xAA, (void *)1}, again = {pool, 0xCC, (void *)1};
        REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, kb_body, &scratch, &b));
        REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, kb_body, &output, &g));
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_graph_launch(b, s));
        CHECK_BYTES(s, output.kept, 1024, 0xAA);
        uint64_t replays = cpool_graph_replays(g);
        cpool__fault_arm(n);
        cpool_status st = cpool_graph_update(g, s, kb_body, &again);
        uint64_t used = cpool__fault_count();
        cpool__fault_arm(0);
        if (n == 0) {
            CHECK_OK(st);
            count = used;
        }
        CHECK_EQ(cpool_graph_replays(g), replays);
        if (st == CPOOL_OK) {
            /* The update's output is g's new one; the old one stays live. */
            CHECK(again.kept != NULL && again.kept != (void *)1);
        } else {
            /* g still does its old work: a fresh fill of its output comes back. */
            CHECK_OK(cpool_memset_async(s, output.kept, 0, 1024));
            CHECK_OK(cpool_graph_launch(g, s));
            CHECK_BYTES(s, output.kept, 1024, 0xAA);
        }
        CHECK_OK(cpool_graph_launch(b, s)); /* never refused */
        CHECK_OK(cpool_graph_launch(g, s));
        CHECK_OK(cpool_graph_launch(b, s));
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK_BYTES(s, output.kept, 1024, 0xAA);
        if (st == CPOOL_OK) CHECK_BYTES(s, again.kept, 1024, 0xCC);
        CHECK_OK(cpool_free(pool, output.kept, s));
        /* A failed update's body may have kept a block: it is the caller's. */
        if (again.kept != (void *)1) CHECK_OK(cpool_free(pool, again.kept, s));
        CHECK_OK(cpool_graph_launch(b, s));
        CHECK_OK(cpool_stream_synchronize(s));
        cpool_graph_release(g);
        cpool_graph_release(b);
        cpool_pool_release(pool);
        cpool_stream_destroy(s);
        if (n >= count) break;
    }
    printf("  update failures keep outputs: %llu acquisition points swept\n", (unsigned long long)count);
    swept_points += count;
}

/* A suspend or a resume that fails at any acquisition (the host copy of
 * the live bytes, the pages mapped again, their bookkeeping) changes
 * nothing: a failed suspend leaves the pool as it was, a failed resume
 * leaves it suspended with its stats, and a later resume brings every byte
 * back; the graph then replays as before. Both modes, every point. */
typedef struct suspend_ctx {
    cpool_pool *pool;
    void *out;
} suspend_ctx;
static cpool_status suspend_body(cpool_stream *s, void *arg) {
    suspend_ctx *c = (suspend_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, 3u << 20, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, 0x5e, 3u << 20);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, 1u << 20, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, 1u << 20);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* Whether the failure is a missing resource, named by its function. */
static void check_fault_status(cpool_status st, const char *fn) {
    CHECK(st == CPOOL_ERR_OUT_OF_MEMORY || st == CPOOL_ERR_BACKEND);
    size_t n = strlen(fn);
    if (strncmp(cpool_last_error(), fn, n) != 0 || strncmp(cpool_last_error() + n, ": ", 2) != 0)
        check_report_(__FILE__, __LINE__, "%s failed, but its error does not start with its name: \"%s\"", fn,
                      cpool_last_error());
}

#define CHECK_ALL_STATS_EQ(a, b)                                    \
    do {                                                            \
        CHECK_STATS_EQ(a, b);                                       \
        CHECK_EQ((a).host_kept_bytes, (b).host_kept_bytes);         \
        CHECK_EQ((a).host_reserved_bytes, (b).host_reserved_bytes); \
    } while (0)

static void suspend_resume_failures_change_nothing(cpool_device *dev) {
    static const cpool_suspend_mode modes[2] = {CPOOL_SUSPEND_KEEP_CONTENTS, CPOOL_SUSPEND_DISCARD};
    for (int m = 0; m < 2; m++) {
        uint64_t count = 0;
        int failed_suspends = 0, failed_resumes = 0;
        for (uint64_t n = 0;; n++) {
            cpool_stream *s = NULL;
            cpool_pool *pool = NULL;
            cpool_graph *g = NULL;
            drop_log log;
            tracked obj;
            drop_log_init(&log);
            tracked_init(&obj, &log, 0, NULL);
            REQUIRE_OK(cpool_stream_create(dev, &s));
            REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
            CHECK_OK(cpool_pool_record(pool, &obj, tracked_drop, NULL));
            /* A resume maps a, b and big's first page together, big's whole
             * pages as an allocation of their own, then the pages after. */
            void *a = NULL, *b = NULL, *big = NULL, *hole = NULL, *last = NULL;
            REQUIRE_OK(cpool_alloc(pool, (3u << 20) + 512, s, &a));
            REQUIRE_OK(cpool_alloc(pool, 4096, s, &b));
            REQUIRE_OK(cpool_alloc(pool, 65u << 20, s, &big));
            REQUIRE_OK(cpool_alloc(pool, 10u << 20, s, &hole));
            REQUIRE_OK(cpool_alloc(pool, 4096, s, &last));
            CHECK_OK(cpool_free(pool, hole, s));
            CHECK_OK(cpool_memset_async(s, a, 0x31, (3u << 20) + 512));
            CHECK_OK(cpool_memset_async(s, b, 0x32, 4096));
            CHECK_OK(cpool_memset_async(s, big, 0x33, 65u << 20));
            CHECK_OK(cpool_memset_async(s, last, 0x34, 4096));
            suspend_ctx c = {pool, NULL};
            REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, suspend_body, &c, &g));
            CHECK_OK(cpool_graph_launch(g, s));
            CHECK_OK(cpool_stream_synchronize(s));
            CHECK_OK(cpool_pool_trim(pool)); /* as a suspend does first: the hole's whole pages go */
            cpool_pool_stats before = stats_of(pool);

            cpool__fault_arm(n);
            cpool_status suspended = cpool_pool_suspend(pool, modes[m]);
            cpool_pool_stats during = before;
            if (suspended == CPOOL_OK) {
                memset(&during, 0, sizeof during);
                during.struct_size = sizeof during;
                cpool_status stats_st = cpool_pool_get_stats(pool, &during);
                CHECK_OK(stats_st);
            }
            cpool_status resumed = suspended == CPOOL_OK ? cpool_pool_resume(pool) : CPOOL_OK;
            uint64_t used = cpool__fault_count();
            cpool__fault_arm(0);
            if (n == 0) {
                CHECK_OK(suspended);
                CHECK_OK(resumed);
                count = used;
            }
            if (suspended != CPOOL_OK) {
                failed_suspends++;
                check_fault_status(suspended, "cpool_pool_suspend");
                CHECK(!cpool_pool_is_suspended(pool));
                CHECK_ALL_STATS_EQ(stats_of(pool), before);
            } else if (resumed != CPOOL_OK) {
                failed_resumes++;
                check_fault_status(resumed, "cpool_pool_resume");
                CHECK(cpool_pool_is_suspended(pool));
                CHECK_ALL_STATS_EQ(stats_of(pool), during);
                CHECK_EQ(during.reserved_bytes, 0);
                CHECK_OK(cpool_pool_resume(pool));
            }
            cpool__pool_check(pool);
            CHECK(!cpool_pool_is_suspended(pool));
            if (modes[m] == CPOOL_SUSPEND_KEEP_CONTENTS || suspended != CPOOL_OK) {
                CHECK_BYTES(s, a, (3u << 20) + 512, 0x31);
                CHECK_BYTES(s, b, 4096, 0x32);
                CHECK_BYTES(s, big, 1u << 20, 0x33); /* its first and last MiB: pieces apart */
                CHECK_BYTES(s, (char *)big + (64u << 20), 1u << 20, 0x33);
                CHECK_BYTES(s, last, 4096, 0x34);
                CHECK_BYTES(s, c.out, 1u << 20, 0x5e);
            }
            CHECK_OK(cpool_memset_async(s, c.out, 0, 1u << 20));
            CHECK_OK(cpool_graph_launch(g, s));
            CHECK_BYTES(s, c.out, 1u << 20, 0x5e);
            CHECK_OK(cpool_free(pool, a, s));
            CHECK_OK(cpool_free(pool, b, s));
            CHECK_OK(cpool_free(pool, big, s));
            CHECK_OK(cpool_free(pool, last, s));
            CHECK_OK(cpool_free(pool, c.out, s));
            CHECK_OK(cpool_stream_synchronize(s));
            CHECK_OK(cpool_pool_trim(pool));
            cpool__pool_check(pool);
            cpool_graph_release(g);
            cpool_pool_release(pool);
            cpool_stream_destroy(s);
            cpool_wait_deferred();
            CHECK_EQ(aload(&obj.drops), 1);
            if (n >= count) break;
        }
        printf("  suspend (%s) and resume: %llu acquisition points swept, %d failed suspends, %d failed resumes\n",
               m == 0 ? "keep contents" : "discard", (unsigned long long)count, failed_suspends, failed_resumes);
        CHECK_GT(count, 0);
        swept_points += count;
    }
}

static void report_total(cpool_device *dev) {
    (void)dev;
    printf("  fault injection: %llu points swept in all\n", (unsigned long long)swept_points);
    CHECK_GT(swept_points, 0);
}

static const check_case cases[] = {
    CHECK_CASE(sweep_pool_life),
    CHECK_CASE(sweep_capture_launch),
    CHECK_CASE(sweep_clear_params_callback),
    CHECK_CASE(sweep_growable),
    CHECK_CASE(sweep_growable_split),
    CHECK_CASE(sweep_graph_pages),
    CHECK_CASE(sweep_tails),
    CHECK_CASE(sweep_attach),
    CHECK_CASE(sweep_runs_in_use),
    CHECK_CASE(sweep_live_bytes),
    CHECK_CASE(sweep_nested_resume),
    CHECK_CASE(sweep_kept_through_trim),
    CHECK_CASE(sweep_kept_by_the_mib),
    CHECK_CASE(nested_resume_maps_runs),
    CHECK_CASE(nested_resume_gives_back_the_largest),
    CHECK_CASE(random_graphs_through_resumes),
    CHECK_CASE(update_failure_keeps_outputs),
    CHECK_CASE(suspend_resume_failures_change_nothing),
    CHECK_CASE(sweep_twice),
    CHECK_CASE(report_total),
};
CHECK_MAIN(cases, CHECK_ON_HOST)
