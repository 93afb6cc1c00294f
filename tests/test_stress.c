/* Stress: many threads sharing pools and graphs, for a bounded time and
 * iteration count, with exact accounting at the end.
 *
 * NT threads, each on streams of its own, mix at random:
 * - stream-ordered alloc/free from two shared pools, filling each block with
 *   a pattern of the thread's and checking it before the free (a block handed
 *   to two threads at once shows up as a wrong byte);
 * - records of counted objects into the shared pools and into a pool of the
 *   thread's own;
 * - retain/release of the shared pools and shared graphs;
 * - launches of the shared graphs (captured up front, before the threads
 *   start): graphs that share a pool must not run at the same time, so each
 *   shared pool has a mutex held from such a launch until its work finished;
 * - captures on the thread's stream into a shared pool (thread-local and
 *   relaxed modes: a global-mode capture forbids other threads' unsafe CUDA
 *   calls), launched under that pool's mutex, then released;
 * - launches of a graph of the thread's own pool (no lock: only this thread
 *   launches graphs of that pool), re-captured with cpool_graph_update once a
 *   clear of the pool made it stale;
 * - clear and trim of its own pool, trim of the shared ones, and (one thread,
 *   once) a clear of a shared pool, which makes graphs captured into it
 *   before stale (their launches then return CPOOL_ERR_STALE_GRAPH);
 * - last references dropped inside a stream callback (a pool and a graph),
 *   so that teardown is deferred to the library's thread.
 *
 * At the end, after every thread joined and everything was released and
 * cpool_wait_deferred() returned: every recorded object was dropped exactly
 * once and every object whose record failed never; every captured host
 * function ran exactly once per successful launch, and that equals the
 * graph's replay count; every pool has allocated_bytes 0 and alloc_count ==
 * free_count, and the shared pools, once their graphs are gone and they are
 * trimmed, hold no memory at all.
 *
 * CPOOL_STRESS_SECONDS (default 2) bounds the time each case runs its
 * threads; ITERS bounds the iterations of each thread.
 */
#include "check.h" /* first: it sets _POSIX_C_SOURCE */
#include "helpers.h"

#include <stdint.h>
#include <time.h>

enum {
    NT = 8,            /* threads */
    ITERS = 1000,      /* at most, per thread */
    NPOOLS = 2,        /* shared pools */
    NGRAPHS = 4,       /* shared graphs, graph k on pool k % NPOOLS */
    LIVE = 4,          /* live blocks a thread keeps in each shared pool */
    OBJS = 4 * ITERS,  /* counted objects a thread may record */
    CLEARER = NT - 1,  /* the thread that clears a shared pool once */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double stress_seconds(void) {
    const char *env = getenv("CPOOL_STRESS_SECONDS");
    double v = env ? atof(env) : 0.0;
    return v > 0.0 ? v : 2.0;
}

/* ---- shared state ---------------------------------------------------------------- */

typedef struct shared {
    cpool_device *dev;
    cpool_pool *pools[NPOOLS];
    pthread_mutex_t launch_mu[NPOOLS]; /* held from a launch of a pool's graph until its work finished */
    cpool_graph *graphs[NGRAPHS];
    int graph_runs[NGRAPHS]; /* the shared graphs' captured host functions */
    double deadline;
    drop_log log;
} shared;

typedef struct worker {
    shared *sh;
    int id;
    uint32_t rng;
    cpool_stream *s;
    cpool_pool *own;
    cpool_graph *own_graph;
    tracked *objs; /* OBJS of them */
    int *recorded; /* drops each object must end with */
    int nobj;
    int own_runs; /* the own graph's host function */
    uint64_t own_launches;
    int cap_runs; /* host functions of graphs this thread captured into shared pools */
    uint64_t cap_launches;
    uint64_t shared_launches[NGRAPHS];
    void *live[NPOOLS][LIVE];
    size_t live_n[NPOOLS][LIVE];
    unsigned char live_pat[NPOOLS][LIVE];
    int iters;
    int stale_seen;
} worker;

static uint32_t next_rand(worker *w) {
    w->rng = w->rng * 1664525u + 1013904223u;
    return w->rng >> 8;
}

/* Records one counted object into pool; notes whether it must be dropped. */
static void record_one(worker *w, cpool_pool *pool) {
    int i;
    cpool_status st;
    if (w->nobj >= OBJS) return;
    i = w->nobj++;
    tracked_init(&w->objs[i], &w->sh->log, w->id * OBJS + i, NULL);
    st = cpool_pool_record(pool, &w->objs[i], tracked_drop, NULL);
    CHECK_OK(st);
    w->recorded[i] = st == CPOOL_OK;
}

/* ---- capture bodies ----------------------------------------------------------------- */

typedef struct body_ctx {
    cpool_pool *pool;
    int *counter;
    size_t bytes;
    unsigned char pattern;
} body_ctx;

/* Scratch from the pool under capture, a fill, a counted host function, the free. */
static cpool_status body_scratch(cpool_stream *s, void *arg) {
    body_ctx *c = (body_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->pattern, c->bytes);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_inc, c->counter);
    if (scratch) {
        cpool_status fst = cpool_free(c->pool, scratch, s);
        if (st == CPOOL_OK) st = fst;
    }
    return st;
}

