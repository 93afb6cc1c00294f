/* Outputs of graphs that share a pool (capturepool.h, cpool_pool, "Graphs
 * that share a pool").
 *
 * Each capture allocates at addresses of its own, on physical pages shared
 * with the pool's other graphs, except the pages that hold its outputs (and
 * the packed region of small blocks and cpool_alloc_output). An output is a
 * block its capture allocated and did not free. These cases check that, in
 * the scenarios where graphs once refused each other's launches
 * (CPOOL_ERR_OUTPUT_LIVE),
 *  - every launch succeeds and counts its replay, and every live output
 *    keeps its bytes after every other graph's replay, also after its own
 *    graph was released, and a graph's own relaunch rewrites its outputs;
 *  - a later capture is never handed addresses that an earlier live graph
 *    uses (its outputs, its scratch, blocks freed in its capture);
 *  - a randomized model: no refusal ever, every output intact;
 *  - cpool_alloc_output, cpool_graphed_call and plain cpool_alloc outputs
 *    replay in any order while the scratch is shared by pages
 *    (graph_reserved_bytes: the largest scratch plus the outputs' pages);
 *  - a failed capture (body error, broken capture, stream destroyed while
 *    capturing) leaves no live output behind.
 * Sizes are multiples of 512 bytes, so a block is exactly its request.
 * Device memory is only touched through memset/memcpy/read_back. */
#include "check.h"
#include "helpers.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* ---- tools ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}
static unsigned rng_below(uint64_t *x, unsigned n) { return (unsigned)(rng_next(x) % n); }

/* Launches g and waits: the launch must succeed and count one replay. */
static void check_launch_ok_(cpool_graph *g, cpool_stream *s, const char *file, int line) {
    uint64_t replays = cpool_graph_replays(g);
    if (check_status_(cpool_graph_launch(g, s), CPOOL_OK, "cpool_graph_launch", "CPOOL_OK", file, line)) {
        if (cpool_graph_replays(g) != replays + 1) check_report_(file, line, "replays did not count the launch");
    }
    check_status_(cpool_stream_synchronize(s), CPOOL_OK, "cpool_stream_synchronize", "CPOOL_OK", file, line);
}
#define CHECK_LAUNCH_OK(g, s) check_launch_ok_((g), (s), __FILE__, __LINE__)

/* What a test records of one graph: every block its capture allocated. */
#define FP_MAX 64
typedef struct footprint {
    size_t n;
    const void *p[FP_MAX];
    size_t size[FP_MAX];
} footprint;

static void fp_add(footprint *f, const void *p, size_t size) {
    if (f->n < FP_MAX) {
        f->p[f->n] = p;
        f->size[f->n] = size;
        f->n++;
    }
}
static int fp_overlaps(const footprint *f, const void *p, size_t size) {
    size_t i;
    for (i = 0; i < f->n; i++)
        if (ranges_overlap(f->p[i], f->size[i], p, size)) return 1;
    return 0;
}

/* Pages of `size` bytes that hold n bytes. */
static uint64_t in_pages(uint64_t n, uint64_t size) { return (n + size - 1) / size * size; }

/* ---- 1. the old hazard: an output where another graph had scratch ------------- */

static void output_over_old_scratch_stays_intact(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    const size_t scratch_n = 64 * KiB, out_n = 4 * KiB;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    void *s1 = NULL, *o1 = NULL, *o2 = NULL;
    uint64_t id2;
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    /* G1 = {scratch S1, fill; output O1 from S1; free S1}. */
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, scratch_n, s, &s1));
    CHECK_OK(cpool_memset_async(s, s1, 0x11, scratch_n));
    CHECK_OK(cpool_alloc(pool, out_n, s, &o1));
    CHECK_OK(cpool_memcpy_async(s, o1, s1, out_n));
    CHECK_OK(cpool_free(pool, s1, s));
    REQUIRE_OK(cpool_capture_end(s, &g1));
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o1, out_n, 0x11);
    /* G2 = {output O2 as large as S1; fill 0x22}: once it lay over S1 and
     * G1's launches were refused; now it has addresses of its own. */
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, scratch_n, s, &o2));
    CHECK_OK(cpool_memset_async(s, o2, 0x22, scratch_n));
    REQUIRE_OK(cpool_capture_end(s, &g2));
    REQUIRE(o2 != NULL);
    CHECK(!ranges_overlap(o2, scratch_n, s1, scratch_n));
    CHECK(!ranges_overlap(o2, scratch_n, o1, out_n));
    id2 = cpool_graph_id(g2);
    CHECK_NE(id2, 0);
    CHECK_NE(id2, cpool_graph_id(g1));

    CHECK_LAUNCH_OK(g2, s);
    CHECK_BYTES(s, o2, scratch_n, 0x22);
    CHECK_LAUNCH_OK(g1, s); /* G1's fill of S1 leaves O2 as it was */
    CHECK_BYTES(s, o2, scratch_n, 0x22);
    CHECK_BYTES(s, o1, out_n, 0x11);
    CHECK_EQ(cpool_graph_replays(g1), 2);
    CHECK_LAUNCH_OK(g2, s);
    CHECK_LAUNCH_OK(g2, s);
    CHECK_EQ(cpool_graph_replays(g2), 3);
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o2, scratch_n, 0x22);
    CHECK_BYTES(s, o1, out_n, 0x11);

    /* O2 stays a live output after its graph is released: G1 leaves it be. */
    cpool_graph_release(g2);
    CHECK(wait_graph_count(pool, 1, WAIT_TIMEOUT_MS));
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o2, scratch_n, 0x22);
    CHECK_EQ(cpool_graph_replays(g1), 4);

    CHECK_OK(cpool_free(pool, o2, s));
    CHECK_LAUNCH_OK(g1, s);
    CHECK_LAUNCH_OK(g1, s);
    CHECK_EQ(cpool_graph_replays(g1), 6);
    CHECK_BYTES(s, o1, out_n, 0x11);
    cpool_graph_release(g1);
    CHECK_OK(cpool_free(pool, o1, s));
}

