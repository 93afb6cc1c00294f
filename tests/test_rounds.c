/*
 * Rounds: what a serving loop does to a pool, round after round, held
 * against the lower bound (the largest graph, the live outputs, a page per
 * stream), and graphs released while their launches still run.
 *
 *  - A graph released while its launch runs, with an output still
 *    allocated: the next capture must not move the pages its replay uses
 *    (its output comes out right).
 *  - Graphs released while their launches run leave no arenas apart once
 *    the device is idle: graph memory falls back to about one graph's.
 *  - Graphed calls with a warm-up run, round after round (output freed
 *    after the graph's release, the next capture's stream still busy), and
 *    outputs made on a forked branch: graph memory stays bounded, never
 *    growing with the rounds.
 */
#include "check.h"
#include "helpers.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

static uint64_t graph_bytes(const cpool_pool *pool) { return stats_of(pool).graph_reserved_bytes; }

/* ---- a released graph's launch still running ------------------------------ */

/* Stream work that waits until the test opens it, noting that it began. */
typedef struct gate {
    int entered, open;
} gate;
static void cb_gate(void *arg) {
    gate *g = arg;
    astore(&g->entered, 1);
    for (unsigned waited = 0; !aload(&g->open) && waited < WAIT_TIMEOUT_MS; waited++) sleep_ms(1);
}

typedef struct scratch_to_out {
    cpool_pool *pool;
    size_t n;
    unsigned char value;
    void *out;    /* allocated in the body, kept */
    gate *middle; /* NULL, or a gate between the fill and the copy */
} scratch_to_out;

/* Scratch filled with value, copied into an output the capture keeps. */
static cpool_status scratch_to_out_fn(cpool_stream *s, void *ctx) {
    scratch_to_out *a = ctx;
    void *scratch;
    cpool_status st = cpool_alloc(a->pool, a->n, s, &scratch);
    if (st != CPOOL_OK) return st;
    if ((st = cpool_alloc(a->pool, a->n, s, &a->out)) != CPOOL_OK) return st;
    if ((st = cpool_memset_async(s, scratch, a->value, a->n)) != CPOOL_OK) return st;
    if (a->middle && (st = cpool_launch_host(s, cb_gate, a->middle)) != CPOOL_OK) return st;
    if ((st = cpool_memcpy_async(s, a->out, scratch, a->n)) != CPOOL_OK) return st;
    return cpool_free(a->pool, scratch, s);
}

/* A's replay fills its scratch, then waits (a gate in the graph) while A
 * is released and B captured, then copies its scratch into its output:
 * B's capture must leave A's pages where they are. */
static void released_running_graph_keeps_its_pages(cpool_device *dev) {
    static stream_pool fixtures[2]; /* they end with the case */
    static gate middle[2];
    for (int order = 0; order < 2; order++) {
        stream_pool fx;
        REQUIRE(fixture_open(dev, NULL, &fixtures[order]));
        fx = fixtures[order];
        scratch_to_out a = {fx.pool, 4 * MiB, 0x5a, NULL, &middle[order]};
        cpool_graph *ga = NULL, *gb = NULL;
        REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, scratch_to_out_fn, &a, &ga));
        REQUIRE_OK(cpool_memset_async(fx.s, a.out, 0, a.n));
        CHECK_OK(cpool_stream_synchronize(fx.s));
        CHECK_OK(cpool_graph_launch(ga, fx.s));
        cpool_graph_release(ga); /* still running: its output stays allocated */
        CHECK(wait_for_int(&middle[order].entered, 1, WAIT_TIMEOUT_MS)); /* filled, its copy waits */
        cpool_stream *other;
        REQUIRE_OK(cpool_stream_create(dev, &other));
        scratch_to_out b = {fx.pool, order ? 2 * MiB : 8 * MiB, 0x3c, NULL, NULL};
        CHECK_OK(cpool_capture(other, fx.pool, CPOOL_CAPTURE_GLOBAL, scratch_to_out_fn, &b, &gb));
        astore(&middle[order].open, 1);
        CHECK_OK(cpool_stream_synchronize(fx.s));
        CHECK_BYTES(fx.s, a.out, a.n, 0x5a);
        if (gb) {
            CHECK_OK(cpool_graph_launch(gb, other));
            CHECK_OK(cpool_stream_synchronize(other));
            CHECK_BYTES(other, b.out, b.n, 0x3c);
            CHECK_BYTES(fx.s, a.out, a.n, 0x5a);
            cpool_graph_release(gb);
            CHECK_OK(cpool_free(fx.pool, b.out, other));
        }
        CHECK_OK(cpool_free(fx.pool, a.out, fx.s));
        CHECK_OK(cpool_stream_synchronize(other));
        cpool_stream_destroy(other);
    }
}