static void cb_release_pool(void *arg) { cpool_pool_release((cpool_pool *)arg); }
static void cb_release_graph(void *arg) { cpool_graph_release((cpool_graph *)arg); }

/* ---- the operations ------------------------------------------------------------------- */

static void op_alloc_free(worker *w) {
    int p = (int)(next_rand(w) % NPOOLS);
    int k = (int)(next_rand(w) % LIVE);
    cpool_pool *pool = w->sh->pools[p];
    if (w->live[p][k]) {
        if (next_rand(w) % 4 == 0) CHECK_BYTES(w->s, w->live[p][k], w->live_n[p][k], w->live_pat[p][k]);
        CHECK_OK(cpool_free(pool, w->live[p][k], w->s));
        w->live[p][k] = NULL;
    } else {
        size_t n = 1 + next_rand(w) % (next_rand(w) % 8 == 0 ? (2u << 20) : 65536u);
        unsigned char pat = (unsigned char)(w->id * 16 + (next_rand(w) % 16));
        void *ptr = NULL;
        if (!CHECK_OK(cpool_alloc(pool, n, w->s, &ptr))) return;
        CHECK_OK(cpool_memset_async(w->s, ptr, pat, n));
        w->live[p][k] = ptr;
        w->live_n[p][k] = n;
        w->live_pat[p][k] = pat;
    }
}

static void op_record_shared(worker *w) {
    cpool_pool *pool = cpool_pool_retain(w->sh->pools[next_rand(w) % NPOOLS]);
    record_one(w, pool);
    cpool_pool_release(pool);
}

static void op_retain_release(worker *w) {
    int k = (int)(next_rand(w) % NGRAPHS);
    cpool_graph *g = cpool_graph_retain(w->sh->graphs[k]);
    cpool_pool *p = cpool_pool_retain(w->sh->pools[k % NPOOLS]);
    CHECK(g == w->sh->graphs[k]);
    CHECK(cpool_graph_pool(g) == p);
    cpool_pool_release(p);
    cpool_graph_release(g);
}

/* A launch of a shared graph may be refused as stale (another thread
 * cleared its pool); any other status is a failure, reported with its
 * message. */
static void check_shared_launch(int line, cpool_status st) {
    if (st != CPOOL_OK && st != CPOOL_ERR_STALE_GRAPH)
        check_report_(__FILE__, line, "launch: %s: %s", cpool_status_string(st), cpool_last_error());
}

static void op_launch_shared(worker *w) {
    int k = (int)(next_rand(w) % NGRAPHS);
    cpool_graph *g = cpool_graph_retain(w->sh->graphs[k]);
    cpool_status st;
    pthread_mutex_lock(&w->sh->launch_mu[k % NPOOLS]);
    st = cpool_graph_launch(g, w->s);
    check_shared_launch(__LINE__, st);
    if (st == CPOOL_OK) w->shared_launches[k]++;
    if (st == CPOOL_ERR_STALE_GRAPH) w->stale_seen++;
    CHECK_OK(cpool_stream_synchronize(w->s));
    pthread_mutex_unlock(&w->sh->launch_mu[k % NPOOLS]);
    cpool_graph_release(g);
}