/* ---- 2. a freed output's memory became another graph's output ------------------- */

static void freed_output_reused_by_next_graph(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    const size_t n = 4 * KiB;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g1 = NULL, *g2 = NULL;
    void *o1 = NULL, *o2 = NULL;
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &o1));
    CHECK_OK(cpool_memset_async(s, o1, 0x01, n));
    REQUIRE_OK(cpool_capture_end(s, &g1));
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o1, n, 0x01);
    CHECK_OK(cpool_free(pool, o1, s)); /* the user is done with O1 */
    CHECK_LAUNCH_OK(g1, s);            /* G1 still writes O1's place */
    /* A block freed outside capture waits for its stream's work before a
     * capture may take it; trim sees that work done (and keeps graph memory). */
    CHECK_OK(cpool_pool_trim(pool));

    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, n, s, &o2));
    CHECK_OK(cpool_memset_async(s, o2, 0x02, n));
    REQUIRE_OK(cpool_capture_end(s, &g2));
    /* Once best fit handed G2 the very block O1 was and G1's launches were
     * refused. G1's replays still write O1's place, so G2's output must lie
     * elsewhere. */
    CHECK(!ranges_overlap(o2, n, o1, n));

    CHECK_LAUNCH_OK(g2, s);
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o2, n, 0x02);
    CHECK_EQ(cpool_graph_replays(g1), 3);
    CHECK_LAUNCH_OK(g2, s);
    CHECK_BYTES(s, o2, n, 0x02);
    CHECK_LAUNCH_OK(g1, s);
    CHECK_BYTES(s, o2, n, 0x02);
    CHECK_OK(cpool_free(pool, o2, s));
    CHECK_LAUNCH_OK(g1, s);
    CHECK_EQ(cpool_graph_replays(g1), 5);
    cpool_graph_release(g1);
    cpool_graph_release(g2);
}

/* ---- 3. self-relaunch --------------------------------------------------------------- */

static void own_outputs_never_refuse(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    const size_t big = 64 * KiB, n1 = 8 * KiB, n2 = 4 * KiB;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g = NULL;
    void *scratch = NULL, *o1 = NULL, *o2 = NULL, *o3 = NULL;
    int i;
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, big, s, &scratch));
    CHECK_OK(cpool_memset_async(s, scratch, 0x33, big));
    CHECK_OK(cpool_alloc(pool, n1, s, &o1));
    CHECK_OK(cpool_memcpy_async(s, o1, scratch, n1));
    CHECK_OK(cpool_alloc_output(pool, n2, s, &o2));
    CHECK_OK(cpool_memset_async(s, o2, 0x44, n2));
    CHECK_OK(cpool_free(pool, scratch, s));
    CHECK_OK(cpool_alloc(pool, big, s, &o3)); /* an output in its own freed scratch */
    CHECK_OK(cpool_memset_async(s, o3, 0x55, big));
    REQUIRE_OK(cpool_capture_end(s, &g));
    CHECK(ranges_overlap(o3, big, scratch, big));
    for (i = 1; i <= 40; i++) {
        CHECK_OK(cpool_memset_async(s, o1, 0, n1));
        CHECK_OK(cpool_memset_async(s, o2, 0, n2));
        CHECK_OK(cpool_memset_async(s, o3, 0, big));
        CHECK_LAUNCH_OK(g, s);
        CHECK_EQ(cpool_graph_replays(g), i);
        CHECK_BYTES(s, o1, n1, 0x33);
        CHECK_BYTES(s, o2, n2, 0x44);
        CHECK_BYTES(s, o3, big, 0x55);
    }
    cpool_graph_release(g);
    CHECK_OK(cpool_free(pool, o1, s));
    CHECK_OK(cpool_free(pool, o2, s));
    CHECK_OK(cpool_free(pool, o3, s));
}

/* ---- 4. randomized: never a refusal, every output intact ------------------------ */

/* Random graphs of outputs (cpool_alloc or cpool_alloc_output) and scratch,
 * some outputs freed by the user between captures and between launches;
 * then random launches. The model: every launch succeeds, every live output
 * holds the bytes its graph last wrote, and no live graph's footprint (what
 * its capture allocated) meets a live output of another graph. */

#define RG_GRAPHS 6
#define RG_MAX_OUT 64
typedef struct rg_output {
    void *p;
    size_t n;
    int owner;
    int live, written;
} rg_output;