/* Output first (packed once the pool guesses it: the graphs before it
 * kept theirs), then scratch, the output filled with value last. */
typedef struct packed_out {
    cpool_pool *pool;
    size_t out_bytes;
    unsigned char value;
    void *out;
} packed_out;

static cpool_status packed_out_fn(cpool_stream *s, void *ctx) {
    packed_out *a = ctx;
    void *scratch;
    cpool_status st = cpool_alloc(a->pool, a->out_bytes, s, &a->out);
    if (st != CPOOL_OK) return st;
    if ((st = cpool_alloc(a->pool, MiB, s, &scratch)) != CPOOL_OK) return st;
    if ((st = cpool_memset_async(s, scratch, 1, MiB)) != CPOOL_OK) return st;
    if ((st = cpool_free(a->pool, scratch, s)) != CPOOL_OK) return st;
    return cpool_memset_async(s, a->out, a->value, a->out_bytes);
}

/* A graph's launch waits on another stream; its output is freed there,
 * after the launch, and the graph released. The next capture must not be
 * given that output's memory before the launch ran: the launch would
 * write the new graph's output. Outputs of 64 KiB (packed) and 4 MiB. */
static void output_freed_behind_a_running_launch(cpool_device *dev) {
    static stream_pool fixtures[2];
    static gate before[2];
    const size_t sizes[2] = {64 * KiB, 4 * MiB};
    for (int k = 0; k < 2; k++) {
        REQUIRE(fixture_open(dev, NULL, &fixtures[k]));
        stream_pool fx = fixtures[k];
        cpool_stream *other;
        REQUIRE_OK(cpool_stream_create(dev, &other));
        packed_out first = {fx.pool, sizes[k], 0x10, NULL}, a = {fx.pool, sizes[k], 0xAA, NULL};
        packed_out b = {fx.pool, sizes[k], 0xBB, NULL};
        cpool_graph *g0 = NULL, *ga = NULL, *gb = NULL;
        REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, packed_out_fn, &first, &g0));
        REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, packed_out_fn, &a, &ga));
        REQUIRE_OK(cpool_launch_host(other, cb_gate, &before[k]));
        CHECK_OK(cpool_graph_launch(ga, other));
        CHECK_OK(cpool_free(fx.pool, a.out, other)); /* after the launch, on its stream */
        cpool_graph_release(ga);
        CHECK(wait_for_int(&before[k].entered, 1, WAIT_TIMEOUT_MS));
        CHECK_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, packed_out_fn, &b, &gb));
        if (gb) {
            CHECK_OK(cpool_graph_launch(gb, fx.s));
            CHECK_OK(cpool_stream_synchronize(fx.s));
        }
        astore(&before[k].open, 1); /* A's launch runs now */
        CHECK_OK(cpool_stream_synchronize(other));
        if (gb) {
            CHECK_BYTES(fx.s, b.out, b.out_bytes, 0xBB);
            cpool_graph_release(gb);
            CHECK_OK(cpool_free(fx.pool, b.out, fx.s));
        }
        cpool_graph_release(g0);
        CHECK_OK(cpool_free(fx.pool, first.out, fx.s));
        CHECK_OK(cpool_stream_synchronize(fx.s));
        cpool_stream_destroy(other);
    }
}

/* ---- graphs released while running ----------------------------------------- */

typedef struct scratch_only {
    cpool_pool *pool;
    size_t n;
} scratch_only;