static void op_capture_shared(worker *w) {
    int p = (int)(next_rand(w) % NPOOLS);
    cpool_pool *pool = cpool_pool_retain(w->sh->pools[p]);
    cpool_capture_mode mode = next_rand(w) % 2 ? CPOOL_CAPTURE_THREAD_LOCAL : CPOOL_CAPTURE_RELAXED;
    body_ctx c;
    cpool_graph *g = NULL;
    int launches = 1 + (int)(next_rand(w) % 3), i;
    uint64_t ok = 0;
    c.pool = pool;
    c.counter = &w->cap_runs;
    c.bytes = 512 + next_rand(w) % 100000;
    c.pattern = (unsigned char)w->id;
    if (!CHECK_OK(cpool_capture(w->s, pool, mode, body_scratch, &c, &g))) {
        cpool_pool_release(pool);
        return;
    }
    cpool_pool_release(pool); /* the graph holds its own */
    if (next_rand(w) % 2) record_one(w, cpool_graph_pool(g));
    pthread_mutex_lock(&w->sh->launch_mu[p]);
    for (i = 0; i < launches; i++) {
        cpool_status st = cpool_graph_launch(g, w->s);
        check_shared_launch(__LINE__, st);
        if (st == CPOOL_OK) ok++;
        if (st == CPOOL_ERR_STALE_GRAPH) w->stale_seen++;
    }
    w->cap_launches += ok;
    CHECK_OK(cpool_stream_synchronize(w->s));
    pthread_mutex_unlock(&w->sh->launch_mu[p]);
    CHECK_EQ(cpool_graph_replays(g), ok);
    cpool_graph_release(g);
}

static body_ctx *own_ctx(worker *w) {
    static body_ctx ctx[NT];
    ctx[w->id].pool = w->own;
    ctx[w->id].counter = &w->own_runs;
    ctx[w->id].bytes = 8192;
    ctx[w->id].pattern = 0x77;
    return &ctx[w->id];
}

static void op_launch_own(worker *w) {
    cpool_status st = cpool_graph_launch(w->own_graph, w->s);
    if (st == CPOOL_ERR_STALE_GRAPH) {
        /* A clear made it stale: capture its work again. */
        w->stale_seen++;
        if (!CHECK_OK(cpool_graph_update(w->own_graph, w->s, body_scratch, own_ctx(w)))) return;
        st = cpool_graph_launch(w->own_graph, w->s);
    }
    if (CHECK_OK(st)) w->own_launches++;
}

static void op_own_pool(worker *w) {
    switch (next_rand(w) % 4) {
    case 0:
        record_one(w, w->own);
        break;
    case 1:
        cpool_pool_clear_buffers(w->own);
        break;
    case 2:
        CHECK_OK(cpool_pool_trim(w->own));
        break;
    default: {
        void *p = NULL;
        cpool_pool_seal(w->own);
        CHECK_STATUS(cpool_alloc(w->own, 64, w->s, &p), CPOOL_ERR_SEALED);
        cpool_pool_unseal(w->own);
        if (CHECK_OK(cpool_alloc(w->own, 64, w->s, &p))) CHECK_OK(cpool_free(w->own, p, w->s));
        break;
    }
    }
}

static void op_trim_shared(worker *w) { CHECK_OK(cpool_pool_trim(w->sh->pools[next_rand(w) % NPOOLS])); }