static void randomized_launches_keep_outputs(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[RG_GRAPHS] = {0};
    footprint fp[RG_GRAPHS];
    rg_output out[RG_MAX_OUT];
    size_t n_out = 0, k;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int i, step, launched = 0, freed = 0;
    memset(fp, 0, sizeof fp);
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    for (i = 0; i < RG_GRAPHS; i++) {
        void *scratch[16];
        size_t n_scratch = 0;
        unsigned a, n_alloc = 2 + rng_below(&rng, 6);
        REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
        for (a = 0; a < n_alloc; a++) {
            unsigned kind = rng_below(&rng, 10);
            size_t size = rng_below(&rng, 10) == 0 ? 512 * (2048 + (size_t)rng_below(&rng, 4096))
                                                   : 512 * (1 + (size_t)rng_below(&rng, 128));
            void *p = NULL;
            if (kind < 4 && n_out < RG_MAX_OUT) { /* an output: cpool_alloc or cpool_alloc_output */
                cpool_status st = kind == 0 ? cpool_alloc_output(pool, size, s, &p) : cpool_alloc(pool, size, s, &p);
                REQUIRE(CHECK_OK(st));
                CHECK_OK(cpool_memset_async(s, p, 0x10 + i, size));
                out[n_out].p = p;
                out[n_out].n = size;
                out[n_out].owner = i;
                out[n_out].live = 1;
                out[n_out].written = 0;
                n_out++;
            } else {
                REQUIRE_OK(cpool_alloc(pool, size, s, &p));
                CHECK_OK(cpool_memset_async(s, p, 0xa0 + i, size));
                scratch[n_scratch++] = p;
            }
            fp_add(&fp[i], p, size);
            if (n_scratch && rng_below(&rng, 2)) { /* free a random scratch block */
                unsigned j = rng_below(&rng, (unsigned)n_scratch);
                CHECK_OK(cpool_free(pool, scratch[j], s));
                scratch[j] = scratch[--n_scratch];
            }
        }
        while (n_scratch) CHECK_OK(cpool_free(pool, scratch[--n_scratch], s));
        REQUIRE_OK(cpool_capture_end(s, &g[i]));
        /* Now and then the user frees an earlier output: later captures may
         * then be handed its memory. */
        if (n_out && rng_below(&rng, 3) == 0) {
            k = rng_below(&rng, (unsigned)n_out);
            if (out[k].live) {
                CHECK_OK(cpool_free(pool, out[k].p, s));
                out[k].live = 0;
                freed++;
            }
        }
    }
    for (step = 0; step < 300; step++) {
        int x = (int)rng_below(&rng, RG_GRAPHS);
        uint64_t replays = cpool_graph_replays(g[x]);
        for (k = 0; k < n_out; k++)
            if (out[k].live && out[k].owner != x && fp_overlaps(&fp[x], out[k].p, out[k].n))
                check_report_(__FILE__, __LINE__, "graph %d's footprint meets live output %p of graph %d", x,
                              out[k].p, out[k].owner);
        if (CHECK_OK(cpool_graph_launch(g[x], s))) {
            CHECK_EQ(cpool_graph_replays(g[x]), replays + 1);
            for (k = 0; k < n_out; k++)
                if (out[k].owner == x) out[k].written = 1;
            launched++;
        }
        CHECK_OK(cpool_stream_synchronize(s));
        for (k = 0; k < n_out; k++)
            if (out[k].live && out[k].written) CHECK_BYTES(s, out[k].p, out[k].n, 0x10 + out[k].owner);
        if (rng_below(&rng, 25) == 0) { /* free a random output, never re-allocated */
            k = rng_below(&rng, (unsigned)n_out);
            if (out[k].live) {
                CHECK_OK(cpool_free(pool, out[k].p, s));
                out[k].live = 0;
                freed++;
            }
        }
    }
    /* The seed makes a real scenario (once, some of these launches were
     * refused): every launch ran, some outputs were freed. */
    CHECK_EQ(launched, 300);
    CHECK_GT(freed, 0);
    printf("  randomized: %zu outputs, %d launched, %d freed\n", n_out, launched, freed);
    for (i = 0; i < RG_GRAPHS; i++) cpool_graph_release(g[i]);
    for (k = 0; k < n_out; k++)
        if (out[k].live) CHECK_OK(cpool_free(pool, out[k].p, s));
}

/* ---- 5, 6. scratch shared by pages: graphed calls, cpool_alloc_output, cpool_alloc -- */

/* Bodies that keep a small output (allocated first), and use a small and a
 * large scratch. With plain cpool_alloc, graph j+1's output once landed in
 * graph j's small scratch and launches were refused; now no output style
 * needs placing apart. */
enum { VIA_GRAPHED_CALL, VIA_ALLOC_OUTPUT, VIA_PLAIN_ALLOC };
#define SB_GRAPHS 8
typedef struct shared_body {
    cpool_pool *pool;
    int via;
    size_t big_n;
    unsigned char v;
    int calls;
    void *out[2], *small[2], *big[2]; /* per call: [0] eager (graphed call) or capture, [1] capture */
} shared_body;
static const size_t sb_out_n = 4 * KiB, sb_small_n = 4 * KiB;