static cpool_status scratch_only_fn(cpool_stream *s, void *ctx) {
    scratch_only *a = ctx;
    void *scratch;
    cpool_status st = cpool_alloc(a->pool, a->n, s, &scratch);
    if (st != CPOOL_OK) return st;
    if ((st = cpool_memset_async(s, scratch, 1, a->n)) != CPOOL_OK) return st;
    return cpool_free(a->pool, scratch, s);
}

static void released_running_graphs_share_again(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    scratch_only body = {fx.pool, 8 * MiB};
    static gate held;
    CHECK_OK(cpool_launch_host(fx.s, cb_gate, &held));
    for (int i = 0; i < 10; i++) {
        cpool_graph *g = NULL;
        REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, scratch_only_fn, &body, &g));
        CHECK_OK(cpool_graph_launch(g, fx.s));
        cpool_graph_release(g); /* its launch waits behind the gate */
    }
    astore(&held.open, 1);
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_wait_deferred();
    /* The device is idle: no arena needs pages apart any more. */
    CHECK_LE(graph_bytes(fx.pool), body.n);
    /* And the next graph finds them shared. */
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, scratch_only_fn, &body, &g));
    CHECK_LE(graph_bytes(fx.pool), body.n);
    cpool_graph_release(g);
}

/* ---- rounds of graphed calls ------------------------------------------------- */

typedef struct call_round {
    cpool_pool *pool;
    size_t out_n, scratch_n;
    void *out;
    void *eager[4]; /* the warm-up runs' outputs, for the loop to free */
    int eager_count;
    cpool_stream *branch; /* NULL: the output on the call's stream */
    cpool_event *fork, *join;
    int output_call; /* cpool_alloc_output */
} call_round;

static cpool_status call_round_fn(cpool_stream *s, void *ctx) {
    call_round *a = ctx;
    void *scratch;
    cpool_status st = cpool_alloc(a->pool, a->scratch_n, s, &scratch);
    if (st != CPOOL_OK) return st;
    if ((st = cpool_memset_async(s, scratch, 7, a->scratch_n)) != CPOOL_OK) return st;
    cpool_stream *os = s;
    if (a->branch) {
        if ((st = cpool_event_record(a->fork, s)) != CPOOL_OK) return st;
        if ((st = cpool_stream_wait_event(a->branch, a->fork)) != CPOOL_OK) return st;
        os = a->branch;
    }
    st = a->output_call ? cpool_alloc_output(a->pool, a->out_n, os, &a->out)
                        : cpool_alloc(a->pool, a->out_n, os, &a->out);
    if (st != CPOOL_OK) return st;
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    if (cpool_capture_status(s, &state) == CPOOL_OK && state == CPOOL_CAPTURE_NONE && a->eager_count < 4)
        a->eager[a->eager_count++] = a->out;
    if ((st = cpool_memset_async(os, a->out, 9, a->out_n)) != CPOOL_OK) return st;
    if (a->branch) {
        if ((st = cpool_event_record(a->join, a->branch)) != CPOOL_OK) return st;
        if ((st = cpool_stream_wait_event(s, a->join)) != CPOOL_OK) return st;
    }
    return cpool_free(a->pool, scratch, s);
}

/* One serving loop: `rounds` graphed calls, each launched, released, its
 * output read and freed; graph memory must stay where the first rounds put
 * it. */
/* The graph memory a serving loop of one style holds, round after round:
 * the most of its first half and of its second (which must be no more). */
typedef struct rounds_seen {
    uint64_t first_half, second_half;
} rounds_seen;