/* A pool and a graph whose last references go inside stream callbacks. */
static void op_release_in_callback(worker *w) {
    cpool_pool *tmp = NULL;
    cpool_graph *g = NULL;
    body_ctx c;
    void *p = NULL;
    if (!CHECK_OK(cpool_pool_create(w->sh->dev, NULL, &tmp))) return;
    record_one(w, tmp);
    if (CHECK_OK(cpool_alloc(tmp, 1000, w->s, &p))) CHECK_OK(cpool_free(tmp, p, w->s));
    c.pool = tmp;
    c.counter = &w->cap_runs;
    c.bytes = 4096;
    c.pattern = 1;
    if (next_rand(w) % 2 && CHECK_OK(cpool_capture(w->s, tmp, CPOOL_CAPTURE_RELAXED, body_scratch, &c, &g))) {
        record_one(w, tmp);
        cpool_pool_release(tmp); /* the graph holds the last reference now */
        if (CHECK_OK(cpool_graph_launch(g, w->s))) w->cap_launches++;
        CHECK_OK(cpool_launch_host(w->s, cb_release_graph, g));
    } else {
        CHECK_OK(cpool_launch_host(w->s, cb_release_pool, tmp));
    }
}

/* REQUIRE for a thread function. */
#define REQUIRE_NULL_(cond)                                                            \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            check_report_(__FILE__, __LINE__, "REQUIRE(%s) (thread abandoned)", #cond); \
            return NULL;                                                               \
        }                                                                              \
    } while (0)

static void *worker_main(void *arg) {
    worker *w = (worker *)arg;
    body_ctx *c;
    int p, k;
    if (!CHECK_OK(cpool_stream_create(w->sh->dev, &w->s))) return NULL;
    if (!CHECK_OK(cpool_pool_create(w->sh->dev, NULL, &w->own))) return NULL;
    c = own_ctx(w);
    for (k = 0; k < 100 && !w->own_graph; k++)
        CHECK_OK(cpool_capture(w->s, w->own, CPOOL_CAPTURE_THREAD_LOCAL, body_scratch, c, &w->own_graph));
    REQUIRE_NULL_(w->own_graph != NULL);
    for (w->iters = 0; w->iters < ITERS && now_s() < w->sh->deadline; w->iters++) {
        uint32_t r = next_rand(w) % 100;
        if (w->id == CLEARER && w->iters == ITERS / 3) cpool_pool_clear_buffers(w->sh->pools[1]);
        if (r < 30)
            op_alloc_free(w);
        else if (r < 42)
            op_record_shared(w);
        else if (r < 52)
            op_retain_release(w);
        else if (r < 62)
            op_launch_shared(w);
        else if (r < 72)
            op_capture_shared(w);
        else if (r < 84)
            op_launch_own(w);
        else if (r < 92)
            op_own_pool(w);
        else if (r < 96)
            op_trim_shared(w);
        else
            op_release_in_callback(w);
    }
    for (p = 0; p < NPOOLS; p++)
        for (k = 0; k < LIVE; k++)
            if (w->live[p][k]) {
                CHECK_BYTES(w->s, w->live[p][k], w->live_n[p][k], w->live_pat[p][k]);
                CHECK_OK(cpool_free(w->sh->pools[p], w->live[p][k], w->s));
                w->live[p][k] = NULL;
            }
    CHECK_OK(cpool_stream_synchronize(w->s));
    /* The own pool: every allocation came back; its graph ran its host function once per launch. */
    {
        cpool_pool_stats st = stats_of(w->own);
        CHECK_EQ(st.allocated_bytes, 0);
        CHECK_EQ(st.alloc_count, st.free_count);
        CHECK_STATS_SANE(st);
        CHECK_EQ(aload(&w->own_runs), w->own_launches);
        CHECK_EQ(cpool_graph_replays(w->own_graph), w->own_launches);
    }
    cpool_graph_release(w->own_graph);
    cpool_pool_release(w->own);
    cpool_stream_destroy(w->s); /* after its callbacks ran: their deferred teardowns are queued */
    w->own_graph = NULL;
    w->own = NULL;
    w->s = NULL;
    return NULL;
}

/* ---- the case --------------------------------------------------------------------------- */