static cpool_status shared_body_fn(cpool_stream *s, void *ctx) {
    shared_body *b = (shared_body *)ctx;
    int c = b->calls < 2 ? b->calls : 1;
    cpool_status st;
    b->calls++;
    st = b->via == VIA_ALLOC_OUTPUT ? cpool_alloc_output(b->pool, sb_out_n, s, &b->out[c])
                                    : cpool_alloc(b->pool, sb_out_n, s, &b->out[c]);
    if (st == CPOOL_OK) st = cpool_alloc(b->pool, sb_small_n, s, &b->small[c]);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b->small[c], b->v | 0x80, sb_small_n);
    if (st == CPOOL_OK) st = cpool_alloc(b->pool, b->big_n, s, &b->big[c]);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b->big[c], b->v, b->big_n);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, b->out[c], b->big[c], sb_out_n);
    if (st == CPOOL_OK) st = cpool_free(b->pool, b->small[c], s);
    if (st == CPOOL_OK) st = cpool_free(b->pool, b->big[c], s);
    return st;
}

/* Makes SB_GRAPHS graphs of shared_body_fn into one pool, checks that no
 * graph's blocks meet another's and that graph_reserved_bytes stays within
 * the largest scratch in pages plus one packed page (the outputs and the
 * small scratch are small requests: the packed region holds them all), then
 * launches every ordered pair and random orders: every launch succeeds,
 * every output intact. */
static void shared_scratch_any_order(cpool_device *dev, int via, size_t big_n) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g[SB_GRAPHS] = {0};
    shared_body b[SB_GRAPHS];
    footprint fp[SB_GRAPHS];
    int written[SB_GRAPHS] = {0};
    int i, j, k, cap = via == VIA_GRAPHED_CALL ? 1 : 0;
    uint64_t rng = 0x2545f4914f6cdd1dull;
    memset(fp, 0, sizeof fp);
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    for (i = 0; i < SB_GRAPHS; i++) {
        memset(&b[i], 0, sizeof b[i]);
        b[i].pool = pool;
        b[i].via = via;
        b[i].big_n = big_n;
        b[i].v = (unsigned char)(0x10 + i);
        if (via == VIA_GRAPHED_CALL) {
            REQUIRE_OK(cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, 1, shared_body_fn, &b[i], &g[i]));
            CHECK_EQ(b[i].calls, 2);
            CHECK_BYTES(s, b[i].out[0], sb_out_n, b[i].v); /* the eager run's output is the body's own */
            CHECK_OK(cpool_free(pool, b[i].out[0], s));
        } else {
            REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, shared_body_fn, &b[i], &g[i]));
            CHECK_EQ(b[i].calls, 1);
        }
        REQUIRE(g[i] != NULL);
        fp_add(&fp[i], b[i].out[cap], sb_out_n);
        fp_add(&fp[i], b[i].small[cap], sb_small_n);
        fp_add(&fp[i], b[i].big[cap], big_n);
    }
    {
        cpool_pool_stats st = stats_of(pool);
        for (i = 0; i < SB_GRAPHS; i++)
            for (j = 0; j < SB_GRAPHS; j++) {
                if (j == i) continue;
                CHECK(!fp_overlaps(&fp[j], b[i].out[cap], sb_out_n));
                CHECK(!fp_overlaps(&fp[j], b[i].big[cap], big_n));
            }
        /* The scratch is shared by pages, not by addresses: the graphs' large
         * scratch blocks sit at addresses of their own on the same pages. */
        CHECK_LE(st.graph_reserved_bytes, in_pages(big_n, 2 * MiB) + 2 * MiB);
    }
    /* Every ordered pair (i, j), then random orders. */
    for (k = 0; k < SB_GRAPHS * SB_GRAPHS * 2 + 64; k++) {
        int x = k < SB_GRAPHS * SB_GRAPHS * 2 ? (k % 2 ? (k / 2) % SB_GRAPHS : (k / 2) / SB_GRAPHS)
                                              : (int)rng_below(&rng, SB_GRAPHS);
        CHECK_OK(cpool_graph_launch(g[x], s));
        written[x] = 1;
        CHECK_OK(cpool_stream_synchronize(s));
        for (j = 0; j < SB_GRAPHS; j++)
            if (written[j]) CHECK_BYTES(s, b[j].out[cap], sb_out_n, b[j].v);
    }
    for (i = 0; i < SB_GRAPHS; i++) {
        cpool_graph_release(g[i]);
        CHECK_OK(cpool_free(pool, b[i].out[cap], s));
    }
}

static void graphed_calls_share_scratch_any_order(cpool_device *dev) {
    shared_scratch_any_order(dev, VIA_GRAPHED_CALL, 16 * MiB);
}
static void alloc_output_shares_scratch_any_order(cpool_device *dev) {
    shared_scratch_any_order(dev, VIA_ALLOC_OUTPUT, 16 * MiB);
}
static void plain_alloc_outputs_share_scratch_any_order(cpool_device *dev) {
    shared_scratch_any_order(dev, VIA_PLAIN_ALLOC, 1 * MiB);
}

/* ---- 7. a failed capture leaves no live output ------------------------------------- */

/* The three ways a capture can fail: its body returns an error, it is broken
 * (a sync under capture), its stream is destroyed while it captures. */
enum { FAIL_BODY, FAIL_INVALIDATED, FAIL_STREAM_DESTROYED, FAIL_WAYS };
typedef struct fail_body {
    cpool_pool *pool;
    void *x, *y;
} fail_body;