static rounds_seen serve_style(cpool_device *dev, int rounds, int warmup, int branch, int output_call, int busy,
                               int free_first) {
    rounds_seen seen = {0, 0};
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    if (!CHECK_OK(cpool_stream_create(dev, &s))) return seen;
    if (!CHECK_OK(cpool_pool_create(dev, NULL, &pool))) {
        cpool_stream_destroy(s);
        return seen;
    }
    call_round a = {pool, 100 * 1000, 1 * MiB, NULL, {NULL}, 0, NULL, NULL, NULL, output_call};
    if (branch) {
        CHECK_OK(cpool_stream_create(dev, &a.branch));
        CHECK_OK(cpool_event_create(dev, &a.fork));
        CHECK_OK(cpool_event_create(dev, &a.join));
    }
    for (int r = 0; r < rounds; r++) {
        int flag = 0;
        sleep_set slow = {1, &flag, 1};
        if (busy) CHECK_OK(cpool_launch_host(s, cb_sleep_set, &slow));
        cpool_graph *g = NULL;
        cpool_status st = cpool_graphed_call(s, pool, CPOOL_CAPTURE_GLOBAL, warmup, call_round_fn, &a, &g);
        CHECK_OK(st);
        if (st != CPOOL_OK) break;
        for (int i = 0; i < a.eager_count; i++) CHECK_OK(cpool_free(pool, a.eager[i], s));
        a.eager_count = 0;
        CHECK_OK(cpool_graph_launch(g, s));
        unsigned char first = 0;
        CHECK_OK(read_back(s, &first, a.out, 1));
        CHECK_EQ(first, 9);
        if (free_first) CHECK_OK(cpool_free(pool, a.out, s)); /* while its graph lives */
        cpool_graph_release(g);
        if (!free_first) CHECK_OK(cpool_free(pool, a.out, s));
        uint64_t now = graph_bytes(pool);
        uint64_t *half = r < rounds / 2 ? &seen.first_half : &seen.second_half;
        if (now > *half) *half = now;
    }
    CHECK_OK(cpool_stream_synchronize(s));
    if (branch) {
        CHECK_OK(cpool_stream_synchronize(a.branch));
        cpool_event_destroy(a.fork);
        cpool_event_destroy(a.join);
        cpool_stream_destroy(a.branch);
    }
    cpool_pool_release(pool);
    cpool_stream_destroy(s);
    return seen;
}

/* Every style of a serving loop (graphed call with or without a warm-up
 * run; output by cpool_alloc or cpool_alloc_output; on the call's stream
 * or a forked branch; queued work at the capture or none; output freed
 * before or after the graph's release), 80 rounds each: the second half
 * holds no more than the first, and never more than the bound: a page of
 * scratch, a packed page of outputs, a page per stream. */
static void every_style_stays_bounded(cpool_device *dev) {
    for (int v = 0; v < 32; v++) {
        int warmup = v & 1, branch = v >> 1 & 1, output_call = v >> 2 & 1, busy = v >> 3 & 1, free_first = v >> 4 & 1;
        rounds_seen seen = serve_style(dev, 80, warmup, branch, output_call, busy, free_first);
        uint64_t bound = (2 + 2 + 2 * (uint64_t)(1 + branch)) * MiB;
        if (getenv("ROUNDS_TRACE"))
            printf("  warm-up %d branch %d alloc_output %d busy %d freed first %d: %.0f then %.0f MiB\n", warmup,
                   branch, output_call, busy, free_first, (double)seen.first_half / MiB,
                   (double)seen.second_half / MiB);
        if (seen.second_half > seen.first_half || seen.second_half > bound || seen.first_half > bound)
            check_report_(__FILE__, __LINE__,
                          "warm-up %d, branch %d, alloc_output %d, busy %d, freed first %d: %llu then %llu bytes "
                          "(bound %llu)",
                          warmup, branch, output_call, busy, free_first, (unsigned long long)seen.first_half,
                          (unsigned long long)seen.second_half, (unsigned long long)bound);
    }
}

/* A loop that keeps the last graph a round longer: each round captures,
 * launches, frees its output while its graph lives, and releases the
 * previous round's graph. The freed outputs are the live graph's until its
 * release, then anyone's: a free block kept for the live graph must not
 * swallow its freed neighbours (204 MiB after 200 rounds of a 1 MiB output
 * once, a packed page more every round). */