static void shared_pools_and_graphs(cpool_device *dev) {
    static shared sh;
    static worker w[NT];
    static tracked objs[NT][OBJS];
    static int recorded[NT][OBJS];
    static body_ctx gctx[NGRAPHS];
    pthread_t th[NT];
    cpool_stream *s = NULL;
    int i, j, k, p, total_iters = 0, stale = 0;
    int64_t expected_drops = 0;
    double t0 = now_s();

    memset(&sh, 0, sizeof sh);
    memset(w, 0, sizeof w);
    memset(recorded, 0, sizeof recorded);
    sh.dev = dev;
    drop_log_init(&sh.log);
    REQUIRE_OK(cpool_stream_create(dev, &s));
    for (p = 0; p < NPOOLS; p++) {
        REQUIRE_OK(cpool_pool_create(dev, NULL, &sh.pools[p]));
        pthread_mutex_init(&sh.launch_mu[p], NULL);
    }
    for (k = 0; k < NGRAPHS; k++) {
        gctx[k].pool = sh.pools[k % NPOOLS];
        gctx[k].counter = &sh.graph_runs[k];
        gctx[k].bytes = 4096u << k;
        gctx[k].pattern = (unsigned char)(0xa0 + k);
        REQUIRE_OK(cpool_capture(s, sh.pools[k % NPOOLS], CPOOL_CAPTURE_THREAD_LOCAL, body_scratch, &gctx[k],
                                 &sh.graphs[k]));
    }

    sh.deadline = now_s() + stress_seconds();
    for (i = 0; i < NT; i++) {
        w[i].sh = &sh;
        w[i].id = i;
        w[i].rng = 0x9e3779b9u * (uint32_t)(i + 1);
        w[i].objs = objs[i];
        w[i].recorded = recorded[i];
        REQUIRE(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    }
    for (i = 0; i < NT; i++) pthread_join(th[i], NULL);
    for (i = 0; i < NT; i++) {
        total_iters += w[i].iters;
        stale += w[i].stale_seen;
    }

    /* Every shared graph ran its host function once per successful launch. */
    for (k = 0; k < NGRAPHS; k++) {
        uint64_t launches = 0;
        for (i = 0; i < NT; i++) launches += w[i].shared_launches[k];
        CHECK_EQ(aload(&sh.graph_runs[k]), launches);
        CHECK_EQ(cpool_graph_replays(sh.graphs[k]), launches);
    }
    for (i = 0; i < NT; i++) CHECK_EQ(aload(&w[i].cap_runs), w[i].cap_launches);

    /* The shared pools: every allocation came back; with their graphs gone
     * and a trim, they hold no memory. */
    for (k = 0; k < NGRAPHS; k++) cpool_graph_release(sh.graphs[k]);
    cpool_wait_deferred();
    for (p = 0; p < NPOOLS; p++) {
        cpool_pool_stats st;
        CHECK(wait_graph_count(sh.pools[p], 0, WAIT_TIMEOUT_MS));
        CHECK_OK(cpool_pool_trim(sh.pools[p]));
        st = stats_of(sh.pools[p]);
        CHECK_EQ(st.allocated_bytes, 0);
        CHECK_EQ(st.alloc_count, st.free_count);
        CHECK_GT(st.alloc_count, 0);
        CHECK_EQ(st.graph_count, 0);
        CHECK_EQ(st.reserved_bytes, 0);
        CHECK_EQ(st.segment_count, 0);
        CHECK_EQ(st.graph_reserved_bytes, 0);
        CHECK_STATS_SANE(st);
        cpool_pool_release(sh.pools[p]);
        pthread_mutex_destroy(&sh.launch_mu[p]);
    }
    cpool_stream_destroy(s);
    cpool_wait_deferred();

    /* Every recorded object dropped exactly once; the others never. */
    for (i = 0; i < NT; i++)
        for (j = 0; j < w[i].nobj; j++) {
            expected_drops += recorded[i][j];
            if (aload(&objs[i][j].drops) != recorded[i][j])
                check_report_(__FILE__, __LINE__, "object %d of thread %d dropped %d times, expected %d", j, i,
                              aload(&objs[i][j].drops), recorded[i][j]);
        }
    CHECK_EQ(aload(&sh.log.count), expected_drops);
    printf("  %d threads, %d iterations, %lld objects dropped, %d stale launches refused, %.2f s\n", NT, total_iters,
           (long long)expected_drops, stale, now_s() - t0);
}

static const check_case cases[] = {
    CHECK_CASE(shared_pools_and_graphs),
};
CHECK_MAIN(cases, CHECK_ON_ALL)