static cpool_status failing_body_fn(cpool_stream *s, void *ctx) {
    fail_body *f = (fail_body *)ctx;
    cpool_status st = cpool_alloc(f->pool, 64 * KiB, s, &f->x);
    if (st == CPOOL_OK) st = cpool_memset_async(s, f->x, 0x77, 64 * KiB);
    if (st == CPOOL_OK) st = cpool_alloc_output(f->pool, 4 * KiB, s, &f->y);
    return st == CPOOL_OK ? CPOOL_ERR_UNSUPPORTED : st;
}

/* Allocates X (64 KiB) and Y (4 KiB, cpool_alloc_output) in a capture on a new stream
 * that then fails `way`; returns whether it failed as expected. */
static int fail_a_capture(cpool_device *dev, cpool_pool *pool, int way, fail_body *f) {
    cpool_stream *t = NULL;
    cpool_graph *g = (cpool_graph *)(uintptr_t)0x10;
    int ok = 1;
    memset(f, 0, sizeof *f);
    f->pool = pool;
    if (!CHECK_OK(cpool_stream_create(dev, &t))) return 0;
    if (way == FAIL_BODY) {
        ok &= CHECK_STATUS(cpool_capture(t, pool, CPOOL_CAPTURE_GLOBAL, failing_body_fn, f, &g), CPOOL_ERR_UNSUPPORTED);
    } else {
        ok &= CHECK_OK(cpool_capture_begin(t, pool, CPOOL_CAPTURE_GLOBAL));
        ok &= CHECK_STATUS(failing_body_fn(t, f), CPOOL_ERR_UNSUPPORTED);
        if (way == FAIL_INVALIDATED) {
            ok &= CHECK_STATUS(cpool_stream_synchronize(t), CPOOL_ERR_CAPTURE_INVALIDATED);
            ok &= CHECK_STATUS(cpool_capture_end(t, &g), CPOOL_ERR_CAPTURE_INVALIDATED);
        } else {
            g = NULL;
        }
    }
    CHECK(g == NULL);
    cpool_stream_destroy(t); /* FAIL_STREAM_DESTROYED: ends and discards the capture */
    return ok && f->x && f->y;
}

static void failed_capture_leaves_no_outputs(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *g0 = NULL;
    void *t = NULL;
    int way;
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    /* G0 = {scratch T, fill, free}. */
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
    CHECK_OK(cpool_alloc(pool, 64 * KiB, s, &t));
    CHECK_OK(cpool_memset_async(s, t, 0x10, 64 * KiB));
    CHECK_OK(cpool_free(pool, t, s));
    REQUIRE_OK(cpool_capture_end(s, &g0));
    CHECK_LAUNCH_OK(g0, s);

    for (way = 0; way < FAIL_WAYS; way++) {
        cpool_graph *g2 = NULL, *g3 = NULL;
        void *z = NULL;
        fail_body f;
        uint64_t allocated = stats_of(pool).allocated_bytes;
        printf("  failing the capture, way %d\n", way);
        REQUIRE(fail_a_capture(dev, pool, way, &f));
        CHECK(!ranges_overlap(f.x, 64 * KiB, t, 64 * KiB)); /* G0 is live: its addresses are its own */
        CHECK_EQ(stats_of(pool).allocated_bytes, allocated + 68 * KiB); /* still the caller's */

        /* No graph came of it, so no output: G0 runs. */
        CHECK_LAUNCH_OK(g0, s);
        /* G2 frees X under capture, then allocates a scratch of X's size. */
        REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
        CHECK_OK(cpool_free(pool, f.x, s));
        CHECK_OK(cpool_alloc(pool, 64 * KiB, s, &z));
        CHECK_OK(cpool_memset_async(s, z, 0x30, 64 * KiB));
        CHECK_OK(cpool_free(pool, z, s));
        REQUIRE_OK(cpool_capture_end(s, &g2));
        CHECK_LAUNCH_OK(g2, s);
        CHECK_LAUNCH_OK(g0, s);
        CHECK_OK(cpool_free(pool, f.y, s));
        CHECK_STATUS(cpool_free(pool, f.y, s), CPOOL_ERR_INVALID_ARGUMENT);
        /* G3: another scratch of X's size; nothing refuses anyone. */
        REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL));
        CHECK_OK(cpool_alloc(pool, 64 * KiB, s, &z));
        CHECK_OK(cpool_memset_async(s, z, 0x40, 64 * KiB));
        CHECK_OK(cpool_free(pool, z, s));
        REQUIRE_OK(cpool_capture_end(s, &g3));
        CHECK_LAUNCH_OK(g3, s);
        CHECK_LAUNCH_OK(g2, s);
        CHECK_LAUNCH_OK(g0, s);
        CHECK_EQ(stats_of(pool).allocated_bytes, allocated);
        cpool_graph_release(g2);
        cpool_graph_release(g3);
    }
    cpool_graph_release(g0);
}

/* ---- 8. a block freed under capture stays its graph's ------------------------------ */

/* B keeps an output OB that A's capture frees; C then keeps an output OC.
 * Once OC lay over OB and A's and B's launches were refused; now C's output
 * has addresses of its own and every launch leaves it intact. */