static void previous_graph_released_late(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    scratch_to_out a = {fx.pool, 3 * MiB, 0x42, NULL, NULL};
    cpool_graph *prev = NULL;
    uint64_t first = 0, most = 0;
    for (int r = 0; r < 200; r++) {
        a.n = 3 * MiB;
        cpool_graph *g = NULL;
        CHECK_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, scratch_to_out_fn, &a, &g));
        if (!g) break;
        CHECK_OK(cpool_graph_launch(g, fx.s));
        CHECK_OK(cpool_stream_synchronize(fx.s));
        CHECK_OK(cpool_free(fx.pool, a.out, fx.s));
        cpool_graph_release(prev);
        prev = g;
        uint64_t now = graph_bytes(fx.pool);
        if (r < 20 && now > first) first = now;
        if (now > most) most = now;
    }
    cpool_graph_release(prev);
    CHECK_LE(most, first);
    /* The bound: 3 MiB of scratch and a 3 MiB output (its pages, which may
     * straddle three), and a page for the stream. */
    CHECK_LE(most, 12 * MiB);
}

static void serve_rounds(cpool_device *dev, int warmup, int branch, int output_call, int busy) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    call_round a = {fx.pool, 100 * 1000, 1 * MiB, NULL, {NULL}, 0, NULL, NULL, NULL, output_call};
    if (branch) {
        REQUIRE_OK(cpool_stream_create(dev, &a.branch));
        REQUIRE_OK(cpool_event_create(dev, &a.fork));
        REQUIRE_OK(cpool_event_create(dev, &a.join));
    }
    uint64_t after_warmup = 0, most = 0;
    const int rounds = 200;
    for (int r = 0; r < rounds; r++) {
        int flag = 0;
        sleep_set slow = {1, &flag, 1};
        if (busy) CHECK_OK(cpool_launch_host(fx.s, cb_sleep_set, &slow)); /* queued work at the capture */
        cpool_graph *g = NULL;
        cpool_status st = cpool_graphed_call(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, warmup, call_round_fn, &a, &g);
        CHECK_OK(st);
        if (st != CPOOL_OK) break;
        for (int i = 0; i < a.eager_count; i++) CHECK_OK(cpool_free(fx.pool, a.eager[i], fx.s));
        a.eager_count = 0;
        CHECK_OK(cpool_graph_launch(g, fx.s));
        cpool_graph_release(g);
        unsigned char first = 0; /* the caller reads its output: the stream's work is over */
        CHECK_OK(read_back(fx.s, &first, a.out, 1));
        CHECK_EQ(first, 9);
        CHECK_OK(cpool_free(fx.pool, a.out, fx.s));
        uint64_t now = graph_bytes(fx.pool);
        if (getenv("ROUNDS_TRACE")) printf("round %d: %llu\n", r, (unsigned long long)now);
        if (r == 4) after_warmup = now;
        if (now > most) most = now;
    }
    CHECK_OK(cpool_stream_synchronize(fx.s));
    /* Bound: the largest graph (scratch and output) and a page per stream. */
    CHECK_LE(most, after_warmup + 4 * MiB);
    CHECK_LE(most, 8 * MiB);
    if (branch) {
        CHECK_OK(cpool_stream_synchronize(a.branch));
        cpool_event_destroy(a.fork);
        cpool_event_destroy(a.join);
        cpool_stream_destroy(a.branch);
    }
}

static void graphed_call_rounds_with_queued_work(cpool_device *dev) { serve_rounds(dev, 1, 0, 0, 1); }
static void graphed_call_rounds(cpool_device *dev) { serve_rounds(dev, 1, 0, 0, 0); }
static void branch_output_rounds(cpool_device *dev) { serve_rounds(dev, 0, 1, 1, 0); }
static void branch_output_rounds_with_queued_work(cpool_device *dev) { serve_rounds(dev, 0, 1, 1, 1); }
static void branch_graphed_call_rounds(cpool_device *dev) { serve_rounds(dev, 1, 1, 0, 1); }

static const check_case cases[] = {
    CHECK_CASE(output_freed_behind_a_running_launch),
    CHECK_CASE(released_running_graph_keeps_its_pages),
    CHECK_CASE(released_running_graphs_share_again),
    CHECK_CASE(graphed_call_rounds),
    CHECK_CASE(graphed_call_rounds_with_queued_work),
    CHECK_CASE(branch_output_rounds),
    CHECK_CASE(branch_output_rounds_with_queued_work),
    CHECK_CASE(branch_graphed_call_rounds),
    CHECK_CASE(every_style_stays_bounded),
    CHECK_CASE(previous_graph_released_late),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