static void freed_under_capture_keeps_outputs(cpool_device *dev) {
    static stream_pool fx; /* outlives the case: its cleanups run after */
    const size_t n = 64 * KiB;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    cpool_graph *ga = NULL, *gb = NULL, *gc = NULL;
    void *ob = NULL, *oc = NULL;
    REQUIRE(fixture_open(dev, NULL, &fx));
    s = fx.s;
    pool = fx.pool;
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* B = {output OB} */
    CHECK_OK(cpool_alloc(pool, n, s, &ob));
    CHECK_OK(cpool_memset_async(s, ob, 0x0b, n));
    REQUIRE_OK(cpool_capture_end(s, &gb));
    CHECK_LAUNCH_OK(gb, s);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* A = {free OB} */
    CHECK_OK(cpool_free(pool, ob, s));
    REQUIRE_OK(cpool_capture_end(s, &ga));
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* C = {output OC} */
    CHECK_OK(cpool_alloc(pool, n, s, &oc));
    CHECK_OK(cpool_memset_async(s, oc, 0x0c, n));
    REQUIRE_OK(cpool_capture_end(s, &gc));
    CHECK(!ranges_overlap(oc, n, ob, n));
    CHECK_LAUNCH_OK(gc, s);
    CHECK_LAUNCH_OK(ga, s);
    CHECK_LAUNCH_OK(gb, s);
    CHECK_BYTES(s, oc, n, 0x0c);
    CHECK_LAUNCH_OK(gc, s);
    CHECK_LAUNCH_OK(gb, s);
    CHECK_LAUNCH_OK(ga, s);
    CHECK_BYTES(s, oc, n, 0x0c);
    CHECK_OK(cpool_free(pool, oc, s));
    CHECK_LAUNCH_OK(ga, s);
    CHECK_LAUNCH_OK(gb, s);
    CHECK_LAUNCH_OK(gc, s);
    cpool_graph_release(ga);
    cpool_graph_release(gb);
    cpool_graph_release(gc);
}

/* ---- 9. another graph's output freed in a capture ------------------------------- */

/* A keeps an output OA; B's capture writes OA, frees it, then keeps an
 * output OB of the same size; C, captured once A is released, keeps OC.
 * A's replays still write OA and B's write it before their free: OB and OC
 * must lie elsewhere, every launch in any order leaves them intact, and
 * OA is free only once both are released (a second free of it is
 * refused). For outputs made by cpool_alloc_output (packed) and by
 * cpool_alloc (pages of the graph's own), small and large, with B's
 * scratch before or after OB. */
static cpool_status alloc_as(cpool_pool *pool, int packed, size_t n, cpool_stream *s, void **out) {
    return packed ? cpool_alloc_output(pool, n, s, out) : cpool_alloc(pool, n, s, out);
}

static void freed_output_of_another_graph(cpool_device *dev, stream_pool *fx, int packed, size_t n,
                                          int scratch_first) {
    cpool_graph *ga = NULL, *gb = NULL, *gc = NULL;
    void *oa = NULL, *ob = NULL, *oc = NULL, *scratch = NULL;
    printf("  outputs by %s, %zu bytes, %s\n", packed ? "cpool_alloc_output" : "cpool_alloc", n,
           scratch_first ? "B's scratch first" : "B's output first");
    REQUIRE(fixture_open(dev, NULL, fx));
    cpool_stream *s = fx->s;
    cpool_pool *pool = fx->pool;
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* A = {output OA} */
    CHECK_OK(alloc_as(pool, packed, n, s, &oa));
    CHECK_OK(cpool_memset_async(s, oa, 0xa1, n));
    REQUIRE_OK(cpool_capture_end(s, &ga));
    CHECK_LAUNCH_OK(ga, s);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* B = {write OA, free it; OB, scratch} */
    CHECK_OK(cpool_memset_async(s, oa, 0x5b, n));
    CHECK_OK(cpool_free(pool, oa, s));
    if (scratch_first) {
        CHECK_OK(cpool_alloc(pool, n, s, &scratch));
        CHECK_OK(cpool_memset_async(s, scratch, 0xee, n));
    }
    CHECK_OK(alloc_as(pool, packed, n, s, &ob));
    CHECK_OK(cpool_memset_async(s, ob, 0x0b, n));
    if (!scratch_first) {
        CHECK_OK(cpool_alloc(pool, n, s, &scratch));
        CHECK_OK(cpool_memset_async(s, scratch, 0xee, n));
    }
    CHECK_OK(cpool_free(pool, scratch, s));
    REQUIRE_OK(cpool_capture_end(s, &gb));
    CHECK(!ranges_overlap(ob, n, oa, n));
    CHECK_LAUNCH_OK(gb, s);
    CHECK_LAUNCH_OK(ga, s);
    CHECK_BYTES(s, ob, n, 0x0b);
    CHECK_LAUNCH_OK(gb, s);
    CHECK_BYTES(s, ob, n, 0x0b);
    CHECK_STATUS(cpool_free(pool, oa, s), CPOOL_ERR_INVALID_ARGUMENT); /* freed by B's capture */
    cpool_graph_release(ga);
    REQUIRE_OK(cpool_capture_begin(s, pool, CPOOL_CAPTURE_GLOBAL)); /* C = {output OC} */
    CHECK_OK(alloc_as(pool, packed, n, s, &oc));
    CHECK_OK(cpool_memset_async(s, oc, 0x0c, n));
    REQUIRE_OK(cpool_capture_end(s, &gc));
    CHECK(!ranges_overlap(oc, n, oa, n));
    CHECK_LAUNCH_OK(gc, s);
    CHECK_LAUNCH_OK(gb, s);
    CHECK_BYTES(s, oc, n, 0x0c);
    CHECK_BYTES(s, ob, n, 0x0b);
    cpool_graph_release(gb);
    cpool_graph_release(gc);
    CHECK_OK(cpool_free(pool, ob, s));
    CHECK_OK(cpool_free(pool, oc, s));
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(pool));
    cpool_pool_stats st = {.struct_size = sizeof st};
    CHECK_OK(cpool_pool_get_stats(pool, &st));
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.graph_reserved_bytes, 0);
}

static void output_freed_in_another_capture(cpool_device *dev) {
    static stream_pool fx[8]; /* outlive the case: their cleanups run after */
    const size_t sizes[] = {8 * KiB, 3 * MiB};
    for (int k = 0; k < 8; k++) freed_output_of_another_graph(dev, &fx[k], k & 1, sizes[k >> 1 & 1], k >> 2);
}

/* Two captures open at once on two streams: B frees a block that C, still
 * capturing, handed out. B's release does not free it while C may still
 * write it: C's later requests never get its addresses, and C's release
 * frees it. */
static void block_of_an_open_capture_freed_in_another(cpool_device *dev) {
    static stream_pool fx;
    const size_t n = 64 * KiB;
    cpool_stream *s2 = NULL;
    cpool_graph *gb = NULL, *gc = NULL;
    void *x = NULL, *y = NULL;
    REQUIRE(fixture_open(dev, NULL, &fx));
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    REQUIRE_OK(cpool_capture_begin(fx.s, fx.pool, CPOOL_CAPTURE_RELAXED)); /* C */
    CHECK_OK(cpool_alloc(fx.pool, n, fx.s, &x));
    CHECK_OK(cpool_memset_async(fx.s, x, 0x0c, n));
    if (CHECK_OK(cpool_capture_begin(s2, fx.pool, CPOOL_CAPTURE_RELAXED))) { /* B = {free X} */
        CHECK_OK(cpool_free(fx.pool, x, s2));
        CHECK_OK(cpool_capture_end(s2, &gb));
    }
    cpool_graph_release(gb);
    CHECK_OK(cpool_alloc(fx.pool, n, fx.s, &y));
    CHECK(!ranges_overlap(x, n, y, n));
    CHECK_OK(cpool_memset_async(fx.s, y, 0x0d, n));
    CHECK_OK(cpool_capture_end(fx.s, &gc));
    CHECK_LAUNCH_OK(gc, fx.s);
    CHECK_BYTES(fx.s, y, n, 0x0d);
    cpool_graph_release(gc);
    CHECK_OK(cpool_free(fx.pool, y, fx.s));
    CHECK_STATUS(cpool_free(fx.pool, x, fx.s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_OK(cpool_pool_trim(fx.pool));
    cpool_pool_stats st = stats_of(fx.pool);
    CHECK_EQ(st.allocated_bytes, 0);
    CHECK_EQ(st.graph_reserved_bytes, 0);
    cpool_stream_destroy(s2);
}

/* ---- 10. an update keeps the graph's id and its old output intact ------------- */

typedef struct update_body {
    cpool_pool *pool;
    size_t bytes;
    int value;
    void *out; /* what the body allocated and kept */
} update_body;
static cpool_status update_body_fn(cpool_stream *s, void *ctx) {
    update_body *b = (update_body *)ctx;
    cpool_status st = cpool_alloc(b->pool, b->bytes, s, &b->out);
    if (st == CPOOL_OK) st = cpool_memset_async(s, b->out, b->value, b->bytes);
    return st;
}

static void update_keeps_outputs_intact(cpool_device *dev) {
    static stream_pool fx;
    static update_body first, second, other;
    cpool_graph *g = NULL, *h = NULL;
    REQUIRE(fixture_open(dev, NULL, &fx));
    first = (update_body){fx.pool, 64 << 10, 0x31, NULL};
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, update_body_fn, &first, &g));
    CHECK_OK(cpool_graph_launch(g, fx.s));
    second = (update_body){fx.pool, 64 << 10, 0x32, NULL};
    REQUIRE_OK(cpool_graph_update(g, fx.s, update_body_fn, &second));
    CHECK(second.out != first.out); /* the first output is still live */
    uint64_t id = cpool_graph_id(g);
    /* g's old output stays live and intact: the updated graph relaunches. */
    CHECK_OK(cpool_graph_launch(g, fx.s));
    CHECK_BYTES(fx.s, first.out, first.bytes, 0x31);
    CHECK_BYTES(fx.s, second.out, second.bytes, 0x32);
    CHECK_EQ(cpool_graph_id(g), id);
    /* Another graph captured after g's first output was freed: neither
     * launch is refused, neither touches the other's output. */
    CHECK_OK(cpool_free(fx.pool, first.out, fx.s));
    CHECK_OK(cpool_pool_trim(fx.pool));
    other = (update_body){fx.pool, 64 << 10, 0x33, NULL};
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, update_body_fn, &other, &h));
    CHECK_OK(cpool_graph_launch(h, fx.s));
    CHECK_OK(cpool_graph_launch(g, fx.s));
    CHECK_BYTES(fx.s, other.out, other.bytes, 0x33);
    CHECK_BYTES(fx.s, second.out, second.bytes, 0x32);
    cpool_graph_release(h);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(fx.pool, second.out, fx.s));
    CHECK_OK(cpool_free(fx.pool, other.out, fx.s));
}

/* ---- 11. launches on one thread, captures and frees on another ---------------- */

enum { RACE_ROUNDS = 200 };

typedef struct race {
    cpool_pool *pool;
    cpool_graph *g;
    cpool_stream *s;
    int stop;
    int launched;
} race;

static void *launcher(void *arg) {
    race *r = (race *)arg;
    while (!aload(&r->stop)) {
        if (CHECK_OK(cpool_graph_launch(r->g, r->s))) ainc(&r->launched); /* never refused */
        CHECK_OK(cpool_stream_synchronize(r->s));
    }
    return NULL;
}

/* The launch's lock-free read of the counts against captures' ends and
 * outputs' frees on another thread: no crash, no report under TSan, and
 * every launch succeeds. */
static void launches_race_captures_and_frees(cpool_device *dev) {
    static stream_pool fx;
    static race r;
    static update_body body;
    cpool_stream *t = NULL;
    cpool_graph *g0 = NULL;
    pthread_t th;
    int i;
    REQUIRE(fixture_open(dev, NULL, &fx));
    REQUIRE_OK(cpool_stream_create(dev, &t));
    body = (update_body){fx.pool, 4096, 0x41, NULL};
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, update_body_fn, &body, &g0));
    CHECK_OK(cpool_free(fx.pool, body.out, fx.s)); /* g0 keeps no output */
    r = (race){.pool = fx.pool, .g = g0, .s = fx.s};
    REQUIRE(pthread_create(&th, NULL, launcher, &r) == 0);
    /* At least RACE_ROUNDS captures, and on until the launcher ran a while. */
    for (i = 0; i < RACE_ROUNDS || (aload(&r.launched) < 20 && i < 100 * RACE_ROUNDS); i++) {
        update_body b = {fx.pool, 4096, 0x42, NULL};
        cpool_graph *g = NULL;
        if (!CHECK_OK(cpool_capture(t, fx.pool, CPOOL_CAPTURE_THREAD_LOCAL, update_body_fn, &b, &g))) break;
        CHECK_OK(cpool_free(fx.pool, b.out, t));
        cpool_graph_release(g);
    }
    astore(&r.stop, 1);
    pthread_join(th, NULL);
    CHECK_GT(aload(&r.launched), 0);
    CHECK_OK(cpool_graph_launch(g0, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_graph_release(g0);
    cpool_stream_destroy(t);
}

/* ---- 12. graphed calls with no eager run: never refused, outputs intact ------- */

typedef struct out_then_scratch {
    cpool_pool *pool;
    int value;
    void *out;
} out_then_scratch;
static cpool_status out_then_scratch_fn(cpool_stream *s, void *ctx) {
    out_then_scratch *b = (out_then_scratch *)ctx;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(b->pool, 1024, s, &b->out);
    if (st == CPOOL_OK) st = cpool_alloc(b->pool, 1024, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, b->value, 1024);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, b->out, scratch, 1024);
    if (st == CPOOL_OK) st = cpool_free(b->pool, scratch, s);
    return st;
}

static void graphed_calls_without_warmup_never_refused(cpool_device *dev) {
    static stream_pool fx;
    static out_then_scratch a, b;
    cpool_graph *ga = NULL, *gb = NULL;
    REQUIRE(fixture_open(dev, NULL, &fx));
    a = (out_then_scratch){fx.pool, 0x51, NULL};
    b = (out_then_scratch){fx.pool, 0x52, NULL};
    REQUIRE_OK(cpool_graphed_call(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, 0, out_then_scratch_fn, &a, &ga));
    REQUIRE_OK(cpool_graphed_call(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, 0, out_then_scratch_fn, &b, &gb));
    CHECK_OK(cpool_graph_launch(ga, fx.s));
    CHECK_OK(cpool_graph_launch(gb, fx.s));
    CHECK_OK(cpool_graph_launch(ga, fx.s)); /* A's scratch leaves B's output be */
    CHECK_BYTES(fx.s, a.out, 1024, 0x51);
    CHECK_BYTES(fx.s, b.out, 1024, 0x52);
    cpool_graph_release(ga);
    cpool_graph_release(gb);
    CHECK_OK(cpool_free(fx.pool, a.out, fx.s));
    CHECK_OK(cpool_free(fx.pool, b.out, fx.s));
}

static const check_case cases[] = {
    CHECK_CASE(output_over_old_scratch_stays_intact),
    CHECK_CASE(freed_output_reused_by_next_graph),
    CHECK_CASE(own_outputs_never_refuse),
    CHECK_CASE(randomized_launches_keep_outputs),
    CHECK_CASE(graphed_calls_share_scratch_any_order),
    CHECK_CASE(alloc_output_shares_scratch_any_order),
    CHECK_CASE(plain_alloc_outputs_share_scratch_any_order),
    CHECK_CASE(failed_capture_leaves_no_outputs),
    CHECK_CASE(freed_under_capture_keeps_outputs),
    CHECK_CASE(output_freed_in_another_capture),
    CHECK_CASE(block_of_an_open_capture_freed_in_another),
    CHECK_CASE(update_keeps_outputs_intact),
    CHECK_CASE(launches_race_captures_and_frees),
    CHECK_CASE(graphed_calls_without_warmup_never_refused),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
